//! Length-prefixed frames on the control connection: a 4-byte big-endian length, then that many bytes of JSON.
//!
//! The codec never trusts the peer: a length above [`MAX_FRAME`] or a connection that ends inside a frame is an
//! error, not an allocation or a panic.

use std::io::{self, Read, Write};

/// Largest control frame accepted. Control messages are small (configs, region descriptors), so anything bigger is
/// a peer that is not kvxfer or is misbehaving.
pub const MAX_FRAME: usize = 1 << 20;
/// Largest frame read before the peer has authenticated: a Hello is a few hundred bytes, and nothing a stranger
/// sends may make the receiver allocate more than this.
pub const MAX_HELLO_FRAME: usize = 4 << 10;

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("the peer closed the control connection")]
    Closed,
    #[error("the peer closed the control connection in the middle of a message")]
    Truncated,
    #[error("the peer sent a {0}-byte control message (limit {1}); is it a kvxfer peer?")]
    TooLarge(usize, usize),
    #[error("timed out waiting for the peer on the control connection")]
    TimedOut,
    #[error("control connection: {0}")]
    Io(io::Error),
}

impl From<io::Error> for FrameError {
    fn from(e: io::Error) -> Self {
        match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => FrameError::TimedOut,
            io::ErrorKind::UnexpectedEof => FrameError::Truncated,
            io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionAborted => {
                FrameError::Closed
            }
            _ => FrameError::Io(e),
        }
    }
}

pub fn write_frame(w: &mut impl Write, payload: &[u8]) -> Result<(), FrameError> {
    if payload.len() > MAX_FRAME {
        return Err(FrameError::TooLarge(payload.len(), MAX_FRAME));
    }
    let mut buf = Vec::with_capacity(4 + payload.len());
    buf.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    buf.extend_from_slice(payload);
    w.write_all(&buf)?;
    w.flush()?;
    Ok(())
}

pub fn read_frame(r: &mut impl Read) -> Result<Vec<u8>, FrameError> {
    read_frame_limited(r, MAX_FRAME)
}

/// [`read_frame`] refusing frames above `limit` bytes before allocating anything.
pub fn read_frame_limited(r: &mut impl Read, limit: usize) -> Result<Vec<u8>, FrameError> {
    let mut len = [0u8; 4];
    // Distinguish a clean close between frames from one inside a frame.
    let mut got = 0;
    while got < 4 {
        match r.read(&mut len[got..]) {
            Ok(0) if got == 0 => return Err(FrameError::Closed),
            Ok(0) => return Err(FrameError::Truncated),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > limit {
        return Err(FrameError::TooLarge(len, limit));
    }
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload)?;
    Ok(payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let mut wire = Vec::new();
        write_frame(&mut wire, b"hello").unwrap();
        write_frame(&mut wire, b"").unwrap();
        let mut r = &wire[..];
        assert_eq!(read_frame(&mut r).unwrap(), b"hello");
        assert_eq!(read_frame(&mut r).unwrap(), b"");
        assert!(matches!(read_frame(&mut r), Err(FrameError::Closed)));
    }

    #[test]
    fn truncated_and_oversized_frames_are_errors() {
        let mut wire = Vec::new();
        write_frame(&mut wire, b"hello").unwrap();
        for cut in 1..wire.len() {
            let mut r = &wire[..cut];
            assert!(matches!(read_frame(&mut r), Err(FrameError::Truncated)), "cut at {cut}");
        }
        let huge = ((MAX_FRAME + 1) as u32).to_be_bytes();
        assert!(matches!(read_frame(&mut &huge[..]), Err(FrameError::TooLarge(..))));
        assert!(matches!(read_frame(&mut &[0xffu8; 4][..]), Err(FrameError::TooLarge(..))));
    }

    #[test]
    fn garbage_never_panics() {
        // A cheap deterministic fuzz: every prefix of a pseudo-random stream decodes to frames or an error.
        let mut x = 0x1234_5678_9abc_def0u64;
        let bytes: Vec<u8> = (0..4096)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                if i % 5 == 0 {
                    0
                } else {
                    x as u8
                }
            })
            .collect();
        for start in 0..64 {
            let mut r = &bytes[start..];
            while read_frame(&mut r).is_ok() {}
        }
    }
}
