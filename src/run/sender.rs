//! The sender role: it drives the run. For each size it runs the warm-up and measured reps, each rep being
//! RepStart → RepReady (setup) → transfer → RepDone (the receiver's view), and hands every record to the sink.

use super::pace::{Paced, Pacing, KEPT_REPS};
use super::{CaseRecord, RepRecord, RunSink, StageTimes};
use crate::control::{ControlChannel, Msg};
use crate::mem::{Buffer, MemKind};
use crate::observe::counters::{RepCounters, Side};
use crate::observe::numa::NumaSides;
use crate::pattern::Span;
use crate::plan::{RunConfig, TransferPlan};
use crate::transport::{registry, Context, Landing, Source, TransferHooks, TransportDetail};
use crate::units::gbps;
use anyhow::{bail, Result};
use std::time::Instant;

/// One case of a session in progress: its plan and the reps measured so far.
pub struct CaseRun {
    pub rec: CaseRecord,
    plan: TransferPlan,
    spans: Option<Vec<Span>>,
    /// Reps run so far (warm-ups included): the `--verify` pattern key of the next rep.
    seq: u32,
    warmup: u32,
    warmups_left: u32,
    measured_left: u32,
}

impl CaseRun {
    /// Every measured rep is done (a paced case: its time is up, or its infinite run was asked to stop).
    pub fn is_done(&self) -> bool {
        match &self.rec.paced {
            Some(p) => self.warmups_left == 0 && p.is_done(),
            None => self.measured_left == 0,
        }
    }

    /// A paced case ends: hand the sink its last, partial interval.
    pub fn finish_pacing(&mut self, sink: &mut dyn RunSink) {
        if let Some((row, recorded)) = self.rec.paced.as_mut().and_then(|p| p.finish()) {
            sink.interval(&self.rec, &row, recorded);
        }
    }

    /// Whether the next rep is a warm-up.
    pub fn in_warmup(&self) -> bool {
        self.warmups_left > 0
    }

    /// The case moved to a fresh session (a sweep reopened it): warm up again before the next measured rep.
    pub fn warm_again(&mut self) {
        if !self.is_done() {
            self.warmups_left = self.warmup;
        }
    }

    /// Fail once any rep of the case (warm-up or measured) saw mismatched bytes under `--verify`.
    pub fn check_verified(&self) -> Result<()> {
        let reps = || self.rec.reps.iter().chain(&self.rec.warmups);
        // Saturating: counts that add past u64::MAX must not wrap round to "no mismatch".
        // Reps past those a paced case keeps count too.
        let folded = self.rec.paced.as_ref().map(|p| p.folded_check()).unwrap_or_default();
        let bad = reps()
            .flat_map(|r| [r.mismatched_bytes, r.bidir.and_then(|b| b.reverse_mismatched_bytes)])
            .flatten()
            .fold(folded.mismatched_bytes.saturating_add(folded.reverse_mismatched_bytes), u64::saturating_add);
        if bad > 0 {
            bail!(
                "verification failed: {bad} mismatched bytes at size {} (the results file records which reps)",
                crate::plan::sizes::format_size(self.rec.case.size_bytes)
            );
        }
        Ok(())
    }
}

/// A rep both ends are ready for ([`SenderSession::arm`]): the receiver has answered RepReady.
#[must_use = "an armed rep holds the receiver waiting for its bytes"]
pub struct ArmedRep {
    case: usize,
    seq: u32,
    size: u64,
    t0: Instant,
    t_ready: Instant,
    /// A paged rep's plan ([`SenderSession::arm_paged`]); none: the contiguous plan of `size`.
    plan: Option<TransferPlan>,
}

/// Host memory fills this much at a time between looks at the control connection (~0.1 s here), so a receiver
/// that dies while a 12 GiB pattern is written is noticed within the 5 s promise.
const FILL_SLICE: u64 = 256 << 20;

