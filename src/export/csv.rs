//! `--csv`: one row per case, flat columns for spreadsheets and pandas.

use super::json::Results;
use super::Exporter;
use anyhow::Result;

const HEADER: &[&str] = &[
    "label",
    "transport",
    "size_bytes",
    "tokens",
    "bytes_per_token",
    "n",
    "block_size",
    "transfer_ms_p50",
    "transfer_ms_p90",
    "transfer_ms_p99",
    "transfer_ms_min",
    "transfer_ms_max",
    "transfer_ms_mean",
    "transfer_ms_stdev",
    "gbps_p50",
    "gbps_min",
    "gbps_max",
    "gbps_mean",
    "setup_ms_p50",
    "notify_ms_p50",
    "total_ms_p50",
    "block_latency_us_p50",
    "block_latency_us_p99",
    "verified",
    "mismatched_bytes",
    "layout",
    "pieces",
    "piece_bytes",
    "writes",
];

/// Appended when a run is a cluster run (`kvxfer cluster`): where each flow ran.
const CLUSTER_HEADER: &[&str] =
    &["src_rank", "src_host", "src_gpu", "dst_rank", "dst_host", "dst_gpu", "pattern", "step", "flows", "outlier"];

/// The cluster columns of a case (empty for a case of another command).
fn cluster_cells(c: &crate::stats::CaseResult) -> Vec<String> {
    let Some(f) = &c.cluster else { return vec![String::new(); CLUSTER_HEADER.len()] };
    let gpu = |g: Option<u32>| g.map(|i| i.to_string()).unwrap_or_default();
    vec![
        f.src.rank.to_string(),
        f.src.host.clone(),
        gpu(f.src.gpu),
        f.dst.rank.to_string(),
        f.dst.host.clone(),
        gpu(f.dst.gpu),
        f.pattern.to_string(),
        f.step.to_string(),
        f.flows.to_string(),
        f.outlier.clone().unwrap_or_default(),
    ]
}

/// Render one or more results as CSV (bandwidth in GB/s = 10^9 B/s, times in ms).
pub fn render(all: &[Results]) -> Result<String> {
    // An unfinished run says so before anything else, on comment lines (pandas: comment="#"); a finished run's
    // file is plain CSV.
    let mut head = String::new();
    for r in all {
        if let Some(note) = r.incomplete_note() {
            head.push_str(&format!("# {}: {}\n", r.label.replace('\n', " "), note));
        }
    }
    let mut w = csv::Writer::from_writer(head.into_bytes());
    let cluster = all.iter().any(|r| r.cluster.is_some());
    let mut header = HEADER.to_vec();
    if cluster {
        header.extend(CLUSTER_HEADER);
    }
    w.write_record(&header)?;
    let opt = |v: Option<u64>| v.map(|x| x.to_string()).unwrap_or_default();
    for r in all {
        for c in &r.cases {
            let t = &c.transfer_ms;
            let lat = c.block_latency_us;
            let mut row = vec![
                r.label.clone(),
                r.config.transport.clone(),
                c.size_bytes.to_string(),
                opt(c.tokens),
                opt(c.bytes_per_token),
                c.n.to_string(),
                c.block_size.to_string(),
                format!("{:.4}", t.p50),
                format!("{:.4}", t.p90),
                format!("{:.4}", t.p99),
                format!("{:.4}", t.min),
                format!("{:.4}", t.max),
                format!("{:.4}", t.mean),
                format!("{:.4}", t.stdev),
                format!("{:.4}", c.gbps.p50),
                format!("{:.4}", c.gbps.min),
                format!("{:.4}", c.gbps.max),
                format!("{:.4}", c.gbps.mean),
                format!("{:.4}", c.setup_ms.p50),
                format!("{:.4}", c.notify_ms.p50),
                format!("{:.4}", c.total_ms.p50),
                lat.map(|l| format!("{:.0}", l.p50)).unwrap_or_default(),
                lat.map(|l| format!("{:.0}", l.p99)).unwrap_or_default(),
                c.verified.map(|v| v.to_string()).unwrap_or_default(),
                opt(c.mismatched_bytes),
                c.layout.name().to_string(),
                c.pieces.to_string(),
                c.piece_bytes.to_string(),
                c.writes.to_string(),
            ];
            if cluster {
                row.extend(cluster_cells(c));
            }
            w.write_record(&row)?;
        }
    }
    Ok(String::from_utf8(w.into_inner()?)?)
}

/// `--csv`: one row per case of every run.
pub struct CsvExporter;

impl Exporter for CsvExporter {
    fn serialize(&self, runs: &[Results]) -> Result<Vec<u8>> {
        Ok(render(runs)?.into_bytes())
    }
}
