//! The transfers of a cluster run on one rank: the receiver that takes every other rank's flows into this rank's
//! memory (several at once for incast), and this rank's own flows of a step, each driven as `send` drives a
//! receiver, started together with the other ranks' flows at a barrier.

use super::send::connect;
use crate::cluster::{Flow, Group, Member, Step};
use crate::control::Timeouts;
use crate::mem::MemKind;
use crate::plan::RunConfig;
use crate::run::receiver::{serve_session, ReceiverLimits};
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
                    eprintln!("rank {rank}: receiving from {peer}: {e:#}");
                }
            });
            if let Err(e) = spawned {
                eprintln!("rank {rank}: no thread for a flow from {peer}: {e}");
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

/// Run this rank's flows of `step`: connect each (in its own thread), meet the other ranks at a barrier so that
/// every flow of the step starts together, run them, and return what each measured. A flow's failure is in its
/// outcome (rank 0 decides); a failed barrier (another rank left) is this function's error.
pub fn run_step(group: &mut Group, step: &Step, job: &FlowJob) -> Result<Vec<FlowOutcome>> {
    let mine: Vec<Flow> = step.sent_by(group.rank()).copied().collect();
    let mut job = job.clone();
    job.cfg.cases = step.cases.iter().map(|i| job.cfg.cases[*i]).collect();
    job.timeouts.connect = job.timeouts.connect.min(FLOW_CONNECT_TIMEOUT);
    let job = Arc::new(job);
    let (ready, go) = (Arc::new(Barrier::new(mine.len() + 1)), Arc::new(Barrier::new(mine.len() + 1)));
    let abort = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = mine
        .iter()
        .map(|flow| {
            let (flow, job, ready, go, abort) = (*flow, job.clone(), ready.clone(), go.clone(), abort.clone());
            std::thread::Builder::new()
                .name(format!("kvxfer-flow-{}-{}", flow.src, flow.dst))
                .spawn(move || one_flow(flow, &job, &ready, &go, &abort))
        })
        .collect::<std::io::Result<_>>()?;
    ready.wait();
    let started = group.barrier();
    abort.store(started.is_err(), Ordering::SeqCst);
    go.wait();
    // Another rank left: fail now; the flow threads end with the process.
    started?;
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

/// One flow: connect and establish the session, wait for the step to start, run every size of the step.
fn one_flow(flow: Flow, job: &FlowJob, ready: &Barrier, go: &Barrier, abort: &AtomicBool) -> FlowOutcome {
    let peer = &job.members[flow.dst].addr;
    let session = connect(peer, &job.token, job.timeouts, &job.device, &job.cfg, job.src);
    ready.wait();
    go.wait();
    let (session, _) = match session {
        Ok(s) => s,
        Err(e) => return failed(flow, e.context(format!("connecting to rank {} at {peer}", flow.dst))),
    };
    if abort.load(Ordering::SeqCst) {
        let why = anyhow!("another rank failed before the step started");
        let _ = session.close(&Err(anyhow!("{why}")));
        return failed(flow, why);
    }
    let mut out = failed(flow, anyhow!("unreachable"));
    out.error = None;
    out.dst_mem = session.dst_mem.clone();
    out.transport_detail = session.transport_detail.to_json();
    let mut sink = CaseSink { verify: job.cfg.knobs.verify, cases: Vec::new() };
    if let Err(e) = session.run(&mut sink) {
        out.error = Some(format!("{e:#}"));
    }
    out.cases = sink.cases;
    out
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
