// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Dirty-page logging for live migration (`VHOST_F_LOG_ALL`,
//! `VHOST_USER_PROTOCOL_F_LOG_SHMFD`).
//!
//! The frontend shares a bitmap (`SET_LOG_BASE`): bit `p` stands for the
//! 4 KiB guest-physical page `p` (bit `p % 8` of byte `p / 8`). While the
//! log is on, every page the device writes — RX buffers, used-ring entries,
//! the used index, the event-suppression fields — is marked, after the write
//! and before the used index that makes it visible to the driver is
//! published, so the frontend re-sends it.
//!
//! Marks go through a per-ring [`LogCache`]: a burst collects its pages in a
//! few 64-bit words (64 pages each) and ORs each word into the shared bitmap
//! once, atomically (the frontend clears bits concurrently), with one release
//! fence before the first: the cost is per burst, not per byte. A mark
//! outside the bitmap (a frontend that gave a log too small for its memory)
//! is dropped and counted ([`DirtyLog::dropped`]), never written.
//!
//! With the log off, rings carry no [`RingLog`]: the fast path tests one
//! `Option` per frame and per burst.
//!
//! The bitmap is the frontend's file, mapped like guest memory
//! ([`GuardedMap`]): only a regular file holding the whole range is
//! mapped, between guard areas, without pre-faulting it (a frontend may
//! send a log of 1 GiB; only the words marked are charged to this
//! process), and registered for SIGBUS recovery: a frontend that truncates
//! its log after `SET_LOG_BASE` loses its own marks, it does not kill the
//! process.

use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use super::memory::GuestMemory;
use super::Seg;
use crate::sys::guarded::GuardedMap;

/// Guest page size the log counts in (fixed by the vhost protocol).
pub const LOG_PAGE_SHIFT: u32 = 12;

/// Largest log accepted: 1 GiB of bitmap covers 32 TiB of guest memory.
pub const MAX_LOG_SIZE: u64 = 1 << 30;

/// Words one burst collects before they are written out.
const CACHE_WORDS: usize = 32;

/// The environment variable that, when set to a non-empty value other than
/// `0`, makes a port accept `SET_LOG_BASE` but never mark a page: a debug
/// switch for the migration test that shows it catches the corruption.
/// Never set it in production: migrated guests then see stale RX buffers.
pub const NO_DIRTY_LOG_ENV: &str = "VHU_DEBUG_NO_DIRTY_LOG";

/// The dirty-page bitmap a frontend shared.
#[derive(Debug)]
pub struct DirtyLog {
    map: GuardedMap,
    dropped: AtomicU64,
    warned: AtomicBool,
}

impl DirtyLog {
    /// Maps `size` bytes of `file` at `offset` (`SET_LOG_BASE`).
    ///
    /// # Errors
    /// A zero or oversized log, a misaligned offset, an fd that is not a
    /// regular file or a range beyond its end (touching it would fault),
    /// or a failed `mmap`.
    pub(crate) fn map(file: &File, size: u64, offset: u64) -> io::Result<Self> {
        let invalid = |what: &str| io::Error::new(io::ErrorKind::InvalidInput, what.to_owned());
        if size == 0 || size > MAX_LOG_SIZE {
            return Err(invalid("log size is 0 or above 1 GiB"));
        }
        if !offset.is_multiple_of(crate::sys::mmap::page_size() as u64) {
            return Err(invalid("log offset is not page-aligned"));
        }
        let len = usize::try_from(size).map_err(|_| invalid("log size"))?;
        // File type and size are checked there (`check_guest_file`).
        let map = GuardedMap::map(Some(file.as_fd()), offset, len)?;
        Ok(Self::from_map(map))
    }

    fn from_map(map: GuardedMap) -> Self {
        Self {
            map,
            dropped: AtomicU64::new(0),
            warned: AtomicBool::new(false),
        }
    }

    /// A private, zeroed log of `size` bytes (tests and benchmarks).
    #[cfg(any(test, feature = "test-utils"))]
    pub(crate) fn anonymous(size: usize) -> Self {
        Self::from_map(GuardedMap::map(None, 0, size).expect("anonymous log"))
    }

