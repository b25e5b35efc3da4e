// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! End-to-end tests of the backend, in process: a [`Port`] served by an echo thread, and the
//! in-process virtio-net driver ([`TestDriver`]) as the guest, over a real Unix socket and
//! memfd guest memory. No root is needed.
//!
//! # The harness
//!
//! [`Echo`] starts a port (each test on its own socket, in its own temporary directory) and
//! one data-plane thread that serves every queue pair of it: each frame the guest transmits on
//! a pair is copied back into the receive queue of the same pair, with the two MAC addresses
//! swapped (through [`vhost_net_backend::TxFrame::head_mut`], so what lands in the guest is
//! the private head copy) and its `virtio_net_hdr` passed through unchanged. The thread sleeps
//! on a [`Poller`] whenever it finds no work (interrupt mode: the machine has two cores and
//! the tests run in parallel). It applies no back-pressure: a frame that finds no receive
//! buffer is dropped and counted (`NoBuffers`), so tests post receive buffers before they
//! transmit. [`Echo::stop`] stops the thread, checks that the port's counters and the queues'
//! counters agree, and returns the counters of each pair.
//!
//! The echo thread also watches the notification protocol: a wake-up by timeout (rather than
//! by a kick) that then finds frames to move is a kick that was lost, by the driver or by the
//! backend; [`Echo::stop`] asserts there were none.
//!
//! # What every test checks
//!
//! Frames come back byte-exact (modulo the MAC swap) with the header they were sent with;
//! frames in equal frames out; the backend's TX and RX packet and byte counters equal what
//! the driver sent and received; drops are zero unless the test provokes them, and then they
//! are counted under the expected [`DropReason`]; and the driver saw no spec violation from
//! the backend ([`TestDriver::violations`]).

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use vhost::vhost_user::VhostUserFrontend;
use vhost::{VhostBackend, VhostUserMemoryRegionInfo};
use vhost_net_backend::device::bits;
use vhost_net_backend::net_hdr;
use vhost_net_backend::test_utils::{
    DriverError, DriverOpts, MemTableMode, NetHdr, RxFrame, RxLayout, TestDriver, TxLayout,
    DEFAULT_FEATURES, NET_HDR_LEN,
};
use vhost_net_backend::{
    Backoff, DropReason, Offloads, Poller, Port, PortConfig, PortError, QueueCounters, QueuePair,
    SocketRole,
};
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

// ===== harness =====

/// How long anything that should happen may take.
const TIMEOUT: Duration = Duration::from_secs(5);
/// How long to wait before concluding that something that must not happen did not.
const SETTLE: Duration = Duration::from_millis(50);
/// Frames per echo burst.
const BURST: usize = 32;
/// Longest sleep of the echo thread without an event.
const IDLE_WAIT: Duration = Duration::from_millis(100);
/// Poller token of the echo thread's stop eventfd.
const STOP_TOKEN: u64 = u64::MAX;

const DESC_F_NEXT: u16 = 1;
const DESC_F_WRITE: u16 = 2;
const DESC_F_INDIRECT: u16 = 4;

/// A directory removed with everything in it on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "vhu-drv-{}-{}-{name}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&p).expect("create temp dir");
        TempDir(p)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The counters of one queue pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PairCounters {
    /// Guest TX: frames the echo dequeued.
    tx: QueueCounters,
    /// Guest RX: frames the echo delivered.
    rx: QueueCounters,
}

/// What the echo thread hands back when it stops.
struct EchoOutcome {
    qps: Vec<QueuePair>,
    missed_kicks: u64,
}

/// A port served by an echo data-plane thread; see the module docs.
struct Echo {
    port: Option<Port>,
    socket: PathBuf,
    stop: Arc<AtomicBool>,
    wake: Arc<EventFd>,
    thread: Option<JoinHandle<EchoOutcome>>,
    _dir: TempDir,
}

impl Echo {
    /// A server-role port on a fresh socket; `tweak` adjusts its configuration.
    fn server(name: &str, tweak: impl FnOnce(&mut PortConfig)) -> Echo {
        let dir = TempDir::new(name);
        let mut cfg = PortConfig::new(name, dir.path().join("sock"));
        tweak(&mut cfg);
        Echo::start(cfg, dir)
    }

    /// Starts the port and its echo thread; `dir` lives as long as the port.
    fn start(cfg: PortConfig, dir: TempDir) -> Echo {
        let socket = cfg.socket.clone();
        let (port, qps) = Port::new(cfg).expect("port starts");
        let stop = Arc::new(AtomicBool::new(false));
        let wake = Arc::new(EventFd::new(EFD_NONBLOCK).expect("eventfd"));
        let (s, w) = (Arc::clone(&stop), Arc::clone(&wake));
        let thread = std::thread::Builder::new()
            .name(format!("echo-{}", port.name()))
            .spawn(move || echo_loop(qps, &s, &w))
            .expect("spawn the echo thread");
        Echo {
            port: Some(port),
            socket,
            stop,
            wake,
            thread: Some(thread),
            _dir: dir,
        }
    }

    fn port(&self) -> &Port {
        self.port.as_ref().expect("port is running")
    }

    fn socket(&self) -> &Path {
        &self.socket
    }

    /// Connects a driver and checks both sides agree on the acked features.
    fn connect(&self, opts: DriverOpts) -> TestDriver {
        let drv = TestDriver::connect(&self.socket, opts).expect("driver connects");
        self.check_features(&drv);
        drv
    }

    fn check_features(&self, drv: &TestDriver) {
        wait_until("the port to see the acked features", || {
            self.port().acked_features() == drv.acked_features()
        });
        assert!(self.port().is_connected());
    }

    /// The port's live counters of pair `qp`.
    fn counters(&self, qp: u16) -> PairCounters {
        let i = 2 * usize::from(qp);
        let p = self.port();
        PairCounters {
            rx: p.vring_counters(i).expect("rx vring exists"),
            tx: p.vring_counters(i + 1).expect("tx vring exists"),
        }
    }

