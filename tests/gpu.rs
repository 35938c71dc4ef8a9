//! GPU tests: real CUDA on real GPUs, through the real binary. Each test that needs a GPU is `#[ignore]`d, so that
//! without one (CI, laptops) `cargo test` lists it as ignored, with the reason, instead of passing it; the two tests
//! of what happens without a driver run everywhere. The GPU machine runs them all from the test binary
//! (`cargo test --release --no-run --test gpu` builds it) carried there with the kvxfer binary:
//!
//! ```text
//! KVXFER_BIN=$PWD/kvxfer KVXFER_REQUIRE_GPU=1 ./gpu-tests --test-threads 1 --include-ignored
//! ```
//!
//! `KVXFER_REQUIRE_GPU=N` promises N GPUs (1 if not a number): a test that then finds fewer fails instead of
//! skipping, so a harness that silently stops providing GPUs turns the run red; and a run that promises them but
//! leaves out `--include-ignored` fails ([`common::ignored_tests_run_where_promised`]).

mod common;
use common::{kvxfer as command, missing_hardware, read_json, TempDir};
use std::process::{Output, Stdio};

const REQUIRE: &str = "KVXFER_REQUIRE_GPU";

/// Number of GPUs the binary sees, or None (with the reason printed, or a failure: see [`missing_hardware`]) when
/// there is no usable driver or no GPU.
fn gpus() -> Option<usize> {
    let out = command().args(["devices", "--json"]).output().expect("run kvxfer devices");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("devices --json prints JSON");
    match v["gpus"].as_array() {
        Some(g) if !g.is_empty() => Some(g.len()),
        _ => {
            let why = format!("no GPU here ({})", v["gpu_error"].as_str().unwrap_or("no devices"));
            missing_hardware(REQUIRE, 0, &why);
            None
        }
    }
}

/// Whether the host driver reports any GPU, without skipping or failing: for the tests of what happens without one.
fn has_gpus() -> bool {
    let out = command().args(["devices", "--json"]).output().expect("run kvxfer devices");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("devices --json prints JSON");
    v["gpus"].as_array().is_some_and(|g| !g.is_empty())
}

fn kvxfer(args: &[&str]) -> Output {
    common::output_logged(args)
}

fn results(path: &std::path::Path) -> serde_json::Value {
    read_json(path)
}

/// Every case verified with zero mismatched bytes, `reps` measured reps each, and a plausible bandwidth.
fn assert_verified(r: &serde_json::Value, sizes: &[u64], reps: usize, min_gbps: f64) {
    let cases = r["cases"].as_array().unwrap();
    assert_eq!(cases.len(), sizes.len());
    for (c, &size) in cases.iter().zip(sizes) {
        assert_eq!(c["size_bytes"].as_u64(), Some(size));
        assert_eq!(c["n"].as_u64(), Some(reps as u64));
        assert_eq!(c["verified"], true, "{c}");
        assert_eq!(c["mismatched_bytes"].as_u64(), Some(0));
        let p50 = c["gbps"]["p50"].as_f64().unwrap();
        assert!(p50 > min_gbps, "size {size}: p50 {p50} GB/s below {min_gbps}");
    }
}

fn tmp(name: &str) -> TempDir {
    TempDir::new(&format!("gpu-{name}"))
}

/// `kvxfer sweep --transport cuda --verify ARGS` into a fresh directory; asserts success, returns the results.
fn verified_cuda_sweep(name: &str, args: &[&str]) -> serde_json::Value {
    let d = tmp(name);
    let json = d.join("r.json");
    let (json_arg, dir_arg) = (json.to_string_lossy().into_owned(), d.path().to_string_lossy().into_owned());
    let mut all = vec!["sweep", "--transport", "cuda", "--verify", "--json", &json_arg, "--out-dir", &dir_arg];
    all.extend_from_slice(args);
    let out = kvxfer(&all);
    assert!(out.status.success(), "{args:?}");
    results(&json)
}

fn two_gpus() -> bool {
    match gpus() {
        Some(n) if n >= 2 => true,
        Some(n) => {
            missing_hardware(REQUIRE, n, &format!("needs 2 GPUs, found {n}"));
            false
        }
        None => false,
    }
}

