//! `kvxfer replay` through the real binary over loopback TCP: a window of the shipped trace replays with every
//! byte verified and its requests as the trace has them; seeded arrival models repeat byte for byte; prefix-cache
//! hits equal an independent count; a receiver stopped for 500 ms delays every request due in the stall, not just
//! the one moving (latency counts from the scheduled arrival); bad inputs are one line and exit 2, writing nothing.
//! Layer-wise: no layer moves before prefill computed it, the reported latency counts from the prefill's end, and
//! with a prefill too fast to matter it is the arrival-based latency again.

mod common;

use common::*;
use std::collections::{HashMap, VecDeque};
use std::time::Duration;

const TRACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/traces/mooncake-synthetic.jsonl");

/// The shipped trace's lines, parsed here independently of kvxfer: (timestamp ms, input tokens, hash_ids).
fn trace_rows() -> Vec<(u64, u64, Vec<u64>)> {
    let text = std::fs::read_to_string(TRACE).expect("the shipped trace is in the repository");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let ids = v["hash_ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
            (v["timestamp"].as_u64().unwrap(), v["input_length"].as_u64().unwrap(), ids)
        })
        .collect()
}

fn load_requests(r: &serde_json::Value, k: usize) -> &Vec<serde_json::Value> {
    r["replay"]["loads"][k]["requests"].as_array().expect("replay.loads[k].requests")
}

#[test]
fn a_trace_window_replays_verified_with_its_requests_and_files() {
    let dir = TempDir::new("replay-trace");
    let out = run(&[
        "replay",
        "--trace",
        TRACE,
        "--window",
        "0s..15s",
        "--kv-bytes-per-token",
        "256",
        "--speeds",
        "4,8",
        "--verify",
        "--warmup-requests",
        "2",
        "--json",
        &dir.arg("r.json"),
        "--csv",
        &dir.arg("r.csv"),
        "--md",
        &dir.arg("r.md"),
    ]);
    out.expect_code(0);
    let r = read_json(&dir.join("r.json"));
    assert_eq!(r["config"]["mode"], "replay");
    assert_eq!(r["complete"], true);
    let rows = trace_rows();
    let expected: Vec<(u64, u64)> =
        rows.iter().enumerate().filter(|(_, row)| row.0 < 15_000).map(|(i, row)| (i as u64, row.1 * 256)).collect();
    assert!(expected.len() > 20, "the window holds requests");
    let loads = r["replay"]["loads"].as_array().unwrap();
    assert_eq!(loads.iter().map(|l| l["load"].as_f64().unwrap()).collect::<Vec<_>>(), [4.0, 8.0]);
    for (k, speed) in [(0, 4.0), (1, 8.0)] {
        let reqs = load_requests(&r, k);
        let got: Vec<(u64, u64)> =
            reqs.iter().map(|q| (q["id"].as_u64().unwrap(), q["bytes"].as_u64().unwrap())).collect();
        assert_eq!(got, expected, "every request of the window, in order, with its input's bytes");
        for (q, (i, _)) in reqs.iter().zip(&expected) {
            assert_eq!(q["mismatched_bytes"], 0, "request {i} verified");
            let at = num(q, "scheduled_ms");
            assert!((at - rows[*i as usize].0 as f64 / speed).abs() < 1e-6, "scheduled at trace time ÷ speed");
            let (start, end, lat) = (num(q, "start_ms"), num(q, "end_ms"), num(q, "latency_ms"));
            assert!((lat - (end - at)).abs() < 1e-6 && start >= at - 1e-9 && end >= start, "{q}");
            assert!(num(q, "queue_ms") >= 0.0 && num(q, "service_ms") > 0.0, "{q}");
        }
        let s = &loads[k]["summary"];
        assert_eq!(s["requests"].as_u64().unwrap(), expected.len() as u64);
        let l = &s["latency_ms"];
        assert!(num(l, "p50") <= num(l, "p99") && num(l, "p99") <= num(l, "max") + 1e-9, "{l}");
    }
    let pooled = r["replay"]["pooled"].as_array().unwrap();
    assert_eq!(pooled.len(), 2);
    for p in pooled {
        let pred = &p["predicted"];
        assert_eq!(pred["basis"], "ceiling", "{p}");
        let ratio = num(pred, "p50_ms") / num(&p["summary"]["latency_ms"], "p50");
        assert!((ratio - num(pred, "p50_ratio")).abs() < 1e-9 && ratio > 0.0, "{pred}");
    }
    let csv = std::fs::read_to_string(dir.join("r.csv")).unwrap();
    assert!(csv.starts_with("load,repeat,id,scheduled_ms,"), "{csv}");
    assert_eq!(csv.lines().count(), 1 + 2 * expected.len());
    let md = std::fs::read_to_string(dir.join("r.md")).unwrap();
    assert!(md.contains("| speed") && md.contains("Knee:") && md.contains("÷ measured: speed 4: p50"), "{md}");
}

