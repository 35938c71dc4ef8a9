//! `kvxfer report`: re-render tables from saved results files.

use crate::cli::ReportArgs;
use crate::export::{self, compare::series_of, json::Results, plot::Sink, ExportManager, Format, Target};
use crate::output::{compare, table};
use crate::transport::registry::NOTES;
use anyhow::Result;
use std::path::{Path, PathBuf};

pub fn run(a: ReportArgs) -> Result<()> {
    let all = a.files.iter().map(|f| Results::read(f)).collect::<Result<Vec<_>>>()?;
    let mut exports = ExportManager::new(NOTES);
    for (format, path) in [(Format::Markdown, &a.md), (Format::Csv, &a.csv)] {
        if let Some(p) = path {
            exports.add(format, Target::file_or_stdout(p));
        }
    }
    exports.check_writable()?;
    if let Some(page) = &a.fig.html {
        export::check_writable("--html", page)?;
    }
    let lines = export::plot::parse_lines(&a.fig.lines)?;
    if let Some(dir) = &a.fig.fig {
        export::plot::prepare_dir(dir)?;
    }
    // A sweep over several configurations is one series per configuration in the side-by-side table and figures.
    let parts = series_of(&all);
    let several = parts.len() > 1;
    // Runs on hosts whose NIC firmware, MTU or IOMMU mode differ compare the environments as much as the runs.
    let mut warnings = Vec::new();
    for (r, f) in all.iter().zip(&a.files).skip(1) {
        for d in crate::env::differences(&all[0].env, &r.env) {
            warnings.push(format!("{} and {} ran in different environments: {d}", a.files[0].display(), f.display()));
        }
    }
    warnings.extend(transport_choices(&all, &a.files));
    for w in &warnings {
        crate::errln!("warning: {w}");
    }
    let stdout_taken = [&a.md, &a.csv].iter().any(|p| p.as_deref() == Some(Path::new("-")));
    if !stdout_taken {
        print_tables(&all, &parts);
    }
    // With several series, the side-by-side table goes next to a CSV file.
    let side = match exports.target(Format::Csv) {
        Some(Target::File(p)) if several => Some(p.with_extension("compare.csv")),
        _ => None,
    };
    if let Some(side) = &side {
        exports.add(Format::CompareCsv, Target::File(side.clone()));
    }
    exports.write(&all)?;
    if let Some(side) = &side {
        crate::errln!("{}: {}", Format::CompareCsv.what(), side.display());
    }
    if let Some(dir) = &a.fig.fig {
        draw(&all, &a.files, &lines, &mut Sink::Dir(dir))?;
    }
    if let Some(page) = &a.fig.html {
        let mut figures = Vec::new();
        draw(&all, &a.files, &lines, &mut Sink::Page(&mut figures))?;
        let runs = series_names(&all, &a.files).into_iter().zip(&all).collect();
        let text = export::html::render(&export::html::PageInput { runs, warnings, figures, extras: NOTES })?;
        export::write_atomic(page, text.as_bytes())?;
        crate::errln!("page: {}", page.display());
    }
    Ok(())
}

/// Every figure of these runs into `sink`, as `--fig` draws them: a replay's own, a lone cluster run's heatmap
/// and per-link series, the others' series overlaid.
fn draw(all: &[Results], files: &[PathBuf], lines: &[export::plot::RefLine], sink: &mut Sink) -> Result<()> {
    // A replay has figures of its own, drawn from its `replay` section; the other files draw as they always do.
    let (replays, others): (Vec<_>, Vec<_>) = all.iter().zip(files).partition(|(r, _)| r.replay_run().is_some());
    if !replays.is_empty() {
        let named: Vec<_> = replays.iter().filter_map(|(r, f)| Some((file_stem(f), r.replay_run()?))).collect();
        export::plot::draw_replays(&named, sink)?;
        if others.is_empty() {
            return Ok(());
        }
    }
    let (all, files): (Vec<Results>, Vec<PathBuf>) = others.into_iter().map(|(r, f)| (r.clone(), f.clone())).unzip();
    if let [one] = all.as_slice() {
        if one.cluster.is_some() {
            // A cluster run: its heatmap and one series per link, as `kvxfer cluster --fig` draws them.
            return export::plot::draw_cluster(one, sink, lines);
        }
    }
    // One file: its configurations by case name; several: each series keeps its run's name in front.
    let split = figure_split(&all, &files);
    let short = if all.len() == 1 && split.len() > 1 { all[0].figure_series() } else { Vec::new() };
    export::plot::draw_series(if short.is_empty() { &split } else { &short }, sink, lines)
}

