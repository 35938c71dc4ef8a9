//! The cases as one table: the rows and columns of the CSV file (`--csv`), so what the page shows is what the
//! CSV holds, number for number. A header click sorts it, the box above filters it (see script.js).

use super::page::esc;
use crate::export::json::Results;
use anyhow::Result;

/// The table of every case of these runs; nothing when no run has a case.
pub fn cases(runs: &[(String, &Results)]) -> Result<String> {
    let all: Vec<Results> = runs.iter().filter(|(_, r)| !r.cases.is_empty()).map(|(_, r)| (*r).clone()).collect();
    if all.is_empty() {
        return Ok(String::new());
    }
    let text = crate::export::csv::render(&all)?;
    // The incomplete runs' comment lines are the page's warnings already.
    let body: String = text.lines().filter(|l| !l.starts_with('#')).map(|l| format!("{l}\n")).collect();
    let mut reader = csv::ReaderBuilder::new().has_headers(true).from_reader(body.as_bytes());
    let header: Vec<String> = reader.headers()?.iter().map(String::from).collect();
    let mut out = String::from(
        "<section id=\"cases\">\n<h2>Cases</h2>\n\
         <input type=\"search\" class=\"filter\" data-table=\"cases-table\" placeholder=\"filter rows\" \
         aria-label=\"filter the cases\">\n<div class=\"scroll\"><table id=\"cases-table\" class=\"sortable\">\n<thead><tr>",
    );
    for h in &header {
        out.push_str(&format!("<th data-col=\"{0}\" title=\"sort by {0}\">{0}</th>", esc(h)));
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for row in reader.records() {
        out.push_str("<tr>");
        for v in row?.iter() {
            out.push_str(&format!("<td>{}</td>", esc(v)));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody>\n</table></div>\n</section>\n");
    Ok(out)
}
