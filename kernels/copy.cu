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

// Batched SM copy of scattered pieces (paged KV, --copy sm): one launch moves every piece of a transfer.
// table[3p] = source offset, table[3p+1] = destination offset, table[3p+2] = length, for p < n. Blocks take pieces
// in a grid-stride loop; 16-byte vectors when both ends are 16-byte aligned, bytes otherwise. Launched on the
// source GPU with a peer destination, this reads local HBM and pushes over NVLink with no staging buffer.
extern "C" __global__ void copy_pieces(unsigned char* __restrict__ dst, const unsigned char* __restrict__ src,
                                       const u64* __restrict__ table, u64 n) {
    for (u64 p = blockIdx.x; p < n; p += gridDim.x) {
        const unsigned char* s = src + table[3 * p];
        unsigned char* t = dst + table[3 * p + 1];
        const u64 len = table[3 * p + 2];
        u64 done = 0;
        if ((((u64)s | (u64)t) & 15) == 0) {
            const uint4* s4 = (const uint4*)s;
            uint4* t4 = (uint4*)t;
            const u64 n16 = len / 16;
            for (u64 i = threadIdx.x; i < n16; i += blockDim.x) t4[i] = s4[i];
            done = n16 * 16;
        }
        for (u64 b = done + threadIdx.x; b < len; b += blockDim.x) t[b] = s[b];
    }
}
