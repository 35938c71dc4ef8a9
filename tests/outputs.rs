//! Nothing a user runs is lost or looks complete when it is not: default results files never replace each other,
//! a signal leaves files that say they are incomplete and how to resume, outputs that cannot be written fail the
//! same way, and hostile output paths (the same file twice, a FIFO nobody reads, a full disk) are refused with one
//! line. Every test runs the real binary, and signals are real.

mod common;

use common::*;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::path::{Path, PathBuf};
use std::time::Duration;

const MIB: u64 = 1 << 20;
const EXIT_WITHIN: Duration = Duration::from_secs(10);

fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    v.sort();
    v
}

#[test]
fn default_results_files_never_replace_each_other() {
    let dir = TempDir::new("coll");
    let out_dir = dir.arg("coll");
    for size in ["1MiB", "2MiB", "4MiB"] {
        run(&["sweep", "--sizes", size, "--reps", "2", "--out-dir", &out_dir]).expect_code(0);
    }
    let files = files_in(&dir.join("coll"));
    assert_eq!(files.len(), 3, "one results file per run, JSON only (no Markdown unless asked): {files:?}");
    let mut sizes: Vec<u64> = files
        .iter()
        .map(|f| {
            assert_eq!(f.extension().unwrap(), "json");
            read_json(f)["cases"][0]["size_bytes"].as_u64().unwrap()
        })
        .collect();
    sizes.sort();
    assert_eq!(sizes, [MIB, 2 * MIB, 4 * MIB], "each run kept its own case");
}

#[test]
fn json_named_means_no_file_elsewhere_and_send_keeps_a_default_file() {
    let dir = TempDir::new("named");
    let json = dir.arg("r.json");
    let out_dir = dir.arg("unused");
    run(&["sweep", "--sizes", "1MiB", "--reps", "1", "--json", &json, "--out-dir", &out_dir]).expect_code(0);
    assert!(!dir.join("unused").exists(), "--json named the only file: nothing goes to --out-dir");

    let serve = Serve::start(&[]);
    let send_dir = dir.arg("sent");
    run(&["send", "--peer", &serve.addr, "--sizes", "1MiB", "--reps", "1", "--out-dir", &send_dir]).expect_code(0);
    let files = files_in(&dir.join("sent"));
    assert_eq!(files.len(), 1, "send writes a results file by default: {files:?}");
    assert_eq!(read_json(&files[0])["complete"], true);
}

/// Start `args` (a run writing `json`), wait for its second case's row, send `sig`, and return its output.
fn interrupt_after_two_cases(args: &[&str], sig: Signal) -> Out {
    let mut p = Proc::spawn(args);
    assert!(
        p.stdout.wait_until(Duration::from_secs(60), |t| t.lines().any(|l| l.trim_start().starts_with("2 MiB"))),
        "no second row:\n{}",
        p.stderr.text()
    );
    kill(Pid::from_raw(p.child.id() as i32), sig).unwrap();
    let status = p.wait_timeout(EXIT_WITHIN).unwrap_or_else(|| panic!("no exit within {EXIT_WITHIN:?} of {sig}"));
    Out { code: status.code(), stdout: p.stdout.text(), stderr: p.stderr.text(), what: p.what.clone() }
}

