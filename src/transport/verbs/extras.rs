//! What a verbs transfer reports besides its times, per rep: registration inside the rep (`reg_ms`), work requests
//! when they differ from the writes (`work_requests`: SGE lists gather pieces whose destinations are adjacent into
//! one RDMA WRITE), each rail's share when striped (`rails`). Per case: the work requests, and each rail's share
//! and median rate with the rail that carries far less than its share flagged (and warned about). And the words
//! for them under tables and in live rows.

use crate::measure::{CaseExtras, ExtrasNote, Fields, Summary, Warning, WarningKind};
use serde::{Deserialize, Serialize};

/// A rail whose median rate is below this fraction of the median of all rails' lags (the same 0.8 as the cluster
/// matrix's outlier links).
pub const LAGGING_RAIL: f64 = 0.8;

/// One rail's share of one rep, stored in the rep's `rails` list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RailRep {
    /// The sender's device.
    pub device: String,
    pub bytes: u64,
    /// From the rail's first post to its last completion.
    pub ms: f64,
    pub gbps: f64,
}

/// A rep's keys.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RepExtras {
    /// Memory registration done inside this transfer (`--reg-per-rep`), included in the transfer time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reg_ms: Option<f64>,
    /// The bytes that registration covered over its time, GB/s (`--reg-per-rep`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reg_gbps: Option<f64>,
    /// Work requests issued, when that differs from the writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work_requests: Option<u64>,
    /// Striped over several devices: each rail's bytes, time and rate in this rep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rails: Option<Vec<RailRep>>,
}

/// A case's keys.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CaseKeys {
    /// Registration inside each rep (`--reg-per-rep`): the median time, and the median rate of registering.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reg_ms_p50: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reg_gbps_p50: Option<f64>,
    /// RDMA WRITEs posted per transfer when they differ from the writes, the most any rep posted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work_requests: Option<u64>,
    /// Striped over several devices: each rail's share and median rate, lagging ones flagged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rails: Option<Vec<RailSummary>>,
}

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

pub fn summarize(reps: &[&Fields]) -> (Fields, Vec<Warning>) {
    let reps: Vec<RepExtras> = reps.iter().filter_map(|r| r.read().ok()).collect();
    let rails = rails_of(&reps);
    let warnings = rails.as_deref().map(lagging).unwrap_or_default();
    let p50 = |of: fn(&RepExtras) -> Option<f64>| {
        let xs: Vec<f64> = reps.iter().filter_map(of).collect();
        (!xs.is_empty()).then(|| Summary::of_samples(&xs).p50)
    };
    let keys = CaseKeys {
        reg_ms_p50: p50(|r| r.reg_ms),
        reg_gbps_p50: p50(|r| r.reg_gbps),
        work_requests: reps.iter().filter_map(|r| r.work_requests).max(),
        rails,
    };
    (Fields::of(&keys).expect("a struct"), warnings)
}

/// The rails of a case, from the reps that report them (None when the transfer was not striped).
fn rails_of(reps: &[RepExtras]) -> Option<Vec<RailSummary>> {
    let per_rep: Vec<&Vec<RailRep>> = reps.iter().filter_map(|r| r.rails.as_ref()).collect();
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
                gbps_p50: Summary::of_samples(&rates).p50,
                lagging: false,
            }
        })
        .collect();
    let median = Summary::of_samples(&rails.iter().map(|r| r.gbps_p50).collect::<Vec<_>>()).p50;
    for r in &mut rails {
        r.lagging = r.gbps_p50 < LAGGING_RAIL * median;
    }
    Some(rails)
}

