//! `predict --trace` / `--arrivals`: a replay's latency distribution without moving a byte. The workload resolves
//! as replay resolves it (`commands::workload`), each load's schedule runs through the queueing simulation over the
//! measured curve (`stats::queueing`), and the knee is found by replay's rule.

use super::{PredictJson, METHOD};
use crate::bail_usage;
use crate::cli::PredictArgs;
use crate::commands::workload::{self, Job, KvFlags};
use crate::export::json::Results;
use crate::plan::sizes::format_size;
use crate::stats::queueing::{predict_loads, Curve, PredictedLoad};
use crate::stats::replay::{knee, load_words, Knee, LoadSummary};
use crate::stats::CaseResult;
use anyhow::Result;
use serde_json::json;
use std::path::Path;

const STREAM_METHOD: &str = "each request's service time is its bytes' p50 transfer time off the curve (above the \
                             largest measured size: that size's time plus the rest at the best measured bandwidth); \
                             requests queue first come first served for max_inflight sessions; latency = completion \
                             − scheduled arrival. Control round trips and the driver's lag are left out";

/// Predict each load of the stream `a` names over the curve of `cases`.
pub(super) fn run(a: &PredictArgs, results: &Path, r: &Results, cases: &[&CaseResult]) -> Result<()> {
    if a.sizes.sizes.is_some() || a.sizes.tokens.is_some() {
        bail_usage!("--sizes/--tokens: with --trace or --arrivals the requests give the sizes; drop them");
    }
    if a.decode_ms.is_some() {
        bail_usage!("--decode-ms: compares one transfer with decode steps; use it with --sizes or --tokens");
    }
    let inflight = a.workload.max_inflight;
    if inflight == 0 || inflight > 64 {
        bail_usage!("--max-inflight {inflight}: give 1 to 64 sessions");
    }
    let kv = KvFlags {
        model: a.sizes.model.as_deref(),
        model_config: a.sizes.model_config.as_deref(),
        kv_bytes_per_token: a.sizes.kv_bytes_per_token,
    };
    let job = workload::job(&a.workload, kv)?;
    let points: Vec<(f64, f64)> = cases.iter().map(|c| (c.size_bytes as f64, c.stats.transfer_ms.p50)).collect();
    let Some(curve) = Curve::new(&points) else {
        bail_usage!("{}: no selected case has a positive p50 transfer time to predict from", results.display());
    };
    let schedules: Vec<(f64, Vec<_>)> =
        job.loads().into_iter().map(|l| Ok((l, job.schedule(l)?))).collect::<Result<_>>()?;
    let loads = predict_loads(&curve, &schedules, inflight);
    let points: Vec<(f64, &LoadSummary)> = loads.iter().map(|l| (l.load, &l.summary)).collect();
    let knee = knee(&points);
    let above: u64 = loads.iter().map(|l| l.above_range).max().unwrap_or(0);
    if above > 0 {
        crate::noteln!(
            "{above} requests are larger than the largest measured size ({}): extrapolated at {:.2} GB/s, the best \
             measured; sweep up to {} to trust them",
            format_size(curve.largest()),
            curve.ceiling_gbps(),
            format_size(job.largest_bytes())
        );
    }
    let range = [cases[0].size_bytes, cases[cases.len() - 1].size_bytes];
    if a.json {
        let out = PredictJson {
            schema: "kvxfer/predict/v1",
            results: results.display().to_string(),
            label: &r.label,
            method: METHOD,
            measured_range_bytes: range,
            decode_ms: None,
            decode_tokens: None,
            predictions: Vec::new(),
            replay: Some(section(&job, &curve, inflight, &loads, &knee)),
        };
        crate::outln!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    crate::outln!(
        "{} — measured {} .. {} ({} sizes); {} session{}, simulated over the p50 curve",
        r.label,
        format_size(range[0]),
        format_size(range[1]),
        cases.len(),
        inflight,
        if inflight == 1 { "" } else { "s" }
    );
    print_table(&job, &loads);
    if let Some(k) = &knee {
        crate::outln!("knee: {} ({})", load_words(k.load, job.load_unit()), k.why);
    }
    Ok(())
}

/// The JSON's `replay` section: the workload as replay describes it, and each load's predicted summary.
fn section(job: &Job, curve: &Curve, inflight: u32, loads: &[PredictedLoad], knee: &Option<Knee>) -> serde_json::Value {
    json!({
        "workload": job.describe(),
        "load_unit": job.load_unit(),
        "latency": "arrival_to_landed",
        "max_inflight": inflight,
        "ceiling_gbps": curve.ceiling_gbps(),
        "method": STREAM_METHOD,
        "loads": loads,
        "knee": knee,
    })
}

fn print_table(job: &Job, loads: &[PredictedLoad]) {
    let mut t = comfy_table::Table::new();
    t.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED).set_header(vec![
        job.load_unit(),
        "requests",
        "offer GB/s",
        "got GB/s",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "max ms",
        "queue p50",
        "queue p99",
        "util",
    ]);
    let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
    for l in loads {
        let (s, q) = (&l.summary, l.summary.latency_ms);
        let mark = if l.above_range > 0 { " !" } else { "" };
        t.add_row(vec![
            format!("{}", l.load),
            s.requests.to_string(),
            f(s.offered_gbps),
            f(s.achieved_gbps),
            f(q.map(|q| q.p50)),
            f(q.map(|q| q.p90)),
            format!("{}{mark}", f(q.map(|q| q.p99))),
            format!("{}{mark}", f(q.map(|q| q.max))),
            f(s.queue_ms.map(|q| q.p50)),
            f(s.queue_ms.map(|q| q.p99)),
            s.utilization.map_or("-".to_string(), |u| format!("{:.0}%", u * 100.0)),
        ]);
    }
    crate::outln!("{t}");
    if loads.iter().any(|l| l.above_range > 0) {
        crate::outln!("! some requests are above the measured range: their service time is extrapolated");
    }
    crate::outln!("util = predicted GB/s ÷ the best measured GB/s; a replay adds control round trips to each request");
}
