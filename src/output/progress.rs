//! The progress bar on stderr. indicatif draws nothing when stderr is not a terminal, so logs and pipes stay clean;
//! console rows go to stdout through [`Progress::println`] so they never tear the bar.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::time::Duration;

pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// A bar over `total_reps` reps (warm-up included).
    pub fn new(total_reps: u64) -> Progress {
        // A dumb terminal (a serial console, an editor's shell) cannot redraw a line: no bar there.
        let dumb = std::env::var("TERM").is_ok_and(|t| t == "dumb");
        let target = if dumb { ProgressDrawTarget::hidden() } else { ProgressDrawTarget::stderr() };
        let bar = ProgressBar::with_draw_target(Some(total_reps), target);
        bar.set_style(
            ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} reps  {msg}")
                .expect("static template")
                .progress_chars("=> "),
        );
        bar.enable_steady_tick(Duration::from_millis(200));
        Progress { bar }
    }

    pub fn set_message(&self, msg: String) {
        self.bar.set_message(msg);
    }

    pub fn inc(&self) {
        self.bar.inc(1);
    }

    /// Print a line on stdout without disturbing the bar.
    pub fn println(&self, line: &str) {
        self.bar.suspend(|| crate::outln!("{line}"));
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
