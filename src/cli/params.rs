//! The parameters of a run that a sweep file can set as well as the command line: sizes, the run's knobs, RDMA
//! verbs knobs, the KV layout and the device. A sweep file's key is the field of the flag it names, read from its
//! text with the flag's own parser (see `plan::text`).

use super::values::{self, defaults_from_clap, named};
use super::{parse_duration, transport_help, TransportChoice, TransportChoiceParser};
use crate::plan::layout::LayoutOptions;
use crate::plan::paged::{DstPlacement, Layout};
use crate::plan::sizes::{parse_size, parse_tokens, SizeList, TokenList};
use crate::plan::text::{from_texts, TextError};
use crate::plan::{CountersMode, NumaMode, TransportConfig};
use crate::transport::cuda::{CopyMode, CudaConfig, Staging};
use crate::transport::mooncake::{MooncakeConfig, MooncakeEntries, MooncakeProtocol};
use crate::transport::nixl::{NixlBackend, NixlConfig, NixlOp};
use crate::transport::verbs::{CqMode, VerbsConfig, VerbsOp};
use clap::Args;
use serde::{Deserialize, Deserializer, Serialize};
use std::path::PathBuf;
use std::time::Duration;

/// `--mr-chunk`, `--dst-mr-chunk`: a size that is a whole number of 4 KiB pages (pages are registered whole).
fn parse_page_multiple(text: &str) -> anyhow::Result<u64> {
    let n = parse_size(text)?;
    if n % 4096 != 0 {
        crate::bail_usage!("must be a multiple of 4 KiB (pages are registered whole)");
    }
    Ok(n)
}

/// `--ack-timeout`: the exponent of the local ACK timeout, 1 to 31 (the verbs attribute has five bits).
pub(super) fn parse_ack_timeout(text: &str) -> Result<u8, String> {
    match text.parse::<u8>() {
        Ok(n @ 1..=31) => Ok(n),
        _ => Err(format!("{text} is not in 1..=31")),
    }
}

/// `--tclass`: the GRH traffic class, a byte.
pub(super) fn parse_tclass(text: &str) -> Result<u8, String> {
    text.parse::<u8>().map_err(|_| format!("{text} is not a traffic class in 0..=255 (DSCP << 2 | ECN)"))
}

/// `--sl`: the service level, 0 to 15 (four bits of the address vector).
pub(super) fn parse_sl(text: &str) -> Result<u8, String> {
    match text.parse::<u8>() {
        Ok(n @ 0..=15) => Ok(n),
        _ => Err(format!("{text} is not a service level in 0..=15")),
    }
}

// A sweep file's parameters deserialize into the structs below with the flags' own parsers.
fn some_size<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    values::parsed_some(d, parse_size)
}

fn some_page_multiple<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    values::parsed_some(d, parse_page_multiple)
}

fn ack_timeout<'de, D: Deserializer<'de>>(d: D) -> Result<u8, D::Error> {
    values::parsed(d, parse_ack_timeout)
}

fn some_tclass<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u8>, D::Error> {
    values::parsed_some(d, parse_tclass)
}

fn some_sl<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u8>, D::Error> {
    values::parsed_some(d, parse_sl)
}

fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    values::parsed(d, parse_duration)
}

fn some_tokens<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    values::parsed_some(d, parse_tokens)
}

defaults_from_clap!(SizeArgs, RunArgs, VerbsArgs, PagedArgs, DeviceArgs);

#[derive(Args, Debug, Clone, Deserialize, Serialize)]
#[serde(default)]
#[command(next_help_heading = "Sizes")]
pub struct SizeArgs {
    /// Transfer sizes, comma-separated, binary units: 96MiB,1GiB,12GiB; ranges: 1MiB..1GiB (doubling),
    /// 1MiB..1GiB:x4 (×4), 1MiB..8MiB:+1MiB (+1 MiB), the end always included; mixed: 1MiB..4MiB,96MiB
    #[arg(long, value_name = "LIST", conflicts_with = "tokens", allow_hyphen_values = true)]
    #[serde(deserialize_with = "values::some_from_str")]
    pub sizes: Option<SizeList>,
    /// Transfer sizes as token counts (k = 1024): 1k,32k,128k, or ranges like --sizes: 1k..128k, 1k..128k:x4;
    /// needs --model, --model-config or --kv-bytes-per-token
    #[arg(long, value_name = "LIST", allow_hyphen_values = true)]
    #[serde(deserialize_with = "values::some_from_str")]
    pub tokens: Option<TokenList>,
    /// Built-in model for --tokens: qwen3-30b-a3b, qwen3-8b, llama-3.1-8b, llama-3.1-70b, deepseek-v3
    #[arg(long, value_name = "NAME", conflicts_with_all = ["model_config", "kv_bytes_per_token"])]
    pub model: Option<String>,
    /// A Hugging Face config.json to derive KV bytes per token from
    #[arg(long, value_name = "PATH", conflicts_with = "kv_bytes_per_token")]
    pub model_config: Option<PathBuf>,
    /// KV bytes per token, given directly
    #[arg(long, value_name = "N")]
    pub kv_bytes_per_token: Option<u64>,
}

