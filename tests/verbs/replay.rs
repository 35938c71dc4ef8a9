//! `kvxfer replay` over real soft-RoCE devices: a window of the shipped trace replayed from rxeB into a `serve` on
//! rxeA, every byte verified, over two sessions at once.

use super::*;

const TRACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/traces/mooncake-synthetic.jsonl");

#[test]
#[ignore = "needs soft-RoCE devices: scripts/test-rxe runs it in a VM (KVXFER_REQUIRE_RXE=1, --include-ignored)"]
fn a_trace_window_replays_over_verbs_verified_on_two_sessions() {
    let Some(r) = rxe() else { return };
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
    run(&args).expect_code(0);
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
}
