// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! `patch`: one vhost-user-net port wired to one uplink (AF_XDP, AF_PACKET
//! or TAP), both directions, on one data-plane thread.
//!
//! ```text
//! patch --socket PATH [--client] --uplink af_xdp:IFACE|af_packet:IFACE|tap:NAME
//!       [--poll busy|adaptive] [--queues 1] [--zero-copy off|try|require]
//!       [--xdp-attach auto|native|generic] [--qdisc-bypass] [--cpu N]
//!       [--idle-us US] [--burst N] [--no-offloads]
//! ```
//!
//! # Data path
//!
//! * Guest TX → uplink: each frame is copied once, from guest memory into
//!   the uplink's transmit buffer ([`Uplink::tx_push`]), with one
//!   [`Uplink::tx_flush`] per burst.
//! * Uplink → guest RX: each frame the uplink lends ([`Uplink::rx_burst`])
//!   is copied once into the guest's RX buffers.
//!
//! # Offloads
//!
//! The port offers checksum and TSO offloads both ways
//! ([`Offloads::checksum_and_tso`]) whatever the uplink; what the
//! destination cannot take is done in software by the library's
//! [`Forwarder`], in both directions (the guest's RX queue and the uplink
//! are both [`Sink`]s):
//!
//! * a guest frame whose header asks for a checksum or segmentation the
//!   uplink refuses (AF_XDP always, AF_PACKET and TAP for headers the kernel
//!   would reject) is copied into a scratch buffer, completed or segmented
//!   there, and pushed as plain frames (a second copy, on this path only);
//! * a frame from the uplink that carries offload metadata the guest did not
//!   ack (a TSO super-frame for a guest without `GUEST_TSO4`, a partial
//!   checksum for one without `GUEST_CSUM`) is completed or segmented before
//!   it is pushed.
//!
//! For TAP the kernel is told which offloads the guest acked
//! ([`Tap::set_offloads`]) whenever the acked set changes, so it hands over
//! only what the guest takes.
//!
//! AF_XDP carries no offload metadata on receive: on a veth whose peer sends
//! with partial checksums (the default), frames arrive with their checksum
//! not filled in and the guest drops them. Switch TX checksumming off on
//! the veth peer (`ethtool -K PEER tx off`) when AF_XDP serves a veth.
//!
//! # Polling
//!
//! The library's [`PollLoop`]: `busy` spins; `adaptive` (default) spins while there is traffic and,
//! after `--idle-us` without any, sleeps on the guest's kicks and the
//! uplink's receive file descriptor. While frames wait for guest RX buffers
//! the thread naps in short, growing steps instead (the uplink's descriptor
//! stays readable then).
//!
//! # Output
//!
//! Logs (stderr; `VHU_LOG` sets the filter, default `info`) name the uplink,
//! its mode, connects and the features each guest acked. On SIGINT/SIGTERM
//! it prints on stdout one line per queue pair (as `echo` does), one for the
//! uplink and one for the software offload work:
//!
//! ```text
//! qp=0 tx_packets=N tx_bytes=N rx_packets=N rx_bytes=N tx_dropped=N rx_dropped=N
//! uplink=NAME rx_packets=N rx_bytes=N rx_dropped=N tx_packets=N tx_bytes=N tx_dropped=N
//! patch tx_gso=N tx_sw_csum=N tx_sw_segmented=N tx_sw_segments=N ...
//! ```
//!
//! Exit codes: 0 after a signal, 64 for bad arguments, 1 when the uplink
//! cannot be opened (e.g. `--zero-copy require` on a driver without it) or
//! the data plane fails.
//!
//! [`Offloads::checksum_and_tso`]: vhost_net_backend::Offloads::checksum_and_tso
#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::{Parser, ValueEnum};
use vhost_net_backend::device::bits;
use vhost_net_backend::io::af_packet::{AfPacket, AfPacketConfig};
use vhost_net_backend::io::af_xdp::{AfXdp, AfXdpConfig, Attach, BindMode, ZeroCopy};
use vhost_net_backend::io::tap::{Tap, TapConfig};
use vhost_net_backend::io::{Uplink, UplinkSink};
use vhost_net_backend::poll::{self, PollLoop};
use vhost_net_backend::sink::{Sink, GUEST_OFFLOADS};
use vhost_net_backend::{ForwardCounters, Forwarder, Port, QueuePair};
use vhu_examples::PortArgs;

