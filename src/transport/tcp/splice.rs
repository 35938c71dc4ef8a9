//! Zero-copy sending: payloads go from the sender's buffer to the socket through a pipe (vmsplice maps the buffer's
//! pages into the pipe, splice hands them to TCP), so the kernel does not copy every byte into socket buffers first.
//! That removes the send side's copy (measured on loopback on a 2-core VM, 1 GiB in 64 MiB writes: 3.2–3.5 →
//! 4.5–4.9 GB/s). Without a pipe (or with `KVXFER_TCP_SPLICE=0`) the results say `transport_detail.sender.send:
//! "write"`; where the kernel refuses to splice a buffer mid-run, the connection falls back to plain writes and
//! says so once on stderr.
//!
//! The kernel keeps referencing the pages until TCP is done with them, so the buffer must not change meanwhile: the
//! sender only rewrites it (`--verify`'s fill, which takes `&mut Buffer` and so cannot overlap a transfer's `&Buffer`)
//! between reps, after the receiver acknowledged every frame — i.e. after it had read every byte.

use super::iovec::{advance, IoVecs, IOV_MAX};
use nix::libc;
use std::io::ErrorKind;
use std::net::TcpStream;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// One connection's pipe.
pub struct SplicePipe {
    rd: OwnedFd,
    wr: OwnedFd,
}

impl SplicePipe {
    /// A pipe grown to 1 MiB (the default /proc/sys/fs/pipe-max-size) where allowed; None when none can be made.
    pub fn new() -> Option<SplicePipe> {
        let mut fds = [0i32; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2 returns.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return None;
        }
        // SAFETY: pipe2 succeeded, so both are fresh descriptors owned by nobody else.
        let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // Best effort: a smaller pipe only means more calls per frame.
        // SAFETY: F_SETPIPE_SZ on a pipe we own; failure leaves the pipe as it was.
        unsafe { libc::fcntl(wr.as_raw_fd(), libc::F_SETPIPE_SZ, 1 << 20) };
        Some(SplicePipe { rd, wr })
    }

    /// Send `payloads` (ranges of the sender's buffer) on `sock`, all or an error. Returns `Ok(false)` without
    /// having sent anything more when this kernel refuses vmsplice or splice here (the caller then writes the rest
    /// itself, from `sent` bytes on, and stops using the pipe).
    pub fn send(&self, sock: &mut TcpStream, payloads: &IoVecs<'_>, sent: &mut usize) -> std::io::Result<bool> {
        let mut iov: Vec<libc::iovec> = payloads.remaining().to_vec();
        // Bytes of this call's payloads not yet handed to the socket.
        let mut unsent: usize = payloads.remaining_len() - *sent;
        let mut at = 0;
        while at < iov.len() {
            if iov[at].iov_len == 0 {
                at += 1;
                continue;
            }
            let n_iov = (iov.len() - at).min(IOV_MAX);
            // SAFETY: every iovec points into memory `payloads` borrows; vmsplice only reads them (no
            // SPLICE_F_GIFT), and the buffer is not modified until the receiver acknowledged these bytes (see the
            // module comment). The pipe is empty here, so the call takes up to its capacity and returns.
            let m = unsafe { libc::vmsplice(self.wr.as_raw_fd(), iov[at..].as_ptr(), n_iov, 0) };
            if m < 0 {
                let e = std::io::Error::last_os_error();
                match e.kind() {
                    ErrorKind::Interrupted => continue,
                    // EFAULT here: pages the kernel cannot take a reference to (a driver's special mapping); the
                    // slices themselves are in bounds.
                    _ if refused(&e) || e.raw_os_error() == Some(libc::EFAULT) => return Ok(false),
                    _ => return Err(e),
                }
            }
            let mut left = m as usize;
            while left > 0 {
                // SPLICE_F_MORE tells TCP more bytes follow, so it may hold a partial segment back for them. Never
                // on the frame's last bytes: the receiver waits for those, and TCP would hold them like a cork
                // until its ~200 ms timer (a stall a benchmark must not report as the network's).
                let more = if unsent > left { libc::SPLICE_F_MORE } else { 0 };
                // SAFETY: both descriptors are open (the pipe's read end, the connected socket); null offsets mean
                // "current position", as pipes and sockets require.
                let k = unsafe {
                    libc::splice(
                        self.rd.as_raw_fd(),
                        std::ptr::null_mut(),
                        sock.as_raw_fd(),
                        std::ptr::null_mut(),
                        left,
                        libc::SPLICE_F_MOVE | more,
                    )
                };
                match k {
                    0 => return Err(ErrorKind::WriteZero.into()),
                    k if k < 0 => {
                        let e = std::io::Error::last_os_error();
                        if e.kind() == ErrorKind::Interrupted {
                            continue;
                        }
                        if refused(&e) && left == m as usize {
                            // Nothing of this batch reached the socket: hand the bytes back to plain writes
                            // (the pipe still holds them; it is dropped with this connection's splicing).
                            return Ok(false);
                        }
                        return Err(e);
                    }
                    k => {
                        left -= k as usize;
                        unsent -= k as usize;
                        *sent += k as usize;
                    }
                }
            }
            advance(&mut iov, &mut at, m as usize);
        }
        Ok(true)
    }
}

/// Errors that mean "not here" (no splice support for this file type or kernel), not a broken connection.
fn refused(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::ENOSYS) | Some(libc::EPERM) | Some(libc::EOPNOTSUPP))
}
