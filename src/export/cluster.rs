//! A cluster run's part of the results file (`cluster` at the top level; each case's `src`, `dst`, `pattern`,
//! `step`, `flows` come from `stats::case::ClusterFlow`; both types live in `stats`), and its Markdown: the matrix of links (rows = source,
//! columns = destination, p50 GB/s of the largest size), the per-flow rows, the aggregates of concurrent steps and
//! the outliers. The console prints the same text.

use super::json::Results;
use crate::cluster::Endpoint;
use crate::plan::sizes::format_size;
use crate::stats::cluster::ClusterJson;
use crate::stats::CaseResult;

/// `rank@host`, as rows and flows name a rank.
pub fn rank_name(e: &Endpoint) -> String {
    format!("{}@{}", e.rank, e.host)
}

/// The flows of a cluster run, as `(case, src rank, dst rank)`.
fn flows(r: &Results) -> impl Iterator<Item = (&CaseResult, usize, usize)> {
    r.cases.iter().filter_map(|c| c.cluster.as_ref().map(|f| (c, f.src.rank, f.dst.rank)))
}

/// A link's cell in the matrix: p50 GB/s and whether it is flagged as an outlier.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cell {
    pub gbps: f64,
    pub outlier: bool,
}

/// The largest size measured and, per (source, destination), its cell there (None: not measured, or the
/// diagonal). Where a link ran more than once at that size (bidir, all), the last measurement counts.
pub fn matrix_cells(r: &Results, world_size: usize) -> Option<(u64, Vec<Vec<Option<Cell>>>)> {
    let size = flows(r).map(|(c, _, _)| c.size_bytes).max()?;
    let mut cells = vec![vec![None; world_size]; world_size];
    for (c, s, d) in flows(r).filter(|(c, s, d)| c.size_bytes == size && *s < world_size && *d < world_size) {
        let outlier = c.cluster.as_ref().is_some_and(|f| f.outlier.is_some());
        cells[s][d] = Some(Cell { gbps: c.gbps.p50, outlier });
    }
    Some((size, cells))
}

/// The matrix of the largest size measured: p50 GB/s per (source, destination); `!` marks an outlier.
pub fn matrix(r: &Results, cl: &ClusterJson) -> String {
    let n = cl.world_size;
    let Some((size, cells)) = matrix_cells(r, n) else {
        return "No flow completed.\n".to_string();
    };
    let mut out = format!(
        "p50 GB/s at {} (rows: source, columns: destination; · not measured, ! outlier)\n\n| src \\ dst |",
        format_size(size)
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
                Some(c) => format!("{:.2}{}", c.gbps, if c.outlier { " !" } else { "" }),
            })
            .collect();
        out += &format!("| {name} | {} |\n", texts.join(" | "));
    }
    out
}

/// One row per flow and size, in the order they ran.
pub fn flow_rows(r: &Results) -> String {
    let mut out = String::from(
        "| step | flow | size | flows at once | p50 GB/s | min GB/s | max GB/s | p50 ms | n | verified |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for (c, s, d) in flows(r) {
        let f = c.cluster.as_ref().expect("a flow");
        let verified = match c.verified {
            Some(true) => "yes",
            Some(false) => "NO",
            None => "-",
        };
        out += &format!(
            "| {} | {s}→{d} | {} | {} | {:.2} | {:.2} | {:.2} | {:.3} | {} | {verified} |\n",
            f.step,
            format_size(c.size_bytes),
            f.flows,
            c.gbps.p50,
            c.gbps.min,
            c.gbps.max,
            c.transfer_ms.p50,
            c.n
        );
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

/// The Markdown section of a cluster run (also what the console shows at the end).
pub fn markdown(r: &Results, cl: &ClusterJson) -> String {
    let mut out = format!(
        "### {} — {} ({})\n\nPattern `{}` over {} ranks (launcher: {}), {} of {} steps done. Bandwidth in GB/s = 10^9 bytes/s.\n\n",
        r.label, r.config.transport, r.started_at, cl.pattern, cl.world_size, cl.launcher, cl.steps_done, cl.steps_total
    );
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
