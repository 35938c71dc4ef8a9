//! GPU and pinned host memory through the CUDA driver API (cudarc, loaded at run time).
//!
//! cudarc's dynamically loaded bindings panic on first use when libcuda is missing, so every entry point goes
//! through [`driver`], which probes the library first and turns its absence into an error. Buffers are raw
//! `cuMemAlloc` pointers (not cudarc's `CudaSlice`) because kvxfer needs IPC handles, dma-buf export and pointer
//! attributes on them, and no per-slice event tracking inside timed loops.

use anyhow::{anyhow, bail, Result};
use cudarc::driver::{result, sys, CudaContext};
use std::collections::HashMap;
use std::ffi::{c_void, CStr};
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex, OnceLock};

pub use cudarc::driver::sys::CUdeviceptr;

/// Turn a driver status into an error naming the call and CUDA's own words.
pub fn check(r: sys::CUresult, what: &str) -> Result<()> {
    r.result().map_err(|e| anyhow!("{what}: {}", describe(e)))
}

pub fn describe(e: result::DriverError) -> String {
    let name = e.error_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|_| format!("{:?}", e.0));
    let text = e.error_string().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    format!("{name} ({text})")
}

pub trait OrDriverError<T> {
    fn or_cuda(self, what: &str) -> Result<T>;
}

impl<T> OrDriverError<T> for std::result::Result<T, result::DriverError> {
    fn or_cuda(self, what: &str) -> Result<T> {
        self.map_err(|e| anyhow!("{what}: {}", describe(e)))
    }
}

/// Whether libcuda.so.1 is on this host (loads nothing for longer than the check).
pub fn driver_present() -> bool {
    // SAFETY: only dlopens/dlcloses the library by name to see whether it exists.
    unsafe { sys::is_culib_present() }
}

/// Load and initialise the driver once. Returns its CUDA version (e.g. 13000), or why there is none.
pub fn driver() -> Result<i32> {
    static DRIVER: OnceLock<std::result::Result<i32, String>> = OnceLock::new();
    DRIVER
        .get_or_init(|| {
            // SAFETY: only dlopens/dlcloses the library by name to see whether it exists.
            if !unsafe { sys::is_culib_present() } {
                return Err("no CUDA driver: libcuda.so.1 not found".into());
            }
            // cudarc panics if a symbol it binds is missing (a driver older than CUDA 13): report that instead.
            std::panic::catch_unwind(|| -> std::result::Result<i32, String> {
                result::init().map_err(|e| format!("CUDA driver: cuInit: {}", describe(e)))?;
                let mut v = 0;
                // SAFETY: `v` is a valid out-pointer for the duration of the call.
                check(unsafe { sys::cuDriverGetVersion(&mut v) }, "cuDriverGetVersion").map_err(|e| e.to_string())?;
                Ok(v)
            })
            .unwrap_or_else(|_| Err("CUDA driver: libcuda lacks symbols of CUDA 13; update the NVIDIA driver".into()))
        })
        .clone()
        .map_err(|e| anyhow!(e))
}

pub fn device_count() -> Result<i32> {
    driver()?;
    result::device::get_count().or_cuda("cuDeviceGetCount")
}

/// A usage error unless GPU `ordinal` exists: `no gpu:9 (this host has gpu:0, gpu:1)`.
pub fn check_ordinal(ordinal: u32) -> Result<()> {
    let count = device_count()?;
    if ordinal as i32 >= count {
        let have: Vec<String> = (0..count).map(|g| format!("gpu:{g}")).collect();
        let have = if have.is_empty() { "no GPU".to_string() } else { have.join(", ") };
        return Err(crate::error::usage(format!("no gpu:{ordinal} (this host has {have})")));
    }
    Ok(())
}

