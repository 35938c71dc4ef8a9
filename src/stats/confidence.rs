//! A distribution-free 95% confidence interval for the median, from order statistics.
//!
//! For n independent reps, the number of reps below the true median is Binomial(n, ½), so the interval
//! [x₍ⱼ₎, x₍ₙ₊₁₋ⱼ₎] between the j-th smallest and j-th largest rep covers the median with probability
//! 1 − 2·P(Bin(n, ½) < j). We take the largest j whose coverage is still ≥ 95%. No shape is assumed (rep times
//! are skewed and sometimes bimodal, so a normal-theory interval would mislead). With n ≤ 5 even [min, max]
//! covers less than 95% (93.75% at n = 5): the interval is then [min, max] and `coverage` says what it is.

use serde::{Deserialize, Serialize};

pub use crate::order_stats::{median_interval, median_ranks, LEVEL};
pub const METHOD: &str = "distribution-free order-statistic (binomial) interval for the median: [x(j), x(n+1-j)] \
                          with the largest j whose coverage 1 - 2*P(Bin(n,1/2) < j) is >= 95%; [min, max] when n is too \
                          small to reach 95% (coverage then says how much it covers)";

/// The `p50_ci` object of a case: the median's interval for transfer time and for bandwidth.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MedianCi {
    /// [low, high] of p50 transfer_ms.
    pub transfer_ms: [f64; 2],
    /// [low, high] of p50 GB/s.
    pub gbps: [f64; 2],
    /// The nominal level asked for (0.95).
    pub level: f64,
    /// The exact coverage of the interval given n (≥ level unless n ≤ 5).
    pub coverage: f64,
    /// Which order statistics bound it (1-based): [j, n+1-j].
    pub ranks: [usize; 2],
    pub method: String,
}

impl MedianCi {
    pub fn estimate(transfer_ms: &[f64], gbps: &[f64]) -> Option<MedianCi> {
        let (t, ranks, coverage) = median_interval(transfer_ms)?;
        let (g, _, _) = median_interval(gbps)?;
        Some(MedianCi { transfer_ms: t, gbps: g, level: LEVEL, coverage, ranks, method: METHOD.into() })
    }
}

/// Coefficient of variation: sample standard deviation over mean (0 for a single sample).
pub fn cv(samples: &[f64]) -> f64 {
    let n = samples.len();
    if n < 2 {
        return 0.0;
    }
    let mean = samples.iter().sum::<f64>() / n as f64;
    if mean == 0.0 {
        return 0.0;
    }
    let var = samples.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    var.sqrt() / mean
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_match_the_binomial_table() {
        // Known values (e.g. Conover, Practical Nonparametric Statistics): n=6: [1,6] 96.9%; n=9: [2,8] 96.1%;
        // n=10: [2,9] 97.9%; n=20: [6,15] 95.9%.
        assert_eq!(median_ranks(6).0, 1);
        assert!((median_ranks(6).2 - 0.96875).abs() < 1e-12);
        assert_eq!(median_ranks(9).0..median_ranks(9).1, 2..8);
        assert!((median_ranks(9).2 - 0.9609375).abs() < 1e-9);
        assert_eq!((median_ranks(10).0, median_ranks(10).1), (2, 9));
        assert_eq!((median_ranks(20).0, median_ranks(20).1), (6, 15));
        assert!((median_ranks(20).2 - 0.958610).abs() < 1e-6);
        // Too few reps for 95%: [min, max] and its real coverage.
        assert_eq!(median_ranks(5), (1, 5, 0.9375));
        assert_eq!(median_ranks(1), (1, 1, 0.0));
        // Thousands of reps (a run paced by time): finite, at least 95%, and about n/2 ± 1.96·√n/2 wide.
        for n in [1_030, 10_000, 1_000_000] {
            let (lo, hi, coverage) = median_ranks(n);
            assert!(coverage.is_finite() && (LEVEL..0.96).contains(&coverage), "n = {n}: {coverage}");
            let half = 0.98 * (n as f64).sqrt();
            assert!(((n / 2) as f64 - lo as f64 - half).abs() < 3.0, "n = {n}: lo {lo}");
            assert_eq!(lo + hi, n + 1);
        }
    }

    #[test]
    fn interval_on_known_samples() {
        let (iv, ranks, cov) = median_interval(&[9.0, 1.0, 8.0, 2.0, 7.0, 3.0, 6.0, 4.0, 5.0]).unwrap();
        assert_eq!((iv, ranks), ([2.0, 8.0], [2, 8]));
        assert!(cov > 0.95);
        let ci = MedianCi::estimate(&[10.0, 12.0, 11.0, 13.0, 9.0], &[1.0, 0.8, 0.9, 0.7, 1.1]).unwrap();
        assert_eq!((ci.transfer_ms, ci.gbps, ci.coverage), ([9.0, 13.0], [0.7, 1.1], 0.9375));
        assert!(median_interval(&[]).is_none());
    }

    #[test]
    fn cv_is_stdev_over_mean() {
        assert!((cv(&[1.0, 2.0, 3.0, 4.0]) - 1.2909944487358056 / 2.5).abs() < 1e-12);
        assert_eq!(cv(&[5.0]), 0.0);
        assert_eq!(cv(&[5.0, 5.0]), 0.0);
    }
}
