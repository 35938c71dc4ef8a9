//! Iovec arrays for the data connections: progress through one after a partial readv/writev/vmsplice (shared by
//! the receive path in frame.rs and the zero-copy send path in splice.rs, so neither depends on the other), and
//! [`IoVecs`], the send side's gather list, which points into the source buffer through its raw host region rather
//! than through slices of it.

use crate::mem::HostRegion;
use nix::libc;
use std::io::ErrorKind;
use std::marker::PhantomData;
use std::net::TcpStream;
use std::os::fd::AsRawFd;

/// Most iovecs one readv/writev/vmsplice takes (IOV_MAX on Linux).
pub(super) const IOV_MAX: usize = 1024;

/// Consume `n` bytes from the iovecs starting at `iov[*at]`: skip the entries done, advance into a partly done one.
pub(super) fn advance(iov: &mut [libc::iovec], at: &mut usize, mut n: usize) {
    while n > 0 {
        let v = &mut iov[*at];
        let k = n.min(v.iov_len);
        // `k <= iov_len`: the advanced pointer stays inside the same entry.
        v.iov_base = v.iov_base.cast::<u8>().wrapping_add(k).cast();
        v.iov_len -= k;
        n -= k;
        if v.iov_len == 0 {
            *at += 1;
        }
    }
}

/// Bytes to send, gathered from memory borrowed for `'a`: slices (a frame's header) and ranges of a buffer's host
/// region. Only ever read from (writev, vmsplice).
pub(super) struct IoVecs<'a> {
    iov: Vec<libc::iovec>,
    /// Entries before this one have been consumed.
    at: usize,
    _borrow: PhantomData<&'a [u8]>,
}

impl<'a> IoVecs<'a> {
    pub fn with_capacity(n: usize) -> IoVecs<'a> {
        IoVecs { iov: Vec::with_capacity(n), at: 0, _borrow: PhantomData }
    }

    pub fn push_slice(&mut self, s: &'a [u8]) {
        self.iov.push(libc::iovec { iov_base: s.as_ptr() as *mut _, iov_len: s.len() });
    }

    /// `len` bytes of `region` at `offset`; an error (a planning bug) when they are not inside it.
    pub fn push_region(&mut self, region: &HostRegion<'a>, offset: u64, len: u64) -> std::io::Result<()> {
        let Some(p) = region.ptr_at(offset, len) else {
            return Err(std::io::Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "a write of {len} bytes at offset {offset} falls outside the {}-byte source buffer",
                    region.len()
                ),
            ));
        };
        self.iov.push(libc::iovec { iov_base: p.cast(), iov_len: len as usize });
        Ok(())
    }

    /// The entries not yet consumed (for vmsplice, which takes them as they are).
    pub fn remaining(&self) -> &[libc::iovec] {
        &self.iov[self.at..]
    }

    /// Bytes not yet consumed.
    pub fn remaining_len(&self) -> usize {
        self.remaining().iter().map(|v| v.iov_len).sum()
    }

    /// Consume the first `n` bytes (sent some other way).
    pub fn skip(&mut self, n: usize) {
        advance(&mut self.iov, &mut self.at, n);
    }

    /// Write every remaining byte to `sock`, with as few writev calls as the kernel allows.
    pub fn write_all(&mut self, sock: &TcpStream) -> std::io::Result<()> {
        while self.at < self.iov.len() {
            if self.iov[self.at].iov_len == 0 {
                self.at += 1;
                continue;
            }
            let n_iov = (self.iov.len() - self.at).min(IOV_MAX) as i32;
            // SAFETY: every entry points at readable memory borrowed for `'a` (a slice, or a bounds-checked range of
            // a live host region), which outlives `self`; writev only reads it.
            let n = unsafe { libc::writev(sock.as_raw_fd(), self.iov[self.at..].as_ptr(), n_iov) };
            match n {
                0 => return Err(ErrorKind::WriteZero.into()),
                n if n < 0 => {
                    let e = std::io::Error::last_os_error();
                    if e.kind() != ErrorKind::Interrupted {
                        return Err(e);
                    }
                }
                n => self.skip(n as usize),
            }
        }
        Ok(())
    }
}
