//! Mooncake Transfer Engine as a transport, driven exactly as vLLM's Mooncake connector drives it: each end's
//! engine is initialized with the P2P handshake (`initialize(host, "P2PHANDSHAKE", protocol, devices)`), registers
//! the whole buffer once (outside every timed interval), and the sender moves a transfer with one
//! `batch_transfer_sync_write(session, srcs, dsts, lens)` holding one entry per run of writes that are adjacent on
//! both ends (the connector's `group_concurrent_contiguous`; a paged transfer: one per piece unless neighbours
//! line up). The engine lives in a Python worker per end (see `worker`), because the wheel has no C API; host
//! buffers are memory files both processes map, GPU buffers are opened in the worker through a CUDA IPC handle, so
//! kvxfer fills and verifies the very bytes the engine moves. The engine's
//! own call is what is timed (inside the worker), so the harness is not what is measured. The target cannot see
//! the bytes arrive: the sender announces each rep (`Landing::Announced`).

mod config;
mod worker;

use super::api::{HasKnobs, Context, Landing, Source, Target, TransferHooks, TransferTimes, Transport};
use super::batch::{self, Batch};
use super::{TransportDetail, Unusable};
use crate::measure::{ExtrasNotes, Fields, Warning};
use crate::mem::{Buffer, HostSharing, MemKind};
use crate::plan::{RunConfig, TransportConfig, Write};
use anyhow::{anyhow, bail, Context as _, Result};
pub use config::{MooncakeConfig, MooncakeEntries, MooncakeProtocol};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use worker::Worker;

/// The mooncake transport, as the registry lists it: the engine lives in a worker process per end, which moves
/// this process's host memory (shared) and allocates its GPU memory; the sender announces each rep.
pub struct Mooncake;

impl ExtrasNotes for Mooncake {}

impl HasKnobs for Mooncake {
    type Knobs = MooncakeConfig;
}

impl Transport for Mooncake {
    fn default_block_size(&self, _cfg: &TransportConfig) -> u64 {
        DEFAULT_BLOCK_SIZE
    }

    // The engine's worker checks Python and the wheel when it starts, before any rep: no `check_host`.

    /// The Python that `KVXFER_PYTHON` names imports the engine.
    fn usable_here(&self) -> std::result::Result<(), Unusable> {
        worker::probe().map_err(|(reason, e)| Unusable::new(reason, e))
    }

    fn landing(&self, _cfg: &TransportConfig) -> Landing {
        Landing::Announced
    }

    fn host_sharing(&self) -> HostSharing {
        HostSharing::Shared
    }

    fn drives_rdma(&self, cfg: &TransportConfig) -> bool {
        cfg.knobs::<MooncakeConfig>().is_ok_and(|m| m.protocol == MooncakeProtocol::Rdma)
    }

    /// GPU memory comes from the engine's worker (see [`engine_gpu_buffer`]); host memory is allocated here,
    /// shared with the worker.
    fn alloc_buffer(&self, cfg: &RunConfig, kind: MemKind, role: &str, ctx: &Context) -> Result<Buffer> {
        match kind {
            MemKind::Gpu(n) => {
                let knobs = cfg.transport.knobs::<MooncakeConfig>()?;
                engine_gpu_buffer(role, &knobs, n, usize::try_from(cfg.buffer_bytes())?, ctx)
            }
            _ => Buffer::alloc_for(kind, cfg.buffer_bytes(), cfg.knobs.hugepages, self.host_sharing()),
        }
    }

    fn open_target(&self, cfg: &RunConfig, buf: Arc<Buffer>, ctx: &Context) -> Result<Box<dyn Target>> {
        let knobs = cfg.transport.knobs::<MooncakeConfig>()?;
        Ok(Box::new(MooncakeTarget::open(&knobs, buf, ctx)?))
    }

    fn connect_source(&self, cfg: &RunConfig, buf: &Buffer, offer: Value, ctx: &Context) -> Result<Box<dyn Source>> {
        let knobs = cfg.transport.knobs::<MooncakeConfig>()?;
        Ok(Box::new(MooncakeSource::connect(&knobs, buf, offer, ctx)?))
    }

    fn summarize(&self, reps: &[&Fields]) -> (Fields, Vec<Warning>) {
        batch::summarize(reps)
    }
}

