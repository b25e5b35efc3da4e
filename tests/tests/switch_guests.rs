// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! End-to-end tests of `vhu-switch` with real Linux guests (QEMU under TCG,
//! the Debian cloud kernel, busybox), driven phase by phase through the
//! guests' console agent (`vhu.test=agent` in `scripts/guest-init.sh`).
//!
//! ```text
//!  guest g1 10.0.0.1 --vm1--+            +--up (AF_PACKET)--veth--> netns host 10.0.0.10
//!                           +-- switch --+
//!  guest g2 10.0.0.2 --vm2--+            +--pod (TAP, moved and renamed eth1)--> netns pod 10.0.0.20
//! ```
//!
//! * `guests_reach_each_other_a_host_and_a_pod`: two guests booted at once
//!   on server-role ports the switch created. Phase 1, the switch has only
//!   their two ports: every ping is answered; 64 MiB of random data cross
//!   over TCP (busybox `nc`) with the same sha256 on both ends and exactly
//!   64 MiB received; then, at a quiet moment, each guest's
//!   `/sys/class/net/eth0/statistics` equal its port's counters (frames and
//!   bytes, both ways) and what one guest sent is exactly what the other
//!   received (two ports: nothing is flooded elsewhere), but for frames
//!   counted `no_buffers` when the receiving guest, under TCG on a loaded
//!   host, had no RX buffer posted (the switch's documented isolation;
//!   at most 5 %, every other drop reason zero).
//!   Phase 2, an AF_PACKET uplink on a veth pair and a TAP port whose device
//!   the test moves into a pod's namespace and renames `eth1` are added:
//!   g1 and the host, and g2 and the pod, ping and move 8 MiB each way at the
//!   same time, sha256 compared on both ends; the FDB holds the four
//!   addresses on their ports; the moved TAP's kernel counters equal its
//!   port's.
//! * `kill_9_and_restart_leave_the_vms_running`: a guest whose QEMU owns the
//!   socket (`server=on`) and a `dpdk-testpmd` with `server=1` (macswap),
//!   both on client-role ports created through the API, plus a server-role
//!   port. The guest pings the testpmd's address every 20 ms (the reflected
//!   requests come back to it); the switch is `kill -9`ed and restarted: the
//!   three ports are back, frames reach the guest again within 2 s of the
//!   restarted switch being ready, and the guest did not reboot (same QEMU
//!   pid, `/proc/uptime` grew). SIGTERM then removes the switch's own
//!   sockets (control, server port) and leaves QEMU's and testpmd's.
//!
//! They need root and the peers (`scripts/install-peers.sh`); run them as
//! `scripts/test.sh` does, one at a time.

use std::collections::BTreeMap;
use std::thread;
use std::time::{Duration, Instant};

use vhost_net_backend::DropReason;
use vhu_api::{FdbEntryView, PortStats, PortView, QueueStats};
use vhu_tests::netns::{self, Netns, VethPair};
use vhu_tests::peers;
use vhu_tests::process::RunDir;
use vhu_tests::qemu::{parse_results, spawn_guest, GuestHandle, GuestOpts};
use vhu_tests::switch::SwitchProc;
use vhu_tests::testpmd::{FrontendOpts, Testpmd, LINK_TIMEOUT, READY_TIMEOUT};

/// Until a guest's agent answers: TCG boots take 8-15 s alone, more with two
/// guests on two shared cores.
const BOOT: Duration = Duration::from_secs(180);
/// One guest command (the 64 MiB transfer is the longest, ~10 s alone).
const CMD: Duration = Duration::from_secs(120);
/// Counters unchanged for this long are quiet.
const QUIET: Duration = Duration::from_millis(500);

const MAC1: &str = "52:54:00:00:00:01";
const MAC2: &str = "52:54:00:00:00:02";
const MAC3: &str = "52:54:00:00:00:03";
/// testpmd's port in the restart test.
const TP_MAC: &str = "02:00:00:00:00:99";

/// The transfer between the two guests.
const BIG_MIB: u64 = 64;
/// Each way between a guest and a namespace.
const SMALL_MIB: u64 = 8;

