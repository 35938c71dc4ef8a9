//! Host memory: page-aligned anonymous mappings, populated before the first rep so page faults never land inside a
//! measured transfer.

use anyhow::{anyhow, bail, Result};
use nix::sys::memfd::{memfd_create, MemFdCreateFlag};
use nix::sys::mman::{mmap, mmap_anonymous, munmap, MapFlags, ProtFlags};
use std::num::NonZeroUsize;
use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::Arc;

/// A page-aligned buffer owned by this process.
pub struct HostBuffer {
    map: Arc<Mapping>,
    /// Whether the mapping really uses huge pages (`--hugepages` may fall back to normal pages).
    pub huge: bool,
}

/// The mapping itself, unmapped when the buffer and every [`super::MemoryHold`] on it are gone.
struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
    /// The memory file behind a shared mapping (see [`HostBuffer::shared`]).
    memfd: Option<OwnedFd>,
}

// SAFETY: the value owns its mapping outright (no thread-local state), so it may move to, and be unmapped on, any
// thread.
unsafe impl Send for Mapping {}
// SAFETY: `&Mapping` is only reachable inside this module (holds are opaque) and yields the address and the length,
// never a reference to the bytes (slices need `&mut HostBuffer`). The bytes are touched only through that address,
// by writers outside Rust (the kernel, a NIC, each bound to a shared borrow of the owner: see `Buffer::host_ptr`)
// and by volatile loads (`mem::region`), so sharing it between threads creates no Rust reference that a concurrent
// write could invalidate, whatever the writers overlap.
unsafe impl Sync for Mapping {}

impl HostBuffer {
    /// Map `len` bytes, populated up front. With `hugepages`, try MAP_HUGETLB first and report the fallback in `huge`.
    pub fn new(len: u64, hugepages: bool) -> Result<HostBuffer> {
        let len_usize = usize::try_from(len)?;
        let Some(nz) = NonZeroUsize::new(len_usize) else { bail!("cannot allocate an empty buffer") };
        let prot = ProtFlags::PROT_READ | ProtFlags::PROT_WRITE;
        let base = MapFlags::MAP_PRIVATE | MapFlags::MAP_POPULATE;
        if hugepages {
            // SAFETY: an anonymous private mapping aliases no existing memory; the result is checked.
            if let Ok(p) = unsafe { mmap_anonymous(None, nz, prot, base | MapFlags::MAP_HUGETLB) } {
                return Ok(HostBuffer::owning(p.cast(), len_usize, true, None));
            }
        }
        // SAFETY: as above.
        let p = unsafe { mmap_anonymous(None, nz, prot, base) }
            .map_err(|e| anyhow::anyhow!("cannot map {} of host memory: {e}", crate::plan::sizes::format_size(len)))?;
        Ok(HostBuffer::owning(p.cast(), len_usize, false, None))
    }

    /// Map `len` bytes of a memory file, populated up front, that a helper process can map too (through
    /// [`HostBuffer::share_path`]): an engine driven from another process (mooncake's Python worker) registers and
    /// moves these very pages, and this process fills and verifies them.
    pub fn shared(len: u64) -> Result<HostBuffer> {
        let len_usize = usize::try_from(len)?;
        let Some(nz) = NonZeroUsize::new(len_usize) else { bail!("cannot allocate an empty buffer") };
        let what = || crate::plan::sizes::format_size(len);
        let fd = memfd_create(c"kvxfer-buffer", MemFdCreateFlag::MFD_CLOEXEC)
            .map_err(|e| anyhow!("cannot create a memory file for {} of shared host memory: {e}", what()))?;
        nix::unistd::ftruncate(&fd, i64::try_from(len)?)
            .map_err(|e| anyhow!("cannot size the memory file to {}: {e}", what()))?;
        let prot = ProtFlags::PROT_READ | ProtFlags::PROT_WRITE;
        // SAFETY: a new shared mapping of a file only this process has opened so far; the result is checked.
        let p = unsafe { mmap(None, nz, prot, MapFlags::MAP_SHARED | MapFlags::MAP_POPULATE, &fd, 0) }
            .map_err(|e| anyhow!("cannot map {} of shared host memory: {e}", what()))?;
        Ok(HostBuffer::owning(p.cast(), len_usize, false, Some(fd)))
    }

    fn owning(ptr: NonNull<u8>, len: usize, huge: bool, memfd: Option<OwnedFd>) -> HostBuffer {
        HostBuffer { map: Arc::new(Mapping { ptr, len, memfd }), huge }
    }

