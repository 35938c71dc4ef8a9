//! `kvxfer latency` through the real binary over loopback TCP: its results file holds each size's quantiles in
//! order and as many samples as asked, no exchange waits on Nagle's algorithm, it measures against a `kvxfer serve`
//! as well as on its own, and bad inputs are refused in one line with exit 2.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The `latency_us` quantiles of a case, in the order min, p50, p90, p99, p999, max.
fn quantiles(case: &serde_json::Value) -> Vec<f64> {
    let l = &case["latency_us"];
    ["min", "p50", "p90", "p99", "p999", "max"]
        .iter()
        .map(|k| l[k].as_f64().unwrap_or_else(|| panic!("latency_us.{k} missing in {l}")))
        .collect()
}

#[test]
fn latency_over_tcp_writes_each_sizes_quantiles_in_order() {
    let dir = TempDir::new("latency");
    let json = dir.join("lat.json");
    let out = run(&[
        "latency",
        "--sizes",
        "8,4KiB,64KiB",
        "--iters",
        "300",
        "--warmup-iters",
        "20",
        "--json",
        &dir.arg("lat.json"),
    ]);
    out.expect_code(0);
    let r = read_json(&json);
    assert_eq!(r["config"]["mode"], "latency");
    assert_eq!(r["config"]["transport"], "tcp");
    assert_eq!(r["config"]["transport_detail"]["sender"]["nodelay"], true);
    assert_eq!(r["complete"], true);
    let cases = r["cases"].as_array().expect("cases");
    let sizes: Vec<u64> = cases.iter().map(|c| c["size_bytes"].as_u64().unwrap()).collect();
    assert_eq!(sizes, [8, 4096, 65536]);
    for c in cases {
        assert_eq!(c["iters"], 300);
        assert_eq!(c["n"], 300);
        assert_eq!(c["reps"].as_array().map(Vec::len), Some(300));
        let q = quantiles(c);
        assert!(q[1] > 0.0, "p50 is positive: {q:?}");
        assert!(q.windows(2).all(|w| w[0] <= w[1]), "min ≤ p50 ≤ p90 ≤ p99 ≤ p99.9 ≤ max: {q:?}");
    }
    // One row per size on stdout.
    let rows = out.stdout.lines().filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit())).count();
    assert_eq!(rows, 3, "{}", out.stdout);
}

/// Without TCP_NODELAY a small answer can wait for the peer's delayed ACK: ~40 ms on Linux. A p99 at half that or
/// less shows that no more than the odd exchange waited so (a stall detector with a wide margin, not a speed test:
/// loopback's p99 is tens of µs).
#[test]
fn small_messages_do_not_wait_for_delayed_acks() {
    for extra in [&[][..], &["--busy-poll"][..]] {
        let mut args = vec!["latency", "--sizes", "8", "--iters", "200", "--warmup-iters", "10"];
        args.extend_from_slice(extra);
        let dir = TempDir::new("latency-nagle");
        let json = dir.arg("lat.json");
        args.extend_from_slice(&["--json", &json]);
        run(&args).expect_code(0);
        let r = read_json(&dir.join("lat.json"));
        let wait = if extra.is_empty() { "blocking" } else { "busy-poll" };
        assert_eq!(r["config"]["transport_detail"]["sender"]["wait"], wait);
        let p99 = r["cases"][0]["latency_us"]["p99"].as_f64().unwrap();
        assert!(p99 < 20_000.0, "{wait}: p99 of 8 B is {p99} µs, near the 40 ms of a delayed ACK");
    }
}

#[test]
fn latency_measures_against_a_serve_as_well() {
    let serve = Serve::start(&["--token", "latency-test-token-0123"]);
    let dir = TempDir::new("latency-peer");
    let out = run(&[
        "latency",
        "--peer",
        &serve.addr,
        "--token",
        "latency-test-token-0123",
        "--sizes",
        "8..64",
        "--iters",
        "50",
        "--json",
        &dir.arg("lat.json"),
    ]);
    out.expect_code(0);
    let r = read_json(&dir.join("lat.json"));
    assert_eq!(r["config"]["role"], "send");
    let sizes: Vec<u64> = r["cases"].as_array().unwrap().iter().map(|c| c["size_bytes"].as_u64().unwrap()).collect();
    assert_eq!(sizes, [8, 16, 32, 64], "8..64 doubles");
    serve.wait_idle();
}

