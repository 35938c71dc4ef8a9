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

/// Appended when a run is bidirectional (`--bidir`): the reverse direction's rates and both directions' at once.
const BIDIR_HEADER: &[&str] = &[
    "reverse_gbps_p50",
    "reverse_gbps_min",
    "reverse_gbps_max",
    "aggregate_gbps_p50",
    "aggregate_gbps_min",
    "aggregate_gbps_max",
    "reverse_mismatched_bytes",
];

/// The bidirectional columns of a case (empty for a one-way case).
fn bidir_cells(c: &crate::stats::CaseResult) -> Vec<String> {
    let Some(b) = &c.bidir else { return vec![String::new(); BIDIR_HEADER.len()] };
    let (r, a) = (&b.reverse_gbps, &b.aggregate_gbps);
    let mut cells: Vec<String> = [r.p50, r.min, r.max, a.p50, a.min, a.max].iter().map(|v| format!("{v:.4}")).collect();
    cells.push(b.reverse_mismatched_bytes.map(|n| n.to_string()).unwrap_or_default());
    cells
}

/// Appended when a run is a sweep file's: which case each row is, then one `param_<key>` column per parameter
/// that varies across the file's cases.
const SWEEP_HEADER: &[&str] = &["case_id", "case"];

/// The varying parameters of every sweep-file run among `all`, each once, in key order.
fn varying_params(all: &[Results]) -> Vec<String> {
    let keys: std::collections::BTreeSet<String> = all.iter().flat_map(Results::varying_params).collect();
    keys.into_iter().collect()
}

/// The sweep columns of a case: its id, its name and its value of each varying parameter (empty where it has none).
fn sweep_cells(c: &crate::stats::CaseResult, varying: &[String]) -> Vec<String> {
    let mut cells = vec![
        c.sweep.case_id.map(|i| i.to_string()).unwrap_or_default(),
        c.sweep.case_label.clone().unwrap_or_default(),
    ];
    cells.extend(varying.iter().map(|k| c.sweep.params.as_ref().and_then(|p| p.get(k)).cloned().unwrap_or_default()));
    cells
}

/// Render one or more results as CSV (bandwidth in GB/s = 10^9 B/s, times in ms). The columns are documented in
/// docs/results.md.
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
    let sweep = all.iter().any(|r| r.sweep.is_some());
    let varying = varying_params(all);
    let bidir = all.iter().any(|r| r.cases.iter().any(|c| c.bidir.is_some()));
    let mut header: Vec<String> = HEADER.iter().map(|h| h.to_string()).collect();
    if bidir {
        header.extend(BIDIR_HEADER.iter().map(|h| h.to_string()));
    }
    if cluster {
        header.extend(CLUSTER_HEADER.iter().map(|h| h.to_string()));
    }
    if sweep {
        header.extend(SWEEP_HEADER.iter().map(|h| h.to_string()));
        header.extend(varying.iter().map(|k| format!("param_{k}")));
    }
    w.write_record(&header)?;
    let opt = |v: Option<u64>| v.map(|x| x.to_string()).unwrap_or_default();
    for r in all {
        for c in &r.cases {
            let t = &c.stats.transfer_ms;
            let lat = c.stats.block_latency_us;
            let mut row = vec![
                r.label.clone(),
                r.case_transport(c),
                c.size_bytes.to_string(),
                opt(c.tokens),
                opt(c.bytes_per_token),
                c.stats.n.to_string(),
                c.shape.block_size.to_string(),
                format!("{:.4}", t.p50),
                format!("{:.4}", t.p90),
                format!("{:.4}", t.p99),
                format!("{:.4}", t.min),
                format!("{:.4}", t.max),
                format!("{:.4}", t.mean),
                format!("{:.4}", t.stdev),
                format!("{:.4}", c.stats.gbps.p50),
                format!("{:.4}", c.stats.gbps.min),
                format!("{:.4}", c.stats.gbps.max),
                format!("{:.4}", c.stats.gbps.mean),
                format!("{:.4}", c.stats.setup_ms.p50),
                format!("{:.4}", c.stats.notify_ms.p50),
                format!("{:.4}", c.stats.total_ms.p50),
                lat.map(|l| format!("{:.0}", l.p50)).unwrap_or_default(),
                lat.map(|l| format!("{:.0}", l.p99)).unwrap_or_default(),
                c.check.verified.map(|v| v.to_string()).unwrap_or_default(),
                opt(c.check.mismatched_bytes),
                c.shape.layout.name().to_string(),
                c.shape.pieces.to_string(),
                c.shape.piece_bytes.to_string(),
                c.shape.writes.to_string(),
            ];
            if bidir {
                row.extend(bidir_cells(c));
            }
            if cluster {
                row.extend(cluster_cells(c));
            }
            if sweep {
                row.extend(sweep_cells(c, &varying));
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
