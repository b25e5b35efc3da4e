// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Generic socket calls: `socket`, socket options of plain-data types,
//! `bind`, the vhost-user peek, and the zero-length kicks that make the
//! kernel look at a socket's rings.

use std::io;
use std::mem::{size_of, MaybeUninit};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::ptr;

use super::{check, check_len};

/// Plain old data the kernel may read or write byte-wise (a socket option,
/// a socket address, a ring descriptor).
///
/// # Safety
///
/// Implementors are `repr(C)`, have no padding, and every bit pattern is a
/// valid value.
pub(crate) unsafe trait Pod: Copy {}

// SAFETY: integers have no padding and any bit pattern is valid.
unsafe impl Pod for u32 {}
// SAFETY: as for u32.
unsafe impl Pod for i32 {}
// SAFETY: as for u32.
unsafe impl Pod for u64 {}
// SAFETY: repr(C) struct of one u64 and two u32 (uapi `struct xdp_desc`):
// 16 bytes, no padding.
unsafe impl Pod for libc::xdp_desc {}
// SAFETY: repr(C) struct of 16 u64 fields (uapi `struct xdp_mmap_offsets`):
// no padding, any bit pattern is valid.
unsafe impl Pod for libc::xdp_mmap_offsets {}
// SAFETY: repr(C) struct of 6 u64 fields (uapi `struct xdp_statistics`).
unsafe impl Pod for libc::xdp_statistics {}
// SAFETY: repr(C) struct of one u32 (uapi `struct xdp_options`).
unsafe impl Pod for libc::xdp_options {}
// SAFETY: repr(C) struct of 2 u64 then 4 u32 (uapi `struct xdp_umem_reg`):
// 32 bytes, no padding.
unsafe impl Pod for libc::xdp_umem_reg {}
// SAFETY: repr(C) struct of 2 u16 and 3 u32 (uapi `struct sockaddr_xdp`):
// 16 bytes, no padding.
unsafe impl Pod for libc::sockaddr_xdp {}
// SAFETY: repr(C) struct of 7 u32 (uapi `struct tpacket_req3`).
unsafe impl Pod for libc::tpacket_req3 {}
// SAFETY: repr(C) struct of 3 u32 (uapi `struct tpacket_stats_v3`).
unsafe impl Pod for libc::tpacket_stats_v3 {}
// SAFETY: repr(C) struct of an int, 2 u16 and 8 bytes (uapi `struct
// packet_mreq`): 16 bytes, no padding.
unsafe impl Pod for libc::packet_mreq {}
// SAFETY: repr(C) struct of u16, u16, int, u16, 2 u8 and 8 bytes (uapi
// `struct sockaddr_ll`): 20 bytes, no padding.
unsafe impl Pod for libc::sockaddr_ll {}

/// A socket address the kernel can take in `bind`.
///
/// # Safety
///
/// Implementors are a `struct sockaddr_*` whose first field is the address
/// family.
pub(crate) unsafe trait SockAddr: Pod {}

// SAFETY: uapi `struct sockaddr_xdp`, family first.
unsafe impl SockAddr for libc::sockaddr_xdp {}
// SAFETY: uapi `struct sockaddr_ll`, family first.
unsafe impl SockAddr for libc::sockaddr_ll {}

/// `socket(domain, ty, protocol)`.
pub(crate) fn socket(
    domain: libc::c_int,
    ty: libc::c_int,
    protocol: libc::c_int,
) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with integer arguments.
    let fd = check(unsafe { libc::socket(domain, ty, protocol) })?;
    // SAFETY: `socket` just returned this fd and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sets option `name` at `level` to `val`.
pub(crate) fn setsockopt<T: Pod>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    val: &T,
) -> io::Result<()> {
    let len = libc::socklen_t::try_from(size_of::<T>()).expect("socket options are small");
    // SAFETY: `val` is valid for reads of `size_of::<T>()` bytes and `T: Pod`
    // has no uninitialised padding; the kernel only reads them.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            ptr::from_ref(val).cast::<libc::c_void>(),
            len,
        )
    })
    .map(drop)
}

/// Reads option `name` at `level`; returns the value (zero-filled beyond
/// what the kernel wrote) and the length the kernel wrote.
pub(crate) fn getsockopt<T: Pod>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
) -> io::Result<(T, usize)> {
    let mut val = MaybeUninit::<T>::zeroed();
    let mut len = libc::socklen_t::try_from(size_of::<T>()).expect("socket options are small");
    // SAFETY: `val` is valid for writes of `len` bytes and `len` is a valid
    // in/out length; the kernel writes at most `len` bytes.
    check(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            val.as_mut_ptr().cast::<libc::c_void>(),
            &raw mut len,
        )
    })?;
    // SAFETY: `val` was zero-initialised and the kernel overwrote a prefix;
    // `T: Pod` makes every bit pattern a valid `T`.
    Ok((unsafe { val.assume_init() }, len as usize))
}

/// Binds the socket to `addr`.
pub(crate) fn bind<A: SockAddr>(fd: BorrowedFd<'_>, addr: &A) -> io::Result<()> {
    let len = libc::socklen_t::try_from(size_of::<A>()).expect("socket addresses are small");
    // SAFETY: `addr` is a valid socket address for reads of `len` bytes.
    check(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            ptr::from_ref(addr).cast::<libc::sockaddr>(),
            len,
        )
    })
    .map(drop)
}

/// Reads up to `buf.len()` bytes from `sock` without consuming them,
/// blocking until at least one byte is there. Returns 0 at end of stream.
pub(crate) fn peek(sock: &UnixStream, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        // SAFETY: `buf` is valid for writes of `buf.len()` bytes for the
        // duration of the call; the fd is owned by `sock`.
        let n = unsafe {
            libc::recv(
                sock.as_raw_fd(),
                buf.as_mut_ptr().cast::<libc::c_void>(),
                buf.len(),
                libc::MSG_PEEK | libc::MSG_WAITALL,
            )
        };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// `send(fd, NULL, 0, MSG_DONTWAIT)`: with a packet TX ring, the kernel
/// sends the ring's queued slots instead of a buffer. Returns the bytes it
/// accepted.
pub(crate) fn send_kick(fd: BorrowedFd<'_>) -> io::Result<usize> {
    // SAFETY: a NULL buffer of length 0 is valid for send(); with a TX ring
    // the kernel reads the frames from the ring instead.
    check_len(unsafe { libc::send(fd.as_raw_fd(), ptr::null(), 0, libc::MSG_DONTWAIT) })
}

/// `sendto(fd, NULL, 0, MSG_DONTWAIT, NULL, 0)`: the AF_XDP TX wake-up.
pub(crate) fn sendto_kick(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: a zero-length send with null buffer and address: the kernel
    // reads no user memory.
    check_len(unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            ptr::null(),
            0,
            libc::MSG_DONTWAIT,
            ptr::null(),
            0,
        )
    })
    .map(drop)
}

/// `recvfrom(fd, NULL, 0, MSG_DONTWAIT, NULL, NULL)`: the AF_XDP fill ring
/// wake-up.
pub(crate) fn recvfrom_kick(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: a zero-length receive with null buffer and address: the kernel
    // writes no user memory.
    check_len(unsafe {
        libc::recvfrom(
            fd.as_raw_fd(),
            ptr::null_mut(),
            0,
            libc::MSG_DONTWAIT,
            ptr::null_mut(),
            ptr::null_mut(),
        )
    })
    .map(drop)
}
