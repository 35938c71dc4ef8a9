//! `kvxfer cluster`: one rank of a cluster run, started once per rank by the launcher. Every rank finds its rank
//! in the launcher's environment, listens for the other ranks' flows, meets them at rank 0, and then runs the
//! steps every rank computes alike from the pattern and the world size: a barrier, the step's flows at once, the
//! results to rank 0, a barrier. Rank 0 says each step, records every flow (and the aggregate of concurrent flows)
//! and rewrites the results files after every step, so a failure keeps what completed.

use super::cluster_flows::{receive_in_background, run_step, FlowJob, FlowOutcome};
use super::common::{bind, check_host_support, check_memory, configure, device_choice, results_config, Configured};
use crate::bail_usage;
use crate::cli::ClusterArgs;
use crate::cluster::{self, launcher, Endpoint, Group, Member, Pattern, RankInfo, RendezvousConfig, Step};
use crate::env::Env;
use crate::export::cluster as cluster_out;
use crate::export::json::{Results, Role};
use crate::export::ExportManager;
use crate::measure::Json;
use crate::mem::MemKind;
use crate::plan::sizes::format_size;
use crate::plan::RunConfig;
use crate::run::receiver::ReceiverLimits;
use crate::stats::case::ClusterFlow;
use crate::stats::cluster::{flag_outliers, ClusterJson, StepAggregate};
use crate::stats::CaseResult;
use crate::transport::DeviceChoice;
use anyhow::{anyhow, Context, Result};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};

pub fn run(a: ClusterArgs) -> Result<()> {
    let env = launcher::process_env();
    let info = cluster::discover(&env)?;
    crate::console::set_cluster_rank(info.rank);
    // Before the ranks meet: a replay's bad flags fail every rank alike, at once.
    let replay = super::cluster_replay::plan(&a, info.world_size)?;
    let coordinator = cluster::find_coordinator(a.coordinator.as_deref(), &env, &info, a.rendezvous_timeout)?;
    let host = crate::env::hostname();
    crate::errln!(
        "cluster: rank {} of {} on {host} (launcher: {}, local rank {}); ranks meet at {} (from {})",
        info.rank,
        info.world_size,
        info.launcher,
        info.local_rank,
        coordinator.address(),
        source_name(&coordinator.source)
    );
    let mem = rank_mem(&a, info.local_rank)?;
    let Configured { cfg, model, timeouts } = match &replay {
        Some(plan) => plan.configured(&a, mem)?,
        None => configure(&a.sizes, &a.run, &[mem, mem])?,
    };
    let device = rank_device(&a.device, info.local_rank)?;
    check_host_support(&cfg, &[("--mem", mem)], &[&device])?;
    let out = a.out.outputs();
    let exports = ExportManager::for_run(&out, crate::transport::registry::NOTES);
    if out.events.is_some() {
        bail_usage!("--events: a cluster run does not write per-rep events (each flow's reps are in the results JSON)");
    }
    if info.rank == 0 {
        crate::output::Recorder::check_outputs(&out)?;
    }
    let peak = match &replay {
        Some(plan) => plan.peak_buffers(info.rank),
        None => cluster::schedule::peak_flows(a.pattern, info.world_size, info.rank),
    };
    if peak == 0 && replay.is_none() {
        bail_usage!("--pattern {} over {} rank(s) has no flow; launch at least 2 ranks", a.pattern, info.world_size);
    }
    // Every flow of a step has its own buffers on both ends: under fanout, ring or all a rank holds one per flow it
    // sends or receives at once, so refuse sizes that fit once but not that many times.
    check_memory(&cfg, &vec![mem; peak.max(2)]).map_err(|e| {
        e.context(format!("--pattern {}: rank {} holds that many buffers at once", a.pattern, info.rank))
    })?;
    let token = a.token.clone().unwrap_or_default();
    let loopback = resolves_to_loopback(&coordinator.address());
    let place = format!("the coordinator {}", coordinator.address());
    crate::control::auth::check_token(&place, loopback, &token, "KVXFER_TOKEN or --token T, the same on every rank")?;
    // On loopback no token is asked for, but two jobs on this host may meet at one port (a derived one, or the same
    // --coordinator): the job's id as the token turns the other job's ranks away instead of letting them join.
    let token = match launcher::job_id(&env) {
        Some(id) if token.is_empty() => format!("job {id}"),
        _ => token,
    };
    let listener = bind(SocketAddr::new(if loopback { Ipv4Addr::LOCALHOST } else { Ipv4Addr::UNSPECIFIED }.into(), 0))?;
    let listen_port = listener.local_addr()?.port();
    let limits = ReceiverLimits {
        max_size: None,
        max_streams: 64,
        timeouts,
        mem,
        device: device.clone(),
        shares_process: true,
        gauge: None,
    };
    receive_in_background(listener, info.rank, token.clone(), limits)?;
    let rv = RendezvousConfig {
        info: info.clone(),
        coordinator: coordinator.clone(),
        token: token.clone(),
        timeout: a.rendezvous_timeout,
        listen_port,
        host,
        numa: rank_numa(mem, &device),
    };
    let mut group = cluster::rendezvous(&rv)?;
    // Before any rank computes a schedule from its own arguments: a rank started with others would measure
    // something else, or wait at a barrier the others never reach.
    super::cluster_args::check_same_args(&mut group, &a)?;
    group.set_timeout(a.step_timeout);
    if let Some(plan) = replay {
        let members = flow_addresses(group.members(), loopback);
        let job = super::cluster_replay::LinkJob { cfg, token, timeouts, device, src: mem, members };
        return run_replay(&a, &info, &mut group, &plan, job, (model, &coordinator.address()));
    }
    let steps = cluster::schedule(a.pattern, group.world_size(), cfg.cases.len());
    let members = flow_addresses(group.members(), loopback);
    let mut collector = (info.rank == 0).then(|| {
        let ranks: Vec<Endpoint> = members.iter().map(|m| endpoint(&a, m)).collect();
        let coordinator = coordinator.address();
        let start = RunStart { model, coordinator: &coordinator, ranks, steps_total: steps.len() };
        Collector::new(&a, &info, &cfg, start, exports)
    });
    let sync_reps = !a.pattern.flows_apart();
    let job = FlowJob { cfg, token, timeouts, device, src: mem, members, sync_reps };
    let outcome = run_steps(&mut group, &steps, &job, collector.as_mut());
    match collector {
        Some(c) => c.finish(outcome),
        None => outcome,
    }
}

