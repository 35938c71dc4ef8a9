//! `kvxfer predict`: estimate the KV transfer time of token counts from a measured time-vs-size curve (p50 per
//! size, interpolated in log-log; see `stats::interpolate`), and with a decode budget, what one transfer costs in
//! decode steps. Sizes outside the measured range are extrapolated only with a mark on them. With `--trace` or
//! `--arrivals`, a replay of that stream is predicted instead (`stream`).

mod stream;

use crate::bail_usage;
use crate::cli::PredictArgs;
use crate::export::json::Results;
use crate::plan::sizes::{format_size, format_tokens};
use crate::stats::interpolate::{log_log, Basis};
use crate::stats::CaseResult;
use crate::units::gbps;
use anyhow::Result;
use serde::Serialize;

#[derive(Serialize)]
struct Prediction {
    tokens: Option<u64>,
    size_bytes: u64,
    transfer_ms: f64,
    gbps: f64,
    basis: Basis,
    /// The same interpolation through the ends of each measured size's 95% CI of the median.
    #[serde(skip_serializing_if = "Option::is_none")]
    ci_ms: Option<[f64; 2]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    decode_steps: Option<f64>,
    /// Transfer time ÷ the decode it enables (decode_ms × decode_tokens).
    #[serde(skip_serializing_if = "Option::is_none")]
    transfer_over_decode: Option<f64>,
}

#[derive(Serialize)]
struct PredictJson<'a> {
    schema: &'static str,
    results: String,
    label: &'a str,
    method: &'static str,
    measured_range_bytes: [u64; 2],
    decode_ms: Option<f64>,
    decode_tokens: Option<u64>,
    predictions: Vec<Prediction>,
    /// `--trace`/`--arrivals`: the predicted replay (its workload, each load's summary, the knee).
    #[serde(skip_serializing_if = "Option::is_none")]
    replay: Option<serde_json::Value>,
}

const METHOD: &str = "p50 transfer_ms per measured size, interpolated piecewise-linearly in log(time) vs log(size); \
                      outside the measured range the nearest segment is extended and the basis says extrapolated";

