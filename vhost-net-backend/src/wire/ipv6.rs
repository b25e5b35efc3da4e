// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! IPv6 (RFC 8200): the fixed header, the extension headers that can come
//! before the transport (Hop-by-Hop, Routing, Fragment, Destination
//! Options) and a walk over them.
//!
//! Not handled: Authentication and ESP headers (the walk stops at them, as
//! at any upper-layer protocol), jumbograms.

use std::net::Ipv6Addr;

use super::ip::{IPPROTO_DSTOPTS, IPPROTO_FRAGMENT, IPPROTO_HOPOPTS, IPPROTO_ROUTING};
use super::{check_hlen, WireError};

/// Length of the fixed IPv6 header.
pub const IPV6_HLEN: usize = 40;
/// Length of a Fragment header.
pub const IPV6_FRAG_HLEN: usize = 8;
/// Extension headers a parse steps over before it gives up
/// ([`super::parse_headers`]).
pub const IPV6_MAX_EXT_HEADERS: usize = 8;

/// Whether `next_header` names an extension header [`ExtHeaderWalk`] steps
/// over: Hop-by-Hop, Routing, Fragment, Destination Options.
#[inline]
pub const fn is_ext_header(next_header: u8) -> bool {
    matches!(
        next_header,
        IPPROTO_HOPOPTS | IPPROTO_ROUTING | IPPROTO_FRAGMENT | IPPROTO_DSTOPTS
    )
}

/// Offset of the next-header field in the fixed header.
const NEXT_HEADER: usize = 6;

// ===== impl Ipv6Packet =====

view! {
    /// A view of an IPv6 fixed header and what follows it.
    Ipv6Packet;
    /// Payload length field (not checked against the buffer).
    payload_len / set_payload_len: u16 = 4;
    /// Next header: the first extension header or the transport.
    next_header / set_next_header: u8 = NEXT_HEADER;
    /// Hop limit.
    hop_limit: u8 = 7;
    /// Source address.
    src_addr: Ipv6Addr = 8;
    /// Destination address.
    dst_addr: Ipv6Addr = 24;
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Version (6 in a checked view).
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }

    /// Checks that the fixed header fits, then that the version is 6. The
    /// payload length is not checked.
    ///
    /// # Errors
    /// [`WireError::Truncated`], then [`WireError::Malformed`].
    #[inline]
    pub fn check_len(&self) -> Result<(), WireError> {
        let len = self.buffer.as_ref().len();
        check_hlen(len, IPV6_HLEN, || self.version() == 6, || IPV6_HLEN)
    }

    /// Traffic class.
    #[inline]
    pub fn traffic_class(&self) -> u8 {
        (<u16 as super::Field>::get(self.buffer.as_ref(), 0) >> 4) as u8
    }

    /// The source and destination addresses, as bytes (for a pseudo-header
    /// sum).
    #[inline]
    pub fn addr_bytes(&self) -> (&[u8], &[u8]) {
        let b = self.buffer.as_ref();
        (&b[8..24], &b[24..40])
    }

    /// What follows the fixed header.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[IPV6_HLEN..]
    }
}

// ===== impl Ipv6ExtHeader =====

view! {
    /// A view of a Hop-by-Hop, Routing or Destination Options header: next
    /// header, length in 8-byte units beyond the first 8, then the body.
    Ipv6ExtHeader;
    /// Next header.
    next_header: u8 = 0;
}

impl<T: AsRef<[u8]>> Ipv6ExtHeader<T> {
    /// Checks that the two fixed bytes, then the whole header, fit.
    ///
    /// # Errors
    /// [`WireError::Truncated`].
    #[inline]
    pub fn check_len(&self) -> Result<(), WireError> {
        // Invariant: header_len() >= 8, never below the minimum of 2.
        let len = self.buffer.as_ref().len();
        check_hlen(len, 2, || true, || self.header_len())
    }

    /// Length of the whole header in bytes: (`Hdr Ext Len` + 1) * 8.
    #[inline]
    pub fn header_len(&self) -> usize {
        (usize::from(self.buffer.as_ref()[1]) + 1) * 8
    }
}

