// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Disconnect and reconnect, stop and resume: the connection lifecycle keeps the rings
//! where they were and serves the next frontend.

use std::io::ErrorKind;
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::{Duration, Instant};

use vhost::vhost_user::VhostUserFrontend;
use vhost::{VhostBackend, VhostUserMemoryRegionInfo};
use vhost_net_backend::test_utils::{DriverOpts, RxLayout, TestDriver, TxLayout};
use vhost_net_backend::{Backoff, DropReason, Port, PortConfig, PortError, SocketRole};
use vm_memory::GuestMemoryBackend;

use crate::harness::*;

#[test]
fn disconnect_then_a_new_driver_is_served() {
    let (echo, drv, mut tally) = serving("reconnect-new", DriverOpts::default());
    assert_no_violations(&drv);
    drv.disconnect();
    wait_until("the port to notice the disconnect", || {
        !echo.port().is_connected()
    });
    assert_eq!(echo.port().acked_features(), 0);

    let mut drv = echo.connect(DriverOpts::default());
    assert_eq!(echo.port().connections(), 2);
    traffic_flows(&mut drv, 1, 1, &mut tally);
    // A fresh device: the new rings started from 0.
    assert_eq!(drv.used_idx(0, false).unwrap(), 2);
    stop_clean(echo, &drv, tally[0], "two connections");
}

#[test]
fn reconnect_resumes_the_rings_where_they_were() {
    let echo = Echo::server("reconnect-keep", |cfg| cfg.queue_pairs = 2);
    let opts = two_pairs();
    let mut drv = echo.connect(opts);
    let mut tally = [Tally::default(); 2];
    for qp in 0..2 {
        refill_rx(&mut drv, qp, 40, 2048, RxLayout::Single);
        let frames: Vec<Vec<u8>> = (0..10).map(|i| frame(100 + i, seed(qp, 0, i))).collect();
        round_trip_tallied(&mut drv, qp, &frames, &mut tally[usize::from(qp)]);
    }
    // 30 receive buffers per pair are still posted across the reconnect.
    drv.reconnect(echo.socket()).expect("reconnect");
    echo.check_features(&drv);
    assert_eq!(echo.port().connections(), 2);
    for vring in 0..4 {
        drv.kick_raw(vring).expect("kick");
    }
    for qp in 0..2 {
        assert_eq!(drv.in_flight(qp, true), 30);
        let frames: Vec<Vec<u8>> = (0..10).map(|i| frame(200 + i, seed(qp, 1, i))).collect();
        round_trip_tallied(&mut drv, qp, &frames, &mut tally[usize::from(qp)]);
        // The indices carried over: 20 used on each ring, no buffer skipped or reused.
        assert_eq!(drv.used_idx(qp, false).unwrap(), 20);
        assert_eq!(drv.used_idx(qp, true).unwrap(), 20);
        assert_eq!(drv.in_flight(qp, true), 20);
    }
    let tx1 = drv.vring_index(1, false).unwrap();
    assert_eq!(drv.get_vring_base(tx1).expect("GET_VRING_BASE"), 20);
    assert_no_violations(&drv);
    let c = echo.stop();
    for qp in 0..2 {
        assert_clean_counts(&c[qp], tally[qp], "across reconnect");
    }
}

#[test]
fn server_socket_lifecycle() {
    let dir = TempDir::new("socket-life");
    let path = dir.path().join("sock");
    // A socket file left by a dead process is replaced.
    drop(UnixListener::bind(&path).expect("bind"));
    assert!(path.exists());
    let echo = Echo::start(
        PortConfig::new("socket-life", &path),
        TempDir::new("unused"),
    );
    // A live one is not taken over.
    let err = Port::new(PortConfig::new("intruder", &path)).expect_err("socket in use");
    assert!(matches!(err, PortError::SocketInUse(_)), "{err:?}");
    // The failed attempt left the first port serving.
    let mut drv = echo.connect(DriverOpts::default());
    let mut tally = [Tally::default()];
    traffic_flows(&mut drv, 1, 0, &mut tally);
    drop(drv);
    echo.stop();
    assert!(!path.exists(), "the socket is removed with the port");
    // A path that is not a socket is refused.
    std::fs::write(&path, b"not a socket").unwrap();
    let err = Port::new(PortConfig::new("file", &path)).expect_err("not a socket");
    assert!(matches!(err, PortError::NotASocket(_)), "{err:?}");
}

/// Accepts one connection within [`TIMEOUT`].
fn accept(listener: &UnixListener) -> UnixStream {
    listener.set_nonblocking(true).expect("nonblocking");
    let deadline = Instant::now() + TIMEOUT;
    loop {
        match listener.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false).expect("blocking");
                return s;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                assert!(Instant::now() < deadline, "the port did not connect");
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => panic!("accept: {e}"),
        }
    }
}

