//! NVIDIA NIXL as a transport: each end creates an agent with one backend (`--nixl-backend`, UCX by default) and
//! registers its whole buffer once (outside every timed interval) — host memory as DRAM, GPU memory as VRAM of its
//! device. The two agents swap metadata through kvxfer's control channel (the receiver's in its offer, the
//! sender's in its answer), then a transfer is one NIXL request holding a descriptor per write (a paged transfer:
//! one per piece), made once per case and posted again every rep, as a connector reuses its prepared transfer.
//!
//! `--nixl-op write`: the sender WRITEs and polls its request; the receiver cannot see the bytes arrive and is told
//! by the control channel (`Landing::Announced`). `--nixl-op read`, the decode side pulling as vLLM's NixlConnector
//! does: the receiver READs from the sender through prepped descriptor lists with a notification for the sender,
//! and times the READ itself (`Landing::Observed`; the sender's rep time is the receiver's post → completion).
//!
//! NIXL is loaded at run time (see `library`): kvxfer starts without it and says what to install.

mod config;
mod library;
mod source;
mod target;

pub use config::{NixlBackend, NixlConfig, NixlOp};
pub use source::NixlSource;
pub use target::NixlTarget;

use super::api::{HasKnobs, Context, Landing, Source, Target, Transport};
use super::{batch, TransportDetail, Unusable};
use crate::measure::{ExtrasNotes, Fields, Warning};
use crate::mem::{Buffer, MemKind};
use crate::plan::{RunConfig, TransportConfig, Write};
use anyhow::{anyhow, bail, Context as _, Result};
use nixl_sys::{
    Agent, AgentConfig, Backend, MemType, MemoryRegion, NixlDescriptor, NotificationMap, RegistrationHandle,
    XferDescList, XferDlistHandle, XferRequest, XferStatus,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The nixl transport, as the registry lists it: one agent per end; `--nixl-op read` lets the receiver post and
/// observe the transfer, `write` has the sender announce it.
pub struct Nixl;

impl ExtrasNotes for Nixl {}

impl HasKnobs for Nixl {
    type Knobs = NixlConfig;
}

impl Transport for Nixl {
    fn default_block_size(&self, _cfg: &TransportConfig) -> u64 {
        DEFAULT_BLOCK_SIZE
    }

    fn check_host(&self, _devices: &[&super::DeviceChoice]) -> Result<()> {
        check()
    }

    fn usable_here(&self) -> std::result::Result<(), Unusable> {
        check().map_err(|e| Unusable::new("NIXL library not found (KVXFER_NIXL_LIB)", e))
    }

    /// The receiver posts a READ itself and sees it complete; it cannot see a WRITE land.
    fn landing(&self, cfg: &TransportConfig) -> Landing {
        match cfg.knobs::<NixlConfig>().map(|n| n.op) {
            Ok(NixlOp::Read) => Landing::Observed,
            _ => Landing::Announced,
        }
    }

    fn pulls(&self, cfg: &TransportConfig) -> bool {
        cfg.knobs::<NixlConfig>().is_ok_and(|n| n.op == NixlOp::Read)
    }

    /// UCX will not use CUDA IPC between two agents of one process ("cuda_ipc cannot reach: same process") and
    /// quietly moves GPU buffers over loopback TCP instead (0.4 GB/s where two processes get NVLink), and two
    /// processes are how its users run it.
    fn receiver_in_own_process(&self) -> bool {
        true
    }

    fn open_target(&self, cfg: &RunConfig, buf: Arc<Buffer>, ctx: &Context) -> Result<Box<dyn Target>> {
        let knobs = cfg.transport.knobs::<NixlConfig>()?;
        Ok(Box::new(NixlTarget::open(&knobs, cfg, buf, ctx)?))
    }

    fn connect_source(
        &self,
        cfg: &RunConfig,
        buf: &Buffer,
        offer: serde_json::Value,
        ctx: &Context,
    ) -> Result<Box<dyn Source>> {
        let knobs = cfg.transport.knobs::<NixlConfig>()?;
        Ok(Box::new(NixlSource::connect(&knobs, buf, offer, ctx)?))
    }

    fn summarize(&self, reps: &[&Fields]) -> (Fields, Vec<Warning>) {
        batch::summarize(reps)
    }
}

/// Contiguous transfers as 64 MiB writes, like the other host transports; UCX splits them as it likes.
pub const DEFAULT_BLOCK_SIZE: u64 = 64 << 20;
/// How often a transfer's poll loop looks at the control connection and the clock.
const PEER_CHECK: Duration = Duration::from_millis(20);
/// The receiver agent's progress thread sleeps this long between rounds. NIXL's default is 0: a thread spinning on
/// a core for as long as the agent lives, which on a small host halved every other transport's rate in the same
/// sweep (raw tcp 2.1 → 0.8–1.0 GB/s on the 2-core VM). The sender needs none: its poll loop drives its requests.
const RECEIVER_PROGRESS_DELAY_US: u64 = 100;
/// The notification a READ leaves with the sender when it completes (`--nixl-op read`).
const READ_DONE: &[u8] = b"kvxfer-read-done";

/// `transport_detail` of a nixl run.
#[derive(Debug, Clone, Serialize)]
pub struct NixlDetail {
    pub sender: NixlSenderDetail,
}

#[derive(Debug, Clone, Serialize)]
pub struct NixlSenderDetail {
    pub engine: &'static str,
    /// As NIXL names its plugin (`UCX`, `LIBFABRIC`).
    pub backend: &'static str,
    pub op: NixlOp,
    /// What NIXL registered on this end: DRAM or VRAM.
    pub memory: RegionMem,
    /// The receiver agent's progress thread pause (µs); the sender's agent has no progress thread.
    pub receiver_progress_delay_us: u64,
    /// The C API library loaded.
    pub library: String,
    /// Environment kvxfer set for NIXL and UCX (only what was unset), and the UCX_* the run had.
    pub env: BTreeMap<String, String>,
}

/// NIXL's memory kinds that kvxfer registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RegionMem {
    Dram,
    Vram,
}

