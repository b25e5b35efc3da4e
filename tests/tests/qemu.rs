// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! End-to-end tests: a real Linux guest in QEMU drives our `echo` example.
//!
//! The guest pings a peer that does not exist through a static ARP entry; the
//! echo backend swaps the MAC addresses and hands each frame back, so every
//! frame the guest transmits comes back on its receive counters. The tests
//! compare the guest's counters (from its console) with the per-queue-pair
//! counters echo prints when it stops.
//!
//! They need root, `scripts/install-peers.sh` (QEMU >= 10, the guest kernel
//! and initramfs) and the echo binary (`cargo build --release --example
//! echo`, or `VHU_ECHO_BIN`); `scripts/test.sh` provides all of it. They run
//! one at a time (TCG guests and a busy-polling backend share two cores).

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};
use std::{env, fs};

use vhu_tests::qemu::{feature_names, run_guest, spawn_guest, workspace_root, GuestOpts, GuestRun};

/// Frames the guest sends from each of its CPUs.
const PING_COUNT: u64 = 1000;
/// ICMP payload of each: 1000 + 8 (ICMP) + 20 (IPv4) + 14 (Ethernet) bytes
/// on the wire.
const PING_SIZE: u64 = 1000;
/// Length of each ping frame on the wire.
const PING_FRAME_LEN: u64 = PING_SIZE + 8 + 20 + 14;
/// How long echo may take to create its socket or to exit on SIGTERM.
const ECHO_TIMEOUT: Duration = Duration::from_secs(15);

