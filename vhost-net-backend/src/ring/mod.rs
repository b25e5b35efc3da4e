// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The ring engine: virtqueues over guest memory, and the copies in and out
//! of guest buffers. Most of the crate's `unsafe` lives here.
//!
//! Rules kept throughout:
//! - a guest buffer is a [`Seg`]: a host address and a length that the ring
//!   parser checked against the mapped regions. A `Seg` is only valid while
//!   the [`GuestMemory`] snapshot it was translated from is alive; the queue
//!   that produced it keeps that snapshot for at least as long as the
//!   borrow through which the `Seg` is reachable.
//! - guest memory is accessed with raw copies and volatile/atomic loads and
//!   stores, never through a `&[u8]` (the guest may change it at any time).
//!
//! | file | its one job |
//! |---|---|
//! | `mod.rs` | the ring dispatch ([`Ring`]: split or packed), used ids, the engine's limits |
//! | `split.rs`, `packed.rs` | the two layouts: chain walks, used entries, notification suppression |
//! | `memory.rs` | guest memory regions and address translation |
//! | `seg.rs` | guest buffers ([`Seg`], [`SegVec`]) and the cursors over them ([`copy_from_segs`], [`SegWriter`]) |
//! | `copy.rs` | the copy: the data path's only `memcpy` |
//! | `cache.rs` | cache hints: prefetch ahead of use, `CLDEMOTE` after writing |
//! | `words.rs` | descriptor and virtio-net header words |
//! | `flags.rs` | the descriptor and event flag words, from `virtio-bindings` |
//! | `log.rs` | the dirty-page log (live migration) |
//! | `driver.rs` | (feature `test-utils`) the driver side of a loopback guest's rings |
#![allow(unsafe_code)]

mod cache;
mod copy;
pub(crate) mod driver;
pub(crate) mod flags;
pub(crate) mod log;
pub(crate) mod memory;
pub(crate) mod packed;
mod seg;
pub(crate) mod split;
mod words;

pub use log::{DirtyLog, NO_DIRTY_LOG_ENV};
pub use memory::{GuestMemory, MemoryError};
pub use packed::PackedLayout;
pub use split::{RingError, SplitLayout};

pub(crate) use cache::{demote_buffer, prefetch, prefetch_body, prefetch_buffer, HEAD_WARM};
use cache::{BUF_AHEAD, DESC_AHEAD};
pub(crate) use seg::{copy_from_segs, Seg, SegVec, SegWriter};
use words::read_desc_words;
pub(crate) use words::{load_hdr, read_hdr, store_hdr};

use std::sync::Arc;

use crate::device::Negotiated;
use crate::stats::DropReason;

/// How a used buffer is identified: its id and, for packed rings, how many
/// descriptor slots it took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct UsedId(u32);

impl UsedId {
    /// Kept in one word: the hot path reads it back whole, and a value
    /// written as two halves and read as one stalls store forwarding.
    #[inline(always)]
    pub(crate) const fn new(id: u16, ndesc: u16) -> Self {
        Self(id as u32 | (ndesc as u32) << 16)
    }

    #[inline(always)]
    pub(crate) const fn id(self) -> u16 {
        self.0 as u16
    }

    #[inline(always)]
    pub(crate) const fn ndesc(self) -> u16 {
        (self.0 >> 16) as u16
    }
}

/// What taking the next available buffer gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Popped {
    /// Nothing available.
    Empty,
    /// A valid buffer of this many bytes; its segments were appended.
    Chain(UsedId, u32),
    /// A malformed buffer, to be returned unused (when it has an id) and
    /// counted.
    Bad(Option<UsedId>, DropReason),
}

/// A position in the avail ring, to roll back to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mark {
    idx: u16,
    wrap: bool,
}

/// Where a ring lives in guest memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// A split virtqueue.
    Split(SplitLayout),
    /// A packed virtqueue.
    Packed(PackedLayout),
}

/// A virtqueue of either format, owned by one data-plane thread.
#[derive(Debug)]
pub(crate) enum Ring {
    Split(split::SplitRing),
    Packed(packed::PackedRing),
}

