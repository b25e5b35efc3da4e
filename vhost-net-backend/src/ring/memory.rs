// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! A snapshot of a guest's memory table: the regions the frontend shared,
//! mapped into this process, with a small translation table.
//!
//! A snapshot is immutable. `SET_MEM_TABLE`, `ADD_MEM_REG` and `REM_MEM_REG`
//! build a new one; the old mappings stay until the last `Arc` of the old
//! snapshot is dropped, so a data-plane thread that still holds it can never
//! touch unmapped memory.

use std::fs::File;
use std::sync::Arc;

use std::os::fd::AsFd;

use super::{Seg, SegVec};
use crate::sys::guarded::GuardedMap;

/// Why a memory table was refused.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// Mapping a region failed.
    #[error("cannot map guest memory region at {gpa:#x} (+{size:#x})")]
    Map {
        /// Guest physical address.
        gpa: u64,
        /// Size of the region.
        size: u64,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A region is empty or wraps the address space.
    #[error("invalid guest memory region at {gpa:#x} (+{size:#x})")]
    InvalidRegion {
        /// Guest physical address.
        gpa: u64,
        /// Size of the region.
        size: u64,
    },
    /// Two regions overlap in guest physical or frontend virtual space.
    #[error("guest memory regions overlap at {0:#x}")]
    Overlap(u64),
    /// More regions than memory slots.
    #[error("too many guest memory regions ({0})")]
    TooManyRegions(usize),
    /// `REM_MEM_REG` named a region that is not mapped.
    #[error("no guest memory region at {0:#x}")]
    NoSuchRegion(u64),
    /// The regions together are larger than the port may map
    /// (`PortConfig::max_guest_memory`).
    #[error(
        "guest memory of {total} bytes exceeds this port's limit of {cap} bytes \
         (max_guest_memory)"
    )]
    OverCap {
        /// Bytes the table would map.
        total: u128,
        /// The port's limit.
        cap: u64,
    },
}

/// One mapped region, as the translation table sees it.
#[derive(Debug, Clone)]
pub(crate) struct Region {
    /// Guest physical start.
    pub gpa: u64,
    /// Length in bytes (non-zero).
    pub len: u64,
    /// Host virtual address of `gpa` in this process.
    pub hva: usize,
    /// The frontend's virtual address of `gpa` (for `SET_VRING_ADDR`).
    pub vmm_va: u64,
    /// Offset of the region in its file, as the frontend sent it.
    pub mmap_offset: u64,
    /// Keeps the mapping (and its guard areas) alive.
    _map: Arc<GuardedMap>,
}

/// A frontend's memory table, mapped.
#[derive(Debug, Default)]
pub struct GuestMemory {
    /// Sorted by `gpa`, non-overlapping.
    regions: Vec<Region>,
}

/// What the frontend tells us about one region.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RegionDesc {
    pub gpa: u64,
    pub size: u64,
    pub vmm_va: u64,
    pub mmap_offset: u64,
}

impl GuestMemory {
    /// An empty table (no memory: every translation fails).
    pub fn empty() -> Self {
        Self::default()
    }

    /// Maps one region described by the frontend.
    pub(crate) fn map_region(desc: RegionDesc, file: File) -> Result<Region, MemoryError> {
        if desc.size == 0
            || desc.gpa.checked_add(desc.size).is_none()
            || desc.vmm_va.checked_add(desc.size).is_none()
        {
            return Err(MemoryError::InvalidRegion {
                gpa: desc.gpa,
                size: desc.size,
            });
        }
        // The fd must be a regular file holding the whole region (a
        // mapping past its end would fault at the first access there):
        // `GuardedMap::map` checks it with fstat before mapping.
        let size = usize::try_from(desc.size).map_err(|_| MemoryError::InvalidRegion {
            gpa: desc.gpa,
            size: desc.size,
        })?;
        let map =
            GuardedMap::map(Some(file.as_fd()), desc.mmap_offset, size).map_err(|source| {
                MemoryError::Map {
                    gpa: desc.gpa,
                    size: desc.size,
                    source,
                }
            })?;
        let hva = map.as_ptr() as usize;
        debug_assert_eq!(map.len(), size);
        Ok(Region {
            gpa: desc.gpa,
            len: desc.size,
            hva,
            vmm_va: desc.vmm_va,
            mmap_offset: desc.mmap_offset,
            _map: Arc::new(map),
        })
    }