#[test]
fn bad_latency_inputs_are_one_line_and_exit_2() {
    for (args, says) in [
        (&["latency", "--sizes", "0"][..], "zero"),
        (&["latency", "--sizes", "8,0"][..], "zero"),
        (&["latency", "--iters", "0"][..], "--iters 0"),
        (&["latency", "--sizes", "8,2GiB"][..], "at most 1 GiB, not 2 GiB"),
        (&["latency", "--transport", "mooncake"][..], "mooncake has no ping-pong"),
        (&["latency", "--inline", "64"][..], "--inline"),
        (&["latency", "--tclass", "106"][..], "--tclass"),
        (&["latency", "--transport", "verbs", "--busy-poll"][..], "--busy-poll"),
        (&["latency", "--peer", "127.0.0.1:1", "--peer-device", "rxeA"][..], "--peer-device"),
        (&["latency", "--dst", "gpu:0"][..], "--dst gpu:0: latency over tcp answers from host memory"),
        (&["latency", "--peer", "127.0.0.1:1", "--dst", "gpu:0"][..], "with --peer, give serve its --mem"),
        (&["latency", "--transport", "cuda", "--busy-poll"][..], "--busy-poll"),
        (&["latency", "--transport", "cuda", "--inline", "64"][..], "--inline"),
        (&["latency", "--write-with-imm"][..], "--write-with-imm"),
        (&["latency", "--transport", "cuda", "--write-with-imm"][..], "--write-with-imm"),
        (&["latency", "--src", "gpu:0"][..], "--src gpu:0: latency over tcp sends from host memory"),
        (
            &["latency", "--transport", "verbs", "--src", "pinned"][..],
            "--src pinned: latency over verbs sends from host",
        ),
        (&["latency", "--transport", "cuda", "--src", "pinned"][..], "--src pinned: latency over cuda sends from host"),
        (&["latency", "--transport", "cuda", "--src", "gpu:0", "--peer", "127.0.0.1:1"][..], "leave out --peer"),
    ] {
        let out = run(args);
        out.expect_code(2);
        let line = out.one_error();
        assert!(line.contains(says), "{args:?}: {line}");
        assert!(out.stderr.trim().lines().count() == 1, "{args:?}: one line, got:\n{}", out.stderr);
    }
}

/// The CPUs a process or one of its threads may run on, as /proc writes them (`0-3`); None once it is gone.
fn cpus_allowed(status: &Path) -> Option<String> {
    let text = std::fs::read_to_string(status).ok()?;
    text.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).map(|l| l.trim().to_string())
}

/// Left to the scheduler, the two threads of an in-process ping-pong often share a core and hand each message over
/// in a context switch, which a run measures or not by chance. The pinger's thread runs on the last of the process's
/// CPUs and the receiver's on the others, while the run goes on, and the results say so; a process allowed one CPU
/// keeps both there and records nothing.
#[test]
fn the_in_process_ends_run_on_different_cpus_and_the_results_say_which() {
    let mine = cpus_allowed(Path::new("/proc/self/status")).expect("this test's CPUs");
    let dir = TempDir::new("latency-cpus");
    let json = dir.arg("lat.json");
    if mine.contains([',', '-']) {
        // Long enough to look at its threads while it runs; stopped once seen.
        let mut p = Proc::spawn(&["latency", "--sizes", "8", "--iters", "5000000", "--json", &json]);
        assert!(p.stderr.wait_for("ping-pong: this end on CPU", Duration::from_secs(30)), "{}", p.stderr.text());
        let note = p.stderr.text();
        let split = note.lines().find(|l| l.starts_with("ping-pong:")).unwrap().to_string();
        let tasks = PathBuf::from(format!("/proc/{}/task", p.child.id()));
        let main = tasks.join(p.child.id().to_string()).join("status");
        let both_bound = |deadline: Instant| loop {
            let threads: Vec<String> = std::fs::read_dir(&tasks)
                .map(|d| d.flatten().filter_map(|t| cpus_allowed(&t.path().join("status"))).collect())
                .unwrap_or_default();
            let pinger = cpus_allowed(&main).unwrap_or_default();
            let responder = threads.iter().find(|c| !c.is_empty() && **c != pinger && **c != mine).cloned();
            if let Some(responder) = responder.filter(|_| pinger != mine) {
                return Some((pinger, responder));
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::yield_now();
        };
        let (pinger, responder) = both_bound(Instant::now() + Duration::from_secs(30))
            .unwrap_or_else(|| panic!("the two ends were never bound apart ({split}); threads of {tasks:?}"));
        p.kill();
        assert_eq!(
            split,
            format!(
                "ping-pong: this end on CPU {pinger}, the receiver on CPU{} {responder} (kept apart)",
                if responder.contains([',', '-']) { "s" } else { "" }
            )
        );
        assert!(!pinger.contains([',', '-']), "the pinger runs on one CPU: {pinger}");
        // A run that finishes records the same split in its results.
        let out = run(&["latency", "--sizes", "8", "--iters", "100", "--json", &json]);
        out.expect_code(0);
        let r = read_json(Path::new(&json));
        assert_eq!(r["config"]["ping_pong_cpus"], serde_json::json!({"pinger": pinger, "responder": responder}));
        // The host's fingerprint counts the CPUs the run was given, not the one its pinger was bound to after.
        let given = std::thread::available_parallelism().unwrap().get();
        assert_eq!(r["env"]["cpus"].as_u64(), Some(given as u64), "env.cpus of a pinned latency run");
    } else {
        eprintln!("this test may run on CPU {mine} only: the one-CPU case below is all it can check");
    }
    let first = mine.split([',', '-']).next().unwrap().to_string();
    let one = Proc::start(
        Command::new("taskset")
            .args(["-c", &first])
            .arg(bin())
            .args(["latency", "--sizes", "8", "--iters", "100", "--json", &json]),
        format!("taskset -c {first} kvxfer latency"),
    )
    .finish();
    one.expect_code(0);
    assert!(!one.stderr.contains("ping-pong:"), "{}", one.stderr);
    assert!(read_json(Path::new(&json))["config"].get("ping_pong_cpus").is_none());
}