/// Shell functions every agent guest gets: `digest FILE KEY` prints
/// `VHU-RESULT KEY_sha256=... KEY_bytes=...`; `listening PORT` waits until
/// a TCP socket listens on PORT (busybox `nc -l` listens on `::`, even with
/// IPv6 off); `counters` prints eth0's statistics; `/tmp/hold` is a FIFO
/// that `nc -l` reads (`<>`, never at its end): busybox `nc` half-closes
/// the connection at the end of its input, and the sending `nc` quits when
/// it sees that.
const GUEST_FUNCS: &str = "digest() { echo \"VHU-RESULT $2_sha256=$(sha256sum $1 | cut -d' ' -f1) $2_bytes=$(wc -c <$1 | tr -d ' ')\"; }; \
     listening() { h=$(printf '%04X' $1); until cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | grep -q \":$h [0-9A-F]*:0000 0A\"; do sleep 0.1; done; }; \
     counters() { for c in rx_packets tx_packets rx_bytes tx_bytes rx_dropped tx_dropped; do echo \"VHU-RESULT $c=$(cat /sys/class/net/eth0/statistics/$c)\"; done; }; \
     mkfifo /tmp/hold";

/// Boots an agent guest with IPv6 off (it sends only what it is told to)
/// and returns once it takes commands, with [`GUEST_FUNCS`] defined.
fn boot(socket: &std::path::Path, mac: &str, ip: &str, qemu_is_server: bool) -> GuestHandle {
    spawn_guest(GuestOpts {
        mac: mac.into(),
        qemu_is_server,
        cmdline_extra: format!("vhu.test=agent vhu.ip={ip}/24 vhu.ipv6=0"),
        timeout: Duration::from_secs(600),
        ..GuestOpts::new(socket)
    })
}

fn ready(g: &mut GuestHandle) {
    g.wait_agent(BOOT);
    g.exec(GUEST_FUNCS, CMD);
}

/// Runs `cmd` in `g` and parses the `VHU-RESULT` lines it printed.
fn results(g: &mut GuestHandle, cmd: &str) -> BTreeMap<String, String> {
    parse_results(&g.exec(cmd, CMD))
}

fn num(m: &BTreeMap<String, String>, key: &str) -> u64 {
    m.get(key)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no number {key} in {m:?}"))
}

/// eth0's counters in `g`.
fn counters(g: &mut GuestHandle) -> BTreeMap<String, u64> {
    let r = results(g, "counters");
    r.keys().map(|k| (k.clone(), num(&r, k))).collect()
}

/// Every one of `count` pings from `g` to `ip` is answered.
fn ping(g: &mut GuestHandle, ip: &str, count: u32) {
    let out = g.exec(&format!("ping -c {count} -i 0.2 -W 5 {ip}"), CMD);
    assert!(
        out.contains(&format!(
            "{count} packets transmitted, {count} packets received"
        )),
        "ping {ip}:\n{out}"
    );
}

fn add_port(sw: &SwitchProc, body: &str) {
    sw.call("POST", "/ports", body, 201);
}

/// The switch's counters of `ports` and the guests' at one quiet moment:
/// the switch's did not move while the guests' were read.
fn quiet_counters(
    sw: &SwitchProc,
    ports: &[&str],
    guests: &mut [&mut GuestHandle],
) -> (Vec<PortStats>, Vec<BTreeMap<String, u64>>) {
    for _ in 0..10 {
        let before = sw.quiet_stats(ports, QUIET, Duration::from_secs(30));
        let inside: Vec<_> = guests.iter_mut().map(|g| counters(g)).collect();
        let after: Vec<PortStats> = ports.iter().map(|p| sw.stats(p)).collect();
        if after == before {
            return (after, inside);
        }
    }
    panic!("the counters of {ports:?} never stood still while the guests' were read");
}

/// Frames the switch had for a port whose guest had no RX buffer posted at
/// that moment: counted as `no_buffers` and lost, by design (no retry
/// queue, no head-of-line blocking; `docs/switch.md`). A guest under TCG
/// can fall behind a TCP stream on a loaded host; TCP resends.
fn no_buffers(t: &QueueStats) -> u64 {
    t.rx_dropped
        .get(DropReason::NoBuffers.name())
        .copied()
        .unwrap_or(0)
}

