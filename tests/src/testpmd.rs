// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! `dpdk-testpmd` as a peer: a virtio-user frontend (the "guest") and DPDK's
//! own vhost backend (the reference device).
//!
//! # What runs
//!
//! * [`Testpmd::spawn`] starts testpmd with a `net_virtio_user0` port on a
//!   vhost-user socket ([`FrontendOpts`]). This is what a DPDK application in
//!   a pod or a VM looks like to a vhost-user backend.
//! * [`Testpmd::spawn_vhost_backend`] starts testpmd with a `net_vhost0` port
//!   (DPDK's vhost library, [`VhostBackendOpts`]), `io` forwarding: it loops
//!   the guest's TX back into the guest's RX on the same port. It stands in
//!   for our backend while that is being written, and is the anchor of the
//!   side-by-side benchmark.
//!
//! Both are driven the same way: testpmd runs interactively (`-i`), the
//! harness writes one command at a time to its stdin and waits for the
//! `testpmd> ` prompt that follows the command's output. A reader thread
//! collects stdout and stderr (one pipe, so the log keeps its order) into a
//! buffer. testpmd is started under `stdbuf -oL -eL`: its `printf` output to
//! a pipe would otherwise be block-buffered while the prompt is written
//! unbuffered, and the prompt would overtake the output it terminates.
//!
//! # Failures
//!
//! Every wait has a timeout. On a timeout, an unexpected exit or unparsable
//! output the harness panics with the process's whole log. A [`Testpmd`]
//! kills its process when dropped (SIGTERM, then SIGKILL), and, when dropped
//! during a panic, prints its log to stderr so that a failing test shows the
//! logs of all its peers. The child also gets `PR_SET_PDEATHSIG` = SIGKILL,
//! so a test process that dies without unwinding leaves no busy poller behind
//! (the signal follows the *thread* that spawned the child: keep a
//! [`Testpmd`] on the thread that created it).
//!
//! # CPUs
//!
//! The machine has two cores and each testpmd busy-polls one. Following
//! `ENVIRONMENT.md`, the frontend forwards on CPU 1 (`-l 0,1 --main-lcore 0`)
//! and the DPDK backend on CPU 0 (`--main-lcore 1`); each process's main
//! lcore sits idle in the command line reader. Every process gets its own
//! `--file-prefix` ([`unique_prefix`]). Never run two of these tests at the
//! same time.
//!
//! # Environment
//!
//! * `VHU_TESTPMD_BIN`: the testpmd binary (default `dpdk-testpmd` on `PATH`).

use std::ffi::OsString;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The interactive prompt testpmd prints after every command, without its
/// trailing space: a log line written by another thread can land between
/// `testpmd>` and the space.
const PROMPT: &[u8] = b"testpmd>";

/// How long testpmd may take to reach its first prompt. EAL init with
/// `--no-huge` and the mbuf pool creation take a second or two; a virtio-user
/// server (`server=1`) additionally blocks until the backend connects.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// How long one interactive command may take (`stop` waits for the
/// forwarding lcore, `quit` closes the ports).
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(15);

/// How long a port may take to report link up after the prompt.
pub const LINK_TIMEOUT: Duration = Duration::from_secs(15);

/// How long [`Testpmd::quit`] waits for the process to exit.
pub const EXIT_TIMEOUT: Duration = Duration::from_secs(15);

/// How long [`Drop`] waits after SIGTERM before SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(3);

/// Interval of the polling loops (socket files, link state, counters).
pub const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// Memory for `--no-huge` runs, in MiB (`-m`), as in `ENVIRONMENT.md`.
const NO_HUGE_MEMORY_MB: u32 = 1024;

static PREFIX_SEQ: AtomicU32 = AtomicU32::new(0);
static RUNDIR_SEQ: AtomicU32 = AtomicU32::new(0);

/// A `--file-prefix` unique to this process and call: `vhu<role><pid>x<n>`.
///
/// EAL keeps its runtime files under `/var/run/dpdk/<prefix>` and names
/// hugepage files after the prefix, so two testpmd processes (or a leftover
/// from a crashed run) must never share one.
pub fn unique_prefix(role: &str) -> String {
    format!(
        "vhu{role}{}x{}",
        std::process::id(),
        PREFIX_SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// The testpmd binary: `$VHU_TESTPMD_BIN`, or `dpdk-testpmd` from `PATH`.
///
/// # Panics
///
/// If it cannot be found: install the peers with `scripts/install-peers.sh`.
pub fn testpmd_bin() -> PathBuf {
    if let Some(bin) = crate::bins::from_env("VHU_TESTPMD_BIN") {
        return bin;
    }
    find_in_path("dpdk-testpmd").unwrap_or_else(|| {
        panic!("dpdk-testpmd not found in PATH: run scripts/install-peers.sh (Debian package dpdk-dev)")
    })
}

/// Looks `name` up in `PATH`.
fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| OsString::from("/usr/bin:/bin"));
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// Whether 2 MiB hugepages are usable: a hugetlbfs is mounted and at least
/// `pages` pages are free.
pub fn hugepages_available(pages: u64) -> bool {
    let free = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("HugePages_Free:"))
                .and_then(|v| v.trim().parse::<u64>().ok())
        })
        .unwrap_or(0);
    free >= pages && !hugetlbfs_mounts().is_empty()
}

/// The mount points of hugetlbfs file systems, from `/proc/mounts`.
fn hugetlbfs_mounts() -> Vec<PathBuf> {
    std::fs::read_to_string("/proc/mounts")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_dev, dir, fstype) = (f.next()?, f.next()?, f.next()?);
            (fstype == "hugetlbfs").then(|| PathBuf::from(dir))
        })
        .collect()
}

/// CPU time of the whole machine from the `cpu` line of `/proc/stat`:
/// (busy, steal, total) in clock ticks.
fn cpu_ticks() -> (u64, u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let v: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|t| t.parse().ok())
        .collect();
    let at = |i: usize| v.get(i).copied().unwrap_or(0);
    // user nice system idle iowait irq softirq steal (guest time is already
    // included in user and nice).
    let total: u64 = (0..8).map(at).sum();
    (total - at(3) - at(4), at(7), total)
}

/// CPU time (user + system, all threads) of process `pid` in clock ticks,
/// 0 if it is gone.
fn process_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The command name may contain spaces: fields start after the last ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    // utime and stime are fields 14 and 15 of proc(5); 3 is the first here.
    let at = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    at(11) + at(12)
}

/// How busy the machine's CPUs are over `window`, as a fraction of all CPU
/// time (0.0 to 1.0), and the fraction stolen by the hypervisor. Take it
/// before starting the peers of a measurement: anything above a few percent
/// means other work would take cycles out of the busy-polling loops
/// (`research/anchor-figures.md`, "Noise").
pub fn machine_busy(window: Duration) -> (f64, f64) {
    let (b0, s0, t0) = cpu_ticks();
    std::thread::sleep(window);
    let (b1, s1, t1) = cpu_ticks();
    let dt = t1.saturating_sub(t0).max(1) as f64;
    (
        b1.saturating_sub(b0) as f64 / dt,
        s1.saturating_sub(s0) as f64 / dt,
    )
}

// ===== RunDir =====

/// A private scratch directory for one test run (sockets, logs), removed
/// when dropped.
#[derive(Debug)]
pub struct RunDir {
    path: PathBuf,
}

