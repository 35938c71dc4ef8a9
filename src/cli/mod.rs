//! Command-line definitions (clap derive): the only place that knows clap. Each flag is a typed field here, read
//! with its value's own parser (a named enum's table, `FromStr`, a size parser); `commands/` gives the fields
//! meaning, and a sweep file's keys are read into the same fields (see [`sweep`]).

use crate::cluster::Pattern;
use crate::mem::MemKind;
use crate::named::Named;
use crate::plan::sizes::parse_size;
use crate::plan::TransportKind;
use clap::builder::{PossibleValue, TypedValueParser};
use clap::parser::ValueSource;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use serde::Serialize;
use std::ffi::OsStr;
use std::path::PathBuf;
use std::time::Duration;

mod cluster_replay;
mod latency;
mod output;
mod pace;
mod params;
mod replay;
pub mod sweep;
pub mod values;
mod workload;
pub use cluster_replay::ClusterReplayArgs;
pub use latency::LatencyArgs;
pub use output::{FigArgs, OutputArgs};
pub use pace::PaceArgs;
pub use params::{DeviceArgs, PagedArgs, RunArgs, SizeArgs, VerbsArgs};
pub use replay::ReplayArgs;
pub use sweep::SweepArgs;
use values::named;
pub use workload::{WorkloadArgs, DEFAULT_SEED};

const UNITS_NOTE: &str = "Sizes are binary units (B, KiB, MiB, GiB); bandwidth is GB/s = 10^9 bytes/s; times in ms \
                          (per-block latency in µs). Exit codes: 0 success, 1 runtime failure, 2 bad usage or input.";

#[derive(Parser, Debug)]
#[command(name = "kvxfer", version, about = "Measure how fast KV-cache-sized buffers move between hosts and GPUs",
          after_help = UNITS_NOTE)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Refuse an input file (results, sweep file, trace, config.json, or - for standard input) larger than this
    #[arg(long, global = true, default_value = "1GiB", value_name = "SIZE", value_parser = parse_size)]
    pub max_input_size: u64,
    /// Whether `--token` was given on the command line, where every user of the host can read it (`ps`,
    /// /proc/PID/cmdline), rather than through KVXFER_TOKEN (filled by [`Cli::parse_args`]).
    #[arg(skip)]
    pub token_in_argv: bool,
}

impl Cli {
    /// Parse the process's arguments, recording which of `sweep`'s flags were given on the command line.
    pub fn parse_args() -> Result<Cli, clap::Error> {
        Cli::parse_args_from(std::env::args_os())
    }

    /// [`Cli::parse_args`] of `args` (the program's name first).
    pub fn parse_args_from<T: Into<std::ffi::OsString> + Clone>(
        args: impl IntoIterator<Item = T>,
    ) -> Result<Cli, clap::Error> {
        let matches = Cli::command().try_get_matches_from(args)?;
        let mut cli = Cli::from_arg_matches(&matches)?;
        cli.token_in_argv = matches.subcommand().is_some_and(|(_, m)| {
            m.ids().any(|id| id == "token") && m.value_source("token") == Some(ValueSource::CommandLine)
        });
        let reps_given = |m: &clap::ArgMatches| m.value_source("reps") == Some(ValueSource::CommandLine);
        match (&mut cli.command, matches.subcommand()) {
            (Command::Sweep(a), Some(("sweep", m))) => a.pace.reps_given = reps_given(m),
            (Command::Send(a), Some(("send", m))) => a.pace.reps_given = reps_given(m),
            (Command::Replay(a), Some(("replay", m))) => {
                a.reps_given = reps_given(m);
                a.warmup_given = m.value_source("warmup") == Some(ValueSource::CommandLine);
            }
            (Command::Cluster(a), Some(("cluster", m))) => {
                a.replay.reps_given = reps_given(m);
                a.replay.warmup_given = m.value_source("warmup") == Some(ValueSource::CommandLine);
            }
            _ => {}
        }
        if let (Command::Sweep(a), Some(("sweep", m))) = (&mut cli.command, matches.subcommand()) {
            a.explicit = m
                .ids()
                .filter(|id| m.value_source(id.as_str()) == Some(ValueSource::CommandLine))
                .map(|id| id.to_string())
                .collect();
        }
        Ok(cli)
    }

