//! The `--verify` pattern: each 8-byte word at byte offset `o` holds `splitmix64(seed ^ (rep << 40) ^ (o / 8))`
//! (little-endian; a tail shorter than 8 bytes holds the word's first bytes). Putting the rep in the pattern means a
//! stale buffer from the previous rep never passes, so the receiver needs no clearing between reps. The GPU kernels
//! in `kernels/` compute the same function.
//!
//! A paged transfer's pieces ([`Span`]) carry the pattern of their *logical* offset in the transfer (any byte
//! alignment), not of where they sit in the pool: byte `o` of the transfer is byte `o % 8` of word `o / 8`, so the
//! pieces gathered in logical order are exactly the contiguous pattern.

/// The standard splitmix64 finalizer.
pub fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn word(seed: u64, rep: u64, index: u64) -> u64 {
    splitmix64(seed ^ (rep << 40) ^ index)
}

/// Split work over the machine's cores: filling or checking 12 GiB on one core takes seconds.
fn chunks_per_thread(len: usize) -> usize {
    (len.div_ceil(threads()).div_ceil(8) * 8).max(1 << 20)
}

fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()).min(16)
}

/// Fill `buf` (the transfer from byte 0) with the pattern of `(seed, rep)`.
pub fn fill(buf: &mut [u8], seed: u64, rep: u64) {
    fill_from(buf, 0, seed, rep)
}

/// Fill `buf`, which holds the transfer's bytes from offset `base` on, with the pattern of `(seed, rep)`.
pub fn fill_from(buf: &mut [u8], base: u64, seed: u64, rep: u64) {
    let chunk = chunks_per_thread(buf.len());
    std::thread::scope(|s| {
        for (k, part) in buf.chunks_mut(chunk).enumerate() {
            s.spawn(move || fill_at(part, base + (k * chunk) as u64, seed, rep));
        }
    });
}

/// Byte `o` of the transfer: byte `o % 8` (little-endian) of word `o / 8`.
fn byte_at(seed: u64, rep: u64, o: u64) -> u8 {
    word(seed, rep, o / 8).to_le_bytes()[(o % 8) as usize]
}

/// Bytes before the first word boundary at or after logical offset `base` (for pieces that start mid-word).
fn head_len(base: u64, len: usize) -> usize {
    ((8 - base % 8) % 8).min(len as u64) as usize
}

fn fill_at(buf: &mut [u8], base: u64, seed: u64, rep: u64) {
    let (head, rest) = buf.split_at_mut(head_len(base, buf.len()));
    for (i, b) in head.iter_mut().enumerate() {
        *b = byte_at(seed, rep, base + i as u64);
    }
    let first = (base + head.len() as u64) / 8;
    let whole_words = (rest.len() / 8) as u64;
    let mut words = rest.chunks_exact_mut(8);
    for (i, w) in (&mut words).enumerate() {
        w.copy_from_slice(&word(seed, rep, first + i as u64).to_le_bytes());
    }
    let tail = words.into_remainder();
    if !tail.is_empty() {
        let n = tail.len();
        tail.copy_from_slice(&word(seed, rep, first + whole_words).to_le_bytes()[..n]);
    }
}

/// Memory the pattern is checked in. Host memory that a NIC, the kernel or a GPU may be writing implements it with
/// volatile loads (`mem::region`), so a check never holds a reference to bytes that can change under it; plain
/// slices implement it too (tests, and any memory Rust owns outright).
pub trait PatternMemory: Sync {
    /// How many bytes there are.
    fn byte_len(&self) -> u64;
    /// Copy the bytes at `[offset, offset + dst.len())` into `dst` (used for the few bytes around word boundaries).
    fn read_bytes(&self, offset: u64, dst: &mut [u8]);
    /// Call `f` with each of the `count` little-endian 8-byte words that start at `offset`, in order.
    fn for_each_word(&self, offset: u64, count: u64, f: impl FnMut(u64));
}

impl PatternMemory for [u8] {
    fn byte_len(&self) -> u64 {
        self.len() as u64
    }

    fn read_bytes(&self, offset: u64, dst: &mut [u8]) {
        dst.copy_from_slice(&self[offset as usize..offset as usize + dst.len()]);
    }

    fn for_each_word(&self, offset: u64, count: u64, f: impl FnMut(u64)) {
        let bytes = &self[offset as usize..(offset + count * 8) as usize];
        bytes.chunks_exact(8).map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes"))).for_each(f);
    }
}

/// Count the bytes of `buf` that differ from the pattern of `(seed, rep)`.
pub fn count_mismatches(buf: &[u8], seed: u64, rep: u64) -> u64 {
    count_mismatches_in(buf, 0, buf.len() as u64, seed, rep)
}