impl RunDir {
    /// Creates `$TMPDIR/vhu-<tag>-<pid>-<n>`, empty.
    ///
    /// # Panics
    ///
    /// If the directory cannot be created.
    pub fn new(tag: &str) -> Self {
        let path = std::env::temp_dir().join(format!(
            "vhu-{tag}-{}-{}",
            std::process::id(),
            RUNDIR_SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
        Self { path }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A path inside the directory.
    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

// ===== Options =====

/// CPU placement of a testpmd process: `-l <main>,<fwd> --main-lcore <main>`,
/// with one forwarding core (`--nb-cores=1`) on `fwd`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lcores {
    /// The main lcore (command line, control); idle in steady state.
    pub main: u32,
    /// The forwarding lcore, busy-polling.
    pub fwd: u32,
}

impl Lcores {
    /// The frontend's placement: forwarding on CPU 1.
    pub const FRONTEND: Self = Self { main: 0, fwd: 1 };
    /// The DPDK backend's placement: forwarding on CPU 0.
    pub const BACKEND: Self = Self { main: 1, fwd: 0 };

    fn eal_args(self) -> Vec<String> {
        vec![
            "-l".into(),
            format!("{},{}", self.main, self.fwd),
            "--main-lcore".into(),
            self.main.to_string(),
        ]
    }
}

/// What both roles set the same way: queues, memory, forwarding, rings,
/// mbufs, file prefix, CPUs, extra arguments.
#[derive(Debug, Clone)]
pub struct PortOpts {
    /// Queue pairs: the vdev's `queues=` and testpmd's `--rxq`/`--txq`.
    pub queues: u16,
    /// `false`: `--no-huge -m 1024` (memfd-backed 4 KiB pages);
    /// `true`: hugepages, with `--single-file-segments` for the frontend
    /// (without it virtio-user fails with "Too many memory regions") and
    /// `--huge-unlink` for the vhost backend.
    pub hugepages: bool,
    /// `--forward-mode` (`mac` swaps nothing, it rewrites the MACs to the
    /// port's and the peer's, so frames loop through the backend forever).
    pub forward_mode: String,
    /// `--txd`: TX descriptors (for the frontend at most
    /// [`FrontendOpts::queue_size`]).
    pub txd: u16,
    /// `--rxd`: RX descriptors (for the frontend at most
    /// [`FrontendOpts::queue_size`]).
    pub rxd: u16,
    /// `--total-num-mbufs`.
    pub nb_mbufs: u32,
    /// `--file-prefix`; unique per run by default ([`unique_prefix`]).
    pub file_prefix: String,
    /// CPU placement: [`Lcores::FRONTEND`] or [`Lcores::BACKEND`] by default.
    pub lcores: Lcores,
    /// Extra EAL arguments (before `--`).
    pub extra_eal_args: Vec<String>,
    /// Extra testpmd arguments (after `--`).
    pub extra_args: Vec<String>,
}

impl PortOpts {
    /// One queue pair, no hugepages, 1024 descriptors per ring.
    fn new(forward_mode: &str, nb_mbufs: u32, role: &str, lcores: Lcores) -> Self {
        Self {
            queues: 1,
            hugepages: false,
            forward_mode: forward_mode.into(),
            txd: 1024,
            rxd: 1024,
            nb_mbufs,
            file_prefix: unique_prefix(role),
            lcores,
            extra_eal_args: Vec::new(),
            extra_args: Vec::new(),
        }
    }

    /// The EAL arguments up to the role's own: CPUs, memory, file prefix.
    fn eal_args(&self, frontend: bool) -> Vec<String> {
        let mut a = self.lcores.eal_args();
        a.extend(["-n".into(), "1".into(), "--no-pci".into()]);
        a.extend(memory_args(self.hugepages, frontend));
        a.push(format!("--file-prefix={}", self.file_prefix));
        a
    }

    /// Appends the extra EAL arguments, the vdev, `-- -i` and the testpmd
    /// arguments both roles take.
    fn push_vdev_and_app_args(&self, a: &mut Vec<String>, vdev: String) {
        a.extend(self.extra_eal_args.iter().cloned());
        a.extend(["--vdev".into(), vdev, "--".into(), "-i".into()]);
        a.extend(app_args(
            &self.forward_mode,
            self.queues,
            self.txd,
            self.rxd,
            self.nb_mbufs,
        ));
    }
}

/// How testpmd runs as a virtio-user frontend on a vhost-user socket.
///
/// The defaults ([`FrontendOpts::new`]) are `ENVIRONMENT.md`'s recipe:
/// one queue pair, virtio-user as socket client, `mac` forwarding, 1024
/// descriptors per ring, 16384 mbufs, no hugepages.
#[derive(Debug, Clone)]
pub struct FrontendOpts {
    /// The vhost-user socket.
    pub socket: PathBuf,
    /// `server=1`: testpmd creates the socket and the backend connects as a
    /// client. testpmd then blocks in EAL init until the backend connects.
    pub server: bool,
    /// The vdev's `mrg_rxbuf=` (unset: the PMD's default, on).
    pub mrg_rxbuf: Option<bool>,
    /// The vdev's `packed_vq=` (unset: split ring).
    pub packed_vq: Option<bool>,
    /// The vdev's `in_order=` (unset: the PMD's default, on).
    pub in_order: Option<bool>,
    /// The vdev's `queue_size=`: the size of every virtqueue. Unset, it is
    /// virtio-user's default, **256**, and `--txd`/`--rxd` above it are
    /// silently clamped to it (the anchor figures ran with 256-entry rings).
    pub queue_size: Option<u16>,
    /// `--txpkts`: the frame length of `start tx_first` (L2, without FCS);
    /// unset: testpmd's default, 64 bytes.
    pub pkt_len: Option<u16>,
    /// Log the virtio PMD's init at debug level, which prints the feature
    /// bits it negotiated ([`Testpmd::negotiated_features`]).
    pub log_features: bool,
    /// The vdev's `mac=`: the port's address (unset: random).
    pub mac: Option<String>,
    /// What both roles set: `mac` forwarding, 16384 mbufs,
    /// [`Lcores::FRONTEND`] by default.
    pub port: PortOpts,
}

impl FrontendOpts {
    /// The defaults for a frontend on `socket`.
    pub fn new(socket: impl Into<PathBuf>) -> Self {
        Self {
            socket: socket.into(),
            server: false,
            mrg_rxbuf: None,
            packed_vq: None,
            in_order: None,
            queue_size: None,
            pkt_len: None,
            log_features: true,
            mac: None,
            port: PortOpts::new("mac", 16384, "fe", Lcores::FRONTEND),
        }
    }

    /// The `--vdev` value.
    pub fn vdev(&self) -> String {
        let mut v = format!(
            "net_virtio_user0,path={},queues={}",
            vdev_path(&self.socket),
            self.port.queues
        );
        if self.server {
            v.push_str(",server=1");
        }
        if let Some(size) = self.queue_size {
            let _ = write!(v, ",queue_size={size}");
        }
        if let Some(mac) = &self.mac {
            let _ = write!(v, ",mac={mac}");
        }
        for (key, value) in [
            ("mrg_rxbuf", self.mrg_rxbuf),
            ("packed_vq", self.packed_vq),
            ("in_order", self.in_order),
        ] {
            if let Some(value) = value {
                let _ = write!(v, ",{key}={}", u8::from(value));
            }
        }
        v
    }

    /// Adds one more virtio-user port (`net_virtio_user<N>`) on `socket`
    /// with address `mac`, with the same vdev options as the first: one
    /// testpmd process, one forwarding core, several frontends. testpmd
    /// numbers its ports in command-line order, where the added ones come
    /// first (in the order added) and [`FrontendOpts::socket`]'s last;
    /// [`Testpmd::port_macs`] tells which is which.
    pub fn add_port(&mut self, socket: impl Into<PathBuf>, mac: &str) {
        let n = 1 + self
            .port
            .extra_eal_args
            .iter()
            .filter(|a| a.starts_with("net_virtio_user"))
            .count();
        let mut o = self.clone();
        o.socket = socket.into();
        o.mac = Some(mac.into());
        let v = o
            .vdev()
            .replacen("net_virtio_user0", &format!("net_virtio_user{n}"), 1);
        self.port.extra_eal_args.extend(["--vdev".into(), v]);
    }

    /// The full argument list after the binary.
    pub fn args(&self) -> Vec<String> {
        let mut a = self.port.eal_args(true);
        if self.log_features {
            a.push("--log-level=pmd.net.virtio.init:debug".into());
        }
        self.port.push_vdev_and_app_args(&mut a, self.vdev());
        if let Some(len) = self.pkt_len {
            a.push(format!("--txpkts={len}"));
        }
        a.extend(self.port.extra_args.iter().cloned());
        a
    }
}

/// How testpmd runs as DPDK's vhost backend (`net_vhost0`), the stand-in
/// and reference for our backend.
///
/// The defaults ([`VhostBackendOpts::new`]) are the anchor's
/// (`research/anchor-figures.md`): `io` forwarding (the guest's TX is
/// enqueued, unchanged, into its RX), socket server, 1024 descriptors,
/// 32768 mbufs, no hugepages, `--disable-link-check`.
#[derive(Debug, Clone)]
pub struct VhostBackendOpts {
    /// The vhost-user socket (`iface=`).
    pub socket: PathBuf,
    /// `client=1`: connect to a socket the frontend created (with
    /// reconnection); otherwise create it.
    pub client: bool,
    /// What both roles set: `io` forwarding, 32768 mbufs,
    /// [`Lcores::BACKEND`] by default.
    pub port: PortOpts,
}

impl VhostBackendOpts {
    /// The defaults for a backend on `socket`.
    pub fn new(socket: impl Into<PathBuf>) -> Self {
        Self {
            socket: socket.into(),
            client: false,
            port: PortOpts::new("io", 32768, "vh", Lcores::BACKEND),
        }
    }

    /// The `--vdev` value.
    pub fn vdev(&self) -> String {
        format!(
            "net_vhost0,iface={},queues={},client={}",
            vdev_path(&self.socket),
            self.port.queues,
            u8::from(self.client)
        )
    }

    /// The full argument list after the binary.
    pub fn args(&self) -> Vec<String> {
        let mut a = self.port.eal_args(false);
        // The vhost library logs every message from a thread of its own;
        // those lines can land in the middle of the interactive prompt, so
        // keep its config log to warnings.
        a.push("--log-level=lib.vhost.config:warning".into());
        self.port.push_vdev_and_app_args(&mut a, self.vdev());
        a.push("--disable-link-check".into());
        a.extend(self.port.extra_args.iter().cloned());
        a
    }
}

/// A socket path as a vdev argument value (devargs are split at commas).
fn vdev_path(p: &Path) -> String {
    let s = p.to_str().expect("socket path is not UTF-8");
    assert!(
        !s.contains(',') && !s.contains(' '),
        "socket path {s:?} cannot be passed in a DPDK --vdev"
    );
    s.to_string()
}

/// EAL memory arguments. A virtio-user frontend shares its memory with the
/// backend and needs one file per memseg list (`--single-file-segments`);
/// the vhost backend's memory is private (`--huge-unlink`).
fn memory_args(hugepages: bool, frontend: bool) -> Vec<String> {
    if !hugepages {
        vec![
            "--no-huge".into(),
            "-m".into(),
            NO_HUGE_MEMORY_MB.to_string(),
        ]
    } else if frontend {
        vec!["--single-file-segments".into()]
    } else {
        vec!["--huge-unlink".into()]
    }
}

/// testpmd application arguments common to both roles.
fn app_args(mode: &str, queues: u16, txd: u16, rxd: u16, nb_mbufs: u32) -> Vec<String> {
    vec![
        "--nb-cores=1".into(),
        format!("--forward-mode={mode}"),
        format!("--rxq={queues}"),
        format!("--txq={queues}"),
        format!("--txd={txd}"),
        format!("--rxd={rxd}"),
        format!("--total-num-mbufs={nb_mbufs}"),
    ]
}

// ===== Statistics =====

/// One port's block of `show port stats all` (ethdev counters, cumulative
/// since start-up, plus testpmd's rates since the previous `show`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Port id.
    pub port: u16,
    /// Frames received (returned by the PMD's rx burst).
    pub rx_packets: u64,
    /// Frames the device dropped for lack of RX buffers (`imissed`).
    pub rx_missed: u64,
    /// Bytes received (L2, without virtio-net header).
    pub rx_bytes: u64,
    /// Erroneous frames received.
    pub rx_errors: u64,
    /// RX mbuf allocation failures.
    pub rx_nombuf: u64,
    /// Frames transmitted (accepted by the PMD's tx burst).
    pub tx_packets: u64,
    /// Failed transmissions.
    pub tx_errors: u64,
    /// Bytes transmitted.
    pub tx_bytes: u64,
    /// RX packets per second since the previous `show port stats` of this
    /// port, on testpmd's clock (0 on the first call).
    pub rx_pps: u64,
    /// RX bits per second since the previous `show` (frame bytes x 8).
    pub rx_bps: u64,
    /// TX packets per second since the previous `show`.
    pub tx_pps: u64,
    /// TX bits per second since the previous `show`.
    pub tx_bps: u64,
}

/// One stream's block of the forward statistics printed at `stop`. testpmd
/// prints a stream only when it forwarded or dropped something, and only
/// when there are more streams than ports (several queues).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamStats {
    /// The port the stream receives from.
    pub rx_port: u16,
    /// The queue the stream receives from.
    pub rx_queue: u16,
    /// The port the stream transmits to.
    pub tx_port: u16,
    /// The queue the stream transmits to.
    pub tx_queue: u16,
    /// Frames received by the stream.
    pub rx_packets: u64,
    /// Frames transmitted by the stream.
    pub tx_packets: u64,
    /// Frames the stream failed to transmit (TX ring full) and freed.
    pub tx_dropped: u64,
}

/// A port's (or all ports') forward statistics printed at `stop`: the
/// counts since the last `start`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortFwdStats {
    /// Port id (`u16::MAX` for the "all ports" total).
    pub port: u16,
    /// Frames received.
    pub rx_packets: u64,
    /// Frames dropped on receive (`imissed`).
    pub rx_dropped: u64,
    /// Received and dropped.
    pub rx_total: u64,
    /// Frames transmitted.
    pub tx_packets: u64,
    /// Frames the forwarding engine could not transmit.
    pub tx_dropped: u64,
    /// Transmitted and dropped.
    pub tx_total: u64,
}

