//! `kvxfer replay --layout paged`: each request moves into blocks of the receiver's pool, which the driver hands
//! out from a free list as a serving engine does (see `run::replay::pool`). Here: the configuration both ends
//! agree (the pool, the largest request as its one case), the pool the driver models, and the reps outside the
//! clock (warm-up, ceiling) into the pool's first free blocks.

use super::workload::Job;
use crate::bail_usage;
use crate::cli::ReplayArgs;
use crate::plan::paged::PagedConfig;
use crate::plan::sizes::{format_size, format_tokens, TokenList};
use crate::plan::RunConfig;
use crate::run::replay::PagedPool;
use crate::run::sender::SenderSession;
use crate::run::RepRecord;
use crate::stats::replay::{PoolJson, PoolSummary};
use anyhow::Result;

/// A control message's room for anything but the slots (RepStart's other fields and the frame).
const REP_START_OVERHEAD: usize = 512;

/// The configuration of a paged replay: the layout's pool, and one case, the largest request (both ends check it
/// against the pool: a request larger than the pool is refused here, naming `--pool-tokens`).
pub(super) fn run_config(a: &ReplayArgs, job: &Job) -> Result<RunConfig> {
    if a.region.is_some() {
        bail_usage!("--region applies to the contiguous layout; a paged replay moves each request into blocks of the pool (--pool-tokens)");
    }
    if a.layerwise {
        bail_usage!("--layerwise moves contiguous layer slices for now; drop --layerwise or --layout paged");
    }
    let largest = job.largest_bytes();
    if largest == 0 {
        bail_usage!("every request of this workload is held by the prefix cache: nothing to move");
    }
    let given = [a.model.is_some(), a.model_config.is_some(), a.kv_bytes_per_token.is_some()];
    let sizes = crate::cli::SizeArgs {
        sizes: None,
        tokens: Some(TokenList(vec![largest / job.bytes_per_token])),
        model: a.model.clone().or_else(|| (!given.contains(&true)).then(|| super::common::DEFAULT_MODEL.into())),
        model_config: a.model_config.clone(),
        kv_bytes_per_token: a.kv_bytes_per_token,
    };
    let mut run = a.run.clone();
    run.reps = 1;
    if run.paged.pool_tokens.is_none() {
        run.paged.pool_tokens = Some(default_pool_tokens(a, largest / job.bytes_per_token, job.bytes_per_token));
    }
    // The memory check comes after, counting every session's pool at each end.
    Ok(super::common::configure_anywhere(&sizes, &run, &[a.src, a.dst])?.cfg)
}

/// Without `--pool-tokens`: twice the largest request, as other paged runs default to, but no more than fits every
/// session's pool at each end in half of this host's available memory (said in a note), and never less than the
/// largest request (the memory check then refuses what cannot fit).
fn default_pool_tokens(a: &ReplayArgs, largest_tokens: u64, bytes_per_token: u64) -> u64 {
    let twice = largest_tokens.saturating_mul(2);
    let Some(per) = super::room_per_buffer(a) else { return twice };
    let fits = per / bytes_per_token.max(1);
    if fits >= twice {
        return twice;
    }
    let tokens = fits.max(largest_tokens);
    crate::noteln!(
        "pool: {} per end and session (twice the largest request, {largest_tokens} tokens, does not fit {} session(s) in half of this host's available memory); --pool-tokens to choose",
        crate::plan::sizes::format_tokens(tokens),
        a.max_inflight
    );
    tokens
}

