//! The files a run writes, as its output flags name them (`--json`, `--csv`, `--md`, `--events`, `--fig`, `--line`):
//! what the run's `Recorder` and the exporters take, whichever command was given them.

use std::path::PathBuf;

#[derive(Debug, Clone, Default)]
pub struct Outputs {
    /// The results JSON (updated atomically as each case completes; default: a new file in `default_dir`).
    pub json: Option<PathBuf>,
    /// One CSV row per case.
    pub csv: Option<PathBuf>,
    /// A Markdown table.
    pub md: Option<PathBuf>,
    /// Per-rep stage timestamps of both ends (JSON lines).
    pub events: Option<PathBuf>,
    pub figures: Figures,
    /// The files above that kvxfer created under default names (rewritten by rename, never through a link).
    pub created: Vec<PathBuf>,
    /// Where the results file is created, under a name of its own, when `json` names none (`--out-dir`).
    pub default_dir: Option<PathBuf>,
}

/// The figures of a run or of saved results.
#[derive(Debug, Clone, Default)]
pub struct Figures {
    /// Where the figures go (PNG and SVG; created if its parent exists).
    pub dir: Option<PathBuf>,
    /// Reference lines on the bandwidth figure, each `LABEL=GBPS`.
    pub lines: Vec<String>,
    /// One self-contained HTML page of the run (see `export::html`).
    pub html: Option<PathBuf>,
}
