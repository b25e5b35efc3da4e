// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The `ring_differential` target: a fuzzed split ring, TX or RX, consumed
//! by our engine and by `virtio-queue`, the rust-vmm reference
//! implementation, from the same guest memory image.
//!
//! # Input
//!
//! One configuration byte (ring size 16, 64 or 256; `INDIRECT_DESC`
//! negotiated or not; TX: one chain per `recv_burst` or the whole ring in
//! one burst; the RX ring instead; the seed of the bytes in buffer memory),
//! for RX a count of operations, then operations that lay chains into the
//! descriptor table and the avail ring: chains of 1 to 8 descriptors or of
//! many segments, indirect tables (nested once more, unaligned, of lengths
//! that are no multiple of 16, outside memory), buffers inside memory,
//! below it, past its end, wrapping, empty, 4 GiB long, of the wrong
//! direction (device-writable on TX, read-only on RX), `next` indices
//! following, looping back, past the table or arbitrary, heads that are
//! arbitrary `u16`s, and raw overwrites of table slots. For RX, then, the
//! lengths of the frames pushed (up to twice the entries).
//!
//! # Oracle
//!
//! Our engine is stricter than `virtio-queue` by design: it refuses whole
//! chains that `virtio-queue` truncates or partly reads (the table in
//! `vhost-net-backend/tests/differential.rs`). So the checks go one way,
//! plus the memory both leave behind.
//!
//! TX:
//! - every chain our engine hands out as a frame is one `virtio-queue`
//!   reads completely, with the same bytes (our header keeps only
//!   `NEEDS_CSUM` of its flags and has no `num_buffers`); a chain it drops
//!   as too short is one whose bytes `virtio-queue` reads and that do not
//!   exceed the header;
//! - every chain `virtio-queue` cannot read (no descriptor, a chain that
//!   stops while still saying NEXT, a `Reader` it cannot build) our engine
//!   refuses, for a ring-level reason;
//! - both consume every avail entry, return the chains whose head is in
//!   the table and no other (our counters account for each entry: one
//!   frame or one drop). In burst mode the frames must be, in order, a
//!   subsequence of the chains `virtio-queue` reads completely.
//!
//! RX (no mergeable buffers: one chain per frame):
//! - a frame our engine writes goes into a chain `virtio-queue`'s `Writer`
//!   can take it in, and `virtio-queue` then writes the same header
//!   (`num_buffers` 1) and bytes there and returns it with the same length;
//! - a chain our engine leaves in place for being too small is one the
//!   `Writer` has less room in; a chain it refuses is returned unused by
//!   both, and one the `Writer` cannot take it refuses for a ring-level
//!   reason.
//!
//! Both: at the end the two guest memories are identical byte for byte
//! (used entries, lengths, indices, every byte written into buffers, and
//! nothing written anywhere else), but for the used ring's flags.

use std::io::Write;

use vhost_net_backend::device::bits;
use vhost_net_backend::test_utils::flags::{
    DESC_F_INDIRECT as INDIRECT, DESC_F_NEXT as NEXT, DESC_F_WRITE as WRITE,
};
use vhost_net_backend::test_utils::{
    desc_bytes, sanitized_tx, Layout, LoopbackGuest, LoopbackOpts, Reference,
};
use vhost_net_backend::{DropReason, QueueCounters, VirtioNetHdr};
use virtio_queue::DescriptorChain;
use vm_memory::GuestMemoryMmap;

use crate::input::{Enc, Input};

/// Length of each TX buffer slot of the loopback guest (the arena the
/// chains' buffers and tables are cut from is `size` of them).
const BUF_LEN: u32 = 2048;
/// Most operations decoded from one input.
const MAX_OPS: usize = 64;
/// How deep indirect tables nest (a table inside a table is one level:
/// both sides refuse or truncate it; deeper adds nothing).
const MAX_DEPTH: u8 = 2;

/// Configuration byte.
pub mod cfg {
    /// Bits 0-1: ring size 16, 64, 256 (3: 16).
    pub const SIZE_MASK: u8 = 3;
    /// `VIRTIO_RING_F_INDIRECT_DESC` negotiated.
    pub const INDIRECT: u8 = 4;
    /// The whole ring in one `recv_burst` (else one chain per call).
    pub const BURST: u8 = 8;
    /// The RX ring instead (then frame lengths follow the operations).
    pub const RX: u8 = 0x10;
}