/// A guest's counters equal its port's: what the guest's driver queued is
/// what the switch took (`tx`), what the switch delivered is what the
/// driver received (`rx`), frames and bytes. The only drop allowed is
/// `no_buffers` into the port, at most 5 % of what it delivered; the guest
/// itself drops nothing.
fn assert_guest_matches_port(who: &str, g: &BTreeMap<String, u64>, s: &PortStats) {
    let t = &s.total;
    assert_eq!(
        (
            t.rx_dropped_total() - no_buffers(t),
            t.tx_dropped_total(),
            g["rx_dropped"]
        ),
        (0, 0, 0),
        "{who}: drops: {s:?} {g:?}"
    );
    assert!(
        no_buffers(t) * 20 <= t.rx_packets,
        "{who}: more than 5 % lost for want of RX buffers: {s:?}"
    );
    assert_eq!(
        (t.tx_packets, t.tx_bytes, t.rx_packets, t.rx_bytes),
        (
            g["tx_packets"],
            g["tx_bytes"],
            g["rx_packets"],
            g["rx_bytes"]
        ),
        "{who}: the switch's (tx, tx bytes, rx, rx bytes) vs the guest's eth0"
    );
}

/// Everything `from` sent reached `to` (two ports: unicast or flooded, it
/// has nowhere else to go), but for the frames `to` had no RX buffer for:
/// those are counted exactly, and account for the missing bytes (each 60 B
/// to a 64 KiB segmentation frame).
fn assert_carried(what: &str, from: &QueueStats, to: &QueueStats) {
    let lost = no_buffers(to);
    assert_eq!(from.tx_packets, to.rx_packets + lost, "{what}: frames");
    let missing = from.tx_bytes.checked_sub(to.rx_bytes);
    if lost == 0 {
        assert_eq!(missing, Some(0), "{what}: bytes");
    } else {
        assert!(
            missing.is_some_and(|m| (60 * lost..=65_550 * lost).contains(&m)),
            "{what}: {lost} frames lost, bytes {} sent, {} delivered",
            from.tx_bytes,
            to.rx_bytes
        );
    }
}

/// A guest and a peer in a namespace at `peer_ip`, where
/// `tests/peers/guest_peer.py` runs a TCP sink on `sink` and sends
/// [`SMALL_MIB`] to the guest's `source` port: every ping answered, then
/// the guest's data to the sink and the peer's to the guest; returns the
/// guest's results (`out_*`, `sink`, `in_*`).
fn exchange(
    g: &mut GuestHandle,
    peer_ip: &str,
    sink: u16,
    source: u16,
) -> BTreeMap<String, String> {
    ping(g, peer_ip, 5);
    g.exec(
        // The peer retries until the guest listens (and `nc -l` stops
        // listening once it accepted: no `listening` here).
        &format!("nc -l -p {source} <>/tmp/hold >/tmp/in.bin & src=$!"),
        CMD,
    );
    let mut r = results(
        g,
        &format!(
            "dd if=/dev/urandom of=/tmp/out.bin bs=1M count={SMALL_MIB} 2>/dev/null && \
             digest /tmp/out.bin out && \
             echo \"VHU-RESULT sink=$(nc {peer_ip} {sink} </tmp/out.bin | tr ' ' ,)\" && \
             rm /tmp/out.bin"
        ),
    );
    r.extend(results(
        g,
        "wait $src && digest /tmp/in.bin in && rm /tmp/in.bin",
    ));
    r
}

/// What [`exchange`] moved arrived whole both ways: the guest's file has
/// the sha256 and length the sink computed, the peer's the ones the guest
/// computed of what it stored.
fn assert_exchanged(who: &str, guest: &BTreeMap<String, String>, peer: &BTreeMap<String, String>) {
    let bytes = (SMALL_MIB << 20).to_string();
    let sink = format!("{},{bytes}", guest["out_sha256"]);
    assert_eq!(guest["out_bytes"], bytes, "{who}: {guest:?}");
    assert_eq!(guest["sink"], sink, "{who}: the sink's sha256 and length");
    assert_eq!(
        (&peer["tcp_sink_sha256"], &peer["tcp_sink_bytes"]),
        (&guest["out_sha256"], &bytes),
        "{who}: {peer:?}"
    );
    assert_eq!(
        (&guest["in_sha256"], &guest["in_bytes"]),
        (&peer["tcp_source_sha256"], &peer["tcp_source_bytes"]),
        "{who}: what the guest stored vs what the peer sent"
    );
    assert_eq!(guest["in_bytes"], bytes, "{who}");
}

