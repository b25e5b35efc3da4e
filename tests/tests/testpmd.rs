// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! End-to-end tests: `dpdk-testpmd` as a virtio-user frontend (the "guest")
//! against a loopback backend on one vhost-user socket.
//!
//! The backend is our `echo` example (`echo_*` tests) or DPDK's own vhost
//! PMD with `io` forwarding (`dpdk_vhost_*` tests: the same checks against
//! the reference, which validates the harness and the checks themselves).
//! Both put every frame the guest transmits on a queue pair back into that
//! queue pair's receive ring; testpmd's `mac` forwarding sends every frame it
//! receives out again, so the `start tx_first 32` frames circulate until
//! `stop`.
//!
//! # The matrix
//!
//! Backend socket role (backend server, or testpmd `server=1` with the
//! backend as client) x `queues` 1 and 2 x `mrg_rxbuf` 0 and 1, each for at
//! least [`TARGET_RX`] frames received by testpmd (well under a second of
//! traffic; start-up dominates, a few seconds per test).
//!
//! The virtqueues are 1024 entries (`queue_size=1024`; virtio-user's
//! default is 256, which `--rxd`/`--txd` cannot raise): the 32 x 32 frames
//! `tx_first` injects per queue pair then fit into the guest's RX ring, so a
//! loopback backend never has to drop one. With 256-entry rings DPDK's vhost
//! PMD drops 768 of the 1024 at injection (and then circulates 256).
//!
//! # The checks
//!
//! After the main run testpmd stops transmitting, switches to `rxonly` and
//! forwards again until every frame it transmitted came back and its
//! counters then stand still (standing still alone would end early on a
//! stalled backend). This drains the frames
//! that were in flight at `stop`, and it is needed: `mac` forwarding stops
//! polling RX at once, and in practice all 1024 circulating frames per queue
//! pair are then sitting delivered, but unreceived, in the guest's RX ring
//! (the backend counted them, testpmd not yet). `start` flushes the RX
//! queues, which the ethdev counters include. With nothing in flight, the
//! counts must agree exactly, with no allowance:
//!
//! * testpmd: no RX errors and no RX misses;
//! * backend dequeued (`tx_packets`) == testpmd's TX-packets, and the same for
//!   bytes;
//! * backend delivered (`rx_packets`) == testpmd's RX-packets, and bytes;
//! * the backend dropped nothing, and nothing stayed inside it:
//!   `tx_packets == rx_packets`;
//! * with 2 queue pairs, both carried traffic in both directions (backend's
//!   per-queue-pair counters and testpmd's per-stream forward statistics:
//!   one forwarding core polls both queues, `--rxq=2 --txq=2`);
//! * the negotiated virtio features, as testpmd logged them and (echo) as our
//!   port logged them (both required, and equal),
//!   have `MRG_RXBUF`, `RING_PACKED` and (echo) `IN_ORDER` exactly when asked;
//! * testpmd exits cleanly. The frontend quits first, while the backend
//!   still runs, so the backend also takes a clean disconnect before it is
//!   stopped (echo: SIGTERM; DPDK: `quit`) and reports its counters.
//!
//! # Running
//!
//! Root and the peers are needed (`scripts/test.sh` installs them); the
//! tests are `#[ignore]`d otherwise. They busy-poll both cores and must not
//! run concurrently: run with `--test-threads=1`; a process-wide lock
//! serialises them anyway.
//!
//! Environment:
//! * `VHU_TEST_HUGEPAGES=1`: run every case on hugepages; the default is
//!   `--no-huge`, except for the `*_huge` subset, which always runs on
//!   hugepages (DPDK's and our memory mapping of hugetlbfs files). A case on
//!   hugepages fails unless 512 free 2 MiB pages are there (never falls
//!   back).
//! * `VHU_ECHO_ARGS`: extra arguments for `echo` (whitespace-separated).
//! * `VHU_ECHO_BIN`, `VHU_TESTPMD_BIN`: the binaries.
//!
//! Throughput is not measured here (speed is a benchmark's business, not a
//! test's): see `benches/vs-dpdk.sh`.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use vhu_tests::echo::{Echo, QpCounters};
use vhu_tests::features::VIRTIO_USER_LOCAL_BITS;
use vhu_tests::process::RunDir;
use vhu_tests::testpmd::{
    self, feature_names, hugepages_available, last_hex_after, start_vhost_backend, FrontendOpts,
    PortStats, Testpmd, VhostBackendOpts, LINK_TIMEOUT, READY_TIMEOUT,
};

