//! Every bad input: the right exit code (2 usage/input, 1 runtime), exactly one clear `error:` line, no panic,
//! and nothing written or connected before the input was checked.

mod common;

use common::*;
use std::net::TcpListener;

/// A loopback port with nothing listening: bound and released, so a connect is refused.
fn closed_peer() -> String {
    format!("127.0.0.1:{}", free_port())
}

/// `kvxfer send --peer <closed port> <args>` must fail with `code` and one error line containing every `needles`.
fn send_fails(args: &[&str], code: i32, needles: &[&str]) -> Out {
    let peer = closed_peer();
    let mut all = vec!["send", "--peer", &peer];
    all.extend_from_slice(args);
    fails(&all, code, needles)
}

fn fails(args: &[&str], code: i32, needles: &[&str]) -> Out {
    let out = run(args);
    out.expect_code(code);
    let line = out.one_error().to_string();
    for n in needles {
        assert!(line.contains(n), "{}: error line lacks {n:?}: {line}", out.what);
    }
    assert!(out.stdout.trim().is_empty(), "{}: nothing on stdout for bad input: {}", out.what, out.stdout);
    out
}

#[test]
fn decimal_units_are_rejected_with_a_hint() {
    send_fails(&["--sizes", "12GB"], 2, &["\"GB\"", "GiB"]);
    send_fails(&["--sizes", "96MiB,5MB"], 2, &["\"MB\"", "MiB"]);
    send_fails(&["--sizes", "1MiB", "--block-size", "4KB"], 2, &["--block-size", "KiB"]);
    fails(&["sweep", "--sizes", "1gb"], 2, &["GiB"]);
}

#[test]
fn zero_negative_and_overflowing_sizes() {
    send_fails(&["--sizes", "0MiB"], 2, &["zero"]);
    send_fails(&["--sizes", "0"], 2, &["zero"]);
    send_fails(&["--sizes=-1MiB"], 2, &["-1MiB", "negative"]);
    send_fails(&["--sizes", "-1MiB"], 2, &["-1MiB", "negative"]);
    send_fails(&["--sizes", "1MiB,-2MiB"], 2, &["-2MiB", "negative"]);
    send_fails(&["--sizes", "1MiB", "--block-size", "-4KiB"], 2, &["--block-size", "negative"]);
    send_fails(&["--tokens", "-1k", "--model", "qwen3-8b"], 2, &["-1k", "negative"]);
    send_fails(&["--sizes", "99999999999TiB"], 2, &["too large"]);
    send_fails(&["--sizes", "184467440737095516160"], 2, &["too large"]);
    send_fails(&["--sizes", "1.5B"], 2, &["whole number"]);
    send_fails(&["--sizes", ","], 2, &["--sizes"]);
    send_fails(&["--sizes", "lots"], 2, &["lots"]);
    send_fails(&["--tokens", "0", "--model", "qwen3-8b"], 2, &["zero"]);
    send_fails(&["--tokens", "99999999999999999k", "--model", "qwen3-8b"], 2, &["too large"]);
    // A token count whose byte size overflows u64.
    send_fails(&["--tokens", "17592186044415k", "--model", "llama-3.1-70b"], 2, &["overflows"]);
}

#[test]
fn size_larger_than_free_memory_is_refused_before_allocating() {
    let out = send_fails(&["--sizes", "100TiB"], 2, &["100 TiB", "available"]);
    assert!(!out.stderr.contains("cannot reach"), "checked before connecting: {}", out.stderr);
    // sweep needs two buffers.
    fails(&["sweep", "--sizes", "64TiB"], 2, &["128 TiB", "available"]);
    // A paged pool (twice the largest transfer by default) names the knob that shrinks it.
    let paged = ["sweep", "--layout", "paged", "--model", "qwen3-30b-a3b", "--tokens", "1m"];
    fails(&paged, 2, &["available", "pool of 2097152 tokens", "--pool-tokens"]);
}

