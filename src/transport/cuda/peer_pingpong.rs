//! CUDA's GPU ↔ GPU ping-pong for `kvxfer latency --src gpu:M --dst gpu:N`: what a transfer engine's small copy
//! between two GPUs costs from the host that issues it. Each message is one `cuMemcpyAsync` from gpu:M's memory
//! into gpu:N's, and the answer one `cuMemcpyAsync` of those landed bytes back into gpu:M's memory, queued behind
//! the message on one stream of gpu:M, so that the answer starts when the message has landed and no host step
//! sits between them. The host thread that issued both spins on `cuStreamQuery` until the answer is done: half
//! that round trip is the one-way latency, as for the other transports, launch and completion included (a
//! torch `copy_` or an engine's copy pays both too).
//!
//! Messages alternate between two source slots filled with different bytes, so an exchange whose copies did not
//! run leaves the other slot's bytes behind; after each size (outside its timing) the last answer's first and last
//! bytes and the landing area's last byte are checked against the slot it was sent from. The responder end does
//! nothing per message but watch the exchanges go by, so that `--io-timeout` names a host end that stopped. Both
//! ends share the buffers, so they run in one process.

use crate::mem::cuda::{self, check, context, enable_peer_access, DeviceBuffer, OrDriverError};
use crate::transport::api::PingEnd;
use super::live::Live;
use anyhow::{bail, Context as _, Result};
use cudarc::driver::{sys, CudaStream};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The bytes of the two source slots: an exchange's answer carries its slot's.
const SLOT_BYTES: [u8; 2] = [0xA5, 0x5A];
/// Spins on `cuStreamQuery` between looks at the clock.
const SPINS_PER_LOOK: u32 = 1 << 8;

/// The responder's offer: where its buffers are (this process, by number in [`LIVE`]).
#[derive(Serialize, Deserialize)]
struct Offer {
    pid: u32,
    peer_id: u64,
    src_gpu: u32,
    dst_gpu: u32,
}

/// The buffers of the live GPU ↔ GPU responders of this process, by number; weak, so that the ends alone keep them.
static LIVE: Live<Shared> = Live::new();

/// What both ends share: the source slots and the answer on gpu:M, the landing area on gpu:N, gpu:M's stream
/// that carries both copies, and how many exchanges have completed.
struct Shared {
    id: u64,
    src_gpu: u32,
    dst_gpu: u32,
    max: u64,
    /// Two slots of `slot` bytes each, on gpu:M.
    slots: DeviceBuffer,
    slot: u64,
    /// Where each answer lands, on gpu:M.
    answer: DeviceBuffer,
    /// Where each message lands, on gpu:N.
    landing: DeviceBuffer,
    stream: Arc<CudaStream>,
    /// Exchanges whose answer is back, across sizes (never restarting), for the responder's watch.
    done: AtomicU64,
}

impl Shared {
    /// Allocate the buffers for messages up to `max` bytes from gpu:`src` to gpu:`dst`, fill the source slots and
    /// let each GPU reach the other's memory.
    fn open(src: u32, dst: u32, max: u64) -> Result<Arc<Shared>> {
        if max == 0 || max > crate::plan::latency::MAX_MESSAGE {
            bail!("latency messages are 1 B to 1 GiB; {max} bytes asked");
        }
        cuda::check_ordinal(src).map_err(|e| e.context(format!("--src gpu:{src}")))?;
        if src != dst {
            enable_peer_access(&context(src)?, &context(dst)?)?;
            enable_peer_access(&context(dst)?, &context(src)?)?;
        }
        let slot = max.div_ceil(4096) * 4096;
        let landing = DeviceBuffer::alloc(dst, max as usize)?;
        context(dst)?; // current for the memset
        // SAFETY: the whole of a live allocation made above, in the current context, that no copy uses yet.
        check(unsafe { sys::cuMemsetD8_v2(landing.ptr(), 0, max as usize) }, "cuMemsetD8")?;
        let slots = DeviceBuffer::alloc(src, 2 * slot as usize)?;
        let answer = DeviceBuffer::alloc(src, max as usize)?;
        let ctx = context(src)?; // current for the memsets and the stream
        for (i, byte) in SLOT_BYTES.iter().enumerate() {
            // SAFETY: slot i is `slot` bytes inside `slots`, a live allocation no copy uses yet.
            let r = unsafe { sys::cuMemsetD8_v2(slots.ptr() + i as u64 * slot, *byte, slot as usize) };
            check(r, "cuMemsetD8")?;
        }
        // SAFETY: the whole of a live allocation made above, in the current context.
        check(unsafe { sys::cuMemsetD8_v2(answer.ptr(), 0, max as usize) }, "cuMemsetD8")?;
        let stream = ctx.new_stream().or_cuda("cuStreamCreate")?;
        let id = LIVE.number();
        let shared = Arc::new(Shared {
            id,
            src_gpu: src,
            dst_gpu: dst,
            max,
            slots,
            slot,
            answer,
            landing,
            stream,
            done: AtomicU64::new(0),
        });
        LIVE.insert(id, &shared);
        Ok(shared)
    }