/// Frames testpmd must have received before the run stops.
const TARGET_RX: u64 = 1_000_000;

/// Bursts of 32 frames injected per stream by `start tx_first`.
const TX_FIRST_BURSTS: u32 = 32;

/// Virtqueue size of the correctness tests: holds all the frames
/// `tx_first` injects on a queue pair (32 x 32), so a loopback backend never
/// has to drop one.
const RING_SIZE: u16 = 1024;

/// How long the traffic may take to reach [`TARGET_RX`].
const TRAFFIC_TIMEOUT: Duration = Duration::from_secs(60);

/// How long the counters must stand still, once every transmitted frame
/// came back, for the drain to be complete.
const DRAIN_QUIET: Duration = Duration::from_millis(300);

/// How long the drain may take.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// `MRG_RXBUF` in the virtio-net feature bits.
const VIRTIO_NET_F_MRG_RXBUF: u64 = 1 << 15;

/// `RING_PACKED` in the virtio feature bits.
const VIRTIO_F_RING_PACKED: u64 = 1 << 34;

/// `IN_ORDER` in the virtio feature bits.
const VIRTIO_F_IN_ORDER: u64 = 1 << 35;

/// What our port logs (`VHU_LOG=info`, echo's default) when the frontend
/// acks its features: `port NAME: features acked 0x<hex> (...)`.
const ECHO_FEATURES_MARKER: &str = ": features acked ";

/// Serialises the tests of this binary: each one busy-polls both cores.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Free 2 MiB hugepages a hugepage case needs (`scripts/hugepages.sh`
/// reserves them).
const HUGEPAGES_NEEDED: u64 = 512;

/// Whether a case runs on hugepages: the `*_huge` cases always do, every
/// case does with `VHU_TEST_HUGEPAGES=1`; the others use `--no-huge`. A case
/// that wants hugepages fails when they are not there (it never falls back
/// to `--no-huge`, which would leave the hugepage path untested).
fn use_hugepages(case_wants: bool) -> bool {
    let wanted = case_wants || std::env::var("VHU_TEST_HUGEPAGES").is_ok_and(|v| v == "1");
    assert!(
        !wanted || hugepages_available(HUGEPAGES_NEEDED),
        "this case runs on hugepages and needs {HUGEPAGES_NEEDED} free 2 MiB pages on a mounted \
         hugetlbfs: run scripts/hugepages.sh (scripts/install-peers.sh does)"
    );
    wanted
}

/// `$VHU_ECHO_ARGS`, split at whitespace.
fn echo_extra_args() -> Vec<String> {
    std::env::var("VHU_ECHO_ARGS")
        .unwrap_or_default()
        .split_whitespace()
        .map(String::from)
        .collect()
}

// ===== Backends =====

/// Which loopback backend serves the socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BackendKind {
    /// Our `echo` example.
    Echo,
    /// DPDK's vhost PMD, `io` forwarding.
    DpdkVhost,
}

/// A running backend.
enum Backend {
    Echo(Echo),
    Dpdk(Testpmd),
}

