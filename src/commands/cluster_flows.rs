//! The transfers of a cluster run on one rank: the receiver that takes every other rank's flows into this rank's
//! memory (several at once for incast), and this rank's own flows of a step, each driven as `send` drives a
//! receiver, started together with the other ranks' flows at a barrier.

use super::send::connect;
use crate::cluster::{Flow, Group, Member, Step};
use crate::control::Timeouts;
use crate::mem::MemKind;
use crate::plan::RunConfig;
use crate::run::receiver::{serve_session, ReceiverLimits};
use crate::run::sender::SenderSession;
use crate::run::{CaseRecord, RepRecord, RunSink};
use crate::stats::CaseResult;
use crate::transport::DeviceChoice;
use anyhow::{anyhow, Result};
use serde::{Deserialize, Serialize};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

/// Receivers listen before the rendezvous, so a flow's connection either succeeds at once or its destination is
/// gone: give up within seconds instead of the usual wait for a receiver that has not started yet.
const FLOW_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Accept every other rank's flows into this rank's memory, each in its own thread, until the process exits.
/// A failed session is said on stderr (its sender reports it too, and rank 0 fails the run).
pub fn receive_in_background(listener: TcpListener, rank: usize, token: String, limits: ReceiverLimits) -> Result<()> {
    let shared = Arc::new((token, limits));
    std::thread::Builder::new().name("kvxfer-cluster-accept".into()).spawn(move || {
        while let Ok((stream, peer)) = listener.accept() {
            let shared = Arc::clone(&shared);
            let spawned = std::thread::Builder::new().name("kvxfer-cluster-receive".into()).spawn(move || {
                if let Err(e) = serve_session(stream, &shared.0, &shared.1) {
                    crate::errln!("rank {rank}: receiving from {peer}: {e:#}");
                }
            });
            if let Err(e) = spawned {
                crate::errln!("rank {rank}: no thread for a flow from {peer}: {e}");
            }
        }
    })?;
    Ok(())
}

/// What this rank's flows need, the same for every step.
#[derive(Clone)]
pub struct FlowJob {
    /// The run's configuration with every size; a step runs a subset.
    pub cfg: RunConfig,
    pub token: String,
    pub timeouts: Timeouts,
    pub device: DeviceChoice,
    pub src: MemKind,
    pub members: Vec<Member>,
    /// Start every rep of a step together across ranks (patterns whose flows run at once and are aggregated).
    pub sync_reps: bool,
}

/// What one flow measured in one step: sent to rank 0, which records it.
#[derive(Debug, Serialize, Deserialize)]
pub struct FlowOutcome {
    pub src: usize,
    pub dst: usize,
    /// The sizes it completed (all of the step's unless `error`).
    pub cases: Vec<CaseResult>,
    pub dst_mem: String,
    #[serde(default)]
    pub transport_detail: serde_json::Value,
    pub error: Option<String>,
}

/// Where this rank's flow threads and its main thread start together with every other rank: the flows wait at
/// `ready`, the main thread passes a group barrier, then everyone goes (or learns that another rank failed).
struct Gate {
    ready: Barrier,
    go: Barrier,
    failed: AtomicBool,
}

impl Gate {
    fn new(flows: usize) -> Gate {
        Gate { ready: Barrier::new(flows + 1), go: Barrier::new(flows + 1), failed: AtomicBool::new(false) }
    }

    /// A flow thread: wait for the start; false when the group failed instead.
    fn pass(&self) -> bool {
        self.ready.wait();
        self.go.wait();
        !self.failed.load(Ordering::SeqCst)
    }

    /// The main thread: once this rank's flows wait, meet the other ranks, then let the flows go.
    fn open(&self, group: &mut Group) -> Result<()> {
        self.ready.wait();
        let met = group.barrier();
        self.failed.store(met.is_err(), Ordering::SeqCst);
        self.go.wait();
        met
    }
}

