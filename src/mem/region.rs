//! Host memory that something outside Rust may be writing. The receiver's region is filled by the kernel (a TCP
//! receive thread's readv), a NIC (RDMA WRITEs) or a GPU copy — and a broken or hostile sender can keep writing
//! while the receiver checks the rep. So kvxfer never holds a reference (`&[u8]`) to a buffer's bytes through a
//! shared borrow: [`HostRegion`] is an address range tied to the borrow, transports take raw pointers from it for
//! the kernel or a device, and Rust code reads the bytes only with volatile loads ([`HostRegion::for_each_word`],
//! [`HostRegion::read_bytes`]) into values it owns. A racing write can then tear or stale what is read, which changes
//! a mismatch count, never what the compiler may assume about memory.

use std::marker::PhantomData;
use std::ptr::NonNull;

/// `len` bytes of host memory at `base`, valid for as long as the buffer they belong to is borrowed (`'a`).
#[derive(Clone, Copy)]
pub struct HostRegion<'a> {
    base: NonNull<u8>,
    len: usize,
    _borrow: PhantomData<&'a ()>,
}

// SAFETY: a region is an address range plus a borrow of the live buffer. Through it, safe code only copies bytes
// out with volatile loads or gets raw pointers; both are as sound from any thread as from the owner's.
unsafe impl Send for HostRegion<'_> {}
// SAFETY: as for `Send`: `&HostRegion` offers nothing that `HostRegion` (Copy) does not.
unsafe impl Sync for HostRegion<'_> {}

impl<'a> HostRegion<'a> {
    /// # Safety
    /// `[base, base + len)` must be readable host memory that stays mapped for `'a`, and no Rust reference to those
    /// bytes may exist during `'a` except through `&mut` of the owner (which `'a` then excludes).
    pub(super) unsafe fn new(base: NonNull<u8>, len: usize) -> HostRegion<'a> {
        HostRegion { base, len, _borrow: PhantomData }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Base address of `[offset, offset + len)`, or None when that range is not inside the region. For handing
    /// to the kernel (readv, writev, vmsplice) or a device; the pointer is valid while the region's borrow lasts.
    pub fn ptr_at(&self, offset: u64, len: u64) -> Option<*mut u8> {
        let end = offset.checked_add(len)?;
        if end > self.len as u64 {
            return None;
        }
        // `offset <= len`, which fits the address space: the result stays inside (or one past) the mapping.
        Some(self.base.as_ptr().wrapping_add(offset as usize))
    }

    /// The range `[offset, offset + len)` as a pointer, panicking when it is not inside the region (callers check).
    fn checked(&self, offset: u64, len: u64) -> *const u8 {
        match self.ptr_at(offset, len) {
            Some(p) => p.cast_const(),
            None => panic!("read of {len} bytes at offset {offset} outside a {}-byte region", self.len),
        }
    }

    /// Copy the bytes at `[offset, offset + dst.len())` into `dst`, one volatile load each.
    pub fn read_bytes(&self, offset: u64, dst: &mut [u8]) {
        let src = self.checked(offset, dst.len() as u64);
        for (i, b) in dst.iter_mut().enumerate() {
            // SAFETY: `src + i` is inside the checked range of live memory (`new`'s contract); a u8 needs no
            // alignment. Volatile: a writer outside Rust may be changing the byte (see the module comment).
            *b = unsafe { src.add(i).read_volatile() };
        }
    }

    /// Call `f` with each of the `count` little-endian words at `offset`: one volatile 8-byte load per word where
    /// they are 8-aligned in memory (the usual case: buffers are page-aligned and pieces word-sized), eight volatile
    /// byte loads per word otherwise.
    pub fn for_each_word(&self, offset: u64, count: u64, mut f: impl FnMut(u64)) {
        let src = self.checked(offset, count.checked_mul(8).expect("word count fits"));
        if src.align_offset(8) == 0 {
            let words = src.cast::<u64>();
            for k in 0..count as usize {
                // SAFETY: word `k` lies inside the checked range and `words` is 8-aligned; volatile as above.
                f(u64::from_le(unsafe { words.add(k).read_volatile() }));
            }
        } else {
            let mut w = [0u8; 8];
            for k in 0..count {
                self.read_bytes(offset + 8 * k, &mut w);
                f(u64::from_le_bytes(w));
            }
        }
    }
}

