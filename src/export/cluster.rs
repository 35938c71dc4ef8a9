//! A cluster run's part of the results file (`cluster` at the top level; each case's `src`, `dst`, `pattern`,
//! `step`, `flows` come from `stats::case::ClusterFlow`; both types live in `stats`), and its Markdown: the matrix of
//! links (rows = source, columns = destination, p50 GB/s of the largest size), the per-flow rows, the aggregates of
//! concurrent steps and the marked links. The console and `report` print the same text. Above [`FULL_UP_TO_LINKS`]
//! links a matrix or a row per flow is more than anyone reads: the text is then [`summary`]'s.

pub mod summary;

use super::json::Results;
use crate::cluster::Endpoint;
use crate::plan::sizes::format_size;
use crate::stats::cluster::{self as stats, ClusterJson, Marks, SizeMedian, OUTLIER_FRACTION};
use crate::stats::CaseResult;

/// The most links whose matrix and per-flow rows the console and Markdown show (8 ranks under `pairs`: 56).
pub const FULL_UP_TO_LINKS: usize = 64;

/// Whether a run of this many links gets the full text (else the summary).
pub fn full(links: usize) -> bool {
    links <= FULL_UP_TO_LINKS
}

/// `rank@host`, as rows and flows name a rank.
pub fn rank_name(e: &Endpoint) -> String {
    format!("{}@{}", e.rank, e.host)
}

/// The flows of a cluster run, as `(case, src rank, dst rank)`.
fn flows(r: &Results) -> impl Iterator<Item = (&CaseResult, usize, usize)> {
    r.cases.iter().filter_map(|c| c.cluster.as_ref().map(|f| (c, f.src.rank, f.dst.rank)))
}

/// A link's cell in the matrix: p50 GB/s and why it is marked.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cell {
    pub gbps: f64,
    pub marks: Marks,
}

/// A cell's marks as the matrix writes them after the number: `!` slow, `~` bimodal.
pub fn mark_text(m: Marks) -> String {
    format!("{}{}", if m.slow { " !" } else { "" }, if m.bimodal { " ~" } else { "" })
}

/// What `!` means at this size: "slow: p50 below 0.8× the median of the 12 links at 4 MiB (2.31 GB/s)".
pub fn slow_rule(median: Option<SizeMedian>) -> String {
    match median {
        Some(m) if m.links >= 3 => format!(
            "slow: p50 below {OUTLIER_FRACTION}× the median of the {} links at {} ({:.2} GB/s)",
            m.links,
            format_size(m.size_bytes),
            m.median_gbps
        ),
        _ => "slow: not judged, fewer than 3 links to compare".to_string(),
    }
}

/// What the marks mean at this size, for a legend: "! slow: …; ~ bimodal reps".
pub fn marks_legend(median: Option<SizeMedian>) -> String {
    format!("! {}; ~ bimodal reps", slow_rule(median))
}

/// "slowest: 3→0 at 4 MiB, 1.20 GB/s (0.52× the median)": the link every reader looks for, marked or not.
pub fn slowest_line(r: &Results, size: u64) -> Option<String> {
    let i = *stats::slowest(&r.cases, size, 1).first()?;
    let (c, f) = (&r.cases[i], r.cases[i].cluster.as_ref()?);
    let median = SizeMedian::at_size(&r.cases, size)?;
    let ratio = if median.median_gbps > 0.0 { c.stats.gbps.p50 / median.median_gbps } else { 1.0 };
    Some(format!(
        "slowest: {}→{} at {}, p50 {:.2} GB/s ({ratio:.2}× the median of {} links)",
        f.src.rank,
        f.dst.rank,
        format_size(size),
        c.stats.gbps.p50,
        median.links
    ))
}

