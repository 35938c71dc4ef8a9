//! A replay's side files: one CSV row per request (every load and repetition), and the per-load summary as a
//! Markdown table. A layer-wise replay's rows also carry each request's prefill end and latency after it, and its
//! table's latency columns say they count from the prefill's end.

use crate::stats::replay::{load_words, LatencyFrom, LoadSummary, PoolJson, ReplayJson};
use anyhow::Result;
use comfy_table::{presets::ASCII_MARKDOWN, Table};
use serde::Serialize;

/// One request as the CSV holds it: its load, then the record's fields (times in ms from the load's start).
#[derive(Serialize)]
struct Row {
    load: f64,
    repeat: u32,
    id: u64,
    scheduled_ms: f64,
    start_ms: f64,
    end_ms: f64,
    queue_ms: f64,
    service_ms: f64,
    latency_ms: f64,
    bytes: u64,
    cached_bytes: u64,
    pieces: u32,
    lane: u32,
    lag_ms: Option<f64>,
    transfer_ms: f64,
    mismatched_bytes: Option<u64>,
}

/// A layer-wise request's columns after the record's.
#[derive(Serialize)]
struct AfterPrefill {
    prefill_end_ms: Option<f64>,
    after_prefill_ms: Option<f64>,
}

/// A paged request's columns after the record's.
#[derive(Serialize)]
struct Pool {
    pool_wait_ms: Option<f64>,
    blocks: Option<u64>,
}

/// Every request of every load, in the order they ran.
pub fn requests_csv(replay: &ReplayJson) -> Result<Vec<u8>> {
    let mut w = csv::Writer::from_writer(Vec::new());
    for l in &replay.loads {
        for r in &l.requests {
            let row = Row {
                load: l.load,
                repeat: l.repeat,
                id: r.id,
                scheduled_ms: r.scheduled_ms,
                start_ms: r.start_ms,
                end_ms: r.end_ms,
                queue_ms: r.queue_ms,
                service_ms: r.service_ms,
                latency_ms: r.latency_ms,
                bytes: r.bytes,
                cached_bytes: r.cached_bytes,
                pieces: r.pieces,
                lane: r.lane,
                lag_ms: r.lag_ms,
                transfer_ms: r.transfer_ms,
                mismatched_bytes: r.mismatched_bytes,
            };
            let pool = Pool { pool_wait_ms: r.pool_wait_ms, blocks: r.blocks };
            match replay.latency {
                LatencyFrom::Arrival if replay.pool.is_some() => w.serialize((row, pool))?,
                LatencyFrom::Arrival => w.serialize(row)?,
                LatencyFrom::PrefillEnd => w.serialize((
                    row,
                    AfterPrefill { prefill_end_ms: r.prefill_end_ms, after_prefill_ms: r.after_prefill_ms },
                ))?,
            }
        }
    }
    w.into_inner().map_err(|e| anyhow::anyhow!("{e}"))
}

/// A paged replay's pool: how it was modelled, and per load its high-water and the requests' waits for blocks.
fn pool_markdown(replay: &ReplayJson, pool: &PoolJson) -> String {
    let loads: Vec<String> = replay
        .pooled
        .iter()
        .filter_map(|p| {
            let s = p.summary.pool.as_ref()?;
            let wait = s.wait_ms.map_or("–".into(), |q| format!("p50 {:.2} ms, p99 {:.2} ms", q.p50, q.p99));
            Some(format!(
                "{}: high-water {} blocks ({:.0}%), {} request(s) waited, pool wait {wait}",
                load_words(p.load, &replay.load_unit),
                s.high_water_blocks,
                s.high_water * 100.0,
                s.waited
            ))
        })
        .collect();
    format!(
        "\nPool (paged): {} blocks of {} tokens, blocks held {} ms per output token after the last byte landed; {}.\n",
        pool.blocks,
        pool.block_tokens,
        pool.decode_ms_per_token,
        loads.join("; ")
    )
}

fn num(v: Option<f64>, digits: usize) -> String {
    v.map_or("–".into(), |v| format!("{v:.digits$}"))
}

/// One line of the summary table.
fn cells(load: f64, s: &LoadSummary) -> Vec<String> {
    let l = s.latency_ms;
    let mut note = String::new();
    if s.saturated {
        note = "saturated".into();
    } else if s.cutoff.is_some() {
        note = "interrupted".into();
    }
    vec![
        format!("{load}"),
        s.requests.to_string(),
        num(s.offered_gbps, 2),
        num(s.achieved_gbps, 2),
        num(l.map(|q| q.p50), 1),
        num(l.map(|q| q.p90), 1),
        num(l.map(|q| q.p99), 1),
        num(l.map(|q| q.max), 1),
        num(s.queue_ms.map(|q| q.p99), 1),
        num(s.service_ms.map(|q| q.p50), 1),
        s.utilization.map_or("–".into(), |u| format!("{:.0}%", u * 100.0)),
        s.slo.map_or("–".into(), |slo| format!("{:.1}%", slo.attained * 100.0)),
        note,
    ]
}

/// Each load's pooled summary (all its repetitions), the knee under it.
pub fn summary_markdown(replay: &ReplayJson) -> String {
    let mut t = Table::new();
    t.load_preset(ASCII_MARKDOWN);
    let p50 = format!("{} p50 ms", replay.latency.label());
    t.set_header(vec![
        replay.load_unit.as_str(),
        "requests",
        "offered GB/s",
        "achieved GB/s",
        p50.as_str(),
        "p90 ms",
        "p99 ms",
        "max ms",
        "queue p99 ms",
        "service p50 ms",
        "utilization",
        "SLO met",
        "note",
    ]);
    for p in &replay.pooled {
        t.add_row(cells(p.load, &p.summary));
    }
    let layerwise = match &replay.layerwise {
        Some(l) => format!(", layer-wise ({} layers, prefill at {} tokens/s)", l.layers, l.prefill_tokens_per_s),
        None => String::new(),
    };
    // A paged replay's region is its pool.
    let region = if replay.pool.is_some() { "pool of" } else { "region" };
    let mut md = format!(
        "Latency: {}, {} session(s), {region} {} per end and session{layerwise}.\n\n{t}\n",
        replay.latency.words(),
        replay.max_inflight,
        crate::plan::sizes::format_size(replay.region_bytes)
    );
    if let Some(c) = &replay.ceiling {
        md.push_str(&format!("\nCeiling: {:.2} GB/s ({}).\n", c.gbps, c.source));
    }
    if let Some(pool) = &replay.pool {
        md.push_str(&pool_markdown(replay, pool));
    }
    let ratios: Vec<String> = replay
        .pooled
        .iter()
        .filter_map(|p| {
            let r = p.predicted.as_ref()?;
            Some(format!("{}: p50 {:.2}×, p99 {:.2}×", load_words(p.load, &replay.load_unit), r.p50_ratio, r.p99_ratio))
        })
        .collect();
    if !ratios.is_empty() {
        let basis = replay.pooled.iter().find_map(|p| p.predicted.as_ref().map(|r| r.basis));
        let from = basis.map_or("the ceiling alone", |b| b.words());
        md.push_str(&format!(
            "\nPredicted from {from} (a queueing simulation of the same schedule) ÷ measured: {}.\n",
            ratios.join("; ")
        ));
    }
    match &replay.knee {
        Some(k) => md.push_str(&format!("\nKnee: {} — {}.\n", load_words(k.load, &replay.load_unit), k.why)),
        None => md.push_str("\nKnee: none within these loads.\n"),
    }
    md
}
