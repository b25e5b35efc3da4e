// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The `rings` target: a hostile guest on one queue pair of a
//! [`LoopbackGuest`] (split or packed rings in anonymous memory), checked
//! against a reference model of the ring engine.
//!
//! # Input
//!
//! Three configuration bytes (ring format and features, ring size, buffer
//! length), then a sequence of operations ([`op`]), each an opcode and its
//! arguments. Driver operations write descriptors, indirect tables (placed
//! in buffer memory), avail entries and indices, packed flags and event
//! areas, with addresses and lengths drawn from classes meant to hit the
//! interesting cases: buffers of either ring, the rings themselves, the end
//! of guest memory, outside guest memory, zero, one past a buffer, 4 GiB,
//! unaligned tables, self-referencing and nested indirect tables, loops,
//! heads and `next` indices >= size, stale and far-ahead avail indices,
//! unavailable or prematurely-used packed flags. Device operations run the
//! burst API: `TxQueue::recv_burst`, `RxBurst::push` of frames of chosen
//! sizes and headers, echo (each TX frame pushed into RX from inside the TX
//! callback: guest-to-guest copies that may alias), notification
//! enable/disable, and the `pending`/`available` queries.
//!
//! # Oracle
//!
//! Before each device operation the harness snapshots all guest memory and
//! runs the model ([`Dev`]) on the snapshot; then it runs the engine and
//! requires exact agreement:
//!
//! - guest memory afterwards, byte for byte (used entries, used lengths,
//!   event-suppression fields, and every byte the device wrote into RX
//!   buffers; so nothing is written outside RX buffers the guest described
//!   as device-writable, and TX buffers are never written through a TX
//!   chain);
//! - the queue counters (packets, bytes, drops by reason);
//! - every TX frame handed to the callback (header, length, private head,
//!   bytes through `copy_to` at offset 0 and at a chosen offset);
//! - return values (`recv_burst`, `push`, `enable_notifications`,
//!   `pending`, `available`).
//!
//! And, by construction of the model: every chain the device consumed is
//! returned in the used ring (length 0 on TX and for refused buffers) or,
//! when it has no valid id, counted as a drop; RX used lengths never exceed
//! the buffer's length; any panic in the library is a finding.
//!
//! The model follows the engine's documented rules (`ring/split.rs`,
//! `ring/packed.rs`, `queue.rs`); where those are policy (limits, which
//! error is reported), it encodes the policy, and a disagreement is either
//! a bug in the engine or a rule change that must be reflected here.

use vhost_net_backend::device::{bits, MAX_FRAME_LEN};
use vhost_net_backend::net_hdr::{self, MAX_HDR_LEN};
use vhost_net_backend::test_utils::flags::{
    DESC_F_AVAIL as AVAIL, DESC_F_INDIRECT as INDIRECT, DESC_F_NEXT as NEXT, DESC_F_USED as USED,
    DESC_F_WRITE as WRITE,
};
// The engine's limits, imported rather than copied: where they are policy
// (how long a chain, how much one burst walks), the model follows them.
//
// Segments the engine's per-queue segment list holds: one TX chain
// (`MAX_CHAIN_SEGS`), or all the chains of one RX frame
// (`MAX_RX_FRAME_SEGS`). Buffer descriptors one chain may take
// (`MAX_CHAIN_DESCS`; a walk reads one indirect descriptor more,
// `MAX_CHAIN_READS`), and one burst's walks (`BURST_DESC_BUDGET`): a walk
// starts only while `MAX_CHAIN_READS` of the budget are left; one direct
// descriptor taken inline is not charged. Chains one TX batch takes at most
// (`TX_BATCH`), and the segments its list holds (`TX_BATCH_SEGS`: a chain
// is taken only while a whole chain's worth of room is left).
use vhost_net_backend::test_utils::limits::{
    BURST_DESC_BUDGET, HEAD_LEN, MAX_CHAIN_DESCS, MAX_CHAIN_READS, MAX_CHAIN_SEGS as TX_SEG_CAP,
    MAX_RX_CHAINS, MAX_RX_FRAME_SEGS as RX_SEG_CAP, TX_BATCH, TX_BATCH_SEGS,
};
use vhost_net_backend::test_utils::{Layout, LoopbackGuest, LoopbackOpts};
use vhost_net_backend::{DropReason, QueueCounters, TxFrame, VirtioNetHdr};

use crate::input::{Enc, Input};

/// Most operations decoded from one input.
const MAX_OPS: usize = 48;

/// Configuration byte 0.
pub mod cfg {
    /// Packed rings.
    pub const PACKED: u8 = 1;
    /// `VIRTIO_RING_F_EVENT_IDX`.
    pub const EVENT_IDX: u8 = 2;
    /// `VIRTIO_RING_F_INDIRECT_DESC`.
    pub const INDIRECT: u8 = 4;
    /// `VIRTIO_NET_F_MRG_RXBUF`.
    pub const MRG: u8 = 8;
    /// The guest receive offloads (checksum, TSO, UFO, ECN).
    pub const OFFLOADS: u8 = 16;
    /// `VIRTIO_F_IN_ORDER` (packed TX buffers returned by runs).
    pub const IN_ORDER: u8 = 32;
}

/// Opcodes (the operation byte modulo [`op::COUNT`]).
pub mod op {
    /// A well-formed chain of 1-4 descriptors (or an indirect table) on TX.
    pub const POST_TX: u8 = 0;
    /// A well-formed chain of writable descriptors on RX.
    pub const POST_RX: u8 = 1;
    /// One raw descriptor with chosen address, length, flags, next/id.
    pub const RAW_DESC: u8 = 2;
    /// An indirect table in buffer memory and a descriptor pointing at it.
    pub const INDIRECT: u8 = 3;
    /// Avail ring / index (split) or flags and wrap (packed) manipulation.
    pub const AVAIL: u8 = 4;
    /// `TxQueue::recv_burst`.
    pub const TX_BURST: u8 = 5;
    /// `RxBurst::push` of up to 8 frames.
    pub const RX_BURST: u8 = 6;
    /// `recv_burst` pushing each frame into RX from the callback.
    pub const ECHO: u8 = 7;
    /// `enable_notifications` / `disable_notifications`.
    pub const NOTIFY: u8 = 8;
    /// Raw bytes over a ring area (including device-owned ones).
    pub const RAW_BYTES: u8 = 9;
    /// `TxQueue::pending` / `RxQueue::available`.
    pub const QUERY: u8 = 10;
    /// Number of opcodes.
    pub const COUNT: u8 = 11;
}

/// Decodes and runs one input; panics on any disagreement.
pub fn run(data: &[u8]) {
    run_inner(data);
}

/// Runs one input and describes the outcome (ring format and size, the
/// final RX and TX counters), for checking what seeds exercise.
pub fn summary(data: &[u8]) -> String {
    let h = run_inner(data);
    format!(
        "packed={} size={} buf_len={} features={:#x}\n  rx {:?}\n  tx {:?}",
        h.c.packed,
        h.c.size,
        h.c.buf_len,
        h.c.features,
        h.g.qp.rx.counters(),
        h.g.qp.tx.counters()
    )
}

