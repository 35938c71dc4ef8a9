//! CUDA copies between buffers of one host: NVLink/PCIe peer copies between GPUs, and pinned host ↔ GPU.
//!
//! The region is the receiver's buffer, exported as a CUDA IPC handle (or, when both ends run in one process as in
//! `sweep`, its address directly); a write is one `cuMemcpyAsync` (copy engine) or one launch of the SM copy kernel
//! on one of `--streams` streams; completion is a CUDA event, so `transfer_ms` is GPU time from the first copy's
//! start to the last copy's end. The receiver cannot see copies land, so the sender tells it with a control
//! message once its events completed. `kvxfer latency` pings a persistent kernel on one GPU (see `pingpong`).

mod config;
mod extras;
mod live;
mod peer_pingpong;
mod pingpong;
mod staging;

use super::api::{HasKnobs, Context, Landing, Source, Target, TransferHooks, TransferTimes, Transport};
use super::{TransportDetail, Unusable};
use crate::measure::{CaseExtras, ExtrasNote, ExtrasNotes, Fields, Warning};
use crate::mem::cuda::{self, check, context, enable_peer_access, IpcMapping, OrDriverError};
use crate::mem::{kernels, Buffer, MemKind};
use crate::plan::{RunConfig, TransportConfig, Write};
use anyhow::{bail, Context as _, Result};
pub use config::{CopyMode, CudaConfig, Staging};
use cudarc::driver::{sys, CudaContext, CudaEvent, CudaStream};
pub use extras::StagedMs;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One call per transfer unless the user asks for blocks: a single copy is the fastest on NVLink (measured).
pub const DEFAULT_BLOCK_SIZE: u64 = 1 << 40;
/// Per-write events are recorded for at most this many writes (per-block latency); beyond, only the total.
const MAX_TIMED_WRITES: usize = 1024;

/// The cuda transport, as the registry lists it: copies within one host, GPU memory at one end at least; the
/// receiver cannot see copies land, so the sender announces it.
pub struct Cuda;

impl HasKnobs for Cuda {
    type Knobs = CudaConfig;
}

impl Transport for Cuda {
    fn default_block_size(&self, _cfg: &TransportConfig) -> u64 {
        DEFAULT_BLOCK_SIZE
    }

    /// On one host a GPU's memory is reached by CUDA copies (pinned or pageable host memory to and from it
    /// included), and tcp cannot read or write it at all.
    fn picked_by_auto(&self, ends: &[MemKind]) -> Option<&'static str> {
        let gpus = ends.iter().filter(|k| matches!(k, MemKind::Gpu(_))).count();
        match (gpus, ends.len()) {
            (0, _) => None,
            (1, 1) => Some("the buffer is on a GPU"),
            (g, n) if g == n => Some("both ends are GPUs"),
            _ => Some("host and GPU memory on one host move by CUDA copies"),
        }
    }

    fn check_host(&self, _devices: &[&super::DeviceChoice]) -> Result<()> {
        cuda::driver().map(drop).map_err(|e| e.context("--transport cuda"))
    }

    fn usable_here(&self) -> std::result::Result<(), Unusable> {
        usable()
    }

    fn landing(&self, _cfg: &TransportConfig) -> Landing {
        Landing::Announced
    }

    /// A copy goes either way between the two buffers of one host: host to GPU and GPU to host at once are two.
    fn reverses(&self) -> bool {
        true
    }

    /// Its offer names the buffer's `len`.
    fn offered_region(&self, offer: &serde_json::Value) -> Option<u64> {
        offer.get("len")?.as_u64()
    }

    fn open_target(&self, _cfg: &RunConfig, buf: Arc<Buffer>, _ctx: &Context) -> Result<Box<dyn Target>> {
        Ok(Box::new(CudaTarget::open(buf)?))
    }

    fn connect_source(
        &self,
        cfg: &RunConfig,
        buf: &Buffer,
        offer: serde_json::Value,
        ctx: &Context,
    ) -> Result<Box<dyn Source>> {
        let knobs = cfg.transport.knobs::<CudaConfig>()?;
        Ok(Box::new(CudaSource::connect(&knobs, cfg, buf, offer, ctx)?))
    }

    fn summarize(&self, reps: &[&Fields]) -> (Fields, Vec<Warning>) {
        extras::summarize(reps)
    }

    /// Host ↔ GPU on one GPU: the host pings a persistent kernel through mapped pinned memory.
    fn ping_pong(&self) -> Option<&dyn super::PingPong> {
        Some(&pingpong::CudaPingPong)
    }
}

