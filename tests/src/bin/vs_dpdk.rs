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

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use vhu_tests::bench;
use vhu_tests::echo::Echo;
use vhu_tests::testpmd::{
    self, hugepages_available, start_vhost_backend, FrontendOpts, RunDir, Testpmd, Throughput,
    VhostBackendOpts,
};

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

/// One run: start the backend, then the frontend, inject, measure, stop.
fn run(
    backend: Backend,
    size: u16,
    huge: bool,
    packed: bool,
    in_order: Option<bool>,
    a: &Args,
) -> Throughput {
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
    let (status, log) = fe.quit();
    if let Some(e) = echo {
        let _ = e.stop();
    }
    if let Some(d) = dpdk {
        let _ = d.quit();
    }
    assert!(status.success(), "frontend exited with {status}\n{log}");
    assert!(t.rx_packets > 0, "no traffic\n{log}");
    t
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
    for &huge in &a.huge {
        for &packed in &a.rings {
            for &in_order in &a.in_order {
                for &size in &a.sizes {
                    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
                    for rep in 0..a.reps {
                        for b in [Backend::Ours, Backend::Dpdk] {
                            let t = run(b, size, huge, packed, in_order, &a);
                            println!(
                            "run huge={huge} ring={} in_order={} size={size} rep={rep} backend={b:?}: {:.2} Mpps \
                             (host clock {:.2}, avg frame {:.1} B, foreign cpu {:.1} %, steal {:.1} %)",
                            if packed { "packed" } else { "split" },
                            io_name(in_order),
                            t.mpps(),
                            t.mpps_host_clock(),
                            t.avg_frame_len(),
                            t.foreign * 100.0,
                            t.steal * 100.0
                        );
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
    ExitCode::SUCCESS
}
