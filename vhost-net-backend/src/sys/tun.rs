// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The TUN/TAP ioctls on a queue fd of `/dev/net/tun`.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use super::check;
use super::netdev::{ioctl_ifreq, IfName};

/// `TUNSETIFF`: creates or attaches the device `name` (empty: the kernel
/// picks a name) with `flags` (`IFF_TAP`, ...); returns the device's name
/// as the kernel wrote it back.
pub(crate) fn set_iff(fd: BorrowedFd<'_>, name: &IfName, flags: libc::c_int) -> io::Result<String> {
    let mut req = name.ifreq();
    req.ifr_ifru.ifru_flags = flags as libc::c_short;
    ioctl_ifreq(&fd, libc::TUNSETIFF, &mut req)?;
    Ok(IfName::from_ifreq(&req))
}

/// `ioctl(fd, req, &val)` for the TUN requests that take a pointer to an
/// int.
fn ioctl_int_ptr(fd: BorrowedFd<'_>, req: libc::Ioctl, val: libc::c_int) -> io::Result<()> {
    // SAFETY: `val` lives on the stack for the call; the kernel reads one int.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), req, &raw const val) }).map(drop)
}

/// `TUNSETVNETHDRSZ`: the size of the virtio-net header on each frame.
pub(crate) fn set_vnet_hdr_sz(fd: BorrowedFd<'_>, len: libc::c_int) -> io::Result<()> {
    ioctl_int_ptr(fd, libc::TUNSETVNETHDRSZ, len)
}

/// `TUNSETVNETLE`: little-endian virtio-net headers (`1`) or native (`0`).
pub(crate) fn set_vnet_le(fd: BorrowedFd<'_>, le: libc::c_int) -> io::Result<()> {
    ioctl_int_ptr(fd, libc::TUNSETVNETLE, le)
}

/// `TUNSETOFFLOAD`: the `TUN_F_*` offloads the kernel may hand over.
pub(crate) fn set_offload(fd: BorrowedFd<'_>, flags: libc::c_uint) -> io::Result<()> {
    // SAFETY: TUNSETOFFLOAD takes its argument by value; no memory is
    // accessed.
    check(unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            libc::TUNSETOFFLOAD,
            libc::c_ulong::from(flags),
        )
    })
    .map(drop)
}

/// `TUNSETPERSIST`: whether the device outlives its last queue (`1`) or goes
/// with it (`0`, the default).
pub(crate) fn set_persist(fd: BorrowedFd<'_>, on: bool) -> io::Result<()> {
    // SAFETY: TUNSETPERSIST takes its argument by value; no memory is
    // accessed.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETPERSIST, libc::c_ulong::from(on)) })
        .map(drop)
}
