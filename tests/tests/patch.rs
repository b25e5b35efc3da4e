// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! End-to-end tests of the `patch` example: a vhost-user port wired to an
//! uplink (AF_XDP, AF_PACKET, TAP), with a real frontend on one side and a
//! real kernel stack in a throwaway network namespace on the other.
//!
//! ```text
//!  QEMU guest (10.0.0.2)                                     netns (10.0.0.1)
//!  or testpmd virtio-user --vhost-user--> patch --uplink--> veth peer / TAP
//!                                                             kernel stack,
//!                                                             python peers
//! ```
//!
//! * **Guest** (`vhu.test=net` in `scripts/guest-init.sh`): ARP and ICMP
//!   echo answered by the peer's stack; a UDP file exchange both ways (TFTP,
//!   against a Python server in the namespace) with sha256 compared on both
//!   ends; TCP streams of 64 MiB from the guest (random data from tmpfs,
//!   hashed by the guest and by the Python sink) and back from the peer.
//! * **Offloads**: the guest acks checksum and TSO offloads, so it sends
//!   64 KiB TSO super-frames. With AF_XDP `patch` segments them in software;
//!   with AF_PACKET the kernel does (the host veth end has TSO, GSO and TX
//!   checksumming off, so they are segmented before the veth). The peer's
//!   veth end has RX checksumming off, so its stack verifies every checksum
//!   instead of trusting the sender; that it does is checked first, with a
//!   frame whose UDP checksum is wrong. Back towards the guest, AF_PACKET
//!   hands super-frames to a guest that acked `GUEST_TSO4` as they are, and
//!   `patch` segments them (and completes partial checksums) for a guest
//!   that did not (`-global virtio-net-pci.guest_tso4=off,...`).
//! * **testpmd** (virtio-user): an exact number of UDP frames from
//!   `start tx_first` reach a UDP socket in the namespace, then a `txonly`
//!   blast shows up in the peer interface's counters.
//! * **Zero-copy on veth**: `--zero-copy require` exits with a clear error,
//!   `--zero-copy try` logs the fallback to copy mode.
//!
//! AF_XDP carries no checksum metadata: the veth peer sends with TX
//! checksumming off, or its partial checksums would reach the guest
//! unfinished (see the `patch` docs).
//!
//! Root and the peers are required; the tests are `#[ignore]`d for a plain
//! `cargo test` and `scripts/test.sh` runs them one at a time. The `patch`
//! binary is `$VHU_PATCH_BIN`, or `release/examples/patch` in the target
//! directory (`cargo build --release --examples`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use vhu_tests::netns::{
    self, Netns, NsProcess, VethPair, ETHTOOL_SGSO, ETHTOOL_SRXCSUM, ETHTOOL_STSO, ETHTOOL_STXCSUM,
};
use vhu_tests::process::RunDir;
use vhu_tests::qemu::{self, GuestOpts, GuestRun};
use vhu_tests::testpmd::{FrontendOpts, Testpmd, LINK_TIMEOUT, READY_TIMEOUT};
use vhu_tests::uplink::{Kind, PeerEnd};
use vhu_tests::{bins, peers};

/// The peer's address (guest tests).
const PEER_IP: &str = "10.0.0.1";
/// The guest's address.
const GUEST_IP: &str = "10.0.0.2";
/// The peer's address in testpmd tests: testpmd's `txonly` frames go from
/// 198.18.0.1 to 198.18.0.2, UDP port 9 to 9.
const TXONLY_DST: &str = "198.18.0.2";
const TFTP_PORT: u16 = 6969;
const SINK_PORT: u16 = 5001;
const SOURCE_PORT: u16 = 5002;
/// How long `patch` may take to create its socket or exit.
const PATCH_TIMEOUT: Duration = Duration::from_secs(10);
/// A whole guest run (boot ~8 s, the transfers ~10 s under TCG here).
const GUEST_TIMEOUT: Duration = Duration::from_secs(300);

/// virtio-net feature bits the tests look at.
const F_GUEST_CSUM: u64 = 1 << 1;
const F_GUEST_TSO4: u64 = 1 << 7;
const F_HOST_TSO4: u64 = 1 << 11;

// ===== the patch process =====

/// The `patch` binary (see the module doc).
fn patch_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("VHU_PATCH_BIN") {
        return PathBuf::from(bin);
    }
    // CARGO_TARGET_TMPDIR is <target>/tmp: its parent is the target
    // directory this test was built in.
    let mut candidates = vec![Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target dir")
        .join("release/examples/patch")];
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        candidates.push(PathBuf::from(dir).join("release/examples/patch"));
    }
    candidates.push(qemu::workspace_root().join("target/release/examples/patch"));
    bins::built_example(
        "patch",
        &candidates,
        "cargo build --release --examples",
        "VHU_PATCH_BIN",
    )
}

