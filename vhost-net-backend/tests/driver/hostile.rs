// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Hostile guests: malformed rings and descriptors are dropped and counted, the chain is
//! returned, and valid traffic keeps flowing.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use vhost_net_backend::device::bits;
use vhost_net_backend::test_utils::{
    desc_bytes, DriverOpts, RxLayout, TestDriver, TxLayout, DEFAULT_FEATURES,
};
use vhost_net_backend::DropReason;
use vm_memory::{Bytes, GuestAddress};

use crate::harness::*;

/// A port with an MTU of 1500 and two pairs, and a driver with indirect descriptors.
fn hostile_setup(name: &str) -> (Echo, TestDriver) {
    let echo = Echo::server(name, |cfg| {
        cfg.queue_pairs = 2;
        cfg.mtu = Some(1500);
    });
    let drv = echo.connect(two_pairs());
    (echo, drv)
}

/// Valid traffic still flows on both pairs, every TX descriptor is back with the driver, and
/// the port's counters show exactly `drops` on pair 0's TX queue besides the valid traffic.
/// `other` is what pair 1 carried before.
fn hostile_epilogue(echo: Echo, mut drv: TestDriver, other: Tally, drops: &[(DropReason, u64)]) {
    let mut tally = [Tally::default(), other];
    traffic_flows(&mut drv, 2, 100, &mut tally);
    for qp in 0..2 {
        assert_eq!(drv.in_flight(qp, false), 0);
        assert_eq!(
            drv.free_descriptors(qp, false),
            usize::from(drv.opts().queue_size),
            "qp {qp}: tx descriptors leaked"
        );
    }
    assert_no_violations(&drv);
    let before = echo.counters(0);
    let c = echo.stop();
    for (qp, (c, t)) in c.iter().zip(tally).enumerate() {
        assert!(c.tx.packets >= t.frames && c.rx.packets >= t.frames);
        assert_eq!(c.rx.dropped(), 0, "qp {qp}: rx drops {c:?}");
        if qp == 1 {
            assert_clean_counts(c, t, "the other pair");
        }
    }
    assert_eq!(before.tx.drops, c[0].tx.drops);
    for r in DropReason::ALL {
        let want = drops.iter().find(|(d, _)| *d == r).map_or(0, |&(_, n)| n);
        assert_eq!(c[0].tx.drops_for(r), want, "tx drops for {}", r.name());
    }
}

/// Gives the raw descriptors `descs` of pair 0's TX ring back to the driver, then
/// [`hostile_epilogue`] with no other traffic before.
fn release_then_epilogue(
    echo: Echo,
    mut drv: TestDriver,
    descs: &[u16],
    drops: &[(DropReason, u64)],
) {
    for &d in descs {
        drv.release_desc(0, false, d).unwrap();
    }
    hostile_epilogue(echo, drv, Tally::default(), drops);
}

/// Writes descriptors into guest memory at `gpa` (an indirect table).
fn write_table(drv: &TestDriver, gpa: u64, descs: &[(u64, u32, u16, u16)]) {
    let mut b = Vec::with_capacity(16 * descs.len());
    for &(addr, len, flags, next) in descs {
        b.extend_from_slice(&desc_bytes(addr, len, flags, next));
    }
    drv.memory()
        .write_slice(&b, GuestAddress(gpa))
        .expect("write table");
}

/// A readable guest buffer holding a zero header and a 60-byte frame; `(gpa, len)`.
fn tx_buffer(drv: &mut TestDriver) -> (u64, u32) {
    let mut b = drv.zero_hdr();
    b.extend_from_slice(&frame(60, 0xbad));
    let gpa = drv.alloc_guest(b.len() as u64).expect("alloc");
    drv.memory()
        .write_slice(&b, GuestAddress(gpa))
        .expect("write buffer");
    (gpa, b.len() as u32)
}

