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
//!         [--in-order default,0,1] [--queue-size 256,1024] [--warmup SECS]
//!         [--window SECS] [--histogram] [--bursts N]
//! ```
//!
//! `--bursts N`: the frontend injects N bursts of 32 frames (`start
//! tx_first N`; 32 unless given), the frames that then circulate.
//!
//! `--queue-size` sets virtio-user's `queue_size=` (and testpmd's
//! `--txd`/`--rxd` to match); 256, virtio-user's default, unless given.
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
//!
//! Headroom (the frontend bounds the loop at small frames, so Mpps alone
//! cannot say how much cheaper a backend is): each run also prints, over
//! the same window, the backend's busy cycles per frame and the fraction of
//! its core they take. Ours: echo's own accounting (SIGUSR1 snapshots at
//! both ends of the window; TSC cycles of the polling rounds that moved
//! frames, the whole round included). DPDK's: testpmd's
//! `--record-core-cycles` (`show fwd stats all` at both ends; TSC cycles of
//! the forwarding calls that received packets, receive to transmit, the
//! loop between calls not included, so it reads a little low against
//! ours). Where the machine has hardware counters (`perf stat -e
//! instructions true` counts), `perf stat` of each backend process over the
//! window adds cycles and instructions per frame; where it has none, the
//! program says so.
//!
//! The frontend runs with `--record-core-cycles` too, and each run prints
//! its cycles per frame over the window (the same count as DPDK's backend
//! above): where the frontend bounds the loop, this says what the loop costs
//! it with each backend.
//!
//! `--histogram` runs echo with `--histogram` and prints, per run, how full
//! its bursts were and what each left in the rings (whole run, warm-up
//! included).
//!
//! The table gives the median ratio over all runs, and within each
//! placement of the two CPUs (near: c2c below the far threshold at both
//! ends of the run; far: above it at both; runs that moved are in neither):
//! the placement moves both backends' figures more than they differ.
//! Each run line also gives both CPUs' speed before and after the run (a
//! fixed integer loop's ns per 1000 steps, `bench::core_speed_ns`): a run
//! slower than its neighbours with the CPU slower too is the host's.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use vhu_benches as bench;
use vhu_tests::echo::{CyclesLine, Echo};
use vhu_tests::features::VIRTIO_USER_LOCAL_BITS;
use vhu_tests::process::RunDir;
use vhu_tests::testpmd::{
    self, hugepages_available, last_hex_after, start_vhost_backend, CoreCycles, FrontendOpts,
    Testpmd, Throughput, VhostBackendOpts,
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
    /// Frontend `queue_size=` values: ring entries.
    queue_sizes: Vec<u16>,
    warmup: Duration,
    window: Duration,
    /// Echo prints how full its bursts were (`echo --histogram`).
    histogram: bool,
    /// Bursts of 32 frames the frontend injects (`start tx_first N`).
    bursts: u32,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        reps: 5,
        sizes: vec![64, 1514],
        huge: vec![false, true],
        rings: vec![false],
        in_order: vec![None],
        queue_sizes: vec![256],
        warmup: Duration::from_secs(3),
        window: Duration::from_secs(5),
        histogram: false,
        bursts: 32,
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
            "--queue-size" => {
                a.queue_sizes = v()?
                    .split(',')
                    .map(|s| match s.parse::<u16>() {
                        Ok(n) if (16..=32768).contains(&n) && n.is_power_of_two() => Ok(n),
                        _ => Err(format!(
                            "--queue-size: {s}: a power of two from 16 to 32768"
                        )),
                    })
                    .collect::<Result<_, _>>()?
            }
            "--warmup" => a.warmup = Duration::from_secs(v()?.parse().map_err(|e| format!("{e}"))?),
            "--window" => a.window = Duration::from_secs(v()?.parse().map_err(|e| format!("{e}"))?),
            "--histogram" => a.histogram = true,
            "--bursts" => {
                a.bursts = match v()?.parse::<u32>() {
                    Ok(n) if (1..=1024).contains(&n) => n,
                    _ => return Err("--bursts: a count from 1 to 1024".into()),
                }
            }
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

/// Where the backend's core went over the window.
#[derive(Debug, Clone, Copy, Default)]
struct Headroom {
    /// Busy cycles per frame.
    per_frame: f64,
    /// Busy cycles over the window's cycles (ours: over its polling
    /// cycles; DPDK's: over the TSC rate times the window).
    fraction: f64,
    /// `perf stat` cycles and instructions per frame, where counted.
    perf: Option<(f64, f64)>,
}

/// Whether `perf stat` counts hardware events here (`perf stat -e
/// instructions true`); the reason when it does not.
fn perf_counters() -> Result<(), String> {
    let out = std::process::Command::new("perf")
        .args(["stat", "-x,", "-e", "instructions", "true"])
        .output()
        .map_err(|e| format!("perf: {e}"))?;
    let err = String::from_utf8_lossy(&out.stderr);
    match err.lines().find(|l| l.contains("instructions")) {
        Some(l)
            if l.split(',')
                .next()
                .is_some_and(|v| v.trim().parse::<u64>().is_ok()) =>
        {
            Ok(())
        }
        Some(l) => Err(format!(
            "`perf stat -e instructions true` says {:?}",
            l.trim()
        )),
        None => Err(format!(
            "`perf stat -e instructions true` printed {:?}",
            err.trim()
        )),
    }
}

/// A `perf stat` of process `pid` counting cycles and instructions until
/// [`perf_stop`].
fn perf_start(pid: u32) -> Option<std::process::Child> {
    std::process::Command::new("perf")
        .args([
            "stat",
            "-x,",
            "-e",
            "cycles,instructions",
            "-p",
            &pid.to_string(),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .ok()
}

/// Stops a [`perf_start`]ed count: (cycles, instructions).
fn perf_stop(p: std::process::Child) -> Option<(u64, u64)> {
    // perf prints its counts when interrupted.
    let _ = std::process::Command::new("kill")
        .args(["-INT", &p.id().to_string()])
        .status();
    let out = p.wait_with_output().ok()?;
    let err = String::from_utf8_lossy(&out.stderr);
    let count = |event: &str| {
        err.lines()
            .find(|l| l.split(',').nth(2).is_some_and(|e| e.starts_with(event)))
            .and_then(|l| l.split(',').next()?.trim().parse::<u64>().ok())
    };
    Some((count("cycles")?, count("instructions")?))
}

/// One row of the table: what both backends are measured under.
#[derive(Debug, Clone, Copy)]
struct Row {
    huge: bool,
    packed: bool,
    queue_size: u16,
    in_order: Option<bool>,
    size: u16,
}

/// One run: start the backend, then the frontend, inject, measure, stop,
/// and check the run's conditions (see the module doc).
fn run(backend: Backend, row: Row, a: &Args, perf: bool) -> Result<(Throughput, Headroom), String> {
    let Row {
        huge,
        packed,
        queue_size,
        in_order,
        size,
    } = row;
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
                if a.histogram {
                    &["--poll", "busy", "--no-offloads", "--histogram"]
                } else {
                    &["--poll", "busy", "--no-offloads"]
                },
                Some(&[0]),
            ))
        }
        Backend::Dpdk => {
            let mut o = VhostBackendOpts::new(&socket);
            o.port.hugepages = huge;
            o.port.extra_args.push("--record-core-cycles".into());
            dpdk = Some(start_vhost_backend(&o));
        }
    }
    let mut fe = FrontendOpts::new(&socket);
    fe.port.hugepages = huge;
    fe.port.extra_args.push("--record-core-cycles".into());
    fe.pkt_len = Some(size);
    fe.packed_vq = packed.then_some(true);
    fe.in_order = in_order;
    fe.queue_size = Some(queue_size);
    fe.port.txd = queue_size;
    fe.port.rxd = queue_size;
    let mut fe = Testpmd::spawn(&fe);
    fe.wait_ready(Duration::from_secs(60));
    fe.wait_link_up(Duration::from_secs(30));
    fe.start_tx_first(a.bursts);
    let peers: Vec<u32> = echo
        .iter()
        .map(|e| e.pid())
        .chain(dpdk.iter().map(|d| d.pid()))
        .collect();
    let backend_pid = peers[0];
    let mut dpdk_cycles: Vec<Option<CoreCycles>> = Vec::new();
    let mut perf_run = None;
    let mut perf_counts = None;
    let t = fe.measure_marked(a.warmup, a.window, &peers, &mut |end| {
        if let Some(e) = &echo {
            e.report_cycles();
        }
        if let Some(d) = dpdk.as_mut() {
            dpdk_cycles.push(d.core_cycles());
        }
        if perf {
            if end {
                perf_counts = perf_run.take().and_then(perf_stop);
            } else {
                perf_run = perf_start(backend_pid);
            }
        }
    });
    fe.stop();
    let fe_features = fe.negotiated_features();
    let (status, log) = fe.quit();
    let mut backend_features = None;
    let mut head = Headroom::default();
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
        for l in out.stdout.lines() {
            if l.starts_with("bursts ") || l.starts_with("after ") {
                println!("  echo: {l}");
            }
        }
        backend_features = Some(
            last_hex_after(&out.stderr, &[ECHO_FEATURES_MARKER])
                .ok_or_else(|| format!("echo did not log its acked features\n{out}"))?,
        );
        // The window's two snapshots, then the line printed on exit.
        let lines = CyclesLine::parse_all(&out.stdout);
        let [start, end, _exit] = lines[..] else {
            return Err(format!(
                "echo printed {} cycles lines, not 3\n{out}",
                lines.len()
            ));
        };
        let w = end.since(&start);
        head.per_frame = w
            .busy_per_frame()
            .ok_or_else(|| format!("echo moved no frame in the window\n{out}"))?;
        head.fraction = w.busy_fraction().unwrap_or(0.0);
        if let Some((cy, ins)) = perf_counts {
            head.perf = Some((cy as f64 / w.frames as f64, ins as f64 / w.frames as f64));
        }
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
        let [Some(start), Some(end)] = dpdk_cycles[..] else {
            return Err(format!(
                "testpmd --record-core-cycles printed no `CPU cycles/packet` line at both ends of the window: {dpdk_cycles:?}\n{dlog}"
            ));
        };
        let w = end.since(&start);
        head.per_frame = w
            .per_packet()
            .ok_or_else(|| format!("DPDK's backend received no packet in the window\n{dlog}"))?;
        head.fraction = w.fraction_of(a.window).unwrap_or(0.0);
        if let Some((cy, ins)) = perf_counts {
            head.perf = Some((cy as f64 / w.packets as f64, ins as f64 / w.packets as f64));
        }
    }
    if !status.success() {
        return Err(format!("frontend exited with {status}\n{log}"));
    }
    if t.rx_packets == 0 {
        return Err(format!("no traffic\n{log}"));
    }
    let f = bench::check_features(fe_features, packed, in_order)?;
    println!(
        "  features: frontend negotiated {f:#x}, backend {}",
        backend_features.map_or_else(|| "-".to_owned(), |b| format!("{b:#x}"))
    );
    // Echo acked what testpmd negotiated, but for the bits virtio-user keeps
    // to itself.
    let local = VIRTIO_USER_LOCAL_BITS;
    if backend == Backend::Ours && backend_features.map(|b| b & !local) != Some(f & !local) {
        return Err(format!(
            "echo acked {backend_features:#x?}, testpmd negotiated {f:#x}"
        ));
    }
    bench::check_frame_len(t.avg_frame_len(), size)?;
    Ok((t, head))
}