/// Serialises the tests of this binary: each boots a TCG guest next to a
/// backend that may busy-poll, on a two-core machine.
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// A scratch directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = env::temp_dir().join(format!("vhu-qemu-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("create scratch dir");
        Self(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

// ===== echo process (private stand-in for the shared helper in tests/src/echo.rs) =====

/// The echo example: `VHU_ECHO_BIN`, else `$CARGO_TARGET_DIR` or the
/// workspace's `target`, `release/examples/echo`.
fn echo_bin() -> PathBuf {
    if let Some(p) = env::var_os("VHU_ECHO_BIN").filter(|v| !v.is_empty()) {
        return PathBuf::from(p);
    }
    let target = env::var_os("CARGO_TARGET_DIR")
        .filter(|v| !v.is_empty())
        .map_or_else(|| workspace_root().join("target"), PathBuf::from);
    target.join("release/examples/echo")
}

/// Counters of one queue pair, as echo prints them on exit.
type QpStats = BTreeMap<String, u64>;

/// A running echo backend. Dropping it kills the process.
struct Echo {
    child: Child,
    stdout: Option<JoinHandle<String>>,
    stderr: Arc<Mutex<Vec<u8>>>,
    command: String,
}

impl Echo {
    /// Starts echo on `socket`: listening, or connecting (`--client`) to a
    /// listening QEMU. When listening, returns once the socket exists.
    fn start(socket: &Path, client: bool, queues: u16) -> Self {
        let bin = echo_bin();
        assert!(
            bin.is_file(),
            "echo binary {} not found: build it with `cargo build --release --example echo` \
             or set VHU_ECHO_BIN (scripts/test.sh does this)",
            bin.display()
        );
        let mut cmd = Command::new(&bin);
        cmd.arg("--socket").arg(socket);
        if client {
            cmd.arg("--client");
        }
        cmd.arg("--queues").arg(queues.to_string());
        let command = format!("{cmd:?}");
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn {command}: {e}"));
        let mut out = child.stdout.take().expect("stdout is piped");
        let stdout = thread::spawn(move || {
            let mut s = String::new();
            let _ = out.read_to_string(&mut s);
            s
        });
        let mut err = child.stderr.take().expect("stderr is piped");
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&stderr);
        thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            while let Ok(n @ 1..) = err.read(&mut chunk) {
                sink.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .extend_from_slice(&chunk[..n]);
            }
        });
        let mut echo = Self {
            child,
            stdout: Some(stdout),
            stderr,
            command,
        };
        if !client {
            echo.wait_for_socket(socket);
        }
        echo
    }

    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }

    fn wait_for_socket(&mut self, socket: &Path) {
        let deadline = Instant::now() + ECHO_TIMEOUT;
        while !fs::metadata(socket).is_ok_and(|m| m.file_type().is_socket()) {
            if let Some(status) = self.child.try_wait().expect("waitpid on echo") {
                panic!(
                    "{} exited ({status}) before creating {}\n--- echo stderr ---\n{}",
                    self.command,
                    socket.display(),
                    self.stderr()
                );
            }
            assert!(
                Instant::now() < deadline,
                "{} did not create {} within {ECHO_TIMEOUT:?}\n--- echo stderr ---\n{}",
                self.command,
                socket.display(),
                self.stderr()
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends SIGTERM, waits for a clean exit and returns the counters of
    /// each queue pair, indexed by `qp`.
    fn stop(mut self) -> Vec<QpStats> {
        let pid = libc::pid_t::try_from(self.child.id()).expect("pid fits pid_t");
        // SAFETY: kill(2) takes no pointers; `pid` is our own child, not yet
        // reaped (it is reaped below or in Drop), so it names no other process.
        let rc = unsafe { libc::kill(pid, libc::SIGTERM) };
        assert_eq!(rc, 0, "kill(echo, SIGTERM) failed");
        let deadline = Instant::now() + ECHO_TIMEOUT;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("waitpid on echo") {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "{} did not exit within {ECHO_TIMEOUT:?} of SIGTERM\n--- echo stderr ---\n{}",
                    self.command,
                    self.stderr()
                );
            }
            thread::sleep(Duration::from_millis(20));
        };
        let stdout = self
            .stdout
            .take()
            .expect("stop runs once")
            .join()
            .expect("stdout reader");
        assert!(
            status.success(),
            "{} exited with {status}\n--- echo stdout ---\n{stdout}\n--- echo stderr ---\n{}",
            self.command,
            self.stderr()
        );
        parse_echo_stats(&stdout)
            .unwrap_or_else(|e| panic!("echo's summary: {e}\n--- echo stdout ---\n{stdout}"))
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// Parses `qp=N key=value ...` lines (other lines are ignored).
fn parse_echo_stats(stdout: &str) -> Result<Vec<QpStats>, String> {
    let mut qps: BTreeMap<usize, QpStats> = BTreeMap::new();
    for line in stdout.lines() {
        let mut tokens = line.split_whitespace();
        let Some(qp) = tokens.next().and_then(|t| t.strip_prefix("qp=")) else {
            continue;
        };
        let qp: usize = qp.parse().map_err(|_| format!("bad qp in {line:?}"))?;
        let mut stats = QpStats::new();
        for t in tokens {
            let (k, v) = t
                .split_once('=')
                .ok_or_else(|| format!("bad token {t:?} in {line:?}"))?;
            let v = v
                .parse()
                .map_err(|_| format!("bad number {t:?} in {line:?}"))?;
            stats.insert(k.to_owned(), v);
        }
        qps.insert(qp, stats);
    }
    if qps.is_empty() {
        return Err("no qp= lines".into());
    }
    if qps.keys().copied().ne(0..qps.len()) {
        return Err(format!("queue pairs are not 0..{}", qps.len()));
    }
    Ok(qps.into_values().collect())
}

/// A counter of one queue pair.
fn counter(qp: &QpStats, key: &str) -> u64 {
    *qp.get(key)
        .unwrap_or_else(|| panic!("echo printed no {key} in {qp:?}"))
}

/// A counter summed over all queue pairs.
fn total(qps: &[QpStats], key: &str) -> u64 {
    qps.iter().map(|qp| counter(qp, key)).sum()
}

// ===== checks =====

fn ping_cmdline() -> String {
    format!("vhu.test=ping vhu.count={PING_COUNT} vhu.size={PING_SIZE}")
}

/// Checks a ping run of `cpus` guest CPUs over `queues` queue pairs against
/// echo's counters, and prints both.
fn check_ping(run: &GuestRun, echo: &[QpStats], cpus: u64, queues: usize) {
    let features = run.features();
    println!(
        "guest features {features:#x}: {}",
        feature_names(features).join(" ")
    );
    println!(
        "guest ({:.1?}): {}",
        run.elapsed,
        run.results
            .iter()
            .filter(|(k, _)| k.starts_with("rx_")
                || k.starts_with("tx_")
                || k.as_str() == "sent"
                || k.as_str() == "received"
                || k.ends_with("_errors")
                || k.starts_with("ping_"))
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    for (i, qp) in echo.iter().enumerate() {
        println!("echo qp={i}: {qp:?}");
    }
    let d = run.describe();

    assert_eq!(run.get_u64("queues"), queues as u64, "guest queues\n{d}");
    assert_eq!(run.get_u64("cpus"), cpus, "guest cpus\n{d}");
    assert_eq!(run.get("carrier"), Some("1"), "guest link is down\n{d}");
    assert_eq!(echo.len(), queues, "echo queue pairs: {echo:?}");

    // The guest's own tally: exactly the pings asked for, each 1042 bytes on
    // the wire, plus a few frames of its own (IPv6 neighbour discovery and
    // MLD); every one came back (echo reflects them all and the guest reads
    // its counters a second after the last ping), intact enough for its
    // driver to count none as an error.
    let sent = run.get_u64("sent");
    assert_eq!(sent, cpus * PING_COUNT, "guest sent pings\n{d}");
    // Content: every reflected request reached the guest's stack with valid
    // IP and ICMP checksums (the guest answers its own reflections, see
    // guest-init.sh's test_ping), none refused for a bad one.
    assert_eq!(
        run.get_u64("received"),
        sent,
        "reflected pings that came back intact\n{d}"
    );
    for c in ["ip_in_hdr_errors", "icmp_in_csum_errors"] {
        assert_eq!(run.get_u64(c), 0, "guest {c}\n{d}");
    }
    let guest_rx = run.get_u64("rx_packets");
    let guest_tx = run.get_u64("tx_packets");
    let (guest_rx_bytes, guest_tx_bytes) = (run.get_u64("rx_bytes"), run.get_u64("tx_bytes"));
    const OWN_FRAMES: u64 = 16;
    assert!(
        guest_tx >= sent && guest_tx <= sent + OWN_FRAMES,
        "guest transmitted {guest_tx} frames for {sent} pings\n{d}"
    );
    assert!(
        guest_tx_bytes >= sent * PING_FRAME_LEN,
        "guest transmitted {guest_tx_bytes} bytes for {sent} pings of {PING_FRAME_LEN}\n{d}"
    );
    assert_eq!(guest_rx, guest_tx, "frames back at the guest\n{d}");
    assert_eq!(
        guest_rx_bytes, guest_tx_bytes,
        "bytes back at the guest\n{d}"
    );
    for c in [
        "rx_errors",
        "rx_dropped",
        "rx_length_errors",
        "rx_frame_errors",
        "rx_crc_errors",
    ] {
        assert_eq!(run.get_u64(c), 0, "guest {c}\n{d}");
    }

    // Echo's tally: no drop, and it delivered exactly what it dequeued, per
    // queue pair, frames and bytes.
    for (i, qp) in echo.iter().enumerate() {
        assert_eq!(counter(qp, "tx_dropped"), 0, "echo qp {i}: {qp:?}");
        assert_eq!(counter(qp, "rx_dropped"), 0, "echo qp {i}: {qp:?}");
        assert_eq!(
            counter(qp, "rx_packets"),
            counter(qp, "tx_packets"),
            "echo qp {i} delivered != dequeued: {qp:?}"
        );
        assert_eq!(
            counter(qp, "rx_bytes"),
            counter(qp, "tx_bytes"),
            "echo qp {i} bytes delivered != dequeued: {qp:?}"
        );
    }
    let echo_tx = total(echo, "tx_packets");
    let (echo_tx_bytes, echo_rx_bytes) = (total(echo, "tx_bytes"), total(echo, "rx_bytes"));
    // Echo counts up to its exit; the guest read its counters before it
    // powered off, and its kernel may still send a frame or two after that
    // (IPv6 timers), hence the small allowance on this side only.
    const LATE_FRAMES: u64 = 8;
    assert!(
        echo_tx >= guest_tx && echo_tx <= guest_tx + LATE_FRAMES,
        "echo dequeued {echo_tx} frames, the guest sent {guest_tx}"
    );
    assert!(
        echo_rx_bytes >= guest_rx_bytes && echo_tx_bytes >= guest_tx_bytes,
        "echo tx_bytes={echo_tx_bytes} rx_bytes={echo_rx_bytes}, the guest's {guest_tx_bytes} \
         and {guest_rx_bytes}"
    );
}

/// Echo serving `queues` queue pairs on a fresh socket, QEMU connecting
/// with a ping guest ([`ping_cmdline`]) whose other options `opts` sets.
/// Returns the guest's run and echo's counters.
fn ping_through_echo(
    tag: &str,
    queues: u16,
    opts: impl FnOnce(GuestOpts) -> GuestOpts,
) -> (GuestRun, Vec<QpStats>) {
    let _serial = serial();
    let dir = Scratch::new(tag);
    let socket = dir.0.join("vhost.sock");
    let echo = Echo::start(&socket, false, queues);
    let run = run_guest(opts(GuestOpts {
        cmdline_extra: ping_cmdline(),
        ..GuestOpts::new(&socket)
    }));
    let stats = echo.stop();
    (run, stats)
}

// ===== tests =====

/// One queue pair, echo listening, QEMU connecting.
#[test]
#[ignore = "needs root and peers: run scripts/test.sh"]
fn guest_pings_through_echo_one_queue() {
    let (run, stats) = ping_through_echo("1q", 1, |o| o);
    check_ping(&run, &stats, 1, 1);
}

/// Two queue pairs and two guest CPUs: the guest pings from each CPU in turn,
/// and virtio-net's XPS map sends CPU i's frames on TX queue i, so both queue
/// pairs must carry traffic.
#[test]
#[ignore = "needs root and peers: run scripts/test.sh"]
fn guest_pings_through_echo_two_queues() {
    let (run, stats) = ping_through_echo("2q", 2, |o| GuestOpts {
        queues: 2,
        smp: 2,
        timeout: Duration::from_secs(300),
        ..o
    });
    check_ping(&run, &stats, 2, 2);
    for (i, qp) in stats.iter().enumerate() {
        let (tx, rx) = (counter(qp, "tx_packets"), counter(qp, "rx_packets"));
        assert!(
            tx >= PING_COUNT && rx >= PING_COUNT,
            "queue pair {i} carried tx_packets={tx} rx_packets={rx}, want both >= {PING_COUNT} \
             (one CPU's pings): {stats:?}"
        );
    }
}

/// The guest's driver uses packed virtqueues (`packed=on`); the feature bit
/// must be negotiated and the traffic the same as with split rings.
#[test]
#[ignore = "needs root and peers: run scripts/test.sh"]
fn guest_pings_through_echo_packed_ring() {
    let (run, stats) = ping_through_echo("packed", 1, |o| GuestOpts { packed: true, ..o });
    let features = run.features();
    assert_ne!(
        features & (1 << 34),
        0,
        "RING_PACKED not negotiated: {features:#x}"
    );
    check_ping(&run, &stats, 1, 1);
}

/// QEMU listens, echo connects with `--client`.
#[test]
#[ignore = "needs root and peers: run scripts/test.sh"]
fn guest_pings_through_echo_client_mode() {
    let _serial = serial();
    let dir = Scratch::new("client");
    let socket = dir.0.join("vhost.sock");
    let mut guest = spawn_guest(GuestOpts {
        qemu_is_server: true,
        cmdline_extra: ping_cmdline(),
        ..GuestOpts::new(&socket)
    });
    guest.wait_for_socket(Duration::from_secs(30));
    let echo = Echo::start(&socket, true, 1);
    let run = guest.wait();
    run.assert_ok();
    let stats = echo.stop();
    check_ping(&run, &stats, 1, 1);
}

#[test]
fn echo_summary_is_parsed() {
    let out = "qp=0 tx_packets=5 tx_bytes=50 rx_packets=4 rx_bytes=40 tx_dropped=0 rx_dropped=1\n\
               something else\n\
               qp=1 tx_packets=7 tx_bytes=70 rx_packets=7 rx_bytes=70 tx_dropped=0 rx_dropped=0\n";
    let qps = parse_echo_stats(out).unwrap();
    assert_eq!(qps.len(), 2);
    assert_eq!(counter(&qps[0], "rx_dropped"), 1);
    assert_eq!(total(&qps, "tx_packets"), 12);
    assert!(parse_echo_stats("nothing\n").is_err());
    assert!(parse_echo_stats("qp=1 tx_packets=1\n").is_err());
    assert!(parse_echo_stats("qp=0 tx_packets=x\n").is_err());
}
