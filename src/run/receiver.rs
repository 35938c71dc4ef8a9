//! The receiver role: accept a sender, validate its configuration before allocating, expose the region, and
//! answer each rep with what it saw on its own clock.

use super::bidir::ReverseSource;
use super::sender::pattern_key;
use crate::control::peer::{server_hello, HANDSHAKE_DEADLINE};
use crate::control::{ControlChannel, Msg, RepReport, Timeouts};
use crate::env::{memory, sysroot::SysRoot};
use crate::mem::{Buffer, MemKind};
use crate::pattern::Span;
use crate::plan::{sizes::format_size, RunConfig, TransferPlan};
use crate::transport::{registry, Context, Landing, Target};
use anyhow::{bail, Result};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the receiver allows and how it waits.
#[derive(Debug, Clone)]
pub struct ReceiverLimits {
    /// Largest transfer accepted; None: whatever memory is available when a sender asks.
    pub max_size: Option<u64>,
    pub max_streams: u32,
    pub timeouts: Timeouts,
    /// Where the receiver's buffer lives (`serve --mem`, `sweep --dst`).
    pub mem: MemKind,
    /// The receiver's RDMA device (verbs).
    pub device: crate::transport::DeviceChoice,
    /// The sender runs in this process too (a sweep's receiver thread, a cluster rank).
    pub shares_process: bool,
    /// The runs in progress on this receiver (`serve --max-sessions`), so each rep can say whether others overlapped
    /// it; None where one run is all there is.
    pub gauge: Option<Arc<RunGauge>>,
}

/// The runs in progress on one receiver. A rep that overlapped another run is marked (`shared_runs`): the runs
/// shared the NIC, the memory bandwidth and the counters, so its numbers are not the link's alone.
#[derive(Debug, Default)]
pub struct RunGauge {
    active: AtomicU32,
    /// Runs ever started: one that starts and ends within a rep still moved.
    started: AtomicU64,
}

/// A run's place in the gauge, given back when the run ends (also on error).
pub struct RunEntry<'a>(&'a RunGauge);

impl Drop for RunEntry<'_> {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::SeqCst);
    }
}

impl RunGauge {
    /// Count a run in, unless `max` are in progress already: then None.
    pub fn enter(&self, max: u32) -> Option<RunEntry<'_>> {
        self.active.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < max).then_some(n + 1)).ok()?;
        self.started.fetch_add(1, Ordering::SeqCst);
        Some(RunEntry(self))
    }

    fn snapshot(&self) -> (u32, u64) {
        (self.active.load(Ordering::SeqCst), self.started.load(Ordering::SeqCst))
    }

    /// Other runs in progress at some time between two snapshots of one run's rep (at least this many).
    fn others_between(before: (u32, u64), after: (u32, u64)) -> u32 {
        let newcomers = u32::try_from(after.1.saturating_sub(before.1)).unwrap_or(u32::MAX);
        before.0.max(after.0).saturating_sub(1).max(newcomers)
    }
}

/// Check a sender's configuration against this receiver's limits. Errors are usage errors: the sender asked for
/// something this receiver refuses.
pub fn validate(cfg: &RunConfig, limits: &ReceiverLimits) -> Result<()> {
    validate_run(cfg, false, limits)
}

