//! The sink of a running sender: prints a row per size as it finishes, moves the progress bar, and rewrites every
//! requested results file after each size, so an interrupted run keeps what it completed.

use super::{compare, interrupt, progress::Progress, table};
use crate::export::cells::{case_extras, case_name, ceiling_note, ci_note, warning_summary, why_note};
use crate::export::outputs::{Figures, Outputs};
use crate::export::{self, events::EventsFile, json::Results, ExportManager};
use crate::plan::paged::Layout;
use crate::plan::{sizes::format_size, RunConfig};
use crate::run::pace::IntervalRow;
use crate::run::{CaseRecord, RepRecord, RunSink};
use crate::stats::CaseResult;
use crate::transport::registry::NOTES;
use anyhow::Result;

pub struct Recorder {
    pub results: Results,
    progress: Progress,
    exports: ExportManager,
    events: Option<EventsFile>,
    verify: bool,
    figures: Figures,
    /// How many cases the run measures, and the command that resumes it: what an interrupted run's files say.
    cases_total: usize,
    resume: Option<String>,
    /// The first failed --events write, which fails the run at the end of the case.
    events_error: Option<anyhow::Error>,
    events_path: Option<std::path::PathBuf>,
}

impl Recorder {
    /// Check every output path (a missing directory is a usage error): call before connecting to anything.
    pub fn check_outputs(out: &Outputs) -> Result<()> {
        let named = [("--json", &out.json), ("--csv", &out.csv), ("--md", &out.md), ("--events", &out.events)];
        let named: Vec<(&str, &std::path::Path)> =
            named.iter().filter_map(|(f, p)| p.as_deref().map(|p| (*f, p))).collect();
        if let Some((flag, _)) = named.iter().find(|(_, p)| *p == std::path::Path::new("-")) {
            crate::bail_usage!(
                "{flag} -: stdout carries the live table during a run; give a file, or print a saved run with kvxfer report FILE.json {flag} -"
            );
        }
        export::files::check_distinct(&named)?;
        ExportManager::for_run(out, NOTES).check_writable()?;
        if let Some(p) = &out.events {
            export::check_writable("--events", p)?;
        }
        export::plot::parse_lines(&out.figures.lines)?;
        if let Some(dir) = &out.figures.dir {
            export::plot::prepare_dir(dir)?;
        }
        if let Some(page) = &out.figures.html {
            export::check_writable("--html", page)?;
        }
        Ok(())
    }

    pub fn new(results: Results, cfg: &RunConfig, out: &Outputs) -> Result<Recorder> {
        let mut rec = Recorder::with_total(
            results,
            cfg.cases.len() as u64 * (u64::from(cfg.knobs.reps) + u64::from(cfg.knobs.warmup)),
            cfg.knobs.verify,
            out,
        )?;
        rec.cases_total = rec.results.cases.len() + cfg.cases.len();
        rec.save()?;
        Ok(rec)
    }

    /// A paced run (`--duration`) of `cases` sizes: its bar counts each size's time, not reps.
    pub fn set_pacing(&mut self, pacing: Option<&crate::run::pace::Pacing>, cases: usize) {
        use crate::run::pace::Length;
        if let Some(p) = pacing {
            self.progress.paced(if let Length::For(d) = p.length { Some(d) } else { None }, cases);
        }
    }

    /// What an interrupted run's files and line say: how many cases it measures in all, and (when the command
    /// takes `--resume`) how to resume it into its results file.
    pub fn set_plan(&mut self, cases_total: usize, resumable: bool) -> Result<()> {
        self.cases_total = cases_total;
        let json = self.exports.files().find(|(f, _)| *f == export::Format::Json).map(|(_, p)| p.to_path_buf());
        self.resume = json.filter(|_| resumable).map(|p| interrupt::resume_command(&p));
        self.save()
    }

