// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! IPv4 (RFC 791): the header view and its flag and fragment fields.

use std::net::Ipv4Addr;

use super::checksum::checksum;
use super::{check_hlen, WireError};

/// Length of an IPv4 header without options.
pub const IPV4_MIN_HLEN: usize = 20;
/// Flags/fragment field: don't fragment.
pub const IPV4_DF: u16 = 0x4000;
/// Flags/fragment field: more fragments.
pub const IPV4_MF: u16 = 0x2000;
/// Flags/fragment field: the fragment offset, in units of 8 bytes.
pub const IPV4_FRAG_OFFSET_MASK: u16 = 0x1fff;

pub(super) mod field {
    pub const PROTOCOL: usize = 9;
}

view! {
    /// A view of an IPv4 header and what follows it.
    Ipv4Packet;
    /// Total length field (not checked against the buffer).
    total_len / set_total_len: u16 = 2;
    /// Identification.
    ident / set_ident: u16 = 4;
    /// The whole flags/fragment-offset field.
    flags_frag / set_flags_frag: u16 = 6;
    /// Time to live.
    ttl: u8 = 8;
    /// Transport protocol (`IPPROTO_*`, [`super::ip`]).
    protocol: u8 = field::PROTOCOL;
    /// Header checksum field.
    checksum / set_checksum: u16 = 10;
    /// Source address.
    src_addr: Ipv4Addr = 12;
    /// Destination address.
    dst_addr: Ipv4Addr = 16;
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Checks, in this order: the fixed header fits, the version is 4, the
    /// header length is at least [`IPV4_MIN_HLEN`], the header (with its
    /// options) fits. The total length is not checked.
    ///
    /// # Errors
    /// [`WireError::Truncated`] or [`WireError::Malformed`], for the first
    /// check that fails.
    #[inline]
    pub fn check_len(&self) -> Result<(), WireError> {
        let len = self.buffer.as_ref().len();
        check_hlen(
            len,
            IPV4_MIN_HLEN,
            || self.version() == 4,
            || self.header_len(),
        )
    }

    /// Version (4 in a checked view).
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }

    /// Header length in bytes, options included.
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[0] & 0x0f) * 4
    }

    /// Don't fragment.
    #[inline]
    pub fn dont_frag(&self) -> bool {
        self.flags_frag() & IPV4_DF != 0
    }

    /// More fragments.
    #[inline]
    pub fn more_frags(&self) -> bool {
        self.flags_frag() & IPV4_MF != 0
    }

    /// Fragment offset in units of 8 bytes.
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        self.flags_frag() & IPV4_FRAG_OFFSET_MASK
    }

    /// Whether this is a fragment: more fragments follow or the offset is
    /// not 0.
    #[inline]
    pub fn is_fragment(&self) -> bool {
        self.flags_frag() & (IPV4_MF | IPV4_FRAG_OFFSET_MASK) != 0
    }

    /// The source and destination addresses, as bytes (for a pseudo-header
    /// sum).
    #[inline]
    pub fn addr_bytes(&self) -> (&[u8], &[u8]) {
        let b = self.buffer.as_ref();
        (&b[12..16], &b[16..20])
    }

    /// Whether the header checksum is right.
    pub fn verify_checksum(&self) -> bool {
        checksum(&self.buffer.as_ref()[..self.header_len()]) == 0
    }

    /// What follows the header (up to the end of the buffer, not of the
    /// total length).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Computes and stores the header checksum (over
    /// [`Ipv4Packet::header_len`] bytes).
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = checksum(&self.buffer.as_ref()[..self.header_len()]);
        self.set_checksum(c);
    }

    /// What follows the header, writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let ihl = self.header_len();
        &mut self.buffer.as_mut()[ihl..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The classic captured header (checksum 0xb861), with 4 bytes of
    /// options (IHL 6) and the checksum recomputed.
    fn header() -> Vec<u8> {
        let mut h = vec![
            0x46, 0x00, 0x00, 0x77, 0xab, 0xcd, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7, 1, 1, 1, 0,
        ];
        Ipv4Packet::new_unchecked(&mut h[..]).fill_checksum();
        h
    }

    #[test]
    fn accessors() {
        let h = header();
        let p = Ipv4Packet::new_checked(&h[..]).unwrap();
        assert_eq!((p.version(), p.header_len(), p.total_len()), (4, 24, 0x77));
        assert_eq!((p.ident(), p.ttl(), p.protocol()), (0xabcd, 64, 17));
        assert!(p.dont_frag() && !p.more_frags() && !p.is_fragment());
        assert_eq!(p.frag_offset(), 0);
        assert_eq!(p.src_addr(), Ipv4Addr::new(192, 168, 0, 1));
        assert_eq!(p.dst_addr(), Ipv4Addr::new(192, 168, 0, 199));
        let (src, dst) = p.addr_bytes();
        assert_eq!((src, dst), (&[192, 168, 0, 1][..], &[192, 168, 0, 199][..]));
        assert!(p.verify_checksum());
        assert!(p.payload().is_empty());
    }

    #[test]
    fn truncated_and_malformed() {
        let h = header();
        super::super::assert_prefixes_rejected(&h, |b| Ipv4Packet::new_checked(b).is_ok());
        let with = |i: usize, v: u8| {
            let mut b = h.clone();
            b[i] = v;
            Ipv4Packet::new_checked(b).map(|_| ())
        };
        assert_eq!(with(0, 0x66), Err(WireError::Malformed), "version 6");
        assert_eq!(with(0, 0x44), Err(WireError::Malformed), "IHL 4");
        assert_eq!(with(0, 0x47), Err(WireError::Truncated), "IHL 7");
        // The version is checked before the options' length.
        assert_eq!(with(0, 0x57), Err(WireError::Malformed));
        // The total length is not checked.
        assert_eq!(with(2, 0xff), Ok(()));
        assert_eq!(with(3, 0), Ok(()));
    }

    #[test]
    fn setters_round_trip() {
        let mut h = header();
        let mut p = Ipv4Packet::new_checked(&mut h[..]).unwrap();
        p.set_total_len(1500);
        p.set_ident(7);
        p.set_flags_frag(IPV4_MF | 185);
        assert!(!p.verify_checksum());
        p.fill_checksum();
        assert!(p.verify_checksum());
        assert_eq!((p.total_len(), p.ident()), (1500, 7));
        assert!(p.more_frags() && !p.dont_frag() && p.is_fragment());
        assert_eq!((p.frag_offset(), p.flags_frag()), (185, 0x20b9));
        p.set_flags_frag(0x8000);
        assert!(!p.is_fragment(), "the reserved bit is not a fragment");
        p.set_checksum(0x1234);
        assert_eq!(p.checksum(), 0x1234);
        p.payload_mut();
        assert_eq!(h[10..12], [0x12, 0x34]);
    }
}
