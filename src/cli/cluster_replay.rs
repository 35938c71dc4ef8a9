//! `kvxfer cluster --pattern replay`'s flags: which ranks prefill and which decode, how requests are routed, and the
//! request stream under the same names and values as `kvxfer replay`'s Workload group. Every one is `None` (or
//! off) unless typed, so that one given with another pattern is refused by name.

use super::{parse_duration, WorkloadArgs};
use crate::cluster::route::Route;
use crate::plan::sizes::parse_size;
use clap::Args;
use serde::Serialize;
use std::path::PathBuf;
use std::time::Duration;

use super::values::named;

#[derive(Args, Debug, Clone, Default, Serialize)]
#[command(next_help_heading = "Replay (--pattern replay)")]
pub struct ClusterReplayArgs {
    /// The ranks that send (prefill): a list and ranges, e.g. 0,1 or 0-3; they take the requests in turn
    #[arg(long, value_name = "RANKS")]
    pub prefill: Option<String>,
    /// The ranks that receive (decode), none of them a prefill rank: e.g. 2,3
    #[arg(long, value_name = "RANKS")]
    pub decode: Option<String>,
    /// How each request's decode rank is chosen: round-robin (default) or least-loaded (see below)
    #[arg(long, value_name = "HOW", value_parser = named::<Route>())]
    pub route: Option<Route>,
    /// A request trace in the Mooncake FAST'25 format, read by every rank (default: the built-in synthetic trace's
    /// first 60 s)
    #[arg(long, value_name = "FILE.jsonl", conflicts_with = "arrivals")]
    pub trace: Option<PathBuf>,
    /// Accept a trace whose timestamps go backwards by sorting it (stable) by timestamp
    #[arg(long, requires = "trace")]
    pub sort: bool,
    /// The part of the trace to replay, in trace time: 0s..300s, 90s.. or ..2m
    #[arg(long, value_name = "A..B")]
    pub window: Option<String>,
    /// Replay only the first N requests (of the window); with --arrivals, how many to generate
    #[arg(long, value_name = "N")]
    pub requests: Option<u64>,
    /// Trace seconds per wall second (2 replays twice as fast; below 1 slows it down)
    #[arg(long, value_name = "X", conflicts_with_all = ["speeds", "arrivals"])]
    pub speed: Option<f64>,
    /// A load sweep over speeds, each run once in turn
    #[arg(long, value_name = "LIST", conflicts_with = "arrivals")]
    pub speeds: Option<String>,
    /// Requests from a model instead of a trace (seeded by --seed): poisson:R, constant:R or gamma:R,CV (R per
    /// second)
    #[arg(long, value_name = "MODEL")]
    pub arrivals: Option<String>,
    /// A load sweep over arrival rates (per second), replacing the model's R
    #[arg(long, value_name = "LIST", requires = "arrivals")]
    pub rates: Option<String>,
    /// Input tokens per request with --arrivals: fixed:N, uniform:A..B, lognormal:MEDIAN,SIGMA or trace:FILE
    #[arg(long, value_name = "DIST", requires = "arrivals")]
    pub prompt_tokens: Option<String>,
    /// The decode side's prefix cache, in 512-token blocks (an LRU of the trace's hash_ids): N, unlimited or off
    #[arg(long, value_name = "BLOCKS")]
    pub prefix_cache: Option<String>,
    /// Cut a link's load off, as saturated, once a request starts this far behind its scheduled arrival (default
    /// 60s)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub max_backlog: Option<Duration>,
    /// Requests each link moves before the clocks start (the stream's first ones), kept out of the statistics
    /// (default 10)
    #[arg(long, value_name = "N")]
    pub warmup_requests: Option<u64>,
    /// Report the share of requests whose latency is within this many ms
    #[arg(long, value_name = "MS")]
    pub slo_ms: Option<f64>,
    /// The decode ranks' region: larger requests move in pieces of this size (default: the largest request, at
    /// most 4 GiB)
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub region: Option<u64>,
    /// Set by the parser: --reps and --warmup were given on the command line (both are refused, so not compared).
    #[arg(skip)]
    #[serde(skip)]
    pub reps_given: bool,
    #[arg(skip)]
    #[serde(skip)]
    pub warmup_given: bool,
}

impl ClusterReplayArgs {
    /// The first of these flags given, for the refusal of a pattern other than replay.
    pub fn first_given(&self) -> Option<&'static str> {
        [
            (self.prefill.is_some(), "--prefill"),
            (self.decode.is_some(), "--decode"),
            (self.route.is_some(), "--route"),
            (self.trace.is_some(), "--trace"),
            (self.window.is_some(), "--window"),
            (self.requests.is_some(), "--requests"),
            (self.speed.is_some(), "--speed"),
            (self.speeds.is_some(), "--speeds"),
            (self.arrivals.is_some(), "--arrivals"),
            (self.prefix_cache.is_some(), "--prefix-cache"),
            (self.max_backlog.is_some(), "--max-backlog"),
            (self.warmup_requests.is_some(), "--warmup-requests"),
            (self.slo_ms.is_some(), "--slo-ms"),
            (self.region.is_some(), "--region"),
        ]
        .into_iter()
        .find_map(|(given, flag)| given.then_some(flag))
    }

    /// The stream these flags name, as `commands::workload` resolves it; `seed` is the run's `--seed`.
    pub fn workload(&self, seed: u64) -> WorkloadArgs {
        WorkloadArgs {
            trace: self.trace.clone(),
            sort: self.sort,
            window: self.window.clone(),
            requests: self.requests,
            speed: self.speed,
            speeds: self.speeds.clone(),
            arrivals: self.arrivals.clone(),
            rates: self.rates.clone(),
            prompt_tokens: self.prompt_tokens.clone(),
            output_tokens: None,
            seed,
            prefix_cache: self.prefix_cache.clone().unwrap_or_else(|| "off".into()),
            max_inflight: 1,
        }
    }
}
