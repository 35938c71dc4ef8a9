//! Host contention around a rep, read as counters (see [`super::counters`]): how long this process's threads
//! waited on a run queue and how often they were preempted, and what the rest of the host did meanwhile (other
//! processes' CPU time, softirq and steal time, the load average). A rep that was slow because the host was busy
//! then says so instead of "no counter separates them".
//!
//! Costs a `getrusage`, one small file per thread of this process, `/proc/stat`, `/proc/self/stat` and
//! `/proc/loadavg` per read: a few tens of µs, outside the timed interval like every counter read.

use crate::env::sysroot::SysRoot;
use std::collections::{BTreeMap, HashMap};

/// µs this process's threads spent runnable but waiting for a CPU (`/proc/self/task/*/schedstat`, second field).
pub const RUN_QUEUE_WAIT_US: &str = "run_queue_wait_us";
/// Times this process's threads (those that ended included) were preempted (`getrusage`'s `ru_nivcsw`).
pub const INVOLUNTARY_SWITCHES: &str = "involuntary_switches";
/// CPU time (µs, all CPUs) other processes used: the host's user and system time less this process's.
pub const OTHERS_CPU_US: &str = "others_cpu_us";
/// CPU time (µs, all CPUs) spent in softirqs (network receive processing among them) and stolen by a hypervisor.
pub const SOFTIRQ_US: &str = "softirq_us";
pub const STEAL_US: &str = "steal_us";
/// The one-minute load average after the rep, in thousandths (a gauge: `_now` keys are kept as read).
pub const LOAD_1M_MILLI: &str = "load_1m_milli_now";
/// CPUs online (`cpuN` lines of `/proc/stat`), which the load average is measured against.
pub const CPUS: &str = "cpus_now";

/// Keys that describe the host's state rather than anything a rep did: never a reason one rep was slower.
pub const GAUGES: &[&str] = &[LOAD_1M_MILLI, CPUS];

/// This process's run-queue wait and preemptions, read rep after rep. Each thread's wait is followed by its id, so
/// a thread that starts or ends between two reads does not make the total go backwards; what a thread waited
/// between the last read and its end is not seen (tcp's per-transfer writer threads: the receiving thread and the
/// one driving the rep are), while preemptions count every thread.
#[derive(Default)]
pub struct ProcessWait {
    /// Each live thread's wait (ns) at the last read.
    threads: HashMap<String, u64>,
    /// Wait accumulated over the reads so far (ns).
    total_ns: u64,
    /// Whether a read happened: a thread first seen at a later read started since the one before.
    primed: bool,
}

impl ProcessWait {
    /// Add this process's counters to `out`.
    pub fn read(&mut self, out: &mut BTreeMap<String, u64>) {
        let mut now = HashMap::new();
        if let Ok(dir) = std::fs::read_dir("/proc/self/task") {
            for task in dir.filter_map(|e| e.ok()) {
                let path = task.path().join("schedstat");
                let Some(wait) = std::fs::read_to_string(path).ok().and_then(|t| field_u64(&t, 1)) else { continue };
                let tid = task.file_name().to_string_lossy().into_owned();
                let before = self.threads.get(&tid).copied().unwrap_or(if self.primed { 0 } else { wait });
                self.total_ns = self.total_ns.saturating_add(wait.saturating_sub(before));
                now.insert(tid, wait);
            }
        }
        if !now.is_empty() {
            out.insert(RUN_QUEUE_WAIT_US.into(), self.total_ns / 1_000);
        }
        self.threads = now;
        self.primed = true;
        if let Ok(usage) = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF) {
            out.insert(INVOLUNTARY_SWITCHES.into(), usage.involuntary_context_switches().max(0) as u64);
        }
    }
}

