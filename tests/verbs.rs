//! Verbs transport tests on real soft-RoCE devices. They run inside `scripts/rxe-vm` (two rxe devices on a veth
//! pair that behave like two hosts: serve on rxeA, send on rxeB), where `scripts/test-rxe` (run by `scripts/test`)
//! runs this test binary with `--include-ignored` and `KVXFER_REQUIRE_RXE=1`: a test that finds no device then fails.
//! Anywhere else every test is `#[ignore]`d, with the reason.

mod common;
use common::*;
// The NIC knobs' tests: tests/verbs/knobs.rs.
#[path = "verbs/knobs.rs"]
mod knobs;
// RDMA READs (--op read): tests/verbs/read.rs.
#[path = "verbs/read.rs"]
mod read;
// Latency over verbs: tests/verbs/latency.rs.
#[path = "verbs/latency.rs"]
mod latency;
#[path = "verbs/replay.rs"]
mod replay;
// --bidir over verbs: tests/verbs/bidir.rs.
#[path = "verbs/bidir.rs"]
mod bidir;
// What reaches the wire (packet capture): tests/verbs/wire.rs.
#[path = "verbs/wire.rs"]
mod wire;
use std::path::Path;
use std::time::{Duration, Instant};

const TOKEN: &str = "rxe-test-token-16chars";
/// Set by scripts/test-rxe: the rxe devices must be there; a test that finds none fails instead of skipping.
const REQUIRE: &str = "KVXFER_REQUIRE_RXE";

struct Rxe {
    a_dev: String,
    a_ip: String,
    b_dev: String,
}

/// Whether the rdma device `dev` exists.
fn rdma_device(dev: &str) -> bool {
    Path::new("/sys/class/infiniband").join(dev).exists()
}

/// The two devices of the VM's default mode (RXE_VM_NET=pair), or None (after saying why, or failing: see
/// [`missing_hardware`]) when they are not here.
fn rxe() -> Option<Rxe> {
    let why = match (std::env::var("RXE_A_DEV"), std::env::var("RXE_A_IP"), std::env::var("RXE_B_DEV")) {
        (Ok(a_dev), Ok(a_ip), Ok(b_dev)) => {
            let absent: Vec<&str> =
                [&a_dev, &b_dev].into_iter().filter(|d| !rdma_device(d)).map(|d| d.as_str()).collect();
            if absent.is_empty() {
                return Some(Rxe { a_dev, a_ip, b_dev });
            }
            format!("no rdma device {} here, although RXE_A_DEV/RXE_B_DEV name it", absent.join(", "))
        }
        // The VM's one-device mode (scripts/test-rxe's second run): these tests run in its two-device run.
        _ if std::env::var("RXE_VM_NET").as_deref() == Ok("single") => {
            eprintln!("skipped: needs the rxe VM's two devices (RXE_VM_NET=pair); this VM has one (RXE_VM_NET=single)");
            return None;
        }
        _ => "no soft-RoCE devices here (run inside scripts/rxe-vm, as scripts/test-rxe does)".to_string(),
    };
    missing_hardware(REQUIRE, 0, &why);
    None
}

/// `kvxfer serve` on rxeA's address, ready when returned.
fn serve_on_a(r: &Rxe, extra: &[&str]) -> (Proc, String) {
    let addr = format!("{}:{}", r.a_ip, free_port());
    let mut args = vec!["serve", "--listen", &addr, "--token", TOKEN, "-d", &r.a_dev];
    args.extend_from_slice(extra);
    let p = Proc::spawn(&args);
    assert!(p.stderr.wait_for("listening on", Duration::from_secs(30)), "serve did not start: {}", p.stderr.text());
    (p, addr)
}

fn send_args<'a>(r: &'a Rxe, addr: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    // ACK timeout 18 (~1 s): soft-RoCE under emulation has a retransmission bug that a 67 ms timeout trips.
    let mut v =
        vec!["send", "--peer", addr, "--token", TOKEN, "--transport", "verbs", "-d", &r.b_dev, "--ack-timeout", "18"];
    v.extend_from_slice(extra);
    v
}

/// `serve --once` on rxeA and `send ARGS --json …` from rxeB: both exit 0. Returns send's output and its results.
fn send_to_serve_once(r: &Rxe, t: &TempDir, args: &[&str]) -> (Out, serde_json::Value) {
    let (mut serve, addr) = serve_on_a(r, &["--once"]);
    let json = t.arg("r.json");
    let out = run(&send_args(r, &addr, &[args, &["--json", &json]].concat()));
    out.expect_code(0);
    let status = serve.wait_timeout(Duration::from_secs(10));
    assert_eq!(status.and_then(|s| s.code()), Some(0), "serve --once exits 0 after {args:?}: {}", serve.stderr.text());
    (out, read_json(Path::new(&json)))
}

/// A run that promises the hardware includes the ignored tests that need it.
#[test]
fn ignored_tests_run_where_the_harness_promises_their_hardware() {
    common::ignored_tests_run_where_promised();
}

