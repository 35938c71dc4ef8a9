//! How much more memory this process may take, and how much more it may pin. The first is the tightest of the host's
//! `MemAvailable` and the limit of every memory cgroup the process sits in — its own and each ancestor's, since a
//! parent's limit binds its children (a Slurm job step, a Kubernetes pod) — in cgroup v2 (`memory.max`) or v1
//! (`memory.limit_in_bytes`). A cgroup's reclaimable page cache (`inactive_file`) counts as free: the kernel drops it
//! before it kills anyone, so a big build's cache in the same cgroup must not make a run look impossible. The second
//! is RLIMIT_MEMLOCK (`ulimit -l`), which bounds what an RDMA device may register unless the process holds
//! CAP_IPC_LOCK. Everything is read through [`SysRoot`], so a test can point it at a written tree; what cannot be
//! read is unknown, never a refusal.

use super::sysroot::SysRoot;
use crate::mem::host::meminfo_field;
use crate::plan::sizes::format_size;
use std::path::{Path, PathBuf};

/// cgroup v1 writes "no limit" as the largest page-aligned i64; anything this large is no limit.
const UNLIMITED: u64 = 1 << 62;

/// Which cgroup hierarchy a limit comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupVersion {
    V1,
    V2,
}

impl CgroupVersion {
    fn files(self) -> (&'static str, &'static str, &'static [&'static str]) {
        match self {
            CgroupVersion::V1 => {
                ("memory.limit_in_bytes", "memory.usage_in_bytes", &["total_inactive_file", "inactive_file"])
            }
            CgroupVersion::V2 => ("memory.max", "memory.current", &["inactive_file"]),
        }
    }
}

/// What bounds the memory this process may still take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bound {
    /// The host's `MemAvailable`.
    Host,
    /// A memory cgroup's limit less what its members use, reclaimable page cache counted as free.
    Cgroup { version: CgroupVersion, path: String, limit: u64, usage: u64, reclaimable: u64 },
}

/// Bytes this process may still allocate, and what says so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Headroom {
    pub bytes: u64,
    pub bound: Bound,
}

impl Headroom {
    /// The end of a sentence "… needs 2 GiB, but {this}": what allows how much.
    pub fn describe(&self) -> String {
        match &self.bound {
            Bound::Host => format!("only {} is available (MemAvailable)", format_size(self.bytes)),
            Bound::Cgroup { version, path, limit, usage, reclaimable } => format!(
                "the memory cgroup {path} allows only {} more ({} {}; {} in use, {} of it reclaimable cache)",
                format_size(self.bytes),
                version.files().0,
                format_size(*limit),
                format_size(*usage),
                format_size(*reclaimable)
            ),
        }
    }
}

/// The tightest bound on what this process may still allocate; None when neither the host nor a cgroup says.
pub fn headroom(root: &SysRoot) -> Option<Headroom> {
    let host = root
        .read("/proc/meminfo")
        .and_then(|t| meminfo_field(&t, "MemAvailable"))
        .map(|bytes| Headroom { bytes, bound: Bound::Host });
    host.into_iter().chain(cgroup_limits(root)).min_by_key(|h| h.bytes)
}

/// Every memory cgroup limit that binds this process (its cgroup's and each ancestor's, in both hierarchies).
pub fn cgroup_limits(root: &SysRoot) -> Vec<Headroom> {
    let (Some(cgroups), Some(mounts)) = (root.read("/proc/self/cgroup"), root.read("/proc/self/mountinfo")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next()) else { continue };
        let version = if id == "0" && controllers.is_empty() {
            CgroupVersion::V2
        } else if controllers.split(',').any(|c| c == "memory") {
            CgroupVersion::V1
        } else {
            continue;
        };
        let Some((mount_root, mount_point)) = cgroup_mount(&mounts, version) else { continue };
        // The cgroup's directory under the mount: a mount of a sub-tree (a container's own cgroup) holds the paths
        // below its root; a path outside it (another namespace's view) is read at the mount itself.
        let below = Path::new(path)
            .strip_prefix(&mount_root)
            .ok()
            .filter(|p| p.components().all(|c| matches!(c, std::path::Component::Normal(_))))
            .unwrap_or(Path::new(""));
        let mut dir = mount_point.join(below);
        while dir.starts_with(&mount_point) {
            let inside = dir.strip_prefix(&mount_point).unwrap_or(Path::new(""));
            let name = Path::new(&mount_root).join(inside);
            let name = name.to_string_lossy();
            let name = match name.trim_end_matches('/') {
                "" => "/",
                n => n,
            };
            if let Some(h) = cgroup_level(root, version, &dir, name) {
                out.push(h);
            }
            if !dir.pop() {
                break;
            }
        }
    }
    out
}

