//! The data connection's wire format: scatter frames out (header and entries, then the payloads spliced without a
//! copy or in one writev), payloads in
//! (one readv straight into the region), and how a transfer's writes are cut into frames.

use super::iovec::{advance, IoVecs, IOV_MAX};
use super::splice::SplicePipe;
use super::{RecvPath, ENTRY_LEN, FRAME_BOUNCE, FRAME_BYTES, FRAME_PIECES, HEADER_LEN};
use crate::mem::{Buffer, HostRegion};
use crate::plan::Write;
use std::io::{ErrorKind, Write as _};
use std::net::TcpStream;
use std::os::fd::AsRawFd;

/// Cut writes into frames of consecutive writes: `(first index, count)`. A write of [`FRAME_BYTES`] or more
/// travels alone; smaller ones share a frame up to [`FRAME_PIECES`] writes or [`FRAME_BYTES`] of payload.
pub fn frames(writes: &[Write]) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    let mut bytes = 0u64;
    for (i, w) in writes.iter().enumerate() {
        match out.last_mut() {
            Some((_, n)) if *n < FRAME_PIECES && bytes + w.len <= FRAME_BYTES => {
                *n += 1;
                bytes += w.len;
            }
            _ => {
                out.push((i, 1));
                bytes = w.len;
            }
        }
    }
    out
}

/// Writes of at least this many bytes (on average in a frame) go through the zero-copy pipe.
pub(super) const SPLICE_MIN_WRITE: u64 = 1 << 20;

/// Send one frame: header and entries, then every payload through `pipe` without a copy (see `splice`) when the
/// writes are large, else everything with as few writev calls as the kernel allows. A pipe the kernel refuses is
/// dropped. Payloads are taken from `data` as raw ranges, never as slices of the buffer. Large frames ask the
/// receiver to land them along `recv`; small ones always land directly. `first_word` is the header's first word,
/// which the receiver echoes in its ack: the first write's index (and the transfer's tag, see `sender`).
pub(super) fn send_frame(
    w: &mut TcpStream,
    pipe: &mut Option<SplicePipe>,
    recv: RecvPath,
    data: HostRegion<'_>,
    writes: &[Write],
    first_word: u64,
) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(HEADER_LEN + writes.len() * ENTRY_LEN);
    let total: u64 = writes.iter().map(|w| w.len).sum();
    // Splicing pays per page mapped and per call: it wins for large writes (+30% for 64 MiB writes on loopback)
    // but not for frames of small scattered pieces (16 KiB paged pieces: no gain or a loss), which keep writev.
    // Streaming stores likewise only pay on long runs of whole cache lines.
    let large = total / writes.len() as u64 >= SPLICE_MIN_WRITE;
    let flags = if large && recv == RecvPath::Bounce { FRAME_BOUNCE } else { 0 };
    for x in [first_word, writes.len() as u64 | flags, total] {
        head.extend_from_slice(&x.to_le_bytes());
    }
    for wr in writes {
        head.extend_from_slice(&wr.remote_offset.to_le_bytes());
        head.extend_from_slice(&wr.len.to_le_bytes());
    }
    let mut frame = IoVecs::with_capacity(writes.len() + 1);
    frame.push_slice(&head);
    for wr in writes {
        frame.push_region(&data, wr.local_offset, wr.len)?;
    }
    if let Some(p) = pipe.as_ref().filter(|_| large) {
        w.write_all(&head)?;
        frame.skip(head.len());
        let mut sent = 0;
        if !p.send(w, &frame, &mut sent)? {
            static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
            if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
                crate::errln!("note: the kernel refused to splice this buffer's pages; sending with plain writes");
            }
            *pipe = None;
            // Plain writes for what the pipe did not take.
            frame.skip(sent);
            frame.write_all(w)?;
        }
        return Ok(());
    }
    frame.write_all(w)
}

/// Receive a frame's payloads from the socket straight into `buf` at each entry's `(offset, len)`, with one
/// readv per batch of entries rather than one recv per entry.
pub(super) fn recv_scatter(s: &TcpStream, buf: &Buffer, entries: &[(u64, u64)]) -> std::io::Result<()> {
    let region = buf.host_region().expect("checked when the target opened");
    let mut iov = Vec::with_capacity(entries.len());
    for &(o, l) in entries {
        // The caller checked every entry against the region; an entry outside it is refused here all the same.
        let Some(p) = region.ptr_at(o, l) else {
            return Err(std::io::Error::new(ErrorKind::InvalidInput, "a scatter entry outside the region"));
        };
        iov.push(nix::libc::iovec { iov_base: p.cast(), iov_len: l as usize });
    }
    let mut at = 0;
    while at < iov.len() {
        if iov[at].iov_len == 0 {
            at += 1;
            continue;
        }
        let n_iov = (iov.len() - at).min(IOV_MAX) as i32;
        // SAFETY: each iovec points inside the region, which stays mapped while this thread holds its `Arc` of the
        // buffer (the rule of `Buffer::host_ptr`), and the caller refused frames whose entries overlap. The kernel
        // writes through raw pointers into bytes no Rust reference points to: `&Buffer` hands out none, and verify
        // reads them with volatile loads, so even a sender that keeps writing during verify only skews the count.
        let n = unsafe { nix::libc::readv(s.as_raw_fd(), iov[at..].as_ptr(), n_iov) };
        match n {
            0 => return Err(ErrorKind::UnexpectedEof.into()),
            n if n < 0 => {
                let e = std::io::Error::last_os_error();
                if e.kind() != ErrorKind::Interrupted {
                    return Err(e);
                }
            }
            n => advance(&mut iov, &mut at, n as usize),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(len: u64) -> Write {
        Write { local_offset: 0, remote_offset: 0, len }
    }

    #[test]
    fn frames_gather_small_writes_and_leave_large_ones_alone() {
        // 16 KiB pieces: 64 fill 1 MiB.
        let pieces = vec![w(16 << 10); 200];
        assert_eq!(frames(&pieces), vec![(0, 64), (64, 64), (128, 64), (192, 8)]);
        // Tiny pieces stop at the iovec-bounded count.
        let tiny = vec![w(3); FRAME_PIECES + 1];
        assert_eq!(frames(&tiny), vec![(0, FRAME_PIECES), (FRAME_PIECES, 1)]);
        // Contiguous 64 MiB blocks: one per frame; a small tail after a large write starts its own frame.
        assert_eq!(frames(&[w(64 << 20), w(64 << 20), w(5)]), vec![(0, 1), (1, 1), (2, 1)]);
        assert!(frames(&[]).is_empty());
    }
}