/// (id, scheduled_ms, bytes) of every request of the first load.
fn schedule_of(json: &std::path::Path) -> Vec<(u64, f64, u64)> {
    let r = read_json(json);
    load_requests(&r, 0)
        .iter()
        .map(|q| (q["id"].as_u64().unwrap(), num(q, "scheduled_ms"), q["bytes"].as_u64().unwrap()))
        .collect()
}

#[test]
fn a_seeded_arrival_model_repeats_its_schedule_exactly() {
    let dir = TempDir::new("replay-seed");
    let go = |name: &str, seed: &str| {
        run(&[
            "replay",
            "--arrivals",
            "poisson:400",
            "--prompt-tokens",
            "lognormal:16,1",
            "--requests",
            "60",
            "--kv-bytes-per-token",
            "1024",
            "--seed",
            seed,
            "--warmup-requests",
            "0",
            "--json",
            &dir.arg(name),
        ])
        .expect_code(0);
        schedule_of(&dir.join(name))
    };
    let (a, b, c) = (go("a.json", "7"), go("b.json", "7"), go("c.json", "8"));
    assert_eq!(a.len(), 60);
    assert_eq!(a, b, "the same seed gives the same arrivals and lengths");
    assert_ne!(a, c, "another seed gives another stream");
    assert!(a.windows(2).all(|w| w[0].1 <= w[1].1), "arrivals in order");
}

/// The decode side's cached tokens per request, computed here as the issue defines them: the longest leading run
/// of the request's hash_ids in an LRU of `capacity` blocks, × 512, capped at the input; then all its ids enter.
fn naive_cached(rows: &[(u64, u64, Vec<u64>)], capacity: usize) -> Vec<u64> {
    let mut lru: VecDeque<u64> = VecDeque::new();
    rows.iter()
        .map(|(_, input, ids)| {
            let lead = ids.iter().take_while(|id| lru.contains(id)).count() as u64;
            for id in ids {
                if let Some(p) = lru.iter().position(|x| x == id) {
                    lru.remove(p);
                }
                lru.push_back(*id);
                if lru.len() > capacity {
                    lru.pop_front();
                }
            }
            (lead * 512).min(*input)
        })
        .collect()
}

#[test]
fn prefix_cache_hits_equal_an_independent_count() {
    let dir = TempDir::new("replay-prefix");
    let rows: Vec<_> = trace_rows().into_iter().filter(|r| r.0 < 30_000).collect();
    for (capacity, flag) in [(usize::MAX, "unlimited"), (200, "200")] {
        let name = format!("p{flag}.json");
        run(&[
            "replay",
            "--trace",
            TRACE,
            "--window",
            "0s..30s",
            "--speed",
            "16",
            "--kv-bytes-per-token",
            "64",
            "--prefix-cache",
            flag,
            "--warmup-requests",
            "0",
            "--json",
            &dir.arg(&name),
        ])
        .expect_code(0);
        let r = read_json(&dir.join(&name));
        let cached = naive_cached(&rows, capacity);
        assert!(cached.iter().any(|&c| c > 0), "the window reuses prefixes");
        let got: HashMap<u64, (u64, u64)> = load_requests(&r, 0)
            .iter()
            .map(|q| (q["id"].as_u64().unwrap(), (q["cached_bytes"].as_u64().unwrap(), q["bytes"].as_u64().unwrap())))
            .collect();
        for (i, (row, c)) in rows.iter().zip(&cached).enumerate() {
            assert_eq!(got[&(i as u64)], (c * 64, (row.1 - c) * 64), "request {i} with --prefix-cache {flag}");
        }
        let saved: u64 = cached.iter().sum::<u64>() * 64;
        assert_eq!(r["replay"]["workload"]["prefix_cache"]["cached_bytes"], saved);
    }
}

