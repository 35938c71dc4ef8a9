//! Runs paced by time instead of a rep count (`--duration`, `--interval`): when a case's measured reps stop, the
//! rows of what each interval moved, and how a long run stays bounded in memory.
//!
//! A case measures until its duration has passed since its first measured rep (warm-ups do not count), or until
//! the first SIGINT/SIGTERM/SIGHUP asks it to stop: the rep in flight finishes, the case is recorded as any case is
//! (with the signal that cut it short), no further size starts, and the command exits 130. For `--duration inf` the
//! signal is how a run ends; a finite run so stopped is also marked interrupted, its last case partial. Every interval closes into an [`IntervalRow`] (recorded
//! with `--interval`; without it, a progress line every [`PROGRESS_EVERY`] that is not recorded). A case keeps its
//! first [`KEPT_REPS`] measured reps in `reps`; later ones only enter the interval rows and a histogram of their
//! transfer times ([`Folded`]), so an endless run's memory stays bounded.

use super::RepRecord;
use crate::observe::counters::Deltas;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long each case of a paced run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Length {
    For(Duration),
    /// Until a signal asks the run to stop.
    Infinite,
}

/// `--duration` and `--interval`, as the sender runs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pacing {
    pub length: Length,
    /// Record a row per interval; `None`: print progress every [`PROGRESS_EVERY`] without recording it.
    pub interval: Option<Duration>,
}

/// Without `--interval`, a paced run still says how it goes this often.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// Measured reps a paced case keeps in full; later ones are folded (see the module).
pub const KEPT_REPS: usize = 10_000;

/// What one interval of a case moved.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct IntervalRow {
    /// When the interval closed, seconds since the case's first measured rep began.
    pub t_s: f64,
    /// Measured reps that finished in the interval.
    pub reps: u64,
    /// Bytes the interval's reps moved over the interval's wall time (the gaps between reps included), GB/s.
    pub gbps: f64,
    /// Median of the interval's per-rep GB/s.
    pub gbps_p50: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Counters that moved over the interval's reps, summed (absent with `--counters off`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counters: Option<Deltas>,
}

/// A paced case's record of how it was paced (the case's `duration` key).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DurationRecord {
    /// The duration asked for, seconds; null for `--duration inf`.
    pub s: Option<f64>,
    /// `--interval`, seconds; null without it.
    pub interval_s: Option<f64>,
    /// How long the case measured, seconds.
    pub measured_s: f64,
    /// The signal that ended the case (`SIGINT`): an infinite run's end, or a finite case cut short (measured_s
    /// then falls short of s); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_by: Option<String>,
    /// Reps past the first [`KEPT_REPS`]: counted in the intervals and (their `--verify` counts) in the case's
    /// verdict, not kept in `reps` nor in the case's statistics; absent when none were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub folded: Option<Folded>,
}

/// The reps a case did not keep one by one.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Folded {
    pub reps: u64,
    /// Their transfer_ms quantiles, from a histogram of 3 significant digits.
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// What `--verify` found in them: it counts toward the case's verdict as a kept rep's does.
    #[serde(flatten)]
    pub check: FoldedCheck,
}

/// The `--verify` counts of the reps a case folded (all zero without `--verify`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FoldedCheck {
    #[serde(default, skip_serializing_if = "is_zero")]
    pub mismatched_bytes: u64,
    /// Bytes of a bidirectional rep's reverse transfer that differed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reverse_mismatched_bytes: u64,
    /// Folded reps whose receiver sent no mismatch count: not checked, so the case is not verified.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unchecked_reps: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

static STOP: AtomicBool = AtomicBool::new(false);
static SOFT: AtomicBool = AtomicBool::new(false);
static STOPPED_BY: Mutex<Option<String>> = Mutex::new(None);

/// A paced run is under way: the first signal asks it to stop at the end of the rep in flight.
pub fn stop_softly_on_signal() {
    SOFT.store(true, Ordering::SeqCst);
}

/// A signal arrived: `true` when a paced run takes it as its end (and will exit 130 itself).
pub fn take_signal(name: &str) -> bool {
    if !SOFT.load(Ordering::SeqCst) {
        return false;
    }
    *STOPPED_BY.lock().unwrap_or_else(|p| p.into_inner()) = Some(name.to_string());
    STOP.store(true, Ordering::SeqCst);
    true
}

