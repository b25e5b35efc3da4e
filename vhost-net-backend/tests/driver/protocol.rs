// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The vhost-user protocol: refused features, garbage on the socket, queue counts and
//! memory slots.

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixStream;
use std::path::Path;

use vhost::vhost_user::VhostUserFrontend;
use vhost::{VhostBackend, VhostUserMemoryRegionInfo};
use vhost_net_backend::device::bits;
use vhost_net_backend::test_utils::{
    DriverError, DriverOpts, RxLayout, TestDriver, TxLayout, VirtioNetHdr,
};

use crate::harness::*;

#[test]
fn features_not_offered_are_refused() {
    let echo = Echo::server("proto-features", |_| {});
    let mut tally = [Tally::default()];

    // With REPLY_ACK: a NACK (and/or a hang-up).
    let mut drv = echo.connect(DriverOpts::default());
    assert_eq!(drv.offered_features() & bits::MQ, 0, "MQ with one pair");
    let bad = drv.acked_features() | bits::MQ;
    let res = drv.frontend().set_features(bad);
    assert!(
        res.is_err(),
        "SET_FEATURES with MQ not offered was accepted"
    );
    drop(drv);
    wait_until("the port to drop the connection", || {
        !echo.port().is_connected()
    });
    let mut drv = echo.connect(DriverOpts::default());
    traffic_flows(&mut drv, 1, 0, &mut tally);
    assert_no_violations(&drv);
    drop(drv);

    // Without REPLY_ACK there is no NACK to send: the backend hangs up.
    wait_until("disconnect", || !echo.port().is_connected());
    let mut drv = echo.connect(DriverOpts {
        protocol_features: vhost::vhost_user::message::VhostUserProtocolFeatures::empty(),
        ..DriverOpts::default()
    });
    let bad = drv.acked_features() | (1 << 63);
    // Nothing to wait for: the request goes out without NEED_REPLY.
    drv.frontend().set_features(bad).expect("send SET_FEATURES");
    assert!(
        drv.wait_backend_hangup(TIMEOUT),
        "unoffered features accepted"
    );
    drop(drv);
    let mut drv = echo.connect(DriverOpts::default());
    traffic_flows(&mut drv, 1, 1, &mut tally);
    assert_eq!(echo.port().connections(), 4);
    stop_clean(echo, &drv, tally[0], "after refused features");
}

/// Connects, writes `bytes`, and expects the backend to close the connection.
fn expect_hangup_after(path: &Path, bytes: &[u8]) {
    let mut s = UnixStream::connect(path).expect("connect");
    s.set_read_timeout(Some(TIMEOUT)).unwrap();
    // The backend may hang up before it read everything.
    let _ = s.write_all(bytes);
    let mut buf = [0u8; 256];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => continue,
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return,
            Err(e) => panic!("no hang-up after {} garbage bytes: {e}", bytes.len()),
        }
    }
}

#[test]
fn garbage_on_the_socket_hangs_up_and_the_next_frontend_is_served() {
    let echo = Echo::server("proto-garbage", |_| {});
    let hdr = |code: u32, flags: u32, size: u32| {
        let mut b = Vec::new();
        for w in [code, flags, size] {
            b.extend_from_slice(&w.to_le_bytes());
        }
        b
    };
    let mut unknown = hdr(9999, 1, 0);
    unknown.extend_from_slice(&[0; 8]);
    let mut too_big = hdr(5, 1, 0x10_0000);
    too_big.extend_from_slice(&[0x5a; 256]);
    // SET_FEATURES with a 4-byte body instead of 8.
    let mut short_body = hdr(2, 1, 4);
    short_body.extend_from_slice(&[0; 4]);
    let garbage: Vec<Vec<u8>> = vec![
        vec![0xff; 64],
        b"GET / HTTP/1.1\r\nHost: vhu\r\n\r\n".to_vec(),
        unknown,
        hdr(1, 0, 0),
        too_big,
        short_body,
    ];
    for g in &garbage {
        expect_hangup_after(echo.socket(), g);
    }
    let mut drv = echo.connect(DriverOpts::default());
    let mut tally = [Tally::default()];
    traffic_flows(&mut drv, 1, 0, &mut tally);
    wait_until("all connections counted", || {
        echo.port().connections() == garbage.len() as u64 + 1
    });
    stop_clean(echo, &drv, tally[0], "after garbage");
}