#[test]
#[ignore = "needs root and the peers: run scripts/test.sh"]
fn guests_reach_each_other_a_host_and_a_pod() {
    let run = RunDir::new("swg-pair");
    let mut sw = SwitchProc::start(&run, "", &[]);
    for vm in ["vm1", "vm2"] {
        add_port(&sw, &format!(r#"{{"name":"{vm}","kind":"vhost-user"}}"#));
    }
    let mut g1 = boot(&sw.sockets.join("vm1.sock"), MAC1, "10.0.0.1", false);
    let mut g2 = boot(&sw.sockets.join("vm2.sock"), MAC2, "10.0.0.2", false);
    let t0 = Instant::now();
    ready(&mut g1);
    ready(&mut g2);
    println!("two guests up in {:.1?}", t0.elapsed());

    // ---- 1. guest to guest, the switch with only their ports ----
    ping(&mut g1, "10.0.0.2", 5);
    ping(&mut g2, "10.0.0.1", 5);
    g2.exec(
        "nc -l -p 5001 <>/tmp/hold >/tmp/rx.bin & rx=$!; listening 5001",
        CMD,
    );
    let sent = results(
        &mut g1,
        &format!(
            "dd if=/dev/urandom of=/tmp/tx.bin bs=1M count={BIG_MIB} 2>/dev/null && digest /tmp/tx.bin tx"
        ),
    );
    let t0 = Instant::now();
    g1.exec("nc 10.0.0.2 5001 </tmp/tx.bin && rm /tmp/tx.bin", CMD);
    let took = t0.elapsed();
    let got = results(
        &mut g2,
        "wait $rx && digest /tmp/rx.bin rx && rm /tmp/rx.bin",
    );
    println!(
        "{BIG_MIB} MiB g1 -> g2 over TCP in {took:.1?} ({:.1} MiB/s), sha256 {}",
        BIG_MIB as f64 / took.as_secs_f64(),
        sent["tx_sha256"]
    );
    assert_eq!(num(&sent, "tx_bytes"), BIG_MIB << 20, "{sent:?}");
    assert_eq!(num(&got, "rx_bytes"), BIG_MIB << 20, "{got:?}");
    assert_eq!(
        got["rx_sha256"], sent["tx_sha256"],
        "the data changed on the way"
    );

    let (s, c) = quiet_counters(&sw, &["vm1", "vm2"], &mut [&mut g1, &mut g2]);
    println!(
        "vm1 {:?}\ng1 {:?}\nvm2 {:?}\ng2 {:?}",
        s[0].total, c[0], s[1].total, c[1]
    );
    assert_guest_matches_port("g1/vm1", &c[0], &s[0]);
    assert_guest_matches_port("g2/vm2", &c[1], &s[1]);
    // Two ports: whatever one sends (unicast or flooded) goes to the other.
    let (a, b) = (&s[0].total, &s[1].total);
    assert_carried("vm1 -> vm2", a, b);
    assert_carried("vm2 -> vm1", b, a);
    assert!(a.tx_bytes > BIG_MIB << 20, "{a:?}");

    // ---- 2. a host behind an AF_PACKET uplink, a pod behind a TAP ----
    let host = VethPair::new();
    host.set_host_ipv6(false).expect("IPv6 off on the host end");
    host.set_peer_addr("10.0.0.10/24");
    add_port(
        &sw,
        &format!(
            r#"{{"name":"up","kind":"af_packet","interface":"{}"}}"#,
            host.host()
        ),
    );
    let pod = Netns::new();
    let tap = netns::unique_ifname("t");
    add_port(
        &sw,
        &format!(r#"{{"name":"pod","kind":"tap","interface":"{tap}"}}"#),
    );
    // What a CNI plugin does with a pod's interface.
    netns::run(&["ip", "link", "set", &tap, "netns", pod.name()]);
    pod.exec(&["ip", "link", "set", &tap, "name", "eth1", "up"]);
    pod.exec(&["ip", "addr", "add", "10.0.0.20/24", "dev", "eth1"]);
    let mut host_peer = host.ns().spawn_python(
        peers::GUEST_PEER,
        &[
            "10.0.0.10",
            "0",
            "7001",
            "10.0.0.1",
            "7002",
            &SMALL_MIB.to_string(),
        ],
    );
    let mut pod_peer = pod.spawn_python(
        peers::GUEST_PEER,
        &[
            "10.0.0.20",
            "0",
            "7003",
            "10.0.0.2",
            "7004",
            &SMALL_MIB.to_string(),
        ],
    );
    host_peer.wait_for_stdout("PEER ready", CMD);
    pod_peer.wait_for_stdout("PEER ready", CMD);
    let t0 = Instant::now();
    let (r1, r2) = thread::scope(|s| {
        let a = s.spawn(|| exchange(&mut g1, "10.0.0.10", 7001, 7002));
        let b = s.spawn(|| exchange(&mut g2, "10.0.0.20", 7003, 7004));
        (
            a.join().expect("g1 and the host"),
            b.join().expect("g2 and the pod"),
        )
    });
    println!(
        "g1 <-> host and g2 <-> pod, {SMALL_MIB} MiB each way, in {:.1?}",
        t0.elapsed()
    );
    host_peer.wait_for_stdout("tcp_source_sha256", CMD);
    pod_peer.wait_for_stdout("tcp_source_sha256", CMD);
    assert_exchanged(
        "g1 and the host (AF_PACKET)",
        &r1,
        &host_peer.results("PEER "),
    );
    assert_exchanged("g2 and the pod (TAP)", &r2, &pod_peer.results("PEER "));

    let fdb: Vec<FdbEntryView> = sw.get("/fdb");
    let port_of = |mac: &str| {
        fdb.iter()
            .find(|e| e.mac.to_string() == mac)
            .map(|e| e.port.clone())
            .unwrap_or_else(|| panic!("{mac} not learned: {fdb:?}"))
    };
    let pod_mac = pod.mac("eth1");
    for (mac, port) in [
        (MAC1, "vm1"),
        (MAC2, "vm2"),
        (host.peer_mac().as_str(), "up"),
        (pod_mac.as_str(), "pod"),
    ] {
        assert_eq!(port_of(mac), port, "{mac}");
    }

    // The TAP, moved and renamed, counts what the switch counts.
    let sp = &sw.quiet_stats(&["pod"], QUIET, Duration::from_secs(30))[0];
    let k = pod.link_stats("eth1");
    println!("pod port {:?}\npod eth1 {k:?}", sp.total);
    let t = &sp.total;
    assert_eq!(
        (t.rx_packets, t.rx_bytes, t.tx_packets, t.tx_bytes),
        (k.rx_packets, k.rx_bytes, k.tx_packets, k.tx_bytes),
        "the pod's port (rx: into the pod, tx: from it) vs eth1's kernel counters"
    );
    // The device goes with its port, wherever it is now.
    sw.call("DELETE", "/ports/pod", "", 204);
    let t0 = Instant::now();
    while pod
        .try_exec(&["ip", "link", "show", "dev", "eth1"])
        .status
        .success()
    {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "eth1 outlived its port"
        );
        thread::sleep(Duration::from_millis(20));
    }

    for (name, g) in [("g1", g1), ("g2", g2)] {
        let r = g.quit();
        r.assert_ok();
        println!("{name} ran {:.1?}", r.elapsed);
    }
    let st = sw.stop();
    assert!(st.success(), "SIGTERM: {st}\n{}", sw.log());
}

/// The names of the switch's ports, sorted.
fn names(sw: &SwitchProc) -> Vec<String> {
    let v: Vec<PortView> = sw.get("/ports");
    let mut n: Vec<String> = v.into_iter().map(|p| p.spec.name).collect();
    n.sort();
    n
}

/// Seconds since the guest booted.
fn uptime(g: &mut GuestHandle) -> f64 {
    let r = results(
        g,
        "echo \"VHU-RESULT uptime=$(cut -d' ' -f1 /proc/uptime)\"",
    );
    r["uptime"]
        .parse()
        .unwrap_or_else(|_| panic!("uptime: {r:?}"))
}

/// Polls until both ports have delivered at least `frames` (the switch's
/// `rx`) and returns how long that took.
fn until_delivered(sw: &SwitchProc, ports: &[&str], frames: u64, timeout: Duration) -> Duration {
    let t0 = Instant::now();
    loop {
        if ports.iter().all(|p| sw.stats(p).total.rx_packets >= frames) {
            return t0.elapsed();
        }
        assert!(
            t0.elapsed() < timeout,
            "{ports:?} got fewer than {frames} frames in {timeout:?}: {:?}\n{}",
            ports.iter().map(|p| sw.stats(p).total).collect::<Vec<_>>(),
            sw.log()
        );
        thread::sleep(Duration::from_millis(10));
    }
}

#[test]
#[ignore = "needs root and the peers: run scripts/test.sh"]
fn kill_9_and_restart_leave_the_vms_running() {
    let run = RunDir::new("swg-restart");
    let mut sw = SwitchProc::start(&run, "", &[]);
    let vm_sock = run.join("qemu-vm.sock");
    let tp_sock = run.join("testpmd.sock");
    let mut g = boot(&vm_sock, MAC3, "10.0.0.3", true);
    g.wait_for_socket(BOOT);
    let mut o = FrontendOpts::new(&tp_sock);
    o.server = true;
    o.mac = Some(TP_MAC.into());
    o.port.forward_mode = "macswap".into();
    let mut tp = Testpmd::spawn(&o);
    tp.wait_socket(READY_TIMEOUT);
    for (name, path) in [("vm", &vm_sock), ("tp", &tp_sock)] {
        add_port(
            &sw,
            &format!(
                r#"{{"name":"{name}","kind":"vhost-user","role":"client","socket":"{}"}}"#,
                path.display()
            ),
        );
    }
    add_port(&sw, r#"{"name":"spare","kind":"vhost-user"}"#);
    tp.wait_ready(READY_TIMEOUT);
    tp.wait_link_up(LINK_TIMEOUT);
    tp.start();
    ready(&mut g);
    // testpmd sends every request back with the MACs swapped: the guest's
    // kernel receives its own requests (and drops them; its driver counts them).
    g.exec(&format!("arp -s 10.0.0.99 {TP_MAC}"), CMD);
    g.exec(
        "ping -q -i 0.02 -s 100 10.0.0.99 >/dev/null 2>&1 & pinger=$!",
        CMD,
    );
    until_delivered(&sw, &["vm", "tp"], 20, Duration::from_secs(30));
    let before = names(&sw);
    assert_eq!(before, ["spare", "tp", "vm"]);
    let (pid, up0) = (g.pid(), uptime(&mut g));
    let rx0 = counters(&mut g)["rx_packets"];

    sw.kill9();
    // The guest keeps pinging into a ring nobody serves meanwhile.
    thread::sleep(Duration::from_millis(500));
    sw.restart();
    let resumed = until_delivered(&sw, &["vm", "tp"], 10, Duration::from_secs(30));
    println!("traffic resumed {resumed:.2?} after the restarted switch was ready");
    assert!(
        resumed < Duration::from_secs(2),
        "traffic resumed only {resumed:?} after the restart"
    );
    assert_eq!(names(&sw), before, "the persisted ports are back");
    let up1 = uptime(&mut g);
    let rx1 = counters(&mut g)["rx_packets"];
    assert!(g.try_exit_status().is_none(), "QEMU exited");
    assert_eq!(g.pid(), pid, "the same QEMU");
    assert!(up1 > up0, "the guest rebooted: uptime {up0} then {up1}");
    assert!(
        rx1 >= rx0 + 10,
        "the guest received {rx0} then {rx1} frames"
    );
    for p in ["vm", "tp"] {
        let v: PortView = sw.get(&format!("/ports/{p}"));
        assert!(v.state.connected, "{p} is not connected again: {v:?}");
    }

    let st = sw.stop();
    assert!(st.success(), "SIGTERM: {st}\n{}", sw.log());
    assert!(!sw.control.exists(), "SIGTERM left the control socket");
    let left: Vec<_> = std::fs::read_dir(&sw.sockets)
        .map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(
        left.is_empty(),
        "SIGTERM left {left:?} in the socket directory"
    );
    assert!(
        vm_sock.exists() && tp_sock.exists(),
        "the switch removed a socket it did not create"
    );
    g.exec("kill $pinger", CMD);
    let r = g.quit();
    r.assert_ok();
    let (status, _) = tp.quit();
    assert!(status.success(), "testpmd: {status}");
}