/// The primary context of GPU `ordinal`, retained once per process.
pub fn context(ordinal: u32) -> Result<Arc<CudaContext>> {
    static CONTEXTS: OnceLock<Mutex<HashMap<u32, Arc<CudaContext>>>> = OnceLock::new();
    check_ordinal(ordinal)?;
    let mut map = CONTEXTS.get_or_init(Default::default).lock().unwrap();
    if let Some(c) = map.get(&ordinal) {
        c.bind_to_thread().or_cuda("cuCtxSetCurrent")?;
        return Ok(c.clone());
    }
    let ctx = CudaContext::new(ordinal as usize).or_cuda(&format!("gpu:{ordinal}: creating its context"))?;
    map.insert(ordinal, ctx.clone());
    Ok(ctx)
}

/// Let copies and kernels issued in `from`'s context touch memory of `to` (one direction; idempotent).
pub fn enable_peer_access(from: &Arc<CudaContext>, to: &Arc<CudaContext>) -> Result<()> {
    from.bind_to_thread().or_cuda("cuCtxSetCurrent")?;
    // SAFETY: both contexts are live primary contexts retained by `context`.
    match unsafe { sys::cuCtxEnablePeerAccess(to.cu_ctx(), 0) } {
        sys::CUresult::CUDA_SUCCESS | sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => Ok(()),
        e => check(e, "cuCtxEnablePeerAccess"),
    }
}

/// Free and total memory of GPU `ordinal`, in bytes.
pub fn memory_info(ordinal: u32) -> Result<(u64, u64)> {
    context(ordinal)?;
    let (free, total) = result::mem_get_info().or_cuda("cuMemGetInfo")?;
    Ok((free as u64, total as u64))
}

/// Device memory: from cuMemAlloc here (IPC-exportable and dma-buf-exportable, freed on drop), or another
/// process's allocation opened through its IPC handle (closed on drop).
pub struct DeviceBuffer {
    alloc: Arc<DeviceAlloc>,
}

/// The allocation itself, freed (or closed) when the buffer and every [`super::MemoryHold`] on it are gone.
struct DeviceAlloc {
    ptr: CUdeviceptr,
    len: usize,
    ordinal: u32,
    ctx: Arc<CudaContext>,
    origin: Origin,
}

/// Whose allocation a [`DeviceBuffer`] is.
enum Origin {
    Allocated,
    /// Opened from another process's IPC handle. `keeper` is what keeps that process (and so the memory) alive; it
    /// is dropped after the mapping is closed.
    Imported {
        keeper: Box<dyn std::any::Any + Send + Sync>,
    },
}

impl DeviceBuffer {
    pub fn alloc(ordinal: u32, len: usize) -> Result<DeviceBuffer> {
        let ctx = context(ordinal)?;
        let (free, _) = memory_info(ordinal)?;
        if len as u64 > free {
            return Err(crate::error::usage(format!(
                "gpu:{ordinal} has {} free, {} asked",
                crate::plan::sizes::format_size(free),
                crate::plan::sizes::format_size(len as u64)
            )));
        }
        // SAFETY: the context is current; the returned pointer is owned by this value and freed once in Drop.
        let ptr = unsafe { result::malloc_sync(len) }.or_cuda(&format!("gpu:{ordinal}: cuMemAlloc({len})"))?;
        let buf = DeviceBuffer { alloc: Arc::new(DeviceAlloc { ptr, len, ordinal, ctx, origin: Origin::Allocated }) };
        buf.set_sync_memops()?;
        Ok(buf)
    }

    /// `len` bytes of another process's GPU memory on gpu:`ordinal`, opened through its IPC `handle`; `keeper`
    /// keeps the owning process alive for as long as this buffer (an engine worker that must own the memory it
    /// registers, say).
    pub fn import(
        ordinal: u32,
        handle: &[u8; 64],
        len: usize,
        keeper: Box<dyn std::any::Any + Send + Sync>,
    ) -> Result<DeviceBuffer> {
        let ctx = context(ordinal)?;
        let ptr = open_ipc(&ctx, handle, "cuIpcOpenMemHandle (a GPU buffer another process allocated)")?;
        let origin = Origin::Imported { keeper };
        Ok(DeviceBuffer { alloc: Arc::new(DeviceAlloc { ptr, len, ordinal, ctx, origin }) })
    }

