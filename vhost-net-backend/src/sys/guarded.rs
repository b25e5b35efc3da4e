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
use std::sync::atomic::{AtomicU64, AtomicU8};

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
    ///
    /// A file must be a regular file (a memfd, a tmpfs or hugetlbfs file)
    /// holding the whole range ([`check_guest_file`]); its mapping is
    /// registered for SIGBUS recovery, and refused if that cannot be done.
    /// Nothing is pre-faulted (no `MAP_POPULATE`): a frontend's file may be
    /// as large as its guest, and only the pages the rings touch should be
    /// charged to this process.
    pub(crate) fn map(fd: Option<BorrowedFd<'_>>, offset: u64, len: usize) -> io::Result<Self> {
        let invalid = || io::Error::from(io::ErrorKind::InvalidInput);
        if len == 0 || (fd.is_none() && offset != 0) {
            return Err(invalid());
        }
        if let Some(fd) = fd {
            check_guest_file(fd, offset, len as u64)?;
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
        let sigbus = match fd.map(|_| sigbus::register(at, map_len, page)).transpose() {
            Ok(r) => r,
            Err(e) => {
                // SAFETY: the reservation is ours and nothing refers to it.
                let _ = unsafe { unmap(base, total) };
                return Err(io::Error::other(format!(
                    "no SIGBUS protection for guest memory: {e}"
                )));
            }
        };
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

    /// Whether `len` bytes at `off` lie inside the region.
    #[inline]
    fn contains(&self, off: usize, len: usize) -> bool {
        off <= self.len && len <= self.len - off
    }

    /// The 64-bit word at byte offset `off`, if it lies inside the region
    /// and is 8-aligned (a dirty-page log shared with the frontend).
    #[inline]
    #[allow(clippy::cast_ptr_alignment)] // 8-byte alignment checked here
    pub(crate) fn atomic_u64(&self, off: usize) -> Option<&AtomicU64> {
        if !self.contains(off, 8) {
            return None;
        }
        // Inside the mapping (checked): no overflow.
        let p = self.start.as_ptr() as usize + off;
        if !p.is_multiple_of(8) {
            return None;
        }
        // SAFETY: `off + 8 <= len` (checked) keeps the word inside the
        // mapping, and its address is 8-aligned (checked); the mapping
        // lives as long as `&self`, and this process accesses it only
        // through atomics. Should the frontend truncate its file, the
        // access is recovered by the SIGBUS handler (a file mapping is
        // always registered).
        Some(unsafe { AtomicU64::from_ptr(p as *mut u64) })
    }

    /// The byte at offset `off`, if it lies inside the region, as an atomic.
    #[inline]
    pub(crate) fn atomic_u8(&self, off: usize) -> Option<&AtomicU8> {
        if !self.contains(off, 1) {
            return None;
        }
        // SAFETY: `off < len` (checked); a byte needs no alignment; as for
        // `atomic_u64` otherwise.
        Some(unsafe { AtomicU8::from_ptr(self.start.as_ptr().add(off)) })
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

/// Checks a frontend's memory fd before it is mapped: it must be a regular
/// file (a memfd, a tmpfs or hugetlbfs file), not a socket, pipe, device
/// (`/dev/zero` would make the mapping anonymous memory charged to this
/// process, `/dev/mem` physical memory) or directory, and it must hold
/// `[offset, offset + len)`: a mapping past its end faults at the first
/// access there.
///
/// # Errors
/// `InvalidInput` naming the file's type or its size.
pub(crate) fn check_guest_file(fd: BorrowedFd<'_>, offset: u64, len: u64) -> io::Result<()> {
    // SAFETY: an all-zero `stat` is a valid value of that plain struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid, writable `stat` for the call to fill.
    check(unsafe { libc::fstat(fd.as_raw_fd(), &raw mut st) })?;
    let kind = match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => None,
        libc::S_IFSOCK => Some("a socket"),
        libc::S_IFIFO => Some("a pipe"),
        libc::S_IFCHR => Some("a character device"),
        libc::S_IFBLK => Some("a block device"),
        libc::S_IFDIR => Some("a directory"),
        _ => Some("not a regular file"),
    };
    if let Some(kind) = kind {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("the memory fd is {kind}, not a regular file (memfd, tmpfs, hugetlbfs)"),
        ));
    }
    let size = u64::try_from(st.st_size).unwrap_or(0);
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "the range {offset:#x} (+{len:#x}) extends past the end of its file ({size:#x} bytes)"
            ),
        )),
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

    /// Only a regular file holding the whole range is mapped: sockets,
    /// pipes, character devices (`/dev/zero` would be anonymous memory
    /// charged to this process) and directories are refused, and so is a
    /// range past the end of the file.
    #[test]
    fn only_regular_files_holding_the_range_are_mapped() {
        let page = crate::sys::mmap::page_size();
        let refused = |fd: BorrowedFd<'_>, what: &str| {
            let e = GuardedMap::map(Some(fd), 0, page).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{what}: {e}");
            assert!(e.to_string().contains(what), "{e}");
        };
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        refused(a.as_fd(), "a socket");
        let (r, _w) = std::io::pipe().unwrap();
        refused(r.as_fd(), "a pipe");
        let zero = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/zero")
            .unwrap();
        refused(zero.as_fd(), "a character device");
        let dir = std::fs::File::open(std::env::temp_dir()).unwrap();
        refused(dir.as_fd(), "a directory");
        let f = tempfile_with(&vec![0; 2 * page]);
        let past = |off: u64, len: usize| GuardedMap::map(Some(f.as_fd()), off, len);
        assert!(past(0, 3 * page)
            .unwrap_err()
            .to_string()
            .contains("past the end"));
        assert!(past(page as u64 + 1, page).is_err());
        assert!(past(u64::MAX - 10, page).is_err(), "offset + size wraps");
        assert!(past(page as u64, page).is_ok());
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
