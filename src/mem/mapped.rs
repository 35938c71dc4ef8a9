//! Pinned host memory mapped into a GPU's address space (cuMemHostAlloc with DEVICEMAP): a kernel on that GPU reads
//! and writes it across PCIe while the host does. Since both sides touch it at once, this owner hands out no slice of
//! its bytes, only atomic words and bytes, which the host may read while the GPU writes them.

use super::cuda::{check, context, CUdeviceptr, OrDriverError};
use anyhow::{bail, Result};
use cudarc::driver::{result, sys, CudaContext};
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, AtomicU8};
use std::sync::Arc;

/// `len` bytes of page-locked host memory, zeroed, that GPU `ordinal`'s kernels reach at [`MappedHost::device_ptr`].
pub struct MappedHost {
    ptr: *mut u8,
    len: usize,
    dev: CUdeviceptr,
    ctx: Arc<CudaContext>,
}

// SAFETY: page-locked memory owned by this value (portable to every context, freed through the retained context from
// any thread); it is only reached through atomics, so it may move between threads and be shared by them.
unsafe impl Send for MappedHost {}
// SAFETY: as above: `&MappedHost` yields atomics and addresses, never a plain reference to the bytes.
unsafe impl Sync for MappedHost {}

impl MappedHost {
    pub fn alloc(ordinal: u32, len: usize) -> Result<MappedHost> {
        let ctx = context(ordinal)?;
        let flags = sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;
        // SAFETY: the context is current; the pointer is owned by the value built below and freed once in Drop.
        let p = unsafe { result::malloc_host(len, flags) }.or_cuda(&format!("cuMemHostAlloc({len}, DEVICEMAP)"))?;
        let ptr = p as *mut u8;
        // Zeroed now: the words start at 0 (no message), and the first message does not fault pages in.
        // SAFETY: `ptr` is `len` writable bytes owned by us and not yet visible to any kernel.
        unsafe { std::ptr::write_bytes(ptr, 0, len) };
        let mut dev: CUdeviceptr = 0;
        // SAFETY: `dev` is a valid out-pointer; `p` came from cuMemHostAlloc with DEVICEMAP in this context.
        let r = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut dev, p, 0) };
        let mapped = MappedHost { ptr, len, dev, ctx };
        check(r, "cuMemHostGetDevicePointer")?;
        Ok(mapped)
    }

    /// Where the GPU's kernels reach the first byte.
    pub fn device_ptr(&self) -> CUdeviceptr {
        self.dev
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The 8-byte word at `offset` (a multiple of 8, inside the buffer), as an atomic.
    pub fn word(&self, offset: usize) -> Result<&AtomicU64> {
        if offset % 8 != 0 || offset.checked_add(8).is_none_or(|end| end > self.len) {
            bail!("word at {offset} is outside the {}-byte mapped buffer or unaligned", self.len);
        }
        // SAFETY: 8 aligned bytes inside our live allocation (checked above; the allocation is page-aligned); every
        // host access goes through atomics, and the GPU's aligned 8-byte stores do not tear.
        Ok(unsafe { AtomicU64::from_ptr(self.ptr.add(offset) as *mut u64) })
    }

    /// The byte at `offset` (inside the buffer), as an atomic.
    pub fn byte(&self, offset: usize) -> Result<&AtomicU8> {
        if offset >= self.len {
            bail!("byte {offset} is outside the {}-byte mapped buffer", self.len);
        }
        // SAFETY: one byte inside our live allocation; every host access goes through atomics.
        Ok(unsafe { AtomicU8::from_ptr(self.ptr.add(offset)) })
    }
}

impl Drop for MappedHost {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: `ptr` came from cuMemHostAlloc and is freed exactly once; the owner of any kernel using it stopped
        // that kernel first.
        let _ = unsafe { result::free_host(self.ptr as *mut c_void) };
    }
}
