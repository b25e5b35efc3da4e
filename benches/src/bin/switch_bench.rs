// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The two-port switch benchmark: one `dpdk-testpmd` with two virtio-user
//! ports (io forward, each port addressed to the other, `start tx_first
//! 32`, forwarding on CPU 1) through three switches, each busy-polling
//! CPU 0:
//!
//! * `vhu`: `vhu-switch --poll busy --pmd-cpus 0`, two vhost-user server
//!   ports, MAC learning;
//! * `xconnect`: testpmd's vhost PMD, `net_vhost0` and `net_vhost1`
//!   cross-connected by io forwarding: no switching, the ceiling;
//! * `ovs`: `ovs-vswitchd-dpdk` on a private database and run directory,
//!   one PMD (`pmd-cpu-mask=0x1`), two `dpdkvhostuser` ports on a netdev
//!   bridge whose only flow is NORMAL (MAC learning).
//!
//! The runs alternate (ABC CBA ABC ...) at every frame size; each run checks
//! its own conditions (the average received frame length is the size, both
//! ports received and sent, the switch exited cleanly) and records the
//! machine's foreign CPU and steal. Besides the frames per second each
//! switch's busy cycles per frame are read from its own counters over the
//! window: ours from `GET /metrics` (`vhu_pmd_busy_cycles_total` /
//! `vhu_pmd_frames_total`, summed over PMDs), testpmd's from
//! `--record-core-cycles` (`show fwd stats all`: "CPU cycles/packet"),
//! OVS's from `ovs-appctl dpif-netdev/pmd-stats-show` ("avg processing
//! cycles per packet"), with the busy fraction of the switch's core.
//!
//! Then the idle figure: an adaptive `vhu-switch` with four connected,
//! silent vhost-user ports (one testpmd with four virtio-user ports that
//! never starts forwarding): the switch's CPU time from `/proc/PID/stat`
//! over the idle window.
//!
//! ```text
//! switch-bench [--reps N] [--sizes 64,1514] [--switches vhu,xconnect,ovs]
//!              [--warmup SECS] [--window SECS] [--idle SECS] [--no-idle]
//!              [--max-busy PCT] [--quiet-wait SECS] [--perf DIR]
//!              [--trace SECS]
//! ```
//!
//! `--trace SECS` follows each run for SECS more seconds after its window,
//! printing the rate (the frontend's received frames) every 500 ms, and
//! for vhu its busy cycles per frame (`trace` lines), then the 10th, 50th
//! and 90th percentiles of those rates (`trace summary`): whether a run's
//! speed holds or flips within it, and each switch's fast and slow modes
//! compared with each other's.
//!
//! `--perf DIR` records a profile of the switch's processes over each
//! window (`perf record -e cpu-clock`: the machine's VM has no hardware
//! counters) into `DIR/<switch>-<size>-<n>.data`, for `perf report -i`.
//!
//! Before each run the harness waits up to `--quiet-wait` (20 s) for the
//! machine to be at most `--max-busy` (10 %) busy, and records how busy it
//! was; a run with more than 10 % busy before it, more than 5 % foreign CPU
//! (of both cores) or 2 % steal during its window is marked `NOISY`.
//!
//! Run `benches/vs-switches.sh`, which installs the peers and builds what
//! is needed first.

use std::fmt::Write as _;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use vhu_api::PortView;
use vhu_benches as bench;
use vhu_tests::process::{wait_for_path, RunDir};
use vhu_tests::switch::{switch_bin, SwitchProc};
use vhu_tests::testpmd::{
    self, hugepages_available, start_vhost_backend, FrontendOpts, Lcores, Testpmd, Throughput,
    VhostBackendOpts,
};

/// The frontend's two port addresses (virtio-user `mac=`).
const MACS: [&str; 2] = ["02:00:00:aa:00:00", "02:00:00:aa:00:01"];

/// The switch's core (the frontend forwards on the other one).
const SWITCH_CPU: u32 = Lcores::BACKEND.fwd;

/// Bursts of 32 frames per port injected by `start tx_first`.
const TX_FIRST_BURSTS: u32 = 32;

/// Time between both sides' ports being up and the injection.
const SETTLE: Duration = Duration::from_millis(500);

/// Foreign CPU (fraction of both cores) or steal above which a run is
/// marked noisy; before the run, the machine's own load.
const NOISY_FOREIGN: f64 = 0.05;
const NOISY_STEAL: f64 = 0.02;
const NOISY_PRE_BUSY: f64 = 0.10;

const OVS_VSWITCHD: &str = "/usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk";
const OVS_SCHEMA: &str = "/usr/share/openvswitch/vswitch.ovsschema";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Vhu,
    XConnect,
    Ovs,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Self::Vhu => "vhu",
            Self::XConnect => "xconnect",
            Self::Ovs => "ovs",
        }
    }
}

#[derive(Debug, Clone)]
struct Args {
    reps: usize,
    sizes: Vec<u16>,
    switches: Vec<Kind>,
    warmup: Duration,
    window: Duration,
    idle: Option<Duration>,
    /// Before each run, wait up to `quiet_wait` for the machine to be at
    /// most `max_busy` busy.
    max_busy: f64,
    quiet_wait: Duration,
    /// Record a `perf record -e cpu-clock` profile of the switch's
    /// processes over each window into this directory.
    perf: Option<PathBuf>,
    /// Follow each vhu run for this long after its window (`--trace`).
    trace: Option<Duration>,
}

