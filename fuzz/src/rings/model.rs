// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The reference model of the ring engine: guest memory as the model sees
//! it, the chain walks of both layouts, and the device side ([`Dev`]) whose
//! every result the harness compares with the engine's.

use super::*;

// ===== guest memory, as the model sees it =====

#[derive(Clone)]
pub(super) struct Mem {
    pub(super) base: u64,
    pub(super) b: Vec<u8>,
}

impl Mem {
    /// Offset of `[gpa, gpa + len)` if it lies in guest memory (like the
    /// engine's `translate`, `gpa` itself must be inside).
    pub(super) fn off(&self, gpa: u64, len: u64) -> Option<usize> {
        let off = gpa.checked_sub(self.base)?;
        let size = self.b.len() as u64;
        (off < size && len <= size - off).then_some(off as usize)
    }

    /// Bytes from `gpa` to the end of memory, if `gpa` is inside.
    pub(super) fn room(&self, gpa: u64) -> Option<u64> {
        self.off(gpa, 0).map(|o| (self.b.len() - o) as u64)
    }

    pub(super) fn at(&self, gpa: u64, len: usize) -> &[u8] {
        let o = self.off(gpa, len as u64).expect("model read inside memory");
        &self.b[o..o + len]
    }

    pub(super) fn at_mut(&mut self, gpa: u64, len: usize) -> &mut [u8] {
        let o = self
            .off(gpa, len as u64)
            .expect("model write inside memory");
        &mut self.b[o..o + len]
    }

    pub(super) fn r16(&self, gpa: u64) -> u16 {
        u16::from_le_bytes(self.at(gpa, 2).try_into().expect("2"))
    }

    pub(super) fn r32(&self, gpa: u64) -> u32 {
        u32::from_le_bytes(self.at(gpa, 4).try_into().expect("4"))
    }

    pub(super) fn r64(&self, gpa: u64) -> u64 {
        u64::from_le_bytes(self.at(gpa, 8).try_into().expect("8"))
    }

    pub(super) fn w16(&mut self, gpa: u64, v: u16) {
        self.at_mut(gpa, 2).copy_from_slice(&v.to_le_bytes());
    }

    pub(super) fn w32(&mut self, gpa: u64, v: u32) {
        self.at_mut(gpa, 4).copy_from_slice(&v.to_le_bytes());
    }
}

// ===== the model =====

/// What the engine knows of the negotiation.
#[derive(Debug, Clone, Copy)]
pub(super) struct Cfg {
    pub(super) packed: bool,
    pub(super) size: u16,
    pub(super) buf_len: u32,
    /// Acked features as the engine sees them (VERSION_1 and RING_PACKED
    /// added by the loopback guest).
    pub(super) features: u64,
    pub(super) hdr_len: usize,
    pub(super) event_idx: bool,
    pub(super) indirect: bool,
    pub(super) mrg: bool,
}

#[derive(Debug, Clone, Copy)]
pub(super) enum Area {
    Split { desc: u64, avail: u64, used: u64 },
    Packed { desc: u64, device: u64 },
}

/// One descriptor as the engine decodes it (split: `next`; packed: `id`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Desc {
    pub(super) addr: u64,
    pub(super) len: u32,
    pub(super) flags: u16,
    pub(super) next_or_id: u16,
}

impl Desc {
    pub(super) fn read_split(m: &Mem, gpa: u64) -> Self {
        Self {
            addr: m.r64(gpa),
            len: m.r32(gpa + 8),
            flags: m.r16(gpa + 12),
            next_or_id: m.r16(gpa + 14),
        }
    }

    pub(super) fn read_packed(m: &Mem, gpa: u64) -> Self {
        Self {
            addr: m.r64(gpa),
            len: m.r32(gpa + 8),
            next_or_id: m.r16(gpa + 12),
            flags: m.r16(gpa + 14),
        }
    }
}

/// The engine's fixed-capacity segment list.
#[derive(Debug, Clone)]
pub(super) struct Segs(pub(super) Vec<(u64, u32)>, pub(super) usize);

impl Segs {
    pub(super) fn new(rx: bool) -> Self {
        Self(Vec::new(), if rx { RX_SEG_CAP } else { TX_SEG_CAP })
    }

