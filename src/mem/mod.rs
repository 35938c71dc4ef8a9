//! Where bytes live: ordinary host memory, pinned (page-locked) host memory, or a GPU's memory. Transports see a
//! [`Buffer`] and ask it for what they can use (a raw host region, a device address); verify fills and checks it
//! where it lives (GPU buffers with a kernel, never through a host shadow copy). A shared `&Buffer` never yields a
//! reference to its bytes, since a peer or a device may be writing them: see [`region`].

pub mod cacheline;
pub mod cuda;
pub mod host;
pub mod kernels;
pub mod mapped;
pub mod nvml;
pub mod region;

pub use host::HostBuffer;
pub use region::HostRegion;

use crate::pattern::Span;
use anyhow::Result;
use std::fmt;

/// A memory kind as users write it: `host`, `pinned`, `gpu:N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemKind {
    Host,
    Pinned,
    Gpu(u32),
}

impl fmt::Display for MemKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemKind::Host => f.write_str("host"),
            MemKind::Pinned => f.write_str("pinned"),
            MemKind::Gpu(n) => write!(f, "gpu:{n}"),
        }
    }
}

/// As users write it (`gpu:0`).
impl serde::Serialize for MemKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// As `--mem`, `--src` and `--dst` take it (the command line parses those flags with this).
impl std::str::FromStr for MemKind {
    type Err = String;

    fn from_str(text: &str) -> Result<MemKind, String> {
        let t = text.trim().to_ascii_lowercase();
        let kind = match t.as_str() {
            "host" => Some(MemKind::Host),
            "pinned" => Some(MemKind::Pinned),
            "gpu" => Some(MemKind::Gpu(0)),
            _ => t.strip_prefix("gpu:").and_then(|n| n.parse().ok()).map(MemKind::Gpu),
        };
        kind.ok_or_else(|| "expected host, pinned or gpu:N (e.g. gpu:0)".to_string())
    }
}

/// Keeps a buffer's memory allocated (mapped, pinned, on the GPU) for as long as it lives, without any access to
/// the bytes: what a registration with a device keeps, so that the device's view of the memory cannot outlive the
/// memory whatever order its owners drop in.
#[derive(Clone)]
pub struct MemoryHold {
    _owner: std::sync::Arc<dyn std::any::Any + Send + Sync>,
}

/// A buffer of one of the kinds.
pub enum Buffer {
    Host(HostBuffer),
    Pinned(cuda::PinnedBuffer),
    Gpu(cuda::DeviceBuffer),
}

/// Who may map a host buffer: this process alone, or helper processes too (an engine's worker).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostSharing {
    Private,
    /// A memory file (see [`HostBuffer::shared`]); huge pages are not tried for it.
    Shared,
}

impl Buffer {
    pub fn alloc(kind: MemKind, len: u64, hugepages: bool) -> Result<Buffer> {
        Buffer::alloc_for(kind, len, hugepages, HostSharing::Private)
    }

    /// [`Buffer::alloc`], with host memory shared with helper processes when asked.
    pub fn alloc_for(kind: MemKind, len: u64, hugepages: bool, sharing: HostSharing) -> Result<Buffer> {
        Ok(match kind {
            MemKind::Host if sharing == HostSharing::Shared => {
                if hugepages {
                    crate::errln!("note: --hugepages: a buffer shared with the engine's worker uses normal pages");
                }
                Buffer::Host(HostBuffer::shared(len)?)
            }
            MemKind::Host => {
                let b = HostBuffer::new(len, hugepages)?;
                if hugepages && !b.huge {
                    crate::errln!("note: --hugepages: no huge pages available; using normal pages");
                }
                Buffer::Host(b)
            }
            MemKind::Pinned => Buffer::Pinned(cuda::PinnedBuffer::alloc(usize::try_from(len)?)?),
            MemKind::Gpu(n) => Buffer::Gpu(cuda::DeviceBuffer::alloc(n, usize::try_from(len)?)?),
        })
    }

