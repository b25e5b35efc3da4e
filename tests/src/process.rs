// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Child processes and the machine they run on: scratch directories, pipes
//! and the threads that drain them, signals, bounded waits, what a child is
//! set up with between `fork` and `exec` (die with the parent, ignore
//! SIGPIPE, CPU affinity), entering a network namespace, and the CPU time
//! of processes and of the whole machine.
//!
//! This is the one module of the crate that holds `unsafe`: every `libc`
//! call the peers' harnesses need is wrapped here, each with its `// SAFETY:`
//! comment.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Interval of the polling loops (socket files, exits, link state, counters).
pub const POLL_INTERVAL: Duration = Duration::from_millis(20);

static RUNDIR_SEQ: AtomicU32 = AtomicU32::new(0);

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

// ===== Pipes, signals, waits =====

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

    /// The bytes collected at offsets `from..to`, as text.
    ///
    /// # Panics
    ///
    /// If that range has not been collected yet.
    pub(crate) fn text_between(&self, from: usize, to: usize) -> String {
        String::from_utf8_lossy(&self.lock().bytes[from..to]).into_owned()
    }

    /// Waits until `pred(bytes)` returns `Some`, EOF, or `timeout`.
    /// Returns `Ok(value)`, or `Err(eof)` on EOF or timeout.
    pub(crate) fn wait_for<T>(
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
pub(crate) fn pipe() -> (File, OwnedFd) {
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
pub fn kill_with_parent(cmd: &mut Command) {
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
pub fn signal(child: &Child, sig: libc::c_int) {
    let pid = libc::pid_t::try_from(child.id()).expect("pid fits pid_t");
    // SAFETY: kill has no memory-safety preconditions; the pid is our
    // un-reaped child, so it cannot have been recycled.
    unsafe { libc::kill(pid, sig) };
}

/// Waits up to `timeout` for `child` to exit.
pub fn wait_timeout(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
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
pub fn terminate(child: &mut Child, grace: Duration) -> Option<ExitStatus> {
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

/// Why [`wait_for_path`] gave up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitError {
    /// The process that should have created the path exited first.
    Exited(PathBuf),
    /// The path did not appear within the timeout.
    TimedOut(PathBuf, Duration),
}

impl std::fmt::Display for WaitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Exited(path) => {
                write!(f, "process exited before creating {}", path.display())
            }
            Self::TimedOut(path, timeout) => {
                write!(f, "{} did not appear within {timeout:?}", path.display())
            }
        }
    }
}

impl std::error::Error for WaitError {}

/// Waits until `path` exists, polling; fails early when `alive` says the
/// process that should create it has gone.
///
/// # Errors
///
/// Why the wait failed.
pub fn wait_for_path(
    path: &Path,
    timeout: Duration,
    mut alive: impl FnMut() -> bool,
) -> Result<(), WaitError> {
    let deadline = Instant::now() + timeout;
    loop {
        if path.exists() {
            return Ok(());
        }
        if !alive() {
            return Err(WaitError::Exited(path.to_path_buf()));
        }
        if Instant::now() >= deadline {
            return Err(WaitError::TimedOut(path.to_path_buf(), timeout));
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// Makes the child ignore SIGPIPE, so that writing to a socket whose peer
/// has gone returns `EPIPE` instead of killing it.
pub(crate) fn ignore_sigpipe(cmd: &mut Command) {
    // SAFETY: the closure runs between fork and exec and only calls
    // signal(2), which is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            if libc::signal(libc::SIGPIPE, libc::SIG_IGN) == libc::SIG_ERR {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Makes the child run only on `cpus` (`sched_setaffinity` before exec).
pub(crate) fn pin_to_cpus(cmd: &mut Command, cpus: &[usize]) {
    let cpus = cpus.to_vec();
    // SAFETY: the closure runs between fork and exec and only calls
    // async-signal-safe functions on a stack-local cpu_set_t.
    unsafe {
        cmd.pre_exec(move || {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            for &c in &cpus {
                libc::CPU_SET(c, &mut set);
            }
            if libc::sched_setaffinity(0, std::mem::size_of_val(&set), &raw const set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Moves the calling thread into the network namespace `ns` (an open
/// `/run/netns/<name>` file). Only this thread changes namespace: call it on
/// a thread of its own that ends when its work in the namespace is done.
///
/// # Errors
///
/// That of `setns(2)`.
pub(crate) fn enter_netns(ns: &File) -> std::io::Result<()> {
    // SAFETY: `ns` is an open file for the duration of the call; setns
    // changes only the calling thread's network namespace and touches no
    // memory of ours.
    let r = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

// ===== CPU time =====

/// CPU time of the whole machine from the `cpu` line of `/proc/stat`:
/// (busy, steal, total) in clock ticks.
pub(crate) fn cpu_ticks() -> (u64, u64, u64) {
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
pub(crate) fn process_ticks(pid: u32) -> u64 {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_for_path_says_why_it_gave_up() {
        let dir = RunDir::new("process-test");
        let path = dir.join("never");
        assert_eq!(
            wait_for_path(&path, Duration::ZERO, || false),
            Err(WaitError::Exited(path.clone()))
        );
        assert_eq!(
            wait_for_path(&path, Duration::ZERO, || true),
            Err(WaitError::TimedOut(path.clone(), Duration::ZERO))
        );
        std::fs::write(&path, b"").unwrap();
        assert_eq!(wait_for_path(&path, Duration::ZERO, || false), Ok(()));
    }
}
