//! The CUDA C kernels of `kernels/`, compiled once per run with NVRTC for the GPU's own architecture and loaded
//! once per GPU: the `--verify` pattern (so checking 12 GiB takes milliseconds, not a trip through the host) and
//! the SM copy of `--copy sm`, and the persistent responder of `latency --transport cuda`. Paged layouts fill and
//! check their scattered pieces with one launch over a table of pieces.

use super::cuda::{check, context, CUdeviceptr, OrDriverError};
use crate::pattern::Span;
use anyhow::{anyhow, bail, Result};
use cudarc::driver::{sys, CudaContext, CudaFunction, CudaStream, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::{result as nvrtc, Ptx};
use std::collections::HashMap;
use std::ffi::CString;
use std::sync::{Arc, Mutex, OnceLock};

const SOURCE: &str = concat!(
    include_str!("../../kernels/pattern.cu"),
    "\n",
    include_str!("../../kernels/copy.cu"),
    "\n",
    include_str!("../../kernels/pingpong.cu")
);

/// The kernels, loaded into one GPU's context.
pub struct Kernels {
    fill: CudaFunction,
    verify: CudaFunction,
    copy16: CudaFunction,
    copy_bytes: CudaFunction,
    copy_pieces: CudaFunction,
    fill_spans: CudaFunction,
    verify_spans: CudaFunction,
    responder: CudaFunction,
    sms: u32,
    ctx: Arc<CudaContext>,
}

/// Spans as the kernels read them: (buffer offset, logical offset, length) triples.
fn span_table(spans: &[Span]) -> Vec<u64> {
    spans.iter().flat_map(|s| [s.offset, s.logical, s.len]).collect()
}

/// Compile the sources for `sm_XY` to a cubin (PTX for `compute_XY` if this NVRTC cannot emit that SASS).
fn compile(major: i32, minor: i32) -> Result<Ptx> {
    // SAFETY: only probes whether the library can be loaded.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        bail!("no NVRTC: libnvrtc.so not found; add the CUDA toolkit's lib64 to LD_LIBRARY_PATH (needed for GPU --verify and --copy sm)");
    }
    let src = CString::new(SOURCE).expect("kernel sources have no NUL");
    let prog =
        nvrtc::create_program(&src, Some(c"kvxfer_kernels.cu")).map_err(|e| anyhow!("nvrtcCreateProgram: {e:?}"))?;
    let build = |arch: &str| -> Result<()> {
        let opts = vec![format!("--gpu-architecture={arch}"), "--std=c++17".to_string()];
        // SAFETY: `prog` is a live program; options are owned strings.
        unsafe { nvrtc::compile_program(prog, &opts) }.map_err(|e| {
            // SAFETY: `prog` is live; the log is a NUL-terminated buffer owned by the returned Vec.
            let log = unsafe { nvrtc::get_program_log(prog) }
                .map(|l| unsafe { std::ffi::CStr::from_ptr(l.as_ptr()) }.to_string_lossy().into_owned())
                .unwrap_or_default();
            anyhow!("NVRTC could not compile kernels/ for {arch}: {e:?}\n{log}")
        })
    };
    let out = match build(&format!("sm_{major}{minor}")) {
        Ok(()) => {
            let mut n = 0usize;
            // SAFETY: `prog` compiled; `n` is a valid out-pointer, then `cubin` has exactly `n` bytes.
            let cubin = unsafe {
                cudarc::nvrtc::sys::nvrtcGetCUBINSize(prog, &mut n).result().map_err(|e| anyhow!("{e:?}"))?;
                let mut cubin = vec![0u8; n];
                cudarc::nvrtc::sys::nvrtcGetCUBIN(prog, cubin.as_mut_ptr() as *mut std::ffi::c_char)
                    .result()
                    .map_err(|e| anyhow!("{e:?}"))?;
                cubin
            };
            Ok(Ptx::from_binary(cubin))
        }
        Err(_) => {
            build(&format!("compute_{major}{minor}"))?;
            // SAFETY: `prog` compiled; the PTX buffer is NUL-terminated.
            let ptx = unsafe { nvrtc::get_ptx(prog) }.map_err(|e| anyhow!("nvrtcGetPTX: {e:?}"))?;
            // SAFETY: the PTX buffer is NUL-terminated (nvrtcGetPTX writes the terminator) and outlives `text`.
            let text = unsafe { std::ffi::CStr::from_ptr(ptx.as_ptr()) }.to_string_lossy().into_owned();
            Ok(Ptx::from_src(text))
        }
    };
    // SAFETY: `prog` is destroyed once, after its outputs were copied.
    let _ = unsafe { nvrtc::destroy_program(prog) };
    out
}