// Every flattened group names its own heading and comes after the flags of the struct that flattens it: a heading
// set inside a group stays in force for the flags declared after it.
#[derive(Args, Debug, Clone, Deserialize, Serialize)]
#[serde(default)]
#[command(next_help_heading = "Run")]
pub struct RunArgs {
    /// Measured reps per size
    #[arg(long, default_value_t = 5)]
    pub reps: u32,
    /// Warm-up reps per size (run first, kept apart from the statistics)
    #[arg(long, default_value_t = 1)]
    pub warmup: u32,
    // How bytes move (the help names every transport of the enum).
    #[arg(long, default_value = "auto", value_name = "NAME", value_parser = TransportChoiceParser, help = transport_help())]
    #[serde(deserialize_with = "values::from_str")]
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
    #[arg(long, default_value = "auto", value_parser = named::<CopyMode>())]
    pub copy: CopyMode,
    /// cuda transport, GPU on both ends: none (copy each piece to its slot), or gather (an SM kernel packs the
    /// pieces into a staging buffer on the source GPU, one contiguous copy to a staging buffer on the destination
    /// GPU, a kernel there unpacks them into their slots; all three steps are timed and reported; the middle copy
    /// is the SM copy kernel with --copy sm, else the copy engine)
    #[arg(long, default_value = "none", value_parser = named::<Staging>())]
    pub staging: Staging,
    /// mooncake transport: Mooncake Transfer Engine's tcp, rdma or nvlink-intra transport (rdma uses the devices of
    /// -d, and is refused when the engine would find no RDMA device rather than falling back to TCP; nvlink-intra
    /// needs the CUDA wheel and GPU memory on both ends). Each is forced through the engine's environment and
    /// checked in its log, since the engine otherwise picks RDMA whenever it sees an HCA
    #[arg(long, default_value = "tcp", value_parser = named::<MooncakeProtocol>())]
    pub mooncake_protocol: MooncakeProtocol,
    /// mooncake transport: grouped (writes adjacent on both ends share one batch entry, as vLLM's connector
    /// groups blocks) or per-write (one entry per write, as Mooncake's transfer_engine_bench posts blocks)
    #[arg(long, default_value = "grouped", value_parser = named::<MooncakeEntries>())]
    pub mooncake_entries: MooncakeEntries,
    /// nixl transport: the NIXL backend plugin (ucx; libfabric needs libfabric >= 1.10 on the host)
    #[arg(long, default_value = "ucx", value_parser = named::<NixlBackend>())]
    pub nixl_backend: NixlBackend,
    /// nixl transport: write (the sender WRITEs into the receiver) or read (the receiver, the decode side, READs
    /// from the sender with prepped descriptor lists and notifies it, as vLLM's NixlConnector does; the receiver
    /// times the READ)
    #[arg(long, default_value = "write", value_parser = named::<NixlOp>())]
    pub nixl_op: NixlOp,

