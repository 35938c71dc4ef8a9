//! How kvxfer puts its output files on disk, so that no run is ever lost to another:
//! - a default results file (no `--json`) gets a name of its own, created with `O_EXCL`: two runs in the same
//!   millisecond, or a link planted under the name, get another name instead of sharing or following it;
//! - every rewrite goes through a temporary file (also created with `O_EXCL`, under a random name) and a rename,
//!   so an interrupted run leaves the previous complete file or the new complete file, never half of one;
//! - a file the user named is treated like a shell redirect: a symbolic link is followed, a device or FIFO is
//!   written in place (a rename would replace the node itself), and a FIFO without a reader is refused instead of
//!   waiting for one forever;
//! - two outputs naming one file are refused before anything runs.

use anyhow::{Context, Result};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// A short random suffix (hex) for names that must not be guessed or collide.
fn random_suffix(bytes: usize) -> Result<String> {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b[..bytes]).map_err(|e| anyhow::anyhow!("no randomness for a file name: {e}"))?;
    Ok(hex::encode(&b[..bytes]))
}

/// `20261201T143512.345Z`: now, to the millisecond, as a file name can hold it (no `:`), sorting by time.
fn stamp() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now())
        .to_string()
        .chars()
        .filter(|c| !matches!(c, '-' | ':'))
        .collect()
}

/// Create a new, empty results file `DIR/<stamp>-<suffix>.EXT` that did not exist before (`O_EXCL`, so neither an
/// earlier run's file nor a planted link is ever opened), trying fresh suffixes on a collision.
pub fn create_default(dir: &Path, ext: &str) -> Result<PathBuf> {
    create_unique(dir, &stamp(), ext)
}

/// [`create_default`] with the time part given.
pub fn create_unique(dir: &Path, stem: &str, ext: &str) -> Result<PathBuf> {
    let mut last = None;
    for _ in 0..16 {
        let path = dir.join(format!("{stem}-{}.{ext}", random_suffix(2)?));
        match create_new(&path) {
            Ok(_) => return Ok(path),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => {
                return Err(crate::error::usage(format!(
                    "--out-dir {}: cannot create a results file there: {e}; give a writable --out-dir or --json FILE",
                    dir.display()
                )))
            }
        }
    }
    let e = last.expect("the loop ran");
    anyhow::bail!("{}: no free results file name after 16 tries ({e}); give --json FILE", dir.display())
}

/// Create `path`, which must not exist in any form: `O_CREAT | O_EXCL` fails on a dangling or planted link too.
fn create_new(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().write(true).create_new(true).mode(0o644).open(path)
}

/// Whether `path` is a FIFO, character device or socket: written in place, never replaced.
fn is_special(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir())
}

fn is_fifo(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_fifo())
}

/// Special files opened so far, kept open for the whole run: closing a FIFO tells its reader the stream ended
/// (`cat` exits), so the check before the run and every later write share one open file.
static HELD: std::sync::Mutex<Vec<(PathBuf, File)>> = std::sync::Mutex::new(Vec::new());

/// Open a special file (device, FIFO) for writing as a redirect would, once per process (see [`HELD`]). A FIFO is
/// opened without blocking first: no process reading it means `ENXIO` at once, which is refused, where a blocking
/// open would wait forever.
pub fn open_special(flag: &str, path: &Path) -> Result<File> {
    let mut held = HELD.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, f)) = held.iter().find(|(p, _)| p == path) {
        return f.try_clone().with_context(|| format!("{flag} {}", path.display()));
    }
    let mut opts = OpenOptions::new();
    opts.write(true);
    if is_fifo(path) {
        opts.custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits());
    }
    let file = opts.open(path).map_err(|e| {
        if e.raw_os_error() == Some(nix::libc::ENXIO) {
            crate::error::usage(format!(
                "{flag} {}: a FIFO with no process reading it; start the reader first (e.g. cat {} &)",
                path.display(),
                path.display()
            ))
        } else {
            anyhow::anyhow!("{flag} {}: cannot open: {e}", path.display())
        }
    })?;
    if is_fifo(path) {
        // Writes block again once a reader is there: a slow reader slows the run's saves, never loses bytes.
        let flags = nix::fcntl::fcntl(file.as_raw_fd(), nix::fcntl::FcntlArg::F_GETFL)?;
        let mut flags = nix::fcntl::OFlag::from_bits_truncate(flags);
        flags.remove(nix::fcntl::OFlag::O_NONBLOCK);
        nix::fcntl::fcntl(file.as_raw_fd(), nix::fcntl::FcntlArg::F_SETFL(flags))?;
    }
    held.push((path.to_path_buf(), file.try_clone()?));
    Ok(file)
}