/// Runs one input and returns the final RX and TX counters of its queue
/// pair (what a seed's checks assert on).
pub fn counters(data: &[u8]) -> (QueueCounters, QueueCounters) {
    let h = run_inner(data);
    (h.g.qp.rx.counters(), h.g.qp.tx.counters())
}

fn run_inner(data: &[u8]) -> Harness {
    let mut inp = Input::new(data);
    let mut h = Harness::new(&mut inp);
    let mut ops = 0;
    while !inp.is_empty() && ops < MAX_OPS {
        h.step(&mut inp);
        ops += 1;
    }
    h
}

const OP_NAMES: [&str; op::COUNT as usize] = [
    "post_tx",
    "post_rx",
    "raw_desc",
    "indirect",
    "avail",
    "tx_burst",
    "rx_burst",
    "echo",
    "notify",
    "raw_bytes",
    "query",
];

/// Whether to print each operation (`VHU_FUZZ_TRACE=1`, for triage).
fn trace() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("VHU_FUZZ_TRACE").is_some())
}

// ===== guest memory, as the model sees it =====

#[derive(Clone)]
struct Mem {
    base: u64,
    b: Vec<u8>,
}

impl Mem {
    /// Offset of `[gpa, gpa + len)` if it lies in guest memory (like the
    /// engine's `translate`, `gpa` itself must be inside).
    fn off(&self, gpa: u64, len: u64) -> Option<usize> {
        let off = gpa.checked_sub(self.base)?;
        let size = self.b.len() as u64;
        (off < size && len <= size - off).then_some(off as usize)
    }

    /// Bytes from `gpa` to the end of memory, if `gpa` is inside.
    fn room(&self, gpa: u64) -> Option<u64> {
        self.off(gpa, 0).map(|o| (self.b.len() - o) as u64)
    }

    fn at(&self, gpa: u64, len: usize) -> &[u8] {
        let o = self.off(gpa, len as u64).expect("model read inside memory");
        &self.b[o..o + len]
    }

    fn at_mut(&mut self, gpa: u64, len: usize) -> &mut [u8] {
        let o = self
            .off(gpa, len as u64)
            .expect("model write inside memory");
        &mut self.b[o..o + len]
    }

    fn r16(&self, gpa: u64) -> u16 {
        u16::from_le_bytes(self.at(gpa, 2).try_into().expect("2"))
    }

    fn r32(&self, gpa: u64) -> u32 {
        u32::from_le_bytes(self.at(gpa, 4).try_into().expect("4"))
    }

    fn r64(&self, gpa: u64) -> u64 {
        u64::from_le_bytes(self.at(gpa, 8).try_into().expect("8"))
    }

    fn w16(&mut self, gpa: u64, v: u16) {
        self.at_mut(gpa, 2).copy_from_slice(&v.to_le_bytes());
    }

    fn w32(&mut self, gpa: u64, v: u32) {
        self.at_mut(gpa, 4).copy_from_slice(&v.to_le_bytes());
    }
}

// ===== the model =====

/// What the engine knows of the negotiation.
#[derive(Debug, Clone, Copy)]
struct Cfg {
    packed: bool,
    size: u16,
    buf_len: u32,
    /// Acked features as the engine sees them (VERSION_1 and RING_PACKED
    /// added by the loopback guest).
    features: u64,
    hdr_len: usize,
    event_idx: bool,
    indirect: bool,
    mrg: bool,
}

#[derive(Debug, Clone, Copy)]
enum Area {
    Split { desc: u64, avail: u64, used: u64 },
    Packed { desc: u64, device: u64 },
}

/// One descriptor as the engine decodes it (split: `next`; packed: `id`).
#[derive(Debug, Clone, Copy)]
struct Desc {
    addr: u64,
    len: u32,
    flags: u16,
    next_or_id: u16,
}

impl Desc {
    fn read_split(m: &Mem, gpa: u64) -> Self {
        Self {
            addr: m.r64(gpa),
            len: m.r32(gpa + 8),
            flags: m.r16(gpa + 12),
            next_or_id: m.r16(gpa + 14),
        }
    }