/// A replay's loads on every rank; rank 0 records them.
fn run_replay(
    a: &ClusterArgs,
    info: &RankInfo,
    group: &mut Group,
    plan: &super::cluster_replay::ReplayPlan,
    job: super::cluster_replay::LinkJob,
    (model, coordinator): (Option<String>, &str),
) -> Result<()> {
    use super::cluster_replay::{Recorder, Start};
    let mut recorder = (info.rank == 0).then(|| {
        let ranks: Vec<Endpoint> = job.members.iter().map(|m| endpoint(a, m)).collect();
        Recorder::new(a, plan, Start { cfg: &job.cfg, model, coordinator, ranks, info })
    });
    let outcome = super::cluster_replay::run(group, plan, &job, recorder.as_mut());
    match recorder {
        Some(r) => r.finish(outcome),
        None => outcome,
    }
}

/// What said where the ranks meet, for the first line.
fn source_name(source: &cluster::CoordinatorSource) -> String {
    match source {
        cluster::CoordinatorSource::Flag => "--coordinator".into(),
        cluster::CoordinatorSource::MasterAddr => "MASTER_ADDR:MASTER_PORT".into(),
        cluster::CoordinatorSource::Pmix => "PMIx: rank 0 published it through the launcher".into(),
        cluster::CoordinatorSource::SlurmNodelist => "the first host of SLURM_JOB_NODELIST".into(),
        cluster::CoordinatorSource::LocalLoopback { no_pmix } => {
            format!("every rank on this host, port from the job id; no PMIx: {no_pmix}; --coordinator to choose")
        }
    }
}

