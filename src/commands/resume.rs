//! Continuing an interrupted flag-driven sweep: which of its cases the earlier run already measured.

use crate::bail_usage;
use crate::export::json::Results;
use crate::plan::RunConfig;
use anyhow::{Context, Result};
use std::path::Path;

/// The results file `--resume` names. Not standard input (`-`, which other inputs accept): the run writes the
/// rest of its cases back into the file.
pub fn read_resumed(path: &Path) -> Result<Results> {
    if path.as_os_str() == "-" {
        bail_usage!(
            "--resume -: give the results file itself; the resumed run writes its remaining cases back into it"
        );
    }
    Results::read(path).context("--resume")
}

/// The results of an interrupted flag-driven sweep, checked against this run's configuration: same transport,
/// memory, knobs, and no size this run does not ask for. Returns them with `cfg.cases` cut to what is left.
pub fn continue_sweep(path: &Path, cfg: &mut RunConfig) -> Result<Results> {
    let prev = read_resumed(path)?;
    if prev.sweep.is_some() || prev.cluster.is_some() {
        bail_usage!(
            "--resume {}: the results of a sweep file or cluster run; give the same sweep file (kvxfer sweep FILE.toml --resume {})",
            path.display(),
            path.display()
        );
    }
    let mut differs = Vec::new();
    if prev.config.transport != cfg.transport.kind().to_string() {
        differs.push(format!("transport {} (now {})", prev.config.transport, cfg.transport.kind()));
    }
    if prev.config.src_mem != cfg.src_mem {
        differs.push(format!("--src {} (now {})", prev.config.src_mem, cfg.src_mem));
    }
    let (was, now) = (serde_json::to_value(&prev.config.knobs)?, serde_json::to_value(&cfg.knobs)?);
    if let (Some(was), Some(now)) = (was.as_object(), now.as_object()) {
        for (k, v) in now {
            if was.get(k).is_some_and(|w| w != v) {
                differs.push(format!("{k} {} (now {v})", was[k]));
            }
        }
    }
    if !differs.is_empty() {
        bail_usage!(
            "--resume {}: that run had {}; resume with its flags (its config key has them) or start afresh",
            path.display(),
            differs.join(", ")
        );
    }
    for c in &prev.cases {
        if !cfg.cases.iter().any(|k| k.size_bytes == c.size_bytes) {
            bail_usage!(
                "--resume {}: it measured {}, which --sizes/--tokens do not ask for; resume with the same sizes",
                path.display(),
                crate::plan::sizes::format_size(c.size_bytes)
            );
        }
    }
    let done = |size: u64| prev.cases.iter().any(|c| c.sweep.complete && c.size_bytes == size);
    let total = cfg.cases.len();
    cfg.cases.retain(|k| !done(k.size_bytes));
    crate::errln!("resume: {} of {total} cases complete in {} (skipped)", total - cfg.cases.len(), path.display());
    Ok(prev)
}
