//! Helpers shared by the integration tests: run the real `kvxfer` binary as child processes over real loopback
//! sockets, with timeouts so that a hang fails a test instead of stalling the suite.
#![allow(dead_code)] // each test crate uses a different subset

use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// The binary under test: the one cargo built, or `KVXFER_BIN` (a binary carried to another machine, where the
/// build path does not exist).
pub fn bin() -> PathBuf {
    std::env::var_os("KVXFER_BIN").map(PathBuf::from).unwrap_or_else(|| env!("CARGO_BIN_EXE_kvxfer").into())
}

/// How long any single command of the suite may take before the test fails.
pub const CMD_TIMEOUT: Duration = Duration::from_secs(60);

pub fn kvxfer() -> Command {
    let mut c = Command::new(bin());
    // A token in the environment would change what serve and send do.
    c.env_remove("KVXFER_TOKEN");
    c.stdin(Stdio::null());
    c
}

/// A port that was free a moment ago: bind port 0, read the port, release it.
pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().unwrap().port()
}

// ------------------------------------------------------------------------------------------------ temp dirs

/// A fresh directory under the system temp dir, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "kvxfer-test-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("create temp dir");
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// `join` as a String, for command arguments.
    pub fn arg(&self, name: &str) -> String {
        self.join(name).to_string_lossy().into_owned()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

// ------------------------------------------------------------------------------------------ captured output

/// Text a child writes to one pipe, collected by a thread as it arrives, so tests can wait for a line.
#[derive(Clone, Default)]
pub struct Captured(Arc<(Mutex<(String, bool)>, Condvar)>);

impl Captured {
    pub fn spawn(pipe: impl Read + Send + 'static) -> Captured {
        let c = Captured::default();
        let inner = c.0.clone();
        std::thread::spawn(move || {
            let mut r = BufReader::new(pipe);
            let mut line = Vec::new();
            loop {
                line.clear();
                let n = r.read_until(b'\n', &mut line).unwrap_or(0);
                let (lock, cv) = &*inner;
                let mut g = lock.lock().unwrap();
                if n == 0 {
                    g.1 = true; // closed
                    cv.notify_all();
                    return;
                }
                g.0.push_str(&String::from_utf8_lossy(&line));
                cv.notify_all();
            }
        });
        c
    }

    pub fn text(&self) -> String {
        self.0 .0.lock().unwrap().0.clone()
    }

    /// Wait until the text contains `needle` (true) or the pipe closed / the timeout passed (false).
    pub fn wait_for(&self, needle: &str, timeout: Duration) -> bool {
        self.wait_until(timeout, |t| t.contains(needle))
    }

    pub fn wait_until(&self, timeout: Duration, mut pred: impl FnMut(&str) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        let (lock, cv) = &*self.0;
        let mut g = lock.lock().unwrap();
        loop {
            if pred(&g.0) {
                return true;
            }
            let now = Instant::now();
            if g.1 || now >= deadline {
                return false;
            }
            g = cv.wait_timeout(g, deadline - now).unwrap().0;
        }
    }

    /// Wait until the writer closed the pipe (the child exited).
    pub fn wait_closed(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let (lock, cv) = &*self.0;
        let mut g = lock.lock().unwrap();
        while !g.1 && Instant::now() < deadline {
            g = cv.wait_timeout(g, deadline.saturating_duration_since(Instant::now())).unwrap().0;
        }
    }
}

// ------------------------------------------------------------------------------------------ running children

/// A running kvxfer child with both output pipes captured. Killed on drop if still running.
pub struct Proc {
    pub child: Child,
    pub stdout: Captured,
    pub stderr: Captured,
    pub what: String,
}

impl Proc {
    pub fn spawn(args: &[&str]) -> Proc {
        let mut child =
            kvxfer().args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn kvxfer");
        let stdout = Captured::spawn(child.stdout.take().unwrap());
        let stderr = Captured::spawn(child.stderr.take().unwrap());
        Proc { child, stdout, stderr, what: format!("kvxfer {}", args.join(" ")) }
    }

    /// Wait for exit within `timeout`; on timeout kill it and return None.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(st) = self.child.try_wait().expect("try_wait") {
                // Let the reader threads see the end of both pipes.
                self.stdout.wait_closed(Duration::from_secs(5));
                self.stderr.wait_closed(Duration::from_secs(5));
                return Some(st);
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Wait for exit (failing the test after CMD_TIMEOUT) and return the result.
    pub fn finish(mut self) -> Out {
        let status = self.wait_timeout(CMD_TIMEOUT).unwrap_or_else(|| {
            panic!(
                "{} did not exit within {CMD_TIMEOUT:?}\nstdout:\n{}\nstderr:\n{}",
                self.what,
                self.stdout.text(),
                self.stderr.text()
            )
        });
        Out { code: status.code(), stdout: self.stdout.text(), stderr: self.stderr.text(), what: self.what.clone() }
    }

    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// What a finished command left.
#[derive(Debug)]
pub struct Out {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub what: String,
}

impl Out {
    /// Panic with the whole output unless the exit code is `code`.
    pub fn expect_code(&self, code: i32) -> &Self {
        assert_eq!(
            self.code,
            Some(code),
            "{}: expected exit {code}\nstdout:\n{}\nstderr:\n{}",
            self.what,
            self.stdout,
            self.stderr
        );
        self.no_panic()
    }

    pub fn no_panic(&self) -> &Self {
        for text in [&self.stdout, &self.stderr] {
            assert!(!text.contains("panicked") && !text.contains("RUST_BACKTRACE"), "{}: panicked:\n{text}", self.what);
        }
        self
    }

    /// The `error:` lines on stderr.
    pub fn error_lines(&self) -> Vec<&str> {
        self.stderr.lines().filter(|l| l.starts_with("error:")).collect()
    }

    /// Exactly one `error:` line; returns it.
    pub fn one_error(&self) -> &str {
        let lines = self.error_lines();
        assert_eq!(lines.len(), 1, "{}: expected exactly one error: line on stderr, got:\n{}", self.what, self.stderr);
        lines[0]
    }
}

/// Run kvxfer to completion.
pub fn run(args: &[&str]) -> Out {
    Proc::spawn(args).finish()
}

// ------------------------------------------------------------------------------------------------ serve

/// A `kvxfer serve` on a free loopback port, ready (its "listening" line seen) when returned.
pub struct Serve {
    pub proc: Proc,
    pub addr: String,
}

impl Serve {
    /// Start `kvxfer serve --listen 127.0.0.1:<free port> <extra>`, retrying on the rare port race.
    pub fn start(extra: &[&str]) -> Serve {
        let mut last = String::new();
        for _ in 0..5 {
            let addr = format!("127.0.0.1:{}", free_port());
            let mut args = vec!["serve", "--listen", &addr];
            args.extend_from_slice(extra);
            let mut proc = Proc::spawn(&args);
            if proc.stderr.wait_for("listening on", Duration::from_secs(20)) {
                return Serve { proc, addr };
            }
            proc.kill();
            last = proc.stderr.text();
            if !last.contains("in use") {
                break;
            }
        }
        panic!("kvxfer serve did not start listening:\n{last}");
    }

    pub fn stderr(&self) -> String {
        self.proc.stderr.text()
    }
}

// --------------------------------------------------------------------------------------------- JSON checks

pub fn read_json(p: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON ({e}):\n{text}", p.display()))
}

pub fn num(v: &serde_json::Value, key: &str) -> f64 {
    v.get(key).and_then(|x| x.as_f64()).unwrap_or_else(|| panic!("missing number {key:?} in {v}"))
}

/// Check every contract key of one `cases[]` element and the invariants between them.
pub fn check_case(c: &serde_json::Value, size_bytes: u64, reps: u64, verify: bool) {
    assert_eq!(c["size_bytes"].as_u64(), Some(size_bytes), "{c}");
    assert_eq!(c["n"].as_u64(), Some(reps), "n == reps: {c}");
    for key in ["tokens", "bytes_per_token"] {
        assert!(c.get(key).is_some(), "cases[] lacks {key:?}");
    }
    for stage in ["transfer_ms", "setup_ms", "notify_ms"] {
        let s = &c[stage];
        for k in ["p50", "p90", "p99", "min", "max", "mean", "stdev"] {
            let v = num(s, k);
            assert!(v.is_finite() && v >= 0.0, "{stage}.{k} = {v}");
        }
        let (min, p50, p90, p99, max) = (num(s, "min"), num(s, "p50"), num(s, "p90"), num(s, "p99"), num(s, "max"));
        assert!(min <= p50 && p50 <= p90 && p90 <= p99 && p99 <= max, "{stage} quantiles out of order: {s}");
        assert!(min <= num(s, "mean") && num(s, "mean") <= max, "{stage}: {s}");
    }
    assert!(num(&c["transfer_ms"], "min") > 0.0, "a transfer takes time");
    let g = &c["gbps"];
    for k in ["p50", "min", "max", "mean"] {
        let v = num(g, k);
        assert!(v.is_finite() && v > 0.0, "gbps.{k} = {v}");
    }
    assert!(num(g, "min") <= num(g, "p50") && num(g, "p50") <= num(g, "max"));
    let lat = &c["block_latency_us"];
    for k in ["p50", "p99", "max"] {
        assert!(num(lat, k) >= 1.0, "block_latency_us.{k}: {lat}");
    }
    assert!(num(lat, "p50") <= num(lat, "p99") && num(lat, "p99") <= num(lat, "max"));
    if verify {
        assert_eq!(c["verified"], serde_json::json!(true), "{c}");
        assert_eq!(c["mismatched_bytes"].as_u64(), Some(0), "{c}");
    } else {
        assert!(c["verified"].is_null() && c["mismatched_bytes"].is_null(), "{c}");
    }
    let r = c["reps"].as_array().expect("reps[]");
    assert_eq!(r.len() as u64, reps, "reps[] has n entries");
    for (i, rep) in r.iter().enumerate() {
        assert_eq!(rep["i"].as_u64(), Some(i as u64), "{rep}");
        for k in ["transfer_ms", "gbps", "setup_ms", "notify_ms", "total_ms"] {
            let v = num(rep, k);
            assert!(v.is_finite() && v >= 0.0, "reps[{i}].{k} = {v}");
        }
        // GB/s = 10^9 bytes/s, from the size and the transfer time.
        let expect = size_bytes as f64 / (num(rep, "transfer_ms") * 1e-3) / 1e9;
        let got = num(rep, "gbps");
        assert!((got - expect).abs() <= 1e-6 * expect.max(1.0), "reps[{i}].gbps {got} != size/transfer_ms {expect}");
        // The total spans setup and transfer on the sender's clock.
        assert!(
            num(rep, "total_ms") + 1e-6 >= num(rep, "transfer_ms") + num(rep, "setup_ms") - 1e-3,
            "reps[{i}]: total_ms < setup_ms + transfer_ms: {rep}"
        );
    }
    let ts: Vec<f64> = r.iter().map(|x| num(x, "transfer_ms")).collect();
    let min = ts.iter().cloned().fold(f64::INFINITY, f64::min);
    let max = ts.iter().cloned().fold(0.0, f64::max);
    assert!((num(&c["transfer_ms"], "min") - min).abs() < 1e-9);
    assert!((num(&c["transfer_ms"], "max") - max).abs() < 1e-9);
}

/// Run kvxfer to completion with the raw `Output`, echoing the command and its output to the test's log (shown
/// when a test fails).
pub fn output_logged(args: &[&str]) -> std::process::Output {
    let out = kvxfer().args(args).output().expect("run kvxfer");
    eprintln!(
        "$ kvxfer {}\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}
