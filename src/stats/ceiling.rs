//! The ceiling: the steady-state bandwidth a link settles at once transfers are large enough.
//!
//! Rule, over the cases in size order (p50 GB/s of each size):
//! - a flat run is at least 2 consecutive sizes whose p50s all lie within ±5% of the run's median — one fast size
//!   alone is a spike, not a ceiling;
//! - only flat runs whose median is within 5% of the highest flat-run median count: the ceiling is the top, so a long
//!   collapse at large sizes (the seed's 6–12 GiB drop) or a long middle stretch below a faster end never wins;
//! - of those, the longest (ties: the higher median) is the plateau, and the ceiling is its median.
//!
//! No plateau (fewer than 2 sizes, or every neighbour differs by more than 5%) means no ceiling: the link never
//! settled within the sizes measured. Nor is one declared from a plateau whose cases' transfer times vary by more
//! than [`MAX_PLATEAU_CV`] (their median CV): a median of reps that spread ±20% or more is itself uncertain by
//! about the ±5% that makes a run flat (1.25·CV/√n: 5.6% at 20 reps), so such a run is flat by chance as much as
//! by the link; [`verdict`] says so instead.
//!
//! Cost: O(n log n) in the number of cases. The runs considered are, for each first size, the longest flat run that
//! starts there: every part of a flat run has its largest p50 within 1.05/0.95 of its smallest, so two pointers give
//! each start's farthest possible end, and the run is shortened from there (at most [`MAX_SHRINK`] sizes) until it
//! is flat; medians, minima and maxima come from an order-statistic tree over the p50s' ranks as the window slides.
//! The longest flat run of all is always among these; the highest median is taken over them too, not over every
//! sub-run (that would cost O(n³ log n)): a short sub-run's higher median would otherwise raise the top above the
//! run that is longest from its start.

use super::CaseResult;
use crate::measure::summary::quantile_sorted;

/// p50s within this fraction of the plateau's rate count as flat.
pub const FLAT_TOLERANCE: f64 = 0.05;
/// Flat runs whose median is below this fraction of the highest flat-run median are not the ceiling.
pub const MIN_FRACTION_OF_TOP: f64 = 0.95;

/// The detected plateau: its median p50 and the sizes it spans.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ceiling {
    pub gbps: f64,
    pub first_size: u64,
    pub last_size: u64,
}

/// How far a start's longest possible run is shortened, at most, looking for a flat one.
pub const MAX_SHRINK: usize = 64;

/// A plateau whose cases' median CV is above this is too noisy to declare a ceiling from.
pub const MAX_PLATEAU_CV: f64 = 2.0 * super::warnings::MAX_CV;

/// Whether a run has a ceiling, and why not.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Verdict {
    Ceiling(Ceiling),
    /// The cases never settled within ±5% of each other.
    NoPlateau,
    /// A plateau, but its cases' CVs (the lowest and the highest) are too high to support it.
    TooNoisy {
        plateau: Ceiling,
        cv: [f64; 2],
    },
}

impl Verdict {
    /// "no ceiling: the flat run's cases (96 MiB to 12 GiB) vary 36–51% (CV) — too noisy to declare one"; None
    /// when there is a ceiling or no plateau at all.
    pub fn refusal(&self) -> Option<String> {
        let Verdict::TooNoisy { plateau, cv } = self else { return None };
        let size = crate::plan::sizes::format_size;
        Some(format!(
            "no ceiling: the flat run's cases ({} to {}) vary {:.0}–{:.0}% (CV) — too noisy to declare one",
            size(plateau.first_size),
            size(plateau.last_size),
            cv[0] * 100.0,
            cv[1] * 100.0
        ))
    }
}

/// The ceiling of one run's cases (any order), or why there is none.
pub fn verdict(cases: &[CaseResult]) -> Verdict {
    let Some(plateau) = plateau(cases) else { return Verdict::NoPlateau };
    let mut cvs: Vec<f64> = cases
        .iter()
        .filter(|c| (plateau.first_size..=plateau.last_size).contains(&c.size_bytes) && c.stats.gbps.p50.is_finite())
        .filter_map(|c| c.derived.cv.filter(|cv| cv.is_finite()))
        .collect();
    cvs.sort_by(f64::total_cmp);
    if !cvs.is_empty() && quantile_sorted(&cvs, 0.5) > MAX_PLATEAU_CV {
        return Verdict::TooNoisy { plateau, cv: [cvs[0], cvs[cvs.len() - 1]] };
    }
    Verdict::Ceiling(plateau)
}

