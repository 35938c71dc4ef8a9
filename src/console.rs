//! Printing that never panics. `println!` panics when stdout is a closed pipe (`kvxfer report x.json | head -1`)
//! and `eprintln!` when stderr is (`kvxfer serve 2>&1 | head -1`). Here a stream that fails is marked gone and
//! later lines to it are dropped: the run carries on, writes its files and exits as it would have. kvxfer ignores
//! SIGPIPE (Rust's default), so a closed pipe is an EPIPE error, never a signal.

use std::fmt;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

static STDOUT_GONE: AtomicBool = AtomicBool::new(false);
static STDERR_GONE: AtomicBool = AtomicBool::new(false);
/// Put before every stderr line (see [`set_cluster_rank`]); none until set.
static LINE_PREFIX: OnceLock<String> = OnceLock::new();
/// Set on cluster ranks other than 0: [`note_line`] prints nothing.
static NOTES_QUIET: AtomicBool = AtomicBool::new(false);

/// This process is rank `rank` of a cluster run. Every stderr line from now on starts with `[rank N] `, rank 0's
/// too: mpirun and srun merge every rank's stderr, and their own messages, into one stream, where a line without
/// its rank cannot be told apart from another rank's or the launcher's; with every line prefixed, `grep '^\[rank 0\]'`
/// gives one rank's story and the launcher's own lines stand out. Notes (what the run chose, which every rank
/// would say alike) are left to rank 0.
pub fn set_cluster_rank(rank: usize) {
    let _ = LINE_PREFIX.set(format!("[rank {rank}] "));
    NOTES_QUIET.store(rank != 0, Ordering::Relaxed);
}

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

/// Write one line to stderr, unless stderr is gone. The line, its prefix and its newline leave in one write(2):
/// processes that share the stream (the ranks under mpirun) interleave whole lines, never pieces of them.
pub fn err_line(args: fmt::Arguments) {
    if !STDERR_GONE.load(Ordering::Relaxed) {
        let text = framed(LINE_PREFIX.get().map_or("", String::as_str), &args.to_string());
        if std::io::stderr().lock().write_all(text.as_bytes()).is_err() {
            STDERR_GONE.store(true, Ordering::Relaxed);
        }
    }
}

/// A line about what the run chose (its transport, its block size, the tcp paths a calibration kept), not about
/// what went wrong: on stderr like [`err_line`], except on a cluster rank other than 0, where every rank would say
/// the same.
pub fn note_line(args: fmt::Arguments) {
    if !NOTES_QUIET.load(Ordering::Relaxed) {
        err_line(args);
    }
}

/// `text` as lines for stderr: `prefix` before each of its lines (a message may hold several), each ended by a
/// newline.
fn framed(prefix: &str, text: &str) -> String {
    let mut out = String::with_capacity(text.len() + prefix.len() + 1);
    for line in text.split('\n') {
        out.push_str(prefix);
        out.push_str(line);
        out.push('\n');
    }
    out
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

/// How much of an authenticated peer's error [`peer_error`] keeps: far more than any real error (an engine's
/// reason with a library path is a few hundred characters), still a bound on what a peer can make us print.
pub const PEER_ERROR_CHARS: usize = 4096;

/// An error an authenticated peer reported, made safe like [`printable`] but kept whole: it is why the run
/// stopped (an engine's own words, the library that did not load and why), so a log line's length would cut it
/// mid-sentence. Past [`PEER_ERROR_CHARS`] it ends after the last whole sentence (or word) that fits, saying how
/// much was left out.
pub fn peer_error(text: &str) -> String {
    let safe: Vec<char> =
        text.chars().flat_map(|c| if c.is_control() { c.escape_unicode().collect() } else { vec![c] }).collect();
    if safe.len() <= PEER_ERROR_CHARS {
        return safe.into_iter().collect();
    }
    let head = &safe[..PEER_ERROR_CHARS];
    let after = |i: usize, set: &[char]| set.contains(&head[i]) && head.get(i + 1).is_some_and(|c| *c == ' ');
    let sentence = (0..head.len()).rev().find(|&i| after(i, &['.', ';', '!', '?'])).map(|i| i + 1);
    let word = || head.iter().rposition(|c| *c == ' ');
    let end = sentence.or_else(word).unwrap_or(head.len());
    let kept: String = head[..end].iter().collect();
    format!("{kept} … ({} more characters)", safe.len() - end)
}

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

/// [`note_line`] as a macro, like [`errln!`].
#[macro_export]
macro_rules! noteln {
    ($($arg:tt)*) => { $crate::console::note_line(format_args!($($arg)*)) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_line_of_a_message_gets_the_prefix_and_its_newline() {
        assert_eq!(framed("[rank 2] ", "cluster: rank 2 of 4"), "[rank 2] cluster: rank 2 of 4\n");
        assert_eq!(framed("[rank 1] ", "a\nb"), "[rank 1] a\n[rank 1] b\n");
        assert_eq!(framed("", ""), "\n");
    }

    #[test]
    fn peer_text_cannot_forge_lines_or_flood_the_log() {
        assert_eq!(printable("ok\nerror: forged\x1b[31m"), "ok\\u{a}error: forged\\u{1b}[31m");
        let long = "x".repeat(1 << 20);
        assert_eq!(printable(&long).chars().count(), PEER_TEXT_CHARS + 1);
        assert_eq!(printable("é ok"), "é ok");
    }

    #[test]
    fn a_peer_error_is_kept_whole_and_past_its_limit_ends_at_a_sentence() {
        // A real engine error, past a log line's 200 characters: the loader's reason is at its very end.
        let plugin =
            format!("/opt/venv/{}/plugins/libplugin_LIBFABRIC.so", "site-packages/.nixl_cu12.mesonpy.libs/".repeat(3));
        let reason = format!("--nixl-backend libfabric: Backend error occurred: {plugin} does not load: libfabric.so.1: cannot open shared object file: No such file or directory");
        assert!(reason.chars().count() > PEER_TEXT_CHARS);
        assert_eq!(peer_error(&reason), reason);
        assert_eq!(peer_error("line\nforged"), "line\\u{a}forged", "still one line");
        let sentence = "The engine refused the batch. ";
        let long = sentence.repeat(2 * PEER_ERROR_CHARS / sentence.len());
        let cut = peer_error(&long);
        let (kept, rest) = cut.split_once(" … (").expect("says it was cut");
        assert!(kept.ends_with("the batch.") && kept.chars().count() <= PEER_ERROR_CHARS, "{kept}");
        assert_eq!(rest, format!("{} more characters)", long.chars().count() - kept.chars().count()));
        let word = "x".repeat(PEER_ERROR_CHARS * 2);
        assert!(
            peer_error(&word).starts_with(&"x".repeat(PEER_ERROR_CHARS)),
            "no sentence, no space: cut at the limit"
        );
    }
}
