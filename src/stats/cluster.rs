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
    pub fn over_flows(step: usize, flows: &[&CaseResult]) -> Option<StepAggregate> {
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
            slowest_transfer_ms: Summary::of_samples(&slowest),
            gbps: Summary::of_samples(&gbps).rate(),
        })
    }
}

/// Why a link is marked: its p50 is below [`OUTLIER_FRACTION`] of the median p50 of all links at that size (with
/// at least three links to compare), or its reps fall in two clusters. A link can be both.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Marks {
    pub slow: bool,
    pub bimodal: bool,
}

impl Marks {
    pub fn any(self) -> bool {
        self.slow || self.bimodal
    }
}

/// The links compared at one size: how many, and the median of their p50 GB/s.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SizeMedian {
    pub size_bytes: u64,
    pub links: usize,
    pub median_gbps: f64,
}

impl SizeMedian {
    /// The cluster cases at `size` (None when there is none).
    pub fn at_size(cases: &[CaseResult], size: u64) -> Option<SizeMedian> {
        let p50s: Vec<f64> =
            cases.iter().filter(|c| c.cluster.is_some() && c.size_bytes == size).map(|c| c.stats.gbps.p50).collect();
        (!p50s.is_empty()).then(|| SizeMedian {
            size_bytes: size,
            links: p50s.len(),
            median_gbps: Summary::of_samples(&p50s).p50,
        })
    }

    /// Whether a p50 counts as slow here: too few links to compare never does.
    pub fn is_slow(&self, p50: f64) -> bool {
        self.links >= 3 && p50 < OUTLIER_FRACTION * self.median_gbps
    }
}

/// The sizes of a cluster run's cases, ascending, each once.
pub fn cluster_sizes(cases: &[CaseResult]) -> Vec<u64> {
    let mut sizes: Vec<u64> = cases.iter().filter(|c| c.cluster.is_some()).map(|c| c.size_bytes).collect();
    sizes.sort();
    sizes.dedup();
    sizes
}

/// Per size of a cluster run, ascending: the links compared there.
pub fn medians(cases: &[CaseResult]) -> Vec<SizeMedian> {
    cluster_sizes(cases).into_iter().filter_map(|s| SizeMedian::at_size(cases, s)).collect()
}

/// Each case's marks, in the order of `cases` (a case of another command has none). Computed from the numbers, so
/// files written before the marks were told apart read the same way.
pub fn marks(cases: &[CaseResult]) -> Vec<Marks> {
    let medians = medians(cases);
    cases
        .iter()
        .map(|c| {
            let Some(m) = c.cluster.as_ref().and(medians.iter().find(|m| m.size_bytes == c.size_bytes)) else {
                return Marks::default();
            };
            Marks { slow: m.is_slow(c.stats.gbps.p50), bimodal: c.derived.bimodal.is_bimodal }
        })
        .collect()
}

/// Mark the cases of a cluster run whose link looks wrong (see [`Marks`]): `outlier` says why, naming the link, for
/// each reason that holds. Earlier marks are replaced.
pub fn flag_outliers(cases: &mut [CaseResult]) {
    let (marks, medians) = (marks(cases), medians(cases));
    for (c, m) in cases.iter_mut().zip(marks) {
        let (size, p50, modes) = (c.size_bytes, c.stats.gbps.p50, c.derived.bimodal.modes_gbps.clone());
        let Some(flow) = c.cluster.as_mut() else { continue };
        let mut why: Vec<String> = Vec::new();
        if let (true, Some(med)) = (m.slow, medians.iter().find(|s| s.size_bytes == size)) {
            why.push(format!(
                "p50 {p50:.2} GB/s is below {OUTLIER_FRACTION}× the median of all {} links ({:.2} GB/s)",
                med.links, med.median_gbps
            ));
        }
        if m.bimodal {
            let modes: Vec<String> = modes.iter().map(|g| format!("{g:.2}")).collect();
            why.push(format!("bimodal reps ({} GB/s)", modes.join(" and ")));
        }
        flow.outlier = (!why.is_empty())
            .then(|| format!("{}→{} at {}: {}", flow.src.rank, flow.dst.rank, format_size(size), why.join("; ")));
    }
}

/// The links of a cluster run: its distinct (source rank, destination rank) pairs.
pub fn link_count(cases: &[CaseResult]) -> usize {
    let links: std::collections::BTreeSet<(usize, usize)> =
        cases.iter().filter_map(|c| c.cluster.as_ref().map(|f| (f.src.rank, f.dst.rank))).collect();
    links.len()
}

