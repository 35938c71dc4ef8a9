//! RDMA verbs: one-sided RDMA WRITEs over RoCE or InfiniBand (and GPUDirect RDMA for GPU buffers).
//!
//! The region is the receiver's buffer registered in pieces (address, length, rkey each); a write is one RDMA WRITE
//! work request (paged layout: writes whose destinations are back to back share one, gathered by an SGE list);
//! completion is a (selectively signaled) work completion; the receiver learns the rep landed from a WRITE_WITH_IMM
//! on every queue pair. With `--op read` (`read`) the roles of the work turn around: the sender lends its buffer
//! and the receiver posts the same requests as RDMA READs, timing them on its own clock. Built on `sideway` (which dlopens libibverbs, so kvxfer starts on hosts
//! without it) for setup, and on raw preallocated work request arrays for the hot path.

mod config;
mod cq;
pub mod device;
mod extras;
mod land;
mod mr;
mod pingpong;
mod post;
mod qp;
mod rails;
mod read;

use super::api::{HasKnobs, Context, Inventory, Landing, Source, Target, TransferHooks, TransferTimes, Transport};
use super::{DeviceChoice, TransportDetail, Unusable};
use crate::measure::{CaseExtras, ExtrasNote, ExtrasNotes, Fields, Warning};
use crate::mem::Buffer;
use crate::plan::{RunConfig, TransportConfig, Write};
use anyhow::{Context as _, Result};
pub use config::{CqMode, VerbsConfig, VerbsOp};
use cq::Poller;
use device::PortInfo;
use extras::RepExtras;
use land::{Lander, RECVS_PER_QP};
use mr::{Piece, RegMethod, Registration};
use qp::{Endpoint, QpSet, Service, RD_ATOMIC};
use rails::{RailRun, SendRail};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Mooncake's slice size: small enough to spread over queue pairs, large enough to keep the NIC busy.
pub const DEFAULT_BLOCK_SIZE: u64 = 64 << 10;

/// The size of one RDMA READ over a single queue pair when the user gives no block size. One queue pair's
/// responder answers its READs one after another and pays for each request, so 64 KiB READs leave it waiting on
/// that work: on soft-RoCE one queue pair read 64 MiB at 0.64–0.73× ib_read_bw in 64 KiB READs and 1.04–1.07× in
/// 1 MiB ones (three boots), as perftest itself reads (one READ per message). Several queue pairs answer small
/// READs side by side, and there 64 KiB read fastest (four: 1.45–1.69× at 64 MiB, against 1.27–1.44× at 256 KiB
/// and 1.31–1.42× at 1 MiB). See docs/benchmarks.md.
pub const ONE_QP_READ_SIZE: u64 = 1 << 20;

/// The default size of one RDMA READ over `qps` queue pairs (see [`ONE_QP_READ_SIZE`]).
pub fn read_block_size(qps: u32) -> u64 {
    if qps == 1 {
        ONE_QP_READ_SIZE
    } else {
        DEFAULT_BLOCK_SIZE
    }
}

/// The verbs transport, as the registry lists it: RDMA WRITEs into a registered region, landing seen by the
/// receiver in its WRITE_WITH_IMMs; it pins the memory it moves in this process.
pub struct Verbs;

impl HasKnobs for Verbs {
    type Knobs = VerbsConfig;
}

impl Transport for Verbs {
    fn default_block_size(&self, cfg: &TransportConfig) -> u64 {
        match cfg.knobs::<VerbsConfig>() {
            Ok(k) if k.op == VerbsOp::Read => read_block_size(k.qps),
            _ => DEFAULT_BLOCK_SIZE,
        }
    }

    /// Opening a device checks the library, its name, the port and the GID index at once.
    fn check_host(&self, devices: &[&DeviceChoice]) -> Result<()> {
        for d in devices {
            for name in d.rails() {
                device::open(d, name).map_err(|e| e.context("--transport verbs"))?;
            }
        }
        Ok(())
    }

