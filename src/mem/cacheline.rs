//! Writing back what the CPU just wrote. A `--verify` pattern fill leaves the source's cache lines dirty in the
//! CPU's caches; a device that then reads the buffer by DMA (a GPU copy engine, a NIC) must get each line out of
//! them, and is slower for it: on the H200 host (300 MiB L3), torch's pinned → GPU `copy_` of 96 MiB ran at 46.4
//! GB/s right after the CPU wrote the source, 52.0 once the lines were pushed out, and 52.6 untouched
//! (scripts/bench-h2d.sh, 2026-12-02). So a fill writes its lines back and evicts them before the timed transfer,
//! and a verified rep moves as fast as an unverified one.

/// The cache line size this writes back by (x86-64's; a smaller real line would only mean repeated flushes).
const LINE: usize = 64;

/// Below this, the write-back is not worth a thread.
const PER_THREAD_MIN: usize = 8 << 20;

/// Write back and evict the cache lines of `bytes` (which the caller may write, so no other thread or device is
/// using them). A no-op where the architecture has no user-level flush kvxfer knows.
pub fn write_back(bytes: &mut [u8]) {
    if bytes.is_empty() {
        return;
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(bytes.len() / PER_THREAD_MIN).max(1);
    if threads == 1 {
        // Inline: a paged fill writes back each of up to millions of small pieces, and a thread per piece cost
        // more than the flush (338,400 pieces of 16 KiB took minutes).
        flush(bytes);
        return;
    }
    let per = bytes.len().div_ceil(threads).next_multiple_of(LINE);
    std::thread::scope(|sc| {
        for chunk in bytes.chunks_mut(per) {
            sc.spawn(move || flush(chunk));
        }
    });
}

#[cfg(target_arch = "x86_64")]
fn flush(bytes: &mut [u8]) {
    if has_clflushopt() {
        for line in bytes.chunks(LINE) {
            // SAFETY: the CPU has CLFLUSHOPT (CPUID said so); `line` points into `bytes`, which this thread may
            // write; the instruction only writes the line back and changes no register or flag.
            unsafe { std::arch::asm!("clflushopt [{0}]", in(reg) line.as_ptr(), options(nostack, preserves_flags)) };
        }
        // SAFETY: SFENCE (SSE, every x86-64 CPU) orders the CLFLUSHOPTs before what follows.
        unsafe { std::arch::x86_64::_mm_sfence() };
    } else {
        for line in bytes.chunks(LINE) {
            // SAFETY: CLFLUSH is part of SSE2, which every x86-64 CPU has; `line` points into `bytes`.
            unsafe { std::arch::x86_64::_mm_clflush(line.as_ptr()) };
        }
        // SAFETY: MFENCE (SSE2) orders the flushes before what follows.
        unsafe { std::arch::x86_64::_mm_mfence() };
    }
}

/// CPUID leaf 7, EBX bit 23: CLFLUSHOPT, which flushes lines without ordering each against the others.
#[cfg(target_arch = "x86_64")]
fn has_clflushopt() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        let max = std::arch::x86_64::__cpuid(0).eax;
        max >= 7 && std::arch::x86_64::__cpuid_count(7, 0).ebx & (1 << 23) != 0
    })
}

#[cfg(not(target_arch = "x86_64"))]
fn flush(_bytes: &mut [u8]) {}

#[cfg(test)]
mod tests {
    #[test]
    fn writing_back_keeps_the_bytes() {
        let mut v: Vec<u8> = (0..(20 << 20)).map(|i| (i % 251) as u8).collect();
        super::write_back(&mut v[3..]);
        assert!(v.iter().enumerate().all(|(i, b)| *b == (i % 251) as u8));
        super::write_back(&mut []);
    }
}