/// What a backend counted, in echo's terms (`tx` = dequeued from the
/// guest's TX rings, `rx` = delivered into its RX rings).
#[derive(Debug)]
struct BackendCounters {
    /// All queue pairs.
    total: QpCounters,
    /// Per queue pair, as far as the backend reports them (DPDK: packets
    /// only, and only for queue pairs that had traffic).
    qps: Vec<QpCounters>,
    /// Negotiated virtio features, as the backend itself logged them (echo:
    /// its port's `features acked`; DPDK: `negotiated Virtio features`, which
    /// it logs only at a config log level we keep off).
    features: Option<u64>,
    /// The backend's log.
    log: String,
}

impl Backend {
    /// Starts a backend on `socket`. As a server it returns once the socket
    /// exists; as a client it connects in the background.
    fn spawn(
        kind: BackendKind,
        socket: &std::path::Path,
        client: bool,
        queues: u16,
        hugepages: bool,
    ) -> Self {
        match kind {
            BackendKind::Echo => {
                Backend::Echo(Echo::spawn(socket, client, queues, &echo_extra_args()))
            }
            BackendKind::DpdkVhost => {
                let mut o = VhostBackendOpts::new(socket);
                o.client = client;
                o.port.queues = queues;
                o.port.hugepages = hugepages;
                Backend::Dpdk(start_vhost_backend(&o))
            }
        }
    }

    /// Stops the backend and collects its counters.
    fn finish(self) -> BackendCounters {
        match self {
            Backend::Echo(echo) => {
                let out = echo.stop();
                assert!(out.status.success(), "echo failed:\n{out}");
                BackendCounters {
                    total: out.total(),
                    qps: out.qps.clone(),
                    features: last_hex_after(&out.stderr, &[ECHO_FEATURES_MARKER]),
                    log: out.to_string(),
                }
            }
            Backend::Dpdk(mut be) => {
                let fwd = be.stop();
                let port = testpmd::sum_port_stats(&be.port_stats());
                let features = be.negotiated_features();
                let (status, log) = be.quit();
                assert!(
                    status.success(),
                    "DPDK vhost backend failed ({status}):\n{log}"
                );
                // The ethdev counters of the vhost port: RX = dequeued from
                // the guest's TX rings, TX = enqueued into its RX rings; the
                // forward engine's TX-dropped = frames the RX rings refused.
                let total = QpCounters {
                    qp: u16::MAX,
                    tx_packets: port.rx_packets,
                    tx_bytes: port.rx_bytes,
                    rx_packets: port.tx_packets,
                    rx_bytes: port.tx_bytes,
                    tx_dropped: 0,
                    rx_dropped: fwd.total.tx_dropped,
                };
                let qps = if fwd.streams.is_empty() {
                    vec![QpCounters { qp: 0, ..total }]
                } else {
                    fwd.streams
                        .iter()
                        .map(|s| QpCounters {
                            qp: s.rx_queue,
                            tx_packets: s.rx_packets,
                            rx_packets: s.tx_packets,
                            rx_dropped: s.tx_dropped,
                            ..QpCounters::default()
                        })
                        .collect()
                };
                BackendCounters {
                    total,
                    qps,
                    features,
                    log,
                }
            }
        }
    }
}

// ===== The loopback test =====

/// One point of the matrix.
#[derive(Debug, Clone, Copy)]
struct Case {
    kind: BackendKind,
    /// The backend creates the socket (else testpmd does, `server=1`).
    backend_server: bool,
    queues: u16,
    mrg_rxbuf: bool,
    /// Packed virtqueues (`packed_vq=1`).
    packed: bool,
    /// `in_order=1`.
    in_order: bool,
    /// Run on hugepages (else `--no-huge`, unless `VHU_TEST_HUGEPAGES=1`).
    hugepages: bool,
}

