// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The split virtqueue (virtio 1.x, 2.7) from the device side, over guest
//! memory translated once per configuration.
//!
//! Layout in guest memory for a ring of `N` entries:
//!
//! ```text
//! desc  : N x { addr: u64, len: u32, flags: u16, next: u16 }   16-aligned
//! avail : flags: u16, idx: u16, ring: [u16; N], used_event: u16  2-aligned
//! used  : flags: u16, idx: u16, ring: [{id: u32, len: u32}; N], avail_event: u16   4-aligned
//! ```
//!
//! Everything the guest wrote is read once into a local (descriptors are
//! copied whole) and validated: head and `next` indices against `N`, chain
//! length against `N` (or the indirect table size), every buffer against
//! the mapped regions. `avail.idx` is read with one acquire load per burst;
//! used elements are written with plain volatile stores and published with
//! one release store of `used.idx` per burst.

use std::num::Wrapping;
use std::sync::atomic::{fence, AtomicU16, Ordering};
use std::sync::Arc;

use super::log::RingLog;
use super::memory::GuestMemory;
use super::{read_desc_words, Mark, Popped, Seg, SegVec, UsedId};
use crate::stats::DropReason;

use super::flags::{
    AVAIL_F_NO_INTERRUPT, DESC_F_INDIRECT, DESC_F_NEXT, DESC_F_WRITE, USED_F_NO_NOTIFY,
};

/// Guest physical addresses and size of a split ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SplitLayout {
    /// Descriptor table.
    pub desc: u64,
    /// Available (driver) ring.
    pub avail: u64,
    /// Used (device) ring.
    pub used: u64,
    /// Number of entries, a power of two.
    pub size: u16,
}