    /// `kvxfer cluster ARGS` as clap parses it, for unit tests of what commands make of the arguments.
    #[cfg(test)]
    pub fn cluster_args(extra: &[&str]) -> ClusterArgs {
        let argv = ["kvxfer", "cluster"].iter().chain(extra);
        match Cli::parse_from(argv).command {
            Command::Cluster(a) => a,
            _ => unreachable!("a cluster command line parses as cluster"),
        }
    }
}

/// The long flags of a group of arguments by id (`max_sge` → `max-sge`), for unit tests of what commands make of
/// the arguments.
#[cfg(test)]
pub fn long_flags<T: Args>() -> std::collections::BTreeMap<String, String> {
    let cmd = T::augment_args(clap::Command::new("flags"));
    cmd.get_arguments().filter_map(|a| Some((a.get_id().to_string(), a.get_long()?.to_string()))).collect()
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the receiver: accept senders and expose a buffer for them to write into.
    #[command(after_help = "Example:\n  KVXFER_TOKEN=s3cret kvxfer serve --listen 0.0.0.0:18515\n\n".to_owned() + UNITS_NOTE)]
    Serve(ServeArgs),
    /// Run the sender against a receiver and measure every transfer.
    #[command(after_help = "Example:\n  KVXFER_TOKEN=s3cret kvxfer send --peer 10.0.0.2:18515 --tokens 1k,32k,128k \
                            --model qwen3-30b-a3b --json run.json\n\n".to_owned() + UNITS_NOTE)]
    Send(SendArgs),
    /// Run receiver and sender on this machine (loopback) and sweep sizes: the main job.
    #[command(after_help = "Examples:\n  kvxfer sweep                              # default: 1k..16k tokens of qwen3-30b-a3b\n  \
                            kvxfer sweep --sizes 96MiB,1GiB --reps 10 --verify\n  \
                            kvxfer sweep --transport cuda --src gpu:0 --dst gpu:1 --tokens 1k,128k --model qwen3-30b-a3b\n  \
                            kvxfer sweep sweeps/mb2.toml --set transport=tcp --set src=host --set dst=host\n  \
                            kvxfer sweep sweeps/mb2.toml --resume results/mb2.json\n\n".to_owned() + UNITS_NOTE)]
    Sweep(SweepArgs),
    /// Ping-pong latency per message size (half the round trip, as ib_write_lat and sockperf report it): min, p50,
    /// p90, p99, p99.9 and max in µs
    #[command(after_help = "Examples:\n  kvxfer latency                                  # tcp on loopback, 8 B..1 MiB\n  \
                            kvxfer latency --sizes 8,4KiB,64KiB --iters 10000 --json lat.json\n  \
                            KVXFER_TOKEN=s3cret kvxfer latency --peer 10.0.0.2:18515   # against kvxfer serve\n  \
                            kvxfer latency --transport cuda                 # host -> a kernel on gpu:0 and back\n  \
                            kvxfer latency --transport cuda --src gpu:0 --dst gpu:1   # GPU <-> GPU copies\n\n".to_owned() + UNITS_NOTE)]
    Latency(LatencyArgs),
    /// Replay a request stream's KV transfers (a trace, or an arrival model) and report each request's latency
    /// under load, counted from its scheduled arrival: p50/p99, offered vs achieved, the knee of a load sweep
    #[command(after_help = "Examples:\n  kvxfer replay                                   # the built-in Mooncake trace's first 60 s, tcp\n  \
                            kvxfer replay --trace conv.jsonl --window 0s..300s --speeds 1,2,4,8 --json r.json\n  \
                            kvxfer replay --arrivals poisson:2 --prompt-tokens lognormal:8000,1 --requests 500 --rates 1,2,4\n  \
                            kvxfer replay --transport cuda --src pinned --dst gpu:0 --speeds 1,4,16 --verify\n\n".to_owned() + UNITS_NOTE)]
    Replay(ReplayArgs),
    /// Re-render tables from saved results files.
    #[command(after_help = "Examples:\n  kvxfer report results/a.json results/b.json --md tables.md\n  \
                            kvxfer report a.json b.json --fig figs --line \"NIC 25 GB/s=25\"\n\n".to_owned() + UNITS_NOTE)]
    Report(ReportArgs),
    /// Estimate KV transfer times for token counts from a measured time-vs-size curve.
    #[command(after_help = "Example:\n  kvxfer predict --results results/h200-nvlink.json --tokens 1k,32k,128k \
                            --model qwen3-30b-a3b --decode-ms 7 --decode-tokens 64\n\n".to_owned() + UNITS_NOTE)]
    Predict(PredictArgs),
    /// One rank of a cluster run, started once per rank by srun, mpirun or torchrun: measure links between ranks.
    #[command(after_help = "Examples:\n  srun -n 4 kvxfer cluster --pattern pairs --sizes 96MiB,1GiB --verify --json pairs.json\n  \
                            mpirun -np 4 kvxfer cluster --pattern incast --coordinator head:18600 --json incast.json\n  \
                            RANK=0 WORLD_SIZE=2 MASTER_ADDR=head MASTER_PORT=29500 kvxfer cluster --pattern bidir\n  \
                            mpirun -np 4 kvxfer cluster --pattern replay --prefill 0,1 --decode 2,3 \
                            --arrivals poisson:20 --prompt-tokens fixed:2000 --requests 200 --route least-loaded\n\n\
                            Patterns (what runs at once): pairs (every ordered pair, disjoint pairs at once: no rank \
                            in two flows), alone (every ordered pair, one flow at a time: the uncontended baseline), \
                            incast (1..N-1 into 0 at once), fanout (0 into all at once), bidir (each pair both ways at \
                            once, disjoint pairs at once), ring (i into i+1 at once), all (every rank into every other \
                            at once), replay (a request stream, each request from a prefill rank to a decode rank at \
                            its scheduled time; --route least-loaded picks the decode rank with the fewest bytes routed \
                            to it so far, counted from the schedule, so every rank agrees without messages). Rank 0 \
                            writes the results.\n\n".to_owned() + UNITS_NOTE)]
    Cluster(ClusterArgs),
    /// Show what this host offers: CPUs, memory, huge pages, RDMA devices (ports, GIDs) and GPUs.
    #[command(after_help = "Example:\n  kvxfer devices --json\n  kvxfer devices --topo")]
    Devices(DevicesArgs),
    /// Preflight: what on this host is likely to cost GPU <-> NIC bandwidth (NUMA, ACS, relaxed ordering, degraded
    /// links, RoCE MTU and GIDs, GPUDirect module, IOMMU, CPU governor, huge pages), ranked, each with its fix. Exits 1
    /// when a finding costs --fail-on or more, 0 otherwise (lesser findings are printed all the same)
    #[command(
        after_help = "Example:\n  kvxfer doctor -d mlx5_0 --gpu 0\n  KVXFER_SYSFS_ROOT=/path/to/capture kvxfer doctor --json"
    )]
    Doctor(DoctorArgs),
    /// Print a new random token (128 bits, hex) for serve and send: serve on a non-loopback address needs one of at
    /// least 16 characters
    #[command(after_help = "Example:\n  export KVXFER_TOKEN=$(kvxfer token)\n  kvxfer serve --listen 0.0.0.0:18515")]
    Token,
}