/// The ceiling of one run's cases (any order), when there is one (see [`verdict`]).
pub fn ceiling(cases: &[CaseResult]) -> Option<Ceiling> {
    match verdict(cases) {
        Verdict::Ceiling(c) => Some(c),
        _ => None,
    }
}

/// The plateau of one run's cases (any order), however noisy they are.
fn plateau(cases: &[CaseResult]) -> Option<Ceiling> {
    let mut points: Vec<(u64, f64)> =
        cases.iter().map(|c| (c.size_bytes, c.stats.gbps.p50)).filter(|(_, g)| g.is_finite()).collect();
    points.sort_by_key(|p| p.0);
    let flat = longest_flat_runs(&points);
    let top = flat.iter().map(|f| f.1.gbps).fold(f64::NEG_INFINITY, f64::max);
    flat.into_iter()
        .filter(|f| f.1.gbps >= MIN_FRACTION_OF_TOP * top)
        .max_by(|a, b| a.0.cmp(&b.0).then(a.1.gbps.total_cmp(&b.1.gbps)))
        .map(|f| f.1)
}

/// For each start in `points` (in size order), the longest flat run from there, as (length, its ceiling).
fn longest_flat_runs(points: &[(u64, f64)]) -> Vec<(usize, Ceiling)> {
    let limit = (1.0 + FLAT_TOLERANCE) / (1.0 - FLAT_TOLERANCE);
    let values: Vec<f64> = points.iter().map(|p| p.1).collect();
    let mut w = Window::new(&values);
    let mut out = Vec::new();
    let mut right = 0; // the window is [left, right)
    for left in 0..values.len() {
        if right <= left {
            right = left;
        }
        while right < values.len() {
            let v = values[right];
            let (lo, hi) = if w.len == 0 { (v, v) } else { (w.nth(0).min(v), w.nth(w.len - 1).max(v)) };
            if hi > limit * lo {
                break;
            }
            w.insert(right);
            right += 1;
        }
        // Shorten [left, right) from its end until it is flat, then put the removed sizes back.
        let mut end = right;
        while end - left >= 2 && !w.is_flat() && right - end < MAX_SHRINK {
            end -= 1;
            w.remove(end);
        }
        if end - left >= 2 && w.is_flat() {
            out.push((
                end - left,
                Ceiling { gbps: w.median(), first_size: points[left].0, last_size: points[end - 1].0 },
            ));
        }
        (end..right).for_each(|i| w.insert(i));
        if right > left {
            w.remove(left);
        }
    }
    out
}

/// The values of a sliding window, counted by rank in a Fenwick tree, so its median is found in O(log n).
struct Window {
    /// Rank (position in sorted order, ties by index) of each value.
    rank: Vec<usize>,
    /// The values in rank order.
    sorted: Vec<f64>,
    tree: Vec<usize>,
    len: usize,
}

impl Window {
    fn new(values: &[f64]) -> Window {
        let mut order: Vec<usize> = (0..values.len()).collect();
        order.sort_by(|&a, &b| values[a].total_cmp(&values[b]).then(a.cmp(&b)));
        let mut rank = vec![0; values.len()];
        for (r, &i) in order.iter().enumerate() {
            rank[i] = r;
        }
        let sorted = order.iter().map(|&i| values[i]).collect();
        Window { rank, sorted, tree: vec![0; values.len() + 1], len: 0 }
    }

    fn add(&mut self, index: usize, delta: isize) {
        let mut i = self.rank[index] + 1;
        while i < self.tree.len() {
            self.tree[i] = self.tree[i].wrapping_add_signed(delta);
            i += i & i.wrapping_neg();
        }
        self.len = self.len.wrapping_add_signed(delta);
    }

    fn insert(&mut self, index: usize) {
        self.add(index, 1);
    }

    fn remove(&mut self, index: usize) {
        self.add(index, -1);
    }

    /// The k-th smallest value in the window (0-based).
    fn nth(&self, k: usize) -> f64 {
        let (mut pos, mut left) = (0, k + 1);
        let mut step = (self.tree.len() - 1).next_power_of_two();
        while step > 0 {
            let next = pos + step;
            if next < self.tree.len() && self.tree[next] < left {
                pos = next;
                left -= self.tree[next];
            }
            step /= 2;
        }
        self.sorted[pos]
    }

    /// Whether every value lies within the tolerance of the window's median.
    fn is_flat(&self) -> bool {
        let m = self.median();
        self.nth(self.len - 1) - m <= FLAT_TOLERANCE * m && m - self.nth(0) <= FLAT_TOLERANCE * m
    }

