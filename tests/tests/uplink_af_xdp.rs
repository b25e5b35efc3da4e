// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! End-to-end tests of the AF_XDP uplink over a veth pair.
//!
//! Each test makes its own network namespace and veth pair (names carry
//! the pid and a counter), with the AF_XDP end (`host`) in this process's
//! namespace and the peer end in the new one. The peer side is driven by
//! AF_PACKET sockets opened *inside* the namespace (a helper thread enters
//! it with `setns`, opens the socket and leaves; the socket stays bound to
//! the namespace). A drop guard deletes the pair and the namespace, also
//! when the test fails.
//!
//! Frames carry the local experimental EtherType 0x88B5, a magic word and a
//! sequence number, so stray traffic (IPv6 is disabled on both ends anyway)
//! cannot be mistaken for test frames.
//!
//! What is covered:
//!
//! * TX: frames pushed through `tx_push` arrive byte-exact in the peer
//!   namespace (native and generic attach); the size limit and the offload
//!   refusal; completions come back.
//! * RX: frames sent in the peer namespace come out of `rx_burst`
//!   byte-exact (native and generic attach), waking up on `rx_fd`.
//! * Zero-copy: `Try` on veth falls back to copy mode (veth has no XSK
//!   buffer pool: `EOPNOTSUPP`); `Require` fails with a clear error and
//!   leaves nothing attached.
//! * Detach: while the uplink lives `ip -d link` shows our program; after
//!   drop it shows no XDP program. A shared `XdpProgram` stays attached
//!   until its last socket is gone.
//! * Volume: about a thousand frames each way in bursts, through rings of
//!   64 entries and 128-frame pools (ring wrap, fill ring refill,
//!   completion reaping).
//!
//! # Running
//!
//! Root is needed (netns, veth, `bpf`, AF_XDP); the tests are `#[ignore]`d
//! for a plain `cargo test`. `scripts/test.sh` runs them with
//! `--include-ignored --test-threads=1`. A missing tool or capability is a
//! failure, never a skip.

use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use vhost_net_backend::io::af_xdp::{
    AfXdp, AfXdpConfig, AfXdpError, Attach, AttachMode, BindMode, XdpProgram, ZeroCopy,
};
use vhost_net_backend::io::Uplink;
use vhost_net_backend::net_hdr::{F_NEEDS_CSUM, GSO_TCPV4};
use vhost_net_backend::DropReason;
use vhost_net_backend::VirtioNetHdr;
use vhu_tests::netns::{mac_octets, run, VethPair};

/// Local experimental EtherType (IEEE 802 "local experimental 1").
const ETHERTYPE: u16 = 0x88b5;
const MAGIC: &[u8; 4] = b"vhuX";
const TIMEOUT: Duration = Duration::from_secs(5);

// ===== impl VethNs =====

/// A veth pair ([`VethPair`]) whose peer end is in a namespace of its own
/// and whose other end (`host`) stays here, IPv6 off on both. Deleted on
/// drop.
#[derive(Debug)]
struct VethNs {
    pair: VethPair,
    host: String,
    peer: String,
}

impl VethNs {
    /// A pair with one queue each way.
    fn new() -> Self {
        Self::with_queues(1)
    }

    /// A pair with `queues` RX and TX queues on each end.
    fn with_queues(queues: u32) -> Self {
        let pair = VethPair::with_queues(queues);
        // No IPv6 chatter (router solicitations, MLD) on either end.
        let _ = pair.set_host_ipv6(false);
        let _ = pair.set_peer_ipv6(false);
        Self {
            host: pair.host().to_owned(),
            peer: pair.peer().to_owned(),
            pair,
        }
    }

    fn host_mac(&self) -> [u8; 6] {
        mac_octets(&self.pair.host_mac())
    }

    /// `ip -d link show dev <host>`.
    fn link_details(&self) -> String {
        run(&["ip", "-d", "link", "show", "dev", &self.host])
    }

    /// An AF_PACKET socket on the peer end, receiving `ethertype` (0: send
    /// only).
    fn peer_socket(&self, ethertype: u16) -> PacketSocket {
        self.pair
            .ns()
            .in_ns(|| PacketSocket::open(&self.peer, ethertype))
    }
}