    /// Keeps the mapping alive, without access to its bytes (see [`super::MemoryHold`]).
    pub fn hold(&self) -> super::MemoryHold {
        super::MemoryHold { _owner: self.map.clone() }
    }

    /// Where another process of this user opens the same pages (`/proc/PID/fd/N`), for a shared buffer.
    pub fn share_path(&self) -> Option<String> {
        self.map.memfd.as_ref().map(|fd| format!("/proc/{}/fd/{}", std::process::id(), fd.as_raw_fd()))
    }

    pub fn len(&self) -> usize {
        self.map.len
    }

    pub fn is_empty(&self) -> bool {
        self.map.len == 0
    }

    /// Raw base pointer, for transports that hand the memory to the kernel or a NIC.
    pub fn as_ptr(&self) -> *mut u8 {
        self.map.ptr.as_ptr()
    }

    /// The bytes, for the owner to fill. There is no shared-borrow counterpart: see the `Sync` note above.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: the mapping is `len` readable and writable bytes that live as long as `self`; `&mut self` excludes
        // every other Rust reference (a hold gives none), and writers outside Rust only write while they hold a
        // shared borrow of the owning buffer (`Buffer::host_ptr`), which `&mut` excludes too.
        unsafe { std::slice::from_raw_parts_mut(self.map.ptr.as_ptr(), self.map.len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` describe exactly the mapping created in `new` or `shared`, unmapped once, after the
        // buffer and every hold on it are gone.
        let _ = unsafe { munmap(self.ptr.cast(), self.len) };
    }
}

/// One `Name:  N kB` field of /proc/meminfo, in bytes (or in pages for the HugePages_* counters).
pub fn meminfo_field(text: &str, name: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.split(':').next() == Some(name))?;
    let mut words = line.split(':').nth(1)?.split_whitespace();
    let n: u64 = words.next()?.parse().ok()?;
    Some(if words.next() == Some("kB") { n * 1024 } else { n })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffer_is_page_aligned_zeroed_and_writable() {
        let mut b = HostBuffer::new(3 * 4096 + 5, false).unwrap();
        assert_eq!(b.as_ptr() as usize % 4096, 0);
        assert!(b.as_mut_slice().iter().all(|&x| x == 0));
        b.as_mut_slice()[12292] = 7;
        assert_eq!(b.as_mut_slice()[12292], 7);
    }

    /// Whether a mapping of this process covers `addr` (/proc/self/maps). Covers, not starts at: the kernel merges an
    /// anonymous mapping with a neighbour of the same protection, and the merged one starts below it.
    fn mapped_at(addr: usize) -> bool {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        maps.lines().filter_map(|l| l.split_whitespace().next()?.split_once('-')).any(|(a, b)| {
            let range = |t: &str| usize::from_str_radix(t, 16).ok();
            matches!((range(a), range(b)), (Some(a), Some(b)) if a <= addr && addr < b)
        })
    }

    #[test]
    fn a_hold_keeps_the_mapping_after_the_buffer_is_gone() {
        let b = HostBuffer::new(5 * 4096 + 123, false).unwrap();
        let addr = b.as_ptr() as usize;
        let hold = b.hold();
        drop(b);
        assert!(mapped_at(addr), "the mapping went with the buffer while a hold lived");
        drop(hold);
        assert!(!mapped_at(addr), "the mapping outlived its last owner");
    }

    #[test]
    fn a_shared_buffer_is_seen_through_its_path() {
        let mut b = HostBuffer::shared(8192).unwrap();
        b.as_mut_slice()[4100] = 42;
        let path = b.share_path().expect("shared buffers have a path");
        let other = std::fs::read(&path).unwrap();
        assert_eq!((other.len(), other[4100]), (8192, 42));
        assert_eq!(HostBuffer::new(4096, false).unwrap().share_path(), None);
    }

    #[test]
    fn hugepages_fall_back_when_none_are_reserved() {
        let b = HostBuffer::new(2 << 20, true).unwrap();
        assert_eq!(b.len(), 2 << 20);
        let reserved = std::fs::read_to_string("/proc/meminfo").ok().and_then(|t| meminfo_field(&t, "HugePages_Free"));
        if reserved == Some(0) {
            assert!(!b.huge);
        }
    }

    #[test]
    fn parses_meminfo() {
        let t = "MemTotal:       24000000 kB\nMemAvailable:   1000 kB\nHugePages_Free:        3\n";
        assert_eq!(meminfo_field(t, "MemAvailable"), Some(1_024_000));
        assert_eq!(meminfo_field(t, "HugePages_Free"), Some(3));
        assert_eq!(meminfo_field(t, "Nope"), None);
    }
}
