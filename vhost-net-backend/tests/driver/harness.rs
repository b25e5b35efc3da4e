// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The echo port, the frames it reflects and the checks every test shares (see the
//! crate docs).

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use vhost_net_backend::device::bits;
use vhost_net_backend::poll::Token;
use vhost_net_backend::test_utils::{
    encode_hdr, DriverOpts, MemTableMode, RxFrame, RxLayout, TestDriver, TxLayout, VirtioNetHdr,
};
use vhost_net_backend::{DropReason, Poller, Port, PortConfig, QueueCounters, QueuePair};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

/// How long anything that should happen may take.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(5);
/// Frames per echo burst.
pub(crate) const BURST: usize = 32;
/// Longest sleep of the echo thread without an event.
pub(crate) const IDLE_WAIT: Duration = Duration::from_millis(100);
/// Poller token of the echo thread's stop eventfd.
pub(crate) const STOP_TOKEN: u64 = u64::MAX;

pub(crate) use vhost_net_backend::test_utils::flags::{DESC_F_INDIRECT, DESC_F_NEXT, DESC_F_WRITE};

/// The messages the process logged at `INFO` and above (ports log from their own threads, so
/// the capture is process-wide), from [`LogCapture::install`] on.
pub(crate) struct LogCapture;

static CAPTURED: Mutex<String> = Mutex::new(String::new());

impl LogCapture {
    /// Installs the capturing subscriber as the global default (once).
    pub(crate) fn install() -> LogCapture {
        static ONCE: Once = Once::new();
        ONCE.call_once(|| {
            tracing::subscriber::set_global_default(Capture).expect("the only subscriber");
        });
        LogCapture
    }

    /// Whether a message logged so far contains `s`.
    pub(crate) fn contains(&self, s: &str) -> bool {
        CAPTURED
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(s)
    }
}

/// A `tracing` subscriber that appends every event's message to [`CAPTURED`].
struct Capture;

impl tracing::Subscriber for Capture {
    fn enabled(&self, meta: &tracing::Metadata<'_>) -> bool {
        *meta.level() <= tracing::Level::INFO
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct Message<'a>(&'a mut String);
        impl tracing::field::Visit for Message<'_> {
            fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                if f.name() == "message" {
                    self.0.push_str(&format!("{v:?}\n"));
                }
            }
        }
        let mut log = CAPTURED.lock().unwrap_or_else(PoisonError::into_inner);
        event.record(&mut Message(&mut log));
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// A directory removed with everything in it on drop.
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    pub(crate) fn new(name: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "vhu-drv-{}-{}-{name}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&p).expect("create temp dir");
        TempDir(p)
    }

    pub(crate) fn path(&self) -> &Path {
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
pub(crate) struct PairCounters {
    /// Guest TX: frames the echo dequeued.
    pub(crate) tx: QueueCounters,
    /// Guest RX: frames the echo delivered.
    pub(crate) rx: QueueCounters,
}

/// What the echo thread hands back when it stops.
pub(crate) struct EchoOutcome {
    pub(crate) qps: Vec<QueuePair>,
    pub(crate) missed_kicks: u64,
}

/// A port served by an echo data-plane thread; see the module docs.
pub(crate) struct Echo {
    pub(crate) port: Option<Port>,
    pub(crate) socket: PathBuf,
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) wake: Arc<EventFd>,
    /// Passes of the echo thread over every queue pair, completed so far.
    pub(crate) passes: Arc<AtomicU64>,
    pub(crate) thread: Option<JoinHandle<EchoOutcome>>,
    pub(crate) _dir: TempDir,
}

impl Echo {
    /// A server-role port on a fresh socket; `tweak` adjusts its configuration.
    pub(crate) fn server(name: &str, tweak: impl FnOnce(&mut PortConfig)) -> Echo {
        let dir = TempDir::new(name);
        let mut cfg = PortConfig::new(name, dir.path().join("sock"));
        tweak(&mut cfg);
        Echo::start(cfg, dir)
    }

