// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The packed virtqueue (virtio 1.1+, 2.8) from the device side.
//!
//! One ring of `N` 16-byte descriptors `{ addr: u64, len: u32, id: u16,
//! flags: u16 }` shared by both sides, plus two 4-byte event suppression
//! structures `{ off_wrap: u16, flags: u16 }` (driver area, device area).
//! A descriptor is available when its AVAIL flag equals the device's avail
//! wrap counter and its USED flag does not; the device marks a buffer used
//! by writing one descriptor (id, length, AVAIL = USED = used wrap counter)
//! at its used position and skipping as many slots as the buffer took.
//!
//! The head descriptor's flags are read with acquire ordering (the driver
//! writes them last, with release). Used descriptors of a burst are written
//! with their flags, except the first one's, which is stored last with
//! release ordering: the driver sees the whole burst at once (one
//! publication per burst, as with the split ring's `used.idx`).
//!
//! With `VIRTIO_F_IN_ORDER` a run of consecutive TX buffers (device-readable,
//! used length 0) is returned with one used descriptor: the run's first
//! slot gets the last buffer's id, and the used position skips every slot
//! the run took (virtio 1.1+, 2.8.20). A burst of 32 frames then writes one
//! descriptor instead of 32: one line the driver fetches back instead of
//! eight. RX buffers carry their own lengths and are always returned one
//! by one.

use std::sync::atomic::{fence, AtomicU16, Ordering};
use std::sync::Arc;

use super::log::RingLog;
use super::memory::GuestMemory;
use super::split::RingError;
use super::{read_desc_words, Mark, Popped, Seg, SegVec, UsedId};
use crate::device::Negotiated;
use crate::stats::DropReason;

use super::flags::{
    DESC_F_AVAIL, DESC_F_INDIRECT, DESC_F_NEXT, DESC_F_USED, DESC_F_WRITE, EVENT_DESC,
    EVENT_DISABLE, EVENT_ENABLE,
};

/// Guest physical addresses and size of a packed ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackedLayout {
    /// Descriptor ring.
    pub desc: u64,
    /// Driver event suppression area.
    pub driver: u64,
    /// Device event suppression area.
    pub device: u64,
    /// Number of descriptors (1 to 32768, any value).
    pub size: u16,
}

#[derive(Debug, Clone, Copy)]
struct Desc {
    addr: u64,
    len: u32,
    id: u16,
    flags: u16,
}

/// A packed ring owned by one data-plane thread.
#[derive(Debug)]
pub(crate) struct PackedRing {
    pub(super) mem: Arc<GuestMemory>,
    desc: usize,
    driver: usize,
    device: usize,
    size: u16,
    next_avail: u16,
    avail_wrap: bool,
    next_used: u16,
    used_wrap: bool,
    /// The first used descriptor of the current burst, whose flags are
    /// stored (with release) at publication.
    pending_head: Option<(usize, u16)>,
    /// An in-order run of TX buffers whose one used descriptor is not
    /// written yet.
    run: Option<Run>,
    /// Whether anything was published since the last notification check.
    published: bool,
    /// Used position at the last notification decision (EVENT_IDX).
    signalled_used: Option<(u16, bool)>,
    event_idx: bool,
    indirect: bool,
    /// `VIRTIO_F_IN_ORDER`: TX buffers are returned by runs.
    in_order: bool,
    notify_enabled: bool,
    hint: usize,
    broken: bool,
    /// Dirty-page logging, while the frontend has it on.
    pub(super) log: Option<Box<RingLog>>,
    /// Descriptor reads left to this burst's chain walks
    /// ([`super::BURST_DESC_BUDGET`]); reset at publication, once a burst.
    walk_budget: u32,
}

/// Consecutive used TX buffers returned with one descriptor (IN_ORDER).
#[derive(Debug, Clone, Copy)]
struct Run {
    /// The run's first slot, where its descriptor goes.
    slot: u16,
    /// Its flags (the used wrap counter at that slot).
    flags: u16,
    /// The id of the run's last buffer.
    id: u16,
}

// SAFETY: the raw addresses point into mappings kept alive by `mem`; a ring
// is moved between threads, never shared.
unsafe impl Send for PackedRing {}