fn secs(v: Result<String, String>) -> Result<Duration, String> {
    bench::number(&v?).map(Duration::from_secs)
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        reps: 3,
        sizes: vec![64, 1514],
        switches: vec![Kind::Vhu, Kind::XConnect, Kind::Ovs],
        warmup: Duration::from_secs(3),
        window: Duration::from_secs(5),
        idle: Some(Duration::from_secs(10)),
        max_busy: NOISY_PRE_BUSY,
        quiet_wait: Duration::from_secs(20),
        perf: None,
        trace: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().ok_or(format!("{k} needs a value"));
        match k.as_str() {
            "--reps" => a.reps = bench::number(&v()?).map_err(|e| format!("--reps: {e}"))?,
            "--sizes" => a.sizes = bench::list("--sizes", &v()?, bench::number)?,
            "--switches" => {
                a.switches = bench::list("--switches", &v()?, |s| {
                    [Kind::Vhu, Kind::XConnect, Kind::Ovs]
                        .into_iter()
                        .find(|k| k.name() == s)
                        .ok_or(format!("{s} is none of vhu, xconnect, ovs"))
                })?
            }
            "--warmup" => a.warmup = secs(v())?,
            "--window" => a.window = secs(v())?,
            "--idle" => a.idle = Some(secs(v())?),
            "--no-idle" => a.idle = None,
            "--max-busy" => {
                a.max_busy =
                    bench::number::<f64>(&v()?).map_err(|e| format!("--max-busy: {e}"))? / 100.0
            }
            "--quiet-wait" => a.quiet_wait = secs(v())?,
            "--perf" => a.perf = Some(PathBuf::from(v()?)),
            "--trace" => a.trace = Some(secs(v())?),
            o => return Err(format!("unknown argument {o}")),
        }
    }
    if a.reps == 0 || a.switches.is_empty() {
        return Err("--reps and --switches must name at least one".into());
    }
    if let Some(s) = a.sizes.iter().find(|&&s| !(60..=1514).contains(&s)) {
        return Err(format!(
            "--sizes: {s} is not a frame length of 60-1514 bytes"
        ));
    }
    Ok(a)
}

// ===== The switches' own cycle counters =====

/// A switch's busy cycles per frame over the window, and the fraction of
/// its core's time that was busy.
#[derive(Debug, Clone, Copy, Default)]
struct Cycles {
    per_frame: f64,
    busy: f64,
    frames: u64,
    /// Frames per busy round (ours only: `vhu_pmd_busy_rounds_total`).
    per_round: Option<f64>,
}

/// The value of `name` in Prometheus text, summed over its label sets.
fn metric_sum(text: &str, name: &str) -> Option<u64> {
    let mut found = None;
    for l in text.lines() {
        let Some(rest) = l.strip_prefix(name) else {
            continue;
        };
        if !rest.starts_with(['{', ' ']) {
            continue;
        }
        let v: u64 = rest.rsplit(' ').next()?.parse().ok()?;
        found = Some(found.unwrap_or(0) + v);
    }
    found
}

/// The number after `key` in `text` (up to the next character that cannot
/// be part of a decimal number).
fn number_after(text: &str, key: &str) -> Option<f64> {
    let rest = &text[text.find(key)? + key.len()..];
    let n: String = rest
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    n.parse().ok()
}

/// testpmd's `show fwd stats all` with `--record-core-cycles`:
/// `CPU cycles/packet=C (total cycles=T / total io packets=N) at M MHz Clock`
/// (the word before `packets` is the forwarding mode).
fn parse_testpmd_cycles(out: &str, elapsed: Duration) -> Option<Cycles> {
    let line = out.lines().find(|l| l.contains("CPU cycles/packet="))?;
    let total = number_after(line, "total cycles=")?;
    let frames = number_after(line, " packets=")?;
    let mhz = number_after(line, ") at ")?;
    Some(Cycles {
        per_frame: number_after(line, "CPU cycles/packet=")?,
        busy: total / (mhz * 1e6 * elapsed.as_secs_f64()),
        frames: frames as u64,
        per_round: None,
    })
}

/// OVS's `dpif-netdev/pmd-stats-show`: the block of the PMD thread on
/// `core` (`pmd thread numa_id 0 core_id 0:`).
fn parse_ovs_cycles(out: &str, core: u32) -> Option<Cycles> {
    let head = format!("core_id {core}:");
    let block = out.split("pmd thread").find(|b| b.contains(&head))?;
    let idle = number_after(block, "idle cycles:")?;
    let busy = number_after(block, "processing cycles:")?;
    let frames = number_after(block, "packets received:")?;
    Some(Cycles {
        per_frame: number_after(block, "avg processing cycles per packet:")?,
        busy: busy / (busy + idle).max(1.0),
        frames: frames as u64,
        per_round: None,
    })
}

// ===== Open vSwitch =====

/// A private, throw-away OVS with the DPDK datapath: its own database, run
/// directory and DPDK file prefix; a netdev bridge with two `dpdkvhostuser`
/// ports (server sockets in the run directory) and the default NORMAL flow.
struct Ovs {
    dir: RunDir,
    db: Option<Child>,
    vswitchd: Option<Child>,
    bridge: String,
    prefix: String,
}

