// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Differential test of our split-ring TX path against `virtio-queue`, the
//! rust-vmm reference implementation.
//!
//! For each seed a random split ring (16, 64 or 256 entries) is filled with
//! chains of known shapes: well-formed ones (direct, indirect, with
//! zero-length buffers, with many segments) and malformed ones (one defect
//! each: a writable buffer in a TX chain, a `next` loop, `next` or head out
//! of range, buffers outside guest memory or 4 GiB long, bad indirect
//! tables). The same memory image is then consumed twice, in the same
//! order:
//!
//! - by our engine, in a [`LoopbackGuest`], one `recv_burst(1, ..)` per
//!   avail entry: the frame it hands out (virtio-net header + bytes) or the
//!   drop reason it counts;
//! - by `virtio_queue::Queue` over a `GuestMemoryMmap` at the same guest
//!   physical addresses: `pop_descriptor_chain`, the descriptors the chain
//!   iterator yields, the bytes its `Reader` reads, and `add_used(head, 0)`.
//!
//! Every chain is checked against the expectation of its [`Kind`]: where
//! both accept, the bytes must be identical (and equal to what was
//! written); where they differ, the difference must be exactly the
//! documented one. At the end both used rings must hold the same entries
//! in the same order.
//!
//! # Known, intended differences
//!
//! `virtio-queue`'s chain iterator never fails: it stops silently (a
//! truncated chain) on a loop (after `queue_size` descriptors), a `next`
//! index out of range, a nested or malformed indirect table, or a table it
//! cannot read; it does not know the negotiated features; and its `Reader`
//! skips device-writable descriptors. Our engine refuses the whole chain in
//! all those cases (it is returned with length 0 and counted):
//!
//! | chain | ours | virtio-queue |
//! |---|---|---|
//! | writable descriptor in a TX chain | `BadDescriptor` | reads the readable ones |
//! | `next` loop | `BadDescriptor` | `queue_size` descriptors, reads them all |
//! | `next` >= size | `BadDescriptor` | the prefix before it |
//! | INDIRECT together with NEXT | `BadDescriptor` | follows the table, ignores NEXT |
//! | indirect without `VIRTIO_RING_F_INDIRECT_DESC` | `BadDescriptor` | follows the table |
//! | indirect table inside an indirect table | `BadDescriptor` | the prefix before it |
//! | more than 256 segments | `TooManySegments` | reads them all |
//! | indirect length 0, not a multiple of 16, or outside memory | `BadDescriptor` / `BadAddress` | an empty chain |
//! | head >= size | `BadDescriptor`, no used entry | an empty chain; `add_used` refuses it |
//! | buffer outside memory / past its end / 4 GiB | `BadAddress` | `Reader::new` fails |
//! | a 4 GiB buffer after other bytes | `BadAddress` | the prefix before it (its u32 byte count would overflow) |
//!
//! Both accept: zero-length buffers anywhere (even at an address outside
//! memory: neither translates an empty buffer), an indirect table at an
//! unaligned address, an indirect descriptor in the middle of a chain, and
//! 65 to 256 segments (our TX limit, `ring::MAX_CHAIN_SEGS`). A chain whose
//! bytes do not exceed the virtio-net header is a ring-level success for
//! both and a frame-level `TooShort` drop for us.
//!
//! Where both accept, the bytes are identical except for the virtio-net
//! header fields our engine clears on TX (flags other than NEEDS_CSUM, and
//! `num_buffers`); virtio-queue has no notion of the header.

use std::collections::BTreeMap;

use vhost_net_backend::device::bits;
use vhost_net_backend::test_utils::flags::{
    DESC_F_INDIRECT as INDIRECT, DESC_F_NEXT as NEXT, DESC_F_WRITE as WRITE,
};
use vhost_net_backend::test_utils::limits::MAX_CHAIN_SEGS;
use vhost_net_backend::test_utils::{
    desc_bytes, sanitized_tx, Layout, LoopbackGuest, LoopbackOpts, Reference,
};
use vhost_net_backend::{DropReason, QueueCounters};