/// The largest size measured and, per (source, destination), its cell there (None: not measured, or the
/// diagonal). Where a link ran more than once at that size (bidir, all), the last measurement counts.
pub fn matrix_cells(r: &Results, world_size: usize) -> Option<(u64, Vec<Vec<Option<Cell>>>)> {
    let size = flows(r).map(|(c, _, _)| c.size_bytes).max()?;
    let marks = stats::marks(&r.cases);
    let mut cells = vec![vec![None; world_size]; world_size];
    for ((c, m), f) in r.cases.iter().zip(marks).filter_map(|(c, m)| Some(((c, m), c.cluster.as_ref()?))) {
        let (s, d) = (f.src.rank, f.dst.rank);
        if c.size_bytes == size && s < world_size && d < world_size {
            cells[s][d] = Some(Cell { gbps: c.stats.gbps.p50, marks: m });
        }
    }
    Some((size, cells))
}

/// The matrix of the largest size measured: p50 GB/s per (source, destination), each mark after its number and
/// the legend saying exactly what each mark means; then the slowest link, marked or not.
pub fn matrix(r: &Results, cl: &ClusterJson) -> String {
    let n = cl.world_size;
    let Some((size, cells)) = matrix_cells(r, n) else {
        return "No flow completed.\n".to_string();
    };
    let mut out = format!(
        "p50 GB/s at {} (rows: source, columns: destination; · not measured; {})\n\n| src \\ dst |",
        format_size(size),
        marks_legend(SizeMedian::at_size(&r.cases, size))
    );
    out += &(0..n).map(|d| format!(" {d} |")).collect::<String>();
    out += &format!("\n|---|{}\n", "---:|".repeat(n));
    for (s, row) in cells.iter().enumerate() {
        let name = cl.ranks.get(s).map(rank_name).unwrap_or_else(|| s.to_string());
        let texts: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(d, cell)| match cell {
                _ if d == s => "—".to_string(),
                None => "·".to_string(),
                Some(c) => format!("{:.2}{}", c.gbps, mark_text(c.marks)),
            })
            .collect();
        out += &format!("| {name} | {} |\n", texts.join(" | "));
    }
    if let Some(line) = slowest_line(r, size) {
        out += &format!("\n{line}\n");
    }
    out
}

/// The header of [`flow_row`]s.
pub const FLOW_HEADER: &str = "| step | flow | size | flows at once | p50 GB/s | min GB/s | max GB/s | p50 ms | n | verified |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---|\n";

/// One flow at one size as a table row; `flow` names its link.
pub fn flow_row(c: &CaseResult, flow: &str) -> String {
    let step_flows = c.cluster.as_ref().map(|f| (f.step, f.flows)).unwrap_or_default();
    let verified = match c.check.verified {
        Some(true) => "yes",
        Some(false) => "NO",
        None => "-",
    };
    format!(
        "| {} | {flow} | {} | {} | {:.2} | {:.2} | {:.2} | {:.3} | {} | {verified} |\n",
        step_flows.0,
        format_size(c.size_bytes),
        step_flows.1,
        c.stats.gbps.p50,
        c.stats.gbps.min,
        c.stats.gbps.max,
        c.stats.transfer_ms.p50,
        c.stats.n
    )
}

/// One row per flow and size, in the order they ran.
pub fn flow_rows(r: &Results) -> String {
    let mut out = String::from(FLOW_HEADER);
    for (c, s, d) in flows(r) {
        out += &flow_row(c, &format!("{s}→{d}"));
    }
    out
}

/// The aggregates of concurrent steps; empty when there are none.
pub fn aggregate_rows(cl: &ClusterJson) -> String {
    if cl.aggregates.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "Aggregate = bytes of all flows of a step (or of one pair's two directions) / the slowest flow's time (per rep, p50 over reps)\n\n| step | pair | size | flows | aggregate GB/s p50 | min | max | slowest flow p50 ms |\n|---:|---|---:|---:|---:|---:|---:|---:|\n",
    );
    for a in &cl.aggregates {
        out += &format!(
            "| {} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.3} |\n",
            a.step,
            a.pair.map(|[x, y]| format!("{x}⇄{y}")).unwrap_or_else(|| "all".into()),
            format_size(a.size_bytes),
            a.flows,
            a.gbps.p50,
            a.gbps.min,
            a.gbps.max,
            a.slowest_transfer_ms.p50
        );
    }
    out
}

