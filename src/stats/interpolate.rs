//! Reading a measured time-vs-size curve between (and, marked, beyond) its points: piecewise linear in log-log
//! space, which is exact for a power law t = a·sizeᵇ between neighbouring sizes (latency-bound small transfers have
//! b ≈ 0, bandwidth-bound large ones b ≈ 1).

use serde::Serialize;

/// Where an estimate comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Basis {
    /// A measured size.
    Measured,
    /// Between two measured sizes.
    Interpolated,
    /// Below the smallest or above the largest measured size: the nearest segment's slope carried on (with one
    /// measured size, time proportional to size). Marked wherever it is shown.
    ExtrapolatedBelow,
    ExtrapolatedAbove,
}

impl Basis {
    pub fn is_extrapolated(self) -> bool {
        matches!(self, Basis::ExtrapolatedBelow | Basis::ExtrapolatedAbove)
    }
}

/// `points`: (size in bytes, time) with distinct positive sizes, any order; times positive. None when empty.
pub fn log_log(points: &[(f64, f64)], size: f64) -> Option<(f64, Basis)> {
    let mut p: Vec<(f64, f64)> = points.iter().copied().filter(|(s, t)| *s > 0.0 && *t > 0.0).collect();
    p.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (first, last) = (*p.first()?, *p.last()?);
    if let Some(&(_, t)) = p.iter().find(|(s, _)| *s == size) {
        return Some((t, Basis::Measured));
    }
    let line = |a: (f64, f64), b: (f64, f64)| {
        let slope = (b.1.ln() - a.1.ln()) / (b.0.ln() - a.0.ln());
        (a.1.ln() + slope * (size.ln() - a.0.ln())).exp()
    };
    if p.len() == 1 {
        let basis = if size < first.0 { Basis::ExtrapolatedBelow } else { Basis::ExtrapolatedAbove };
        return Some((first.1 * size / first.0, basis));
    }
    if size < first.0 {
        return Some((line(p[0], p[1]), Basis::ExtrapolatedBelow));
    }
    if size > last.0 {
        return Some((line(p[p.len() - 2], p[p.len() - 1]), Basis::ExtrapolatedAbove));
    }
    let i = p.windows(2).position(|w| w[0].0 < size && size < w[1].0).expect("inside the measured range");
    Some((line(p[i], p[i + 1]), Basis::Interpolated))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_power_law_is_recovered_exactly_between_points() {
        // t = 0.5 ms + nothing: pure bandwidth curve t = size / 10 GB/s, in ms.
        let curve: Vec<(f64, f64)> =
            [1u64 << 20, 1 << 24, 1 << 28].iter().map(|&s| (s as f64, s as f64 / 1e7)).collect();
        let (t, b) = log_log(&curve, (1u64 << 22) as f64).unwrap();
        assert_eq!(b, Basis::Interpolated);
        assert!((t - (1u64 << 22) as f64 / 1e7).abs() < 1e-9 * t);
        assert_eq!(log_log(&curve, (1u64 << 24) as f64).unwrap(), ((1u64 << 24) as f64 / 1e7, Basis::Measured));
    }

    #[test]
    fn a_bend_is_followed_segment_by_segment_and_ends_are_marked() {
        // Flat (latency-bound) up to 1 MiB, then linear.
        let curve = [(1024.0, 0.01), (1048576.0, 0.01), (1073741824.0, 10.24)];
        let (mid_low, _) = log_log(&curve, 32768.0).unwrap();
        assert!((mid_low - 0.01).abs() < 1e-12);
        let (mid_high, b) = log_log(&curve, 33554432.0).unwrap();
        assert_eq!(b, Basis::Interpolated);
        assert!((mid_high - 0.32).abs() < 1e-9, "{mid_high}");
        let (above, b) = log_log(&curve, 4294967296.0).unwrap();
        assert_eq!(b, Basis::ExtrapolatedAbove);
        assert!((above - 40.96).abs() < 1e-6 && b.is_extrapolated());
        assert_eq!(log_log(&curve, 10.0).unwrap().1, Basis::ExtrapolatedBelow);
        assert_eq!(log_log(&[(100.0, 2.0)], 200.0).unwrap(), (4.0, Basis::ExtrapolatedAbove));
        assert!(log_log(&[], 1.0).is_none());
    }
}