/// The table as flows dial it. On loopback every listener is on 127.0.0.1, but a rank that reached rank 0 over ::1
/// (a coordinator name like localhost) advertised ::1.
fn flow_addresses(members: &[Member], loopback: bool) -> Vec<Member> {
    let mut members = members.to_vec();
    for m in members.iter_mut().filter(|_| loopback) {
        if let Ok(addr) = m.addr.parse::<SocketAddr>() {
            m.addr = SocketAddr::new(Ipv4Addr::LOCALHOST.into(), addr.port()).to_string();
        }
    }
    members
}

/// Every step in order; rank 0 records each and fails the group (telling every rank why) when a flow failed.
fn run_steps(group: &mut Group, steps: &[Step], job: &FlowJob, mut collector: Option<&mut Collector>) -> Result<()> {
    if let Some(c) = collector.as_deref_mut() {
        c.plan(steps);
    }
    for (i, step) in steps.iter().enumerate() {
        if let Some(c) = collector.as_deref_mut() {
            c.starting(i, steps.len(), step, &job.cfg);
        }
        let at = || format!("step {}/{}", i + 1, steps.len());
        let outcomes = run_step(group, step, job).with_context(at)?;
        let gathered = group.gather(Json::of(&outcomes)?).with_context(at)?;
        if let (Some(c), Some(all)) = (collector.as_deref_mut(), gathered) {
            if let Err(e) = c.record(i + 1, step, all) {
                group.abort(&format!("{e:#}"));
                return Err(e);
            }
        }
        group.barrier().with_context(at)?;
    }
    Ok(())
}

/// "0→1, 2→3 at 1 MiB, 4 MiB": the flows of a step and its sizes.
fn describe(step: &Step, cfg: &RunConfig) -> String {
    let flows: Vec<String> = step.flows.iter().map(|f| format!("{}→{}", f.src, f.dst)).collect();
    let sizes: Vec<String> = step.cases.iter().map(|c| format_size(cfg.cases[*c].size_bytes)).collect();
    format!("{} at {}", flows.join(", "), sizes.join(", "))
}

/// This rank's memory: `--mem`, or with `--gpu-per-local-rank` the GPU of its local rank.
fn rank_mem(a: &ClusterArgs, local_rank: usize) -> Result<MemKind> {
    if !a.gpu_per_local_rank {
        return Ok(a.mem);
    }
    if !matches!(a.mem, MemKind::Gpu(_)) {
        bail_usage!("--gpu-per-local-rank picks gpu:LOCAL_RANK for GPU memory: give --mem gpu:0, not --mem {}", a.mem);
    }
    Ok(MemKind::Gpu(local_rank as u32))
}

/// This rank's RDMA device(s): `-d`, or the entry at its local rank (modulo the list) of `-d a,b,...`; an entry
/// `a+b` gives the rank two rails.
fn rank_device(d: &crate::cli::DeviceArgs, local_rank: usize) -> Result<DeviceChoice> {
    let mut choice = device_choice(d)?;
    if let Some(list) = &d.device {
        let entries: Vec<&str> = list.split(',').map(str::trim).collect();
        if entries.iter().any(|n| n.is_empty()) {
            bail_usage!("-d {list:?}: an empty entry; give a device name or a comma-separated list, one per local rank (a+b: two rails)");
        }
        choice.names = super::common::rail_names("-d", entries[local_rank % entries.len()])?;
    }
    Ok(choice)
}

/// A member as flows name it: its rank and host, and the GPU and NIC (verbs only) its local rank gets from this
/// command line (every rank runs the same one).
fn endpoint(a: &ClusterArgs, m: &Member) -> Endpoint {
    let gpu = match rank_mem(a, m.local_rank) {
        Ok(MemKind::Gpu(i)) => Some(i),
        _ => None,
    };
    // Only a transport that opens the RDMA devices itself uses them; a NIC named for another would say something
    // untrue.
    let opens = match a.run.transport {
        crate::cli::TransportChoice::Named(kind) => crate::transport::registry::get(kind).opens_rdma_devices(),
        crate::cli::TransportChoice::Auto => false,
    };
    let nic = rank_device(&a.device, m.local_rank).ok().and_then(|d| d.label()).filter(|_| opens);
    Endpoint { rank: m.rank, host: m.host.clone(), gpu, nic, local_rank: m.local_rank, numa: m.numa }
}

