//! The sender's hot loop: RDMA WRITEs spread round-robin over the queue pairs, `--batch` work requests linked
//! into one ibv_post_send, each gathering up to `--max-sge` segments whose remote ranges are back to back, at most
//! `--inflight` outstanding per queue pair, a completion requested every `--signal-every` and on the last. The last
//! write of each queue pair carries the immediate that tells the receiver its data landed (RC orders writes within a
//! queue pair, so one immediate per queue pair is needed).
//! With `--op read` the receiver runs the same loop over the same requests as RDMA READs (`read.rs`).
//! Work request and scatter arrays are allocated once per connection, never per post.

use super::cq::Poller;
use super::device::wc_status_text;
use super::mr::Piece;
use super::qp::QpSet;
use super::{VerbsConfig, VerbsOp};
use crate::plan::Write;
use crate::transport::TransferHooks;
use anyhow::{anyhow, bail, Result};
use rdma_mummy_sys::{ibv_post_send, ibv_send_wr, ibv_sge, ibv_wc, ibv_wr_opcode};
use std::time::{Duration, Instant};

const IBV_SEND_SIGNALED: u32 = 2;
/// How often the loop looks at the control connection for a receiver that died (a dead RC peer otherwise shows
/// only after the transport's retries, which soft-RoCE stretches to a minute).
const PEER_CHECK: Duration = Duration::from_millis(20);

/// One work request's worth of a write: never crosses a registered piece on either side.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Segment {
    pub laddr: u64,
    pub lkey: u32,
    pub raddr: u64,
    pub rkey: u32,
    pub len: u32,
    /// Index of the write this segment belongs to.
    pub write: u32,
}

fn piece_at(pieces: &[Piece], offset: u64) -> Option<&Piece> {
    let i = pieces.partition_point(|p| p.offset + p.len <= offset);
    pieces.get(i).filter(|p| p.offset <= offset)
}

/// Cut writes into segments of at most `max_len` bytes that never straddle a local or remote piece.
pub fn segments(writes: &[Write], local: &[Piece], remote: &[Piece], max_len: u64, out: &mut Vec<Segment>) -> Result<()> {
    out.clear();
    for (i, w) in writes.iter().enumerate() {
        let mut done = 0;
        while done < w.len {
            let (lo, ro) = (w.local_offset + done, w.remote_offset + done);
            let lp =
                piece_at(local, lo).ok_or_else(|| anyhow!("local offset {lo} is outside the registered buffer"))?;
            let rp =
                piece_at(remote, ro).ok_or_else(|| anyhow!("remote offset {ro} is outside the receiver's region"))?;
            let n = (w.len - done).min(lp.offset + lp.len - lo).min(rp.offset + rp.len - ro).min(max_len);
            out.push(Segment {
                laddr: lp.addr + (lo - lp.offset),
                lkey: lp.key,
                raddr: rp.addr + (ro - rp.offset),
                rkey: rp.key,
                len: n as u32,
                write: i as u32,
            });
            done += n;
        }
    }
    Ok(())
}

/// One RDMA WRITE: a remote range (`raddr`, `len` under `rkey`) filled, in order, by the segments
/// `segs[first..first + count]` (its SGE list).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WriteRequest {
    pub raddr: u64,
    pub rkey: u32,
    pub len: u32,
    pub first: u32,
    pub count: u32,
}

/// Group runs of consecutive segments into work requests. A segment joins the previous request when it continues
/// that request's remote range under the same rkey, and the request stays within `max_len` bytes (the message
/// size `segments` cut to) and `max_sge` scatter entries; `max_sge` 1 gives one request per segment. Segments are
/// taken in order, before the requests are spread over the queue pairs, so a run that is contiguous remotely
/// becomes one WRITE whatever the queue pair count.
pub fn gather(segs: &[Segment], max_sge: u32, max_len: u64, out: &mut Vec<WriteRequest>) {
    out.clear();
    for (i, s) in segs.iter().enumerate() {
        match out.last_mut() {
            Some(r)
                if r.count < max_sge
                    && r.rkey == s.rkey
                    && r.raddr + r.len as u64 == s.raddr
                    && r.len as u64 + s.len as u64 <= max_len =>
            {
                r.len += s.len;
                r.count += 1;
            }
            _ => out.push(WriteRequest { raddr: s.raddr, rkey: s.rkey, len: s.len, first: i as u32, count: 1 }),
        }
    }
}