    fn usable_here(&self) -> std::result::Result<(), Unusable> {
        device::usable()
    }

    fn check_devices(&self, named: &DeviceChoice) -> Result<()> {
        named.names.iter().try_for_each(|name| device::open(named, Some(name)).map(drop))
    }

    fn inventory(&self) -> Option<Inventory> {
        Some(device::inventory())
    }

    fn landing(&self, _cfg: &TransportConfig) -> Landing {
        Landing::Observed
    }

    fn pulls(&self, cfg: &TransportConfig) -> bool {
        cfg.knobs::<VerbsConfig>().is_ok_and(|k| k.op == VerbsOp::Read)
    }

    /// The roles turn round as they are: the sender's end opens a target on its own devices (its buffer registered
    /// for remote writes only) and serve's connects a source to it.
    fn reverses(&self) -> bool {
        true
    }

    /// With `--op read` the receiver posts the reads and times them on its clock; a reverse direction of READs would
    /// be posted by the sender after the receiver's rep had already ended.
    fn check_reverse(&self, cfg: &TransportConfig) -> Result<()> {
        if cfg.knobs::<VerbsConfig>()?.op == VerbsOp::Read {
            return Err(crate::error::usage(
                "--bidir sends RDMA WRITEs both ways; --op read pulls one way only: drop --op read or --bidir",
            ));
        }
        Ok(())
    }

    fn pins_host_memory(&self) -> bool {
        true
    }

    fn drives_rdma(&self, _cfg: &TransportConfig) -> bool {
        true
    }

    fn opens_rdma_devices(&self) -> bool {
        true
    }

    /// Its offer lists each rail's registered pieces of the region: the bytes every rail reaches.
    fn offered_region(&self, offer: &serde_json::Value) -> Option<u64> {
        let offer: Offer = serde_json::from_value(offer.clone()).ok()?;
        offer.rails.iter().map(|r| r.pieces.iter().fold(0u64, |sum, p| sum.saturating_add(p.len))).min()
    }

    fn open_target(&self, cfg: &RunConfig, buf: Arc<Buffer>, ctx: &Context) -> Result<Box<dyn Target>> {
        let knobs = cfg.transport.knobs::<VerbsConfig>()?;
        Ok(match knobs.op {
            VerbsOp::Write => Box::new(VerbsTarget::open(&knobs, buf, ctx)?),
            VerbsOp::Read => Box::new(read::ReadTarget::open(&knobs, cfg, buf, ctx)?),
        })
    }

    fn connect_source(
        &self,
        cfg: &RunConfig,
        buf: &Buffer,
        offer: serde_json::Value,
        ctx: &Context,
    ) -> Result<Box<dyn Source>> {
        let knobs = cfg.transport.knobs::<VerbsConfig>()?;
        Ok(match knobs.op {
            VerbsOp::Write => Box::new(VerbsSource::connect(&knobs, cfg, buf, offer, ctx)?),
            VerbsOp::Read => Box::new(read::LendSource::connect(&knobs, cfg, buf, offer, ctx)?),
        })
    }

    fn ping_pong(&self) -> Option<&dyn crate::transport::PingPong> {
        Some(&pingpong::VerbsPingPong)
    }

    fn summarize(&self, reps: &[&Fields]) -> (Fields, Vec<Warning>) {
        extras::summarize(reps)
    }
}

