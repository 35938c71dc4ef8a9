//! `kvxfer replay` over real soft-RoCE devices: a window of the shipped trace replayed from rxeB into a `serve` on
//! rxeA, every byte verified, over two sessions at once; and pulled by the receiver's RDMA READs (`--op read`).

use super::*;

const TRACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/traces/mooncake-synthetic.jsonl");

#[test]
#[ignore = "needs soft-RoCE devices: scripts/test-rxe runs it in a VM (KVXFER_REQUIRE_RXE=1, --include-ignored)"]
fn a_trace_window_replays_over_verbs_verified_on_two_sessions() {
    replays_a_trace_window(&[]);
}

#[test]
#[ignore = "needs soft-RoCE devices: scripts/test-rxe runs it in a VM (KVXFER_REQUIRE_RXE=1, --include-ignored)"]
fn a_trace_window_replays_pulled_by_rdma_reads_each_request_timed_whole() {
    let reqs = replays_a_trace_window(&["--op", "read"]);
    // The receiver READs when armed: a request armed ahead of its time would have moved before it was due, and
    // its service (start → the receiver's report) would not hold its READ.
    for q in &reqs {
        let (service, transfer) = (q["service_ms"].as_f64().unwrap(), q["transfer_ms"].as_f64().unwrap());
        assert!(transfer > 0.0 && service >= transfer, "service {service} ms < READ {transfer} ms: {q}");
    }
}

/// Replay the trace's first 8 s at speed 4 over two verbs sessions into a `serve` on rxeA, verified, with `extra`
/// flags; checks each request's bytes against the trace and returns the request records.
fn replays_a_trace_window(extra: &[&str]) -> Vec<serde_json::Value> {
    let Some(r) = rxe() else { return Vec::new() };
    let t = TempDir::new("verbs-replay");
    let (mut serve, addr) = serve_on_a(&r, &["--max-sessions", "2"]);
    let json = t.arg("r.json");
    let args = [
        "replay",
        "--peer",
        &addr,
        "--token",
        TOKEN,
        "--transport",
        "verbs",
        "-d",
        &r.b_dev,
        "--ack-timeout",
        "18",
        "--trace",
        TRACE,
        "--window",
        "0s..8s",
        "--kv-bytes-per-token",
        "64",
        "--speed",
        "4",
        "--max-inflight",
        "2",
        "--warmup-requests",
        "2",
        "--verify",
        "--json",
        &json,
    ];
    run(&[&args[..], extra].concat()).expect_code(0);
    serve.kill();
    let v = read_json(Path::new(&json));
    assert_eq!(v["config"]["transport"], "verbs");
    let reqs = v["replay"]["loads"][0]["requests"].as_array().expect("requests");
    let text = std::fs::read_to_string(TRACE).unwrap();
    let due: Vec<u64> = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["timestamp"].as_u64().unwrap() < 8_000)
        .map(|v| v["input_length"].as_u64().unwrap() * 64)
        .collect();
    assert_eq!(reqs.iter().map(|q| q["bytes"].as_u64().unwrap()).collect::<Vec<_>>(), due);
    assert!(reqs.iter().all(|q| q["mismatched_bytes"] == 0), "every request verified");
    let lanes: std::collections::BTreeSet<u64> = reqs.iter().map(|q| q["lane"].as_u64().unwrap()).collect();
    assert_eq!(lanes.len(), 2, "both sessions served requests: {lanes:?}");
    reqs.clone()
}
