//! Progress through an iovec array after a partial readv/vmsplice: shared by the receive path (frame.rs) and the
//! zero-copy send path (splice.rs), so neither depends on the other.

/// Consume `n` bytes from the iovecs starting at `iov[*at]`: skip the entries done, advance into a partly done one.
pub(super) fn advance(iov: &mut [nix::libc::iovec], at: &mut usize, mut n: usize) {
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