impl Ovs {
    fn start(cpu: u32) -> Result<Self, String> {
        for f in [OVS_VSWITCHD, OVS_SCHEMA] {
            if !Path::new(f).exists() {
                return Err(format!(
                    "{f} missing: run scripts/install-peers.sh (openvswitch-switch-dpdk)"
                ));
            }
        }
        let dir = RunDir::new("swbench-ovs");
        // The bridge becomes a network device (at most 15 characters).
        let bridge = format!(
            "vbr{}",
            testpmd::unique_prefix("").trim_start_matches("vhu")
        );
        let bridge: String = bridge.chars().take(15).collect();
        let mut o = Self {
            prefix: testpmd::unique_prefix("ovs"),
            dir,
            db: None,
            vswitchd: None,
            bridge,
        };
        let db = o.dir.join("conf.db");
        o.run("ovsdb-tool", &["create", &path_str(&db), OVS_SCHEMA])?;
        let remote = format!("--remote=punix:{}", path_str(&o.dir.join("db.sock")));
        o.db = Some(o.daemon("ovsdb-server", &[&path_str(&db), &remote])?);
        wait_for_path(&o.dir.join("db.sock"), Duration::from_secs(10), || true)
            .map_err(|e| e.to_string())?;
        o.vsctl(&["--no-wait", "init"])?;
        o.vsctl(&[
            "--no-wait",
            "set",
            "Open_vSwitch",
            ".",
            "other_config:dpdk-init=true",
            &format!(
                "other_config:dpdk-extra=--no-pci --file-prefix={} --huge-unlink",
                o.prefix
            ),
            &format!("other_config:pmd-cpu-mask={:#x}", 1u64 << cpu),
            "other_config:per-port-memory=true",
        ])?;
        let dbsock = format!("unix:{}", path_str(&o.dir.join("db.sock")));
        o.vswitchd = Some(o.daemon(OVS_VSWITCHD, &[&dbsock])?);
        o.vsctl(&["wait-until", "Open_vSwitch", ".", "dpdk_initialized=true"])?;
        if Path::new("/sys/class/net").join(&o.bridge).exists() {
            return Err(format!("a device {} exists already", o.bridge));
        }
        let br = o.bridge.clone();
        o.vsctl(&[
            "add-br",
            &br,
            "--",
            "set",
            "bridge",
            &br,
            "datapath_type=netdev",
        ])?;
        for p in ["vhu0", "vhu1"] {
            o.vsctl(&[
                "add-port",
                &br,
                p,
                "--",
                "set",
                "Interface",
                p,
                "type=dpdkvhostuser",
            ])?;
        }
        for s in o.sockets() {
            wait_for_path(&s, Duration::from_secs(30), || true).map_err(|e| e.to_string())?;
        }
        let flows = o.output("ovs-ofctl", &["dump-flows", &br, "--no-stats"])?;
        if !flows.contains("actions=NORMAL") || flows.trim().lines().count() != 1 {
            return Err(format!("unexpected flows on {br}: {flows}"));
        }
        Ok(o)
    }

    /// `dpdkvhostuser` sockets are created in the run directory
    /// (`vhost-sock-dir` defaults to `OVS_RUNDIR`).
    fn sockets(&self) -> [PathBuf; 2] {
        [self.dir.join("vhu0"), self.dir.join("vhu1")]
    }

    fn command(&self, bin: &str) -> Command {
        let mut c = Command::new(bin);
        for v in ["OVS_RUNDIR", "OVS_DBDIR", "OVS_LOGDIR", "OVS_SYSCONFDIR"] {
            c.env(v, self.dir.path());
        }
        c
    }

    fn output(&self, bin: &str, args: &[&str]) -> Result<String, String> {
        let out = self
            .command(bin)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {bin}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "{bin} {} exited with {}: {}{}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn run(&self, bin: &str, args: &[&str]) -> Result<(), String> {
        self.output(bin, args).map(drop)
    }

    fn vsctl(&self, args: &[&str]) -> Result<String, String> {
        let db = format!("--db=unix:{}", path_str(&self.dir.join("db.sock")));
        let mut a = vec![db.as_str(), "--timeout=60"];
        a.extend_from_slice(args);
        self.output("ovs-vsctl", &a)
    }

    fn appctl(&self, target: &str, args: &[&str]) -> Result<String, String> {
        let t = path_str(&self.dir.join(&format!("{target}.ctl")));
        let mut a = vec!["--timeout=30", "-t", t.as_str()];
        a.extend_from_slice(args);
        self.output("ovs-appctl", &a)
    }

    /// Starts an OVS daemon in the foreground with its pidfile, control
    /// socket and log in the run directory.
    fn daemon(&self, bin: &str, args: &[&str]) -> Result<Child, String> {
        let name = Path::new(bin)
            .file_name()
            .map_or(bin.into(), |n| n.to_string_lossy().into_owned());
        let name = name.trim_end_matches("-dpdk");
        let file = |ext: &str| self.dir.join(&format!("{name}.{ext}"));
        let out = std::fs::File::create(file("out")).map_err(|e| format!("{name}.out: {e}"))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let mut c = self.command(bin);
        c.args(args);
        for (opt, ext) in [("pidfile", "pid"), ("unixctl", "ctl"), ("log-file", "log")] {
            c.arg(format!("--{opt}={}", path_str(&file(ext))));
        }
        c.arg("--no-chdir")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        bench::spawn_tied(&mut c).map_err(|e| format!("cannot start {bin}: {e}"))
    }

    fn pids(&self) -> Vec<u32> {
        self.db
            .iter()
            .chain(&self.vswitchd)
            .map(Child::id)
            .collect()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("ovs-vswitchd.log")).unwrap_or_default()
    }

    /// `ovs-appctl exit` to both daemons; both must exit with status 0.
    fn stop(mut self) -> Result<(), String> {
        let mut res = Ok(());
        for (target, child) in [
            ("ovs-vswitchd", self.vswitchd.take()),
            ("ovsdb-server", self.db.take()),
        ] {
            let Some(mut child) = child else { continue };
            let asked = self.appctl(target, &["exit"]);
            let st = bench::wait_exit(&mut child, Duration::from_secs(20));
            let st = st.or_else(|| bench::terminate(&mut child, Duration::from_secs(3)));
            if res.is_ok() {
                res = match (asked, st) {
                    (Err(e), _) => Err(e),
                    (Ok(_), Some(s)) if s.success() => Ok(()),
                    (Ok(_), s) => Err(format!("{target} exited with {s:?}")),
                };
            }
        }
        res
    }
}

