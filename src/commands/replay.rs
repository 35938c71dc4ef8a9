//! `kvxfer replay`: a request stream's KV transfers, each request due at its scheduled arrival, moved over
//! `--max-inflight` sessions against receivers started in this process on loopback (as `sweep` does) or a
//! `kvxfer serve` named by `--peer`. Each load (a speed of the trace, or a rate of the arrival model) runs the
//! stream once per repetition, loads interleaved; the results file is a results v1 file whose `config.mode` is
//! `replay`, with a `replay` section holding every request and each load's summary.

mod paged;
mod workload;

use super::common::{self, check_host_support, results_config};
use super::loopback::loopback_receiver;
use super::send::connect;
use crate::bail_usage;
use crate::cli::ReplayArgs;
use crate::env::Env;
use crate::export::json::{Results, Role};
use crate::mem::MemKind;
use crate::plan::sizes::format_size;
use crate::plan::{RunConfig, SizeCase};
use crate::run::receiver::ReceiverLimits;
use crate::run::replay::{self as driver, Layerwise, LoadRun, Mode, PagedPool, PoolUse, RequestRecord, Scheduled};
use crate::run::sender::SenderSession;
use crate::stats::queueing::{simulate_pooled, SimPool};
use crate::stats::replay::{
    knee, load_words, CeilingJson, LatencyFrom, LayerwiseJson, LoadJson, LoadSummary, PooledJson, PredictedJson,
    PredictionBasis, ReplayJson,
};
use anyhow::{Context as _, Result};
use std::path::PathBuf;
use std::sync::Mutex;
use std::thread::JoinHandle;
use workload::Job;

/// The region when `--region` gives none: the largest request, at most this (larger ones move in pieces).
pub(super) const DEFAULT_MAX_REGION: u64 = 4 << 30;
/// Most reps one request may take: past it, `--region` is a typo (a 17 GiB request in 1-byte pieces would take
/// days of control round trips).
const MAX_PIECES_PER_REQUEST: u64 = 10_000;
/// Reps of the region measured for the path's ceiling when `--ceiling` gives none.
const CEILING_REPS: u32 = 3;

pub fn run(a: ReplayArgs) -> Result<()> {
    let job = workload::job(&a)?;
    let cfg = run_config(&a, &job)?;
    let layerwise = layerwise(&a, &job)?;
    let pool = paged::pool(&a, &cfg, &job)?;
    for (flag, path) in [("--json", &a.json), ("--csv", &a.csv), ("--md", &a.md), ("--html", &a.html)] {
        if let Some(p) = path {
            crate::export::check_writable(flag, p)?;
        }
    }
    if let Some(dir) = &a.fig {
        crate::export::plot::prepare_dir(dir)?;
    }
    let (device, peer_device) = common::loopback_devices(&a.device, &a.peer_device)?;
    if a.peer.is_none() {
        check_host_support(&cfg, &[("--src", a.src), ("--dst", a.dst)], &[&device, &peer_device])?;
    } else {
        check_host_support(&cfg, &[("--src", a.src)], &[&device])?;
    }
    // Every session holds a region at each end; both ends are this host's unless --peer.
    let ends = if a.peer.is_none() { vec![a.src, a.dst] } else { vec![a.src] };
    let kinds: Vec<MemKind> = ends.iter().flat_map(|k| std::iter::repeat_n(*k, a.max_inflight as usize)).collect();
    let fix = match &cfg.paged {
        None => format!(
            "the region is {} per end and session ({} session(s)); give a smaller --region (larger requests move in pieces) or a smaller --max-inflight",
            format_size(region_of(&cfg)),
            a.max_inflight
        ),
        Some(p) => format!(
            "the pool is {} per end and session ({} session(s)); give a smaller --pool-tokens (at least the largest request, {} tokens) or a smaller --max-inflight",
            format_size(p.pool_bytes()),
            a.max_inflight,
            cfg.cases[0].tokens.unwrap_or(0)
        ),
    };
    common::check_memory_or(&cfg, &kinds, &fix)?;
    crate::run::pace::stop_softly_on_signal();
    let timeouts = crate::control::Timeouts { connect: a.run.connect_timeout, io: a.run.io_timeout };
    let mut receivers: Vec<JoinHandle<Result<()>>> = Vec::new();
    let mut sessions = Vec::new();
    let shares_process =
        a.peer.is_none() && !crate::transport::registry::get(cfg.transport.kind()).receiver_in_own_process();
    let mut receiver_host = String::new();
    for _ in 0..a.max_inflight {
        let (addr, token) = match &a.peer {
            Some(p) => (p.clone(), a.token.clone().unwrap_or_default()),
            None => {
                let limits = ReceiverLimits {
                    max_size: None,
                    max_streams: 64,
                    timeouts,
                    mem: a.dst,
                    device: peer_device.clone(),
                    shares_process,
                    gauge: None,
                };
                let (addr, token, receiver) = loopback_receiver(limits, cfg.transport.kind())?;
                receivers.push(receiver);
                (addr.to_string(), token)
            }
        };
        let (session, host) = connect(&addr, &token, timeouts, &device, &cfg, a.src, shares_process)?;
        receiver_host = host;
        sessions.push(session);
    }
    // Named only now, so that a run that never connected leaves no empty results file behind.
    let mode = match (layerwise, pool) {
        (Some(l), _) => Mode::Layerwise(l),
        (None, Some(p)) => Mode::Paged(p),
        (None, None) => Mode::Whole,
    };
    let outcome =
        results_path(&a).and_then(|json| replay(&a, (&job, &mode), &cfg, &mut sessions, &json, &receiver_host));
    let closed: Vec<Result<()>> = sessions.into_iter().map(|s| s.close(&Ok(()))).collect();
    let receivers: Vec<Result<()>> = receivers
        .into_iter()
        .map(|r| r.join().unwrap_or_else(|_| Err(anyhow::anyhow!("a receiver thread panicked"))))
        .collect();
    outcome?;
    closed.into_iter().chain(receivers).collect::<Result<Vec<()>>>().context("closing the replay's sessions")?;
    super::pace::exit_if_stopped();
    Ok(())
}

