//! The requests a replay sends: read from a request trace (Mooncake's JSONL: one request a line, with its arrival
//! time, its input and output lengths and the ids of its 512-token prefix blocks) or generated from a seed, cut to
//! a window, and passed through a prefix cache that says how much of each prompt's KV cache is already there.
//!
//! Everything here is pure and deterministic: the same file, flags and seed give the same requests, so two replays
//! (two transports, two machines) offer the same load and their numbers can be set side by side.

mod generate;
mod prefix;
mod select;
mod summary;
mod trace;

pub use generate::{generate, generate_with, Arrivals, OutputTokens, PromptTokens, MAX_GENERATED, MAX_PROMPT_TOKENS};
pub use prefix::{PrefixCache, PrefixCacheSize, PrefixHits};
pub use select::{select, Window};
pub use summary::{parse_speed, TraceSummary};
pub use trace::{parse_trace, parse_trace_named, read_trace};

/// Tokens per prefix block: a trace's `hash_ids` name one block of this many input tokens each (the last one
/// partial), as Mooncake's traces define them.
pub const BLOCK_TOKENS: u64 = 512;

/// One request to replay.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// Its 0-based index: the line of the file less one (kept through a sort and a window, so a request can be
    /// found in its file), or its place in the generated sequence.
    pub id: u64,
    /// When it arrives, in ms of trace time (after [`select`], from the first selected request).
    pub arrival_ms: f64,
    /// Prompt length: the tokens whose KV cache the replay moves.
    pub input_tokens: u64,
    /// Tokens the model answers with; 0 when unknown (generated without a trace) or when the trace says 0.
    pub output_tokens: u64,
    /// The prompt's prefix blocks, `ceil(input_tokens / BLOCK_TOKENS)` of them: equal ids are the same reusable
    /// KV block. None for generated requests and trace lines without the key (they never hit a prefix cache).
    pub hash_ids: Option<Vec<u64>>,
}

/// How many prefix blocks a prompt of `tokens` tokens is cut into.
pub fn blocks_for(tokens: u64) -> u64 {
    tokens.div_ceil(BLOCK_TOKENS)
}

/// The trace published with Mooncake (FAST'25), kept in the repository (`traces/`). Tests that read it
/// fail when it is absent rather than skip, so a checkout without it cannot pass silently.
#[cfg(test)]
pub(crate) fn shipped_trace() -> Vec<Request> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/traces/mooncake-synthetic.jsonl");
    assert!(std::path::Path::new(path).is_file(), "{path} is missing: the workload tests need the shipped trace");
    read_trace(std::path::Path::new(path), false).unwrap()
}
