//! Summaries of per-rep samples. Quantiles interpolate linearly between order statistics (numpy's default,
//! "type 7"), so p50 of an even count is the midpoint of the two middle values.

use serde::{Deserialize, Serialize};

/// Location and spread of one stage's durations (ms) or of per-rep bandwidths.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub min: f64,
    pub max: f64,
    pub mean: f64,
    /// Sample standard deviation (n − 1); 0 for a single sample.
    pub stdev: f64,
}

/// The bandwidth keys of the results contract.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RateSummary {
    pub p50: f64,
    pub min: f64,
    pub max: f64,
    pub mean: f64,
}

/// Quantile `q` in [0, 1] of an ascending slice (linear interpolation between closest ranks).
pub fn quantile_sorted(sorted: &[f64], q: f64) -> f64 {
    assert!(!sorted.is_empty(), "quantile of an empty sample");
    let pos = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

impl Summary {
    /// Summarize a non-empty sample.
    pub fn of_samples(samples: &[f64]) -> Summary {
        let mut s = samples.to_vec();
        s.sort_by(f64::total_cmp);
        let n = s.len() as f64;
        let mean = s.iter().sum::<f64>() / n;
        let var = if s.len() > 1 { s.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0) } else { 0.0 };
        Summary {
            p50: quantile_sorted(&s, 0.5),
            p90: quantile_sorted(&s, 0.9),
            p99: quantile_sorted(&s, 0.99),
            min: s[0],
            max: s[s.len() - 1],
            mean,
            stdev: var.sqrt(),
        }
    }

    pub fn rate(&self) -> RateSummary {
        RateSummary { p50: self.p50, min: self.min, max: self.max, mean: self.mean }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_match_numpy_linear() {
        let s = Summary::of_samples(&[4.0, 1.0, 3.0, 2.0]);
        assert_eq!(s.p50, 2.5);
        assert!((s.p90 - 3.7).abs() < 1e-12);
        assert_eq!((s.min, s.max, s.mean), (1.0, 4.0, 2.5));
        assert!((s.stdev - 1.2909944487358056).abs() < 1e-12);
        let one = Summary::of_samples(&[7.0]);
        assert_eq!((one.p50, one.p99, one.stdev), (7.0, 7.0, 0.0));
    }
}