    /// Fill a per-rep pattern and have the receiver check every byte; a mismatch fails the run
    #[arg(long)]
    pub verify: bool,
    /// Seed of the --verify pattern
    #[arg(long, default_value_t = 0x6b76_7866, hide_default_value = true)]
    // A sweep file's `seed` is its shuffle's, so it names this one `pattern_seed` (see `cli::sweep`).
    #[serde(rename(deserialize = "pattern_seed"))]
    pub seed: u64,
    /// Try huge pages for the buffers (falls back to normal pages, and says so)
    #[arg(long)]
    pub hugepages: bool,
    /// Read counters around every rep on both ends, outside the timed interval, and keep what moved
    /// (reps[].counters): the RDMA port's counters and hw_counters, the network interface's statistics, the
    /// process's CPU time, the GPU's clocks and throttle reasons; full: also the GPU's NVLink bytes per link,
    /// energy, PCIe replays and link state (slow to read, and they delay the next GPU copy by tens of µs); off: none
    #[arg(long, default_value = "auto", value_parser = named::<CountersMode>())]
    pub counters: CountersMode,
    /// Bind each end's thread, and the host buffers it first touches, to one NUMA node's CPUs: auto = the node
    /// of the RDMA NIC (verbs, mooncake rdma) or of the GPU in use (GPU memory, or pinned memory copied to a GPU),
    /// nothing on a one-node host; N = node N; off = no binding. Recorded per end (config.numa)
    #[arg(long, default_value = "auto", value_name = "auto|off|N")]
    #[serde(deserialize_with = "values::from_str")]
    pub numa: NumaMode,
    /// Run this shell command (sh -c) before every rep, warm-ups included, outside the timed interval, as
    /// hyperfine's --prepare does: drop caches, reset a switch counter, change the fabric for some reps. It sees
    /// KVXFER_CASE, KVXFER_REP (counting warm-ups and measured reps separately), KVXFER_WARMUP (0|1) and
    /// KVXFER_SIZE_BYTES; its output goes to stderr; a failure, or a run past --io-timeout, stops the run
    #[arg(long, value_name = "CMD")]
    pub prepare: Option<String>,
    /// Name of this run in tables and figures
    #[arg(long, value_name = "TEXT")]
    #[serde(skip)]
    pub label: Option<String>,
    /// Keep trying to reach the receiver this long while nothing listens there yet (e.g. 60s, 500ms): a launcher
    /// may start the sender first
    #[arg(long, default_value = "60s", value_name = "DURATION", value_parser = parse_duration)]
    #[serde(deserialize_with = "duration")]
    pub connect_timeout: Duration,
    /// Give up when the peer is silent this long (e.g. 60s)
    #[arg(long, default_value = "60s", value_name = "DURATION", value_parser = parse_duration)]
    #[serde(deserialize_with = "duration")]
    pub io_timeout: Duration,
    // Flattened into one list of keys when serialized; a sweep file's keys are read into each group apart
    // ([`RunArgs::from_texts`]).
    #[command(flatten)]
    #[serde(flatten, skip_deserializing)]
    pub verbs: VerbsArgs,
    #[command(flatten)]
    #[serde(flatten, skip_deserializing)]
    pub paged: PagedArgs,
}

impl RunArgs {
    /// The run's parameters from a sweep file's keys, each group of flags reading its own.
    pub fn from_texts(entries: &[(&str, &str)]) -> Result<RunArgs, TextError> {
        Ok(RunArgs { verbs: from_texts(entries)?, paged: from_texts(entries)?, ..from_texts(entries)? })
    }

    /// The knobs of every transport that has flags, as the flags (or a sweep file's case) set them; each transport
    /// checks its own.
    pub fn transport_knobs(&self) -> Vec<TransportConfig> {
        let v = &self.verbs;
        vec![
            TransportConfig::of(&VerbsConfig {
                qps: v.qps,
                batch: v.batch,
                inflight: v.inflight,
                signal_every: v.signal_every,
                mr_chunk: v.mr_chunk,
                dst_mr_chunk: v.dst_mr_chunk,
                reg_per_rep: v.reg_per_rep,
                cq_mode: v.cq_mode,
                ack_timeout: v.ack_timeout,
                max_sge: v.max_sge,
                relaxed_ordering: !v.no_relaxed_ordering,
                tclass: v.tclass,
                sl: v.sl,
                odp: v.odp,
                op: v.op,
            }),
            TransportConfig::of(&CudaConfig { copy: self.copy, staging: self.staging }),
            TransportConfig::of(&MooncakeConfig { protocol: self.mooncake_protocol, entries: self.mooncake_entries }),
            TransportConfig::of(&NixlConfig { backend: self.nixl_backend, op: self.nixl_op }),
        ]
    }
}

