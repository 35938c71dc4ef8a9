//! What a transport is, apart from how generic code finds one ([`super::registry`]): the [`Transport`] each
//! folder's unit type implements, answering everything generic code asks of a transport, and the two halves it opens
//! and connects ([`Target`], [`Source`]) with what they report.

use crate::measure::{ExtrasNotes, Fields, Warning};
use crate::mem::{Buffer, HostSharing, MemKind};
use crate::plan::latency::LatencyPlan;
use crate::plan::{Knobs, RunConfig, TransportConfig, TransportKind, Write};
use anyhow::Result;
use serde::Serialize;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One transport, as generic code asks it (the registry holds one of each). What it answers about its knobs follows
/// from its knobs' type ([`TransportKnobs`], through [`HasKnobs`]); its words about its extras are [`ExtrasNotes`].
pub trait Transport: TransportKnobs + ExtrasNotes + Sync {
    /// Bytes per write when the user gives none, for a run of `cfg`.
    fn default_block_size(&self, cfg: &TransportConfig) -> u64;

    // ------------------------------------------------------------------------------------------------ the host

    /// Why `--transport auto` picks this transport for buffers of `ends` (the source first), if it does.
    fn picked_by_auto(&self, _ends: &[MemKind]) -> Option<&'static str> {
        None
    }

    /// Fail before connecting when this host lacks what the transport needs (the memory kinds are checked apart);
    /// `devices` are the RDMA device choices of the ends that run here.
    fn check_host(&self, _devices: &[&DeviceChoice]) -> Result<()> {
        Ok(())
    }

    /// Whether it can run on this host, asked with the probing a run does before connecting (`kvxfer devices`).
    fn usable_here(&self) -> Result<(), Unusable> {
        Ok(())
    }

    /// `serve -d NAME`: check, before listening, the devices named for runs of this transport.
    fn check_devices(&self, _named: &DeviceChoice) -> Result<()> {
        Ok(())
    }

    /// What it finds on this host for `kvxfer devices`, if it looks for anything.
    fn inventory(&self) -> Option<Inventory> {
        None
    }

    // -------------------------------------------------------------------------------------------- how it runs

    /// How the receiver learns that a rep's bytes have landed, for a run of `cfg`.
    fn landing(&self, cfg: &TransportConfig) -> Landing;

    /// Whether, in a run of `cfg`, the receiver posts the transfer itself (a READ) as soon as it is armed: the
    /// bytes then move at RepReady, not when the sender goes, and the sender learns of the end from the receiver.
    fn pulls(&self, _cfg: &TransportConfig) -> bool {
        false
    }

    /// Whether it moves host memory from another process (an engine's worker), which then needs the buffers
    /// allocated shared ([`Buffer::alloc_for`]).
    fn host_sharing(&self) -> HostSharing {
        HostSharing::Private
    }

    /// Whether it pins the host memory it moves in this process (registers it with an RDMA device), which
    /// RLIMIT_MEMLOCK bounds unless the process holds CAP_IPC_LOCK. The engines pin in their own worker or library.
    fn pins_host_memory(&self) -> bool {
        false
    }

    /// Whether a one-machine run (`sweep`) must put its receiver in a process of its own (an engine that lives in
    /// worker processes already need not).
    fn receiver_in_own_process(&self) -> bool {
        false
    }

    /// Whether a run of `cfg` drives an RDMA NIC from this end (its counters are read, its NUMA node followed).
    fn drives_rdma(&self, _cfg: &TransportConfig) -> bool {
        false
    }

    /// Whether it opens the RDMA devices of `-d` itself, so that a cluster flow is named by its NIC.
    fn opens_rdma_devices(&self) -> bool {
        false
    }

    /// Whether its halves work with the roles turned round, for `--bidir`: the receiver's end connects a
    /// [`Source`] to a [`Target`] the sender's end opened, over the same control channel, each end's buffer of its
    /// own memory kind.
    fn reverses(&self) -> bool {
        false
    }

    /// Refuse, for `--bidir` on a transport that [`Self::reverses`], knobs of `cfg` whose runs cannot go both ways
    /// (a usage error, one line).
    fn check_reverse(&self, _cfg: &TransportConfig) -> Result<()> {
        Ok(())
    }

    /// The buffer one end of a run moves (`role`: sender or receiver).
    fn alloc_buffer(&self, cfg: &RunConfig, kind: MemKind, _role: &str, _ctx: &Context) -> Result<Buffer> {
        Buffer::alloc_for(kind, cfg.buffer_bytes(), cfg.knobs.hugepages, self.host_sharing())
    }

    fn open_target(&self, cfg: &RunConfig, buf: Arc<Buffer>, ctx: &Context) -> Result<Box<dyn Target>>;

    /// How many bytes of region a receiver's offer (its [`Target::offer`]) says the sender may write into, where the
    /// offer says; the sender checks it against what the run writes before it allocates or connects anything. Its
    /// top-level `region_len`, unless the transport's offer says it otherwise.
    fn offered_region(&self, offer: &serde_json::Value) -> Option<u64> {
        offer.get("region_len")?.as_u64()
    }

    fn connect_source(
        &self,
        cfg: &RunConfig,
        buf: &Buffer,
        offer: serde_json::Value,
        ctx: &Context,
    ) -> Result<Box<dyn Source>>;

    /// Its ping-pong half for `kvxfer latency`, if it can time one message and its answer; `None` where it cannot.
    fn ping_pong(&self) -> Option<&dyn PingPong> {
        None
    }

    // ------------------------------------------------------------------------------------------- its extras

    /// A case's extras from its reps' (each rep's as its source reported them in [`TransferTimes::extras`], or as
    /// a results file kept them), keys in the order results files hold them, and the warnings they call for.
    fn summarize(&self, _reps: &[&Fields]) -> (Fields, Vec<Warning>) {
        (Fields::new(), Vec::new())
    }
}

