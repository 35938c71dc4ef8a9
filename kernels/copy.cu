// SM copy (--copy sm): 16-byte vectorized grid-stride copy with 4 independent loads in flight per thread.
// Launched on the source GPU with a peer destination pointer, this pushes over NVLink.
typedef unsigned long long u64;

extern "C" __global__ void copy_v16(uint4* __restrict__ dst, const uint4* __restrict__ src, u64 n16) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n16; i += 4 * stride) {
        uint4 a = src[i];
        uint4 b = src[i + stride];
        uint4 c = src[i + 2 * stride];
        uint4 d = src[i + 3 * stride];
        dst[i] = a;
        dst[i + stride] = b;
        dst[i + 2 * stride] = c;
        dst[i + 3 * stride] = d;
    }
    for (; i < n16; i += stride) dst[i] = src[i];
}

// Byte tail (< 16 bytes or unaligned pieces).
extern "C" __global__ void copy_bytes(unsigned char* __restrict__ dst, const unsigned char* __restrict__ src, u64 n) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) dst[i] = src[i];
}