#[test]
fn queue_num_and_mq_follow_the_pair_count() {
    for pairs in [1u16, 4] {
        let echo = Echo::server(&format!("proto-mq{pairs}"), |cfg| cfg.queue_pairs = pairs);
        let opts = DriverOpts {
            queue_pairs: pairs,
            active_pairs: pairs,
            ..DriverOpts::default()
        };
        let mut drv = echo.connect(opts.clone());
        assert_eq!(drv.queue_num(), Some(u64::from(pairs)), "GET_QUEUE_NUM");
        assert_eq!(
            drv.offered_features() & bits::MQ != 0,
            pairs > 1,
            "MQ offer"
        );
        assert_eq!(drv.acked_features() & bits::MQ != 0, pairs > 1, "MQ ack");
        let mut tally = vec![Tally::default(); usize::from(pairs)];
        traffic_flows(&mut drv, pairs, 0, &mut tally);
        drop(drv);

        // More pairs than the device has: the driver gives up; the port serves the next one.
        let err = TestDriver::connect(
            echo.socket(),
            DriverOpts {
                queue_pairs: pairs + 1,
                active_pairs: pairs + 1,
                ..DriverOpts::default()
            },
        )
        .expect_err("more pairs than offered");
        assert!(
            matches!(err, DriverError::TooManyQueuePairs { max, wanted }
                if max == u64::from(pairs) && wanted == pairs + 1),
            "{err:?}"
        );

        // Only some pairs enabled: a disabled pair's rings are not used until enabled.
        let mut drv = echo.connect(DriverOpts {
            active_pairs: 1,
            ..opts
        });
        traffic_flows(&mut drv, 1, 1, &mut tally);
        if pairs > 1 {
            let last = pairs - 1;
            refill_rx(&mut drv, last, 16, 2048, RxLayout::Single);
            let frames = vec![frame(300, seed(last, 2, 0))];
            let hdr = drv.zero_hdr();
            drv.send_frame(last, &hdr, &frames[0], TxLayout::Single)
                .unwrap();
            drv.kick_raw(drv.vring_index(last, false).unwrap()).unwrap();
            echo.sync();
            assert!(
                drv.tx_completions(last).is_empty(),
                "a disabled ring was used"
            );
            drv.set_pair_enabled(last, true).expect("SET_VRING_ENABLE");
            let got = drv.recv_frames_until(last, 1, TIMEOUT);
            assert_eq!(got.len(), 1);
            assert!(got[0].data == echoed(&frames[0]));
            assert_eq!(drv.tx_completions_until(last, 1, TIMEOUT).len(), 1);
            tally[usize::from(last)].add(&frames);
        }
        assert_eq!(echo.port().connections(), 3);
        assert_no_violations(&drv);
        let c = echo.stop();
        for (qp, (c, t)) in c.iter().zip(&tally).enumerate() {
            assert_clean_counts(c, *t, &format!("{pairs} pairs, qp {qp}"));
        }
    }
}

