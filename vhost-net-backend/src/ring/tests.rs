// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Ring engine tests over hand-laid rings in anonymous memory: valid chains
//! of every shape, and the hostile ones a guest can write.

use std::sync::Arc;

use super::flags::{DESC_F_INDIRECT as INDIRECT, DESC_F_NEXT as NEXT, DESC_F_WRITE as WRITE};
use super::memory::GuestMemory;
use super::split::{SplitLayout, SplitRing};
use super::{copy_from_segs, SegVec, SegWriter};
use crate::device::Negotiated;
use crate::stats::DropReason;

const BASE: u64 = 0x1_0000_0000;
const MEM: usize = 1 << 20;
const N: u16 = 16;
const DESC: u64 = BASE;
const AVAIL: u64 = BASE + 0x1000;
const USED: u64 = BASE + 0x2000;
const DATA: u64 = BASE + 0x10000;

struct Guest {
    mem: Arc<GuestMemory>,
}

impl Guest {
    fn new() -> Self {
        Self {
            mem: Arc::new(GuestMemory::anonymous(&[(BASE, MEM)])),
        }
    }

    /// Two adjacent regions: a buffer across their boundary (at `BASE +
    /// MEM`) takes two segments.
    fn two_regions() -> Self {
        Self {
            mem: Arc::new(GuestMemory::anonymous(&[
                (BASE, MEM),
                (BASE + MEM as u64, MEM),
            ])),
        }
    }

    fn write(&self, gpa: u64, bytes: &[u8]) {
        let mut hint = 0;
        let hva = self
            .mem
            .translate(gpa, bytes.len() as u64, &mut hint)
            .expect("test writes inside memory");
        // SAFETY: `hva..hva+len` was translated inside the anonymous mapping
        // kept alive by `self.mem`.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), hva as *mut u8, bytes.len()) };
    }

    fn read(&self, gpa: u64, len: usize) -> Vec<u8> {
        let mut hint = 0;
        let hva = self
            .mem
            .translate(gpa, len as u64, &mut hint)
            .expect("inside");
        let mut v = vec![0u8; len];
        // SAFETY: as in `write`.
        unsafe { std::ptr::copy_nonoverlapping(hva as *const u8, v.as_mut_ptr(), len) };
        v
    }

    fn desc_at(&self, table: u64, i: u16, addr: u64, len: u32, flags: u16, next: u16) {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&addr.to_le_bytes());
        b[8..12].copy_from_slice(&len.to_le_bytes());
        b[12..14].copy_from_slice(&flags.to_le_bytes());
        b[14..].copy_from_slice(&next.to_le_bytes());
        self.write(table + 16 * u64::from(i), &b);
    }

    fn desc(&self, i: u16, addr: u64, len: u32, flags: u16, next: u16) {
        self.desc_at(DESC, i, addr, len, flags, next);
    }

    /// Publishes `heads` in the avail ring starting at slot `from`.
    fn avail(&self, from: u16, heads: &[u16]) {
        for (k, h) in heads.iter().enumerate() {
            let slot = (from as usize + k) % N as usize;
            self.write(AVAIL + 4 + 2 * slot as u64, &h.to_le_bytes());
        }
        self.write(
            AVAIL + 2,
            &(from.wrapping_add(heads.len() as u16)).to_le_bytes(),
        );
    }

    fn used_idx(&self) -> u16 {
        u16::from_le_bytes(self.read(USED + 2, 2).try_into().unwrap())
    }

    fn used_elem(&self, slot: u16) -> (u32, u32) {
        let b = self.read(USED + 4 + 8 * u64::from(slot % N), 8);
        (
            u32::from_le_bytes(b[..4].try_into().unwrap()),
            u32::from_le_bytes(b[4..].try_into().unwrap()),
        )
    }

    fn ring(&self, event_idx: bool, indirect: bool) -> SplitRing {
        SplitRing::new(
            Arc::clone(&self.mem),
            SplitLayout {
                desc: DESC,
                avail: AVAIL,
                used: USED,
                size: N,
            },
            0,
            event_idx,
            indirect,
        )
        .expect("valid ring")
    }
}

fn parse(g: &Guest, ring: &mut SplitRing, writable: bool) -> Result<(u32, usize), DropReason> {
    assert!(ring.refresh_avail() > 0, "nothing available");
    let head = ring.pop_head();
    let mut segs = SegVec::with_capacity(super::MAX_CHAIN_SEGS);
    let len = ring.parse_chain(head, writable, &mut segs)?;
    let _ = g;
    Ok((len, segs.len()))
}

