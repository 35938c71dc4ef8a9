//! Memory registration in pieces. One memory region per piece of at most `--mr-chunk` bytes (default: the
//! device's max_mr_size, at most 2 GiB), so a 12 GiB buffer registers on any NIC, and so users can test the
//! "large MR" cliff. GPU buffers register through a dma-buf (GPUDirect RDMA without nvidia-peermem), falling
//! back to the device pointer (nvidia-peermem); which one worked is recorded.

use crate::mem::{Buffer, MemoryHold};
use crate::named::named_enum;
use crate::plan::sizes::format_size;
use anyhow::{anyhow, Result};
use serde::{Deserialize, Serialize};
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::AccessFlags;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Instant;

/// Default and upper bound of a piece: 2 GiB keeps every length inside the 31 bits some providers assume.
pub const MAX_CHUNK: u64 = 2 << 30;

/// One registered piece as the peer (remote) or the poster (local) sees it.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Piece {
    /// Offset of the piece in the buffer.
    pub offset: u64,
    pub len: u64,
    /// Address to put in work requests (virtual address, or the dma-buf iova).
    pub addr: u64,
    pub key: u32,
}

named_enum! {
    /// How a buffer was registered with the NIC, as the results name it (`reg_method`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum RegMethod {
        // Plain host memory, or the last resort.
        RegMr = "ibv_reg_mr",
        // GPUDirect RDMA through a dma-buf of the GPU range.
        Dmabuf = "ibv_reg_dmabuf_mr (dma-buf)",
        // GPUDirect RDMA through nvidia-peermem resolving the device pointer.
        PeerMem = "ibv_reg_mr on the device pointer (nvidia-peermem)",
        // --odp: on-demand paging, every page faulted in by ibv_advise_mr before the first rep.
        OnDemand = "ibv_reg_mr (on-demand paging, prefetched)",
    }
}

pub struct Registration {
    _mrs: Vec<Arc<MemoryRegion>>,
    /// The memory the regions cover, kept allocated until they are deregistered (fields drop in order: `_mrs`
    /// first), however the owner orders its own fields.
    _memory: MemoryHold,
    pub pieces: Vec<Piece>,
    pub method: RegMethod,
    pub reg_ms: f64,
}

/// How a registration lets the NIC at it: remote writes (the receiver's region), relaxed PCIe ordering, on-demand
/// paging.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    pub remote_write: bool,
    /// IBV_ACCESS_REMOTE_READ: only the sender's run buffer of an `--op read` run, which the receiver READs.
    pub remote_read: bool,
    /// IBV_ACCESS_RELAXED_ORDERING: in the optional range of access flags (from IBV_ACCESS_OPTIONAL_FIRST, 1 << 20),
    /// so a device without relaxed ordering registers as if it were absent.
    pub relaxed_ordering: bool,
    /// IBV_ACCESS_ON_DEMAND: pages are faulted in by the NIC (prefetched once after registering).
    pub odp: bool,
}

impl Access {
    /// What `cfg` asks for a region that peers write into (`remote_write`) or not.
    pub fn of(cfg: &super::VerbsConfig, remote_write: bool) -> Access {
        Access { remote_write, remote_read: false, relaxed_ordering: cfg.relaxed_ordering, odp: cfg.odp }
    }

    /// What `cfg` asks for the sender's buffer of an `--op read` run: the receiver READs it, nothing writes it.
    pub fn remote_readable(cfg: &super::VerbsConfig) -> Access {
        Access { remote_read: true, ..Access::of(cfg, false) }
    }

    pub fn flags(self) -> AccessFlags {
        let mut f = AccessFlags::LocalWrite;
        if self.remote_write {
            f |= AccessFlags::RemoteWrite;
        }
        if self.remote_read {
            f |= AccessFlags::RemoteRead;
        }
        if self.relaxed_ordering {
            f |= AccessFlags::RelaxedOrdering;
        }
        if self.odp {
            f |= AccessFlags::OnDemand;
        }
        f
    }
}

/// The piece size for this device: the device's max_mr_size capped at 2 GiB by default; a size the user asks for
/// (`--mr-chunk`, `--dst-mr-chunk`) is honoured up to max_mr_size, so the large-MR cliff can be measured. Work
/// request lengths stay below 2^31 either way: `post::segments` cuts them at the port's max_msg_sz.
pub fn chunk_size(requested: Option<u64>, max_mr_size: u64) -> u64 {
    let device_max = max_mr_size.max(4096) & !4095;
    match requested {
        Some(r) => r.min(device_max).max(4096),
        None => device_max.min(MAX_CHUNK),
    }
}

