// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Uplink benchmark: frames per second from a `dpdk-testpmd` virtio-user
//! frontend (`txonly`, one forwarding core) through a vhost-user backend
//! into a kernel interface in a network namespace, counted as packets the
//! peer interface received (its RX counter over a window).
//!
//! Backends, alternating run by run (A B, B A, ...):
//!
//! * ours: `patch --poll busy --cpu 0 --uplink KIND:IFACE`;
//! * DPDK: `dpdk-testpmd` with `net_vhost0` and the matching PMD
//!   (`net_af_xdp0`, `net_af_packet0`, `net_tap0`), `io` forwarding between
//!   the two ports, forwarding lcore on CPU 0.
//!
//! Each run gets a fresh veth pair (the peer end in a fresh namespace) or a
//! TAP moved into a fresh namespace. The peer has no address: frames are
//! counted by the interface and dropped by IP. The frontend forwards on
//! CPU 1; the backend polls CPU 0, where the kernel also does the uplink's
//! work (AF_XDP copy-mode and AF_PACKET transmit, TAP writes, and the
//! veth's delivery to the peer all run in the sender's syscall).
//!
//! ```text
//! uplink-bench [--uplinks af_xdp,af_packet,tap] [--reps N] [--size 64]
//!              [--warmup SECS] [--window SECS] [--huge] [--patch PATH]
//!              [--max-busy PCT] [--idle-wait SECS] [--qdisc]
//! ```
//!
//! AF_PACKET bypasses the qdisc layer on both sides by default (DPDK's
//! `net_af_packet` default; `patch --qdisc-bypass`); `--qdisc` runs both
//! through it (`patch`'s default, which the kernel needs to segment
//! super-frames for interfaces that cannot).
//!
//! Before each run it waits up to `--idle-wait` (60 s) for the machine to
//! be at most `--max-busy` (10 %) busy, and reports how busy it was: other
//! work on two cores halves a poller's figure.
//!
//! Each run checks its own conditions, and the program fails rather than
//! print a figure for a run that measured something else: every process
//! exits cleanly (patch's counters are printed: its uplink must have sent
//! what the peer counted, or more), the frontend negotiated split rings, and
//! the frames the peer received average exactly `--size`. A run that still
//! found the machine busier than `--max-busy` is repeated (up to 3 attempts)
//! and marked `NOISY` if it stays so.
//!
//! Prints every run and a table of medians and ratios (ours / DPDK). Needs
//! root; `benches/vs-dpdk-uplinks.sh` builds what it needs and runs it.

use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use vhu_benches as bench;
use vhu_tests::netns::{self, Netns, NsProcess, VethPair};
use vhu_tests::process::{machine_busy, RunDir};
use vhu_tests::testpmd::{
    self, hugepages_available, start_vhost_backend, FrontendOpts, Testpmd, VhostBackendOpts,
};
use vhu_tests::uplink::{Kind, PeerEnd};

#[derive(Debug, Clone)]
struct Args {
    uplinks: Vec<Kind>,
    reps: usize,
    size: u16,
    warmup: Duration,
    window: Duration,
    huge: bool,
    patch: PathBuf,
    /// Wait (up to `idle_wait`) until the machine is at most this busy
    /// before each run (fraction of all CPUs).
    max_busy: f64,
    idle_wait: Duration,
    /// AF_PACKET through the qdisc layer on both sides (patch's default,
    /// `qdisc_bypass=0` for DPDK) instead of bypassing it on both.
    qdisc: bool,
}

