//! Verbs' ping-pong for `kvxfer latency`, as `ib_write_lat` runs it: each end RDMA-WRITEs the message into the
//! other's registered buffer and spins on the last byte of its own buffer until the other's message lands there,
//! then answers. Messages up to `--inline` bytes (default: the most the device's queue pair takes) go inline, copied
//! into the work request at post time, so the NIC does not read them from memory.
//!
//! Arrival is a mark in the last byte: message `seq` carries `seq % 255 + 1`, never 0, and the receiving end clears
//! the byte to 0 once it has seen the mark and before it answers, so a byte left over from an earlier message can
//! never pass for the next one. Every other byte of every message is 0 (the sender's buffer holds only the current
//! size's mark), so a byte of a larger message never leaves a mark where a smaller one is awaited. The buffers are
//! registered without relaxed ordering: polling the last byte relies on it landing after the rest.
//!
//! With `--write-with-imm` each message is an RDMA WRITE with immediate (the sequence number), the same bytes on
//! the wire with the immediate added, and the receiving end learns of it from the receive completion the immediate
//! consumes instead of from the last byte; a few receives stay posted, one reposted per message.

use super::cq::Poller;
use super::device::{self, wc_status_text, PortInfo};
use super::mr::{self, Access, Registration};
use super::qp::{Endpoint, QpSet, Service};
use super::{port_json, VerbsConfig};
use crate::mem::{Buffer, MemKind};
use crate::plan::latency::LatencyPlan;
use crate::plan::sizes::format_size;
use crate::plan::TransportConfig;
use crate::transport::api::{Context, PingEnd, PingPong};
use anyhow::{anyhow, bail, Context as _, Result};
use rdma_mummy_sys::{ibv_post_recv, ibv_post_send, ibv_recv_wr, ibv_send_wr, ibv_sge, ibv_wr_opcode};
use serde::{Deserialize, Serialize};
use sideway::ibverbs::device_context::DeviceContext;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Sends a queue pair has room for; completions are asked for every [`SIGNAL_EVERY`] and reaped well before then.
const SEND_WR: u32 = 64;
const SIGNAL_EVERY: u64 = 16;
/// The largest inline request the limit search tries (no device known to us takes more than about 1 KiB).
const MOST_INLINE_TRIED: u32 = 4096;
/// The largest message: a ping-pong is for small ones (as tcp's).
const MOST: u64 = 1 << 30;
/// Spins on the mark between looks at the completion queue and the clock.
const SPINS_PER_LOOK: u32 = 1 << 10;
/// Receives kept posted with `--write-with-imm` (one is consumed per message; the ends alternate, so one would do).
const RECV_WR: u32 = 16;
/// Set in a receive's work request id, so that its completion is told from a write's.
const RECV_TAG: u64 = 1 << 63;
const IBV_WC_RECV_RDMA_WITH_IMM: u32 = 129;
const IBV_SEND_SIGNALED: u32 = 2;
const IBV_SEND_INLINE: u32 = 8;

/// Verbs' ping-pong, as the registry hands it out.
pub struct VerbsPingPong;

impl PingPong for VerbsPingPong {
    fn check(&self, plan: &LatencyPlan) -> Result<()> {
        if plan.busy_poll {
            return Err(crate::error::usage(
                "--busy-poll sets how tcp waits for a message; verbs always spins on its buffer's last byte: leave it out",
            ));
        }
        Ok(())
    }

    fn open_responder(
        &self,
        cfg: &TransportConfig,
        plan: &LatencyPlan,
        max_size: u64,
        _mem: crate::mem::MemKind,
        ctx: &Context,
    ) -> Result<Box<dyn PingEnd>> {
        Ok(Box::new(VerbsPingEnd::open(cfg, plan, max_size, ctx, "the latency client")?))
    }

    fn connect_initiator(
        &self,
        cfg: &TransportConfig,
        plan: &LatencyPlan,
        max_size: u64,
        offer: serde_json::Value,
        ctx: &Context,
    ) -> Result<Box<dyn PingEnd>> {
        let mut end = VerbsPingEnd::open(cfg, plan, max_size, ctx, "the receiver")?;
        end.connect(offer)?;
        Ok(Box::new(end))
    }
}

/// What the other end needs: the queue pair to connect to and where to write.
#[derive(Serialize, Deserialize)]
struct Hello {
    port: serde_json::Value,
    endpoint: Endpoint,
    addr: u64,
    rkey: u32,
    len: u64,
}