/// Operation codes (the low 3 bits of the op byte).
pub mod op {
    /// A chain in the main table (arguments: length class, descriptors).
    pub const CHAIN: u8 = 0;
    /// An avail entry naming an arbitrary head.
    pub const RAW_HEAD: u8 = 6;
    /// An arbitrary descriptor written over a table slot.
    pub const RAW_DESC: u8 = 7;
}

/// What one input did, for the seed replay to look at.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Avail entries.
    pub chains: usize,
    /// Frames our engine handed out.
    pub frames: usize,
    /// Chains `virtio-queue` read completely.
    pub vq_read: usize,
    /// Drops by reason (our engine).
    pub drops: Vec<(DropReason, u64)>,
}

/// Lays the input's chains into the loopback guest's TX ring.
struct Builder<'a> {
    g: &'a LoopbackGuest,
    size: u16,
    desc: u64,
    next_slot: u16,
    arena: u64,
    arena_end: u64,
    mem: (u64, u64),
    heads: Vec<u16>,
    /// `WRITE` for an RX ring (its buffers' normal flag), else 0.
    writable: u16,
}

impl Builder<'_> {
    fn alloc(&mut self, len: u64, align: u64) -> Option<u64> {
        let a = self.arena.next_multiple_of(align);
        (a.checked_add(len)? <= self.arena_end).then(|| {
            self.arena = a + len;
            a
        })
    }

    fn put(&self, table: u64, i: u16, addr: u64, len: u32, flags: u16, next: u16) {
        self.g.write_guest(
            table + 16 * u64::from(i),
            &desc_bytes(addr, len, flags, next),
        );
    }

    /// One descriptor's address, length and flags (an indirect one gets
    /// its table built here).
    fn desc(&mut self, inp: &mut Input, depth: u8) -> (u64, u32, u16) {
        let c = inp.u8();
        if c & 0xe0 == 0xe0 && depth < MAX_DEPTH {
            return self.table(inp, depth + 1);
        }
        let (base, mlen) = self.mem;
        let end = base + mlen;
        let len = match c >> 3 & 3 {
            0 | 1 => 1 + u32::from(inp.u8()) * 3,
            2 => 0,
            _ if inp.u8() & 1 == 0 => u32::MAX,
            _ => inp.u32(),
        };
        let addr = match c & 7 {
            0..=3 => self
                .alloc(u64::from(len.min(BUF_LEN)), 1)
                .unwrap_or(self.arena),
            4 => base - 0x1_0000,
            5 => end + 0x1000,
            6 => end - 10,
            _ => inp.u64(),
        };
        // The odd one: a device-writable buffer in a TX chain, a read-only
        // one in an RX chain.
        let flags = self.writable ^ if c >> 5 == 1 { WRITE } else { 0 };
        (addr, len, flags)
    }

    /// An indirect table in the arena; returns the descriptor naming it.
    fn table(&mut self, inp: &mut Input, depth: u8) -> (u64, u32, u16) {
        let c = inp.u8();
        let n = segs(c, inp);
        let unaligned = c & 0x40 != 0;
        let Some(t) = self.alloc(16 * u64::from(n) + 16, 16) else {
            return (self.mem.0 + self.mem.1 + 4096, 16, INDIRECT);
        };
        let t = t + if unaligned { 3 } else { 0 };
        for i in 0..n {
            let (a, l, f) = self.desc(inp, depth);
            let (fl, next) = link(inp, i + 1 == n, i + 1, n);
            self.put(t, i, a, l, f | fl, next);
        }
        let len = match inp.u8() % 8 {
            0..=4 => 16 * u32::from(n),
            5 => 0,
            6 => 16 * u32::from(n) + 8,
            _ => inp.u32(),
        };
        let extra = if c & 0x80 != 0 { NEXT } else { 0 };
        (t, len, INDIRECT | extra)
    }

    /// A chain through main-table slots from the next free one.
    fn chain(&mut self, inp: &mut Input) {
        let c = inp.u8();
        let want = segs(c, inp);
        let start = self.next_slot;
        let n = want.min(self.size - start);
        if n == 0 {
            self.heads.push(inp.u16());
            return;
        }
        self.next_slot += n;
        for j in 0..n {
            let (a, l, f) = self.desc(inp, 0);
            let (fl, next) = link(inp, j + 1 == n, start + j + 1, self.size);
            self.put(self.desc, start + j, a, l, f | fl, next);
        }
        self.heads.push(start);
    }
}

