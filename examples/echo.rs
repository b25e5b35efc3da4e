// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! `echo`: a vhost-user-net device that reflects every frame the guest
//! transmits back into the guest's RX queue, swapping source and destination
//! MAC addresses, on every queue pair.
//!
//! ```text
//! echo --socket PATH [--client] [--queues N] [--poll busy|adaptive|interrupt]
//!      [--cpu N] [--idle-us US] [--burst N] [--no-offloads] [--histogram]
//! ```
//!
//! Offloads (checksum, TSO) are offered, so the frame's `virtio_net_hdr`
//! travels back with it. It logs connects and disconnects (`VHU_LOG` sets
//! the filter, default `info`) and on SIGINT/SIGTERM prints one line of
//! counters per queue pair on stdout:
//!
//! ```text
//! qp=0 tx_packets=N tx_bytes=N rx_packets=N rx_bytes=N tx_dropped=N rx_dropped=N
//! ```
//!
//! `tx` counts frames the guest transmitted (that echo dequeued), `rx`
//! frames echo delivered into the guest. Then one line of where the
//! data-plane thread's cycles went (TSC cycles in rounds that moved frames
//! and in rounds that found none, frames moved); SIGUSR1 prints the same
//! line at any time, for a benchmark to take the difference over a window:
//!
//! ```text
//! cycles busy=N idle=N frames=N busy_per_frame=X busy_fraction=Y
//! ```
//!
//! `--histogram` adds, on exit, how full the bursts were: for each burst
//! that moved frames, its size, and what was left after it (RX buffers
//! free, TX frames pending, both counted up to 64), as `value:count`
//! pairs (a diagnostic: it reads both rings once more per burst):
//!
//! ```text
//! bursts moved 32:3387232
//! after rx_free 0:1162 32:72212 64:3313858
//! after tx_pending 0:13808 32:163407 64:3210017
//! ```
#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::{Parser, ValueEnum};
use vhost_net_backend::poll::{self, PollLoop};
use vhost_net_backend::{Port, QueuePair};
use vhu_examples::PortArgs;

/// How the data-plane thread waits for work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum PollMode {
    /// Spin on the rings all the time (lowest latency, one full core).
    Busy,
    /// Spin while there is traffic; after `--idle-us` without any, ask for
    /// guest kicks and sleep.
    Adaptive,
    /// Sleep whenever there is no work.
    Interrupt,
}

/// Reflect guest TX frames back into guest RX.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    #[command(flatten)]
    port: PortArgs,
    /// Number of queue pairs.
    #[arg(long, default_value_t = 1)]
    queues: u16,
    /// Polling mode of the data-plane thread.
    #[arg(long, value_enum, default_value_t = PollMode::Adaptive)]
    poll: PollMode,
    /// Idle time before an adaptive poller sleeps, in microseconds.
    #[arg(long, default_value_t = 200)]
    idle_us: u64,
    /// Do not offer checksum and segmentation offloads.
    #[arg(long)]
    no_offloads: bool,
    /// Frames per burst.
    #[arg(long, default_value_t = 32)]
    burst: usize,
    /// Pin the data-plane thread to this CPU.
    #[arg(long)]
    cpu: Option<usize>,
    /// Print how full the bursts were on exit.
    #[arg(long)]
    histogram: bool,
}

/// Bursts by size, and what each left in the rings.
#[derive(Debug)]
struct Histogram {
    moved: [u64; 65],
    rx_free: [u64; 65],
    tx_pending: [u64; 65],
}

impl Histogram {
    fn record(&mut self, moved: usize, qp: &mut QueuePair) {
        self.moved[moved.min(64)] += 1;
        self.rx_free[qp.rx.available(64)] += 1;
        self.tx_pending[qp.tx.pending().min(64)] += 1;
    }