/// The NUMA node this rank's transfers touch: its RDMA device's, else its GPU's, else the node of the CPU it runs on
/// (where its host buffer's pages are first touched). None when the host does not say.
fn rank_numa(mem: MemKind, device: &DeviceChoice) -> Option<u32> {
    use crate::env::hardware;
    if let Some(nic) = device.names.first().and_then(|n| hardware::numa_of_rdma_device(n)) {
        return Some(nic);
    }
    if let MemKind::Gpu(i) = mem {
        let gpus = crate::mem::cuda::gpus().ok()?;
        return gpus.iter().find(|g| g.ordinal == i).and_then(|g| hardware::numa_of_pci(&g.pci_bus_id));
    }
    hardware::numa_of_this_cpu()
}

/// Whether every address `addr` resolves to is a loopback one (then the ranks listen on loopback only).
fn resolves_to_loopback(addr: &str) -> bool {
    let ips: Vec<IpAddr> = addr.to_socket_addrs().map(|a| a.map(|s| s.ip()).collect()).unwrap_or_default();
    !ips.is_empty() && ips.iter().all(IpAddr::is_loopback)
}

/// Rank 0's record of the run: the results, rewritten after every step.
struct Collector {
    results: Results,
    exports: ExportManager,
    pattern: Pattern,
    figures: crate::export::outputs::Figures,
    /// Few enough links for a line per step and a row per flow (see `cluster_out::full`); else one progress line.
    full: bool,
    progress: Option<crate::output::progress::StepProgress>,
}

/// What rank 0 knows of the run when it starts recording it, besides the arguments and the configuration.
struct RunStart<'a> {
    model: Option<String>,
    coordinator: &'a str,
    ranks: Vec<Endpoint>,
    steps_total: usize,
}

impl Collector {
    fn new(a: &ClusterArgs, info: &RankInfo, cfg: &RunConfig, start: RunStart, exports: ExportManager) -> Collector {
        let RunStart { model, coordinator, ranks, steps_total } = start;
        let label = a.run.label.clone().unwrap_or_else(|| format!("{} over {} ranks", a.pattern, info.world_size));
        let dst_mem = a.mem.to_string();
        let config = results_config(cfg, model, coordinator, Role::Cluster, dst_mem, serde_json::Value::Null);
        let mut results = Results::new(label, &Env::capture(), config);
        results.cluster = Some(ClusterJson {
            pattern: a.pattern,
            launcher: info.launcher,
            world_size: info.world_size,
            ranks,
            steps_total,
            steps_done: 0,
            aggregates: Vec::new(),
        });
        Collector { results, exports, pattern: a.pattern, figures: a.out.fig.figures(), full: true, progress: None }
    }

    /// Choose the console's form from the links the steps will measure.
    fn plan(&mut self, steps: &[Step]) {
        let links: std::collections::BTreeSet<(usize, usize)> =
            steps.iter().flat_map(|s| s.flows.iter().map(|f| (f.src, f.dst))).collect();
        self.full = cluster_out::full(links.len());
        if !self.full {
            let what = format!(
                "{} steps over {} links; more than {} links, so no row per flow here (every flow is in the results files)",
                steps.len(),
                links.len(),
                cluster_out::FULL_UP_TO_LINKS
            );
            self.progress = Some(crate::output::progress::StepProgress::new(steps.len(), &what));
        }
    }

    /// Step `i` (0-based) of `total` begins: its line, or the progress line's update.
    fn starting(&mut self, i: usize, total: usize, step: &Step, cfg: &RunConfig) {
        match &mut self.progress {
            None => crate::errln!("step {}/{}: {}", i + 1, total, describe(step, cfg)),
            Some(p) => {
                let flows = self.results.cases.iter().filter(|c| c.cluster.is_some()).count();
                p.update(i, &format!("{flows} flow rows recorded; next: {} flows at once", step.flows.len()));
            }
        }
    }

