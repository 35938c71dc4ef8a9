//! Continuing an interrupted run: the command that does it (printed when a run is interrupted, kept in its
//! results) and, for a flag-driven sweep, which of its cases the earlier run already measured.

use crate::bail_usage;
use crate::export::json::Results;
use crate::plan::RunConfig;
use anyhow::{Context, Result};
use std::path::Path;

/// This process's own command line with `--resume FILE` in place of any it had: run again, it continues into
/// `json`.
pub fn resume_command(json: &Path) -> String {
    let mut words = vec!["kvxfer".to_string()];
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--resume" {
            args.next();
        } else if !a.starts_with("--resume=") {
            words.push(a);
        }
    }
    words.push("--resume".into());
    words.push(json.display().to_string());
    words.iter().map(|w| shell_word(w)).collect::<Vec<_>>().join(" ")
}

/// `w` as a POSIX shell reads it back: bare when it holds only characters no shell treats specially, else in
/// single quotes.
fn shell_word(w: &str) -> String {
    let plain = !w.is_empty() && w.chars().all(|c| c.is_ascii_alphanumeric() || "_./:=,@%+-".contains(c));
    if plain {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', r"'\''"))
    }
}

/// The results of an interrupted flag-driven sweep, checked against this run's configuration: same transport,
/// memory, knobs, and no size this run does not ask for. Returns them with `cfg.cases` cut to what is left.
pub fn continue_sweep(path: &Path, cfg: &mut RunConfig) -> Result<Results> {
    let prev = Results::read(path).context("--resume")?;
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
                "--resume {}: it measured {} bytes, which --sizes/--tokens do not ask for; resume with the same sizes",
                path.display(),
                c.size_bytes
            );
        }
    }
    let done = |size: u64| prev.cases.iter().any(|c| c.complete && c.size_bytes == size);
    let total = cfg.cases.len();
    cfg.cases.retain(|k| !done(k.size_bytes));
    crate::errln!("resume: {} of {total} cases complete in {} (skipped)", total - cfg.cases.len(), path.display());
    Ok(prev)
}

#[cfg(test)]
mod tests {
    use super::shell_word;

    #[test]
    fn words_come_back_as_the_shell_reads_them() {
        assert_eq!(shell_word("--sizes"), "--sizes");
        assert_eq!(shell_word("1MiB,2MiB"), "1MiB,2MiB");
        assert_eq!(shell_word("NIC 25 GB/s=25"), "'NIC 25 GB/s=25'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
        assert_eq!(shell_word(""), "''");
    }
}
