// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The side-by-side benchmark: the same `dpdk-testpmd` virtio-user frontend
//! (mac forward, `start tx_first 32`, one forwarding core) against
//! (a) our `echo --poll busy` and (b) DPDK's vhost PMD (`net_vhost0`, io
//! forward), alternating A B A B, at each frame size, with and without
//! hugepages, split and packed rings. Prints every run, the medians and the
//! ratio ours/DPDK.
//!
//! ```text
//! vs-dpdk [--reps N] [--sizes 64,1514] [--huge no|yes|both] [--rings split,packed]
//!         [--in-order default,0,1] [--warmup SECS] [--window SECS]
//! ```
//!
//! Pinning (two cores): the frontend forwards on CPU 1; the backend (echo's
//! data-plane thread, or DPDK's forwarding lcore) polls CPU 0. Run
//! `benches/vs-dpdk.sh`, which builds what is needed first.
//!
//! Each run checks its own conditions and the program fails rather than
//! print a figure for a run that measured something else: both processes
//! exit cleanly (echo's counters are printed), the negotiated features match
//! the row (packed rings, `in_order`; echo acked exactly what testpmd
//! negotiated), and the received frames average exactly the row's size. A
//! run with more than 5 % foreign CPU load or 1 % steal time is repeated (up
//! to 3 attempts) and marked `NOISY` if it stays so; the order of the
//! backends alternates A B, B A (ABBA).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use vhu_tests::bench;
use vhu_tests::echo::Echo;
use vhu_tests::features::VIRTIO_USER_LOCAL_BITS;
use vhu_tests::testpmd::{
    self, hugepages_available, last_hex_after, start_vhost_backend, FrontendOpts, RunDir, Testpmd,
    Throughput, VhostBackendOpts,
};

/// Foreign CPU load (fraction of the machine) above which a run is noisy.
const MAX_FOREIGN: f64 = 0.05;
/// Steal time (fraction of the machine) above which a run is noisy.
const MAX_STEAL: f64 = 0.01;
/// Attempts at a quiet run before a noisy one is kept (and marked).
const ATTEMPTS: usize = 3;

/// What echo's port logs when the frontend acks its features.
const ECHO_FEATURES_MARKER: &str = ": features acked ";

#[derive(Debug, Clone)]
struct Args {
    reps: usize,
    sizes: Vec<u16>,
    huge: Vec<bool>,
    rings: Vec<bool>,
    /// Frontend `in_order=` values (`None`: virtio-user's default).
    in_order: Vec<Option<bool>>,
    warmup: Duration,
    window: Duration,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        reps: 5,
        sizes: vec![64, 1514],
        huge: vec![false, true],
        rings: vec![false],
        in_order: vec![None],
        warmup: Duration::from_secs(3),
        window: Duration::from_secs(5),
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().ok_or(format!("{k} needs a value"));
        match k.as_str() {
            "--reps" => a.reps = v()?.parse().map_err(|e| format!("--reps: {e}"))?,
            "--sizes" => {
                a.sizes = v()?
                    .split(',')
                    .map(|s| s.parse().map_err(|e| format!("--sizes: {e}")))
                    .collect::<Result<_, _>>()?
            }
            "--huge" => {
                a.huge = match v()?.as_str() {
                    "no" => vec![false],
                    "yes" => vec![true],
                    "both" => vec![false, true],
                    o => return Err(format!("--huge: {o}")),
                }
            }
            "--rings" => {
                a.rings = v()?
                    .split(',')
                    .map(|r| match r {
                        "split" => Ok(false),
                        "packed" => Ok(true),
                        o => Err(format!("--rings: {o}")),
                    })
                    .collect::<Result<_, _>>()?
            }
            "--in-order" => {
                a.in_order = v()?
                    .split(',')
                    .map(|r| match r {
                        "default" => Ok(None),
                        "0" => Ok(Some(false)),
                        "1" => Ok(Some(true)),
                        o => Err(format!("--in-order: {o}")),
                    })
                    .collect::<Result<_, _>>()?
            }
            "--warmup" => a.warmup = Duration::from_secs(v()?.parse().map_err(|e| format!("{e}"))?),
            "--window" => a.window = Duration::from_secs(v()?.parse().map_err(|e| format!("{e}"))?),
            o => return Err(format!("unknown argument {o}")),
        }
    }
    if a.reps == 0 {
        return Err("--reps must be at least 1".into());
    }
    Ok(a)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Ours,
    Dpdk,
}