/// The default write size of a contiguous transfer: vLLM hands Mooncake one entry per KV block, and at 64 MiB
/// entries the engine's own slicing (64 KiB slices) does the spreading.
pub const DEFAULT_BLOCK_SIZE: u64 = 64 << 20;

/// `transport_detail` of a mooncake run. The entries of each batch (one per run of writes adjacent on both ends)
/// are the reps' and cases' `descriptors`.
#[derive(Debug, Clone, Serialize)]
pub struct MooncakeDetail {
    pub sender: MooncakeSenderDetail,
    pub receiver: MooncakeReceiverDetail,
}

#[derive(Debug, Clone, Serialize)]
pub struct MooncakeSenderDetail {
    pub engine: &'static str,
    /// The wheel's version, as the worker read it.
    pub version: String,
    pub protocol: MooncakeProtocol,
    pub entries: MooncakeEntries,
    /// The devices handed to the engine (rdma), as `-d` named them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub devices: Option<String>,
    /// The interpreter that runs the worker.
    pub python: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct MooncakeReceiverDetail {
    pub version: String,
    /// Its engine's P2P session.
    pub session: String,
}

#[derive(Serialize, Deserialize)]
struct Offer {
    /// The receiver engine's P2P session, `host:rpc_port`.
    session: String,
    /// The receiver's buffer as its engine registered it (the worker's own mapping).
    addr: u64,
    region_len: u64,
    version: String,
}

/// One end's engine: its worker, the worker's `init` reply and the buffer's address as the engine registered it.
/// Shared, because for GPU memory the buffer (which the engine's process allocated) keeps it alive too.
struct Engine {
    worker: Worker,
    init: Value,
    addr: u64,
}

type SharedEngine = Arc<Mutex<Engine>>;

fn lock(engine: &SharedEngine) -> std::sync::MutexGuard<'_, Engine> {
    // A panic elsewhere cannot leave the worker half-updated: every call is one request and its reply.
    engine.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A new worker with its engine initialized on `ctx.local_ip` with the protocol and devices asked for.
fn spawn_engine(role: &str, cfg: &MooncakeConfig, ctx: &Context) -> Result<(Worker, Value)> {
    // The engine reads its RDMA port and GID index from the environment: kvxfer's --ib-port and --gid-index.
    let mut env = vec![("MC_IB_PORT", ctx.device.ib_port.to_string())];
    if let Some(g) = ctx.device.gid_index {
        env.push(("MC_GID_INDEX", g.to_string()));
    }
    let mut w = Worker::spawn(role, &env, ctx.timeouts.io)?;
    let device = ctx.device.names.join(",");
    let init =
        w.call(json!({"op": "init", "host": ctx.local_ip.to_string(), "protocol": cfg.protocol, "device": device}))?;
    Ok((w, init))
}

fn registered_addr(reply: &Value) -> Result<u64> {
    reply["addr"].as_u64().ok_or_else(|| anyhow!("the mooncake worker's reply has no addr"))
}

/// GPU memory for a mooncake run, allocated by the engine's own worker (cudaMalloc, as a serving engine's KV
/// cache is) and registered there; kvxfer opens it through its IPC handle to fill and verify. Mooncake's NVLink
/// transport exports what it registers with cudaIpcGetMemHandle, which memory opened from another process's handle
/// refuses, so the engine's process has to own it.
fn engine_gpu_buffer(role: &str, cfg: &MooncakeConfig, ordinal: u32, len: usize, ctx: &Context) -> Result<Buffer> {
    crate::mem::cuda::check_ordinal(ordinal)?;
    let (mut worker, init) = spawn_engine(role, cfg, ctx)?;
    let reply = worker.call(json!({"op": "alloc", "gpu": ordinal, "len": len}))?;
    let addr = registered_addr(&reply)?;
    let handle: [u8; 64] = reply["ipc"]
        .as_str()
        .and_then(|h| hex::decode(h).ok())
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| anyhow!("the mooncake worker's alloc reply has no 64-byte IPC handle"))?;
    let engine: SharedEngine = Arc::new(Mutex::new(Engine { worker, init, addr }));
    let dev = crate::mem::cuda::DeviceBuffer::import(ordinal, &handle, len, Box::new(engine))?;
    Ok(Buffer::Gpu(dev))
}

