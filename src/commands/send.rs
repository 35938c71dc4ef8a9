//! `kvxfer send`: connect to a receiver and drive the run.

use super::common::{self, configure, results_config, Configured};
use crate::cli::SendArgs;
use crate::control::peer::{client_hello, PeerReported};
use crate::control::{ControlChannel, Timeouts};
use crate::env::Env;
use crate::export::json::{Results, Role};
use crate::export::outputs::Outputs;
use crate::mem::MemKind;
use crate::output::Recorder;
use crate::plan::RunConfig;
use crate::run::sender::SenderSession;
use crate::transport::{registry, Context, DeviceChoice};
use anyhow::Result;

/// Everything needed to drive one sender run against a receiver.
pub struct SendJob<'a> {
    pub peer: &'a str,
    pub token: &'a str,
    pub cfg: RunConfig,
    pub timeouts: Timeouts,
    pub out: &'a Outputs,
    pub label: Option<String>,
    pub model: Option<String>,
    pub role: Role,
    pub src: MemKind,
    pub device: crate::transport::DeviceChoice,
    /// The interrupted run this one continues (`sweep --resume`): its cases are kept, the rest are measured.
    pub previous: Option<Results>,
    /// Whether running this command again with `--resume` continues the run (said when it is interrupted).
    pub resumable: bool,
    /// `--duration`: each case measures for a time rather than `--reps` reps.
    pub pacing: Option<crate::run::pace::Pacing>,
    /// `--bidir`: the receiver sends back into a buffer of this end's at each rep.
    pub bidir: bool,
}

pub fn run(a: SendArgs) -> Result<()> {
    let mut out = a.out.outputs();
    common::default_outputs(&mut out, &a.out_dir)?;
    send(&a, &out)
}

fn send(a: &SendArgs, out: &Outputs) -> Result<()> {
    let src = a.mem;
    let Configured { cfg, model, timeouts } = configure(&a.sizes, &a.run, &[src])?;
    let pacing = super::pace::pacing(&a.pace, cfg.cases.len())?;
    if a.pace.bidir {
        crate::run::bidir::check(&cfg)?;
    }
    let device = common::device_choice(&a.device)?;
    common::check_host_support(&cfg, &[("--mem", src)], &[&device])?;
    drive(SendJob {
        peer: &a.peer,
        token: a.token.as_deref().unwrap_or(""),
        cfg,
        timeouts,
        out,
        label: a.run.label.clone(),
        model,
        role: Role::Send,
        src,
        device,
        previous: None,
        resumable: false,
        pacing,
        bidir: a.pace.bidir,
    })?;
    super::pace::exit_if_stopped();
    Ok(())
}

/// Connect to a receiver, handshake and establish a session: buffers allocated, transport connected. Returns the
/// session and the receiver's host name. A receiver busy with another sender's run is tried again until
/// `--connect-timeout` has passed, saying so once: scripted sends back to back must not race the previous run's end.
pub fn connect(
    peer: &str,
    token: &str,
    timeouts: Timeouts,
    device: &DeviceChoice,
    cfg: &RunConfig,
    src: MemKind,
    shares_process: bool,
) -> Result<(SenderSession, String)> {
    connect_with(peer, token, timeouts, device, cfg, src, shares_process, false)
}

/// [`connect`]; with `bidir`, the session also opens the reverse connection (`--bidir`).
#[allow(clippy::too_many_arguments)]
pub fn connect_with(
    peer: &str,
    token: &str,
    timeouts: Timeouts,
    device: &DeviceChoice,
    cfg: &RunConfig,
    src: MemKind,
    shares_process: bool,
    bidir: bool,
) -> Result<(SenderSession, String)> {
    let attempt = || -> Result<(SenderSession, String)> {
        let mut ch = ControlChannel::connect(peer, timeouts)?;
        let receiver_host = client_hello(&mut ch, token)?;
        let (Some(peer_addr), Some(local)) = (ch.peer_addr(), ch.local_addr()) else {
            anyhow::bail!("the control connection to {peer} closed during the handshake");
        };
        let (peer_ip, local_ip, device) = (peer_addr.ip(), local.ip(), device.clone());
        let session_key = ch.session_key();
        let ctx = Context { peer_ip, local_ip, timeouts, device, shares_process, session_key };
        Ok((SenderSession::establish_with(ch, cfg.clone(), src, &ctx, bidir)?, receiver_host))
    };
    let deadline = std::time::Instant::now() + timeouts.connect;
    let mut pause = std::time::Duration::from_millis(20);
    let mut said = false;
    loop {
        match attempt() {
            Err(e) if busy(&e) && std::time::Instant::now() + pause < deadline => {
                if !said {
                    crate::errln!(
                        "{e:#}; waiting up to {} (--connect-timeout)",
                        humantime::format_duration(timeouts.connect)
                    );
                    said = true;
                }
                std::thread::sleep(pause);
                pause = (pause * 2).min(std::time::Duration::from_millis(500));
            }
            outcome => return outcome,
        }
    }
}