    fn cluster(&mut self) -> &mut ClusterJson {
        self.results.cluster.as_mut().expect("a cluster run's results")
    }

    /// Keep step `number`'s flows (every rank's outcomes, in rank order), its aggregates, the outlier marks; save.
    /// A flow that failed is this function's error, after its completed sizes are saved.
    fn record(&mut self, number: usize, step: &Step, gathered: Vec<Json>) -> Result<()> {
        let mut outcomes: Vec<FlowOutcome> = Vec::new();
        for (rank, v) in gathered.into_iter().enumerate() {
            let list: Vec<FlowOutcome> =
                v.read().map_err(|e| anyhow!("rank {rank} sent results rank 0 cannot read: {e}"))?;
            outcomes.extend(list);
        }
        outcomes.sort_by_key(|o| step.flows.iter().position(|f| f.src == o.src && f.dst == o.dst));
        let ranks = self.cluster().ranks.clone();
        let first_new = self.results.cases.len();
        for o in &outcomes {
            for case in &o.cases {
                let mut case = case.clone();
                case.cluster = Some(ClusterFlow {
                    src: ranks[o.src].clone(),
                    dst: ranks[o.dst].clone(),
                    pattern: self.pattern,
                    step: number,
                    flows: step.flows.len(),
                    outlier: None,
                });
                self.results.cases.push(case);
            }
        }
        self.add_aggregates(number, step, first_new);
        flag_outliers(&mut self.results.cases);
        let failures: Vec<String> = outcomes
            .iter()
            .filter_map(|o| {
                let e = o.error.as_ref()?;
                Some(format!("flow {}→{} ({} → {}): {e}", o.src, o.dst, ranks[o.src].host, ranks[o.dst].host))
            })
            .collect();
        if failures.is_empty() {
            self.cluster().steps_done = number;
        }
        self.exports.write(std::slice::from_ref(&self.results))?;
        self.print_rows(first_new);
        match failures.is_empty() {
            true => Ok(()),
            false => Err(anyhow!("step {number}: {}", failures.join("; "))),
        }
    }

    /// Flows that ran at once (every pattern but pairs and alone, whose flows are each a link's own measurement):
    /// per size, bytes of all flows over the slowest one's time; for bidir also per pair (its two directions).
    fn add_aggregates(&mut self, number: usize, step: &Step, first_new: usize) {
        if self.pattern.flows_apart() || step.flows.len() < 2 {
            return;
        }
        let new = &self.results.cases[first_new..];
        let mut sizes: Vec<u64> = new.iter().map(|c| c.size_bytes).collect();
        sizes.dedup();
        let ends = |c: &CaseResult| c.cluster.as_ref().map(|f| (f.src.rank, f.dst.rank)).unwrap_or_default();
        let mut groups: Vec<(Option<[usize; 2]>, usize)> = vec![(None, step.flows.len())];
        if self.pattern == Pattern::Bidir {
            let pairs = step.flows.iter().filter(|f| f.src < f.dst).map(|f| (Some([f.src, f.dst]), 2));
            groups.extend(pairs);
        }
        let mut aggregates: Vec<StepAggregate> = Vec::new();
        for size in sizes {
            for (pair, count) in &groups {
                let flows: Vec<&CaseResult> = new
                    .iter()
                    .filter(|c| c.size_bytes == size)
                    .filter(|c| pair.is_none_or(|[a, b]| [(a, b), (b, a)].contains(&ends(c))))
                    .collect();
                if flows.len() == *count {
                    aggregates.extend(
                        StepAggregate::over_flows(number, &flows).map(|agg| StepAggregate { pair: *pair, ..agg }),
                    );
                }
            }
        }
        for agg in aggregates.iter().filter(|_| self.full) {
            let pair = agg.pair.map(|[a, b]| format!(" ({a}⇄{b})")).unwrap_or_default();
            crate::errln!(
                "step {number}: {} flows of {} at once{pair}: aggregate p50 {:.2} GB/s",
                agg.flows,
                format_size(agg.size_bytes),
                agg.gbps.p50
            );
        }
        self.cluster().aggregates.extend(aggregates);
    }