/// The pool the driver models for `cfg` (None unless paged), `--decode-ms-per-token` checked; refused where its
/// slots could not travel (a pulling receiver, a request whose slot list outgrows a control message).
pub(super) fn pool(a: &ReplayArgs, cfg: &RunConfig, job: &Job) -> Result<Option<PagedPool>> {
    let Some(p) = &cfg.paged else {
        if a.decode_ms_per_token.is_some() {
            bail_usage!("--decode-ms-per-token applies to --layout paged (how long a request holds its blocks)");
        }
        if a.output_tokens.is_some() {
            bail_usage!("--output-tokens applies to --layout paged with --decode-ms-per-token (how long a request holds its blocks); a replay moves each prompt's KV once, whatever the answer's length");
        }
        return Ok(None);
    };
    let decode = a.decode_ms_per_token.unwrap_or(0.0);
    if !(decode.is_finite() && decode >= 0.0) {
        bail_usage!(
            "--decode-ms-per-token {decode}: give the ms a request holds its blocks per output token, 0 or more"
        );
    }
    if decode > 0.0 && !job.has_output_lengths() {
        bail_usage!("--decode-ms-per-token: requests from --arrivals have no output lengths; give --output-tokens (e.g. fixed:256), draw them with --prompt-tokens trace:FILE, or replay a --trace");
    }
    if decode == 0.0 && a.output_tokens.is_some() {
        bail_usage!("--output-tokens: without --decode-ms-per-token a request's blocks free as soon as its last byte lands, so output lengths change nothing; give both or neither");
    }
    if crate::transport::registry::get(cfg.transport.kind()).pulls(&cfg.transport) {
        bail_usage!("--layout paged: a receiver that pulls (--op read, --nixl-op read) cannot place a replay's blocks yet; replay with writes");
    }
    let blocks = p.pool_blocks();
    let most = (job.largest_bytes() / job.bytes_per_token).div_ceil(p.block_tokens);
    if most as usize * (blocks.to_string().len() + 1) + REP_START_OVERHEAD > crate::control::frame::MAX_FRAME {
        bail_usage!(
            "--block-tokens {}: the largest request's {most} blocks do not fit one control message; raise --block-tokens",
            p.block_tokens
        );
    }
    Ok(Some(PagedPool {
        block_tokens: p.block_tokens,
        bytes_per_token: p.bytes_per_token(),
        decode_ms_per_token: decode,
        order: p.dest_slots(cfg.knobs.seed),
        src_slots: p.source_slots(cfg.knobs.seed),
    }))
}

/// The results' `replay.pool`, and the line that says before the run how the pool is modelled.
pub(super) fn describe(p: &PagedConfig, pool: &PagedPool) -> PoolJson {
    crate::noteln!(
        "paged replay: a pool of {} blocks ({} tokens, {} per end and session); each request takes its uncached tokens' blocks from the free list when it starts, waits when too few are free, and frees them {}",
        p.pool_blocks(),
        format_tokens(p.pool_tokens),
        format_size(p.pool_bytes()),
        if pool.decode_ms_per_token > 0.0 {
            format!("{} ms per output token after its last byte landed (--decode-ms-per-token)", pool.decode_ms_per_token)
        } else {
            "once its last byte landed (--decode-ms-per-token 0)".to_string()
        }
    );
    PoolJson {
        blocks: p.pool_blocks(),
        block_tokens: p.block_tokens,
        pool_tokens: p.pool_tokens,
        decode_ms_per_token: pool.decode_ms_per_token,
        bytes_per_token: Some(pool.bytes_per_token),
    }
}

/// A rep of `bytes` outside the clock (warm-up, ceiling) into the first blocks of the pool's free list.
pub(super) fn rep(session: &mut SenderSession, seq: &mut u32, pool: &PagedPool, bytes: u64) -> Result<RepRecord> {
    let tokens = bytes / pool.bytes_per_token.max(1);
    let n = pool.blocks_of(bytes) as usize;
    let armed = session.arm_paged(tokens, (&pool.src_slots[..n], &pool.order[..n]), *seq)?;
    *seq = seq.wrapping_add(1);
    session.go(armed)
}

/// The line under a load's row: how much of the pool it held and how long requests waited for blocks.
pub(super) fn pool_line(s: &PoolSummary) -> String {
    let wait =
        s.wait_ms.map_or("-".to_string(), |q| format!("p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms", q.p50, q.p99, q.max));
    format!(
        "        pool: high-water {} of {} blocks ({:.0}%); {} request(s) waited for blocks; pool wait {wait}",
        s.high_water_blocks,
        s.blocks,
        s.high_water * 100.0,
        s.waited
    )
}