/// [`validate`], for a run that may be bidirectional (`--bidir`): the receiver then holds a second buffer of the
/// same size, the one it sends back from, and both count against its limits.
pub fn validate_run(cfg: &RunConfig, bidir: bool, limits: &ReceiverLimits) -> Result<()> {
    let usage = |m: String| crate::error::usage(m);
    if cfg.cases.is_empty() || cfg.cases.iter().any(|c| c.size_bytes == 0) {
        return Err(usage("the run has no sizes or a zero size".into()));
    }
    if cfg.knobs.block_size == 0 || cfg.knobs.reps == 0 || cfg.knobs.streams == 0 {
        return Err(usage("block size, reps and streams must be positive".into()));
    }
    if cfg.knobs.streams > limits.max_streams {
        return Err(usage(format!(
            "{} streams asked, this receiver allows at most {}",
            cfg.knobs.streams, limits.max_streams
        )));
    }
    cfg.check_plan_limits()?;
    registry::get(cfg.transport.kind()).check_knobs(&cfg.transport).map_err(|e| usage(format!("{e:#}")))?;
    // What this receiver allocates: the largest transfer, or the paged layout's pool.
    let size = cfg.buffer_bytes();
    if bidir {
        super::bidir::check(cfg)?;
    }
    let held = if bidir { size.saturating_mul(2) } else { size };
    if let Some(max) = limits.max_size.filter(|max| bidir && held > *max) {
        return Err(usage(format!(
            "--bidir: this receiver would hold two buffers of {} (the region the sender writes and the one it sends back from, {} in all), above its --max-size {}; use sizes up to half of it, or drop --bidir",
            format_size(size),
            format_size(held),
            format_size(max)
        )));
    }
    if let Some(max) = limits.max_size {
        if size > max {
            return Err(usage(format!(
                "{} {} is above this receiver's --max-size {}{}",
                if cfg.paged.is_some() { "paged pool" } else { "size" },
                format_size(size),
                format_size(max),
                match &cfg.paged {
                    Some(p) => format!("; {}", p.smaller_pool_hint()),
                    None => String::new(),
                }
            )));
        }
    }
    // The plan's lists live in host memory whatever the buffer's kind, and are built from what the sender asked.
    let plan = cfg.plan_bytes();
    if let Some(max) = limits.max_size.filter(|max| held.saturating_add(plan) > *max) {
        return Err(usage(plan_too_large(cfg, held, plan, &format!("above its --max-size {}", format_size(max)))));
    }
    let root = SysRoot::get();
    let host_memory = matches!(limits.mem, MemKind::Host | MemKind::Pinned);
    let in_host = if host_memory { held.saturating_add(plan) } else { plan };
    if let Some(room) = memory::headroom(root).filter(|r| in_host > r.bytes) {
        if plan > 0 && (!host_memory || held <= room.bytes) {
            return Err(usage(plan_too_large(cfg, held, plan, &format!("more than it has: {}", room.describe()))));
        }
        return Err(usage(format!(
            "size {}{} does not fit in the receiver's memory: {}",
            format_size(size),
            if bidir { " twice (--bidir)" } else { "" },
            room.describe()
        )));
    }
    if !host_memory {
        return Ok(());
    }
    let kind = cfg.transport.kind();
    let pins = registry::get(kind).pins_host_memory();
    if let Some(lock) = memory::lockable(root).filter(|l| pins && held > l.bytes()) {
        return Err(usage(format!(
            "--transport {kind} pins {} of the receiver's memory, but its ulimit -l (RLIMIT_MEMLOCK, {}) lets it pin only {} more; raise it where the receiver starts (ulimit -l unlimited) or use smaller sizes",
            format_size(held),
            format_size(lock.limit),
            format_size(lock.bytes())
        )));
    }
    Ok(())
}

/// The refusal of a paged run whose plan (`plan` bytes of lists beside `held` bytes of buffers) does not fit: `why`
/// says against what. Fewer, larger pieces are the fix.
fn plan_too_large(cfg: &RunConfig, held: u64, plan: u64, why: &str) -> String {
    let (block, pieces) = match &cfg.paged {
        Some(p) => (p.block_tokens, cfg.cases.iter().filter_map(|c| c.tokens).map(|t| p.pieces(t)).max().unwrap_or(0)),
        None => (0, 0),
    };
    format!(
        "--layout paged: the plan of {pieces} pieces (--block-tokens {block}) needs {} of this receiver's memory beside its buffers of {}, {} in all, {why}; raise --block-tokens (fewer, larger pieces) or the receiver's --max-size",
        format_size(plan),
        format_size(held),
        format_size(held.saturating_add(plan))
    )
}