    pub fn kind(&self) -> MemKind {
        match self {
            Buffer::Host(_) => MemKind::Host,
            Buffer::Pinned(_) => MemKind::Pinned,
            Buffer::Gpu(g) => MemKind::Gpu(g.ordinal()),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Buffer::Host(h) => h.len(),
            Buffer::Pinned(p) => p.len(),
            Buffer::Gpu(g) => g.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keeps this buffer's memory allocated while the hold lives (see [`MemoryHold`]).
    pub fn hold(&self) -> MemoryHold {
        match self {
            Buffer::Host(h) => h.hold(),
            Buffer::Pinned(p) => p.hold(),
            Buffer::Gpu(g) => g.hold(),
        }
    }

    /// Base pointer of host-accessible memory (host or pinned); None for GPU memory.
    ///
    /// The one rule for everything that takes this address (or [`Buffer::host_region`]'s): whoever lets a writer
    /// outside Rust write through it — the kernel (readv), a NIC (an MR with remote write), a GPU copy — keeps a
    /// shared borrow of the buffer (an `Arc` clone, as every transport target does) until that writer has stopped.
    /// `&mut Buffer` therefore means nobody else writes the bytes, which the `fill_*` methods rely on; with only
    /// `&Buffer`, the bytes are read through volatile loads (see [`region`]).
    pub fn host_ptr(&self) -> Option<*mut u8> {
        match self {
            Buffer::Host(h) => Some(h.as_ptr()),
            Buffer::Pinned(p) => Some(p.as_ptr()),
            Buffer::Gpu(_) => None,
        }
    }

    /// Where a helper process maps this buffer's pages, for host memory allocated shared.
    pub fn share_path(&self) -> Option<String> {
        match self {
            Buffer::Host(h) => h.share_path(),
            _ => None,
        }
    }

    /// Host-accessible memory (host or pinned) as a raw region borrowed from the buffer; None for GPU memory.
    pub fn host_region(&self) -> Option<HostRegion<'_>> {
        let base = std::ptr::NonNull::new(self.host_ptr()?)?;
        // SAFETY: host kinds are `len` readable bytes that stay mapped while `self` is borrowed; a shared borrow
        // hands out no references to them (the only slices are made from `&mut self`, which this borrow excludes).
        Some(unsafe { HostRegion::new(base, self.len()) })
    }

    /// The address CUDA copies use: the device pointer, or the host pointer (unified addressing).
    pub fn cuda_addr(&self) -> u64 {
        match self {
            Buffer::Gpu(g) => g.ptr(),
            _ => self.host_ptr().expect("host kinds have a host pointer") as u64,
        }
    }

    /// The host bytes as a slice to fill. `&mut self` excludes every other reference, and writers outside Rust
    /// hold a shared borrow while they may write (see [`Buffer::host_ptr`]), so nothing else touches the bytes.
    fn host_bytes_mut(&mut self) -> Option<&mut [u8]> {
        match self {
            Buffer::Host(h) => Some(h.as_mut_slice()),
            Buffer::Pinned(p) => Some(p.as_mut_slice()),
            Buffer::Gpu(_) => None,
        }
    }

    /// `[offset, offset + len)` as a usize range, or an error when it is not inside the buffer.
    fn range(&self, offset: u64, len: u64) -> Result<std::ops::Range<usize>> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len() as u64 => Ok(offset as usize..end as usize),
            _ => anyhow::bail!("{len} bytes at offset {offset} fall outside the {}-byte buffer", self.len()),
        }
    }

    /// Fill the first `len` bytes with the `--verify` pattern of (seed, rep), where the memory lives.
    pub fn fill_pattern(&mut self, len: u64, seed: u64, rep: u64) -> Result<()> {
        let range = self.range(0, len)?;
        match self {
            Buffer::Gpu(g) => kernels::kernels(g.ordinal())?.fill(g.ptr(), len, seed, rep),
            _ => {
                let bytes = &mut self.host_bytes_mut().expect("host kinds")[range];
                crate::pattern::fill(bytes, seed, rep);
                cacheline::write_back(bytes);
                Ok(())
            }
        }
    }

    /// Fill host memory `[offset, offset + len)` with the pattern of (seed, rep) — a slice of the transfer, so a
    /// long fill can stop between slices. GPU buffers fill whole (milliseconds): use `fill_pattern`.
    pub fn fill_pattern_range(&mut self, offset: u64, len: u64, seed: u64, rep: u64) -> Result<()> {
        let range = self.range(offset, len)?;
        let Some(s) = self.host_bytes_mut() else {
            anyhow::bail!("fill_pattern_range is for host memory; GPU buffers fill whole");
        };
        crate::pattern::fill_from(&mut s[range.clone()], offset, seed, rep);
        cacheline::write_back(&mut s[range]);
        Ok(())
    }

    /// Invert the byte at `offset` of host memory: the test-only fault `KVXFER_TEST_FAULT=flip-byte` (see
    /// `run::sender`), which proves that `--verify` counts a corrupted byte.
    pub fn flip_byte(&mut self, offset: u64) -> Result<()> {
        let at = self.range(offset, 1)?.start;
        let Some(s) = self.host_bytes_mut() else {
            anyhow::bail!("KVXFER_TEST_FAULT=flip-byte corrupts host memory; this buffer is on a GPU");
        };
        s[at] ^= 0xff;
        Ok(())
    }

    /// Count mismatches in host memory `[offset, offset + len)`, a slice of the transfer (see `fill_pattern_range`).
    /// Reads through volatile loads: a peer may still be writing (see [`region`]).
    pub fn count_mismatches_range(&self, offset: u64, len: u64, seed: u64, rep: u64) -> Result<u64> {
        self.range(offset, len)?;
        let Some(region) = self.host_region() else {
            anyhow::bail!("count_mismatches_range is for host memory; GPU buffers verify whole");
        };
        Ok(crate::pattern::count_mismatches_in(&region, offset, len, seed, rep))
    }

    /// Count the bytes of the first `len` that differ from the pattern of (seed, rep).
    pub fn count_mismatches(&self, len: u64, seed: u64, rep: u64) -> Result<u64> {
        self.range(0, len)?;
        match self {
            Buffer::Gpu(g) => kernels::kernels(g.ordinal())?.count_mismatches(g.ptr(), len, seed, rep),
            _ => self.count_mismatches_range(0, len, seed, rep),
        }
    }

    /// Fill each span (a paged layout's piece) with the `--verify` pattern of its logical offset, where the memory
    /// lives. Spans must lie inside the buffer and not overlap.
    pub fn fill_spans(&mut self, spans: &[Span], seed: u64, rep: u64) -> Result<()> {
        match self {
            Buffer::Gpu(g) => {
                crate::pattern::check_spans(spans, g.len() as u64, true)?;
                kernels::kernels(g.ordinal())?.fill_spans(g.ptr(), spans, seed, rep)
            }
            _ => {
                let bytes = self.host_bytes_mut().expect("host kinds");
                crate::pattern::fill_spans(bytes, spans, seed, rep)?;
                for s in spans {
                    cacheline::write_back(&mut bytes[s.offset as usize..(s.offset + s.len) as usize]);
                }
                Ok(())
            }
        }
    }

    /// Count the bytes of the spans that differ from the pattern of their logical offsets.
    pub fn count_span_mismatches(&self, spans: &[Span], seed: u64, rep: u64) -> Result<u64> {
        match self {
            Buffer::Gpu(g) => {
                crate::pattern::check_spans(spans, g.len() as u64, false)?;
                kernels::kernels(g.ordinal())?.count_span_mismatches(g.ptr(), spans, seed, rep)
            }
            _ => crate::pattern::count_span_mismatches_in(&self.host_region().expect("host kinds"), spans, seed, rep),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_memory_kinds() {
        assert_eq!("host".parse(), Ok(MemKind::Host));
        assert_eq!("Pinned".parse(), Ok(MemKind::Pinned));
        assert_eq!("gpu:1".parse(), Ok(MemKind::Gpu(1)));
        assert_eq!("gpu".parse(), Ok(MemKind::Gpu(0)));
        for bad in ["gpu:", "gpu:x", "cuda", ""] {
            assert!(bad.parse::<MemKind>().unwrap_err().contains("gpu:N"), "{bad}");
        }
        assert_eq!(MemKind::Gpu(3).to_string(), "gpu:3");
    }

    #[test]
    fn host_buffer_fills_and_verifies_in_place() {
        let mut b = Buffer::alloc(MemKind::Host, 4096 + 3, false).unwrap();
        b.fill_pattern(4099, 1, 2).unwrap();
        assert_eq!(b.count_mismatches(4099, 1, 2).unwrap(), 0);
        assert!(b.count_mismatches(4099, 1, 3).unwrap() > 2000);
    }

    #[test]
    fn ranges_past_the_end_are_errors_not_panics() {
        let mut b = Buffer::alloc(MemKind::Host, 4096, false).unwrap();
        assert!(b.fill_pattern(4097, 1, 2).is_err());
        assert!(b.fill_pattern_range(4000, 97, 1, 2).is_err());
        assert!(b.fill_pattern_range(u64::MAX, 2, 1, 2).is_err());
        assert!(b.count_mismatches(4097, 1, 2).is_err());
        assert!(b.count_mismatches_range(1, 4096, 1, 2).is_err());
        assert!(b.count_span_mismatches(&[Span { offset: 4090, logical: 0, len: 7 }], 1, 2).is_err());
    }

    /// Without a GPU (CI, this machine) GPU kinds fail with the driver's sentence, never a panic.
    #[test]
    fn gpu_kinds_without_a_driver_are_errors_not_panics() {
        match cuda::driver() {
            Ok(v) => crate::errln!("skipped: a CUDA driver ({v}) is present; the GPU tests cover this host"),
            Err(e) => {
                assert!(e.to_string().contains("no CUDA driver"), "{e}");
                let err = Buffer::alloc(MemKind::Gpu(0), 4096, false).err().expect("no driver, no buffer");
                assert!(err.to_string().contains("libcuda"), "{err}");
                assert!(Buffer::alloc(MemKind::Pinned, 4096, false).is_err());
            }
        }
    }
}