    /// The byte at `ptr` (device memory of this run's buffers), read with a copy of its own.
    fn read_byte(&self, ptr: u64) -> Result<u8> {
        self.stream.context().bind_to_thread().or_cuda("cuCtxSetCurrent")?;
        let mut b = 0u8;
        // SAFETY: `ptr` lies inside one of `self`'s live allocations (the callers' offsets stay below each one's
        // length) and `b` is one writable byte; the copy is synchronous.
        check(unsafe { sys::cuMemcpyDtoH_v2(&mut b as *mut u8 as *mut _, ptr, 1) }, "cuMemcpyDtoH")?;
        Ok(b)
    }

    fn the_link(&self) -> String {
        format!("gpu:{} → gpu:{}", self.src_gpu, self.dst_gpu)
    }
}

impl super::live::Holds for Shared {
    fn max(&self) -> u64 {
        self.max
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        LIVE.remove(self.id);
        // Freeing memory a copy still uses would be undefined: let queued copies end first.
        let _ = self.stream.synchronize();
    }
}

/// The responder's end: gpu:N's buffers, opened for messages from gpu:`src`.
pub fn open_responder(src: u32, dst: u32, max: u64, io_timeout: Duration) -> Result<Box<dyn PingEnd>> {
    let shared = Shared::open(src, dst, max)?;
    Ok(Box::new(PeerPingEnd { shared, count: 0, io_timeout }))
}

/// The initiator's end, with the responder's `offer`.
pub fn connect_initiator(offer: serde_json::Value, max: u64, io_timeout: Duration) -> Result<Box<dyn PingEnd>> {
    let offer: Offer =
        serde_json::from_value(offer).context("the receiver's GPU ↔ GPU ping-pong offer is malformed")?;
    let shared = LIVE.find(
        offer.pid,
        offer.peer_id,
        max,
        "GPU ↔ GPU latency over cuda runs both ends in one process; leave out --peer (name the GPUs with --src and --dst)",
    )?;
    // Every copy and query of this end is issued from this thread, in gpu:M's context.
    shared.stream.context().bind_to_thread().or_cuda("cuCtxSetCurrent")?;
    Ok(Box::new(PeerPingEnd { shared, count: 0, io_timeout }))
}

struct PeerPingEnd {
    shared: Arc<Shared>,
    /// Exchanges this end has sent (initiator) or seen completed (responder), across sizes.
    count: u64,
    io_timeout: Duration,
}

