//! Writing results: one file per format. One interface for all of them (modelled on hyperfine's `Exporter` and
//! `ExportManager`): each format is an [`Exporter`] turning runs into the bytes of its file, [`Format`] lists the
//! formats once, and an [`ExportManager`] holds the formats a command was asked for and writes them all; the live
//! run (`output::Recorder`) and `kvxfer report` both write through it. Every file goes through [`write_atomic`], so
//! an interrupted run leaves either the previous complete file or the new complete file, never half of one.

pub mod args;
pub mod cells;
pub mod cluster;
pub mod compare;
pub mod csv;
pub mod events;
pub mod json;
pub mod markdown;
pub mod plot;

use anyhow::{Context, Result};
use args::OutputArgs;
use json::Results;
use std::path::{Path, PathBuf};

/// Write `bytes` to `path` via a temporary file in the same directory and a rename. A path that is a device or a
/// pipe (`--json /dev/null`, `--csv /dev/stdout`, a FIFO) is written in place: a rename would replace the device
/// node itself with a regular file (as root, /dev/null would then collect every process's discarded output). A
/// symbolic link is followed: the file it names is replaced, the link stays. The temporary file is removed when
/// writing it fails (a full disk).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    if std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir()) {
        return std::fs::write(path, bytes).with_context(|| format!("cannot write {}", path.display()));
    }
    let resolved;
    let path = if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
        match std::fs::canonicalize(path) {
            Ok(p) => {
                resolved = p;
                resolved.as_path()
            }
            // A dangling link: create the file it names.
            Err(_) => return std::fs::write(path, bytes).with_context(|| format!("cannot write {}", path.display())),
        }
    } else {
        path
    };
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    replace_with(&tmp, path, |t| std::fs::write(t, bytes))
}

/// Write `tmp` with `write`, then rename it over `path`; `tmp` is removed if either step fails.
pub fn replace_with(tmp: &Path, path: &Path, write: impl FnOnce(&Path) -> std::io::Result<()>) -> Result<()> {
    let outcome = write(tmp)
        .with_context(|| format!("cannot write {}", tmp.display()))
        .and_then(|()| std::fs::rename(tmp, path).with_context(|| format!("cannot write {}", path.display())));
    if outcome.is_err() {
        let _ = std::fs::remove_file(tmp);
    }
    outcome
}

#[cfg(test)]
mod write_tests {
    use super::*;

    #[test]
    fn a_link_keeps_pointing_at_the_rewritten_file() {
        let dir = std::env::temp_dir().join(format!("kvxfer-link-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (file, link) = (dir.join("real.json"), dir.join("link.json"));
        std::fs::write(&file, b"old").unwrap();
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&file, &link).unwrap();
        write_atomic(&link, b"new").unwrap();
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "the link stays a link");
        assert_eq!(std::fs::read(&file).unwrap(), b"new");
        // A temporary file that cannot be renamed into place (a directory is there) is not left behind.
        let busy = dir.join("busy");
        std::fs::create_dir_all(busy.join("x")).unwrap();
        assert!(write_atomic(&busy, b"x").is_err());
        assert!(!std::fs::read_dir(&dir).unwrap().any(|e| e.unwrap().file_name().to_string_lossy().contains(".tmp.")));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Fail early (usage error) when an output file could not be created: missing or unwritable directory.
pub fn check_writable(flag: &str, path: &Path) -> Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !dir.is_dir() {
        return Err(crate::error::usage(format!(
            "{flag} {}: directory {} does not exist; create it first",
            path.display(),
            dir.display()
        )));
    }
    if path.is_dir() {
        return Err(crate::error::usage(format!("{flag} {}: is a directory; give a file name", path.display())));
    }
    let probe = dir.join(format!(".kvxfer-probe.{}", std::process::id()));
    match std::fs::write(&probe, b"") {
        Ok(()) => {
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(e) => {
            Err(crate::error::usage(format!("{flag} {}: cannot write in {}: {e}", path.display(), dir.display())))
        }
    }
}

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

    fn exporter(self) -> Box<dyn Exporter> {
        match self {
            Format::Json => Box::new(json::JsonExporter),
            Format::Csv => Box::new(csv::CsvExporter),
            Format::Markdown => Box::new(markdown::MarkdownExporter),
            Format::CompareCsv => Box::new(compare::CompareCsvExporter),
        }
    }
}

/// Where a format goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    File(PathBuf),
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

/// The formats one command writes, in the order given.
#[derive(Default)]
pub struct ExportManager {
    exports: Vec<(Format, Target)>,
}

impl ExportManager {
    /// The results files of a run (`--json`, `--csv`, `--md`), each rewritten whole after every size.
    pub fn for_run(out: &OutputArgs) -> ExportManager {
        let mut m = ExportManager::default();
        for (format, path) in [(Format::Json, &out.json), (Format::Csv, &out.csv), (Format::Markdown, &out.md)] {
            if let Some(p) = path {
                m.add(format, Target::File(p.clone()));
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
            Target::File(p) => Some((*f, p.as_path())),
            Target::Stdout => None,
        })
    }

    /// Fail early (a usage error naming the flag) when a file could not be written: call before measuring.
    pub fn check_writable(&self) -> Result<()> {
        self.files().try_for_each(|(f, p)| check_writable(f.flag(), p))
    }

    /// Write every format: files atomically, stdout as the text is.
    pub fn write(&self, runs: &[Results]) -> Result<()> {
        for (format, target) in &self.exports {
            let bytes = format.exporter().serialize(runs)?;
            match target {
                Target::File(p) => write_atomic(p, &bytes)?,
                Target::Stdout => crate::console::out_bytes(&bytes),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::fs::FileTypeExt;

    #[test]
    fn a_fifo_is_written_in_place_not_replaced() {
        let dir = std::env::temp_dir().join(format!("kvxfer-fifo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("out.json");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || {
                let mut text = String::new();
                std::fs::File::open(&fifo).unwrap().read_to_string(&mut text).unwrap();
                text
            })
        };
        write_atomic(&fifo, b"{\"ok\": true}").unwrap();
        // Checked before joining the reader: a renamed-over FIFO would leave it waiting for a writer forever.
        assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo(), "the FIFO must still be a FIFO");
        assert_eq!(reader.join().unwrap(), "{\"ok\": true}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