macro_rules! dispatch {
    ($self:ident, $r:ident => $e:expr) => {
        match $self {
            Ring::Split($r) => $e,
            Ring::Packed($r) => $e,
        }
    };
}

impl Ring {
    /// Sets up a ring from its layout and vhost-user base. A split ring
    /// whose used index disagrees with the base starts at the used index
    /// ([`split::SplitRing::start_at_used`]: a frontend reconnecting to a
    /// restarted backend).
    pub(crate) fn new(
        mem: Arc<GuestMemory>,
        layout: Layout,
        base: u32,
        features: Negotiated,
    ) -> Result<Self, RingError> {
        Ok(match layout {
            Layout::Split(l) => {
                let base = u16::try_from(base).map_err(|_| RingError::Size(l.size))?;
                let (event_idx, indirect) = (features.event_idx(), features.indirect());
                let mut r = split::SplitRing::new(mem, l, base, event_idx, indirect)?;
                if let Some(was) = r.start_at_used() {
                    tracing::info!(
                        "vring: base {was} but used index {}: starting at the used index",
                        r.base()
                    );
                }
                Ring::Split(r)
            }
            Layout::Packed(l) => Ring::Packed(packed::PackedRing::new(mem, l, base, features)?),
        })
    }

    /// The same ring over a new memory snapshot, keeping its indices.
    pub(crate) fn remap(
        &self,
        mem: Arc<GuestMemory>,
        layout: Layout,
        features: Negotiated,
    ) -> Result<Self, RingError> {
        Ok(match (self, layout) {
            (Ring::Split(r), Layout::Split(l)) => {
                Ring::Split(r.remap(mem, l, features.event_idx(), features.indirect())?)
            }
            (Ring::Packed(r), Layout::Packed(l)) => Ring::Packed(r.remap(mem, l, features)?),
            (r, l) => Ring::new(mem, l, r.base(), features)?,
        })
    }

    /// Switches dirty-page logging on (`Some`) or off for this ring's
    /// writes; `layout` is the ring's own (packed rings log their
    /// descriptor and device areas at its addresses).
    pub(crate) fn set_log(&mut self, target: Option<&log::LogTarget>, layout: Layout) {
        match (self, layout) {
            (Ring::Split(r), _) => r.log = target.map(|t| log::RingLog::new(t, t.used_gpa, 0)),
            (Ring::Packed(r), Layout::Packed(l)) => {
                r.log = target.map(|t| log::RingLog::new(t, l.desc, l.device))
            }
            (Ring::Packed(r), Layout::Split(_)) => r.log = None,
        }
    }

    /// Marks the first `len` bytes written into `segs` (an RX frame) in the
    /// dirty log, when it is on. One branch when it is off.
    #[inline(always)]
    pub(crate) fn log_write(&mut self, segs: &[Seg], len: usize) {
        dispatch!(self, r => if let Some(l) = &mut r.log {
            l.mark_segs(&r.mem, segs, len);
        })
    }

    /// The vhost-user base (`GET_VRING_BASE`).
    pub(crate) fn base(&self) -> u32 {
        dispatch!(self, r => r.base())
    }

    pub(crate) fn is_broken(&self) -> bool {
        dispatch!(self, r => r.is_broken())
    }

    /// Available buffers, up to `max` (an upper bound for packed rings,
    /// where chains may take several slots).
    #[inline]
    pub(crate) fn count_avail(&mut self, max: usize) -> usize {
        match self {
            Ring::Split(r) => r.count_avail(max),
            Ring::Packed(r) => r.count_avail(max),
        }
    }

    /// Warms, for writing, the lines past its head of the next buffer a
    /// frame of `len` bytes (header included) goes into: called as a frame
    /// takes its buffer, with that frame's length, so the next frame's
    /// copy finds its lines ([`prefetch_body`]). Packed rings only: on
    /// split rings it measured 1.5-4.5 % slower with hugepages
    /// (docs/perf/fast-path-2026-12-05-to-06.md, "Large frames' lines
    /// asked for one frame ahead").
    #[inline(always)]
    pub(crate) fn prefetch_next_body(&self, len: usize) {
        if let Ring::Packed(r) = self {
            r.prefetch_next_body(len);
        }
    }

