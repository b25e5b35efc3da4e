// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The `echo` example (`examples/echo`) as a process: our backend in its
//! simplest form, a reflector that puts every frame the guest transmits back
//! into the guest's receive queue of the same queue pair.
//!
//! # The binary's interface
//!
//! `echo --socket PATH [--client] [--queues N] [...]` serves one vhost-user
//! device. It logs to stderr. On SIGTERM or SIGINT it prints one line per
//! queue pair to stdout and exits 0:
//!
//! ```text
//! qp=0 tx_packets=N tx_bytes=N rx_packets=N rx_bytes=N tx_dropped=N rx_dropped=N
//! ```
//!
//! `tx` counts frames the guest transmitted and echo dequeued, `rx` frames
//! echo delivered into the guest's RX ring ([`QpCounters`]). Then a line of
//! where its data-plane thread's cycles went ([`CyclesLine`]), which SIGUSR1
//! also prints at any time ([`Echo::report_cycles`]):
//!
//! ```text
//! cycles busy=N idle=N frames=N busy_per_frame=X busy_fraction=Y
//! ```
//!
//! # Locating it
//!
//! `$VHU_ECHO_BIN`, else `$CARGO_TARGET_DIR/release/examples/echo` when that
//! variable is set at run time, else `<workspace>/target/release/examples/echo`.
//! Build it with `cargo build --release --example echo`.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::process::{self, OutputBuf};

/// How long echo may take to create its socket (server mode).
pub const SOCKET_TIMEOUT: Duration = Duration::from_secs(10);

/// How long echo may take to exit after SIGTERM.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// A `cycles busy=N idle=N frames=N ...` line: TSC cycles of the data-plane
/// thread's rounds that moved frames, of those that found none, and the
/// frames moved, since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CyclesLine {
    /// Cycles in rounds that moved frames.
    pub busy: u64,
    /// Cycles in rounds that moved nothing (polling, not sleeping).
    pub idle: u64,
    /// Frames moved.
    pub frames: u64,
}

impl CyclesLine {
    /// Every such line of `stdout`, in order.
    pub fn parse_all(stdout: &str) -> Vec<Self> {
        stdout
            .lines()
            .filter_map(|l| l.strip_prefix("cycles "))
            .filter_map(|rest| {
                let mut c = Self::default();
                let mut seen = 0;
                for kv in rest.split_whitespace() {
                    let (k, v) = kv.split_once('=')?;
                    let slot = match k {
                        "busy" => &mut c.busy,
                        "idle" => &mut c.idle,
                        "frames" => &mut c.frames,
                        _ => continue,
                    };
                    *slot = v.parse().ok()?;
                    seen += 1;
                }
                (seen == 3).then_some(c)
            })
            .collect()
    }

    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            busy: self.busy.saturating_sub(earlier.busy),
            idle: self.idle.saturating_sub(earlier.idle),
            frames: self.frames.saturating_sub(earlier.frames),
        }
    }

    /// Busy cycles per frame moved.
    pub fn busy_per_frame(&self) -> Option<f64> {
        (self.frames > 0).then(|| self.busy as f64 / self.frames as f64)
    }

    /// Busy cycles over all polling cycles.
    pub fn busy_fraction(&self) -> Option<f64> {
        let t = self.busy + self.idle;
        (t > 0).then(|| self.busy as f64 / t as f64)
    }
}

/// One queue pair's counters, as printed by echo on exit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QpCounters {
    /// Queue pair index.
    pub qp: u16,
    /// Frames the guest transmitted and echo dequeued.
    pub tx_packets: u64,
    /// Bytes of those frames.
    pub tx_bytes: u64,
    /// Frames echo delivered into the guest's RX ring.
    pub rx_packets: u64,
    /// Bytes of those frames.
    pub rx_bytes: u64,
    /// Transmitted frames echo dropped (malformed chains).
    pub tx_dropped: u64,
    /// Frames echo could not deliver (no RX buffers) and dropped.
    pub rx_dropped: u64,
}

impl QpCounters {
    /// The sum of several queue pairs' counters (`qp` = `u16::MAX`).
    pub fn sum(qps: &[QpCounters]) -> QpCounters {
        qps.iter().fold(
            QpCounters {
                qp: u16::MAX,
                ..QpCounters::default()
            },
            |a, q| QpCounters {
                qp: a.qp,
                tx_packets: a.tx_packets + q.tx_packets,
                tx_bytes: a.tx_bytes + q.tx_bytes,
                rx_packets: a.rx_packets + q.rx_packets,
                rx_bytes: a.rx_bytes + q.rx_bytes,
                tx_dropped: a.tx_dropped + q.tx_dropped,
                rx_dropped: a.rx_dropped + q.rx_dropped,
            },
        )
    }