/// How this end ran, for `transport_detail`.
#[derive(Serialize)]
struct Detail {
    /// `write` (RDMA WRITE, arrival seen by polling the last byte: `wait` "poll last byte") or `write_with_imm`
    /// (arrival seen in a receive completion: `wait` "receive completion").
    op: &'static str,
    wait: &'static str,
    /// Messages of this many bytes or fewer went inline.
    inline: u32,
    /// The most bytes this device's queue pair takes inline: the largest `max_inline_data` ibv_create_qp granted.
    max_inline_data: u32,
    port: PortInfo,
    peer_port: Option<serde_json::Value>,
    tclass: u8,
    sl: u8,
    relaxed_ordering: bool,
}

struct VerbsPingEnd {
    // Drop order, as the sender's rails: the poller and registrations before the set whose protection domain they
    // use; the registrations hold their buffers' memory themselves.
    poller: Poller,
    send_reg: Registration,
    recv_reg: Registration,
    set: QpSet,
    /// The other end's buffer once connected: address and rkey.
    remote: Option<(u64, u32)>,
    peer_port: Option<serde_json::Value>,
    // What the NIC reads from (`send`) and writes into (`recv`): only ever touched through `send_at`/`recv_at`.
    send: Buffer,
    recv: Buffer,
    len: u64,
    inline: u32,
    limit: u32,
    /// The size of the last message sent, whose mark the send buffer still holds.
    last_size: usize,
    /// Messages go as RDMA WRITE with immediate, awaited as receive completions.
    imm: bool,
    /// The immediate of a message whose receive completion was reaped before it was awaited.
    arrived: Option<u32>,
    posted: u64,
    completed: u64,
    /// The other end, as errors name it.
    peer: &'static str,
    ack_timeout: u8,
    io_timeout: Duration,
}

// SAFETY: the raw addresses this end uses (`Buffer::host_ptr` of `send` and `recv`, the queue pair and completion
// queue behind `set` and `poller`) point into memory and verbs objects it owns and that move with it; libibverbs'
// post and poll calls are thread-safe.
unsafe impl Send for VerbsPingEnd {}

impl VerbsPingEnd {
    fn open(
        cfg: &TransportConfig,
        plan: &LatencyPlan,
        max_size: u64,
        ctx: &Context,
        peer: &'static str,
    ) -> Result<VerbsPingEnd> {
        let v = cfg.knobs::<VerbsConfig>()?;
        let rails = ctx.device.rails();
        if rails.len() != 1 {
            return Err(crate::error::usage(format!(
                "latency runs over one RDMA device; -d names {}: give one (rails stripe transfers, not ping-pongs)",
                rails.len()
            )));
        }
        let (dev, port) = device::open(&ctx.device, rails[0])?;
        let chunk = mr::chunk_size(v.mr_chunk, port.max_mr_size);
        let len = message_len(max_size, &port, chunk)?;
        let limit = inline_limit(&dev, &port)?;
        let inline = plan.inline.unwrap_or(limit);
        if inline > limit {
            return Err(crate::error::usage(format!(
                "--inline {inline}: {} takes at most {limit} bytes inline (its queue pairs' max_inline_data); give --inline {limit} or less",
                port.device
            )));
        }
        let recv_wr = if plan.write_with_imm { RECV_WR } else { 1 };
        let mut set = QpSet::inline(&dev, &port, (SEND_WR, recv_wr), inline)?;
        set.service = Service { tclass: v.tclass.unwrap_or(0), sl: v.sl.unwrap_or(0) };
        let (send, recv) = (Buffer::alloc(MemKind::Host, len, false)?, Buffer::alloc(MemKind::Host, len, false)?);
        let access = |remote_write| Access { remote_write, remote_read: false, relaxed_ordering: false, odp: false };
        let send_reg = mr::register(&set.pd, &send, len, chunk, access(false))?;
        let recv_reg = mr::register(&set.pd, &recv, len, chunk, access(true))?;
        set.init(true)?;
        if plan.write_with_imm {
            (0..RECV_WR).try_for_each(|_| post_recv(&set))?;
        }
        Ok(VerbsPingEnd {
            poller: Poller::new(&set),
            send_reg,
            recv_reg,
            set,
            remote: None,
            peer_port: None,
            send,
            recv,
            len,
            inline,
            limit,
            last_size: 0,
            imm: plan.write_with_imm,
            arrived: None,
            posted: 0,
            completed: 0,
            peer,
            ack_timeout: v.ack_timeout,
            io_timeout: ctx.timeouts.io,
        })
    }