/// A transport's own knobs' type, as [`HasKnobs`] names it: the checks and results keys that are the knobs' to say.
pub trait OwnKnobs: Knobs + Default {
    /// Refuse knobs it cannot run with, naming the flag that sets each.
    fn check(&self) -> Result<()> {
        Ok(())
    }

    /// Refuse knobs, as flags or a sweep file's case gave them, that do not fit a run of `running` from `src`
    /// memory (a flag of this transport may need it to run, or a kind of memory).
    fn check_flags(&self, _running: TransportKind, _src: MemKind) -> Result<()> {
        Ok(())
    }

    /// These knobs as results v1 keeps them in `config`.
    fn results_knobs(&self) -> ResultsKnobs {
        ResultsKnobs::default()
    }
}

/// Names a transport's knobs' type, from which its [`TransportKnobs`] answers follow.
pub trait HasKnobs {
    type Knobs: OwnKnobs;
}

/// What generic code asks a transport about knobs, its own or others' (each transport is asked about a run of
/// another, so that a flag of its own given to that run is refused). Implemented for every [`HasKnobs`].
pub trait TransportKnobs {
    fn kind(&self) -> TransportKind;

    /// Its knobs at their defaults (the command line's).
    fn default_knobs(&self) -> TransportConfig;

    /// Refuse knobs of this transport it cannot run with (a peer's config is checked so when it arrives).
    fn check_knobs(&self, cfg: &TransportConfig) -> Result<()>;

    /// Refuse this transport's knobs in `cfg` that do not fit a run of `running` from `src` memory; asked whichever
    /// transport runs, as [`TransportKnobs::check_knobs`] is.
    fn check_flags(&self, cfg: &TransportConfig, running: TransportKind, src: MemKind) -> Result<()>;

    /// This transport's knobs as results v1 keeps them in `config` (the defaults' where `cfg` holds none readable).
    fn results_knobs(&self, cfg: &TransportConfig) -> ResultsKnobs;
}

impl<T: HasKnobs> TransportKnobs for T {
    fn kind(&self) -> TransportKind {
        <T::Knobs as Knobs>::KIND
    }

