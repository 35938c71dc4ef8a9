//! NUMA placement (`--numa auto|off|N`). Each end binds the thread that runs its session to the CPUs of one NUMA
//! node before it allocates anything: the threads and engine workers it starts inherit the binding, and its host
//! buffers land on that node by the kernel's first-touch rule (they are allocated and touched on the bound thread).
//! `auto` follows the device the end moves bytes through — the RDMA NIC for verbs and Mooncake's rdma, else the GPU
//! of GPU memory (or of the peer's GPU memory, for pinned memory copied to it) — and binds nothing on a host with
//! one node. What each end did is recorded with the CPUs the kernel then lets it use (results `config.numa`).

use crate::env::sysroot::SysRoot;
use crate::mem::MemKind;
use crate::plan::NumaMode;
use anyhow::{anyhow, Result};
use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

/// What one end did about NUMA.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NumaPlacement {
    pub mode: NumaMode,
    /// The node bound to; None when nothing was bound.
    pub node: Option<u32>,
    /// The CPUs the end's thread may run on afterwards, as the kernel reports them (`0-15,32-47`).
    pub cpus: String,
    /// Why this node, or why none.
    pub reason: String,
}

/// Both ends' placements, as the results record them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NumaSides {
    pub sender: NumaPlacement,
    /// None when the receiver is an older kvxfer that does not say.
    pub receiver: Option<NumaPlacement>,
}

/// A device whose node `auto` follows.
#[derive(Debug, Clone, PartialEq)]
pub enum Follow {
    Rdma(String),
    Gpu(u32),
}

impl Follow {
    /// What an end moves bytes through: its RDMA NIC (`rdma`: the transport drives one; `names`: `-d`, else the
    /// host's only RDMA device), else the GPU of its memory, or of the peer's for pinned memory.
    pub fn pick(rdma: bool, names: &[String], mem: MemKind, peer_mem: Option<MemKind>) -> Option<Follow> {
        if rdma {
            let only = || {
                let all = SysRoot::get().entries("/sys/class/infiniband");
                (all.len() == 1).then(|| all[0].clone())
            };
            if let Some(name) = names.first().cloned().or_else(only) {
                return Some(Follow::Rdma(name));
            }
        }
        match (mem, peer_mem) {
            (MemKind::Gpu(n), _) | (MemKind::Pinned, Some(MemKind::Gpu(n))) => Some(Follow::Gpu(n)),
            _ => None,
        }
    }

    /// Its NUMA node as sysfs gives it (None for -1, missing or unknown), and how to name it.
    fn node(&self, root: &SysRoot) -> (Option<u32>, String) {
        match self {
            Follow::Rdma(name) => (
                root.read(format!("/sys/class/infiniband/{name}/device/numa_node")).and_then(|s| s.parse().ok()),
                name.clone(),
            ),
            Follow::Gpu(n) => {
                let bdf = crate::mem::cuda::gpus()
                    .ok()
                    .and_then(|g| g.into_iter().find(|g| g.ordinal == *n))
                    .map(|g| g.pci_bus_id.to_ascii_lowercase());
                let node = bdf.and_then(|b| root.read(format!("/sys/bus/pci/devices/{b}/numa_node")));
                (node.and_then(|s| s.parse().ok()), format!("gpu:{n}"))
            }
        }
    }
}

/// The host's NUMA nodes and their CPU lists (`/sys/devices/system/node/nodeN/cpulist`).
fn nodes(root: &SysRoot) -> Vec<(u32, String)> {
    let mut v: Vec<(u32, String)> = root
        .entries("/sys/devices/system/node")
        .into_iter()
        .filter_map(|e| e.strip_prefix("node")?.parse().ok())
        .filter_map(|n: u32| Some((n, root.read(format!("/sys/devices/system/node/node{n}/cpulist"))?)))
        .collect();
    v.sort();
    v
}

/// Bind the calling thread as `mode` says and report what it did; `--numa N` for a node the host lacks is a usage
/// error.
pub fn place(mode: NumaMode, follow: Option<Follow>) -> Result<NumaPlacement> {
    place_in(SysRoot::get(), mode, follow)
}

fn place_in(root: &SysRoot, mode: NumaMode, follow: Option<Follow>) -> Result<NumaPlacement> {
    let nodes = nodes(root);
    // A thread may run several sessions (serve, sweep): each starts from the CPUs the process started with.
    static INITIAL: std::sync::OnceLock<Option<CpuSet>> = std::sync::OnceLock::new();
    if let Some(initial) = INITIAL.get_or_init(|| sched_getaffinity(Pid::from_raw(0)).ok()) {
        let _ = sched_setaffinity(Pid::from_raw(0), initial);
    }
    let unbound = |reason: String| Ok(NumaPlacement { mode, node: None, cpus: current_cpus(), reason });
    let (node, reason) = match mode {
        NumaMode::Off => return unbound("--numa off".into()),
        NumaMode::Node(n) => (n, format!("--numa {n}")),
        NumaMode::Auto if nodes.len() < 2 => return unbound("one NUMA node: nothing to bind".into()),
        NumaMode::Auto => match follow.map(|f| f.node(root)) {
            Some((Some(n), name)) => (n, format!("the node of {name}")),
            Some((None, name)) => return unbound(format!("sysfs gives no NUMA node for {name}")),
            None => return unbound("no RDMA NIC or GPU to follow".into()),
        },
    };
    let Some((_, list)) = nodes.iter().find(|(n, _)| *n == node) else {
        let have: Vec<String> = nodes.iter().map(|(n, _)| n.to_string()).collect();
        return Err(crate::error::usage(format!(
            "--numa {node}: no such NUMA node (this host has {})",
            if have.is_empty() { "none that sysfs lists".into() } else { format!("node {}", have.join(", ")) }
        )));
    };
    let set = cpu_set(list).ok_or_else(|| anyhow!("NUMA node {node}: cannot read its CPU list {list:?}"))?;
    sched_setaffinity(Pid::from_raw(0), &set)
        .map_err(|e| anyhow!("cannot bind to NUMA node {node}'s CPUs ({list}): {e}; use --numa off"))?;
    Ok(NumaPlacement { mode, node: Some(node), cpus: current_cpus(), reason })
}

