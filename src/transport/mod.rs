//! How bytes move. Every transport does the same thing: the receiver exposes a region the sender may write into;
//! the sender turns a transfer into [`Write`]s and pushes them as parallel as the transport allows, learns when each
//! completed, and the receiver learns when all of them landed.
//!
//! A transport is two halves behind two small traits, connected through the control channel in two steps:
//! the target's [`Target::offer`] (e.g. TCP: data port; verbs: rkeys and QP numbers) travels in `Accept`, the
//! source's [`Source::answer`] travels back in `Connect`. Plan, run, stats and export never know which transport
//! they drive.

pub mod cuda;
pub mod mooncake;
pub mod nixl;
pub mod tcp;
pub mod verbs;

use crate::mem::{Buffer, MemKind};
use crate::plan::transport::value_name;
use crate::plan::{RunConfig, Write};
pub use crate::plan::{TransportConfig, TransportKind};
use anyhow::Result;
use clap::ValueEnum;
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

/// The transports this build has, as `--transport` names them (derived from [`TransportKind`]).
pub static TRANSPORTS: LazyLock<Vec<String>> =
    LazyLock::new(|| TransportKind::value_variants().iter().map(value_name).collect());

/// Each transport's default block size when the user gives none.
pub fn default_block_size(transport: TransportKind) -> u64 {
    match transport {
        TransportKind::Cuda => cuda::DEFAULT_BLOCK_SIZE,
        TransportKind::Verbs => verbs::DEFAULT_BLOCK_SIZE,
        TransportKind::Tcp => tcp::DEFAULT_BLOCK_SIZE,
        TransportKind::Mooncake => mooncake::DEFAULT_BLOCK_SIZE,
        TransportKind::Nixl => nixl::DEFAULT_BLOCK_SIZE,
    }
}

/// The buffer one end of a run moves (`role`: sender or receiver): allocated here, except GPU memory for Mooncake,
/// which the engine's worker process allocates and registers (see [`mooncake::engine_gpu_buffer`]).
pub fn alloc_buffer(cfg: &RunConfig, kind: MemKind, role: &str, ctx: &Context) -> Result<Buffer> {
    match (&cfg.transport, kind) {
        (TransportConfig::Mooncake(m), MemKind::Gpu(n)) => {
            mooncake::engine_gpu_buffer(role, m, n, usize::try_from(cfg.buffer_bytes())?, ctx)
        }
        _ => {
            let shared = shares_host_memory(cfg.transport.kind());
            Buffer::alloc_for(kind, cfg.buffer_bytes(), cfg.knobs.hugepages, shared)
        }
    }
}

/// Whether transport `kind` moves host memory from another process (an engine's worker), which then needs the
/// buffers allocated shared ([`Buffer::alloc_for`]).
pub fn shares_host_memory(kind: TransportKind) -> bool {
    kind == TransportKind::Mooncake
}

/// Whether transport `kind` pins the host memory it moves in this process (registers it with an RDMA device), which
/// RLIMIT_MEMLOCK bounds unless the process holds CAP_IPC_LOCK. The engines pin in their own worker or library.
pub fn pins_host_memory(kind: TransportKind) -> bool {
    kind == TransportKind::Verbs
}

/// Whether a one-machine run (`sweep`) must put transport `kind`'s receiver in a process of its own. NIXL: UCX
/// will not use CUDA IPC between two agents of one process ("cuda_ipc cannot reach: same process") and quietly
/// moves GPU buffers over loopback TCP instead (0.4 GB/s where two processes get NVLink), and two processes are
/// how its users run it. Mooncake's engines already live in worker processes.
pub fn receiver_in_own_process(kind: TransportKind) -> bool {
    kind == TransportKind::Nixl
}

/// How the receiver learns that a rep's bytes have landed. Declared once per transport ([`landing`]) and read by
/// both ends, so the sender's and the receiver's view of a rep's end cannot disagree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Landing {
    /// The target observes it ([`Target::wait_landed`]): TCP counts the bytes, verbs sees WRITE_WITH_IMMs.
    Observed,
    /// The target cannot see the data arrive: the sender sends `Landed` on the control channel once its transfer
    /// completed.
    Announced,
}

/// How a run of `transport` signals that a rep landed.
pub fn landing(transport: &TransportConfig) -> Landing {
    match transport {
        TransportConfig::Tcp(_) | TransportConfig::Verbs(_) => Landing::Observed,
        // The receiver posts the READ itself and sees it complete.
        TransportConfig::Nixl(n) if n.op == crate::plan::NixlOp::Read => Landing::Observed,
        TransportConfig::Cuda(_) | TransportConfig::Mooncake(_) | TransportConfig::Nixl(_) => Landing::Announced,
    }
}