/// How the data-plane thread waits for work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum PollMode {
    /// Spin all the time (one full core).
    Busy,
    /// Spin while there is traffic; after `--idle-us` without any, sleep on
    /// guest kicks and the uplink's file descriptor.
    Adaptive,
}

/// `--zero-copy` (AF_XDP only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ZeroCopyArg {
    /// Copy mode.
    Off,
    /// Zero-copy if the driver has it, else copy mode (logged).
    Try,
    /// Zero-copy or exit with an error.
    Require,
}

/// `--xdp-attach` (AF_XDP only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum AttachArg {
    /// Native XDP if the driver has it, else generic.
    Auto,
    /// Native XDP or fail.
    Native,
    /// Generic (SKB) XDP.
    Generic,
}

/// Which uplink to open, parsed from `KIND:IFACE`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum UplinkSpec {
    AfXdp(String),
    AfPacket(String),
    Tap(String),
}

fn parse_uplink(s: &str) -> Result<UplinkSpec, String> {
    let (kind, name) = s
        .split_once(':')
        .ok_or_else(|| format!("expected KIND:IFACE (af_xdp, af_packet or tap), got {s:?}"))?;
    if name.is_empty() || name.len() > 15 {
        return Err(format!(
            "interface name must be 1 to 15 bytes, got {name:?}"
        ));
    }
    let name = name.to_owned();
    match kind {
        "af_xdp" => Ok(UplinkSpec::AfXdp(name)),
        "af_packet" => Ok(UplinkSpec::AfPacket(name)),
        "tap" => Ok(UplinkSpec::Tap(name)),
        _ => Err(format!(
            "unknown uplink kind {kind:?} (af_xdp, af_packet or tap)"
        )),
    }
}

/// Connect one vhost-user port to one uplink.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    #[command(flatten)]
    port: PortArgs,
    /// The uplink: `af_xdp:IFACE`, `af_packet:IFACE` or `tap:NAME` (a TAP
    /// that does not exist is created, and goes away with the process).
    #[arg(long, value_parser = parse_uplink)]
    uplink: UplinkSpec,
    /// Polling mode of the data-plane thread.
    #[arg(long, value_enum, default_value_t = PollMode::Adaptive)]
    poll: PollMode,
    /// Number of queue pairs (only 1: one uplink queue).
    #[arg(long, default_value_t = 1)]
    queues: u16,
    /// AF_XDP zero-copy (default `try`). `require` on a driver without
    /// zero-copy (veth) exits with an error; `try` logs the fallback.
    #[arg(long, value_enum)]
    zero_copy: Option<ZeroCopyArg>,
    /// How AF_XDP attaches its XDP program.
    #[arg(long, value_enum, default_value_t = AttachArg::Auto)]
    xdp_attach: AttachArg,
    /// Idle time before an adaptive poller sleeps, in microseconds.
    #[arg(long, default_value_t = 200)]
    idle_us: u64,
    /// Frames per burst.
    #[arg(long, default_value_t = 32)]
    burst: usize,
    /// Pin the data-plane thread to this CPU.
    #[arg(long)]
    cpu: Option<usize>,
    /// Offer no checksum or segmentation offloads to the guest.
    #[arg(long)]
    no_offloads: bool,
    /// AF_PACKET: bypass the qdisc layer on transmit (faster; super-frames
    /// then reach only interfaces that segment them themselves, such as
    /// veth with TSO on; DPDK's `net_af_packet` does this by default).
    #[arg(long)]
    qdisc_bypass: bool,
}

/// The most guest RX buffers counted per burst decision.
const MAX_RX_AVAIL: usize = 512;
/// Guest RX buffers set aside per uplink frame when the uplink may lend
/// super-frames: a 64 KiB frame in 1.5 KiB buffers, or its ~45 software
/// segments.
const RX_BUFFERS_PER_SUPER_FRAME: usize = 48;
/// Poller token of the uplink's receive descriptor.
const TOKEN_UPLINK: u64 = 1;
/// Uplink receive offloads that mean super-frames.
const RX_SUPER_FRAMES: u64 = bits::GUEST_TSO4 | bits::GUEST_TSO6 | bits::GUEST_UFO;