/// Serve one sender on an accepted control connection, from Hello to Bye.
pub fn serve_session(stream: TcpStream, token: &str, limits: &ReceiverLimits) -> Result<()> {
    let ch = authenticate(stream, token, limits)?;
    run_session(ch, limits)
}

/// The handshake of an accepted connection: a complete, small Hello with the right token within
/// [`HANDSHAKE_DEADLINE`] of now (or `--io-timeout`, when shorter), answered with Welcome.
pub fn authenticate(stream: TcpStream, token: &str, limits: &ReceiverLimits) -> Result<ControlChannel> {
    let deadline = Instant::now() + HANDSHAKE_DEADLINE.min(limits.timeouts.io);
    let mut ch = ControlChannel::new(stream, "the sender", limits.timeouts.io)?;
    server_hello(&mut ch, token, deadline)?;
    Ok(ch)
}

/// An authenticated sender's session, from Config to Bye.
pub fn run_session(mut ch: ControlChannel, limits: &ReceiverLimits) -> Result<()> {
    let (Some(local), Some(peer)) = (ch.local_addr(), ch.peer_addr()) else {
        bail!("the sender's control connection closed after the handshake");
    };
    let (local_ip, peer_ip) = (local.ip(), peer.ip());
    // A configuration this receiver cannot read (e.g. a transport it does not have) is answered, not just dropped.
    let (cfg, latency, bidir) = match ch.recv("Config") {
        Ok(Msg::Config { config, bidir }) => (*config, None, bidir),
        Ok(Msg::PingPong { config, plan }) => (*config, Some(plan), false),
        Ok(other) => bail!("the sender sent {} instead of Config", other.name()),
        Err(e) => {
            ch.send_error(&e);
            return Err(e);
        }
    };
    if let Err(e) = validate_run(&cfg, bidir, limits) {
        ch.send_error(&e);
        return Err(e);
    }
    let ctx = Context {
        peer_ip,
        local_ip,
        timeouts: limits.timeouts,
        device: limits.device.clone(),
        shares_process: limits.shares_process,
        session_key: ch.session_key(),
    };
    let outcome = match latency {
        Some(plan) => super::latency::respond(&mut ch, &cfg, plan, limits.mem, &ctx),
        None => session(&mut ch, &cfg, limits, ctx, bidir),
    };
    match outcome {
        Ok(()) => Ok(()),
        Err(e) => {
            ch.send_error(&e);
            Err(e)
        }
    }
}