/// One rep's work for [`Poster::run`]: the requests, gathered from the segments of `writes` writes.
#[derive(Clone, Copy)]
pub struct RepWork<'a> {
    pub segs: &'a [Segment],
    pub reqs: &'a [WriteRequest],
    pub writes: usize,
    /// The rep number, which rides as the immediate on each queue pair's last work request (WRITEs).
    pub imm: u32,
    /// WRITEs (local segments gathered into a remote range) or, for `--op read`, READs (a remote range scattered
    /// into the local segments): the same requests, the other opcode. READs carry no immediate: the reader sees
    /// its own completions.
    pub op: VerbsOp,
}

impl RepWork<'_> {
    /// The work requests queue pair `q` of `nq` posts: request i goes to queue pair i % nq; a WRITE queue pair
    /// that got none still posts one empty WRITE_WITH_IMM.
    fn total(&self, q: usize, nq: usize) -> u64 {
        let n = self.reqs.len().saturating_sub(q).div_ceil(nq) as u64;
        match self.op {
            VerbsOp::Write => n.max(1),
            VerbsOp::Read => n,
        }
    }

    fn verb(&self) -> &'static str {
        match self.op {
            VerbsOp::Write => "RDMA WRITE",
            VerbsOp::Read => "RDMA READ",
        }
    }
}

pub struct Poster {
    wrs: Vec<ibv_send_wr>,
    /// `max_sge` scatter entries for each of the `batch` work requests of one post.
    sges: Vec<ibv_sge>,
    max_sge: usize,
    posted: Vec<u64>,
    completed: Vec<u64>,
    post_time: Vec<Instant>,
    left_in_write: Vec<u32>,
    first_post_of_write: Vec<Option<Instant>>,
}

// SAFETY: the raw pointers inside the work requests (`next`, `sg_list`) only point into the poster's own heap arrays
// (`wrs`, `sges`), which move with it without moving their storage, and are rebuilt before each post; the data
// addresses are plain integers. Nothing else holds them, so the poster may move to another thread.
unsafe impl Send for Poster {}

impl Poster {
    /// `max_sge`: the most scatter entries one work request carries (what the queue pairs were created with).
    pub fn new(cfg: &VerbsConfig, max_sge: u32) -> Poster {
        let batch = cfg.batch as usize;
        let max_sge = max_sge.max(1) as usize;
        Poster {
            // SAFETY: ibv_send_wr and ibv_sge are plain C structs; zero is a valid starting value.
            wrs: (0..batch).map(|_| unsafe { std::mem::zeroed() }).collect(),
            // SAFETY: as above.
            sges: (0..batch * max_sge).map(|_| unsafe { std::mem::zeroed() }).collect(),
            max_sge,
            posted: Vec::new(),
            completed: Vec::new(),
            post_time: Vec::new(),
            left_in_write: Vec::new(),
            first_post_of_write: Vec::new(),
        }
    }

