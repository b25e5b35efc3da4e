// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Boots a real Linux guest in QEMU against a vhost-user backend.
//!
//! The guest is the Debian cloud kernel with a busybox initramfs whose `/init`
//! is `scripts/guest-init.sh`; `scripts/install-peers.sh` installs QEMU (>=
//! 10, from bookworm-backports), unpacks the kernel and builds the initramfs
//! into the peers directory (`$VHU_PEERS_DIR`, default
//! [`DEFAULT_PEERS_DIR`]). The guest runs the test named on its kernel command
//! line (`vhu.test=ping vhu.count=1000`, see [`GuestOpts::cmdline_extra`] and
//! the header of `guest-init.sh`), prints `VHU-RESULT key=value ...` lines on
//! its serial console and powers off.
//!
//! With `vhu.test=agent` the guest instead runs the shell commands the host
//! writes to its console (QEMU's stdin), for tests with several phases:
//! [`GuestHandle::wait_agent`], [`GuestHandle::exec`],
//! [`GuestHandle::quit`].
//!
//! QEMU runs under TCG (nested KVM hangs on the project's machines), with
//! memfd-backed shared guest memory so the backend can map it, one
//! `vhost-user` netdev and one `virtio-net-pci` device.
//!
//! # Failing, never skipping
//!
//! Every function here panics with a message that names
//! `scripts/install-peers.sh` when a peer is missing or stale, and with the
//! captured console when the guest times out or reports an error: a test that
//! cannot run its peer fails.
//!
//! # Environment
//!
//! * `VHU_PEERS_DIR`: where the kernel and initramfs are.
//! * `VHU_QEMU`: the QEMU binary (default `/usr/bin/qemu-system-x86_64`, then
//!   `$PATH`).
//! * `VHU_QEMU_VERBOSE=1`: copy the guest console to stderr as it arrives.
//!
//! # Example
//!
//! ```no_run
//! use vhu_tests::qemu::{run_guest, GuestOpts};
//!
//! let run = run_guest(GuestOpts {
//!     cmdline_extra: "vhu.test=ping vhu.count=1000".into(),
//!     ..GuestOpts::new("/tmp/vhu.sock")
//! });
//! assert!(run.get_u64("rx_packets") >= 1000);
//! ```

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use std::{env, fmt, fs, thread};

/// Peers directory used when `VHU_PEERS_DIR` is unset.
pub const DEFAULT_PEERS_DIR: &str = "/var/cache/vhu-peers";

/// Oldest QEMU major version that works: 7.2 (bookworm) segfaults as soon as
/// a TCG guest's virtio-net driver starts a vhost-user device.
pub const QEMU_MIN_MAJOR: u32 = 10;

/// Prefix of the guest's machine-readable console lines.
pub const RESULT_PREFIX: &str = "VHU-RESULT ";

/// What an agent guest (`vhu.test=agent`) prints once it takes commands.
pub const AGENT_READY: &str = "VHU-RESULT agent=ready";

/// What to tell a developer whose peers are missing.
const INSTALL_HINT: &str = "run `sudo scripts/install-peers.sh` (installs QEMU >= 10, \
     the guest kernel and initramfs, and hugepages)";

/// How often [`GuestHandle`] polls QEMU and the filesystem while waiting.
const POLL: Duration = Duration::from_millis(20);

/// How a guest is booted. Build one with [`GuestOpts::new`] and struct update
/// syntax.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestOpts {
    /// The vhost-user Unix socket.
    pub socket: PathBuf,
    /// Queue pairs of the device (`-netdev vhost-user,queues=N`); above 1 the
    /// device gets `mq=on,vectors=2N+2`.
    pub queues: u16,
    /// QEMU listens on [`socket`](Self::socket) (`server=on,wait=off`) and the
    /// backend connects; otherwise QEMU connects to a listening backend. In
    /// both cases QEMU does not start the guest before the backend is
    /// connected.
    pub qemu_is_server: bool,
    /// Client QEMU reconnects this often after the backend goes away
    /// (`reconnect-ms`); only valid when QEMU is the client.
    pub reconnect_ms: Option<u32>,
    /// Use packed virtqueues (`virtio-net-pci,packed=on`).
    pub packed: bool,
    /// Guest CPUs (`-smp`). The guest's `vhu.test=ping` sends from each CPU
    /// in turn, and virtio-net maps CPU i to TX queue i.
    pub smp: u8,
    /// Guest memory in MiB, all of it shared memfd.
    pub mem_mib: u32,
    /// The guest NIC's MAC address.
    pub mac: String,
    /// Appended to the kernel command line: the test and its parameters, e.g.
    /// `vhu.test=ping vhu.count=1000 vhu.size=1000`.
    pub cmdline_extra: String,
    /// Whole run, from spawning QEMU until it exits. On expiry QEMU is
    /// killed and the test panics with the console.
    pub timeout: Duration,
    /// Further QEMU arguments, appended last.
    pub extra_args: Vec<String>,
}

