// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! End-to-end tests of `vhu-switch` (the release binary) across nodes, on
//! long paths, under runtime changes and with a stalled guest. The
//! frontends are `dpdk-testpmd` virtio-user ports, several in one testpmd
//! process (one forwarding core), so that the busy pollers stay few on two
//! cores; the switches poll adaptively.
//!
//! * `two_nodes_carry_vlans_over_a_trunk`: two switches, each in a network
//!   namespace of its own standing for a node, joined by a veth pair that
//!   carries an 802.1Q trunk of VLANs 10 and 20: node A's uplink is
//!   AF_PACKET, node B's AF_XDP. Each node has one access port in VLAN 10
//!   and one in VLAN 20. In three rounds of bursts (A10 to B10; B20 to A20;
//!   B10 to A10 and A20 to B20 at once; the other frontends send to their own
//!   address, which their switch drops as `hairpin`) every frontend receives
//!   exactly what its peer in the same VLAN on the other node sent, with the
//!   peer's source and its own destination address, untagged; the other
//!   VLAN's frontends receive nothing. The switches' counters (access ports,
//!   uplinks, drops), the veth's counters and `tcpdump -e` on the wire (each
//!   frame tagged with its VLAN, nothing else on the wire) agree.
//! * `runtime_changes_under_traffic_lose_nothing`: a switch whose
//!   `--socket-dir` is over 200 bytes long (the frontends connect through a
//!   short symlink; testpmd's `sun_path` is 108 bytes) carries frames both
//!   ways between two ports, circulating between testpmd and the switch,
//!   while vhost-user and TAP ports are added and removed through the API,
//!   round after round. Traffic keeps flowing in every round; at the end each
//!   port received exactly what the other sent (testpmd's and the switch's
//!   counters), with no drop; the ports added meanwhile got nothing.
//! * `a_stalled_guest_does_not_slow_the_others`: port A floods broadcast to
//!   B and C; C's frontend stops refilling its RX ring (testpmd stops
//!   polling it). In alternating windows (C polling, C stalled) the median
//!   of the ratios A->B rate stalled / polling of adjacent windows is at
//!   least 0.9. The bound is one-sided: with C stalled the switch does less
//!   (no copy into C, none of C's frames to drop), so the rate goes up;
//!   head-of-line blocking would bring it down. While C is stalled it gets
//!   nothing and each of its copies is counted as `no_buffers` (exactly,
//!   over the whole run); while it polls it loses nothing.
//!
//! They need root and the peers (`scripts/install-peers.sh`); `scripts/test.sh`
//! runs them with `--include-ignored`, one at a time.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use vhu_api::{PortStats, PortView, QueueStats};
use vhu_tests::netns::{unique_ifname, Netns, NsProcess};
use vhu_tests::process::RunDir;
use vhu_tests::switch::{SwitchOpts, SwitchProc};
use vhu_tests::testpmd::{self, FrontendOpts, Testpmd};

/// How long frames may take to cross the switches after a burst.
const TIMEOUT: Duration = Duration::from_secs(15);

/// `start tx_first` bursts of 32 frames per port.
const BURSTS: u32 = 8;

/// A testpmd with one virtio-user port per `(socket, mac)` (testpmd port
/// ids in that order) in forward mode `mode`. The virtqueues have 1024
/// entries, of which TX uses 256 (`--txd`): the switch never holds more of
/// a port's frames than its peer has RX buffers. Links are up when this
/// returns; forwarding is not started.
fn frontends(ports: &[(PathBuf, &str)], mode: &str, extra: &[&str]) -> Testpmd {
    // testpmd numbers the added ports first: `ports`' last is the main one.
    let ((sock, mac), rest) = ports.split_last().expect("one port at least");
    let mut o = FrontendOpts::new(sock);
    o.mac = Some((*mac).into());
    o.queue_size = Some(1024);
    o.log_features = false;
    o.port.rxd = 1024;
    o.port.txd = 256;
    o.port.forward_mode = mode.into();
    o.port.extra_args = extra.iter().map(|s| (*s).to_owned()).collect();
    for (sock, mac) in rest {
        o.add_port(sock, mac);
    }
    let mut tp = Testpmd::spawn(&o);
    tp.wait_link_up(Duration::from_secs(30));
    let want: Vec<&str> = ports.iter().map(|p| p.1).collect();
    assert_eq!(tp.port_macs(), want, "testpmd's port ids");
    tp
}