    /// Starts the port and its echo thread; `dir` lives as long as the port.
    pub(crate) fn start(cfg: PortConfig, dir: TempDir) -> Echo {
        let socket = cfg.socket.clone();
        let (port, qps) = Port::new(cfg).expect("port starts");
        let stop = Arc::new(AtomicBool::new(false));
        let wake = Arc::new(EventFd::new(EFD_NONBLOCK).expect("eventfd"));
        let passes = Arc::new(AtomicU64::new(0));
        let (s, w, n) = (Arc::clone(&stop), Arc::clone(&wake), Arc::clone(&passes));
        let thread = std::thread::Builder::new()
            .name(format!("echo-{}", port.name()))
            .spawn(move || echo_loop(qps, &s, &w, &n))
            .expect("spawn the echo thread");
        Echo {
            port: Some(port),
            socket,
            stop,
            wake,
            passes,
            thread: Some(thread),
            _dir: dir,
        }
    }

    pub(crate) fn port(&self) -> &Port {
        self.port.as_ref().expect("port is running")
    }

    pub(crate) fn socket(&self) -> &Path {
        &self.socket
    }

    /// Connects a driver and checks both sides agree on the acked features.
    pub(crate) fn connect(&self, opts: DriverOpts) -> TestDriver {
        let drv = TestDriver::connect(&self.socket, opts).expect("driver connects");
        self.check_features(&drv);
        drv
    }

    pub(crate) fn check_features(&self, drv: &TestDriver) {
        wait_until("the port to see the acked features", || {
            self.port().acked_features() == drv.acked_features()
        });
        assert!(self.port().is_connected());
    }

    /// The port's live counters of pair `qp`.
    pub(crate) fn counters(&self, qp: u16) -> PairCounters {
        let i = 2 * usize::from(qp);
        let p = self.port();
        PairCounters {
            rx: p.vring_counters(i).expect("rx vring exists"),
            tx: p.vring_counters(i + 1).expect("tx vring exists"),
        }
    }

    /// Waits until the echo thread has made two complete passes over every queue pair since
    /// the call (waking it if it sleeps): everything the driver published before, on any ring,
    /// has then been looked at by a burst that also finished counting. The positive event a
    /// check that something did *not* happen waits for.
    pub(crate) fn sync(&self) {
        let start = self.passes.load(Ordering::Acquire);
        wait_until("two passes of the echo thread", || {
            let _ = self.wake.write(1);
            self.passes.load(Ordering::Acquire) >= start + 2
        });
    }

