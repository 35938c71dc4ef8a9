//! A warning a case carries when its numbers deserve less trust, and what it is about (see `stats::warnings` for
//! those the statistics raise; a transport raises its own about its extras, such as a lagging rail).

use serde::{Deserialize, Serialize};

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
    /// The transfer times' coefficient of variation is above `stats::warnings::MAX_CV`.
    HighCv,
    /// Fewer measured reps than `stats::warnings::MIN_REPS`.
    FewReps,
    /// The first measured rep was the slowest, by more than `stats::warnings::COLD_FACTOR` of the others' median.
    ColdFirstRep,
    /// The reps' bandwidth fell into two modes.
    Bimodal,
    /// One rail of a striped verbs transfer carried its share far slower than the others (the verbs transport's
    /// rails).
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

#[cfg(test)]
mod tests {
    use super::*;

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