/// The signal that stopped a paced run, once one has.
pub fn stopped_by() -> Option<String> {
    if !STOP.load(Ordering::SeqCst) {
        return None;
    }
    STOPPED_BY.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// A case's pacing in progress.
pub struct Paced {
    pacing: Pacing,
    /// The first measured rep's start; `None` during warm-up.
    started: Option<Instant>,
    window_start: f64,
    window: Vec<(f64, f64, u64)>,
    window_counters: Option<Deltas>,
    pub intervals: Vec<IntervalRow>,
    folded: hdrhistogram::Histogram<u64>,
    folded_check: FoldedCheck,
}

impl Paced {
    pub fn new(pacing: Pacing) -> Paced {
        Paced {
            pacing,
            started: None,
            window_start: 0.0,
            window: Vec::new(),
            window_counters: None,
            intervals: Vec::new(),
            folded: hdrhistogram::Histogram::new(3).expect("3 significant digits is valid"),
            folded_check: FoldedCheck::default(),
        }
    }

    /// A measured rep is about to start.
    pub fn rep_starts(&mut self) {
        self.started.get_or_insert_with(Instant::now);
    }

    /// Seconds since the case's first measured rep began (0 during warm-up).
    pub fn elapsed(&self) -> f64 {
        self.started.map_or(0.0, |t| t.elapsed().as_secs_f64())
    }

    /// Whether the case has measured long enough (at least one measured rep always runs).
    pub fn is_done(&self) -> bool {
        let Some(t0) = self.started else { return false };
        match self.pacing.length {
            Length::For(d) => t0.elapsed() >= d || STOP.load(Ordering::SeqCst),
            Length::Infinite => STOP.load(Ordering::SeqCst),
        }
    }

    /// Refuse an `--interval` shorter than one rep of `size` bytes that took `rep_ms` (the case's last warm-up, or its
    /// first measured rep): each of its rows would hold one rep or none, a rep's rate under an interval's name.
    pub fn check_interval_fits(&self, rep_ms: f64, size: u64) -> anyhow::Result<()> {
        let Some(every) = self.pacing.interval else { return Ok(()) };
        if rep_ms / 1e3 > every.as_secs_f64() {
            crate::bail_usage!(
                "--interval {} is shorter than one rep of {} ({rep_ms:.1} ms): give an interval of {} or more, or leave out the sizes whose reps take longer",
                humantime::format_duration(every),
                crate::plan::sizes::format_size(size),
                round_up_text(rep_ms * 2.0),
            );
        }
        Ok(())
    }

    /// Take in a measured rep of `size` bytes; returns a row when it closed an interval (`true`: recorded).
    pub fn add(&mut self, rep: &RepRecord, size: u64) -> Option<(IntervalRow, bool)> {
        self.window.push((rep.transfer_ms, rep.gbps, size));
        if let Some(d) = &rep.counters {
            sum(self.window_counters.get_or_insert_with(Deltas::new), d);
        }
        let every = self.pacing.interval.unwrap_or(PROGRESS_EVERY);
        (self.elapsed() - self.window_start >= every.as_secs_f64()).then(|| self.close())
    }

    /// Keep `rep` out of the case's reps: only its transfer time is kept, in a histogram, and under `--verify`
    /// (`verify`) what its check found, added (saturating: counts past u64::MAX must not wrap to "verified").
    pub fn fold(&mut self, rep: &RepRecord, verify: bool) {
        let _ = self.folded.record((rep.transfer_ms * 1e3).round().max(1.0) as u64);
        if !verify {
            return;
        }
        let c = &mut self.folded_check;
        match rep.mismatched_bytes {
            Some(bad) => c.mismatched_bytes = c.mismatched_bytes.saturating_add(bad),
            None => c.unchecked_reps += 1,
        }
        let reverse = rep.bidir.and_then(|b| b.reverse_mismatched_bytes).unwrap_or(0);
        c.reverse_mismatched_bytes = c.reverse_mismatched_bytes.saturating_add(reverse);
    }

    /// What `--verify` found in the folded reps.
    pub fn folded_check(&self) -> FoldedCheck {
        self.folded_check
    }

    /// Close the interval in progress (the case ended): its row when it holds a rep.
    pub fn finish(&mut self) -> Option<(IntervalRow, bool)> {
        (!self.window.is_empty()).then(|| self.close())
    }

    fn close(&mut self) -> (IntervalRow, bool) {
        let t = self.elapsed();
        let wall = (t - self.window_start).max(1e-9);
        let bytes: u64 = self.window.iter().map(|w| w.2).sum();
        let mut ms: Vec<f64> = self.window.iter().map(|w| w.0).collect();
        let mut rates: Vec<f64> = self.window.iter().map(|w| w.1).collect();
        ms.sort_by(f64::total_cmp);
        rates.sort_by(f64::total_cmp);
        let row = IntervalRow {
            t_s: round6(t),
            reps: self.window.len() as u64,
            gbps: bytes as f64 / wall / 1e9,
            gbps_p50: quantile(&rates, 0.5),
            p50_ms: quantile(&ms, 0.5),
            p99_ms: quantile(&ms, 0.99),
            counters: self.window_counters.take(),
        };
        self.window.clear();
        self.window_start = t;
        let recorded = self.pacing.interval.is_some();
        if recorded {
            self.intervals.push(row.clone());
        }
        (row, recorded)
    }

    /// The case's `duration` key.
    pub fn record(&self) -> DurationRecord {
        let h = &self.folded;
        DurationRecord {
            s: match self.pacing.length {
                Length::For(d) => Some(d.as_secs_f64()),
                Length::Infinite => None,
            },
            interval_s: self.pacing.interval.map(|d| d.as_secs_f64()),
            measured_s: round6(self.elapsed()),
            stopped_by: stopped_by(),
            folded: (!h.is_empty()).then(|| Folded {
                reps: h.len(),
                p50_ms: h.value_at_quantile(0.5) as f64 / 1e3,
                p99_ms: h.value_at_quantile(0.99) as f64 / 1e3,
                max_ms: h.max() as f64 / 1e3,
                check: self.folded_check,
            }),
        }
    }
}

/// The `q` quantile of sorted, non-empty `v`, interpolated between ranks.
fn quantile(v: &[f64], q: f64) -> f64 {
    let pos = q * (v.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
}

/// `ms` rounded up to a whole number of milliseconds below a second, of seconds above.
fn round_up_text(ms: f64) -> String {
    if ms < 1e3 {
        format!("{}ms", ms.ceil().max(1.0))
    } else {
        format!("{}s", (ms / 1e3).ceil())
    }
}

fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

/// The sum of counters over reps, by source then name (an interval's counters).
fn sum(into: &mut Deltas, more: &Deltas) {
    for (source, m) in more {
        for (name, v) in m {
            *into.entry(source.clone()).or_default().entry(name.clone()).or_default() += v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rep(ms: f64) -> RepRecord {
        let text = format!(
            r#"{{"i":0,"transfer_ms":{ms},"gbps":{},"setup_ms":0.1,"notify_ms":0.2,"total_ms":{ms},"counters":{{"sender process":{{"cpu_us":5}}}}}}"#,
            1.0 / ms
        );
        serde_json::from_str(&text).unwrap()
    }

    #[test]
    fn an_interval_sums_its_counters_and_folded_reps_keep_their_quantiles() {
        let mut p = Paced::new(Pacing { length: Length::For(Duration::from_secs(60)), interval: None });
        assert!(!p.is_done(), "not done before its first measured rep");
        p.rep_starts();
        for ms in [1.0, 2.0, 3.0] {
            assert!(p.add(&rep(ms), 1_000_000).is_none(), "no interval closes within 5 s");
            p.fold(&rep(ms), false);
        }
        let (row, recorded) = p.finish().unwrap();
        assert!(!recorded && p.intervals.is_empty(), "without --interval rows are progress only");
        assert_eq!((row.reps, row.p50_ms), (3, 2.0));
        assert_eq!(row.counters.unwrap()["sender process"]["cpu_us"], 15);
        assert!(p.finish().is_none(), "an empty interval is no row");
        let folded = p.record().folded.unwrap();
        assert_eq!((folded.reps, folded.p50_ms), (3, 2.0));
        assert!((folded.max_ms - 3.0).abs() <= 3.0e-3, "3 significant digits: {}", folded.max_ms);
    }

    #[test]
    fn quantiles_interpolate_between_ranks() {
        assert_eq!(quantile(&[1.0], 0.99), 1.0);
        assert_eq!(quantile(&[1.0, 2.0, 3.0, 4.0], 0.5), 2.5);
    }
}
