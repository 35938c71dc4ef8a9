//! RDMA verbs: one-sided RDMA WRITEs over RoCE or InfiniBand (and GPUDirect RDMA for GPU buffers).
//!
//! The region is the receiver's buffer registered in pieces (address, length, rkey each); a write is one RDMA WRITE
//! work request (paged layout: writes whose destinations are back to back share one, gathered by an SGE list);
//! completion is a (selectively signaled) work completion; the receiver learns the rep landed from a WRITE_WITH_IMM
//! on every queue pair. Built on `sideway` (which dlopens libibverbs, so kvxfer starts on hosts
//! without it) for setup, and on raw preallocated work request arrays for the hot path.

mod cq;
pub mod device;
mod land;
mod mr;
mod post;
mod qp;

use super::{Context, Source, Target, TransferExtras, TransferHooks, TransferTimes, TransportDetail};
use crate::mem::Buffer;
pub use crate::plan::CqMode;
use crate::plan::{RunConfig, VerbsConfig, Write};
use anyhow::{Context as _, Result};
use cq::Poller;
use device::PortInfo;
use land::{Lander, RECVS_PER_QP};
use mr::{Piece, Registration};
use post::{Poster, Req, Seg};
use qp::{Endpoint, QpSet};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Mooncake's slice size: small enough to spread over queue pairs, large enough to keep the NIC busy.
pub const DEFAULT_BLOCK_SIZE: u64 = 64 << 10;

/// `transport_detail` of a verbs run: each end's port and memory registration, as the sender saw them.
#[derive(Debug, Clone, Serialize)]
pub struct VerbsDetail {
    pub sender: VerbsSenderDetail,
    pub receiver: VerbsReceiverDetail,
}

#[derive(Debug, Clone, Serialize)]
pub struct VerbsSenderDetail {
    pub port: PortInfo,
    pub qps: u32,
    /// Scatter entries per work request in use (`--max-sge` clamped to the device; 1 for contiguous transfers).
    pub max_sge: u32,
    pub mr_chunk: u64,
    /// The first (the "cold") registration of the send buffer.
    pub reg_ms: f64,
    pub reg_method: String,
}

/// What the receiver's offer said about its end.
#[derive(Debug, Clone, Serialize)]
pub struct VerbsReceiverDetail {
    /// Its port, as it described it.
    pub port: serde_json::Value,
    pub reg_ms: f64,
    pub reg_method: String,
    pub mr_pieces: usize,
}

#[derive(Serialize, Deserialize)]
struct Offer {
    port: serde_json::Value,
    endpoints: Vec<Endpoint>,
    pieces: Vec<Piece>,
    reg_ms: f64,
    reg_method: String,
}

#[derive(Serialize, Deserialize)]
struct Answer {
    endpoints: Vec<Endpoint>,
}

/// Open the device and `cfg.qps` queue pairs whose sends carry up to `send_sge` scatter entries, clamped to what
/// the device allows (said once on stderr when `--max-sge` asked for more). Returns the set and the entries used.
fn open_set(
    cfg: &VerbsConfig,
    ctx: &Context,
    send_wr: u32,
    send_sge: u32,
    recv_wr: u32,
    events: bool,
) -> Result<(QpSet, u32)> {
    let (dev, port) = device::open(&ctx.device)?;
    if send_wr as i32 > port.max_qp_wr {
        return Err(crate::error::usage(format!(
            "--inflight {send_wr}: {} allows at most {} work requests per queue pair",
            port.device, port.max_qp_wr
        )));
    }
    let device_sge = port.max_sge.max(1) as u32;
    if send_sge > device_sge {
        eprintln!(
            "--max-sge {send_sge}: {} allows at most {device_sge} scatter entries per work request; using {device_sge}",
            port.device
        );
    }
    let sge = send_sge.clamp(1, device_sge);
    Ok((QpSet::new(&dev, &port, cfg.qps, send_wr, sge, recv_wr, events)?, sge))
}

fn port_json(p: &PortInfo) -> serde_json::Value {
    serde_json::to_value(p).expect("port info serializes")
}

// ------------------------------------------------------------------------------------------------ receiver

pub struct VerbsTarget {
    // Drop order: the queue pairs and registrations before the buffer they point into.
    lander: Lander,
    poller: Poller,
    reg: Registration,
    set: QpSet,
    rep: u32,
    ack_timeout: u8,
    _buf: Arc<Buffer>,
}

impl VerbsTarget {
    pub fn open(cfg: &VerbsConfig, buf: Arc<Buffer>, ctx: &Context) -> Result<VerbsTarget> {
        // The receiver sleeps on a completion channel: it only needs the landing time (wake-up latency is tens of
        // µs), and a spinning receiver steals the cores that soft-RoCE, or a busy host, needs to move the data.
        let (mut set, _) = open_set(cfg, ctx, 1, 1, RECVS_PER_QP + 1, true)?;
        let chunk = mr::chunk_size(cfg.dst_mr_chunk.or(cfg.mr_chunk), set.port.max_mr_size);
        // The receiver allows remote writes, never remote reads.
        let reg = mr::register(&set.pd, &buf, buf.len() as u64, chunk, true)?;
        set.init(true)?;
        let lander = Lander::new(&set)?;
        let poller = Poller::new(&set);
        Ok(VerbsTarget { lander, poller, reg, set, rep: 0, ack_timeout: cfg.ack_timeout, _buf: buf })
    }
}

impl Target for VerbsTarget {
    fn offer(&self) -> serde_json::Value {
        serde_json::to_value(Offer {
            port: port_json(&self.set.port),
            endpoints: self.set.endpoints(),
            pieces: self.reg.pieces.clone(),
            reg_ms: self.reg.reg_ms,
            reg_method: self.reg.method.to_string(),
        })
        .expect("offer serializes")
    }

