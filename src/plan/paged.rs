//! The paged KV layout (`--layout paged`): a transfer as a serving engine's block manager moves it.
//!
//! Each side holds a pool of `pool_blocks` block slots of `block_tokens` tokens. Memory layout, per side:
//!
//! ```text
//! [layer][region][slot][block_tokens × region_bytes_per_token]
//! ```
//!
//! i.e. one tensor per layer holding its K blocks then its V blocks (vLLM's `[2, num_blocks, block_size, heads,
//! head_dim]` per layer; MLA has one latent region per layer), so one block of one region is contiguous. A request's
//! logical block `b` lives in slot `perm[b]` on each side, the same slot in every layer and region (a block table),
//! where `perm` is a seeded random permutation drawn independently for the source and the destination: both ends
//! are scattered, as in a fragmented cache.
//!
//! A transfer of `T` tokens is, for each layer, each region, each of `ceil(T / block_tokens)` blocks, one piece of
//! `block_tokens × region_bytes_per_token` bytes (the last block of a region shorter) from its source slot to its
//! destination slot. Every piece also has a logical offset: where its bytes sit in the transfer laid out
//! `[layer][region][token]`. `--verify` fills and checks pieces by that logical offset, so the pattern follows the
//! data and a piece landing in the wrong slot fails.

use super::{SizeCase, Write};
use crate::bail_usage;
use crate::run::verify::{splitmix64, Span};
use anyhow::Result;
use serde::{Deserialize, Serialize};

/// Default tokens per block (vLLM's default block size).
pub const DEFAULT_BLOCK_TOKENS: u64 = 16;
/// Most pieces one transfer may have: the plan holds ~56 B per piece on each side (and the receiver builds it from
/// what a sender asked), so this bounds it to about 1 GiB.
pub const MAX_PIECES: u64 = 16 << 20;

/// Salts that make the source and destination placements independent draws from one seed.
const SRC_SALT: u64 = 0x7372_635f_736c_6f74; // "src_slot"
const DST_SALT: u64 = 0x6473_745f_736c_6f74; // "dst_slot"

/// The paged layout of a run, agreed with the receiver (in [`super::RunConfig`]) so both build the same plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PagedConfig {
    pub block_tokens: u64,
    pub pool_tokens: u64,
    pub layers: u64,
    /// 2 (K and V) for standard attention, 1 (the latent) for MLA.
    pub regions_per_layer: u64,
    pub region_bytes_per_token: u64,
    /// Merge pieces adjacent on both sides into one write.
    #[serde(default)]
    pub coalesce: bool,
    /// Test-only fault injection (hidden `--test-fault-swap-dests`): the sender swaps the destinations of two
    /// pieces, so `--verify` must fail. Never sent to the receiver, which always plans the true destinations.
    #[serde(skip)]
    pub fault_swap_dests: bool,
}

/// One block of one region of one layer: `len` bytes from `src` (sender's pool) to `dst` (receiver's pool), holding
/// the transfer's bytes at `logical`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    pub src: u64,
    pub dst: u64,
    pub len: u64,
    pub logical: u64,
}

/// The pieces of one paged transfer, in transfer order (layer, region, block).
#[derive(Debug, Clone)]
pub struct PagedPlan {
    pub pieces: Vec<Piece>,
    /// Bytes of a full piece (block_tokens × region_bytes_per_token).
    pub piece_bytes: u64,
    pub blocks_per_region: u64,
}

impl PagedConfig {
    pub fn piece_bytes(&self) -> u64 {
        self.block_tokens * self.region_bytes_per_token
    }

    fn piece_bytes_checked(&self) -> Option<u64> {
        self.block_tokens.checked_mul(self.region_bytes_per_token)
    }

    pub fn pool_blocks(&self) -> u64 {
        self.pool_tokens.div_ceil(self.block_tokens)
    }

    pub fn bytes_per_token(&self) -> u64 {
        self.layers * self.regions_per_layer * self.region_bytes_per_token
    }

    /// Bytes of the pool each side allocates: layers × regions × pool_blocks × piece bytes.
    pub fn pool_bytes(&self) -> u64 {
        self.layers * self.regions_per_layer * self.pool_blocks() * self.piece_bytes()
    }

    /// Pieces of a transfer of `tokens` tokens: layers × regions × ceil(tokens / block_tokens).
    pub fn pieces(&self, tokens: u64) -> u64 {
        self.layers * self.regions_per_layer * tokens.div_ceil(self.block_tokens)
    }

