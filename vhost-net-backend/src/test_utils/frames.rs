// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Received frames, virtio-net header bytes and vring addresses.

use super::*;

/// A frame taken from a receive queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RxFrame {
    /// The virtio-net header as the device wrote it ([`TestDriver::hdr_len`] bytes, fewer only
    /// if the device reported a shorter length, which is recorded as a violation).
    pub hdr: Vec<u8>,
    /// The frame after the header, across all its buffers.
    pub data: Vec<u8>,
    /// How many buffers (used elements) the frame took: the header's `num_buffers` with
    /// `MRG_RXBUF`, else 1.
    pub num_buffers: u16,
    /// The used elements that made up the frame, as `(id, len)`.
    pub used: Vec<(u16, u32)>,
}

impl RxFrame {
    /// The header, decoded.
    pub fn net_hdr(&self) -> VirtioNetHdr {
        decode_hdr(&self.hdr)
    }
}

/// Encodes `hdr` in `len` bytes (10 or 12; other lengths truncate or zero-pad).
pub fn encode_hdr(hdr: &VirtioNetHdr, len: usize) -> Vec<u8> {
    let mut b = hdr.to_bytes().to_vec();
    b.resize(len, 0);
    b
}

/// Decodes a header of any length; missing bytes read as zero.
pub fn decode_hdr(b: &[u8]) -> VirtioNetHdr {
    let mut full = [0u8; MAX_HDR_LEN];
    let n = b.len().min(MAX_HDR_LEN);
    full[..n].copy_from_slice(&b[..n]);
    VirtioNetHdr::from_bytes(&full, MAX_HDR_LEN)
}

/// Guest-physical addresses of one vring's parts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VringAddrs {
    /// Descriptor table.
    pub desc: u64,
    /// Available ring (`flags`, `idx`, `ring[size]`, `used_event`).
    pub avail: u64,
    /// Used ring (`flags`, `idx`, `ring[size]`, `avail_event`).
    pub used: u64,
    /// Ring size.
    pub size: u16,
}

impl VringAddrs {
    pub(super) fn avail_idx(&self) -> GuestAddress {
        GuestAddress(self.avail + 2)
    }
    pub(super) fn avail_entry(&self, idx: u16) -> GuestAddress {
        GuestAddress(self.avail + 4 + 2 * u64::from(idx % self.size))
    }
    pub(super) fn used_event(&self) -> GuestAddress {
        GuestAddress(self.avail + 4 + 2 * u64::from(self.size))
    }
    pub(super) fn used_idx(&self) -> GuestAddress {
        GuestAddress(self.used + 2)
    }
    pub(super) fn used_entry(&self, idx: u16) -> GuestAddress {
        GuestAddress(self.used + 4 + 8 * u64::from(idx % self.size))
    }
    pub(super) fn avail_event(&self) -> GuestAddress {
        GuestAddress(self.used + 4 + 8 * u64::from(self.size))
    }
    pub(super) fn desc(&self, id: u16) -> GuestAddress {
        GuestAddress(self.desc + DESC_SIZE * u64::from(id))
    }
}