    fn accept(&mut self, answer: serde_json::Value) -> Result<()> {
        let a: Answer = serde_json::from_value(answer).context("the sender's verbs answer is malformed")?;
        self.set.connect(&a.endpoints, self.ack_timeout)
    }

    fn arm(&mut self, _size_bytes: u64) -> Result<()> {
        self.rep = self.rep.wrapping_add(1);
        self.lander.arm(self.rep);
        Ok(())
    }

    fn wait_landed(&mut self, timeout: Duration, control_ready: &mut dyn FnMut() -> bool) -> Result<Option<Instant>> {
        self.lander.wait(&self.set, &mut self.poller, timeout, control_ready)
    }
}

// ------------------------------------------------------------------------------------------------ sender

pub struct VerbsSource {
    poster: Poster,
    poller: Poller,
    reg: Option<Registration>,
    set: QpSet,
    remote: Vec<Piece>,
    cfg: VerbsConfig,
    chunk: u64,
    segs: Vec<Seg>,
    /// The work requests of the current transfer, gathered from `segs`.
    reqs: Vec<Req>,
    /// Scatter entries per work request: `--max-sge` clamped to the device for the paged layout, 1 for contiguous
    /// transfers (their writes are back to back on both sides, so gathering would only re-cut `--block-size`).
    max_sge: u32,
    rep: u32,
    stall_timeout: Duration,
    first_reg: (f64, String),
    receiver: VerbsReceiverDetail,
}

impl VerbsSource {
    pub fn connect(
        v: &VerbsConfig,
        cfg: &RunConfig,
        buf: &Buffer,
        offer: serde_json::Value,
        ctx: &Context,
    ) -> Result<VerbsSource> {
        let offer: Offer = serde_json::from_value(offer).context("the receiver's verbs offer is malformed")?;
        let v = v.clone();
        let want_sge = if cfg.paged.is_some() { v.max_sge } else { 1 };
        let (mut set, max_sge) = open_set(&v, ctx, v.inflight, want_sge, 1, v.cq_mode == CqMode::Event)?;
        let chunk = mr::chunk_size(v.mr_chunk, set.port.max_mr_size);
        // Registered once here; with --reg-per-rep again inside every rep (this first one is then the "cold" one).
        let reg = mr::register(&set.pd, buf, buf.len() as u64, chunk, false)?;
        let first_reg = (reg.reg_ms, reg.method.to_string());
        set.init(false)?;
        set.connect(&offer.endpoints, v.ack_timeout)?;
        let poller = Poller::new(&set);
        let receiver = VerbsReceiverDetail {
            port: offer.port,
            reg_ms: offer.reg_ms,
            reg_method: offer.reg_method,
            mr_pieces: offer.pieces.len(),
        };
        Ok(VerbsSource {
            poster: Poster::new(&v, max_sge),
            poller,
            reg: if v.reg_per_rep { None } else { Some(reg) },
            set,
            remote: offer.pieces,
            cfg: v,
            chunk,
            segs: Vec::new(),
            reqs: Vec::new(),
            max_sge,
            rep: 0,
            stall_timeout: ctx.timeouts.io,
            first_reg,
            receiver,
        })
    }
}

impl Source for VerbsSource {
    fn answer(&self) -> serde_json::Value {
        serde_json::to_value(Answer { endpoints: self.set.endpoints() }).expect("answer serializes")
    }

    fn describe(&self) -> TransportDetail {
        TransportDetail::Verbs(Box::new(VerbsDetail {
            sender: VerbsSenderDetail {
                port: self.set.port.clone(),
                qps: self.cfg.qps,
                max_sge: self.max_sge,
                mr_chunk: self.chunk,
                reg_ms: self.first_reg.0,
                reg_method: self.first_reg.1.clone(),
            },
            receiver: self.receiver.clone(),
        }))
    }

    fn transfer(&mut self, mem: &Buffer, writes: &[Write], hooks: &mut TransferHooks) -> Result<TransferTimes> {
        let started = Instant::now();
        let (reg, reg_ms) = match self.reg.take() {
            Some(r) => (r, None),
            None => {
                // --reg-per-rep: register what this rep sends, as an on-demand connector would, inside the timing.
                let len = writes.iter().map(|w| w.local_offset + w.len).max().unwrap_or(0);
                let r = mr::register(&self.set.pd, mem, len, self.chunk, false)?;
                let ms = r.reg_ms;
                (r, Some(ms))
            }
        };
        let max_len = self.set.port.max_msg_sz.max(4096) as u64;
        post::segments(writes, &reg.pieces, &self.remote, max_len, &mut self.segs)?;
        post::gather(&self.segs, self.max_sge, max_len, &mut self.reqs);
        self.rep = self.rep.wrapping_add(1);
        let outcome = self.poster.run(
            &self.set,
            &mut self.poller,
            &self.segs,
            &self.reqs,
            writes.len(),
            &self.cfg,
            self.rep,
            self.stall_timeout,
            hooks,
        );
        if !self.cfg.reg_per_rep {
            self.reg = Some(reg);
        }
        let (first_post, last) = outcome?;
        let first_post = if reg_ms.is_some() { started } else { first_post };
        // Reported when it differs from the writes: SGE gathering (fewer) or pieces split at MR or message-size
        // boundaries (more).
        let work_requests = (self.reqs.len() != writes.len()).then_some(self.reqs.len() as u64);
        let extras = TransferExtras { reg_ms, work_requests, staged: None };
        Ok(TransferTimes { extras, ..TransferTimes::new(first_post, last) })
    }
}