    /// Check the layout and every case against it, with overflow-checked arithmetic: the receiver runs this on what
    /// a sender asked before allocating or planning anything, so it must never panic.
    pub fn validate(&self, cases: &[SizeCase]) -> Result<()> {
        if self.block_tokens == 0 || self.layers == 0 || self.regions_per_layer == 0 || self.region_bytes_per_token == 0
        {
            bail_usage!("--layout paged: block tokens, layers, regions and region bytes per token must be positive");
        }
        let pool = self
            .piece_bytes_checked()
            .and_then(|x| x.checked_mul(self.layers))
            .and_then(|x| x.checked_mul(self.regions_per_layer))
            .and_then(|x| x.checked_mul(self.pool_blocks()));
        let bpt =
            self.layers.checked_mul(self.regions_per_layer).and_then(|x| x.checked_mul(self.region_bytes_per_token));
        if pool.is_none_or(|p| p > isize::MAX as u64) || bpt.is_none() {
            bail_usage!("--pool-tokens {}: a pool this large does not fit in memory", self.pool_tokens);
        }
        for c in cases {
            let Some(tokens) = c.tokens else {
                bail_usage!("--layout paged needs --tokens (it places blocks of tokens), not --sizes");
            };
            if tokens > self.pool_tokens {
                bail_usage!(
                    "--pool-tokens {}: smaller than the transfer of {tokens} tokens; give at least {tokens}",
                    self.pool_tokens
                );
            }
            if Some(c.size_bytes) != tokens.checked_mul(self.bytes_per_token()) {
                bail_usage!("--layout paged: {tokens} tokens are not {} bytes with this model geometry", c.size_bytes);
            }
            let pieces = self.pieces(tokens);
            if pieces > MAX_PIECES {
                bail_usage!(
                    "--layout paged: {tokens} tokens make {pieces} pieces, above the limit of {MAX_PIECES}; raise --block-tokens"
                );
            }
        }
        Ok(())
    }

    /// The pieces of a transfer of `tokens` tokens, placed by permutations drawn from `seed`.
    /// Call [`PagedConfig::validate`] first.
    pub fn plan(&self, seed: u64, tokens: u64) -> PagedPlan {
        let (bt, rb) = (self.block_tokens, self.region_bytes_per_token);
        let piece_bytes = bt * rb;
        let pool_blocks = self.pool_blocks();
        let blocks = tokens.div_ceil(bt);
        let src_slots = permutation(pool_blocks, seed ^ SRC_SALT);
        let dst_slots = permutation(pool_blocks, seed ^ DST_SALT);
        let mut pieces = Vec::with_capacity(self.pieces(tokens) as usize);
        for region in 0..self.layers * self.regions_per_layer {
            // `region` counts (layer, K/V) pairs in layout order: layer-major, as the pool is laid out.
            let pool_base = region * pool_blocks * piece_bytes;
            let logical_base = region * tokens * rb;
            for b in 0..blocks {
                pieces.push(Piece {
                    src: pool_base + src_slots[b as usize] * piece_bytes,
                    dst: pool_base + dst_slots[b as usize] * piece_bytes,
                    len: (tokens - b * bt).min(bt) * rb,
                    logical: logical_base + b * piece_bytes,
                });
            }
        }
        PagedPlan { pieces, piece_bytes, blocks_per_region: blocks }
    }
}

impl PagedPlan {
    /// The writes that move the pieces: one per piece, or with `coalesce` pieces adjacent on both sides merged (in
    /// source address order, which finds every such pair). `fault_swap_dests` (test-only) swaps the destinations of
    /// two pieces.
    pub fn writes(&self, coalesce: bool, fault_swap_dests: bool) -> Vec<Write> {
        let mut writes: Vec<Write> =
            self.pieces.iter().map(|p| Write { local_offset: p.src, remote_offset: p.dst, len: p.len }).collect();
        if fault_swap_dests {
            // Block 0 of region 0 and block 0 of region 1: equal lengths, so both stay inside the pools.
            let j = self.blocks_per_region as usize;
            if j < writes.len() {
                let d = writes[0].remote_offset;
                writes[0].remote_offset = writes[j].remote_offset;
                writes[j].remote_offset = d;
            }
        }
        if coalesce {
            writes.sort_by_key(|w| w.local_offset);
            let mut merged: Vec<Write> = Vec::with_capacity(writes.len());
            for w in writes {
                match merged.last_mut() {
                    Some(m)
                        if m.local_offset + m.len == w.local_offset && m.remote_offset + m.len == w.remote_offset =>
                    {
                        m.len += w.len
                    }
                    _ => merged.push(w),
                }
            }
            writes = merged;
        }
        writes
    }

    /// Where each piece's pattern lives in the sender's pool.
    pub fn source_spans(&self) -> Vec<Span> {
        self.pieces.iter().map(|p| Span { offset: p.src, logical: p.logical, len: p.len }).collect()
    }

    /// Where each piece's pattern must land in the receiver's pool.
    pub fn dest_spans(&self) -> Vec<Span> {
        self.pieces.iter().map(|p| Span { offset: p.dst, logical: p.logical, len: p.len }).collect()
    }
}

/// A permutation of `0..n` drawn by Fisher–Yates from the splitmix64 sequence of `seed`: reproducible from the seed
/// alone, on any machine.
pub fn permutation(n: u64, seed: u64) -> Vec<u64> {
    let mut p: Vec<u64> = (0..n).collect();
    let mut state = seed;
    for i in (1..n as usize).rev() {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        // Multiply-shift maps 64 random bits onto 0..=i (bias below 2^-40 for any pool that fits in memory).
        let j = ((splitmix64(state) as u128 * (i as u128 + 1)) >> 64) as usize;
        p.swap(i, j);
    }
    p
}