/// An established session: handshake done, buffers allocated, transport connected.
pub struct SenderSession {
    ch: ControlChannel,
    cfg: RunConfig,
    // Declared before `buf` so it is dropped first: a transport may have registered the buffer with a device.
    source: Box<dyn Source>,
    buf: Buffer,
    /// The receiver's memory kind, as it reported it.
    pub dst_mem: String,
    /// What the transport chose and measured while connecting (for the results file).
    pub transport_detail: TransportDetail,
    /// Where each end bound its thread and buffers.
    pub numa: NumaSides,
    counters: RepCounters,
    started: Instant,
    /// `--duration`/`--interval`: each case measures for a time rather than a rep count.
    pacing: Option<Pacing>,
    /// Test-only: corrupt one byte of each contiguous case's first measured rep (see [`flip_byte_fault`]).
    flip_byte: bool,
    /// `--bidir`: the receiver sends back into this target at each rep.
    reverse: Option<super::bidir::ReverseTarget>,
    /// Whether the warning that a rep's bytes went unchecked under `--verify` was given (once a session).
    said_unchecked: bool,
}

/// "the receiver at HOST:PORT", for errors that name the peer.
fn receiver_at(ch: &ControlChannel) -> String {
    ch.peer_named("the receiver")
}

fn ms_since(t0: Instant, t: Instant) -> f64 {
    t.saturating_duration_since(t0).as_secs_f64() * 1e3
}

/// A test-only fault, read from the hidden `KVXFER_TEST_FAULT=flip-byte`: under `--verify` the sender inverts the
/// middle byte of its source buffer after filling the pattern of each contiguous case's first measured rep, so the
/// bytes that arrive differ from the pattern in exactly one place. The end-to-end tests of `--verify` use it to show
/// that a corrupted transfer fails, counting one mismatched byte (tests/cli_tcp.rs, tests/verbs.rs); paged layouts
/// have `--test-fault-swap-dests`.
fn flip_byte_fault() -> Result<bool> {
    match std::env::var("KVXFER_TEST_FAULT") {
        Err(_) => Ok(false),
        Ok(v) if v == "flip-byte" => {
            crate::errln!(
                "note: KVXFER_TEST_FAULT=flip-byte: a test-only fault corrupts one byte of the first measured rep"
            );
            Ok(true)
        }
        Ok(v) => bail!("KVXFER_TEST_FAULT={v}: the one test-only fault is flip-byte; unset it to run without"),
    }
}

/// The `--verify` pattern's rep key: distinct for every (case, rep) of a run.
pub fn pattern_key(case: usize, rep: u32) -> u64 {
    ((case as u64) << 20) | rep as u64
}

impl SenderSession {
    /// Send the configuration, allocate the source buffer and connect the transport.
    pub fn establish(ch: ControlChannel, cfg: RunConfig, src: MemKind, ctx: &Context) -> Result<SenderSession> {
        SenderSession::establish_with(ch, cfg, src, ctx, false)
    }

    /// [`Self::establish`]; with `bidir`, also the reverse connection, into a buffer of this end's (`--bidir`).
    pub fn establish_with(
        mut ch: ControlChannel,
        cfg: RunConfig,
        src: MemKind,
        ctx: &Context,
        bidir: bool,
    ) -> Result<SenderSession> {
        let flip_byte = flip_byte_fault()?;
        ch.send(&Msg::Config { config: Box::new(cfg.clone()), bidir })?;
        let (offer, dst_mem, receiver_numa) = match ch.recv("Accept")? {
            Msg::Accept { offer, mem, numa } => (offer, mem, numa),
            other => bail!("the receiver answered {} to Config", other.name()),
        };
        let offered = registry::get(cfg.transport.kind()).offered_region(&offer);
        if let Err(why) = super::peer_check::check_region(offered, cfg.buffer_bytes()) {
            let e = anyhow::anyhow!("{} {why}; refused", receiver_at(&ch));
            ch.send_error(&e);
            return Err(e);
        }
        let sender_numa = match super::place_numa(&cfg, ctx, src, &dst_mem) {
            Ok(n) => n,
            Err(e) => {
                ch.send_error(&e);
                return Err(e);
            }
        };
        let numa = NumaSides { sender: sender_numa, receiver: receiver_numa };
        let buf = match registry::get(cfg.transport.kind()).alloc_buffer(&cfg, src, "sender", ctx) {
            Ok(b) => b,
            Err(e) => {
                ch.send_error(&e);
                return Err(e);
            }
        };
        let mut source = match registry::get(cfg.transport.kind()).connect_source(&cfg, &buf, offer, ctx) {
            Ok(s) => s,
            Err(e) => {
                ch.send_error(&e);
                return Err(e);
            }
        };
        ch.send(&Msg::Connect { answer: source.answer() })?;
        match ch.recv("Connected")? {
            Msg::Connected => {}
            other => bail!("the receiver answered {} to Connect", other.name()),
        }
        if let Err(e) = source.prepare(&buf) {
            ch.send_error(&e);
            return Err(e);
        }
        let reverse = match bidir.then(|| super::bidir::ReverseTarget::open(&mut ch, &cfg, src, ctx)).transpose() {
            Ok(r) => r,
            Err(e) => {
                ch.send_error(&e);
                return Err(e);
            }
        };
        let transport_detail = source.describe();
        let counters = super::rep_counters(Side::Sender, &cfg, ctx, src);
        let started = Instant::now();
        Ok(SenderSession {
            ch,
            cfg,
            buf,
            dst_mem,
            transport_detail,
            numa,
            source,
            counters,
            started,
            pacing: None,
            flip_byte,
            reverse,
            said_unchecked: false,
        })
    }

