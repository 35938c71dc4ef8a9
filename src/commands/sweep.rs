//! `kvxfer sweep`: the main job on one machine. A receiver runs in a thread of this process on loopback, with a
//! fresh random token, and the sender drives it exactly as `send` would drive a remote `serve`.

use super::send::{drive, SendJob};
use crate::cli::{OutputArgs, SweepArgs};
use crate::mem::MemKind;
use crate::output::Recorder;
use crate::run::receiver::{serve_session, ReceiverLimits};
use anyhow::Result;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::thread::JoinHandle;

pub fn run(a: SweepArgs) -> Result<()> {
    if let Some(file) = a.file.clone() {
        return super::sweep_file::run(a, &file);
    }
    let src = MemKind::parse("--src", &a.src)?;
    let dst = MemKind::parse("--dst", &a.dst)?;
    let (cases, geometry) = super::resolve_cases(&a.sizes)?;
    let mut cfg = super::run_config(&a.run, cases, &[src, dst])?;
    cfg.paged = super::layout::paged_config(&a.run, geometry.as_ref(), &cfg.cases)?;
    let timeouts = super::timeouts(&a.run.connect_timeout, &a.run.io_timeout)?;
    super::check_memory(&cfg, &[src, dst])?;

    let mut out = a.out.clone();
    default_outputs(&mut out, &a.out_dir)?;
    Recorder::check_outputs(&out)?;

    let device = super::device_choice(&a.device)?;
    let mut peer_device = device.clone();
    if a.peer_device.is_some() {
        peer_device.name = a.peer_device.clone();
    }
    super::check_host_support(&cfg, &[("--src", src), ("--dst", dst)], &[&device, &peer_device])?;
    let limits = ReceiverLimits { max_size: None, max_streams: 64, timeouts, mem: dst, device: peer_device };
    let (addr, token, receiver) = loopback_receiver(limits)?;

    let label =
        a.run.label.clone().or_else(|| Some(format!("{} {src}→{dst} on {}", cfg.transport, crate::env::hostname())));
    let outcome = drive(SendJob {
        peer: &addr.to_string(),
        token: &token,
        cfg,
        timeouts,
        out: &out,
        label,
        model: geometry.map(|g| g.name),
        role: "sweep",
        src,
        device,
    });
    // The receiver reports its failures to the sender over the control channel before it stops, so the sender's
    // error already says what went wrong on either side; the receiver's own copy would only repeat it.
    let receiver_outcome = receiver.join().unwrap_or_else(|_| Err(anyhow::anyhow!("the receiver thread panicked")));
    match (outcome, receiver_outcome) {
        (Ok(_), Ok(())) => Ok(()),
        (Ok(_), Err(r)) => Err(r.context("the receiver failed after the run")),
        (Err(e), _) => Err(e),
    }
}

/// `results/<timestamp>.json` and `.md` for whichever of --json and --md is not given.
pub fn default_outputs(out: &mut OutputArgs, out_dir: &Path) -> Result<()> {
    if out.json.is_none() || out.md.is_none() {
        std::fs::create_dir_all(out_dir)
            .map_err(|e| crate::error::usage(format!("--out-dir {}: cannot create: {e}", out_dir.display())))?;
        let stamp: String = humantime::format_rfc3339_seconds(std::time::SystemTime::now())
            .to_string()
            .chars()
            .filter(|c| !matches!(c, '-' | ':'))
            .collect();
        out.json.get_or_insert_with(|| out_dir.join(format!("{stamp}.json")));
        out.md.get_or_insert_with(|| out_dir.join(format!("{stamp}.md")));
    }
    Ok(())
}

/// A receiver for one session in a thread of this process, on a loopback port, with a fresh random token.
pub fn loopback_receiver(limits: ReceiverLimits) -> Result<(SocketAddr, String, JoinHandle<Result<()>>)> {
    let listener = super::serve::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))?;
    let addr = listener.local_addr()?;
    let token = random_token()?;
    let receiver_token = token.clone();
    let receiver = std::thread::Builder::new().name("kvxfer-receiver".into()).spawn(move || -> Result<()> {
        let (stream, _) = listener.accept()?;
        serve_session(stream, &receiver_token, &limits)
    })?;
    Ok((addr, token, receiver))
}

fn random_token() -> Result<String> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).map_err(|e| anyhow::anyhow!("no randomness for the loopback receiver's token: {e}"))?;
    Ok(hex::encode(b))
}
