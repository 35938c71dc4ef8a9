//! CUDA's ping-pong for `kvxfer latency`: host ↔ GPU on one GPU (GPU ↔ GPU, `--src gpu:M`, is `peer_pingpong`). The
//! host end (the initiator) is a thread of this process; the GPU end is one persistent kernel (`kernels/pingpong.cu`)
//! that the responder launches on the GPU of its memory (`--dst gpu:N`, default gpu:0).
//!
//! The message goes host → GPU memory: the host writes its mark in the message's last byte in a ping buffer of
//! mapped pinned host memory (the payload lives there, as a producer writing in place would leave it, the way
//! verbs' registered buffer holds it), then its word (the message count) with a release store. Block 0 of the
//! kernel polls that word across PCIe and, on a new one, the blocks the size needs copy the message into device
//! memory, where it lands. The answer goes GPU memory → host: the same blocks copy those bytes into a mapped pong
//! buffer, fence, and the last of them writes the answer word. The host spins on that word (an acquire load, never
//! a slice over memory the GPU writes), then checks the answer's last byte carries its mark. Half the round trip is
//! the one-way latency, as for the other transports.
//!
//! Both ends share one set of buffers, so they must run in one process (`latency` without `--peer`): the offer
//! names it by process and number, and the initiator finds it in [`LIVE`]. Neither end waits forever: the host's
//! spin and the responder's watch give up after `--io-timeout`, naming the end that stopped, and a kernel that
//! failed or ended is reported with CUDA's words.

use super::live::Live;
use super::CudaConfig;
use crate::mem::cuda::{self, check, context, DeviceBuffer, OrDriverError};
use crate::mem::kernels::{self, ResponderArgs};
use crate::mem::mapped::MappedHost;
use crate::mem::MemKind;
use crate::plan::latency::LatencyPlan;
use crate::plan::{TransportConfig, TransportKind};
use crate::transport::api::{Context, PingEnd, PingPong};
use anyhow::{anyhow, bail, Context as _, Result};
use cudarc::driver::{sys, CudaStream};
use serde::{Deserialize, Serialize};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Threads per block of the responder.
const THREADS: u32 = 512;
/// Bytes each block copies of a message, at least: a 16 KiB message is one block's (smaller messages pay for no
/// cross-block count), 1 MiB is spread over 64 blocks, so that enough loads are in flight across PCIe.
const MIN_CHUNK: u64 = 16 << 10;
/// Mapped header: the host's word, the message's size, and the answer word a GPU cache line (128 B) away.
const HOST_WORD: usize = 0;
const SIZE_WORD: usize = 8;
const ANSWER_WORD: usize = 128;
/// The ping buffer starts a page after the header; the pong buffer a page-rounded message after it.
const HEADER: usize = 4096;
/// The word that stops the kernel.
const STOP: u64 = u64::MAX;
/// Spins on the answer word between looks at the clock.
const SPINS_PER_LOOK: u32 = 1 << 10;
/// How often a waiting end asks CUDA whether the kernel still runs.
const QUERY_EVERY: Duration = Duration::from_millis(10);
/// How long dropping the buffers waits for the kernel to see the stop word.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// CUDA's ping-pong, as the registry hands it out.
pub struct CudaPingPong;

impl PingPong for CudaPingPong {
    fn check(&self, plan: &LatencyPlan) -> Result<()> {
        if plan.busy_poll {
            return Err(crate::error::usage(
                "--busy-poll sets how tcp waits for a message; cuda's host end always spins on the GPU's answer word: leave it out",
            ));
        }
        if plan.inline.is_some() {
            return Err(crate::error::usage(
                "--inline sets RDMA inline writes and has no meaning for --transport cuda; leave it out or use --transport verbs",
            ));
        }
        if plan.write_with_imm {
            return Err(crate::error::usage(
                "--write-with-imm sets how RDMA writes announce themselves and has no meaning for --transport cuda; leave it out or use --transport verbs",
            ));
        }
        Ok(())
    }

    fn source(&self, _kind: TransportKind, asked: Option<MemKind>) -> Result<MemKind> {
        match asked {
            None | Some(MemKind::Host) => Ok(MemKind::Host),
            Some(MemKind::Gpu(n)) => {
                cuda::check_ordinal(n).map_err(|e| e.context(format!("--src gpu:{n}")))?;
                Ok(MemKind::Gpu(n))
            }
            Some(other) => Err(crate::error::usage(format!(
                "--src {other}: latency over cuda sends from host memory (to a kernel) or from a GPU's (gpu:N, to another GPU or the same)"
            ))),
        }
    }

