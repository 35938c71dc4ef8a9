//! `kvxfer sweep --plan`: what a sweep would do (its cases, the bytes each moves, the memory each end allocates
//! and, from earlier results, how long it would take), worked out without the run's hardware, so that it answers
//! on a laptop or a login node. `--here` adds the checks the run itself makes on this host and lists every case
//! that would fail, with the reason.

use super::common::{check_host_support, check_memory};
use super::sweep_sessions::SessionPlan;
use crate::export::json::Results;
use crate::mem::MemKind;
use crate::plan::sizes::{format_size, format_tokens};
use crate::plan::SizeCase;
use crate::stats::interpolate::log_log;
use anyhow::Result;
use std::collections::BTreeMap;
use std::path::Path;

/// A sweep as `--plan` shows it, whichever way it was given (a sweep file or flags).
pub struct Sweep<'a> {
    /// The first line: its name, how many cases and sessions, reps, order.
    pub title: String,
    pub plans: &'a [SessionPlan],
    /// By case id: what sets the case apart from the others besides its size (empty when nothing does).
    pub labels: Vec<String>,
    pub reps: u32,
    pub warmup: u32,
}

/// One case's line of the plan.
struct Row {
    id: usize,
    label: String,
    tokens: Option<u64>,
    size: u64,
    /// Bytes moved over the case's measured reps and warm-ups.
    moved: u64,
    /// Each end's buffer: its session's (the largest transfer of the session, or its paged pool) and where it is.
    src: String,
    dst: String,
    /// Estimated time of the case's reps and warm-ups, marked when extrapolated; None without an estimate.
    estimate: Option<(f64, bool)>,
}

/// Print the plan of `sweep`; with `here`, check every case against this host as the run would, and fail listing
/// those that cannot run. `estimate_from` is a results file whose measured times estimate the run's.
pub fn show(sweep: &Sweep, here: bool, estimate_from: Option<&Path>) -> Result<()> {
    let curves = estimate_from.map(Curves::read).transpose()?;
    let rows = rows(sweep, curves.as_ref());
    crate::outln!("{}", sweep.title);
    let mut t = comfy_table::Table::new();
    t.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED).set_header([
        "case",
        "configuration",
        "tokens",
        "size",
        "moved",
        "src buffer",
        "dst buffer",
        "est. time",
    ]);
    for r in &rows {
        t.add_row([
            r.id.to_string(),
            if r.label.is_empty() { "-".into() } else { r.label.clone() },
            r.tokens.map_or_else(|| "-".into(), format_tokens),
            format_size(r.size),
            format_size(r.moved),
            r.src.clone(),
            r.dst.clone(),
            r.estimate
                .map_or_else(|| "-".into(), |(ms, x)| format!("{}{}", duration_text(ms), if x { " !" } else { "" })),
        ]);
    }
    crate::outln!("{t}");
    let moved: u64 = rows.iter().map(|r| r.moved).fold(0, u64::saturating_add);
    crate::outln!(
        "moves {} in all ({} measured rep(s) + {} warm-up per case)",
        format_size(moved),
        sweep.reps,
        sweep.warmup
    );
    crate::outln!("memory: {}", largest_session(sweep.plans));
    match &curves {
        None => crate::outln!(
            "time: no estimate; give --estimate-from RESULTS.json (measured results of the same transport) for one"
        ),
        Some(c) => print_estimate(c, sweep.plans, &rows),
    }
    if here {
        return check_here(sweep);
    }
    crate::outln!("nothing checked against this host; add --here to check its devices, drivers and memory");
    Ok(())
}

