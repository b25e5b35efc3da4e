// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! L2 tenancy (issue 34, item 4): a port owns the frames it sends, and no
//! more than its share of the switch. `vhu-switch` (the release binary)
//! with four vhost-user ports in VLAN 10, each driven by the library's
//! in-process virtio-net driver over its real socket: `x` the attacker,
//! `a`, `b`, `c` its neighbours.
//!
//! * `a_port_spraying_source_macs_fills_only_its_own_share_of_the_fdb`: a
//!   table of 1,024 entries, so each vhost-user port's default quota is 32.
//!   `x` sends 4,000 frames, each from a fresh random source address (to
//!   its own static address: dropped as `hairpin`, so the neighbours see
//!   none of them). Then `c`, silent so far, sends its first frame: its
//!   address is learned, and a frame from `a` to `c` reaches `c` alone.
//!   `a`'s and `b`'s entries are still there; `x` holds exactly 32 learned
//!   entries and 3,968 refusals, counted in its stats, in `/metrics` (which
//!   `promtool check metrics` accepts) and switch-wide; the neighbours'
//!   counters moved by their own frames only.
//! * `a_port_flooding_broadcasts_is_held_to_its_flood_rate`: `[switch]`
//!   `flood_rate = 1000`, `flood_burst = 100`. `x` sends 10,000
//!   broadcasts in 20 rounds over about a second, each round as fast as
//!   its ring takes them, while `a` sends 500 unicast frames to `b`: `b`
//!   receives every one of them, intact; `a`, `b` and `c` each receive the
//!   same broadcasts from `x`, at most the burst plus the rate over the time
//!   it took, and at least 80 % of the rate over the rounds; every other
//!   broadcast is counted on `x` as `flood_rate` (stats, `/metrics`,
//!   `vhuctl stats x`); no neighbour dropped anything.
//!
//! On the code before the change, the first test fails at `c`'s first
//! frame (the table is full of `x`'s addresses: `c` is not learned, and
//! `a`'s frame to `c` is flooded to `b`), the second at the victims' count
//! (every one of the 10,000 broadcasts reaches each of them).
//!
//! They need root (the sockets' directory) and the release binaries;
//! `scripts/test.sh` runs them with `--include-ignored`, one at a time.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use vhost_net_backend::test_utils::{RxLayout, TestDriver};
use vhu_api::{FdbEntryView, PortStats, PortView};
use vhu_tests::driver::send_all;
use vhu_tests::process::RunDir;
use vhu_tests::switch::{switch_bin, SwitchProc};
use vhu_tests::wire::numbered_frame;

const MAC_A: &str = "02:00:00:00:00:0a";
const MAC_B: &str = "02:00:00:00:00:0b";
const MAC_C: &str = "02:00:00:00:00:0c";
const MAC_X: &str = "02:00:00:00:00:ee";
const BROADCAST: &str = "ff:ff:ff:ff:ff:ff";
const PORTS: [&str; 4] = ["a", "b", "c", "x"];
/// RX buffers each neighbour keeps posted.
const RX_BUFS: usize = 256;

/// A configuration: `switch` lines, then the four ports in VLAN 10.
fn config(switch: &str) -> String {
    let mut c = format!("[switch]\n{switch}\n");
    for p in PORTS {
        c += &format!("\n[[port]]\nname = \"{p}\"\nkind = \"vhost-user\"\nvlan = 10\n");
    }
    c
}

/// A driver on `port`, once the switch runs its rings, with its RX ring
/// full of buffers.
fn connect(sw: &SwitchProc, port: &str) -> TestDriver {
    let mut d = sw.driver(port);
    d.post_rx_buffers(0, RX_BUFS, 2048, RxLayout::Single)
        .unwrap();
    d.kick_rx(0);
    let t0 = Instant::now();
    while !sw
        .get::<PortView>(&format!("/ports/{port}"))
        .state
        .connected
    {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "{port} never connected"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    d
}

/// Frames received on `d` since the last call, their buffers posted again.
fn drain(d: &mut TestDriver) -> Vec<Vec<u8>> {
    let got: Vec<Vec<u8>> = d.recv_frames(0).into_iter().map(|f| f.data).collect();
    if !got.is_empty() {
        d.post_rx_buffers(0, got.len(), 2048, RxLayout::Single)
            .unwrap();
        d.kick_rx(0);
    }
    got
}

/// Waits until `d` received `n` frames (adaptive: returns as soon as they
/// are there).
fn expect(d: &mut TestDriver, n: usize, what: &str) -> Vec<Vec<u8>> {
    let got = d.recv_frames_until(0, n, Duration::from_secs(5));
    assert_eq!(got.len(), n, "{what}");
    d.post_rx_buffers(0, n, 2048, RxLayout::Single).unwrap();
    d.kick_rx(0);
    got.into_iter().map(|f| f.data).collect()
}

fn from(frame: &[u8], mac: &str) -> bool {
    frame.get(6..12) == Some(&mac_octets(mac)[..])
}

fn mac_octets(mac: &str) -> [u8; 6] {
    let v: Vec<u8> = mac
        .split(':')
        .map(|h| u8::from_str_radix(h, 16).unwrap())
        .collect();
    v.try_into().unwrap()
}

fn metrics(sw: &SwitchProc) -> String {
    let m = String::from_utf8(sw.call("GET", "/metrics", "", 200)).unwrap();
    let mut p = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian prometheus) is installed by scripts/install-peers.sh");
    std::io::Write::write_all(p.stdin.as_mut().unwrap(), m.as_bytes()).unwrap();
    drop(p.stdin.take());
    let out = p.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    m
}