/// How many descriptors a chain or table gets: 1-8 mostly, else one of
/// the segment counts around our limit of 256.
fn segs(c: u8, inp: &mut Input) -> u16 {
    if c & 0x30 == 0x30 {
        [17, 65, 255, 256, 257, 300][usize::from(inp.u8() % 6)]
    } else {
        1 + u16::from(c % 8)
    }
}

/// The NEXT flag and index of descriptor `following - 1` of a chain in a
/// table of `size`: the next one, or a loop back, an index past the
/// table, an arbitrary one; the last gets none, or a dangling one.
fn link(inp: &mut Input, last: bool, following: u16, size: u16) -> (u16, u16) {
    let c = inp.u8();
    match c % 8 {
        0..=4 if last => (0, 0),
        0..=4 => (NEXT, following),
        5 => (NEXT, u16::from(inp.u8()) % size.max(1)),
        6 => (NEXT, size.wrapping_add(u16::from(inp.u8()))),
        _ => (NEXT, inp.u16()),
    }
}

/// What `virtio-queue` made of one TX avail entry: the bytes of a chain
/// it reads completely, and whether it took the head back.
fn vq_take(r: &mut Reference) -> (u16, Option<Vec<u8>>, bool) {
    let c = r.pop();
    let used_ok = r.add_used(c.head, 0);
    let read = if c.complete() { c.read } else { None };
    (c.head, read, used_ok)
}

/// Room a complete RX chain has for `virtio-queue`'s `Writer` (None: no
/// `Writer`), after writing `parts` there when they fit.
fn vq_room(
    chain: DescriptorChain<&GuestMemoryMmap>,
    mem: &GuestMemoryMmap,
    parts: &[&[u8]],
) -> Option<usize> {
    if chain.clone().last().is_none_or(|d| d.has_next()) {
        return None;
    }
    let mut w = chain.writer(mem).ok()?;
    let room = w.available_bytes();
    if !parts.is_empty() && room >= parts.iter().map(|p| p.len()).sum::<usize>() {
        for p in parts {
            w.write_all(p).expect("writer writes");
        }
    }
    Some(room)
}

fn drops(c: &QueueCounters) -> Vec<(DropReason, u64)> {
    DropReason::ALL
        .iter()
        .map(|&r| (r, c.drops_for(r)))
        .filter(|&(_, n)| n > 0)
        .collect()
}

/// Ring-level reasons (a chain our engine could not read at all).
fn ring_level(r: DropReason) -> bool {
    matches!(
        r,
        DropReason::BadDescriptor | DropReason::BadAddress | DropReason::TooManySegments
    )
}

/// Runs the checks (always true).
pub fn run(data: &[u8]) -> bool {
    outcome(data);
    true
}

