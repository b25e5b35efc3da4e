// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! AF_XDP: the socket, its `SOL_XDP` options (UMEM registration, ring
//! sizes, ring offsets, options, statistics), `bind` to a queue, the
//! `sendto`/`recvfrom` wake-ups, and the shared memory of one ring
//! ([`XdpRing`]).
//!
//! The BPF side (XSKMAP, program, link) is in `bpf.rs`.

use std::io;
use std::marker::PhantomData;
use std::mem::{align_of, size_of};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;

use super::mmap::Mmap;
use super::socket::{self, Pod};

/// Creates an `AF_XDP` socket (close-on-exec).
pub(crate) fn socket() -> io::Result<OwnedFd> {
    socket::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0)
}

/// Sets the `SOL_XDP` option `name` to `val`.
pub(crate) fn setsockopt<T: Pod>(fd: BorrowedFd<'_>, name: libc::c_int, val: &T) -> io::Result<()> {
    socket::setsockopt(fd, libc::SOL_XDP, name, val)
}

/// Reads the `SOL_XDP` option `name`; returns the value (zero-filled
/// beyond what the kernel wrote) and the length the kernel wrote.
pub(crate) fn getsockopt<T: Pod>(fd: BorrowedFd<'_>, name: libc::c_int) -> io::Result<(T, usize)> {
    socket::getsockopt(fd, libc::SOL_XDP, name)
}

/// Registers `umem` as the socket's UMEM (`XDP_UMEM_REG`), in aligned
/// chunks of `chunk_size` bytes and no headroom: transmitted frames start
/// at their chunk's first byte.
pub(crate) fn register_umem(fd: BorrowedFd<'_>, umem: &Mmap, chunk_size: u32) -> io::Result<()> {
    let reg = libc::xdp_umem_reg {
        addr: umem.addr(),
        len: umem.len() as u64,
        chunk_size,
        headroom: 0,
        flags: 0,
        tx_metadata_len: 0,
    };
    setsockopt(fd, libc::XDP_UMEM_REG, &reg)
}

/// Binds the socket to queue `queue_id` of interface `ifindex` with
/// `XDP_COPY`/`XDP_ZEROCOPY`/`XDP_USE_NEED_WAKEUP` `flags`.
pub(crate) fn bind(fd: BorrowedFd<'_>, ifindex: u32, queue_id: u32, flags: u16) -> io::Result<()> {
    let addr = libc::sockaddr_xdp {
        sxdp_family: libc::AF_XDP as u16,
        sxdp_flags: flags,
        sxdp_ifindex: ifindex,
        sxdp_queue_id: queue_id,
        sxdp_shared_umem_fd: 0,
    };
    socket::bind(fd, &addr)
}

/// The kernel's counters for the socket (`XDP_STATISTICS`).
pub(crate) fn statistics(fd: BorrowedFd<'_>) -> io::Result<libc::xdp_statistics> {
    getsockopt(fd, libc::XDP_STATISTICS).map(|(s, _)| s)
}

/// The TX wake-up: `sendto(fd, NULL, 0, MSG_DONTWAIT, NULL, 0)`. In copy
/// mode the kernel transmits from the TX ring inside this call.
pub(crate) fn kick_tx(fd: BorrowedFd<'_>) -> io::Result<()> {
    socket::sendto_kick(fd)
}

/// The RX (fill ring) wake-up: `recvfrom(fd, NULL, 0, MSG_DONTWAIT, NULL,
/// NULL)`.
pub(crate) fn kick_rx(fd: BorrowedFd<'_>) -> io::Result<()> {
    socket::recvfrom_kick(fd)
}

// ===== impl XdpRing =====

/// The shared memory of one AF_XDP ring: a producer index, a consumer
/// index, a flags word and a power-of-two array of `size` descriptors.
///
/// The indices and flags are atomics; descriptors are read and written with
/// volatile accesses of a plain-data `T`, at a free-running index reduced
/// modulo `size`, so every access stays inside the ring whatever the index.
/// Which slots the protocol gives user space (between the indices) is the
/// caller's bookkeeping (`io/af_xdp/ring.rs`).
#[derive(Debug)]
pub(crate) struct XdpRing<T> {
    producer: NonNull<AtomicU32>,
    consumer: NonNull<AtomicU32>,
    flags: NonNull<AtomicU32>,
    descs: NonNull<T>,
    size: u32,
    /// Keeps the mapping alive.
    _map: Arc<Mmap>,
    _ty: PhantomData<T>,
}

