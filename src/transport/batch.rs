//! An engine's batch (mooncake, nixl): the entries a transfer hands the engine in one call, per rep
//! (`descriptors`), and per case the most any rep used.

use crate::measure::{Fields, Warning};
use serde::{Deserialize, Serialize};

/// A rep's, or a case's, `descriptors`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Batch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub descriptors: Option<u64>,
}

/// A case's: the most entries any rep handed the engine in one call.
pub fn summarize(reps: &[&Fields]) -> (Fields, Vec<Warning>) {
    let most = reps.iter().filter_map(|r| r.read::<Batch>().ok()?.descriptors).max();
    (Fields::of(&Batch { descriptors: most }).expect("a struct"), Vec::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_case_keeps_the_largest_batch_and_says_nothing_without_one() {
        let reps: Vec<Fields> = [Some(3), None, Some(9)].map(|d| Fields::of(&Batch { descriptors: d }).unwrap()).into();
        let (case, warnings) = summarize(&reps.iter().collect::<Vec<_>>());
        assert_eq!((serde_json::to_string(&case).unwrap(), warnings.len()), (r#"{"descriptors":9}"#.into(), 0));
        assert!(summarize(&[]).0.is_empty());
    }
}
