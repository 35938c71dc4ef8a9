//! NVIDIA NIXL as a transport: each end creates an agent with the UCX backend and registers its whole buffer once
//! (outside every timed interval); the receiver offers its agent's metadata, the sender loads it and moves a
//! transfer as one NIXL WRITE request holding a descriptor per write (a paged transfer: one per piece), posted and
//! polled to completion. The request of a case is made once and posted again every rep, as a connector reuses its
//! prepared transfer. NIXL is loaded at run time (see `library`): kvxfer starts without it and says what to
//! install. The target cannot see the bytes arrive: the sender announces each rep (`Landing::Announced`).

mod library;

use super::{Context, Source, Target, TransferExtras, TransferHooks, TransferTimes, TransportDetail};
use crate::mem::Buffer;
use crate::plan::Write;
use anyhow::{anyhow, bail, Context as _, Result};
use nixl_sys::{
    Agent, AgentConfig, Backend, MemType, MemoryRegion, NixlDescriptor, RegistrationHandle, XferDescList, XferOp,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Contiguous transfers as 64 MiB writes, like the other host transports; UCX splits them as it likes.
pub const DEFAULT_BLOCK_SIZE: u64 = 64 << 20;
const BACKEND: &str = "UCX";
/// How often a transfer's poll loop looks at the control connection and the clock.
const PEER_CHECK: Duration = Duration::from_millis(20);
/// The receiver agent's progress thread sleeps this long between rounds. NIXL's default is 0: a thread spinning on
/// a core for as long as the agent lives, which on a small host halved every other transport's rate in the same
/// sweep (raw tcp 2.1 → 0.8–1.0 GB/s on the 2-core VM). The sender needs none: its poll loop drives its requests.
const RECEIVER_PROGRESS_DELAY_US: u64 = 100;

/// `transport_detail` of a nixl run.
#[derive(Debug, Clone, Serialize)]
pub struct NixlDetail {
    pub sender: NixlSenderDetail,
}

#[derive(Debug, Clone, Serialize)]
pub struct NixlSenderDetail {
    pub engine: &'static str,
    pub backend: &'static str,
    pub op: &'static str,
    /// The receiver agent's progress thread pause (µs); the sender's agent has no progress thread.
    pub receiver_progress_delay_us: u64,
    /// The C API library loaded.
    pub library: String,
    /// Environment kvxfer set for NIXL and UCX (only what was unset), and the UCX_* the run had.
    pub env: BTreeMap<String, String>,
}

#[derive(Serialize, Deserialize)]
struct Offer {
    /// The receiver agent's metadata (hex), for `load_remote_md`.
    metadata: String,
    addr: u64,
    region_len: u64,
}

/// A buffer's host bytes as NIXL registers them (DRAM, device 0). Holds no reference to the bytes: NIXL and UCX
/// write them, and kvxfer reads them only through volatile loads.
#[derive(Debug)]
struct HostBytes {
    addr: usize,
    len: usize,
}

impl MemoryRegion for HostBytes {
    unsafe fn as_ptr(&self) -> *const u8 {
        self.addr as *const u8
    }

    fn size(&self) -> usize {
        self.len
    }
}

impl NixlDescriptor for HostBytes {
    fn mem_type(&self) -> MemType {
        MemType::Dram
    }

    fn device_id(&self) -> u64 {
        0
    }
}

/// An agent of this process with the UCX backend and `buf` registered. Agent names must differ between the agents
/// that talk (a sweep has both ends in one process).
struct Engine {
    // Drop order: the registration before the agent.
    _reg: RegistrationHandle,
    // Kept for the life of the agent that created it.
    _backend: Backend,
    agent: Agent,
    loaded: &'static library::Loaded,
}

fn nixl(what: &str) -> impl Fn(nixl_sys::NixlError) -> anyhow::Error + '_ {
    move |e| anyhow!("nixl {what}: {e}")
}