impl GuestOpts {
    /// One queue pair, QEMU as client, split rings, one CPU, 256 MiB, MAC
    /// `52:54:00:12:34:56`, `vhu.test=info`, 120 s.
    pub fn new(socket: impl Into<PathBuf>) -> Self {
        Self {
            socket: socket.into(),
            queues: 1,
            qemu_is_server: false,
            reconnect_ms: None,
            packed: false,
            smp: 1,
            mem_mib: 256,
            mac: "52:54:00:12:34:56".to_owned(),
            cmdline_extra: "vhu.test=info".to_owned(),
            timeout: Duration::from_secs(120),
            extra_args: Vec::new(),
        }
    }
}

impl Default for GuestOpts {
    /// [`GuestOpts::new`] with an empty socket path, which must be set
    /// before use.
    fn default() -> Self {
        Self::new(PathBuf::new())
    }
}

/// The peers QEMU needs, found by [`peers`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peers {
    /// `qemu-system-x86_64`, version >= [`QEMU_MIN_MAJOR`].
    pub qemu: PathBuf,
    /// First line of `qemu --version`.
    pub qemu_version: String,
    /// The guest kernel (`$VHU_PEERS_DIR/vmlinuz`).
    pub kernel: PathBuf,
    /// The guest initramfs (`$VHU_PEERS_DIR/initramfs.gz`).
    pub initramfs: PathBuf,
}

/// The workspace root (the parent of the `tests` crate).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate lives inside the workspace")
        .to_path_buf()
}

/// The peers directory: `$VHU_PEERS_DIR` or [`DEFAULT_PEERS_DIR`].
pub fn peers_dir() -> PathBuf {
    env::var_os("VHU_PEERS_DIR")
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from(DEFAULT_PEERS_DIR), PathBuf::from)
}

/// Finds QEMU, the guest kernel and the initramfs, once per process.
///
/// # Panics
///
/// If any is missing, if QEMU is older than [`QEMU_MIN_MAJOR`], or if the
/// initramfs was built from a `guest-init.sh` other than the workspace's
/// (stale): the message says to run `scripts/install-peers.sh`.
pub fn peers() -> &'static Peers {
    static PEERS: OnceLock<Result<Peers, String>> = OnceLock::new();
    match PEERS.get_or_init(find_peers) {
        Ok(p) => p,
        Err(e) => panic!("QEMU guest peers are not ready: {e}; {INSTALL_HINT}"),
    }
}

fn find_qemu() -> Result<PathBuf, String> {
    if let Some(q) = env::var_os("VHU_QEMU").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(q));
    }
    // Debian's qemu-system-x86, backported or not, installs here.
    let default = PathBuf::from("/usr/bin/qemu-system-x86_64");
    if default.is_file() {
        return Ok(default);
    }
    env::var_os("PATH")
        .iter()
        .flat_map(env::split_paths)
        .map(|d| d.join("qemu-system-x86_64"))
        .find(|p| p.is_file())
        .ok_or_else(|| "qemu-system-x86_64 not found in /usr/bin or $PATH".to_owned())
}

/// Parses the major version out of `QEMU emulator version 10.0.2 (...)`.
fn parse_qemu_major(version_line: &str) -> Option<u32> {
    let rest = version_line.split("version ").nth(1)?;
    rest.split('.').next()?.trim().parse().ok()
}

