// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Plumbing shared by the examples in `examples/*.rs`: logging, stopping on
//! signals, error chains and the per-queue counter lines they print.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use vhost_net_backend::poll::Poller;
use vhost_net_backend::{DropReason, Offloads, PortConfig, QueuePair, SocketRole};

/// Largest burst the examples accept (the ring engine handles any; this
/// bounds latency).
pub const MAX_BURST: usize = 256;

/// The command-line options that place an example's vhost-user port
/// (flattened into each example's arguments).
#[derive(Debug, clap::Args)]
pub struct PortArgs {
    /// vhost-user socket path.
    #[arg(long)]
    pub socket: PathBuf,
    /// Connect to a socket the frontend created (and reconnect when it goes
    /// away) instead of creating one.
    #[arg(long)]
    pub client: bool,
}

impl PortArgs {
    /// The configuration of a port named `name` on this socket, in this
    /// role, offering checksum and TSO offloads unless `no_offloads`.
    #[must_use]
    pub fn port_config(&self, name: &str, no_offloads: bool) -> PortConfig {
        let mut cfg = PortConfig::new(name, &self.socket);
        cfg.role = if self.client {
            SocketRole::Client
        } else {
            SocketRole::Server
        };
        cfg.offloads = if no_offloads {
            Offloads::none()
        } else {
            Offloads::checksum_and_tso()
        };
        cfg
    }
}

/// Whether `burst` is a valid `--burst` (1 to [`MAX_BURST`]); if not, says
/// so on stderr, as `prog: ...`.
#[must_use]
pub fn burst_ok(prog: &str, burst: usize) -> bool {
    let ok = burst != 0 && burst <= MAX_BURST;
    if !ok {
        eprintln!("{prog}: --burst must be 1 to {MAX_BURST}");
    }
    ok
}

/// Logs to stderr, filtered by `VHU_LOG` (default `info`).
pub fn init_logging() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("VHU_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        // Colour codes only on a terminal, never into log files.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

/// A flag set by SIGINT or SIGTERM.
///
/// # Errors
/// A signal handler could not be installed.
pub fn stop_on_signals() -> std::io::Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))?;
    }
    Ok(stop)
}

/// Prepares the calling thread to run the data plane: pins it to `cpu` (if
/// given) and returns a poller that watches every queue pair's kicks.
///
/// # Errors
/// Pinning, or creating the poller or adding a queue pair to it, failed.
pub fn data_plane_poller(cpu: Option<usize>, qps: &mut [QueuePair]) -> std::io::Result<Poller> {
    if let Some(cpu) = cpu {
        vhost_net_backend::sys::pin_current_thread(cpu)?;
        tracing::info!("data plane pinned to CPU {cpu}");
    }
    let mut poller = Poller::new()?;
    for qp in qps.iter_mut() {
        poller.add(qp)?;
    }
    Ok(poller)
}

pub use vhost_net_backend::error_chain;

/// Prints one `qp=` line of counters per queue pair on stdout (the format the
/// end-to-end tests parse) and the non-zero drop reasons on stderr.
/// Prints where the data-plane thread's cycles went, on exit:
/// `cycles busy=N idle=N frames=N busy_per_frame=X busy_fraction=Y` (TSC
/// cycles; `-` where nothing moved).
pub fn print_cycles(c: &vhost_net_backend::LoopCycles) {
    use std::sync::atomic::Ordering::Relaxed;
    let opt = |v: Option<f64>, d: usize| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.d$}"));
    println!(
        "cycles busy={} idle={} frames={} busy_per_frame={} busy_fraction={}",
        c.busy_cycles.load(Relaxed),
        c.idle_cycles.load(Relaxed),
        c.frames.load(Relaxed),
        opt(c.busy_cycles_per_frame(), 1),
        opt(c.busy_fraction(), 3),
    );
}

/// From now on, each SIGUSR1 prints the `cycles` line of [`print_cycles`]
/// for `c` as it stands (a snapshot: a benchmark signals at the start and
/// the end of its window and takes the difference). A thread of its own
/// waits for the signal; the data plane does nothing more.
///
/// # Errors
/// The signal handler or the thread could not be set up.
pub fn print_cycles_on_usr1(c: Arc<vhost_net_backend::LoopCycles>) -> std::io::Result<()> {
    let mut signals = signal_hook::iterator::Signals::new([signal_hook::consts::SIGUSR1])?;
    std::thread::Builder::new()
        .name("cycles-report".into())
        .spawn(move || {
            for _ in signals.forever() {
                print_cycles(&c);
            }
        })?;
    Ok(())
}

/// Prints each queue pair's counters, on exit.
pub fn print_queue_counters(qps: &[QueuePair]) {
    for qp in qps {
        let tx = qp.tx.counters();
        let rx = qp.rx.counters();
        println!(
            "qp={} tx_packets={} tx_bytes={} rx_packets={} rx_bytes={} tx_dropped={} rx_dropped={}",
            qp.index(),
            tx.packets,
            tx.bytes,
            rx.packets,
            rx.bytes,
            tx.dropped(),
            rx.dropped()
        );
        for r in DropReason::ALL {
            let (t, x) = (tx.drops_for(r), rx.drops_for(r));
            if t + x > 0 {
                eprintln!("qp={} drops {}: tx={t} rx={x}", qp.index(), r.name());
            }
        }
    }
}