    /// Builds a table from mapped regions, refusing overlaps.
    pub(crate) fn from_regions(mut regions: Vec<Region>) -> Result<Self, MemoryError> {
        if regions.len() > crate::device::MAX_MEM_SLOTS as usize {
            return Err(MemoryError::TooManyRegions(regions.len()));
        }
        regions.sort_by_key(|r| r.gpa);
        for w in regions.windows(2) {
            if w[0].gpa + w[0].len > w[1].gpa {
                return Err(MemoryError::Overlap(w[1].gpa));
            }
        }
        let mut by_va: Vec<(u64, u64)> = regions.iter().map(|r| (r.vmm_va, r.len)).collect();
        by_va.sort_unstable();
        for w in by_va.windows(2) {
            if w[0].0 + w[0].1 > w[1].0 {
                return Err(MemoryError::Overlap(w[1].0));
            }
        }
        Ok(Self { regions })
    }

    /// A new table with one more region.
    pub(crate) fn with_region(&self, region: Region) -> Result<Self, MemoryError> {
        let mut regions = self.regions.clone();
        regions.push(region);
        Self::from_regions(regions)
    }

    /// A new table without the region starting at `gpa` with `size` bytes.
    pub(crate) fn without_region(&self, gpa: u64, size: u64) -> Result<Self, MemoryError> {
        let mut regions = self.regions.clone();
        let before = regions.len();
        regions.retain(|r| !(r.gpa == gpa && r.len == size));
        if regions.len() == before {
            return Err(MemoryError::NoSuchRegion(gpa));
        }
        Ok(Self { regions })
    }

    /// Checks that regions of `sizes` bytes fit under `cap`, before any of
    /// them is mapped.
    pub(crate) fn check_cap(
        sizes: impl IntoIterator<Item = u64>,
        cap: u64,
    ) -> Result<(), MemoryError> {
        let total: u128 = sizes.into_iter().map(u128::from).sum();
        if total > u128::from(cap) {
            return Err(MemoryError::OverCap { total, cap });
        }
        Ok(())
    }

    /// Number of regions.
    pub fn num_regions(&self) -> usize {
        self.regions.len()
    }

    /// Translates a frontend virtual address (from `SET_VRING_ADDR`) into a
    /// guest physical address.
    pub fn vmm_va_to_gpa(&self, va: u64) -> Option<u64> {
        self.regions
            .iter()
            .find(|r| va >= r.vmm_va && va - r.vmm_va < r.len)
            .map(|r| r.gpa + (va - r.vmm_va))
    }

    /// The index of the region holding `gpa`, trying `hint` first.
    #[inline]
    fn find(&self, gpa: u64, hint: usize) -> Option<usize> {
        if let Some(r) = self.regions.get(hint) {
            if gpa >= r.gpa && gpa - r.gpa < r.len {
                return Some(hint);
            }
        }
        let i = self
            .regions
            .partition_point(|r| r.gpa <= gpa)
            .checked_sub(1)?;
        let r = &self.regions[i];
        (gpa - r.gpa < r.len).then_some(i)
    }

    /// Host address of `[gpa, gpa + len)` if the whole range lies in one
    /// region. `len` may be 0 (then `gpa` must still be inside a region).
    ///
    /// `hint` is the region index that satisfied the previous lookup; it is
    /// updated on success.
    ///
    /// The hinted region is tried inline (every buffer of a guest with one
    /// large region); any other lookup is a call.
    #[inline(always)]
    pub(crate) fn translate(&self, gpa: u64, len: u64, hint: &mut usize) -> Option<usize> {
        if let Some(r) = self.regions.get(*hint) {
            let off = gpa.wrapping_sub(r.gpa);
            if gpa >= r.gpa && off < r.len && len <= r.len - off {
                // Invariant: off < r.len <= isize::MAX (the mapping
                // exists), so the sum cannot overflow.
                return Some(r.hva + off as usize);
            }
        }
        self.translate_found(gpa, len, hint)
    }

