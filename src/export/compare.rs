//! The side-by-side table of several runs: one row per size (matched by `size_bytes`), p50 ms and GB/s of each run,
//! and each later run's p50 GB/s as a ratio of the first run's (0.50× = half the first run's bandwidth).
//! Runs are lettered A, B, C… in the order given; a legend above the table names them. Here: its rows and cells,
//! Markdown and CSV; `output::compare` draws the same cells on the console.

use super::json::Results;
use super::Exporter;
use crate::plan::sizes::{format_size, format_tokens};
use crate::stats::modes::format_gbps;
use anyhow::Result;
use std::collections::BTreeSet;

/// One size across every run: `(p50 ms, p50 GB/s)` per run, None where a run did not measure it.
pub struct Row {
    size: u64,
    tokens: Option<u64>,
    runs: Vec<Option<(f64, f64)>>,
}

/// Every run's series, in order: a sweep file's configurations each on their own, other runs whole. These are
/// the side-by-side table's runs.
pub fn series_of(runs: &[Results]) -> Vec<Results> {
    runs.iter().flat_map(|r| r.series()).map(|(_, s)| s).collect()
}

/// Run letter: A..Z, then R27, R28…
pub fn letter(i: usize) -> String {
    if i < 26 {
        ((b'A' + i as u8) as char).to_string()
    } else {
        format!("R{}", i + 1)
    }
}

pub fn rows(all: &[Results]) -> Vec<Row> {
    let sizes: BTreeSet<u64> = all.iter().flat_map(|r| r.cases.iter().map(|c| c.size_bytes)).collect();
    sizes
        .into_iter()
        .map(|size| {
            let cases: Vec<_> = all.iter().map(|r| r.cases.iter().find(|c| c.size_bytes == size)).collect();
            // Tokens only when every run that measured the size agrees (same model): otherwise they would mislead.
            let tokens: BTreeSet<Option<u64>> = cases.iter().flatten().map(|c| c.tokens).collect();
            Row {
                size,
                tokens: if tokens.len() == 1 { tokens.into_iter().next().flatten() } else { None },
                runs: cases.iter().map(|c| c.map(|c| (c.stats.transfer_ms.p50, c.stats.gbps.p50))).collect(),
            }
        })
        .collect()
}

pub fn header(n: usize) -> Vec<String> {
    let mut h = vec!["size".to_string(), "tokens".to_string()];
    for i in 0..n {
        let l = letter(i);
        h.push(format!("{l} p50 ms"));
        h.push(format!("{l} GB/s"));
        if i > 0 {
            h.push(format!("{l}/A GB/s"));
        }
    }
    h
}

pub fn cells(r: &Row) -> Vec<String> {
    let mut out = vec![format_size(r.size), r.tokens.map(format_tokens).unwrap_or_else(|| "-".into())];
    let first = r.runs[0].map(|x| x.1);
    for (i, run) in r.runs.iter().enumerate() {
        out.push(run.map(|x| format!("{:.3}", x.0)).unwrap_or_else(|| "-".into()));
        out.push(run.map(|x| format_gbps(x.1)).unwrap_or_else(|| "-".into()));
        if i > 0 {
            out.push(match (run, first) {
                (Some(x), Some(a)) if a > 0.0 => ratio(x.1 / a),
                _ => "-".into(),
            });
        }
    }
    out
}

/// "A = label (transport)" lines naming the runs.
pub fn legend(all: &[Results]) -> Vec<String> {
    all.iter().enumerate().map(|(i, r)| format!("{} = {} ({})", letter(i), r.label, r.config.transport)).collect()
}

/// The Markdown section appended to `--md` when there are several runs.
pub fn markdown(all: &[Results]) -> String {
    let h = header(all.len());
    let mut out = String::from("### Side by side\n\n");
    for l in legend(all) {
        out.push_str(&format!("- {l}\n"));
    }
    out.push_str("\np50 per size; X/A = run X's p50 GB/s divided by run A's.\n\n");
    out.push_str(&format!("| {} |\n|{}\n", h.join(" | "), h.iter().map(|_| "---:|").collect::<String>()));
    for r in rows(all) {
        out.push_str(&format!("| {} |\n", cells(&r).join(" | ")));
    }
    out.push('\n');
    out
}

/// CSV of the same table with full-precision numbers and the runs' labels in the header.
pub fn csv(all: &[Results]) -> Result<String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    let mut h = vec!["size_bytes".to_string(), "tokens".to_string()];
    for (i, r) in all.iter().enumerate() {
        h.push(format!("{} transfer_ms_p50", r.label));
        h.push(format!("{} gbps_p50", r.label));
        if i > 0 {
            h.push(format!("{} gbps_ratio_to_{}", r.label, all[0].label));
        }
    }
    w.write_record(&h)?;
    for r in rows(all) {
        let mut rec = vec![r.size.to_string(), r.tokens.map(|t| t.to_string()).unwrap_or_default()];
        let first = r.runs[0].map(|x| x.1);
        for (i, run) in r.runs.iter().enumerate() {
            rec.push(run.map(|x| format!("{:.4}", x.0)).unwrap_or_default());
            rec.push(run.map(|x| format!("{:.4}", x.1)).unwrap_or_default());
            if i > 0 {
                rec.push(match (run, first) {
                    (Some(x), Some(a)) if a > 0.0 => format!("{:.4}", x.1 / a),
                    _ => String::new(),
                });
            }
        }
        w.write_record(&rec)?;
    }
    Ok(String::from_utf8(w.into_inner()?)?)
}

/// `report --csv FILE` with several runs: the side-by-side table of their series, in FILE's `.compare.csv`.
pub struct CompareCsvExporter;

impl Exporter for CompareCsvExporter {
    fn serialize(&self, runs: &[Results]) -> Result<Vec<u8>> {
        Ok(csv(&series_of(runs))?.into_bytes())
    }
}

/// A ratio with three significant digits, so 0.0159× does not print as 0.02×.
fn ratio(r: f64) -> String {
    let digits = if r >= 100.0 {
        0
    } else if r >= 10.0 {
        1
    } else if r >= 1.0 {
        2
    } else {
        (2 - r.log10().floor() as i32).clamp(2, 6) as usize
    };
    format!("{r:.digits$}×")
}
