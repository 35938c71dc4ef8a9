//! `--op read` on real soft-RoCE devices: the receiver (the decode side) READs each rep from the sender's buffer
//! and times it, contiguous and paged, between two processes and in a one-machine sweep. (The paged fault of
//! tests/verbs.rs misplaces pieces in the sender's writes, which a reader never posts: a read run's fault is a
//! byte flipped in the lent buffer.)

use super::knobs::devinfo;
use super::*;

#[test]
#[ignore = "needs soft-RoCE devices: scripts/test-rxe runs it in a VM (KVXFER_REQUIRE_RXE=1, --include-ignored)"]
fn the_receiver_reads_contiguous_reps_verified_with_the_devices_read_depths() {
    let Some(r) = rxe() else { return };
    let t = TempDir::new("verbs-read");
    let args =
        ["--op", "read", "--sizes", "1MiB,16MiB", "--block-size", "256KiB", "--qps", "2", "--reps", "3", "--verify"];
    let (_, v) = send_to_serve_once(&r, &t, &args);
    for (c, size) in v["cases"].as_array().unwrap().iter().zip([1u64 << 20, 16 << 20]) {
        check_case_timed(c, size, 3, true, TimedBy::Receiver);
    }
    assert_eq!(v["config"]["verbs"]["op"], "read");
    let s = &v["config"]["transport_detail"]["sender"];
    assert_eq!(s["op"], "read", "{s}");
    // The reader (rxeA, serve) issues at most what its device allows and what the sender's (rxeB) answers.
    let (reader, lender) = (devinfo(&r.a_dev), devinfo(&r.b_dev));
    let answers = lender["max_qp_rd_atom"].clamp(1, 255);
    let issues = reader["max_qp_init_rd_atom"].clamp(1, 255).min(answers);
    assert_eq!((s["max_rd_atomic"].as_u64(), s["max_dest_rd_atomic"].as_u64()), (Some(issues), Some(answers)), "{s}");
    // Polling by default, but never through a whole rep: the results say how long it spins before sleeping.
    let reader = &v["config"]["transport_detail"]["receiver"];
    assert_eq!(reader["reader_spin_us"].as_u64(), Some(200), "{reader}");
}

#[test]
#[ignore = "needs soft-RoCE devices: scripts/test-rxe runs it in a VM (KVXFER_REQUIRE_RXE=1, --include-ignored)"]
fn the_receiver_reads_paged_pieces_into_place_verified() {
    let Some(r) = rxe() else { return };
    let t = TempDir::new("verbs-read-paged");
    // Fewer tokens than the WRITE test's: a loaded emulated guest moves a few tens of MB/s either way.
    let knobs = ["--op", "read", "--tokens", "100,256", "--qps", "2", "--reps", "2", "--verify"];
    let (_, v) = send_to_serve_once(&r, &t, &[PAGED_QWEN, &knobs].concat());
    for (c, tokens) in v["cases"].as_array().unwrap().iter().zip([100u64, 256]) {
        check_case_timed(c, tokens * 98_304, 2, true, TimedBy::Receiver);
        assert_eq!(c["layout"], "paged");
    }
}

/// The reader does not spin through a rep: with soft-RoCE its READs complete through this guest's kernel, which a
/// reader polling the whole rep starved of its core. A spinning process is on a core or waiting for one for the
/// whole rep; a sleeping one for a small part of it.
#[test]
#[ignore = "needs soft-RoCE devices: scripts/test-rxe runs it in a VM (KVXFER_REQUIRE_RXE=1, --include-ignored)"]
fn the_reader_sleeps_through_a_long_read_instead_of_spinning() {
    let Some(r) = rxe() else { return };
    let t = TempDir::new("verbs-read-sleeps");
    let (_, v) = send_to_serve_once(&r, &t, &["--op", "read", "--sizes", "16MiB", "--qps", "1", "--reps", "3"]);
    let c = &v["cases"][0];
    check_case_timed(c, 16 << 20, 3, false, TimedBy::Receiver);
    for rep in c["reps"].as_array().unwrap() {
        let p = &rep["counters"]["receiver process"];
        let busy_us = p["cpu_us"].as_f64().unwrap() + p["run_queue_wait_us"].as_f64().unwrap_or(0.0);
        let transfer_us = rep["transfer_ms"].as_f64().unwrap() * 1e3;
        assert!(
            busy_us < 0.5 * transfer_us,
            "the reader ran or waited to run {busy_us} µs of a {transfer_us} µs rep: {rep}"
        );
    }
}

