//! `kvxfer send`: connect to a receiver and drive the run.

use super::recorder::Recorder;
use crate::cli::{OutputArgs, SendArgs};
use crate::control::peer::client_hello;
use crate::control::{ControlChannel, Timeouts};
use crate::env::Env;
use crate::export::json::{ConfigJson, Results};
use crate::mem::MemKind;
use crate::plan::RunConfig;
use crate::run::sender::SenderSession;
use crate::transport::Context;
use anyhow::Result;

/// Everything needed to drive one sender run against a receiver.
pub struct SendJob<'a> {
    pub peer: &'a str,
    pub token: &'a str,
    pub cfg: RunConfig,
    pub timeouts: Timeouts,
    pub out: &'a OutputArgs,
    pub label: Option<String>,
    pub model: Option<String>,
    pub role: &'static str,
    pub src: MemKind,
    pub device: crate::transport::DeviceChoice,
}

pub fn run(a: SendArgs) -> Result<()> {
    let src = MemKind::parse("--mem", &a.mem)?;
    let (cases, geometry) = super::resolve_cases(&a.sizes)?;
    let mut cfg = super::run_config(&a.run, cases, src)?;
    cfg.paged = super::layout::paged_config(&a.run, geometry.as_ref(), &cfg.cases)?;
    let timeouts = super::timeouts(&a.run.connect_timeout, &a.run.io_timeout)?;
    super::check_memory(&cfg, &[src])?;
    let device = super::device_choice(&a.device)?;
    super::check_host_support(&cfg, &[("--mem", src)], &[&device])?;
    drive(SendJob {
        peer: &a.peer,
        token: a.token.as_deref().unwrap_or(""),
        cfg,
        timeouts,
        out: &a.out,
        label: a.run.label.clone(),
        model: geometry.map(|g| g.name),
        role: "send",
        src,
        device,
    })
    .map(|_| ())
}

/// Connect, handshake, run every case, and keep the output files current. Returns the results.
pub fn drive(job: SendJob) -> Result<Results> {
    Recorder::check_outputs(job.out)?;
    let mut ch = ControlChannel::connect(job.peer, job.timeouts)?;
    let receiver_host = client_hello(&mut ch, job.token)?;
    let (Some(peer), Some(local)) = (ch.peer_addr(), ch.local_addr()) else {
        anyhow::bail!("the control connection to {} closed during the handshake", job.peer);
    };
    let ctx = Context { peer_ip: peer.ip(), local_ip: local.ip(), timeouts: job.timeouts, device: job.device.clone() };
    let label = job.label.unwrap_or_else(|| format!("{} → {receiver_host}", job.cfg.transport));
    let session = SenderSession::establish(ch, job.cfg.clone(), job.src, &ctx)?;
    let config = ConfigJson {
        transport: job.cfg.transport.clone(),
        block_size: job.cfg.block_size,
        streams: job.cfg.streams,
        reps: job.cfg.reps,
        warmup: job.cfg.warmup,
        verify: job.cfg.verify,
        seed: job.cfg.seed,
        hugepages: job.cfg.hugepages,
        model: job.model,
        peer: job.peer.to_string(),
        role: job.role.to_string(),
        copy: job.cfg.copy.clone(),
        src_mem: job.src.to_string(),
        dst_mem: session.dst_mem.clone(),
        verbs: (job.cfg.transport == "verbs").then(|| job.cfg.verbs.clone()),
        transport_detail: session.transport_detail.clone(),
    };
    let results = Results::new(label, &Env::capture(), config);
    let mut rec = Recorder::new(results, &job.cfg, job.out)?;
    let outcome = session.run(&mut rec);
    rec.finish(outcome.as_ref().err())?;
    outcome.map(|()| rec.results)
}