// SAFETY: the pointers reference memory owned by `_map`, which is `Send`
// and `Sync`; the ring holds no thread-bound state.
unsafe impl<T: Send> Send for XdpRing<T> {}

impl<T: Pod> XdpRing<T> {
    /// Maps ring `pgoff` (`XDP_PGOFF_RX_RING`, ...) of socket `fd`, of
    /// `size` entries at the offsets `XDP_MMAP_OFFSETS` reported.
    ///
    /// # Errors
    /// The offsets do not describe a ring of `size` entries, or `mmap`
    /// failed.
    pub(crate) fn map(
        fd: BorrowedFd<'_>,
        off: &libc::xdp_ring_offset,
        size: u32,
        pgoff: u64,
    ) -> io::Result<Self> {
        let len = usize::try_from(off.desc)
            .ok()
            .and_then(|d| d.checked_add(size as usize * size_of::<T>()))
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidData))?;
        let map = Mmap::shared_populated(fd, len, pgoff)?;
        Self::new(Arc::new(map), size, off)
    }

    /// Locates a ring of `size` entries inside `map` at offsets `off`.
    ///
    /// # Errors
    /// A word or the descriptor array is outside the mapping or misaligned.
    ///
    /// # Panics
    /// `size` is not a power of two.
    pub(crate) fn new(map: Arc<Mmap>, size: u32, off: &libc::xdp_ring_offset) -> io::Result<Self> {
        assert!(
            size.is_power_of_two(),
            "ring size {size} is not a power of two"
        );
        let len = map.len();
        let at = |off: u64, bytes: usize, align: usize| {
            usize::try_from(off)
                .ok()
                .filter(|&o| o % align == 0 && o <= len && bytes <= len - o)
                // SAFETY: `o` is inside the mapping (checked just above).
                .map(|o| unsafe { map.as_ptr().add(o) })
                .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidData))
        };
        let word = |off: u64| at(off, 4, 4).map(NonNull::cast::<AtomicU32>);
        let descs = at(off.desc, size as usize * size_of::<T>(), align_of::<T>())?;
        Ok(Self {
            producer: word(off.producer)?,
            consumer: word(off.consumer)?,
            flags: word(off.flags)?,
            descs: descs.cast::<T>(),
            size,
            _map: map,
            _ty: PhantomData,
        })
    }

    /// Entries in the ring.
    #[inline]
    pub(crate) fn size(&self) -> u32 {
        self.size
    }

    /// The producer index.
    #[inline]
    pub(crate) fn producer(&self) -> &AtomicU32 {
        // SAFETY: inside the mapping and aligned (checked in `new`), which
        // lives as long as `self`; shared with the kernel only through
        // atomic accesses.
        unsafe { self.producer.as_ref() }
    }

    /// The consumer index.
    #[inline]
    pub(crate) fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as for `producer`.
        unsafe { self.consumer.as_ref() }
    }

    /// The flags word (`XDP_RING_NEED_WAKEUP`).
    #[inline]
    pub(crate) fn flags(&self) -> &AtomicU32 {
        // SAFETY: as for `producer`.
        unsafe { self.flags.as_ref() }
    }

    /// Pointer to the slot for free-running index `idx`.
    #[inline]
    fn slot(&self, idx: u32) -> *mut T {
        let i = (idx & (self.size - 1)) as usize;
        // SAFETY: `i < size` and `descs` points to `size` entries inside
        // the mapping (checked in `new`).
        unsafe { self.descs.as_ptr().add(i) }
    }

    /// Reads the descriptor at free-running index `idx`.
    #[inline]
    pub(crate) fn read(&self, idx: u32) -> T {
        // SAFETY: the slot is inside the mapping and aligned (`slot`); a
        // volatile read of plain data (`T: Pod`) is valid whatever the
        // kernel left there.
        unsafe { self.slot(idx).read_volatile() }
    }

    /// Writes the descriptor at free-running index `idx`.
    #[inline]
    pub(crate) fn write(&self, idx: u32, item: T) {
        // SAFETY: the slot is inside the mapping and aligned (`slot`), and
        // never referenced by a Rust reference: only volatile accesses of
        // plain data reach it.
        unsafe { self.slot(idx).write_volatile(item) }
    }
}