    pub(super) fn push(&mut self, gpa: u64, len: u32) -> bool {
        if self.0.len() == self.1 {
            return false;
        }
        self.0.push((gpa, len));
        true
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Pop {
    Empty,
    Chain { id: u16, ndesc: u16, len: u32 },
    Bad(Option<(u16, u16)>, DropReason),
}

/// One buffer of guest memory (translate_pieces on a one-region memory):
/// a start outside memory appends nothing; a buffer running past the end
/// appends its in-memory part, then fails.
pub(super) fn take_buf(m: &Mem, gpa: u64, len: u32, segs: &mut Segs) -> Result<(), DropReason> {
    let Some(room) = m.room(gpa) else {
        return Err(DropReason::BadAddress);
    };
    let piece = u64::from(len).min(room);
    if !segs.push(gpa, piece as u32) {
        return Err(DropReason::TooManySegments);
    }
    if piece < u64::from(len) {
        return Err(DropReason::BadAddress);
    }
    Ok(())
}

/// A split chain (`SplitRing::parse_chain_at`): returns its length.
pub(super) fn split_chain(
    m: &Mem,
    c: &Cfg,
    desc: u64,
    head: u16,
    writable: bool,
    segs: &mut Segs,
    reads: &mut u32,
) -> Result<u32, DropReason> {
    if head >= c.size {
        return Err(DropReason::BadDescriptor);
    }
    let mut table = desc;
    let mut table_len = c.size;
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
            return Err(DropReason::BadDescriptor);
        }
        if *reads > MAX_CHAIN_READS {
            return Err(DropReason::TooManySegments);
        }
        let d = Desc::read_split(m, table + 16 * u64::from(idx));
        if d.flags & INDIRECT != 0 {
            if in_indirect
                || !c.indirect
                || d.flags & NEXT != 0
                || d.len == 0
                || !d.len.is_multiple_of(16)
                || d.len / 16 > u32::from(u16::MAX)
            {
                return Err(DropReason::BadDescriptor);
            }
            if m.off(d.addr, u64::from(d.len)).is_none() {
                return Err(DropReason::BadAddress);
            }
            table = d.addr;
            table_len = (d.len / 16) as u16;
            in_indirect = true;
            idx = 0;
            seen = 0;
            continue;
        }
        if (d.flags & WRITE != 0) != writable {
            return Err(DropReason::BadDescriptor);
        }
        if d.len > 0 {
            take_buf(m, d.addr, d.len, segs)?;
            total += u64::from(d.len);
        }
        if d.flags & NEXT == 0 {
            break;
        }
        idx = d.next_or_id;
    }
    u32::try_from(total).map_err(|_| DropReason::BadDescriptor)
}

/// One packed descriptor of a chain (`PackedRing::take_desc`).
#[allow(clippy::too_many_arguments)]
pub(super) fn packed_take_desc(
    m: &Mem,
    c: &Cfg,
    d: Desc,
    writable: bool,
    first: bool,
    segs: &mut Segs,
    total: &mut u64,
    reads: &mut u32,
) -> Result<(), DropReason> {
    if d.flags & INDIRECT != 0 {
        if !c.indirect || !first || d.flags & NEXT != 0 || d.len == 0 || !d.len.is_multiple_of(16) {
            return Err(DropReason::BadDescriptor);
        }
        if d.len / 16 > MAX_CHAIN_READS - *reads {
            return Err(DropReason::TooManySegments);
        }
        if m.off(d.addr, u64::from(d.len)).is_none() {
            return Err(DropReason::BadAddress);
        }
        *reads += d.len / 16;
        for i in 0..u64::from(d.len / 16) {
            let e = Desc::read_packed(m, d.addr + 16 * i);
            if e.flags & INDIRECT != 0 {
                return Err(DropReason::BadDescriptor);
            }
            packed_take_buffer(m, e, writable, segs, total)?;
        }
        return Ok(());
    }
    packed_take_buffer(m, d, writable, segs, total)
}

pub(super) fn packed_take_buffer(
    m: &Mem,
    d: Desc,
    writable: bool,
    segs: &mut Segs,
    total: &mut u64,
) -> Result<(), DropReason> {
    if (d.flags & WRITE != 0) != writable {
        return Err(DropReason::BadDescriptor);
    }
    if d.len == 0 {
        return Ok(());
    }
    take_buf(m, d.addr, d.len, segs)?;
    *total += u64::from(d.len);
    Ok(())
}

/// Concatenated bytes of `segs` (all inside memory).
pub(super) fn gather(m: &Mem, segs: &[(u64, u32)]) -> Vec<u8> {
    let mut v = Vec::new();
    for &(gpa, len) in segs {
        v.extend_from_slice(m.at(gpa, len as usize));
    }
    v
}

