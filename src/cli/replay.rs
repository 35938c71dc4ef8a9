//! `kvxfer replay`'s flags. The workload's values (window, arrival model, length distribution, prefix cache) are
//! kept as text here and parsed by the workload's own `FromStr`, so that each refusal is one line naming the flag.

use super::{parse_duration, DeviceArgs, RunArgs};
use crate::mem::MemKind;
use crate::plan::sizes::parse_size;
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// A request trace in the Mooncake FAST'25 format (JSON lines: timestamp ms, input_length, output_length,
    /// hash_ids); default: the Mooncake synthetic trace built into kvxfer, its first 60 s
    #[arg(long, value_name = "FILE.jsonl", conflicts_with = "arrivals", help_heading = "Workload")]
    pub trace: Option<PathBuf>,
    /// Accept a trace whose timestamps go backwards by sorting it (stable) by timestamp
    #[arg(long, requires = "trace", help_heading = "Workload")]
    pub sort: bool,
    /// The part of the trace to replay, in trace time: 0s..300s, 90s.. or ..2m
    #[arg(long, value_name = "A..B", help_heading = "Workload")]
    pub window: Option<String>,
    /// Replay only the first N requests (of the window); with --arrivals, how many to generate
    #[arg(long, value_name = "N", help_heading = "Workload")]
    pub requests: Option<u64>,
    /// Trace seconds per wall second (2 replays twice as fast; below 1 slows it down)
    #[arg(long, value_name = "X", conflicts_with_all = ["speeds", "arrivals"], help_heading = "Workload")]
    pub speed: Option<f64>,
    /// A load sweep over speeds: each speed runs the stream, interleaved and repeated (--reps)
    #[arg(long, value_name = "LIST", conflicts_with = "arrivals", help_heading = "Workload")]
    pub speeds: Option<String>,
    /// Requests from a model instead of a trace: poisson:R, constant:R or gamma:R,CV (R per second)
    #[arg(long, value_name = "MODEL", help_heading = "Workload")]
    pub arrivals: Option<String>,
    /// A load sweep over arrival rates (per second), replacing the model's R
    #[arg(long, value_name = "LIST", requires = "arrivals", help_heading = "Workload")]
    pub rates: Option<String>,
    /// Input tokens per request with --arrivals: fixed:N, uniform:A..B, lognormal:MEDIAN,SIGMA or trace:FILE
    #[arg(long, value_name = "DIST", requires = "arrivals", help_heading = "Workload")]
    pub prompt_tokens: Option<String>,
    /// Output tokens per request with --arrivals (how long a paged replay's requests hold their blocks with
    /// --decode-ms-per-token): fixed:N, uniform:A..B or lognormal:MEDIAN,SIGMA
    #[arg(long, value_name = "DIST", requires = "arrivals", help_heading = "Workload")]
    pub output_tokens: Option<String>,
    /// The decode side's prefix cache, in 512-token blocks (an LRU of the trace's hash_ids): N, unlimited or off
    #[arg(long, value_name = "BLOCKS", default_value = "off", help_heading = "Workload")]
    pub prefix_cache: String,
    /// Built-in model for the KV bytes per token: qwen3-30b-a3b (default), qwen3-8b, llama-3.1-8b, llama-3.1-70b,
    /// deepseek-v3
    #[arg(long, value_name = "NAME", conflicts_with_all = ["model_config", "kv_bytes_per_token"], help_heading = "Workload")]
    pub model: Option<String>,
    /// A Hugging Face config.json to derive KV bytes per token from
    #[arg(long, value_name = "PATH", conflicts_with = "kv_bytes_per_token", help_heading = "Workload")]
    pub model_config: Option<PathBuf>,
    /// KV bytes per token, given directly
    #[arg(long, value_name = "N", help_heading = "Workload")]
    pub kv_bytes_per_token: Option<u64>,

    /// Requests moving at once, each over a session (connection) of its own; the rest queue, first come first
    /// served
    #[arg(long, default_value_t = 1, value_name = "N", help_heading = "Replay")]
    pub max_inflight: u32,
    /// Cut a load off, as saturated, once a request starts this far behind its scheduled arrival
    #[arg(long, default_value = "60s", value_name = "DURATION", value_parser = parse_duration, help_heading = "Replay")]
    pub max_backlog: Duration,
    /// Requests moved before each run's clock starts (the stream's first ones), kept out of the statistics
    #[arg(long, default_value_t = 10, value_name = "N", help_heading = "Replay")]
    pub warmup_requests: u64,
    /// Report the share of requests whose latency is within this many ms
    #[arg(long, value_name = "MS", help_heading = "Replay")]
    pub slo_ms: Option<f64>,
    /// The path's ceiling, GB/s, for link utilization (default: measured before the replay, 3 reps of the region)
    #[arg(long, value_name = "GBPS", help_heading = "Replay")]
    pub ceiling: Option<f64>,
    /// The receiver's region: larger requests move in pieces of this size (default: the largest request, at most
    /// 4 GiB)
    #[arg(long, value_name = "SIZE", value_parser = parse_size, help_heading = "Replay")]
    pub region: Option<u64>,
    /// Layer-wise: each layer's KV moves once prefill has computed it (layer i of L at arrival + (i+1)/L ×
    /// uncached tokens / --prefill-tokens-per-s); latency then counts from the prefill's end
    #[arg(long, help_heading = "Replay")]
    pub layerwise: bool,
    /// The prefill's speed for --layerwise, input tokens per second (cached tokens are not prefilled)
    #[arg(long, value_name = "N", value_parser = parse_tokens_per_s, help_heading = "Replay")]
    pub prefill_tokens_per_s: Option<f64>,
    /// With --layout paged: a request holds its blocks of the receiver's pool for this many ms per output token
    /// after its last byte landed (its decode), so later requests may wait for blocks [default: 0, freed at once]
    #[arg(long, value_name = "MS", allow_hyphen_values = true, help_heading = "Replay")]
    pub decode_ms_per_token: Option<f64>,

    /// Where the sender's buffer lives: host, pinned or gpu:N
    #[arg(long, default_value = "host", value_name = "KIND", help_heading = "Memory")]
    pub src: MemKind,
    /// Where the receiver's buffer lives: host, pinned or gpu:N
    #[arg(long, default_value = "host", value_name = "KIND", help_heading = "Memory")]
    pub dst: MemKind,
    /// Replay against a receiver (`kvxfer serve`, --max-sessions at least --max-inflight) instead of one started
    /// in this process on loopback
    #[arg(long, value_name = "HOST:PORT", help_heading = "Peer")]
    pub peer: Option<String>,
    /// The receiver's token (with --peer)
    #[arg(long, env = "KVXFER_TOKEN", hide_env_values = true, help_heading = "Peer")]
    pub token: Option<String>,
    /// The receiver's RDMA device without --peer (default: the sender's)
    #[arg(long, value_name = "NAME", help_heading = "RDMA device")]
    pub peer_device: Option<String>,
    #[command(flatten)]
    pub device: DeviceArgs,
    /// --reps: how many times each load runs (default 1 here); --warmup does not apply (see --warmup-requests)
    #[command(flatten)]
    pub run: RunArgs,

    /// Write the results JSON here (rewritten as each load completes; default: a new file in --out-dir)
    #[arg(long, value_name = "FILE", help_heading = "Output")]
    pub json: Option<PathBuf>,
    /// Also write one CSV row per request here
    #[arg(long, value_name = "FILE", help_heading = "Output")]
    pub csv: Option<PathBuf>,
    /// Also write the per-load summary as a Markdown table here
    #[arg(long, value_name = "FILE", help_heading = "Output")]
    pub md: Option<PathBuf>,
    /// Write figures here (PNG and SVG; created if its parent exists): each load's latency CDF, latency and GB/s
    /// against load with the knee, and each load's timeline
    #[arg(long, value_name = "DIR", help_heading = "Output")]
    pub fig: Option<PathBuf>,
    /// Write one self-contained HTML page here at the end: warnings, the run's identity, its loads and figures
    #[arg(long, value_name = "PAGE", help_heading = "Output")]
    pub html: Option<PathBuf>,
    /// Where the results file goes when --json names none
    #[arg(long, env = "KVXFER_OUT_DIR", default_value = "results", value_name = "DIR", help_heading = "Output")]
    pub out_dir: PathBuf,
    /// Set by the parser: --reps and --warmup were given on the command line.
    #[arg(skip)]
    pub reps_given: bool,
    #[arg(skip)]
    pub warmup_given: bool,
}

/// `--prefill-tokens-per-s`: a finite rate above 0.
fn parse_tokens_per_s(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err("give the prefill's input tokens per second, a number above 0 (e.g. 20000)".to_string()),
    }
}