#[test]
fn single_and_multi_descriptor_chains() {
    let g = Guest::new();
    let payload: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
    g.write(DATA, &payload);
    // Chain 0: one descriptor. Chain 1: three descriptors (12 + 1000 + rest).
    g.desc(0, DATA, 3000, 0, 0);
    g.desc(1, DATA, 12, NEXT, 2);
    g.desc(2, DATA + 12, 1000, NEXT, 3);
    g.desc(3, DATA + 1012, 1988, 0, 0);
    g.avail(0, &[0, 1]);
    let mut ring = g.ring(false, false);
    assert_eq!(ring.refresh_avail(), 2);
    let mut segs = SegVec::with_capacity(64);
    for head in [0u16, 1] {
        assert_eq!(ring.pop_head(), head);
        segs.clear();
        assert_eq!(ring.parse_chain(head, false, &mut segs), Ok(3000));
        let mut out = vec![0u8; 3000];
        assert_eq!(copy_from_segs(segs.as_slice(), 0, &mut out), 3000);
        assert_eq!(out, payload);
        let mut tail = [0u8; 10];
        assert_eq!(copy_from_segs(segs.as_slice(), 2995, &mut tail), 5);
        assert_eq!(&tail[..5], &payload[2995..]);
        ring.push_used(head, 0);
    }
    assert_eq!(g.used_idx(), 0, "published before publish_used");
    assert!(ring.publish_used());
    assert_eq!(g.used_idx(), 2);
    assert_eq!(g.used_elem(0), (0, 0));
    assert_eq!(g.used_elem(1), (1, 0));
    assert!(!ring.publish_used(), "nothing new to publish");
}

#[test]
fn indirect_table_is_followed_once() {
    let g = Guest::new();
    let table = DATA + 0x8000;
    g.desc_at(table, 0, DATA, 100, NEXT, 1);
    g.desc_at(table, 1, DATA + 100, 200, NEXT, 2);
    g.desc_at(table, 2, DATA + 300, 300, 0, 0);
    g.desc(0, table, 48, INDIRECT, 0);
    g.avail(0, &[0]);
    let mut ring = g.ring(false, true);
    assert_eq!(parse(&g, &mut ring, false), Ok((600, 3)));

    // Without INDIRECT_DESC negotiated the same chain is refused.
    let mut ring = g.ring(false, false);
    assert_eq!(parse(&g, &mut ring, false), Err(DropReason::BadDescriptor));
}

type Case = (
    &'static str,
    Box<dyn Fn(&Guest)>,
    bool,
    Result<(u32, usize), DropReason>,
);

#[test]
fn hostile_chains_are_refused() {
    let cases: Vec<Case> = vec![
        (
            "self loop",
            Box::new(|g: &Guest| g.desc(0, DATA, 10, NEXT, 0)),
            false,
            Err(DropReason::BadDescriptor),
        ),
        (
            "two-descriptor loop",
            Box::new(|g: &Guest| {
                g.desc(0, DATA, 10, NEXT, 1);
                g.desc(1, DATA, 10, NEXT, 0);
            }),
            false,
            Err(DropReason::BadDescriptor),
        ),
        (
            "next out of range",
            Box::new(|g: &Guest| g.desc(0, DATA, 10, NEXT, N)),
            false,
            Err(DropReason::BadDescriptor),
        ),
        (
            "address outside memory",
            Box::new(|g: &Guest| g.desc(0, 0x1000, 10, 0, 0)),
            false,
            Err(DropReason::BadAddress),
        ),
        (
            "buffer running past the end",
            Box::new(|g: &Guest| g.desc(0, BASE + MEM as u64 - 4, 10, 0, 0)),
            false,
            Err(DropReason::BadAddress),
        ),
        (
            "4 GiB length",
            Box::new(|g: &Guest| g.desc(0, DATA, u32::MAX, 0, 0)),
            false,
            Err(DropReason::BadAddress),
        ),
        (
            "address wraps",
            Box::new(|g: &Guest| g.desc(0, u64::MAX - 4, 100, 0, 0)),
            false,
            Err(DropReason::BadAddress),
        ),
        (
            "writable buffer in a TX chain",
            Box::new(|g: &Guest| g.desc(0, DATA, 10, WRITE, 0)),
            false,
            Err(DropReason::BadDescriptor),
        ),
        (
            "read-only buffer in an RX chain",
            Box::new(|g: &Guest| g.desc(0, DATA, 10, 0, 0)),
            true,
            Err(DropReason::BadDescriptor),
        ),
        (
            "indirect inside indirect",
            Box::new(|g: &Guest| {
                let t = DATA + 0x8000;
                let t2 = DATA + 0x9000;
                g.desc_at(t2, 0, DATA, 10, 0, 0);
                g.desc_at(t, 0, t2, 16, INDIRECT, 0);
                g.desc(0, t, 16, INDIRECT, 0);
            }),
            false,
            Err(DropReason::BadDescriptor),
        ),
        (
            "indirect with NEXT",
            Box::new(|g: &Guest| {
                let t = DATA + 0x8000;
                g.desc_at(t, 0, DATA, 10, 0, 0);
                g.desc(0, t, 16, INDIRECT | NEXT, 1);
                g.desc(1, DATA, 10, 0, 0);
            }),
            false,
            Err(DropReason::BadDescriptor),
        ),
        (
            "indirect table of odd length",
            Box::new(|g: &Guest| g.desc(0, DATA + 0x8000, 24, INDIRECT, 0)),
            false,
            Err(DropReason::BadDescriptor),
        ),
        (
            "empty indirect table",
            Box::new(|g: &Guest| g.desc(0, DATA + 0x8000, 0, INDIRECT, 0)),
            false,
            Err(DropReason::BadDescriptor),
        ),
        (
            "indirect table outside memory",
            Box::new(|g: &Guest| g.desc(0, 0x2000, 64, INDIRECT, 0)),
            false,
            Err(DropReason::BadAddress),
        ),
        (
            "loop inside an indirect table",
            Box::new(|g: &Guest| {
                let t = DATA + 0x8000;
                g.desc_at(t, 0, DATA, 10, NEXT, 1);
                g.desc_at(t, 1, DATA, 10, NEXT, 0);
                g.desc(0, t, 32, INDIRECT, 0);
            }),
            false,
            Err(DropReason::BadDescriptor),
        ),
        (
            "indirect next out of its table",
            Box::new(|g: &Guest| {
                let t = DATA + 0x8000;
                g.desc_at(t, 0, DATA, 10, NEXT, 5);
                g.desc(0, t, 32, INDIRECT, 0);
            }),
            false,
            Err(DropReason::BadDescriptor),
        ),
        (
            "zero-length descriptors are skipped",
            Box::new(|g: &Guest| {
                g.desc(0, DATA, 0, NEXT, 1);
                g.desc(1, DATA, 20, 0, 0);
            }),
            false,
            Ok((20, 1)),
        ),
        (
            "odd indirect table address still parses",
            Box::new(|g: &Guest| {
                let t = DATA + 0x8003;
                g.desc_at(t, 0, DATA, 10, 0, 0);
                g.desc(0, t, 16, INDIRECT, 0);
            }),
            false,
            Ok((10, 1)),
        ),
    ];
    for (name, setup, writable, want) in cases {
        let g = Guest::new();
        setup(&g);
        g.avail(0, &[0]);
        let mut ring = g.ring(false, true);
        assert_eq!(parse(&g, &mut ring, writable), want, "{name}");
    }
}