/// A TX frame as the model predicts the callback sees it.
#[derive(Debug, Clone)]
pub(super) struct FrameModel {
    pub(super) hdr: VirtioNetHdr,
    pub(super) len: usize,
    /// The private head copy.
    pub(super) head: Vec<u8>,
    /// The frame bytes at parse time.
    pub(super) bytes: Vec<u8>,
    /// The chain's buffers (header included).
    pub(super) segs: Vec<(u64, u32)>,
}

/// What the engine's `TxFrame` callback observed.
#[derive(Debug)]
pub(super) struct FrameRec {
    pub(super) hdr: VirtioNetHdr,
    pub(super) len: usize,
    pub(super) head: Vec<u8>,
    pub(super) bytes: Vec<u8>,
    pub(super) partial_off: usize,
    pub(super) partial: Vec<u8>,
}

impl FrameRec {
    pub(super) fn record(f: &TxFrame<'_>, partial_off: usize) -> Self {
        let mut bytes = vec![0u8; f.len()];
        let n = f.copy_to(0, &mut bytes);
        assert_eq!(n, f.len(), "copy_to(0) copied {n} of {} bytes", f.len());
        let mut partial = vec![0u8; 100];
        let n = f.copy_to(partial_off, &mut partial);
        partial.truncate(n);
        Self {
            hdr: *f.hdr(),
            len: f.len(),
            head: f.head().to_vec(),
            bytes,
            partial_off,
            partial,
        }
    }

    pub(super) fn check(&self, want: &FrameModel, k: usize) {
        assert_eq!(self.len, want.len, "TX frame {k}: length");
        assert_eq!(self.hdr, want.hdr, "TX frame {k}: virtio-net header");
        assert_eq!(self.head, want.head, "TX frame {k}: private head");
        assert!(self.bytes == want.bytes, "TX frame {k}: bytes differ");
        let lo = self.partial_off.min(want.len);
        let hi = (self.partial_off + 100).min(want.len).max(lo);
        assert!(
            self.partial == want.bytes[lo..hi],
            "TX frame {k}: copy_to({}) differs",
            self.partial_off
        );
    }
}

/// Where an RX frame's bytes come from.
pub(super) enum Src<'a> {
    Host(&'a [u8]),
    Frame(&'a FrameModel),
}

impl Src<'_> {
    pub(super) fn len(&self) -> usize {
        match self {
            Src::Host(b) => b.len(),
            Src::Frame(f) => f.len,
        }
    }
}

/// `SegWriter`: a cursor over RX buffers. Every chunk is a memmove (the
/// engine's `copy_bytes` loads before it stores), so guest-to-guest copies
/// are modelled chunk by chunk on the current memory.
pub(super) struct Writer<'s> {
    pub(super) segs: &'s [(u64, u32)],
    pub(super) idx: usize,
    pub(super) off: usize,
    pub(super) written: usize,
}

pub(super) enum From<'a> {
    Host(&'a [u8]),
    Guest(u64),
}

impl<'s> Writer<'s> {
    pub(super) fn new(segs: &'s [(u64, u32)]) -> Self {
        Self {
            segs,
            idx: 0,
            off: 0,
            written: 0,
        }
    }

    pub(super) fn write_raw(&mut self, m: &mut Mem, src: From<'_>, mut len: usize) -> usize {
        let start = self.written;
        let mut pos = 0;
        while len > 0 {
            let Some(&(gpa, slen)) = self.segs.get(self.idx) else {
                break;
            };
            let room = slen as usize - self.off;
            if room == 0 {
                self.idx += 1;
                self.off = 0;
                continue;
            }
            let n = room.min(len);
            let chunk = match src {
                From::Host(b) => b[pos..pos + n].to_vec(),
                From::Guest(g) => m.at(g + pos as u64, n).to_vec(),
            };
            m.at_mut(gpa + self.off as u64, n).copy_from_slice(&chunk);
            self.off += n;
            self.written += n;
            pos += n;
            len -= n;
        }
        self.written - start
    }

    pub(super) fn write(&mut self, m: &mut Mem, b: &[u8]) -> usize {
        self.write_raw(m, From::Host(b), b.len())
    }