#[test]
fn max_mem_slots_and_add_mem_reg() {
    let echo = Echo::server("proto-memslots", |_| {});
    let mut drv = echo.connect(regions_added_one_by_one());
    assert_eq!(drv.max_mem_slots(), Some(509), "GET_MAX_MEM_SLOTS");
    let mut tally = Tally::default();
    let echo_batch = |drv: &mut TestDriver, batch: usize, tally: &mut Tally| {
        refill_rx(drv, 0, 32, 2048, RxLayout::Split(2));
        let frames: Vec<Vec<u8>> = SIZES
            .iter()
            .enumerate()
            .map(|(i, &l)| frame(l, seed(0, batch, i)))
            .collect();
        round_trip(
            drv,
            0,
            &VirtioNetHdr::default(),
            &frames,
            TxLayout::Segments(4),
        );
        tally.add(&frames);
    };
    echo_batch(&mut drv, 0, &mut tally);

    // Hot-plug six more regions while the rings run, then unplug them.
    let dir = TempDir::new("memslots-extra");
    const SIZE: u64 = 1 << 20;
    let files: Vec<File> = (0..6)
        .map(|i| {
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(dir.path().join(format!("r{i}")))
                .expect("region file");
            f.set_len(SIZE).expect("size region file");
            f
        })
        .collect();
    let regions: Vec<VhostUserMemoryRegionInfo> = files
        .iter()
        .enumerate()
        .map(|(i, f)| VhostUserMemoryRegionInfo {
            guest_phys_addr: 0x100_0000_0000 + 2 * SIZE * i as u64,
            memory_size: SIZE,
            userspace_addr: 0x5000_0000_0000 + 2 * SIZE * i as u64,
            mmap_offset: 0,
            mmap_handle: f.as_raw_fd(),
        })
        .collect();
    for r in &regions {
        drv.frontend().add_mem_region(r).expect("ADD_MEM_REG");
    }
    // A frame through the hot-plugged memory: read from the first new region, written into
    // the last one (the driver reaches them through their files, as the backend does).
    echo_through_regions(&mut drv, &files, &regions, &mut tally);
    echo_batch(&mut drv, 1, &mut tally);
    for r in &regions {
        drv.frontend().remove_mem_region(r).expect("REM_MEM_REG");
    }
    echo_batch(&mut drv, 2, &mut tally);
    stop_clean(echo, &drv, tally, "memory slots");
}

/// Echoes one frame whose TX buffer lies in the first of the hot-plugged `regions` and whose
/// RX buffer lies in the last, reading and writing them through their `files`: the port
/// must have mapped both. Pair 0's receive ring is emptied first (by echoing one frame per
/// buffer still posted), so the frame can only land in the hot-plugged buffer.
fn echo_through_regions(
    drv: &mut TestDriver,
    files: &[File],
    regions: &[VhostUserMemoryRegionInfo],
    tally: &mut Tally,
) {
    let posted = drv.in_flight(0, true);
    let fill: Vec<Vec<u8>> = (0..posted).map(|i| frame(60, seed(0, 7, i))).collect();
    round_trip_tallied(drv, 0, &fill, tally);
    assert_eq!(drv.in_flight(0, true), 0);

    let f = frame(1514, seed(0, 8, 0));
    let mut tx = drv.zero_hdr();
    tx.extend_from_slice(&f);
    let (src, dst) = (&regions[0], &regions[regions.len() - 1]);
    files[0].write_all_at(&tx, 0).expect("write the tx buffer");
    let rx_len = 2048u32;
    files[files.len() - 1]
        .write_all_at(&vec![0xee; rx_len as usize], 0)
        .expect("clear the rx buffer");
    let rx_head = drv.reserve_desc(0, true).expect("rx descriptor");
    drv.write_desc(
        0,
        true,
        rx_head,
        dst.guest_phys_addr,
        rx_len,
        DESC_F_WRITE,
        0,
    )
    .expect("write rx desc");
    drv.push_avail(0, true, rx_head).expect("post rx");
    drv.kick_rx(0);
    let tx_head = drv.reserve_desc(0, false).expect("tx descriptor");
    drv.write_desc(
        0,
        false,
        tx_head,
        src.guest_phys_addr,
        tx.len() as u32,
        0,
        0,
    )
    .expect("write tx desc");
    drv.push_avail(0, false, tx_head).expect("post tx");
    drv.kick_raw(drv.vring_index(0, false).unwrap())
        .expect("kick");

    let want = (drv.hdr_len() + f.len()) as u32;
    let mut rx_used = Vec::new();
    let mut tx_used = Vec::new();
    wait_until("the frame through the hot-plugged regions", || {
        rx_used.extend(drv.poll_used_raw(0, true));
        tx_used.extend(drv.poll_used_raw(0, false));
        !rx_used.is_empty() && !tx_used.is_empty()
    });
    assert_eq!(rx_used, vec![(rx_head, want)], "rx used element");
    assert_eq!(tx_used, vec![(tx_head, 0)], "tx used element");
    let mut got = vec![0u8; want as usize];
    files[files.len() - 1]
        .read_exact_at(&mut got, 0)
        .expect("read the rx buffer");
    let mut expected = drv.zero_hdr();
    expected.extend_from_slice(&echoed(&f));
    if drv.acked_features() & bits::MRG_RXBUF != 0 {
        // MRG_RXBUF: num_buffers (bytes 10..12) is 1.
        expected[10] = 1;
    }
    assert!(
        got == expected,
        "the frame in the hot-plugged rx buffer differs"
    );
    drv.release_desc(0, true, rx_head).unwrap();
    drv.release_desc(0, false, tx_head).unwrap();
    tally.add(&[f]);
}