    /// Measure each case for a time (`--duration`) instead of `--reps` reps.
    pub fn set_pacing(&mut self, pacing: Option<Pacing>) {
        self.pacing = pacing;
    }

    /// Run every case in order; stop at the first failure (after handing completed cases to the sink).
    pub fn run(mut self, sink: &mut dyn RunSink) -> Result<()> {
        let result = self.run_cases(sink);
        self.close(&result)?;
        result
    }

    /// End the session: Finish/Bye after success, or tell the receiver why the sender stops.
    pub fn close(mut self, outcome: &Result<()>) -> Result<()> {
        match outcome {
            Ok(()) => {
                self.ch.send(&Msg::Finish)?;
                match self.ch.recv("Bye")? {
                    Msg::Bye => Ok(()),
                    other => bail!("the receiver answered {} to Finish", other.name()),
                }
            }
            Err(e) => {
                self.ch.send_error(e);
                Ok(())
            }
        }
    }

    fn run_cases(&mut self, sink: &mut dyn RunSink) -> Result<()> {
        for index in 0..self.cfg.cases.len() {
            // A paced run asked to stop measures no further size (see `pace`).
            if super::pace::stopped_by().is_some() {
                break;
            }
            let mut run = self.start_case(index, 0)?;
            while !run.is_done() {
                self.next_rep(&mut run, sink)?;
            }
            run.finish_pacing(sink);
            sink.case_done(&run.rec)?;
            run.check_verified()?;
        }
        Ok(())
    }

    /// Plan case `index` of the session's configuration. `measured_before` measured reps of it were kept from an
    /// earlier run (`--resume`; the caller puts them in `rec`): its warm-ups run again, then only the missing reps.
    pub fn start_case(&self, index: usize, measured_before: u32) -> Result<CaseRun> {
        let case = self.cfg.cases[index];
        let plan = TransferPlan::for_case(&self.cfg, &case)?;
        let rec = CaseRecord {
            index,
            case,
            transport: self.cfg.transport.kind(),
            block_size: plan.block_size,
            block_clamped: plan.paged.is_none()
                && plan.block_size < self.cfg.knobs.block_size
                && !self.cfg.block_size_default,
            writes: plan.writes.len(),
            layout: self.cfg.layout(),
            pieces: plan.pieces(),
            reps: Vec::new(),
            warmups: Vec::new(),
            block_latency_us: hdrhistogram::Histogram::new(3).expect("3 significant digits is valid"),
            paced: self.pacing.map(Paced::new),
        };
        let spans = plan.paged.as_ref().filter(|_| self.cfg.knobs.verify).map(|p| p.source_spans());
        let (warmup, measured_left) = (self.cfg.knobs.warmup, self.cfg.knobs.reps.saturating_sub(measured_before));
        Ok(CaseRun { rec, plan, spans, seq: 0, warmup, warmups_left: warmup, measured_left })
    }