/// Count the bytes of `mem`'s `[offset, offset + len)` — the transfer's bytes at those offsets — that differ from
/// the pattern. The range must lie inside `mem` (panics otherwise).
pub fn count_mismatches_in<M: PatternMemory + ?Sized>(mem: &M, offset: u64, len: u64, seed: u64, rep: u64) -> u64 {
    assert!(offset.checked_add(len).is_some_and(|end| end <= mem.byte_len()), "check range outside the memory");
    let chunk = chunks_per_thread(len as usize) as u64;
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..len.div_ceil(chunk))
            .map(|k| {
                let at = offset + k * chunk;
                let n = chunk.min(offset + len - at);
                s.spawn(move || mismatches_in(mem, at, n, at, seed, rep))
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("verify thread")).sum()
    })
}

/// Mismatches of the `len` bytes of `mem` at `offset`, which hold the transfer's bytes from `logical` on: the bytes
/// before the first and after the last whole pattern word one by one, the words between as words.
fn mismatches_in<M: PatternMemory + ?Sized>(mem: &M, offset: u64, len: u64, logical: u64, seed: u64, rep: u64) -> u64 {
    let head = head_len(logical, len as usize) as u64;
    let words = (len - head) / 8;
    let tail = len - head - words * 8;
    let first = (logical + head) / 8;
    let mut bad = edge_mismatches(mem, offset, head, logical, seed, rep);
    let mut index = first;
    mem.for_each_word(offset + head, words, |got| {
        let diff = got ^ word(seed, rep, index);
        if diff != 0 {
            bad += diff.to_le_bytes().iter().filter(|&&b| b != 0).count() as u64;
        }
        index += 1;
    });
    let done = head + words * 8;
    bad + edge_mismatches(mem, offset + done, tail, logical + done, seed, rep)
}

/// Mismatches of fewer than 8 bytes at `offset` (transfer offset `logical`), compared byte by byte.
fn edge_mismatches<M: PatternMemory + ?Sized>(
    mem: &M,
    offset: u64,
    len: u64,
    logical: u64,
    seed: u64,
    rep: u64,
) -> u64 {
    let mut got = [0u8; 8];
    let got = &mut got[..len as usize];
    mem.read_bytes(offset, got);
    got.iter().enumerate().filter(|(i, &b)| b != byte_at(seed, rep, logical + *i as u64)).count() as u64
}

// ------------------------------------------------------------------------------------- scattered pieces

/// `len` bytes at `offset` of a buffer that hold the transfer's bytes at `logical` (a paged layout's piece): they
/// carry the pattern of their logical offset, wherever they sit, so a piece in the wrong place mismatches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub offset: u64,
    pub logical: u64,
    pub len: u64,
}

/// Check that every span lies inside a buffer of `len` bytes; with `disjoint`, also that no two overlap.
pub fn check_spans(spans: &[Span], len: u64, disjoint: bool) -> anyhow::Result<()> {
    if let Some(s) = spans.iter().find(|s| s.offset.checked_add(s.len).is_none_or(|end| end > len)) {
        anyhow::bail!(
            "a piece of {} bytes at offset {} falls outside the {len}-byte buffer (a planning bug)",
            s.len,
            s.offset
        );
    }
    if disjoint {
        let mut sorted: Vec<&Span> = spans.iter().collect();
        sorted.sort_by_key(|s| s.offset);
        if sorted.windows(2).any(|w| w[0].offset + w[0].len > w[1].offset) {
            anyhow::bail!("two pieces overlap in the buffer (a planning bug)");
        }
    }
    Ok(())
}

/// Fill every span of `buf` with the pattern of its logical offset. Spans must be inside `buf` and disjoint.
pub fn fill_spans(buf: &mut [u8], spans: &[Span], seed: u64, rep: u64) -> anyhow::Result<()> {
    check_spans(spans, buf.len() as u64, true)?;
    let mut order: Vec<&Span> = spans.iter().collect();
    order.sort_by_key(|s| s.offset);
    // Carve the buffer into the spans' disjoint slices, then share them out over the cores.
    let mut parts: Vec<(&mut [u8], u64)> = Vec::with_capacity(spans.len());
    let (mut rest, mut at) = (buf, 0u64);
    for s in order {
        let (_, from) = rest.split_at_mut((s.offset - at) as usize);
        let (piece, after) = from.split_at_mut(s.len as usize);
        parts.push((piece, s.logical));
        (rest, at) = (after, s.offset + s.len);
    }
    let per_thread = parts.len().div_ceil(threads()).max(1);
    std::thread::scope(|sc| {
        for group in parts.chunks_mut(per_thread) {
            sc.spawn(move || group.iter_mut().for_each(|(piece, logical)| fill_at(piece, *logical, seed, rep)));
        }
    });
    Ok(())
}

