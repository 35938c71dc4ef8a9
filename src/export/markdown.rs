//! `--md`: a Markdown table per run, the form users paste into reports and issues.

use super::json::Results;
use crate::output::table::{case_cells, notes, CASE_HEADER};

pub fn render(all: &[Results]) -> String {
    let mut out = String::new();
    for r in all {
        out.push_str(&format!(
            "### {} — {} ({})\n\nBandwidth in GB/s = 10^9 bytes/s; times in ms; block = bytes per write; n = measured reps.\n\n",
            r.label, r.config.transport, r.started_at
        ));
        out.push_str(&format!("| {} |\n", CASE_HEADER.join(" | ")));
        out.push_str(&format!("|{}\n", CASE_HEADER.iter().map(|_| "---:|").collect::<String>()));
        for c in &r.cases {
            out.push_str(&format!("| {} |\n", case_cells(c).join(" | ")));
        }
        let notes = notes(&r.cases);
        if !notes.is_empty() {
            out.push_str(&format!("\n{}\n", notes.join("  \n")));
        }
        if r.cases.iter().any(|c| c.block_clamped) {
            out.push_str("\n\\* block size clamped to the transfer size\n");
        }
        if r.cases.iter().any(|c| c.layout == "paged") {
            out.push_str("\np: paged layout, block = one piece (`--block-tokens` tokens of one layer's K or V)\n");
        }
        if let Some(e) = &r.error {
            out.push_str(&format!("\nThe run stopped early: {e}\n"));
        }
        out.push('\n');
    }
    out
}
