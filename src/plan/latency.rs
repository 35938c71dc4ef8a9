//! A latency run (`kvxfer latency`): ping-pong exchanges per size, as `ib_write_lat` and `sockperf ping-pong` time
//! them. Both ends read this plan: the initiator from its flags, the responder from the control channel.

use serde::{Deserialize, Serialize};

/// Iterations per size when `--iters` is not given.
pub const DEFAULT_ITERS: u32 = 1000;
/// Warm-up exchanges per size, untimed, when `--warmup-iters` is not given.
pub const DEFAULT_WARMUP_ITERS: u32 = 100;
/// Sizes when `--sizes` is not given: 8 B to 1 MiB, doubling.
pub const DEFAULT_SIZES: &str = "8..1MiB";

/// The largest message a ping-pong takes: latency is measured on small messages, and each end holds a buffer of the
/// largest size asked.
pub const MAX_MESSAGE: u64 = 1 << 30;

/// What each size's ping-pong does, and how each end waits for a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LatencyPlan {
    /// Timed exchanges per size.
    pub iters: u32,
    /// Untimed exchanges before them.
    pub warmup_iters: u32,
    /// Wait for a message by polling a non-blocking socket instead of sleeping in the kernel (tcp).
    pub busy_poll: bool,
    /// RDMA writes this small or smaller go inline (verbs); `None`: the queue pair's own limit.
    pub inline: Option<u32>,
    /// Each message is an RDMA WRITE with immediate, and the other end learns of it from the receive completion
    /// instead of polling the message's last byte (verbs). Absent from an older client's plan: polling.
    #[serde(default)]
    pub write_with_imm: bool,
    /// The GPU whose memory each message starts in (`--src gpu:N`); `None`: host memory. Absent from an older
    /// client's plan: host.
    #[serde(default)]
    pub src_gpu: Option<u32>,
}

impl LatencyPlan {
    /// Exchanges per size, warm-up included.
    pub fn exchanges(&self) -> u64 {
        u64::from(self.iters) + u64::from(self.warmup_iters)
    }
}
