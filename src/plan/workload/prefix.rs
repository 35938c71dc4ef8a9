//! A prefix cache, as a serving engine keeps one: KV blocks of earlier prompts, found again by their block hash. A
//! request whose leading blocks are cached needs only the rest of its prompt's KV cache moved, so a replay with a
//! prefix cache offers the bytes a real disaggregated deployment would move, not every prompt's whole cache.
//!
//! Only a leading run counts: a block's KV depends on every token before it, so a cached block after a missing one
//! is of no use. The cache is an LRU of block ids; requests must be admitted in trace (arrival) order.

use super::{Request, BLOCK_TOKENS};
use crate::bail_usage;
use anyhow::Result;
use std::collections::{BTreeMap, HashMap};

/// How many blocks the cache holds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PrefixCacheSize {
    /// No cache: nothing ever hits, every prompt moves whole.
    Off,
    /// At most this many blocks (of [`BLOCK_TOKENS`] tokens each); the least recently used go first.
    Blocks(u64),
    /// Every block ever seen stays: the most a prefix cache could save.
    Unlimited,
}

impl std::str::FromStr for PrefixCacheSize {
    type Err = anyhow::Error;

    /// `off`, `unlimited`, or a number of blocks.
    fn from_str(text: &str) -> Result<PrefixCacheSize> {
        match text.trim() {
            "off" => Ok(PrefixCacheSize::Off),
            "unlimited" => Ok(PrefixCacheSize::Unlimited),
            t => match t.parse::<u64>() {
                Ok(0) => bail_usage!("prefix cache of 0 blocks holds nothing; write off for no prefix cache"),
                Ok(n) => Ok(PrefixCacheSize::Blocks(n)),
                Err(_) => bail_usage!(
                    "prefix cache {text:?}: expected off, unlimited or a number of {BLOCK_TOKENS}-token blocks"
                ),
            },
        }
    }
}

/// What the cache saved so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PrefixHits {
    /// Requests admitted.
    pub requests: u64,
    /// Requests with some of their prompt cached.
    pub hit_requests: u64,
    /// Input tokens found cached (not moved).
    pub cached_tokens: u64,
    /// Input tokens of all admitted requests.
    pub input_tokens: u64,
}

impl PrefixHits {
    /// Cached tokens ÷ input tokens: the share of prompt KV bytes the cache saved (0 before any request).
    pub fn rate(&self) -> f64 {
        if self.input_tokens == 0 {
            0.0
        } else {
            self.cached_tokens as f64 / self.input_tokens as f64
        }
    }
}

/// An LRU of block ids. Recency is a counter stamped on each use: `stamps` finds a block's stamp, `by_stamp` the
/// oldest block, each in O(log n) or better, so a trace of millions of blocks admits in n log n.
#[derive(Debug)]
pub struct PrefixCache {
    size: PrefixCacheSize,
    stamps: HashMap<u64, u64>,
    by_stamp: BTreeMap<u64, u64>,
    clock: u64,
    hits: PrefixHits,
}

impl PrefixCache {
    pub fn new(size: PrefixCacheSize) -> Self {
        PrefixCache { size, stamps: HashMap::new(), by_stamp: BTreeMap::new(), clock: 0, hits: PrefixHits::default() }
    }

    /// Admit the next request (in arrival order): how many of its input tokens are cached — the leading run of its
    /// blocks found, × [`BLOCK_TOKENS`], at most its input — then all its blocks enter as most recent, the least
    /// recently used leaving past the capacity. A request without hash ids finds nothing and adds nothing.
    pub fn admit(&mut self, r: &Request) -> u64 {
        let ids: &[u64] = r.hash_ids.as_deref().unwrap_or(&[]);
        let cached = if self.size == PrefixCacheSize::Off {
            0
        } else {
            let run = ids.iter().take_while(|id| self.stamps.contains_key(id)).count() as u64;
            for &id in ids {
                self.touch(id);
            }
            self.evict();
            (run * BLOCK_TOKENS).min(r.input_tokens)
        };
        self.hits.requests += 1;
        self.hits.hit_requests += u64::from(cached > 0);
        self.hits.cached_tokens += cached;
        self.hits.input_tokens += r.input_tokens;
        cached
    }

    pub fn hits(&self) -> PrefixHits {
        self.hits
    }

    /// Blocks held now.
    pub fn blocks(&self) -> u64 {
        self.stamps.len() as u64
    }

    /// Make `id` the most recently used block, entering it if new.
    fn touch(&mut self, id: u64) {
        self.clock += 1;
        if let Some(old) = self.stamps.insert(id, self.clock) {
            self.by_stamp.remove(&old);
        }
        self.by_stamp.insert(self.clock, id);
    }

    /// Drop least recently used blocks past the capacity.
    fn evict(&mut self) {
        let PrefixCacheSize::Blocks(cap) = self.size else { return };
        while self.stamps.len() as u64 > cap {
            let (_, id) = self.by_stamp.pop_first().expect("a block per stamp");
            self.stamps.remove(&id);
        }
    }
}

#[cfg(test)]
#[path = "prefix_tests.rs"]
mod tests;