impl ExtrasNotes for Cuda {
    fn notes(&self, cases: &[CaseExtras<'_>]) -> Vec<ExtrasNote> {
        extras::notes(cases)
    }

    fn inline(&self, case: &CaseExtras<'_>) -> Vec<String> {
        extras::staged_text(case).into_iter().collect()
    }
}

/// Whether the cuda transport can run here: a CUDA driver that initialises and at least one GPU.
fn usable() -> std::result::Result<(), Unusable> {
    if !cuda::driver_present() {
        return Err(Unusable::new(
            "no CUDA driver (libcuda.so.1)",
            "libcuda.so.1 not found: install the NVIDIA driver",
        ));
    }
    match cuda::device_count() {
        Err(e) => Err(Unusable::new("CUDA driver unusable", format!("{e:#}"))),
        Ok(0) => Err(Unusable::new("no GPU", "the CUDA driver sees no GPU")),
        Ok(_) => Ok(()),
    }
}

#[derive(Serialize, Deserialize)]
struct Offer {
    boot_id: String,
    pid: u32,
    mem: String,
    ordinal: Option<u32>,
    ipc_handle: Option<String>,
    addr: u64,
    len: u64,
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id").map(|s| s.trim().to_string()).unwrap_or_default()
}

pub struct CudaTarget {
    buf: Arc<Buffer>,
}

impl CudaTarget {
    pub fn open(buf: Arc<Buffer>) -> Result<CudaTarget> {
        cuda::driver()?;
        Ok(CudaTarget { buf })
    }
}

impl Target for CudaTarget {
    fn offer(&self) -> serde_json::Value {
        let (ordinal, ipc) = match &*self.buf {
            Buffer::Gpu(g) => (Some(g.ordinal()), g.ipc_handle().ok().map(hex::encode)),
            _ => (None, None),
        };
        serde_json::to_value(Offer {
            boot_id: boot_id(),
            pid: std::process::id(),
            mem: self.buf.kind().to_string(),
            ordinal,
            ipc_handle: ipc,
            addr: self.buf.cuda_addr(),
            len: self.buf.len() as u64,
        })
        .expect("offer serializes")
    }
}

/// `transport_detail` of a cuda run: the copy the sender actually uses (`--copy batch` falls back to `ce` on an
/// old driver) on which GPU.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CudaDetail {
    pub sender: CudaSenderDetail,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct CudaSenderDetail {
    pub gpu: u32,
    pub streams: usize,
    pub copy: CopyMode,
    pub staging: Staging,
}

/// The copy `--copy` gets on this driver: `batch` needs cuMemcpyBatchAsync (driver 12.8 or newer) and is `ce`
/// without it (said once on stderr; `describe` records the copy in use).
fn copy_in_use(copy: CopyMode) -> Result<CopyMode> {
    Ok(match copy {
        CopyMode::Batch => {
            let v = cuda::driver()?;
            if v < 12080 {
                // What an engine does on such a driver: one cuMemcpyAsync per piece. Say so; `describe` records it.
                crate::errln!(
                    "note: --copy batch: cuMemcpyBatchAsync needs CUDA driver 12.8 or newer, this one is {}.{}; copying each write with cuMemcpyAsync instead",
                    v / 1000,
                    v % 1000 / 10
                );
                CopyMode::Ce
            } else {
                CopyMode::Batch
            }
        }
        other => other,
    })
}

/// Above this many writes in a transfer, `auto` copies with one SM kernel: per-write copies cost a few µs each,
/// which caps 16 KiB pieces at ~6 GB/s on H200 NVLink while the kernel moves them at ~370 GB/s (measured).
const AUTO_SM_WRITES: usize = 64;

pub struct CudaSource {
    ctx: Arc<CudaContext>,
    ordinal: u32,
    streams: Vec<Arc<CudaStream>>,
    /// The copy in use: `--copy`, except `batch` on a driver without cuMemcpyBatchAsync (then `ce`).
    engine: CopyMode,
    dst: u64,
    dst_len: u64,
    start: CudaEvent,
    end: CudaEvent,
    joins: Vec<CudaEvent>,
    marks: Vec<(CudaEvent, CudaEvent)>,
    /// `--staging gather`: the destination GPU's half and both staging buffers.
    staging: Option<staging::Staging>,
    // Kept open for as long as we write into the receiver's buffer.
    _mapping: Option<IpcMapping>,
}

impl CudaSource {
    pub fn connect(
        knobs: &CudaConfig,
        cfg: &RunConfig,
        src: &Buffer,
        offer: serde_json::Value,
        _ctx: &Context,
    ) -> Result<CudaSource> {
        cuda::driver()?;
        let offer: Offer = serde_json::from_value(offer).context("the receiver's cuda offer is malformed")?;
        if offer.boot_id != boot_id() {
            return Err(crate::error::usage(
                "--transport cuda needs both ends on the same host, but the receiver runs on another machine; use --transport tcp (or verbs) between hosts",
            ));
        }
        let src_gpu = match src.kind() {
            MemKind::Gpu(n) => Some(n),
            _ => None,
        };
        // Copies are issued on the GPU that owns the source, else on the destination GPU (pinned → GPU).
        let Some(ordinal) = src_gpu.or(offer.ordinal) else {
            return Err(crate::error::usage(format!(
                "--transport cuda needs a GPU on at least one end (sender {}, receiver {}); put one on gpu:N (sweep --src/--dst, serve/send --mem)",
                src.kind(),
                offer.mem
            )));
        };
        let ctx = context(ordinal)?;
        let staged = knobs.staging == Staging::Gather;
        let staging_dst = match (staged, src_gpu, offer.ordinal) {
            (false, ..) => None,
            (true, Some(_), Some(d)) => Some(d),
            (true, ..) => {
                return Err(crate::error::usage(format!(
                    "--staging gather needs GPU memory on both ends (sender {}, receiver {}); put both on gpu:N (sweep --src/--dst, serve/send --mem)",
                    src.kind(),
                    offer.mem
                )))
            }
        };
        let same_process = offer.pid == std::process::id();
        if let Some(d) = offer.ordinal.filter(|&d| d != ordinal && (same_process || staged)) {
            enable_peer_access(&ctx, &context(d)?)?;
            enable_peer_access(&context(d)?, &ctx)?;
        }
        let (dst, mapping) = if same_process {
            (offer.addr, None)
        } else {
            let Some(h) = &offer.ipc_handle else {
                return Err(crate::error::usage(format!(
                    "the receiver's buffer is {} memory; --transport cuda between two processes needs `kvxfer serve --mem gpu:N`",
                    offer.mem
                )));
            };
            let bytes: [u8; 64] = hex::decode(h)
                .context("malformed IPC handle")?
                .try_into()
                .map_err(|_| anyhow::anyhow!("IPC handle is not 64 bytes"))?;
            // Staged, the unpack kernel runs on the receiver's GPU: map its pool in that GPU's context.
            let m = IpcMapping::open(&context(staging_dst.unwrap_or(ordinal))?, &bytes)?;
            (m.ptr(), Some(m))
        };
        let staging = staging_dst.map(|d| staging::Staging::new(ordinal, d)).transpose()?;
        ctx.bind_to_thread().or_cuda("cuCtxSetCurrent")?;
        // The SM copy kernel reaches memory through device-visible addresses, which pageable host memory lacks (it
        // faults with an illegal address): with a `host` end, pieces go through the copy engine instead.
        let pageable = src.kind() == MemKind::Host || offer.mem == MemKind::Host.to_string();
        let engine = match (copy_in_use(knobs.copy)?, pageable) {
            (CopyMode::Sm, true) => {
                return Err(crate::error::usage(format!(
                    "--copy sm needs device-visible memory at both ends, but one end is pageable host memory (sender {}, receiver {}); use pinned (sweep --src/--dst, serve/send --mem) or --copy ce",
                    src.kind(),
                    offer.mem
                )))
            }
            (CopyMode::Auto, true) => CopyMode::Ce,
            (engine, _) => engine,
        };
        if matches!(engine, CopyMode::Sm | CopyMode::Auto) {
            kernels::kernels(ordinal)?; // compile before the first timed rep
        }
        let timing = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        let streams =
            (0..cfg.knobs.streams).map(|_| ctx.new_stream().or_cuda("cuStreamCreate")).collect::<Result<Vec<_>>>()?;
        let joins = (0..cfg.knobs.streams)
            .map(|_| ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)).or_cuda("cuEventCreate"))
            .collect::<Result<Vec<_>>>()?;
        Ok(CudaSource {
            start: ctx.new_event(timing).or_cuda("cuEventCreate")?,
            end: ctx.new_event(timing).or_cuda("cuEventCreate")?,
            ctx,
            ordinal,
            streams,
            engine,
            dst,
            dst_len: offer.len,
            joins,
            marks: Vec::new(),
            staging,
            _mapping: mapping,
        })
    }

    fn enqueue(&self, stream: &CudaStream, dst: u64, src: u64, len: u64) -> Result<()> {
        match self.engine {
            CopyMode::Ce | CopyMode::Auto | CopyMode::Batch => {
                // SAFETY: both ranges were bounds-checked against their buffers by the caller; with unified
                // addressing the driver resolves host, local and peer pointers; the stream belongs to the current
                // context.
                check(unsafe { sys::cuMemcpyAsync(dst, src, len as usize, stream.cu_stream()) }, "cuMemcpyAsync")
            }
            CopyMode::Sm => kernels::kernels(self.ordinal)?.copy(stream, dst, src, len),
        }
    }
}

