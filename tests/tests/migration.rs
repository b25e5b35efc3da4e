// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Live migration of a real guest between two QEMU processes on one
//! `vhu-switch`: dirty-page logging, exact stop and resume, the guest's
//! announce.
//!
//! ```text
//!  QEMU a (source)  --a.sock--+                +--up (AF_PACKET)--veth--> netns host 10.0.0.10
//!  QEMU b (-incoming) -b.sock-+--- switch -----+
//!  QEMU c (-incoming) -c.sock-+
//! ```
//!
//! Every QEMU owns its vhost-user socket (`server=on`) and the switch
//! connects to it (client-role ports), as a migration between hosts does.
//! QEMU runs under TCG; the guest (128 MiB, split rings, one queue pair) is
//! the agent guest of `scripts/guest-init.sh`, 10.0.0.2.
//!
//! `guest_migrates_twice_without_corruption`:
//! 1. **Connectivity across a migration (a to b).** The namespace host pings
//!    the guest every 10 ms (ICMP echo) while the guest migrates. Afterwards QEMU b runs
//!    the guest (QMP `running`; a is `postmigrate`), the agent answers on b's
//!    console, the guest's receive counters keep increasing (5 pings it
//!    sends are all answered), and the FDB has its address on port `b`
//!    (moved by the announce the guest sends on the target,
//!    `VIRTIO_NET_F_GUEST_ANNOUNCE`). Reported: pings lost and the longest
//!    gap between two replies; asserted: the gap is under 5 s.
//! 2. **Memory consistency (b to c).** The namespace floods the guest with
//!    numbered UDP datagrams of a known pattern (each 1000-byte payload is
//!    its 10-digit sequence number 100 times), as fast as the guest takes
//!    them, while it migrates again. Every buffer the switch wrote into
//!    guest memory must reach the target: on c, the guest checks every
//!    datagram it received (`nc -u -l` into tmpfs, then `awk`): no payload
//!    differs from its pattern, no sequence number came twice (a stale
//!    buffer holding an older datagram), no UDP checksum error, no IP header
//!    error, no RX length or frame error in the driver; and datagrams were
//!    received on the target too. The switch logged that it took the dirty
//!    log (`SET_LOG_BASE`) both times.
//!
//! `guest_without_announce_is_announced_by_the_switch`: the guest
//! (`guest_announce=off`) migrates a to b idle; QEMU sends `SEND_RARP`: the
//! FDB has the MAC on b before the guest sent anything there, the host
//! captures exactly one RARP announce per QEMU announce round (byte for
//! byte), and `vhu_port_announces_total` of b is the number of rounds. The
//! GUEST_ANNOUNCE runs assert that no `SEND_RARP` came; all three report
//! the time from the target running to the first uplink frame into it.
//!
//! The test can fail: run with `VHU_DEBUG_NO_DIRTY_LOG=1` in the
//! environment, the switch accepts the log but never marks a page, and the
//! consistency check finds corrupted datagrams (see `docs/migration.md`).
//!
//! Root, the peers (`scripts/install-peers.sh`), and the e2e lock:
//! `flock /tmp/vhu-e2e.lock env VHU_E2E=1 cargo test --release -p vhu-tests
//! --test migration -- --include-ignored --test-threads=1`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use vhu_api::{FdbEntryView, PortStats};
use vhu_tests::netns::{parse_snmp, NsProcess, VethPair};
use vhu_tests::qemu::{incoming_args, qmp_args, spawn_guest, GuestHandle, GuestOpts, Qmp};
use vhu_tests::switch::SwitchProc;
use vhu_tests::testpmd::RunDir;

/// Until the agent answers (TCG boot, two cores shared with other QEMUs).
const BOOT: Duration = Duration::from_secs(180);
/// One guest command.
const CMD: Duration = Duration::from_secs(120);
/// One migration, from `migrate` to `completed`.
const MIGRATION: Duration = Duration::from_secs(120);
/// Longest gap between two ping replies the test accepts.
const MAX_GAP_MS: f64 = 5000.0;

const MAC: &str = "52:54:00:00:00:21";
const GUEST_IP: &str = "10.0.0.2";
const HOST_IP: &str = "10.0.0.10";
const PATTERN_PORT: &str = "6000";

/// The debug switch of the library (`ring::NO_DIRTY_LOG_ENV`).
const NO_LOG_ENV: &str = "VHU_DEBUG_NO_DIRTY_LOG";

