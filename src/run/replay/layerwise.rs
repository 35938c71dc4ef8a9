//! Layer-wise replay: a request's KV moves layer by layer as its prefill computes it, as vLLM, SGLang and Mooncake
//! pipeline it. Layer i of L is available at arrival + (i+1)/L × prefill, prefill being the request's uncached
//! tokens ÷ the prefill's tokens per second (cached tokens are not prefilled); with the contiguous layout layer i
//! is the i-th of L consecutive slices of the request's bytes. A slice moves once it is available and its session
//! is free, in reps of at most the region, each armed while the layer is still being computed so that the control
//! round trip stays off the transfer's path when the session keeps up; the layers already computed when the
//! session gets to them move together in one rep (an engine sends what is ready). The request ends when its last slice
//! landed; what it adds to the time to first token is that end less the prefill's end.

use super::{arm, move_bytes, sleep_until, Cutoff, Limits, Moved, RequestRecord, Scheduled, Shared};
use crate::run::sender::{ArmedRep, SenderSession};
use anyhow::Result;
use std::time::{Duration, Instant};

/// How each request's layers become available.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Layerwise {
    /// The model's layers: a request moves in this many consecutive slices.
    pub layers: u32,
    /// The prefill's speed, input tokens per second.
    pub tokens_per_s: f64,
    /// KV bytes per token: a request's uncached tokens are the bytes it moves ÷ this.
    pub bytes_per_token: u64,
}

impl Layerwise {
    /// How long the prefill of a request that moves `bytes` takes, ms: its uncached tokens ÷ the rate.
    pub fn prefill_ms(&self, bytes: u64) -> f64 {
        bytes as f64 / self.bytes_per_token.max(1) as f64 / self.tokens_per_s * 1e3
    }

    /// When layer `i` of a request that moves `bytes` is computed, ms after its arrival.
    pub fn available_ms(&self, bytes: u64, i: u32) -> f64 {
        self.prefill_ms(bytes) * f64::from(i + 1) / f64::from(self.layers.max(1))
    }

    /// Layer `i`'s share of a request's `bytes`: the i-th of `layers` consecutive slices (their sizes differ by
    /// at most a byte, and add up to `bytes`).
    pub fn slice(&self, bytes: u64, i: u32) -> u64 {
        let (b, l) = (u128::from(bytes), u128::from(self.layers.max(1)));
        (b * (u128::from(i) + 1) / l - b * u128::from(i) / l) as u64
    }
}

/// Move request `r` layer by layer over `session`; `None` when the load halted before it ended (a stop asked
/// while it waited for a layer leaves it unrecorded: a long prefill would otherwise hold the stop).
pub(super) fn serve_request(
    lane: u32,
    session: &mut SenderSession,
    seq: &mut u32,
    r: &Scheduled,
    shared: &Shared,
    limits: &Limits,
    lw: Layerwise,
) -> Result<Option<RequestRecord>> {
    let due = shared.t0 + Duration::from_secs_f64(r.at_ms / 1e3);
    let taken = Instant::now();
    let backlog = taken.saturating_duration_since(due);
    if backlog > limits.max_backlog {
        shared.halt_with(Cutoff::Backlog { at_request: r.id, backlog_s: backlog.as_secs_f64() });
        return Ok(None);
    }
    let mut first: Option<(Instant, Instant)> = None;
    let mut moved = Moved { pieces: 0, transfer_ms: 0.0, mismatched_bytes: None, landed: due.max(taken) };
    let ready_at = |i: u32| due + Duration::from_secs_f64(lw.available_ms(r.bytes, i) / 1e3);
    let mut i = 0;
    while i < lw.layers {
        // The layers computed by now go together, as an engine sends what is ready: one rep per layer would put a
        // control round trip per layer on a request whose prefill outruns them (a short one: 48 of them).
        let now = Instant::now();
        let ready = (i..lw.layers).take_while(|&j| ready_at(j) <= now).last();
        let (n, armed, next) = match ready {
            Some(last) => ((i..=last).map(|j| lw.slice(r.bytes, j)).sum::<u64>(), None, last + 1),
            None => {
                // Layer i, with those computed at the same moment (all of them when the prefill is instant).
                let last = (i..lw.layers).take_while(|&j| ready_at(j) <= ready_at(i)).last().unwrap_or(i);
                let n = (i..=last).map(|j| lw.slice(r.bytes, j)).sum::<u64>();
                if n == 0 {
                    i = last + 1;
                    continue;
                }
                let Some(armed) = arm_by(session, seq, n.min(shared.region), ready_at(i), limits.stop)? else {
                    shared.halt_with(Cutoff::Interrupted);
                    return Ok(None);
                };
                (n, Some(armed), last + 1)
            }
        };
        if n > 0 {
            first.get_or_insert((Instant::now(), ready_at(i)));
            let m = move_bytes(session, n, shared.region, seq, armed)?;
            moved.pieces += m.pieces;
            moved.transfer_ms += m.transfer_ms;
            moved.landed = m.landed;
            if let Some(bad) = m.mismatched_bytes {
                moved.mismatched_bytes = Some(moved.mismatched_bytes.unwrap_or(0) + bad);
            }
        }
        i = next;
    }
    let (posted, ready) = match first {
        Some(f) => f,
        // Nothing to prefill or move (its input was cached): it ends at its arrival.
        None => {
            if !sleep_until(due, limits.stop) {
                shared.halt_with(Cutoff::Interrupted);
                return Ok(None);
            }
            let now = Instant::now();
            moved.landed = now;
            (now, due)
        }
    };
    Ok(Some(record(lane, r, shared, lw, taken, (posted, ready), &moved)))
}