impl ExtrasNotes for Verbs {
    fn notes(&self, cases: &[CaseExtras<'_>]) -> Vec<ExtrasNote> {
        extras::notes(cases)
    }

    fn inline(&self, case: &CaseExtras<'_>) -> Vec<String> {
        extras::work_requests_text(case).into_iter().collect()
    }
}

/// `transport_detail` of a verbs run: each end's port and memory registration, as the sender saw them.
#[derive(Debug, Clone, Serialize)]
pub struct VerbsDetail {
    pub sender: VerbsSenderDetail,
    pub receiver: VerbsReceiverDetail,
}

#[derive(Debug, Clone, Serialize)]
pub struct VerbsSenderDetail {
    /// The (first) rail's port.
    pub port: PortInfo,
    /// Every rail's port, when the transfer is striped over several devices.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rails: Vec<PortInfo>,
    pub qps: u32,
    /// Scatter entries per work request in use (`--max-sge` clamped to the device; 1 for contiguous transfers).
    pub max_sge: u32,
    pub mr_chunk: u64,
    /// The first (the "cold") registration of the send buffer (on every rail, one after the other).
    pub reg_ms: f64,
    /// The bytes that registration covered (the buffer, once per rail) over its time, GB/s.
    pub reg_gbps: f64,
    pub reg_method: RegMethod,
    /// From opening the device and creating the queue pairs to the receiver's word that its queue pairs are
    /// ready to send (RTS), the exchange of addresses included and the registration excluded.
    pub connect_ms: f64,
    /// Registered with IBV_ACCESS_RELAXED_ORDERING (both ends; a device without it ignores the flag).
    pub relaxed_ordering: bool,
    /// Registered with IBV_ACCESS_ON_DEMAND and prefetched (both ends).
    pub odp: bool,
    /// The address vector's GRH traffic class and service level (both ends).
    pub tclass: u8,
    pub sl: u8,
    /// Bytes a send may carry inline on the queue pairs as created (no send is posted inline); absent where the
    /// provider does not say (ibv_query_qp failed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_inline_data: Option<u32>,
    /// RDMA READs a queue pair has outstanding / answers (max_rd_atomic, max_dest_rd_atomic).
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    /// `--op read`: the receiver READ each rep from this end's buffer (max_rd_atomic is then the receiver's queue
    /// pairs', max_dest_rd_atomic this end's). Written only for reads.
    #[serde(skip_serializing_if = "is_write")]
    pub op: VerbsOp,
}

fn is_write(op: &VerbsOp) -> bool {
    *op == VerbsOp::Write
}

/// What the receiver's offer said about its end.
#[derive(Debug, Clone, Serialize)]
pub struct VerbsReceiverDetail {
    /// Its (first rail's) port, as it described it.
    pub port: serde_json::Value,
    /// Every rail's port, when it has several.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rails: Vec<serde_json::Value>,
    pub reg_ms: f64,
    /// Its region (once per rail) over its registration time, GB/s.
    pub reg_gbps: f64,
    pub reg_method: RegMethod,
    pub mr_pieces: usize,
    /// `--op read`: the reader busy-polls at most this long per wait, then sleeps on its completion channel (0:
    /// it sleeps at once, `--cq-mode event`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reader_spin_us: Option<u64>,
}

/// One rail of the receiver: how the sender reaches it.
#[derive(Serialize, Deserialize)]
struct RailOffer {
    port: serde_json::Value,
    endpoints: Vec<Endpoint>,
    pieces: Vec<Piece>,
}

#[derive(Serialize, Deserialize)]
struct Offer {
    rails: Vec<RailOffer>,
    reg_ms: f64,
    reg_method: RegMethod,
}

#[derive(Serialize, Deserialize)]
struct Answer {
    /// The sender's queue pairs, rail by rail.
    rails: Vec<Vec<Endpoint>>,
    /// `--op read`: the sender's buffer as the receiver READs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    lent: Option<read::Lent>,
}

/// Open device `name` (see [`device::open`]) and `cfg.qps` queue pairs whose sends carry up to `send_sge` scatter
/// entries, clamped to what the device allows (said once on stderr when `--max-sge` asked for more). Returns the
/// set and the entries used.
fn open_set(
    cfg: &VerbsConfig,
    ctx: &Context,
    name: Option<&str>,
    send_wr: u32,
    send_sge: u32,
    recv_wr: u32,
    cq_mode: CqMode,
) -> Result<(QpSet, u32)> {
    let (dev, port) = device::open(&ctx.device, name)?;
    if send_wr as i32 > port.max_qp_wr {
        return Err(crate::error::usage(format!(
            "--inflight {send_wr}: {} allows at most {} work requests per queue pair",
            port.device, port.max_qp_wr
        )));
    }
    let device_sge = port.max_sge.max(1) as u32;
    if send_sge > device_sge {
        crate::errln!(
            "--max-sge {send_sge}: {} allows at most {device_sge} scatter entries per work request; using {device_sge}",
            port.device
        );
    }
    let sge = send_sge.clamp(1, device_sge);
    let mut set = QpSet::new(&dev, &port, cfg.qps, send_wr, sge, recv_wr, cq_mode)?;
    set.service = Service { tclass: cfg.tclass.unwrap_or(0), sl: cfg.sl.unwrap_or(0) };
    Ok((set, sge))
}

/// Refuse `--odp` on a device without on-demand paging for RDMA WRITEs, before registering.
fn check_odp(cfg: &VerbsConfig, port: &PortInfo) -> Result<()> {
    match device::odp_refusal(&port.device, port.odp_caps).filter(|_| cfg.odp) {
        Some(why) => Err(crate::error::usage(why)),
        None => Ok(()),
    }
}

/// Registration throughput: `bytes` registered in `ms`.
fn reg_gbps(bytes: u64, ms: f64) -> f64 {
    if ms > 0.0 {
        bytes as f64 / (ms * 1e-3) / 1e9
    } else {
        0.0
    }
}

fn port_json(p: &PortInfo) -> serde_json::Value {
    serde_json::to_value(p).expect("port info serializes")
}

/// Both ends must stripe over the same number of rails: rail k of the sender writes into rail k of the receiver.
fn check_rails(sender: usize, receiver: usize) -> Result<()> {
    if sender != receiver {
        return Err(crate::error::usage(format!(
            "the sender stripes over {sender} RDMA device(s) and the receiver over {receiver}; give both ends the same number of -d devices (rails)"
        )));
    }
    Ok(())
}

// ------------------------------------------------------------------------------------------------ receiver

/// One device of the receiver: its queue pairs, the region registered on it, and its landing watch.
struct RecvRail {
    // Drop order: the queue pairs before the registration they write into (the registration and the poller hold
    // the memory and the completion queue they use themselves).
    lander: Lander,
    poller: Poller,
    reg: Registration,
    set: QpSet,
}

pub struct VerbsTarget {
    rails: Vec<RecvRail>,
    rep: u32,
    ack_timeout: u8,
    _buf: Arc<Buffer>,
}

impl VerbsTarget {
    pub fn open(cfg: &VerbsConfig, buf: Arc<Buffer>, ctx: &Context) -> Result<VerbsTarget> {
        let mut rails = Vec::new();
        for name in ctx.device.rails() {
            // The receiver sleeps on a completion channel: it only needs the landing time (wake-up latency is tens
            // of µs), and a spinning receiver steals the cores that soft-RoCE, or a busy host, needs to move the
            // data.
            let (mut set, _) = open_set(cfg, ctx, name, 1, 1, RECVS_PER_QP + 1, CqMode::Event)?;
            check_odp(cfg, &set.port)?;
            let chunk = mr::chunk_size(cfg.dst_mr_chunk.or(cfg.mr_chunk), set.port.max_mr_size);
            // The receiver allows remote writes, never remote reads.
            let reg = mr::register(&set.pd, &buf, buf.len() as u64, chunk, mr::Access::of(cfg, true))?;
            set.init(true)?;
            let lander = Lander::new(&set)?;
            let poller = Poller::new(&set);
            rails.push(RecvRail { lander, poller, reg, set });
        }
        Ok(VerbsTarget { rails, rep: 0, ack_timeout: cfg.ack_timeout, _buf: buf })
    }
}

impl Target for VerbsTarget {
    fn offer(&self) -> serde_json::Value {
        let rails = self
            .rails
            .iter()
            .map(|r| RailOffer {
                port: port_json(&r.set.port),
                endpoints: r.set.endpoints(),
                pieces: r.reg.pieces.clone(),
            })
            .collect();
        serde_json::to_value(Offer {
            rails,
            reg_ms: self.rails.iter().map(|r| r.reg.reg_ms).sum(),
            reg_method: self.rails[0].reg.method,
        })
        .expect("offer serializes")
    }