#[test]
fn client_role_connects_and_reconnects_with_backoff() {
    let dir = TempDir::new("client");
    let path = dir.path().join("sock");
    let mut cfg = PortConfig::new("client", &path);
    cfg.role = SocketRole::Client;
    cfg.backoff = Backoff {
        initial: Duration::from_millis(10),
        max: Duration::from_millis(40),
    };
    // The port starts before the frontend's socket exists, fails to connect (it says so) and
    // retries.
    let log = LogCapture::install();
    let echo = Echo::start(cfg, dir);
    let failed = format!("port client: cannot connect to {}", path.display());
    wait_until("the port's failed connection attempt", || {
        log.contains(&failed)
    });
    assert!(!echo.port().is_connected());
    assert_eq!(echo.port().connections(), 0);
    let listener = UnixListener::bind(&path).expect("bind");
    let mut tally = [Tally::default()];

    let mut drv =
        TestDriver::from_stream(accept(&listener), DriverOpts::default()).expect("bring-up");
    echo.check_features(&drv);
    traffic_flows(&mut drv, 1, 0, &mut tally);
    assert_no_violations(&drv);
    drop(drv);

    // The frontend went away; the port connects again and serves the new frontend.
    let mut drv =
        TestDriver::from_stream(accept(&listener), DriverOpts::default()).expect("bring-up");
    echo.check_features(&drv);
    assert_eq!(echo.port().connections(), 2);
    traffic_flows(&mut drv, 1, 1, &mut tally);
    stop_clean(echo, &drv, tally[0], "client role");
}

#[test]
fn abrupt_disconnects_with_traffic_in_flight() {
    let echo = Echo::server("abrupt", |cfg| cfg.queue_pairs = 2);
    let opts = two_pairs();
    let mut sent = 0u64;
    for round in 0..20 {
        let mut drv = echo.connect(opts.clone());
        for qp in 0..2 {
            refill_rx(&mut drv, qp, 16, 2048, RxLayout::Single);
            let hdr = drv.zero_hdr();
            for i in 0..32 {
                drv.send_frame(
                    qp,
                    &hdr,
                    &frame(60 + 97 * i, seed(qp, round, i)),
                    TxLayout::Single,
                )
                .unwrap();
                sent += 1;
            }
            drv.kick_tx(qp);
        }
        // Gone mid-burst, buffers in flight.
        drop(drv);
    }
    let mut tally = [Tally::default(); 2];
    let mut drv = echo.connect(opts);
    traffic_flows(&mut drv, 2, 99, &mut tally);
    assert_no_violations(&drv);
    assert_eq!(echo.port().connections(), 21);
    let c = echo.stop();
    for (qp, c) in c.iter().enumerate() {
        // Whatever was in flight was either echoed or dropped for lack of a running RX ring.
        assert!(
            c.rx.packets + c.rx.dropped() <= c.tx.packets,
            "qp {qp}: {c:?}"
        );
        assert_eq!(
            c.rx.dropped(),
            c.rx.drops_for(DropReason::NoBuffers),
            "{c:?}"
        );
        assert_eq!(c.tx.dropped(), 0, "{c:?}");
        assert!(c.tx.packets >= tally[qp].frames);
    }
    assert!(c.iter().map(|c| c.tx.packets).sum::<u64>() <= sent + 4);
}