/// The forward statistics printed by `stop`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FwdStats {
    /// Per-stream blocks (only streams with traffic; none with one queue).
    pub streams: Vec<StreamStats>,
    /// Per-port blocks.
    pub ports: Vec<PortFwdStats>,
    /// The "Accumulated forward statistics for all ports" block.
    pub total: PortFwdStats,
}

impl FwdStats {
    /// The stream receiving from `port`/`queue`, if it had traffic.
    pub fn stream(&self, port: u16, queue: u16) -> Option<&StreamStats> {
        self.streams
            .iter()
            .find(|s| s.rx_port == port && s.rx_queue == queue)
    }
}

/// A throughput sample from [`Testpmd::measure`].
///
/// The headline figure, [`Throughput::mpps`], is testpmd's own `Rx-pps` of
/// the second of two `show port stats all`, summed over ports: testpmd
/// divides the RX-packets delta between the two calls by the time between
/// them on its own clock (`clock_gettime` inside the same call that reads the
/// counters). That is what `research/anchor-figures.md` reports, so figures
/// compare. [`Throughput::mpps_host_clock`] is the same delta over the
/// harness's clock (which includes the command round trips) as a cross-check.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Throughput {
    /// Time between the two readings on the harness's clock.
    pub window: Duration,
    /// RX-packets delta, all ports.
    pub rx_packets: u64,
    /// RX-bytes delta, all ports.
    pub rx_bytes: u64,
    /// TX-packets delta, all ports.
    pub tx_packets: u64,
    /// testpmd's `Rx-pps`, summed over ports.
    pub rx_pps: u64,
    /// testpmd's `Rx-bps`, summed over ports.
    pub rx_bps: u64,
    /// testpmd's `Tx-pps`, summed over ports.
    pub tx_pps: u64,
    /// Fraction of the machine's CPU time stolen by the hypervisor during
    /// the window (should be ~0).
    pub steal: f64,
    /// Fraction of the machine's CPU time (all CPUs) used during the window
    /// by anything but this testpmd and the `peers` given to
    /// [`Testpmd::measure_with_peers`]: foreign load that takes cycles out
    /// of the busy-polling loops. Should be ~0; with two cores, 0.05 is a
    /// tenth of one core.
    pub foreign: f64,
    /// This testpmd's own forwarding cycles over the window, when it runs
    /// with `--record-core-cycles` ([`Testpmd::core_cycles`]): what the
    /// frontend spends per frame with each backend.
    pub cycles: Option<CoreCycles>,
}

impl Throughput {
    /// Million frames received per second, testpmd's clock.
    pub fn mpps(&self) -> f64 {
        self.rx_pps as f64 / 1e6
    }

