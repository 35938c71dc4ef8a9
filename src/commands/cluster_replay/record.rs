//! Rank 0's record of a cluster replay: every load's requests from every prefill rank, the load's summary as
//! `kvxfer replay` computes it, the per-link and per-rank summaries, the console's rows, and the files (rewritten
//! after every load, so a failure keeps what completed).

use super::{Load, Part, ReplayPlan};
use crate::cli::ClusterArgs;
use crate::cluster::{Endpoint, Pattern, RankInfo};
use crate::commands::common::results_config;
use crate::commands::replay::{pool, table_header, table_row};
use crate::env::Env;
use crate::export::json::{Results, Role};
use crate::plan::RunConfig;
use crate::run::replay::{LoadRun, RequestRecord, Scheduled};
use crate::stats::cluster::ClusterJson;
use crate::stats::replay::cluster::{ClusterReplayJson, GroupSummary, LoadClusterJson};
use crate::stats::replay::{load_words, LatencyFrom, LoadJson, LoadSummary, Quantiles, ReplayJson};
use anyhow::{anyhow, Result};
use std::path::PathBuf;

/// What rank 0 knows of the run when it starts recording it, besides the arguments and the plan.
pub struct Start<'a> {
    pub cfg: &'a RunConfig,
    pub model: Option<String>,
    pub coordinator: &'a str,
    pub ranks: Vec<Endpoint>,
    pub info: &'a RankInfo,
}

pub struct Recorder {
    results: Results,
    section: ReplayJson,
    links: Vec<[usize; 2]>,
    loads: Vec<f64>,
    schedules: Vec<Vec<Scheduled>>,
    slo_ms: Option<f64>,
    unit: &'static str,
    json: Option<PathBuf>,
    csv: Option<PathBuf>,
    md: Option<PathBuf>,
    fig: Option<PathBuf>,
    html: Option<PathBuf>,
}

impl Recorder {
    pub fn new(a: &ClusterArgs, plan: &ReplayPlan, start: Start) -> Recorder {
        let Start { cfg, model, coordinator, ranks, info } = start;
        let label = a.run.label.clone().unwrap_or_else(|| {
            format!(
                "replay over {} ranks ({}P{}D, {})",
                info.world_size,
                plan.prefill.len(),
                plan.decode.len(),
                plan.route
            )
        });
        let mut config =
            results_config(cfg, model, coordinator, Role::Cluster, a.mem.to_string(), serde_json::Value::Null);
        config.mode = Some("replay".into());
        let mut results = Results::new(label, &Env::capture(), config);
        results.cluster = Some(ClusterJson {
            pattern: Pattern::Replay,
            launcher: info.launcher,
            world_size: info.world_size,
            ranks,
            steps_total: plan.loads.len(),
            steps_done: 0,
            aggregates: Vec::new(),
        });
        let links: Vec<[usize; 2]> = plan.links.iter().map(|l| [l.src, l.dst]).collect();
        let section = ReplayJson {
            workload: plan.job.describe(),
            load_unit: plan.job.load_unit().into(),
            latency: LatencyFrom::Arrival,
            max_inflight: 1,
            region_bytes: plan.region,
            max_backlog_s: plan.max_backlog.as_secs_f64(),
            warmup_requests: plan.warmup_requests,
            verify_in_latency: cfg.knobs.verify,
            ceiling: None,
            layerwise: None,
            loads: Vec::new(),
            pooled: Vec::new(),
            knee: None,
            pool: None,
            unchecked_requests: None,
            cluster: Some(ClusterReplayJson {
                prefill: plan.prefill.clone(),
                decode: plan.decode.clone(),
                route: plan.route.to_string(),
                links: links.clone(),
            }),
        };
        if cfg.knobs.verify {
            crate::noteln!("--verify: each request's service time includes filling and checking its pattern; replay without it for timing");
        }
        crate::outln!("{}", table_header(plan.job.load_unit()));
        Recorder {
            results,
            section,
            links,
            loads: plan.loads.iter().map(|l| l.load).collect(),
            schedules: plan.loads.iter().map(|l| l.schedule.clone()).collect(),
            slo_ms: plan.slo_ms,
            unit: plan.job.load_unit(),
            json: a.out.json.clone(),
            csv: a.out.csv.clone(),
            md: a.out.md.clone(),
            fig: a.out.fig.fig.clone(),
            html: a.out.fig.html.clone(),
        }
    }

    /// Load `k` (0-based) begins.
    pub fn starting(&mut self, k: usize, load: &Load) {
        let words = load_words(load.load, self.unit);
        crate::errln!(
            "load {}/{}: {words}, {} requests over {} links",
            k + 1,
            self.loads.len(),
            load.schedule.len(),
            self.links.len()
        );
    }

