//! The receiver limits the fuzz targets check runs against: a serve with `--max-size 1GiB`, 64 streams, host memory.
#![allow(dead_code)] // each target uses part of this

use kvxfer::control::Timeouts;
use kvxfer::run::receiver::ReceiverLimits;
use std::time::Duration;

/// The most a run may hold in one buffer under [`serve_limits`].
pub const MAX_SIZE: u64 = 1 << 30;

pub fn serve_limits() -> ReceiverLimits {
    ReceiverLimits {
        max_size: Some(MAX_SIZE),
        max_streams: 64,
        timeouts: Timeouts { connect: Duration::from_secs(1), io: Duration::from_secs(1) },
        mem: kvxfer::mem::MemKind::Host,
        device: Default::default(),
        shares_process: false,
        gauge: None,
    }
}
