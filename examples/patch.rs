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
//! ([`Offloads::checksum_and_tso`]) whatever the uplink; what the uplink
//! cannot take is done here, in software ([`offload`]):
//!
//! * a guest frame whose header asks for a checksum or segmentation the
//!   uplink refuses ([`DropReason::OffloadUnsupported`]: AF_XDP always, AF_PACKET and TAP
//!   for headers the kernel would reject) is copied into a scratch buffer,
//!   completed or segmented there, and pushed as plain frames (a second
//!   copy, on this path only);
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
//! `busy` spins; `adaptive` (default) spins while there is traffic and,
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
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use vhost_net_backend::device::bits;
use vhost_net_backend::io::af_packet::{AfPacket, AfPacketConfig};
use vhost_net_backend::io::af_xdp::{AfXdp, AfXdpConfig, Attach, BindMode, ZeroCopy};
use vhost_net_backend::io::offload::{self, Segmenter};
use vhost_net_backend::io::tap::{Tap, TapConfig};
use vhost_net_backend::io::Uplink;
use vhost_net_backend::{
    DropReason, FrameSource, FrameWriter, Offloads, Poller, Port, PortConfig, QueuePair,
    SocketRole, TxFrame, VirtioNetHdr,
};
use vhu_examples::MAX_BURST;

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
    /// vhost-user socket path.
    #[arg(long)]
    socket: PathBuf,
    /// Connect to a socket the frontend created (and reconnect when it goes
    /// away) instead of creating one.
    #[arg(long)]
    client: bool,
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

/// Guest RX buffers counted per burst decision.
const MAX_RX_AVAIL: usize = 512;
/// Guest RX buffers set aside per uplink frame when the uplink may lend
/// super-frames: a 64 KiB frame in 1.5 KiB buffers, or its ~45 software
/// segments.
const RX_BUFFERS_PER_SUPER_FRAME: usize = 48;
/// Flush-and-retry rounds when the uplink's transmit buffers are full.
const FULL_RETRIES: usize = 64;
/// Nap while frames wait for guest RX buffers: first and longest.
const NAP_MIN: Duration = Duration::from_micros(20);
const NAP_MAX: Duration = Duration::from_millis(1);
/// Longest sleep in `adaptive` mode (bounds how long a signal takes).
const SLEEP_MAX: Duration = Duration::from_millis(100);
/// Poller token of the uplink's receive descriptor.
const TOKEN_UPLINK: u64 = 1 << 40;
/// The GUEST_* offload bits (what a guest accepts on receive).
const GUEST_OFFLOADS: u64 =
    bits::GUEST_CSUM | bits::GUEST_TSO4 | bits::GUEST_TSO6 | bits::GUEST_ECN | bits::GUEST_UFO;
/// Uplink receive offloads that mean super-frames.
const RX_SUPER_FRAMES: u64 = bits::GUEST_TSO4 | bits::GUEST_TSO6 | bits::GUEST_UFO;