/// The outlier lines, each naming its pair.
pub fn outlier_lines(r: &Results) -> Vec<String> {
    r.cases.iter().filter_map(|c| c.cluster.as_ref()?.outlier.clone()).map(|o| format!("outlier: {o}")).collect()
}

/// The heading and the line saying what ran.
pub fn heading(r: &Results, cl: &ClusterJson) -> String {
    format!(
        "### {} — {} ({})\n\nPattern `{}` over {} ranks (launcher: {}), {} of {} steps done. Bandwidth in GB/s = 10^9 bytes/s.\n\n",
        r.label, r.config.transport, r.started_at, cl.pattern, cl.world_size, cl.launcher, cl.steps_done, cl.steps_total
    )
}

/// The Markdown section of a cluster run (also what the console and `report` show): in full up to
/// [`FULL_UP_TO_LINKS`] links, else the summary.
pub fn markdown(r: &Results, cl: &ClusterJson) -> String {
    if !full(stats::link_count(&r.cases)) {
        return summary::markdown(r, cl);
    }
    let mut out = heading(r, cl);
    out += &matrix(r, cl);
    out += "\n";
    out += &flow_rows(r);
    let agg = aggregate_rows(cl);
    if !agg.is_empty() {
        out += "\n";
        out += &agg;
    }
    let outliers = outlier_lines(r);
    if !outliers.is_empty() {
        out += &format!("\n{}\n", outliers.join("  \n"));
    }
    if let Some(e) = &r.error {
        out += &format!("\nThe run stopped early: {e}\n");
    }
    out + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::cluster::flag_outliers;
    use crate::stats::cluster::test_flows::{end, flow_of};

    /// A results file as `kvxfer cluster` writes it, holding `cases` over `world` ranks.
    fn results(cases: Vec<CaseResult>, world: usize) -> (Results, ClusterJson) {
        let text = include_str!("../../results/h200-cluster-pairs.json");
        let mut r = Results::parse(std::path::Path::new("h200-cluster-pairs.json"), text).unwrap();
        let mut cl = r.cluster.take().unwrap();
        cl.world_size = world;
        cl.ranks = (0..world).map(end).collect();
        cl.aggregates.clear();
        r.cases = cases;
        flag_outliers(&mut r.cases);
        r.cluster = Some(cl.clone());
        (r, cl)
    }

    /// The matrix row of rank `src` (`| src@host | … |`), its cells by destination.
    fn row(text: &str, src: usize) -> Vec<String> {
        let line = text.lines().find(|l| l.starts_with(&format!("| {src}@"))).unwrap();
        line.trim_matches('|').split('|').skip(1).map(|c| c.trim().to_string()).collect()
    }

    /// An incast of 3 flows into rank 0 at 1 MiB and 4 MiB, 9 reps each, as a loaded host gives them: at 4 MiB
    /// 1→0 and 2→0 are bimodal (reps at ~2 ms and ~4 ms) and 3→0 the slowest, steady at `slowest_ms`.
    fn incast(slowest_ms: f64) -> Vec<CaseResult> {
        let two_paths = [2.0, 2.02, 1.98, 2.01, 1.99, 4.0, 4.1, 3.9, 4.05];
        let mut cases = Vec::new();
        for size in [1u64 << 20, 4 << 20] {
            let big = size == 4 << 20;
            let steady = |ms: f64| -> Vec<f64> { (0..9).map(|i| ms * (1.0 + 0.002 * i as f64)).collect() };
            cases.push(flow_of(1, 0, size, &if big { two_paths.to_vec() } else { steady(0.5) }));
            cases.push(flow_of(2, 0, size, &if big { two_paths.to_vec() } else { steady(0.5) }));
            cases.push(flow_of(3, 0, size, &steady(if big { slowest_ms } else { 0.55 })));
        }
        cases
    }

    #[test]
    fn the_matrix_marks_exactly_what_its_legend_says() {
        for slowest_ms in [2.4, 3.0] {
            let (r, cl) = results(incast(slowest_ms), 4);
            let text = matrix(&r, &cl);
            let median = SizeMedian::at_size(&r.cases, 4 << 20).unwrap();
            assert!(text.contains(&marks_legend(Some(median))) && text.contains("~ bimodal reps"), "{text}");
            for c in r.cases.iter().filter(|c| c.size_bytes == 4 << 20) {
                let f = c.cluster.as_ref().unwrap();
                let cell = &row(&text, f.src.rank)[f.dst.rank];
                let slow = c.stats.gbps.p50 < OUTLIER_FRACTION * median.median_gbps;
                assert_eq!(
                    cell.contains('!'),
                    slow,
                    "{}→{} {cell:?}: p50 {} vs median {}\n{text}",
                    f.src.rank,
                    f.dst.rank,
                    c.stats.gbps.p50,
                    median.median_gbps
                );
                assert_eq!(cell.contains('~'), c.derived.bimodal.is_bimodal, "{cell:?}\n{text}");
            }
            // The two bimodal links carry `~`, never `!`; the slowest is named whether or not it is marked.
            assert!(row(&text, 1)[0].ends_with(" ~") && row(&text, 2)[0].ends_with(" ~"), "{text}");
            assert!(text.contains("slowest: 3→0 at 4 MiB"), "{text}");
            // At 2.4 ms 3→0 is 0.83× the median (not slow); at 3.0 ms 0.67× (slow).
            assert_eq!(row(&text, 3)[0].contains('!'), slowest_ms == 3.0, "{text}");
        }
    }

    /// 32 ranks, half on host a and half on b, every ordered pair at 1 MiB (992 links): `slow` of them 4× slower.
    fn pairs_of_32(slow: usize) -> Vec<CaseResult> {
        let mut cases = Vec::new();
        for s in 0..32 {
            for d in (0..32).filter(|d| *d != s) {
                let ms = if cases.len() < slow { 4.0 } else { 1.0 + 0.0001 * (s * 32 + d) as f64 };
                let mut c = flow_of(s, d, 1 << 20, &[ms, ms]);
                let f = c.cluster.as_mut().unwrap();
                for e in [&mut f.src, &mut f.dst] {
                    e.host = if e.rank < 16 { "a".into() } else { "b".into() };
                }
                cases.push(c);
            }
        }
        cases
    }

    #[test]
    fn above_64_links_the_text_is_host_pairs_the_slowest_links_and_the_marked_ones_each_named() {
        let (r, mut cl) = results(pairs_of_32(30), 32);
        for e in cl.ranks.iter_mut() {
            e.host = if e.rank < 16 { "a".into() } else { "b".into() };
        }
        let text = markdown(&r, &cl);
        let lines = text.lines().count();
        assert!(lines <= 80, "{lines} lines:\n{text}");
        assert!(!text.contains("| src \\ dst |"), "no rank matrix:\n{text}");
        for (s, d, links) in [("a", "a", 240), ("a", "b", 256), ("b", "a", 256), ("b", "b", 240)] {
            assert!(text.contains(&format!("| {s} | {d} | 1 MiB | {links} |")), "{s}→{d}:\n{text}");
        }
        // The ten slowest each name their link; 30 are marked, 20 listed and the rest counted.
        let slowest: Vec<&str> = text.lines().filter(|l| l.contains("@a→") && l.ends_with("! |")).collect();
        assert_eq!(slowest.len(), 10, "{text}");
        assert!(text.contains("30 flow rows are marked"), "{text}");
        assert_eq!(text.lines().filter(|l| l.starts_with("outlier: ")).count(), 20, "{text}");
    }

    #[test]
    fn up_to_64_links_the_text_is_the_matrix_and_a_row_per_flow() {
        let cases: Vec<CaseResult> = pairs_of_32(0)
            .into_iter()
            .filter(|c| {
                let f = c.cluster.as_ref().unwrap();
                f.src.rank < 8 && f.dst.rank < 8
            })
            .collect();
        let (r, cl) = results(cases, 8);
        let text = markdown(&r, &cl);
        assert!(text.contains("| src \\ dst |"), "{text}");
        assert_eq!(text.lines().filter(|l| l.contains('→') && l.starts_with("| 1 |")).count(), 56, "{text}");
    }
}