#[test]
fn tokens_need_a_known_model_and_a_good_config() {
    send_fails(&["--tokens", "1k"], 2, &["--model"]);
    send_fails(&["--tokens", "1k", "--model", "gpt-9"], 2, &["gpt-9", "qwen3-30b-a3b"]);
    send_fails(&["--tokens", "1k", "--kv-bytes-per-token", "0"], 2, &["--kv-bytes-per-token"]);
    send_fails(&["--sizes", "1MiB", "--model", "qwen3-8b"], 2, &["--tokens"]);

    let dir = TempDir::new("cfg");
    let missing = dir.arg("missing/config.json");
    send_fails(&["--tokens", "1k", "--model-config", &missing], 2, &["--model-config", "cannot read"]);
    // A directory is unreadable as a file.
    send_fails(&["--tokens", "1k", "--model-config", &dir.arg("")], 2, &["--model-config"]);
    std::fs::write(dir.join("broken.json"), "{\"num_hidden_layers\": 4,").unwrap();
    send_fails(&["--tokens", "1k", "--model-config", &dir.arg("broken.json")], 2, &["broken.json", "JSON"]);
    std::fs::write(dir.join("notmodel.json"), r#"{"architectures": ["Foo"]}"#).unwrap();
    send_fails(
        &["--tokens", "1k", "--model-config", &dir.arg("notmodel.json")],
        2,
        &["notmodel.json", "num_hidden_layers"],
    );
    std::fs::write(
        dir.join("dtype.json"),
        r#"{"num_hidden_layers":2,"num_attention_heads":2,"head_dim":64,"torch_dtype":"int3"}"#,
    )
    .unwrap();
    send_fails(&["--tokens", "1k", "--model-config", &dir.arg("dtype.json")], 2, &["int3"]);
}

#[test]
fn run_flags_out_of_range() {
    send_fails(&["--sizes", "1MiB", "--block-size", "0"], 2, &["--block-size", "zero"]);
    send_fails(&["--sizes", "1MiB", "--reps", "0"], 2, &["--reps"]);
    send_fails(&["--sizes", "1MiB", "--streams", "0"], 2, &["--streams"]);
    send_fails(&["--sizes", "1MiB", "--streams", "65"], 2, &["--streams"]);
    send_fails(&["--sizes", "1MiB", "--transport", "carrier-pigeon"], 2, &["carrier-pigeon", "tcp"]);
    send_fails(&["--sizes", "1MiB", "--io-timeout", "garbage"], 2, &["--io-timeout", "garbage"]);
    send_fails(&["--sizes", "1MiB", "--io-timeout", "0s"], 2, &["--io-timeout"]);
    send_fails(&["--sizes", "1MiB", "--connect-timeout", "soon"], 2, &["--connect-timeout"]);
    send_fails(&["--sizes", "1MiB", "--reps", "many"], 2, &["many"]);
    send_fails(&["--sizes", "1MiB", "--max-sge", "0"], 2, &["--max-sge", "1 to 64"]);
    send_fails(&["--sizes", "1MiB", "--max-sge", "65"], 2, &["--max-sge", "1 to 64"]);
    fails(&["sweep", "--sizes", "1MiB", "--reps", "0"], 2, &["--reps"]);
    // Gather staging packs with GPU kernels: refused for other transports and for host memory, before connecting.
    send_fails(&["--sizes", "1MiB", "--staging", "gather"], 2, &["--staging gather", "--transport cuda"]);
    fails(&["sweep", "--transport", "cuda", "--sizes", "1MiB", "--staging", "gather"], 2, &["--staging", "GPU"]);
    send_fails(&["--sizes", "1MiB", "--staging", "scatter"], 2, &["scatter", "--staging"]);
    // The verbs queue pairs' class of service and registration knobs: their ranges, and other transports refuse them.
    send_fails(&["--sizes", "1MiB", "--transport", "verbs", "--tclass", "256"], 2, &["--tclass", "256", "0..=255"]);
    send_fails(&["--sizes", "1MiB", "--transport", "verbs", "--sl", "16"], 2, &["--sl", "16", "0..=15"]);
    send_fails(&["--sizes", "1MiB", "--transport", "tcp", "--tclass", "96"], 2, &["--tclass", "--transport verbs"]);
    send_fails(&["--sizes", "1MiB", "--transport", "tcp", "--sl", "3"], 2, &["--sl", "--transport verbs"]);
    send_fails(&["--sizes", "1MiB", "--transport", "tcp", "--odp"], 2, &["--odp", "--transport verbs"]);
    send_fails(&["--sizes", "1MiB", "--transport", "tcp", "--no-relaxed-ordering"], 2, &["--no-relaxed-ordering"]);
    fails(&["sweep", "--transport", "tcp", "--sizes", "1MiB", "--tclass", "8"], 2, &["--tclass", "--transport verbs"]);
    // RDMA READs are the verbs transport's (nixl has its own --nixl-op read); refused elsewhere, and with the
    // knobs a read run cannot honour.
    send_fails(&["--sizes", "1MiB", "--transport", "tcp", "--op", "read"], 2, &["--op read", "--transport verbs"]);
    fails(&["sweep", "--transport", "tcp", "--sizes", "1MiB", "--op", "read"], 2, &["--op read", "--transport tcp"]);
    send_fails(&["--sizes", "1MiB", "--transport", "verbs", "--op", "read", "--reg-per-rep"], 2, &["--reg-per-rep"]);
    send_fails(&["--sizes", "1MiB", "--transport", "verbs", "--op", "pull"], 2, &["pull", "--op"]);
    fails(&["serve", "--io-timeout", "garbage"], 2, &["--io-timeout"]);
    fails(&["serve", "--listen", "localhost-ish"], 2, &["--listen"]);
    fails(&["serve", "--max-size", "1GB", "--listen", "127.0.0.1:0"], 2, &["--max-size", "GiB"]);
}

#[test]
fn unreachable_peer_is_a_runtime_failure() {
    // Nothing listens: send keeps trying until --connect-timeout, says once that it waits, then fails.
    let started = std::time::Instant::now();
    let out = send_fails(&["--sizes", "1MiB", "--connect-timeout", "1s"], 1, &["cannot reach", "receiver", "1s"]);
    assert!(out.stderr.contains("refused"), "{}", out.stderr);
    assert_eq!(out.stderr.matches("waiting for the receiver at 127.0.0.1:").count(), 1, "{}", out.stderr);
    let took = started.elapsed();
    assert!(took >= std::time::Duration::from_millis(500), "gave up after {took:?}, before --connect-timeout");
    // Unresolvable host: the user's input.
    fails(&["send", "--peer", "no-such-host.invalid:1", "--sizes", "1MiB"], 2, &["--peer"]);
    fails(&["send", "--peer", "no-port-here", "--sizes", "1MiB"], 2, &["--peer"]);
}

#[test]
fn lists_with_an_empty_element_are_refused() {
    send_fails(&["--sizes", "1MiB,,2MiB"], 2, &["--sizes", "element 2 of 3 is empty"]);
    send_fails(&["--sizes", "1MiB,"], 2, &["--sizes", "element 2 of 2 is empty"]);
    send_fails(&["--tokens", ",1k", "--model", "qwen3-8b"], 2, &["--tokens", "element 1 of 2 is empty"]);
    fails(&["sweep", "--sizes", " , "], 2, &["--sizes", "empty"]);
    fails(&["sweep", "sweeps/smoke.toml", "--set", "sizes=1MiB,,2MiB"], 2, &["--set", "element 2 of 3 is empty"]);
}

#[test]
fn port_in_use_for_serve_is_a_runtime_failure() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    fails(&["serve", "--listen", &addr], 1, &["cannot listen", &addr, "in use"]);
}