#[test]
fn memory_removed_under_buffers_in_flight() {
    let (echo, mut drv, mut tally) = serving("rem-mem", regions_added_one_by_one());
    let second = drv.memory().iter().nth(1).expect("two regions");
    let region = VhostUserMemoryRegionInfo::from_guest_region(second).unwrap();
    // Buffers alternate between the regions; the frontend takes the second one away (the
    // rings live in the first).
    refill_rx(&mut drv, 0, 16, 2048, RxLayout::Single);
    drv.frontend()
        .remove_mem_region(&region)
        .expect("REM_MEM_REG");
    let hdr = drv.zero_hdr();
    let sent: Vec<Vec<u8>> = (0..8).map(|i| frame(1000, seed(0, 1, i))).collect();
    for f in &sent {
        drv.send_frame(0, &hdr, f, TxLayout::Single).unwrap();
    }
    drv.kick_tx(0);
    // Every chain comes back, whatever happened to it.
    assert_eq!(drv.tx_completions_until(0, 8, TIMEOUT).len(), 8);
    wait_until("the 8 frames counted", || {
        let c = echo.counters(0).tx;
        c.packets + c.dropped() == tally[0].frames + 8
    });
    // The driver's allocator alternates buffers between the two regions, so half of the TX
    // chains (4) point into the removed region and are dropped; the other 4 are echoed into
    // the first 4 receive buffers, of which half (2) lie in the removed region.
    let c = echo.counters(0);
    assert_eq!(c.tx.drops_for(DropReason::BadAddress), 4, "{c:?}");
    assert_eq!(c.tx.dropped(), 4, "{c:?}");
    assert_eq!(c.tx.packets, tally[0].frames + 4, "{c:?}");
    // Receive buffers in the removed region went back unwritten (used length 0), and the
    // driver notices: one element per echoed frame, two of them empty.
    let got = drv.recv_frames_until(0, 4, TIMEOUT);
    let (empty, written): (Vec<_>, Vec<_>) = got.iter().partition(|f| f.used[0].1 == 0);
    assert_eq!(
        (written.len(), empty.len()),
        (2, 2),
        "used elements: {got:?}"
    );
    let mut rest = sent.iter();
    for f in &written {
        assert!(
            rest.any(|s| f.data == echoed(s)),
            "a delivered frame is none of the sent ones, in order"
        );
    }
    let mut want = Vec::new();
    for f in &empty {
        let id = f.used[0].0;
        want.push(format!(
            "vring 0: used id {id} len 0 is shorter than the {}-byte header",
            drv.hdr_len()
        ));
        want.push(format!("vring 0: used id {id} has num_buffers 0"));
    }
    assert_eq!(drv.take_violations(), want);
    let c = echo.settle(0, tally[0].frames + 8, tally[0].frames + 4);
    assert_eq!(c.rx.packets, tally[0].frames + 2, "{c:?}");
    assert_eq!(c.rx.drops_for(DropReason::BadAddress), 2, "{c:?}");
    tally[0].add(&[sent[0].clone(), sent[0].clone()]);
    drv.frontend().add_mem_region(&region).expect("ADD_MEM_REG");
    traffic_flows(&mut drv, 1, 2, &mut tally);
    assert_no_violations(&drv);
    drop(drv);
    let c = echo.stop();
    assert_eq!(c[0].rx.dropped(), 2, "{c:?}");
    assert_eq!(c[0].rx.drops_for(DropReason::BadAddress), 2, "{c:?}");
    assert_eq!(c[0].tx.dropped(), 4, "{c:?}");
    // Exactly the traffic that was delivered, besides the drops.
    assert_eq!(
        (c[0].rx.packets, c[0].rx.bytes),
        (tally[0].frames, tally[0].bytes),
        "{c:?}"
    );
}

// ===== stop and resume =====

#[test]
fn get_vring_base_stops_the_ring_and_resume_continues() {
    let (echo, mut drv) = with_rx_buffers("vring-base");
    let mut tally = Tally::default();
    let first: Vec<Vec<u8>> = (0..10)
        .map(|i| frame(60 + 100 * i, seed(0, 0, i)))
        .collect();
    round_trip_tallied(&mut drv, 0, &first, &mut tally);

    let (rx, tx) = (
        drv.vring_index(0, true).unwrap(),
        drv.vring_index(0, false).unwrap(),
    );
    // Stop TX first, so nothing is echoed into a stopped RX ring.
    let tx_base = drv.get_vring_base(tx).expect("GET_VRING_BASE tx");
    assert_eq!(tx_base, 10, "tx base: the frames consumed");
    assert_eq!(u32::from(drv.avail_idx(0, false).unwrap()), tx_base);
    let rx_base = drv.get_vring_base(rx).expect("GET_VRING_BASE rx");
    assert_eq!(rx_base, 10, "rx base: the buffers consumed");
    assert_eq!(u32::from(drv.used_idx(0, true).unwrap()), rx_base);

    // A stopped ring is not touched.
    let queued: Vec<Vec<u8>> = (0..5).map(|i| frame(1514, seed(0, 1, i))).collect();
    let hdr = drv.zero_hdr();
    for f in &queued {
        drv.send_frame(0, &hdr, f, TxLayout::Single).expect("send");
    }
    drv.kick_raw(tx).expect("kick");
    echo.sync();
    assert!(drv.tx_completions(0).is_empty(), "a stopped ring was used");
    assert!(drv.recv_frames(0).is_empty());
    assert_eq!(echo.counters(0).tx.packets, 10);

    drv.resume_vring(rx, rx_base as u16).expect("resume rx");
    drv.resume_vring(tx, tx_base as u16).expect("resume tx");
    drv.kick_raw(tx).expect("kick");
    let got = drv.recv_frames_until(0, queued.len(), TIMEOUT);
    assert_eq!(got.len(), queued.len());
    for (g, f) in got.iter().zip(&queued) {
        assert!(g.data == echoed(f), "frame queued while stopped differs");
    }
    assert_eq!(drv.tx_completions_until(0, 5, TIMEOUT).len(), 5);
    tally.add(&queued);

    let more: Vec<Vec<u8>> = (0..10).map(|i| frame(4000, seed(0, 2, i))).collect();
    round_trip_tallied(&mut drv, 0, &more, &mut tally);
    assert_eq!(drv.get_vring_base(tx).expect("GET_VRING_BASE"), 25);
    stop_clean(echo, &drv, tally, "stop and resume");
}