/// Floods ADDR PORT with numbered pattern datagrams (the 1000-byte payload
/// is the 10-digit sequence number 100 times) until SIGTERM, pausing 1 ms
/// every 64, and checks what the guest's kernel quotes back: no socket
/// listens there, so the guest answers every datagram whose IP and UDP
/// checksums it verified with an ICMP port unreachable that carries the
/// datagram's first 520 payload bytes. A quote that is not its pattern is
/// `bad`, a sequence number quoted twice is `dup` (a stale buffer holding an
/// older datagram). On SIGTERM prints `sent=N ok=N bad=N dup=N`.
const PATTERN_FLOOD: &str = r#"
import os, signal, socket, struct, sys, threading, time
dst = (sys.argv[1], int(sys.argv[2]))
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
r = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
r.setsockopt(socket.SOL_SOCKET, 33, 16 << 20)  # SO_RCVBUFFORCE
sent, ok, bad, dup, seen = 0, 0, 0, 0, set()
lock = threading.Lock()
def rx():
    global ok, bad, dup
    while True:
        b = r.recv(4096)
        o = (b[0] & 15) * 4
        if b[o] != 3 or b[o + 1] != 3: continue
        inner = b[o + 8:]
        i = (inner[0] & 15) * 4
        if inner[9] != 17 or struct.unpack("!H", inner[i + 2:i + 4])[0] != dst[1]: continue
        q = inner[i + 8:]
        seq = q[:10]
        with lock:
            if len(q) < 100 or not seq.isdigit() or q != (seq * 100)[:len(q)]: bad += 1
            elif seq in seen: dup += 1
            else: seen.add(seq); ok += 1
def stop(*_):
    time.sleep(0.5)
    with lock:
        print("sent=%d ok=%d bad=%d dup=%d" % (sent, ok, bad, dup), flush=True)
    os._exit(0)
signal.signal(signal.SIGTERM, stop)
threading.Thread(target=rx, daemon=True).start()
print("ready", flush=True)
while True:
    for _ in range(64):
        try:
            s.sendto(b"%010d" % sent * 100, dst)
            sent += 1
        except OSError:
            pass
    time.sleep(0.001)
"#;

/// Pings ADDR every INTERVAL_MS (ICMP echo over a raw socket: the host has
/// no `ping`) until SIGTERM, then prints `sent=N received=N last_seq=N
/// gap_ms=G`: G the longest time between two replies.
const PINGER: &str = r#"
import os, signal, socket, struct, sys, threading, time
dst, interval = sys.argv[1], int(sys.argv[2]) / 1000.0
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
ident = os.getpid() & 0xffff
sent, got, last_seq, gap, last_t = 0, set(), -1, 0.0, None
lock = threading.Lock()
def csum(b):
    if len(b) % 2: b += b"\0"
    v = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    v = (v >> 16) + (v & 0xffff); v += v >> 16
    return ~v & 0xffff
def rx():
    global last_seq, gap, last_t
    while True:
        b, _ = s.recvfrom(2048)
        ihl = (b[0] & 15) * 4
        t, _c, _k, i, q = struct.unpack("!BBHHH", b[ihl:ihl + 8])
        if t != 0 or i != ident: continue
        now = time.monotonic()
        with lock:
            if q in got: continue
            got.add(q)
            last_seq = max(last_seq, q)
            if last_t is not None: gap = max(gap, now - last_t)
            last_t = now
def stop(*_):
    with lock:
        print("sent=%d received=%d last_seq=%d gap_ms=%d" % (sent, len(got), last_seq, gap * 1000), flush=True)
    os._exit(0)
signal.signal(signal.SIGTERM, stop)
threading.Thread(target=rx, daemon=True).start()
print("ready", flush=True)
start = time.monotonic()
while True:
    hdr = struct.pack("!BBHHH", 8, 0, 0, ident, sent & 0xffff) + b"vhu-migration-ping"
    pkt = hdr[:2] + struct.pack("!H", csum(hdr)) + hdr[4:]
    s.sendto(pkt, (dst, 0))
    with lock: sent += 1
    time.sleep(max(0.0, start + sent * interval - time.monotonic()))
"#;

/// One QEMU of the migration and its monitor.
struct Vm {
    guest: GuestHandle,
    qmp: Qmp,
    /// Where it listens for the migration stream (targets).
    incoming: PathBuf,
}

