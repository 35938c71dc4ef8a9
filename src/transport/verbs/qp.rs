//! Queue pairs: one protection domain, one completion queue shared by N RC queue pairs, and the INIT → RTR → RTS
//! walk with the peer's numbers. sideway does the setup; the hot path (posting, polling) lives in `post.rs` and
//! `land.rs` on preallocated raw arrays.

use super::device::{gid_from, PortInfo};
use super::CqMode;
use anyhow::{bail, Context as _, Result};
use serde::{Deserialize, Serialize};
use sideway::ibverbs::address::AddressHandleAttribute;
use sideway::ibverbs::completion::{BasicCompletionQueue, CompletionChannel, GenericCompletionQueue};
use sideway::ibverbs::device_context::{DeviceContext, Mtu};
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{
    GenericQueuePair, QueuePair, QueuePairAttribute, QueuePairAttributeMask, QueuePairState,
};
use sideway::ibverbs::AccessFlags;
use std::ptr::NonNull;
use std::sync::Arc;

/// Transport retries before a queue pair gives up. A dead peer is noticed sooner through the control connection
/// (the sender watches it while posting), so this only has to ride out packet loss.
const RETRY_COUNT: u8 = 7;

/// What the peer needs to connect one queue pair to ours.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Endpoint {
    pub qpn: u32,
    pub psn: u32,
    pub lid: u16,
    pub gid: [u8; 16],
    /// ibv_mtu enum of the port's active MTU.
    pub mtu: u32,
}

/// The class of service in the queue pairs' address vector: the GRH traffic class (`--tclass`: DSCP and ECN on
/// RoCE v2) and the service level (`--sl`), as perftest's `--tclass` and `-S` set them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Service {
    pub tclass: u8,
    pub sl: u8,
}

/// RDMA READs each queue pair has outstanding (max_rd_atomic) or answers (max_dest_rd_atomic): WRITEs need none
/// but the verbs attributes take at least one.
pub const RD_ATOMIC: u8 = 1;

/// RDMA READs a queue pair may have outstanding as the requester (max_rd_atomic, set at RTR → RTS) and answer as
/// the responder (max_dest_rd_atomic, set at INIT → RTR).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RdAtomic {
    pub initiator: u8,
    pub responder: u8,
}

impl Default for RdAtomic {
    /// What WRITEs need: none, but the attributes take at least one.
    fn default() -> RdAtomic {
        RdAtomic { initiator: RD_ATOMIC, responder: RD_ATOMIC }
    }
}

/// A device limit (ibv_device_attr's max_qp_rd_atom or max_qp_init_rd_atom) as the 8-bit queue pair attribute
/// takes it, at least 1.
pub fn rd_atom_limit(device_limit: i32) -> u8 {
    device_limit.clamp(1, u8::MAX as i32) as u8
}

pub struct QpSet {
    // Field order is drop order: queue pairs before the CQ and PD they use.
    pub qps: Vec<GenericQueuePair>,
    pub cq: Arc<BasicCompletionQueue>,
    pub channel: Option<Arc<CompletionChannel>>,
    pub pd: Arc<ProtectionDomain>,
    psns: Vec<u32>,
    pub port: PortInfo,
    /// Set in the address vector at INIT → RTR (default: 0 and 0).
    pub service: Service,
    /// Set at INIT → RTR and RTR → RTS (default: one of each, what WRITEs need).
    pub rd_atomic: RdAtomic,
    _ctx: Arc<DeviceContext>,
}

/// What each queue pair of a set is created with room for.
#[derive(Debug, Clone, Copy)]
struct Caps {
    send_wr: u32,
    send_sge: u32,
    recv_wr: u32,
    /// Bytes a send may carry inline (the provider may grant more: [`QpSet::max_inline_data`] says).
    max_inline_data: u32,
}

/// A random 24-bit packet sequence number, as perftest picks its start PSNs.
fn random_psn() -> Result<u32> {
    let mut b = [0u8; 4];
    getrandom::fill(&mut b).map_err(|e| anyhow::anyhow!("no randomness for the queue pairs' start PSNs: {e}"))?;
    Ok(u32::from_le_bytes(b) & 0xff_ffff)
}

impl QpSet {
    /// `n` RC queue pairs with room for `send_wr` outstanding sends of up to `send_sge` scatter entries each and
    /// `recv_wr` posted receives each.
    pub fn new(
        ctx: &Arc<DeviceContext>,
        port: &PortInfo,
        n: u32,
        send_wr: u32,
        send_sge: u32,
        recv_wr: u32,
        cq_mode: CqMode,
    ) -> Result<QpSet> {
        let caps = Caps { send_wr, send_sge, recv_wr, max_inline_data: 0 };
        QpSet::create(ctx, port, n, caps, cq_mode)
    }

    /// One RC queue pair for a ping-pong: `send_wr` sends of one scatter entry, carrying up to `max_inline_data`
    /// bytes inline, `recv_wr` receives, completions busy-polled. Fails where the provider grants less inline data.
    pub fn inline(
        ctx: &Arc<DeviceContext>,
        port: &PortInfo,
        (send_wr, recv_wr): (u32, u32),
        max_inline_data: u32,
    ) -> Result<QpSet> {
        let caps = Caps { send_wr, send_sge: 1, recv_wr, max_inline_data };
        QpSet::create(ctx, port, 1, caps, CqMode::Poll)
    }