/// Fail before connecting when this host lacks what the transport needs (the memory kinds are checked apart):
/// the CUDA driver (cuda), or RDMA and each of `devices` (verbs: opening a device checks the library, its name,
/// the port and the GID index at once).
pub fn check_host(kind: TransportKind, devices: &[&DeviceChoice]) -> Result<()> {
    match kind {
        // The engine's worker checks Python and the wheel when it starts, before any rep.
        TransportKind::Tcp | TransportKind::Mooncake => {}
        TransportKind::Nixl => {
            nixl::check()?;
        }
        TransportKind::Cuda => {
            crate::mem::cuda::driver().map_err(|e| e.context("--transport cuda"))?;
        }
        TransportKind::Verbs => {
            for d in devices {
                for name in d.rails() {
                    verbs::device::open(d, name).map_err(|e| e.context("--transport verbs"))?;
                }
            }
        }
    }
    Ok(())
}

/// Why a transport cannot run on this host: a few words (`devices` prints them), and the full line with its fix.
#[derive(Debug, Clone, Serialize)]
pub struct Unusable {
    pub reason: String,
    pub detail: String,
}

impl Unusable {
    fn new(reason: &str, detail: impl std::fmt::Display) -> Unusable {
        Unusable { reason: reason.into(), detail: detail.to_string() }
    }
}

/// Whether transport `kind` can run on this host, asked of the transport itself with the probing a run does
/// before connecting (the library, driver, devices or Python it needs).
pub fn usable_here(kind: TransportKind) -> Result<(), Unusable> {
    match kind {
        TransportKind::Tcp => Ok(()),
        TransportKind::Verbs => verbs::device::usable(),
        TransportKind::Cuda => cuda::usable(),
        TransportKind::Mooncake => mooncake::usable(),
        TransportKind::Nixl => nixl::check().map_err(|e| Unusable::new("NIXL library not found (KVXFER_NIXL_LIB)", e)),
    }
}

/// One transport by name, and whether it can run here (`kvxfer devices`).
#[derive(Debug, Clone, Serialize)]
pub struct Availability {
    pub name: String,
    pub available: bool,
    /// Why not, when not: `reason` and `detail`.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub unusable: Option<Unusable>,
}

/// Every transport of this build, in `--transport`'s order, with whether it can run here.
pub fn availability() -> Vec<Availability> {
    TransportKind::value_variants()
        .iter()
        .map(|&k| {
            let unusable = usable_here(k).err();
            Availability { name: value_name(&k), available: unusable.is_none(), unusable }
        })
        .collect()
}

/// When the first byte of a transfer was posted and the last completion was seen (sender clock).
#[derive(Debug, Clone)]
pub struct TransferTimes {
    pub first_post: Instant,
    pub last_complete: Instant,
    /// What this transport measured besides the times.
    pub extras: TransferExtras,
}

impl TransferTimes {
    pub fn new(first_post: Instant, last_complete: Instant) -> TransferTimes {
        TransferTimes { first_post, last_complete, extras: TransferExtras::default() }
    }
}

/// What a transport reports about one transfer besides its times; each rep of the results carries these keys
/// (flattened, left out when absent).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TransferExtras {
    /// Memory registration done inside this transfer (verbs `--reg-per-rep`), included in the transfer time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reg_ms: Option<f64>,
    /// Work requests the transport issued when that differs from the writes (verbs: SGE lists gather pieces
    /// whose destinations are adjacent into one RDMA WRITE).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work_requests: Option<u64>,
    /// `--staging gather`: how the transfer time splits into its three steps, which add up to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staged: Option<StagedMs>,
    /// An engine's batch (mooncake): the entries handed to it in one call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub descriptors: Option<u64>,
    /// Verbs striped over several devices: each rail's bytes, time and rate in this rep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rails: Option<Vec<verbs::RailRep>>,
}

/// What the sender's transport chose and measured while connecting, stored in the results under
/// `config.transport_detail`: each transport's own type, serialized as its JSON object.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum TransportDetail {
    Tcp(tcp::TcpDetail),
    Verbs(Box<verbs::VerbsDetail>),
    Cuda(cuda::CudaDetail),
    Mooncake(mooncake::MooncakeDetail),
    Nixl(nixl::NixlDetail),
}

impl TransportDetail {
    /// As the results file holds it.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("transport details are plain data")
    }
}