/// `(rx_packets, tx_packets, rx drops, tx drops)` of a port's totals.
fn counts(s: &PortStats) -> (u64, u64, u64, u64) {
    let t = &s.total;
    (
        t.rx_packets,
        t.tx_packets,
        t.rx_dropped_total(),
        t.tx_dropped_total(),
    )
}

fn delta(after: &PortStats, before: &PortStats) -> (u64, u64, u64, u64) {
    let (a, b) = (counts(after), counts(before));
    (a.0 - b.0, a.1 - b.1, a.2 - b.2, a.3 - b.3)
}

#[test]
#[ignore = "needs root: run scripts/test.sh"]
fn a_port_spraying_source_macs_fills_only_its_own_share_of_the_fdb() {
    const SPRAY: u64 = 4000;
    const QUOTA: u64 = 1024 / 32;
    let run = RunDir::new("switch-tenancy-fdb");
    let sw = SwitchProc::start(&run, &config("fdb_max_entries = 1024"), &[]);
    let (mut a, mut b, mut c, mut x) = (
        connect(&sw, "a"),
        connect(&sw, "b"),
        connect(&sw, "c"),
        connect(&sw, "x"),
    );
    // a and b learned (a's first frame is flooded: b, c and x get it).
    send_all(
        &mut a,
        &[numbered_frame(MAC_B, MAC_A, 0, 64)],
        Duration::from_secs(5),
    );
    expect(&mut b, 1, "b: a's first frame");
    expect(&mut c, 1, "c: a's first frame, flooded");
    send_all(
        &mut b,
        &[numbered_frame(MAC_A, MAC_B, 1, 64)],
        Duration::from_secs(5),
    );
    expect(&mut a, 1, "a: b's reply");
    drain(&mut x);
    sw.add_static_mac(MAC_X, "x", 10);
    let before = sw.settle(&PORTS);

    // The attack: 4,000 fresh source addresses, to x's own (static)
    // address, so that only the FDB can tell.
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let spray: Vec<Vec<u8>> = (0..SPRAY)
        .map(|i| {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let r = seed.to_be_bytes();
            // Unicast, locally administered, never one of the neighbours'.
            let src = format!(
                "06:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
                r[0], r[1], r[2], r[3], r[4]
            );
            numbered_frame(MAC_X, &src, i, 64)
        })
        .collect();
    assert_eq!(
        send_all(&mut x, &spray, Duration::from_secs(20)),
        spray.len()
    );
    let mid = sw.settle(&PORTS);

    // c's first frame: its address is learned, whatever x did.
    send_all(
        &mut c,
        &[numbered_frame(MAC_A, MAC_C, 2, 64)],
        Duration::from_secs(5),
    );
    expect(&mut a, 1, "a: c's frame");
    send_all(
        &mut a,
        &[numbered_frame(MAC_C, MAC_A, 3, 64)],
        Duration::from_secs(5),
    );
    let to_c = expect(&mut c, 1, "c: a's frame to it");
    assert!(from(&to_c[0], MAC_A));
    let after = sw.settle(&PORTS);
    let leaked = drain(&mut b);
    assert!(
        leaked.is_empty(),
        "b received a's frame for c: c was not learned (the FDB is full of x's addresses)"
    );
    let fdb: Vec<FdbEntryView> = sw.get("/fdb");
    let on = |port: &str, mac: &str| {
        fdb.iter()
            .any(|e| e.port == port && e.vlan == 10 && e.mac.to_string() == mac)
    };
    assert!(
        on("a", MAC_A) && on("b", MAC_B) && on("c", MAC_C),
        "{fdb:?}"
    );

    // x holds its quota, and the refusals are counted on it.
    let learned_on_x = fdb.iter().filter(|e| e.port == "x" && !e.is_static).count();
    let xs = &after[3];
    assert_eq!(learned_on_x as u64, QUOTA, "x's learned entries");
    assert_eq!(
        (xs.fdb.learned, xs.fdb.limit, xs.fdb.learn_refused),
        (QUOTA, QUOTA, SPRAY - QUOTA),
        "x's FDB share: {xs:?}"
    );
    assert_eq!(
        xs.total.tx_dropped.get("hairpin").copied(),
        Some(before[3].total.tx_dropped["hairpin"] + SPRAY),
        "x's frames went nowhere: {xs:?}"
    );
    let m = metrics(&sw);
    for line in [
        format!(
            "vhu_port_fdb_learn_refused_total{{port=\"x\"}} {}\n",
            SPRAY - QUOTA
        ),
        format!("vhu_port_fdb_learned{{port=\"x\"}} {QUOTA}\n"),
        format!("vhu_port_fdb_limit{{port=\"x\"}} {QUOTA}\n"),
        "vhu_port_fdb_learn_refused_total{port=\"a\"} 0\n".to_owned(),
        format!("vhu_fdb_limit_hits_total {}\n", SPRAY - QUOTA),
    ] {
        assert!(m.contains(&line), "no {line:?} in\n{m}");
    }

    // Nothing outside x moved but by the neighbours' own frames: during
    // the attack nothing at all; after it, c's frame to a and a's to c.
    for (i, p) in ["a", "b", "c"].iter().enumerate() {
        assert_eq!(
            delta(&mid[i], &before[i]),
            (0, 0, 0, 0),
            "{p} during the attack"
        );
        assert_eq!(after[i].fdb.learn_refused, 0, "{p}: {:?}", after[i]);
        assert_eq!(after[i].fdb.limit, QUOTA, "{p}: {:?}", after[i]);
    }
    assert_eq!(delta(&after[0], &mid[0]), (1, 1, 0, 0), "a: {:?}", after[0]);
    assert_eq!(delta(&after[1], &mid[1]), (0, 0, 0, 0), "b: {:?}", after[1]);
    assert_eq!(delta(&after[2], &mid[2]), (1, 1, 0, 0), "c: {:?}", after[2]);
    let mut sw = sw;
    assert!(sw.stop().success());
}