    /// Post every work request of `work` and wait for all completions; each write is done (`hooks.done`) when the
    /// last of its segments completed. Returns (first post, last completion).
    pub fn run(
        &mut self,
        set: &QpSet,
        poller: &mut Poller,
        work: RepWork,
        cfg: &VerbsConfig,
        stall_timeout: Duration,
        hooks: &mut TransferHooks,
    ) -> Result<(Instant, Instant)> {
        let RepWork { segs, reqs, writes, .. } = work;
        let nq = set.qps.len();
        let total: Vec<u64> = (0..nq).map(|q| work.total(q, nq)).collect();
        self.posted.clear();
        self.posted.resize(nq, 0);
        self.completed.clear();
        self.completed.resize(nq, 0);
        self.post_time.clear();
        self.post_time.resize(reqs.len(), Instant::now());
        self.left_in_write.clear();
        self.left_in_write.resize(writes, 0);
        for s in segs {
            self.left_in_write[s.write as usize] += 1;
        }
        self.first_post_of_write.clear();
        self.first_post_of_write.resize(writes, None);

        let mut first_post = None;
        let mut last = Instant::now();
        // A READ queue pair without requests has nothing to wait for.
        let mut finished = total.iter().filter(|&&t| t == 0).count();
        let mut last_progress = Instant::now();
        let mut last_peer_check = Instant::now();
        while finished < nq {
            for (q, &total_q) in total.iter().enumerate() {
                let free = cfg.inflight as u64 - (self.posted[q] - self.completed[q]);
                let n = free.min(cfg.batch as u64).min(total_q - self.posted[q]) as usize;
                if n > 0 {
                    let t = self.post(set, work, q, n, total_q, cfg.signal_every as u64)?;
                    first_post.get_or_insert(t);
                }
            }
            if last_peer_check.elapsed() > PEER_CHECK {
                last_peer_check = Instant::now();
                if (hooks.peer_failed)() {
                    drain(poller, &self.posted, &self.completed);
                    bail!("the {} hung up or reported an error on the control connection mid-transfer", peer(work.op));
                }
            }
            let wcs = poller.wait(Duration::from_millis(1))?;
            if wcs.is_empty() {
                if last_progress.elapsed() > stall_timeout {
                    bail!(
                        "no RDMA completion for {:.0} s (--io-timeout); the {} or the path stopped answering",
                        stall_timeout.as_secs_f64(),
                        peer(work.op)
                    );
                }
                continue;
            }
            let now = Instant::now();
            last_progress = now;
            last = now;
            match self.complete(wcs, work, &total, now, hooks) {
                Ok(done) => finished += done,
                Err(err) => {
                    // Stop posting; reap what the failed queue pairs flush so nothing is left behind, then report.
                    drain(poller, &self.posted, &self.completed);
                    return Err(err);
                }
            }
        }
        Ok((first_post.unwrap_or(last), last))
    }

    /// Account for a batch of completions: each covers every earlier request of its queue pair (selective
    /// signaling); a write is done when its last piece's request completed. Returns how many queue pairs finished.
    fn complete(
        &mut self,
        wcs: &[ibv_wc],
        work: RepWork,
        total: &[u64],
        now: Instant,
        hooks: &mut TransferHooks,
    ) -> Result<usize> {
        let RepWork { segs, reqs, .. } = work;
        let nq = total.len();
        let mut finished = 0;
        for wc in wcs {
            let (q, seq) = ((wc.wr_id >> 40) as usize, wc.wr_id & ((1 << 40) - 1));
            if wc.status != 0 {
                bail!(
                    "{} failed on queue pair {q}: {} (vendor error {:#x})",
                    work.verb(),
                    wc_status_text(wc.status),
                    wc.vendor_err
                );
            }
            if q >= nq || seq >= self.posted[q] {
                bail!("completion for unknown work request {:#x}", wc.wr_id);
            }
            for k in self.completed[q]..=seq {
                let r = q + k as usize * nq;
                let Some(req) = reqs.get(r) else { continue };
                // A request may end several writes, and a write may need several requests (on any queue pair).
                for seg in &segs[req.first as usize..(req.first + req.count) as usize] {
                    let w = seg.write as usize;
                    self.left_in_write[w] -= 1;
                    if self.left_in_write[w] == 0 {
                        (hooks.done)(w, self.first_post_of_write[w].unwrap_or(self.post_time[r]), now);
                    }
                }
            }
            self.completed[q] = seq + 1;
            if self.completed[q] == total[q] {
                finished += 1;
            }
        }
        Ok(finished)
    }

