//! A replayed load's numbers: latency, service time and queue wait quantiles (HDR histograms, as wrk2 and
//! HdrHistogram report open-loop latency), offered against achieved rates, the driver's own schedule lag, SLO
//! attainment and link utilization; and the knee over a sweep of loads.

pub mod cluster;

use crate::run::replay::{Cutoff, LoadRun, RequestRecord, Scheduled};
use serde::{Deserialize, Serialize};

/// A load as a person reads it: `speed 4` (a trace's speed) or `2 req/s` (an arrival model's rate).
pub fn load_words(load: f64, unit: &str) -> String {
    match unit {
        "rate" => format!("{load} req/s"),
        _ => format!("{unit} {load}"),
    }
}

/// Quantiles of one per-request quantity, ms.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Quantiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
    pub mean: f64,
}

impl Quantiles {
    /// From an HDR histogram of the values in µs (1 µs to an hour, three significant digits); `None` when empty.
    pub fn of(values_ms: impl Iterator<Item = f64>) -> Option<Quantiles> {
        let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).expect("valid bounds");
        for v in values_ms {
            h.saturating_record((v * 1e3).round().max(1.0) as u64);
        }
        if h.is_empty() {
            return None;
        }
        let ms = |us: u64| us as f64 / 1e3;
        Some(Quantiles {
            p50: ms(h.value_at_quantile(0.5)),
            p90: ms(h.value_at_quantile(0.9)),
            p99: ms(h.value_at_quantile(0.99)),
            p999: ms(h.value_at_quantile(0.999)),
            max: ms(h.max()),
            mean: h.mean() / 1e3,
        })
    }
}

/// SLO attainment: the share of requests whose latency was within `--slo-ms`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Slo {
    pub ms: f64,
    pub attained: f64,
}

/// One load's summary, as the results file's `replay.loads[].summary` holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadSummary {
    /// Requests moved (after the warm-up ones, which are not part of the schedule).
    pub requests: u64,
    /// Requests of the schedule never started (the load was cut off).
    pub not_started: u64,
    pub offered_rps: Option<f64>,
    pub achieved_rps: Option<f64>,
    pub offered_gbps: Option<f64>,
    pub achieved_gbps: Option<f64>,
    pub bytes_moved: u64,
    /// Bytes a prefix-cache hit kept from moving.
    pub bytes_saved: u64,
    /// The latency the run reports (the section's `latency` says which): scheduled arrival → last byte landed,
    /// or layer-wise, prefill end → last byte landed.
    pub latency_ms: Option<Quantiles>,
    /// Layer-wise: scheduled arrival → last byte landed, the prefill included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arrival_latency_ms: Option<Quantiles>,
    /// First byte posted → last byte landed.
    pub service_ms: Option<Quantiles>,
    /// Scheduled arrival → first byte posted (layer-wise: → its session took it, its first layer may come later).
    pub queue_ms: Option<Quantiles>,
    /// How late the driver started requests that found their session idle: its own precision.
    pub schedule_lag_ms: Option<Quantiles>,
    /// Achieved GB/s ÷ the path's ceiling.
    pub utilization: Option<f64>,
    pub slo: Option<Slo>,
    /// The backlog passed --max-backlog: the path could not keep up with this load.
    pub saturated: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cutoff: Option<Cutoff>,
    /// `--verify`: mismatched bytes over every request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mismatched_bytes: Option<u64>,
    /// Paged: the decode side's pool over the load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<PoolSummary>,
}

/// A paged load's use of the decode side's pool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolSummary {
    /// The pool's blocks (`--pool-tokens` ÷ `--block-tokens`).
    pub blocks: u64,
    /// The most blocks held at once (by requests moving or decoding).
    pub high_water_blocks: u64,
    /// `high_water_blocks` ÷ `blocks`.
    pub high_water: f64,
    /// Requests that waited for blocks.
    pub waited: u64,
    /// Every request's wait for blocks, ms (part of its queue wait).
    pub wait_ms: Option<Quantiles>,
}

impl PoolSummary {
    /// The pool's summary over `recs`, the requests of a load that held at most `high_water_blocks` of `blocks`.
    pub fn of(recs: &[RequestRecord], blocks: u64, high_water_blocks: u64) -> PoolSummary {
        PoolSummary {
            blocks,
            high_water_blocks,
            high_water: if blocks == 0 { 0.0 } else { high_water_blocks as f64 / blocks as f64 },
            waited: recs.iter().filter(|r| r.pool_wait_ms.is_some_and(|w| w > 0.0)).count() as u64,
            wait_ms: Quantiles::of(recs.iter().filter_map(|r| r.pool_wait_ms)),
        }
    }
}

