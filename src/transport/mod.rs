//! How bytes move. Every transport does the same thing: the receiver exposes a region the sender may write into;
//! the sender turns a transfer into [`Write`]s and pushes them as parallel as the transport allows, learns when each
//! completed, and the receiver learns when all of them landed.
//!
//! A transport is two halves behind two small traits, connected through the control channel in two steps:
//! the target's [`Target::offer`] (e.g. TCP: data port; verbs: rkeys and QP numbers) travels in `Accept`, the
//! source's [`Source::answer`] travels back in `Connect`. Plan, run, stats and export never know which transport
//! they drive.

pub mod cuda;
pub mod tcp;
pub mod verbs;

use crate::mem::Buffer;
use crate::plan::transport::value_name;
pub use crate::plan::TransportKind;
use crate::plan::{RunConfig, Write};
use anyhow::Result;
use clap::ValueEnum;
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
    }
}

/// When the first byte of a transfer was posted and the last completion was seen (sender clock).
#[derive(Debug, Clone, Copy)]
pub struct TransferTimes {
    pub first_post: Instant,
    pub last_complete: Instant,
    /// Memory registration done inside this transfer (verbs `--reg-per-rep`), included in the transfer time.
    pub reg_ms: Option<f64>,
    /// Work requests the transport issued when that differs from the writes (verbs: SGE lists gather pieces
    /// whose destinations are adjacent into one RDMA WRITE).
    pub work_requests: Option<u64>,
    /// `--staging gather`: how the transfer time splits into its three steps.
    pub staged: Option<StagedMs>,
}

impl TransferTimes {
    pub fn new(first_post: Instant, last_complete: Instant) -> TransferTimes {
        TransferTimes { first_post, last_complete, reg_ms: None, work_requests: None, staged: None }
    }
}

/// The steps of a staged transfer (`--staging gather`), GPU-timed, in ms: pack the pieces into a contiguous
/// staging buffer on the source GPU, one contiguous copy to a staging buffer on the destination GPU, unpack them
/// into their slots there.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
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
    /// results under `transport`.
    fn describe(&self) -> serde_json::Value {
        serde_json::Value::Null
    }
    /// Whether the receiver only learns that data landed from a `Landed` control message sent after `transfer`.
    fn sends_landed_message(&self) -> bool {
        false
    }
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
    /// Finish connecting with the sender's answer.
    fn accept(&mut self, answer: serde_json::Value) -> Result<()>;
    /// True when this target cannot observe data landing itself and waits for the sender's `Landed` message
    /// instead of [`Target::wait_landed`].
    fn landed_by_control(&self) -> bool {
        false
    }
    /// Expect one rep of `size_bytes`.
    fn arm(&mut self, size_bytes: u64) -> Result<()>;
    /// Block until the armed rep has landed; return when that was observed.
    /// Block until the armed rep has landed and return when that was observed, or return `None` as soon as
    /// `control_ready()` says the control connection has something to say (the sender failed or vanished).
    fn wait_landed(&mut self, timeout: Duration, control_ready: &mut dyn FnMut() -> bool) -> Result<Option<Instant>>;
}

/// What a transport needs to know about where it runs.
pub struct Context {
    /// The receiver's address as the sender dialled it (sender side) or as the receiver listens (receiver side).
    pub peer_ip: IpAddr,
    pub local_ip: IpAddr,
    pub timeouts: crate::control::Timeouts,
    /// This end's RDMA device choice (verbs).
    pub device: DeviceChoice,
}

/// `-d/--device`, `--ib-port`, `--gid-index` of one end.
#[derive(Debug, Clone, Default)]
pub struct DeviceChoice {
    pub name: Option<String>,
    pub ib_port: u8,
    pub gid_index: Option<u32>,
}

pub fn open_target(cfg: &RunConfig, buf: Arc<Buffer>, ctx: &Context) -> Result<Box<dyn Target>> {
    Ok(match cfg.transport {
        TransportKind::Tcp => Box::new(tcp::TcpTarget::open(cfg, buf, ctx)?),
        TransportKind::Cuda => Box::new(cuda::CudaTarget::open(buf)?),
        TransportKind::Verbs => Box::new(verbs::VerbsTarget::open(cfg, buf, ctx)?),
    })
}

pub fn connect_source(
    cfg: &RunConfig,
    buf: &Buffer,
    offer: serde_json::Value,
    ctx: &Context,
) -> Result<Box<dyn Source>> {
    Ok(match cfg.transport {
        TransportKind::Tcp => Box::new(tcp::TcpSource::connect(cfg, buf, offer, ctx)?),
        TransportKind::Cuda => Box::new(cuda::CudaSource::connect(cfg, buf, offer, ctx)?),
        TransportKind::Verbs => Box::new(verbs::VerbsSource::connect(cfg, buf, offer, ctx)?),
    })
}
