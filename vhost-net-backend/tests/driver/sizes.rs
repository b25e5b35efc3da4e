// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Frame sizes, features and layouts: every buffer layout, header size and ring size
//! the driver can make carries frames byte-exact.

use vhost_net_backend::device::bits;
use vhost_net_backend::test_utils::{
    DriverOpts, MemTableMode, RxLayout, TxLayout, VirtioNetHdr, DEFAULT_FEATURES, NET_HDR_LEN,
};
use vhost_net_backend::DropReason;

use crate::harness::*;

/// One echo scenario: a port and driver configuration, and how buffers are laid out.
#[derive(Debug, Clone, Copy)]
struct Case {
    name: &'static str,
    pairs: u16,
    features: u64,
    rx_buf: u32,
    rx_layout: RxLayout,
    tx_layouts: &'static [TxLayout],
    split_regions: bool,
    mem_table: MemTableMode,
}

impl Case {
    fn new(name: &'static str) -> Case {
        Case {
            name,
            pairs: 1,
            features: DEFAULT_FEATURES,
            rx_buf: 2048,
            rx_layout: RxLayout::Single,
            tx_layouts: &[TxLayout::Single],
            split_regions: false,
            mem_table: MemTableMode::SetMemTable,
        }
    }
}

/// Echoes [`SIZES`] on every pair (pair `i` gets `i + 2` rounds, so per-pair counters cannot
/// be confused), once per TX layout per round, and checks content, buffer counts and
/// counters.
fn run_case(c: Case) {
    let echo = Echo::server(c.name, |cfg| cfg.queue_pairs = c.pairs);
    let mut drv = echo.connect(DriverOpts {
        queue_pairs: c.pairs,
        active_pairs: c.pairs,
        features: c.features,
        split_regions: c.split_regions,
        mem_table: c.mem_table,
        ..DriverOpts::default()
    });
    let wanted = c.features & drv.offered_features();
    assert_eq!(
        drv.acked_features() & !bits::PROTOCOL_FEATURES,
        wanted,
        "{}: acked features",
        c.name
    );
    let mrg = wanted & bits::MRG_RXBUF != 0;
    let hdr_len = drv.hdr_len();
    let mut tally = vec![Tally::default(); usize::from(c.pairs)];
    for qp in 0..c.pairs {
        for round in 0..usize::from(qp) + 2 {
            for (l, &layout) in c.tx_layouts.iter().enumerate() {
                refill_rx(&mut drv, qp, 32, c.rx_buf, c.rx_layout);
                let frames: Vec<Vec<u8>> = SIZES
                    .iter()
                    .enumerate()
                    .map(|(i, &len)| frame(len, seed(qp, round * 16 + l, i)))
                    .collect();
                let got = round_trip(&mut drv, qp, &VirtioNetHdr::default(), &frames, layout);
                for (g, f) in got.iter().zip(&frames) {
                    let bufs = if mrg {
                        (hdr_len + f.len()).div_ceil(c.rx_buf as usize)
                    } else {
                        1
                    };
                    let what = format!("{}: qp {qp}, {}-byte frame, {layout:?}", c.name, f.len());
                    assert_eq!(g.used.len(), bufs, "{what}: buffers used");
                    assert_eq!(usize::from(g.num_buffers), bufs, "{what}: num_buffers");
                    if hdr_len == NET_HDR_LEN {
                        // Without MRG_RXBUF the device sets num_buffers to 1 (virtio 1.x).
                        assert_eq!(usize::from(g.net_hdr().num_buffers), bufs, "{what}");
                    }
                    if mrg {
                        let full = &g.used[..bufs - 1];
                        assert!(
                            full.iter().all(|&(_, l)| l == c.rx_buf),
                            "{what}: all but the last buffer are filled: {:?}",
                            g.used
                        );
                    }
                }
                tally[usize::from(qp)].add(&frames);
            }
        }
    }
    assert_no_violations(&drv);
    let counters = echo.stop();
    for (qp, (c2, t)) in counters.iter().zip(&tally).enumerate() {
        assert_clean_counts(c2, *t, &format!("{}: qp {qp}", c.name));
        assert!(c2.rx.notifications > 0, "{}: rx interrupts", c.name);
        assert!(c2.tx.notifications > 0, "{}: tx interrupts", c.name);
    }
}

