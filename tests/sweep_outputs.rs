//! Sweep-file runs and results files through the real binary over loopback TCP. Also: `predict` names where the
//! bytes/token it used came from.

mod common;

use common::*;
use std::path::Path;

const RESULTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/results");

// ------------------------------------------------------------------------------------------------- predict

/// `predict --tokens` without a model takes the bytes/token from the results file, and says so; given on the
/// command line, it names the flag.
#[test]
fn predict_names_where_its_bytes_per_token_came_from() {
    let file = Path::new(RESULTS).join("h200-nvlink.json");
    let results = file.to_str().unwrap();
    let out = run(&["predict", "--results", results, "--tokens", "1k,4k"]);
    out.expect_code(0);
    let line = out.stderr.lines().find(|l| l.starts_with("kv bytes/token:")).expect("says the bytes/token");
    assert_eq!(
        line,
        format!("kv bytes/token: 98304 B/token (from {results}: the bytes/token its cases were measured with, qwen3-30b-a3b)")
    );
    let out = run(&["predict", "--results", results, "--tokens", "1k", "--kv-bytes-per-token", "4096"]);
    out.expect_code(0);
    assert!(out.stderr.contains("kv bytes/token: 4096 B/token (from --kv-bytes-per-token)"), "{}", out.stderr);
}
