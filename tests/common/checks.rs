//! Checks of results files: the contract keys of a case and the invariants between them.

use std::path::Path;

pub fn read_json(p: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON ({e}):\n{text}", p.display()))
}

pub fn num(v: &serde_json::Value, key: &str) -> f64 {
    v.get(key).and_then(|x| x.as_f64()).unwrap_or_else(|| panic!("missing number {key:?} in {v}"))
}

/// Check every contract key of one `cases[]` element and the invariants between them.
pub fn check_case(c: &serde_json::Value, size_bytes: u64, reps: u64, verify: bool) {
    check_case_timed(c, size_bytes, reps, verify, TimedBy::Sender)
}

/// Whose clock a rep's transfer_ms is.
#[derive(Clone, Copy, PartialEq)]
pub enum TimedBy {
    /// The sender posts and times the transfer between RepReady and RepDone.
    Sender,
    /// The receiver posts it (nixl --nixl-op read) once it has sent RepReady: the sender's setup can overlap it
    /// (RepReady reaches the sender late on a busy host), but it lies within the sender's whole rep.
    Receiver,
}

pub fn check_case_timed(c: &serde_json::Value, size_bytes: u64, reps: u64, verify: bool, timed_by: TimedBy) {
    assert_eq!(c["size_bytes"].as_u64(), Some(size_bytes), "{c}");
    assert_eq!(c["n"].as_u64(), Some(reps), "n == reps: {c}");
    for key in ["tokens", "bytes_per_token"] {
        assert!(c.get(key).is_some(), "cases[] lacks {key:?}");
    }
    for stage in ["transfer_ms", "setup_ms", "notify_ms"] {
        let s = &c[stage];
        for k in ["p50", "p90", "p99", "min", "max", "mean", "stdev"] {
            let v = num(s, k);
            assert!(v.is_finite() && v >= 0.0, "{stage}.{k} = {v}");
        }
        let (min, p50, p90, p99, max) = (num(s, "min"), num(s, "p50"), num(s, "p90"), num(s, "p99"), num(s, "max"));
        assert!(min <= p50 && p50 <= p90 && p90 <= p99 && p99 <= max, "{stage} quantiles out of order: {s}");
        assert!(min <= num(s, "mean") && num(s, "mean") <= max, "{stage}: {s}");
    }
    assert!(num(&c["transfer_ms"], "min") > 0.0, "a transfer takes time");
    let g = &c["gbps"];
    for k in ["p50", "min", "max", "mean"] {
        let v = num(g, k);
        assert!(v.is_finite() && v > 0.0, "gbps.{k} = {v}");
    }
    assert!(num(g, "min") <= num(g, "p50") && num(g, "p50") <= num(g, "max"));
    let lat = &c["block_latency_us"];
    // A verbs READ run's sender sees no block complete: the receiver posts them (nixl's READ notifies the sender).
    let blocks_seen = timed_by == TimedBy::Sender || !lat.is_null();
    for k in ["p50", "p99", "max"].into_iter().filter(|_| blocks_seen) {
        assert!(num(lat, k) >= 1.0, "block_latency_us.{k}: {lat}");
    }
    assert!(!blocks_seen || num(lat, "p50") <= num(lat, "p99") && num(lat, "p99") <= num(lat, "max"));
    if verify {
        assert_eq!(c["verified"], serde_json::json!(true), "{c}");
        assert_eq!(c["mismatched_bytes"].as_u64(), Some(0), "{c}");
    } else {
        assert!(c["verified"].is_null() && c["mismatched_bytes"].is_null(), "{c}");
    }
    let r = c["reps"].as_array().expect("reps[]");
    assert_eq!(r.len() as u64, reps, "reps[] has n entries");
    for (i, rep) in r.iter().enumerate() {
        assert_eq!(rep["i"].as_u64(), Some(i as u64), "{rep}");
        for k in ["transfer_ms", "gbps", "setup_ms", "notify_ms", "total_ms"] {
            let v = num(rep, k);
            assert!(v.is_finite() && v >= 0.0, "reps[{i}].{k} = {v}");
        }
        // GB/s = 10^9 bytes/s, from the size and the transfer time.
        let expect = size_bytes as f64 / (num(rep, "transfer_ms") * 1e-3) / 1e9;
        let got = num(rep, "gbps");
        assert!((got - expect).abs() <= 1e-6 * expect.max(1.0), "reps[{i}].gbps {got} != size/transfer_ms {expect}");
        // The total spans setup and transfer on the sender's clock.
        let inside = match timed_by {
            TimedBy::Sender => num(rep, "transfer_ms") + num(rep, "setup_ms"),
            TimedBy::Receiver => num(rep, "transfer_ms"),
        };
        assert!(num(rep, "total_ms") + 1e-6 >= inside - 1e-3, "reps[{i}]: total_ms < setup_ms + transfer_ms: {rep}");
    }
    let ts: Vec<f64> = r.iter().map(|x| num(x, "transfer_ms")).collect();
    let min = ts.iter().cloned().fold(f64::INFINITY, f64::min);
    let max = ts.iter().cloned().fold(0.0, f64::max);
    assert!((num(&c["transfer_ms"], "min") - min).abs() < 1e-9);
    assert!((num(&c["transfer_ms"], "max") - max).abs() < 1e-9);
}
