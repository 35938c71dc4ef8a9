//! What the sender takes on the receiver's word, checked before it is recorded: the region its offer says the sender
//! may write into, and each rep's RepDone (its times and its `--verify` count). A receiver that lies or is broken
//! gets one error line naming it, never a record that says more than was checked. The checks sit here, above the
//! transports, so every transport's runs get them.

use crate::control::RepReport;
use crate::plan::sizes::format_size;

/// A receiver's duration may exceed the sender's own wall time of the rep by this factor (clocks of two hosts
/// run at slightly different rates; the margin is far wider than any drift) and no more.
pub const TIME_SLACK: f64 = 10.0;

/// What the sender saw of one rep when the receiver's RepDone arrived.
#[derive(Debug, Clone, Copy)]
pub struct RepSeen {
    /// Bytes the rep moved into the receiver's region.
    pub size_bytes: u64,
    /// Whether the run asked the receiver to check every byte (`--verify`).
    pub verify: bool,
    /// The sender's own wall time of the rep, ms: from its start (RepStart about to leave) to the RepDone's
    /// arrival. Every time the receiver reports lies within that span on its clock.
    pub wall_ms: f64,
}

/// A RepDone that passed [`check_report`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing to say: times in bounds, and under `--verify` a mismatch count within the rep's bytes.
    Sound,
    /// `--verify` was asked but the receiver sent no mismatch count: the rep's bytes were not checked, and the case
    /// is recorded as not verified.
    Unchecked,
}

/// Check a receiver's RepDone against what the sender saw of the rep. `Err` says, after "the receiver at PEER ",
/// what it reported that cannot be true.
pub fn check_report(report: &RepReport, seen: &RepSeen) -> Result<Verdict, String> {
    let bound = TIME_SLACK * seen.wall_ms;
    let within = |what: &str, ms: f64, zero_ok: bool| -> Result<(), String> {
        let above_floor = if zero_ok { ms >= 0.0 } else { ms > 0.0 };
        if ms.is_finite() && above_floor && ms <= bound {
            return Ok(());
        }
        let open = if zero_ok { '[' } else { '(' };
        Err(format!(
            "reported a {what} of {} ms for a rep the sender saw take {:.3} ms (it must lie in {open}0, {bound:.3}] ms)",
            shown(ms),
            seen.wall_ms
        ))
    };
    if let Some(ms) = report.transfer_ms {
        within("transfer time", ms, false)?;
    }
    within("notify time", report.notify_ms, true)?;
    if let Some(ms) = report.verify_ms {
        within("verify time", ms, true)?;
    }
    if let Some(r) = report.reverse {
        within("reverse transfer time", r.transfer_ms, false)?;
        within("reverse elapsed time", r.elapsed_ms, true)?;
    }
    for (what, at) in [("rep start", report.t_rep_start_ms), ("landing", report.t_landed_ms)] {
        if !(at.is_finite() && at >= 0.0) {
            return Err(format!("reported its {what} at {} ms on its clock, which no clock reads", shown(at)));
        }
    }
    match report.mismatched_bytes {
        Some(bad) if bad > seen.size_bytes => Err(format!(
            "reported {bad} mismatched bytes in a rep of {} ({} bytes)",
            format_size(seen.size_bytes),
            seen.size_bytes
        )),
        None if seen.verify => Ok(Verdict::Unchecked),
        _ => Ok(Verdict::Sound),
    }
}

/// A number of milliseconds as an error shows it: huge ones in exponent form (1e308, not 309 digits).
fn shown(ms: f64) -> String {
    if ms.is_finite() && ms.abs() < 1e12 {
        format!("{ms}")
    } else {
        format!("{ms:e}")
    }
}

/// Check the region a receiver's offer says the sender may write into (`offered`, where its transport's offer
/// says) against the `need`ed bytes the run writes into. `Err` says, after "the receiver at PEER ", what is wrong.
/// A region larger than needed is fine: the sender never allocates or sends by it.
pub fn check_region(offered: Option<u64>, need: u64) -> Result<(), String> {
    match offered {
        Some(len) if len < need => Err(format!(
            "offers a region of {} ({len} bytes), smaller than the {} ({need} bytes) this run writes into",
            format_size(len),
            format_size(need)
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(verify: bool) -> RepSeen {
        RepSeen { size_bytes: 1 << 20, verify, wall_ms: 2.0 }
    }

    fn report(mismatched: Option<u64>, transfer_ms: Option<f64>) -> RepReport {
        RepReport { notify_ms: 1.0, mismatched_bytes: mismatched, transfer_ms, ..RepReport::default() }
    }

    #[test]
    fn a_receivers_times_must_lie_within_the_senders_own() {
        assert_eq!(check_report(&report(Some(0), Some(1.5)), &seen(true)), Ok(Verdict::Sound));
        assert_eq!(check_report(&report(Some(0), Some(20.0)), &seen(true)), Ok(Verdict::Sound), "10× is the bound");
        for bad in [-1.0, 0.0, 20.001, 1e308, f64::INFINITY, f64::NAN] {
            let e = check_report(&report(Some(0), Some(bad)), &seen(true)).unwrap_err();
            assert!(e.contains("transfer time") && e.contains("(0, 20.000]"), "{bad}: {e}");
        }
        let mut r = report(None, None);
        r.notify_ms = -0.5;
        assert!(check_report(&r, &seen(false)).unwrap_err().contains("notify time"));
        r.notify_ms = 0.0;
        r.t_landed_ms = f64::NEG_INFINITY;
        assert!(check_report(&r, &seen(false)).unwrap_err().contains("landing"));
    }

    #[test]
    fn verified_means_every_byte_was_counted() {
        assert_eq!(check_report(&report(None, None), &seen(true)), Ok(Verdict::Unchecked));
        assert_eq!(check_report(&report(None, None), &seen(false)), Ok(Verdict::Sound));
        assert_eq!(check_report(&report(Some(1 << 20), None), &seen(true)), Ok(Verdict::Sound));
        let e = check_report(&report(Some(1 << 63), None), &seen(true)).unwrap_err();
        assert!(e.contains("9223372036854775808 mismatched bytes in a rep of 1 MiB"), "{e}");
    }

    #[test]
    fn a_region_smaller_than_the_run_is_refused_a_larger_one_is_not() {
        assert_eq!(check_region(Some(u64::MAX), 1 << 20), Ok(()));
        assert_eq!(check_region(None, 1 << 20), Ok(()));
        let e = check_region(Some(4096), 1 << 20).unwrap_err();
        assert!(e.contains("4 KiB (4096 bytes)") && e.contains("1 MiB (1048576 bytes)"), "{e}");
    }
}
