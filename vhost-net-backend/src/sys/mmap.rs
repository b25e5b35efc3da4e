// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! An owned memory mapping, unmapped on drop, with bounds-checked access.
//!
//! Packet and XDP sockets share their rings (and AF_XDP its UMEM) with the
//! kernel through such a mapping. The kernel is the only other party: it
//! reads or writes a range only while the ring protocol gives that range
//! to it. The accessors here keep every access inside the mapping and
//! aligned, and use atomics for the words both sides write (ring indices,
//! status words); which ranges the protocol gives user space is the
//! caller's bookkeeping, stated where it takes a slice.
//!
//! Within this process, a byte slice borrows the whole mapping mutably, so
//! no atomic word or other slice can be used while it lives.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::ptr::{self, NonNull};
use std::sync::atomic::AtomicU32;

use super::check;

/// An owned memory mapping, unmapped on drop.
#[derive(Debug)]
pub(crate) struct Mmap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; moving the owner
// to another thread moves the only handle to it.
unsafe impl Send for Mmap {}
// SAFETY: shared access hands out only atomics (`atomic_u32`) and the
// raw base address; byte slices and plain writes need `&mut self`.
unsafe impl Sync for Mmap {}

impl Mmap {
    /// Private anonymous memory, pre-faulted (the UMEM). `MAP_POPULATE`
    /// here and in [`Self::shared_populated`] is for memory of sizes we
    /// choose (an uplink's UMEM and rings); guest-supplied files are
    /// mapped by `sys::guarded`, never pre-faulted.
    pub(crate) fn anonymous(len: usize) -> io::Result<Self> {
        mmap(
            len,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
            -1,
            0,
        )
    }

    /// A shared mapping of a socket's rings (packet sockets map all their
    /// rings at once, from offset 0).
    pub(crate) fn shared(fd: BorrowedFd<'_>, len: usize) -> io::Result<Self> {
        mmap(len, libc::MAP_SHARED, fd.as_raw_fd(), 0)
    }

    /// A shared mapping of the socket ring at byte offset `offset` (AF_XDP
    /// selects its rings by offset), pre-faulted.
    pub(crate) fn shared_populated(
        fd: BorrowedFd<'_>,
        len: usize,
        offset: u64,
    ) -> io::Result<Self> {
        let off = libc::off_t::try_from(offset)
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        mmap(
            len,
            libc::MAP_SHARED | libc::MAP_POPULATE,
            fd.as_raw_fd(),
            off,
        )
    }

    /// Start of the mapping, as an address (for `XDP_UMEM_REG`).
    pub(crate) fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    /// Start of the mapping.
    pub(super) fn as_ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    /// Length of the mapping in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether `len` bytes at `off` lie inside the mapping.
    #[inline]
    fn contains(&self, off: usize, len: usize) -> bool {
        off <= self.len && len <= self.len - off
    }

    /// Pointer to the 32-bit word at byte offset `off`.
    ///
    /// # Panics
    /// `off` is not 4-byte aligned or the word is not inside the mapping.
    #[inline]
    #[allow(clippy::cast_ptr_alignment)] // 4-byte alignment checked here
    fn word(&self, off: usize) -> *mut u32 {
        assert!(
            off.is_multiple_of(4) && self.contains(off, 4),
            "word {off:#x} outside the mapping"
        );
        // SAFETY: `off + 4 <= len` (checked), so the result stays inside
        // the mapping; the mapping is page-aligned and `off` a multiple of
        // 4, so the word is aligned.
        unsafe { self.ptr.as_ptr().add(off).cast::<u32>() }
    }

    /// The 32-bit word at byte offset `off`, shared with the kernel.
    ///
    /// # Panics
    /// `off` is not 4-byte aligned or the word is not inside the mapping.
    #[inline]
    pub(crate) fn atomic_u32(&self, off: usize) -> &AtomicU32 {
        // SAFETY: the word is inside the mapping and aligned (`word`); the
        // mapping lives as long as `&self`, and this process accesses
        // shared words only through atomics (slices need `&mut self`).
        unsafe { AtomicU32::from_ptr(self.word(off)) }
    }

    /// Writes the 32-bit word at byte offset `off` (volatile: the kernel
    /// reads it later).
    ///
    /// # Panics
    /// `off` is not 4-byte aligned or the word is not inside the mapping.
    #[inline]
    pub(crate) fn write_u32(&mut self, off: usize, val: u32) {
        // SAFETY: inside the mapping and aligned (`word`); `&mut self`
        // excludes every other access from this process.
        unsafe { self.word(off).write_volatile(val) };
    }

    /// The `len` bytes at `off`, if they lie inside the mapping.
    ///
    /// The caller takes only a range the ring protocol gives to user space
    /// for as long as the slice lives.
    #[inline]
    pub(crate) fn bytes_mut(&mut self, off: usize, len: usize) -> Option<&mut [u8]> {
        if !self.contains(off, len) {
            return None;
        }
        // SAFETY: the range is inside the mapping (checked); `&mut self`
        // excludes every other access from this process while the slice
        // lives, and the kernel does not touch a range the protocol gives
        // to user space.
        Some(unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(off), len) })
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` describe a mapping this value created and owns;
        // every ring or slice derived from it is owned by (and dropped with)
        // the structure owning this `Mmap`.
        let r = unsafe { munmap(self.ptr, self.len) };
        debug_assert!(r.is_ok(), "munmap failed: {r:?}");
    }
}

/// The page size (4096 if `sysconf` will not say).
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).unwrap_or(4096)
}

/// Maps `len` bytes readable and writable at an address the kernel picks.
fn mmap(len: usize, flags: libc::c_int, fd: RawFd, off: libc::off_t) -> io::Result<Mmap> {
    if len == 0 {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    // SAFETY: a null hint without MAP_FIXED never replaces an existing
    // mapping; the new mapping is owned by the returned `Mmap`.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            fd,
            off,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned NULL"))?;
    Ok(Mmap { ptr, len })
}

/// Unmaps `len` bytes at `ptr`.
///
/// # Safety
///
/// `ptr`/`len` describe a whole mapping created by [`mmap`], and no
/// reference into it is used afterwards.
unsafe fn munmap(ptr: NonNull<u8>, len: usize) -> io::Result<()> {
    // SAFETY: the caller guarantees the range is our mapping and unused.
    check(unsafe { libc::munmap(ptr.as_ptr().cast::<libc::c_void>(), len) }).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn accessors_stay_inside() {
        let mut m = Mmap::anonymous(4096).unwrap();
        assert_eq!(m.len(), 4096);
        m.write_u32(8, 7);
        assert_eq!(m.atomic_u32(8).load(Ordering::Relaxed), 7);
        m.atomic_u32(4092).store(3, Ordering::Relaxed);
        assert_eq!(m.bytes_mut(4092, 4), Some(&mut 3u32.to_ne_bytes()[..]));
        assert!(m.bytes_mut(4093, 4).is_none());
        assert!(m.bytes_mut(4097, 0).is_none());
        assert_eq!(m.bytes_mut(4096, 0).map(|b| b.len()), Some(0));
        assert!(std::panic::catch_unwind(|| m.atomic_u32(4096).load(Ordering::Relaxed)).is_err());
        assert!(std::panic::catch_unwind(|| m.atomic_u32(2).load(Ordering::Relaxed)).is_err());
        assert!(Mmap::anonymous(0).is_err());
    }
}