const BUF_LEN: u32 = 2048;
const SEEDS: u64 = 300;
/// Segments our engine takes in one chain.
const SEG_CAP: u16 = MAX_CHAIN_SEGS as u16;

/// A deterministic xorshift64 generator.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn range(&mut self, lo: u32, hi: u32) -> u32 {
        lo + self.below(u64::from(hi - lo + 1)) as u32
    }
}

/// The shape of a generated chain (each malformed kind has exactly one
/// defect).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    // Both accept.
    Direct,
    ZeroLenMiddle,
    ZeroLenBadAddr,
    AllZeroLen,
    Indirect,
    IndirectUnaligned,
    IndirectMidChain,
    ManySegs(u16),
    // We refuse, virtio-queue reads all or part of it.
    WritableInTx,
    Loop,
    NextOutOfRange,
    IndirectWithNext,
    IndirectNoFeature,
    NestedIndirect,
    TooManySegs(u16),
    // Both refuse (virtio-queue: empty chain or a failing Reader).
    HeadOutOfRange,
    AddrBelow,
    AddrAbove,
    LenPastEnd,
    Len4G,
    AddrWrap,
    // We refuse, virtio-queue truncates the chain before the buffer.
    Len4GAfterData,
    IndirectBadLen,
    IndirectZeroLen,
    IndirectOutOfRange,
}

/// What a chain is expected to look like to virtio-queue.
#[derive(Debug, Clone, PartialEq, Eq)]
enum VqExpect {
    /// A complete chain of `n` descriptors whose `Reader` reads `bytes`.
    Reads { n: usize, bytes: Vec<u8> },
    /// A truncated chain: `n` descriptors, the last still saying NEXT;
    /// its `Reader` reads `bytes`.
    Truncated { n: usize, bytes: Vec<u8> },
    /// No descriptors at all.
    Empty,
    /// A complete chain whose `Reader` cannot be built.
    ReaderFails,
}

struct Chain {
    kind: Kind,
    head: u16,
    /// What we must do with it: `Ok(frame bytes incl. header)` or the drop.
    ours: Result<Vec<u8>, DropReason>,
    vq: VqExpect,
}

/// Lays out chains in a loopback guest's TX ring.
struct Gen<'a> {
    g: &'a LoopbackGuest,
    rng: Rng,
    size: u16,
    indirect: bool,
    desc: u64,
    next_desc: u16,
    arena: u64,
    arena_end: u64,
    mem: (u64, u64),
    hdr_len: usize,
}

/// A data buffer: address, length, and the bytes it holds.
type Buf = (u64, u32, Vec<u8>);

