//! Why some reps were slow: the counters whose per-rep deltas separate a case's slow reps from its fast ones.
//! Reps are split into the bimodal test's two modes when the case is bimodal, else at the largest gap between
//! sorted rates when its CV is high; a counter separates them when every slow rep moved it more (or less) than
//! every fast rep and the groups' means differ by at least half the larger. The verdict names them with per-rep
//! means ("slow: receiver rdma rxeA:1 out_of_seq_request +1,402/rep, fast: +0"), or says that nothing does.
//!
//! Run-queue wait, preemptions and other processes' CPU time (see `observe::contention`) are counters like the
//! others and are named in words ("slow reps waited 14 ms on the run queue"); when the slow reps ran on a busy host
//! the verdict says so too ("host busy: load 2.9 on 2 CPUs"), whether or not a counter separates them. The load
//! average and CPU count describe the host, not a rep, and never separate reps; other processes' CPU time, softirq
//! and steal time and preemptions pile up with a rep's length at a steady level, so they separate reps only per ms
//! of rep. Run-queue wait is compared whole: a rep that waited 14 ms longer for a CPU lost those 14 ms.
//!
//! CPU time is left out: a polled transfer burns CPU for as long as it runs, so a slow rep always used more, which
//! says nothing about why. The half-the-larger rule keeps out counters that move a little with every rep (a
//! control message more or less on the loopback interface: +3 vs +2 packets, seen on the 2×H200).

use super::modes::Bimodality;
use super::warnings::MAX_CV;
use crate::named::named_enum;
use crate::observe::contention::{
    GAUGES, INVOLUNTARY_SWITCHES, OTHERS_CPU_US, RUN_QUEUE_WAIT_US, SOFTIRQ_US, STEAL_US,
};
use crate::observe::counters::Deltas;
use crate::run::RepRecord;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Fewest reps worth splitting.
const MIN_REPS: usize = 4;
/// The groups' means must differ by this fraction of the larger.
const MIN_RELATIVE_GAP: f64 = 0.5;
/// Counters that grow with a rep's duration whatever slowed it.
const CONSEQUENCES: &[&str] = &["cpu_us"];
/// Host activity a rep sees more of the longer it lasts, at a steady level: compared per ms of rep.
const PER_MS: &[&str] = &[OTHERS_CPU_US, SOFTIRQ_US, STEAL_US, INVOLUNTARY_SWITCHES];
/// At most this many counters are named.
const MOST_NAMED: usize = 5;

