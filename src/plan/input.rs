//! Reading a file the user named (a results file, a sweep file, a trace, a model's config.json): every such read
//! goes through [`read`], which holds it to a size cap and to regular files. Without one, `kvxfer report /dev/zero`
//! grew without end until the kernel stepped in, and a FIFO nobody writes to hung the command before it said a
//! word. `-` reads standard input, to the same cap.
//!
//! The cap is one value for the whole process (`--max-input-size`, read once by the command line): every loader
//! reads it here rather than each taking a parameter, so a loader added later cannot forget it.

use super::sizes::{format_size, size_text};
use crate::bail_usage;
use crate::error::usage;
use anyhow::Result;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// The cap when `--max-input-size` is not given: far above any results file or trace kvxfer writes or replays
/// (a 100,000-case results file is 200 MB), far below what a host holds.
pub const DEFAULT_MAX: u64 = 1 << 30;

static MAX: AtomicU64 = AtomicU64::new(DEFAULT_MAX);

/// Set the cap for every later [`read`] (the command line's `--max-input-size`).
pub fn set_max(bytes: u64) {
    MAX.store(bytes, Ordering::Relaxed);
}

/// The cap [`read`] holds inputs to.
pub fn max() -> u64 {
    MAX.load(Ordering::Relaxed)
}

/// The bytes of `path` (standard input for `-`), refused with one usage error naming the file when it is larger
/// than the cap, or is a FIFO, socket or device (which may never end, or block before the first byte). `what` says
/// what the file was meant to be, for the error when it cannot be read: "the trace", "the sweep file".
pub fn read(path: &Path, what: &str) -> Result<Vec<u8>> {
    let cap = max();
    let name = path.display();
    if path.as_os_str() == "-" {
        return capped(std::io::stdin().lock(), cap, "standard input (-)");
    }
    // O_NONBLOCK: opening a FIFO for reading otherwise waits for a writer, before its type can be looked at. It
    // changes nothing for a regular file.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY)
        .open(path)
        .map_err(|e| usage(format!("{name}: cannot read {what} ({e}); check the path")))?;
    let meta = file.metadata().map_err(|e| usage(format!("{name}: cannot read {what} ({e})")))?;
    let kind = meta.file_type();
    let not_file = if kind.is_dir() {
        Some("a directory")
    } else if kind.is_fifo() {
        Some("a FIFO (named pipe)")
    } else if kind.is_char_device() {
        Some("a character device")
    } else if kind.is_block_device() {
        Some("a block device")
    } else if kind.is_socket() {
        Some("a socket")
    } else {
        None
    };
    if let Some(kind) = not_file {
        bail_usage!("{name}: {kind}, not a regular file; give a file, or - to read {what} from standard input");
    }
    if meta.len() > cap {
        bail_usage!("{name}: {} is larger than {}", format_size(meta.len()), limit_hint(cap, meta.len()));
    }
    capped(file, cap, &name.to_string())
}

/// [`read`] as UTF-8 text; `what` as for [`read`].
pub fn read_text(path: &Path, what: &str) -> Result<String> {
    let bytes = read(path, what)?;
    String::from_utf8(bytes).map_err(|e| {
        let line = e.as_bytes()[..e.utf8_error().valid_up_to()].iter().filter(|&&b| b == b'\n').count() + 1;
        usage(format!("{}:{line}: not UTF-8 text; is it {what}?", path.display()))
    })
}

/// At most `cap` bytes of `source` (one more is read to tell a source that ends at the cap from one that goes on).
fn capped(source: impl Read, cap: u64, name: &str) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    source
        .take(cap.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| usage(format!("{name}: cannot read: {e}")))?;
    if bytes.len() as u64 > cap {
        bail_usage!("{name}: more than {}", limit_hint(cap, cap.saturating_add(1)));
    }
    Ok(bytes)
}

/// "the input limit of 1 GiB; raise it with --max-input-size 2GiB", the suggestion a power of two that fits `len`.
fn limit_hint(cap: u64, len: u64) -> String {
    let fits = len.checked_next_power_of_two().unwrap_or(u64::MAX).max(1 << 20);
    format!(
        "the input limit of {}; if it is what you meant to read, raise the limit with --max-input-size {}",
        format_size(cap),
        size_text(fits)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hint_names_a_limit_that_fits() {
        let h = limit_hint(1 << 30, (1 << 30) + 1);
        assert!(h.contains("input limit of 1 GiB") && h.ends_with("--max-input-size 2GiB"), "{h}");
        assert!(limit_hint(10, 11).ends_with("--max-input-size 1MiB"));
    }

    #[test]
    fn a_source_past_the_cap_is_refused_and_one_at_it_is_read() {
        assert_eq!(capped(&b"12345"[..], 5, "x").unwrap(), b"12345");
        let e = capped(&b"123456"[..], 5, "x").unwrap_err().to_string();
        assert!(e.starts_with("x: more than the input limit of 5 B"), "{e}");
    }
}