impl CudaSource {
    /// Record the end event on stream 0 and turn the GPU-timed interval into sender-clock times (`posted` = when
    /// the start event was recorded).
    fn finish_on_stream0(&self, posted: Instant) -> Result<TransferTimes> {
        self.end.record(&self.streams[0]).or_cuda("cuEventRecord")?;
        let total_ms = self.start.elapsed_ms(&self.end).or_cuda("cuEventElapsedTime")? as f64;
        Ok(TransferTimes::new(posted, posted + Duration::from_secs_f64(total_ms.max(0.0) / 1e3)))
    }

    /// `--copy sm` with many writes (a paged layout): one kernel launch copies every piece, instead of one copy or
    /// launch per piece whose fixed cost (a few µs) dwarfs a 16 KiB piece. The piece table is uploaded before the
    /// start event, so only the copy is timed; per-piece latency is not observable inside one kernel.
    fn transfer_pieces(&mut self, src: u64, writes: &[Write]) -> Result<TransferTimes> {
        let k = kernels::kernels(self.ordinal)?;
        let s0 = &self.streams[0];
        let pieces: Vec<[u64; 3]> = writes.iter().map(|w| [w.local_offset, w.remote_offset, w.len]).collect();
        let table = k.upload_pieces(s0, &pieces)?;
        let posted = Instant::now();
        self.start.record(s0).or_cuda("cuEventRecord")?;
        k.copy_pieces(s0, self.dst, src, &table, pieces.len() as u64)?;
        self.finish_on_stream0(posted)
    }
}

