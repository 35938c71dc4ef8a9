//! One size's results as stored in the results JSON (the `cases[]` contract) and rendered in tables.

use super::{confidence, warnings, Bimodality, MedianCi, RateSummary, Summary, Warning};
use crate::plan::paged::Layout;
use crate::run::{CaseRecord, RepRecord};
use crate::transport::StagedMs;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LatencyQuantiles {
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CaseResult {
    pub size_bytes: u64,
    pub tokens: Option<u64>,
    pub bytes_per_token: Option<u64>,
    pub n: usize,
    pub transfer_ms: Summary,
    pub gbps: RateSummary,
    pub setup_ms: Summary,
    pub notify_ms: Summary,
    pub total_ms: Summary,
    /// Per-block completion latency: posted → acknowledged/completed, in µs.
    pub block_latency_us: Option<LatencyQuantiles>,
    pub verified: Option<bool>,
    pub mismatched_bytes: Option<u64>,
    /// The block size actually used, and whether the requested one was clamped to the transfer size.
    pub block_size: u64,
    pub block_clamped: bool,
    pub writes: usize,
    /// `contiguous` or `paged`; files written before layouts existed read as contiguous.
    #[serde(default)]
    pub layout: Layout,
    /// Pieces per transfer (paged: layers × regions × blocks; contiguous: the blocks) and bytes of a full piece;
    /// `writes` counts what was posted after `--coalesce`.
    #[serde(default)]
    pub pieces: usize,
    #[serde(default)]
    pub piece_bytes: u64,
    /// RDMA WRITEs posted per transfer when SGE lists gathered several writes into one (verbs); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work_requests: Option<u64>,
    /// `--staging gather`: the median of each step's time over the measured reps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staged_p50: Option<StagedMs>,
    /// An engine's batch (mooncake): the entries of one call, the most any rep used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub descriptors: Option<u64>,
    /// Verbs striped over several devices: each rail's share and median rate, lagging ones flagged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rails: Option<Vec<super::rails::RailSummary>>,
    /// Each counter's mean delta per measured rep, by source (`--counters auto`); absent without counters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counters: Option<crate::observe::counters::Deltas>,
    /// CPU seconds per GiB moved, by process (`sender process`, `receiver process`, or `process (both ends)` when
    /// both ends ran in one process).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_s_per_gib: Option<BTreeMap<String, f64>>,
    /// For a bimodal or spread case: the counters that separate its slow reps from its fast ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attribution: Option<super::attribution::Attribution>,
    pub reps: Vec<RepRecord>,
    /// Warm-up reps, kept apart: they never enter the statistics.
    pub warmup_reps: Vec<RepRecord>,
    /// Whether the per-rep bandwidths form two modes (see `stats::modes`); absent in older files.
    #[serde(default)]
    pub bimodal: Bimodality,
    /// 95% interval of the median (see `stats::confidence`); absent in older files (`report` derives it).
    #[serde(default)]
    pub p50_ci: Option<MedianCi>,
    /// Coefficient of variation of transfer_ms (stdev / mean).
    #[serde(default)]
    pub cv: Option<f64>,
    /// What makes this case's numbers less trustworthy (see `stats::warnings`); empty when nothing does.
    #[serde(default)]
    pub warnings: Vec<Warning>,
    /// Sweep files: the case's index in the sweep's case list, its short name, and every parameter that
    /// defines it (what `--resume` matches on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub case_id: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub case_label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<BTreeMap<String, String>>,
    /// False while an interleaved sweep has measured only some of this case's reps.
    #[serde(default = "complete", skip_serializing_if = "is_true")]
    pub complete: bool,
    /// Cluster runs: where the flow ran, in which pattern and step, and how many flows ran at once.
    #[serde(default, flatten, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterFlow>,
}

/// The keys a cluster run adds to each case: `src`, `dst`, `pattern`, `step`, `flows`, `outlier`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClusterFlow {
    pub src: crate::cluster::Endpoint,
    pub dst: crate::cluster::Endpoint,
    pub pattern: crate::cluster::Pattern,
    /// 1-based, as the progress lines count.
    pub step: usize,
    /// Flows that ran at once in this step (this one included).
    pub flows: usize,
    /// Why this link looks wrong next to the others (see `stats::outliers`); absent when it does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outlier: Option<String>,
}

