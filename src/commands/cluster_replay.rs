//! `kvxfer cluster --pattern replay`: a request stream over the ranks of a cluster, as an xPyD deployment moves it.
//! Every rank computes the same schedule from the same workload flags (a trace every rank reads, or a seeded
//! arrival model) and the same routes (`cluster::route`): request i is sent by the (i mod P)-th prefill rank to the
//! decode rank `--route` picks. Each prefill rank holds one session per decode rank it sends to and serves each
//! link's requests open-loop at their scheduled times (`run::replay`), all links of all ranks starting their clocks
//! at one barrier; the decode ranks receive in the background like every cluster rank. After each load rank 0
//! gathers every request's record and writes the results: the `replay` section of `kvxfer replay`, with each
//! request's `src` and `dst` and each load's per-link and per-rank summaries.
//!
//! Every rank reads the trace itself rather than rank 0 sending it: the schedule is then computed exactly as a
//! single-node replay computes it, with no size limit on the wire, and a rank that read something else is caught
//! by comparing digests of the routed schedule before the first load.

mod record;

use super::common::{self, Configured};
use super::replay::DEFAULT_MAX_REGION;
use super::send::connect;
use super::workload::{self, Job, KvFlags};
use crate::bail_usage;
use crate::cli::{ClusterArgs, SizeArgs};
use crate::cluster::route::{self, Link, Route};
use crate::cluster::{Group, Member, Pattern};
use crate::control::Timeouts;
use crate::measure::Json;
use crate::mem::MemKind;
use crate::plan::{RunConfig, SizeCase};
use crate::run::replay::{self as driver, Cutoff, LoadRun, RequestRecord, Scheduled};
use crate::run::sender::SenderSession;
use crate::transport::DeviceChoice;
use anyhow::{anyhow, Result};
pub use record::{Recorder, Start};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Records per gathering message: a record is a few hundred bytes of JSON, and a message at most 1 MiB.
const RECORDS_PER_MESSAGE: usize = 1500;

/// One load: its schedule and each request's link, in schedule order.
pub struct Load {
    pub load: f64,
    pub schedule: Vec<Scheduled>,
    pub routes: Vec<Link>,
}

/// What every rank computes alike from the flags, before the ranks meet.
pub struct ReplayPlan {
    pub job: Job,
    pub prefill: Vec<usize>,
    pub decode: Vec<usize>,
    pub route: Route,
    pub region: u64,
    pub loads: Vec<Load>,
    /// Every link that carries a request at some load, in order: each is one session.
    pub links: Vec<Link>,
    pub max_backlog: Duration,
    pub warmup_requests: u64,
    pub slo_ms: Option<f64>,
}

