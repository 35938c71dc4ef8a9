//! TCP baseline: the region is the receiver's buffer. Writes travel in scatter frames: a header
//! `(first write index, count, payload bytes)`, `count` entries `(remote offset, length)`, then the payloads back to
//! back, each read by the receiver straight into its buffer at its offset. A frame carries one large write, or up to
//! [`FRAME_PIECES`] small ones (a paged layout's 16 KiB pieces) so per-frame costs (syscalls, acks) are not paid per
//! piece. Completion is the receiver's 16-byte ack `(first index, count)` of a whole frame, the first word echoed as
//! the header had it: the sender puts its transfer's tag above the index, so it matches each ack to a frame of the
//! transfer in progress that was sent and not yet acknowledged. `--streams N` spreads frames round-robin over N
//! connections. The count word's top bit, [`FRAME_BOUNCE`], asks the receiver to take the frame's payloads through
//! its bounce buffer (see `bounce`) rather than straight into the region.
//!
//! Data connections are separate from the control connection. Each proves it belongs to the session with the key
//! both ends derived in the control handshake (`control::auth`; the key itself is never sent), so a stranger
//! cannot inject bytes into the region.

mod admit;
mod bounce;
mod choice;
mod frame;
mod iovec;
mod pingpong;
mod receiver;
mod sender;
mod splice;

pub use receiver::{frame_entries, frame_header, FrameHeader, TcpTarget};
pub use sender::{ChosenBy, RecvRates, SendRates, TcpDetail, TcpSenderDetail, TcpSource};

use super::api::{Context, HasKnobs, Landing, OwnKnobs, Source, Target, Transport};
use crate::measure::ExtrasNotes;
use crate::mem::{Buffer, MemKind};
use crate::plan::{Knobs, RunConfig, TransportConfig, TransportKind};
use anyhow::{anyhow, Result};
use serde::{Deserialize, Serialize};
use std::io::ErrorKind;
use std::sync::Arc;

pub const DEFAULT_BLOCK_SIZE: u64 = 64 << 20;

/// TCP has no knobs of its own (streams and block size are every transport's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TcpConfig {}

impl Knobs for TcpConfig {
    const KIND: TransportKind = TransportKind::Tcp;
}

impl OwnKnobs for TcpConfig {}

/// The TCP transport, as the registry lists it: any two hosts, host memory at both ends, landing counted by the
/// receiver.
pub struct Tcp;

impl ExtrasNotes for Tcp {}

impl HasKnobs for Tcp {
    type Knobs = TcpConfig;
}

impl Transport for Tcp {
    fn default_block_size(&self, _cfg: &TransportConfig) -> u64 {
        DEFAULT_BLOCK_SIZE
    }

    fn picked_by_auto(&self, ends: &[MemKind]) -> Option<&'static str> {
        (!ends.iter().any(|k| matches!(k, MemKind::Gpu(_)))).then_some("no end is a GPU")
    }

    fn landing(&self, _cfg: &TransportConfig) -> Landing {
        Landing::Observed
    }

    /// Either end can listen and either can dial: the reverse connection is one more of its own.
    fn reverses(&self) -> bool {
        true
    }

    fn open_target(&self, cfg: &RunConfig, buf: Arc<Buffer>, ctx: &Context) -> Result<Box<dyn Target>> {
        Ok(Box::new(TcpTarget::open(cfg, buf, ctx)?))
    }

    fn connect_source(
        &self,
        cfg: &RunConfig,
        buf: &Buffer,
        offer: serde_json::Value,
        ctx: &Context,
    ) -> Result<Box<dyn Source>> {
        Ok(Box::new(TcpSource::connect(cfg, buf, offer, ctx)?))
    }

    fn ping_pong(&self) -> Option<&dyn crate::transport::PingPong> {
        Some(&pingpong::TcpPingPong)
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::TransportDetail;

    #[test]
    fn details_serialize_as_results_files_hold_them() {
        let sender = TcpSenderDetail {
            streams: 1,
            send: SendPath::Splice,
            send_choice: ChosenBy::Calibration,
            send_gbps: Some(SendRates { splice: 3.5, write: 3.0 }),
            recv: RecvPath::Bounce,
            recv_choice: ChosenBy::Calibration,
            recv_gbps: Some(RecvRates { direct: 3.0, bounce: 3.5 }),
            calibration_gbps: [("splice+bounce".to_string(), 3.5)].into(),
            path_reason: "measured".to_string(),
        };
        let mut detail = TcpDetail { sender };
        let json = r#"{"sender":{"calibration_gbps":{"splice+bounce":3.5},"path_reason":"measured","recv":"bounce","recv_choice":"calibration","recv_gbps":{"bounce":3.5,"direct":3.0},"send":"splice","send_choice":"calibration","send_gbps":{"splice":3.5,"write":3.0},"streams":1}}"#;
        assert_eq!(TransportDetail::of(&detail).to_json().to_string(), json);
        let s = &mut detail.sender;
        (s.send, s.send_choice, s.send_gbps) = (SendPath::Write, ChosenBy::NoPipe, None);
        (s.recv, s.recv_choice, s.recv_gbps) = (RecvPath::Direct, ChosenBy::RecvEnvironment, None);
        s.calibration_gbps.clear();
        let json = r#"{"sender":{"path_reason":"measured","recv":"direct","recv_choice":"KVXFER_TCP_RECV","send":"write","send_choice":"no pipe","streams":1}}"#;
        assert_eq!(TransportDetail::of(&detail).to_json().to_string(), json);
    }
}
