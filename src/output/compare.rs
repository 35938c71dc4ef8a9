//! The side-by-side table of several runs on the console: the rows and cells of [`crate::export::compare`] in a
//! boxed table under a legend naming the runs.

use crate::export::compare::{cells, header, legend, rows};
use crate::export::json::Results;
use comfy_table::{presets::UTF8_FULL_CONDENSED, CellAlignment, Table};

/// A boxed table for the console.
pub fn render(all: &[Results]) -> String {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_header(header(all.len()));
    for r in rows(all) {
        t.add_row(cells(&r));
    }
    for i in 0..t.column_count() {
        if let Some(col) = t.column_mut(i) {
            col.set_cell_alignment(CellAlignment::Right);
        }
    }
    format!("{}\n{t}", legend(all).join("\n"))
}