/// Why a ring could not be set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RingError {
    /// The size is zero, too large or not a power of two.
    #[error("invalid ring size {0}")]
    Size(u16),
    /// A ring area is not inside one mapped region.
    #[error("{0} ring is not inside guest memory")]
    Unmapped(&'static str),
    /// A ring area is misaligned.
    #[error("{0} ring is misaligned")]
    Misaligned(&'static str),
}

/// One descriptor, copied out of guest memory.
#[derive(Debug, Clone, Copy)]
struct Desc {
    addr: u64,
    len: u32,
    flags: u16,
    next: u16,
}

/// A split ring owned by exactly one data-plane thread.
#[derive(Debug)]
pub(crate) struct SplitRing {
    /// Keeps `desc`, `avail` and `used` (and every buffer) mapped.
    pub(super) mem: Arc<GuestMemory>,
    desc: usize,
    avail: usize,
    used: usize,
    size: u16,
    /// Next avail entry to consume.
    next_avail: Wrapping<u16>,
    /// Next used entry to write (the shadow used index).
    next_used: Wrapping<u16>,
    /// The `used.idx` the guest can see.
    published_used: Wrapping<u16>,
    /// `used.idx` at the last notification decision (EVENT_IDX).
    signalled_used: Option<Wrapping<u16>>,
    /// Last `avail.idx` read.
    avail_cache: Wrapping<u16>,
    event_idx: bool,
    indirect: bool,
    /// Whether kicks are currently wanted.
    notify_enabled: bool,
    /// Last region that satisfied a lookup.
    hint: usize,
    /// Set once the guest broke the ring (e.g. an avail index running more
    /// than `size` ahead); the ring is not processed further.
    broken: bool,
    /// Dirty-page logging, while the frontend has it on.
    pub(super) log: Option<Box<RingLog>>,
    /// Descriptor reads left to this burst's chain walks
    /// ([`super::BURST_DESC_BUDGET`]); reset at publication, once a burst.
    walk_budget: u32,
}

// SAFETY: the raw addresses point into the mappings kept alive by `mem`
// (an `Arc`), which is Send + Sync; a `SplitRing` is used by one thread at a
// time (it is moved, never shared).
unsafe impl Send for SplitRing {}

impl SplitRing {
    /// Sets up a ring over `mem`; `next_avail` is where the frontend says to
    /// start (`SET_VRING_BASE`) and the used index is read from guest memory.
    pub(crate) fn new(
        mem: Arc<GuestMemory>,
        layout: SplitLayout,
        next_avail: u16,
        event_idx: bool,
        indirect: bool,
    ) -> Result<Self, RingError> {
        let n = u64::from(layout.size);
        if layout.size == 0 || !layout.size.is_power_of_two() {
            return Err(RingError::Size(layout.size));
        }
        let mut hint = 0;
        let desc = mem
            .translate(layout.desc, 16 * n, &mut hint)
            .ok_or(RingError::Unmapped("descriptor"))?;
        let avail = mem
            .translate(layout.avail, 6 + 2 * n, &mut hint)
            .ok_or(RingError::Unmapped("available"))?;
        let used = mem
            .translate(layout.used, 6 + 8 * n, &mut hint)
            .ok_or(RingError::Unmapped("used"))?;
        if desc % 16 != 0 {
            return Err(RingError::Misaligned("descriptor"));
        }
        if avail % 2 != 0 {
            return Err(RingError::Misaligned("available"));
        }
        if used % 4 != 0 {
            return Err(RingError::Misaligned("used"));
        }
        let mut ring = Self {
            mem,
            desc,
            avail,
            used,
            size: layout.size,
            next_avail: Wrapping(next_avail),
            next_used: Wrapping(0),
            published_used: Wrapping(0),
            signalled_used: None,
            avail_cache: Wrapping(next_avail),
            event_idx,
            indirect,
            notify_enabled: true,
            hint: 0,
            broken: false,
            log: None,
            walk_budget: super::BURST_DESC_BUDGET,
        };
        let used_idx = ring.used_idx_atomic().load(Ordering::Acquire);
        ring.next_used = Wrapping(used_idx);
        ring.published_used = Wrapping(used_idx);
        // Start with kicks wanted: the first kick must reach a sleeping
        // data plane.
        ring.enable_notification();
        Ok(ring)
    }

    /// The same ring over a new memory snapshot, keeping its indices.
    pub(crate) fn remap(
        &self,
        mem: Arc<GuestMemory>,
        layout: SplitLayout,
        event_idx: bool,
        indirect: bool,
    ) -> Result<Self, RingError> {
        let mut r = Self::new(mem, layout, self.next_avail.0, event_idx, indirect)?;
        r.next_used = self.next_used;
        r.published_used = self.published_used;
        r.signalled_used = self.signalled_used;
        r.avail_cache = self.avail_cache;
        r.notify_enabled = self.notify_enabled;
        r.broken = self.broken;
        Ok(r)
    }

    /// Moves the next avail index to the used index read from guest memory
    /// when the two disagree, and returns the base it replaced. A frontend
    /// that reconnects to a restarted backend cannot know where the dead one
    /// stopped: DPDK's virtio-user (server mode) sends base 0 whatever its
    /// rings hold, so the used index is the only truth left (what DPDK's own
    /// vhost library does, and the base QEMU sends in that case). Every
    /// entry the driver made available after the last used one is then
    /// served (TX frames the dead backend never took are sent; RX buffers
    /// are filled).
    pub(crate) fn start_at_used(&mut self) -> Option<u16> {
        if self.next_avail == self.next_used {
            return None;
        }
        let was = self.next_avail.0;
        self.next_avail = self.next_used;
        self.avail_cache = self.next_used;
        // `new` judged the ring by the stale base; judge it again (and ask
        // for kicks from the new index on).
        self.broken = false;
        self.enable_notification();
        Some(was)
    }

    /// Next avail index to consume (what `GET_VRING_BASE` reports).
    pub(crate) fn base(&self) -> u32 {
        u32::from(self.next_avail.0)
    }

    pub(crate) fn mark(&self) -> Mark {
        Mark {
            idx: self.next_avail.0,
            wrap: false,
        }
    }

    pub(crate) fn rollback(&mut self, m: Mark) {
        self.next_avail = Wrapping(m.idx);
    }

    /// Available entries, up to `max` (re-reads `avail.idx` only when the
    /// last read shows fewer than `max`).
    #[inline]
    pub(crate) fn count_avail(&mut self, max: usize) -> usize {
        if self.broken {
            return 0;
        }
        let mut n = self.cached_avail();
        if usize::from(n) < max {
            n = self.refresh_avail();
        }
        usize::from(n).min(max)
    }

    /// Takes the next available chain, appending its segments to `out`.
    ///
    /// Hot path: no allocation, no lock, no syscall. A buffer of one
    /// direct descriptor of the wanted direction in one memory region
    /// (what virtio-user and Linux post for small frames) is taken inline;
    /// anything else takes [`Self::parse_chain`] out of line, which checks
    /// the same things and returns the same for such a buffer.
    #[inline(always)]
    pub(crate) fn next_chain(&mut self, writable: bool, out: &mut SegVec) -> Popped {
        // A broken ring serves nothing, not even entries read before the
        // driver broke it.
        if self.broken || (self.cached_avail() == 0 && self.refresh_avail() == 0) {
            return Popped::Empty;
        }
        let head = self.pop_head();
        self.prefetch_ahead(writable);
        if head < self.size {
            let d = self.read_desc(self.desc, head);
            let want = if writable { DESC_F_WRITE } else { 0 };
            if d.flags & (DESC_F_NEXT | DESC_F_INDIRECT | DESC_F_WRITE) == want
                && d.len > 0
                && self.mem.push_whole(d.addr, d.len, &mut self.hint, out)
            {
                return Popped::Chain(UsedId::new(head, 1), d.len);
            }
        }
        self.next_chain_walk(head, writable, out)
    }

    /// [`Self::next_chain`] for any other buffer: a chain, an indirect
    /// table, a buffer across regions, or a bad one. When this burst's
    /// walks have read their budget, the head goes back to the ring for
    /// the next burst ([`super::BURST_DESC_BUDGET`]).
    #[inline(never)]
    fn next_chain_walk(&mut self, head: u16, writable: bool, out: &mut SegVec) -> Popped {
        if self.walk_budget < super::MAX_CHAIN_READS {
            self.next_avail -= 1;
            return Popped::Empty;
        }
        match self.parse_chain(head, writable, out) {
            Ok(len) => Popped::Chain(UsedId::new(head, 1), len),
            Err(r) => Popped::Bad((head < self.size).then_some(UsedId::new(head, 1)), r),
        }
    }

    /// Warms the cache for the chains that follow, so that the misses on
    /// lines the driver's core wrote overlap instead of queueing one frame
    /// at a time: the descriptor [`DESC_AHEAD`](super::DESC_AHEAD) entries
    /// on and, for RX, the first two lines of the buffer
    /// [`BUF_AHEAD`](super::BUF_AHEAD) entries on (whose descriptor was
    /// warmed frames ago), asked for writing. A store into a line the core
    /// does not own waits in the store buffer until the line arrives, and a
    /// later load that must wait for the store buffer (a fence, a store
    /// forwarding miss) then waits for all of them: asked for early, the
    /// lines are there when the frame is written. TX buffers are warmed by
    /// the burst that parses them ([`crate::queue::TxQueue::recv_burst`]).
    /// Reads only what the last `avail.idx` read made available; a bad
    /// index or address is skipped here and refused by `parse_chain` as
    /// usual.
    #[inline(always)]
    fn prefetch_ahead(&self, writable: bool) {
        let pending = self.cached_avail();
        if pending > super::DESC_AHEAD {
            let head = self.avail_slot(self.next_avail + Wrapping(super::DESC_AHEAD));
            if head < self.size {
                super::prefetch(self.desc + 16 * usize::from(head), false);
            }
        }
        if writable && pending > super::BUF_AHEAD {
            let head = self.avail_slot(self.next_avail + Wrapping(super::BUF_AHEAD));
            if head < self.size {
                let d = self.read_desc(self.desc, head);
                if d.flags & DESC_F_INDIRECT == 0 {
                    let mut hint = self.hint;
                    if let Some(hva) = self.mem.translate(d.addr, 1, &mut hint) {
                        super::prefetch_buffer(hva, d.len, true);
                    }
                }
            }
        }
    }

    #[inline(always)]
    fn avail_slot(&self, i: Wrapping<u16>) -> u16 {
        let slot = usize::from(i.0 & (self.size - 1));
        self.read_u16(self.avail + 4 + 2 * slot)
    }

    /// Whether the guest broke the ring.
    pub(crate) fn is_broken(&self) -> bool {
        self.broken
    }

    fn avail_idx_atomic(&self) -> &AtomicU16 {
        // SAFETY: `avail + 2` is inside the avail area translated in `new`
        // (6 + 2N bytes, one region, kept mapped by `self.mem`) and 2-aligned
        // (checked in `new`). Guest memory is shared, hence the atomic view.
        unsafe { &*((self.avail + 2) as *const AtomicU16) }
    }

    fn used_idx_atomic(&self) -> &AtomicU16 {
        // SAFETY: `used + 2` lies in the used area (6 + 8N bytes, mapped,
        // kept alive by `self.mem`) and is 2-aligned (used is 4-aligned).
        unsafe { &*((self.used + 2) as *const AtomicU16) }
    }

    #[inline]
    fn read_u16(&self, addr: usize) -> u16 {
        // SAFETY: callers pass addresses inside the avail or used areas
        // computed from in-range indices; both areas are mapped (kept alive
        // by `self.mem`) and 2-aligned.
        unsafe { std::ptr::read_volatile(addr as *const u16) }
    }

    #[inline]
    fn write_u16(&self, addr: usize, v: u16) {
        // SAFETY: as in `read_u16`; only device-owned fields (used flags,
        // avail_event) are written through it.
        unsafe { std::ptr::write_volatile(addr as *mut u16, v) }
    }

    /// Number of entries the driver made available and we have not consumed,
    /// re-reading `avail.idx` (one acquire load). A ring whose driver claims
    /// more than `size` entries is broken: it is reported as empty and
    /// counted by the caller through [`Self::is_broken`].
    #[inline]
    pub(crate) fn refresh_avail(&mut self) -> u16 {
        if self.broken {
            return 0;
        }
        let idx = Wrapping(self.avail_idx_atomic().load(Ordering::Acquire));
        let pending = (idx - self.next_avail).0;
        if pending > self.size {
            self.broken = true;
            return 0;
        }
        self.avail_cache = idx;
        pending
    }

    /// Entries available according to the last `avail.idx` read.
    #[inline]
    pub(crate) fn cached_avail(&self) -> u16 {
        (self.avail_cache - self.next_avail).0
    }

    /// Consumes the next available head. The caller made sure one is
    /// available (`cached_avail() > 0`).
    #[inline]
    pub(crate) fn pop_head(&mut self) -> u16 {
        debug_assert!(self.cached_avail() > 0);
        let head = self.avail_slot(self.next_avail);
        self.next_avail += 1;
        head
    }

    #[inline]
    fn read_desc(&self, table: usize, i: u16) -> Desc {
        // SAFETY: the caller checked `i` against the table size, and the
        // table lies in mapped guest memory kept alive by `self.mem`.
        let (lo, hi) = unsafe { read_desc_words(table + 16 * usize::from(i)) };
        Desc {
            addr: lo,
            len: (hi & 0xffff_ffff) as u32,
            flags: ((hi >> 32) & 0xffff) as u16,
            next: (hi >> 48) as u16,
        }
    }

    /// Walks the chain starting at `head`, appending its buffers to `out`.
    ///
    /// `writable` selects the direction: device-writable buffers for RX,
    /// device-readable for TX; a descriptor of the other kind fails the
    /// chain. Returns the total length. Every descriptor read (zero-length
    /// ones, an indirect descriptor and the entries of its table) is
    /// charged to the burst's budget; a chain reading more than
    /// [`super::MAX_CHAIN_DESCS`] is refused.
    ///
    /// Hot path: no allocation, no lock, no syscall.
    #[inline(always)]
    pub(crate) fn parse_chain(
        &mut self,
        head: u16,
        writable: bool,
        out: &mut SegVec,
    ) -> Result<u32, DropReason> {
        let mut hint = self.hint;
        let mut reads = 0;
        let r = self.parse_chain_at(head, writable, out, &mut hint, &mut reads);
        self.hint = hint;
        self.walk_budget = self.walk_budget.saturating_sub(reads);
        r
    }

    #[inline(always)]
    fn parse_chain_at(
        &self,
        head: u16,
        writable: bool,
        out: &mut SegVec,
        hint: &mut usize,
        reads: &mut u32,
    ) -> Result<u32, DropReason> {
        if head >= self.size {
            return Err(DropReason::BadDescriptor);
        }
        let mem = &*self.mem;
        let mut table = self.desc;
        let mut table_len = self.size;
        let mut idx = head;
        let mut in_indirect = false;
        let mut seen: u32 = 0;
        let mut total: u64 = 0;
        loop {
            if idx >= table_len {
                return Err(DropReason::BadDescriptor);
            }
            seen += 1;
            *reads += 1;
            if seen > u32::from(table_len) {
                // More descriptors than the table holds: a loop.
                return Err(DropReason::BadDescriptor);
            }
            if *reads > super::MAX_CHAIN_READS {
                // More buffers than any chain may take, empty ones
                // counted.
                return Err(DropReason::TooManySegments);
            }
            let d = self.read_desc(table, idx);
            if d.flags & DESC_F_INDIRECT != 0 {
                if in_indirect
                    || !self.indirect
                    || d.flags & DESC_F_NEXT != 0
                    || d.len == 0
                    || !d.len.is_multiple_of(16)
                    || d.len / 16 > u32::from(u16::MAX)
                {
                    return Err(DropReason::BadDescriptor);
                }
                table = mem
                    .translate(d.addr, u64::from(d.len), hint)
                    .ok_or(DropReason::BadAddress)?;
                table_len = (d.len / 16) as u16;
                in_indirect = true;
                idx = 0;
                seen = 0;
                continue;
            }
            if (d.flags & DESC_F_WRITE != 0) != writable {
                return Err(DropReason::BadDescriptor);
            }
            if d.len > 0 {
                let mut full = false;
                let ok = mem.translate_pieces(d.addr, u64::from(d.len), hint, |hva, len| {
                    if out.push(Seg { hva, len }) {
                        true
                    } else {
                        full = true;
                        false
                    }
                });
                if full {
                    return Err(DropReason::TooManySegments);
                }
                if !ok {
                    return Err(DropReason::BadAddress);
                }
                total += u64::from(d.len);
            }
            if d.flags & DESC_F_NEXT == 0 {
                break;
            }
            idx = d.next;
        }
        u32::try_from(total).map_err(|_| DropReason::BadDescriptor)
    }

    /// Writes a used element (not yet visible to the driver), and asks for
    /// the used line two lines on for writing: the driver read that line
    /// a lap ago (RX lengths), and a store into a line shared with another
    /// core waits in the store buffer for it.
    #[inline]
    pub(crate) fn push_used(&mut self, id: u16, len: u32) {
        let mask = self.size - 1;
        let slot = usize::from(self.next_used.0 & mask);
        let p = self.used + 4 + 8 * slot;
        super::prefetch(
            self.used + 4 + 8 * usize::from(self.next_used.0.wrapping_add(16) & mask),
            true,
        );
        // SAFETY: `slot < size`, so `p..p+8` lies in the used area (mapped,
        // kept alive by `self.mem`) and is 4-aligned.
        unsafe {
            std::ptr::write_volatile(p as *mut u32, u32::from(id).to_le());
            std::ptr::write_volatile((p + 4) as *mut u32, len.to_le());
        }
        self.next_used += 1;
    }

    /// Makes every written used element visible: one release store.
    /// Returns whether anything was published.
    #[inline]
    pub(crate) fn publish_used(&mut self) -> bool {
        // Once a burst: the next burst's walks get their budget again.
        self.walk_budget = super::BURST_DESC_BUDGET;
        if self.next_used == self.published_used {
            return false;
        }
        if let Some(l) = &mut self.log {
            // The entries of this burst (two pieces when they wrap), then
            // every mark of the burst, before the index makes them visible.
            let n = u64::from((self.next_used - self.published_used).0);
            let size = u64::from(self.size);
            let start = u64::from(self.published_used.0 & (self.size - 1));
            let first = n.min(size - start);
            l.cache.mark(l.area + 4 + 8 * start, 8 * first);
            l.cache.mark(l.area + 4, 8 * (n - first));
            l.cache.flush();
        }
        self.used_idx_atomic()
            .store(self.next_used.0, Ordering::Release);
        self.published_used = self.next_used;
        if let Some(l) = &mut self.log {
            l.cache.mark_now(l.area + 2, 2);
        }
        true
    }

    /// Whether the driver wants an interrupt for what was published since
    /// the last call (virtio 1.x, 2.7.7.2 / 2.7.10).
    #[inline]
    pub(crate) fn needs_notification(&mut self) -> bool {
        let new = self.published_used;
        if self.event_idx {
            // The used_event read must not be reordered before the used.idx
            // store (store-load ordering needs a full fence).
            fence(Ordering::SeqCst);
            let used_event = Wrapping(self.read_u16(self.avail + 4 + 2 * usize::from(self.size)));
            let old = self.signalled_used.replace(new);
            match old {
                None => true,
                Some(old) => (new - used_event - Wrapping(1)).0 < (new - old).0,
            }
        } else {
            fence(Ordering::SeqCst);
            self.read_u16(self.avail) & AVAIL_F_NO_INTERRUPT == 0
        }
    }

    /// Asks the driver for kicks (before sleeping) and reports whether work
    /// arrived meanwhile, in which case the caller must not sleep.
    pub(crate) fn enable_notification(&mut self) -> bool {
        if self.event_idx {
            self.write_u16(
                self.used + 4 + 8 * usize::from(self.size),
                self.next_avail.0,
            );
            if let Some(l) = &mut self.log {
                l.cache.mark_now(l.area + 4 + 8 * u64::from(self.size), 2);
            }
        } else {
            let flags = self.read_u16(self.used);
            self.write_u16(self.used, flags & !USED_F_NO_NOTIFY);
            if let Some(l) = &mut self.log {
                l.cache.mark_now(l.area, 2);
            }
        }
        self.notify_enabled = true;
        fence(Ordering::SeqCst);
        self.refresh_avail() > 0
    }

    /// Tells the driver not to kick (while polling).
    pub(crate) fn disable_notification(&mut self) {
        if !self.notify_enabled {
            return;
        }
        self.notify_enabled = false;
        if !self.event_idx {
            let flags = self.read_u16(self.used);
            self.write_u16(self.used, flags | USED_F_NO_NOTIFY);
            if let Some(l) = &mut self.log {
                l.cache.mark_now(l.area, 2);
            }
        }
        // With EVENT_IDX, leaving avail_event behind suppresses kicks.
    }
}