impl Drop for Ovs {
    fn drop(&mut self) {
        for c in [self.vswitchd.take(), self.db.take()].into_iter().flatten() {
            let mut c = c;
            let _ = bench::terminate(&mut c, Duration::from_secs(5));
        }
        // The bridge's internal port is a tap device that outlives
        // ovs-vswitchd.
        if Path::new("/sys/class/net").join(&self.bridge).exists() {
            let _ = Command::new("ip")
                .args(["link", "delete", &self.bridge])
                .status();
        }
        let _ = std::fs::remove_dir_all(Path::new("/var/run/dpdk").join(&self.prefix));
    }
}

fn path_str(p: &Path) -> String {
    p.to_str()
        .expect("run directory paths are UTF-8")
        .to_owned()
}

// ===== The switches under test =====

enum Running {
    Vhu(SwitchProc, u32),
    XConnect(Testpmd, [PathBuf; 2]),
    Ovs(Ovs),
}

/// The pid of the `vhu-switch` serving `control`, found in `/proc` (the
/// process is the only one started with that control socket).
fn switch_pid(control: &Path) -> Result<u32, String> {
    let want = format!("--control-socket\0{}\0", path_str(control));
    std::fs::read_dir("/proc")
        .map_err(|e| e.to_string())?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .find(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&want))
        })
        .ok_or_else(|| format!("no process with {}", want.replace('\0', " ")))
}

/// The switch's configuration: `n` vhost-user server ports `p0`...
fn vhu_config(n: usize) -> String {
    let mut c = String::new();
    for i in 0..n {
        let _ = writeln!(c, "[[port]]\nname = \"p{i}\"\nkind = \"vhost-user\"\n");
    }
    c
}

/// Starts `vhu-switch` with `n` ports and the given polling mode, pinned
/// to the switch's core; waits for its sockets.
fn start_vhu(
    run: &RunDir,
    n: usize,
    poll: &str,
) -> Result<(SwitchProc, u32, Vec<PathBuf>), String> {
    let cpu = SWITCH_CPU.to_string();
    let sw = SwitchProc::start(run, &vhu_config(n), &["--poll", poll, "--pmd-cpus", &cpu]);
    let pid = switch_pid(&sw.control)?;
    let socks: Vec<PathBuf> = (0..n)
        .map(|i| sw.sockets.join(format!("p{i}.sock")))
        .collect();
    for s in &socks {
        wait_for_path(s, Duration::from_secs(10), || true).map_err(|e| e.to_string())?;
    }
    Ok((sw, pid, socks))
}

impl Running {
    fn start(kind: Kind, run: &RunDir) -> Result<Self, String> {
        Ok(match kind {
            Kind::Vhu => {
                let (sw, pid, _) = start_vhu(run, 2, "busy")?;
                Self::Vhu(sw, pid)
            }
            Kind::XConnect => {
                let socks = [run.join("xc0.sock"), run.join("xc1.sock")];
                let mut o = VhostBackendOpts::new(&socks[0]);
                o.port.hugepages = true;
                o.port.extra_eal_args = vec![
                    "--vdev".into(),
                    format!("net_vhost1,iface={},queues=1,client=0", path_str(&socks[1])),
                ];
                o.port.extra_args = vec!["--record-core-cycles".into()];
                let mut be = start_vhost_backend(&o);
                let alive = || true;
                wait_for_path(&socks[1], Duration::from_secs(30), alive)
                    .map_err(|e| e.to_string())?;
                if !be.is_running() {
                    return Err("the cross-connect exited".into());
                }
                Self::XConnect(be, socks)
            }
            Kind::Ovs => Self::Ovs(Ovs::start(SWITCH_CPU)?),
        })
    }

    fn sockets(&self) -> [PathBuf; 2] {
        match self {
            Self::Vhu(sw, _) => [sw.sockets.join("p0.sock"), sw.sockets.join("p1.sock")],
            Self::XConnect(_, s) => s.clone(),
            Self::Ovs(o) => o.sockets(),
        }
    }

    fn pids(&self) -> Vec<u32> {
        match self {
            Self::Vhu(_, pid) => vec![*pid],
            Self::XConnect(be, _) => vec![be.pid()],
            Self::Ovs(o) => o.pids(),
        }
    }