    fn default_knobs(&self) -> TransportConfig {
        TransportConfig::of(&T::Knobs::default())
    }

    fn check_knobs(&self, cfg: &TransportConfig) -> Result<()> {
        cfg.knobs::<T::Knobs>()?.check()
    }

    fn check_flags(&self, cfg: &TransportConfig, running: TransportKind, src: MemKind) -> Result<()> {
        cfg.knobs::<T::Knobs>()?.check_flags(running, src)
    }

    fn results_knobs(&self, cfg: &TransportConfig) -> ResultsKnobs {
        cfg.knobs::<T::Knobs>().map(|k| k.results_knobs()).unwrap_or_default()
    }
}

/// How the receiver learns that a rep's bytes have landed. Declared once per transport ([`Transport::landing`])
/// and read by both ends, so the sender's and the receiver's view of a rep's end cannot disagree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Landing {
    /// The target observes it ([`Target::wait_landed`]): TCP counts the bytes, verbs sees WRITE_WITH_IMMs.
    Observed,
    /// The target cannot see the data arrive: the sender sends `Landed` on the control channel once its transfer
    /// completed.
    Announced,
}

/// A transport's knobs as results v1 keeps them in `config`: the cuda transport's `copy` and `staging` at the top,
/// written for every transport (at cuda's defaults for the others), and the verbs transport's knobs under `verbs`
/// (absent for the others). Other transports' knobs are not recorded there.
#[derive(Debug, Clone, PartialEq)]
pub struct ResultsKnobs {
    pub copy: String,
    pub staging: String,
    pub verbs: Option<Fields>,
}

impl Default for ResultsKnobs {
    /// What results v1 records for a transport without these knobs: the cuda transport's defaults.
    fn default() -> ResultsKnobs {
        ResultsKnobs { copy: "auto".into(), staging: "none".into(), verbs: None }
    }
}

/// Why a transport cannot run on this host: a few words (`devices` prints them), and the full line with its fix.
#[derive(Debug, Clone, Serialize)]
pub struct Unusable {
    pub reason: String,
    pub detail: String,
}

impl Unusable {
    pub fn new(reason: &str, detail: impl std::fmt::Display) -> Unusable {
        Unusable { reason: reason.into(), detail: detail.to_string() }
    }
}

/// What a transport finds on this host (`kvxfer devices`): its lines, and its JSON under `key`, or why it found
/// nothing under `key_error`.
pub struct Inventory {
    pub key: &'static str,
    pub json: Result<serde_json::Value, String>,
    pub lines: Vec<String>,
}

/// What the sender's transport chose and measured while connecting, stored in the results under
/// `config.transport_detail`: each transport's own type, serialized by the transport as a JSON object.
#[derive(Debug, Clone)]
pub struct TransportDetail(serde_json::Value);

impl TransportDetail {
    /// `detail` as the results file holds it (a `Value`: its keys sorted, as they always were).
    pub fn of(detail: &impl Serialize) -> TransportDetail {
        TransportDetail(serde_json::to_value(detail).expect("transport details are plain data"))
    }

    /// As the results file holds it.
    pub fn to_json(&self) -> serde_json::Value {
        self.0.clone()
    }
}

/// When the first byte of a transfer was posted and the last completion was seen (sender clock).
#[derive(Debug, Clone)]
pub struct TransferTimes {
    pub first_post: Instant,
    pub last_complete: Instant,
    /// What this transport measured besides the times, as the keys of the rep in results (empty when nothing).
    pub extras: Fields,
}

impl TransferTimes {
    pub fn new(first_post: Instant, last_complete: Instant) -> TransferTimes {
        TransferTimes { first_post, last_complete, extras: Fields::new() }
    }

    /// With the transport's own `extras` type, written as the rep's keys (its `None`s left out by its serde).
    pub fn with_extras(self, extras: &impl Serialize) -> TransferTimes {
        let extras = Fields::of(extras).expect("a transport's extras serialize as a JSON object");
        TransferTimes { extras, ..self }
    }
}

