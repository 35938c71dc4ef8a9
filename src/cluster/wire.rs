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
use crate::control::frame::{read_frame, write_frame, FrameError, MAX_HELLO_FRAME};
use crate::measure::Json;
use serde::{Deserialize, Serialize};
use std::net::TcpStream;

pub(super) const MAGIC: &str = "kvxfer-cluster";
/// 2: challenge–response instead of the token in Join.
pub(super) const PROTOCOL: u32 = 2;
/// The largest Join rank 0 reads from a connection that has not proven it holds the token: a Join is a few hundred
/// bytes, and nothing a stranger sends may make rank 0 allocate more (serve's Hello has the same bound).
pub const MAX_JOIN_FRAME: usize = MAX_HELLO_FRAME;

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
    /// A rank's contribution to a gathering at rank 0 (a cluster run's results); rank 0 does not answer. Its
    /// objects keep their keys' order (a transport's extras in the results are written as the rank wrote them).
    Gather {
        seq: u64,
        payload: Json,
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

/// A rank's introduction to rank 0. Until its proof is checked, every field is a stranger's word.
#[derive(Debug, Serialize, Deserialize)]
pub struct Join {
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

/// What the bytes a connection sent so far make of its Join (see [`decode_join`]).
#[derive(Debug)]
pub enum JoinDecode {
    /// Not all of it yet: the Join ends `wanted` bytes into the connection (the 4-byte length included).
    Incomplete { wanted: usize },
    /// A whole Join, not yet authenticated.
    Join(Box<Join>),
    /// Not a Join rank 0 will read; the connection is turned away.
    Refused(NotAJoin),
}

/// Why a connection's first message is not a Join. Peer text in these is already escaped and cut for a log line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotAJoin {
    #[error("announced a {0}-byte message (a Join is at most {MAX_JOIN_FRAME} bytes)")]
    TooLarge(usize),
    #[error("sent a {0} instead of a Join")]
    OtherMessage(&'static str),
    /// A Join of another rendezvous protocol, whose fields this kvxfer cannot read.
    #[error("speaks rendezvous protocol {0}, rank 0 speaks {PROTOCOL}, in a Join this kvxfer cannot read")]
    OtherProtocol(u64),
    #[error("sent something that is not a kvxfer rendezvous message ({0})")]
    Garbled(String),
}

/// Rank 0's reading of a new connection's first message, from `bytes`: everything the connection sent so far
/// (rank 0 calls this after every read, so only the 4-byte length is looked at until the whole frame is there).
/// Never allocates past [`MAX_JOIN_FRAME`]: a longer length is refused as soon as it arrives. Bytes after the
/// frame are not looked at.
pub fn decode_join(bytes: &[u8]) -> JoinDecode {
    let Some(len) = bytes.get(..4) else { return JoinDecode::Incomplete { wanted: 4 } };
    let len = u32::from_be_bytes(len.try_into().expect("4 bytes")) as usize;
    if len > MAX_JOIN_FRAME {
        return JoinDecode::Refused(NotAJoin::TooLarge(len));
    }
    let Some(body) = bytes.get(4..4 + len) else { return JoinDecode::Incomplete { wanted: 4 + len } };
    match serde_json::from_slice::<Wire>(body) {
        Ok(Wire::Join(join)) => JoinDecode::Join(Box::new(join)),
        Ok(other) => JoinDecode::Refused(NotAJoin::OtherMessage(other.name())),
        Err(e) => JoinDecode::Refused(not_a_join(body, &e)),
    }
}

/// Why `body` is not a Join: a Join of another protocol when it says so, else serde's reason (which may quote the
/// peer's text: escaped and cut).
fn not_a_join(body: &[u8], e: &serde_json::Error) -> NotAJoin {
    #[derive(Deserialize)]
    struct Header {
        #[serde(rename = "type")]
        kind: String,
        magic: String,
        protocol: u64,
    }
    match serde_json::from_slice::<Header>(body) {
        Ok(h) if h.kind == "Join" && h.magic == MAGIC && h.protocol != u64::from(PROTOCOL) => {
            NotAJoin::OtherProtocol(h.protocol)
        }
        _ => NotAJoin::Garbled(crate::console::printable(&e.to_string())),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gathered_payload_keeps_its_keys_in_order_across_the_wire() {
        // A case's transport keys as a rank wrote them (not sorted: a Value would sort them).
        let text = r#"[{"size_bytes":1,"work_requests":3,"rails":[{"device":"mlx5_0","bytes":1,"share":1.0}]}]"#;
        let payload: Json = serde_json::from_str(text).unwrap();
        let bytes = serde_json::to_vec(&Wire::Gather { seq: 4, payload }).unwrap();
        let Wire::Gather { seq, payload } = serde_json::from_slice(&bytes).unwrap() else { panic!("a Gather") };
        assert_eq!((seq, serde_json::to_string(&payload).unwrap()), (4, text.to_string()));
    }
}
