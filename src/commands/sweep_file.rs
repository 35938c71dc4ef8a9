//! `kvxfer sweep FILE.toml`: run a sweep file. Its cases are grouped into sessions (one per connection
//! configuration; see `sweep_sessions`), the measured reps run in the file's order (interleaved by default: each
//! round runs every case once, in a fresh seeded shuffle), and the results are saved after every rep, so an
//! interrupted sweep can be continued with `--resume`.

use super::common::{check_host_support, configure, default_outputs, loopback_devices, Configured};
use super::sweep_sessions::{Pool, SessionPlan};
use crate::bail_usage;
use crate::cli::{Cli, Command, SweepArgs};
use crate::env::Env;
use crate::export::json::{ConfigJson, Results, SessionJson, SweepCaseJson, SweepJson};
use crate::output::Recorder;
use crate::plan::order::schedule;
use crate::plan::sweep_file::{describe, flags, session_key, Params, SweepFile, SIZE_KEYS};
use crate::run::sender::CaseRun;
use crate::stats::CaseResult;
use anyhow::{Context, Result};
use clap::Parser;
use std::collections::BTreeMap;
use std::path::Path;

pub fn run(a: SweepArgs, file: &Path) -> Result<()> {
    reject_parameter_flags(&a)?;
    let sweep = SweepFile::load(file, &a.sets)?;
    let plans = plan_sessions(&sweep)?;
    let previous = a.resume.as_deref().map(|p| resumable(p, &sweep)).transpose()?;

    let mut out = a.out.clone();
    if let Some(r) = &a.resume {
        out.json.get_or_insert_with(|| r.clone());
        out.md.get_or_insert_with(|| r.with_extension("md"));
    }
    default_outputs(&mut out, &a.out_dir)?;
    Recorder::check_outputs(&out)?;

    // Which case ids are done, and the reps kept of the ones that are not.
    let mut kept: BTreeMap<usize, CaseResult> = BTreeMap::new();
    if let Some(prev) = &previous {
        for c in &prev.cases {
            let id = sweep.cases.iter().find(|s| Some(&s.params) == c.params.as_ref()).map(|s| s.id);
            kept.insert(id.expect("resumable() matched every case"), c.clone());
        }
    }
    let need: Vec<u32> = sweep
        .cases
        .iter()
        .map(|c| sweep.reps.saturating_sub(kept.get(&c.id).map_or(0, |k| k.reps.len() as u32)))
        .collect();
    let done = need.iter().filter(|n| **n == 0).count();
    if previous.is_some() {
        eprintln!(
            "resume: {done} of {} cases complete (skipped), {} partly measured (continued)",
            sweep.cases.len(),
            kept.len() - done
        );
    }

    let mut results = sweep_results(&a, &sweep, &plans, previous)?;
    let s = results.sweep.as_mut().expect("a sweep's results");
    // A resumed run reshuffles with a seed of its own, still reproducible from the file's seed.
    let seed = sweep.seed.wrapping_add(s.resumed_at.len() as u64);
    let rounds = schedule(sweep.order, &need, seed);
    let verify = plans.iter().any(|p| p.cfg.verify);
    let total: u64 = need.iter().map(|&n| n as u64 + if n > 0 { sweep.warmup as u64 } else { 0 }).sum();
    eprintln!(
        "sweep {}: {} cases in {} session(s), {} reps + {} warm-up each, order {} (seed {})",
        sweep.name,
        sweep.cases.len(),
        plans.len(),
        sweep.reps,
        sweep.warmup,
        sweep.order.name(),
        sweep.seed
    );
    let mut rec = Recorder::with_total(results, total, verify, &out)?;
    for c in kept.values().filter(|c| c.complete) {
        rec.put_case(c.clone())?;
    }

    let mut pool = Pool::new(&plans);
    let mut runs: BTreeMap<usize, CaseRun> = BTreeMap::new();
    let outcome = run_rounds(&sweep, &plans, &rounds, &kept, &mut pool, &mut runs, &mut rec);
    let closed = pool.close_all(&outcome);
    let s = rec.results.sweep.as_mut().expect("set above");
    s.session_opens += pool.opens;
    for (sj, d) in s.sessions.iter_mut().zip(&pool.details) {
        if let Some((dst_mem, detail)) = d {
            sj.dst_mem = dst_mem.clone();
            sj.transport_detail = detail.clone();
        }
    }
    let outcome = outcome.and(closed);
    rec.finish(outcome.as_ref().err())?;
    outcome
}

