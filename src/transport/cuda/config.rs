//! The cuda transport's knobs: `--copy` and `--staging`, and the rule that staging needs this transport and GPU
//! memory at the source.

use crate::mem::MemKind;
use crate::plan::{Knobs, TransportKind};
use crate::transport::api::{OwnKnobs, ResultsKnobs};
use anyhow::Result;
use crate::named::named_enum;
use serde::{Deserialize, Serialize};

named_enum! {
    /// `--copy`: how each write is copied.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub enum CopyMode {
        // The copy engine for contiguous transfers, one SM kernel for transfers of many small pieces.
        #[default]
        Auto = "auto",
        // The copy engine, one cuMemcpyAsync per write.
        Ce = "ce",
        // Every write in one cuMemcpyBatchAsync call (driver 12.8 or newer, else ce).
        Batch = "batch",
        // The SM copy kernel (one launch for all pieces of a paged transfer).
        Sm = "sm",
    }
}

named_enum! {
    /// `--staging`: whether pieces are packed into a staging buffer first.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub enum Staging {
        // Copy each piece to its slot.
        #[default]
        None = "none",
        // Pack → one contiguous copy → unpack (GPU on both ends).
        Gather = "gather",
    }
}

/// The cuda transport's knobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CudaConfig {
    pub copy: CopyMode,
    pub staging: Staging,
}

impl Knobs for CudaConfig {
    const KIND: TransportKind = TransportKind::Cuda;
}

impl OwnKnobs for CudaConfig {
    /// `--staging gather` packs with GPU kernels: refused with any other transport (`running`) or from host memory.
    fn check_flags(&self, running: TransportKind, src: MemKind) -> Result<()> {
        if self.staging == Staging::Gather && (running != TransportKind::Cuda || !matches!(src, MemKind::Gpu(_))) {
            crate::bail_usage!(
                "--staging gather packs pieces with GPU kernels: it needs --transport cuda and GPU memory on both ends (--src gpu:N / --mem gpu:N), not --transport {running} from {src} memory"
            );
        }
        Ok(())
    }

    /// Results v1 keeps `--copy` and `--staging` at the top of `config`.
    fn results_knobs(&self) -> ResultsKnobs {
        ResultsKnobs { copy: self.copy.to_string(), staging: self.staging.to_string(), verbs: None }
    }
}