#[test]
fn ctrl_c_leaves_files_that_say_incomplete_and_a_command_that_resumes() {
    let dir = TempDir::new("sigint-sweep");
    let (json, md, csv) = (dir.arg("r.json"), dir.arg("r.md"), dir.arg("r.csv"));
    let args = ["sweep", "--sizes", "1MiB,2MiB,256MiB", "--reps", "20", "--json", &json, "--md", &md, "--csv", &csv];
    let out = interrupt_after_two_cases(&args, Signal::SIGINT);
    out.expect_code(130);
    let line = out.stderr.lines().find(|l| l.contains("interrupted by SIGINT")).unwrap_or_else(|| panic!("{out:?}"));
    assert!(line.contains("after 2 of 3 cases"), "{line}");
    for f in [&json, &md, &csv] {
        assert!(line.contains(f.as_str()), "the line names {f}: {line}");
    }
    let resume = line.split("resume with: ").nth(1).expect("the resume command").trim().to_string();
    assert!(resume.contains("--resume") && resume.contains(&json), "{resume}");

    let r = read_json(&dir.join("r.json"));
    assert_eq!(r["complete"], false);
    assert_eq!(r["cases"].as_array().unwrap().len(), 2);
    assert_eq!(r["interrupted"]["signal"], "SIGINT");
    assert_eq!(r["interrupted"]["cases_done"], 2);
    assert_eq!(r["interrupted"]["cases_total"], 3);
    // Either the third case had finished reps (named) or the signal came before its first one (nothing named).
    let measuring = r["interrupted"]["measuring"].as_str();
    assert!(measuring.is_none_or(|m| m.starts_with("256 MiB")), "{}", r["interrupted"]);
    let md_text = std::fs::read_to_string(dir.join("r.md")).unwrap();
    assert!(md_text.lines().next().unwrap().contains("INCOMPLETE: interrupted by SIGINT after 2 of 3"), "{md_text}");
    assert!(!md_text.contains("none with warnings") || md_text.starts_with("> **INCOMPLETE"), "{md_text}");
    let csv_text = std::fs::read_to_string(dir.join("r.csv")).unwrap();
    assert!(csv_text.starts_with('#') && csv_text.lines().next().unwrap().contains("INCOMPLETE"), "{csv_text}");

    // The printed command continues the run: the two cases are kept, the third measured, the file complete.
    let words: Vec<&str> = resume.split(' ').skip(1).collect();
    let again = run(&words);
    again.expect_code(0);
    assert!(again.stderr.contains("2 of 3 cases complete"), "{}", again.stderr);
    let r = read_json(&dir.join("r.json"));
    assert_eq!(r["complete"], true, "{r}");
    assert!(r.get("interrupted").is_none());
    let sizes: Vec<u64> = r["cases"].as_array().unwrap().iter().map(|c| c["size_bytes"].as_u64().unwrap()).collect();
    assert_eq!(sizes, [MIB, 2 * MIB, 256 * MIB]);
    assert!(!std::fs::read_to_string(dir.join("r.csv")).unwrap().starts_with('#'), "a complete CSV is plain");
}

#[test]
fn sigterm_and_sighup_stop_a_run_as_ctrl_c_does() {
    for sig in [Signal::SIGTERM, Signal::SIGHUP] {
        let dir = TempDir::new("sigterm");
        let json = dir.arg("r.json");
        let out =
            interrupt_after_two_cases(&["sweep", "--sizes", "1MiB,2MiB,256MiB", "--reps", "20", "--json", &json], sig);
        out.expect_code(130);
        assert!(out.stderr.contains(&format!("interrupted by {sig} after 2 of 3 cases")), "{}", out.stderr);
        let r = read_json(&dir.join("r.json"));
        assert_eq!(r["interrupted"]["signal"], sig.to_string());
        assert_eq!(r["cases"].as_array().unwrap().len(), 2);
    }
}

#[test]
fn an_interrupted_send_keeps_its_cases_and_the_serve_stays_up() {
    let dir = TempDir::new("sigint-send");
    let serve = Serve::start(&[]);
    let out_dir = dir.arg("res");
    let args = ["send", "--peer", &serve.addr, "--sizes", "1MiB,2MiB,256MiB", "--reps", "20", "--out-dir", &out_dir];
    let out = interrupt_after_two_cases(&args, Signal::SIGINT);
    out.expect_code(130);
    let files = files_in(&dir.join("res"));
    assert_eq!(files.len(), 1, "{files:?}");
    let r = read_json(&files[0]);
    assert_eq!(r["cases"].as_array().unwrap().len(), 2, "what send measured survives: {r}");
    assert_eq!(r["interrupted"]["signal"], "SIGINT");
    // The receiver saw its sender go, said so once, and takes the next sender.
    serve.wait_idle();
    let again = run(&["send", "--peer", &serve.addr, "--sizes", "1MiB", "--reps", "1", "--out-dir", &out_dir]);
    again.expect_code(0);
    let log = serve.stderr();
    let said: Vec<&str> = log.lines().filter(|l| l.starts_with("error: sender")).collect();
    assert_eq!(said.len(), 1, "one line for the interrupted sender: {log}");
    assert!(log.lines().last().is_some_and(|l| l.ends_with("run complete")), "{log}");
}

#[test]
fn a_second_signal_exits_at_once_while_the_first_waits_on_a_full_fifo() {
    use std::os::fd::{AsFd, AsRawFd};
    let dir = TempDir::new("sigint-twice");
    let fifo = dir.join("r.json");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    // A reader that is there but never reads, on a pipe of one page: the results, written to a FIFO only when the
    // run ends (here: at the signal), cannot all go in, so the first signal's save blocks.
    let reader = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new().read(true).custom_flags(nix::libc::O_NONBLOCK).open(&fifo).unwrap()
    };
    nix::fcntl::fcntl(reader.as_raw_fd(), nix::fcntl::FcntlArg::F_SETPIPE_SZ(4096)).unwrap();
    let json = fifo.to_string_lossy().into_owned();
    let mut p = Proc::spawn(&["sweep", "--sizes", "1MiB,2MiB,256MiB", "--reps", "20", "--json", &json]);
    assert!(
        p.stdout.wait_until(Duration::from_secs(60), |t| t.lines().any(|l| l.trim_start().starts_with("2 MiB"))),
        "{}",
        p.stderr.text()
    );
    let pid = Pid::from_raw(p.child.id() as i32);
    kill(pid, Signal::SIGINT).unwrap();
    // The pipe turns readable when the signal's save starts writing; that save cannot finish.
    let mut fds = [nix::poll::PollFd::new(reader.as_fd(), nix::poll::PollFlags::POLLIN)];
    let ready = nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(30_000u16)).unwrap();
    assert_eq!(ready, 1, "the interrupted run never wrote its results to the FIFO");
    assert!(p.is_running(), "the first signal waits for its save (results larger than the pipe)");
    kill(pid, Signal::SIGINT).unwrap();
    let status = p.wait_timeout(EXIT_WITHIN).expect("the second Ctrl-C exits at once");
    assert_eq!(status.code(), Some(130));
    drop(reader);
}

