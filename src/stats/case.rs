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

/// One case of the results file (`cases[]`): what was moved, its statistics, how it was cut into writes, the
/// transport's own keys, what the hosts spent, the reps themselves and what is derived from them, and the keys a
/// sweep or a cluster run adds. The parts are flattened into one JSON object, in this order.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CaseResult {
    pub size_bytes: u64,
    pub tokens: Option<u64>,
    pub bytes_per_token: Option<u64>,
    #[serde(flatten)]
    pub stats: CaseStats,
    #[serde(flatten)]
    pub check: Verification,
    /// A bidirectional run (`--bidir`): the reverse direction's rates and both directions' together. Absent for
    /// one-way runs; `stats`, `check` and `shape` are the forward direction's.
    #[serde(default, flatten, skip_serializing_if = "Option::is_none")]
    pub bidir: Option<BidirCase>,
    #[serde(flatten)]
    pub shape: TransferShape,
    /// The transport's own keys for the case (`work_requests`, `staged_p50`, `descriptors`, `rails`...), which it
    /// summarized from the reps' and which are carried in the order it wrote them; none for most runs. Read back,
    /// it holds every key of the case this version does not know (a cluster flow's aside).
    #[serde(flatten, deserialize_with = "transport_keys")]
    pub extras: Fields,
    #[serde(flatten)]
    pub host: HostCost,
    /// A case measured for a time (`--duration`): how, for how long, and the reps it did not keep one by one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<crate::run::pace::DurationRecord>,
    /// With `--interval`: what each interval of the case moved, in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intervals: Option<Vec<crate::run::pace::IntervalRow>>,
    pub reps: Vec<RepRecord>,
    /// Warm-up reps, kept apart: they never enter the statistics.
    pub warmup_reps: Vec<RepRecord>,
    #[serde(flatten)]
    pub derived: Derived,
    #[serde(flatten)]
    pub sweep: SweepCase,
    /// Cluster runs: where the flow ran, in which pattern and step, and how many flows ran at once.
    #[serde(default, flatten, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterFlow>,
}

/// The statistics of the measured reps.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CaseStats {
    pub n: usize,
    pub transfer_ms: Summary,
    pub gbps: RateSummary,
    pub setup_ms: Summary,
    pub notify_ms: Summary,
    pub total_ms: Summary,
    /// Per-block completion latency: posted → acknowledged/completed, in µs.
    pub block_latency_us: Option<LatencyQuantiles>,
}

/// What `--verify` found (absent without it); warm-up reps count too.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Verification {
    /// Every byte of every rep (warm-ups too) was checked and none differed.
    pub verified: Option<bool>,
    pub mismatched_bytes: Option<u64>,
    /// Reps whose receiver sent no mismatch count (none checked their bytes); absent when every rep was counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unchecked_reps: Option<u64>,
}

/// What a bidirectional case adds: the reverse transfer's rate and the aggregate's (each rep's both directions'
/// bytes over the span from the common start to the later finish), and what `--verify` found of the reverse bytes
/// (the case's `verified` covers both directions).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BidirCase {
    pub reverse_gbps: RateSummary,
    pub aggregate_gbps: RateSummary,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reverse_mismatched_bytes: Option<u64>,
}

impl BidirCase {
    /// From the measured reps (and the warm-ups' reverse bytes under `--verify`); None for a one-way case.
    fn of(reps: &[RepRecord], warmups: &[RepRecord], verify: bool) -> Option<BidirCase> {
        let b: Vec<crate::run::bidir::BidirRep> = reps.iter().filter_map(|r| r.bidir).collect();
        if b.is_empty() {
            return None;
        }
        let rate = |f: fn(&crate::run::bidir::BidirRep) -> f64| {
            Summary::of_samples(&b.iter().map(f).collect::<Vec<_>>()).rate()
        };
        let bad = reps
            .iter()
            .chain(warmups)
            .filter_map(|r| r.bidir.and_then(|b| b.reverse_mismatched_bytes))
            .fold(0u64, u64::saturating_add);
        Some(BidirCase {
            reverse_gbps: rate(|r| r.reverse_gbps),
            aggregate_gbps: rate(|r| r.aggregate_gbps),
            reverse_mismatched_bytes: verify.then_some(bad),
        })
    }
}

/// How the transfer was cut into writes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TransferShape {
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
}

/// What the hosts spent on the case, and which of it tells slow reps from fast ones.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HostCost {
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
}

impl HostCost {
    const KEYS: &'static [&'static str] = &["counters", "cpu_s_per_gib", "attribution"];
}