named_enum! {
    /// How a case's reps were split into slow and fast.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Split {
        // The bimodal test's two modes.
        BimodalModes = "bimodal modes",
        // The largest ratio between neighbouring reps in rate order (a spread case).
        LargestGap = "largest gap",
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attribution {
    pub split: Split,
    /// Rep numbers (`reps[].i`) of each group.
    pub slow_reps: Vec<u32>,
    pub fast_reps: Vec<u32>,
    /// The counters that separate the groups, strongest first.
    pub counters: Vec<Separator>,
    /// One line for tables and logs.
    pub verdict: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Separator {
    pub source: String,
    pub name: String,
    pub slow_per_rep: f64,
    pub fast_per_rep: f64,
}

/// Each counter's mean delta per measured rep (absent = 0), for the case summary; None without counters.
pub fn means(reps: &[RepRecord]) -> Option<Deltas> {
    let with: Vec<&Deltas> = reps.iter().filter_map(|r| r.counters.as_ref()).collect();
    if with.is_empty() {
        return None;
    }
    let mut sums: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    for d in &with {
        for (source, m) in d.iter() {
            for (name, v) in m {
                *sums.entry(source.clone()).or_default().entry(name.clone()).or_default() += v;
            }
        }
    }
    let n = with.len() as u64;
    Some(sums.into_iter().map(|(s, m)| (s, m.into_iter().map(|(k, v)| (k, v / n)).collect())).collect())
}

/// CPU seconds per GiB moved, by process source (`sender process`, `receiver process`, `process (both ends)`).
pub fn cpu_s_per_gib(reps: &[RepRecord], size_bytes: u64) -> Option<BTreeMap<String, f64>> {
    let means = means(reps)?;
    let gib = size_bytes as f64 / (1u64 << 30) as f64;
    let out: BTreeMap<String, f64> =
        means.iter().filter_map(|(source, m)| Some((source.clone(), *m.get("cpu_us")? as f64 / 1e6 / gib))).collect();
    (!out.is_empty() && gib > 0.0).then_some(out)
}

/// The attribution of a case whose reps are bimodal or spread (CV above the warning's), when its reps carry
/// counters.
pub fn attribute(reps: &[RepRecord], bimodal: &Bimodality, cv: Option<f64>) -> Option<Attribution> {
    if reps.len() < MIN_REPS || reps.iter().any(|r| r.counters.is_none()) {
        return None;
    }
    let mut by_rate: Vec<&RepRecord> = reps.iter().collect();
    by_rate.sort_by(|a, b| a.gbps.total_cmp(&b.gbps));
    let (split, slow_count) = if bimodal.is_bimodal && bimodal.counts.len() == 2 {
        (Split::BimodalModes, bimodal.counts[0])
    } else if cv.is_some_and(|cv| cv > MAX_CV) {
        // The largest ratio between neighbours in rate order.
        let cut = (1..by_rate.len())
            .max_by(|&a, &b| {
                let gap = |i: usize| by_rate[i].gbps / by_rate[i - 1].gbps.max(f64::MIN_POSITIVE);
                gap(a).total_cmp(&gap(b))
            })
            .unwrap_or(1);
        (Split::LargestGap, cut)
    } else {
        return None;
    };
    if slow_count == 0 || slow_count >= by_rate.len() {
        return None;
    }
    let (slow, fast) = by_rate.split_at(slow_count);
    let keys: BTreeSet<(String, String)> = reps
        .iter()
        .filter_map(|r| r.counters.as_ref())
        .flat_map(|d| d.iter().flat_map(|(s, m)| m.keys().map(move |k| (s.clone(), k.clone()))))
        .filter(|(_, k)| !CONSEQUENCES.contains(&k.as_str()) && !GAUGES.contains(&k.as_str()))
        .collect();
    let mut counters: Vec<(f64, Separator)> = keys.iter().filter_map(|key| separator(key, slow, fast)).collect();
    // Strongest first: counters that moved in one group only, then by relative gap.
    counters.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.name.cmp(&b.1.name)));
    let counters: Vec<Separator> = counters.into_iter().take(MOST_NAMED).map(|(_, s)| s).collect();
    let head = format!("{} slow of {} reps", slow.len(), reps.len());
    let mut verdict = if counters.is_empty() {
        format!("{head}: no counter separates them from the fast ones")
    } else {
        let named: Vec<String> = counters.iter().map(describe).collect();
        format!("{head}; slow vs fast: {}", named.join("; "))
    };
    if let Some(busy) = super::host::context(slow) {
        verdict = format!("{verdict}; {busy}");
    }
    let numbers = |group: &[&RepRecord]| {
        let mut v: Vec<u32> = group.iter().map(|r| r.i).collect();
        v.sort_unstable();
        v
    };
    Some(Attribution { split, slow_reps: numbers(slow), fast_reps: numbers(fast), counters, verdict })
}

/// Whether the counter `key` keeps every slow rep apart from every fast rep, with its strength (the groups'
/// relative gap). Counters of host activity that accrue with a rep's duration at a steady level ([`PER_MS`]) are
/// compared per ms of rep: a rep made slow by anything else saw more of them only because it lasted longer.
fn separator(key: &(String, String), slow: &[&RepRecord], fast: &[&RepRecord]) -> Option<(f64, Separator)> {
    let raw = |r: &RepRecord| r.counters.as_ref().and_then(|d| d.get(&key.0)?.get(&key.1).copied()).unwrap_or(0) as f64;
    let per_ms = PER_MS.contains(&key.1.as_str());
    let compared = |r: &RepRecord| if per_ms { raw(r) / r.total_ms.max(f64::MIN_POSITIVE) } else { raw(r) };
    let (sv, fv): (Vec<f64>, Vec<f64>) =
        (slow.iter().map(|r| compared(r)).collect(), fast.iter().map(|r| compared(r)).collect());
    let ((s_min, s_max), (f_min, f_max)) = (min_max(&sv), min_max(&fv));
    let apart = s_min > f_max || s_max < f_min;
    let gap = (mean(&sv) - mean(&fv)).abs() / mean(&sv).max(mean(&fv));
    let per_rep = |group: &[&RepRecord]| mean(&group.iter().map(|r| raw(r)).collect::<Vec<_>>());
    (apart && gap >= MIN_RELATIVE_GAP).then(|| {
        let sep = Separator {
            source: key.0.clone(),
            name: key.1.clone(),
            slow_per_rep: per_rep(slow),
            fast_per_rep: per_rep(fast),
        };
        (gap, sep)
    })
}