    fn read_packed(m: &Mem, gpa: u64) -> Self {
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
struct Segs(Vec<(u64, u32)>, usize);

impl Segs {
    fn new(rx: bool) -> Self {
        Self(Vec::new(), if rx { RX_SEG_CAP } else { TX_SEG_CAP })
    }

    fn push(&mut self, gpa: u64, len: u32) -> bool {
        if self.0.len() == self.1 {
            return false;
        }
        self.0.push((gpa, len));
        true
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pop {
    Empty,
    Chain { id: u16, ndesc: u16, len: u32 },
    Bad(Option<(u16, u16)>, DropReason),
}

/// One buffer of guest memory (translate_pieces on a one-region memory):
/// a start outside memory appends nothing; a buffer running past the end
/// appends its in-memory part, then fails.
fn take_buf(m: &Mem, gpa: u64, len: u32, segs: &mut Segs) -> Result<(), DropReason> {
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
fn split_chain(
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
fn packed_take_desc(
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

fn packed_take_buffer(
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
fn gather(m: &Mem, segs: &[(u64, u32)]) -> Vec<u8> {
    let mut v = Vec::new();
    for &(gpa, len) in segs {
        v.extend_from_slice(m.at(gpa, len as usize));
    }
    v
}

/// A TX frame as the model predicts the callback sees it.
#[derive(Debug, Clone)]
struct FrameModel {
    hdr: VirtioNetHdr,
    len: usize,
    /// The private head copy.
    head: Vec<u8>,
    /// The frame bytes at parse time.
    bytes: Vec<u8>,
    /// The chain's buffers (header included).
    segs: Vec<(u64, u32)>,
}

/// What the engine's `TxFrame` callback observed.
#[derive(Debug)]
struct FrameRec {
    hdr: VirtioNetHdr,
    len: usize,
    head: Vec<u8>,
    bytes: Vec<u8>,
    partial_off: usize,
    partial: Vec<u8>,
}

impl FrameRec {
    fn record(f: &TxFrame<'_>, partial_off: usize) -> Self {
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

    fn check(&self, want: &FrameModel, k: usize) {
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
enum Src<'a> {
    Host(&'a [u8]),
    Frame(&'a FrameModel),
}

impl Src<'_> {
    fn len(&self) -> usize {
        match self {
            Src::Host(b) => b.len(),
            Src::Frame(f) => f.len,
        }
    }
}

/// `SegWriter`: a cursor over RX buffers. Every chunk is a memmove (the
/// engine's `copy_bytes` loads before it stores), so guest-to-guest copies
/// are modelled chunk by chunk on the current memory.
struct Writer<'s> {
    segs: &'s [(u64, u32)],
    idx: usize,
    off: usize,
    written: usize,
}

enum From<'a> {
    Host(&'a [u8]),
    Guest(u64),
}

impl<'s> Writer<'s> {
    fn new(segs: &'s [(u64, u32)]) -> Self {
        Self {
            segs,
            idx: 0,
            off: 0,
            written: 0,
        }
    }

    fn write_raw(&mut self, m: &mut Mem, src: From<'_>, mut len: usize) -> usize {
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

    fn write(&mut self, m: &mut Mem, b: &[u8]) -> usize {
        self.write_raw(m, From::Host(b), b.len())
    }

    fn write_from_segs(
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

fn check_offloads(h: &VirtioNetHdr, features: u64) -> Result<(), DropReason> {
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
struct Dev {
    area: Area,
    size: u16,
    /// RX (device-writable buffers, used descriptors flagged WRITE).
    rx: bool,
    created: bool,
    broken: bool,
    reported_broken: bool,
    notify_enabled: bool,
    next_avail: u16,
    avail_wrap: bool,
    avail_cache: u16,
    next_used: u16,
    used_wrap: bool,
    published_used: u16,
    pending_head: Option<(u16, u16)>,
    /// IN_ORDER, packed TX: used buffers are returned by runs, one
    /// descriptor each (`PackedRing::push_used`).
    in_order: bool,
    /// The open run: its first slot, flags and last buffer id.
    run: Option<(u16, u16, u16)>,
    counters: QueueCounters,
    /// Descriptor reads left to this burst's walks (`walk_budget`).
    walk_budget: u32,
}

impl Dev {
    fn new(layout: Layout, rx: bool, in_order: bool) -> Self {
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

    fn drop_frame(&mut self, r: DropReason) {
        self.counters.drops.add(r, 1);
    }

    /// `Vring::sync`: the ring starts at the first burst (loopback base:
    /// split 0, packed avail 0/wrap 1, used 0/wrap 1; split used index read
    /// from memory, and the next avail index moved to it when the base
    /// disagrees) and asks for kicks.
    fn sync(&mut self, m: &mut Mem, c: &Cfg) {
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

    fn is_avail(flags: u16, wrap: bool) -> bool {
        (flags & AVAIL != 0) == wrap && (flags & USED != 0) != wrap
    }

    fn flags_at(&self, m: &Mem, slot: u16) -> u16 {
        let Area::Packed { desc, .. } = self.area else {
            unreachable!()
        };
        m.r16(desc + 16 * u64::from(slot) + 14)
    }

    fn has_avail(&self, m: &Mem) -> bool {
        !self.broken && Self::is_avail(self.flags_at(m, self.next_avail), self.avail_wrap)
    }

    fn refresh(&mut self, m: &Mem) -> u16 {
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

    fn cached(&self) -> u16 {
        self.avail_cache.wrapping_sub(self.next_avail)
    }

    fn enable_notification(&mut self, m: &mut Mem, c: &Cfg) -> bool {
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

    fn disable_notification(&mut self, m: &mut Mem, c: &Cfg) {
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
    fn count_avail(&mut self, m: &Mem, max: usize) -> usize {
        let n = self.ring_count_avail(m, max);
        if n == 0 && self.broken && !self.reported_broken {
            self.reported_broken = true;
            self.drop_frame(DropReason::RingBroken);
        }
        n
    }

    /// The ring's own count (`SplitRing::count_avail`,
    /// `PackedRing::count_avail`).
    fn ring_count_avail(&mut self, m: &Mem, max: usize) -> usize {
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

    fn mark(&self) -> (u16, bool) {
        (self.next_avail, self.avail_wrap)
    }

    fn rollback(&mut self, mark: (u16, bool)) {
        (self.next_avail, self.avail_wrap) = mark;
    }

    fn next_chain(&mut self, m: &Mem, c: &Cfg, segs: &mut Segs) -> Pop {
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
    fn inline(&self, m: &Mem, d: Desc, segs: &Segs) -> bool {
        let want = if self.rx { WRITE } else { 0 };
        d.flags & (NEXT | INDIRECT | WRITE) == want
            && d.len > 0
            && m.off(d.addr, u64::from(d.len)).is_some()
            && segs.0.len() < segs.1
    }

    fn push_used(&mut self, m: &mut Mem, id: u16, ndesc: u16, len: u32) {
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
    fn write_packed_used(
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

    fn publish(&mut self, m: &mut Mem) {
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
    fn finish_burst(&mut self, m: &mut Mem) {
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
    fn recv_burst(
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
    fn push(
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

    fn push_inner(
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

// ===== the hostile driver and the checks =====

#[derive(Debug, Default, Clone, Copy)]
struct Drv {
    /// Split: next descriptor index to use for a well-formed chain.
    next_desc: u16,
    /// Packed: next slot to post at, and the driver's wrap counter.
    pk_next: u16,
    pk_wrap: bool,
}

struct Harness {
    g: LoopbackGuest,
    c: Cfg,
    base: u64,
    len: u64,
    /// 0: RX, 1: TX.
    dev: [Dev; 2],
    drv: [Drv; 2],
    pattern: Vec<u8>,
}

const fn side(rx: bool) -> usize {
    if rx {
        0
    } else {
        1
    }
}

impl Harness {
    fn new(inp: &mut Input<'_>) -> Self {
        let cb = inp.u8();
        let packed = cb & cfg::PACKED != 0;
        let sb = inp.u8();
        let size = if packed {
            1 + u16::from(sb)
        } else {
            1u16 << (sb % 9)
        };
        let mut buf_len: u32 = [64, 128, 256, 512, 1024, 2048, 4096][usize::from(inp.u8() % 7)];
        // Keep guest memory small: the oracle compares all of it after
        // every device operation.
        while u32::from(size) * buf_len > 128 * 1024 && buf_len > 64 {
            buf_len /= 2;
        }
        let mut features = 0;
        if cb & cfg::EVENT_IDX != 0 {
            features |= bits::EVENT_IDX;
        }
        if cb & cfg::INDIRECT != 0 {
            features |= bits::INDIRECT_DESC;
        }
        if cb & cfg::MRG != 0 {
            features |= bits::MRG_RXBUF;
        }
        if cb & cfg::IN_ORDER != 0 {
            features |= bits::IN_ORDER;
        }
        if cb & cfg::OFFLOADS != 0 {
            features |= bits::GUEST_CSUM
                | bits::GUEST_TSO4
                | bits::GUEST_TSO6
                | bits::GUEST_UFO
                | bits::GUEST_ECN;
        }
        let g = LoopbackGuest::new(LoopbackOpts {
            packed,
            size,
            features,
            buf_len,
            rx_buf_len: None,
        });
        let mut acked = features | bits::VERSION_1;
        if packed {
            acked |= bits::RING_PACKED;
        }
        let c = Cfg {
            packed,
            size,
            buf_len,
            features: acked,
            hdr_len: g.hdr_len(),
            event_idx: cb & cfg::EVENT_IDX != 0,
            indirect: cb & cfg::INDIRECT != 0,
            mrg: cb & cfg::MRG != 0,
        };
        let (base, len) = g.memory_range();
        let dev = [
            Dev::new(g.layout(true), true, cb & cfg::IN_ORDER != 0),
            Dev::new(g.layout(false), false, cb & cfg::IN_ORDER != 0),
        ];
        let drv = [Drv {
            pk_wrap: true,
            ..Drv::default()
        }; 2];
        let pattern = (0..MAX_FRAME_LEN + 512)
            .map(|i| (i as u32).wrapping_mul(0x9e37_79b1).rotate_left(7) as u8)
            .collect();
        Self {
            g,
            c,
            base,
            len,
            dev,
            drv,
            pattern,
        }
    }

    fn step(&mut self, inp: &mut Input<'_>) {
        let code = inp.u8() % op::COUNT;
        if trace() {
            eprintln!("op {} ({})", code, OP_NAMES[usize::from(code)]);
        }
        match code {
            op::POST_TX => self.op_post(inp, false),
            op::POST_RX => self.op_post(inp, true),
            op::RAW_DESC => self.op_raw_desc(inp),
            op::INDIRECT => self.op_indirect(inp),
            op::AVAIL => self.op_avail(inp),
            op::TX_BURST => self.op_tx_burst(inp),
            op::RX_BURST => self.op_rx_burst(inp),
            op::ECHO => self.op_echo(inp),
            op::NOTIFY => self.op_notify(inp),
            op::RAW_BYTES => self.op_raw_bytes(inp),
            _ => self.op_query(inp),
        }
    }

    // ----- memory access -----

    fn snapshot(&self) -> Mem {
        let mut b = vec![0u8; self.len as usize];
        self.g.read_guest(self.base, &mut b);
        Mem { base: self.base, b }
    }

    fn write(&self, gpa: u64, bytes: &[u8]) {
        self.g.write_guest(gpa, bytes);
    }

    fn r16(&self, gpa: u64) -> u16 {
        let mut b = [0u8; 2];
        self.g.read_guest(gpa, &mut b);
        u16::from_le_bytes(b)
    }

    /// Names the area holding `gpa`, for failure messages.
    fn describe(&self, gpa: u64) -> String {
        let n = u64::from(self.c.size);
        let bl = u64::from(self.c.buf_len);
        for rx in [true, false] {
            let s = if rx { "RX" } else { "TX" };
            let areas: [(&str, u64, u64); 3] = match self.g.layout(rx) {
                Layout::Split(l) => [
                    ("desc table", l.desc, 16 * n),
                    ("avail ring", l.avail, 6 + 2 * n),
                    ("used ring", l.used, 6 + 8 * n),
                ],
                Layout::Packed(l) => [
                    ("desc ring", l.desc, 16 * n),
                    ("driver event area", l.driver, 4),
                    ("device event area", l.device, 4),
                ],
            };
            for (name, a, l) in areas {
                if gpa >= a && gpa < a + l {
                    return format!("{s} {name} +{:#x}", gpa - a);
                }
            }
            let b0 = self.g.buffer_gpa(rx, 0);
            if gpa >= b0 && gpa < b0 + n * bl {
                return format!("{s} buffer {} +{:#x}", (gpa - b0) / bl, (gpa - b0) % bl);
            }
        }
        "padding".to_string()
    }

    fn check_mem(&self, want: &Mem, what: &str) {
        let got = self.snapshot();
        if got.b == want.b {
            return;
        }
        let diffs: Vec<usize> = (0..got.b.len())
            .filter(|&i| got.b[i] != want.b[i])
            .collect();
        let first = diffs[0];
        let gpa = self.base + first as u64;
        let lo = first & !15;
        let hi = (lo + 32).min(got.b.len());
        panic!(
            "{what}: guest memory differs from the model at {} byte(s); first at {gpa:#x} ({})\n\
             engine: {:02x?}\nmodel:  {:02x?}",
            diffs.len(),
            self.describe(gpa),
            &got.b[lo..hi],
            &want.b[lo..hi],
        );
    }

    fn check_counters(&self, what: &str) {
        let rx = self.g.qp.rx.counters();
        let tx = self.g.qp.tx.counters();
        assert_eq!(
            rx, self.dev[0].counters,
            "{what}: RX counters differ from the model"
        );
        assert_eq!(
            tx, self.dev[1].counters,
            "{what}: TX counters differ from the model"
        );
    }

    // ----- value generators -----

    fn areas(&self) -> Vec<(u64, u64)> {
        let n = u64::from(self.c.size);
        let mut v = Vec::new();
        for rx in [true, false] {
            match self.g.layout(rx) {
                Layout::Split(l) => {
                    v.push((l.desc, 16 * n));
                    v.push((l.avail, 6 + 2 * n));
                    v.push((l.used, 6 + 8 * n));
                }
                Layout::Packed(l) => {
                    v.push((l.desc, 16 * n));
                    v.push((l.driver, 4));
                    v.push((l.device, 4));
                }
            }
        }
        v
    }

    fn gen_addr(&self, inp: &mut Input<'_>, rx: bool) -> u64 {
        let sel = inp.u8();
        let (base, len) = (self.base, self.len);
        match sel % 8 {
            0..=2 => {
                let b = self.g.buffer_gpa(rx, inp.u16() % self.c.size);
                if sel & 0x80 != 0 {
                    b + u64::from(inp.u8() % 64)
                } else {
                    b
                }
            }
            3 => self.g.buffer_gpa(!rx, inp.u16() % self.c.size),
            4 => {
                let areas = self.areas();
                let (a, l) = areas[usize::from(inp.u8()) % areas.len()];
                a + u64::from(inp.u16()) % l
            }
            // Near the end of guest memory: buffers that run past it.
            5 => base + len - 1 - u64::from(inp.u16() % 256),
            6 => [
                0,
                base - 1,
                base - 16,
                base + len,
                base + len + 4096,
                u64::MAX - 15,
                u64::MAX,
                1 << 63,
            ][usize::from(inp.u8() % 8)],
            _ => inp.u64(),
        }
    }

    fn gen_len(&self, inp: &mut Input<'_>) -> u32 {
        match inp.u8() % 10 {
            0 => 0,
            1 => 1 + u32::from(inp.u8()),
            2 => self.c.buf_len,
            3 => self.c.buf_len + 1,
            4 => u32::MAX,
            5 => 0x8000_0000 | u32::from(inp.u16()),
            6 => 16 * (1 + u32::from(inp.u8() % 16)),
            7 => self.c.hdr_len as u32,
            8 => self.len as u32,
            _ => inp.u32(),
        }
    }

    /// Descriptor flags: NEXT, WRITE (the right direction for the ring
    /// unless flipped), INDIRECT; packed: AVAIL/USED for the driver's wrap
    /// or raw; sometimes unknown bits.
    fn gen_flags(&self, inp: &mut Input<'_>, rx: bool, wrap: bool) -> u16 {
        let b = inp.u8();
        let mut f = 0;
        if b & 1 != 0 {
            f |= NEXT;
        }
        if b & 6 == 6 {
            f |= INDIRECT;
        }
        if (b & 8 != 0) != rx {
            f |= WRITE;
        }
        if self.c.packed {
            if b & 0x10 != 0 {
                if b & 0x20 != 0 {
                    f |= AVAIL;
                }
                if b & 0x40 != 0 {
                    f |= USED;
                }
            } else {
                f |= avail_bits(wrap);
            }
        }
        if b & 0x80 != 0 {
            f |= inp.u16() & 0x7f78;
        }
        f
    }

    fn gen_next(&self, inp: &mut Input<'_>, i: u16) -> u16 {
        let n = self.c.size;
        match inp.u8() % 4 {
            0 => (i + 1) % n,
            1 => i,
            2 => n.saturating_add(u16::from(inp.u8())),
            _ => inp.u16(),
        }
    }

    // ----- driver primitives -----

    fn write_desc(&self, rx: bool, i: u16, d: Desc) {
        match self.g.layout(rx) {
            Layout::Split(l) => self.write_split(l.desc + 16 * u64::from(i), d),
            Layout::Packed(l) => self.write_packed(l.desc + 16 * u64::from(i), d),
        }
    }

    fn write_split(&self, gpa: u64, d: Desc) {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&d.addr.to_le_bytes());
        b[8..12].copy_from_slice(&d.len.to_le_bytes());
        b[12..14].copy_from_slice(&d.flags.to_le_bytes());
        b[14..].copy_from_slice(&d.next_or_id.to_le_bytes());
        self.write(gpa, &b);
    }

    fn write_packed(&self, gpa: u64, d: Desc) {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&d.addr.to_le_bytes());
        b[8..12].copy_from_slice(&d.len.to_le_bytes());
        b[12..14].copy_from_slice(&d.next_or_id.to_le_bytes());
        b[14..].copy_from_slice(&d.flags.to_le_bytes());
        self.write(gpa, &b);
    }

    /// Writes entry `i` of an indirect table (split or packed layout).
    fn write_table_entry(&self, table: u64, i: u16, d: Desc) {
        let gpa = table + 16 * u64::from(i);
        if self.c.packed {
            self.write_packed(gpa, d);
        } else {
            self.write_split(gpa, d);
        }
    }

    fn split_avail(&self, rx: bool) -> u64 {
        match self.g.layout(rx) {
            Layout::Split(l) => l.avail,
            Layout::Packed(_) => unreachable!(),
        }
    }

    /// Split: puts `head` in the next avail slot and bumps `avail.idx`.
    fn post_split_head(&self, rx: bool, head: u16) {
        let avail = self.split_avail(rx);
        let idx = self.r16(avail + 2);
        let slot = u64::from(idx % self.c.size);
        self.write(avail + 4 + 2 * slot, &head.to_le_bytes());
        self.write(avail + 2, &idx.wrapping_add(1).to_le_bytes());
    }

    /// Packed: writes a chain at the driver's position, the head's flags
    /// last; `descs[i].flags` get the AVAIL/USED bits of their slot.
    fn post_packed(&mut self, rx: bool, descs: &[Desc]) {
        let Layout::Packed(l) = self.g.layout(rx) else {
            unreachable!()
        };
        let d = &mut self.drv[side(rx)];
        let mut slots = Vec::with_capacity(descs.len());
        for _ in descs {
            slots.push((d.pk_next, d.pk_wrap));
            d.pk_next += 1;
            if d.pk_next == self.c.size {
                d.pk_next = 0;
                d.pk_wrap = !d.pk_wrap;
            }
        }
        for (desc, &(slot, wrap)) in descs.iter().zip(&slots).rev() {
            let mut dd = *desc;
            dd.flags = (dd.flags & !(AVAIL | USED)) | avail_bits(wrap);
            self.write_packed(l.desc + 16 * u64::from(slot), dd);
        }
    }

    // ----- driver operations -----

    /// A well-formed chain: 1-4 descriptors over consecutive buffers, or
    /// the same behind an indirect table.
    fn op_post(&mut self, inp: &mut Input<'_>, rx: bool) {
        let b = inp.u8();
        let n = self.c.size;
        let mut k = (1 + u16::from(b % 4)).min(n);
        let use_ind = b & 0x10 != 0 && n >= 2;
        if use_ind {
            if b & 0x40 != 0 {
                // A long table (up to 64 entries): many segments per chain.
                k = (k * 16).min((self.c.buf_len / 16) as u16);
            }
            k = k.min(n - 1);
        }
        let bl = self.c.buf_len as usize;
        let hl = self.c.hdr_len;
        // Lengths of the k pieces.
        let lens: Vec<u32> = if rx {
            (0..k)
                .map(|_| {
                    if b & 0x20 != 0 {
                        u32::from(inp.u16()) % (self.c.buf_len + 1)
                    } else {
                        self.c.buf_len
                    }
                })
                .collect()
        } else {
            let l = usize::from(inp.u16()) % (usize::from(k) * bl - hl + 1);
            let total = hl + l;
            let per = total.div_ceil(usize::from(k));
            let mut left = total;
            (0..k)
                .map(|_| {
                    let p = per.min(left);
                    left -= p;
                    p as u32
                })
                .collect()
        };
        // TX bytes: header (zero or raw) and a pattern.
        let stream: Vec<u8> = if rx {
            Vec::new()
        } else {
            let total: usize = lens.iter().map(|&l| l as usize).sum();
            let mut s = vec![0u8; hl];
            if b & 0x20 != 0 {
                for x in s.iter_mut() {
                    *x = inp.u8();
                }
            }
            let seed = usize::from(inp.u8());
            s.extend_from_slice(&self.pattern[seed..seed + total - hl]);
            s
        };
        let start = if self.c.packed {
            self.drv[side(rx)].pk_next
        } else {
            self.drv[side(rx)].next_desc
        };
        let first_data = if use_ind { 1 } else { 0 };
        let mut pos = 0;
        let mut descs = Vec::new();
        for (i, &l) in lens.iter().enumerate() {
            let buf = (start + first_data + i as u16) % n;
            let gpa = self.g.buffer_gpa(rx, buf);
            if !rx {
                self.write(gpa, &stream[pos..pos + l as usize]);
                pos += l as usize;
            }
            let last = i + 1 == lens.len();
            let mut flags = if last { 0 } else { NEXT };
            if rx {
                flags |= WRITE;
            }
            let next = if use_ind { i as u16 + 1 } else { (buf + 1) % n };
            descs.push(Desc {
                addr: gpa,
                len: l,
                flags,
                next_or_id: if self.c.packed { start } else { next },
            });
        }
        if use_ind {
            let table = self.g.buffer_gpa(rx, start);
            for (i, d) in descs.iter().enumerate() {
                self.write_table_entry(table, i as u16, *d);
            }
            descs = vec![Desc {
                addr: table,
                len: 16 * u32::from(k),
                flags: INDIRECT,
                next_or_id: start,
            }];
        }
        if self.c.packed {
            self.post_packed(rx, &descs);
        } else {
            for (i, d) in descs.iter().enumerate() {
                self.write_desc(rx, (start + i as u16) % n, *d);
            }
            self.post_split_head(rx, start);
            self.drv[side(rx)].next_desc = (start + descs.len() as u16 + first_data) % n;
        }
    }

    fn op_raw_desc(&mut self, inp: &mut Input<'_>) {
        let b = inp.u8();
        let rx = b & 1 == 0;
        let i = inp.u16() % self.c.size;
        let wrap = self.drv[side(rx)].pk_wrap;
        let d = Desc {
            addr: self.gen_addr(inp, rx),
            len: self.gen_len(inp),
            flags: self.gen_flags(inp, rx, wrap),
            next_or_id: self.gen_next(inp, i),
        };
        if self.c.packed && b & 2 != 0 {
            // At the driver's position (consumed next), keeping raw flags.
            let Layout::Packed(l) = self.g.layout(rx) else {
                unreachable!()
            };
            let dr = &mut self.drv[side(rx)];
            let slot = dr.pk_next;
            dr.pk_next += 1;
            if dr.pk_next == self.c.size {
                dr.pk_next = 0;
                dr.pk_wrap = !dr.pk_wrap;
            }
            self.write_packed(l.desc + 16 * u64::from(slot), d);
        } else {
            self.write_desc(rx, i, d);
            if !self.c.packed && b & 2 != 0 {
                self.post_split_head(rx, i);
            }
        }
    }

    /// An indirect table in buffer memory (possibly unaligned, possibly
    /// nesting or pointing at itself) and a descriptor pointing at it with
    /// a right or wrong length.
    fn op_indirect(&mut self, inp: &mut Input<'_>) {
        let b = inp.u8();
        let rx = b & 1 == 0;
        let n = self.c.size;
        let j = inp.u16() % n;
        let mis = if b & 2 != 0 {
            1 + u64::from(inp.u8() % 15)
        } else {
            0
        };
        let room = (u64::from(self.c.buf_len) - mis) / 16;
        let cnt = 1 + u64::from(inp.u8()) % room.min(32);
        let table = self.g.buffer_gpa(rx, j) + mis;
        let wrap = self.drv[side(rx)].pk_wrap;
        for i in 0..cnt as u16 {
            let mut d = Desc {
                addr: self.gen_addr(inp, rx),
                len: self.gen_len(inp),
                flags: self.gen_flags(inp, rx, wrap),
                next_or_id: 0,
            };
            d.next_or_id = if self.c.packed {
                inp.u16()
            } else {
                match inp.u8() % 4 {
                    0 => i + 1,
                    1 => i,
                    2 => cnt as u16 + u16::from(inp.u8()),
                    _ => inp.u16(),
                }
            };
            if d.flags & INDIRECT != 0 && b & 4 != 0 {
                // Nested: points at its own table.
                d.addr = table;
                d.len = 16 * cnt as u32;
            }
            self.write_table_entry(table, i, d);
        }
        let dlen = match inp.u8() % 6 {
            0..=2 => 16 * cnt as u32,
            3 => 0,
            4 => 16 * cnt as u32 + 1 + u32::from(inp.u8() % 15),
            _ => self.gen_len(inp),
        };
        let lf = inp.u8();
        let mut flags = INDIRECT;
        if lf & 1 != 0 {
            flags |= NEXT;
        }
        if lf & 2 != 0 {
            flags |= WRITE;
        }
        let link = Desc {
            addr: table,
            len: dlen,
            flags,
            next_or_id: if self.c.packed {
                inp.u16()
            } else {
                self.gen_next(inp, 0)
            },
        };
        if self.c.packed {
            if lf & 4 != 0 {
                // Indirect in second position, behind a plain head.
                let head = Desc {
                    addr: self.g.buffer_gpa(rx, j),
                    len: 64,
                    flags: NEXT | if rx { WRITE } else { 0 },
                    next_or_id: 0,
                };
                self.post_packed(rx, &[head, link]);
            } else {
                self.post_packed(rx, &[link]);
            }
        } else {
            let i = inp.u16() % n;
            self.write_desc(rx, i, link);
            if lf & 4 == 0 {
                self.post_split_head(rx, i);
            }
        }
    }

    fn op_avail(&mut self, inp: &mut Input<'_>) {
        let b = inp.u8();
        let rx = b & 1 == 0;
        let n = self.c.size;
        match self.g.layout(rx) {
            Layout::Split(l) => match (b >> 1) % 4 {
                0 => {
                    let v = inp.u16();
                    let head = if b & 0x80 != 0 { v } else { v % n };
                    self.post_split_head(rx, head);
                }
                1 => {
                    let slot = u64::from(inp.u16() % n);
                    let v = inp.u16();
                    self.write(l.avail + 4 + 2 * slot, &v.to_le_bytes());
                }
                2 => {
                    let idx = self.r16(l.avail + 2);
                    let delta = match inp.u8() % 7 {
                        0 => 0,
                        1 => 1,
                        2 => n,
                        3 => n.wrapping_add(1),
                        4 => 0xffff, // stale: one behind
                        5 => 0x8000,
                        _ => inp.u16(),
                    };
                    self.write(l.avail + 2, &idx.wrapping_add(delta).to_le_bytes());
                }
                _ => {
                    // avail.flags or used_event.
                    let at = if b & 0x80 != 0 {
                        l.avail + 4 + 2 * u64::from(n)
                    } else {
                        l.avail
                    };
                    self.write(at, &inp.u16().to_le_bytes());
                }
            },
            Layout::Packed(l) => match (b >> 1) % 4 {
                0 => {
                    let d = &mut self.drv[side(rx)];
                    d.pk_wrap = !d.pk_wrap;
                    d.pk_next = inp.u16() % n;
                }
                1 => {
                    let slot = u64::from(inp.u16() % n);
                    self.write(l.desc + 16 * slot + 14, &inp.u16().to_le_bytes());
                }
                2 => {
                    let v = inp.u32();
                    self.write(l.driver, &v.to_le_bytes());
                }
                _ => {
                    // Make a slot available for the driver's wrap as is.
                    let slot = u64::from(inp.u16() % n);
                    let p = l.desc + 16 * slot + 14;
                    let f = self.r16(p);
                    let wrap = self.drv[side(rx)].pk_wrap;
                    let f = (f & !(AVAIL | USED)) | avail_bits(wrap);
                    self.write(p, &f.to_le_bytes());
                }
            },
        }
    }

    fn op_raw_bytes(&mut self, inp: &mut Input<'_>) {
        let b = inp.u8();
        let rx = b & 1 == 0;
        let areas = self.areas();
        let (a, l) = areas[side(rx) * 3 + usize::from((b >> 1) % 3)];
        let off = u64::from(inp.u16()) % l;
        let cnt = (1 + u64::from(inp.u8() % 8)).min(l - off);
        let bytes: Vec<u8> = (0..cnt).map(|_| inp.u8()).collect();
        self.write(a + off, &bytes);
    }

    // ----- device operations (checked) -----

    fn op_tx_burst(&mut self, inp: &mut Input<'_>) {
        let max = usize::from(inp.u8());
        let poff = usize::from(inp.u16());
        let mut m = self.snapshot();
        let c = self.c;
        let (want_n, want) = self.dev[1].recv_burst(&mut m, &c, max, |_, _| {});
        let mut got = Vec::new();
        let n = self
            .g
            .qp
            .tx
            .recv_burst(max, |f| got.push(FrameRec::record(f, poff)));
        assert_eq!(n, want_n, "recv_burst({max}) returned {n}, model {want_n}");
        assert_eq!(got.len(), want.len(), "number of TX frames");
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            g.check(w, k);
        }
        self.check_counters("recv_burst");
        self.check_mem(&m, "recv_burst");
    }

    fn gen_frame(&self, inp: &mut Input<'_>) -> (VirtioNetHdr, usize, usize) {
        let bl = self.c.buf_len as usize;
        let hl = self.c.hdr_len;
        let len = match inp.u8() % 9 {
            0 => 0,
            1 => 1 + usize::from(inp.u8() % 64),
            2 => 60 + usize::from(inp.u16()) % 1455,
            3 => usize::from(inp.u16()) % 9001,
            4 => MAX_FRAME_LEN,
            5 => MAX_FRAME_LEN + 1,
            6 => (bl - hl).saturating_sub(1) + usize::from(inp.u8() % 3),
            7 => (bl * 2 - hl) + usize::from(inp.u8() % 3),
            _ => usize::from(inp.u16()),
        };
        let seed = usize::from(inp.u8());
        let hb = inp.u8();
        let valid = if hb & 0x80 != 0 {
            net_hdr::F_DATA_VALID
        } else {
            0
        };
        let h = if hb & 1 != 0 {
            let mut raw = [0u8; MAX_HDR_LEN];
            for x in raw.iter_mut() {
                *x = inp.u8();
            }
            VirtioNetHdr::from_bytes(&raw, MAX_HDR_LEN)
        } else if hb & 2 != 0 {
            let gso = [
                net_hdr::GSO_NONE,
                net_hdr::GSO_TCPV4,
                net_hdr::GSO_TCPV6,
                net_hdr::GSO_UDP,
                net_hdr::GSO_UDP_L4,
                net_hdr::GSO_TCPV4 | net_hdr::GSO_ECN,
            ][usize::from(hb >> 2) % 6];
            VirtioNetHdr {
                flags: net_hdr::F_NEEDS_CSUM | valid,
                gso_type: gso,
                hdr_len: 54,
                gso_size: 1448,
                csum_start: 34,
                csum_offset: 16,
                num_buffers: 0,
            }
        } else {
            VirtioNetHdr {
                flags: valid,
                ..VirtioNetHdr::default()
            }
        };
        (h, seed, len)
    }

    fn op_rx_burst(&mut self, inp: &mut Input<'_>) {
        let nf = 1 + usize::from(inp.u8() % 8);
        let frames: Vec<(VirtioNetHdr, usize, usize)> =
            (0..nf).map(|_| self.gen_frame(inp)).collect();
        let mut m = self.snapshot();
        let c = self.c;
        let dev = &mut self.dev[0];
        dev.sync(&mut m, &c);
        let want: Vec<Result<(), DropReason>> = frames
            .iter()
            .map(|&(h, seed, len)| {
                dev.push(&mut m, &c, &h, Src::Host(&self.pattern[seed..seed + len]))
            })
            .collect();
        dev.finish_burst(&mut m);
        let mut got = Vec::new();
        {
            let mut burst = self.g.qp.rx.burst();
            for &(h, seed, len) in &frames {
                got.push(burst.push(&h, &self.pattern[seed..seed + len]));
            }
        }
        assert_eq!(got, want, "RxBurst::push results differ from the model");
        self.check_counters("RxBurst::push");
        self.check_mem(&m, "RxBurst::push");
    }

    fn op_echo(&mut self, inp: &mut Input<'_>) {
        let max = usize::from(inp.u8());
        let poff = usize::from(inp.u16());
        let mut m = self.snapshot();
        let c = self.c;
        let [rxd, txd] = &mut self.dev;
        rxd.sync(&mut m, &c);
        let mut want_push = Vec::new();
        let (want_n, want) = txd.recv_burst(&mut m, &c, max, |m, f| {
            want_push.push(rxd.push(m, &c, &f.hdr, Src::Frame(f)));
        });
        rxd.finish_burst(&mut m);

        let mut got = Vec::new();
        let mut got_push = Vec::new();
        let qp = &mut self.g.qp;
        let n = {
            let mut rx = qp.rx.burst();
            qp.tx.recv_burst(max, |f| {
                got.push(FrameRec::record(f, poff));
                let h = *f.hdr();
                got_push.push(rx.push(&h, &*f));
            })
        };
        assert_eq!(
            n, want_n,
            "echo: recv_burst({max}) returned {n}, model {want_n}"
        );
        assert_eq!(got.len(), want.len(), "echo: number of TX frames");
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            g.check(w, k);
        }
        assert_eq!(
            got_push, want_push,
            "echo: push results differ from the model"
        );
        self.check_counters("echo");
        self.check_mem(&m, "echo");
    }

    fn op_notify(&mut self, inp: &mut Input<'_>) {
        let b = inp.u8();
        let rx = b & 1 == 0;
        let enable = b & 2 != 0;
        let mut m = self.snapshot();
        let c = self.c;
        let dev = &mut self.dev[side(rx)];
        if enable {
            dev.sync(&mut m, &c);
            let want = dev.enable_notification(&mut m, &c);
            let got = if rx {
                self.g.qp.rx.enable_notifications()
            } else {
                self.g.qp.tx.enable_notifications()
            };
            assert_eq!(got, want, "enable_notifications (rx: {rx})");
        } else {
            // `disable_notifications` also picks up a pending ring start.
            dev.sync(&mut m, &c);
            dev.disable_notification(&mut m, &c);
            if rx {
                self.g.qp.rx.disable_notifications();
            } else {
                self.g.qp.tx.disable_notifications();
            }
        }
        self.check_counters("notifications");
        self.check_mem(&m, "notifications");
    }

    fn op_query(&mut self, inp: &mut Input<'_>) {
        let b = inp.u8();
        let rx = b & 1 == 0;
        let max = usize::from(inp.u8());
        let mut m = self.snapshot();
        let c = self.c;
        let dev = &mut self.dev[side(rx)];
        dev.sync(&mut m, &c);
        let (want, got) = if rx {
            (dev.count_avail(&m, max), self.g.qp.rx.available(max))
        } else {
            (
                dev.count_avail(&m, usize::from(u16::MAX)),
                self.g.qp.tx.pending(),
            )
        };
        assert_eq!(got, want, "pending/available (rx: {rx})");
        self.check_counters("query");
        self.check_mem(&m, "query");
    }
}

const fn avail_bits(wrap: bool) -> u16 {
    if wrap {
        AVAIL
    } else {
        USED
    }
}

// ===== seeds =====

/// Well-formed inputs for the seed corpus: every ring format and feature
/// combination, valid traffic both ways, plus a few classic hostile cases.
pub fn seeds() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for packed in [false, true] {
        for (fname, fb) in [
            ("plain", 0u8),
            ("evidx", cfg::EVENT_IDX),
            ("ind-mrg", cfg::INDIRECT | cfg::MRG),
            (
                "all",
                cfg::EVENT_IDX | cfg::INDIRECT | cfg::MRG | cfg::OFFLOADS,
            ),
            (
                "all-inorder",
                cfg::EVENT_IDX | cfg::INDIRECT | cfg::MRG | cfg::OFFLOADS | cfg::IN_ORDER,
            ),
        ] {
            let cb = fb | if packed { cfg::PACKED } else { 0 };
            let fmt = if packed { "packed" } else { "split" };
            // Size 16 (split: 1 << 4; packed: 1 + 15), 256-byte buffers.
            let size_b = if packed { 15 } else { 4 };
            let mut e = Enc::default();
            e.u8(cb).u8(size_b).u8(2);
            // Valid traffic: post RX buffers, post TX frames of several
            // shapes, echo, then TX and RX bursts.
            for _ in 0..4 {
                e.u8(op::POST_RX).u8(0); // 1 full buffer
            }
            e.u8(op::POST_RX).u8(0x03); // 4 buffers in a chain
            e.u8(op::POST_TX).u8(0x00).u16(100).u8(7); // 1 desc
            e.u8(op::POST_TX).u8(0x02).u16(600).u8(9); // 3 descs
            if fb & cfg::INDIRECT != 0 {
                e.u8(op::POST_TX).u8(0x11).u16(300).u8(3); // indirect, 2 descs
                e.u8(op::POST_RX).u8(0x11); // indirect RX
            }
            e.u8(op::ECHO).u8(8).u16(10);
            e.u8(op::POST_TX).u8(0x01).u16(1500 % 500).u8(1);
            e.u8(op::TX_BURST).u8(32).u16(0);
            e.u8(op::RX_BURST).u8(2); // 3 frames
            e.u8(1).u8(10).u8(1).u8(0); // small
            e.u8(2).u16(1000).u8(2).u8(2); // csum + gso none
            e.u8(8).u16(3000).u8(3).u8(0); // raw u16 len
            e.u8(op::NOTIFY).u8(2).u8(op::NOTIFY).u8(3);
            e.u8(op::QUERY).u8(0).u8(64).u8(op::QUERY).u8(1).u8(0);
            out.push((format!("{fmt}-{fname}-traffic"), e.0));

            // Hostile: a descriptor loop / out-of-range address posted,
            // then a stale and a far-ahead avail index.
            let mut e = Enc::default();
            e.u8(cb).u8(size_b).u8(2);
            e.u8(op::RAW_DESC).u8(0x03).u16(0); // TX, posted
            e.u8(0).u16(1).u8(2).u8(0x01).u8(1); // own buf, buf_len, NEXT, self loop
            e.u8(op::RAW_DESC).u8(0x03).u16(1);
            e.u8(6).u8(3).u8(4).u8(0).u8(0); // base+len, 4 GiB
            e.u8(op::TX_BURST).u8(8).u16(0);
            e.u8(op::INDIRECT).u8(0x05).u16(2).u8(3); // TX, nested-capable
            e.u8(0).u16(3).u8(1).u8(7).u8(0).u8(1); // entry 0
            e.u8(0).u16(4).u8(2).u8(6).u8(0);
            e.u8(0).u16(5).u8(2).u8(0).u8(0);
            e.u8(0).u8(0).u16(0); // right length, no NEXT, posted
            e.u8(op::TX_BURST).u8(8).u16(0);
            e.u8(op::AVAIL).u8(0x05).u8(4); // TX: stale index / packed flags
            e.u8(op::TX_BURST).u8(8).u16(0);
            e.u8(op::AVAIL).u8(0x05).u8(3); // TX: size + 1 ahead
            e.u8(op::TX_BURST).u8(8).u16(0);
            e.u8(op::POST_RX).u8(0x00).u8(op::RX_BURST).u8(0).u8(4);
            out.push((format!("{fmt}-{fname}-hostile"), e.0));
        }
    }
    // The RX segment budget: with mergeable buffers, a 64 KiB frame over
    // chains of 64 small indirect buffers each needs more segments than
    // the queue holds (dropped as TooLong, buffers left to the guest); a
    // smaller frame then fits.
    let mut e = Enc::default();
    e.u8(cfg::INDIRECT | cfg::MRG).u8(7).u8(4); // split, 128 x 1 KiB
    for _ in 0..20 {
        e.u8(op::POST_RX).u8(0x73); // indirect, 64 entries, chosen lengths
        for _ in 0..64 {
            e.u16(32);
        }
    }
    e.u8(op::RX_BURST).u8(1); // 2 frames
    e.u8(4).u8(0).u8(0); // MAX_FRAME_LEN
    e.u8(2).u16(900).u8(0).u8(0); // 960 bytes
    out.push(("split-rx-segment-budget".to_string(), e.0));

    // Regression inputs for two engine bugs the fuzzer found (fixed; see
    // fuzz/README.md).
    //
    // Packed ring whose every slot says NEXT: RingBroken was counted twice
    // (as the chain's drop and by `finish_burst`); now once, and the burst
    // dequeues nothing.
    let mut e = Enc::default();
    e.u8(cfg::PACKED).u8(1).u8(0); // size 2
    for _ in 0..2 {
        // TX, at the driver's position: own buffer, buf_len, NEXT.
        e.u8(op::RAW_DESC).u8(0x03).u16(0);
        e.u8(0).u16(0).u8(2).u8(0x01).u8(0);
    }
    e.u8(op::TX_BURST).u8(8).u16(0);
    out.push(("regress-packed-ring-broken-counted-twice".to_string(), e.0));

    // Split ring: 8 entries read into the avail cache, then avail.idx
    // jumps 0x8000 ahead: the refresh marks the ring broken; `recv_burst`
    // used to dequeue the 8 cached entries anyway, now nothing.
    let mut e = Enc::default();
    e.u8(0).u8(3).u8(0); // split, size 8
    e.u8(op::AVAIL).u8(0x05).u8(2); // TX avail.idx += 8
    e.u8(op::QUERY).u8(1).u8(0); // pending() = 8
    e.u8(op::AVAIL).u8(0x05).u8(5); // TX avail.idx += 0x8000
    e.u8(op::QUERY).u8(1).u8(0); // pending() = 0
    e.u8(op::TX_BURST).u8(32).u16(0); // 8 frames
    out.push(("regress-split-broken-ring-serves-cache".to_string(), e.0));

    // Split ring whose avail.idx jumps 0x8000 ahead before any burst: a
    // look (`pending`, `available`) finds it broken and is followed by no
    // burst, so the look counts `ring_broken`; later looks and the burst
    // do not count it again.
    let mut e = Enc::default();
    e.u8(0).u8(3).u8(0); // split, size 8
    e.u8(op::AVAIL).u8(0x05).u8(5); // TX avail.idx += 0x8000
    e.u8(op::QUERY).u8(1).u8(0); // pending() = 0: ring_broken 1
    e.u8(op::QUERY).u8(1).u8(0); // pending() = 0: still 1
    e.u8(op::TX_BURST).u8(32).u16(0); // nothing: still 1
    out.push(("regress-split-broken-ring-found-by-a-look".to_string(), e.0));
    out
}