#[test]
fn mrg_rxbuf_big_frames_span_2k_buffers() {
    run_case(Case::new("mrg"));
}

#[test]
fn without_mrg_rxbuf_frames_fit_one_big_chain() {
    run_case(Case {
        features: bits::VERSION_1 | bits::EVENT_IDX,
        rx_buf: 9216,
        rx_layout: RxLayout::Split(4),
        ..Case::new("nomrg")
    });
}

#[test]
fn legacy_header_without_version_1() {
    // A 10-byte virtio_net_hdr (no VERSION_1, no MRG_RXBUF).
    run_case(Case {
        features: bits::EVENT_IDX,
        rx_buf: 9216,
        rx_layout: RxLayout::Split(3),
        ..Case::new("legacy")
    });
}

#[test]
fn indirect_descriptors_rx_and_tx() {
    let tx: &[TxLayout] = &[TxLayout::Indirect(1), TxLayout::Indirect(4)];
    run_case(Case {
        rx_layout: RxLayout::Indirect(3),
        tx_layouts: tx,
        ..Case::new("indirect-mrg")
    });
    run_case(Case {
        features: bits::VERSION_1 | bits::INDIRECT_DESC,
        rx_buf: 9216,
        rx_layout: RxLayout::Indirect(8),
        tx_layouts: tx,
        ..Case::new("indirect-nomrg")
    });
}

#[test]
fn event_idx_on_and_off() {
    run_case(Case {
        features: DEFAULT_FEATURES | bits::EVENT_IDX,
        ..Case::new("event-idx-on")
    });
    run_case(Case {
        features: DEFAULT_FEATURES & !bits::EVENT_IDX,
        ..Case::new("event-idx-off")
    });
}

#[test]
fn four_queue_pairs_each_carry_traffic() {
    run_case(Case {
        pairs: 4,
        ..Case::new("mq4")
    });
}

#[test]
fn multi_segment_tx_layouts() {
    run_case(Case {
        tx_layouts: &[
            TxLayout::HeaderSplit,
            TxLayout::Segments(2),
            TxLayout::Segments(7),
            TxLayout::Segments(64),
        ],
        ..Case::new("segments")
    });
}

#[test]
fn memory_in_two_regions() {
    // Buffers alternate between the regions, so multi-descriptor chains straddle them.
    run_case(Case {
        split_regions: true,
        rx_layout: RxLayout::Split(2),
        tx_layouts: &[
            TxLayout::Single,
            TxLayout::Segments(5),
            TxLayout::Indirect(3),
        ],
        ..Case::new("regions")
    });
}

#[test]
fn without_mrg_rxbuf_a_frame_too_big_for_the_buffer_is_dropped() {
    let (echo, mut drv) = connect_offering("nomrg-small", bits::VERSION_1);
    refill_rx(&mut drv, 0, 4, 2048, RxLayout::Single);
    let hdr = drv.zero_hdr();
    let f = frame(4000, 1);
    send_to_rx_drop(&echo, &mut drv, &hdr, &f, DropReason::TooLong, 1);
    // The buffer was not consumed: the next frame that fits takes it.
    assert_eq!(drv.in_flight(0, true), 4);
    let small = vec![frame(1514, 2)];
    round_trip_plain(&mut drv, 0, &small);
    assert_no_violations(&drv);
    let c = echo.stop();
    assert_rx_drop_counts(&c[0], (2, 4000 + 1514), (1, 1514), DropReason::TooLong, 1);
}

