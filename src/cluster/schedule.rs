//! What a cluster run measures: the steps of flows every rank computes the same way from the pattern and the world
//! size, so no schedule travels over the wire. A step's flows run at once between two barriers; a step either runs
//! every size (`alone`: its one flow; `pairs`: disjoint pairs, no rank in two flows) or one size (concurrent flows
//! start together, so each size's aggregate is over flows that overlapped).

use crate::named::named_enum;
use serde::{Deserialize, Serialize};

named_enum! {
    /// `--pattern`: which flows run, and which of them at once (each help line is shown by `--help`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Pattern {
        Pairs = "pairs": "Every ordered pair, in rounds of disjoint pairs at once (no rank in two flows): every link \
                          in few steps",
        Alone = "alone": "Every ordered pair strictly alone, one flow per step: the baseline a contended pattern is \
                          compared with",
        Incast = "incast": "Ranks 1..N-1 into rank 0 at once: the decode host's view",
        Fanout = "fanout": "Rank 0 into every other rank at once",
        Bidir = "bidir": "Each pair both ways at once, in rounds of disjoint pairs that run together",
        Ring = "ring": "Rank i into rank i+1 (mod N), all at once",
        All = "all": "Every rank into every other rank at once",
        Replay = "replay": "A request stream (--trace or --arrivals), each request from a prefill rank to a decode \
                            rank (--prefill, --decode, --route) at its scheduled time: the incast and imbalance \
                            the stream makes",
    }
}

impl Pattern {
    /// Whether each flow of a step is its own link's measurement (no rank in two flows of a step), so its reps need
    /// not start together with the other flows' and the step has no aggregate.
    pub fn flows_apart(self) -> bool {
        matches!(self, Pattern::Pairs | Pattern::Alone)
    }
}

/// One transfer: rank `src` writes into rank `dst`'s memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Flow {
    pub src: usize,
    pub dst: usize,
}

/// One end of a flow, as the results file records it (`src` and `dst` of a case).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    pub rank: usize,
    pub host: String,
    /// The GPU of this end's buffer (`--mem gpu:N`); null for host or pinned memory.
    pub gpu: Option<u32>,
    /// The RDMA device this end used (`-d`); null when none was named.
    pub nic: Option<String>,
    #[serde(default)]
    pub local_rank: usize,
    /// The NUMA node of this end's buffer (its GPU's or NIC's PCI node, else its CPU's), as that rank reported it.
    #[serde(default)]
    pub numa: Option<u32>,
}

/// Flows that run at once, and the sizes (indices into the run's cases) each of them runs, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub flows: Vec<Flow>,
    pub cases: Vec<usize>,
}

impl Step {
    /// The flows `rank` sends.
    pub fn sent_by(&self, rank: usize) -> impl Iterator<Item = &Flow> + '_ {
        self.flows.iter().filter(move |f| f.src == rank)
    }
}

/// The steps of `pattern` over `world_size` ranks and `n_cases` sizes. Empty when the pattern has no flow (one rank).
pub fn schedule(pattern: Pattern, world_size: usize, n_cases: usize) -> Vec<Step> {
    let every_size = |flows: Vec<Flow>| -> Vec<Step> {
        if flows.is_empty() {
            return Vec::new();
        }
        (0..n_cases).map(|c| Step { flows: flows.clone(), cases: vec![c] }).collect()
    };
    let n = world_size;
    match pattern {
        Pattern::Pairs => {
            // Each round of disjoint pairs twice: one way, then the other; every ordered pair once.
            let all_cases: Vec<usize> = (0..n_cases).collect();
            rounds(n)
                .into_iter()
                .flat_map(|round| {
                    let forth: Vec<Flow> = round.iter().map(|&(a, b)| Flow { src: a, dst: b }).collect();
                    let back: Vec<Flow> = round.iter().map(|&(a, b)| Flow { src: b, dst: a }).collect();
                    [forth, back]
                })
                .map(|flows| Step { flows, cases: all_cases.clone() })
                .collect()
        }
        Pattern::Alone => (0..n)
            .flat_map(|src| (0..n).filter(move |dst| *dst != src).map(move |dst| Flow { src, dst }))
            .map(|flow| Step { flows: vec![flow], cases: (0..n_cases).collect() })
            .collect(),
        Pattern::Incast => every_size((1..n).map(|s| Flow { src: s, dst: 0 }).collect()),
        Pattern::Fanout => every_size((1..n).map(|d| Flow { src: 0, dst: d }).collect()),
        Pattern::Bidir => rounds(n)
            .into_iter()
            .flat_map(|round| {
                every_size(
                    round.iter().flat_map(|&(a, b)| [Flow { src: a, dst: b }, Flow { src: b, dst: a }]).collect(),
                )
            })
            .collect(),
        Pattern::Ring if n < 2 => Vec::new(),
        // Two ranks: 0→1 and 1→0, not 0→1 twice.
        Pattern::Ring => every_size((0..n).map(|s| Flow { src: s, dst: (s + 1) % n }).collect()),
        Pattern::All => every_size(
            (0..n).flat_map(|s| (0..n).filter(move |d| *d != s).map(move |d| Flow { src: s, dst: d })).collect(),
        ),
        // Its flows come from the request stream, routed request by request (`route`), not from steps.
        Pattern::Replay => Vec::new(),
    }
}

