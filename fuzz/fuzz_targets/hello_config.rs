//! Hello and Config as the receiver checks them: the nonce and proof parsers of the handshake, and a sender's run
//! configuration (one way or both, `--bidir`) against a receiver's limits and the plan limits, before anything is
//! allocated.
#![no_main]
use kvxfer::control::{auth, Msg};
use kvxfer::run::receiver::validate_run;
use libfuzzer_sys::fuzz_target;

mod limits;

fuzz_target!(|data: &[u8]| {
    let Ok(msg) = serde_json::from_slice::<Msg>(data) else { return };
    match msg {
        Msg::Hello { nonce, .. } | Msg::Challenge { nonce, .. } => {
            let _ = auth::parse_nonce(&nonce);
        }
        Msg::Proof { proof } => {
            assert!(!auth::proof_matches(&[0u8; auth::PROOF_LEN], &proof) || proof.len() == 2 * auth::PROOF_LEN);
        }
        Msg::Config { config, bidir } => {
            if validate_run(&config, bidir, &limits::serve_limits()).is_ok() {
                // What passed is within the limits it was checked against: both buffers under --bidir.
                let held = config.buffer_bytes().saturating_mul(if bidir { 2 } else { 1 });
                assert!(held <= limits::MAX_SIZE, "{} (bidir: {bidir})", config.buffer_bytes());
            }
        }
        _ => {}
    }
});