/// This end's engine: the one whose worker allocated a GPU buffer, or a new one that maps the host buffer's pages.
fn engine_for(role: &str, cfg: &MooncakeConfig, buf: &Buffer, ctx: &Context) -> Result<SharedEngine> {
    if let Buffer::Gpu(g) = buf {
        return g.keeper().and_then(|k| k.downcast_ref::<SharedEngine>()).cloned().ok_or_else(|| {
            anyhow!("a mooncake GPU buffer must come from its engine's worker (Transport::alloc_buffer)")
        });
    }
    if cfg.protocol == MooncakeProtocol::NvlinkIntra {
        return Err(crate::error::usage(format!(
            "--mooncake-protocol nvlink-intra moves GPU memory only ({} given); use gpu:N on both ends (sweep --src/--dst, serve/send --mem)",
            buf.kind()
        )));
    }
    let Some(path) = buf.share_path() else {
        return Err(crate::error::usage(format!(
            "--transport mooncake moves host or GPU memory ({} given); use host or gpu:N (sweep --src/--dst, serve/send --mem)",
            buf.kind()
        )));
    };
    let (mut worker, init) = spawn_engine(role, cfg, ctx)?;
    let addr = registered_addr(&worker.call(json!({"op": "map", "path": path, "len": buf.len()}))?)?;
    Ok(Arc::new(Mutex::new(Engine { worker, init, addr })))
}

type Value = serde_json::Value;

fn text(v: &Value, key: &str) -> String {
    v[key].as_str().unwrap_or("unknown").to_string()
}

/// The batch's entries: runs of writes adjacent on both ends merged into one, as vLLM's connector groups
/// consecutive blocks (`group_concurrent_contiguous`) before calling the engine.
fn batch_entries(writes: &[Write]) -> Vec<Write> {
    let mut out: Vec<Write> = Vec::with_capacity(writes.len());
    for w in writes {
        match out.last_mut() {
            Some(last)
                if last.local_offset + last.len == w.local_offset
                    && last.remote_offset + last.len == w.remote_offset =>
            {
                last.len += w.len;
            }
            _ => out.push(*w),
        }
    }
    out
}

// ------------------------------------------------------------------------------------------------ receiver

pub struct MooncakeTarget {
    // Drop order: the engine (which has host buffers registered and mapped) before the buffer.
    _engine: SharedEngine,
    offer: Offer,
    _buf: Arc<Buffer>,
}

impl MooncakeTarget {
    pub fn open(cfg: &MooncakeConfig, buf: Arc<Buffer>, ctx: &Context) -> Result<MooncakeTarget> {
        let engine = engine_for("receiver", cfg, &buf, ctx)?;
        let offer = {
            let e = lock(&engine);
            Offer {
                session: text(&e.init, "session"),
                addr: e.addr,
                region_len: buf.len() as u64,
                version: text(&e.init, "version"),
            }
        };
        Ok(MooncakeTarget { _engine: engine, offer, _buf: buf })
    }
}

impl Target for MooncakeTarget {
    fn offer(&self) -> Value {
        serde_json::to_value(&self.offer).expect("offer serializes")
    }
}

// ------------------------------------------------------------------------------------------------ sender

pub struct MooncakeSource {
    engine: SharedEngine,
    remote: Offer,
    detail: MooncakeDetail,
    /// The writes of the plan the worker holds (sent again only when a transfer's writes differ).
    planned: Vec<Write>,
    plan_id: u64,
    /// Entries in the plan's batch.
    entries: u64,
    io_timeout: Duration,
    entries_mode: MooncakeEntries,
}

impl MooncakeSource {
    pub fn connect(cfg: &MooncakeConfig, buf: &Buffer, offer: Value, ctx: &Context) -> Result<MooncakeSource> {
        let remote: Offer = serde_json::from_value(offer).context("the receiver's mooncake offer is malformed")?;
        let engine = engine_for("sender", cfg, buf, ctx)?;
        let (version, python) = {
            let e = lock(&engine);
            (text(&e.init, "version"), e.worker.python.clone())
        };
        let detail = MooncakeDetail {
            sender: MooncakeSenderDetail {
                engine: "mooncake",
                version,
                protocol: cfg.protocol,
                entries: cfg.entries,
                devices: ctx.device.label(),
                python,
            },
            receiver: MooncakeReceiverDetail { version: remote.version.clone(), session: remote.session.clone() },
        };
        Ok(MooncakeSource {
            engine,
            remote,
            detail,
            planned: Vec::new(),
            plan_id: 0,
            entries: 0,
            entries_mode: cfg.entries,
            io_timeout: ctx.timeouts.io,
        })
    }

