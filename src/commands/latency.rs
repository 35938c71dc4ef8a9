//! `kvxfer latency`: ping-pong latency per message size, against a receiver started in this process on loopback
//! (as `sweep` does) or a `kvxfer serve` named by `--peer`. Each size's samples are half round trips; the results
//! file is a results v1 file whose `config.mode` is `latency`, one case per size with its `latency_us` quantiles.

use super::loopback::loopback_receiver;
use crate::bail_usage;
use crate::cli::LatencyArgs;
use crate::control::peer::client_hello;
use crate::control::{ControlChannel, Timeouts};
use crate::env::Env;
use crate::export::json::{Results, Role};
use crate::measure::{Fields, Json};
use crate::mem::MemKind;
use crate::observe::numa::{split_ping_pong, PingPongEnd};
use crate::plan::latency::{LatencyPlan, MAX_MESSAGE};
use crate::plan::sizes::format_size;
use crate::plan::{RunConfig, RunKnobs, SizeCase};
use crate::run::latency::{ping_pong_of, LatencySamples, LatencySession};
use crate::run::receiver::ReceiverLimits;
use crate::run::{CaseRecord, RepRecord};
use crate::stats::CaseResult;
use crate::transport::{registry, Context, DeviceChoice};
use anyhow::{bail, Result};
use serde::Serialize;

pub fn run(a: LatencyArgs) -> Result<()> {
    let (cfg, plan) = configure(&a)?;
    let (device, peer_device) = devices(&a)?;
    let dst = dst_memory(&a, &cfg)?;
    let timeouts = Timeouts { connect: a.connect_timeout, io: a.io_timeout };
    for (flag, path) in [("--json", &a.json), ("--html", &a.html)] {
        if let Some(p) = path {
            crate::export::check_writable(flag, p)?;
        }
    }
    if let Some(dir) = &a.fig {
        crate::export::plot::prepare_dir(dir)?;
    }
    let Some(peer) = &a.peer else {
        let limits = ReceiverLimits {
            max_size: None,
            max_streams: 1,
            timeouts,
            mem: dst,
            device: peer_device,
            shares_process: !registry::get(a.transport).receiver_in_own_process(),
            gauge: None,
        };
        let (addr, token, receiver) = loopback_receiver(limits, a.transport)?;
        let outcome = measure(&a, cfg, plan, &addr.to_string(), &token, (timeouts, device), Role::Sweep);
        let receiver_outcome = receiver.join().unwrap_or_else(|_| Err(anyhow::anyhow!("the receiver thread panicked")));
        return match (outcome, receiver_outcome) {
            (Ok(()), Err(r)) => Err(r.context("the receiver failed after the run")),
            (outcome, _) => outcome,
        };
    };
    measure(&a, cfg, plan, peer, a.token.as_deref().unwrap_or(""), (timeouts, device), Role::Send)
}

/// This end's RDMA device and, without --peer, the loopback receiver's (`--peer-device`, else the same), checked
/// on this host when the transport opens RDMA devices.
fn devices(a: &LatencyArgs) -> Result<(DeviceChoice, DeviceChoice)> {
    if a.peer.is_some() && a.peer_device.is_some() {
        bail_usage!(
            "--peer-device names the device of the receiver latency starts itself; with --peer, give serve its -d"
        );
    }
    let (device, peer_device) = super::common::loopback_devices(&a.device, &a.peer_device)?;
    let ends: Vec<&DeviceChoice> = if a.peer.is_some() { vec![&device] } else { vec![&device, &peer_device] };
    registry::get(a.transport).check_host(&ends)?;
    Ok((device, peer_device))
}

/// Where the receiver latency starts itself answers from (`--dst`, as the transport's ping-pong takes it); unused
/// with --peer.
fn dst_memory(a: &LatencyArgs, cfg: &RunConfig) -> Result<MemKind> {
    match a.peer {
        Some(_) => Ok(MemKind::Host),
        None => ping_pong_of(cfg)?.memory(a.transport, a.dst),
    }
}

