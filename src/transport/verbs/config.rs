//! The verbs transport's knobs: queue pairs, batching, depth, signaling, memory registration, and their limits.

use crate::bail_usage;
use crate::mem::MemKind;
use crate::measure::Fields;
use crate::plan::{Knobs, TransportKind};
use crate::transport::api::{OwnKnobs, ResultsKnobs};
use anyhow::Result;
use crate::named::named_enum;
use serde::{Deserialize, Serialize};

named_enum! {
    /// `--cq-mode`: how completions are waited for.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub enum CqMode {
        // Busy-poll the completion queue.
        #[default]
        Poll = "poll",
        // Sleep on a completion channel.
        Event = "event",
    }
}

named_enum! {
    /// `--op`: which end posts the RDMA work requests.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub enum VerbsOp {
        // The sender (prefill side) posts RDMA WRITEs into the receiver's region.
        #[default]
        Write = "write",
        // The receiver (decode side) posts RDMA READs from the sender's buffer into its own, and times them.
        Read = "read",
    }
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
    pub ack_timeout: u8,
    /// Most scatter entries per RDMA WRITE when gathering paged pieces whose destinations are back to back (1: one
    /// WRITE per piece); clamped to the device's max_sge.
    pub max_sge: u32,
    /// Register memory with IBV_ACCESS_RELAXED_ORDERING (`--no-relaxed-ordering` clears it). Written only when off,
    /// so a default run's configuration reads as it always did; `transport_detail` records it either way.
    #[serde(default = "on", skip_serializing_if = "is_on")]
    pub relaxed_ordering: bool,
    /// `--tclass`: the GRH traffic class of the queue pairs (DSCP and ECN on RoCE v2); None: 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tclass: Option<u8>,
    /// `--sl`: the service level of the queue pairs' address vector (0 to 15); None: 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sl: Option<u8>,
    /// `--odp`: register on-demand paged memory and prefetch it with ibv_advise_mr.
    #[serde(default, skip_serializing_if = "is_off")]
    pub odp: bool,
    /// `--op`: the sender WRITEs, or the receiver READs. Written only when read, so a write run's configuration
    /// reads as it always did.
    #[serde(default, skip_serializing_if = "is_write")]
    pub op: VerbsOp,
}

fn is_write(op: &VerbsOp) -> bool {
    *op == VerbsOp::Write
}

fn on() -> bool {
    true
}

fn is_on(b: &bool) -> bool {
    *b
}

fn is_off(b: &bool) -> bool {
    !*b
}

impl Knobs for VerbsConfig {
    const KIND: TransportKind = TransportKind::Verbs;
}

impl Default for VerbsConfig {
    /// The command line's defaults.
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
            ack_timeout: 14,
            max_sge: 16,
            relaxed_ordering: true,
            tclass: None,
            sl: None,
            odp: false,
            op: VerbsOp::Write,
        }
    }
}

impl OwnKnobs for VerbsConfig {
    /// Refuse knobs outside what a queue pair takes, naming the flag that sets each.
    fn check(&self) -> Result<()> {
        if self.qps == 0 || self.qps > 256 {
            bail_usage!("--qps {}: give 1 to 256 queue pairs", self.qps);
        }
        if self.inflight == 0 || self.inflight > 16384 {
            bail_usage!("--inflight {}: give 1 to 16384 outstanding work requests per queue pair", self.inflight);
        }
        if self.batch == 0 || self.batch > self.inflight {
            bail_usage!("--batch {}: give 1 to --inflight ({}) work requests per post", self.batch, self.inflight);
        }
        if self.signal_every == 0 || self.signal_every > self.inflight {
            bail_usage!("--signal-every {}: give 1 to --inflight ({})", self.signal_every, self.inflight);
        }
        if self.max_sge == 0 || self.max_sge > 64 {
            bail_usage!(
                "--max-sge {}: give 1 to 64 scatter entries per work request (1 turns gathering off)",
                self.max_sge
            );
        }
        if !(1..=31).contains(&self.ack_timeout) {
            bail_usage!("--ack-timeout {}: give 1 to 31 (the verbs attribute has five bits)", self.ack_timeout);
        }
        if let Some(sl) = self.sl.filter(|&sl| sl > 15) {
            bail_usage!("--sl {sl}: give a service level of 0 to 15");
        }
        if self.op == VerbsOp::Read {
            // The reader needs the sender's keys before the rep starts; ODP faults on a READ's responder are
            // another device capability than the WRITE one `--odp` checks.
            if self.reg_per_rep {
                bail_usage!("--reg-per-rep registers the sender's memory inside each rep, which --op read cannot (the receiver reads with keys it got when connecting): drop one");
            }
            if self.odp {
                bail_usage!("--odp is measured for RDMA WRITEs only: drop --odp or use --op write");
            }
        }
        Ok(())
    }