    /// Waits until pair `qp` has counted `tx` guest-TX frames and `rx` guest-RX frames, each
    /// delivered or dropped, and returns its counters. A burst adds its counts after it
    /// published its used entries and signalled the guest, so the driver can see a frame (and
    /// its interrupt) before the port counts it.
    pub(crate) fn settle(&self, qp: u16, tx: u64, rx: u64) -> PairCounters {
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
    pub(crate) fn stop(mut self) -> Vec<PairCounters> {
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

    pub(crate) fn join(&mut self) -> Option<EchoOutcome> {
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
pub(crate) fn echo_loop(
    mut qps: Vec<QueuePair>,
    stop: &AtomicBool,
    wake: &EventFd,
    passes: &AtomicU64,
) -> EchoOutcome {
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
        passes.fetch_add(1, Ordering::Release);
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
            if poller.fired().any(|t| t == Token(STOP_TOKEN)) {
                // A wake-up from [`Echo::sync`] (or the stop): level-triggered, so consume it.
                let _ = wake.read();
            }
        }
    }
    EchoOutcome { qps, missed_kicks }
}

/// Reflects up to [`BURST`] frames of one pair, MACs swapped. Returns frames dequeued.
pub(crate) fn echo_burst(qp: &mut QueuePair) -> usize {
    qp.echo_burst(BURST)
}

/// Polls `cond` every millisecond until it holds; fails the test after [`TIMEOUT`].
pub(crate) fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + TIMEOUT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

// ===== frames and traffic =====

/// A test frame: Ethernet header (distinct MACs, a local EtherType), then a payload that
/// depends on `seed` and the offset.
pub(crate) fn frame(len: usize, seed: u32) -> Vec<u8> {
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
pub(crate) fn echoed(f: &[u8]) -> Vec<u8> {
    let mut e = f.to_vec();
    if e.len() >= 12 {
        let (dst, src) = e.split_at_mut(6);
        dst.swap_with_slice(&mut src[..6]);
    }
    e
}

pub(crate) fn seed(qp: u16, batch: usize, i: usize) -> u32 {
    (u32::from(qp) << 24) ^ ((batch as u32) << 8) ^ i as u32
}

/// Frames and bytes moved, as the driver saw them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    pub(crate) frames: u64,
    pub(crate) bytes: u64,
}

impl Tally {
    pub(crate) fn add(&mut self, frames: &[Vec<u8>]) {
        self.frames += frames.len() as u64;
        self.bytes += frames.iter().map(|f| f.len() as u64).sum::<u64>();
    }
}

/// Both directions of a pair moved exactly `t`, without a drop.
pub(crate) fn assert_clean_counts(c: &PairCounters, t: Tally, what: &str) {
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

/// Asserts the counts a pair ended with: `tx` and `rx` as (packets, bytes), and `rx_drops`
/// receive drops, all for `reason`.
pub(crate) fn assert_rx_drop_counts(
    c: &PairCounters,
    tx: (u64, u64),
    rx: (u64, u64),
    reason: DropReason,
    rx_drops: u64,
) {
    assert_eq!((c.tx.packets, c.tx.bytes), tx);
    assert_eq!((c.rx.packets, c.rx.bytes), rx);
    assert_eq!(c.rx.drops_for(reason), rx_drops);
    assert_eq!(c.rx.dropped(), rx_drops);
}

/// Sends `frame` behind `hdr` on pair 0 and waits for its TX completion and until the port
/// has counted `rx_drops` receive drops for `reason` in all: a frame the guest cannot take.
pub(crate) fn send_to_rx_drop(
    echo: &Echo,
    drv: &mut TestDriver,
    hdr: &[u8],
    frame: &[u8],
    reason: DropReason,
    rx_drops: u64,
) {
    drv.send_frame(0, hdr, frame, TxLayout::Single)
        .expect("send");
    drv.kick_tx(0);
    assert_eq!(drv.tx_completions_until(0, 1, TIMEOUT).len(), 1);
    wait_until(&format!("{rx_drops} {} rx drops", reason.name()), || {
        echo.counters(0).rx.drops_for(reason) == rx_drops
    });
}

/// A port `name` with the default configuration and a driver with `opts` connected to it that
/// has carried a first batch of traffic on pair 0, counted in the tally returned.
pub(crate) fn serving(name: &str, opts: DriverOpts) -> (Echo, TestDriver, [Tally; 1]) {
    let echo = Echo::server(name, |_| {});
    let mut drv = echo.connect(opts);
    let mut tally = [Tally::default()];
    traffic_flows(&mut drv, 1, 0, &mut tally);
    (echo, drv, tally)
}

/// A port `name` with the default configuration and a default driver connected to it, with 64
/// receive buffers of 2 KiB posted on pair 0.
pub(crate) fn with_rx_buffers(name: &str) -> (Echo, TestDriver) {
    let echo = Echo::server(name, |_| {});
    let mut drv = echo.connect(DriverOpts::default());
    refill_rx(&mut drv, 0, 64, 2048, RxLayout::Single);
    (echo, drv)
}

/// Options for a driver that uses two queue pairs.
pub(crate) fn two_pairs() -> DriverOpts {
    DriverOpts {
        queue_pairs: 2,
        active_pairs: 2,
        ..DriverOpts::default()
    }
}

/// Options for a driver that gives the guest's memory in two regions, one
/// `VHOST_USER_ADD_MEM_REG` each.
pub(crate) fn regions_added_one_by_one() -> DriverOpts {
    DriverOpts {
        mem_table: MemTableMode::AddMemReg,
        split_regions: true,
        ..DriverOpts::default()
    }
}

/// A port `name` with the default configuration, and a driver connected to it that offers
/// `features`.
pub(crate) fn connect_offering(name: &str, features: u64) -> (Echo, TestDriver) {
    let echo = Echo::server(name, |_| {});
    let drv = echo.connect(DriverOpts {
        features,
        ..DriverOpts::default()
    });
    (echo, drv)
}

/// Stops the port after a run whose pair 0 carried exactly `tally` and nothing else, with no
/// ring violations ([`assert_no_violations`], [`assert_clean_counts`]).
pub(crate) fn stop_clean(echo: Echo, drv: &TestDriver, tally: Tally, what: &str) {
    assert_no_violations(drv);
    let c = echo.stop();
    assert_clean_counts(&c[0], tally, what);
}

/// Tops pair `qp`'s receive ring up to `want` buffers in flight, and kicks it.
pub(crate) fn refill_rx(drv: &mut TestDriver, qp: u16, want: usize, len: u32, layout: RxLayout) {
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
pub(crate) fn round_trip(
    drv: &mut TestDriver,
    qp: u16,
    hdr: &VirtioNetHdr,
    frames: &[Vec<u8>],
    layout: TxLayout,
) -> Vec<RxFrame> {
    let hdr_bytes = encode_hdr(hdr, drv.hdr_len());
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
            VirtioNetHdr {
                num_buffers: 0,
                ..h
            },
            VirtioNetHdr {
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

/// [`round_trip_plain`], counting `frames` in `tally`.
pub(crate) fn round_trip_tallied(
    drv: &mut TestDriver,
    qp: u16,
    frames: &[Vec<u8>],
    tally: &mut Tally,
) -> Vec<RxFrame> {
    let got = round_trip_plain(drv, qp, frames);
    tally.add(frames);
    got
}

/// [`round_trip`] of plain frames (no offloads), one descriptor each.
pub(crate) fn round_trip_plain(drv: &mut TestDriver, qp: u16, frames: &[Vec<u8>]) -> Vec<RxFrame> {
    round_trip(drv, qp, &VirtioNetHdr::default(), frames, TxLayout::Single)
}

/// Posts receive buffers and echoes a 60- and a 1514-byte frame on pair `qp`.
pub(crate) fn traffic_on(drv: &mut TestDriver, qp: u16, batch: usize, tally: &mut Tally) {
    refill_rx(drv, qp, 16, 2048, RxLayout::Single);
    let frames = vec![
        frame(60, seed(qp, batch, 0)),
        frame(1514, seed(qp, batch, 1)),
    ];
    round_trip_plain(drv, qp, &frames);
    tally.add(&frames);
}

/// [`traffic_on`] each of pairs `0..pairs`.
pub(crate) fn traffic_flows(drv: &mut TestDriver, pairs: u16, batch: usize, tally: &mut [Tally]) {
    for qp in 0..pairs {
        traffic_on(drv, qp, batch, &mut tally[usize::from(qp)]);
    }
}

pub(crate) fn assert_no_violations(drv: &TestDriver) {
    assert!(
        drv.violations().is_empty(),
        "driver saw violations: {:?}",
        drv.violations()
    );
}

// ===== shared by several sections =====

/// Frame sizes that every echo scenario goes through.
pub(crate) const SIZES: [usize; 4] = [60, 1514, 4000, 9000];

/// Sends a driver-built chain that the backend must drop for `reason`, and checks its
/// completion comes back.
pub(crate) fn expect_tx_drop(
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
