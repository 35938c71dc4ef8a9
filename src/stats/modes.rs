//! Bimodality of one size's per-rep bandwidths: does the transfer take one of two paths (say 4 and 9.7 GB/s)?
//!
//! Method (sizes with at least [`MIN_REPS`] reps; non-finite samples are left out):
//! 1. Sort the per-rep GB/s and split them into a low and a high cluster at the cut that minimizes the
//!    within-cluster sum of squares (the 1-D two-cluster optimum, Otsu/Jenks), among the cuts that leave at least
//!    `max(2, ⌈20% of n⌉)` reps on each side — so one stray rep can never form a cluster of its own.
//! 2. Call it bimodal when all three hold:
//!    - Ashman's D = √2·|μ₁ − μ₂| / √(σ₁² + σ₂²) > 2 (population σ of each cluster): the clusters are separated by
//!      more than their own spread;
//!    - the modes differ by at least 10% of the higher one: with 5 reps, a 0.05% wobble can pass Ashman's test,
//!      but a second path is a large step, not noise;
//!    - the empty gap between the clusters is wider than either cluster's range: with 5 reps, one slow or fast rep
//!      paired with its nearest neighbour passes Ashman's test too, but leaves no clear gap.
//!
//! The reported modes are the medians of the two clusters (ascending) and the counts their sizes; when the size is
//! not bimodal, the one mode is the median of all reps.

use crate::measure::summary::quantile_sorted;
use serde::{Deserialize, Serialize};

/// Fewest reps a size needs before bimodality is tested.
pub const MIN_REPS: usize = 5;
/// Ashman's D must exceed this.
pub const MIN_ASHMAN_D: f64 = 2.0;
/// The modes must differ by at least this fraction of the higher one.
pub const MIN_RELATIVE_GAP: f64 = 0.10;
/// Each cluster holds at least this fraction of the reps (and never fewer than 2).
pub const MIN_CLUSTER_FRACTION: f64 = 0.20;

pub const METHOD: &str = "2-cluster split of sorted per-rep GB/s minimizing within-cluster variance, each cluster >= \
                          max(2, 20% of n) reps; bimodal when Ashman's D > 2, the modes differ by >= 10% and the gap \
                          between the clusters is wider than each cluster's range";
const NOT_TESTED: &str = "not tested: fewer than 5 reps";

/// The `bimodal` object of a case in the results JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Bimodality {
    pub is_bimodal: bool,
    /// The two cluster medians when bimodal (ascending), otherwise the one median; empty when not tested.
    pub modes_gbps: Vec<f64>,
    /// Reps in each mode, in the order of `modes_gbps`.
    pub counts: Vec<usize>,
    /// How this was decided (empty in files written before kvxfer tested bimodality).
    pub method: String,
}

impl Bimodality {
    /// Test one size's per-rep bandwidths (GB/s).
    pub fn detect(gbps: &[f64]) -> Bimodality {
        let mut s: Vec<f64> = gbps.iter().copied().filter(|x| x.is_finite()).collect();
        if s.len() < MIN_REPS {
            return Bimodality { method: NOT_TESTED.into(), ..Bimodality::default() };
        }
        s.sort_by(f64::total_cmp);
        let unimodal = Bimodality {
            is_bimodal: false,
            modes_gbps: vec![quantile_sorted(&s, 0.5)],
            counts: vec![s.len()],
            method: METHOD.into(),
        };
        let Some(cut) = best_cut(&s) else { return unimodal };
        let (lo, hi) = s.split_at(cut);
        let (m_lo, m_hi) = (quantile_sorted(lo, 0.5), quantile_sorted(hi, 0.5));
        let gap = hi[0] - lo[lo.len() - 1];
        let widest = (lo[lo.len() - 1] - lo[0]).max(hi[hi.len() - 1] - hi[0]);
        if ashman_d(lo, hi) > MIN_ASHMAN_D && (m_hi - m_lo) >= MIN_RELATIVE_GAP * m_hi.abs() && gap > widest {
            Bimodality {
                is_bimodal: true,
                modes_gbps: vec![m_lo, m_hi],
                counts: vec![lo.len(), hi.len()],
                method: METHOD.into(),
            }
        } else {
            unimodal
        }
    }

    /// "3.4 / 9.7 GB/s" when bimodal.
    pub fn describe(&self) -> Option<String> {
        self.is_bimodal.then(|| {
            let modes: Vec<String> = self.modes_gbps.iter().map(|m| format_gbps(*m)).collect();
            format!("{} GB/s", modes.join(" / "))
        })
    }
}

/// Bandwidth with three or four significant digits: 0.412, 3.41, 9.70, 25.3, 394.1.
pub fn format_gbps(v: f64) -> String {
    match v.abs() {
        a if a >= 10.0 => format!("{v:.1}"),
        a if a >= 1.0 => format!("{v:.2}"),
        _ => format!("{v:.3}"),
    }
}

