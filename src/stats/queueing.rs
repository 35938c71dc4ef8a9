//! A replay predicted without moving a byte: a discrete-event simulation of the request stream over a measured
//! time-vs-size curve. Each request's service time is its bytes' transfer time read off the curve (log-log between
//! measured sizes, as `predict` reads it; above the largest at the ceiling bandwidth, since a request that large
//! is bandwidth-bound), the requests queue first come first served for `servers` sessions, and latency counts from
//! the scheduled arrival, as the replay's driver counts it. A paged replay's pool is simulated by the driver's own
//! model of it (`PoolModel`): a request takes its blocks in arrival order once its session is free, waits for frees
//! when too few are, and holds them until its decode would end. What it leaves out: the control round trips between
//! a request's pieces and the driver's own lag, so a measured replay's latency is the prediction's or more.

use super::interpolate::{log_log, Basis};
use super::replay::LoadSummary;
use crate::run::replay::{LoadRun, PoolModel, PoolUse, RequestRecord, Scheduled};
use serde::{Deserialize, Serialize};

/// A measured time-vs-size curve: (bytes, p50 transfer ms) at distinct positive sizes.
#[derive(Debug, Clone, PartialEq)]
pub struct Curve {
    points: Vec<(f64, f64)>,
}

impl Curve {
    /// The curve through `points` (bytes, ms), keeping the positive ones; None when none is.
    pub fn new(points: &[(f64, f64)]) -> Option<Curve> {
        let mut points: Vec<(f64, f64)> = points.iter().copied().filter(|(s, t)| *s > 0.0 && *t > 0.0).collect();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        (!points.is_empty()).then_some(Curve { points })
    }

    /// The best bandwidth any measured size reached, GB/s: what requests above the curve are extrapolated at.
    pub fn ceiling_gbps(&self) -> f64 {
        self.points.iter().map(|(s, t)| s / t / 1e6).fold(0.0, f64::max)
    }

    /// The largest measured size, bytes.
    pub fn largest(&self) -> u64 {
        self.points.last().map_or(0, |p| p.0 as u64)
    }

    /// How long `bytes` take, ms, and where the number comes from. Zero bytes (a whole prompt cached) take no
    /// time; above the largest measured size, its time plus the rest at the ceiling bandwidth (continuous at the
    /// last point, and never the steeper-than-linear growth a noisy last segment would extend).
    pub fn service_ms(&self, bytes: u64) -> (f64, Basis) {
        if bytes == 0 {
            return (0.0, Basis::Measured);
        }
        let (last_s, last_t) = *self.points.last().expect("a curve has a point");
        let size = bytes as f64;
        if size > last_s {
            return (last_t + (size - last_s) / (self.ceiling_gbps() * 1e6), Basis::ExtrapolatedAbove);
        }
        log_log(&self.points, size).expect("a curve has a point")
    }
}

/// One load's prediction: the summary a replay of it would write, and how many requests lay off the curve.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PredictedLoad {
    pub load: f64,
    pub summary: LoadSummary,
    /// Requests larger than the largest measured size (extrapolated at the ceiling bandwidth).
    pub above_range: u64,
    /// Requests smaller than the smallest measured size (the first segment's slope carried on).
    pub below_range: u64,
}

/// A paged replay's pool as the simulation takes it: `blocks` of `block_tokens` tokens of `bytes_per_token` bytes,
/// each request holding its blocks `decode_ms_per_token` × its output tokens after its last byte landed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimPool {
    pub blocks: u64,
    pub block_tokens: u64,
    pub bytes_per_token: u64,
    pub decode_ms_per_token: f64,
}

/// The stream `schedule` (by arrival) served first come first served by `servers` sessions, each request taking
/// `service_ms(bytes)`: the records a replay would have written, without its schedule lag.
pub fn simulate(schedule: &[Scheduled], servers: u32, service_ms: impl Fn(u64) -> f64) -> LoadRun {
    simulate_pooled(schedule, servers, service_ms, None)
}