    fn accept(&mut self, answer: serde_json::Value) -> Result<()> {
        let a: Answer = serde_json::from_value(answer).context("the sender's verbs answer is malformed")?;
        check_rails(a.rails.len(), self.rails.len())?;
        for (rail, endpoints) in self.rails.iter_mut().zip(&a.rails) {
            rail.set.connect(endpoints, self.ack_timeout)?;
        }
        Ok(())
    }

    fn arm(&mut self, _case: usize, _size_bytes: u64) -> Result<()> {
        self.rep = self.rep.wrapping_add(1);
        for rail in &mut self.rails {
            rail.lander.arm(self.rep);
        }
        Ok(())
    }

    /// Landed when every rail's queue pairs delivered the rep's immediate: the latest of their landing times.
    fn wait_landed(&mut self, timeout: Duration, control_ready: &mut dyn FnMut() -> bool) -> Result<Option<Instant>> {
        if let [rail] = &mut self.rails[..] {
            return rail.lander.wait(&rail.set, &mut rail.poller, timeout, control_ready);
        }
        let deadline = Instant::now() + timeout;
        let mut landed: Vec<Option<Instant>> = vec![None; self.rails.len()];
        loop {
            for (rail, at) in self.rails.iter_mut().zip(&mut landed) {
                if at.is_none() {
                    // A short look at each rail in turn, so one rail's landing is seen within a millisecond.
                    *at = rail.lander.poll(&rail.set, &mut rail.poller, Duration::from_millis(1))?;
                }
            }
            if landed.iter().all(Option::is_some) {
                return Ok(landed.into_iter().flatten().max());
            }
            if control_ready() {
                return Ok(None);
            }
            if Instant::now() >= deadline {
                let waiting: Vec<&str> = self
                    .rails
                    .iter()
                    .zip(&landed)
                    .filter(|(_, at)| at.is_none())
                    .map(|(r, _)| r.set.port.device.as_str())
                    .collect();
                anyhow::bail!(
                    "rail(s) {} did not signal the end of the rep within --io-timeout ({:.0} s)",
                    waiting.join(", "),
                    timeout.as_secs_f64()
                );
            }
        }
    }
}

// ------------------------------------------------------------------------------------------------ sender

pub struct VerbsSource {
    rails: Vec<SendRail>,
    cfg: VerbsConfig,
    rep: u32,
    stall_timeout: Duration,
    receiver: VerbsReceiverDetail,
    buf_len: u64,
    /// When connecting began, and how long it took once the receiver said its queue pairs were ready.
    connect_started: Instant,
    connect_ms: Option<f64>,
    max_inline_data: Option<u32>,
}

impl VerbsSource {
    /// Connection setup so far: since connecting began, less the registrations done meanwhile.
    fn setup_ms(&self) -> f64 {
        let reg: f64 = self.rails.iter().map(|r| r.first_reg.0).sum();
        (self.connect_started.elapsed().as_secs_f64() * 1e3 - reg).max(0.0)
    }
}

impl VerbsSource {
    pub fn connect(
        v: &VerbsConfig,
        cfg: &RunConfig,
        buf: &Buffer,
        offer: serde_json::Value,
        ctx: &Context,
    ) -> Result<VerbsSource> {
        let connect_started = Instant::now();
        let offer: Offer = serde_json::from_value(offer).context("the receiver's verbs offer is malformed")?;
        let names = ctx.device.rails();
        check_rails(names.len(), offer.rails.len())?;
        let want_sge = if cfg.paged.is_some() { v.max_sge } else { 1 };
        let mut rails = Vec::new();
        for (name, remote) in names.into_iter().zip(&offer.rails) {
            rails.push(SendRail::connect(v, ctx, name, want_sge, buf, remote)?);
        }
        let receiver = VerbsReceiverDetail {
            port: offer.rails[0].port.clone(),
            rails: if offer.rails.len() > 1 {
                offer.rails.iter().map(|r| r.port.clone()).collect()
            } else {
                Vec::new()
            },
            reg_ms: offer.reg_ms,
            reg_gbps: reg_gbps(offer.rails.iter().flat_map(|r| &r.pieces).map(|p| p.len).sum(), offer.reg_ms),
            reg_method: offer.reg_method,
            mr_pieces: offer.rails[0].pieces.len(),
            reader_spin_us: None,
        };
        let max_inline_data = rails[0].set.max_inline_data().ok();
        Ok(VerbsSource {
            rails,
            cfg: v.clone(),
            rep: 0,
            stall_timeout: ctx.timeouts.io,
            receiver,
            buf_len: buf.len() as u64,
            connect_started,
            connect_ms: None,
            max_inline_data,
        })
    }
}

impl Source for VerbsSource {
    fn answer(&self) -> serde_json::Value {
        serde_json::to_value(Answer { rails: self.rails.iter().map(|r| r.set.endpoints()).collect(), lent: None })
            .expect("answer serializes")
    }

