//! `--events`: JSON lines with both ends' per-rep stage timestamps, each on its own monotonic clock (ms since that
//! side's run start). The two clocks are never compared; durations within one side are.
//!
//! A case's first [`KEPT_REPS`] measured reps are written whole, as the results keep them; past that (a long
//! `--duration` run) the file thins them, so that it grows with the logarithm of the reps rather than with them:
//! from 2^k to 2^(k+1) times [`KEPT_REPS`] reps, every 2^(k+1)-th rep is written. A line saying so (`thinned`)
//! comes before the first rep left out.

use crate::run::pace::KEPT_REPS;

use crate::run::{CaseRecord, RepRecord};
use anyhow::Result;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

pub struct EventsFile {
    out: BufWriter<File>,
    /// The case whose measured reps are being counted, and how many it has had.
    measured: (usize, u64),
}

/// Whether the `n`-th measured rep of a case (1-based) has its lines written (see the module).
fn kept(n: u64) -> bool {
    let cap = KEPT_REPS as u64;
    if n <= cap {
        return true;
    }
    // n in [2^k cap, 2^(k+1) cap): every 2^(k+1)-th rep.
    let stride = (n / cap + 1).next_power_of_two();
    n % stride == 0
}

impl EventsFile {
    pub fn create(path: &Path) -> Result<EventsFile> {
        let f = super::files::open_stream("--events", path)?;
        Ok(EventsFile { out: BufWriter::new(f), measured: (usize::MAX, 0) })
    }

    /// Append the two lines (sender, receiver) of one rep and flush, so an interrupted run keeps every finished rep.
    pub fn rep(&mut self, case: &CaseRecord, rep: &RepRecord, warmup: bool) -> Result<()> {
        if !warmup {
            if self.measured.0 != case.index {
                self.measured = (case.index, 0);
            }
            self.measured.1 += 1;
            let n = self.measured.1;
            if n == KEPT_REPS as u64 + 1 {
                let note = serde_json::json!({
                    "case": case.index, "size_bytes": case.case.size_bytes, "thinned": true,
                    "note": format!(
                        "past {KEPT_REPS} measured reps of a case, its reps are thinned: from 2^k to 2^(k+1) times \
                         {KEPT_REPS} reps, the events of every 2^(k+1)-th rep only"
                    ),
                });
                writeln!(self.out, "{note}")?;
            }
            if !kept(n) {
                return Ok(());
            }
        }
        let common = serde_json::json!({
            "case": case.index, "size_bytes": case.case.size_bytes, "rep": rep.i, "warmup": warmup,
        });
        let mut sender = common.clone();
        merge(&mut sender, serde_json::json!({ "side": "sender" }));
        merge(&mut sender, serde_json::to_value(rep.sender)?);
        let mut receiver = common;
        merge(&mut receiver, serde_json::json!({ "side": "receiver" }));
        merge(&mut receiver, serde_json::to_value(&rep.receiver)?);
        writeln!(self.out, "{sender}")?;
        writeln!(self.out, "{receiver}")?;
        self.out.flush()?;
        Ok(())
    }
}

fn merge(into: &mut serde_json::Value, from: serde_json::Value) {
    if let (Some(a), serde_json::Value::Object(b)) = (into.as_object_mut(), from) {
        a.extend(b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_the_kept_reps_the_lines_grow_with_the_logarithm_of_the_reps() {
        let cap = KEPT_REPS as u64;
        assert!((1..=cap).all(kept));
        let written = |to: u64| (1..=to).filter(|&n| kept(n)).count() as u64;
        // Each doubling of the reps adds about half the cap's lines.
        assert_eq!(written(2 * cap), cap + cap / 2);
        assert!(written(64 * cap) < cap + 7 * cap / 2 + 7, "{}", written(64 * cap));
    }
}