/// testpmd's ethdev counters per port, by port id.
fn per_port(tp: &mut Testpmd) -> Vec<testpmd::PortStats> {
    let mut s = tp.port_stats();
    s.sort_by_key(|p| p.port);
    s
}

fn no_buffers(q: &QueueStats) -> u64 {
    q.rx_dropped.get("no_buffers").copied().unwrap_or(0)
}

fn hairpin(q: &QueueStats) -> u64 {
    q.tx_dropped.get("hairpin").copied().unwrap_or(0)
}

/// A configuration of server-role vhost-user ports named `names`, each
/// with the TOML line `extra`.
fn vhost_user_ports(names: &[&str], extra: &str) -> String {
    names
        .iter()
        .map(|n| format!("[[port]]\nname = \"{n}\"\nkind = \"vhost-user\"\n{extra}\n\n"))
        .collect()
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

// ===== Two nodes =====

const MAC_A10: &str = "02:00:00:0a:00:10";
const MAC_A20: &str = "02:00:00:0a:00:20";
const MAC_B10: &str = "02:00:00:0b:00:10";
const MAC_B20: &str = "02:00:00:0b:00:20";

/// testpmd port id -> (node, switch port, MAC, VLAN).
const NODE_PORTS: [(usize, &str, &str, u16); 4] = [
    (0, "v10", MAC_A10, 10),
    (0, "v20", MAC_A20, 20),
    (1, "v10", MAC_B10, 10),
    (1, "v20", MAC_B20, 20),
];

/// A switch in a namespace of its own; its run directory outlives it.
struct Node {
    sw: SwitchProc,
    _run: RunDir,
}

impl Node {
    /// A switch in `ns` with an uplink (`kind` on `ifname`, trunk of VLANs
    /// 10 and 20) and two vhost-user access ports, `v10` and `v20`.
    fn start(ns: &Netns, tag: &str, kind: &str, ifname: &str) -> Self {
        let run = RunDir::new(tag);
        let config = format!(
            r#"
[[port]]
name = "up"
kind = "{kind}"
interface = "{ifname}"
vlan = {{ trunk = [10, 20] }}

[[port]]
name = "v10"
kind = "vhost-user"
vlan = 10

[[port]]
name = "v20"
kind = "vhost-user"
vlan = 20
"#
        );
        let opts = SwitchOpts {
            netns: Some(ns.name().to_owned()),
            ..SwitchOpts::default()
        };
        let sw = SwitchProc::start_with(&run, &config, &[], &opts);
        Self { sw, _run: run }
    }

    fn stats(&self) -> BTreeMap<&'static str, QueueStats> {
        let s = self.sw.settle(&["up", "v10", "v20"]);
        ["up", "v10", "v20"]
            .into_iter()
            .zip(s.into_iter().map(|p: PortStats| p.total))
            .collect()
    }
}