/// The cut index (low cluster = `s[..cut]`) minimizing the within-cluster sum of squares, over the cuts that leave
/// enough reps on both sides; None when no cut does.
fn best_cut(s: &[f64]) -> Option<usize> {
    let n = s.len();
    let min_cluster = ((MIN_CLUSTER_FRACTION * n as f64).ceil() as usize).max(2);
    (min_cluster..=n.saturating_sub(min_cluster))
        .map(|k| (k, sum_sq(&s[..k]) + sum_sq(&s[k..])))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(k, _)| k)
}

fn mean(x: &[f64]) -> f64 {
    x.iter().sum::<f64>() / x.len() as f64
}

/// Sum of squared deviations from the mean.
fn sum_sq(x: &[f64]) -> f64 {
    let m = mean(x);
    x.iter().map(|v| (v - m).powi(2)).sum()
}

/// Ashman's D between two clusters; infinite for two distinct constant clusters, 0 for identical ones.
fn ashman_d(a: &[f64], b: &[f64]) -> f64 {
    let gap = (mean(a) - mean(b)).abs();
    if gap == 0.0 {
        return 0.0;
    }
    let spread = sum_sq(a) / a.len() as f64 + sum_sq(b) / b.len() as f64;
    std::f64::consts::SQRT_2 * gap / spread.sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic small noise: ±0.5% around `v`, different per index.
    fn noisy(v: f64, i: usize) -> f64 {
        v * (1.0 + 0.005 * (((i * 7919) % 11) as f64 / 5.0 - 1.0))
    }

    #[test]
    fn a_50_50_mixture_of_4_and_9_7_is_bimodal() {
        let reps: Vec<f64> = (0..10).map(|i| noisy(if i % 2 == 0 { 4.0 } else { 9.7 }, i)).collect();
        let b = Bimodality::detect(&reps);
        assert!(b.is_bimodal, "{b:?}");
        assert_eq!(b.counts, vec![5, 5]);
        assert!((b.modes_gbps[0] - 4.0).abs() < 0.05 && (b.modes_gbps[1] - 9.7).abs() < 0.1, "{b:?}");
        let exact = Bimodality { modes_gbps: vec![3.4, 9.7], ..b };
        assert_eq!(exact.describe().as_deref(), Some("3.40 / 9.70 GB/s"));
    }

    #[test]
    fn the_smallest_mixture_of_five_reps_is_bimodal() {
        let b = Bimodality::detect(&[9.71, 4.02, 9.68, 3.98, 9.7]);
        assert!(b.is_bimodal, "{b:?}");
        assert_eq!(b.counts, vec![2, 3]);
    }

    #[test]
    fn one_outlier_is_not_bimodal() {
        let mut reps: Vec<f64> = (0..9).map(|i| noisy(9.7, i)).collect();
        reps.push(4.0);
        let b = Bimodality::detect(&reps);
        assert!(!b.is_bimodal, "{b:?}");
        assert_eq!(b.counts, vec![10]);
        // Five reps, one slow: still one mode.
        assert!(!Bimodality::detect(&[9.7, 9.69, 2.0, 9.71, 9.7]).is_bimodal);
    }

    #[test]
    fn tight_noise_is_not_bimodal_even_when_ashman_d_is_large() {
        // The H200 12 GiB reps: a 0.05% spread that Ashman's D alone would split.
        let b = Bimodality::detect(&[394.13, 394.05, 394.15, 394.24, 394.07]);
        assert!(!b.is_bimodal, "{b:?}");
        assert_eq!(b.modes_gbps, vec![394.13]);
    }

    #[test]
    fn a_smear_of_noise_with_one_fast_rep_is_not_bimodal() {
        // TCP loopback on a busy 2-core VM: the best 3 + 2 split has Ashman's D ≈ 2.1 and modes 19% apart, but the
        // "fast cluster" is one fast rep and its neighbour, with no gap between the clusters.
        let b = Bimodality::detect(&[1.066, 1.104, 1.114, 1.168, 1.456]);
        assert!(!b.is_bimodal, "{b:?}");
        assert!(!Bimodality::detect(&[0.813, 0.895, 1.114, 1.251, 1.72]).is_bimodal);
    }

    #[test]
    fn all_equal_is_not_bimodal() {
        let b = Bimodality::detect(&[5.0; 8]);
        assert!(!b.is_bimodal);
        assert_eq!((b.modes_gbps, b.counts), (vec![5.0], vec![8]));
    }

    #[test]
    fn fewer_than_five_reps_are_not_tested() {
        let b = Bimodality::detect(&[4.0, 9.7, 4.0, 9.7]);
        assert!(!b.is_bimodal && b.modes_gbps.is_empty() && b.counts.is_empty());
        assert!(b.method.starts_with("not tested"));
        // Non-finite samples (a zero-time rep) do not count toward the five.
        assert!(Bimodality::detect(&[4.0, 9.7, 4.0, 9.7, f64::INFINITY]).method.starts_with("not tested"));
    }
}
