// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Whole-frame parses built on the views: the L2 head a forwarding decision
//! needs ([`L2Head`]) and the offsets of every header up to TCP/UDP that
//! segmentation needs ([`parse_headers`]).

use std::fmt;

use super::checksum::pseudo_sum;
use super::ethernet::{EthernetFrame, MacAddr, ETH_HLEN, ETH_P_IPV4, ETH_P_IPV6};
use super::ip::{
    IPPROTO_DSTOPTS, IPPROTO_FRAGMENT, IPPROTO_HOPOPTS, IPPROTO_ROUTING, IPPROTO_TCP, IPPROTO_UDP,
};
use super::ipv4::{self, Ipv4Packet};
use super::ipv6::{ExtHeaderWalk, Ipv6Packet, IPV6_MAX_EXT_HEADERS};
use super::tcp::TcpPacket;
use super::udp::{UdpPacket, UDP_HLEN};
use super::vlan::{is_vlan_tpid, Vlan, VlanTag, MAX_VLAN_TAGS, VLAN_HLEN};
use super::WireError;

// ===== impl L2Head =====

/// The Ethernet header and VLAN tags of a frame: what a switch decides on.
///
/// Parsed from the start of a frame, typically the private head copy of a
/// guest frame ([`crate::queue::HEAD_LEN`] bytes); only the L2 part has to
/// fit, what follows may be cut off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct L2Head {
    dst: MacAddr,
    src: MacAddr,
    tags: [Vlan; MAX_VLAN_TAGS],
    ntags: u8,
    ethertype: u16,
    l3_offset: usize,
}

impl L2Head {
    /// Parses the Ethernet header and up to [`MAX_VLAN_TAGS`] VLAN tags
    /// (any TPID of [`is_vlan_tpid`]; a further tag is left as the
    /// ethertype).
    ///
    /// # Errors
    /// [`WireError::Truncated`]: `head` ends inside the Ethernet header or
    /// a tag.
    pub fn parse(head: &[u8]) -> Result<Self, WireError> {
        let eth = EthernetFrame::new_checked(head)?;
        let mut h = L2Head {
            dst: eth.dst_addr(),
            src: eth.src_addr(),
            tags: [Vlan::default(); MAX_VLAN_TAGS],
            ntags: 0,
            ethertype: eth.ethertype(),
            l3_offset: ETH_HLEN,
        };
        for slot in &mut h.tags {
            if !is_vlan_tpid(h.ethertype) {
                break;
            }
            let tag = VlanTag::new_checked(head.get(h.l3_offset..).unwrap_or_default())?;
            *slot = Vlan {
                tpid: h.ethertype,
                tci: tag.tci(),
            };
            h.ntags += 1;
            h.ethertype = tag.ethertype();
            h.l3_offset += VLAN_HLEN;
        }
        Ok(h)
    }

    /// Destination address.
    #[inline]
    pub fn dst(&self) -> MacAddr {
        self.dst
    }

    /// Source address.
    #[inline]
    pub fn src(&self) -> MacAddr {
        self.src
    }

    /// The VLAN tags, outermost first (0 to [`MAX_VLAN_TAGS`]).
    #[inline]
    pub fn vlans(&self) -> &[Vlan] {
        &self.tags[..usize::from(self.ntags)]
    }

    /// The ethertype after the tags.
    #[inline]
    pub fn ethertype(&self) -> u16 {
        self.ethertype
    }

    /// Offset of the L3 header (what follows the tags).
    #[inline]
    pub fn l3_offset(&self) -> usize {
        self.l3_offset
    }
}

// ===== parse_headers =====

/// Where the headers of a frame are, as parsed from the frame itself by
/// [`parse_headers`]. Offsets are from the start of the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Headers {
    /// Offset of the IP header.
    pub l3: usize,
    /// IPv4 (else IPv6).
    pub ipv4: bool,
    /// Offset of the transport header (after IPv6 extension headers).
    pub l4: usize,
    /// Transport protocol ([`IPPROTO_TCP`] or [`IPPROTO_UDP`]).
    pub proto: u8,
    /// Offset of the byte that names `proto` (IPv4 protocol field, or the
    /// IPv6 next-header field of the last header before the transport).
    pub proto_offset: usize,
    /// End of the transport header (start of the payload).
    pub payload: usize,
}