/// The run's configuration and plan from the flags, refused (exit 2) before anything starts when they make no sense.
fn configure(a: &LatencyArgs) -> Result<(RunConfig, LatencyPlan)> {
    // Parsed here rather than by clap, so that a bad size is one error line like every other refusal.
    let sizes = &crate::plan::sizes::parse_size_list(&a.sizes)?;
    if sizes.is_empty() || sizes.contains(&0) {
        bail_usage!("--sizes: every message needs at least 1 byte (e.g. --sizes 8..1MiB)");
    }
    if let Some(&big) = sizes.iter().find(|&&s| s > MAX_MESSAGE) {
        bail_usage!(
            "--sizes: a ping-pong message is at most 1 GiB, not {}; measure larger sizes with sweep",
            format_size(big)
        );
    }
    if let (Some(_), Some(dst)) = (&a.peer, a.dst) {
        bail_usage!(
            "--dst {dst} names the memory of the receiver latency starts itself; with --peer, give serve its --mem"
        );
    }
    if let (Some(_), Some(src @ MemKind::Gpu(_))) = (&a.peer, a.src) {
        bail_usage!("--src {src}: GPU ↔ GPU latency runs both ends in this process; leave out --peer");
    }
    if a.iters == 0 {
        bail_usage!("--iters 0: at least one timed ping-pong per size is needed");
    }
    let src = registry::get(a.transport).ping_pong().map_or(Ok(MemKind::Host), |pp| pp.source(a.transport, a.src))?;
    let plan = LatencyPlan {
        src_gpu: match src {
            MemKind::Gpu(n) => Some(n),
            _ => None,
        },
        iters: a.iters,
        warmup_iters: a.warmup_iters,
        busy_poll: a.busy_poll,
        inline: a.inline,
        write_with_imm: a.write_with_imm,
    };
    let knobs = super::common::checked_knobs(&a.transport_knobs(), a.transport, MemKind::Host)?;
    let cfg = RunConfig {
        transport: knobs,
        knobs: RunKnobs {
            block_size: sizes.iter().copied().max().unwrap_or(1),
            streams: 1,
            reps: a.iters,
            warmup: a.warmup_iters,
            verify: false,
            seed: 0,
            hugepages: false,
            counters: Default::default(),
            numa: Default::default(),
            prepare: None,
        },
        block_size_default: false,
        src_mem: src.to_string(),
        cases: sizes.iter().map(|&size_bytes| SizeCase { size_bytes, tokens: None, bytes_per_token: None }).collect(),
        paged: None,
    };
    ping_pong_of(&cfg)?.check(&plan)?;
    Ok((cfg, plan))
}

/// Connect, run every size, print a row per size and keep the results file current.
fn measure(
    a: &LatencyArgs,
    cfg: RunConfig,
    plan: LatencyPlan,
    peer: &str,
    token: &str,
    (timeouts, device): (Timeouts, DeviceChoice),
    role: Role,
) -> Result<()> {
    // The receiver this command started answers from a thread of this process, which splits the CPUs alike.
    let in_process = role == Role::Sweep && !registry::get(a.transport).receiver_in_own_process();
    let cpus = if in_process { split_ping_pong(PingPongEnd::Pinger)? } else { None };
    let mut ch = ControlChannel::connect(peer, timeouts)?;
    let receiver_host = client_hello(&mut ch, token)?;
    let (Some(peer_addr), Some(local)) = (ch.peer_addr(), ch.local_addr()) else {
        bail!("the control connection to {peer} closed during the handshake");
    };
    let ctx = Context {
        peer_ip: peer_addr.ip(),
        local_ip: local.ip(),
        timeouts,
        device,
        shares_process: role == Role::Sweep,
        session_key: ch.session_key(),
    };
    let mut session = LatencySession::establish(ch, cfg.clone(), plan, &ctx)?;
    // Said once both ends are up: a refusal while connecting stays the one line on stderr.
    if let Some(c) = &cpus {
        let several = if c.responder.contains([',', '-']) { "CPUs" } else { "CPU" };
        crate::noteln!(
            "ping-pong: this end on CPU {}, the receiver on {several} {} (kept apart)",
            c.pinger,
            c.responder
        );
    }
    let label = a.label.clone().unwrap_or_else(|| format!("{} latency → {receiver_host}", cfg.transport.kind()));
    let shown_peer = if role == Role::Sweep { "loopback" } else { peer };
    let detail = serde_json::json!({ "sender": session.describe() });
    let mut config = super::common::results_config(&cfg, None, shown_peer, role, session.dst_mem.clone(), detail);
    config.mode = Some("latency".into());
    config.ping_pong_cpus = cpus;
    let mut results = Results::new(label, &Env::capture(), config);
    crate::outln!("{}", header());
    let outcome = (0..cfg.cases.len()).try_for_each(|case| {
        let samples = session.measure(case)?;
        let result = case_result(&cfg, &samples);
        crate::outln!("{}", row(&result, &samples));
        results.cases.push(result);
        save(a, &results)
    });
    let outcome = outcome.and_then(|()| session.finish());
    results.complete = outcome.is_ok();
    results.error = outcome.as_ref().err().map(|e| format!("{e:#}"));
    save(a, &results)?;
    // The page is written even when nothing completed: it says so, where --fig would have nothing to draw.
    if let Some(page) = &a.html {
        crate::export::html::write_run(page, &results, &[], crate::transport::registry::NOTES)?;
    }
    if let (Some(dir), false) = (&a.fig, results.cases.is_empty()) {
        crate::export::plot::draw_series(
            &[(results.label.clone(), results)],
            &mut crate::export::plot::Sink::Dir(dir),
            &[],
        )?;
    }
    outcome
}