/// The replay of `a`, checked against `world_size`; None for another pattern (after refusing replay's flags).
pub fn plan(a: &ClusterArgs, world_size: usize) -> Result<Option<ReplayPlan>> {
    let r = &a.replay;
    if a.pattern != Pattern::Replay {
        if let Some(flag) = r.first_given() {
            bail_usage!(
                "{flag} belongs to --pattern replay; add --pattern replay, or drop {flag} for --pattern {}",
                a.pattern
            );
        }
        return Ok(None);
    }
    let (Some(p), Some(d)) = (&r.prefill, &r.decode) else {
        let missing = if r.prefill.is_none() { "--prefill" } else { "--decode" };
        bail_usage!(
            "--pattern replay needs {missing}: name the sending and receiving ranks, e.g. --prefill 0,1 --decode 2,3"
        );
    };
    let ranks = |flag: &str, text: &str| {
        route::parse_ranks(text, world_size).map_err(|e| crate::error::usage(format!("{flag} {text}: {e}")))
    };
    let (prefill, decode) = (ranks("--prefill", p)?, ranks("--decode", d)?);
    if let Some(both) = route::overlap(&prefill, &decode) {
        bail_usage!(
            "--prefill {p} and --decode {d} both name rank {both}; a rank either sends (prefill) or receives (decode)"
        );
    }
    for (flag, given) in [("--sizes", a.sizes.sizes.is_some()), ("--tokens", a.sizes.tokens.is_some())] {
        if given {
            bail_usage!("{flag}: a replay moves its requests' bytes; drop {flag} (--model or --kv-bytes-per-token set the bytes per token)");
        }
    }
    if r.reps_given {
        bail_usage!("--reps: a cluster replay runs each load once; drop --reps (run the command again to repeat it)");
    }
    if r.warmup_given {
        bail_usage!("--warmup: a cluster replay warms each link up with whole requests; use --warmup-requests N");
    }
    if a.run.paged.layout != crate::plan::paged::Layout::Contiguous {
        bail_usage!("--layout paged: a cluster replay moves contiguous requests for now; drop --layout");
    }
    if let Some(s) = r.slo_ms.filter(|s| !(s.is_finite() && *s > 0.0)) {
        bail_usage!("--slo-ms {s}: give a latency target in ms, above 0");
    }
    let kv = KvFlags {
        model: a.sizes.model.as_deref(),
        model_config: a.sizes.model_config.as_deref(),
        kv_bytes_per_token: a.sizes.kv_bytes_per_token,
    };
    let job = workload::job(&r.workload(a.run.seed), kv)?;
    let largest = job.largest_bytes();
    // The decode ranks' region: --region, else the largest request up to 4 GiB.
    let region = super::replay::checked_region(r.region, largest, || largest.min(DEFAULT_MAX_REGION))?;
    let route = r.route.unwrap_or(Route::RoundRobin);
    let loads = job
        .loads()
        .into_iter()
        .map(|load| {
            let schedule = job.schedule(load)?;
            let routes = route::route(&schedule, &prefill, &decode, route);
            Ok(Load { load, schedule, routes })
        })
        .collect::<Result<Vec<Load>>>()?;
    let links = route::links(&loads.iter().flat_map(|l| l.routes.iter().copied()).collect::<Vec<_>>());
    Ok(Some(ReplayPlan {
        job,
        prefill,
        decode,
        route,
        region,
        loads,
        links: links.into_iter().collect(),
        max_backlog: r.max_backlog.unwrap_or(Duration::from_secs(60)),
        warmup_requests: r.warmup_requests.unwrap_or(10),
        slo_ms: r.slo_ms,
    }))
}

impl ReplayPlan {
    /// The configuration every link agrees with its decode rank: one case, the region.
    pub fn configured(&self, a: &ClusterArgs, mem: MemKind) -> Result<Configured> {
        let sizes = SizeArgs {
            sizes: Some(crate::plan::sizes::SizeList(vec![self.region])),
            tokens: None,
            model: None,
            model_config: None,
            kv_bytes_per_token: None,
        };
        let mut run = a.run.clone();
        run.reps = 1;
        let mut c = common::configure(&sizes, &run, &[mem, mem])?;
        let bpt = Some(self.job.bytes_per_token);
        c.cfg.cases = vec![SizeCase { size_bytes: self.region, tokens: None, bytes_per_token: bpt }];
        c.model = self.job.model.clone();
        Ok(c)
    }

    /// The most regions `rank` holds at once: one per link it sends or receives on.
    pub fn peak_buffers(&self, rank: usize) -> usize {
        let sends = self.links.iter().filter(|l| l.src == rank).count();
        let receives = self.links.iter().filter(|l| l.dst == rank).count();
        sends.max(receives)
    }

    /// The links `rank` sends on.
    fn links_of(&self, rank: usize) -> Vec<Link> {
        self.links.iter().filter(|l| l.src == rank).copied().collect()
    }

    /// A digest of every load's routed schedule, the same on every rank that computed the same workload.
    fn digest(&self) -> String {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for l in &self.loads {
            l.load.to_bits().hash(&mut h);
            for (s, r) in l.schedule.iter().zip(&l.routes) {
                (s.id, s.at_ms.to_bits(), s.bytes, s.cached_bytes, r.src, r.dst).hash(&mut h);
            }
        }
        format!("{:016x}", h.finish())
    }
}

/// What this rank's links need, the same for every load.
pub struct LinkJob {
    pub cfg: RunConfig,
    pub token: String,
    pub timeouts: Timeouts,
    pub device: DeviceChoice,
    pub src: MemKind,
    pub members: Vec<Member>,
}