    /// The device address of the first byte (valid for [`DeviceBuffer::len`] bytes while `self` lives).
    pub fn ptr(&self) -> CUdeviceptr {
        self.alloc.ptr
    }

    pub fn len(&self) -> usize {
        self.alloc.len
    }

    pub fn is_empty(&self) -> bool {
        self.alloc.len == 0
    }

    /// The GPU the memory is on.
    pub fn ordinal(&self) -> u32 {
        self.alloc.ordinal
    }

    /// The (primary) context the memory belongs to.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.alloc.ctx
    }

    /// Keeps the allocation alive, without access to its bytes (see [`super::MemoryHold`]).
    pub fn hold(&self) -> super::MemoryHold {
        super::MemoryHold { _owner: self.alloc.clone() }
    }

    /// What keeps an imported buffer's owner alive; None for memory allocated here.
    pub fn keeper(&self) -> Option<&(dyn std::any::Any + Send + Sync)> {
        match &self.alloc.origin {
            Origin::Allocated => None,
            Origin::Imported { keeper } => Some(keeper.as_ref()),
        }
    }

    /// CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: synchronous CUDA copies on this buffer complete before returning, which
    /// a NIC writing the same memory through GPUDirect RDMA relies on.
    fn set_sync_memops(&self) -> Result<()> {
        let one: u32 = 1;
        // SAFETY: the attribute takes a pointer to an unsigned int that lives across the call; `ptr` is ours.
        let r = unsafe {
            sys::cuPointerSetAttribute(
                &one as *const u32 as *const c_void,
                sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_SYNC_MEMOPS,
                self.alloc.ptr,
            )
        };
        check(r, "cuPointerSetAttribute(SYNC_MEMOPS)")
    }

    /// The 64-byte CUDA IPC handle another process on this host opens with [`IpcMapping::open`].
    pub fn ipc_handle(&self) -> Result<[u8; 64]> {
        if matches!(self.alloc.origin, Origin::Imported { .. }) {
            bail!(
                "gpu:{}: a buffer opened from another process's IPC handle cannot be exported again",
                self.alloc.ordinal
            );
        }
        self.alloc.ctx.bind_to_thread().or_cuda("cuCtxSetCurrent")?;
        // SAFETY: CUipcMemHandle is a plain byte array; zeroed is a valid value and the call fills it.
        let mut h: sys::CUipcMemHandle = unsafe { std::mem::zeroed() };
        // SAFETY: `h` is a valid out-pointer; `ptr` came from cuMemAlloc in this process.
        check(unsafe { sys::cuIpcGetMemHandle(&mut h, self.alloc.ptr) }, "cuIpcGetMemHandle")?;
        Ok(h.reserved.map(|c| c as u8))
    }

    /// Export `[offset, offset+len)` as a dma-buf fd (for ibv_reg_dmabuf_mr). Both must be multiples of 4 KiB.
    pub fn dmabuf_fd(&self, offset: usize, len: usize) -> Result<OwnedFd> {
        let inside = offset.checked_add(len).is_some_and(|end| end <= self.alloc.len);
        if offset % 4096 != 0 || len % 4096 != 0 || !inside {
            bail!("dma-buf export needs a 4 KiB-aligned range inside the buffer (offset {offset}, length {len})");
        }
        self.alloc.ctx.bind_to_thread().or_cuda("cuCtxSetCurrent")?;
        let mut fd: i32 = -1;
        // SAFETY: `fd` is a valid out-pointer for an int; the range lies inside our allocation (checked above).
        let r = unsafe {
            sys::cuMemGetHandleForAddressRange(
                &mut fd as *mut i32 as *mut c_void,
                self.alloc.ptr + offset as u64,
                len,
                sys::CUmemRangeHandleType::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
                0,
            )
        };
        check(r, "cuMemGetHandleForAddressRange(DMA_BUF_FD)")?;
        if fd < 0 {
            bail!("cuMemGetHandleForAddressRange returned fd {fd}");
        }
        // SAFETY: the driver just created this fd for us; nobody else owns it.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }
}