impl LoadSummary {
    /// The summary of `run`, a run of `schedule`; `ceiling_gbps` the path's, `slo_ms` the user's target.
    pub fn of(run: &LoadRun, schedule: &[Scheduled], ceiling_gbps: Option<f64>, slo_ms: Option<f64>) -> LoadSummary {
        let recs = &run.records;
        let span_s = schedule.last().map_or(0.0, |l| l.at_ms - schedule[0].at_ms) / 1e3;
        // Bytes are offered once they exist: at arrival, or layer-wise as the prefill computes them, the last at
        // the last prefill's end; a rate over the arrivals alone would call every layer-wise load saturated.
        let available_s = recs
            .iter()
            .filter_map(|r| r.prefill_end_ms)
            .map(|end| (end - schedule.first().map_or(0.0, |f| f.at_ms)) / 1e3)
            .fold(span_s, f64::max);
        let offered_bytes: u64 = schedule.iter().map(|r| r.bytes).sum();
        let per_s = |x: f64, s: f64| (s > 0.0).then(|| x / s);
        let bytes_moved: u64 = recs.iter().map(|r| r.bytes).sum();
        let wall_s = run.wall_ms / 1e3;
        let achieved_gbps = per_s(bytes_moved as f64 / 1e9, wall_s);
        let mismatched: Vec<u64> = recs.iter().filter_map(|r| r.mismatched_bytes).collect();
        LoadSummary {
            requests: recs.len() as u64,
            not_started: run.not_started,
            offered_rps: per_s(schedule.len().saturating_sub(1) as f64, span_s),
            achieved_rps: per_s(recs.len() as f64, wall_s),
            offered_gbps: per_s(offered_bytes as f64 / 1e9, available_s),
            achieved_gbps,
            bytes_moved,
            bytes_saved: recs.iter().map(|r| r.cached_bytes).sum(),
            latency_ms: Quantiles::of(recs.iter().map(RequestRecord::reported_latency_ms)),
            arrival_latency_ms: recs
                .iter()
                .any(|r| r.after_prefill_ms.is_some())
                .then(|| Quantiles::of(recs.iter().map(|r| r.latency_ms)))
                .flatten(),
            service_ms: Quantiles::of(recs.iter().map(|r| r.service_ms)),
            queue_ms: Quantiles::of(recs.iter().map(|r| r.queue_ms)),
            schedule_lag_ms: Quantiles::of(recs.iter().filter_map(|r| r.lag_ms)),
            utilization: achieved_gbps.zip(ceiling_gbps.filter(|c| *c > 0.0)).map(|(a, c)| a / c),
            slo: slo_ms.filter(|_| !recs.is_empty()).map(|ms| Slo {
                ms,
                attained: recs.iter().filter(|r| r.reported_latency_ms() <= ms).count() as f64 / recs.len() as f64,
            }),
            saturated: matches!(run.cutoff, Some(Cutoff::Backlog { .. })),
            cutoff: run.cutoff,
            mismatched_bytes: (!mismatched.is_empty()).then(|| mismatched.iter().sum()),
            pool: run.pool.map(|p| PoolSummary::of(recs, p.blocks, p.high_water_blocks)),
        }
    }
}

/// Where a sweep of loads turns: the lowest load at which p99 latency passes twice its value at the lowest load,
/// achieved throughput falls below 95% of offered, or the backlog cut the load off — whichever comes first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Knee {
    /// The load (speed or rate) where it turned.
    pub load: f64,
    pub why: String,
}

/// The knee over `loads` (load, summary), if any load shows one; loads in any order.
pub fn knee(loads: &[(f64, &LoadSummary)]) -> Option<Knee> {
    let mut sorted: Vec<&(f64, &LoadSummary)> = loads.iter().collect();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let base_p99 = sorted.first()?.1.latency_ms.map(|q| q.p99)?;
    sorted.iter().find_map(|(load, s)| {
        let why = if s.saturated {
            Some("the backlog passed --max-backlog".to_string())
        } else if let Some(p99) = s.latency_ms.map(|q| q.p99).filter(|p| *p > 2.0 * base_p99) {
            Some(format!("p99 {p99:.1} ms > 2 × {base_p99:.1} ms at the lowest load"))
        } else if let Some((a, o)) = s.achieved_gbps.zip(s.offered_gbps).filter(|(a, o)| *a < 0.95 * o) {
            Some(format!("achieved {a:.2} GB/s < 95% of the {o:.2} GB/s offered"))
        } else {
            None
        };
        why.map(|why| Knee { load: *load, why })
    })
}

/// Per-request rows as the CSV holds them (the record with its load).
#[derive(Debug, Clone, Serialize)]
pub struct RequestRow<'a> {
    pub load: f64,
    pub repeat: u32,
    #[serde(flatten)]
    pub request: &'a RequestRecord,
}