    /// Hand the worker this transfer's entries, unless it holds them already (every rep of a case repeats them).
    fn plan(&mut self, writes: &[Write]) -> Result<()> {
        if self.plan_id > 0 && self.planned == writes {
            return Ok(());
        }
        if let Some(w) = writes.iter().find(|w| w.remote_offset + w.len > self.remote.region_len) {
            bail!("a write of {} bytes at offset {} falls outside the receiver's region", w.len, w.remote_offset);
        }
        self.plan_id += 1;
        let entries = match self.entries_mode {
            MooncakeEntries::Grouped => batch_entries(writes),
            MooncakeEntries::PerWrite => writes.to_vec(),
        };
        let src: Vec<u64> = entries.iter().map(|w| w.local_offset).collect();
        let dst: Vec<u64> = entries.iter().map(|w| self.remote.addr + w.remote_offset).collect();
        let len: Vec<u64> = entries.iter().map(|w| w.len).collect();
        lock(&self.engine)
            .worker
            .call(json!({"op": "plan", "id": self.plan_id, "src": src, "dst": dst, "len": len}))?;
        self.planned = writes.to_vec();
        self.entries = entries.len() as u64;
        Ok(())
    }

    /// The error for a batch the engine refused, with what its log says about why when it is a known limit.
    fn refused(&self, e: anyhow::Error) -> anyhow::Error {
        let log = std::fs::read_to_string(&lock(&self.engine).worker.log).unwrap_or_default();
        if log.contains("queue-full") {
            return e.context(format!(
                "Mooncake's {} transport queues fewer entries than this batch of {} (its log: \"TCP lane queue-full\"); use fewer, larger pieces (--block-tokens) or --mooncake-protocol rdma",
                self.detail.sender.protocol, self.entries
            ));
        }
        e
    }
}

impl Source for MooncakeSource {
    fn answer(&self) -> Value {
        json!({})
    }

    fn describe(&self) -> TransportDetail {
        TransportDetail::of(&self.detail)
    }

    fn transfer(&mut self, _mem: &Buffer, writes: &[Write], hooks: &mut TransferHooks) -> Result<TransferTimes> {
        self.plan(writes)?;
        let started = Instant::now();
        let request = json!({"op": "write", "session": self.remote.session, "plan": self.plan_id});
        let reply = lock(&self.engine).worker.call_within(request, self.io_timeout, hooks.peer_failed);
        let reply = reply.map_err(|e| self.refused(e))?;
        let ns = reply["ns"].as_u64().ok_or_else(|| anyhow!("the mooncake worker's write reply has no ns"))?;
        // The engine's own call, as the worker timed it: the request's trip through the pipe is not the engine's.
        let done = started + Duration::from_nanos(ns);
        // One synchronous batch: every entry completes with it.
        for i in 0..writes.len() {
            (hooks.done)(i, started, done);
        }
        Ok(TransferTimes::new(started, done).with_extras(&Batch { descriptors: Some(self.entries) }))
    }
}

#[cfg(test)]
mod tests {
    use super::batch_entries;
    use crate::plan::Write;

    fn w(local_offset: u64, remote_offset: u64, len: u64) -> Write {
        Write { local_offset, remote_offset, len }
    }

    #[test]
    fn writes_adjacent_on_both_ends_share_an_entry() {
        // 0+1 adjacent on both sides; 2 is adjacent locally only; 3 follows 2 on both.
        let writes = [w(0, 100, 10), w(10, 110, 10), w(20, 500, 10), w(30, 510, 5), w(40, 515, 1)];
        assert_eq!(batch_entries(&writes), vec![w(0, 100, 20), w(20, 500, 15), w(40, 515, 1)]);
        assert!(batch_entries(&[]).is_empty());
    }
}
