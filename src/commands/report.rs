//! `kvxfer report`: re-render tables from saved results files.

use crate::cli::ReportArgs;
use crate::export::{self, json::Results};
use crate::output::{self, table};
use anyhow::Result;
use std::path::{Path, PathBuf};

pub fn run(a: ReportArgs) -> Result<()> {
    let all = a.files.iter().map(|f| Results::read(f)).collect::<Result<Vec<_>>>()?;
    for (flag, p) in [("--md", &a.md), ("--csv", &a.csv)] {
        if let Some(p) = p.as_deref().filter(|p| *p != Path::new("-")) {
            export::check_writable(flag, p)?;
        }
    }
    let lines = export::plot::parse_lines(&a.fig.lines)?;
    if let Some(dir) = &a.fig.fig {
        export::plot::prepare_dir(dir)?;
    }
    // A sweep over several configurations is one series per configuration in the side-by-side table and figures.
    let split: Vec<(String, Results)> = series_names(&all, &a.files)
        .into_iter()
        .zip(&all)
        .flat_map(|(name, r)| match r.series() {
            parts if parts.len() > 1 => parts,
            _ => vec![(name, r.clone())],
        })
        .collect();
    let parts: Vec<Results> = split.iter().map(|(_, r)| r.clone()).collect();
    let several = parts.len() > 1;
    // Runs on hosts whose NIC firmware, MTU or IOMMU mode differ compare the environments as much as the runs.
    for (r, f) in all.iter().zip(&a.files).skip(1) {
        for d in crate::env::differences(&all[0].env, &r.env) {
            eprintln!("warning: {} and {} ran in different environments: {d}", a.files[0].display(), f.display());
        }
    }
    let stdout_taken = [&a.md, &a.csv].iter().any(|p| p.as_deref() == Some(Path::new("-")));
    if !stdout_taken {
        for r in &all {
            println!("{} — {} ({}, {} cases)", r.label, r.config.transport, r.started_at, r.cases.len());
            println!("{}", table::render(&r.cases));
            for note in export::cells::notes(&r.cases) {
                println!("{note}");
            }
            if let Some(e) = &r.error {
                println!("note: this run stopped early: {e}");
            }
            println!();
        }
        if several {
            println!("Side by side (p50; X/A = run X's GB/s divided by run A's):\n{}\n", output::compare::render(&parts));
        }
        println!("Bandwidth in GB/s = 10^9 bytes/s; times in ms; * = block size clamped to the transfer size.");
    }
    // Each file's own configurations are compared inside its section; several files get one table across all.
    let mut md = export::markdown::render(&all);
    if all.len() > 1 {
        md.push_str(&export::compare::markdown(&parts));
    }
    emit(a.md.as_deref(), &md)?;
    if a.csv.is_some() {
        emit(a.csv.as_deref(), &export::csv::render(&all)?)?;
    }
    match a.csv.as_deref() {
        Some(p) if several && p != Path::new("-") => {
            let side = p.with_extension("compare.csv");
            export::write_atomic(&side, export::compare::csv(&parts)?.as_bytes())?;
            eprintln!("side-by-side csv: {}", side.display());
        }
        _ => {}
    }
    if let Some(dir) = &a.fig.fig {
        // One file: its configurations by case name; several: each series keeps its run's name in front.
        let short = if all.len() == 1 && split.len() > 1 { all[0].figure_series() } else { Vec::new() };
        let series = if short.is_empty() { &split } else { &short };
        let named: Vec<(String, &Results)> = series.iter().map(|(n, r)| (n.clone(), r)).collect();
        for f in export::plot::write_figures(&named, dir, &lines)? {
            eprintln!("figure: {}", f.display());
        }
    }
    Ok(())
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

fn emit(path: Option<&Path>, text: &str) -> Result<()> {
    match path {
        None => Ok(()),
        Some(p) if p == Path::new("-") => {
            print!("{text}");
            Ok(())
        }
        Some(p) => export::write_atomic(p, text.as_bytes()),
    }
}