/// The links from one host to another (or to itself) at one size, over each link's p50 GB/s.
#[derive(Debug, Clone, PartialEq)]
pub struct HostPair {
    pub src_host: String,
    pub dst_host: String,
    pub size_bytes: u64,
    /// Flows measured (a link measured twice at a size, under bidir or all, counts twice).
    pub links: usize,
    pub median_gbps: f64,
    pub min_gbps: f64,
    pub max_gbps: f64,
    pub slow: usize,
    pub bimodal: usize,
    /// The pair's slowest link: source rank, destination rank, its p50 GB/s.
    pub worst: (usize, usize, f64),
}

/// Per (source host, destination host) and size: hosts in the order of `ranks` (a host only the cases name comes
/// after them), sizes ascending. One pass over the cases: a 1,000-rank file has hundreds of thousands.
pub fn host_pairs(cases: &[CaseResult], ranks: &[crate::cluster::Endpoint]) -> Vec<HostPair> {
    let mut hosts: Vec<&str> = Vec::new();
    let mut index: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    let named = ranks.iter().map(|e| e.host.as_str());
    for h in named.chain(cases.iter().filter_map(|c| c.cluster.as_ref()).flat_map(|f| [&*f.src.host, &*f.dst.host])) {
        index.entry(h).or_insert_with(|| {
            hosts.push(h);
            hosts.len() - 1
        });
    }
    let mut groups: std::collections::BTreeMap<(u64, usize, usize), (Vec<f64>, HostPair)> = Default::default();
    for (c, m) in cases.iter().zip(marks(cases)) {
        let Some(f) = c.cluster.as_ref() else { continue };
        let (si, di) = (index[f.src.host.as_str()], index[f.dst.host.as_str()]);
        let p50 = c.stats.gbps.p50;
        let (p50s, pair) = groups.entry((c.size_bytes, si, di)).or_insert_with(|| {
            let pair = HostPair {
                src_host: f.src.host.clone(),
                dst_host: f.dst.host.clone(),
                size_bytes: c.size_bytes,
                links: 0,
                median_gbps: f64::NAN,
                min_gbps: f64::NAN,
                max_gbps: f64::NAN,
                slow: 0,
                bimodal: 0,
                worst: (f.src.rank, f.dst.rank, p50),
            };
            (Vec::new(), pair)
        });
        p50s.push(p50);
        pair.slow += usize::from(m.slow);
        pair.bimodal += usize::from(m.bimodal);
        if p50 < pair.worst.2 {
            pair.worst = (f.src.rank, f.dst.rank, p50);
        }
    }
    groups
        .into_values()
        .map(|(p50s, mut pair)| {
            let s = Summary::of_samples(&p50s);
            (pair.links, pair.median_gbps, pair.min_gbps, pair.max_gbps) = (p50s.len(), s.p50, s.min, s.max);
            pair
        })
        .collect()
}

/// The indices of the `k` cluster cases of lowest p50 GB/s at `size`, slowest first.
pub fn slowest(cases: &[CaseResult], size: u64, k: usize) -> Vec<usize> {
    let mut at: Vec<usize> =
        (0..cases.len()).filter(|i| cases[*i].cluster.is_some() && cases[*i].size_bytes == size).collect();
    at.sort_by(|a, b| cases[*a].stats.gbps.p50.total_cmp(&cases[*b].stats.gbps.p50));
    at.truncate(k);
    at
}

/// Cluster cases as `kvxfer cluster` records them, built from rep times, for the tests of stats and export.
#[cfg(test)]
pub(crate) mod test_flows {
    use super::*;
    use crate::cluster::{Endpoint, Pattern};
    use crate::stats::case::ClusterFlow;

    pub fn end(rank: usize) -> Endpoint {
        Endpoint { rank, host: format!("h{rank}"), gpu: None, nic: None, local_rank: 0, numa: None }
    }

    /// A flow src→dst of 1 MiB whose reps took `ms` (an incast step of 3 flows; each rank on its own host).
    pub fn flow(src: usize, dst: usize, ms: &[f64]) -> CaseResult {
        flow_of(src, dst, 1 << 20, ms)
    }

