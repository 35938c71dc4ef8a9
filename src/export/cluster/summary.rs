//! A cluster run's text above [`FULL_UP_TO_LINKS`] links (8 nodes × 8 GPUs under `pairs` is 4,032): per host pair
//! aggregates, the slowest links of each size, the aggregates of concurrent steps (summarised per size when there
//! are many), the flows that failed verification and the marked links, each list bounded so the console and the
//! Markdown stay a page long whatever the cluster. Every flow stays a row of the results JSON and CSV, each naming
//! its link; the matrix is `--fig`'s heatmap.

use super::{flow_row, heading, marks_legend, rank_name, FLOW_HEADER, FULL_UP_TO_LINKS};
use crate::export::json::Results;
use crate::plan::sizes::format_size;
use crate::stats::cluster::{self as stats, ClusterJson, SizeMedian};
use crate::stats::{CaseResult, Summary};

/// Slowest links listed per size.
pub const SLOWEST: usize = 10;
/// Marked links (and flows that failed verification) listed, the slowest first.
pub const LISTED: usize = 20;
/// Host pairs listed per size; more (a hundred hosts) are summarised by their slowest.
pub const HOST_PAIRS: usize = 64;

/// The summary section of a cluster run.
pub fn markdown(r: &Results, cl: &ClusterJson) -> String {
    let links = stats::link_count(&r.cases);
    let flows = r.cases.iter().filter(|c| c.cluster.is_some()).count();
    let mut out = heading(r, cl);
    out += &format!(
        "{links} links ({flows} flow rows): more than {FULL_UP_TO_LINKS}, so this shows per host pair aggregates, the slowest links and the marked ones. Every flow is a row of the results JSON and CSV, each naming its link (src and dst rank and host); `--fig` draws the matrix as cluster-heatmap.\n\n"
    );
    if flows == 0 {
        return out + "No flow completed.\n\n" + &stopped(r);
    }
    out += &host_pair_rows(r, cl);
    out += &slowest_rows(r);
    let agg = aggregate_summary(cl);
    if !agg.is_empty() {
        out += "\n";
        out += &agg;
    }
    out += &verification(r);
    out += &marked(r);
    out + &stopped(r)
}

fn stopped(r: &Results) -> String {
    r.error.as_ref().map(|e| format!("\nThe run stopped early: {e}\n")).unwrap_or_default() + "\n"
}

/// Per (source host, destination host) and size: the spread of its links' p50 and how many are marked.
fn host_pair_rows(r: &Results, cl: &ClusterJson) -> String {
    let pairs = stats::host_pairs(&r.cases, &cl.ranks);
    let mut out = String::from(
        "Per host pair: its links' p50 GB/s (median, min, max) and how many are marked (! slow, ~ bimodal, as below)\n\n| src host | dst host | size | links | median p50 GB/s | min | max | ! slow | ~ bimodal |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for size in stats::cluster_sizes(&r.cases) {
        let mut at: Vec<&stats::HostPair> = pairs.iter().filter(|p| p.size_bytes == size).collect();
        let total = at.len();
        if total > HOST_PAIRS {
            at.sort_by(|a, b| a.median_gbps.total_cmp(&b.median_gbps));
            at.truncate(HOST_PAIRS);
        }
        for p in &at {
            out += &format!(
                "| {} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {} | {} |\n",
                p.src_host,
                p.dst_host,
                format_size(size),
                p.links,
                p.median_gbps,
                p.min_gbps,
                p.max_gbps,
                p.slow,
                p.bimodal
            );
        }
        if total > at.len() {
            out +=
                &format!("\n{} host pairs at {}: the {} of lowest median shown.\n", total, format_size(size), at.len());
        }
    }
    out
}

/// Per size: the slowest links, each named `rank@host→rank@host`, under what the marks mean there.
fn slowest_rows(r: &Results) -> String {
    let marks = stats::marks(&r.cases);
    let mut out = String::new();
    for size in stats::cluster_sizes(&r.cases) {
        let at = stats::slowest(&r.cases, size, SLOWEST);
        out += &format!(
            "\nSlowest {} links at {} ({})\n\n{}",
            at.len(),
            format_size(size),
            marks_legend(SizeMedian::at_size(&r.cases, size)),
            FLOW_HEADER.replace("| verified |\n", "| verified | marks |\n").replace("|---|\n", "|---|---|\n")
        );
        for i in at {
            let c = &r.cases[i];
            let row = flow_row(c, &link_name(c));
            out += &format!("{} {} |\n", row.trim_end(), super::mark_text(marks[i]).trim());
        }
    }
    out
}

/// `3@host-a→1@host-b`.
fn link_name(c: &CaseResult) -> String {
    c.cluster.as_ref().map(|f| format!("{}→{}", rank_name(&f.src), rank_name(&f.dst))).unwrap_or_default()
}

