// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Disconnects under load: `echo --poll busy` (a separate process, its
//! data plane spinning on the rings) is driven by the in-process virtio-net
//! driver, which hangs up in the middle of traffic 100 times. The backend
//! must keep serving (a last connection moves frames byte-exact) and must
//! not leak: its open file descriptors (memory regions, kick and call
//! eventfds, sockets) come back to the same count.

use std::path::Path;
use std::time::Duration;

use vhost_net_backend::test_utils::{DriverOpts, RxLayout, TestDriver, TxLayout};
use vhu_tests::echo::Echo;
use vhu_tests::testpmd::RunDir;

const ROUNDS: usize = 100;

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("echo's /proc fd directory")
        .count()
}

fn frame(len: usize, seed: u8) -> Vec<u8> {
    let mut f: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(7) ^ seed).collect();
    // Unicast destination and source MACs (echo swaps them).
    f[..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 1]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 2]);
    f
}

fn opts() -> DriverOpts {
    DriverOpts {
        queue_pairs: 2,
        active_pairs: 2,
        ..DriverOpts::default()
    }
}

/// One connection: post RX buffers, send `n` frames per pair, wait for
/// `wait_for` of them to come back on each pair, return the driver (with
/// frames possibly still in flight).
fn traffic(socket: &Path, n: usize, wait_for: usize, seed: u8) -> (TestDriver, usize) {
    let mut d = TestDriver::connect(socket, opts()).expect("connect to echo");
    let hdr = d.zero_hdr();
    let mut back = 0;
    for qp in 0..2 {
        d.post_rx_buffers(qp, 128, 2048, RxLayout::Single)
            .expect("post RX buffers");
        for i in 0..n {
            d.send_frame(qp, &hdr, &frame(60 + i % 1400, seed), TxLayout::Single)
                .expect("send");
        }
        d.kick_tx(qp);
    }
    for qp in 0..2 {
        back += d
            .recv_frames_until(qp, wait_for, Duration::from_secs(5))
            .len();
    }
    (d, back)
}

#[test]
#[ignore = "needs root and peers: run scripts/test.sh"]
fn busy_echo_survives_disconnects_mid_traffic_without_leaking() {
    let dir = RunDir::new("reconnect");
    let socket = dir.join("vhost.sock");
    let echo = Echo::spawn(&socket, false, 2, &["--poll", "busy"]);
    let pid = echo.pid();

    // Warm up once so lazily created descriptors are counted in the baseline.
    let (d, back) = traffic(&socket, 8, 8, 0);
    assert_eq!(back, 16, "warm-up frames came back");
    d.disconnect();
    std::thread::sleep(Duration::from_millis(200));
    let baseline = open_fds(pid);

    for round in 0..ROUNDS {
        // Hang up with frames in flight: only wait for a few of 64.
        let (d, back) = traffic(&socket, 64, 1, round as u8);
        assert!(
            back >= 2,
            "round {round}: no frame came back before the hang-up"
        );
        d.disconnect();
    }

    // The backend still serves, byte-exact.
    let mut d = TestDriver::connect(&socket, opts()).expect("connect after the rounds");
    let hdr = d.zero_hdr();
    for qp in 0..2 {
        d.post_rx_buffers(qp, 64, 2048, RxLayout::Single).unwrap();
        let f = frame(1000, 0xee);
        d.send_frame(qp, &hdr, &f, TxLayout::HeaderSplit).unwrap();
        d.kick_tx(qp);
        let got = d.recv_frames_until(qp, 1, Duration::from_secs(5));
        assert_eq!(got.len(), 1, "queue pair {qp}: frame came back");
        let mut want = f.clone();
        want[..6].copy_from_slice(&f[6..12]);
        want[6..12].copy_from_slice(&f[..6]);
        assert_eq!(got[0].data, want, "queue pair {qp}: content");
    }
    assert!(d.violations().is_empty(), "{:?}", d.violations());
    d.disconnect();
    std::thread::sleep(Duration::from_millis(300));

    let after = open_fds(pid);
    assert!(
        after <= baseline,
        "echo's open fds grew from {baseline} to {after} over {ROUNDS} reconnects"
    );
    let out = echo.stop();
    assert!(out.status.success(), "echo exited with {:?}", out.status);
    let tx: u64 = out.qps.iter().map(|q| q.tx_packets).sum();
    assert!(
        tx >= (ROUNDS * 2) as u64,
        "echo dequeued {tx} frames over {ROUNDS} rounds"
    );
}
