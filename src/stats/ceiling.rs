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
//! settled within the sizes measured.

use super::summary::quantile_sorted;
use super::CaseResult;

/// p50s within this fraction of the plateau's median count as flat.
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

/// Detect the ceiling of one run's cases (any order).
pub fn ceiling(cases: &[CaseResult]) -> Option<Ceiling> {
    let mut points: Vec<(u64, f64)> =
        cases.iter().map(|c| (c.size_bytes, c.gbps.p50)).filter(|(_, g)| g.is_finite()).collect();
    points.sort_by_key(|p| p.0);
    let mut flat: Vec<(usize, Ceiling)> = Vec::new();
    for i in 0..points.len() {
        for j in i + 1..points.len() {
            let run = &points[i..=j];
            if let Some(median) = flat_median(run) {
                flat.push((run.len(), Ceiling { gbps: median, first_size: run[0].0, last_size: run[run.len() - 1].0 }));
            }
        }
    }
    let top = flat.iter().map(|f| f.1.gbps).fold(f64::NEG_INFINITY, f64::max);
    flat.into_iter()
        .filter(|f| f.1.gbps >= MIN_FRACTION_OF_TOP * top)
        .max_by(|a, b| a.0.cmp(&b.0).then(a.1.gbps.total_cmp(&b.1.gbps)))
        .map(|f| f.1)
}

/// The median of the run's p50s when every one lies within the tolerance of it.
fn flat_median(run: &[(u64, f64)]) -> Option<f64> {
    let mut v: Vec<f64> = run.iter().map(|p| p.1).collect();
    v.sort_by(f64::total_cmp);
    let median = quantile_sorted(&v, 0.5);
    v.iter().all(|x| (x - median).abs() <= FLAT_TOLERANCE * median).then_some(median)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{RateSummary, Summary};

    fn case(size_mib: u64, p50: f64) -> CaseResult {
        let s = Summary { p50, p90: p50, p99: p50, min: p50, max: p50, mean: p50, stdev: 0.0 };
        CaseResult {
            size_bytes: size_mib << 20,
            tokens: None,
            bytes_per_token: None,
            n: 5,
            transfer_ms: s,
            gbps: RateSummary { p50, min: p50, max: p50, mean: p50 },
            setup_ms: s,
            notify_ms: s,
            total_ms: s,
            block_latency_us: None,
            verified: None,
            mismatched_bytes: None,
            block_size: 1 << 20,
            block_clamped: false,
            writes: 1,
            reps: vec![],
            warmup_reps: vec![],
            bimodal: Default::default(),
            layout: crate::plan::paged::Layout::Contiguous,
            pieces: 1,
            piece_bytes: size_mib << 20,
            work_requests: None,
            staged_p50: None,
            descriptors: None,
            rails: None,
            counters: None,
            cpu_s_per_gib: None,
            attribution: None,
            p50_ci: None,
            cv: None,
            warnings: vec![],
            case_id: None,
            case_label: None,
            params: None,
            complete: true,
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
    fn no_plateau_no_ceiling() {
        assert_eq!(ceiling(&run(&[1.0, 2.0, 4.0, 8.0])), None);
        assert_eq!(ceiling(&run(&[9.7])), None);
        assert_eq!(ceiling(&[]), None);
    }
}