    /// Called once the receiver's queue pairs are ready: the connection's setup ends here.
    fn prepare(&mut self, _mem: &Buffer) -> Result<()> {
        self.connect_ms = Some(self.setup_ms());
        Ok(())
    }

    fn describe(&self) -> TransportDetail {
        let first = &self.rails[0];
        let striped = self.rails.len() > 1;
        let reg_ms: f64 = self.rails.iter().map(|r| r.first_reg.0).sum();
        TransportDetail::of(&VerbsDetail {
            sender: VerbsSenderDetail {
                port: first.set.port.clone(),
                rails: if striped { self.rails.iter().map(|r| r.set.port.clone()).collect() } else { Vec::new() },
                qps: self.cfg.qps,
                max_sge: first.max_sge,
                mr_chunk: first.chunk,
                reg_ms,
                reg_gbps: reg_gbps(self.buf_len * self.rails.len() as u64, reg_ms),
                reg_method: first.first_reg.1,
                connect_ms: self.connect_ms.unwrap_or_else(|| self.setup_ms()),
                relaxed_ordering: self.cfg.relaxed_ordering,
                odp: self.cfg.odp,
                tclass: first.set.service.tclass,
                sl: first.set.service.sl,
                max_inline_data: self.max_inline_data,
                max_rd_atomic: RD_ATOMIC,
                max_dest_rd_atomic: RD_ATOMIC,
                op: VerbsOp::Write,
            },
            receiver: self.receiver.clone(),
        })
    }

    fn transfer(&mut self, mem: &Buffer, writes: &[Write], hooks: &mut TransferHooks) -> Result<TransferTimes> {
        self.rep = self.rep.wrapping_add(1);
        let run = RailRun { cfg: &self.cfg, rep: self.rep, stall_timeout: self.stall_timeout };
        if let [rail] = &mut self.rails[..] {
            let t = rail.transfer(mem, writes, &run, hooks)?;
            let work_requests = (t.work_requests != writes.len()).then_some(t.work_requests as u64);
            let reg_gbps = t.reg_ms.map(|ms| reg_gbps(t.reg_bytes, ms));
            let extras = RepExtras { reg_ms: t.reg_ms, reg_gbps, work_requests, rails: None };
            return Ok(TransferTimes::new(t.first_post, t.last).with_extras(&extras));
        }
        rails::striped(&mut self.rails, mem, writes, &run, hooks)
    }
}
