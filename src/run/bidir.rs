//! Bidirectional runs (`--bidir`), as `ib_write_bw -b` runs them: at each rep both ends send at once. The forward
//! transfer is the run's own (the sender's buffer into the receiver's region); the reverse one is a second connection
//! of the same transport with the roles turned round: the receiver's second buffer, a [`Source`], into a region on
//! the sender's side, a [`Target`] over a buffer the sender allocated for this run and nothing else. Both ends of the
//! reverse connection are what the transport opens for any run, so any transport whose halves work either way
//! round runs both ways without knowing it ([`crate::transport::Transport::reverses`]).
//!
//! Each direction is timed by its own source (first post → last completion). The rep's aggregate is both
//! directions' bytes over the span from the common start (the sender's `RepGo`) to the later finish: the forward
//! one on the sender's clock, the reverse one as the receiver measured it from `RepGo`'s arrival, so no two clocks
//! are compared.

use crate::control::{ControlChannel, Msg, ReverseTimes};
use crate::mem::{Buffer, MemKind};
use crate::plan::{RunConfig, Write};
use crate::transport::{registry, Context, Landing, Source, Target, TransferHooks};
use crate::units::gbps;
use anyhow::{anyhow, bail, Result};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a bidirectional rep adds to the rep's keys in results files.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BidirRep {
    /// The reverse transfer (the receiver's source): first byte posted → last completion, on the receiver's clock.
    pub reverse_transfer_ms: f64,
    pub reverse_gbps: f64,
    /// The common start → the later of the two finishes.
    pub bidir_span_ms: f64,
    /// Both directions' bytes over `bidir_span_ms`.
    pub aggregate_gbps: f64,
    /// `--verify`: bytes of the reverse transfer that differed from the pattern, as the sender checked them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reverse_mismatched_bytes: Option<u64>,
}

impl BidirRep {
    /// A rep of `size` bytes each way: the forward transfer finished `forward_end_ms` after the common start (on
    /// the sender's clock); the receiver's account of the reverse one is `reverse`.
    pub fn of(size: u64, forward_end_ms: f64, reverse: ReverseTimes, mismatched: Option<u64>) -> BidirRep {
        let span = forward_end_ms.max(reverse.elapsed_ms).max(reverse.transfer_ms);
        BidirRep {
            reverse_transfer_ms: reverse.transfer_ms,
            reverse_gbps: gbps(size, reverse.transfer_ms),
            bidir_span_ms: span,
            aggregate_gbps: gbps(2 * size, span),
            reverse_mismatched_bytes: mismatched,
        }
    }
}

/// The `--verify` pattern key of a rep's reverse transfer, from the forward one's (`sender::pattern_key`, which
/// never sets the top bit): never one of the forward transfers' keys.
pub fn reverse_key(forward: u64) -> u64 {
    forward | 1 << 63
}

/// Refuse `--bidir` for a run that cannot go both ways: a transport whose halves do not reverse, a paged layout.
/// A usage error (exit 2), one line.
pub fn check(cfg: &RunConfig) -> Result<()> {
    let kind = cfg.transport.kind();
    if !registry::get(kind).reverses() {
        let can: Vec<String> = registry::all().iter().filter(|t| t.reverses()).map(|t| t.kind().to_string()).collect();
        crate::bail_usage!(
            "--bidir: --transport {kind} cannot send from the receiver back to the sender; use --transport {}, or drop --bidir",
            can.join(" or ")
        );
    }
    if cfg.paged.is_some() {
        crate::bail_usage!("--bidir moves contiguous buffers both ways; drop --layout paged or --bidir");
    }
    registry::get(kind).check_reverse(&cfg.transport)
}

// ------------------------------------------------------------------------------------------------ the sender

/// The sender's side of the reverse connection: a target over a buffer of this run's size, allocated for it.
pub struct ReverseTarget {
    // Declared before `buf` so it is dropped first: a transport may have registered the buffer with a device.
    target: Box<dyn Target>,
    buf: Arc<Buffer>,
    landing: Landing,
}