    /// Waits until the switch itself has both ports up (a frame sent to a
    /// port that is not up yet is lost, and with it that direction's share
    /// of the injected frames for the whole run).
    fn wait_ports_up(&mut self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            let up = match self {
                Self::Vhu(sw, _) => {
                    let ports: Vec<PortView> = sw.get("/ports");
                    ports.iter().filter(|p| p.state.connected).count() == 2
                }
                Self::XConnect(be, _) => {
                    be.wait_link_up(timeout);
                    true
                }
                Self::Ovs(o) => ["vhu0", "vhu1"].iter().all(|p| {
                    o.vsctl(&["get", "Interface", p, "link_state"])
                        .is_ok_and(|s| s.trim() == "up")
                }),
            };
            if up {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!("the switch's ports not up within {timeout:?}"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Our counters' raw values (busy, idle, frames, busy rounds), summed
    /// over PMDs.
    fn vhu_counters(sw: &SwitchProc) -> Result<[u64; 4], String> {
        let m = String::from_utf8_lossy(&sw.call("GET", "/metrics", "", 200)).into_owned();
        let get = |n: &str| metric_sum(&m, n).ok_or(format!("no {n} in /metrics:\n{m}"));
        Ok([
            get("vhu_pmd_busy_cycles_total")?,
            get("vhu_pmd_idle_cycles_total")?,
            get("vhu_pmd_frames_total")?,
            get("vhu_pmd_busy_rounds_total")?,
        ])
    }

    /// Resets (or reads) the switch's cycle counters at the window's start.
    fn cycles_begin(&mut self) -> Result<CyclesStart, String> {
        let t0 = Instant::now();
        match self {
            Self::Vhu(sw, _) => Ok(CyclesStart(t0, Self::vhu_counters(sw)?)),
            Self::XConnect(be, _) => {
                be.command("clear fwd stats all");
                Ok(CyclesStart(t0, [0; 4]))
            }
            Self::Ovs(o) => {
                o.appctl("ovs-vswitchd", &["dpif-netdev/pmd-stats-clear"])?;
                Ok(CyclesStart(t0, [0; 4]))
            }
        }
    }

    fn cycles_end(&mut self, start: CyclesStart) -> Result<Cycles, String> {
        match self {
            Self::Vhu(sw, _) => {
                let [b1, i1, f1, r1] = Self::vhu_counters(sw)?;
                let [b0, i0, f0, r0] = start.1;
                let (b, i, f, r) = (b1 - b0, i1 - i0, f1 - f0, r1 - r0);
                Ok(Cycles {
                    per_frame: b as f64 / f.max(1) as f64,
                    busy: b as f64 / (b + i).max(1) as f64,
                    frames: f,
                    per_round: Some(f as f64 / r.max(1) as f64),
                })
            }
            Self::XConnect(be, _) => {
                let out = be.command("show fwd stats all");
                parse_testpmd_cycles(&out, start.0.elapsed()).ok_or(format!(
                    "no CPU cycles/packet in `show fwd stats all`:\n{out}"
                ))
            }
            Self::Ovs(o) => {
                let out = o.appctl("ovs-vswitchd", &["dpif-netdev/pmd-stats-show"])?;
                parse_ovs_cycles(&out, SWITCH_CPU).ok_or(format!(
                    "no PMD on core {SWITCH_CPU} in pmd-stats-show:\n{out}"
                ))
            }
        }
    }

    /// Stops the switch; `Err` unless it exited cleanly.
    fn stop(self) -> Result<(), String> {
        let check = |name: &str, st: ExitStatus, log: &dyn Fn() -> String| {
            if st.success() {
                Ok(())
            } else {
                Err(format!("{name} exited with {st}\n{}", log()))
            }
        };
        match self {
            Self::Vhu(mut sw, _) => {
                let st = sw.stop();
                check("vhu-switch", st, &|| sw.log())
            }
            Self::XConnect(be, _) => {
                let (st, log) = be.quit();
                check("the cross-connect", st, &|| log.clone())
            }
            Self::Ovs(o) => {
                let log = o.log();
                o.stop().map_err(|e| format!("{e}\n{log}"))
            }
        }
    }
}

/// When the window started, and our counters then.
struct CyclesStart(Instant, [u64; 4]);

// ===== The frontend =====

/// testpmd with one virtio-user port per socket (port `i` on `socks[i]`
/// with address `MACS[i]` for the first two), io forwarding, hugepages.
fn frontend(socks: &[PathBuf], size: u16) -> Testpmd {
    let mut fo = FrontendOpts::new(&socks[0]);
    fo.port.hugepages = true;
    fo.port.forward_mode = "io".into();
    fo.port.nb_mbufs = 32768;
    fo.log_features = false;
    fo.pkt_len = Some(size);
    fo.mac = Some(MACS[0].into());
    for (i, s) in socks.iter().enumerate().skip(1) {
        let mac = MACS
            .get(i)
            .map_or(format!("02:00:00:aa:00:{i:02x}"), |m| (*m).to_owned());
        fo.port.extra_eal_args.extend([
            "--vdev".into(),
            format!("net_virtio_user{i},path={},queues=1,mac={mac}", path_str(s)),
        ]);
    }
    let mut fe = Testpmd::spawn(&fo);
    fe.wait_ready(Duration::from_secs(60));
    fe.wait_link_up(Duration::from_secs(30));
    fe
}

/// Each port's MAC address, by port id, from `show port info all`.
fn port_macs(fe: &mut Testpmd) -> Vec<(u16, String)> {
    let info = fe.command("show port info all");
    let mut out = Vec::new();
    let mut port = None;
    for l in info.lines() {
        if let Some(r) = l.split("Infos for port").nth(1) {
            port = r.trim().trim_matches('*').trim().parse::<u16>().ok();
        } else if let (Some(p), Some(m)) = (port, l.split("MAC address:").nth(1)) {
            out.push((p, m.trim().to_ascii_lowercase()));
            port = None;
        }
    }
    out
}

/// Addresses each of the two ports to the other one: whatever order EAL
/// probed the vdevs in, port `p`'s frames go to the other port's MAC.
fn cross_address(fe: &mut Testpmd) -> Result<(), String> {
    let macs = port_macs(fe);
    let [(p0, m0), (p1, m1)] = macs.as_slice() else {
        return Err(format!(
            "want two ports, `show port info all` shows {macs:?}"
        ));
    };
    if !MACS.contains(&m0.as_str()) || !MACS.contains(&m1.as_str()) {
        return Err(format!("unexpected port addresses {macs:?}"));
    }
    for (p, peer) in [(p0, m1), (p1, m0)] {
        let out = fe.command(&format!("set eth-peer {p} {peer}"));
        if out.to_ascii_lowercase().contains("bad") || out.contains("Invalid") {
            return Err(format!("set eth-peer {p} {peer}: {out}"));
        }
    }
    Ok(())
}

// ===== One run =====

#[derive(Debug, Clone)]
struct Sample {
    kind: Kind,
    size: u16,
    t: Throughput,
    cycles: Cycles,
    pre_busy: f64,
    /// Per port: frames received and sent during the window.
    ports: Vec<(u16, u64, u64)>,
    /// [`bench::core_to_core_ns`] before and after the run.
    c2c: (f64, f64),
}

impl Sample {
    fn noisy(&self) -> bool {
        self.t.foreign > NOISY_FOREIGN
            || self.t.steal > NOISY_STEAL
            || self.pre_busy > NOISY_PRE_BUSY
    }
}

/// Starts `perf record` on `pids` for `window`, when asked to.
fn start_perf(a: &Args, kind: Kind, size: u16, pids: &[u32]) -> Result<Option<Child>, String> {
    let Some(dir) = &a.perf else { return Ok(None) };
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let n = (0..)
        .map(|i| dir.join(format!("{}-{size}-{i}.data", kind.name())))
        .find(|p| !p.exists())
        .expect("a free file name");
    let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
    let mut c = Command::new("perf");
    c.args(["record", "-q", "-e", "cpu-clock", "-F", "2999", "-o"])
        .arg(&n)
        .args(["-p", &pids.join(","), "--", "sleep"])
        .arg(a.window.as_secs().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    bench::spawn_tied(&mut c)
        .map(Some)
        .map_err(|e| format!("cannot start perf: {e}"))
}

fn run(kind: Kind, size: u16, a: &Args) -> Result<Sample, String> {
    let pre_busy = bench::wait_for_quiet(a.max_busy, a.quiet_wait);
    let c2c_before = bench::core_to_core_ns();
    let dir = RunDir::new("swbench");
    let mut sw = Running::start(kind, &dir)?;
    let mut fe = frontend(&sw.sockets(), size);
    cross_address(&mut fe)?;
    sw.wait_ports_up(Duration::from_secs(30))?;
    std::thread::sleep(SETTLE);
    fe.start_tx_first(TX_FIRST_BURSTS);
    std::thread::sleep(a.warmup);
    let before = fe.port_stats();
    let perf = start_perf(a, kind, size, &sw.pids())?;
    let c0 = sw.cycles_begin()?;
    let t = fe.measure_with_peers(Duration::ZERO, a.window, &sw.pids());
    let cycles = sw.cycles_end(c0)?;
    if let Some(mut p) = perf {
        match bench::wait_exit(&mut p, Duration::from_secs(30)) {
            Some(st) if st.success() => {}
            st => return Err(format!("perf record ended with {st:?}")),
        }
    }
    let after = fe.port_stats();
    if let Some(d) = a.trace {
        trace(&mut fe, &sw, kind, size, d)?;
    }
    fe.stop();
    let (status, log) = fe.quit();
    let stopped = sw.stop();
    if !status.success() {
        return Err(format!("the frontend exited with {status}\n{log}"));
    }
    stopped?;
    let ports: Vec<(u16, u64, u64)> = after
        .iter()
        .filter_map(|b| {
            let a = before.iter().find(|x| x.port == b.port)?;
            Some((
                b.port,
                b.rx_packets - a.rx_packets,
                b.tx_packets - a.tx_packets,
            ))
        })
        .collect();
    if ports.len() != 2 || ports.iter().any(|&(_, rx, tx)| rx == 0 || tx == 0) {
        return Err(format!(
            "traffic did not flow both ways: (port, rx, tx) {ports:?}"
        ));
    }
    if (t.avg_frame_len() - f64::from(size)).abs() > 0.5 {
        return Err(format!(
            "average received frame {:.1} B, not {size} B",
            t.avg_frame_len()
        ));
    }
    if cycles.frames == 0 {
        return Err(format!("the switch's counters saw no frames: {cycles:?}"));
    }
    Ok(Sample {
        kind,
        size,
        t,
        cycles,
        pre_busy,
        ports,
        c2c: (c2c_before, bench::core_to_core_ns()),
    })
}

/// Prints the rate (frames the frontend received) every 500 ms for `d`,
/// with vhu's busy cycles per frame (its counters are published every
/// 100 ms), then the percentiles of the rates.
fn trace(fe: &mut Testpmd, sw: &Running, kind: Kind, size: u16, d: Duration) -> Result<(), String> {
    let step = Duration::from_millis(500);
    let vhu = |sw: &Running| match sw {
        Running::Vhu(s, _) => Running::vhu_counters(s).map(Some),
        _ => Ok(None),
    };
    let rx = |fe: &mut Testpmd| fe.port_stats().iter().map(|p| p.rx_packets).sum::<u64>();
    let t0 = Instant::now();
    let (mut t, mut f, mut c) = (t0, rx(fe), vhu(sw)?);
    let mut rates = Vec::new();
    while t0.elapsed() < d {
        std::thread::sleep(step);
        let (t1, f1, c1) = (Instant::now(), rx(fe), vhu(sw)?);
        let mpps = (f1 - f) as f64 / (t1 - t).as_secs_f64() / 1e6;
        rates.push(mpps);
        let mut line = format!(
            "trace size={size} switch={} {:5.1} s: {mpps:6.2} Mpps",
            kind.name(),
            (t1 - t0).as_secs_f64()
        );
        if let (Some(a), Some(b)) = (c, c1) {
            let (busy, frames) = (b[0] - a[0], b[2] - a[2]);
            let _ = write!(
                line,
                ", {:6.1} busy cycles/frame",
                busy as f64 / frames.max(1) as f64
            );
        }
        println!("{line}");
        (t, f, c) = (t1, f1, c1);
    }
    rates.sort_by(f64::total_cmp);
    let pct = |p: usize| {
        rates
            .get((rates.len() - 1) * p / 100)
            .copied()
            .unwrap_or(0.0)
    };
    println!(
        "trace summary size={size} switch={}: {} samples, p10 {:.2} Mpps, median {:.2}, p90 {:.2}",
        kind.name(),
        rates.len(),
        pct(10),
        pct(50),
        pct(90)
    );
    Ok(())
}

/// [`run`], with a panic of a helper (a peer's timeout) as an error; the
/// peers are dropped (stopped) on the way.
fn run_caught(kind: Kind, size: u16, a: &Args) -> Result<Sample, String> {
    std::panic::catch_unwind(AssertUnwindSafe(|| run(kind, size, a))).unwrap_or_else(|p| {
        Err(p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| "panic".into()))
    })
}

// ===== Idle =====

/// The CPU time (user + system, all threads) of `pid`, in clock ticks.
fn cpu_ticks_of(pid: u32) -> Result<u64, String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).map_err(|e| e.to_string())?;
    // Fields after the command name, which ends at the last ')': state is
    // field 3 of proc(5), utime 14 and stime 15.
    let after = stat.rsplit_once(')').ok_or("bad stat")?.1;
    let f: Vec<u64> = after
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse().ok())
        .collect();
    match f.as_slice() {
        [u, s] => Ok(u + s),
        _ => Err(format!("bad /proc/{pid}/stat: {stat}")),
    }
}