/// The configuration every session agrees with its receiver: one case, the region.
fn run_config(a: &ReplayArgs, job: &Job) -> Result<RunConfig> {
    if a.warmup_given {
        bail_usage!("--warmup: a replay warms up with whole requests; use --warmup-requests N");
    }
    if a.max_inflight == 0 || a.max_inflight > 64 {
        bail_usage!("--max-inflight {}: give 1 to 64 sessions", a.max_inflight);
    }
    if let Some(c) = a.ceiling.filter(|c| !(c.is_finite() && *c > 0.0)) {
        bail_usage!("--ceiling {c}: give the path's ceiling in GB/s, above 0");
    }
    if let Some(s) = a.slo_ms.filter(|s| !(s.is_finite() && *s > 0.0)) {
        bail_usage!("--slo-ms {s}: give a latency target in ms, above 0");
    }
    if a.run.paged.layout == crate::plan::paged::Layout::Paged {
        return paged::run_config(a, job);
    }
    let largest = job.largest_bytes();
    let region = checked_region(a.region, largest, || default_region(a, largest))?;
    let sizes = crate::cli::SizeArgs {
        sizes: Some(crate::plan::sizes::SizeList(vec![region])),
        tokens: None,
        model: None,
        model_config: None,
        kv_bytes_per_token: None,
    };
    let mut run = a.run.clone();
    run.reps = 1;
    let configured = common::configure(&sizes, &run, &[a.src, a.dst])?;
    let mut cfg = configured.cfg;
    cfg.cases = vec![SizeCase { size_bytes: region, tokens: None, bytes_per_token: Some(job.bytes_per_token) }];
    Ok(cfg)
}