/// Get a rep of `n` bytes ready to go at `ready`: armed beforehand, so that its control round trip is off the
/// layer's path, but no earlier than a quarter of `--io-timeout` before it (the receiver gives up on bytes that
/// do not come). `None` when a stop was asked first (an armed rep's bytes are sent, so the session ends cleanly).
fn arm_by(
    session: &mut SenderSession,
    seq: &mut u32,
    n: u64,
    ready: Instant,
    stop: &(dyn Fn() -> bool + Sync),
) -> Result<Option<ArmedRep>> {
    let margin = session.io_timeout() / 4;
    if ready.saturating_duration_since(Instant::now()) > 2 * margin && !sleep_until(ready - margin, stop) {
        return Ok(None);
    }
    let armed = arm(session, n, seq)?;
    if !sleep_until(ready, stop) {
        session.go(armed)?;
        return Ok(None);
    }
    Ok(Some(armed))
}

/// The record of request `r`, taken by its session at `taken`, its first byte posted at `posted` (its first
/// layer computed at `ready`).
fn record(
    lane: u32,
    r: &Scheduled,
    shared: &Shared,
    lw: Layerwise,
    taken: Instant,
    (posted, ready): (Instant, Instant),
    moved: &Moved,
) -> RequestRecord {
    let (start_ms, end_ms) = (shared.ms(posted), shared.ms(moved.landed.max(posted)));
    let prefill_end_ms = r.at_ms + lw.prefill_ms(r.bytes);
    RequestRecord {
        queue_ms: (shared.ms(taken) - r.at_ms).max(0.0),
        pieces: moved.pieces,
        // Its session waited for its first layer: how late the driver woke for it.
        lag_ms: (taken < ready).then(|| (start_ms - shared.ms(ready)).max(0.0)),
        transfer_ms: moved.transfer_ms,
        mismatched_bytes: moved.mismatched_bytes,
        prefill_end_ms: Some(prefill_end_ms),
        after_prefill_ms: Some((end_ms - prefill_end_ms).max(0.0)),
        ..RequestRecord::timed(r, lane, (start_ms, end_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_are_consecutive_slices_that_add_up_and_come_as_prefill_goes() {
        let lw = Layerwise { layers: 48, tokens_per_s: 1000.0, bytes_per_token: 48 * 1024 };
        let bytes = 100 * 48 * 1024;
        assert!((lw.prefill_ms(bytes) - 100.0).abs() < 1e-9);
        assert!((lw.available_ms(bytes, 0) - 100.0 / 48.0).abs() < 1e-9);
        assert!((lw.available_ms(bytes, 47) - 100.0).abs() < 1e-9);
        assert!((0..48).all(|i| lw.slice(bytes, i) == 100 * 1024));
        let odd = Layerwise { layers: 3, ..lw };
        let s: Vec<u64> = (0..3).map(|i| odd.slice(10, i)).collect();
        assert_eq!(s, [3, 3, 4]);
        assert_eq!((0..48).map(|i| lw.slice(5, i)).sum::<u64>(), 5, "fewer bytes than layers still add up");
        assert!(lw.slice(5, 47) > 0, "the last layer always holds a byte");
    }
}
