//! `--staging gather`: move a paged transfer the way an engine without a scatter-capable copy does it. A kernel on
//! the source GPU packs every piece into a contiguous staging buffer there, one contiguous copy moves the staging
//! buffer to a staging buffer on the destination GPU, and a kernel there unpacks each piece into its slot of the
//! receiver's pool. The three steps run back to back on the GPUs (no host round trip between them) and are timed
//! with events on their own GPU, so users see what each costs next to the direct piece kernel and batched copies.
//!
//! The sender does all three steps: it maps the receiver's pool in the destination GPU's context (where the
//! unpack kernel runs) and owns both staging buffers, so the receiver needs nothing beyond the plain cuda target.

use super::extras::StagedMs;
use crate::mem::cuda::{check, context, DeviceBuffer, OrDriverError};
use crate::mem::kernels;
use crate::plan::Write;
use anyhow::Result;
use cudarc::driver::{sys, CudaContext, CudaEvent, CudaStream};
use std::sync::Arc;

/// The destination half of a staged transfer and the staging buffers of both GPUs (grown to the largest transfer
/// seen, allocated outside the timed interval, as an engine preallocates them).
pub struct Staging {
    src_ordinal: u32,
    dst_ordinal: u32,
    dst_stream: Arc<CudaStream>,
    src_buf: Option<DeviceBuffer>,
    dst_buf: Option<DeviceBuffer>,
    /// Source GPU: end of the gather, end of the copy.
    gathered: CudaEvent,
    copied: CudaEvent,
    /// Destination GPU: start and end of the scatter.
    scatter_start: CudaEvent,
    scattered: CudaEvent,
}

/// What the source half records around a staged transfer, on its stream 0.
pub struct SourceStream<'a> {
    pub stream: &'a Arc<CudaStream>,
    pub start: &'a CudaEvent,
    /// Copy the staging buffer with the SM copy kernel instead of the copy engine (`--copy sm`).
    pub sm_copy: bool,
}

impl Staging {
    pub fn new(src_ordinal: u32, dst_ordinal: u32) -> Result<Staging> {
        let (src_ctx, dst_ctx) = (context(src_ordinal)?, context(dst_ordinal)?);
        // Compile both GPUs' kernels before the first timed rep.
        kernels::kernels(src_ordinal)?;
        kernels::kernels(dst_ordinal)?;
        let timed = |ctx: &Arc<CudaContext>| ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT));
        Ok(Staging {
            src_ordinal,
            dst_ordinal,
            dst_stream: dst_ctx.new_stream().or_cuda("cuStreamCreate")?,
            src_buf: None,
            dst_buf: None,
            gathered: timed(&src_ctx).or_cuda("cuEventCreate")?,
            copied: timed(&src_ctx).or_cuda("cuEventCreate")?,
            scatter_start: timed(&dst_ctx).or_cuda("cuEventCreate")?,
            scattered: timed(&dst_ctx).or_cuda("cuEventCreate")?,
        })
    }

    /// Grow the staging buffers to hold `bytes`.
    fn reserve(&mut self, bytes: u64) -> Result<(u64, u64)> {
        let fits = |b: &Option<DeviceBuffer>| b.as_ref().is_some_and(|b| b.len() as u64 >= bytes);
        if !fits(&self.src_buf) || !fits(&self.dst_buf) {
            // Free the old pair first: at 12 GiB transfers, holding both generations could exhaust the GPU.
            self.src_buf = None;
            self.dst_buf = None;
            let len = bytes.max(1) as usize;
            self.src_buf = Some(DeviceBuffer::alloc(self.src_ordinal, len)?);
            self.dst_buf = Some(DeviceBuffer::alloc(self.dst_ordinal, len)?);
        }
        let ptr = |b: &Option<DeviceBuffer>| b.as_ref().map(|b| b.ptr()).unwrap_or_default();
        Ok((ptr(&self.src_buf), ptr(&self.dst_buf)))
    }

    /// Enqueue gather → copy → scatter for `writes` from the source pool at `src` to the receiver's pool at `dst`
    /// (an address valid in the destination GPU's context), after `s.start` was recorded and before the caller
    /// records its end event on `s.stream`. Returns once everything is enqueued; [`Staging::split`] reads the
    /// step times after the end event completed.
    pub fn enqueue(&mut self, s: &SourceStream, src: u64, dst: u64, writes: &[Write]) -> Result<()> {
        let total: u64 = writes.iter().map(|w| w.len).sum();
        let (src_stage, dst_stage) = self.reserve(total)?;
        let (mut gather, mut scatter) = (Vec::with_capacity(writes.len()), Vec::with_capacity(writes.len()));
        let mut packed = 0;
        for w in writes {
            gather.push([w.local_offset, packed, w.len]);
            scatter.push([packed, w.remote_offset, w.len]);
            packed += w.len;
        }
        let (ks, kd) = (kernels::kernels(self.src_ordinal)?, kernels::kernels(self.dst_ordinal)?);
        let gather = ks.upload_pieces(s.stream, &gather)?;
        let scatter = kd.upload_pieces(&self.dst_stream, &scatter)?;
        // The tables are in place before anything is timed.
        s.stream.synchronize().or_cuda("cuStreamSynchronize")?;
        self.dst_stream.synchronize().or_cuda("cuStreamSynchronize")?;
        s.start.record(s.stream).or_cuda("cuEventRecord")?;
        let n = writes.len() as u64;
        ks.copy_pieces(s.stream, src_stage, src, &gather, n)?;
        self.gathered.record(s.stream).or_cuda("cuEventRecord")?;
        if s.sm_copy {
            ks.copy(s.stream, dst_stage, src_stage, total)?;
        } else {
            check(
                // SAFETY: both staging buffers hold at least `total` bytes (reserved above); peer access between
                // the GPUs was enabled at connect; the stream belongs to the current (source) context.
                unsafe { sys::cuMemcpyAsync(dst_stage, src_stage, total as usize, s.stream.cu_stream()) },
                "cuMemcpyAsync(staging)",
            )?;
        }
        self.copied.record(s.stream).or_cuda("cuEventRecord")?;
        self.dst_stream.wait(&self.copied).or_cuda("cuStreamWaitEvent")?;
        self.scatter_start.record(&self.dst_stream).or_cuda("cuEventRecord")?;
        kd.copy_pieces(&self.dst_stream, dst, dst_stage, &scatter, n)?;
        self.scattered.record(&self.dst_stream).or_cuda("cuEventRecord")?;
        s.stream.wait(&self.scattered).or_cuda("cuStreamWaitEvent")?;
        // The tables free stream-ordered on the streams that read them, after their kernels.
        Ok(())
    }

    /// The three steps' GPU times of the last enqueued transfer.
    pub fn split(&self, start: &CudaEvent) -> Result<StagedMs> {
        Ok(StagedMs {
            gather_ms: start.elapsed_ms(&self.gathered).or_cuda("cuEventElapsedTime")? as f64,
            copy_ms: self.gathered.elapsed_ms(&self.copied).or_cuda("cuEventElapsedTime")? as f64,
            scatter_ms: self.scatter_start.elapsed_ms(&self.scattered).or_cuda("cuEventElapsedTime")? as f64,
        })
    }
}