/// A warning for each lagging rail, naming it and the numbers.
fn lagging(rails: &[RailSummary]) -> Vec<Warning> {
    let median = Summary::of_samples(&rails.iter().map(|r| r.gbps_p50).collect::<Vec<_>>()).p50;
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

fn keys(case: &CaseExtras<'_>) -> CaseKeys {
    case.extras.read().unwrap_or_default()
}

/// "96 RDMA WRITEs for 1536 writes (SGE lists)" when verbs posted a different number of work requests: fewer when
/// SGE lists gathered writes, more when writes were cut at registration or message-size boundaries.
pub fn work_requests_text(case: &CaseExtras<'_>) -> Option<String> {
    let writes = case.writes as u64;
    let wr = keys(case).work_requests.filter(|&wr| wr != writes)?;
    let why = if wr < writes { "SGE lists" } else { "cut at MR or message-size boundaries" };
    Some(format!("{wr} RDMA WRITEs for {writes} writes ({why})"))
}

/// "mlx5_0 9.61 GB/s (50%), mlx5_1 4.02 GB/s (50%, lagging)" for a transfer striped over rails: each rail's median
/// rate and share of the bytes.
pub fn rails_text(case: &CaseExtras<'_>) -> Option<String> {
    let each: Vec<String> = keys(case)
        .rails?
        .iter()
        .map(|r| {
            let lag = if r.lagging { ", lagging" } else { "" };
            format!("{} {:.2} GB/s ({:.0}%{lag})", r.device, r.gbps_p50, r.share * 100.0)
        })
        .collect();
    Some(each.join(", "))
}

/// "registration inside each rep 0.41 ms (2.53 GB/s)" with `--reg-per-rep`: the medians of the case's reps.
pub fn registration_text(case: &CaseExtras<'_>) -> Option<String> {
    let k = keys(case);
    let ms = k.reg_ms_p50?;
    let rate = k.reg_gbps_p50.map(|g| format!(" ({g:.2} GB/s)")).unwrap_or_default();
    Some(format!("registration inside each rep {ms:.3} ms{rate}"))
}

/// Under tables: every case's work requests (its live row said them too), then every case's rails, then its
/// registration inside the reps.
pub fn notes(cases: &[CaseExtras<'_>]) -> Vec<ExtrasNote> {
    let wr = cases.iter().filter_map(|c| work_requests_text(c).map(|t| (format!("{}: {t}", c.name), true)));
    let rails = cases.iter().filter_map(|c| rails_text(c).map(|t| (format!("rails at {}: {t} (p50)", c.name), false)));
    let reg = cases.iter().filter_map(|c| registration_text(c).map(|t| (format!("{}: {t} (p50)", c.name), false)));
    wr.chain(rails).chain(reg).map(|(line, live)| ExtrasNote { line, live }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rep(rates: &[f64]) -> Fields {
        let rails = rates
            .iter()
            .enumerate()
            .map(|(k, g)| RailRep { device: format!("mlx5_{k}"), bytes: 1 << 20, ms: 1.0, gbps: *g })
            .collect();
        Fields::of(&RepExtras { rails: Some(rails), ..RepExtras::default() }).unwrap()
    }

    fn case(reps: &[Fields]) -> (CaseKeys, Vec<Warning>) {
        let (fields, warnings) = summarize(&reps.iter().collect::<Vec<_>>());
        (fields.read().unwrap(), warnings)
    }

    #[test]
    fn a_rail_far_below_the_others_is_flagged_by_name() {
        let (keys, w) = case(&[rep(&[10.0, 10.0, 4.0]), rep(&[11.0, 9.0, 5.0]), rep(&[9.0, 10.0, 4.5])]);
        let rails = keys.rails.unwrap();
        assert_eq!(rails.iter().map(|r| r.gbps_p50).collect::<Vec<_>>(), [10.0, 10.0, 4.5]);
        assert_eq!(rails.iter().map(|r| r.lagging).collect::<Vec<_>>(), [false, false, true]);
        assert!((rails[0].share - 1.0 / 3.0).abs() < 1e-9);
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].kind, WarningKind::LaggingRail);
        assert!(w[0].message.contains("mlx5_2") && w[0].message.contains("4.50"), "{}", w[0].message);
    }

    #[test]
    fn even_rails_and_unstriped_reps_carry_no_flag() {
        let (keys, w) = case(&[rep(&[10.0, 8.5]), rep(&[9.0, 9.5])]);
        assert!(w.is_empty() && keys.rails.is_some(), "{keys:?}");
        let (keys, w) = case(&[Fields::new()]);
        assert_eq!((keys, w.len()), (CaseKeys::default(), 0));
    }

    #[test]
    fn extras_are_left_out_when_absent_and_keep_their_order() {
        assert_eq!(serde_json::to_string(&Fields::of(&RepExtras::default()).unwrap()).unwrap(), "{}");
        let e = RepExtras { reg_ms: Some(1.5), reg_gbps: None, work_requests: Some(3), rails: Some(Vec::new()) };
        let json = r#"{"reg_ms":1.5,"work_requests":3,"rails":[]}"#;
        assert_eq!(serde_json::to_string(&Fields::of(&e).unwrap()).unwrap(), json);
        let (fields, _) = summarize(&[&rep(&[2.0])]);
        let json = r#"{"rails":[{"device":"mlx5_0","bytes":1048576,"share":1.0,"gbps_p50":2.0,"lagging":false}]}"#;
        assert_eq!(serde_json::to_string(&fields).unwrap(), json);
        let r = Fields::of(&RepExtras { work_requests: Some(9), ..RepExtras::default() }).unwrap();
        let (fields, _) = summarize(&[&r, &rep(&[2.0])]);
        assert!(serde_json::to_string(&fields).unwrap().starts_with(r#"{"work_requests":9,"rails":["#));
    }

    #[test]
    fn registration_inside_reps_is_summarized_and_noted() {
        let rep = |ms: f64, gbps: f64| {
            Fields::of(&RepExtras { reg_ms: Some(ms), reg_gbps: Some(gbps), ..RepExtras::default() }).unwrap()
        };
        let (fields, w) = summarize(&[&rep(0.5, 2.0), &rep(0.25, 4.0), &rep(1.0, 1.0)]);
        assert!(w.is_empty());
        assert_eq!(serde_json::to_string(&fields).unwrap(), r#"{"reg_ms_p50":0.5,"reg_gbps_p50":2.0}"#);
        let case = CaseExtras { name: "1 MiB", extras: &fields, writes: 16 };
        let lines: Vec<String> = notes(&[case]).into_iter().map(|n| n.line).collect();
        assert_eq!(lines, ["1 MiB: registration inside each rep 0.500 ms (2.00 GB/s) (p50)"]);
        let (fields, _) = summarize(&[&Fields::new()]);
        assert_eq!(serde_json::to_string(&fields).unwrap(), "{}", "no registration inside reps, no keys");
    }

    #[test]
    fn work_request_notes_say_why_the_count_differs() {
        let fields =
            |wr: u64| Fields::of(&CaseKeys { work_requests: Some(wr), ..CaseKeys::default() }).unwrap();
        let text = |wr: u64| work_requests_text(&CaseExtras { name: "1 MiB", extras: &fields(wr), writes: 1536 });
        assert_eq!(text(96).unwrap(), "96 RDMA WRITEs for 1536 writes (SGE lists)");
        assert!(text(1539).unwrap().contains("cut at MR or message-size boundaries"));
        assert_eq!(text(1536), None, "equal counts say nothing");
        let (rails, _) = summarize(&[&rep(&[9.0, 3.0])]);
        let cases = [
            CaseExtras { name: "1 MiB", extras: &fields(96), writes: 1536 },
            CaseExtras { name: "2 MiB", extras: &rails, writes: 2 },
        ];
        let lines: Vec<(String, bool)> = notes(&cases).into_iter().map(|n| (n.line, n.live)).collect();
        assert_eq!(
            lines,
            [
                ("1 MiB: 96 RDMA WRITEs for 1536 writes (SGE lists)".to_string(), true),
                ("rails at 2 MiB: mlx5_0 9.00 GB/s (50%), mlx5_1 3.00 GB/s (50%, lagging) (p50)".to_string(), false),
            ]
        );
    }
}