#[test]
fn too_many_segments_is_refused() {
    let g = Guest::new();
    for i in 0..N {
        g.desc(
            i,
            DATA + u64::from(i) * 8,
            8,
            if i + 1 < N { NEXT } else { 0 },
            i + 1,
        );
    }
    g.avail(0, &[0]);
    let mut ring = g.ring(false, false);
    ring.refresh_avail();
    let head = ring.pop_head();
    let mut small = SegVec::with_capacity(4);
    assert_eq!(
        ring.parse_chain(head, false, &mut small),
        Err(DropReason::TooManySegments)
    );
}

#[test]
fn head_out_of_range_is_refused() {
    let g = Guest::new();
    g.avail(0, &[N + 3]);
    let mut ring = g.ring(false, false);
    assert_eq!(parse(&g, &mut ring, false), Err(DropReason::BadDescriptor));
}

#[test]
fn avail_index_too_far_ahead_breaks_the_ring() {
    let g = Guest::new();
    g.write(AVAIL + 2, &(N + 1).to_le_bytes());
    let mut ring = g.ring(false, false);
    assert_eq!(ring.refresh_avail(), 0);
    assert!(ring.is_broken());
    // Exactly N outstanding is legal.
    let g = Guest::new();
    g.write(AVAIL + 2, &N.to_le_bytes());
    let mut ring = g.ring(false, false);
    assert_eq!(ring.refresh_avail(), N);
    assert!(!ring.is_broken());
}

#[test]
fn buffer_spanning_two_regions_is_split() {
    // A buffer crossing the regions' boundary becomes two segments and
    // reads back whole.
    let g = Guest::two_regions();
    let start = BASE + MEM as u64 - 100;
    let bytes: Vec<u8> = (0..300u32).map(|i| (i * 7) as u8).collect();
    g.write(start, &bytes[..100]);
    g.write(BASE + MEM as u64, &bytes[100..]);
    g.desc(0, start, 300, 0, 0);
    g.avail(0, &[0]);
    let mut ring = g.ring(false, false);
    ring.refresh_avail();
    let head = ring.pop_head();
    let mut segs = SegVec::with_capacity(64);
    assert_eq!(ring.parse_chain(head, false, &mut segs), Ok(300));
    assert_eq!(segs.len(), 2);
    let mut out = vec![0u8; 300];
    copy_from_segs(segs.as_slice(), 0, &mut out);
    assert_eq!(out, bytes);
}

#[test]
fn ring_outside_memory_is_refused() {
    let g = Guest::new();
    let bad = SplitLayout {
        desc: BASE + MEM as u64 - 8,
        avail: AVAIL,
        used: USED,
        size: N,
    };
    assert!(SplitRing::new(Arc::clone(&g.mem), bad, 0, false, false).is_err());
    let odd = SplitLayout {
        desc: DESC,
        avail: AVAIL,
        used: USED,
        size: 12,
    };
    assert!(SplitRing::new(Arc::clone(&g.mem), odd, 0, false, false).is_err());
}