/// `--transport`: a transport by name, or `auto` (chosen from the memory kinds of the ends; command line only, a
/// run configuration always names one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportChoice {
    Auto,
    Named(TransportKind),
}

/// Parses `--transport` against [`TransportKind`]'s names plus `auto`, naming the choices in the error line itself.
#[derive(Debug, Clone, Copy)]
pub struct TransportChoiceParser;

impl TransportChoiceParser {
    fn values() -> impl Iterator<Item = PossibleValue> {
        let named = TransportKind::NAMES.iter().map(|&n| PossibleValue::new(n));
        std::iter::once(PossibleValue::new("auto")).chain(named)
    }
}

impl TypedValueParser for TransportChoiceParser {
    type Value = TransportChoice;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<TransportChoice, clap::Error> {
        let parse = |text: &str| text.parse::<TransportChoice>();
        parse.parse_ref(cmd, arg, value)
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(Self::values()))
    }
}

/// `--transport`'s help: the transports by name from [`TransportKind`], so that none is left out.
fn transport_help() -> String {
    let names: Vec<String> =
        TransportChoiceParser::values().filter(|v| v.get_name() != "auto").map(|v| v.get_name().to_string()).collect();
    format!("How bytes move: {}; or auto (cuda when both ends are GPUs, tcp otherwise; says which)", names.join(", "))
}