/// A running `patch`; killed when dropped (its logs are printed if that
/// happens during a panic).
struct Patch {
    proc: NsProcess,
    args: Vec<String>,
    done: bool,
}

/// What `patch` printed on exit.
#[derive(Debug)]
struct PatchOutput {
    status: ExitStatus,
    stdout: String,
    stderr: String,
    /// `qp0.tx_packets`, `uplink.tx_packets`, `patch.tx_gso`, ...
    counters: BTreeMap<String, u64>,
}

impl PatchOutput {
    fn get(&self, key: &str) -> u64 {
        *self
            .counters
            .get(key)
            .unwrap_or_else(|| panic!("patch printed no {key}\n{self}"))
    }
}

impl std::fmt::Display for PatchOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        bins::fmt_output(f, "patch", &self.status, &self.stdout, &self.stderr)
    }
}

/// Parses patch's exit lines into `qp<N>.key`, `uplink.key`, `patch.key`.
fn parse_patch_counters(stdout: &str) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for line in stdout.lines() {
        let mut toks = line.split_whitespace();
        let Some(first) = toks.next() else { continue };
        let prefix = if let Some(qp) = first.strip_prefix("qp=") {
            format!("qp{qp}")
        } else if first.starts_with("uplink=") {
            "uplink".to_owned()
        } else if first == "patch" {
            "patch".to_owned()
        } else {
            continue;
        };
        for tok in toks {
            if let Some((k, v)) = tok.split_once('=') {
                if let Ok(v) = v.parse() {
                    m.insert(format!("{prefix}.{k}"), v);
                }
            }
        }
    }
    m
}

