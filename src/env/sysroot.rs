//! The one root every fingerprint, topology and counter read of sysfs and procfs goes through: `/`, or the tree
//! `KVXFER_SYSFS_ROOT` names — a capture of another machine's `/sys` and `/proc` files, so that tests and
//! `kvxfer devices`/`doctor` can be run against hosts they are not on. Reads return nothing when a file is missing
//! (containers, other kernels, a partial capture): what sysfs does not say is unknown, never an error.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

#[derive(Debug, Clone)]
pub struct SysRoot {
    root: PathBuf,
}

impl SysRoot {
    /// The process's root: `KVXFER_SYSFS_ROOT` when set, else `/`. Read once.
    pub fn get() -> &'static SysRoot {
        static ROOT: OnceLock<SysRoot> = OnceLock::new();
        ROOT.get_or_init(|| SysRoot::at(std::env::var_os("KVXFER_SYSFS_ROOT").map(PathBuf::from).unwrap_or("/".into())))
    }

    /// A root at `root`, made absolute (links inside it resolve to absolute paths, which [`SysRoot::strip`] maps
    /// back).
    pub fn at(root: impl Into<PathBuf>) -> SysRoot {
        let root = root.into();
        SysRoot { root: std::fs::canonicalize(&root).unwrap_or(root) }
    }

    /// Whether reads go to this machine's own files.
    pub fn is_live(&self) -> bool {
        self.root == Path::new("/")
    }

    /// Where the absolute path `p` (`/sys/class/...`) lies under this root.
    pub fn path(&self, p: impl AsRef<Path>) -> PathBuf {
        let p = p.as_ref();
        self.root.join(p.strip_prefix("/").unwrap_or(p))
    }

    /// A file's contents, trimmed; None when missing, unreadable or empty.
    pub fn read(&self, p: impl AsRef<Path>) -> Option<String> {
        std::fs::read_to_string(self.path(p)).ok().map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
    }

    /// A file holding one unsigned number (sysfs counters); None otherwise.
    pub fn read_u64(&self, p: impl AsRef<Path>) -> Option<u64> {
        self.read(p)?.parse().ok()
    }

    /// The names in a directory, sorted; empty when it is missing.
    pub fn entries(&self, dir: impl AsRef<Path>) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.path(dir))
            .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        v.sort();
        v
    }

    /// The last component a sysfs link resolves to (a device's PCI address), followed inside this root: a
    /// captured tree keeps sysfs's relative links.
    pub fn link_name(&self, p: impl AsRef<Path>) -> Option<String> {
        let resolved = std::fs::canonicalize(self.path(p)).ok()?;
        resolved.file_name().map(|f| f.to_string_lossy().into_owned())
    }

    /// An absolute path of this machine's view (`/sys/...`) for a path found under the root.
    pub fn strip(&self, p: &Path) -> PathBuf {
        p.strip_prefix(&self.root).map(|r| Path::new("/").join(r)).unwrap_or_else(|_| p.to_path_buf())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_paths_land_under_the_root() {
        let r = SysRoot::at("/tmp/capture");
        assert_eq!(r.path("/sys/class/net"), Path::new("/tmp/capture/sys/class/net"));
        assert_eq!(r.strip(Path::new("/tmp/capture/sys/bus")), Path::new("/sys/bus"));
        assert!(SysRoot::at("/").is_live() && !r.is_live());
        assert_eq!(SysRoot::at("/").path("/proc/self/stat"), Path::new("/proc/self/stat"));
    }
}