impl Gen<'_> {
    fn alloc(&mut self, len: u64, align: u64) -> Option<u64> {
        let a = self.arena.next_multiple_of(align);
        (a + len <= self.arena_end).then(|| {
            self.arena = a + len;
            a
        })
    }

    /// A buffer of random length in `[lo, hi]` holding the arena's random
    /// bytes.
    fn data(&mut self, lo: u32, hi: u32) -> Option<Buf> {
        let len = self.rng.range(lo, hi);
        let a = self.alloc(u64::from(len), 1)?;
        let mut b = vec![0; len as usize];
        self.g.read_guest(a, &mut b);
        Some((a, len, b))
    }

    fn slots(&mut self, k: u16) -> Option<Vec<u16>> {
        (self.next_desc + k <= self.size).then(|| {
            let v = (self.next_desc..self.next_desc + k).collect();
            self.next_desc += k;
            v
        })
    }

    fn put(&self, table: u64, i: u16, addr: u64, len: u32, flags: u16, next: u16) {
        self.g.write_guest(
            table + 16 * u64::from(i),
            &desc_bytes(addr, len, flags, next),
        );
    }

    /// Writes `bufs` as a chain through main-table slots `idx` (or, when
    /// `table` is given, entries 0.. of that indirect table); `flags[i]`
    /// are OR-ed in. Returns the bytes of the readable buffers.
    fn chain(
        &self,
        idx: Option<&[u16]>,
        table: Option<u64>,
        bufs: &[Buf],
        extra: &[u16],
    ) -> Vec<u8> {
        let mut payload = Vec::new();
        for (i, (a, l, b)) in bufs.iter().enumerate() {
            let last = i + 1 == bufs.len();
            let flags = if last { 0 } else { NEXT } | extra.get(i).copied().unwrap_or(0);
            match (idx, table) {
                (Some(idx), _) => {
                    let next = if last { 0 } else { idx[i + 1] };
                    self.put(self.desc, idx[i], *a, *l, flags, next);
                }
                (None, Some(t)) => self.put(t, i as u16, *a, *l, flags, i as u16 + 1),
                (None, None) => unreachable!(),
            }
            if flags & WRITE == 0 {
                payload.extend_from_slice(b);
            }
        }
        payload
    }

    fn bufs(&mut self, k: usize, lo: u32, hi: u32) -> Option<Vec<Buf>> {
        (0..k).map(|_| self.data(lo, hi)).collect()
    }

    /// What we do with a well-formed chain of these bytes.
    fn ours_ok(&self, payload: &[u8]) -> Result<Vec<u8>, DropReason> {
        if payload.len() <= self.hdr_len {
            Err(DropReason::TooShort)
        } else {
            Ok(sanitized_tx(payload))
        }
    }

    /// Builds one chain of `kind`; None when it does not fit.
    fn build(&mut self, kind: Kind) -> Option<Chain> {
        let (base, mlen) = self.mem;
        let end = base + mlen;
        let k = 1 + self.rng.below(4) as usize;
        let (head, ours, vq) = match kind {
            Kind::Direct => {
                let idx = self.slots(k as u16)?;
                let bufs = self.bufs(k, 1, 700)?;
                let p = self.chain(Some(&idx), None, &bufs, &[]);
                (idx[0], self.ours_ok(&p), VqExpect::Reads { n: k, bytes: p })
            }
            Kind::ZeroLenMiddle | Kind::ZeroLenBadAddr | Kind::AllZeroLen => {
                let idx = self.slots(3)?;
                let mut bufs = self.bufs(3, 8, 300)?;
                if kind == Kind::AllZeroLen {
                    for b in &mut bufs {
                        b.1 = 0;
                        b.2.clear();
                    }
                } else {
                    bufs[1].1 = 0;
                    bufs[1].2.clear();
                    if kind == Kind::ZeroLenBadAddr {
                        bufs[1].0 = u64::MAX - 3;
                    }
                }
                let p = self.chain(Some(&idx), None, &bufs, &[]);
                (idx[0], self.ours_ok(&p), VqExpect::Reads { n: 3, bytes: p })
            }
            Kind::Indirect | Kind::IndirectUnaligned | Kind::IndirectNoFeature => {
                let idx = self.slots(1)?;
                let off = if kind == Kind::IndirectUnaligned {
                    3
                } else {
                    0
                };
                let t = self.alloc(16 * k as u64 + 16, 16)? + off;
                let bufs = self.bufs(k, 1, 700)?;
                let p = self.chain(None, Some(t), &bufs, &[]);
                self.put(self.desc, idx[0], t, 16 * k as u32, INDIRECT, 0);
                let ours = if kind == Kind::IndirectNoFeature {
                    Err(DropReason::BadDescriptor)
                } else {
                    self.ours_ok(&p)
                };
                (idx[0], ours, VqExpect::Reads { n: k, bytes: p })
            }
            Kind::IndirectMidChain => {
                let idx = self.slots(2)?;
                let first = self.data(1, 300)?;
                let t = self.alloc(16 * k as u64, 16)?;
                let bufs = self.bufs(k, 1, 300)?;
                let mut p = first.2.clone();
                p.extend(self.chain(None, Some(t), &bufs, &[]));
                self.put(self.desc, idx[0], first.0, first.1, NEXT, idx[1]);
                self.put(self.desc, idx[1], t, 16 * k as u32, INDIRECT, 0);
                (
                    idx[0],
                    self.ours_ok(&p),
                    VqExpect::Reads { n: k + 1, bytes: p },
                )
            }
            Kind::ManySegs(n) | Kind::TooManySegs(n) => {
                let bufs = self.bufs(usize::from(n), 1, 4)?;
                let (head, p) = if self.indirect {
                    let idx = self.slots(1)?;
                    let t = self.alloc(16 * u64::from(n), 16)?;
                    let p = self.chain(None, Some(t), &bufs, &[]);
                    self.put(self.desc, idx[0], t, 16 * u32::from(n), INDIRECT, 0);
                    (idx[0], p)
                } else {
                    let idx = self.slots(n)?;
                    (idx[0], self.chain(Some(&idx), None, &bufs, &[]))
                };
                let ours = if n > SEG_CAP {
                    Err(DropReason::TooManySegments)
                } else {
                    self.ours_ok(&p)
                };
                (
                    head,
                    ours,
                    VqExpect::Reads {
                        n: usize::from(n),
                        bytes: p,
                    },
                )
            }
            Kind::WritableInTx => {
                let k = k.max(2);
                let idx = self.slots(k as u16)?;
                let bufs = self.bufs(k, 1, 300)?;
                let mut extra = vec![0; k];
                extra[self.rng.below(k as u64) as usize] = WRITE;
                let p = self.chain(Some(&idx), None, &bufs, &extra);
                (
                    idx[0],
                    Err(DropReason::BadDescriptor),
                    VqExpect::Reads { n: k, bytes: p },
                )
            }
            Kind::Loop => {
                let idx = self.slots(2)?;
                let a = self.data(1, 64)?;
                let b = self.data(1, 64)?;
                self.put(self.desc, idx[0], a.0, a.1, NEXT, idx[1]);
                self.put(self.desc, idx[1], b.0, b.1, NEXT, idx[0]);
                // virtio-queue walks `size` descriptors, alternating.
                let n = usize::from(self.size);
                let bytes = (0..n)
                    .flat_map(|i| if i % 2 == 0 { a.2.clone() } else { b.2.clone() })
                    .collect();
                (
                    idx[0],
                    Err(DropReason::BadDescriptor),
                    VqExpect::Truncated { n, bytes },
                )
            }
            Kind::NextOutOfRange => {
                let idx = self.slots(1)?;
                let a = self.data(1, 300)?;
                let next = self.size + self.rng.below(1000) as u16;
                self.put(self.desc, idx[0], a.0, a.1, NEXT, next);
                (
                    idx[0],
                    Err(DropReason::BadDescriptor),
                    VqExpect::Truncated { n: 1, bytes: a.2 },
                )
            }
            Kind::HeadOutOfRange => {
                let head = self.size + self.rng.below(u64::from(u16::MAX - self.size)) as u16;
                (head, Err(DropReason::BadDescriptor), VqExpect::Empty)
            }
            Kind::AddrBelow | Kind::AddrAbove | Kind::LenPastEnd | Kind::AddrWrap => {
                let idx = self.slots(k as u16)?;
                let mut bufs = self.bufs(k, 1, 300)?;
                let bad = &mut bufs[self.rng.below(k as u64) as usize];
                (bad.0, bad.1) = match kind {
                    Kind::AddrBelow => (base - 0x10000, 64),
                    Kind::AddrAbove => (end + 0x1000, 64),
                    Kind::LenPastEnd => (end - 10, 100),
                    _ => (u64::MAX - 5, 100),
                };
                self.chain(Some(&idx), None, &bufs, &[]);
                (idx[0], Err(DropReason::BadAddress), VqExpect::ReaderFails)
            }
            Kind::Len4G | Kind::Len4GAfterData => {
                // virtio-queue's iterator stops (silently) where the chain's
                // running length overflows a u32: a 4 GiB buffer after
                // other bytes truncates the chain before it.
                let k = if kind == Kind::Len4G { 1 } else { k.max(2) };
                let idx = self.slots(k as u16)?;
                let mut bufs = self.bufs(k, 1, 300)?;
                bufs[k - 1].1 = u32::MAX;
                let p = self.chain(Some(&idx), None, &bufs[..k - 1], &[]);
                self.chain(Some(&idx), None, &bufs, &[]);
                let vq = if k == 1 {
                    VqExpect::ReaderFails
                } else {
                    VqExpect::Truncated { n: k - 1, bytes: p }
                };
                (idx[0], Err(DropReason::BadAddress), vq)
            }
            Kind::IndirectBadLen | Kind::IndirectZeroLen | Kind::IndirectOutOfRange => {
                let idx = self.slots(1)?;
                let t = self.alloc(16 * k as u64 + 16, 16)?;
                let bufs = self.bufs(k, 1, 300)?;
                self.chain(None, Some(t), &bufs, &[]);
                let (addr, len, r) = match kind {
                    Kind::IndirectBadLen => (t, 16 * k as u32 + 8, DropReason::BadDescriptor),
                    Kind::IndirectZeroLen => (t, 0, DropReason::BadDescriptor),
                    _ => (end + 4096, 16 * k as u32, DropReason::BadAddress),
                };
                self.put(self.desc, idx[0], addr, len, INDIRECT, 0);
                (idx[0], Err(r), VqExpect::Empty)
            }
            Kind::IndirectWithNext => {
                let idx = self.slots(1)?;
                let t = self.alloc(16 * k as u64, 16)?;
                let bufs = self.bufs(k, 1, 300)?;
                let p = self.chain(None, Some(t), &bufs, &[]);
                let next = self.rng.below(u64::from(self.size)) as u16;
                self.put(self.desc, idx[0], t, 16 * k as u32, INDIRECT | NEXT, next);
                (
                    idx[0],
                    Err(DropReason::BadDescriptor),
                    VqExpect::Reads { n: k, bytes: p },
                )
            }
            Kind::NestedIndirect => {
                let idx = self.slots(1)?;
                let inner = self.alloc(16 * k as u64, 16)?;
                let bufs = self.bufs(k, 1, 300)?;
                self.chain(None, Some(inner), &bufs, &[]);
                let t = self.alloc(32, 16)?;
                let a = self.data(1, 300)?;
                self.put(t, 0, a.0, a.1, NEXT, 1);
                self.put(t, 1, inner, 16 * k as u32, INDIRECT, 0);
                self.put(self.desc, idx[0], t, 32, INDIRECT, 0);
                (
                    idx[0],
                    Err(DropReason::BadDescriptor),
                    VqExpect::Truncated { n: 1, bytes: a.2 },
                )
            }
        };
        Some(Chain {
            kind,
            head,
            ours,
            vq,
        })
    }
}