/// The steps of a staged transfer (`--staging gather`), GPU-timed, in ms: pack the pieces into a contiguous
/// staging buffer on the source GPU, one contiguous copy to a staging buffer on the destination GPU, unpack them
/// into their slots there.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StagedMs {
    pub gather_ms: f64,
    pub copy_ms: f64,
    pub scatter_ms: f64,
}

/// The sender's half: writes into the receiver's region.
pub trait Source: Send {
    /// What the receiver needs to finish the connection (sent in `Connect`).
    fn answer(&self) -> serde_json::Value;
    /// What this end chose and measured while connecting (device, GID, MTU, registration time...), stored in the
    /// results under `transport_detail`.
    fn describe(&self) -> TransportDetail;
    /// Called once after the receiver accepted the connection, before the first rep: a transport may measure here
    /// how best to send on this machine (TCP picks its send path). Not timed as part of any rep.
    fn prepare(&mut self, _mem: &Buffer) -> Result<()> {
        Ok(())
    }
    /// Push every write from `mem` (the buffer the source was connected with) and return once all completed.
    fn transfer(&mut self, mem: &Buffer, writes: &[Write], hooks: &mut TransferHooks) -> Result<TransferTimes>;
}

/// What a transfer reports to, and asks of, the run while it goes.
pub struct TransferHooks<'a> {
    /// Called once per write `i` when its completion is observed: (i, posted, completed). Feeds the per-block
    /// latency histogram.
    pub done: &'a mut dyn FnMut(usize, Instant, Instant),
    /// True once the receiver has hung up or reported an error on the control connection. Transports whose data
    /// path cannot see a dead peer quickly (verbs retries for a while) poll it so a failure is named within seconds.
    pub peer_failed: &'a mut dyn FnMut() -> bool,
}

/// The receiver's half: owns the exposed region and learns when a rep's bytes have landed.
pub trait Target: Send {
    /// How the sender reaches the region (sent in `Accept`).
    fn offer(&self) -> serde_json::Value;
    /// Finish connecting with the sender's answer (nothing to do for targets the sender writes into unaided).
    fn accept(&mut self, _answer: serde_json::Value) -> Result<()> {
        Ok(())
    }
    /// Expect one rep of case `case`, `size_bytes` long (nothing to do where landing is [`Landing::Announced`]).
    fn arm(&mut self, _case: usize, _size_bytes: u64) -> Result<()> {
        Ok(())
    }
    /// Block until the armed rep has landed (transports whose [`landing`] is [`Landing::Observed`]) and return when
    /// that was observed, or return `None` as soon as `control_ready()` says the control connection has something
    /// to say (the sender failed or vanished). The run never asks a target whose landing is announced.
    fn wait_landed(&mut self, _timeout: Duration, _control_ready: &mut dyn FnMut() -> bool) -> Result<Option<Instant>> {
        anyhow::bail!("this transport learns of landing from the sender's control message")
    }
    /// When this end posted the last rep's transfer itself (nixl `--nixl-op read`: the receiver pulls), its post
    /// and completion: the rep's transfer time then is this end's.
    fn posted_transfer(&self) -> Option<(Instant, Instant)> {
        None
    }
}

/// What a transport needs to know about where it runs.
pub struct Context {
    /// The receiver's address as the sender dialled it (sender side) or as the receiver listens (receiver side).
    pub peer_ip: IpAddr,
    pub local_ip: IpAddr,
    pub timeouts: crate::control::Timeouts,
    /// This end's RDMA device choice (verbs).
    pub device: DeviceChoice,
    /// Both ends of the session run in this process (a sweep's receiver thread, a cluster rank): its CPU time is
    /// both ends'.
    pub shares_process: bool,
    /// The key the control handshake derived (`control::auth`); data connections prove themselves with it.
    pub session_key: Option<crate::control::auth::SessionKey>,
}

/// `-d/--device`, `--ib-port`, `--gid-index` of one end.
#[derive(Debug, Clone, Default)]
pub struct DeviceChoice {
    /// The devices by name: none (the first with an active port), one, or several — rails, over which one verbs
    /// transfer is striped.
    pub names: Vec<String>,
    pub ib_port: u8,
    pub gid_index: Option<u32>,
}

impl DeviceChoice {
    /// The device of each rail: the named ones, or the one automatic pick.
    pub fn rails(&self) -> Vec<Option<&str>> {
        if self.names.is_empty() {
            vec![None]
        } else {
            self.names.iter().map(|n| Some(n.as_str())).collect()
        }
    }