/// Starts frontend and backend in the order the socket roles need; returns
/// them with the frontend at its prompt and its link up.
fn start_pair(case: Case, socket: &std::path::Path, hugepages: bool) -> (Testpmd, Backend) {
    let mut fe_opts = FrontendOpts::new(socket);
    fe_opts.port.queues = case.queues;
    fe_opts.server = !case.backend_server;
    fe_opts.mrg_rxbuf = Some(case.mrg_rxbuf);
    fe_opts.packed_vq = Some(case.packed);
    fe_opts.in_order = Some(case.in_order);
    fe_opts.port.hugepages = hugepages;
    // Rings as large as `--rxd`/`--txd` (virtio-user's default is 256), so
    // that the 32 x 32 frames `tx_first` injects per queue fit into the RX
    // ring: with 256-entry rings, the backend necessarily drops 768 of them.
    fe_opts.queue_size = Some(RING_SIZE);
    fe_opts.port.rxd = RING_SIZE;
    fe_opts.port.txd = RING_SIZE;
    let (mut fe, be) = if case.backend_server {
        let be = Backend::spawn(case.kind, socket, false, case.queues, hugepages);
        (Testpmd::spawn(&fe_opts), be)
    } else {
        // virtio-user as server creates the socket and then blocks in EAL
        // init until the backend connects.
        let mut fe = Testpmd::spawn(&fe_opts);
        fe.wait_socket(READY_TIMEOUT);
        let be = Backend::spawn(case.kind, socket, true, case.queues, hugepages);
        (fe, be)
    };
    fe.wait_ready(READY_TIMEOUT);
    fe.wait_link_up(LINK_TIMEOUT);
    (fe, be)
}

