// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The syscalls of the AF_XDP socket path, each wrapped once: `socket`,
//! `setsockopt`/`getsockopt` at `SOL_XDP`, `bind`, the `sendto`/`recvfrom`
//! wake-ups, `mmap`/`munmap`, `if_nametoindex` and the MTU ioctl.
//!
//! Every wrapper turns errno into [`io::Error`]; callers add the interface
//! and the step (see [`super::AfXdpError`]). The BPF syscall lives in
//! [`super::bpf`].

use std::ffi::CString;
use std::io;
use std::mem::{size_of, MaybeUninit};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::{self, NonNull};

/// Plain old data the kernel may read or write byte-wise through a socket
/// option.
///
/// # Safety
///
/// Implementors are `repr(C)`, have no padding, and every bit pattern is a
/// valid value.
pub(super) unsafe trait Pod: Copy {}

// SAFETY: a u32 has no padding and any bit pattern is valid.
unsafe impl Pod for u32 {}
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

/// Converts a `-1`-on-error return value into `io::Result`.
fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Creates an `AF_XDP` socket (close-on-exec).
pub(super) fn xsk_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with integer arguments.
    let fd = check(unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: `socket` just returned this fd and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sets the `SOL_XDP` option `name` to `val`.
pub(super) fn setsockopt<T: Pod>(fd: BorrowedFd<'_>, name: libc::c_int, val: &T) -> io::Result<()> {
    let len = libc::socklen_t::try_from(size_of::<T>()).expect("socket options are small");
    // SAFETY: `val` is valid for reads of `size_of::<T>()` bytes and `T: Pod`
    // has no uninitialised padding; the kernel only reads them.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_XDP,
            name,
            ptr::from_ref(val).cast::<libc::c_void>(),
            len,
        )
    })
    .map(drop)
}

/// Reads the `SOL_XDP` option `name`; returns the value (zero-filled
/// beyond what the kernel wrote) and the length the kernel wrote.
pub(super) fn getsockopt<T: Pod>(fd: BorrowedFd<'_>, name: libc::c_int) -> io::Result<(T, usize)> {
    let mut val = MaybeUninit::<T>::zeroed();
    let mut len = libc::socklen_t::try_from(size_of::<T>()).expect("socket options are small");
    // SAFETY: `val` is valid for writes of `len` bytes and `len` is a valid
    // in/out length; the kernel writes at most `len` bytes.
    check(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_XDP,
            name,
            val.as_mut_ptr().cast::<libc::c_void>(),
            &raw mut len,
        )
    })?;
    // SAFETY: `val` was zero-initialised and the kernel overwrote a prefix;
    // `T: Pod` makes every bit pattern a valid `T`.
    Ok((unsafe { val.assume_init() }, len as usize))
}

/// Binds the socket to an interface queue.
pub(super) fn bind(fd: BorrowedFd<'_>, addr: &libc::sockaddr_xdp) -> io::Result<()> {
    let len = libc::socklen_t::try_from(size_of::<libc::sockaddr_xdp>()).expect("small");
    // SAFETY: `addr` is a valid sockaddr_xdp for reads of `len` bytes.
    check(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            ptr::from_ref(addr).cast::<libc::sockaddr>(),
            len,
        )
    })
    .map(drop)
}

/// The TX wake-up: `sendto(fd, NULL, 0, MSG_DONTWAIT, NULL, 0)`. In copy
/// mode the kernel transmits from the TX ring inside this call.
pub(super) fn kick_tx(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: a zero-length send with null buffer and address: the kernel
    // reads no user memory.
    let r = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            ptr::null(),
            0,
            libc::MSG_DONTWAIT,
            ptr::null(),
            0,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The RX (fill ring) wake-up: `recvfrom(fd, NULL, 0, MSG_DONTWAIT, NULL,
/// NULL)`.
pub(super) fn kick_rx(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: a zero-length receive with null buffer and address: the kernel
    // writes no user memory.
    let r = unsafe {
        libc::recvfrom(
            fd.as_raw_fd(),
            ptr::null_mut(),
            0,
            libc::MSG_DONTWAIT,
            ptr::null_mut(),
            ptr::null_mut(),
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The index of interface `name` (in the calling thread's network
/// namespace).
pub(super) fn if_nametoindex(name: &str) -> io::Result<u32> {
    let c = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `c` is a valid NUL-terminated string for the call.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(idx)
    }
}

/// The MTU of interface `name`, through `SIOCGIFMTU` on a throw-away UDP
/// socket (AF_XDP sockets do not implement device ioctls).
pub(super) fn interface_mtu(name: &str) -> io::Result<u32> {
    if name.len() >= libc::IFNAMSIZ || name.as_bytes().contains(&0) {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    // SAFETY: plain syscall with integer arguments.
    let fd =
        check(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: `socket` just returned this fd and nothing else owns it.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: an all-zero ifreq is valid (empty name, zero union).
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in ifr.ifr_name.iter_mut().zip(name.bytes()) {
        *dst = src as libc::c_char;
    }
    // SAFETY: `ifr` is a valid, NUL-terminated ifreq that SIOCGIFMTU fills
    // in; it outlives the call.
    check(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFMTU, &raw mut ifr) })?;
    // SAFETY: SIOCGIFMTU wrote `ifru_mtu`, an int.
    let mtu = unsafe { ifr.ifr_ifru.ifru_mtu };
    u32::try_from(mtu).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))
}

/// An owned memory mapping, unmapped on drop.
#[derive(Debug)]
pub(super) struct Mmap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; moving the owner
// to another thread moves the only handle to it.
unsafe impl Send for Mmap {}

impl Mmap {
    /// Private anonymous memory, pre-faulted (the UMEM).
    pub(super) fn anonymous(len: usize) -> io::Result<Self> {
        mmap(
            len,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
            -1,
            0,
        )
    }

    /// A shared mapping of one of a socket's rings at page offset `pgoff`.
    pub(super) fn ring(fd: BorrowedFd<'_>, len: usize, pgoff: u64) -> io::Result<Self> {
        let off = libc::off_t::try_from(pgoff)
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        mmap(
            len,
            libc::MAP_SHARED | libc::MAP_POPULATE,
            fd.as_raw_fd(),
            off,
        )
    }

    /// Start of the mapping.
    pub(super) fn as_ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    /// Length of the mapping in bytes.
    pub(super) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` describe a mapping this value created and owns;
        // every ring or slice derived from it is owned by (and dropped with)
        // the structure owning this `Mmap`.
        let r = unsafe { munmap(self.ptr, self.len) };
        debug_assert!(r.is_ok(), "munmap failed: {r:?}");
    }
}

/// Maps `len` bytes readable and writable at an address the kernel picks.
fn mmap(len: usize, flags: libc::c_int, fd: RawFd, off: libc::off_t) -> io::Result<Mmap> {
    if len == 0 {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    // SAFETY: a null hint without MAP_FIXED never replaces an existing
    // mapping; the new mapping is owned by the returned `Mmap`.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            fd,
            off,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::from(io::ErrorKind::Other))?;
    Ok(Mmap { ptr, len })
}

/// Unmaps `len` bytes at `ptr`.
///
/// # Safety
///
/// `ptr`/`len` describe a whole mapping created by [`mmap`], and no
/// reference into it is used afterwards.
unsafe fn munmap(ptr: NonNull<u8>, len: usize) -> io::Result<()> {
    // SAFETY: the caller guarantees the range is our mapping and unused.
    check(unsafe { libc::munmap(ptr.as_ptr().cast::<libc::c_void>(), len) }).map(drop)
}
