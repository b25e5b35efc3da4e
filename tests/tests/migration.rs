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
//! QEMU runs under TCG; the guest (128 MiB, one CPU per queue pair) is the
//! agent guest of `scripts/guest-init.sh`, 10.0.0.2.
//!
//! `{split,packed}_ring_guest_migrates_twice_without_corruption` (one
//! queue pair), in fact three times:
//! 1. **Connectivity across a migration (a to b).** The namespace host pings
//!    the guest every 10 ms (ICMP echo) while the guest migrates. Afterwards QEMU b runs
//!    the guest (QMP `running`; a is `postmigrate`), the agent answers on b's
//!    console, the guest's receive counters keep increasing (5 pings it
//!    sends are all answered), and the FDB has its address on port `b`
//!    (moved by the announce the guest sends on the target,
//!    `VIRTIO_NET_F_GUEST_ANNOUNCE`). Reported: pings lost and the longest
//!    gap between two replies; asserted: the gap is under 5 s.
//! 2. **Memory consistency under load (b to c).** The namespace floods the
//!    guest with numbered UDP datagrams of a known pattern (each 1000-byte
//!    payload is its 10-digit sequence number 100 times), as fast as the
//!    guest takes them, while it migrates again. No socket listens in the
//!    guest: its kernel verifies each datagram's checksums and quotes its
//!    first 520 payload bytes back in an ICMP port unreachable, which the
//!    host checks: no quote differs from its pattern, none repeats or was
//!    never sent, no UDP checksum, IP header, RX length or frame error in
//!    the guest, datagrams verified on the target, and exactly as many
//!    frames reached the guest's driver as the switch wrote into its RX
//!    rings on both ports.
//! 3. **Buffers written behind the first RAM pass (c to d).** The case the
//!    dirty log exists for, made certain (`stale_buffer_migration`): the
//!    first RAM pass is held (bandwidth cap) three quarters through, the
//!    guest's driver leaves its RX ring alone for 8 s (`napi_defer_hard_irqs`
//!    and `gro_flush_timeout`), the host fills the ring with pattern
//!    datagrams, the migration completes, and only then does the guest read
//!    its buffers. Asserted: its driver took none of them before the final
//!    stop, and on the target every one (about 255) reaches its driver and
//!    is verified, with no error of any kind, and every quote it sends
//!    comes back intact (its ICMP socket may drop some of the burst: at
//!    least half must be quoted). The switch logged that it took the dirty log
//!    (`SET_LOG_BASE`) at each migration.
//!
//! `{,packed_ring_}without_dirty_logging_the_guest_reads_stale_buffers`:
//! step 3 from a switch started with `VHU_DEBUG_NO_DIRTY_LOG=1` (it accepts
//! the log and marks nothing): the guest reads stale buffers, asserted: at
//! least one written buffer does not come back intact (all of them did not,
//! in every run so far). This is the proof that the check can fail.
//!
//! `guest_without_announce_is_announced_by_the_switch` (split, one queue
//! pair) and `packed_two_queue_guest_without_announce_is_announced_by_the_switch`
//! (packed, two queue pairs, two CPUs): the guest (`guest_announce=off`)
//! migrates a to b idle; QEMU sends `SEND_RARP`: the FDB has the MAC on b
//! before the guest sent anything there, the host captures exactly one RARP
//! announce per QEMU announce round (byte for byte), and
//! `vhu_port_announces_total` of b is the number of rounds. With two queue
//! pairs, queue pair 1 carries traffic both ways on port a before the move
//! and on port b after it (the guest pings from CPU 1, the host's probes
//! carry a source address the switch hashes to RX queue 1), asserted on the
//! switch's per-queue counters. The GUEST_ANNOUNCE runs assert that no
//! `SEND_RARP` came; all report the time from the target running to the
//! first uplink frame into it.
//!
//! With `VHU_DEBUG_NO_DIRTY_LOG=1` in the test's own environment every
//! switch inherits it, and the two `migrates_twice` runs fail at step 3
//! (step 2 alone does not catch it: see `docs/migration.md`).
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
use vhu_tests::process::RunDir;
use vhu_tests::qemu::{incoming_args, qmp_args, spawn_guest, GuestHandle, GuestOpts, Qmp};
use vhu_tests::switch::SwitchProc;

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
/// `max-bandwidth` that limits nothing.
const UNLIMITED: u64 = 1 << 40;

