// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! End-to-end tests of the TAP uplink against a real kernel stack: the test
//! creates a TAP with [`Tap::open`], moves the device into a network
//! namespace of its own (the queue's file descriptor stays with the test)
//! and gives it 198.18.N.2/24 there; the test plays the "guest" at
//! 198.18.N.1 with a fixed MAC address, through the [`Uplink`] trait only.
//!
//! * `udp_both_ways`: a UDP datagram pushed with `tx_push` reaches a UDP
//!   socket in the namespace (and a capture there sees it byte for byte);
//!   the socket's reply comes back through `rx_burst` with valid checksums
//!   and no offload metadata (no offloads enabled).
//! * `tcp_with_offloads`: with `set_offloads(GUEST_CSUM | GUEST_TSO4 | ..)`,
//!   the test answers a TCP connection from the namespace by hand; the
//!   kernel's data arrives through `rx_burst` as `GSO_TCPV4` super-frames
//!   with partial checksums, and a 30000-byte TSO super-frame pushed back
//!   (partial checksum, `GSO_TCPV4`) reaches the application intact. A USO
//!   super-frame reaches a UDP socket as one datagram per `gso_size`.
//! * `multi_queue`: two queues of one multi-queue TAP both transmit.
//! * `attach_to_existing_tap`: the same exchange through a persistent TAP
//!   made beforehand with `ip tuntap`.
//! * `link_up_option`: `TapConfig::link_up`, and a created TAP goes away
//!   with its last queue.
//!
//! Needs root, `ip` (iproute2) and `python3`; run by `scripts/test.sh`.
//! Each test makes its own namespace, named after the process id, and
//! removes it (and the TAP) when it ends, passed or failed.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use vhost_net_backend::device::bits;
use vhost_net_backend::io::offload::{complete_checksum, pseudo_header_checksum, Segmenter};
use vhost_net_backend::io::tap::{Tap, TapConfig};
use vhost_net_backend::io::Uplink;
use vhost_net_backend::net_hdr::{F_NEEDS_CSUM, GSO_TCPV4, GSO_UDP_L4};
use vhost_net_backend::VirtioNetHdr;
use vhu_tests::netns::{mac_octets, run, unique_ifname, Netns};
use vhu_tests::peers::{self, LineOutput};
use vhu_tests::wire::{be16, be32, hex, ipv4_header_checksum, l4_checksum};

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// The test's ("guest's") MAC address.
const GUEST_MAC: [u8; 6] = [0x02, 0x76, 0x68, 0x75, 0x00, 0x01];

/// A namespace ([`Netns`]) holding the TAP at 198.18.`net`.2. Dropping it
/// deletes the namespace, and with it the TAP (also when the test panics).
struct Fixture {
    ns: Netns,
    tap: String,
    net: u8,
}

