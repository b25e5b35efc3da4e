// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Surviving a frontend that shrinks its memory file under our mapping.
//!
//! A region of guest memory is a shared mapping of the frontend's file
//! (a memfd, a hugetlbfs file). Should the frontend truncate that file
//! after `SET_MEM_TABLE`, or should a hugetlbfs file have no page left to
//! back a hole, the next access to the lost part — a descriptor or buffer
//! the guest points there — is a SIGBUS, and by default the whole process
//! dies with every other guest's port. DPDK's vhost library and QEMU's
//! libvhost-user die there.
//!
//! Here each mapped region is registered (`register`); a SIGBUS handler
//! looks the faulting address up, maps one page of private zeroed memory
//! over the faulting page (of the region's page size) and returns, so the
//! access is retried and reads zeros or writes into memory nobody else
//! sees. The frontend that shrank its memory gets garbage for its own
//! frames; nothing else changes. Each such page is counted
//! ([`faults`]). A fault outside every registered region puts the
//! previous disposition back and returns: the access faults again and the
//! previous handler (Rust's, a fuzzer's, the default) takes it.
//!
//! The handler only does async-signal-safe work: atomic loads, one
//! `mmap`, one `sigaction`.
//!
//! The registry has no process-wide limit that one frontend could use up
//! for the others (it once had 4096 slots; five ports of 509 regions each,
//! the vhost-user maximum, left every later region unprotected): it is a
//! list of fixed chunks of slots, the first static, more allocated by
//! `register` (on a control thread, never in the handler) when every
//! slot is taken, linked with one atomic pointer and never freed, so the
//! handler walks it with atomic loads only. It grows to the most regions
//! mapped at once over all ports, which the per-port cap on guest memory
//! and `MAX_MEM_SLOTS` bound, and freed slots are reused.

use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

use super::check;

/// Slots per chunk of the registry.
const CHUNK: usize = 1024;

/// A chunk of registry slots. A free slot has `start[i] == 0`. `end[i]`
/// and `page[i]` are written after `start[i]` is claimed and cleared
/// before it is released; a reader that sees `end[i] == 0` treats the
/// slot as free.
struct Chunk {
    start: [AtomicUsize; CHUNK],
    end: [AtomicUsize; CHUNK],
    page: [AtomicUsize; CHUNK],
    /// The next chunk, or null; set once, never cleared.
    next: AtomicPtr<Chunk>,
}

impl Chunk {
    const fn new() -> Self {
        Self {
            start: [const { AtomicUsize::new(0) }; CHUNK],
            end: [const { AtomicUsize::new(0) }; CHUNK],
            page: [const { AtomicUsize::new(0) }; CHUNK],
            next: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// The chunk after this one, if any.
    fn next(&self) -> Option<&'static Chunk> {
        let p = self.next.load(Ordering::Acquire);
        // SAFETY: a non-null `next` is a chunk leaked by `grow` (never
        // freed, never moved), fully initialised before it was published
        // with release ordering.
        (!p.is_null()).then(|| unsafe { &*p })
    }

    /// Appends a new chunk after this one (or finds the one another thread
    /// appended meanwhile) and returns it.
    fn grow(&self) -> &'static Chunk {
        let fresh = Box::into_raw(Box::new(Chunk::new()));
        match self.next.compare_exchange(
            ptr::null_mut(),
            fresh,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            // SAFETY: `fresh` was just leaked and is now published; it is
            // never freed.
            Ok(_) => unsafe { &*fresh },
            Err(other) => {
                // SAFETY: `fresh` was never published: we still own it.
                drop(unsafe { Box::from_raw(fresh) });
                // SAFETY: as in `next`.
                unsafe { &*other }
            }
        }
    }
}

/// The registry's first chunk; the others hang off it.
static FIRST: Chunk = Chunk::new();

static FAULTS: AtomicU64 = AtomicU64::new(0);

/// The disposition of SIGBUS before ours, or the error installing ours.
static PREVIOUS: OnceLock<Result<Previous, i32>> = OnceLock::new();

/// `libc::sigaction` holds raw pointers; it is written once, before the
/// handler can run, and only read afterwards.
struct Previous(libc::sigaction);

