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

/// The matrix of the largest size measured: p50 GB/s per (source, destination); `!` marks an outlier. Where a
/// link ran more than once at that size (bidir, all), the last measurement is shown.
pub fn matrix(r: &Results, cl: &ClusterJson) -> String {
    let Some(size) = flows(r).map(|(c, _, _)| c.size_bytes).max() else {
        return "No flow completed.\n".to_string();
    };
    let n = cl.world_size;
    let mut cells = vec![vec![String::from("·"); n]; n];
    for (i, row) in cells.iter_mut().enumerate() {
        row[i] = "—".into();
    }
    for (c, s, d) in flows(r).filter(|(c, s, d)| c.size_bytes == size && *s < n && *d < n) {
        let flagged = c.cluster.as_ref().is_some_and(|f| f.outlier.is_some());
        cells[s][d] = format!("{:.2}{}", c.gbps.p50, if flagged { " !" } else { "" });
    }
    let mut out = format!(
        "p50 GB/s at {} (rows: source, columns: destination; · not measured, ! outlier)\n\n| src \\ dst |",
        format_size(size)
    );
    out += &(0..n).map(|d| format!(" {d} |")).collect::<String>();
    out += &format!("\n|---|{}\n", "---:|".repeat(n));
    for (s, row) in cells.iter().enumerate() {
        let name = cl.ranks.get(s).map(rank_name).unwrap_or_else(|| s.to_string());
        out += &format!("| {name} | {} |\n", row.join(" | "));
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
        "Aggregate = bytes of all flows of a step / the slowest flow's time (per rep, p50 over reps)\n\n| step | size | flows | aggregate GB/s p50 | min | max | slowest flow p50 ms |\n|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for a in &cl.aggregates {
        out += &format!(
            "| {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.3} |\n",
            a.step,
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