    /// Waits until pair `qp` has counted `tx` guest-TX frames and `rx` guest-RX frames, each
    /// delivered or dropped, and returns its counters. A burst adds its counts after it
    /// published its used entries and signalled the guest, so the driver can see a frame (and
    /// its interrupt) before the port counts it.
    fn settle(&self, qp: u16, tx: u64, rx: u64) -> PairCounters {
        let seen = |c: &QueueCounters| c.packets + c.dropped();
        wait_until(
            &format!("qp {qp} counting {tx} tx and {rx} rx frames"),
            || {
                let c = self.counters(qp);
                seen(&c.tx) == tx && seen(&c.rx) == rx
            },
        );
        self.counters(qp)
    }

    /// Stops the echo thread and the port; returns each pair's final counters, after checking
    /// that the port reports the same and that no kick was lost.
    fn stop(mut self) -> Vec<PairCounters> {
        let outcome = self
            .join()
            .expect("the echo thread ended without panicking");
        let port = self.port.take().expect("port is running");
        let counters: Vec<PairCounters> = outcome
            .qps
            .iter()
            .map(|qp| PairCounters {
                tx: qp.tx.counters(),
                rx: qp.rx.counters(),
            })
            .collect();
        for (i, c) in counters.iter().enumerate() {
            assert_eq!(port.vring_counters(2 * i), Some(c.rx), "port's rx counters");
            assert_eq!(
                port.vring_counters(2 * i + 1),
                Some(c.tx),
                "port's tx counters"
            );
        }
        assert_eq!(
            outcome.missed_kicks, 0,
            "the echo thread found work after waking by timeout (a lost kick)"
        );
        // Queues first: a port dropped while its queues are attached but unpolled would wait
        // for their acknowledgement of the ring stop.
        drop(outcome.qps);
        drop(port);
        counters
    }

    fn join(&mut self) -> Option<EchoOutcome> {
        self.stop.store(true, Ordering::Release);
        let _ = self.wake.write(1);
        self.thread.take().and_then(|t| t.join().ok())
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        drop(self.join());
        self.port.take();
    }
}

/// The echo data plane: bursts on every pair while there is work, then asks for TX kicks and
/// sleeps.
fn echo_loop(mut qps: Vec<QueuePair>, stop: &AtomicBool, wake: &EventFd) -> EchoOutcome {
    let mut poller = Poller::new().expect("poller");
    for qp in &mut qps {
        poller.add(qp).expect("watch queue pair");
    }
    poller
        .add_fd(wake.as_raw_fd(), STOP_TOKEN)
        .expect("watch stop eventfd");
    let mut missed_kicks = 0;
    let mut timed_out = false;
    while !stop.load(Ordering::Acquire) {
        let moved: usize = qps.iter_mut().map(echo_burst).sum();
        if moved > 0 {
            // Work found after a timeout, with no kick pending since: a lost kick.
            if timed_out && poller.wait(Some(Duration::ZERO)).unwrap_or(0) == 0 {
                missed_kicks += 1;
            }
            timed_out = false;
            continue;
        }
        timed_out = false;
        let mut pending = false;
        for qp in &mut qps {
            // Posted receive buffers are not work for an echo: no kicks for them.
            qp.rx.disable_notifications();
            pending |= qp.tx.enable_notifications();
        }
        if !pending {
            timed_out = poller.wait(Some(IDLE_WAIT)).expect("poller wait") == 0;
        }
    }
    EchoOutcome { qps, missed_kicks }
}

/// Reflects up to [`BURST`] frames of one pair, MACs swapped. Returns frames dequeued.
fn echo_burst(qp: &mut QueuePair) -> usize {
    let mut rx = qp.rx.burst();
    qp.tx.recv_burst(BURST, |frame| {
        let head = frame.head_mut();
        if head.len() >= 12 {
            let (dst, src) = head.split_at_mut(6);
            dst.swap_with_slice(&mut src[..6]);
        }
        let hdr = *frame.hdr();
        // A failure is counted in the RX queue's drop counters.
        let _ = rx.push(&hdr, frame);
    })
}

/// Polls `cond` every millisecond until it holds; fails the test after [`TIMEOUT`].
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + TIMEOUT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

// ===== frames and traffic =====

/// A test frame: Ethernet header (distinct MACs, a local EtherType), then a payload that
/// depends on `seed` and the offset.
fn frame(len: usize, seed: u32) -> Vec<u8> {
    let mut f: Vec<u8> = (0..len as u32)
        .map(|i| (i.wrapping_mul(0x9e37_79b1).wrapping_add(seed) >> 11) as u8)
        .collect();
    let s = seed.to_be_bytes();
    let eth = [
        0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0x52, 0x54, s[1], s[2], s[3], 0x01, 0x88, 0xb5,
    ];
    let n = eth.len().min(len);
    f[..n].copy_from_slice(&eth[..n]);
    f
}

/// `f` as the echo returns it: MAC addresses swapped.
fn echoed(f: &[u8]) -> Vec<u8> {
    let mut e = f.to_vec();
    if e.len() >= 12 {
        let (dst, src) = e.split_at_mut(6);
        dst.swap_with_slice(&mut src[..6]);
    }
    e
}

fn seed(qp: u16, batch: usize, i: usize) -> u32 {
    (u32::from(qp) << 24) ^ ((batch as u32) << 8) ^ i as u32
}

/// Frames and bytes moved, as the driver saw them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Tally {
    frames: u64,
    bytes: u64,
}

impl Tally {
    fn add(&mut self, frames: &[Vec<u8>]) {
        self.frames += frames.len() as u64;
        self.bytes += frames.iter().map(|f| f.len() as u64).sum::<u64>();
    }
}

/// Both directions of a pair moved exactly `t`, without a drop.
fn assert_clean_counts(c: &PairCounters, t: Tally, what: &str) {
    assert_eq!(
        (c.tx.packets, c.tx.bytes),
        (t.frames, t.bytes),
        "{what}: tx {c:?}"
    );
    assert_eq!(
        (c.rx.packets, c.rx.bytes),
        (t.frames, t.bytes),
        "{what}: rx {c:?}"
    );
    assert_eq!(c.tx.dropped(), 0, "{what}: tx drops {c:?}");
    assert_eq!(c.rx.dropped(), 0, "{what}: rx drops {c:?}");
}