#[test]
fn writer_spreads_over_segments() {
    let g = Guest::new();
    g.desc(0, DATA, 5, WRITE | NEXT, 1);
    g.desc(1, DATA + 100, 7, WRITE, 0);
    g.avail(0, &[0]);
    let mut ring = g.ring(false, false);
    ring.refresh_avail();
    let head = ring.pop_head();
    let mut segs = SegVec::with_capacity(8);
    assert_eq!(ring.parse_chain(head, true, &mut segs), Ok(12));
    let mut w = SegWriter::new(segs.as_slice());
    assert_eq!(w.write(b"hello"), 5);
    assert_eq!(w.write(b" world!!!"), 7, "truncated at the chain's end");
    assert_eq!(g.read(DATA, 5), b"hello");
    assert_eq!(g.read(DATA + 100, 7), b" world!");
}

/// Every length and alignment `copy_bytes` takes copies exactly its bytes,
/// nothing before and nothing after: the inline small copies, the line copy
/// from `LINE_COPY_MIN` bytes on (on CPUs with AVX-512, as CI's), and
/// `ptr::copy` otherwise.
#[test]
fn copy_bytes_copies_exactly_at_every_length_and_alignment() {
    let src: Vec<u8> = (0..5000u32).map(|i| (i * 7 + 3) as u8).collect();
    let lens = [
        0, 1, 3, 4, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 255, 256, 257, 300, 511,
        1514, 2048, 4096,
    ];
    for n in lens {
        for (so, dof) in [(0, 0), (1, 0), (0, 1), (5, 63), (63, 17), (32, 32)] {
            let mut dst = vec![0xeeu8; 4300];
            let at = 64 + dof;
            // SAFETY: both ranges lie inside their vectors (`at + n` and
            // `so + n` are at most 4224 and 4159).
            unsafe { super::copy::copy_bytes(dst.as_mut_ptr().add(at), src.as_ptr().add(so), n) };
            assert_eq!(
                &dst[at..at + n],
                &src[so..so + n],
                "{n} bytes, src +{so}, dst +{dof}"
            );
            assert!(
                dst[..at].iter().chain(&dst[at + n..]).all(|&b| b == 0xee),
                "{n} bytes, src +{so}, dst +{dof}: wrote outside the range"
            );
        }
    }
}

/// Ranges that overlap (a hostile guest's buffers) copy as `memmove`
/// would, whichever path the length takes.
#[test]
fn copy_bytes_overlapping_ranges_copy_as_memmove() {
    for n in [16, 64, 256, 1514] {
        for shift in [-65isize, -64, -1, 1, 63, 64, 200] {
            let mut got: Vec<u8> = (0..4000u32).map(|i| i as u8 ^ 0x5a).collect();
            let mut want = got.clone();
            let (from, to) = (1000usize, 1000usize.checked_add_signed(shift).unwrap());
            let p = got.as_mut_ptr();
            // SAFETY: both ranges lie inside `got` (at most 1200 + 1514).
            unsafe { super::copy::copy_bytes(p.add(to), p.add(from), n) };
            want.copy_within(from..from + n, to);
            assert!(got == want, "{n} bytes shifted by {shift}");
        }
    }
}

#[test]
fn event_idx_notification_follows_used_event() {
    let g = Guest::new();
    for i in 0..4 {
        g.desc(i, DATA, 10, 0, 0);
    }
    g.avail(0, &[0, 1, 2, 3]);
    let mut ring = g.ring(true, false);
    // used_event lives after the avail ring.
    let used_event = AVAIL + 4 + 2 * u64::from(N);
    g.write(used_event, &0u16.to_le_bytes());
    ring.refresh_avail();
    let h = ring.pop_head();
    ring.push_used(h, 0);
    ring.publish_used();
    assert!(ring.needs_notification(), "first notification always fires");
    // Driver wants a call only once used passes 2 (used_event = 2).
    g.write(used_event, &2u16.to_le_bytes());
    let h = ring.pop_head();
    ring.push_used(h, 0);
    ring.publish_used(); // used = 2
    assert!(
        !ring.needs_notification(),
        "used went 1 -> 2, event 2 not crossed"
    );
    let h = ring.pop_head();
    ring.push_used(h, 0);
    ring.publish_used(); // used = 3
    assert!(
        ring.needs_notification(),
        "used went 2 -> 3, crossed event 2"
    );

    // Without EVENT_IDX, VRING_AVAIL_F_NO_INTERRUPT suppresses calls.
    let mut ring = g.ring(false, false);
    g.write(AVAIL, &1u16.to_le_bytes());
    assert!(!ring.needs_notification());
    g.write(AVAIL, &0u16.to_le_bytes());
    assert!(ring.needs_notification());
}