/// A kernel CPU list (`0-3,8,10-11`) as a set; None when malformed or past the set's size.
fn cpu_set(list: &str) -> Option<CpuSet> {
    let mut set = CpuSet::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.parse::<usize>().ok()?, b.parse::<usize>().ok()?),
            None => {
                let a = part.parse::<usize>().ok()?;
                (a, a)
            }
        };
        for cpu in a..=b.min(CpuSet::count().saturating_sub(1)) {
            set.set(cpu).ok()?;
        }
    }
    Some(set)
}

/// The calling thread's CPUs as a kernel CPU list.
fn current_cpus() -> String {
    let Ok(set) = sched_getaffinity(Pid::from_raw(0)) else { return String::new() };
    let cpus: Vec<usize> = (0..CpuSet::count()).filter(|&c| set.is_set(c).unwrap_or(false)).collect();
    cpu_list(&cpus)
}

/// Ascending CPU numbers as a kernel CPU list (`0-2,5`).
fn cpu_list(cpus: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        out.push(if i == j { cpus[i].to_string() } else { format!("{}-{}", cpus[i], cpus[j]) });
        i = j + 1;
    }
    out.join(",")
}

/// The CPUs the two ends of a ping-pong inside one process run on. Left to the scheduler, its two threads often
/// share a core, and a message then passes in a context switch instead of a wake-up on another core: over loopback
/// tcp on a 2-vCPU VM, about 2 µs against 35 µs (sockperf's two processes, pinned apart, read 35), and which of the
/// two a run measured changed from run to run. Kept apart, the in-process ping-pong measures what two hosts'
/// ends do. Both ends derive the split from the same CPUs: the pinger takes the last one, the responder the rest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PingPongCpus {
    pub pinger: String,
    pub responder: String,
}

/// One end of a ping-pong inside one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PingPongEnd {
    Pinger,
    Responder,
}

/// Bind the calling thread to `end`'s share of its CPUs (see [`PingPongCpus`]) and return the split; None, and
/// nothing bound, when the thread may run on one CPU only.
pub fn split_ping_pong(end: PingPongEnd) -> Result<Option<PingPongCpus>> {
    let allowed = sched_getaffinity(Pid::from_raw(0)).map_err(|e| anyhow!("cannot read this thread's CPUs: {e}"))?;
    let cpus: Vec<usize> = (0..CpuSet::count()).filter(|&c| allowed.is_set(c).unwrap_or(false)).collect();
    let Some((&last, rest)) = cpus.split_last().filter(|(_, rest)| !rest.is_empty()) else { return Ok(None) };
    let mut pinger = CpuSet::new();
    pinger.set(last).map_err(|e| anyhow!("CPU {last}: {e}"))?;
    let mut responder = allowed;
    responder.unset(last).map_err(|e| anyhow!("CPU {last}: {e}"))?;
    let mine = if end == PingPongEnd::Pinger { &pinger } else { &responder };
    sched_setaffinity(Pid::from_raw(0), mine).map_err(|e| anyhow!("cannot bind the {end:?} thread's CPUs: {e}"))?;
    Ok(Some(PingPongCpus { pinger: last.to_string(), responder: cpu_list(rest) }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse_as_the_kernel_writes_them() {
        let s = cpu_set("0-2,5").unwrap();
        let on: Vec<usize> = (0..8).filter(|&c| s.is_set(c).unwrap()).collect();
        assert_eq!(on, [0, 1, 2, 5]);
        assert!(cpu_set("x").is_none() && cpu_set("3-").is_none());
    }

    #[test]
    fn auto_binds_to_the_node_of_the_nic_it_drives() {
        let dir = std::env::temp_dir().join(format!("kvxfer-numa-unit-{}", std::process::id()));
        let last = std::thread::available_parallelism().map_or(1, |n| n.get()) - 1;
        for (node, cpus) in [(0, "0".to_string()), (1, last.to_string())] {
            let d = dir.join(format!("sys/devices/system/node/node{node}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("cpulist"), cpus).unwrap();
        }
        let nic = dir.join("sys/class/infiniband/mlx5_0/device");
        std::fs::create_dir_all(&nic).unwrap();
        std::fs::write(nic.join("numa_node"), "1\n").unwrap();
        let root = SysRoot::at(&dir);
        let p = place_in(&root, NumaMode::Auto, Some(Follow::Rdma("mlx5_0".into()))).unwrap();
        assert_eq!(
            (p.node, p.cpus.as_str(), p.reason.as_str()),
            (Some(1), last.to_string().as_str(), "the node of mlx5_0")
        );
        // A NIC sysfs places nowhere (-1, as on the H200 VM) binds nothing, and says why.
        std::fs::write(nic.join("numa_node"), "-1\n").unwrap();
        let p = place_in(&root, NumaMode::Auto, Some(Follow::Rdma("mlx5_0".into()))).unwrap();
        assert_eq!((p.node, p.reason.as_str()), (None, "sysfs gives no NUMA node for mlx5_0"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn numa_modes_read_and_write_as_users_type_them() {
        for t in ["auto", "off", "3"] {
            assert_eq!(t.parse::<NumaMode>().unwrap().to_string(), t);
        }
        assert!("node1".parse::<NumaMode>().is_err());
    }
}