fn session(ch: &mut ControlChannel, cfg: &RunConfig, limits: &ReceiverLimits, ctx: Context, bidir: bool) -> Result<()> {
    let mem = limits.mem;
    let gauge = limits.gauge.as_deref();
    let numa = super::place_numa(cfg, &ctx, mem, &cfg.src_mem)?;
    let transport = registry::get(cfg.transport.kind());
    let buf = Arc::new(transport.alloc_buffer(cfg, mem, "receiver", &ctx)?);
    let mut target = transport.open_target(cfg, buf.clone(), &ctx)?;
    ch.send(&Msg::Accept { offer: target.offer(), mem: mem.to_string(), numa: Some(numa) })?;
    match ch.recv("Connect")? {
        Msg::Connect { answer } => target.accept(answer)?,
        other => bail!("the sender sent {} instead of Connect", other.name()),
    }
    ch.send(&Msg::Connected)?;
    let mut reverse = bidir.then(|| ReverseSource::connect(ch, cfg, mem, &ctx)).transpose()?;
    let announced = transport.landing(&cfg.transport) == Landing::Announced;
    let mut counters = super::rep_counters(crate::observe::counters::Side::Receiver, cfg, &ctx, mem);
    let started = Instant::now();
    let ms = |t: Instant| t.saturating_duration_since(started).as_secs_f64() * 1e3;
    // Paged --verify: where the current case's pieces must have landed, rebuilt from the agreed configuration.
    let mut dest_spans: Option<(usize, Vec<Span>)> = None;
    loop {
        // Between reps the sender may spend a while (filling a verify pattern); the io timeout still bounds it.
        match ch.recv("RepStart or Finish")? {
            Msg::RepStart { case, rep, size_bytes, dst_slots, .. } => {
                let tokens =
                    super::serve_check::check_rep_start(cfg, buf.len() as u64, size_bytes, dst_slots.as_deref())
                        .map_err(|why| anyhow::anyhow!("{}'s RepStart {why}; refused", ch.peer_named("the sender")))?;
                let slotted = tokens.zip(dst_slots).map(|(t, s)| slotted_dest_spans(cfg, t, &s));
                target.arm(case, size_bytes)?;
                if let Some(r) = reverse.as_mut().filter(|_| cfg.knobs.verify) {
                    r.fill(size_bytes, cfg.knobs.seed, super::bidir::reverse_key(pattern_key(case, rep)))?;
                }
                counters.start();
                let before = gauge.map(RunGauge::snapshot);
                let t_start = Instant::now();
                ch.send(&Msg::RepReady)?;
                let timeout = ctx.timeouts.io;
                let (landed, reverse_times) = match reverse.as_mut() {
                    None => (land(ch, target.as_mut(), announced, timeout)?, None),
                    Some(r) => {
                        match ch.recv("RepGo")? {
                            Msg::RepGo => {}
                            other => bail!("the sender sent {} instead of RepGo", other.name()),
                        }
                        let go = Instant::now();
                        let (at, times) =
                            r.transfer_while(cfg, case, go, || land(ch, target.as_mut(), announced, timeout))?;
                        (at, Some(times))
                    }
                };
                let moved = counters.finish();
                let shared_runs = before
                    .zip(gauge.map(RunGauge::snapshot))
                    .map(|(b, a)| RunGauge::others_between(b, a))
                    .filter(|n| *n > 0);
                let mut report = RepReport {
                    counters: moved,
                    shared_runs,
                    notify_ms: landed.saturating_duration_since(t_start).as_secs_f64() * 1e3,
                    t_rep_start_ms: ms(t_start),
                    t_landed_ms: ms(landed),
                    transfer_ms: target
                        .posted_transfer()
                        .map(|(posted, done)| done.saturating_duration_since(posted).as_secs_f64() * 1e3),
                    reverse: reverse_times,
                    ..RepReport::default()
                };
                if cfg.knobs.verify {
                    let t = Instant::now();
                    let key = pattern_key(case, rep);
                    let bad = match (&cfg.paged, &slotted) {
                        (None, _) => count_watching_the_sender(&buf, ch, size_bytes, cfg.knobs.seed, key)?,
                        (Some(_), Some(spans)) => buf.count_span_mismatches(spans, cfg.knobs.seed, key)?,
                        (Some(_), None) => {
                            let spans = paged_dest_spans(&mut dest_spans, cfg, case, size_bytes)?;
                            buf.count_span_mismatches(spans, cfg.knobs.seed, key)?
                        }
                    };
                    report.verify_ms = Some(t.elapsed().as_secs_f64() * 1e3);
                    report.mismatched_bytes = Some(bad);
                }
                ch.send(&Msg::RepDone(report))?;
            }
            Msg::Finish => {
                ch.send(&Msg::Bye)?;
                return Ok(());
            }
            other => bail!("the sender sent {} in the middle of a run", other.name()),
        }
    }
}

/// When the armed rep's bytes landed: as the target observed it, or as the sender announced it.
fn land(ch: &mut ControlChannel, target: &mut dyn Target, announced: bool, timeout: Duration) -> Result<Instant> {
    if announced {
        return match ch.recv("Landed")? {
            Msg::Landed => Ok(Instant::now()),
            other => bail!("the sender sent {} instead of Landed", other.name()),
        };
    }
    let control = &*ch;
    match target.wait_landed(timeout, &mut || control.has_input())? {
        Some(at) => Ok(at),
        // The sender spoke (an Error) or hung up mid-rep: its message or the close is the story.
        None => {
            let msg = ch.recv("the rep's end")?;
            bail!("the sender sent {} while the receiver waited for data", msg.name());
        }
    }
}

