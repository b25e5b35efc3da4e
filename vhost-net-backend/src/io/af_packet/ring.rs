// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Where the TPACKET_V3 rings' blocks, slots and status words are inside
//! the socket's one mapping (RX ring first, then TX ring). Walking the
//! frames of a block is in `mod.rs`.

use std::mem::offset_of;
use std::sync::atomic::AtomicU32;

use super::{BLOCK_BODY_OFF, BLOCK_STATUS_OFF, TPACKET3_HDR};
use crate::sys::mmap::Mmap;

/// Where the consumer is inside a block it owns.
#[derive(Debug, Clone, Copy)]
pub(super) struct Cursor {
    /// Frames not lent yet.
    pub(super) remaining: u32,
    /// Block offset of the next frame's `tpacket3_hdr`.
    pub(super) offset: usize,
}

/// The receive ring: `block_count` blocks of `block_size` bytes at the
/// start of the mapping.
#[derive(Debug)]
pub(super) struct RxRing {
    pub(super) block_size: usize,
    pub(super) block_count: usize,
    /// Block to look at (or being consumed).
    pub(super) next: usize,
    pub(super) cursor: Option<Cursor>,
}

impl RxRing {
    /// Mapping offset of block `i`.
    #[inline]
    pub(super) fn block(&self, i: usize) -> usize {
        debug_assert!(i < self.block_count);
        // Invariant: i < block_count, so the block lies inside the mapping
        // (blocks are page-aligned).
        i * self.block_size
    }

    /// Block `i`'s `block_status`, only ever accessed atomically.
    #[inline]
    pub(super) fn status<'m>(&self, map: &'m Mmap, i: usize) -> &'m AtomicU32 {
        map.atomic_u32(self.block(i) + BLOCK_STATUS_OFF)
    }

    /// The body of block `i` (from `num_pkts` to the end).
    ///
    /// The caller owns the block (its status has `TP_STATUS_USER`, read
    /// with `Acquire`) and does not hand it back while the slice lives.
    #[inline]
    pub(super) fn body<'m>(&self, map: &'m mut Mmap, i: usize) -> &'m mut [u8] {
        map.bytes_mut(
            self.block(i) + BLOCK_BODY_OFF,
            self.block_size - BLOCK_BODY_OFF,
        )
        .expect("RX blocks lie inside the mapping")
    }
}

/// The transmit ring: fixed-size slots after the receive ring.
#[derive(Debug)]
pub(super) struct TxRing {
    /// Mapping offset of the ring.
    pub(super) base: usize,
    pub(super) block_size: usize,
    pub(super) frame_size: usize,
    pub(super) per_block: usize,
    pub(super) count: usize,
    /// Next slot to fill.
    pub(super) head: usize,
    /// Slots marked SEND_REQUEST and not yet seen processed (the ones just
    /// before `head`).
    pub(super) unsent: usize,
    /// Frame length (without the virtio-net header) of each slot.
    pub(super) lens: Vec<u32>,
}

impl TxRing {
    /// Mapping offset of slot `i`'s `tpacket3_hdr`.
    #[inline]
    pub(super) fn slot(&self, i: usize) -> usize {
        debug_assert!(i < self.count);
        // Invariant: i < count = per_block * blocks: inside the mapping
        // (slots are page-aligned).
        self.base + (i / self.per_block) * self.block_size + (i % self.per_block) * self.frame_size
    }

    /// Slot `i`'s `tp_status`, only ever accessed atomically.
    #[inline]
    pub(super) fn status<'m>(&self, map: &'m Mmap, i: usize) -> &'m AtomicU32 {
        map.atomic_u32(self.slot(i) + offset_of!(libc::tpacket3_hdr, tp_status))
    }

    /// The data area of slot `i`, after its 48-byte header (so it does not
    /// overlap `tp_status`).
    ///
    /// The caller owns the slot (`TP_STATUS_AVAILABLE`, read with
    /// `Acquire`) and publishes it only after the slice's last use.
    #[inline]
    pub(super) fn data<'m>(&self, map: &'m mut Mmap, i: usize) -> &'m mut [u8] {
        map.bytes_mut(self.slot(i) + TPACKET3_HDR, self.frame_size - TPACKET3_HDR)
            .expect("TX slots lie inside the mapping")
    }

    /// Sets a slot's `tp_len` (and `tp_next_offset`, which must be 0).
    ///
    /// The slot is not being read by the kernel: it is AVAILABLE and ours,
    /// or SEND_REQUEST while no `send()` runs.
    #[inline]
    pub(super) fn set_len(&self, map: &mut Mmap, i: usize, len: u32) {
        let h = self.slot(i);
        map.write_u32(h + offset_of!(libc::tpacket3_hdr, tp_len), len);
        map.write_u32(h + offset_of!(libc::tpacket3_hdr, tp_next_offset), 0);
    }
}
