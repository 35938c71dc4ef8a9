//! The TCP transport's scatter frame as the receiver checks it before touching its region: header (24 bytes), then
//! the entry table; anything accepted lies inside the region, adds up to the announced payload and does not overlap.
#![no_main]
use kvxfer::transport::tcp::{frame_entries, frame_header, HEADER_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < HEADER_LEN + 1 {
        return;
    }
    // The first byte picks the region size (1 B .. 2^63 B), the rest is what the sender wrote.
    let region_len = 1u64 << (data[0] % 64);
    let hdr: [u8; HEADER_LEN] = data[1..1 + HEADER_LEN].try_into().unwrap();
    let Ok(head) = frame_header(&hdr) else { return };
    let rest = &data[1 + HEADER_LEN..];
    let want = (head.count as usize * 16).min(rest.len());
    if let Ok(entries) = frame_entries(&head, &rest[..want], region_len) {
        let mut sorted = entries.clone();
        sorted.sort_unstable();
        let mut sum = 0u64;
        for (i, &(offset, len)) in sorted.iter().enumerate() {
            assert!(len > 0 && offset + len <= region_len);
            if i > 0 {
                assert!(sorted[i - 1].0 + sorted[i - 1].1 <= offset, "overlap accepted");
            }
            sum += len;
        }
        assert_eq!(sum, head.total);
    }
});