/// Starts QEMU `name` (the source when `target` is false, else a target
/// waiting with `-incoming`), adds its client-role port `name` to the
/// switch and connects to its monitor.
fn start_vm(
    run: &RunDir,
    sw: &SwitchProc,
    name: &str,
    target: bool,
    packed: bool,
    guest_announce: bool,
) -> Vm {
    let socket = run.join(&format!("{name}.sock"));
    let qmp = run.join(&format!("{name}.qmp"));
    let incoming = run.join(&format!("{name}.migrate"));
    let mut extra_args = if target {
        incoming_args(&qmp, &incoming)
    } else {
        qmp_args(&qmp)
    };
    if !guest_announce {
        // The guest cannot announce itself: QEMU sends SEND_RARP instead.
        extra_args.extend(["-global".into(), "virtio-net-pci.guest_announce=off".into()]);
    }
    let mut guest = spawn_guest(GuestOpts {
        mac: MAC.into(),
        qemu_is_server: true,
        mem_mib: 128,
        packed,
        cmdline_extra: format!("vhu.test=agent vhu.ip={GUEST_IP}/24 vhu.ipv6=0"),
        timeout: Duration::from_secs(900),
        extra_args,
        ..GuestOpts::new(&socket)
    });
    guest.wait_for_socket(BOOT);
    sw.call(
        "POST",
        "/ports",
        &format!(
            r#"{{"name":"{name}","kind":"vhost-user","role":"client","socket":"{}"}}"#,
            socket.display()
        ),
        201,
    );
    let qmp = Qmp::connect(&qmp, BOOT);
    Vm {
        guest,
        qmp,
        incoming,
    }
}

/// The switch, the namespace host on its uplink, and the source QEMU `a`
/// booted, its guest known on port `a` (it pinged the host).
fn source(run: &RunDir, packed: bool, guest_announce: bool) -> (SwitchProc, VethPair, Vm) {
    let sw = SwitchProc::start(run, "", &[]);
    let host = VethPair::new();
    host.set_peer_addr(&format!("{HOST_IP}/24"));
    sw.add_af_packet("up", host.host());
    let mut a = start_vm(run, &sw, "a", false, packed, guest_announce);
    a.guest.wait_agent(BOOT);
    let out = a
        .guest
        .exec(&format!("ping -c 3 -i 0.2 -W 5 {HOST_IP}"), CMD);
    assert!(out.contains("3 packets received"), "{out}");
    wait_fdb(&sw, "a");
    (sw, host, a)
}

/// Migrates `from` to `to` and returns QMP's `query-migrate` at completion
/// and when the target was first seen running.
fn migrate(from: &mut Vm, to: &mut Vm) -> (serde_json::Value, Instant) {
    assert_eq!(to.qmp.status(), "inmigrate");
    let bw = std::env::var("VHU_MIG_BW")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1u64 << 40);
    from.qmp.migrate(&to.incoming, 300, bw);
    let info = from.qmp.wait_migrated(MIGRATION);
    let deadline = Instant::now() + Duration::from_secs(30);
    while to.qmp.status() != "running" {
        assert!(Instant::now() < deadline, "the target does not run");
        thread::sleep(Duration::from_millis(5));
    }
    let running = Instant::now();
    assert_eq!(from.qmp.status(), "postmigrate");
    println!(
        "migration: total {} ms, downtime {} ms, {} MiB transferred",
        info["total-time"],
        info["downtime"],
        info["ram"]["transferred"].as_u64().unwrap_or(0) >> 20
    );
    (info, running)
}

/// Milliseconds from `since` until the switch has delivered a frame into
/// `port`'s guest (frames delivered before `since` excluded from nothing:
/// the port is new, its count starts at zero).
fn first_frame_ms(sw: &SwitchProc, port: &str, since: Instant) -> u128 {
    let deadline = Instant::now() + Duration::from_secs(10);
    while sw.stats(port).total.rx_packets == 0 {
        assert!(
            Instant::now() < deadline,
            "no frame reached port {port} in 10 s"
        );
        thread::sleep(Duration::from_millis(2));
    }
    since.elapsed().as_millis()
}

