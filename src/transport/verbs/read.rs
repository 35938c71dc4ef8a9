//! `--op read`: the decode side pulls, as vLLM's NixlConnector and Mooncake do. The sender registers its run
//! buffer for remote reads (that buffer only, for the run's life) and lends it; the receiver cuts each rep into the
//! same work requests a WRITE run posts (at most max_msg_sz each, up to `--max-sge` scatter entries when the
//! paged layout's sources are back to back) and posts them as RDMA READs into its own region, timing them on its
//! clock. Its landing is observed (it sees its own completions), and the rep's transfer time is the receiver's
//! ([`Target::posted_transfer`]), as for `--nixl-op read`.
//!
//! One device per end: rails are refused.

use super::cq::Poller;
use super::mr::{self, Piece, Registration};
use super::post::{self, Poster, RepWork, Segment, WriteRequest};
use super::qp::{rd_atom_limit, QpSet, RdAtomic, RD_ATOMIC};
use super::{open_set, CqMode, port_json, reg_gbps, Answer, Offer, RailOffer, VerbsConfig, VerbsOp};
use super::{VerbsDetail, VerbsReceiverDetail, VerbsSenderDetail};
use crate::mem::Buffer;
use crate::plan::{RunConfig, TransferPlan, Write};
use crate::transport::{Context, Source, Target, TransferHooks, TransferTimes, TransportDetail};
use anyhow::{anyhow, bail, Context as _, Result};
use serde::{Deserialize, Serialize};
use sideway::ibverbs::AccessFlags;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The sender's buffer as the receiver READs it: its pieces (with their rkeys), and how many READs each of its
/// queue pairs answers at once (its max_dest_rd_atomic).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Lent {
    pieces: Vec<Piece>,
    responder: u8,
}

/// Refuse more than one device on this end: a READ run is not striped.
fn one_rail(ctx: &Context) -> Result<Option<&str>> {
    match ctx.device.rails()[..] {
        [name] => Ok(name),
        _ => Err(crate::error::usage(format!(
            "--op read runs over one RDMA device per end, not rails ({}): give one -d device",
            ctx.device.label().unwrap_or_default()
        ))),
    }
}

/// How long the reader busy-polls for a completion before it sleeps on its completion channel (`--cq-mode poll`,
/// the default). A READ's completion comes from this host's device: with soft-RoCE that is this kernel's work
/// (softirq, ksoftirqd), which a reader spinning on the same core for the whole rep starved (half the bandwidth of
/// ib_read_bw in a two-core guest, and of this reader with `--cq-mode event`). Completions sooner than this, as on
/// hardware within a rep of a few hundred microseconds, are reaped as by pure polling.
const READ_SPIN: Duration = Duration::from_micros(200);

/// How long the reader busy-polls per wait under `mode` before it sleeps on its completion channel.
fn reader_spin(mode: CqMode) -> Duration {
    match mode {
        CqMode::Poll => READ_SPIN,
        CqMode::Event => Duration::ZERO,
    }
}

/// The requester's depth: what this device issues, at most what the sender's queue pairs answer.
fn initiator_depth(own_limit: i32, responder: u8) -> u8 {
    rd_atom_limit(own_limit).min(responder.max(1))
}

// ------------------------------------------------------------------------------------------------ receiver

/// The receiver of an `--op read` run: it posts the READs.
pub struct ReadTarget {
    // Drop order: the poster and registration before the queue pairs' protection domain (the poller holds its
    // completion queue, the registration its memory).
    poster: Poster,
    poller: Poller,
    reg: Registration,
    set: QpSet,
    cfg: VerbsConfig,
    run: RunConfig,
    max_sge: u32,
    /// The sender's pieces, from its answer.
    sender: Vec<Piece>,
    /// The rep (case, bytes) whose requests `segs` and `reqs` hold.
    case: Option<(usize, u64)>,
    writes: usize,
    segs: Vec<Segment>,
    reqs: Vec<WriteRequest>,
    armed: bool,
    /// The last rep's first post and last completion.
    last: Option<(Instant, Instant)>,
    _buf: Arc<Buffer>,
}

