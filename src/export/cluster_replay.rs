//! A cluster replay's side files: one CSV row per request with the ranks that moved it, and the Markdown summary of
//! `kvxfer replay` followed by each load's per-link and per-rank tables.

use crate::stats::replay::cluster::GroupSummary;
use crate::stats::replay::{load_words, ReplayJson};
use anyhow::Result;
use comfy_table::{presets::ASCII_MARKDOWN, Table};
use serde::Serialize;

/// One request as the CSV holds it: its load and link, then its times (ms from its prefill rank's start of the
/// load) and bytes.
#[derive(Serialize)]
struct Row {
    load: f64,
    id: u64,
    src: Option<usize>,
    dst: Option<usize>,
    scheduled_ms: f64,
    start_ms: f64,
    end_ms: f64,
    queue_ms: f64,
    service_ms: f64,
    latency_ms: f64,
    bytes: u64,
    cached_bytes: u64,
    pieces: u32,
    transfer_ms: f64,
    mismatched_bytes: Option<u64>,
}

/// Every request of every load, in schedule order.
pub fn requests_csv(replay: &ReplayJson) -> Result<Vec<u8>> {
    let mut w = csv::Writer::from_writer(Vec::new());
    for l in &replay.loads {
        for r in &l.requests {
            w.serialize(Row {
                load: l.load,
                id: r.id,
                src: r.src,
                dst: r.dst,
                scheduled_ms: r.scheduled_ms,
                start_ms: r.start_ms,
                end_ms: r.end_ms,
                queue_ms: r.queue_ms,
                service_ms: r.service_ms,
                latency_ms: r.latency_ms,
                bytes: r.bytes,
                cached_bytes: r.cached_bytes,
                pieces: r.pieces,
                transfer_ms: r.transfer_ms,
                mismatched_bytes: r.mismatched_bytes,
            })?;
        }
    }
    w.into_inner().map_err(|e| anyhow::anyhow!("{e}"))
}

fn cells(what: String, s: &GroupSummary) -> Vec<String> {
    let q = |v: Option<f64>| v.map_or("–".into(), |v| format!("{v:.1}"));
    vec![
        what,
        s.requests.to_string(),
        format!("{:.3}", s.bytes_moved as f64 / 1e9),
        s.gbps.map_or("–".into(), |g| format!("{g:.2}")),
        q(s.latency_ms.map(|l| l.p50)),
        q(s.latency_ms.map(|l| l.p99)),
        q(s.queue_ms.map(|l| l.p99)),
    ]
}

/// The replay's summary table, then per load one table of its links and one of its ranks.
pub fn markdown(replay: &ReplayJson) -> String {
    let mut md = super::replay::summary_markdown(replay);
    if let Some(c) = &replay.cluster {
        md.push_str(&format!(
            "\nPrefill ranks {:?}, decode ranks {:?}, route {}; one session per link. GB/s: the group's bytes over the \
             whole load's time, so the links add up to the load's achieved GB/s.\n",
            c.prefill, c.decode, c.route
        ));
    }
    for l in &replay.loads {
        let Some(c) = &l.cluster else { continue };
        let header = ["", "requests", "GB", "GB/s", "latency p50 ms", "p99 ms", "queue p99 ms"];
        let mut links = Table::new();
        links.load_preset(ASCII_MARKDOWN);
        links.set_header(["link"].iter().chain(&header[1..]).copied().collect::<Vec<_>>());
        for s in &c.links {
            links.add_row(cells(format!("{}→{}", s.src, s.dst), &s.summary));
        }
        let mut ranks = Table::new();
        ranks.load_preset(ASCII_MARKDOWN);
        ranks.set_header(["rank"].iter().chain(&header[1..]).copied().collect::<Vec<_>>());
        for s in &c.ranks {
            ranks.add_row(cells(format!("{} ({})", s.rank, s.role), &s.summary));
        }
        let words = load_words(l.load, &replay.load_unit);
        md.push_str(&format!("\n### {words}: by link\n\n{links}\n\n### {words}: by rank\n\n{ranks}\n"));
    }
    md
}