/// `--layerwise --prefill-tokens-per-s N`: the model's layers and the prefill's rate, both flags or neither.
fn layerwise(a: &ReplayArgs, job: &Job) -> Result<Option<Layerwise>> {
    let tokens_per_s = match (a.layerwise, a.prefill_tokens_per_s) {
        (false, None) => return Ok(None),
        (true, Some(n)) => n,
        (true, None) => bail_usage!("--layerwise needs --prefill-tokens-per-s N: how fast prefill computes the layers"),
        (false, Some(_)) => bail_usage!("--prefill-tokens-per-s applies to --layerwise; add --layerwise or drop it"),
    };
    let Some(layers) = job.layers else {
        bail_usage!(
            "--layerwise needs the model's layer count: give --model or --model-config instead of --kv-bytes-per-token"
        );
    };
    let layers = u32::try_from(layers).ok().filter(|l| *l > 0);
    let Some(layers) = layers else {
        bail_usage!("--layerwise: the model's config gives no usable layer count; give --model NAME");
    };
    Ok(Some(Layerwise { layers, tokens_per_s, bytes_per_token: job.bytes_per_token }))
}

/// The results file: `--json`, or a new file in `--out-dir`.
fn results_path(a: &ReplayArgs) -> Result<PathBuf> {
    match &a.json {
        Some(p) => Ok(p.clone()),
        None => {
            std::fs::create_dir_all(&a.out_dir)
                .map_err(|e| crate::error::usage(format!("--out-dir {}: cannot create: {e}", a.out_dir.display())))?;
            crate::export::files::create_unique(&a.out_dir, "replay", "json")
        }
    }
}

/// Measure the ceiling, warm up, run every load of every repetition, and write the files as loads complete.
fn replay(
    a: &ReplayArgs,
    (job, mode): (&Job, &Mode),
    cfg: &RunConfig,
    sessions: &mut [SenderSession],
    json: &std::path::Path,
    receiver_host: &str,
) -> Result<()> {
    let paged_pool = mode.paged();
    // A paged replay's requests go whole into the pool (each session's buffer); its ceiling moves the largest.
    let region = if paged_pool.is_some() { cfg.buffer_bytes() } else { cfg.cases[0].size_bytes };
    let mut seqs = vec![0u32; sessions.len()];
    // Warm up first: an engine's first transfers are slow, and the ceiling is the warm path's.
    warm_up(job, sessions, &mut seqs, (region, paged_pool), a.warmup_requests)?;
    let ceiling = ceiling(a, &mut sessions[0], &mut seqs[0], (cfg.cases[0].size_bytes, paged_pool))?;
    let label = a
        .run
        .label
        .clone()
        .unwrap_or_else(|| format!("{} replay {}→{} on {receiver_host}", cfg.transport.kind(), a.src, a.dst));
    let detail = serde_json::json!({ "sender": sessions[0].transport_detail.to_json() });
    let peer = a.peer.as_deref().unwrap_or("loopback");
    let role = if a.peer.is_some() { Role::Send } else { Role::Sweep };
    let mut config = results_config(cfg, job.model.clone(), peer, role, sessions[0].dst_mem.clone(), detail);
    config.mode = Some("replay".into());
    let mut results = Results::new(label, &Env::capture(), config);
    let mut section = section(a, (job, mode), cfg, region, ceiling);
    if cfg.knobs.verify {
        crate::noteln!("--verify: each request's service time includes filling and checking its pattern; replay without it for timing");
    }
    let repeats = if a.reps_given { a.run.reps } else { 1 };
    let loads = job.loads();
    let total = repeats as usize * loads.len();
    crate::outln!("{}", table_header(job.load_unit()));
    let mut outcome = Ok(());
    let mut warned = false;
    'runs: for repeat in 0..repeats {
        for (k, &load) in loads.iter().enumerate() {
            let schedule = job.schedule(load)?;
            let step = repeat as usize * loads.len() + k + 1;
            let run = run_one(sessions, &mut seqs, (&schedule, mode), region, a, (step, total, load, job.load_unit()));
            let run = match run {
                Ok(r) => r,
                Err(e) => {
                    outcome = Err(e);
                    break 'runs;
                }
            };
            let ceiling_gbps = section.ceiling.as_ref().map(|c| c.gbps);
            let summary = LoadSummary::of(&run, &schedule, ceiling_gbps, a.slo_ms);
            crate::outln!("{}", table_row(load, repeat, &summary));
            if let Some(p) = &summary.pool {
                crate::outln!("{}", paged::pool_line(p));
            }
            warn_above_ceiling(
                &mut warned,
                (load, job.load_unit()),
                a.max_inflight,
                &summary,
                section.ceiling.as_ref(),
            );
            let stopped = matches!(run.cutoff, Some(driver::Cutoff::Interrupted));
            section.loads.push(LoadJson { load, repeat, summary, requests: run.records, cluster: None });
            pool(&mut section, &loads, &job_schedules(job, &loads)?, a.slo_ms);
            results.replay = Some(section.clone());
            crate::export::write_atomic(json, &results.to_json()?)?;
            if stopped {
                break 'runs;
            }
        }
    }
    if let Some(k) = &section.knee {
        crate::outln!("knee: {} ({})", load_words(k.load, job.load_unit()), k.why);
    }
    if outcome.is_ok() {
        outcome = verified(&mut section);
    }
    results.complete = outcome.is_ok() && crate::run::pace::stopped_by().is_none();
    results.error = outcome.as_ref().err().map(|e| format!("{e:#}"));
    results.replay = Some(section.clone());
    crate::export::write_atomic(json, &results.to_json()?)?;
    crate::errln!("results: {}", json.display());
    write_side_files(a, &section)?;
    if let Some(dir) = &a.fig {
        crate::export::plot::draw_replays(&[(String::new(), &section)], &mut crate::export::plot::Sink::Dir(dir))?;
    }
    if let Some(page) = &a.html {
        crate::export::html::write_run(page, &results, &[], crate::transport::registry::NOTES)?;
    }
    outcome
}