/// The host's counters now: other processes' CPU time, softirq and steal time, the load average and CPU count.
pub fn host(root: &SysRoot) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let tick_us = clock_tick_us();
    if let Some(stat) = root.read("/proc/stat") {
        let cpus = stat.lines().filter(|l| l.starts_with("cpu") && !l.starts_with("cpu ")).count();
        if cpus > 0 {
            out.insert(CPUS.into(), cpus as u64);
        }
        if let Some(all) = stat.lines().find(|l| l.starts_with("cpu ")) {
            // user nice system idle iowait irq softirq steal ...
            let f = |i: usize| field_u64(all, i + 1);
            if let (Some(user), Some(nice), Some(system)) = (f(0), f(1), f(2)) {
                let own = own_cpu_ticks().unwrap_or(0);
                let busy = user.saturating_add(nice).saturating_add(system);
                out.insert(OTHERS_CPU_US.into(), busy.saturating_sub(own).saturating_mul(tick_us));
            }
            f(6).map(|t| out.insert(SOFTIRQ_US.into(), t.saturating_mul(tick_us)));
            f(7).map(|t| out.insert(STEAL_US.into(), t.saturating_mul(tick_us)));
        }
    }
    if let Some([one, ..]) = crate::env::load_average(root) {
        out.insert(LOAD_1M_MILLI.into(), (one * 1000.0).round() as u64);
    }
    out
}

/// This process's user and system time in clock ticks (`/proc/self/stat` fields 14 and 15, after the command
/// name, which may hold spaces and parentheses).
fn own_cpu_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    // `rest` starts at field 3 (state): utime is its 12th field, stime its 13th.
    Some(field_u64(rest, 11)?.saturating_add(field_u64(rest, 12)?))
}

/// µs per clock tick of `/proc/stat` (USER_HZ, 100 on every common kernel).
fn clock_tick_us() -> u64 {
    match nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK) {
        Ok(Some(hz)) if hz > 0 => 1_000_000 / hz as u64,
        _ => 10_000,
    }
}

/// The `i`-th (0-based) whitespace-separated field of `line` as an unsigned number.
fn field_u64(line: &str, i: usize) -> Option<u64> {
    line.split_whitespace().nth(i)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_reads_its_cpus_and_load_and_a_process_its_wait() {
        let host = host(SysRoot::get());
        let cpus = std::thread::available_parallelism().unwrap().get() as u64;
        assert!(host[CPUS] >= cpus, "online CPUs are at least those this process may use: {host:?}");
        assert!(host.contains_key(LOAD_1M_MILLI) && host.contains_key(OTHERS_CPU_US), "{host:?}");
        let mut w = ProcessWait::default();
        let mut first = BTreeMap::new();
        w.read(&mut first);
        assert_eq!(first.get(RUN_QUEUE_WAIT_US), Some(&0), "the first read is the baseline: {first:?}");
        assert!(first.contains_key(INVOLUNTARY_SWITCHES), "{first:?}");
    }

    /// A thread that starts after one read and ends before the next takes its wait with it; one that ends
    /// between reads must not make the total go backwards.
    #[test]
    fn threads_that_come_and_go_never_lower_the_total() {
        let mut w = ProcessWait::default();
        let mut last = 0;
        for _ in 0..5 {
            let t = std::thread::spawn(|| std::hint::black_box((0..200_000u64).sum::<u64>()));
            let mut out = BTreeMap::new();
            w.read(&mut out);
            t.join().unwrap();
            let total = out[RUN_QUEUE_WAIT_US];
            assert!(total >= last, "{total} after {last}");
            last = total;
        }
    }

    #[test]
    fn own_cpu_time_is_read_past_a_command_name_with_spaces() {
        assert!(own_cpu_ticks().is_some());
        let line = "1234 (a b) c) R 1 2 3 4 5 6 7 8 9 10 250 17 0 0";
        let rest = &line[line.rfind(')').unwrap() + 1..];
        assert_eq!((field_u64(rest, 11), field_u64(rest, 12)), (Some(250), Some(17)));
    }
}
