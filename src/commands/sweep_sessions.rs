//! The sessions of a sweep file's run: one per distinct connection configuration (transport, memory kinds, queue
//! pairs, MR pieces, layout, ...), each a loopback receiver thread plus a sender session. Reps of several sessions
//! interleave, so sessions stay open between visits while their buffers fit in memory together; when they do not,
//! the least recently used one is closed first and reopened later (its cases then warm up again).

use super::loopback::loopback_receiver;
use crate::control::Timeouts;
use crate::env::{memory, sysroot::SysRoot};
use crate::mem::MemKind;
use crate::plan::RunConfig;
use crate::run::receiver::ReceiverLimits;
use crate::run::sender::SenderSession;
use crate::transport::{registry, DeviceChoice};
use anyhow::Result;
use std::collections::BTreeMap;
use std::thread::JoinHandle;

/// What a session's first connection reported, for the results' `sweep.sessions`.
#[derive(Clone)]
pub struct SessionDetail {
    pub dst_mem: String,
    pub transport_detail: serde_json::Value,
    pub numa: crate::observe::numa::NumaSides,
}

/// Everything needed to open one session of a sweep.
pub struct SessionPlan {
    /// The sweep's case ids, in the order of `cfg.cases`.
    pub case_ids: Vec<usize>,
    pub cfg: RunConfig,
    pub src: MemKind,
    pub dst: MemKind,
    pub device: DeviceChoice,
    pub peer_device: DeviceChoice,
    pub timeouts: Timeouts,
    pub model: Option<String>,
}

impl SessionPlan {
    /// Bytes this session's two buffers take in host memory and on each GPU.
    fn footprint(&self) -> (u64, BTreeMap<u32, u64>) {
        let bytes = self.cfg.buffer_bytes();
        let (mut host, mut gpu) = (0, BTreeMap::new());
        for k in [self.src, self.dst] {
            match k {
                MemKind::Gpu(n) => *gpu.entry(n).or_insert(0) += bytes,
                _ => host += bytes,
            }
        }
        (host, gpu)
    }
}

struct Open {
    session: SenderSession,
    receiver: JoinHandle<Result<()>>,
}

pub struct Pool<'a> {
    plans: &'a [SessionPlan],
    open: Vec<Option<Open>>,
    last_used: Vec<u64>,
    clock: u64,
    host_budget: u64,
    gpu_budget: BTreeMap<u32, u64>,
    /// Sessions opened so far, reopenings included.
    pub opens: usize,
    /// What each session's receiver and transport reported when it first opened.
    pub details: Vec<Option<SessionDetail>>,
}

impl<'a> Pool<'a> {
    pub fn new(plans: &'a [SessionPlan]) -> Pool<'a> {
        // Leave headroom: the kernel, the page cache and the CUDA context need memory too.
        let host_budget = memory::headroom(SysRoot::get()).map_or(u64::MAX, |h| h.bytes / 10 * 8);
        let mut gpu_budget = BTreeMap::new();
        for p in plans {
            for n in p.footprint().1.keys() {
                let free = crate::mem::cuda::memory_info(*n).map_or(u64::MAX, |(free, _)| free / 10 * 9);
                gpu_budget.insert(*n, free);
            }
        }
        Pool {
            plans,
            open: plans.iter().map(|_| None).collect(),
            last_used: vec![0; plans.len()],
            clock: 0,
            host_budget,
            gpu_budget,
            opens: 0,
            details: vec![None; plans.len()],
        }
    }

    fn fits_with_open(&self, g: usize) -> bool {
        let (mut host, mut gpu) = self.plans[g].footprint();
        for (i, _) in self.open.iter().enumerate().filter(|(_, o)| o.is_some()) {
            let (h, gp) = self.plans[i].footprint();
            host += h;
            for (n, b) in gp {
                *gpu.entry(n).or_insert(0) += b;
            }
        }
        host <= self.host_budget && gpu.iter().all(|(n, b)| *b <= self.gpu_budget.get(n).copied().unwrap_or(u64::MAX))
    }

    /// Session `g`, opened if needed (closing least recently used ones until it fits). `true` when it was opened
    /// just now.
    pub fn session(&mut self, g: usize) -> Result<(&mut SenderSession, bool)> {
        self.clock += 1;
        self.last_used[g] = self.clock;
        let fresh = self.open[g].is_none();
        if fresh {
            while !self.fits_with_open(g) {
                let lru = (0..self.open.len()).filter(|&i| self.open[i].is_some()).min_by_key(|&i| self.last_used[i]);
                match lru {
                    Some(i) => self.close(i, &Ok(()))?,
                    None => break, // alone it is allowed: the memory checks before the run refused what cannot fit
                }
            }
            let p = &self.plans[g];
            let limits = ReceiverLimits {
                max_size: None,
                max_streams: 64,
                timeouts: p.timeouts,
                mem: p.dst,
                device: p.peer_device.clone(),
                shares_process: !registry::get(p.cfg.transport.kind()).receiver_in_own_process(),
                gauge: None,
            };
            let (addr, token, receiver) = loopback_receiver(limits, p.cfg.transport.kind())?;
            let shares_process = !registry::get(p.cfg.transport.kind()).receiver_in_own_process();
            let connected =
                super::send::connect(&addr.to_string(), &token, p.timeouts, &p.device, &p.cfg, p.src, shares_process);
            let session = match connected {
                Ok((s, _)) => s,
                Err(e) => {
                    // The receiver reported its side to the sender already; collect the thread.
                    let _ = receiver.join();
                    return Err(e);
                }
            };
            self.details[g].get_or_insert_with(|| SessionDetail {
                dst_mem: session.dst_mem.clone(),
                transport_detail: session.transport_detail.to_json(),
                numa: session.numa.clone(),
            });
            self.opens += 1;
            self.open[g] = Some(Open { session, receiver });
        }
        Ok((&mut self.open[g].as_mut().expect("opened above").session, fresh))
    }

    /// Close session `g` (if open): Finish/Bye after success, the error otherwise; then collect its receiver.
    pub fn close(&mut self, g: usize, outcome: &Result<()>) -> Result<()> {
        let Some(o) = self.open[g].take() else { return Ok(()) };
        let closed = o.session.close(outcome);
        let received = o.receiver.join().unwrap_or_else(|_| Err(anyhow::anyhow!("the receiver thread panicked")));
        match (closed, received, outcome) {
            (Err(e), _, _) => Err(e),
            // After a sender-side failure the receiver's error only echoes it.
            (Ok(()), Err(r), Ok(())) => Err(r.context("the receiver failed")),
            _ => Ok(()),
        }
    }

    pub fn close_all(&mut self, outcome: &Result<()>) -> Result<()> {
        let mut first = Ok(());
        for g in 0..self.open.len() {
            let r = self.close(g, outcome);
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}