    fn memory(&self, _kind: TransportKind, asked: Option<MemKind>) -> Result<MemKind> {
        let gpu = match asked {
            None => 0,
            Some(MemKind::Gpu(n)) => n,
            Some(other) => {
                return Err(crate::error::usage(format!(
                    "--dst {other}: latency over cuda answers from a GPU's memory; name one as gpu:N (default gpu:0)"
                )))
            }
        };
        cuda::check_ordinal(gpu).map_err(|e| e.context(format!("--dst gpu:{gpu}")))?;
        Ok(MemKind::Gpu(gpu))
    }

    fn open_responder(
        &self,
        cfg: &TransportConfig,
        plan: &LatencyPlan,
        max_size: u64,
        mem: MemKind,
        ctx: &Context,
    ) -> Result<Box<dyn PingEnd>> {
        cfg.knobs::<CudaConfig>()?;
        let MemKind::Gpu(gpu) = mem else {
            return Err(crate::error::usage(format!(
                "latency over cuda answers from a GPU's memory, but this receiver's is {mem}; start serve with --mem gpu:N"
            )));
        };
        if let Some(src) = plan.src_gpu {
            if !ctx.shares_process {
                return Err(crate::error::usage(
                    "GPU ↔ GPU latency over cuda runs both ends in one process; leave out --peer (name the GPUs with --src and --dst)",
                ));
            }
            return super::peer_pingpong::open_responder(src, gpu, max_size, ctx.timeouts.io);
        }
        let shared = Shared::open(gpu, max_size)?;
        Ok(Box::new(CudaPingEnd { shared, role: End::Gpu, count: 0, io_timeout: ctx.timeouts.io }))
    }

    fn connect_initiator(
        &self,
        cfg: &TransportConfig,
        plan: &LatencyPlan,
        max_size: u64,
        offer: serde_json::Value,
        ctx: &Context,
    ) -> Result<Box<dyn PingEnd>> {
        cfg.knobs::<CudaConfig>()?;
        if plan.src_gpu.is_some() {
            return super::peer_pingpong::connect_initiator(offer, max_size, ctx.timeouts.io);
        }
        let offer: Offer = serde_json::from_value(offer).context("the receiver's cuda ping-pong offer is malformed")?;
        let shared = LIVE.find(
            offer.pid,
            offer.id,
        max_size,
            "latency over cuda runs its host end and its GPU end in one process; leave out --peer (pick the GPU with --dst gpu:N)",
        )?;
        Ok(Box::new(CudaPingEnd { shared, role: End::Host, count: 0, io_timeout: ctx.timeouts.io }))
    }
}

/// The responder's offer: where its buffers are (this process, by number in [`LIVE`]).
#[derive(Serialize, Deserialize)]
struct Offer {
    pid: u32,
    id: u64,
    gpu: u32,
}

/// The buffers of the live responders of this process, by number; weak, so that the ends alone keep them.
static LIVE: Live<Shared> = Live::new();

/// What both ends share: the mapped header and message buffers, the device memory the message lands in, and the
/// running kernel's stream. Dropped by the last end: the kernel is stopped before anything is freed.
struct Shared {
    id: u64,
    gpu: u32,
    max: u64,
    blocks: u32,
    chunk: u64,
    /// The header, then the ping and pong buffers. Each buffer is an Option so that `drop` can leave it allocated
    /// when the kernel does not stop.
    host: Option<MappedHost>,
    /// relay (two words), arrived (one u32), then from byte 256 the landing area.
    device: Option<DeviceBuffer>,
    stream: Option<Arc<CudaStream>>,
}

/// Device memory before the landing area: the relay words and the arrival count.
const DEVICE_HEADER: u64 = 256;