impl PackedRing {
    /// Sets up a ring. `base` is the vhost-user encoding of the indices
    /// (bits 0-14 avail index, 15 avail wrap, 16-30 used index, 31 used wrap;
    /// a zero upper half means "used = avail", as DPDK and QEMU send it).
    pub(crate) fn new(
        mem: Arc<GuestMemory>,
        layout: PackedLayout,
        base: u32,
        features: Negotiated,
    ) -> Result<Self, RingError> {
        if layout.size == 0 || layout.size > 32768 {
            return Err(RingError::Size(layout.size));
        }
        let n = u64::from(layout.size);
        let mut hint = 0;
        let desc = mem
            .translate(layout.desc, 16 * n, &mut hint)
            .ok_or(RingError::Unmapped("descriptor"))?;
        let driver = mem
            .translate(layout.driver, 4, &mut hint)
            .ok_or(RingError::Unmapped("driver event"))?;
        let device = mem
            .translate(layout.device, 4, &mut hint)
            .ok_or(RingError::Unmapped("device event"))?;
        if desc % 16 != 0 {
            return Err(RingError::Misaligned("descriptor"));
        }
        if driver % 4 != 0 || device % 4 != 0 {
            return Err(RingError::Misaligned("event suppression"));
        }
        let avail = (base & 0x7fff) as u16;
        let avail_wrap = base & 0x8000 != 0;
        let (used, used_wrap) = if base >> 16 == 0 {
            (avail, avail_wrap)
        } else {
            (((base >> 16) & 0x7fff) as u16, base & 0x8000_0000 != 0)
        };
        if avail >= layout.size || used >= layout.size {
            return Err(RingError::Size(layout.size));
        }
        let mut r = Self {
            mem,
            desc,
            driver,
            device,
            size: layout.size,
            next_avail: avail,
            avail_wrap,
            next_used: used,
            used_wrap,
            pending_head: None,
            run: None,
            published: false,
            signalled_used: None,
            event_idx: features.event_idx(),
            indirect: features.indirect(),
            in_order: features.in_order(),
            notify_enabled: true,
            hint: 0,
            broken: false,
            log: None,
            walk_budget: super::BURST_DESC_BUDGET,
        };
        r.enable_notification();
        Ok(r)
    }

    /// The same ring over a new memory snapshot, keeping its indices.
    /// Whatever was pushed must have been published first: the base counts
    /// the used position, not what the driver can see.
    pub(crate) fn remap(
        &self,
        mem: Arc<GuestMemory>,
        layout: PackedLayout,
        features: Negotiated,
    ) -> Result<Self, RingError> {
        debug_assert!(self.pending_head.is_none() && self.run.is_none());
        let mut r = Self::new(mem, layout, self.base(), features)?;
        r.signalled_used = self.signalled_used;
        r.notify_enabled = self.notify_enabled;
        r.broken = self.broken;
        Ok(r)
    }

    /// The vhost-user encoding of both indices (`GET_VRING_BASE`).
    pub(crate) fn base(&self) -> u32 {
        u32::from(self.next_avail)
            | (u32::from(self.avail_wrap) << 15)
            | (u32::from(self.next_used) << 16)
            | (u32::from(self.used_wrap) << 31)
    }

    pub(crate) fn is_broken(&self) -> bool {
        self.broken
    }

    #[inline]
    fn flags_atomic(&self, slot: u16) -> &AtomicU16 {
        // SAFETY: `slot < size`, so `desc + 16 * slot + 14` lies in the
        // descriptor ring (mapped, kept alive by `self.mem`) and is 2-aligned
        // (the ring is 16-aligned).
        unsafe { &*((self.desc + 16 * usize::from(slot) + 14) as *const AtomicU16) }
    }

    #[inline]
    fn read_desc_at(&self, table: usize, i: usize) -> Desc {
        // SAFETY: callers check `i` against the table's size; the table is
        // in mapped guest memory kept alive by `self.mem`.
        let (lo, hi) = unsafe { read_desc_words(table + 16 * i) };
        Desc {
            addr: lo,
            len: (hi & 0xffff_ffff) as u32,
            id: ((hi >> 32) & 0xffff) as u16,
            flags: (hi >> 48) as u16,
        }
    }

    #[inline]
    fn is_avail(&self, flags: u16) -> bool {
        (flags & DESC_F_AVAIL != 0) == self.avail_wrap
            && (flags & DESC_F_USED != 0) != self.avail_wrap
    }

    /// Whether the descriptor at the avail position is available (one
    /// acquire load).
    #[inline]
    pub(crate) fn has_avail(&self) -> bool {
        !self.broken && self.is_avail(self.flags_atomic(self.next_avail).load(Ordering::Acquire))
    }

