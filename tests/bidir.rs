//! `--bidir`: both ends send at once, through the real binary over loopback TCP. A sweep's two directions run in one
//! process, a send's against a real `serve`; both verified, each direction's rate and the aggregate recorded; runs
//! that cannot go both ways are refused with one line.

mod common;
use common::*;

const MIB: u64 = 1 << 20;

/// Every rep of `c` has both directions' rates and an aggregate within the rep's own timing: both directions'
/// bytes over a span that covers each direction's transfer and lies within the sender's whole rep, so the aggregate
/// is at most the two rates' sum and at least both directions' bytes over the rep's total time.
fn check_both_ways(c: &serde_json::Value, size: u64, reps: u64) {
    check_case(c, size, reps, true);
    assert_eq!(c["reverse_mismatched_bytes"].as_u64(), Some(0), "{c}");
    for key in ["reverse_gbps", "aggregate_gbps"] {
        assert!(num(&c[key], "p50") > 0.0 && num(&c[key], "min") <= num(&c[key], "max"), "{key}: {c}");
    }
    for r in c["reps"].as_array().unwrap() {
        let (fwd_ms, rev_ms, span) = (num(r, "transfer_ms"), num(r, "reverse_transfer_ms"), num(r, "bidir_span_ms"));
        let (fwd, rev, agg) = (num(r, "gbps"), num(r, "reverse_gbps"), num(r, "aggregate_gbps"));
        assert!((agg - 2.0 * size as f64 / span / 1e6).abs() <= agg * 1e-9, "aggregate is 2 × size / span: {r}");
        assert!((rev - size as f64 / rev_ms / 1e6).abs() <= rev * 1e-9, "reverse rate from its time: {r}");
        assert!(span >= rev_ms && span >= fwd_ms * 0.999, "the span covers both transfers: {r}");
        assert!(span <= num(r, "total_ms"), "the span lies within the rep: {r}");
        assert!(agg <= (fwd + rev) * 1.001, "aggregate at most the sum of the two directions: {r}");
        assert!(agg >= 2.0 * size as f64 / num(r, "total_ms") / 1e6, "aggregate at least 2 × size / total: {r}");
        assert_eq!(r["reverse_mismatched_bytes"].as_u64(), Some(0), "{r}");
    }
}

#[test]
fn sweep_bidir_over_tcp_verifies_both_directions_and_reports_each_and_the_aggregate() {
    let d = TempDir::new("bidir-sweep");
    let (json, md) = (d.arg("r.json"), d.arg("r.md"));
    let args = ["sweep", "--transport", "tcp", "--sizes", "1MiB,8MiB", "--reps", "3", "--warmup", "1", "--verify"];
    let out = run(&[&args[..], &["--bidir", "--json", &json, "--md", &md, "--out-dir", &d.arg("")]].concat());
    out.expect_code(0);
    assert!(out.stdout.contains("⇄ reverse"), "the live rows say both directions:\n{}", out.stdout);
    let r = read_json(&d.join("r.json"));
    assert_eq!(r["config"]["bidir"], true);
    let cases = r["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 2);
    check_both_ways(&cases[0], MIB, 3);
    check_both_ways(&cases[1], 8 * MIB, 3);
    // Read back and written again (as `report` and `--resume` do), the file keeps every key in its order.
    let text = std::fs::read_to_string(d.join("r.json")).unwrap();
    let back = kvxfer::export::json::Results::parse(&d.join("r.json"), &text).unwrap();
    let again: serde_json::Value = serde_json::from_slice(&back.to_json().unwrap()).unwrap();
    assert_eq!(again["cases"][1]["reps"][0], r["cases"][1]["reps"][0]);
    let keys = |v: &serde_json::Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&again["cases"][1]), keys(&cases[1]));
    assert_eq!(again["cases"][1]["aggregate_gbps"], cases[1]["aggregate_gbps"]);
    let md = std::fs::read_to_string(d.join("r.md")).unwrap();
    assert!(md.contains("| reverse p50 GB/s | aggregate p50 GB/s |") && md.contains("⇄ --bidir"), "{md}");
    // `report` reads the keys back: the columns and the note come back from the file.
    let rep = run(&["report", &json]);
    rep.expect_code(0);
    assert!(rep.stdout.contains("aggregate p50 GB/s") && rep.stdout.contains("⇄ --bidir"), "{}", rep.stdout);
    let csv = run(&["report", &json, "--csv", "-"]);
    csv.expect_code(0);
    assert!(csv.stdout.lines().next().unwrap().ends_with("aggregate_gbps_max,reverse_mismatched_bytes"));
}

#[test]
fn send_bidir_against_serve_is_verified_both_ways() {
    let d = TempDir::new("bidir-send");
    let json = d.arg("r.json");
    let serve = Serve::start(&["--once"]);
    let out =
        run(&["send", "--peer", &serve.addr, "--sizes", "2MiB", "--reps", "3", "--verify", "--bidir", "--json", &json]);
    out.expect_code(0);
    let s = serve.proc.finish();
    s.expect_code(0);
    assert!(s.error_lines().is_empty(), "{}", s.stderr);
    let r = read_json(&d.join("r.json"));
    assert_eq!(r["config"]["bidir"], true);
    check_both_ways(&r["cases"][0], 2 * MIB, 3);
}

/// The receiver's second buffer counts against its --max-size: a size it takes one way is refused both ways.
#[test]
fn serve_refuses_bidir_when_its_two_buffers_exceed_max_size() {
    let mut serve = Serve::start(&["--max-size", "1MiB"]);
    let d = TempDir::new("bidir-max");
    let send = |bidir: &[&str]| {
        let args = ["send", "--peer", &serve.addr, "--sizes", "768KiB", "--reps", "1", "--out-dir", &d.arg("")];
        let out = run(&[&args[..], bidir].concat());
        serve.wait_idle();
        out
    };
    send(&[]).expect_code(0);
    let out = send(&["--bidir"]);
    out.expect_code(2);
    let e = out.one_error();
    assert!(e.contains("--bidir") && e.contains("1.5 MiB in all") && e.contains("--max-size 1 MiB"), "{e}");
    serve.proc.kill();
}

#[test]
fn bidir_is_refused_with_one_line_where_a_run_cannot_go_both_ways() {
    let d = TempDir::new("bidir-refused");
    let dir = d.arg("");
    let sized = ["--sizes", "1MiB", "--reps", "1", "--bidir", "--out-dir", &dir];
    for (args, says) in [
        (vec!["sweep", "--transport", "nixl"], "--transport nixl cannot send from the receiver back"),
        (vec!["sweep", "--transport", "mooncake"], "--transport mooncake cannot send from the receiver back"),
        (vec!["send", "--peer", "127.0.0.1:9", "--transport", "nixl"], "--transport nixl cannot send"),
    ] {
        let out = run(&[&args[..], &sized[..]].concat());
        out.expect_code(2);
        let e = out.one_error();
        assert!(e.contains(says) && e.contains("drop --bidir"), "{args:?}: {e}");
    }
    let paged = ["sweep", "--layout", "paged", "--model", "qwen3-8b", "--tokens", "16", "--reps", "1", "--bidir"];
    let out = run(&[&paged[..], &["--out-dir", &dir]].concat());
    out.expect_code(2);
    assert!(out.one_error().contains("--bidir moves contiguous buffers both ways"), "{}", out.stderr);
    // latency has no --bidir: a ping-pong is both ways already.
    run(&["latency", "--bidir"]).expect_code(2);
}
