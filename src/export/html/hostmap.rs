//! A cluster run past [`super::heatmap::PER_LINK_UP_TO`] links as the page draws it: one cell per (source host,
//! destination host) at the largest size, shaded by the median of its links' p50 GB/s, outlined red when one of its
//! links is slow and dashed when one is bimodal. A 1,000-rank run under `pairs` has 999,000 links: a cell each would
//! make a page of hundreds of megabytes and cells under a pixel, where a host pair stays a cell a reader can point at.
//! The pairs' numbers travel once as JSON (each cell names its pair by index), and the tooltip names the pair, its
//! spread and its slowest link (script.js).

use super::heatmap::{labelled, shade, short, MAX_SIDE, MIN_SIDE};
use super::page::esc;
use crate::export::cluster::slow_rule;
use crate::export::json::Results;
use crate::plan::sizes::format_size;
use crate::stats::cluster::{host_pairs, ClusterJson, SizeMedian};

const LEFT: usize = 170;
const TOP: usize = 40;
const GRID: usize = 760;
const COLUMN_GAP: usize = 28;
const ROW_GAP: usize = 14;

/// The host map's section; `links` is how many the run measured.
pub fn section(r: &Results, cl: &ClusterJson, links: usize) -> String {
    let mut out = String::from("<section class=\"heatmap\">\n<h2>Cluster heatmap, per host pair</h2>\n");
    let pairs = host_pairs(&r.cases, &cl.ranks);
    let Some(size) = pairs.iter().map(|p| p.size_bytes).max() else {
        out.push_str("<p class=\"warning\">No flow completed: there is no link to show.</p>\n</section>\n");
        return out;
    };
    let pairs: Vec<_> = pairs.into_iter().filter(|p| p.size_bytes == size).collect();
    // Hosts in rank order (then any only a flow names), as the rows of the per-link heatmap would group them.
    let mut hosts: Vec<String> = Vec::new();
    let mut index: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for h in cl.ranks.iter().map(|e| &e.host).chain(pairs.iter().flat_map(|p| [&p.src_host, &p.dst_host])) {
        index.entry(h.as_str()).or_insert_with(|| {
            hosts.push(h.clone());
            hosts.len() - 1
        });
    }
    let median = SizeMedian::at_size(&r.cases, size);
    out.push_str(&format!(
        "<p>{links} links on {} hosts: one cell per host pair (rows: source host, columns: destination host, \
         numbered as the rows), shaded by the median of its links' p50 GB/s at {}; outlined red: a link of the \
         pair is slow ({}); dashed: one has bimodal reps. Point at a cell for the pair and its slowest link. \
         Every link is a row of the results JSON and CSV.</p>\n",
        hosts.len(),
        esc(&format_size(size)),
        esc(&slow_rule(median))
    ));
    out.push_str(
        "<label>zoom <input type=\"range\" class=\"zoom\" min=\"1\" max=\"4\" step=\"0.25\" value=\"1\"></label>\n",
    );
    let n = hosts.len();
    let side = (GRID / n.max(1)).clamp(MIN_SIDE, MAX_SIDE);
    let (w, h) = (LEFT + side * n + 20, TOP + side * n + 20);
    out.push_str(&format!(
        "<svg class=\"heatmap-svg host-map\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" data-hosts=\"{n}\" \
         role=\"img\" aria-label=\"median p50 GB/s per host pair\">\n"
    ));
    let every: Vec<usize> = (0..n).collect();
    out.push_str("<g class=\"ticks cols\">");
    for d in (0..n).filter(|d| labelled(*d, COLUMN_GAP.div_ceil(side).max(1), &every[..1])) {
        out.push_str(&format!("<text x=\"{}\" y=\"{}\">{d}</text>", LEFT + side * d + side / 2, TOP - 6));
    }
    out.push_str("</g>\n<g class=\"ticks rows\">");
    for s in (0..n).filter(|s| labelled(*s, ROW_GAP.div_ceil(side).max(1), &every[..1])) {
        let name = format!("{s} {}", short(&hosts[s], 20));
        out.push_str(&format!("<text x=\"{}\" y=\"{}\">{}</text>", LEFT - 6, TOP + side * s + side / 2, esc(&name)));
    }
    out.push_str("</g>\n");
    out.push_str(&format!("<rect class=\"bg\" x=\"{LEFT}\" y=\"{TOP}\" width=\"{0}\" height=\"{0}\"/>\n", side * n));
    let top = pairs.iter().map(|p| p.median_gbps).fold(0.0, f64::max);
    let mut data = Vec::with_capacity(pairs.len());
    for (k, p) in pairs.iter().enumerate() {
        let (s, d) = (index[p.src_host.as_str()], index[p.dst_host.as_str()]);
        let class = match (p.slow > 0, p.bimodal > 0) {
            (true, _) => " class=\"slow\"",
            (false, true) => " class=\"bimodal\"",
            _ => "",
        };
        out.push_str(&format!(
            "<rect{class} x=\"{}\" y=\"{}\" width=\"{side}\" height=\"{side}\" fill=\"{}\" data-pair=\"{k}\"/>\n",
            LEFT + side * d,
            TOP + side * s,
            shade(if top > 0.0 { p.median_gbps / top } else { 0.0 }),
        ));
        let round = |g: f64| (g * 1000.0).round() / 1000.0;
        data.push(serde_json::json!([
            s,
            d,
            p.links,
            round(p.median_gbps),
            round(p.min_gbps),
            round(p.max_gbps),
            p.slow,
            p.bimodal,
            format!("{}→{}", p.worst.0, p.worst.1),
            round(p.worst.2),
        ]));
    }
    out.push_str("</svg>\n");
    let data = serde_json::json!({ "hosts": hosts, "pairs": data });
    // `<` only ever occurs inside JSON strings, where \u003c reads the same: no `</script>` can end the block.
    let data = serde_json::to_string(&data).unwrap_or_default().replace('<', "\\u003c");
    out.push_str(&format!("<script type=\"application/json\" class=\"hostmap-data\">{data}</script>\n</section>\n"));
    out
}