impl Patch {
    /// Starts `patch --socket SOCKET --uplink UPLINK EXTRA...` and waits for
    /// its socket.
    fn spawn(socket: &Path, uplink: &str, extra: &[&str]) -> Self {
        let mut args = vec![
            "--socket".to_owned(),
            socket.display().to_string(),
            "--uplink".to_owned(),
            uplink.to_owned(),
        ];
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        let mut cmd = Command::new(patch_bin());
        cmd.args(&args);
        let mut me = Self {
            proc: NsProcess::spawn(cmd, format!("patch {}", args.join(" "))),
            args,
            done: false,
        };
        let deadline = Instant::now() + PATCH_TIMEOUT;
        while !socket.exists() {
            if !me.proc.is_running() {
                let status = me.proc.wait(PATCH_TIMEOUT);
                me.fail(&format!("exited ({status}) before creating its socket"));
            }
            if Instant::now() >= deadline {
                me.fail("did not create its socket");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        me
    }

    fn fail(&mut self, msg: &str) -> ! {
        self.done = true;
        panic!(
            "patch {}: {msg}\n{}",
            self.args.join(" "),
            self.proc.describe()
        )
    }

    fn log(&self) -> String {
        self.proc.stderr()
    }

    /// Waits until the log contains `needle`.
    fn wait_log(&mut self, needle: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while !self.log().contains(needle) {
            if Instant::now() >= deadline {
                self.fail(&format!("logged no {needle:?} within {timeout:?}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, then the exit status and counters.
    fn stop(mut self) -> PatchOutput {
        self.proc.signal("TERM");
        let status = self.proc.wait(PATCH_TIMEOUT);
        self.done = true;
        let stdout = self.proc.stdout();
        PatchOutput {
            status,
            counters: parse_patch_counters(&stdout),
            stdout,
            stderr: self.proc.stderr(),
        }
    }
}

impl Drop for Patch {
    fn drop(&mut self) {
        self.proc.kill();
        if std::thread::panicking() && !self.done {
            eprintln!("patch {}:\n{}", self.args.join(" "), self.proc.describe());
        }
    }
}

// ===== the peer side =====

/// Sets up the peer for `kind`, starts `patch` on `socket`, and gives the
/// peer interface `addrs`.
///
/// * AF_XDP: veth; the peer sends complete checksums (TX checksumming off)
///   and verifies what it receives (RX checksumming off).
/// * AF_PACKET: veth; the host end cannot segment or checksum (TSO, GSO,
///   TX checksumming off), so the kernel segments the guest's super-frames
///   in software before the veth; the peer verifies checksums.
/// * TAP: `patch` creates the TAP, the test moves it into the namespace.
fn attach(kind: Kind, socket: &Path, extra: &[&str], addrs: &[&str]) -> (PeerEnd, Patch) {
    let (link, patch) = match kind {
        Kind::AfXdp | Kind::AfPacket => {
            let v = VethPair::new();
            let mut peer_cmds = vec![(ETHTOOL_SRXCSUM, 0)];
            if kind == Kind::AfXdp {
                peer_cmds.push((ETHTOOL_STXCSUM, 0));
            } else {
                netns::ethtool(
                    v.host(),
                    &[(ETHTOOL_STSO, 0), (ETHTOOL_SGSO, 0), (ETHTOOL_STXCSUM, 0)],
                );
            }
            v.ns().ethtool(v.peer(), &peer_cmds);
            let uplink = format!("{}:{}", kind.name(), v.host());
            let patch = Patch::spawn(socket, &uplink, extra);
            (PeerEnd::Veth(v), patch)
        }
        Kind::Tap => {
            let ns = Netns::new();
            let name = netns::unique_ifname("t");
            let mut patch = Patch::spawn(socket, &format!("tap:{name}"), extra);
            let sys = PathBuf::from(format!("/sys/class/net/{name}"));
            let deadline = Instant::now() + PATCH_TIMEOUT;
            while !sys.exists() {
                if Instant::now() >= deadline {
                    patch.fail(&format!("TAP {name} did not appear"));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            netns::run(&["ip", "link", "set", &name, "netns", ns.name()]);
            ns.exec(&["ip", "link", "set", &name, "up"]);
            (PeerEnd::Tap { ns, name }, patch)
        }
    };
    for a in addrs {
        link.ns()
            .exec(&["ip", "addr", "add", a, "dev", link.ifname()]);
    }
    (link, patch)
}

/// Sends one UDP frame with a wrong checksum from the host veth end to the
/// peer's address (no socket listens) and asserts that the peer's stack
/// counted a checksum error: it verifies checksums rather than trusting
/// the veth.
fn assert_peer_verifies_checksums(v: &VethPair) {
    let before = v.ns().snmp();
    netns::run(&[
        "python3",
        "-c",
        peers::UDP_BAD_CSUM,
        v.host(),
        &v.peer_mac(),
        GUEST_IP,
        PEER_IP,
    ]);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let after = v.ns().snmp();
        if delta(&before, &after, "Udp.InCsumErrors") == 1 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the peer's stack did not count the bad UDP checksum: it does not verify \
             checksums, so the checksum checks of these tests would prove nothing \
             (before {before:?}, after {after:?})"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn delta(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>, key: &str) -> u64 {
    let get = |m: &BTreeMap<String, u64>| m.get(key).copied().unwrap_or(0);
    get(after).saturating_sub(get(before))
}

// ===== guest tests =====

/// What a guest test asks for.
struct GuestNet {
    /// MiB the guest sends.
    tx_mib: u32,
    /// MiB the peer sends to the guest.
    rx_mib: u32,
    /// QEMU arguments (e.g. `-global` feature switches).
    qemu_args: Vec<String>,
}

/// The results of a guest test.
struct GuestNetRun {
    run: GuestRun,
    peer: BTreeMap<String, String>,
    patch: PatchOutput,
    /// Peer interface counters: before the guest booted and after it
    /// powered off.
    peer_before: netns::LinkStats,
    peer_after: netns::LinkStats,
    /// The peer namespace's SNMP counters over the run.
    snmp_before: BTreeMap<String, u64>,
    snmp_after: BTreeMap<String, u64>,
    elapsed: Duration,
}

/// Boots a guest against `patch` on a `kind` uplink and runs
/// `vhu.test=net` with every exchange on; checks what every uplink must
/// pass and returns the rest for the caller to judge.
fn guest_net(kind: Kind, t: GuestNet) -> GuestNetRun {
    let started = Instant::now();
    let dir = RunDir::new("patch-guest");
    let socket = dir.join("vhost.sock");
    let (link, patch) = attach(kind, &socket, &[], &[&format!("{PEER_IP}/24")]);
    if let PeerEnd::Veth(v) = &link {
        assert_peer_verifies_checksums(v);
    }
    let mut peer = link.ns().spawn_python(
        peers::GUEST_PEER,
        &[
            PEER_IP,
            &TFTP_PORT.to_string(),
            &SINK_PORT.to_string(),
            GUEST_IP,
            &SOURCE_PORT.to_string(),
            &t.rx_mib.to_string(),
        ],
    );
    peer.wait_for_stdout("PEER ready", Duration::from_secs(30));
    let peer_mac = link.ns().mac(link.ifname());
    let peer_before = link.stats();
    let snmp_before = link.ns().snmp();

    let run = qemu::run_guest(GuestOpts {
        mem_mib: 512,
        cmdline_extra: format!(
            "vhu.test=net vhu.ip={GUEST_IP}/24 vhu.peer={PEER_IP} vhu.pings=5 vhu.size=1000 \
             vhu.tftp_port={TFTP_PORT} vhu.tftp_kib=256 vhu.tx_port={SINK_PORT} \
             vhu.tx_mib={} vhu.rx_port={SOURCE_PORT} vhu.timeout=150",
            t.tx_mib
        ),
        timeout: GUEST_TIMEOUT,
        extra_args: t.qemu_args,
        ..GuestOpts::new(&socket)
    });
    // The source reports once it closed; the guest may power off first.
    peer.wait_for_stdout("PEER tcp_source_", Duration::from_secs(10));
    let peer_after = link.stats();
    let snmp_after = link.ns().snmp();
    let peer_res = peer.results("PEER ");
    let patch = patch.stop();
    let r = GuestNetRun {
        run,
        peer: peer_res,
        patch,
        peer_before,
        peer_after,
        snmp_before,
        snmp_after,
        elapsed: started.elapsed(),
    };
    r.check_common(kind, &peer_mac, t.tx_mib, t.rx_mib);
    r
}

impl GuestNetRun {
    fn describe(&self) -> String {
        format!(
            "{}\n--- peer ---\n{:?}\n{}",
            self.run.describe(),
            self.peer,
            self.patch
        )
    }

    fn guest(&self, key: &str) -> &str {
        self.run
            .get(key)
            .unwrap_or_else(|| panic!("guest printed no {key}\n{}", self.describe()))
    }

    fn peer(&self, key: &str) -> &str {
        self.peer
            .get(key)
            .map(String::as_str)
            .unwrap_or_else(|| panic!("peer printed no {key}\n{}", self.describe()))
    }

    fn check_eq(&self, what: &str, a: &str, b: &str) {
        assert!(a == b, "{what}: {a} != {b}\n{}", self.describe());
    }

    /// [`Self::check_eq`] of what the guest printed for `guest_key` and the peer for
    /// `peer_key`.
    fn guest_matches_peer(&self, what: &str, guest_key: &str, peer_key: &str) {
        self.check_eq(what, self.guest(guest_key), self.peer(peer_key));
    }

    fn check(&self, what: &str, ok: bool) {
        assert!(ok, "{what}\n{}", self.describe());
    }

    /// [`Self::check`] that patch counted some `key`.
    fn check_some(&self, what: &str, key: &str) {
        self.check(what, self.patch.get(key) > 0);
    }

    /// [`Self::check`] that patch counted no `key`.
    fn check_none(&self, what: &str, key: &str) {
        self.check(what, self.patch.get(key) == 0);
    }

    fn check_common(&self, kind: Kind, peer_mac: &str, tx_mib: u32, rx_mib: u32) {
        let d = |k: &str| self.describe_kv(k);
        // ARP and ICMP.
        self.check_eq("pings answered", self.guest("ping_received"), "5");
        self.check_eq("pings sent", self.guest("ping_sent"), "5");
        self.check_eq("ARP resolved the peer", self.guest("peer_mac"), peer_mac);
        // UDP, both ways.
        for (what, key) in [
            ("TFTP get sha256", "tftp_get_sha256"),
            ("TFTP get length", "tftp_get_bytes"),
            ("TFTP put sha256", "tftp_put_sha256"),
        ] {
            self.guest_matches_peer(what, key, key);
        }
        // TCP, guest to peer: the guest's hash, the sink's as it answered
        // the guest, and the sink's own report.
        let tx_bytes = (u64::from(tx_mib) << 20).to_string();
        self.check_eq("TCP TX length", self.guest("tcp_tx_bytes"), &tx_bytes);
        self.check_eq(
            "TCP TX length at the peer",
            self.peer("tcp_sink_bytes"),
            &tx_bytes,
        );
        for (what, key) in [
            ("TCP TX sha256 (guest vs sink)", "tcp_tx_sha256"),
            (
                "TCP TX sha256 (as the sink answered the guest)",
                "tcp_tx_peer_sha256",
            ),
        ] {
            self.guest_matches_peer(what, key, "tcp_sink_sha256");
        }
        // TCP, peer to guest.
        let rx_bytes = (u64::from(rx_mib) << 20).to_string();
        self.check_eq("TCP RX length", self.guest("tcp_rx_bytes"), &rx_bytes);
        self.guest_matches_peer(
            "TCP RX sha256 (source vs guest)",
            "tcp_rx_sha256",
            "tcp_source_sha256",
        );
        // The peer's stack saw no bad checksum or header (veth peers verify
        // every checksum: see assert_peer_verifies_checksums).
        for key in [
            "Tcp.InCsumErrors",
            "Udp.InCsumErrors",
            "Ip.InHdrErrors",
            "Tcp.InErrs",
        ] {
            self.check(
                &format!("peer counted {key}: {}", d(key)),
                delta(&self.snmp_before, &self.snmp_after, key) == 0,
            );
        }
        self.check(
            &format!("patch exit status {}", self.patch.status),
            self.patch.status.success(),
        );
        eprintln!(
            "{}: guest run {:.1} s (test {:.1} s); TCP TX {tx_mib} MiB in {} ms (sink {} s), \
             RX {rx_mib} MiB in {} ms; peer iface rx +{} tx +{}; patch: {}",
            kind.name(),
            self.run.elapsed.as_secs_f64(),
            self.elapsed.as_secs_f64(),
            self.guest("tcp_tx_ms"),
            self.peer("tcp_sink_secs"),
            self.guest("tcp_rx_ms"),
            self.peer_after.rx_packets - self.peer_before.rx_packets,
            self.peer_after.tx_packets - self.peer_before.tx_packets,
            self.patch.stdout.lines().collect::<Vec<_>>().join(" | ")
        );
    }

    fn describe_kv(&self, key: &str) -> String {
        format!(
            "{} -> {}",
            self.snmp_before.get(key).copied().unwrap_or(0),
            self.snmp_after.get(key).copied().unwrap_or(0)
        )
    }

    /// Frames the peer interface received during the run.
    fn peer_rx(&self) -> u64 {
        self.peer_after.rx_packets - self.peer_before.rx_packets
    }

    fn features(&self) -> u64 {
        self.run.features()
    }
}

/// Wire-size segments a TCP transfer of `mib` MiB needs at least (MSS 1448
/// with timestamps).
fn min_segments(mib: u32) -> u64 {
    (u64::from(mib) << 20) / 1448
}

#[test]
#[ignore = "needs root and peers: run scripts/test.sh"]
fn af_xdp_guest_reaches_peer_stack_with_software_segmentation() {
    let r = guest_net(
        Kind::AfXdp,
        GuestNet {
            tx_mib: 64,
            rx_mib: 16,
            qemu_args: Vec::new(),
        },
    );
    r.check(
        "guest acked HOST_TSO4 (it sends super-frames)",
        r.features() & F_HOST_TSO4 != 0,
    );
    let p = &r.patch;
    // The guest's super-frames were segmented by patch, in software...
    r.check(
        "patch segmented guest super-frames",
        p.get("patch.tx_sw_segmented") > 0
            && p.get("patch.tx_gso") == p.get("patch.tx_sw_segmented"),
    );
    r.check(
        "software segments",
        p.get("patch.tx_sw_segments") >= 2 * p.get("patch.tx_sw_segmented"),
    );
    r.check_none("no offload errors", "patch.tx_offload_errors");
    // ...every frame accounted for: the guest's plain frames plus the
    // segments went to the uplink...
    let (sent, gso) = (p.get("qp0.tx_packets"), p.get("patch.tx_sw_segmented"));
    let uplink_tx = p.get("uplink.tx_packets");
    r.check(
        "uplink frames = guest frames - super-frames + segments",
        uplink_tx == sent - gso + p.get("patch.tx_sw_segments"),
    );
    // ...and arrived as wire-size frames with valid checksums (the peer
    // verifies them).
    r.check(
        &format!(
            "peer received {} frames of the uplink's {uplink_tx}, for a 64 MiB stream",
            r.peer_rx()
        ),
        r.peer_rx() * 100 >= uplink_tx * 99 && r.peer_rx() >= min_segments(64),
    );
}

#[test]
#[ignore = "needs root and peers: run scripts/test.sh"]
fn af_packet_guest_reaches_peer_stack_and_gets_super_frames() {
    let r = guest_net(
        Kind::AfPacket,
        GuestNet {
            tx_mib: 64,
            rx_mib: 64,
            qemu_args: Vec::new(),
        },
    );
    let f = r.features();
    r.check(
        "guest acked HOST_TSO4 and GUEST_TSO4",
        f & F_HOST_TSO4 != 0 && f & F_GUEST_TSO4 != 0,
    );
    let p = &r.patch;
    // Super-frames went to the kernel as such, which segmented them (the
    // host veth end cannot): the peer received wire-size frames.
    r.check_some("guest super-frames handed to AF_PACKET", "patch.tx_gso");
    r.check_none("no software segmentation on TX", "patch.tx_sw_segmented");
    // Each super-frame became at least two frames on the wire.
    let (sent, gso) = (p.get("qp0.tx_packets"), p.get("patch.tx_gso"));
    r.check(
        &format!(
            "peer received {} frames for a 64 MiB stream (guest sent {sent}, {gso} of \
             them super-frames)",
            r.peer_rx(),
        ),
        r.peer_rx() >= min_segments(64) && r.peer_rx() >= sent + gso,
    );
    // Back: the peer's TSO super-frames reached the guest whole.
    r.check_some("super-frames delivered to the guest", "patch.rx_gso");
    r.check_none("none segmented in software", "patch.rx_sw_segmented");
    r.check(
        &format!(
            "guest received fewer frames ({}) than a 64 MiB stream has segments",
            p.get("qp0.rx_packets")
        ),
        p.get("qp0.rx_packets") < min_segments(64),
    );
}

#[test]
#[ignore = "needs root and peers: run scripts/test.sh"]
fn af_packet_guest_without_receive_offloads_gets_valid_segments() {
    let mut qemu_args = Vec::new();
    for prop in [
        "guest_csum",
        "guest_tso4",
        "guest_tso6",
        "guest_ecn",
        "guest_ufo",
    ] {
        qemu_args.push("-global".to_owned());
        qemu_args.push(format!("virtio-net-pci.{prop}=off"));
    }
    let r = guest_net(
        Kind::AfPacket,
        GuestNet {
            tx_mib: 16,
            rx_mib: 64,
            qemu_args,
        },
    );
    let f = r.features();
    r.check(
        "guest did not ack GUEST_CSUM or GUEST_TSO4",
        f & (F_GUEST_CSUM | F_GUEST_TSO4) == 0,
    );
    let p = &r.patch;
    r.check_none("no super-frame delivered as such", "patch.rx_gso");
    r.check(
        "patch segmented the peer's super-frames",
        p.get("patch.rx_sw_segmented") > 0
            && p.get("patch.rx_sw_segments") >= 2 * p.get("patch.rx_sw_segmented"),
    );
    r.check_some("patch completed partial checksums", "patch.rx_sw_csum");
    r.check_none("no offload errors", "patch.rx_offload_errors");
    r.check(
        &format!(
            "guest received {} frames for a 64 MiB stream",
            p.get("qp0.rx_packets")
        ),
        p.get("qp0.rx_packets") >= min_segments(64),
    );
}

#[test]
#[ignore = "needs root and peers: run scripts/test.sh"]
fn tap_guest_reaches_peer_stack() {
    let r = guest_net(
        Kind::Tap,
        GuestNet {
            tx_mib: 64,
            rx_mib: 16,
            qemu_args: Vec::new(),
        },
    );
    let p = &r.patch;
    r.check_some("guest super-frames written to the TAP", "patch.tx_gso");
    r.check(
        "TAP offloads follow the guest: super-frames delivered",
        p.get("patch.rx_gso") > 0 && p.get("patch.rx_sw_segmented") == 0,
    );
    r.check(
        "TAP offloads set from the acked features",
        r.patch.stderr.contains("receive offloads set to"),
    );
}

// ===== testpmd tests =====

/// Frames of `start tx_first` (32 per burst).
const TX_FIRST_BURSTS: u32 = 8;
/// Their length (Ethernet header to the end, no FCS).
const TXONLY_LEN: u16 = 300;

/// testpmd (virtio-user) sends UDP frames through `patch` to a socket in
/// the peer namespace: exactly the frames of `start tx_first`, then a
/// `txonly` blast counted on the peer interface.
fn testpmd_frames_reach_peer(kind: Kind) {
    let dir = RunDir::new("patch-testpmd");
    let socket = dir.join("vhost.sock");
    let (link, patch) = attach(kind, &socket, &[], &[&format!("{TXONLY_DST}/24")]);
    let ns = link.ns();
    if let PeerEnd::Veth(v) = &link {
        // The host's end of the veth would send IPv6 router solicitations and
        // MLD reports of its own to the peer: only patch may send there.
        let knob = format!("/proc/sys/net/ipv6/conf/{}/disable_ipv6", v.host());
        std::fs::write(&knob, "1").unwrap_or_else(|e| panic!("{knob}: {e}"));
    }
    let mut rx = ns.spawn_python(peers::UDP_COUNT, &[TXONLY_DST, "9"]);
    rx.wait_for_stdout("ready", Duration::from_secs(10));
    let peer_mac = ns.mac(link.ifname());

    let mut opts = FrontendOpts::new(&socket);
    opts.port.forward_mode = "rxonly".into();
    opts.pkt_len = Some(TXONLY_LEN);
    opts.port.extra_args = vec![format!("--eth-peer=0,{peer_mac}")];
    let mut tp = Testpmd::spawn(&opts);
    tp.wait_ready(READY_TIMEOUT);
    tp.wait_link_up(LINK_TIMEOUT);

    // Exactly the tx_first frames, each with its length.
    let want = u64::from(TX_FIRST_BURSTS) * 32;
    let before = ns.link_stats(link.ifname());
    tp.start_tx_first(TX_FIRST_BURSTS);
    let deadline = Instant::now() + Duration::from_secs(15);
    let count = |rx: &NsProcess| -> u64 {
        rx.results("UDP ")
            .get("count")
            .and_then(|c| c.parse().ok())
            .unwrap_or(0)
    };
    while count(&rx) < want && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    let res = rx.results("UDP ");
    let payload = usize::from(TXONLY_LEN) - 14 - 20 - 8;
    assert_eq!(
        res.get("count").map(String::as_str),
        Some(want.to_string().as_str()),
        "{kind:?}: UDP datagrams received in the namespace\n{}",
        rx.describe()
    );
    assert_eq!(
        res.get("lengths").map(String::as_str),
        Some(format!("{payload}:{want}").as_str()),
        "{kind:?}: datagram lengths\n{}",
        rx.describe()
    );
    tp.stop();

    // A blast: the peer interface counts what patch handed to the uplink.
    // Every frame is accounted for exactly once both ends stopped: patch
    // dequeued it and the uplink sent or dropped it; the kernel delivered it
    // to the peer or counted it dropped (a veth's sender counts the frames
    // its peer's backlog refused; a TAP counts its own).
    let host = |link: &PeerEnd| match link {
        PeerEnd::Veth(v) => Some(host_link_stats(v.host())),
        PeerEnd::Tap { .. } => None,
    };
    let host_before = host(&link);
    tp.set_fwd("txonly");
    let t0 = Instant::now();
    tp.start();
    std::thread::sleep(Duration::from_secs(2));
    let fwd = tp.stop();
    let secs = t0.elapsed().as_secs_f64();
    // testpmd stopped sending: once the peer's counters stand still, patch
    // has handed everything on (read before patch stops: a TAP goes with it).
    let after = settled_link_stats(ns, link.ifname());
    let host_after = host(&link);
    // SIGTERM with testpmd still connected: out within a second.
    let t0 = Instant::now();
    let out = patch.stop();
    let took = t0.elapsed();
    assert!(out.status.success(), "{out}");
    assert!(
        took < Duration::from_secs(1) && !out.stderr.contains("did not acknowledge"),
        "{kind:?}: patch took {took:?} to exit after SIGTERM\n{out}"
    );
    let peer_rx = after.rx_packets - before.rx_packets;
    let peer_dropped = after.rx_dropped - before.rx_dropped;
    let host_dropped = match (host_before, host_after) {
        (Some(b), Some(a)) => a.tx_dropped - b.tx_dropped,
        _ => 0,
    };
    let sent = out.get("qp0.tx_packets");
    let to_uplink = out.get("uplink.tx_packets");
    let uplink_dropped = out.get("uplink.tx_dropped");
    eprintln!(
        "{kind:?}: testpmd sent {} in the blast ({:.0} kpps offered), patch dequeued {sent}, \
         uplink sent {to_uplink} and dropped {uplink_dropped}, peer received {peer_rx} \
         ({:.0} kpps), kernel dropped {} (peer rx) + {host_dropped} (host tx)\n{}",
        fwd.total.tx_packets,
        fwd.total.tx_packets as f64 / secs / 1e3,
        peer_rx as f64 / secs / 1e3,
        peer_dropped,
        out.stdout
    );
    assert!(
        sent >= want + 10_000,
        "{kind:?}: patch dequeued only {sent} frames\n{out}"
    );
    assert_eq!(
        out.get("qp0.tx_dropped"),
        0,
        "{kind:?}: patch dropped testpmd's frames as malformed\n{out}"
    );
    assert_eq!(
        out.get("patch.tx_sw_segmented"),
        0,
        "{kind:?}: 300-byte frames were segmented\n{out}"
    );
    assert_eq!(
        to_uplink + uplink_dropped,
        sent,
        "{kind:?}: frames unaccounted for between the port and the uplink \
         (sent + dropped by the uplink != dequeued)\n{out}"
    );
    assert_eq!(
        peer_rx + peer_dropped + host_dropped,
        to_uplink,
        "{kind:?}: the peer received {peer_rx} (and the kernel dropped {peer_dropped} + \
         {host_dropped}) of the {to_uplink} frames the uplink sent\n{out}"
    );
    drop(tp);
}

/// `ip -s -s link` of `ifname` in this (the host's) namespace.
fn host_link_stats(ifname: &str) -> netns::LinkStats {
    let out = netns::run(&["ip", "-s", "-s", "link", "show", "dev", ifname]);
    netns::LinkStats::parse(&out).unwrap_or_else(|| panic!("cannot parse `ip -s link`:\n{out}"))
}

/// `ifname`'s counters in `ns` once they stood still for 200 ms (the
/// sender has stopped; the kernel may still be delivering its backlog).
fn settled_link_stats(ns: &Netns, ifname: &str) -> netns::LinkStats {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last = ns.link_stats(ifname);
    let mut since = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let now = ns.link_stats(ifname);
        if now != last {
            last = now;
            since = Instant::now();
        } else if since.elapsed() >= Duration::from_millis(200) {
            return now;
        }
        assert!(Instant::now() < deadline, "{ifname}'s counters kept moving");
    }
}

vhu_tests::ignored_tests! {
    "needs root and peers: run scripts/test.sh";
    af_xdp_testpmd_frames_reach_peer => testpmd_frames_reach_peer(Kind::AfXdp);
    af_packet_testpmd_frames_reach_peer => testpmd_frames_reach_peer(Kind::AfPacket);
    tap_testpmd_frames_reach_peer => testpmd_frames_reach_peer(Kind::Tap);
}

// ===== zero-copy =====

#[test]
#[ignore = "needs root and peers: run scripts/test.sh"]
fn zero_copy_on_veth_fails_clearly_or_logs_the_fallback() {
    let v = VethPair::new();
    let dir = RunDir::new("patch-zc");
    let socket = dir.join("vhost.sock");
    let uplink = format!("af_xdp:{}", v.host());

    // require: a clear error, exit status 1, no socket left behind.
    let mut cmd = Command::new(patch_bin());
    cmd.args([
        "--socket",
        &socket.display().to_string(),
        "--uplink",
        &uplink,
    ]);
    cmd.args(["--zero-copy", "require"]);
    let mut p = NsProcess::spawn(cmd, "patch --zero-copy require".into());
    let status = p.wait(PATCH_TIMEOUT);
    assert_eq!(status.code(), Some(1), "exit status\n{}", p.describe());
    let err = p.stderr();
    assert!(
        err.contains("zero-copy required, but the driver does not support it")
            && err.contains(v.host()),
        "the error names zero-copy and the interface\n{}",
        p.describe()
    );
    assert!(!socket.exists(), "a socket was created");

    // try: a warning, copy mode, and it runs.
    let mut patch = Patch::spawn(&socket, &uplink, &["--zero-copy", "try"]);
    patch.wait_log("falling back to copy mode", PATCH_TIMEOUT);
    let out = patch.stop();
    assert!(out.status.success(), "{out}");
    assert!(out.stderr.contains("Operation not supported"), "{out}");

    // Not an AF_XDP uplink: require is a usage error.
    let mut cmd = Command::new(patch_bin());
    cmd.args(["--socket", &socket.display().to_string()]);
    cmd.args(["--uplink", &format!("af_packet:{}", v.host())]);
    cmd.args(["--zero-copy", "require"]);
    let mut p = NsProcess::spawn(cmd, "patch af_packet --zero-copy require".into());
    assert_eq!(p.wait(PATCH_TIMEOUT).code(), Some(64), "{}", p.describe());
    assert!(p.stderr().contains("only af_xdp"), "{}", p.describe());
}

#[test]
fn patch_counter_lines_parse() {
    let out = "qp=0 tx_packets=5 tx_bytes=320 rx_packets=4 rx_bytes=256 tx_dropped=0 rx_dropped=1\n\
               uplink=af_xdp:v0:q0 rx_packets=4 rx_bytes=1 rx_dropped=0 tx_packets=9 tx_bytes=2 tx_dropped=0\n\
               patch tx_gso=2 tx_sw_segmented=2\n";
    let m = parse_patch_counters(out);
    assert_eq!(m["qp0.rx_dropped"], 1);
    assert_eq!(m["uplink.tx_packets"], 9);
    assert_eq!(m["patch.tx_sw_segmented"], 2);
    assert_eq!(m.len(), 6 + 6 + 2);
}
