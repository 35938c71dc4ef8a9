//! A peer that dies mid-run: the other side must exit 1 within 5 s naming what happened, and the results of the
//! cases completed before the failure must survive in the results file.

mod common;

use common::*;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;
const EXIT_WITHIN: Duration = Duration::from_secs(5);

/// Kill `victim`, then give `survivor` EXIT_WITHIN to exit; returns its output.
fn kill_and_wait(victim: &mut Proc, mut survivor: Proc) -> Out {
    victim.kill();
    let t = Instant::now();
    let status = survivor.wait_timeout(EXIT_WITHIN);
    let took = t.elapsed();
    assert!(
        status.is_some(),
        "{} still running {EXIT_WITHIN:?} after its peer was killed\nstdout:\n{}\nstderr:\n{}",
        survivor.what,
        survivor.stdout.text(),
        survivor.stderr.text()
    );
    eprintln!("{} exited {took:?} after the kill", survivor.what);
    survivor.finish()
}

/// `send --peer ADDR --sizes SIZES --reps 50 --events EVENTS EXTRA`: seconds of work at 256 MiB and up, during which
/// a test kills one side.
fn long_send(addr: &str, sizes: &str, events: &Events, extra: &[&str]) -> Proc {
    let ev = events.arg();
    Proc::spawn(&[&["send", "--peer", addr, "--sizes", sizes, "--reps", "50", "--events", &ev][..], extra].concat())
}

#[test]
fn receiver_killed_after_the_first_case_keeps_that_case() {
    let dir = TempDir::new("kill-rx");
    let (json, csv, md) = (dir.arg("r.json"), dir.arg("r.csv"), dir.arg("r.md"));
    // Apart from the results files, whose directory must hold nothing else at the end.
    let ev_dir = TempDir::new("kill-rx-ev");
    let events = Events::fifo(ev_dir.join("e.jsonl"));
    let mut serve = Serve::start(&["--once"]);
    // A quick 2 MiB case, then 51 reps of 512 MiB (seconds of work) during which the receiver dies. (Death during a
    // --verify fill has its own test below.)
    let send = long_send(&serve.addr, "2MiB,512MiB", &events, &["--json", &json, "--csv", &csv, "--md", &md]);
    // The 512 MiB case is under way: its warm-up rep is done, its 50 measured reps are not.
    events.wait_rep(1, true, 0, Duration::from_secs(60));
    let out = kill_and_wait(&mut serve.proc, send);
    out.expect_code(1);
    let line = out.one_error();
    assert!(line.contains("receiver") && line.contains("connection"), "{line}");
    assert!(out.stdout.lines().any(|l| l.trim_start().starts_with("2 MiB")), "the first row:\n{}", out.stdout);

    // The completed case is in every file; the big one is not; the JSON says why the run stopped.
    let r = read_json(&dir.join("r.json"));
    assert_eq!(r["schema"], "kvxfer/results/v1");
    let cases = r["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 1, "only the completed case: {r}");
    check_case(&cases[0], 2 * MIB, 50, false);
    let err = r["error"].as_str().expect("the JSON records why the run stopped");
    assert!(err.contains("receiver"), "{err}");
    assert_eq!(r["complete"], false, "a run that stopped early says so");
    let csv_text = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(csv_text.lines().count(), 3, "why it is incomplete, header, the completed case:\n{csv_text}");
    assert!(csv_text.starts_with("# ") && csv_text.lines().next().unwrap().contains("stopped early"), "{csv_text}");
    let md_text = std::fs::read_to_string(&md).unwrap();
    assert!(md_text.contains("| 2 MiB |") && !md_text.contains("512 MiB"), "{md_text}");
    assert!(md_text.contains("stopped early"), "{md_text}");
    // report re-renders the partial run and says it stopped early.
    let rep = run(&["report", &json]);
    rep.expect_code(0);
    assert!(rep.stdout.contains("2 MiB") && rep.stdout.contains("stopped early"), "{}", rep.stdout);
    // Atomic writes leave no temp files behind.
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 3, "{names:?}");
}

