//! Printing that never panics. `println!` panics when stdout is a closed pipe (`kvxfer report x.json | head -1`)
//! and `eprintln!` when stderr is (`kvxfer serve 2>&1 | head -1`). Here a stream that fails is marked gone and
//! later lines to it are dropped: the run carries on, writes its files and exits as it would have. kvxfer ignores
//! SIGPIPE (Rust's default), so a closed pipe is an EPIPE error, never a signal.

use std::fmt;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

static STDOUT_GONE: AtomicBool = AtomicBool::new(false);
static STDERR_GONE: AtomicBool = AtomicBool::new(false);

/// Write one line (the arguments and a newline) to stdout, unless stdout is gone.
pub fn out_line(args: fmt::Arguments) {
    if !STDOUT_GONE.load(Ordering::Relaxed) {
        let mut o = std::io::stdout().lock();
        if o.write_fmt(args).and_then(|_| o.write_all(b"\n")).and_then(|_| o.flush()).is_err() {
            STDOUT_GONE.store(true, Ordering::Relaxed);
        }
    }
}

/// Write bytes to stdout as they are, unless stdout is gone.
pub fn out_bytes(bytes: &[u8]) {
    if !STDOUT_GONE.load(Ordering::Relaxed) {
        let mut o = std::io::stdout().lock();
        if o.write_all(bytes).and_then(|_| o.flush()).is_err() {
            STDOUT_GONE.store(true, Ordering::Relaxed);
        }
    }
}

/// Write bytes to stderr as they are (a terminal control sequence), unless stderr is gone.
pub fn err_bytes(bytes: &[u8]) {
    if !STDERR_GONE.load(Ordering::Relaxed) && std::io::stderr().lock().write_all(bytes).is_err() {
        STDERR_GONE.store(true, Ordering::Relaxed);
    }
}

/// Write one line to stderr, unless stderr is gone.
pub fn err_line(args: fmt::Arguments) {
    if !STDERR_GONE.load(Ordering::Relaxed) {
        let mut e = std::io::stderr().lock();
        if e.write_fmt(args).and_then(|_| e.write_all(b"\n")).is_err() {
            STDERR_GONE.store(true, Ordering::Relaxed);
        }
    }
}

/// Text a peer sent, made safe for one log line: control characters (newlines that would forge lines, ANSI
/// escapes) shown as `\u{..}`, and at most [`PEER_TEXT_CHARS`] characters kept.
pub fn printable(text: &str) -> String {
    let mut out = String::new();
    for (i, c) in text.chars().enumerate() {
        if i == PEER_TEXT_CHARS {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.push_str(&c.escape_unicode().to_string());
        } else {
            out.push(c);
        }
    }
    out
}

/// How much of a peer's text a log line keeps.
pub const PEER_TEXT_CHARS: usize = 200;

/// Whether stdout has been found closed (a reader that went away).
pub fn stdout_gone() -> bool {
    STDOUT_GONE.load(Ordering::Relaxed)
}

/// `println!` that never panics (see the module).
#[macro_export]
macro_rules! outln {
    () => { $crate::console::out_line(format_args!("")) };
    ($($arg:tt)*) => { $crate::console::out_line(format_args!($($arg)*)) };
}

/// `eprintln!` that never panics (see the module).
#[macro_export]
macro_rules! errln {
    () => { $crate::console::err_line(format_args!("")) };
    ($($arg:tt)*) => { $crate::console::err_line(format_args!($($arg)*)) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_text_cannot_forge_lines_or_flood_the_log() {
        assert_eq!(printable("ok\nerror: forged\x1b[31m"), "ok\\u{a}error: forged\\u{1b}[31m");
        let long = "x".repeat(1 << 20);
        assert_eq!(printable(&long).chars().count(), PEER_TEXT_CHARS + 1);
        assert_eq!(printable("é ok"), "é ok");
    }
}