#[test]
fn kick_suppression_and_the_race_check() {
    let g = Guest::new();
    let avail_event = USED + 4 + 8 * u64::from(N);
    let mut ring = g.ring(true, false);
    assert_eq!(
        g.read(avail_event, 2),
        0u16.to_le_bytes(),
        "a new ring asks for the next kick"
    );
    ring.disable_notification();
    g.desc(0, DATA, 10, 0, 0);
    g.avail(0, &[0]);
    assert!(
        ring.enable_notification(),
        "work arrived while kicks were off"
    );
    ring.refresh_avail();
    ring.pop_head();
    assert!(!ring.enable_notification());
    assert_eq!(g.read(avail_event, 2), 1u16.to_le_bytes());

    let mut ring = g.ring(false, false);
    ring.disable_notification();
    assert_eq!(
        g.read(USED, 2),
        1u16.to_le_bytes(),
        "VRING_USED_F_NO_NOTIFY"
    );
    ring.enable_notification();
    assert_eq!(g.read(USED, 2), 0u16.to_le_bytes());
}

/// A frontend back from a restarted backend with base 0 (DPDK's virtio-user)
/// while its used index is 5 and N - 1 more entries are available: the ring
/// starts at the used index, is not broken, and serves exactly those.
#[test]
fn a_stale_base_starts_at_the_used_index() {
    let g = Guest::new();
    g.write(USED + 2, &5u16.to_le_bytes());
    g.desc(0, DATA, 64, 0, 0);
    g.desc(1, DATA + 64, 64, 0, 0);
    // 5 + N - 1 entries made available so far: more than a ring holds
    // counted from base 0, which alone would look broken.
    for k in 0..N - 3 {
        g.avail(5 + k, &[0]);
    }
    g.avail(5 + N - 3, &[0, 1]);
    let layout = super::Layout::Split(SplitLayout {
        desc: DESC,
        avail: AVAIL,
        used: USED,
        size: N,
    });
    let mut r =
        super::Ring::new(Arc::clone(&g.mem), layout, 0, Negotiated::new(0)).expect("valid ring");
    assert_eq!(r.base(), 5);
    assert!(!r.is_broken());
    assert_eq!(r.count_avail(64), usize::from(N - 1));
    assert!(!r.is_broken());
    // A base that agrees with the used index is kept.
    let r =
        super::Ring::new(Arc::clone(&g.mem), layout, 5, Negotiated::new(0)).expect("valid ring");
    assert_eq!(r.base(), 5);
}

/// The used index runs through 65535 and on: every entry lands in its
/// slot, the published index wraps, and nothing on the way (the used line
/// warmed 16 entries on) overflows.
#[test]
fn the_used_index_wraps_at_65536() {
    let g = Guest::new();
    let start = u16::MAX - 5;
    g.write(USED + 2, &start.to_le_bytes());
    for i in 0..N {
        g.desc(i, DATA + 64 * u64::from(i), 64, 0, 0);
    }
    let heads: Vec<u16> = (0..12).collect();
    g.avail(start, &heads);
    let layout = super::Layout::Split(SplitLayout {
        desc: DESC,
        avail: AVAIL,
        used: USED,
        size: N,
    });
    let mut r = super::Ring::new(
        Arc::clone(&g.mem),
        layout,
        u32::from(start),
        Negotiated::new(0),
    )
    .expect("valid ring");
    assert_eq!(r.count_avail(64), 12);
    let mut segs = SegVec::with_capacity(super::MAX_CHAIN_SEGS);
    for k in 0..12u16 {
        segs.clear();
        let super::Popped::Chain(used, len) = r.next_chain(false, &mut segs) else {
            panic!("chain {k} not taken");
        };
        assert_eq!(len, 64);
        r.push_used(used, 0, false);
    }
    assert!(r.publish_used());
    assert_eq!(g.used_idx(), start.wrapping_add(12));
    assert_eq!(g.used_idx(), 6);
    for k in 0..12u16 {
        assert_eq!(
            g.used_elem(start.wrapping_add(k)),
            (u32::from(k), 0),
            "entry {k}"
        );
    }
}

/// A packed ring over the same memory: descriptors at `DESC`, the driver's
/// event suppression area at `AVAIL`, the device's at `USED`.
fn packed_ring(g: &Guest, features: u64) -> super::packed::PackedRing {
    let layout = super::PackedLayout {
        desc: DESC,
        driver: AVAIL,
        device: USED,
        size: N,
    };
    let features = Negotiated::new(features | crate::device::bits::RING_PACKED);
    // Both wrap counters start at 1 (bit 15 of the base).
    super::packed::PackedRing::new(Arc::clone(&g.mem), layout, 0x8000, features)
        .expect("valid ring")
}

/// Makes slot `slot` available as a writable buffer `id` in the lap whose
/// wrap counter is `wrap` (AVAIL = wrap, USED = !wrap).
fn post_packed(g: &Guest, slot: u16, wrap: bool, id: u16) {
    let flags = WRITE | if wrap { 1 << 7 } else { 1 << 15 };
    packed_desc(g, slot, DATA + 64 * u64::from(slot), 64, id, flags);
}