impl ReverseTarget {
    /// After Connected: open the target, offer it, take the receiver's answer, and wait until its source is ready.
    pub fn open(ch: &mut ControlChannel, cfg: &RunConfig, mem: MemKind, ctx: &Context) -> Result<ReverseTarget> {
        let transport = registry::get(cfg.transport.kind());
        let ctx = reversed(ctx);
        let buf = Arc::new(transport.alloc_buffer(cfg, mem, "receiver", &ctx)?);
        let mut target = transport.open_target(cfg, buf.clone(), &ctx)?;
        ch.send(&Msg::Reverse { offer: target.offer() })?;
        match ch.recv("ReverseAnswer")? {
            Msg::ReverseAnswer { answer } => target.accept(answer)?,
            other => bail!("the receiver answered {} to Reverse", other.name()),
        }
        ch.send(&Msg::Connected)?;
        match ch.recv("Connected")? {
            Msg::Connected => {}
            other => bail!("the receiver answered {} to the reverse connection", other.name()),
        }
        Ok(ReverseTarget { target, buf, landing: transport.landing(&cfg.transport) })
    }

    /// Expect the reverse half of rep `case` (before RepStart).
    pub fn arm(&mut self, case: usize, size: u64) -> Result<()> {
        self.target.arm(case, size)
    }

    /// After the receiver's RepDone (its source completed): make sure the bytes landed here, and count the ones
    /// that differ from the pattern under `--verify`.
    pub fn landed(&mut self, size: u64, timeout: Duration, verify: Option<(u64, u64)>) -> Result<Option<u64>> {
        if self.landing == Landing::Observed && self.target.wait_landed(timeout, &mut || false)?.is_none() {
            bail!("the receiver's reverse transfer did not land within --io-timeout");
        }
        verify.map(|(seed, key)| self.buf.count_mismatches(size, seed, key)).transpose()
    }
}

/// The context of the reverse connection: the same ends, with the key of the reverse connection, so that its data
/// connections prove themselves apart from the forward ones.
fn reversed(ctx: &Context) -> Context {
    Context {
        peer_ip: ctx.peer_ip,
        local_ip: ctx.local_ip,
        timeouts: ctx.timeouts,
        device: ctx.device.clone(),
        shares_process: ctx.shares_process,
        session_key: ctx.session_key.map(|k| k.reversed()),
    }
}

// ---------------------------------------------------------------------------------------------- the receiver

/// The receiver's side of the reverse connection: its second buffer and the source that sends it.
pub struct ReverseSource {
    // Declared before `buf` so it is dropped first: a transport may have registered the buffer with a device.
    source: Box<dyn Source>,
    buf: Buffer,
    /// The write list of the case last planned, kept while the sender stays on it.
    writes: Option<(usize, Vec<Write>)>,
}

impl ReverseSource {
    /// After Connected: take the sender's Reverse, connect a source to it from a second buffer, answer, and prepare.
    pub fn connect(ch: &mut ControlChannel, cfg: &RunConfig, mem: MemKind, ctx: &Context) -> Result<ReverseSource> {
        let offer = match ch.recv("Reverse")? {
            Msg::Reverse { offer } => offer,
            other => bail!("the sender sent {} instead of Reverse", other.name()),
        };
        if let Err(why) = super::serve_check::check_reverse_offer(cfg, &offer) {
            bail!("{}'s Reverse {why}; refused", ch.peer_named("the sender"));
        }
        let transport = registry::get(cfg.transport.kind());
        let ctx = reversed(ctx);
        let buf = transport.alloc_buffer(cfg, mem, "sender", &ctx)?;
        let mut source = transport.connect_source(cfg, &buf, offer, &ctx)?;
        ch.send(&Msg::ReverseAnswer { answer: source.answer() })?;
        match ch.recv("Connected")? {
            Msg::Connected => {}
            other => bail!("the sender sent {} instead of Connected", other.name()),
        }
        source.prepare(&buf)?;
        ch.send(&Msg::Connected)?;
        Ok(ReverseSource { source, buf, writes: None })
    }

    /// Before RepReady: the `--verify` pattern of the reverse transfer.
    pub fn fill(&mut self, size: u64, seed: u64, key: u64) -> Result<()> {
        self.buf.fill_pattern(size, seed, key)
    }