/// [`simulate`], each request first taking its blocks of `pool` (when paged).
pub fn simulate_pooled(
    schedule: &[Scheduled],
    servers: u32,
    service_ms: impl Fn(u64) -> f64,
    pool: Option<SimPool>,
) -> LoadRun {
    let mut free_at = vec![0.0f64; servers.max(1) as usize];
    let mut model = pool.map(|p| PoolModel::new((0..p.blocks).collect()));
    // Blocks go in arrival order: no request takes its blocks before the one ahead of it has.
    let mut last_take = 0.0f64;
    let records: Vec<RequestRecord> = schedule
        .iter()
        .map(|r| {
            // FIFO: the next request in arrival order takes whichever session frees first.
            let (lane, free) = free_at.iter().copied().enumerate().min_by(|a, b| a.1.total_cmp(&b.1)).expect("≥ 1");
            let ready = free.max(r.at_ms);
            let (start, held) = match (pool, model.as_mut()) {
                (Some(p), Some(m)) => {
                    let need = (r.bytes / p.bytes_per_token.max(1)).div_ceil(p.block_tokens.max(1));
                    let (start, slots) = take_blocks(m, need, ready.max(last_take));
                    last_take = start;
                    (start, Some((need, slots, p.decode_ms_per_token * r.output_tokens as f64)))
                }
                _ => (ready, None),
            };
            let service = service_ms(r.bytes);
            let end = start + service;
            free_at[lane] = end;
            let mut rec = RequestRecord {
                pieces: u32::from(r.bytes > 0),
                transfer_ms: service,
                ..RequestRecord::timed(r, lane as u32, (start, end))
            };
            if let (Some((need, slots, hold_ms)), Some(m)) = (held, model.as_mut()) {
                m.free_at(slots, end + hold_ms);
                (rec.pool_wait_ms, rec.blocks) = (Some(start - ready), Some(need));
            }
            rec
        })
        .collect();
    let wall_ms = records.iter().map(|r| r.end_ms).fold(0.0, f64::max);
    let pool = pool.zip(model).map(|(p, m)| PoolUse { blocks: p.blocks, high_water_blocks: m.high_water() });
    LoadRun { records, cutoff: None, not_started: 0, wall_ms, pool }
}

/// Take `need` blocks at `ready` ms or, when too few are free, at the first scheduled free after which enough are:
/// (when, the slots). A request larger than the whole pool (a replay refuses it before the run) takes none.
fn take_blocks(m: &mut PoolModel, need: u64, ready: f64) -> (f64, Vec<u64>) {
    let mut t = ready;
    loop {
        if let Some(slots) = m.take(need, t) {
            return (t, slots);
        }
        match m.next_due_ms() {
            Some(next) => t = t.max(next),
            None => return (t, Vec::new()),
        }
    }
}

/// Each load's predicted summary: `schedules` are (load, its schedule by arrival), `inflight` the sessions. A
/// replay sets these beside its measured pooled summaries (predicted ÷ measured p50 and p99) with the same loads
/// and schedules and its `--max-inflight`.
pub fn predict_loads(curve: &Curve, schedules: &[(f64, Vec<Scheduled>)], inflight: u32) -> Vec<PredictedLoad> {
    schedules
        .iter()
        .map(|(load, schedule)| {
            let basis: Vec<Basis> =
                schedule.iter().filter(|r| r.bytes > 0).map(|r| curve.service_ms(r.bytes).1).collect();
            let run = simulate(schedule, inflight, |b| curve.service_ms(b).0);
            PredictedLoad {
                load: *load,
                summary: LoadSummary::of(&run, schedule, Some(curve.ceiling_gbps()), None),
                above_range: basis.iter().filter(|b| **b == Basis::ExtrapolatedAbove).count() as u64,
                below_range: basis.iter().filter(|b| **b == Basis::ExtrapolatedBelow).count() as u64,
            }
        })
        .collect()
}

#[cfg(test)]
#[path = "queueing_tests.rs"]
mod tests;