/// Runs one input; panics on a disagreement.
pub fn outcome(data: &[u8]) -> Outcome {
    let mut inp = Input::new(data);
    let c = inp.u8();
    let size = [16u16, 64, 256, 16][usize::from(c & cfg::SIZE_MASK)];
    let indirect = c & cfg::INDIRECT != 0;
    let burst = c & cfg::BURST != 0;
    let rx = c & cfg::RX != 0;
    let fill_seed = c >> 5;
    let mut g = LoopbackGuest::new(LoopbackOpts {
        packed: false,
        size,
        features: if indirect { bits::INDIRECT_DESC } else { 0 },
        buf_len: BUF_LEN,
        rx_buf_len: None,
    });
    let Layout::Split(l) = g.layout(rx) else {
        unreachable!("split ring")
    };
    let mem = g.memory_range();
    let arena = g.buffer_gpa(rx, 0);
    let arena_end = g.buffer_gpa(rx, size - 1) + u64::from(BUF_LEN);
    // One 4 KiB block of bytes (an odd length, so that pages differ),
    // repeated over the arena.
    let block: Vec<u8> = (0..4093u64)
        .map(|a| (a.wrapping_mul(0x9e37_79b9) >> 13) as u8 ^ fill_seed)
        .collect();
    let n = (arena_end - arena) as usize;
    let mut fill = Vec::with_capacity(n);
    while fill.len() < n {
        let k = block.len().min(n - fill.len());
        fill.extend_from_slice(&block[..k]);
    }
    g.write_guest(arena, &fill);

    let mut b = Builder {
        g: &g,
        size,
        desc: l.desc,
        next_slot: 0,
        arena,
        arena_end,
        mem,
        heads: Vec::new(),
        writable: if rx { WRITE } else { 0 },
    };
    // An RX input says how many operations come before the frame lengths.
    let max_ops = if rx {
        usize::from(inp.u8()) % (MAX_OPS + 1)
    } else {
        MAX_OPS
    };
    let mut ops = 0;
    while !inp.is_empty() && ops < max_ops && b.heads.len() < usize::from(size) {
        ops += 1;
        match inp.u8() & 7 {
            op::RAW_HEAD => {
                let h = inp.u16();
                b.heads.push(h);
            }
            op::RAW_DESC => {
                let slot = inp.u16() % size;
                let (a, len, f) = b.desc(&mut inp, 0);
                let last = inp.u8() & 1 == 0;
                let (fl, next) = link(&mut inp, last, slot.wrapping_add(1), size);
                b.put(b.desc, slot, a, len, f | fl, next);
            }
            _ => b.chain(&mut inp),
        }
    }
    let heads = std::mem::take(&mut b.heads);
    for (i, h) in heads.iter().enumerate() {
        g.write_guest(l.avail + 4 + 2 * i as u64, &h.to_le_bytes());
    }
    g.write_guest(l.avail + 2, &(heads.len() as u16).to_le_bytes());

    // The same image at the same guest physical addresses.
    let mut reference = Reference::mirror(&g, rx);

    let mut out = if rx {
        rx_check(&mut g, &mut inp, &heads, size, l.used, &mut reference)
    } else {
        tx_check(&mut g, &heads, size, indirect, burst, &mut reference)
    };
    out.chains = heads.len();

    // Nothing else written: the two memories are the same, byte for byte,
    // but for the used ring's flags (ours may ask for no notifications).
    let mut ours = vec![0u8; mem.1 as usize];
    g.read_guest(mem.0, &mut ours);
    let mut theirs = vec![0u8; mem.1 as usize];
    reference.read(mem.0, &mut theirs);
    let flags = (l.used - mem.0) as usize;
    ours[flags..flags + 2].fill(0);
    theirs[flags..flags + 2].fill(0);
    if ours != theirs {
        let at = ours
            .iter()
            .zip(&theirs)
            .position(|(a, b)| a != b)
            .unwrap_or_default();
        panic!(
            "guest memory differs from virtio-queue's at {:#x} (used ring at {:#x}, \
             descriptors at {:#x}, buffers from {arena:#x})",
            mem.0 + at as u64,
            l.used,
            l.desc
        );
    }
    out
}