fn main() -> ExitCode {
    vhu_examples::init_logging();
    let args = Args::parse();
    if !vhu_examples::burst_ok("patch", args.burst) {
        return ExitCode::from(64);
    }
    if args.queues != 1 {
        eprintln!("patch: only --queues 1 is supported (one uplink queue)");
        return ExitCode::from(64);
    }
    let is_xdp = matches!(args.uplink, UplinkSpec::AfXdp(_));
    if !is_xdp && args.zero_copy == Some(ZeroCopyArg::Require) {
        eprintln!("patch: --zero-copy require: only af_xdp uplinks have a zero-copy mode");
        return ExitCode::from(64);
    }
    if args.qdisc_bypass && !matches!(args.uplink, UplinkSpec::AfPacket(_)) {
        eprintln!("patch: --qdisc-bypass: only af_packet uplinks have a qdisc bypass");
        return ExitCode::from(64);
    }
    if !is_xdp && args.zero_copy == Some(ZeroCopyArg::Try) {
        tracing::warn!("--zero-copy try: ignored, only af_xdp uplinks have a zero-copy mode");
    }

    let stop = match vhu_examples::stop_on_signals() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("patch: cannot install a signal handler: {e}");
            return ExitCode::FAILURE;
        }
    };

    // The uplink first: a bad interface fails before a socket appears.
    let res = match &args.uplink {
        UplinkSpec::AfXdp(ifname) => {
            open_af_xdp(ifname, &args).and_then(|u| serve(u, &args, &stop))
        }
        UplinkSpec::AfPacket(ifname) => match AfPacket::open(
            ifname,
            AfPacketConfig {
                qdisc_bypass: args.qdisc_bypass,
                ..AfPacketConfig::default()
            },
        ) {
            Ok(u) => {
                tracing::info!(
                    "uplink {}: opened (offloads tx={:#x} rx={:#x}, {}-byte TX header{})",
                    u.name(),
                    u.offloads().tx,
                    u.offloads().rx,
                    u.tx_vnet_hdr_len(),
                    if args.qdisc_bypass {
                        ", qdisc bypass"
                    } else {
                        ""
                    }
                );
                serve(u, &args, &stop)
            }
            Err(e) => Err(Failure::Uplink(vhu_examples::error_chain(&e))),
        },
        UplinkSpec::Tap(name) => match Tap::open(
            name,
            TapConfig {
                multi_queue: false,
                link_up: true,
            },
        ) {
            Ok(u) => {
                tracing::info!("uplink {}: opened", u.name());
                serve(u, &args, &stop)
            }
            Err(e) => Err(Failure::Uplink(vhu_examples::error_chain(&e))),
        },
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(e)) => {
            eprintln!("patch: {e}");
            ExitCode::from(64)
        }
        Err(Failure::Uplink(e)) => {
            eprintln!("patch: cannot open the uplink: {e}");
            ExitCode::FAILURE
        }
        Err(Failure::Runtime(e)) => {
            eprintln!("patch: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Why `patch` exits early.
#[derive(Debug)]
enum Failure {
    /// Bad arguments or port configuration (exit 64).
    Usage(String),
    /// The uplink could not be opened (exit 1).
    Uplink(String),
    /// The data plane failed (exit 1).
    Runtime(String),
}

fn open_af_xdp(ifname: &str, args: &Args) -> Result<AfXdp, Failure> {
    let zc = args.zero_copy.unwrap_or(ZeroCopyArg::Try);
    let cfg = AfXdpConfig {
        zero_copy: match zc {
            ZeroCopyArg::Off => ZeroCopy::Off,
            ZeroCopyArg::Try => ZeroCopy::Try,
            ZeroCopyArg::Require => ZeroCopy::Require,
        },
        attach: match args.xdp_attach {
            AttachArg::Auto => Attach::Auto,
            AttachArg::Native => Attach::Native,
            AttachArg::Generic => Attach::Generic,
        },
        ..AfXdpConfig::default()
    };
    let x = AfXdp::open(ifname, cfg).map_err(|e| Failure::Uplink(vhu_examples::error_chain(&e)))?;
    match (x.bind_mode(), x.zero_copy_error()) {
        (BindMode::Copy, Some(e)) => tracing::warn!(
            "uplink {}: zero-copy requested but unavailable ({e}): falling back to copy mode",
            x.name()
        ),
        (mode, _) => tracing::info!("uplink {}: bound in {mode} mode", x.name()),
    }
    tracing::info!(
        "uplink {}: XDP program {} attached in {} mode; no offloads (checksums and \
         segmentation done in software)",
        x.name(),
        x.program().prog_id(),
        x.program().mode()
    );
    Ok(x)
}

/// Creates the port, runs the data plane until a signal, prints counters.
fn serve<U: Uplink>(uplink: U, args: &Args, stop: &AtomicBool) -> Result<(), Failure> {
    let mut cfg = args.port.port_config("patch", args.no_offloads);
    cfg.queue_pairs = 1;
    let (port, mut qps) =
        Port::new(cfg).map_err(|e| Failure::Usage(vhu_examples::error_chain(&e)))?;
    let mut dp = DataPlane::new(uplink, args.burst);
    let res = dp.run(args, &port, &mut qps, stop);
    print_counters(&qps, &dp);
    // The queues go first: the port's shutdown then stops rings that no
    // data plane holds any more, without waiting for an acknowledgement
    // that would never come (a connected frontend's rings run).
    drop(qps);
    drop(port);
    res.map_err(|e| Failure::Runtime(format!("data plane: {e}")))
}

/// The data plane of one port and one uplink.
struct DataPlane<U> {
    uplink: U,
    burst: usize,
    /// The software offload fallback, both directions.
    fwd: Forwarder,
    /// Guest TX → uplink.
    tx: ForwardCounters,
    /// Uplink → guest RX.
    rx: ForwardCounters,
    /// Uplink `tx_flush` errors.
    tx_flush_errors: u64,
    /// Uplink frames dropped because no guest RX ring ran.
    rx_no_guest: u64,
    /// Uplink `rx_burst` errors.
    rx_errors: u64,
    /// Where the data-plane thread's cycles went.
    cycles: std::sync::Arc<vhost_net_backend::LoopCycles>,
    /// The acked feature set last applied.
    acked: u64,
    /// Frames are waiting for guest RX buffers.
    rx_blocked: bool,
}

impl<U: Uplink> DataPlane<U> {
    fn new(uplink: U, burst: usize) -> Self {
        Self {
            uplink,
            burst,
            fwd: Forwarder::new(),
            tx: ForwardCounters::default(),
            rx: ForwardCounters::default(),
            tx_flush_errors: 0,
            rx_no_guest: 0,
            rx_errors: 0,
            cycles: std::sync::Arc::default(),
            acked: 0,
            rx_blocked: false,
        }
    }

    /// Applies the acked feature set if it changed.
    #[inline]
    fn refresh_features(&mut self, port: &Port) {
        let acked = port.acked_features();
        if acked != self.acked {
            self.apply_features(port, acked);
        }
    }

    #[cold]
    fn apply_features(&mut self, port: &Port, acked: u64) {
        self.acked = acked;
        if acked != 0 {
            tracing::info!(
                "port {}: guest acked features {acked:#x} (receive offloads {:#x})",
                port.name(),
                acked & GUEST_OFFLOADS
            );
        }
        self.uplink.guest_features(acked);
    }

    fn run(
        &mut self,
        args: &Args,
        port: &Port,
        qps: &mut [QueuePair],
        stop: &AtomicBool,
    ) -> std::io::Result<()> {
        let mut poller = vhu_examples::data_plane_poller(args.cpu, qps)?;
        let mode = match args.poll {
            PollMode::Busy => poll::PollMode::Busy,
            PollMode::Adaptive => poll::PollMode::Adaptive,
        };
        if mode.sleeps() {
            // Only a poller that sleeps watches the uplink (see
            // `PollMode::sleeps`).
            poller.add_fd(self.uplink.rx_fd(), TOKEN_UPLINK)?;
        }
        let mut poll = PollLoop::new(mode, Duration::from_micros(args.idle_us));
        self.cycles = std::sync::Arc::clone(poll.cycles());
        while !stop.load(Ordering::Relaxed) {
            // One atomic load: the port mirrors the acked set lock-free.
            self.refresh_features(port);
            let mut moved = 0;
            for qp in qps.iter_mut() {
                moved += self.guest_to_uplink(qp);
                moved += self.uplink_to_guest(qp);
            }
            poll.round(moved, self.rx_blocked, qps, &mut poller)?;
        }
        Ok(())
    }

    /// Guest TX → uplink, one burst. Returns the frames dequeued.
    fn guest_to_uplink(&mut self, qp: &mut QueuePair) -> usize {
        let Self {
            uplink,
            fwd,
            tx: c,
            burst,
            ..
        } = self;
        let mut sink = UplinkSink::new(uplink);
        let n = qp.tx.recv_burst(*burst, |frame| {
            let hdr = *frame.hdr();
            // A drop is counted by the uplink (and in `c`).
            let _ = fwd.forward(c, &hdr, &*frame, &mut sink);
        });
        if n > 0 {
            if let Err(e) = sink.flush() {
                if count_error(&mut self.tx_flush_errors) {
                    tracing::warn!(
                        "uplink {}: tx: flush failed ({} times so far): {e}",
                        self.uplink.name(),
                        self.tx_flush_errors
                    );
                }
            }
        }
        n
    }

    /// Uplink → guest RX, one burst. Returns the frames received.
    fn uplink_to_guest(&mut self, qp: &mut QueuePair) -> usize {
        let burst = self.burst;
        if !qp.rx.is_running() {
            // No guest to take them: drain, so that the uplink's descriptor
            // does not keep an adaptive poller awake.
            self.rx_blocked = false;
            let n = &mut self.rx_no_guest;
            let r = self.uplink.rx_burst(burst, &mut |_, _| *n += 1);
            return self.rx_result(r);
        }
        let per_frame = if self.uplink.offloads().rx & RX_SUPER_FRAMES != 0 {
            // Super-frames may come, whole or as software segments.
            RX_BUFFERS_PER_SUPER_FRAME
        } else {
            1
        };
        // Counted only as far as one burst can use: on packed rings each
        // buffer counted is a descriptor read, on lines the guest writes.
        let avail = qp.rx.available((burst * per_frame).min(MAX_RX_AVAIL));
        if avail == 0 {
            self.rx_blocked = true;
            return 0;
        }
        self.rx_blocked = false;
        let max = (avail / per_frame).clamp(1, burst);
        let Self {
            uplink, fwd, rx: c, ..
        } = self;
        let mut rx = qp.rx.burst();
        let r = uplink.rx_burst(max, &mut |hdr, bytes| {
            // A drop is counted by the guest's RX queue (and in `c`).
            let _ = fwd.forward_typed(c, hdr, &bytes, &mut rx);
        });
        drop(rx);
        self.rx_result(r)
    }

    fn rx_result(&mut self, r: std::io::Result<usize>) -> usize {
        match r {
            Ok(n) => n,
            Err(e) => {
                if count_error(&mut self.rx_errors) {
                    tracing::warn!(
                        "uplink {}: rx: {e} ({} errors so far)",
                        self.uplink.name(),
                        self.rx_errors
                    );
                }
                0
            }
        }
    }
}

/// Counts one more error in `count`; true when it deserves a log line (the
/// 1st, 2nd, 4th, 8th, ...: a lasting failure does not flood the log).
fn count_error(count: &mut u64) -> bool {
    *count += 1;
    count.is_power_of_two()
}

fn print_counters<U: Uplink>(qps: &[QueuePair], dp: &DataPlane<U>) {
    vhu_examples::print_queue_counters(qps);
    vhu_examples::print_cycles(&dp.cycles);
    let u = dp.uplink.counters();
    println!(
        "uplink={} rx_packets={} rx_bytes={} rx_dropped={} tx_packets={} tx_bytes={} tx_dropped={}",
        dp.uplink.name(),
        u.rx_packets,
        u.rx_bytes,
        u.rx_dropped(),
        u.tx_packets,
        u.tx_bytes,
        u.tx_dropped()
    );
    let (tx, rx) = (&dp.tx, &dp.rx);
    println!(
        "patch tx_gso={} tx_sw_csum={} tx_sw_segmented={} tx_sw_segments={} tx_full={} \
         tx_too_large={} tx_offload_errors={} tx_flush_errors={} rx_gso={} rx_sw_csum={} \
         rx_sw_segmented={} rx_sw_segments={} rx_offload_errors={} rx_no_guest={} rx_errors={}",
        tx.gso,
        tx.sw_csum,
        tx.sw_segmented,
        tx.sw_segments,
        tx.full,
        tx.too_large,
        tx.offload_errors,
        dp.tx_flush_errors,
        rx.gso_passed,
        rx.sw_csum,
        rx.sw_segmented,
        rx.sw_segments,
        rx.offload_errors,
        dp.rx_no_guest,
        dp.rx_errors
    );
}