impl RegionMem {
    fn nixl(self) -> MemType {
        match self {
            RegionMem::Dram => MemType::Dram,
            RegionMem::Vram => MemType::Vram,
        }
    }
}

/// One end's registered buffer as the other end addresses it: its agent's metadata (hex, for `load_remote_md`)
/// and the region. The receiver's travels in its offer, the sender's in its answer.
#[derive(Debug, Serialize, Deserialize)]
struct Region {
    metadata: String,
    addr: u64,
    region_len: u64,
    #[serde(default = "dram")]
    mem: RegionMem,
    #[serde(default)]
    device: u64,
}

fn dram() -> RegionMem {
    RegionMem::Dram
}

/// A buffer's bytes as NIXL registers them. Holds no reference to the bytes: NIXL and UCX write them, and kvxfer
/// reads them only through volatile loads or CUDA copies.
#[derive(Debug)]
struct BufferBytes {
    addr: usize,
    len: usize,
    mem: RegionMem,
    device: u64,
}

impl BufferBytes {
    fn of_buffer(buf: &Buffer) -> BufferBytes {
        let (mem, device) = match buf.kind() {
            MemKind::Host | MemKind::Pinned => (RegionMem::Dram, 0),
            MemKind::Gpu(n) => (RegionMem::Vram, u64::from(n)),
        };
        BufferBytes { addr: buf.cuda_addr() as usize, len: buf.len(), mem, device }
    }
}

impl MemoryRegion for BufferBytes {
    unsafe fn as_ptr(&self) -> *const u8 {
        self.addr as *const u8
    }

    fn size(&self) -> usize {
        self.len
    }
}

impl NixlDescriptor for BufferBytes {
    fn mem_type(&self) -> MemType {
        self.mem.nixl()
    }

    fn device_id(&self) -> u64 {
        self.device
    }
}

fn backend_name(b: NixlBackend) -> &'static str {
    match b {
        NixlBackend::Ucx => "UCX",
        NixlBackend::Libfabric => "LIBFABRIC",
    }
}

/// An agent of this process with one backend and its buffer registered. Agent names must differ between the
/// agents that talk (a sweep has both ends in one process).
struct Engine {
    // Drop order: the registration before the agent.
    _reg: RegistrationHandle,
    // Kept for the life of the agent that created it.
    _backend: Backend,
    agent: Agent,
    bytes: BufferBytes,
    backend: &'static str,
    loaded: &'static library::Loaded,
}

fn nixl(what: &str) -> impl Fn(nixl_sys::NixlError) -> anyhow::Error + '_ {
    move |e| anyhow!("nixl {what}: {e}")
}

