//! `kvxfer predict --trace` through the real binary: a short tcp sweep over loopback gives the curve, and a window
//! of the shipped trace is predicted at two speeds without moving a byte: one row per load with the trace's own
//! requests and bytes, latency no better at the higher load; bad inputs are one line and exit 2.

mod common;

use common::*;
use serde_json::Value;

const TRACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/traces/mooncake-synthetic.jsonl");

/// (requests, input tokens) of the shipped trace's first `ms` of trace time, counted here, apart from kvxfer.
fn trace_window(ms: u64) -> (u64, u64) {
    let text = std::fs::read_to_string(TRACE).expect("the shipped trace is in the repository");
    let rows: Vec<Value> =
        text.lines().filter(|l| !l.trim().is_empty()).map(|l| serde_json::from_str(l).unwrap()).collect();
    let first = rows[0]["timestamp"].as_u64().unwrap();
    let inside: Vec<&Value> = rows.iter().filter(|r| r["timestamp"].as_u64().unwrap() - first < ms).collect();
    (inside.len() as u64, inside.iter().map(|r| r["input_length"].as_u64().unwrap()).sum())
}

fn p99(load: &Value) -> f64 {
    load["summary"]["latency_ms"]["p99"].as_f64().expect("summary.latency_ms.p99")
}

#[test]
fn a_trace_window_is_predicted_per_speed_from_a_measured_sweep() {
    let dir = TempDir::new("predict-trace");
    let results = dir.arg("sweep.json");
    run(&["sweep", "--transport", "tcp", "--sizes", "256KiB..16MiB:x4", "--reps", "3", "--json", &results])
        .expect_code(0);
    let args =
        ["predict", "--results", &results, "--trace", TRACE, "--window", "0s..30s", "--kv-bytes-per-token", "1024"];
    let out = run(&[&args[..], &["--speeds", "1,4", "--json"]].concat());
    out.expect_code(0).no_panic();
    let p: Value = serde_json::from_str(&out.stdout).expect("predict --json prints JSON");
    assert_eq!(p["schema"], "kvxfer/predict/v1");
    assert_eq!(p["predictions"].as_array().map(Vec::len), Some(0));
    let replay = &p["replay"];
    assert_eq!(replay["load_unit"], "speed");
    assert_eq!(replay["max_inflight"], 1);
    assert_eq!(replay["workload"]["bytes_per_token"], 1024);
    let loads = replay["loads"].as_array().expect("replay.loads");
    assert_eq!(loads.iter().map(|l| l["load"].as_f64().unwrap()).collect::<Vec<_>>(), vec![1.0, 4.0]);
    let (requests, tokens) = trace_window(30_000);
    for l in loads {
        let s = &l["summary"];
        assert_eq!(s["requests"].as_u64(), Some(requests), "{s}");
        assert_eq!(s["bytes_moved"].as_u64(), Some(tokens * 1024), "{s}");
        assert!(s["latency_ms"]["p50"].as_f64().unwrap() > 0.0, "{s}");
        assert!(s["queue_ms"]["max"].as_f64().unwrap() <= s["latency_ms"]["max"].as_f64().unwrap(), "{s}");
        // The largest requests (about 55 MiB at 1 KiB/token) lie above the 16 MiB measured.
        assert!(l["above_range"].as_u64().unwrap() > 0, "{l}");
    }
    // Four times the load queues at least as much: p99 does not fall (beyond the histogram's rounding).
    assert!(
        p99(&loads[1]) >= 0.99 * p99(&loads[0]),
        "p99 {} at speed 4 < {} at speed 1",
        p99(&loads[1]),
        p99(&loads[0])
    );
    assert!(out.stderr.contains("larger than the largest measured size"), "{}", out.stderr);

    // The table: a row per load, and what the mark means.
    let table = run(&[&args[..], &["--speeds", "1,4"]].concat());
    table.expect_code(0);
    let rows: Vec<&str> = table.stdout.lines().filter(|l| l.starts_with("│ 1 ") || l.starts_with("│ 4 ")).collect();
    assert_eq!(rows.len(), 2, "{}", table.stdout);
    assert!(table.stdout.contains("above the measured range"), "{}", table.stdout);
}

#[test]
fn bad_stream_inputs_are_one_line_and_exit_2() {
    let dir = TempDir::new("predict-bad");
    let results = dir.arg("none.json");
    let cases: [(&[&str], &str); 4] = [
        (&["predict", "--trace", TRACE, "--speeds", "1"], "--results"),
        (&["predict", "--results", &results, "--arrivals", "poisson:5", "--prefix-cache", "100"], "--prefix-cache"),
        (&["predict", "--results", &results, "--speeds", "2"], "--speeds"),
        (&["predict", "--results", &results, "--trace", TRACE, "--sizes", "1MiB"], "--sizes"),
    ];
    // A results file the refusals above the workload's would need: a tiny real sweep.
    run(&["sweep", "--transport", "tcp", "--sizes", "64KiB", "--reps", "2", "--json", &results]).expect_code(0);
    for (args, names) in cases {
        let out = run(args);
        out.expect_code(2).no_panic();
        assert!(out.one_error().contains(names), "{args:?}: {}", out.stderr);
        assert_eq!(out.stderr.lines().filter(|l| !l.trim().is_empty()).count(), 1, "{args:?}: {}", out.stderr);
        assert!(out.stdout.is_empty(), "{args:?}: {}", out.stdout);
    }
}
