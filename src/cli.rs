//! Command-line definitions (clap derive). Only parsing lives here; `commands/` gives it meaning.

use crate::mem::MemKind;
pub use crate::plan::layout::PagedArgs;
use crate::plan::sizes::{parse_size, SizeList, TokenList};
use crate::plan::text;
use crate::plan::{
    CopyMode, CountersMode, CqMode, MooncakeEntries, MooncakeProtocol, NixlBackend, NixlOp, NumaMode, Staging,
    TransportKind,
};
use clap::builder::{PossibleValue, TypedValueParser};
use clap::parser::ValueSource;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use serde::{Deserialize, Deserializer};
use std::ffi::OsStr;
use std::path::PathBuf;
use std::time::Duration;

// The output flags belong to the layer that writes the files (`Recorder` lives below `cli`).
pub use crate::export::args::{FigArgs, OutputArgs};

const UNITS_NOTE: &str = "Sizes are binary units (B, KiB, MiB, GiB); bandwidth is GB/s = 10^9 bytes/s; times in ms \
                          (per-block latency in µs). Exit codes: 0 success, 1 runtime failure, 2 bad usage or input.";

#[derive(Parser, Debug)]
#[command(name = "kvxfer", version, about = "Measure how fast KV-cache-sized buffers move between hosts and GPUs",
          after_help = UNITS_NOTE)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// Parse the process's arguments, recording which of `sweep`'s flags were given on the command line.
    pub fn parse_args() -> Result<Cli, clap::Error> {
        let matches = Cli::command().try_get_matches()?;
        let mut cli = Cli::from_arg_matches(&matches)?;
        if let (Command::Sweep(a), Some(("sweep", m))) = (&mut cli.command, matches.subcommand()) {
            a.explicit = m
                .ids()
                .filter(|id| m.value_source(id.as_str()) == Some(ValueSource::CommandLine))
                .map(|id| id.to_string())
                .collect();
        }
        Ok(cli)
    }
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the receiver: accept senders and expose a buffer for them to write into.
    #[command(after_help = "Example:\n  KVXFER_TOKEN=s3cret kvxfer serve --listen 0.0.0.0:18515\n\n".to_owned() + UNITS_NOTE)]
    Serve(ServeArgs),
    /// Run the sender against a receiver and measure every transfer.
    #[command(after_help = "Example:\n  kvxfer send --peer 10.0.0.2:18515 --token s3cret --tokens 1k,32k,128k \
                            --model qwen3-30b-a3b --json run.json\n\n".to_owned() + UNITS_NOTE)]
    Send(SendArgs),
    /// Run receiver and sender on this machine (loopback) and sweep sizes: the main job.
    #[command(after_help = "Examples:\n  kvxfer sweep                              # default: 1k..16k tokens of qwen3-30b-a3b\n  \
                            kvxfer sweep --sizes 96MiB,1GiB --reps 10 --verify\n  \
                            kvxfer sweep --transport cuda --src gpu:0 --dst gpu:1 --tokens 1k,128k --model qwen3-30b-a3b\n  \
                            kvxfer sweep sweeps/mb2.toml --set transport=tcp --set src=host --set dst=host\n  \
                            kvxfer sweep sweeps/mb2.toml --resume results/mb2.json\n\n".to_owned() + UNITS_NOTE)]
    Sweep(SweepArgs),
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
                            RANK=0 WORLD_SIZE=2 MASTER_ADDR=head MASTER_PORT=29500 kvxfer cluster --pattern bidir\n\n\
                            Patterns: pairs (every ordered pair alone), incast (1..N-1 into 0 at once), fanout (0 into \
                            all at once), bidir (each pair both ways at once), ring (i into i+1 at once), all (every \
                            rank into every other at once). Rank 0 writes the results.\n\n".to_owned() + UNITS_NOTE)]
    Cluster(ClusterArgs),
    /// Show what this host offers: CPUs, memory, huge pages, RDMA devices (ports, GIDs) and GPUs.
    #[command(after_help = "Example:\n  kvxfer devices --json\n  kvxfer devices --topo")]
    Devices(DevicesArgs),
    /// Preflight: what on this host is likely to cost GPU <-> NIC bandwidth (NUMA, ACS, relaxed ordering, degraded
    /// links, RoCE MTU and GIDs, GPUDirect module, IOMMU, CPU governor, huge pages), ranked, each with its fix. Exits 0
    /// when nothing is found, 1 when something is
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
        let named = TransportKind::value_variants().iter().filter_map(ValueEnum::to_possible_value);
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

