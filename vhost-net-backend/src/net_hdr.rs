// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The `virtio_net_hdr` that precedes every frame on a virtio-net queue
//! (virtio 1.x, 5.1.6), as a private copy: values read out of guest memory
//! once, never a view into it.

/// `flags`: the checksum starting at `csum_start` must be completed.
pub const F_NEEDS_CSUM: u8 = 1;
/// `flags`: the checksum has been validated (device to driver only).
pub const F_DATA_VALID: u8 = 2;
/// `flags`: RSC information present (not used by this device).
pub const F_RSC_INFO: u8 = 4;

/// `gso_type`: no segmentation.
pub const GSO_NONE: u8 = 0;
/// `gso_type`: TCP over IPv4.
pub const GSO_TCPV4: u8 = 1;
/// `gso_type`: UDP fragmentation offload.
pub const GSO_UDP: u8 = 3;
/// `gso_type`: TCP over IPv6.
pub const GSO_TCPV6: u8 = 4;
/// `gso_type`: UDP segmentation offload (USO).
pub const GSO_UDP_L4: u8 = 5;
/// `gso_type` flag: ECN (CWR) set in the TCP header.
pub const GSO_ECN: u8 = 0x80;

/// Size of the largest header this device uses (`virtio_net_hdr_mrg_rxbuf`).
pub const MAX_HDR_LEN: usize = 12;

/// The per-frame offload metadata of virtio-net.
///
/// `num_buffers` is owned by the device on RX (it counts the buffers a
/// mergeable frame spans) and is ignored on TX.
///
/// Laid out in memory as on the wire (`repr(C)`, fields in wire order), so
/// that the ring engine can store a header as its two words (the TX path
/// does: a copy read back as words right after being stored field by
/// field stalls store forwarding on the hot path).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C)]
pub struct VirtioNetHdr {
    /// `VIRTIO_NET_HDR_F_*`.
    pub flags: u8,
    /// `VIRTIO_NET_HDR_GSO_*`.
    pub gso_type: u8,
    /// Length of the headers to replicate in every segment.
    pub hdr_len: u16,
    /// Segment payload size.
    pub gso_size: u16,
    /// Where checksumming starts.
    pub csum_start: u16,
    /// Where, from `csum_start`, the checksum is stored.
    pub csum_offset: u16,
    /// Number of merged RX buffers (RX only).
    pub num_buffers: u16,
}

impl VirtioNetHdr {
    /// Parses a header from `len` (10 or 12) little-endian bytes.
    ///
    /// Bytes beyond `len` are ignored; `num_buffers` is 0 for a 10-byte
    /// header.
    pub fn from_bytes(b: &[u8; MAX_HDR_LEN], len: usize) -> Self {
        let u16_at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        Self {
            flags: b[0],
            gso_type: b[1],
            hdr_len: u16_at(2),
            gso_size: u16_at(4),
            csum_start: u16_at(6),
            csum_offset: u16_at(8),
            num_buffers: if len >= 12 { u16_at(10) } else { 0 },
        }
    }

    /// Decodes a header from its first 8 and last 4 bytes as little-endian
    /// words (the wire layout), without a byte-array round trip.
    #[inline]
    pub const fn from_words(lo: u64, hi: u32, len: usize) -> Self {
        Self {
            flags: lo as u8,
            gso_type: (lo >> 8) as u8,
            hdr_len: (lo >> 16) as u16,
            gso_size: (lo >> 32) as u16,
            csum_start: (lo >> 48) as u16,
            csum_offset: hi as u16,
            num_buffers: if len >= 12 { (hi >> 16) as u16 } else { 0 },
        }
    }

    /// The wire layout as two little-endian words (bytes 0-7, 8-11).
    #[inline]
    pub const fn to_words(&self) -> (u64, u32) {
        (
            self.flags as u64
                | (self.gso_type as u64) << 8
                | (self.hdr_len as u64) << 16
                | (self.gso_size as u64) << 32
                | (self.csum_start as u64) << 48,
            self.csum_offset as u32 | (self.num_buffers as u32) << 16,
        )
    }

    /// Serialises the header in little-endian order (all 12 bytes; callers
    /// write the first `hdr_len` of them).
    pub fn to_bytes(&self) -> [u8; MAX_HDR_LEN] {
        self.to_bytes_in(u16::to_le_bytes)
    }

