//! The rendezvous protocol's messages, framed like the control channel (4-byte length, then JSON; see
//! `control::frame`), on one TCP connection from each rank to rank 0.
//!
//! ```text
//! rank r (r > 0)                                   rank 0
//!                                               ◀──  Challenge{nonce S}        on accept
//! Join{magic,protocol,nonce C,proof,rank,size,   ──▶  checks the proof (HMAC of both nonces with the token,
//!      host,addr}                                     see `control::auth`); waits until all N joined
//!                                               ◀──  Table{members,proof}      | Error  (rank 0's own proof)
//! per barrier: Barrier{seq}                      ──▶  waits until all N arrived
//!                                               ◀──  Barrier{seq}             | Error
//! per gathering: Gather{seq,payload}             ──▶  waits until all N sent (no answer)
//! ```
//! Rank 0 sends `Error{message}` to every rank still connected when anything fails, so each rank fails at once
//! with the same reason (which rank left, which ranks never came). The token never crosses the network, and a
//! captured Join proves nothing on the next connection (a fresh nonce S each time).

use super::group::Member;
use crate::control::frame::{read_frame, write_frame, FrameError};
use serde::{Deserialize, Serialize};
use std::net::TcpStream;

pub(super) const MAGIC: &str = "kvxfer-cluster";
/// 2: challenge–response instead of the token in Join.
pub(super) const PROTOCOL: u32 = 2;

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "type")]
pub(super) enum Wire {
    /// Rank 0's nonce, sent as soon as it accepts a connection.
    Challenge {
        nonce: String,
    },
    Join(Join),
    Table {
        members: Vec<Member>,
        /// Rank 0's proof that it holds the token (for this rank's nonces).
        #[serde(default)]
        proof: String,
    },
    Barrier {
        seq: u64,
    },
    /// A rank's contribution to a gathering at rank 0 (a cluster run's results); rank 0 does not answer.
    Gather {
        seq: u64,
        payload: serde_json::Value,
    },
    Error {
        message: String,
    },
}

impl Wire {
    /// The message's kind, for errors (never its content: a peer's text is not echoed).
    pub(super) fn name(&self) -> &'static str {
        match self {
            Wire::Challenge { .. } => "Challenge",
            Wire::Join(_) => "Join",
            Wire::Table { .. } => "Table",
            Wire::Barrier { .. } => "Barrier",
            Wire::Gather { .. } => "Gather",
            Wire::Error { .. } => "Error",
        }
    }
}

/// A rank's introduction to rank 0.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Join {
    pub magic: String,
    pub protocol: u32,
    /// This rank's nonce, hex (absent from protocol 1, which sent the token instead: refused by its protocol).
    #[serde(default)]
    pub nonce: String,
    /// This rank's proof that it holds the token, for both nonces.
    #[serde(default)]
    pub proof: String,
    pub rank: usize,
    pub world_size: usize,
    pub local_rank: usize,
    pub host: String,
    /// Where this rank listens for its peers (the IP it reached rank 0 from, and its own port).
    pub addr: String,
    /// The NUMA node of this rank's buffer, when the rank knows it.
    #[serde(default)]
    pub numa: Option<u32>,
}

/// Why a message could not be read.
#[derive(Debug, thiserror::Error)]
pub(super) enum RecvError {
    #[error("{0}")]
    Frame(#[from] FrameError),
    #[error("sent something that is not a kvxfer rendezvous message: {0}")]
    Garbled(serde_json::Error),
}

impl RecvError {
    /// The other end went away (EOF, reset): the process died or gave up.
    pub(super) fn is_closed(&self) -> bool {
        matches!(self, RecvError::Frame(FrameError::Closed | FrameError::Truncated))
    }
}

pub(super) fn send(stream: &mut TcpStream, msg: &Wire) -> Result<(), FrameError> {
    let payload = serde_json::to_vec(msg).expect("rendezvous messages always serialize");
    write_frame(stream, &payload)
}

pub(super) fn recv(stream: &mut TcpStream) -> Result<Wire, RecvError> {
    let payload = read_frame(stream)?;
    serde_json::from_slice(&payload).map_err(RecvError::Garbled)
}