/// Fail the run when `--verify` found mismatched bytes in any request, as `sweep` fails a case: a replay that
/// moved wrong bytes must not exit 0 with the count buried in its files. Requests whose bytes the receiver
/// reported no check of are counted in `unchecked_requests` and said in a warning: the run is not verified in full.
pub(super) fn verified(section: &mut ReplayJson) -> Result<()> {
    let requests = || section.loads.iter().flat_map(|l| &l.requests);
    let unchecked = requests().filter(|r| r.bytes > 0 && r.mismatched_bytes.is_none()).count() as u64;
    if section.verify_in_latency && unchecked > 0 {
        crate::errln!(
            "warning: {unchecked} request(s) came back without the receiver's check of their bytes (no mismatch count): the replay is not verified in full"
        );
        section.unchecked_requests = Some(unchecked);
    }
    let bad: Vec<&RequestRecord> = requests().filter(|r| r.mismatched_bytes.is_some_and(|m| m > 0)).collect();
    if bad.is_empty() {
        return Ok(());
    }
    let bytes = bad.iter().filter_map(|r| r.mismatched_bytes).fold(0u64, u64::saturating_add);
    anyhow::bail!(
        "verification failed: {bytes} mismatched bytes in {} request(s), the first request {} (the results file records which)",
        bad.len(),
        bad[0].id
    )
}

/// The results' `replay` section before any load ran, said on stderr where a mode changes what is measured.
fn section(
    a: &ReplayArgs,
    (job, mode): (&Job, &Mode),
    cfg: &RunConfig,
    region: u64,
    ceiling: Option<CeilingJson>,
) -> ReplayJson {
    let layerwise = mode.layerwise();
    let section = ReplayJson {
        workload: job.describe(),
        load_unit: job.load_unit().into(),
        latency: if layerwise.is_some() { LatencyFrom::PrefillEnd } else { LatencyFrom::Arrival },
        max_inflight: a.max_inflight,
        region_bytes: region,
        max_backlog_s: a.max_backlog.as_secs_f64(),
        warmup_requests: a.warmup_requests,
        verify_in_latency: cfg.knobs.verify,
        ceiling,
        loads: Vec::new(),
        pooled: Vec::new(),
        knee: None,
        layerwise: layerwise.map(|l| LayerwiseJson { layers: l.layers.into(), prefill_tokens_per_s: l.tokens_per_s }),
        cluster: None,
        pool: cfg.paged.as_ref().zip(mode.paged()).map(|(c, p)| paged::describe(c, p)),
        unchecked_requests: None,
    };
    if let Some(l) = layerwise {
        crate::noteln!(
            "layer-wise: {} layers, prefill at {} tokens/s; latency = {}",
            l.layers,
            l.tokens_per_s,
            section.latency.words()
        );
    }
    section
}