// ===== impl PacketSocket =====

/// A raw AF_PACKET socket bound to one interface (of the namespace of the
/// thread that opened it).
#[derive(Debug)]
struct PacketSocket {
    fd: OwnedFd,
}

impl PacketSocket {
    fn open(ifname: &str, ethertype: u16) -> Self {
        let name = std::ffi::CString::new(ifname).unwrap();
        // SAFETY: `name` is a valid C string for the call.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
        assert_ne!(
            ifindex,
            0,
            "no interface {ifname}: {}",
            io::Error::last_os_error()
        );
        let proto = ethertype.to_be();
        // SAFETY: plain syscall with integer arguments.
        let fd = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                i32::from(proto),
            )
        };
        assert!(fd >= 0, "AF_PACKET socket: {}", io::Error::last_os_error());
        // SAFETY: `socket` just returned this fd and nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: an all-zero sockaddr_ll is valid; fields set below.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = proto;
        sll.sll_ifindex = i32::try_from(ifindex).unwrap();
        // SAFETY: `sll` is a valid sockaddr_ll of the length passed.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                std::ptr::from_ref(&sll).cast::<libc::sockaddr>(),
                size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        assert_eq!(r, 0, "bind AF_PACKET: {}", io::Error::last_os_error());
        let rcvbuf: libc::c_int = 8 << 20;
        // SAFETY: `rcvbuf` is a valid int of the length passed.
        let r = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                std::ptr::from_ref(&rcvbuf).cast::<libc::c_void>(),
                size_of::<libc::c_int>() as u32,
            )
        };
        assert_eq!(r, 0, "SO_RCVBUFFORCE: {}", io::Error::last_os_error());
        Self { fd }
    }

    fn send(&self, frame: &[u8]) {
        // SAFETY: `frame` is valid for reads of its length.
        let n = unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                frame.as_ptr().cast::<libc::c_void>(),
                frame.len(),
                0,
            )
        };
        assert_eq!(
            n,
            frame.len() as isize,
            "AF_PACKET send: {}",
            io::Error::last_os_error()
        );
    }

    /// Receives one frame, waiting up to [`TIMEOUT`].
    fn recv(&self, buf: &mut [u8]) -> Option<usize> {
        self.recv_within(buf, TIMEOUT)
    }

    /// Receives one frame, waiting up to `timeout`.
    fn recv_within(&self, buf: &mut [u8], timeout: Duration) -> Option<usize> {
        if !wait_readable(self.fd.as_raw_fd(), timeout) {
            return None;
        }
        // SAFETY: `buf` is valid for writes of its length.
        let n = unsafe {
            libc::recv(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr().cast::<libc::c_void>(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        };
        assert!(n >= 0, "AF_PACKET recv: {}", io::Error::last_os_error());
        Some(n as usize)
    }
}

/// Waits until `fd` is readable; false on timeout.
fn wait_readable(fd: i32, timeout: Duration) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = i32::try_from(timeout.as_millis()).unwrap();
    // SAFETY: `p` is one valid pollfd.
    let r = unsafe { libc::poll(&raw mut p, 1, ms) };
    assert!(r >= 0, "poll: {}", io::Error::last_os_error());
    r > 0
}

// ===== frames =====

/// A test frame of `len` bytes (at least 22): Ethernet header, magic,
/// sequence number, then a pattern that depends on both.
fn frame(dst: [u8; 6], seq: u32, len: usize) -> Vec<u8> {
    let mut f = Vec::with_capacity(len);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&[0x02, 0x76, 0x68, 0x75, 0x00, 0x01]);
    f.extend_from_slice(&ETHERTYPE.to_be_bytes());
    f.extend_from_slice(MAGIC);
    f.extend_from_slice(&seq.to_be_bytes());
    let mut x = seq.wrapping_mul(2_654_435_761).wrapping_add(len as u32);
    while f.len() < len {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        f.push(x as u8);
    }
    f
}