// SAFETY: written once (inside `OnceLock`) and then only read; the
// pointers it holds are to functions, valid for the process's life.
unsafe impl Sync for Previous {}
// SAFETY: as for `Sync`.
unsafe impl Send for Previous {}

/// Pages of guest memory replaced by zeros after a SIGBUS, since start.
pub fn faults() -> u64 {
    FAULTS.load(Ordering::Relaxed)
}

/// A registered region; unregisters on drop.
#[derive(Debug)]
pub(crate) struct Registration(Option<(&'static Chunk, usize)>);

impl std::fmt::Debug for Chunk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Chunk")
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some((c, i)) = self.0 {
            c.end[i].store(0, Ordering::Release);
            c.page[i].store(0, Ordering::Release);
            c.start[i].store(0, Ordering::Release);
        }
    }
}

/// Registers `[start, start + len)`, mapped from a file with pages of
/// `page` bytes (a power of two; `start` and `len` multiples of it), so
/// that a SIGBUS inside it is recovered. Drop the registration before
/// unmapping the range.
///
/// # Errors
/// The handler could not be installed (`sigaction` failed): the caller
/// must not map guest memory unprotected.
pub(crate) fn register(start: usize, len: usize, page: usize) -> std::io::Result<Registration> {
    debug_assert!(page.is_power_of_two() && start.is_multiple_of(page));
    if start == 0 {
        // A slot holding 0 is a free one; a mapping never starts there.
        return Err(std::io::Error::from(std::io::ErrorKind::InvalidInput));
    }
    install().map_err(std::io::Error::from_raw_os_error)?;
    let mut c: &'static Chunk = &FIRST;
    loop {
        for i in 0..CHUNK {
            if c.start[i]
                .compare_exchange(0, start, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                c.page[i].store(page, Ordering::Release);
                c.end[i].store(start + len, Ordering::Release);
                return Ok(Registration(Some((c, i))));
            }
        }
        c = match c.next() {
            Some(n) => n,
            None => c.grow(),
        };
    }
}

/// Installs the handler once; the error of the first attempt stays.
fn install() -> Result<(), i32> {
    let r = PREVIOUS.get_or_init(|| {
        // SAFETY: an all-zero `sigaction` is a valid value of that plain
        // struct (no handler, empty mask, no flags).
        let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
        act.sa_sigaction = on_sigbus as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        // SAFETY: as above.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: `act` and `old` are valid for the call; the handler it
        // installs is async-signal-safe (`on_sigbus`).
        match check(unsafe { libc::sigaction(libc::SIGBUS, &raw const act, &raw mut old) }) {
            Ok(_) => Ok(Previous(old)),
            Err(e) => Err(e.raw_os_error().unwrap_or(libc::EINVAL)),
        }
    });
    r.as_ref().map(drop).map_err(|&e| e)
}

/// The page size of the registered region holding `addr`. Atomic loads
/// only (called from the handler).
fn lookup(addr: usize) -> Option<usize> {
    let mut c: &'static Chunk = &FIRST;
    loop {
        for i in 0..CHUNK {
            let start = c.start[i].load(Ordering::Acquire);
            if start == 0 || addr < start {
                continue;
            }
            let end = c.end[i].load(Ordering::Acquire);
            let page = c.page[i].load(Ordering::Acquire);
            if addr < end && page != 0 {
                return Some(page);
            }
        }
        c = c.next()?;
    }
}

