//! Rails: one transfer striped over several RDMA devices per side (`-d mlx5_0,mlx5_1`), as Mooncake and UCX
//! multi-rail do on 8-NIC nodes. Rail k of the sender writes into rail k of the receiver, each over its own queue
//! pairs and its own registration of the whole buffer; write i goes to rail i mod R, so every rail carries an equal
//! share spread over the whole buffer, and a rail that lags shows as a lower rate for the same bytes. With one rail
//! the transfer runs on the caller's thread; with several, one thread per rail.

use super::cq::Poller;
use super::extras::{RailRep, RepExtras};
use super::mr::{self, Piece, RegMethod, Registration};
use super::post::{self, Poster, RepWork, Segment, WriteRequest};
use super::qp::QpSet;
use super::{open_set, RailOffer, VerbsConfig, VerbsOp};
use crate::mem::Buffer;
use crate::plan::Write;
use crate::transport::{Context, TransferHooks, TransferTimes};
use anyhow::{anyhow, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How often the striped transfer looks at the control connection while its rails run (as `post` does).
const PEER_CHECK: Duration = Duration::from_millis(20);

/// What every rail of a transfer shares: the knobs, the rep number its immediates carry, the stall timeout.
pub(super) struct RailRun<'a> {
    pub cfg: &'a VerbsConfig,
    pub rep: u32,
    pub stall_timeout: Duration,
}

/// One rail's part of a transfer as it ran.
pub(super) struct RailTimes {
    pub first_post: Instant,
    pub last: Instant,
    pub reg_ms: Option<f64>,
    /// The bytes registered inside the rep (`--reg-per-rep`).
    pub reg_bytes: u64,
    pub work_requests: usize,
}

/// One device of the sender: its queue pairs, the buffer registered on it, the receiver's pieces on the matching
/// rail, and the hot loop's arrays.
pub(super) struct SendRail {
    // Drop order: the poster and registration before the set whose protection domain they use (the poller holds
    // its completion queue, the registration its memory).
    poster: Poster,
    poller: Poller,
    reg: Option<Registration>,
    pub set: QpSet,
    remote: Vec<Piece>,
    pub chunk: u64,
    /// Scatter entries per work request: `--max-sge` clamped to the device for the paged layout, 1 for contiguous
    /// transfers (their writes are back to back on both sides, so gathering would only re-cut `--block-size`).
    pub max_sge: u32,
    segs: Vec<Segment>,
    /// The work requests of the current transfer, gathered from `segs`.
    reqs: Vec<WriteRequest>,
    /// The first (the "cold") registration: ms and method.
    pub first_reg: (f64, RegMethod),
}

impl SendRail {
    pub fn connect(
        v: &VerbsConfig,
        ctx: &Context,
        name: Option<&str>,
        want_sge: u32,
        buf: &Buffer,
        remote: &RailOffer,
    ) -> Result<SendRail> {
        let (mut set, max_sge) = open_set(v, ctx, name, v.inflight, want_sge, 1, v.cq_mode)?;
        super::check_odp(v, &set.port)?;
        let chunk = mr::chunk_size(v.mr_chunk, set.port.max_mr_size);
        // Registered once here; with --reg-per-rep again inside every rep (this first one is then the "cold" one).
        let reg = mr::register(&set.pd, buf, buf.len() as u64, chunk, mr::Access::of(v, false))?;
        let first_reg = (reg.reg_ms, reg.method);
        set.init(false)?;
        set.connect(&remote.endpoints, v.ack_timeout)?;
        let poller = Poller::new(&set);
        Ok(SendRail {
            poster: Poster::new(v, max_sge),
            poller,
            reg: if v.reg_per_rep { None } else { Some(reg) },
            set,
            remote: remote.pieces.clone(),
            chunk,
            max_sge,
            segs: Vec::new(),
            reqs: Vec::new(),
            first_reg,
        })
    }

    /// Post `writes` on this rail and wait for their completions (see [`Poster::run`]).
    pub fn transfer(
        &mut self,
        mem: &Buffer,
        writes: &[Write],
        run: &RailRun,
        hooks: &mut TransferHooks,
    ) -> Result<RailTimes> {
        let started = Instant::now();
        let mut reg_bytes = 0;
        let (reg, reg_ms) = match self.reg.take() {
            Some(r) => (r, None),
            None => {
                // --reg-per-rep: register what this rep sends, as an on-demand connector would, inside the timing.
                let len = writes.iter().map(|w| w.local_offset + w.len).max().unwrap_or(0);
                let r = mr::register(&self.set.pd, mem, len, self.chunk, mr::Access::of(run.cfg, false))?;
                let ms = r.reg_ms;
                reg_bytes = len;
                (r, Some(ms))
            }
        };
        let max_len = self.set.port.max_msg_sz.max(4096) as u64;
        let outcome = post::segments(writes, &reg.pieces, &self.remote, max_len, &mut self.segs).and_then(|()| {
            post::gather(&self.segs, self.max_sge, max_len, &mut self.reqs);
            let work = RepWork { segs: &self.segs, reqs: &self.reqs, writes: writes.len(), imm: run.rep, op: VerbsOp::Write };
            self.poster.run(&self.set, &mut self.poller, work, run.cfg, run.stall_timeout, hooks)
        });
        if !run.cfg.reg_per_rep {
            self.reg = Some(reg);
        }
        let (first_post, last) = outcome?;
        let first_post = if reg_ms.is_some() { started } else { first_post };
        Ok(RailTimes { first_post, last, reg_ms, reg_bytes, work_requests: self.reqs.len() })
    }
}