/// Writes a packed descriptor (addr, len, id, flags) at `slot`.
fn packed_desc(g: &Guest, slot: u16, addr: u64, len: u32, id: u16, flags: u16) {
    let mut d = [0u8; 16];
    d[..8].copy_from_slice(&addr.to_le_bytes());
    d[8..12].copy_from_slice(&len.to_le_bytes());
    d[12..14].copy_from_slice(&id.to_le_bytes());
    d[14..].copy_from_slice(&flags.to_le_bytes());
    g.write(DESC + 16 * u64::from(slot), &d);
}

/// The driver's event suppression: `off_wrap` then `flags`.
fn driver_event(g: &Guest, off: u16, wrap: bool, flags: u16) {
    let off_wrap = off | u16::from(wrap) << 15;
    g.write(AVAIL, &off_wrap.to_le_bytes());
    g.write(AVAIL + 2, &flags.to_le_bytes());
}

/// Uses the next `n` buffers in one burst and returns whether the driver
/// is to be notified.
fn use_packed(ring: &mut super::packed::PackedRing, pos: &mut (u16, bool), n: u16) -> bool {
    let mut segs = SegVec::with_capacity(8);
    for _ in 0..n {
        segs.clear();
        let super::Popped::Chain(u, _) = ring.next_chain(true, &mut segs) else {
            panic!("slot {} of the lap with wrap {} is available", pos.0, pos.1)
        };
        ring.push_used(u, 10, true);
        pos.0 += 1;
        if pos.0 == N {
            pos.0 = 0;
            pos.1 = !pos.1;
        }
    }
    assert!(ring.publish_used());
    ring.needs_notification()
}

#[test]
fn packed_event_desc_counts_from_the_last_check_even_while_disabled() {
    const DISABLE: u16 = 1;
    const DESC_EVENT: u16 = 2;
    let g = Guest::new();
    let mut ring = packed_ring(&g, crate::device::bits::EVENT_IDX);
    // The driver keeps one lap ahead: every slot is posted for the lap the
    // device is in before the device gets there.
    for s in 0..N {
        post_packed(&g, s, true, s);
    }
    let mut pos = (0u16, true);
    let repost = |g: &Guest, from: (u16, bool), to: (u16, bool)| {
        // Reposts every slot the device used between `from` and `to`
        // for the following lap.
        let (mut s, mut w) = from;
        while (s, w) != to {
            post_packed(g, s, !w, s);
            s += 1;
            if s == N {
                s = 0;
                w = !w;
            }
        }
    };
    driver_event(&g, 0, true, DESC_EVENT);
    let before = pos;
    assert!(use_packed(&mut ring, &mut pos, 10), "first check");
    repost(&g, before, pos);
    // The driver polls with interrupts off for over a lap and a half: the
    // device publishes, and checks, with nothing to signal.
    driver_event(&g, 0, true, DISABLE);
    for _ in 0..9 {
        let before = pos;
        assert!(!use_packed(&mut ring, &mut pos, 3), "interrupts are off");
        repost(&g, before, pos);
    }
    assert_eq!(pos, (5, true), "two laps on, at slot 5");
    // Caught up, it asks for an interrupt when slot 5 of this lap is used.
    driver_event(&g, 5, true, DESC_EVENT);
    assert!(
        use_packed(&mut ring, &mut pos, 7),
        "slots 5-11 used: the driver's event (slot 5) was crossed by this burst"
    );
    // And not again until it asks for a later slot.
    assert!(!use_packed(&mut ring, &mut pos, 2));
}

