//! What the receiver takes on an authenticated sender's word after its Config, checked before it acts: each rep's
//! RepStart (its size, and the block slots a paged replay names), a bidirectional run's Reverse offer (the region the
//! receiver will write into on the sender's host), and a latency run's PingPongStart. Each `Err` says what the
//! message asked, to follow "the sender's MESSAGE"; nothing is allocated, armed or sent before it passed. The checks
//! are these functions and nothing else, so the fuzz targets (`fuzz/fuzz_targets/session_messages.rs`) exercise what
//! serve runs.

use crate::plan::latency::LatencyPlan;
use crate::plan::RunConfig;
use crate::transport::registry;

/// A RepStart against the run: `size_bytes` within the agreed buffer of `buffer_len` bytes (which is what the target
/// arms, and what a READ target reads into), and block slots (`dst_slots`) only in a paged run whose receiver places
/// the pieces itself (a pulling target plans its reads from the case), then one per block of the size, each inside
/// the pool and none twice. Returns the tokens the slots place, when slots were named.
pub fn check_rep_start(
    cfg: &RunConfig,
    buffer_len: u64,
    size_bytes: u64,
    dst_slots: Option<&[u64]>,
) -> Result<Option<u64>, String> {
    if size_bytes == 0 || size_bytes > buffer_len {
        return Err(format!("asks for {size_bytes} bytes, outside the agreed buffer of {buffer_len} bytes"));
    }
    let Some(slots) = dst_slots else { return Ok(None) };
    let Some(paged) = &cfg.paged else {
        return Err("names block slots, but the run's layout is contiguous".into());
    };
    if registry::get(cfg.transport.kind()).pulls(&cfg.transport) {
        return Err("names block slots, which a receiver that pulls cannot place yet".into());
    }
    paged.check_slots(size_bytes, slots).map(Some).map_err(|e| format!("{e:#}"))
}

/// A bidirectional run's Reverse offer: the region on the sender's host it names (where the transport's offer says)
/// must hold the run's largest transfer, which is what the receiver writes there; an offer that names none is the
/// transport's own to refuse when it connects.
pub fn check_reverse_offer(cfg: &RunConfig, offer: &serde_json::Value) -> Result<(), String> {
    let offered = registry::get(cfg.transport.kind()).offered_region(offer);
    super::peer_check::check_region(offered, cfg.buffer_bytes())
}

/// A latency run's PingPongStart: a case of the agreed plan at that case's size, and the plan's number of exchanges.
pub fn check_ping_pong_start(
    cfg: &RunConfig,
    plan: &LatencyPlan,
    case: usize,
    size_bytes: u64,
    exchanges: u64,
) -> Result<(), String> {
    if cfg.cases.get(case).map(|c| c.size_bytes) != Some(size_bytes) {
        return Err(format!("names case {case} of {size_bytes} bytes, which is not in the agreed plan"));
    }
    if exchanges != plan.exchanges() {
        return Err(format!("asks for {exchanges} exchanges, the agreed plan for {}", plan.exchanges()));
    }
    Ok(())
}
