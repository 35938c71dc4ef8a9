//! Running a plan: the sender drives reps over the control channel, the receiver answers, both record stage times.

pub mod receiver;
pub mod sender;

use crate::control::RepReport;
use crate::plan::SizeCase;
use serde::{Deserialize, Serialize};

/// Sender-clock stage timestamps of one rep, in ms since the sender's run start.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct StageTimes {
    pub t_setup_start_ms: f64,
    pub t_ready_ms: f64,
    pub t_first_post_ms: f64,
    pub t_last_complete_ms: f64,
    pub t_done_ms: f64,
}

/// One measured (or warm-up) rep.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RepRecord {
    pub i: u32,
    /// Sender: first byte posted → last byte acknowledged/completed.
    pub transfer_ms: f64,
    pub gbps: f64,
    /// Sender: the control round trip that starts the rep.
    pub setup_ms: f64,
    /// Receiver: start of rep → it knew every byte had landed (its own clock).
    pub notify_ms: f64,
    /// Sender: start of setup → the receiver's done report arrived.
    pub total_ms: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mismatched_bytes: Option<u64>,
    /// Memory registration inside this rep (verbs `--reg-per-rep`), part of `transfer_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reg_ms: Option<f64>,
    /// Work requests posted when that differs from the writes (verbs SGE gathering).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work_requests: Option<u64>,
    /// `--staging gather`: gather, copy and scatter times, which add up to `transfer_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staged: Option<crate::transport::StagedMs>,
    #[serde(skip)]
    pub sender: StageTimes,
    #[serde(skip)]
    pub receiver: RepReport,
}

/// Everything measured for one size.
pub struct CaseRecord {
    pub index: usize,
    pub case: SizeCase,
    /// The block size actually used (the requested one clamped to the transfer size).
    pub block_size: u64,
    pub block_clamped: bool,
    pub writes: usize,
    /// `contiguous` or `paged`.
    pub layout: &'static str,
    /// Pieces of the transfer (paged: one per layer, region and block; contiguous: the blocks).
    pub pieces: usize,
    pub reps: Vec<RepRecord>,
    pub warmups: Vec<RepRecord>,
    /// Per-block completion latency (µs from the start of the transfer's posting), measured reps only.
    pub block_latency_us: hdrhistogram::Histogram<u64>,
}

/// Where the sender reports as it goes: live rows, progress, and files written as cases complete.
pub trait RunSink {
    fn rep_done(&mut self, case: &CaseRecord, rep: &RepRecord, warmup: bool);
    fn case_done(&mut self, case: &CaseRecord) -> anyhow::Result<()>;
}
