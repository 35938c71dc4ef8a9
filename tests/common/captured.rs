//! Output of children collected by threads as it arrives (pipes and FIFOs), so tests wait for a line, not a time.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// What a reader thread has seen of one pipe so far.
#[derive(Default)]
struct PipeState {
    text: String,
    /// The writer has the pipe open (at once for a child's stdout/stderr; a FIFO once the writer opened it).
    opened: bool,
    /// The writer closed it (the child exited), or it could not be read at all.
    closed: bool,
}

/// The read end of a FIFO opened without blocking: each read waits in poll() for data or the writer's close. (A
/// FIFO's poll reports no hang-up before a writer has come and gone, so it waits for the writer to come.)
struct FifoReader {
    file: std::fs::File,
    captured: Captured,
}

impl Read for FifoReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::os::fd::AsFd;
        loop {
            let mut fds = [nix::poll::PollFd::new(self.file.as_fd(), nix::poll::PollFlags::POLLIN)];
            match nix::poll::poll(&mut fds, nix::poll::PollTimeout::NONE) {
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
                Ok(_) => self.captured.update(|s| s.opened = true),
            }
            match self.file.read(buf) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                other => return other,
            }
        }
    }
}

/// Text a child writes to one pipe, collected by a thread as it arrives, so tests can wait for a line.
#[derive(Clone, Default)]
pub struct Captured(Arc<(Mutex<PipeState>, Condvar)>);

impl Captured {
    pub fn spawn(pipe: impl Read + Send + 'static) -> Captured {
        let c = Captured::default();
        c.update(|s| s.opened = true);
        let inner = c.clone();
        std::thread::spawn(move || inner.read_all(pipe));
        c
    }

    /// Make a FIFO at `path` and collect what a writer (a child told to write its `--events` there) writes into
    /// it. The read end is open before this returns (without blocking), so a writer that checks for a reader finds
    /// one; the thread then waits in poll() for data or for the writer's close. `opened` is set at the first of
    /// these.
    pub fn fifo(path: &Path) -> Captured {
        use std::os::unix::fs::OpenOptionsExt;
        nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o600))
            .unwrap_or_else(|e| panic!("mkfifo {}: {e}", path.display()));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NONBLOCK)
            .open(path)
            .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
        let c = Captured::default();
        let inner = c.clone();
        std::thread::spawn(move || inner.read_all(FifoReader { file: f, captured: inner.clone() }));
        c
    }

    fn update(&self, f: impl FnOnce(&mut PipeState)) {
        let (lock, cv) = &*self.0;
        f(&mut lock.lock().unwrap());
        cv.notify_all();
    }

    fn read_all(&self, pipe: impl Read) {
        let mut r = BufReader::new(pipe);
        let mut line = Vec::new();
        loop {
            line.clear();
            let n = r.read_until(b'\n', &mut line).unwrap_or(0);
            self.update(|s| match n {
                0 => s.closed = true,
                _ => s.text.push_str(&String::from_utf8_lossy(&line)),
            });
            if n == 0 {
                return;
            }
        }
    }

    /// Wait (on the condition variable the reader thread signals) until `pred` holds (true) or `timeout` passed.
    fn wait_state(&self, timeout: Duration, mut pred: impl FnMut(&PipeState) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        let (lock, cv) = &*self.0;
        let mut g = lock.lock().unwrap();
        loop {
            if pred(&g) {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            g = cv.wait_timeout(g, deadline - now).unwrap().0;
        }
    }

    pub fn text(&self) -> String {
        self.0 .0.lock().unwrap().text.clone()
    }

    /// Wait until the text contains `needle` (true) or the pipe closed / the timeout passed (false).
    pub fn wait_for(&self, needle: &str, timeout: Duration) -> bool {
        self.wait_until(timeout, |t| t.contains(needle))
    }

    pub fn wait_until(&self, timeout: Duration, mut pred: impl FnMut(&str) -> bool) -> bool {
        let mut hit = false;
        self.wait_state(timeout, |s| {
            hit = pred(&s.text);
            hit || s.closed
        });
        hit
    }

    /// Wait until the writer opened the pipe (true) or the timeout passed (false).
    pub fn wait_opened(&self, timeout: Duration) -> bool {
        self.wait_state(timeout, |s| s.opened)
    }

    /// Wait until every writer closed the pipe (the child and whatever it started exited): true, or false when
    /// the timeout passed.
    pub fn wait_closed(&self, timeout: Duration) -> bool {
        self.wait_state(timeout, |s| s.closed)
    }
}

/// A sender's `--events` JSON lines as they are written: the events path is a FIFO read by a thread (see
/// [`Captured::fifo`]), so a test waits for the line of a given rep instead of polling a file. A line is written
/// (and flushed) as each rep, warm-up or measured, finishes: one `side: sender` and one `side: receiver` line.
pub struct Events {
    path: PathBuf,
    pub pipe: Captured,
}

impl Events {
    /// A FIFO at `path` (in a test's temp dir) to pass as `--events`.
    pub fn fifo(path: PathBuf) -> Events {
        let pipe = Captured::fifo(&path);
        Events { path, pipe }
    }

    /// The path, for the command line.
    pub fn arg(&self) -> String {
        self.path.to_string_lossy().into_owned()
    }

    /// Every complete line so far, parsed.
    pub fn lines(&self) -> Vec<serde_json::Value> {
        parse_events(&self.pipe.text())
    }

    /// Every line, once the writer closed the FIFO (call after the sender exited).
    pub fn all_lines(&self) -> Vec<serde_json::Value> {
        self.pipe.wait_closed(Duration::from_secs(5));
        self.lines()
    }

    /// Wait until the writer (the sender) opened the events file: it does so once the session is established
    /// (handshake done, buffers allocated, transport connected), just before the first rep.
    pub fn wait_opened(&self, timeout: Duration) {
        assert!(self.pipe.wait_opened(timeout), "the sender never opened its --events file {}", self.path.display());
    }

    /// Wait until a line matching `pred` arrives (panics, naming `what`, if the writer closes or `timeout` passes
    /// first); returns it.
    pub fn wait_line(
        &self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let mut found = None;
        self.pipe.wait_until(timeout, |t| {
            found = parse_events(t).into_iter().find(|v| pred(v));
            found.is_some()
        });
        found.unwrap_or_else(|| panic!("no --events line for {what} within {timeout:?}; got:\n{}", self.pipe.text()))
    }

    /// Wait for the first line of rep `rep` (warm-up or measured, as `warmup` says) of case `case`.
    pub fn wait_rep(&self, case: u64, warmup: bool, rep: u64, timeout: Duration) -> serde_json::Value {
        let what = format!("case {case} {} rep {rep}", if warmup { "warm-up" } else { "measured" });
        self.wait_line(&what, timeout, |v| {
            v["case"].as_u64() == Some(case) && v["warmup"].as_bool() == Some(warmup) && v["rep"].as_u64() == Some(rep)
        })
    }
}

fn parse_events(text: &str) -> Vec<serde_json::Value> {
    // Only whole lines: the last one may still be arriving.
    text.split_inclusive('\n')
        .filter(|l| l.ends_with('\n'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("--events line is not JSON ({e}): {l}")))
        .collect()
}

impl Drop for Events {
    /// A reader still blocked in `open` (the sender never got as far as opening its events file) is released by
    /// opening the write end once, without blocking, and closing it.
    fn drop(&mut self) {
        use std::os::unix::fs::OpenOptionsExt;
        let _ = std::fs::OpenOptions::new().write(true).custom_flags(nix::libc::O_NONBLOCK).open(&self.path);
    }
}