pub fn run(a: PredictArgs) -> Result<()> {
    // Checked here rather than by clap, whose refusal takes five lines.
    let Some(results) = a.results.clone() else {
        bail_usage!(
            "predict needs --results FILE.json: a send or sweep results file to read the time-vs-size curve from"
        );
    };
    let r = Results::read(&results)?;
    let cases = pick(&r, &a.filters, &results.display().to_string())?;
    if a.workload.names_a_stream() {
        return stream::run(&a, &results, &r, &cases);
    }
    if let Some(flag) = a.workload.stray_flag() {
        bail_usage!("{flag} describes a request stream: give --trace FILE.jsonl or --arrivals MODEL with it");
    }
    let mut sizes = a.sizes.clone();
    if sizes.tokens.is_none() && sizes.sizes.is_none() {
        bail_usage!("give the token counts to predict (--tokens 1k,32k,128k, with --model) or --sizes");
    }
    // Tokens without a model: the bytes/token the results were measured with, when they agree.
    let mut bpt_source = "--kv-bytes-per-token".to_string();
    if sizes.tokens.is_some() && sizes.model.is_none() && sizes.model_config.is_none() {
        let bpt: Vec<u64> = cases.iter().filter_map(|c| c.bytes_per_token).collect();
        if sizes.kv_bytes_per_token.is_none() && !bpt.is_empty() && bpt.iter().all(|b| *b == bpt[0]) {
            sizes.kv_bytes_per_token = Some(bpt[0]);
            let model = r.config.model.as_ref().map(|m| format!(", {m}")).unwrap_or_default();
            bpt_source = format!("{}: the bytes/token its cases were measured with{model}", results.display());
        }
    }
    let (targets, _) = super::common::resolve_cases_from(&sizes, &bpt_source)?;
    if let Some(ms) = a.decode_ms {
        if !(ms.is_finite() && ms > 0.0) {
            bail_usage!("--decode-ms {ms}: give a positive time per decode step in ms, e.g. 7");
        }
    }
    if a.decode_tokens == Some(0) {
        bail_usage!("--decode-tokens 0: give the number of tokens the transferred cache lets the receiver decode");
    }
    let curve: Vec<(f64, f64)> = cases.iter().map(|c| (c.size_bytes as f64, c.stats.transfer_ms.p50)).collect();
    // The curve keeps only positive times: a file with none (hand-edited, or a corrupt run) has nothing to predict from.
    if !curve.iter().any(|&(s, t)| s > 0.0 && t > 0.0) {
        bail_usage!("{}: no selected case has a positive p50 transfer time to predict from", results.display());
    }
    let ci = |end: usize| -> Option<Vec<(f64, f64)>> {
        cases.iter().map(|c| c.derived.p50_ci.as_ref().map(|ci| (c.size_bytes as f64, ci.transfer_ms[end]))).collect()
    };
    let (lo, hi) = (ci(0), ci(1));
    let predictions: Vec<Prediction> = targets
        .iter()
        .map(|t| {
            let s = t.size_bytes as f64;
            let (ms, basis) = log_log(&curve, s).expect("checked above: at least one positive point");
            // Outside the measured range there is no interval to speak of, only the extrapolation.
            let ci_ms = lo
                .as_ref()
                .zip(hi.as_ref())
                .filter(|_| !basis.is_extrapolated())
                .and_then(|(l, h)| Some([log_log(l, s)?.0, log_log(h, s)?.0]));
            Prediction {
                tokens: t.tokens,
                size_bytes: t.size_bytes,
                transfer_ms: ms,
                gbps: gbps(t.size_bytes, ms),
                basis,
                ci_ms,
                decode_steps: a.decode_ms.map(|d| ms / d),
                transfer_over_decode: a.decode_ms.zip(a.decode_tokens).map(|(d, n)| ms / (d * n as f64)),
            }
        })
        .collect();
    let range = [cases[0].size_bytes, cases[cases.len() - 1].size_bytes];
    if a.json {
        let out = PredictJson {
            schema: "kvxfer/predict/v1",
            results: results.display().to_string(),
            label: &r.label,
            method: METHOD,
            measured_range_bytes: range,
            decode_ms: a.decode_ms,
            decode_tokens: a.decode_tokens,
            predictions,
            replay: None,
        };
        crate::outln!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    print_table(&r.label, range, cases.len(), &predictions, a.decode_ms, a.decode_tokens);
    Ok(())
}

/// The predictions as a console table, with what the marks and the decode columns mean.
fn print_table(
    label: &str,
    range: [u64; 2],
    sizes: usize,
    predictions: &[Prediction],
    decode_ms: Option<f64>,
    decode_tokens: Option<u64>,
) {
    crate::outln!(
        "{} — measured {} .. {} ({} sizes); p50 interpolated in log-log",
        label,
        format_size(range[0]),
        format_size(range[1]),
        sizes
    );
    let mut header = vec!["tokens", "size", "est. ms", "95% CI ms", "GB/s"];
    if decode_ms.is_some() {
        header.push("decode steps");
    }
    if decode_tokens.is_some() {
        header.push("× decode");
    }
    let mut t = comfy_table::Table::new();
    t.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED).set_header(header);
    for p in predictions {
        let mark = if p.basis.is_extrapolated() { " !" } else { "" };
        let mut row = vec![
            p.tokens.map(format_tokens).unwrap_or_else(|| "-".into()),
            format_size(p.size_bytes),
            format!("{:.3}{mark}", p.transfer_ms),
            p.ci_ms.map(|c| format!("{:.3}–{:.3}", c[0], c[1])).unwrap_or_else(|| "-".into()),
            format!("{:.2}", p.gbps),
        ];
        row.extend(p.decode_steps.map(|s| format!("{s:.2}")));
        row.extend(p.transfer_over_decode.map(|x| format!("{x:.2}×")));
        t.add_row(row);
    }
    crate::outln!("{t}");
    if predictions.iter().any(|p| p.basis.is_extrapolated()) {
        crate::outln!(
            "! outside the measured range: extrapolated from the nearest two sizes; measure these sizes to trust them"
        );
    }
    if let (Some(d), Some(n)) = (decode_ms, decode_tokens) {
        crate::outln!("decode steps = est. ms ÷ {d} ms; × decode = est. ms ÷ ({n} tokens × {d} ms)");
    } else if let Some(d) = decode_ms {
        crate::outln!("decode steps = est. ms ÷ {d} ms per decode step");
    }
}

/// The complete cases of one configuration, in size order (a sweep over several needs `--where`).
fn pick<'a>(r: &'a Results, filters: &[String], file: &str) -> Result<Vec<&'a CaseResult>> {
    let mut want: Vec<(&str, &str)> = Vec::new();
    for f in filters {
        let Some((k, v)) = f.split_once('=') else {
            bail_usage!("--where {f:?}: expected key=value, e.g. transport=cuda")
        };
        want.push((k.trim(), v.trim()));
    }
    let mut cases: Vec<&CaseResult> = r
        .cases
        .iter()
        .filter(|c| c.sweep.complete && c.stats.n > 0)
        .filter(|c| want.iter().all(|(k, v)| c.sweep.params.as_ref().and_then(|p| p.get(*k)).is_some_and(|x| x == v)))
        .collect();
    if cases.is_empty() {
        bail_usage!("{file}: no measured case{}", if want.is_empty() { "" } else { " matches --where" });
    }
    cases.sort_by_key(|c| c.size_bytes);
    if let Some(w) = cases.windows(2).find(|w| w[0].size_bytes == w[1].size_bytes) {
        let names: Vec<&str> = cases
            .iter()
            .filter(|c| c.size_bytes == w[0].size_bytes)
            .map(|c| c.sweep.case_label.as_deref().unwrap_or("?"))
            .collect();
        bail_usage!(
            "{file}: {} cases at {} ({}); pick one configuration with --where key=value",
            names.len(),
            format_size(w[0].size_bytes),
            names.join("; ")
        );
    }
    Ok(cases)
}