/// Tops pair `qp`'s receive ring up to `want` buffers in flight, and kicks it.
fn refill_rx(drv: &mut TestDriver, qp: u16, want: usize, len: u32, layout: RxLayout) {
    let have = drv.in_flight(qp, true);
    if have < want {
        let posted = drv
            .post_rx_buffers(qp, want - have, len, layout)
            .expect("post rx buffers");
        assert_eq!(posted, want - have, "rx buffers posted on qp {qp}");
    }
    drv.kick_rx(qp);
}

/// Sends `frames` on pair `qp` with header `hdr`, laid out as `layout`, kicks, and checks
/// that they all come back in order, byte-exact (MACs swapped), with the same header (except
/// `num_buffers`) and used lengths that add up; and that every TX chain is completed with
/// length 0 (in order, when `IN_ORDER` was acked). Returns the received frames.
fn round_trip(
    drv: &mut TestDriver,
    qp: u16,
    hdr: &NetHdr,
    frames: &[Vec<u8>],
    layout: TxLayout,
) -> Vec<RxFrame> {
    let hdr_bytes = hdr.to_bytes(drv.hdr_len());
    let heads: Vec<u16> = frames
        .iter()
        .map(|f| {
            drv.send_frame(qp, &hdr_bytes, f, layout)
                .unwrap_or_else(|e| panic!("send a {}-byte frame on qp {qp}: {e}", f.len()))
        })
        .collect();
    drv.kick_tx(qp);
    let got = drv.recv_frames_until(qp, frames.len(), TIMEOUT);
    assert_eq!(
        got.len(),
        frames.len(),
        "frames back on qp {qp} ({layout:?})"
    );
    for (i, (g, f)) in got.iter().zip(frames).enumerate() {
        assert!(
            g.data == echoed(f),
            "qp {qp} frame {i} ({} bytes, {layout:?}) differs: got {} bytes",
            f.len(),
            g.data.len()
        );
        let h = g.net_hdr();
        assert_eq!(
            NetHdr {
                num_buffers: 0,
                ..h
            },
            NetHdr {
                num_buffers: 0,
                ..*hdr
            },
            "qp {qp} frame {i}: header"
        );
        let used: u64 = g.used.iter().map(|&(_, l)| u64::from(l)).sum();
        assert_eq!(
            used,
            (drv.hdr_len() + f.len()) as u64,
            "qp {qp} frame {i}: used lengths {:?}",
            g.used
        );
    }
    let done = drv.tx_completions_until(qp, frames.len(), TIMEOUT);
    assert_eq!(done.len(), frames.len(), "tx completions on qp {qp}");
    assert!(
        done.iter().all(|&(_, len)| len == 0),
        "tx used lengths must be 0 (nothing written): {done:?}"
    );
    if drv.acked_features() & bits::IN_ORDER != 0 {
        let ids: Vec<u16> = done.iter().map(|&(id, _)| id).collect();
        assert_eq!(ids, heads, "IN_ORDER: tx chains used in order");
    }
    got
}

/// [`round_trip`] of plain frames (no offloads), one descriptor each.
fn round_trip_plain(drv: &mut TestDriver, qp: u16, frames: &[Vec<u8>]) -> Vec<RxFrame> {
    round_trip(drv, qp, &NetHdr::default(), frames, TxLayout::Single)
}

/// Posts receive buffers and echoes a 60- and a 1514-byte frame on pair `qp`.
fn traffic_on(drv: &mut TestDriver, qp: u16, batch: usize, tally: &mut Tally) {
    refill_rx(drv, qp, 16, 2048, RxLayout::Single);
    let frames = vec![
        frame(60, seed(qp, batch, 0)),
        frame(1514, seed(qp, batch, 1)),
    ];
    round_trip_plain(drv, qp, &frames);
    tally.add(&frames);
}

/// [`traffic_on`] each of pairs `0..pairs`.
fn traffic_flows(drv: &mut TestDriver, pairs: u16, batch: usize, tally: &mut [Tally]) {
    for qp in 0..pairs {
        traffic_on(drv, qp, batch, &mut tally[usize::from(qp)]);
    }
}

fn assert_no_violations(drv: &TestDriver) {
    assert!(
        drv.violations().is_empty(),
        "driver saw violations: {:?}",
        drv.violations()
    );
}

// ===== 1. frame sizes, features and layouts =====

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

const SIZES: [usize; 4] = [60, 1514, 4000, 9000];

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
                let got = round_trip(&mut drv, qp, &NetHdr::default(), &frames, layout);
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
    let echo = Echo::server("nomrg-small", |_| {});
    let mut drv = echo.connect(DriverOpts {
        features: bits::VERSION_1,
        ..DriverOpts::default()
    });
    refill_rx(&mut drv, 0, 4, 2048, RxLayout::Single);
    let hdr = drv.zero_hdr();
    drv.send_frame(0, &hdr, &frame(4000, 1), TxLayout::Single)
        .expect("send");
    drv.kick_tx(0);
    assert_eq!(drv.tx_completions_until(0, 1, TIMEOUT).len(), 1);
    wait_until("a TooLong rx drop", || {
        echo.counters(0).rx.drops_for(DropReason::TooLong) == 1
    });
    // The buffer was not consumed: the next frame that fits takes it.
    assert_eq!(drv.in_flight(0, true), 4);
    let small = vec![frame(1514, 2)];
    round_trip_plain(&mut drv, 0, &small);
    assert_no_violations(&drv);
    let c = echo.stop();
    assert_eq!((c[0].tx.packets, c[0].tx.bytes), (2, 4000 + 1514));
    assert_eq!((c[0].rx.packets, c[0].rx.bytes), (1, 1514));
    assert_eq!(c[0].rx.drops_for(DropReason::TooLong), 1);
    assert_eq!(c[0].rx.dropped(), 1);
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
        round_trip_plain(&mut drv, 0, &frames);
        tally.add(&frames);
        batch += 1;
    }
    let total = tally.frames as usize;
    assert_eq!(drv.used_idx(0, false).unwrap(), (total % 65536) as u16);
    assert_eq!(drv.used_idx(0, true).unwrap(), (total % 65536) as u16);
    assert_no_violations(&drv);
    let c = echo.stop();
    assert_clean_counts(&c[0], tally, "wrap");
}