/// One run: start the backend, then the frontend, inject, measure, stop,
/// and check the run's conditions (see the module doc).
fn run(
    backend: Backend,
    size: u16,
    huge: bool,
    packed: bool,
    in_order: Option<bool>,
    a: &Args,
) -> Result<Throughput, String> {
    let dir = RunDir::new("vsdpdk");
    let socket: PathBuf = dir.join("vhost.sock");
    let mut echo = None;
    let mut dpdk = None;
    match backend {
        Backend::Ours => {
            echo = Some(Echo::spawn_pinned(
                &socket,
                false,
                1,
                &["--poll", "busy", "--no-offloads"],
                Some(&[0]),
            ))
        }
        Backend::Dpdk => {
            let mut o = VhostBackendOpts::new(&socket);
            o.port.hugepages = huge;
            dpdk = Some(start_vhost_backend(&o));
        }
    }
    let mut fe = FrontendOpts::new(&socket);
    fe.port.hugepages = huge;
    fe.pkt_len = Some(size);
    fe.packed_vq = packed.then_some(true);
    fe.in_order = in_order;
    let mut fe = Testpmd::spawn(&fe);
    fe.wait_ready(Duration::from_secs(60));
    fe.wait_link_up(Duration::from_secs(30));
    fe.start_tx_first(32);
    let peers: Vec<u32> = echo
        .iter()
        .map(|e| e.pid())
        .chain(dpdk.iter().map(|d| d.pid()))
        .collect();
    let t = fe.measure_with_peers(a.warmup, a.window, &peers);
    fe.stop();
    let fe_features = fe.negotiated_features();
    let (status, log) = fe.quit();
    let mut backend_features = None;
    if let Some(e) = echo {
        let out = e.stop();
        if !out.status.success() {
            return Err(format!("echo exited with {}\n{out}", out.status));
        }
        let c = out.total();
        println!(
            "  echo: dequeued {} delivered {} dropped {} (tx) {} (rx)",
            c.tx_packets, c.rx_packets, c.tx_dropped, c.rx_dropped
        );
        backend_features = Some(
            last_hex_after(&out.stderr, &[ECHO_FEATURES_MARKER])
                .ok_or_else(|| format!("echo did not log its acked features\n{out}"))?,
        );
    }
    if let Some(mut d) = dpdk {
        backend_features = d.negotiated_features();
        let port = testpmd::sum_port_stats(&d.port_stats());
        let (st, dlog) = d.quit();
        if !st.success() {
            return Err(format!("DPDK's vhost backend exited with {st}\n{dlog}"));
        }
        println!(
            "  DPDK vhost: dequeued {} delivered {} (port stats)",
            port.rx_packets, port.tx_packets
        );
    }
    if !status.success() {
        return Err(format!("frontend exited with {status}\n{log}"));
    }
    if t.rx_packets == 0 {
        return Err(format!("no traffic\n{log}"));
    }
    let f = bench::check_features(fe_features, packed, in_order)?;
    // Echo acked what testpmd negotiated, but for the bits virtio-user keeps
    // to itself.
    let local = VIRTIO_USER_LOCAL_BITS;
    if backend == Backend::Ours && backend_features.map(|b| b & !local) != Some(f & !local) {
        return Err(format!(
            "echo acked {backend_features:#x?}, testpmd negotiated {f:#x}"
        ));
    }
    bench::check_frame_len(t.avg_frame_len(), size)?;
    Ok(t)
}