impl Drop for DeviceAlloc {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        match self.origin {
            // SAFETY: `ptr` came from cuMemAlloc and is freed exactly once, after the buffer and its holds are gone.
            Origin::Allocated => drop(unsafe { result::free_sync(self.ptr) }),
            // SAFETY: `ptr` came from cuIpcOpenMemHandle and is closed exactly once (the keeper drops after).
            Origin::Imported { .. } => drop(unsafe { sys::cuIpcCloseMemHandle(self.ptr) }),
        }
    }
}

/// Page-locked host memory (cuMemHostAlloc, portable to every context). Freed on drop.
pub struct PinnedBuffer {
    alloc: Arc<PinnedAlloc>,
}

/// The page-locked allocation, freed when the buffer and every [`super::MemoryHold`] on it are gone.
struct PinnedAlloc {
    ptr: *mut u8,
    len: usize,
    ctx: Arc<CudaContext>,
}

// SAFETY: page-locked host memory owned by this value (portable to every context, freed through the retained
// context from any thread), so it may move between threads.
unsafe impl Send for PinnedAlloc {}
// SAFETY: as for host memory's mapping: `&PinnedAlloc` is only reachable in this module (holds are opaque) and
// yields the address and the length, never a reference to the bytes.
unsafe impl Sync for PinnedAlloc {}

impl PinnedBuffer {
    pub fn alloc(len: usize) -> Result<PinnedBuffer> {
        let ctx = context(0)?;
        // SAFETY: the context is current; the pointer is owned by this value and freed once in Drop.
        let p = unsafe { result::malloc_host(len, sys::CU_MEMHOSTALLOC_PORTABLE) }
            .or_cuda(&format!("cuMemHostAlloc({len})"))?;
        let ptr = p as *mut u8;
        // Touch every page now so the first rep does not pay for it (cuMemHostAlloc pins, but be explicit).
        // SAFETY: `ptr` is `len` writable bytes owned by us.
        unsafe { std::ptr::write_bytes(ptr, 0, len) };
        Ok(PinnedBuffer { alloc: Arc::new(PinnedAlloc { ptr, len, ctx }) })
    }

    /// Keeps the allocation alive, without access to its bytes (see [`super::MemoryHold`]).
    pub fn hold(&self) -> super::MemoryHold {
        super::MemoryHold { _owner: self.alloc.clone() }
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.alloc.ptr
    }

    pub fn len(&self) -> usize {
        self.alloc.len
    }

    pub fn is_empty(&self) -> bool {
        self.alloc.len == 0
    }

    /// The bytes, for the owner to fill (see `HostBuffer::as_mut_slice`).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` is `len` writable bytes owned by `self`; `&mut self` excludes other references and, by the
        // rule of `Buffer::host_ptr`, every writer outside Rust.
        unsafe { std::slice::from_raw_parts_mut(self.alloc.ptr, self.alloc.len) }
    }
}

impl Drop for PinnedAlloc {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: `ptr` came from cuMemHostAlloc and is freed exactly once.
        let _ = unsafe { result::free_host(self.ptr as *mut c_void) };
    }
}

/// Another process's device buffer mapped into this one through its IPC handle. Closed on drop.
pub struct IpcMapping {
    ptr: CUdeviceptr,
    ctx: Arc<CudaContext>,
}

impl IpcMapping {
    pub fn open(ctx: &Arc<CudaContext>, handle: &[u8; 64]) -> Result<IpcMapping> {
        let ptr = open_ipc(ctx, handle, "cuIpcOpenMemHandle (the receiver's GPU buffer)")?;
        Ok(IpcMapping { ptr, ctx: ctx.clone() })
    }

