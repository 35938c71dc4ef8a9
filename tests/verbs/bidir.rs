//! `--bidir` over verbs on real soft-RoCE devices: both ends RDMA-WRITE at once, serve back into a buffer the
//! sender registered for the run, both directions verified, each direction's rate and the aggregate recorded.

use super::*;

/// Each rep of `c` went both ways, verified, with both rates and the aggregate.
fn check_both_ways(c: &serde_json::Value, size: u64, reps: u64) {
    check_case(c, size, reps, true);
    assert_eq!(c["reverse_mismatched_bytes"].as_u64(), Some(0), "{c}");
    for key in ["reverse_gbps", "aggregate_gbps"] {
        assert!(c[key]["p50"].as_f64().is_some_and(|x| x > 0.0), "{key}: {c}");
    }
    for r in c["reps"].as_array().unwrap() {
        assert_eq!(r["reverse_mismatched_bytes"].as_u64(), Some(0), "{r}");
        let (rev, agg) = (r["reverse_gbps"].as_f64().unwrap(), r["aggregate_gbps"].as_f64().unwrap());
        assert!(rev > 0.0 && agg <= (r["gbps"].as_f64().unwrap() + rev) * 1.001, "{r}");
    }
}

#[test]
#[ignore = "needs soft-RoCE devices: scripts/test-rxe runs it in a VM (KVXFER_REQUIRE_RXE=1, --include-ignored)"]
fn send_bidir_over_verbs_against_serve_is_verified_both_ways() {
    let Some(r) = rxe() else { return };
    let t = TempDir::new("verbs-bidir");
    let (_, v) =
        send_to_serve_once(&r, &t, &["--sizes", "1MiB,3084KiB", "--reps", "3", "--qps", "2", "--verify", "--bidir"]);
    assert_eq!(v["config"]["bidir"], true);
    for (c, size) in v["cases"].as_array().unwrap().iter().zip([1u64 << 20, 3084 << 10]) {
        check_both_ways(c, size, 3);
    }
}

#[test]
#[ignore = "needs soft-RoCE devices: scripts/test-rxe runs it in a VM (KVXFER_REQUIRE_RXE=1, --include-ignored)"]
fn sweep_bidir_over_verbs_in_one_process_and_read_refused() {
    let Some(r) = rxe() else { return };
    let t = TempDir::new("verbs-bidir-sweep");
    let json = t.arg("b.json");
    let dev = ["sweep", "--transport", "verbs", "-d", &r.b_dev, "--peer-device", &r.a_dev, "--ack-timeout", "18"];
    let knobs = ["--sizes", "2MiB", "--reps", "3", "--verify", "--bidir", "--json", &json, "--out-dir", &t.arg("")];
    let out = run(&[&dev[..], &knobs[..]].concat());
    out.expect_code(0);
    check_both_ways(&read_json(Path::new(&json))["cases"][0], 2 << 20, 3);
    assert!(out.stdout.contains("reverse"), "the live row shows the reverse direction: {}", out.stdout);
    let out = run(&[&dev[..], &["--op", "read"], &knobs[..]].concat());
    out.expect_code(2);
    assert!(out.one_error().contains("--op read"), "{}", out.stderr);
}