impl Fixture {
    /// Creates the namespace and a TAP (one queue, or `queues` with
    /// `IFF_MULTI_QUEUE`), and moves the TAP into the namespace. With
    /// `existing`, the TAP is first created as a persistent device with
    /// `ip tuntap`, and [`Tap::open`] attaches to it.
    fn new(queues: usize, existing: bool) -> (Self, Vec<Tap>) {
        let pid = std::process::id();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = unique_ifname("t");
        let fx = Fixture {
            ns: Netns::new(),
            tap: name.clone(),
            net: ((pid as usize * 11 + n + 100) % 250) as u8,
        };
        let cfg = TapConfig {
            multi_queue: queues > 1,
            link_up: false,
        };
        if existing {
            let mut args = vec![
                "ip", "tuntap", "add", "dev", &name, "mode", "tap", "vnet_hdr",
            ];
            if queues > 1 {
                args.push("multi_queue");
            }
            run(&args);
        }
        let taps: Vec<Tap> = (0..queues)
            .map(|_| Tap::open(&name, cfg).unwrap_or_else(|e| panic!("open TAP {name}: {e}")))
            .collect();
        assert_eq!(taps[0].ifname(), name);
        run(&["ip", "link", "set", &name, "netns", fx.ns.name()]);
        fx.exec(&[
            "sh",
            "-c",
            &format!("echo 1 > /proc/sys/net/ipv6/conf/{name}/disable_ipv6"),
        ]);
        fx.exec(&[
            "ip",
            "addr",
            "add",
            &format!("198.18.{}.2/24", fx.net),
            "dev",
            &name,
        ]);
        fx.exec(&["ip", "link", "set", &name, "up"]);
        let mac = GUEST_MAC
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":");
        fx.exec(&[
            "ip",
            "neigh",
            "add",
            &fx.guest_ip_str(),
            "lladdr",
            &mac,
            "dev",
            &name,
        ]);
        (fx, taps)
    }

    fn exec(&self, args: &[&str]) -> String {
        self.ns.exec(args)
    }

    fn guest_ip(&self) -> [u8; 4] {
        [198, 18, self.net, 1]
    }

    fn guest_ip_str(&self) -> String {
        format!("198.18.{}.1", self.net)
    }

    fn host_ip(&self) -> [u8; 4] {
        [198, 18, self.net, 2]
    }

    fn host_ip_str(&self) -> String {
        format!("198.18.{}.2", self.net)
    }

    fn host_mac(&self) -> [u8; 6] {
        mac_octets(&self.ns.mac(&self.tap))
    }

    /// Starts `python3 -c script args..` in the namespace; its stdout lines
    /// arrive on the returned channel. Waits for a first line "READY".
    fn python(&self, script: &str, args: &[String]) -> Py {
        let py = Py(LineOutput::spawn(
            self.ns.command("python3").args(["-c", script]).args(args),
            "start python3 in the namespace",
        ));
        assert_eq!(py.line(), "READY");
        py
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        // The namespace (dropped next) takes the TAP in it along; this
        // covers a TAP that never got there.
        let _ = Command::new("ip")
            .args(["link", "del", &self.tap])
            .stderr(Stdio::null())
            .status();
    }
}

/// A python3 program running in the namespace.
struct Py(LineOutput);

impl Py {
    fn line(&self) -> String {
        self.0
            .line(Duration::from_secs(20), "output from the python3 program")
    }

    fn try_line(&self) -> Option<String> {
        self.0.try_line()
    }

    fn wait_ok(mut self) {
        assert!(self.0.wait_success());
    }
}

// ===== peer-side programs =====

// ===== frames =====

/// Verifies the IPv4 header and TCP/UDP checksums of an untagged frame.
fn check_ipv4(f: &[u8]) {
    assert_eq!(be16(f, 12), 0x0800);
    let ihl = usize::from(f[14] & 15) * 4;
    assert_eq!(
        ipv4_header_checksum(&f[14..14 + ihl]),
        0,
        "IPv4 header checksum"
    );
    assert_eq!(usize::from(be16(f, 16)), f.len() - 14, "IPv4 total length");
    let l4 = 14 + ihl;
    assert_eq!(
        l4_checksum(&f[26..30], &f[30..34], f[23], &f[l4..]),
        0,
        "L4 checksum"
    );
}

/// An Ethernet + IPv4 frame around transport bytes `l4` (whose checksum
/// field holds the pseudo-header sum: a partial checksum, `F_NEEDS_CSUM`).
fn ipv4_frame(
    dst: [u8; 6],
    src_ip: [u8; 4],
    dst_ip: [u8; 4],
    proto: u8,
    mut l4: Vec<u8>,
    id: u16,
) -> (VirtioNetHdr, Vec<u8>) {
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&GUEST_MAC);
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    let mut ip = vec![0x45, 0];
    ip.extend_from_slice(&((20 + l4.len()) as u16).to_be_bytes());
    ip.extend_from_slice(&id.to_be_bytes());
    ip.extend_from_slice(&[0x40, 0, 64, proto, 0, 0]);
    ip.extend_from_slice(&src_ip);
    ip.extend_from_slice(&dst_ip);
    let c = ipv4_header_checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    let csum_off = if proto == 6 { 16 } else { 6 };
    let pseudo = pseudo_header_checksum(&src_ip, &dst_ip, proto, l4.len() as u32);
    l4[csum_off..csum_off + 2].copy_from_slice(&pseudo.to_be_bytes());
    f.extend_from_slice(&l4);
    let hdr = VirtioNetHdr {
        flags: F_NEEDS_CSUM,
        csum_start: 34,
        csum_offset: csum_off as u16,
        hdr_len: 34 + if proto == 6 { 20 } else { 8 },
        ..VirtioNetHdr::default()
    };
    (hdr, f)
}

fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut u = Vec::new();
    u.extend_from_slice(&sport.to_be_bytes());
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(payload);
    u
}