impl CudaSource {
    /// `--staging gather`: pack, one contiguous copy, unpack (see `staging`); the transfer time is the whole
    /// chain and `staged` splits it.
    fn transfer_staged(&mut self, src: u64, writes: &[Write]) -> Result<TransferTimes> {
        let staging = self.staging.as_mut().expect("checked by the caller");
        let s = staging::SourceStream {
            stream: &self.streams[0],
            start: &self.start,
            sm_copy: self.engine == CopyMode::Sm,
        };
        let posted = Instant::now();
        staging.enqueue(&s, src, self.dst, writes)?;
        let staged = Some(self.staging.as_ref().expect("checked by the caller").split(&self.start)?);
        Ok(self.finish_on_stream0(posted)?.with_extras(&extras::RepExtras { staged }))
    }

    /// `--copy batch`: every write in cuMemcpyBatchAsync calls (the driver's own batching of copy-engine work), for
    /// comparison with one copy per write and with the SM piece kernel. The address arrays are built before the
    /// start event; only the calls and the copies are timed.
    fn transfer_batch(&mut self, src: u64, writes: &[Write]) -> Result<TransferTimes> {
        /// Copies per call: bounds the arrays handed to the driver in one go.
        const PER_CALL: usize = 1 << 16;
        let mut dsts: Vec<u64> = writes.iter().map(|w| self.dst + w.remote_offset).collect();
        let mut srcs: Vec<u64> = writes.iter().map(|w| src + w.local_offset).collect();
        let mut sizes: Vec<usize> = writes.iter().map(|w| w.len as usize).collect();
        // SAFETY: CUmemcpyAttributes is a plain C struct; all-zero means no location hints and no flags.
        let mut attr: sys::CUmemcpyAttributes = unsafe { std::mem::zeroed() };
        attr.srcAccessOrder = sys::CUmemcpySrcAccessOrder::CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
        let mut attr_idx = [0usize];
        let s0 = &self.streams[0];
        let posted = Instant::now();
        self.start.record(s0).or_cuda("cuEventRecord")?;
        let mut off = 0;
        while off < writes.len() {
            let n = PER_CALL.min(writes.len() - off);
            // SAFETY: the three arrays hold `writes.len()` entries and outlive the call (the driver reads them
            // during it: source access order STREAM); every range was checked against both buffers; the stream
            // belongs to the current context.
            let r = unsafe {
                sys::cuMemcpyBatchAsync_v2(
                    dsts.as_mut_ptr().add(off),
                    srcs.as_mut_ptr().add(off),
                    sizes.as_mut_ptr().add(off),
                    n,
                    &mut attr,
                    attr_idx.as_mut_ptr(),
                    1,
                    s0.cu_stream(),
                )
            };
            check(r, "cuMemcpyBatchAsync")?;
            off += n;
        }
        self.finish_on_stream0(posted)
    }
}