/// Register the first `len` bytes of `buf` in pieces of `chunk` bytes. The registration holds the memory (not the
/// buffer's contents): the regions cannot outlive it.
pub fn register(
    pd: &Arc<ProtectionDomain>,
    buf: &Buffer,
    len: u64,
    chunk: u64,
    access: Access,
) -> Result<Registration> {
    if len > buf.len() as u64 || chunk == 0 {
        anyhow::bail!(
            "cannot register {} of a {} buffer in pieces of {}",
            format_size(len),
            format_size(buf.len() as u64),
            format_size(chunk)
        );
    }
    if access.odp && matches!(buf, Buffer::Gpu(_)) {
        crate::bail_usage!(
            "--odp pages host memory on demand; this end's buffer is GPU memory: drop --odp or use host memory"
        );
    }
    let remote_write = access.remote_write;
    // A piece the peer reaches travels with its rkey; one only this end posts from, with its lkey.
    let remote = access.remote_write || access.remote_read;
    let flags = access.flags();
    let t = Instant::now();
    let mut mrs = Vec::new();
    let mut pieces = Vec::new();
    let mut method = RegMethod::RegMr;
    let mut offset = 0u64;
    while offset < len {
        let n = chunk.min(len - offset);
        let (mr, m) = register_piece(pd, buf, offset, n, flags)?;
        method = m;
        pieces.push(Piece {
            offset,
            len: n,
            addr: mr.get_ptr() as u64,
            key: if remote { mr.rkey() } else { mr.lkey() },
        });
        mrs.push(mr);
        offset += n;
    }
    if access.odp {
        prefetch(pd, &mrs, remote_write)?;
        method = RegMethod::OnDemand;
    }
    let reg_ms = t.elapsed().as_secs_f64() * 1e3;
    Ok(Registration { _mrs: mrs, _memory: buf.hold(), pieces, method, reg_ms })
}

/// Fault every page of the on-demand regions in now (ibv_advise_mr, flushed: it returns once they are mapped), so
/// the first rep does not pay for page faults the NIC takes; the time counts as registration.
fn prefetch(pd: &Arc<ProtectionDomain>, mrs: &[Arc<MemoryRegion>], writable: bool) -> Result<()> {
    use rdma_mummy_sys::{ib_uverbs_advise_mr_advice as advice, ibv_advise_mr, ibv_sge};
    const IBV_ADVISE_MR_FLAG_FLUSH: u32 = 1;
    // A scatter entry's length is 32 bits: cut each region into entries of at most 1 GiB.
    const MAX_SGE_LEN: u64 = 1 << 30;
    let mut sges = Vec::new();
    for mr in mrs {
        let (base, len) = (mr.get_ptr() as u64, mr.region_len() as u64);
        let mut at = 0;
        while at < len {
            let n = MAX_SGE_LEN.min(len - at);
            sges.push(ibv_sge { addr: base + at, length: n as u32, lkey: mr.lkey() });
            at += n;
        }
    }
    let how = match writable {
        true => advice::IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_WRITE,
        false => advice::IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH,
    };
    for batch in sges.chunks_mut(16) {
        let (sg_list, n) = (batch.as_mut_ptr(), batch.len() as u32);
        // SAFETY: the protection domain is alive (`pd` holds it); the entries name registered regions of it by
        // their lkeys, and the call reads `n` entries from `batch`, which outlives it.
        let rc = unsafe { ibv_advise_mr(pd.pd().as_ptr(), how, IBV_ADVISE_MR_FLAG_FLUSH, sg_list, n) };
        if rc != 0 {
            anyhow::bail!("--odp: ibv_advise_mr prefetch failed: {}", std::io::Error::from_raw_os_error(rc));
        }
    }
    Ok(())
}