    /// Appends `[gpa, gpa + len)` to `out` as one segment when the whole
    /// buffer lies in one region and `out` has room: the rings' inline path
    /// for a buffer of one direct descriptor. False, with nothing appended,
    /// otherwise (the caller then takes its general walk). `hint` as in
    /// [`Self::translate`].
    #[inline(always)]
    pub(crate) fn push_whole(
        &self,
        gpa: u64,
        len: u32,
        hint: &mut usize,
        out: &mut SegVec,
    ) -> bool {
        self.translate(gpa, u64::from(len), hint)
            .is_some_and(|hva| out.push(Seg { hva, len }))
    }

    /// [`Self::translate`] past its hint.
    #[inline(never)]
    fn translate_found(&self, gpa: u64, len: u64, hint: &mut usize) -> Option<usize> {
        let i = self.find(gpa, *hint)?;
        let r = &self.regions[i];
        let off = gpa - r.gpa;
        if len > r.len - off {
            return None;
        }
        *hint = i;
        // Invariant: off < r.len <= isize::MAX (the mapping exists), so the
        // sum cannot overflow.
        Some(r.hva + off as usize)
    }

    /// The guest physical address of host address `hva` (the inverse of
    /// [`Self::translate`], for dirty-page logging). `hint` as there.
    #[inline]
    pub(crate) fn hva_to_gpa(&self, hva: usize, hint: &mut usize) -> Option<u64> {
        let inside = |r: &Region| hva >= r.hva && ((hva - r.hva) as u64) < r.len;
        let i = match self.regions.get(*hint) {
            Some(r) if inside(r) => *hint,
            _ => self.regions.iter().position(inside)?,
        };
        *hint = i;
        let r = &self.regions[i];
        Some(r.gpa + (hva - r.hva) as u64)
    }

    /// Like [`Self::translate`], but a range may span adjacent regions: calls
    /// `f(hva, len)` for each piece, in order. Returns false (having called
    /// `f` for a prefix only) when part of the range is not mapped.
    ///
    /// A range inside one region (every buffer, on a guest with one large
    /// region) is one piece, handled inline by [`Self::translate`]; a range
    /// spanning regions takes the out-of-line walk.
    #[inline(always)]
    pub(crate) fn translate_pieces(
        &self,
        gpa: u64,
        len: u64,
        hint: &mut usize,
        mut f: impl FnMut(usize, u32) -> bool,
    ) -> bool {
        if let (true, Ok(len32)) = (len > 0, u32::try_from(len)) {
            if let Some(hva) = self.translate(gpa, len, hint) {
                return f(hva, len32);
            }
        }
        self.translate_pieces_walk(gpa, len, hint, f)
    }

    /// [`Self::translate_pieces`]'s general case: piece by piece, region by
    /// region.
    #[inline(never)]
    fn translate_pieces_walk(
        &self,
        mut gpa: u64,
        mut len: u64,
        hint: &mut usize,
        mut f: impl FnMut(usize, u32) -> bool,
    ) -> bool {
        while len > 0 {
            let Some(i) = self.find(gpa, *hint) else {
                return false;
            };
            let r = &self.regions[i];
            let off = gpa - r.gpa;
            let piece = len.min(r.len - off);
            *hint = i;
            // `piece <= len <= u32::MAX` (callers pass descriptor lengths).
            let Ok(piece32) = u32::try_from(piece) else {
                return false;
            };
            if !f(r.hva + off as usize, piece32) {
                return false;
            }
            gpa += piece;
            len -= piece;
        }
        true
    }

    /// The mapped regions, for diagnostics.
    pub(crate) fn regions(&self) -> impl Iterator<Item = (u64, u64, u64, u64)> + '_ {
        self.regions
            .iter()
            .map(|r| (r.gpa, r.len, r.vmm_va, r.mmap_offset))
    }

    /// Anonymous memory at the given (guest physical address, size)
    /// ranges, for tests that lay out rings by hand.
    #[cfg(any(test, feature = "test-utils"))]
    pub(crate) fn anonymous(ranges: &[(u64, usize)]) -> Self {
        let regions = ranges
            .iter()
            .map(|&(gpa, size)| {
                let map = GuardedMap::map(None, 0, size).expect("anonymous mapping");
                Region {
                    gpa,
                    len: size as u64,
                    hva: map.as_ptr() as usize,
                    vmm_va: gpa,
                    mmap_offset: 0,
                    _map: Arc::new(map),
                }
            })
            .collect();
        Self::from_regions(regions).expect("valid test layout")
    }
}