/// A split ring takes a buffer of one direct descriptor inline; what it
/// returns must be what the general walk (`parse_chain`) returns, for
/// good buffers of either direction and for every way one descriptor can
/// be wrong or need the walk: the other direction, no length, an address
/// outside memory, a buffer across two regions, a full segment list, a
/// head out of range, a descriptor that says NEXT.
#[test]
fn split_single_descriptor_inline_path_matches_the_walk() {
    let g = Guest::two_regions();
    let edge = BASE + MEM as u64 - 100;
    // (head, addr, len, flags, next, writable, segment room)
    let cases: [(u16, u64, u32, u16, u16, bool, usize); 11] = [
        (0, DATA, 1500, WRITE, 0, true, 8),  // good RX buffer
        (0, DATA, 1500, 0, 0, false, 8),     // good TX buffer
        (0, DATA, 1500, 0, 0, true, 8),      // RX wants WRITE
        (0, DATA, 1500, WRITE, 0, false, 8), // TX refuses WRITE
        (0, DATA, 0, WRITE, 0, true, 8),     // no length
        (0, BASE + 4 * MEM as u64, 64, WRITE, 0, true, 8), // outside memory
        (0, edge, 300, WRITE, 0, true, 8),   // across two regions
        (0, edge, 300, WRITE, 0, true, 1),   // ... with room for one
        (0, DATA, 64, WRITE, 0, true, 0),    // no room at all
        (N + 3, DATA, 64, WRITE, 0, true, 8), // head out of range
        (0, DATA, 64, WRITE | NEXT, 1, true, 8), // a chain (desc 1 below)
    ];
    g.desc(1, DATA + 4096, 100, WRITE, 0);
    for (k, &(head, addr, len, flags, next, writable, room)) in cases.iter().enumerate() {
        let mut got = Vec::new();
        for inline in [true, false] {
            g.desc(0, addr, len, flags, next);
            g.avail(0, &[head]);
            let mut ring = g.ring(false, false);
            let mut segs = SegVec::with_capacity(8);
            segs.limit_next(room);
            let popped = if inline {
                ring.next_chain(writable, &mut segs)
            } else {
                assert_eq!(ring.refresh_avail(), 1);
                let h = ring.pop_head();
                match ring.parse_chain(h, writable, &mut segs) {
                    Ok(l) => super::Popped::Chain(super::UsedId::new(h, 1), l),
                    Err(r) => super::Popped::Bad((h < N).then_some(super::UsedId::new(h, 1)), r),
                }
            };
            let s: Vec<(usize, u32)> = segs.as_slice().iter().map(|s| (s.hva(), s.len())).collect();
            got.push((popped, s));
        }
        assert_eq!(got[0], got[1], "case {k}: {:?}", cases[k]);
    }
    // And the good ones are what they should be.
    g.desc(0, DATA, 1500, WRITE, 0);
    g.avail(0, &[0]);
    let mut ring = g.ring(false, false);
    let mut segs = SegVec::with_capacity(8);
    assert_eq!(
        ring.next_chain(true, &mut segs),
        super::Popped::Chain(super::UsedId::new(0, 1), 1500)
    );
    assert_eq!(segs.len(), 1);
}

/// A packed ring takes a buffer of one direct descriptor inline and
/// anything else through its walk; either way a buffer gives the same
/// verdict and takes its one slot: good buffers of both directions, and
/// every way one descriptor can be wrong or need the walk.
#[test]
fn packed_single_descriptor_buffers_every_shape() {
    use super::{Popped, UsedId};
    let g = Guest::two_regions();
    let edge = BASE + MEM as u64 - 100;
    let (bad, addr, many) = (
        DropReason::BadDescriptor,
        DropReason::BadAddress,
        DropReason::TooManySegments,
    );
    let id = UsedId::new(7, 1);
    // (addr, len, WRITE flag, writable, segment room, verdict, segments)
    let cases: [(u64, u32, u16, bool, usize, Popped, usize); 9] = [
        (DATA, 1500, WRITE, true, 8, Popped::Chain(id, 1500), 1),
        (DATA, 1500, 0, false, 8, Popped::Chain(id, 1500), 1),
        (DATA, 1500, 0, true, 8, Popped::Bad(Some(id), bad), 0),
        (DATA, 1500, WRITE, false, 8, Popped::Bad(Some(id), bad), 0),
        (DATA, 0, WRITE, true, 8, Popped::Chain(id, 0), 0),
        (
            BASE + 4 * MEM as u64,
            64,
            WRITE,
            true,
            8,
            Popped::Bad(Some(id), addr),
            0,
        ),
        (edge, 300, WRITE, true, 8, Popped::Chain(id, 300), 2),
        (edge, 300, WRITE, true, 1, Popped::Bad(Some(id), many), 1),
        (DATA, 64, WRITE, true, 0, Popped::Bad(Some(id), many), 0),
    ];
    for (k, &(a, len, write, writable, room, want, nsegs)) in cases.iter().enumerate() {
        // Available in the first lap: AVAIL = 1, USED = 0.
        packed_desc(&g, 0, a, len, 7, write | 1 << 7);
        let mut ring = packed_ring(&g, 0);
        let mut segs = SegVec::with_capacity(8);
        segs.limit_next(room);
        let got = ring.next_chain(writable, &mut segs);
        let ctx = format!("case {k}: {:?}", cases[k]);
        assert_eq!(got, want, "{ctx}");
        // What the refused chain appended is the caller's to drop; a good
        // one's segments cover the buffer.
        if let Popped::Chain(..) = got {
            assert_eq!(segs.len(), nsegs, "{ctx}");
            let total: u64 = segs.as_slice().iter().map(|s| u64::from(s.len())).sum();
            assert_eq!(total, u64::from(len), "{ctx}");
        }
        // The buffer took its slot: the next one is not available.
        assert_eq!(ring.next_chain(writable, &mut segs), Popped::Empty, "{ctx}");
    }
}

/// Writes an indirect table of `n` zero-length device-readable entries
/// chained by `next` (split) at `table`.
fn zero_chain_table(g: &Guest, table: u64, n: u16) {
    for i in 0..n {
        let flags = if i + 1 < n { NEXT } else { 0 };
        g.desc_at(table, i, DATA, 0, flags, i + 1);
    }
}