    /// A flow src→dst of `size` bytes whose reps took `ms`.
    pub fn flow_of(src: usize, dst: usize, size: u64, ms: &[f64]) -> CaseResult {
        let summary = |v: &[f64]| serde_json::to_value(Summary::of_samples(v)).unwrap();
        let gbps: Vec<f64> = ms.iter().map(|m| crate::units::gbps(size, *m)).collect();
        let reps: Vec<serde_json::Value> = ms
            .iter()
            .zip(&gbps)
            .enumerate()
            .map(|(i, (m, g))| serde_json::json!({"i": i, "transfer_ms": m, "gbps": g, "setup_ms": 0.1, "notify_ms": 0.1, "total_ms": m}))
            .collect();
        let v = serde_json::json!({
            "size_bytes": size, "tokens": null, "bytes_per_token": null, "n": ms.len(),
            "transfer_ms": summary(ms), "gbps": serde_json::to_value(Summary::of_samples(&gbps).rate()).unwrap(),
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
}

#[cfg(test)]
mod tests {
    use super::test_flows::{flow, flow_of};
    use super::*;

    #[test]
    fn the_aggregate_is_all_bytes_over_the_slowest_flow_per_rep() {
        let flows = [flow(1, 0, &[1.0, 2.0]), flow(2, 0, &[4.0, 1.0]), flow(3, 0, &[2.0, 2.0])];
        let refs: Vec<&CaseResult> = flows.iter().collect();
        let a = StepAggregate::over_flows(7, &refs).unwrap();
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

    #[test]
    fn slow_and_bimodal_are_told_apart_and_a_link_can_be_both() {
        // Four links at 1 MiB: one 4× slower and bimodal, one only bimodal (9 reps, two clusters), two steady.
        let two_paths = [1.0, 1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0];
        let slow_two_paths: Vec<f64> = two_paths.iter().map(|m| m * 4.0).collect();
        let mut cases =
            vec![flow(1, 0, &[1.0; 9]), flow(2, 0, &[1.0; 9]), flow(3, 0, &two_paths), flow(4, 0, &slow_two_paths)];
        flag_outliers(&mut cases);
        let m = marks(&cases);
        assert_eq!(m[0], Marks::default());
        assert_eq!(m[2], Marks { slow: false, bimodal: true });
        assert_eq!(m[3], Marks { slow: true, bimodal: true });
        let both = cases[3].cluster.as_ref().unwrap().outlier.clone().unwrap();
        assert!(both.starts_with("4→0 at 1 MiB: p50") && both.contains("; bimodal reps ("), "{both}");
        let only = cases[2].cluster.as_ref().unwrap().outlier.clone().unwrap();
        assert!(only.starts_with("3→0 at 1 MiB: bimodal reps"), "{only}");
    }

    #[test]
    fn host_pairs_summarise_each_pair_of_hosts_per_size_and_slowest_lists_the_lowest_p50_first() {
        let mut cases: Vec<CaseResult> = Vec::new();
        for (s, d, ms) in [(0, 1, 1.0), (1, 0, 2.0), (0, 2, 1.0), (2, 0, 8.0), (1, 2, 1.0), (2, 1, 1.0)] {
            let mut c = flow_of(s, d, 1 << 20, &[ms; 3]);
            let f = c.cluster.as_mut().unwrap();
            // Ranks 0 and 1 on host a, rank 2 on host b.
            for e in [&mut f.src, &mut f.dst] {
                e.host = if e.rank < 2 { "a".into() } else { "b".into() };
            }
            cases.push(c);
        }
        let ranks: Vec<crate::cluster::Endpoint> = (0..3)
            .map(|r| {
                cases
                    .iter()
                    .find_map(|c| {
                        let f = c.cluster.as_ref()?;
                        [&f.src, &f.dst].into_iter().find(|e| e.rank == r).cloned()
                    })
                    .unwrap()
            })
            .collect();
        let pairs = host_pairs(&cases, &ranks);
        let names: Vec<(&str, &str, usize)> =
            pairs.iter().map(|p| (p.src_host.as_str(), p.dst_host.as_str(), p.links)).collect();
        assert_eq!(names, [("a", "a", 2), ("a", "b", 2), ("b", "a", 2)]);
        let ba = &pairs[2];
        assert!((ba.min_gbps - crate::units::gbps(1 << 20, 8.0)).abs() < 1e-9, "{ba:?}");
        // 2→0 (8 ms) and 1→0 (2 ms) are below 0.8× the median of all six links (1 ms); nothing else is.
        assert_eq!((ba.slow, pairs[0].slow, pairs[1].slow), (1, 1, 0));
        assert_eq!((ba.worst.0, ba.worst.1), (2, 0));
        assert_eq!((pairs[0].worst.0, pairs[0].worst.1), (1, 0));
        assert_eq!(slowest(&cases, 1 << 20, 2), [3, 1]);
        assert_eq!(link_count(&cases), 6);
    }
}
