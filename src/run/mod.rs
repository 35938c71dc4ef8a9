//! Running a plan: the sender drives reps over the control channel, the receiver answers, both record stage times.

pub mod bidir;
pub mod latency;
pub mod pace;
pub mod peer_check;
pub mod prepare;
pub mod receiver;
pub mod replay;
pub mod sender;
pub mod serve_check;

use crate::control::RepReport;
use crate::measure::{Fields, Warning};
use crate::observe::counters::{Deltas, RepCounters, Side, Uses};
use crate::plan::{RunConfig, SizeCase, TransportKind};
use crate::transport::{registry, Context};
use serde::{Deserialize, Serialize};

/// The counters one end reads around its reps, for what `cfg`'s transport uses there.
fn rep_counters(side: Side, cfg: &RunConfig, ctx: &Context, mem: crate::mem::MemKind) -> RepCounters {
    let rdma = drives_rdma(cfg);
    let names: &[String] = if rdma { &ctx.device.names } else { &[] };
    let uses = Uses {
        rdma: names,
        ib_port: ctx.device.ib_port,
        rdma_auto: rdma,
        local_ip: Some(ctx.local_ip),
        shares_process: ctx.shares_process,
        gpu: match mem {
            crate::mem::MemKind::Gpu(n) => Some(n),
            _ => None,
        },
    };
    RepCounters::discover(side, cfg.knobs.counters, &uses)
}

/// Whether `cfg`'s transport drives an RDMA NIC from this end.
fn drives_rdma(cfg: &RunConfig) -> bool {
    registry::get(cfg.transport.kind()).drives_rdma(&cfg.transport)
}

/// Bind this end's thread as `--numa` says (before it allocates anything), following its NIC or GPU.
fn place_numa(
    cfg: &RunConfig,
    ctx: &Context,
    mem: crate::mem::MemKind,
    peer_mem: &str,
) -> anyhow::Result<crate::observe::numa::NumaPlacement> {
    let follow = crate::observe::numa::Follow::pick(drives_rdma(cfg), &ctx.device.names, mem, peer_mem.parse().ok());
    crate::observe::numa::place(cfg.knobs.numa, follow)
}

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
    /// Counters that moved during the rep, both ends, by source (`sender rdma mlx5_0:1`, `receiver process`...)
    /// then name; absent with `--counters off` or from older files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counters: Option<Deltas>,
    /// Other senders' runs the receiver served while this rep moved (`serve --max-sessions`): the rep shared the
    /// receiver's NIC and memory, and its counters. Absent when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_runs: Option<u32>,
    /// A bidirectional rep (`--bidir`): the reverse transfer and both at once. Absent for one-way reps.
    #[serde(default, flatten, skip_serializing_if = "Option::is_none")]
    pub bidir: Option<bidir::BidirRep>,
    /// What the transport measured besides the times (`reg_ms`, `work_requests`, `staged`...: keys of the rep,
    /// the transport's own, carried in the order it wrote them).
    #[serde(flatten)]
    pub extras: Fields,
    #[serde(skip)]
    pub sender: StageTimes,
    #[serde(skip)]
    pub receiver: RepReport,
}

impl RepRecord {
    /// When the sender knew the rep's last byte had landed, ms on its stage clock: its last completion, or, for a
    /// rep the receiver pulled (it timed the transfer), the receiver's RepDone: this end posted nothing to see.
    pub fn landed_ms(&self) -> f64 {
        match self.receiver.transfer_ms {
            Some(_) => self.sender.t_done_ms,
            None => self.sender.t_last_complete_ms,
        }
    }
}

/// Everything measured for one size.
pub struct CaseRecord {
    pub index: usize,
    pub case: SizeCase,
    /// The transport that moved it, which summarizes its reps' extras.
    pub transport: TransportKind,
    /// The block size actually used (the requested one clamped to the transfer size).
    pub block_size: u64,
    pub block_clamped: bool,
    pub writes: usize,
    /// `contiguous` or `paged`.
    pub layout: crate::plan::paged::Layout,
    /// Pieces of the transfer (paged: one per layer, region and block; contiguous: the blocks).
    pub pieces: usize,
    pub reps: Vec<RepRecord>,
    pub warmups: Vec<RepRecord>,
    /// Per-block completion latency (µs from the start of the transfer's posting), measured reps only.
    pub block_latency_us: hdrhistogram::Histogram<u64>,
    /// A case measured for a time (`--duration`): its intervals and what it folded.
    pub paced: Option<pace::Paced>,
}

impl CaseRecord {
    /// The case's extras, summarized by its transport from the measured reps', and the warnings they call for.
    pub fn transport_extras(&self) -> (Fields, Vec<Warning>) {
        let reps: Vec<&Fields> = self.reps.iter().map(|r| &r.extras).collect();
        registry::get(self.transport).summarize(&reps)
    }
}

/// Where the sender reports as it goes: live rows, progress, and files written as cases complete.
pub trait RunSink {
    fn rep_done(&mut self, case: &CaseRecord, rep: &RepRecord, warmup: bool);
    fn case_done(&mut self, case: &CaseRecord) -> anyhow::Result<()>;
    /// A paced case closed an interval: `recorded` with `--interval`, else a progress row only.
    fn interval(&mut self, _case: &CaseRecord, _row: &pace::IntervalRow, _recorded: bool) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reps_transport_extras_keep_their_keys() {
        let text = r#"{"i":0,"transfer_ms":2.0,"gbps":1.0,"setup_ms":0.1,"notify_ms":0.2,"total_ms":2.5,"reg_ms":0.5,"work_requests":7,"staged":{"gather_ms":0.5,"copy_ms":1.0,"scatter_ms":0.5}}"#;
        let rep: RepRecord = serde_json::from_str(text).unwrap();
        let keys: Vec<&str> = rep.extras.keys().collect();
        assert_eq!(keys, ["reg_ms", "work_requests", "staged"]);
        assert_eq!(serde_json::to_string(&rep).unwrap(), text);
        let plain = r#"{"i":1,"transfer_ms":2.0,"gbps":1.0,"setup_ms":0.1,"notify_ms":0.2,"total_ms":2.5}"#;
        let rep: RepRecord = serde_json::from_str(plain).unwrap();
        assert!(rep.extras.is_empty());
        assert_eq!(serde_json::to_string(&rep).unwrap(), plain);
    }
}
