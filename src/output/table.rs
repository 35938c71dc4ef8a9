//! The per-size table: the same cells for live console rows, `report`, and Markdown.

use crate::plan::sizes::{format_size, format_tokens};
use crate::stats::{ceiling, modes::format_gbps, CaseResult};
use comfy_table::{presets::UTF8_FULL_CONDENSED, CellAlignment, Table};

pub const CASE_HEADER: &[&str] =
    &["size", "tokens", "n", "p50 ms", "min ms", "max ms", "p50 GB/s", "max GB/s", "block", "verified"];
const WIDTHS: &[usize] = &[9, 7, 3, 10, 10, 10, 9, 9, 10, 8];

fn ms(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

pub fn case_cells(c: &CaseResult) -> Vec<String> {
    vec![
        format_size(c.size_bytes),
        c.tokens.map(format_tokens).unwrap_or_else(|| "-".into()),
        c.n.to_string(),
        ms(c.transfer_ms.p50),
        ms(c.transfer_ms.min),
        ms(c.transfer_ms.max),
        format!("{:.2}", c.gbps.p50),
        format!("{:.2}", c.gbps.max),
        // Paged cases (issue F) are marked `p`: their block is one piece of one layer's K or V.
        format!(
            "{}{}",
            format_size(c.block_size),
            if c.block_clamped {
                "*"
            } else if c.layout == "paged" {
                " p"
            } else {
                ""
            }
        ),
        match (c.verified, c.mismatched_bytes) {
            (Some(true), _) => "ok".into(),
            (Some(false), Some(n)) => format!("{n} bad"),
            _ => "-".into(),
        },
    ]
}

fn row(cells: &[String]) -> String {
    cells.iter().zip(WIDTHS).map(|(c, w)| format!("{c:>w$}")).collect::<Vec<_>>().join("  ")
}

/// The header line printed before the first live row.
pub fn live_header() -> String {
    row(&CASE_HEADER.iter().map(|s| s.to_string()).collect::<Vec<_>>())
}

/// One console row, printed as soon as a size finishes (bimodal sizes say so at the end of the row).
pub fn live_row(c: &CaseResult) -> String {
    match c.bimodal.describe() {
        Some(modes) => format!("{}  ⚠ bimodal {modes}", row(&case_cells(c))),
        None => row(&case_cells(c)),
    }
}

/// The lines printed under a run's table: its ceiling and every bimodal size.
pub fn notes(cases: &[CaseResult]) -> Vec<String> {
    ceiling_note(cases).into_iter().chain(cases.iter().filter_map(bimodal_note)).collect()
}

/// "ceiling 394.1 GB/s (p50 flat within ±5% from 96 MiB to 12 GiB)", when the run has a plateau.
pub fn ceiling_note(cases: &[CaseResult]) -> Option<String> {
    ceiling(cases).map(|c| {
        format!(
            "ceiling {} GB/s (p50 flat within ±5% from {} to {})",
            format_gbps(c.gbps),
            format_size(c.first_size),
            format_size(c.last_size)
        )
    })
}

/// "⚠ bimodal at 12 GiB: 3.41 / 9.70 GB/s (2 + 3 of 5 reps)", when the size is bimodal.
pub fn bimodal_note(c: &CaseResult) -> Option<String> {
    let modes = c.bimodal.describe()?;
    let counts: Vec<String> = c.bimodal.counts.iter().map(|n| n.to_string()).collect();
    Some(format!("⚠ bimodal at {}: {modes} ({} of {} reps)", format_size(c.size_bytes), counts.join(" + "), c.n))
}

/// A boxed table of every case, for `report`.
pub fn render(cases: &[CaseResult]) -> String {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_header(CASE_HEADER.to_vec());
    for c in cases {
        t.add_row(case_cells(c));
    }
    for i in 0..CASE_HEADER.len() {
        if let Some(col) = t.column_mut(i) {
            col.set_cell_alignment(CellAlignment::Right);
        }
    }
    t.to_string()
}