/// One separating counter in words: contention counters say what they mean, others give their per-rep deltas.
fn describe(c: &Separator) -> String {
    let (slow, fast) = (c.slow_per_rep, c.fast_per_rep);
    match c.name.as_str() {
        RUN_QUEUE_WAIT_US => {
            format!("{}: slow reps waited {} on the run queue, fast ones {}", c.source, micros(slow), micros(fast))
        }
        INVOLUNTARY_SWITCHES => {
            format!("{}: preempted {}/rep vs {}", c.source, thousands(slow), thousands(fast))
        }
        OTHERS_CPU_US => format!("{}: other processes used {} of CPU/rep vs {}", c.source, micros(slow), micros(fast)),
        SOFTIRQ_US => format!("{}: softirqs took {} of CPU/rep vs {}", c.source, micros(slow), micros(fast)),
        STEAL_US => format!("{}: the hypervisor stole {} of CPU/rep vs {}", c.source, micros(slow), micros(fast)),
        _ => format!("{} {} +{}/rep vs +{}", c.source, c.name, thousands(slow), thousands(fast)),
    }
}

/// A time in µs as people read it: "1.4 s", "14 ms", "1.2 ms", "350 µs".
fn micros(us: f64) -> String {
    match us {
        u if u >= 1_000_000.0 => format!("{:.1} s", u / 1e6),
        u if u >= 10_000.0 => format!("{:.0} ms", u / 1e3),
        u if u >= 1_000.0 => format!("{:.1} ms", u / 1e3),
        u => format!("{u:.0} µs"),
    }
}