impl ReadTarget {
    pub fn open(cfg: &VerbsConfig, run: &RunConfig, buf: Arc<Buffer>, ctx: &Context) -> Result<ReadTarget> {
        let name = one_rail(ctx)?;
        let want_sge = if run.paged.is_some() { cfg.max_sge } else { 1 };
        // Always a completion channel: polling spins at most READ_SPIN before sleeping on it.
        let (mut set, max_sge) = open_set(cfg, ctx, name, cfg.inflight, want_sge, 1, CqMode::Event)?;
        let chunk = mr::chunk_size(cfg.dst_mr_chunk.or(cfg.mr_chunk), set.port.max_mr_size);
        // The reader's region: local access only, nothing remote may touch it.
        let reg = mr::register(&set.pd, &buf, buf.len() as u64, chunk, mr::Access::of(cfg, false))?;
        set.init(false)?;
        let poller = Poller::spinning_first(&set, reader_spin(cfg.cq_mode));
        Ok(ReadTarget {
            poster: Poster::new(cfg, max_sge),
            poller,
            reg,
            set,
            cfg: cfg.clone(),
            run: run.clone(),
            max_sge,
            sender: Vec::new(),
            case: None,
            writes: 0,
            segs: Vec::new(),
            reqs: Vec::new(),
            armed: false,
            last: None,
            _buf: buf,
        })
    }

    /// Cut case `case` into READs (once per case): the plan's writes turned around, this end's offset the local one.
    fn prepare(&mut self, case: usize, size_bytes: u64) -> Result<()> {
        if self.case == Some((case, size_bytes)) {
            return Ok(());
        }
        self.case = None;
        let plan = TransferPlan::for_rep(&self.run, case, size_bytes)?;
        let reads: Vec<Write> = plan
            .writes
            .iter()
            .map(|w| Write { local_offset: w.remote_offset, remote_offset: w.local_offset, len: w.len })
            .collect();
        let max_len = self.set.port.max_msg_sz.max(4096) as u64;
        post::segments(&reads, &self.reg.pieces, &self.sender, max_len, &mut self.segs)
            .context("--op read: cutting the rep into READs")?;
        post::gather(&self.segs, self.max_sge, max_len, &mut self.reqs);
        self.writes = reads.len();
        self.case = Some((case, size_bytes));
        Ok(())
    }
}

impl Target for ReadTarget {
    /// The queue pairs and the region's pieces without their keys: the sender only learns their sizes.
    fn offer(&self) -> serde_json::Value {
        let pieces = self.reg.pieces.iter().map(|p| Piece { key: 0, ..*p }).collect();
        let rail = RailOffer { port: port_json(&self.set.port), endpoints: self.set.endpoints(), pieces };
        serde_json::to_value(Offer { rails: vec![rail], reg_ms: self.reg.reg_ms, reg_method: self.reg.method })
            .expect("offer serializes")
    }

    fn accept(&mut self, answer: serde_json::Value) -> Result<()> {
        let a: Answer = serde_json::from_value(answer).context("the sender's verbs answer is malformed")?;
        let lent = a.lent.ok_or_else(|| anyhow!("the sender did not lend its buffer for --op read"))?;
        let [endpoints] = &a.rails[..] else {
            return Err(crate::error::usage("--op read runs over one RDMA device per end: give the sender one -d device"));
        };
        let responder = lent.responder;
        self.set.rd_atomic = RdAtomic { initiator: initiator_depth(self.set.port.max_qp_init_rd_atom, responder), responder: RD_ATOMIC };
        self.sender = lent.pieces;
        self.set.connect(endpoints, self.cfg.ack_timeout)
    }

    fn arm(&mut self, case: usize, size_bytes: u64) -> Result<()> {
        self.prepare(case, size_bytes)?;
        self.armed = true;
        Ok(())
    }