/// The sequence number of a test frame; `None` for other traffic.
fn test_seq(f: &[u8]) -> Option<u32> {
    if f.len() >= 22 && f[12..14] == ETHERTYPE.to_be_bytes() && &f[14..18] == MAGIC {
        Some(u32::from_be_bytes(f[18..22].try_into().unwrap()))
    } else {
        None
    }
}

const BROADCAST: [u8; 6] = [0xff; 6];

/// TX sizes, from the minimum Ethernet frame to MTU + header + VLAN tag
/// (the most veth forwards).
const SIZES: [usize; 8] = [60, 64, 65, 128, 511, 1000, 1514, 1518];
/// RX sizes: AF_PACKET sends untagged frames up to MTU + header only.
const RX_SIZES: [usize; 7] = [60, 64, 65, 128, 511, 1000, 1514];

fn copy_cfg(attach: Attach) -> AfXdpConfig {
    AfXdpConfig {
        attach,
        zero_copy: ZeroCopy::Off,
        ..AfXdpConfig::default()
    }
}

fn expect_mode(x: &AfXdp, attach: Attach) {
    let want = match attach {
        Attach::Native => AttachMode::Native,
        Attach::Generic => AttachMode::Generic,
        Attach::Auto => return,
    };
    assert_eq!(x.program().mode(), want);
    assert_eq!(x.bind_mode(), BindMode::Copy);
}

/// Flushes until every TX frame is back from the completion ring.
fn wait_completions(x: &mut AfXdp, all: usize) {
    let deadline = Instant::now() + TIMEOUT;
    while x.tx_frames_free() < all {
        x.tx_flush().expect("tx_flush");
        assert!(
            Instant::now() < deadline,
            "completions missing: {} of {all} TX frames free",
            x.tx_frames_free()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(x.tx_frames_free(), all);
}

/// Receives `n` test frames through `rx_burst`, in bursts of up to
/// `burst`, waiting on `rx_fd` while the RX ring is empty; checks each
/// frame against `expected(seq)`. Returns the sequence numbers in order.
fn receive(x: &mut AfXdp, n: usize, burst: usize, expected: &dyn Fn(u32) -> Vec<u8>) -> Vec<u32> {
    let mut seqs = Vec::with_capacity(n);
    let mut bad = Vec::new();
    let deadline = Instant::now() + TIMEOUT;
    while seqs.len() < n {
        let got = x
            .rx_burst(burst, &mut |hdr, f| {
                assert_eq!(
                    *hdr,
                    VirtioNetHdr::default(),
                    "AF_XDP frames carry no offloads"
                );
                if let Some(seq) = test_seq(f) {
                    if f != expected(seq).as_slice() {
                        bad.push(seq);
                    }
                    seqs.push(seq);
                }
            })
            .expect("rx_burst");
        assert!(got <= burst);
        if got == 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "received {} of {n} frames; counters {:?}, kernel {:?}",
                seqs.len(),
                x.counters(),
                x.kernel_stats()
            );
            wait_readable(x.rx_fd(), left.min(Duration::from_millis(100)));
        }
    }
    assert!(bad.is_empty(), "frames with wrong content: {bad:?}");
    seqs
}

// ===== (a) TX =====

