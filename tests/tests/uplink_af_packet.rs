// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! End-to-end tests of the AF_PACKET uplink against the kernel, through a
//! veth pair: our end in the test's network namespace, the peer end in a
//! namespace of its own. No vhost-user: frames go straight through the
//! [`Uplink`] trait.
//!
//! * `tx_frames_arrive_byte_exact`: `tx_push` → peer capture, byte for byte.
//! * `rx_frames_arrive_byte_exact`: peer raw socket → `rx_burst`, including
//!   802.1Q-tagged frames (the kernel moves the tag into metadata; the
//!   uplink puts it back); the interface is promiscuous while the uplink is
//!   open, and the socket does not see its own transmissions.
//! * `tx_ring_wraps_and_reports_back_pressure`: three times the TX ring's
//!   slots, in order, through `TxError::Full` and flushes.
//! * `fanout_spreads_frames`: two uplinks in one `PACKET_FANOUT` group.
//! * `rx_ring_overflow_is_counted`: the kernel's drops on a full RX ring
//!   show in `rx_dropped`, exactly.
//! * `qdisc_bypass_drops_what_the_device_cannot_segment`: the kernel cannot
//!   segment on the bypass path; the super-frame is dropped and counted,
//!   and does not block the ring.
//! * `tx_offloads_are_carried_out_by_the_kernel`: TCPv4 (also with ECN)
//!   and TCPv6 TSO, UFO, USO super-frames and a partial checksum, pushed with virtio-net
//!   headers, arrive at the peer as valid, fully checksummed segments
//!   (checksum and segmentation offloads of our veth end are switched off
//!   with the ethtool ioctl, so the kernel does the work in software before
//!   the wire).
//! * `rx_tso_super_frames_from_a_tcp_stream` (and `_ipv6`): a real TCP
//!   stream from the peer namespace to an address on our end arrives
//!   through `rx_burst` as `GSO_TCPV4` (`GSO_TCPV6`) super-frames, which
//!   `Segmenter::segment` turns into valid segments; a second uplink
//!   without virtio-net headers on the same interface yields only
//!   wire-size, fully checksummed frames carrying the same bytes.
//!
//! Needs root, `ip` (iproute2) and `python3` (the peer side's capture and
//! send programs, and the ethtool ioctl); run by `scripts/test.sh`. Each
//! test makes its own namespace and veth pair, named after the process id,
//! and removes them when it ends, passed or failed.

use std::io::Read;
use std::net::TcpListener;
use std::process::Child;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use vhost_net_backend::io::af_packet::{AfPacket, AfPacketConfig, FanoutMode};
use vhost_net_backend::io::offload::{pseudo_header_checksum, Segmenter};
use vhost_net_backend::io::Uplink;
use vhost_net_backend::net_hdr::{
    F_NEEDS_CSUM, GSO_ECN, GSO_NONE, GSO_TCPV4, GSO_TCPV6, GSO_UDP, GSO_UDP_L4,
};
use vhost_net_backend::VirtioNetHdr;
use vhu_tests::netns::{self, mac_octets, run, VethPair, ETHTOOL_STXCSUM};
use vhu_tests::peers::{self, LineOutput};
use vhu_tests::wire::{be16, be32, hex, ipv4_header_checksum, l4_checksum, to_hex};

// ===== namespace and veth fixture =====

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// A veth pair ([`VethPair`]): `ours` in this namespace, `peer` in a
/// namespace of its own, IPv6 off on both ends. Dropping it deletes both
/// (also when the test panics).
struct Veth {
    pair: VethPair,
    ours: String,
    peer: String,
    /// Third octet of the test's 198.18.0.0/15 subnet.
    net: u8,
}

impl Veth {
    fn new() -> Self {
        let pid = std::process::id();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let pair = VethPair::new();
        // No IPv6 chatter (router solicitations, DAD) on either end.
        pair.set_host_ipv6(false).expect("disable IPv6 on our end");
        pair.set_peer_ipv6(false)
            .expect("disable IPv6 on the peer end");
        Veth {
            ours: pair.host().to_owned(),
            peer: pair.peer().to_owned(),
            pair,
            net: ((pid as usize * 7 + n) % 250) as u8,
        }
    }

    /// Runs a command in the peer namespace.
    fn exec(&self, args: &[&str]) -> String {
        self.pair.ns().exec(args)
    }

    fn peer_mac(&self) -> [u8; 6] {
        mac_octets(&self.pair.peer_mac())
    }

    /// Our end's `IFF_*` flags.
    fn our_flags(&self) -> u32 {
        self.pair.host_flags()
    }

    fn our_mac(&self) -> [u8; 6] {
        mac_octets(&self.pair.host_mac())
    }

