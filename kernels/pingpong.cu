// The GPU end of `kvxfer latency --transport cuda`: one persistent kernel answers every message of the host's
// ping-pong, polling mapped pinned host memory instead of being launched per message (a launch alone costs more
// than the exchange it would time).
//
// hdr (mapped host memory): hdr[0] the host's word (message count, never 0 again once sent; PP_STOP ends the
// kernel), hdr[1] the message's size, hdr[16] the answer word (the count answered), a GPU cache line away.
// Block 0's thread 0 alone polls hdr[0] across PCIe and relays the message to the other blocks through device
// memory (relay[0]: count and size packed in one word, so that a block never pairs one message's count with
// another's size; relay[1]: the full count). Each block the size needs copies its slice of the message from the
// mapped ping buffer into device memory (`landing`, where the message lands), then from there into the mapped
// pong buffer; the last block to finish writes the answer word.
//
// Ordering: the host writes the payload and size, then its word with a release store; block 0 reads the word and
// fences (__threadfence_system) before reading size and payload. Every thread fences its answer bytes before its
// block counts itself done, and the last block fences again before the answer word, which the host reads with
// an acquire load: once it sees the word, the whole answer is there. The ping buffer is read with ld.cv, never
// from a cache or the read-only path, since the host rewrites it between messages.
typedef unsigned long long u64;
#define PP_STOP 0xffffffffffffffffULL

// One block's copy of `len` bytes (16-byte vectors, then the tail). `fresh`: load with ld.cv, fetched again on every
// message rather than from a cache line an earlier message left (the host rewrites the ping buffer in place).
template <bool fresh>
__device__ __forceinline__ void pp_copy(unsigned char* dst, const unsigned char* src, u64 len) {
    const u64 n16 = len / 16;
    uint4* d4 = (uint4*)dst;
    const uint4* s4 = (const uint4*)src;
    for (u64 i = threadIdx.x; i < n16; i += blockDim.x) d4[i] = fresh ? __ldcv(s4 + i) : s4[i];
    for (u64 b = n16 * 16 + threadIdx.x; b < len; b += blockDim.x) dst[b] = fresh ? __ldcv(src + b) : src[b];
}

// chunk: bytes per block, a multiple of 16; the host sizes it so that no message needs more blocks than the grid.
extern "C" __global__ void pingpong_responder(volatile u64* hdr, const unsigned char* ping, unsigned char* pong,
                                              volatile u64* relay, unsigned int* arrived, unsigned char* landing,
                                              u64 chunk) {
    __shared__ u64 shared_go;
    u64 last = 0;  // thread 0's: the last word seen (block 0: the host's; others: the relay's)
    for (;;) {
        if (threadIdx.x == 0) {
            u64 go;
            if (blockIdx.x == 0) {
                u64 w;
                while ((w = hdr[0]) == last) {
                }
                __threadfence_system();
                last = w;
                go = w == PP_STOP ? PP_STOP : ((w & 0xffffffffULL) << 32) | hdr[1];
                relay[1] = w;
                __threadfence();
                relay[0] = go;
            } else {
                while ((go = relay[0]) == last) {
                }
                __threadfence_system();
                last = go;
            }
            shared_go = go;
        }
        __syncthreads();
        const u64 go = shared_go;
        if (go == PP_STOP) return;
        const u64 size = go & 0xffffffffULL;
        const u64 parts = (size + chunk - 1) / chunk;
        if (blockIdx.x < parts) {
            const u64 at = (u64)blockIdx.x * chunk;
            const u64 len = size - at < chunk ? size - at : chunk;
            pp_copy<true>(landing + at, ping + at, len);
            __syncthreads();  // the answer is read back from device memory, not forwarded in registers
            pp_copy<false>(pong + at, landing + at, len);
            __threadfence_system();
            __syncthreads();
            if (threadIdx.x == 0 && atomicInc(arrived, (unsigned int)(parts - 1)) == parts - 1) {
                __threadfence_system();
                hdr[16] = relay[1];
            }
        }
        __syncthreads();  // shared_go is rewritten only once every thread has read it
    }
}