fn find_peers() -> Result<Peers, String> {
    let qemu = find_qemu()?;
    let out = Command::new(&qemu)
        .arg("--version")
        .output()
        .map_err(|e| format!("cannot run {}: {e}", qemu.display()))?;
    let qemu_version = String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned();
    match parse_qemu_major(&qemu_version) {
        Some(major) if major >= QEMU_MIN_MAJOR => {}
        _ => {
            return Err(format!(
                "{} is {qemu_version:?}, need version >= {QEMU_MIN_MAJOR} (bookworm-backports)",
                qemu.display()
            ))
        }
    }

    let dir = peers_dir();
    let kernel = dir.join("vmlinuz");
    let initramfs = dir.join("initramfs.gz");
    for p in [&kernel, &initramfs] {
        if !p.is_file() {
            return Err(format!("{} is missing", p.display()));
        }
    }

    // mk-initramfs.sh keeps a copy of the /init it packed: a different one
    // in the workspace means the initramfs is stale.
    let packed_init = dir.join("guest-init.sh");
    let our_init = workspace_root().join("scripts/guest-init.sh");
    let packed = fs::read(&packed_init)
        .map_err(|e| format!("cannot read {}: {e}", packed_init.display()))?;
    let ours =
        fs::read(&our_init).map_err(|e| format!("cannot read {}: {e}", our_init.display()))?;
    if packed != ours {
        return Err(format!(
            "{} was built from another {} (stale initramfs)",
            initramfs.display(),
            our_init.display()
        ));
    }

    Ok(Peers {
        qemu,
        qemu_version,
        kernel,
        initramfs,
    })
}

/// Escapes a value for QEMU's `key=value,...` option syntax.
fn qemu_opt_value(s: &str) -> String {
    s.replace(',', ",,")
}

/// The QEMU arguments (without the binary) that boot `opts` with `peers`.
///
/// # Panics
///
/// On options QEMU would reject: an empty socket path, zero queues, CPUs or
/// memory, or `reconnect_ms` with `qemu_is_server`.
pub fn qemu_args(opts: &GuestOpts, peers: &Peers) -> Vec<OsString> {
    assert!(
        !opts.socket.as_os_str().is_empty(),
        "GuestOpts::socket is empty"
    );
    assert!(opts.queues >= 1, "GuestOpts::queues must be >= 1");
    assert!(opts.smp >= 1, "GuestOpts::smp must be >= 1");
    assert!(opts.mem_mib >= 64, "GuestOpts::mem_mib must be >= 64");
    assert!(
        !(opts.qemu_is_server && opts.reconnect_ms.is_some()),
        "reconnect_ms applies only when QEMU is the socket client"
    );

    let socket = qemu_opt_value(
        opts.socket
            .to_str()
            .expect("the vhost-user socket path must be UTF-8"),
    );
    let mut chardev = format!("socket,id=c0,path={socket}");
    if opts.qemu_is_server {
        chardev.push_str(",server=on,wait=off");
    }
    if let Some(ms) = opts.reconnect_ms {
        chardev.push_str(&format!(",reconnect-ms={ms}"));
    }
    let mut device = format!("virtio-net-pci,netdev=n0,mac={}", qemu_opt_value(&opts.mac));
    if opts.queues > 1 {
        // One vector per virtqueue, one for the control queue, one for config.
        device.push_str(&format!(
            ",mq=on,vectors={}",
            2 * u32::from(opts.queues) + 2
        ));
    }
    if opts.packed {
        device.push_str(",packed=on");
    }
    let append = format!("console=ttyS0 quiet panic=-1 {}", opts.cmdline_extra);

    let mut args: Vec<OsString> = Vec::new();
    let mut push = |a: &str| args.push(a.into());
    for a in [
        "-accel",
        "tcg",
        "-nodefaults",
        "-no-user-config",
        "-display",
        "none",
        "-serial",
        "stdio",
        "-no-reboot",
    ] {
        push(a);
    }
    push("-m");
    push(&opts.mem_mib.to_string());
    push("-smp");
    push(&opts.smp.to_string());
    push("-object");
    push(&format!(
        "memory-backend-memfd,id=mem,size={}M,share=on",
        opts.mem_mib
    ));
    push("-numa");
    push("node,memdev=mem");
    push("-chardev");
    push(&chardev);
    push("-netdev");
    push(&format!(
        "vhost-user,id=n0,chardev=c0,queues={}",
        opts.queues
    ));
    push("-device");
    push(&device);
    push("-append");
    push(&append);
    for a in &opts.extra_args {
        push(a);
    }
    args.push("-kernel".into());
    args.push(peers.kernel.clone().into_os_string());
    args.push("-initrd".into());
    args.push(peers.initramfs.clone().into_os_string());
    args
}