    /// Million frames received per second, RX-packets delta over the
    /// harness's clock.
    pub fn mpps_host_clock(&self) -> f64 {
        self.rx_packets as f64 / self.window.as_secs_f64() / 1e6
    }

    /// Gigabits per second of L2 frame bytes received, testpmd's clock.
    pub fn gbps(&self) -> f64 {
        self.rx_bps as f64 / 1e9
    }

    /// Average received frame length in bytes (RX-bytes / RX-packets delta).
    pub fn avg_frame_len(&self) -> f64 {
        if self.rx_packets == 0 {
            0.0
        } else {
            self.rx_bytes as f64 / self.rx_packets as f64
        }
    }
}

impl std::fmt::Display for Throughput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.3} Mpps ({:.3} Mpps on the harness clock), {:.2} Gbps, {:.1} B/frame, \
             {} frames in {:.2} s, steal {:.1} %, foreign CPU {:.1} %",
            self.mpps(),
            self.mpps_host_clock(),
            self.gbps(),
            self.avg_frame_len(),
            self.rx_packets,
            self.window.as_secs_f64(),
            self.steal * 100.0,
            self.foreign * 100.0
        )
    }
}

/// Whether testpmd's `label` names the counter `field`: the label is the
/// field's name with `-` for `_`, in either case (`RX-packets`, `Rx-pps`).
fn is_label_of(label: &str, field: &str) -> bool {
    label.len() == field.len()
        && label
            .bytes()
            .zip(field.bytes())
            .all(|(l, f)| l.to_ascii_lowercase() == if f == b'_' { b'-' } else { f })
}

/// Implements, for a statistics block's struct, storing the numeric fields
/// of a line in the listed counters ([`is_label_of`]) and adding another
/// block's counters.
macro_rules! impl_counters {
    ($ty:ident: $($field:ident)*) => {
        impl $ty {
            /// Stores the numeric fields of `line` in the counters they label.
            fn set_from(&mut self, line: &str) {
                for (key, value) in fields(line) {
                    $(if is_label_of(key, stringify!($field)) {
                        self.$field = value;
                    })*
                }
            }

            /// Adds `other`'s counters to these.
            #[allow(dead_code)] // not every block is summed
            fn add(&mut self, other: &Self) {
                $(self.$field += other.$field;)*
            }
        }
    };
}

impl_counters! { PortStats:
    rx_packets rx_missed rx_bytes rx_errors rx_nombuf tx_packets tx_errors tx_bytes
    rx_pps rx_bps tx_pps tx_bps
}
impl_counters! { StreamStats: rx_packets tx_packets tx_dropped }
impl_counters! { PortFwdStats: rx_packets rx_dropped rx_total tx_packets tx_dropped tx_total }

/// `Key: value` pairs of a testpmd statistics line, e.g.
/// `RX-packets: 0   RX-missed: 0   RX-bytes:  0`. Only numeric values count.
fn fields(line: &str) -> Vec<(&str, u64)> {
    let tokens: Vec<&str> = line.split_whitespace().collect();
    tokens
        .windows(2)
        .filter_map(|w| {
            let key = w[0].strip_suffix(':')?;
            Some((key, w[1].parse().ok()?))
        })
        .collect()
}

/// Whether `line` is a rule made of one repeated character (`####`, `----`,
/// `++++`) closing a statistics block.
fn is_rule(line: &str) -> bool {
    let t = line.trim();
    let mut chars = t.chars();
    match chars.next() {
        Some(c @ ('#' | '-' | '+')) => t.len() > 8 && chars.all(|x| x == c),
        _ => false,
    }
}

/// All decimal numbers in `s`, in order.
fn numbers(s: &str) -> Vec<u64> {
    s.split(|c: char| !c.is_ascii_digit())
        .filter(|t| !t.is_empty())
        .filter_map(|t| t.parse().ok())
        .collect()
}

/// Parses the output of `show port stats all` (or `show port stats N`).
pub fn parse_port_stats(text: &str) -> Vec<PortStats> {
    let mut out = Vec::new();
    let mut cur: Option<PortStats> = None;
    for line in text.lines() {
        if let Some(rest) = line.split("NIC statistics for port").nth(1) {
            if let Some(done) = cur.take() {
                out.push(done);
            }
            let port = numbers(rest).first().copied().unwrap_or(0);
            cur = Some(PortStats {
                port: u16::try_from(port).unwrap_or(u16::MAX),
                ..PortStats::default()
            });
            continue;
        }
        let Some(s) = cur.as_mut() else { continue };
        if is_rule(line) {
            out.push(cur.take().expect("checked above"));
            continue;
        }
        s.set_from(line);
    }
    out.extend(cur);
    out
}

/// Which block of the `stop` output a line belongs to.
enum FwdBlock {
    Stream(usize),
    Port(usize),
    Total,
}

/// Parses the forward statistics printed by `stop`.
pub fn parse_fwd_stats(text: &str) -> FwdStats {
    let mut st = FwdStats {
        total: PortFwdStats {
            port: u16::MAX,
            ..PortFwdStats::default()
        },
        ..FwdStats::default()
    };
    let mut block = None;
    let to_u16 = |v: u64| u16::try_from(v).unwrap_or(u16::MAX);
    for line in text.lines() {
        if let Some(rest) = line.split("Forward Stats for RX Port=").nth(1) {
            let n = numbers(rest);
            if n.len() >= 4 {
                st.streams.push(StreamStats {
                    rx_port: to_u16(n[0]),
                    rx_queue: to_u16(n[1]),
                    tx_port: to_u16(n[2]),
                    tx_queue: to_u16(n[3]),
                    ..StreamStats::default()
                });
                block = Some(FwdBlock::Stream(st.streams.len() - 1));
            }
            continue;
        }
        if let Some(rest) = line.split("Forward statistics for port").nth(1) {
            let port = numbers(rest).first().copied().unwrap_or(0);
            st.ports.push(PortFwdStats {
                port: to_u16(port),
                ..PortFwdStats::default()
            });
            block = Some(FwdBlock::Port(st.ports.len() - 1));
            continue;
        }
        if line.contains("Accumulated forward statistics for all ports") {
            block = Some(FwdBlock::Total);
            continue;
        }
        if is_rule(line) {
            block = None;
            continue;
        }
        match block {
            Some(FwdBlock::Stream(i)) => st.streams[i].set_from(line),
            Some(FwdBlock::Port(i)) => st.ports[i].set_from(line),
            Some(FwdBlock::Total) => st.total.set_from(line),
            None => {}
        }
    }
    st
}

/// Sums of the packet and byte counters of several ports (rates included).
pub fn sum_port_stats(stats: &[PortStats]) -> PortStats {
    let mut sum = PortStats {
        port: u16::MAX,
        ..PortStats::default()
    };
    for s in stats {
        sum.add(s);
    }
    sum
}

// ===== Process plumbing =====

/// Output collected by a reader thread.
#[derive(Debug, Default)]
struct Collected {
    bytes: Vec<u8>,
    eof: bool,
}

/// A buffer a reader thread fills from a pipe, with a condition variable
/// signalled on every chunk and at end of file.
#[derive(Debug, Default)]
pub(crate) struct OutputBuf {
    inner: Mutex<Collected>,
    cond: Condvar,
}

impl OutputBuf {
    /// Starts a thread that copies `src` into a new buffer until EOF.
    pub(crate) fn spawn_reader(
        name: &str,
        mut src: impl Read + Send + 'static,
    ) -> (Arc<Self>, JoinHandle<()>) {
        let buf = Arc::new(Self::default());
        let b = Arc::clone(&buf);
        let handle = std::thread::Builder::new()
            .name(format!("{name}-out"))
            .spawn(move || {
                let mut chunk = vec![0u8; 65536];
                loop {
                    match src.read(&mut chunk) {
                        Ok(0) => break,
                        Ok(n) => {
                            let mut g = b.lock();
                            g.bytes.extend_from_slice(&chunk[..n]);
                            b.cond.notify_all();
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(_) => break,
                    }
                }
                b.lock().eof = true;
                b.cond.notify_all();
            })
            .expect("spawn reader thread");
        (buf, handle)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Collected> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Everything collected so far, as text.
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.lock().bytes).into_owned()
    }