/// The kernels for GPU `ordinal`, compiled on first use and cached for the run.
pub fn kernels(ordinal: u32) -> Result<Arc<Kernels>> {
    static CACHE: OnceLock<Mutex<HashMap<u32, Arc<Kernels>>>> = OnceLock::new();
    let mut map = CACHE.get_or_init(Default::default).lock().unwrap();
    if let Some(k) = map.get(&ordinal) {
        return Ok(k.clone());
    }
    let ctx = context(ordinal)?;
    use sys::CUdevice_attribute as A;
    let major = ctx.attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR).or_cuda("attribute")?;
    let minor = ctx.attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR).or_cuda("attribute")?;
    let sms = ctx.attribute(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT).or_cuda("attribute")? as u32;
    let module = ctx.load_module(compile(major, minor)?).or_cuda("cuModuleLoadData(kernels)")?;
    let f = |name: &str| module.load_function(name).or_cuda(name);
    let k = Arc::new(Kernels {
        fill: f("fill_pattern")?,
        verify: f("verify_pattern")?,
        copy16: f("copy_v16")?,
        copy_bytes: f("copy_bytes")?,
        copy_pieces: f("copy_pieces")?,
        fill_spans: f("fill_spans")?,
        verify_spans: f("verify_spans")?,
        responder: f("pingpong_responder")?,
        sms,
        ctx,
    });
    map.insert(ordinal, k.clone());
    Ok(k)
}

/// What the ping-pong responder (`kernels/pingpong.cu`) works on: device addresses of mapped host memory (`header`,
/// `ping`, `pong`) and of device memory (`relay`, `arrived`, `landing`), and the bytes each block copies.
pub struct ResponderArgs {
    pub header: CUdeviceptr,
    pub ping: CUdeviceptr,
    pub pong: CUdeviceptr,
    pub relay: CUdeviceptr,
    pub arrived: CUdeviceptr,
    pub landing: CUdeviceptr,
    pub chunk: u64,
}

impl Kernels {
    /// Streaming multiprocessors of the GPU.
    pub fn sms(&self) -> u32 {
        self.sms
    }