    /// Counts available descriptors from the avail position, up to `max`
    /// (an upper bound of available buffers, for back-pressure).
    pub(crate) fn count_avail(&self, max: usize) -> usize {
        if self.broken {
            return 0;
        }
        let mut slot = self.next_avail;
        let mut wrap = self.avail_wrap;
        let mut n = 0;
        while n < max.min(usize::from(self.size)) {
            let f = self.flags_atomic(slot).load(Ordering::Acquire);
            if (f & DESC_F_AVAIL != 0) != wrap || (f & DESC_F_USED != 0) == wrap {
                break;
            }
            n += 1;
            slot += 1;
            if slot == self.size {
                slot = 0;
                wrap = !wrap;
            }
        }
        n
    }

    pub(crate) fn mark(&self) -> Mark {
        Mark {
            idx: self.next_avail,
            wrap: self.avail_wrap,
        }
    }

    pub(crate) fn rollback(&mut self, m: Mark) {
        self.next_avail = m.idx;
        self.avail_wrap = m.wrap;
    }

    #[inline(always)]
    fn advance_avail(&mut self, n: u16) {
        let next = u32::from(self.next_avail) + u32::from(n);
        if next >= u32::from(self.size) {
            self.next_avail = (next - u32::from(self.size)) as u16;
            self.avail_wrap = !self.avail_wrap;
        } else {
            self.next_avail = next as u16;
        }
    }

    /// Takes the next available buffer, appending its segments to `out`.
    ///
    /// Hot path: no allocation, no lock, no syscall. A buffer of one
    /// direct descriptor of the wanted direction in one memory region
    /// (what virtio-user and Linux post for small frames) is taken inline;
    /// anything else (a chain, an indirect table, a buffer across regions,
    /// a bad descriptor) takes the walk in [`Self::next_chain_walk`], with
    /// the same checks.
    #[inline(always)]
    pub(crate) fn next_chain(&mut self, writable: bool, out: &mut SegVec) -> Popped {
        if !self.has_avail() {
            return Popped::Empty;
        }
        let d = self.read_desc_at(self.desc, usize::from(self.next_avail));
        let want = if writable { DESC_F_WRITE } else { 0 };
        if d.flags & (DESC_F_NEXT | DESC_F_INDIRECT | DESC_F_WRITE) == want
            && d.len > 0
            && self.mem.push_whole(d.addr, d.len, &mut self.hint, out)
        {
            self.advance_avail(1);
            self.prefetch_ahead(writable);
            return Popped::Chain(UsedId::new(d.id, 1), d.len);
        }
        self.next_chain_walk(writable, out)
    }

    /// Takes the next four buffers at once when they fill the four slots
    /// of one group (the avail position a multiple of four, not past the
    /// ring's end) and each is one direct descriptor of the wanted
    /// direction, available in this lap, with a non-empty buffer in one
    /// memory region: the common case of a burst of small frames, and
    /// DPDK's batch for packed rings. Four flag loads and one acquire
    /// fence, then the four descriptors, one advance and one look ahead.
    /// Their segments are appended to `out` (one each) and `got` receives
    /// each buffer's id and length, in slot order: what four calls of
    /// [`Self::next_chain`] would return. Returns false, having taken
    /// nothing, when any of that does not hold; then take them one by one.
    ///
    /// Hot path: no allocation, no lock, no syscall.
    #[inline(always)]
    pub(crate) fn next_four(
        &mut self,
        writable: bool,
        out: &mut SegVec,
        got: &mut [(UsedId, u32); 4],
    ) -> bool {
        let slot = self.next_avail;
        if !slot.is_multiple_of(4)
            || u32::from(slot) + 4 > u32::from(self.size)
            || self.broken
            || out.capacity() - out.len() < 4
        {
            return false;
        }
        // Available in this lap (AVAIL = wrap, USED = !wrap), one direct
        // descriptor (no NEXT, no INDIRECT), the wanted direction.
        let mask = DESC_F_AVAIL | DESC_F_USED | DESC_F_NEXT | DESC_F_INDIRECT | DESC_F_WRITE;
        let want = if self.avail_wrap {
            DESC_F_AVAIL
        } else {
            DESC_F_USED
        } | if writable { DESC_F_WRITE } else { 0 };
        // Spelled out: `[0, 1, 2, 3].map(..)` leaves a closure call per
        // element in the hot path.
        let flags = |i: u16| self.flags_atomic(slot + i).load(Ordering::Relaxed);
        let f = [flags(0), flags(1), flags(2), flags(3)];
        if f.iter().any(|&f| f & mask != want) {
            return false;
        }
        // The rest of each descriptor is read after its flags said it is
        // the driver's to give (the flags loads above, then this fence).
        fence(Ordering::Acquire);
        let desc = |i: usize| self.read_desc_at(self.desc, usize::from(slot) + i);
        let d = [desc(0), desc(1), desc(2), desc(3)];
        let mut hint = self.hint;
        let mut hva = [0usize; 4];
        for (h, d) in hva.iter_mut().zip(&d) {
            if d.len == 0 {
                return false;
            }
            match self.mem.translate(d.addr, u64::from(d.len), &mut hint) {
                Some(a) => *h = a,
                None => return false,
            }
        }
        out.limit_next(4);
        for i in 0..4 {
            // Room for four was checked above.
            let pushed = out.push(Seg {
                hva: hva[i],
                len: d[i].len,
            });
            debug_assert!(pushed);
            got[i] = (UsedId::new(d[i].id, 1), d[i].len);
        }
        self.hint = hint;
        self.advance_avail(4);
        self.prefetch_ahead(writable);
        true
    }