    pub(super) fn write_from_segs(
        &mut self,
        m: &mut Mem,
        src: &[(u64, u32)],
        mut offset: usize,
        mut len: usize,
    ) -> usize {
        let start = self.written;
        for &(gpa, slen) in src {
            if len == 0 {
                break;
            }
            let slen = slen as usize;
            if offset >= slen {
                offset -= slen;
                continue;
            }
            let n = (slen - offset).min(len);
            let done = self.write_raw(m, From::Guest(gpa + offset as u64), n);
            len -= done;
            offset = 0;
            if done < n {
                break;
            }
        }
        self.written - start
    }
}

pub(super) fn check_offloads(h: &VirtioNetHdr, features: u64) -> Result<(), DropReason> {
    let has = |b: u64| features & b == b;
    if h.needs_csum() && !has(bits::GUEST_CSUM) {
        return Err(DropReason::OffloadUnsupported);
    }
    if h.is_gso() {
        let need = match h.gso_type & !net_hdr::GSO_ECN {
            net_hdr::GSO_TCPV4 => bits::GUEST_TSO4,
            net_hdr::GSO_TCPV6 => bits::GUEST_TSO6,
            net_hdr::GSO_UDP => bits::GUEST_UFO,
            _ => return Err(DropReason::OffloadUnsupported),
        };
        if !has(need) || (h.gso_type & net_hdr::GSO_ECN != 0 && !has(bits::GUEST_ECN)) {
            return Err(DropReason::OffloadUnsupported);
        }
    }
    Ok(())
}

/// The device side of one vring: ring indices plus the per-queue state of
/// `queue.rs` that shows in memory or counters.
#[derive(Debug)]
pub(super) struct Dev {
    pub(super) area: Area,
    pub(super) size: u16,
    /// RX (device-writable buffers, used descriptors flagged WRITE).
    pub(super) rx: bool,
    pub(super) created: bool,
    pub(super) broken: bool,
    pub(super) reported_broken: bool,
    pub(super) notify_enabled: bool,
    pub(super) next_avail: u16,
    pub(super) avail_wrap: bool,
    pub(super) avail_cache: u16,
    pub(super) next_used: u16,
    pub(super) used_wrap: bool,
    pub(super) published_used: u16,
    pub(super) pending_head: Option<(u16, u16)>,
    /// IN_ORDER, packed TX: used buffers are returned by runs, one
    /// descriptor each (`PackedRing::push_used`).
    pub(super) in_order: bool,
    /// The open run: its first slot, flags and last buffer id.
    pub(super) run: Option<(u16, u16, u16)>,
    pub(super) counters: QueueCounters,
    /// Descriptor reads left to this burst's walks (`walk_budget`).
    pub(super) walk_budget: u32,
}

impl Dev {
    pub(super) fn new(layout: Layout, rx: bool, in_order: bool) -> Self {
        let (area, size) = match layout {
            Layout::Split(l) => (
                Area::Split {
                    desc: l.desc,
                    avail: l.avail,
                    used: l.used,
                },
                l.size,
            ),
            Layout::Packed(l) => (
                Area::Packed {
                    desc: l.desc,
                    device: l.device,
                },
                l.size,
            ),
        };
        Self {
            area,
            size,
            rx,
            created: false,
            broken: false,
            reported_broken: false,
            walk_budget: BURST_DESC_BUDGET,
            notify_enabled: false,
            next_avail: 0,
            avail_wrap: true,
            avail_cache: 0,
            next_used: 0,
            used_wrap: true,
            published_used: 0,
            pending_head: None,
            in_order: in_order && !rx,
            run: None,
            counters: QueueCounters::default(),
        }
    }

    pub(super) fn drop_frame(&mut self, r: DropReason) {
        self.counters.drops.add(r, 1);
    }

    /// `Vring::sync`: the ring starts at the first burst (loopback base:
    /// split 0, packed avail 0/wrap 1, used 0/wrap 1; split used index read
    /// from memory, and the next avail index moved to it when the base
    /// disagrees) and asks for kicks.
    pub(super) fn sync(&mut self, m: &mut Mem, c: &Cfg) {
        if self.created {
            return;
        }
        self.created = true;
        self.reported_broken = false;
        if let Area::Split { used, .. } = self.area {
            let u = m.r16(used + 2);
            self.next_used = u;
            self.published_used = u;
            // A base that disagrees with the used index: the ring starts at
            // the used index (`SplitRing::start_at_used`).
            self.next_avail = u;
            self.avail_cache = u;
        }
        self.enable_notification(m, c);
    }

    pub(super) fn is_avail(flags: u16, wrap: bool) -> bool {
        (flags & AVAIL != 0) == wrap && (flags & USED != 0) != wrap
    }