/// The most flows `rank` takes part in (sends or receives) in one step of `pattern` over `world_size` ranks: how
/// many buffers it holds at once. Computed without building the schedule, whose size grows with the square of the
/// world size (a launcher may claim tens of thousands of ranks before any of them has joined). 0 without a flow.
pub fn peak_flows(pattern: Pattern, world_size: usize, rank: usize) -> usize {
    let n = world_size;
    if n < 2 {
        return 0;
    }
    match pattern {
        Pattern::Pairs | Pattern::Alone => 1,
        Pattern::Incast | Pattern::Fanout if rank == 0 => n - 1,
        Pattern::Incast | Pattern::Fanout => 1,
        // One pair both ways; a ring sends one flow and receives one (two ranks: 0→1 and 1→0).
        Pattern::Bidir | Pattern::Ring => 2,
        Pattern::All => 2 * (n - 1),
        Pattern::Replay => 0,
    }
}

/// Rounds of disjoint unordered pairs covering every pair once (the circle method): rank 0 stays, the others rotate;
/// an odd count gets a ghost rank, and whoever meets it sits the round out. Pairs are (lower, higher).
pub fn rounds(n: usize) -> Vec<Vec<(usize, usize)>> {
    if n < 2 {
        return Vec::new();
    }
    let m = if n % 2 == 0 { n } else { n + 1 };
    let mut ring: Vec<usize> = (1..m).collect();
    let mut out = Vec::with_capacity(m - 1);
    for _ in 0..m - 1 {
        let mut round = Vec::with_capacity(m / 2);
        let seats: Vec<usize> = std::iter::once(0).chain(ring.iter().copied()).collect();
        for i in 0..m / 2 {
            let (a, b) = (seats[i], seats[m - 1 - i]);
            if a < n && b < n {
                round.push((a.min(b), a.max(b)));
            }
        }
        round.sort();
        out.push(round);
        ring.rotate_right(1);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn peak_flows_is_the_schedules_busiest_step_for_every_rank() {
        use crate::named::Named;
        for pattern in Pattern::values() {
            for n in 1..10 {
                let steps = schedule(pattern, n, 2);
                for rank in 0..n {
                    let busiest = steps
                        .iter()
                        .map(|s| s.flows.iter().filter(|f| f.src == rank || f.dst == rank).count())
                        .max()
                        .unwrap_or(0);
                    assert_eq!(peak_flows(pattern, n, rank), busiest, "{pattern} over {n} ranks, rank {rank}");
                }
            }
        }
    }

    use super::*;
    use std::collections::HashSet;

    #[test]
    fn pairs_cover_every_ordered_pair_once_with_no_rank_twice_in_a_step() {
        for n in 2..=9 {
            let steps = schedule(Pattern::Pairs, n, 3);
            let mut seen = HashSet::new();
            for step in &steps {
                assert_eq!(step.cases, vec![0, 1, 2]);
                let mut busy = HashSet::new();
                for f in &step.flows {
                    assert!(busy.insert(f.src) && busy.insert(f.dst), "n={n}: a rank twice in {step:?}");
                    assert!(seen.insert(*f), "n={n}: {f:?} twice");
                }
                assert!(step.flows.len() <= n / 2);
            }
            assert_eq!(seen.len(), n * (n - 1), "n={n}");
        }
        assert_eq!(schedule(Pattern::Pairs, 4, 2).len(), 6);
        assert!(schedule(Pattern::Pairs, 1, 2).is_empty());
    }

    #[test]
    fn alone_runs_every_ordered_pair_by_itself_at_every_size() {
        for n in 2..=6 {
            let steps = schedule(Pattern::Alone, n, 3);
            assert_eq!(steps.len(), n * (n - 1), "n={n}");
            let mut seen = HashSet::new();
            for step in &steps {
                assert_eq!(step.flows.len(), 1, "n={n}: {step:?}");
                assert_eq!(step.cases, vec![0, 1, 2]);
                let f = step.flows[0];
                assert!(f.src != f.dst && f.src < n && f.dst < n, "n={n}: {f:?}");
                assert!(seen.insert(f), "n={n}: {f:?} twice");
            }
        }
        let order: Vec<(usize, usize)> =
            schedule(Pattern::Alone, 3, 1).iter().map(|s| (s.flows[0].src, s.flows[0].dst)).collect();
        assert_eq!(order, [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)]);
        assert!(schedule(Pattern::Alone, 1, 2).is_empty());
        assert_eq!(Pattern::Alone.to_string(), "alone");
    }

    #[test]
    fn concurrent_patterns_have_one_step_per_size_and_their_flow_counts() {
        let flows = |p: Pattern, n: usize| -> Vec<usize> { schedule(p, n, 2).iter().map(|s| s.flows.len()).collect() };
        assert_eq!(flows(Pattern::Incast, 4), [3, 3]);
        assert_eq!(flows(Pattern::Fanout, 4), [3, 3]);
        assert_eq!(flows(Pattern::Ring, 4), [4, 4]);
        assert_eq!(flows(Pattern::All, 4), [12, 12]);
        // Bidir: 3 rounds of 2 pairs, both ways, per size.
        assert_eq!(flows(Pattern::Bidir, 4), [4; 6]);
        assert_eq!(flows(Pattern::Ring, 2), [2, 2]);
        for p in [Pattern::Incast, Pattern::Fanout, Pattern::Ring, Pattern::All, Pattern::Bidir] {
            assert!(schedule(p, 1, 2).is_empty(), "{p}");
            for s in schedule(p, 4, 2) {
                assert_eq!(s.cases.len(), 1);
            }
        }
        let incast = &schedule(Pattern::Incast, 4, 1)[0];
        assert!(incast.flows.iter().all(|f| f.dst == 0));
        assert_eq!(incast.sent_by(2).count(), 1);
        assert_eq!(schedule(Pattern::Fanout, 4, 1)[0].sent_by(0).count(), 3);
    }
}
