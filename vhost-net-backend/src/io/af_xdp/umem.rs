// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The UMEM: one anonymous mapping, cut into equal frames (chunks), that the
//! kernel reads transmitted frames from and writes received frames into.
//!
//! ```text
//!   0                     rx_frames * frame_size            len
//!   | RX frames (fill ring) ... | TX frames (TX ring) ...      |
//!   |<-frame_size->|
//!   | headroom | data ...  |      (copy mode: data at +256, XDP_PACKET_HEADROOM)
//! ```
//!
//! The first half of the frames only ever circulates fill ring -> RX ring
//! -> user space -> fill ring; the second half TX ring -> completion ring ->
//! free list -> TX ring. Keeping the pools apart means a burst of one
//! direction can never starve the other.
//!
//! # Ownership
//!
//! At any moment each frame is owned either by the kernel (it sits in the
//! fill or TX ring, or between a ring and the matching RX or completion
//! ring) or by user space (popped from the RX or completion ring, or in a
//! free list). User space touches a frame's bytes only while it owns it:
//! that is the contract of [`Umem::frame`] and [`Umem::frame_mut`].
//!
//! Addresses use the aligned-chunk mode (`chunk_size` a power of two, no
//! `XDP_UMEM_UNALIGNED_CHUNK_FLAG`), so the frame holding any address is
//! `addr & !(frame_size - 1)`.

use std::io;
use std::os::fd::BorrowedFd;

use crate::sys::mmap::Mmap;
use crate::sys::xdp;

/// The UMEM area.
#[derive(Debug)]
pub(super) struct Umem {
    map: Mmap,
    frame_size: u32,
    frames: u32,
}

impl Umem {
    /// Maps `frames` frames of `frame_size` bytes (a power of two, at least
    /// 2048), pre-faulted.
    ///
    /// # Errors
    /// `mmap` failed, or the size overflows.
    pub(super) fn new(frames: u32, frame_size: u32) -> io::Result<Self> {
        debug_assert!(frame_size.is_power_of_two() && frame_size >= 2048);
        let len = usize::try_from(u64::from(frames) * u64::from(frame_size))
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        Ok(Self {
            map: Mmap::anonymous(len)?,
            frame_size,
            frames,
        })
    }

    /// Size of one frame.
    pub(super) fn frame_size(&self) -> u32 {
        self.frame_size
    }

    /// UMEM address of frame `i`.
    pub(super) fn frame_addr(&self, i: u32) -> u64 {
        debug_assert!(i < self.frames);
        u64::from(i) * u64::from(self.frame_size)
    }

    /// The start of the frame holding `addr` (aligned-chunk mode).
    #[inline]
    pub(super) fn frame_base(&self, addr: u64) -> u64 {
        addr & !(u64::from(self.frame_size) - 1)
    }

    /// Index of the frame starting at `base`, if `base` is a frame start
    /// inside the area.
    #[inline]
    pub(super) fn frame_index(&self, base: u64) -> Option<u32> {
        let fs = u64::from(self.frame_size);
        if !base.is_multiple_of(fs) {
            return None;
        }
        u32::try_from(base / fs).ok().filter(|&i| i < self.frames)
    }

    /// The `len` bytes at `addr`, if they lie inside one frame of the area.
    ///
    /// The caller owns the frame holding `addr` (the kernel handed it over
    /// through the RX ring and it has not been put back on the fill ring),
    /// so the kernel does not write it while the slice lives.
    #[inline]
    pub(super) fn frame(&mut self, addr: u64, len: u32) -> Option<&[u8]> {
        let base = self.frame_base(addr);
        self.frame_index(base)?;
        if (addr - base) + u64::from(len) > u64::from(self.frame_size) {
            return None;
        }
        // `addr < frames * frame_size = map.len()`, which fits in usize.
        let off = addr as usize;
        self.map.bytes_mut(off, len as usize).map(|b| &*b)
    }

    /// The whole frame starting at `base`, writable.
    ///
    /// The caller owns the frame (it came from the TX free list and is not
    /// in the TX ring), so the kernel neither reads nor writes it while the
    /// slice lives.
    ///
    /// # Panics
    /// `base` is not a frame start inside the area.
    #[inline]
    pub(super) fn frame_mut(&mut self, base: u64) -> &mut [u8] {
        assert!(self.frame_index(base).is_some(), "bad frame {base:#x}");
        let size = self.frame_size as usize;
        // Invariant: `base` starts a frame inside the mapping (asserted).
        self.map
            .bytes_mut(base as usize, size)
            .expect("frames lie inside the mapping")
    }
}

/// Registers the UMEM with socket `fd` (`XDP_UMEM_REG`, no headroom:
/// transmitted frames start at their frame's first byte).
pub(super) fn register(fd: BorrowedFd<'_>, umem: &Umem) -> io::Result<()> {
    xdp::register_umem(fd, &umem.map, umem.frame_size())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_geometry() {
        let mut u = Umem::new(4, 2048).unwrap();
        assert_eq!(u.map.len(), 8192);
        assert_eq!(u.frame_addr(3), 6144);
        assert_eq!(u.frame_base(0x100), 0);
        assert_eq!(u.frame_base(2048 + 256), 2048);
        assert_eq!(u.frame_index(2048), Some(1));
        assert_eq!(u.frame_index(2049), None);
        assert_eq!(u.frame_index(8192), None);
        // No kernel shares this area in the test.
        u.frame_mut(2048)[256..260].copy_from_slice(b"abcd");
        assert_eq!(u.frame(2048 + 256, 4), Some(&b"abcd"[..]));
        // Crosses into the next frame, or past the end.
        assert_eq!(u.frame(2048 + 2000, 100), None);
        assert_eq!(u.frame(8192 - 10, 20), None);
        assert_eq!(u.frame(8192, 1), None);
        assert_eq!(u.frame(0, 2048).map(<[u8]>::len), Some(2048));
    }
}
