//! The flags naming a run's output files and figures, shared by `send` and `sweep` (flattened into their clap
//! structs in `cli`, which re-exports them). They live here, next to what writes those files, so the layers below
//! `cli` (the run's `Recorder` in `output`) can take them.

use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "Output")]
pub struct OutputArgs {
    /// Write the results JSON here (updated atomically as each case completes; default: a new file in --out-dir)
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Also write one CSV row per case here
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Also write a Markdown table here
    #[arg(long, value_name = "FILE")]
    pub md: Option<PathBuf>,
    /// Write per-rep stage timestamps of both ends here (JSON lines)
    #[arg(long, value_name = "FILE")]
    pub events: Option<PathBuf>,
    #[command(flatten)]
    pub fig: FigArgs,
    /// The files above that kvxfer created under default names (rewritten by rename, never through a link).
    #[arg(skip)]
    pub created: Vec<PathBuf>,
    /// Where the results file is created, under a name of its own, when --json names none (--out-dir).
    #[arg(skip)]
    pub default_dir: Option<PathBuf>,
}

#[derive(Args, Debug, Clone, Default)]
pub struct FigArgs {
    /// Write figures here (PNG and SVG; created if its parent exists): time and bandwidth vs size, per-rep GB/s
    #[arg(long, value_name = "DIR")]
    pub fig: Option<PathBuf>,
    /// A reference line on the bandwidth figure, LABEL=GBPS; repeatable: --line "NIC 25 GB/s=25"
    #[arg(long = "line", value_name = "LABEL=GBPS", requires = "fig")]
    pub lines: Vec<String>,
}