/// A rank's word before the first load: the digest of its schedule, and whether its links connected.
#[derive(Debug, Serialize, Deserialize)]
struct Ready {
    digest: String,
    error: Option<String>,
}

/// How one link's load ended, sent to rank 0 with the first part of the rank's records.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LinkEnd {
    pub src: usize,
    pub dst: usize,
    pub cutoff: Option<Cutoff>,
    pub not_started: u64,
    pub error: Option<String>,
}

/// One gathering of a load: a rank's link ends (in the first part only) and a slice of its records.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Part {
    pub links: Vec<LinkEnd>,
    pub records: Vec<RequestRecord>,
}

/// One link's session on a prefill rank, and its rep numbering.
struct Lane {
    link: Link,
    index: u32,
    session: SenderSession,
    seq: u32,
}

/// Every rank's part of the replay: connect this rank's links and warm them up, agree that every rank computed the
/// same schedule, then each load: start together, serve this rank's links, hand the records to rank 0.
pub fn run(group: &mut Group, plan: &ReplayPlan, job: &LinkJob, mut recorder: Option<&mut Recorder>) -> Result<()> {
    let me = group.rank();
    let mut lanes: Vec<Lane> = Vec::new();
    let ready = connect_lanes(plan, job, me, &mut lanes);
    let word = Ready { digest: plan.digest(), error: ready.as_ref().err().map(|e| format!("{e:#}")) };
    if let Some(all) = group.gather(Json::of(&word)?)? {
        if let Err(e) = check_ready(&all) {
            group.abort(&format!("{e:#}"));
            return Err(e);
        }
    }
    group.barrier()?;
    for (k, load) in plan.loads.iter().enumerate() {
        let at = || format!("load {}/{}", k + 1, plan.loads.len());
        if let Some(r) = recorder.as_deref_mut() {
            r.starting(k, load);
        }
        // The clocks of every link of every rank start here, together.
        group.barrier().map_err(|e| e.context(at()))?;
        let ends = serve_links(&mut lanes, load, plan);
        let gathered = gather_load(group, plan, load, ends).map_err(|e| e.context(at()))?;
        if let (Some(r), Some(parts)) = (recorder.as_deref_mut(), gathered) {
            if let Err(e) = r.record(k, load, parts) {
                group.abort(&format!("{e:#}"));
                return Err(e.context(at()));
            }
        }
    }
    let closed: Vec<Result<()>> = lanes.into_iter().map(|l| l.session.close(&Ok(()))).collect();
    // The decode ranks keep receiving until every session closed.
    group.barrier()?;
    closed.into_iter().collect::<Result<Vec<()>>>().map(|_| ())
}

/// Open a session per link this rank sends on and move the warm-up requests over each.
fn connect_lanes(plan: &ReplayPlan, job: &LinkJob, me: usize, lanes: &mut Vec<Lane>) -> Result<()> {
    let warmup = plan.job.warmup_bytes(plan.warmup_requests);
    for link in plan.links_of(me) {
        let peer = &job.members[link.dst].addr;
        let (session, _) =
            connect(peer, &job.token, job.timeouts, &job.device, &job.cfg, job.src, true).map_err(|e| {
                e.context(format!("connecting link {}→{} to rank {} at {peer}", link.src, link.dst, link.dst))
            })?;
        let index = plan.links.iter().position(|l| *l == link).unwrap_or(0) as u32;
        let mut lane = Lane { link, index, session, seq: 0 };
        for &b in &warmup {
            driver::move_bytes(&mut lane.session, b, plan.region, &mut lane.seq, None)
                .map_err(|e| e.context(format!("warming up link {}→{}", link.src, link.dst)))?;
        }
        lanes.push(lane);
    }
    Ok(())
}

/// Rank 0: every rank computed the same schedule, and every link connected.
fn check_ready(all: &[Json]) -> Result<()> {
    let words: Vec<Ready> = all
        .iter()
        .enumerate()
        .map(|(rank, v)| v.read().map_err(|e| anyhow!("rank {rank} sent a readiness rank 0 cannot read: {e}")))
        .collect::<Result<_>>()?;
    let failed: Vec<String> =
        words.iter().enumerate().filter_map(|(r, w)| Some(format!("rank {r}: {}", w.error.as_ref()?))).collect();
    if !failed.is_empty() {
        anyhow::bail!("{}", failed.join("; "));
    }
    if let Some(r) = words.iter().position(|w| w.digest != words[0].digest) {
        bail_usage!(
            "rank {r} computed another request schedule than rank 0 (its trace file differs, or its kvxfer); give every rank the same --trace"
        );
    }
    Ok(())
}

