//! Driving a latency run (`kvxfer latency`) on both ends: per size, the initiator times `iters` ping-pongs after
//! `warmup_iters` untimed ones, and the responder answers each. Half of each round trip is a sample, as
//! `ib_write_lat` and `sockperf` report it. The control channel only frames each size (PingPongStart → RepReady …
//! RepDone); the exchanges themselves run on the transport's data path alone.

use crate::control::{ControlChannel, Msg, RepReport};
use crate::mem::MemKind;
use crate::plan::latency::LatencyPlan;
use crate::plan::RunConfig;
use crate::transport::{registry, Context, PingEnd, PingPong};
use anyhow::{bail, Result};
use std::time::Instant;

/// One size's timed exchanges.
pub struct LatencySamples {
    pub case: usize,
    pub size_bytes: u64,
    /// Half of each timed round trip, in ns, in the order measured.
    pub half_rtt_ns: Vec<f64>,
}

/// The ping-pong of `cfg`'s transport, or a usage error naming the transports that have one.
pub fn ping_pong_of(cfg: &RunConfig) -> Result<&'static dyn PingPong> {
    let kind = cfg.transport.kind();
    registry::get(kind).ping_pong().ok_or_else(|| {
        let have: Vec<String> =
            registry::all().iter().filter(|t| t.ping_pong().is_some()).map(|t| t.kind().to_string()).collect();
        crate::error::usage(format!("latency is measured over {}; {kind} has no ping-pong", have.join(" and ")))
    })
}

/// The largest message of the run.
fn max_size(cfg: &RunConfig) -> u64 {
    cfg.cases.iter().map(|c| c.size_bytes).max().unwrap_or(0)
}

/// The initiator's side of an established latency session.
pub struct LatencySession {
    ch: ControlChannel,
    cfg: RunConfig,
    plan: LatencyPlan,
    end: Box<dyn PingEnd>,
    /// The receiver's memory kind, as it reported it.
    pub dst_mem: String,
}

impl LatencySession {
    /// Send the plan and connect the transport's ping-pong ends.
    pub fn establish(mut ch: ControlChannel, cfg: RunConfig, plan: LatencyPlan, ctx: &Context) -> Result<Self> {
        let pp = ping_pong_of(&cfg)?;
        ch.send(&Msg::PingPong { config: Box::new(cfg.clone()), plan })?;
        let (offer, dst_mem) = match ch.recv("Accept")? {
            Msg::Accept { offer, mem, .. } => (offer, mem),
            other => bail!("the receiver answered {} to PingPong", other.name()),
        };
        let end = match pp.connect_initiator(&cfg.transport, &plan, max_size(&cfg), offer, ctx) {
            Ok(end) => end,
            Err(e) => {
                ch.send_error(&e);
                return Err(e);
            }
        };
        ch.send(&Msg::Connect { answer: end.hello() })?;
        match ch.recv("Connected")? {
            Msg::Connected => {}
            other => bail!("the receiver answered {} to Connect", other.name()),
        }
        Ok(LatencySession { ch, cfg, plan, end, dst_mem })
    }

    /// How this end's transport ran.
    pub fn describe(&self) -> serde_json::Value {
        self.end.describe()
    }

    /// Run case `case`'s exchanges: the warm-up, then the timed ones.
    pub fn measure(&mut self, case: usize) -> Result<LatencySamples> {
        let size_bytes = self.cfg.cases[case].size_bytes;
        let exchanges = self.plan.exchanges();
        self.ch.send(&Msg::PingPongStart { case, size_bytes, exchanges })?;
        match self.ch.recv("RepReady")? {
            Msg::RepReady => {}
            other => bail!("the receiver answered {} to PingPongStart", other.name()),
        }
        let size = size_bytes as usize;
        let mut half_rtt_ns = Vec::with_capacity(self.plan.iters as usize);
        // One clock read per exchange, each closing one and opening the next (as perftest's timestamps): on a
        // host whose clock is slow to read (a VM's emulated HPET: about a µs) a second read would be measured too.
        let mut opened = Instant::now();
        let outcome = (0..exchanges).try_for_each(|seq| {
            self.end.ping(size, seq)?;
            let closed = Instant::now();
            if seq >= u64::from(self.plan.warmup_iters) {
                half_rtt_ns.push((closed - opened).as_nanos() as f64 / 2.0);
            }
            opened = closed;
            Ok::<(), anyhow::Error>(())
        });
        let outcome = outcome.and_then(|()| self.end.settle(size, exchanges.saturating_sub(1)));
        if let Err(e) = outcome {
            self.ch.send_error(&e);
            return Err(e);
        }
        match self.ch.recv("RepDone")? {
            Msg::RepDone(_) => {}
            other => bail!("the receiver answered {} after the exchanges", other.name()),
        }
        Ok(LatencySamples { case, size_bytes, half_rtt_ns })
    }

    /// Say goodbye.
    pub fn finish(mut self) -> Result<()> {
        self.ch.send(&Msg::Finish)?;
        match self.ch.recv("Bye")? {
            Msg::Bye => Ok(()),
            other => bail!("the receiver answered {} to Finish", other.name()),
        }
    }
}

/// The responder's side of a latency session whose PingPong (`cfg`, `plan`) the receiver has validated: open the
/// transport's end, answer each size's exchanges, until Finish. `mem` is the receiver's memory kind.
pub fn respond(ch: &mut ControlChannel, cfg: &RunConfig, plan: LatencyPlan, mem: MemKind, ctx: &Context) -> Result<()> {
    let pp = ping_pong_of(cfg)?;
    pp.check(&plan)?;
    if ctx.shares_process {
        crate::observe::numa::split_ping_pong(crate::observe::numa::PingPongEnd::Responder)?;
    }
    let mut end = pp.open_responder(&cfg.transport, &plan, max_size(cfg), mem, ctx)?;
    ch.send(&Msg::Accept { offer: end.hello(), mem: mem.to_string(), numa: None })?;
    match ch.recv("Connect")? {
        Msg::Connect { answer } => end.finish(answer)?,
        other => bail!("the latency client sent {} instead of Connect", other.name()),
    }
    ch.send(&Msg::Connected)?;
    loop {
        match ch.recv("PingPongStart or Finish")? {
            Msg::PingPongStart { case, size_bytes, exchanges } => {
                if let Err(why) = super::serve_check::check_ping_pong_start(cfg, &plan, case, size_bytes, exchanges) {
                    bail!("{}'s PingPongStart {why}; refused", ch.peer_named("the sender"));
                }
                ch.send(&Msg::RepReady)?;
                for seq in 0..exchanges {
                    end.pong(size_bytes as usize, seq)?;
                }
                ch.send(&Msg::RepDone(RepReport::default()))?;
            }
            Msg::Finish => {
                ch.send(&Msg::Bye)?;
                return Ok(());
            }
            other => bail!("the latency client sent {} in the middle of a run", other.name()),
        }
    }
}