/// The aggregates of concurrent steps: every row when few, else per size and kind (whole step, or one pair's two
/// directions under bidir) their spread.
fn aggregate_summary(cl: &ClusterJson) -> String {
    if cl.aggregates.len() <= FULL_UP_TO_LINKS {
        return super::aggregate_rows(cl);
    }
    let mut out = format!(
        "Aggregate = bytes of all flows of a step (or of one pair's two directions) / the slowest flow's time; {} of them (every one in the JSON), per size:\n\n| size | over | aggregates | p50 GB/s median | min | max |\n|---:|---|---:|---:|---:|---:|\n",
        cl.aggregates.len()
    );
    let mut sizes: Vec<u64> = cl.aggregates.iter().map(|a| a.size_bytes).collect();
    sizes.sort();
    sizes.dedup();
    for size in sizes {
        for (pair, over) in [(false, "whole step"), (true, "one pair, both ways")] {
            let p50s: Vec<f64> = cl
                .aggregates
                .iter()
                .filter(|a| a.size_bytes == size && a.pair.is_some() == pair)
                .map(|a| a.gbps.p50)
                .collect();
            if p50s.is_empty() {
                continue;
            }
            let s = Summary::of_samples(&p50s);
            out += &format!(
                "| {} | {over} | {} | {:.2} | {:.2} | {:.2} |\n",
                format_size(size),
                p50s.len(),
                s.p50,
                s.min,
                s.max
            );
        }
    }
    out
}

/// "verified: all 992 flows", or the flows that failed (the first [`LISTED`]); nothing when none was verified.
fn verification(r: &Results) -> String {
    let checked: Vec<&CaseResult> =
        r.cases.iter().filter(|c| c.cluster.is_some() && c.check.verified.is_some()).collect();
    if checked.is_empty() {
        return String::new();
    }
    let bad: Vec<String> = checked
        .iter()
        .filter(|c| c.check.verified == Some(false))
        .map(|c| format!("{} at {}", link_name(c), format_size(c.size_bytes)))
        .collect();
    match bad.len() {
        0 => format!("\nverified: all {} flows\n", checked.len()),
        n => format!(
            "\nNOT verified: {n} of {} flows{}: {}\n",
            checked.len(),
            if n > LISTED { format!(" (the first {LISTED})") } else { String::new() },
            bad[..n.min(LISTED)].join(", ")
        ),
    }
}

/// The marked flow rows (an `outlier` in the file), the slowest against its size's median first.
fn marked_order(r: &Results) -> Vec<usize> {
    let medians = stats::medians(&r.cases);
    let ratio = |c: &CaseResult| {
        let m = medians.iter().find(|m| m.size_bytes == c.size_bytes).map_or(0.0, |m| m.median_gbps);
        if m > 0.0 {
            c.stats.gbps.p50 / m
        } else {
            1.0
        }
    };
    let mut at: Vec<usize> =
        (0..r.cases.len()).filter(|i| r.cases[*i].cluster.as_ref().is_some_and(|f| f.outlier.is_some())).collect();
    at.sort_by(|a, b| ratio(&r.cases[*a]).total_cmp(&ratio(&r.cases[*b])));
    at
}

/// The flow rows this text lists, in the file's order: each size's slowest links, the marked ones and those that
/// failed verification (each list bounded as here), so a page of a large run can show the same rows.
pub fn listed_flows(r: &Results) -> Vec<usize> {
    let mut at: Vec<usize> =
        stats::cluster_sizes(&r.cases).into_iter().flat_map(|s| stats::slowest(&r.cases, s, SLOWEST)).collect();
    at.extend(marked_order(r).into_iter().take(LISTED));
    let failed =
        (0..r.cases.len()).filter(|i| r.cases[*i].cluster.is_some() && r.cases[*i].check.verified == Some(false));
    at.extend(failed.take(LISTED));
    at.sort();
    at.dedup();
    at
}

/// The marked links, the slowest (against its size's median) first, at most [`LISTED`].
fn marked(r: &Results) -> String {
    let out = marked_order(r);
    if out.is_empty() {
        return "\nNo link is marked.\n".to_string();
    }
    let total = out.len();
    let head = if total > LISTED {
        format!("{total} flow rows are marked (`outlier` in the JSON and CSV); the {LISTED} slowest against their size's median:")
    } else {
        format!("{total} flow rows are marked:")
    };
    let outlier = |i: &usize| r.cases[*i].cluster.as_ref().and_then(|f| f.outlier.clone()).unwrap_or_default();
    let lines: Vec<String> = out.iter().take(LISTED).map(|i| format!("outlier: {}", outlier(i))).collect();
    format!("\n{head}\n\n{}\n", lines.join("  \n"))
}