/// The results the sweep writes into: the interrupted run's (`--resume`, said when this host differs) or fresh
/// ones; either way with this sweep's case list and sessions.
fn sweep_results(
    a: &SweepArgs,
    sweep: &SweepFile,
    plans: &[SessionPlan],
    previous: Option<Results>,
) -> Result<Results> {
    let env = Env::capture();
    let mut results = match previous {
        Some(mut prev) => {
            let diffs = crate::env::differences(&prev.env, &serde_json::to_value(&env)?);
            for d in diffs {
                eprintln!("warning: resume: this host differs from the interrupted run's: {d}");
            }
            prev.error = None;
            let s = prev.sweep.as_mut().expect("resumable() checked");
            s.resumed_at.push(humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string());
            prev
        }
        None => {
            // --label on the command line beats the file's label.
            let label = (a.run.label.clone().or_else(|| sweep.label.clone()))
                .unwrap_or_else(|| format!("{} on {}", sweep.name, crate::env::hostname()));
            let mut r = Results::new(label, &env, config_json(plans));
            r.sweep = Some(SweepJson {
                file: sweep.path.display().to_string(),
                name: sweep.name.clone(),
                description: sweep.description.clone(),
                order: sweep.order.name().into(),
                seed: sweep.seed,
                reps: sweep.reps,
                warmup: sweep.warmup,
                sets: a.sets.clone(),
                case_list: Vec::new(),
                sessions: Vec::new(),
                rounds: Vec::new(),
                resumed_at: Vec::new(),
                session_opens: 0,
            });
            r
        }
    };
    let s = results.sweep.as_mut().expect("set above");
    s.case_list = sweep
        .cases
        .iter()
        .map(|c| SweepCaseJson { case_id: c.id, label: c.label.clone(), params: c.params.clone() })
        .collect();
    s.sessions = plans
        .iter()
        .map(|p| SessionJson {
            case_ids: p.case_ids.clone(),
            transport: p.cfg.transport.kind().to_string(),
            src_mem: p.src.to_string(),
            dst_mem: p.dst.to_string(),
            transport_detail: serde_json::Value::Null,
        })
        .collect();
    Ok(results)
}

/// Run the measured reps round by round (each case's warm-ups right before its first measured rep in a session),
/// saving the case after every rep.
fn run_rounds(
    sweep: &SweepFile,
    plans: &[SessionPlan],
    rounds: &[Vec<usize>],
    kept: &BTreeMap<usize, CaseResult>,
    pool: &mut Pool,
    runs: &mut BTreeMap<usize, CaseRun>,
    rec: &mut Recorder,
) -> Result<()> {
    let where_: BTreeMap<usize, (usize, usize)> = plans
        .iter()
        .enumerate()
        .flat_map(|(g, p)| p.case_ids.iter().enumerate().map(move |(i, &id)| (id, (g, i))))
        .collect();
    for round in rounds {
        rec.results.sweep.as_mut().expect("a sweep").rounds.push(Vec::new());
        for &id in round {
            let (g, index) = where_[&id];
            let (session, fresh) = pool.session(g)?;
            if fresh {
                for other in &plans[g].case_ids {
                    if let Some(r) = runs.get_mut(other) {
                        r.warm_again();
                    }
                }
            }
            let run = match runs.entry(id) {
                std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
                std::collections::btree_map::Entry::Vacant(v) => {
                    let before = kept.get(&id);
                    let mut r = session.start_case(index, before.map_or(0, |k| k.reps.len() as u32))?;
                    if let Some(k) = before {
                        r.rec.reps = k.reps.clone();
                        r.rec.warmups = k.warmup_reps.clone();
                    }
                    v.insert(r)
                }
            };
            while run.in_warmup() {
                session.next_rep(run, rec)?;
            }
            session.next_rep(run, rec)?;
            rec.results.sweep.as_mut().expect("a sweep").rounds.last_mut().expect("pushed").push(id);
            let mut result = CaseResult::from_record(&run.rec, plans[g].cfg.verify);
            let case = &sweep.cases[id];
            result.case_id = Some(id);
            result.case_label = (!case.label.is_empty()).then(|| case.label.clone());
            result.params = Some(case.params.clone());
            result.complete = run.is_done();
            rec.put_case(result)?;
            run.check_verified()?;
        }
    }
    Ok(())
}

/// Flags that still apply with a sweep file: where results go and what the run is called.
const FILE_FLAGS: &[&str] =
    &["file", "sets", "resume", "json", "csv", "md", "events", "fig", "lines", "out_dir", "label"];