#[test]
fn ring_indices_wrap_past_65536() {
    // A 64-entry ring and more than 2^16 frames: every index wraps, the ring many times.
    const FRAMES: usize = 66_000;
    const BATCH: usize = 32;
    let echo = Echo::server("wrap", |_| {});
    let mut drv = echo.connect(DriverOpts {
        queue_size: 64,
        ..DriverOpts::default()
    });
    let mut tally = Tally::default();
    let mut batch = 0;
    while (tally.frames as usize) < FRAMES {
        refill_rx(&mut drv, 0, 64, 128, RxLayout::Single);
        let frames: Vec<Vec<u8>> = (0..BATCH)
            .map(|i| frame(60 + i, seed(0, batch, i)))
            .collect();
        round_trip_tallied(&mut drv, 0, &frames, &mut tally);
        batch += 1;
    }
    let total = tally.frames as usize;
    assert_eq!(drv.used_idx(0, false).unwrap(), (total % 65536) as u16);
    assert_eq!(drv.used_idx(0, true).unwrap(), (total % 65536) as u16);
    stop_clean(echo, &drv, tally, "wrap");
}

#[test]
fn mrg_rxbuf_a_frame_bigger_than_the_posted_buffers_leaves_them_posted() {
    let echo = Echo::server("mrg-rollback", |_| {});
    let mut drv = echo.connect(DriverOpts::default());
    // Two 2048-byte buffers cannot hold a 9000-byte frame: it is dropped, the buffers stay.
    refill_rx(&mut drv, 0, 2, 2048, RxLayout::Single);
    let hdr = drv.zero_hdr();
    let f = frame(9000, 1);
    send_to_rx_drop(&echo, &mut drv, &hdr, &f, DropReason::NoBuffers, 1);
    assert!(drv.recv_frames(0).is_empty());
    assert_eq!(drv.in_flight(0, true), 2);
    let fits = vec![frame(3000, 2)];
    let got = round_trip_plain(&mut drv, 0, &fits);
    assert_eq!(got[0].num_buffers, 2);
    assert_no_violations(&drv);
    let c = echo.stop();
    assert_rx_drop_counts(&c[0], (2, 12_000), (1, 3000), DropReason::NoBuffers, 1);
}

#[test]
fn mrg_rxbuf_frame_over_many_multi_descriptor_chains() {
    // Spec-legal receive buffers: 512 bytes in 8 descriptors each, on a 1024-entry ring. A
    // 30000-byte frame takes 59 of them (within MAX_RX_CHAINS, 256), 472 segments in all.
    let echo = Echo::server("mrg-many-segs", |_| {});
    let mut drv = echo.connect(DriverOpts {
        queue_size: 1024,
        ..DriverOpts::default()
    });
    refill_rx(&mut drv, 0, 100, 512, RxLayout::Split(8));
    let f = frame(30_000, 1);
    let hdr = drv.zero_hdr();
    drv.send_frame(0, &hdr, &f, TxLayout::Single).unwrap();
    drv.kick_tx(0);
    assert_eq!(drv.tx_completions_until(0, 1, TIMEOUT).len(), 1);
    wait_until("the frame delivered or dropped", || {
        let c = echo.counters(0).rx;
        c.packets + c.dropped() > 0
    });
    let c = echo.counters(0).rx;
    assert_eq!(
        c.drops_for(DropReason::TooManySegments),
        0,
        "a frame over valid mergeable buffers was dropped as too_many_segments"
    );
    let got = drv.recv_frames_until(0, 1, TIMEOUT);
    assert_no_violations(&drv);
    assert_eq!(got.len(), 1);
    assert!(got[0].data == echoed(&f));
    assert_eq!(
        usize::from(got[0].num_buffers),
        (12 + 30_000usize).div_ceil(512)
    );
    assert_eq!(drv.in_flight(0, true), 100 - 59);
    let c = echo.stop();
    assert_clean_counts(
        &c[0],
        Tally {
            frames: 1,
            bytes: 30_000,
        },
        "many segments",
    );
}