    /// The window's median, as [`quantile_sorted`] computes it.
    fn median(&self) -> f64 {
        let (a, b) = ((self.len - 1) / 2, self.len / 2);
        quantile_sorted(&[self.nth(a), self.nth(b)], 0.5)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::case::{CaseStats, Derived, HostCost, SweepCase, TransferShape, Verification};
    use crate::stats::{RateSummary, Summary};

    fn case(size_mib: u64, p50: f64) -> CaseResult {
        let s = Summary { p50, p90: p50, p99: p50, min: p50, max: p50, mean: p50, stdev: 0.0 };
        CaseResult {
            size_bytes: size_mib << 20,
            tokens: None,
            bytes_per_token: None,
            stats: CaseStats {
                n: 5,
                transfer_ms: s,
                gbps: RateSummary { p50, min: p50, max: p50, mean: p50 },
                setup_ms: s,
                notify_ms: s,
                total_ms: s,
                block_latency_us: None,
            },
            check: Verification { verified: None, mismatched_bytes: None, unchecked_reps: None },
            bidir: None,
            shape: TransferShape {
                block_size: 1 << 20,
                block_clamped: false,
                writes: 1,
                layout: crate::plan::paged::Layout::Contiguous,
                pieces: 1,
                piece_bytes: size_mib << 20,
            },
            extras: Default::default(),
            host: HostCost::default(),
            duration: None,
            intervals: None,
            reps: vec![],
            warmup_reps: vec![],
            derived: Derived::default(),
            sweep: SweepCase::default(),
            cluster: None,
        }
    }

    fn run(p50s: &[f64]) -> Vec<CaseResult> {
        p50s.iter().enumerate().map(|(i, g)| case(96 << i, *g)).collect()
    }

    #[test]
    fn a_rise_then_a_plateau_gives_the_plateau_median() {
        let c = ceiling(&run(&[2.0, 5.0, 8.0, 9.6, 9.7, 9.8, 9.7])).unwrap();
        assert_eq!(c.gbps, 9.7);
        assert_eq!((c.first_size, c.last_size), (768 << 20, 6144 << 20));
    }

    #[test]
    fn a_collapse_at_large_sizes_is_not_the_ceiling() {
        // The seed's shape: ~9.7 GB/s, then 6–12 GiB fall to ~4 over more sizes than the plateau spans.
        let c = ceiling(&run(&[9.6, 9.7, 9.7, 4.1, 4.0, 4.0, 4.1])).unwrap();
        assert_eq!(c.gbps, 9.7);
    }

    #[test]
    fn a_short_faster_end_beats_a_long_slower_middle() {
        // TCP loopback on a small VM: ~3.0 GB/s over three sizes, then ~3.5 over the two largest.
        let c = ceiling(&run(&[3.35, 3.02, 2.99, 2.96, 3.43, 3.55])).unwrap();
        assert_eq!(c.gbps, 3.49);
        assert_eq!((c.first_size, c.last_size), (1536 << 20, 3072 << 20));
    }

    #[test]
    fn order_of_cases_does_not_matter() {
        let mut cases = run(&[2.0, 5.0, 9.6, 9.8]);
        cases.reverse();
        assert_eq!(ceiling(&cases).unwrap().gbps, 9.7);
    }

    #[test]
    fn the_sliding_median_is_the_sorted_median_of_every_window() {
        let values = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0];
        for (left, right) in [(0, 1), (0, 4), (2, 8), (5, 8), (0, 8)] {
            let mut w = Window::new(&values);
            (left..right).for_each(|i| w.insert(i));
            let mut v = values[left..right].to_vec();
            v.sort_by(f64::total_cmp);
            assert_eq!(w.median(), quantile_sorted(&v, 0.5), "[{left}, {right})");
        }
    }

    #[test]
    fn many_cases_take_little_time_and_give_the_plateau() {
        // 100,000 sizes: a rise, then a long plateau at ~9.7 with noise, then a collapse.
        let p50s: Vec<f64> = (0..100_000)
            .map(|i| match i {
                0..1000 => 1.0 + i as f64 * 0.008,
                1000..90_000 => 9.7 + ((i * 7919) % 100) as f64 * 0.001 - 0.05,
                _ => 4.0,
            })
            .collect();
        let cases: Vec<CaseResult> = p50s.iter().enumerate().map(|(i, g)| case(i as u64 + 1, *g)).collect();
        let c = ceiling(&cases).unwrap();
        assert!((c.gbps - 9.7).abs() < 0.01, "{c:?}");
    }

