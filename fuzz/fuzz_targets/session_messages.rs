//! What an authenticated sender sends after its Config, as serve checks it before acting (`run::serve_check`): the
//! first line is the run (Config, or a latency run's PingPong) and must pass the receiver's own checks; each further
//! line is a message of that session. A RepStart (with a paged replay's block slots), a bidirectional run's Reverse
//! offer and a latency run's PingPongStart are checked as serve checks them; anything accepted stays inside the run:
//! the size within the receiver's buffer, every slot inside the pool and none twice, every destination piece of the
//! slots inside the buffer, a reverse region that holds the run, a ping-pong of the agreed case and exchanges. No
//! panic.
#![no_main]
use kvxfer::control::Msg;
use kvxfer::plan::{RunConfig, TransferPlan};
use kvxfer::run::receiver::validate_run;
use kvxfer::run::serve_check::{check_ping_pong_start, check_rep_start, check_reverse_offer};
use libfuzzer_sys::fuzz_target;

mod limits;

/// Slot plans larger than this are checked but not built (a plan of 16 Mi pieces is legal, and slow to fuzz).
const PLAN_PIECES: u64 = 1 << 14;

fuzz_target!(|data: &[u8]| {
    let mut lines = data.split(|b| *b == b'\n');
    let Some(Ok(first)) = lines.next().map(serde_json::from_slice::<Msg>) else { return };
    let (cfg, plan, bidir) = match first {
        Msg::Config { config, bidir } => (*config, None, bidir),
        Msg::PingPong { config, plan } => (*config, Some(plan), false),
        _ => return,
    };
    if validate_run(&cfg, bidir, &limits::serve_limits()).is_err() {
        return;
    }
    let buffer = cfg.buffer_bytes();
    for line in lines {
        let Ok(msg) = serde_json::from_slice::<Msg>(line) else { continue };
        match msg {
            Msg::RepStart { size_bytes, dst_slots, .. } => rep_start(&cfg, buffer, size_bytes, dst_slots.as_deref()),
            Msg::Reverse { offer } => {
                if check_reverse_offer(&cfg, &offer).is_ok() {
                    let offered = offer.get("region_len").and_then(|v| v.as_u64());
                    assert!(offered.is_none_or(|len| len >= buffer), "{offer} accepted for {buffer} bytes");
                }
            }
            Msg::PingPongStart { case, size_bytes, exchanges } => {
                let Some(plan) = &plan else { continue };
                if check_ping_pong_start(&cfg, plan, case, size_bytes, exchanges).is_ok() {
                    assert_eq!(cfg.cases[case].size_bytes, size_bytes);
                    assert_eq!(exchanges, plan.exchanges());
                }
            }
            _ => {}
        }
    }
});

fn rep_start(cfg: &RunConfig, buffer: u64, size_bytes: u64, slots: Option<&[u64]>) {
    let Ok(tokens) = check_rep_start(cfg, buffer, size_bytes, slots) else { return };
    assert!(size_bytes > 0 && size_bytes <= buffer, "{size_bytes} accepted for {buffer}");
    let (Some(tokens), Some(slots)) = (tokens, slots) else { return };
    let paged = cfg.paged.as_ref().expect("slots accepted only in a paged run");
    let pool = paged.pool_blocks();
    assert!(slots.iter().all(|&s| s < pool), "{slots:?} accepted for a pool of {pool}");
    let mut sorted = slots.to_vec();
    sorted.sort_unstable();
    assert!(sorted.windows(2).all(|w| w[0] != w[1]), "{slots:?} accepted with a repeat");
    if paged.pieces(tokens) <= PLAN_PIECES {
        // What the receiver verifies (and a placing transport writes) for these slots: all inside its buffer.
        let plan = TransferPlan::paged_with_slots(paged, tokens, slots, slots).paged.expect("a paged plan");
        for s in plan.dest_spans() {
            assert!(s.offset.checked_add(s.len).is_some_and(|end| end <= buffer), "{s:?} outside {buffer}");
        }
    }
}