/// Say once when a load moved more than the measured ceiling: the ceiling's few reps were slow, or, with several
/// sessions, they moved more together than the one session it was measured on; every utilization is then
/// overstated.
fn warn_above_ceiling(
    warned: &mut bool,
    load: (f64, &str),
    sessions: u32,
    s: &LoadSummary,
    ceiling: Option<&CeilingJson>,
) {
    let (Some(u), Some(c)) = (s.utilization, ceiling) else { return };
    if *warned || u <= 1.05 || c.source != "measured" {
        return;
    }
    *warned = true;
    let why = if sessions > 1 {
        format!("it was measured on one session and {sessions} sessions moved more together")
    } else {
        "that measurement was low".to_string()
    };
    crate::noteln!(
        "{} moved {:.2} GB/s, {:.0}% of the {:.2} GB/s ceiling measured before the replay: {why}, so utilizations \
         are overstated; give the path's ceiling with --ceiling GB/s",
        load_words(load.0, load.1),
        s.achieved_gbps.unwrap_or(0.0),
        u * 100.0,
        c.gbps
    );
}

/// The receiver's region: `--region` (at most the largest request), else `default`; refused when there is nothing
/// to move, or when the largest request would take more than [`MAX_PIECES_PER_REQUEST`] reps.
pub(super) fn checked_region(given: Option<u64>, largest: u64, default: impl FnOnce() -> u64) -> Result<u64> {
    if largest == 0 {
        bail_usage!("every request of this workload is held by the prefix cache: nothing to move");
    }
    let region = match given {
        Some(0) => bail_usage!("--region 0: the receiver's region needs at least 1 byte"),
        Some(r) => r.min(largest),
        None => default(),
    };
    let pieces = largest.div_ceil(region);
    if pieces > MAX_PIECES_PER_REQUEST {
        bail_usage!(
            "--region {}: the largest request ({}) would move in {pieces} pieces, a control round trip each; give a region of at least {}",
            format_size(region),
            format_size(largest),
            format_size(largest.div_ceil(MAX_PIECES_PER_REQUEST))
        );
    }
    Ok(region)
}

/// The region when `--region` gives none: the largest request, at most 4 GiB, and at most what lets every
/// session's region at each end of this host fit in half of its available memory (a power of two, at least 64 MiB:
/// the memory check then names what does not fit).
fn default_region(a: &ReplayArgs, largest: u64) -> u64 {
    let region = largest.min(DEFAULT_MAX_REGION);
    let Some(per) = room_per_buffer(a) else { return region };
    let fits = if per == 0 { 0 } else { 1u64 << per.ilog2() };
    if region <= fits {
        return region;
    }
    let capped = fits.max(64 << 20).min(region);
    crate::noteln!(
        "region: {} per end and session (the largest request is {}; {} session(s) of {} fit in half of this host's available memory); --region to choose",
        format_size(capped),
        format_size(largest),
        a.max_inflight,
        format_size(capped)
    );
    capped
}

/// Bytes each host buffer may take (one per end in host memory and session) for all of them to fit in half of this
/// host's available memory; None where that is unknown.
fn room_per_buffer(a: &ReplayArgs) -> Option<u64> {
    let ends = [Some(a.src), a.peer.is_none().then_some(a.dst)];
    let host_buffers = ends.iter().flatten().filter(|k| !matches!(k, MemKind::Gpu(_))).count() as u64;
    let room = crate::env::memory::headroom(crate::env::sysroot::SysRoot::get())?;
    Some(room.bytes / 2 / (host_buffers * u64::from(a.max_inflight)).max(1))
}

/// The receiver's region: the run's one case.
fn region_of(cfg: &RunConfig) -> u64 {
    cfg.cases[0].size_bytes
}

/// Every load's schedule (for the offered rates of the pooled summaries).
fn job_schedules(job: &Job, loads: &[f64]) -> Result<Vec<Vec<Scheduled>>> {
    loads.iter().map(|&l| job.schedule(l)).collect()
}