/// Our TX path and virtio-queue's `Reader` on the same chains.
fn tx_check(
    g: &mut LoopbackGuest,
    heads: &[u16],
    size: u16,
    indirect: bool,
    burst: bool,
    reference: &mut Reference,
) -> Outcome {
    let hdr_len = g.hdr_len();
    let frame_bytes = |f: &vhost_net_backend::TxFrame<'_>| {
        let mut v = f.hdr().to_bytes()[..hdr_len].to_vec();
        let at = v.len();
        v.resize(at + f.len(), 0);
        assert_eq!(f.copy_to(0, &mut v[at..]), f.len(), "copy_to");
        v
    };
    let mut out = Outcome::default();
    let n = heads.len();
    if burst {
        let before = g.qp.tx.counters();
        let mut frames = Vec::new();
        // One burst walks at most the engine's descriptor budget: long
        // chains are left for the next burst, which must take them.
        let mut took = 0;
        let mut bursts = 0;
        loop {
            let t =
                g.qp.tx
                    .recv_burst(usize::from(size), |f| frames.push(frame_bytes(f)));
            took += t;
            bursts += 1;
            if t == 0 || took >= n {
                break;
            }
        }
        let after = g.qp.tx.counters();
        assert_eq!(
            took, n,
            "recv_burst({size}) with {n} entries, {bursts} bursts"
        );
        let dropped: u64 = DropReason::ALL
            .iter()
            .map(|&r| after.drops_for(r) - before.drops_for(r))
            .sum();
        assert_eq!(
            (after.packets - before.packets) as usize,
            frames.len(),
            "packets"
        );
        assert_eq!(
            frames.len() as u64 + dropped,
            n as u64,
            "one frame or one drop per entry"
        );
        let mut unreadable = 0u64;
        let mut left = frames.iter().peekable();
        for (i, &h) in heads.iter().enumerate() {
            let (head, read, used_ok) = vq_take(reference);
            assert_eq!(head, h, "entry {i}: head");
            assert_eq!(used_ok, h < size, "entry {i}: add_used");
            match &read {
                Some(r) => {
                    out.vq_read += 1;
                    if left.peek().is_some_and(|f| **f == sanitized_tx(r)) {
                        left.next();
                    }
                }
                None => unreadable += 1,
            }
        }
        assert!(
            left.peek().is_none(),
            "{} frames are no chain virtio-queue read, in order",
            left.count()
        );
        let ring_drops: u64 = DropReason::ALL
            .iter()
            .filter(|&&r| ring_level(r))
            .map(|&r| after.drops_for(r) - before.drops_for(r))
            .sum();
        assert!(
            ring_drops >= unreadable,
            "{unreadable} chains virtio-queue cannot read, {ring_drops} ring-level drops"
        );
        out.frames = frames.len();
    } else {
        for (i, &h) in heads.iter().enumerate() {
            let ctx = format!("size {size} indirect {indirect} entry {i} head {h}");
            let before = g.qp.tx.counters();
            let mut frames = Vec::new();
            let took = g.qp.tx.recv_burst(1, |f| frames.push(frame_bytes(f)));
            assert_eq!(took, 1, "{ctx}: recv_burst(1)");
            let after = g.qp.tx.counters();
            let new: Vec<DropReason> = DropReason::ALL
                .iter()
                .filter(|&&r| after.drops_for(r) != before.drops_for(r))
                .copied()
                .collect();
            let ours = match (after.packets - before.packets, frames.pop(), new.as_slice()) {
                (1, Some(f), []) => Ok(f),
                (0, None, [r]) if after.drops_for(*r) == before.drops_for(*r) + 1 => Err(*r),
                other => panic!("{ctx}: not one frame or one drop: {other:?}"),
            };
            let (head, read, used_ok) = vq_take(reference);
            assert_eq!(head, h, "{ctx}: head");
            assert_eq!(used_ok, h < size, "{ctx}: add_used");
            if read.is_some() {
                out.vq_read += 1;
            }
            match (&ours, &read) {
                (Ok(f), Some(r)) => {
                    assert!(
                        *f == sanitized_tx(r),
                        "{ctx}: bytes differ from virtio-queue"
                    );
                    out.frames += 1;
                }
                (Ok(f), None) => panic!(
                    "{ctx}: ours hands out {} bytes, virtio-queue cannot read the chain",
                    f.len()
                ),
                (Err(DropReason::TooShort), Some(r)) => {
                    assert!(
                        r.len() <= hdr_len,
                        "{ctx}: too short, virtio-queue reads {}",
                        r.len()
                    )
                }
                (Err(DropReason::TooShort), None) => {
                    panic!("{ctx}: too short, virtio-queue cannot read the chain")
                }
                (Err(r), None) => {
                    assert!(ring_level(*r), "{ctx}: unreadable chain dropped as {r:?}")
                }
                (Err(_), Some(_)) => {}
            }
        }
    }
    assert_eq!(g.qp.tx.pending(), 0, "entries left");
    out.drops = drops(&g.qp.tx.counters());
    out
}