/// Why a run's figure is not trustworthy, if it is not.
fn noise(t: &Throughput) -> Option<String> {
    (t.foreign > MAX_FOREIGN || t.steal > MAX_STEAL).then(|| {
        format!(
            "foreign cpu {:.1} % (max {:.0}), steal {:.1} % (max {:.0})",
            t.foreign * 100.0,
            MAX_FOREIGN * 100.0,
            t.steal * 100.0,
            MAX_STEAL * 100.0
        )
    })
}

fn io_name(v: Option<bool>) -> &'static str {
    match v {
        None => "default",
        Some(false) => "0",
        Some(true) => "1",
    }
}

fn main() -> ExitCode {
    let a = match bench::args_or_usage("vs-dpdk", parse_args()) {
        Ok(a) => a,
        Err(code) => return code,
    };
    if a.huge.contains(&true) && !hugepages_available(256) {
        eprintln!("vs-dpdk: no hugepages: run scripts/hugepages.sh (or --huge no)");
        return ExitCode::FAILURE;
    }
    let _ = testpmd::testpmd_bin();
    let mut summary = Vec::new();
    let mut noisy_runs = 0;
    for &huge in &a.huge {
        for &packed in &a.rings {
            for &in_order in &a.in_order {
                for &size in &a.sizes {
                    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
                    for rep in 0..a.reps {
                        for b in bench::abba(rep, Backend::Ours, Backend::Dpdk) {
                            let r = bench::quiet_run(
                                ATTEMPTS,
                                || run(b, size, huge, packed, in_order, &a),
                                noise,
                            );
                            let (t, noisy) = match r {
                                Ok(r) => r,
                                Err(e) => {
                                    eprintln!("vs-dpdk: {b:?} size {size} rep {rep}: {e}");
                                    return ExitCode::FAILURE;
                                }
                            };
                            println!(
                            "run huge={huge} ring={} in_order={} size={size} rep={rep} backend={b:?}: {:.2} Mpps \
                             (host clock {:.2}, avg frame {:.1} B, foreign cpu {:.1} %, steal {:.1} %){}",
                            if packed { "packed" } else { "split" },
                            io_name(in_order),
                            t.mpps(),
                            t.mpps_host_clock(),
                            t.avg_frame_len(),
                            t.foreign * 100.0,
                            t.steal * 100.0,
                            if noisy { " NOISY" } else { "" }
                        );
                            if noisy {
                                noisy_runs += 1;
                            }
                            match b {
                                Backend::Ours => ours.push(t.mpps()),
                                Backend::Dpdk => theirs.push(t.mpps()),
                            }
                        }
                    }
                    // The runs are listed in order.
                    ours.sort_by(f64::total_cmp);
                    theirs.sort_by(f64::total_cmp);
                    let (mo, md) = (bench::median(&ours), bench::median(&theirs));
                    summary.push((
                        huge,
                        packed,
                        in_order,
                        size,
                        mo,
                        md,
                        ours.clone(),
                        theirs.clone(),
                    ));
                }
            }
        }
    }
    println!();
    println!("| hugepages | ring | in_order | frame | ours (echo busy) median Mpps | DPDK vhost PMD median Mpps | ratio ours/DPDK | runs ours | runs DPDK |");
    println!("|---|---|---|---:|---:|---:|---:|---|---|");
    for (huge, packed, in_order, size, mo, md, o, d) in summary {
        println!(
            "| {} | {} | {} | {size} B | {mo:.2} | {md:.2} | {:.2} | {} | {} |",
            if huge { "yes" } else { "no" },
            if packed { "packed" } else { "split" },
            io_name(in_order),
            mo / md,
            bench::runs(&o, 2),
            bench::runs(&d, 2)
        );
    }
    if noisy_runs > 0 {
        println!(
            "\n{noisy_runs} run(s) stayed noisy after {ATTEMPTS} attempts (marked NOISY above)"
        );
    }
    ExitCode::SUCCESS
}
