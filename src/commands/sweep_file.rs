//! `kvxfer sweep FILE.toml`: run a sweep file. Its cases are grouped into sessions (one per connection
//! configuration; see `sweep_sessions`), the measured reps run in the file's order (interleaved by default: each
//! round runs every case once, in a fresh seeded shuffle), and the results are saved after every rep, so an
//! interrupted sweep can be continued with `--resume`.

use super::common::{
    check_host_support, check_memory, configure_anywhere, default_outputs, loopback_devices, Configured,
};
use super::sweep_plan::{self, Sweep};
use super::sweep_sessions::{Pool, SessionPlan};
use crate::bail_usage;
use crate::cli::{sweep::file_keys, SweepArgs};
use crate::env::Env;
use crate::export::json::{ConfigJson, Results, Role, SessionJson, SweepCaseJson, SweepJson};
use crate::export::outputs::Outputs;
use crate::output::Recorder;
use crate::plan::order::schedule;
use crate::plan::sweep_file::{describe, session_key, varying_keys, Params, SweepFile, SIZE_KEYS};
use crate::run::sender::CaseRun;
use crate::stats::CaseResult;
use anyhow::Result;
use std::collections::BTreeMap;
use std::path::Path;

pub fn run(a: SweepArgs, file: &Path) -> Result<()> {
    reject_parameter_flags(&a)?;
    let sweep = SweepFile::load(file, &a.sets, &file_keys())?;
    // A plan is worked out anywhere (--here checks this host case by case); a run checks it before it starts.
    let plans = plan_sessions(&sweep, !a.plan)?;
    if a.plan {
        let need = vec![sweep.reps; sweep.cases.len()];
        let rounds = schedule(sweep.order, &need, sweep.seed);
        let title = format!(
            "sweep {}: {} cases in {} session(s), {} reps + {} warm-up each, {} rounds, order {} (seed {})",
            sweep.name,
            sweep.cases.len(),
            plans.len(),
            sweep.reps,
            sweep.warmup,
            rounds.len(),
            sweep.order.name(),
            sweep.seed
        );
        let labels = sweep.cases.iter().map(|c| c.label.clone()).collect();
        let shown = Sweep { title, plans: &plans, labels, reps: sweep.reps, warmup: sweep.warmup };
        return sweep_plan::show(&shown, a.here, a.estimate_from.as_deref());
    }
    let previous = a.resume.as_deref().map(|p| resumable(p, &sweep)).transpose()?;

    let mut out = a.out.outputs();
    if let Some(r) = &a.resume {
        out.json.get_or_insert_with(|| r.clone());
    }
    default_outputs(&mut out, &a.out_dir)?;
    measure(&a, &sweep, &plans, previous, &out)
}

/// Run the sweep's cases (those a resumed run still needs) and keep `out` current.
fn measure(
    a: &SweepArgs,
    sweep: &SweepFile,
    plans: &[SessionPlan],
    previous: Option<Results>,
    out: &Outputs,
) -> Result<()> {
    Recorder::check_outputs(out)?;

    let kept = kept_cases(previous.as_ref(), sweep);
    let need: Vec<u32> = sweep
        .cases
        .iter()
        .map(|c| sweep.reps.saturating_sub(kept.get(&c.id).map_or(0, |k| k.reps.len() as u32)))
        .collect();
    let done = need.iter().filter(|n| **n == 0).count();
    if previous.is_some() {
        crate::errln!(
            "resume: {done} of {} cases complete (skipped), {} partly measured (continued)",
            sweep.cases.len(),
            kept.len() - done
        );
    }

    let mut results = sweep_results(a, sweep, plans, previous)?;
    let s = results.sweep.as_mut().expect("a sweep's results");
    // A resumed run reshuffles with a seed of its own, still reproducible from the file's seed.
    let seed = sweep.seed.wrapping_add(s.resumed_at.len() as u64);
    let rounds = schedule(sweep.order, &need, seed);
    let verify = plans.iter().any(|p| p.cfg.knobs.verify);
    let total: u64 = need.iter().map(|&n| n as u64 + if n > 0 { sweep.warmup as u64 } else { 0 }).sum();
    crate::errln!(
        "sweep {}: {} cases in {} session(s), {} reps + {} warm-up each, order {} (seed {})",
        sweep.name,
        sweep.cases.len(),
        plans.len(),
        sweep.reps,
        sweep.warmup,
        sweep.order.name(),
        sweep.seed
    );
    let mut rec = Recorder::with_total(results, total, verify, out)?;
    rec.set_plan(sweep.cases.len(), true)?;
    for c in kept.values().filter(|c| c.sweep.complete) {
        rec.put_case(c.clone())?;
    }

    let mut pool = Pool::new(plans);
    let mut runs: BTreeMap<usize, CaseRun> = BTreeMap::new();
    let outcome = run_rounds(sweep, plans, &rounds, &kept, &mut pool, &mut runs, &mut rec);
    let closed = pool.close_all(&outcome);
    let s = rec.results.sweep.as_mut().expect("set above");
    s.session_opens += pool.opens;
    for (sj, d) in s.sessions.iter_mut().zip(&pool.details) {
        if let Some(d) = d {
            sj.dst_mem = d.dst_mem.clone();
            sj.transport_detail = d.transport_detail.clone();
            sj.numa = Some(d.numa.clone());
        }
    }
    let outcome = outcome.and(closed);
    rec.finish(outcome.as_ref().err())?;
    outcome
}

