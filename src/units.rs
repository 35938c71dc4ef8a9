//! Units every layer quotes: bandwidth is GB/s = 10^9 bytes/s, times are ms.

/// Bandwidth in GB/s (10^9 bytes per second) of `bytes` moved in `ms` milliseconds; infinite for a zero time.
pub fn gbps(bytes: u64, ms: f64) -> f64 {
    if ms <= 0.0 {
        return f64::INFINITY;
    }
    bytes as f64 / (ms * 1e-3) / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidth_is_decimal_gigabytes() {
        assert!((gbps(1_000_000_000, 1000.0) - 1.0).abs() < 1e-12);
        assert!((gbps(96 << 20, 10.0) - 10.066329600).abs() < 1e-9);
    }
}