/// Our RX path and virtio-queue's `Writer` on the same chains: frames of
/// the input's lengths pushed one per burst (without mergeable buffers a
/// frame takes one chain, and a chain too small for it stays for the next
/// frame), each one either written by both or refused by ours.
fn rx_check(
    g: &mut LoopbackGuest,
    inp: &mut Input,
    heads: &[u16],
    size: u16,
    used: u64,
    reference: &mut Reference,
) -> Outcome {
    let hdr_len = g.hdr_len();
    let hdr = VirtioNetHdr::default();
    let mut expect_hdr = hdr;
    expect_hdr.num_buffers = 1;
    let expect_hdr = expect_hdr.to_bytes()[..hdr_len].to_vec();
    let mut out = Outcome::default();
    let used_idx = |g: &LoopbackGuest| {
        let mut b = [0u8; 2];
        g.read_guest(used + 2, &mut b);
        u16::from_le_bytes(b)
    };
    let mut entry = 0usize;
    for k in 0..2 * heads.len() + 1 {
        let len = match inp.u8() {
            0 => 2048 - hdr_len,
            b => usize::from(b) * 6,
        };
        let frame: Vec<u8> = (0..len).map(|i| (i * 7 + k) as u8).collect();
        let ctx = format!("size {size} push {k} ({len} B) entry {entry}");
        let before = used_idx(g);
        let r = {
            let mut burst = g.qp.rx.burst();
            burst.push(&hdr, &frame[..])
        };
        let consumed = used_idx(g).wrapping_sub(before);
        let need = hdr_len + len;
        match consumed {
            // A head past the table: consumed, nothing to return.
            0 if r == Err(DropReason::BadDescriptor)
                && heads.get(entry).is_some_and(|&h| h >= size) =>
            {
                let c = reference.pop();
                assert_eq!(c.head, heads[entry], "{ctx}: head");
                assert!(!reference.add_used(c.head, 0), "{ctx}: add_used");
                entry += 1;
            }
            0 => {
                match r {
                    Err(DropReason::NoBuffers) => {
                        assert_eq!(entry, heads.len(), "{ctx}: no buffers with entries left");
                        break;
                    }
                    Err(DropReason::TooLong) => {}
                    other => panic!("{ctx}: nothing consumed, yet {other:?}"),
                }
                // The chain stays; virtio-queue must find it too small.
                let (_, room) = reference.pop_with(|c, m| vq_room(c, m, &[]));
                assert!(
                    room.is_some_and(|n| n < need),
                    "{ctx}: ours leaves the chain as too small, virtio-queue has room for {room:?} bytes"
                );
                reference.unpop();
            }
            1 => {
                let parts: &[&[u8]] = if r.is_ok() {
                    &[&expect_hdr, &frame]
                } else {
                    &[]
                };
                let (c, room) = reference.pop_with(|ch, m| vq_room(ch, m, parts));
                let head = c.head;
                assert_eq!(head, heads[entry], "{ctx}: head");
                match (r, room) {
                    (Ok(()), Some(n)) => {
                        assert!(n >= need, "{ctx}: ours wrote {need} B into a chain of {n}");
                        assert!(reference.add_used(head, need as u32), "{ctx}: add_used");
                        out.frames += 1;
                        out.vq_read += 1;
                    }
                    (Ok(()), None) => panic!("{ctx}: ours wrote a chain virtio-queue cannot write"),
                    (Err(e), room) => {
                        assert!(
                            room.is_some() || ring_level(e),
                            "{ctx}: a chain virtio-queue cannot write dropped as {e:?}"
                        );
                        if room.is_some() {
                            out.vq_read += 1;
                        }
                        // Ours returns it unused; so does virtio-queue.
                        assert_eq!(reference.add_used(head, 0), head < size, "{ctx}: add_used");
                    }
                }
                entry += 1;
            }
            n => panic!("{ctx}: one push consumed {n} entries"),
        }
        if entry == heads.len() {
            break;
        }
    }
    out.drops = drops(&g.qp.rx.counters());
    out
}

// ===== seeds =====