impl Source for CudaSource {
    fn answer(&self) -> serde_json::Value {
        serde_json::json!({ "gpu": self.ordinal, "streams": self.streams.len() })
    }

    fn describe(&self) -> TransportDetail {
        TransportDetail::of(&CudaDetail {
            sender: CudaSenderDetail {
                gpu: self.ordinal,
                streams: self.streams.len(),
                copy: self.engine,
                staging: if self.staging.is_some() { Staging::Gather } else { Staging::None },
            },
        })
    }

    fn transfer(&mut self, mem: &Buffer, writes: &[Write], hooks: &mut TransferHooks) -> Result<TransferTimes> {
        self.ctx.bind_to_thread().or_cuda("cuCtxSetCurrent")?;
        let timed = writes.len() <= MAX_TIMED_WRITES;
        if timed {
            while self.marks.len() < writes.len() {
                let ev = || self.ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)).or_cuda("cuEventCreate");
                self.marks.push((ev()?, ev()?));
            }
        }
        let src = mem.cuda_addr();
        for (i, w) in writes.iter().enumerate() {
            if w.local_offset + w.len > mem.len() as u64 || w.remote_offset + w.len > self.dst_len {
                bail!("write {i} falls outside a buffer (a planning bug)");
            }
        }
        if self.staging.is_some() {
            return self.transfer_staged(src, writes);
        }
        if self.engine == CopyMode::Batch {
            return self.transfer_batch(src, writes);
        }
        let many = writes.len() > AUTO_SM_WRITES;
        if (self.engine == CopyMode::Sm && writes.len() > 1) || (self.engine == CopyMode::Auto && many) {
            return self.transfer_pieces(src, writes);
        }
        let s0 = &self.streams[0];
        let posted = Instant::now();
        self.start.record(s0).or_cuda("cuEventRecord")?;
        for s in &self.streams[1..] {
            s.wait(&self.start).or_cuda("cuStreamWaitEvent")?;
        }
        for (i, w) in writes.iter().enumerate() {
            let s = &self.streams[i % self.streams.len()];
            if timed {
                self.marks[i].0.record(s).or_cuda("cuEventRecord")?;
            }
            self.enqueue(s, self.dst + w.remote_offset, src + w.local_offset, w.len)?;
            if timed {
                self.marks[i].1.record(s).or_cuda("cuEventRecord")?;
            }
        }
        for (k, s) in self.streams.iter().enumerate().skip(1) {
            self.joins[k].record(s).or_cuda("cuEventRecord")?;
            s0.wait(&self.joins[k]).or_cuda("cuStreamWaitEvent")?;
        }
        self.end.record(s0).or_cuda("cuEventRecord")?;
        let total_ms = self.start.elapsed_ms(&self.end).or_cuda("cuEventElapsedTime")? as f64;
        let at = |ms: f64| posted + Duration::from_secs_f64(ms.max(0.0) / 1e3);
        if timed {
            for (i, (a, b)) in self.marks.iter().take(writes.len()).enumerate() {
                let began = self.start.elapsed_ms(a).or_cuda("cuEventElapsedTime")? as f64;
                let ended = self.start.elapsed_ms(b).or_cuda("cuEventElapsedTime")? as f64;
                (hooks.done)(i, at(began), at(ended));
            }
        }
        Ok(TransferTimes::new(posted, at(total_ms)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::{OwnKnobs, ResultsKnobs, TransportKind, TransportKnobs};

    #[test]
    fn details_serialize_as_results_files_hold_them() {
        let sender = CudaSenderDetail { gpu: 1, streams: 2, copy: CopyMode::Ce, staging: Staging::Gather };
        let json = r#"{"sender":{"copy":"ce","gpu":1,"staging":"gather","streams":2}}"#;
        assert_eq!(TransportDetail::of(&CudaDetail { sender }).to_json().to_string(), json);
    }

    #[test]
    fn its_knobs_travel_as_one_object_and_results_keep_them_at_the_top() {
        let cfg = TransportConfig::of(&CudaConfig { copy: CopyMode::Sm, staging: Staging::Gather });
        assert_eq!(serde_json::to_string(&cfg).unwrap(), r#"{"name":"cuda","knobs":{"copy":"sm","staging":"gather"}}"#);
        let keys = Cuda.results_knobs(&cfg);
        assert_eq!((keys.copy.as_str(), keys.staging.as_str(), keys.verbs), ("sm", "gather", None));
        // Every other transport writes cuda's defaults there.
        let defaults = Cuda.results_knobs(&Cuda.default_knobs());
        assert_eq!(defaults, ResultsKnobs::default());
        let names: Vec<&str> = <CopyMode as crate::named::Named>::NAMES.to_vec();
        assert_eq!(names, ["auto", "ce", "batch", "sm"]);
    }

    #[test]
    fn staging_needs_this_transport_and_a_gpu_source() {
        let gather = CudaConfig { staging: Staging::Gather, ..CudaConfig::default() };
        gather.check_flags(TransportKind::Cuda, MemKind::Gpu(0)).unwrap();
        let e = gather.check_flags(TransportKind::Cuda, MemKind::Pinned).unwrap_err().to_string();
        assert!(e.ends_with("not --transport cuda from pinned memory"), "{e}");
        let tcp: TransportKind = "tcp".parse().unwrap();
        let e = gather.check_flags(tcp, MemKind::Gpu(0)).unwrap_err().to_string();
        assert!(e.ends_with("not --transport tcp from gpu:0 memory"), "{e}");
        CudaConfig::default().check_flags(tcp, MemKind::Host).unwrap();
    }
}