/// The path's ceiling that utilization divides by.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CeilingJson {
    pub gbps: f64,
    /// `measured` (reps of `size_bytes` before the replay, their median) or `given` (`--ceiling`).
    pub source: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
}

/// One run of one load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadJson {
    /// The speed (trace seconds per wall second) or rate (requests per second) of this load.
    pub load: f64,
    /// Which repetition of the load (0-based; loads interleave within a repetition).
    pub repeat: u32,
    pub summary: LoadSummary,
    pub requests: Vec<RequestRecord>,
    /// A cluster replay's requests by link and by rank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<cluster::LoadClusterJson>,
}

/// A load over all its repetitions: the summary of their requests pooled, which the knee is found on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PooledJson {
    pub load: f64,
    pub summary: LoadSummary,
    /// What a queueing simulation of the same schedule predicts from the path's ceiling (and a paged replay's
    /// pool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted: Option<PredictedJson>,
}

/// What a replay's predicted latency accounts for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PredictionBasis {
    /// Each request's bytes at the path's ceiling.
    #[serde(rename = "ceiling")]
    Ceiling,
    /// The ceiling, and the blocks of a paged replay's pool.
    #[serde(rename = "ceiling and pool")]
    CeilingAndPool,
}

impl PredictionBasis {
    /// What the prediction was made from, in words.
    pub fn words(self) -> &'static str {
        match self {
            PredictionBasis::Ceiling => "the ceiling alone",
            PredictionBasis::CeilingAndPool => "the ceiling and the pool",
        }
    }
}

/// A load's latency as `predict --trace` would estimate it, beside the measured one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PredictedJson {
    /// How: `ceiling` (each request's bytes at the ceiling's GB/s, first come first served over the sessions, no
    /// control round trips or driver lag: a replay should take at least this long), or `ceiling and pool` (a paged
    /// replay's: each request also takes its blocks of the modelled pool first, waiting for frees).
    pub basis: PredictionBasis,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Predicted ÷ measured.
    pub p50_ratio: f64,
    pub p99_ratio: f64,
}

/// The results file's `replay` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayJson {
    /// Where the requests came from and what they hold (the trace's or the model's summary, the prefix cache).
    pub workload: serde_json::Value,
    /// `speed` (trace) or `rate` (arrival model): what `load` counts.
    pub load_unit: String,
    /// What `latency_ms` measures.
    pub latency: LatencyFrom,
    pub max_inflight: u32,
    pub region_bytes: u64,
    pub max_backlog_s: f64,
    pub warmup_requests: u64,
    /// `--verify`: each request's service time includes filling and checking its pattern.
    pub verify_in_latency: bool,
    pub ceiling: Option<CeilingJson>,
    pub loads: Vec<LoadJson>,
    pub pooled: Vec<PooledJson>,
    pub knee: Option<Knee>,
    /// `--layerwise`: each request's layers moved as its prefill computed them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layerwise: Option<LayerwiseJson>,
    /// A cluster replay's ranks and routing (`kvxfer cluster --pattern replay`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<cluster::ClusterReplayJson>,
    /// `--layout paged`: the decode side's pool each request took its blocks from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<PoolJson>,
    /// `--verify`: requests that moved bytes the receiver reported no check of (its report carried no mismatch
    /// count), so the run is not verified in full; absent when every one was checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unchecked_requests: Option<u64>,
}

/// The replay section's `pool`: how a paged replay's pool was modelled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolJson {
    pub blocks: u64,
    pub block_tokens: u64,
    pub pool_tokens: u64,
    /// A request held its blocks this long per output token after its last byte landed.
    pub decode_ms_per_token: f64,
    /// KV bytes per token: a request's blocks are its bytes in tokens, in blocks (absent from older files, whose
    /// predictions then leave the pool out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_per_token: Option<u64>,
}

/// Which latency a replay reports as `latency_ms` (its summaries, SLO, knee and figures).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LatencyFrom {
    /// Scheduled arrival → last byte landed.
    #[serde(rename = "arrival_to_landed")]
    Arrival,
    /// Layer-wise: the prefill's end → last byte landed (at least 0): what disaggregation adds to TTFT.
    #[serde(rename = "prefill_end_to_landed")]
    PrefillEnd,
}

impl LatencyFrom {
    /// The latency in words, for tables and axis titles.
    pub fn words(self) -> &'static str {
        match self {
            LatencyFrom::Arrival => "scheduled arrival → last byte landed",
            LatencyFrom::PrefillEnd => "prefill end → last byte landed",
        }
    }

    /// An axis title's or column's name for it.
    pub fn label(self) -> &'static str {
        match self {
            LatencyFrom::Arrival => "latency",
            LatencyFrom::PrefillEnd => "latency after prefill",
        }
    }
}

