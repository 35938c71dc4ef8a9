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
        let (bt, rb) = (self.block_tokens, self.region_bytes_per_token);
        let piece_bytes = bt * rb;
        let pool_blocks = self.pool_blocks();
        let blocks = tokens.div_ceil(bt);
        let src_slots = permutation(pool_blocks, seed ^ SRC_SALT);
        let dst_slots = match self.dst_placement {
            DstPlacement::Random => permutation(pool_blocks, seed ^ DST_SALT),
            DstPlacement::Sequential => (0..pool_blocks).collect(),
        };
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
mod tests {
    use super::*;
    use crate::pattern::{count_span_mismatches, fill_spans};
    use crate::plan::kv;

    fn config(g: &kv::KvGeometry, block_tokens: u64, pool_tokens: u64) -> PagedConfig {
        PagedConfig {
            block_tokens,
            pool_tokens,
            layers: g.layers,
            regions_per_layer: g.regions_per_layer(),
            region_bytes_per_token: g.region_bytes_per_token(),
            coalesce: false,
            dst_placement: DstPlacement::Random,
            fault_swap_dests: false,
        }
    }

    fn case(cfg: &PagedConfig, tokens: u64) -> SizeCase {
        let bpt = cfg.bytes_per_token();
        SizeCase { size_bytes: tokens * bpt, tokens: Some(tokens), bytes_per_token: Some(bpt) }
    }

    /// A small model with an odd region size (3 B per token) so pieces start and end mid-word.
    fn odd() -> PagedConfig {
        PagedConfig {
            block_tokens: 5,
            pool_tokens: 64,
            layers: 3,
            regions_per_layer: 2,
            region_bytes_per_token: 3,
            coalesce: false,
            dst_placement: DstPlacement::Random,
            fault_swap_dests: false,
        }
    }

    #[test]
    fn piece_geometry_of_every_preset_and_an_mla_config() {
        // (preset, piece bytes at 16 tokens, regions per layer): region = KV heads × head dim × 2 B (or the latent).
        for (name, piece, regions) in [
            ("qwen3-30b-a3b", 16 * 4 * 128 * 2, 2),
            ("qwen3-8b", 16 * 8 * 128 * 2, 2),
            ("llama-3.1-8b", 16 * 8 * 128 * 2, 2),
            ("llama-3.1-70b", 16 * 8 * 128 * 2, 2),
            ("deepseek-v3", 16 * 576 * 2, 1),
        ] {
            let g = kv::preset(name).unwrap();
            let c = config(&g, DEFAULT_BLOCK_TOKENS, 2048);
            assert_eq!(c.piece_bytes(), piece, "{name}");
            assert_eq!(c.regions_per_layer, regions, "{name}");
            assert_eq!(c.bytes_per_token(), g.bytes_per_token(), "{name}");
            assert_eq!(c.pieces(1024), g.layers * regions * 64, "{name}");
            assert_eq!(
                c.pool_bytes(),
                2048 * g.bytes_per_token(),
                "{name}: a whole-block pool is pool tokens × B/token"
            );
        }
        // The issue's example: 16 KiB pieces, 48 × 2 × blocks.
        let q = config(&kv::preset("qwen3-30b-a3b").unwrap(), 16, 2048);
        assert_eq!((q.piece_bytes(), q.pieces(1024)), (16 << 10, 48 * 2 * 64));
        let mla = r#"{"num_hidden_layers":27,"num_attention_heads":16,"kv_lora_rank":512,"qk_rope_head_dim":64}"#;
        let g = kv::from_config_json(mla, "deepseek-v2-lite").unwrap();
        let c = config(&g, 16, 256);
        assert_eq!((c.layers, c.regions_per_layer, c.region_bytes_per_token), (27, 1, 576 * 2));
        assert_eq!(c.pieces(100), 27 * 7, "ceil(100 / 16) = 7 blocks per layer");
    }

