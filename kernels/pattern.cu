// The --verify pattern on the GPU: word i of a buffer (byte offset 8*i) holds
// splitmix64(seed ^ (rep << 40) ^ i), exactly as src/run/verify.rs computes it on the CPU.
// Compiled at run time with NVRTC; lengths are whole 8-byte words (the host handles a tail).
typedef unsigned long long u64;

__device__ __forceinline__ u64 splitmix64(u64 x) {
    x += 0x9E3779B97F4A7C15ULL;
    u64 z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

extern "C" __global__ void fill_pattern(u64* __restrict__ buf, u64 nwords, u64 seed, u64 rep) {
    const u64 key = seed ^ (rep << 40);
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < nwords; i += stride)
        buf[i] = splitmix64(key ^ i);
}

// counters[0] += mismatched bytes.
extern "C" __global__ void verify_pattern(const u64* __restrict__ buf, u64 nwords, u64 seed, u64 rep,
                                          u64* counters) {
    const u64 key = seed ^ (rep << 40);
    const u64 stride = (u64)gridDim.x * blockDim.x;
    u64 bad = 0;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < nwords; i += stride) {
        u64 x = buf[i] ^ splitmix64(key ^ i);
        if (x) {
#pragma unroll
            for (int b = 0; b < 8; b++) bad += ((x >> (8 * b)) & 0xffULL) != 0;
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) bad += __shfl_down_sync(0xffffffffu, bad, o);
    if ((threadIdx.x & 31) == 0 && bad) atomicAdd(&counters[0], bad);
}
