//! The cases as one table: the rows and columns of the CSV file (`--csv`), so what the page shows is what the
//! CSV holds, number for number. A column with one value in every row is said once above the table; the rows
//! come as JSON data that the script builds the table from (as text), which keeps a 64-rank run's page small. A
//! header click sorts the table, the box above filters it (see script.js).

use super::page::esc;
use crate::export::json::Results;
use anyhow::Result;

/// The table of every case of these runs (of a cluster run past the per-link heatmap's bound, the flows its text
/// lists); nothing when no run has a case.
pub fn cases(runs: &[(String, &Results)]) -> Result<String> {
    let mut notes = String::new();
    let all: Vec<Results> =
        runs.iter().filter(|(_, r)| !r.cases.is_empty()).map(|(name, r)| listed(name, r, &mut notes)).collect();
    if all.is_empty() {
        return Ok(String::new());
    }
    let text = crate::export::csv::render(&all)?;
    // The incomplete runs' comment lines are the page's warnings already.
    let mut reader = csv::ReaderBuilder::new().comment(Some(b'#')).from_reader(text.as_bytes());
    let header: Vec<String> = reader.headers()?.iter().map(String::from).collect();
    let rows: Vec<Vec<String>> =
        reader.records().map(|r| Ok(r?.iter().map(String::from).collect())).collect::<Result<_>>()?;
    let same: Vec<usize> = if rows.len() > 1 {
        (0..header.len()).filter(|k| rows.iter().all(|r| r.get(*k) == rows[0].get(*k))).collect()
    } else {
        Vec::new()
    };
    let mut out = String::from("<section id=\"cases\">\n<h2>Cases</h2>\n");
    out.push_str(&notes);
    let said: Vec<usize> = same.iter().copied().filter(|k| rows[0].get(*k).is_some_and(|v| !v.is_empty())).collect();
    if !said.is_empty() {
        out.push_str("<p>In every row:</p>\n<ul class=\"same\">\n");
        for k in said {
            out.push_str(&format!(
                "<li data-col=\"{0}\"><b>{0}</b> <span>{1}</span></li>\n",
                esc(&header[k]),
                esc(&rows[0][k])
            ));
        }
        out.push_str("</ul>\n");
    }
    // A flow's link names its row: its columns first.
    let link = |k: &usize| !["src_rank", "src_host", "dst_rank", "dst_host"].contains(&header[*k].as_str());
    let mut shown: Vec<usize> = (0..header.len()).filter(|k| !same.contains(k)).collect();
    shown.sort_by_key(link);
    let data = serde_json::json!({
        "rows": rows.iter().map(|r| shown.iter().map(|k| r.get(*k).cloned().unwrap_or_default()).collect::<Vec<_>>()).collect::<Vec<_>>(),
    });
    // `<` only ever occurs inside JSON strings, where \u003c reads the same: no `</script>` can end the block.
    let data = serde_json::to_string(&data)?.replace('<', "\\u003c");
    out.push_str(
        "<input type=\"search\" class=\"filter\" data-table=\"cases-table\" placeholder=\"filter rows\" \
         aria-label=\"filter the cases\">\n<div class=\"scroll\">\
         <table id=\"cases-table\" class=\"sortable\" data-source=\"cases-data\">\n<thead><tr>",
    );
    for k in shown {
        out.push_str(&format!("<th data-col=\"{0}\" title=\"sort by {0}\">{0}</th>", esc(&header[k])));
    }
    out.push_str("</tr></thead>\n<tbody></tbody>\n</table></div>\n");
    out.push_str(&format!("<script type=\"application/json\" id=\"cases-data\">{data}</script>\n</section>\n"));
    Ok(out)
}

/// The run as its table shows it: whole, or past [`super::heatmap::PER_LINK_UP_TO`] links the flows the cluster
/// text lists (each size's slowest, the marked ones, those that failed verification), with a line saying so in
/// `notes`. Thousands of rows per host pair would bury those few and make the page tens of megabytes.
fn listed(name: &str, r: &Results, notes: &mut String) -> Results {
    let links = crate::stats::cluster::link_count(&r.cases);
    if r.cluster.is_none() || links <= super::heatmap::PER_LINK_UP_TO {
        return r.clone();
    }
    let keep = crate::export::cluster::summary::listed_flows(r);
    notes.push_str(&format!(
        "<p class=\"listed\">{}: {} of {} flow rows ({links} links), each size's slowest, the marked ones and any \
         that failed verification. Every flow is a row of the results JSON and CSV.</p>\n",
        esc(name),
        keep.len(),
        r.cases.len()
    ));
    r.with_cases(keep.into_iter().map(|i| r.cases[i].clone()).collect())
}
