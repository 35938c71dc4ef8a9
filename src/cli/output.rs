//! The flags naming a run's output files and figures, shared by `send`, `sweep` and `cluster` (and `--fig`/`--line`
//! by `report`); the run's `Recorder` takes what they name as [`Outputs`].

use crate::export::outputs::{Figures, Outputs};
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
}

impl OutputArgs {
    /// The files these flags name.
    pub fn outputs(&self) -> Outputs {
        Outputs {
            json: self.json.clone(),
            csv: self.csv.clone(),
            md: self.md.clone(),
            events: self.events.clone(),
            figures: self.fig.figures(),
            created: Vec::new(),
            default_dir: None,
        }
    }
}

#[derive(Args, Debug, Clone, Default)]
pub struct FigArgs {
    /// Write figures here (PNG and SVG; created if its parent exists): time and bandwidth vs size, per-rep GB/s
    #[arg(long, value_name = "DIR")]
    pub fig: Option<PathBuf>,
    /// A reference line on the bandwidth figure, LABEL=GBPS; repeatable: --line "NIC 25 GB/s=25"
    #[arg(long = "line", value_name = "LABEL=GBPS", requires = "fig")]
    pub lines: Vec<String>,
    /// Write one self-contained HTML page here: warnings, the run's identity, its figures, the cases (sortable)
    #[arg(long, value_name = "PAGE")]
    pub html: Option<PathBuf>,
}

impl FigArgs {
    pub fn figures(&self) -> Figures {
        Figures { dir: self.fig.clone(), lines: self.lines.clone(), html: self.html.clone() }
    }
}
