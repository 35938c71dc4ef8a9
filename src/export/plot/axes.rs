//! Axis ranges and ticks: sizes on a log axis labelled in binary units (and tokens on the top axis when every case
//! of every run has the same bytes per token), times on a log axis with 1-2-5 ticks, bandwidth linear unless runs differ by > 20×.

use crate::plan::sizes::{format_size, format_tokens};
use std::collections::BTreeMap;

/// Most size ticks on one axis; more would collide at 1000 px.
const MAX_SIZE_TICKS: usize = 10;
/// Bandwidth switches to a log axis when the fastest and slowest p50 differ by more than this.
pub const LOG_GBPS_RATIO: f64 = 20.0;

/// The sizes every figure shares: ascending, with their token counts when every case has the same bytes per token.
pub struct SizeAxis {
    pub sizes: Vec<u64>,
    pub tokens: Option<BTreeMap<u64, u64>>,
    /// The bytes per token every case shares, when the token axis is drawn.
    pub bytes_per_token: Option<u64>,
    /// What the axis measures, with its units.
    pub desc: &'static str,
}

impl SizeAxis {
    /// From (size, tokens, bytes per token) of every case of every run. Agreeing at the sizes two runs share is not
    /// enough: runs of two models at the same token counts have no size in common, yet one token axis would be
    /// wrong for one of them. A case without its bytes per token (older files) has it from size ÷ tokens.
    pub fn new(cases: impl Iterator<Item = (u64, Option<u64>, Option<u64>)>) -> SizeAxis {
        let mut tokens = BTreeMap::new();
        let mut per_token: Option<Option<u64>> = None;
        for (size, t, bpt) in cases {
            tokens.insert(size, t);
            let bpt = match (t, bpt) {
                (Some(t), Some(b)) if t > 0 && t.checked_mul(b) == Some(size) => Some(b),
                (Some(t), None) if t > 0 && size % t == 0 => Some(size / t),
                _ => None,
            };
            match per_token {
                None => per_token = Some(bpt),
                Some(p) if p != bpt => per_token = Some(None),
                Some(_) => {}
            }
        }
        let sizes: Vec<u64> = tokens.keys().copied().collect();
        let bytes_per_token = per_token.flatten();
        let tokens = bytes_per_token.map(|_| tokens.into_iter().filter_map(|(s, t)| t.map(|t| (s, t))).collect());
        SizeAxis { sizes, tokens, bytes_per_token, desc: "transfer size (binary units: MiB = 2^20 B, GiB = 2^30 B)" }
    }

    /// The log axis range, a little wider than the data so end markers are not cut.
    pub fn range(&self) -> std::ops::Range<f64> {
        let lo = *self.sizes.first().unwrap_or(&1) as f64;
        let hi = *self.sizes.last().unwrap_or(&2) as f64;
        let pad = ((hi / lo).log2() * 0.04).max(0.25);
        lo / pad.exp2()..hi * pad.exp2()
    }

    /// The measured sizes to label, thinned so neighbouring labels are at least 1/10 of the axis apart.
    pub fn ticks(&self) -> Vec<f64> {
        let r = self.range();
        let min_gap = (r.end / r.start).log2() / MAX_SIZE_TICKS as f64;
        let mut out: Vec<f64> = Vec::new();
        for &s in &self.sizes {
            let v = s as f64;
            if out.last().is_none_or(|&l| (v / l).log2() >= min_gap * 0.999) {
                out.push(v);
            }
        }
        out
    }

    pub fn size_label(v: f64) -> String {
        format_size(v.round() as u64)
    }

    pub fn token_label(&self, v: f64) -> String {
        let t = self.tokens.as_ref().and_then(|m| m.get(&(v.round() as u64)));
        t.map(|t| format_tokens(*t)).unwrap_or_default()
    }
}

/// A log range covering `lo..hi` with ticks at 1-2-5 × 10^k inside it (at most ~12 of them).
pub fn log_range(lo: f64, hi: f64) -> (std::ops::Range<f64>, Vec<f64>) {
    let (lo, hi) = (lo.max(1e-9), hi.max(lo * 1.01));
    let range = lo / 1.3..hi * 1.3;
    let mut ticks = Vec::new();
    for steps in [&[1.0, 2.0, 5.0][..], &[1.0, 3.0], &[1.0]] {
        ticks.clear();
        let mut decade = 10f64.powf(range.start.log10().floor());
        while decade <= range.end {
            for s in steps {
                let v = decade * s;
                if v >= range.start && v <= range.end {
                    ticks.push(v);
                }
            }
            decade *= 10.0;
        }
        if ticks.len() <= 12 {
            break;
        }
    }
    (range, ticks)
}

/// [`log_range`] over at least a factor of 3, so that one value (or values all alike) still gets ticks around it.
pub fn log_range_wide(lo: f64, hi: f64) -> (std::ops::Range<f64>, Vec<f64>) {
    if hi < 3.0 * lo {
        return log_range(lo / 2.0, hi * 2.0);
    }
    log_range(lo, hi)
}

/// A tick value without trailing zeros: 0.05, 0.2, 1, 2.5, 20, 500, 2000.
pub fn number_label(v: f64) -> String {
    let s = format!("{v:.4}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_ticks_are_the_measured_sizes_thinned() {
        let a = SizeAxis::new((0..9).map(|i| ((48u64 << 20) << i, Some(512u64 << i), Some(98304))));
        let t = a.ticks();
        assert_eq!(t.len(), 9);
        assert_eq!(SizeAxis::size_label(t[0]), "48 MiB");
        assert_eq!(a.token_label(t[8]), "128k");
        let dense = SizeAxis::new((0..40).map(|i| (((1u64 << 20) << (i / 2)) + i as u64 % 2, None, None)));
        assert!(dense.ticks().len() <= MAX_SIZE_TICKS + 1 && dense.tokens.is_none());
    }

    #[test]
    fn tokens_only_when_every_case_has_the_same_bytes_per_token() {
        let a = SizeAxis::new([(96 << 20, Some(1024), None), (96 << 20, Some(512), None)].into_iter());
        assert!(a.tokens.is_none());
        // 512 tokens of a 96 KiB/token model and of a 128 KiB/token one: no size in common, still no one axis.
        let two = SizeAxis::new([(48 << 20, Some(512), Some(98304)), (64 << 20, Some(512), Some(131072))].into_iter());
        assert!(two.tokens.is_none() && two.bytes_per_token.is_none());
        let one = SizeAxis::new([(48 << 20, Some(512), None), (96 << 20, Some(1024), Some(98304))].into_iter());
        assert_eq!(one.bytes_per_token, Some(98304));
        assert!(SizeAxis::new([(1 << 20, Some(16), None), (2 << 20, None, None)].into_iter()).tokens.is_none());
    }

    #[test]
    fn log_ticks_and_labels() {
        let (r, t) = log_range(0.14, 33.0);
        assert!(r.start < 0.14 && r.end > 33.0);
        assert_eq!(t.iter().map(|v| number_label(*v)).collect::<Vec<_>>(), ["0.2", "0.5", "1", "2", "5", "10", "20"]);
        assert_eq!([2.5, 1.5, 0.0, 400.0, 0.05].map(number_label), ["2.5", "1.5", "0", "400", "0.05"]);
    }
}
