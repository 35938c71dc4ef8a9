//! The request driver: a stream of requests, each due at its scheduled time, moved over one or more sessions (each
//! a server of a FIFO queue: the next request goes to the first session free). The clock is open-loop: a request's
//! latency counts from its scheduled arrival, so a stalled link shows in every request that arrived during the
//! stall, not only in the one that was moving (the coordinated-omission error).
//!
//! A request is one rep of its bytes, or several when it is larger than the receiver's region (moved one after
//! another into the region's start); its service time covers them all. Its end is when its last byte landed as the
//! sender's transport saw it (the receiver's report of the rep comes back after, off the request's latency but
//! before its session takes the next request); when the receiver pulls (a READ), the sender sees nothing land, and
//! the end is that report's arrival. A pulling receiver starts reading when armed, so its reps are armed when due,
//! not ahead: the arming round trip is then the decode side's notice that the request's KV is ready. Nothing here knows where the requests came
//! from (a trace or an arrival model).

use super::sender::{ArmedRep, SenderSession};
use anyhow::Result;
pub use layerwise::Layerwise;
pub use pool::{PagedPool, PoolModel};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

mod layerwise;
mod pool;

/// One request of the stream as the driver moves it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scheduled {
    /// The request's id in its workload (a trace's line order, or generation order).
    pub id: u64,
    /// When it is due, ms from the load's start.
    pub at_ms: f64,
    /// Bytes to move (its input not held by the decode side).
    pub bytes: u64,
    /// Bytes its prefix-cache hit saved (not moved).
    pub cached_bytes: u64,
    /// Tokens it answers with (a trace's `output_length`; 0 when unknown): a paged replay holds its blocks while
    /// they decode.
    pub output_tokens: u64,
}

/// What happened to one request, times in ms from the load's start (the sender's clock).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    pub id: u64,
    pub scheduled_ms: f64,
    pub start_ms: f64,
    pub end_ms: f64,
    /// Scheduled arrival → its session started it: the wait for a free session.
    pub queue_ms: f64,
    /// Its session started it → its last byte landed: every piece, with the control round trips of all but the
    /// first (a session that waits for a request gets its first rep ready beforehand; one that is behind does
    /// that inside the service time).
    pub service_ms: f64,
    /// Scheduled arrival → last byte landed: what the transfer adds to the request's time to first token.
    pub latency_ms: f64,
    pub bytes: u64,
    pub cached_bytes: u64,
    /// Reps it took (0 when its whole input was cached).
    pub pieces: u32,
    /// The session that moved it.
    pub lane: u32,
    /// Started on time (its session was idle, waiting for it): how late the driver's clock woke, ms. Absent when
    /// it queued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_ms: Option<f64>,
    /// Transfer time of its pieces as the transport timed them (without the control round trips).
    pub transfer_ms: f64,
    /// `--verify`: mismatched bytes over its pieces (the pattern fill and check are then inside its service time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mismatched_bytes: Option<u64>,
    /// Layer-wise: when the prefill of its uncached tokens ended (its last layer computed), ms from the load's
    /// start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_end_ms: Option<f64>,
    /// Layer-wise: prefill end → last byte landed, at least 0: what the transfer adds to the time to first token
    /// once prefill and transfer overlap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_prefill_ms: Option<f64>,
    /// A cluster replay's prefill rank that sent it (absent from a replay between two ends).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub src: Option<usize>,
    /// A cluster replay's decode rank that received it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst: Option<usize>,
    /// Paged: how long it waited for blocks of the decode side's pool (its own shortfall, or an earlier request's
    /// it queued behind), ms; part of `queue_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_wait_ms: Option<f64>,
    /// Paged: the pool blocks it held (its uncached tokens in blocks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocks: Option<u64>,
}

impl RequestRecord {
    /// Request `r`, moved over `lane` from `start_ms` to `end_ms` (the load's clock): its times and bytes, with the
    /// queue, service and latency they make; what the mode adds (pieces, transfer time, lag, checks) left unset.
    pub fn timed(r: &Scheduled, lane: u32, (start_ms, end_ms): (f64, f64)) -> RequestRecord {
        RequestRecord {
            id: r.id,
            scheduled_ms: r.at_ms,
            start_ms,
            end_ms,
            queue_ms: (start_ms - r.at_ms).max(0.0),
            service_ms: end_ms - start_ms,
            latency_ms: (end_ms - r.at_ms).max(0.0),
            bytes: r.bytes,
            cached_bytes: r.cached_bytes,
            pieces: 0,
            lane,
            lag_ms: None,
            transfer_ms: 0.0,
            mismatched_bytes: None,
            prefill_end_ms: None,
            after_prefill_ms: None,
            src: None,
            dst: None,
            pool_wait_ms: None,
            blocks: None,
        }
    }

