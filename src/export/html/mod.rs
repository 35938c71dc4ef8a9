//! `--html PAGE`: one self-contained page of runs — data, script and style inline, nothing fetched when it is
//! viewed. Warnings come first, then each run's identity (label, start, version, command line with any token
//! hidden, the environment's fingerprint), the figures, and the cases as a sortable and filterable table.
//!
//! The figures are the ones `--fig` draws, rendered by plotters' SVG backend from the same figure descriptions
//! (one plot model, PNG/SVG/page renderers), except the cluster heatmap: the page draws it itself from the same
//! cells, one `<rect>` per link carrying its numbers, so pointing at a link names it (see `heatmap`). Every string
//! that came from a results file goes through [`esc`]; plotters escapes the text it writes.

mod compare;
mod heatmap;
mod hostmap;
mod page;
mod tables;

use super::json::Results;
use super::plot::PageFigure;
use anyhow::Result;

pub use page::esc;

/// Everything one page shows.
pub struct PageInput<'a> {
    /// Each run with the name its series carries in the figures.
    pub runs: Vec<(String, &'a Results)>,
    /// Warnings about the runs taken together (different environments, different transport choices).
    pub warnings: Vec<String>,
    /// The figures, as `--fig` would draw them.
    pub figures: Vec<PageFigure>,
    /// The transports' words about their extras, for the notes under each run.
    pub extras: &'static dyn crate::measure::ExtrasNotes,
}

/// The page of one run, written at its end by `--html PAGE` (send, sweep, cluster, latency, replay and cluster
/// replay runs): its figures as `--fig` draws them (a replay's own, a cluster run's per-link series and the page's
/// own heatmap), and the page written whole.
pub fn write_run(
    page: &std::path::Path,
    results: &Results,
    lines: &[super::plot::RefLine],
    extras: &'static dyn crate::measure::ExtrasNotes,
) -> Result<()> {
    let mut figures = Vec::new();
    let mut sink = super::plot::Sink::Page(&mut figures);
    if let Some(replay) = results.replay_run() {
        super::plot::draw_replays(&[(String::new(), replay)], &mut sink)?;
    } else if results.cluster.is_some() {
        super::plot::draw_cluster(results, &mut sink, lines)?;
    } else {
        super::plot::draw_series(&results.figure_series(), &mut sink, lines)?;
    }
    let name = if results.label.trim().is_empty() { "run".to_string() } else { results.label.clone() };
    let input = PageInput { runs: vec![(name, results)], warnings: Vec::new(), figures, extras };
    super::write_atomic(page, render(&input)?.as_bytes())?;
    crate::errln!("page: {}", page.display());
    Ok(())
}

/// The whole page.
pub fn render(input: &PageInput) -> Result<String> {
    let mut body = String::new();
    body.push_str(&page::warnings(&input.runs, &input.warnings));
    for (name, r) in &input.runs {
        body.push_str(&page::identity(name, r, input.extras));
    }
    // The figures before the table: a cluster run's table has a row per link, thousands at 64 ranks.
    for (_, r) in &input.runs {
        // A cluster replay's links move requests, not cases: its figures are its loads'.
        if let Some(cl) = r.cluster.as_ref().filter(|_| r.replay_run().is_none()) {
            // Past a few thousand links a cell per link is under a pixel: one per host pair instead.
            let links = crate::stats::cluster::link_count(&r.cases);
            body.push_str(&if links > heatmap::PER_LINK_UP_TO {
                hostmap::section(r, cl, links)
            } else {
                heatmap::section(r, cl)
            });
        }
    }
    body.push_str(&page::figures(&input.figures));
    body.push_str(&compare::section(&input.runs));
    body.push_str(&tables::cases(&input.runs)?);
    Ok(page::shell("kvxfer report", &body))
}