/// The root inside the hierarchy and the mount point of the cgroup mount of `version` with the memory controller,
/// from /proc/self/mountinfo (`ID PARENT DEV ROOT MOUNTPOINT OPTS… - FSTYPE SOURCE SUPEROPTS`).
fn cgroup_mount(mountinfo: &str, version: CgroupVersion) -> Option<(String, PathBuf)> {
    mountinfo.lines().find_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        let fields: Vec<&str> = before.split_whitespace().collect();
        let (mount_root, mount_point) = (*fields.get(3)?, *fields.get(4)?);
        let mut after = after.split_whitespace();
        let (fstype, _source, opts) = (after.next()?, after.next()?, after.next().unwrap_or(""));
        let fits = match version {
            CgroupVersion::V2 => fstype == "cgroup2",
            CgroupVersion::V1 => fstype == "cgroup" && opts.split(',').any(|o| o == "memory"),
        };
        fits.then(|| (mount_root.to_string(), PathBuf::from(mount_point)))
    })
}

/// One cgroup's limit, if it has one (a v2 cgroup without the memory controller enabled has no `memory.max`).
fn cgroup_level(root: &SysRoot, version: CgroupVersion, dir: &Path, name: &str) -> Option<Headroom> {
    let (limit_file, usage_file, stat_keys) = version.files();
    let limit: u64 = root.read(dir.join(limit_file))?.parse().ok().filter(|&l| l < UNLIMITED)?;
    let usage = root.read_u64(dir.join(usage_file)).unwrap_or(0);
    let stat = root.read(dir.join("memory.stat")).unwrap_or_default();
    let reclaimable = stat_keys.iter().find_map(|k| stat_field(&stat, k)).unwrap_or(0).min(usage);
    Some(Headroom {
        bytes: limit.saturating_sub(usage - reclaimable),
        bound: Bound::Cgroup { version, path: name.to_string(), limit, usage, reclaimable },
    })
}

/// `key N` from a memory.stat file.
fn stat_field(stat: &str, key: &str) -> Option<u64> {
    stat.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
}

/// What RLIMIT_MEMLOCK lets this process still pin, where it binds at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lockable {
    /// The soft limit (`ulimit -l`).
    pub limit: u64,
    /// Pinned already (`VmPin` and `VmLck`).
    pub pinned: u64,
}

impl Lockable {
    pub fn bytes(&self) -> u64 {
        self.limit.saturating_sub(self.pinned)
    }
}

/// CAP_IPC_LOCK's bit in the capability sets of /proc/PID/status.
const CAP_IPC_LOCK: u32 = 14;

/// The memlock limit that binds this process; None when there is none (unlimited, or CAP_IPC_LOCK lifts it, as it
/// does for root) or it cannot be read.
pub fn lockable(root: &SysRoot) -> Option<Lockable> {
    let status = root.read("/proc/self/status")?;
    let caps = status.lines().find_map(|l| l.strip_prefix("CapEff:")).map(str::trim)?;
    if u64::from_str_radix(caps, 16).ok()? & (1 << CAP_IPC_LOCK) != 0 {
        return None;
    }
    let limits = root.read("/proc/self/limits")?;
    let soft = limits.lines().find_map(|l| l.strip_prefix("Max locked memory"))?.split_whitespace().next()?;
    let limit = soft.parse().ok()?; // "unlimited" does not parse: no bound
    let pinned = ["VmPin", "VmLck"].iter().filter_map(|f| meminfo_field(&status, f)).sum();
    Some(Lockable { limit, pinned })
}

#[cfg(test)]
#[path = "memory_tests.rs"]
mod tests;
