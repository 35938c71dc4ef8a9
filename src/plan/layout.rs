//! `--layout`, `--block-tokens`, `--pool-tokens`, `--coalesce`, `--dst-placement`: the KV layout as asked for, turned
//! with the model geometry into the paged configuration both ends plan from, said on stderr before the run.

use super::kv::KvGeometry;
use super::paged::{DstPlacement, Layout, Merge, PagedConfig, DEFAULT_BLOCK_TOKENS};
use super::sizes::{format_size, format_tokens};
use super::SizeCase;
use crate::bail_usage;
use anyhow::Result;

/// The KV layout as the user asked for it (flags or a sweep file): one contiguous buffer, or paged blocks scattered
/// over a pool as a serving engine keeps them, with what is not given left to [`paged_config`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LayoutOptions {
    pub layout: Layout,
    /// Tokens per block (default [`DEFAULT_BLOCK_TOKENS`]).
    pub block_tokens: Option<u64>,
    /// Tokens each side's pool holds (default: twice the largest transfer).
    pub pool_tokens: Option<u64>,
    /// Merge pieces adjacent on both sides into one write.
    pub coalesce: bool,
    /// Where the receiver's blocks go (default random).
    pub dst_placement: Option<DstPlacement>,
    /// Test-only fault injection: the sender swaps the destinations of two pieces, so --verify must fail.
    pub test_fault_swap_dests: bool,
}

/// The paged configuration for `--layout paged` (None for contiguous); refuses paged-only flags without it, and
/// `--block-size` (`block_size_given`) with it. `seed` places the blocks (the run's `--seed`).
pub fn paged_config(
    a: &LayoutOptions,
    block_size_given: bool,
    seed: u64,
    geometry: Option<&KvGeometry>,
    cases: &[SizeCase],
) -> Result<Option<PagedConfig>> {
    if a.layout != Layout::Paged {
        for (given, flag) in [
            (a.block_tokens.is_some(), "--block-tokens"),
            (a.pool_tokens.is_some(), "--pool-tokens"),
            (a.coalesce, "--coalesce"),
            (a.dst_placement.is_some(), "--dst-placement"),
            (a.test_fault_swap_dests, "--test-fault-swap-dests"),
        ] {
            if given {
                bail_usage!("{flag} applies to the paged layout; add --layout paged");
            }
        }
        return Ok(None);
    }
    let Some(g) = geometry else {
        bail_usage!(
            "--layout paged needs --tokens with --model NAME or --model-config FILE (it places each layer's K and V blocks); --sizes and --kv-bytes-per-token give no geometry"
        );
    };
    if block_size_given {
        bail_usage!("--block-size applies to --layout contiguous; a paged write is one block of one layer's K or V (--block-tokens)");
    }
    let block_tokens = a.block_tokens.unwrap_or(DEFAULT_BLOCK_TOKENS);
    let max_tokens = cases.iter().filter_map(|c| c.tokens).max().unwrap_or(0);
    let pool_tokens = a.pool_tokens.unwrap_or(max_tokens.saturating_mul(2));
    let dst_placement = a.dst_placement.unwrap_or_default();
    let cfg = PagedConfig {
        block_tokens,
        pool_tokens,
        layers: g.layers,
        regions_per_layer: g.regions_per_layer(),
        region_bytes_per_token: g.region_bytes_per_token(),
        coalesce: a.coalesce,
        dst_placement,
        fault_swap_dests: a.test_fault_swap_dests,
    };
    cfg.validate(cases)?;
    if cfg.fault_swap_dests && cfg.layers * cfg.regions_per_layer < 2 {
        bail_usage!("--test-fault-swap-dests needs at least two regions (layers × K/V) to swap pieces between");
    }
    crate::errln!("{}", describe(&cfg, g));
    for c in cases {
        let tokens = c.tokens.expect("validated: paged cases have tokens");
        let blocks = tokens.div_ceil(block_tokens);
        let mut line = format!(
            "  {} tokens: {} × {} × {blocks} blocks = {} pieces",
            format_tokens(tokens),
            cfg.layers,
            cfg.regions_per_layer,
            cfg.pieces(tokens)
        );
        if cfg.coalesce {
            let writes = cfg.plan(seed, tokens).writes(Merge::Coalesce, cfg.dest_fault()).len();
            line.push_str(&format!(" → {writes} writes after --coalesce"));
        }
        crate::errln!("{line}");
    }
    Ok(Some(cfg))
}

/// One line: piece size and where it comes from, regions, pool.
fn describe(cfg: &PagedConfig, g: &KvGeometry) -> String {
    let region = if g.is_mla() {
        format!("MLA latent {} × {} B", g.latent_dim, g.dtype_bytes)
    } else {
        format!("{} KV heads × head dim {} × {} B", g.kv_heads, g.head_dim, g.dtype_bytes)
    };
    let regions = if g.is_mla() { "1 region (latent)" } else { "2 regions (K, V)" };
    let placement = match cfg.dst_placement {
        DstPlacement::Random => "slots permuted independently on each side from --seed",
        DstPlacement::Sequential => {
            "source slots permuted from --seed, destination slots in order (--dst-placement sequential)"
        }
    };
    format!(
        "paged layout: {} pieces ({} tokens × {region}), {} layers × {regions}; pool of {} blocks ({} tokens, {} per side), {placement}",
        format_size(cfg.piece_bytes()),
        cfg.block_tokens,
        cfg.layers,
        cfg.pool_blocks(),
        format_tokens(cfg.pool_tokens),
        format_size(cfg.pool_bytes())
    )
}