    /// Post the next `n` of the `total` work requests of queue pair `q` as one linked list.
    fn post(
        &mut self,
        set: &QpSet,
        work: RepWork,
        q: usize,
        n: usize,
        total: u64,
        signal_every: u64,
    ) -> Result<Instant> {
        let RepWork { segs, reqs, imm, .. } = work;
        let nq = set.qps.len();
        let start = self.posted[q];
        for k in 0..n {
            let seq = start + k as u64;
            let last = seq + 1 == total;
            let req = reqs.get(q + seq as usize * nq);
            let wr = &mut self.wrs[k];
            wr.wr_id = ((q as u64) << 40) | seq;
            wr.send_flags = if last || (seq + 1) % signal_every == 0 { IBV_SEND_SIGNALED } else { 0 };
            wr.opcode = match work.op {
                VerbsOp::Read => ibv_wr_opcode::IBV_WR_RDMA_READ,
                VerbsOp::Write if last => ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM,
                VerbsOp::Write => ibv_wr_opcode::IBV_WR_RDMA_WRITE,
            };
            wr.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
            match req {
                Some(r) => {
                    // This request's scatter entries: slots k × max_sge .. of the array (count ≤ max_sge by `gather`).
                    let base = k * self.max_sge;
                    let list = &segs[r.first as usize..(r.first + r.count) as usize];
                    for (e, s) in self.sges[base..base + list.len()].iter_mut().zip(list) {
                        *e = ibv_sge { addr: s.laddr, length: s.len, lkey: s.lkey };
                    }
                    wr.sg_list = &mut self.sges[base];
                    wr.num_sge = r.count as i32;
                    wr.wr.rdma.remote_addr = r.raddr;
                    wr.wr.rdma.rkey = r.rkey;
                }
                None => {
                    // A queue pair without data: an empty WRITE_WITH_IMM still tells the receiver it is done.
                    wr.sg_list = std::ptr::null_mut();
                    wr.num_sge = 0;
                    wr.wr.rdma.remote_addr = 0;
                    wr.wr.rdma.rkey = 0;
                }
            }
        }
        // Link the list after filling it (the array does not move while posted).
        let base = self.wrs.as_mut_ptr();
        for k in 0..n {
            // SAFETY: k and k + 1 are inside the array of `batch >= n` entries.
            unsafe { (*base.add(k)).next = if k + 1 < n { base.add(k + 1) } else { std::ptr::null_mut() } };
        }
        let t = Instant::now();
        let mut bad: *mut ibv_send_wr = std::ptr::null_mut();
        // SAFETY: the queue pair is live (owned by `set`); the first `n` work requests form a NULL-terminated list
        // whose scatter lists point into `self.sges`, which outlives the call, and hold at most `max_sge` entries
        // (the queue pairs' max_send_sge); every local range lies inside a registered piece (built by `segments`).
        let rc = unsafe { ibv_post_send(set.raw_qp(q).as_ptr(), self.wrs.as_mut_ptr(), &mut bad) };
        if rc != 0 {
            bail!(
                "ibv_post_send on queue pair {q} failed: {} (is --inflight above the device's max_qp_wr?)",
                std::io::Error::from_raw_os_error(rc)
            );
        }
        for k in 0..n {
            let r = q + (start as usize + k) * nq;
            if let Some(req) = reqs.get(r) {
                self.post_time[r] = t;
                for seg in &segs[req.first as usize..(req.first + req.count) as usize] {
                    self.first_post_of_write[seg.write as usize].get_or_insert(t);
                }
            }
        }
        self.posted[q] = start + n as u64;
        Ok(t)
    }
}

/// The other end of the data path, as a failure names it: the one written into, or read from.
fn peer(op: VerbsOp) -> &'static str {
    match op {
        VerbsOp::Write => "receiver",
        VerbsOp::Read => "sender",
    }
}

