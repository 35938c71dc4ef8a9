//! A request stream's flags, as `predict` takes them (its `--trace` mode): the same names, values and refusals as
//! `replay`'s Workload group, which `WorkloadArgs::of_replay` copies out, so both commands resolve a workload in
//! one place (`commands::workload`). Replay can flatten this group in place of its own flags once it adopts it.

use super::ReplayArgs;
use clap::Args;
use std::path::PathBuf;

/// The default seed of an arrival model: `--seed`'s default, so that predict and replay generate the same
/// requests unless told otherwise.
pub const DEFAULT_SEED: u64 = 0x6b76_7866;

#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Workload")]
pub struct WorkloadArgs {
    /// Predict a replay of this request trace (Mooncake FAST'25 JSON lines) instead of --sizes/--tokens
    #[arg(long, value_name = "FILE.jsonl", conflicts_with = "arrivals")]
    pub trace: Option<PathBuf>,
    /// Accept a trace whose timestamps go backwards by sorting it (stable) by timestamp
    #[arg(long, requires = "trace")]
    pub sort: bool,
    /// The part of the trace to replay, in trace time: 0s..300s, 90s.. or ..2m
    #[arg(long, value_name = "A..B")]
    pub window: Option<String>,
    /// Only the first N requests (of the window); with --arrivals, how many to generate
    #[arg(long, value_name = "N")]
    pub requests: Option<u64>,
    /// Trace seconds per wall second (2 replays twice as fast; below 1 slows it down)
    #[arg(long, value_name = "X", conflicts_with_all = ["speeds", "arrivals"])]
    pub speed: Option<f64>,
    /// A load sweep over speeds
    #[arg(long, value_name = "LIST", conflicts_with = "arrivals")]
    pub speeds: Option<String>,
    /// Requests from a model instead of a trace: poisson:R, constant:R or gamma:R,CV (R per second)
    #[arg(long, value_name = "MODEL")]
    pub arrivals: Option<String>,
    /// A load sweep over arrival rates (per second), replacing the model's R
    #[arg(long, value_name = "LIST", requires = "arrivals")]
    pub rates: Option<String>,
    /// Input tokens per request with --arrivals: fixed:N, uniform:A..B, lognormal:MEDIAN,SIGMA or trace:FILE
    #[arg(long, value_name = "DIST", requires = "arrivals")]
    pub prompt_tokens: Option<String>,
    /// Output tokens per request with --arrivals: only a paged replay uses them (no flag of predict's).
    #[arg(skip)]
    pub output_tokens: Option<String>,
    /// Seed of the --arrivals model (the same seed as a replay's --seed gives the same requests)
    #[arg(long, default_value_t = DEFAULT_SEED, hide_default_value = true)]
    pub seed: u64,
    /// The decode side's prefix cache, in 512-token blocks (an LRU of the trace's hash_ids): N, unlimited or off
    #[arg(long, value_name = "BLOCKS", default_value = "off")]
    pub prefix_cache: String,
    /// Requests moving at once (sessions); the rest queue, first come first served
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub max_inflight: u32,
}

impl WorkloadArgs {
    /// Replay's workload flags (its `--seed` is the run's).
    pub fn of_replay(a: &ReplayArgs) -> WorkloadArgs {
        WorkloadArgs {
            trace: a.trace.clone(),
            sort: a.sort,
            window: a.window.clone(),
            requests: a.requests,
            speed: a.speed,
            speeds: a.speeds.clone(),
            arrivals: a.arrivals.clone(),
            rates: a.rates.clone(),
            prompt_tokens: a.prompt_tokens.clone(),
            output_tokens: a.output_tokens.clone(),
            seed: a.run.seed,
            prefix_cache: a.prefix_cache.clone(),
            max_inflight: a.max_inflight,
        }
    }

    /// Whether a request stream is named (--trace or --arrivals).
    pub fn names_a_stream(&self) -> bool {
        self.trace.is_some() || self.arrivals.is_some()
    }

    /// The first flag given that only means something with a stream.
    pub fn stray_flag(&self) -> Option<&'static str> {
        [
            (self.window.is_some(), "--window"),
            (self.requests.is_some(), "--requests"),
            (self.speed.is_some(), "--speed"),
            (self.speeds.is_some(), "--speeds"),
            (self.prefix_cache != "off", "--prefix-cache"),
            (self.max_inflight != 1, "--max-inflight"),
            (self.seed != DEFAULT_SEED, "--seed"),
        ]
        .into_iter()
        .find_map(|(given, flag)| given.then_some(flag))
    }
}