impl Engine {
    /// An agent for `role`; `progress` gives it NIXL's progress thread, pausing that many µs between rounds.
    fn start(role: &str, cfg: &NixlConfig, buf: &Buffer, progress: Option<u64>) -> Result<Engine> {
        let loaded = library::load()?;
        if let MemKind::Gpu(n) = buf.kind() {
            // UCX's CUDA transports look for the context current on the registering thread.
            crate::mem::cuda::context(n)?;
        }
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!("kvxfer-{role}-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed));
        let config = AgentConfig {
            enable_prog_thread: progress.is_some(),
            pthr_delay_us: progress.unwrap_or(0),
            ..AgentConfig::default()
        };
        let agent = Agent::new_configured(&name, &config).map_err(nixl("agent"))?;
        let backend = backend_name(cfg.backend);
        let (_mems, params) = agent.get_plugin_params(backend).map_err(|e| {
            anyhow!("--nixl-backend {}: {e}: {}", cfg.backend, library::plugin_problem(loaded, backend))
        })?;
        let handle = agent.create_backend(backend, &params).map_err(nixl("backend"))?;
        let bytes = BufferBytes::of_buffer(buf);
        let reg = agent.register_memory(&bytes, None).map_err(nixl("register_memory"))?;
        Ok(Engine { _reg: reg, _backend: handle, agent, bytes, backend, loaded })
    }

    /// This end's region, for the other end.
    fn region(&self) -> Region {
        let metadata = self.agent.get_local_md().map(hex::encode).unwrap_or_default();
        let b = &self.bytes;
        Region { metadata, addr: b.addr as u64, region_len: b.len as u64, mem: b.mem, device: b.device }
    }

    /// Load the other end's region; returns its agent's name.
    fn load_remote(&self, value: serde_json::Value, whose: &str) -> Result<(String, Region)> {
        let remote: Region =
            serde_json::from_value(value).with_context(|| format!("{whose} nixl region is malformed"))?;
        let md = hex::decode(&remote.metadata).with_context(|| format!("{whose} nixl metadata is malformed"))?;
        let name = self.agent.load_remote_md(&md).map_err(nixl("load_remote_md"))?;
        Ok((name, remote))
    }

    fn describe(&self, op: NixlOp) -> TransportDetail {
        let mut env = self.loaded.env.clone();
        for (k, v) in std::env::vars().filter(|(k, _)| k.starts_with("UCX_")) {
            env.entry(k).or_insert(v);
        }
        TransportDetail::of(&NixlDetail {
            sender: NixlSenderDetail {
                engine: "nixl",
                backend: self.backend,
                op,
                memory: self.bytes.mem,
                receiver_progress_delay_us: RECEIVER_PROGRESS_DELAY_US,
                library: self.loaded.path.display().to_string(),
                env,
            },
        })
    }
}

/// The descriptor lists of `writes`: the sender's pieces (at `local_offset`) and the receiver's (at
/// `remote_offset`), checked against both regions.
fn descriptor_lists(
    writes: &[Write],
    sender: &Region,
    receiver: &Region,
) -> Result<(XferDescList<'static>, XferDescList<'static>)> {
    let mut src = XferDescList::new(sender.mem.nixl()).map_err(nixl("descriptor list"))?;
    let mut dst = XferDescList::new(receiver.mem.nixl()).map_err(nixl("descriptor list"))?;
    for w in writes {
        let inside = |at: u64, region: &Region| at.checked_add(w.len).is_some_and(|end| end <= region.region_len);
        if !inside(w.local_offset, sender) || !inside(w.remote_offset, receiver) {
            bail!("a write of {} bytes falls outside the agreed regions", w.len);
        }
        src.add_desc((sender.addr + w.local_offset) as usize, w.len as usize, sender.device);
        dst.add_desc((receiver.addr + w.remote_offset) as usize, w.len as usize, receiver.device);
    }
    Ok((src, dst))
}

/// Poll `request` until it completes: at most `timeout`, giving up as soon as `peer_gone` says the other end is.
fn complete(
    agent: &Agent,
    request: &XferRequest,
    timeout: Duration,
    peer_gone: &mut dyn FnMut() -> bool,
) -> Result<Option<Instant>> {
    let started = Instant::now();
    let mut checked = started;
    loop {
        match agent.get_xfer_status(request).map_err(nixl("transfer"))? {
            XferStatus::Success => return Ok(Some(Instant::now())),
            XferStatus::InProgress => {}
        }
        if checked.elapsed() > PEER_CHECK {
            checked = Instant::now();
            if started.elapsed() > timeout {
                bail!("the nixl transfer did not complete within --io-timeout ({:.0} s)", timeout.as_secs_f64());
            }
            if peer_gone() {
                return Ok(None);
            }
        }
    }
}

/// A NIXL object that nixl-sys leaves `!Send` because it holds raw pointers: prepped descriptor lists and a
/// notification map. Each is used only through the transport half that owns it (`&mut self`), never from two
/// threads at once.
struct Owned<T>(T);

// SAFETY: a prepped descriptor list is a heap object of NIXL's, not tied to the thread that made it; the agent
// pointer it keeps (for its release) stays valid because the owning half drops the lists before its agent, and
// NIXL's agent API is thread-safe (nixl-sys's `Agent` is `Send + Sync`).
unsafe impl Send for Owned<(XferDlistHandle, XferDlistHandle)> {}
// SAFETY: a notification map is a plain container NIXL fills and clears on whichever thread calls it; the
// owning half is its only user.
unsafe impl Send for Owned<NotificationMap> {}

/// Fail before connecting when NIXL's library cannot be found or loaded.
fn check() -> Result<()> {
    library::load().map(|_| ())
}