    /// Refuse this transport's path and memory flags for a run that is not verbs (they would be silently ignored),
    /// and `--odp` from GPU memory (on-demand paging pages host memory only).
    fn check_flags(&self, running: TransportKind, src: MemKind) -> Result<()> {
        let given = [
            (self.tclass.is_some(), "--tclass"),
            (self.sl.is_some(), "--sl"),
            (self.odp, "--odp"),
            (!self.relaxed_ordering, "--no-relaxed-ordering"),
        ];
        if running != TransportKind::Verbs {
            if self.op == VerbsOp::Read {
                bail_usage!(
                    "--op read has the receiver post RDMA READs: it needs --transport verbs, not --transport {running} (nixl reads with --nixl-op read)"
                );
            }
            if let Some((_, flag)) = given.iter().find(|(set, _)| *set) {
                bail_usage!(
                    "{flag} sets the RDMA verbs queue pairs or registrations: it needs --transport verbs, not --transport {running}"
                );
            }
        }
        if self.odp && matches!(src, MemKind::Gpu(_)) {
            bail_usage!(
                "--odp pages host memory on demand; GPU memory ({src}) cannot be: drop --odp or use host memory"
            );
        }
        Ok(())
    }

    /// Results v1 keeps every verbs knob in `config.verbs`.
    fn results_knobs(&self) -> ResultsKnobs {
        ResultsKnobs { verbs: Fields::of(self).ok(), ..ResultsKnobs::default() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::TransportConfig;

    #[test]
    fn its_knobs_travel_in_their_order_and_limits_name_their_flags() {
        let cfg = TransportConfig::of(&VerbsConfig::default());
        let json = r#"{"name":"verbs","knobs":{"qps":4,"batch":16,"inflight":128,"signal_every":16,"mr_chunk":null,"reg_per_rep":false,"cq_mode":"poll","ack_timeout":14,"max_sge":16}}"#;
        assert_eq!(serde_json::to_string(&cfg).unwrap(), json);
        assert_eq!(
            serde_json::from_str::<TransportConfig>(json).unwrap().knobs::<VerbsConfig>().unwrap(),
            VerbsConfig::default()
        );
        VerbsConfig::default().check().unwrap();
        let bad = |v: VerbsConfig| v.check().unwrap_err().to_string();
        assert_eq!(bad(VerbsConfig { qps: 0, ..VerbsConfig::default() }), "--qps 0: give 1 to 256 queue pairs");
        assert!(bad(VerbsConfig { batch: 200, ..VerbsConfig::default() })
            .starts_with("--batch 200: give 1 to --inflight (128)"));
        assert!(bad(VerbsConfig { max_sge: 65, ..VerbsConfig::default() }).starts_with("--max-sge 65"));
        let sl = bad(VerbsConfig { sl: Some(16), ..VerbsConfig::default() });
        assert_eq!(sl, "--sl 16: give a service level of 0 to 15");
    }

    #[test]
    fn path_and_memory_knobs_are_written_only_when_set_and_read_back() {
        let v =
            VerbsConfig { relaxed_ordering: false, tclass: Some(106), sl: Some(3), odp: true, ..VerbsConfig::default() };
        let json = serde_json::to_string(&v).unwrap();
        assert!(json.ends_with(r#""max_sge":16,"relaxed_ordering":false,"tclass":106,"sl":3,"odp":true}"#), "{json}");
        assert_eq!(serde_json::from_str::<VerbsConfig>(&json).unwrap(), v);
        // A configuration written before these knobs existed reads as their defaults: relaxed ordering on.
        let old = r#"{"qps":4,"batch":16,"inflight":128,"signal_every":16,"mr_chunk":null,"reg_per_rep":false,"cq_mode":"poll","ack_timeout":14,"max_sge":16}"#;
        assert_eq!(serde_json::from_str::<VerbsConfig>(old).unwrap(), VerbsConfig::default());
        assert!(VerbsConfig::default().relaxed_ordering);
    }

    #[test]
    fn one_queue_pair_reads_1_mib_at_a_time_by_default_and_every_other_case_64_kib() {
        use crate::transport::Transport;
        let block = |op, qps| super::super::Verbs.default_block_size(&TransportConfig::of(&VerbsConfig { op, qps, ..VerbsConfig::default() }));
        let reads: Vec<u64> = [1, 2, 4, 8].map(|q| block(VerbsOp::Read, q)).to_vec();
        assert_eq!(reads, [1 << 20, 64 << 10, 64 << 10, 64 << 10]);
        assert_eq!([1, 4].map(|q| block(VerbsOp::Write, q)), [64 << 10; 2]);
    }

    #[test]
    fn read_is_written_only_when_chosen_and_refused_where_it_cannot_run() {
        let read = VerbsConfig { op: VerbsOp::Read, ..VerbsConfig::default() };
        let json = serde_json::to_string(&read).unwrap();
        assert!(json.ends_with(r#""max_sge":16,"op":"read"}"#), "{json}");
        assert_eq!(serde_json::from_str::<VerbsConfig>(&json).unwrap(), read);
        assert!(!serde_json::to_string(&VerbsConfig::default()).unwrap().contains("\"op\""));
        read.check().unwrap();
        read.check_flags(TransportKind::Verbs, MemKind::Host).unwrap();
        let refused = |v: VerbsConfig| v.check().unwrap_err().to_string();
        assert!(refused(VerbsConfig { reg_per_rep: true, ..read.clone() }).starts_with("--reg-per-rep registers"));
        assert!(refused(VerbsConfig { odp: true, ..read.clone() }).starts_with("--odp is measured for RDMA WRITEs"));
        let tcp = read.check_flags("tcp".parse().unwrap(), MemKind::Host).unwrap_err().to_string();
        assert_eq!(
            tcp,
            "--op read has the receiver post RDMA READs: it needs --transport verbs, not --transport tcp (nixl reads with --nixl-op read)"
        );
    }

    #[test]
    fn verbs_flags_are_refused_for_other_transports_and_odp_for_gpu_memory() {
        let d = VerbsConfig::default();
        let verbs = TransportKind::Verbs;
        let others = crate::transport::registry::all().iter().map(|t| t.kind()).filter(|&k| k != verbs);
        for other in others {
            d.check_flags(other, MemKind::Host).unwrap();
            let refused = |v: VerbsConfig| v.check_flags(other, MemKind::Host).unwrap_err().to_string();
            let tclass = refused(VerbsConfig { tclass: Some(0), ..d.clone() });
            assert!(tclass.starts_with("--tclass sets the RDMA verbs"), "{tclass}");
            assert!(tclass.ends_with(&format!("needs --transport verbs, not --transport {other}")), "{tclass}");
            assert!(refused(VerbsConfig { sl: Some(1), ..d.clone() }).starts_with("--sl sets"));
            assert!(refused(VerbsConfig { odp: true, ..d.clone() }).starts_with("--odp sets"));
            let ro = refused(VerbsConfig { relaxed_ordering: false, ..d.clone() });
            assert!(ro.starts_with("--no-relaxed-ordering sets"), "{ro}");
        }
        VerbsConfig { tclass: Some(7), odp: true, ..d.clone() }.check_flags(verbs, MemKind::Host).unwrap();
        let gpu = VerbsConfig { odp: true, ..d }.check_flags(verbs, MemKind::Gpu(0)).unwrap_err().to_string();
        assert!(gpu.starts_with("--odp pages host memory") && gpu.contains("gpu:0"), "{gpu}");
    }
}