/// The debug switch of the library (`ring::NO_DIRTY_LOG_ENV`).
const NO_LOG_ENV: &str = "VHU_DEBUG_NO_DIRTY_LOG";

/// Floods ADDR PORT with numbered pattern datagrams (the 1000-byte payload
/// is the 10-digit sequence number 100 times, numbers from BASE on) until
/// SIGTERM, pausing 1 ms every 64 (SIGUSR1 stops sending, the quotes are
/// still counted), and checks what the guest's kernel quotes back: no socket
/// listens there, so the guest answers every datagram whose IP and UDP
/// checksums it verified with an ICMP port unreachable that carries the
/// datagram's first 520 payload bytes. A quote that is not its pattern is
/// `bad`, a sequence number quoted twice is `dup` and one this run did not
/// send is `old` (both: a stale buffer holding an older datagram); `ok`
/// counts the others. On SIGTERM prints `sent=N ok=N bad=N dup=N old=N`.
const PATTERN_FLOOD: &str = r#"
import os, signal, socket, struct, sys, threading, time
dst = (sys.argv[1], int(sys.argv[2]))
base = int(sys.argv[3]) if len(sys.argv) > 3 else 0
sending = True
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
r = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
r.setsockopt(socket.SOL_SOCKET, 33, 16 << 20)  # SO_RCVBUFFORCE
sent, ok, bad, dup, old, seen = 0, 0, 0, 0, 0, set()
lock = threading.Lock()
def rx():
    global ok, bad, dup, old
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
            elif not base <= int(seq) < base + sent: old += 1
            else: seen.add(seq); ok += 1
def stop(*_):
    time.sleep(0.5)
    with lock:
        print("sent=%d ok=%d bad=%d dup=%d old=%d" % (sent, ok, bad, dup, old), flush=True)
    os._exit(0)
def pause(*_):
    global sending
    sending = False
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGUSR1, pause)
threading.Thread(target=rx, daemon=True).start()
print("ready", flush=True)
while True:
    for _ in range(64 if sending else 0):
        # Counted before it leaves: its quote may come back before sendto
        # returns to this thread.
        with lock:
            seq = base + sent
            sent += 1
        try:
            s.sendto(b"%010d" % seq * 100, dst)
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

/// The guest's device: ring layout, queue pairs (the guest gets one CPU
/// per queue pair, so that Linux enables them all and maps CPU i to TX
/// queue i) and whether it acks `GUEST_ANNOUNCE`.
#[derive(Debug, Clone, Copy)]
struct Dev {
    packed: bool,
    queues: u16,
    guest_announce: bool,
}