#[test]
fn mrg_rxbuf_a_frame_bigger_than_the_posted_buffers_leaves_them_posted() {
    let echo = Echo::server("mrg-rollback", |_| {});
    let mut drv = echo.connect(DriverOpts::default());
    // Two 2048-byte buffers cannot hold a 9000-byte frame: it is dropped, the buffers stay.
    refill_rx(&mut drv, 0, 2, 2048, RxLayout::Single);
    let hdr = drv.zero_hdr();
    drv.send_frame(0, &hdr, &frame(9000, 1), TxLayout::Single)
        .unwrap();
    drv.kick_tx(0);
    assert_eq!(drv.tx_completions_until(0, 1, TIMEOUT).len(), 1);
    wait_until("a no_buffers rx drop", || {
        echo.counters(0).rx.drops_for(DropReason::NoBuffers) == 1
    });
    assert!(drv.recv_frames(0).is_empty());
    assert_eq!(drv.in_flight(0, true), 2);
    let fits = vec![frame(3000, 2)];
    let got = round_trip_plain(&mut drv, 0, &fits);
    assert_eq!(got[0].num_buffers, 2);
    assert_no_violations(&drv);
    let c = echo.stop();
    assert_eq!((c[0].tx.packets, c[0].tx.bytes), (2, 12_000));
    assert_eq!((c[0].rx.packets, c[0].rx.bytes), (1, 3000));
    assert_eq!(c[0].rx.drops_for(DropReason::NoBuffers), 1);
    assert_eq!(c[0].rx.dropped(), 1);
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
            round_trip_plain(&mut drv, 0, &frames);
            tally.add(&frames);
        }
        assert_no_violations(&drv);
        let c = echo.stop();
        assert_clean_counts(&c[0], tally, &format!("queue size {size}"));
    }
}

#[test]
fn event_idx_used_event_suppresses_interrupts() {
    let echo = Echo::server("used-event", |_| {});
    let mut drv = echo.connect(DriverOpts::default());
    assert_ne!(drv.acked_features() & bits::EVENT_IDX, 0);
    refill_rx(&mut drv, 0, 64, 2048, RxLayout::Single);
    let mut tally = Tally::default();
    let first = vec![frame(60, 1)];
    round_trip_plain(&mut drv, 0, &first);
    tally.add(&first);
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
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(echo.counters(0).rx.notifications, notified + 1);
    let got = drv.recv_frames(0);
    assert_eq!(got.len(), 5);
    for (g, f) in got.iter().zip(&frames) {
        assert!(g.data == echoed(f));
    }
    tally.add(&frames);
    assert_no_violations(&drv);
    let c = echo.stop();
    assert_clean_counts(&c[0], tally, "used_event");
}

#[test]
fn no_interrupt_flag_suppresses_interrupts_without_event_idx() {
    let echo = Echo::server("no-interrupt", |_| {});
    let mut drv = echo.connect(DriverOpts {
        features: DEFAULT_FEATURES & !bits::EVENT_IDX,
        ..DriverOpts::default()
    });
    refill_rx(&mut drv, 0, 64, 2048, RxLayout::Single);
    let mut tally = Tally::default();
    drv.set_no_interrupt(0, true, true).unwrap();
    drv.take_call(0, true);
    let notified = echo.counters(0).rx.notifications;
    let frames: Vec<Vec<u8>> = (0..8).map(|i| frame(200 + i, seed(0, 0, i))).collect();
    // round_trip polls the used ring, so it does not need the interrupts.
    round_trip_plain(&mut drv, 0, &frames);
    tally.add(&frames);
    let c = echo.settle(0, 8, 8);
    assert!(
        !drv.take_call(0, true),
        "interrupt with VRING_AVAIL_F_NO_INTERRUPT"
    );
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(c.rx.notifications, notified);
    assert_eq!(echo.counters(0).rx.notifications, notified);
    drv.set_no_interrupt(0, true, false).unwrap();
    round_trip_plain(&mut drv, 0, &frames[..1]);
    tally.add(&frames[..1]);
    // (round_trip itself takes the interrupt off the call eventfd: look at the counter.)
    wait_until("an interrupt without VRING_AVAIL_F_NO_INTERRUPT", || {
        echo.counters(0).rx.notifications > notified
    });
    assert_no_violations(&drv);
    let c = echo.stop();
    assert_clean_counts(&c[0], tally, "no_interrupt");
}

// ===== 2. disconnect and reconnect =====

#[test]
fn disconnect_then_a_new_driver_is_served() {
    let echo = Echo::server("reconnect-new", |_| {});
    let mut tally = [Tally::default()];
    let mut drv = echo.connect(DriverOpts::default());
    traffic_flows(&mut drv, 1, 0, &mut tally);
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
    assert_no_violations(&drv);
    let c = echo.stop();
    assert_clean_counts(&c[0], tally[0], "two connections");
}

