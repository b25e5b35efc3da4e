// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Offloads: virtio-net headers travel with the frame, offloads the guest did not ack are
//! dropped; and the packed-ring feature offered next to split rings.

use vhost_net_backend::device::bits;
use vhost_net_backend::net_hdr;
use vhost_net_backend::test_utils::{
    encode_hdr, DriverOpts, RxLayout, TxLayout, VirtioNetHdr, DEFAULT_FEATURES,
};
use vhost_net_backend::{DropReason, Offloads};

use crate::harness::*;

const OFFLOAD_FEATURES: u64 = DEFAULT_FEATURES
    | bits::CSUM
    | bits::GUEST_CSUM
    | bits::HOST_TSO4
    | bits::GUEST_TSO4
    | bits::HOST_TSO6
    | bits::GUEST_TSO6
    | bits::HOST_ECN
    | bits::GUEST_ECN;

/// A partial TCP checksum over IPv4 (no options): the TCP header at 34.
fn csum_tcp4() -> VirtioNetHdr {
    VirtioNetHdr {
        flags: net_hdr::F_NEEDS_CSUM,
        csum_start: 34,
        csum_offset: 16,
        ..VirtioNetHdr::default()
    }
}

/// TCPv4 segmentation with an MSS of 1448 on top of [`csum_tcp4`].
fn tso_tcp4() -> VirtioNetHdr {
    VirtioNetHdr {
        gso_type: net_hdr::GSO_TCPV4,
        hdr_len: 54,
        gso_size: 1448,
        ..csum_tcp4()
    }
}

#[test]
fn offload_headers_travel_with_the_frame() {
    let echo = Echo::server("offload", |cfg| cfg.offloads = Offloads::checksum_and_tso());
    let mut drv = echo.connect(DriverOpts {
        features: OFFLOAD_FEATURES,
        ..DriverOpts::default()
    });
    assert_eq!(
        drv.acked_features() & OFFLOAD_FEATURES,
        OFFLOAD_FEATURES & drv.offered_features()
    );
    // All of them (MQ aside: one pair).
    assert_eq!(
        drv.acked_features() & OFFLOAD_FEATURES,
        OFFLOAD_FEATURES & !bits::MQ
    );
    let (csum, tso4) = (csum_tcp4(), tso_tcp4());
    let tso6_ecn = VirtioNetHdr {
        flags: net_hdr::F_NEEDS_CSUM,
        gso_type: net_hdr::GSO_TCPV6 | net_hdr::GSO_ECN,
        hdr_len: 74,
        gso_size: 1428,
        csum_start: 54,
        csum_offset: 16,
        num_buffers: 0,
    };
    let mut tally = Tally::default();
    let cases = [
        (csum, 1514),
        (tso4, 9000),
        (tso4, 30_000),
        (tso6_ecn, 20_000),
        (VirtioNetHdr::default(), 1514),
    ];
    for (i, (hdr, len)) in cases.into_iter().enumerate() {
        refill_rx(&mut drv, 0, 64, 2048, RxLayout::Single);
        let frames = vec![frame(len, seed(0, i, 0))];
        let got = round_trip(&mut drv, 0, &hdr, &frames, TxLayout::HeaderSplit);
        assert_eq!(usize::from(got[0].num_buffers), (12 + len).div_ceil(2048));
        tally.add(&frames);
    }
    stop_clean(echo, &drv, tally, "offloads");
}

#[test]
fn offload_the_guest_did_not_ack_is_dropped() {
    let echo = Echo::server("offload-unacked", |cfg| {
        cfg.offloads = Offloads::checksum_and_tso()
    });
    // The guest may send partial checksums and TSO frames, but takes neither.
    let mut drv = echo.connect(DriverOpts {
        features: DEFAULT_FEATURES | bits::CSUM | bits::HOST_TSO4,
        ..DriverOpts::default()
    });
    assert_eq!(
        drv.acked_features() & (bits::GUEST_CSUM | bits::GUEST_TSO4),
        0
    );
    refill_rx(&mut drv, 0, 32, 2048, RxLayout::Single);
    let (csum, tso4) = (csum_tcp4(), tso_tcp4());
    for (n, (hdr, len)) in [(csum, 1514), (tso4, 9000)].into_iter().enumerate() {
        let b = encode_hdr(&hdr, drv.hdr_len());
        let f = frame(len, n as u32);
        send_to_rx_drop(
            &echo,
            &mut drv,
            &b,
            &f,
            DropReason::OffloadUnsupported,
            n as u64 + 1,
        );
        assert!(drv.recv_frames(0).is_empty());
    }
    let plain = vec![frame(1514, 9)];
    round_trip_plain(&mut drv, 0, &plain);
    assert_no_violations(&drv);
    let c = echo.stop();
    assert_eq!(c[0].tx.dropped(), 0);
    assert_rx_drop_counts(
        &c[0],
        (3, 1514 + 9000 + 1514),
        (1, 1514),
        DropReason::OffloadUnsupported,
        2,
    );
}

// ===== packed rings =====

#[test]
fn packed_rings_are_offered_the_driver_uses_split_rings() {
    let (echo, mut drv) = connect_offering(
        "packed-offer",
        DEFAULT_FEATURES | bits::RING_PACKED | bits::IN_ORDER,
    );
    assert_ne!(
        drv.offered_features() & bits::RING_PACKED,
        0,
        "RING_PACKED offered"
    );
    assert_ne!(
        drv.offered_features() & bits::IN_ORDER,
        0,
        "IN_ORDER offered"
    );
    assert_eq!(drv.acked_features() & bits::RING_PACKED, 0);
    assert_eq!(echo.port().acked_features() & bits::RING_PACKED, 0);
    assert_ne!(echo.port().acked_features() & bits::IN_ORDER, 0);
    // Split rings with IN_ORDER: round_trip checks the TX chains come back in order.
    let mut tally = [Tally::default()];
    refill_rx(&mut drv, 0, 64, 2048, RxLayout::Single);
    let frames: Vec<Vec<u8>> = (0..32).map(|i| frame(60 + 40 * i, seed(0, 0, i))).collect();
    round_trip_tallied(&mut drv, 0, &frames, &mut tally[0]);
    stop_clean(echo, &drv, tally[0], "in order");
}
