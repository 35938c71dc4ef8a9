//! The per-size table on the console: live rows as sizes finish, and `report`'s boxed table. The cells and notes
//! are the Markdown's ([`crate::export::cells`]).

use crate::export::cells::{
    any_bidir, bidir_cells, bidir_inline, case_cells, case_name, connect_cell, BIDIR_HEADER, CASE_HEADER,
    CONNECT_HEADER,
};
use crate::measure::CaseExtras;
use crate::stats::{warnings, CaseResult};
use crate::transport::registry::NOTES;
use comfy_table::{presets::UTF8_FULL_CONDENSED, CellAlignment, Table};

/// Live row column widths, one per [`CASE_HEADER`] column.
const WIDTHS: &[usize] = &[9, 7, 3, 10, 19, 10, 10, 9, 9, 10, 8];

fn row(cells: &[String]) -> String {
    cells.iter().zip(WIDTHS).map(|(c, w)| format!("{c:>w$}")).collect::<Vec<_>>().join("  ")
}

/// The header line printed before the first live row.
pub fn live_header() -> String {
    row(&CASE_HEADER.iter().map(|s| s.to_string()).collect::<Vec<_>>())
}

/// One console row, printed as soon as a size finishes (a sweep file's case name first; warnings at the end).
pub fn live_row(c: &CaseResult) -> String {
    let mut line = row(&case_cells(c));
    if let Some(label) = &c.sweep.case_label {
        line.push_str(&format!("  {label}"));
    }
    if let Some(both) = bidir_inline(c) {
        line.push_str(&format!("  {both}"));
    }
    let name = case_name(c);
    for extra in NOTES.inline(&CaseExtras { name: &name, extras: &c.extras, writes: c.shape.writes }) {
        line.push_str(&format!("  {extra}"));
    }
    let warned = warnings::describe(&c.derived.warnings);
    if !warned.is_empty() {
        line.push_str(&format!("  {warned}"));
    }
    line
}

/// A boxed table of every case, for `report` (with a `case` column when a sweep file named its cases, and a
/// `connect ms` one when the run's transport timed its connection setup: `connect_ms`).
pub fn render(cases: &[CaseResult], connect_ms: Option<f64>) -> String {
    let named = cases.iter().any(|c| c.sweep.case_label.is_some());
    let bidir = any_bidir(cases);
    let mut t = Table::new();
    let mut header = CASE_HEADER.to_vec();
    if bidir {
        header.extend(BIDIR_HEADER);
    }
    if connect_ms.is_some() {
        header.push(CONNECT_HEADER);
    }
    if named {
        header.push("case");
    }
    t.load_preset(UTF8_FULL_CONDENSED).set_header(header.clone());
    for c in cases {
        let mut cells = case_cells(c);
        if bidir {
            cells.extend(bidir_cells(c));
        }
        cells.extend(connect_ms.map(connect_cell));
        if named {
            cells.push(c.sweep.case_label.clone().unwrap_or_default());
        }
        t.add_row(cells);
    }
    let numeric = CASE_HEADER.len() + if bidir { BIDIR_HEADER.len() } else { 0 } + usize::from(connect_ms.is_some());
    for i in 0..numeric {
        if let Some(col) = t.column_mut(i) {
            col.set_cell_alignment(CellAlignment::Right);
        }
    }
    t.to_string()
}