    /// [`Self::next_chain`] for any buffer but one direct descriptor in
    /// one region (available: the caller checked). Every descriptor read
    /// is charged to the burst's budget; when the budget is spent the
    /// buffer stays in the ring for the next burst
    /// ([`super::BURST_DESC_BUDGET`]).
    #[inline(never)]
    fn next_chain_walk(&mut self, writable: bool, out: &mut SegVec) -> Popped {
        if self.walk_budget < super::MAX_CHAIN_READS {
            return Popped::Empty;
        }
        // Walk the chain's slots; on a bad descriptor keep walking (without
        // translating) to find the buffer's end and id, so that the ring
        // stays in step with the driver.
        let mut slot = self.next_avail;
        let mut count: u16 = 0;
        let mut total: u64 = 0;
        let mut err: Option<DropReason> = None;
        let mut hint = self.hint;
        // Descriptors read: the chain's slots and an indirect table's
        // entries.
        let mut reads: u32 = 0;
        let id = loop {
            if count == self.size || u32::from(count) == super::MAX_CHAIN_DESCS {
                // Every slot says NEXT, or more slots than any chain may
                // take: the ring is corrupt (the chain's end cannot be
                // found within the bound). Nothing is consumed; the queue
                // counts RingBroken once at the end of the burst.
                self.broken = true;
                self.walk_budget = self.walk_budget.saturating_sub(reads);
                return Popped::Empty;
            }
            let d = self.read_desc_at(self.desc, usize::from(slot));
            count += 1;
            reads += 1;
            if err.is_none() {
                if let Err(e) = self.take_desc(
                    d,
                    writable,
                    count == 1,
                    out,
                    &mut total,
                    &mut hint,
                    &mut reads,
                ) {
                    err = Some(e);
                }
            }
            slot += 1;
            if slot == self.size {
                slot = 0;
            }
            if d.flags & DESC_F_NEXT == 0 || d.flags & DESC_F_INDIRECT != 0 {
                break d.id;
            }
        };
        self.hint = hint;
        self.walk_budget = self.walk_budget.saturating_sub(reads);
        self.advance_avail(count);
        self.prefetch_ahead(writable);
        let used = UsedId::new(id, count);
        if let Some(e) = err {
            return Popped::Bad(Some(used), e);
        }
        match u32::try_from(total) {
            Ok(len) => Popped::Chain(used, len),
            Err(_) => Popped::Bad(Some(used), DropReason::BadDescriptor),
        }
    }