    /// The rule as it was computed before, over every sub-run: O(n³ log n).
    fn every_sub_run(points: &[(u64, f64)]) -> Option<Ceiling> {
        let mut flat: Vec<(usize, Ceiling)> = Vec::new();
        for i in 0..points.len() {
            for j in i + 1..points.len() {
                let mut v: Vec<f64> = points[i..=j].iter().map(|p| p.1).collect();
                v.sort_by(f64::total_cmp);
                let m = quantile_sorted(&v, 0.5);
                if v.iter().all(|x| (x - m).abs() <= FLAT_TOLERANCE * m) {
                    flat.push((j - i + 1, Ceiling { gbps: m, first_size: points[i].0, last_size: points[j].0 }));
                }
            }
        }
        let top = flat.iter().map(|f| f.1.gbps).fold(f64::NEG_INFINITY, f64::max);
        flat.into_iter()
            .filter(|f| f.1.gbps >= MIN_FRACTION_OF_TOP * top)
            .max_by(|a, b| a.0.cmp(&b.0).then(a.1.gbps.total_cmp(&b.1.gbps)))
            .map(|f| f.1)
    }

    #[test]
    fn agrees_with_every_sub_run_on_random_curves() {
        let mut state = 42u64;
        let mut next = || {
            state = crate::pattern::splitmix64(state);
            state
        };
        let (mut same, mut total) = (0, 0);
        for _ in 0..3000 {
            let n = 2 + (next() % 14) as usize;
            // Rates that wander within about ±12%, so flat runs come and go.
            let points: Vec<(u64, f64)> = (0..n).map(|i| (i as u64, 9.0 + (next() % 2000) as f64 / 1000.0)).collect();
            let cases: Vec<CaseResult> = points.iter().map(|p| case(p.0 + 1, p.1)).collect();
            let cases_points: Vec<(u64, f64)> = cases.iter().map(|c| (c.size_bytes, c.stats.gbps.p50)).collect();
            total += 1;
            let got = ceiling(&cases);
            same += usize::from(got == every_sub_run(&cases_points));
            // Whatever it picks is a flat run of the curve.
            if let Some(c) = got {
                let mut v: Vec<f64> =
                    cases_points.iter().filter(|p| (c.first_size..=c.last_size).contains(&p.0)).map(|p| p.1).collect();
                v.sort_by(f64::total_cmp);
                assert!(v.len() >= 2 && v.iter().all(|x| (x - c.gbps).abs() <= FLAT_TOLERANCE * c.gbps), "{c:?} {v:?}");
            }
        }
        // Where they differ, a short sub-run with a higher median raised the old rule's top above every run that
        // is the longest from its start (see the module's Cost paragraph).
        assert!(same * 100 >= total * 97, "agree on {same} of {total}");
    }

    /// A loopback sweep on a busy 2-CPU host: the p50s sit within ±5% from 64 MiB on, but every case's reps
    /// spread 36–51%.
    #[test]
    fn a_plateau_of_noisy_cases_is_not_declared_a_ceiling() {
        let p50s = [1.1, 2.0, 3.1, 3.0, 3.15, 3.05];
        let cvs = [0.12, 0.30, 0.36, 0.51, 0.44, 0.40];
        let noisy: Vec<CaseResult> = run(&p50s)
            .into_iter()
            .zip(cvs)
            .map(|(mut c, cv)| {
                c.derived.cv = Some(cv);
                c
            })
            .collect();
        assert_eq!(ceiling(&noisy), None);
        let v = verdict(&noisy);
        assert_eq!(
            v.refusal().as_deref(),
            Some("no ceiling: the flat run's cases (384 MiB to 3 GiB) vary 36–51% (CV) — too noisy to declare one")
        );
        // The same curve with steady reps has its ceiling; one noisy case among steady ones does not take it away.
        let steady: Vec<CaseResult> = run(&p50s)
            .into_iter()
            .map(|mut c| {
                c.derived.cv = Some(0.03);
                c
            })
            .collect();
        assert_eq!(ceiling(&steady).map(|c| c.gbps), Some(3.075));
        let mut one = steady.clone();
        one[4].derived.cv = Some(0.6);
        assert!(matches!(verdict(&one), Verdict::Ceiling(_)));
        assert_eq!(verdict(&steady).refusal(), None);
    }

    #[test]
    fn no_plateau_no_ceiling() {
        assert_eq!(ceiling(&run(&[1.0, 2.0, 4.0, 8.0])), None);
        assert_eq!(ceiling(&run(&[9.7])), None);
        assert_eq!(ceiling(&[]), None);
    }
}