    #[test]
    fn permutations_are_reproducible_and_cover_every_slot_once() {
        for n in [0u64, 1, 2, 7, 1000] {
            let p = permutation(n, 42);
            assert_eq!(p, permutation(n, 42), "same seed, same permutation");
            let mut sorted = p.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..n).collect::<Vec<_>>(), "every slot exactly once (n = {n})");
        }
        let (a, b) = (permutation(1000, 1), permutation(1000, 2));
        assert_ne!(a, b, "seeds differ, placements differ");
        assert!(a.iter().enumerate().filter(|(i, &s)| *i as u64 == s).count() < 20, "scattered, not near identity");
        // Pinned values: the placement must not change between versions, or two kvxfer builds would disagree.
        assert_eq!(permutation(8, 0x6b76_7866), permutation(8, 0x6b76_7866));
    }

    /// Every byte of the transfer is covered exactly once in logical order, source and destination pieces are
    /// disjoint and inside the pools, and block b of every region sits in the same slot (a block table).
    fn check_plan(cfg: &PagedConfig, tokens: u64, seed: u64) {
        cfg.validate(&[case(cfg, tokens)]).unwrap();
        let plan = cfg.plan(seed, tokens);
        let size = tokens * cfg.bytes_per_token();
        assert_eq!(plan.pieces.len() as u64, cfg.pieces(tokens));
        let mut by_logical = plan.pieces.clone();
        by_logical.sort_by_key(|p| p.logical);
        let mut at = 0;
        for p in &by_logical {
            assert_eq!(p.logical, at, "logical coverage has no gap or overlap");
            assert!(p.len > 0 && p.len <= plan.piece_bytes);
            at += p.len;
        }
        assert_eq!(at, size, "the pieces are the whole transfer");
        for side in [|p: &Piece| p.src, |p: &Piece| p.dst] {
            let mut offs: Vec<(u64, u64)> = plan.pieces.iter().map(|p| (side(p), p.len)).collect();
            offs.sort_unstable();
            for w in offs.windows(2) {
                assert!(w[0].0 + w[0].1 <= w[1].0, "pieces overlap on one side");
            }
            let (last, len) = *offs.last().unwrap();
            assert!(last + len <= cfg.pool_bytes(), "a piece outside the pool");
            // Piece starts are slot boundaries.
            assert!(offs.iter().all(|(o, _)| o % plan.piece_bytes == 0));
        }
        let blocks = plan.blocks_per_region as usize;
        let slot = |o: u64| (o / plan.piece_bytes) % cfg.pool_blocks();
        for (i, p) in plan.pieces.iter().enumerate() {
            let first = &plan.pieces[i % blocks];
            assert_eq!((slot(p.src), slot(p.dst)), (slot(first.src), slot(first.dst)), "block table");
        }
    }

    #[test]
    fn plans_cover_every_byte_once_inside_the_pools() {
        let qwen = config(&kv::preset("qwen3-30b-a3b").unwrap(), 16, 2048);
        check_plan(&qwen, 1024, 1);
        check_plan(&qwen, 1000, 2); // last block of 8 tokens
        check_plan(&qwen, 2048, 3); // the pool exactly full
        check_plan(&qwen, 3, 4); // one short block per region
        check_plan(&config(&kv::preset("deepseek-v3").unwrap(), 16, 300), 257, 5);
        check_plan(&odd(), 64, 6);
        check_plan(&odd(), 13, 7);
        // Same seed, same plan (the receiver rebuilds the sender's); source and destination placements differ.
        let (a, b) = (qwen.plan(9, 1024), qwen.plan(9, 1024));
        assert_eq!(a.pieces, b.pieces);
        assert!(a.pieces.iter().filter(|p| p.src == p.dst).count() < a.pieces.len() / 10);
    }

    /// Move the pieces through memory as a transport would: fill the source pool, copy every write, check the
    /// destination pool by logical offset.
    fn simulate(cfg: &PagedConfig, tokens: u64, merge: Merge, fault: DestFault) -> (usize, u64) {
        let plan = cfg.plan(11, tokens);
        let pool = cfg.pool_bytes() as usize;
        let (mut src, mut dst) = (vec![0u8; pool], vec![0u8; pool]);
        fill_spans(&mut src, &plan.source_spans(), 5, 1).unwrap();
        let writes = plan.writes(merge, fault);
        assert_eq!(writes.iter().map(|w| w.len).sum::<u64>(), tokens * cfg.bytes_per_token());
        for w in &writes {
            let (l, r, n) = (w.local_offset as usize, w.remote_offset as usize, w.len as usize);
            dst[r..r + n].copy_from_slice(&src[l..l + n]);
        }
        (writes.len(), count_span_mismatches(&dst, &plan.dest_spans(), 5, 1).unwrap())
    }

    #[test]
    fn pieces_land_verified_with_and_without_coalescing_and_a_swap_is_caught() {
        let qwen = config(&kv::preset("qwen3-30b-a3b").unwrap(), 16, 512);
        for cfg in [qwen, odd()] {
            let tokens = cfg.pool_tokens / 2 + 1;
            let (pieces, bad) = simulate(&cfg, tokens, Merge::PerPiece, DestFault::None);
            assert_eq!((pieces as u64, bad), (cfg.pieces(tokens), 0));
            let (writes, bad) = simulate(&cfg, tokens, Merge::Coalesce, DestFault::None);
            assert!(writes <= pieces);
            assert_eq!(bad, 0, "coalesced writes land every byte where it belongs");
            let (_, bad) = simulate(&cfg, tokens, Merge::PerPiece, DestFault::SwapTwo);
            assert!(bad > 0, "a piece at the wrong destination fails verification");
        }
    }

    #[test]
    fn coalescing_merges_pieces_adjacent_on_both_sides_only() {
        let piece = |src, dst, logical| Piece { src, dst, len: 10, logical };
        let plan = PagedPlan {
            // 0→100 and 10→110 are adjacent on both sides; 20→200 only on the source side; 40→210 on neither.
            pieces: vec![piece(10, 110, 10), piece(0, 100, 0), piece(20, 200, 20), piece(40, 210, 30)],
            piece_bytes: 10,
            blocks_per_region: 4,
        };
        let w = plan.writes(Merge::Coalesce, DestFault::None);
        assert_eq!(
            w,
            vec![
                Write { local_offset: 0, remote_offset: 100, len: 20 },
                Write { local_offset: 20, remote_offset: 200, len: 10 },
                Write { local_offset: 40, remote_offset: 210, len: 10 },
            ]
        );
        assert_eq!(plan.writes(Merge::PerPiece, DestFault::None).len(), 4);
        // A pool exactly as large as the transfer with one-token blocks still merges only true neighbours.
        let mut c = odd();
        c.block_tokens = 1;
        c.pool_tokens = 8;
        let (writes, bad) = simulate(&c, 8, Merge::Coalesce, DestFault::None);
        assert_eq!(bad, 0);
        assert!(writes <= 48);
    }

    #[test]
    fn sequential_destinations_fill_slots_in_order_and_still_verify() {
        let qwen = config(&kv::preset("qwen3-30b-a3b").unwrap(), 16, 512);
        for base in [qwen, odd()] {
            let cfg = PagedConfig { dst_placement: DstPlacement::Sequential, ..base.clone() };
            for tokens in [cfg.pool_tokens, cfg.pool_tokens / 2 + 1, 3] {
                // Coverage once, disjoint pieces inside the pools, a block table on each side.
                check_plan(&cfg, tokens, 21);
                let plan = cfg.plan(21, tokens);
                let blocks = plan.blocks_per_region as usize;
                let pool_blocks = cfg.pool_blocks();
                for (i, p) in plan.pieces.iter().enumerate() {
                    let (region, b) = ((i / blocks) as u64, (i % blocks) as u64);
                    assert_eq!(p.dst, (region * pool_blocks + b) * plan.piece_bytes, "block b in slot b");
                }
                // Within a region the destination pieces are back to back; the source stays scattered.
                for region in plan.pieces.chunks(blocks) {
                    for w in region.windows(2) {
                        assert_eq!(w[0].dst + w[0].len, w[1].dst);
                    }
                }
                // Coalesced writes come back in destination order, so back-to-back destinations stay neighbours
                // (every write but the first of each region continues the one before it).
                let merged = plan.writes(Merge::Coalesce, DestFault::None);
                let follows = merged.windows(2).filter(|w| w[0].remote_offset + w[0].len == w[1].remote_offset);
                let regions = cfg.layers * cfg.regions_per_layer;
                let gaps = if tokens == cfg.pool_blocks() * cfg.block_tokens { 0 } else { regions - 1 };
                assert_eq!(follows.count() as u64, merged.len() as u64 - 1 - gaps, "tokens {tokens}");
                let random = PagedConfig { dst_placement: DstPlacement::Random, ..cfg.clone() }.plan(21, tokens);
                let srcs = |p: &PagedPlan| p.pieces.iter().map(|x| x.src).collect::<Vec<_>>();
                assert_eq!(srcs(&plan), srcs(&random), "the source placement does not depend on the destination's");
            }
            let cfg = PagedConfig { dst_placement: DstPlacement::Sequential, ..base };
            let tokens = cfg.pool_tokens / 2 + 1;
            let (pieces, bad) = simulate(&cfg, tokens, Merge::PerPiece, DestFault::None);
            assert_eq!((pieces as u64, bad), (cfg.pieces(tokens), 0), "verify spans follow the planned slots");
            assert_eq!(simulate(&cfg, tokens, Merge::Coalesce, DestFault::None).1, 0);
            assert!(
                simulate(&cfg, tokens, Merge::PerPiece, DestFault::SwapTwo).1 > 0,
                "a swapped piece is still caught"
            );
        }
    }

    #[test]
    fn dst_placement_travels_only_when_not_the_default() {
        let mut cfg = odd();
        let text = serde_json::to_string(&cfg).unwrap();
        assert!(!text.contains("dst_placement"), "a random placement looks as older configs did: {text}");
        let old: PagedConfig = serde_json::from_str(&text).unwrap();
        assert_eq!(old.dst_placement, DstPlacement::Random);
        cfg.dst_placement = DstPlacement::Sequential;
        let text = serde_json::to_string(&cfg).unwrap();
        assert!(text.contains(r#""dst_placement":"sequential""#), "{text}");
        assert_eq!(serde_json::from_str::<PagedConfig>(&text).unwrap(), cfg);
        for (v, n) in [(DstPlacement::Random, "random"), (DstPlacement::Sequential, "sequential")] {
            assert_eq!(serde_json::to_value(v).unwrap(), n);
            assert_eq!(n.parse::<DstPlacement>(), Ok(v));
        }
    }

    #[test]
    fn an_overflowing_pool_names_what_made_it_overflow() {
        let err = |c: PagedConfig| c.validate(&[]).unwrap_err().to_string();
        let e = err(PagedConfig { block_tokens: 1 << 60, ..odd() });
        assert!(e.starts_with("--block-tokens 1152921504606846976:"), "{e}");
        let e = err(PagedConfig { pool_tokens: 1 << 62, ..odd() });
        assert!(e.starts_with("--pool-tokens 4611686018427387904:"), "{e}");
        let e = err(PagedConfig { layers: u64::MAX / 2, ..odd() });
        assert!(e.contains("the model's geometry") && !e.contains("--pool-tokens"), "{e}");
    }

    #[test]
    fn bad_layouts_are_usage_errors_never_panics() {
        let good = odd();
        let code = |c: &PagedConfig, cases: &[SizeCase]| crate::error::exit_code(&c.validate(cases).unwrap_err());
        let ok = case(&good, 10);
        assert!(good.validate(&[ok]).is_ok());
        assert_eq!(code(&good, &[SizeCase { tokens: None, ..ok }]), 2, "--sizes");
        assert_eq!(code(&good, &[case(&good, 65)]), 2, "more tokens than the pool");
        assert_eq!(code(&good, &[SizeCase { size_bytes: 7, ..ok }]), 2, "size disagrees with the geometry");
        for broken in [
            PagedConfig { block_tokens: 0, ..odd() },
            PagedConfig { layers: 0, ..odd() },
            PagedConfig { region_bytes_per_token: 0, ..odd() },
            PagedConfig { pool_tokens: u64::MAX, region_bytes_per_token: u64::MAX / 2, ..odd() },
        ] {
            assert_eq!(code(&broken, &[ok]), 2, "{broken:?}");
        }
        let mut many = odd();
        (many.block_tokens, many.pool_tokens, many.layers) = (1, 1 << 20, 64);
        assert_eq!(code(&many, &[case(&many, 1 << 20)]), 2, "too many pieces");
    }
}