// ===== impl Ipv6FragHeader =====

view! {
    /// A view of a Fragment header.
    Ipv6FragHeader, len IPV6_FRAG_HLEN;
    /// Next header.
    next_header / set_next_header: u8 = 0;
    /// The reserved byte (0 when sent).
    reserved / set_reserved: u8 = 1;
    /// The whole offset field: offset in 8-byte units << 3, two
    /// reserved bits, the M flag.
    offset_field / set_offset_field: u16 = 2;
    /// Identification.
    ident / set_ident: u32 = 4;
}

impl<T: AsRef<[u8]>> Ipv6FragHeader<T> {
    /// Fragment offset in units of 8 bytes.
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        self.offset_field() >> 3
    }

    /// More fragments.
    #[inline]
    pub fn more_frags(&self) -> bool {
        self.offset_field() & 1 != 0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6FragHeader<T> {
    /// Sets the whole offset field: `offset` in units of 8 bytes (at most
    /// 8191), the M flag, and the reserved bits cleared.
    #[inline]
    pub fn set_offset_more(&mut self, offset: u16, more: bool) {
        self.set_offset_field((offset << 3) | u16::from(more));
    }
}

// ===== impl ExtHeaderWalk =====

/// A walk over the extension headers of an IPv6 packet, one header per
/// [`ExtHeaderWalk::step`]: where the chain is and what comes next.
///
/// Offsets are from the start of the IPv6 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtHeaderWalk<'a> {
    packet: &'a [u8],
    next_header: u8,
    next_header_offset: usize,
    offset: usize,
}

impl<'a> ExtHeaderWalk<'a> {
    /// A walk that starts after the fixed header of a checked `packet`.
    #[inline]
    pub fn new(packet: Ipv6Packet<&'a [u8]>) -> Self {
        Self {
            next_header: packet.next_header(),
            next_header_offset: NEXT_HEADER,
            offset: IPV6_HLEN,
            packet: packet.into_inner(),
        }
    }

    /// The protocol of the header at [`ExtHeaderWalk::offset`].
    #[inline]
    pub fn next_header(&self) -> u8 {
        self.next_header
    }

    /// Offset of the byte that holds [`ExtHeaderWalk::next_header`] (in the
    /// fixed header or in the last extension header stepped over).
    #[inline]
    pub fn next_header_offset(&self) -> usize {
        self.next_header_offset
    }

    /// Offset of the header named by [`ExtHeaderWalk::next_header`].
    #[inline]
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Steps over the header at [`ExtHeaderWalk::offset`] if it is an
    /// extension header ([`is_ext_header`]): `Ok(true)`. `Ok(false)` (and
    /// no move) otherwise.
    ///
    /// # Errors
    /// [`WireError::Truncated`]: the extension header does not fit; the
    /// walk has not moved.
    pub fn step(&mut self) -> Result<bool, WireError> {
        let rest = self.packet.get(self.offset..).ok_or(WireError::Truncated)?;
        let (next, len) = match self.next_header {
            IPPROTO_HOPOPTS | IPPROTO_ROUTING | IPPROTO_DSTOPTS => {
                let h = Ipv6ExtHeader::new_checked(rest)?;
                (h.next_header(), h.header_len())
            }
            IPPROTO_FRAGMENT => {
                let h = Ipv6FragHeader::new_checked(rest)?;
                (h.next_header(), IPV6_FRAG_HLEN)
            }
            _ => return Ok(false),
        };
        self.next_header = next;
        self.next_header_offset = self.offset;
        self.offset += len;
        Ok(true)
    }

