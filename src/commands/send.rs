//! `kvxfer send`: connect to a receiver and drive the run.

use crate::cli::{OutputArgs, SendArgs};
use crate::control::peer::client_hello;
use crate::control::{ControlChannel, Timeouts};
use crate::env::Env;
use crate::export::json::{ConfigJson, Results};
use crate::mem::MemKind;
use crate::output::Recorder;
use crate::plan::RunConfig;
use crate::run::sender::SenderSession;
use crate::transport::{Context, DeviceChoice};
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
    let mut cfg = super::run_config(&a.run, cases, &[src])?;
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

/// Connect to a receiver, handshake and establish a session: buffers allocated, transport connected. Returns the
/// session and the receiver's host name.
pub fn connect(
    peer: &str,
    token: &str,
    timeouts: Timeouts,
    device: &DeviceChoice,
    cfg: &RunConfig,
    src: MemKind,
) -> Result<(SenderSession, String)> {
    let mut ch = ControlChannel::connect(peer, timeouts)?;
    let receiver_host = client_hello(&mut ch, token)?;
    let (Some(peer_addr), Some(local)) = (ch.peer_addr(), ch.local_addr()) else {
        anyhow::bail!("the control connection to {peer} closed during the handshake");
    };
    let ctx = Context { peer_ip: peer_addr.ip(), local_ip: local.ip(), timeouts, device: device.clone() };
    Ok((SenderSession::establish(ch, cfg.clone(), src, &ctx)?, receiver_host))
}

/// `config` of the results file for a session of `cfg`.
pub fn config_json(
    cfg: &RunConfig,
    session: &SenderSession,
    model: Option<String>,
    peer: &str,
    role: &str,
    src: MemKind,
) -> ConfigJson {
    ConfigJson {
        transport: cfg.transport.clone(),
        block_size: cfg.block_size,
        streams: cfg.streams,
        reps: cfg.reps,
        warmup: cfg.warmup,
        verify: cfg.verify,
        seed: cfg.seed,
        hugepages: cfg.hugepages,
        model,
        peer: peer.to_string(),
        role: role.to_string(),
        copy: cfg.copy.clone(),
        staging: cfg.staging.clone(),

        src_mem: src.to_string(),
        dst_mem: session.dst_mem.clone(),
        verbs: (cfg.transport == "verbs").then(|| cfg.verbs.clone()),
        transport_detail: session.transport_detail.clone(),
    }
}

/// Connect, handshake, run every case, and keep the output files current. Returns the results.
pub fn drive(job: SendJob) -> Result<Results> {
    Recorder::check_outputs(job.out)?;
    let (session, receiver_host) = connect(job.peer, job.token, job.timeouts, &job.device, &job.cfg, job.src)?;
    let label = job.label.unwrap_or_else(|| format!("{} → {receiver_host}", job.cfg.transport));
    let config = config_json(&job.cfg, &session, job.model, job.peer, job.role, job.src);
    let results = Results::new(label, &Env::capture(), config);
    let mut rec = Recorder::new(results, &job.cfg, job.out)?;
    let outcome = session.run(&mut rec);
    rec.finish(outcome.as_ref().err())?;
    outcome.map(|()| rec.results)
}
