//! The control protocol between sender and receiver.
//!
//! ```text
//! sender                              receiver
//! Hello{magic,protocol,version,nonce} ──▶  checks magic, protocol
//!                                     ◀──  Challenge{nonce,proof}     | Error   (see `auth`: the token itself
//! Proof{proof}                        ──▶  checks the proof               never crosses the network)
//!                                     ◀──  Welcome{version,hostname}  | Error
//! Config{RunConfig}                   ──▶  validates, allocates, opens the transport's target
//!                                     ◀──  Accept{offer}              | Error
//! Connect{answer}                     ──▶  finishes the transport connection
//!                                     ◀──  Connected
//! per rep: RepStart{case,rep,size}    ──▶  arms the target for `size` bytes (a paged replay's also names the
//!                                          receiver's block slots: `dst_slots`)
//!                                     ◀──  RepReady
//!          (transport moves the bytes; the receiver learns they landed,
//!           or is told with Landed ──▶ where it cannot see that itself)
//!                                     ◀──  RepDone{stage times, verify result}
//! Finish                              ──▶
//!                                     ◀──  Bye
//! ```
//! A bidirectional run (`--bidir`) says so in Config (`bidir: true`); after Connected the roles turn round for a
//! second connection of the same transport: `Reverse{offer}` ──▶ (the sender's target over its reverse buffer),
//! ◀── `ReverseAnswer{answer}` (the receiver's source), `Connected` ──▶ once the sender accepted it, ◀── `Connected`
//! once the receiver prepared it. Each rep then goes RepStart ──▶ ◀── RepReady, `RepGo` ──▶, and both ends transfer
//! at once: the sender its buffer into the receiver's region, the receiver its second buffer into the sender's; the
//! receiver's RepDone carries its transfer's times (`reverse`).
//! A latency run (`kvxfer latency`) sends `PingPong{RunConfig, plan}` instead of Config; Accept, Connect and
//! Connected follow alike, then per size `PingPongStart{case,size,exchanges}` ──▶ ◀── RepReady, the exchanges on the
//! transport's data path, ◀── RepDone; then Finish/Bye.
//! Either side may send `Error{message}` instead of any reply; the other side reports it and exits 1.

use crate::plan::RunConfig;
use serde::{Deserialize, Serialize};