/// After a failure, reap what the failed queue pairs flush (bounded), so nothing is left half-posted.
fn drain(poller: &mut Poller, posted: &[u64], completed: &[u64]) {
    let outstanding: u64 = posted.iter().zip(completed).map(|(p, c)| p - c).sum();
    let deadline = Instant::now() + Duration::from_secs(1);
    let mut seen = 0u64;
    while seen < outstanding && Instant::now() < deadline {
        match poller.wait(Duration::from_millis(10)) {
            Ok(w) => seen += w.len() as u64,
            Err(_) => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(total: u64, chunk: u64, base: u64, key0: u32) -> Vec<Piece> {
        (0..total.div_ceil(chunk))
            .map(|i| Piece {
                offset: i * chunk,
                len: chunk.min(total - i * chunk),
                addr: base + i * chunk,
                key: key0 + i as u32,
            })
            .collect()
    }

    #[test]
    fn segments_never_cross_pieces_and_cover_every_byte() {
        let total = 10 << 20;
        let local = pieces(total, 3 << 20, 0x1000_0000, 100);
        let remote = pieces(total, 1 << 20, 0x9000_0000, 200);
        let plan = crate::plan::TransferPlan::contiguous(total, 5 << 19); // 2.5 MiB blocks
        let mut segs = Vec::new();
        segments(&plan.writes, &local, &remote, 1 << 30, &mut segs).unwrap();
        assert_eq!(segs.iter().map(|s| s.len as u64).sum::<u64>(), total);
        let mut off = 0u64;
        for s in &segs {
            let (lp, rp) = (piece_at(&local, off).unwrap(), piece_at(&remote, off).unwrap());
            assert_eq!(s.laddr, lp.addr + off - lp.offset);
            assert_eq!((s.lkey, s.rkey), (lp.key, rp.key));
            assert!(off + s.len as u64 <= lp.offset + lp.len && off + s.len as u64 <= rp.offset + rp.len);
            off += s.len as u64;
        }
        // Max message size splits too.
        segments(&plan.writes, &local, &remote, 4096, &mut segs).unwrap();
        assert!(segs.iter().all(|s| s.len <= 4096));
        assert_eq!(segs.len() as u64, total / 4096);
    }

    fn seg(laddr: u64, raddr: u64, rkey: u32, len: u32, write: u32) -> Segment {
        Segment { laddr, lkey: 7, raddr, rkey, len, write }
    }

    /// Every request is its segments, in order, back to back remotely; the requests take the segments in order,
    /// each exactly once; none is above the limits.
    fn check_cover(segs: &[Segment], reqs: &[WriteRequest], max_sge: u32, max_len: u64) {
        let mut next = 0u32;
        for r in reqs {
            assert_eq!(r.first, next, "requests take the segments in order, none skipped or repeated");
            assert!(r.count >= 1 && r.count <= max_sge && r.len as u64 <= max_len, "{r:?}");
            let list = &segs[r.first as usize..(r.first + r.count) as usize];
            let mut at = r.raddr;
            for s in list {
                assert_eq!((s.raddr, s.rkey), (at, r.rkey), "the SGE list fills the remote range in order");
                at += s.len as u64;
            }
            assert_eq!(at - r.raddr, r.len as u64);
            next += r.count;
        }
        assert_eq!(next as usize, segs.len());
    }

    #[test]
    fn adjacent_remote_segments_gather_up_to_max_sge_and_max_len() {
        // 40 segments of 10 B, scattered locally (backwards), back to back remotely under one rkey.
        let segs: Vec<Segment> = (0..40u64).map(|i| seg(10_000 - i * 100, 500 + i * 10, 3, 10, i as u32)).collect();
        let mut reqs = Vec::new();
        gather(&segs, 16, 1 << 20, &mut reqs);
        assert_eq!(reqs.iter().map(|r| r.count).collect::<Vec<_>>(), [16, 16, 8]);
        assert_eq!((reqs[1].raddr, reqs[1].len), (660, 160));
        check_cover(&segs, &reqs, 16, 1 << 20);
        // The message size caps a request too: 35 B holds three 10 B segments.
        gather(&segs, 16, 35, &mut reqs);
        assert_eq!(reqs.len(), 14);
        assert!(reqs[..13].iter().all(|r| r.count == 3) && reqs[13].count == 1);
        check_cover(&segs, &reqs, 16, 35);
        // --max-sge 1: one request per segment.
        gather(&segs, 1, 1 << 20, &mut reqs);
        assert_eq!(reqs.len(), 40);
        check_cover(&segs, &reqs, 1, 1 << 20);
    }

    #[test]
    fn gaps_overlaps_reordering_and_other_rkeys_break_a_run() {
        let segs = [
            seg(0, 100, 1, 10, 0),
            seg(50, 110, 1, 10, 1), // continues
            seg(90, 125, 1, 10, 2), // gap of 5 remotely
            seg(20, 135, 2, 10, 3), // adjacent, but another rkey (the next MR piece)
            seg(30, 130, 2, 10, 4), // goes backwards
            seg(40, 140, 2, 10, 4), // continues the previous one (same write, as after a local MR boundary)
        ];
        let mut reqs = Vec::new();
        gather(&segs, 16, 1 << 20, &mut reqs);
        assert_eq!(reqs.iter().map(|r| (r.first, r.count)).collect::<Vec<_>>(), [(0, 2), (2, 1), (3, 1), (4, 2)]);
        check_cover(&segs, &reqs, 16, 1 << 20);
        gather(&[], 16, 1 << 20, &mut reqs);
        assert!(reqs.is_empty());
    }

    /// A paged plan with sequential destinations, cut and gathered as the sender does, moved through memory one
    /// SGE list at a time: every byte lands where `--verify` expects it, in far fewer requests than pieces.
    #[test]
    fn gathered_paged_writes_land_verified() {
        use crate::pattern::{count_span_mismatches, fill_spans};
        use crate::plan::paged::{DstPlacement, PagedConfig};
        for placement in [DstPlacement::Sequential, DstPlacement::Random] {
            let cfg = PagedConfig {
                block_tokens: 4,
                pool_tokens: 96,
                layers: 3,
                regions_per_layer: 2,
                region_bytes_per_token: 12,
                coalesce: false,
                dst_placement: placement,
                fault_swap_dests: false,
            };
            let (tokens, pool) = (70, cfg.pool_bytes());
            let plan = cfg.plan(5, tokens);
            let writes = plan.writes(crate::plan::paged::Merge::PerPiece, crate::plan::paged::DestFault::None);
            // Small MR pieces on both sides (different rkeys) so runs also break at remote piece boundaries.
            let (local, remote) = (pieces(pool, 1000, 0, 100), pieces(pool, 1536, 0, 200));
            let mut segs = Vec::new();
            segments(&writes, &local, &remote, 1 << 20, &mut segs).unwrap();
            let mut reqs = Vec::new();
            gather(&segs, 16, 1 << 20, &mut reqs);
            check_cover(&segs, &reqs, 16, 1 << 20);
            if placement == DstPlacement::Sequential {
                assert!(reqs.len() * 4 < writes.len(), "{} requests for {} writes", reqs.len(), writes.len());
            }
            let (mut src, mut dst) = (vec![0u8; pool as usize], vec![0u8; pool as usize]);
            fill_spans(&mut src, &plan.source_spans(), 9, 1).unwrap();
            for r in &reqs {
                let mut at = r.raddr as usize;
                for s in &segs[r.first as usize..(r.first + r.count) as usize] {
                    let (l, n) = (s.laddr as usize, s.len as usize);
                    dst[at..at + n].copy_from_slice(&src[l..l + n]);
                    at += n;
                }
            }
            assert_eq!(count_span_mismatches(&dst, &plan.dest_spans(), 9, 1).unwrap(), 0, "{placement:?}");
        }
    }

    #[test]
    fn writes_outside_the_region_are_refused() {
        let local = pieces(1 << 20, 1 << 20, 0, 1);
        let remote = pieces(1 << 19, 1 << 19, 0, 2);
        let plan = crate::plan::TransferPlan::contiguous(1 << 20, 1 << 20);
        let mut segs = Vec::new();
        assert!(segments(&plan.writes, &local, &remote, 1 << 30, &mut segs).is_err());
    }
}