fn tx_reaches_peer(attach: Attach) {
    let net = VethNs::new();
    let cap = net.peer_socket(ETHERTYPE);
    let cfg = copy_cfg(attach);
    let mut x = AfXdp::open(&net.host, cfg).expect("open AF_XDP");
    expect_mode(&x, attach);
    assert_eq!(x.offloads(), Default::default());
    assert_eq!(x.tx_max_len(), 1518);

    let hdr = VirtioNetHdr::default();
    let frames: Vec<Vec<u8>> = SIZES
        .iter()
        .enumerate()
        .map(|(i, &len)| frame(BROADCAST, i as u32, len))
        .collect();
    for f in &frames {
        x.tx_push(&hdr, f).expect("tx_push");
    }
    x.tx_flush().expect("tx_flush");

    let mut buf = vec![0u8; 4096];
    for f in &frames {
        let n = cap.recv(&mut buf).unwrap_or_else(|| {
            panic!(
                "peer got no frame of {} bytes; counters {:?}, kernel {:?}",
                f.len(),
                x.counters(),
                x.kernel_stats()
            )
        });
        assert_eq!(
            &buf[..n],
            f.as_slice(),
            "frame of {} bytes differs",
            f.len()
        );
    }

    // Refused without being queued.
    let big = frame(BROADCAST, 99, 1519);
    assert_eq!(x.tx_push(&hdr, &big), Err(DropReason::TooLong));
    let csum = VirtioNetHdr {
        flags: F_NEEDS_CSUM,
        csum_start: 34,
        csum_offset: 16,
        ..hdr
    };
    assert_eq!(
        x.tx_push(&csum, &frames[0]),
        Err(DropReason::OffloadUnsupported)
    );
    let gso = VirtioNetHdr {
        gso_type: GSO_TCPV4,
        gso_size: 1448,
        hdr_len: 54,
        ..hdr
    };
    assert_eq!(
        x.tx_push(&gso, &frames[0]),
        Err(DropReason::OffloadUnsupported)
    );
    x.tx_flush().expect("tx_flush");
    let late = cap.recv_within(&mut buf, Duration::from_millis(200));
    assert!(
        late.is_none_or(|n| test_seq(&buf[..n]) != Some(99)),
        "refused frame was sent"
    );

    wait_completions(&mut x, (cfg.frames - cfg.frames / 2) as usize);
    let c = x.counters();
    assert_eq!(c.tx_packets, frames.len() as u64);
    assert_eq!(
        c.tx_bytes,
        frames.iter().map(|f| f.len() as u64).sum::<u64>()
    );
    // The oversized frame is a drop (counted by the uplink); the offload
    // refusals are the caller's to complete or count.
    assert_eq!(c.tx_drops.get(DropReason::TooLong), 1, "{c:?}");
    assert_eq!(c.tx_dropped(), 1, "{c:?}");
}

vhu_tests::ignored_tests! {
    "needs root: run scripts/test.sh";
    tx_reaches_peer_native => tx_reaches_peer(Attach::Native);
    tx_reaches_peer_generic => tx_reaches_peer(Attach::Generic);
}

// ===== (b) RX =====

fn rx_from_peer(attach: Attach) {
    let net = VethNs::new();
    let mut x = AfXdp::open(&net.host, copy_cfg(attach)).expect("open AF_XDP");
    expect_mode(&x, attach);
    let tx = net.peer_socket(0);
    let mac = net.host_mac();
    let expected = |seq: u32| frame(mac, seq, RX_SIZES[seq as usize % RX_SIZES.len()]);
    for seq in 0..RX_SIZES.len() as u32 {
        tx.send(&expected(seq));
    }
    let seqs = receive(&mut x, RX_SIZES.len(), 32, &expected);
    assert_eq!(seqs, (0..RX_SIZES.len() as u32).collect::<Vec<_>>());
    let c = x.counters();
    assert!(c.rx_packets >= RX_SIZES.len() as u64, "{c:?}");
    assert_eq!(c.rx_dropped(), 0, "{c:?}");
}

vhu_tests::ignored_tests! {
    "needs root: run scripts/test.sh";
    rx_from_peer_native => rx_from_peer(Attach::Native);
    rx_from_peer_generic => rx_from_peer(Attach::Generic);
}

// ===== (c) zero-copy =====

/// Opens an AF_XDP socket on the host end of `net` asking for zero-copy as `zero_copy` says,
/// attached as `attach`; everything else as by default.
fn open_zero_copy(net: &VethNs, zero_copy: ZeroCopy, attach: Attach) -> Result<AfXdp, AfXdpError> {
    let cfg = AfXdpConfig {
        zero_copy,
        attach,
        ..AfXdpConfig::default()
    };
    AfXdp::open(&net.host, cfg)
}