/// Quotes `arg` for a copy-pasteable shell command line, when it needs it.
fn shell_quote(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_=,./:+@%".contains(&b));
    if plain {
        arg.to_owned()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

/// Appends everything `reader` yields to `buf`, echoing it to stderr when
/// `echo` is set.
fn drain<R: Read + Send + 'static>(
    mut reader: R,
    buf: Arc<Mutex<Vec<u8>>>,
    echo: bool,
) -> JoinHandle<()> {
    thread::spawn(move || {
        let mut chunk = [0u8; 4096];
        loop {
            match reader.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => {
                    if echo {
                        let _ = std::io::stderr().write_all(&chunk[..n]);
                    }
                    buf.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .extend_from_slice(&chunk[..n]);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
    })
}

/// Serial console bytes as text, without the serial line's `\r`.
fn console_text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).replace('\r', "")
}

/// A QEMU guest running in the background. Dropping it kills QEMU.
pub struct GuestHandle {
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    next_command: u64,
    opts: GuestOpts,
    command_line: String,
    started: Instant,
    console: Arc<Mutex<Vec<u8>>>,
    stderr: Arc<Mutex<Vec<u8>>>,
    readers: Vec<JoinHandle<()>>,
}

impl fmt::Debug for GuestHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GuestHandle")
            .field("pid", &self.child.as_ref().map(Child::id))
            .field("command_line", &self.command_line)
            .finish_non_exhaustive()
    }
}