impl Shared {
    /// Allocate the buffers for messages up to `max` bytes on GPU `gpu` and launch the kernel.
    fn open(gpu: u32, max: u64) -> Result<Arc<Shared>> {
        if max == 0 || max > crate::plan::latency::MAX_MESSAGE {
            bail!("latency messages are 1 B to 1 GiB; {max} bytes asked");
        }
        let k = kernels::kernels(gpu)?; // compiled before anything runs
        let (blocks, chunk) = geometry(max, k.sms());
        let page = max.div_ceil(4096) * 4096;
        let host = MappedHost::alloc(gpu, HEADER + 2 * page as usize)?;
        let device = DeviceBuffer::alloc(gpu, (DEVICE_HEADER + max) as usize)?;
        let stream = context(gpu)?.new_stream().or_cuda("cuStreamCreate")?;
        // On the kernel's stream, so that it runs before the kernel (a non-blocking stream does not wait for the
        // legacy default one).
        // SAFETY: the first DEVICE_HEADER bytes lie inside the allocation just made, which no kernel uses yet.
        let r = unsafe { sys::cuMemsetD8Async(device.ptr(), 0, DEVICE_HEADER as usize, stream.cu_stream()) };
        check(r, "cuMemsetD8Async")?;
        let base = host.device_ptr();
        let args = ResponderArgs {
            header: base,
            ping: base + HEADER as u64,
            pong: base + HEADER as u64 + page,
            relay: device.ptr(),
            arrived: device.ptr() + 16,
            landing: device.ptr() + DEVICE_HEADER,
            chunk,
        };
        let id = LIVE.number();
        let (host, device, stream) = (Some(host), Some(device), Some(stream));
        let shared = Arc::new(Shared { id, gpu, max, blocks, chunk, host, device, stream });
        let stream = shared.stream.as_ref().expect("just set");
        // SAFETY: `shared` owns every buffer the arguments point into and, when dropped, stops the kernel and waits
        // for it before freeing them; the header is zeroed (no message), `arrived` was zeroed above, and
        // `geometry` makes `chunk` a multiple of 16 that no message up to `max` needs more than `blocks` of.
        unsafe { k.launch_responder(stream, &args, blocks, THREADS) }?;
        LIVE.insert(id, &shared);
        Ok(shared)
    }

    /// Whether the kernel still runs: `None` if so, else what became of it.
    fn kernel_state(&self) -> Option<String> {
        let Some(stream) = self.stream.as_ref() else { return Some("ended".into()) };
        let _ = stream.context().bind_to_thread();
        // SAFETY: the stream is live (owned by `self`); querying it does not wait.
        match unsafe { sys::cuStreamQuery(stream.cu_stream()) } {
            sys::CUresult::CUDA_ERROR_NOT_READY => None,
            sys::CUresult::CUDA_SUCCESS => Some("ended".into()),
            e => Some(format!("failed: {}", check(e, "cuStreamQuery").unwrap_err())),
        }
    }

    fn host(&self) -> &MappedHost {
        self.host.as_ref().expect("held until dropped")
    }

    fn the_kernel(&self) -> String {
        format!("the GPU end (its kernel on gpu:{})", self.gpu)
    }
}

/// The responder's grid for messages up to `max` bytes on a GPU of `sms` multiprocessors: a block per
/// [`MIN_CHUNK`] of the largest message, at most one per multiprocessor (every block must be resident at once: they
/// spin), each block's share a multiple of 16 bytes.
fn geometry(max: u64, sms: u32) -> (u32, u64) {
    let sms = u64::from(sms.max(1));
    let blocks = max.div_ceil(MIN_CHUNK).clamp(1, sms);
    let chunk = max.div_ceil(blocks).div_ceil(16) * 16;
    (blocks as u32, chunk.max(MIN_CHUNK))
}

impl super::live::Holds for Shared {
    fn max(&self) -> u64 {
        self.max
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        LIVE.remove(self.id);
        if let Ok(w) = self.host().word(HOST_WORD) {
            w.store(STOP, Ordering::Release);
        }
        let deadline = Instant::now() + STOP_GRACE;
        while self.kernel_state().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        if self.kernel_state().is_none() {
            // Freeing memory a kernel still uses would wait for it forever (cuMemFree synchronizes): keep it, and say
            // so; the process is ending its run anyway.
            crate::errln!("warning: {} did not stop; its buffers are left allocated", self.the_kernel());
            std::mem::forget(self.device.take());
            std::mem::forget(self.stream.take());
            std::mem::forget(self.host.take());
        }
    }
}

/// Which end a [`CudaPingEnd`] is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum End {
    /// The initiator: this thread writes each message and spins on the answer.
    Host,
    /// The responder: the kernel answers; this end watches it do so.
    Gpu,
}

struct CudaPingEnd {
    shared: Arc<Shared>,
    role: End,
    /// Messages sent (host) or seen answered (GPU) in the session: the words count across sizes, never restarting.
    count: u64,
    io_timeout: Duration,
}