impl Engine {
    /// An agent for `role`; `progress` gives it NIXL's progress thread, pausing that many µs between rounds.
    fn start(role: &str, buf: &Buffer, progress: Option<u64>) -> Result<Engine> {
        let Some(base) = buf.host_ptr() else {
            return Err(crate::error::usage(format!(
                "--transport nixl moves host memory here ({} given); use --mem host (GPU memory is not wired up yet)",
                buf.kind()
            )));
        };
        let loaded = library::load()?;
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!("kvxfer-{role}-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed));
        let config = AgentConfig {
            enable_prog_thread: progress.is_some(),
            pthr_delay_us: progress.unwrap_or(0),
            ..AgentConfig::default()
        };
        let agent = Agent::new_configured(&name, &config).map_err(nixl("agent"))?;
        let (_mems, params) =
            agent.get_plugin_params(BACKEND).map_err(nixl("UCX plugin (is NIXL_PLUGIN_DIR right?)"))?;
        let backend = agent.create_backend(BACKEND, &params).map_err(nixl("UCX backend"))?;
        let region = HostBytes { addr: base as usize, len: buf.len() };
        let reg = agent.register_memory(&region, None).map_err(nixl("register_memory"))?;
        Ok(Engine { _reg: reg, _backend: backend, agent, loaded })
    }
}

/// Fail before connecting when NIXL's library cannot be found or loaded.
pub fn check() -> Result<()> {
    library::load().map(|_| ())
}

// ------------------------------------------------------------------------------------------------ receiver

pub struct NixlTarget {
    engine: Engine,
    _buf: Arc<Buffer>,
}

impl NixlTarget {
    pub fn open(buf: Arc<Buffer>, _ctx: &Context) -> Result<NixlTarget> {
        let engine = Engine::start("receiver", &buf, Some(RECEIVER_PROGRESS_DELAY_US))?;
        Ok(NixlTarget { engine, _buf: buf })
    }
}

impl Target for NixlTarget {
    fn offer(&self) -> serde_json::Value {
        let metadata = self.engine.agent.get_local_md().map(hex::encode).unwrap_or_default();
        let addr = self._buf.host_ptr().map_or(0, |p| p as u64);
        serde_json::to_value(Offer { metadata, addr, region_len: self._buf.len() as u64 }).expect("offer serializes")
    }
}

// ------------------------------------------------------------------------------------------------ sender

/// A prepared WRITE of one case's writes, posted again every rep (the request holds its own copy of the
/// descriptor lists it was made from).
struct Prepared {
    writes: Vec<Write>,
    request: nixl_sys::XferRequest,
}

pub struct NixlSource {
    prepared: Option<Prepared>,
    remote_agent: String,
    remote: Offer,
    base: u64,
    io_timeout: Duration,
    engine: Engine,
}

impl NixlSource {
    pub fn connect(buf: &Buffer, offer: serde_json::Value, ctx: &Context) -> Result<NixlSource> {
        let remote: Offer = serde_json::from_value(offer).context("the receiver's nixl offer is malformed")?;
        let engine = Engine::start("sender", buf, None)?;
        let md = hex::decode(&remote.metadata).context("the receiver's nixl metadata is malformed")?;
        let remote_agent = engine.agent.load_remote_md(&md).map_err(nixl("load_remote_md"))?;
        let base = buf.host_ptr().map_or(0, |p| p as u64);
        Ok(NixlSource { prepared: None, remote_agent, remote, base, io_timeout: ctx.timeouts.io, engine })
    }

    /// The request for `writes`: the prepared one when the writes are the same as last time.
    fn prepare(&mut self, writes: &[Write]) -> Result<&Prepared> {
        if self.prepared.as_ref().is_some_and(|p| p.writes == writes) {
            return Ok(self.prepared.as_ref().expect("checked"));
        }
        self.prepared = None;
        let mut local = XferDescList::new(MemType::Dram).map_err(nixl("descriptor list"))?;
        let mut remote = XferDescList::new(MemType::Dram).map_err(nixl("descriptor list"))?;
        for w in writes {
            if w.remote_offset + w.len > self.remote.region_len {
                bail!("a write of {} bytes at offset {} falls outside the receiver's region", w.len, w.remote_offset);
            }
            local.add_desc((self.base + w.local_offset) as usize, w.len as usize, 0);
            remote.add_desc((self.remote.addr + w.remote_offset) as usize, w.len as usize, 0);
        }
        let request = self
            .engine
            .agent
            .create_xfer_req(XferOp::Write, &local, &remote, &self.remote_agent, None)
            .map_err(nixl("create_xfer_req"))?;
        Ok(self.prepared.insert(Prepared { writes: writes.to_vec(), request }))
    }
}

impl Source for NixlSource {
    fn answer(&self) -> serde_json::Value {
        serde_json::json!({})
    }

    fn describe(&self) -> TransportDetail {
        let mut env = self.engine.loaded.env.clone();
        for (k, v) in std::env::vars().filter(|(k, _)| k.starts_with("UCX_")) {
            env.entry(k).or_insert(v);
        }
        TransportDetail::Nixl(NixlDetail {
            sender: NixlSenderDetail {
                engine: "nixl",
                backend: BACKEND,
                op: "write",
                receiver_progress_delay_us: RECEIVER_PROGRESS_DELAY_US,
                library: self.engine.loaded.path.display().to_string(),
                env,
            },
        })
    }

    fn transfer(&mut self, _mem: &Buffer, writes: &[Write], hooks: &mut TransferHooks) -> Result<TransferTimes> {
        let timeout = self.io_timeout;
        self.prepare(writes)?;
        let p = self.prepared.as_ref().expect("just prepared");
        let agent = &self.engine.agent;
        let started = Instant::now();
        agent.post_xfer_req(&p.request, None).map_err(nixl("post_xfer_req"))?;
        // Busy-poll, as a connector's progress loop does (the request completes as a whole), looking at the control
        // connection now and then for a receiver that died.
        let mut checked = started;
        loop {
            match agent.get_xfer_status(&p.request).map_err(nixl("transfer"))? {
                nixl_sys::XferStatus::Success => break,
                nixl_sys::XferStatus::InProgress => {}
            }
            if checked.elapsed() > PEER_CHECK {
                checked = Instant::now();
                if started.elapsed() > timeout {
                    bail!("the nixl transfer did not complete within --io-timeout ({:.0} s)", timeout.as_secs_f64());
                }
                if (hooks.peer_failed)() {
                    bail!("the receiver hung up or reported an error on the control connection mid-transfer");
                }
            }
        }
        let done = Instant::now();
        for i in 0..writes.len() {
            (hooks.done)(i, started, done);
        }
        let extras = TransferExtras { descriptors: Some(writes.len() as u64), ..TransferExtras::default() };
        Ok(TransferTimes { extras, ..TransferTimes::new(started, done) })
    }
}
