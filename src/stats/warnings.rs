//! Warnings a case carries when its numbers deserve less trust: noisy reps, too few reps, a cold first rep, two
//! modes, or a busy host (see `stats::host`). Stored in the results (`warnings`), printed at the end of live rows and under tables.

use super::confidence::cv;
use super::summary::quantile_sorted;
use super::Bimodality;
use serde::{Deserialize, Serialize};

/// A CV of transfer time above this is noisy.
pub const MAX_CV: f64 = 0.10;
/// Fewer measured reps than this make a weak median (and a 95% interval out of reach).
pub const MIN_REPS: usize = 5;
/// The first measured rep is "cold" when it is slower than every other rep and this much slower than their median.
pub const COLD_FACTOR: f64 = 1.20;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Warning {
    pub kind: WarningKind,
    /// The same in words, with the numbers.
    pub message: String,
}

/// What a warning is about, stored as `high_cv`, `few_reps`, `cold_first_rep`, `bimodal`, `lagging_rail`,
/// `shared_receiver` or `busy_host`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WarningKind {
    /// The transfer times' coefficient of variation is above [`MAX_CV`].
    HighCv,
    /// Fewer measured reps than [`MIN_REPS`].
    FewReps,
    /// The first measured rep was the slowest, by more than [`COLD_FACTOR`] of the others' median.
    ColdFirstRep,
    /// The reps' bandwidth fell into two modes.
    Bimodal,
    /// One rail of a striped verbs transfer carried its share far slower than the others (see `stats::rails`).
    LaggingRail,
    /// The receiver served other senders' runs during some reps (`serve --max-sessions`): those reps shared its NIC,
    /// memory bandwidth and counters.
    SharedReceiver,
    /// The host was busy during some reps: a load average at or above its CPU count, or threads of an end that
    /// waited on a run queue for a tenth of the rep or more (see `stats::host`).
    BusyHost,
    /// A kind this version does not know (a newer kvxfer wrote the file), kept as written.
    #[serde(untagged)]
    Other(String),
}

impl WarningKind {
    /// The kind in words, for counts under tables ("high CV 2, cold first rep 1").
    pub fn label(&self) -> String {
        match self {
            WarningKind::HighCv => "high CV".into(),
            WarningKind::FewReps => "few reps".into(),
            WarningKind::ColdFirstRep => "cold first rep".into(),
            WarningKind::Bimodal => "bimodal".into(),
            WarningKind::LaggingRail => "lagging rail".into(),
            WarningKind::SharedReceiver => "shared receiver".into(),
            WarningKind::BusyHost => "busy host".into(),
            WarningKind::Other(kind) => kind.replace('_', " "),
        }
    }
}

fn warn(kind: WarningKind, message: String) -> Warning {
    Warning { kind, message }
}

/// The warnings of one case from its measured transfer times (in rep order) and its bimodality.
pub fn of(transfer_ms: &[f64], bimodal: &Bimodality) -> Vec<Warning> {
    let mut out = Vec::new();
    let n = transfer_ms.len();
    let c = cv(transfer_ms);
    if c > MAX_CV {
        out.push(warn(WarningKind::HighCv, format!("CV {:.0}% > {:.0}%", c * 100.0, MAX_CV * 100.0)));
    }
    if n < MIN_REPS {
        out.push(warn(WarningKind::FewReps, format!("n = {n} < {MIN_REPS}")));
    }
    if let Some((first, rest)) = transfer_ms.split_first().filter(|(_, r)| r.len() >= 2) {
        let mut sorted = rest.to_vec();
        sorted.sort_by(f64::total_cmp);
        let median = quantile_sorted(&sorted, 0.5);
        if *first > sorted[sorted.len() - 1] && *first > median * COLD_FACTOR {
            out.push(warn(WarningKind::ColdFirstRep, format!("first rep {:.1}× the others' median", first / median)));
        }
    }
    if let Some(modes) = bimodal.describe() {
        out.push(warn(WarningKind::Bimodal, format!("bimodal {modes}")));
    }
    out
}