/// The cases of a results file being resumed, by case id (complete ones and the reps kept of the others).
fn kept_cases(previous: Option<&Results>, sweep: &SweepFile) -> BTreeMap<usize, CaseResult> {
    let mut kept = BTreeMap::new();
    for c in previous.map_or(&[][..], |p| &p.cases[..]) {
        let id = sweep.cases.iter().find(|s| Some(&s.params) == c.sweep.params.as_ref()).map(|s| s.id);
        kept.insert(id.expect("resumable() matched every case"), c.clone());
    }
    kept
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
                crate::errln!("warning: resume: this host differs from the interrupted run's: {d}");
            }
            prev.error = None;
            prev.interrupted = None;
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
                varying: Vec::new(),
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
    s.varying = varying_keys(sweep.cases.iter().map(|c| &c.params));
    s.sessions = plans
        .iter()
        .map(|p| SessionJson {
            case_ids: p.case_ids.clone(),
            transport: p.cfg.transport.kind().to_string(),
            src_mem: p.src.to_string(),
            dst_mem: p.dst.to_string(),
            transport_detail: serde_json::Value::Null,
            numa: None,
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
            let mut result = CaseResult::from_record(&run.rec, plans[g].cfg.knobs.verify);
            let case = &sweep.cases[id];
            result.sweep.case_id = Some(id);
            result.sweep.case_label = (!case.label.is_empty()).then(|| case.label.clone());
            result.sweep.params = Some(case.params.clone());
            result.sweep.complete = run.is_done();
            rec.put_case(result)?;
            run.check_verified()?;
        }
    }
    Ok(())
}

/// With a sweep file the file says what to measure: a parameter flag given on the command line is refused, not
/// ignored, whatever its value (even the default's: `--reps 5`).
fn reject_parameter_flags(a: &SweepArgs) -> Result<()> {
    if let Some(flag) = a.parameter_flag_given() {
        bail_usage!(
            "{flag}: with a sweep file, set parameters in the file or with --set key=value (e.g. --set reps=3 --set transport=tcp); only output flags (--json, --md, --csv, --events, --fig, --line, --out-dir, --label) apply"
        );
    }
    Ok(())
}

/// Turn each group of cases sharing a connection configuration into a session plan, checked as `kvxfer sweep`
/// would check its flags; with `check_host`, also against this host (its devices, drivers and memory).
fn plan_sessions(sweep: &SweepFile, check_host: bool) -> Result<Vec<SessionPlan>> {
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
        // The session's parameters, its sizes aside: what every case of it shares.
        let mut shared = first.params.clone();
        shared.retain(|k, _| !SIZE_KEYS.contains(&k.as_str()));
        let what = if first.label.is_empty() { describe(&shared) } else { first.label.clone() };
        let plan = session_plan(sweep, &ids).map_err(|e| e.context(format!("{file}: case {what}")))?;
        if check_host {
            // The buffers are as large as the session's largest transfer: that case is the one that needs them.
            let largest = (plan.cfg.cases.iter().zip(&plan.case_ids).max_by_key(|(c, _)| c.size_bytes))
                .map_or(ids[0], |(_, &id)| id);
            check_memory(&plan.cfg, &[plan.src, plan.dst])
                .map_err(|e| e.context(format!("{file}: case {}", describe(&sweep.cases[largest].params))))?;
            let ends = [("src", plan.src), ("dst", plan.dst)];
            check_host_support(&plan.cfg, &ends, &[&plan.device, &plan.peer_device])
                .map_err(|e| e.context(format!("{file}: case {what}")))?;
        }
        plans.push(plan);
    }
    Ok(plans)
}

/// The `kvxfer sweep` arguments of one session: `params` (its first case's; sizes excepted), the session's sizes
/// and the file's reps, read into the struct the command line fills, each value by its flag's own parser. A bad
/// value is named by its key.
fn session_args(params: &Params, size_key: &str, sizes: &[&str], reps: u32, warmup: u32) -> Result<SweepArgs> {
    let sizes = sizes.join(",");
    let (reps, warmup) = (reps.to_string(), warmup.to_string());
    let given = params.iter().filter(|(k, _)| !SIZE_KEYS.contains(&k.as_str())).map(|(k, v)| (k.as_str(), v.as_str()));
    let extra = [(size_key, sizes.as_str()), ("reps", reps.as_str()), ("warmup", warmup.as_str())];
    let entries: Vec<(&str, &str)> = given.chain(extra).collect();
    SweepArgs::from_texts(&entries).map_err(|e| crate::error::usage(e.to_string()))
}