    /// Waits until `pred(bytes)` returns `Some`, EOF, or `timeout`.
    /// Returns `Ok(value)`, or `Err(eof)` on EOF or timeout.
    fn wait_for<T>(
        &self,
        timeout: Duration,
        mut pred: impl FnMut(&[u8]) -> Option<T>,
    ) -> Result<T, bool> {
        let deadline = Instant::now() + timeout;
        let mut g = self.lock();
        loop {
            if let Some(v) = pred(&g.bytes) {
                return Ok(v);
            }
            if g.eof {
                return Err(true);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(false);
            }
            g = self
                .cond
                .wait_timeout(g, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// A pipe whose write end is shared by the child's stdout and stderr.
fn pipe() -> (File, OwnedFd) {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(rc, 0, "pipe2: {}", std::io::Error::last_os_error());
    // SAFETY: pipe2 succeeded, so both fds are open and owned by nobody else.
    let (r, w) = unsafe { (File::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    (r, w)
}

/// Makes the child receive SIGKILL when the thread that spawned it exits
/// (see the module doc), so a crashed test leaves no busy poller running.
pub(crate) fn kill_with_parent(cmd: &mut Command) {
    // SAFETY: the closure runs between fork and exec and only calls
    // async-signal-safe functions (prctl, getppid).
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died before prctl took effect.
            if libc::getppid() == 1 {
                return Err(std::io::Error::other("parent exited"));
            }
            Ok(())
        });
    }
}

/// Sends `sig` to `child` unless it has been reaped.
pub(crate) fn signal(child: &Child, sig: libc::c_int) {
    let pid = libc::pid_t::try_from(child.id()).expect("pid fits pid_t");
    // SAFETY: kill has no memory-safety preconditions; the pid is our
    // un-reaped child, so it cannot have been recycled.
    unsafe { libc::kill(pid, sig) };
}

/// Waits up to `timeout` for `child` to exit.
pub(crate) fn wait_timeout(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(POLL_INTERVAL),
            Ok(None) => return None,
            Err(e) => panic!("waitpid: {e}"),
        }
    }
}

/// SIGTERM, a grace period, SIGKILL; returns the exit status.
pub(crate) fn terminate(child: &mut Child, grace: Duration) -> Option<ExitStatus> {
    if let Ok(Some(status)) = child.try_wait() {
        return Some(status);
    }
    signal(child, libc::SIGTERM);
    if let Some(status) = wait_timeout(child, grace) {
        return Some(status);
    }
    let _ = child.kill();
    child.wait().ok()
}

/// Waits until `path` exists, polling; fails early when `alive` says the
/// process that should create it has gone.
///
/// # Errors
///
/// A message saying why the wait failed.
pub fn wait_for_path(
    path: &Path,
    timeout: Duration,
    mut alive: impl FnMut() -> bool,
) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    loop {
        if path.exists() {
            return Ok(());
        }
        if !alive() {
            return Err(format!("process exited before creating {}", path.display()));
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "{} did not appear within {timeout:?}",
                path.display()
            ));
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

// ===== Testpmd =====

/// Which vdev a [`Testpmd`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `net_virtio_user0`: a vhost-user frontend.
    Frontend,
    /// `net_vhost0`: DPDK's vhost-user backend.
    VhostBackend,
}

/// A running interactive `dpdk-testpmd`.
///
/// Commands are serialised: [`Testpmd::command`] writes one line and returns
/// the output up to the next prompt. Waits are bounded by the `*_TIMEOUT`
/// constants; on failure the harness panics with the log.
#[derive(Debug)]
pub struct Testpmd {
    name: String,
    role: Role,
    child: Child,
    stdin: Option<ChildStdin>,
    out: Arc<OutputBuf>,
    reader: Option<JoinHandle<()>>,
    /// Offset in the output just past the last prompt consumed.
    consumed: usize,
    /// Whether the first prompt has been seen.
    ready: bool,
    file_prefix: String,
    socket: PathBuf,
    /// The socket must be removed on drop (testpmd created it: server).
    owns_socket: bool,
    /// The log has already been printed in a panic message.
    log_reported: bool,
    args: Vec<String>,
}

impl Testpmd {
    /// Starts testpmd as a virtio-user frontend and returns at once; then
    /// [`Testpmd::wait_ready`]. With `server=1` testpmd creates the socket
    /// ([`Testpmd::wait_socket`]) and blocks in EAL init until the backend
    /// connects, so start the backend between the two waits.
    ///
    /// # Panics
    ///
    /// If testpmd cannot be started.
    pub fn spawn(opts: &FrontendOpts) -> Self {
        Self::spawn_args(
            "testpmd-frontend",
            Role::Frontend,
            opts.args(),
            &opts.port.file_prefix,
            &opts.socket,
            opts.server,
        )
    }

    /// Starts testpmd as DPDK's vhost backend. Returns at once; see
    /// [`start_vhost_backend`] for the usual spawn + ready + `start`.
    ///
    /// # Panics
    ///
    /// If testpmd cannot be started.
    pub fn spawn_vhost_backend(opts: &VhostBackendOpts) -> Self {
        Self::spawn_args(
            "testpmd-vhost",
            Role::VhostBackend,
            opts.args(),
            &opts.port.file_prefix,
            &opts.socket,
            !opts.client,
        )
    }

    fn spawn_args(
        name: &str,
        role: Role,
        args: Vec<String>,
        file_prefix: &str,
        socket: &Path,
        owns_socket: bool,
    ) -> Self {
        let bin = testpmd_bin();
        let (r, w) = pipe();
        let w2 = w.try_clone().expect("dup pipe");
        let mut cmd = Command::new("stdbuf");
        cmd.arg("-oL")
            .arg("-eL")
            .arg(&bin)
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::from(w))
            .stderr(Stdio::from(w2));
        kill_with_parent(&mut cmd);
        // SAFETY: the closure runs between fork and exec and only calls
        // signal(2), which is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                // virtio-user writes to the vhost-user socket without
                // MSG_NOSIGNAL: when the backend has gone first, closing the
                // port would kill testpmd with SIGPIPE instead of reporting.
                if libc::signal(libc::SIGPIPE, libc::SIG_IGN) == libc::SIG_ERR {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn().unwrap_or_else(|e| {
            panic!(
                "cannot start stdbuf {} {}: {e}",
                bin.display(),
                args.join(" ")
            )
        });
        // `cmd` holds the pipe's write ends: drop it so EOF means "exited".
        drop(cmd);
        let stdin = child.stdin.take();
        let (out, reader) = OutputBuf::spawn_reader(name, r);
        Self {
            name: name.to_string(),
            role,
            child,
            stdin,
            out,
            reader: Some(reader),
            consumed: 0,
            ready: false,
            file_prefix: file_prefix.to_string(),
            socket: socket.to_path_buf(),
            owns_socket,
            log_reported: false,
            args,
        }
    }

