//! The engines serving stacks use, as kvxfer transports, for real: Mooncake Transfer Engine (the PyPI wheel, driven
//! through kvxfer's Python worker) over its TCP transport on loopback, verified, contiguous and paged; and what a user
//! meets without Python, without the wheel, or asking for RDMA where there is no RDMA device. The wheel lives in the
//! venv `scripts/setup --test` makes (`KVXFER_ENGINES_PYTHON` names its python). The tests that need it are
//! `#[ignore]`d, with the reason; scripts/test runs them (`--run-ignored only`) with `KVXFER_REQUIRE_ENGINES=1`, under
//! which a test that finds no wheel fails (run by hand with `--include-ignored` and no wheel, it says why it skips).

mod common;
use common::*;
use std::path::Path;
use std::time::Duration;

const REQUIRE: &str = "KVXFER_REQUIRE_ENGINES";

/// The python that has the Mooncake wheel, or None (after saying why, or failing under `KVXFER_REQUIRE_ENGINES`).
fn engines_python() -> Option<String> {
    let why = match std::env::var("KVXFER_ENGINES_PYTHON") {
        Ok(py) => {
            let ok = std::process::Command::new(&py)
                .args(["-c", "import mooncake.engine"])
                .output()
                .is_ok_and(|o| o.status.success());
            if ok {
                return Some(py);
            }
            format!("{py} cannot import mooncake.engine (scripts/setup --test installs it)")
        }
        Err(_) => {
            "KVXFER_ENGINES_PYTHON is not set (scripts/test sets it to the venv scripts/setup --test makes)".into()
        }
    };
    missing_hardware(REQUIRE, 0, &why);
    None
}

/// kvxfer with `python` as the engine worker's interpreter.
fn with_python(python: &str, args: &[&str]) -> Out {
    Proc::start(kvxfer().env("KVXFER_PYTHON", python).args(args), format!("kvxfer {}", args.join(" "))).finish()
}

/// `kvxfer sweep --transport mooncake` of 3 verified reps plus `extra`, which must succeed; its results.
fn mooncake_sweep(py: &str, t: &TempDir, extra: &[&str]) -> serde_json::Value {
    let (json, dir) = (t.arg("r.json"), t.arg(""));
    let base = ["sweep", "--transport", "mooncake", "--reps", "3", "--verify", "--json", &json, "--out-dir", &dir];
    with_python(py, &[&base[..], extra].concat()).expect_code(0);
    read_json(Path::new(&json))
}

fn detail(v: &serde_json::Value) -> &serde_json::Value {
    &v["config"]["transport_detail"]["sender"]
}

#[test]
#[ignore = "needs the engine wheels: scripts/test runs it (KVXFER_REQUIRE_ENGINES=1, --run-ignored)"]
fn mooncake_tcp_contiguous_sweep_verifies_every_rep() {
    let Some(py) = engines_python() else { return };
    let t = TempDir::new("mooncake");
    let v = mooncake_sweep(&py, &t, &["--sizes", "1MiB,16MiB,64MiB", "--block-size", "4MiB"]);
    for (c, mib) in v["cases"].as_array().unwrap().iter().zip([1u64, 16, 64]) {
        check_case(c, mib << 20, 3, true);
    }
    assert_eq!(v["config"]["transport"], "mooncake");
    let d = detail(&v);
    assert_eq!(d["engine"], "mooncake", "{d}");
    assert_eq!(d["protocol"], "tcp", "{d}");
    assert!(d["version"].as_str().is_some_and(|s| s.starts_with("0.")), "the wheel's version: {d}");
    assert_eq!(d["version"], v["config"]["transport_detail"]["receiver"]["version"], "{d}");
    // 64 MiB in 4 MiB writes, back to back on both ends: the connector's grouping makes them one entry.
    let c = &v["cases"][2];
    assert_eq!((c["writes"].as_u64(), c["descriptors"].as_u64()), (Some(16), Some(1)), "{c}");
    // transfer_engine_bench's shape: an entry per write.
    let t = TempDir::new("mooncake-per-write");
    let v = mooncake_sweep(&py, &t, &["--sizes", "16MiB", "--block-size", "1MiB", "--mooncake-entries", "per-write"]);
    let c = &v["cases"][0];
    check_case(c, 16 << 20, 3, true);
    assert_eq!((c["writes"].as_u64(), c["descriptors"].as_u64()), (Some(16), Some(16)), "{c}");
    assert_eq!(detail(&v)["entries"], "per-write");
}