/// `--connect-timeout`, `--io-timeout`: `5s`, `500ms`, `2m` or a plain number of seconds; positive.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    /// Longer than any run, and far from where adding it to a clock reading overflows (which panicked with
    /// `--io-timeout 9223372036854775807`).
    const MOST: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
    let d = if text.chars().all(|c| c.is_ascii_digit()) && !text.is_empty() {
        text.parse::<u64>().map(Duration::from_secs).ok()
    } else {
        humantime::parse_duration(text).ok()
    };
    match d {
        Some(d) if !d.is_zero() => Ok(d.min(MOST)),
        _ => Err("expected a positive duration like 5s, 500ms or 2m".to_string()),
    }
}

/// As `--transport` reads it: `auto` or the transport's name.
impl Serialize for TransportChoice {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            TransportChoice::Auto => s.serialize_str("auto"),
            TransportChoice::Named(kind) => kind.serialize(s),
        }
    }
}

impl std::str::FromStr for TransportChoice {
    type Err = String;

    /// As `--transport` reads it (a sweep file's `transport` key too).
    fn from_str(text: &str) -> Result<TransportChoice, String> {
        if text == "auto" {
            return Ok(TransportChoice::Auto);
        }
        text.parse::<TransportKind>().map(TransportChoice::Named).map_err(|_| {
            let names: Vec<String> = TransportChoiceParser::values().map(|v| v.get_name().to_string()).collect();
            format!("unknown transport; choose one of {}", names.join(", "))
        })
    }
}

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on
    #[arg(long, default_value = "127.0.0.1:18515", value_name = "ADDR:PORT")]
    pub listen: String,
    /// Shared secret senders must present; required unless listening on loopback
    #[arg(long, env = "KVXFER_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Exit after one sender (exit code reflects that session)
    #[arg(long)]
    pub once: bool,
    /// Where the receive buffer lives: host, pinned or gpu:N (`--transport cuda` from another process needs gpu:N)
    #[arg(long, default_value = "host", value_name = "KIND")]
    pub mem: MemKind,
    /// Refuse transfers larger than this (default: the memory available when a sender asks)
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub max_size: Option<u64>,
    /// Most data connections a sender may open
    #[arg(long, default_value_t = 64)]
    pub max_streams: u32,
    /// Runs served at once (each with its own buffer, so up to N x --max-size of memory); further senders are told
    /// that serve is busy. Concurrent runs share the NIC and memory bandwidth: their reps are marked
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64))]
    pub max_sessions: u32,
    /// Accepted for symmetry with send (the receiver dials nothing, so it has no effect here)
    #[arg(long, default_value = "60s", value_name = "DURATION", value_parser = parse_duration)]
    pub connect_timeout: Duration,
    /// Give up on a sender that is silent this long mid-session (e.g. 60s)
    #[arg(long, default_value = "60s", value_name = "DURATION", value_parser = parse_duration)]
    pub io_timeout: Duration,
    /// How long an authenticated sender may hold a run slot before it sends its Config (hidden: tests shorten it)
    #[arg(long, hide = true, default_value = "10s", value_name = "DURATION", value_parser = parse_duration)]
    pub config_idle: Duration,
    #[command(flatten)]
    pub device: DeviceArgs,
}