fn register_piece(
    pd: &Arc<ProtectionDomain>,
    buf: &Buffer,
    offset: u64,
    len: u64,
    access: AccessFlags,
) -> Result<(Arc<MemoryRegion>, RegMethod)> {
    let what = || format!("registering {} at offset {} of the {} buffer", format_size(len), offset, buf.kind());
    match buf {
        Buffer::Gpu(g) => {
            // GPUDirect RDMA, preferred: a dma-buf of the range (needs a 4 KiB-aligned range).
            let dmabuf = g.dmabuf_fd(offset as usize, len as usize).and_then(|fd| {
                // SAFETY: the fd exports exactly [offset, offset+len) of a live device allocation (`register`
                // checked the range) that the Registration holds until the MR is gone; iova = the range's address.
                unsafe { pd.reg_dmabuf_mr(0, len as usize, g.ptr() + offset, fd.as_raw_fd(), access) }
                    .map_err(|e| anyhow!("ibv_reg_dmabuf_mr: {e}"))
            });
            match dmabuf {
                Ok(mr) => Ok((mr, RegMethod::Dmabuf)),
                Err(dma_err) => {
                    // nvidia-peermem path: the NIC driver resolves the device pointer itself.
                    // SAFETY: the range lies inside a live device allocation (checked by `register`), held by the
                    // Registration until the MR is gone.
                    unsafe { pd.reg_mr((g.ptr() + offset) as usize, len as usize, access) }
                        .map(|mr| (mr, RegMethod::PeerMem))
                        .map_err(|e| {
                            anyhow!(
                                "{}: the NIC refused GPU memory — dma-buf: {dma_err:#}; device pointer: {e}. GPUDirect RDMA needs a NIC and driver that accept dma-bufs or nvidia-peermem",
                                what()
                            )
                        })
                }
            }
        }
        _ => {
            let base = buf.host_ptr().expect("host kinds have a host pointer");
            // SAFETY: [base+offset, +len) lies inside the live mapping (`register` checked the range), which the
            // Registration holds until the MR is gone. With `remote_write` the peer's NIC writes there: the target
            // holds an `Arc` of the buffer until its MRs are gone (the rule of `Buffer::host_ptr`), and the
            // receiver reads the bytes only through volatile loads.
            unsafe { pd.reg_mr(base as usize + offset as usize, len as usize, access) }
                .map(|mr| (mr, RegMethod::RegMr))
                .map_err(|e| anyhow!("{}: ibv_reg_mr: {e} (is the memlock limit high enough? see ulimit -l)", what()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_flags_follow_the_knobs() {
        // IBV_ACCESS_RELAXED_ORDERING is IBV_ACCESS_OPTIONAL_FIRST (1 << 20), ON_DEMAND 1 << 6.
        assert_eq!(AccessFlags::RelaxedOrdering.bits(), 1 << 20);
        assert_eq!(AccessFlags::OnDemand.bits(), 1 << 6);
        let cfg = super::super::VerbsConfig::default();
        let recv = Access::of(&cfg, true);
        assert_eq!(recv, Access { remote_write: true, remote_read: false, relaxed_ordering: true, odp: false });
        assert_eq!(recv.flags().bits(), 1 | 2 | 1 << 20, "local + remote write + relaxed ordering by default");
        let send = Access::of(&super::super::VerbsConfig { relaxed_ordering: false, odp: true, ..cfg }, false);
        assert_eq!(send.flags().bits(), 1 | 1 << 6, "--no-relaxed-ordering --odp on the sender");
        // IBV_ACCESS_REMOTE_READ is 1 << 2: only the sender of an --op read run asks for it, and never with write.
        let lent = Access::remote_readable(&cfg);
        assert_eq!(lent.flags().bits(), 1 | 4 | 1 << 20, "the read run's sender: local + remote read");
        assert_eq!(Access::of(&cfg, false).flags().bits() & 4, 0);
        assert_eq!(recv.flags().bits() & 4, 0);
    }

    #[test]
    fn chunk_defaults_to_max_mr_size_capped_at_2gib() {
        assert_eq!(chunk_size(None, u64::MAX), 2 << 30);
        assert_eq!(chunk_size(None, 1 << 30), 1 << 30);
        assert_eq!(chunk_size(Some(1 << 20), u64::MAX), 1 << 20);
        assert_eq!(chunk_size(Some(8 << 30), u64::MAX), 8 << 30, "an explicit chunk may pass 2 GiB");
        assert_eq!(chunk_size(Some(8 << 30), 4 << 30), 4 << 30, "but not the device's max_mr_size");
        assert_eq!(chunk_size(Some(1 << 20), 1 << 16), 1 << 16);
    }
}