/// Pool each load's repetitions into one summary and find the knee over them.
pub(super) fn pool(section: &mut ReplayJson, loads: &[f64], schedules: &[Vec<Scheduled>], slo_ms: Option<f64>) {
    let ceiling = section.ceiling.as_ref().map(|c| c.gbps);
    section.pooled = loads
        .iter()
        .zip(schedules)
        .filter_map(|(&load, schedule)| {
            let runs: Vec<&LoadJson> = section.loads.iter().filter(|l| l.load == load).collect();
            if runs.is_empty() {
                return None;
            }
            let records: Vec<RequestRecord> = runs.iter().flat_map(|l| l.requests.iter().cloned()).collect();
            let wall_ms = runs.iter().map(|l| l.requests.iter().map(|r| r.end_ms).fold(0.0, f64::max)).sum();
            let cutoff = runs.iter().find_map(|l| l.summary.cutoff);
            let not_started = runs.iter().map(|l| l.summary.not_started).sum();
            let pool = runs.iter().filter_map(|l| l.summary.pool.as_ref()).fold(None, |most: Option<PoolUse>, p| {
                let high = most.map_or(0, |m| m.high_water_blocks).max(p.high_water_blocks);
                Some(PoolUse { blocks: p.blocks, high_water_blocks: high })
            });
            let pooled = LoadRun { records, cutoff, not_started, wall_ms, pool };
            let repeated: Vec<Scheduled> = runs.iter().flat_map(|_| schedule.iter().copied()).collect();
            let mut summary = LoadSummary::of(&pooled, schedule, ceiling, slo_ms);
            summary.achieved_rps = LoadSummary::of(&pooled, &repeated, ceiling, slo_ms).achieved_rps;
            let predicted = predicted(section, schedule, &summary);
            Some(PooledJson { load, summary, predicted })
        })
        .collect();
    let points: Vec<(f64, &LoadSummary)> = section.pooled.iter().map(|p| (p.load, &p.summary)).collect();
    section.knee = knee(&points);
}

/// The load's p50 and p99 as a queueing simulation over the measured ceiling (and a paged replay's pool) predicts
/// them, and ÷ the measured.
fn predicted(section: &ReplayJson, schedule: &[Scheduled], measured: &LoadSummary) -> Option<PredictedJson> {
    // The simulation has no prefill: it predicts arrival-based latency, which a layer-wise run does not report.
    if section.layerwise.is_some() {
        return None;
    }
    let gbps = section.ceiling.as_ref()?.gbps;
    let region = section.region_bytes as f64;
    let curve = crate::stats::queueing::Curve::new(&[(region, region / (gbps * 1e6))])?;
    let pool = section.pool.as_ref().and_then(|p| {
        let bytes_per_token = p.bytes_per_token?;
        let (blocks, block_tokens, decode_ms_per_token) = (p.blocks, p.block_tokens, p.decode_ms_per_token);
        Some(SimPool { blocks, block_tokens, bytes_per_token, decode_ms_per_token })
    });
    let run = simulate_pooled(schedule, section.max_inflight, |b| curve.service_ms(b).0, pool);
    let (p, m) = (LoadSummary::of(&run, schedule, None, None).latency_ms?, measured.latency_ms?);
    Some(PredictedJson {
        basis: if pool.is_some() { PredictionBasis::CeilingAndPool } else { PredictionBasis::Ceiling },
        p50_ms: p.p50,
        p99_ms: p.p99,
        p50_ratio: p.p50 / m.p50,
        p99_ratio: p.p99 / m.p99,
    })
}

/// Run one load, with a progress line (requests done, backlog, ETA).
fn run_one(
    sessions: &mut [SenderSession],
    seqs: &mut [u32],
    (schedule, mode): (&[Scheduled], &Mode),
    region: u64,
    a: &ReplayArgs,
    (step, total, load, unit): (usize, usize, f64, &str),
) -> Result<LoadRun> {
    let what = format!("load {step}/{total}: {}, {} requests", load_words(load, unit), schedule.len());
    let progress = Mutex::new(crate::output::progress::StepProgress::new(schedule.len(), &what));
    let report = |r: &RequestRecord, done: usize, backlog_s: f64| {
        let msg = format!("{what}; request {} took {:.1} ms, backlog {backlog_s:.1} s", r.id, r.reported_latency_ms());
        progress.lock().unwrap_or_else(|p| p.into_inner()).update(done, &msg);
    };
    let stop = || crate::run::pace::stopped_by().is_some();
    let limits = driver::Limits { max_backlog: a.max_backlog, progress: &report, stop: &stop };
    let run = driver::run_load_with(sessions, seqs, schedule, region, &limits, mode.clone());
    progress.lock().unwrap_or_else(|p| p.into_inner()).finish();
    run
}

