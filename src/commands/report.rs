//! `kvxfer report`: re-render tables from saved results files.

use crate::cli::ReportArgs;
use crate::export::{self, json::Results};
use crate::output::table;
use anyhow::Result;
use std::path::Path;

pub fn run(a: ReportArgs) -> Result<()> {
    let all = a.files.iter().map(|f| Results::read(f)).collect::<Result<Vec<_>>>()?;
    for (flag, p) in [("--md", &a.md), ("--csv", &a.csv)] {
        if let Some(p) = p.as_deref().filter(|p| *p != Path::new("-")) {
            export::check_writable(flag, p)?;
        }
    }
    let stdout_taken = [&a.md, &a.csv].iter().any(|p| p.as_deref() == Some(Path::new("-")));
    if !stdout_taken {
        for r in &all {
            println!("{} — {} ({}, {} cases)", r.label, r.config.transport, r.started_at, r.cases.len());
            println!("{}", table::render(&r.cases));
            for note in table::notes(&r.cases) {
                println!("{note}");
            }
            if let Some(e) = &r.error {
                println!("note: this run stopped early: {e}");
            }
            println!();
        }
        println!("Bandwidth in GB/s = 10^9 bytes/s; times in ms; * = block size clamped to the transfer size.");
    }
    emit(a.md.as_deref(), &export::markdown::render(&all))?;
    if a.csv.is_some() {
        emit(a.csv.as_deref(), &export::csv::render(&all)?)?;
    }
    Ok(())
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