fn save(a: &LatencyArgs, results: &Results) -> Result<()> {
    match &a.json {
        Some(path) => crate::export::write_atomic(path, &results.to_json()?),
        None => Ok(()),
    }
}

/// A size's quantiles of the half round trip, µs.
#[derive(Debug, Clone, Copy, Serialize)]
struct LatencyUs {
    min: f64,
    p50: f64,
    p90: f64,
    p99: f64,
    p999: f64,
    max: f64,
    mean: f64,
}

impl LatencyUs {
    /// From an HDR histogram of the samples (ns, three significant digits), as ib_write_lat and sockperf report.
    fn of(half_rtt_ns: &[f64]) -> LatencyUs {
        // 1 ns to an hour: a stall far past any --io-timeout is still recorded as itself.
        let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3)
            .expect("bounds and precision are valid");
        for &ns in half_rtt_ns {
            h.saturating_record(ns.round().max(1.0) as u64);
        }
        let us = |ns: f64| ns.round() / 1e3;
        let q = |q: f64| us(h.value_at_quantile(q) as f64);
        LatencyUs {
            min: us(h.min() as f64),
            p50: q(0.5),
            p90: q(0.9),
            p99: q(0.99),
            p999: q(0.999),
            max: us(h.max() as f64),
            mean: us(h.mean()),
        }
    }
}

/// The results case of one size: each timed ping-pong a rep (its transfer the half round trip, its total the
/// whole), and the quantiles and iteration count besides.
fn case_result(cfg: &RunConfig, s: &LatencySamples) -> CaseResult {
    let reps = s
        .half_rtt_ns
        .iter()
        .enumerate()
        .map(|(i, &ns)| RepRecord {
            i: i as u32,
            transfer_ms: ns / 1e6,
            gbps: s.size_bytes as f64 / ns,
            setup_ms: 0.0,
            notify_ms: 0.0,
            total_ms: 2.0 * ns / 1e6,
            mismatched_bytes: None,
            counters: None,
            shared_runs: None,
            bidir: None,
            extras: Fields::new(),
            sender: Default::default(),
            receiver: Default::default(),
        })
        .collect();
    let rec = CaseRecord {
        index: s.case,
        case: cfg.cases[s.case],
        transport: cfg.transport.kind(),
        block_size: s.size_bytes,
        block_clamped: false,
        writes: 1,
        layout: Default::default(),
        pieces: 1,
        reps,
        warmups: Vec::new(),
        block_latency_us: hdrhistogram::Histogram::new(3).expect("3 significant digits is a valid precision"),
        paced: None,
    };
    let mut result = CaseResult::from_record(&rec, false);
    let latency = Json::of(&LatencyUs::of(&s.half_rtt_ns)).expect("plain numbers serialize");
    result.extras.insert("latency_us", latency);
    result.extras.insert("iters", Json::of(&s.half_rtt_ns.len()).expect("a count serializes"));
    result
}

fn header() -> String {
    format!(
        "{:>9} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}   (µs, half round trip)",
        "size", "iters", "min", "p50", "p90", "p99", "p99.9", "max"
    )
}

fn row(r: &CaseResult, s: &LatencySamples) -> String {
    let l = LatencyUs::of(&s.half_rtt_ns);
    format!(
        "{:>9} {:>7} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
        format_size(r.size_bytes),
        s.half_rtt_ns.len(),
        l.min,
        l.p50,
        l.p90,
        l.p99,
        l.p999,
        l.max
    )
}