#[test]
#[ignore = "needs soft-RoCE devices: scripts/test-rxe runs it in a VM (KVXFER_REQUIRE_RXE=1, --include-ignored)"]
fn verified_transfers_1_to_64mib_over_several_queue_pairs() {
    let Some(r) = rxe() else { return };
    let t = TempDir::new("verbs");
    let (_, v) =
        send_to_serve_once(&r, &t, &["--sizes", "1MiB,4MiB,16MiB,64MiB", "--reps", "2", "--qps", "4", "--verify"]);
    for (c, mib) in v["cases"].as_array().unwrap().iter().zip([1u64, 4, 16, 64]) {
        check_case(c, mib << 20, 2, true);
        assert_eq!(c["block_size"].as_u64(), Some(64 << 10), "verbs default block size");
    }
    let d = &v["config"]["transport_detail"];
    assert_eq!(d["sender"]["port"]["device"], r.b_dev.as_str());
    assert_eq!(d["receiver"]["port"]["device"], r.a_dev.as_str());
    assert_eq!(d["sender"]["port"]["gid_index"], 1, "the IPv4-mapped RoCE v2 GID is chosen like perftest does");
    assert_eq!(d["sender"]["port"]["gid_type"], "RoCEv2");
    assert_eq!(v["config"]["verbs"]["qps"], 4);
}

#[test]
#[ignore = "needs soft-RoCE devices: scripts/test-rxe runs it in a VM (KVXFER_REQUIRE_RXE=1, --include-ignored)"]
fn tiny_blocks_and_mr_chunks_cross_every_boundary() {
    let Some(r) = rxe() else { return };
    let t = TempDir::new("verbs-chunks");
    // 3 MiB + 12 KiB: not a multiple of the MR chunk, so the last piece is short; 4 KiB writes hit every boundary.
    let runs: [&[&str]; 3] = [
        &[
            "--block-size",
            "4KiB",
            "--mr-chunk",
            "1MiB",
            "--qps",
            "3",
            "--batch",
            "7",
            "--inflight",
            "32",
            "--signal-every",
            "5",
        ],
        &["--block-size", "96KiB", "--mr-chunk", "64KiB", "--reg-per-rep", "--qps", "2"],
        &["--block-size", "1MiB", "--cq-mode", "event", "--qps", "5"],
    ];
    for extra in runs {
        let (_, v) =
            send_to_serve_once(&r, &t, &[&["--sizes", "3084KiB", "--reps", "2", "--verify"][..], extra].concat());
        let c = &v["cases"][0];
        check_case(c, 3084 << 10, 2, true);
        if extra.contains(&"--reg-per-rep") {
            for rep in c["reps"].as_array().unwrap() {
                assert!(num(rep, "reg_ms") > 0.0, "--reg-per-rep records registration in every rep: {rep}");
                assert!(num(rep, "reg_ms") < num(rep, "transfer_ms"), "and it is part of the transfer time");
            }
        }
    }
}

#[test]
#[ignore = "needs soft-RoCE devices: scripts/test-rxe runs it in a VM (KVXFER_REQUIRE_RXE=1, --include-ignored)"]
fn in_process_sweep_between_two_devices() {
    let Some(r) = rxe() else { return };
    let t = TempDir::new("verbs-sweep");
    let json = t.arg("s.json");
    let out = run(&[
        "sweep",
        "--transport",
        "verbs",
        "-d",
        &r.b_dev,
        "--peer-device",
        &r.a_dev,
        "--sizes",
        "2MiB",
        "--reps",
        "3",
        "--verify",
        "--json",
        &json,
        "--out-dir",
        &t.arg(""),
    ]);
    out.expect_code(0);
    check_case(&read_json(std::path::Path::new(&json))["cases"][0], 2 << 20, 3, true);
}

/// Needs the VM's single-device mode (`RXE_VM_NET=single`, as scripts/test-rxe runs it): in the two-device mode the
/// harness routes each address through the other device, so a device cannot reach itself.
#[test]
#[ignore = "needs soft-RoCE devices: scripts/test-rxe runs it in a VM (KVXFER_REQUIRE_RXE=1, --include-ignored)"]
fn in_process_sweep_looping_through_one_device() {
    let net = std::env::var("RXE_VM_NET");
    if matches!(net.as_deref(), Ok("pair" | "rails")) {
        eprintln!("skipped: needs the rxe VM with one device (RXE_VM_NET=single); scripts/test-rxe runs it so");
        return;
    }
    let a_dev = match (net.as_deref(), std::env::var("RXE_A_DEV")) {
        (Ok("single"), Ok(a_dev)) if rdma_device(&a_dev) => a_dev,
        _ => {
            let why = "no soft-RoCE device in the VM's one-device mode here (run inside scripts/rxe-vm with RXE_VM_NET=single, as scripts/test-rxe does)";
            missing_hardware(REQUIRE, 0, why);
            return;
        }
    };
    let r = Rxe { a_dev, a_ip: String::new(), b_dev: String::new() };
    let t = TempDir::new("verbs-loop");
    let json = t.arg("l.json");
    run(&[
        "sweep",
        "--transport",
        "verbs",
        "-d",
        &r.a_dev,
        "--sizes",
        "1MiB",
        "--reps",
        "2",
        "--ack-timeout",
        "18",
        "--verify",
        "--json",
        &json,
        "--out-dir",
        &t.arg(""),
    ])
    .expect_code(0);
    let v = read_json(std::path::Path::new(&json));
    check_case(&v["cases"][0], 1 << 20, 2, true);
    let d = &v["config"]["transport_detail"];
    assert_eq!(d["sender"]["port"]["device"], r.a_dev.as_str());
    assert_eq!(d["receiver"]["port"]["device"], r.a_dev.as_str(), "both ends on one device: loopback through the NIC");
}