/// The replay section's `layerwise`: how each request's layers became available.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayerwiseJson {
    /// The model's layers: each request moved in this many consecutive slices.
    pub layers: u64,
    /// `--prefill-tokens-per-s`: layer i of L was available at arrival + (i+1)/L × uncached tokens ÷ this.
    pub prefill_tokens_per_s: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(p99: f64, achieved: f64, offered: f64, saturated: bool) -> LoadSummary {
        let q = Quantiles { p50: p99 / 2.0, p90: p99, p99, p999: p99, max: p99, mean: p99 / 2.0 };
        LoadSummary {
            requests: 10,
            not_started: 0,
            offered_rps: None,
            achieved_rps: None,
            offered_gbps: Some(offered),
            achieved_gbps: Some(achieved),
            bytes_moved: 0,
            bytes_saved: 0,
            latency_ms: Some(q),
            arrival_latency_ms: None,
            service_ms: None,
            queue_ms: None,
            schedule_lag_ms: None,
            utilization: None,
            slo: None,
            saturated,
            cutoff: None,
            mismatched_bytes: None,
            pool: None,
        }
    }

    #[test]
    fn the_knee_is_the_lowest_load_that_doubles_p99_or_falls_behind() {
        let (a, b, c) =
            (summary(10.0, 1.0, 1.0, false), summary(15.0, 2.0, 2.0, false), summary(25.0, 4.0, 4.0, false));
        let k = knee(&[(4.0, &c), (1.0, &a), (2.0, &b)]).unwrap();
        assert_eq!(k.load, 4.0);
        assert!(k.why.starts_with("p99 25.0 ms"), "{}", k.why);
        let slow = summary(12.0, 1.5, 2.0, false);
        assert_eq!(knee(&[(1.0, &a), (2.0, &slow), (4.0, &c)]).unwrap().load, 2.0);
        let sat = summary(11.0, 2.0, 2.0, true);
        assert_eq!(knee(&[(1.0, &a), (2.0, &sat)]).unwrap().load, 2.0);
        assert_eq!(knee(&[(1.0, &a), (2.0, &b)]), None);
    }

    #[test]
    fn layer_wise_bytes_are_offered_until_the_last_prefill_ends() {
        let sched =
            |at_ms: f64| Scheduled { id: at_ms as u64, at_ms, bytes: 1_000_000_000, cached_bytes: 0, output_tokens: 0 };
        let schedule = [sched(0.0), sched(1000.0)];
        let rec = |s: &Scheduled, prefill_end_ms: Option<f64>, end_ms: f64| RequestRecord {
            id: s.id,
            scheduled_ms: s.at_ms,
            start_ms: s.at_ms,
            end_ms,
            queue_ms: 0.0,
            service_ms: end_ms - s.at_ms,
            latency_ms: end_ms - s.at_ms,
            bytes: s.bytes,
            cached_bytes: 0,
            pieces: 1,
            lane: 0,
            lag_ms: None,
            transfer_ms: 1.0,
            mismatched_bytes: None,
            prefill_end_ms,
            after_prefill_ms: prefill_end_ms.map(|p| end_ms - p),
            src: None,
            dst: None,
            pool_wait_ms: None,
            blocks: None,
        };
        let run = |p: [Option<f64>; 2], ends: [f64; 2]| LoadRun {
            records: vec![rec(&schedule[0], p[0], ends[0]), rec(&schedule[1], p[1], ends[1])],
            cutoff: None,
            not_started: 0,
            wall_ms: ends[1],
            pool: None,
        };
        // Arrivals 1 s apart: 2 GB offered over 1 s.
        let plain = LoadSummary::of(&run([None, None], [10.0, 1010.0]), &schedule, None, None);
        assert_eq!(plain.offered_gbps, Some(2.0));
        // The last request's prefill ends 3 s after it arrived: its bytes exist only then, so 2 GB over 4 s, and a
        // path that kept up (its last byte 2 ms after that) achieved about as much.
        let lw = LoadSummary::of(&run([Some(500.0), Some(4000.0)], [502.0, 4002.0]), &schedule, None, None);
        assert_eq!(lw.offered_gbps, Some(0.5));
        assert!(lw.achieved_gbps.unwrap() > 0.95 * 0.5, "{lw:?}");
    }

    #[test]
    fn quantiles_come_from_every_value() {
        let q = Quantiles::of((1..=1000).map(|i| i as f64)).unwrap();
        assert!((q.p50 - 500.0).abs() < 1.0 && (q.p99 - 990.0).abs() < 1.0 && (q.max - 1000.0).abs() < 1.0, "{q:?}");
        assert_eq!(Quantiles::of(std::iter::empty()), None);
    }
}