fn run_loopback(case: Case) {
    let _serial = serial();
    let dir = RunDir::new("testpmd");
    let socket = dir.join("vhost.sock");
    let hugepages = use_hugepages(case.hugepages);
    let (mut fe, be) = start_pair(case, &socket, hugepages);

    fe.start_tx_first(TX_FIRST_BURSTS);
    fe.wait_rx_packets(TARGET_RX, TRAFFIC_TIMEOUT);
    let run = fe.stop();
    let stopped = fe.total_stats();

    // Drain: whatever was in flight at `stop` (in the TX rings, inside the
    // backend, or delivered into RX rings `mac` forwarding no longer polled)
    // ends up counted by an `rxonly` pass, which transmits nothing. `start`
    // also flushes the RX queues before forwarding.
    fe.set_fwd("rxonly");
    fe.start();
    let fe_stats: PortStats = fe.wait_drained(DRAIN_QUIET, DRAIN_TIMEOUT);
    let drain = fe.stop();
    let fe_features = fe.negotiated_features();

    // The frontend leaves first, closing its port while the backend runs
    // (the backend must take a clean disconnect); the backend's counters
    // are final once testpmd stopped transmitting.
    let (status, fe_log) = fe.quit();
    let be = be.finish();
    let b = be.total;

    let ctx = || {
        format!(
            "case {case:?}, hugepages {hugepages}\n  testpmd: {fe_stats:?}\n  main run: {run:?}\n  \
             drain: {drain:?}\n  backend total: {b:?}\n  backend qps: {:?}\n\
             ----- backend -----\n{}\n----- testpmd frontend -----\n{fe_log}",
            be.qps, be.log
        )
    };
    println!(
        "{case:?}, hugepages {hugepages}: testpmd TX {} RX {} (in flight at stop, drained: {}), \
         backend {b:?}, \
         features frontend {:?} backend {:?}",
        fe_stats.tx_packets,
        fe_stats.rx_packets,
        fe_stats.rx_packets - stopped.rx_packets,
        fe_features.map(|f| format!("{f:#x} {:?}", feature_names(f))),
        be.features.map(|f| format!("{f:#x}")),
    );

    assert!(status.success(), "testpmd exited with {status}\n{}", ctx());
    assert!(fe_stats.rx_packets >= TARGET_RX, "{}", ctx());
    assert_eq!(
        fe_stats.rx_packets,
        fe_stats.tx_packets,
        "the drain did not bring back every frame testpmd sent within {DRAIN_TIMEOUT:?}\n{}",
        ctx()
    );
    assert_eq!(fe_stats.rx_errors, 0, "testpmd RX-errors\n{}", ctx());
    assert_eq!(fe_stats.rx_missed, 0, "testpmd RX-missed\n{}", ctx());

    assert_eq!(
        b.tx_packets,
        fe_stats.tx_packets,
        "backend dequeued != testpmd TX-packets\n{}",
        ctx()
    );
    assert_eq!(
        b.rx_packets,
        fe_stats.rx_packets,
        "backend delivered != testpmd RX-packets\n{}",
        ctx()
    );
    assert_eq!(b.tx_bytes, fe_stats.tx_bytes, "TX bytes\n{}", ctx());
    assert_eq!(b.rx_bytes, fe_stats.rx_bytes, "RX bytes\n{}", ctx());
    assert_eq!(
        b.tx_dropped,
        0,
        "backend dropped guest TX frames\n{}",
        ctx()
    );
    assert_eq!(
        b.rx_dropped,
        0,
        "backend dropped frames for the guest\n{}",
        ctx()
    );
    assert_eq!(
        b.tx_packets,
        b.rx_packets,
        "frames left inside the backend\n{}",
        ctx()
    );

    if case.kind == BackendKind::Echo {
        assert_eq!(
            be.qps.len(),
            usize::from(case.queues),
            "echo reported {} queue pairs\n{}",
            be.qps.len(),
            ctx()
        );
    }
    if case.queues > 1 {
        for q in 0..case.queues {
            let stream = run.stream(0, q).copied().unwrap_or_default();
            assert!(
                stream.rx_packets > 0 && stream.tx_packets > 0,
                "testpmd's stream on queue {q} carried no traffic\n{}",
                ctx()
            );
            let qp = be
                .qps
                .iter()
                .find(|c| c.qp == q)
                .copied()
                .unwrap_or_default();
            assert!(
                qp.tx_packets > 0 && qp.rx_packets > 0,
                "backend queue pair {q} carried no traffic\n{}",
                ctx()
            );
        }
    }

    // Both sides' view of the negotiation is required: a missing line is a
    // failure, never a skipped check (a "packed" case must not pass on split
    // rings because a log line was not parsed).
    let Some(fe_features) = fe_features else {
        panic!("testpmd did not log its negotiated features\n{}", ctx());
    };
    // Our side's view comes from our own port's log; DPDK's vhost backend
    // (the reference) keeps its config log to warnings, so its view is
    // checked only if it logged one.
    if case.kind == BackendKind::Echo {
        let Some(be_features) = be.features else {
            panic!("echo did not log its acked features\n{}", ctx());
        };
        // Our port acked exactly what the frontend says it negotiated, but
        // for the bits virtio-user keeps to itself.
        assert_eq!(
            be_features & !VIRTIO_USER_LOCAL_BITS,
            fe_features & !VIRTIO_USER_LOCAL_BITS,
            "features: backend {:?} frontend {:?}\n{}",
            feature_names(be_features),
            feature_names(fe_features),
            ctx()
        );
    }
    let sides = [
        Some(("testpmd", fe_features)),
        be.features.map(|f| ("backend", f)),
    ];
    for (side, features) in sides.into_iter().flatten() {
        assert_eq!(
            features & VIRTIO_F_RING_PACKED != 0,
            case.packed,
            "{side}: RING_PACKED negotiated: {features:#x}\n{}",
            ctx()
        );
        if case.kind == BackendKind::Echo {
            assert_eq!(
                features & VIRTIO_F_IN_ORDER != 0,
                case.in_order,
                "{side}: IN_ORDER negotiated: {features:#x}\n{}",
                ctx()
            );
        }
        assert_eq!(
            features & VIRTIO_NET_F_MRG_RXBUF != 0,
            case.mrg_rxbuf,
            "{side}: negotiated features {features:#x} {:?}\n{}",
            feature_names(features),
            ctx()
        );
    }
}