fn file_stem(f: &Path) -> String {
    f.file_stem().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// A transport that chose differently between the runs compared (a tcp path picked by calibration, say), or
/// between the sessions of one sweep file, makes their numbers differ for that reason alone: the warnings saying so.
fn transport_choices(all: &[Results], files: &[PathBuf]) -> Vec<String> {
    let mut out = Vec::new();
    for (r, f) in all.iter().zip(files).skip(1) {
        for d in crate::env::transport_differences(&all[0].config.transport_detail, &r.config.transport_detail) {
            out.push(format!(
                "{} and {} ran with different transport choices: {d}; their numbers differ by that too",
                files[0].display(),
                f.display()
            ));
        }
    }
    for (r, f) in all.iter().zip(files) {
        let Some(sessions) = r.sweep.as_ref().map(|s| &s.sessions) else { continue };
        let Some((first, rest)) = sessions.split_first() else { continue };
        for s in rest {
            for d in crate::env::transport_differences(&first.transport_detail, &s.transport_detail) {
                out.push(format!(
                    "{}: the sessions of cases {:?} and {:?} ran with different transport choices: {d}; their numbers differ by that too",
                    f.display(),
                    first.case_ids,
                    s.case_ids
                ));
            }
        }
    }
    out
}

/// Each run's boxed table and notes on the console, and the side-by-side table of several series.
fn print_tables(all: &[Results], parts: &[Results]) {
    for r in all {
        if let Some(cl) = &r.cluster {
            print_cluster(r, cl);
            continue;
        }
        if let Some(replay) = r.replay_run() {
            crate::outln!(
                "{} ({}, {} runs of {} loads)",
                r.label,
                r.started_at,
                replay.loads.len(),
                replay.pooled.len()
            );
            crate::outln!("{}", export::replay::summary_markdown(replay).trim_end());
            if let Some(e) = &r.error {
                crate::outln!("note: this run stopped early: {e}");
            }
            crate::outln!();
            continue;
        }
        crate::outln!("{} — {} ({}, {} cases)", r.label, r.config.transport, r.started_at, r.cases.len());
        crate::outln!("{}", table::render(&r.cases, export::cells::connect_ms(&r.config.transport_detail)));
        for note in export::cells::notes(&r.cases, NOTES) {
            crate::outln!("{note}");
        }
        if let Some(e) = &r.error {
            crate::outln!("note: this run stopped early: {e}");
        }
        crate::outln!();
    }
    if parts.len() > 1 {
        crate::outln!("Side by side (p50; X/A = run X's GB/s divided by run A's):\n{}\n", compare::render(parts));
    }
    crate::outln!("Bandwidth in GB/s = 10^9 bytes/s; times in ms; * = block size clamped to the transfer size.");
}

/// A cluster run as its rank 0 showed it: every row naming its link, in full or, past
/// [`export::cluster::FULL_UP_TO_LINKS`] links, the summary; the per-case notes only in full (thousands of flows
/// would give thousands of notes), their count of warned cases always.
fn print_cluster(r: &Results, cl: &crate::stats::cluster::ClusterJson) {
    crate::outln!("{}", export::cluster::markdown(r, cl).trim_end());
    let notes = export::cells::notes(&r.cases, NOTES);
    if export::cluster::full(crate::stats::cluster::link_count(&r.cases)) {
        for note in notes {
            crate::outln!("{note}");
        }
    } else {
        crate::outln!("{}", export::cells::warning_summary(&r.cases));
    }
    crate::outln!();
}

/// The figures' series: a sweep file's configurations each on their own, other runs under [`series_names`].
fn figure_split(all: &[Results], files: &[PathBuf]) -> Vec<(String, Results)> {
    series_names(all, files)
        .into_iter()
        .zip(all)
        .flat_map(|(name, r)| match r.series() {
            parts if parts.len() > 1 => parts,
            _ => vec![(name, r.clone())],
        })
        .collect()
}

/// Each run's name in figures: its label, or its file name when it has none; runs sharing a label get the file
/// name added, so two series never look alike in a legend.
fn series_names(all: &[Results], files: &[PathBuf]) -> Vec<String> {
    let file = |f: &PathBuf| f.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    all.iter()
        .zip(files)
        .map(|(r, f)| {
            let dup = all.iter().filter(|o| o.label == r.label).count() > 1;
            match r.label.trim() {
                "" => file(f),
                l if dup => format!("{l} ({})", file(f)),
                l => l.to_string(),
            }
        })
        .collect()
}
