//! The numbers of a cluster run beyond each flow's own: the aggregate of flows that ran at once (bytes of all of
//! them over the slowest one's time), and links that look wrong next to the others.

use super::{CaseResult, RateSummary, Summary};
use crate::plan::sizes::format_size;
use serde::{Deserialize, Serialize};

/// A link is an outlier when its p50 is below this fraction of the median p50 of all links at that size.
pub const OUTLIER_FRACTION: f64 = 0.8;

/// `cluster` in the results file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClusterJson {
    pub pattern: crate::cluster::Pattern,
    pub launcher: crate::cluster::Launcher,
    pub world_size: usize,
    /// Every rank as a flow's end would name it, in rank order.
    pub ranks: Vec<crate::cluster::Endpoint>,
    pub steps_total: usize,
    /// Steps whose flows are all in `cases` (the file is rewritten after each).
    pub steps_done: usize,
    /// Per step of flows that ran at once (every pattern but `pairs` and `alone`), per size.
    #[serde(default)]
    pub aggregates: Vec<StepAggregate>,
}

/// One concurrent step's aggregate at one size (`cluster.aggregates[]` in the results file).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepAggregate {
    /// 1-based, as the cases' `step`.
    pub step: usize,
    pub size_bytes: u64,
    pub flows: usize,
    /// `bidir`: the two ranks whose flows (one each way) this aggregate is over; absent for the whole step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pair: Option<[usize; 2]>,
    /// Bytes moved by all flows in one rep.
    pub bytes: u64,
    /// Per rep i: the slowest flow's transfer_ms of its rep i.
    pub slowest_transfer_ms: Summary,
    /// Per rep i: `bytes` over the slowest flow's rep-i time, in GB/s.
    pub gbps: RateSummary,
}

impl StepAggregate {
    /// The aggregate of the flows of one step at one size (each flow's reps paired by index; the flows started
    /// together at a barrier and each ran its reps back to back). None when a flow has no measured rep.
    pub fn of(step: usize, flows: &[&CaseResult]) -> Option<StepAggregate> {
        let first = flows.first()?;
        let reps = flows.iter().map(|c| c.reps.len()).min().filter(|n| *n > 0)?;
        let bytes: u64 = flows.iter().map(|c| c.size_bytes).sum();
        let slowest: Vec<f64> =
            (0..reps).map(|i| flows.iter().map(|c| c.reps[i].transfer_ms).fold(0.0, f64::max)).collect();
        let gbps: Vec<f64> = slowest.iter().map(|ms| crate::units::gbps(bytes, *ms)).collect();
        Some(StepAggregate {
            step,
            size_bytes: first.size_bytes,
            flows: flows.len(),
            pair: None,
            bytes,
            slowest_transfer_ms: Summary::of(&slowest),
            gbps: Summary::of(&gbps).rate(),
        })
    }
}