#[test]
fn a_stalled_receiver_delays_every_request_due_during_the_stall() {
    let token = "replay-stall-token-0123456789";
    let serve = Serve::start(&["--token", token]);
    let dir = TempDir::new("replay-stall");
    let replay = Proc::spawn(&[
        "replay",
        "--peer",
        &serve.addr,
        "--token",
        token,
        "--arrivals",
        "constant:200",
        "--prompt-tokens",
        "fixed:4",
        "--requests",
        "400",
        "--kv-bytes-per-token",
        "1024",
        "--warmup-requests",
        "1",
        "--json",
        &dir.arg("s.json"),
    ]);
    // A tenth of the load has moved once its first progress line is printed: stop the receiver then.
    assert!(replay.stderr.wait_for("step 40/400", Duration::from_secs(30)), "{}", replay.stderr.text());
    let pid = nix::unistd::Pid::from_raw(serve.proc.child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    // While the receiver is stopped the replay cannot finish another tenth: waiting 500 ms for that line is the
    // stall, and checks that it held.
    let moved = replay.stderr.wait_for("step 80/400", Duration::from_millis(500));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    assert!(!moved, "the replay moved on while its receiver was stopped:\n{}", replay.stderr.text());
    replay.finish().expect_code(0);
    let r = read_json(&dir.join("s.json"));
    let reqs = load_requests(&r, 0);
    assert_eq!(reqs.len(), 400);
    // At 200/s, ~100 requests are due during a 500 ms stall; each waits for its end. Counted from when kvxfer got
    // round to them, only the one in flight would show it.
    let delayed = reqs.iter().filter(|q| num(q, "latency_ms") > 200.0).count();
    assert!(delayed >= 50, "{delayed} requests over 200 ms; the stall should delay ~100");
    let queued = reqs.iter().filter(|q| num(q, "queue_ms") > 200.0).count();
    assert!(queued >= 40, "the delay shows as queue wait: {queued}");
}

#[test]
fn bad_workloads_are_refused_in_one_line_and_write_nothing() {
    let dir = TempDir::new("replay-bad");
    let write = |name: &str, bytes: &[u8]| {
        std::fs::write(dir.join(name), bytes).unwrap();
        dir.arg(name)
    };
    let good = r#"{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}"#;
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["--trace".into(), write("empty.jsonl", b"")], "empty"),
        (vec!["--trace".into(), write("bad.jsonl", format!("{good}\n{{not json\n").as_bytes())], "bad.jsonl:2"),
        (vec!["--trace".into(), write("array.jsonl", format!("[{good}]").as_bytes())], "array"),
        (vec!["--trace".into(), write("gz.jsonl", &[0x1f, 0x8b, 8, 0, 0, 0])], "gzip"),
        (
            vec![
                "--trace".into(),
                write(
                    "back.jsonl",
                    format!("{}\n{good}\n", good.replace("\"timestamp\": 0", "\"timestamp\": 5")).as_bytes(),
                ),
            ],
            "--sort",
        ),
        (vec!["--trace".into(), write("ids.jsonl", good.replace("[1, 2]", "[1]").as_bytes())], "hash_ids"),
        (vec!["--speed".into(), "0".into()], "--speed"),
        (vec!["--speeds".into(), "1,NaN".into()], "--speeds"),
        (vec!["--requests".into(), "0".into()], "--requests"),
        (vec!["--region".into(), "1KiB".into()], "--region"),
        (vec!["--window".into(), "9999s..10000s".into()], "window"),
        (vec!["--window".into(), "20s..10s".into()], "window"),
        (vec!["--arrivals".into(), "poisson:0".into(), "--prompt-tokens".into(), "fixed:8".into()], "rate"),
        (vec!["--arrivals".into(), "gamma:2,0".into(), "--prompt-tokens".into(), "fixed:8".into()], "CV"),
        (vec!["--arrivals".into(), "poisson:2".into(), "--prompt-tokens".into(), "uniform:9..3".into()], "uniform"),
        (
            vec![
                "--arrivals".into(),
                "poisson:2".into(),
                "--prompt-tokens".into(),
                "fixed:8".into(),
                "--prefix-cache".into(),
                "10".into(),
            ],
            "--prefix-cache",
        ),
        (vec!["--arrivals".into(), "poisson:2".into()], "--prompt-tokens"),
    ];
    let mut wrong = Vec::new();
    for (args, needle) in cases {
        let json = dir.arg("never.json");
        let mut argv: Vec<&str> = vec!["replay", "--json", &json];
        argv.extend(args.iter().map(String::as_str));
        let out = run(&argv);
        out.expect_code(2);
        let line = out.one_error();
        if !line.to_lowercase().contains(&needle.to_lowercase()) {
            wrong.push(format!("{argv:?} does not name {needle}: {line}"));
        }
        assert!(!dir.join("never.json").exists(), "{argv:?} wrote a results file");
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn crlf_traces_and_repeated_timestamps_are_accepted() {
    let dir = TempDir::new("replay-crlf");
    let rows = [
        r#"{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}"#,
        r#"{"timestamp": 0, "input_length": 100, "output_length": 1, "hash_ids": [3]}"#,
        r#"{"timestamp": 10, "input_length": 512, "output_length": 1, "hash_ids": [1]}"#,
    ];
    std::fs::write(dir.join("t.jsonl"), rows.join("\r\n") + "\r\n").unwrap();
    run(&[
        "replay",
        "--trace",
        &dir.arg("t.jsonl"),
        "--kv-bytes-per-token",
        "128",
        "--warmup-requests",
        "0",
        "--json",
        &dir.arg("t.json"),
    ])
    .expect_code(0);
    let got = schedule_of(&dir.join("t.json"));
    assert_eq!(got, [(0, 0.0, 600 * 128), (1, 0.0, 100 * 128), (2, 10.0, 512 * 128)]);
}

#[test]
fn two_sessions_serve_one_queue_and_both_move_requests() {
    let dir = TempDir::new("replay-lanes");
    run(&[
        "replay",
        "--arrivals",
        "constant:400",
        "--prompt-tokens",
        "fixed:64",
        "--requests",
        "200",
        "--kv-bytes-per-token",
        "4096",
        "--max-inflight",
        "2",
        "--verify",
        "--json",
        &dir.arg("l.json"),
    ])
    .expect_code(0);
    let r = read_json(&dir.join("l.json"));
    let reqs = load_requests(&r, 0);
    assert_eq!(reqs.len(), 200);
    assert!(reqs.iter().all(|q| q["mismatched_bytes"] == 0), "every request verified");
    let lane = |n: u64| reqs.iter().filter(|q| q["lane"] == n).count();
    assert!(lane(0) > 0 && lane(1) > 0 && lane(0) + lane(1) == 200, "{} + {}", lane(0), lane(1));
    assert_eq!(r["replay"]["max_inflight"], 2);
}

#[test]
fn ctrl_c_stops_at_the_request_in_flight_and_keeps_what_ran() {
    let dir = TempDir::new("replay-int");
    let replay = Proc::spawn(&[
        "replay",
        "--arrivals",
        "constant:100",
        "--prompt-tokens",
        "fixed:4",
        "--requests",
        "3000",
        "--kv-bytes-per-token",
        "1024",
        "--json",
        &dir.arg("i.json"),
    ]);
    // A tenth of the stream has run once its first progress line after the load's start is printed.
    assert!(replay.stderr.wait_for("step 300/3000", Duration::from_secs(60)), "{}", replay.stderr.text());
    let pid = nix::unistd::Pid::from_raw(replay.child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let out = replay.finish();
    out.expect_code(130);
    let r = read_json(&dir.join("i.json"));
    assert_eq!(r["complete"], false);
    let load = &r["replay"]["loads"][0];
    assert_eq!(load["summary"]["cutoff"], "interrupted", "{}", load["summary"]);
    let n = load_requests(&r, 0).len();
    assert!((300..3000).contains(&n), "{n} requests kept");
    assert_eq!(load["summary"]["not_started"].as_u64().unwrap() as usize, 3000 - n);
}

/// A layer-wise replay of `requests` arrivals of 16 tokens (llama-3.1-8b: 32 layers, 128 KiB of KV per token)
/// with prefill at `tokens_per_s`; returns its results.
fn layerwise_replay(dir: &TempDir, name: &str, rate: &str, tokens_per_s: &str, more: &[&str]) -> serde_json::Value {
    let json = dir.arg(&format!("{name}.json"));
    let mut args = vec![
        "replay",
        "--arrivals",
        rate,
        "--prompt-tokens",
        "fixed:16",
        "--requests",
        "6",
        "--model",
        "llama-3.1-8b",
        "--warmup-requests",
        "1",
        "--json",
        &json,
    ];
    if !tokens_per_s.is_empty() {
        args.extend(["--layerwise", "--prefill-tokens-per-s", tokens_per_s]);
    }
    args.extend(more);
    run(&args).expect_code(0);
    read_json(&dir.join(&format!("{name}.json")))
}

#[test]
fn a_layerwise_replay_moves_no_layer_before_prefill_computed_it_and_reports_the_tail_after_prefill() {
    let dir = TempDir::new("replay-layerwise");
    // 16 tokens at 40 tokens/s: 400 ms of prefill per request, a layer every 12.5 ms, 64 KiB each.
    let (csv, md, fig) = (dir.arg("l.csv"), dir.arg("l.md"), dir.arg("fig"));
    let r = layerwise_replay(&dir, "l", "constant:2", "40", &["--csv", &csv, "--md", &md, "--fig", &fig]);
    let replay = &r["replay"];
    assert_eq!(replay["latency"], "prefill_end_to_landed");
    assert_eq!(replay["layerwise"]["layers"], 32);
    assert_eq!(num(&replay["layerwise"], "prefill_tokens_per_s"), 40.0);
    let reqs = load_requests(&r, 0);
    assert_eq!(reqs.len(), 6);
    let (prefill, per_layer) = (400.0, 400.0 / 32.0);
    let mut after = Vec::new();
    for q in reqs {
        let (at, start, end) = (num(q, "scheduled_ms"), num(q, "start_ms"), num(q, "end_ms"));
        let pieces = q["pieces"].as_u64().unwrap();
        assert!((1..=32).contains(&pieces), "at most a rep per layer: {q}");
        assert!(start >= at + per_layer - 1e-6, "its first byte moved before its first layer was computed: {q}");
        assert!((num(q, "prefill_end_ms") - (at + prefill)).abs() < 1e-6, "{q}");
        assert!(end >= at + prefill - 1e-6, "its last layer cannot land before the prefill ends: {q}");
        assert!((num(q, "after_prefill_ms") - (end - at - prefill)).abs() < 1e-6, "{q}");
        assert!((num(q, "latency_ms") - (end - at)).abs() < 1e-6, "latency_ms still counts from arrival: {q}");
        after.push(num(q, "after_prefill_ms"));
    }
    // A 64 KiB rep takes well under the 12.5 ms between layers: a session that keeps up moves each layer alone.
    assert!(reqs.iter().any(|q| q["pieces"] == 32), "no request moved layer by layer");
    let s = &replay["loads"][0]["summary"];
    let (reported, arrival) = (num(&s["latency_ms"], "p50"), num(&s["arrival_latency_ms"], "p50"));
    assert!(arrival >= prefill, "{s}");
    // The transfer keeps up with a 400 ms prefill: only the last 64 KiB layer is left when it ends.
    assert!(reported < arrival / 4.0, "after prefill {reported} ms is not far below {arrival} ms from arrival");
    after.sort_by(f64::total_cmp);
    assert!((reported - after[2]).abs() < 0.01 * after[2].max(1.0) + 0.01, "{reported} vs {after:?}");
    assert!(replay["pooled"][0].get("predicted").is_none(), "no prefill-free prediction beside it");
    let csv = std::fs::read_to_string(dir.join("l.csv")).unwrap();
    let header = csv.lines().next().unwrap();
    assert!(header.ends_with(",prefill_end_ms,after_prefill_ms"), "{header}");
    assert_eq!(csv.lines().count(), 7);
    let md = std::fs::read_to_string(dir.join("l.md")).unwrap();
    assert!(md.contains("prefill end → last byte landed") && md.contains("latency after prefill p50 ms"), "{md}");
    for svg in ["replay-latency-cdf.svg", "replay-latency-vs-load.svg", "replay-timeline-2.svg"] {
        let text = std::fs::read_to_string(dir.join("fig").join(svg)).unwrap();
        assert!(text.contains("latency after prefill"), "{svg} does not say which latency it shows");
    }
}

#[test]
fn a_layerwise_replay_with_an_instant_prefill_reports_the_arrival_latency() {
    let dir = TempDir::new("replay-layerwise-fast");
    let plain = layerwise_replay(&dir, "plain", "constant:20", "", &[]);
    let fast = layerwise_replay(&dir, "fast", "constant:20", "1e12", &[]);
    let (p, f) = (load_requests(&plain, 0), load_requests(&fast, 0));
    let key = |q: &serde_json::Value| (q["id"].as_u64(), q["bytes"].as_u64(), q["scheduled_ms"].as_f64());
    assert_eq!(p.iter().map(key).collect::<Vec<_>>(), f.iter().map(key).collect::<Vec<_>>(), "the same stream");
    assert_eq!(plain["replay"]["latency"], "arrival_to_landed");
    assert!(plain["replay"].get("layerwise").is_none() && p[0].get("after_prefill_ms").is_none());
    for q in f {
        let at = num(q, "scheduled_ms");
        assert!((num(q, "prefill_end_ms") - at).abs() < 1e-6, "{q}");
        assert!((num(q, "after_prefill_ms") - num(q, "latency_ms")).abs() < 1e-3, "{q}");
        // Every layer is computed at once: they move together, in one rep, not one round trip per layer.
        assert!(num(q, "start_ms") >= at && q["pieces"] == 1, "{q}");
    }
    let s = &fast["replay"]["loads"][0]["summary"];
    for k in ["p50", "p99", "max"] {
        let (rep, arr) = (num(&s["latency_ms"], k), num(&s["arrival_latency_ms"], k));
        assert!((rep - arr).abs() <= 0.01 * arr + 0.01, "{k}: {rep} after prefill vs {arr} from arrival");
    }
}

#[test]
fn bad_layerwise_flags_are_refused_in_one_line() {
    let dir = TempDir::new("replay-layerwise-bad");
    let base = ["replay", "--arrivals", "poisson:2", "--prompt-tokens", "fixed:8", "--requests", "2"];
    let cases: [(&[&str], &str); 7] = [
        (&["--layerwise"], "--prefill-tokens-per-s"),
        (&["--prefill-tokens-per-s", "100"], "--layerwise"),
        (&["--layerwise", "--prefill-tokens-per-s", "0"], "--prefill-tokens-per-s"),
        (&["--layerwise", "--prefill-tokens-per-s=-5"], "--prefill-tokens-per-s"),
        (&["--layerwise", "--prefill-tokens-per-s", "NaN"], "--prefill-tokens-per-s"),
        (&["--layerwise", "--prefill-tokens-per-s", "inf"], "--prefill-tokens-per-s"),
        (&["--layerwise", "--prefill-tokens-per-s", "100", "--kv-bytes-per-token", "64"], "--model"),
    ];
    let json = dir.arg("never.json");
    for (more, needle) in cases {
        let argv: Vec<&str> = base.iter().copied().chain(["--json", &json]).chain(more.iter().copied()).collect();
        let out = run(&argv);
        out.expect_code(2);
        let line = out.one_error();
        assert!(line.contains(needle), "{argv:?} does not name {needle}: {line}");
        assert!(!dir.join("never.json").exists(), "{argv:?} wrote a results file");
    }
}

#[test]
fn sessions_whose_regions_cannot_fit_in_memory_are_refused_before_anything_moves() {
    let dir = TempDir::new("replay-memory");
    let json = dir.arg("never.json");
    // The built-in trace's first 60 s: its largest request is 7.6 GiB; 64 sessions × 2 ends of that fit nowhere.
    let out = run(&["replay", "--max-inflight", "64", "--region", "8GiB", "--json", &json]);
    out.expect_code(2);
    let line = out.one_error();
    assert!(line.contains("--region") && line.contains("--max-inflight") && line.contains("128 buffer"), "{line}");
    assert!(!dir.join("never.json").exists(), "a refused replay wrote a results file");
}