    /// After RepGo arrived at `go`: send the reverse transfer of case `case` in a thread while `forward` (learning
    /// that the forward transfer landed) runs on this one. Returns what `forward` returned, and the reverse times.
    pub fn transfer_while<T>(
        &mut self,
        cfg: &RunConfig,
        case: usize,
        go: Instant,
        forward: impl FnOnce() -> Result<T>,
    ) -> Result<(T, ReverseTimes)> {
        if self.writes.as_ref().is_none_or(|(c, _)| *c != case) {
            let c = cfg.cases.get(case).ok_or_else(|| anyhow!("RepStart names case {case}, not in the run"))?;
            self.writes = Some((case, crate::plan::TransferPlan::for_case(cfg, c)?.writes));
        }
        let writes = &self.writes.as_ref().expect("planned above").1;
        let (source, buf) = (&mut self.source, &self.buf);
        let stop = AtomicBool::new(false);
        let (fwd, rev) = std::thread::scope(|s| {
            let reverse = std::thread::Builder::new()
                .name("kvxfer-reverse".into())
                .spawn_scoped(s, || {
                    let mut hooks =
                        TransferHooks { done: &mut |_, _, _| {}, peer_failed: &mut || stop.load(Ordering::Relaxed) };
                    source.transfer(buf, writes, &mut hooks)
                })
                .map_err(|e| anyhow!("cannot start the reverse transfer's thread: {e}"));
            let fwd = forward();
            if fwd.is_err() {
                stop.store(true, Ordering::Relaxed);
            }
            let rev = reverse
                .and_then(|h| h.join().unwrap_or_else(|_| Err(anyhow!("the reverse transfer's thread panicked"))));
            (fwd, rev)
        });
        let (fwd, times) = (fwd?, rev.map_err(|e| e.context("the reverse transfer (receiver → sender)"))?);
        let ms = |a: Instant, b: Instant| b.saturating_duration_since(a).as_secs_f64() * 1e3;
        let reverse = ReverseTimes {
            transfer_ms: ms(times.first_post, times.last_complete),
            elapsed_ms: ms(go, times.last_complete),
        };
        Ok((fwd, reverse))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_aggregate_is_both_directions_over_the_later_finish() {
        let rev = ReverseTimes { transfer_ms: 8.0, elapsed_ms: 10.0 };
        let b = BidirRep::of(1_000_000_000, 9.0, rev, Some(0));
        assert_eq!((b.reverse_gbps, b.bidir_span_ms, b.aggregate_gbps), (125.0, 10.0, 200.0));
        // A forward transfer that finished later sets the span.
        let b = BidirRep::of(1_000_000_000, 20.0, rev, None);
        assert_eq!((b.bidir_span_ms, b.aggregate_gbps), (20.0, 100.0));
        assert_ne!(reverse_key(3 << 20 | 7), 3 << 20 | 7);
    }

    #[test]
    fn a_bidirectional_rep_reads_back_as_it_was_written_and_a_one_way_rep_has_none() {
        let text = r#"{"i":0,"transfer_ms":2.0,"gbps":1.0,"setup_ms":0.1,"notify_ms":0.2,"total_ms":2.5,"reverse_transfer_ms":2.5,"reverse_gbps":0.8,"bidir_span_ms":2.6,"aggregate_gbps":1.5,"reverse_mismatched_bytes":0,"reg_ms":0.5}"#;
        let rep: crate::run::RepRecord = serde_json::from_str(text).unwrap();
        assert_eq!(rep.bidir.map(|b| b.aggregate_gbps), Some(1.5));
        assert_eq!(rep.extras.keys().collect::<Vec<_>>(), ["reg_ms"], "the transport's keys stay its own");
        assert_eq!(serde_json::to_string(&rep).unwrap(), text);
        let plain = r#"{"i":1,"transfer_ms":2.0,"gbps":1.0,"setup_ms":0.1,"notify_ms":0.2,"total_ms":2.5}"#;
        let rep: crate::run::RepRecord = serde_json::from_str(plain).unwrap();
        assert!(rep.bidir.is_none());
        assert_eq!(serde_json::to_string(&rep).unwrap(), plain);
    }
}