    /// Parses one `qp=N key=value ...` line. Unknown keys are ignored;
    /// every known key is required.
    ///
    /// # Errors
    ///
    /// A message naming the missing or malformed field.
    pub fn parse(line: &str) -> Result<Self, String> {
        let mut kv = BTreeMap::new();
        for tok in line.split_whitespace() {
            let (k, v) = tok
                .split_once('=')
                .ok_or_else(|| format!("not key=value: {tok:?} in {line:?}"))?;
            let v: u64 = v
                .parse()
                .map_err(|e| format!("bad value of {k} in {line:?}: {e}"))?;
            kv.insert(k, v);
        }
        let get = |k: &str| {
            kv.get(k)
                .copied()
                .ok_or_else(|| format!("missing {k} in {line:?}"))
        };
        Ok(Self {
            qp: u16::try_from(get("qp")?).map_err(|e| format!("bad qp in {line:?}: {e}"))?,
            tx_packets: get("tx_packets")?,
            tx_bytes: get("tx_bytes")?,
            rx_packets: get("rx_packets")?,
            rx_bytes: get("rx_bytes")?,
            tx_dropped: get("tx_dropped")?,
            rx_dropped: get("rx_dropped")?,
        })
    }
}

/// Parses every `qp=` line of echo's stdout, sorted by queue pair.
///
/// # Errors
///
/// If a `qp=` line is malformed or a queue pair appears twice.
pub fn parse_counters(stdout: &str) -> Result<Vec<QpCounters>, String> {
    let mut qps = stdout
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("qp="))
        .map(QpCounters::parse)
        .collect::<Result<Vec<_>, _>>()?;
    qps.sort_by_key(|q| q.qp);
    if qps.windows(2).any(|w| w[0].qp == w[1].qp) {
        return Err(format!("a queue pair is listed twice:\n{stdout}"));
    }
    Ok(qps)
}

/// The echo binary (see the module doc).
///
/// # Panics
///
/// If it does not exist, with instructions to build it.
pub fn echo_bin() -> PathBuf {
    if let Some(bin) = crate::bins::from_env("VHU_ECHO_BIN") {
        return bin;
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent");
    let mut candidates = Vec::new();
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        candidates.push(PathBuf::from(dir).join("release/examples/echo"));
    }
    candidates.push(workspace.join("target/release/examples/echo"));
    crate::bins::built_example(
        "echo",
        &candidates,
        "cargo build --release --example echo",
        "VHU_ECHO_BIN",
    )
}

/// What echo printed and how it exited.
#[derive(Debug, Clone)]
pub struct EchoOutput {
    /// The exit status.
    pub status: ExitStatus,
    /// Everything echo wrote to stdout.
    pub stdout: String,
    /// Everything echo wrote to stderr (its log).
    pub stderr: String,
    /// The per-queue-pair counters from stdout, sorted by queue pair.
    pub qps: Vec<QpCounters>,
}

impl EchoOutput {
    /// All queue pairs' counters summed.
    pub fn total(&self) -> QpCounters {
        QpCounters::sum(&self.qps)
    }
}

impl std::fmt::Display for EchoOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        crate::bins::fmt_output(f, "echo", &self.status, &self.stdout, &self.stderr)
    }
}

/// A running `echo`. Killed (SIGKILL) when dropped; use [`Echo::stop`] for a
/// clean exit with counters.
#[derive(Debug)]
pub struct Echo {
    child: Child,
    stdout: Arc<OutputBuf>,
    stderr: Arc<OutputBuf>,
    readers: Vec<JoinHandle<()>>,
    socket: PathBuf,
    client: bool,
    args: Vec<String>,
    log_reported: bool,
}

impl Echo {
    /// Starts `echo --socket SOCKET [--client] --queues QUEUES EXTRA...`.
    ///
    /// As a server (`client: false`) it returns once the socket file exists.
    /// As a client it returns at once; echo is expected to connect (and
    /// retry) on its own, and the frontend's prompt or link state tells when
    /// it did.
    ///
    /// # Panics
    ///
    /// If echo cannot be started, exits early, or does not create its socket
    /// within [`SOCKET_TIMEOUT`].
    pub fn spawn<S: AsRef<OsStr>>(
        socket: &Path,
        client: bool,
        queues: u16,
        extra_args: &[S],
    ) -> Self {
        Self::spawn_pinned(socket, client, queues, extra_args, None)
    }

