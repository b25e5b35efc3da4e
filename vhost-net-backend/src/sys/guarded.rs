// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! A guest memory region mapped between two inaccessible guard areas.
//!
//! Every guest address is translated and bounds-checked before it is used
//! (`ring/memory.rs`), so no access should ever leave a region. The guards
//! make the "should" hold by construction: a region is mapped inside a
//! larger `PROT_NONE` reservation, so an access that runs past either end
//! of it (a translation bug, a length added twice) faults at once instead
//! of reading or writing whatever the kernel mapped next to it, which in a
//! switch is typically another guest's memory.
//!
//! Each guard is at least one page of the file's own page size (2 MiB or
//! 1 GiB on hugetlbfs, where a mapping must also start on such a page);
//! being reserved, not backed, they cost address space only.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::{self, NonNull};

use super::check;
use super::sigbus::{self, Registration};

/// `f_type` of a hugetlbfs file system (`linux/magic.h`).
const HUGETLBFS_MAGIC: libc::c_long = 0x9584_58f6;

/// A shared mapping of `len` bytes of a file (or anonymous memory) with a
/// guard area on each side; the whole reservation is unmapped on drop.
#[derive(Debug)]
pub(crate) struct GuardedMap {
    /// The reservation: guards and mapping.
    base: NonNull<u8>,
    total: usize,
    /// The first byte asked for.
    start: NonNull<u8>,
    len: usize,
    /// A file mapping's SIGBUS protection (`sigbus.rs`), released before
    /// the mapping.
    sigbus: Option<Registration>,
}

// SAFETY: the value only owns the mapping and hands out its address; the
// accesses through that address are the ring engine's (`ring/`), which
// states their safety where it makes them.
unsafe impl Send for GuardedMap {}
// SAFETY: as for `Send`: `&GuardedMap` gives the address and length only.
unsafe impl Sync for GuardedMap {}

impl GuardedMap {
    /// Maps `len` bytes of `fd` from byte `offset` (any alignment), shared
    /// and read-write, or anonymous private memory when `fd` is `None`.
    pub(crate) fn map(fd: Option<BorrowedFd<'_>>, offset: u64, len: usize) -> io::Result<Self> {
        let invalid = || io::Error::from(io::ErrorKind::InvalidInput);
        if len == 0 || (fd.is_none() && offset != 0) {
            return Err(invalid());
        }
        let small = super::mmap::page_size();
        let page = fd.map_or(small, file_page_size).max(small);
        let lead = usize::try_from(offset % page as u64).map_err(|_| invalid())?;
        let file_off = libc::off_t::try_from(offset - lead as u64).map_err(|_| invalid())?;
        let map_len = lead
            .checked_add(len)
            .and_then(|n| n.checked_next_multiple_of(page))
            .ok_or_else(invalid)?;
        // A guard page on each side, and room to align the mapping to
        // `page` (the reservation itself is only `small`-aligned).
        let total = map_len
            .checked_add(2 * page + (page - small))
            .ok_or_else(invalid)?;
        let base = reserve(total)?;
        let Some(at) = (base.as_ptr() as usize + page).checked_next_multiple_of(page) else {
            // SAFETY: `base`/`total` is the reservation just made, unused.
            let _ = unsafe { unmap(base, total) };
            return Err(invalid());
        };
        // `at - base <= 2 * page - small`, so `[at, at + map_len + page)`
        // lies inside the reservation: a guard of at least `page` bytes
        // stays on each side.
        let (flags, raw_fd) = match fd {
            Some(fd) => (libc::MAP_SHARED | libc::MAP_NORESERVE, fd.as_raw_fd()),
            None => (
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
            ),
        };
        // SAFETY: `[at, at + map_len)` lies inside our own reservation
        // (above), so MAP_FIXED replaces only our PROT_NONE pages; nothing
        // else refers to them.
        let p = unsafe {
            libc::mmap(
                at as *mut libc::c_void,
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags | libc::MAP_FIXED,
                raw_fd,
                file_off,
            )
        };
        if p == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            // SAFETY: the reservation is ours and nothing refers to it.
            let _ = unsafe { unmap(base, total) };
            return Err(e);
        }
        debug_assert_eq!(p as usize, at);
        // `at + lead` is inside the mapping, hence not null.
        let start = NonNull::new((at + lead) as *mut u8).ok_or_else(invalid)?;
        let sigbus = fd.is_some().then(|| sigbus::register(at, map_len, page));
        Ok(Self {
            base,
            total,
            start,
            len,
            sigbus,
        })
    }

    /// The first byte of the region.
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.start.as_ptr()
    }

    /// The region's length (what was asked for; the guards not counted).
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The reservation, guards included: `(start, length)`.
    #[cfg(test)]
    fn reservation(&self) -> (usize, usize) {
        (self.base.as_ptr() as usize, self.total)
    }
}