    /// Launch the persistent ping-pong responder on `stream`: `blocks` × `threads`, running until the header's word
    /// reads `u64::MAX`.
    ///
    /// # Safety
    /// Every address of `a` must stay valid for as long as the kernel runs (until the stop word is seen and the
    /// stream has drained): `header` 136 bytes, `ping`, `pong` and `landing` the largest message, `relay` two words
    /// and `arrived` one zeroed u32; `chunk` a multiple of 16 with no message needing more than `blocks` chunks.
    pub unsafe fn launch_responder(
        &self,
        stream: &CudaStream,
        a: &ResponderArgs,
        blocks: u32,
        threads: u32,
    ) -> Result<()> {
        let mut b = stream.launch_builder(&self.responder);
        b.arg(&a.header).arg(&a.ping).arg(&a.pong).arg(&a.relay).arg(&a.arrived).arg(&a.landing).arg(&a.chunk);
        let cfg = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: 0 };
        // SAFETY: the caller keeps every address valid while the kernel runs; the argument types match the kernel's
        // signature (six pointers, u64).
        unsafe { b.launch(cfg) }.or_cuda("launch pingpong_responder")?;
        Ok(())
    }

    fn grid(&self, blocks_per_sm: u32, threads: u32) -> LaunchConfig {
        LaunchConfig { grid_dim: (self.sms * blocks_per_sm, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: 0 }
    }

    pub fn stream(&self) -> Result<Arc<CudaStream>> {
        self.ctx.new_stream().or_cuda("cuStreamCreate")
    }

    /// Fill `len` bytes at `buf` with the pattern of (seed, rep); waits for completion.
    pub fn fill(&self, buf: CUdeviceptr, len: u64, seed: u64, rep: u64) -> Result<()> {
        let s = self.stream()?;
        let words = len / 8;
        if words > 0 {
            let mut b = s.launch_builder(&self.fill);
            b.arg(&buf).arg(&words).arg(&seed).arg(&rep);
            // SAFETY: `buf` points to at least `len` bytes of device memory on this GPU; argument types match the
            // kernel's signature (u64*, u64, u64, u64).
            unsafe { b.launch(self.grid(8, 256)) }.or_cuda("launch fill_pattern")?;
        }
        let tail = (len % 8) as usize;
        if tail > 0 {
            let word = crate::pattern::splitmix64(seed ^ (rep << 40) ^ words).to_le_bytes();
            self.ctx.bind_to_thread().or_cuda("cuCtxSetCurrent")?;
            // SAFETY: the tail lies inside the buffer; `word` outlives the synchronous copy.
            check(unsafe { sys::cuMemcpyHtoD_v2(buf + words * 8, word.as_ptr() as *const _, tail) }, "cuMemcpyHtoD")?;
        }
        s.synchronize().or_cuda("cuStreamSynchronize")
    }

    /// Count bytes at `buf` that differ from the pattern of (seed, rep).
    pub fn count_mismatches(&self, buf: CUdeviceptr, len: u64, seed: u64, rep: u64) -> Result<u64> {
        let s = self.stream()?;
        let words = len / 8;
        let mut counter = s.alloc_zeros::<u64>(1).or_cuda("cuMemAlloc(counter)")?;
        if words > 0 {
            let mut b = s.launch_builder(&self.verify);
            b.arg(&buf).arg(&words).arg(&seed).arg(&rep).arg(&mut counter);
            // SAFETY: as in `fill`; `counter` is a live one-element device allocation.
            unsafe { b.launch(self.grid(8, 256)) }.or_cuda("launch verify_pattern")?;
        }
        let mut bad = s.clone_dtoh(&counter).or_cuda("cuMemcpyDtoH(counter)")?[0];
        let tail = (len % 8) as usize;
        if tail > 0 {
            let want = crate::pattern::splitmix64(seed ^ (rep << 40) ^ words).to_le_bytes();
            let mut got = [0u8; 8];
            self.ctx.bind_to_thread().or_cuda("cuCtxSetCurrent")?;
            // SAFETY: the tail lies inside the buffer; `got` has room for `tail` bytes.
            check(unsafe { sys::cuMemcpyDtoH_v2(got.as_mut_ptr() as *mut _, buf + words * 8, tail) }, "cuMemcpyDtoH")?;
            bad += got[..tail].iter().zip(&want[..tail]).filter(|(a, b)| a != b).count() as u64;
        }
        Ok(bad)
    }

    /// Fill each span (buffer offset, logical offset, length) of the buffer at `buf` with the pattern of its logical
    /// offset; waits for completion. The caller checked that the spans lie inside the buffer and do not overlap.
    pub fn fill_spans(&self, buf: CUdeviceptr, spans: &[Span], seed: u64, rep: u64) -> Result<()> {
        if spans.is_empty() {
            return Ok(());
        }
        let s = self.stream()?;
        let table = s.clone_htod(&span_table(spans)).or_cuda("cuMemcpyHtoD(spans)")?;
        let n = spans.len() as u64;
        let mut b = s.launch_builder(&self.fill_spans);
        b.arg(&buf).arg(&table).arg(&n).arg(&seed).arg(&rep);
        // SAFETY: every span lies inside the `buf` allocation on this GPU (checked by the caller) and spans are
        // disjoint, so no two threads write one byte; `table` holds 3 × n u64s; argument types match the kernel's
        // signature (u8*, const u64*, u64, u64, u64).
        unsafe { b.launch(self.grid(8, 256)) }.or_cuda("launch fill_spans")?;
        s.synchronize().or_cuda("cuStreamSynchronize")
    }

    /// Count bytes of the spans of the buffer at `buf` that differ from the pattern of their logical offsets.
    pub fn count_span_mismatches(&self, buf: CUdeviceptr, spans: &[Span], seed: u64, rep: u64) -> Result<u64> {
        if spans.is_empty() {
            return Ok(0);
        }
        let s = self.stream()?;
        let table = s.clone_htod(&span_table(spans)).or_cuda("cuMemcpyHtoD(spans)")?;
        let mut counter = s.alloc_zeros::<u64>(1).or_cuda("cuMemAlloc(counter)")?;
        let n = spans.len() as u64;
        let mut b = s.launch_builder(&self.verify_spans);
        b.arg(&buf).arg(&table).arg(&n).arg(&seed).arg(&rep).arg(&mut counter);
        // SAFETY: as in `fill_spans` (reads only); `counter` is a live one-element device allocation.
        unsafe { b.launch(self.grid(8, 256)) }.or_cuda("launch verify_spans")?;
        Ok(s.clone_dtoh(&counter).or_cuda("cuMemcpyDtoH(counter)")?[0])
    }

    /// Upload a piece table — `(source offset, destination offset, length)` per piece — on `stream`.
    pub fn upload_pieces(
        &self,
        stream: &Arc<CudaStream>,
        pieces: &[[u64; 3]],
    ) -> Result<cudarc::driver::CudaSlice<u64>> {
        let flat: Vec<u64> = pieces.iter().flatten().copied().collect();
        stream.clone_htod(&flat).or_cuda("cuMemcpyHtoD(piece table)")
    }

    /// Enqueue one SM kernel on `stream` that copies every piece of `table` from `src` to `dst`. The caller
    /// checked every piece against both buffers.
    pub fn copy_pieces(
        &self,
        stream: &CudaStream,
        dst: CUdeviceptr,
        src: CUdeviceptr,
        table: &cudarc::driver::CudaSlice<u64>,
        n: u64,
    ) -> Result<()> {
        let mut b = stream.launch_builder(&self.copy_pieces);
        b.arg(&dst).arg(&src).arg(table).arg(&n);
        // SAFETY: every piece lies inside both buffers (checked by the caller), the destination pieces are disjoint,
        // the table holds 3 × n u64s on this GPU, and the argument types match (u8*, const u8*, const u64*, u64).
        unsafe { b.launch(self.grid(8, 256)) }.or_cuda("launch copy_pieces")?;
        Ok(())
    }

    /// Enqueue an SM copy of `len` bytes on `stream` (16-byte vectors where both ends are 16-byte aligned).
    pub fn copy(&self, stream: &CudaStream, dst: CUdeviceptr, src: CUdeviceptr, len: u64) -> Result<()> {
        let aligned = dst % 16 == 0 && src % 16 == 0;
        let n16 = if aligned { len / 16 } else { 0 };
        if n16 > 0 {
            let mut b = stream.launch_builder(&self.copy16);
            b.arg(&dst).arg(&src).arg(&n16);
            // SAFETY: both ranges are device-accessible (peer access enabled by the caller) and `len` long.
            unsafe { b.launch(self.grid(4, 512)) }.or_cuda("launch copy_v16")?;
        }
        let done = n16 * 16;
        if done < len {
            let (d, s, n) = (dst + done, src + done, len - done);
            let mut b = stream.launch_builder(&self.copy_bytes);
            b.arg(&d).arg(&s).arg(&n);
            // SAFETY: as above, for the remaining bytes.
            unsafe { b.launch(self.grid(1, 256)) }.or_cuda("launch copy_bytes")?;
        }
        Ok(())
    }
}
