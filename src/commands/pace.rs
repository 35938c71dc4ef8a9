//! `--duration` and `--interval` checked into the sender's [`Pacing`], and how a paced run ends.

use crate::bail_usage;
use crate::cli::{parse_duration, PaceArgs};
use crate::run::pace::{Length, Pacing};
use anyhow::Result;

/// The pacing the flags ask for (`None`: a count of reps, `--reps`), for a run of `cases` sizes.
pub fn pacing(p: &PaceArgs, cases: usize) -> Result<Option<Pacing>> {
    let Some(text) = p.duration.as_deref() else {
        if let Some(i) = &p.interval {
            bail_usage!("--interval {i}: it paces a run of --duration; add --duration (e.g. --duration 60s)");
        }
        return Ok(None);
    };
    if p.reps_given {
        bail_usage!("--duration {text} with --reps: give one (--duration runs each size for a time, --reps a count)");
    }
    let length = if text == "inf" {
        if cases > 1 {
            bail_usage!("--duration inf with {cases} sizes: an endless run measures one size; give one size");
        }
        Length::Infinite
    } else {
        match parse_duration(text) {
            Ok(d) => Length::For(d),
            Err(_) => bail_usage!("--duration {text}: give a positive duration like 60s, 500ms or 10m, or inf"),
        }
    };
    let interval = match p.interval.as_deref().map(|t| (t, parse_duration(t))) {
        None => None,
        Some((t, Err(_))) => bail_usage!("--interval {t}: give a positive duration like 1s or 500ms"),
        Some((t, Ok(i))) => match length {
            Length::For(d) if i > d => {
                bail_usage!("--interval {t} is longer than --duration {text}: give an interval of at most {text}")
            }
            _ => Some(i),
        },
    };
    crate::run::pace::stop_softly_on_signal();
    Ok(Some(Pacing { length, interval }))
}

/// After a paced run's files are written: a run stopped by a signal exits 130, as an interrupted run does (its
/// files are whole: an infinite run's complete, a finite one's marked interrupted with its last case partial).
pub fn exit_if_stopped() {
    if let Some(sig) = crate::run::pace::stopped_by() {
        crate::errln!("stopped by {sig}; the results files are written");
        std::process::exit(crate::output::interrupt::EXIT_INTERRUPTED);
    }
}