/// The sender's half: writes into the receiver's region.
pub trait Source: Send {
    /// What the receiver needs to finish the connection (sent in `Connect`).
    fn answer(&self) -> serde_json::Value;
    /// What this end chose and measured while connecting (device, GID, MTU, registration time...), stored in the
    /// results under `transport_detail`.
    fn describe(&self) -> TransportDetail;
    /// Called once after the receiver accepted the connection, before the first rep: a transport may measure here
    /// how best to send on this machine (TCP picks its send path). Not timed as part of any rep.
    fn prepare(&mut self, _mem: &Buffer) -> Result<()> {
        Ok(())
    }
    /// Push every write from `mem` (the buffer the source was connected with) and return once all completed.
    fn transfer(&mut self, mem: &Buffer, writes: &[Write], hooks: &mut TransferHooks) -> Result<TransferTimes>;
}

/// What a transfer reports to, and asks of, the run while it goes.
pub struct TransferHooks<'a> {
    /// Called once per write `i` when its completion is observed: (i, posted, completed). Feeds the per-block
    /// latency histogram.
    pub done: &'a mut dyn FnMut(usize, Instant, Instant),
    /// True once the receiver has hung up or reported an error on the control connection. Transports whose data
    /// path cannot see a dead peer quickly (verbs retries for a while) poll it so a failure is named within seconds.
    pub peer_failed: &'a mut dyn FnMut() -> bool,
}

/// The receiver's half: owns the exposed region and learns when a rep's bytes have landed.
pub trait Target: Send {
    /// How the sender reaches the region (sent in `Accept`).
    fn offer(&self) -> serde_json::Value;
    /// Finish connecting with the sender's answer (nothing to do for targets the sender writes into unaided).
    fn accept(&mut self, _answer: serde_json::Value) -> Result<()> {
        Ok(())
    }
    /// Expect one rep of case `case`, `size_bytes` long (nothing to do where landing is [`Landing::Announced`]).
    fn arm(&mut self, _case: usize, _size_bytes: u64) -> Result<()> {
        Ok(())
    }
    /// Block until the armed rep has landed (transports whose landing is [`Landing::Observed`]) and return when
    /// that was observed, or return `None` as soon as `control_ready()` says the control connection has something
    /// to say (the sender failed or vanished). The run never asks a target whose landing is announced.
    fn wait_landed(&mut self, _timeout: Duration, _control_ready: &mut dyn FnMut() -> bool) -> Result<Option<Instant>> {
        anyhow::bail!("this transport learns of landing from the sender's control message")
    }
    /// When this end posted the last rep's transfer itself (the receiver pulls: a READ), its post and completion:
    /// the rep's transfer time then is this end's.
    fn posted_transfer(&self) -> Option<(Instant, Instant)> {
        None
    }
}

/// What a transport needs to know about where it runs.
pub struct Context {
    /// The receiver's address as the sender dialled it (sender side) or as the receiver listens (receiver side).
    pub peer_ip: IpAddr,
    pub local_ip: IpAddr,
    pub timeouts: crate::control::Timeouts,
    /// This end's RDMA device choice.
    pub device: DeviceChoice,
    /// Both ends of the session run in this process (a sweep's receiver thread, a cluster rank): its CPU time is
    /// both ends'.
    pub shares_process: bool,
    /// The key the control handshake derived (`control::auth`); data connections prove themselves with it.
    pub session_key: Option<crate::control::auth::SessionKey>,
}

/// `-d/--device`, `--ib-port`, `--gid-index` of one end.
#[derive(Debug, Clone, Default)]
pub struct DeviceChoice {
    /// The devices by name: none (the first with an active port), one, or several — rails, over which one
    /// transfer is striped.
    pub names: Vec<String>,
    pub ib_port: u8,
    pub gid_index: Option<u32>,
}

impl DeviceChoice {
    /// The device of each rail: the named ones, or the one automatic pick.
    pub fn rails(&self) -> Vec<Option<&str>> {
        if self.names.is_empty() {
            vec![None]
        } else {
            self.names.iter().map(|n| Some(n.as_str())).collect()
        }
    }

