//! Paged replay: each request's KV goes into blocks of the decode side's pool, handed out as a serving engine's
//! block manager does. The driver (it owns the schedule) keeps the model of that pool: a FIFO free list of slots.
//! A request takes `ceil(uncached tokens / block_tokens)` blocks from the head of the list when it starts; when
//! fewer are free it waits (requests get blocks in arrival order: one that waits holds up those behind it, as a
//! first-come-first-served scheduler does) until frees due by then make room, and that wait is its `pool_wait_ms`.
//! Its blocks return to the tail of the list when its decode would end: `--decode-ms-per-token` × its output tokens
//! after its last byte landed (at once when that is 0). The slots it got travel to the receiver in the rep's
//! RepStart, so both ends plan, and `--verify` checks, the same destinations. Cached prefix blocks are not held.

use super::{Cutoff, Limits, Moved, RequestRecord, Scheduled, Shared, WAKE_EVERY};
use crate::run::sender::{ArmedRep, SenderSession};
use anyhow::Result;
use std::collections::VecDeque;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// The pool as the driver models it, on the load's clock (ms from its start): pure, so its rules are tested alone.
#[derive(Debug, Clone)]
pub struct PoolModel {
    blocks: u64,
    /// Free slots, taken from the front and returned at the back.
    free: VecDeque<u64>,
    /// Frees not yet due, by due time (ties in the order they were scheduled).
    due: VecDeque<(f64, Vec<u64>)>,
    high_water: u64,
}

impl PoolModel {
    /// A pool whose free list starts as `order` (every slot once: in order for a fresh pool, permuted for one
    /// already fragmented).
    pub fn new(order: Vec<u64>) -> PoolModel {
        PoolModel { blocks: order.len() as u64, free: order.into(), due: VecDeque::new(), high_water: 0 }
    }

    /// Blocks held (by requests moving or decoding).
    pub fn in_use(&self) -> u64 {
        self.blocks - self.free.len() as u64
    }

    /// The most blocks held at once so far.
    pub fn high_water(&self) -> u64 {
        self.high_water
    }

    /// Free what is due by `now_ms`, then take `need` blocks from the head of the free list, if that many are free.
    pub fn take(&mut self, need: u64, now_ms: f64) -> Option<Vec<u64>> {
        while self.due.front().is_some_and(|(at, _)| *at <= now_ms) {
            let (_, slots) = self.due.pop_front().expect("looked at above");
            self.free.extend(slots);
        }
        if (self.free.len() as u64) < need {
            return None;
        }
        let slots: Vec<u64> = self.free.drain(..need as usize).collect();
        self.high_water = self.high_water.max(self.in_use());
        Some(slots)
    }

    /// Return `slots` to the free list at `at_ms`.
    pub fn free_at(&mut self, slots: Vec<u64>, at_ms: f64) {
        let i = self.due.partition_point(|(t, _)| *t <= at_ms);
        self.due.insert(i, (at_ms, slots));
    }

    /// When the next scheduled free is due.
    pub fn next_due_ms(&self) -> Option<f64> {
        self.due.front().map(|(t, _)| *t)
    }
}

/// A paged replay's pool and how its requests use it.
#[derive(Debug, Clone)]
pub struct PagedPool {
    pub block_tokens: u64,
    pub bytes_per_token: u64,
    /// How long a request holds its blocks after its last byte landed, per output token.
    pub decode_ms_per_token: f64,
    /// The free list's first order (its length is the pool's blocks).
    pub order: Vec<u64>,
    /// Where each request's blocks sit in the sender's pool (the first `need` of them; a session moves one request
    /// at a time, so they never overlap).
    pub src_slots: Vec<u64>,
}

impl PagedPool {
    /// Blocks a request moving `bytes` takes: its uncached tokens in blocks.
    pub fn blocks_of(&self, bytes: u64) -> u64 {
        (bytes / self.bytes_per_token.max(1)).div_ceil(self.block_tokens.max(1))
    }
}

/// The pool shared by a load's sessions: the model, whose turn it is to take blocks (the schedule index), and
/// whether that request found too few.
pub(super) struct Pool {
    pub(super) cfg: PagedPool,
    state: Mutex<State>,
    changed: Condvar,
}

struct State {
    model: PoolModel,
    turn: usize,
    head_short: bool,
}

/// What taking a request's blocks gave it.
struct Granted {
    slots: Vec<u64>,
    /// How long it waited for blocks (its own, or an earlier request's that it queued behind), ms.
    wait_ms: f64,
}

impl Pool {
    pub(super) fn new(cfg: PagedPool) -> Pool {
        let model = PoolModel::new(cfg.order.clone());
        Pool { cfg, state: Mutex::new(State { model, turn: 0, head_short: false }), changed: Condvar::new() }
    }