fn pick_kind(rng: &mut Rng, indirect: bool) -> Kind {
    loop {
        let k = match rng.below(26) {
            0..=2 => Kind::Direct,
            3 => Kind::ZeroLenMiddle,
            4 => Kind::ZeroLenBadAddr,
            5 => Kind::AllZeroLen,
            6 => Kind::Indirect,
            7 => Kind::IndirectUnaligned,
            8 => Kind::IndirectMidChain,
            9 => Kind::ManySegs([65, 128, 256][rng.below(3) as usize]),
            10 => Kind::WritableInTx,
            11 => Kind::Loop,
            12 => Kind::NextOutOfRange,
            13 => Kind::IndirectWithNext,
            14 => Kind::IndirectNoFeature,
            15 => Kind::NestedIndirect,
            16 => Kind::TooManySegs([257, 300][rng.below(2) as usize]),
            17 => Kind::HeadOutOfRange,
            18 => Kind::AddrBelow,
            19 => Kind::AddrAbove,
            20 => Kind::LenPastEnd,
            21 if rng.below(2) == 0 => Kind::Len4G,
            21 => Kind::Len4GAfterData,
            22 => Kind::AddrWrap,
            23 => Kind::IndirectBadLen,
            24 => Kind::IndirectZeroLen,
            _ => Kind::IndirectOutOfRange,
        };
        let uses_indirect = matches!(
            k,
            Kind::Indirect
                | Kind::IndirectUnaligned
                | Kind::IndirectMidChain
                | Kind::IndirectWithNext
                | Kind::NestedIndirect
                | Kind::IndirectBadLen
                | Kind::IndirectZeroLen
                | Kind::IndirectOutOfRange
        );
        // Indirect shapes need the feature (without it every one of them
        // is the same refusal: IndirectNoFeature covers that).
        if (uses_indirect && !indirect) || (k == Kind::IndirectNoFeature && indirect) {
            continue;
        }
        return k;
    }
}

