//! `kvxfer latency`'s flags.

use super::{named, parse_duration};
use crate::plan::latency::{DEFAULT_ITERS, DEFAULT_SIZES, DEFAULT_WARMUP_ITERS};
use crate::plan::TransportKind;
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct LatencyArgs {
    /// How messages move: a transport with a ping-pong (tcp)
    #[arg(long, default_value = "tcp", value_parser = named::<TransportKind>())]
    pub transport: TransportKind,
    /// Message sizes: a list and/or ranges (8..1MiB doubles from 8 B to 1 MiB; 8..1MiB:x4 quadruples)
    #[arg(long, default_value = DEFAULT_SIZES, value_name = "LIST")]
    pub sizes: String,
    /// Timed ping-pongs per size
    #[arg(long, default_value_t = DEFAULT_ITERS, value_name = "N")]
    pub iters: u32,
    /// Untimed ping-pongs per size before the timed ones
    #[arg(long, default_value_t = DEFAULT_WARMUP_ITERS, value_name = "N")]
    pub warmup_iters: u32,
    /// Wait for each message by polling a non-blocking socket rather than sleeping in the kernel (tcp; as sockperf's
    /// busy-poll modes)
    #[arg(long)]
    pub busy_poll: bool,
    /// RDMA writes of N bytes or fewer go inline (verbs; default: the queue pair's limit)
    #[arg(long, value_name = "N")]
    pub inline: Option<u32>,
    /// Measure against a receiver (`kvxfer serve`) instead of one started in this process on loopback
    #[arg(long, value_name = "HOST:PORT")]
    pub peer: Option<String>,
    /// The receiver's token (with --peer)
    #[arg(long, env = "KVXFER_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Write the results file here
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Write figures here (PNG and SVG; created if its parent exists): latency vs size, and each size's latency CDF
    #[arg(long, value_name = "DIR")]
    pub fig: Option<PathBuf>,
    /// Name of this run in tables and figures
    #[arg(long, value_name = "TEXT")]
    pub label: Option<String>,
    /// Keep trying to reach the receiver this long
    #[arg(long, default_value = "60s", value_name = "DURATION", value_parser = parse_duration)]
    pub connect_timeout: Duration,
    /// Give up when the peer is silent this long
    #[arg(long, default_value = "60s", value_name = "DURATION", value_parser = parse_duration)]
    pub io_timeout: Duration,
}