/// `vhu_port_announces_total` (and `_refused_total`) of `port`.
fn announces(sw: &SwitchProc, port: &str) -> (u64, u64) {
    let text = String::from_utf8(sw.call("GET", "/metrics", "", 200)).unwrap();
    let get = |family: &str| {
        let key = format!("{family}{{port=\"{port}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&key)?.parse().ok())
            .unwrap_or_else(|| panic!("no {key} in /metrics"))
    };
    (
        get("vhu_port_announces_total"),
        get("vhu_port_announces_refused_total"),
    )
}

/// eth0's counter `name` in the guest.
fn counter(g: &mut GuestHandle, name: &str) -> u64 {
    g.exec(&format!("cat /sys/class/net/eth0/statistics/{name}"), CMD)
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn fdb_port(sw: &SwitchProc) -> Option<String> {
    let fdb: Vec<FdbEntryView> = sw.get("/fdb");
    fdb.into_iter()
        .find(|e| e.mac.to_string() == MAC)
        .map(|e| e.port)
}

/// Waits until the FDB has the guest on `port`.
fn wait_fdb(sw: &SwitchProc, port: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let at = fdb_port(sw);
        if at.as_deref() == Some(port) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the FDB has {MAC} on {at:?}, not {port}"
        );
        thread::sleep(Duration::from_millis(50));
    }
}

fn log_taken(sw: &SwitchProc, times: usize) {
    let log = sw.log();
    for l in log
        .lines()
        .filter(|l| l.contains("dirty log") || l.contains("used index"))
    {
        println!("switch: {l}");
    }
    if std::env::var_os(NO_LOG_ENV).is_some_and(|v| !v.is_empty() && v != "0") {
        println!("{NO_LOG_ENV} is set: the switch marks nothing (negative run)");
        assert_eq!(
            log.matches("is set: the dirty log is accepted").count(),
            times
        );
        return;
    }
    assert_eq!(
        log.matches("dirty log of").count(),
        times,
        "SET_LOG_BASE not served as often as migrations ran:\n{log}"
    );
}

#[test]
#[ignore = "needs root, QEMU and the e2e lock: VHU_E2E=1 ... --include-ignored"]
fn split_ring_guest_migrates_twice_without_corruption() {
    migrate_twice(false);
}

#[test]
#[ignore = "needs root, QEMU and the e2e lock: VHU_E2E=1 ... --include-ignored"]
fn packed_ring_guest_migrates_twice_without_corruption() {
    migrate_twice(true);
}