impl Headers {
    /// Offset and length of the source address; the destination address
    /// follows it.
    #[inline]
    pub fn addrs(&self) -> (usize, usize) {
        if self.ipv4 {
            (self.l3 + 12, 4)
        } else {
            (self.l3 + 8, 16)
        }
    }

    /// The unfolded pseudo-header sum of the frame `b` these headers were
    /// parsed from (or a copy of its headers), for a transport length.
    ///
    /// # Panics
    /// When `b` is shorter than the IP header.
    #[inline]
    pub fn pseudo_sum(&self, b: &[u8], l4_len: u32) -> u64 {
        let (a, n) = self.addrs();
        pseudo_sum(&b[a..a + n], &b[a + n..a + 2 * n], self.proto, l4_len)
    }
}

/// Why [`parse_headers`] found no TCP or UDP header.
///
/// Per packet: small and `Copy`, to be counted. The software offloads
/// report each case as the `OffloadError` variant of the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadersError {
    /// A header, or the length it announces, runs past the end.
    Truncated,
    /// The ethertype after the tags is neither IPv4 nor IPv6.
    NotIp,
    /// Wrong IP version, or an IPv4 header length below 20.
    IpHeader,
    /// IPv4 MF or fragment offset set, or an IPv6 Fragment header.
    Fragment,
    /// Another transport, or a longer IPv6 extension chain than
    /// [`IPV6_MAX_EXT_HEADERS`].
    Protocol,
    /// A TCP data offset below 20 bytes.
    TcpHeader,
}

impl fmt::Display for HeadersError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Truncated => "frame truncated",
            Self::NotIp => "not an IP packet",
            Self::IpHeader => "malformed IP header",
            Self::Fragment => "IP fragment",
            Self::Protocol => "not TCP or UDP",
            Self::TcpHeader => "malformed TCP header",
        })
    }
}

impl std::error::Error for HeadersError {}

/// Maps the error of an IP or TCP view; `malformed` names the header.
fn layer(malformed: HeadersError) -> impl Fn(WireError) -> HeadersError {
    move |e| match e {
        WireError::Truncated => HeadersError::Truncated,
        WireError::Malformed => malformed,
    }
}

/// Parses Ethernet, up to two VLAN tags, IPv4 or IPv6 (with Hop-by-Hop,
/// Routing and Destination Options headers) and a TCP or UDP header.
///
/// Checks, in this order: each header fits and is well formed, then what
/// follows. Length fields (IPv4 total length, IPv6 payload length, UDP
/// length) are not checked against the frame.
///
/// # Errors
/// See [`HeadersError`].
pub fn parse_headers(frame: &[u8]) -> Result<Headers, HeadersError> {
    let l2 = L2Head::parse(frame).map_err(layer(HeadersError::Truncated))?;
    let l3 = l2.l3_offset();
    let ip = frame.get(l3..).unwrap_or_default();
    let (ipv4, l4, proto, proto_offset) = match l2.ethertype() {
        ETH_P_IPV4 => {
            let p = Ipv4Packet::new_checked(ip).map_err(layer(HeadersError::IpHeader))?;
            if p.is_fragment() {
                return Err(HeadersError::Fragment);
            }
            let proto_offset = l3 + ipv4::field::PROTOCOL;
            (true, l3 + p.header_len(), p.protocol(), proto_offset)
        }
        ETH_P_IPV6 => {
            let p = Ipv6Packet::new_checked(ip).map_err(layer(HeadersError::IpHeader))?;
            let mut walk = ExtHeaderWalk::new(p);
            let mut found = false;
            // Invariant: up to IPV6_MAX_EXT_HEADERS extension headers
            // before the transport; one more is stepped over (and may be
            // found truncated) before the chain counts as too long.
            for _ in 0..=IPV6_MAX_EXT_HEADERS {
                match walk.next_header() {
                    IPPROTO_TCP | IPPROTO_UDP => {
                        found = true;
                        break;
                    }
                    IPPROTO_HOPOPTS | IPPROTO_ROUTING | IPPROTO_DSTOPTS => {
                        walk.step().map_err(layer(HeadersError::Truncated))?;
                    }
                    IPPROTO_FRAGMENT => return Err(HeadersError::Fragment),
                    _ => return Err(HeadersError::Protocol),
                }
            }
            if !found {
                return Err(HeadersError::Protocol);
            }
            let proto_offset = l3 + walk.next_header_offset();
            (false, l3 + walk.offset(), walk.next_header(), proto_offset)
        }
        _ => return Err(HeadersError::NotIp),
    };
    let transport = frame.get(l4..).unwrap_or_default();
    let payload = match proto {
        IPPROTO_TCP => {
            let t = TcpPacket::new_checked(transport).map_err(layer(HeadersError::TcpHeader))?;
            l4 + t.header_len()
        }
        IPPROTO_UDP => {
            UdpPacket::new_checked(transport).map_err(layer(HeadersError::Truncated))?;
            l4 + UDP_HLEN
        }
        _ => return Err(HeadersError::Protocol),
    };
    Ok(Headers {
        l3,
        ipv4,
        l4,
        proto,
        proto_offset,
        payload,
    })
}