    /// Warms the cache for what follows an RX buffer, so that the misses
    /// on lines the driver's core wrote overlap instead of queueing one
    /// frame at a time: the descriptor line two lines on (four descriptors
    /// a line) and the first two lines of the buffer
    /// [`BUF_AHEAD`](super::BUF_AHEAD) slots on when it is available, both
    /// asked for writing (why: the split ring's `prefetch_ahead`). A hint
    /// only: that descriptor is read without ordering, a bad address is
    /// skipped here and refused by `next_chain` as usual.
    ///
    /// Nothing for TX: its buffers are warmed by the burst that parses them,
    /// and its descriptor lines are left alone. A packed driver makes each
    /// TX descriptor available on its own, so a backend that keeps up reads
    /// at the driver's frontier, and a line taken ahead of it is one the
    /// driver is about to write: taking it away costs the driver a round
    /// trip per line, and the loop runs at the driver's pace
    /// (docs/perf/fast-path-2026-12-05-to-06.md,
    /// "Another host, and packed TX descriptor lines left to the driver").
    /// A driver keeps its RX ring filled, so the RX lines ahead were
    /// written long before.
    #[inline(always)]
    fn prefetch_ahead(&self, writable: bool) {
        if writable {
            let (next, size) = (usize::from(self.next_avail), usize::from(self.size));
            // No division per frame: only past the ring's end (any size).
            let wrap = |i: usize| if i < size { i } else { i % size };
            // Asked for writing: the used descriptors go into these lines.
            super::prefetch(
                self.desc + 16 * wrap(next + usize::from(super::DESC_AHEAD)),
                true,
            );
            if let Some(d) = self.posted_direct(wrap(next + usize::from(super::BUF_AHEAD))) {
                let mut hint = self.hint;
                if let Some(hva) = self.mem.translate(d.addr, 1, &mut hint) {
                    super::prefetch_buffer(hva, d.len, true);
                }
            }
        }
    }

    /// The descriptor at `slot` if the driver made it available as one
    /// direct buffer: what the warms read (anything else is left to
    /// `next_chain`, which checks it in full).
    #[inline(always)]
    fn posted_direct(&self, slot: usize) -> Option<Desc> {
        let d = self.read_desc_at(self.desc, slot);
        (self.is_avail(d.flags) && d.flags & DESC_F_INDIRECT == 0).then_some(d)
    }

    /// Warms the buffer at the avail position past its head, for writing
    /// `len` bytes ([`super::Ring::prefetch_next_body`]). Reads only what
    /// the driver made available; a bad address is skipped here and refused
    /// by `next_chain` as usual.
    #[inline(always)]
    pub(crate) fn prefetch_next_body(&self, len: usize) {
        if let Some(d) = self.posted_direct(usize::from(self.next_avail)) {
            let len = len.min(d.len as usize);
            let mut hint = self.hint;
            if let Some(hva) = self.mem.translate(d.addr, len as u64, &mut hint) {
                super::prefetch_body(hva, len, true);
            }
        }
    }

    /// Validates one descriptor of a chain and appends its buffer(s);
    /// `reads` counts the descriptors read (an indirect table's entries,
    /// the table refused before any is read if the walk would then read
    /// more than [`super::MAX_CHAIN_READS`]).
    #[inline]
    #[allow(clippy::too_many_arguments)] // one walk's state, kept in registers
    fn take_desc(
        &self,
        d: Desc,
        writable: bool,
        first: bool,
        out: &mut SegVec,
        total: &mut u64,
        hint: &mut usize,
        reads: &mut u32,
    ) -> Result<(), DropReason> {
        let mem = &*self.mem;
        if d.flags & DESC_F_INDIRECT != 0 {
            if !self.indirect
                || !first
                || d.flags & DESC_F_NEXT != 0
                || d.len == 0
                || !d.len.is_multiple_of(16)
            {
                return Err(DropReason::BadDescriptor);
            }
            if d.len / 16 > super::MAX_CHAIN_READS - *reads {
                // More buffers than any chain may take, empty ones
                // counted; refused before any is read.
                return Err(DropReason::TooManySegments);
            }
            let table = mem
                .translate(d.addr, u64::from(d.len), hint)
                .ok_or(DropReason::BadAddress)?;
            // An indirect table is a plain sequence; its NEXT flags are
            // ignored and nested indirection is refused.
            *reads += d.len / 16;
            for i in 0..(d.len / 16) as usize {
                let e = self.read_desc_at(table, i);
                if e.flags & DESC_F_INDIRECT != 0 {
                    return Err(DropReason::BadDescriptor);
                }
                self.take_buffer(e, writable, out, total, hint)?;
            }
            return Ok(());
        }
        self.take_buffer(d, writable, out, total, hint)
    }

    #[inline(always)]
    fn take_buffer(
        &self,
        d: Desc,
        writable: bool,
        out: &mut SegVec,
        total: &mut u64,
        hint: &mut usize,
    ) -> Result<(), DropReason> {
        let mem = &*self.mem;
        if (d.flags & DESC_F_WRITE != 0) != writable {
            return Err(DropReason::BadDescriptor);
        }
        if d.len == 0 {
            return Ok(());
        }
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
        *total += u64::from(d.len);
        Ok(())
    }