/// `--mr-chunk`, `--dst-mr-chunk`: a size that is a whole number of 4 KiB pages (pages are registered whole).
fn parse_page_multiple(text: &str) -> anyhow::Result<u64> {
    let n = parse_size(text)?;
    if n % 4096 != 0 {
        crate::bail_usage!("must be a multiple of 4 KiB (pages are registered whole)");
    }
    Ok(n)
}

impl std::str::FromStr for TransportChoice {
    type Err = String;

    /// As `--transport` reads it (a sweep file's `transport` key too).
    fn from_str(text: &str) -> Result<TransportChoice, String> {
        if text == "auto" {
            return Ok(TransportChoice::Auto);
        }
        <TransportKind as ValueEnum>::from_str(text, false).map(TransportChoice::Named).map_err(|_| {
            let names: Vec<String> = TransportChoiceParser::values().map(|v| v.get_name().to_string()).collect();
            format!("unknown transport; choose one of {}", names.join(", "))
        })
    }
}

/// `--ack-timeout`: the exponent of the local ACK timeout, 1 to 31 (the verbs attribute has five bits).
fn parse_ack_timeout(text: &str) -> Result<u8, String> {
    match text.parse::<u8>() {
        Ok(n @ 1..=31) => Ok(n),
        _ => Err(format!("{text} is not in 1..=31")),
    }
}

// A sweep file's parameters deserialize into the structs below with the flags' own parsers (see `plan::text`).
fn some_size<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    text::parsed_some(d, parse_size)
}

fn some_page_multiple<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    text::parsed_some(d, parse_page_multiple)
}

fn ack_timeout<'de, D: Deserializer<'de>>(d: D) -> Result<u8, D::Error> {
    text::parsed(d, parse_ack_timeout)
}

fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    text::parsed(d, parse_duration)
}

text::defaults_from_clap!(SizeArgs, RunArgs, VerbsArgs, DeviceArgs, SweepArgs);

#[derive(Args, Debug, Clone, Deserialize)]
#[serde(default)]
pub struct SizeArgs {
    /// Transfer sizes, comma-separated, binary units: 96MiB,1GiB,12GiB
    #[arg(long, value_name = "LIST", conflicts_with = "tokens", allow_hyphen_values = true)]
    #[serde(deserialize_with = "text::some_from_str")]
    pub sizes: Option<SizeList>,
    /// Transfer sizes as token counts (k = 1024): 1k,32k,128k; needs --model, --model-config or --kv-bytes-per-token
    #[arg(long, value_name = "LIST", allow_hyphen_values = true)]
    #[serde(deserialize_with = "text::some_from_str")]
    pub tokens: Option<TokenList>,
    /// Built-in model for --tokens: qwen3-30b-a3b, qwen3-8b, llama-3.1-8b, llama-3.1-70b, deepseek-v3
    #[arg(long, value_name = "NAME", conflicts_with_all = ["model_config", "kv_bytes_per_token"])]
    #[serde(deserialize_with = "text::some_text")]
    pub model: Option<String>,
    /// A Hugging Face config.json to derive KV bytes per token from
    #[arg(long, value_name = "PATH", conflicts_with = "kv_bytes_per_token")]
    #[serde(deserialize_with = "text::some_text")]
    pub model_config: Option<PathBuf>,
    /// KV bytes per token, given directly
    #[arg(long, value_name = "N")]
    pub kv_bytes_per_token: Option<u64>,
}

