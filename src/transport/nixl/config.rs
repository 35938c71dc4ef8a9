//! The nixl transport's knobs: which NIXL plugin moves the bytes, and which side posts the transfer.

use crate::plan::{Knobs, TransportKind};
use crate::transport::api::OwnKnobs;
use crate::named::named_enum;
use serde::{Deserialize, Serialize};

named_enum! {
    /// `--nixl-backend`: the NIXL plugin that moves the bytes.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub enum NixlBackend {
        // UCX (shared memory, TCP, RDMA verbs, cuda_ipc: whatever UCX finds between the two agents).
        #[default]
        Ucx = "ucx",
        // libfabric (needs libfabric 1.10 or newer on the host; EFA and its other providers).
        Libfabric = "libfabric",
    }
}

named_enum! {
    /// `--nixl-op`: which side posts the transfer.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub enum NixlOp {
        // The sender (prefill side) WRITEs into the receiver's buffer.
        #[default]
        Write = "write",
        // The receiver (decode side) READs from the sender's buffer with prepped descriptor lists, notifying the
        // sender when done, as vLLM's NixlConnector does; the receiver times it.
        Read = "read",
    }
}

/// The nixl transport's knobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct NixlConfig {
    pub backend: NixlBackend,
    pub op: NixlOp,
}

impl Knobs for NixlConfig {
    const KIND: TransportKind = TransportKind::Nixl;
}

impl OwnKnobs for NixlConfig {}