    /// Enables IPv6 on both ends and adds fd00:7668:75:`net`::1 (ours) and
    /// ::2 (peer), /64, without duplicate address detection.
    fn add_addresses6(&self) -> (std::net::Ipv6Addr, std::net::Ipv6Addr) {
        self.pair
            .set_host_ipv6(true)
            .expect("enable IPv6 on our end");
        self.pair
            .set_peer_ipv6(true)
            .expect("enable IPv6 on the peer end");
        let a = format!("fd00:7668:75:{}::1", self.net);
        let b = format!("fd00:7668:75:{}::2", self.net);
        run(&[
            "ip",
            "addr",
            "add",
            &format!("{a}/64"),
            "dev",
            &self.ours,
            "nodad",
        ]);
        self.exec(&[
            "ip",
            "addr",
            "add",
            &format!("{b}/64"),
            "dev",
            &self.peer,
            "nodad",
        ]);
        (a.parse().expect("v6"), b.parse().expect("v6"))
    }

    /// Addresses 198.18.`net`.1 (ours) and .2 (peer), /24.
    fn add_addresses(&self) -> ([u8; 4], [u8; 4]) {
        let (a, b) = ([198, 18, self.net, 1], [198, 18, self.net, 2]);
        run(&[
            "ip",
            "addr",
            "add",
            &format!("198.18.{}.1/24", self.net),
            "dev",
            &self.ours,
        ]);
        self.pair
            .set_peer_addr(&format!("198.18.{}.2/24", self.net));
        (a, b)
    }
}

// ===== peer-side programs (python3) =====

/// A capture running in the peer namespace.
struct Capture(LineOutput);

impl Capture {
    fn start(v: &Veth, proto: u16, count: usize, timeout: Duration) -> Self {
        let c = Capture(LineOutput::spawn(
            v.pair
                .ns()
                .command("python3")
                .args(["-c", peers::CAPTURE_FRAMES, &v.peer])
                .arg(format!("{proto:#x}"))
                .arg(count.to_string())
                .arg(timeout.as_secs_f64().to_string()),
            "start python3 capture in the peer namespace",
        ));
        let first = c.0.line(Duration::from_secs(10), "capture READY");
        assert_eq!(first, "READY");
        c
    }

    /// Waits for the capture to end; returns the frames.
    fn finish(mut self) -> Vec<Vec<u8>> {
        let mut frames = Vec::new();
        loop {
            let l = self.0.line(Duration::from_secs(30), "capture output");
            if l == "DONE" {
                break;
            }
            frames.push(hex(&l));
        }
        assert!(self.0.wait_success());
        frames
    }
}

// ===== frames and checksum checks =====