#[test]
#[ignore = "needs root: run scripts/test.sh"]
fn zero_copy_try_falls_back_to_copy_on_veth() {
    let net = VethNs::new();
    let mut x =
        open_zero_copy(&net, ZeroCopy::Try, Attach::Native).expect("Try must fall back, not fail");
    assert_eq!(x.bind_mode(), BindMode::Copy);
    let why = x.zero_copy_error().expect("the fallback reason is kept");
    assert_eq!(why.raw_os_error(), Some(libc::EOPNOTSUPP), "{why}");

    // And the fallback socket works.
    let tx = net.peer_socket(0);
    let mac = net.host_mac();
    tx.send(&frame(mac, 7, 100));
    let seqs = receive(&mut x, 1, 8, &|seq| frame(mac, seq, 100));
    assert_eq!(seqs, [7]);
}

#[test]
#[ignore = "needs root: run scripts/test.sh"]
fn zero_copy_require_fails_clearly_on_veth() {
    let net = VethNs::new();
    let err = open_zero_copy(&net, ZeroCopy::Require, AfXdpConfig::default().attach)
        .expect_err("veth cannot do zero-copy");
    assert!(
        matches!(&err, AfXdpError::ZeroCopyUnsupported { ifname, queue_id: 0, source }
            if ifname == &net.host && source.raw_os_error() == Some(libc::EOPNOTSUPP)),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains(&net.host) && msg.contains("zero-copy"),
        "{msg}"
    );
    // The program attached for the attempt is gone with it.
    let details = net.link_details();
    assert!(
        !details.contains("prog/xdp"),
        "XDP left attached:\n{details}"
    );
}

// ===== (d) detach on drop =====

fn detaches_on_drop(attach: Attach, keyword: &str) {
    let net = VethNs::new();
    let x = AfXdp::open(&net.host, copy_cfg(attach)).expect("open AF_XDP");
    let id = x.program().prog_id();
    assert_ne!(id, 0);
    let details = net.link_details();
    assert!(
        details.contains(&format!("prog/xdp id {id} ")),
        "program {id} not shown:\n{details}"
    );
    assert!(
        details.split_whitespace().any(|w| w == keyword),
        "not attached as {keyword}:\n{details}"
    );
    drop(x);
    let details = net.link_details();
    assert!(
        !details.contains("prog/xdp") && !details.contains(" xdp"),
        "XDP still attached after drop:\n{details}"
    );
}

vhu_tests::ignored_tests! {
    "needs root: run scripts/test.sh";
    native_program_detaches_on_drop => detaches_on_drop(Attach::Native, "xdp");
    generic_program_detaches_on_drop => detaches_on_drop(Attach::Generic, "xdpgeneric");
}

#[test]
#[ignore = "needs root: run scripts/test.sh"]
fn shared_program_serves_two_queues_and_detaches_after_the_last() {
    let net = VethNs::with_queues(2);
    let prog = XdpProgram::attach(&net.host, Attach::Native).expect("attach");
    let cfg = |q| AfXdpConfig {
        queue_id: q,
        ..copy_cfg(Attach::Native)
    };
    let mut q0 = AfXdp::open_with_program(&prog, cfg(0)).expect("queue 0");
    let q1 = AfXdp::open_with_program(&prog, cfg(1)).expect("queue 1");
    assert_eq!(q0.program().prog_id(), q1.program().prog_id());
    assert_ne!(q0.name(), q1.name());
    // A second socket on a taken queue is refused by the kernel.
    let dup = AfXdp::open_with_program(&prog, cfg(1)).expect_err("queue 1 is taken");
    assert!(
        matches!(dup, AfXdpError::Bind { queue_id: 1, .. }),
        "{dup:?}"
    );
    let id = prog.prog_id();
    drop(prog);

    // Traffic still flows on the remaining sockets.
    let cap = net.peer_socket(ETHERTYPE);
    let f = frame(BROADCAST, 5, 200);
    q0.tx_push(&VirtioNetHdr::default(), &f).expect("tx_push");
    q0.tx_flush().expect("tx_flush");
    let mut buf = vec![0u8; 2048];
    let n = cap.recv(&mut buf).expect("peer frame");
    assert_eq!(&buf[..n], f.as_slice());

    drop(q0);
    let details = net.link_details();
    assert!(details.contains(&format!("prog/xdp id {id} ")), "{details}");
    drop(q1);
    let details = net.link_details();
    assert!(!details.contains("prog/xdp"), "{details}");
}