#[test]
fn dirty_log_messages_are_served_and_the_log_is_marked() {
    use vhost::vhost_user::message::VhostUserProtocolFeatures as P;
    use vhost::VhostUserDirtyLogRegion;
    let echo = Echo::server("proto-log", |_| {});
    let mut tally = [Tally::default()];
    let opts = DriverOpts {
        protocol_features: DriverOpts::default().protocol_features | P::LOG_SHMFD,
        ..DriverOpts::default()
    };
    let (gpa_base, mem_size) = (opts.gpa_base, opts.mem_size);
    let mut drv = echo.connect(opts);
    assert!(drv.protocol_features().contains(P::LOG_SHMFD));
    assert_ne!(drv.offered_features() & bits::LOG_ALL, 0);
    traffic_flows(&mut drv, 1, 0, &mut tally);

    // One bit per 4 KiB page up to the end of guest memory.
    let log_len = ((gpa_base + mem_size) >> 12).div_ceil(8);
    let dir = TempDir::new("proto-log");
    let log = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(dir.path().join("log"))
        .unwrap();
    log.set_len(log_len).unwrap();
    let region = |size: u64| VhostUserDirtyLogRegion {
        mmap_size: size,
        mmap_offset: 0,
        mmap_handle: log.as_raw_fd(),
    };
    drv.frontend()
        .set_log_base(0, Some(region(log_len)))
        .expect("SET_LOG_BASE is answered");
    let efd = vmm_sys_util::eventfd::EventFd::new(0).unwrap();
    drv.frontend()
        .set_log_fd(efd.as_raw_fd())
        .expect("SET_LOG_FD is acked");
    // LOG_ALL on (the driver keeps its own view of the acked set).
    let acked = drv.acked_features();
    drv.frontend()
        .set_features(acked | bits::LOG_ALL)
        .expect("LOG_ALL");
    traffic_flows(&mut drv, 1, 1, &mut tally);
    let mut bitmap = vec![0u8; log_len as usize];
    log.read_exact_at(&mut bitmap, 0).unwrap();
    let dirty: Vec<u64> = (0..log_len * 8)
        .filter(|&p| bitmap[(p / 8) as usize] & (1 << (p % 8)) != 0)
        .collect();
    assert!(!dirty.is_empty(), "nothing marked with LOG_ALL on");
    let (first, end) = (gpa_base >> 12, (gpa_base + mem_size) >> 12);
    assert!(
        dirty.iter().all(|&p| (first..end).contains(&p)),
        "a page outside guest memory was marked: {dirty:?}"
    );
    drv.frontend().set_features(acked).expect("LOG_ALL off");
    traffic_flows(&mut drv, 1, 2, &mut tally);
    assert_no_violations(&drv);
    // A log larger than its file is refused (the connection closes).
    let _ = drv.frontend().set_log_base(0, Some(region(log_len + 4096)));
    assert!(
        drv.wait_backend_hangup(TIMEOUT),
        "a log beyond its file accepted"
    );
    drop(drv);
    let c = echo.stop();
    assert_clean_counts(&c[0], tally[0], "dirty log");
}