#[test]
#[ignore = "needs soft-RoCE devices: scripts/test-rxe runs it in a VM (KVXFER_REQUIRE_RXE=1, --include-ignored)"]
fn a_receiver_killed_mid_transfer_fails_the_sender_within_5s() {
    let Some(r) = rxe() else { return };
    let t = TempDir::new("verbs-kill");
    let events = Events::fifo(t.join("e.jsonl"));
    let (mut serve, addr) = serve_on_a(&r, &[]);
    let json = t.arg("k.json");
    let ev = events.arg();
    let mut send = Proc::spawn(&send_args(
        &r,
        &addr,
        &["--sizes", "16MiB,64MiB", "--reps", "30", "--json", &json, "--events", &ev],
    ));
    // Kill once the 64 MiB case is under way: its warm-up rep is done, its 30 measured reps (tens of seconds at
    // soft-RoCE's 15-50 MB/s) are not.
    events.wait_rep(1, true, 0, Duration::from_secs(300));
    serve.kill();
    let killed = Instant::now();
    let status = send.wait_timeout(Duration::from_secs(20)).expect("the sender exits");
    let took = killed.elapsed();
    let err = send.stderr.text();
    assert!(
        !events.all_lines().iter().any(|e| e["case"] == 1 && e["warmup"] == false && e["rep"] == 0),
        "the first measured 64 MiB rep finished: the kill did not land mid-transfer\n{}",
        events.pipe.text()
    );
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(took < Duration::from_secs(5), "the sender took {took:?} to notice");
    assert!(err.contains("receiver") || err.contains("RETRY_EXC"), "names what happened: {err}");
    assert!(!err.contains("panicked"));
    // The completed size is kept.
    let v = read_json(std::path::Path::new(&json));
    assert_eq!(v["cases"].as_array().unwrap().len(), 1);
    assert!(v["error"].is_string());
}

#[test]
#[ignore = "needs soft-RoCE devices: scripts/test-rxe runs it in a VM (KVXFER_REQUIRE_RXE=1, --include-ignored)"]
fn a_sender_killed_mid_transfer_fails_the_receiver_within_5s() {
    let Some(r) = rxe() else { return };
    let t = TempDir::new("verbs-kill-tx");
    let events = Events::fifo(t.join("e.jsonl"));
    let (mut serve, addr) = serve_on_a(&r, &["--once"]);
    let ev = events.arg();
    let mut send = Proc::spawn(&send_args(&r, &addr, &["--sizes", "64MiB", "--reps", "30", "--events", &ev]));
    // Kill as the second measured rep starts: the first is done, 29 of 64 MiB each (tens of seconds at
    // soft-RoCE's 15-50 MB/s) are not.
    events.wait_rep(0, false, 0, Duration::from_secs(300));
    send.kill();
    let killed = Instant::now();
    let status = serve.wait_timeout(Duration::from_secs(20)).expect("serve --once exits");
    let took = killed.elapsed();
    let err = serve.stderr.text();
    assert!(!err.contains("run complete"), "the run was over before the kill: the test did not kill mid-run\n{err}");
    assert!(
        !events.all_lines().iter().any(|e| e["warmup"] == false && e["rep"] == 1),
        "the second measured rep finished: the kill did not land mid-transfer\n{}",
        events.pipe.text()
    );
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(took < Duration::from_secs(5), "the receiver took {took:?}");
    assert!(err.contains("sender"), "{err}");
}

#[test]
#[ignore = "needs soft-RoCE devices: scripts/test-rxe runs it in a VM (KVXFER_REQUIRE_RXE=1, --include-ignored)"]
fn wrong_device_names_fail_before_connecting() {
    let Some(r) = rxe() else { return };
    let out = run(&["send", "--peer", "127.0.0.1:9", "--transport", "verbs", "-d", "mlx5_9", "--sizes", "1MiB"]);
    out.expect_code(2);
    let e = out.one_error();
    assert!(e.contains("mlx5_9") && e.contains(&r.a_dev) && e.contains(&r.b_dev), "{e}");
    let out = run(&["serve", "--listen", "127.0.0.1:0", "-d", "nosuch", "--once"]);
    out.expect_code(2);
    assert!(out.one_error().contains("nosuch"));
}