/// Open an output that is appended to as the run goes (`--events`): a special file as [`open_special`], a file
/// the user named created or truncated, as `>` would.
pub fn open_stream(flag: &str, path: &Path) -> Result<File> {
    if is_special(path) {
        return open_special(flag, path);
    }
    File::create(path).with_context(|| format!("{flag} {}: cannot create", path.display()))
}

/// Whether a results file at `path` is written only once, when the run ends: a FIFO or device takes every write
/// as more of one stream, so rewriting it after each case would send the reader several documents.
pub fn written_once(path: &Path) -> bool {
    is_special(path)
}

/// Write `bytes` to a file the user named (`--json FILE`), as a shell redirect would: via a temporary file and a
/// rename; a symbolic link is followed (the file it names is replaced, the link stays); a device or a pipe is
/// written in place (a rename would replace the device node itself: as root, /dev/null would then collect every
/// process's discarded output).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    if is_special(path) {
        let mut f = open_special("output", path)?;
        return f.write_all(bytes).with_context(|| format!("cannot write {}", path.display()));
    }
    let resolved;
    let path = if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
        match std::fs::canonicalize(path) {
            Ok(p) => {
                resolved = p;
                resolved.as_path()
            }
            // A dangling link: create the file it names, as `>` would.
            Err(_) => return std::fs::write(path, bytes).with_context(|| format!("cannot write {}", path.display())),
        }
    } else {
        path
    };
    write_replacing(path, bytes)
}

/// Write `bytes` to a file kvxfer created itself ([`create_default`]): replaced by a rename, never followed, so a
/// link put in its place after it was created is replaced, not written through.
pub fn write_owned(path: &Path, bytes: &[u8]) -> Result<()> {
    write_replacing(path, bytes)
}

fn write_replacing(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = temp_beside(path)?;
    replace_with(&tmp, path, |t| {
        let mut f = create_new(t)?;
        f.write_all(bytes)
    })
}

/// A temporary name beside `path` that nobody can have planted: random, and created with `O_EXCL` by the writer.
pub fn temp_beside(path: &Path) -> Result<PathBuf> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    Ok(dir.join(format!(".{name}.tmp.{}", random_suffix(6)?)))
}

/// Write `tmp` with `write`, then rename it over `path`; `tmp` is removed if either step fails.
pub fn replace_with(tmp: &Path, path: &Path, write: impl FnOnce(&Path) -> std::io::Result<()>) -> Result<()> {
    let outcome = write(tmp)
        .with_context(|| format!("cannot write {}", tmp.display()))
        .and_then(|()| std::fs::rename(tmp, path).with_context(|| format!("cannot write {}", path.display())));
    if outcome.is_err() {
        let _ = std::fs::remove_file(tmp);
    }
    outcome
}

/// Fail early (usage error) when an output file could not be created: missing or unwritable directory, a
/// directory in its place, or a FIFO nobody reads.
pub fn check_writable(flag: &str, path: &Path) -> Result<()> {
    if is_special(path) {
        return open_special(flag, path).map(drop);
    }
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !dir.is_dir() {
        return Err(crate::error::usage(format!(
            "{flag} {}: directory {} does not exist; create it first",
            path.display(),
            dir.display()
        )));
    }
    if path.is_dir() {
        return Err(crate::error::usage(format!("{flag} {}: is a directory; give a file name", path.display())));
    }
    let probe = temp_beside(&dir.join(".kvxfer-probe"))?;
    match OpenOptions::new().write(true).create_new(true).open(&probe) {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(e) => {
            Err(crate::error::usage(format!("{flag} {}: cannot write in {}: {e}", path.display(), dir.display())))
        }
    }
}

/// What identifies a file whatever path names it: its device and inode when it exists, else its directory's
/// canonical path and its name.
fn identity(path: &Path) -> Option<(u64, u64, PathBuf)> {
    use std::os::unix::fs::MetadataExt;
    if let Ok(m) = std::fs::metadata(path) {
        return Some((m.dev(), m.ino(), PathBuf::new()));
    }
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let dir = std::fs::canonicalize(dir).ok()?;
    Some((0, 0, dir.join(path.file_name()?)))
}