    /// The latency its run reports: after the prefill when layer-wise, else from the scheduled arrival.
    pub fn reported_latency_ms(&self) -> f64 {
        self.after_prefill_ms.unwrap_or(self.latency_ms)
    }
}

/// How one load's stream ended before its last request.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cutoff {
    /// The backlog (how far behind schedule the next request started) passed `--max-backlog`: saturated.
    Backlog { at_request: u64, backlog_s: f64 },
    /// A signal asked the run to stop.
    Interrupted,
}

/// One load's run: the requests moved, in schedule order, and why it stopped early, if it did.
#[derive(Debug, Clone)]
pub struct LoadRun {
    pub records: Vec<RequestRecord>,
    pub cutoff: Option<Cutoff>,
    /// Requests of the schedule never started (after a cutoff).
    pub not_started: u64,
    /// Wall time from the load's start to its last request's end, ms.
    pub wall_ms: f64,
    /// Paged: the pool's size and the most of it held at once.
    pub pool: Option<PoolUse>,
}

/// How much of a paged replay's pool a load held.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PoolUse {
    pub blocks: u64,
    pub high_water_blocks: u64,
}

/// How each request moves.
#[derive(Debug, Clone, Default)]
pub enum Mode {
    /// At its arrival, in region-sized reps.
    #[default]
    Whole,
    /// Layer by layer as its prefill computes them.
    Layerwise(Layerwise),
    /// Into blocks of the decode side's pool, in one paged rep.
    Paged(PagedPool),
}

impl Mode {
    /// How each request's layers become available, when layer-wise.
    pub fn layerwise(&self) -> Option<Layerwise> {
        match self {
            Mode::Layerwise(l) => Some(*l),
            _ => None,
        }
    }

    /// The pool each request takes its blocks from, when paged.
    pub fn paged(&self) -> Option<&PagedPool> {
        match self {
            Mode::Paged(p) => Some(p),
            _ => None,
        }
    }
}

/// When to give up on a load, and whom to tell as requests complete.
pub struct Limits<'a> {
    /// Stop taking requests once the next one starts this late (the queue holds this much offered time).
    pub max_backlog: Duration,
    /// Called after each request, with the count done and the current backlog (s).
    pub progress: &'a (dyn Fn(&RequestRecord, usize, f64) + Sync),
    /// Asked between requests: a signal wants the run to stop.
    pub stop: &'a (dyn Fn() -> bool + Sync),
}

/// Longest single sleep while waiting for a request's time: a stop request is seen within it.
const WAKE_EVERY: Duration = Duration::from_millis(100);

/// What moving one request took.
pub struct Moved {
    pub pieces: u32,
    /// The transport's transfer time over its pieces, ms.
    pub transfer_ms: f64,
    pub mismatched_bytes: Option<u64>,
    /// When its last byte landed (the sender's clock): the transfer's last completion, before the receiver's
    /// report of the rep came back (for a rep the receiver pulled: that report).
    pub landed: Instant,
}

/// Move `bytes` over `session` in reps of at most `region` bytes, the first one already armed if `armed` says so;
/// `seq` numbers reps for their `--verify` keys.
pub fn move_bytes(
    session: &mut SenderSession,
    bytes: u64,
    region: u64,
    seq: &mut u32,
    mut armed: Option<ArmedRep>,
) -> Result<Moved> {
    let (mut left, mut pieces, mut transfer_ms, mut bad) = (bytes, 0u32, 0.0, None::<u64>);
    let mut landed = Instant::now();
    while left > 0 {
        let n = left.min(region);
        let ready = match armed.take() {
            Some(a) => a,
            None => arm(session, n, seq)?,
        };
        let rep = session.go(ready)?;
        transfer_ms += rep.transfer_ms;
        landed = session.instant_of(rep.landed_ms());
        if let Some(m) = rep.mismatched_bytes {
            bad = Some(bad.unwrap_or(0) + m);
        }
        left -= n;
        pieces += 1;
    }
    Ok(Moved { pieces, transfer_ms, mismatched_bytes: bad, landed })
}

/// Arm a rep of `n` bytes, numbering it.
fn arm(session: &mut SenderSession, n: u64, seq: &mut u32) -> Result<ArmedRep> {
    let a = session.arm(n, *seq)?;
    *seq = seq.wrapping_add(1);
    Ok(a)
}