#[test]
#[ignore = "needs the engine wheels: scripts/test runs it (KVXFER_REQUIRE_ENGINES=1, --run-ignored)"]
fn mooncake_tcp_paged_transfer_sends_one_entry_per_piece_and_verifies() {
    let Some(py) = engines_python() else { return };
    let t = TempDir::new("mooncake-paged");
    let v = mooncake_sweep(&py, &t, &["--layout", "paged", "--model", "qwen3-30b-a3b", "--tokens", "64,256"]);
    let cases = v["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 2);
    for c in cases {
        check_case(c, c["size_bytes"].as_u64().unwrap(), 3, true);
        assert_eq!(c["layout"], "paged", "{c}");
    }
    // Random destination slots: no two pieces line up on both ends, so the batch has an entry per piece.
    for c in cases {
        assert_eq!(c["descriptors"], c["writes"], "{c}");
        assert!(c["reps"].as_array().unwrap().iter().all(|r| r["descriptors"] == c["writes"]), "{c}");
    }
}

#[test]
#[ignore = "needs the engine wheels: scripts/test runs it (KVXFER_REQUIRE_ENGINES=1, --run-ignored)"]
fn mooncake_between_serve_and_send_processes() {
    let Some(py) = engines_python() else { return };
    serve_and_send(&py, &["--transport", "mooncake"]);
}

/// `kvxfer serve --once` and `kvxfer send --transport TRANSPORT` as two processes on loopback: 3 verified reps of
/// 8 MiB, and serve exits 0 after the session.
fn serve_and_send(py: &str, transport: &[&str]) {
    let t = TempDir::new(&format!("{}-serve", transport[1]));
    let json = t.arg("s.json");
    let addr = format!("127.0.0.1:{}", free_port());
    let mut serve =
        Proc::start(kvxfer().env("KVXFER_PYTHON", py).args(["serve", "--listen", &addr, "--once"]), "serve".into());
    assert!(serve.stderr.wait_for("listening on", Duration::from_secs(30)), "{}", serve.stderr.text());
    let args = ["send", "--peer", &addr, "--sizes", "8MiB", "--reps", "3", "--verify", "--json", &json];
    with_python(py, &[&args[..], transport].concat()).expect_code(0);
    assert_eq!(serve.wait_timeout(Duration::from_secs(20)).and_then(|s| s.code()), Some(0), "{}", serve.stderr.text());
    let timed_by = if transport.contains(&"read") { TimedBy::Receiver } else { TimedBy::Sender };
    check_case_timed(&read_json(Path::new(&json))["cases"][0], 8 << 20, 3, true, timed_by);
}

#[test]
fn mooncake_without_python_or_without_the_wheel_says_what_to_install() {
    let t = TempDir::new("mooncake-missing");
    let base = ["sweep", "--transport", "mooncake", "--sizes", "1MiB", "--reps", "1"];
    let dir = t.arg("");
    let args = [&base[..], &["--out-dir", &dir]].concat();
    let out = with_python("/nonexistent/python3", &args);
    out.expect_code(1).no_panic();
    let line = out.one_error();
    assert!(line.contains("KVXFER_PYTHON") && line.contains("not found"), "{line}");
    // A Python that cannot see any site-packages: no wheel, whatever this machine has installed.
    let bare = t.join("bare-python");
    std::fs::write(&bare, "#!/bin/sh\nexec python3 -S \"$@\"\n").unwrap();
    std::fs::set_permissions(&bare, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = with_python(bare.to_str().unwrap(), &args);
    out.expect_code(1).no_panic();
    let line = out.one_error();
    assert!(line.contains("pip install mooncake-transfer-engine-non-cuda"), "{line}");
}

/// What Mooncake cannot do here is refused in one line before anything moves, never done some other way: rdma
/// without an RDMA device (the engine would quietly fall back to TCP), nvlink-intra with host memory, and a
/// protocol Mooncake does not have (a usage error).
#[test]
#[ignore = "needs the engine wheels: scripts/test runs it (KVXFER_REQUIRE_ENGINES=1, --run-ignored)"]
fn mooncake_protocols_it_cannot_use_here_are_refused_in_one_line_not_silently_tcp() {
    let Some(py) = engines_python() else { return };
    let rdma_here = Path::new("/sys/class/infiniband").read_dir().is_ok_and(|mut d| d.next().is_some());
    let t = TempDir::new("mooncake-refused");
    let dir = t.arg("");
    // (--mooncake-protocol, exit code, what its one error line says)
    for (protocol, code, said) in [
        ("rdma", 1, &["no RDMA device", "fall back to TCP"][..]),
        ("nvlink-intra", 2, &["nvlink-intra moves GPU memory only", "serve/send --mem"]),
        ("udp", 2, &["udp"]),
    ] {
        if protocol == "rdma" && rdma_here {
            eprintln!("skipped rdma: this host has RDMA devices (the refusal is for hosts without)");
            continue;
        }
        let args = ["sweep", "--transport", "mooncake", "--mooncake-protocol", protocol, "--sizes", "1MiB"];
        let out = with_python(&py, &[&args[..], &["--out-dir", &dir]].concat());
        out.expect_code(code).no_panic();
        let line = out.one_error();
        assert!(said.iter().all(|s| line.contains(s)), "--mooncake-protocol {protocol}: {line}");
    }
}

/// The engine venv's python when it has the NIXL wheel, or None (after saying why, or failing under
/// `KVXFER_REQUIRE_ENGINES`).
fn nixl_python() -> Option<String> {
    let py = engines_python()?;
    let probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('nixl_cu12') is None)";
    if std::process::Command::new(&py).args(["-c", probe]).status().is_ok_and(|s| s.success()) {
        return Some(py);
    }
    missing_hardware(REQUIRE, 0, &format!("{py} has no nixl_cu12 (scripts/setup --test installs it)"));
    None
}

/// nixl over UCX on loopback, `--nixl-op OP`: contiguous and paged sweeps verify every rep, with one descriptor
/// per write, and the results name the engine, backend and op.
fn nixl_sweeps_verify(op: &str) {
    let timed_by = if op == "read" { TimedBy::Receiver } else { TimedBy::Sender };
    let Some(py) = nixl_python() else { return };
    let t = TempDir::new(&format!("nixl-{op}"));
    let (json, dir) = (t.arg("n.json"), t.arg(""));
    let base = [
        "sweep",
        "--transport",
        "nixl",
        "--nixl-op",
        op,
        "--reps",
        "3",
        "--verify",
        "--json",
        &json,
        "--out-dir",
        &dir,
    ];
    let contiguous = ["--sizes", "1MiB,16MiB", "--block-size", "4MiB"];
    with_python(&py, &[&base[..], &contiguous[..]].concat()).expect_code(0);
    let v = read_json(Path::new(&json));
    for (c, mib) in v["cases"].as_array().unwrap().iter().zip([1u64, 16]) {
        check_case_timed(c, mib << 20, 3, true, timed_by);
        assert_eq!(c["descriptors"], c["writes"], "{c}");
    }
    let d = detail(&v);
    assert_eq!(
        (d["engine"].as_str(), d["backend"].as_str(), d["op"].as_str(), d["memory"].as_str()),
        (Some("nixl"), Some("UCX"), Some(op), Some("dram"))
    );
    assert!(d["library"].as_str().is_some_and(|l| l.ends_with("libnixl_capi.so")), "{d}");
    assert_eq!(d["env"]["UCX_MODULES"], "^efa", "the EFA module stays out: {d}");
    let paged = ["--layout", "paged", "--model", "qwen3-30b-a3b", "--tokens", "64,256"];
    with_python(&py, &[&base[..], &paged[..]].concat()).expect_code(0);
    let v = read_json(Path::new(&json));
    for c in v["cases"].as_array().unwrap() {
        check_case_timed(c, c["size_bytes"].as_u64().unwrap(), 3, true, timed_by);
        assert_eq!(c["descriptors"], c["writes"], "{c}");
        assert!(c["writes"].as_u64().unwrap() > 1, "paged: a descriptor per piece: {c}");
    }
}

#[test]
#[ignore = "needs the engine wheels: scripts/test runs it (KVXFER_REQUIRE_ENGINES=1, --run-ignored)"]
fn nixl_ucx_write_sweeps_verify_with_a_descriptor_per_write() {
    nixl_sweeps_verify("write");
}

/// The decode side pulls: the receiver READs with prepped descriptor lists and times the READ.
#[test]
#[ignore = "needs the engine wheels: scripts/test runs it (KVXFER_REQUIRE_ENGINES=1, --run-ignored)"]
fn nixl_ucx_read_sweeps_verify_with_a_descriptor_per_piece() {
    nixl_sweeps_verify("read");
}

/// A backend whose plugin cannot load here (the wheel's libfabric plugin wants CUDA and libfabric >= 1.10) is
/// one line naming the plugin and what the loader missed; where it loads, it moves verified bytes.
#[test]
#[ignore = "needs the engine wheels: scripts/test runs it (KVXFER_REQUIRE_ENGINES=1, --run-ignored)"]
fn nixl_libfabric_backend_moves_verified_bytes_or_names_what_its_plugin_lacks() {
    let Some(py) = nixl_python() else { return };
    let t = TempDir::new("nixl-libfabric");
    let dir = t.arg("");
    let args = ["sweep", "--transport", "nixl", "--nixl-backend", "libfabric", "--sizes", "1MiB", "--reps", "2"];
    let out = with_python(&py, &[&args[..], &["--verify", "--out-dir", &dir]].concat());
    out.no_panic();
    if out.code != Some(0) {
        out.expect_code(1);
        let line = out.one_error();
        assert!(line.contains("--nixl-backend libfabric") && line.contains("libplugin_LIBFABRIC.so"), "{line}");
        // The receiver's reason arrives whole: the library the plugin missed and the loader's words about it.
        assert!(!line.ends_with('…') && line.contains("does not load: "), "{line}");
        let reason = line.rsplit("does not load: ").next().unwrap();
        assert!(reason.split(": ").count() >= 2, "the loader's reason after the library it missed: {line}");
    }
    // A backend NIXL does not have is a usage error before anything starts.
    with_python(&py, &["sweep", "--transport", "nixl", "--nixl-backend", "gds", "--sizes", "1MiB"]).expect_code(2);
}

#[test]
#[ignore = "needs the engine wheels: scripts/test runs it (KVXFER_REQUIRE_ENGINES=1, --run-ignored)"]
fn nixl_between_serve_and_send_processes() {
    let Some(py) = nixl_python() else { return };
    serve_and_send(&py, &["--transport", "nixl"]);
    serve_and_send(&py, &["--transport", "nixl", "--nixl-op", "read"]);
}

#[test]
fn nixl_without_its_library_says_what_to_install() {
    let t = TempDir::new("nixl-missing");
    let dir = t.arg("");
    let args = ["sweep", "--transport", "nixl", "--sizes", "1MiB", "--reps", "1", "--out-dir", &dir];
    let out = Proc::start(kvxfer().env("KVXFER_NIXL_LIB", t.path()).args(args), "sweep".into()).finish();
    out.expect_code(1).no_panic();
    let line = out.one_error();
    assert!(line.contains("KVXFER_NIXL_LIB") && line.contains("pip install --no-deps nixl-cu12"), "{line}");
    // A Python without the wheel.
    let out = with_python("/nonexistent/python3", &args);
    out.expect_code(1).no_panic();
    assert!(out.one_error().contains("pip install --no-deps nixl-cu12"), "{}", out.stderr);
}

/// A receiver that dies mid-transfer: the sender, blocked in the engine's synchronous batch call, is told by the
/// control connection and exits 1 within 10 s naming it, instead of waiting on the engine.
#[test]
#[ignore = "needs the engine wheels: scripts/test runs it (KVXFER_REQUIRE_ENGINES=1, --run-ignored)"]
fn mooncake_sender_fails_within_seconds_when_the_receiver_dies_mid_transfer() {
    let Some(py) = engines_python() else { return };
    let ev_dir = TempDir::new("mooncake-kill-ev");
    let events = Events::fifo(ev_dir.join("e.jsonl"));
    let addr = format!("127.0.0.1:{}", free_port());
    let mut serve =
        Proc::start(kvxfer().env("KVXFER_PYTHON", &py).args(["serve", "--listen", &addr, "--once"]), "serve".into());
    assert!(serve.stderr.wait_for("listening on", Duration::from_secs(30)), "{}", serve.stderr.text());
    // 50 reps of 512 MiB at about 1.3 GB/s: tens of seconds of engine calls, during which the receiver dies.
    let args = ["send", "--peer", &addr, "--transport", "mooncake", "--sizes", "512MiB", "--reps", "50"];
    let ev = events.arg();
    let mut send = Proc::start(kvxfer().env("KVXFER_PYTHON", &py).args(args).args(["--events", &ev]), "send".into());
    events.wait_rep(0, false, 0, Duration::from_secs(120));
    serve.kill();
    let status = send.wait_timeout(Duration::from_secs(10));
    assert!(status.is_some(), "send still running 10 s after the receiver died:\n{}", send.stderr.text());
    let out = send.finish();
    out.expect_code(1).no_panic();
    assert!(out.one_error().contains("receiver"), "{}", out.stderr);
}

/// A seeded stream replayed over `transport`, every byte verified: every request is recorded once, and each
/// request's service (its start → the sender knew its bytes had landed) holds its transfer — a receiver that pulls
/// must not have read the bytes before the request was due.
fn replay_verifies(py: &str, transport: &[&str]) {
    let t = TempDir::new("engine-replay");
    let json = t.arg("r.json");
    let stream = ["--arrivals", "poisson:40", "--requests", "30", "--prompt-tokens", "uniform:16..128"];
    let base = ["replay", "--model", "llama-3.1-8b", "--seed", "5", "--verify", "--json", &json];
    with_python(py, &[&base[..], &stream[..], transport].concat()).expect_code(0);
    let v = read_json(Path::new(&json));
    let load = &v["replay"]["loads"][0];
    assert_eq!(load["summary"]["mismatched_bytes"], 0, "{transport:?}: {}", load["summary"]);
    let reqs = load["requests"].as_array().unwrap();
    let mut ids: Vec<u64> = reqs.iter().map(|r| r["id"].as_u64().unwrap()).collect();
    ids.dedup();
    assert_eq!(ids.len(), 30, "{transport:?}: every request once");
    for r in reqs {
        let (service, transfer) = (r["service_ms"].as_f64().unwrap(), r["transfer_ms"].as_f64().unwrap());
        assert!(transfer > 0.0 && service >= transfer * 0.999, "{transport:?}: service {service} < transfer: {r}");
        assert_eq!(r["mismatched_bytes"], 0, "{r}");
    }
}

#[test]
#[ignore = "needs the engine wheels: scripts/test runs it (KVXFER_REQUIRE_ENGINES=1, --run-ignored)"]
fn replay_over_mooncake_and_nixl_write_and_read_verifies_and_times_each_request_whole() {
    let Some(py) = nixl_python() else { return };
    replay_verifies(&py, &["--transport", "mooncake"]);
    replay_verifies(&py, &["--transport", "nixl"]);
    replay_verifies(&py, &["--transport", "nixl", "--nixl-op", "read"]);
}