#[derive(Args, Debug)]
pub struct SendArgs {
    /// The receiver (`kvxfer serve`) to write into
    #[arg(long, value_name = "HOST:PORT")]
    pub peer: String,
    /// The receiver's token
    #[arg(long, env = "KVXFER_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Where the send buffer lives: host, pinned or gpu:N
    #[arg(long, default_value = "host", value_name = "KIND")]
    pub mem: MemKind,
    #[command(flatten)]
    pub device: DeviceArgs,
    #[command(flatten)]
    pub sizes: SizeArgs,
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub pace: PaceArgs,
    #[command(flatten)]
    pub out: OutputArgs,
    /// Where the results file goes when --json does not name one: a new <timestamp>-<suffix>.json, never an
    /// existing file
    #[arg(long, env = "KVXFER_OUT_DIR", default_value = "results", value_name = "DIR", help_heading = "Output")]
    pub out_dir: PathBuf,
}

/// Serialized, every flag but the output ones and the token is a rank's description of its run, which rank 0
/// compares across ranks (`commands::cluster_args`); flattened, so each key is a flag's field name.
#[derive(Args, Debug, Serialize)]
pub struct ClusterArgs {
    /// Which flows run, and which at once: pairs, alone, incast, fanout, bidir, ring, all or replay (see below)
    #[arg(long, default_value = "pairs", value_parser = named::<Pattern>())]
    pub pattern: Pattern,
    /// Where the ranks meet: rank 0's host and a free port (default: MASTER_ADDR:MASTER_PORT, else rank 0's address
    /// through the launcher's PMIx server (mpirun, srun --mpi=pmix), else the first host of SLURM_JOB_NODELIST, else
    /// loopback when every rank is on this host)
    #[arg(long, value_name = "HOST:PORT")]
    pub coordinator: Option<String>,
    /// Shared secret of the ranks, at least 16 characters; required unless the coordinator is on loopback
    #[arg(long, env = "KVXFER_TOKEN", hide_env_values = true)]
    #[serde(skip_serializing)]
    pub token: Option<String>,
    /// Where each rank's buffers live: host, pinned or gpu:N
    #[arg(long, default_value = "host", value_name = "KIND")]
    pub mem: MemKind,
    /// With --mem gpu:N: each rank uses gpu:LOCAL_RANK instead (one GPU per rank on a host)
    #[arg(long)]
    pub gpu_per_local_rank: bool,
    /// How long the ranks may take to meet at rank 0
    #[arg(long, default_value = "60s", value_name = "DURATION", value_parser = parse_duration)]
    pub rendezvous_timeout: Duration,
    /// How long a rank waits for the others at a step's barrier (the slowest step's transfers must fit)
    #[arg(long, default_value = "10m", value_name = "DURATION", value_parser = parse_duration)]
    pub step_timeout: Duration,
    /// -d may list devices, comma-separated: each rank uses the one at its local rank (modulo the list)
    #[command(flatten)]
    #[serde(flatten)]
    pub device: DeviceArgs,
    #[command(flatten)]
    #[serde(flatten)]
    pub sizes: SizeArgs,
    #[command(flatten)]
    #[serde(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    #[serde(flatten)]
    pub replay: ClusterReplayArgs,
    // Where the results go: rank 0 alone writes them, so each rank's are its own.
    #[command(flatten)]
    #[serde(skip_serializing)]
    pub out: OutputArgs,
}

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// Results files written by send or sweep
    #[arg(required = true, value_name = "FILE.json")]
    pub files: Vec<PathBuf>,
    /// Write the Markdown tables here (or print Markdown instead of boxed tables when given without a file: -)
    #[arg(long, value_name = "FILE")]
    pub md: Option<PathBuf>,
    /// Write CSV here (- for stdout); with several files, the side-by-side table goes to FILE's .compare.csv
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    #[command(flatten)]
    pub fig: FigArgs,
}