    /// The mapped address in this process (valid while `self` lives).
    pub fn ptr(&self) -> CUdeviceptr {
        self.ptr
    }
}

/// Open another process's IPC `handle` in `ctx`; the caller closes the pointer (cuIpcCloseMemHandle) exactly once.
fn open_ipc(ctx: &Arc<CudaContext>, handle: &[u8; 64], what: &str) -> Result<CUdeviceptr> {
    ctx.bind_to_thread().or_cuda("cuCtxSetCurrent")?;
    // SAFETY: CUipcMemHandle is a plain byte array; zeroed then overwritten with the peer's bytes.
    let mut h: sys::CUipcMemHandle = unsafe { std::mem::zeroed() };
    h.reserved = handle.map(|b| b as std::ffi::c_char);
    let mut ptr: CUdeviceptr = 0;
    // SAFETY: `ptr` is a valid out-pointer; the driver validates the handle.
    let r = unsafe {
        sys::cuIpcOpenMemHandle_v2(&mut ptr, h, sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32)
    };
    check(r, what)?;
    Ok(ptr)
}

impl Drop for IpcMapping {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: `ptr` came from cuIpcOpenMemHandle and is closed exactly once.
        let _ = unsafe { sys::cuIpcCloseMemHandle(self.ptr) };
    }
}

/// What `kvxfer devices` shows about one GPU.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GpuInfo {
    pub ordinal: u32,
    pub name: String,
    pub memory_bytes: u64,
    pub pci_bus_id: String,
    pub compute_capability: String,
    pub dma_buf: bool,
    pub gpudirect_rdma: bool,
    /// Ordinals of the GPUs this one can access as peers (NVLink or PCIe P2P).
    pub peers: Vec<u32>,
}

pub fn gpus() -> Result<Vec<GpuInfo>> {
    use sys::CUdevice_attribute as A;
    let n = device_count()?;
    let mut out = Vec::new();
    for i in 0..n {
        let dev = result::device::get(i).or_cuda("cuDeviceGet")?;
        // SAFETY: (every attribute read) `dev` is a valid device handle and each attribute is a plain int.
        let attr = |a| unsafe { result::device::get_attribute(dev, a) }.or_cuda("cuDeviceGetAttribute");
        let mut bus = [0 as std::ffi::c_char; 64];
        // SAFETY: `bus` has the 64 bytes the call is told it has.
        check(unsafe { sys::cuDeviceGetPCIBusId(bus.as_mut_ptr(), bus.len() as i32, dev) }, "cuDeviceGetPCIBusId")?;
        // SAFETY: the driver wrote a NUL-terminated string into `bus`.
        let pci = unsafe { CStr::from_ptr(bus.as_ptr()) }.to_string_lossy().into_owned();
        let mut peers = Vec::new();
        for j in 0..n {
            if i == j {
                continue;
            }
            let mut v = 0;
            let other = result::device::get(j).or_cuda("cuDeviceGet")?;
            // SAFETY: `v` is a valid out-pointer; both handles are valid.
            check(unsafe { sys::cuDeviceCanAccessPeer(&mut v, dev, other) }, "cuDeviceCanAccessPeer")?;
            if v != 0 {
                peers.push(j as u32);
            }
        }
        out.push(GpuInfo {
            ordinal: i as u32,
            name: result::device::get_name(dev).or_cuda("cuDeviceGetName")?,
            // SAFETY: `dev` is valid.
            memory_bytes: unsafe { result::device::total_mem(dev) }.or_cuda("cuDeviceTotalMem")? as u64,
            pci_bus_id: pci,
            compute_capability: format!(
                "{}.{}",
                attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
                attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?
            ),
            dma_buf: attr(A::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED)? != 0,
            gpudirect_rdma: attr(A::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED)? != 0,
            peers,
        });
    }
    Ok(out)
}