    /// The most blocks held at once in the load so far.
    pub(super) fn high_water(&self) -> u64 {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).model.high_water()
    }

    /// Take `need` blocks for the schedule's request `i` (due at `due_ms`) once the requests before it have theirs
    /// and enough are free; `None` when the load halted or a stop was asked first.
    fn take(&self, i: usize, need: u64, due_ms: f64, shared: &Shared, limits: &Limits) -> Option<Granted> {
        let since = shared.ms(Instant::now()).max(due_ms);
        let mut waited = false;
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if shared.halt.load(std::sync::atomic::Ordering::SeqCst) || (limits.stop)() {
                return None;
            }
            let now = shared.ms(Instant::now());
            let mut wait = WAKE_EVERY;
            if s.turn == i {
                // Ahead of its time, it gets the blocks free by its arrival (frees before then are known).
                if let Some(slots) = s.model.take(need, now.max(due_ms)) {
                    (s.turn, s.head_short) = (i + 1, false);
                    self.changed.notify_all();
                    let wait_ms = if waited { (now - since).max(0.0) } else { 0.0 };
                    return Some(Granted { slots, wait_ms });
                }
                s.head_short = true;
                if let Some(next) = s.model.next_due_ms() {
                    wait = wait.min(Duration::from_secs_f64((next - now).max(0.0) / 1e3));
                }
            }
            waited |= s.head_short;
            s = self.changed.wait_timeout(s, wait).unwrap_or_else(|p| p.into_inner()).0;
        }
    }

    /// Return a request's blocks when its decode ends, `at_ms`.
    fn free_at(&self, slots: Vec<u64>, at_ms: f64) {
        if slots.is_empty() {
            return;
        }
        self.state.lock().unwrap_or_else(|p| p.into_inner()).model.free_at(slots, at_ms);
        self.changed.notify_all();
    }
}

/// Move the schedule's request `i`, `r`, over `session` into blocks of the pool; `None` when the load halted
/// before it started.
pub(super) fn serve_request(
    (lane, i): (u32, usize),
    session: &mut SenderSession,
    seq: &mut u32,
    r: &Scheduled,
    shared: &Shared,
    limits: &Limits,
    pool: &Pool,
) -> Result<Option<RequestRecord>> {
    let due = shared.t0 + Duration::from_secs_f64(r.at_ms / 1e3);
    let tokens = r.bytes / pool.cfg.bytes_per_token.max(1);
    let need = pool.cfg.blocks_of(r.bytes);
    let Some(granted) = pool.take(i, need, r.at_ms, shared, limits) else {
        if (limits.stop)() {
            shared.halt_with(Cutoff::Interrupted);
        }
        return Ok(None);
    };
    let src = &pool.cfg.src_slots[..need as usize];
    let now = Instant::now();
    let idle = now < due;
    // Armed ahead only when the receiver will not give up waiting for the bytes before they come.
    let ahead = idle && need > 0 && due - now < session.io_timeout() / 2;
    let mut arm = |session: &mut SenderSession| -> Result<ArmedRep> {
        let a = session.arm_paged(tokens, (src, &granted.slots), *seq)?;
        *seq = seq.wrapping_add(1);
        Ok(a)
    };
    let armed = if ahead { Some(arm(session)?) } else { None };
    let Some((start, armed)) = super::start_when_due(session, armed, (due, idle), r.id, shared, limits)? else {
        return Ok(None);
    };
    let moved = if need == 0 {
        Moved { pieces: 0, transfer_ms: 0.0, mismatched_bytes: None, landed: start }
    } else {
        let a = match armed {
            Some(a) => a,
            None => arm(session)?,
        };
        let rep = session.go(a)?;
        let landed = session.instant_of(rep.landed_ms());
        Moved { pieces: 1, transfer_ms: rep.transfer_ms, mismatched_bytes: rep.mismatched_bytes, landed }
    };
    let mut rec = super::record(lane, r, shared, (start, idle), &moved);
    pool.free_at(granted.slots, rec.end_ms + pool.cfg.decode_ms_per_token * r.output_tokens as f64);
    rec.pool_wait_ms = Some(granted.wait_ms);
    rec.blocks = Some(need);
    Ok(Some(rec))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_come_from_the_head_and_return_to_the_tail_when_due() {
        let mut m = PoolModel::new(vec![3, 1, 4, 0, 2]);
        assert_eq!(m.take(2, 0.0), Some(vec![3, 1]));
        assert_eq!(m.take(2, 1.0), Some(vec![4, 0]));
        assert_eq!(m.take(2, 2.0), None, "one block free");
        m.free_at(vec![4, 0], 10.0);
        m.free_at(vec![3, 1], 5.0);
        assert_eq!(m.next_due_ms(), Some(5.0), "frees are kept by due time");
        assert_eq!(m.take(2, 4.999), None, "not yet due");
        assert_eq!(m.in_use(), 4);
        assert_eq!(m.take(2, 5.0), Some(vec![2, 3]), "the free list's tail got the freed blocks");
        assert_eq!(m.take(3, 10.0), Some(vec![1, 4, 0]));
        assert_eq!((m.in_use(), m.high_water()), (5, 5));
    }

    #[test]
    fn frees_at_one_time_keep_their_order_and_high_water_is_the_peak() {
        let mut m = PoolModel::new((0..6).collect());
        let a = m.take(3, 0.0).unwrap();
        let b = m.take(2, 0.0).unwrap();
        assert_eq!(m.high_water(), 5);
        m.free_at(b, 1.0);
        m.free_at(a, 1.0);
        assert_eq!(m.take(1, 1.0), Some(vec![5]));
        assert_eq!(m.take(5, 1.0), Some(vec![3, 4, 0, 1, 2]), "b's blocks then a's, as they were freed");
        assert_eq!(m.high_water(), 6);
        assert_eq!(m.take(0, 1.0), Some(vec![]), "a cached request takes nothing");
    }

    #[test]
    fn a_request_as_large_as_the_pool_waits_for_every_block() {
        let mut m = PoolModel::new((0..4).collect());
        let a = m.take(1, 0.0).unwrap();
        assert_eq!(m.take(4, 0.0), None);
        m.free_at(a, 2.5);
        assert_eq!(m.take(4, 2.0), None);
        assert_eq!(m.take(4, 2.5).map(|s| s.len()), Some(4));
    }
}