// ===== (e) volume =====

/// Small rings and pools, so a thousand frames wrap every ring many times.
fn small_cfg(attach: Attach) -> AfXdpConfig {
    AfXdpConfig {
        frames: 256,
        fill_size: 64,
        comp_size: 64,
        rx_size: 64,
        tx_size: 64,
        ..copy_cfg(attach)
    }
}

const ROUNDS: u32 = 20;
const PER_ROUND: u32 = 48;

fn tx_bursts(attach: Attach) {
    let net = VethNs::new();
    let cap = net.peer_socket(ETHERTYPE);
    let cfg = small_cfg(attach);
    let mut x = AfXdp::open(&net.host, cfg).expect("open AF_XDP");
    let hdr = VirtioNetHdr::default();
    let len_of = |seq: u32| 60 + (seq as usize * 37) % 1400;
    let mut buf = vec![0u8; 4096];
    let mut sent = 0u64;
    for round in 0..ROUNDS {
        for i in 0..PER_ROUND {
            let seq = round * PER_ROUND + i;
            let f = frame(BROADCAST, seq, len_of(seq));
            x.tx_push(&hdr, &f)
                .unwrap_or_else(|e| panic!("tx_push {seq}: {e}"));
            sent += f.len() as u64;
        }
        x.tx_flush().expect("tx_flush");
        for i in 0..PER_ROUND {
            let seq = round * PER_ROUND + i;
            let n = cap
                .recv(&mut buf)
                .unwrap_or_else(|| panic!("frame {seq} missing; counters {:?}", x.counters()));
            assert_eq!(test_seq(&buf[..n]), Some(seq));
            assert_eq!(&buf[..n], frame(BROADCAST, seq, len_of(seq)).as_slice());
        }
    }
    // More frames went out than the pool holds: completions were reaped.
    let pool = (cfg.frames - cfg.frames / 2) as usize;
    assert!((ROUNDS * PER_ROUND) as usize > pool * 4);
    wait_completions(&mut x, pool);
    let c = x.counters();
    assert_eq!(c.tx_packets, u64::from(ROUNDS * PER_ROUND));
    assert_eq!(c.tx_bytes, sent);
    assert_eq!(c.tx_dropped(), 0, "{c:?}");
}

fn rx_bursts(attach: Attach) {
    let net = VethNs::new();
    let cfg = small_cfg(attach);
    let mut x = AfXdp::open(&net.host, cfg).expect("open AF_XDP");
    let tx = net.peer_socket(0);
    let mac = net.host_mac();
    let expected = |seq: u32| frame(mac, seq, 60 + (seq as usize * 53) % 1400);
    let mut all = Vec::new();
    for round in 0..ROUNDS {
        for i in 0..PER_ROUND {
            tx.send(&expected(round * PER_ROUND + i));
        }
        // Bursts of 16: several rx_burst calls per round.
        all.extend(receive(&mut x, PER_ROUND as usize, 16, &expected));
    }
    assert_eq!(all, (0..ROUNDS * PER_ROUND).collect::<Vec<_>>());
    assert!(
        all.len() > cfg.frames as usize * 2,
        "the RX pool was recycled"
    );
    let c = x.counters();
    assert_eq!(c.rx_dropped(), 0, "{c:?}");
    assert!(c.rx_packets >= u64::from(ROUNDS * PER_ROUND));
}

vhu_tests::ignored_tests! {
    "needs root: run scripts/test.sh";
    tx_bursts_native => tx_bursts(Attach::Native);
    tx_bursts_generic => tx_bursts(Attach::Generic);
    rx_bursts_native => rx_bursts(Attach::Native);
    rx_bursts_generic => rx_bursts(Attach::Generic);
}

// ===== errors =====

#[test]
fn missing_interface_is_a_clear_error() {
    let err = AfXdp::open("vhu-nonexist0", AfXdpConfig::default()).expect_err("no such interface");
    assert!(matches!(err, AfXdpError::Interface { .. }), "{err:?}");
    assert_eq!(err.to_string(), "af_xdp vhu-nonexist0: no such interface");
}