    /// A recorder whose progress bar counts `total` reps (warm-ups included). Unless `--json` named one, the
    /// results file is created now, under a name of its own, and written at once (no case yet, not complete), so
    /// a run killed before its first case still leaves a file that says so.
    pub fn with_total(results: Results, total: u64, verify: bool, out: &Outputs) -> Result<Recorder> {
        let mut out = out.clone();
        if let (None, Some(dir)) = (&out.json, &out.default_dir) {
            let path = export::files::create_default(dir, "json")?;
            out.created.push(path.clone());
            out.json = Some(path);
        }
        let out = &out;
        let events = out.events.as_deref().map(EventsFile::create).transpose()?;
        let progress = Progress::new(total);
        // Once per run, above the live rows: every row would repeat it (report's tables give it a column).
        if let Some(ms) = export::cells::connect_ms(&results.config.transport_detail) {
            progress
                .println(&format!("connection set up in {ms:.3} ms (before the first rep; registration not included)"));
        }
        progress.println(&table::live_header());
        let exports = ExportManager::for_run(out, NOTES);
        let cases_total = results.cases.len();
        Ok(Recorder {
            results,
            progress,
            exports,
            events,
            verify,
            figures: out.figures.clone(),
            cases_total,
            resume: None,
            events_error: None,
            events_path: out.events.clone(),
        })
    }

    /// Rewrite every requested file from the current results; a signal meanwhile waits, then finishes these.
    pub fn save(&self) -> Result<()> {
        self.save_as(false)
    }

    fn save_as(&self, last: bool) -> Result<()> {
        let armed = || interrupt::Armed {
            results: self.results.clone(),
            exports: self.exports.clone(),
            cases_total: self.cases_total,
            resume: self.resume.clone(),
        };
        let runs = std::slice::from_ref(&self.results);
        interrupt::saving(armed, || if last { self.exports.write(runs) } else { self.exports.write_progress(runs) })
    }

    /// Record why the run stopped (kept in the JSON next to the completed cases) and close the bar.
    pub fn finish(&mut self, error: Option<&anyhow::Error>) -> Result<()> {
        self.progress.finish();
        match error {
            Some(e) => self.results.error = Some(format!("{e:#}")),
            None => self.results.complete = true,
        }
        if error.is_none() {
            self.mark_cut_short();
        }
        // Next to the start's, in the fingerprint: a host that got busier during the run shows it.
        let end = crate::env::load_average(crate::env::sysroot::SysRoot::get());
        if let Some(env) = self.results.env.as_object_mut() {
            env.insert("load_avg_end".into(), serde_json::json!(end));
        }
        self.save_as(true)?;
        interrupt::disarm();
        let series = export::compare::series_of(std::slice::from_ref(&self.results));
        if series.len() > 1 {
            crate::outln!(
                "\nSide by side (p50; X/A = run X's GB/s divided by run A's):\n{}\n",
                compare::render(&series)
            );
        }
        if let Some(line) = ceiling_note(&self.results.cases) {
            crate::outln!("{line}");
        }
        crate::outln!("{}", warning_summary(&self.results.cases));
        if let Some(line) = ci_note(&self.results.cases) {
            crate::outln!("{line}");
        }
        // What the transports say about their extras, but for what each case's live row said already.
        let names: Vec<String> = self.results.cases.iter().map(case_name).collect();
        for note in NOTES.notes(&case_extras(&self.results.cases, &names)).into_iter().filter(|n| !n.live) {
            crate::outln!("{}", note.line);
        }
        for line in self.results.cases.iter().filter_map(why_note) {
            crate::outln!("{line}");
        }
        let clamped = self.results.cases.iter().any(|c| c.shape.block_clamped);
        if clamped {
            crate::outln!("* block size clamped to the transfer size");
        }
        if self.results.cases.iter().any(|c| c.shape.layout == Layout::Paged) {
            crate::outln!("p paged layout: block = one piece (--block-tokens tokens of one layer's K or V); the JSON has pieces and writes");
        }
        for (format, p) in self.exports.files() {
            crate::errln!("{}: {}", format.what(), p.display());
        }
        self.write_figures()
    }

    /// A finite paced case that a signal cut short keeps what it measured (its `duration.stopped_by` says so), but
    /// the run did not do what was asked: it is interrupted, the cut case not counted among those done. Resuming
    /// would take the partial case as done, so no resume command is offered.
    fn mark_cut_short(&mut self) {
        fn cut(c: &CaseResult) -> Option<(String, &crate::run::pace::DurationRecord)> {
            let d = c.duration.as_ref()?;
            d.s.and(d.stopped_by.clone()).map(|s| (s, d))
        }
        let Some((signal, measuring)) = self.results.cases.iter().find_map(|c| {
            cut(c).map(|(s, d)| {
                let how = format!("{:.1} s of {:.1} s", d.measured_s, d.s.unwrap_or_default());
                (s, format!("{}: {how} measured, kept in cases (duration.stopped_by)", format_size(c.size_bytes)))
            })
        }) else {
            return;
        };
        let done = self.results.cases.iter().filter(|c| cut(c).is_none()).count();
        interrupt::mark(&mut self.results, &signal, done, self.cases_total, Some(measuring), None);
    }

