//! Counters read before and after each rep, outside its timed interval, on each end: the RDMA port's
//! `counters/*` and `hw_counters/*` (every numeric file the driver exposes: mlx5's out_of_sequence, np_cnp_sent...,
//! rxe's duplicate_request, retry_exceeded_err...), the network interface's `statistics/*` and its driver's
//! statistics (`ethtool -S`: PFC pause frames, discards), this process's CPU
//! time, run-queue wait and preemptions and the host's contention (see [`super::contention`]), and with GPU memory the GPU's NVML counters (NVLink bytes, PCIe replays, energy, clocks). A rep keeps the counters that moved, as deltas: `{source: {name: delta}}`; a counter absent from a rep
//! did not move. Sources are found once per session from what the transport uses (the RDMA device and port, the
//! interface that holds the local address) through [`SysRoot`].

use crate::env::sysroot::SysRoot;
pub use crate::plan::CountersMode;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Instant;

/// Counter deltas of one rep (or one side of it), by source then name.
pub type Deltas = BTreeMap<String, BTreeMap<String, u64>>;

/// Which end reads: the sources of a rep are named with it, as both ends' counters land in one rep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Sender,
    Receiver,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Sender => "sender",
            Side::Receiver => "receiver",
        }
    }
}

/// One place counters come from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Source {
    /// `/sys/class/infiniband/DEV/ports/PORT/{counters,hw_counters}/*`.
    RdmaPort { device: String, port: u8 },
    /// `/sys/class/net/NAME/statistics/*`.
    Netdev { name: String },
    /// The same interface's driver statistics, as `ethtool -S` lists them (PFC pause frames, discards, per-queue
    /// counts; see `observe::ethtool`). Live hosts only: a captured tree has no driver to ask.
    Ethtool { name: String },
    /// CPU time this process used (all its threads), in µs, and its threads' run-queue wait and preemptions;
    /// `both_ends` when the other end runs in it too.
    Process { both_ends: bool },
    /// What the rest of the host did: other processes' CPU time, softirq and steal time, the load average.
    Host { both_ends: bool },
    /// The GPU of this end's buffer, through NVML (see `mem::nvml`).
    /// `full`: also the NVLink byte counters and energy, whose reads disturb the next transfer (`--counters full`).
    Gpu { ordinal: u32, bus_id: String, full: bool },
}

impl Source {
    fn label(&self, side: Side) -> String {
        let side = side.name();
        match self {
            Source::RdmaPort { device, port } => format!("{side} rdma {device}:{port}"),
            Source::Netdev { name } => format!("{side} net {name}"),
            Source::Ethtool { name } => format!("{side} ethtool {name}"),
            Source::Process { both_ends: false } => format!("{side} process"),
            Source::Process { both_ends: true } => "process (both ends)".into(),
            Source::Host { both_ends: false } => format!("{side} host"),
            Source::Host { both_ends: true } => "host (both ends)".into(),
            Source::Gpu { ordinal, .. } => format!("{side} gpu:{ordinal}"),
        }
    }

    /// The directories of numeric files this source is read from, if it is one of those.
    fn dirs(&self) -> Vec<String> {
        match self {
            Source::RdmaPort { device, port } => ["counters", "hw_counters"]
                .iter()
                .map(|dir| format!("/sys/class/infiniband/{device}/ports/{port}/{dir}"))
                .collect(),
            Source::Netdev { name } => vec![format!("/sys/class/net/{name}/statistics")],
            _ => Vec::new(),
        }
    }

    /// Open this source for reading rep after rep: its files once (a sysfs attribute reads afresh at offset 0, so
    /// each snapshot is a pread per counter instead of a directory listing and an open per counter), the driver's
    /// statistics names once.
    fn open(&self, root: &SysRoot) -> Reader {
        match self {
            Source::RdmaPort { .. } | Source::Netdev { .. } => Reader::Files(
                self.dirs()
                    .iter()
                    .flat_map(|d| root.entries(d).into_iter().map(move |name| (format!("{d}/{name}"), name)))
                    .filter_map(|(path, name)| std::fs::File::open(root.path(path)).ok().map(|f| (name, f)))
                    .collect(),
            ),
            Source::Ethtool { name } => Reader::Ethtool(super::ethtool::Reader::open(name)),
            Source::Gpu { bus_id, full, .. } => Reader::Gpu { bus_id: bus_id.clone(), full: *full },
            Source::Process { .. } => Reader::Process(Default::default()),
            Source::Host { .. } => Reader::Host,
        }
    }
}

/// How one source is read at each snapshot (see [`Source::open`]).
enum Reader {
    Files(Vec<(String, std::fs::File)>),
    Ethtool(Option<super::ethtool::Reader>),
    Gpu { bus_id: String, full: bool },
    Process(super::contention::ProcessWait),
    Host,
}

