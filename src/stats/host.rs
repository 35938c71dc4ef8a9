//! Whether the host was busy during a case's reps, from the contention counters each rep carries (see
//! `observe::contention`): a one-minute load average at or above the CPU count, or an end's threads that waited on
//! a run queue for a tenth of the rep or more. Numbers from such reps measure the host's other work as much as the
//! transfer.

use crate::measure::{Warning, WarningKind};
use crate::observe::contention::{CPUS, LOAD_1M_MILLI, RUN_QUEUE_WAIT_US};
use crate::run::RepRecord;

/// Run-queue wait from this fraction of a rep's time on makes the rep's host busy.
pub const MAX_WAIT_FRACTION: f64 = 0.10;

/// What one rep's counters say about its host.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RepHost {
    /// The highest one-minute load average an end read after the rep, and that host's CPU count.
    pub load: Option<(f64, u64)>,
    /// The longest run-queue wait of one end's process during the rep, as a fraction of the rep (setup to done).
    pub wait_fraction: Option<f64>,
}

impl RepHost {
    pub fn from_rep(rep: &RepRecord) -> RepHost {
        let mut h = RepHost::default();
        let Some(counters) = &rep.counters else { return h };
        for m in counters.values() {
            if let (Some(&milli), Some(&cpus)) = (m.get(LOAD_1M_MILLI), m.get(CPUS)) {
                let load = milli as f64 / 1000.0;
                if h.load.is_none_or(|(l, _)| load > l) {
                    h.load = Some((load, cpus));
                }
            }
            if let Some(&us) = m.get(RUN_QUEUE_WAIT_US) {
                let f = us as f64 / 1000.0 / rep.total_ms.max(f64::MIN_POSITIVE);
                h.wait_fraction = Some(h.wait_fraction.map_or(f, |g| g.max(f)));
            }
        }
        h
    }

    fn overloaded(&self) -> bool {
        self.load.is_some_and(|(load, cpus)| load >= cpus as f64)
    }

    fn waited(&self) -> bool {
        self.wait_fraction.is_some_and(|f| f >= MAX_WAIT_FRACTION)
    }

    pub fn busy(&self) -> bool {
        self.overloaded() || self.waited()
    }
}

/// "load 2.9 on 2 CPUs; run-queue wait up to 31% of a rep": what made `reps` busy, from the busiest of them.
fn what(reps: &[RepHost]) -> Option<String> {
    let mut parts = Vec::new();
    let load = reps.iter().filter(|h| h.overloaded()).filter_map(|h| h.load).max_by(|a, b| a.0.total_cmp(&b.0));
    if let Some((load, cpus)) = load {
        parts.push(format!("load {load:.1} on {cpus} CPU{}", if cpus == 1 { "" } else { "s" }));
    }
    let wait = reps.iter().filter(|h| h.waited()).filter_map(|h| h.wait_fraction).max_by(f64::total_cmp);
    // Several threads of one end can wait at once: their sum may pass the rep's own time.
    match wait {
        Some(f) if f > 1.0 => parts.push(format!("run-queue wait up to {f:.1}× a rep's time, over its threads")),
        Some(f) => parts.push(format!("run-queue wait up to {:.0}% of a rep", f * 100.0)),
        None => {}
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// The busy-host warning of a case whose reps ran on a busy host, if any did.
pub fn warning(reps: &[RepRecord]) -> Option<Warning> {
    let busy: Vec<RepHost> = reps.iter().map(RepHost::from_rep).filter(RepHost::busy).collect();
    let why = what(&busy)?;
    Some(Warning {
        kind: WarningKind::BusyHost,
        message: format!("host busy in {} of {} reps ({why})", busy.len(), reps.len()),
    })
}

/// "host busy: load 2.9 on 2 CPUs", when some of `reps` (a case's slow ones) ran on a busy host.
pub fn context(reps: &[&RepRecord]) -> Option<String> {
    let busy: Vec<RepHost> = reps.iter().map(|r| RepHost::from_rep(r)).filter(RepHost::busy).collect();
    what(&busy).map(|why| format!("host busy: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::counters::Deltas;

    fn rep(total_ms: f64, source: &str, counters: &[(&str, u64)]) -> RepRecord {
        let mut r: RepRecord = serde_json::from_str(&format!(
            r#"{{"i":0,"transfer_ms":1.0,"gbps":1.0,"setup_ms":0.1,"notify_ms":0.2,"total_ms":{total_ms}}}"#
        ))
        .unwrap();
        let mut d = Deltas::new();
        for (k, v) in counters {
            d.entry(source.to_string()).or_default().insert(k.to_string(), *v);
        }
        r.counters = Some(d);
        r
    }

    #[test]
    fn a_load_at_the_cpu_count_or_a_tenth_of_a_rep_waiting_is_busy() {
        let host = "host (both ends)";
        let quiet = rep(10.0, host, &[(LOAD_1M_MILLI, 1_900), (CPUS, 2)]);
        assert!(!RepHost::from_rep(&quiet).busy());
        let loaded = rep(10.0, host, &[(LOAD_1M_MILLI, 2_900), (CPUS, 2)]);
        assert!(RepHost::from_rep(&loaded).busy());
        let waited = rep(10.0, "sender process", &[(RUN_QUEUE_WAIT_US, 1_000)]);
        assert!(RepHost::from_rep(&waited).busy());
        let barely = rep(10.0, "sender process", &[(RUN_QUEUE_WAIT_US, 999)]);
        assert!(!RepHost::from_rep(&barely).busy());

        assert_eq!(warning(&[quiet.clone(), barely.clone()]), None);
        let w = warning(&[quiet, loaded, waited]).expect("busy");
        assert_eq!(w.kind, WarningKind::BusyHost);
        assert_eq!(w.message, "host busy in 2 of 3 reps (load 2.9 on 2 CPUs; run-queue wait up to 10% of a rep)");
    }
}