/// Whether the receiver refused because another sender's run is in progress.
fn busy(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<PeerReported>().is_some_and(|p| p.message.starts_with("busy:")))
}

/// Connect, handshake, run every case, and keep the output files current. Returns the results.
pub fn drive(job: SendJob) -> Result<Results> {
    Recorder::check_outputs(job.out)?;
    // A sweep's receiver is a thread of this process, unless its transport needs a process of its own.
    let shares_process = job.role == Role::Sweep && !registry::get(job.cfg.transport.kind()).receiver_in_own_process();
    let (mut session, receiver_host) =
        connect_with(job.peer, job.token, job.timeouts, &job.device, &job.cfg, job.src, shares_process, job.bidir)?;
    session.set_pacing(job.pacing);
    let label = job.label.unwrap_or_else(|| format!("{} → {receiver_host}", job.cfg.transport.kind()));
    let detail = session.transport_detail.to_json();
    let mut config = results_config(&job.cfg, job.model, job.peer, job.role, session.dst_mem.clone(), detail);
    config.numa = Some(session.numa.clone());
    config.bidir = job.bidir.then_some(true);
    let results = match job.previous {
        Some(mut prev) => {
            prev.error = None;
            prev.interrupted = None;
            prev
        }
        None => Results::new(label, &Env::capture(), config),
    };
    let mut rec = Recorder::new(results, &job.cfg, job.out)?;
    let total = rec.results.cases.iter().filter(|c| c.sweep.complete).count() + job.cfg.cases.len();
    rec.set_plan(total, job.resumable)?;
    rec.set_pacing(job.pacing.as_ref(), job.cfg.cases.len());
    let outcome = session.run(&mut rec);
    rec.finish(outcome.as_ref().err())?;
    outcome.map(|()| rec.results)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{RunKnobs, SizeCase, TransportConfig};

    /// A run of transport `name` with `knobs` as JSON (the transports' types are theirs).
    fn run_config(name: &str, knobs: &str) -> RunConfig {
        RunConfig {
            transport: TransportConfig::new(name.parse().unwrap(), serde_json::from_str(knobs).unwrap()),
            knobs: RunKnobs {
                block_size: 1 << 20,
                streams: 2,
                reps: 3,
                warmup: 1,
                verify: true,
                seed: 9,
                hugepages: false,
                counters: Default::default(),
                numa: Default::default(),
                prepare: None,
            },
            block_size_default: false,
            src_mem: "gpu:0".into(),
            cases: vec![SizeCase { size_bytes: 1 << 20, tokens: None, bytes_per_token: None }],
            paged: None,
        }
    }

    #[test]
    fn the_results_config_keeps_its_keys_and_values() {
        let cuda = run_config("cuda", r#"{"copy":"sm","staging":"gather"}"#);
        let detail = serde_json::json!({ "sender": { "gpu": 0 } });
        let c = results_config(&cuda, Some("qwen3-8b".into()), "h:1", Role::Send, "gpu:1".into(), detail);
        assert_eq!(
            serde_json::to_string(&c).unwrap(),
            r#"{"transport":"cuda","block_size":1048576,"streams":2,"reps":3,"warmup":1,"verify":true,"seed":9,"hugepages":false,"model":"qwen3-8b","peer":"h:1","role":"send","copy":"sm","staging":"gather","src_mem":"gpu:0","dst_mem":"gpu:1","transport_detail":{"sender":{"gpu":0}}}"#
        );
        let verbs_knobs = r#"{"qps":4,"batch":16,"inflight":128,"signal_every":16,"mr_chunk":null,"reg_per_rep":false,"cq_mode":"poll","ack_timeout":14,"max_sge":16}"#;
        let verbs = run_config("verbs", verbs_knobs);
        let c = results_config(&verbs, None, "loopback", Role::Sweep, "host".into(), serde_json::Value::Null);
        let text = serde_json::to_string(&c).unwrap();
        assert!(
            text.contains(&format!(
                r#""copy":"auto","staging":"none","src_mem":"gpu:0","dst_mem":"host","verbs":{verbs_knobs}}}"#
            )),
            "{text}"
        );
        assert!(!text.contains("transport_detail"), "{text}");
        let tcp =
            results_config(&run_config("tcp", "{}"), None, "h:1", Role::Send, "host".into(), serde_json::Value::Null);
        let v = serde_json::to_value(&tcp).unwrap();
        assert_eq!((v["copy"].as_str(), v["staging"].as_str(), v.get("verbs")), (Some("auto"), Some("none"), None));
    }
}