    /// Serialises the header (all 12 bytes) with its 16-bit fields in the
    /// byte order `order` gives: `u16::to_le_bytes` for virtio 1.x,
    /// `u16::to_ne_bytes` for the legacy native order of packet sockets.
    #[inline]
    pub(crate) fn to_bytes_in(self, order: fn(u16) -> [u8; 2]) -> [u8; MAX_HDR_LEN] {
        let mut b = [0u8; MAX_HDR_LEN];
        b[0] = self.flags;
        b[1] = self.gso_type;
        b[2..4].copy_from_slice(&order(self.hdr_len));
        b[4..6].copy_from_slice(&order(self.gso_size));
        b[6..8].copy_from_slice(&order(self.csum_start));
        b[8..10].copy_from_slice(&order(self.csum_offset));
        b[10..12].copy_from_slice(&order(self.num_buffers));
        b
    }

    /// The header as a driver may send it on TX: only `NEEDS_CSUM` kept of
    /// the flags (drivers must not set `DATA_VALID` or `RSC_INFO` on TX, and
    /// a guest cannot make another guest skip checksum validation) and
    /// `num_buffers` cleared (it means nothing on TX).
    #[must_use]
    #[inline]
    pub const fn sanitized_tx(&self) -> Self {
        let (lo, hi) = self.to_words();
        Self::from_words(
            lo & !0xff | (lo & F_NEEDS_CSUM as u64),
            hi & 0xffff,
            MAX_HDR_LEN,
        )
    }

    /// Whether the frame is a segmentation super-frame.
    pub const fn is_gso(&self) -> bool {
        self.gso_type & !GSO_ECN != GSO_NONE
    }

    /// Whether the frame carries a partial checksum.
    pub const fn needs_csum(&self) -> bool {
        self.flags & F_NEEDS_CSUM != 0
    }

    /// The header of the same frame with `delta` bytes inserted (positive)
    /// or removed (negative) before its L3 header, as when an 802.1Q tag is
    /// pushed or popped: `csum_start` (when a checksum is pending) and the
    /// `hdr_len` hint move with the headers.
    #[must_use]
    pub fn shifted(&self, delta: i16) -> Self {
        let mut h = *self;
        if h.needs_csum() {
            h.csum_start = h.csum_start.saturating_add_signed(delta);
        }
        if h.hdr_len != 0 {
            h.hdr_len = h.hdr_len.saturating_add_signed(delta);
        }
        h
    }
}

/// A TCPv4 TSO header with ECN and a checksum request (Ethernet + IPv4 +
/// TCP with timestamps, MSS 1448): a sample for the tests that encode one.
#[cfg(test)]
pub(crate) const TSO_V4_SAMPLE: VirtioNetHdr = VirtioNetHdr {
    flags: F_NEEDS_CSUM,
    gso_type: GSO_TCPV4 | GSO_ECN,
    hdr_len: 54,
    gso_size: 1448,
    csum_start: 34,
    csum_offset: 16,
    num_buffers: 0,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitized_tx_keeps_only_needs_csum_and_clears_num_buffers() {
        for flags in 0..=u8::MAX {
            let h = VirtioNetHdr {
                flags,
                num_buffers: 0xbeef,
                ..TSO_V4_SAMPLE
            };
            let s = h.sanitized_tx();
            assert_eq!(
                s,
                VirtioNetHdr {
                    flags: flags & F_NEEDS_CSUM,
                    num_buffers: 0,
                    ..h
                }
            );
        }
    }

    #[test]
    fn round_trip() {
        let h = VirtioNetHdr {
            num_buffers: 3,
            ..TSO_V4_SAMPLE
        };
        let b = h.to_bytes();
        assert_eq!(VirtioNetHdr::from_bytes(&b, 12), h);
        let short = VirtioNetHdr::from_bytes(&b, 10);
        assert_eq!(short.num_buffers, 0);
        assert_eq!(short.gso_size, 1448);
        assert!(h.is_gso() && h.needs_csum());
        assert!(!VirtioNetHdr::default().is_gso());
        assert_eq!(&b[..4], &[1, 0x81, 54, 0]);
        let (lo, hi) = h.to_words();
        assert_eq!(lo.to_le_bytes(), b[..8]);
        assert_eq!(hi.to_le_bytes(), b[8..12]);
        assert_eq!(VirtioNetHdr::from_words(lo, hi, 12), h);
        assert_eq!(VirtioNetHdr::from_words(lo, hi, 10), short);
    }
}