#[cfg(test)]
mod tests {
    use super::super::vlan::{Tci, ETH_P_8021AD, ETH_P_8021Q, ETH_P_QINQ1};
    use super::*;

    const DST: [u8; 6] = [0x01, 0x00, 0x5e, 0, 0, 0xfb];
    const SRC: [u8; 6] = [0x02, 0, 0, 0, 0, 1];

    /// Ethernet header with `tags` (TPID, TCI), then `ethertype`, then
    /// `rest`.
    fn frame(tags: &[(u16, u16)], ethertype: u16, rest: &[u8]) -> Vec<u8> {
        let mut f = [DST, SRC].concat();
        for (tpid, tci) in tags {
            f.extend_from_slice(&tpid.to_be_bytes());
            f.extend_from_slice(&tci.to_be_bytes());
        }
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(rest);
        f
    }

    #[test]
    fn l2_head_zero_to_two_tags() {
        let tag_sets: [&[(u16, u16)]; 4] = [
            &[],
            &[(ETH_P_8021Q, 0x2064)],
            &[(ETH_P_8021AD, 0x0010), (ETH_P_8021Q, 0xe0ff)],
            &[(ETH_P_QINQ1, 0x0001), (ETH_P_8021Q, 0x0002)],
        ];
        for tags in tag_sets {
            let f = frame(tags, ETH_P_IPV6, &[0x60; 50]);
            let h = L2Head::parse(&f[..64]).unwrap();
            assert_eq!((h.dst(), h.src()), (MacAddr(DST), MacAddr(SRC)));
            assert!(h.dst().is_multicast());
            assert_eq!(h.ethertype(), ETH_P_IPV6);
            assert_eq!(h.l3_offset(), 14 + 4 * tags.len());
            let want: Vec<Vlan> = tags
                .iter()
                .map(|&(tpid, tci)| Vlan {
                    tpid,
                    tci: Tci(tci),
                })
                .collect();
            assert_eq!(h.vlans(), want);
            // Only the L2 part has to fit; every shorter head is Truncated.
            let l2 = h.l3_offset();
            assert_eq!(L2Head::parse(&f[..l2]), Ok(h));
            for cut in 0..l2 {
                assert_eq!(L2Head::parse(&f[..cut]), Err(WireError::Truncated), "{cut}");
            }
        }
    }

    #[test]
    fn l2_head_third_tag_is_the_ethertype() {
        let tags = [(ETH_P_8021AD, 1), (ETH_P_8021Q, 2), (ETH_P_8021Q, 3)];
        let f = frame(&tags, ETH_P_IPV4, &[]);
        let h = L2Head::parse(&f).unwrap();
        assert_eq!(
            (h.vlans().len(), h.ethertype(), h.l3_offset()),
            (2, ETH_P_8021Q, 22)
        );
        // A 0x8100 ethertype with nothing after it: truncated tag.
        let f = frame(&[], ETH_P_8021Q, &[0x00]);
        assert_eq!(L2Head::parse(&f), Err(WireError::Truncated));
    }

    fn ipv4_tcp() -> Vec<u8> {
        let mut ip = vec![0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, IPPROTO_TCP, 0, 0];
        ip.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
        ip.extend_from_slice(&[0, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0x50, 0x10]);
        ip.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
        frame(&[(ETH_P_8021Q, 5)], ETH_P_IPV4, &ip)
    }