    /// The role this process plays.
    pub fn role(&self) -> Role {
        self.role
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The `--file-prefix`.
    pub fn file_prefix(&self) -> &str {
        &self.file_prefix
    }

    /// The command line (after the binary).
    pub fn args(&self) -> &[String] {
        &self.args
    }

    /// Everything testpmd printed so far (stdout and stderr, in order).
    pub fn log(&self) -> String {
        self.out.text()
    }

    /// Panics with `msg` and the log.
    ///
    /// # Panics
    ///
    /// Always.
    pub fn fail(&mut self, msg: &str) -> ! {
        self.log_reported = true;
        panic!(
            "{}: {msg}\n  args: {}\n----- {} log -----\n{}\n----- end of {} log -----",
            self.name,
            self.args.join(" "),
            self.name,
            self.log(),
            self.name
        )
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits until the vhost-user socket file exists: the frontend with
    /// `server=1`, or the vhost backend in server mode, created it.
    ///
    /// # Panics
    ///
    /// On timeout, or if testpmd exits first.
    pub fn wait_socket(&mut self, timeout: Duration) {
        let path = self.socket.clone();
        let child = &mut self.child;
        if let Err(e) = wait_for_path(&path, timeout, || matches!(child.try_wait(), Ok(None))) {
            self.fail(&e);
        }
    }

    /// Waits for the first prompt: EAL is up and the port is configured and
    /// started.
    ///
    /// # Panics
    ///
    /// On timeout, or if testpmd exits first.
    pub fn wait_ready(&mut self, timeout: Duration) {
        if self.ready {
            return;
        }
        self.wait_prompt(timeout, "the first prompt");
        self.ready = true;
    }

    /// Waits for the next prompt after `self.consumed`, returns the text in
    /// between and consumes it.
    fn wait_prompt(&mut self, timeout: Duration, what: &str) -> String {
        let from = self.consumed;
        let found = self.out.wait_for(timeout, |b| {
            find(&b[from.min(b.len())..], PROMPT).map(|i| from + i)
        });
        match found {
            Ok(at) => {
                let text = {
                    let g = self.out.lock();
                    String::from_utf8_lossy(&g.bytes[from..at]).into_owned()
                };
                self.consumed = at + PROMPT.len();
                text
            }
            Err(true) => {
                let status = self
                    .child
                    .wait()
                    .map_or_else(|e| format!("wait failed: {e}"), |s| s.to_string());
                self.fail(&format!("exited ({status}) while waiting for {what}"))
            }
            Err(false) => self.fail(&format!("no {what} within {timeout:?}")),
        }
    }

    /// Runs one interactive command and returns its output (from the echoed
    /// command line to the next prompt). Waits for the first prompt first.
    ///
    /// # Panics
    ///
    /// On timeout, if testpmd exits, or if stdin is closed.
    pub fn command_timeout(&mut self, cmd: &str, timeout: Duration) -> String {
        self.wait_ready(READY_TIMEOUT);
        let Some(stdin) = self.stdin.as_mut() else {
            self.fail(&format!("stdin closed, cannot send {cmd:?}"))
        };
        if let Err(e) = stdin
            .write_all(format!("{cmd}\n").as_bytes())
            .and_then(|()| stdin.flush())
        {
            self.fail(&format!("cannot send {cmd:?}: {e}"));
        }
        self.wait_prompt(timeout, &format!("the prompt after {cmd:?}"))
    }

    /// [`Testpmd::command_timeout`] with [`COMMAND_TIMEOUT`].
    ///
    /// # Panics
    ///
    /// See [`Testpmd::command_timeout`].
    pub fn command(&mut self, cmd: &str) -> String {
        self.command_timeout(cmd, COMMAND_TIMEOUT)
    }

    /// Waits until every port reports `Link status: up` in
    /// `show port info all`.
    ///
    /// # Panics
    ///
    /// On timeout.
    pub fn wait_link_up(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let info = self.command("show port info all");
            let states: Vec<bool> = info
                .lines()
                .filter_map(|l| l.split("Link status:").nth(1))
                .map(|s| s.trim() == "up")
                .collect();
            if !states.is_empty() && states.iter().all(|&up| up) {
                return;
            }
            if Instant::now() >= deadline {
                self.fail(&format!("link not up within {timeout:?}:\n{info}"));
            }
            std::thread::sleep(POLL_INTERVAL * 5);
        }
    }

    /// Every port's MAC address (lower case), by port id, from
    /// `show port info all`.
    ///
    /// # Panics
    ///
    /// If the output has no port.
    pub fn port_macs(&mut self) -> Vec<String> {
        let info = self.command("show port info all");
        let macs: Vec<String> = info
            .lines()
            .filter_map(|l| l.trim().strip_prefix("MAC address:"))
            .map(|m| m.trim().to_ascii_lowercase())
            .collect();
        if macs.is_empty() {
            self.fail(&format!("no MAC address in `show port info all`:\n{info}"));
        }
        macs
    }

    /// `start`: begins forwarding (flushing the RX queues first).
    ///
    /// # Panics
    ///
    /// If testpmd refuses.
    pub fn start(&mut self) {
        let out = self.command("start");
        self.check_started(&out, "start");
    }

    /// `start tx_first N`: sends `bursts` bursts of 32 frames on every
    /// forwarding stream's TX queue, then forwards. With `mac` forwarding
    /// against a loopback backend those frames circulate until `stop`.
    ///
    /// # Panics
    ///
    /// If testpmd refuses.
    pub fn start_tx_first(&mut self, bursts: u32) {
        let cmd = format!("start tx_first {bursts}");
        let out = self.command(&cmd);
        self.check_started(&out, &cmd);
    }

    fn check_started(&mut self, out: &str, cmd: &str) {
        if out.contains("Packet forwarding already started") || !out.contains("forwarding") {
            self.fail(&format!("{cmd:?} did not start forwarding:\n{out}"));
        }
    }

    /// `set fwd MODE`.
    ///
    /// # Panics
    ///
    /// If testpmd rejects the mode.
    pub fn set_fwd(&mut self, mode: &str) {
        let out = self.command(&format!("set fwd {mode}"));
        if !out.contains(&format!("Set {mode} packet forwarding mode")) {
            self.fail(&format!("set fwd {mode} failed:\n{out}"));
        }
    }

    /// `show port stats all`, parsed. Note that it resets the reference
    /// point of the `Rx-pps`/`Tx-pps` rates.
    ///
    /// # Panics
    ///
    /// If no port block could be parsed.
    pub fn port_stats(&mut self) -> Vec<PortStats> {
        let out = self.command("show port stats all");
        let stats = parse_port_stats(&out);
        if stats.is_empty() {
            self.fail(&format!("cannot parse `show port stats all`:\n{out}"));
        }
        stats
    }

    /// [`Testpmd::port_stats`] summed over ports.
    ///
    /// # Panics
    ///
    /// See [`Testpmd::port_stats`].
    pub fn total_stats(&mut self) -> PortStats {
        sum_port_stats(&self.port_stats())
    }

    /// `stop`, returning the forward statistics it prints (empty if
    /// forwarding was not started).
    ///
    /// # Panics
    ///
    /// On timeout.
    pub fn stop(&mut self) -> FwdStats {
        let out = self.command("stop");
        parse_fwd_stats(&out)
    }

    /// The forwarding core's cycle count since `start`, from `show fwd stats
    /// all`, when testpmd runs with `--record-core-cycles`: testpmd 22.11
    /// prints `CPU cycles/packet=X (total cycles=C / total RX packets=P) at
    /// M MHz Clock`. What it counts (22.11's forwarding engines): the TSC
    /// cycles of each forwarding call that received at least one packet,
    /// from before its receive to after its transmit; calls that found
    /// nothing and the loop between calls are not counted. `None` when the
    /// line is absent.
    pub fn core_cycles(&mut self) -> Option<CoreCycles> {
        let out = self.command("show fwd stats all");
        parse_core_cycles(&out)
    }

    /// Polls `show port stats all` until the ports together received at
    /// least `rx_packets` frames; returns the last reading (summed).
    ///
    /// # Panics
    ///
    /// On timeout.
    pub fn wait_rx_packets(&mut self, rx_packets: u64, timeout: Duration) -> PortStats {
        let deadline = Instant::now() + timeout;
        loop {
            let s = self.total_stats();
            if s.rx_packets >= rx_packets {
                return s;
            }
            if Instant::now() >= deadline {
                self.fail(&format!(
                    "received {} frames, not {rx_packets}, within {timeout:?}; last stats: {s:?}",
                    s.rx_packets
                ));
            }
            std::thread::sleep(POLL_INTERVAL * 5);
        }
    }

    /// Drains a loopback after `stop` (call it in a forwarding mode that
    /// transmits nothing, e.g. `rxonly`): polls `show port stats all` until
    /// every frame testpmd transmitted came back (`rx_packets >=
    /// tx_packets`) and the counters then stay unchanged for `quiet`;
    /// returns that reading (summed). Standing still alone is no end: a
    /// stalled backend stands still too.
    ///
    /// After `timeout` it returns the last reading anyway, for the caller to
    /// judge with its own context (frames lost or still held somewhere).
    pub fn wait_drained(&mut self, quiet: Duration, timeout: Duration) -> PortStats {
        let deadline = Instant::now() + timeout;
        let mut last = self.total_stats();
        let mut since = Instant::now();
        loop {
            std::thread::sleep(POLL_INTERVAL * 5);
            let s = self.total_stats();
            if (s.rx_packets, s.tx_packets) != (last.rx_packets, last.tx_packets) {
                last = s;
                since = Instant::now();
            } else if s.rx_packets >= s.tx_packets && since.elapsed() >= quiet {
                return s;
            }
            if Instant::now() >= deadline {
                return s;
            }
        }
    }

    /// Measures the receive rate while forwarding runs: waits `warmup`, takes
    /// a first `show port stats all` (which also restarts testpmd's rate
    /// reference), waits `window`, takes a second one. See [`Throughput`]
    /// for which clock the figures use.
    ///
    /// # Panics
    ///
    /// If the stats cannot be read.
    pub fn measure(&mut self, warmup: Duration, window: Duration) -> Throughput {
        self.measure_with_peers(warmup, window, &[])
    }

    /// [`Testpmd::measure`], also accounting the CPU time of `peers` (the
    /// backend's process ids) as our own in [`Throughput::foreign`].
    ///
    /// # Panics
    ///
    /// If the stats cannot be read.
    pub fn measure_with_peers(
        &mut self,
        warmup: Duration,
        window: Duration,
        peers: &[u32],
    ) -> Throughput {
        self.measure_marked(warmup, window, peers, &mut |_| {})
    }

    /// [`Testpmd::measure_with_peers`], calling `mark(false)` just after the
    /// window opens and `mark(true)` just before it closes (e.g. to read the
    /// backends' cycle counters over the same window).
    pub fn measure_marked(
        &mut self,
        warmup: Duration,
        window: Duration,
        peers: &[u32],
        mark: &mut dyn FnMut(bool),
    ) -> Throughput {
        let mut pids = vec![self.pid()];
        pids.extend_from_slice(peers);
        let ours = || pids.iter().map(|&p| process_ticks(p)).sum::<u64>();
        std::thread::sleep(warmup);
        let records = self.args.iter().any(|a| a == "--record-core-cycles");
        let ca = records.then(|| self.core_cycles()).flatten();
        let a = self.total_stats();
        let t0 = Instant::now();
        let (b0, s0, c0) = cpu_ticks();
        let p0 = ours();
        mark(false);
        std::thread::sleep(window.saturating_sub(t0.elapsed()));
        mark(true);
        let b = self.total_stats();
        let elapsed = t0.elapsed();
        let cb = records.then(|| self.core_cycles()).flatten();
        let (b1, s1, c1) = cpu_ticks();
        let p1 = ours();
        let total = c1.saturating_sub(c0).max(1) as f64;
        let foreign = b1.saturating_sub(b0).saturating_sub(p1.saturating_sub(p0));
        Throughput {
            window: elapsed,
            rx_packets: b.rx_packets.saturating_sub(a.rx_packets),
            rx_bytes: b.rx_bytes.saturating_sub(a.rx_bytes),
            tx_packets: b.tx_packets.saturating_sub(a.tx_packets),
            rx_pps: b.rx_pps,
            rx_bps: b.rx_bps,
            tx_pps: b.tx_pps,
            steal: s1.saturating_sub(s0) as f64 / total,
            foreign: foreign as f64 / total,
            cycles: ca.zip(cb).map(|(a, b)| b.since(&a)),
        }
    }

    /// The virtio feature bits negotiated on the socket, when the log shows
    /// them: a frontend with [`FrontendOpts::log_features`] prints
    /// `features after negotiate = <hex>`; the vhost backend prints
    /// `negotiated Virtio features: 0x<hex>`. The last occurrence wins (the
    /// frontend renegotiates when it grows its memory).
    pub fn negotiated_features(&self) -> Option<u64> {
        last_hex_after(
            &self.log(),
            &[
                "features after negotiate = ",
                "negotiated Virtio features: ",
            ],
        )
    }

    /// The vhost-user protocol features the vhost backend negotiated
    /// (`negotiated Vhost-user protocol features: 0x<hex>`).
    pub fn negotiated_protocol_features(&self) -> Option<u64> {
        last_hex_after(&self.log(), &["negotiated Vhost-user protocol features: "])
    }

    /// `quit`: testpmd stops forwarding, closes its ports and exits. Returns
    /// the exit status and the whole log.
    ///
    /// # Panics
    ///
    /// If testpmd does not exit within [`EXIT_TIMEOUT`].
    pub fn quit(mut self) -> (ExitStatus, String) {
        if let Some(mut stdin) = self.stdin.take() {
            // EOF after `quit` also ends the command line reader.
            let _ = stdin.write_all(b"quit\n");
        }
        let Some(status) = wait_timeout(&mut self.child, EXIT_TIMEOUT) else {
            self.fail(&format!("did not exit within {EXIT_TIMEOUT:?} of `quit`"))
        };
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        (status, self.log())
    }

    /// Removes what EAL leaves behind for this prefix: `/var/run/dpdk/<prefix>`
    /// and hugepage files named `<prefix>map_*`.
    fn cleanup_files(&self) {
        let _ = std::fs::remove_dir_all(Path::new("/var/run/dpdk").join(&self.file_prefix));
        for dir in hugetlbfs_mounts() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            let stem = format!("{}map_", self.file_prefix);
            for e in entries.flatten() {
                if e.file_name().to_string_lossy().starts_with(&stem) {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        if self.owns_socket {
            let _ = std::fs::remove_file(&self.socket);
        }
    }
}

impl Drop for Testpmd {
    fn drop(&mut self) {
        drop(self.stdin.take());
        terminate(&mut self.child, KILL_GRACE);
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        self.cleanup_files();
        if std::thread::panicking() && !self.log_reported {
            eprintln!(
                "----- {} log (pid {}, args {}) -----\n{}\n----- end of {} log -----",
                self.name,
                self.child.id(),
                self.args.join(" "),
                self.log(),
                self.name
            );
        }
    }
}

/// The first index of `needle` in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The hexadecimal number after the last occurrence of any of `markers`
/// (e.g. the feature bits a backend logged as negotiated).
pub fn last_hex_after(log: &str, markers: &[&str]) -> Option<u64> {
    let mut best: Option<(usize, u64)> = None;
    for m in markers {
        if let Some(i) = log.rfind(m) {
            let rest = &log[i + m.len()..];
            let rest = rest.trim_start().trim_start_matches("0x");
            let hex: String = rest.chars().take_while(char::is_ascii_hexdigit).collect();
            if let Ok(v) = u64::from_str_radix(&hex, 16) {
                if best.is_none_or(|(j, _)| i > j) {
                    best = Some((i, v));
                }
            }
        }
    }
    best.map(|(_, v)| v)
}

/// Starts DPDK's vhost backend, waits for its prompt and starts forwarding.
///
/// In server mode (`client: false`) the socket exists when this returns. In
/// client mode the vhost library connects (and reconnects) in the
/// background, so the frontend's socket may appear later.
///
/// # Panics
///
/// On any failure, with the log.
pub fn start_vhost_backend(opts: &VhostBackendOpts) -> Testpmd {
    let mut be = Testpmd::spawn_vhost_backend(opts);
    be.wait_ready(READY_TIMEOUT);
    if !opts.client {
        be.wait_socket(READY_TIMEOUT);
    }
    be.start();
    be
}

/// See [`Testpmd::core_cycles`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CoreCycles {
    /// Cycles of forwarding calls that received packets.
    pub cycles: u64,
    /// Packets those calls received.
    pub packets: u64,
    /// The TSC rate testpmd assumed, in MHz.
    pub mhz: u64,
}

impl CoreCycles {
    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            cycles: self.cycles.saturating_sub(earlier.cycles),
            packets: self.packets.saturating_sub(earlier.packets),
            mhz: self.mhz,
        }
    }