/// The path's ceiling: `--ceiling`, or the median of reps of the region (paged: of the largest request, into
/// the pool's first free blocks).
fn ceiling(
    a: &ReplayArgs,
    session: &mut SenderSession,
    seq: &mut u32,
    (region, pool): (u64, Option<&PagedPool>),
) -> Result<Option<CeilingJson>> {
    if let Some(gbps) = a.ceiling {
        return Ok(Some(CeilingJson { gbps, source: "given".into(), size_bytes: None }));
    }
    let mut gbps = Vec::new();
    for _ in 0..CEILING_REPS {
        let rep = match pool {
            Some(p) => paged::rep(session, seq, p, region)?,
            None => {
                let rep = session.rep_of_size(region, *seq)?;
                *seq = seq.wrapping_add(1);
                rep
            }
        };
        gbps.push(rep.gbps);
    }
    gbps.sort_by(f64::total_cmp);
    let median = gbps[gbps.len() / 2];
    crate::noteln!(
        "ceiling: {median:.2} GB/s (median of {CEILING_REPS} reps of {}; --ceiling to give it)",
        format_size(region)
    );
    Ok(Some(CeilingJson { gbps: median, source: "measured".into(), size_bytes: Some(region) }))
}

/// Move the stream's first `n` requests before any clock starts, spread over the sessions (each moves at least
/// one when there are any).
fn warm_up(
    job: &Job,
    sessions: &mut [SenderSession],
    seqs: &mut [u32],
    (region, pool): (u64, Option<&PagedPool>),
    n: u64,
) -> Result<()> {
    let bytes = job.warmup_bytes(n);
    if bytes.is_empty() {
        return Ok(());
    }
    let lanes = sessions.len();
    for (i, lane) in (0..lanes.max(bytes.len())).map(|i| (i, i % lanes)) {
        let b = bytes[i % bytes.len()];
        match pool {
            Some(p) => {
                paged::rep(&mut sessions[lane], &mut seqs[lane], p, b)?;
            }
            None => {
                driver::move_bytes(&mut sessions[lane], b, region, &mut seqs[lane], None)?;
            }
        }
    }
    Ok(())
}

fn fmt_load(load: f64) -> String {
    format!("{load}")
}

pub(super) fn table_header(unit: &str) -> String {
    format!(
        "{unit:>7} {:>3} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>6}  {}",
        "rep", "requests", "offer GB/s", "got GB/s", "p50 ms", "p90 ms", "p99 ms", "max ms", "queue p99", "util", ""
    )
}

pub(super) fn table_row(load: f64, repeat: u32, s: &LoadSummary) -> String {
    let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
    let l = s.latency_ms;
    let note = match (s.saturated, s.cutoff) {
        (true, _) => "saturated (backlog > --max-backlog)".to_string(),
        (false, Some(_)) => "interrupted".to_string(),
        _ => String::new(),
    };
    format!(
        "{:>7} {:>3} {:>8} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>6}  {}",
        fmt_load(load),
        repeat,
        s.requests,
        f(s.offered_gbps),
        f(s.achieved_gbps),
        f(l.map(|q| q.p50)),
        f(l.map(|q| q.p90)),
        f(l.map(|q| q.p99)),
        f(l.map(|q| q.max)),
        f(s.queue_ms.map(|q| q.p99)),
        s.utilization.map_or("-".to_string(), |u| format!("{:.0}%", u * 100.0)),
        note
    )
}

/// `--csv` (one row per request) and `--md` (the pooled summary per load).
fn write_side_files(a: &ReplayArgs, section: &ReplayJson) -> Result<()> {
    if let Some(path) = &a.csv {
        crate::export::write_atomic(path, &crate::export::replay::requests_csv(section)?)?;
    }
    if let Some(path) = &a.md {
        crate::export::write_atomic(path, crate::export::replay::summary_markdown(section).as_bytes())?;
    }
    Ok(())
}