impl Reader {
    fn read(&mut self) -> BTreeMap<String, u64> {
        match self {
            Reader::Files(files) => {
                files.iter().filter_map(|(name, f)| Some((name.clone(), read_u64_at(f)?))).collect()
            }
            Reader::Ethtool(r) => r.as_ref().and_then(|r| r.read()).unwrap_or_default(),
            Reader::Gpu { bus_id, full } => crate::mem::nvml::gpu_counters(bus_id, *full).unwrap_or_default(),
            Reader::Process(wait) => {
                let mut out = BTreeMap::new();
                if let Ok(t) = nix::time::clock_gettime(nix::time::ClockId::CLOCK_PROCESS_CPUTIME_ID) {
                    let us = t.tv_sec() as u64 * 1_000_000 + t.tv_nsec() as u64 / 1_000;
                    out.insert("cpu_us".into(), us);
                }
                wait.read(&mut out);
                out
            }
            Reader::Host => super::contention::host(SysRoot::get()),
        }
    }
}

/// The unsigned number an open counter file holds now (read from its start; sysfs regenerates it).
fn read_u64_at(f: &std::fs::File) -> Option<u64> {
    use std::os::unix::fs::FileExt;
    let mut buf = [0u8; 32];
    let n = f.read_at(&mut buf, 0).ok()?;
    std::str::from_utf8(&buf[..n]).ok()?.trim().parse().ok()
}

/// What one end reads around its reps.
pub struct RepCounters {
    side: Side,
    sources: Vec<Source>,
    /// How each source is read, in the same order.
    readers: Vec<Reader>,
    before: Vec<BTreeMap<String, u64>>,
    /// How long the last snapshot took (both reads of a rep cost about twice this).
    pub last_read_us: u64,
}

/// What a session uses, for finding its counters.
pub struct Uses<'a> {
    /// The RDMA devices (verbs rails, or an engine's RDMA devices) and their port; empty: none.
    pub rdma: &'a [String],
    pub ib_port: u8,
    /// Whether no device was named but the transport picks one (verbs): the first device with an active port.
    pub rdma_auto: bool,
    /// This end's address on the control connection: the interface holding it carries TCP data.
    pub local_ip: Option<IpAddr>,
    /// Both ends run in this process: the sender reads its CPU time for both, the receiver none.
    pub shares_process: bool,
    /// The GPU this end's buffer is on, if any.
    pub gpu: Option<u32>,
}

impl RepCounters {
    /// The sources for `uses` on this host (none with `--counters off`).
    pub fn discover(side: Side, mode: CountersMode, uses: &Uses) -> RepCounters {
        let root = SysRoot::get();
        let mut sources = Vec::new();
        if mode != CountersMode::Off {
            let mut devices: Vec<String> = uses.rdma.to_vec();
            if devices.is_empty() && uses.rdma_auto {
                devices.extend(first_active_device(root, uses.ib_port));
            }
            for device in devices {
                let port = uses.ib_port;
                if let Some(net) = root.read(format!("/sys/class/infiniband/{device}/ports/{port}/gid_attrs/ndevs/0")) {
                    sources.push(Source::Netdev { name: net });
                }
                sources.push(Source::RdmaPort { device, port });
            }
            if let Some(name) = uses.local_ip.and_then(interface_of) {
                let s = Source::Netdev { name };
                if !sources.contains(&s) {
                    sources.push(s);
                }
            }
            // Each interface's driver statistics too, where the driver has some (not lo, not a captured tree).
            let drivers: Vec<Source> = sources
                .iter()
                .filter_map(|s| match s {
                    Source::Netdev { name } if root.is_live() && super::ethtool::stats(name).is_some() => {
                        Some(Source::Ethtool { name: name.clone() })
                    }
                    _ => None,
                })
                .collect();
            sources.extend(drivers);
            if let Some(ordinal) = uses.gpu {
                let bus = crate::mem::cuda::gpus().ok().and_then(|g| g.into_iter().find(|g| g.ordinal == ordinal));
                if let Some(g) = bus {
                    sources.push(Source::Gpu { ordinal, bus_id: g.pci_bus_id, full: mode == CountersMode::Full });
                }
            }
            // One process holding both ends is read once, by the sender; so is its host.
            match (side, uses.shares_process) {
                (_, false) => sources.extend([Source::Process { both_ends: false }, Source::Host { both_ends: false }]),
                (Side::Sender, true) => {
                    sources.extend([Source::Process { both_ends: true }, Source::Host { both_ends: true }])
                }
                (Side::Receiver, true) => {}
            }
        }
        let readers = sources.iter().map(|s| s.open(root)).collect();
        RepCounters { side, sources, readers, before: Vec::new(), last_read_us: 0 }
    }

