// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Guest buffers as the engine hands them out: a [`Seg`] (one translated,
//! bounds-checked buffer), the per-queue [`SegVec`] a chain walk appends
//! to, and the cursors over a list of them: [`copy_from_segs`] out of
//! guest buffers, [`SegWriter`] into them (an RX frame's chains). Every
//! byte they move goes through the one copy, `copy::copy_bytes`.

use super::copy::copy_bytes;
use crate::net_hdr::MAX_HDR_LEN;

/// One guest buffer, translated and bounds-checked.
///
/// Invariant: `hva..hva + len` lies inside a mapped region of the snapshot
/// the ring parser translated it from. Only the parsers (`ring`'s
/// children) build one, so the fields are private to `ring`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Seg {
    pub(super) hva: usize,
    pub(super) len: u32,
}

impl Seg {
    /// The buffer's host address.
    #[inline(always)]
    pub(crate) const fn hva(self) -> usize {
        self.hva
    }

    /// The buffer's length in bytes.
    #[inline(always)]
    pub(crate) const fn len(self) -> u32 {
        self.len
    }
}

/// A fixed-capacity list of segments, allocated once per queue. Several
/// chains may be appended one after the other, each within a limit of its
/// own ([`SegVec::limit_next`]).
#[derive(Debug)]
pub(crate) struct SegVec {
    segs: Box<[Seg]>,
    len: usize,
    /// `push` fails at this length (at most the capacity).
    limit: usize,
}

impl SegVec {
    pub(crate) fn with_capacity(cap: usize) -> Self {
        Self {
            segs: vec![Seg::default(); cap].into_boxed_slice(),
            len: 0,
            limit: cap,
        }
    }

    /// Empties the list; the whole capacity is usable again.
    #[inline]
    pub(crate) fn clear(&mut self) {
        self.len = 0;
        self.limit = self.segs.len();
    }

    /// Lets at most `n` more segments be appended (fewer when the capacity
    /// ends first): the room one chain may take when several share the list.
    #[inline]
    pub(crate) fn limit_next(&mut self, n: usize) {
        self.limit = (self.len + n).min(self.segs.len());
    }

    /// Drops the segments from `len` on (what a refused chain appended).
    #[inline]
    pub(crate) fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Appends; false when full (at the capacity or the limit).
    #[inline]
    pub(crate) fn push(&mut self, s: Seg) -> bool {
        if self.len >= self.limit {
            return false;
        }
        match self.segs.get_mut(self.len) {
            Some(slot) => {
                *slot = s;
                self.len += 1;
                true
            }
            None => false,
        }
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub(crate) fn capacity(&self) -> usize {
        self.segs.len()
    }

    #[inline]
    pub(crate) fn as_slice(&self) -> &[Seg] {
        &self.segs[..self.len]
    }
}

/// Copies `dst.len()` bytes of the buffers `segs`, starting `offset` bytes
/// in, into `dst`. Returns how many bytes were copied (fewer when the
/// buffers end first).
#[inline]
pub(crate) fn copy_from_segs(segs: &[Seg], mut offset: usize, dst: &mut [u8]) -> usize {
    let mut done = 0;
    for s in segs {
        let len = s.len() as usize;
        if offset >= len {
            offset -= len;
            continue;
        }
        let n = (len - offset).min(dst.len() - done);
        // SAFETY: `s` was bounds-checked against the mapped regions by the
        // ring parser and its snapshot is alive (module invariant); `offset +
        // n <= len`; `dst[done..done + n]` is in bounds. Source and
        // destination cannot overlap (guest memory is never a Rust slice).
        unsafe {
            copy_bytes(
                dst.as_mut_ptr().add(done),
                (s.hva() + offset) as *const u8,
                n,
            );
        }
        done += n;
        offset = 0;
        if done == dst.len() {
            break;
        }
    }
    done
}

/// A cursor writing into a list of guest buffers (an RX frame's chains).
#[derive(Debug)]
pub(crate) struct SegWriter<'a> {
    segs: &'a [Seg],
    idx: usize,
    off: usize,
    written: usize,
}

impl<'a> SegWriter<'a> {
    pub(crate) fn new(segs: &'a [Seg]) -> Self {
        Self {
            segs,
            idx: 0,
            off: 0,
            written: 0,
        }
    }

    /// Bytes written so far.
    pub(crate) fn written(&self) -> usize {
        self.written
    }

