// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! AF_PACKET: the socket, its `SOL_PACKET` options, `bind` to an interface,
//! `PACKET_STATISTICS` and the TX ring kick. The rings themselves are one
//! [`Mmap`](super::mmap::Mmap) of the socket.

use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};

use super::socket::{self, Pod};

/// Opens an unbound raw packet socket (protocol 0: it receives nothing
/// until it is bound), non-blocking and close-on-exec.
pub(crate) fn socket() -> io::Result<OwnedFd> {
    socket::socket(
        libc::AF_PACKET,
        libc::SOCK_RAW | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
        0,
    )
}

/// Sets the `SOL_PACKET` option `name` to `val`.
pub(crate) fn setsockopt<T: Pod>(fd: BorrowedFd<'_>, name: libc::c_int, val: &T) -> io::Result<()> {
    socket::setsockopt(fd, libc::SOL_PACKET, name, val)
}

/// Reads (and clears) the socket's `PACKET_STATISTICS`.
pub(crate) fn statistics(fd: BorrowedFd<'_>) -> io::Result<libc::tpacket_stats_v3> {
    socket::getsockopt(fd, libc::SOL_PACKET, libc::PACKET_STATISTICS).map(|(st, _)| st)
}

/// Binds the socket to all protocols of interface `ifindex`.
pub(crate) fn bind(fd: BorrowedFd<'_>, ifindex: u32) -> io::Result<()> {
    // SAFETY: an all-zero sockaddr_ll is valid.
    let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sa.sll_family = libc::AF_PACKET as u16;
    sa.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
    sa.sll_ifindex = ifindex as i32;
    socket::bind(fd, &sa)
}

/// Asks the kernel to transmit every `TP_STATUS_SEND_REQUEST` slot of the
/// TX ring, without waiting. Returns the frame bytes it accepted.
pub(crate) fn send_ring(fd: BorrowedFd<'_>) -> io::Result<usize> {
    socket::send_kick(fd)
}
