//! `kvxfer sweep`: the main job on one machine. A receiver runs in a thread of this process on loopback, with a
//! fresh random token, and the sender drives it exactly as `send` would drive a remote `serve`.

use super::common::{self, check_host_support, configure, configure_anywhere, default_outputs, Configured};
use super::loopback::loopback_receiver;
use super::send::{drive, SendJob};
use super::sweep_plan::{self, Sweep};
use super::sweep_sessions::SessionPlan;
use crate::cli::SweepArgs;
use crate::output::Recorder;
use crate::run::receiver::ReceiverLimits;
use anyhow::Result;

pub fn run(a: SweepArgs) -> Result<()> {
    if let Some(file) = a.file.clone() {
        if a.pace.bidir {
            crate::bail_usage!(
                "--bidir: with a sweep file, each case runs one way; drop --bidir, or give the sizes as flags"
            );
        }
        if let Some(flag) = [("--duration", &a.pace.duration), ("--interval", &a.pace.interval)]
            .into_iter()
            .find_map(|(f, v)| v.as_ref().map(|_| f))
        {
            crate::bail_usage!("{flag}: with a sweep file, each case runs the reps the file sets; drop {flag}");
        }
        return super::sweep_file::run(a, &file);
    }
    if a.plan {
        return plan(&a);
    }
    let mut out = a.out.outputs();
    if let Some(r) = &a.resume {
        out.json.get_or_insert_with(|| r.clone());
    }
    default_outputs(&mut out, &a.out_dir)?;
    sweep(&a, &out)
}

fn sweep(a: &SweepArgs, out: &crate::export::outputs::Outputs) -> Result<()> {
    let (src, dst) = (a.src, a.dst);
    let Configured { mut cfg, model, timeouts } = configure(&a.sizes, &a.run, &[src, dst])?;
    let pacing = super::pace::pacing(&a.pace, cfg.cases.len())?;
    if a.pace.bidir {
        crate::run::bidir::check(&cfg)?;
    }
    let previous = a.resume.as_deref().map(|p| super::resume::continue_sweep(p, &mut cfg)).transpose()?;
    Recorder::check_outputs(out)?;

    let (device, peer_device) = common::loopback_devices(&a.device, &a.peer_device)?;
    check_host_support(&cfg, &[("--src", src), ("--dst", dst)], &[&device, &peer_device])?;
    let shares_process = !crate::transport::registry::get(cfg.transport.kind()).receiver_in_own_process();
    let limits = ReceiverLimits {
        max_size: None,
        max_streams: 64,
        timeouts,
        mem: dst,
        device: peer_device,
        shares_process,
        gauge: None,
    };
    let (addr, token, receiver) = loopback_receiver(limits, cfg.transport.kind())?;

    let label = a.run.label.clone().or_else(|| {
        let arrow = if a.pace.bidir { "⇄" } else { "→" };
        Some(format!("{} {src}{arrow}{dst} on {}", cfg.transport.kind(), crate::env::hostname()))
    });
    let outcome = drive(SendJob {
        peer: &addr.to_string(),
        token: &token,
        cfg,
        timeouts,
        out,
        label,
        model,
        role: crate::export::json::Role::Sweep,
        src,
        device,
        previous,
        resumable: true,
        pacing,
        bidir: a.pace.bidir,
    });
    // The receiver reports its failures to the sender over the control channel before it stops, so the sender's
    // error already says what went wrong on either side; the receiver's own copy would only repeat it.
    let receiver_outcome = receiver.join().unwrap_or_else(|_| Err(anyhow::anyhow!("the receiver thread panicked")));
    match (outcome, receiver_outcome) {
        (Ok(_), Ok(())) => {
            super::pace::exit_if_stopped();
            Ok(())
        }
        (Ok(_), Err(r)) => Err(r.context("the receiver failed after the run")),
        (Err(e), _) => Err(e),
    }
}

/// `kvxfer sweep --sizes … --plan`: the flags' cases as one session, shown as a sweep file's plan is.
fn plan(a: &SweepArgs) -> Result<()> {
    let (src, dst) = (a.src, a.dst);
    let Configured { cfg, model, timeouts } = configure_anywhere(&a.sizes, &a.run, &[src, dst])?;
    let (device, peer_device) = common::loopback_devices(&a.device, &a.peer_device)?;
    let n = cfg.cases.len();
    let (reps, warmup) = (cfg.knobs.reps, cfg.knobs.warmup);
    let title = format!("sweep: {n} cases in 1 session, {reps} reps + {warmup} warm-up each, in the order given");
    let labels = vec![format!("{} {src}→{dst}", cfg.transport.kind()); n];
    let plans = [SessionPlan { case_ids: (0..n).collect(), cfg, src, dst, device, peer_device, timeouts, model }];
    sweep_plan::show(&Sweep { title, plans: &plans, labels, reps, warmup }, a.here, a.estimate_from.as_deref())
}