fn rows(sweep: &Sweep, curves: Option<&Curves>) -> Vec<Row> {
    let per_case = (sweep.reps + sweep.warmup) as u64;
    let mut rows: Vec<Row> = Vec::new();
    for p in sweep.plans {
        let buffer = format_size(p.cfg.buffer_bytes());
        let transport = p.cfg.transport.kind().to_string();
        for (case, &id) in p.cfg.cases.iter().zip(&p.case_ids) {
            let estimate =
                curves.and_then(|c| c.estimate(&transport, case.size_bytes)).map(|(ms, x)| (ms * per_case as f64, x));
            rows.push(Row {
                id,
                label: sweep.labels.get(id).cloned().unwrap_or_default(),
                tokens: case.tokens,
                size: case.size_bytes,
                moved: case.size_bytes.saturating_mul(per_case),
                src: format!("{buffer} {}", p.src),
                dst: format!("{buffer} {}", p.dst),
                estimate,
            });
        }
    }
    rows.sort_by_key(|r| r.id);
    rows
}

/// What the largest session allocates in host memory and on each GPU (sessions stay open together while they fit,
/// so this is what the sweep needs at the least).
fn largest_session(plans: &[SessionPlan]) -> String {
    let mut host = 0u64;
    let mut gpus: BTreeMap<u32, u64> = BTreeMap::new();
    for p in plans {
        let bytes = p.cfg.buffer_bytes();
        let mut h = 0u64;
        for kind in [p.src, p.dst] {
            match kind {
                MemKind::Gpu(n) => {
                    let g = gpus.entry(n).or_insert(0);
                    *g = (*g).max(bytes);
                }
                _ => h = h.saturating_add(bytes),
            }
        }
        host = host.max(h);
    }
    let mut parts: Vec<String> = Vec::new();
    if host > 0 {
        parts.push(format!("{} of host memory", format_size(host)));
    }
    parts.extend(gpus.iter().map(|(n, b)| format!("{} on gpu:{n}", format_size(*b))));
    format!("the largest session needs {} (both ends on this host)", parts.join(", "))
}

/// Measured time per transfer size, by transport: the p50 of each complete case of a results file.
struct Curves {
    file: String,
    by_transport: BTreeMap<String, Vec<(f64, f64)>>,
}

impl Curves {
    fn read(path: &Path) -> Result<Curves> {
        let r = Results::read(path).map_err(|e| e.context("--estimate-from"))?;
        // Several cases of one transport at one size (other knobs differing): their mean p50.
        let mut points: BTreeMap<String, BTreeMap<u64, Vec<f64>>> = BTreeMap::new();
        for c in r.cases.iter().filter(|c| c.sweep.complete && c.stats.n > 0 && c.stats.transfer_ms.p50 > 0.0) {
            let transport = c.sweep.params.as_ref().and_then(|p| p.get("transport")).unwrap_or(&r.config.transport);
            points.entry(transport.clone()).or_default().entry(c.size_bytes).or_default().push(c.stats.transfer_ms.p50);
        }
        let by_transport: BTreeMap<String, Vec<(f64, f64)>> = points
            .into_iter()
            .map(|(t, sizes)| {
                let curve = sizes.into_iter().map(|(s, ms)| (s as f64, ms.iter().sum::<f64>() / ms.len() as f64));
                (t, curve.collect())
            })
            .collect();
        if by_transport.is_empty() {
            crate::bail_usage!("--estimate-from {}: no complete measured case to estimate from", path.display());
        }
        Ok(Curves { file: path.display().to_string(), by_transport })
    }

    /// Time of one transfer of `size` bytes over `transport` in ms, and whether it lies outside the measured sizes.
    fn estimate(&self, transport: &str, size: u64) -> Option<(f64, bool)> {
        let (ms, basis) = log_log(self.by_transport.get(transport)?, size as f64)?;
        Some((ms, basis.is_extrapolated()))
    }
}

