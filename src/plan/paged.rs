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
//! are scattered, as in a fragmented cache. With `--dst-placement sequential` the destination's block b is slot b
//! instead (a freshly allocated or defragmented decode pool), so each region's destination pieces are contiguous
//! while the source stays scattered: the case an SGE list gathers into one RDMA WRITE.
//!
//! A transfer of `T` tokens is, for each layer, each region, each of `ceil(T / block_tokens)` blocks, one piece of
//! `block_tokens × region_bytes_per_token` bytes (the last block of a region shorter) from its source slot to its
//! destination slot. Every piece also has a logical offset: where its bytes sit in the transfer laid out
//! `[layer][region][token]`. `--verify` fills and checks pieces by that logical offset, so the pattern follows the
//! data and a piece landing in the wrong slot fails.

use super::{SizeCase, Write};
use crate::bail_usage;
use crate::named::named_enum;
use crate::pattern::{splitmix64, Span};
use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

/// Default tokens per block (vLLM's default block size).
pub const DEFAULT_BLOCK_TOKENS: u64 = 16;
/// Most pieces one transfer may have: the plan holds ~56 B per piece on each side (and the receiver builds it from
/// what a sender asked), so this bounds it to about 1 GiB.
pub const MAX_PIECES: u64 = 16 << 20;

/// Salts that make the source and destination placements independent draws from one seed.
const SRC_SALT: u64 = 0x7372_635f_736c_6f74; // "src_slot"
const DST_SALT: u64 = 0x6473_745f_736c_6f74; // "dst_slot"

named_enum! {
    /// `--layout`: how a transfer's bytes sit in each side's memory (named as results and tables name it).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub enum Layout {
        // One buffer, written in blocks of --block-size.
        #[default]
        Contiguous = "contiguous",
        // Per-layer K/V blocks scattered over a pool on each side.
        Paged = "paged",
    }
}

named_enum! {
    /// Where the receiver's blocks go (`--dst-placement`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub enum DstPlacement {
        // A seeded random permutation, independent of the source's (a fragmented cache).
        #[default]
        Random = "random",
        // Block b in slot b (a fresh or defragmented pool).
        Sequential = "sequential",
    }
}

impl DstPlacement {
    fn is_random(&self) -> bool {
        *self == DstPlacement::Random
    }
}

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
    /// Where the receiver's blocks go. Absent (random) in what older peers send, and left out when random so a
    /// config with the default still parses there.
    #[serde(default, skip_serializing_if = "DstPlacement::is_random")]
    pub dst_placement: DstPlacement,
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

/// How pieces become writes: one each, or merged where adjacent on both sides (`--coalesce`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merge {
    PerPiece,
    Coalesce,
}

/// A fault planted in the writes to show that verification catches it (test-only), or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DestFault {
    None,
    /// Swap the destinations of two pieces.
    SwapTwo,
}

impl PagedConfig {
    /// How this layout's pieces become writes.
    pub fn merge(&self) -> Merge {
        if self.coalesce {
            Merge::Coalesce
        } else {
            Merge::PerPiece
        }
    }

    /// The fault this layout asks planted, if any.
    pub fn dest_fault(&self) -> DestFault {
        if self.fault_swap_dests {
            DestFault::SwapTwo
        } else {
            DestFault::None
        }
    }

