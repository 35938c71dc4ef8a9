//! Which transport moves the bytes, and its knobs, as the run configuration carries them to the receiver.
//!
//! These types sit in `plan` (not beside each transport under `transport/`) because [`super::RunConfig`] holds them
//! and `plan` is below `transport` in the layer order; `transport::{cuda, verbs}` re-export theirs. Each closed set
//! is one enum with one spelling, used by clap (`ValueEnum`), by serde (the wire config and results) and by sweep
//! files alike. Their variants carry plain comments: a doc comment would become a second description in `--help`.

use clap::ValueEnum;
use serde::{Deserialize, Serialize};
use std::fmt;

/// The name of a value as the command line, sweep files and JSON spell it.
pub fn value_name<E: ValueEnum>(value: &E) -> String {
    value.to_possible_value().expect("no variant is skipped").get_name().to_string()
}

/// `Display` as the value's command-line spelling.
macro_rules! display_as_value_name {
    ($($t:ty),*) => {$(
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&value_name(self))
            }
        }
    )*};
}

/// How bytes move (`--transport`; the command line's `auto` resolves to one of these before a run starts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TransportKind {
    Tcp,
    Verbs,
    Cuda,
    Mooncake,
    Nixl,
}

/// cuda transport `--copy`: how each write is copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CopyMode {
    // The copy engine for contiguous transfers, one SM kernel for transfers of many small pieces.
    #[default]
    Auto,
    // The copy engine, one cuMemcpyAsync per write.
    Ce,
    // Every write in one cuMemcpyBatchAsync call (driver 12.8 or newer, else ce).
    Batch,
    // The SM copy kernel (one launch for all pieces of a paged transfer).
    Sm,
}

/// cuda transport `--staging`: whether pieces are packed into a staging buffer first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Staging {
    // Copy each piece to its slot.
    #[default]
    None,
    // Pack → one contiguous copy → unpack (GPU on both ends).
    Gather,
}

/// verbs `--cq-mode`: how completions are waited for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CqMode {
    // Busy-poll the completion queue.
    #[default]
    Poll,
    // Sleep on a completion channel.
    Event,
}

/// mooncake `--mooncake-protocol`: which of Mooncake Transfer Engine's transports moves the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MooncakeProtocol {
    // Its TCP transport.
    #[default]
    Tcp,
    // Its RDMA transport (over the devices of -d).
    Rdma,
    // Its intra-node NVLink transport (CUDA builds; GPU memory on both ends, copied by cudaMemcpy over CUDA IPC).
    #[value(name = "nvlink-intra")]
    #[serde(rename = "nvlink-intra")]
    NvlinkIntra,
}

/// mooncake `--mooncake-entries`: how a transfer's writes become the entries of the engine's batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MooncakeEntries {
    // Runs of writes adjacent on both ends merged into one entry, as vLLM's connector groups blocks.
    #[default]
    Grouped,
    // One entry per write, as Mooncake's transfer_engine_bench posts its blocks.
    PerWrite,
}

/// nixl `--nixl-backend`: the NIXL plugin that moves the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NixlBackend {
    // UCX (shared memory, TCP, RDMA verbs, cuda_ipc: whatever UCX finds between the two agents).
    #[default]
    Ucx,
    // libfabric (needs libfabric 1.10 or newer on the host; EFA and its other providers).
    Libfabric,
}

/// nixl `--nixl-op`: which side posts the transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NixlOp {
    // The sender (prefill side) WRITEs into the receiver's buffer.
    #[default]
    Write,
    // The receiver (decode side) READs from the sender's buffer with prepped descriptor lists, notifying the
    // sender when done, as vLLM's NixlConnector does; the receiver times it.
    Read,
}

display_as_value_name!(
    TransportKind,
    CopyMode,
    Staging,
    CqMode,
    MooncakeProtocol,
    MooncakeEntries,
    NixlBackend,
    NixlOp
);

/// Which transport a run uses, with that transport's own knobs (the general ones, such as `streams` and
/// `block_size`, are [`super::RunConfig`]'s). Adding a transport adds one arm here.
#[derive(Debug, Clone, PartialEq)]
pub enum TransportConfig {
    Tcp(TcpConfig),
    Verbs(VerbsConfig),
    Cuda(CudaConfig),
    Mooncake(MooncakeConfig),
    Nixl(NixlConfig),
}

/// Every transport's knobs at once, as the command line and the wire configuration hold them (each transport's at
/// its defaults unless set).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AllKnobs {
    pub cuda: CudaConfig,
    pub verbs: VerbsConfig,
    pub mooncake: MooncakeConfig,
    pub nixl: NixlConfig,
}

impl TransportConfig {
    /// Transport `kind` with its own knobs taken from `all`.
    pub fn select(kind: TransportKind, all: AllKnobs) -> TransportConfig {
        match kind {
            TransportKind::Tcp => TransportConfig::Tcp(TcpConfig {}),
            TransportKind::Verbs => TransportConfig::Verbs(all.verbs),
            TransportKind::Cuda => TransportConfig::Cuda(all.cuda),
            TransportKind::Mooncake => TransportConfig::Mooncake(all.mooncake),
            TransportKind::Nixl => TransportConfig::Nixl(all.nixl),
        }
    }

