//! Which send and receive paths a calibrated tcp run keeps. One combination is the default (the plainest one open:
//! plain writes landing directly, unless the environment fixed one side), and the run leaves it only on clear
//! evidence: another combination whose median is at least [`SWITCH_FACTOR`] times the default's, with 95%
//! confidence intervals of the two medians that do not overlap, each over at least [`MIN_TRIALS`] trials.
//! Picking the best median instead flips between runs whenever the combinations are within each other's noise,
//! and then two results files differ only because the tool chose differently.

use super::{RecvPath, SendPath};

/// Fewest trials per combination for a switch; fewer (a slow link that stopped calibrating early) keep the default.
pub const MIN_TRIALS: usize = 5;
/// How much faster (on the medians) a combination must be than the default to replace it.
pub const SWITCH_FACTOR: f64 = 1.10;

/// One send path and one receive path.
pub type Combo = (SendPath, RecvPath);

/// `"write+direct"`: how results files and messages name a combination.
pub fn combo_name((send, recv): Combo) -> String {
    format!("{}+{}", send.name(), recv.name())
}

/// A combination's calibration trials (GB/s each) summarised: median and the 95% interval of the median.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    pub median: f64,
    pub low: f64,
    pub high: f64,
    pub trials: usize,
}

impl Rate {
    /// The median of `trials` and its distribution-free 95% interval: the j-th smallest to the j-th largest trial,
    /// with the largest j whose coverage 1 − 2·P(Bin(n, ½) < j) is still ≥ 95% (the interval `stats::confidence`
    /// gives every case; with 5–8 trials it is [min, max]). None for no finite trial.
    pub fn from_trials(trials: &[f64]) -> Option<Rate> {
        let mut s: Vec<f64> = trials.iter().copied().filter(|x| x.is_finite()).collect();
        if s.is_empty() {
            return None;
        }
        s.sort_by(f64::total_cmp);
        let n = s.len();
        let (low, high, _) = crate::order_stats::median_ranks(n);
        Some(Rate { median: s[n / 2], low: s[low - 1], high: s[high - 1], trials: n })
    }
}

/// The combination kept, the default `(default, base)` or one of `others`, and one line saying why.
pub fn choose((default, base): (Combo, Rate), others: &[(Combo, Rate)]) -> (Combo, String) {
    let beats = |r: &Rate| {
        r.trials >= MIN_TRIALS
            && base.trials >= MIN_TRIALS
            && r.median >= SWITCH_FACTOR * base.median
            && r.low > base.high
    };
    let winner = others.iter().filter(|(_, r)| beats(r)).max_by(|a, b| a.1.median.total_cmp(&b.1.median));
    let interval =
        |r: &Rate| format!("{:.2} GB/s, 95% interval {:.2}–{:.2} over {} trials", r.median, r.low, r.high, r.trials);
    if let Some(&(combo, r)) = winner {
        let why = format!(
            "{} ({}) is {:.2}× the default {} ({})",
            combo_name(combo),
            interval(&r),
            r.median / base.median,
            combo_name(default),
            interval(&base)
        );
        return (combo, why);
    }
    let rest: Vec<String> = others.iter().map(|(c, r)| format!("{} {:.2}", combo_name(*c), r.median)).collect();
    let why = if base.trials < MIN_TRIALS {
        format!(
            "{}, the default: calibration stopped after {} trials (a slow link), fewer than the {MIN_TRIALS} a switch needs",
            combo_name(default),
            base.trials
        )
    } else {
        format!(
            "{}, the default ({}): no other combination was ≥{:.0}% faster with a 95% interval above it ({} GB/s)",
            combo_name(default),
            interval(&base),
            (SWITCH_FACTOR - 1.0) * 100.0,
            rest.join(", ")
        )
    };
    (default, why)
}

#[cfg(test)]
mod tests {
    use super::*;
    use SendPath::{Splice, Write};