fn tcp(
    sport: u16,
    dport: u16,
    seq: u32,
    ack: u32,
    flags: u8,
    opts: &[u8],
    payload: &[u8],
) -> Vec<u8> {
    let mut t = Vec::new();
    t.extend_from_slice(&sport.to_be_bytes());
    t.extend_from_slice(&dport.to_be_bytes());
    t.extend_from_slice(&seq.to_be_bytes());
    t.extend_from_slice(&ack.to_be_bytes());
    t.push((((20 + opts.len()) / 4) as u8) << 4);
    t.push(flags);
    t.extend_from_slice(&65535u16.to_be_bytes());
    t.extend_from_slice(&[0, 0, 0, 0]);
    t.extend_from_slice(opts);
    t.extend_from_slice(payload);
    t
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect()
}

/// Polls `rx_burst` until `stop` says so or the timeout passes.
fn poll(
    up: &mut Tap,
    timeout: Duration,
    mut f: impl FnMut(&mut Tap, &VirtioNetHdr, &[u8]) -> bool,
) {
    let end = Instant::now() + timeout;
    let mut frames: Vec<(VirtioNetHdr, Vec<u8>)> = Vec::new();
    while Instant::now() < end {
        frames.clear();
        let n = up
            .rx_burst(32, &mut |h, b| frames.push((*h, b.to_vec())))
            .expect("rx_burst");
        for (h, b) in &frames {
            if f(up, h, b) {
                return;
            }
        }
        if n == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    panic!("timed out waiting for frames");
}

// ===== tests =====

#[test]
#[ignore = "needs root: run scripts/test.sh"]
fn udp_both_ways() {
    let (fx, mut taps) = Fixture::new(1, false);
    let tap = &mut taps[0];
    tap.set_offloads(0).expect("set_offloads");
    assert_eq!(tap.offloads().rx, 0);
    let cap = fx.python(
        peers::CAPTURE_COUNT,
        &[fx.tap.clone(), "0x0800".into(), "1".into()],
    );
    let echo = fx.python(
        peers::UDP_ECHO,
        &[fx.host_ip_str(), "9000".into(), "1".into()],
    );
    let payload = pattern(1200, 7);
    // A complete frame (no offload metadata).
    let (h, mut f) = ipv4_frame(
        fx.host_mac(),
        fx.guest_ip(),
        fx.host_ip(),
        17,
        udp(5555, 9000, &payload),
        1,
    );
    complete_checksum(&h, &mut f).expect("checksum");
    check_ipv4(&f);
    tap.tx_push(&VirtioNetHdr::default(), &f).expect("tx_push");
    tap.tx_flush().expect("tx_flush");
    assert_eq!(hex(&cap.line()), f, "the frame crossed byte for byte");
    assert_eq!(hex(&echo.line()), payload, "the socket got the datagram");

    let mut reply = None;
    poll(tap, Duration::from_secs(10), |_, h, b| {
        if b.len() > 42 && be16(b, 12) == 0x0800 && b[23] == 17 && be16(b, 36) == 5555 {
            reply = Some((*h, b.to_vec()));
            true
        } else {
            false
        }
    });
    let (h, b) = reply.expect("reply");
    assert_eq!(
        h,
        VirtioNetHdr::default(),
        "no offloads enabled: no metadata"
    );
    check_ipv4(&b);
    assert_eq!(b[..6], GUEST_MAC);
    assert_eq!(b[30..34], fx.guest_ip());
    let mut rev = payload.clone();
    rev.reverse();
    assert_eq!(b[42..], rev[..]);
    echo.wait_ok();
    cap.wait_ok();
    let c = tap.counters();
    assert_eq!((c.tx_packets, c.tx_dropped()), (1, 0));
    assert!(c.rx_packets >= 1);
}

#[test]
#[ignore = "needs root: run scripts/test.sh"]
fn tcp_with_offloads() {
    let (fx, mut taps) = Fixture::new(1, false);
    let tap = &mut taps[0];
    let acked = bits::GUEST_CSUM | bits::GUEST_TSO4 | bits::GUEST_TSO6 | bits::GUEST_ECN;
    tap.set_offloads(acked).expect("set_offloads");
    assert_eq!(tap.offloads().rx, acked);
    let host_mac = fx.host_mac();
    let (g, h) = (fx.guest_ip(), fx.host_ip());

    const N_OUT: usize = 60_000; // from the namespace to us
    const N_IN: usize = 30_000; // from us, in one TSO super-frame
    let client = fx.python(
        peers::TCP_CLIENT,
        &[
            fx.guest_ip_str(),
            "7777".into(),
            N_OUT.to_string(),
            N_IN.to_string(),
        ],
    );

    // The handshake, by hand.
    let mut syn = None;
    poll(tap, Duration::from_secs(10), |_, _, b| {
        let is_syn = be16(b, 12) == 0x0800 && b[23] == 6 && be16(b, 36) == 7777 && b[47] == 0x02;
        if is_syn {
            syn = Some(b.to_vec());
        }
        is_syn
    });
    let syn = syn.expect("SYN");
    let cport = be16(&syn, 34);
    let c_isn = be32(&syn, 38);
    let s_isn = 0x1000_0000u32;
    let mss_opt = [2, 4, 0x05, 0xb4]; // MSS 1460
    let (sh, sf) = ipv4_frame(
        host_mac,
        g,
        h,
        6,
        tcp(
            7777,
            cport,
            s_isn,
            c_isn.wrapping_add(1),
            0x12,
            &mss_opt,
            &[],
        ),
        10,
    );
    // The SYN-ACK goes with a partial checksum: the TAP takes the offload.
    tap.tx_push(&sh, &sf).expect("SYN-ACK");

    // Receive the client's data (acknowledging it), then send ours.
    let mut stream = vec![0u8; N_OUT];
    let mut covered = vec![false; N_OUT];
    let mut supers = 0;
    let mut segmenter = Segmenter::new();
    let mut acked_upto = 0usize;
    let mut sent_ours = false;
    poll(tap, Duration::from_secs(20), |tap, hdr, b| {
        if !(be16(b, 12) == 0x0800 && b[23] == 6 && be16(b, 34) == cport) {
            return false;
        }
        let mut add = |s: &[u8]| {
            let doff = usize::from(s[46] >> 4) * 4;
            let p = &s[34 + doff..];
            let off = be32(s, 38).wrapping_sub(c_isn).wrapping_sub(1) as usize;
            if !p.is_empty() {
                stream[off..off + p.len()].copy_from_slice(p);
                covered[off..off + p.len()]
                    .iter_mut()
                    .for_each(|c| *c = true);
            }
        };
        if hdr.gso_type == GSO_TCPV4 {
            assert!(hdr.needs_csum(), "super-frames carry partial checksums");
            supers += 1;
            segmenter
                .segment(hdr, b, &mut |s| {
                    check_ipv4(s);
                    assert!(s.len() - 54 <= usize::from(hdr.gso_size));
                    add(s);
                    true
                })
                .expect("segment");
        } else {
            if hdr.needs_csum() {
                let mut c = b.to_vec();
                complete_checksum(hdr, &mut c).expect("complete");
                check_ipv4(&c);
            } else {
                check_ipv4(b);
            }
            add(b);
        }
        while acked_upto < N_OUT && covered[acked_upto] {
            acked_upto += 1;
        }
        let ack = c_isn.wrapping_add(1).wrapping_add(acked_upto as u32);
        if !sent_ours {
            // The first frame after the SYN-ACK acknowledges it: send our
            // data as one TSO super-frame.
            let data = pattern(N_IN, 3);
            let (mut dh, df) = ipv4_frame(
                host_mac,
                g,
                h,
                6,
                tcp(7777, cport, s_isn.wrapping_add(1), ack, 0x18, &[], &data),
                11,
            );
            dh.gso_type = GSO_TCPV4;
            dh.gso_size = 1460;
            tap.tx_push(&dh, &df).expect("TSO super-frame");
            sent_ours = true;
        } else {
            let (ah, af) = ipv4_frame(
                host_mac,
                g,
                h,
                6,
                tcp(
                    7777,
                    cport,
                    s_isn.wrapping_add(1 + N_IN as u32),
                    ack,
                    0x10,
                    &[],
                    &[],
                ),
                12,
            );
            tap.tx_push(&ah, &af).expect("ACK");
        }
        acked_upto == N_OUT
    });
    assert!(covered.iter().all(|&c| c), "the client's stream has holes");
    assert_eq!(
        stream,
        (0..N_OUT).map(|i| (i % 253) as u8).collect::<Vec<_>>()
    );
    assert!(supers > 0, "no GSO_TCPV4 super-frame from the kernel");
    // The client read our super-frame's payload.
    let got = loop {
        if let Some(l) = client.try_line() {
            break hex(&l);
        }
        tap.rx_burst(32, &mut |_, _| {}).expect("rx_burst");
        std::thread::sleep(Duration::from_millis(1));
    };
    assert_eq!(got, pattern(N_IN, 3), "our TSO super-frame's payload");
    client.wait_ok();
    eprintln!(
        "{supers} super-frames from the kernel; counters {:?}",
        tap.counters()
    );

    // USO: one datagram per gso_size for a UDP socket.
    let echo = fx.python(
        peers::UDP_ECHO,
        &[fx.host_ip_str(), "9001".into(), "5".into()],
    );
    let data = pattern(5 * 1000 - 300, 5);
    let (mut uh, uf) = ipv4_frame(host_mac, g, h, 17, udp(6000, 9001, &data), 13);
    uh.gso_type = GSO_UDP_L4;
    uh.gso_size = 1000;
    tap.tx_push(&uh, &uf).expect("USO super-frame");
    let mut all = Vec::new();
    for i in 0..5 {
        let d = hex(&echo.line());
        assert_eq!(d.len(), if i < 4 { 1000 } else { 700 });
        all.extend_from_slice(&d);
    }
    assert_eq!(all, data);
    echo.wait_ok();
    assert_eq!(tap.counters().tx_dropped(), 0);
}

#[test]
#[ignore = "needs root: run scripts/test.sh"]
fn multi_queue() {
    let (fx, mut taps) = Fixture::new(2, false);
    assert_eq!(taps[1].ifname(), taps[0].ifname());
    let cap = fx.python(
        peers::CAPTURE_COUNT,
        &[fx.tap.clone(), "0x88b5".into(), "2".into()],
    );
    let mut sent = Vec::new();
    for (i, tap) in taps.iter_mut().enumerate() {
        let mut f = vec![0xff; 6];
        f.extend_from_slice(&GUEST_MAC);
        f.extend_from_slice(&0x88b5u16.to_be_bytes());
        f.extend_from_slice(&pattern(100, i as u8));
        tap.tx_push(&VirtioNetHdr::default(), &f).expect("tx_push");
        sent.push(f);
    }
    let got = vec![hex(&cap.line()), hex(&cap.line())];
    assert_eq!(got, sent);
    cap.wait_ok();
}

/// Attaching to a TAP that exists already (persistent, made by `ip tuntap`)
/// works the same.
#[test]
#[ignore = "needs root: run scripts/test.sh"]
fn attach_to_existing_tap() {
    let (fx, mut taps) = Fixture::new(1, true);
    let tap = &mut taps[0];
    let echo = fx.python(
        peers::UDP_ECHO,
        &[fx.host_ip_str(), "9002".into(), "1".into()],
    );
    let (h, f) = ipv4_frame(
        fx.host_mac(),
        fx.guest_ip(),
        fx.host_ip(),
        17,
        udp(5556, 9002, b"attached"),
        2,
    );
    // A partial checksum: the kernel trusts it for local delivery.
    tap.tx_push(&h, &f).expect("tx_push");
    assert_eq!(hex(&echo.line()), b"attached");
    let mut back = false;
    poll(tap, Duration::from_secs(10), |_, _, b| {
        back = b.len() > 42 && b[23] == 17 && be16(b, 36) == 5556 && b[42..] == *b"dehcatta";
        back
    });
    echo.wait_ok();
}

/// `TapConfig::link_up` brings the device up.
#[test]
#[ignore = "needs root: run scripts/test.sh"]
fn link_up_option() {
    let name = format!("vtp{}up", std::process::id());
    let cfg = TapConfig {
        multi_queue: false,
        link_up: true,
    };
    let tap = Tap::open(&name, cfg).unwrap_or_else(|e| panic!("open TAP {name}: {e}"));
    let flags = std::fs::read_to_string(format!("/sys/class/net/{name}/flags")).expect("flags");
    let flags = u32::from_str_radix(flags.trim().trim_start_matches("0x"), 16).expect("flags");
    assert_ne!(flags & 1, 0, "IFF_UP");
    assert_eq!(tap.name(), format!("tap:{name}"));
    drop(tap);
    // A TAP this uplink created goes away with its last queue.
    assert!(!std::path::Path::new(&format!("/sys/class/net/{name}")).exists());
}
