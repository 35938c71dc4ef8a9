//! A cluster run's heatmap as the page draws it: the cells `--fig`'s heatmap shades (p50 GB/s per link at the
//! largest size, rows = source, columns = destination), one `<rect>` per link carrying its numbers in `data-*`
//! attributes, so pointing at a cell names its link (script.js). Ranks are grouped by host with a line between
//! hosts; the cell side shrinks with the ranks but not below [`MIN_SIDE`], and tick labels are thinned so that
//! no two come closer than a label's width (each host's first rank always named). Past [`PER_LINK_UP_TO`] links
//! the page draws one cell per host pair instead (see `hostmap`).

use super::page::esc;
use crate::export::cluster::{mark_text, matrix_cells, rank_name, slow_rule};
use crate::export::json::Results;
use crate::plan::sizes::format_size;
use crate::stats::cluster::{ClusterJson, SizeMedian};
use crate::stats::CaseResult;

/// Room left of the grid for the row labels, and above it for host names and column labels.
const LEFT: usize = 130;
const TOP: usize = 56;
/// The grid's planned width; cells stay within [MIN_SIDE, MAX_SIDE].
const GRID: usize = 760;
/// Up to this many links the page draws one cell per link: 8 hosts × 8 GPUs under `pairs` is 4,032.
pub const PER_LINK_UP_TO: usize = 4032;
pub(super) const MIN_SIDE: usize = 6;
pub(super) const MAX_SIDE: usize = 40;
/// Closest spacing of two column (two row) labels' centres, in pixels, at the labels' 11 px font.
const COLUMN_GAP: usize = 28;
const ROW_GAP: usize = 14;

/// The heatmap's section; a run with no completed flow says so instead.
pub fn section(r: &Results, cl: &ClusterJson) -> String {
    let mut out = String::from("<section class=\"heatmap\">\n<h2>Cluster heatmap</h2>\n");
    let Some((size, cells)) = matrix_cells(r, cl.world_size) else {
        out.push_str("<p class=\"warning\">No flow completed: there is no link to show.</p>\n</section>\n");
        return out;
    };
    let median = SizeMedian::at_size(&r.cases, size);
    out.push_str(&format!(
        "<p>p50 GB/s per link at {} (rows: source, columns: destination); outlined red: {}; dashed: bimodal reps. \
         Point at a cell for its link.</p>\n",
        esc(&format_size(size)),
        esc(&slow_rule(median))
    ));
    out.push_str(
        "<label>zoom <input type=\"range\" class=\"zoom\" min=\"1\" max=\"4\" step=\"0.25\" value=\"1\"></label>\n",
    );
    out.push_str(&svg(r, cl, size, &cells));
    out.push_str("</section>\n");
    out
}

/// The case of each link at `size` (the last one, as the matrix takes it).
fn link_cases(r: &Results, n: usize, size: u64) -> Vec<Vec<Option<&CaseResult>>> {
    let mut at = vec![vec![None; n]; n];
    for c in r.cases.iter().filter(|c| c.size_bytes == size) {
        if let Some(f) = c.cluster.as_ref().filter(|f| f.src.rank < n && f.dst.rank < n) {
            at[f.src.rank][f.dst.rank] = Some(c);
        }
    }
    at
}

/// Where each host's block of ranks starts.
fn block_starts(hosts: &[String]) -> Vec<usize> {
    (0..hosts.len()).filter(|i| *i == 0 || hosts[*i] != hosts[i - 1]).collect()
}

/// Whether rank `i` is labelled when every `k`-th is: each block's first, then every k-th after it that keeps
/// `k` ranks from the next block's first.
pub(super) fn labelled(i: usize, k: usize, starts: &[usize]) -> bool {
    let start = starts.iter().rev().find(|s| **s <= i).copied().unwrap_or(0);
    let next = starts.iter().find(|s| **s > i).copied().unwrap_or(usize::MAX);
    i == start || ((i - start) % k == 0 && next - i >= k)
}

/// White for 0, dark blue for the fastest link (the `--fig` heatmap's scale).
pub(super) fn shade(fraction: f64) -> String {
    let f = if fraction.is_finite() { fraction.clamp(0.0, 1.0) } else { 0.0 };
    let mix = |dark: f64| (255.0 - (255.0 - dark) * f).round() as u8;
    format!("#{:02x}{:02x}{:02x}", mix(0.0), mix(70.0), mix(140.0))
}

/// A name cut to `max` characters, so a long host name cannot run over its neighbours.
pub(super) fn short(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(max - 1).collect::<String>())
    }
}