    const DEFAULT: Combo = (Write, RecvPath::Direct);
    const BOUNCE: Combo = (Write, RecvPath::Bounce);
    const SPLICE: Combo = (Splice, RecvPath::Direct);

    fn rate(trials: &[f64]) -> Rate {
        Rate::from_trials(trials).unwrap()
    }

    #[test]
    fn intervals_are_the_order_statistic_ones() {
        // 5–8 trials: [min, max]; 9: the 2nd smallest to the 2nd largest (coverage 96.1%).
        let r = rate(&[3.0, 1.0, 5.0, 2.0, 4.0]);
        assert_eq!(r, Rate { median: 3.0, low: 1.0, high: 5.0, trials: 5 });
        let r = rate(&[9.0, 1.0, 5.0, 2.0, 4.0, 3.0, 6.0, 7.0, 8.0]);
        assert_eq!((r.median, r.low, r.high), (5.0, 2.0, 8.0));
        assert_eq!(Rate::from_trials(&[f64::NAN]), None);
    }

    #[test]
    fn a_combination_ten_percent_faster_with_separate_intervals_replaces_the_default() {
        let base = rate(&[3.0, 3.1, 3.2, 3.05, 3.15, 3.1]);
        let fast = rate(&[3.5, 3.6, 3.55, 3.45, 3.5, 3.6]);
        let (kept, why) = choose((DEFAULT, base), &[(BOUNCE, fast), (SPLICE, rate(&[2.0; 6]))]);
        assert_eq!(kept, BOUNCE);
        assert!(why.starts_with("write+bounce (3.55 GB/s"), "{why}");
        assert!(why.contains("the default write+direct (3.10 GB/s, 95% interval 3.00–3.20 over 6 trials)"), "{why}");
    }

    #[test]
    fn the_fastest_of_several_qualifying_combinations_is_kept() {
        let base = rate(&[3.0; 6]);
        let (kept, _) = choose((DEFAULT, base), &[(BOUNCE, rate(&[3.5; 6])), (SPLICE, rate(&[4.0; 6]))]);
        assert_eq!(kept, SPLICE);
    }

    #[test]
    fn less_than_ten_percent_faster_keeps_the_default() {
        // Separate intervals, but only 8% faster.
        let (kept, why) = choose((DEFAULT, rate(&[3.0; 6])), &[(BOUNCE, rate(&[3.24; 6]))]);
        assert_eq!(kept, DEFAULT);
        assert!(why.starts_with("write+direct, the default (3.00 GB/s"), "{why}");
        assert!(why.contains("write+bounce 3.24 GB/s"), "{why}");
    }

    #[test]
    fn overlapping_intervals_keep_the_default_however_fast_the_median() {
        // 30% faster on the medians, but one slow trial of the candidate reaches into the default's interval: the
        // noise the rule is there for (a 64 MiB trial stalled by another process).
        let base = rate(&[3.0, 3.1, 3.2, 3.0, 3.1, 3.2]);
        let noisy = rate(&[4.0, 4.1, 3.1, 4.0, 4.2, 4.1]);
        assert!(noisy.median >= 1.3 * base.median);
        let (kept, _) = choose((DEFAULT, base), &[(BOUNCE, noisy)]);
        assert_eq!(kept, DEFAULT);
    }

    #[test]
    fn fewer_than_five_trials_keep_the_default() {
        let (kept, why) = choose((DEFAULT, rate(&[1.0; 4])), &[(BOUNCE, rate(&[5.0; 4]))]);
        assert_eq!(kept, DEFAULT);
        assert!(why.contains("stopped after 4 trials"), "{why}");
        // Five of the candidate are not enough when the default had four.
        let (kept, _) = choose((DEFAULT, rate(&[1.0; 4])), &[(BOUNCE, rate(&[5.0; 5]))]);
        assert_eq!(kept, DEFAULT);
        let (kept, _) = choose((DEFAULT, rate(&[1.0; 5])), &[(BOUNCE, rate(&[5.0; 5]))]);
        assert_eq!(kept, BOUNCE);
    }
}