/// Sleep until `due` (or until a stop is asked); `false` when stopped first.
fn sleep_until(due: Instant, stop: &(dyn Fn() -> bool + Sync)) -> bool {
    loop {
        if stop() {
            return false;
        }
        let now = Instant::now();
        if now >= due {
            return true;
        }
        std::thread::sleep((due - now).min(WAKE_EVERY));
    }
}

/// The timer slack of this thread, 1 ns: a sleeping driver otherwise wakes up to 50 µs late (Linux's default
/// slack), which would be reported as schedule lag.
fn tighten_timer_slack() {
    let _ = nix::sys::prctl::set_timerslack(1);
}

/// What the sessions of one load share: the queue's head, the records, and how the load ended.
struct Shared<'a> {
    schedule: &'a [Scheduled],
    region: u64,
    t0: Instant,
    next: AtomicUsize,
    halt: AtomicBool,
    cutoff: Mutex<Option<Cutoff>>,
    records: Mutex<Vec<RequestRecord>>,
    failure: Mutex<Option<anyhow::Error>>,
    /// Each request's layers move as its prefill computes them.
    layerwise: Option<Layerwise>,
    /// Each request's blocks come from the decode side's pool.
    pool: Option<pool::Pool>,
}

impl Shared<'_> {
    fn ms(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.t0).as_secs_f64() * 1e3
    }

    /// End the load for every session (the first reason given is kept).
    fn halt_with(&self, c: Cutoff) {
        self.cutoff.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(c);
        self.halt.store(true, Ordering::SeqCst);
    }

    fn fail(&self, e: anyhow::Error) {
        self.failure.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(e);
        self.halt.store(true, Ordering::SeqCst);
    }
}

/// Run `schedule` (sorted by `at_ms`) over `sessions`, each session a server of the FIFO queue. `region` is the
/// most one rep moves. `seqs` carry each session's rep numbering across loads.
pub fn run_load(
    sessions: &mut [SenderSession],
    seqs: &mut [u32],
    schedule: &[Scheduled],
    region: u64,
    limits: &Limits,
) -> Result<LoadRun> {
    run_load_with(sessions, seqs, schedule, region, limits, Mode::Whole)
}

/// [`run_load`], each request moved as `mode` says.
pub fn run_load_with(
    sessions: &mut [SenderSession],
    seqs: &mut [u32],
    schedule: &[Scheduled],
    region: u64,
    limits: &Limits,
    mode: Mode,
) -> Result<LoadRun> {
    let (layerwise, pool) = match mode {
        Mode::Whole => (None, None),
        Mode::Layerwise(l) => (Some(l), None),
        Mode::Paged(p) => (None, Some(pool::Pool::new(p))),
    };
    let shared = Shared {
        schedule,
        region,
        t0: Instant::now(),
        next: AtomicUsize::new(0),
        halt: AtomicBool::new(false),
        cutoff: Mutex::new(None),
        records: Mutex::new(Vec::with_capacity(schedule.len())),
        failure: Mutex::new(None),
        layerwise,
        pool,
    };
    std::thread::scope(|scope| {
        for (lane, (session, seq)) in sessions.iter_mut().zip(seqs.iter_mut()).enumerate() {
            let shared = &shared;
            scope.spawn(move || serve_lane(lane as u32, session, seq, shared, limits));
        }
    });
    if let Some(e) = shared.failure.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    let mut records = shared.records.into_inner().unwrap_or_else(|p| p.into_inner());
    records.sort_by(|a, b| a.scheduled_ms.total_cmp(&b.scheduled_ms).then(a.id.cmp(&b.id)));
    let wall_ms = records.iter().map(|r| r.end_ms).fold(0.0, f64::max);
    let not_started = (schedule.len() - records.len()) as u64;
    let cutoff = shared.cutoff.into_inner().unwrap_or_else(|p| p.into_inner());
    let pool =
        shared.pool.as_ref().map(|p| PoolUse { blocks: p.cfg.order.len() as u64, high_water_blocks: p.high_water() });
    Ok(LoadRun { records, cutoff, not_started, wall_ms, pool })
}

