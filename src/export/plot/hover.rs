//! What a point says when a page's reader points at it: the numbers behind the marker, in the units the console
//! prints, named by its run and size, so a reader never has to read a value off an axis.

use crate::plan::sizes::{format_size, format_tokens};
use crate::run::RepRecord;
use crate::stats::CaseResult;

/// "run · 96 MiB (1k tokens)": a case's series and size.
pub fn case_name(run: &str, c: &CaseResult) -> String {
    let tokens = c.tokens.map(|t| format!(" ({} tokens)", format_tokens(t))).unwrap_or_default();
    format!("{run} · {}{tokens}", format_size(c.size_bytes))
}

/// A case's p50 and spread: "run · 96 MiB: p50 9.70 GB/s, 10.4 ms (min 9.12, max 9.81 GB/s), 20 reps; 2 modes
/// 3.41 / 9.70 GB/s", with its warnings.
pub fn case(run: &str, c: &CaseResult) -> String {
    let g = &c.stats.gbps;
    let mut out = format!(
        "{}: p50 {} GB/s, {} (min {}, max {} GB/s), {} reps",
        case_name(run, c),
        sig(g.p50),
        ms(c.stats.transfer_ms.p50),
        sig(g.min),
        sig(g.max),
        c.stats.n
    );
    if let Some(modes) = c.derived.bimodal.describe() {
        out.push_str(&format!("; 2 modes {modes}"));
    }
    // Its modes are said above; the other warnings in their own words.
    for w in c.derived.warnings.iter().filter(|w| w.kind != crate::measure::WarningKind::Bimodal) {
        out.push_str(&format!("; {}", w.message));
    }
    out
}

/// One rep: "run · 96 MiB · rep 7: 3.41 GB/s in 29.5 ms", and why it is slow when the case's attribution says.
pub fn rep(run: &str, c: &CaseResult, rep: &RepRecord, slow: Option<&str>) -> String {
    let why = slow.map(|s| format!("; a slow rep ({s})")).unwrap_or_default();
    format!("{} · rep {}: {} GB/s in {}{why}", case_name(run, c), rep.i, sig(rep.gbps), ms(rep.transfer_ms))
}

/// A duration given in ms, in µs below 1 ms and in s from 10 s: "412 µs", "10.4 ms", "12.3 s".
pub fn ms(v: f64) -> String {
    match v.abs() {
        a if a < 1.0 => format!("{} µs", sig(v * 1e3)),
        a if a >= 10_000.0 => format!("{} s", sig(v / 1e3)),
        _ => format!("{} ms", sig(v)),
    }
}

/// Three significant digits (whole numbers from 100), so a point says its value to 0.5% whatever its scale:
/// 0.0177, 0.412, 3.41, 25.3, 412.
pub fn sig(v: f64) -> String {
    match v.abs() {
        a if a >= 100.0 || !a.is_finite() => format!("{v:.0}"),
        a if a >= 10.0 => format!("{v:.1}"),
        a if a >= 1.0 => format!("{v:.2}"),
        0.0 => "0".to_string(),
        // Below 1: two places past the first significant one, at most 9.
        a => format!("{v:.*}", (2 - a.log10().floor() as i64).clamp(3, 9) as usize),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_in_the_unit_that_fits() {
        assert_eq!(ms(0.4123), "412 µs");
        assert_eq!(ms(10.44), "10.4 ms");
        assert_eq!(ms(2.5), "2.50 ms");
        assert_eq!(ms(12_345.0), "12.3 s");
        assert_eq!(sig(0.0412), "0.0412");
        assert_eq!(sig(0.412), "0.412");
        assert_eq!(sig(0.0177272), "0.0177");
        assert_eq!(sig(0.0), "0");
    }
}
