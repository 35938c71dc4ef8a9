//! `--duration` and `--interval` over loopback tcp with the real binary: an endless run stopped by a signal keeps
//! its files and exits 130, and bad combinations are one line and exit code 2.

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
