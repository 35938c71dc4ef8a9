//! A paged run small enough to script by hand: qwen3-8b's geometry, a pool of 64 tokens (4 blocks of 16), one
//! case of 32 tokens (2 blocks), `--verify` on, both ends in host memory.

use kvxfer::cli::{RunArgs, SizeArgs};
use kvxfer::mem::MemKind;
use kvxfer::plan::paged::Layout;
use kvxfer::plan::RunConfig;

/// The run's flags and the configuration they make.
pub fn four_block_pool() -> (RunArgs, RunConfig) {
    let mut run = RunArgs::default();
    run.paged.layout = Layout::Paged;
    run.paged.pool_tokens = Some(64);
    run.verify = true;
    let sizes = SizeArgs {
        tokens: Some(kvxfer::plan::sizes::TokenList(vec![32])),
        model: Some("qwen3-8b".into()),
        ..SizeArgs::default()
    };
    let host = MemKind::Host;
    let cfg = kvxfer::commands::common::configure_anywhere(&sizes, &run, &[host, host]).unwrap().cfg;
    (run, cfg)
}