fn main() -> ExitCode {
    vhu_examples::init_logging();
    let args = Args::parse();
    if args.burst == 0 || args.burst > MAX_BURST {
        eprintln!("patch: --burst must be 1 to {MAX_BURST}");
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

/// What the data plane needs from an uplink beyond [`Uplink`].
trait Attached: Uplink {
    /// The guest acked a new feature set (0: no guest).
    fn guest_features(&mut self, _acked: u64) {}
}

impl Attached for AfXdp {}
impl Attached for AfPacket {}
impl Attached for Tap {
    fn guest_features(&mut self, acked: u64) {
        match self.set_offloads(acked) {
            Ok(()) => tracing::info!(
                "uplink {}: receive offloads set to rx={:#x}",
                self.name(),
                self.offloads().rx
            ),
            Err(e) => tracing::warn!("uplink {}: {}", self.name(), vhu_examples::error_chain(&e)),
        }
    }
}

/// Creates the port, runs the data plane until a signal, prints counters.
fn serve<U: Attached>(uplink: U, args: &Args, stop: &AtomicBool) -> Result<(), Failure> {
    let mut cfg = PortConfig::new("patch", &args.socket);
    cfg.role = if args.client {
        SocketRole::Client
    } else {
        SocketRole::Server
    };
    cfg.queue_pairs = 1;
    cfg.offloads = if args.no_offloads {
        Offloads::none()
    } else {
        Offloads::checksum_and_tso()
    };
    let (port, mut qps) =
        Port::new(cfg).map_err(|e| Failure::Usage(vhu_examples::error_chain(&e)))?;
    let mut dp = DataPlane::new(uplink, args.burst);
    let res = dp.run(args, &port, &mut qps, stop);
    drop(port);
    print_counters(&qps, &dp);
    res.map_err(|e| Failure::Runtime(format!("data plane: {e}")))
}

/// Counters of the work done here (not by the library or the uplink).
#[derive(Debug, Default, Clone, Copy)]
struct PatchCounters {
    /// Guest TX super-frames (GSO) seen.
    tx_gso: u64,
    /// Guest TX frames whose checksum was completed here.
    tx_sw_csum: u64,
    /// Guest TX super-frames segmented here.
    tx_sw_segmented: u64,
    /// Segments those made.
    tx_sw_segments: u64,
    /// Guest TX frames dropped: the uplink's buffers stayed full.
    tx_full: u64,
    /// Guest TX frames dropped: larger than the uplink takes.
    tx_too_large: u64,
    /// Guest TX frames dropped: malformed offload metadata or headers.
    tx_offload_errors: u64,
    /// Uplink `tx_flush` errors.
    tx_flush_errors: u64,
    /// Uplink super-frames handed to the guest as such.
    rx_gso: u64,
    /// Uplink frames whose checksum was completed here for the guest.
    rx_sw_csum: u64,
    /// Uplink super-frames segmented here for the guest.
    rx_sw_segmented: u64,
    /// Segments those made.
    rx_sw_segments: u64,
    /// Uplink frames dropped: malformed offload metadata or headers.
    rx_offload_errors: u64,
    /// Uplink frames dropped because no guest RX ring ran.
    rx_no_guest: u64,
    /// Uplink `rx_burst` errors.
    rx_errors: u64,
}

/// A host byte slice as a [`FrameSource`].
struct Bytes<'a>(&'a [u8]);

impl FrameSource for Bytes<'_> {
    fn frame_len(&self) -> usize {
        self.0.len()
    }
    fn copy_into(&self, w: &mut FrameWriter<'_, '_>) {
        w.write(self.0);
    }
}

/// The data plane of one port and one uplink.
struct DataPlane<U> {
    uplink: U,
    burst: usize,
    /// Software offloads (scratch allocated once).
    seg: Segmenter,
    /// A whole frame copied out of guest memory or the uplink, for software
    /// offloads.
    scratch: Vec<u8>,
    /// The acked feature set last applied.
    acked: u64,
    /// What the guest accepts on receive (`GUEST_*` bits of `acked`).
    guest_accepts: u64,
    counters: PatchCounters,
    /// Frames are waiting for guest RX buffers.
    rx_blocked: bool,
}

