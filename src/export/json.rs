//! The results JSON (`kvxfer/results/v1`): the contract users script against. Extend, never rename.

use super::Exporter;
use crate::env::Env;
use crate::measure::Json;
use crate::named::named_enum;
use crate::stats::CaseResult;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

pub const SCHEMA: &str = "kvxfer/results/v1";

named_enum! {
    /// Which command measured a run (`config.role` of its results).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Role {
        Send = "send",
        // On loopback: the receiver runs in this process, unless its transport needs one of its own.
        Sweep = "sweep",
        Cluster = "cluster",
    }
}

/// `config.numa` is two things by one name: `--numa` (a flattened knob, written when not `auto`) and where each end
/// was placed (which records that mode too). A file holds the placement when there is one, the mode alone
/// otherwise, never both (a JSON object with one key twice).
fn config_numa_once<S: serde::Serializer>(config: &ConfigJson, s: S) -> Result<S::Ok, S::Error> {
    if config.numa.is_some() && config.knobs.numa != crate::plan::NumaMode::default() {
        let mut once = config.clone();
        once.knobs.numa = crate::plan::NumaMode::default();
        return once.serialize(s);
    }
    config.serialize(s)
}

/// Take `config.numa` out of a results file's JSON when it is the `--numa` mode alone (a string or node number)
/// rather than the placement, and return that mode.
fn numa_mode_alone(results: &mut serde_json::Value) -> Result<Option<crate::plan::NumaMode>, String> {
    let Some(config) = results.get_mut("config").and_then(|c| c.as_object_mut()) else { return Ok(None) };
    if config.get("numa").is_none_or(|n| n.is_object() || n.is_null()) {
        return Ok(None);
    }
    let text = config.remove("numa").expect("checked above");
    serde_json::from_value(text).map(Some).map_err(|e| e.to_string())
}

/// Take `config.numa` out of a results file's ordered JSON (where [`numa_mode_alone`] found the mode alone).
fn without_config_numa(results: &mut Json) {
    if let Json::Object(top) = results {
        if let Some(Json::Object(config)) = top.get_mut("config") {
            config.retain(|k| k != "numa");
        }
    }
}

/// `config` in the results file: the run configuration as the user set it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConfigJson {
    pub transport: String,
    #[serde(flatten)]
    pub knobs: crate::plan::RunKnobs,
    pub model: Option<String>,
    pub peer: String,
    /// A [`Role`]'s name (read back as any text, so a results file never fails to load on it).
    pub role: String,
    /// The cuda transport's `--copy` (its default for the others, as results v1 has always written it).
    #[serde(default)]
    pub copy: String,
    /// The cuda transport's `--staging`: `none` or `gather`.
    #[serde(default)]
    pub staging: String,

    #[serde(default)]
    pub src_mem: String,
    #[serde(default)]
    pub dst_mem: String,
    /// The verbs transport's knobs, when it ran (an object of its own, in its order).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verbs: Option<crate::measure::Fields>,
    /// What each end's transport chose and measured while connecting (device, GID, MTU, registration...).
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub transport_detail: serde_json::Value,
    /// Where each end bound its thread and buffers (`--numa`): node, CPUs, why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa: Option<crate::observe::numa::NumaSides>,
    /// What the run measured, when not bandwidth: `latency` (`kvxfer latency`: each case's reps are ping-pongs,
    /// its `latency_us` their quantiles). Absent for bandwidth runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// `--bidir`: both ends sent at once, each case's `reverse_gbps` and `aggregate_gbps` say how fast. Absent for
    /// one-way runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bidir: Option<bool>,
    /// `kvxfer latency` against the receiver it started: the CPUs each end's thread was kept on. Absent when the
    /// ends ran apart (`--peer`, a receiver in a process of its own) or the process had one CPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ping_pong_cpus: Option<crate::observe::numa::PingPongCpus>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Results {
    pub schema: String,
    pub kvxfer_version: String,
    pub started_at: String,
    pub label: String,
    pub env: serde_json::Value,
    #[serde(serialize_with = "config_numa_once")]
    pub config: ConfigJson,
    pub cases: Vec<CaseResult>,
    /// Steady-state bandwidth (GB/s) over the sizes where p50 is flat (see `stats::ceiling`); null when none.
    #[serde(default)]
    pub ceiling_gbps: Option<f64>,
    /// Why there is no ceiling though the p50s are flat: the flat run's cases are too noisy (see `stats::ceiling`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_ceiling: Option<String>,
    /// Set when the run stopped early; the cases above are complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// False while the run goes on (the file is rewritten as cases complete) and when it stopped early (`error`
    /// says why, unless the process was killed); files written before this key read as complete.
    #[serde(default = "complete")]
    pub complete: bool,
    /// A run of a sweep file (`kvxfer sweep FILE.toml`): its cases, sessions and the order reps actually ran in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep: Option<SweepJson>,
    /// A cluster run (`kvxfer cluster`): its pattern, ranks and the aggregates of concurrent steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<crate::stats::cluster::ClusterJson>,
    /// Set when a signal (Ctrl-C, SIGTERM, SIGHUP) stopped the run: which, when, and where.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<Interruption>,
    /// A replay (`kvxfer replay`): its workload, each load's requests and summary, and the knee.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<crate::stats::replay::ReplayJson>,
}