    /// Run the case's next rep (its warm-ups come first), hand it to the sink and keep it in the case's record.
    pub fn next_rep(&mut self, run: &mut CaseRun, sink: &mut dyn RunSink) -> Result<()> {
        let (seq, warmup) = (run.seq, run.in_warmup());
        let (index, plan, spans) = (run.rec.index, &run.plan, run.spans.as_deref());
        if let Some(cmd) = &self.cfg.knobs.prepare {
            let rep = if warmup { run.rec.warmups.len() } else { run.rec.reps.len() };
            let at = super::prepare::RepAt { case: index, rep, warmup, size_bytes: plan.size_bytes };
            super::prepare::run(cmd, at, self.ch.io_timeout())?;
        }
        if let (false, Some(p)) = (warmup, run.rec.paced.as_mut()) {
            p.rep_starts();
        }
        let flip = self.flip_byte && !warmup && run.rec.reps.is_empty();
        let mut r = self.run_rep(index, seq, warmup, plan, spans, &mut run.rec.block_latency_us, flip)?;
        run.seq += 1;
        // Rep numbers count on from what the case already holds (a resumed case keeps its earlier reps).
        if warmup {
            r.i = run.rec.warmups.len() as u32;
            run.warmups_left -= 1;
        } else {
            r.i = run.rec.reps.len() as u32;
            run.measured_left = run.measured_left.saturating_sub(1);
        }
        sink.rep_done(&run.rec, &r, warmup);
        let judged = if warmup { run.warmups_left == 0 } else { run.warmup == 0 && run.rec.reps.is_empty() };
        if let (true, Some(p)) = (judged, run.rec.paced.as_ref()) {
            p.check_interval_fits(r.transfer_ms, run.plan.size_bytes)?;
        }
        if warmup {
            run.rec.warmups.push(r);
            return Ok(());
        }
        let size = run.plan.size_bytes;
        let Some(p) = run.rec.paced.as_mut() else {
            run.rec.reps.push(r);
            return Ok(());
        };
        let closed = p.add(&r, size);
        if run.rec.reps.len() < KEPT_REPS {
            run.rec.reps.push(r);
        } else {
            p.fold(&r, self.cfg.knobs.verify);
        }
        if let Some((row, recorded)) = closed {
            sink.interval(&run.rec, &row, recorded);
        }
        Ok(())
    }

    /// Fill the `--verify` pattern; host memory slice by slice, stopping as soon as the receiver hangs up.
    fn fill_watching_the_receiver(&mut self, size: u64, key: u64) -> Result<()> {
        if self.buf.host_ptr().is_none() {
            return self.buf.fill_pattern(size, self.cfg.knobs.seed, key);
        }
        let mut off = 0;
        while off < size {
            let n = FILL_SLICE.min(size - off);
            self.buf.fill_pattern_range(off, n, self.cfg.knobs.seed, key)?;
            off += n;
            if off < size && self.ch.peer_failed() {
                return Err(match self.ch.recv("RepReady") {
                    Err(e) => e,
                    Ok(m) => anyhow::anyhow!("the receiver sent {} while the sender filled its pattern", m.name()),
                });
            }
        }
        Ok(())
    }

    /// A bidirectional rep's reverse half, once the receiver's RepDone said its transfer completed: its bytes
    /// landed here and were checked, and the rep's aggregate from the common start `go`.
    fn reverse_landed(
        &mut self,
        case: usize,
        seq: u32,
        size: u64,
        go: Instant,
        forward_end: Instant,
        report: &crate::control::RepReport,
    ) -> Result<Option<super::bidir::BidirRep>> {
        let Some(r) = self.reverse.as_mut() else { return Ok(None) };
        let Some(times) = report.reverse else {
            bail!("the receiver's RepDone of a bidirectional rep lacks its reverse transfer's times")
        };
        let verify =
            self.cfg.knobs.verify.then(|| (self.cfg.knobs.seed, super::bidir::reverse_key(pattern_key(case, seq))));
        let mismatched = r.landed(size, self.ch.io_timeout(), verify)?;
        Ok(Some(super::bidir::BidirRep::of(size, ms_since(go, forward_end), times, mismatched)))
    }

    /// One rep of `size` bytes outside the configuration's cases, into the start of the receiver's region (a
    /// replayed request, or a piece of one): the contiguous plan of that size, `seq` its `--verify` pattern key
    /// (distinct per rep of the session). `size` is at most the agreed buffer.
    pub fn rep_of_size(&mut self, size: u64, seq: u32) -> Result<RepRecord> {
        let plan = TransferPlan::contiguous(size, self.cfg.knobs.block_size);
        let mut blocks = hdrhistogram::Histogram::new(3).expect("3 significant digits is valid");
        self.run_rep(0, seq, false, &plan, None, &mut blocks, false)
    }

