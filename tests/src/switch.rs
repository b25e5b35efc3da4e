// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! `vhu-switch` as a process under test: started on private directories
//! (control socket, socket directory, state directory under a [`RunDir`]),
//! driven through its control API with `vhu_api`'s client, stopped with
//! SIGTERM (or killed) at the end.
//!
//! * `VHU_SWITCH_BIN`: the binary (default: `target/release/vhu-switch`,
//!   built by `cargo build --release --workspace`).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use vhost_net_backend::test_utils::{DriverOpts, TestDriver};
use vhu_api::client::{self, ClientError};
use vhu_api::PortStats;

use crate::bins;
use crate::footprint::{open_fds, Footprint};
use crate::process::RunDir;

/// The `vhu-switch` binary.
pub fn switch_bin() -> PathBuf {
    bins::from_env("VHU_SWITCH_BIN").unwrap_or_else(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        bins::built_example(
            "vhu-switch",
            &[root.join("target/release/vhu-switch")],
            "cargo build --release --workspace",
            "VHU_SWITCH_BIN",
        )
    })
}

/// A running switch.
#[derive(Debug)]
pub struct SwitchProc {
    child: Option<Child>,
    /// Its private directory.
    pub dir: PathBuf,
    /// The control socket.
    pub control: PathBuf,
    /// The socket directory.
    pub sockets: PathBuf,
    /// The state directory.
    pub state: PathBuf,
    log: PathBuf,
    extra: Vec<String>,
    netns: Option<String>,
    wrap: Vec<String>,
}

/// The id of group `name` (`getent group`).
///
/// # Panics
///
/// If there is no such group.
pub fn group_id(name: &str) -> u32 {
    let out = std::process::Command::new("getent")
        .args(["group", name])
        .output()
        .expect("run getent");
    String::from_utf8_lossy(&out.stdout)
        .split(':')
        .nth(2)
        .and_then(|g| g.trim().parse().ok())
        .unwrap_or_else(|| panic!("no group {name}"))
}

/// Where [`SwitchProc::start_with`] runs the switch, beyond
/// [`SwitchProc::start`]'s defaults.
#[derive(Debug, Clone, Default)]
pub struct SwitchOpts {
    /// A network namespace to run in (`ip netns exec NAME vhu-switch ...`):
    /// a node of its own, whose uplinks are that namespace's interfaces.
    /// The control and vhost-user sockets are files: frontends in other
    /// namespaces reach them.
    pub netns: Option<String>,
    /// `--socket-dir` (default: `sockets` in the run directory).
    pub socket_dir: Option<PathBuf>,
    /// A command the switch runs under, e.g. `setpriv --reuid=nobody ...`
    /// (it must exec the switch: [`SwitchProc::pid`] is then the switch's).
    /// Not with `netns`.
    pub wrap: Vec<String>,
}

impl SwitchProc {
    /// Starts a switch in `run`'s directory with `config` (TOML; empty for
    /// the defaults) and extra flags, and waits until it is ready.
    pub fn start(run: &RunDir, config: &str, extra: &[&str]) -> Self {
        Self::start_with(run, config, extra, &SwitchOpts::default())
    }