#[test]
fn serve_on_a_public_address_needs_a_token() {
    fails(&["serve", "--listen", "0.0.0.0:0"], 2, &["token"]);
    fails(&["serve", "--listen", "[::]:0"], 2, &["token"]);
    // An empty token is no token.
    fails(&["serve", "--listen", "0.0.0.0:0", "--token", ""], 2, &["token"]);
}

#[test]
fn output_in_a_missing_directory_fails_before_connecting() {
    // A real listener: the send must not even connect to it.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let peer = listener.local_addr().unwrap().to_string();
    let dir = TempDir::new("outdir");
    let csv = dir.arg("r.csv");
    for flag in ["--json", "--csv", "--md", "--events"] {
        let mut args = vec!["send", "--peer", &peer, "--sizes", "1MiB", "--csv", &csv];
        if flag == "--csv" {
            args.truncate(5);
        }
        args.extend([flag, "/nonexistent-dir/x.out"]);
        fails(&args, 2, &[flag, "/nonexistent-dir"]);
    }
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("send connected before checking its outputs: {other:?}"),
    }
    assert!(!dir.join("r.csv").exists(), "nothing half-written");
    let entries = std::fs::read_dir(dir.path()).unwrap().count();
    assert_eq!(entries, 0, "no probe or temp files left behind");
    // A directory given as the file.
    fails(&["send", "--peer", &peer, "--sizes", "1MiB", "--json", &dir.arg("")], 2, &["--json", "directory"]);
    fails(&["sweep", "--sizes", "1MiB", "--json", "/nonexistent-dir/x.json"], 2, &["--json", "/nonexistent-dir"]);
}

