//! The progress bar on stderr. indicatif draws nothing when stderr is not a terminal, so logs and pipes stay clean;
//! console rows go to stdout through [`Progress::println`] so they never tear the bar.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::time::Duration;

pub struct Progress {
    bar: ProgressBar,
    /// A paced run (`--duration`) counts time, not reps: each size's time so far of its duration (none: `inf`),
    /// and how many sizes there are.
    paced: Option<(Option<Duration>, usize)>,
}

impl Progress {
    /// A bar over `total_reps` reps (warm-up included).
    pub fn new(total_reps: u64) -> Progress {
        let bar = ProgressBar::with_draw_target(Some(total_reps), target());
        bar.set_style(
            ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} reps  {msg}")
                .expect("static template")
                .progress_chars("=> "),
        );
        bar.enable_steady_tick(Duration::from_millis(200));
        Progress { bar, paced: None }
    }

    /// A paced run of `cases` sizes, each measuring for `per_case` (a bar of each size's time) or until a signal
    /// (`None`: a spinner with the time so far): its rep count is not known ahead.
    pub fn paced(&mut self, per_case: Option<Duration>, cases: usize) {
        let template = match per_case {
            Some(_) => "{spinner} [{elapsed_precise}] {bar:30} {msg}",
            None => "{spinner} [{elapsed_precise}] {msg}",
        };
        self.bar.set_style(ProgressStyle::with_template(template).expect("static template").progress_chars("=> "));
        self.bar.set_length(per_case.map_or(0, |d| d.as_millis() as u64));
        self.bar.set_position(0);
        self.paced = Some((per_case, cases));
    }

    /// A rep of case `index` (`size`, `gbps`) is done, `measured_s` into its measured time: the bar's position and
    /// what it says.
    pub fn rep(&self, index: usize, size: &str, gbps: f64, measured_s: Option<f64>) {
        let Some((per_case, cases)) = self.paced else {
            self.bar.inc(1);
            self.bar.set_message(format!("{size} {gbps:.2} GB/s"));
            return;
        };
        let t = measured_s.unwrap_or(0.0);
        let of = match per_case {
            Some(d) => {
                self.bar.set_position(((t * 1e3) as u64).min(d.as_millis() as u64));
                format!("{t:.1} of {:.1} s", d.as_secs_f64())
            }
            None => format!("{t:.1} s, until Ctrl-C"),
        };
        let which = if cases > 1 { format!("size {}/{cases} ", index + 1) } else { String::new() };
        self.bar.set_message(format!("{which}{size}: {of}  {gbps:.2} GB/s"));
    }

    /// Print a line on stdout without disturbing the bar.
    pub fn println(&self, line: &str) {
        self.bar.suspend(|| crate::outln!("{line}"));
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// Where a bar draws: stderr, unless a dumb terminal (a serial console, an editor's shell) cannot redraw a line.
fn target() -> ProgressDrawTarget {
    let dumb = std::env::var("TERM").is_ok_and(|t| t == "dumb");
    if dumb {
        ProgressDrawTarget::hidden()
    } else {
        ProgressDrawTarget::stderr()
    }
}

/// How far a long run of steps is, on one line of stderr: on a terminal the line is rewritten in place (indicatif,
/// as [`Progress`]); when stderr is a log or a pipe, a line at every tenth of the steps and at least every
/// [`StepProgress::QUIET_FOR`] otherwise, so a run of thousands of flows leaves a dozen lines, not thousands.
pub struct StepProgress {
    total: usize,
    bar: Option<ProgressBar>,
    started: std::time::Instant,
    last_line: std::time::Instant,
    last_tenth: usize,
    /// Lines printed (off a terminal).
    printed: usize,
}

impl StepProgress {
    /// Longest silence between two lines when stderr is not a terminal.
    pub const QUIET_FOR: Duration = Duration::from_secs(30);

    /// Progress over `total` steps; `what` says what they are ("62 steps, 992 flows").
    pub fn new(total: usize, what: &str) -> StepProgress {
        use std::io::IsTerminal;
        let dumb = std::env::var("TERM").is_ok_and(|t| t == "dumb");
        let bar = (std::io::stderr().is_terminal() && !dumb).then(|| {
            let bar = ProgressBar::with_draw_target(Some(total as u64), ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template("[{elapsed_precise}] {bar:30} step {pos}/{len}  {msg}")
                    .expect("static template")
                    .progress_chars("=> "),
            );
            bar
        });
        if bar.is_none() {
            crate::errln!("progress: {what}; a line every tenth of the steps");
        }
        let now = std::time::Instant::now();
        StepProgress { total, bar, started: now, last_line: now, last_tenth: 0, printed: 0 }
    }

    /// `done` steps of the total are done; `msg` says what the last one did.
    pub fn update(&mut self, done: usize, msg: &str) {
        if let Some(bar) = &self.bar {
            bar.set_position(done as u64);
            bar.set_message(msg.to_string());
            return;
        }
        let tenth = done * 10 / self.total.max(1);
        if tenth > self.last_tenth || self.last_line.elapsed() >= Self::QUIET_FOR {
            self.last_tenth = tenth;
            self.last_line = std::time::Instant::now();
            self.printed += 1;
            let pct = done * 100 / self.total.max(1);
            let secs = self.started.elapsed().as_secs_f64();
            crate::errln!("step {done}/{} ({pct}%, {secs:.1} s): {msg}", self.total);
        }
    }

    /// Clear the line (a terminal) before the run's last words.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_a_terminal_a_long_run_prints_about_a_line_per_tenth() {
        // Tests run with stderr captured (not a terminal): count the lines the sparse mode decides to print.
        let mut p = StepProgress { bar: None, ..StepProgress::new(1000, "test") };
        for done in 1..=1000 {
            p.update(done, "x");
        }
        assert_eq!(p.printed, 10);
    }
}
