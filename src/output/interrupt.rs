//! Ctrl-C, SIGTERM and SIGHUP: the run's files end up saying they are incomplete, and why.
//!
//! The first signal is taken by a thread of its own (not a handler, which could do nothing useful): it waits for
//! the run's files to be between saves, marks the results interrupted (which signal, after how many cases, the
//! case that was being measured, the command that resumes), writes every output once more, prints one line and
//! exits 130, the shell's 128 + SIGINT, without waiting for a transfer in flight. A second signal exits at once.
//! Signals the process was started with ignored (SIGHUP under `nohup`, SIGINT for a background job of a script)
//! stay ignored. A run of `--duration inf` takes the first signal as its end instead (see `run::pace`).

use crate::export::json::{Interruption, Results};
use crate::export::ExportManager;
use anyhow::Result;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};

/// The exit code of a run stopped by a signal.
pub const EXIT_INTERRUPTED: i32 = 130;

/// What the signal thread needs to finish a run's files: the results as last saved and where they go.
pub struct Armed {
    pub results: Results,
    pub exports: ExportManager,
    /// How many cases the run was asked to measure.
    pub cases_total: usize,
    /// The command that continues this run (`kvxfer sweep … --resume FILE`), when there is one.
    pub resume: Option<String>,
}

struct State {
    armed: Option<Armed>,
    /// The case being measured and the reps it has finished (`1 GiB, 3 of 5 reps`).
    measuring: Option<String>,
}

static STATE: Mutex<State> = Mutex::new(State { armed: None, measuring: None });

fn state() -> MutexGuard<'static, State> {
    // A panic while holding the lock leaves the state as it was last set, which is still the best we have.
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Take over SIGINT, SIGTERM and SIGHUP for the rest of the process (see the module). Call once, first thing.
pub fn install() -> Result<()> {
    let ignored = ignored_at_start();
    let signals: Vec<i32> = [SIGINT, SIGTERM, SIGHUP].into_iter().filter(|s| *s == SIGTERM || !ignored(*s)).collect();
    let again = Arc::new(AtomicBool::new(false));
    for &s in &signals {
        // The first signal sets the flag; one that finds it set ends the process there and then.
        signal_hook::flag::register_conditional_shutdown(s, EXIT_INTERRUPTED, Arc::clone(&again))?;
        signal_hook::flag::register(s, Arc::clone(&again))?;
    }
    let mut incoming = signal_hook::iterator::Signals::new(&signals)?;
    std::thread::Builder::new().name("signals".into()).spawn(move || {
        if let Some(sig) = incoming.forever().next() {
            // An infinite run (`--duration inf`) ends here as intended: it finishes the rep in flight, records the
            // case and its files as complete, and exits 130 itself.
            if crate::run::pace::take_signal(signal_name(sig)) {
                crate::errln!("{}: stopping after the rep in flight (again to exit at once)", signal_name(sig));
                return;
            }
            stop(sig);
        }
    })?;
    Ok(())
}

/// Which signals this process was started with ignored, from /proc/self/status (`SigIgn`, a hex mask, bit n-1
/// for signal n). Unreadable: none.
fn ignored_at_start() -> impl Fn(i32) -> bool {
    let mask = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("SigIgn:").map(|v| v.trim().to_string())))
        .and_then(|v| u64::from_str_radix(&v, 16).ok())
        .unwrap_or(0);
    move |sig: i32| sig >= 1 && mask & (1u64 << (sig - 1)) != 0
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        SIGINT => "SIGINT",
        SIGTERM => "SIGTERM",
        SIGHUP => "SIGHUP",
        _ => "a signal",
    }
}

/// The first signal: finish the files, say where they are, exit 130.
fn stop(sig: i32) -> ! {
    let name = signal_name(sig);
    let mut st = state();
    let measuring = st.measuring.take();
    let line = match st.armed.as_mut() {
        Some(armed) => finish_files(armed, name, measuring),
        None => format!("interrupted ({name})"),
    };
    // Clear the progress bar's line first, so the message starts a line of its own on a terminal.
    if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        crate::console::err_bytes(b"\r\x1b[2K");
    }
    crate::errln!("{line}");
    std::process::exit(EXIT_INTERRUPTED)
}