    /// The devices as the command line names them (`mlx5_0+mlx5_1` for rails), if named.
    pub fn label(&self) -> Option<String> {
        (!self.names.is_empty()).then(|| self.names.join("+"))
    }
}

// ----------------------------------------------------------------------------------------- ping-pong
// What a transport offers `kvxfer latency`: a ping-pong, as `ib_write_lat` and `sockperf ping-pong` run one. The
// initiator sends a message of the case's size and waits for the whole answer; the responder waits for the whole
// message and answers with one of the same size. Half the initiator's round trip is the one-way latency.
//
// The ends meet as a run's target and source do: the responder opens and offers (in `Accept`), the initiator
// connects with that offer and answers (in `Connect`), the responder finishes with the answer.

/// A transport's ping-pong ([`super::Transport::ping_pong`]).
pub trait PingPong: Sync {
    /// Refuse a plan this transport cannot ping-pong with (a knob of another transport), as a usage error.
    fn check(&self, plan: &LatencyPlan) -> Result<()>;

    /// Where a responder that `latency` starts itself answers from, for `--dst` (`None`: not given), checked before
    /// anything starts: host memory, unless the transport answers from elsewhere; a usage error for memory it cannot
    /// answer from.
    fn memory(&self, kind: TransportKind, asked: Option<MemKind>) -> Result<MemKind> {
        match asked {
            None | Some(MemKind::Host) => Ok(MemKind::Host),
            Some(other) => Err(crate::error::usage(format!(
                "--dst {other}: latency over {kind} answers from host memory; leave --dst out"
            ))),
        }
    }

    /// Where the initiator's messages start, for `--src` (`None`: not given), checked before anything starts: host
    /// memory, unless the transport sends from elsewhere; a usage error for memory it cannot send from.
    fn source(&self, kind: TransportKind, asked: Option<MemKind>) -> Result<MemKind> {
        match asked {
            None | Some(MemKind::Host) => Ok(MemKind::Host),
            Some(other) => Err(crate::error::usage(format!(
                "--src {other}: latency over {kind} sends from host memory; leave --src out"
            ))),
        }
    }

    /// The responder's end, answering from `mem` (the receiver's memory), for messages up to `max_size` bytes;
    /// [`PingEnd::hello`] is its offer.
    fn open_responder(
        &self,
        cfg: &TransportConfig,
        plan: &LatencyPlan,
        max_size: u64,
        mem: MemKind,
        ctx: &Context,
    ) -> Result<Box<dyn PingEnd>>;

    /// The initiator's end, connected with the responder's `offer`; [`PingEnd::hello`] is its answer.
    fn connect_initiator(
        &self,
        cfg: &TransportConfig,
        plan: &LatencyPlan,
        max_size: u64,
        offer: serde_json::Value,
        ctx: &Context,
    ) -> Result<Box<dyn PingEnd>>;
}

/// One end of a ping-pong, connected.
pub trait PingEnd: Send {
    /// What the other end needs to connect: the responder's offer, the initiator's answer.
    fn hello(&self) -> serde_json::Value;

    /// Finish connecting with the other end's hello (the responder takes the initiator's answer).
    fn finish(&mut self, _peer: serde_json::Value) -> Result<()> {
        Ok(())
    }

    /// Initiator: send message `seq` of `size` bytes and return once the whole answer has arrived.
    fn ping(&mut self, size: usize, seq: u64) -> Result<()>;

    /// Responder: wait for the whole message `seq` of `size` bytes, then send the answer.
    fn pong(&mut self, size: usize, seq: u64) -> Result<()>;

    /// Initiator, after a size's exchanges and outside their timing: check what an exchange cannot check without
    /// timing the check too (the last answer's bytes, where reading them is a copy of its own).
    fn settle(&mut self, _size: usize, _last_seq: u64) -> Result<()> {
        Ok(())
    }

    /// How this end ran (how it waits, inline sizes...), for the results' `transport_detail`.
    fn describe(&self) -> serde_json::Value;
}