    /// The devices as the command line names them (`mlx5_0+mlx5_1` for rails), if named.
    pub fn label(&self) -> Option<String> {
        (!self.names.is_empty()).then(|| self.names.join("+"))
    }
}

pub fn open_target(cfg: &RunConfig, buf: Arc<Buffer>, ctx: &Context) -> Result<Box<dyn Target>> {
    Ok(match &cfg.transport {
        TransportConfig::Tcp(_) => Box::new(tcp::TcpTarget::open(cfg, buf, ctx)?),
        TransportConfig::Cuda(_) => Box::new(cuda::CudaTarget::open(buf)?),
        TransportConfig::Verbs(v) => Box::new(verbs::VerbsTarget::open(v, buf, ctx)?),
        TransportConfig::Mooncake(m) => Box::new(mooncake::MooncakeTarget::open(m, buf, ctx)?),
        TransportConfig::Nixl(n) => Box::new(nixl::NixlTarget::open(n, cfg, buf, ctx)?),
    })
}

pub fn connect_source(
    cfg: &RunConfig,
    buf: &Buffer,
    offer: serde_json::Value,
    ctx: &Context,
) -> Result<Box<dyn Source>> {
    Ok(match &cfg.transport {
        TransportConfig::Tcp(_) => Box::new(tcp::TcpSource::connect(cfg, buf, offer, ctx)?),
        TransportConfig::Cuda(c) => Box::new(cuda::CudaSource::connect(c, cfg, buf, offer, ctx)?),
        TransportConfig::Verbs(v) => Box::new(verbs::VerbsSource::connect(v, cfg, buf, offer, ctx)?),
        TransportConfig::Mooncake(m) => Box::new(mooncake::MooncakeSource::connect(m, buf, offer, ctx)?),
        TransportConfig::Nixl(n) => Box::new(nixl::NixlSource::connect(n, buf, offer, ctx)?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{CopyMode, Staging};

    #[test]
    fn details_serialize_as_results_files_hold_them() {
        let sender = cuda::CudaSenderDetail { gpu: 1, streams: 2, copy: CopyMode::Ce, staging: Staging::Gather };
        let detail = TransportDetail::Cuda(cuda::CudaDetail { sender });
        let json = r#"{"sender":{"copy":"ce","gpu":1,"staging":"gather","streams":2}}"#;
        assert_eq!(detail.to_json().to_string(), json);
        let sender = tcp::TcpSenderDetail {
            streams: 1,
            send: tcp::SendPath::Splice,
            send_choice: tcp::ChosenBy::Calibration,
            send_gbps: Some(tcp::SendRates { splice: 3.5, write: 3.0 }),
            recv: tcp::RecvPath::Bounce,
            recv_choice: tcp::ChosenBy::Calibration,
            recv_gbps: Some(tcp::RecvRates { direct: 3.0, bounce: 3.5 }),
            calibration_gbps: [("splice+bounce".to_string(), 3.5)].into(),
            path_reason: "measured".to_string(),
        };
        let mut detail = tcp::TcpDetail { sender };
        let json = r#"{"sender":{"calibration_gbps":{"splice+bounce":3.5},"path_reason":"measured","recv":"bounce","recv_choice":"calibration","recv_gbps":{"bounce":3.5,"direct":3.0},"send":"splice","send_choice":"calibration","send_gbps":{"splice":3.5,"write":3.0},"streams":1}}"#;
        assert_eq!(TransportDetail::Tcp(detail.clone()).to_json().to_string(), json);
        let s = &mut detail.sender;
        (s.send, s.send_choice, s.send_gbps) = (tcp::SendPath::Write, tcp::ChosenBy::NoPipe, None);
        (s.recv, s.recv_choice, s.recv_gbps) = (tcp::RecvPath::Direct, tcp::ChosenBy::RecvEnvironment, None);
        s.calibration_gbps.clear();
        let json = r#"{"sender":{"path_reason":"measured","recv":"direct","recv_choice":"KVXFER_TCP_RECV","send":"write","send_choice":"no pipe","streams":1}}"#;
        assert_eq!(TransportDetail::Tcp(detail).to_json().to_string(), json);
    }

    #[test]
    fn extras_are_left_out_when_absent() {
        assert_eq!(serde_json::to_string(&TransferExtras::default()).unwrap(), "{}");
        let e = TransferExtras { reg_ms: Some(1.5), work_requests: Some(3), ..TransferExtras::default() };
        assert_eq!(serde_json::to_string(&e).unwrap(), r#"{"reg_ms":1.5,"work_requests":3}"#);
    }
}
