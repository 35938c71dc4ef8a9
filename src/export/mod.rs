//! Writing results: one file per format. One interface for all of them (modelled on hyperfine's `Exporter` and
//! `ExportManager`): each format is an [`Exporter`] turning runs into the bytes of its file, [`Format`] lists the
//! formats once, and an [`ExportManager`] holds the formats a command was asked for and writes them all; the live
//! run (`output::Recorder`) and `kvxfer report` both write through it. Every file goes through [`write_atomic`], so
//! an interrupted run leaves either the previous complete file or the new complete file, never half of one.

pub mod cells;
pub mod cluster;
pub mod cluster_replay;
pub mod compare;
pub mod csv;
pub mod events;
pub mod files;
pub mod html;
pub mod json;
pub mod markdown;
pub mod outputs;
pub mod plot;
pub mod replay;

use crate::measure::ExtrasNotes;
use anyhow::Result;
use json::Results;
use outputs::Outputs;
use std::path::{Path, PathBuf};

pub use files::{check_writable, replace_with, write_atomic};

/// One results format: the whole file for these runs.
pub trait Exporter {
    fn serialize(&self, runs: &[Results]) -> Result<Vec<u8>>;
}

/// Every results format kvxfer writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `--json`: the results file (`kvxfer/results/v1`) of one run.
    Json,
    /// `--csv`: one row per case.
    Csv,
    /// `--md`: a Markdown section per run, and a side-by-side table when there are several.
    Markdown,
    /// `report --csv` with several runs: the side-by-side table next to the CSV (`FILE.compare.csv`).
    CompareCsv,
}

impl Format {
    /// The flag that asks for it (named when its file cannot be written).
    pub fn flag(self) -> &'static str {
        match self {
            Format::Json => "--json",
            Format::Csv | Format::CompareCsv => "--csv",
            Format::Markdown => "--md",
        }
    }

    /// What the closing lines call its file (`results: run.json`).
    pub fn what(self) -> &'static str {
        match self {
            Format::Json => "results",
            Format::Csv => "csv",
            Format::Markdown => "markdown",
            Format::CompareCsv => "side-by-side csv",
        }
    }

    /// Its exporter (`extras`: the transports' words about their extras, for the notes under tables).
    fn exporter(self, extras: &'static dyn ExtrasNotes) -> Box<dyn Exporter> {
        match self {
            Format::Json => Box::new(json::JsonExporter),
            Format::Csv => Box::new(csv::CsvExporter),
            Format::Markdown => Box::new(markdown::MarkdownExporter { extras }),
            Format::CompareCsv => Box::new(compare::CompareCsvExporter),
        }
    }
}

/// Where a format goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A file the user named: written as a shell redirect would ([`write_atomic`]).
    File(PathBuf),
    /// A file kvxfer created under a default name: replaced, never followed ([`files::write_owned`]).
    Created(PathBuf),
    /// `report --md -`: printed as it is, nothing added.
    Stdout,
}

impl Target {
    /// `-` is stdout (for `report`), anything else a file.
    pub fn file_or_stdout(path: &Path) -> Target {
        if path == Path::new("-") {
            Target::Stdout
        } else {
            Target::File(path.to_path_buf())
        }
    }
}

/// The formats one command writes, in the order given, and the transports' words about their extras (notes under
/// tables; export carries the extras without knowing them).
#[derive(Clone)]
pub struct ExportManager {
    exports: Vec<(Format, Target)>,
    extras: &'static dyn ExtrasNotes,
}

impl ExportManager {
    /// No formats yet.
    pub fn new(extras: &'static dyn ExtrasNotes) -> ExportManager {
        ExportManager { exports: Vec::new(), extras }
    }

    /// The results files of a run (`--json`, `--csv`, `--md`), each rewritten whole after every size.
    pub fn for_run(out: &Outputs, extras: &'static dyn ExtrasNotes) -> ExportManager {
        let mut m = ExportManager::new(extras);
        for (format, path) in [(Format::Json, &out.json), (Format::Csv, &out.csv), (Format::Markdown, &out.md)] {
            if let Some(p) = path {
                let target = if out.created.contains(p) { Target::Created(p.clone()) } else { Target::File(p.clone()) };
                m.add(format, target);
            }
        }
        m
    }

    pub fn add(&mut self, format: Format, target: Target) {
        self.exports.push((format, target));
    }

    /// The target of `format`, if it was asked for.
    pub fn target(&self, format: Format) -> Option<&Target> {
        self.exports.iter().find(|(f, _)| *f == format).map(|(_, t)| t)
    }

    /// The files, with what each holds, in the order given.
    pub fn files(&self) -> impl Iterator<Item = (Format, &Path)> {
        self.exports.iter().filter_map(|(f, t)| match t {
            Target::File(p) | Target::Created(p) => Some((*f, p.as_path())),
            Target::Stdout => None,
        })
    }

    /// Fail early (a usage error naming the flag) when a file could not be written: call before measuring.
    pub fn check_writable(&self) -> Result<()> {
        self.files().try_for_each(|(f, p)| check_writable(f.flag(), p))
    }

    /// Write every format: files atomically, stdout as the text is.
    pub fn write(&self, runs: &[Results]) -> Result<()> {
        self.write_some(runs, true)
    }

    /// Rewrite the files of a run still going: all but FIFOs and devices, which get the final results only.
    pub fn write_progress(&self, runs: &[Results]) -> Result<()> {
        self.write_some(runs, false)
    }

    fn write_some(&self, runs: &[Results], last: bool) -> Result<()> {
        for (format, target) in &self.exports {
            if let (false, Target::File(p)) = (last, target) {
                if files::written_once(p) {
                    continue;
                }
            }
            let bytes = format.exporter(self.extras).serialize(runs)?;
            match target {
                Target::File(p) => write_atomic(p, &bytes)?,
                Target::Created(p) => files::write_owned(p, &bytes)?,
                Target::Stdout => crate::console::out_bytes(&bytes),
            }
        }
        Ok(())
    }
}