impl PeerPingEnd {
    /// Spin on the stream until both copies of message `seq` are done; past `--io-timeout`, or on an error, say so.
    fn wait_stream(&self, seq: u64) -> Result<()> {
        let stream = self.shared.stream.cu_stream();
        let started = Instant::now();
        loop {
            for _ in 0..SPINS_PER_LOOK {
                // SAFETY: the stream is live (owned by `shared`); querying it does not wait.
                match unsafe { sys::cuStreamQuery(stream) } {
                    sys::CUresult::CUDA_ERROR_NOT_READY => std::hint::spin_loop(),
                    sys::CUresult::CUDA_SUCCESS => return Ok(()),
                    e => {
                        let link = self.shared.the_link();
                        return check(e, "cuStreamQuery").with_context(|| format!("message {seq} over {link}"));
                    }
                }
            }
            if started.elapsed() > self.io_timeout {
                bail!(
                    "the copies of message {seq} over {} did not finish within --io-timeout ({:?})",
                    self.shared.the_link(),
                    self.io_timeout
                );
            }
        }
    }

    /// The source slot of message `seq`.
    fn slot_of(seq: u64) -> usize {
        (seq % 2) as usize
    }
}

impl PingEnd for PeerPingEnd {
    fn hello(&self) -> serde_json::Value {
        let s = &self.shared;
        serde_json::to_value(Offer { pid: std::process::id(), peer_id: s.id, src_gpu: s.src_gpu, dst_gpu: s.dst_gpu })
            .expect("offer serializes")
    }

    fn ping(&mut self, size: usize, seq: u64) -> Result<()> {
        let s = &self.shared;
        let from = s.slots.ptr() + Self::slot_of(seq) as u64 * s.slot;
        let stream = s.stream.cu_stream();
        // SAFETY: `size` ≤ `max` (the run's largest message, checked at connect), so each range lies inside its
        // live allocation; both buffers are device memory this process allocated, reachable from gpu:M's
        // context (peer access enabled when the GPUs differ); the stream belongs to that context, current here.
        let r = unsafe { sys::cuMemcpyAsync(s.landing.ptr(), from, size, stream) };
        check(r, "cuMemcpyAsync(message)")?;
        // SAFETY: as above; queued behind the message on the same stream, so it reads the landed bytes.
        let r = unsafe { sys::cuMemcpyAsync(s.answer.ptr(), s.landing.ptr(), size, stream) };
        check(r, "cuMemcpyAsync(answer)")?;
        self.wait_stream(seq)?;
        self.count += 1;
        s.done.store(self.count, Ordering::Release);
        Ok(())
    }

    fn settle(&mut self, size: usize, last_seq: u64) -> Result<()> {
        let s = &self.shared;
        let want = SLOT_BYTES[Self::slot_of(last_seq)];
        let checks = [
            ("the answer's first byte", s.answer.ptr()),
            ("the answer's last byte", s.answer.ptr() + size as u64 - 1),
            ("the landed message's last byte", s.landing.ptr() + size as u64 - 1),
        ];
        for (what, ptr) in checks {
            let got = s.read_byte(ptr)?;
            if got != want {
                bail!(
                    "after the {size}-byte exchanges over {}, {what} is {got:#04x}, not {want:#04x} of message {last_seq}: a copy did not run",
                    s.the_link()
                );
            }
        }
        Ok(())
    }

    fn pong(&mut self, _size: usize, seq: u64) -> Result<()> {
        self.count += 1;
        let started = Instant::now();
        while self.shared.done.load(Ordering::Acquire) < self.count {
            if started.elapsed() > self.io_timeout {
                bail!("the host end (the latency client) sent no message {seq} within --io-timeout ({:?})", self.io_timeout);
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        Ok(())
    }

    fn describe(&self) -> serde_json::Value {
        let s = &self.shared;
        serde_json::json!({
            "src_gpu": s.src_gpu,
            "gpu": s.dst_gpu,
            "message": format!("gpu:{} -> gpu:{} (one cuMemcpyAsync, copy engine)", s.src_gpu, s.dst_gpu),
            "answer": format!("gpu:{} -> gpu:{} (one cuMemcpyAsync queued behind the message on the same stream)", s.dst_gpu, s.src_gpu),
            "responder": "none: the answer starts when the message has landed (stream order)",
            "wait": "host spins on cuStreamQuery",
            "peer_access": s.src_gpu != s.dst_gpu,
        })
    }
}
