//! Which part of a trace to replay: a window of trace time, then the first N requests in it. An hour-long trace is
//! replayed a few minutes at a time, and a window chosen by time (not by line) keeps the trace's own load there.

use super::Request;
use crate::bail_usage;
use crate::error::usage;
use anyhow::Result;
use std::time::Duration;

/// A span of trace time, `start_ms <= arrival < end_ms`. Written `0s..300s`, `90s..` (to the end) or `..2m` (from the
/// start): humantime durations (or plain seconds) from the trace's time 0; a missing side is open (0, or infinity).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    pub start_ms: f64,
    pub end_ms: f64,
}

impl Window {
    /// As typed back: `90s..300s`, `90s..`, `..2m`.
    fn text(&self) -> String {
        let side = |ms: f64| humantime::format_duration(Duration::from_micros((ms * 1e3).round() as u64)).to_string();
        let start = if self.start_ms > 0.0 { side(self.start_ms) } else { String::new() };
        let end = if self.end_ms.is_finite() { side(self.end_ms) } else { String::new() };
        format!("{start}..{end}")
    }
}

impl std::fmt::Display for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text())
    }
}

/// One side of a window: `90s`, `2m`, `1h30m`, `250ms`, or plain seconds (`90`).
fn side(text: &str, whole: &str) -> Result<f64> {
    let t = text.trim();
    let d = if !t.is_empty() && t.chars().all(|c| c.is_ascii_digit()) {
        t.parse::<u64>().ok().map(Duration::from_secs)
    } else {
        humantime::parse_duration(t).ok()
    };
    let d = d.ok_or_else(|| {
        usage(format!("window {whole:?}: {t:?} is not a duration; write START..END with durations like 90s, 5m or 1h"))
    })?;
    Ok(d.as_secs_f64() * 1e3)
}

impl std::str::FromStr for Window {
    type Err = anyhow::Error;

    fn from_str(text: &str) -> Result<Window> {
        let Some((a, b)) = text.split_once("..") else {
            bail_usage!("window {text:?}: expected START..END, e.g. 0s..300s, 90s.. or ..2m");
        };
        if a.trim().is_empty() && b.trim().is_empty() {
            bail_usage!("window {text:?} is open at both ends; give a start, an end or both, e.g. 0s..300s");
        }
        let start_ms = if a.trim().is_empty() { 0.0 } else { side(a, text)? };
        let end_ms = if b.trim().is_empty() { f64::INFINITY } else { side(b, text)? };
        if start_ms >= end_ms {
            bail_usage!("window {text:?} ends where it starts or before; the start must come before the end");
        }
        Ok(Window { start_ms, end_ms })
    }
}

/// The requests arriving in `window` (trace time), then the first `first` of those in the order given (by arrival,
/// as [`read_trace`](super::read_trace) returns them); arrivals re-based so that the
/// first selected request arrives at 0 (a replay starts with its first request, not with the window's empty
/// lead-in). Requests keep their ids (their lines). None selected is a usage error naming the trace's span.
pub fn select(requests: Vec<Request>, window: Option<Window>, first: Option<u64>) -> Result<Vec<Request>> {
    if first == Some(0) {
        bail_usage!("the first 0 requests are none; ask for at least 1");
    }
    let Some(span) = span_of(&requests) else { bail_usage!("the trace has no requests to select from") };
    let mut out: Vec<Request> = match window {
        Some(w) => requests.into_iter().filter(|r| r.arrival_ms >= w.start_ms && r.arrival_ms < w.end_ms).collect(),
        None => requests,
    };
    if let Some(n) = first {
        out.truncate(usize::try_from(n).unwrap_or(usize::MAX));
    }
    let Some((base, _)) = span_of(&out) else {
        let w = window.expect("a window is what can select none from a non-empty trace");
        bail_usage!(
            "no request arrives in the window {w}: the trace's requests arrive from {} to {}; choose a window inside that",
            span_text(span.0),
            span_text(span.1)
        );
    };
    for r in &mut out {
        r.arrival_ms -= base;
    }
    Ok(out)
}

/// The first and last arrival (the list need not be sorted); None when empty.
fn span_of(requests: &[Request]) -> Option<(f64, f64)> {
    let first = requests.iter().map(|r| r.arrival_ms).min_by(f64::total_cmp)?;
    let last = requests.iter().map(|r| r.arrival_ms).max_by(f64::total_cmp)?;
    Some((first, last))
}

/// A trace time for a message: `1022.025s`.
fn span_text(ms: f64) -> String {
    format!("{}s", ms / 1e3)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::exit_code;

    fn at(times: &[f64]) -> Vec<Request> {
        let r = |(i, &t): (usize, &f64)| Request {
            id: i as u64,
            arrival_ms: t,
            input_tokens: 1,
            output_tokens: 0,
            hash_ids: None,
        };
        times.iter().enumerate().map(r).collect()
    }

    fn w(text: &str) -> Window {
        text.parse().unwrap()
    }

    #[test]
    fn windows_read_humantime_either_side_and_open_ends() {
        assert_eq!(w("0s..300s"), Window { start_ms: 0.0, end_ms: 300_000.0 });
        assert_eq!(w("90s.."), Window { start_ms: 90_000.0, end_ms: f64::INFINITY });
        assert_eq!(w("..2m"), Window { start_ms: 0.0, end_ms: 120_000.0 });
        assert_eq!(w("250ms..1h"), Window { start_ms: 250.0, end_ms: 3_600_000.0 });
        assert_eq!(w("90..120"), Window { start_ms: 90_000.0, end_ms: 120_000.0 });
        assert_eq!(w("90s..5m").to_string(), "1m 30s..5m");
    }

    #[test]
    fn windows_that_select_nothing_by_construction_are_refused() {
        for (text, says) in [
            ("300s..0s", "ends where it starts or before"),
            ("5s..5s", "ends where it starts or before"),
            ("..", "open at both ends"),
            ("5s", "expected START..END"),
            ("5 parsecs..", "is not a duration"),
        ] {
            let e = text.parse::<Window>().unwrap_err();
            assert_eq!(exit_code(&e), 2);
            assert!(e.to_string().contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn select_takes_the_window_then_the_first_n_and_rebases() {
        let reqs = at(&[0.0, 1000.0, 2000.0, 2000.0, 3000.0, 4000.0]);
        let got = select(reqs.clone(), Some(w("2s..4s")), None).unwrap();
        assert_eq!(got.iter().map(|r| (r.id, r.arrival_ms)).collect::<Vec<_>>(), [(2, 0.0), (3, 0.0), (4, 1000.0)]);
        let got = select(reqs.clone(), Some(w("1s..")), Some(2)).unwrap();
        assert_eq!(got.iter().map(|r| (r.id, r.arrival_ms)).collect::<Vec<_>>(), [(1, 0.0), (2, 1000.0)]);
        let got = select(reqs.clone(), None, Some(100)).unwrap();
        assert_eq!(got, reqs, "no window and more than there are: all of them, as they were");
    }

    #[test]
    fn an_empty_selection_names_the_window_and_the_trace_span() {
        let e = select(at(&[0.0, 1_022_025.0]), Some(w("1100s..1200s")), None).unwrap_err();
        assert_eq!(exit_code(&e), 2);
        assert_eq!(
            e.to_string(),
            "no request arrives in the window 18m 20s..20m: the trace's requests arrive from 0s to 1022.025s; choose \
             a window inside that"
        );
        assert!(select(at(&[1.0]), None, Some(0)).unwrap_err().to_string().contains("at least 1"));
        assert!(select(Vec::new(), None, None).is_err());
    }
}