#[test]
fn largest_frame_passes_one_byte_more_is_too_long() {
    // No MTU: frames up to MAX_FRAME_LEN (a 64 KiB GSO frame plus headers) are accepted.
    const MAX: usize = 65_550;
    let echo = Echo::server("max-frame", |_| {});
    let mut drv = echo.connect(DriverOpts::default());
    refill_rx(&mut drv, 0, 40, 2048, RxLayout::Single);
    let frames = vec![frame(MAX, 1)];
    let got = round_trip_plain(&mut drv, 0, &frames);
    assert_eq!(usize::from(got[0].num_buffers), (12 + MAX).div_ceil(2048));
    let hdr = drv.zero_hdr();
    expect_tx_drop(
        &echo,
        &mut drv,
        &hdr,
        &frame(MAX + 1, 2),
        TxLayout::Single,
        DropReason::TooLong,
    );
    assert_no_violations(&drv);
    let c = echo.stop();
    assert_eq!((c[0].tx.packets, c[0].tx.bytes), (1, MAX as u64));
    assert_eq!((c[0].rx.packets, c[0].rx.bytes), (1, MAX as u64));
    assert_eq!(c[0].tx.drops_for(DropReason::TooLong), 1);
    assert_eq!(c[0].tx.dropped() + c[0].rx.dropped(), 1);
}

#[test]
fn extreme_queue_sizes() {
    for size in [1u16, 2, 32768] {
        let echo = Echo::server(&format!("qsize{size}"), |_| {});
        let mut drv = echo.connect(DriverOpts {
            queue_size: size,
            features: bits::VERSION_1 | bits::EVENT_IDX,
            mem_size: 64 << 20,
            ..DriverOpts::default()
        });
        let mut tally = Tally::default();
        // One frame at a time, more than the ring holds in total.
        for i in 0..3 * usize::from(size.min(64)) {
            refill_rx(
                &mut drv,
                0,
                usize::from(size.min(16)),
                9216,
                RxLayout::Single,
            );
            let frames = vec![frame(SIZES[i % SIZES.len()], seed(0, 0, i))];
            round_trip_tallied(&mut drv, 0, &frames, &mut tally);
        }
        assert_no_violations(&drv);
        let c = echo.stop();
        assert_clean_counts(&c[0], tally, &format!("queue size {size}"));
    }
}

#[test]
fn event_idx_used_event_suppresses_interrupts() {
    let (echo, mut drv) = with_rx_buffers("used-event");
    assert_ne!(drv.acked_features() & bits::EVENT_IDX, 0);
    let mut tally = Tally::default();
    let first = vec![frame(60, 1)];
    round_trip_tallied(&mut drv, 0, &first, &mut tally);
    // Counted: its interrupt was sent too.
    echo.settle(0, 1, 1);

    // Ask for an interrupt only once used.idx passes cur + 4 (the fifth frame from now).
    let cur = drv.used_idx(0, true).unwrap();
    drv.set_used_event(0, true, cur.wrapping_add(4)).unwrap();
    drv.take_call(0, true);
    let notified = echo.counters(0).rx.notifications;
    let hdr = drv.zero_hdr();
    let frames: Vec<Vec<u8>> = (0..5).map(|i| frame(100 + i, seed(0, 1, i))).collect();
    for (n, f) in frames.iter().enumerate() {
        drv.send_frame(0, &hdr, f, TxLayout::Single).unwrap();
        drv.kick_tx(0);
        assert_eq!(drv.tx_completions_until(0, 1, TIMEOUT).len(), 1);
        wait_until("the frame in the used ring", || {
            drv.used_idx(0, true).unwrap() == cur.wrapping_add(n as u16 + 1)
        });
        // Counted, so its interrupt, if any, was sent (the count comes after the signal).
        echo.settle(0, tally.frames + n as u64 + 1, tally.frames + n as u64 + 1);
        let called = drv.take_call(0, true);
        if n < 4 {
            assert!(!called, "interrupt before used_event (frame {n})");
        } else {
            assert!(called, "no interrupt at used_event");
        }
    }
    // Exactly one interrupt for the five frames.
    wait_until("the interrupt counted", || {
        echo.counters(0).rx.notifications > notified
    });
    echo.sync();
    assert_eq!(echo.counters(0).rx.notifications, notified + 1);
    let got = drv.recv_frames(0);
    assert_eq!(got.len(), 5);
    for (g, f) in got.iter().zip(&frames) {
        assert!(g.data == echoed(f));
    }
    tally.add(&frames);
    stop_clean(echo, &drv, tally, "used_event");
}

