//! `kvxfer replay --layout paged` through the real binary over loopback TCP: a window of the shipped trace moves
//! into blocks of the receiver's pool with every byte verified where the driver's block tables put it; a pool too
//! small for the stream while requests decode makes requests wait for blocks, in arrival order, and the output
//! says so; bad inputs are one line and exit 2.

mod common;

use common::*;
use serde_json::Value;

const TRACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/traces/mooncake-synthetic.jsonl");

/// A tiny standard-attention model: 2 layers × K and V of one head of 8 bf16 elements, 64 B per token, so a
/// window of the shipped trace is a few MiB.
fn tiny_model(dir: &TempDir) -> String {
    let path = dir.join("config.json");
    let config = r#"{"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 8,
        "torch_dtype": "bfloat16"}"#;
    std::fs::write(&path, config).unwrap();
    path.to_string_lossy().into_owned()
}

/// `n` requests of `input` tokens, `gap_ms` apart, each answering with `output` tokens.
fn trace_file(dir: &TempDir, n: u64, input: u64, output: u64, gap_ms: u64) -> String {
    let lines: Vec<String> = (0..n)
        .map(|i| format!(r#"{{"timestamp": {}, "input_length": {input}, "output_length": {output}}}"#, i * gap_ms))
        .collect();
    let path = dir.join("trace.jsonl");
    std::fs::write(&path, lines.join("\n")).unwrap();
    path.to_string_lossy().into_owned()
}

fn requests(r: &Value) -> &Vec<Value> {
    r["replay"]["loads"][0]["requests"].as_array().expect("replay.loads[0].requests")
}

#[test]
fn a_paged_trace_window_replays_verified_into_the_pool() {
    let dir = TempDir::new("replay-paged");
    let model = tiny_model(&dir);
    let (json, csv, md) = (dir.arg("r.json"), dir.arg("r.csv"), dir.arg("r.md"));
    let out = run(&[
        "replay",
        "--layout",
        "paged",
        "--model-config",
        &model,
        "--block-tokens",
        "256",
        "--trace",
        TRACE,
        "--window",
        "0s..10s",
        "--speed",
        "4",
        "--max-inflight",
        "2",
        "--verify",
        "--warmup-requests",
        "2",
        "--json",
        &json,
        "--csv",
        &csv,
        "--md",
        &md,
    ]);
    out.expect_code(0);
    assert!(out.stderr.contains("paged replay: a pool of"), "{}", out.stderr);
    let r = read_json(&dir.join("r.json"));
    assert_eq!(r["complete"], true);
    let pool = &r["replay"]["pool"];
    assert_eq!((pool["block_tokens"].as_u64(), pool["decode_ms_per_token"].as_f64()), (Some(256), Some(0.0)));
    let reqs = requests(&r);
    assert!(reqs.len() > 20, "the window holds requests");
    for q in reqs {
        assert_eq!(q["mismatched_bytes"], 0, "every request verified where its block table put it: {q}");
        let tokens = q["bytes"].as_u64().unwrap() / 64;
        assert_eq!(q["blocks"].as_u64(), Some(tokens.div_ceil(256)), "{q}");
        assert_eq!(q["pieces"], 1, "a paged request is one rep");
        assert!(num(q, "pool_wait_ms") >= 0.0 && num(q, "pool_wait_ms") <= num(q, "queue_ms") + 1e-6, "{q}");
    }
    let s = &r["replay"]["loads"][0]["summary"]["pool"];
    assert_eq!(s["blocks"], pool["blocks"]);
    assert!(s["high_water_blocks"].as_u64().unwrap() <= s["blocks"].as_u64().unwrap(), "{s}");
    let header = std::fs::read_to_string(dir.join("r.csv")).unwrap().lines().next().unwrap().to_string();
    assert!(header.ends_with(",pool_wait_ms,blocks"), "{header}");
    assert!(std::fs::read_to_string(dir.join("r.md")).unwrap().contains("Pool (paged)"));
    assert!(out.stdout.contains("pool: high-water"), "{}", out.stdout);
}

#[test]
fn pool_exhaustion_makes_requests_wait_in_order_and_says_so() {
    let dir = TempDir::new("replay-paged-wait");
    let model = tiny_model(&dir);
    // 12 requests of 100 tokens (7 blocks of 16), 10 ms apart, each holding its blocks 50 × 2 ms = 100 ms after
    // its last byte landed: a pool of 14 blocks holds two at once, so later requests wait for frees.
    let trace = trace_file(&dir, 12, 100, 50, 10);
    let json = dir.arg("r.json");
    let out = run(&[
        "replay",
        "--layout",
        "paged",
        "--model-config",
        &model,
        "--trace",
        &trace,
        "--pool-tokens",
        "224",
        "--decode-ms-per-token",
        "2",
        "--verify",
        "--warmup-requests",
        "1",
        "--json",
        &json,
    ]);
    out.expect_code(0);
    assert!(out.stdout.contains("pool: high-water 14 of 14 blocks (100%)"), "{}", out.stdout);
    let r = read_json(&dir.join("r.json"));
    let s = &r["replay"]["loads"][0]["summary"]["pool"];
    assert_eq!(s["high_water_blocks"], 14, "{s}");
    assert!(s["waited"].as_u64().unwrap() > 0 && num(&s["wait_ms"], "max") > 50.0, "{s}");
    assert!(out.stdout.contains(&format!("{} request(s) waited for blocks", s["waited"])), "{}", out.stdout);
    let reqs = requests(&r);
    assert_eq!(reqs.len(), 12);
    assert!(reqs.iter().any(|q| num(q, "pool_wait_ms") > 50.0), "some request waited for a decode to end");
    // Checked against the records alone: no request started while the blocks of those before it that were still
    // decoding left it too few, and requests got their blocks in arrival order.
    for (k, q) in reqs.iter().enumerate() {
        assert_eq!(q["mismatched_bytes"], 0, "{q}");
        let start = num(q, "start_ms");
        let held: u64 = reqs[..k]
            .iter()
            .filter(|o| num(o, "end_ms") + 100.0 > start + 1e-3)
            .map(|o| o["blocks"].as_u64().unwrap())
            .sum();
        assert!(held + 7 <= 14, "request {k} started at {start} ms with {held} blocks still held: {reqs:?}");
        if k > 0 {
            assert!(start >= num(&reqs[k - 1], "start_ms"), "blocks go in arrival order");
        }
    }
}

#[test]
fn an_arrival_model_with_output_lengths_holds_blocks_while_they_decode() {
    let dir = TempDir::new("replay-paged-output");
    let model = tiny_model(&dir);
    // As the trace above: 12 requests of 7 blocks, 10 ms apart, into 14 blocks; each answers with 50 tokens at 2
    // ms each, so it holds its blocks 100 ms after landing and later requests wait. Without output lengths the
    // same stream never waits (the blocks free at landing).
    let gen = ["--arrivals", "constant:100", "--requests", "12", "--prompt-tokens", "fixed:100"];
    let base = ["replay", "--layout", "paged", "--model-config", &model, "--pool-tokens", "224"];
    let paged = |extra: &[&str], json: &str| {
        let args: Vec<&str> =
            base.iter().chain(&gen).chain(extra).copied().chain(["--warmup-requests", "1", "--json", json]).collect();
        let out = run(&args);
        out.expect_code(0);
        read_json(std::path::Path::new(json))
    };
    let held = paged(&["--output-tokens", "fixed:50", "--decode-ms-per-token", "2", "--verify"], &dir.arg("a.json"));
    let s = &held["replay"]["loads"][0]["summary"]["pool"];
    assert_eq!(s["high_water_blocks"], 14, "{s}");
    assert!(s["waited"].as_u64().unwrap() > 0 && num(&s["wait_ms"], "max") > 50.0, "{s}");
    assert_eq!(held["replay"]["workload"]["output_tokens"], "fixed:50");
    // The prediction runs the same pool: the waits for frees it foresees are most of the measured latency.
    let predicted = &held["replay"]["pooled"][0]["predicted"];
    assert_eq!(predicted["basis"], "ceiling and pool", "{predicted}");
    assert!(num(predicted, "p99_ratio") > 0.5, "{predicted}");
    assert!(requests(&held).iter().all(|q| q["mismatched_bytes"] == 0));
    let free = paged(&[], &dir.arg("b.json"));
    assert_eq!(free["replay"]["loads"][0]["summary"]["pool"]["waited"], 0, "blocks free at landing");
    assert!(free["replay"]["workload"]["output_tokens"].is_null());
}

#[test]
fn bad_paged_replays_are_refused_in_one_line() {
    let dir = TempDir::new("replay-paged-bad");
    let model = tiny_model(&dir);
    let trace = trace_file(&dir, 3, 100, 5, 10);
    let base = ["replay", "--layout", "paged", "--model-config", &model, "--json", &dir.arg("r.json")];
    let arrivals = ["--arrivals", "constant:10", "--prompt-tokens", "fixed:100", "--requests", "3"];
    let prompt_trace = format!("trace:{trace}");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--trace", &trace, "--pool-tokens", "50"],
            "--pool-tokens 50: smaller than the transfer of 100 tokens; give at least 100",
        ),
        (vec!["--trace", &trace, "--decode-ms-per-token", "-1"], "--decode-ms-per-token -1: give the ms"),
        (vec!["--trace", &trace, "--decode-ms-per-token", "NaN"], "--decode-ms-per-token NaN: give the ms"),
        (
            arrivals.iter().copied().chain(["--decode-ms-per-token", "1"]).collect(),
            "no output lengths; give --output-tokens",
        ),
        (arrivals.iter().copied().chain(["--output-tokens", "fixed:9"]).collect(), "without --decode-ms-per-token"),
        (
            arrivals.iter().copied().chain(["--output-tokens", "uniform:9..3", "--decode-ms-per-token", "1"]).collect(),
            "output tokens \"uniform:9..3\": uniform:9..3 is empty",
        ),
        (
            vec!["--arrivals", "constant:10", "--prompt-tokens", &prompt_trace, "--output-tokens", "fixed:9"],
            "the trace's rows give each request's output length",
        ),
        (vec!["--trace", &trace, "--output-tokens", "fixed:9"], "--output-tokens"),
        (vec!["--trace", &trace, "--layerwise", "--prefill-tokens-per-s", "1000"], "--layerwise moves contiguous"),
        (vec!["--trace", &trace, "--region", "1MiB"], "--region applies to the contiguous layout"),
    ];
    for (extra, want) in cases {
        let args: Vec<&str> = base.iter().copied().chain(extra).collect();
        let out = run(&args);
        out.expect_code(2);
        assert!(out.one_error().contains(want), "{args:?}: {}", out.stderr);
        assert!(!dir.join("r.json").exists(), "{args:?} wrote a results file");
    }
    let out = run(&["replay", "--trace", &trace, "--kv-bytes-per-token", "64", "--decode-ms-per-token", "1"]);
    out.expect_code(2);
    assert!(out.one_error().contains("--decode-ms-per-token applies to --layout paged"), "{}", out.stderr);
    let contiguous =
        ["replay", "--kv-bytes-per-token", "64", "--arrivals", "constant:10", "--prompt-tokens", "fixed:9"];
    let out = run(&contiguous.iter().copied().chain(["--output-tokens", "fixed:9"]).collect::<Vec<_>>());
    out.expect_code(2);
    assert!(out.one_error().contains("--output-tokens applies to --layout paged"), "{}", out.stderr);
}