    /// The sources' labels as reps name them.
    pub fn labels(&self) -> Vec<String> {
        self.sources.iter().map(|s| s.label(self.side)).collect()
    }

    fn snapshot(&mut self) -> Vec<BTreeMap<String, u64>> {
        let t = Instant::now();
        let snap = self.readers.iter_mut().map(Reader::read).collect();
        self.last_read_us = t.elapsed().as_micros() as u64;
        snap
    }

    /// Read every source before a rep.
    pub fn start(&mut self) {
        if !self.sources.is_empty() {
            self.before = self.snapshot();
        }
    }

    /// Read every source after the rep and return what moved since [`RepCounters::start`]. A counter that went
    /// backwards (a reset, a 32-bit wrap) counts as not moved rather than as a huge delta.
    pub fn finish(&mut self) -> Option<Deltas> {
        if self.sources.is_empty() || self.before.len() != self.sources.len() {
            return None;
        }
        let after = self.snapshot();
        let before = std::mem::take(&mut self.before);
        let mut out = Deltas::new();
        for ((source, b), a) in self.sources.iter().zip(before).zip(after) {
            let moved: BTreeMap<String, u64> = a
                .into_iter()
                .filter_map(|(k, v)| {
                    let d = if k.ends_with("_now") { v } else { v.saturating_sub(*b.get(&k)?) };
                    (d > 0).then_some((k, d))
                })
                .collect();
            if !moved.is_empty() {
                out.insert(source.label(self.side), moved);
            }
        }
        Some(out)
    }
}

/// The first RDMA device whose `port` is ACTIVE, as the verbs transport picks one when none is named.
fn first_active_device(root: &SysRoot, port: u8) -> Option<String> {
    root.entries("/sys/class/infiniband").into_iter().find(|d| {
        root.read(format!("/sys/class/infiniband/{d}/ports/{port}/state")).is_some_and(|s| s.contains("ACTIVE"))
    })
}

/// The network interface that holds `ip` on this host.
fn interface_of(ip: IpAddr) -> Option<String> {
    let addrs = nix::ifaddrs::getifaddrs().ok()?;
    for a in addrs {
        let Some(addr) = a.address else { continue };
        let found = match ip {
            IpAddr::V4(v4) => addr.as_sockaddr_in().is_some_and(|s| s.ip() == v4),
            IpAddr::V6(v6) => addr.as_sockaddr_in6().is_some_and(|s| s.ip() == v6),
        };
        if found {
            return Some(a.interface_name);
        }
    }
    None
}

/// Merge one side's deltas into a rep's.
pub fn merge(into: &mut Option<Deltas>, more: Option<Deltas>) {
    if let Some(more) = more {
        into.get_or_insert_with(Deltas::new).extend(more);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tcp end on loopback: no RDMA device, no GPU, the other end in another process.
    fn loopback_uses() -> Uses<'static> {
        let local_ip = Some("127.0.0.1".parse().unwrap());
        Uses { rdma: &[], ib_port: 1, rdma_auto: false, local_ip, shares_process: false, gpu: None }
    }

    #[test]
    fn the_process_cpu_clock_moves_and_only_moved_counters_are_kept() {
        let uses = loopback_uses();
        let mut c = RepCounters::discover(Side::Sender, CountersMode::Auto, &uses);
        assert!(c.labels().contains(&"sender process".to_string()), "{:?}", c.labels());
        c.start();
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let d = c.finish().expect("sources were read");
        assert!(d["sender process"]["cpu_us"] > 0, "{d:?}");
        assert!(d.values().all(|m| m.values().all(|&v| v > 0)), "zero deltas are left out: {d:?}");
        let off = RepCounters::discover(Side::Sender, CountersMode::Off, &uses);
        assert!(off.labels().is_empty());
    }

    /// The interface's counter files are opened once and read again at each snapshot: they must read afresh.
    #[test]
    fn counter_files_opened_once_read_what_moved_since() {
        let uses = loopback_uses();
        let mut c = RepCounters::discover(Side::Sender, CountersMode::Auto, &uses);
        assert!(c.labels().contains(&"sender net lo".to_string()), "{:?}", c.labels());
        for round in 0..3 {
            c.start();
            let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            for _ in 0..10 {
                tx.send_to(b"counted", rx.local_addr().unwrap()).unwrap();
            }
            let d = c.finish().expect("sources were read");
            let moved = d.get("sender net lo").and_then(|m| m.get("tx_packets")).copied().unwrap_or(0);
            assert!(moved >= 10, "round {round}: lo tx_packets moved {moved}: {d:?}");
        }
    }
}
