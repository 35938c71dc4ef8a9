//! Every subcommand into a closed pipe (`kvxfer report x.json | head -1`): no panic, the exit code the command
//! would have had, and a sweep still completes and writes all its files. kvxfer ignores SIGPIPE, so a reader that
//! went away is an EPIPE that ends that stream quietly (src/console.rs).

mod common;
use common::*;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Run `args` with stdout (and stderr, when `close_stderr`) a pipe whose reader is already gone.
fn into_closed_pipe(args: &[&str], close_stderr: bool) -> (Option<i32>, String) {
    let mut cmd: Command = kvxfer();
    cmd.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("kvxfer starts");
    drop(child.stdout.take());
    let stderr = if close_stderr {
        drop(child.stderr.take());
        String::new()
    } else {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut s).unwrap();
        s
    };
    let status = child.wait().unwrap();
    assert!(!stderr.contains("panicked"), "{args:?} panicked:\n{stderr}");
    assert_ne!(status.code(), Some(101), "{args:?}: exit 101 is a panic\n{stderr}");
    (status.code(), stderr)
}

#[test]
fn every_subcommand_into_a_closed_pipe_ends_quietly() {
    let t = TempDir::new("pipes");
    let (json, dir) = (t.arg("s.json"), t.arg(""));
    // A sweep whose table nobody reads still measures every size and writes its files.
    let (code, stderr) = into_closed_pipe(
        &["sweep", "--sizes", "1MiB,2MiB,4MiB", "--reps", "3", "--json", &json, "--out-dir", &dir],
        false,
    );
    assert_eq!(code, Some(0), "{stderr}");
    let v = read_json(Path::new(&json));
    assert_eq!(v["cases"].as_array().unwrap().len(), 3, "every size was measured");
    for args in [
        &["report", json.as_str()][..],
        &["report", json.as_str(), "--csv", "-"],
        &["predict", "--results", json.as_str(), "--sizes", "8MiB"],
        &["devices"],
        &["devices", "--json", "--topo"],
        &["--help"],
        &["sweep", "--help"],
    ] {
        assert_eq!(into_closed_pipe(args, false).0, Some(0), "{args:?}");
    }
    // doctor's answer is its exit code (1: it found something on this VM kind: no huge pages), pipe or not.
    let code = into_closed_pipe(&["doctor"], false).0;
    assert!(matches!(code, Some(0) | Some(1)), "{code:?}");
    // Bad usage still says so by exit code.
    assert_eq!(into_closed_pipe(&["sweep", "--sizes", "0MiB"], true).0, Some(2));
}

#[test]
fn serve_with_its_output_closed_keeps_serving() {
    let addr = format!("127.0.0.1:{}", free_port());
    let mut serve = kvxfer()
        .args(["serve", "--listen", &addr, "--once"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for its first line, then close both of its streams: the next lines (a sender connected, run complete)
    // go nowhere.
    let mut err = std::io::BufReader::new(serve.stderr.take().unwrap());
    let mut first = String::new();
    std::io::BufRead::read_line(&mut err, &mut first).unwrap();
    assert!(first.contains("listening on"), "{first}");
    drop(err);
    drop(serve.stdout.take());
    run(&["send", "--peer", &addr, "--sizes", "4MiB", "--reps", "3", "--verify"]).expect_code(0);
    // Wait for serve's exit itself (a thread blocked in wait), with a deadline as the stall detector.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(serve.wait());
    });
    let status =
        rx.recv_timeout(Duration::from_secs(30)).expect("serve --once did not exit after its session").unwrap();
    assert_eq!(status.code(), Some(0), "serve ended its session as usual");
}