#[test]
fn two_outputs_naming_one_file_are_refused() {
    let dir = TempDir::new("same");
    let r = dir.arg("r.out");
    for (a, b) in [("--json", "--csv"), ("--md", "--events"), ("--json", "--events")] {
        let out = run(&["sweep", "--sizes", "1MiB", "--reps", "1", a, &r, b, &r]);
        out.expect_code(2);
        assert!(out.one_error().contains("name the same file"), "{}", out.stderr);
    }
    assert!(!dir.join("r.out").exists(), "refused before anything was written");
}

#[test]
fn dash_is_no_output_file_of_a_run() {
    let dir = TempDir::new("dash");
    for flag in ["--json", "--csv", "--md", "--events"] {
        let out = run(&["sweep", "--sizes", "1MiB", "--reps", "1", flag, "-", "--out-dir", &dir.arg("")]);
        out.expect_code(2);
        assert!(out.one_error().contains("kvxfer report FILE.json"), "{flag}: {}", out.stderr);
    }
    assert!(!Path::new("-").exists() && files_in(dir.path()).is_empty(), "no file named '-', no results file");
}

#[test]
fn a_fifo_nobody_reads_is_refused_at_once() {
    let dir = TempDir::new("fifo");
    let fifo = dir.join("out.csv");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let f = fifo.to_string_lossy().into_owned();
    for flag in ["--csv", "--events", "--json"] {
        let out = run(&["sweep", "--sizes", "1MiB", "--reps", "1", flag, &f, "--out-dir", &dir.arg("")]);
        out.expect_code(2);
        assert!(out.one_error().contains("no process reading"), "{flag}: {}", out.stderr);
    }
}

#[test]
fn every_output_that_cannot_be_written_fails_the_run_with_one_line() {
    for flag in ["--json", "--csv", "--md", "--events"] {
        let out = run(&["sweep", "--sizes", "1MiB,2MiB", "--reps", "1", flag, "/dev/full", "--out-dir", "/tmp"]);
        out.expect_code(1);
        let e = out.one_error();
        assert!(e.contains("No space left on device"), "{flag}: {}", out.stderr);
        if flag == "--events" {
            assert!(e.contains("--events"), "{e}");
        }
    }
}

#[test]
fn a_full_disk_under_fig_is_one_line_not_a_debug_dump() {
    let root = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").unwrap()) == 0;
    if !root {
        if std::env::var("KVXFER_REQUIRE_ROOT").is_ok_and(|v| v == "1") {
            panic!("KVXFER_REQUIRE_ROOT=1 but not root: cannot mount a small tmpfs");
        }
        eprintln!("skipped: mounting a small tmpfs needs root");
        return;
    }
    let dir = TempDir::new("fullfig");
    let mnt = dir.join("small");
    std::fs::create_dir(&mnt).unwrap();
    let st = std::process::Command::new("mount").args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"]).arg(&mnt).status();
    assert!(st.is_ok_and(|s| s.success()), "mount a 64 KiB tmpfs");
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(&self.0).status();
        }
    }
    let _guard = Unmount(mnt.clone());
    let figs = mnt.join("figs").to_string_lossy().into_owned();
    let json = dir.arg("r.json");
    let out = run(&["sweep", "--sizes", "1MiB,2MiB", "--reps", "2", "--json", &json, "--fig", &figs]);
    out.expect_code(1);
    let e = out.one_error();
    // Whichever figure file fills the disk first (a PNG or an SVG, by the figures' sizes) is the one named.
    assert!(e.contains("No space left on device") && e.contains("/small/figs/"), "{}", out.stderr);
    assert!(!out.stderr.contains("ImageError") && !out.stderr.contains("Custom"), "{}", out.stderr);
    assert_eq!(read_json(&dir.join("r.json"))["cases"].as_array().unwrap().len(), 2, "the results are kept");
}