/// This rank's links of `load`, each in its own thread over its own requests; how each ended, with its records.
fn serve_links(lanes: &mut [Lane], load: &Load, plan: &ReplayPlan) -> Vec<(LinkEnd, Vec<RequestRecord>)> {
    let nothing = |_: &RequestRecord, _: usize, _: f64| {};
    let never = || false;
    let limits = driver::Limits { max_backlog: plan.max_backlog, progress: &nothing, stop: &never };
    std::thread::scope(|scope| {
        let threads: Vec<_> = lanes
            .iter_mut()
            .map(|lane| {
                let mine: Vec<Scheduled> =
                    load.schedule.iter().zip(&load.routes).filter(|(_, r)| **r == lane.link).map(|(s, _)| *s).collect();
                let limits = &limits;
                scope.spawn(move || serve_link(lane, &mine, plan.region, limits))
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap_or_else(|_| panic!("a link thread panicked"))).collect()
    })
}

/// One link's requests of a load, each record marked with its link (and its session's lane, the link's index).
fn serve_link(
    lane: &mut Lane,
    schedule: &[Scheduled],
    region: u64,
    limits: &driver::Limits,
) -> (LinkEnd, Vec<RequestRecord>) {
    let Link { src, dst } = lane.link;
    let run = driver::run_load(
        std::slice::from_mut(&mut lane.session),
        std::slice::from_mut(&mut lane.seq),
        schedule,
        region,
        limits,
    );
    let (run, error) = match run {
        Ok(r) => (r, None),
        Err(e) => {
            let none = LoadRun {
                records: Vec::new(),
                cutoff: None,
                not_started: schedule.len() as u64,
                wall_ms: 0.0,
                pool: None,
            };
            (none, Some(format!("link {src}→{dst}: {e:#}")))
        }
    };
    let records = run
        .records
        .into_iter()
        .map(|r| RequestRecord { src: Some(src), dst: Some(dst), lane: lane.index, ..r })
        .collect();
    (LinkEnd { src, dst, cutoff: run.cutoff, not_started: run.not_started, error }, records)
}

/// Hand this rank's records of `load` to rank 0 in parts of at most [`RECORDS_PER_MESSAGE`]; every rank takes
/// part in as many gatherings as the busiest prefill rank needs (counted from the routes, so all agree). Rank 0
/// gets every rank's parts, in rank order.
fn gather_load(
    group: &mut Group,
    plan: &ReplayPlan,
    load: &Load,
    ends: Vec<(LinkEnd, Vec<RequestRecord>)>,
) -> Result<Option<Vec<Part>>> {
    let busiest = plan.prefill.iter().map(|&p| load.routes.iter().filter(|r| r.src == p).count()).max().unwrap_or(0);
    let rounds = busiest.div_ceil(RECORDS_PER_MESSAGE).max(1);
    let mut links = Vec::new();
    let mut records = Vec::new();
    for (end, recs) in ends {
        links.push(end);
        records.extend(recs);
    }
    let mut chunks = records.chunks(RECORDS_PER_MESSAGE);
    let mut all: Option<Vec<Part>> = None;
    for round in 0..rounds {
        let part = Part {
            links: if round == 0 { std::mem::take(&mut links) } else { Vec::new() },
            records: chunks.next().map(<[RequestRecord]>::to_vec).unwrap_or_default(),
        };
        if let Some(got) = group.gather(Json::of(&part)?)? {
            let parts = got
                .iter()
                .enumerate()
                .map(|(rank, v)| v.read().map_err(|e| anyhow!("rank {rank} sent records rank 0 cannot read: {e}")))
                .collect::<Result<Vec<Part>>>()?;
            all.get_or_insert_with(Vec::new).extend(parts);
        }
    }
    Ok(all)
}
