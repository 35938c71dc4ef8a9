//! Several series on one page (runs, engines, or a sweep file's configurations) side by side: the table `report`
//! prints and writes next to a CSV (`export::compare`), a row per size, each series' p50 and its GB/s as a ratio of
//! the first's, so "which engine, by how much, at which size" reads without a figure.

use super::page::esc;
use crate::export::compare::{cells, header, legend, rows, series_of};
use crate::export::json::Results;

/// The side-by-side section, or nothing when the runs make one series (or none moved a byte). Latency runs have
/// their own figures and no bandwidth to compare.
pub fn section(runs: &[(String, &Results)]) -> String {
    let transfers = runs.iter().filter(|(_, r)| !r.cases.is_empty() && r.config.mode.as_deref() != Some("latency"));
    let all: Vec<Results> = transfers.map(|(_, r)| (*r).clone()).collect();
    let series = series_of(&all);
    if series.len() < 2 {
        return String::new();
    }
    let mut out = String::from("<section id=\"side-by-side\">\n<h2>Side by side</h2>\n<ul class=\"legend\">\n");
    for l in legend(&series) {
        out.push_str(&format!("<li>{}</li>\n", esc(&l)));
    }
    out.push_str(
        "</ul>\n<p>p50 per size; X/A = series X's p50 GB/s divided by series A's. A click on a header sorts.</p>\n\
         <div class=\"scroll\"><table id=\"side-table\" class=\"sortable\">\n<thead><tr>",
    );
    for h in header(series.len()) {
        out.push_str(&format!("<th>{}</th>", esc(&h)));
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for row in rows(&series) {
        out.push_str("<tr>");
        for c in cells(&row) {
            out.push_str(&format!("<td>{}</td>", esc(&c)));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody>\n</table></div>\n</section>\n");
    out
}