fn counters_delta(a: &QueueCounters, b: &QueueCounters) -> (u64, Vec<DropReason>) {
    let drops = DropReason::ALL
        .iter()
        .filter(|&&r| b.drops_for(r) != a.drops_for(r))
        .copied()
        .collect();
    (b.packets - a.packets, drops)
}

/// Runs one seed; returns the kinds it exercised.
fn run_seed(seed: u64, seen: &mut BTreeMap<Kind, usize>) {
    let mut rng = Rng::new(seed);
    let size = [16u16, 64, 256][rng.below(3) as usize];
    let indirect = rng.below(4) != 0;
    let features = if indirect { bits::INDIRECT_DESC } else { 0 };
    let mut g = LoopbackGuest::new(LoopbackOpts {
        packed: false,
        size,
        features,
        buf_len: BUF_LEN,
        rx_buf_len: None,
    });
    let Layout::Split(l) = g.layout(false) else {
        unreachable!("split ring")
    };
    let mem = g.memory_range();
    // Random bytes over the TX buffers: the arena chains and indirect
    // tables are built from (the rings themselves stay as the loopback
    // guest set them up: zero indices).
    let arena = g.buffer_gpa(false, 0);
    let arena_end = g.buffer_gpa(false, size - 1) + u64::from(BUF_LEN);
    let fill: Vec<u8> = (0..arena_end - arena).map(|_| rng.next() as u8).collect();
    g.write_guest(arena, &fill);

    let mut gen = Gen {
        g: &g,
        rng: Rng::new(seed ^ 0x5eed),
        size,
        indirect,
        desc: l.desc,
        next_desc: 0,
        arena,
        arena_end,
        mem,
        hdr_len: g.hdr_len(),
    };
    let mut chains = Vec::new();
    let mut misses = 0;
    while chains.len() < usize::from(size) && misses < 8 {
        let kind = pick_kind(&mut rng, indirect);
        match gen.build(kind) {
            Some(c) => chains.push(c),
            None => misses += 1,
        }
    }
    for (i, c) in chains.iter().enumerate() {
        g.write_guest(l.avail + 4 + 2 * i as u64, &c.head.to_le_bytes());
    }
    g.write_guest(l.avail + 2, &(chains.len() as u16).to_le_bytes());

    // The same image at the same guest physical addresses, for virtio-queue.
    let mut reference = Reference::mirror(&g, false);

    let hdr_len = g.hdr_len();
    for (i, c) in chains.iter().enumerate() {
        let ctx = format!(
            "seed {seed} size {size} indirect {indirect} chain {i} {:?}",
            c.kind
        );
        *seen.entry(c.kind).or_default() += 1;

        // Ours: one chain per burst.
        let before = g.qp.tx.counters();
        let mut frames = Vec::new();
        let n = g.qp.tx.recv_burst(1, |f| {
            let mut v = f.hdr().to_bytes()[..hdr_len].to_vec();
            let at = v.len();
            v.resize(at + f.len(), 0);
            assert_eq!(f.copy_to(0, &mut v[at..]), f.len());
            frames.push(v);
        });
        assert_eq!(n, 1, "{ctx}: recv_burst(1)");
        let (packets, drops) = counters_delta(&before, &g.qp.tx.counters());
        let got: Result<Vec<u8>, DropReason> = match (packets, frames.pop(), drops.as_slice()) {
            (1, Some(f), []) => Ok(f),
            (0, None, [r]) => Err(*r),
            other => panic!("{ctx}: inconsistent outcome {other:?}"),
        };
        assert!(
            got == c.ours,
            "{ctx}: ours {:?}, expected {:?}",
            brief(&got),
            brief(&c.ours)
        );

        // virtio-queue.
        let v = reference.pop();
        let used_ok = reference.add_used(v.head, 0);
        assert_eq!(v.head, c.head, "{ctx}: head");
        let complete = v.descs.last().is_some_and(|d| !d.has_next());
        let observed = match (&c.vq, v.descs.is_empty(), complete, &v.read) {
            (VqExpect::Empty, true, _, Some(r)) if r.is_empty() => c.vq.clone(),
            (VqExpect::ReaderFails, false, true, None) => c.vq.clone(),
            (VqExpect::Reads { .. }, false, true, Some(r)) => VqExpect::Reads {
                n: v.descs.len(),
                bytes: r.clone(),
            },
            (VqExpect::Truncated { .. }, false, false, Some(r)) => VqExpect::Truncated {
                n: v.descs.len(),
                bytes: r.clone(),
            },
            _ => panic!(
                "{ctx}: virtio-queue saw {} descriptors (complete: {complete}), reader {:?}; expected {:?}",
                v.descs.len(),
                v.read.as_ref().map(Vec::len),
                brief_vq(&c.vq)
            ),
        };
        assert!(
            observed == c.vq,
            "{ctx}: virtio-queue {:?}, expected {:?}",
            brief_vq(&observed),
            brief_vq(&c.vq)
        );
        // Where both accept, both read the same bytes (but for the header
        // fields we clear).
        if let (Ok(ours), VqExpect::Reads { bytes, .. }) = (&got, &observed) {
            assert!(
                *ours == sanitized_tx(bytes),
                "{ctx}: bytes differ from virtio-queue"
            );
        }
        // Both return every chain with a valid head, none other.
        assert_eq!(used_ok, c.head < size, "{ctx}: add_used");
    }

    // Same used entries, same order, same index.
    let used_bytes = 4 + 8 * chains.len().min(usize::from(size));
    let mut ours = vec![0u8; used_bytes];
    let mut theirs = vec![0u8; used_bytes];
    g.read_guest(l.used, &mut ours);
    reference.read(l.used, &mut theirs);
    assert_eq!(ours[2..], theirs[2..], "seed {seed}: used rings differ");
    assert_eq!(g.qp.tx.pending(), 0, "seed {seed}: entries left");
}