/// Where a rep's pieces must land when the sender's RepStart names the receiver's block slots (a paged replay), once
/// [`super::serve_check::check_rep_start`] found `slots` fit the run and place `tokens`; nothing to check without
/// `--verify`.
fn slotted_dest_spans(cfg: &RunConfig, tokens: u64, slots: &[u64]) -> Vec<Span> {
    let Some(paged) = cfg.paged.as_ref().filter(|_| cfg.knobs.verify) else { return Vec::new() };
    // The receiver knows only its own slots: the plan's source offsets are not used here.
    TransferPlan::paged_with_slots(paged, tokens, slots, slots).paged.map(|p| p.dest_spans()).unwrap_or_default()
}

/// The destination pieces of case `case` (cached while the sender stays on one case), checked against the size the
/// sender's RepStart names.
fn paged_dest_spans<'a>(
    cache: &'a mut Option<(usize, Vec<Span>)>,
    cfg: &RunConfig,
    case: usize,
    size_bytes: u64,
) -> Result<&'a [Span]> {
    if cache.as_ref().is_none_or(|(c, _)| *c != case) {
        let Some(c) = cfg.cases.get(case).filter(|c| c.size_bytes == size_bytes) else {
            bail!("RepStart names case {case} of {size_bytes} bytes, which is not in the agreed configuration");
        };
        let plan = TransferPlan::for_case(cfg, c)?;
        *cache = Some((case, plan.paged.map(|p| p.dest_spans()).unwrap_or_default()));
    }
    Ok(&cache.as_ref().expect("filled above").1)
}

/// Host memory is checked this much at a time between looks at the control connection, so a sender that dies
/// while a 12 GiB pattern is checked is noticed within seconds.
const CHECK_SLICE: u64 = 256 << 20;

/// Count mismatched bytes of the rep; host memory slice by slice, stopping as soon as the sender hangs up.
fn count_watching_the_sender(buf: &Buffer, ch: &mut ControlChannel, size: u64, seed: u64, key: u64) -> Result<u64> {
    if buf.host_ptr().is_none() {
        return buf.count_mismatches(size, seed, key);
    }
    let (mut off, mut bad) = (0, 0);
    while off < size {
        let n = CHECK_SLICE.min(size - off);
        bad += buf.count_mismatches_range(off, n, seed, key)?;
        off += n;
        if off < size && ch.peer_failed() {
            let msg = ch.recv("the rep's end")?;
            bail!("the sender sent {} while the receiver checked its data", msg.name());
        }
    }
    Ok(bad)
}

#[cfg(test)]
mod tests {
    use super::RunGauge;

    #[test]
    fn the_gauge_caps_runs_and_counts_the_ones_a_rep_overlapped() {
        let g = RunGauge::default();
        let a = g.enter(2).expect("first run");
        let alone = g.snapshot();
        assert_eq!(RunGauge::others_between(alone, g.snapshot()), 0, "one run alone");
        let b = g.enter(2).expect("second run");
        assert!(g.enter(2).is_none(), "a third is refused at --max-sessions 2");
        assert_eq!(RunGauge::others_between(alone, g.snapshot()), 1, "b started during a's rep");
        drop(b);
        // b started and ended within the rep: it still shared it.
        assert_eq!(RunGauge::others_between(alone, g.snapshot()), 1);
        let now = g.snapshot();
        assert_eq!(RunGauge::others_between(now, g.snapshot()), 0, "after b ended, a is alone again");
        drop(a);
        assert_eq!(g.snapshot().0, 0);
        assert!(g.enter(1).is_some(), "slots come back when runs end");
    }
}
