//! `--md`: a Markdown table per run, the form users paste into reports and issues.

use super::cells::{
    any_bidir, bidir_cells, case_cells, connect_cell, connect_ms, notes, BIDIR_HEADER, CASE_HEADER, CONNECT_HEADER,
};
use super::compare;
use super::json::Results;
use super::Exporter;
use crate::measure::ExtrasNotes;
use crate::plan::paged::Layout;
use anyhow::Result;

/// Every run's section (`extras`: what the transports say about their cases' extras).
pub fn render(all: &[Results], extras: &dyn ExtrasNotes) -> String {
    let mut out = String::new();
    for r in all {
        if let Some(cl) = &r.cluster {
            out.push_str(&super::cluster::markdown(r, cl));
            continue;
        }
        if let Some(note) = r.incomplete_note() {
            out.push_str(&format!("> **{note}**\n\n"));
        }
        out.push_str(&format!(
            "### {} — {} ({})\n\nBandwidth in GB/s = 10^9 bytes/s; times in ms; block = bytes per write; n = measured reps.\n\n",
            r.label, r.config.transport, r.started_at
        ));
        // A sweep file names its cases: say which configuration each row measured, by name and by each parameter
        // that varies across the file.
        let named = r.cases.iter().any(|c| c.sweep.case_label.is_some());
        let varying = if named { r.varying_params() } else { Vec::new() };
        let bidir = any_bidir(&r.cases);
        let mut header = CASE_HEADER.to_vec();
        if bidir {
            header.extend(BIDIR_HEADER);
        }
        let connect = connect_ms(&r.config.transport_detail);
        if connect.is_some() {
            header.push(CONNECT_HEADER);
        }
        if named {
            header.push("case");
            header.extend(varying.iter().map(String::as_str));
        }
        out.push_str(&format!("| {} |\n", header.join(" | ")));
        out.push_str(&format!("|{}\n", header.iter().map(|_| "---:|").collect::<String>()));
        for c in &r.cases {
            let mut cells = case_cells(c);
            if bidir {
                cells.extend(bidir_cells(c));
            }
            cells.extend(connect.map(connect_cell));
            if named {
                cells.push(c.sweep.case_label.clone().unwrap_or_default());
                let value = |k: &String| c.sweep.params.as_ref().and_then(|p| p.get(k)).cloned().unwrap_or_default();
                cells.extend(varying.iter().map(value));
            }
            out.push_str(&format!("| {} |\n", cells.join(" | ")));
        }
        let notes = notes(&r.cases, extras);
        if !notes.is_empty() {
            out.push_str(&format!("\n{}\n", notes.join("  \n")));
        }
        if r.cases.iter().any(|c| c.shape.block_clamped) {
            out.push_str("\n\\* block size clamped to the transfer size\n");
        }
        if r.cases.iter().any(|c| c.shape.layout == Layout::Paged) {
            out.push_str("\np: paged layout, block = one piece (`--block-tokens` tokens of one layer's K or V)\n");
        }
        if let (Some(e), None) = (&r.error, &r.interrupted) {
            out.push_str(&format!("\nThe run stopped early: {e}\n"));
        }
        out.push('\n');
        let series = compare::series_of(std::slice::from_ref(r));
        if series.len() > 1 {
            out.push_str(&compare::markdown(&series));
        }
    }
    out
}

/// `--md`: a section per run; several runs (`report a.json b.json`) get one side-by-side table across all of them
/// after their sections.
pub struct MarkdownExporter {
    pub extras: &'static dyn ExtrasNotes,
}

impl Exporter for MarkdownExporter {
    fn serialize(&self, runs: &[Results]) -> Result<Vec<u8>> {
        let mut md = render(runs, self.extras);
        if runs.len() > 1 {
            md.push_str(&compare::markdown(&compare::series_of(runs)));
        }
        Ok(md.into_bytes())
    }
}