    fn print(&self) {
        let line = |h: &[u64]| {
            h.iter()
                .enumerate()
                .filter(|&(_, &n)| n > 0)
                .map(|(i, n)| format!("{i}:{n}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        println!("bursts moved {}", line(&self.moved));
        println!("after rx_free {}", line(&self.rx_free));
        println!("after tx_pending {}", line(&self.tx_pending));
    }
}

fn main() -> ExitCode {
    vhu_examples::init_logging();
    let args = Args::parse();
    if !vhu_examples::burst_ok("echo", args.burst) {
        return ExitCode::from(64);
    }

    let stop = match vhu_examples::stop_on_signals() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("echo: cannot install a signal handler: {e}");
            return ExitCode::FAILURE;
        }
    };

    let mut cfg = args.port.port_config("echo", args.no_offloads);
    cfg.queue_pairs = args.queues;
    let (port, mut qps) = match Port::new(cfg) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("echo: {}", vhu_examples::error_chain(&e));
            return ExitCode::from(64);
        }
    };

    let mut hist = args.histogram.then(|| {
        Box::new(Histogram {
            moved: [0; 65],
            rx_free: [0; 65],
            tx_pending: [0; 65],
        })
    });
    let cycles = match run(&args, &mut qps, &stop, hist.as_deref_mut()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("echo: {e}");
            return ExitCode::FAILURE;
        }
    };
    vhu_examples::print_queue_counters(&qps);
    vhu_examples::print_cycles(&cycles);
    if let Some(h) = hist {
        h.print();
    }
    // The queues go first: the port's shutdown then stops rings that no
    // data plane holds any more, without waiting for an acknowledgement
    // that would never come (a connected frontend's rings run).
    drop(qps);
    drop(port);
    ExitCode::SUCCESS
}

/// The data-plane loop: one thread serving every queue pair. Returns where
/// its cycles went.
fn run(
    args: &Args,
    qps: &mut [QueuePair],
    stop: &AtomicBool,
    mut hist: Option<&mut Histogram>,
) -> std::io::Result<std::sync::Arc<vhost_net_backend::LoopCycles>> {
    let mut poller = vhu_examples::data_plane_poller(args.cpu, qps)?;
    let mode = match args.poll {
        PollMode::Busy => poll::PollMode::Busy,
        PollMode::Adaptive => poll::PollMode::Adaptive,
        PollMode::Interrupt => poll::PollMode::Interrupt,
    };
    let mut poll = PollLoop::new(mode, Duration::from_micros(args.idle_us));
    vhu_examples::print_cycles_on_usr1(std::sync::Arc::clone(poll.cycles()))?;
    while !stop.load(Ordering::Relaxed) {
        let mut moved = 0;
        for qp in qps.iter_mut() {
            let n = echo_burst(qp, args.burst);
            if let (Some(h), true) = (hist.as_deref_mut(), n > 0) {
                h.record(n, qp);
            }
            moved += n;
        }
        poll.round(moved, false, qps, &mut poller)?;
    }
    Ok(std::sync::Arc::clone(poll.cycles()))
}

/// Reflects up to `burst` frames of one queue pair. Returns frames moved.
///
/// Back-pressure: while the RX ring runs, no more frames are taken from TX
/// than RX has buffers for, so a full RX ring slows the guest's TX instead of
/// dropping; frames are dropped (and counted) only when RX is not running.
///
/// TX is looked at first: a round with nothing to send does not read the RX
/// ring. Counting RX buffers reads the descriptors the guest is posting
/// (packed rings: up to `burst` of them), and a line read while the guest
/// writes it costs the guest a round trip to take it back; with packed
/// rings this polls 1-4 % more frames through the loop
/// (docs/perf/fast-path-2026-12-05-to-06.md,
/// "The RX lines a fast backend reads").
fn echo_burst(qp: &mut QueuePair, burst: usize) -> usize {
    if !qp.tx.has_pending() {
        return 0;
    }
    let limit = if qp.rx.is_running() {
        qp.rx.available(burst)
    } else {
        burst
    };
    if limit == 0 {
        return 0;
    }
    qp.echo_burst(limit)
}