/// A run that promises the hardware includes the ignored tests that need it.
#[test]
fn ignored_tests_run_where_the_harness_promises_their_hardware() {
    common::ignored_tests_run_where_promised();
}

#[test]
#[ignore = "needs 2 GPUs: the GPU machine runs it (KVXFER_REQUIRE_GPU=1, --include-ignored: see tests/gpu.rs)"]
fn in_process_nvlink_copy_engine_verified_96mib_to_12gib() {
    if !two_gpus() {
        return;
    }
    let r = verified_cuda_sweep(
        "inproc",
        &["--src", "gpu:0", "--dst", "gpu:1", "--sizes", "96MiB,1536MiB,12GiB", "--reps", "3"],
    );
    // NVLink: well above any PCIe or NIC path.
    assert_verified(&r, &[96 << 20, 1536 << 20, 12 << 30], 3, 100.0);
}

#[test]
#[ignore = "needs 2 GPUs: the GPU machine runs it (KVXFER_REQUIRE_GPU=1, --include-ignored: see tests/gpu.rs)"]
fn in_process_sm_copy_and_chunked_streams_verified() {
    if !two_gpus() {
        return;
    }
    for extra in [&["--copy", "sm"][..], &["--streams", "4", "--block-size", "7MiB"][..]] {
        let mut args = vec!["--src", "gpu:0", "--dst", "gpu:1", "--sizes", "96MiB,1000003KiB", "--reps", "2"];
        args.extend_from_slice(extra);
        assert_verified(&verified_cuda_sweep("sm", &args), &[96 << 20, 1000003 << 10], 2, 50.0);
    }
}

/// `--bidir` between host and GPU memory: pinned → GPU and GPU → pinned at once, each verified, each direction's
/// rate and the aggregate recorded (the aggregate at most their sum: its span covers both transfers).
#[test]
#[ignore = "needs a GPU: the GPU machine runs it (KVXFER_REQUIRE_GPU=1, --include-ignored: see tests/gpu.rs)"]
fn pinned_host_and_gpu_both_ways_at_once_verified() {
    let Some(_) = gpus() else { return };
    let args = ["--src", "pinned", "--dst", "gpu:0", "--sizes", "96MiB,1536MiB", "--reps", "3", "--bidir"];
    let r = verified_cuda_sweep("bidir", &args);
    assert_verified(&r, &[96 << 20, 1536 << 20], 3, 5.0);
    assert_eq!(r["config"]["bidir"], true);
    for c in r["cases"].as_array().unwrap() {
        assert_eq!(c["reverse_mismatched_bytes"].as_u64(), Some(0), "{c}");
        let (fwd, rev, agg) =
            (c["gbps"]["p50"].as_f64(), c["reverse_gbps"]["p50"].as_f64(), c["aggregate_gbps"]["p50"].as_f64());
        let (fwd, rev, agg) = (fwd.unwrap(), rev.expect("reverse_gbps"), agg.expect("aggregate_gbps"));
        assert!(rev > 5.0 && agg > rev.max(fwd) * 0.5, "fwd {fwd} rev {rev} aggregate {agg}");
        for rep in c["reps"].as_array().unwrap() {
            let sum = rep["gbps"].as_f64().unwrap() + rep["reverse_gbps"].as_f64().unwrap();
            assert!(rep["aggregate_gbps"].as_f64().unwrap() <= sum * 1.0001, "{rep}");
        }
    }
}

#[test]
#[ignore = "needs a GPU: the GPU machine runs it (KVXFER_REQUIRE_GPU=1, --include-ignored: see tests/gpu.rs)"]
fn pinned_host_to_gpu_and_back_verified() {
    let Some(_) = gpus() else { return };
    for (src, dst) in [("pinned", "gpu:0"), ("gpu:0", "pinned")] {
        let r = verified_cuda_sweep("pinned", &["--src", src, "--dst", dst, "--sizes", "1536MiB", "--reps", "3"]);
        assert_verified(&r, &[1536 << 20], 3, 10.0);
    }
}

