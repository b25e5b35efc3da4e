// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Network namespaces: running a closure in another one.

use std::fs::OpenOptions;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use super::check;

/// Runs `f` on a new thread that has entered the network namespace at
/// `netns` (a file such as `/var/run/netns/NAME` or `/proc/PID/ns/net`),
/// and returns its result. The caller's own namespace is not touched.
/// What `f` creates there stays there: sockets and `/dev/net/tun` queues
/// opened in `f` belong to that namespace, and the interfaces they create
/// are created in it.
///
/// Only a regular file is opened (a namespace file is one; a FIFO or a
/// device named by hostile input is refused before `open`, which could
/// block or act on it).
///
/// # Errors
/// `netns` cannot be opened, is not a regular file (`InvalidInput`), or is
/// not a network namespace (`setns` refused it: `EINVAL`).
pub fn run_in<T: Send>(netns: &Path, f: impl FnOnce() -> T + Send) -> io::Result<T> {
    if !std::fs::metadata(netns)?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a network namespace file",
        ));
    }
    let ns = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(netns)?;
    std::thread::scope(|s| {
        s.spawn(move || {
            // SAFETY: `ns` is an open file for the call; setns changes only
            // this thread's network namespace, and the thread ends with `f`.
            check(unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) })?;
            drop(ns);
            Ok(f())
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_that_is_not_a_namespace_is_refused() {
        let e = run_in(Path::new("/proc/self/status"), || ()).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}");
        let e = run_in(Path::new("/dev/null"), || ()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        let e = run_in(Path::new("/nonexistent/vhu-netns"), || ()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
    }
}
