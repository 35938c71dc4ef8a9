//! Helpers shared by the integration tests: run the real `kvxfer` binary as child processes over real loopback
//! sockets, with timeouts so that a hang fails a test instead of stalling the suite.
#![allow(dead_code)] // each test crate uses a different subset

pub mod captured;
pub mod checks;
pub mod launch;
pub mod paged;
pub mod raw_sender;

#[allow(unused_imports)] // each test crate uses a different subset
pub use captured::{Captured, Events};
pub use checks::*;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

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
    // A run given no --json or --out-dir writes its results file here, not into the checkout's results/.
    c.env("KVXFER_OUT_DIR", std::env::temp_dir().join("kvxfer-test-results"));
    c.stdin(Stdio::null());
    c
}

/// A port for a test's listener to take: one no test holds now, drawn from 20000..32000 — below Linux's ephemeral
/// range (32768..), which the kernel hands to every outgoing connection and to every `bind(0)` (the engines' own
/// listeners too), and away from Mooncake's RPC ports (15000..17000). A port picked with `bind(0)` can be handed to
/// someone else before the test's process binds it, which parallel tests opening many connections make likely.
pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let mut seed = [0u8; 4];
    getrandom::fill(&mut seed).expect("randomness for a port");
    let base = u32::from_le_bytes(seed);
    for _ in 0..1000 {
        let port = 20000 + ((base.wrapping_add(NEXT.fetch_add(7919, Ordering::Relaxed))) % 12000) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in 20000..32000 on 127.0.0.1");
}

// ------------------------------------------------------------------------------------------ required hardware

/// How much of the hardware named by `var` the harness promises: `KVXFER_REQUIRE_RXE=1` (set by scripts/test-rxe:
/// soft-RoCE devices), `KVXFER_REQUIRE_GPU=N` (set in device runs: at least N GPUs). 0 when unset, empty or `0`; a
/// value that is not a number counts as 1.
pub fn promised(var: &str) -> usize {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => v.trim().parse().unwrap_or(1),
        _ => 0,
    }
}

/// A test found too little of the hardware it needs (`found` units of what `var` names; `why` says what is missing):
/// it skips, printing why, unless the harness promised more than that (see [`promised`]); then it fails, so that a
/// harness that silently stops providing the hardware turns the run red instead of skipping everything.
pub fn missing_hardware(var: &str, found: usize, why: &str) {
    let p = promised(var);
    if found < p {
        panic!(
            "{why}, but {var}={} promises it: the test harness did not provide the hardware",
            std::env::var(var).unwrap_or_default()
        );
    }
    eprintln!("skipped: {why}");
}

/// What each `#[ignore]`d test of the suite needs, by the variable with which a harness promises it.
pub const REQUIRE_VARS: &[&str] =
    &["KVXFER_REQUIRE_GPU", "KVXFER_REQUIRE_RXE", "KVXFER_REQUIRE_ENGINES", launch::REQUIRE_SLURM];