/// What is derived from the reps; a file that lacks it has it derived on loading (see [`CaseResult::with_derived`]).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Derived {
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
}

impl Derived {
    const KEYS: &'static [&'static str] = &["bimodal", "p50_ci", "cv", "warnings"];
}

/// Sweep files: the case's index in the sweep's case list, its short name, and every parameter that defines it
/// (what `--resume` matches on).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SweepCase {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub case_id: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub case_label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<BTreeMap<String, String>>,
    /// False while an interleaved sweep has measured only some of this case's reps.
    #[serde(default = "complete", skip_serializing_if = "is_true")]
    pub complete: bool,
}

impl SweepCase {
    const KEYS: &'static [&'static str] = &["case_id", "case_label", "params", "complete"];
}

impl Default for SweepCase {
    fn default() -> SweepCase {
        SweepCase { case_id: None, case_label: None, params: None, complete: true }
    }
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

/// A case's keys that no field of [`CaseResult`] reads: the transport's. Serde offers every key not yet read to each
/// flattened field, so the keys of the parts flattened after the transport's are left out here.
fn transport_keys<'de, D: Deserializer<'de>>(d: D) -> Result<Fields, D::Error> {
    let mut keys = Fields::deserialize(d)?;
    let later = [HostCost::KEYS, Derived::KEYS, SweepCase::KEYS, ClusterFlow::KEYS];
    keys.retain(|k| !later.iter().any(|part| part.contains(&k)));
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
        let col = |f: fn(&RepRecord) -> f64| Summary::of_samples(&rec.reps.iter().map(f).collect::<Vec<_>>());
        let h = &rec.block_latency_us;
        let all = || rec.reps.iter().chain(&rec.warmups);
        // Saturating: counts past u64::MAX must not wrap round to "verified".
        // The reps a paced case folded count as its kept ones do.
        let folded = rec.paced.as_ref().map(|p| p.folded_check()).unwrap_or_default();
        let mismatched = all().filter_map(|r| r.mismatched_bytes).fold(folded.mismatched_bytes, u64::saturating_add);
        let unchecked = all().filter(|r| r.mismatched_bytes.is_none()).count() as u64 + folded.unchecked_reps;
        let mut bidir = BidirCase::of(&rec.reps, &rec.warmups, verify);
        if let Some(bad) = bidir.as_mut().and_then(|b| b.reverse_mismatched_bytes.as_mut()) {
            *bad = bad.saturating_add(folded.reverse_mismatched_bytes);
        }
        let reverse_bad = bidir.as_ref().and_then(|b| b.reverse_mismatched_bytes).unwrap_or(0);
        CaseResult {
            size_bytes: rec.case.size_bytes,
            tokens: rec.case.tokens,
            bytes_per_token: rec.case.bytes_per_token,
            stats: CaseStats {
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
            },
            check: Verification {
                verified: verify.then_some(mismatched == 0 && reverse_bad == 0 && unchecked == 0),
                mismatched_bytes: verify.then_some(mismatched),
                unchecked_reps: (verify && unchecked > 0).then_some(unchecked),
            },
            bidir,
            shape: TransferShape {
                block_size: rec.block_size,
                block_clamped: rec.block_clamped,
                writes: rec.writes,
                layout: rec.layout,
                pieces: rec.pieces,
                piece_bytes: rec.block_size,
            },
            extras,
            host: HostCost {
                counters: super::attribution::means(&rec.reps),
                cpu_s_per_gib: super::attribution::cpu_s_per_gib(&rec.reps, rec.case.size_bytes),
                attribution: None,
            },
            duration: rec.paced.as_ref().map(|p| p.record()),
            intervals: rec.paced.as_ref().filter(|p| !p.intervals.is_empty()).map(|p| p.intervals.clone()),
            reps: rec.reps.clone(),
            warmup_reps: rec.warmups.clone(),
            derived: Derived::default(),
            sweep: SweepCase::default(),
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
        if self.derived.bimodal.method.is_empty() {
            self.derived.bimodal = Bimodality::detect(&gbps);
        }
        if self.derived.p50_ci.is_none() {
            self.derived.p50_ci = MedianCi::estimate(&ms, &gbps);
        }
        if self.derived.cv.is_none() && !ms.is_empty() {
            self.derived.cv = Some(confidence::cv(&ms));
        }
        if self.host.attribution.is_none() {
            self.host.attribution = super::attribution::attribute(&self.reps, &self.derived.bimodal, self.derived.cv);
        }
        if self.derived.warnings.is_empty() && !ms.is_empty() {
            self.derived.warnings = warnings::for_case(&ms, &self.derived.bimodal);
            self.derived.warnings.extend(transport_warnings);
            let shared: Vec<Option<u32>> = self.reps.iter().map(|r| r.shared_runs).collect();
            self.derived.warnings.extend(warnings::shared_receiver(&shared));
            self.derived.warnings.extend(super::host::warning(&self.reps));
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::named::Named;
    use crate::plan::{SizeCase, TransportKind};

    fn rep(i: u32, transfer_ms: f64, gbps: f64, mismatched_bytes: u64) -> RepRecord {
        let total_ms = transfer_ms + 0.5;
        let mut r: RepRecord = serde_json::from_str(&format!(
            r#"{{"i":{i},"transfer_ms":{transfer_ms},"gbps":{gbps},"setup_ms":0.1,"notify_ms":0.2,"total_ms":{total_ms}}}"#
        ))
        .unwrap();
        r.mismatched_bytes = Some(mismatched_bytes);
        r
    }

    /// Five measured reps that all landed intact and one warm-up rep that did not.
    fn record() -> CaseRecord {
        let mut block_latency_us = hdrhistogram::Histogram::new(3).unwrap();
        for us in [10, 20, 30, 40, 1000] {
            block_latency_us.record(us).unwrap();
        }
        CaseRecord {
            index: 0,
            case: SizeCase { size_bytes: 4 << 20, tokens: Some(16), bytes_per_token: Some(256 << 10) },
            // Any transport: these reps carry no extras for it to summarize.
            transport: TransportKind::values().next().unwrap(),
            block_size: 1 << 20,
            block_clamped: true,
            writes: 4,
            layout: Layout::Contiguous,
            pieces: 4,
            reps: (0..5).map(|i| rep(i, 1.0 + f64::from(i), 10.0 - f64::from(i), 0)).collect(),
            warmups: vec![rep(0, 9.0, 0.5, 8)],
            block_latency_us,
            paced: None,
        }
    }

    #[test]
    fn a_record_becomes_its_statistics_and_the_fields_derived_from_them() {
        let c = CaseResult::from_record(&record(), true);
        assert_eq!((c.size_bytes, c.tokens, c.bytes_per_token), (4 << 20, Some(16), Some(256 << 10)));
        assert_eq!(c.stats.n, 5);
        assert_eq!((c.stats.transfer_ms.p50, c.stats.transfer_ms.min, c.stats.transfer_ms.max), (3.0, 1.0, 5.0));
        assert_eq!((c.stats.gbps.p50, c.stats.gbps.min, c.stats.gbps.max), (8.0, 6.0, 10.0));
        assert_eq!((c.stats.setup_ms.p50, c.stats.notify_ms.p50, c.stats.total_ms.p50), (0.1, 0.2, 3.5));
        let lat = c.stats.block_latency_us.expect("blocks were timed");
        assert_eq!((lat.p50, lat.max), (30.0, 1000.0));
        // The warm-up's damaged bytes count: a transport that corrupts data is wrong whichever rep showed it.
        assert_eq!((c.check.verified, c.check.mismatched_bytes), (Some(false), Some(8)));
        assert_eq!(
            (c.shape.block_size, c.shape.block_clamped, c.shape.writes, c.shape.layout),
            (1 << 20, true, 4, Layout::Contiguous)
        );
        assert_eq!((c.shape.pieces, c.shape.piece_bytes), (4, 1 << 20));
        assert_eq!((c.reps.len(), c.warmup_reps.len()), (5, 1));
        // Derived from the reps, which no results file needs to hold.
        assert!(!c.derived.bimodal.method.is_empty(), "bimodality was tested");
        assert!(c.derived.p50_ci.is_some(), "five reps bound the median");
        assert!(c.derived.cv.is_some_and(|cv| cv > 0.0));
        assert!(c.sweep.complete);
        assert!(c.sweep.case_id.is_none() && c.sweep.params.is_none() && c.cluster.is_none());
    }

    #[test]
    fn without_verify_nothing_is_claimed_about_the_bytes() {
        let c = CaseResult::from_record(&record(), false);
        assert_eq!((c.check.verified, c.check.mismatched_bytes), (None, None));
    }

    #[test]
    fn a_case_reads_back_as_it_was_written() {
        let c = CaseResult::from_record(&record(), true);
        let text = serde_json::to_string(&c).unwrap();
        let back: CaseResult = serde_json::from_str(&text).unwrap();
        assert_eq!(serde_json::to_string(&back).unwrap(), text);
    }
}