fn min_max(v: &[f64]) -> (f64, f64) {
    v.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| (a.min(x), b.max(x)))
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// A per-rep mean as counters read: whole numbers with thousands separators, small ones with one decimal.
fn thousands(x: f64) -> String {
    if x < 10.0 && x.fract() != 0.0 {
        return format!("{x:.1}");
    }
    let digits = format!("{:.0}", x);
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rep(i: u32, gbps: f64, counters: &[(&str, &str, u64)]) -> RepRecord {
        let mut r: RepRecord = serde_json::from_str(&format!(
            r#"{{"i":{i},"transfer_ms":1.0,"gbps":{gbps},"setup_ms":0.1,"notify_ms":0.2,"total_ms":1.5}}"#
        ))
        .unwrap();
        let mut d = Deltas::new();
        for (s, k, v) in counters {
            d.entry(s.to_string()).or_default().insert(k.to_string(), *v);
        }
        r.counters = Some(d);
        r
    }

    #[test]
    fn the_counter_that_moves_only_in_slow_reps_is_named() {
        let rx = "receiver rdma rxeA:1";
        let reps: Vec<RepRecord> = (0..8)
            .map(|i| {
                let slow = i % 2 == 1;
                let gbps = if slow { 0.4 } else { 1.2 + i as f64 * 0.01 };
                let seq = if slow { 1400 + i as u64 } else { 0 };
                let pkts = 1000 + i as u64;
                rep(i, gbps, &[(rx, "out_of_seq_request", seq), (rx, "rcvd_pkts", pkts), (rx, "duplicate_request", 0)])
            })
            .collect();
        let gbps: Vec<f64> = reps.iter().map(|r| r.gbps).collect();
        let bimodal = Bimodality::detect(&gbps);
        let a = attribute(&reps, &bimodal, Some(0.5)).expect("attributed");
        assert_eq!(a.slow_reps, [1, 3, 5, 7]);
        assert_eq!(a.counters.len(), 1, "{a:?}");
        assert_eq!((a.counters[0].name.as_str(), a.counters[0].fast_per_rep), ("out_of_seq_request", 0.0));
        assert!(a.verdict.contains("out_of_seq_request +1,404/rep vs +0"), "{}", a.verdict);
    }

    #[test]
    fn cpu_time_and_counters_that_move_a_little_every_rep_are_not_named() {
        let reps: Vec<RepRecord> = (0..8)
            .map(|i| {
                let slow = i % 2 == 1;
                let cpu = if slow { 900 } else { 500 };
                let ctl = if slow { 3 } else { 2 };
                rep(
                    i,
                    if slow { 0.5 } else { 1.0 },
                    &[("sender process", "cpu_us", cpu), ("receiver net lo", "tx_packets", ctl)],
                )
            })
            .collect();
        let gbps: Vec<f64> = reps.iter().map(|r| r.gbps).collect();
        let a = attribute(&reps, &Bimodality::detect(&gbps), Some(0.4)).expect("attributed");
        assert!(a.counters.is_empty(), "{a:?}");
    }

    /// Both ends in one process on a host with 2 CPUs: the slow reps' threads waited for a CPU, the fast ones
    /// barely; the load average moved with neither.
    #[test]
    fn run_queue_wait_is_named_when_slow_reps_have_it_and_fast_ones_do_not() {
        use crate::observe::contention::{CPUS, LOAD_1M_MILLI};
        let (process, host) = ("process (both ends)", "host (both ends)");
        let reps: Vec<RepRecord> = (0..10)
            .map(|i| {
                let slow = i % 3 == 0;
                let wait = if slow { 14_000 + i as u64 * 100 } else { 150 + i as u64 * 2 };
                let load = if slow { 2_900 } else { 2_950 };
                rep(
                    i,
                    if slow { 0.6 } else { 1.2 },
                    &[(process, RUN_QUEUE_WAIT_US, wait), (host, LOAD_1M_MILLI, load), (host, CPUS, 2)],
                )
            })
            .collect();
        let gbps: Vec<f64> = reps.iter().map(|r| r.gbps).collect();
        let a = attribute(&reps, &Bimodality::detect(&gbps), Some(0.4)).expect("attributed");
        assert_eq!(a.slow_reps, [0, 3, 6, 9]);
        let names: Vec<&str> = a.counters.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, [RUN_QUEUE_WAIT_US], "{a:?}");
        assert!(a.verdict.contains("slow reps waited 14 ms on the run queue, fast ones 159 µs"), "{}", a.verdict);
        assert!(a.verdict.contains("; host busy: load 2.9 on 2 CPUs"), "{}", a.verdict);
        // The same reps without the wait: nothing separates them, and the busy host is still said.
        let quiet: Vec<RepRecord> = reps
            .into_iter()
            .map(|mut r| {
                r.counters.as_mut().unwrap().remove(process);
                r
            })
            .collect();
        let a = attribute(&quiet, &Bimodality::detect(&gbps), Some(0.4)).expect("attributed");
        assert!(a.verdict.contains("no counter separates them from the fast ones; host busy: load 2.9"), "{a:?}");
    }

    /// Slow reps last 5× longer: other processes' CPU time at the same level all along piles up 5× too, and says
    /// nothing; softirq time at 8× the rate does.
    #[test]
    fn host_activity_that_grows_with_a_reps_length_is_compared_per_ms() {
        let host = "host (both ends)";
        let reps: Vec<RepRecord> = (0..8)
            .map(|i| {
                let slow = i % 2 == 1;
                let ms = if slow { 10.0 } else { 2.0 };
                let others = (ms * (500.0 + i as f64)) as u64;
                let softirq = (ms * if slow { 400.0 } else { 50.0 }) as u64;
                let mut r = rep(i, 4.0 / ms, &[(host, OTHERS_CPU_US, others), (host, SOFTIRQ_US, softirq)]);
                r.total_ms = ms;
                r
            })
            .collect();
        let gbps: Vec<f64> = reps.iter().map(|r| r.gbps).collect();
        let a = attribute(&reps, &Bimodality::detect(&gbps), Some(0.6)).expect("attributed");
        let names: Vec<&str> = a.counters.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, [SOFTIRQ_US], "{a:?}");
        assert_eq!((a.counters[0].slow_per_rep, a.counters[0].fast_per_rep), (4000.0, 100.0), "per rep, as stored");
    }

    #[test]
    fn nothing_separating_is_said_and_steady_cases_are_left_alone() {
        let reps: Vec<RepRecord> = (0..6)
            .map(|i| rep(i, if i < 3 { 0.5 } else { 1.0 }, &[("sender net lo", "tx_packets", 100 + i as u64)]))
            .collect();
        let a = attribute(&reps, &Bimodality::default(), Some(0.4)).expect("high CV is attributed");
        assert!(a.counters.is_empty() && a.verdict.contains("no counter separates"), "{a:?}");
        assert!(attribute(&reps, &Bimodality::default(), Some(0.01)).is_none(), "a steady case needs no attribution");
    }
}