    /// The bitmap's size in bytes.
    #[cfg(any(test, feature = "test-utils"))]
    pub fn size(&self) -> usize {
        self.map.len()
    }

    /// Page marks dropped because they fell outside the bitmap.
    #[cfg(any(test, feature = "test-utils"))]
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Whether guest page `page` is marked.
    #[cfg(any(test, feature = "test-utils"))]
    pub fn is_dirty(&self, page: u64) -> bool {
        usize::try_from(page / 8)
            .ok()
            .and_then(|b| self.map.atomic_u8(b))
            .is_some_and(|b| b.load(Ordering::Relaxed) & (1 << (page % 8)) != 0)
    }

    /// Number of marked pages.
    #[cfg(any(test, feature = "test-utils"))]
    pub fn count_dirty(&self) -> u64 {
        (0..self.map.len())
            .filter_map(|b| self.map.atomic_u8(b))
            .map(|b| u64::from(b.load(Ordering::Relaxed).count_ones()))
            .sum()
    }

    /// ORs `bits` (pages `64 * word ..`) into the bitmap: one atomic
    /// 64-bit OR when the word lies inside, byte ORs for a partial last
    /// word, and the rest is dropped and counted.
    fn or_word(&self, word: u64, bits: u64) {
        let off = word.checked_mul(8).and_then(|o| usize::try_from(o).ok());
        if let Some(w) = off.and_then(|o| self.map.atomic_u64(o)) {
            w.fetch_or(bits.to_le(), Ordering::Relaxed);
            return;
        }
        let mut lost = 0;
        for j in 0..8 {
            let b = (bits >> (8 * j)) as u8;
            if b == 0 {
                continue;
            }
            match off
                .and_then(|o| o.checked_add(j))
                .and_then(|o| self.map.atomic_u8(o))
            {
                Some(a) => {
                    a.fetch_or(b, Ordering::Relaxed);
                }
                None => lost += u64::from(b.count_ones()),
            }
        }
        if lost != 0 {
            self.dropped.fetch_add(lost, Ordering::Relaxed);
            if !self.warned.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    "dirty log of {} bytes is too small for the pages written; \
                     marks outside it are dropped",
                    self.map.len()
                );
            }
        }
    }
}

/// A burst's worth of page marks, written out by [`LogCache::flush`].
#[derive(Debug)]
pub(crate) struct LogCache {
    log: Arc<DirtyLog>,
    words: [u64; CACHE_WORDS],
    bits: [u64; CACHE_WORDS],
    n: usize,
}

impl LogCache {
    pub(crate) fn new(log: Arc<DirtyLog>) -> Self {
        Self {
            log,
            words: [0; CACHE_WORDS],
            bits: [0; CACHE_WORDS],
            n: 0,
        }
    }

    /// Marks every page of `[gpa, gpa + len)`.
    #[inline]
    pub(crate) fn mark(&mut self, gpa: u64, len: u64) {
        if len == 0 {
            return;
        }
        let first = gpa >> LOG_PAGE_SHIFT;
        let last = gpa.saturating_add(len - 1) >> LOG_PAGE_SHIFT;
        for page in first..=last {
            self.mark_page(page);
        }
    }

    #[inline]
    fn mark_page(&mut self, page: u64) {
        let word = page >> 6;
        let bit = 1u64 << (page & 63);
        // The last word first: consecutive marks mostly hit it.
        if let Some(i) = (0..self.n).rev().find(|&i| self.words[i] == word) {
            self.bits[i] |= bit;
            return;
        }
        if self.n == CACHE_WORDS {
            self.flush();
        }
        self.words[self.n] = word;
        self.bits[self.n] = bit;
        self.n += 1;
    }

    /// Writes the collected marks into the shared bitmap, after everything
    /// written to guest memory before (release fence).
    #[inline]
    pub(crate) fn flush(&mut self) {
        if self.n == 0 {
            return;
        }
        fence(Ordering::Release);
        for i in 0..self.n {
            self.log.or_word(self.words[i], self.bits[i]);
        }
        self.n = 0;
    }

    /// Marks `[gpa, gpa + len)` and writes it out at once (a field stored
    /// outside a burst: event suppression, the used index just published).
    pub(crate) fn mark_now(&mut self, gpa: u64, len: u64) {
        self.mark(gpa, len);
        self.flush();
    }
}