    /// Connect the queue pair to the other end's, from its hello.
    fn connect(&mut self, hello: serde_json::Value) -> Result<()> {
        let h: Hello = serde_json::from_value(hello)
            .with_context(|| format!("{}'s verbs ping-pong hello is malformed", self.peer))?;
        if h.len < self.len {
            bail!("{}'s buffer holds {} bytes, less than the largest message ({})", self.peer, h.len, self.len);
        }
        self.set.connect(std::slice::from_ref(&h.endpoint), self.ack_timeout)?;
        self.remote = Some((h.addr, h.rkey));
        self.peer_port = Some(h.port);
        Ok(())
    }

    /// Byte `i` of the send buffer, as a raw pointer.
    fn send_at(&self, i: usize) -> *mut u8 {
        let base = self.send.host_ptr().expect("the ping-pong buffers are host memory");
        // SAFETY: every caller passes i < size <= len, the buffer's length (checked by `ping`/`pong`).
        unsafe { base.add(i) }
    }

    /// Byte `i` of the receive buffer, as a raw pointer.
    fn recv_at(&self, i: usize) -> *mut u8 {
        let base = self.recv.host_ptr().expect("the ping-pong buffers are host memory");
        // SAFETY: as `send_at`.
        unsafe { base.add(i) }
    }

    /// RDMA-WRITE message `seq` of `size` bytes into the other end's buffer (inline when small enough).
    fn send_message(&mut self, size: usize, seq: u64) -> Result<()> {
        let (raddr, rkey) = self.remote.ok_or_else(|| anyhow!("the ping-pong sent before it was connected"))?;
        if self.last_size != size {
            if self.last_size > 0 {
                // SAFETY: the NIC has read the last message (the other end answered it, or the run moved on to
                // this size after its answer), so nothing reads the byte while it is written; no reference to the
                // buffer's bytes exists.
                unsafe { self.send_at(self.last_size - 1).write_volatile(0) };
            }
            self.last_size = size;
        }
        // SAFETY: as above: the previous message of this size has been answered, so the NIC is done reading it.
        unsafe { self.send_at(size - 1).write_volatile(mark(seq)) };
        self.make_room()?;
        let signaled = self.posted % SIGNAL_EVERY == SIGNAL_EVERY - 1;
        let piece = self.send_reg.pieces[0];
        let mut sge = ibv_sge { addr: piece.addr, length: size as u32, lkey: piece.key };
        // SAFETY: ibv_send_wr is a plain C struct; zero is a valid starting value.
        let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = self.posted;
        if self.imm {
            wr.opcode = ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM;
            wr.imm_data_invalidated_rkey_union.imm_data = (seq as u32).to_be();
        } else {
            wr.opcode = ibv_wr_opcode::IBV_WR_RDMA_WRITE;
        }
        let inline = if size as u64 <= u64::from(self.inline) { IBV_SEND_INLINE } else { 0 };
        wr.send_flags = inline | if signaled { IBV_SEND_SIGNALED } else { 0 };
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.wr.rdma.remote_addr = raddr;
        wr.wr.rdma.rkey = rkey;
        let mut bad: *mut ibv_send_wr = std::ptr::null_mut();
        // SAFETY: the queue pair is live (owned by `self.set`); `wr` is one work request (next is NULL) whose one
        // scatter entry, on the stack for the call, names `size` bytes of the registered send buffer (size <= len,
        // one piece: `message_len`); inline sends are at most the queue pair's inline limit.
        let rc = unsafe { ibv_post_send(self.set.raw_qp(0).as_ptr(), &mut wr, &mut bad) };
        if rc != 0 {
            bail!("ibv_post_send failed: {}", std::io::Error::from_raw_os_error(rc));
        }
        self.posted += 1;
        Ok(())
    }

    /// Spin until message `seq` of `size` bytes has landed, then make ready for the next.
    fn await_message(&mut self, size: usize, seq: u64) -> Result<()> {
        if self.imm {
            self.await_completion(seq)
        } else {
            self.await_mark(size, seq)
        }
    }

