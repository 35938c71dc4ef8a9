//! `--duration` and `--interval` over loopback tcp with the real binary: an endless run stopped by a signal keeps
//! its files and exits 130, so does a finite one (its size in progress kept, marked partial, the run interrupted),
//! an endless run's events file stays bounded, the progress bar counts time, and bad combinations are one line and
//! exit code 2.

mod common;

use common::*;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::time::Duration;

/// `--duration inf` runs until SIGINT, sent once its first interval line is out: the rep in flight finishes, the
/// case is written complete with the signal that stopped it, and the exit code is 130.
#[test]
fn an_endless_run_stopped_by_sigint_writes_its_results_and_exits_130() {
    let t = TempDir::new("duration-inf");
    let json = t.arg("r.json");
    let mut p = Proc::spawn(&["sweep", "--sizes", "1MiB", "--duration", "inf", "--interval", "200ms", "--json", &json]);
    assert!(
        p.stdout.wait_until(Duration::from_secs(60), |t| t.lines().any(|l| l.starts_with("interval "))),
        "no interval line:\n{}",
        p.stderr.text()
    );
    kill(Pid::from_raw(p.child.id() as i32), Signal::SIGINT).unwrap();
    let status = p.wait_timeout(Duration::from_secs(20)).expect("an exit after SIGINT");
    let out = Out { code: status.code(), stdout: p.stdout.text(), stderr: p.stderr.text(), what: p.what.clone() };
    out.expect_code(130);
    assert!(out.stderr.contains("stopped by SIGINT"), "{}", out.stderr);
    let r = read_json(&t.join("r.json"));
    assert_eq!(r["complete"], true);
    assert!(r.get("interrupted").is_none(), "{r}");
    let case = &r["cases"][0];
    assert_eq!(case["duration"]["stopped_by"], "SIGINT");
    assert!(case["duration"]["s"].is_null(), "{}", case["duration"]);
    let reps: u64 = case["intervals"].as_array().unwrap().iter().map(|i| i["reps"].as_u64().unwrap()).sum();
    assert!(reps > 0 && reps == case["n"].as_u64().unwrap(), "{case}");
}