fn session_plan(sweep: &SweepFile, ids: &[usize]) -> Result<SessionPlan> {
    let first = &sweep.cases[ids[0]].params;
    let size_key = SIZE_KEYS.iter().find(|k| first.contains_key(**k)).expect("every case has one size key");
    let sizes: Vec<&str> = ids.iter().map(|&i| sweep.cases[i].params[*size_key].as_str()).collect();
    let a = session_args(first, size_key, &sizes, sweep.reps, sweep.warmup)?;
    let (src, dst) = (a.src, a.dst);
    let Configured { cfg, model, timeouts } = configure_anywhere(&a.sizes, &a.run, &[src, dst])?;
    let (device, peer_device) = loopback_devices(&a.device, &a.peer_device)?;
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
    let mut config =
        super::common::results_config(&p.cfg, p.model.clone(), "loopback", Role::Sweep, p.dst.to_string(), null);
    config.transport = transports.join("+");
    config
}

/// Read a results file to resume: it must come from a sweep file, and every case in it must be one of this
/// sweep's (matched by the full parameter set), or resuming would mix two different sweeps.
fn resumable(path: &Path, sweep: &SweepFile) -> Result<Results> {
    let prev = super::resume::read_resumed(path)?;
    if prev.sweep.is_none() {
        bail_usage!(
            "--resume {}: not the results of a sweep file (no \"sweep\" key); a flag-driven sweep's results resume with that sweep's own flags (kvxfer sweep --sizes … --resume FILE)",
            path.display()
        );
    }
    for c in &prev.cases {
        let Some(params) = &c.sweep.params else {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A sweep file's case of `key = value`, as `session_args` builds it (the size and reps as given).
    fn from_file(key: &str, value: &str) -> Result<SweepArgs> {
        let params: Params = [(key.to_string(), value.to_string())].into_iter().collect();
        session_args(&params, "sizes", &["1MiB"], 5, 1)
    }

    #[test]
    fn a_bad_value_in_a_file_is_a_usage_error_naming_the_key() {
        for (key, value, needle) in [
            ("streams", "two", "streams = \"two\""),
            ("block_size", "2MB", "use MiB"),
            ("transport", "carrier-pigeon", "unknown transport; choose one of auto, tcp"),
            ("ack_timeout", "40", "not in 1..=31"),
            ("tclass", "256", "not a traffic class in 0..=255"),
            ("sl", "16", "not a service level in 0..=15"),
            ("src", "gpu:x", "gpu:N"),
            ("connect_timeout", "soon", "positive duration"),
        ] {
            let e = from_file(key, value).unwrap_err();
            assert_eq!(crate::error::exit_code(&e), 2, "{e}");
            assert!(e.to_string().contains(needle), "{key} = {value}: {e}");
        }
    }

    #[test]
    fn a_file_sets_the_verbs_class_of_service_and_registration_knobs() {
        // The first transport with flags is verbs; its knobs as they travel.
        let knob = |key: &str, value: &str, knob: &str| {
            let a = from_file(key, value).unwrap();
            serde_json::to_value(&a.run.transport_knobs()[0]).unwrap()["knobs"][knob].clone()
        };
        assert_eq!(knob("tclass", "106", "tclass"), 106);
        assert_eq!(knob("sl", "5", "sl"), 5);
        assert_eq!(knob("no_relaxed_ordering", "true", "relaxed_ordering"), false);
        assert_eq!(knob("odp", "true", "odp"), true);
    }

    #[test]
    fn every_shipped_sweep_file_parses_and_its_sessions_take_their_flags() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("sweeps");
        let mut names = Vec::new();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let p = entry.unwrap().path();
            if p.extension().is_some_and(|e| e == "toml") {
                let f = SweepFile::load(&p, &[], &file_keys()).unwrap_or_else(|e| panic!("{}: {e:#}", p.display()));
                assert!(!f.cases.is_empty(), "{}", p.display());
                for c in &f.cases {
                    let size_key = SIZE_KEYS.iter().find(|k| c.params.contains_key(**k)).unwrap();
                    let a = session_args(&c.params, size_key, &[&c.params[*size_key]], f.reps, f.warmup)
                        .unwrap_or_else(|e| panic!("{}: {}: {e:#}", p.display(), describe(&c.params)));
                    assert_eq!((a.run.reps, a.run.warmup), (f.reps, f.warmup));
                }
                names.push(p.file_stem().unwrap().to_string_lossy().into_owned());
            }
        }
        names.sort();
        assert_eq!(
            names,
            ["engines", "engines-gpu", "mb2", "mr-cliff", "nvlink-vs-nic", "paged-nvlink", "paged-rdma", "smoke"]
        );
    }
}
