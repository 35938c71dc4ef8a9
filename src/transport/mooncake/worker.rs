//! The Python worker through which kvxfer drives Mooncake Transfer Engine (a pybind module with no C API): one
//! child process per end, JSON lines in on its stdin and out on its stdout, one reply per request. The worker script
//! ships inside the binary and is written to the temp directory on first use, so nothing but Python and the wheel
//! has to be installed; `KVXFER_MOONCAKE_WORKER` points at another copy, `KVXFER_PYTHON` at the interpreter (a venv's
//! python, say) that has the wheel.

use anyhow::{anyhow, bail, Context as _, Result};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use serde_json::Value;
use std::io::{BufRead, BufReader, Write as _};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

/// The worker as this version of kvxfer ships it.
const SCRIPT: &str = include_str!("../../../python/kvxfer_mooncake.py");
/// The worker's exit status when `import mooncake` failed.
const NO_WHEEL: i32 = 3;
/// What to install, for the error lines.
pub const WHEEL_HINT: &str =
    "pip install mooncake-transfer-engine-non-cuda (GPU hosts: the CUDA wheel) into the Python that KVXFER_PYTHON names";

/// Whether the Python that `KVXFER_PYTHON` names (default python3) imports what the worker imports; if not, a few
/// words and the full line.
pub fn probe() -> std::result::Result<(), (&'static str, anyhow::Error)> {
    let python = std::env::var("KVXFER_PYTHON").unwrap_or_else(|_| "python3".into());
    let status = Command::new(&python)
        .args(["-c", "from mooncake.engine import TransferEngine"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    match status {
        Ok(s) if s.success() => Ok(()),
        Ok(_) => Err((
            "no Python with the mooncake package (set KVXFER_PYTHON)",
            anyhow!("{python} cannot import Mooncake; {WHEEL_HINT}"),
        )),
        Err(e) => Err(("no Python (set KVXFER_PYTHON)", anyhow!("cannot run {python:?} ({e}); {WHEEL_HINT}"))),
    }
}

pub struct Worker {
    child: Child,
    stdin: ChildStdin,
    replies: BufReader<ChildStdout>,
    /// Where the worker's (and the engine's) own messages go.
    pub log: PathBuf,
    /// Whether the log says something the user may need (an error); otherwise it goes with the worker.
    keep_log: bool,
    pub python: String,
    io_timeout: Duration,
}

/// The worker script's path: `KVXFER_MOONCAKE_WORKER`, else the embedded copy written once per content.
fn script_path() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("KVXFER_MOONCAKE_WORKER") {
        return Ok(PathBuf::from(p));
    }
    // Named by its content, so two kvxfer versions side by side never run each other's worker.
    let mut h = std::hash::DefaultHasher::new();
    std::hash::Hash::hash(SCRIPT, &mut h);
    let path = std::env::temp_dir().join(format!("kvxfer-mooncake-{:016x}.py", std::hash::Hasher::finish(&h)));
    if std::fs::read_to_string(&path).ok().as_deref() != Some(SCRIPT) {
        let tmp = path.with_extension(format!("{}.tmp", std::process::id()));
        std::fs::write(&tmp, SCRIPT)
            .with_context(|| format!("cannot write the mooncake worker to {}", tmp.display()))?;
        std::fs::rename(&tmp, &path)?;
    }
    Ok(path)
}

impl Worker {
    /// Start a worker with `env` added to its environment; `role` names it in its log file's name; requests wait
    /// at most `io_timeout` for their reply.
    pub fn spawn(role: &str, env: &[(&str, String)], io_timeout: Duration) -> Result<Worker> {
        let python = std::env::var("KVXFER_PYTHON").unwrap_or_else(|_| "python3".into());
        let script = script_path()?;
        let log = std::env::temp_dir().join(format!("kvxfer-mooncake-{role}-{}.log", std::process::id()));
        let log_file =
            std::fs::File::create(&log).with_context(|| format!("cannot create the worker log {}", log.display()))?;
        let mut child = Command::new(&python)
            .arg(&script)
            .envs(env.iter().map(|(k, v)| (*k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log_file)
            .spawn()
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => anyhow!(
                    "--transport mooncake runs a Python worker, but {python:?} was not found; install Python 3 or set KVXFER_PYTHON to its path"
                ),
                _ => anyhow!("cannot start the mooncake worker ({python} {}): {e}", script.display()),
            })?;
        let stdin = child.stdin.take().expect("piped");
        let replies = BufReader::new(child.stdout.take().expect("piped"));
        Ok(Worker { child, stdin, replies, log, keep_log: false, python, io_timeout })
    }

    /// Send one request and wait for its reply, at most `timeout`, giving up at once when `peer_failed()` says the
    /// other end is gone (an engine call can wait on a dead peer for a long time); a reply
    /// `{"ok": false, "error": ...}` becomes the error. The worker is killed when it does not answer.
    pub fn call_within(
        &mut self,
        request: Value,
        timeout: Duration,
        peer_failed: &mut dyn FnMut() -> bool,
    ) -> Result<Value> {
        let op = request["op"].as_str().unwrap_or("?").to_string();
        let mut line = request.to_string();
        line.push('\n');
        if self.stdin.write_all(line.as_bytes()).and_then(|()| self.stdin.flush()).is_err() {
            return Err(self.died(&op));
        }
        let deadline = Instant::now() + timeout;
        // Wait for the reply line in short slices, looking at the peer between them.
        while !self.replies.buffer().contains(&b'\n') {
            let fd = self.replies.get_ref().as_fd();
            let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
            if poll(&mut fds, PollTimeout::from(50u16)).unwrap_or(0) > 0 {
                break;
            }
            if peer_failed() {
                self.keep_log = true;
                let _ = self.child.kill();
                bail!("the receiver hung up or reported an error on the control connection during mooncake {op}");
            }
            if Instant::now() >= deadline {
                self.keep_log = true;
                let _ = self.child.kill();
                bail!(
                    "the mooncake worker did not answer {op} within --io-timeout ({:.0} s); its log: {}",
                    timeout.as_secs_f64(),
                    self.log.display()
                );
            }
        }
        let mut reply = String::new();
        let got = self.replies.read_line(&mut reply);
        if !matches!(got, Ok(n) if n > 0) {
            return Err(self.died(&op));
        }
        let v: Value = serde_json::from_str(&reply).map_err(|e| {
            anyhow!("the mooncake worker answered {op} with something that is not JSON ({e}): {reply:?}")
        })?;
        if v["ok"] != Value::Bool(true) {
            let why = v["error"].as_str().unwrap_or("no reason given");
            self.keep_log = true;
            bail!("mooncake: {why} (worker log: {})", self.log.display());
        }
        Ok(v)
    }

    /// [`Worker::call_within`] for set-up requests: `--io-timeout`, no peer to watch yet.
    pub fn call(&mut self, request: Value) -> Result<Value> {
        let timeout = self.io_timeout;
        self.call_within(request, timeout, &mut || false)
    }

    /// The error for a worker that stopped answering: no wheel, or a crash (its log's last line says more).
    fn died(&mut self, op: &str) -> anyhow::Error {
        self.keep_log = true;
        let status = self.child.wait().ok();
        if status.and_then(|s| s.code()) == Some(NO_WHEEL) {
            return anyhow!("--transport mooncake: {} cannot import Mooncake; {WHEEL_HINT}", self.python);
        }
        let last = std::fs::read_to_string(&self.log)
            .ok()
            .and_then(|t| t.lines().rev().find(|l| !l.trim().is_empty()).map(str::to_string))
            .unwrap_or_default();
        let how = status.map_or("stopped".to_string(), |s| format!("exited ({s})"));
        anyhow!("the mooncake worker {how} during {op}: {last} (log: {})", self.log.display())
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // The engine's threads may not wind down on EOF quickly; the run is over, so end it.
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !self.keep_log {
            let _ = std::fs::remove_file(&self.log);
        }
    }
}