fn default_patch() -> PathBuf {
    // This binary is <target>/release/uplink-bench; patch is an example of
    // the same build.
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("examples/patch")))
        .unwrap_or_else(|| PathBuf::from("target/release/examples/patch"))
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        uplinks: vec![Kind::AfXdp, Kind::AfPacket, Kind::Tap],
        reps: 5,
        size: 64,
        warmup: Duration::from_secs(2),
        window: Duration::from_secs(5),
        huge: false,
        patch: default_patch(),
        max_busy: 0.10,
        idle_wait: Duration::from_secs(60),
        qdisc: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().ok_or(format!("{k} needs a value"));
        let secs = |s: String| {
            s.parse::<f64>()
                .map(Duration::from_secs_f64)
                .map_err(|e| format!("{k}: {e}"))
        };
        match k.as_str() {
            "--uplinks" => {
                a.uplinks = v()?.split(',').map(Kind::parse).collect::<Result<_, _>>()?
            }
            "--reps" => a.reps = v()?.parse().map_err(|e| format!("--reps: {e}"))?,
            "--size" => a.size = v()?.parse().map_err(|e| format!("--size: {e}"))?,
            "--warmup" => a.warmup = secs(v()?)?,
            "--window" => a.window = secs(v()?)?,
            "--huge" => a.huge = true,
            "--patch" => a.patch = PathBuf::from(v()?),
            "--max-busy" => {
                a.max_busy = v()?
                    .parse::<f64>()
                    .map_err(|e| format!("--max-busy: {e}"))?
                    / 100.0
            }
            "--idle-wait" => a.idle_wait = secs(v()?)?,
            "--qdisc" => a.qdisc = true,
            "-h" | "--help" => {
                return Err(
                    "usage: uplink-bench [--uplinks af_xdp,af_packet,tap] [--reps N] \
                            [--size 64] [--warmup SECS] [--window SECS] [--huge] [--patch PATH] \
                            [--max-busy PCT] [--idle-wait SECS] [--qdisc]"
                        .into(),
                )
            }
            o => return Err(format!("unknown argument {o}")),
        }
    }
    if a.reps == 0 {
        return Err("--reps must be at least 1".into());
    }
    if !(60..=1514).contains(&a.size) {
        return Err("--size must be 60 to 1514".into());
    }
    Ok(a)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Ours,
    Dpdk,
}

/// One measurement.
#[derive(Debug, Clone, Copy)]
struct Sample {
    /// Frames the peer interface received per second, in millions.
    mpps: f64,
    /// Frames the frontend transmitted per second (what the backend took
    /// from its ring), in millions.
    offered_mpps: f64,
    /// Machine CPU busy fraction (all CPUs) in the second before the run:
    /// other load.
    busy_before: f64,
}

/// Attempts at a quiet run before a noisy one is kept (and marked).
const ATTEMPTS: usize = 3;

