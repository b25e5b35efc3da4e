// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Disconnects under load: `echo --poll busy` (a separate process, its
//! data plane spinning on the rings) is driven by the in-process virtio-net
//! driver, which hangs up in the middle of traffic 100 times. The backend
//! must keep serving (a last connection moves frames byte-exact) and must
//! not leak: its open file descriptors (memory regions, kick and call
//! eventfds, sockets) come back to exactly the same count, so do its shared
//! mappings (every connection maps 16 MiB of guest memory; a region left
//! mapped would show), and its resident memory does not grow.
//!
//! Each reading waits for the backend to have logged the end of every
//! connection so far and then for the fd count to stand still, so a slow
//! teardown under load neither fails the check nor inflates the baseline.
//!
//! And the other end of a connection's life: `echo` told to stop (SIGTERM)
//! while a `dpdk-testpmd` frontend is connected and forwarding through it,
//! in either socket role, exits 0 within a second with its counters, without
//! waiting on ring hand-offs its own stopped data plane would never answer.

use std::path::Path;
use std::time::{Duration, Instant};

use vhost_net_backend::test_utils::{DriverOpts, RxLayout, TestDriver, TxLayout};
use vhu_tests::echo::Echo;
use vhu_tests::footprint::{open_fds, Footprint};
use vhu_tests::process::{self, RunDir};
use vhu_tests::testpmd::{FrontendOpts, Testpmd};

const ROUNDS: usize = 100;

/// How long the fd count must stand still for a reading.
const STABLE: Duration = Duration::from_millis(500);

/// How long a connection's teardown may take.
const TEARDOWN_TIMEOUT: Duration = Duration::from_secs(20);

/// Growth of echo's resident memory (KiB) allowed over the rounds: allocator
/// slack, far below one leaked 16 MiB guest memory mapping.
const RSS_SLACK_KB: u64 = 4096;

/// Waits until echo logged the end of `ended` connections (its port logs
/// one line per connection it closes), then until its fd count stands still
/// for [`STABLE`], and reads its footprint.
fn settled(echo: &Echo, ended: usize) -> Footprint {
    let deadline = Instant::now() + TEARDOWN_TIMEOUT;
    let ends = |log: &str| {
        log.matches("frontend disconnected").count() + log.matches("closing the connection").count()
    };
    while ends(&echo.log()) < ended {
        assert!(
            Instant::now() < deadline,
            "echo logged the end of {} of {ended} connections:\n{}",
            ends(&echo.log()),
            echo.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = echo.pid();
    let mut fds = open_fds(pid);
    let mut since = Instant::now();
    while since.elapsed() < STABLE {
        assert!(
            Instant::now() < deadline,
            "echo's fd count kept changing (now {fds})"
        );
        std::thread::sleep(Duration::from_millis(50));
        let now = open_fds(pid);
        if now != fds {
            fds = now;
            since = Instant::now();
        }
    }
    Footprint {
        fds,
        ..Footprint::of(pid)
    }
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

    // Warm up once so lazily created descriptors are counted in the
    // baseline, which is read once that connection is fully gone.
    let (d, back) = traffic(&socket, 8, 8, 0);
    assert_eq!(back, 16, "warm-up frames came back");
    d.disconnect();
    let baseline = settled(&echo, 1);

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

    // Warm-up, the rounds and the last connection have all ended.
    let after = settled(&echo, ROUNDS + 2);
    println!("echo's footprint: baseline {baseline:?}, after {ROUNDS} reconnects {after:?}");
    after.assert_no_growth(&baseline, RSS_SLACK_KB, &format!("{ROUNDS} reconnects"));
    let out = echo.stop();
    assert!(out.status.success(), "echo exited with {:?}", out.status);
    let tx: u64 = out.qps.iter().map(|q| q.tx_packets).sum();
    assert!(
        tx >= (ROUNDS * 2) as u64,
        "echo dequeued {tx} frames over {ROUNDS} rounds"
    );
}

/// How long a backend may take to exit after SIGTERM with a frontend
/// connected.
const STOP_WITHIN: Duration = Duration::from_secs(1);

#[test]
#[ignore = "needs root and peers: run scripts/test.sh"]
fn echo_exits_within_a_second_of_sigterm_with_a_frontend_connected() {
    for echo_is_client in [false, true] {
        let dir = RunDir::new("sigterm");
        let socket = dir.join("vhost.sock");
        let mut opts = FrontendOpts::new(&socket);
        opts.server = echo_is_client;
        let (mut tp, echo) = if echo_is_client {
            let tp = Testpmd::spawn(&opts);
            process::wait_for_path(&socket, Duration::from_secs(20), || true)
                .unwrap_or_else(|e| panic!("testpmd's socket: {e}"));
            (tp, Echo::spawn(&socket, true, 1, &["--poll", "adaptive"]))
        } else {
            let echo = Echo::spawn(&socket, false, 1, &["--poll", "adaptive"]);
            (Testpmd::spawn(&opts), echo)
        };
        tp.wait_link_up(Duration::from_secs(20));
        tp.start_tx_first(4);
        tp.wait_rx_packets(10_000, Duration::from_secs(20));

        let t0 = Instant::now();
        let out = echo.stop();
        let took = t0.elapsed();
        let role = if echo_is_client { "client" } else { "server" };
        assert!(out.status.success(), "echo as {role}: {out}");
        assert!(
            took < STOP_WITHIN,
            "echo as {role} took {took:?} to exit after SIGTERM\n{out}"
        );
        assert!(
            !out.stderr.contains("did not acknowledge"),
            "echo as {role} waited on a ring hand-off\n{out}"
        );
        assert!(
            out.total().tx_packets > 10_000,
            "echo as {role} forwarded: {:?}",
            out.total()
        );
        drop(tp);
    }
}