    /// Steps over at most `max` extension headers, to the upper-layer
    /// header.
    ///
    /// # Errors
    /// [`WireError::Truncated`] as [`ExtHeaderWalk::step`];
    /// [`WireError::Malformed`] when an extension header still follows
    /// after `max` (a runaway chain).
    pub fn skip(&mut self, max: usize) -> Result<(), WireError> {
        for _ in 0..max {
            if !self.step()? {
                return Ok(());
            }
        }
        if is_ext_header(self.next_header) {
            return Err(WireError::Malformed);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::ip::{IPPROTO_NONE, IPPROTO_TCP, IPPROTO_UDP};
    use super::*;

    /// A fixed header (next header `nh`, payload length right) followed by
    /// `rest`.
    fn packet(nh: u8, rest: &[u8]) -> Vec<u8> {
        let mut p = vec![0x6a, 0xbc, 0xde, 0xf1];
        p.extend_from_slice(&(rest.len() as u16).to_be_bytes());
        p.extend_from_slice(&[nh, 64]);
        p.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        p.extend_from_slice(&[0; 11]);
        p.push(1);
        p.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        p.extend_from_slice(&[0; 11]);
        p.push(2);
        p.extend_from_slice(rest);
        p
    }

    fn walk(p: &[u8]) -> ExtHeaderWalk<'_> {
        ExtHeaderWalk::new(Ipv6Packet::new_checked(p).unwrap())
    }

    #[test]
    fn fixed_header() {
        let p = packet(IPPROTO_TCP, &[9, 9]);
        let h = Ipv6Packet::new_checked(&p[..]).unwrap();
        assert_eq!((h.version(), h.traffic_class()), (6, 0xab));
        assert_eq!(
            (h.payload_len(), h.next_header(), h.hop_limit()),
            (2, 6, 64)
        );
        assert_eq!(h.src_addr(), "2001:db8::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(h.dst_addr(), "2001:db8::2".parse::<Ipv6Addr>().unwrap());
        assert_eq!((h.addr_bytes().0[15], h.addr_bytes().1[15]), (1, 2));
        assert_eq!(h.payload(), [9, 9]);
        super::super::assert_prefixes_rejected(&p[..IPV6_HLEN], |b| {
            Ipv6Packet::new_checked(b).is_ok()
        });
        let mut v4 = p.clone();
        v4[0] = 0x45;
        assert_eq!(Ipv6Packet::new_checked(&v4[..]), Err(WireError::Malformed));
        // Payload length is not checked.
        let mut big = p.clone();
        big[4] = 0xff;
        assert!(Ipv6Packet::new_checked(&big[..]).is_ok());
    }

    #[test]
    fn setters_round_trip() {
        let mut p = packet(IPPROTO_TCP, &[]);
        let mut h = Ipv6Packet::new_checked(&mut p[..]).unwrap();
        h.set_payload_len(1234);
        h.set_next_header(IPPROTO_FRAGMENT);
        assert_eq!((h.payload_len(), h.next_header()), (1234, IPPROTO_FRAGMENT));

        let mut f = [0xffu8; IPV6_FRAG_HLEN];
        let mut h = Ipv6FragHeader::new_checked(&mut f[..]).unwrap();
        h.set_next_header(IPPROTO_UDP);
        h.set_reserved(0);
        h.set_offset_more(185, true);
        h.set_ident(0x5648_5501);
        assert_eq!(
            (h.next_header(), h.frag_offset(), h.more_frags(), h.ident()),
            (IPPROTO_UDP, 185, true, 0x5648_5501)
        );
        h.set_offset_more(8191, false);
        assert_eq!((h.frag_offset(), h.more_frags()), (8191, false));
        assert_eq!(f, [17, 0, 0xff, 0xf8, 0x56, 0x48, 0x55, 0x01]);
        super::super::assert_prefixes_rejected(&f, |b| Ipv6FragHeader::new_checked(b).is_ok());
    }

    #[test]
    fn ext_header_view() {
        // Destination options, length 1: 16 bytes.
        let mut e = vec![IPPROTO_UDP, 1];
        e.resize(16, 0);
        let h = Ipv6ExtHeader::new_checked(&e[..]).unwrap();
        assert_eq!((h.next_header(), h.header_len()), (IPPROTO_UDP, 16));
        super::super::assert_prefixes_rejected(&e, |b| Ipv6ExtHeader::new_checked(b).is_ok());
    }

    #[test]
    fn walk_each_kind() {
        for (kind, ext) in [
            (IPPROTO_HOPOPTS, vec![IPPROTO_TCP, 0, 1, 4, 0, 0, 0, 0]),
            (IPPROTO_ROUTING, {
                let mut r = vec![IPPROTO_TCP, 2, 0, 0];
                r.resize(24, 0);
                r
            }),
            (IPPROTO_FRAGMENT, vec![IPPROTO_TCP, 0, 0, 0, 1, 2, 3, 4]),
            (IPPROTO_DSTOPTS, vec![IPPROTO_TCP, 0, 1, 4, 0, 0, 0, 0]),
        ] {
            let p = packet(kind, &ext);
            let mut w = walk(&p);
            assert_eq!((w.next_header(), w.offset()), (kind, 40));
            assert_eq!(w.step(), Ok(true));
            assert_eq!(w.next_header(), IPPROTO_TCP, "kind {kind}");
            assert_eq!(w.next_header_offset(), 40);
            assert_eq!(w.offset(), 40 + ext.len());
            assert_eq!(w.step(), Ok(false));
            assert_eq!(w.offset(), 40 + ext.len());
            // Every cut inside the extension header is Truncated, and the
            // walk does not move.
            for cut in 40..p.len() {
                let mut w = walk(&p[..cut]);
                assert_eq!(w.step(), Err(WireError::Truncated), "kind {kind} cut {cut}");
                assert_eq!((w.next_header(), w.offset()), (kind, 40));
            }
        }
    }

    #[test]
    fn walk_chain() {
        // Hop-by-hop (8) -> routing (16) -> fragment (8) -> dstopts (8) -> UDP.
        let mut ext = vec![IPPROTO_ROUTING, 0, 1, 4, 0, 0, 0, 0];
        ext.extend_from_slice(&[IPPROTO_FRAGMENT, 1, 0, 0]);
        ext.resize(24, 0);
        ext.extend_from_slice(&[IPPROTO_DSTOPTS, 0, 0, 0, 0, 0, 0, 1]);
        ext.extend_from_slice(&[IPPROTO_UDP, 0, 1, 4, 0, 0, 0, 0]);
        let p = packet(IPPROTO_HOPOPTS, &ext);
        let mut w = walk(&p);
        let mut seen = Vec::new();
        while w.step().unwrap() {
            seen.push((w.next_header(), w.next_header_offset(), w.offset()));
        }
        assert_eq!(
            seen,
            [
                (IPPROTO_ROUTING, 40, 48),
                (IPPROTO_FRAGMENT, 48, 64),
                (IPPROTO_DSTOPTS, 64, 72),
                (IPPROTO_UDP, 72, 80),
            ]
        );
        let mut w = walk(&p);
        assert_eq!(w.skip(4), Ok(()));
        assert_eq!((w.next_header(), w.offset()), (IPPROTO_UDP, 80));
        let mut w = walk(&p);
        assert_eq!(w.skip(3), Err(WireError::Malformed), "limit");
        // No next header ends the walk like a transport.
        let p = packet(IPPROTO_DSTOPTS, &[IPPROTO_NONE, 0, 1, 4, 0, 0, 0, 0]);
        let mut w = walk(&p);
        assert_eq!(w.skip(8), Ok(()));
        assert_eq!((w.next_header(), w.offset()), (IPPROTO_NONE, 48));
    }

    #[test]
    fn walk_loop_limit() {
        // A chain longer than any limit: 100 destination options headers.
        let mut ext = Vec::new();
        for _ in 0..100 {
            ext.extend_from_slice(&[IPPROTO_DSTOPTS, 0, 1, 4, 0, 0, 0, 0]);
        }
        let p = packet(IPPROTO_DSTOPTS, &ext);
        let mut w = walk(&p);
        assert_eq!(w.skip(IPV6_MAX_EXT_HEADERS), Err(WireError::Malformed));
        assert_eq!(w.offset(), 40 + 8 * IPV6_MAX_EXT_HEADERS);
        // The chain runs off the end: Truncated, not a panic.
        let mut w = walk(&p);
        assert_eq!(w.skip(1000), Err(WireError::Truncated));
        assert_eq!(w.offset(), p.len());
    }
}
