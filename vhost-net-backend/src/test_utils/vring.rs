// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Driver-side vring state: the guest buffer allocator, chains in flight, and the
//! descriptor encoding.

use super::*;

/// First-fit extent allocator over one region's buffer space.
#[derive(Debug)]
pub(super) struct ExtentAlloc {
    /// Free extents, start -> length, coalesced.
    pub(super) free: BTreeMap<u64, u64>,
}

impl ExtentAlloc {
    pub(super) fn new(start: u64, len: u64) -> Self {
        let mut free = BTreeMap::new();
        if len > 0 {
            free.insert(start, len);
        }
        ExtentAlloc { free }
    }

    pub(super) fn alloc(&mut self, len: u64) -> Option<u64> {
        let (&start, &flen) = self.free.iter().find(|(_, &l)| l >= len)?;
        self.free.remove(&start);
        if flen > len {
            self.free.insert(start + len, flen - len);
        }
        Some(start)
    }

    pub(super) fn release(&mut self, start: u64, len: u64) {
        let (mut s, mut l) = (start, len);
        if let Some((&ps, &pl)) = self.free.range(..start).next_back() {
            debug_assert!(ps + pl <= start, "double free of guest extent {start:#x}");
            if ps + pl == start {
                self.free.remove(&ps);
                s = ps;
                l += pl;
            }
        }
        if let Some(&nl) = self.free.get(&(start + len)) {
            self.free.remove(&(start + len));
            l += nl;
        }
        self.free.insert(s, l);
    }
}

/// Buffer space of all regions, handed out round-robin across regions.
#[derive(Debug)]
pub(super) struct BufAlloc {
    /// `(region start GPA, region end GPA, allocator)`.
    pub(super) regions: Vec<(u64, u64, ExtentAlloc)>,
    pub(super) next: usize,
}

impl BufAlloc {
    /// Allocates `len` bytes (rounded up to the granule); returns `(gpa, rounded length)`.
    pub(super) fn alloc(&mut self, len: u64) -> Result<(u64, u64), DriverError> {
        let rounded = len.max(1).div_ceil(ALLOC_GRANULE) * ALLOC_GRANULE;
        let n = self.regions.len();
        for i in 0..n {
            let r = (self.next + i) % n;
            if let Some(gpa) = self.regions[r].2.alloc(rounded) {
                self.next = (r + 1) % n;
                return Ok((gpa, rounded));
            }
        }
        Err(DriverError::OutOfMemory(len))
    }

    pub(super) fn release(&mut self, gpa: u64, len: u64) {
        if let Some(r) = self
            .regions
            .iter_mut()
            .find(|(s, e, _)| *s <= gpa && gpa < *e)
        {
            r.2.release(gpa, len);
        }
    }
}

// ===== vrings =====

/// A chain the driver made available and has not got back yet.
#[derive(Debug)]
pub(super) struct Chain {
    /// Descriptor ids of the ring's own table that the chain holds.
    pub(super) descs: Vec<u16>,
    /// Guest extents to free, `(gpa, len)`.
    pub(super) allocs: Vec<(u64, u64)>,
    /// The data buffers in chain order, `(gpa, len)`.
    pub(super) bufs: Vec<(u64, u32)>,
}

impl Chain {
    pub(super) fn capacity(&self) -> u64 {
        self.bufs.iter().map(|&(_, l)| u64::from(l)).sum()
    }
}

/// A mergeable receive frame whose later buffers have not been used yet.
#[derive(Debug)]
pub(super) struct PartialFrame {
    pub(super) frame: RxFrame,
    pub(super) expected: u16,
}

/// Driver-side state of one vring.
pub(super) struct Vring {
    pub(super) index: usize,
    pub(super) addrs: VringAddrs,
    pub(super) kick: EventFd,
    pub(super) call: EventFd,
    /// Free descriptor ids.
    pub(super) free_descs: Vec<u16>,
    /// In-flight chains by head id.
    pub(super) chains: Vec<Option<Chain>>,
    /// Heads published with `push_avail` and not yet used.
    pub(super) raw_heads: Vec<bool>,
    /// Used elements for raw heads, kept for `take_raw_used`.
    pub(super) raw_used: Vec<(u16, u32)>,
    /// Shadow of `avail.idx`: the next avail index to fill.
    pub(super) next_avail: u16,
    /// Next used index to consume.
    pub(super) last_used: u16,
    /// `next_avail` when `kick` last ran (the `old` of `vring_need_event`).
    pub(super) kicked_at: Cell<u16>,
    /// Write `used_event = last_used` after consuming (EVENT_IDX).
    pub(super) auto_used_event: bool,
    pub(super) partial: Option<PartialFrame>,
    /// `GET_VRING_BASE` was sent.
    pub(super) stopped: bool,
}

impl fmt::Debug for Vring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Vring")
            .field("index", &self.index)
            .field("addrs", &self.addrs)
            .field("free_descs", &self.free_descs.len())
            .field("in_flight", &self.chains.iter().flatten().count())
            .field("next_avail", &self.next_avail)
            .field("last_used", &self.last_used)
            .field("stopped", &self.stopped)
            .finish()
    }
}

/// `vring_need_event` from the virtio spec (2.7.10): should the other side be notified now
/// that the index moved from `old` to `new`, given it asked for a notification at `event`?
pub(super) fn need_event(event: u16, new: u16, old: u16) -> bool {
    new.wrapping_sub(event).wrapping_sub(1) < new.wrapping_sub(old)
}

/// What a new chain's buffers are filled with.
#[derive(Clone, Copy)]
pub(super) enum Fill<'a> {
    /// Device-writable buffers filled with [`RX_POISON`].
    Poison,
    /// Device-readable buffers holding the concatenation of the two slices.
    Bytes(&'a [u8], &'a [u8]),
}

/// Source of [`RX_POISON`] bytes.
pub(super) static POISON: [u8; 4096] = [RX_POISON; 4096];

/// Cuts `total` bytes into `n` pieces whose lengths differ by at most one.
pub(super) fn split_lengths(total: usize, n: usize) -> Vec<usize> {
    let (base, rem) = (total / n, total % n);
    (0..n).map(|i| base + usize::from(i < rem)).collect()
}

/// Encodes one split-ring descriptor (`addr`, `len`, `flags`, `next`, little-endian): what a
/// descriptor table or an indirect table holds.
pub fn desc_bytes(addr: u64, len: u32, flags: u16, next: u16) -> [u8; 16] {
    let mut d = [0u8; 16];
    d[0..8].copy_from_slice(&addr.to_le_bytes());
    d[8..12].copy_from_slice(&len.to_le_bytes());
    d[12..14].copy_from_slice(&flags.to_le_bytes());
    d[14..16].copy_from_slice(&next.to_le_bytes());
    d
}