impl<U: Attached> DataPlane<U> {
    fn new(uplink: U, burst: usize) -> Self {
        Self {
            uplink,
            burst,
            seg: Segmenter::new(),
            scratch: vec![0; Segmenter::DEFAULT_CAPACITY],
            acked: 0,
            guest_accepts: 0,
            counters: PatchCounters::default(),
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
        self.guest_accepts = acked & GUEST_OFFLOADS;
        if acked != 0 {
            tracing::info!(
                "port {}: guest acked features {acked:#x} (receive offloads {:#x})",
                port.name(),
                self.guest_accepts
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
        if let Some(cpu) = args.cpu {
            vhost_net_backend::sys::pin_current_thread(cpu)?;
            tracing::info!("data plane pinned to CPU {cpu}");
        }
        let mut poller = Poller::new()?;
        for qp in qps.iter_mut() {
            poller.add(qp)?;
        }
        let adaptive = args.poll == PollMode::Adaptive;
        if adaptive {
            // Only a poller that sleeps watches the uplink: a watched
            // socket makes the kernel wake its wait queue (a locked, IRQ-
            // saving call) for every transmitted frame it frees, about 6 %
            // of the kernel's per-frame work on AF_XDP and AF_PACKET.
            poller.add_fd(self.uplink.rx_fd(), TOKEN_UPLINK)?;
        }
        let idle = Duration::from_micros(args.idle_us);
        let mut last_work = Instant::now();
        let mut nap = NAP_MIN;
        while !stop.load(Ordering::Relaxed) {
            // One atomic load: the port mirrors the acked set lock-free.
            self.refresh_features(port);
            let mut moved = 0;
            for qp in qps.iter_mut() {
                moved += self.guest_to_uplink(qp);
                moved += self.uplink_to_guest(qp);
            }
            if moved > 0 {
                last_work = Instant::now();
                nap = NAP_MIN;
                continue;
            }
            if !adaptive {
                for qp in qps.iter_mut() {
                    qp.tx.disable_notifications();
                    qp.rx.disable_notifications();
                }
                std::hint::spin_loop();
                continue;
            }
            if last_work.elapsed() < idle {
                continue;
            }
            // Idle: ask for kicks and sleep unless something slipped in
            // meanwhile.
            let mut pending = false;
            for qp in qps.iter_mut() {
                pending |= qp.tx.enable_notifications();
                if qp.rx.is_running() && qp.rx.available(1) == 0 {
                    pending |= qp.rx.enable_notifications();
                }
            }
            if pending {
                last_work = Instant::now();
            } else if self.rx_blocked {
                // The uplink's descriptor may stay readable while its frames
                // wait for guest buffers, so epoll would not sleep: nap, a
                // little longer each time, without spinning in between.
                std::thread::sleep(nap);
                nap = (nap * 2).min(NAP_MAX);
            } else {
                poller.wait(Some(SLEEP_MAX))?;
                // Woken by work (or the timeout): poll for a while again.
                last_work = Instant::now();
            }
            for qp in qps.iter_mut() {
                qp.tx.disable_notifications();
                qp.rx.disable_notifications();
            }
        }
        Ok(())
    }

    /// Guest TX → uplink, one burst. Returns the frames dequeued.
    fn guest_to_uplink(&mut self, qp: &mut QueuePair) -> usize {
        let Self {
            uplink,
            seg,
            scratch,
            counters: c,
            burst,
            ..
        } = self;
        let n = qp.tx.recv_burst(*burst, |frame| {
            let hdr = *frame.hdr();
            if hdr.is_gso() {
                c.tx_gso += 1;
            }
            match push_retry(uplink, &hdr, &*frame) {
                Ok(()) => {}
                Err(DropReason::OffloadUnsupported) => {
                    tx_in_software(uplink, seg, scratch, c, &hdr, frame)
                }
                Err(DropReason::NoBuffers) => {
                    c.tx_full += 1;
                    uplink.tx_drop(DropReason::NoBuffers);
                }
                Err(DropReason::TooLong) => c.tx_too_large += 1,
                // Counted by the uplink.
                Err(_) => {}
            }
        });
        if n > 0 {
            if let Err(e) = uplink.tx_flush() {
                c.tx_flush_errors += 1;
                if c.tx_flush_errors.is_power_of_two() {
                    tracing::warn!(
                        "uplink {}: tx: flush failed ({} times so far): {e}",
                        uplink.name(),
                        c.tx_flush_errors
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
            let c = &mut self.counters;
            let r = self.uplink.rx_burst(burst, &mut |_, _| c.rx_no_guest += 1);
            return self.rx_result(r);
        }
        let avail = qp.rx.available(MAX_RX_AVAIL);
        if avail == 0 {
            self.rx_blocked = true;
            return 0;
        }
        self.rx_blocked = false;
        let per_frame = if self.uplink.offloads().rx & RX_SUPER_FRAMES != 0 {
            // Super-frames may come, whole or as software segments.
            RX_BUFFERS_PER_SUPER_FRAME
        } else {
            1
        };
        let max = (avail / per_frame).clamp(1, burst);
        let Self {
            uplink,
            seg,
            scratch,
            counters: c,
            guest_accepts,
            ..
        } = self;
        let accepts = *guest_accepts;
        let mut rx = qp.rx.burst();
        let r = uplink.rx_burst(max, &mut |hdr, bytes| {
            if offload::fits(hdr, accepts) {
                match rx.push(hdr, bytes) {
                    Ok(()) => {
                        if hdr.is_gso() {
                            c.rx_gso += 1;
                        }
                        return;
                    }
                    // The guest changed its features under us: take the
                    // software path below (the drop is already counted).
                    Err(DropReason::OffloadUnsupported) => {}
                    Err(_) => return,
                }
            }
            let Some(buf) = scratch.get_mut(..bytes.len()) else {
                c.rx_offload_errors += 1;
                return;
            };
            buf.copy_from_slice(bytes);
            let gso = hdr.is_gso();
            // A frame that fitted the features we knew was refused: the
            // guest renegotiated, so assume it takes no offloads.
            let accepts = if offload::fits(hdr, accepts) {
                0
            } else {
                accepts
            };
            match offload::lend_within(hdr, buf, accepts, seg, &mut |h, s| {
                let _ = rx.push(h, s);
            }) {
                Ok(n) if gso => {
                    c.rx_sw_segmented += 1;
                    c.rx_sw_segments += n as u64;
                }
                Ok(_) => c.rx_sw_csum += 1,
                Err(_) => c.rx_offload_errors += 1,
            }
        });
        drop(rx);
        self.rx_result(r)
    }

    fn rx_result(&mut self, r: std::io::Result<usize>) -> usize {
        match r {
            Ok(n) => n,
            Err(e) => {
                let c = &mut self.counters;
                c.rx_errors += 1;
                if c.rx_errors.is_power_of_two() {
                    tracing::warn!(
                        "uplink {}: rx: {e} ({} errors so far)",
                        self.uplink.name(),
                        c.rx_errors
                    );
                }
                0
            }
        }
    }
}

/// `tx_push`, flushing and retrying while the uplink's buffers are full.
fn push_retry<U: Uplink>(
    uplink: &mut U,
    hdr: &VirtioNetHdr,
    frame: &dyn FrameSource,
) -> Result<(), DropReason> {
    match uplink.tx_push(hdr, frame) {
        Err(DropReason::NoBuffers) => {}
        r => return r,
    }
    for _ in 0..FULL_RETRIES {
        let _ = uplink.tx_flush();
        match uplink.tx_push(hdr, frame) {
            Err(DropReason::NoBuffers) => std::hint::spin_loop(),
            r => return r,
        }
    }
    Err(DropReason::NoBuffers)
}

/// Counts a frame `push_retry` could not hand over (once: in the uplink's
/// counters for reasons it does not count itself, and in ours).
fn count_push_failure<U: Uplink>(uplink: &mut U, c: &mut PatchCounters, r: DropReason) {
    match r {
        DropReason::NoBuffers => {
            c.tx_full += 1;
            uplink.tx_drop(r);
        }
        DropReason::OffloadUnsupported => {
            c.tx_offload_errors += 1;
            uplink.tx_drop(r);
        }
        DropReason::TooLong => c.tx_too_large += 1,
        _ => {}
    }
}

/// A guest frame the uplink refused for its offload metadata: copy it out,
/// complete its checksum or segment it, and push the result as plain frames.
fn tx_in_software<U: Uplink>(
    uplink: &mut U,
    seg: &mut Segmenter,
    scratch: &mut [u8],
    c: &mut PatchCounters,
    hdr: &VirtioNetHdr,
    frame: &TxFrame<'_>,
) {
    let len = frame.len();
    let Some(buf) = scratch.get_mut(..len) else {
        c.tx_too_large += 1;
        return;
    };
    if frame.copy_to(0, buf) != len {
        c.tx_offload_errors += 1;
        return;
    }
    let plain = VirtioNetHdr::default();
    if hdr.is_gso() {
        let mut segments = 0u64;
        let res = seg.segment(hdr, buf, &mut |s| {
            match push_retry(uplink, &plain, &Bytes(s)) {
                Ok(()) => segments += 1,
                Err(r) => count_push_failure(uplink, c, r),
            }
            true
        });
        match res {
            Ok(_) => {
                c.tx_sw_segmented += 1;
                c.tx_sw_segments += segments;
            }
            Err(_) => c.tx_offload_errors += 1,
        }
        return;
    }
    if offload::complete_checksum(hdr, buf).is_err() {
        c.tx_offload_errors += 1;
        return;
    }
    match push_retry(uplink, &plain, &Bytes(buf)) {
        Ok(()) => c.tx_sw_csum += 1,
        Err(r) => count_push_failure(uplink, c, r),
    }
}

fn print_counters<U: Uplink>(qps: &[QueuePair], dp: &DataPlane<U>) {
    vhu_examples::print_queue_counters(qps);
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
    let c = &dp.counters;
    println!(
        "patch tx_gso={} tx_sw_csum={} tx_sw_segmented={} tx_sw_segments={} tx_full={} \
         tx_too_large={} tx_offload_errors={} tx_flush_errors={} rx_gso={} rx_sw_csum={} \
         rx_sw_segmented={} rx_sw_segments={} rx_offload_errors={} rx_no_guest={} rx_errors={}",
        c.tx_gso,
        c.tx_sw_csum,
        c.tx_sw_segmented,
        c.tx_sw_segments,
        c.tx_full,
        c.tx_too_large,
        c.tx_offload_errors,
        c.tx_flush_errors,
        c.rx_gso,
        c.rx_sw_csum,
        c.rx_sw_segmented,
        c.rx_sw_segments,
        c.rx_offload_errors,
        c.rx_no_guest,
        c.rx_errors
    );
}