    /// Keep load `k`'s requests (every rank's parts), its summaries; save. A link that failed is this function's
    /// error, after the load's completed requests are saved.
    pub fn record(&mut self, k: usize, load: &Load, parts: Vec<Part>) -> Result<()> {
        let mut records: Vec<RequestRecord> = Vec::with_capacity(load.schedule.len());
        let (mut failures, mut cutoff, mut not_started) = (Vec::new(), None, 0);
        for part in parts {
            for end in part.links {
                failures.extend(end.error);
                cutoff = cutoff.or(end.cutoff);
                not_started += end.not_started;
            }
            records.extend(part.records);
        }
        records.sort_by(|a, b| a.scheduled_ms.total_cmp(&b.scheduled_ms).then(a.id.cmp(&b.id)));
        let wall_ms = records.iter().map(|r| r.end_ms).fold(0.0, f64::max);
        let run = LoadRun { records, cutoff, not_started, wall_ms, pool: None };
        let summary = LoadSummary::of(&run, &load.schedule, None, self.slo_ms);
        let cl = self.section.cluster.as_ref().expect("a cluster replay's section");
        let by_link = LoadClusterJson::of(&run.records, &self.links, cl, wall_ms);
        crate::outln!("{}", table_row(load.load, 0, &summary));
        let links = by_link.links.iter().map(|l| (format!("{}→{}", l.src, l.dst), &l.summary));
        let decode = by_link.ranks.iter().filter(|r| r.role == "decode");
        for (what, s) in links.chain(decode.map(|r| (format!("into {}", r.rank), &r.summary))) {
            crate::outln!("{}", group_row(&what, s));
        }
        self.section.loads.push(LoadJson {
            load: load.load,
            repeat: 0,
            summary,
            requests: run.records,
            cluster: Some(by_link),
        });
        let n = self.section.loads.len();
        pool(&mut self.section, &self.loads[..n], &self.schedules[..n], self.slo_ms);
        if failures.is_empty() {
            self.results.cluster.as_mut().expect("cluster results").steps_done = k + 1;
        }
        self.save()?;
        match failures.is_empty() {
            true => Ok(()),
            false => Err(anyhow!("{}", failures.join("; "))),
        }
    }

    fn save(&mut self) -> Result<()> {
        self.results.replay = Some(self.section.clone());
        if let Some(p) = &self.json {
            crate::export::write_atomic(p, &self.results.to_json()?)?;
        }
        Ok(())
    }

    /// The end of the run at rank 0: the error (if any) kept in the files, the knee, the side files and figures.
    pub fn finish(mut self, outcome: Result<()>) -> Result<()> {
        let outcome = outcome.and_then(|()| crate::commands::replay::verified(&mut self.section));
        match &outcome {
            Err(e) => self.results.error = Some(format!("{e:#}")),
            Ok(()) => self.results.complete = true,
        }
        if let Some(k) = &self.section.knee {
            crate::outln!("knee: {} ({})", load_words(k.load, self.unit), k.why);
        }
        self.save()?;
        if let Some(p) = &self.json {
            crate::errln!("results: {}", p.display());
        }
        if let Some(p) = &self.csv {
            crate::export::write_atomic(p, &crate::export::cluster_replay::requests_csv(&self.section)?)?;
        }
        if let Some(p) = &self.md {
            let md = crate::export::cluster_replay::markdown(&self.section);
            crate::export::write_atomic(p, md.as_bytes())?;
        }
        if let Some(dir) = &self.fig {
            crate::export::plot::draw_replays(
                &[(String::new(), &self.section)],
                &mut crate::export::plot::Sink::Dir(dir),
            )?;
        }
        if let Some(page) = &self.html {
            crate::export::html::write_run(page, &self.results, &[], crate::transport::registry::NOTES)?;
        }
        outcome
    }
}

/// A link's or a decode rank's line under its load's row: `  0→2  47 requests  0.50 GB/s  p50 40.77 ms  p99 …`.
fn group_row(what: &str, s: &GroupSummary) -> String {
    let q = |f: fn(&Quantiles) -> f64| s.latency_ms.as_ref().map_or("-".into(), |v| format!("{:.2}", f(v)));
    format!(
        "  {what:>6}  {:>6} requests  {:>8} GB/s  p50 {:>9} ms  p99 {:>9} ms",
        s.requests,
        s.gbps.map_or("-".into(), |g| format!("{g:.2}")),
        q(|v| v.p50),
        q(|v| v.p99)
    )
}