#[derive(Args, Debug, Clone, Deserialize)]
#[serde(default)]
pub struct RunArgs {
    /// Measured reps per size
    #[arg(long, default_value_t = 5)]
    pub reps: u32,
    /// Warm-up reps per size (run first, kept apart from the statistics)
    #[arg(long, default_value_t = 1)]
    pub warmup: u32,
    /// How bytes move: tcp, verbs, cuda, or auto (cuda when both ends are GPUs, tcp otherwise; says which)
    #[arg(long, default_value = "auto", value_name = "NAME", value_parser = TransportChoiceParser)]
    #[serde(deserialize_with = "text::from_str")]
    pub transport: TransportChoice,
    /// Bytes per write (default: the transport's, e.g. 64MiB for tcp); clamped to the transfer size
    #[arg(long, value_name = "SIZE", allow_hyphen_values = true, value_parser = parse_size)]
    #[serde(deserialize_with = "some_size")]
    pub block_size: Option<u64>,
    /// Parallel connections (tcp) or CUDA streams (cuda)
    #[arg(long, default_value_t = 1)]
    pub streams: u32,
    /// cuda transport: copy engine (ce: cuMemcpyAsync per write; batch: one cuMemcpyBatchAsync for all writes,
    /// driver ≥ 12.8, else ce with a note), SM kernel (sm: one launch for all pieces of a paged transfer), or auto
    /// (ce for contiguous transfers, sm for transfers of many small pieces; fastest measured)
    #[arg(long, default_value = "auto")]
    pub copy: CopyMode,
    /// cuda transport, GPU on both ends: none (copy each piece to its slot), or gather (an SM kernel packs the
    /// pieces into a staging buffer on the source GPU, one contiguous copy to a staging buffer on the destination
    /// GPU, a kernel there unpacks them into their slots; all three steps are timed and reported; the middle copy
    /// is the SM copy kernel with --copy sm, else the copy engine)
    #[arg(long, default_value = "none")]
    pub staging: Staging,
    /// mooncake transport: Mooncake Transfer Engine's tcp, rdma or nvlink-intra transport (rdma uses the devices of
    /// -d, and is refused when the engine would find no RDMA device rather than falling back to TCP; nvlink-intra
    /// needs the CUDA wheel and GPU memory on both ends). Each is forced through the engine's environment and
    /// checked in its log, since the engine otherwise picks RDMA whenever it sees an HCA
    #[arg(long, default_value = "tcp")]
    pub mooncake_protocol: MooncakeProtocol,
    /// mooncake transport: grouped (writes adjacent on both ends share one batch entry, as vLLM's connector
    /// groups blocks) or per-write (one entry per write, as Mooncake's transfer_engine_bench posts blocks)
    #[arg(long, default_value = "grouped")]
    pub mooncake_entries: MooncakeEntries,
    /// nixl transport: the NIXL backend plugin (ucx; libfabric needs libfabric >= 1.10 on the host)
    #[arg(long, default_value = "ucx")]
    pub nixl_backend: NixlBackend,
    /// nixl transport: write (the sender WRITEs into the receiver) or read (the receiver, the decode side, READs
    /// from the sender with prepped descriptor lists and notifies it, as vLLM's NixlConnector does; the receiver
    /// times the READ)
    #[arg(long, default_value = "write")]
    pub nixl_op: NixlOp,

    /// Fill a per-rep pattern and have the receiver check every byte; a mismatch fails the run
    #[arg(long)]
    pub verify: bool,
    /// Seed of the --verify pattern
    #[arg(long, default_value_t = 0x6b76_7866, hide_default_value = true)]
    pub seed: u64,
    /// Try huge pages for the buffers (falls back to normal pages, and says so)
    #[arg(long)]
    pub hugepages: bool,
    /// Read counters around every rep on both ends, outside the timed interval, and keep what moved
    /// (reps[].counters): the RDMA port's counters and hw_counters, the network interface's statistics, the
    /// process's CPU time, the GPU's clocks and throttle reasons; full: also the GPU's NVLink bytes per link,
    /// energy, PCIe replays and link state (slow to read, and they delay the next GPU copy by tens of µs); off: none
    #[arg(long, default_value = "auto")]
    pub counters: CountersMode,
    /// Bind each end's thread, and the host buffers it first touches, to one NUMA node's CPUs: auto = the node
    /// of the RDMA NIC (verbs, mooncake rdma) or of the GPU in use (GPU memory, or pinned memory copied to a GPU),
    /// nothing on a one-node host; N = node N; off = no binding. Recorded per end (config.numa)
    #[arg(long, default_value = "auto", value_name = "auto|off|N")]
    pub numa: NumaMode,
    /// Run this shell command (sh -c) before every rep, warm-ups included, outside the timed interval, as
    /// hyperfine's --prepare does: drop caches, reset a switch counter, change the fabric for some reps. It sees
    /// KVXFER_CASE, KVXFER_REP (counting warm-ups and measured reps separately), KVXFER_WARMUP (0|1) and
    /// KVXFER_SIZE_BYTES; its output goes to stderr; a failure, or a run past --io-timeout, stops the run
    #[arg(long, value_name = "CMD")]
    #[serde(deserialize_with = "text::some_text")]
    pub prepare: Option<String>,
    /// Name of this run in tables and figures
    #[arg(long, value_name = "TEXT")]
    #[serde(skip)]
    pub label: Option<String>,
    #[command(flatten)]
    #[serde(flatten)]
    pub verbs: VerbsArgs,
    #[command(flatten)]
    #[serde(flatten)]
    pub paged: PagedArgs,
    /// Keep trying to reach the receiver this long while nothing listens there yet (e.g. 60s, 500ms): a launcher
    /// may start the sender first
    #[arg(long, default_value = "60s", value_name = "DURATION", value_parser = parse_duration)]
    #[serde(deserialize_with = "duration")]
    pub connect_timeout: Duration,
    /// Give up when the peer is silent this long (e.g. 60s)
    #[arg(long, default_value = "60s", value_name = "DURATION", value_parser = parse_duration)]
    #[serde(deserialize_with = "duration")]
    pub io_timeout: Duration,
}