impl CudaPingEnd {
    /// Spin until the answer word reaches `want`; past `--io-timeout` or once the kernel is gone, say which end
    /// stopped. `light`: sleep between looks (the responder's watch) instead of spinning (the host's wait).
    fn wait_answer(&self, want: u64, seq: u64, light: bool) -> Result<()> {
        let answer = self.shared.host().word(ANSWER_WORD)?;
        let started = Instant::now();
        let mut queried = started;
        loop {
            for _ in 0..SPINS_PER_LOOK {
                if answer.load(Ordering::Acquire) >= want {
                    return Ok(());
                }
                if light {
                    break;
                }
                std::hint::spin_loop();
            }
            let now = Instant::now();
            if now.duration_since(queried) >= QUERY_EVERY {
                queried = now;
                if let Some(state) = self.shared.kernel_state() {
                    bail!("{} {state} before answering message {seq}", self.shared.the_kernel());
                }
            }
            if now.duration_since(started) > self.io_timeout {
                return Err(match self.role {
                    End::Host => anyhow!(
                        "{} did not answer message {seq} within --io-timeout ({:?}) though it still runs",
                        self.shared.the_kernel(),
                        self.io_timeout
                    ),
                    End::Gpu => anyhow!(
                        "the host end (the latency client) sent no message {seq} within --io-timeout ({:?})",
                        self.io_timeout
                    ),
                });
            }
            if light {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }
}

/// The mark of message `seq` in its last byte: never 0, and differing from the previous message's.
fn mark(seq: u64) -> u8 {
    (seq % 255 + 1) as u8
}

impl PingEnd for CudaPingEnd {
    fn hello(&self) -> serde_json::Value {
        serde_json::to_value(Offer { pid: std::process::id(), id: self.shared.id, gpu: self.shared.gpu })
            .expect("offer serializes")
    }

    fn ping(&mut self, size: usize, seq: u64) -> Result<()> {
        let host = self.shared.host();
        let page = self.shared.max.div_ceil(4096) as usize * 4096;
        host.byte(HEADER + size - 1)?.store(mark(seq), Ordering::Relaxed);
        host.word(SIZE_WORD)?.store(size as u64, Ordering::Relaxed);
        self.count += 1;
        host.word(HOST_WORD)?.store(self.count, Ordering::Release);
        self.wait_answer(self.count, seq, false)?;
        let got = host.byte(HEADER + page + size - 1)?.load(Ordering::Relaxed);
        if got != mark(seq) {
            bail!(
                "the answer to message {seq} ({size} bytes) ends in {got}, not its mark {}: {} echoed another message",
                mark(seq),
                self.shared.the_kernel()
            );
        }
        Ok(())
    }

    fn pong(&mut self, _size: usize, seq: u64) -> Result<()> {
        self.count += 1;
        self.wait_answer(self.count, seq, true)
    }

    fn describe(&self) -> serde_json::Value {
        serde_json::json!({
            "gpu": self.shared.gpu,
            "responder": "persistent kernel polling mapped pinned host memory",
            "blocks": self.shared.blocks,
            "threads": THREADS,
            "bytes_per_block": self.shared.chunk,
            "message": "mapped pinned host memory -> GPU memory (kernel copy)",
            "answer": "GPU memory -> mapped pinned host memory (kernel copy)",
            "wait": "host spins on the answer word",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_message_needs_more_blocks_than_the_grid_and_small_ones_take_one() {
        for sms in [1, 8, 132] {
            for max in [1, 8, 4096, 16 << 10, (16 << 10) + 1, 1 << 20, 12345678, 1 << 30] {
                let (blocks, chunk) = geometry(max, sms);
                assert!((1..=sms).contains(&blocks), "{max} on {sms}: {blocks}");
                assert_eq!(chunk % 16, 0);
                assert!(max.div_ceil(chunk) <= u64::from(blocks), "{max} on {sms}: {blocks} × {chunk}");
            }
        }
        assert_eq!(geometry(1 << 20, 132), (64, 16 << 10));
        assert_eq!(geometry(8, 132), (1, 16 << 10));
    }

    #[test]
    fn marks_are_never_zero_and_change_every_message() {
        assert!((0..1000).all(|s| mark(s) != 0 && mark(s) != mark(s + 1)));
    }
}