/// Generates one `#[test]` per matrix point.
macro_rules! loopback_tests {
    ($($name:ident: $kind:ident, backend_server = $srv:literal, queues = $q:literal, mrg_rxbuf = $m:literal $(, packed = $p:literal)? $(, in_order = $o:literal)? $(, hugepages = $h:literal)?;)*) => {$(
        #[test]
        #[ignore = "needs root and peers: run scripts/test.sh"]
        fn $name() {
            run_loopback(Case {
                kind: BackendKind::$kind,
                backend_server: $srv,
                queues: $q,
                mrg_rxbuf: $m,
                packed: false $(|| $p)?,
                in_order: false $(|| $o)?,
                hugepages: false $(|| $h)?,
            });
        }
    )*};
}

loopback_tests! {
    echo_server_q1_mrg0: Echo, backend_server = true, queues = 1, mrg_rxbuf = false;
    echo_server_q1_mrg1: Echo, backend_server = true, queues = 1, mrg_rxbuf = true;
    echo_server_q1_mrg1_packed: Echo, backend_server = true, queues = 1, mrg_rxbuf = true, packed = true;
    echo_server_q2_mrg0_packed: Echo, backend_server = true, queues = 2, mrg_rxbuf = false, packed = true;
    echo_client_q1_mrg1_packed_in_order: Echo, backend_server = false, queues = 1, mrg_rxbuf = true, packed = true, in_order = true;
    echo_server_q2_mrg0_packed_in_order: Echo, backend_server = true, queues = 2, mrg_rxbuf = false, packed = true, in_order = true;
    echo_server_q1_mrg1_in_order: Echo, backend_server = true, queues = 1, mrg_rxbuf = true, in_order = true;
    echo_server_q2_mrg0_in_order: Echo, backend_server = true, queues = 2, mrg_rxbuf = false, in_order = true;
    echo_server_q2_mrg0: Echo, backend_server = true, queues = 2, mrg_rxbuf = false;
    echo_server_q2_mrg1: Echo, backend_server = true, queues = 2, mrg_rxbuf = true;
    echo_client_q1_mrg0: Echo, backend_server = false, queues = 1, mrg_rxbuf = false;
    echo_client_q1_mrg1: Echo, backend_server = false, queues = 1, mrg_rxbuf = true;
    echo_client_q2_mrg0: Echo, backend_server = false, queues = 2, mrg_rxbuf = false;
    echo_client_q2_mrg1: Echo, backend_server = false, queues = 2, mrg_rxbuf = true;
    echo_server_q1_mrg1_huge: Echo, backend_server = true, queues = 1, mrg_rxbuf = true, hugepages = true;
    echo_client_q2_mrg1_packed_huge: Echo, backend_server = false, queues = 2, mrg_rxbuf = true, packed = true, hugepages = true;
    dpdk_vhost_server_q1_mrg1_huge: DpdkVhost, backend_server = true, queues = 1, mrg_rxbuf = true, hugepages = true;
    dpdk_vhost_server_q1_mrg0: DpdkVhost, backend_server = true, queues = 1, mrg_rxbuf = false;
    dpdk_vhost_server_q1_mrg1: DpdkVhost, backend_server = true, queues = 1, mrg_rxbuf = true;
    dpdk_vhost_server_q2_mrg0: DpdkVhost, backend_server = true, queues = 2, mrg_rxbuf = false;
    dpdk_vhost_server_q2_mrg1: DpdkVhost, backend_server = true, queues = 2, mrg_rxbuf = true;
    dpdk_vhost_client_q1_mrg0: DpdkVhost, backend_server = false, queues = 1, mrg_rxbuf = false;
    dpdk_vhost_client_q1_mrg1: DpdkVhost, backend_server = false, queues = 1, mrg_rxbuf = true;
    dpdk_vhost_client_q2_mrg0: DpdkVhost, backend_server = false, queues = 2, mrg_rxbuf = false;
    dpdk_vhost_client_q2_mrg1: DpdkVhost, backend_server = false, queues = 2, mrg_rxbuf = true;
}