/// What a ring needs to log its writes: the bitmap and the guest-physical
/// address its device-written area is logged at (`log_guest_addr` of
/// `SET_VRING_ADDR` for a split ring's used ring).
#[derive(Debug, Clone)]
pub(crate) struct LogTarget {
    pub log: Arc<DirtyLog>,
    pub used_gpa: u64,
}

/// The logging state a running ring carries while the log is on.
#[derive(Debug)]
pub(crate) struct RingLog {
    pub cache: LogCache,
    /// Split: the used ring's GPA. Packed: the descriptor ring's.
    pub area: u64,
    /// Packed: the device event suppression area's GPA.
    pub device: u64,
}

impl RingLog {
    pub(crate) fn new(t: &LogTarget, area: u64, device: u64) -> Box<Self> {
        Box::new(Self {
            cache: LogCache::new(Arc::clone(&t.log)),
            area,
            device,
        })
    }

    /// Marks the first `len` bytes of the buffers `segs` (an RX frame just
    /// written), translated back to guest-physical addresses.
    pub(crate) fn mark_segs(&mut self, mem: &GuestMemory, segs: &[Seg], mut len: usize) {
        let mut hint = 0;
        for s in segs {
            if len == 0 {
                break;
            }
            let n = len.min(s.len() as usize);
            // Every Seg was translated from `mem` (ring invariant).
            if let Some(gpa) = mem.hva_to_gpa(s.hva(), &mut hint) {
                self.cache.mark(gpa, n as u64);
            }
            len -= n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_pages_once_per_word_and_drops_outside() {
        let log = Arc::new(DirtyLog::anonymous(4096));
        let mut c = LogCache::new(Arc::clone(&log));
        // Three pages, one frame across a page boundary, and a repeat.
        c.mark(0x1000, 1);
        c.mark(0x2ffe, 4);
        c.mark(0x1800, 16);
        assert_eq!(log.count_dirty(), 0, "nothing before the flush");
        c.flush();
        assert_eq!(log.count_dirty(), 3);
        for p in [1, 2, 3] {
            assert!(log.is_dirty(p), "page {p}");
        }
        assert!(!log.is_dirty(0) && !log.is_dirty(4));
        // 4096 bytes cover pages below 32768 (128 MiB); beyond is dropped.
        c.mark_now(32767 << 12, 2 << 12);
        assert!(log.is_dirty(32767));
        assert_eq!(log.dropped(), 1);
        c.mark_now(u64::MAX - 10, 100);
        assert_eq!(log.dropped(), 2);
        assert_eq!(log.count_dirty(), 4);
    }

    #[test]
    fn a_partial_last_word_is_marked_bytewise() {
        // 12 bytes: one whole word (pages 0-63), then 4 bytes (64-95).
        let log = Arc::new(DirtyLog::anonymous(12));
        let mut c = LogCache::new(Arc::clone(&log));
        c.mark_page(63);
        c.mark_page(64);
        c.mark_page(95);
        c.mark_page(96);
        c.flush();
        assert!(log.is_dirty(63) && log.is_dirty(64) && log.is_dirty(95));
        assert_eq!(log.count_dirty(), 3);
        assert_eq!(log.dropped(), 1, "page 96 is outside a 12-byte log");
        // More words than the cache holds in one burst.
        let log = Arc::new(DirtyLog::anonymous(4096));
        let mut c = LogCache::new(Arc::clone(&log));
        for p in 0..40 {
            c.mark_page(p * 64 + 5);
        }
        c.flush();
        assert_eq!(log.count_dirty(), 40);
    }

    #[test]
    fn hostile_log_files_are_refused() {
        let f = tempfile();
        f.set_len(8192).unwrap();
        assert!(DirtyLog::map(&f, 0, 0).is_err(), "empty");
        assert!(DirtyLog::map(&f, 8193, 0).is_err(), "beyond the file");
        assert!(DirtyLog::map(&f, 4096, 100).is_err(), "misaligned");
        assert!(DirtyLog::map(&f, 4096, u64::MAX - 4095).is_err(), "wraps");
        assert!(DirtyLog::map(&f, MAX_LOG_SIZE + 1, 0).is_err(), "huge");
        let log = DirtyLog::map(&f, 4096, 4096).unwrap();
        assert_eq!(log.size(), 4096);
    }

    /// A frontend that truncates its log after `SET_LOG_BASE`: the marks
    /// into the lost pages land in zeroed private pages (counted), the
    /// process lives on. Before the log was mapped under SIGBUS protection
    /// the first such mark killed it.
    #[test]
    fn a_truncated_log_costs_its_own_marks_only() {
        let page = crate::sys::mmap::page_size() as u64;
        let f = tempfile();
        f.set_len(4 * page).unwrap();
        let log = Arc::new(DirtyLog::map(&f, 4 * page, 0).unwrap());
        let mut c = LogCache::new(Arc::clone(&log));
        c.mark_now(0, 1);
        assert!(log.is_dirty(0));
        f.set_len(page).unwrap();
        let before = crate::sys::sigbus::faults();
        // Page 3 of the log: guest pages from 3 * 8 * page on.
        let gpa = (3 * page * 8) << LOG_PAGE_SHIFT;
        c.mark_now(gpa, 1);
        assert!(crate::sys::sigbus::faults() > before, "recovered, counted");
        assert!(log.is_dirty(0), "what the file still has is shared");
    }

    #[test]
    fn a_log_fd_must_be_a_regular_file() {
        let zero = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/zero")
            .unwrap();
        let e = DirtyLog::map(&zero, 4096, 0).unwrap_err();
        assert!(e.to_string().contains("character device"), "{e}");
    }

    /// An unlinked, empty temporary file of this test's own (tests run
    /// in parallel threads of one process).
    fn tempfile() -> File {
        crate::sys::guarded::tests::tempfile_with(&[])
    }
}

#[cfg(all(test, feature = "test-utils"))]
mod loopback_tests {
    use super::LOG_PAGE_SHIFT;
    use crate::ring::Layout;
    use crate::test_utils::{LoopbackGuest, LoopbackOpts};
    use std::collections::BTreeSet;

    /// The pages of `[gpa, gpa + len)`.
    fn pages(gpa: u64, len: u64) -> impl Iterator<Item = u64> {
        (gpa >> LOG_PAGE_SHIFT)..=((gpa + len - 1) >> LOG_PAGE_SHIFT)
    }

    #[test]
    fn an_echo_burst_marks_exactly_the_pages_it_wrote() {
        for packed in [false, true] {
            let opts = LoopbackOpts {
                packed,
                ..LoopbackOpts::default()
            };
            let mut lg = LoopbackGuest::with_dirty_log(opts);
            let frame = vec![0x33u8; 1000];
            assert_eq!(lg.post_tx(&frame, 8), 8);
            assert_eq!(lg.post_rx(8), 8);
            assert_eq!(lg.dirty_log().unwrap().count_dirty(), 0);
            assert_eq!(lg.qp.echo_burst(32), 8);
            let mut want = BTreeSet::new();
            for i in 0..8 {
                want.extend(pages(lg.buffer_gpa(true, i), (lg.hdr_len() + 1000) as u64));
            }
            for rx in [true, false] {
                match lg.layout(rx) {
                    // Used entries 0-7, the used index.
                    Layout::Split(l) => want.extend(pages(l.used, 4 + 8 * 8)),
                    // Used descriptors in slots 0-7.
                    Layout::Packed(l) => want.extend(pages(l.desc, 16 * 8)),
                }
            }
            let log = lg.dirty_log().unwrap();
            let (start, len) = lg.memory_range();
            let got: BTreeSet<u64> = pages(0, start + len).filter(|&p| log.is_dirty(p)).collect();
            assert_eq!(got, want, "packed={packed}");
            assert_eq!(log.dropped(), 0);
            assert_eq!(lg.reap_rx().0, 8);
        }
        let mut plain = LoopbackGuest::new(LoopbackOpts::default());
        assert!(plain.dirty_log().is_none());
        assert_eq!(plain.post_tx(&[0u8; 60], 1), 1);
        assert_eq!(plain.post_rx(1), 1);
        assert_eq!(plain.qp.echo_burst(1), 1);
    }
}