#[test]
fn reconnect_resumes_the_rings_where_they_were() {
    let echo = Echo::server("reconnect-keep", |cfg| cfg.queue_pairs = 2);
    let opts = DriverOpts {
        queue_pairs: 2,
        active_pairs: 2,
        ..DriverOpts::default()
    };
    let mut drv = echo.connect(opts);
    let mut tally = [Tally::default(); 2];
    for qp in 0..2 {
        refill_rx(&mut drv, qp, 40, 2048, RxLayout::Single);
        let frames: Vec<Vec<u8>> = (0..10).map(|i| frame(100 + i, seed(qp, 0, i))).collect();
        round_trip_plain(&mut drv, qp, &frames);
        tally[usize::from(qp)].add(&frames);
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
        round_trip_plain(&mut drv, qp, &frames);
        tally[usize::from(qp)].add(&frames);
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
    // The port starts before the frontend's socket exists, and retries.
    let echo = Echo::start(cfg, dir);
    std::thread::sleep(Duration::from_millis(30));
    assert!(!echo.port().is_connected());
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
    assert_no_violations(&drv);
    let c = echo.stop();
    assert_clean_counts(&c[0], tally[0], "client role");
}

#[test]
fn abrupt_disconnects_with_traffic_in_flight() {
    let echo = Echo::server("abrupt", |cfg| cfg.queue_pairs = 2);
    let opts = DriverOpts {
        queue_pairs: 2,
        active_pairs: 2,
        ..DriverOpts::default()
    };
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
    let echo = Echo::server("rem-mem", |_| {});
    let mut drv = echo.connect(DriverOpts {
        mem_table: MemTableMode::AddMemReg,
        split_regions: true,
        ..DriverOpts::default()
    });
    let mut tally = [Tally::default()];
    traffic_flows(&mut drv, 1, 0, &mut tally);
    let second = drv.memory().iter().nth(1).expect("two regions");
    let region = VhostUserMemoryRegionInfo::from_guest_region(second).unwrap();
    // Buffers alternate between the regions; the frontend takes the second one away (the
    // rings live in the first).
    refill_rx(&mut drv, 0, 16, 2048, RxLayout::Single);
    drv.frontend()
        .remove_mem_region(&region)
        .expect("REM_MEM_REG");
    let hdr = drv.zero_hdr();
    for i in 0..8 {
        drv.send_frame(0, &hdr, &frame(1000, seed(0, 1, i)), TxLayout::Single)
            .unwrap();
    }
    drv.kick_tx(0);
    // Every chain comes back, whatever happened to it.
    assert_eq!(drv.tx_completions_until(0, 8, TIMEOUT).len(), 8);
    wait_until("the 8 frames counted", || {
        let c = echo.counters(0).tx;
        c.packets + c.dropped() == tally[0].frames + 8
    });
    let c = echo.counters(0);
    assert!(c.tx.drops_for(DropReason::BadAddress) > 0, "{c:?}");
    assert_eq!(c.tx.dropped(), c.tx.drops_for(DropReason::BadAddress));
    // Receive buffers in the removed region went back unwritten: the driver notices.
    let _ = drv.recv_frames_until(0, 8, SETTLE);
    drv.take_violations();
    drv.frontend().add_mem_region(&region).expect("ADD_MEM_REG");
    traffic_flows(&mut drv, 1, 2, &mut tally);
    assert_no_violations(&drv);
    drop(drv);
    let c = echo.stop();
    assert_eq!(
        c[0].rx.dropped(),
        c[0].rx.drops_for(DropReason::BadAddress),
        "{c:?}"
    );
}

// ===== 3. stop and resume =====

#[test]
fn get_vring_base_stops_the_ring_and_resume_continues() {
    let echo = Echo::server("vring-base", |_| {});
    let mut drv = echo.connect(DriverOpts::default());
    let mut tally = Tally::default();
    refill_rx(&mut drv, 0, 64, 2048, RxLayout::Single);
    let first: Vec<Vec<u8>> = (0..10)
        .map(|i| frame(60 + 100 * i, seed(0, 0, i)))
        .collect();
    round_trip_plain(&mut drv, 0, &first);
    tally.add(&first);

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
    std::thread::sleep(SETTLE);
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
    round_trip_plain(&mut drv, 0, &more);
    tally.add(&more);
    assert_eq!(drv.get_vring_base(tx).expect("GET_VRING_BASE"), 25);
    assert_no_violations(&drv);
    let c = echo.stop();
    assert_clean_counts(&c[0], tally, "stop and resume");
}

#[test]
fn vring_disable_and_enable_keeps_the_indices() {
    let echo = Echo::server("enable", |_| {});
    let mut drv = echo.connect(DriverOpts::default());
    let mut tally = Tally::default();
    refill_rx(&mut drv, 0, 64, 2048, RxLayout::Single);
    let first: Vec<Vec<u8>> = (0..7).map(|i| frame(90 + i, seed(0, 0, i))).collect();
    round_trip_plain(&mut drv, 0, &first);
    tally.add(&first);
    drv.set_pair_enabled(0, false).expect("SET_VRING_ENABLE 0");
    let queued: Vec<Vec<u8>> = (0..3).map(|i| frame(1514, seed(0, 1, i))).collect();
    let hdr = drv.zero_hdr();
    for f in &queued {
        drv.send_frame(0, &hdr, f, TxLayout::Single).unwrap();
    }
    drv.kick_raw(drv.vring_index(0, false).unwrap()).unwrap();
    std::thread::sleep(SETTLE);
    assert!(drv.tx_completions(0).is_empty(), "a disabled ring was used");
    drv.set_pair_enabled(0, true).expect("SET_VRING_ENABLE 1");
    let got = drv.recv_frames_until(0, queued.len(), TIMEOUT);
    assert_eq!(got.len(), queued.len());
    for (g, f) in got.iter().zip(&queued) {
        assert!(g.data == echoed(f));
    }
    assert_eq!(drv.tx_completions_until(0, 3, TIMEOUT).len(), 3);
    tally.add(&queued);
    round_trip_plain(&mut drv, 0, &first);
    tally.add(&first);
    assert_eq!(drv.used_idx(0, false).unwrap(), 17);
    assert_eq!(drv.used_idx(0, true).unwrap(), 17);
    assert_no_violations(&drv);
    let c = echo.stop();
    assert_clean_counts(&c[0], tally, "disable and enable");
}

#[test]
fn a_second_frontend_waits_for_the_first_to_leave() {
    let echo = Echo::server("two-frontends", |_| {});
    let mut tally = [Tally::default()];
    let mut first = echo.connect(DriverOpts::default());
    traffic_flows(&mut first, 1, 0, &mut tally);
    let path = echo.socket().to_owned();
    let second = std::thread::spawn(move || TestDriver::connect(&path, DriverOpts::default()));
    std::thread::sleep(SETTLE);
    // The port serves one frontend at a time: the first is still served.
    assert_eq!(echo.port().connections(), 1);
    traffic_flows(&mut first, 1, 1, &mut tally);
    assert_no_violations(&first);
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
    assert_no_violations(&drv);
    let c = echo.stop();
    assert_clean_counts(&c[0], tally[0], "mem table again");
}

// ===== 4. hostile guests =====

/// A port with an MTU of 1500 and two pairs, and a driver with indirect descriptors.
fn hostile_setup(name: &str) -> (Echo, TestDriver) {
    let echo = Echo::server(name, |cfg| {
        cfg.queue_pairs = 2;
        cfg.mtu = Some(1500);
    });
    let drv = echo.connect(DriverOpts {
        queue_pairs: 2,
        active_pairs: 2,
        ..DriverOpts::default()
    });
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

/// Writes descriptors into guest memory at `gpa` (an indirect table).
fn write_table(drv: &TestDriver, gpa: u64, descs: &[(u64, u32, u16, u16)]) {
    let mut b = Vec::with_capacity(16 * descs.len());
    for &(addr, len, flags, next) in descs {
        b.extend_from_slice(&addr.to_le_bytes());
        b.extend_from_slice(&len.to_le_bytes());
        b.extend_from_slice(&flags.to_le_bytes());
        b.extend_from_slice(&next.to_le_bytes());
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
    let deadline = Instant::now() + if in_ring { TIMEOUT } else { SETTLE };
    while used.is_empty() && Instant::now() < deadline {
        drv.tx_completions(qp);
        used.extend(drv.take_raw_used(qp, false));
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

/// Sends a driver-built chain that the backend must drop for `reason`, and checks its
/// completion comes back.
fn expect_tx_drop(
    echo: &Echo,
    drv: &mut TestDriver,
    hdr: &[u8],
    f: &[u8],
    layout: TxLayout,
    reason: DropReason,
) {
    let before = echo.counters(0);
    drv.send_frame(0, hdr, f, layout).expect("send");
    drv.kick_tx(0);
    let done = drv.tx_completions_until(0, 1, TIMEOUT);
    assert_eq!(done.len(), 1, "the dropped chain is returned");
    assert_eq!(done[0].1, 0);
    wait_until(&format!("a {} tx drop", reason.name()), || {
        echo.counters(0).tx.drops_for(reason) > before.tx.drops_for(reason)
    });
    let after = echo.counters(0);
    assert_eq!(after.tx.packets, before.tx.packets);
    assert_eq!(after.tx.dropped(), before.tx.dropped() + 1, "{after:?}");
    assert_eq!(after.rx, before.rx, "nothing reached the echo");
}

#[test]
fn hostile_descriptors_outside_guest_memory() {
    let (echo, mut drv) = hostile_setup("h-addr");
    let o = drv.opts().clone();
    let (below, end, wrap) = (0x1000, o.gpa_base + o.mem_size - 40, u64::MAX - 20);
    let d = drv.reserve_desc(0, false).expect("descriptor");
    for (addr, len) in [
        (below, 72),
        (end, 72),
        (wrap, 72),
        (o.gpa_base + o.mem_size, 1),
    ] {
        drv.write_desc(0, false, d, addr, len, 0, 0)
            .expect("write desc");
        expect_raw_tx_drop(&echo, &mut drv, 0, d, DropReason::BadAddress);
    }
    // Second descriptor of a chain outside memory.
    let d2 = drv.reserve_desc(0, false).expect("descriptor");
    let (gpa, len) = tx_buffer(&mut drv);
    drv.write_desc(0, false, d, gpa, len, DESC_F_NEXT, d2)
        .unwrap();
    drv.write_desc(0, false, d2, below, 64, 0, 0).unwrap();
    expect_raw_tx_drop(&echo, &mut drv, 0, d, DropReason::BadAddress);
    drv.release_desc(0, false, d).unwrap();
    drv.release_desc(0, false, d2).unwrap();
    hostile_epilogue(echo, drv, Tally::default(), &[(DropReason::BadAddress, 5)]);
}

#[test]
fn hostile_descriptor_loop() {
    let (echo, mut drv) = hostile_setup("h-loop");
    let (gpa, len) = tx_buffer(&mut drv);
    let a = drv.reserve_desc(0, false).expect("descriptor");
    let b = drv.reserve_desc(0, false).expect("descriptor");
    // a -> b -> a -> ...: a loop of real buffers.
    drv.write_desc(0, false, a, gpa, len, DESC_F_NEXT, b)
        .unwrap();
    drv.write_desc(0, false, b, gpa, len, DESC_F_NEXT, a)
        .unwrap();
    expect_raw_tx_drop(&echo, &mut drv, 0, a, DropReason::BadDescriptor);
    // A descriptor that points at itself.
    drv.write_desc(0, false, a, gpa, len, DESC_F_NEXT, a)
        .unwrap();
    expect_raw_tx_drop(&echo, &mut drv, 0, a, DropReason::BadDescriptor);
    drv.release_desc(0, false, a).unwrap();
    drv.release_desc(0, false, b).unwrap();
    hostile_epilogue(
        echo,
        drv,
        Tally::default(),
        &[(DropReason::BadDescriptor, 2)],
    );
}

#[test]
fn hostile_descriptor_loop_of_empty_buffers() {
    let (echo, mut drv) = hostile_setup("h-loop0");
    let a = drv.reserve_desc(0, false).expect("descriptor");
    let b = drv.reserve_desc(0, false).expect("descriptor");
    drv.write_desc(0, false, a, 0, 0, DESC_F_NEXT, b).unwrap();
    drv.write_desc(0, false, b, 0, 0, DESC_F_NEXT, a).unwrap();
    expect_raw_tx_drop(&echo, &mut drv, 0, a, DropReason::BadDescriptor);
    // A `next` outside the ring.
    drv.write_desc(0, false, a, 0, 0, DESC_F_NEXT, 4096)
        .unwrap();
    expect_raw_tx_drop(&echo, &mut drv, 0, a, DropReason::BadDescriptor);
    drv.release_desc(0, false, a).unwrap();
    drv.release_desc(0, false, b).unwrap();
    hostile_epilogue(
        echo,
        drv,
        Tally::default(),
        &[(DropReason::BadDescriptor, 2)],
    );
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
    let (echo, mut drv) = hostile_setup("h-write");
    let (gpa, len) = tx_buffer(&mut drv);
    let a = drv.reserve_desc(0, false).expect("descriptor");
    let b = drv.reserve_desc(0, false).expect("descriptor");
    drv.write_desc(0, false, a, gpa, len, DESC_F_WRITE, 0)
        .unwrap();
    expect_raw_tx_drop(&echo, &mut drv, 0, a, DropReason::BadDescriptor);
    drv.write_desc(0, false, a, gpa, len, DESC_F_NEXT, b)
        .unwrap();
    drv.write_desc(0, false, b, gpa, 64, DESC_F_WRITE, 0)
        .unwrap();
    expect_raw_tx_drop(&echo, &mut drv, 0, a, DropReason::BadDescriptor);
    drv.release_desc(0, false, a).unwrap();
    drv.release_desc(0, false, b).unwrap();
    hostile_epilogue(
        echo,
        drv,
        Tally::default(),
        &[(DropReason::BadDescriptor, 2)],
    );
}

#[test]
fn hostile_indirect_tables() {
    let (echo, mut drv) = hostile_setup("h-indirect");
    let (gpa, len) = tx_buffer(&mut drv);
    let d = drv.reserve_desc(0, false).expect("descriptor");
    let inner = drv.alloc_guest(16).unwrap();
    let outer = drv.alloc_guest(32).unwrap();
    write_table(&drv, inner, &[(gpa, len, 0, 0)]);
    // An indirect descriptor inside an indirect table.
    write_table(&drv, outer, &[(inner, 16, DESC_F_INDIRECT, 0)]);
    drv.write_desc(0, false, d, outer, 16, DESC_F_INDIRECT, 0)
        .unwrap();
    expect_raw_tx_drop(&echo, &mut drv, 0, d, DropReason::BadDescriptor);
    // ... after a valid descriptor of the same table.
    write_table(
        &drv,
        outer,
        &[(gpa, len, DESC_F_NEXT, 1), (inner, 16, DESC_F_INDIRECT, 0)],
    );
    drv.write_desc(0, false, d, outer, 32, DESC_F_INDIRECT, 0)
        .unwrap();
    expect_raw_tx_drop(&echo, &mut drv, 0, d, DropReason::BadDescriptor);
    // INDIRECT together with NEXT.
    drv.write_desc(0, false, d, inner, 16, DESC_F_INDIRECT | DESC_F_NEXT, 0)
        .unwrap();
    expect_raw_tx_drop(&echo, &mut drv, 0, d, DropReason::BadDescriptor);
    // A table whose length is not a multiple of 16, and an empty one.
    for l in [15, 24, 0] {
        drv.write_desc(0, false, d, inner, l, DESC_F_INDIRECT, 0)
            .unwrap();
        expect_raw_tx_drop(&echo, &mut drv, 0, d, DropReason::BadDescriptor);
    }
    // A loop inside a table.
    write_table(
        &drv,
        outer,
        &[(gpa, len, DESC_F_NEXT, 1), (gpa, len, DESC_F_NEXT, 0)],
    );
    drv.write_desc(0, false, d, outer, 32, DESC_F_INDIRECT, 0)
        .unwrap();
    expect_raw_tx_drop(&echo, &mut drv, 0, d, DropReason::BadDescriptor);
    // A table outside guest memory.
    drv.write_desc(0, false, d, 0x1000, 16, DESC_F_INDIRECT, 0)
        .unwrap();
    expect_raw_tx_drop(&echo, &mut drv, 0, d, DropReason::BadAddress);
    drv.release_desc(0, false, d).unwrap();
    hostile_epilogue(
        echo,
        drv,
        Tally::default(),
        &[(DropReason::BadDescriptor, 7), (DropReason::BadAddress, 1)],
    );
}

#[test]
fn hostile_indirect_descriptor_without_the_feature() {
    let echo = Echo::server("h-noindirect", |_| {});
    let mut drv = echo.connect(DriverOpts {
        features: DEFAULT_FEATURES & !bits::INDIRECT_DESC,
        ..DriverOpts::default()
    });
    assert_eq!(drv.acked_features() & bits::INDIRECT_DESC, 0);
    let (gpa, len) = tx_buffer(&mut drv);
    let table = drv.alloc_guest(16).unwrap();
    write_table(&drv, table, &[(gpa, len, 0, 0)]);
    let d = drv.reserve_desc(0, false).expect("descriptor");
    drv.write_desc(0, false, d, table, 16, DESC_F_INDIRECT, 0)
        .unwrap();
    expect_raw_tx_drop(&echo, &mut drv, 0, d, DropReason::BadDescriptor);
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
    // A header and no frame.
    expect_tx_drop(
        &echo,
        &mut drv,
        &hdr,
        &[],
        TxLayout::Single,
        DropReason::TooShort,
    );
    // Less than a header.
    expect_tx_drop(
        &echo,
        &mut drv,
        &hdr[..5],
        &[],
        TxLayout::Single,
        DropReason::TooShort,
    );
    expect_tx_drop(
        &echo,
        &mut drv,
        &hdr,
        &[],
        TxLayout::Segments(3),
        DropReason::TooShort,
    );
    // A descriptor of length 0 (its address is never looked at).
    let d = drv.reserve_desc(0, false).expect("descriptor");
    drv.write_desc(0, false, d, 0, 0, 0, 0).unwrap();
    expect_raw_tx_drop(&echo, &mut drv, 0, d, DropReason::TooShort);
    drv.release_desc(0, false, d).unwrap();
    hostile_epilogue(echo, drv, Tally::default(), &[(DropReason::TooShort, 4)]);
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
    for len in [1519, 9000] {
        expect_tx_drop(
            &echo,
            &mut drv,
            &hdr,
            &frame(len, 2),
            TxLayout::Single,
            DropReason::TooLong,
        );
    }
    expect_tx_drop(
        &echo,
        &mut drv,
        &hdr,
        &frame(4000, 3),
        TxLayout::Segments(4),
        DropReason::TooLong,
    );
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
    let d = drv.reserve_desc(0, false).expect("descriptor");
    drv.write_desc(0, false, d, table, 16 * 300, DESC_F_INDIRECT, 0)
        .unwrap();
    expect_raw_tx_drop(&echo, &mut drv, 0, d, DropReason::TooManySegments);
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
    drv.release_desc(0, false, d).unwrap();
    hostile_epilogue(
        echo,
        drv,
        Tally::default(),
        &[(DropReason::TooManySegments, 1)],
    );
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
    std::thread::sleep(SETTLE);
    assert!(drv.tx_completions(0).is_empty(), "a broken ring was used");
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
    assert_eq!(
        (c[0].tx.packets, c[0].tx.bytes),
        (tally[0].frames + 10, tally[0].bytes + 10 * 1514)
    );
    assert_eq!(
        (c[0].rx.packets, c[0].rx.bytes),
        (tally[0].frames, tally[0].bytes)
    );
    assert_eq!(c[0].rx.drops_for(DropReason::NoBuffers), 10);
    assert_eq!(c[0].rx.dropped(), 10);
    assert_eq!(c[0].tx.dropped(), 0);
}

// ===== 5. protocol =====

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
    assert_no_violations(&drv);
    let c = echo.stop();
    assert_clean_counts(&c[0], tally[0], "after refused features");
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
    assert_no_violations(&drv);
    let c = echo.stop();
    assert_clean_counts(&c[0], tally[0], "after garbage");
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
            std::thread::sleep(SETTLE);
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
    let mut drv = echo.connect(DriverOpts {
        mem_table: MemTableMode::AddMemReg,
        split_regions: true,
        ..DriverOpts::default()
    });
    assert_eq!(drv.max_mem_slots(), Some(509), "GET_MAX_MEM_SLOTS");
    let mut tally = Tally::default();
    let echo_batch = |drv: &mut TestDriver, batch: usize, tally: &mut Tally| {
        refill_rx(drv, 0, 32, 2048, RxLayout::Split(2));
        let frames: Vec<Vec<u8>> = SIZES
            .iter()
            .enumerate()
            .map(|(i, &l)| frame(l, seed(0, batch, i)))
            .collect();
        round_trip(drv, 0, &NetHdr::default(), &frames, TxLayout::Segments(4));
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
    echo_batch(&mut drv, 1, &mut tally);
    for r in &regions {
        drv.frontend().remove_mem_region(r).expect("REM_MEM_REG");
    }
    echo_batch(&mut drv, 2, &mut tally);
    assert_no_violations(&drv);
    let c = echo.stop();
    assert_clean_counts(&c[0], tally, "memory slots");
}

// ===== 6. offloads =====

const OFFLOAD_FEATURES: u64 = DEFAULT_FEATURES
    | bits::CSUM
    | bits::GUEST_CSUM
    | bits::HOST_TSO4
    | bits::GUEST_TSO4
    | bits::HOST_TSO6
    | bits::GUEST_TSO6
    | bits::HOST_ECN
    | bits::GUEST_ECN;

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
    let csum = NetHdr {
        flags: net_hdr::F_NEEDS_CSUM,
        csum_start: 34,
        csum_offset: 16,
        ..NetHdr::default()
    };
    let tso4 = NetHdr {
        flags: net_hdr::F_NEEDS_CSUM,
        gso_type: net_hdr::GSO_TCPV4,
        hdr_len: 54,
        gso_size: 1448,
        csum_start: 34,
        csum_offset: 16,
        num_buffers: 0,
    };
    let tso6_ecn = NetHdr {
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
        (NetHdr::default(), 1514),
    ];
    for (i, (hdr, len)) in cases.into_iter().enumerate() {
        refill_rx(&mut drv, 0, 64, 2048, RxLayout::Single);
        let frames = vec![frame(len, seed(0, i, 0))];
        let got = round_trip(&mut drv, 0, &hdr, &frames, TxLayout::HeaderSplit);
        assert_eq!(usize::from(got[0].num_buffers), (12 + len).div_ceil(2048));
        tally.add(&frames);
    }
    assert_no_violations(&drv);
    let c = echo.stop();
    assert_clean_counts(&c[0], tally, "offloads");
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
    let csum = NetHdr {
        flags: net_hdr::F_NEEDS_CSUM,
        csum_start: 34,
        csum_offset: 16,
        ..NetHdr::default()
    };
    let tso4 = NetHdr {
        gso_type: net_hdr::GSO_TCPV4,
        hdr_len: 54,
        gso_size: 1448,
        ..csum
    };
    for (n, (hdr, len)) in [(csum, 1514), (tso4, 9000)].into_iter().enumerate() {
        let b = hdr.to_bytes(drv.hdr_len());
        drv.send_frame(0, &b, &frame(len, n as u32), TxLayout::Single)
            .unwrap();
        drv.kick_tx(0);
        assert_eq!(drv.tx_completions_until(0, 1, TIMEOUT).len(), 1);
        wait_until("an offload_unsupported rx drop", || {
            echo.counters(0)
                .rx
                .drops_for(DropReason::OffloadUnsupported)
                == n as u64 + 1
        });
        assert!(drv.recv_frames(0).is_empty());
    }
    let plain = vec![frame(1514, 9)];
    round_trip_plain(&mut drv, 0, &plain);
    assert_no_violations(&drv);
    let c = echo.stop();
    assert_eq!((c[0].tx.packets, c[0].tx.bytes), (3, 1514 + 9000 + 1514));
    assert_eq!(c[0].tx.dropped(), 0);
    assert_eq!((c[0].rx.packets, c[0].rx.bytes), (1, 1514));
    assert_eq!(c[0].rx.drops_for(DropReason::OffloadUnsupported), 2);
    assert_eq!(c[0].rx.dropped(), 2);
}

// ===== 7. packed rings =====

#[test]
fn packed_rings_are_offered_the_driver_uses_split_rings() {
    let echo = Echo::server("packed-offer", |_| {});
    let mut drv = echo.connect(DriverOpts {
        features: DEFAULT_FEATURES | bits::RING_PACKED | bits::IN_ORDER,
        ..DriverOpts::default()
    });
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
    round_trip_plain(&mut drv, 0, &frames);
    tally[0].add(&frames);
    assert_no_violations(&drv);
    let c = echo.stop();
    assert_clean_counts(&c[0], tally[0], "in order");
}