    pub(super) fn flags_at(&self, m: &Mem, slot: u16) -> u16 {
        let Area::Packed { desc, .. } = self.area else {
            unreachable!()
        };
        m.r16(desc + 16 * u64::from(slot) + 14)
    }

    pub(super) fn has_avail(&self, m: &Mem) -> bool {
        !self.broken && Self::is_avail(self.flags_at(m, self.next_avail), self.avail_wrap)
    }

    pub(super) fn refresh(&mut self, m: &Mem) -> u16 {
        let Area::Split { avail, .. } = self.area else {
            unreachable!()
        };
        if self.broken {
            return 0;
        }
        let idx = m.r16(avail + 2);
        let pending = idx.wrapping_sub(self.next_avail);
        if pending > self.size {
            self.broken = true;
            return 0;
        }
        self.avail_cache = idx;
        pending
    }

    pub(super) fn cached(&self) -> u16 {
        self.avail_cache.wrapping_sub(self.next_avail)
    }

    pub(super) fn enable_notification(&mut self, m: &mut Mem, c: &Cfg) -> bool {
        match self.area {
            Area::Split { used, .. } => {
                if c.event_idx {
                    m.w16(used + 4 + 8 * u64::from(self.size), self.next_avail);
                } else {
                    let f = m.r16(used);
                    m.w16(used, f & !1);
                }
                self.notify_enabled = true;
                self.refresh(m) > 0
            }
            Area::Packed { device, .. } => {
                if c.event_idx {
                    m.w16(device, self.next_avail | u16::from(self.avail_wrap) << 15);
                    m.w16(device + 2, 2);
                } else {
                    m.w16(device + 2, 0);
                }
                self.notify_enabled = true;
                self.has_avail(m)
            }
        }
    }

    pub(super) fn disable_notification(&mut self, m: &mut Mem, c: &Cfg) {
        if !self.notify_enabled {
            return;
        }
        self.notify_enabled = false;
        match self.area {
            Area::Split { used, .. } => {
                if !c.event_idx {
                    let f = m.r16(used);
                    m.w16(used, f | 1);
                }
            }
            Area::Packed { device, .. } => m.w16(device + 2, 1),
        }
    }

    /// `Vring::count_avail`: the ring's count, and a ring found broken
    /// counted once, as `finish_burst` would (a look is not followed by a
    /// burst; regression seed `regress-split-broken-ring-found-by-a-look`).
    pub(super) fn count_avail(&mut self, m: &Mem, max: usize) -> usize {
        let n = self.ring_count_avail(m, max);
        if n == 0 && self.broken && !self.reported_broken {
            self.reported_broken = true;
            self.drop_frame(DropReason::RingBroken);
        }
        n
    }