/// The tests that need hardware are `#[ignore]`d, so that where it is absent they are listed as ignored, with the
/// reason, instead of passing without having run; a harness that provides it sets its `KVXFER_REQUIRE_*` and runs
/// them with `--include-ignored` (libtest) or `--run-ignored` (nextest). Fails a libtest run that promises some
/// hardware but leaves the ignored tests out: it would otherwise report them ignored and pass. (nextest starts each
/// test in a process of its own without saying whether it runs the ignored ones; its harness's command is what
/// includes them.)
pub fn ignored_tests_run_where_promised() {
    let promises: Vec<&str> = REQUIRE_VARS.iter().copied().filter(|v| promised(v) > 0).collect();
    if promises.is_empty() || std::env::var_os("NEXTEST").is_some() {
        return;
    }
    let included = std::env::args().any(|a| a == "--include-ignored" || a == "--ignored");
    assert!(
        included,
        "{} promises the hardware, but this run leaves out the #[ignore]d tests that need it: pass --include-ignored \
         to the test binary (cargo test -- --include-ignored)",
        promises.join(", ")
    );
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

// ------------------------------------------------------------------------------------------ running children

/// A running kvxfer child with both output pipes captured. Killed on drop if still running.
pub struct Proc {
    pub child: Child,
    pub stdout: Captured,
    pub stderr: Captured,
    pub what: String,
    exited: Exited,
}

/// Set by a thread blocked in `waitid(WEXITED | WNOWAIT)` on the child once it has exited. `WNOWAIT` leaves the
/// child unreaped, so `Child` still owns its pid (a kill cannot reach a recycled pid) and reaps it itself.
#[derive(Clone, Default)]
struct Exited(Arc<(Mutex<bool>, Condvar)>);

impl Exited {
    fn watch(pid: u32) -> Exited {
        let e = Exited::default();
        let set = e.clone();
        std::thread::spawn(move || {
            use nix::sys::wait::{waitid, Id, WaitPidFlag};
            let pid = nix::unistd::Pid::from_raw(pid as i32);
            // Any answer but EINTR means it is gone: exited, or already reaped by `Child` (ECHILD).
            while let Err(nix::errno::Errno::EINTR) = waitid(Id::Pid(pid), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT)
            {
            }
            let (lock, cv) = &*set.0;
            *lock.lock().unwrap() = true;
            cv.notify_all();
        });
        e
    }

    /// Wait until the child has exited (true) or `timeout` passed (false).
    fn wait(&self, timeout: Duration) -> bool {
        let (lock, cv) = &*self.0;
        let g = lock.lock().unwrap();
        *cv.wait_timeout_while(g, timeout, |exited| !*exited).unwrap().0
    }
}

impl Proc {
    pub fn spawn(args: &[&str]) -> Proc {
        Proc::start(kvxfer().args(args), format!("kvxfer {}", args.join(" ")))
    }

    /// Start any command with both pipes captured (stdin as the command has it).
    pub fn start(cmd: &mut Command, what: String) -> Proc {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        let stdout = Captured::spawn(child.stdout.take().unwrap());
        let stderr = Captured::spawn(child.stderr.take().unwrap());
        let exited = Exited::watch(child.id());
        Proc { child, stdout, stderr, what, exited }
    }

    /// Wait for exit within `timeout`; on timeout kill it and return None.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<ExitStatus> {
        if !self.exited.wait(timeout) {
            let _ = self.child.kill();
            let _ = self.child.wait();
            return None;
        }
        let st = self.child.wait().expect("wait for an exited child");
        // Let the reader threads see the end of both pipes.
        self.stdout.wait_closed(Duration::from_secs(5));
        self.stderr.wait_closed(Duration::from_secs(5));
        Some(st)
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

    /// The `error:` lines on stderr (a cluster rank's after its `[rank N] ` prefix).
    pub fn error_lines(&self) -> Vec<&str> {
        self.stderr.lines().map(unprefixed).filter(|l| l.starts_with("error:")).collect()
    }

    /// Exactly one `error:` line; returns it.
    pub fn one_error(&self) -> &str {
        let lines = self.error_lines();
        assert_eq!(lines.len(), 1, "{}: expected exactly one error: line on stderr, got:\n{}", self.what, self.stderr);
        lines[0]
    }
}

/// A stderr line without the `[rank N] ` a cluster rank starts each of its lines with.
pub fn unprefixed(line: &str) -> &str {
    match line.strip_prefix("[rank ").and_then(|rest| rest.split_once("] ")) {
        Some((rank, text)) if rank.bytes().all(|b| b.is_ascii_digit()) => text,
        _ => line,
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
    /// Wait until every session serve has started has ended: each `sender connected from PEER` line has a later
    /// `sender PEER: run complete` or `error: sender PEER: …` line. serve clears its one-run slot before it logs
    /// the end, so a sender that comes after this is not told "busy".
    pub fn wait_idle(&self) {
        let idle = self.proc.stderr.wait_until(Duration::from_secs(15), |t| {
            let mut open: Vec<&str> = Vec::new();
            for line in t.lines() {
                if let Some(peer) = line.strip_prefix("sender connected from ") {
                    open.push(peer.trim());
                } else if let Some(rest) = line.strip_prefix("error: sender ").or_else(|| line.strip_prefix("sender "))
                {
                    let peer = rest.split(": ").next().unwrap_or_default();
                    open.retain(|p| *p != peer);
                }
            }
            open.is_empty()
        });
        assert!(idle, "serve did not end its sessions:\n{}", self.proc.stderr.text());
    }

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

/// A paged layout of qwen3-30b-a3b (16 KiB pieces: 16 tokens × 4 KV heads × head dim 128 × 2 B, 98,304 B/token)
/// for `--tokens`.
pub const PAGED_QWEN: &[&str] = &["--layout", "paged", "--model", "qwen3-30b-a3b"];

/// One rep, no warm-up, of a paged transfer of 64 tokens of llama-3.1-8b whose sender swaps two pieces'
/// destinations (the hidden, test-only `--test-fault-swap-dests`): `--verify` must catch it.
pub const PAGED_SWAPPED_PIECES: &[&str] = &[
    "--layout",
    "paged",
    "--tokens",
    "64",
    "--model",
    "llama-3.1-8b",
    "--reps",
    "1",
    "--warmup",
    "0",
    "--test-fault-swap-dests",
];

/// `kvxfer ARGS` run to completion with the test-only fault `KVXFER_TEST_FAULT=flip-byte`: the sender inverts one
/// byte of each contiguous case's first measured rep after filling the `--verify` pattern (src/run/sender.rs).
pub fn run_flipping_a_byte(args: &[&str]) -> Out {
    let what = format!("KVXFER_TEST_FAULT=flip-byte kvxfer {}", args.join(" "));
    Proc::start(kvxfer().env("KVXFER_TEST_FAULT", "flip-byte").args(args), what).finish()
}

/// What a `--verify` run of `--reps 2` at `size` bytes that [`run_flipping_a_byte`] corrupted must leave: exit 1 with
/// one error line naming the failure, and in the results file (`json`) the case unverified with exactly one
/// mismatched byte, all of it in the first measured rep. (The run stops after that case.)
pub fn expect_one_corrupted_byte(out: &Out, json: &Path, size: u64) {
    out.expect_code(1);
    let line = out.one_error();
    assert!(line.contains("verification failed: 1 mismatched bytes at size"), "{}: {line}", out.what);
    let cases = read_json(json)["cases"].as_array().cloned().unwrap_or_default();
    assert_eq!(cases.len(), 1, "{}: the run stops after the corrupted case: {cases:?}", out.what);
    let c = &cases[0];
    assert_eq!((c["size_bytes"].as_u64(), &c["verified"]), (Some(size), &serde_json::json!(false)), "{c}");
    assert_eq!(c["mismatched_bytes"].as_u64(), Some(1), "{}: the one inverted byte, counted: {c}", out.what);
    let per_rep: Vec<Option<u64>> =
        c["reps"].as_array().unwrap().iter().map(|r| r["mismatched_bytes"].as_u64()).collect();
    assert_eq!(per_rep, [Some(1), Some(0)], "{}: {c}", out.what);
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