    /// Writes a used descriptor (the burst's first one stays invisible
    /// until [`Self::publish_used`]). Under IN_ORDER a TX buffer (`!wrote`)
    /// only extends the current run; the run's descriptor is written when
    /// something else is pushed or at publication.
    #[inline]
    pub(crate) fn push_used(&mut self, u: UsedId, len: u32, wrote: bool) {
        let flags = if self.used_wrap {
            DESC_F_AVAIL | DESC_F_USED
        } else {
            0
        };
        if self.in_order && !wrote {
            match &mut self.run {
                Some(r) => r.id = u.id(),
                None => {
                    self.run = Some(Run {
                        slot: self.next_used,
                        flags,
                        id: u.id(),
                    })
                }
            }
            self.advance_used(u);
            return;
        }
        self.close_run();
        let flags = if wrote { flags | DESC_F_WRITE } else { flags };
        self.write_used(self.next_used, u.id(), len, flags);
        self.advance_used(u);
    }

    /// Writes the pending run's one descriptor (length 0: TX buffers).
    #[inline]
    fn close_run(&mut self) {
        if let Some(r) = self.run.take() {
            self.write_used(r.slot, r.id, 0, r.flags);
        }
    }

    /// Writes one used descriptor at `slot`; its flags are stored now
    /// (release), or at publication when it is the burst's first.
    #[inline(always)]
    fn write_used(&mut self, slot: u16, id: u16, len: u32, flags: u16) {
        let p = self.desc + 16 * usize::from(slot);
        // SAFETY: `slot < size` (a used position): `p..p+16` is a
        // descriptor slot in the mapped ring (kept alive by `self.mem`),
        // 8-aligned.
        unsafe {
            std::ptr::write_volatile((p + 8) as *mut u32, len.to_le());
            std::ptr::write_volatile((p + 12) as *mut u16, id.to_le());
        }
        if self.pending_head.is_none() {
            self.pending_head = Some((usize::from(slot), flags));
        } else {
            self.flags_atomic(slot)
                .store(flags.to_le(), Ordering::Release);
        }
    }

    /// Moves the used position past the slots `u` took.
    #[inline(always)]
    fn advance_used(&mut self, u: UsedId) {
        // Invariant: 1 <= ndesc <= size (it counts slots the buffer took).
        let next = u32::from(self.next_used) + u32::from(u.ndesc().max(1));
        if next >= u32::from(self.size) {
            self.next_used = (next - u32::from(self.size)) as u16;
            self.used_wrap = !self.used_wrap;
        } else {
            self.next_used = next as u16;
        }
    }

    /// Makes the burst's used descriptors visible: one release store.
    #[inline]
    pub(crate) fn publish_used(&mut self) -> bool {
        // Once a burst: the next burst's walks get their budget again.
        self.walk_budget = super::BURST_DESC_BUDGET;
        self.close_run();
        match self.pending_head.take() {
            Some((slot, flags)) => {
                if let Some(l) = &mut self.log {
                    // The burst's slots, from its head to the used position
                    // (all of them when it went round once), then every
                    // mark of the burst, before the head makes them visible.
                    let (h, n, size) =
                        (slot as u64, u64::from(self.next_used), u64::from(self.size));
                    let count = if n > h { n - h } else { n + size - h };
                    let first = count.min(size - h);
                    l.cache.mark(l.area + 16 * h, 16 * first);
                    l.cache.mark(l.area, 16 * (count - first));
                    l.cache.flush();
                }
                self.flags_atomic(slot as u16)
                    .store(flags.to_le(), Ordering::Release);
                if let Some(l) = &mut self.log {
                    l.cache.mark_now(l.area + 16 * slot as u64 + 14, 2);
                }
                self.published = true;
                true
            }
            None => false,
        }
    }

    #[inline]
    fn read_u16(&self, addr: usize) -> u16 {
        // SAFETY: callers pass `driver` or `device` (+2): 4-byte areas,
        // mapped, 4-aligned, kept alive by `self.mem`.
        unsafe { u16::from_le(std::ptr::read_volatile(addr as *const u16)) }
    }

    #[inline]
    fn write_u16(&mut self, addr: usize, v: u16) {
        // SAFETY: as in `read_u16`; only the device area is written.
        unsafe { std::ptr::write_volatile(addr as *mut u16, v.to_le()) }
        if let Some(l) = &mut self.log {
            l.cache.mark_now(l.device, 4);
        }
    }