/// Write i goes to rail i mod `n`: each rail's share, in order.
fn deal(writes: &[Write], n: usize) -> Vec<Vec<Write>> {
    (0..n).map(|k| writes.iter().skip(k).step_by(n).copied().collect()).collect()
}

/// The index in the whole transfer of write `j` of rail `k`'s share (of `n` rails).
fn dealt_index(k: usize, j: usize, n: usize) -> usize {
    k + j * n
}

/// A rail's result as its thread hands it back: its index, its times, and each write it completed
/// `(index in its share, posted, completed)`.
type RailOutcome = (usize, Result<RailTimes>, Vec<(usize, Instant, Instant)>);

/// Run one transfer over several rails at once, one thread each (write i on rail i mod R), while this thread
/// watches the control connection; the first rail to fail stops the others. Per-write completions reach `hooks`
/// once every rail is done, with the times they were observed at.
pub(super) fn striped(
    rails: &mut [SendRail],
    mem: &Buffer,
    writes: &[Write],
    run: &RailRun,
    hooks: &mut TransferHooks,
) -> Result<TransferTimes> {
    let n = rails.len();
    let shares = deal(writes, n);
    let abort = AtomicBool::new(false);
    let (tx, rx) = mpsc::channel::<RailOutcome>();
    let mut outcomes: Vec<RailOutcome> = Vec::with_capacity(n);
    std::thread::scope(|scope| {
        for (k, (rail, share)) in rails.iter_mut().zip(&shares).enumerate() {
            let (tx, abort) = (tx.clone(), &abort);
            scope.spawn(move || {
                let mut done = Vec::with_capacity(share.len());
                let times = {
                    let mut record = |j: usize, posted: Instant, completed: Instant| done.push((j, posted, completed));
                    let mut stop = || abort.load(Ordering::Relaxed);
                    let mut rail_hooks = TransferHooks { done: &mut record, peer_failed: &mut stop };
                    rail.transfer(mem, share, run, &mut rail_hooks)
                };
                if times.is_err() {
                    abort.store(true, Ordering::Relaxed);
                }
                let _ = tx.send((k, times, done));
            });
        }
        drop(tx);
        loop {
            match rx.recv_timeout(PEER_CHECK) {
                Ok(outcome) => outcomes.push(outcome),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if !abort.load(Ordering::Relaxed) && (hooks.peer_failed)() {
                        abort.store(true, Ordering::Relaxed);
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
    });
    // The first failure in the order they happened: the others are usually the stop it caused.
    let mut rail_reps = vec![None; n];
    let (mut first_post, mut last): (Option<Instant>, Option<Instant>) = (None, None);
    let (mut reg_ms, mut reg_bytes, mut work_requests) = (None::<f64>, 0u64, 0usize);
    for (k, times, done) in outcomes {
        let t = times.map_err(|e| e.context(format!("rail {k} ({})", rails[k].set.port.device)))?;
        for (j, posted, completed) in done {
            (hooks.done)(dealt_index(k, j, n), posted, completed);
        }
        let bytes: u64 = shares[k].iter().map(|w| w.len).sum();
        let secs = t.last.saturating_duration_since(t.first_post).as_secs_f64();
        rail_reps[k] = Some(RailRep {
            device: rails[k].set.port.device.clone(),
            bytes,
            ms: secs * 1e3,
            gbps: if secs > 0.0 { bytes as f64 / secs / 1e9 } else { 0.0 },
        });
        first_post = Some(first_post.map_or(t.first_post, |f| f.min(t.first_post)));
        last = Some(last.map_or(t.last, |l| l.max(t.last)));
        // Rails register side by side: the rep waited for the slowest.
        reg_ms = t.reg_ms.map(|r| reg_ms.map_or(r, |m| m.max(r))).or(reg_ms);
        reg_bytes += t.reg_bytes;
        work_requests += t.work_requests;
    }
    let rails: Vec<RailRep> = rail_reps
        .into_iter()
        .collect::<Option<_>>()
        .ok_or_else(|| anyhow!("a rail's thread ended without a result"))?;
    let (first_post, last) = (first_post.expect("n >= 2 rails ran"), last.expect("n >= 2 rails ran"));
    let work_requests = (work_requests != writes.len()).then_some(work_requests as u64);
    let reg_gbps = reg_ms.map(|ms| super::reg_gbps(reg_bytes, ms));
    let extras = RepExtras { reg_ms, reg_gbps, work_requests, rails: Some(rails) };
    Ok(TransferTimes::new(first_post, last).with_extras(&extras))
}

#[cfg(test)]
mod tests {
    use super::{deal, dealt_index};
    use crate::plan::Write;

    #[test]
    fn writes_are_dealt_to_rails_in_turn_and_mapped_back() {
        let writes: Vec<Write> =
            (0..7u64).map(|i| Write { local_offset: i * 10, remote_offset: 70 - i * 10, len: 10 + i }).collect();
        let shares = deal(&writes, 3);
        assert_eq!(shares.iter().map(Vec::len).collect::<Vec<_>>(), [3, 2, 2]);
        let mut seen = vec![false; writes.len()];
        for (k, share) in shares.iter().enumerate() {
            for (j, w) in share.iter().enumerate() {
                let i = dealt_index(k, j, 3);
                assert_eq!(*w, writes[i], "rail {k} write {j}");
                assert!(!std::mem::replace(&mut seen[i], true), "write {i} dealt twice");
            }
        }
        assert!(seen.iter().all(|&s| s), "every write dealt");
        assert_eq!(deal(&writes, 1), vec![writes.clone()]);
    }
}