/// A chain may read at most `MAX_CHAIN_DESCS` descriptors, zero-length
/// ones and the indirect descriptor included. Before the bound, a split
/// chain's count started again inside an indirect table (up to 65,535
/// entries), so one chain could cost a PMD tens of microseconds.
#[test]
fn split_chains_reading_more_than_the_bound_are_refused() {
    let g = Guest::new();
    let max = super::MAX_CHAIN_DESCS as u16;
    let table = DATA + 0x8000;
    // The indirect descriptor and `max` entries: the bound exactly.
    zero_chain_table(&g, table, max);
    g.desc(0, table, 16 * u32::from(max), INDIRECT, 0);
    // One entry more: refused.
    let long = DATA + 0x20000;
    zero_chain_table(&g, long, max + 1);
    g.desc(1, long, 16 * u32::from(max + 1), INDIRECT, 0);
    // 4,000 entries (the old code walked all of them).
    let longer = DATA + 0x40000;
    zero_chain_table(&g, longer, 4000);
    g.desc(2, longer, 16 * 4000, INDIRECT, 0);
    g.avail(0, &[0, 1, 2]);
    let mut ring = g.ring(false, true);
    assert_eq!(parse(&g, &mut ring, false), Ok((0, 0)));
    assert_eq!(
        parse(&g, &mut ring, false),
        Err(DropReason::TooManySegments)
    );
    assert_eq!(
        parse(&g, &mut ring, false),
        Err(DropReason::TooManySegments)
    );
}

/// The walks of one burst read at most about `BURST_DESC_BUDGET`
/// descriptors: a ring full of worst-case chains gives a burst only as
/// many as fit, the rest stays available (nothing consumed, nothing
/// dropped) and the next burst (after publication) takes the next ones.
#[test]
fn split_walks_of_one_burst_share_a_descriptor_budget() {
    let g = Guest::new();
    let max = super::MAX_CHAIN_DESCS as u16;
    let table = DATA + 0x8000;
    zero_chain_table(&g, table, max);
    g.desc(0, table, 16 * u32::from(max), INDIRECT, 0);
    // Every avail entry names the same worst-case chain.
    g.avail(0, &[0; N as usize]);
    let mut ring = g.ring(false, true);
    let per_burst = (super::BURST_DESC_BUDGET / super::MAX_CHAIN_READS) as usize;
    assert!(
        per_burst < N as usize,
        "the test needs more chains than a burst"
    );
    let mut segs = SegVec::with_capacity(super::MAX_CHAIN_SEGS);
    let mut burst = |ring: &mut SplitRing| {
        let mut n = 0;
        loop {
            segs.clear();
            match ring.next_chain(false, &mut segs) {
                super::Popped::Chain(u, 0) => ring.push_used(u.id(), 0),
                super::Popped::Empty => break,
                other => panic!("{other:?}"),
            }
            n += 1;
        }
        ring.publish_used();
        n
    };
    assert_eq!(burst(&mut ring), per_burst);
    assert_eq!(ring.cached_avail() as usize, N as usize - per_burst);
    let mut taken = per_burst;
    while taken < N as usize {
        let n = burst(&mut ring);
        assert!(n > 0 && n <= per_burst, "{n}");
        taken += n;
    }
    assert_eq!(g.used_idx(), N);
}

/// Packed rings: an indirect table that would take the chain over the
/// bound is refused before any entry is read, and the budget holds there
/// too.
#[test]
fn packed_walks_are_bounded_per_chain_and_per_burst() {
    let g = Guest::new();
    let max = super::MAX_CHAIN_DESCS + 1;
    let table = DATA + 0x8000;
    for i in 0..max {
        g.desc_at(table, i as u16, DATA, 0, 0, 0);
    }
    let avail = 1 << 7;
    let mut ring = packed_ring(&g, crate::device::bits::INDIRECT_DESC);
    // Slot 0: a table of `MAX_CHAIN_DESCS + 1` entries, one over the
    // bound. Slots 1..N: tables of `MAX_CHAIN_DESCS`, the bound exactly.
    packed_desc(&g, 0, table, 16 * max, 0, INDIRECT | avail);
    for s in 1..N {
        packed_desc(&g, s, table, 16 * (max - 1), s, INDIRECT | avail);
    }
    let mut segs = SegVec::with_capacity(super::MAX_CHAIN_SEGS);
    assert!(matches!(
        ring.next_chain(false, &mut segs),
        super::Popped::Bad(Some(_), DropReason::TooManySegments)
    ));
    let mut taken = 1;
    let mut bursts = 0;
    while taken < N as usize {
        let mut n = 0;
        loop {
            segs.clear();
            match ring.next_chain(false, &mut segs) {
                super::Popped::Chain(u, 0) => ring.push_used(u, 0, false),
                super::Popped::Empty => break,
                other => panic!("{other:?}"),
            }
            n += 1;
        }
        assert!(n as u32 <= super::BURST_DESC_BUDGET / (max - 1), "{n}");
        assert!(n > 0, "every burst makes progress");
        ring.publish_used();
        taken += n;
        bursts += 1;
    }
    assert!(bursts >= 2, "the budget split the ring over bursts");
}
