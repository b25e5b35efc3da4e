// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Header and descriptor words: a 16-byte descriptor read as two
//! little-endian words ([`read_desc_words`]), and the virtio-net header
//! loaded, stored and read as its two wire words ([`load_hdr`],
//! [`store_hdr`], [`read_hdr`]) so that store forwarding serves the loads
//! that follow.

use super::seg::{copy_from_segs, Seg};
use crate::net_hdr::{VirtioNetHdr, MAX_HDR_LEN};

/// Reads a 16-byte descriptor at host address `p` as two little-endian
/// words (address, then the rest), volatile: two loads when `p` is 8-aligned
/// (ring tables always are), byte by byte otherwise (an indirect table at an
/// odd address).
///
/// # Safety
/// `p..p + 16` must be readable guest memory (inside a mapped region whose
/// snapshot outlives the call).
#[inline(always)]
pub(super) unsafe fn read_desc_words(p: usize) -> (u64, u64) {
    let (lo, hi) = if p.is_multiple_of(8) {
        // SAFETY: readable per the contract; 8-aligned.
        unsafe {
            (
                std::ptr::read_volatile(p as *const u64),
                std::ptr::read_volatile((p + 8) as *const u64),
            )
        }
    } else {
        let mut b = [0u8; 16];
        for (k, byte) in b.iter_mut().enumerate() {
            // SAFETY: readable per the contract; no alignment needed.
            *byte = unsafe { std::ptr::read_volatile((p + k) as *const u8) };
        }
        (
            u64::from_ne_bytes(b[..8].try_into().expect("8 bytes")),
            u64::from_ne_bytes(b[8..].try_into().expect("8 bytes")),
        )
    };
    (u64::from_le(lo), u64::from_le(hi))
}

/// Stores `h` into `dst` as one 8-byte and one 4-byte store. A header built
/// field by field is stored field by field, and a copy of it read back as
/// words soon after cannot be forwarded from those stores: the load then
/// waits until every older store has left the store buffer, including
/// stores into guest lines still on their way from the driver's core.
/// Words stored as words forward to any load within them.
#[inline(always)]
pub(crate) fn store_hdr(dst: &mut VirtioNetHdr, h: VirtioNetHdr) {
    #[cfg(target_endian = "little")]
    {
        let (lo, hi) = h.to_words();
        let p = (dst as *mut VirtioNetHdr).cast::<u8>();
        // SAFETY: `VirtioNetHdr` is `repr(C)`: 12 bytes of integer fields in
        // wire order, so on a little-endian machine its bytes are those of
        // `to_words`'s two words stored natively (and any bytes are a valid
        // value); `dst` is a unique reference to those 12 writable bytes;
        // the writes tolerate any alignment.
        unsafe {
            std::ptr::write_unaligned(p.cast::<u64>(), lo);
            std::ptr::write_unaligned(p.add(8).cast::<u32>(), hi);
        }
    }
    #[cfg(not(target_endian = "little"))]
    {
        *dst = h;
    }
}

/// Loads `h` as its two wire words (bytes 0-7, 8-11) with one 8-byte and
/// one 4-byte load: the mirror of [`store_hdr`]. A header copied whole is
/// stored as those two words, and [`VirtioNetHdr::to_words`] on it compiles
/// to a load across both (bytes 2-9), which store forwarding cannot serve;
/// these two loads it can.
#[inline(always)]
pub(crate) fn load_hdr(h: &VirtioNetHdr) -> (u64, u32) {
    #[cfg(target_endian = "little")]
    {
        let p = (h as *const VirtioNetHdr).cast::<u8>();
        // SAFETY: `VirtioNetHdr` is `repr(C)`: 12 bytes of integer fields in
        // wire order, so on a little-endian machine its bytes are those of
        // `to_words`'s two words stored natively; `h` is a reference to
        // those 12 readable bytes; the reads tolerate any alignment.
        unsafe {
            (
                std::ptr::read_unaligned(p.cast::<u64>()),
                std::ptr::read_unaligned(p.add(8).cast::<u32>()),
            )
        }
    }
    #[cfg(not(target_endian = "little"))]
    {
        h.to_words()
    }
}

/// Reads a virtio-net header (`len` = 10 or 12 bytes) from the start of
/// `segs`: two loads when the first buffer holds it whole (the common
/// layout), a byte copy otherwise. Missing bytes read as zero.
#[inline]
pub(crate) fn read_hdr(segs: &[Seg], len: usize) -> VirtioNetHdr {
    if let Some(s) = segs.first() {
        if s.len() as usize >= 12 {
            // SAFETY: the first buffer is checked guest memory (module
            // invariant) of at least 12 bytes.
            let (lo, hi) = unsafe {
                (
                    std::ptr::read_unaligned(s.hva() as *const u64),
                    std::ptr::read_unaligned((s.hva() + 8) as *const u32),
                )
            };
            return VirtioNetHdr::from_words(u64::from_le(lo), u32::from_le(hi), len);
        }
    }
    let mut b = [0u8; MAX_HDR_LEN];
    copy_from_segs(segs, 0, &mut b[..len.min(MAX_HDR_LEN)]);
    VirtioNetHdr::from_bytes(&b, len)
}