/// Mark the results interrupted and write every output; returns the line to print.
fn finish_files(armed: &mut Armed, signal: &str, measuring: Option<String>) -> String {
    let done = armed.results.cases.iter().filter(|c| c.sweep.complete).count();
    let what = mark(&mut armed.results, signal, done, armed.cases_total, measuring, armed.resume.clone());
    let files: Vec<String> = armed.exports.files().map(|(_, p)| p.display().to_string()).collect();
    let saved = armed.exports.write(std::slice::from_ref(&armed.results));
    let held = match (&saved, files.is_empty()) {
        (Err(e), _) => format!("; the results files could not be written: {e:#}"),
        (Ok(()), true) => String::new(),
        (Ok(()), false) => format!("; {} hold{} them", files.join(", "), if files.len() == 1 { "s" } else { "" }),
    };
    let resume = armed.resume.as_ref().map(|c| format!("; resume with: {c}")).unwrap_or_default();
    format!("{what}{held}{resume}")
}

/// Mark `results` interrupted by `signal` after `done` of `total` cases; returns what it says.
pub fn mark(
    results: &mut Results,
    signal: &str,
    done: usize,
    total: usize,
    measuring: Option<String>,
    resume: Option<String>,
) -> String {
    let total = total.max(done);
    let what = format!("interrupted by {signal} after {done} of {total} cases");
    results.complete = false;
    results.error = Some(what.clone());
    results.interrupted = Some(Interruption {
        signal: signal.to_string(),
        at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        cases_done: done,
        cases_total: total,
        measuring,
        resume,
    });
    what
}

/// Run `write` (a save of the run's files) so that a signal waits for it, then keep what it saved as what a
/// signal finishes.
pub fn saving<T>(armed: impl FnOnce() -> Armed, write: impl FnOnce() -> T) -> T {
    let mut st = state();
    let out = write();
    st.armed = Some(armed());
    out
}

/// The run's files are final: a signal from now on only exits.
pub fn disarm() {
    let mut st = state();
    st.armed = None;
    st.measuring = None;
}

/// Say which case is being measured, for the interrupted results.
pub fn measuring(what: Option<String>) {
    state().measuring = what;
}

/// This process's own command line with `--resume FILE` in place of any it had: run again, it continues into
/// `json`.
pub fn resume_command(json: &Path) -> String {
    let mut words = vec!["kvxfer".to_string()];
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--resume" {
            args.next();
        } else if !a.starts_with("--resume=") {
            words.push(a);
        }
    }
    words.push("--resume".into());
    words.push(json.display().to_string());
    words.iter().map(|w| shell_word(w)).collect::<Vec<_>>().join(" ")
}

/// `w` as a POSIX shell reads it back: bare when it holds only characters no shell treats specially, else in
/// single quotes.
fn shell_word(w: &str) -> String {
    let plain = !w.is_empty() && w.chars().all(|c| c.is_ascii_alphanumeric() || "_./:=,@%+-".contains(c));
    if plain {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_come_back_as_the_shell_reads_them() {
        assert_eq!(shell_word("--sizes"), "--sizes");
        assert_eq!(shell_word("1MiB,2MiB"), "1MiB,2MiB");
        assert_eq!(shell_word("NIC 25 GB/s=25"), "'NIC 25 GB/s=25'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
        assert_eq!(shell_word(""), "''");
    }

    #[test]
    fn the_ignored_mask_is_read_per_signal() {
        // This test process ignores SIGPIPE (Rust's default) and not SIGTERM.
        let ignored = ignored_at_start();
        assert!(ignored(nix::libc::SIGPIPE));
        assert!(!ignored(SIGTERM));
    }
}