/// A frontend may set a vring's call eventfd after the ring runs (QEMU sends
/// `SET_VRING_KICK` first) or take it away: frames delivered without one
/// interrupt the guest once it arrives, or a guest waiting for them would
/// never refill its buffers (a migrated guest did not, under load).
#[test]
fn frames_delivered_without_a_call_eventfd_are_signalled_when_it_arrives() {
    let (echo, mut drv) = with_rx_buffers("call-late");
    let mut tally = Tally::default();
    round_trip_tallied(&mut drv, 0, &[frame(60, 1)], &mut tally);
    echo.settle(0, 1, 1);
    let rx = drv.vring_index(0, true).unwrap();
    drv.set_vring_call(rx, false).unwrap();
    drv.take_call(0, true);
    let notified = echo.counters(0).rx.notifications;
    let cur = drv.used_idx(0, true).unwrap();
    let f = frame(100, seed(0, 1, 0));
    let hdr = drv.zero_hdr();
    drv.send_frame(0, &hdr, &f, TxLayout::Single).unwrap();
    drv.kick_tx(0);
    assert_eq!(drv.tx_completions_until(0, 1, TIMEOUT).len(), 1);
    wait_until("the frame in the used ring", || {
        drv.used_idx(0, true).unwrap() == cur.wrapping_add(1)
    });
    echo.settle(0, 2, 2);
    assert!(!drv.take_call(0, true), "a signal on a detached eventfd");
    echo.sync();
    assert_eq!(echo.counters(0).rx.notifications, notified);
    drv.set_vring_call(rx, true).unwrap();
    wait_until("the interrupt on the eventfd set afterwards", || {
        drv.take_call(0, true)
    });
    echo.sync();
    assert_eq!(echo.counters(0).rx.notifications, notified + 1);
    let got = drv.recv_frames(0);
    assert_eq!(got.len(), 1);
    assert!(got[0].data == echoed(&f));
    tally.add(std::slice::from_ref(&f));
    // Interrupts go on as before.
    round_trip_tallied(&mut drv, 0, &[frame(80, 2)], &mut tally);
    wait_until("the next interrupt", || {
        echo.counters(0).rx.notifications > notified + 1
    });
    stop_clean(echo, &drv, tally, "call-late");
}

#[test]
fn no_interrupt_flag_suppresses_interrupts_without_event_idx() {
    let (echo, mut drv) = connect_offering("no-interrupt", DEFAULT_FEATURES & !bits::EVENT_IDX);
    refill_rx(&mut drv, 0, 64, 2048, RxLayout::Single);
    let mut tally = Tally::default();
    drv.set_no_interrupt(0, true, true).unwrap();
    drv.take_call(0, true);
    let notified = echo.counters(0).rx.notifications;
    let frames: Vec<Vec<u8>> = (0..8).map(|i| frame(200 + i, seed(0, 0, i))).collect();
    // round_trip polls the used ring, so it does not need the interrupts.
    round_trip_tallied(&mut drv, 0, &frames, &mut tally);
    let c = echo.settle(0, 8, 8);
    assert!(
        !drv.take_call(0, true),
        "interrupt with VRING_AVAIL_F_NO_INTERRUPT"
    );
    echo.sync();
    assert_eq!(c.rx.notifications, notified);
    assert_eq!(echo.counters(0).rx.notifications, notified);
    drv.set_no_interrupt(0, true, false).unwrap();
    round_trip_plain(&mut drv, 0, &frames[..1]);
    tally.add(&frames[..1]);
    // (round_trip itself takes the interrupt off the call eventfd: look at the counter.)
    wait_until("an interrupt without VRING_AVAIL_F_NO_INTERRUPT", || {
        echo.counters(0).rx.notifications > notified
    });
    stop_clean(echo, &drv, tally, "no_interrupt");
}
