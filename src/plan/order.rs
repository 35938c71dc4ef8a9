//! The order a sweep runs its measured reps in. Slow drifts (a GPU warming up, a NIC's clocks, a neighbour's job)
//! would bias whichever case ran during them; running every case once per round, in a fresh shuffle each round,
//! spreads such drifts over all cases instead. The order is a pure function of the seed, so it can be reproduced.

use crate::bail_usage;
use crate::named::{named_enum, Named};
use anyhow::Result;

named_enum! {
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Order {
        /// Round r runs every case that still needs a rep once, in a fresh seeded shuffle.
        Interleaved = "interleaved",
        /// One seeded shuffle of all measured reps of all cases.
        Random = "random",
        /// Case after case, each with all its reps (the order of `kvxfer send`).
        Sequential = "sequential",
    }
}

impl Order {
    pub fn parse(text: &str) -> Result<Order> {
        match Order::from_name(text) {
            Some(order) => Ok(order),
            None => bail_usage!("order {text:?}: choose interleaved, random or sequential"),
        }
    }
}

/// A small seeded generator (splitmix64): the order must be reproducible from the seed alone, on any platform.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        crate::pattern::splitmix64(self.0)
    }

    /// Fisher–Yates.
    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = (self.next() % (i as u64 + 1)) as usize;
            v.swap(i, j);
        }
    }
}

/// The measured reps in the order they run, as rounds of case indices. `need[c]` is how many measured reps case
/// `c` still needs. Interleaved: round r holds every case with more than r reps to go, shuffled with a generator
/// seeded from (seed, r). Random: one round, a shuffle of every rep. Sequential: one round, case after case.
pub fn schedule(order: Order, need: &[u32], seed: u64) -> Vec<Vec<usize>> {
    match order {
        Order::Interleaved => {
            let rounds = need.iter().copied().max().unwrap_or(0);
            (0..rounds)
                .map(|r| {
                    let mut round: Vec<usize> = (0..need.len()).filter(|&c| need[c] > r).collect();
                    Rng(seed ^ (r as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03)).shuffle(&mut round);
                    round
                })
                .collect()
        }
        Order::Random | Order::Sequential => {
            let mut all: Vec<usize> =
                need.iter().enumerate().flat_map(|(c, &n)| std::iter::repeat_n(c, n as usize)).collect();
            if order == Order::Random {
                Rng(seed).shuffle(&mut all);
            }
            if all.is_empty() {
                Vec::new()
            } else {
                vec![all]
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleaved_runs_every_case_once_per_round_in_a_fresh_order() {
        let s = schedule(Order::Interleaved, &[5; 9], 42);
        assert_eq!(s.len(), 5);
        for round in &s {
            let mut sorted = round.clone();
            sorted.sort();
            assert_eq!(sorted, (0..9).collect::<Vec<_>>(), "every case exactly once per round");
        }
        assert!(s.windows(2).any(|w| w[0] != w[1]), "rounds are shuffled afresh: {s:?}");
        assert_ne!(s[0], (0..9).collect::<Vec<_>>(), "and not left in file order");
    }

    #[test]
    fn the_order_is_reproducible_from_the_seed() {
        for order in [Order::Interleaved, Order::Random, Order::Sequential] {
            assert_eq!(schedule(order, &[3, 3, 3, 3], 7), schedule(order, &[3, 3, 3, 3], 7));
        }
        assert_ne!(schedule(Order::Interleaved, &[3; 6], 7), schedule(Order::Interleaved, &[3; 6], 8));
        assert_ne!(schedule(Order::Random, &[3; 6], 7), schedule(Order::Random, &[3; 6], 8));
    }

    #[test]
    fn uneven_needs_after_a_resume() {
        let s = schedule(Order::Interleaved, &[0, 2, 5], 1);
        assert_eq!(s.len(), 5);
        let count = |c| s.iter().flatten().filter(|&&x| x == c).count();
        assert_eq!((count(0), count(1), count(2)), (0, 2, 5));
        assert!(s[2..].iter().all(|r| r == &vec![2]));
        let r = schedule(Order::Random, &[1, 2, 3], 1);
        assert_eq!(r.len(), 1);
        let mut flat = r[0].clone();
        flat.sort();
        assert_eq!(flat, vec![0, 1, 1, 2, 2, 2]);
        assert_eq!(schedule(Order::Sequential, &[2, 1], 9), vec![vec![0, 0, 1]]);
        assert!(schedule(Order::Sequential, &[0, 0], 9).is_empty());
    }
}
