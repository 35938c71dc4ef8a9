//! Which ranks move each request of a cluster replay (`--pattern replay`): the prefill rank that sends it and the
//! decode rank that receives it. Every rank computes the routes alike from the schedule (itself computed from the
//! same flags and seed), so no route travels over the wire and every rank agrees on who sends what to whom.

use crate::named::named_enum;
use crate::run::replay::Scheduled;
use std::collections::BTreeSet;

named_enum! {
    /// `--route`: how a request's decode rank is chosen (its prefill rank is always the next in turn).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Route {
        RoundRobin = "round-robin": "The decode ranks in turn over the stream (request i to the (i mod D)-th), as a \
                                     proxy that round-robins both sides does",
        LeastLoaded = "least-loaded": "The decode rank with the fewest bytes routed to it so far (ties: the first \
                                       listed), counted from the schedule so every rank agrees without messages",
    }
}

/// One request's ends: the prefill rank that sends it and the decode rank that receives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Link {
    pub src: usize,
    pub dst: usize,
}

/// The ranks `text` names (`0,1`, `2-3`, `0,2-5`), each below `world_size`, in the order given; or why not, as the
/// rest of a line that starts with the flag.
pub fn parse_ranks(text: &str, world_size: usize) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for part in text.split(',').map(str::trim) {
        let bad = || format!("'{part}' is not a rank or a range of ranks; give e.g. 0,1 or 2-3");
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => {
                (a.trim().parse::<usize>().map_err(|_| bad())?, b.trim().parse::<usize>().map_err(|_| bad())?)
            }
            None => {
                let r = part.parse::<usize>().map_err(|_| bad())?;
                (r, r)
            }
        };
        if a > b {
            return Err(format!("'{part}' is an empty range; give the lower rank first"));
        }
        for r in a..=b {
            if r >= world_size {
                let last = world_size.saturating_sub(1);
                return Err(format!("rank {r} is out of range: this run has {world_size} ranks (0-{last})"));
            }
            if out.contains(&r) {
                return Err(format!("rank {r} is named twice"));
            }
            out.push(r);
        }
    }
    Ok(out)
}

/// The first rank in both lists, if any.
pub fn overlap(prefill: &[usize], decode: &[usize]) -> Option<usize> {
    prefill.iter().copied().find(|r| decode.contains(r))
}

/// Each request's link, in schedule order: request i (0-based, in schedule order) is sent by the (i mod P)-th
/// prefill rank; its decode rank is chosen by `route`. `prefill` and `decode` must not be empty.
pub fn route(schedule: &[Scheduled], prefill: &[usize], decode: &[usize], route: Route) -> Vec<Link> {
    assert!(!prefill.is_empty() && !decode.is_empty(), "routing needs prefill and decode ranks");
    let mut routed = vec![0u64; decode.len()];
    schedule
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let d = match route {
                Route::RoundRobin => i % decode.len(),
                // min_by_key keeps the first of equal keys: the first listed decode rank wins a tie.
                Route::LeastLoaded => (0..decode.len()).min_by_key(|&d| routed[d]).expect("a decode rank"),
            };
            routed[d] = routed[d].saturating_add(r.bytes);
            Link { src: prefill[i % prefill.len()], dst: decode[d] }
        })
        .collect()
}

/// The links of `routes`, each once, in order.
pub fn links(routes: &[Link]) -> BTreeSet<Link> {
    routes.iter().copied().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule(bytes: &[u64]) -> Vec<Scheduled> {
        bytes
            .iter()
            .enumerate()
            .map(|(i, &b)| Scheduled { id: i as u64, at_ms: i as f64, bytes: b, cached_bytes: 0, output_tokens: 0 })
            .collect()
    }

    #[test]
    fn round_robin_takes_prefill_and_decode_ranks_in_turn() {
        let got = route(&schedule(&[1; 6]), &[0, 1, 2], &[3, 4], Route::RoundRobin);
        let pairs: Vec<(usize, usize)> = got.iter().map(|l| (l.src, l.dst)).collect();
        assert_eq!(pairs, [(0, 3), (1, 4), (2, 3), (0, 4), (1, 3), (2, 4)]);
    }

    #[test]
    fn least_loaded_sends_each_request_to_the_decode_rank_with_fewest_bytes_so_far() {
        // 100 to d0, then 1, 1, 1 to d1 (fewer bytes), then 200 to d1 (3 < 100), then 5 to d0 (100 < 203).
        let got = route(&schedule(&[100, 1, 1, 1, 200, 5]), &[0, 1], &[2, 3], Route::LeastLoaded);
        let dst: Vec<usize> = got.iter().map(|l| l.dst).collect();
        assert_eq!(dst, [2, 3, 3, 3, 3, 2]);
        let src: Vec<usize> = got.iter().map(|l| l.src).collect();
        assert_eq!(src, [0, 1, 0, 1, 0, 1]);
        assert_eq!(links(&got).len(), 4);
    }

    #[test]
    fn rank_lists_take_ranges_and_refuse_what_is_not_a_rank_here() {
        assert_eq!(parse_ranks("0,1", 4), Ok(vec![0, 1]));
        assert_eq!(parse_ranks("2-3, 0", 4), Ok(vec![2, 3, 0]));
        assert!(parse_ranks("4", 4).unwrap_err().contains("rank 4 is out of range: this run has 4 ranks (0-3)"));
        assert!(parse_ranks("1,1", 4).unwrap_err().contains("rank 1 is named twice"));
        assert!(parse_ranks("x", 4).unwrap_err().contains("'x' is not a rank"));
        assert!(parse_ranks("3-1", 4).unwrap_err().contains("empty range"));
        assert_eq!(overlap(&[0, 1], &[1, 2]), Some(1));
        assert_eq!(overlap(&[0, 1], &[2, 3]), None);
    }
}