#[test]
fn ctrl_c_keeps_the_completed_cases() {
    let dir = TempDir::new("sigint");
    let json = dir.arg("r.json");
    let serve = Serve::start(&[]);
    let mut send =
        Proc::spawn(&["send", "--peer", &serve.addr, "--sizes", "1MiB,2MiB,512MiB", "--reps", "50", "--json", &json]);
    assert!(
        send.stdout.wait_until(Duration::from_secs(30), |t| t.lines().any(|l| l.trim_start().starts_with("2 MiB"))),
        "no second row:\n{}",
        send.stderr.text()
    );
    let pid = nix::unistd::Pid::from_raw(send.child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let status = send.wait_timeout(EXIT_WITHIN).expect("send exits on Ctrl-C");
    assert!(!status.success());
    let r = read_json(&dir.join("r.json"));
    let cases = r["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 2, "the two completed cases survive Ctrl-C: {r}");
    assert_eq!(r["complete"], false, "an interrupted run says so: {r}");
    check_case(&cases[0], MIB, 50, false);
    check_case(&cases[1], 2 * MIB, 50, false);
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 1, "no temp file left: {names:?}");
}

#[test]
fn receiver_killed_before_any_case_completes_leaves_an_empty_results_file() {
    let dir = TempDir::new("kill-rx0");
    let json = dir.arg("r.json");
    let events = Events::fifo(dir.join("e.jsonl"));
    let mut serve = Serve::start(&["--once"]);
    let send = long_send(&serve.addr, "512MiB", &events, &["--json", &json]);
    // The first (warm-up) rep has finished: the run is under way, no case can be complete yet.
    events.wait_rep(0, true, 0, Duration::from_secs(30));
    let out = kill_and_wait(&mut serve.proc, send);
    out.expect_code(1);
    assert!(out.one_error().contains("receiver"), "{}", out.stderr);
    // What the code does: the results file is written at the end with no cases and the reason.
    let r = read_json(&dir.join("r.json"));
    assert_eq!(r["schema"], "kvxfer/results/v1");
    assert_eq!(r["cases"].as_array().unwrap().len(), 0, "{r}");
    assert!(r["error"].as_str().unwrap().contains("receiver"), "{r}");
    // Every finished rep kept its two events lines.
    let lines = events.all_lines();
    let n = lines.len();
    assert!(n >= 2 && n % 2 == 0, "{n} events lines");
    for pair in lines.chunks(2) {
        assert!(pair[0]["side"] == "sender" && pair[1]["side"] == "receiver", "{pair:?}");
        assert_eq!(pair[0]["rep"], pair[1]["rep"], "{pair:?}");
    }
}

#[test]
fn sender_killed_mid_run_fails_serve_once() {
    let dir = TempDir::new("kill-tx");
    let events = Events::fifo(dir.join("e.jsonl"));
    let serve = Serve::start(&["--once"]);
    let mut send = long_send(&serve.addr, "512MiB", &events, &[]);
    // The warm-up rep is done, the 50 measured reps (seconds of work) are not.
    events.wait_rep(0, true, 0, Duration::from_secs(30));
    let out = kill_and_wait(&mut send, serve.proc);
    assert!(!out.stderr.contains("run complete"), "the run was over before the kill:\n{}", out.stderr);
    out.expect_code(1);
    let line = out.one_error();
    assert!(line.contains("sender"), "{line}");
    assert!(line.contains("closed") || line.contains("connection"), "{line}");
}

#[test]
fn serve_survives_a_killed_sender_and_serves_the_next() {
    let dir = TempDir::new("kill-tx2");
    let events = Events::fifo(dir.join("e.jsonl"));
    let mut serve = Serve::start(&[]);
    let mut send = long_send(&serve.addr, "256MiB", &events, &[]);
    // The warm-up rep is done, the 50 measured reps are not.
    events.wait_rep(0, true, 0, Duration::from_secs(30));
    send.kill();
    assert!(
        serve.proc.stderr.wait_for("error: sender", EXIT_WITHIN),
        "serve did not notice the dead sender within {EXIT_WITHIN:?}:\n{}",
        serve.stderr()
    );
    assert!(!serve.stderr().contains("run complete"), "the run was over before the kill:\n{}", serve.stderr());
    assert!(serve.proc.is_running());
    let json = dir.arg("r.json");
    run(&["send", "--peer", &serve.addr, "--sizes", "1MiB", "--reps", "2", "--verify", "--json", &json]).expect_code(0);
    check_case(&read_json(&dir.join("r.json"))["cases"][0], MIB, 2, true);
}

/// A receiver that dies while the sender writes a large --verify pattern is noticed between fill slices.
#[test]
fn receiver_killed_while_the_sender_fills_its_verify_pattern() {
    // 2 GiB takes long enough to fill that the kill lands mid-fill; the sender must not wait for the fill's end.
    let dir = TempDir::new("kill-fill");
    let events = Events::fifo(dir.join("e.jsonl"));
    let mut serve = Serve::start(&["--once"]);
    let send = Proc::spawn(&[
        "send",
        "--peer",
        &serve.addr,
        "--sizes",
        "2GiB",
        "--reps",
        "2",
        "--warmup",
        "0",
        "--verify",
        "--events",
        &events.arg(),
    ]);
    // The sender prints its table's header once the session is established, right before the first fill starts:
    // the kill lands before the fill's first slice is written, or during it, with the whole 2 GiB still to go.
    assert!(send.stdout.wait_for("GB/s", Duration::from_secs(60)), "no table header: {}", send.stderr.text());
    let out = kill_and_wait(&mut serve.proc, send);
    out.expect_code(1);
    assert!(out.one_error().contains("receiver"), "{}", out.stderr);
    assert!(events.all_lines().is_empty(), "a rep finished before the kill: it did not land in the first fill");
}
