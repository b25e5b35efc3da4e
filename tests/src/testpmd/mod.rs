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

mod opts;
mod stats;

pub use opts::{
    hugepages_available, unique_prefix, FrontendOpts, Lcores, PortOpts, VhostBackendOpts,
};
pub use stats::{
    parse_core_cycles, parse_fwd_stats, parse_port_stats, sum_port_stats, CoreCycles, FwdStats,
    PortFwdStats, PortStats, StreamStats, Throughput,
};

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::process::{
    cpu_ticks, ignore_sigpipe, kill_with_parent, pipe, process_ticks, terminate, wait_for_path,
    wait_timeout, OutputBuf, POLL_INTERVAL,
};
use opts::hugetlbfs_mounts;

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
        // virtio-user writes to the vhost-user socket without MSG_NOSIGNAL:
        // when the backend has gone first, closing the port would kill
        // testpmd with SIGPIPE instead of reporting.
        ignore_sigpipe(&mut cmd);
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
            self.fail(&e.to_string());
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
                let text = self.out.text_between(from, at);
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
}
