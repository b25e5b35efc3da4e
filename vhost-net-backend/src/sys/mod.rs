// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The syscall layer: every call the crate makes into the kernel outside
//! `ring/`, each wrapped once, with its arguments checked and errno turned
//! into [`io::Error`]. Callers add the interface and the step to the error.
//!
//! | file | what it wraps |
//! |---|---|
//! | `socket.rs` | `socket`, `setsockopt`/`getsockopt` of plain-data options, `bind`, `MSG_PEEK` reads, the zero-length `send`/`sendto`/`recvfrom` kicks |
//! | `mmap.rs` | an owned mapping shared with the kernel, with bounds-checked accessors |
//! | `guarded.rs` | a guest memory region mapped between two inaccessible guard areas |
//! | `sigbus.rs` | the SIGBUS handler that replaces pages of guest memory a frontend truncated away with zeros |
//! | `netdev.rs` | interface names (one validation rule), `if_nametoindex`, MTU, `IFF_UP` |
//! | `packet.rs` | AF_PACKET: the socket, `bind` to an interface, `PACKET_STATISTICS`, the TX ring kick |
//! | `xdp.rs` | AF_XDP: the socket, UMEM registration, ring sizes and offsets, `bind`, statistics, wake-ups, the rings' shared memory |
//! | `bpf.rs` | the `bpf()` commands: map create/update, program load, link create, program info |
//! | `tun.rs` | the TUN/TAP ioctls |
//! | `thread.rs` | CPU affinity |
//! | `caps.rs` | the capability sets: `capget`/`capset`, the bounding and ambient sets, no-new-privs |
//! | `netns.rs` | `setns` into a network namespace, on a thread of its own |
//! | `tsc.rs` | the time-stamp counter, for busy/idle cycle accounting |
//! | `unix.rs` | Unix stream sockets at paths of any length (through the directory when longer than `sun_path`); server sockets bound, and client sockets checked and connected, without following a tenant's links |
//! | `driver.rs` | (feature `test-utils`) `memfd_create` and `poll` for the in-process test driver |
//! | `dirfd.rs` | paths walked by directory descriptors (`O_NOFOLLOW` per component, links followed only in trusted directories), `mkdirat`, `fchownat`, `unlinkat`, `renameat2`, `O_NOFOLLOW` files |
//!
//! This module and `ring/` are the only places that opt into `unsafe`.
//! Memory shared with the kernel (mmap'd rings and UMEM) is reached only
//! through `mmap::Mmap` and `xdp::XdpRing`, whose safe methods check
//! bounds and alignment and use atomics for the words both sides write.
#![allow(unsafe_code)]

use std::io;

pub(crate) mod bpf;
pub mod caps;
pub mod dirfd;
pub(crate) mod driver;
pub(crate) mod guarded;
pub(crate) mod mmap;
pub(crate) mod netdev;
pub mod netns;
pub(crate) mod packet;
pub mod sigbus;
pub(crate) mod socket;
mod thread;
mod tsc;
pub(crate) mod tun;
pub mod unix;
pub(crate) mod xdp;

pub(crate) use socket::peek;
pub use thread::pin_current_thread;
pub use tsc::tsc;

/// Converts a `-1`-on-error return value into `io::Result`.
fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Converts a `-1`-on-error byte count into `io::Result`.
fn check_len(ret: libc::ssize_t) -> io::Result<usize> {
    usize::try_from(ret).map_err(|_| io::Error::last_os_error())
}