pub const MAGIC: &str = "kvxfer";
/// Bumped on any incompatible change of these messages or of a transport's wire format. 6: `Config` names its
/// transport and carries its knobs as one object (`{"name": ..., "knobs": {...}}`). 7: `PingPong` (latency) and
/// verbs' `tclass`, `sl`, `odp` and relaxed-ordering knobs, which an older receiver would ignore. 8: bidirectional runs
/// (`Config.bidir`, `Reverse`, `ReverseAnswer`, `RepGo`, `RepReport.reverse`), which an older receiver would run
/// one way only.
pub const PROTOCOL: u32 = 8;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Msg {
    Hello {
        magic: String,
        protocol: u32,
        version: String,
        /// The sender's nonce, hex (absent from senders of protocol 4 and older, which sent their token instead).
        #[serde(default)]
        nonce: String,
    },
    /// The receiver's nonce and its proof that it holds the token.
    Challenge {
        nonce: String,
        proof: String,
    },
    /// The sender's proof that it holds the token.
    Proof {
        proof: String,
    },
    Welcome {
        version: String,
        hostname: String,
    },
    Config {
        config: Box<RunConfig>,
        /// Both ways at once (`--bidir`): the receiver also sends, from a second buffer, into the sender's.
        #[serde(default, skip_serializing_if = "is_false")]
        bidir: bool,
    },
    /// The receiver's transport-specific description of its exposed region and how to reach it.
    Accept {
        offer: serde_json::Value,
        /// The receiver's memory kind (`host`, `pinned`, `gpu:N`).
        #[serde(default)]
        mem: String,
        /// Where the receiver bound its thread and buffers (`--numa`); absent from older receivers.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        numa: Option<crate::observe::numa::NumaPlacement>,
    },
    /// The sender's transport-specific answer (e.g. its queue pair numbers).
    Connect {
        answer: serde_json::Value,
    },
    Connected,
    RepStart {
        case: usize,
        rep: u32,
        warmup: bool,
        size_bytes: u64,
        /// Paged replay: the receiver's pool slot of each of the rep's blocks (its block table), so that both ends
        /// plan the same destinations. Absent otherwise (the rep is its case's, or contiguous), and left out then
        /// so that what older peers read is unchanged.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dst_slots: Option<Vec<u64>>,
    },
    RepReady,
    /// Sender → receiver, for transports whose target cannot observe landing: every write of the rep completed.
    Landed,
    RepDone(RepReport),
    Finish,
    Bye,
    Error {
        message: String,
    },
    /// Sender → receiver, instead of Config: a latency run (`kvxfer latency`). Accept, Connect and Connected
    /// follow as for Config, then one PingPongStart per size.
    PingPong {
        config: Box<RunConfig>,
        plan: crate::plan::latency::LatencyPlan,
    },
    /// Sender → receiver: answer `exchanges` messages of `size_bytes` (warm-up included) with one of the same size
    /// each. The receiver says RepReady when its end waits for the first, and RepDone after the last.
    PingPongStart {
        case: usize,
        size_bytes: u64,
        exchanges: u64,
    },
    /// Sender → receiver, after Connected in a bidirectional run: the sender's target over its reverse buffer.
    Reverse {
        offer: serde_json::Value,
    },
    /// Receiver → sender: its source's answer to [`Msg::Reverse`].
    ReverseAnswer {
        answer: serde_json::Value,
    },
    /// Sender → receiver, after RepReady in a bidirectional run: both ends start their transfers now.
    RepGo,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// The receiver's own transfer of a bidirectional rep, on its clock.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct ReverseTimes {
    /// First byte posted → last completion.
    pub transfer_ms: f64,
    /// RepGo received → last completion: how long after the common start the reverse transfer finished.
    pub elapsed_ms: f64,
}

/// What the receiver saw of one rep, on its own monotonic clock (never compared with the sender's clock).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RepReport {
    /// From receiving RepStart to knowing that every byte landed.
    pub notify_ms: f64,
    /// Receiver-clock timestamps (ms since the receiver's run start) for the events file.
    pub t_rep_start_ms: f64,
    pub t_landed_ms: f64,
    pub verify_ms: Option<f64>,
    pub mismatched_bytes: Option<u64>,
    /// The transfer's post → completion, when the receiver posted it (nixl `--nixl-op read`): the rep's time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transfer_ms: Option<f64>,
    /// The receiver's counters that moved during the rep (see `observe::counters`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counters: Option<crate::observe::counters::Deltas>,
    /// Other senders' runs the receiver served while this rep moved (`serve --max-sessions`); absent when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_runs: Option<u32>,
    /// A bidirectional rep: the receiver's transfer into the sender's buffer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reverse: Option<ReverseTimes>,
}

impl Msg {
    pub fn name(&self) -> &'static str {
        match self {
            Msg::Hello { .. } => "Hello",
            Msg::Challenge { .. } => "Challenge",
            Msg::Proof { .. } => "Proof",
            Msg::Welcome { .. } => "Welcome",
            Msg::Config { .. } => "Config",
            Msg::Accept { .. } => "Accept",
            Msg::Connect { .. } => "Connect",
            Msg::Connected => "Connected",
            Msg::RepStart { .. } => "RepStart",
            Msg::RepReady => "RepReady",
            Msg::Landed => "Landed",
            Msg::RepDone(_) => "RepDone",
            Msg::Finish => "Finish",
            Msg::Bye => "Bye",
            Msg::Error { .. } => "Error",
            Msg::PingPong { .. } => "PingPong",
            Msg::PingPongStart { .. } => "PingPongStart",
            Msg::Reverse { .. } => "Reverse",
            Msg::ReverseAnswer { .. } => "ReverseAnswer",
            Msg::RepGo => "RepGo",
        }
    }
}