fn clock_ticks_per_sec() -> Result<u64, String> {
    let out = Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .map_err(|e| format!("getconf: {e}"))?;
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .map_err(|e| format!("getconf CLK_TCK: {e}"))
}

/// An adaptive switch with four connected, silent ports: its CPU use over
/// `window`, as a fraction of one CPU, and the ticks counted.
fn idle(window: Duration, a: &Args) -> Result<(f64, u64, u64, f64), String> {
    let pre_busy = bench::wait_for_quiet(a.max_busy, a.quiet_wait);
    let dir = RunDir::new("swbench-idle");
    let (mut sw, pid, socks) = start_vhu(&dir, 4, "adaptive")?;
    let fe = frontend(&socks, 64);
    let ports: Vec<PortView> = sw.get("/ports");
    let up = ports.iter().filter(|p| p.state.connected).count();
    if up != 4 {
        return Err(format!("{up} of 4 ports connected"));
    }
    // Let the connection's set-up (memory tables, ring starts) settle.
    std::thread::sleep(Duration::from_secs(2));
    let hz = clock_ticks_per_sec()?;
    let t0 = (Instant::now(), cpu_ticks_of(pid)?);
    std::thread::sleep(window);
    let t1 = (Instant::now(), cpu_ticks_of(pid)?);
    let (status, log) = fe.quit();
    let st = sw.stop();
    if !status.success() {
        return Err(format!("the frontend exited with {status}\n{log}"));
    }
    if !st.success() {
        return Err(format!("vhu-switch exited with {st}\n{}", sw.log()));
    }
    let ticks = t1.1 - t0.1;
    let cpu = ticks as f64 / hz as f64 / (t1.0 - t0.0).as_secs_f64();
    Ok((cpu, ticks, hz, pre_busy))
}