    /// Whether the driver wants an interrupt for what was published since
    /// the last call (virtio 1.x, 2.8.10, 2.8.21.3).
    pub(crate) fn needs_notification(&mut self) -> bool {
        if !std::mem::take(&mut self.published) {
            return false;
        }
        fence(Ordering::SeqCst);
        // Every check moves the position the next one counts from, whatever
        // the driver asks for now: a driver that polled with interrupts off
        // for laps, then asks for one at a slot, must be signalled once the
        // first burst after that crosses it. Counting from a position laps
        // old can miss it, and a driver left waiting with its ring full of
        // used buffers waits forever (as QEMU and DPDK do, 2.8.21.3).
        let new = (self.next_used, self.used_wrap);
        let old = self.signalled_used.replace(new);
        let flags = self.read_u16(self.driver + 2);
        match flags {
            EVENT_DISABLE => false,
            EVENT_DESC if self.event_idx => {
                let Some(old) = old else {
                    return true;
                };
                let off_wrap = self.read_u16(self.driver);
                let size = i32::from(self.size);
                let mut off = i32::from(off_wrap & 0x7fff);
                let (n, nw) = (i32::from(new.0), new.1);
                let mut o = i32::from(old.0);
                // Express old and the event offset in new's lap.
                if old.1 != nw {
                    o -= size;
                }
                if (off_wrap >> 15 != 0) != nw {
                    off -= size;
                }
                // vring_need_event(off, new, old) on unwrapped positions.
                (n - off - 1).rem_euclid(65536) < (n - o).rem_euclid(65536)
            }
            _ => true,
        }
    }

    /// Asks for kicks and reports whether work arrived meanwhile.
    pub(crate) fn enable_notification(&mut self) -> bool {
        if self.event_idx {
            let off_wrap = self.next_avail | (u16::from(self.avail_wrap) << 15);
            self.write_u16(self.device, off_wrap);
            self.write_u16(self.device + 2, EVENT_DESC);
        } else {
            self.write_u16(self.device + 2, EVENT_ENABLE);
        }
        self.notify_enabled = true;
        fence(Ordering::SeqCst);
        self.has_avail()
    }

    /// Tells the driver not to kick.
    pub(crate) fn disable_notification(&mut self) {
        if self.notify_enabled {
            self.notify_enabled = false;
            self.write_u16(self.device + 2, EVENT_DISABLE);
        }
    }
}

#[cfg(all(test, feature = "test-utils"))]
mod tests {
    use super::{DESC_F_AVAIL, DESC_F_USED, DESC_F_WRITE};
    use crate::device::bits;
    use crate::ring::Layout;
    use crate::sink::Sink;
    use crate::test_utils::{LoopbackGuest, LoopbackOpts};
    use crate::VirtioNetHdr;

    /// (len, id, flags) of every slot of one ring.
    fn slots(g: &LoopbackGuest, rx: bool) -> Vec<(u32, u16, u16)> {
        let Layout::Packed(l) = g.layout(rx) else {
            panic!("a packed ring")
        };
        (0..l.size)
            .map(|i| {
                let mut d = [0u8; 16];
                g.read_guest(l.desc + 16 * u64::from(i), &mut d);
                (
                    u32::from_le_bytes(d[8..12].try_into().unwrap()),
                    u16::from_le_bytes(d[12..14].try_into().unwrap()),
                    u16::from_le_bytes(d[14..16].try_into().unwrap()),
                )
            })
            .collect()
    }

    fn guest(in_order: bool) -> LoopbackGuest {
        LoopbackGuest::new(LoopbackOpts {
            packed: true,
            size: 8,
            features: bits::MRG_RXBUF | if in_order { bits::IN_ORDER } else { 0 },
            ..LoopbackOpts::default()
        })
    }

    const USED_LAP1: u16 = DESC_F_AVAIL | DESC_F_USED;