/// RDMA verbs knobs (`--transport verbs`).
#[derive(Args, Debug, Clone, Deserialize)]
#[serde(default)]
#[command(next_help_heading = "RDMA verbs (--transport verbs)")]
pub struct VerbsArgs {
    /// RC queue pairs; writes are spread over them round-robin
    #[arg(long, default_value_t = 4)]
    pub qps: u32,
    /// Work requests linked into one ibv_post_send
    #[arg(long, default_value_t = 16)]
    pub batch: u32,
    /// Outstanding work requests per queue pair
    #[arg(long, default_value_t = 128)]
    pub inflight: u32,
    /// Signal a completion every N work requests (and always the last)
    #[arg(long, default_value_t = 16)]
    pub signal_every: u32,
    /// Register memory in pieces of at most this size (default: the device's max_mr_size, at most 2GiB; a size given
    /// here may pass 2GiB, up to max_mr_size)
    #[arg(long, value_name = "SIZE", value_parser = parse_page_multiple)]
    #[serde(deserialize_with = "some_page_multiple")]
    pub mr_chunk: Option<u64>,
    /// Register the receiver's memory in pieces of at most this size, up to the device's max_mr_size (default:
    /// --mr-chunk); the destination-MR-size axis of sweeps/mr-cliff.toml
    #[arg(long, value_name = "SIZE", value_parser = parse_page_multiple)]
    #[serde(deserialize_with = "some_page_multiple")]
    pub dst_mr_chunk: Option<u64>,
    /// Register the send buffer inside every rep and include it in the transfer time
    #[arg(long)]
    pub reg_per_rep: bool,
    /// Completion handling: poll (busy-poll) or event (completion channel, sleeps)
    #[arg(long, default_value = "poll")]
    pub cq_mode: CqMode,
    /// Local ACK timeout exponent: a lost packet is retransmitted after 4.096 µs × 2^N (14 ≈ 67 ms, as perftest)
    #[arg(long, default_value_t = 14, value_parser = parse_ack_timeout)]
    #[serde(deserialize_with = "ack_timeout")]
    pub ack_timeout: u8,
    /// Paged layout: gather up to N pieces whose destinations are back to back into one RDMA WRITE (an SGE list;
    /// 1 to 64, clamped to the device's max_sge; 1 posts one WRITE per piece)
    #[arg(long, default_value_t = 16, value_name = "N")]
    pub max_sge: u32,
}

/// Which RDMA device and port this end uses (`--transport verbs`).
#[derive(Args, Debug, Clone, Deserialize)]
#[serde(default)]
#[command(next_help_heading = "RDMA device")]
pub struct DeviceArgs {
    /// RDMA device name, e.g. mlx5_0 or rxe0 (default: the first with an active port)
    #[arg(short = 'd', long = "device", value_name = "NAME")]
    #[serde(deserialize_with = "text::some_text")]
    pub device: Option<String>,
    /// Port of the device
    #[arg(long, default_value_t = 1)]
    pub ib_port: u8,
    /// GID index (default: like perftest, a RoCE v2 IPv4-mapped GID when there is one)
    #[arg(long, value_name = "N")]
    pub gid_index: Option<u32>,
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
    #[command(flatten)]
    pub device: DeviceArgs,
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
    pub out: OutputArgs,
}

