//! The `--verify` pattern: each 8-byte word at byte offset `o` holds `splitmix64(seed ^ (rep << 40) ^ (o / 8))`
//! (little-endian; a tail shorter than 8 bytes holds the word's first bytes). Putting the rep in the pattern means a
//! stale buffer from the previous rep never passes, so the receiver needs no clearing between reps. The GPU kernels
//! in `kernels/` compute the same function.

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
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(16);
    (len.div_ceil(threads).div_ceil(8) * 8).max(1 << 20)
}

/// Fill `buf` (which starts at byte offset `base` of the transfer) with the pattern of `(seed, rep)`.
pub fn fill(buf: &mut [u8], seed: u64, rep: u64) {
    let chunk = chunks_per_thread(buf.len());
    std::thread::scope(|s| {
        for (k, part) in buf.chunks_mut(chunk).enumerate() {
            s.spawn(move || fill_at(part, (k * chunk) as u64, seed, rep));
        }
    });
}

fn fill_at(buf: &mut [u8], base: u64, seed: u64, rep: u64) {
    debug_assert_eq!(base % 8, 0);
    let first = base / 8;
    let whole_words = (buf.len() / 8) as u64;
    let mut words = buf.chunks_exact_mut(8);
    for (i, w) in (&mut words).enumerate() {
        w.copy_from_slice(&word(seed, rep, first + i as u64).to_le_bytes());
    }
    let tail = words.into_remainder();
    if !tail.is_empty() {
        let n = tail.len();
        tail.copy_from_slice(&word(seed, rep, first + whole_words).to_le_bytes()[..n]);
    }
}

/// Count the bytes of `buf` that differ from the pattern of `(seed, rep)`.
pub fn count_mismatches(buf: &[u8], seed: u64, rep: u64) -> u64 {
    let chunk = chunks_per_thread(buf.len());
    std::thread::scope(|s| {
        let handles: Vec<_> = buf
            .chunks(chunk)
            .enumerate()
            .map(|(k, part)| s.spawn(move || mismatches_at(part, (k * chunk) as u64, seed, rep)))
            .collect();
        handles.into_iter().map(|h| h.join().expect("verify thread")).sum()
    })
}

fn mismatches_at(buf: &[u8], base: u64, seed: u64, rep: u64) -> u64 {
    let first = base / 8;
    let mut bad = 0u64;
    let mut words = buf.chunks_exact(8);
    for (i, w) in (&mut words).enumerate() {
        let got = u64::from_le_bytes(w.try_into().unwrap());
        let diff = got ^ word(seed, rep, first + i as u64);
        if diff != 0 {
            bad += diff.to_le_bytes().iter().filter(|&&b| b != 0).count() as u64;
        }
    }
    let tail = words.remainder();
    let want = word(seed, rep, first + (buf.len() / 8) as u64).to_le_bytes();
    bad + tail.iter().zip(want).filter(|(a, b)| **a != *b).count() as u64
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
}
