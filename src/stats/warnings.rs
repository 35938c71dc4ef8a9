//! Warnings a case carries when its numbers deserve less trust: noisy reps, too few reps, a cold first rep, two
//! modes, or a busy host (see `stats::host`). Stored in the results (`warnings`), printed at the end of live rows and under tables.

use super::confidence::cv;
use super::Bimodality;
use crate::measure::summary::quantile_sorted;
pub use crate::measure::{Warning, WarningKind};

/// A CV of transfer time above this is noisy.
pub const MAX_CV: f64 = 0.10;
/// Fewer measured reps than this make a weak median (and a 95% interval out of reach).
pub const MIN_REPS: usize = 5;
/// The first measured rep is "cold" when it is slower than every other rep and this much slower than their median.
pub const COLD_FACTOR: f64 = 1.20;

fn warn(kind: WarningKind, message: String) -> Warning {
    Warning { kind, message }
}

/// The warnings of one case from its measured transfer times (in rep order) and its bimodality.
pub fn for_case(transfer_ms: &[f64], bimodal: &Bimodality) -> Vec<Warning> {
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
        for_case(t, &Bimodality::detect(&gbps)).into_iter().map(|w| w.kind).collect::<Vec<_>>()
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
        let w = for_case(&[16.0, 10.2, 9.9, 10.1, 10.0], &Bimodality::default());
        assert!(describe(&w).starts_with("⚠ CV"), "{}", describe(&w));
        assert_eq!(shared_receiver(&[None, Some(0), None]), None);
        let w = shared_receiver(&[None, Some(2), Some(1), None]).unwrap();
        assert_eq!(
            (w.kind, w.message.as_str()),
            (WarningKind::SharedReceiver, "receiver shared with other runs in 2 of 4 reps")
        );
    }
}