#[derive(Args, Debug)]
pub struct PredictArgs {
    /// A results file (send, sweep or a sweep file's): the measured curve every prediction reads (required)
    #[arg(long, value_name = "FILE.json")]
    pub results: Option<PathBuf>,
    /// Pick one configuration of a sweep file's results, repeatable: --where transport=cuda
    #[arg(long = "where", value_name = "KEY=VALUE")]
    pub filters: Vec<String>,
    /// Time of one decode step (ms): prints how many decode steps one transfer costs
    #[arg(long, value_name = "MS")]
    pub decode_ms: Option<f64>,
    /// Tokens the transferred KV cache lets the receiver decode: compares the transfer with that decode
    #[arg(long, value_name = "N", requires = "decode_ms")]
    pub decode_tokens: Option<u64>,
    /// Print JSON instead of a table
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub sizes: SizeArgs,
    #[command(flatten)]
    pub workload: WorkloadArgs,
}

#[derive(Args, Debug)]
pub struct DevicesArgs {
    /// Print JSON instead of text
    #[arg(long)]
    pub json: bool,
    /// Also show where each GPU and RDMA NIC sits on the PCIe tree: the bridges to the root with their links,
    /// NUMA node, relaxed ordering, MaxPayload/MaxReadReq, ACS, and each GPU's relation to each NIC (PIX..SYS)
    #[arg(long)]
    pub topo: bool,
}

#[derive(Args, Debug)]
pub struct DoctorArgs {
    /// Only this RDMA device (default: every one)
    #[arg(short = 'd', long = "device", value_name = "NAME")]
    pub device: Option<String>,
    /// Only this GPU, by PCI order (default: every one)
    #[arg(long, value_name = "N")]
    pub gpu: Option<u32>,
    /// Print the findings as JSON
    #[arg(long)]
    pub json: bool,
    /// Exit 1 when a finding costs this much or more (every finding is printed either way)
    #[arg(long, value_name = "COST", default_value = "medium")]
    pub fail_on: FailOn,
}

/// `doctor --fail-on`: the least cost of a finding that fails the preflight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FailOn {
    Low,
    Medium,
    High,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("5"), Ok(Duration::from_secs(5)));
        // Huge values saturate at ten years instead of overflowing a deadline.
        assert_eq!(parse_duration("9223372036854775807"), Ok(Duration::from_secs(10 * 365 * 24 * 3600)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn bad_values_are_refused_by_the_parser_with_the_reason() {
        let err = |args: &[&str]| Cli::try_parse_from(args).unwrap_err().to_string();
        let e = err(&["kvxfer", "send", "--peer", "x:1", "--transport", "pigeon"]);
        assert!(e.contains("'pigeon'") && e.contains("auto, tcp, verbs, cuda"), "{e}");
        let e = err(&["kvxfer", "send", "--peer", "x:1", "--mr-chunk", "5000"]);
        assert!(e.contains("--mr-chunk") && e.contains("multiple of 4 KiB"), "{e}");
        let e = err(&["kvxfer", "sweep", "--src", "gpu:x"]);
        assert!(e.contains("--src") && e.contains("gpu:N"), "{e}");
        let e = err(&["kvxfer", "sweep", "--sizes", "1MiB,,2MiB"]);
        assert!(e.contains("element 2 of 3 is empty"), "{e}");
        let ok = Cli::try_parse_from(["kvxfer", "sweep", "--tokens", "1k,2k", "--io-timeout", "2s"]).unwrap();
        let Command::Sweep(a) = ok.command else { panic!("sweep") };
        assert_eq!(a.sizes.tokens, Some(crate::plan::sizes::TokenList(vec![1024, 2048])));
        assert_eq!((a.run.io_timeout, a.run.connect_timeout), (Duration::from_secs(2), Duration::from_secs(60)));
        assert_eq!((a.run.transport, a.src), (TransportChoice::Auto, MemKind::Host));
    }
}