    #[test]
    fn headers_ipv4_tcp() {
        let f = ipv4_tcp();
        let h = parse_headers(&f).unwrap();
        let want = Headers {
            l3: 18,
            ipv4: true,
            l4: 38,
            proto: IPPROTO_TCP,
            proto_offset: 27,
            payload: 58,
        };
        assert_eq!(h, want);
        assert_eq!(h.addrs(), (30, 4));
        let sum = super::super::checksum::fold(h.pseudo_sum(&f, 20));
        assert_eq!(sum, 0x0a00 * 2 + 1 + 2 + 6 + 20);
        for cut in 0..f.len() {
            assert_eq!(
                parse_headers(&f[..cut]),
                Err(HeadersError::Truncated),
                "{cut}"
            );
        }
        let with = |i: usize, v: u8| {
            let mut g = f.clone();
            g[i] = v;
            parse_headers(&g)
        };
        assert_eq!(with(16, 0x99), Err(HeadersError::NotIp));
        assert_eq!(with(18, 0x65), Err(HeadersError::IpHeader));
        assert_eq!(with(18, 0x44), Err(HeadersError::IpHeader));
        assert_eq!(with(24, 0x20), Err(HeadersError::Fragment));
        assert_eq!(with(25, 0x01), Err(HeadersError::Fragment));
        assert_eq!(with(27, 1), Err(HeadersError::Protocol));
        assert_eq!(with(38 + 12, 0x40), Err(HeadersError::TcpHeader));
        assert_eq!(with(38 + 12, 0x60), Err(HeadersError::Truncated));
    }

    #[test]
    fn headers_ipv6_udp_after_extension_headers() {
        let mut ip = vec![0x60, 0, 0, 0, 0, 24, IPPROTO_HOPOPTS, 64];
        ip.extend_from_slice(&[0; 32]);
        ip.extend_from_slice(&[IPPROTO_DSTOPTS, 0, 1, 4, 0, 0, 0, 0]);
        ip.extend_from_slice(&[IPPROTO_UDP, 0, 1, 4, 0, 0, 0, 0]);
        ip.extend_from_slice(&[0, 1, 0, 2, 0, 8, 0, 0]);
        let f = frame(&[], ETH_P_IPV6, &ip);
        let h = parse_headers(&f).unwrap();
        let want = Headers {
            l3: 14,
            ipv4: false,
            l4: 14 + 56,
            proto: IPPROTO_UDP,
            proto_offset: 14 + 48,
            payload: 14 + 64,
        };
        assert_eq!(h, want);
        assert_eq!(h.addrs(), (22, 16));
        for cut in 0..f.len() {
            assert_eq!(
                parse_headers(&f[..cut]),
                Err(HeadersError::Truncated),
                "{cut}"
            );
        }
        let mut g = f.clone();
        g[14 + 48] = IPPROTO_FRAGMENT;
        assert_eq!(parse_headers(&g), Err(HeadersError::Fragment));
        g[14 + 48] = 59;
        assert_eq!(parse_headers(&g), Err(HeadersError::Protocol));
    }

    /// Eight extension headers are looked through; a ninth is stepped over
    /// and then the chain counts as too long.
    #[test]
    fn headers_ipv6_extension_limit() {
        let build = |n: usize| {
            let mut ip = vec![0x60, 0, 0, 0, 0, 0, IPPROTO_DSTOPTS, 64];
            ip.extend_from_slice(&[0; 32]);
            for i in 0..n {
                let next = if i + 1 == n {
                    IPPROTO_UDP
                } else {
                    IPPROTO_DSTOPTS
                };
                ip.extend_from_slice(&[next, 0, 1, 4, 0, 0, 0, 0]);
            }
            ip.extend_from_slice(&[0; 8]);
            frame(&[], ETH_P_IPV6, &ip)
        };
        let f = build(IPV6_MAX_EXT_HEADERS);
        assert_eq!(
            parse_headers(&f).unwrap().l4,
            14 + 40 + 8 * IPV6_MAX_EXT_HEADERS
        );
        let f = build(IPV6_MAX_EXT_HEADERS + 1);
        assert_eq!(parse_headers(&f), Err(HeadersError::Protocol));
    }
}
