//! Writing results: one file per format. Every writer goes through [`write_atomic`], so an interrupted run leaves
//! either the previous complete file or the new complete file, never half of one.

pub mod args;
pub mod cells;
pub mod compare;
pub mod csv;
pub mod events;
pub mod json;
pub mod markdown;
pub mod plot;

use anyhow::{Context, Result};
use std::path::Path;

/// Write `bytes` to `path` via a temporary file in the same directory and a rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    std::fs::write(&tmp, bytes).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))
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