/// One round: testpmd port `i` sends `BURSTS` bursts to testpmd port
/// `to[i]` (itself: to its own address, dropped by its switch as
/// `hairpin`); checks every counter on the way. Returns what each port sent
/// and the frames each VLAN put on the wire, `(src, dst, vlan)`.
fn round(
    tp: &mut Testpmd,
    nodes: &[&Node; 2],
    wire: &Netns,
    to: [usize; 4],
) -> BTreeMap<(&'static str, &'static str, u16), u64> {
    tp.stop();
    for (i, &j) in to.iter().enumerate() {
        tp.command(&format!("set eth-peer {i} {}", NODE_PORTS[j].2));
    }
    let sw0 = [nodes[0].stats(), nodes[1].stats()];
    let tp0 = per_port(tp);
    let link0 = wire.link_stats("vA");
    tp.start_tx_first(BURSTS);

    // Every frontend sent; wait until the expected frames arrived.
    let deadline = Instant::now() + TIMEOUT;
    let (sent, expect_rx) = loop {
        let now = per_port(tp);
        let sent: Vec<u64> = (0..4)
            .map(|i| now[i].tx_packets - tp0[i].tx_packets)
            .collect();
        let mut expect_rx = [0u64; 4];
        for (i, &j) in to.iter().enumerate() {
            if i != j {
                expect_rx[j] += sent[i];
            }
        }
        let got: Vec<u64> = (0..4)
            .map(|j| now[j].rx_packets - tp0[j].rx_packets)
            .collect();
        if sent.iter().all(|&s| s > 0) && got.iter().zip(expect_rx).all(|(&g, e)| g >= e) {
            break (sent, expect_rx);
        }
        if Instant::now() >= deadline {
            tp.fail(&format!(
                "round {to:?}: sent {sent:?}, received {got:?}, expected {expect_rx:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let sw1 = [nodes[0].stats(), nodes[1].stats()];
    let tp1 = per_port(tp);
    let link1 = wire.link_stats("vA");

    // The frontends: exactly the expected frames, nothing more.
    for j in 0..4 {
        assert_eq!(
            tp1[j].rx_packets - tp0[j].rx_packets,
            expect_rx[j],
            "round {to:?}: testpmd port {j} received other than its peer sent {sent:?}"
        );
        assert_eq!(tp1[j].tx_packets - tp0[j].tx_packets, sent[j]);
    }
    // The switches: every access port's frames in, out to the uplink or
    // dropped as hairpin; the uplinks carry the remote ones both ways.
    let mut wire_out = [0u64; 2];
    let mut frames = BTreeMap::new();
    for (i, &j) in to.iter().enumerate() {
        let (n, _, mac, vlan) = NODE_PORTS[i];
        if NODE_PORTS[j].0 != n {
            wire_out[n] += sent[i];
            *frames.entry((mac, NODE_PORTS[j].2, vlan)).or_default() += sent[i];
        }
    }
    for (i, &(n, port, _, _)) in NODE_PORTS.iter().enumerate() {
        let (a, b) = (&sw0[n][port], &sw1[n][port]);
        let what = format!("round {to:?}: node {n} port {port}: {a:?} -> {b:?}");
        assert_eq!(b.tx_packets - a.tx_packets, sent[i], "{what}");
        assert_eq!(b.rx_packets - a.rx_packets, expect_rx[i], "{what}");
        assert_eq!(b.rx_dropped_total(), a.rx_dropped_total(), "{what}");
        let self_sent = if to[i] == i { sent[i] } else { 0 };
        assert_eq!(hairpin(b) - hairpin(a), self_sent, "{what}");
        assert_eq!(
            b.tx_dropped_total() - a.tx_dropped_total(),
            self_sent,
            "{what}"
        );
    }
    for n in 0..2 {
        let (a, b) = (&sw0[n]["up"], &sw1[n]["up"]);
        let what = format!("round {to:?}: node {n} uplink: {a:?} -> {b:?}");
        assert_eq!(b.rx_packets - a.rx_packets, wire_out[n], "{what}");
        assert_eq!(b.tx_packets - a.tx_packets, wire_out[1 - n], "{what}");
        assert_eq!(b.rx_dropped_total(), a.rx_dropped_total(), "{what}");
        assert_eq!(b.tx_dropped_total(), a.tx_dropped_total(), "{what}");
    }
    assert_eq!(
        (
            link1.tx_packets - link0.tx_packets,
            link1.rx_packets - link0.rx_packets
        ),
        (wire_out[0], wire_out[1]),
        "round {to:?}: the veth's counters"
    );
    frames
}

/// The frames in `tcpdump -e -n` output by (src, dst, VLAN); untagged ones
/// under VLAN 0.
fn wire_frames(text: &str) -> BTreeMap<(String, String, u16), u64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        // "12:00:00.000000 02:00:00:0a:00:10 > 02:00:00:0b:00:10, ethertype
        // 802.1Q (0x8100), length 68: vlan 10, p 0, ethertype IPv4 ..."
        let mut w = line.split_whitespace().skip(1);
        let (Some(src), Some(">"), Some(dst)) = (w.next(), w.next(), w.next()) else {
            continue;
        };
        let vlan = line
            .split("vlan ")
            .nth(1)
            .and_then(|v| v.split(',').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        *out.entry((src.into(), dst.trim_end_matches(',').into(), vlan))
            .or_default() += 1;
    }
    out
}

fn start_tcpdump(ns: &Netns, ifname: &str) -> NsProcess {
    let mut p = ns.spawn(&["tcpdump", "-e", "-n", "-l", "-B", "8192", "-i", ifname]);
    let t0 = Instant::now();
    while !p.stderr().contains("listening on") {
        assert!(
            p.is_running() && t0.elapsed() < TIMEOUT,
            "tcpdump did not start (Debian tcpdump, scripts/install-peers.sh)\n{}",
            p.describe()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    p
}

#[test]
#[ignore = "needs root and the peers: run scripts/test.sh"]
fn two_nodes_carry_vlans_over_a_trunk() {
    let (ns_a, ns_b) = (Netns::new(), Netns::new());
    ns_a.veth_to("vA", &ns_b, "vB");
    let node_a = Node::start(&ns_a, "nodes-a", "af_packet", "vA");
    let node_b = Node::start(&ns_b, "nodes-b", "af_xdp", "vB");
    for (node, kind) in [(&node_a, "af_packet"), (&node_b, "af_xdp")] {
        let up: PortView = node.sw.get("/ports/up");
        assert_eq!(serde_json::to_value(up.spec.kind).unwrap(), kind);
    }
    let socks: Vec<(PathBuf, &str)> = NODE_PORTS
        .iter()
        .map(|&(n, port, mac, _)| {
            let sw = if n == 0 { &node_a.sw } else { &node_b.sw };
            (sw.sockets.join(format!("{port}.sock")), mac)
        })
        .collect();
    let mut tp = frontends(&socks, "rxonly", &["--port-topology=loop"]);
    let mut dump = start_tcpdump(&ns_a, "vA");
    tp.start();

    let nodes = [&node_a, &node_b];
    let mut wire = BTreeMap::new();
    // A10 -> B10; B20 -> A20; B10 -> A10 and A20 -> B20 at once. The others
    // send to themselves. What crosses node B's v10 in the first round is
    // captured: B10's own frames in, A10's out to B10's frontend, untagged.
    let mut cap = Some(node_b.sw.capture("v10", 2 * 32 * BURSTS));
    std::thread::sleep(Duration::from_millis(300));
    for (r, to) in [[2, 1, 2, 3], [0, 1, 2, 1], [0, 3, 0, 3]]
        .into_iter()
        .enumerate()
    {
        let frames = round(&mut tp, &nodes, &ns_a, to);
        if let Some(cap) = cap.take().filter(|_| r == 0) {
            let text = cap.text();
            let count = |src: &str| {
                let want = format!("{src} > {MAC_B10}, ethertype IPv4 (0x0800), length 64:");
                text.lines().filter(|l| l.contains(&want)).count() as u64
            };
            let from_a = frames[&(MAC_A10, MAC_B10, 10)];
            assert_eq!(
                (count(MAC_A10), count(MAC_B10)),
                (from_a, u64::from(2 * 32 * BURSTS) - from_a),
                "vhuctl capture v10 on node B:\n{text}"
            );
        }
        for (k, v) in frames {
            *wire.entry(k).or_insert(0) += v;
        }
    }
    tp.stop();
    assert_eq!(wire.len(), 4, "every direction of both VLANs ran: {wire:?}");

    // The wire: each frame tagged with its VLAN, nothing else.
    dump.signal("INT");
    dump.wait(TIMEOUT);
    let want: BTreeMap<(String, String, u16), u64> = wire
        .iter()
        .map(|(&(s, d, v), &n)| ((s.into(), d.into(), v), n))
        .collect();
    assert_eq!(
        wire_frames(&dump.stdout()),
        want,
        "tcpdump -e on vA:\n{}",
        dump.describe()
    );
    drop(tp);
}

// ===== Runtime changes, a long socket directory =====

const MAC_A: &str = "02:00:00:00:00:0a";
const MAC_B: &str = "02:00:00:00:00:0b";
const MAC_C: &str = "02:00:00:00:00:0c";

/// Rounds of port additions and removals under traffic.
const CHURN_ROUNDS: usize = 6;

#[test]
#[ignore = "needs root and the peers: run scripts/test.sh"]
fn runtime_changes_under_traffic_lose_nothing() {
    let run = RunDir::new("nodes-churn");
    let long = run
        .path()
        .join("d".repeat(100))
        .join("e".repeat(100))
        .join("sockets");
    assert!(long.as_os_str().len() > 200, "{}", long.display());
    let config = vhost_user_ports(&["a", "b"], "vlan = 10");
    let opts = SwitchOpts {
        socket_dir: Some(long.clone()),
        ..SwitchOpts::default()
    };
    let sw = SwitchProc::start_with(&run, &config, &[], &opts);
    let v: PortView = sw.get("/ports/a");
    let a_sock = long.join("a.sock");
    assert_eq!(v.state.socket_path.as_deref(), a_sock.to_str());
    assert!(a_sock.exists() && long.join("b.sock").exists());
    let link = run.join("s");
    std::os::unix::fs::symlink(&long, &link).unwrap();
    // No flooding in the measurement: both addresses are known.
    for (mac, port) in [(MAC_A, "a"), (MAC_B, "b")] {
        let e = format!(r#"{{"mac":"{mac}","port":"{port}","vlan":10}}"#);
        sw.call("POST", "/fdb", &e, 201);
    }

    // Port 0 (a) and port 1 (b) are paired: what one receives the other
    // sends on, to the first one's address. `tx_first` puts 256 frames on
    // each; they circulate a -> b and b -> a until `stop`.
    let mut tp = frontends(
        &[(link.join("a.sock"), MAC_A), (link.join("b.sock"), MAC_B)],
        "mac",
        &[],
    );
    tp.command(&format!("set eth-peer 0 {MAC_B}"));
    tp.command(&format!("set eth-peer 1 {MAC_A}"));
    tp.start_tx_first(BURSTS);

    let mut last = sw.stats("b").total.rx_packets;
    for r in 0..CHURN_ROUNDS {
        let tap = unique_ifname("t");
        let added = [
            format!(r#"{{"name":"x{r}","kind":"vhost-user","vlan":10}}"#),
            format!(r#"{{"name":"y{r}","kind":"vhost-user","queues":2,"vlan":10}}"#),
            format!(r#"{{"name":"t{r}","kind":"tap","interface":"{tap}","vlan":30}}"#),
        ];
        for body in &added {
            sw.call("POST", "/ports", body, 201);
        }
        let names: Vec<String> = sw
            .get::<Vec<PortView>>("/ports")
            .into_iter()
            .map(|p| p.spec.name)
            .collect();
        assert_eq!(names.len(), 5, "{names:?}");
        assert!(long.join(format!("x{r}.sock")).exists());
        std::thread::sleep(Duration::from_millis(200));
        for p in [format!("x{r}"), format!("y{r}")] {
            let s = sw.stats(&p).total;
            assert_eq!(
                (s.rx_packets, s.rx_dropped_total()),
                (0, 0),
                "unicast between a and b reached {p}"
            );
        }
        let now = sw.stats("b").total.rx_packets;
        assert!(now > last, "round {r}: traffic to b stopped ({now})");
        last = now;
        for p in ["x", "y", "t"] {
            sw.call("DELETE", &format!("/ports/{p}{r}"), "", 204);
        }
        assert!(!long.join(format!("x{r}.sock")).exists());
        assert!(!std::path::Path::new("/sys/class/net").join(&tap).exists());
        let now = sw.stats("b").total.rx_packets;
        assert!(now > last, "round {r}: traffic to b stopped ({now})");
        last = now;
    }
    tp.stop();
    // What is still in the RX rings is counted once testpmd reads it:
    // `start` drains the RX queues first (and nothing is in flight any
    // more).
    let s = sw.settle(&["a", "b"]);
    tp.start();
    tp.stop();
    let t = per_port(&mut tp);
    let (sa, sb) = (&s[0].total, &s[1].total);
    eprintln!(
        "{CHURN_ROUNDS} rounds of 3 ports added and removed: a sent {}, b sent {}, lost 0",
        sa.tx_packets, sb.tx_packets
    );
    assert!(
        sa.tx_packets > 10_000 && sb.tx_packets > 10_000,
        "little traffic: {sa:?} {sb:?}"
    );
    for (name, from, to, tp_from, tp_to) in [
        ("a -> b", sa, sb, &t[0], &t[1]),
        ("b -> a", sb, sa, &t[1], &t[0]),
    ] {
        assert_eq!(
            from.tx_packets, tp_from.tx_packets,
            "{name}: the switch took every frame testpmd sent"
        );
        assert_eq!(
            to.rx_packets,
            from.tx_packets - to.rx_dropped_total(),
            "{name}: {from:?} {to:?}"
        );
        assert_eq!(to.rx_dropped_total(), 0, "{name}: frames lost: {to:?}");
        assert_eq!(from.tx_dropped_total(), 0, "{name}: {from:?}");
        assert_eq!(
            tp_to.rx_packets, to.rx_packets,
            "{name}: testpmd and the switch count alike"
        );
    }
    drop(tp);
}

// ===== Head-of-line =====

/// Pairs of measurement windows: C polling, then C stalled.
const HOL_PAIRS: usize = 12;

/// The length of a measurement window, after a warm-up of a tenth of it.
const HOL_WINDOW: Duration = Duration::from_millis(500);

#[test]
#[ignore = "needs root and the peers: run scripts/test.sh"]
fn a_stalled_guest_does_not_slow_the_others() {
    let run = RunDir::new("nodes-hol");
    let sw = SwitchProc::start(&run, &vhost_user_ports(&["a", "b", "c"], ""), &[]);
    for (mac, port) in [(MAC_B, "b"), (MAC_C, "c")] {
        let e = format!(r#"{{"mac":"{mac}","port":"{port}"}}"#);
        sw.call("POST", "/fdb", &e, 201);
    }
    // Ports 0 (a) and 1 (b) are paired, 2 (c) with itself. a's frames are
    // broadcast (to b and c); what b receives goes out of a again; what c
    // receives (and b's and c's own `tx_first` frames) goes to the sender's
    // own address and dies at the switch (hairpin). So a circulates 256
    // frames through the switch, copied to b and c each time.
    let socks = ["a", "b", "c"].map(|p| sw.sockets.join(format!("{p}.sock")));
    let mut tp = frontends(
        &[
            (socks[0].clone(), MAC_A),
            (socks[1].clone(), MAC_B),
            (socks[2].clone(), MAC_C),
        ],
        "mac",
        &[],
    );
    tp.command("set eth-peer 0 ff:ff:ff:ff:ff:ff");
    tp.command(&format!("set eth-peer 1 {MAC_B}"));
    tp.command(&format!("set eth-peer 2 {MAC_C}"));

    // The machine's load drifts: adjacent windows are compared, and the
    // median taken.
    let (mut polling, mut stalled, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for w in 0..2 * HOL_PAIRS {
        let stall = w % 2 == 1;
        // Without port 2 in the forwarding list testpmd never reads c's
        // RX queue, so it posts no more buffers: a stalled guest.
        tp.command(if stall {
            "set portlist 0,1"
        } else {
            "set portlist 0,1,2"
        });
        tp.start_tx_first(BURSTS);
        std::thread::sleep(HOL_WINDOW / 10);
        let (b0, c0, t0) = (sw.stats("b").total, sw.stats("c").total, Instant::now());
        std::thread::sleep(HOL_WINDOW);
        let (b1, c1) = (sw.stats("b").total, sw.stats("c").total);
        let rate = (b1.rx_packets - b0.rx_packets) as f64 / t0.elapsed().as_secs_f64();
        tp.stop();
        let (c_rx, c_nobuf) = (
            c1.rx_packets - c0.rx_packets,
            no_buffers(&c1) - no_buffers(&c0),
        );
        let what = format!(
            "window {w} (c {}): a->b {rate:.0} frames/s, c got {c_rx}, c no_buffers {c_nobuf}",
            if stall { "stalled" } else { "polling" }
        );
        eprintln!("{what}");
        assert!(rate > 1000.0, "{what}");
        if stall {
            assert_eq!(c_rx, 0, "{what}: a stalled guest got frames");
            assert!(c_nobuf > 0, "{what}: no no_buffers drops counted");
            ratios.push(rate / polling.last().copied().unwrap_or(rate));
            stalled.push(rate);
        } else {
            assert_eq!(c_nobuf, 0, "{what}: c dropped while polling");
            assert!(c_rx > 0, "{what}: c got nothing");
            polling.push(rate);
        }
    }
    let (before, after, ratio) = (
        median(&mut polling),
        median(&mut stalled),
        median(&mut ratios),
    );
    eprintln!(
        "a->b median: {before:.0} frames/s with c polling, {after:.0} with c stalled; \
         median ratio of adjacent windows {ratio:.3}"
    );
    assert!(
        ratio >= 0.9,
        "a stalled guest slowed the others: a->b with c stalled / with c polling = {ratio:.3} \
         (median of adjacent windows; ratios {ratios:?}; medians {after:.0} vs {before:.0} frames/s)"
    );

    // Every frame of a reached b; each copy for c was delivered or counted
    // as no_buffers.
    let s = sw.settle(&["a", "b", "c"]);
    let (sa, sb, sc) = (&s[0].total, &s[1].total, &s[2].total);
    assert_eq!(sa.rx_packets + sa.rx_dropped_total(), 0, "{sa:?}");
    assert_eq!(
        (sb.rx_packets, sb.rx_dropped_total()),
        (sa.tx_packets, 0),
        "{sb:?}"
    );
    assert_eq!(sc.rx_packets + no_buffers(sc), sa.tx_packets, "{sc:?}");
    assert_eq!(sc.rx_dropped_total(), no_buffers(sc), "{sc:?}");
    drop(tp);
}