fn svg(r: &Results, cl: &ClusterJson, size: u64, cells: &[Vec<Option<crate::export::cluster::Cell>>]) -> String {
    let n = cl.world_size.max(1);
    let side = (GRID / n).clamp(MIN_SIDE, MAX_SIDE);
    let hosts: Vec<String> = (0..n).map(|i| cl.ranks.get(i).map(|e| e.host.clone()).unwrap_or_default()).collect();
    let names: Vec<String> = (0..n).map(|i| cl.ranks.get(i).map(rank_name).unwrap_or_else(|| i.to_string())).collect();
    let starts = block_starts(&hosts);
    let (w, h) = (LEFT + side * n + 20, TOP + side * n + 20);
    let mut out = format!(
        "<svg class=\"heatmap-svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" data-ranks=\"{n}\" \
         data-names=\"{}\" role=\"img\" aria-label=\"p50 GB/s per link\">\n<g class=\"ticks cols\">",
        esc(&serde_json::to_string(&names).unwrap_or_default())
    );
    let kc = COLUMN_GAP.div_ceil(side).max(1);
    for d in (0..n).filter(|d| labelled(*d, kc, &starts)) {
        out.push_str(&format!("<text x=\"{}\" y=\"{}\">{d}</text>", LEFT + side * d + side / 2, TOP - 6));
    }
    out.push_str("</g>\n<g class=\"ticks rows\">");
    let kr = ROW_GAP.div_ceil(side).max(1);
    for s in (0..n).filter(|s| labelled(*s, kr, &starts)) {
        let name = if starts.contains(&s) { short(&names[s], 18) } else { s.to_string() };
        out.push_str(&format!("<text x=\"{}\" y=\"{}\">{}</text>", LEFT - 6, TOP + side * s + side / 2, esc(&name)));
    }
    out.push_str("</g>\n<g class=\"hosts\">");
    for (b, s) in starts.iter().enumerate() {
        let e = starts.get(b + 1).copied().unwrap_or(n);
        let width = side * (e - s);
        // A host name wider than its block would run into the next one's: cut to fit (the tooltip names it whole).
        let fits = width.saturating_sub(6) / 7;
        if starts.len() > 1 && fits >= 3 {
            let name = esc(&short(&hosts[*s], fits));
            out.push_str(&format!("<text x=\"{}\" y=\"16\">{name}</text>", LEFT + side * s + width / 2));
        }
    }
    out.push_str("</g>\n");
    out.push_str(&grid(r, size, cells, &names, side));
    out.push_str("<g class=\"host-lines\">");
    for s in starts.iter().skip(1) {
        let at = side * s;
        let (x, y, end) = (LEFT + at, TOP + at, side * n);
        out.push_str(&format!("<path d=\"M{x} {TOP}v{end}M{LEFT} {y}h{end}\"/>"));
    }
    out.push_str("</g>\n</svg>\n");
    out
}

/// The cells: the diagonal grey, every measured link a `<rect data-src data-dst …>` with its numbers (ranks by
/// index; the `<svg>`'s `data-names` names them).
fn grid(
    r: &Results,
    size: u64,
    cells: &[Vec<Option<crate::export::cluster::Cell>>],
    names: &[String],
    side: usize,
) -> String {
    let n = names.len();
    let top = cells.iter().flatten().flatten().map(|c| c.gbps).fold(0.0, f64::max);
    let cases = link_cases(r, n, size);
    let mut out = format!("<rect class=\"bg\" x=\"{LEFT}\" y=\"{TOP}\" width=\"{0}\" height=\"{0}\"/>\n", side * n);
    for (s, row) in cells.iter().enumerate().take(n) {
        for (d, cell) in row.iter().enumerate().take(n) {
            let (x, y) = (LEFT + side * d, TOP + side * s);
            let Some(c) = cell else {
                if s == d {
                    out.push_str(&format!(
                        "<rect class=\"diag\" x=\"{x}\" y=\"{y}\" width=\"{side}\" height=\"{side}\"/>"
                    ));
                }
                continue;
            };
            let case = cases[s][d];
            let g = case.map(|c| &c.stats.gbps);
            let verdict = case.and_then(|c| c.host.attribution.as_ref()).map(|a| a.verdict.clone());
            let mut class = String::new();
            if c.marks.slow {
                class.push_str(" slow");
            }
            if c.marks.bimodal {
                class.push_str(" bimodal");
            }
            // Attributes only where they say something: a 64-rank page carries 4,032 of these.
            let class = if class.is_empty() { String::new() } else { format!(" class=\"{}\"", class.trim()) };
            let marks = mark_text(c.marks);
            let marks = if marks.is_empty() { String::new() } else { format!(" data-marks=\"{}\"", esc(marks.trim())) };
            let verdict = verdict.map(|v| format!(" data-verdict=\"{}\"", esc(&v))).unwrap_or_default();
            out.push_str(&format!(
                "<rect{class} x=\"{x}\" y=\"{y}\" width=\"{side}\" height=\"{side}\" fill=\"{}\" data-src=\"{s}\" \
                 data-dst=\"{d}\" data-p50=\"{:.3}\" data-min=\"{:.3}\" data-max=\"{:.3}\" data-reps=\"{}\"{marks}{verdict}/>\n",
                shade(if top > 0.0 { c.gbps / top } else { 0.0 }),
                c.gbps,
                g.map_or(f64::NAN, |g| g.min),
                g.map_or(f64::NAN, |g| g.max),
                case.map_or(0, |c| c.reps.len()),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thinned_labels_keep_each_hosts_first_rank() {
        let hosts: Vec<String> = (0..12).map(|r| if r < 5 { "a" } else { "b" }.to_string()).collect();
        let starts = block_starts(&hosts);
        let shown: Vec<usize> = (0..12).filter(|i| labelled(*i, 3, &starts)).collect();
        assert_eq!(shown, [0, 5, 8, 11]);
        assert_eq!(short("abcdef", 4), "abc…");
        assert_eq!(shade(0.0), "#ffffff");
        assert_eq!(shade(1.0), "#00468c");
    }
}
