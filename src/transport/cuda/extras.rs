//! What a cuda transfer reports besides its times: with `--staging gather`, how its time splits into the three
//! steps (`staged` per rep, `staged_p50` per case), and the words for it under tables and in live rows.

use crate::measure::{CaseExtras, ExtrasNote, Fields, Summary, Warning};
use serde::{Deserialize, Serialize};

/// The steps of a staged transfer (`--staging gather`), GPU-timed, in ms: pack the pieces into a contiguous
/// staging buffer on the source GPU, one contiguous copy to a staging buffer on the destination GPU, unpack them
/// into their slots there. They add up to the transfer time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StagedMs {
    pub gather_ms: f64,
    pub copy_ms: f64,
    pub scatter_ms: f64,
}

/// A rep's keys.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RepExtras {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staged: Option<StagedMs>,
}

/// A case's keys: the median of each step over the measured reps.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CaseKeys {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staged_p50: Option<StagedMs>,
}

pub fn summarize(reps: &[&Fields]) -> (Fields, Vec<Warning>) {
    let staged: Vec<StagedMs> = reps.iter().filter_map(|r| r.read::<RepExtras>().ok()?.staged).collect();
    let staged_p50 = (!staged.is_empty()).then(|| {
        let p50 = |f: fn(&StagedMs) -> f64| Summary::of_samples(&staged.iter().map(f).collect::<Vec<_>>()).p50;
        StagedMs { gather_ms: p50(|s| s.gather_ms), copy_ms: p50(|s| s.copy_ms), scatter_ms: p50(|s| s.scatter_ms) }
    });
    (Fields::of(&CaseKeys { staged_p50 }).expect("a struct"), Vec::new())
}

/// "gather 6.511 + copy 32.676 + scatter 6.528 ms" for a `--staging gather` case.
pub fn staged_text(case: &CaseExtras<'_>) -> Option<String> {
    let s = case.extras.read::<CaseKeys>().ok()?.staged_p50?;
    Some(format!("gather {:.3} + copy {:.3} + scatter {:.3} ms", s.gather_ms, s.copy_ms, s.scatter_ms))
}

/// Under tables: "staged at 64 MiB: gather ... ms (p50)" for every staged case (their live rows said it too).
pub fn notes(cases: &[CaseExtras<'_>]) -> Vec<ExtrasNote> {
    let line = |c: &CaseExtras<'_>| staged_text(c).map(|t| format!("staged at {}: {t} (p50)", c.name));
    cases.iter().filter_map(line).map(|line| ExtrasNote { line, live: true }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rep(gather_ms: f64, copy_ms: f64) -> Fields {
        Fields::of(&RepExtras { staged: Some(StagedMs { gather_ms, copy_ms, scatter_ms: 0.5 }) }).unwrap()
    }

    #[test]
    fn a_staged_rep_and_case_keep_their_keys_in_order() {
        let r = rep(0.5, 1.0);
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"staged":{"gather_ms":0.5,"copy_ms":1.0,"scatter_ms":0.5}}"#
        );
        let reps = [rep(0.5, 1.0), rep(0.7, 3.0), rep(0.6, 2.0), Fields::new()];
        let (case, warnings) = summarize(&reps.iter().collect::<Vec<_>>());
        let json = r#"{"staged_p50":{"gather_ms":0.6,"copy_ms":2.0,"scatter_ms":0.5}}"#;
        assert_eq!((serde_json::to_string(&case).unwrap().as_str(), warnings.len()), (json, 0));
        assert!(summarize(&[&Fields::new()]).0.is_empty(), "unstaged: no key");
        let c = CaseExtras { name: "64 MiB", extras: &case, writes: 4 };
        let line = "staged at 64 MiB: gather 0.600 + copy 2.000 + scatter 0.500 ms (p50)";
        assert_eq!(notes(&[c]), [ExtrasNote { line: line.into(), live: true }]);
    }
}