    /// Spin on the completion queue until message `seq`'s receive completion, then post a receive in its place.
    fn await_completion(&mut self, seq: u64) -> Result<()> {
        // The clock is read only once the wait has spun a while: a message that is already on its way is awaited
        // without it, as perftest awaits one.
        let mut deadline = None;
        let mut spins = 0u32;
        loop {
            if let Some(imm) = self.arrived.take() {
                if imm != seq as u32 {
                    bail!("{} sent message {imm} where {} was due; the ping-pong lost step", self.peer, seq as u32);
                }
                return post_recv(&self.set);
            }
            self.reap()?;
            spins = spins.wrapping_add(1);
            if spins % SPINS_PER_LOOK == 0 && past(&mut deadline, self.io_timeout) {
                bail!(
                    "{} sent no message within --io-timeout ({:.0} s); did it stop?",
                    self.peer,
                    self.io_timeout.as_secs_f64()
                );
            }
        }
    }

    /// Spin until message `seq` of `size` bytes has landed (its mark in the last byte), then clear the mark.
    fn await_mark(&mut self, size: usize, seq: u64) -> Result<()> {
        let (want, at) = (mark(seq), self.recv_at(size - 1));
        let mut deadline = None;
        let mut spins = 0u32;
        loop {
            // SAFETY: `at` lies inside the receive buffer, which the NIC writes: a volatile load of one byte, no
            // reference to the bytes is ever made.
            let got = unsafe { at.read_volatile() };
            if got == want {
                break;
            }
            if got != 0 {
                bail!("{} sent message mark {got} where {want} was due; the ping-pong lost step", self.peer);
            }
            spins = spins.wrapping_add(1);
            if spins % SPINS_PER_LOOK == 0 {
                self.reap()?;
                if past(&mut deadline, self.io_timeout) {
                    bail!(
                        "{} sent no message within --io-timeout ({:.0} s); did it stop?",
                        self.peer,
                        self.io_timeout.as_secs_f64()
                    );
                }
            }
            std::hint::spin_loop();
        }
        // SAFETY: the other end writes this buffer again only after this end answers, which is after this store.
        unsafe { at.write_volatile(0) };
        Ok(())
    }

    /// Take the completions there are now, keeping a message's receive completion for [`Self::await_completion`]; a
    /// failed write or receive ends the run.
    fn reap(&mut self) -> Result<()> {
        let mut done = self.completed;
        for wc in self.poller.wait(Duration::ZERO)? {
            if wc.wr_id & RECV_TAG != 0 {
                if wc.status != 0 {
                    let why = wc_status_text(wc.status);
                    bail!("receiving {}'s RDMA WRITE with immediate failed: {why} (vendor error {:#x})", self.peer, wc.vendor_err);
                }
                if wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM {
                    bail!("a receive completed with opcode {} where an RDMA WRITE with immediate was due", wc.opcode);
                }
                // SAFETY: for RECV_RDMA_WITH_IMM completions the union holds the immediate.
                let imm = u32::from_be(unsafe { wc.imm_data_invalidated_rkey_union.imm_data });
                if let Some(earlier) = self.arrived.replace(imm) {
                    bail!("{} sent message {imm} before this end answered message {earlier}; the ping-pong lost step", self.peer);
                }
                continue;
            }
            if wc.status != 0 {
                bail!("RDMA WRITE to {} failed: {} (vendor error {:#x})", self.peer, wc_status_text(wc.status), wc.vendor_err);
            }
            done = done.max(wc.wr_id + 1);
        }
        self.completed = done;
        Ok(())
    }

    /// Wait, when the send queue is nearly full, until a signaled write completes.
    fn make_room(&mut self) -> Result<()> {
        let mut deadline = None;
        while self.posted - self.completed >= u64::from(SEND_WR) - SIGNAL_EVERY {
            self.reap()?;
            if past(&mut deadline, self.io_timeout) {
                bail!("no RDMA completion within --io-timeout; {} or the path stopped answering", self.peer);
            }
        }
        Ok(())
    }

    fn check_size(&self, size: usize) -> Result<()> {
        if size == 0 || size as u64 > self.len {
            bail!("a message of {size} bytes is outside the agreed 1 to {} bytes", self.len);
        }
        Ok(())
    }
}

/// Whether a wait that first looked at the clock now (setting `deadline` then) has run `timeout` past it.
fn past(deadline: &mut Option<Instant>, timeout: Duration) -> bool {
    let now = Instant::now();
    now > *deadline.get_or_insert(now + timeout)
}