    /// Copies `len` bytes from host address `src`. Returns the bytes copied
    /// (fewer when the buffers are full). Bytes that fit in the current
    /// buffer (a frame in one RX buffer) are copied inline; the rest takes
    /// the out-of-line walk over the buffers.
    ///
    /// # Safety
    /// `src..src + len` must be readable for the duration of the call: a
    /// host slice, or a guest buffer checked by the ring parser whose memory
    /// snapshot is alive.
    #[inline(always)]
    unsafe fn write_raw(&mut self, src: usize, len: usize) -> usize {
        if let Some(s) = self.segs.get(self.idx) {
            if s.len() as usize - self.off >= len {
                // SAFETY: the destination is a checked guest buffer (module
                // invariant) with `off + len <= s.len()`; the source is
                // readable for `len` bytes per this function's contract.
                // `copy_bytes` tolerates overlap (a hostile guest may make
                // a TX buffer alias an RX buffer).
                unsafe {
                    copy_bytes((s.hva() + self.off) as *mut u8, src as *const u8, len);
                }
                self.off += len;
                self.written += len;
                return len;
            }
        }
        // SAFETY: this function's own contract.
        unsafe { self.write_raw_walk(src, len) }
    }

    /// [`Self::write_raw`]'s general case, buffer by buffer.
    ///
    /// # Safety
    /// As for [`Self::write_raw`].
    #[inline(never)]
    unsafe fn write_raw_walk(&mut self, mut src: usize, mut len: usize) -> usize {
        let start = self.written;
        while len > 0 {
            let Some(s) = self.segs.get(self.idx) else {
                break;
            };
            let room = s.len() as usize - self.off;
            if room == 0 {
                self.idx += 1;
                self.off = 0;
                continue;
            }
            let n = room.min(len);
            // SAFETY: the destination is a checked guest buffer (module
            // invariant) with `off + n <= s.len()`; the source is readable for
            // `len >= n` bytes per this function's contract. `copy` (not
            // `copy_nonoverlapping`) because a hostile guest may make a TX
            // buffer alias an RX buffer.
            unsafe {
                copy_bytes((s.hva() + self.off) as *mut u8, src as *const u8, n);
            }
            self.off += n;
            self.written += n;
            src += n;
            len -= n;
        }
        self.written - start
    }

    /// Writes a virtio-net header (`len` = 10 or 12 bytes), given as its
    /// two wire words ([`VirtioNetHdr::to_words`]), at the start: two
    /// stores when the first buffer holds it whole.
    #[inline(always)]
    pub(crate) fn write_hdr(&mut self, lo: u64, hi: u32, len: usize) -> usize {
        if self.written == 0 {
            if let Some(s) = self.segs.first() {
                if s.len() as usize >= 12 {
                    // SAFETY: the first buffer is checked guest memory
                    // (module invariant) of at least 12 bytes.
                    unsafe {
                        std::ptr::write_unaligned(s.hva() as *mut u64, lo.to_le());
                        if len >= 12 {
                            std::ptr::write_unaligned((s.hva() + 8) as *mut u32, hi.to_le());
                        } else {
                            std::ptr::write_unaligned(
                                (s.hva() + 8) as *mut u16,
                                (hi as u16).to_le(),
                            );
                        }
                    }
                    self.off = len;
                    self.written = len;
                    return len;
                }
            }
        }
        // The wire layout is the two words' little-endian bytes.
        let mut b = [0u8; MAX_HDR_LEN];
        b[..8].copy_from_slice(&lo.to_le_bytes());
        b[8..].copy_from_slice(&hi.to_le_bytes());
        self.write(&b[..len])
    }

    /// Copies a host slice into the buffers.
    #[inline]
    pub(crate) fn write(&mut self, src: &[u8]) -> usize {
        // SAFETY: a slice is readable for its whole length.
        unsafe { self.write_raw(src.as_ptr() as usize, src.len()) }
    }

    /// Copies `len` bytes of guest buffers `src`, starting `offset` bytes in.
    #[inline]
    pub(crate) fn write_from_segs(
        &mut self,
        src: &[Seg],
        mut offset: usize,
        mut len: usize,
    ) -> usize {
        let start = self.written;
        for s in src {
            if len == 0 {
                break;
            }
            let slen = s.len() as usize;
            if offset >= slen {
                offset -= slen;
                continue;
            }
            let n = (slen - offset).min(len);
            // SAFETY: `s` is a checked guest buffer whose snapshot is alive
            // (module invariant) and `offset + n <= s.len()`.
            let done = unsafe { self.write_raw(s.hva() + offset, n) };
            len -= done;
            offset = 0;
            if done < n {
                break;
            }
        }
        self.written - start
    }
}