fn migrate_twice(packed: bool) {
    let run = RunDir::new(if packed {
        "migrate-packed"
    } else {
        "migrate-split"
    });
    let (mut sw, host, mut a) = source(&run, packed, true);
    let ns = host.ns();

    // ===== 1: a -> b under a 100/s ping stream =====
    let mut b = start_vm(&run, &sw, "b", true, packed, true);
    let mut pinger = ns.spawn_python(PINGER, &[GUEST_IP, "10"]);
    pinger.wait_for_stdout("ready", Duration::from_secs(10));
    thread::sleep(Duration::from_secs(2));
    let (_, running) = migrate(&mut a, &mut b);
    let first = first_frame_ms(&sw, "b", running);
    println!(
        "GUEST_ANNOUNCE: first frame through the uplink into the target {first} ms after it ran"
    );
    thread::sleep(Duration::from_secs(2));
    let p = stop_peer(&mut pinger, &["sent", "received", "last_seq", "gap_ms"]);
    let (sent, received, last) = (p["sent"], p["received"], p["last_seq"]);
    let gap = p["gap_ms"] as f64;
    let lost = sent - received;
    println!(
        "ping across the migration (every 10 ms): {sent} sent, {received} answered, \
         {lost} lost, longest gap {gap:.0} ms"
    );
    assert!(
        gap < MAX_GAP_MS,
        "longest gap {gap:.0} ms ({lost} of {sent} lost)"
    );
    assert!(
        last + 50 >= sent,
        "replies stopped at icmp_seq {last} of {sent}: the guest is unreachable on the target"
    );
    // The guest runs on b: its agent answers there, and it keeps receiving.
    let rx_before = counter(&mut b.guest, "rx_packets");
    let out = b
        .guest
        .exec(&format!("ping -c 5 -i 0.2 -W 5 {HOST_IP}"), CMD);
    assert!(out.contains("5 packets received"), "{out}");
    let rx_after = counter(&mut b.guest, "rx_packets");
    assert!(
        rx_after >= rx_before + 5,
        "rx_packets {rx_before} -> {rx_after}"
    );
    wait_fdb(&sw, "b");
    // The guest announced itself: QEMU sent no SEND_RARP.
    assert_eq!(
        announces(&sw, "b"),
        (0, 0),
        "SEND_RARP with GUEST_ANNOUNCE acked"
    );
    log_taken(&sw, 1);

    // ===== 2: b -> c under a pattern flood =====
    let mut c = start_vm(&run, &sw, "c", true, packed, true);
    // Every verified datagram is quoted back, none rate-limited.
    b.guest.exec(
        "sysctl -w net.ipv4.icmp_ratelimit=0 net.ipv4.icmp_msgs_per_sec=10000000 \
         net.ipv4.icmp_msgs_burst=10000000 >/dev/null",
        CMD,
    );
    let snmp_before = parse_snmp(&b.guest.exec("cat /proc/net/snmp", CMD));
    let guest_rx_before = counter(&mut b.guest, "rx_packets");
    let switch_rx_before = sw.stats("b").total.rx_packets;
    let mut flood = ns.spawn_python(PATTERN_FLOOD, &[GUEST_IP, PATTERN_PORT]);
    flood.wait_for_stdout("ready", Duration::from_secs(10));
    thread::sleep(Duration::from_secs(2));
    let on_source = no_ports(&mut b.guest);
    assert!(on_source > 0, "no datagram reached the source");
    let _ = migrate(&mut b, &mut c);
    let at_switch = no_ports(&mut c.guest);
    thread::sleep(Duration::from_secs(2));
    let f = stop_peer(&mut flood, &["sent", "ok", "bad", "dup"]);
    let (sent, ok, bad, dup) = (f["sent"], f["ok"], f["bad"], f["dup"]);
    let snmp = parse_snmp(&c.guest.exec("cat /proc/net/snmp", CMD));
    let delta =
        |k: &str| snmp.get(k).copied().unwrap_or(0) - snmp_before.get(k).copied().unwrap_or(0);
    let (intact, csum, hdr) = (
        delta("Udp.NoPorts"),
        delta("Udp.InCsumErrors"),
        delta("Ip.InHdrErrors"),
    );
    let len_err = counter(&mut c.guest, "rx_length_errors");
    let frame_err = counter(&mut c.guest, "rx_frame_errors");
    let delivered =
        sw.stats("b").total.rx_packets - switch_rx_before + sw.stats("c").total.rx_packets;
    let guest_rx = counter(&mut c.guest, "rx_packets") - guest_rx_before;
    let ip_in = delta("Ip.InReceives");
    let port_c: PortStats = sw.stats("c");
    println!(
        "pattern flood: {sent} sent; the guest verified {intact} ({on_source} on the source \
         before the migration, {at_switch} right after it, then more on the target), \
         {ok} quoted back intact; corrupted: {bad} quoted with another content, {dup} \
         repeated, {csum} UDP checksum errors, {hdr} IP header errors, {len_err} length \
         errors, {frame_err} frame errors; port c received {} frames; the switch wrote \
         {delivered} frames into the guest, its driver took {guest_rx}, IP {ip_in}",
        port_c.total.rx_packets
    );
    assert!(
        intact > at_switch,
        "no datagram verified on the target ({at_switch} -> {intact})"
    );
    assert!(ok >= 1000, "too few datagrams quoted back to judge: {ok}");
    // Exact stop and resume: every frame the switch wrote into the guest's
    // RX ring, on the source or on the target, reached its driver once.
    assert_eq!(
        guest_rx, delivered,
        "frames the guest's driver took vs frames the switch wrote into its rings"
    );
    assert_eq!(
        (bad, dup, csum, hdr, len_err, frame_err),
        (0, 0, 0, 0, 0, 0),
        "corrupted datagrams after the migration \
         (other content, repeated, UDP checksum, IP header, length, frame)"
    );
    log_taken(&sw, 2);
    wait_fdb(&sw, "c");

    let run_c = c.guest.quit();
    run_c.assert_ok();
    drop((a, b));
    sw.stop();
}

/// Stops a peer script (SIGTERM) and returns the `key=N` counts it printed,
/// `keys` all present.
fn stop_peer(p: &mut NsProcess, keys: &[&str]) -> BTreeMap<String, u64> {
    p.signal("TERM");
    p.wait(Duration::from_secs(10));
    let m: BTreeMap<String, u64> = p
        .results("")
        .into_iter()
        .filter_map(|(k, v)| Some((k, v.parse().ok()?)))
        .collect();
    for k in keys {
        assert!(m.contains_key(*k), "no {k} from {}", p.describe());
    }
    m
}