/// A 10 s-per-size run of three sizes, SIGINT in its first size: what that size measured is written (its
/// `duration.stopped_by` says it was cut short), no further size runs, the run is marked interrupted, exit 130.
#[test]
fn a_finite_run_stopped_by_sigint_keeps_the_size_in_progress_and_exits_130() {
    let t = TempDir::new("duration-cut");
    let json = t.arg("r.json");
    let args = ["sweep", "--sizes", "1MiB,2MiB,4MiB", "--duration", "10s", "--interval", "200ms", "--json", &json];
    let mut p = Proc::spawn(&args);
    assert!(
        p.stdout.wait_until(Duration::from_secs(60), |t| t.lines().any(|l| l.starts_with("interval "))),
        "no interval line:\n{}",
        p.stderr.text()
    );
    kill(Pid::from_raw(p.child.id() as i32), Signal::SIGINT).unwrap();
    let status = p.wait_timeout(Duration::from_secs(20)).expect("an exit after SIGINT");
    let out = Out { code: status.code(), stdout: p.stdout.text(), stderr: p.stderr.text(), what: p.what.clone() };
    out.expect_code(130);
    let r = read_json(&t.join("r.json"));
    assert_eq!(r["complete"], false, "{r}");
    assert_eq!(r["interrupted"]["signal"], "SIGINT");
    assert_eq!((r["interrupted"]["cases_done"].as_u64(), r["interrupted"]["cases_total"].as_u64()), (Some(0), Some(3)));
    assert!(r["interrupted"]["measuring"].as_str().unwrap().starts_with("1 MiB: "), "{}", r["interrupted"]);
    let cases = r["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 1, "the size in progress only: {r}");
    let d = &cases[0]["duration"];
    assert_eq!(d["stopped_by"], "SIGINT");
    assert!(d["measured_s"].as_f64().unwrap() < 10.0, "{d}");
    let reps: u64 = cases[0]["intervals"].as_array().unwrap().iter().map(|i| i["reps"].as_u64().unwrap()).sum();
    assert!(reps > 0 && reps == cases[0]["n"].as_u64().unwrap(), "{}", cases[0]);
}

/// An endless run's events file keeps a case's first 10,000 measured reps whole and thins the rest (saying so in a
/// line of its own), so it grows far slower than the reps.
#[test]
fn an_endless_runs_events_are_thinned_past_the_kept_reps() {
    let t = TempDir::new("duration-events");
    let (json, events) = (t.arg("r.json"), t.arg("ev.jsonl"));
    let args = ["sweep", "--sizes", "4KiB", "--duration", "inf", "--interval", "200ms", "--json", &json];
    let mut p = Proc::spawn(&[&args[..], &["--events", &events]].concat());
    let reps = |t: &str| -> u64 {
        let count = |l: &str| l.split("  ").find_map(|w| w.strip_suffix(" reps")?.parse::<u64>().ok());
        t.lines().filter(|l| l.starts_with("interval ")).filter_map(count).sum()
    };
    assert!(
        p.stdout.wait_until(Duration::from_secs(120), |t| reps(t) > 25_000),
        "not 25,000 reps in 2 minutes:\n{}",
        p.stdout.text()
    );
    kill(Pid::from_raw(p.child.id() as i32), Signal::SIGINT).unwrap();
    let status = p.wait_timeout(Duration::from_secs(20)).expect("an exit after SIGINT");
    assert_eq!(status.code(), Some(130), "{}", p.stderr.text());
    let r = read_json(&t.join("r.json"));
    let case = &r["cases"][0];
    let measured = case["n"].as_u64().unwrap() + case["duration"]["folded"]["reps"].as_u64().unwrap_or(0);
    let text = std::fs::read_to_string(t.join("ev.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let notes: Vec<&serde_json::Value> = lines.iter().filter(|l| l["thinned"] == true).collect();
    assert_eq!(notes.len(), 1, "one line says the reps are thinned");
    assert!(notes[0]["note"].as_str().unwrap().contains("10000"), "{}", notes[0]);
    let written = lines.iter().filter(|l| l["side"] == "sender" && l["warmup"] == false).count() as u64;
    assert!(written >= 10_000 && written < measured, "{written} of {measured} measured reps written");
    assert!(written <= 10_000 + (measured - 10_000) / 2 + 1, "{written} of {measured}: thinned past 10,000");
}

/// On a terminal the bar of a paced run counts each size's time ("1.0 of 2.0 s"), not reps against the rep count
/// it would have had without --duration (which it overran).
#[test]
fn a_paced_runs_progress_bar_counts_time_per_size() {
    let t = TempDir::new("duration-bar");
    let cmd =
        format!("{} sweep --sizes 1MiB,2MiB --duration 2s --interval 1s --json {}", bin().display(), t.arg("r.json"));
    // script(1) gives the run a terminal, where indicatif draws.
    let out = std::process::Command::new("script")
        .args(["-qfec", &cmd, "/dev/null"])
        .env("TERM", "xterm")
        .output()
        .expect("script(1) (util-linux) runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let screen = String::from_utf8_lossy(&out.stdout).replace('\r', "\n");
    assert!(screen.contains("size 2/2 2 MiB: "), "{screen}");
    assert!(screen.contains(" of 2.0 s "), "{screen}");
    assert!(!screen.contains(" reps  1 MiB"), "no rep count on the bar: {screen}");
}

/// Each bad combination is refused before anything runs, with one line naming the flags, exit code 2.
#[test]
fn bad_durations_are_one_line_and_exit_2() {
    let cases: &[(&[&str], &str)] = &[
        (&["--sizes", "1MiB", "--duration", "0"], "--duration 0"),
        (&["--sizes", "1MiB,2MiB", "--duration", "inf"], "--duration inf with 2 sizes"),
        (&["--sizes", "1MiB", "--duration", "2s", "--reps", "3"], "--reps"),
        (&["--sizes", "1MiB", "--duration", "1s", "--interval", "2s"], "longer than --duration"),
        (&["--sizes", "1MiB", "--interval", "1s"], "--interval 1s"),
    ];
    for (args, says) in cases {
        let mut all = vec!["sweep"];
        all.extend_from_slice(args);
        let out = run(&all);
        out.expect_code(2);
        let line = out.one_error();
        assert!(line.contains(says), "{all:?}: {line}");
    }
    // send refuses the same before it connects (nothing listens on the port).
    let port = free_port().to_string();
    let peer = format!("127.0.0.1:{port}");
    let out = run(&["send", "--peer", &peer, "--sizes", "1MiB", "--duration", "5s", "--reps", "2"]);
    out.expect_code(2);
    assert!(out.one_error().contains("--reps"), "{}", out.stderr);
}

/// An interval shorter than one rep of a size is refused when that size's warm-up shows it (exit 2, one line naming
/// the size); the sizes measured before it stay in the results file.
#[test]
fn an_interval_shorter_than_a_rep_is_refused_and_earlier_sizes_are_kept() {
    let t = TempDir::new("interval-short");
    let json = t.arg("r.json");
    let args = ["sweep", "--sizes", "4KiB,1GiB", "--duration", "300ms", "--interval", "20ms", "--json", &json];
    let out = run(&args);
    out.expect_code(2);
    let line = out.one_error();
    assert!(line.contains("--interval 20ms is shorter than one rep of 1 GiB"), "{line}");
    let r = read_json(&t.join("r.json"));
    assert_eq!(r["complete"], false, "{r}");
    let sizes: Vec<u64> = r["cases"].as_array().unwrap().iter().map(|c| c["size_bytes"].as_u64().unwrap()).collect();
    assert_eq!(sizes, [4096], "{r}");
}