/// A byte flipped in the sender's buffer before the receiver READs it (the test-only fault
/// `KVXFER_TEST_FAULT=flip-byte`) is counted by the reader's --verify, and both ends exit 1.
#[test]
#[ignore = "needs soft-RoCE devices: scripts/test-rxe runs it in a VM (KVXFER_REQUIRE_RXE=1, --include-ignored)"]
fn a_byte_flipped_in_the_lent_buffer_fails_the_readers_verify() {
    let Some(r) = rxe() else { return };
    let t = TempDir::new("verbs-read-flip");
    let sent = t.arg("send.json");
    let (mut serve, addr) = serve_on_a(&r, &["--once"]);
    let args = ["--op", "read", "--sizes", "1MiB", "--reps", "2", "--verify", "--json", &sent];
    let send = run_flipping_a_byte(&send_args(&r, &addr, &args));
    expect_one_corrupted_byte(&send, Path::new(&sent), 1 << 20);
    assert_eq!(serve.wait_timeout(Duration::from_secs(10)).and_then(|s| s.code()), Some(1), "{}", serve.stderr.text());
}

#[test]
#[ignore = "needs soft-RoCE devices: scripts/test-rxe runs it in a VM (KVXFER_REQUIRE_RXE=1, --include-ignored)"]
fn an_in_process_sweep_reads_between_two_devices() {
    let Some(r) = rxe() else { return };
    let t = TempDir::new("verbs-read-sweep");
    let json = t.arg("s.json");
    let devices = ["-d", &r.b_dev, "--peer-device", &r.a_dev];
    let args =
        ["sweep", "--transport", "verbs", "--op", "read", "--qps", "1", "--sizes", "2MiB", "--reps", "3", "--verify"];
    let out = run(&[&args[..], &devices, &["--ack-timeout", "18", "--json", &json, "--out-dir", &t.arg("")]].concat());
    out.expect_code(0);
    let v = read_json(Path::new(&json));
    check_case_timed(&v["cases"][0], 2 << 20, 3, true, TimedBy::Receiver);
    assert_eq!(v["config"]["transport_detail"]["sender"]["op"], "read");
    // One queue pair reads 1 MiB at a time when no block size is given (several would read 64 KiB each).
    assert_eq!(v["config"]["block_size"].as_u64(), Some(1 << 20));
}

/// Rails (several devices per end) are not striped for READs: refused in one line, before anything moves.
#[test]
#[ignore = "needs soft-RoCE devices: scripts/test-rxe runs it in a VM (KVXFER_REQUIRE_RXE=1, --include-ignored)"]
fn reads_over_rails_are_refused_in_one_line() {
    let Some(r) = rxe() else { return };
    let Some((a2, b2)) = second_rails() else { return };
    let t = TempDir::new("verbs-read-rails");
    let (b_rails, a_rails) = (format!("{},{b2}", r.b_dev), format!("{},{a2}", r.a_dev));
    let devices = ["-d", &b_rails, "--peer-device", &a_rails];
    let args = ["sweep", "--transport", "verbs", "--op", "read", "--sizes", "1MiB", "--reps", "1"];
    let out = run(&[&args[..], &devices, &["--out-dir", &t.arg("")]].concat());
    out.expect_code(2);
    let e = out.one_error();
    assert!(e.contains("--op read runs over one RDMA device per end") && e.contains("give one -d device"), "{e}");
}