#[derive(Args, Debug)]
pub struct ClusterArgs {
    /// Which flows run, and which at once: pairs, incast, fanout, bidir, ring or all
    #[arg(long, default_value = "pairs")]
    pub pattern: crate::cluster::Pattern,
    /// Where the ranks meet: rank 0's host and a free port (default: MASTER_ADDR:MASTER_PORT, else the first host
    /// of SLURM_JOB_NODELIST)
    #[arg(long, value_name = "HOST:PORT")]
    pub coordinator: Option<String>,
    /// Shared secret of the ranks; required unless the coordinator is on loopback
    #[arg(long, env = "KVXFER_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Where each rank's buffers live: host, pinned or gpu:N
    #[arg(long, default_value = "host", value_name = "KIND")]
    pub mem: MemKind,
    /// With --mem gpu:N: each rank uses gpu:LOCAL_RANK instead (one GPU per rank on a host)
    #[arg(long)]
    pub gpu_per_local_rank: bool,
    /// -d may list devices, comma-separated: each rank uses the one at its local rank (modulo the list)
    #[command(flatten)]
    pub device: DeviceArgs,
    /// How long the ranks may take to meet at rank 0
    #[arg(long, default_value = "60s", value_name = "DURATION", value_parser = parse_duration)]
    pub rendezvous_timeout: Duration,
    /// How long a rank waits for the others at a step's barrier (the slowest step's transfers must fit)
    #[arg(long, default_value = "10m", value_name = "DURATION", value_parser = parse_duration)]
    pub step_timeout: Duration,
    #[command(flatten)]
    pub sizes: SizeArgs,
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub out: OutputArgs,
}

#[derive(Args, Debug, Deserialize)]
#[serde(default)]
pub struct SweepArgs {
    /// A sweep file (sweeps/*.toml): its cases, reps and order replace the size and run flags
    #[arg(value_name = "FILE.toml")]
    #[serde(skip)]
    pub file: Option<PathBuf>,
    /// Override a key of the sweep file, repeatable: --set transport=tcp --set tokens=1k,2k
    #[arg(long = "set", value_name = "KEY=VALUE", requires = "file")]
    #[serde(skip)]
    pub sets: Vec<String>,
    /// Continue an interrupted sweep: keep the completed cases (and measured reps) of this results file, run the
    /// rest, and write back into it (unless --json says otherwise)
    #[arg(long, value_name = "FILE.json", requires = "file")]
    #[serde(skip)]
    pub resume: Option<PathBuf>,
    /// Check the sweep file and print its plan (cases, sessions, reps, order), then exit without measuring
    #[arg(long, requires = "file")]
    #[serde(skip)]
    pub plan: bool,
    /// Where the sender's buffer lives: host, pinned or gpu:N
    #[arg(long, default_value = "host", value_name = "KIND")]
    #[serde(deserialize_with = "text::from_str")]
    pub src: MemKind,
    /// Where the receiver's buffer lives: host, pinned or gpu:N
    #[arg(long, default_value = "host", value_name = "KIND")]
    #[serde(deserialize_with = "text::from_str")]
    pub dst: MemKind,
    /// The sender's RDMA device (-d) and port; the receiver uses --peer-device (default: the same device)
    #[command(flatten)]
    #[serde(flatten)]
    pub device: DeviceArgs,
    /// The receiver's RDMA device (default: the sender's, i.e. loopback through one NIC)
    #[arg(long, value_name = "NAME")]
    #[serde(deserialize_with = "text::some_text")]
    pub peer_device: Option<String>,
    #[command(flatten)]
    #[serde(flatten)]
    pub sizes: SizeArgs,
    #[command(flatten)]
    #[serde(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    #[serde(skip)]
    pub out: OutputArgs,
    /// Where the default results/<timestamp>.json and .md go when --json/--md are not given
    #[arg(long, default_value = "results", value_name = "DIR")]
    #[serde(skip)]
    pub out_dir: PathBuf,
    /// The ids of the flags given on the command line (filled by [`Cli::parse_args`]): a sweep file refuses
    /// parameter flags by whether they were given, not by whether their value differs from the default.
    #[arg(skip)]
    #[serde(skip)]
    pub explicit: Vec<String>,
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
    /// A results file (send, sweep or a sweep file's)
    #[arg(long, value_name = "FILE.json")]
    pub results: PathBuf,
    #[command(flatten)]
    pub sizes: SizeArgs,
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
        assert_eq!(a.sizes.tokens, Some(TokenList(vec![1024, 2048])));
        assert_eq!((a.run.io_timeout, a.run.connect_timeout), (Duration::from_secs(2), Duration::from_secs(60)));
        assert_eq!((a.run.transport, a.src), (TransportChoice::Auto, MemKind::Host));
    }
}