/// Count the bytes of the spans of `buf` that differ from the pattern of their logical offsets.
pub fn count_span_mismatches(buf: &[u8], spans: &[Span], seed: u64, rep: u64) -> anyhow::Result<u64> {
    count_span_mismatches_in(buf, spans, seed, rep)
}

/// Count the bytes of the spans of `mem` that differ from the pattern of their logical offsets.
pub fn count_span_mismatches_in<M: PatternMemory + ?Sized>(
    mem: &M,
    spans: &[Span],
    seed: u64,
    rep: u64,
) -> anyhow::Result<u64> {
    check_spans(spans, mem.byte_len(), false)?;
    let per_thread = spans.len().div_ceil(threads()).max(1);
    Ok(std::thread::scope(|sc| {
        let handles: Vec<_> = spans
            .chunks(per_thread)
            .map(|group| {
                sc.spawn(move || {
                    group.iter().map(|s| mismatches_in(mem, s.offset, s.len, s.logical, seed, rep)).sum::<u64>()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("verify thread")).sum()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_reference_values() {
        // First outputs of the reference splitmix64 generator seeded with 0 (state advanced by the golden gamma).
        assert_eq!(splitmix64(0), 0xE220_A839_7B1D_CDAF);
        assert_eq!(splitmix64(0x9E37_79B9_7F4A_7C15), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn fill_then_check_is_clean_and_detects_every_corruption() {
        let mut buf = vec![0u8; (3 << 20) + 5];
        fill(&mut buf, 42, 3);
        assert_eq!(count_mismatches(&buf, 42, 3), 0);
        // A different rep or seed mismatches almost everywhere.
        assert!(count_mismatches(&buf, 42, 4) > buf.len() as u64 / 2);
        assert!(count_mismatches(&buf, 43, 3) > buf.len() as u64 / 2);
        buf[0] ^= 1;
        buf[(1 << 20) + 3] ^= 0xff;
        buf[(3 << 20) + 4] ^= 0x10; // in the tail
        assert_eq!(count_mismatches(&buf, 42, 3), 3);
    }

    #[test]
    fn pattern_depends_only_on_offset_not_on_chunking() {
        let mut whole = vec![0u8; 4096 + 3];
        fill_at(&mut whole, 0, 7, 1);
        let mut part = vec![0u8; 2048 + 3];
        fill_at(&mut part, 2048, 7, 1);
        assert_eq!(&whole[2048..], &part[..]);
    }

    #[test]
    fn scattered_spans_at_any_alignment_carry_the_contiguous_pattern() {
        // The transfer's 301 bytes cut at odd logical offsets, placed backwards (and mid-word) in a larger buffer.
        let cuts = [0u64, 3, 11, 16, 17, 100, 301];
        let spans: Vec<Span> = cuts
            .windows(2)
            .enumerate()
            .map(|(i, w)| Span { offset: 1301 - 250 * i as u64, logical: w[0], len: w[1] - w[0] })
            .collect();
        let mut pool = vec![0u8; 1600];
        fill_spans(&mut pool, &spans, 9, 2).unwrap();
        assert_eq!(count_span_mismatches(&pool, &spans, 9, 2).unwrap(), 0);
        let mut contiguous = vec![0u8; 301];
        fill(&mut contiguous, 9, 2);
        let mut gathered = vec![0u8; 301];
        for s in &spans {
            gathered[s.logical as usize..(s.logical + s.len) as usize]
                .copy_from_slice(&pool[s.offset as usize..(s.offset + s.len) as usize]);
        }
        assert_eq!(gathered, contiguous, "pieces gathered in logical order are the contiguous pattern");
        // Two pieces of equal length exchanged: both mismatch.
        let mut swapped = spans.clone();
        swapped.swap(0, 1);
        (swapped[0].logical, swapped[1].logical) = (spans[0].logical, spans[1].logical);
        assert!(count_span_mismatches(&pool, &swapped, 9, 2).unwrap() > 0);
        pool[spans[3].offset as usize] ^= 4;
        assert_eq!(count_span_mismatches(&pool, &spans, 9, 2).unwrap(), 1);
    }

    #[test]
    fn spans_outside_the_buffer_or_overlapping_are_refused() {
        let mut buf = vec![0u8; 64];
        let outside = [Span { offset: 60, logical: 0, len: 8 }];
        assert!(fill_spans(&mut buf, &outside, 1, 1).is_err());
        assert!(count_span_mismatches(&buf, &outside, 1, 1).is_err());
        let overlap = [Span { offset: 0, logical: 0, len: 8 }, Span { offset: 7, logical: 8, len: 8 }];
        assert!(fill_spans(&mut buf, &overlap, 1, 1).is_err());
        let wrap = [Span { offset: u64::MAX, logical: 0, len: 2 }];
        assert!(count_span_mismatches(&buf, &wrap, 1, 1).is_err());
    }
}
