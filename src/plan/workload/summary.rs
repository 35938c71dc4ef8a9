//! What a list of requests amounts to before it is replayed: how many, over how long, how long the prompts are, and
//! the KV-cache bandwidth that load offers at a model's bytes per token. Printed before a replay starts, so that a
//! trace that asks for more than the link can carry is seen as such before the numbers come in.

use super::Request;
use crate::bail_usage;
use crate::plan::sizes::format_size;
use anyhow::Result;

#[derive(Debug, Clone, PartialEq)]
pub struct TraceSummary {
    pub requests: u64,
    /// Last arrival less the first, ms.
    pub span_ms: f64,
    pub mean_input_tokens: f64,
    pub max_input_tokens: u64,
    pub total_input_tokens: u64,
}

impl TraceSummary {
    /// The summary of `reqs` (in any order); all zero for none.
    pub fn of(reqs: &[Request]) -> Self {
        let first = reqs.iter().map(|r| r.arrival_ms).min_by(f64::total_cmp).unwrap_or(0.0);
        let last = reqs.iter().map(|r| r.arrival_ms).max_by(f64::total_cmp).unwrap_or(0.0);
        let total: u64 = reqs.iter().map(|r| r.input_tokens).sum();
        TraceSummary {
            requests: reqs.len() as u64,
            span_ms: last - first,
            mean_input_tokens: if reqs.is_empty() { 0.0 } else { total as f64 / reqs.len() as f64 },
            max_input_tokens: reqs.iter().map(|r| r.input_tokens).max().unwrap_or(0),
            total_input_tokens: total,
        }
    }

    /// GB/s of KV cache the requests ask for when played `speed` times faster than recorded: every prompt's
    /// `bytes_per_token` bytes over the span (no prefix cache). Infinite when all arrive at one instant.
    pub fn offered_gbps(&self, bytes_per_token: u64, speed: f64) -> f64 {
        debug_assert!(speed.is_finite() && speed > 0.0, "parse_speed refuses {speed}");
        crate::units::gbps(self.total_input_tokens.saturating_mul(bytes_per_token), self.span_ms / speed)
    }

    /// One line: `3993 requests over 1022.0 s, input mean 15325 max 191378 tokens; offers 9.81 GB/s at 160 KiB/token`.
    pub fn line(&self, bytes_per_token: u64, speed: f64) -> String {
        let at = if speed == 1.0 { String::new() } else { format!(" played {speed}x faster") };
        let offered = match self.offered_gbps(bytes_per_token, speed) {
            g if g.is_finite() => format!("offers {g:.2} GB/s"),
            _ => "arrive at one instant".to_string(),
        };
        format!(
            "{} requests over {:.1} s{at}, input mean {:.0} max {} tokens; {offered} at {}/token",
            self.requests,
            self.span_ms / speed / 1e3,
            self.mean_input_tokens,
            self.max_input_tokens,
            format_size(bytes_per_token)
        )
    }
}

/// A replay speed: `2` or `2x` plays the trace twice as fast, `0.5x` at half speed. Positive and finite.
pub fn parse_speed(text: &str) -> Result<f64> {
    let t = text.trim();
    let t = t.strip_suffix(['x', 'X']).unwrap_or(t);
    match t.parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 => Ok(s),
        _ => bail_usage!("speed {text:?}: expected a positive factor like 2x (twice as fast) or 0.5x (half speed)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::exit_code;

    fn req(t: f64, input: u64) -> Request {
        Request { id: 0, arrival_ms: t, input_tokens: input, output_tokens: 0, hash_ids: None }
    }

    #[test]
    fn a_summary_counts_spans_and_offers_bandwidth() {
        let s = TraceSummary::of(&[req(1000.0, 100), req(3000.0, 300), req(2000.0, 200)]);
        assert_eq!(
            s,
            TraceSummary {
                requests: 3,
                span_ms: 2000.0,
                mean_input_tokens: 200.0,
                max_input_tokens: 300,
                total_input_tokens: 600
            }
        );
        // 600 tokens × 1 MB over 2 s = 0.3 GB/s; twice as fast, twice that.
        assert!((s.offered_gbps(1_000_000, 1.0) - 0.3).abs() < 1e-12);
        assert!((s.offered_gbps(1_000_000, 2.0) - 0.6).abs() < 1e-12);
        assert_eq!(
            s.line(160 << 10, 1.0),
            "3 requests over 2.0 s, input mean 200 max 300 tokens; offers 0.05 GB/s at 160 KiB/token"
        );
        assert!(
            s.line(1 << 20, 2.0).starts_with("3 requests over 1.0 s played 2x faster,"),
            "{}",
            s.line(1 << 20, 2.0)
        );
    }

    #[test]
    fn one_request_or_none_summarizes_without_dividing_by_zero() {
        let s = TraceSummary::of(&[]);
        assert_eq!((s.requests, s.span_ms, s.mean_input_tokens), (0, 0.0, 0.0));
        let one = TraceSummary::of(&[req(5.0, 10)]);
        assert!(one.line(2, 1.0).contains("arrive at one instant"), "{}", one.line(2, 1.0));
    }

    #[test]
    fn the_shipped_trace_summarizes_to_its_published_numbers() {
        let s = TraceSummary::of(&crate::plan::workload::shipped_trace());
        assert_eq!(
            s.line(160 << 10, 1.0),
            "3993 requests over 1022.0 s, input mean 15325 max 191378 tokens; offers 9.81 GB/s at 160 KiB/token"
        );
    }

    #[test]
    fn speeds_are_positive_finite_factors() {
        assert_eq!(parse_speed("2").unwrap(), 2.0);
        assert_eq!(parse_speed("0.5x").unwrap(), 0.5);
        for bad in ["0", "-1", "nan", "inf", "fast", "", "0x"] {
            let e = parse_speed(bad).unwrap_err();
            assert_eq!(exit_code(&e), 2);
            assert!(e.to_string().contains("expected a positive factor"), "{bad}: {e}");
        }
    }
}