/// Starts QEMU with `opts` and returns at once; the console is captured in
/// the background.
///
/// With `qemu_is_server`, QEMU creates the socket and waits for the backend
/// before it boots the guest ([`GuestHandle::wait_for_socket`] tells when to
/// start it); otherwise the backend must already listen.
///
/// # Panics
///
/// If a peer is missing (see [`peers`]) or QEMU cannot be spawned.
pub fn spawn_guest(opts: GuestOpts) -> GuestHandle {
    let peers = peers();
    let args = qemu_args(&opts, peers);
    let command_line = std::iter::once(peers.qemu.as_os_str())
        .chain(args.iter().map(OsString::as_os_str))
        .map(|a| shell_quote(&a.to_string_lossy()))
        .collect::<Vec<_>>()
        .join(" ");
    // The console's input: only an agent guest (`vhu.test=agent`) reads it.
    let mut child = Command::new(&peers.qemu)
        .args(&args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot spawn {command_line}: {e}"));
    let echo = env::var_os("VHU_QEMU_VERBOSE").is_some_and(|v| !v.is_empty() && v != "0");
    let console = Arc::new(Mutex::new(Vec::new()));
    let stderr = Arc::new(Mutex::new(Vec::new()));
    let readers = vec![
        drain(
            child.stdout.take().expect("stdout is piped"),
            Arc::clone(&console),
            echo,
        ),
        drain(
            child.stderr.take().expect("stderr is piped"),
            Arc::clone(&stderr),
            echo,
        ),
    ];
    GuestHandle {
        stdin: child.stdin.take(),
        next_command: 1,
        child: Some(child),
        opts,
        command_line,
        started: Instant::now(),
        console,
        stderr,
        readers,
    }
}

/// Boots a guest, waits for it to power off and checks that it reported
/// `done` and no `error` ([`GuestRun::assert_ok`]).
///
/// # Panics
///
/// If a peer is missing, on timeout, or if the guest did not finish its test;
/// each message carries the console.
pub fn run_guest(opts: GuestOpts) -> GuestRun {
    let run = spawn_guest(opts).wait();
    run.assert_ok();
    run
}

impl GuestHandle {
    /// QEMU's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// The QEMU command line, for messages.
    pub fn command_line(&self) -> &str {
        &self.command_line
    }

    /// The console captured so far.
    pub fn console(&self) -> String {
        console_text(&self.console.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// QEMU's stderr captured so far.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }

    /// Returns QEMU's exit status if it has exited.
    pub fn try_exit_status(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().expect("waitpid on QEMU"))
    }

    fn describe(&self) -> String {
        format!(
            "command: {}\n--- QEMU stderr ---\n{}\n--- guest console ---\n{}",
            self.command_line,
            self.stderr(),
            self.console()
        )
    }

    /// Polls `ready` until it returns true; panics (killing QEMU) when
    /// `timeout` passes or QEMU exits first. `what` names the condition.
    fn wait_until(&mut self, what: &str, timeout: Duration, mut ready: impl FnMut(&Self) -> bool) {
        let deadline = Instant::now() + timeout;
        loop {
            if ready(self) {
                return;
            }
            if let Some(status) = self.try_exit_status() {
                self.join_readers();
                panic!("QEMU exited ({status}) before {what}\n{}", self.describe());
            }
            if Instant::now() >= deadline {
                self.kill();
                panic!(
                    "timed out after {timeout:?} waiting for {what}\n{}",
                    self.describe()
                );
            }
            thread::sleep(POLL);
        }
    }

    /// Waits until QEMU, as socket server, has created its socket: then the
    /// backend can connect.
    ///
    /// # Panics
    ///
    /// If QEMU exits or `timeout` passes first.
    pub fn wait_for_socket(&mut self, timeout: Duration) {
        let socket = self.opts.socket.clone();
        self.wait_until(&format!("socket {}", socket.display()), timeout, |_| {
            fs::metadata(&socket).is_ok_and(|m| m.file_type().is_socket())
        });
    }

    /// Waits until the console contains `needle`.
    ///
    /// # Panics
    ///
    /// If QEMU exits or `timeout` passes first.
    pub fn wait_for_console(&mut self, needle: &str, timeout: Duration) {
        self.wait_until(&format!("console output {needle:?}"), timeout, |h| {
            h.console().contains(needle)
        });
    }

    /// Waits until an agent guest (`vhu.test=agent`) takes commands.
    ///
    /// # Panics
    ///
    /// If QEMU exits or `timeout` passes first.
    pub fn wait_agent(&mut self, timeout: Duration) {
        self.wait_for_console(AGENT_READY, timeout);
    }

    /// Writes one line to the guest's console.
    fn send_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("QEMU's stdin is piped");
        if let Err(e) = stdin
            .write_all(format!("{line}\n").as_bytes())
            .and_then(|()| stdin.flush())
        {
            panic!(
                "cannot write to the guest console: {e}\n{}",
                self.describe()
            );
        }
    }

    /// Runs `command` (one line of shell) in an agent guest and waits for it:
    /// its exit status and what it printed (stdout and stderr, `\r`
    /// removed). It runs in the agent's shell, stdin from `/dev/null`: its
    /// variables and background jobs stay for the next commands.
    ///
    /// # Panics
    ///
    /// If `command` has a newline, or QEMU exits or `timeout` passes before
    /// it ends.
    pub fn try_exec(&mut self, command: &str, timeout: Duration) -> (i32, String) {
        assert!(
            !command.contains('\n'),
            "an agent command is one line: {command:?}"
        );
        let id = self.next_command;
        self.next_command += 1;
        self.send_line(&format!("VHU-CMD {id} {command}"));
        let begin = format!("VHU-BEGIN {id}\n");
        let end = format!("VHU-END {id} rc=");
        let mut found = None;
        self.wait_until(&format!("the end of {command:?}"), timeout, |h| {
            let c = h.console();
            let Some(b) = c.find(&begin) else {
                return false;
            };
            let from = b + begin.len();
            let Some(e) = c[from..].find(&end) else {
                return false;
            };
            let rc_at = from + e + end.len();
            let Some(nl) = c[rc_at..].find('\n') else {
                return false;
            };
            found = Some((
                c[rc_at..rc_at + nl].trim().parse().unwrap_or(-1),
                c[from..from + e].to_owned(),
            ));
            true
        });
        found.expect("wait_until returned once the end was found")
    }

    /// [`GuestHandle::try_exec`] of a command that must succeed; its output.
    ///
    /// # Panics
    ///
    /// As `try_exec`, and if the command exits non-zero.
    pub fn exec(&mut self, command: &str, timeout: Duration) -> String {
        let (rc, out) = self.try_exec(command, timeout);
        if rc != 0 {
            panic!(
                "guest command {command:?} exited {rc}:\n{out}\n{}",
                self.describe()
            );
        }
        out
    }

    /// Ends an agent guest: it prints its counters and `done` and powers
    /// off; returns its run ([`GuestHandle::wait`]).
    pub fn quit(mut self) -> GuestRun {
        let id = self.next_command;
        self.send_line(&format!("VHU-CMD {id} quit"));
        self.wait()
    }

    /// Kills QEMU (SIGKILL) if it still runs and reaps it.
    pub fn kill(&mut self) {
        if let Some(child) = self.child.as_mut() {
            if child.try_wait().ok().flatten().is_none() {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
    }

    fn join_readers(&mut self) {
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
    }

    /// Waits for the guest to power off, at most until
    /// [`GuestOpts::timeout`] after spawning, and parses its results.
    ///
    /// Does not judge them: see [`GuestRun::assert_ok`].
    ///
    /// # Panics
    ///
    /// On timeout (after killing QEMU), with the console.
    pub fn wait(mut self) -> GuestRun {
        let timeout = self.opts.timeout;
        let deadline = self.started + timeout;
        let status = loop {
            if let Some(status) = self.try_exit_status() {
                break status;
            }
            if Instant::now() >= deadline {
                self.kill();
                self.join_readers();
                panic!(
                    "QEMU guest timed out after {timeout:?}\n{}",
                    self.describe()
                );
            }
            thread::sleep(POLL);
        };
        self.join_readers();
        let console = self.console();
        GuestRun {
            results: parse_results(&console),
            console,
            stderr: self.stderr(),
            status,
            elapsed: self.started.elapsed(),
            command_line: self.command_line.clone(),
        }
    }
}

impl Drop for GuestHandle {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Collects `key=value` pairs from the console's `VHU-RESULT` lines; a bare
/// `key` (e.g. `done`) maps to an empty value, and a later key wins.
pub fn parse_results(console: &str) -> BTreeMap<String, String> {
    let mut results = BTreeMap::new();
    for line in console.lines() {
        let Some(pos) = line.find(RESULT_PREFIX) else {
            continue;
        };
        for token in line[pos + RESULT_PREFIX.len()..].split_whitespace() {
            let (k, v) = token.split_once('=').unwrap_or((token, ""));
            results.insert(k.to_owned(), v.to_owned());
        }
    }
    results
}

/// A finished guest run.
#[derive(Debug, Clone)]
pub struct GuestRun {
    /// The serial console, `\r` removed.
    pub console: String,
    /// QEMU's stderr.
    pub stderr: String,
    /// Parsed `VHU-RESULT` pairs (see [`parse_results`]).
    pub results: BTreeMap<String, String>,
    /// QEMU's exit status.
    pub status: ExitStatus,
    /// From spawning QEMU until it exited.
    pub elapsed: Duration,
    /// The QEMU command line.
    pub command_line: String,
}

impl GuestRun {
    /// The console and QEMU's stderr, for panic messages.
    pub fn describe(&self) -> String {
        format!(
            "command: {}\nexit: {}\n--- QEMU stderr ---\n{}\n--- guest console ---\n{}",
            self.command_line, self.status, self.stderr, self.console
        )
    }

    /// A result's value, if the guest printed it.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.results.get(key).map(String::as_str)
    }

    /// A numeric result.
    ///
    /// # Panics
    ///
    /// If the guest did not print `key` or it is not a number.
    pub fn get_u64(&self, key: &str) -> u64 {
        let v = self
            .get(key)
            .unwrap_or_else(|| panic!("guest printed no {key}\n{}", self.describe()));
        v.parse()
            .unwrap_or_else(|_| panic!("guest's {key}={v} is not a number\n{}", self.describe()))
    }

    /// Panics unless the guest printed `done`, no `error`, and QEMU exited 0.
    pub fn assert_ok(&self) {
        if let Some(e) = self.get("error") {
            panic!("guest reported error={e}\n{}", self.describe());
        }
        assert!(
            self.results.contains_key("done"),
            "guest did not finish its test (no `VHU-RESULT done`)\n{}",
            self.describe()
        );
        assert!(
            self.status.success(),
            "QEMU exited with {}\n{}",
            self.status,
            self.describe()
        );
    }

    /// The feature bits the guest driver negotiated (the first 64 of
    /// `/sys/class/net/eth0/device/features`, where character i is bit i).
    ///
    /// # Panics
    ///
    /// If the guest printed no `features`.
    pub fn features(&self) -> u64 {
        let bits = self
            .get("features")
            .unwrap_or_else(|| panic!("guest printed no features\n{}", self.describe()));
        parse_feature_bits(bits)
    }
}

/// Turns the sysfs feature string (`'0'`/`'1'`, bit 0 first) into a mask.
pub fn parse_feature_bits(bits: &str) -> u64 {
    bits.bytes()
        .take(64)
        .enumerate()
        .filter(|&(_, b)| b == b'1')
        .fold(0, |acc, (i, _)| acc | 1 << i)
}

/// Names of the feature bits set in `features` ([`crate::features`]),
/// unknown bits as `bit<N>`.
pub fn feature_names(features: u64) -> Vec<String> {
    (0..64)
        .filter(|bit| features & (1 << bit) != 0)
        .map(|bit| crate::features::name(bit).map_or_else(|| format!("bit{bit}"), str::to_owned))
        .collect()
}

// ===== live migration: QMP, -incoming =====

/// The QEMU arguments that make a guest the target of a live migration:
/// a QMP socket at `qmp` and `-incoming unix:<incoming>` (QEMU waits for the
/// source's stream there). Append them to [`GuestOpts::extra_args`] of a
/// guest whose other options equal the source's (the vhost-user socket may
/// differ).
pub fn incoming_args(qmp: &Path, incoming: &Path) -> Vec<String> {
    let mut a = qmp_args(qmp);
    a.push("-incoming".into());
    a.push(format!("unix:{}", incoming.display()));
    a
}

/// `-qmp unix:<path>,server=on,wait=off`: a QMP monitor for [`Qmp::connect`].
pub fn qmp_args(qmp: &Path) -> Vec<String> {
    vec![
        "-qmp".into(),
        format!("unix:{},server=on,wait=off", qmp.display()),
    ]
}

/// A QMP monitor connection (QEMU's JSON control protocol), capabilities
/// negotiated.
#[derive(Debug)]
pub struct Qmp {
    reader: std::io::BufReader<std::os::unix::net::UnixStream>,
    writer: std::os::unix::net::UnixStream,
    path: PathBuf,
}

impl Qmp {
    /// Connects to the QMP socket at `path`, retrying until QEMU created it
    /// (at most `timeout`), and leaves the negotiation mode.
    ///
    /// # Panics
    ///
    /// If no monitor answers within `timeout`.
    pub fn connect(path: &Path, timeout: Duration) -> Self {
        let deadline = Instant::now() + timeout;
        let stream = loop {
            match std::os::unix::net::UnixStream::connect(path) {
                Ok(s) => break s,
                Err(e) if Instant::now() >= deadline => {
                    panic!("no QMP monitor at {}: {e}", path.display())
                }
                Err(_) => thread::sleep(POLL),
            }
        };
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .expect("QMP read timeout");
        let mut q = Self {
            reader: std::io::BufReader::new(stream.try_clone().expect("dup the QMP socket")),
            writer: stream,
            path: path.to_owned(),
        };
        let greeting = q.read_message();
        assert!(
            greeting.get("QMP").is_some(),
            "not a QMP greeting: {greeting}"
        );
        q.execute("qmp_capabilities", serde_json::json!({}));
        q
    }

    /// Reads one message that is not an event.
    fn read_message(&mut self) -> serde_json::Value {
        use std::io::BufRead;
        loop {
            let mut line = String::new();
            match self.reader.read_line(&mut line) {
                Ok(0) => panic!("QMP {}: QEMU closed the monitor", self.path.display()),
                Ok(_) => {}
                Err(e) => panic!("QMP {}: {e}", self.path.display()),
            }
            let v: serde_json::Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("QMP {}: bad JSON {line:?}: {e}", self.path.display()));
            if v.get("event").is_none() {
                return v;
            }
        }
    }

    /// Runs `command` with `arguments` and returns its `return` value.
    ///
    /// # Panics
    ///
    /// If QEMU answers with an error.
    pub fn execute(&mut self, command: &str, arguments: serde_json::Value) -> serde_json::Value {
        let msg = serde_json::json!({ "execute": command, "arguments": arguments });
        writeln!(self.writer, "{msg}")
            .unwrap_or_else(|e| panic!("QMP {}: {e}", self.path.display()));
        let reply = self.read_message();
        match reply.get("return") {
            Some(r) => r.clone(),
            None => panic!("QMP {command} failed: {reply}"),
        }
    }

    /// `query-status`'s `status` (`running`, `inmigrate`, `postmigrate`, ...).
    pub fn status(&mut self) -> String {
        self.execute("query-status", serde_json::json!({}))["status"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Starts migrating to the target listening at `unix:<incoming>`, at
    /// most `bandwidth` bytes/s, with `downtime_ms` as the allowed downtime.
    pub fn migrate(&mut self, incoming: &Path, downtime_ms: u64, bandwidth: u64) {
        self.execute(
            "migrate-set-parameters",
            serde_json::json!({ "max-bandwidth": bandwidth, "downtime-limit": downtime_ms }),
        );
        self.execute(
            "migrate",
            serde_json::json!({ "uri": format!("unix:{}", incoming.display()) }),
        );
    }

    /// Waits until the migration this source started completed and returns
    /// `query-migrate`'s answer (`total-time`, `downtime`, `ram`, ... in it).
    ///
    /// # Panics
    ///
    /// If it fails, is cancelled, or takes longer than `timeout`.
    pub fn wait_migrated(&mut self, timeout: Duration) -> serde_json::Value {
        let deadline = Instant::now() + timeout;
        loop {
            let info = self.execute("query-migrate", serde_json::json!({}));
            match info["status"].as_str().unwrap_or_default() {
                "completed" => return info,
                "failed" | "cancelled" => panic!("migration failed: {info}"),
                _ if Instant::now() >= deadline => {
                    panic!("migration not completed after {timeout:?}: {info}")
                }
                _ => thread::sleep(Duration::from_millis(50)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_are_parsed_from_noisy_console() {
        let console = "[    1.0] virtio_net virtio0: something\r\n\
            VHU-RESULT features=1100 queues=2\r\n\
            noise VHU-RESULT rx_packets=1005 tx_packets=1003\n\
            VHU-RESULT done\n";
        let r = parse_results(&console_text(console.as_bytes()));
        assert_eq!(r["features"], "1100");
        assert_eq!(r["queues"], "2");
        assert_eq!(r["rx_packets"], "1005");
        assert_eq!(r["tx_packets"], "1003");
        assert_eq!(r["done"], "");
        assert_eq!(r.len(), 5);
    }

    #[test]
    fn feature_bits_and_names() {
        let f = parse_feature_bits("1000010000000000000000100000000010");
        assert_eq!(f, 1 | 1 << 5 | 1 << 22 | 1 << 32);
        assert_eq!(feature_names(f), ["CSUM", "MAC", "MQ", "VERSION_1"]);
        assert_eq!(feature_names(1 << 4), ["bit4"]);
    }

    #[test]
    fn shell_quoting() {
        assert_eq!(shell_quote("-device"), "-device");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }

    #[test]
    fn qemu_major_version() {
        assert_eq!(
            parse_qemu_major("QEMU emulator version 10.0.2 (Debian 1:10.0.2+ds-2)"),
            Some(10)
        );
        assert_eq!(
            parse_qemu_major("QEMU emulator version 7.2.15 (Debian)"),
            Some(7)
        );
        assert_eq!(parse_qemu_major("garbage"), None);
    }

    fn fake_peers() -> Peers {
        Peers {
            qemu: "/usr/bin/qemu-system-x86_64".into(),
            qemu_version: "QEMU emulator version 10.0.2".into(),
            kernel: "/p/vmlinuz".into(),
            initramfs: "/p/initramfs.gz".into(),
        }
    }

    fn arg_after<'a>(args: &'a [OsString], flag: &str) -> Vec<&'a str> {
        args.windows(2)
            .filter(|w| w[0] == flag)
            .map(|w| w[1].to_str().unwrap())
            .collect()
    }

    /// Asserts that each flag of `expected` stands once in `args`, before its value.
    fn assert_args(args: &[OsString], expected: &[(&str, &str)]) {
        for &(flag, value) in expected {
            assert_eq!(arg_after(args, flag), [value], "{flag}");
        }
    }

    #[test]
    fn multiqueue_server_args() {
        let opts = GuestOpts {
            queues: 2,
            qemu_is_server: true,
            packed: true,
            smp: 2,
            cmdline_extra: "vhu.test=ping".into(),
            ..GuestOpts::new("/tmp/a,b.sock")
        };
        let args = qemu_args(&opts, &fake_peers());
        assert_args(
            &args,
            &[
                (
                    "-chardev",
                    "socket,id=c0,path=/tmp/a,,b.sock,server=on,wait=off",
                ),
                ("-netdev", "vhost-user,id=n0,chardev=c0,queues=2"),
                (
                    "-device",
                    "virtio-net-pci,netdev=n0,mac=52:54:00:12:34:56,mq=on,vectors=6,packed=on",
                ),
                ("-smp", "2"),
                ("-object", "memory-backend-memfd,id=mem,size=256M,share=on"),
                ("-append", "console=ttyS0 quiet panic=-1 vhu.test=ping"),
            ],
        );
    }

    #[test]
    fn single_queue_client_reconnect_args() {
        let opts = GuestOpts {
            reconnect_ms: Some(1000),
            ..GuestOpts::new("/tmp/s")
        };
        let args = qemu_args(&opts, &fake_peers());
        assert_args(
            &args,
            &[
                ("-chardev", "socket,id=c0,path=/tmp/s,reconnect-ms=1000"),
                ("-device", "virtio-net-pci,netdev=n0,mac=52:54:00:12:34:56"),
            ],
        );
    }

    #[test]
    #[should_panic(expected = "reconnect_ms applies only")]
    fn server_with_reconnect_is_rejected() {
        let opts = GuestOpts {
            qemu_is_server: true,
            reconnect_ms: Some(10),
            ..GuestOpts::new("/tmp/s")
        };
        let _ = qemu_args(&opts, &fake_peers());
    }
}