    /// How long either end waits for the other before giving up (`--io-timeout`).
    pub fn io_timeout(&self) -> std::time::Duration {
        self.ch.io_timeout()
    }

    /// Whether the receiver pulls each rep as soon as it is armed ([`crate::transport::Transport::pulls`]): then
    /// arming is starting.
    pub fn receiver_pulls(&self) -> bool {
        registry::get(self.cfg.transport.kind()).pulls(&self.cfg.transport)
    }

    /// The configuration the session runs (agreed with the receiver).
    pub fn config(&self) -> &RunConfig {
        &self.cfg
    }

    /// The sender's clock origin of this session's stage times.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// Refuse a RepDone that cannot be true of a rep of `size` bytes that took `wall_ms` here (see `peer_check`);
    /// warn, once a session, when one under `--verify` carries no mismatch count.
    fn check_report(&mut self, report: &crate::control::RepReport, size: u64, wall_ms: f64) -> Result<()> {
        let seen = super::peer_check::RepSeen { size_bytes: size, verify: self.cfg.knobs.verify, wall_ms };
        match super::peer_check::check_report(report, &seen) {
            Err(why) => bail!("{} {why}; refused", receiver_at(&self.ch)),
            Ok(super::peer_check::Verdict::Unchecked) if !self.said_unchecked => {
                self.said_unchecked = true;
                crate::errln!(
                    "warning: {} sent no mismatch count for a rep under --verify: its bytes were not checked, and its case is recorded as not verified",
                    receiver_at(&self.ch)
                );
            }
            Ok(_) => {}
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn run_rep(
        &mut self,
        case: usize,
        seq: u32,
        warmup: bool,
        plan: &TransferPlan,
        paged_spans: Option<&[Span]>,
        block_latency_us: &mut hdrhistogram::Histogram<u64>,
        flip: bool,
    ) -> Result<RepRecord> {
        let armed = self.arm_rep(case, seq, warmup, plan.size_bytes, (paged_spans, None), flip)?;
        self.transfer_armed(armed, plan, block_latency_us, warmup)
    }

    /// Get a rep of a `size`-byte contiguous transfer ready at both ends (the `--verify` pattern filled, the
    /// receiver armed), without moving a byte yet: [`Self::go`] moves it. A replay arms a request's rep while it
    /// waits for the request's time, so that the control round trip is not part of the request's latency.
    pub fn arm(&mut self, size: u64, seq: u32) -> Result<ArmedRep> {
        self.arm_rep(0, seq, false, size, (None, None), false)
    }

    /// Get a paged rep of `tokens` tokens ready at both ends, its blocks in slots `src` of this end's pool and
    /// `dst` of the receiver's (a replayed request's block tables: the receiver plans the same destinations from
    /// the RepStart that names them); [`Self::go`] moves it.
    pub fn arm_paged(&mut self, tokens: u64, (src, dst): (&[u64], &[u64]), seq: u32) -> Result<ArmedRep> {
        let Some(paged) = &self.cfg.paged else { bail!("a paged rep needs the paged layout") };
        let plan = TransferPlan::paged_with_slots(paged, tokens, src, dst);
        let spans = plan.paged.as_ref().filter(|_| self.cfg.knobs.verify).map(|p| p.source_spans());
        let mut armed = self.arm_rep(0, seq, false, plan.size_bytes, (spans.as_deref(), Some(dst.to_vec())), false)?;
        armed.plan = Some(plan);
        Ok(armed)
    }

    /// Move the rep [`Self::arm`] got ready; its record's stage times say when its last byte landed.
    pub fn go(&mut self, mut armed: ArmedRep) -> Result<RepRecord> {
        let plan = armed.plan.take().unwrap_or_else(|| TransferPlan::contiguous(armed.size, self.cfg.knobs.block_size));
        let mut blocks = hdrhistogram::Histogram::new(3).expect("3 significant digits is valid");
        self.transfer_armed(armed, &plan, &mut blocks, false)
    }

    /// When this session's stage time `ms` (ms since its start, as [`StageTimes`] holds them) was.
    pub fn instant_of(&self, ms: f64) -> Instant {
        self.started + std::time::Duration::from_secs_f64(ms.max(0.0) / 1e3)
    }

    fn arm_rep(
        &mut self,
        case: usize,
        seq: u32,
        warmup: bool,
        size: u64,
        (paged_spans, dst_slots): (Option<&[Span]>, Option<Vec<u64>>),
        flip: bool,
    ) -> Result<ArmedRep> {
        if self.cfg.knobs.verify {
            // Paged: each source piece holds the pattern of its logical offset in the transfer.
            match paged_spans {
                Some(spans) => self.buf.fill_spans(spans, self.cfg.knobs.seed, pattern_key(case, seq))?,
                None => {
                    self.fill_watching_the_receiver(size, pattern_key(case, seq))?;
                    if flip {
                        self.buf.flip_byte(size / 2)?;
                    }
                }
            }
        }
        if let Some(r) = self.reverse.as_mut() {
            r.arm(case, size)?;
        }
        self.counters.start();
        let t0 = Instant::now();
        self.ch.send(&Msg::RepStart { case, rep: seq, warmup, size_bytes: size, dst_slots })?;
        match self.ch.recv("RepReady")? {
            Msg::RepReady => {}
            other => bail!("the receiver answered {} to RepStart", other.name()),
        }
        let t_ready = Instant::now();
        Ok(ArmedRep { case, seq, size, t0, t_ready, plan: None })
    }

    fn transfer_armed(
        &mut self,
        armed: ArmedRep,
        plan: &TransferPlan,
        block_latency_us: &mut hdrhistogram::Histogram<u64>,
        warmup: bool,
    ) -> Result<RepRecord> {
        let ArmedRep { case, seq, size, t0, t_ready, .. } = armed;
        // Both ends start at once: the receiver's transfer on RepGo, this one's right after sending it.
        if self.reverse.is_some() {
            self.ch.send(&Msg::RepGo)?;
        }
        let hist = block_latency_us;
        let ch = &self.ch;
        let mut hooks = TransferHooks {
            done: &mut |_, posted, done| {
                if !warmup {
                    let us = done.saturating_duration_since(posted).as_micros().max(1) as u64;
                    let _ = hist.record(us);
                }
            },
            peer_failed: &mut || ch.peer_failed(),
        };
        let outcome = self.source.transfer(&self.buf, &plan.writes, &mut hooks);
        let times = match outcome {
            Ok(t) => t,
            // Give both sides' accounts: the data path's symptom and the receiver's own (its Error, or its hang-up).
            Err(e) if self.ch.peer_failed() => {
                return Err(match self.ch.recv("RepDone") {
                    Err(peer) => anyhow::anyhow!("{e:#}; {peer:#}"),
                    Ok(_) => e,
                });
            }
            Err(e) => return Err(e),
        };
        if registry::get(self.cfg.transport.kind()).landing(&self.cfg.transport) == Landing::Announced {
            self.ch.send(&Msg::Landed)?;
        }
        let report = match self.ch.recv("RepDone")? {
            Msg::RepDone(r) => r,
            other => bail!("the receiver answered {} instead of RepDone", other.name()),
        };
        let t_done = Instant::now();
        self.check_report(&report, size, ms_since(t0, t_done))?;
        let bidir = self.reverse_landed(case, seq, size, t_ready, times.last_complete, &report)?;
        let mut counters = self.counters.finish();
        crate::observe::counters::merge(&mut counters, report.counters.clone());
        // A receiver that posted the transfer itself (it pulls) timed it on its own clock.
        let transfer_ms = report.transfer_ms.unwrap_or_else(|| ms_since(times.first_post, times.last_complete));
        let s0 = self.started;
        Ok(RepRecord {
            i: 0, // numbered by `next_rep`
            transfer_ms,
            gbps: gbps(size, transfer_ms),
            setup_ms: ms_since(t0, t_ready),
            notify_ms: report.notify_ms,
            total_ms: ms_since(t0, t_done),
            mismatched_bytes: report.mismatched_bytes,
            counters,
            shared_runs: report.shared_runs,
            bidir,
            extras: times.extras,
            sender: StageTimes {
                t_setup_start_ms: ms_since(s0, t0),
                t_ready_ms: ms_since(s0, t_ready),
                t_first_post_ms: ms_since(s0, times.first_post),
                t_last_complete_ms: ms_since(s0, times.last_complete),
                t_done_ms: ms_since(s0, t_done),
            },
            receiver: report,
        })
    }
}