impl crate::pattern::PatternMemory for HostRegion<'_> {
    fn byte_len(&self) -> u64 {
        self.len as u64
    }

    fn read_bytes(&self, offset: u64, dst: &mut [u8]) {
        HostRegion::read_bytes(self, offset, dst)
    }

    fn for_each_word(&self, offset: u64, count: u64, f: impl FnMut(u64)) {
        HostRegion::for_each_word(self, offset, count, f)
    }
}

#[cfg(test)]
mod tests {
    use crate::mem::{Buffer, MemKind};
    use crate::pattern::{self, PatternMemory, Span};

    /// A host buffer whose byte `i` is `i * 7 + 1` (mod 256), and a copy of those bytes.
    fn numbered(len: usize) -> (Buffer, Vec<u8>) {
        let mut b = Buffer::alloc(MemKind::Host, len as u64, false).unwrap();
        let want: Vec<u8> = (0..len).map(|i| (i * 7 + 1) as u8).collect();
        match &mut b {
            Buffer::Host(h) => h.as_mut_slice().copy_from_slice(&want),
            _ => unreachable!(),
        }
        (b, want)
    }

    #[test]
    fn words_and_bytes_read_the_same_at_every_alignment() {
        let (b, want) = numbered(4096);
        let region = b.host_region().unwrap();
        for offset in 0..16u64 {
            for count in [0u64, 1, 3, 64] {
                let (mut got, mut from_slice) = (Vec::new(), Vec::new());
                region.for_each_word(offset, count, |w| got.push(w));
                want[..].for_each_word(offset, count, |w| from_slice.push(w));
                assert_eq!(got, from_slice, "offset {offset}, {count} words");
            }
            let mut bytes = [0u8; 13];
            region.read_bytes(offset, &mut bytes);
            assert_eq!(bytes[..], want[offset as usize..offset as usize + 13]);
        }
    }

    #[test]
    fn ranges_outside_the_region_have_no_pointer() {
        let (b, _) = numbered(100);
        let region = b.host_region().unwrap();
        assert_eq!(region.len(), 100);
        assert!(region.ptr_at(0, 100).is_some());
        assert!(region.ptr_at(100, 0).is_some(), "an empty range at the end");
        assert!(region.ptr_at(99, 2).is_none());
        assert!(region.ptr_at(u64::MAX, 2).is_none(), "no overflow");
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn reading_past_the_end_panics_instead_of_reading() {
        let (b, _) = numbered(100);
        b.host_region().unwrap().for_each_word(96, 1, |_| {});
    }

    /// Verify through the region counts what verify over a slice of the same bytes counts, contiguous and paged,
    /// at word-aligned and odd placements.
    #[test]
    fn region_checks_count_like_slice_checks() {
        let len = (3 << 20) + 5;
        let mut b = Buffer::alloc(MemKind::Host, len, false).unwrap();
        b.fill_pattern(len, 4, 2).unwrap();
        let spans = [
            Span { offset: (2 << 20) + 3, logical: 0, len: 4099 },
            Span { offset: 8, logical: 4099, len: 70_000 },
            Span { offset: 100_001, logical: 74_099, len: 17 },
        ];
        let Buffer::Host(h) = &mut b else { unreachable!() };
        h.as_mut_slice()[7] ^= 1;
        h.as_mut_slice()[(3 << 20) + 4] ^= 2;
        let copy = h.as_mut_slice().to_vec();
        assert_eq!(b.count_mismatches(len, 4, 2).unwrap(), 2);
        assert_eq!(
            b.count_mismatches_range(1, len - 1, 4, 2).unwrap(),
            pattern::count_mismatches_in(&copy[..], 1, len - 1, 4, 2)
        );
        b.fill_spans(&spans, 4, 3).unwrap();
        let Buffer::Host(h) = &mut b else { unreachable!() };
        h.as_mut_slice()[(2 << 20) + 5] ^= 4;
        h.as_mut_slice()[100_017] ^= 8;
        assert_eq!(b.count_span_mismatches(&spans, 4, 3).unwrap(), 2);
    }
}