    /// Post this rep's READs and wait for their completions: landed at the last one.
    fn wait_landed(&mut self, timeout: Duration, control_ready: &mut dyn FnMut() -> bool) -> Result<Option<Instant>> {
        if !std::mem::take(&mut self.armed) {
            bail!("the verbs reader was asked to read without an armed rep");
        }
        let work = RepWork { segs: &self.segs, reqs: &self.reqs, writes: self.writes, imm: 0, op: VerbsOp::Read };
        let mut spoke = false;
        let outcome = {
            let mut peer = || {
                spoke = spoke || control_ready();
                spoke
            };
            let mut hooks = TransferHooks { done: &mut |_, _, _| {}, peer_failed: &mut peer };
            self.poster.run(&self.set, &mut self.poller, work, &self.cfg, timeout, &mut hooks)
        };
        match outcome {
            Ok((first, last)) => {
                self.last = Some((first, last));
                Ok(Some(last))
            }
            // The sender spoke (an Error) or hung up: its message is the story, which the caller reads.
            Err(_) if spoke => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn posted_transfer(&self) -> Option<(Instant, Instant)> {
        self.last
    }
}

// ------------------------------------------------------------------------------------------------ sender

/// The sender of an `--op read` run: it registers its buffer for remote reads and waits while the receiver reads.
pub struct LendSource {
    // Drop order: the registration (the only remotely readable memory) before the queue pairs' protection domain.
    reg: Registration,
    set: QpSet,
    cfg: VerbsConfig,
    chunk: u64,
    /// The receiver's queue pairs' READ depth and this end's answering depth.
    rd: RdAtomic,
    /// Scatter entries the receiver's READs use (its device's limit, as its offer says).
    max_sge: u32,
    receiver: VerbsReceiverDetail,
    buf_len: u64,
    connect_started: Instant,
    connect_ms: Option<f64>,
    max_inline_data: Option<u32>,
}

/// A number in the receiver's port description, as its offer sent it.
fn port_number(port: &serde_json::Value, key: &str) -> Option<i64> {
    port.get(key).and_then(serde_json::Value::as_i64)
}

impl LendSource {
    pub fn connect(
        v: &VerbsConfig,
        cfg: &RunConfig,
        buf: &Buffer,
        offer: serde_json::Value,
        ctx: &Context,
    ) -> Result<LendSource> {
        let connect_started = Instant::now();
        let offer: Offer = serde_json::from_value(offer).context("the receiver's verbs offer is malformed")?;
        let name = one_rail(ctx)?;
        let [remote] = &offer.rails[..] else {
            return Err(crate::error::usage("--op read runs over one RDMA device per end: give the receiver one -d device"));
        };
        let (mut set, _) = open_set(v, ctx, name, 1, 1, 1, v.cq_mode)?;
        let chunk = mr::chunk_size(v.mr_chunk, set.port.max_mr_size);
        // Remote reads on exactly this run's buffer, deregistered when the source is dropped at the run's end.
        let reg = mr::register(&set.pd, buf, buf.len() as u64, chunk, mr::Access::remote_readable(v))?;
        let responder = rd_atom_limit(set.port.max_qp_rd_atom);
        let reader_limit = port_number(&remote.port, "max_qp_init_rd_atom").unwrap_or(1) as i32;
        let rd = RdAtomic { initiator: initiator_depth(reader_limit, responder), responder };
        set.rd_atomic = RdAtomic { initiator: RD_ATOMIC, responder };
        set.init_with(AccessFlags::LocalWrite | AccessFlags::RemoteRead)?;
        set.connect(&remote.endpoints, v.ack_timeout)?;
        let want_sge = if cfg.paged.is_some() { v.max_sge } else { 1 };
        let reader_sge = port_number(&remote.port, "max_sge").unwrap_or(1).max(1) as u32;
        let receiver = VerbsReceiverDetail {
            port: remote.port.clone(),
            rails: Vec::new(),
            reg_ms: offer.reg_ms,
            reg_gbps: reg_gbps(remote.pieces.iter().map(|p| p.len).sum(), offer.reg_ms),
            reg_method: offer.reg_method,
            mr_pieces: remote.pieces.len(),
            // Both ends run the same configuration: this is how the reader waits.
            reader_spin_us: Some(reader_spin(v.cq_mode).as_micros() as u64),
        };
        let max_inline_data = set.max_inline_data().ok();
        Ok(LendSource {
            reg,
            set,
            cfg: v.clone(),
            chunk,
            rd,
            max_sge: want_sge.min(reader_sge),
            receiver,
            buf_len: buf.len() as u64,
            connect_started,
            connect_ms: None,
            max_inline_data,
        })
    }

    fn setup_ms(&self) -> f64 {
        (self.connect_started.elapsed().as_secs_f64() * 1e3 - self.reg.reg_ms).max(0.0)
    }
}

impl Source for LendSource {
    fn answer(&self) -> serde_json::Value {
        let lent = Lent { pieces: self.reg.pieces.clone(), responder: self.set.rd_atomic.responder };
        serde_json::to_value(Answer { rails: vec![self.set.endpoints()], lent: Some(lent) }).expect("answer serializes")
    }

    fn prepare(&mut self, _mem: &Buffer) -> Result<()> {
        self.connect_ms = Some(self.setup_ms());
        Ok(())
    }

    fn describe(&self) -> TransportDetail {
        let reg_ms = self.reg.reg_ms;
        TransportDetail::of(&VerbsDetail {
            sender: VerbsSenderDetail {
                port: self.set.port.clone(),
                rails: Vec::new(),
                qps: self.cfg.qps,
                max_sge: self.max_sge,
                mr_chunk: self.chunk,
                reg_ms,
                reg_gbps: reg_gbps(self.buf_len, reg_ms),
                reg_method: self.reg.method,
                connect_ms: self.connect_ms.unwrap_or_else(|| self.setup_ms()),
                relaxed_ordering: self.cfg.relaxed_ordering,
                odp: false,
                tclass: self.set.service.tclass,
                sl: self.set.service.sl,
                max_inline_data: self.max_inline_data,
                max_rd_atomic: self.rd.initiator,
                max_dest_rd_atomic: self.rd.responder,
                op: VerbsOp::Read,
            },
            receiver: self.receiver.clone(),
        })
    }

    /// Nothing to post: the receiver READs the rep between its RepReady and its RepDone, and times it; this end's
    /// buffer stays as filled until the RepDone arrives. The times are this end's call, not the transfer.
    fn transfer(&mut self, _mem: &Buffer, _writes: &[Write], _hooks: &mut TransferHooks) -> Result<TransferTimes> {
        let now = Instant::now();
        Ok(TransferTimes::new(now, now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_read_depth_is_the_smaller_of_what_the_reader_issues_and_the_sender_answers() {
        assert_eq!(initiator_depth(16, 128), 16);
        assert_eq!(initiator_depth(128, 16), 16);
        assert_eq!(initiator_depth(0, 0), 1, "the attributes take at least one");
        assert_eq!(initiator_depth(1000, 255), 255);
        assert_eq!(rd_atom_limit(-1), 1);
    }

    #[test]
    fn the_lent_buffer_travels_with_its_keys_and_depth() {
        let lent = Lent { pieces: vec![Piece { offset: 0, len: 4096, addr: 0x1000, key: 7 }], responder: 16 };
        let back: Lent = serde_json::from_value(serde_json::to_value(&lent).unwrap()).unwrap();
        assert_eq!((back.pieces[0].key, back.responder), (7, 16));
        // A write run's answer has no lent buffer, and reads as before.
        let a: Answer = serde_json::from_str(r#"{"rails":[[]]}"#).unwrap();
        assert!(a.lent.is_none());
    }
}