impl Drop for GuardedMap {
    fn drop(&mut self) {
        drop(self.sigbus.take());
        // SAFETY: `base`/`total` is the reservation this value made and owns
        // (the mapping inside it included); the `Arc`s of the memory table
        // keep this value alive while any ring can still use the region.
        let r = unsafe { unmap(self.base, self.total) };
        debug_assert!(r.is_ok(), "munmap failed: {r:?}");
    }
}

/// The page size a mapping of `fd` must be aligned to: the huge page size
/// on hugetlbfs, else the system page size.
fn file_page_size(fd: BorrowedFd<'_>) -> usize {
    // SAFETY: an all-zero `statfs` is a valid value of that plain struct.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid, writable `statfs` for the call to fill.
    let r = check(unsafe { libc::fstatfs(fd.as_raw_fd(), &raw mut st) });
    if r.is_ok() && st.f_type == HUGETLBFS_MAGIC {
        usize::try_from(st.f_bsize).unwrap_or(0)
    } else {
        0
    }
}

/// Reserves `len` bytes of address space, inaccessible and unbacked.
fn reserve(len: usize) -> io::Result<NonNull<u8>> {
    // SAFETY: a null hint without MAP_FIXED never replaces an existing
    // mapping; the reservation is owned by the caller.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            len,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned NULL"))
}

/// Unmaps `len` bytes at `ptr`.
///
/// # Safety
///
/// `ptr`/`len` is a reservation made by [`reserve`] (with whatever was
/// mapped into it), and nothing inside it is used afterwards.
unsafe fn unmap(ptr: NonNull<u8>, len: usize) -> io::Result<()> {
    // SAFETY: the caller guarantees the range is ours and unused.
    check(unsafe { libc::munmap(ptr.as_ptr().cast::<libc::c_void>(), len) }).map(drop)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsFd;

    /// The protection of the mapping holding `addr`, from `/proc/self/maps`
    /// (`"rw-s"`, `"---p"`, ...), and its range.
    fn protection_at(addr: usize) -> Option<(String, usize, usize)> {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        maps.lines().find_map(|l| {
            let mut f = l.split_whitespace();
            let (range, perms) = (f.next()?, f.next()?);
            let (a, b) = range.split_once('-')?;
            let (a, b) = (
                usize::from_str_radix(a, 16).ok()?,
                usize::from_str_radix(b, 16).ok()?,
            );
            (a <= addr && addr < b).then(|| (perms.to_string(), a, b))
        })
    }

    #[test]
    fn a_file_region_sits_between_inaccessible_guards() {
        let page = crate::sys::mmap::page_size();
        let mut f = tempfile_with(&vec![0x5a; 4 * page]);
        f.flush().unwrap();
        // An unaligned offset: the bytes asked for start at `start`.
        let m = GuardedMap::map(Some(f.as_fd()), page as u64 + 100, 2 * page).unwrap();
        assert_eq!(m.len(), 2 * page);
        let start = m.as_ptr() as usize;
        // SAFETY: the first byte of the mapping just made, alive here.
        let first = unsafe { *m.as_ptr() };
        assert_eq!(first, 0x5a);
        let (perms, a, b) = protection_at(start).unwrap();
        assert_eq!(perms, "rw-s");
        assert!(a <= start - 100 && start + 2 * page <= b);
        let (before, _, _) = protection_at(a - 1).unwrap();
        let (after, _, _) = protection_at(b).unwrap();
        assert_eq!((before.as_str(), after.as_str()), ("---p", "---p"));
        let (rb, rl) = m.reservation();
        assert!(rb < a && b < rb + rl);
        // Gone with the map: no mapping of the file is left (checked by
        // inode: another test's thread may map the freed addresses).
        let ino = std::os::unix::fs::MetadataExt::ino(&f.metadata().unwrap());
        assert!(maps_inode(ino));
        drop(m);
        assert!(!maps_inode(ino), "the file is still mapped");
    }

    /// Whether any mapping of this process is of inode `ino`.
    fn maps_inode(ino: u64) -> bool {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let ino = ino.to_string();
        maps.lines()
            .any(|l| l.split_whitespace().nth(4) == Some(ino.as_str()))
    }

    #[test]
    fn anonymous_regions_are_guarded_too() {
        let page = crate::sys::mmap::page_size();
        let m = GuardedMap::map(None, 0, 3 * page).unwrap();
        let start = m.as_ptr() as usize;
        assert_eq!(protection_at(start).unwrap().0, "rw-p");
        assert_eq!(protection_at(start - 1).unwrap().0, "---p");
        assert_eq!(protection_at(start + 3 * page).unwrap().0, "---p");
        assert!(GuardedMap::map(None, 0, 0).is_err());
        assert!(GuardedMap::map(None, 8, page).is_err());
    }

    /// An unlinked temporary file holding `bytes`.
    pub(crate) fn tempfile_with(bytes: &[u8]) -> std::fs::File {
        let path = std::env::temp_dir().join(format!(
            "vhu-guarded-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        std::fs::remove_file(&path).unwrap();
        f.write_all(bytes).unwrap();
        f
    }
}