/// With a sweep file the file says what to measure: a parameter flag given on the command line is refused, not
/// ignored, whatever its value (even the default's: `--reps 5`).
fn reject_parameter_flags(a: &SweepArgs) -> Result<()> {
    if let Some(id) = a.explicit.iter().find(|id| !FILE_FLAGS.contains(&id.as_str())) {
        bail_usage!(
            "--{}: with a sweep file, set parameters in the file or with --set key=value (e.g. --set reps=3 --set transport=tcp); only output flags (--json, --md, --csv, --events, --fig, --out-dir, --label) apply",
            id.replace('_', "-")
        );
    }
    Ok(())
}

/// Turn each group of cases sharing a connection configuration into a session plan, checked as `kvxfer sweep`
/// would check its flags.
fn plan_sessions(sweep: &SweepFile) -> Result<Vec<SessionPlan>> {
    let mut groups: Vec<(Params, Vec<usize>)> = Vec::new();
    for c in &sweep.cases {
        let key = session_key(&c.params);
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, ids)) => ids.push(c.id),
            None => groups.push((key, vec![c.id])),
        }
    }
    let file = sweep.path.display().to_string();
    let mut plans = Vec::new();
    for (_, ids) in groups {
        let first = &sweep.cases[ids[0]];
        let what = if first.label.is_empty() { describe(&first.params) } else { first.label.clone() };
        let plan = session_plan(sweep, &ids).map_err(|e| e.context(format!("{file}: case {what}")))?;
        plans.push(plan);
    }
    Ok(plans)
}

fn session_plan(sweep: &SweepFile, ids: &[usize]) -> Result<SessionPlan> {
    let first = &sweep.cases[ids[0]].params;
    let size_key = SIZE_KEYS.iter().find(|k| first.contains_key(**k)).expect("every case has one size key");
    let sizes: Vec<&str> = ids.iter().map(|&i| sweep.cases[i].params[*size_key].as_str()).collect();
    let mut args: Vec<String> = vec!["kvxfer".into(), "sweep".into()];
    args.extend(flags(first));
    args.extend([format!("--{size_key}"), sizes.join(",")]);
    args.extend(["--reps".into(), sweep.reps.to_string(), "--warmup".into(), sweep.warmup.to_string()]);
    let a = match Cli::try_parse_from(&args) {
        Ok(Cli { command: Command::Sweep(a) }) => a,
        Ok(_) => unreachable!("the arguments name the sweep subcommand"),
        Err(e) => {
            let text = e.to_string();
            let line = text.lines().next().unwrap_or("invalid parameter").trim_start_matches("error: ");
            bail_usage!("{line}");
        }
    };
    let (src, dst) = (a.src, a.dst);
    let Configured { cfg, model, timeouts } = configure(&a.sizes, &a.run, &[src, dst])?;
    let (device, peer_device) = loopback_devices(&a.device, &a.peer_device)?;
    check_host_support(&cfg, &[("src", src), ("dst", dst)], &[&device, &peer_device])?;
    Ok(SessionPlan { case_ids: ids.to_vec(), cfg, src, dst, device, peer_device, timeouts, model })
}

/// `config` of a sweep's results: the first session's, with every transport named when they differ (each case's
/// own configuration is in its `params`).
fn config_json(plans: &[SessionPlan]) -> ConfigJson {
    let p = &plans[0];
    let mut transports: Vec<String> = Vec::new();
    for q in plans {
        let name = q.cfg.transport.kind().to_string();
        if !transports.contains(&name) {
            transports.push(name);
        }
    }
    let null = serde_json::Value::Null;
    let mut config = ConfigJson::from_run(&p.cfg, p.model.clone(), "loopback", "sweep", p.dst.to_string(), null);
    config.transport = transports.join("+");
    config
}

/// Read a results file to resume: it must come from a sweep file, and every case in it must be one of this
/// sweep's (matched by the full parameter set), or resuming would mix two different sweeps.
fn resumable(path: &Path, sweep: &SweepFile) -> Result<Results> {
    let prev = Results::read(path).context("--resume")?;
    if prev.sweep.is_none() {
        bail_usage!(
            "--resume {}: not the results of a sweep file (no \"sweep\" key); --resume continues `kvxfer sweep FILE.toml`",
            path.display()
        );
    }
    for c in &prev.cases {
        let Some(params) = &c.params else {
            bail_usage!("--resume {}: a case has no parameters; was it written by an older kvxfer?", path.display());
        };
        if !sweep.cases.iter().any(|s| &s.params == params) {
            bail_usage!(
                "--resume {}: its case {} is not in {} (with these --set); resume with the same file and --set, or start afresh",
                path.display(),
                describe(params),
                sweep.path.display()
            );
        }
    }
    Ok(prev)
}