#[test]
#[ignore = "needs soft-RoCE devices: scripts/test-rxe runs it in a VM (KVXFER_REQUIRE_RXE=1, --include-ignored)"]
fn devices_lists_ports_and_gid_tables() {
    let Some(r) = rxe() else { return };
    let out = run(&["devices"]);
    out.expect_code(0);
    for needle in [r.a_dev.as_str(), r.b_dev.as_str(), "ACTIVE", "Ethernet", "RoCEv2", r.a_ip.as_str(), "4096"] {
        assert!(out.stdout.contains(needle), "devices lacks {needle:?}:\n{}", out.stdout);
    }
    let out = run(&["devices", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let devs = v["rdma"].as_array().expect("rdma[] in devices --json");
    // Two devices, and two more in the rails mode.
    let want = if std::env::var("RXE_VM_NET").as_deref() == Ok("rails") { 4 } else { 2 };
    assert_eq!(devs.len(), want, "{v}");
    let gids = devs[0]["ports"][0]["gids"].as_array().unwrap();
    assert!(gids.iter().any(|g| g["index"] == 1 && g["type"] == "RoCEv2"));
}

/// Scattered pieces on both sides, one RDMA WRITE each (or per coalesced run), verified by logical offset;
/// a misplaced piece must fail --verify.
#[test]
#[ignore = "needs soft-RoCE devices: scripts/test-rxe runs it in a VM (KVXFER_REQUIRE_RXE=1, --include-ignored)"]
fn paged_transfers_verify_with_and_without_coalescing_and_catch_a_misplaced_piece() {
    let Some(r) = rxe() else { return };
    let t = TempDir::new("verbs-paged");
    for extra in [&[][..], &["--coalesce"][..]] {
        let knobs = ["--tokens", "100,1k", "--qps", "2", "--reps", "2", "--verify"];
        let (_, v) = send_to_serve_once(&r, &t, &[PAGED_QWEN, &knobs, extra].concat());
        for (c, (tokens, pieces)) in v["cases"].as_array().unwrap().iter().zip([(100u64, 672u64), (1024, 6144)]) {
            check_case(c, tokens * 98_304, 2, true);
            assert_eq!(c["layout"], "paged");
            assert_eq!(c["pieces"].as_u64(), Some(pieces));
            assert_eq!(c["piece_bytes"].as_u64(), Some(16 << 10));
            let writes = c["writes"].as_u64().unwrap();
            assert!(if extra.is_empty() { writes == pieces } else { writes <= pieces }, "{c}");
        }
    }
    let (mut serve, addr) = serve_on_a(&r, &["--once"]);
    let json = t.arg("fault.json");
    let out = run(&send_args(&r, &addr, &[PAGED_SWAPPED_PIECES, &["--verify", "--json", &json]].concat()));
    out.expect_code(1);
    assert!(out.one_error().contains("verification failed"), "{}", out.stderr);
    let v = read_json(std::path::Path::new(&json));
    assert!(v["cases"][0]["mismatched_bytes"].as_u64().unwrap() > 0, "{v}");
    let _ = serve.wait_timeout(Duration::from_secs(10));
}

/// A byte corrupted in flight fails `--verify` over RDMA WRITEs, counted exactly, as tests/cli_tcp.rs shows for tcp
/// (the test-only fault `KVXFER_TEST_FAULT=flip-byte` inverts one byte of the first measured rep at the sender):
/// between serve on rxeA and send on rxeB, where serve exits 1 too, and in a sweep between the two devices.
#[test]
#[ignore = "needs soft-RoCE devices: scripts/test-rxe runs it in a VM (KVXFER_REQUIRE_RXE=1, --include-ignored)"]
fn a_byte_corrupted_in_flight_fails_verify_counting_one_byte() {
    let Some(r) = rxe() else { return };
    let t = TempDir::new("verbs-flip-byte");
    let (sent, swept, dir) = (t.arg("send.json"), t.arg("sweep.json"), t.arg(""));
    let reps = ["--sizes", "1MiB", "--reps", "2", "--verify"];
    let (mut serve, addr) = serve_on_a(&r, &["--once"]);
    let send = run_flipping_a_byte(&send_args(&r, &addr, &[&reps[..], &["--json", &sent]].concat()));
    expect_one_corrupted_byte(&send, Path::new(&sent), 1 << 20);
    assert_eq!(serve.wait_timeout(Duration::from_secs(10)).and_then(|s| s.code()), Some(1), "{}", serve.stderr.text());
    let devices = ["-d", &r.b_dev, "--peer-device", &r.a_dev, "--ack-timeout", "18"];
    let args =
        [&["sweep", "--transport", "verbs"][..], &devices, &reps, &["--json", &swept, "--out-dir", &dir]].concat();
    expect_one_corrupted_byte(&run_flipping_a_byte(&args), Path::new(&swept), 1 << 20);
}

/// With `--dst-placement sequential`: each region's destination pieces are back to back, so SGE lists
/// gather several scattered source pieces into one RDMA WRITE (fewer work requests than writes), and every byte
/// still lands verified; `--max-sge 1` posts one WRITE per piece again.
#[test]
#[ignore = "needs soft-RoCE devices: scripts/test-rxe runs it in a VM (KVXFER_REQUIRE_RXE=1, --include-ignored)"]
fn paged_sequential_destinations_gather_pieces_into_fewer_work_requests() {
    let Some(r) = rxe() else { return };
    let t = TempDir::new("verbs-sge");
    for sge in ["16", "1"] {
        let knobs = ["--dst-placement", "sequential", "--tokens", "64,256", "--qps", "2", "--max-sge", sge];
        let (out, v) = send_to_serve_once(&r, &t, &[PAGED_QWEN, &knobs, &["--reps", "2", "--verify"]].concat());
        assert!(out.stderr.contains("destination slots in order"), "{}", out.stderr);
        assert_eq!(v["config"]["transport_detail"]["sender"]["max_sge"].as_u64(), Some(sge.parse().unwrap()));
        for (c, (tokens, pieces)) in v["cases"].as_array().unwrap().iter().zip([(64u64, 384u64), (256, 1536)]) {
            check_case(c, tokens * 98_304, 2, true);
            assert_eq!(c["mismatched_bytes"].as_u64(), Some(0), "{c}");
            assert_eq!((c["pieces"].as_u64(), c["writes"].as_u64()), (Some(pieces), Some(pieces)), "{c}");
            let wrs = c["work_requests"].as_u64();
            if sge == "1" {
                assert!(wrs.is_none() || wrs == Some(pieces), "--max-sge 1: one WRITE per piece: {c}");
            } else {
                // 96 regions of 4 or 16 back-to-back 16 KiB pieces: one WRITE per region of up to 16 pieces.
                assert_eq!(wrs, Some(96 * (tokens / 16).div_ceil(16)), "{c}");
                for rep in c["reps"].as_array().unwrap() {
                    assert_eq!(rep["work_requests"].as_u64(), wrs, "{rep}");
                }
            }
        }
    }
}

/// The device of each of the 4 cluster ranks, by local rank (= rank here): 0 and 1 on rxeA, 2 and 3 on rxeB.
fn cluster_devices(r: &Rxe) -> [&str; 4] {
    [&r.a_dev, &r.a_dev, &r.b_dev, &r.b_dev]
}

/// 4 `kvxfer cluster` ranks in the VM, started as N shells would with `KVXFER_RANK`/… (local rank = rank, so `-d`
/// gives ranks 0, 1 rxeA and 2, 3 rxeB); they meet at rank 0 on rxeA's address, so they need the token. Every rank
/// exits 0 within `limit` (the guest's rxe under TCG is slow); rank 0's output.
fn cluster_of_four(r: &Rxe, args: &[&str], limit: Duration) -> Out {
    let coordinator = format!("{}:{}", r.a_ip, free_port());
    let devices = cluster_devices(r).join(",");
    let procs: Vec<Proc> = (0..4)
        .map(|rank| {
            let mut cmd = kvxfer();
            cmd.args(["cluster", "--coordinator", &coordinator, "--transport", "verbs", "-d", &devices]);
            // ACK timeout 18 (~1 s), as in send_args: soft-RoCE under emulation trips a 67 ms one.
            cmd.args(["--ack-timeout", "18"]).args(args);
            cmd.env("KVXFER_TOKEN", TOKEN).env("KVXFER_WORLD_SIZE", "4");
            cmd.env("KVXFER_RANK", rank.to_string()).env("KVXFER_LOCAL_RANK", rank.to_string());
            Proc::start(&mut cmd, format!("kvxfer cluster rank {rank} {args:?}"))
        })
        .collect();
    let start = Instant::now();
    let outs: Vec<Out> = procs
        .into_iter()
        .map(|mut p| {
            let status = p.wait_timeout(limit.saturating_sub(start.elapsed()));
            let (stdout, stderr) = (p.stdout.text(), p.stderr.text());
            let status = status.unwrap_or_else(|| panic!("{} still running after {limit:?}\n{stderr}", p.what));
            Out { code: status.code(), stdout, stderr, what: p.what.clone() }
        })
        .collect();
    for o in &outs {
        o.expect_code(0);
    }
    outs.into_iter().next().unwrap()
}

/// A cluster case's (src rank, dst rank), after checking that it is verified and that each end names the rxe
/// device of its rank as its NIC.
fn cluster_case(r: &Rxe, c: &serde_json::Value, flows: u64) -> (u64, u64) {
    let (src, dst) = (c["src"]["rank"].as_u64().unwrap(), c["dst"]["rank"].as_u64().unwrap());
    let devices = cluster_devices(r);
    assert_eq!(c["verified"], true, "{src}→{dst}");
    assert_eq!(c["flows"].as_u64(), Some(flows), "{src}→{dst}");
    assert_eq!(c["src"]["nic"].as_str(), Some(devices[src as usize]), "{src}→{dst}: {}", c["src"]);
    assert_eq!(c["dst"]["nic"].as_str(), Some(devices[dst as usize]), "{src}→{dst}: {}", c["dst"]);
    assert!(num(&c["gbps"], "p50") > 0.0, "{src}→{dst}");
    (src, dst)
}

#[test]
#[ignore = "needs soft-RoCE devices: scripts/test-rxe runs it in a VM (KVXFER_REQUIRE_RXE=1, --include-ignored)"]
fn cluster_of_four_ranks_two_per_device_measures_every_pair_and_an_incast() {
    let Some(r) = rxe() else { return };
    let t = TempDir::new("verbs-cluster");
    let limit = Duration::from_secs(300);
    let sizes = ["--sizes", "1MiB,4MiB", "--reps", "2", "--verify"];

    let json = t.arg("pairs.json");
    let pairs_args: Vec<&str> = ["--pattern", "pairs", "--json", &json].into_iter().chain(sizes).collect();
    let out = cluster_of_four(&r, &pairs_args, limit);
    let v = read_json(Path::new(&json));
    assert_eq!((v["cluster"]["steps_done"].as_u64(), v["cluster"]["steps_total"].as_u64()), (Some(6), Some(6)));
    let cases = v["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 24, "12 ordered pairs × 2 sizes");
    let measured: std::collections::BTreeSet<(u64, u64)> = cases.iter().map(|c| cluster_case(&r, c, 2)).collect();
    let all: std::collections::BTreeSet<(u64, u64)> =
        (0..4).flat_map(|s| (0..4).filter(move |d| *d != s).map(move |d| (s, d))).collect();
    assert_eq!(measured, all);
    assert!(out.stdout.contains("p50 GB/s at 4 MiB"), "{}", out.stdout);

    let json = t.arg("incast.json");
    let incast_args: Vec<&str> = ["--pattern", "incast", "--json", &json].into_iter().chain(sizes).collect();
    cluster_of_four(&r, &incast_args, limit);
    let v = read_json(Path::new(&json));
    let cases = v["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 6, "3 flows × 2 sizes");
    let into_0: Vec<(u64, u64)> = cases.iter().map(|c| cluster_case(&r, c, 3)).collect();
    assert!(into_0.iter().all(|(_, dst)| *dst == 0), "{into_0:?}");
    let aggregates = v["cluster"]["aggregates"].as_array().unwrap();
    let sizes: Vec<u64> = aggregates.iter().map(|a| a["size_bytes"].as_u64().unwrap()).collect();
    assert_eq!(sizes, [1 << 20, 4 << 20]);
    assert!(aggregates.iter().all(|a| a["flows"] == 3 && num(&a["gbps"], "p50") > 0.0), "{aggregates:?}");
}

/// The second rail of each side in the VM's rails mode (`RXE_VM_NET=rails`, as scripts/test-rxe runs it): rxeA2 and
/// rxeB2 on a second veth pair. None (after saying why, or failing under `KVXFER_REQUIRE_RXE`) when absent.
fn second_rails() -> Option<(String, String)> {
    let why = match (std::env::var("RXE_A2_DEV"), std::env::var("RXE_B2_DEV")) {
        (Ok(a2), Ok(b2)) if rdma_device(&a2) && rdma_device(&b2) => return Some((a2, b2)),
        (Ok(a2), Ok(b2)) => format!("no rdma device {a2} or {b2} here, although RXE_A2_DEV/RXE_B2_DEV name them"),
        _ => "no second rail (run in scripts/rxe-vm with RXE_VM_NET=rails, as scripts/test-rxe does)".to_string(),
    };
    missing_hardware(REQUIRE, 0, &why);
    None
}

/// A case's rails: every rep striped over both devices of the sender, half the bytes each, and the case's summary
/// naming them.
fn check_rails(c: &serde_json::Value, size: u64, devices: [&str; 2]) {
    for rep in c["reps"].as_array().unwrap() {
        let rails = rep["rails"].as_array().unwrap_or_else(|| panic!("a striped rep lists its rails: {rep}"));
        let names: Vec<&str> = rails.iter().map(|r| r["device"].as_str().unwrap()).collect();
        assert_eq!(names, devices, "{rep}");
        let bytes: Vec<u64> = rails.iter().map(|r| r["bytes"].as_u64().unwrap()).collect();
        assert_eq!(bytes.iter().sum::<u64>(), size, "{rep}");
        // 64 KiB writes dealt in turn: the shares differ by at most one write.
        assert!(bytes[0].abs_diff(bytes[1]) <= 64 << 10, "{rep}");
        assert!(rails.iter().all(|r| num(r, "gbps") > 0.0 && num(r, "ms") > 0.0), "{rep}");
    }
    let summary = c["rails"].as_array().unwrap_or_else(|| panic!("the case summarises its rails: {c}"));
    assert_eq!(summary.len(), 2, "{c}");
    assert!(summary.iter().all(|r| (num(r, "share") - 0.5).abs() < 0.05), "{c}");
}

#[test]
#[ignore = "needs soft-RoCE devices: scripts/test-rxe runs it in a VM (KVXFER_REQUIRE_RXE=1, --include-ignored)"]
fn send_and_serve_stripe_one_transfer_over_two_rails() {
    let Some(r) = rxe() else { return };
    let Some((a2, b2)) = second_rails() else { return };
    let t = TempDir::new("verbs-rails");
    let a_rails = format!("{},{a2}", r.a_dev);
    let b_rails = format!("{},{b2}", r.b_dev);
    let addr = format!("{}:{}", r.a_ip, free_port());
    let mut serve = Proc::spawn(&["serve", "--listen", &addr, "--token", TOKEN, "-d", &a_rails, "--once"]);
    assert!(serve.stderr.wait_for("listening on", Duration::from_secs(30)), "{}", serve.stderr.text());
    let json = t.arg("r.json");
    let mut args = send_args(&r, &addr, &["--sizes", "4MiB,16MiB", "--reps", "3", "--verify", "--json", &json]);
    // This test's sender stripes over both of its devices.
    let d = args.iter().position(|a| *a == "-d").unwrap() + 1;
    args[d] = &b_rails;
    let out = run(&args);
    out.expect_code(0);
    assert!(out.stdout.contains(&format!("rails at 4 MiB: {} ", r.b_dev)), "the notes name each rail: {}", out.stdout);
    assert_eq!(serve.wait_timeout(Duration::from_secs(10)).and_then(|s| s.code()), Some(0), "serve --once exits 0");
    let v = read_json(Path::new(&json));
    for (c, mib) in v["cases"].as_array().unwrap().iter().zip([4u64, 16]) {
        check_case(c, mib << 20, 3, true);
        check_rails(c, mib << 20, [&r.b_dev, &b2]);
    }
    let d = &v["config"]["transport_detail"];
    let ports = |side: &str| -> Vec<String> {
        d[side]["rails"].as_array().unwrap().iter().map(|p| p["device"].as_str().unwrap().to_string()).collect()
    };
    assert_eq!(ports("sender"), [r.b_dev.clone(), b2.clone()], "{d}");
    assert_eq!(ports("receiver"), [r.a_dev.clone(), a2.clone()], "{d}");
}

#[test]
#[ignore = "needs soft-RoCE devices: scripts/test-rxe runs it in a VM (KVXFER_REQUIRE_RXE=1, --include-ignored)"]
fn a_sweep_stripes_over_two_rails_and_unequal_rail_counts_are_refused() {
    let Some(r) = rxe() else { return };
    let Some((a2, b2)) = second_rails() else { return };
    let t = TempDir::new("verbs-rails-sweep");
    let json = t.arg("s.json");
    let (b_rails, a_rails) = (format!("{}+{b2}", r.b_dev), format!("{},{a2}", r.a_dev));
    let (dir, size) = (t.arg(""), "2MiB");
    let base = ["sweep", "--transport", "verbs", "--sizes", size, "--reps", "3", "--verify", "--ack-timeout", "18"];
    let mut args: Vec<&str> = base.to_vec();
    args.extend(["-d", &b_rails, "--peer-device", &a_rails, "--json", &json, "--out-dir", &dir]);
    run(&args).expect_code(0);
    let c = &read_json(Path::new(&json))["cases"][0];
    check_case(c, 2 << 20, 3, true);
    check_rails(c, 2 << 20, [&r.b_dev, &b2]);
    // Two rails against one: refused before anything is sent, naming the fix.
    let mut args: Vec<&str> = base.to_vec();
    args.extend(["-d", &b_rails, "--peer-device", &r.a_dev, "--out-dir", &dir]);
    let out = run(&args);
    out.expect_code(2);
    assert!(out.one_error().contains("same number of rails"), "{}", out.stderr);
    // And between processes: the receiver's offer has one rail, the sender two.
    let (mut serve, addr) = serve_on_a(&r, &["--once"]);
    let mut args = send_args(&r, &addr, &["--sizes", size, "--reps", "1"]);
    let d = args.iter().position(|a| *a == "-d").unwrap() + 1;
    args[d] = &b_rails;
    let out = run(&args);
    out.expect_code(2);
    assert!(out.one_error().contains("same number of -d devices"), "{}", out.stderr);
    let _ = serve.wait_timeout(Duration::from_secs(10));
}

/// Rail 2's egress slowed to 40 Mbit/s by netem (queued, never dropped: soft-RoCE's retransmissions are fragile): it
/// carries its half of the bytes far slower than rail 1, and the case flags it by name.
#[test]
#[ignore = "needs soft-RoCE devices: scripts/test-rxe runs it in a VM (KVXFER_REQUIRE_RXE=1, --include-ignored)"]
fn a_rail_slowed_by_netem_is_flagged_as_lagging() {
    let Some(r) = rxe() else { return };
    let Some((a2, b2)) = second_rails() else { return };
    let netdev = std::env::var("RXE_B2_NETDEV").expect("the rails mode names rxeB2's netdev");
    let tc = |args: &[&str]| {
        let st = std::process::Command::new("tc").args(args).status().expect("tc runs");
        assert!(st.success(), "tc {args:?} failed");
    };
    tc(&["qdisc", "add", "dev", &netdev, "root", "netem", "rate", "40mbit", "limit", "100000"]);
    // Taken off however the test ends, so the later tests see two even rails.
    struct Unshape(String);
    impl Drop for Unshape {
        fn drop(&mut self) {
            let _ = std::process::Command::new("tc").args(["qdisc", "del", "dev", &self.0, "root"]).status();
        }
    }
    let _unshape = Unshape(netdev);
    let t = TempDir::new("verbs-lagging-rail");
    let json = t.arg("s.json");
    let (b_rails, a_rails) = (format!("{},{b2}", r.b_dev), format!("{},{a2}", r.a_dev));
    // One queue pair of 8 outstanding 64 KiB writes per rail: at most 512 KiB queue in netem (~100 ms), well inside
    // the ACK timeout.
    let knobs = ["--qps", "1", "--inflight", "8", "--batch", "4", "--signal-every", "4", "--ack-timeout", "18"];
    let mut args = vec!["sweep", "--transport", "verbs", "-d", &b_rails, "--peer-device", &a_rails];
    args.extend(knobs);
    let dir = t.arg("");
    args.extend(["--sizes", "4MiB", "--reps", "5", "--verify", "--json", &json, "--out-dir", &dir]);
    let out = run(&args);
    out.expect_code(0);
    let c = &read_json(Path::new(&json))["cases"][0];
    check_case(c, 4 << 20, 5, true);
    check_rails(c, 4 << 20, [&r.b_dev, &b2]);
    let lagging: Vec<bool> = c["rails"].as_array().unwrap().iter().map(|x| x["lagging"].as_bool().unwrap()).collect();
    assert_eq!(lagging, [false, true], "{}", c["rails"]);
    let warning = c["warnings"].as_array().unwrap().iter().find(|w| w["kind"] == "lagging_rail");
    let warning = warning.unwrap_or_else(|| panic!("a lagging_rail warning: {}", c["warnings"]));
    assert!(warning["message"].as_str().unwrap().contains(&b2), "{warning}");
    assert!(out.stdout.contains(&format!("{b2} ")) && out.stdout.contains("lagging"), "{}", out.stdout);
}

/// Mooncake Transfer Engine over its RDMA transport between the two soft-RoCE devices (serve's engine on rxeA, the
/// sender's on rxeB, GID index 1 handed to the engine as MC_GID_INDEX), verified; its TCP fallback cannot pass for
/// RDMA here because kvxfer checks that the engine found the devices. Needs the engine venv (scripts/test passes
/// KVXFER_ENGINES_PYTHON into the VM; KVXFER_REQUIRE_ENGINES=1 makes its absence a failure).
#[test]
#[ignore = "needs soft-RoCE devices: scripts/test-rxe runs it in a VM (KVXFER_REQUIRE_RXE=1, --include-ignored)"]
fn mooncake_over_rdma_between_two_rxe_devices_verifies() {
    let Some(r) = rxe() else { return };
    let py = match std::env::var("KVXFER_ENGINES_PYTHON") {
        Ok(py) if Path::new(&py).exists() => py,
        _ => {
            missing_hardware("KVXFER_REQUIRE_ENGINES", 0, "no engine venv (KVXFER_ENGINES_PYTHON)");
            return;
        }
    };
    let t = TempDir::new("verbs-mooncake");
    let addr = format!("{}:{}", r.a_ip, free_port());
    let gid = ["--gid-index", "1"];
    let serve_args = [&["serve", "--listen", &addr, "--token", TOKEN, "-d", &r.a_dev, "--once"][..], &gid[..]].concat();
    let mut serve = Proc::start(common::kvxfer().env("KVXFER_PYTHON", &py).args(&serve_args), "serve".into());
    assert!(serve.stderr.wait_for("listening on", Duration::from_secs(30)), "{}", serve.stderr.text());
    let json = t.arg("m.json");
    let send = [
        "send",
        "--peer",
        &addr,
        "--token",
        TOKEN,
        "--transport",
        "mooncake",
        "--mooncake-protocol",
        "rdma",
        "-d",
        &r.b_dev,
        "--gid-index",
        "1",
        "--sizes",
        "1MiB,8MiB",
        "--reps",
        "3",
        "--verify",
        "--json",
        &json,
    ];
    let out = Proc::start(common::kvxfer().env("KVXFER_PYTHON", &py).args(send), "send".into()).finish();
    out.expect_code(0);
    assert_eq!(serve.wait_timeout(Duration::from_secs(30)).and_then(|s| s.code()), Some(0), "{}", serve.stderr.text());
    let v = read_json(Path::new(&json));
    for (c, mib) in v["cases"].as_array().unwrap().iter().zip([1u64, 8]) {
        check_case(c, mib << 20, 3, true);
    }
    let d = &v["config"]["transport_detail"]["sender"];
    assert_eq!((d["protocol"].as_str(), d["devices"].as_str()), (Some("rdma"), Some(r.b_dev.as_str())), "{d}");
}

/// `tc` in the guest, failing the test when it fails.
fn tc(args: &[&str]) {
    let st = std::process::Command::new("tc").args(args).status().expect("tc runs");
    assert!(st.success(), "tc {args:?} failed");
}

/// The last packet of every odd measured rep is lost on its way into the receiver, and the case's
/// attribution names soft-RoCE's retransmission counters as what sets those reps apart. A tc filter on rxeA's
/// netdev drops the rep's final packet (RDMA WRITE last/only with immediate, BTH opcode 0x09/0x0b) once and lets
/// its retransmission through; `--prepare` installs it before the odd reps and removes it before the others, so
/// loss and reps line up exactly. Nothing follows that packet, so the sender waits out one ACK timeout and
/// retransmits: one slow mode, one fast. Needs a one-CPU guest (scripts/test-rxe runs it so): with two, the guest
/// reorders packets and rxe retransmits in every rep on its own.
#[test]
#[ignore = "needs soft-RoCE devices: scripts/test-rxe runs it in a VM (KVXFER_REQUIRE_RXE=1, --include-ignored)"]
fn attribution_names_the_retransmissions_of_the_reps_that_lost_a_packet() {
    if std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) > 1 {
        eprintln!("skipped: needs a one-CPU guest (RXE_VM_CPUS=1); scripts/test-rxe runs it so");
        return;
    }
    let Some(r) = rxe() else { return };
    let netdev = std::env::var("RXE_A_NETDEV").expect("scripts/rxe-vm names rxeA's netdev");
    struct Unfilter(String);
    impl Drop for Unfilter {
        fn drop(&mut self) {
            let _ = std::process::Command::new("tc").args(["qdisc", "del", "dev", &self.0, "clsact"]).status();
        }
    }
    let _unfilter = Unfilter(netdev.clone());
    // Checked once here, so a guest without the tc modules fails naming them rather than mid-run.
    tc(&["qdisc", "add", "dev", &netdev, "clsact"]);
    tc(&["qdisc", "del", "dev", &netdev, "clsact"]);
    let prepare = format!(
        "tc qdisc del dev {netdev} clsact 2>/dev/null; \
         if [ \"$KVXFER_WARMUP\" = 0 ] && [ $((KVXFER_REP % 2)) = 1 ]; then \
           tc qdisc add dev {netdev} clsact && \
           tc filter add dev {netdev} ingress protocol ip u32 match ip protocol 17 0xff match ip dport 4791 0xffff \
             match u8 0x09 0xfd at 28 action gact drop random determ ok 2; \
         fi"
    );
    let t = TempDir::new("verbs-attribution");
    let (json, dir) = (t.arg("a.json"), t.arg(""));
    let dev = ["-d", &r.b_dev, "--peer-device", &r.a_dev];
    let knobs = ["--qps", "1", "--ack-timeout", "18", "--sizes", "8MiB", "--reps", "8", "--warmup", "1", "--verify"];
    let mut args = vec!["sweep", "--transport", "verbs"];
    args.extend(dev);
    args.extend(knobs);
    args.extend(["--prepare", &prepare, "--json", &json, "--out-dir", &dir]);
    let out = run(&args);
    out.expect_code(0);
    let c = &read_json(Path::new(&json))["cases"][0];
    check_case(c, 8 << 20, 8, true);
    let retries =
        |rep: &serde_json::Value| rep["counters"][format!("sender rdma {}:1", r.b_dev)]["completer_retry_err"].as_u64();
    for rep in c["reps"].as_array().unwrap() {
        let lossy = rep["i"].as_u64().unwrap() % 2 == 1;
        assert_eq!(retries(rep).is_some(), lossy, "a retransmission in exactly the lossy reps: {rep}");
    }
    let a = &c["attribution"];
    let slow: Vec<u64> = a["slow_reps"]
        .as_array()
        .unwrap_or_else(|| panic!("attributed: {c}"))
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert_eq!(slow, [1, 3, 5, 7], "the slow reps are the lossy ones: {a}");
    let named: Vec<(&str, &str)> = a["counters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| (x["source"].as_str().unwrap(), x["name"].as_str().unwrap()))
        .collect();
    let retransmission = ["completer_retry_err", "duplicate_request", "rcvd_seq_err", "out_of_seq_request"];
    assert!(
        named.iter().any(|(s, n)| s.contains(" rdma rxe") && retransmission.contains(n)),
        "attribution names no retransmission counter: {a}"
    );
    assert!(out.stdout.contains("why at 8 MiB") && out.stdout.contains("completer_retry_err"), "{}", out.stdout);
}