    pub fn piece_bytes(&self) -> u64 {
        self.block_tokens * self.region_bytes_per_token
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

    /// How to ask for a smaller pool, naming what makes it large: a pool is whole blocks, so where a block of
    /// `--block-tokens` is most of it, a smaller `--pool-tokens` changes nothing.
    pub fn smaller_pool_hint(&self) -> String {
        let rounded = self.pool_blocks().saturating_mul(self.block_tokens);
        if rounded / 2 > self.pool_tokens {
            format!(
                "the pool holds whole blocks: {} of --block-tokens {} for {} tokens; lower --block-tokens",
                self.pool_blocks(),
                self.block_tokens,
                self.pool_tokens
            )
        } else {
            "give a smaller --pool-tokens (twice the largest transfer by default; at least the largest transfer) or fewer --tokens".to_string()
        }
    }

    /// Pieces of a transfer of `tokens` tokens: layers × regions × ceil(tokens / block_tokens).
    pub fn pieces(&self, tokens: u64) -> u64 {
        self.layers * self.regions_per_layer * tokens.div_ceil(self.block_tokens)
    }

    /// Memory one end holds to plan a transfer of `tokens` tokens, beside the pool: the pieces, their writes and
    /// their verification spans at once (the receiver builds the spans from the plan while it is alive), and the
    /// two slot permutations of the whole pool. 1-byte pieces in a 16 MiB pool took serve past 1.3 GB with these.
    /// Saturates; call [`PagedConfig::validate`] first.
    pub fn plan_bytes(&self, tokens: u64) -> u64 {
        let per_piece = size_of::<Piece>() + size_of::<Write>() + size_of::<Span>();
        let per_slot = 2 * size_of::<u64>();
        self.pieces(tokens).saturating_mul(per_piece as u64).saturating_add(self.pool_blocks() * per_slot as u64)
    }

    /// Check the layout and every case against it, with overflow-checked arithmetic: the receiver runs this on what
    /// a sender asked before allocating or planning anything, so it must never panic.
    pub fn validate(&self, cases: &[SizeCase]) -> Result<()> {
        if self.block_tokens == 0 || self.layers == 0 || self.regions_per_layer == 0 || self.region_bytes_per_token == 0
        {
            bail_usage!("--layout paged: block tokens, layers, regions and region bytes per token must be positive");
        }
        self.check_pool_fits()?;
        // Each end keeps a slot permutation of the whole pool (8 bytes a block): bounded like the pieces.
        if self.pool_blocks() > MAX_PIECES {
            bail_usage!(
                "--pool-tokens {} in blocks of {} tokens is {} blocks, above the limit of {MAX_PIECES}; raise --block-tokens",
                self.pool_tokens,
                self.block_tokens,
                self.pool_blocks()
            );
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

    /// Refuse a pool whose size overflows or passes what any memory holds, naming what made it so: the model's
    /// bytes per token, a block of `--block-tokens` (a pool is whole blocks, so one huge block is a huge pool however
    /// few tokens it holds), or `--pool-tokens` itself.
    fn check_pool_fits(&self) -> Result<()> {
        let most = isize::MAX as u64;
        let fits = |x: Option<u64>| x.filter(|&b| b <= most);
        let bpt =
            self.layers.checked_mul(self.regions_per_layer).and_then(|x| x.checked_mul(self.region_bytes_per_token));
        let Some(bpt) = fits(bpt) else {
            bail_usage!(
                "--layout paged: the model's geometry ({} layers × {} regions × {} bytes per token) overflows; check --model-config",
                self.layers,
                self.regions_per_layer,
                self.region_bytes_per_token
            );
        };
        if fits(self.pool_tokens.checked_mul(bpt)).is_none() {
            bail_usage!(
                "--pool-tokens {}: {} tokens of {bpt} bytes each do not fit in memory; lower --pool-tokens",
                self.pool_tokens,
                self.pool_tokens
            );
        }
        let block = fits(self.block_tokens.checked_mul(bpt));
        if block.and_then(|b| fits(b.checked_mul(self.pool_blocks()))).is_none() {
            bail_usage!(
                "--block-tokens {}: a block of {} tokens of {bpt} bytes each is larger than any memory (a pool holds whole blocks); lower --block-tokens",
                self.block_tokens,
                self.block_tokens
            );
        }
        Ok(())
    }

    /// The pieces of a transfer of `tokens` tokens, placed by permutations drawn from `seed` (the destination's in
    /// order with `DstPlacement::Sequential`).
    /// Call [`PagedConfig::validate`] first.
    pub fn plan(&self, seed: u64, tokens: u64) -> PagedPlan {
        let blocks = tokens.div_ceil(self.block_tokens) as usize;
        let (src_slots, dst_slots) = (self.source_slots(seed), self.dest_slots(seed));
        self.plan_with_slots(tokens, &src_slots[..blocks], &dst_slots[..blocks])
    }

    /// The destination slots [`PagedConfig::plan`] places a transfer's blocks in (the first `blocks` of them):
    /// permuted, or in order with `DstPlacement::Sequential`. A replay's pool starts its free list in this order.
    pub fn dest_slots(&self, seed: u64) -> Vec<u64> {
        match self.dst_placement {
            DstPlacement::Random => permutation(self.pool_blocks(), seed ^ DST_SALT),
            DstPlacement::Sequential => (0..self.pool_blocks()).collect(),
        }
    }

    /// The source slots [`PagedConfig::plan`] places a transfer's blocks in (the first `blocks` of them): a
    /// replay's sender keeps this placement while the receiver's slots come from its pool.
    pub fn source_slots(&self, seed: u64) -> Vec<u64> {
        permutation(self.pool_blocks(), seed ^ SRC_SALT)
    }

    /// The pieces of a transfer of `tokens` tokens whose block b sits in slot `src[b]` of the sender's pool and
    /// `dst[b]` of the receiver's: a block table per side, as a serving engine's block manager hands them out.
    /// Both lists hold `ceil(tokens / block_tokens)` slots ([`PagedConfig::check_slots`]); call
    /// [`PagedConfig::validate`] first.
    pub fn plan_with_slots(&self, tokens: u64, src: &[u64], dst: &[u64]) -> PagedPlan {
        let (bt, rb) = (self.block_tokens, self.region_bytes_per_token);
        let piece_bytes = bt * rb;
        let pool_blocks = self.pool_blocks();
        let blocks = tokens.div_ceil(bt);
        assert!(src.len() as u64 == blocks && dst.len() as u64 == blocks, "a slot per block, checked before");
        let mut pieces = Vec::with_capacity(self.pieces(tokens) as usize);
        for region in 0..self.layers * self.regions_per_layer {
            // `region` counts (layer, K/V) pairs in layout order: layer-major, as the pool is laid out.
            let pool_base = region * pool_blocks * piece_bytes;
            let logical_base = region * tokens * rb;
            for b in 0..blocks {
                pieces.push(Piece {
                    src: pool_base + src[b as usize] * piece_bytes,
                    dst: pool_base + dst[b as usize] * piece_bytes,
                    len: (tokens - b * bt).min(bt) * rb,
                    logical: logical_base + b * piece_bytes,
                });
            }
        }
        PagedPlan { pieces, piece_bytes, blocks_per_region: blocks }
    }

    /// Check block slots a peer gave for a transfer of `size_bytes`: a whole number of tokens, at most the pool,
    /// one slot per block, each inside the pool and none twice (the receiver runs this on what a sender asked, so
    /// it must never panic). Returns the tokens.
    pub fn check_slots(&self, size_bytes: u64, slots: &[u64]) -> Result<u64> {
        let bpt = self.bytes_per_token();
        if bpt == 0 || size_bytes % bpt != 0 {
            bail!("{size_bytes} bytes are not a whole number of tokens of {bpt} B");
        }
        let tokens = size_bytes / bpt;
        let blocks = tokens.div_ceil(self.block_tokens.max(1));
        if slots.len() as u64 != blocks {
            bail!(
                "{} block slots for {tokens} tokens, which take {blocks} blocks of {}",
                slots.len(),
                self.block_tokens
            );
        }
        let pool = self.pool_blocks();
        if let Some(s) = slots.iter().find(|&&s| s >= pool) {
            bail!("block slot {s} is outside the pool of {pool} blocks");
        }
        let mut sorted = slots.to_vec();
        sorted.sort_unstable();
        if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
            bail!("block slot {} is given twice", w[0]);
        }
        if self.pieces(tokens) > MAX_PIECES {
            bail!("{tokens} tokens make {} pieces, above the limit of {MAX_PIECES}", self.pieces(tokens));
        }
        Ok(tokens)
    }
}

impl PagedPlan {
    /// The writes that move the pieces: one per piece in transfer order, or with [`Merge::Coalesce`] pieces adjacent
    /// on both sides merged (found in source address order, which meets every such pair) and returned in
    /// destination order; with the fault planted that `fault` names.
    pub fn writes(&self, merge: Merge, fault: DestFault) -> Vec<Write> {
        let mut writes: Vec<Write> =
            self.pieces.iter().map(|p| Write { local_offset: p.src, remote_offset: p.dst, len: p.len }).collect();
        if fault == DestFault::SwapTwo {
            // Block 0 of region 0 and block 0 of region 1: equal lengths, so both stay inside the pools.
            let j = self.blocks_per_region as usize;
            if j < writes.len() {
                let d = writes[0].remote_offset;
                writes[0].remote_offset = writes[j].remote_offset;
                writes[j].remote_offset = d;
            }
        }
        if merge == Merge::Coalesce {
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
            // Back in destination order, so writes whose destinations follow each other stay neighbours in the list
            // (what verbs gathers into one work request with an SGE list).
            merged.sort_by_key(|w| w.remote_offset);
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

#[cfg(test)]
#[path = "paged_tests.rs"]
mod tests;