    #[inline(always)]
    pub(crate) fn next_chain(&mut self, writable: bool, out: &mut SegVec) -> Popped {
        dispatch!(self, r => r.next_chain(writable, out))
    }

    /// Four buffers at once, when a packed ring has them as
    /// [`packed::PackedRing::next_four`] says; false (nothing taken) for a
    /// split ring or when it does not.
    #[inline(always)]
    pub(crate) fn next_four(
        &mut self,
        writable: bool,
        out: &mut SegVec,
        got: &mut [(UsedId, u32); 4],
    ) -> bool {
        match self {
            Ring::Packed(r) => r.next_four(writable, out, got),
            Ring::Split(_) => false,
        }
    }

    #[inline]
    pub(crate) fn mark(&self) -> Mark {
        dispatch!(self, r => r.mark())
    }

    #[inline]
    pub(crate) fn rollback(&mut self, m: Mark) {
        dispatch!(self, r => r.rollback(m))
    }

    /// Writes a used element; `wrote` tells whether the device wrote into
    /// the buffer (RX).
    #[inline(always)]
    pub(crate) fn push_used(&mut self, u: UsedId, len: u32, wrote: bool) {
        match self {
            Ring::Split(r) => r.push_used(u.id(), len),
            Ring::Packed(r) => r.push_used(u, len, wrote),
        }
    }

    #[inline]
    pub(crate) fn publish_used(&mut self) -> bool {
        dispatch!(self, r => r.publish_used())
    }

    #[inline]
    pub(crate) fn needs_notification(&mut self) -> bool {
        dispatch!(self, r => r.needs_notification())
    }

    pub(crate) fn enable_notification(&mut self) -> bool {
        dispatch!(self, r => r.enable_notification())
    }

    pub(crate) fn disable_notification(&mut self) {
        dispatch!(self, r => r.disable_notification())
    }
}

/// Most buffers one guest TX chain may have (after splitting at region
/// boundaries); longer chains are dropped as `TooManySegments`. Linux uses
/// at most `MAX_SKB_FRAGS + 2` (19) per frame.
pub const MAX_CHAIN_SEGS: usize = 256;

/// Most buffer descriptors one chain may take, zero-length ones and an
/// indirect table's entries counted; with the indirect descriptor itself a
/// walk reads at most [`MAX_CHAIN_READS`]. A longer chain is refused
/// (`TooManySegments`; a packed chain over this many slots breaks its ring,
/// as one that never ends does). Real drivers stay far below: Linux posts
/// at most `MAX_SKB_FRAGS + 2` buffers (19, 47 at the kernel's largest
/// setting), and DPDK's vhost library refuses chains of more than 256
/// buffers (`BUF_VECTOR_MAX`), as [`MAX_CHAIN_SEGS`] does for TX
/// segments. Before, a split chain could read its ring's size and then an
/// indirect table's 65,535 entries more: 32 such chains kept a PMD busy
/// for milliseconds.
pub const MAX_CHAIN_DESCS: u32 = 256;

/// Most descriptors one chain walk reads: [`MAX_CHAIN_DESCS`] buffers and
/// one indirect descriptor.
pub const MAX_CHAIN_READS: u32 = MAX_CHAIN_DESCS + 1;

/// Descriptors the out-of-line chain walks of one burst may read, per
/// ring (zero-length and indirect entries count). A walk starts only
/// while at least [`MAX_CHAIN_READS`] of it are left; otherwise the
/// chain stays in the ring for the next burst (TX loses nothing; an RX
/// frame finds no buffer and is dropped as `no_buffers`). So a hostile
/// ring costs a burst at most about this many descriptor reads, whatever
/// it posts. Real traffic does not reach it: 32 chains of a Linux TSO
/// frame (an indirect table of 19 entries) read 640; 32 big-packet RX
/// chains of 47 buffers, 1,504. Buffers of one direct descriptor (the
/// inline path) do not count: the burst's frame limit bounds them.
pub const BURST_DESC_BUDGET: u32 = 2048;

/// Most buffers all the RX chains of one frame may have together; a frame
/// that would need more is dropped (`TooLong`) without consuming the
/// guest's buffers.
pub const MAX_RX_FRAME_SEGS: usize = 1024;

#[cfg(test)]
mod tests;