    fn create(ctx: &Arc<DeviceContext>, port: &PortInfo, n: u32, caps: Caps, cq_mode: CqMode) -> Result<QpSet> {
        let Caps { send_wr, send_sge, recv_wr, max_inline_data } = caps;
        let pd = ctx.alloc_pd().context("ibv_alloc_pd")?;
        let channel = if cq_mode == CqMode::Event { Some(CompletionChannel::new(ctx).context("ibv_create_comp_channel")?) } else { None };
        let mut b = ctx.create_cq_builder();
        b.setup_cqe(n * (send_wr + recv_wr) + 16);
        if let Some(ch) = &channel {
            b.setup_comp_channel(ch, 0);
        }
        let cq = b.build().context("ibv_create_cq")?;
        let mut qps = Vec::new();
        for i in 0..n {
            let mut qb = pd.create_qp_builder();
            qb.setup_send_cq(GenericCompletionQueue::from(Arc::clone(&cq)))
                .setup_recv_cq(GenericCompletionQueue::from(Arc::clone(&cq)))
                .setup_max_send_wr(send_wr)
                .setup_max_recv_wr(recv_wr)
                .setup_max_send_sge(send_sge)
                .setup_max_recv_sge(1)
                .setup_max_inline_data(max_inline_data);
            let qp: GenericQueuePair = qb
                .build()
                .with_context(|| {
                    let inline = match max_inline_data {
                        0 => String::new(),
                        n => format!(", max_inline_data {n}"),
                    };
                    format!("ibv_create_qp #{i} (max_send_wr {send_wr}, max_send_sge {send_sge}{inline})")
                })?
                .into();
            qps.push(qp);
        }
        let psns = (0..n).map(|_| random_psn()).collect::<Result<_>>()?;
        let (port, service, rd_atomic) = (port.clone(), Service::default(), RdAtomic::default());
        Ok(QpSet { qps, cq, channel, pd, psns, port, service, rd_atomic, _ctx: ctx.clone() })
    }

    pub fn endpoints(&self) -> Vec<Endpoint> {
        self.qps
            .iter()
            .zip(&self.psns)
            .map(|(qp, &psn)| Endpoint {
                qpn: qp.qp_number(),
                psn,
                lid: self.port.lid,
                gid: self.port.gid_raw,
                mtu: self.port.active_mtu_enum,
            })
            .collect()
    }

    /// RESET → INIT. The receiver allows remote writes; the sender only local access.
    pub fn init(&mut self, remote_write: bool) -> Result<()> {
        let access =
            if remote_write { AccessFlags::LocalWrite | AccessFlags::RemoteWrite } else { AccessFlags::LocalWrite };
        self.init_with(access)
    }

    /// RESET → INIT, the queue pairs letting the peer at this end's memory as `access` says (the sender of an
    /// `--op read` run: remote reads).
    pub fn init_with(&mut self, access: AccessFlags) -> Result<()> {
        for (i, qp) in self.qps.iter_mut().enumerate() {
            let mut a = QueuePairAttribute::new();
            a.setup_state(QueuePairState::Init)
                .setup_pkey_index(0)
                .setup_port(self.port.port)
                .setup_access_flags(access);
            qp.modify(&a).with_context(|| format!("queue pair {i}: RESET → INIT"))?;
        }
        Ok(())
    }

    /// INIT → RTR → RTS against the peer's endpoints (queue pair i to the peer's queue pair i).
    /// `ack_timeout` is the local ACK timeout exponent (4.096 µs × 2^N).
    pub fn connect(&mut self, remote: &[Endpoint], ack_timeout: u8) -> Result<()> {
        if remote.len() != self.qps.len() {
            bail!(
                "the peer has {} queue pairs, this end {}; both ends must agree on --qps",
                remote.len(),
                self.qps.len()
            );
        }
        let (port, service, rd) = (&self.port, self.service, self.rd_atomic);
        for (i, (qp, r)) in self.qps.iter_mut().zip(remote).enumerate() {
            let mut ah = AddressHandleAttribute::new();
            ah.setup_port(port.port).setup_dest_lid(r.lid).setup_service_level(service.sl);
            // RoCE has no LIDs: the global route header (peer GID + our GID index) is mandatory there.
            if port.is_ethernet() {
                ah.setup_grh(&gid_from(r.gid), 0, port.gid_index as u8, 64, service.tclass);
            }
            let mut a = QueuePairAttribute::new();
            a.setup_state(QueuePairState::ReadyToReceive)
                .setup_path_mtu(Mtu::from(port.active_mtu_enum.min(r.mtu)))
                .setup_dest_qp_num(r.qpn)
                .setup_rq_psn(r.psn)
                .setup_max_dest_read_atomic(rd.responder)
                .setup_min_rnr_timer(12)
                .setup_address_vector(&ah);
            qp.modify(&a).with_context(|| format!("queue pair {i}: INIT → RTR (peer qpn {:#x})", r.qpn))?;
            let mut a = QueuePairAttribute::new();
            a.setup_state(QueuePairState::ReadyToSend)
                .setup_sq_psn(self.psns[i])
                .setup_timeout(ack_timeout)
                .setup_retry_cnt(RETRY_COUNT)
                .setup_rnr_retry(7)
                .setup_max_read_atomic(rd.initiator);
            qp.modify(&a).with_context(|| format!("queue pair {i}: RTR → RTS"))?;
        }
        Ok(())
    }

    /// Bytes a send may carry inline, as the provider sized the queue pairs (ibv_query_qp's cap.max_inline_data).
    pub fn max_inline_data(&self) -> Result<u32> {
        let qp = self.qps.first().context("a set has at least one queue pair")?;
        let (_, init) = qp.query(QueuePairAttributeMask::Capabilities).context("ibv_query_qp")?;
        Ok(init.max_inline_data())
    }

    pub fn raw_qp(&self, i: usize) -> NonNull<rdma_mummy_sys::ibv_qp> {
        // SAFETY: the pointer is only used while `self` (and so the queue pair) is alive.
        unsafe { self.qps[i].qp() }
    }
}
