// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The two syscalls the in-process test driver (`test_utils`) makes directly, behind safe
//! functions: `memfd_create(2)` for guest memory and `poll(2)` for the socket. Neither has a
//! safe wrapper in our dependencies; everything else the driver does goes through vm-memory,
//! vmm-sys-util and std. Test-only (feature `test-utils`).
#![cfg(feature = "test-utils")]

use std::ffi::CStr;
use std::fs::File;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

/// Creates an anonymous memfd of `len` bytes.
pub(crate) fn memfd(name: &CStr, len: u64) -> io::Result<File> {
    // SAFETY: `name` is a valid NUL-terminated string and MFD_CLOEXEC a valid flag; the call
    // touches no memory of ours beyond reading `name`.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: memfd_create just returned `fd`, so it is open and nothing else owns it.
    let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    file.set_len(len)?;
    Ok(file)
}

/// Polls one fd for `events`; returns the `revents` (0 on timeout). Retries on EINTR.
pub(crate) fn poll_fd(fd: RawFd, events: i16, timeout: Duration) -> io::Result<i16> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let ms = i32::try_from(left.as_micros().div_ceil(1000)).unwrap_or(i32::MAX);
        let mut pfd = libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        // SAFETY: `pfd` is a valid pollfd that lives across the call, and nfds is 1.
        let r = unsafe { libc::poll(&raw mut pfd, 1, ms) };
        if r >= 0 {
            return Ok(if r == 0 { 0 } else { pfd.revents });
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}