/// `interrupted` in the results file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Interruption {
    /// `SIGINT`, `SIGTERM` or `SIGHUP`.
    pub signal: String,
    pub at: String,
    /// Cases complete in `cases`, of the cases the run was asked to measure.
    pub cases_done: usize,
    pub cases_total: usize,
    /// The case being measured when the signal came and the reps it had finished; its reps are not in `cases`
    /// unless the run saves partly measured cases (a sweep file's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measuring: Option<String>,
    /// The command that continues the run where it stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<String>,
}

/// `sweep` in the results file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SweepJson {
    pub file: String,
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    /// `interleaved`, `random` or `sequential`, and the seed its shuffles came from.
    pub order: String,
    pub seed: u64,
    pub reps: u32,
    pub warmup: u32,
    /// The `--set key=value` overrides applied to the file.
    #[serde(default)]
    pub sets: Vec<String>,
    /// Every case of the sweep, by `case_id`: its name and parameters (cases[] holds those measured so far).
    pub case_list: Vec<SweepCaseJson>,
    /// The parameters whose values differ across the file's cases (sizes aside), in key order: the columns that
    /// tell its cases apart (`param_<key>` in the CSV). Files written before this key derive it from `case_list`.
    #[serde(default)]
    pub varying: Vec<String>,
    /// One per distinct connection configuration: the cases it measures and what its transport reported.
    pub sessions: Vec<SessionJson>,
    /// Measured reps in the order they ran, as rounds of case ids (interleaved: one round runs each case once;
    /// random and sequential: one round). A case's warm-up reps run right before its first measured rep in a
    /// session. A resumed run appends its own rounds.
    pub rounds: Vec<Vec<usize>>,
    /// When `--resume` continued this file.
    #[serde(default)]
    pub resumed_at: Vec<String>,
    /// Sessions opened, counting reopenings (when all sessions' buffers do not fit at once, the least recently
    /// used session is closed and reopened later, warming its cases up again).
    #[serde(default)]
    pub session_opens: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SweepCaseJson {
    pub case_id: usize,
    pub label: String,
    pub params: std::collections::BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionJson {
    pub case_ids: Vec<usize>,
    pub transport: String,
    pub src_mem: String,
    pub dst_mem: String,
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub transport_detail: serde_json::Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa: Option<crate::observe::numa::NumaSides>,
}

fn complete() -> bool {
    true
}

impl Results {
    /// This run with other cases (a subset of its own): every field cloned but the cases, which a 1,000-rank run
    /// has hundreds of thousands of.
    pub fn with_cases(&self, cases: Vec<CaseResult>) -> Results {
        Results {
            schema: self.schema.clone(),
            kvxfer_version: self.kvxfer_version.clone(),
            started_at: self.started_at.clone(),
            label: self.label.clone(),
            env: self.env.clone(),
            config: self.config.clone(),
            cases,
            ceiling_gbps: self.ceiling_gbps,
            no_ceiling: self.no_ceiling.clone(),
            error: self.error.clone(),
            complete: self.complete,
            sweep: self.sweep.clone(),
            cluster: self.cluster.clone(),
            interrupted: self.interrupted.clone(),
            replay: self.replay.clone(),
        }
    }

    pub fn new(label: String, env: &Env, config: ConfigJson) -> Results {
        Results {
            schema: SCHEMA.into(),
            kvxfer_version: env!("CARGO_PKG_VERSION").into(),
            started_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            label,
            env: serde_json::to_value(env).expect("env serializes"),
            config,
            cases: Vec::new(),
            ceiling_gbps: None,
            no_ceiling: None,
            error: None,
            complete: false,
            sweep: None,
            cluster: None,
            interrupted: None,
            replay: None,
        }
    }

    /// The replay section of a replay's file (a replay has no cases of its own: its numbers are its loads').
    pub fn replay_run(&self) -> Option<&crate::stats::replay::ReplayJson> {
        self.replay.as_ref().filter(|_| self.cases.is_empty())
    }

    /// What a reader must know first when these results are not a finished run: why they stopped and how to go
    /// on; `None` for a complete run.
    pub fn incomplete_note(&self) -> Option<String> {
        if self.complete {
            return None;
        }
        let resume = |i: &Interruption| i.resume.as_ref().map(|c| format!("; resume with: {c}")).unwrap_or_default();
        Some(match (&self.interrupted, &self.error) {
            (Some(i), _) => format!(
                "INCOMPLETE: interrupted by {} after {} of {} cases{}",
                i.signal,
                i.cases_done,
                i.cases_total,
                resume(i)
            ),
            (None, Some(e)) => format!("INCOMPLETE: the run stopped early: {e}"),
            (None, None) => format!(
                "INCOMPLETE: {} case(s) so far; the run was still going when this was written, or was killed",
                self.cases.len()
            ),
        })
    }

    /// The file's bytes: pretty JSON and a final newline.
    pub fn to_json(&self) -> Result<Vec<u8>> {
        let mut bytes = serde_json::to_vec_pretty(self)?;
        bytes.push(b'\n');
        Ok(bytes)
    }

    /// Read a results file; errors are usage errors naming the file.
    pub fn read(path: &Path) -> Result<Results> {
        let text = crate::plan::input::read_text(path, "the results file")?;
        Results::parse(path, &text)
    }

    /// A results file's text, as [`Results::read`] reads it (`path` names it in errors).
    pub fn parse(path: &Path, text: &str) -> Result<Results> {
        // Straight from the text into the types: the common case, and the fast one (a 100,000-case file is 200 MB).
        // Everything else (another schema, not JSON, an older file's `config.numa`, a malformed key) takes the
        // slow path below, which finds and words what is wrong.
        if let Ok(r) = serde_json::from_str::<Results>(text) {
            if r.schema == SCHEMA {
                return Ok(r.with_numa_mode(None));
            }
        }
        let mut v: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| crate::error::usage(format!("{}: not valid JSON: {e}", path.display())))?;
        match v.get("schema").and_then(|s| s.as_str()) {
            Some(SCHEMA) => {}
            Some(other) => bail!(crate::error::usage(format!(
                "{}: schema {other:?} is not {SCHEMA}; was it written by a newer kvxfer?",
                path.display()
            ))),
            None => {
                bail!(crate::error::usage(format!("{}: not a kvxfer results file (no \"schema\")", path.display())))
            }
        }
        let mode = numa_mode_alone(&mut v)
            .map_err(|e| crate::error::usage(format!("{}: malformed results: config.numa: {e}", path.display())))?;
        // Read from the text as ordered JSON, not from the `Value`: a transport's extras keep the order the file
        // holds them in (a `Value` sorts keys). The `Value` names what is malformed as it always has.
        let mut ordered: Json = serde_json::from_str(text).expect("the text parsed as a Value above");
        if mode.is_some() {
            without_config_numa(&mut ordered);
        }
        let r: Results = match ordered.read() {
            Ok(r) => r,
            Err(_) => serde_json::from_value(v)
                .map_err(|e| crate::error::usage(format!("{}: malformed results: {e}", path.display())))
                .context("reading results")?,
        };
        Ok(r.with_numa_mode(mode))
    }

    /// The file as read, with the `--numa` mode restored among the knobs (from the placement, which records it, or
    /// from `mode`, a file's mode written alone) and what older files lack derived.
    fn with_numa_mode(mut self, mode: Option<crate::plan::NumaMode>) -> Results {
        self.config.knobs.numa = match &self.config.numa {
            Some(sides) => sides.sender.mode,
            None => mode.unwrap_or_default(),
        };
        self.fill_derived();
        self
    }

    /// Recompute the ceiling from the cases (after each size, so the file always carries it). A sweep over
    /// several configurations has no single ceiling: each has its own curve.
    pub fn update_ceiling(&mut self) {
        let verdict = match &self.sweep {
            Some(s) if s.sessions.len() > 1 => crate::stats::CeilingVerdict::NoPlateau,
            _ => crate::stats::ceiling::verdict(&self.cases),
        };
        self.ceiling_gbps = match verdict {
            crate::stats::CeilingVerdict::Ceiling(c) => Some(c.gbps),
            _ => None,
        };
        self.no_ceiling = verdict.refusal();
    }

    /// One series per configuration: a sweep file's cases split by their name (a plain run is one series).
    pub fn series(&self) -> Vec<(String, Results)> {
        let mut names: Vec<String> = Vec::new();
        for c in &self.cases {
            let n = c.sweep.case_label.clone().unwrap_or_default();
            if !names.contains(&n) {
                names.push(n);
            }
        }
        if names.len() <= 1 {
            return vec![(self.label.clone(), self.clone())];
        }
        names
            .into_iter()
            .map(|n| {
                let mut r = self.clone();
                r.cases.retain(|c| c.sweep.case_label.as_deref().unwrap_or_default() == n);
                r.sweep = None;
                r.update_ceiling();
                r.label = format!("{} {n}", self.label);
                (r.label.clone(), r)
            })
            .collect()
    }

    /// The series of one run's figures: its configurations named by their case names alone (the run's label is
    /// the same for all of them and would crowd the legend), or the run itself under its label.
    pub fn figure_series(&self) -> Vec<(String, Results)> {
        let prefix = format!("{} ", self.label);
        let parts = self.series();
        if parts.len() == 1 {
            return parts;
        }
        parts.into_iter().map(|(n, r)| (n.strip_prefix(&prefix).unwrap_or(&n).to_string(), r)).collect()
    }

    /// The parameters that tell a sweep file's cases apart (empty for any other run).
    pub fn varying_params(&self) -> Vec<String> {
        match &self.sweep {
            Some(s) if s.varying.is_empty() => {
                crate::plan::sweep_file::varying_keys(s.case_list.iter().map(|c| &c.params))
            }
            Some(s) => s.varying.clone(),
            None => Vec::new(),
        }
    }

    /// The transport that measured `case`: its sweep session's (what `auto` resolved to), else its parameter, else
    /// the run's.
    pub fn case_transport(&self, case: &CaseResult) -> String {
        let session = self
            .sweep
            .as_ref()
            .zip(case.sweep.case_id)
            .and_then(|(s, id)| s.sessions.iter().find(|p| p.case_ids.contains(&id)).map(|p| p.transport.clone()));
        session
            .or_else(|| case.sweep.params.as_ref().and_then(|p| p.get("transport").cloned()))
            .unwrap_or_else(|| self.config.transport.clone())
    }

    /// Files written before bimodality and the ceiling existed lack them; derive both from what they do hold.
    fn fill_derived(&mut self) {
        self.cases = std::mem::take(&mut self.cases).into_iter().map(CaseResult::with_derived).collect();
        if self.ceiling_gbps.is_none() {
            self.update_ceiling();
        }
    }
}

/// `--json`: the results file of one run.
pub struct JsonExporter;

impl Exporter for JsonExporter {
    fn serialize(&self, runs: &[Results]) -> Result<Vec<u8>> {
        match runs {
            [run] => run.to_json(),
            _ => bail!("a results JSON holds one run, not {}", runs.len()),
        }
    }
}