/// Run this rank's flows of `step`: connect each (in its own thread), meet the other ranks at a barrier so that
/// every flow of the step starts together, run them, and return what each measured. With `sync_reps` every rep
/// starts together too (a barrier before each), so the reps of concurrent flows overlap rep by rep and the
/// aggregate pairs them by index. A flow's failure is in its outcome (rank 0 decides); a failed barrier (another
/// rank left) is this function's error.
pub fn run_step(group: &mut Group, step: &Step, job: &FlowJob) -> Result<Vec<FlowOutcome>> {
    let mine: Vec<Flow> = step.sent_by(group.rank()).copied().collect();
    let mut job = job.clone();
    job.cfg.cases = step.cases.iter().map(|i| job.cfg.cases[*i]).collect();
    job.timeouts.connect = job.timeouts.connect.min(FLOW_CONNECT_TIMEOUT);
    let reps = (u64::from(job.cfg.knobs.warmup) + u64::from(job.cfg.knobs.reps)) as usize * job.cfg.cases.len();
    let passes = 1 + if job.sync_reps { reps } else { 0 };
    let job = Arc::new(job);
    let gate = Arc::new(Gate::new(mine.len()));
    let threads: Vec<_> = mine
        .iter()
        .map(|flow| {
            let (flow, job, gate) = (*flow, job.clone(), gate.clone());
            std::thread::Builder::new()
                .name(format!("kvxfer-flow-{}-{}", flow.src, flow.dst))
                .spawn(move || one_flow(flow, &job, &gate, passes))
        })
        .collect::<std::io::Result<_>>()?;
    for _ in 0..passes {
        // Another rank left: fail now; the flow threads end with the process.
        gate.open(group)?;
    }
    Ok(mine
        .iter()
        .zip(threads)
        .map(|(flow, t)| {
            t.join().unwrap_or_else(|_| failed(*flow, anyhow!("the thread of flow {}→{} panicked", flow.src, flow.dst)))
        })
        .collect())
}

fn failed(flow: Flow, e: anyhow::Error) -> FlowOutcome {
    FlowOutcome {
        src: flow.src,
        dst: flow.dst,
        cases: Vec::new(),
        dst_mem: String::new(),
        transport_detail: serde_json::Value::Null,
        error: Some(format!("{e:#}")),
    }
}

/// One flow: connect and establish the session, wait for the step to start, run every size of the step. It passes
/// the gate `passes` times whatever happens (the other ranks' flows and this rank's main thread count on it),
/// unless the group failed.
fn one_flow(flow: Flow, job: &FlowJob, gate: &Gate, passes: usize) -> FlowOutcome {
    let peer = &job.members[flow.dst].addr;
    // Every rank runs its receiver in the process that sends.
    let session = connect(peer, &job.token, job.timeouts, &job.device, &job.cfg, job.src, true);
    let mut left = passes - 1;
    let started = gate.pass();
    let (mut session, _) = match session {
        Ok(s) => s,
        Err(e) => {
            drain(gate, left, started);
            return failed(flow, e.context(format!("connecting to rank {} at {peer}", flow.dst)));
        }
    };
    if !started {
        let why = anyhow!("another rank failed before the step started");
        let _ = session.close(&Err(anyhow!("{why}")));
        return failed(flow, why);
    }
    let mut out = failed(flow, anyhow!("unreachable"));
    out.error = None;
    out.dst_mem = session.dst_mem.clone();
    out.transport_detail = session.transport_detail.to_json();
    let mut sink = CaseSink { verify: job.cfg.knobs.verify, cases: Vec::new() };
    let outcome = if job.sync_reps {
        let outcome = run_in_step(&mut session, job.cfg.cases.len(), gate, &mut left, &mut sink);
        let closed = session.close(&outcome);
        outcome.and(closed)
    } else {
        session.run(&mut sink)
    };
    drain(gate, left, true);
    if let Err(e) = outcome {
        out.error = Some(format!("{e:#}"));
    }
    out.cases = sink.cases;
    out
}

/// Pass the gate the times a flow that stopped early still owes (none once the group failed).
fn drain(gate: &Gate, left: usize, group_ok: bool) {
    if group_ok {
        for _ in 0..left {
            if !gate.pass() {
                return;
            }
        }
    }
}

/// Every size, each rep started together with the reps of the step's other flows (`SenderSession::run`'s loop
/// with the gate before each rep).
fn run_in_step(
    session: &mut SenderSession,
    cases: usize,
    gate: &Gate,
    left: &mut usize,
    sink: &mut CaseSink,
) -> Result<()> {
    for index in 0..cases {
        let mut run = session.start_case(index, 0)?;
        while !run.is_done() {
            *left -= 1;
            if !gate.pass() {
                anyhow::bail!("another rank failed during the step");
            }
            session.next_rep(&mut run, sink)?;
        }
        sink.case_done(&run.rec)?;
        run.check_verified()?;
    }
    Ok(())
}

/// Keeps each completed size's results; nothing is printed on the rank that measured it (rank 0 prints).
struct CaseSink {
    verify: bool,
    cases: Vec<CaseResult>,
}

impl RunSink for CaseSink {
    fn rep_done(&mut self, _case: &CaseRecord, _rep: &RepRecord, _warmup: bool) {}

    fn case_done(&mut self, case: &CaseRecord) -> Result<()> {
        self.cases.push(CaseResult::from_record(case, self.verify));
        Ok(())
    }
}