#[test]
fn a_receiver_refuses_block_slots_that_do_not_fit_naming_the_sender() {
    let serve = Serve::start(&["--once"]);
    let (run, cfg) = common::paged::four_block_pool();
    let host = kvxfer::mem::MemKind::Host;
    let timeouts = kvxfer::control::Timeouts { connect: run.connect_timeout, io: run.io_timeout };
    let device = kvxfer::transport::DeviceChoice::default();
    let (mut session, _) =
        kvxfer::commands::send::connect(&serve.addr, "", timeouts, &device, &cfg, host, false).expect("a session");
    // 32 tokens are 2 blocks of 16: the same destination slot twice is refused at RepStart, before a byte moves.
    let err = format!("{:#}", session.arm_paged(32, (&[0, 1], &[3, 3]), 0).err().expect("refused"));
    assert!(err.contains("block slot 3 is given twice") && err.contains("the sender at 127.0.0.1:"), "{err}");
    let out = serve.proc.finish();
    assert!(out.stderr.contains("block slot 3 is given twice"), "{}", out.stderr);
    out.no_panic();
}

#[test]
fn a_misplaced_piece_shows_in_the_verified_requests_and_fails_the_run() {
    let dir = TempDir::new("replay-paged-swap");
    let model = tiny_model(&dir);
    let trace = trace_file(&dir, 3, 100, 5, 10);
    let json = dir.arg("r.json");
    // The sender swaps two pieces' destinations: --verify, checking where the block tables say, must see it.
    let out = run(&[
        "replay",
        "--layout",
        "paged",
        "--model-config",
        &model,
        "--trace",
        &trace,
        "--verify",
        "--test-fault-swap-dests",
        "--warmup-requests",
        "0",
        "--ceiling",
        "1",
        "--json",
        &json,
    ]);
    out.expect_code(1);
    assert!(
        out.one_error().contains("verification failed") && out.one_error().contains("in 3 request(s)"),
        "{}",
        out.stderr
    );
    let r = read_json(&dir.join("r.json"));
    assert_eq!(r["complete"], false);
    assert!(r["error"].as_str().unwrap().contains("verification failed"), "{}", r["error"]);
    let reqs = requests(&r);
    assert_eq!(reqs.len(), 3);
    assert!(reqs.iter().all(|q| q["mismatched_bytes"].as_u64().unwrap() > 0), "{reqs:?}");
}