/// The committed seeds, by file name: one of each chain shape the input
/// can describe, in both modes.
pub fn seeds() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    // Direct chains of 1-8 buffers in the arena, link "following".
    let direct = |e: &mut Enc, k: u8| {
        e.u8(op::CHAIN).u8(k - 1);
        for j in 0..k {
            e.u8(0).u8(100 + j);
            e.u8(if j + 1 == k { 0 } else { 1 });
        }
    };
    for (name, cfgb) in [("one-by-one", 0u8), ("burst", cfg::BURST)] {
        let mut e = Enc::default();
        e.u8(cfgb | cfg::INDIRECT | 1);
        for k in 1..=8 {
            direct(&mut e, k);
        }
        out.push((format!("direct-{name}"), e.0));
    }
    // An indirect table of 4, aligned and unaligned, then a nested one.
    let mut e = Enc::default();
    e.u8(cfg::INDIRECT);
    for c in [3u8, 0x43] {
        e.u8(op::CHAIN).u8(0).u8(0xe0).u8(c);
        for _ in 0..4 {
            e.u8(0).u8(50).u8(1);
        }
        e.u8(0).u8(0);
    }
    e.u8(op::CHAIN).u8(0).u8(0xe0).u8(1);
    e.u8(0xe0).u8(0).u8(0).u8(40).u8(0).u8(0);
    e.u8(0).u8(0);
    out.push(("indirect-nested-unaligned".into(), e.0));
    // Bad buffers: below memory, past its end, straddling it, wrapping,
    // 4 GiB, empty at a wrapping address (accepted: nothing to read),
    // empty, device-writable.
    let mut e = Enc::default();
    e.u8(2);
    let bad: [&[u8]; 8] = [
        &[4, 20],
        &[5, 20],
        &[6, 20],
        &[7, 20, 0xfa, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
        &[0x18, 0],
        &[0x17, 0xfa, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
        &[0x10],
        &[0x20, 20],
    ];
    for d in bad {
        e.u8(op::CHAIN).u8(1);
        e.u8(0).u8(60).u8(1);
        e.0.extend_from_slice(d);
        e.u8(0);
    }
    out.push(("bad-buffers".into(), e.0));
    // Links: a loop back, past the table, dangling at the end; raw heads.
    let mut e = Enc::default();
    e.u8(cfg::BURST | 1);
    e.u8(op::CHAIN)
        .u8(1)
        .u8(0)
        .u8(30)
        .u8(5)
        .u8(0)
        .u8(0)
        .u8(30)
        .u8(0);
    e.u8(op::CHAIN).u8(0).u8(0).u8(30).u8(6).u8(9);
    e.u8(op::CHAIN)
        .u8(1)
        .u8(0)
        .u8(30)
        .u8(1)
        .u8(0)
        .u8(30)
        .u8(7)
        .u16(3);
    e.u8(op::RAW_HEAD)
        .u16(64)
        .u8(op::RAW_HEAD)
        .u16(0xffff)
        .u8(op::RAW_HEAD)
        .u16(0);
    out.push(("links-and-heads".into(), e.0));
    // Many segments through an indirect table: 256 (ours) and 257.
    for (name, pick) in [("256", 3u8), ("257", 4)] {
        let mut e = Enc::default();
        e.u8(cfg::INDIRECT | 2);
        e.u8(op::CHAIN).u8(0).u8(0xe0).u8(0x30).u8(pick);
        let n = [17, 65, 255, 256, 257, 300][usize::from(pick)];
        for i in 0..n {
            e.u8(0).u8(0).u8(if i + 1 == n { 0 } else { 1 });
        }
        e.u8(0).u8(0);
        out.push((format!("indirect-segments-{name}"), e.0));
    }
    // RX: chains of 1-3 writable buffers of 91-391 bytes, then frames that
    // fit, one that does not (it waits) and a smaller one that takes it.
    let mut e = Enc::default();
    e.u8(cfg::RX | cfg::INDIRECT | 1).u8(4);
    for k in [1u8, 2, 3] {
        e.u8(op::CHAIN).u8(k - 1);
        for j in 0..k {
            e.u8(0).u8(30 + 50 * j);
            e.u8(if j + 1 == k { 0 } else { 1 });
        }
    }
    e.u8(op::CHAIN).u8(0).u8(0xe0).u8(1);
    e.u8(0).u8(100).u8(1).u8(0).u8(100).u8(0);
    e.u8(0).u8(0);
    e.u8(10).u8(40).u8(200).u8(60).u8(50);
    out.push(("rx-direct-indirect-too-small".into(), e.0));
    // RX: a read-only buffer, one past memory, a loop, a raw head.
    let mut e = Enc::default();
    e.u8(cfg::RX | 1).u8(4);
    e.u8(op::CHAIN).u8(0).u8(0x20).u8(40).u8(0);
    e.u8(op::CHAIN).u8(0).u8(5).u8(40).u8(0);
    e.u8(op::CHAIN)
        .u8(1)
        .u8(0)
        .u8(40)
        .u8(5)
        .u8(2)
        .u8(0)
        .u8(40)
        .u8(0);
    e.u8(op::RAW_HEAD).u16(999);
    e.u8(10).u8(10).u8(10).u8(10);
    out.push(("rx-bad-chains".into(), e.0));
    out
}