/// Starts QEMU `name` (the source when `target` is false, else a target
/// waiting with `-incoming`), adds its client-role port `name` to the
/// switch and connects to its monitor.
fn start_vm(run: &RunDir, sw: &SwitchProc, name: &str, target: bool, dev: Dev) -> Vm {
    let socket = run.join(&format!("{name}.sock"));
    let qmp = run.join(&format!("{name}.qmp"));
    let incoming = run.join(&format!("{name}.migrate"));
    let mut extra_args = if target {
        incoming_args(&qmp, &incoming)
    } else {
        qmp_args(&qmp)
    };
    if !dev.guest_announce {
        // The guest cannot announce itself: QEMU sends SEND_RARP instead.
        extra_args.extend(["-global".into(), "virtio-net-pci.guest_announce=off".into()]);
    }
    let mut guest = spawn_guest(GuestOpts {
        mac: MAC.into(),
        qemu_is_server: true,
        mem_mib: 128,
        packed: dev.packed,
        queues: dev.queues,
        smp: u8::try_from(dev.queues).expect("queue pairs"),
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
            r#"{{"name":"{name}","kind":"vhost-user","role":"client","socket":"{}","queues":{}}}"#,
            socket.display(),
            dev.queues
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

/// The switch (with `VHU_DEBUG_NO_DIRTY_LOG=1` in its environment when
/// `no_log`), the namespace host on its uplink, and the source QEMU `a`
/// booted, its guest known on port `a` (it pinged the host).
fn source(run: &RunDir, dev: Dev, no_log: bool) -> (SwitchProc, VethPair, Vm) {
    let sw = if no_log {
        // Inherited by the switch only: the variable is removed again at
        // once (the tests of this file run one at a time).
        std::env::set_var(NO_LOG_ENV, "1");
        let sw = SwitchProc::start(run, "", &[]);
        std::env::remove_var(NO_LOG_ENV);
        sw
    } else {
        SwitchProc::start(run, "", &[])
    };
    let host = VethPair::new();
    host.set_peer_addr(&format!("{HOST_IP}/24"));
    sw.add_af_packet("up", host.host());
    let mut a = start_vm(run, &sw, "a", false, dev);
    a.guest.wait_agent(BOOT);
    let out = a
        .guest
        .exec(&format!("ping -c 3 -i 0.2 -W 5 {HOST_IP}"), CMD);
    assert!(out.contains("3 packets received"), "{out}");
    wait_fdb(&sw, "a");
    (sw, host, a)
}

/// Starts migrating `from` to `to` at most `bandwidth` bytes/s.
fn start_migration(from: &mut Vm, to: &mut Vm, bandwidth: u64) {
    assert_eq!(to.qmp.status(), "inmigrate");
    from.qmp.migrate(&to.incoming, 300, bandwidth);
}

/// Waits until the migration `from` to `to` completed and the target runs;
/// returns QMP's `query-migrate` at completion and when the target was
/// first seen running.
fn finish_migration(from: &mut Vm, to: &mut Vm) -> (serde_json::Value, Instant) {
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

/// Migrates `from` to `to` (at `VHU_MIG_BW` bytes/s, default unlimited).
fn migrate(from: &mut Vm, to: &mut Vm) -> (serde_json::Value, Instant) {
    let bw = std::env::var("VHU_MIG_BW")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(UNLIMITED);
    start_migration(from, to, bw);
    finish_migration(from, to)
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

/// The debug switch is set in this process's environment (and so in the
/// switch's): the negative run of the whole file.
fn outer_no_log() -> bool {
    std::env::var_os(NO_LOG_ENV).is_some_and(|v| !v.is_empty() && v != "0")
}

/// The switch served `SET_LOG_BASE` `times` times (with `no_log`: accepted
/// it that often and marked nothing).
fn log_taken(sw: &SwitchProc, times: usize, no_log: bool) {
    let log = sw.log();
    for l in log
        .lines()
        .filter(|l| l.contains("dirty log") || l.contains("used index"))
    {
        println!("switch: {l}");
    }
    if no_log {
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
    let dev = Dev {
        packed,
        queues: 1,
        guest_announce: true,
    };
    let no_log = outer_no_log();
    let (mut sw, host, mut a) = source(&run, dev, no_log);
    let ns = host.ns();

    // ===== 1: a -> b under a 100/s ping stream =====
    let mut b = start_vm(&run, &sw, "b", true, dev);
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
    log_taken(&sw, 1, no_log);

    // ===== 2: b -> c under a pattern flood =====
    let mut c = start_vm(&run, &sw, "c", true, dev);
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
    let f = stop_peer(&mut flood, &["sent", "ok", "bad", "dup", "old"]);
    let (sent, ok, bad, dup, old) = (f["sent"], f["ok"], f["bad"], f["dup"], f["old"]);
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
         repeated, {old} never sent, {csum} UDP checksum errors, {hdr} IP header errors, {len_err} length \
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
    if guest_rx != delivered {
        // Whether the guest still receives at all (a driver waiting for an
        // interrupt that never comes, its ring full of used buffers, does
        // not), to tell a lost interrupt from frames lost in the handover.
        let ping = c
            .guest
            .exec(&format!("ping -c 3 -i 0.2 -W 2 {HOST_IP}"), CMD);
        let rx_now = counter(&mut c.guest, "rx_packets") - guest_rx_before;
        panic!(
            "frames the guest's driver took ({guest_rx}) vs frames the switch wrote into \
             its rings ({delivered}); afterwards the driver has taken {rx_now}, and a ping \
             from the guest:\n{ping}"
        );
    }
    assert_eq!(
        (bad, dup, old, csum, hdr, len_err, frame_err),
        (0, 0, 0, 0, 0, 0, 0),
        "corrupted datagrams after the migration \
         (other content, repeated, never sent, UDP checksum, IP header, length, frame)"
    );
    log_taken(&sw, 2, no_log);
    wait_fdb(&sw, "c");

    // ===== 3: c -> d, RX buffers filled behind the first RAM pass =====
    let mut d = start_vm(&run, &sw, "d", true, dev);
    let st = stale_buffer_migration(&sw, &host, &mut c, "c", &mut d, "d", 1_000_000_000);
    st.print(if packed {
        "packed, logging on"
    } else {
        "split, logging on"
    });
    st.assert_intact();
    log_taken(&sw, 3, no_log);
    wait_fdb(&sw, "d");

    let run_d = d.guest.quit();
    run_d.assert_ok();
    drop((a, b, c));
    sw.stop();
}

/// A split-ring guest migrates with its RX buffers filled behind the first
/// RAM pass (see [`stale_buffer_migration`]) from a switch started with
/// `VHU_DEBUG_NO_DIRTY_LOG=1`: the pages the switch wrote are never sent
/// again, and on the target the guest reads stale buffers. The same
/// migration with the log marked (`migrate_twice`, step 3) reads every one
/// intact: this is the test that the consistency check can fail.
#[test]
#[ignore = "needs root, QEMU and the e2e lock: VHU_E2E=1 ... --include-ignored"]
fn without_dirty_logging_the_guest_reads_stale_buffers() {
    stale_without_log("migrate-nolog-split", false);
}

/// [`without_dirty_logging_the_guest_reads_stale_buffers`] with packed
/// rings (whose used descriptors the log must carry too).
#[test]
#[ignore = "needs root, QEMU and the e2e lock: VHU_E2E=1 ... --include-ignored"]
fn packed_ring_without_dirty_logging_the_guest_reads_stale_buffers() {
    stale_without_log("migrate-nolog-packed", true);
}

fn stale_without_log(name: &str, packed: bool) {
    let run = RunDir::new(name);
    let dev = Dev {
        packed,
        queues: 1,
        guest_announce: true,
    };
    let (mut sw, host, mut a) = source(&run, dev, true);
    let mut b = start_vm(&run, &sw, "b", true, dev);
    let st = stale_buffer_migration(&sw, &host, &mut a, "a", &mut b, "b", 0);
    st.print(&format!(
        "{}, {NO_LOG_ENV}=1",
        if packed { "packed" } else { "split" }
    ));
    assert!(
        st.stale() > 0,
        "without the dirty log every buffer still reached the target intact: {st:?}"
    );
    log_taken(&sw, 1, true);
    drop((a, b));
    sw.stop();
}

/// How long the guest's driver leaves its RX ring alone in
/// [`stale_buffer_migration`] (guest time; under TCG the host's clock).
const WINDOW: Duration = Duration::from_secs(8);
/// `max-bandwidth` of the first RAM pass until it is held.
const PASS_BW: u64 = 32 << 20;
/// `max-bandwidth` while it is held.
const HELD_BW: u64 = 16 << 10;

/// What the guest made of the RX buffers the switch filled in
/// [`stale_buffer_migration`].
#[derive(Debug)]
struct Stale {
    /// Frames the switch wrote into the source's RX ring.
    written: u64,
    /// Of those, quoted back by the guest with their own number and pattern.
    fresh: u64,
    /// Quotes of another datagram (a number quoted before, or not of this
    /// flood) or another content.
    old: u64,
    bad: u64,
    /// The guest's counters over the migration: datagrams it verified
    /// (`Udp.NoPorts`), UDP checksum and IP header errors, RX length and
    /// frame errors, frames its driver took.
    verified: u64,
    csum: u64,
    hdr: u64,
    len_err: u64,
    frame_err: u64,
    driver_rx: u64,
    /// After the move, until the end: ICMP port unreachables the guest
    /// sent (`Icmp.OutDestUnreachs`), frames the switch took from it on the
    /// target port, frames the namespace host's interface received.
    icmp_out: u64,
    switch_tx: u64,
    host_rx: u64,
    /// How far the first RAM pass was when the ring was filled:
    /// `remaining` of `total` bytes.
    remaining: u64,
    total: u64,
}

impl Stale {
    /// Written frames that did not reach the guest intact.
    fn stale(&self) -> u64 {
        self.written.saturating_sub(self.fresh)
    }

    fn print(&self, what: &str) {
        println!(
            "stale buffers ({what}): the switch filled {} RX buffers with the first RAM pass \
             at {} of {} MiB left; the guest took {} frames on the target, verified {} \
             datagrams, quoted {} intact; stale: {} ({} quoted with an older datagram, {} \
             with another content, {} UDP checksum errors, {} IP header errors, {} length \
             errors, {} frame errors); then the guest sent {} port unreachables, the switch \
             took {} frames from it, the host received {}",
            self.written,
            self.remaining >> 20,
            self.total >> 20,
            self.driver_rx,
            self.verified,
            self.fresh,
            self.stale(),
            self.old,
            self.bad,
            self.csum,
            self.hdr,
            self.len_err,
            self.frame_err,
            self.icmp_out,
            self.switch_tx,
            self.host_rx
        );
    }

    /// Every written buffer reached the guest's driver and was verified
    /// (checksums, no error of any kind), and every quote the guest sent
    /// came back with its own number and pattern. The guest's ICMP socket
    /// drops some quotes of a burst of 255 (its send buffer is full while
    /// their TX completions are pending: `Icmp.OutDestUnreachs` below
    /// `Udp.NoPorts`): those are not counted as stale, but at least half
    /// must be quoted.
    fn assert_intact(&self) {
        assert!(self.written >= 64, "too few buffers filled: {self:?}");
        assert_eq!(
            (self.verified, self.driver_rx),
            (self.written, self.written),
            "buffers written on the source not verified on the target: {self:?}"
        );
        assert_eq!(
            (
                self.old,
                self.bad,
                self.csum,
                self.hdr,
                self.len_err,
                self.frame_err
            ),
            (0, 0, 0, 0, 0, 0),
            "stale buffers on the target: {self:?}"
        );
        assert_eq!(
            self.fresh, self.icmp_out,
            "quotes the guest sent vs quotes back intact: {self:?}"
        );
        assert!(
            2 * self.fresh >= self.written,
            "too few quotes to judge: {self:?}"
        );
    }
}

/// Migrates `from` (on port `from_port`) to `to` so that the switch fills
/// RX buffers whose pages the first RAM pass already sent, and the guest
/// does not touch them before the final stop: only the dirty log makes
/// QEMU send them again.
///
/// 1. The first pass runs at `PASS_BW`; when three quarters of RAM are
///    scanned it is held at `HELD_BW` (`migrate-set-parameters`).
/// 2. The guest's driver stops looking at its RX ring for `WINDOW`: with
///    `napi_defer_hard_irqs` 1 and `gro_flush_timeout` `WINDOW`, the NAPI
///    poll of the next frame (the reply to one ping) leaves the queue's
///    interrupt off and re-polls only when its timer fires.
/// 3. The namespace floods the guest with numbered pattern datagrams
///    (`PATTERN_FLOOD`, numbers from `base`) until the switch stops
///    delivering (the ring is full); asserted: the guest's driver took none.
/// 4. The pass is released; the migration completes; on the target the
///    guest's driver has still taken none (the window was closed at the
///    stop). When the window ends the guest verifies and quotes what its
///    buffers hold.
fn stale_buffer_migration(
    sw: &SwitchProc,
    host: &VethPair,
    from: &mut Vm,
    from_port: &str,
    to: &mut Vm,
    to_port: &str,
    base: u64,
) -> Stale {
    let ns = host.ns();
    // No ARP request of the host's may land in the ring.
    ns.exec(&[
        "ip",
        "neigh",
        "replace",
        GUEST_IP,
        "lladdr",
        MAC,
        "dev",
        host.peer(),
        "nud",
        "permanent",
    ]);
    from.guest.exec(
        "sysctl -w net.ipv4.icmp_ratelimit=0 net.ipv4.icmp_msgs_per_sec=10000000 \
         net.ipv4.icmp_msgs_burst=10000000 >/dev/null",
        CMD,
    );
    let snmp_before = parse_snmp(&from.guest.exec("cat /proc/net/snmp", CMD));
    let len_before = counter(&mut from.guest, "rx_length_errors");
    let frame_before = counter(&mut from.guest, "rx_frame_errors");

    // 1. Hold the first pass three quarters through.
    start_migration(from, to, PASS_BW);
    let deadline = Instant::now() + MIGRATION;
    loop {
        let info = from.qmp.execute("query-migrate", serde_json::json!({}));
        let status = info["status"].as_str().unwrap_or_default().to_owned();
        let (total, remaining) = (
            info["ram"]["total"].as_u64().unwrap_or(0),
            info["ram"]["remaining"].as_u64().unwrap_or(0),
        );
        if status == "active" && total > 0 && remaining <= total / 4 {
            break;
        }
        assert!(
            matches!(status.as_str(), "setup" | "active") && Instant::now() < deadline,
            "the first RAM pass was not caught: {info}"
        );
        thread::sleep(Duration::from_millis(2));
    }
    from.qmp.execute(
        "migrate-set-parameters",
        serde_json::json!({ "max-bandwidth": HELD_BW }),
    );
    let info = from.qmp.execute("query-migrate", serde_json::json!({}));
    assert_eq!(info["status"], "active", "{info}");
    let (total, remaining) = (
        info["ram"]["total"].as_u64().unwrap_or(0),
        info["ram"]["remaining"].as_u64().unwrap_or(0),
    );
    println!(
        "first RAM pass held at {} of {} MiB left (dirty-sync-count {})",
        remaining >> 20,
        total >> 20,
        info["ram"]["dirty-sync-count"]
    );

    // 2. The driver leaves its RX ring alone from the ping's reply on.
    let sys = "/sys/class/net/eth0";
    let opened = Instant::now();
    let rx_held: u64 = from
        .guest
        .exec(
            &format!(
                "echo {} > {sys}/gro_flush_timeout; echo 1 > {sys}/napi_defer_hard_irqs; \
                 ping -c 1 -W 2 {HOST_IP} >/dev/null; echo 0 > {sys}/napi_defer_hard_irqs; \
                 echo 0 > {sys}/gro_flush_timeout; cat {sys}/statistics/rx_packets",
                WINDOW.as_nanos()
            ),
            CMD,
        )
        .trim()
        .parse()
        .expect("rx_packets");
    let window_end = Instant::now() + WINDOW;

    // 3. Fill the ring.
    let rx0 = sw.stats(from_port).total.rx_packets;
    let mut flood = ns.spawn_python(PATTERN_FLOOD, &[GUEST_IP, PATTERN_PORT, &base.to_string()]);
    flood.wait_for_stdout("ready", Duration::from_secs(10));
    let started = Instant::now();
    let (mut last, mut since) = (rx0, Instant::now());
    loop {
        thread::sleep(Duration::from_millis(20));
        let n = sw.stats(from_port).total.rx_packets;
        if n != last {
            (last, since) = (n, Instant::now());
        } else if n > rx0 && since.elapsed() > Duration::from_millis(300) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the switch delivered {} frames into {from_port} and does not stop",
            n - rx0
        );
    }
    flood.signal("USR1");
    thread::sleep(Duration::from_millis(100));
    let written = sw.stats(from_port).total.rx_packets - rx0;
    assert_eq!(
        counter(&mut from.guest, "rx_packets"),
        rx_held,
        "the guest's driver took frames from its full ring: the scenario proves nothing"
    );

    // 4. Complete; the driver still has not looked at the ring.
    from.qmp.execute(
        "migrate-set-parameters",
        serde_json::json!({ "max-bandwidth": UNLIMITED }),
    );
    let _ = finish_migration(from, to);
    let rx_target = counter(&mut to.guest, "rx_packets");
    assert!(
        opened.elapsed() < WINDOW,
        "the migration outlasted the guest's {WINDOW:?} window: the scenario proves nothing"
    );
    assert_eq!(
        rx_target, rx_held,
        "the guest's driver took frames before the final stop: the scenario proves nothing"
    );
    let tx_moved = sw.stats(to_port).total.tx_packets;
    let host_moved = host.peer_stats().rx_packets;
    thread::sleep(window_end.saturating_duration_since(Instant::now()) + Duration::from_secs(2));
    let f = stop_peer(&mut flood, &["sent", "ok", "bad", "dup", "old"]);
    let switch_tx = sw.stats(to_port).total.tx_packets - tx_moved;
    let host_rx = host.peer_stats().rx_packets - host_moved;
    let g = &mut to.guest;
    let snmp = parse_snmp(&g.exec("cat /proc/net/snmp", CMD));
    let delta =
        |k: &str| snmp.get(k).copied().unwrap_or(0) - snmp_before.get(k).copied().unwrap_or(0);
    Stale {
        written,
        fresh: f["ok"],
        old: f["dup"] + f["old"],
        bad: f["bad"],
        verified: delta("Udp.NoPorts"),
        csum: delta("Udp.InCsumErrors"),
        hdr: delta("Ip.InHdrErrors"),
        len_err: counter(g, "rx_length_errors") - len_before,
        frame_err: counter(g, "rx_frame_errors") - frame_before,
        driver_rx: counter(g, "rx_packets") - rx_held,
        icmp_out: delta("Icmp.OutDestUnreachs"),
        switch_tx,
        host_rx,
        remaining,
        total,
    }
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
/// with frames of an unused EtherType the guest drops silently. Split
/// rings, one queue pair.
#[test]
#[ignore = "needs root, QEMU and the e2e lock: VHU_E2E=1 ... --include-ignored"]
fn guest_without_announce_is_announced_by_the_switch() {
    announced_by_the_switch(
        "migrate-rarp",
        Dev {
            packed: false,
            queues: 1,
            guest_announce: false,
        },
    );
}

/// [`guest_without_announce_is_announced_by_the_switch`] with packed rings
/// and two queue pairs (two CPUs), both in use on both sides of the move:
/// the guest sends from CPU 1 (TX queue 1) and the host's probes carry a
/// source address the switch's flow hash puts on RX queue 1; the counters
/// of queue 1 of port a before, and of port b after the move, count them.
#[test]
#[ignore = "needs root, QEMU and the e2e lock: VHU_E2E=1 ... --include-ignored"]
fn packed_two_queue_guest_without_announce_is_announced_by_the_switch() {
    announced_by_the_switch(
        "migrate-rarp-packed-2q",
        Dev {
            packed: true,
            queues: 2,
            guest_announce: false,
        },
    );
}

fn announced_by_the_switch(name: &str, dev: Dev) {
    let run = RunDir::new(name);
    let (mut sw, host, mut a) = source(&run, dev, false);
    let ns = host.ns();
    let mq = dev.queues > 1;
    // From CPU 1 the guest sends on TX queue 1.
    let ping = if mq { "taskset -c 1 ping" } else { "ping" };
    let mut b = start_vm(&run, &sw, "b", true, dev);
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
    let probe_src = if mq {
        src_mac_for_queue(1, usize::from(dev.queues))
    } else {
        host.peer_mac()
    };
    let mut probe = ns.spawn_python(PROBE, &[host.peer(), MAC, "5", &probe_src]);
    probe.wait_for_stdout("ready", Duration::from_secs(10));
    thread::sleep(Duration::from_secs(1));
    if mq {
        let out = a
            .guest
            .exec(&format!("{ping} -c 3 -i 0.2 -W 5 {HOST_IP}"), CMD);
        assert!(out.contains("3 packets received"), "{out}");
        assert_queue1_used(&sw, "a", "before the move");
    }
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
        .exec(&format!("{ping} -c 3 -i 0.2 -W 5 {HOST_IP}"), CMD);
    assert!(out.contains("3 packets received"), "{out}");
    if mq {
        assert_queue1_used(&sw, "b", "after the move");
    }
    assert!(sw.log().contains("SEND_RARP"), "no SEND_RARP in the log");
    b.guest.quit().assert_ok();
    drop(a);
    sw.stop();
}

/// A locally administered source address whose frames to the guest the
/// switch delivers on its RX queue `q` of `n`: the switch's flow hash
/// (`flow_queue` in `vhu-switch/src/pmd/dest.rs`) over the destination and
/// source addresses, reproduced.
fn src_mac_for_queue(q: usize, n: usize) -> String {
    let dst = vhu_tests::netns::mac_octets(MAC);
    (1u8..=255)
        .map(|i| [0x02, 0, 0, 0, 0x88, i])
        .find(|src| {
            let h = dst
                .iter()
                .chain(src)
                .fold(0u32, |a, &b| a.rotate_left(5) ^ u32::from(b));
            h as usize % n == q
        })
        .map(|m| {
            m.iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(":")
        })
        .expect("a source address for the queue")
}

/// Queue pair 1 of `port` carried frames both ways (the guest's 3 pings
/// at least, from it); prints its counts.
fn assert_queue1_used(sw: &SwitchProc, port: &str, when: &str) {
    let st = sw.stats(port);
    let q1 = &st.queues[1];
    println!(
        "port {port}, queue 1 {when}: {} frames into the guest, {} from it",
        q1.rx_packets, q1.tx_packets
    );
    assert!(
        q1.rx_packets > 0 && q1.tx_packets >= 3,
        "queue pair 1 of port {port} unused: {st:?}"
    );
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Sends a frame of EtherType 0x88b5 (local experimental; the guest drops
/// it without a word) from SRC to MAC on IFNAME every INTERVAL_MS until
/// killed.
const PROBE: &str = r#"
import socket, sys, time
ifname, mac, interval = sys.argv[1], bytes.fromhex(sys.argv[2].replace(":", "")), int(sys.argv[3]) / 1000.0
src = bytes.fromhex(sys.argv[4].replace(":", ""))
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((ifname, 0))
print("ready", flush=True)
n = 0
while True:
    s.send(mac + src + b"\x88\xb5" + n.to_bytes(4, "big") + bytes(42))
    n += 1
    time.sleep(interval)
"#;