fn complete() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

impl CaseResult {
    pub fn from_record(rec: &CaseRecord, verify: bool) -> CaseResult {
        let col = |f: fn(&RepRecord) -> f64| Summary::of(&rec.reps.iter().map(f).collect::<Vec<_>>());
        let h = &rec.block_latency_us;
        let mismatched: u64 = rec.reps.iter().chain(&rec.warmups).filter_map(|r| r.mismatched_bytes).sum();
        CaseResult {
            size_bytes: rec.case.size_bytes,
            tokens: rec.case.tokens,
            bytes_per_token: rec.case.bytes_per_token,
            n: rec.reps.len(),
            transfer_ms: col(|r| r.transfer_ms),
            gbps: col(|r| r.gbps).rate(),
            setup_ms: col(|r| r.setup_ms),
            notify_ms: col(|r| r.notify_ms),
            total_ms: col(|r| r.total_ms),
            block_latency_us: (!h.is_empty()).then(|| LatencyQuantiles {
                p50: h.value_at_quantile(0.5) as f64,
                p99: h.value_at_quantile(0.99) as f64,
                max: h.max() as f64,
            }),
            verified: verify.then_some(mismatched == 0),
            mismatched_bytes: verify.then_some(mismatched),
            block_size: rec.block_size,
            block_clamped: rec.block_clamped,
            writes: rec.writes,
            layout: rec.layout,
            pieces: rec.pieces,
            piece_bytes: rec.block_size,
            work_requests: rec.reps.iter().filter_map(|r| r.extras.work_requests).max(),
            staged_p50: staged_medians(&rec.reps),
            descriptors: rec.reps.iter().filter_map(|r| r.extras.descriptors).max(),
            rails: super::rails::of(&rec.reps),
            counters: super::attribution::means(&rec.reps),
            cpu_s_per_gib: super::attribution::cpu_s_per_gib(&rec.reps, rec.case.size_bytes),
            attribution: None,

            reps: rec.reps.clone(),
            warmup_reps: rec.warmups.clone(),
            bimodal: Bimodality::default(),
            p50_ci: None,
            cv: None,
            warnings: Vec::new(),
            case_id: None,
            case_label: None,
            params: None,
            complete: true,
            cluster: None,
        }
        .with_derived()
    }

    /// Fill bimodality, the median's interval, CV and warnings from the reps (also for files written before them).
    pub fn with_derived(mut self) -> CaseResult {
        let ms: Vec<f64> = self.reps.iter().map(|r| r.transfer_ms).collect();
        let gbps: Vec<f64> = self.reps.iter().map(|r| r.gbps).collect();
        if self.bimodal.method.is_empty() {
            self.bimodal = Bimodality::of(&gbps);
        }
        if self.p50_ci.is_none() {
            self.p50_ci = MedianCi::of(&ms, &gbps);
        }
        if self.cv.is_none() && !ms.is_empty() {
            self.cv = Some(confidence::cv(&ms));
        }
        if self.attribution.is_none() {
            self.attribution = super::attribution::of(&self.reps, &self.bimodal, self.cv);
        }
        if self.warnings.is_empty() && !ms.is_empty() {
            self.warnings = warnings::of(&ms, &self.bimodal);
            if let Some(rails) = &self.rails {
                self.warnings.extend(super::rails::warnings(rails));
            }
            let shared: Vec<Option<u32>> = self.reps.iter().map(|r| r.shared_runs).collect();
            self.warnings.extend(warnings::shared_receiver(&shared));
            self.warnings.extend(super::host::warning(&self.reps));
        }
        self
    }
}

/// The median of each staged step over the reps that report them.
fn staged_medians(reps: &[RepRecord]) -> Option<StagedMs> {
    let staged: Vec<StagedMs> = reps.iter().filter_map(|r| r.extras.staged).collect();
    if staged.is_empty() {
        return None;
    }
    let p50 = |f: fn(&StagedMs) -> f64| Summary::of(&staged.iter().map(f).collect::<Vec<_>>()).p50;
    Some(StagedMs { gather_ms: p50(|s| s.gather_ms), copy_ms: p50(|s| s.copy_ms), scatter_ms: p50(|s| s.scatter_ms) })
}