/// The reps that overlapped other senders' runs on the receiver, if any: "receiver shared with other runs in 7 of 20
/// reps".
pub fn shared_receiver(shared_runs: &[Option<u32>]) -> Option<Warning> {
    let shared = shared_runs.iter().filter(|n| n.is_some_and(|n| n > 0)).count();
    (shared > 0).then(|| {
        warn(
            WarningKind::SharedReceiver,
            format!("receiver shared with other runs in {shared} of {} reps", shared_runs.len()),
        )
    })
}

/// "⚠ CV 14% > 10%, first rep 1.6× the others' median" (empty when there is nothing to say).
pub fn describe(w: &[Warning]) -> String {
    if w.is_empty() {
        return String::new();
    }
    format!("⚠ {}", w.iter().map(|w| w.message.as_str()).collect::<Vec<_>>().join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(t: &[f64]) -> Vec<WarningKind> {
        let gbps: Vec<f64> = t.iter().map(|ms| 1.0 / ms).collect();
        of(t, &Bimodality::of(&gbps)).into_iter().map(|w| w.kind).collect::<Vec<_>>()
    }

    #[test]
    fn quiet_on_steady_reps() {
        assert!(kinds(&[10.0, 10.2, 9.9, 10.1, 10.0]).is_empty());
        // A slow first rep within 20% of the rest is not cold.
        assert!(kinds(&[11.5, 10.2, 9.9, 10.1, 10.0]).is_empty());
        // A slow rep that is not the first is not cold either.
        assert!(!kinds(&[10.0, 10.2, 13.0, 10.1, 10.0]).contains(&WarningKind::ColdFirstRep));
    }

    #[test]
    fn fire_when_they_should() {
        assert_eq!(kinds(&[10.0, 10.1, 10.0]), vec![WarningKind::FewReps]);
        assert_eq!(kinds(&[10.0, 14.0, 7.0, 12.0, 9.0]), vec![WarningKind::HighCv]);
        let cold = kinds(&[16.0, 10.2, 9.9, 10.1, 10.0]);
        assert!(cold.contains(&WarningKind::ColdFirstRep), "{cold:?}");
        let two = kinds(&[10.0, 25.0, 10.1, 24.8, 10.05, 25.1]);
        assert!(two.contains(&WarningKind::Bimodal) && two.contains(&WarningKind::HighCv), "{two:?}");
        let w = of(&[16.0, 10.2, 9.9, 10.1, 10.0], &Bimodality::default());
        assert!(describe(&w).starts_with("⚠ CV"), "{}", describe(&w));
        assert_eq!(shared_receiver(&[None, Some(0), None]), None);
        let w = shared_receiver(&[None, Some(2), Some(1), None]).unwrap();
        assert_eq!(
            (w.kind, w.message.as_str()),
            (WarningKind::SharedReceiver, "receiver shared with other runs in 2 of 4 reps")
        );
    }

    #[test]
    fn kinds_are_stored_as_the_strings_of_earlier_files() {
        let stored =
            ["high_cv", "few_reps", "cold_first_rep", "bimodal", "shared_receiver", "busy_host", "from_a_newer_kvxfer"];
        let kinds = [
            WarningKind::HighCv,
            WarningKind::FewReps,
            WarningKind::ColdFirstRep,
            WarningKind::Bimodal,
            WarningKind::SharedReceiver,
            WarningKind::BusyHost,
            WarningKind::Other("from_a_newer_kvxfer".into()),
        ];
        for (text, kind) in stored.iter().zip(&kinds) {
            let json = format!("{{\"kind\":\"{text}\",\"message\":\"m\"}}");
            let w: Warning = serde_json::from_str(&json).unwrap();
            assert_eq!(&w.kind, kind);
            assert_eq!(serde_json::to_string(&w).unwrap(), json, "written back as read");
        }
        assert_eq!(WarningKind::HighCv.label(), "high CV");
        assert_eq!(WarningKind::Other("some_new_kind".into()).label(), "some new kind");
    }
}