    #[test]
    fn in_order_tx_buffers_come_back_with_one_descriptor_per_burst() {
        let mut g = guest(true);
        let frame = [5u8; 60];
        assert_eq!(g.post_tx(&frame, 5), 5);
        assert_eq!(g.qp.tx.recv_burst(32, |_| {}), 5);
        let s = slots(&g, false);
        // Slot 0 stands for the run and names its last buffer (id 4); the
        // driver's own descriptors in slots 1-4 are left as it wrote them.
        assert_eq!(s[0], (0, 4, USED_LAP1));
        for (i, d) in s.iter().enumerate().take(5).skip(1) {
            assert_eq!((d.1, d.2), (i as u16, DESC_F_AVAIL), "slot {i}");
        }
        assert_eq!(g.reap_tx(), 5);
        // The next run wraps: slots 5, 6, 7, 0, 1 (ids alike); its
        // descriptor goes at slot 5 with the first lap's wrap counter.
        assert_eq!(g.post_tx(&frame, 5), 5);
        assert_eq!(g.qp.tx.recv_burst(32, |_| {}), 5);
        let s = slots(&g, false);
        assert_eq!(s[5], (0, 1, USED_LAP1));
        assert_eq!((s[6].1, s[6].2), (6, DESC_F_AVAIL));
        assert_eq!(g.reap_tx(), 5);
        // A burst split in two (max 2, then the rest): two runs.
        assert_eq!(g.post_tx(&frame, 3), 3);
        assert_eq!(g.qp.tx.recv_burst(2, |_| {}), 2);
        assert_eq!(g.qp.tx.recv_burst(32, |_| {}), 1);
        let s = slots(&g, false);
        assert_eq!((s[2].1, s[2].2), (3, 0), "second lap: wrap counter 0");
        assert_eq!((s[4].1, s[4].2), (4, 0));
        assert_eq!(g.reap_tx(), 3);
        assert_eq!(g.qp.tx.counters().packets, 13);
    }

    /// Frames `from..from + n`, each its own bytes.
    fn post_distinct(g: &mut LoopbackGuest, from: u8, n: u8) {
        for i in from..from + n {
            assert_eq!(g.post_tx(&[i; 60], 1), 1);
        }
    }

    fn received(g: &mut LoopbackGuest) -> Vec<u8> {
        let mut got = Vec::new();
        g.qp.tx.recv_burst(32, |f| {
            assert!(
                f.head().iter().all(|&b| b == f.head()[0]),
                "one frame's bytes"
            );
            got.push(f.head()[0]);
        });
        got
    }

    #[test]
    fn tx_buffers_taken_four_at_once_come_in_slot_order() {
        for in_order in [false, true] {
            let mut g = guest(in_order);
            // Slots 0-5: one group of four at once, then two alone.
            post_distinct(&mut g, 0, 6);
            assert_eq!(received(&mut g), (0..6).collect::<Vec<_>>());
            assert_eq!(g.reap_tx(), 6);
            // Slots 6, 7, then 0-3 of the second lap (wrap counter 0) at
            // once, then 4.
            post_distinct(&mut g, 6, 7);
            assert_eq!(received(&mut g), (6..13).collect::<Vec<_>>());
            assert_eq!(g.reap_tx(), 7);
            // Slots 5-7; then half of the third lap's first group: taken
            // one by one, the other half later; then slots 4-7 at once.
            post_distinct(&mut g, 13, 3);
            assert_eq!(received(&mut g), [13, 14, 15]);
            post_distinct(&mut g, 16, 2);
            assert_eq!(received(&mut g), [16, 17]);
            post_distinct(&mut g, 18, 2);
            assert_eq!(received(&mut g), [18, 19]);
            assert_eq!(g.reap_tx(), 7);
            post_distinct(&mut g, 20, 4);
            assert_eq!(received(&mut g), [20, 21, 22, 23]);
            assert_eq!(g.reap_tx(), 4);
            assert_eq!(g.qp.tx.counters().packets, 24, "in order {in_order}");
        }
    }

    #[test]
    fn without_in_order_every_tx_buffer_has_its_descriptor() {
        let mut g = guest(false);
        assert_eq!(g.post_tx(&[5u8; 60], 5), 5);
        assert_eq!(g.qp.tx.recv_burst(32, |_| {}), 5);
        let s = slots(&g, false);
        for (i, d) in s.iter().enumerate().take(5) {
            assert_eq!(*d, (0, i as u16, USED_LAP1), "slot {i}");
        }
        assert_eq!(g.reap_tx(), 5);
    }

    #[test]
    fn in_order_rx_buffers_keep_their_own_lengths() {
        let mut g = guest(true);
        assert_eq!(g.post_rx(3), 3);
        let hdr = VirtioNetHdr::default();
        {
            let mut rx = g.qp.rx.burst();
            for len in [60usize, 100, 1000] {
                let f = vec![1u8; len];
                Sink::push(&mut rx, &hdr, &&f[..]).expect("room");
            }
        }
        let s = slots(&g, true);
        let h = g.hdr_len() as u32;
        for (i, len) in [60u32, 100, 1000].into_iter().enumerate() {
            assert_eq!(
                s[i],
                (h + len, i as u16, USED_LAP1 | DESC_F_WRITE),
                "slot {i}"
            );
        }
        assert_eq!(g.reap_rx(), (3, u64::from(3 * h + 1160)));
    }
}