fn brief(r: &Result<Vec<u8>, DropReason>) -> Result<usize, DropReason> {
    r.as_ref().map(Vec::len).map_err(|e| *e)
}

fn brief_vq(v: &VqExpect) -> String {
    match v {
        VqExpect::Reads { n, bytes } => format!("Reads({n} descriptors, {} bytes)", bytes.len()),
        VqExpect::Truncated { n, bytes } => {
            format!("Truncated({n} descriptors, {} bytes)", bytes.len())
        }
        other => format!("{other:?}"),
    }
}

#[test]
fn split_tx_matches_virtio_queue() {
    let mut seen = BTreeMap::new();
    for seed in 0..SEEDS {
        run_seed(seed, &mut seen);
    }
    // Shown with `--nocapture`: how often each chain shape was drawn.
    #[allow(clippy::disallowed_macros)]
    {
        eprintln!("chains per kind: {seen:?}");
    }
    // Every shape was exercised.
    let all = [
        Kind::Direct,
        Kind::ZeroLenMiddle,
        Kind::ZeroLenBadAddr,
        Kind::AllZeroLen,
        Kind::Indirect,
        Kind::IndirectUnaligned,
        Kind::IndirectMidChain,
        Kind::WritableInTx,
        Kind::Loop,
        Kind::NextOutOfRange,
        Kind::IndirectWithNext,
        Kind::IndirectNoFeature,
        Kind::NestedIndirect,
        Kind::HeadOutOfRange,
        Kind::AddrBelow,
        Kind::AddrAbove,
        Kind::LenPastEnd,
        Kind::Len4G,
        Kind::Len4GAfterData,
        Kind::AddrWrap,
        Kind::IndirectBadLen,
        Kind::IndirectZeroLen,
        Kind::IndirectOutOfRange,
    ];
    for k in all {
        assert!(seen.contains_key(&k), "{k:?} never generated");
    }
    for n in [65, 256] {
        assert!(
            seen.contains_key(&Kind::ManySegs(n)),
            "ManySegs({n}) never generated"
        );
    }
    for n in [257, 300] {
        assert!(
            seen.contains_key(&Kind::TooManySegs(n)),
            "TooManySegs({n}) never generated"
        );
    }
}