/// Pageable host memory has no device-visible address, so the SM copy kernel cannot reach it: a paged layout
/// (thousands of pieces, which would go to that kernel) from `host` to a GPU goes through the copy engine, piece by
/// piece, and verifies; `--copy sm` with a `host` end is refused with one line.
#[test]
#[ignore = "needs a GPU: the GPU machine runs it (KVXFER_REQUIRE_GPU=1, --include-ignored: see tests/gpu.rs)"]
fn pageable_host_memory_to_a_gpu_never_meets_the_sm_kernel() {
    let Some(_) = gpus() else { return };
    let paged = ["--layout", "paged", "--model", "qwen3-30b-a3b", "--tokens", "1k", "--reps", "2"];
    let r = verified_cuda_sweep("pageable-paged", &[&["--src", "host", "--dst", "gpu:0"][..], &paged[..]].concat());
    assert_verified(&r, &[96 << 20], 2, 0.1);
    let out =
        kvxfer(&["sweep", "--transport", "cuda", "--copy", "sm", "--src", "host", "--dst", "gpu:0", "--sizes", "1MiB"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--copy sm needs device-visible memory") && err.contains("pinned"), "{err}");
}

/// `kvxfer serve --once --mem DST` on a free port, once it says it listens; returns it and its address.
fn serve_once(dst: &str) -> (std::process::Child, String) {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let listen = format!("127.0.0.1:{port}");
    let mut serve = command()
        .args(["serve", "--listen", &listen, "--once", "--mem", dst])
        .stderr(Stdio::piped())
        .spawn()
        .expect("start serve");
    let mut stderr = std::io::BufReader::new(serve.stderr.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stderr, &mut line).unwrap();
    assert!(line.contains("listening"), "{line}");
    // Keep draining its stderr (into the test log): a closed pipe would kill it at its next line.
    std::thread::spawn(move || {
        for l in std::io::BufRead::lines(stderr).map_while(Result::ok) {
            eprintln!("serve: {l}");
        }
    });
    (serve, listen)
}

/// `kvxfer send` to a `serve --once --mem DST` over cuda IPC with `--verify`; returns the results.
fn verified_ipc_send(name: &str, src: &str, dst: &str, args: &[&str]) -> serde_json::Value {
    let (mut serve, listen) = serve_once(dst);
    let d = tmp(name);
    let json = d.join("r.json");
    let mut all = vec!["send", "--peer", &listen, "--transport", "cuda", "--mem", src, "--verify"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--json", json.to_str().unwrap()]);
    let out = kvxfer(&all);
    assert!(out.status.success(), "{args:?}");
    assert!(serve.wait().unwrap().success(), "serve --once exits 0 after a good run");
    let r = results(&json);
    assert_eq!(r["config"]["dst_mem"], dst);
    r
}

#[test]
#[ignore = "needs a GPU: the GPU machine runs it (KVXFER_REQUIRE_GPU=1, --include-ignored: see tests/gpu.rs)"]
fn two_processes_cuda_ipc_verified() {
    let Some(n) = gpus() else { return };
    let (src, dst) = if n >= 2 { ("gpu:0", "gpu:1") } else { ("gpu:0", "gpu:0") };
    let r = verified_ipc_send("ipc", src, dst, &["--sizes", "96MiB,12GiB", "--reps", "3"]);
    assert_verified(&r, &[96 << 20, 12 << 30], 3, 50.0);
}

/// Gather staging: every piece lands in its own slot (verified), and the three steps account for the transfer.
fn assert_staged(r: &serde_json::Value) {
    assert_eq!(r["config"]["staging"], "gather");
    assert_eq!(r["config"]["transport_detail"]["sender"]["staging"], "gather", "what the transport did");
    for c in r["cases"].as_array().unwrap() {
        let s = &c["staged_p50"];
        let step = |k: &str| s[k].as_f64().unwrap_or_else(|| panic!("staged_p50.{k} missing: {c}"));
        let (g, k, sc) = (step("gather_ms"), step("copy_ms"), step("scatter_ms"));
        assert!(g > 0.0 && k > 0.0 && sc > 0.0, "{s}");
        let total = c["transfer_ms"]["p50"].as_f64().unwrap();
        // The steps run back to back; the end event adds only the cross-GPU wait after the scatter.
        assert!(g + k + sc <= total * 1.02 + 0.01 && g + k + sc >= total * 0.8, "{s} vs {total} ms");
        for rep in c["reps"].as_array().unwrap() {
            assert!(rep["staged"].is_object(), "every rep carries its split");
        }
    }
}

#[test]
#[ignore = "needs 2 GPUs: the GPU machine runs it (KVXFER_REQUIRE_GPU=1, --include-ignored: see tests/gpu.rs)"]
fn gather_staging_in_one_process_and_between_two_verified() {
    if !two_gpus() {
        return;
    }
    let paged = ["--layout", "paged", "--tokens", "1k,8k", "--model", "qwen3-30b-a3b", "--reps", "2"];
    for copy in ["ce", "sm"] {
        let mut args = vec!["--src", "gpu:0", "--dst", "gpu:1", "--staging", "gather", "--copy", copy];
        args.extend_from_slice(&paged);
        let r = verified_cuda_sweep("staged", &args);
        assert_verified(&r, &[96 << 20, 768 << 20], 2, 1.0);
        assert_staged(&r);
    }
    // Between processes the receiver's pool is mapped in its own GPU's context, where the unpack kernel runs.
    let mut args = vec!["--staging", "gather", "--coalesce"];
    args.extend_from_slice(&paged);
    let r = verified_ipc_send("staged-ipc", "gpu:0", "gpu:1", &args);
    assert_verified(&r, &[96 << 20, 768 << 20], 2, 1.0);
    assert_staged(&r);
}

#[test]
#[ignore = "needs a GPU: the GPU machine runs it (KVXFER_REQUIRE_GPU=1, --include-ignored: see tests/gpu.rs)"]
fn tcp_refuses_gpu_memory_with_a_clear_error() {
    let Some(_) = gpus() else { return };
    let out = kvxfer(&["sweep", "--transport", "tcp", "--src", "gpu:0", "--sizes", "1MiB", "--reps", "1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--transport tcp cannot read or write GPU memory"), "{err}");
    assert!(err.contains("sweep --src/--dst, serve/send --mem"), "names the flags of each command: {err}");
}

/// Host memory and a GPU on one host move by CUDA copies, so `--transport auto` picks cuda for them: tcp cannot
/// reach GPU memory at all. Without a driver the choice is the same and the error names what is missing.
#[test]
fn auto_transport_moves_pinned_host_memory_to_a_gpu_with_cuda() {
    let d = tmp("auto-pinned");
    let json = d.join("r.json");
    let (j, o) = (json.to_string_lossy().into_owned(), d.path().to_string_lossy().into_owned());
    let args = ["sweep", "--src", "pinned", "--dst", "gpu:0", "--sizes", "1MiB", "--reps", "1", "--verify"];
    let out = kvxfer(&[&args[..], &["--json", &j, "--out-dir", &o]].concat());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("transport: cuda (host and GPU memory on one host move by CUDA copies"), "{err}");
    assert!(!err.contains("transport: tcp") && !err.contains("--mem"), "{err}");
    if has_gpus() {
        assert!(out.status.success(), "{err}");
        assert_eq!(results(&json)["config"]["transport"], "cuda");
    } else {
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains("--src pinned: no CUDA driver"), "{err}");
        assert_eq!(err.lines().filter(|l| l.starts_with("error:")).count(), 1, "{err}");
    }
}

#[test]
fn without_a_driver_gpu_requests_fail_cleanly() {
    // Not `gpus()`: a host without GPUs is what this test is about, never a reason to fail it.
    if has_gpus() {
        eprintln!("skipped: this host has a CUDA driver and GPUs");
        return;
    }
    for args in [
        &["sweep", "--transport", "cuda", "--src", "gpu:0", "--dst", "gpu:1", "--sizes", "1MiB"][..],
        &["sweep", "--src", "pinned", "--sizes", "1MiB"][..],
        &["serve", "--mem", "gpu:0", "--once"][..],
    ] {
        let out = kvxfer(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(err.contains("no CUDA driver") || err.contains("CUDA driver"), "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

/// `latency --transport cuda`: the host pings a persistent kernel on gpu:0 through mapped pinned memory; each size's
/// half round trips are in the results file with plausible, ordered quantiles, the answer's memory is named, and the
/// kernel stops when the run ends.
#[test]
#[ignore = "needs a GPU: the GPU machine runs it (KVXFER_REQUIRE_GPU=1, --include-ignored: see tests/gpu.rs)"]
fn latency_host_to_gpu_pings_a_kernel_and_reports_ordered_quantiles() {
    let Some(n) = gpus() else { return };
    let d = tmp("latency");
    let json = d.join("lat.json");
    let j = json.to_string_lossy().into_owned();
    let sizes = "8,4KiB,64KiB,1MiB";
    let out = kvxfer(&["latency", "--transport", "cuda", "--sizes", sizes, "--iters", "500", "--json", &j]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("did not stop"), "the kernel stops at the end: {err}");
    let r = results(&json);
    assert_eq!((r["config"]["mode"].as_str(), r["config"]["transport"].as_str()), (Some("latency"), Some("cuda")));
    assert_eq!(r["config"]["dst_mem"], "gpu:0");
    assert_eq!(r["complete"], true);
    let sender = &r["config"]["transport_detail"]["sender"];
    assert!(sender["responder"].as_str().is_some_and(|s| s.contains("persistent kernel")), "{sender}");
    assert_eq!(sender["gpu"], 0);
    let cases = r["cases"].as_array().unwrap();
    let got: Vec<u64> = cases.iter().map(|c| c["size_bytes"].as_u64().unwrap()).collect();
    assert_eq!(got, [8, 4096, 65536, 1 << 20]);
    let mut p50s = Vec::new();
    for c in cases {
        assert_eq!(c["iters"], 500);
        let l = &c["latency_us"];
        let q: Vec<f64> = ["min", "p50", "p90", "p99", "p999", "max"].iter().map(|k| l[k].as_f64().unwrap()).collect();
        assert!(q[1] > 0.0 && q.windows(2).all(|w| w[0] <= w[1]), "min ≤ p50 ≤ … ≤ max: {q:?}");
        p50s.push(q[1]);
    }
    // Plausible, not a speed test: a small message is a few PCIe crossings (µs, not ms), and 1 MiB takes longer.
    assert!(p50s[0] < 100.0, "8 B p50 {} µs", p50s[0]);
    assert!(p50s[3] > p50s[0] && p50s[3] < 10_000.0, "1 MiB p50 {} µs vs 8 B {}", p50s[3], p50s[0]);
    // A GPU past the last is named with the ones there are; a serve's GPU end is refused, in one line each.
    let missing = format!("gpu:{n}");
    let out = kvxfer(&["latency", "--transport", "cuda", "--dst", &missing, "--sizes", "8"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("--dst {missing}: no {missing}")), "{err}");
    let (mut serve, listen) = serve_once("gpu:0");
    let out = kvxfer(&["latency", "--transport", "cuda", "--peer", &listen, "--sizes", "8", "--iters", "10"]);
    let err = String::from_utf8_lossy(&out.stderr);
    let _ = serve.kill();
    let _ = serve.wait();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("leave out --peer"), "{err}");
    assert_eq!(err.lines().filter(|l| l.starts_with("error:")).count(), 1, "{err}");
}

/// `latency --transport cuda --src gpu:0 --dst gpu:D` (D the last GPU: NVLink with two, inside one GPU with one):
/// each exchange is a copy into gpu:D and one back, timed from the host; the results name both GPUs and the copy
/// engine, the quantiles are ordered and plausible, and a serve's end or a missing GPU is refused in one line.
#[test]
#[ignore = "needs a GPU: the GPU machine runs it (KVXFER_REQUIRE_GPU=1, --include-ignored: see tests/gpu.rs)"]
fn latency_gpu_to_gpu_copies_there_and_back_and_reports_ordered_quantiles() {
    let Some(n) = gpus() else { return };
    let dst = format!("gpu:{}", n - 1);
    let d = tmp("latency-peer");
    let json = d.join("lat.json");
    let j = json.to_string_lossy().into_owned();
    let out = kvxfer(&[
        "latency",
        "--transport",
        "cuda",
        "--src",
        "gpu:0",
        "--dst",
        &dst,
        "--sizes",
        "8,64KiB,1MiB",
        "--iters",
        "300",
        "--json",
        &j,
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let r = results(&json);
    assert_eq!((r["config"]["src_mem"].as_str(), r["config"]["dst_mem"].as_str()), (Some("gpu:0"), Some(&*dst)));
    assert_eq!(r["complete"], true);
    let sender = &r["config"]["transport_detail"]["sender"];
    assert!(sender["message"].as_str().is_some_and(|m| m.contains("cuMemcpyAsync")), "{sender}");
    assert_eq!((sender["src_gpu"].as_u64(), sender["gpu"].as_u64()), (Some(0), Some(n as u64 - 1)));
    let cases = r["cases"].as_array().unwrap();
    let p50s: Vec<f64> = cases
        .iter()
        .map(|c| {
            let l = &c["latency_us"];
            let q: Vec<f64> =
                ["min", "p50", "p90", "p99", "p999", "max"].iter().map(|k| l[k].as_f64().unwrap()).collect();
            assert!(q[0] > 0.0 && q.windows(2).all(|w| w[0] <= w[1]), "min ≤ p50 ≤ … ≤ max: {q:?}");
            q[1]
        })
        .collect();
    // Plausible, not a speed test: a small copy there and back is µs, not ms; 1 MiB each way takes longer.
    assert!(p50s[0] < 200.0, "8 B p50 {} µs", p50s[0]);
    assert!(p50s[2] > p50s[0] && p50s[2] < 10_000.0, "1 MiB p50 {} µs vs 8 B {}", p50s[2], p50s[0]);
    let missing = format!("gpu:{n}");
    let out = kvxfer(&["latency", "--transport", "cuda", "--src", &missing, "--sizes", "8"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("--src {missing}: no {missing}")), "{err}");
}

/// Without a driver, `latency --transport cuda` is refused in one line naming what is missing, as sweep's are.
#[test]
fn latency_over_cuda_without_a_driver_is_refused_in_one_line() {
    // Not `gpus()`: a host without GPUs is what this test is about, never a reason to fail it.
    if has_gpus() {
        eprintln!("skipped: this host has a CUDA driver and GPUs");
        return;
    }
    // GPU ↔ GPU is refused at its source GPU, before anything starts.
    for (args, flag) in [(&[][..], "--transport cuda"), (&["--src", "gpu:0"][..], "--src gpu:0")] {
        let mut all = vec!["latency", "--transport", "cuda", "--sizes", "8,4KiB"];
        all.extend_from_slice(args);
        let out = kvxfer(&all);
        let err = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
        assert_eq!(lines.len(), 1, "{err}");
        // No driver: exit 1 naming it (as sweep --transport cuda); a driver without GPUs: exit 2 naming the GPU.
        match out.status.code() {
            Some(1) => assert!(lines[0].contains(&format!("{flag}: no CUDA driver")), "{err}"),
            Some(2) => assert!(lines[0].contains("gpu:0: no gpu:0"), "{err}"),
            other => panic!("exit {other:?}: {err}"),
        }
        assert!(!err.contains("panicked") && out.stdout.is_empty(), "{err}");
    }
}

#[test]
#[ignore = "needs 2 GPUs: the GPU machine runs it (KVXFER_REQUIRE_GPU=1, --include-ignored: see tests/gpu.rs)"]
fn paged_layout_over_nvlink_verified_with_per_piece_copies_and_one_sm_kernel() {
    if !two_gpus() {
        return;
    }
    for extra in [&["--copy", "ce", "--streams", "2"][..], &["--copy", "sm"][..], &["--copy", "batch"][..]] {
        let mut args = vec![
            "--src",
            "gpu:0",
            "--dst",
            "gpu:1",
            "--layout",
            "paged",
            "--tokens",
            "1k,8k",
            "--model",
            "qwen3-30b-a3b",
            "--reps",
            "2",
        ];
        args.extend_from_slice(extra);
        let r = verified_cuda_sweep("paged", &args);
        assert_verified(&r, &[96 << 20, 768 << 20], 2, 1.0);
        // The copy asked for is the copy used (a driver without cuMemcpyBatchAsync would say `ce` for batch).
        let used = &r["config"]["transport_detail"]["sender"]["copy"];
        assert_eq!(used, &serde_json::Value::from(extra[1]), "{}", r["config"]);
        for c in r["cases"].as_array().unwrap() {
            assert_eq!(c["layout"], "paged");
            assert_eq!(c["piece_bytes"].as_u64(), Some(16 << 10));
        }
    }
}

#[test]
#[ignore = "needs a GPU: the GPU machine runs it (KVXFER_REQUIRE_GPU=1, --include-ignored: see tests/gpu.rs)"]
fn verbs_with_gpu_memory_but_no_nic_names_what_is_missing() {
    let Some(_) = gpus() else { return };
    if std::path::Path::new("/sys/class/infiniband").read_dir().is_ok_and(|mut d| d.next().is_some()) {
        eprintln!("skipped: this host has RDMA devices");
        return;
    }
    let out = kvxfer(&["sweep", "--transport", "verbs", "--src", "gpu:0", "--dst", "gpu:0", "--sizes", "96MiB"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--transport verbs") && err.contains("RDMA"), "{err}");
    assert!(!err.contains("panicked"));
}

#[test]
#[ignore = "needs a GPU: the GPU machine runs it (KVXFER_REQUIRE_GPU=1, --include-ignored: see tests/gpu.rs)"]
fn auto_transport_picks_cuda_between_gpus_and_a_missing_gpu_is_named() {
    let Some(n) = gpus() else { return };
    if n >= 2 {
        // No --transport: both ends are GPUs, so cuda, said on stderr and stored.
        let d = tmp("auto");
        let json = d.join("r.json");
        let (j, o) = (json.to_string_lossy().into_owned(), d.path().to_string_lossy().into_owned());
        let out = kvxfer(&[
            "sweep",
            "--src",
            "gpu:0",
            "--dst",
            "gpu:1",
            "--sizes",
            "64MiB",
            "--reps",
            "2",
            "--verify",
            "--json",
            &j,
            "--out-dir",
            &o,
        ]);
        assert!(out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("transport: cuda (both ends are GPUs"));
        let r = results(&json);
        assert_eq!(r["config"]["transport"], "cuda");
        assert_verified(&r, &[64 << 20], 2, 1.0);
    }
    // A GPU index past the last is named with the GPUs there are, before anything is allocated.
    let missing = format!("gpu:{n}");
    let have: Vec<String> = (0..n).map(|g| format!("gpu:{g}")).collect();
    let out = kvxfer(&["sweep", "--src", &missing, "--dst", "gpu:0", "--sizes", "1MiB"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("--src {missing}: no {missing} (this host has {})", have.join(", "))), "{err}");
    assert_eq!(err.lines().filter(|l| l.starts_with("error:")).count(), 1, "{err}");
}

/// NVML's counters follow every rep on both ends. With `--counters full`, over NVLink, the sender GPU's
/// NVLink payload counter grows by the bytes moved (NVML counts whole KiB, so a rep reads within a few KiB of it), the
/// receiver's by as much received, and the PCIe link and clocks read as gauges. The default (`auto`) leaves out the
/// NVLink reads, which delay the copy that follows them.
#[test]
#[ignore = "needs 2 GPUs: the GPU machine runs it (KVXFER_REQUIRE_GPU=1, --include-ignored: see tests/gpu.rs)"]
fn nvml_counters_follow_each_rep_and_nvlink_carries_the_bytes_moved() {
    if !two_gpus() {
        return;
    }
    let args = ["--src", "gpu:0", "--dst", "gpu:1", "--sizes", "1GiB", "--reps", "3"];
    let auto = verified_cuda_sweep("nvml-auto", &args);
    for rep in auto["cases"][0]["reps"].as_array().unwrap() {
        let c = &rep["counters"]["sender gpu:0"];
        assert!(c["sm_clock_mhz_now"].as_u64().is_some() && c.get("nvlink_tx_kib").is_none(), "{c}");
        assert!(c.get("pcie_replay_count").is_none() && c.get("energy_mj").is_none(), "{c}");
    }
    let r = verified_cuda_sweep("nvml", &[&args[..], &["--counters", "full"]].concat());
    let kib = (1u64 << 30) / 1024;
    for rep in r["cases"][0]["reps"].as_array().unwrap() {
        let c = &rep["counters"];
        let tx = c["sender gpu:0"]["nvlink_tx_kib"].as_u64().unwrap_or_else(|| panic!("no NVLink TX: {c}"));
        let rx = c["receiver gpu:1"]["nvlink_rx_kib"].as_u64().unwrap_or_else(|| panic!("no NVLink RX: {c}"));
        for (what, v) in [("tx", tx), ("rx", rx)] {
            assert!(v.abs_diff(kib) <= kib / 100, "NVLink {what} {v} KiB for a {kib} KiB rep: {c}");
        }
        assert!(c["sender gpu:0"]["pcie_width_now"].as_u64().is_some_and(|w| w > 0), "{c}");
        assert!(c["sender gpu:0"]["sm_clock_mhz_now"].as_u64().is_some_and(|m| m > 0), "{c}");
    }
}

/// Mooncake with GPU memory (the CUDA wheel, in the Python `KVXFER_ENGINES_PYTHON` names): its intra-node NVLink
/// transport and its TCP transport, gpu:0 → gpu:1, verified. Each end's buffer is allocated by its engine's worker
/// (the NVLink transport exports what it registers) and filled / checked by kvxfer through the IPC handle.
#[test]
#[ignore = "needs 2 GPUs: the GPU machine runs it (KVXFER_REQUIRE_GPU=1, --include-ignored: see tests/gpu.rs)"]
fn mooncake_gpu_to_gpu_over_nvlink_intra_and_tcp_verified() {
    if !two_gpus() {
        return;
    }
    let Ok(python) = std::env::var("KVXFER_ENGINES_PYTHON") else {
        let why = "KVXFER_ENGINES_PYTHON is not set (a Python with mooncake-transfer-engine-cuda13)";
        missing_hardware("KVXFER_REQUIRE_ENGINES", 0, why);
        return;
    };
    for (protocol, min_gbps) in [("nvlink-intra", 50.0), ("tcp", 0.2)] {
        let d = tmp(&format!("mooncake-{protocol}"));
        let json = d.join("r.json");
        let args = ["sweep", "--transport", "mooncake", "--mooncake-protocol", protocol, "--src", "gpu:0"];
        let more = ["--dst", "gpu:1", "--sizes", "96MiB,1GiB", "--reps", "3", "--verify"];
        let out = command()
            .env("KVXFER_PYTHON", &python)
            .args(args)
            .args(more)
            .args(["--json", json.to_str().unwrap(), "--out-dir", d.path().to_str().unwrap()])
            .stderr(Stdio::inherit())
            .output()
            .unwrap();
        assert!(out.status.success(), "mooncake {protocol} gpu:0 -> gpu:1 failed");
        let r = results(&json);
        assert_verified(&r, &[96 << 20, 1 << 30], 3, min_gbps);
        assert_eq!(r["config"]["transport_detail"]["sender"]["protocol"], protocol);
    }
}

/// `devices --topo` names each GPU's active NVLinks and where they lead (NVML). The 2×H200 machine's GPUs
/// are joined by NVLink (NV18): each has links, and some lead to the other GPU or to a switch between them.
#[test]
#[ignore = "needs 2 GPUs: the GPU machine runs it (KVXFER_REQUIRE_GPU=1, --include-ignored: see tests/gpu.rs)"]
fn devices_topo_names_each_gpus_nvlinks() {
    if !two_gpus() {
        return;
    }
    let out = kvxfer(&["devices", "--topo", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let links = v["topology"]["nvlink"].as_array().unwrap_or_else(|| panic!("no nvlink: {}", v["topology"]));
    for gpu in ["gpu:0", "gpu:1"] {
        let l = links.iter().find(|l| l["gpu"] == gpu).unwrap_or_else(|| panic!("{gpu} missing: {links:?}"));
        let active = l["active"].as_u64().unwrap();
        assert!(active > 0, "{gpu} has no active NVLink: {l}");
        let sum: u64 = l["to"].as_object().unwrap().values().map(|n| n.as_u64().unwrap()).sum();
        assert_eq!(sum, active, "every active link leads somewhere: {l}");
    }
    let text = kvxfer(&["devices", "--topo"]);
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert!(stdout.lines().any(|l| l.starts_with("nvlink     gpu:0") && l.contains("active link")), "{stdout}");
}