#[test]
#[ignore = "needs root: run scripts/test.sh"]
fn a_port_flooding_broadcasts_is_held_to_its_flood_rate() {
    const RATE: u32 = 1000;
    const BURST: u64 = 100;
    const ROUNDS: u64 = 20;
    const FLOOD: u64 = 500;
    const UNICAST: u64 = 25;
    /// Between two rounds: the bucket refills by half its burst, so that
    /// the rate, not the burst, sets what passes over the second.
    const PAUSE: Duration = Duration::from_millis(50);
    let run = RunDir::new("switch-tenancy-flood");
    let sw = SwitchProc::start(
        &run,
        &config(&format!("flood_rate = {RATE}\nflood_burst = {BURST}")),
        &[],
    );
    let (mut a, mut b, mut c, mut x) = (
        connect(&sw, "a"),
        connect(&sw, "b"),
        connect(&sw, "c"),
        connect(&sw, "x"),
    );
    // The pair learns each other (one flood each side: within their own
    // rates).
    send_all(
        &mut a,
        &[numbered_frame(MAC_B, MAC_A, 0, 64)],
        Duration::from_secs(5),
    );
    expect(&mut b, 1, "b: a's first frame");
    send_all(
        &mut b,
        &[numbered_frame(MAC_A, MAC_B, 0, 64)],
        Duration::from_secs(5),
    );
    expect(&mut a, 1, "a: b's reply");
    drain(&mut c);
    drain(&mut x);
    let before = sw.settle(&PORTS);

    let mut floods = [0u64; 3];
    let mut unicast_to_b = Vec::new();
    let mut b_unicast = 0u64;
    // What a neighbour received: x's broadcasts counted; b's unicast from
    // a checked and counted.
    let mut tally = |i: usize, got: Vec<Vec<u8>>, sent: &[Vec<u8>]| {
        for f in got {
            if from(&f, MAC_X) {
                floods[i] += 1;
            } else {
                assert!(
                    i == 1 && sent.contains(&f),
                    "port {i} received a frame it should not have"
                );
                b_unicast += 1;
            }
        }
    };
    let t0 = Instant::now();
    let (mut first_end, mut last_start) = (t0, t0);
    for r in 0..ROUNDS {
        if r > 0 {
            std::thread::sleep(PAUSE);
        }
        if r == ROUNDS - 1 {
            last_start = Instant::now();
        }
        let bcast: Vec<Vec<u8>> = (0..FLOOD)
            .map(|i| numbered_frame(BROADCAST, MAC_X, r * FLOOD + i, 64))
            .collect();
        assert_eq!(
            send_all(&mut x, &bcast, Duration::from_secs(10)),
            bcast.len()
        );
        if r == 0 {
            first_end = Instant::now();
        }
        let uni: Vec<Vec<u8>> = (0..UNICAST)
            .map(|i| numbered_frame(MAC_B, MAC_A, 1 + r * UNICAST + i, 64))
            .collect();
        assert_eq!(send_all(&mut a, &uni, Duration::from_secs(10)), uni.len());
        unicast_to_b.extend(uni);
        // Each neighbour drained between the rounds, well before its ring
        // fills (a round lets at most the burst and a round's rate in).
        for (i, d) in [&mut a, &mut b, &mut c].into_iter().enumerate() {
            tally(i, drain(d), &unicast_to_b);
        }
    }
    let after = sw.settle(&PORTS);
    // The switch handled x's last frame before it went quiet (300 ms).
    let secs = t0
        .elapsed()
        .saturating_sub(Duration::from_millis(300))
        .as_secs_f64();
    for (i, d) in [&mut a, &mut b, &mut c].into_iter().enumerate() {
        tally(i, drain(d), &unicast_to_b);
    }
    let sent = ROUNDS * FLOOD;
    let most = BURST as f64 + f64::from(RATE) * secs;
    // Tokens accrue at least between the end of the first round and the
    // start of the last (each round takes what accrued before it).
    let least = 0.8 * f64::from(RATE) * last_start.duration_since(first_end).as_secs_f64();
    println!(
        "{sent} broadcasts in {secs:.3} s: {floods:?} reached a, b, c (at least {least:.0}, \
         at most {most:.0}); b got {b_unicast} of {} unicast",
        ROUNDS * UNICAST
    );
    assert!(
        floods[2] as f64 >= least,
        "c received {} broadcasts: the limiter passed less than the rate",
        floods[2]
    );
    assert!(
        floods[2] as f64 <= most * 1.01 + 1.0,
        "c received {} of x's {sent} broadcasts in {secs:.3} s: over {BURST} + {RATE}/s",
        floods[2]
    );
    assert!(floods[2] >= BURST, "not even the burst passed: {floods:?}");
    assert_eq!(floods[0], floods[2], "a and c got x's same floods");
    assert_eq!(floods[1], floods[2], "b and c got x's same floods");
    // The neighbours' own traffic passed, all of it, and nothing of theirs
    // was dropped.
    assert_eq!(
        b_unicast,
        ROUNDS * UNICAST,
        "a's unicast to b: {:?}",
        after[1]
    );
    for (i, p) in ["a", "b", "c"].iter().enumerate() {
        let (rx, _, rxd, txd) = delta(&after[i], &before[i]);
        assert_eq!((rxd, txd), (0, 0), "{p}: {:?}", after[i]);
        let own = if i == 1 { ROUNDS * UNICAST } else { 0 };
        assert_eq!(rx, floods[i] + own, "{p}'s receptions: {:?}", after[i]);
    }
    // x: every broadcast taken, those over the rate counted.
    let xs = &after[3];
    let limited = sent - floods[2];
    assert_eq!(
        xs.total.tx_packets - before[3].total.tx_packets,
        sent,
        "{xs:?}"
    );
    assert_eq!(
        xs.total.tx_dropped["flood_rate"] - before[3].total.tx_dropped["flood_rate"],
        limited,
        "{xs:?}"
    );
    let m = metrics(&sw);
    let line = format!(
        "vhu_port_tx_dropped_total{{port=\"x\",queue=\"0\",reason=\"flood_rate\"}} {}\n",
        xs.total.tx_dropped["flood_rate"]
    );
    assert!(m.contains(&line), "no {line:?} in\n{m}");
    let out = Command::new(switch_bin().with_file_name("vhuctl"))
        .arg("--socket")
        .arg(&sw.control)
        .args(["stats", "x"])
        .output()
        .expect("vhuctl");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!(
            "tx dropped flood_rate: {}",
            xs.total.tx_dropped["flood_rate"]
        )),
        "vhuctl stats x:\n{text}"
    );
    let mut sw = sw;
    assert!(sw.stop().success());
}