/// One session serving the queue: take the next request, get its first rep ready while it is not yet due, move
/// it at its time, record it; until the schedule ends or the load halts.
fn serve_lane(lane: u32, session: &mut SenderSession, seq: &mut u32, shared: &Shared, limits: &Limits) {
    tighten_timer_slack();
    while !shared.halt.load(Ordering::SeqCst) {
        if (limits.stop)() {
            return shared.halt_with(Cutoff::Interrupted);
        }
        let i = shared.next.fetch_add(1, Ordering::SeqCst);
        let Some(r) = shared.schedule.get(i) else { return };
        let served = match (shared.layerwise, &shared.pool) {
            (Some(lw), _) => layerwise::serve_request(lane, session, seq, r, shared, limits, lw),
            (None, Some(pool)) => pool::serve_request((lane, i), session, seq, r, shared, limits, pool),
            (None, None) => serve_request(lane, session, seq, r, shared, limits),
        };
        match served {
            Ok(Some(rec)) => {
                let done = {
                    let mut all = shared.records.lock().unwrap_or_else(|p| p.into_inner());
                    all.push(rec.clone());
                    all.len()
                };
                let behind =
                    shared.ms(Instant::now()) / 1e3 - next_due_s(shared.schedule, shared.next.load(Ordering::SeqCst));
                (limits.progress)(&rec, done, behind.max(0.0));
            }
            Ok(None) => return,
            Err(e) => return shared.fail(e),
        }
    }
}

/// Move request `r` at its time over `session`; `None` when the load halted before it started.
fn serve_request(
    lane: u32,
    session: &mut SenderSession,
    seq: &mut u32,
    r: &Scheduled,
    shared: &Shared,
    limits: &Limits,
) -> Result<Option<RequestRecord>> {
    let due = shared.t0 + Duration::from_secs_f64(r.at_ms / 1e3);
    let now = Instant::now();
    let idle = now < due;
    // Arm ahead only when the receiver will not give up waiting for the bytes before they come, and not when it
    // pulls: its READ would start at arming, before the request is due.
    let ahead = idle && r.bytes > 0 && due - now < session.io_timeout() / 2 && !session.receiver_pulls();
    let armed = if ahead { Some(arm(session, r.bytes.min(shared.region), seq)?) } else { None };
    let Some((start, armed)) = start_when_due(session, armed, (due, idle), r.id, shared, limits)? else {
        return Ok(None);
    };
    let moved = if r.bytes == 0 {
        Moved { pieces: 0, transfer_ms: 0.0, mismatched_bytes: None, landed: start }
    } else {
        move_bytes(session, r.bytes, shared.region, seq, armed)?
    };
    Ok(Some(record(lane, r, shared, (start, idle), &moved)))
}

/// Wait for request `id`, due at `due`, when its session is early (`idle`); the instant it starts and its rep armed
/// ahead (if any), or None when the load halted: interrupted while waiting (the armed rep's bytes are sent, since
/// its receiver waits for them, so that the session ends cleanly), or started more than `--max-backlog` late.
fn start_when_due(
    session: &mut SenderSession,
    armed: Option<ArmedRep>,
    (due, idle): (Instant, bool),
    id: u64,
    shared: &Shared,
    limits: &Limits,
) -> Result<Option<(Instant, Option<ArmedRep>)>> {
    if idle && !sleep_until(due, limits.stop) {
        shared.halt_with(Cutoff::Interrupted);
        if let Some(a) = armed {
            session.go(a)?;
        }
        return Ok(None);
    }
    let start = Instant::now();
    let backlog = start.saturating_duration_since(due);
    if backlog > limits.max_backlog {
        shared.halt_with(Cutoff::Backlog { at_request: id, backlog_s: backlog.as_secs_f64() });
        return Ok(None);
    }
    Ok(Some((start, armed)))
}

/// The record of request `r`, started at `start` (by a session that sat `idle` waiting for it) and moved as
/// `moved` says.
fn record(lane: u32, r: &Scheduled, shared: &Shared, (start, idle): (Instant, bool), moved: &Moved) -> RequestRecord {
    let (start_ms, end_ms) = (shared.ms(start), shared.ms(moved.landed.max(start)));
    RequestRecord {
        pieces: moved.pieces,
        lag_ms: idle.then(|| (start_ms - r.at_ms).max(0.0)),
        transfer_ms: moved.transfer_ms,
        mismatched_bytes: moved.mismatched_bytes,
        ..RequestRecord::timed(r, lane, (start_ms, end_ms))
    }
}

/// When the next request not yet taken was due, s (the backlog is how far the clock is past it).
fn next_due_s(schedule: &[Scheduled], next: usize) -> f64 {
    schedule.get(next).map_or(f64::INFINITY, |r| r.at_ms / 1e3)
}