impl PingEnd for VerbsPingEnd {
    fn hello(&self) -> serde_json::Value {
        let piece = self.recv_reg.pieces[0];
        let endpoint = self.set.endpoints().remove(0);
        let hello = Hello { port: port_json(&self.set.port), endpoint, addr: piece.addr, rkey: piece.key, len: self.len };
        serde_json::to_value(hello).expect("hello serializes")
    }

    fn finish(&mut self, peer: serde_json::Value) -> Result<()> {
        self.connect(peer)
    }

    fn ping(&mut self, size: usize, seq: u64) -> Result<()> {
        self.check_size(size)?;
        self.send_message(size, seq)?;
        self.await_message(size, seq)
    }

    fn pong(&mut self, size: usize, seq: u64) -> Result<()> {
        self.check_size(size)?;
        self.await_message(size, seq)?;
        self.send_message(size, seq)
    }

    fn describe(&self) -> serde_json::Value {
        let service = self.set.service;
        let (op, wait) = if self.imm { ("write_with_imm", "receive completion") } else { ("write", "poll last byte") };
        let detail = Detail {
            op,
            wait,
            inline: self.inline,
            max_inline_data: self.limit,
            port: self.set.port.clone(),
            peer_port: self.peer_port.clone(),
            tclass: service.tclass,
            sl: service.sl,
            relaxed_ordering: false,
        };
        serde_json::to_value(detail).expect("detail serializes")
    }
}

/// Post one receive on the ping-pong's queue pair, for a WRITE with immediate to consume.
fn post_recv(set: &QpSet) -> Result<()> {
    // SAFETY: ibv_recv_wr is a plain C struct; zero = no scatter entries, no next.
    let mut wr: ibv_recv_wr = unsafe { std::mem::zeroed() };
    wr.wr_id = RECV_TAG;
    let mut bad: *mut ibv_recv_wr = std::ptr::null_mut();
    // SAFETY: the queue pair is live (owned by `set`) and at least in INIT; one receive with no scatter entries (a
    // WRITE with immediate consumes it without writing into it), next NULL.
    let rc = unsafe { ibv_post_recv(set.raw_qp(0).as_ptr(), &mut wr, &mut bad) };
    if rc != 0 {
        bail!("ibv_post_recv on the ping-pong's queue pair failed: {}", std::io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// The mark message `seq` carries in its last byte: never 0 (a cleared byte), never the previous message's.
fn mark(seq: u64) -> u8 {
    (seq % 255) as u8 + 1
}

/// Each buffer's length: the largest message, refused where it cannot be one RDMA WRITE from one memory region.
fn message_len(max_size: u64, port: &PortInfo, chunk: u64) -> Result<u64> {
    let most = MOST.min(u64::from(port.max_msg_sz)).min(chunk);
    if max_size == 0 || max_size > most {
        return Err(crate::error::usage(format!(
            "latency messages over verbs are 1 B to {} on {} (one RDMA WRITE from one memory region); {} asked",
            format_size(most),
            port.device,
            format_size(max_size)
        )));
    }
    Ok(max_size)
}

/// The most bytes a queue pair of this device carries inline: the largest `max_inline_data` that ibv_create_qp
/// takes (providers refuse a larger request, and may grant more than asked), found by bisection. The device has no
/// attribute that says.
fn inline_limit(dev: &Arc<DeviceContext>, port: &PortInfo) -> Result<u32> {
    let grants = |n: u32| QpSet::inline(dev, port, (SEND_WR, 1), n).map(|set| set.max_inline_data().unwrap_or(n).max(n));
    // A queue pair that cannot be created at all is an error of its own, not a limit.
    let floor = grants(0)?;
    if let Ok(g) = grants(MOST_INLINE_TRIED) {
        return Ok(g);
    }
    let (mut taken, mut refused) = (floor.min(MOST_INLINE_TRIED - 1), MOST_INLINE_TRIED);
    while refused - taken > 1 {
        let mid = taken + (refused - taken) / 2;
        match grants(mid) {
            Ok(g) => taken = g.clamp(mid, refused - 1),
            Err(_) => refused = mid,
        }
    }
    Ok(taken)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_are_never_zero_and_never_repeat_back_to_back() {
        let marks: Vec<u8> = (0..2000).map(mark).collect();
        assert!(marks.iter().all(|&m| m != 0));
        assert!(marks.windows(2).all(|w| w[0] != w[1]));
        assert_eq!((mark(0), mark(254), mark(255)), (1, 255, 1));
    }
}