fn print_estimate(c: &Curves, plans: &[SessionPlan], rows: &[Row]) {
    let total: f64 = rows.iter().filter_map(|r| r.estimate.map(|e| e.0)).sum();
    let known: Vec<&String> = c.by_transport.keys().collect();
    let missing: Vec<String> = plans
        .iter()
        .map(|p| p.cfg.transport.kind().to_string())
        .filter(|t| !c.by_transport.contains_key(t))
        .fold(Vec::new(), |mut v, t| {
            if !v.contains(&t) {
                v.push(t);
            }
            v
        });
    let estimated = rows.iter().filter(|r| r.estimate.is_some()).count();
    if estimated == 0 {
        crate::outln!("time: no estimate: {} has no case of {}", c.file, missing.join(" or "));
        return;
    }
    crate::outln!(
        "time: about {} of transfers for {estimated} of {} cases (p50 per size of {} in {}, interpolated in log-log); connecting, allocating and --verify add to it",
        duration_text(total),
        rows.len(),
        known.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", "),
        c.file
    );
    if !missing.is_empty() {
        crate::outln!("time: no estimate for {}: {} has no such case", missing.join(", "), c.file);
    }
    if rows.iter().any(|r| r.estimate.is_some_and(|e| e.1)) {
        crate::outln!("! outside the measured sizes: extrapolated from the nearest two");
    }
}

/// `12 ms`, `4.2 s`, `3 min 20 s`, `2 h 5 min`.
fn duration_text(ms: f64) -> String {
    let s = ms / 1000.0;
    if s < 1.0 {
        format!("{ms:.0} ms")
    } else if s < 60.0 {
        format!("{s:.1} s")
    } else if s < 3600.0 {
        format!("{} min {} s", (s / 60.0).floor(), (s % 60.0).floor())
    } else {
        format!("{} h {} min", (s / 3600.0).floor(), ((s % 3600.0) / 60.0).floor())
    }
}

/// The run's own checks against this host, for every case: the devices and drivers its session needs, and the
/// memory the case's buffers need. Every case that would fail is listed; the command then fails (exit 1).
fn check_here(sweep: &Sweep) -> Result<()> {
    let mut failures: Vec<(usize, String)> = Vec::new();
    // What the memory check said, by what it depends on: a sweep of many cases reads this host's memory once per
    // distinct buffer, not once per case.
    let mut memory: BTreeMap<(u64, String, String, String), Option<String>> = BTreeMap::new();
    for p in sweep.plans {
        let host = check_host_support(&p.cfg, &[("src", p.src), ("dst", p.dst)], &[&p.device, &p.peer_device]);
        // Each case checked alone: the memory it needs is that of its own transfer (or the session's pool).
        let mut alone = p.cfg.clone();
        alone.cases.clear();
        for (case, &id) in p.cfg.cases.iter().zip(&p.case_ids) {
            alone.cases = vec![*case];
            let why = match &host {
                Err(e) => Some(format!("{e:#}")),
                Ok(()) => {
                    let paged = serde_json::to_string(&alone.paged).unwrap_or_default();
                    let key = (alone.buffer_bytes(), p.src.to_string(), p.dst.to_string(), paged);
                    let check = || check_memory(&alone, &[p.src, p.dst]).err().map(|e| format!("{e:#}"));
                    memory.entry(key).or_insert_with(check).clone()
                }
            };
            if let Some(why) = why {
                failures.push((id, format!("here: case {id} ({}) cannot run: {why}", case_name(sweep, id, case))));
            }
        }
    }
    failures.sort_by_key(|f| f.0);
    let cases = sweep.labels.len();
    if failures.is_empty() {
        crate::outln!("here: all {cases} cases can run on this host");
        return Ok(());
    }
    for (_, line) in &failures {
        crate::errln!("{line}");
    }
    crate::errln!("here: {} of {cases} cases cannot run on this host", failures.len());
    Err(crate::error::found(failures.len()))
}

/// A case as the failure list names it: its label and size.
fn case_name(sweep: &Sweep, id: usize, case: &SizeCase) -> String {
    let size = match case.tokens {
        Some(t) => format!("{} tokens, {}", format_tokens(t), format_size(case.size_bytes)),
        None => format_size(case.size_bytes),
    };
    match sweep.labels.get(id).filter(|l| !l.is_empty()) {
        Some(l) => format!("{l}, {size}"),
        None => size,
    }
}