    /// Every transport's knobs: this one's, the others' at their defaults.
    pub fn all_knobs(&self) -> AllKnobs {
        let mut all = AllKnobs::default();
        match self {
            TransportConfig::Tcp(TcpConfig {}) => {}
            TransportConfig::Verbs(v) => all.verbs = v.clone(),
            TransportConfig::Cuda(c) => all.cuda = *c,
            TransportConfig::Mooncake(m) => all.mooncake = *m,
            TransportConfig::Nixl(n) => all.nixl = *n,
        }
        all
    }

    pub fn kind(&self) -> TransportKind {
        match self {
            TransportConfig::Tcp(_) => TransportKind::Tcp,
            TransportConfig::Verbs(_) => TransportKind::Verbs,
            TransportConfig::Cuda(_) => TransportKind::Cuda,
            TransportConfig::Mooncake(_) => TransportKind::Mooncake,
            TransportConfig::Nixl(_) => TransportKind::Nixl,
        }
    }

    /// The verbs knobs, when the transport is verbs.
    pub fn verbs(&self) -> Option<&VerbsConfig> {
        match self {
            TransportConfig::Verbs(v) => Some(v),
            _ => None,
        }
    }
}

/// TCP has no knobs of its own (streams and block size are every transport's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TcpConfig {}

/// The nixl transport's knobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct NixlConfig {
    pub backend: NixlBackend,
    pub op: NixlOp,
}

/// The mooncake transport's knobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct MooncakeConfig {
    pub protocol: MooncakeProtocol,
    pub entries: MooncakeEntries,
}

/// The cuda transport's knobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CudaConfig {
    pub copy: CopyMode,
    pub staging: Staging,
}

/// How the verbs transport posts work: queue pairs, batching, depth, signaling, memory registration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VerbsConfig {
    pub qps: u32,
    /// Work requests linked into one post.
    pub batch: u32,
    /// Outstanding work requests per queue pair (send queue depth).
    pub inflight: u32,
    /// Signal every Nth work request (and always the last).
    pub signal_every: u32,
    /// Register memory in pieces of at most this many bytes (None: the device's max_mr_size, at most 2 GiB).
    pub mr_chunk: Option<u64>,
    /// The receiver's pieces, when they differ from `mr_chunk` (the destination-MR axis of sweeps/mr-cliff.toml).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst_mr_chunk: Option<u64>,
    /// Register the sender's memory inside every rep (as an on-demand KV connector would) and time it.
    pub reg_per_rep: bool,
    pub cq_mode: CqMode,
    /// Local ACK timeout exponent (4.096 µs × 2^N) of the queue pairs.
    #[serde(default = "default_ack_timeout")]
    pub ack_timeout: u8,
    /// Most scatter entries per RDMA WRITE when gathering paged pieces whose destinations are back to back (1: one
    /// WRITE per piece); clamped to the device's max_sge.
    #[serde(default = "default_max_sge")]
    pub max_sge: u32,
}

fn default_ack_timeout() -> u8 {
    14
}

fn default_max_sge() -> u32 {
    16
}

impl Default for VerbsConfig {
    /// The CLI's defaults.
    fn default() -> Self {
        VerbsConfig {
            qps: 4,
            batch: 16,
            inflight: 128,
            signal_every: 16,
            mr_chunk: None,
            dst_mr_chunk: None,
            reg_per_rep: false,
            cq_mode: CqMode::Poll,
            ack_timeout: default_ack_timeout(),
            max_sge: default_max_sge(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_spelling_on_the_command_line_and_in_json() {
        fn same<E: ValueEnum + Serialize + fmt::Display>() {
            for v in E::value_variants() {
                let json = serde_json::to_value(v).unwrap();
                assert_eq!(json.as_str(), Some(value_name(v).as_str()));
                assert_eq!(v.to_string(), value_name(v));
            }
        }
        same::<TransportKind>();
        same::<CopyMode>();
        same::<Staging>();
        same::<CqMode>();
        same::<MooncakeProtocol>();
        same::<MooncakeEntries>();
        same::<NixlBackend>();
        same::<NixlOp>();
        let names: Vec<String> = CopyMode::value_variants().iter().map(value_name).collect();
        assert_eq!(names, ["auto", "ce", "batch", "sm"]);
    }

    #[test]
    fn a_transport_keeps_only_its_own_knobs() {
        let all = AllKnobs {
            cuda: CudaConfig { copy: CopyMode::Sm, staging: Staging::Gather },
            verbs: VerbsConfig { qps: 2, cq_mode: CqMode::Event, ..VerbsConfig::default() },
            mooncake: MooncakeConfig { protocol: MooncakeProtocol::Rdma, entries: MooncakeEntries::PerWrite },
            nixl: NixlConfig { backend: NixlBackend::Libfabric, op: NixlOp::Read },
        };
        for &kind in TransportKind::value_variants() {
            let cfg = TransportConfig::select(kind, all.clone());
            assert_eq!(cfg.kind(), kind);
            assert_eq!(TransportConfig::select(kind, cfg.all_knobs()), cfg, "{kind}");
        }
        let tcp = TransportConfig::select(TransportKind::Tcp, all.clone()).all_knobs();
        assert_eq!(tcp, AllKnobs::default(), "another transport's knobs are not tcp's");
        assert_eq!(TransportConfig::select(TransportKind::Verbs, all).verbs().map(|v| v.qps), Some(2));
    }
}