#[test]
fn vring_disable_and_enable_keeps_the_indices() {
    let (echo, mut drv) = with_rx_buffers("enable");
    let mut tally = Tally::default();
    let first: Vec<Vec<u8>> = (0..7).map(|i| frame(90 + i, seed(0, 0, i))).collect();
    round_trip_tallied(&mut drv, 0, &first, &mut tally);
    drv.set_pair_enabled(0, false).expect("SET_VRING_ENABLE 0");
    let queued: Vec<Vec<u8>> = (0..3).map(|i| frame(1514, seed(0, 1, i))).collect();
    let hdr = drv.zero_hdr();
    for f in &queued {
        drv.send_frame(0, &hdr, f, TxLayout::Single).unwrap();
    }
    drv.kick_raw(drv.vring_index(0, false).unwrap()).unwrap();
    echo.sync();
    assert!(drv.tx_completions(0).is_empty(), "a disabled ring was used");
    assert_eq!(echo.counters(0).tx.packets, 7, "a disabled ring was read");
    drv.set_pair_enabled(0, true).expect("SET_VRING_ENABLE 1");
    let got = drv.recv_frames_until(0, queued.len(), TIMEOUT);
    assert_eq!(got.len(), queued.len());
    for (g, f) in got.iter().zip(&queued) {
        assert!(g.data == echoed(f));
    }
    assert_eq!(drv.tx_completions_until(0, 3, TIMEOUT).len(), 3);
    tally.add(&queued);
    round_trip_tallied(&mut drv, 0, &first, &mut tally);
    assert_eq!(drv.used_idx(0, false).unwrap(), 17);
    assert_eq!(drv.used_idx(0, true).unwrap(), 17);
    stop_clean(echo, &drv, tally, "disable and enable");
}

#[test]
fn a_second_frontend_waits_for_the_first_to_leave() {
    let (echo, mut first, mut tally) = serving("two-frontends", DriverOpts::default());
    // The second frontend's connection is made (queued on the listening socket) before the
    // checks below, and its bring-up (GET_FEATURES first) is under way.
    let stream = UnixStream::connect(echo.socket()).expect("second frontend connects");
    let second = std::thread::spawn(move || TestDriver::from_stream(stream, DriverOpts::default()));
    // The port serves one frontend at a time: the first is still served, the second waits.
    traffic_flows(&mut first, 1, 1, &mut tally);
    assert_no_violations(&first);
    assert_eq!(echo.port().connections(), 1);
    assert!(!second.is_finished(), "the second frontend was answered");
    drop(first);
    let mut second = second
        .join()
        .expect("connect thread")
        .expect("the second frontend is served once the first left");
    echo.check_features(&second);
    assert_eq!(echo.port().connections(), 2);
    traffic_flows(&mut second, 1, 2, &mut tally);
    assert_no_violations(&second);
    let c = echo.stop();
    assert_clean_counts(&c[0], tally[0], "two frontends");
}

#[test]
fn set_mem_table_again_while_running() {
    let echo = Echo::server("mem-table-again", |_| {});
    let mut drv = echo.connect(DriverOpts {
        split_regions: true,
        ..DriverOpts::default()
    });
    let mut tally = [Tally::default()];
    traffic_flows(&mut drv, 1, 0, &mut tally);
    // The same memory again (as QEMU sends after a hotplug without memory slots): the rings
    // move to the new mappings and keep their indices.
    let regions: Vec<VhostUserMemoryRegionInfo> = drv
        .memory()
        .iter()
        .map(|r| VhostUserMemoryRegionInfo::from_guest_region(r).unwrap())
        .collect();
    drv.frontend()
        .set_mem_table(&regions)
        .expect("SET_MEM_TABLE");
    traffic_flows(&mut drv, 1, 1, &mut tally);
    assert_eq!(drv.used_idx(0, false).unwrap(), 4);
    stop_clean(echo, &drv, tally[0], "mem table again");
}
