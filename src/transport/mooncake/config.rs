//! The mooncake transport's knobs: which of the engine's transports moves the bytes, and how writes become the
//! entries of its batch.

use crate::plan::{Knobs, TransportKind};
use crate::transport::api::OwnKnobs;
use crate::named::named_enum;
use serde::{Deserialize, Serialize};

named_enum! {
    /// `--mooncake-protocol`: which of Mooncake Transfer Engine's transports moves the bytes.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub enum MooncakeProtocol {
        // Its TCP transport.
        #[default]
        Tcp = "tcp",
        // Its RDMA transport (over the devices of -d).
        Rdma = "rdma",
        // Its intra-node NVLink transport (CUDA builds; GPU memory on both ends, copied by cudaMemcpy over CUDA IPC).
        NvlinkIntra = "nvlink-intra",
    }
}

named_enum! {
    /// `--mooncake-entries`: how a transfer's writes become the entries of the engine's batch.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub enum MooncakeEntries {
        // Runs of writes adjacent on both ends merged into one entry, as vLLM's connector groups blocks.
        #[default]
        Grouped = "grouped",
        // One entry per write, as Mooncake's transfer_engine_bench posts its blocks.
        PerWrite = "per-write",
    }
}

/// The mooncake transport's knobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct MooncakeConfig {
    pub protocol: MooncakeProtocol,
    pub entries: MooncakeEntries,
}

impl Knobs for MooncakeConfig {
    const KIND: TransportKind = TransportKind::Mooncake;
}

impl OwnKnobs for MooncakeConfig {}
