//! `kvxfer latency`'s flags.

use super::params::{parse_ack_timeout, parse_sl, parse_tclass};
use super::{named, parse_duration, DeviceArgs};
use crate::mem::MemKind;
use crate::plan::latency::{DEFAULT_ITERS, DEFAULT_SIZES, DEFAULT_WARMUP_ITERS};
use crate::plan::{TransportConfig, TransportKind};
use crate::transport::verbs::VerbsConfig;
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct LatencyArgs {
    /// How messages move: a transport with a ping-pong (tcp, verbs; cuda: host ↔ a kernel on one GPU, or GPU ↔ GPU
    /// with --src gpu:N)
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
    /// RDMA writes of N bytes or fewer go inline (verbs; default: the most the device's queue pair takes)
    #[arg(long, value_name = "N")]
    pub inline: Option<u32>,
    /// Where each message starts: host (default), or gpu:N with --transport cuda, for GPU ↔ GPU: the message is a
    /// copy-engine copy into --dst's GPU and the answer one back
    #[arg(long, value_name = "KIND")]
    pub src: Option<MemKind>,
    /// Where the responder answers from: host, or gpu:N with --transport cuda (its default: gpu:0), whose memory
    /// each message lands in
    #[arg(long, value_name = "KIND")]
    pub dst: Option<MemKind>,
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
    /// Write one self-contained HTML page here at the end: warnings, the run's identity, its figures, the sizes
    #[arg(long, value_name = "PAGE")]
    pub html: Option<PathBuf>,
    /// Name of this run in tables and figures
    #[arg(long, value_name = "TEXT")]
    pub label: Option<String>,
    /// Keep trying to reach the receiver this long
    #[arg(long, default_value = "60s", value_name = "DURATION", value_parser = parse_duration)]
    pub connect_timeout: Duration,
    /// Give up when the peer is silent this long
    #[arg(long, default_value = "60s", value_name = "DURATION", value_parser = parse_duration)]
    pub io_timeout: Duration,
    /// GRH traffic class of the queue pair, 0 to 255 (DSCP and ECN bits on RoCE v2), as perftest --tclass
    /// [default: 0]
    #[arg(long, value_name = "N", value_parser = parse_tclass, help_heading = "RDMA verbs (--transport verbs)")]
    pub tclass: Option<u8>,
    /// Send each message as an RDMA WRITE with immediate and wait for its receive completion instead of polling the
    /// message's last byte, as perftest --write_with_imm
    #[arg(long, help_heading = "RDMA verbs (--transport verbs)")]
    pub write_with_imm: bool,
    /// Service level of the queue pair, 0 to 15, as perftest -S [default: 0]
    #[arg(long, value_name = "N", value_parser = parse_sl, help_heading = "RDMA verbs (--transport verbs)")]
    pub sl: Option<u8>,
    /// Local ACK timeout exponent: a lost packet is retransmitted after 4.096 µs × 2^N (14 ≈ 67 ms, as perftest)
    #[arg(long, default_value_t = 14, value_parser = parse_ack_timeout, help_heading = "RDMA verbs (--transport verbs)")]
    pub ack_timeout: u8,
    /// The receiver's RDMA device without --peer (default: the sender's, i.e. loopback through one NIC)
    #[arg(long, value_name = "NAME", help_heading = "RDMA device")]
    pub peer_device: Option<String>,
    #[command(flatten)]
    pub device: DeviceArgs,
}

impl LatencyArgs {
    /// The knobs of the transports whose flags latency takes, as the flags set them (verbs: one queue pair).
    pub fn transport_knobs(&self) -> Vec<TransportConfig> {
        let verbs = VerbsConfig {
            qps: 1,
            tclass: self.tclass,
            sl: self.sl,
            ack_timeout: self.ack_timeout,
            ..VerbsConfig::default()
        };
        vec![TransportConfig::of(&verbs)]
    }
}
