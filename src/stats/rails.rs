//! Rails of a striped verbs transfer, per case: each rail's share of the bytes and its median rate over the reps,
//! and the rail that carries far less than its share flagged.

use crate::measure::{Summary, Warning, WarningKind};
use crate::run::RepRecord;
use serde::{Deserialize, Serialize};

/// A rail whose median rate is below this fraction of the median of all rails' lags (the same 0.8 as the cluster
/// matrix's outlier links).
pub const LAGGING_RAIL: f64 = 0.8;

/// One rail over a case's reps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RailSummary {
    /// The sender's device.
    pub device: String,
    /// Bytes it carried per rep.
    pub bytes: u64,
    /// Its share of the rep's bytes.
    pub share: f64,
    /// Median of its per-rep rate (its bytes over its own first-post-to-last-completion time).
    pub gbps_p50: f64,
    /// Its median rate is below [`LAGGING_RAIL`] × the median of all rails'.
    pub lagging: bool,
}

/// The rails of a case, from the reps that report them (None when the transfer was not striped).
pub fn of(reps: &[RepRecord]) -> Option<Vec<RailSummary>> {
    let per_rep: Vec<&Vec<crate::transport::verbs::RailRep>> =
        reps.iter().filter_map(|r| r.extras.rails.as_ref()).collect();
    let first = per_rep.first()?;
    let total: u64 = first.iter().map(|r| r.bytes).sum();
    let mut rails: Vec<RailSummary> = first
        .iter()
        .enumerate()
        .map(|(k, r)| {
            let rates: Vec<f64> = per_rep.iter().filter_map(|rep| rep.get(k)).map(|x| x.gbps).collect();
            RailSummary {
                device: r.device.clone(),
                bytes: r.bytes,
                share: if total > 0 { r.bytes as f64 / total as f64 } else { 0.0 },
                gbps_p50: Summary::of(&rates).p50,
                lagging: false,
            }
        })
        .collect();
    let median = Summary::of(&rails.iter().map(|r| r.gbps_p50).collect::<Vec<_>>()).p50;
    for r in &mut rails {
        r.lagging = r.gbps_p50 < LAGGING_RAIL * median;
    }
    Some(rails)
}

/// A warning for each lagging rail, naming it and the numbers.
pub fn warnings(rails: &[RailSummary]) -> Vec<Warning> {
    let median = Summary::of(&rails.iter().map(|r| r.gbps_p50).collect::<Vec<_>>()).p50;
    rails
        .iter()
        .filter(|r| r.lagging)
        .map(|r| Warning {
            kind: WarningKind::LaggingRail,
            message: format!(
                "rail {} lags: {:.2} GB/s for its {:.0}% share, the rails' median {:.2}",
                r.device,
                r.gbps_p50,
                r.share * 100.0,
                median
            ),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::verbs::RailRep;

    fn rep(rates: &[f64]) -> RepRecord {
        let mut r: RepRecord = serde_json::from_str(
            r#"{"i":0,"transfer_ms":1.0,"gbps":1.0,"setup_ms":0.0,"notify_ms":0.0,"total_ms":1.0}"#,
        )
        .unwrap();
        let rails = rates
            .iter()
            .enumerate()
            .map(|(k, g)| RailRep { device: format!("mlx5_{k}"), bytes: 1 << 20, ms: 1.0, gbps: *g })
            .collect();
        r.extras.rails = Some(rails);
        r
    }

    #[test]
    fn a_rail_far_below_the_others_is_flagged_by_name() {
        let reps = [rep(&[10.0, 10.0, 4.0]), rep(&[11.0, 9.0, 5.0]), rep(&[9.0, 10.0, 4.5])];
        let rails = of(&reps).unwrap();
        assert_eq!(rails.iter().map(|r| r.gbps_p50).collect::<Vec<_>>(), [10.0, 10.0, 4.5]);
        assert_eq!(rails.iter().map(|r| r.lagging).collect::<Vec<_>>(), [false, false, true]);
        assert!((rails[0].share - 1.0 / 3.0).abs() < 1e-9);
        let w = warnings(&rails);
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].kind, WarningKind::LaggingRail);
        assert!(w[0].message.contains("mlx5_2") && w[0].message.contains("4.50"), "{}", w[0].message);
    }

    #[test]
    fn even_rails_and_unstriped_reps_carry_no_flag() {
        let rails = of(&[rep(&[10.0, 8.5]), rep(&[9.0, 9.5])]).unwrap();
        assert!(warnings(&rails).is_empty(), "{rails:?}");
        let mut plain = rep(&[1.0]);
        plain.extras.rails = None;
        assert_eq!(of(&[plain]), None);
    }
}