/// One `SEND_RARP` with `NEED_REPLY`: the status the backend replied.
fn send_rarp(drv: &TestDriver, mac: [u8; 6]) -> Result<u64, DriverError> {
    let mut payload = [0u8; 8];
    payload[..6].copy_from_slice(&mac);
    drv.send_raw(19, 0x8, &payload, &[])?;
    let (code, flags, body) = drv.recv_raw()?;
    assert_eq!(code, 19, "a reply to another request");
    assert_ne!(flags & 0x4, 0, "not a reply");
    assert_eq!(body.len(), 8);
    Ok(u64::from_le_bytes(body.try_into().unwrap()))
}

#[test]
fn send_rarp_reaches_the_announce_handler_and_is_acked() {
    use std::sync::{Arc, Mutex};
    use vhost::vhost_user::message::VhostUserProtocolFeatures as P;
    const VM: [u8; 6] = [0x52, 0x54, 0, 0, 0, 0x21];
    const LOCKED: [u8; 6] = [0x52, 0x54, 0, 0, 0, 0x99];
    let echo = Echo::server("proto-rarp", |_| {});
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = Arc::clone(&seen);
    echo.port().set_announce_handler(Arc::new(move |mac| {
        s.lock().unwrap().push(mac);
        mac != LOCKED
    }));
    let mut tally = [Tally::default()];
    let opts = DriverOpts {
        protocol_features: DriverOpts::default().protocol_features | P::RARP | P::REPLY_ACK,
        ..DriverOpts::default()
    };
    let mut drv = echo.connect(opts);
    assert!(drv.offered_protocol_features().contains(P::RARP));
    assert!(drv.protocol_features().contains(P::RARP));
    traffic_flows(&mut drv, 1, 0, &mut tally);
    assert_eq!(send_rarp(&drv, VM).unwrap(), 0, "SEND_RARP not acked");
    assert_eq!(
        send_rarp(&drv, LOCKED).unwrap(),
        1,
        "a refusal acked as success"
    );
    assert_eq!(*seen.lock().unwrap(), vec![VM, LOCKED]);
    // The connection goes on.
    traffic_flows(&mut drv, 1, 1, &mut tally);
    assert_no_violations(&drv);
    drop(drv);
    wait_until("the port to drop the connection", || {
        !echo.port().is_connected()
    });

    // Without the RARP protocol feature acked: NACKed, connection closed,
    // nothing announced.
    let opts = DriverOpts {
        protocol_features: (DriverOpts::default().protocol_features | P::REPLY_ACK) - P::RARP,
        ..DriverOpts::default()
    };
    let mut drv = echo.connect(opts);
    assert!(!drv.protocol_features().contains(P::RARP));
    traffic_flows(&mut drv, 1, 2, &mut tally);
    assert_eq!(
        send_rarp(&drv, VM).unwrap(),
        1,
        "SEND_RARP without RARP acked"
    );
    assert!(
        drv.wait_backend_hangup(TIMEOUT),
        "the connection stayed open"
    );
    assert_eq!(
        seen.lock().unwrap().len(),
        2,
        "announced without RARP acked"
    );
    drop(drv);
    let c = echo.stop();
    assert_clean_counts(&c[0], tally[0], "send rarp");
}
