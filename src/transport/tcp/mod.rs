//! TCP baseline: the region is the receiver's buffer. Writes travel in scatter frames: a header
//! `(first write index, count, payload bytes)`, `count` entries `(remote offset, length)`, then the payloads back to
//! back, each read by the receiver straight into its buffer at its offset. A frame carries one large write, or up to
//! [`FRAME_PIECES`] small ones (a paged layout's 16 KiB pieces) so per-frame costs (syscalls, acks) are not paid per
//! piece. Completion is the receiver's 16-byte ack `(first index, count)` of a whole frame. `--streams N` spreads
//! frames round-robin over N connections. The count word's top bit, [`FRAME_BOUNCE`], asks the receiver to take the
//! frame's payloads through its bounce buffer (see `bounce`) rather than straight into the region.
//!
//! Data connections are separate from the control connection. Each proves it belongs to the session with the key
//! both ends derived in the control handshake (`control::auth`; the key itself is never sent), so a stranger
//! cannot inject bytes into the region.

mod bounce;
mod choice;
mod frame;
mod iovec;
mod receiver;
mod sender;
mod splice;

pub use receiver::{frame_entries, frame_header, FrameHeader, TcpTarget};
pub use sender::{ChosenBy, RecvRates, SendRates, TcpDetail, TcpSenderDetail, TcpSource};

use crate::mem::Buffer;
use anyhow::{anyhow, Result};
use serde::{Deserialize, Serialize};
use std::io::ErrorKind;

pub const DEFAULT_BLOCK_SIZE: u64 = 64 << 20;
pub const HEADER_LEN: usize = 24;
const ENTRY_LEN: usize = 16;
const ACK_LEN: usize = 16;
/// Most writes in one frame (bounded by the iovec limit of one writev, 1024, with room for the header).
pub const FRAME_PIECES: usize = 512;
/// Small writes are gathered into one frame until it holds this many payload bytes.
const FRAME_BYTES: u64 = 1 << 20;
/// What a data connection sends first: its stream index (u32, little-endian) and that stream's proof of the
/// session (`auth::data_proof`).
const HELLO_LEN: usize = 4 + crate::control::auth::PROOF_LEN;
/// Set in a frame header's count word: receive this frame through the bounce buffer.
const FRAME_BOUNCE: u64 = 1 << 63;

/// How the receiver lands a large frame's payloads: the kernel copies them straight into the region (one readv),
/// or into a small cache-resident buffer from which streaming stores move them (see `bounce`). The sender picks
/// (its calibration measures both) and flags each frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RecvPath {
    Direct,
    Bounce,
}

impl RecvPath {
    fn name(self) -> &'static str {
        match self {
            RecvPath::Direct => "direct",
            RecvPath::Bounce => "bounce",
        }
    }
}

/// How large writes leave: through the zero-copy pipe, or copied into socket buffers by plain writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SendPath {
    Splice,
    Write,
}

impl SendPath {
    fn name(self) -> &'static str {
        match self {
            SendPath::Splice => "splice",
            SendPath::Write => "write",
        }
    }
}

#[derive(Serialize, Deserialize)]
struct Offer {
    data_port: u16,
    region_len: u64,
}

/// TCP moves bytes through the kernel's sockets, which need host memory.
fn need_host_memory(buf: &Buffer, side: &str) -> Result<()> {
    if buf.host_ptr().is_none() {
        return Err(crate::error::usage(format!(
            "--transport tcp cannot read or write GPU memory ({side} has {}); put it in host or pinned memory (sweep --src/--dst, serve/send --mem), or use --transport cuda",
            buf.kind()
        )));
    }
    Ok(())
}

fn data_error(role: &str, e: std::io::Error) -> anyhow::Error {
    match e.kind() {
        ErrorKind::UnexpectedEof
        | ErrorKind::ConnectionReset
        | ErrorKind::BrokenPipe
        | ErrorKind::ConnectionAborted => {
            anyhow!("{role} closed the data connection mid-transfer ({e}); did it exit or crash?")
        }
        ErrorKind::WouldBlock | ErrorKind::TimedOut => {
            anyhow!("the data connection to {role} stalled past --io-timeout")
        }
        _ => anyhow!("data connection to {role}: {e}"),
    }
}

/// The `i`-th little-endian u64 of `bytes`.
fn word(bytes: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8 bytes"))
}