/// Refuse two outputs naming one file (`--json r --csv r`, or through a link): one would silently replace the
/// other. Devices such as /dev/null may be named by several.
pub fn check_distinct(outputs: &[(&str, &Path)]) -> Result<()> {
    let mut seen: Vec<(&str, &Path, (u64, u64, PathBuf))> = Vec::new();
    for &(flag, path) in outputs {
        if path == Path::new("-") || (is_special(path) && !is_fifo(path)) {
            continue;
        }
        let Some(id) = identity(path) else { continue };
        if let Some((other, other_path, _)) = seen.iter().find(|(_, _, i)| *i == id) {
            crate::bail_usage!(
                "{flag} {} and {other} {} name the same file: one would replace the other; give each its own file",
                path.display(),
                other_path.display()
            );
        }
        seen.push((flag, path, id));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("kvxfer-files-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_link_keeps_pointing_at_the_rewritten_file() {
        let dir = scratch("link");
        let (file, link) = (dir.join("real.json"), dir.join("link.json"));
        std::fs::write(&file, b"old").unwrap();
        std::os::unix::fs::symlink(&file, &link).unwrap();
        write_atomic(&link, b"new").unwrap();
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "the link stays a link");
        assert_eq!(std::fs::read(&file).unwrap(), b"new");
        // A temporary file that cannot be renamed into place (a directory is there) is not left behind.
        let busy = dir.join("busy");
        std::fs::create_dir_all(busy.join("x")).unwrap();
        assert!(write_atomic(&busy, b"x").is_err());
        assert!(!std::fs::read_dir(&dir).unwrap().any(|e| e.unwrap().file_name().to_string_lossy().contains(".tmp.")));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_default_name_never_opens_a_planted_link_or_an_earlier_file() {
        let dir = scratch("default");
        let victim = dir.join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let planted = dir.join("T-0000.json");
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        let e = create_new(&planted).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists);
        let earlier = dir.join("T-0001.json");
        std::fs::write(&earlier, b"earlier run").unwrap();
        assert_eq!(create_new(&earlier).unwrap_err().kind(), std::io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious", "the link's target was never opened");
        assert_eq!(std::fs::read(&earlier).unwrap(), b"earlier run");
        // Runs started in the same millisecond get names of their own.
        let mut names: Vec<PathBuf> = (0..200).map(|_| create_unique(&dir, "T", "json").unwrap()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 200);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_owned_file_replaced_by_a_link_is_not_written_through() {
        let dir = scratch("owned");
        let victim = dir.join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let p = create_default(&dir, "json").unwrap();
        std::fs::remove_file(&p).unwrap();
        std::os::unix::fs::symlink(&victim, &p).unwrap();
        write_owned(&p, b"results").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert_eq!(std::fs::read(&p).unwrap(), b"results");
        assert!(!std::fs::symlink_metadata(&p).unwrap().file_type().is_symlink());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn two_outputs_naming_one_file_are_refused() {
        let dir = scratch("distinct");
        let (a, b) = (dir.join("a.json"), dir.join("b.csv"));
        check_distinct(&[("--json", &a), ("--csv", &b)]).unwrap();
        let e = check_distinct(&[("--json", &a), ("--csv", &a)]).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(e.to_string().contains("--csv") && e.to_string().contains("--json"), "{e}");
        // The same file through another spelling, and through a link.
        let dotted = dir.join(".").join("a.json");
        assert!(check_distinct(&[("--json", &a), ("--md", &dotted)]).is_err());
        std::fs::write(&a, b"").unwrap();
        let link = dir.join("l");
        std::os::unix::fs::symlink(&a, &link).unwrap();
        assert!(check_distinct(&[("--json", &a), ("--events", &link)]).is_err());
        // /dev/null may take every output.
        let null = Path::new("/dev/null");
        check_distinct(&[("--json", null), ("--csv", null)]).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_fifo_is_written_in_place_and_one_without_a_reader_refused() {
        use std::io::Read;
        let dir = scratch("fifo");
        let fifo = dir.join("out.json");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let e = check_writable("--json", &fifo).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(e.to_string().contains("no process reading"), "{e}");
        assert!(write_atomic(&fifo, b"x").is_err(), "no reader: refused at once, not waited for");
        // A reader (opened without blocking, so it is there before the write).
        let mut reader =
            OpenOptions::new().read(true).custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits()).open(&fifo).unwrap();
        check_writable("--json", &fifo).unwrap();
        write_atomic(&fifo, b"{\"ok\": true}").unwrap();
        assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo(), "the FIFO must still be a FIFO");
        // The writer stays open for the run (closing would end the reader's stream), so read what is there.
        let mut buf = [0u8; 64];
        let n = reader.read(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"{\"ok\": true}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