    /// [`SwitchProc::start`] with [`SwitchOpts`]: in a network namespace,
    /// on another socket directory.
    pub fn start_with(run: &RunDir, config: &str, extra: &[&str], opts: &SwitchOpts) -> Self {
        let dir = run.path().to_owned();
        let mut s = Self {
            child: None,
            control: dir.join("ctl.sock"),
            sockets: opts
                .socket_dir
                .clone()
                .unwrap_or_else(|| dir.join("sockets")),
            state: dir.join("state"),
            log: dir.join("switch.log"),
            dir,
            extra: extra.iter().map(|s| (*s).to_owned()).collect(),
            netns: opts.netns.clone(),
            wrap: opts.wrap.clone(),
        };
        std::fs::write(s.dir.join("vhu.toml"), config).expect("write the config");
        s.spawn();
        s
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("open the switch log");
        assert!(
            self.netns.is_none() || self.wrap.is_empty(),
            "netns and wrap together"
        );
        let mut cmd = match (&self.netns, self.wrap.split_first()) {
            (Some(ns), _) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(switch_bin());
                c
            }
            (None, Some((prog, args))) => {
                let mut c = Command::new(prog);
                c.args(args).arg(switch_bin());
                c
            }
            (None, None) => Command::new(switch_bin()),
        };
        let child = cmd
            .arg("--config")
            .arg(self.dir.join("vhu.toml"))
            .arg("--control-socket")
            .arg(&self.control)
            .arg("--socket-dir")
            .arg(&self.sockets)
            .arg("--state-dir")
            .arg(&self.state)
            .args(&self.extra)
            .env("VHU_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup the log"))
            .stderr(log)
            .spawn()
            .expect("start vhu-switch");
        self.child = Some(child);
        self.wait_ready(Duration::from_secs(20));
    }

    /// Changes [`SwitchOpts::wrap`] for the next [`SwitchProc::restart`].
    pub fn set_wrap(&mut self, wrap: Vec<String>) {
        self.wrap = wrap;
    }

    /// Starts the switch again on the same directories (after a stop or a
    /// kill).
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "the switch still runs");
        self.spawn();
    }

    /// Waits until `GET /ready` answers 200.
    pub fn wait_ready(&mut self, timeout: Duration) {
        let t0 = Instant::now();
        loop {
            if let Ok((200, _)) = self.try_call("GET", "/ready", None) {
                return;
            }
            if let Some(st) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "vhu-switch exited with {st} while starting:\n{}",
                    self.log()
                );
            }
            assert!(
                t0.elapsed() < timeout,
                "vhu-switch not ready after {timeout:?}:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Everything the switch logged.
    pub fn log(&self) -> String {
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(&self.log) {
            let _ = f.read_to_string(&mut s);
        }
        s
    }

    /// One request; the status and body, whatever the status.
    pub fn try_call(
        &self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
    ) -> Result<(u16, Vec<u8>), ClientError> {
        let stream = vhost_net_backend::sys::unix::connect(&self.control)?;
        match client::call(stream, method, path, body) {
            Ok(r) => Ok(r),
            Err(ClientError::Refused { status, message }) => {
                let body = serde_json::to_vec(&vhu_api::ApiError::new(message)).unwrap_or_default();
                Ok((status, body))
            }
            Err(e) => Err(e),
        }
    }

    /// One request that must succeed with `status`; its body.
    pub fn call(&self, method: &str, path: &str, body: &str, status: u16) -> Vec<u8> {
        let b = (!body.is_empty()).then_some(body.as_bytes());
        let (s, out) = self
            .try_call(method, path, b)
            .unwrap_or_else(|e| panic!("{method} {path}: {e}\n{}", self.log()));
        assert_eq!(
            s,
            status,
            "{method} {path} {body}: {}\n{}",
            String::from_utf8_lossy(&out),
            self.log()
        );
        out
    }

    /// `GET path` as JSON.
    pub fn get<T: serde::de::DeserializeOwned>(&self, path: &str) -> T {
        let b = self.call("GET", path, "", 200);
        serde_json::from_slice(&b).unwrap_or_else(|e| panic!("GET {path}: {e}"))
    }

    /// The counters of `ports` once none of them moved for `quiet` (what
    /// the frontends queued is drained), in the order given.
    ///
    /// # Panics
    ///
    /// If they still move after `timeout`.
    pub fn quiet_stats(
        &self,
        ports: &[&str],
        quiet: Duration,
        timeout: Duration,
    ) -> Vec<PortStats> {
        let read = || ports.iter().map(|p| self.stats(p)).collect::<Vec<_>>();
        let t0 = Instant::now();
        let mut last = read();
        loop {
            std::thread::sleep(quiet);
            let now = read();
            if now == last {
                return now;
            }
            assert!(
                t0.elapsed() < timeout,
                "the counters of {ports:?} still move after {timeout:?}"
            );
            last = now;
        }
    }

    /// SIGTERM; waits for the exit.
    pub fn stop(&mut self) -> ExitStatus {
        let mut c = self.child.take().expect("running");
        crate::process::signal(&c, libc::SIGTERM);
        let t0 = Instant::now();
        loop {
            if let Some(st) = c.try_wait().expect("wait") {
                return st;
            }
            if t0.elapsed() > Duration::from_secs(15) {
                let _ = c.kill();
                panic!(
                    "vhu-switch did not stop within 15 s of SIGTERM:\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `POST /ports` of an AF_PACKET uplink `name` on `ifname` (201).
    ///
    /// # Panics
    ///
    /// If the switch refuses it.
    pub fn add_af_packet(&self, name: &str, ifname: &str) {
        let body = format!(r#"{{"name":"{name}","kind":"af_packet","interface":"{ifname}"}}"#);
        self.call("POST", "/ports", &body, 201);
    }

    /// `GET /ports/{port}/stats`.
    pub fn stats(&self, port: &str) -> PortStats {
        self.get(&format!("/ports/{port}/stats"))
    }

    /// The stats of `ports` once none of them has moved for 300 ms (the
    /// switch drained what its frontends queued).
    ///
    /// # Panics
    ///
    /// If they still move after 20 s.
    pub fn settle(&self, ports: &[&str]) -> Vec<PortStats> {
        self.quiet_stats(ports, Duration::from_millis(300), Duration::from_secs(20))
    }

    /// Starts `vhuctl capture PORT -c COUNT`, its pcapng read by
    /// `tcpdump -e -n -r -`; [`Capture::text`] waits for tcpdump's lines.
    ///
    /// # Panics
    ///
    /// If `vhuctl` or `tcpdump` cannot be started.
    pub fn capture(&self, port: &str, count: u32) -> Capture {
        let vhuctl = switch_bin().with_file_name("vhuctl");
        let mut ctl = Command::new(&vhuctl)
            .arg("--socket")
            .arg(&self.control)
            .args(["capture", port, "-c", &count.to_string(), "-s", "30"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", vhuctl.display()));
        let pcap = ctl.stdout.take().expect("piped");
        let dump = Command::new("tcpdump")
            .args(["-e", "-n", "-r", "-"])
            .stdin(Stdio::from(pcap))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tcpdump (Debian tcpdump) is installed by scripts/install-peers.sh");
        Capture {
            ctl,
            dump: Some(dump),
        }
    }

    /// SIGKILL, as a crash would.
    pub fn kill9(&mut self) {
        let mut c = self.child.take().expect("running");
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// A running `vhuctl capture | tcpdump -r -` ([`SwitchProc::capture`]).
#[derive(Debug)]
pub struct Capture {
    ctl: Child,
    dump: Option<Child>,
}

impl Capture {
    /// Waits until the capture ends (its count reached) and returns what
    /// tcpdump printed, stdout then stderr.
    pub fn text(mut self) -> String {
        let _ = self.ctl.wait();
        let out = self
            .dump
            .take()
            .expect("not waited yet")
            .wait_with_output()
            .expect("tcpdump output");
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        for c in std::iter::once(&mut self.ctl).chain(self.dump.as_mut()) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for SwitchProc {
    fn drop(&mut self) {
        if std::thread::panicking() && self.child.is_some() {
            // What the switch counted when the test failed (non-zero).
            for path in ["/fdb", "/metrics"] {
                let got = match self.try_call("GET", path, None) {
                    Ok((_, body)) => String::from_utf8_lossy(&body).into_owned(),
                    Err(e) => format!("({e})"),
                };
                let text: String = got
                    .lines()
                    .filter(|l| !l.starts_with('#') && !l.ends_with(" 0"))
                    .map(|l| format!("{l}\n"))
                    .collect();
                eprintln!("----- GET {path} -----\n{text}");
            }
        }
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if std::thread::panicking() {
            eprintln!("----- vhu-switch log -----\n{}----- end -----", self.log());
        }
    }
}

impl SwitchProc {
    /// The switch's process id.
    ///
    /// # Panics
    ///
    /// If it does not run (stopped or killed).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// The switch's [`Footprint`] once its fd count has not changed for
    /// `quiet` (connections being torn down are done).
    ///
    /// # Panics
    ///
    /// If it still changes after 20 s.
    pub fn stable_footprint(&self, quiet: Duration) -> Footprint {
        let t0 = Instant::now();
        let mut fds = open_fds(self.pid());
        let mut since = Instant::now();
        while since.elapsed() < quiet {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "the switch's fd count keeps changing (now {fds})"
            );
            std::thread::sleep(Duration::from_millis(50));
            let now = open_fds(self.pid());
            if now != fds {
                fds = now;
                since = Instant::now();
            }
        }
        Footprint {
            fds,
            ..Footprint::of(self.pid())
        }
    }

    /// The library's in-process driver connected to vhost-user port
    /// `port`'s socket (`<port>.sock` in the socket directory), negotiated
    /// with the default options.
    ///
    /// # Panics
    ///
    /// If it cannot connect or negotiate (with the switch's log).
    pub fn driver(&self, port: &str) -> TestDriver {
        let sock = self.sockets.join(format!("{port}.sock"));
        TestDriver::connect(&sock, DriverOpts::default())
            .unwrap_or_else(|e| panic!("connect to port {port}: {e}\n{}", self.log()))
    }

    /// `POST /fdb` of a static entry (201).
    ///
    /// # Panics
    ///
    /// If the switch refuses it.
    pub fn add_static_mac(&self, mac: &str, port: &str, vlan: u16) {
        let body = format!(r#"{{"mac":"{mac}","port":"{port}","vlan":{vlan}}}"#);
        self.call("POST", "/fdb", &body, 201);
    }

    /// Waits until the log has at least `n` lines containing `needle`;
    /// returns how many it has.
    ///
    /// # Panics
    ///
    /// If it has fewer after `timeout`.
    pub fn wait_log_count(&self, needle: &str, n: usize, timeout: Duration) -> usize {
        let t0 = Instant::now();
        loop {
            let have = self.log().lines().filter(|l| l.contains(needle)).count();
            if have >= n {
                return have;
            }
            assert!(
                t0.elapsed() < timeout,
                "the switch logged {have} of {n} lines with {needle:?} after {timeout:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