#[test]
fn report_on_missing_or_foreign_files() {
    let dir = TempDir::new("report");
    fails(&["report", &dir.arg("missing.json")], 2, &["missing.json", "cannot read"]);
    std::fs::write(dir.join("other.json"), r#"{"name": "not results"}"#).unwrap();
    fails(&["report", &dir.arg("other.json")], 2, &["other.json", "schema"]);
    std::fs::write(dir.join("future.json"), r#"{"schema": "kvxfer/results/v9"}"#).unwrap();
    fails(&["report", &dir.arg("future.json")], 2, &["future.json", "v9"]);
    std::fs::write(dir.join("trunc.json"), r#"{"schema": "kvxfer/results/v1", "cases": ["#).unwrap();
    fails(&["report", &dir.arg("trunc.json")], 2, &["trunc.json", "JSON"]);
    std::fs::write(dir.join("shape.json"), r#"{"schema": "kvxfer/results/v1", "cases": 3}"#).unwrap();
    fails(&["report", &dir.arg("shape.json")], 2, &["shape.json"]);
}

#[test]
fn usage_errors_from_clap_exit_2_and_help_has_examples() {
    let out = run(&["send", "--sizes", "1MiB"]);
    out.expect_code(2);
    out.one_error();
    assert!(out.stderr.contains("--peer"), "{}", out.stderr);
    let out = run(&["frobnicate"]);
    out.expect_code(2);
    out.one_error();
    for sub in ["serve", "send", "sweep", "report", "devices"] {
        let h = run(&[sub, "--help"]);
        h.expect_code(0);
        assert!(h.stdout.contains("Example"), "{sub} --help has an example:\n{}", h.stdout);
    }
}

#[test]
fn dst_placement_is_checked_before_connecting() {
    let paged = ["--layout", "paged", "--tokens", "64", "--model", "qwen3-8b"];
    let mut args = paged.to_vec();
    args.extend_from_slice(&["--dst-placement", "diagonal"]);
    send_fails(&args, 2, &["diagonal", "--dst-placement"]);
    send_fails(
        &["--tokens", "64", "--model", "qwen3-8b", "--dst-placement", "sequential"],
        2,
        &["--dst-placement", "add --layout paged"],
    );
}

/// `kvxfer ARGS` under a 2 GiB address-space limit, so that reading without end fails the test in seconds instead
/// of taking the host's memory: `report /dev/zero` grew to 8.5 GB in 10 s.
fn bounded(args: &[&str]) -> Out {
    let mut cmd = std::process::Command::new("sh");
    cmd.arg("-c").arg("ulimit -v 2097152 && exec \"$0\" \"$@\"").arg(bin()).args(args);
    cmd.env_remove("KVXFER_TOKEN").stdin(std::process::Stdio::null());
    let mut p = Proc::start(&mut cmd, format!("kvxfer {} (ulimit -v 2 GiB)", args.join(" ")));
    let status = p.wait_timeout(std::time::Duration::from_secs(30));
    assert!(status.is_some(), "kvxfer {} still ran after 30 s: {}", args.join(" "), p.stderr.text());
    Out { code: status.unwrap().code(), stdout: p.stdout.text(), stderr: p.stderr.text(), what: p.what.clone() }
}

fn refused(out: Out, needles: &[&str]) {
    out.expect_code(2);
    let line = out.one_error();
    for n in needles {
        assert!(line.contains(n), "{}: error line lacks {n:?}: {line}", out.what);
    }
}

#[test]
fn devices_and_fifos_named_as_inputs_are_refused_at_once_in_bounded_memory() {
    let dir = TempDir::new("endless");
    let fifo = dir.join("fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success(), "mkfifo {}", fifo.display());
    let fifo = fifo.to_string_lossy().into_owned();
    // A FIFO nobody writes to: opening it for reading waited for a writer that never came.
    for endless in ["/dev/zero", "/dev/urandom", fifo.as_str()] {
        let kind = if endless == fifo { "FIFO" } else { "character device" };
        refused(bounded(&["report", endless]), &[endless, kind]);
        refused(bounded(&["predict", "--results", endless, "--tokens", "1k"]), &[endless, kind]);
        refused(bounded(&["replay", "--trace", endless]), &[endless, kind]);
        refused(bounded(&["sweep", endless]), &[endless, kind]);
        refused(bounded(&["sweep", "--sizes", "1MiB", "--resume", endless]), &[endless, kind]);
        let prompt = format!("trace:{endless}");
        let args = ["replay", "--arrivals", "poisson:1", "--prompt-tokens", &prompt, "--requests", "2"];
        refused(bounded(&args), &[endless, kind]);
        refused(bounded(&["send", "--peer", &closed_peer(), "--tokens", "1k", "--model-config", endless]), &[endless]);
    }
}

#[test]
fn an_input_past_max_input_size_is_refused_naming_its_size_and_the_flag_and_one_within_loads() {
    let dir = TempDir::new("input-cap");
    let json = dir.arg("r.json");
    run(&["sweep", "--sizes", "1MiB", "--reps", "2", "--json", &json, "--out-dir", &dir.arg("")]).expect_code(0);
    let len = std::fs::metadata(&json).unwrap().len();
    let (under, at) = ((len - 1).to_string() + "B", len.to_string() + "B");
    let out = run(&["report", &json, "--max-input-size", &under]);
    refused(out, &[&json, "is larger than the input limit", "--max-input-size"]);
    run(&["report", &json, "--max-input-size", &at]).expect_code(0);
    run(&["report", &json]).expect_code(0);
    // Standard input is read to the same cap.
    let stdin = |cap: &str| {
        let mut cmd = kvxfer();
        cmd.args(["report", "-", "--max-input-size", cap]).stdin(std::fs::File::open(&json).unwrap());
        Proc::start(&mut cmd, format!("kvxfer report - < r.json --max-input-size {cap}")).finish()
    };
    refused(stdin(&under), &["standard input", "--max-input-size"]);
    stdin(&at).expect_code(0);
    // A trace too.
    let trace = dir.join("t.jsonl");
    std::fs::write(&trace, "{\"timestamp\": 0, \"input_length\": 1024, \"output_length\": 8}\n".repeat(100)).unwrap();
    let trace = trace.to_string_lossy().into_owned();
    refused(run(&["replay", "--trace", &trace, "--max-input-size", "1KiB"]), &[&trace, "--max-input-size"]);
}
