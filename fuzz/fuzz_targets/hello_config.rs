//! Hello and Config as the receiver checks them: the nonce and proof parsers of the handshake, and a sender's run
//! configuration against a receiver's limits and the plan limits, before anything is allocated.
#![no_main]
use kvxfer::control::{auth, Msg, Timeouts};
use kvxfer::run::receiver::{validate, ReceiverLimits};
use libfuzzer_sys::fuzz_target;
use std::time::Duration;

fuzz_target!(|data: &[u8]| {
    let Ok(msg) = serde_json::from_slice::<Msg>(data) else { return };
    match msg {
        Msg::Hello { nonce, .. } | Msg::Challenge { nonce, .. } => {
            let _ = auth::parse_nonce(&nonce);
        }
        Msg::Proof { proof } => {
            assert!(!auth::proof_matches(&[0u8; auth::PROOF_LEN], &proof) || proof.len() == 2 * auth::PROOF_LEN);
        }
        Msg::Config { config } => {
            let limits = ReceiverLimits {
                max_size: Some(1 << 30),
                max_streams: 64,
                timeouts: Timeouts { connect: Duration::from_secs(1), io: Duration::from_secs(1) },
                mem: kvxfer::mem::MemKind::Host,
                device: Default::default(),
                shares_process: false,
                gauge: None,
            };
            if validate(&config, &limits).is_ok() {
                // What passed is within the limits it was checked against.
                assert!(config.buffer_bytes() <= 1 << 30, "{}", config.buffer_bytes());
            }
        }
        _ => {}
    }
});