    /// The ring's own count (`SplitRing::count_avail`,
    /// `PackedRing::count_avail`).
    pub(super) fn ring_count_avail(&mut self, m: &Mem, max: usize) -> usize {
        match self.area {
            Area::Split { .. } => {
                // Re-reads avail.idx when the last read shows fewer than
                // `max`; a broken ring has nothing (regression seed
                // `regress-split-broken-ring-serves-cache`).
                if self.broken {
                    return 0;
                }
                let mut n = self.cached();
                if usize::from(n) < max {
                    n = self.refresh(m);
                }
                usize::from(n).min(max)
            }
            Area::Packed { .. } => {
                if self.broken {
                    return 0;
                }
                let (mut slot, mut wrap, mut n) = (self.next_avail, self.avail_wrap, 0);
                while n < max.min(usize::from(self.size)) {
                    if !Self::is_avail(self.flags_at(m, slot), wrap) {
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
        }
    }

    pub(super) fn mark(&self) -> (u16, bool) {
        (self.next_avail, self.avail_wrap)
    }

    pub(super) fn rollback(&mut self, mark: (u16, bool)) {
        (self.next_avail, self.avail_wrap) = mark;
    }

    pub(super) fn next_chain(&mut self, m: &Mem, c: &Cfg, segs: &mut Segs) -> Pop {
        match self.area {
            Area::Split { desc, avail, .. } => {
                if self.broken || (self.cached() == 0 && self.refresh(m) == 0) {
                    return Pop::Empty;
                }
                let slot = self.next_avail & (self.size - 1);
                let head = m.r16(avail + 4 + 2 * u64::from(slot));
                let inline = head < self.size
                    && self.inline(m, Desc::read_split(m, desc + 16 * u64::from(head)), segs);
                if !inline && self.walk_budget < MAX_CHAIN_READS {
                    // The burst's walks read their budget: the chain waits.
                    return Pop::Empty;
                }
                self.next_avail = self.next_avail.wrapping_add(1);
                let mut reads = 0;
                let r = split_chain(m, c, desc, head, self.rx, segs, &mut reads);
                if !inline {
                    self.walk_budget = self.walk_budget.saturating_sub(reads);
                }
                match r {
                    Ok(len) => Pop::Chain {
                        id: head,
                        ndesc: 1,
                        len,
                    },
                    Err(r) => Pop::Bad((head < self.size).then_some((head, 1)), r),
                }
            }
            Area::Packed { desc, .. } => {
                if !self.has_avail(m) {
                    return Pop::Empty;
                }
                let mut slot = self.next_avail;
                let head = Desc::read_packed(m, desc + 16 * u64::from(slot));
                let inline = self.inline(m, head, segs);
                if !inline && self.walk_budget < MAX_CHAIN_READS {
                    return Pop::Empty;
                }
                let mut count: u16 = 0;
                let mut total: u64 = 0;
                let mut err = None;
                let mut reads: u32 = 0;
                let id = loop {
                    if count == self.size || u32::from(count) == MAX_CHAIN_DESCS {
                        // Counted once, by finish_burst (regression seed
                        // `regress-packed-ring-broken-counted-twice`); a
                        // chain over MAX_CHAIN_DESCS slots breaks the ring.
                        self.broken = true;
                        return Pop::Empty;
                    }
                    let d = Desc::read_packed(m, desc + 16 * u64::from(slot));
                    count += 1;
                    reads += 1;
                    if err.is_none() {
                        if let Err(e) = packed_take_desc(
                            m,
                            c,
                            d,
                            self.rx,
                            count == 1,
                            segs,
                            &mut total,
                            &mut reads,
                        ) {
                            err = Some(e);
                        }
                    }
                    slot += 1;
                    if slot == self.size {
                        slot = 0;
                    }
                    if d.flags & NEXT == 0 || d.flags & INDIRECT != 0 {
                        break d.next_or_id;
                    }
                };
                if !inline {
                    self.walk_budget = self.walk_budget.saturating_sub(reads);
                }
                let next = u32::from(self.next_avail) + u32::from(count);
                if next >= u32::from(self.size) {
                    self.next_avail = (next - u32::from(self.size)) as u16;
                    self.avail_wrap = !self.avail_wrap;
                } else {
                    self.next_avail = next as u16;
                }
                if let Some(e) = err {
                    return Pop::Bad(Some((id, count)), e);
                }
                match u32::try_from(total) {
                    Ok(len) => Pop::Chain {
                        id,
                        ndesc: count,
                        len,
                    },
                    Err(_) => Pop::Bad(Some((id, count)), DropReason::BadDescriptor),
                }
            }
        }
    }

    /// Whether the engine takes a buffer of descriptor `d` on its inline
    /// path (`next_chain`, `next_four`), which is not charged to the
    /// burst's budget: one direct descriptor of the wanted direction, not
    /// empty, inside memory, with room in the segment list.
    pub(super) fn inline(&self, m: &Mem, d: Desc, segs: &Segs) -> bool {
        let want = if self.rx { WRITE } else { 0 };
        d.flags & (NEXT | INDIRECT | WRITE) == want
            && d.len > 0
            && m.off(d.addr, u64::from(d.len)).is_some()
            && segs.0.len() < segs.1
    }

    pub(super) fn push_used(&mut self, m: &mut Mem, id: u16, ndesc: u16, len: u32) {
        match self.area {
            Area::Split { used, .. } => {
                // Spec: only ids of heads the driver made available, < size.
                assert!(id < self.size, "model: used id {id} >= size");
                let slot = self.next_used & (self.size - 1);
                let p = used + 4 + 8 * u64::from(slot);
                m.w32(p, u32::from(id));
                m.w32(p + 4, len);
                self.next_used = self.next_used.wrapping_add(1);
            }
            Area::Packed { desc, .. } => {
                let mut flags = if self.used_wrap { AVAIL | USED } else { 0 };
                if self.in_order {
                    // The run's descriptor is written when it closes.
                    match &mut self.run {
                        Some(r) => r.2 = id,
                        None => self.run = Some((self.next_used, flags, id)),
                    }
                } else {
                    if self.rx {
                        flags |= WRITE;
                    }
                    self.write_packed_used(m, desc, self.next_used, id, len, flags);
                }
                let next = u32::from(self.next_used) + u32::from(ndesc.max(1));
                if next >= u32::from(self.size) {
                    self.next_used = (next - u32::from(self.size)) as u16;
                    self.used_wrap = !self.used_wrap;
                } else {
                    self.next_used = next as u16;
                }
            }
        }
    }

    /// One packed used descriptor; the burst's first one's flags wait for
    /// publication.
    pub(super) fn write_packed_used(
        &mut self,
        m: &mut Mem,
        desc: u64,
        slot: u16,
        id: u16,
        len: u32,
        flags: u16,
    ) {
        let p = desc + 16 * u64::from(slot);
        m.w32(p + 8, len);
        m.w16(p + 12, id);
        if self.pending_head.is_none() {
            self.pending_head = Some((slot, flags));
        } else {
            m.w16(p + 14, flags);
        }
    }

    pub(super) fn publish(&mut self, m: &mut Mem) {
        // `publish_used`: once a burst, the walks get their budget again.
        self.walk_budget = BURST_DESC_BUDGET;
        match self.area {
            Area::Split { used, .. } => {
                if self.next_used != self.published_used {
                    m.w16(used + 2, self.next_used);
                    self.published_used = self.next_used;
                }
            }
            Area::Packed { desc, .. } => {
                if let Some((slot, flags, id)) = self.run.take() {
                    self.write_packed_used(m, desc, slot, id, 0, flags);
                }
                if let Some((slot, flags)) = self.pending_head.take() {
                    m.w16(desc + 16 * u64::from(slot) + 14, flags);
                }
            }
        }
    }

    /// `Vring::finish_burst` (no call eventfd in the loopback guest, so no
    /// notifications are counted).
    pub(super) fn finish_burst(&mut self, m: &mut Mem) {
        if self.broken && !self.reported_broken {
            self.reported_broken = true;
            self.drop_frame(DropReason::RingBroken);
        }
        self.publish(m);
    }

    /// `TxQueue::recv_burst`: chains are taken in batches (up to
    /// `TX_BATCH`, and while the batch's segment list has room for a whole
    /// chain), every chain of a batch is parsed before any of its frames is
    /// handed out or returned. The order is observable: a hostile driver
    /// can make a later chain read a slot (or an indirect table) that an
    /// earlier chain's used entry overwrites.
    pub(super) fn recv_burst(
        &mut self,
        m: &mut Mem,
        c: &Cfg,
        max: usize,
        mut on_frame: impl FnMut(&mut Mem, &FrameModel),
    ) -> (usize, Vec<FrameModel>) {
        self.sync(m, c);
        let mut n = 0;
        let mut frames = Vec::new();
        while n < max {
            let want = (max - n).min(TX_BATCH);
            let mut batch: Vec<(Pop, Segs)> = Vec::new();
            let mut batch_segs = 0;
            let mut drained = false;
            while batch.len() < want && TX_BATCH_SEGS - batch_segs >= TX_SEG_CAP {
                let mut segs = Segs::new(false);
                let pop = self.next_chain(m, c, &mut segs);
                match pop {
                    Pop::Empty => {
                        drained = true;
                        break;
                    }
                    Pop::Chain { .. } => batch_segs += segs.0.len(),
                    // A refused chain's segments are dropped from the list.
                    Pop::Bad(..) => {}
                }
                batch.push((pop, segs));
            }
            if batch.is_empty() {
                break;
            }
            for (pop, segs) in batch {
                n += 1;
                let (id, ndesc, total) = match pop {
                    Pop::Empty => unreachable!("the batch stops at the first Empty"),
                    Pop::Chain { id, ndesc, len } => (id, ndesc, len as usize),
                    Pop::Bad(used, r) => {
                        self.drop_frame(r);
                        if let Some((id, nd)) = used {
                            self.push_used(m, id, nd, 0);
                        }
                        continue;
                    }
                };
                if total <= c.hdr_len {
                    self.drop_frame(DropReason::TooShort);
                } else if total - c.hdr_len > MAX_FRAME_LEN {
                    self.drop_frame(DropReason::TooLong);
                } else {
                    // The bytes as they are at hand-out time (an earlier
                    // chain's used entry may have changed them).
                    let stream = gather(m, &segs.0);
                    assert_eq!(stream.len(), total);
                    let mut hb = [0u8; MAX_HDR_LEN];
                    hb[..c.hdr_len].copy_from_slice(&stream[..c.hdr_len]);
                    let len = total - c.hdr_len;
                    let bytes = stream[c.hdr_len..].to_vec();
                    // TX headers are sanitised: only NEEDS_CSUM is kept of
                    // the flags, num_buffers is cleared.
                    let mut hdr = VirtioNetHdr::from_bytes(&hb, c.hdr_len);
                    hdr.flags &= net_hdr::F_NEEDS_CSUM;
                    hdr.num_buffers = 0;
                    let f = FrameModel {
                        hdr,
                        len,
                        head: bytes[..len.min(HEAD_LEN)].to_vec(),
                        bytes,
                        segs: segs.0,
                    };
                    on_frame(m, &f);
                    frames.push(f);
                    self.counters.packets += 1;
                    self.counters.bytes += len as u64;
                }
                // TX buffers go back with length 0.
                self.push_used(m, id, ndesc, 0);
            }
            if drained {
                break;
            }
        }
        self.finish_burst(m);
        (n, frames)
    }

    /// `RxBurst::push`.
    pub(super) fn push(
        &mut self,
        m: &mut Mem,
        c: &Cfg,
        hdr: &VirtioNetHdr,
        src: Src<'_>,
    ) -> Result<(), DropReason> {
        match self.push_inner(m, c, hdr, src) {
            Ok(bytes) => {
                self.counters.packets += 1;
                self.counters.bytes += bytes as u64;
                Ok(())
            }
            Err(r) => {
                self.drop_frame(r);
                Err(r)
            }
        }
    }

    pub(super) fn push_inner(
        &mut self,
        m: &mut Mem,
        c: &Cfg,
        hdr: &VirtioNetHdr,
        src: Src<'_>,
    ) -> Result<usize, DropReason> {
        check_offloads(hdr, c.features)?;
        let flen = src.len();
        if flen == 0 {
            return Err(DropReason::TooShort);
        }
        if flen > MAX_FRAME_LEN {
            return Err(DropReason::TooLong);
        }
        let need = c.hdr_len + flen;
        let mut segs = Segs::new(true);
        let mark = self.mark();
        let mut chains: Vec<(u16, u16, u32)> = Vec::new();
        let mut cap = 0usize;
        while cap < need {
            if chains.len() == MAX_RX_CHAINS {
                self.rollback(mark);
                return Err(DropReason::TooLong);
            }
            let segs_before = segs.0.len();
            match self.next_chain(m, c, &mut segs) {
                Pop::Empty => {
                    self.rollback(mark);
                    return Err(DropReason::NoBuffers);
                }
                // Out of the queue's own segment budget (not a bad chain):
                // every buffer stays with the guest.
                Pop::Bad(_, DropReason::TooManySegments) if segs_before > 0 => {
                    self.rollback(mark);
                    return Err(DropReason::TooLong);
                }
                Pop::Chain { id, ndesc, len } => {
                    chains.push((id, ndesc, len));
                    cap += len as usize;
                }
                Pop::Bad(used, r) => {
                    for &(id, nd, _) in &chains {
                        self.push_used(m, id, nd, 0);
                    }
                    if let Some((id, nd)) = used {
                        self.push_used(m, id, nd, 0);
                    }
                    return Err(r);
                }
            }
            if !c.mrg {
                break;
            }
        }
        if cap < need {
            self.rollback(mark);
            return Err(DropReason::TooLong);
        }
        let mut h = *hdr;
        h.num_buffers = chains.len() as u16;
        if c.features & bits::GUEST_CSUM == 0 {
            h.flags &= !net_hdr::F_DATA_VALID;
        }
        let mut w = Writer::new(&segs.0);
        w.write(m, &h.to_bytes()[..c.hdr_len]);
        match src {
            Src::Host(b) => {
                w.write(m, b);
            }
            Src::Frame(f) => {
                w.write(m, &f.head);
                if f.len > f.head.len() {
                    w.write_from_segs(m, &f.segs, c.hdr_len + f.head.len(), f.len - f.head.len());
                }
            }
        }
        let mut remaining = w.written;
        assert_eq!(
            remaining, need,
            "model: frame did not fit its reserved buffers"
        );
        let bytes = remaining.saturating_sub(c.hdr_len);
        for &(id, nd, len) in &chains {
            let l = remaining.min(len as usize);
            // Spec: a used length never exceeds the buffer's length.
            assert!(l <= len as usize);
            self.push_used(m, id, nd, l as u32);
            remaining -= l;
        }
        Ok(bytes)
    }
}