/// Moves TAP `name` (in our namespace) into `ns` and sets it up.
fn adopt_tap(name: &str, ns: &Netns) -> Result<(), String> {
    let sys = PathBuf::from(format!("/sys/class/net/{name}"));
    let deadline = Instant::now() + Duration::from_secs(15);
    while !sys.exists() {
        if Instant::now() >= deadline {
            return Err(format!("TAP {name} did not appear"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    netns::run(&["ip", "link", "set", name, "netns", ns.name()]);
    ns.exec(&["ip", "link", "set", name, "up"]);
    Ok(())
}

fn run(kind: Kind, backend: Backend, a: &Args) -> Result<Sample, String> {
    // Other work on the two cores takes cycles out of the pollers: wait
    // for a quiet machine (or give up waiting, and say how busy it was).
    let deadline = Instant::now() + a.idle_wait;
    let busy_before = loop {
        let (busy, _) = machine_busy(Duration::from_secs(1));
        if busy <= a.max_busy || Instant::now() >= deadline {
            break busy;
        }
    };
    let dir = RunDir::new("uplink-bench");
    let socket = dir.join("vhost.sock");
    let peer = match kind {
        Kind::AfXdp | Kind::AfPacket => PeerEnd::Veth(VethPair::new()),
        Kind::Tap => PeerEnd::Tap {
            ns: Netns::new(),
            name: netns::unique_ifname("t"),
        },
    };
    let host_if = match &peer {
        PeerEnd::Veth(v) => v.host().to_owned(),
        PeerEnd::Tap { name, .. } => name.clone(),
    };
    let mut ours: Option<NsProcess> = None;
    let mut dpdk: Option<Testpmd> = None;
    match backend {
        Backend::Ours => {
            let mut cmd = Command::new(&a.patch);
            cmd.args(["--socket", &socket.display().to_string()]);
            cmd.args(["--uplink", &format!("{}:{host_if}", kind.name())]);
            cmd.args(["--poll", "busy", "--cpu", "0"]);
            if kind == Kind::AfPacket && !a.qdisc {
                // As DPDK's net_af_packet does by default.
                cmd.arg("--qdisc-bypass");
            }
            let mut p = NsProcess::spawn(cmd, "patch".into());
            let deadline = Instant::now() + Duration::from_secs(10);
            while !socket.exists() {
                if !p.is_running() || Instant::now() >= deadline {
                    p.kill();
                    return Err(format!("patch did not start\n{}", p.describe()));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            ours = Some(p);
        }
        Backend::Dpdk => {
            let mut o = VhostBackendOpts::new(&socket);
            o.port.hugepages = a.huge;
            let pmd = match kind {
                Kind::AfXdp => format!("net_af_xdp0,iface={host_if},start_queue=0,queue_count=1"),
                Kind::AfPacket => format!(
                    "net_af_packet0,iface={host_if},qdisc_bypass={}",
                    u8::from(!a.qdisc)
                ),
                Kind::Tap => format!("net_tap0,iface={host_if}"),
            };
            o.port.extra_eal_args = vec!["--vdev".into(), pmd];
            dpdk = Some(start_vhost_backend(&o));
        }
    }
    if let PeerEnd::Tap { ns, name } = &peer {
        adopt_tap(name, ns)?;
    }
    let peer_mac = peer.ns().mac(peer.ifname());
    let mut fo = FrontendOpts::new(&socket);
    fo.port.hugepages = a.huge;
    fo.port.forward_mode = "txonly".into();
    fo.pkt_len = Some(a.size);
    fo.port.extra_args = vec![format!("--eth-peer=0,{peer_mac}")];
    let mut fe = Testpmd::spawn(&fo);
    fe.wait_ready(Duration::from_secs(60));
    fe.wait_link_up(Duration::from_secs(30));
    fe.start();
    std::thread::sleep(a.warmup);
    let (s0, f0, t0) = (peer.stats(), fe.total_stats(), Instant::now());
    std::thread::sleep(a.window);
    let (s1, f1, t1) = (peer.stats(), fe.total_stats(), Instant::now());
    fe.stop();
    let secs = (t1 - t0).as_secs_f64();
    let fe_features = fe.negotiated_features();
    let (status, log) = fe.quit();
    if let Some(mut p) = ours {
        p.signal("TERM");
        let st = p.wait(Duration::from_secs(10));
        if !st.success() {
            return Err(format!("patch exited with {st}\n{}", p.describe()));
        }
        let out = p.stdout();
        let uplink = out
            .lines()
            .find(|l| l.starts_with("uplink="))
            .ok_or_else(|| format!("patch printed no uplink counters\n{}", p.describe()))?;
        println!("  patch: {uplink}");
        let sent = uplink
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix("tx_packets="))
            .and_then(|v| v.parse::<u64>().ok())
            .ok_or_else(|| format!("no tx_packets in {uplink:?}"))?;
        let peer_total = s1.rx_packets.saturating_sub(s0.rx_packets);
        if sent < peer_total {
            return Err(format!(
                "the peer counted {peer_total} frames in the window, patch's uplink sent only \
                 {sent} in all: the peer counted other frames\n{}",
                p.describe()
            ));
        }
    }
    if let Some(d) = dpdk {
        let (st, dlog) = d.quit();
        if !st.success() {
            return Err(format!("DPDK's backend exited with {st}\n{dlog}"));
        }
    }
    if !status.success() {
        return Err(format!("frontend exited with {status}\n{log}"));
    }
    let rx = s1.rx_packets.saturating_sub(s0.rx_packets);
    if rx == 0 {
        return Err(format!("the peer received nothing\n{log}"));
    }
    bench::check_features(fe_features, false, None)?;
    let rx_bytes = s1.rx_bytes.saturating_sub(s0.rx_bytes);
    bench::check_frame_len(rx_bytes as f64 / rx as f64, a.size)?;
    Ok(Sample {
        mpps: rx as f64 / secs / 1e6,
        offered_mpps: f1.tx_packets.saturating_sub(f0.tx_packets) as f64 / secs / 1e6,
        busy_before,
    })
}

fn main() -> ExitCode {
    let a = match bench::args_or_usage("uplink-bench", parse_args()) {
        Ok(a) => a,
        Err(code) => return code,
    };
    if !a.patch.is_file() {
        eprintln!(
            "uplink-bench: {} not found: cargo build --release --examples (or --patch PATH)",
            a.patch.display()
        );
        return ExitCode::FAILURE;
    }
    if a.huge && !hugepages_available(512) {
        eprintln!("uplink-bench: --huge: not enough free hugepages (scripts/hugepages.sh)");
        return ExitCode::FAILURE;
    }
    let _ = testpmd::testpmd_bin();
    println!(
        "uplink-bench: {} B frames, {} reps, warmup {:?}, window {:?}, {}",
        a.size,
        a.reps,
        a.warmup,
        a.window,
        if a.huge { "hugepages" } else { "no hugepages" }
    );
    let mut table = Vec::new();
    for &kind in &a.uplinks {
        let (mut ours, mut theirs, mut busy) = (Vec::new(), Vec::new(), Vec::new());
        for rep in 0..a.reps {
            for b in bench::abba(rep, Backend::Ours, Backend::Dpdk) {
                let noise = |s: &Sample| {
                    (s.busy_before > a.max_busy).then(|| {
                        format!(
                            "machine {:.0} % busy before the run (max {:.0})",
                            s.busy_before * 100.0,
                            a.max_busy * 100.0
                        )
                    })
                };
                match bench::quiet_run(ATTEMPTS, || run(kind, b, &a), noise) {
                    Ok((s, noisy)) => {
                        println!(
                            "run uplink={} rep={rep} backend={b:?}: {:.3} Mpps at the peer \
                             (frontend sent {:.3} Mpps; machine busy before {:.0} %){}",
                            kind.name(),
                            s.mpps,
                            s.offered_mpps,
                            s.busy_before * 100.0,
                            if noisy { " NOISY" } else { "" }
                        );
                        busy.push(s.busy_before);
                        match b {
                            Backend::Ours => ours.push(s.mpps),
                            Backend::Dpdk => theirs.push(s.mpps),
                        }
                    }
                    Err(e) => {
                        eprintln!("uplink-bench: {} {b:?} rep {rep}: {e}", kind.name());
                        return ExitCode::FAILURE;
                    }
                }
            }
        }
        let (mo, md) = (bench::median(&ours), bench::median(&theirs));
        let mb = bench::median(&busy);
        table.push((kind, mo, md, mb, ours, theirs));
    }
    println!();
    println!(
        "{:<10} {:>12} {:>12} {:>7}  {:>9}  runs (Mpps: ours | DPDK)",
        "uplink", "patch Mpps", "DPDK Mpps", "ratio", "busy"
    );
    for (kind, mo, md, mb, ours, theirs) in &table {
        println!(
            "{:<10} {:>12.3} {:>12.3} {:>7.2}  {:>8.0}%  {} | {}",
            kind.name(),
            mo,
            md,
            mo / md,
            mb * 100.0,
            bench::runs(ours, 3),
            bench::runs(theirs, 3)
        );
    }
    ExitCode::SUCCESS
}