/// Datagrams the guest's kernel verified and found no socket for.
fn no_ports(g: &mut GuestHandle) -> u64 {
    let snmp = parse_snmp(&g.exec("cat /proc/net/snmp", CMD));
    snmp.get("Udp.NoPorts").copied().expect("Udp.NoPorts")
}

/// A guest without `GUEST_ANNOUNCE` (`guest_announce=off`) migrates a to b:
/// QEMU sends `SEND_RARP` to the switch, which moves the FDB to port b at
/// once, while port a still exists with the same MAC, and floods the RARP
/// announce out of the uplink. The guest is idle (no frame of its own on
/// b) while this is checked; the namespace host probes the guest's MAC
/// with frames of an unused EtherType the guest drops silently.
#[test]
#[ignore = "needs root, QEMU and the e2e lock: VHU_E2E=1 ... --include-ignored"]
fn guest_without_announce_is_announced_by_the_switch() {
    let run = RunDir::new("migrate-rarp");
    let (mut sw, host, mut a) = source(&run, false, false);
    let ns = host.ns();
    let mut b = start_vm(&run, &sw, "b", true, false, false);
    let rounds = b
        .qmp
        .execute("query-migrate-parameters", serde_json::json!({}))["announce-rounds"]
        .as_u64()
        .expect("announce-rounds");
    let mut capture = ns.spawn_python(
        vhu_tests::peers::CAPTURE_FRAMES,
        &[host.peer(), "0x8035", "1000", "120"],
    );
    capture.wait_for_stdout("READY", Duration::from_secs(10));
    let mut probe = ns.spawn_python(PROBE, &[host.peer(), MAC, "5"]);
    probe.wait_for_stdout("ready", Duration::from_secs(10));
    thread::sleep(Duration::from_secs(1));
    let (_, running) = migrate(&mut a, &mut b);
    let first = first_frame_ms(&sw, "b", running);
    // Moved by the announce, before the guest sent anything on b.
    let at = fdb_port(&sw);
    let guest_tx = sw.stats("b").total.tx_packets;
    println!(
        "SEND_RARP: first frame through the uplink into the target {first} ms after it ran; \
         FDB then on {at:?}, {guest_tx} frames from the guest on b"
    );
    assert_eq!(
        at.as_deref(),
        Some("b"),
        "the FDB did not follow the announce"
    );
    assert_eq!(
        guest_tx, 0,
        "the guest sent before the check: it proves nothing"
    );
    // QEMU's announce rounds span about 1.3 s.
    thread::sleep(Duration::from_secs(3));
    probe.kill();
    capture.kill();
    let want = hex(&vhost_net_backend::wire::rarp_announce(
        vhu_tests::netns::mac_octets(MAC),
    ));
    let frames: Vec<String> = capture
        .stdout()
        .lines()
        .filter(|l| l.len() > 20 && l.chars().all(|c| c.is_ascii_hexdigit()))
        .map(str::to_owned)
        .collect();
    println!(
        "uplink host: {} RARP frames, {rounds} announce rounds",
        frames.len()
    );
    assert_eq!(
        frames,
        vec![want; rounds as usize],
        "the host did not see exactly one RARP announce of {MAC} per round"
    );
    assert_eq!(announces(&sw, "b"), (rounds, 0));
    assert_eq!(announces(&sw, "a"), (0, 0));
    // The guest is reachable on b.
    let out = b
        .guest
        .exec(&format!("ping -c 3 -i 0.2 -W 5 {HOST_IP}"), CMD);
    assert!(out.contains("3 packets received"), "{out}");
    assert!(sw.log().contains("SEND_RARP"), "no SEND_RARP in the log");
    b.guest.quit().assert_ok();
    drop(a);
    sw.stop();
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Sends a frame of EtherType 0x88b5 (local experimental; the guest drops
/// it without a word) to MAC on IFNAME every INTERVAL_MS until killed.
const PROBE: &str = r#"
import socket, sys, time
ifname, mac, interval = sys.argv[1], bytes.fromhex(sys.argv[2].replace(":", "")), int(sys.argv[3]) / 1000.0
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((ifname, 0))
src = s.getsockname()[4][:6]
print("ready", flush=True)
n = 0
while True:
    s.send(mac + src + b"\x88\xb5" + n.to_bytes(4, "big") + bytes(42))
    n += 1
    time.sleep(interval)
"#;