/// RDMA verbs knobs (`--transport verbs`).
#[derive(Args, Debug, Clone, Deserialize, Serialize)]
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
    #[arg(long, default_value = "poll", value_parser = named::<CqMode>())]
    pub cq_mode: CqMode,
    /// Local ACK timeout exponent: a lost packet is retransmitted after 4.096 µs × 2^N (14 ≈ 67 ms, as perftest)
    #[arg(long, default_value_t = 14, value_parser = parse_ack_timeout)]
    #[serde(deserialize_with = "ack_timeout")]
    pub ack_timeout: u8,
    /// Paged layout: gather up to N pieces whose destinations are back to back into one RDMA WRITE (an SGE list;
    /// 1 to 64, clamped to the device's max_sge; 1 posts one WRITE per piece)
    #[arg(long, default_value_t = 16, value_name = "N")]
    pub max_sge: u32,
    /// Register memory without IBV_ACCESS_RELAXED_ORDERING (set by default, as perftest and Mooncake do; a device
    /// without relaxed ordering ignores it)
    #[arg(long)]
    pub no_relaxed_ordering: bool,
    /// GRH traffic class of the queue pairs, 0 to 255 (DSCP and ECN bits on RoCE v2), as perftest --tclass
    /// [default: 0]
    #[arg(long, value_name = "N", value_parser = parse_tclass)]
    #[serde(deserialize_with = "some_tclass")]
    pub tclass: Option<u8>,
    /// Service level of the queue pairs, 0 to 15, as perftest -S [default: 0]
    #[arg(long, value_name = "N", value_parser = parse_sl)]
    #[serde(deserialize_with = "some_sl")]
    pub sl: Option<u8>,
    /// Register memory on-demand paged (ODP) and prefetch it with ibv_advise_mr; refused where the device has no
    /// ODP for RC, and for GPU memory
    #[arg(long)]
    pub odp: bool,
    /// write (the sender posts RDMA WRITEs into the receiver) or read (the receiver, the decode side, posts RDMA
    /// READs from the sender's buffer into its own, as vLLM's NixlConnector and Mooncake pull; the receiver times
    /// the READs)
    #[arg(long, default_value = "write", value_parser = named::<VerbsOp>())]
    pub op: VerbsOp,
}

/// KV-cache layout: one contiguous buffer, or paged blocks scattered over a pool as a serving engine keeps them.
#[derive(Args, Debug, Clone, Deserialize, Serialize)]
#[serde(default)]
#[command(next_help_heading = "KV layout")]
pub struct PagedArgs {
    /// contiguous (one buffer) or paged (per-layer K/V blocks of --block-tokens, scattered over a pool on each side;
    /// needs --tokens with --model or --model-config)
    #[arg(long, default_value = "contiguous", value_parser = named::<Layout>())]
    pub layout: Layout,
    /// Paged: tokens per block [default: 16]
    #[arg(long, value_name = "N", allow_hyphen_values = true, value_parser = parse_tokens)]
    #[serde(deserialize_with = "some_tokens")]
    pub block_tokens: Option<u64>,
    /// Paged: tokens each side's pool holds, k = 1024 [default: twice the largest transfer]
    #[arg(long, value_name = "N", allow_hyphen_values = true, value_parser = parse_tokens)]
    #[serde(deserialize_with = "some_tokens")]
    pub pool_tokens: Option<u64>,
    /// Paged: merge pieces adjacent on both sides into one write
    #[arg(long)]
    pub coalesce: bool,
    /// Paged: where the receiver's blocks go: random (slots permuted, like the source's) or sequential (block b in
    /// slot b, as in a fresh or defragmented pool; destinations then adjacent, which verbs gathers with SGE lists)
    /// [default: random]
    #[arg(long, value_name = "HOW", value_parser = named::<DstPlacement>())]
    pub dst_placement: Option<DstPlacement>,
    /// Test-only fault injection: the sender swaps the destinations of two pieces, so --verify must fail
    #[arg(long, hide = true)]
    pub test_fault_swap_dests: bool,
}

impl PagedArgs {
    /// The layout these flags ask for.
    pub fn options(&self) -> LayoutOptions {
        LayoutOptions {
            layout: self.layout,
            block_tokens: self.block_tokens,
            pool_tokens: self.pool_tokens,
            coalesce: self.coalesce,
            dst_placement: self.dst_placement,
            test_fault_swap_dests: self.test_fault_swap_dests,
        }
    }
}

/// Which RDMA device and port this end uses (`--transport verbs`).
#[derive(Args, Debug, Clone, Deserialize, Serialize)]
#[serde(default)]
#[command(next_help_heading = "RDMA device")]
pub struct DeviceArgs {
    /// RDMA device name, e.g. mlx5_0 or rxe0 (default: the first with an active port)
    #[arg(short = 'd', long = "device", value_name = "NAME")]
    pub device: Option<String>,
    /// Port of the device
    #[arg(long, default_value_t = 1)]
    pub ib_port: u8,
    /// GID index (default: like perftest, a RoCE v2 IPv4-mapped GID when there is one)
    #[arg(long, value_name = "N")]
    pub gid_index: Option<u32>,
}