    /// [`Echo::spawn`], with the process's CPU affinity set to `cpus` (for
    /// benchmarks: keep echo off the frontend's forwarding core).
    ///
    /// # Panics
    ///
    /// See [`Echo::spawn`].
    pub fn spawn_pinned<S: AsRef<OsStr>>(
        socket: &Path,
        client: bool,
        queues: u16,
        extra_args: &[S],
        cpus: Option<&[usize]>,
    ) -> Self {
        let bin = echo_bin();
        let mut args: Vec<String> = vec!["--socket".into(), socket.display().to_string()];
        if client {
            args.push("--client".into());
        }
        args.extend(["--queues".into(), queues.to_string()]);
        args.extend(
            extra_args
                .iter()
                .map(|a| a.as_ref().to_string_lossy().into_owned()),
        );
        let mut cmd = Command::new(&bin);
        cmd.args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        process::kill_with_parent(&mut cmd);
        if let Some(cpus) = cpus {
            process::pin_to_cpus(&mut cmd, cpus);
        }
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {} {}: {e}", bin.display(), args.join(" ")));
        let (stdout, r1) =
            OutputBuf::spawn_reader("echo-stdout", child.stdout.take().expect("piped"));
        let (stderr, r2) =
            OutputBuf::spawn_reader("echo-stderr", child.stderr.take().expect("piped"));
        let mut echo = Self {
            child,
            stdout,
            stderr,
            readers: vec![r1, r2],
            socket: socket.to_path_buf(),
            client,
            args,
            log_reported: false,
        };
        if !client {
            let child = &mut echo.child;
            if let Err(e) = process::wait_for_path(socket, SOCKET_TIMEOUT, || {
                matches!(child.try_wait(), Ok(None))
            }) {
                echo.fail(&e.to_string());
            }
        }
        echo
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Asks echo (SIGUSR1) to print its `cycles` line now; it appears in
    /// [`EchoOutput::stdout`] before the one printed on exit.
    pub fn report_cycles(&self) {
        process::signal(&self.child, libc::SIGUSR1);
    }

    /// Whether echo is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// What echo logged so far (stderr).
    pub fn log(&self) -> String {
        self.stderr.text()
    }

    /// Panics with `msg` and echo's output so far.
    ///
    /// # Panics
    ///
    /// Always.
    pub fn fail(&mut self, msg: &str) -> ! {
        self.log_reported = true;
        panic!(
            "echo: {msg}\n  args: {}\n----- echo stdout -----\n{}\n----- echo stderr -----\n{}\n\
             ----- end of echo output -----",
            self.args.join(" "),
            self.stdout.text(),
            self.stderr.text()
        )
    }

    /// Sends SIGTERM, waits for the exit and returns the output with the
    /// parsed counters. Does not judge the exit status: check
    /// [`EchoOutput::status`].
    ///
    /// # Panics
    ///
    /// If echo does not exit within [`STOP_TIMEOUT`] (it is then killed), or
    /// prints malformed `qp=` lines.
    pub fn stop(mut self) -> EchoOutput {
        process::signal(&self.child, libc::SIGTERM);
        let Some(status) = process::wait_timeout(&mut self.child, STOP_TIMEOUT) else {
            let _ = self.child.kill();
            let _ = self.child.wait();
            self.fail(&format!("did not exit within {STOP_TIMEOUT:?} of SIGTERM"))
        };
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        let stdout = self.stdout.text();
        let stderr = self.stderr.text();
        let qps = match parse_counters(&stdout) {
            Ok(qps) => qps,
            Err(e) => self.fail(&format!("exited with {status}: {e}")),
        };
        self.log_reported = true;
        EchoOutput {
            status,
            stdout,
            stderr,
            qps,
        }
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        if !self.client {
            let _ = std::fs::remove_file(&self.socket);
        }
        if std::thread::panicking() && !self.log_reported {
            eprintln!(
                "----- echo (args {}) stdout -----\n{}\n----- echo stderr -----\n{}\n\
                 ----- end of echo output -----",
                self.args.join(" "),
                self.stdout.text(),
                self.stderr.text()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_counters() {
        let out = "some noise\n\
                   qp=1 tx_packets=5 tx_bytes=320 rx_packets=4 rx_bytes=256 tx_dropped=0 rx_dropped=1\n\
                   qp=0 tx_packets=10 tx_bytes=640 rx_packets=10 rx_bytes=640 tx_dropped=0 rx_dropped=0 extra=3\n";
        let qps = parse_counters(out).unwrap();
        assert_eq!(qps.len(), 2);
        assert_eq!(qps[0].qp, 0);
        assert_eq!(qps[1].rx_dropped, 1);
        let t = QpCounters::sum(&qps);
        assert_eq!((t.tx_packets, t.rx_packets, t.rx_bytes), (15, 14, 896));
        assert!(parse_counters("qp=0 tx_packets=1\n").is_err());
        assert!(parse_counters("qp=0 tx_packets=x\n").is_err());
        assert!(parse_counters("").unwrap().is_empty());
    }

    #[test]
    fn parses_cycles_lines_and_their_difference() {
        let out = "qp=0 tx_packets=1\n\
                   cycles busy=100 idle=900 frames=10 busy_per_frame=10.0 busy_fraction=0.100\n\
                   cycles busy=x idle=1 frames=1\n\
                   cycles busy=1100 idle=1900 frames=110 busy_per_frame=10.0 busy_fraction=0.367\n";
        let c = CyclesLine::parse_all(out);
        assert_eq!(c.len(), 2, "{c:?}");
        let w = c[1].since(&c[0]);
        assert_eq!((w.busy, w.idle, w.frames), (1000, 1000, 100));
        assert_eq!(w.busy_per_frame(), Some(10.0));
        assert_eq!(w.busy_fraction(), Some(0.5));
        assert_eq!(CyclesLine::default().busy_per_frame(), None);
    }
}