    fn print_rows(&self, first_new: usize) {
        if !self.full {
            return;
        }
        for c in &self.results.cases[first_new..] {
            let Some(f) = &c.cluster else { continue };
            let verified = match c.check.verified {
                Some(true) => ", verified",
                Some(false) => ", VERIFY FAILED",
                None => "",
            };
            crate::outln!(
                "  {}→{} {:>9}  p50 {:8.2} GB/s  {:9.3} ms  (n={}{verified})",
                f.src.rank,
                f.dst.rank,
                format_size(c.size_bytes),
                c.stats.gbps.p50,
                c.stats.transfer_ms.p50,
                c.stats.n
            );
        }
    }

    /// The end of the run at rank 0: the error (if any) kept in the files, the matrix and the rows on the console.
    fn finish(mut self, outcome: Result<()>) -> Result<()> {
        let done = self.results.cluster.as_ref().map_or(0, |c| c.steps_done);
        if let Some(p) = &mut self.progress {
            p.update(done, if outcome.is_ok() { "all steps done" } else { "stopped" });
            p.finish();
        }
        match &outcome {
            Err(e) => self.results.error = Some(format!("{e:#}")),
            Ok(()) => self.results.complete = true,
        }
        self.exports.write(std::slice::from_ref(&self.results))?;
        let cl = self.results.cluster.clone().expect("a cluster run's results");
        crate::outln!("\n{}", cluster_out::markdown(&self.results, &cl));
        for (format, p) in self.exports.files() {
            crate::errln!("{}: {}", format.what(), p.display());
        }
        if let Some(page) = &self.figures.html {
            let lines = crate::export::plot::parse_lines(&self.figures.lines)?;
            crate::export::html::write_run(page, &self.results, &lines, crate::transport::registry::NOTES)?;
        }
        if let Some(dir) = &self.figures.dir {
            let lines = crate::export::plot::parse_lines(&self.figures.lines)?;
            crate::export::plot::draw_cluster(&self.results, &mut crate::export::plot::Sink::Dir(dir), &lines)?;
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> ClusterArgs {
        crate::cli::Cli::cluster_args(extra)
    }

    fn member(rank: usize, local_rank: usize) -> Member {
        Member { rank, local_rank, host: "h".into(), addr: "127.0.0.1:1".into(), numa: Some(1) }
    }

    #[test]
    fn a_rank_takes_the_gpu_and_device_of_its_local_rank() {
        let a = args(&["--mem", "gpu:0", "--gpu-per-local-rank", "-d", "mlx5_0,mlx5_1", "--transport", "verbs"]);
        assert_eq!(rank_mem(&a, 3).unwrap(), MemKind::Gpu(3));
        assert_eq!(rank_device(&a.device, 3).unwrap().names, ["mlx5_1"]);
        let e = endpoint(&a, &member(5, 2));
        assert_eq!((e.rank, e.gpu, e.nic.as_deref(), e.local_rank, e.numa), (5, Some(2), Some("mlx5_0"), 2, Some(1)));
        // Without the flag every rank uses --mem as given; a tcp run records no NIC.
        let a = args(&["--mem", "gpu:1", "-d", "mlx5_0", "--transport", "tcp"]);
        let e = endpoint(&a, &member(1, 1));
        assert_eq!((e.gpu, e.nic), (Some(1), None));
        let e = endpoint(&args(&[]), &member(0, 0));
        assert_eq!((e.gpu, e.nic), (None, None));
    }

    #[test]
    fn gpu_per_local_rank_needs_gpu_memory() {
        let e = rank_mem(&args(&["--gpu-per-local-rank"]), 0).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(e.to_string().contains("--mem gpu:0"), "{e}");
    }
}