    /// Cycles per packet.
    pub fn per_packet(&self) -> Option<f64> {
        (self.packets > 0).then(|| self.cycles as f64 / self.packets as f64)
    }

    /// The counted cycles as a fraction of `window` of one core's time.
    pub fn fraction_of(&self, window: Duration) -> Option<f64> {
        let all = self.mhz as f64 * 1e6 * window.as_secs_f64();
        (all > 0.0).then(|| self.cycles as f64 / all)
    }
}

/// Parses the `CPU cycles/packet=` line of `show fwd stats all` (the last
/// one: the accumulated totals).
pub fn parse_core_cycles(out: &str) -> Option<CoreCycles> {
    let line = out
        .lines()
        .rev()
        .find(|l| l.contains("CPU cycles/packet="))?;
    let num_after = |key: &str| -> Option<u64> {
        let rest = &line[line.find(key)? + key.len()..];
        let end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        rest[..end].parse().ok()
    };
    let packets = {
        let at = line.find(" packets=")?;
        let rest = &line[at + " packets=".len()..];
        let end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        rest[..end].parse().ok()?
    };
    Some(CoreCycles {
        cycles: num_after("cycles=")?,
        packets,
        mhz: num_after(") at ")?,
    })
}

/// Names of the known feature bits set in `bits` ([`crate::features`]), for
/// reports.
pub fn feature_names(bits: u64) -> Vec<&'static str> {
    crate::features::NAMES
        .iter()
        .filter(|(b, _)| bits & (1u64 << b) != 0)
        .map(|&(_, n)| n)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One port's block of `show port stats`, laid out as testpmd prints it; `c` holds
    /// RX-packets, RX-missed, RX-bytes, RX-errors, RX-nombuf, TX-packets, TX-errors, TX-bytes,
    /// Rx-pps, Rx-bps, Tx-pps and Tx-bps.
    fn nic_block(port: u16, c: [u64; 12]) -> String {
        let [rp, rm, rb, re, rn, tp, te, tb, rpps, rbps, tpps, tbps] = c;
        format!(
            "  ######################## NIC statistics for port {port}  ########################
  RX-packets: {rp:<11}RX-missed: {rm:<11}RX-bytes:  {rb}
  RX-errors: {re}
  RX-nombuf:  {rn:<10}
  TX-packets: {tp:<11}TX-errors: {te:<11}TX-bytes:  {tb}

  Throughput (since last show)
  Rx-pps: {rpps:>12}          Rx-bps: {rbps:>12}
  Tx-pps: {tpps:>12}          Tx-bps: {tbps:>12}
  ############################################################################
"
        )
    }

    #[test]
    fn parses_core_cycles() {
        let out = "  ---------------------- Forward statistics for port 0  ----------------------\n\
                   \n  CPU cycles/packet=212.37 (total cycles=2123700000 / total RX packets=10000000) at 2400 MHz Clock\n";
        let c = parse_core_cycles(out).unwrap();
        assert_eq!(
            c,
            CoreCycles {
                cycles: 2_123_700_000,
                packets: 10_000_000,
                mhz: 2400
            }
        );
        let w = c.since(&CoreCycles {
            cycles: 123_700_000,
            packets: 0,
            mhz: 2400,
        });
        assert_eq!(w.per_packet(), Some(200.0));
        assert_eq!(w.fraction_of(Duration::from_secs(1)), Some(2e9 / 2.4e9));
        assert_eq!(parse_core_cycles("no such line"), None);
    }

    /// The output of `show port stats all` for two ports.
    fn port_stats_text() -> String {
        format!(
            "show port stats all\n\n{}\n{}",
            nic_block(
                0,
                [
                    1234,
                    5,
                    78976,
                    6,
                    7,
                    512,
                    8,
                    32768,
                    9_999_999,
                    5_119_999_488,
                    3,
                    4
                ]
            ),
            nic_block(1, [1, 0, 64, 0, 0, 2, 0, 128, 1, 0, 0, 0])
        )
    }

    #[test]
    fn parses_port_stats() {
        let s = parse_port_stats(&port_stats_text());
        assert_eq!(s.len(), 2);
        assert_eq!(
            s[0],
            PortStats {
                port: 0,
                rx_packets: 1234,
                rx_missed: 5,
                rx_bytes: 78976,
                rx_errors: 6,
                rx_nombuf: 7,
                tx_packets: 512,
                tx_errors: 8,
                tx_bytes: 32768,
                rx_pps: 9_999_999,
                rx_bps: 5_119_999_488,
                tx_pps: 3,
                tx_bps: 4,
            }
        );
        assert_eq!(s[1].port, 1);
        assert_eq!(s[1].tx_bytes, 128);
        let t = sum_port_stats(&s);
        assert_eq!(
            (t.rx_packets, t.tx_packets, t.rx_pps),
            (1235, 514, 10_000_000)
        );
    }

    const STOP: &str = "stop
