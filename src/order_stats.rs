//! Order statistics both the statistics layer and a transport's own calibration use: the distribution-free
//! interval of a median (see `stats::confidence` for what it claims). A leaf, so a transport below `stats` can ask
//! for the same interval every case gets instead of computing one of its own.

/// The nominal coverage of the median's interval.
pub const LEVEL: f64 = 0.95;

/// P(Bin(n, ½) = i) for i = 0, 1, …, n, each from its logarithm: C(n, i) and 2^n overflow an f64 past n ≈ 1,000
/// (a run paced by time measures thousands of reps), and their quotient would be NaN.
fn binom_half_pmf(n: usize) -> impl Iterator<Item = f64> {
    let ln_half_n = -(n as f64) * std::f64::consts::LN_2;
    (0..=n).scan(0.0f64, move |ln_c, i| {
        if i > 0 {
            *ln_c += ((n + 1 - i) as f64 / i as f64).ln();
        }
        Some((*ln_c + ln_half_n).exp())
    })
}

/// The 1-based ranks (j, n+1-j) of the interval and its exact coverage, for n ≥ 1 reps.
pub fn median_ranks(n: usize) -> (usize, usize, f64) {
    assert!(n > 0, "an interval needs at least one rep");
    let mut pmf = binom_half_pmf(n);
    // P(Bin(n, ½) < j), kept as j grows.
    let mut below = pmf.next().expect("n ≥ 1 has P(X = 0)");
    let mut best = (1, n, 1.0 - 2.0 * below);
    for j in 2..=n.div_ceil(2) {
        below += pmf.next().expect("j ≤ n");
        let coverage = 1.0 - 2.0 * below;
        if coverage < LEVEL {
            break;
        }
        best = (j, n + 1 - j, coverage);
    }
    if n == 1 {
        best.2 = 0.0;
    }
    best
}

/// Interval of the median of `samples` (any order; non-finite values are left out). None when empty.
pub fn median_interval(samples: &[f64]) -> Option<([f64; 2], [usize; 2], f64)> {
    let mut s: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return None;
    }
    s.sort_by(f64::total_cmp);
    let (lo, hi, coverage) = median_ranks(s.len());
    Some(([s[lo - 1], s[hi - 1]], [lo, hi], coverage))
}
