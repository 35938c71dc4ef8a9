//! Tests of the paged layout: geometry, permutations, plans, coalescing, block slots.

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
        assert_eq!(c.pool_bytes(), 2048 * g.bytes_per_token(), "{name}: a whole-block pool is pool tokens × B/token");
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
        assert!(simulate(&cfg, tokens, Merge::PerPiece, DestFault::SwapTwo).1 > 0, "a swapped piece is still caught");
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

#[test]
fn plans_from_given_slots_match_the_seeded_plan_and_bad_slots_are_refused() {
    let cfg = odd();
    let tokens = 12; // 3 blocks of 5
    let src = cfg.source_slots(9);
    let seeded = cfg.plan(9, tokens);
    let dst: Vec<u64> = seeded.pieces[..3].iter().map(|p| p.dst / cfg.piece_bytes()).collect();
    let given = cfg.plan_with_slots(tokens, &src[..3], &dst);
    assert_eq!(given.pieces, seeded.pieces, "plan() is plan_with_slots() over its permutations");
    let mine = cfg.plan_with_slots(tokens, &src[..3], &[7, 0, 3]);
    assert_eq!(mine.dest_spans()[0].offset, 7 * cfg.piece_bytes());
    assert_eq!(mine.dest_spans()[4].offset, cfg.pool_blocks() * cfg.piece_bytes(), "region 1, block 1: slot 0");
    let bytes = tokens * cfg.bytes_per_token();
    assert_eq!(cfg.check_slots(bytes, &[7, 0, 3]).unwrap(), tokens);
    let err = |size: u64, slots: &[u64]| cfg.check_slots(size, slots).unwrap_err().to_string();
    assert!(err(bytes, &[7, 0]).contains("2 block slots for 12 tokens, which take 3"), "{}", err(bytes, &[7, 0]));
    assert!(err(bytes, &[7, 0, 13]).contains("outside the pool of 13 blocks"));
    assert!(err(bytes, &[7, 0, 7]).contains("block slot 7 is given twice"));
    assert!(err(bytes + 1, &[7, 0, 3]).contains("not a whole number of tokens"));
    assert!(cfg.check_slots(u64::MAX / 18 * 18, &[1]).is_err(), "never a panic on huge sizes");
}