extern "C" fn on_sigbus(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid `siginfo_t` to an SA_SIGINFO
    // handler; `si_addr` is the faulting address for SIGBUS.
    let addr = unsafe { (*info).si_addr() } as usize;
    if let Some(page) = lookup(addr) {
        let at = addr & !(page - 1);
        // SAFETY: `[at, at + page)` lies inside a registered region, a
        // mapping of ours that stays mapped while registered; replacing
        // one page of it with private memory only changes what this
        // process reads there (zeros), which the ring engine treats as
        // guest data like any other.
        let p = unsafe {
            libc::mmap(
                at as *mut libc::c_void,
                page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if p != libc::MAP_FAILED {
            FAULTS.fetch_add(1, Ordering::Relaxed);
            return;
        }
    }
    // Not ours (or no memory for the page): the previous disposition takes
    // the fault when the access is retried.
    let previous = match PREVIOUS.get() {
        Some(Ok(Previous(old))) => ptr::from_ref(old),
        _ => ptr::null(),
    };
    if previous.is_null() {
        // SAFETY: `SIG_DFL` with an empty mask is a valid disposition.
        let mut dfl: libc::sigaction = unsafe { std::mem::zeroed() };
        dfl.sa_sigaction = libc::SIG_DFL;
        // SAFETY: a valid `sigaction` for the call.
        unsafe { libc::sigaction(libc::SIGBUS, &raw const dfl, ptr::null_mut()) };
    } else {
        // SAFETY: `previous` points at the disposition saved by `install`,
        // which lives for the rest of the process.
        unsafe { libc::sigaction(libc::SIGBUS, previous, ptr::null_mut()) };
    }
}

/// For tests: whether SIGBUS protection is active.
#[cfg(test)]
fn installed() -> std::io::Result<()> {
    install().map_err(std::io::Error::from_raw_os_error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::guarded::tests::tempfile_with;
    use crate::sys::guarded::GuardedMap;
    use std::os::fd::AsFd;

    #[test]
    fn a_truncated_file_reads_as_zeros_and_is_counted() {
        let page = crate::sys::mmap::page_size();
        let f = tempfile_with(&vec![0x77; 4 * page]);
        let m = GuardedMap::map(Some(f.as_fd()), 0, 4 * page).unwrap();
        installed().unwrap();
        let p = m.as_ptr();
        // SAFETY: inside the mapping, alive here.
        assert_eq!(unsafe { p.add(3 * page).read_volatile() }, 0x77);
        // The frontend shrinks its file to one page.
        f.set_len(page as u64).unwrap();
        let before = faults();
        // SAFETY: inside the mapping; the page is gone from the file, the
        // handler puts zeros there.
        let lost = unsafe { p.add(3 * page + 5).read_volatile() };
        assert_eq!(lost, 0);
        assert_eq!(faults(), before + 1);
        // SAFETY: as above: written into private memory.
        unsafe { p.add(2 * page).write_volatile(9) };
        // SAFETY: as above.
        assert_eq!(unsafe { p.add(2 * page).read_volatile() }, 9);
        assert_eq!(faults(), before + 2);
        // What the file still has is shared as before.
        // SAFETY: inside the mapping and the file.
        assert_eq!(unsafe { p.read_volatile() }, 0x77);
        assert_eq!(faults(), before + 2);
        drop(m);
        assert!(lookup(p as usize).is_none(), "unregistered on drop");
    }

    /// More regions than the old registry's 4096 slots (five ports of 509
    /// regions, or one port's tables in flight) are all protected: the
    /// last one's truncation is recovered, not a SIGBUS of the process.
    #[test]
    fn registrations_have_no_process_wide_limit() {
        let page = crate::sys::mmap::page_size();
        let f = tempfile_with(&vec![0x11; 2 * page]);
        installed().unwrap();
        let maps: Vec<_> = (0..CHUNK * 5 + 3)
            .map(|_| GuardedMap::map(Some(f.as_fd()), 0, 2 * page).unwrap())
            .collect();
        let last = maps.last().unwrap().as_ptr();
        assert!(
            lookup(last as usize).is_some(),
            "the last region is registered"
        );
        f.set_len(page as u64).unwrap();
        let before = faults();
        // SAFETY: inside the last mapping, alive here; the page is gone
        // from the file and the handler puts zeros there.
        assert_eq!(unsafe { last.add(page).read_volatile() }, 0);
        assert!(faults() > before);
        drop(maps);
        assert!(lookup(last as usize).is_none(), "unregistered on drop");
        // Freed slots are reused: the registry does not grow again.
        let again = GuardedMap::map(Some(f.as_fd()), 0, page).unwrap();
        assert!(lookup(again.as_ptr() as usize).is_some());
    }
}