    /// `--fig` and `--html`: draw the completed sizes (even of a run that stopped early) from the results in
    /// memory; the page is written even with none, and says so.
    fn write_figures(&self) -> Result<()> {
        let lines = export::plot::parse_lines(&self.figures.lines)?;
        if let Some(page) = &self.figures.html {
            export::html::write_run(page, &self.results, &lines, NOTES)?;
        }
        let Some(dir) = &self.figures.dir else { return Ok(()) };
        if self.results.cases.is_empty() {
            crate::errln!("figures: none drawn, no size completed");
            return Ok(());
        }
        export::plot::draw_series(&self.results.figure_series(), &mut export::plot::Sink::Dir(dir), &lines)
    }
}

impl Recorder {
    /// Keep a sweep case's current results (replacing its earlier state, matched by `case_id`) and save; print its
    /// row once it is complete.
    pub fn put_case(&mut self, result: CaseResult) -> Result<()> {
        self.events_failed()?;
        let row = result.sweep.complete.then(|| table::live_row(&result));
        match self
            .results
            .cases
            .iter_mut()
            .find(|c| c.sweep.case_id.is_some() && c.sweep.case_id == result.sweep.case_id)
        {
            Some(slot) => *slot = result,
            // Sweep order (case ids), whatever order the cases were first measured in.
            None => {
                let at = self.results.cases.iter().take_while(|c| c.sweep.case_id < result.sweep.case_id).count();
                self.results.cases.insert(at, result);
            }
        }
        self.results.update_ceiling();
        let saved = self.save();
        if let Some(row) = row {
            self.progress.println(&row);
        }
        saved
    }
}

impl Recorder {
    fn events_failed(&mut self) -> Result<()> {
        match self.events_error.take() {
            Some(e) => Err(e.context(format!(
                "--events {}: cannot write the per-rep events",
                self.events_path.as_ref().map(|p| p.display().to_string()).unwrap_or_default()
            ))),
            None => Ok(()),
        }
    }
}

impl RunSink for Recorder {
    fn rep_done(&mut self, case: &CaseRecord, rep: &RepRecord, warmup: bool) {
        if let Some(ev) = &mut self.events {
            if let Err(e) = ev.rep(case, rep, warmup) {
                // Kept for case_done, which can fail the run: an --events file that cannot be written is as
                // lost as a --json one.
                self.events_error.get_or_insert(e);
            }
        }
        let measured_s = case.paced.as_ref().map(|p| p.elapsed());
        self.progress.rep(case.index, &format_size(case.case.size_bytes), rep.gbps, measured_s);
        let kind = if warmup { "warm-up" } else { "measured" };
        interrupt::measuring(Some(format!("{}: {kind} rep {} done", format_size(case.case.size_bytes), rep.i + 1)));
    }

    fn interval(&mut self, case: &CaseRecord, row: &IntervalRow, recorded: bool) {
        self.progress.println(&interval_line(case.case.size_bytes, row, recorded));
    }

    fn case_done(&mut self, case: &CaseRecord) -> Result<()> {
        self.events_failed()?;
        interrupt::measuring(None);
        let result = CaseResult::from_record(case, self.verify);
        let row = table::live_row(&result);
        self.results.cases.push(result);
        self.results.update_ceiling();
        // Save before printing: once a row is on screen, an interrupted run's files already hold that size.
        let saved = self.save();
        self.progress.println(&row);
        saved
    }
}

/// One line per interval of a paced case (`interval`, recorded with `--interval`; `progress` without it).
fn interval_line(size: u64, row: &IntervalRow, recorded: bool) -> String {
    format!(
        "{} {:>9}  t={:.1} s  {} reps  {:.2} GB/s (rep p50 {:.2})  p50 {:.3} ms  p99 {:.3} ms",
        if recorded { "interval" } else { "progress" },
        format_size(size),
        row.t_s,
        row.reps,
        row.gbps,
        row.gbps_p50,
        row.p50_ms,
        row.p99_ms
    )
}
