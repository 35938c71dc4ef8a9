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

// Paged layouts: spans[3*s .. 3*s+3] = (buffer offset, logical offset, length) of piece s. Byte o of the transfer
// is byte o % 8 (little-endian) of word o / 8, so a piece carries the pattern of its logical offset wherever it sits
// (and a piece at the wrong place mismatches). One thread block per piece at a time; 8-byte stores where the buffer
// offset and the logical offset are both word-aligned, bytes otherwise (and for a piece's tail).
__device__ __forceinline__ unsigned char pattern_byte(u64 key, u64 o) {
    return (unsigned char)(splitmix64(key ^ (o >> 3)) >> (8 * (o & 7)));
}

extern "C" __global__ void fill_spans(unsigned char* __restrict__ buf, const u64* __restrict__ spans, u64 nspans,
                                      u64 seed, u64 rep) {
    const u64 key = seed ^ (rep << 40);
    for (u64 s = blockIdx.x; s < nspans; s += gridDim.x) {
        const u64 off = spans[3 * s], logical = spans[3 * s + 1], len = spans[3 * s + 2];
        u64 done = 0;
        if (((off | logical) & 7) == 0) {
            u64* w = (u64*)(buf + off);
            const u64 nw = len / 8, first = logical / 8;
            for (u64 i = threadIdx.x; i < nw; i += blockDim.x) w[i] = splitmix64(key ^ (first + i));
            done = nw * 8;
        }
        for (u64 b = done + threadIdx.x; b < len; b += blockDim.x) buf[off + b] = pattern_byte(key, logical + b);
    }
}

// counters[0] += mismatched bytes over every span.
extern "C" __global__ void verify_spans(const unsigned char* __restrict__ buf, const u64* __restrict__ spans,
                                        u64 nspans, u64 seed, u64 rep, u64* counters) {
    const u64 key = seed ^ (rep << 40);
    u64 bad = 0;
    for (u64 s = blockIdx.x; s < nspans; s += gridDim.x) {
        const u64 off = spans[3 * s], logical = spans[3 * s + 1], len = spans[3 * s + 2];
        u64 done = 0;
        if (((off | logical) & 7) == 0) {
            const u64* w = (const u64*)(buf + off);
            const u64 nw = len / 8, first = logical / 8;
            for (u64 i = threadIdx.x; i < nw; i += blockDim.x) {
                u64 x = w[i] ^ splitmix64(key ^ (first + i));
                if (x) {
#pragma unroll
                    for (int b = 0; b < 8; b++) bad += ((x >> (8 * b)) & 0xffULL) != 0;
                }
            }
            done = nw * 8;
        }
        for (u64 b = done + threadIdx.x; b < len; b += blockDim.x)
            bad += buf[off + b] != pattern_byte(key, logical + b);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) bad += __shfl_down_sync(0xffffffffu, bad, o);
    if ((threadIdx.x & 31) == 0 && bad) atomicAdd(&counters[0], bad);
}