/// Publishes raw head `head` on pair `qp`'s TX ring, kicks, and waits until the port counts
/// one more TX drop for `reason` and nothing else. Unless the head is outside the ring, it must
/// come back in the used ring with length 0 (the guest gets its descriptors back).
fn expect_raw_tx_drop(echo: &Echo, drv: &mut TestDriver, qp: u16, head: u16, reason: DropReason) {
    let before = echo.counters(qp).tx;
    drv.push_avail(qp, false, head).expect("push avail");
    drv.kick_raw(drv.vring_index(qp, false).unwrap())
        .expect("kick");
    wait_until(
        &format!("a {} tx drop (head {head})", reason.name()),
        || echo.counters(qp).tx.drops_for(reason) > before.drops_for(reason),
    );
    let in_ring = head < drv.opts().queue_size;
    let mut used = Vec::new();
    if !in_ring {
        // The burst that counted the drop published its used entries before counting, and
        // two more passes went by: a used element for this head would be there now.
        echo.sync();
    }
    let deadline = Instant::now() + if in_ring { TIMEOUT } else { Duration::ZERO };
    loop {
        drv.tx_completions(qp);
        used.extend(drv.take_raw_used(qp, false));
        if !used.is_empty() || Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    if in_ring {
        assert_eq!(used, vec![(head, 0)], "bad chain {head} returned unused");
    } else {
        assert!(used.is_empty(), "used element for a head outside the ring");
    }
    let after = echo.counters(qp).tx;
    assert_eq!(after.packets, before.packets, "a bad chain was delivered");
    assert_eq!(
        after.dropped(),
        before.dropped() + 1,
        "exactly one drop: {after:?}"
    );
    assert_eq!(after.drops_for(reason), before.drops_for(reason) + 1);
}

/// A raw descriptor of pair 0's TX ring as written: `(index, addr, len, flags, next)`.
type Desc = (u16, u64, u32, u16, u16);

/// `N` raw descriptors of pair 0's TX ring.
fn reserve_tx<const N: usize>(drv: &mut TestDriver) -> [u16; N] {
    std::array::from_fn(|_| drv.reserve_desc(0, false).expect("descriptor"))
}

/// Writes `descs` (`(index, addr, len, flags, next)`) into pair 0's TX descriptor table and
/// expects the chain that starts at the first to be dropped for `reason`
/// ([`expect_raw_tx_drop`]).
fn expect_chain_drop(echo: &Echo, drv: &mut TestDriver, descs: &[Desc], reason: DropReason) {
    for &(d, addr, len, flags, next) in descs {
        drv.write_desc(0, false, d, addr, len, flags, next)
            .expect("write desc");
    }
    expect_raw_tx_drop(echo, drv, 0, descs[0].0, reason);
}

#[test]
fn hostile_descriptors_outside_guest_memory() {
    let (echo, mut drv) = hostile_setup("h-addr");
    let o = drv.opts().clone();
    let (below, end, wrap) = (0x1000, o.gpa_base + o.mem_size - 40, u64::MAX - 20);
    let [d] = reserve_tx(&mut drv);
    for (addr, len) in [
        (below, 72),
        (end, 72),
        (wrap, 72),
        (o.gpa_base + o.mem_size, 1),
    ] {
        expect_chain_drop(
            &echo,
            &mut drv,
            &[(d, addr, len, 0, 0)],
            DropReason::BadAddress,
        );
    }
    // Second descriptor of a chain outside memory.
    let [d2] = reserve_tx(&mut drv);
    let (gpa, len) = tx_buffer(&mut drv);
    expect_chain_drop(
        &echo,
        &mut drv,
        &[(d, gpa, len, DESC_F_NEXT, d2), (d2, below, 64, 0, 0)],
        DropReason::BadAddress,
    );
    release_then_epilogue(echo, drv, &[d, d2], &[(DropReason::BadAddress, 5)]);
}

/// Raw chains over two descriptors `a` and `b` of pair 0's TX ring, each dropped as a bad
/// descriptor in turn; `chains(a, b, gpa, len)` builds them, `(gpa, len)` being a readable
/// buffer ([`tx_buffer`]). Then [`release_then_epilogue`].
fn bad_chains_of_two(name: &str, chains: impl FnOnce(u16, u16, u64, u32) -> Vec<Vec<Desc>>) {
    let (echo, mut drv) = hostile_setup(name);
    let (gpa, len) = tx_buffer(&mut drv);
    let [a, b] = reserve_tx(&mut drv);
    let chains = chains(a, b, gpa, len);
    for chain in &chains {
        expect_chain_drop(&echo, &mut drv, chain, DropReason::BadDescriptor);
    }
    let drops = chains.len() as u64;
    release_then_epilogue(echo, drv, &[a, b], &[(DropReason::BadDescriptor, drops)]);
}

#[test]
fn hostile_descriptor_loop() {
    bad_chains_of_two("h-loop", |a, b, gpa, len| {
        vec![
            // a -> b -> a -> ...: a loop of real buffers.
            vec![(a, gpa, len, DESC_F_NEXT, b), (b, gpa, len, DESC_F_NEXT, a)],
            // A descriptor that points at itself.
            vec![(a, gpa, len, DESC_F_NEXT, a)],
        ]
    });
}

#[test]
fn hostile_descriptor_loop_of_empty_buffers() {
    bad_chains_of_two("h-loop0", |a, b, _, _| {
        vec![
            vec![(a, 0, 0, DESC_F_NEXT, b), (b, 0, 0, DESC_F_NEXT, a)],
            // A `next` outside the ring.
            vec![(a, 0, 0, DESC_F_NEXT, 4096)],
        ]
    });
}

#[test]
fn hostile_head_index_out_of_range() {
    let (echo, mut drv) = hostile_setup("h-head");
    let size = drv.opts().queue_size;
    for head in [size, size + 7, u16::MAX] {
        expect_raw_tx_drop(&echo, &mut drv, 0, head, DropReason::BadDescriptor);
    }
    hostile_epilogue(
        echo,
        drv,
        Tally::default(),
        &[(DropReason::BadDescriptor, 3)],
    );
}

#[test]
fn hostile_writable_buffer_in_a_tx_chain() {
    bad_chains_of_two("h-write", |a, b, gpa, len| {
        vec![
            vec![(a, gpa, len, DESC_F_WRITE, 0)],
            vec![(a, gpa, len, DESC_F_NEXT, b), (b, gpa, 64, DESC_F_WRITE, 0)],
        ]
    });
}

#[test]
fn hostile_indirect_tables() {
    use DropReason::{BadAddress, BadDescriptor};
    let (echo, mut drv) = hostile_setup("h-indirect");
    let (gpa, len) = tx_buffer(&mut drv);
    let [d] = reserve_tx(&mut drv);
    let inner = drv.alloc_guest(16).unwrap();
    let outer = drv.alloc_guest(32).unwrap();
    write_table(&drv, inner, &[(gpa, len, 0, 0)]);
    // Descriptor `d` alone, `(addr, len, flags)`, must be dropped for `reason`.
    let drop_desc = |drv: &mut TestDriver, addr, len, flags, reason| {
        expect_chain_drop(&echo, drv, &[(d, addr, len, flags, 0)], reason);
    };
    // An indirect descriptor inside an indirect table.
    write_table(&drv, outer, &[(inner, 16, DESC_F_INDIRECT, 0)]);
    drop_desc(&mut drv, outer, 16, DESC_F_INDIRECT, BadDescriptor);
    // ... after a valid descriptor of the same table.
    write_table(
        &drv,
        outer,
        &[(gpa, len, DESC_F_NEXT, 1), (inner, 16, DESC_F_INDIRECT, 0)],
    );
    drop_desc(&mut drv, outer, 32, DESC_F_INDIRECT, BadDescriptor);
    // INDIRECT together with NEXT.
    drop_desc(
        &mut drv,
        inner,
        16,
        DESC_F_INDIRECT | DESC_F_NEXT,
        BadDescriptor,
    );
    // A table whose length is not a multiple of 16, and an empty one.
    for l in [15, 24, 0] {
        drop_desc(&mut drv, inner, l, DESC_F_INDIRECT, BadDescriptor);
    }
    // A loop inside a table.
    write_table(
        &drv,
        outer,
        &[(gpa, len, DESC_F_NEXT, 1), (gpa, len, DESC_F_NEXT, 0)],
    );
    drop_desc(&mut drv, outer, 32, DESC_F_INDIRECT, BadDescriptor);
    // A table outside guest memory.
    drop_desc(&mut drv, 0x1000, 16, DESC_F_INDIRECT, BadAddress);
    release_then_epilogue(echo, drv, &[d], &[(BadDescriptor, 7), (BadAddress, 1)]);
}

#[test]
fn hostile_indirect_descriptor_without_the_feature() {
    let (echo, mut drv) = connect_offering("h-noindirect", DEFAULT_FEATURES & !bits::INDIRECT_DESC);
    assert_eq!(drv.acked_features() & bits::INDIRECT_DESC, 0);
    let (gpa, len) = tx_buffer(&mut drv);
    let table = drv.alloc_guest(16).unwrap();
    write_table(&drv, table, &[(gpa, len, 0, 0)]);
    let [d] = reserve_tx(&mut drv);
    expect_chain_drop(
        &echo,
        &mut drv,
        &[(d, table, 16, DESC_F_INDIRECT, 0)],
        DropReason::BadDescriptor,
    );
    drv.release_desc(0, false, d).unwrap();
    let mut tally = [Tally::default()];
    traffic_flows(&mut drv, 1, 0, &mut tally);
    assert_no_violations(&drv);
    let c = echo.stop();
    assert_eq!(c[0].tx.drops_for(DropReason::BadDescriptor), 1);
    assert_eq!(c[0].tx.dropped(), 1);
    assert_eq!(c[0].tx.packets, tally[0].frames);
}

#[test]
fn hostile_zero_length_and_truncated_frames() {
    let (echo, mut drv) = hostile_setup("h-short");
    let hdr = drv.zero_hdr();
    for (hdr, layout) in [
        // A header and no frame.
        (&hdr[..], TxLayout::Single),
        // Less than a header.
        (&hdr[..5], TxLayout::Single),
        (&hdr[..], TxLayout::Segments(3)),
    ] {
        expect_tx_drop(&echo, &mut drv, hdr, &[], layout, DropReason::TooShort);
    }
    // A descriptor of length 0 (its address is never looked at).
    let [d] = reserve_tx(&mut drv);
    expect_chain_drop(&echo, &mut drv, &[(d, 0, 0, 0, 0)], DropReason::TooShort);
    release_then_epilogue(echo, drv, &[d], &[(DropReason::TooShort, 4)]);
}

#[test]
fn hostile_frame_larger_than_the_mtu() {
    let (echo, mut drv) = hostile_setup("h-mtu");
    assert_ne!(drv.offered_features() & bits::MTU, 0, "MTU offered");
    refill_rx(&mut drv, 0, 16, 2048, RxLayout::Single);
    // MTU 1500 plus a VLAN-tagged Ethernet header: 1518 bytes pass.
    let fits = vec![frame(1518, 1)];
    round_trip_plain(&mut drv, 0, &fits);
    echo.settle(0, 1, 1);
    let hdr = drv.zero_hdr();
    for (f, layout) in [
        (frame(1519, 2), TxLayout::Single),
        (frame(9000, 2), TxLayout::Single),
        (frame(4000, 3), TxLayout::Segments(4)),
    ] {
        expect_tx_drop(&echo, &mut drv, &hdr, &f, layout, DropReason::TooLong);
    }
    hostile_epilogue(echo, drv, Tally::default(), &[(DropReason::TooLong, 3)]);
}

#[test]
fn hostile_chain_with_too_many_segments() {
    let (echo, mut drv) = hostile_setup("h-segs");
    // An indirect table of 300 five-byte buffers: longer than the ring (256), and more
    // buffers than the engine takes for one frame (its per-queue segment list holds 256).
    let (gpa, _) = tx_buffer(&mut drv);
    let big = drv.alloc_guest(1500).unwrap();
    let mut b = drv.zero_hdr();
    b.extend_from_slice(&frame(1500 - b.len(), 5));
    drv.memory().write_slice(&b, GuestAddress(big)).unwrap();
    let descs: Vec<(u64, u32, u16, u16)> = (0..300u16)
        .map(|i| {
            let next = if i < 299 { DESC_F_NEXT } else { 0 };
            (big + 5 * u64::from(i), 5, next, i + 1)
        })
        .collect();
    let table = drv.alloc_guest(16 * 300).unwrap();
    write_table(&drv, table, &descs);
    let [d] = reserve_tx(&mut drv);
    expect_chain_drop(
        &echo,
        &mut drv,
        &[(d, table, 16 * 300, DESC_F_INDIRECT, 0)],
        DropReason::TooManySegments,
    );
    // The same table cut to one buffer is a valid frame.
    write_table(&drv, table, &[(gpa, 72, 0, 0)]);
    drv.write_desc(0, false, d, table, 16, DESC_F_INDIRECT, 0)
        .unwrap();
    drv.push_avail(0, false, d).unwrap();
    refill_rx(&mut drv, 0, 16, 2048, RxLayout::Single);
    drv.kick_raw(drv.vring_index(0, false).unwrap()).unwrap();
    let got = drv.recv_frames_until(0, 1, TIMEOUT);
    assert_eq!(got.len(), 1);
    assert!(got[0].data == echoed(&frame(60, 0xbad)));
    wait_until("the valid raw chain back", || {
        drv.tx_completions(0);
        drv.take_raw_used(0, false) == vec![(d, 0)]
    });
    release_then_epilogue(echo, drv, &[d], &[(DropReason::TooManySegments, 1)]);
}

#[test]
fn hostile_avail_index_breaks_the_ring_until_it_is_restarted() {
    let (echo, mut drv) = hostile_setup("h-broken");
    let addrs = drv.vring_addrs(0, false).unwrap();
    let next = drv.avail_idx(0, false).unwrap();
    // avail.idx more than a ring ahead of what the device consumed.
    let bogus = next.wrapping_add(addrs.size + 1);
    drv.memory()
        .store(
            bogus.to_le(),
            GuestAddress(addrs.avail + 2),
            Ordering::Release,
        )
        .unwrap();
    let tx = drv.vring_index(0, false).unwrap();
    drv.kick_raw(tx).unwrap();
    wait_until("a ring_broken drop", || {
        echo.counters(0).tx.drops_for(DropReason::RingBroken) == 1
    });
    // The other pair is not affected.
    let mut other = Tally::default();
    traffic_on(&mut drv, 1, 0, &mut other);
    // The broken ring stays stopped, even once avail.idx is sane again.
    refill_rx(&mut drv, 0, 16, 2048, RxLayout::Single);
    let queued = frame(60, 7);
    let hdr = drv.zero_hdr();
    drv.send_frame(0, &hdr, &queued, TxLayout::Single).unwrap();
    drv.kick_raw(tx).unwrap();
    echo.sync();
    assert!(drv.tx_completions(0).is_empty(), "a broken ring was used");
    assert_eq!(echo.counters(0).tx.packets, 0, "a broken ring was read");
    // Until the frontend restarts it, from where the device stopped.
    let base = drv.get_vring_base(tx).expect("GET_VRING_BASE");
    assert_eq!(base, u32::from(next));
    drv.resume_vring(tx, base as u16).expect("resume");
    drv.kick_raw(tx).unwrap();
    let got = drv.recv_frames_until(0, 1, TIMEOUT);
    assert_eq!(got.len(), 1);
    assert!(got[0].data == echoed(&queued));
    assert_eq!(drv.tx_completions_until(0, 1, TIMEOUT).len(), 1);
    hostile_epilogue(echo, drv, other, &[(DropReason::RingBroken, 1)]);
}

#[test]
fn hostile_rx_buffers() {
    let (echo, mut drv) = hostile_setup("h-rx");
    let hdr = drv.zero_hdr();
    let d = drv.reserve_desc(0, true).expect("descriptor");
    let buf = drv.alloc_guest(2048).unwrap();
    let cases = [
        (0x1000, DESC_F_WRITE, DropReason::BadAddress),
        (buf, 0, DropReason::BadDescriptor),
    ];
    for (n, &(addr, flags, reason)) in cases.iter().enumerate() {
        drv.write_desc(0, true, d, addr, 2048, flags, 0).unwrap();
        drv.push_avail(0, true, d).unwrap();
        drv.kick_rx(0);
        drv.send_frame(0, &hdr, &frame(60, n as u32), TxLayout::Single)
            .unwrap();
        drv.kick_tx(0);
        assert_eq!(drv.tx_completions_until(0, 1, TIMEOUT).len(), 1);
        wait_until(&format!("an rx {} drop", reason.name()), || {
            echo.counters(0).rx.drops_for(reason) == 1
        });
        let mut used = Vec::new();
        wait_until("the bad rx buffer back", || {
            assert!(drv.recv_frames(0).is_empty());
            used.extend(drv.take_raw_used(0, true));
            !used.is_empty()
        });
        assert_eq!(used, vec![(d, 0)]);
    }
    drv.release_desc(0, true, d).unwrap();
    let c = echo.counters(0);
    assert_eq!(c.rx.dropped(), 2);
    assert_eq!(c.rx.packets, 0);
    let mut tally = [Tally::default(); 2];
    traffic_flows(&mut drv, 2, 0, &mut tally);
    assert_no_violations(&drv);
    let c = echo.stop();
    assert_eq!(c[0].rx.packets, tally[0].frames);
    assert_eq!(c[0].tx.packets, tally[0].frames + 2);
    assert_eq!(c[0].tx.dropped(), 0);
    assert_eq!(c[0].rx.drops_for(DropReason::BadAddress), 1);
    assert_eq!(c[0].rx.drops_for(DropReason::BadDescriptor), 1);
    assert_clean_counts(&c[1], tally[1], "the other pair");
}

#[test]
fn rx_without_buffers_drops_no_buffers_then_recovers() {
    let echo = Echo::server("no-rx-bufs", |_| {});
    let mut drv = echo.connect(DriverOpts::default());
    let hdr = drv.zero_hdr();
    for i in 0..10 {
        drv.send_frame(0, &hdr, &frame(1514, i), TxLayout::Single)
            .unwrap();
    }
    drv.kick_tx(0);
    // TX keeps flowing: the frames are dequeued and dropped, not left in the ring.
    assert_eq!(drv.tx_completions_until(0, 10, TIMEOUT).len(), 10);
    wait_until("10 no_buffers drops", || {
        echo.counters(0).rx.drops_for(DropReason::NoBuffers) == 10
    });
    assert!(drv.recv_frames(0).is_empty());
    let mut tally = [Tally::default()];
    traffic_flows(&mut drv, 1, 1, &mut tally);
    assert_no_violations(&drv);
    let c = echo.stop();
    assert_rx_drop_counts(
        &c[0],
        (tally[0].frames + 10, tally[0].bytes + 10 * 1514),
        (tally[0].frames, tally[0].bytes),
        DropReason::NoBuffers,
        10,
    );
    assert_eq!(c[0].tx.dropped(), 0);
}

/// Prints a measured figure (shown with `--nocapture`).
#[allow(clippy::disallowed_macros)] // a test's figures, not the library's logging
fn report(line: &str) {
    eprintln!("{line}");
}

/// Chains of zero-length descriptors behind indirect tables: every 1 ms the hostile pair's
/// guest posts 32 chains, each an indirect table of 65,535 zero-length entries chained by
/// `next`, while the other pair (the neighbour, served by the same data-plane thread) echoes
/// frames in lock-step. Before the descriptor bounds each such chain was walked to its end
/// (65,536 reads): 32 of them a millisecond kept the thread busy for longer than that, and
/// the neighbour's rate fell to a fraction. Now a chain is refused after
/// `MAX_CHAIN_DESCS` reads and a burst's walks stop at `BURST_DESC_BUDGET`: the neighbour
/// keeps at least 90 % of its quiet rate (medians of alternating windows), every hostile
/// chain comes back unused and is counted as `too_many_segments`, nothing else is dropped.
#[test]
fn hostile_long_chains_cost_a_neighbour_little() {
    const ENTRIES: u16 = u16::MAX;
    const PER_TICK: usize = 32;
    const WINDOW: Duration = Duration::from_millis(150);
    let (echo, mut drv) = hostile_setup("h-long");
    // One table shared by every hostile chain.
    let table = drv.alloc_guest(16 * u64::from(ENTRIES)).unwrap();
    let (gpa, _) = tx_buffer(&mut drv);
    let entries: Vec<_> = (0..ENTRIES)
        .map(|i| {
            let flags = if i + 1 < ENTRIES { DESC_F_NEXT } else { 0 };
            (gpa, 0, flags, i.wrapping_add(1))
        })
        .collect();
    write_table(&drv, table, &entries);
    let heads: Vec<u16> = (0..PER_TICK)
        .map(|_| drv.reserve_desc(0, false).expect("descriptor"))
        .collect();
    for &d in &heads {
        drv.write_desc(
            0,
            false,
            d,
            table,
            16 * u32::from(ENTRIES),
            DESC_F_INDIRECT,
            0,
        )
        .unwrap();
    }
    let mut posted = 0u64;
    let mut back = 0usize;
    let mut outstanding = 0usize;
    let mut neighbour = Tally::default();
    let mut batch = 0usize;
    // Neighbour round trips in one window, attacking or not.
    let mut window = |drv: &mut TestDriver, attack: bool| -> u64 {
        let start = Instant::now();
        let mut next_tick = start;
        let mut n = 0;
        while start.elapsed() < WINDOW {
            if attack && Instant::now() >= next_tick && outstanding == 0 {
                for &d in &heads {
                    drv.push_avail(0, false, d).unwrap();
                }
                drv.kick_raw(drv.vring_index(0, false).unwrap()).unwrap();
                posted += PER_TICK as u64;
                outstanding = PER_TICK;
                next_tick += Duration::from_millis(1);
            }
            traffic_on(drv, 1, batch, &mut neighbour);
            batch += 1;
            n += 1;
            drv.tx_completions(0);
            let used = drv.take_raw_used(0, false);
            assert!(used.iter().all(|&(h, len)| heads.contains(&h) && len == 0));
            outstanding -= used.len();
            back += used.len();
        }
        n
    };
    let (mut quiet, mut attacked) = (Vec::new(), Vec::new());
    for _ in 0..7 {
        quiet.push(window(&mut drv, false));
        attacked.push(window(&mut drv, true));
    }
    let median = |v: &mut Vec<u64>| {
        v.sort_unstable();
        v[v.len() / 2]
    };
    let (q, a) = (median(&mut quiet), median(&mut attacked));
    let ratio = a as f64 / q as f64;
    // The figures docs/robustness.md reports (`--nocapture`).
    report(&format!(
        "neighbour round trips per {WINDOW:?}: quiet {q} (median of {quiet:?}), attacked {a} \
         ({attacked:?}): {ratio:.3}x; {posted} hostile chains posted"
    ));
    // The last tick's chains come back.
    wait_until("every hostile chain back", || {
        drv.tx_completions(0);
        back += drv.take_raw_used(0, false).len();
        back as u64 == posted
    });
    assert!(posted >= 7 * PER_TICK as u64, "the attack ran");
    assert!(
        ratio >= 0.9,
        "the neighbour kept {ratio:.3}x of its quiet rate"
    );
    let c = echo.counters(0).tx;
    assert_eq!(c.drops_for(DropReason::TooManySegments), posted);
    assert_eq!(
        c.dropped(),
        posted,
        "nothing but the hostile chains dropped"
    );
    let n = echo.counters(1);
    assert_eq!(
        n.tx.dropped() + n.rx.dropped(),
        0,
        "the neighbour lost nothing"
    );
    assert_eq!(n.tx.packets, neighbour.frames);
    for d in heads {
        drv.release_desc(0, false, d).unwrap();
    }
    hostile_epilogue(
        echo,
        drv,
        neighbour,
        &[(DropReason::TooManySegments, posted)],
    );
}