// ===== Report =====

fn medians(
    samples: &[Sample],
    kind: Kind,
    size: u16,
    f: impl Fn(&Sample) -> f64,
) -> (f64, Vec<f64>) {
    let v: Vec<f64> = samples
        .iter()
        .filter(|s| s.kind == kind && s.size == size)
        .map(f)
        .collect();
    if v.is_empty() {
        (f64::NAN, v)
    } else {
        (bench::median(&v), v)
    }
}

fn main() -> ExitCode {
    let a = match bench::args_or_usage("switch-bench", parse_args()) {
        Ok(a) => a,
        Err(code) => return code,
    };
    if !hugepages_available(400) {
        eprintln!("switch-bench: fewer than 400 free hugepages: run scripts/hugepages.sh");
        return ExitCode::FAILURE;
    }
    let _ = (testpmd::testpmd_bin(), switch_bin());
    let mut samples = Vec::new();
    let mut failures = Vec::new();
    for &size in &a.sizes {
        for rep in 0..a.reps {
            let mut order = a.switches.clone();
            if rep % 2 == 1 {
                order.reverse();
            }
            for kind in order {
                match run_caught(kind, size, &a) {
                    Ok(s) => {
                        println!(
                            "run size={size} rep={rep} switch={}: {:.2} Mpps ({:.2} Gbps, host clock \
                             {:.2}), avg frame {:.1} B, per port (rx, tx) {}; {:.1} busy cycles/frame{}, \
                             busy {:.1} %; pre-run busy {:.1} %, foreign cpu {:.1} %, steal {:.1} %; \
                             cores {} (c2c {:.0}/{:.0} ns){}",
                            kind.name(),
                            s.t.mpps(),
                            s.t.gbps(),
                            s.t.mpps_host_clock(),
                            s.t.avg_frame_len(),
                            s.ports
                                .iter()
                                .map(|(p, rx, tx)| format!("p{p} {rx}/{tx}"))
                                .collect::<Vec<_>>()
                                .join(" "),
                            s.cycles.per_frame,
                            s.cycles
                                .per_round
                                .map_or(String::new(), |r| format!(" ({r:.1} frames/busy round)")),
                            s.cycles.busy * 100.0,
                            s.pre_busy * 100.0,
                            s.t.foreign * 100.0,
                            s.t.steal * 100.0,
                            bench::placement(s.c2c.0, s.c2c.1),
                            s.c2c.0,
                            s.c2c.1,
                            if s.noisy() { " NOISY" } else { "" }
                        );
                        samples.push(s);
                    }
                    Err(e) => {
                        println!(
                            "run size={size} rep={rep} switch={}: FAILED: {e}",
                            kind.name()
                        );
                        failures.push(format!("{} {size} B rep {rep}", kind.name()));
                    }
                }
            }
        }
    }
    println!();
    println!(
        "| frame | vhu-switch median Mpps | testpmd cross-connect median Mpps | OVS-DPDK median Mpps | \
         vhu/cross-connect | vhu/OVS | runs vhu | runs cross-connect | runs OVS |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---|---|---|");
    for &size in &a.sizes {
        let m = |k| medians(&samples, k, size, |s| s.t.mpps());
        let ((v, vr), (x, xr), (o, or)) = (m(Kind::Vhu), m(Kind::XConnect), m(Kind::Ovs));
        // A switch left out of the runs (`--switches`) has no figure: "-".
        let fig = |f: f64| {
            if f.is_finite() {
                format!("{f:.2}")
            } else {
                "-".to_owned()
            }
        };
        println!(
            "| {size} B | {} | {} | {} | {} | {} | {} | {} | {} |",
            fig(v),
            fig(x),
            fig(o),
            fig(v / x),
            fig(v / o),
            bench::runs(&vr, 2),
            bench::runs(&xr, 2),
            bench::runs(&or, 2)
        );
    }
    println!();
    println!(
        "By placement of the two CPUs (c2c round trip before and after each run, far above {:.0} ns):",
        bench::C2C_FAR_NS
    );
    println!();
    println!("| frame | cores | switch | runs | median Mpps | median busy cycles/frame | ratio to cross-connect |");
    println!("|---:|---|---|---:|---:|---:|---:|");
    for &size in &a.sizes {
        for place in ["near", "far", "moved"] {
            let of = |k: Kind| -> Vec<&Sample> {
                samples
                    .iter()
                    .filter(|s| {
                        s.kind == k && s.size == size && bench::placement(s.c2c.0, s.c2c.1) == place
                    })
                    .collect()
            };
            let mpps =
                |v: &[&Sample]| bench::median(&v.iter().map(|s| s.t.mpps()).collect::<Vec<_>>());
            let x = of(Kind::XConnect);
            for &k in &a.switches {
                let v = of(k);
                if v.is_empty() {
                    continue;
                }
                let cyc = bench::median(&v.iter().map(|s| s.cycles.per_frame).collect::<Vec<_>>());
                // No cross-connect run had this placement: nothing to compare.
                let ratio = if x.is_empty() {
                    "-".to_owned()
                } else {
                    format!("{:.2}", mpps(&v) / mpps(&x))
                };
                println!(
                    "| {size} B | {place} | {} | {} | {:.2} | {cyc:.1} | {ratio} |",
                    k.name(),
                    v.len(),
                    mpps(&v)
                );
            }
        }
    }
    println!();
    println!("| frame | switch | median busy cycles/frame | median busy % of its core | runs cycles/frame |");
    println!("|---:|---|---:|---:|---|");
    for &size in &a.sizes {
        for &k in &a.switches {
            let (c, cr) = medians(&samples, k, size, |s| s.cycles.per_frame);
            let (b, _) = medians(&samples, k, size, |s| s.cycles.busy * 100.0);
            println!(
                "| {size} B | {} | {c:.1} | {b:.1} | {} |",
                k.name(),
                bench::runs(&cr, 1)
            );
        }
    }
    if let Some(w) = a.idle {
        println!();
        match idle(w, &a) {
            Ok((cpu, ticks, hz, pre)) => println!(
                "idle: adaptive vhu-switch, 4 connected silent ports: {ticks} ticks ({hz}/s) in {} s \
                 = {:.2} % of one CPU (pre-run machine busy {:.1} %)",
                w.as_secs(),
                cpu * 100.0,
                pre * 100.0
            ),
            Err(e) => {
                println!("idle: FAILED: {e}");
                failures.push("idle".into());
            }
        }
    }
    if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!("switch-bench: failed runs: {}", failures.join(", "));
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_counters() {
        let m = "# TYPE vhu_pmd_busy_cycles_total counter\n\
                 vhu_pmd_busy_cycles_total{pmd=\"0\"} 100\n\
                 vhu_pmd_busy_cycles_total{pmd=\"1\"} 23\n\
                 vhu_pmd_busy_cycles_totalx 5\n";
        assert_eq!(metric_sum(m, "vhu_pmd_busy_cycles_total"), Some(123));
        assert_eq!(metric_sum(m, "vhu_pmd_frames_total"), None);
        let tp = "  CPU cycles/packet=52.31 (total cycles=523100000 / total io packets=10000000) \
                  at 2300 MHz Clock\n";
        let c = parse_testpmd_cycles(tp, Duration::from_secs(1)).unwrap();
        assert_eq!((c.per_frame, c.frames), (52.31, 10_000_000));
        assert!((c.busy - 523.1 / 2300.0).abs() < 1e-9);
        let ovs = "pmd thread numa_id 0 core_id 0:\n  packets received: 1000\n  \
                   idle cycles: 250 (25.00%)\n  processing cycles: 750 (75.00%)\n  \
                   avg cycles per packet: 1.00 (1000/1000)\n  \
                   avg processing cycles per packet: 0.75 (750/1000)\n\
                   main thread:\n  packets received: 0\n";
        let c = parse_ovs_cycles(ovs, 0).unwrap();
        assert_eq!((c.per_frame, c.busy, c.frames), (0.75, 0.75, 1000));
        assert!(parse_ovs_cycles(ovs, 1).is_none());
    }
}