/// Why a run's figure is not trustworthy, if it is not.
fn noise((t, _): &(Throughput, Headroom)) -> Option<String> {
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

/// The median, or NaN (printed as such) when no run gave the figure.
fn median_or_nan(v: &[f64]) -> f64 {
    if v.is_empty() {
        f64::NAN
    } else {
        bench::median(v)
    }
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
    let perf = match perf_counters() {
        Ok(()) => {
            println!("perf: hardware counters available: cycles and instructions per frame from `perf stat -p` of each backend over the window");
            true
        }
        Err(why) => {
            println!("perf: no hardware counters on this machine ({why}): no perf cycles or instructions per frame; busy cycles come from the backends' own TSC accounting");
            false
        }
    };
    let mut summary = Vec::new();
    let mut noisy_runs = 0;
    for &huge in &a.huge {
        for (packed, qs) in a
            .rings
            .iter()
            .flat_map(|&p| a.queue_sizes.iter().map(move |&q| (p, q)))
        {
            for &in_order in &a.in_order {
                for &size in &a.sizes {
                    let row = Row {
                        huge,
                        packed,
                        queue_size: qs,
                        in_order,
                        size,
                    };
                    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
                    let (mut ours_cy, mut theirs_cy) = (Vec::new(), Vec::new());
                    // The frontend's own cycles per frame with each backend.
                    let (mut ours_fe, mut theirs_fe) = (Vec::new(), Vec::new());
                    let (mut ours_busy, mut theirs_busy) = (Vec::new(), Vec::new());
                    let (mut ours_near, mut theirs_near) = (Vec::new(), Vec::new());
                    let (mut ours_far, mut theirs_far) = (Vec::new(), Vec::new());
                    for rep in 0..a.reps {
                        for b in bench::abba(rep, Backend::Ours, Backend::Dpdk) {
                            let c2c_before = bench::core_to_core_ns();
                            let speed_before = [bench::core_speed_ns(0), bench::core_speed_ns(1)];
                            let r = bench::quiet_run(ATTEMPTS, || run(b, row, &a, perf), noise);
                            let c2c = (c2c_before, bench::core_to_core_ns());
                            let speed = [
                                speed_before,
                                [bench::core_speed_ns(0), bench::core_speed_ns(1)],
                            ];
                            let place = bench::placement(c2c.0, c2c.1);
                            let ((t, head), noisy) = match r {
                                Ok(r) => r,
                                Err(e) => {
                                    eprintln!("vs-dpdk: {b:?} size {size} rep {rep}: {e}");
                                    return ExitCode::FAILURE;
                                }
                            };
                            println!(
                            "run huge={huge} ring={} queue_size={qs} in_order={} size={size} rep={rep} backend={b:?}: {:.2} Mpps \
                             (host clock {:.2}, avg frame {:.1} B, foreign cpu {:.1} %, steal {:.1} %), \
                             busy {:.0} cycles/frame, {:.0} % of its core{}; frontend {}; cores {place} (c2c {:.0}/{:.0} ns); \
                             CPU speed {:.0}/{:.0} ns per 1000 steps on CPU 0 (backend), {:.0}/{:.0} on CPU 1{}",
                            if packed { "packed" } else { "split" },
                            io_name(in_order),
                            t.mpps(),
                            t.mpps_host_clock(),
                            t.avg_frame_len(),
                            t.foreign * 100.0,
                            t.steal * 100.0,
                            head.per_frame,
                            head.fraction * 100.0,
                            head.perf.map_or_else(String::new, |(c, i)| format!(
                                ", perf {c:.0} cycles {i:.0} instructions/frame"
                            )),
                            t.cycles.and_then(|c| Some((c.per_packet()?, c.fraction_of(t.window)?))).map_or_else(
                                || "no cycles".to_owned(),
                                |(p, f)| format!("{p:.0} cycles/frame, {:.0} % of its core", f * 100.0)
                            ),
                            c2c.0,
                            c2c.1,
                            speed[0][0],
                            speed[1][0],
                            speed[0][1],
                            speed[1][1],
                            if noisy { " NOISY" } else { "" }
                        );
                            if noisy {
                                noisy_runs += 1;
                            }
                            match (place, b) {
                                ("near", Backend::Ours) => ours_near.push(t.mpps()),
                                ("near", Backend::Dpdk) => theirs_near.push(t.mpps()),
                                ("far", Backend::Ours) => ours_far.push(t.mpps()),
                                ("far", Backend::Dpdk) => theirs_far.push(t.mpps()),
                                _ => {}
                            }
                            match b {
                                Backend::Ours => {
                                    ours.push(t.mpps());
                                    ours_cy.push(head.per_frame);
                                    ours_fe.extend(t.cycles.and_then(|c| c.per_packet()));
                                    ours_busy.push(head.fraction);
                                }
                                Backend::Dpdk => {
                                    theirs.push(t.mpps());
                                    theirs_cy.push(head.per_frame);
                                    theirs_fe.extend(t.cycles.and_then(|c| c.per_packet()));
                                    theirs_busy.push(head.fraction);
                                }
                            }
                        }
                    }
                    // The runs are listed in order.
                    ours.sort_by(f64::total_cmp);
                    theirs.sort_by(f64::total_cmp);
                    let (mo, md) = (bench::median(&ours), bench::median(&theirs));
                    let headroom = [
                        bench::median(&ours_cy),
                        bench::median(&theirs_cy),
                        bench::median(&ours_busy),
                        bench::median(&theirs_busy),
                        median_or_nan(&ours_fe),
                        median_or_nan(&theirs_fe),
                    ];
                    summary.push((
                        huge,
                        (packed, qs),
                        in_order,
                        size,
                        mo,
                        md,
                        ours.clone(),
                        theirs.clone(),
                        headroom,
                        [(ours_near, theirs_near), (ours_far, theirs_far)],
                    ));
                }
            }
        }
    }
    println!();
    println!("| hugepages | ring | in_order | frame | ours (echo busy) median Mpps | DPDK vhost PMD median Mpps | ratio ours/DPDK | busy cycles/frame ours / DPDK | busy share of the core ours / DPDK | frontend cycles/frame with ours / with DPDK | runs ours | runs DPDK | CPUs near: runs ours / DPDK, median ratio | CPUs far: runs ours / DPDK, median ratio |");
    println!("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|---|");
    for (huge, (packed, qs), in_order, size, mo, md, o, d, [oc, dc, ob, db, of, df], [near, far]) in
        summary
    {
        // Ratios within one placement: the CPUs' distance moves both
        // backends' figures by up to 3x, more than the backends differ.
        let class = |(on, dn): (Vec<f64>, Vec<f64>)| {
            if on.is_empty() || dn.is_empty() {
                format!("{} / {}", on.len(), dn.len())
            } else {
                format!(
                    "{} / {}, {:.2}",
                    on.len(),
                    dn.len(),
                    bench::median(&on) / bench::median(&dn)
                )
            }
        };
        let (near, far) = (class(near), class(far));
        println!(
            "| {} | {} {qs} | {} | {size} B | {mo:.2} | {md:.2} | {:.2} | {oc:.0} / {dc:.0} | {:.0} % / {:.0} % | {of:.0} / {df:.0} | {} | {} | {near} | {far} |",
            if huge { "yes" } else { "no" },
            if packed { "packed" } else { "split" },
            io_name(in_order),
            mo / md,
            ob * 100.0,
            db * 100.0,
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
