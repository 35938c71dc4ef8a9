//! One size's results as stored in the results JSON (the `cases[]` contract) and rendered in tables.

use super::{confidence, warnings, Bimodality, MedianCi, RateSummary, Summary, Warning};
use crate::measure::Fields;
use crate::plan::paged::Layout;
use crate::run::{CaseRecord, RepRecord};
use serde::{Deserialize, Deserializer, Serialize};
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
    /// The transport's own keys for the case (`work_requests`, `staged_p50`, `descriptors`, `rails`...), which it
    /// summarized from the reps' and which are carried in the order it wrote them; none for most runs. Read back,
    /// it holds every key of the case this version does not know (a cluster flow's aside).
    #[serde(flatten, deserialize_with = "transport_keys")]
    pub extras: Fields,
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
    /// A case measured for a time (`--duration`): how, for how long, and the reps it did not keep one by one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<crate::run::pace::DurationRecord>,
    /// With `--interval`: what each interval of the case moved, in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intervals: Option<Vec<crate::run::pace::IntervalRow>>,
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

impl ClusterFlow {
    /// Its keys in a case, which the case's other flattened keys leave alone.
    const KEYS: &'static [&'static str] = &["src", "dst", "pattern", "step", "flows", "outlier"];
}

/// A case's keys that no field of [`CaseResult`] reads: the transport's, without a cluster flow's (flattened too;
/// serde offers every unread key to each flattened field).
fn transport_keys<'de, D: Deserializer<'de>>(d: D) -> Result<Fields, D::Error> {
    let mut keys = Fields::deserialize(d)?;
    keys.retain(|k| !ClusterFlow::KEYS.contains(&k));
    Ok(keys)
}

fn complete() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

impl CaseResult {
    pub fn from_record(rec: &CaseRecord, verify: bool) -> CaseResult {
        let (extras, transport_warnings) = rec.transport_extras();
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
            extras,
            counters: super::attribution::means(&rec.reps),
            cpu_s_per_gib: super::attribution::cpu_s_per_gib(&rec.reps, rec.case.size_bytes),
            attribution: None,
            duration: rec.paced.as_ref().map(|p| p.record()),
            intervals: rec.paced.as_ref().filter(|p| !p.intervals.is_empty()).map(|p| p.intervals.clone()),
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
        .derive(transport_warnings)
    }

    /// Fill bimodality, the median's interval, CV and warnings from the reps (also for files written before them).
    pub fn with_derived(self) -> CaseResult {
        // A file written before warnings has no transport's warnings to add (its cases predate striped rails).
        self.derive(Vec::new())
    }

    /// [`Self::with_derived`], with the warnings the case's transport raised about its extras.
    fn derive(mut self, transport_warnings: Vec<Warning>) -> CaseResult {
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
            self.warnings.extend(transport_warnings);
            let shared: Vec<Option<u32>> = self.reps.iter().map(|r| r.shared_runs).collect();
            self.warnings.extend(warnings::shared_receiver(&shared));
            self.warnings.extend(super::host::warning(&self.reps));
        }
        self
    }
}