Telling cores to stop...
Waiting for lcores to finish...

  ------- Forward Stats for RX Port= 0/Queue= 0 -> TX Port= 0/Queue= 0 -------
  RX-packets: 10             TX-packets: 256            TX-dropped: 768           

  ------- Forward Stats for RX Port= 0/Queue= 1 -> TX Port= 0/Queue= 1 -------
  RX-packets: 20             TX-packets: 250            TX-dropped: 6           

  ---------------------- Forward statistics for port 0  ----------------------
  RX-packets: 30             RX-dropped: 1             RX-total: 31
  TX-packets: 506            TX-dropped: 774           TX-total: 1280
  ----------------------------------------------------------------------------

  +++++++++++++++ Accumulated forward statistics for all ports+++++++++++++++
  RX-packets: 30             RX-dropped: 1             RX-total: 31
  TX-packets: 506            TX-dropped: 774           TX-total: 1280
  ++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++

Done.
";

    #[test]
    fn parses_fwd_stats() {
        let f = parse_fwd_stats(STOP);
        assert_eq!(f.streams.len(), 2);
        assert_eq!(
            f.stream(0, 1),
            Some(&StreamStats {
                rx_port: 0,
                rx_queue: 1,
                tx_port: 0,
                tx_queue: 1,
                rx_packets: 20,
                tx_packets: 250,
                tx_dropped: 6,
            })
        );
        assert_eq!(f.ports.len(), 1);
        assert_eq!(
            f.ports[0],
            PortFwdStats {
                port: 0,
                rx_packets: 30,
                rx_dropped: 1,
                rx_total: 31,
                tx_packets: 506,
                tx_dropped: 774,
                tx_total: 1280,
            }
        );
        assert_eq!(f.total.tx_total, 1280);
        assert_eq!(f.total.port, u16::MAX);
        assert!(parse_fwd_stats("Packet forwarding not started\n")
            .streams
            .is_empty());
    }

    #[test]
    fn parses_features() {
        let log = "VHOST_CONFIG: (/x) negotiated Virtio features: 0x950008000\n\
                   VHOST_CONFIG: (/x) negotiated Vhost-user protocol features: 0x10009\n";
        assert_eq!(
            last_hex_after(log, &["negotiated Virtio features: "]),
            Some(0x9_5000_8000)
        );
        assert_eq!(
            feature_names(0x9_5000_8000),
            [
                "MRG_RXBUF",
                "RING_INDIRECT_DESC",
                "VHOST_USER_F_PROTOCOL_FEATURES",
                "VERSION_1",
                "IN_ORDER"
            ]
        );
    }

    #[test]
    fn builds_frontend_args() {
        let mut o = FrontendOpts::new("/tmp/x/s.sock");
        o.port.queues = 2;
        o.server = true;
        o.mrg_rxbuf = Some(false);
        o.port.file_prefix = "p".into();
        o.pkt_len = Some(1518);
        let a = o.args().join(" ");
        assert!(
            a.starts_with("-l 0,1 --main-lcore 0 -n 1 --no-pci --no-huge -m 1024 --file-prefix=p")
        );
        assert!(a.contains(
            "--vdev net_virtio_user0,path=/tmp/x/s.sock,queues=2,server=1,mrg_rxbuf=0 -- -i"
        ));
        assert!(a.contains("--rxq=2 --txq=2"));
        assert!(a.ends_with("--txpkts=1518"));
        let mut b = VhostBackendOpts::new("/tmp/x/s.sock");
        b.port.hugepages = true;
        b.client = true;
        let a = b.args().join(" ");
        assert!(a.starts_with("-l 1,0 --main-lcore 1 -n 1 --no-pci --huge-unlink"));
        assert!(a.contains("net_vhost0,iface=/tmp/x/s.sock,queues=1,client=1 -- -i"));
        assert!(a.contains("--forward-mode=io"));
    }
}