/// Mark the cases of a cluster run whose link looks wrong: p50 below [`OUTLIER_FRACTION`] of the median p50 of
/// all links at the same size (with at least three links to compare), or bimodal reps. Earlier marks are replaced.
pub fn flag_outliers(cases: &mut [CaseResult]) {
    let mut sizes: Vec<u64> = cases.iter().filter(|c| c.cluster.is_some()).map(|c| c.size_bytes).collect();
    sizes.sort();
    sizes.dedup();
    for size in sizes {
        let p50s: Vec<f64> =
            cases.iter().filter(|c| c.cluster.is_some() && c.size_bytes == size).map(|c| c.gbps.p50).collect();
        let median = Summary::of(&p50s).p50;
        for c in cases.iter_mut().filter(|c| c.size_bytes == size) {
            let (p50, bimodal, modes) = (c.gbps.p50, c.bimodal.is_bimodal, c.bimodal.modes_gbps.clone());
            let Some(flow) = c.cluster.as_mut() else { continue };
            let pair = format!("{}→{}", flow.src.rank, flow.dst.rank);
            flow.outlier = if p50s.len() >= 3 && p50 < OUTLIER_FRACTION * median {
                Some(format!(
                    "{pair} at {}: p50 {:.2} GB/s is below {OUTLIER_FRACTION}× the median of all {} links ({:.2} GB/s)",
                    format_size(size),
                    p50,
                    p50s.len(),
                    median
                ))
            } else if bimodal {
                let modes: Vec<String> = modes.iter().map(|g| format!("{g:.2}")).collect();
                Some(format!("{pair} at {}: bimodal reps ({} GB/s)", format_size(size), modes.join(" and ")))
            } else {
                None
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{Endpoint, Pattern};
    use crate::stats::case::ClusterFlow;

    fn end(rank: usize) -> Endpoint {
        Endpoint { rank, host: format!("h{rank}"), gpu: None, nic: None, local_rank: 0, numa: None }
    }

    /// A flow src→dst of 1 MiB whose reps took `ms`.
    fn flow(src: usize, dst: usize, ms: &[f64]) -> CaseResult {
        let summary = |v: &[f64]| serde_json::to_value(Summary::of(v)).unwrap();
        let size = 1u64 << 20;
        let gbps: Vec<f64> = ms.iter().map(|m| crate::units::gbps(size, *m)).collect();
        let reps: Vec<serde_json::Value> = ms
            .iter()
            .zip(&gbps)
            .enumerate()
            .map(|(i, (m, g))| serde_json::json!({"i": i, "transfer_ms": m, "gbps": g, "setup_ms": 0.1, "notify_ms": 0.1, "total_ms": m}))
            .collect();
        let v = serde_json::json!({
            "size_bytes": size, "tokens": null, "bytes_per_token": null, "n": ms.len(),
            "transfer_ms": summary(ms), "gbps": serde_json::to_value(Summary::of(&gbps).rate()).unwrap(),
            "setup_ms": summary(ms), "notify_ms": summary(ms), "total_ms": summary(ms),
            "block_latency_us": null, "verified": null, "mismatched_bytes": null,
            "block_size": size, "block_clamped": false, "writes": 1, "reps": reps, "warmup_reps": [],
        });
        let mut c = serde_json::from_value::<CaseResult>(v).unwrap().with_derived();
        c.cluster = Some(ClusterFlow {
            src: end(src),
            dst: end(dst),
            pattern: Pattern::Incast,
            step: 1,
            flows: 3,
            outlier: None,
        });
        c
    }

    #[test]
    fn the_aggregate_is_all_bytes_over_the_slowest_flow_per_rep() {
        let flows = [flow(1, 0, &[1.0, 2.0]), flow(2, 0, &[4.0, 1.0]), flow(3, 0, &[2.0, 2.0])];
        let refs: Vec<&CaseResult> = flows.iter().collect();
        let a = StepAggregate::of(7, &refs).unwrap();
        assert_eq!((a.step, a.flows, a.bytes), (7, 3, 3 << 20));
        // Rep 0: slowest 4 ms; rep 1: slowest 2 ms.
        assert_eq!((a.slowest_transfer_ms.min, a.slowest_transfer_ms.max), (2.0, 4.0));
        assert!((a.gbps.max - crate::units::gbps(3 << 20, 2.0)).abs() < 1e-9);
    }

    #[test]
    fn a_slow_link_is_flagged_with_its_pair() {
        let mut cases =
            vec![flow(1, 0, &[1.0; 5]), flow(2, 0, &[1.0; 5]), flow(3, 0, &[1.1; 5]), flow(3, 1, &[2.0; 5])];
        flag_outliers(&mut cases);
        let marks: Vec<Option<String>> = cases.iter().map(|c| c.cluster.as_ref().unwrap().outlier.clone()).collect();
        assert!(marks[..3].iter().all(Option::is_none), "{marks:?}");
        let slow = marks[3].as_deref().unwrap();
        assert!(slow.starts_with("3→1 at 1 MiB: p50") && slow.contains("median of all 4 links"), "{slow}");
    }
}
