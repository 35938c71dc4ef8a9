//! Rank 0's reading of a new connection's Join (`kvxfer::cluster::decode_join`, the decoder the coordinator runs
//! after every read of a connection that has not authenticated), on bytes a stranger could send, arriving in any
//! pieces: no panic, nothing allocated past the Join limit, an incomplete Join always asks for more than it has,
//! and any peer text a refusal carries is escaped for a log line.
#![no_main]
use kvxfer::cluster::{decode_join, JoinDecode, NotAJoin, MAX_JOIN_FRAME};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Byte by byte, as a trickler sends it: every prefix is read the same way as the whole.
    let mut last_wanted = 0;
    for end in 0..=data.len().min(4 + MAX_JOIN_FRAME) {
        match decode_join(&data[..end]) {
            JoinDecode::Incomplete { wanted } => {
                assert!(wanted > end && wanted <= 4 + MAX_JOIN_FRAME, "{wanted} at {end}");
                assert!(wanted >= last_wanted);
                last_wanted = wanted;
            }
            JoinDecode::Join(join) => {
                assert!(end == last_wanted, "a Join is whole exactly where its length says");
                let _ = (join.rank, join.world_size, join.host.len());
                return;
            }
            JoinDecode::Refused(why) => {
                if let NotAJoin::Garbled(text) = &why {
                    assert!(!text.chars().any(char::is_control), "{text:?}");
                }
                assert!(!why.to_string().contains('\n'));
                return;
            }
        }
    }
});