const ETH_TEST: u16 = 0x88b5; // IEEE local experimental ethertype
const IFF_PROMISC: u32 = 0x100;

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn eth_frame(dst: [u8; 6], src: [u8; 6], vlan: Option<u16>, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    if let Some(tci) = vlan {
        f.extend_from_slice(&0x8100u16.to_be_bytes());
        f.extend_from_slice(&tci.to_be_bytes());
    }
    f.extend_from_slice(&ETH_TEST.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// What `check_ip_frame` found in a valid, untagged IPv4 or IPv6 frame.
#[derive(Debug)]
struct Seen {
    v6: bool,
    proto: u8,
    l4: usize,
    /// IPv4 flags/fragment offset (0 for IPv6 or unfragmented).
    frag: u16,
    id: u16,
}

/// Verifies the IP length fields, the IPv4 header checksum and (for a
/// non-fragment) the TCP/UDP checksum of a frame.
fn check_ip_frame(f: &[u8]) -> Seen {
    let et = be16(f, 12);
    let s = match et {
        0x0800 => {
            let ihl = usize::from(f[14] & 15) * 4;
            assert_eq!(
                ipv4_header_checksum(&f[14..14 + ihl]),
                0,
                "IPv4 header checksum"
            );
            assert_eq!(usize::from(be16(f, 16)), f.len() - 14, "IPv4 total length");
            Seen {
                v6: false,
                proto: f[23],
                l4: 14 + ihl,
                frag: be16(f, 20) & 0x3fff,
                id: be16(f, 18),
            }
        }
        0x86dd => {
            assert_eq!(
                usize::from(be16(f, 18)),
                f.len() - 54,
                "IPv6 payload length"
            );
            Seen {
                v6: true,
                proto: f[20],
                l4: 54,
                frag: 0,
                id: 0,
            }
        }
        _ => panic!("not IP: {et:#x}"),
    };
    if s.frag == 0 {
        let (src, dst): (&[u8], &[u8]) = if s.v6 {
            (&f[22..38], &f[38..54])
        } else {
            (&f[26..30], &f[30..34])
        };
        assert_eq!(
            l4_checksum(src, dst, s.proto, &f[s.l4..]),
            0,
            "L4 checksum ({s:?})"
        );
    }
    s
}

const IP4_SRC: [u8; 4] = [198, 19, 0, 1];
const IP4_DST: [u8; 4] = [198, 19, 0, 2];
const IP6_SRC: [u8; 16] = [0xfd, 0, 0x76, 0x68, 0x75, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const IP6_DST: [u8; 16] = [0xfd, 0, 0x76, 0x68, 0x75, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

/// An IPv4/IPv6 TCP or UDP frame with a partial checksum, as a guest hands
/// it over, and its header.
fn l4_frame(
    dst: [u8; 6],
    src: [u8; 6],
    v6: bool,
    tcp: bool,
    payload: &[u8],
    gso_type: u8,
    gso_size: u16,
) -> (VirtioNetHdr, Vec<u8>) {
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    let l4_len = if tcp { 20 } else { 8 } + payload.len();
    let proto = if tcp { 6 } else { 17 };
    if v6 {
        f.extend_from_slice(&0x86ddu16.to_be_bytes());
        f.extend_from_slice(&[0x60, 0, 0, 0]);
        f.extend_from_slice(&(l4_len as u16).to_be_bytes());
        f.extend_from_slice(&[proto, 64]);
        f.extend_from_slice(&IP6_SRC);
        f.extend_from_slice(&IP6_DST);
    } else {
        f.extend_from_slice(&0x0800u16.to_be_bytes());
        let tot = (20 + l4_len) as u16;
        let mut ip = vec![0x45, 0];
        ip.extend_from_slice(&tot.to_be_bytes());
        ip.extend_from_slice(&[0x43, 0x21, 0x40, 0x00, 64, proto, 0, 0]);
        ip.extend_from_slice(&IP4_SRC);
        ip.extend_from_slice(&IP4_DST);
        let c = ipv4_header_checksum(&ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        f.extend_from_slice(&ip);
    }
    let l4 = f.len();
    let (s, d): (&[u8], &[u8]) = if v6 {
        (&IP6_SRC, &IP6_DST)
    } else {
        (&IP4_SRC, &IP4_DST)
    };
    let pseudo = pseudo_header_checksum(s, d, proto, l4_len as u32);
    if tcp {
        f.extend_from_slice(&[0x9c, 0x40, 0x1f, 0x90]); // 40000 -> 8080
        f.extend_from_slice(&1_000_000u32.to_be_bytes());
        f.extend_from_slice(&1u32.to_be_bytes());
        f.extend_from_slice(&[0x50, 0x18 | 0x01, 0xff, 0xff]); // PSH|ACK|FIN
        f.extend_from_slice(&pseudo.to_be_bytes());
        f.extend_from_slice(&[0, 0]);
    } else {
        f.extend_from_slice(&[0x9c, 0x40, 0x1f, 0x90]);
        f.extend_from_slice(&(l4_len as u16).to_be_bytes());
        f.extend_from_slice(&pseudo.to_be_bytes());
    }
    f.extend_from_slice(payload);
    let hdr = VirtioNetHdr {
        flags: F_NEEDS_CSUM,
        gso_type,
        hdr_len: (l4 + if tcp { 20 } else { 8 }) as u16,
        gso_size,
        csum_start: l4 as u16,
        csum_offset: if tcp { 16 } else { 6 },
        num_buffers: 0,
    };
    (hdr, f)
}

/// Pushes one frame and flushes, failing the test on any error.
#[allow(clippy::ptr_arg)] // Vec<u8> is a FrameSource; [u8] is not Sized
fn push(up: &mut AfPacket, hdr: &VirtioNetHdr, frame: &Vec<u8>) {
    up.tx_push(hdr, frame).expect("tx_push");
    up.tx_flush().expect("tx_flush");
}

/// Pushes one frame ([`push`]) while the peer captures `count` frames of
/// `ethertype` (10 s at most); returns what it captured.
fn push_captured(
    v: &Veth,
    up: &mut AfPacket,
    ethertype: u16,
    count: usize,
    hdr: &VirtioNetHdr,
    frame: &Vec<u8>,
) -> Vec<Vec<u8>> {
    let cap = Capture::start(v, ethertype, count, Duration::from_secs(10));
    push(up, hdr, frame);
    cap.finish()
}

/// Polls `rx_burst`, lending each frame to `f`, until `f` returns true or
/// the timeout passes.
fn receive_until(
    up: &mut AfPacket,
    timeout: Duration,
    mut f: impl FnMut(&VirtioNetHdr, &[u8]) -> bool,
) {
    let end = Instant::now() + timeout;
    let mut done = false;
    while !done && Instant::now() < end {
        let n = up
            .rx_burst(64, &mut |h, b| done |= f(h, b))
            .expect("rx_burst");
        if n == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

fn open(v: &Veth, vnet_hdr: bool) -> AfPacket {
    let cfg = AfPacketConfig {
        vnet_hdr,
        ..AfPacketConfig::default()
    };
    AfPacket::open(&v.ours, cfg).unwrap_or_else(|e| panic!("open {}: {e}", v.ours))
}

// ===== tests =====

#[test]
#[ignore = "needs root: run scripts/test.sh"]
fn tx_frames_arrive_byte_exact() {
    let v = Veth::new();
    let mut up = open(&v, true);
    assert_eq!(
        up.tx_vnet_hdr_len(),
        12,
        "kernel 6.2+ takes 12-byte headers"
    );
    let src = v.our_mac();
    let frames: Vec<Vec<u8>> = [46, 100, 1000, 1500]
        .iter()
        .enumerate()
        .map(|(i, &n)| eth_frame([0xff; 6], src, None, &pattern(n, i as u8)))
        .collect();
    let cap = Capture::start(&v, ETH_TEST, frames.len(), Duration::from_secs(10));
    // All queued first: one flush sends them all.
    for f in &frames {
        up.tx_push(&VirtioNetHdr::default(), f).expect("tx_push");
    }
    up.tx_flush().expect("tx_flush");
    let got = cap.finish();
    assert_eq!(got, frames);
    // The socket does not see its own transmissions.
    let mut echoed = 0;
    up.rx_burst(64, &mut |_, f| {
        echoed += usize::from(be16(f, 12) == ETH_TEST)
    })
    .expect("rx_burst");
    assert_eq!(echoed, 0, "PACKET_IGNORE_OUTGOING");
    let c = up.counters();
    assert_eq!(c.tx_packets, 4);
    assert_eq!(
        c.tx_bytes,
        frames.iter().map(|f| f.len() as u64).sum::<u64>()
    );
    assert_eq!(c.tx_dropped(), 0);
}

#[test]
#[ignore = "needs root: run scripts/test.sh"]
fn tx_ring_wraps_and_reports_back_pressure() {
    let v = Veth::new();
    let mut up = open(&v, true);
    let slots = up.tx_slots();
    let src = v.our_mac();
    let total = slots * 3 + 7;
    let cap = Capture::start(&v, ETH_TEST, total, Duration::from_secs(20));
    let mut sent = 0;
    let mut full = 0;
    while sent < total {
        let mut payload = pattern(200, 0);
        payload[..8].copy_from_slice(&(sent as u64).to_be_bytes());
        let f = eth_frame([0xff; 6], src, None, &payload);
        match up.tx_push(&VirtioNetHdr::default(), &f) {
            Ok(()) => sent += 1,
            Err(e) => {
                assert_eq!(e, vhost_net_backend::DropReason::NoBuffers);
                full += 1;
                up.tx_flush().expect("tx_flush");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        if sent % 16 == 0 {
            up.tx_flush().expect("tx_flush");
        }
    }
    up.tx_flush().expect("tx_flush");
    let got = cap.finish();
    assert_eq!(
        got.len(),
        total,
        "every frame arrives ({full} Full results)"
    );
    for (i, g) in got.iter().enumerate() {
        assert_eq!(be32(g, 14 + 4) as usize, i, "in order");
    }
    assert_eq!(up.counters().tx_packets, total as u64);
}

#[test]
#[ignore = "needs root: run scripts/test.sh"]
fn rx_frames_arrive_byte_exact() {
    let v = Veth::new();
    let mut up = open(&v, true);
    assert_ne!(v.our_flags() & IFF_PROMISC, 0, "promiscuous while open");
    let src = v.peer_mac();
    let frames = vec![
        eth_frame([0xff; 6], src, None, &pattern(46, 1)),
        eth_frame([0x02, 0, 0, 0, 0, 0x42], src, None, &pattern(1500, 2)),
        // A tagged frame: the kernel strips the tag into metadata.
        eth_frame([0xff; 6], src, Some(0x2064), &pattern(300, 3)),
        eth_frame([0xff; 6], src, Some(0x0005), &pattern(1496, 4)),
    ];
    let mut args = vec!["python3", "-c", peers::SEND_FRAMES, &v.peer];
    let hexes: Vec<String> = frames.iter().map(|f| to_hex(f)).collect();
    args.extend(hexes.iter().map(String::as_str));
    v.exec(&args);
    let mut got: Vec<(VirtioNetHdr, Vec<u8>)> = Vec::new();
    receive_until(&mut up, Duration::from_secs(10), |h, f| {
        let et = be16(f, 12);
        if et == ETH_TEST || (et == 0x8100 && be16(f, 16) == ETH_TEST) {
            got.push((*h, f.to_vec()));
        }
        got.len() == frames.len()
    });
    let bodies: Vec<Vec<u8>> = got.iter().map(|(_, f)| f.clone()).collect();
    assert_eq!(bodies, frames);
    for (h, _) in &got {
        assert_eq!(h.gso_type, GSO_NONE);
        assert!(!h.needs_csum());
    }
    let c = up.counters();
    assert!(c.rx_packets >= 4);
    assert_eq!(c.rx_dropped(), 0);
    drop(up);
    assert_eq!(
        v.our_flags() & IFF_PROMISC,
        0,
        "not promiscuous once closed"
    );
}

/// Frames the kernel drops because the RX ring is full show in
/// `rx_dropped` (from `TP_STATUS_LOSING` and `PACKET_STATISTICS`).
#[test]
#[ignore = "needs root: run scripts/test.sh"]
fn rx_ring_overflow_is_counted() {
    let v = Veth::new();
    let mut cfg = AfPacketConfig::default();
    cfg.rx_ring.block_count = 1;
    cfg.rx_ring.block_size = 128 * 1024;
    // The block is handed over when full, not after the default 1 ms: a
    // sender slowed by a loaded machine would otherwise see it retired
    // with a handful of frames (and the rest dropped) and the count below
    // would depend on the sender's speed.
    cfg.rx_ring.block_timeout_ms = 1000;
    let mut up = AfPacket::open(&v.ours, cfg).expect("open");
    // About 120 frames fill the only block; the rest are dropped.
    v.exec(&["python3", "-c", peers::FLOOD, &v.peer, "400", "1000"]);
    let mut got = 0usize;
    receive_until(&mut up, Duration::from_secs(2), |_, f| {
        got += usize::from(be16(f, 12) == ETH_TEST);
        false
    });
    assert!(got > 50 && got < 400, "{got} frames fit the ring");
    // The next block the kernel fills carries TP_STATUS_LOSING.
    v.exec(&["python3", "-c", peers::FLOOD, &v.peer, "1", "100"]);
    receive_until(&mut up, Duration::from_secs(2), |_, f| {
        got += usize::from(be16(f, 12) == ETH_TEST);
        false
    });
    let c = up.counters();
    assert_eq!(c.rx_dropped() as usize + got, 401, "{c:?}");
}

/// Two uplinks in one fanout group share the interface's frames: each frame
/// reaches exactly one of them, and round robin gives each a share.
#[test]
#[ignore = "needs root: run scripts/test.sh"]
fn fanout_spreads_frames() {
    let v = Veth::new();
    let group = (std::process::id() & 0xffff) as u16;
    let cfg = AfPacketConfig {
        fanout: Some((group, FanoutMode::LoadBalance)),
        ..AfPacketConfig::default()
    };
    let mut ups: Vec<AfPacket> = (0..2)
        .map(|_| AfPacket::open(&v.ours, cfg).expect("open with fanout"))
        .collect();
    let src = v.peer_mac();
    const N: usize = 40;
    let hexes: Vec<String> = (0..N)
        .map(|i| {
            let mut p = pattern(60, 0);
            p[0] = i as u8;
            to_hex(&eth_frame([0xff; 6], src, None, &p))
        })
        .collect();
    let mut args = vec!["python3", "-c", peers::SEND_FRAMES, &v.peer];
    args.extend(hexes.iter().map(String::as_str));
    v.exec(&args);
    let mut seen = [0usize; N];
    let mut per = [0usize; 2];
    let end = Instant::now() + Duration::from_secs(10);
    while per.iter().sum::<usize>() < N && Instant::now() < end {
        for (k, up) in ups.iter_mut().enumerate() {
            up.rx_burst(64, &mut |_, f| {
                if be16(f, 12) == ETH_TEST {
                    seen[usize::from(f[14])] += 1;
                    per[k] += 1;
                }
            })
            .expect("rx_burst");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        seen.iter().all(|&n| n == 1),
        "each frame exactly once: {seen:?}"
    );
    assert!(per[0] > 0 && per[1] > 0, "both members served: {per:?}");
}

#[test]
#[ignore = "needs root: run scripts/test.sh"]
fn tx_offloads_are_carried_out_by_the_kernel() {
    let v = Veth::new();
    // Our end can do no checksum or segmentation offload, so the kernel
    // completes and segments in software before the frames cross.
    netns::ethtool(&v.ours, &[(ETHTOOL_STXCSUM, 0)]);
    let mut up = open(&v, true);
    let (dst, src) = (v.peer_mac(), v.our_mac());
    let mss = 1448u16;

    // TCPv4 TSO, 64000 bytes: 45 segments.
    let data = pattern(64_000, 9);
    let (h, f) = l4_frame(dst, src, false, true, &data, GSO_TCPV4, mss);
    assert!(f.len() > 64 * 1000);
    let want = data.len().div_ceil(usize::from(mss));
    let segs = push_captured(&v, &mut up, 0x0800, want, &h, &f);
    check_tcp_segments(&segs, &data, mss, 1_000_000);
    // IPv4 IDs: consecutive from the super-frame's.
    for (i, s) in segs.iter().enumerate() {
        assert_eq!(be16(s, 18), 0x4321u16.wrapping_add(i as u16));
    }

    // TSO with ECN: CWR only on the first segment, ECE on all.
    let data = pattern(10_000, 14);
    let (h, mut f) = l4_frame(dst, src, false, true, &data, GSO_TCPV4 | GSO_ECN, mss);
    f[34 + 13] |= 0xc0; // CWR | ECE (not covered by the partial checksum)
    let segs = push_captured(&v, &mut up, 0x0800, 7, &h, &f);
    check_tcp_segments(&segs, &data, mss, 1_000_000);
    for (i, s) in segs.iter().enumerate() {
        assert_eq!(
            s[34 + 13] & 0x80 != 0,
            i == 0,
            "CWR on the first segment only"
        );
        assert_ne!(s[34 + 13] & 0x40, 0, "ECE on every segment");
    }

    // TCPv6 TSO.
    let data = pattern(20_000, 10);
    let (h, f) = l4_frame(dst, src, true, true, &data, GSO_TCPV6, 1428);
    let segs = push_captured(&v, &mut up, 0x86dd, data.len().div_ceil(1428), &h, &f);
    check_tcp_segments(&segs, &data, 1428, 1_000_000);

    // A partial UDP checksum, completed on the way.
    let data = pattern(999, 11);
    let (h, f) = l4_frame(dst, src, false, false, &data, GSO_NONE, 0);
    let got = push_captured(&v, &mut up, 0x0800, 1, &h, &f);
    assert_eq!(got.len(), 1);
    let s = check_ip_frame(&got[0]);
    assert_eq!((s.proto, &got[0][s.l4 + 8..]), (17, &data[..]));
    assert_ne!(got[0][s.l4 + 6..s.l4 + 8], f[s.l4 + 6..s.l4 + 8]);

    // USO: one UDP datagram per 1400 bytes.
    let data = pattern(10_000, 12);
    let (h, f) = l4_frame(dst, src, false, false, &data, GSO_UDP_L4, 1400);
    let got = push_captured(&v, &mut up, 0x0800, 8, &h, &f);
    assert_eq!(got.len(), 8);
    let mut all = Vec::new();
    for g in &got {
        let s = check_ip_frame(g);
        assert_eq!(s.frag, 0);
        assert!(g.len() - s.l4 - 8 <= 1400);
        all.extend_from_slice(&g[s.l4 + 8..]);
    }
    assert_eq!(all, data);

    // UFO: one datagram in IPv4 fragments.
    let data = pattern(8000, 13);
    let (h, f) = l4_frame(dst, src, false, false, &data, GSO_UDP, 1480);
    let got = push_captured(&v, &mut up, 0x0800, 6, &h, &f);
    assert_eq!(got.len(), 6, "8008 bytes in 1480-byte fragments");
    let mut dgram = Vec::new();
    for (i, g) in got.iter().enumerate() {
        let s = check_ip_frame(g);
        assert_eq!(usize::from(s.frag & 0x1fff) * 8, dgram.len());
        assert_eq!(s.frag & 0x2000 != 0, i + 1 != got.len(), "MF");
        assert_eq!(s.id, 0x4321, "one ID for all fragments");
        dgram.extend_from_slice(&g[s.l4..]);
    }
    assert_eq!(&dgram[8..], &data[..]);
    assert_eq!(
        l4_checksum(&IP4_SRC, &IP4_DST, 17, &dgram),
        0,
        "UDP checksum of the datagram"
    );

    let c = up.counters();
    assert_eq!((c.tx_packets, c.tx_dropped()), (6, 0));
}

/// With qdisc bypass the kernel cannot segment in software: a super-frame
/// for an interface without TSO is dropped, counted, and does not block the
/// frames queued behind it.
#[test]
#[ignore = "needs root: run scripts/test.sh"]
fn qdisc_bypass_drops_what_the_device_cannot_segment() {
    let v = Veth::new();
    netns::ethtool(&v.ours, &[(ETHTOOL_STXCSUM, 0)]);
    let cfg = AfPacketConfig {
        qdisc_bypass: true,
        ..AfPacketConfig::default()
    };
    let mut up = AfPacket::open(&v.ours, cfg).expect("open");
    let (dst, src) = (v.peer_mac(), v.our_mac());
    let data = pattern(10_000, 1);
    let (h, tso) = l4_frame(dst, src, false, true, &data, GSO_TCPV4, 1448);
    let plain = eth_frame([0xff; 6], src, None, &pattern(100, 2));
    let cap = Capture::start(&v, ETH_TEST, 1, Duration::from_secs(10));
    up.tx_push(&h, &tso).expect("tx_push");
    up.tx_push(&VirtioNetHdr::default(), &plain)
        .expect("tx_push");
    up.tx_flush().expect("tx_flush");
    up.tx_flush().expect("tx_flush");
    assert_eq!(cap.finish(), vec![plain.clone()]);
    let c = up.counters();
    assert_eq!((c.tx_packets, c.tx_dropped()), (1, 1), "{c:?}");
    // Partial checksums are still completed on this path.
    let (h, udp) = l4_frame(dst, src, false, false, &data[..500], GSO_NONE, 0);
    let got = push_captured(&v, &mut up, 0x0800, 1, &h, &udp);
    assert_eq!(got.len(), 1);
    check_ip_frame(&got[0]);
}

/// Checks TCP segments of one super-frame: valid checksums, sequence
/// numbers, sizes, FIN/PSH on the last only, and the payload.
fn check_tcp_segments(segs: &[Vec<u8>], data: &[u8], mss: u16, seq0: u32) {
    assert_eq!(
        segs.len(),
        data.len().div_ceil(usize::from(mss)),
        "segment count"
    );
    let mut got = Vec::new();
    for (i, s) in segs.iter().enumerate() {
        let seen = check_ip_frame(s);
        assert_eq!(seen.proto, 6);
        let l4 = seen.l4;
        let off = usize::from(s[l4 + 12] >> 4) * 4;
        assert_eq!(be32(s, l4 + 4), seq0.wrapping_add(got.len() as u32), "seq");
        let last = i + 1 == segs.len();
        assert_eq!(
            s[l4 + 13] & 0x09 != 0,
            last,
            "FIN/PSH on the last segment only"
        );
        let p = &s[l4 + off..];
        assert!(p.len() <= usize::from(mss));
        got.extend_from_slice(p);
    }
    assert_eq!(got, data, "payload");
}

#[test]
#[ignore = "needs root: run scripts/test.sh"]
fn rx_tso_super_frames_from_a_tcp_stream() {
    tcp_stream_from_peer(false);
}

#[test]
#[ignore = "needs root: run scripts/test.sh"]
fn rx_tso_super_frames_from_a_tcp_stream_ipv6() {
    tcp_stream_from_peer(true);
}

/// A TCP stream from the peer namespace to a listener on our end, watched
/// by two uplinks on our end: one with offloads (super-frames, checked by
/// segmenting them) and one without (wire-size, checksummed frames only).
fn tcp_stream_from_peer(v6: bool) {
    let v = Veth::new();
    let (ours, peer): (std::net::IpAddr, std::net::IpAddr) = if v6 {
        let (a, b) = v.add_addresses6();
        (a.into(), b.into())
    } else {
        let (a, b) = v.add_addresses();
        (
            std::net::Ipv4Addr::from(a).into(),
            std::net::Ipv4Addr::from(b).into(),
        )
    };
    let mut up = open(&v, true);
    let mut plain = open(&v, false);
    assert_eq!(plain.offloads().rx, 0);
    let listener = TcpListener::bind((ours, 0)).expect("listen");
    let port = listener.local_addr().expect("addr").port();
    const N: usize = 2_000_000;
    let reader = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).expect("read");
        buf
    });
    let sender = v
        .pair
        .ns()
        .command("python3")
        .args(["-c", peers::TCP_SEND])
        .arg(ours.to_string())
        .arg(port.to_string())
        .arg(N.to_string())
        .spawn()
        .expect("start the TCP sender");
    let mut sender = KillOnDrop(sender);

    // The peer's byte stream, rebuilt from what each uplink lends.
    let from_peer = |f: &[u8]| match peer {
        std::net::IpAddr::V4(p) => be16(f, 12) == 0x0800 && f[23] == 6 && f[26..30] == p.octets(),
        std::net::IpAddr::V6(p) => be16(f, 12) == 0x86dd && f[20] == 6 && f[22..38] == p.octets(),
    };
    let gso = if v6 { GSO_TCPV6 } else { GSO_TCPV4 };
    let mut via_offload = Stream::new(N);
    let mut via_plain = Stream::new(N);
    let mut supers = 0usize;
    let mut segmenter = Segmenter::new();
    let end = Instant::now() + Duration::from_secs(20);
    let mut exited = None;
    while Instant::now() < end {
        let mut n = up
            .rx_burst(64, &mut |h, f| {
                if !from_peer(f) {
                    return;
                }
                if h.gso_type == gso {
                    assert!(h.needs_csum(), "super-frames carry partial checksums");
                    supers += 1;
                    let mut count = 0;
                    segmenter
                        .segment(h, f, &mut |s| {
                            check_ip_frame(s);
                            assert!(tcp_payload(s).len() <= usize::from(h.gso_size));
                            via_offload.add(s);
                            count += 1;
                            true
                        })
                        .expect("segment");
                    assert!(count > 1);
                } else {
                    assert_eq!(h.gso_type, GSO_NONE);
                    if h.needs_csum() {
                        let mut c = f.to_vec();
                        vhost_net_backend::io::offload::complete_checksum(h, &mut c)
                            .expect("complete");
                        check_ip_frame(&c);
                    }
                    via_offload.add(f);
                }
            })
            .expect("rx_burst");
        let k = plain
            .rx_burst(64, &mut |h, f| {
                if !from_peer(f) {
                    return;
                }
                assert_eq!(*h, VirtioNetHdr::default(), "plain uplink: no offloads");
                assert!(f.len() <= 1514, "plain uplink: wire-size frames only");
                check_ip_frame(f);
                via_plain.add(f);
            })
            .expect("rx_burst");
        // Software segments count against the budget (a 64 KiB super-frame
        // makes at most 45).
        assert!(k <= 64, "{k} frames lent for a budget of 64");
        n += k;
        if n == 0 {
            if exited.is_none() {
                exited = sender.0.try_wait().expect("sender status");
            }
            if exited.is_some() && via_offload.complete() && via_plain.complete() {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    assert!(exited.expect("sender finished").success());
    let received = reader.join().expect("reader");
    assert_eq!(received.len(), N);
    assert!(supers > 0, "no super-frame (gso_type {gso}) seen");
    eprintln!(
        "{supers} super-frames; offload uplink {:?}, plain uplink {:?}; counters {:?} / {:?}",
        via_offload.stats(),
        via_plain.stats(),
        up.counters(),
        plain.counters()
    );
    via_offload.check(&received, "offload uplink");
    via_plain.check(&received, "plain uplink");
    assert_eq!(
        up.counters().rx_dropped() + plain.counters().rx_dropped(),
        0
    );
}

/// One direction of a TCP connection, rebuilt by sequence number (so that a
/// retransmission does not count twice).
struct Stream {
    isn: Option<u32>,
    data: Vec<u8>,
    covered: Vec<bool>,
    frames: usize,
    duplicate_bytes: usize,
}

impl Stream {
    fn new(n: usize) -> Self {
        Stream {
            isn: None,
            data: vec![0; n],
            covered: vec![false; n],
            frames: 0,
            duplicate_bytes: 0,
        }
    }

    fn add(&mut self, f: &[u8]) {
        let l4 = l4_offset(f);
        let seq = be32(f, l4 + 4);
        if f[l4 + 13] & 0x02 != 0 {
            self.isn = Some(seq);
            return;
        }
        let p = tcp_payload(f);
        if p.is_empty() {
            return;
        }
        self.frames += 1;
        let isn = self.isn.expect("SYN seen before data");
        let off = seq.wrapping_sub(isn).wrapping_sub(1) as usize;
        assert!(off + p.len() <= self.data.len(), "data beyond the stream");
        for (i, &b) in p.iter().enumerate() {
            if self.covered[off + i] {
                self.duplicate_bytes += 1;
                assert_eq!(self.data[off + i], b, "retransmission differs");
            }
            self.data[off + i] = b;
            self.covered[off + i] = true;
        }
    }

    fn complete(&self) -> bool {
        self.covered.iter().all(|&c| c)
    }

    fn stats(&self) -> (usize, usize) {
        (self.frames, self.duplicate_bytes)
    }

    fn check(&self, want: &[u8], what: &str) {
        assert!(self.complete(), "{what}: stream has holes");
        assert!(self.data == want, "{what}: stream content differs");
    }
}

/// Offset of the transport header of an untagged IPv4 or IPv6 (no
/// extension headers) frame.
fn l4_offset(f: &[u8]) -> usize {
    if be16(f, 12) == 0x86dd {
        54
    } else {
        14 + usize::from(f[14] & 15) * 4
    }
}

fn tcp_payload(f: &[u8]) -> &[u8] {
    let l4 = l4_offset(f);
    &f[l4 + usize::from(f[l4 + 12] >> 4) * 4..]
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
