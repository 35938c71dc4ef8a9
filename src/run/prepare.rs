//! `--prepare CMD`: a shell command the sender runs before every rep, outside the timed interval, as hyperfine's
//! `--prepare` does — to drop caches, reset a switch's counters, or change the fabric for some reps. It runs to
//! completion before the rep's control round trip starts, so nothing it does is timed, and each rep's counters
//! are read after it.

use anyhow::{anyhow, bail, Context, Result};
use std::os::fd::AsFd;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Which rep the command runs before, handed to it in its environment.
#[derive(Debug, Clone, Copy)]
pub struct RepAt {
    pub case: usize,
    /// Counted among the case's warm-ups or among its measured reps, from 0.
    pub rep: usize,
    pub warmup: bool,
    pub size_bytes: u64,
}

/// Run `cmd` with `sh -c`, its output on stderr (stdout stays the tables'), and wait at most `limit` (the run's
/// io timeout: the receiver gives up on a silent sender after that too). A failure names the rep.
pub fn run(cmd: &str, at: RepAt, limit: Duration) -> Result<()> {
    let what = format!(
        "--prepare before {} rep {} of case {} ({})",
        if at.warmup { "warm-up" } else { "measured" },
        at.rep,
        at.case,
        crate::plan::sizes::format_size(at.size_bytes)
    );
    let stderr = std::io::stderr().as_fd().try_clone_to_owned().context("duplicating stderr for --prepare")?;
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .env("KVXFER_CASE", at.case.to_string())
        .env("KVXFER_REP", at.rep.to_string())
        .env("KVXFER_WARMUP", if at.warmup { "1" } else { "0" })
        .env("KVXFER_SIZE_BYTES", at.size_bytes.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::from(stderr))
        .spawn()
        .map_err(|e| anyhow!("{what}: cannot start sh: {e}"))?;
    let pid = child.id();
    // Waited for on a thread, so the limit is a channel timeout rather than a polling loop.
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("kvxfer-prepare".into())
        .spawn(move || {
            let _ = tx.send(child.wait());
        })
        .context("starting a thread to wait for --prepare")?;
    let status = match rx.recv_timeout(limit) {
        Ok(status) => status.map_err(|e| anyhow!("{what}: waiting for it failed: {e}"))?,
        Err(_) => {
            kill_tree(pid);
            bail!(
                "{what}: still running after {} (--io-timeout), killed; the receiver would have given up on this sender",
                humantime::format_duration(limit)
            );
        }
    };
    if !status.success() {
        let how = match status.code() {
            Some(code) => format!("exited with status {code}"),
            None => "was killed by a signal".to_string(),
        };
        bail!("{what}: {cmd:?} {how}; fix the command or leave --prepare out");
    }
    Ok(())
}

/// SIGKILL `pid` and every process below it. Killing the shell alone would leave what it started (`sleep 60; x`
/// runs sleep as its child) holding kvxfer's stderr, so `kvxfer … 2>&1 | tee log` would wait for it. The command
/// stays in kvxfer's process group, so a Ctrl-C at the terminal reaches it too.
fn kill_tree(pid: u32) {
    let mut tree = vec![pid];
    let mut i = 0;
    while i < tree.len() {
        tree.extend(children(tree[i]));
        i += 1;
    }
    for p in tree {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(p).unwrap_or(i32::MAX));
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
    }
}

/// The children of `pid`, from each of its threads' /proc/PID/task/TID/children (empty when gone).
fn children(pid: u32) -> Vec<u32> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten();
    tasks
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|list| list.split_whitespace().filter_map(|c| c.parse().ok()).collect::<Vec<u32>>())
        .collect()
}
