// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The wire views, the whole-frame parsers and the software offloads on
//! arbitrary bytes, each checked against an independent reference written
//! here (its own header walk, its own Internet checksum).
//!
//! Input: one byte of configuration (bits 0-4: the `GUEST_*` offloads the
//! consumer of [`lend_within`] accepts: CSUM, TSO4, TSO6, UFO, ECN; bit 5: a
//! small segmenter scratch buffer, 1526 bytes, so that `TooLarge` is
//! reachable), a 10-byte `virtio_net_hdr`, then the frame.
//!
//! Checks:
//! - every checked view (Ethernet, 802.1Q, IPv4, IPv6, its extension and
//!   Fragment headers, TCP, UDP) made at every offset of the first 80
//!   bytes: accepted exactly when the reference says the header fits, its
//!   lengths inside the buffer, its accessors agree with the bytes, and its
//!   error the reference's;
//! - [`L2Head::parse`] and [`parse_headers`] agree exactly with the
//!   reference parse (offsets, protocol, error kind);
//! - [`Segmenter::segment`] never panics; each segment has a valid length
//!   (at most MSS + headers, payloads adding up to the original's, IPv4
//!   total length / IPv6 payload length / UDP length right), a valid IPv4
//!   header checksum and TCP/UDP checksum, the sequence numbers, IDs, flags
//!   and fragment offsets of the module's table, and the original's bytes
//!   everywhere else; [`segment_count`] agrees;
//! - [`lend_within`] lends only headers the consumer accepts, the frame as
//!   is when it fits, and otherwise exactly what the checksum completion or
//!   the segmenter makes.

use vhost_net_backend::device::bits;
use vhost_net_backend::io::offload::{lend_within, segment_count, OffloadError, Segmenter};
use vhost_net_backend::net_hdr::{self, VirtioNetHdr, MAX_HDR_LEN};
use vhost_net_backend::wire::{
    parse_headers, EthernetFrame, ExtHeaderWalk, Headers, HeadersError, Ipv4Packet, Ipv6ExtHeader,
    Ipv6FragHeader, Ipv6Packet, L2Head, TcpPacket, UdpPacket, VlanTag, WireError,
};

/// Scratch size of the small segmenter (configuration bit 5).
pub const SMALL_SCRATCH: usize = 1526;
/// How many leading offsets every view is tried at.
const VIEW_OFFSETS: usize = 80;

/// What one input did, for the seed replay to assert on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// [`parse_headers`] of the frame.
    pub headers: Result<Headers, HeadersError>,
    /// [`Segmenter::segment`]: the number of frames.
    pub segments: Result<usize, OffloadError>,
    /// [`lend_within`]: the number of frames lent.
    pub lent: Result<usize, OffloadError>,
}

/// Runs the checks; false for an input too short to hold the header.
pub fn run(data: &[u8]) -> bool {
    outcome(data).is_some()
}

/// Runs the checks and says what happened (None: input too short).
pub fn outcome(data: &[u8]) -> Option<Outcome> {
    let (&cfg, rest) = data.split_first()?;
    let raw = rest.get(..10)?;
    let frame = &rest[10..];
    let mut b = [0u8; MAX_HDR_LEN];
    b[..10].copy_from_slice(raw);
    let hdr = VirtioNetHdr::from_bytes(&b, 10);

    for k in 0..=frame.len().min(VIEW_OFFSETS) {
        views(&frame[k..]);
    }
    l2(frame);
    let headers = parse_headers(frame);
    assert_eq!(headers, reference_headers(frame), "parse_headers");
    if let Ok(h) = &headers {
        let a = h.addrs();
        assert!(a.0 + 2 * a.1 <= h.l4);
        // Never panics on the frame it was parsed from.
        let _ = h.pseudo_sum(frame, 0);
    }

    let cap = if cfg & 0x20 != 0 {
        SMALL_SCRATCH
    } else {
        Segmenter::DEFAULT_CAPACITY
    };
    let (segments, segs) = segment(&hdr, frame, cap, &headers);
    let lent = lend(cfg, &hdr, frame, cap, &segments, &segs);
    Some(Outcome {
        headers,
        segments,
        lent,
    })
}

// ===== an independent Internet checksum =====

/// The folded ones'-complement sum of `data` (big-endian 16-bit words, an
/// odd last byte padded with zero) added to `acc`.
fn ones_sum(data: &[u8], acc: u16) -> u16 {
    let mut s = u32::from(acc);
    let mut words = data.chunks(2);
    for w in &mut words {
        let v = if w.len() == 2 {
            u32::from(w[0]) << 8 | u32::from(w[1])
        } else {
            u32::from(w[0]) << 8
        };
        s += v;
        if s > 0xffff {
            s = (s & 0xffff) + 1;
        }
    }
    s as u16
}

/// Whether `data` (with its checksum field) sums to all ones.
fn sums_to_ones(data: &[u8], acc: u16) -> bool {
    ones_sum(data, acc) == 0xffff
}

/// The pseudo-header sum of the IP header at `l3` (v4 or v6) for a
/// transport of `len` bytes and protocol `proto`.
fn pseudo(b: &[u8], l3: usize, ipv4: bool, proto: u8, len: usize) -> u16 {
    let mut p = Vec::with_capacity(40);
    if ipv4 {
        p.extend_from_slice(&b[l3 + 12..l3 + 20]);
        p.extend_from_slice(&[0, proto]);
        p.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        p.extend_from_slice(&b[l3 + 8..l3 + 40]);
        p.extend_from_slice(&(len as u32).to_be_bytes());
        p.extend_from_slice(&[0, 0, 0, proto]);
    }
    ones_sum(&p, 0)
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

// ===== views =====

/// The error `check_hlen` must give: the fixed part, validity, the
/// announced length.
fn want_hlen(len: usize, min: usize, valid: bool, hlen: usize) -> Result<(), WireError> {
    if len < min {
        Err(WireError::Truncated)
    } else if !valid || hlen < min {
        Err(WireError::Malformed)
    } else if len < hlen {
        Err(WireError::Truncated)
    } else {
        Ok(())
    }
}

/// Every view over `b`: accepted exactly as the reference says, and its
/// accessors consistent with the bytes.
fn views(b: &[u8]) {
    let len = b.len();
    let fixed = |min: usize| {
        if len < min {
            Err(WireError::Truncated)
        } else {
            Ok(())
        }
    };

    let e = EthernetFrame::new_checked(b);
    assert_eq!(e.map(|_| ()), fixed(14), "Ethernet over {len}");
    if let Ok(e) = e {
        assert_eq!(e.dst_addr().0, b[..6]);
        assert_eq!(e.src_addr().0, b[6..12]);
        assert_eq!(e.ethertype(), be16(b, 12));
        assert_eq!(e.payload().len(), len - 14);
    }

    let t = VlanTag::new_checked(b);
    assert_eq!(t.map(|_| ()), fixed(4), "VLAN tag over {len}");
    if let Ok(t) = t {
        assert_eq!(t.tci().0, be16(b, 0));
        assert_eq!(t.ethertype(), be16(b, 2));
        assert_eq!(t.payload().len(), len - 4);
    }

    let v4 = Ipv4Packet::new_checked(b);
    let want = if len < 20 {
        Err(WireError::Truncated)
    } else {
        want_hlen(len, 20, b[0] >> 4 == 4, usize::from(b[0] & 15) * 4)
    };
    assert_eq!(v4.map(|_| ()), want, "IPv4 over {len}");
    if let Ok(p) = v4 {
        let hl = p.header_len();
        assert!((20..=60).contains(&hl) && hl <= len);
        assert_eq!(p.version(), 4);
        assert_eq!(p.payload().len(), len - hl);
        assert_eq!(p.total_len(), be16(b, 2));
        assert_eq!(p.ident(), be16(b, 4));
        assert_eq!(p.flags_frag(), be16(b, 6));
        assert_eq!(
            p.is_fragment(),
            p.more_frags() || p.frag_offset() != 0,
            "IPv4 fragment bits"
        );
        assert_eq!((p.ttl(), p.protocol()), (b[8], b[9]));
        assert_eq!(p.src_addr().octets(), b[12..16]);
        assert_eq!(p.dst_addr().octets(), b[16..20]);
        let (s, d) = p.addr_bytes();
        assert_eq!((s, d), (&b[12..16], &b[16..20]));
        assert_eq!(p.verify_checksum(), sums_to_ones(&b[..hl], 0));
        let mut copy = b[..hl].to_vec();
        let mut w = Ipv4Packet::new_checked(&mut copy[..]).expect("same header");
        w.fill_checksum();
        assert!(w.verify_checksum());
        assert!(sums_to_ones(&copy, 0), "fill_checksum");
        assert_eq!(copy[..10], b[..10]);
        assert_eq!(copy[12..], b[12..hl]);
    }

    let v6 = Ipv6Packet::new_checked(b);
    let want = if len < 40 {
        Err(WireError::Truncated)
    } else if b[0] >> 4 != 6 {
        Err(WireError::Malformed)
    } else {
        Ok(())
    };
    assert_eq!(v6.map(|_| ()), want, "IPv6 over {len}");
    if let Ok(p) = v6 {
        assert_eq!(p.version(), 6);
        assert_eq!(p.payload_len(), be16(b, 4));
        assert_eq!((p.next_header(), p.hop_limit()), (b[6], b[7]));
        assert_eq!(p.traffic_class(), (be16(b, 0) >> 4) as u8);
        assert_eq!(p.src_addr().octets(), b[8..24]);
        assert_eq!(p.dst_addr().octets(), b[24..40]);
        assert_eq!(p.payload().len(), len - 40);
        walk(p);
    }

    let x = Ipv6ExtHeader::new_checked(b);
    let want = if len < 2 {
        Err(WireError::Truncated)
    } else {
        want_hlen(len, 2, true, (usize::from(b[1]) + 1) * 8)
    };
    assert_eq!(x.map(|_| ()), want, "extension header over {len}");
    if let Ok(x) = x {
        assert!(x.header_len() <= len && x.header_len() % 8 == 0);
        assert_eq!(x.next_header(), b[0]);
    }

    let f = Ipv6FragHeader::new_checked(b);
    assert_eq!(f.map(|_| ()), fixed(8), "Fragment header over {len}");
    if let Ok(f) = f {
        assert_eq!((f.next_header(), f.reserved()), (b[0], b[1]));
        assert_eq!(f.frag_offset(), be16(b, 2) >> 3);
        assert_eq!(f.more_frags(), b[3] & 1 != 0);
        assert_eq!(f.ident(), be32(b, 4));
    }

    let t = TcpPacket::new_checked(b);
    let want = if len < 20 {
        Err(WireError::Truncated)
    } else {
        want_hlen(len, 20, true, usize::from(b[12] >> 4) * 4)
    };
    assert_eq!(t.map(|_| ()), want, "TCP over {len}");
    if let Ok(t) = t {
        let hl = t.header_len();
        assert!((20..=60).contains(&hl) && hl <= len);
        assert_eq!(t.payload().len(), len - hl);
        assert_eq!((t.src_port(), t.dst_port()), (be16(b, 0), be16(b, 2)));
        assert_eq!((t.seq(), t.ack()), (be32(b, 4), be32(b, 8)));
        assert_eq!(
            (t.flags(), t.window(), t.checksum()),
            (b[13], be16(b, 14), be16(b, 16))
        );
    }

    let u = UdpPacket::new_checked(b);
    assert_eq!(u.map(|_| ()), fixed(8), "UDP over {len}");
    if let Ok(u) = u {
        assert_eq!((u.src_port(), u.dst_port()), (be16(b, 0), be16(b, 2)));
        assert_eq!((u.length(), u.checksum()), (be16(b, 4), be16(b, 6)));
        assert_eq!(u.payload().len(), len - 8);
    }
}

/// Steps an extension-header walk to its end: offsets only grow and stay
/// inside the packet, and each step is the reference's.
fn walk(p: Ipv6Packet<&[u8]>) {
    let b = p.into_inner();
    let mut w = ExtHeaderWalk::new(p);
    let mut skip = w;
    let _ = skip.skip(8);
    assert!(skip.offset() <= b.len());
    assert_eq!((w.offset(), w.next_header_offset()), (40, 6));
    for _ in 0..64 {
        let (off, nh) = (w.offset(), w.next_header());
        let want = match nh {
            0 | 43 | 60 => match b.get(off..) {
                Some(r) if r.len() >= 2 => {
                    let hl = (usize::from(r[1]) + 1) * 8;
                    if hl <= r.len() {
                        Ok(Some((r[0], hl)))
                    } else {
                        Err(WireError::Truncated)
                    }
                }
                _ => Err(WireError::Truncated),
            },
            44 => match b.get(off..off + 8) {
                Some(r) => Ok(Some((r[0], 8))),
                None => Err(WireError::Truncated),
            },
            _ => Ok(None),
        };
        let got = w.step();
        match want {
            Ok(Some((next, hl))) => {
                assert_eq!(got, Ok(true));
                assert_eq!(w.next_header(), next);
                assert_eq!((w.offset(), w.next_header_offset()), (off + hl, off));
                assert!(w.offset() <= b.len());
            }
            Ok(None) => {
                assert_eq!(got, Ok(false));
                assert_eq!(w.offset(), off);
                return;
            }
            Err(e) => {
                assert_eq!(got, Err(e));
                return;
            }
        }
    }
}

// ===== L2 and parse_headers, against a reference =====

/// L3 offset, ethertype, (TPID, TCI) of each tag.
type L2 = (usize, u16, Vec<(u16, u16)>);

/// The reference L2 walk: `(l3 offset, ethertype, tags)`, or None when the
/// frame ends inside the Ethernet header or a tag.
fn reference_l2(f: &[u8]) -> Option<L2> {
    if f.len() < 14 {
        return None;
    }
    let mut et = be16(f, 12);
    let mut off = 14;
    let mut tags = Vec::new();
    while tags.len() < 2 && matches!(et, 0x8100 | 0x88a8 | 0x9100) {
        if f.len() < off + 4 {
            return None;
        }
        tags.push((et, be16(f, off)));
        et = be16(f, off + 2);
        off += 4;
    }
    Some((off, et, tags))
}

fn l2(f: &[u8]) {
    let got = L2Head::parse(f);
    match reference_l2(f) {
        None => assert_eq!(got, Err(WireError::Truncated), "L2Head over {}", f.len()),
        Some((off, et, tags)) => {
            let h = got.expect("L2Head parses what the reference does");
            assert_eq!((h.l3_offset(), h.ethertype()), (off, et));
            assert!(h.l3_offset() <= f.len());
            assert_eq!(
                (h.dst().0, h.src().0),
                (f[..6].try_into().unwrap(), f[6..12].try_into().unwrap())
            );
            let v: Vec<(u16, u16)> = h.vlans().iter().map(|v| (v.tpid, v.tci.0)).collect();
            assert_eq!(v, tags);
        }
    }
}

/// The reference of [`parse_headers`], from its documentation.
fn reference_headers(f: &[u8]) -> Result<Headers, HeadersError> {
    use HeadersError as E;
    let (l3, et, _) = reference_l2(f).ok_or(E::Truncated)?;
    let avail = f.len() - l3;
    let (ipv4, l4, proto, proto_offset) = match et {
        0x0800 => {
            if avail < 20 {
                return Err(E::Truncated);
            }
            let hl = usize::from(f[l3] & 15) * 4;
            if f[l3] >> 4 != 4 || hl < 20 {
                return Err(E::IpHeader);
            }
            if hl > avail {
                return Err(E::Truncated);
            }
            if be16(f, l3 + 6) & 0x3fff != 0 {
                return Err(E::Fragment);
            }
            (true, l3 + hl, f[l3 + 9], l3 + 9)
        }
        0x86dd => {
            if avail < 40 {
                return Err(E::Truncated);
            }
            if f[l3] >> 4 != 6 {
                return Err(E::IpHeader);
            }
            let (mut nh, mut nh_at, mut off) = (f[l3 + 6], l3 + 6, l3 + 40);
            let mut steps = 0;
            loop {
                match nh {
                    6 | 17 => break,
                    44 => return Err(E::Fragment),
                    0 | 43 | 60 if steps <= 8 => {
                        if f.len() < off + 2 {
                            return Err(E::Truncated);
                        }
                        let hl = (usize::from(f[off + 1]) + 1) * 8;
                        if f.len() < off + hl {
                            return Err(E::Truncated);
                        }
                        (nh, nh_at, off) = (f[off], off, off + hl);
                        steps += 1;
                        if steps == 9 {
                            return Err(E::Protocol);
                        }
                    }
                    _ => return Err(E::Protocol),
                }
            }
            (false, off, nh, nh_at)
        }
        _ => return Err(E::NotIp),
    };
    let avail = f.len() - l4;
    let payload = match proto {
        6 => {
            if avail < 20 {
                return Err(E::Truncated);
            }
            let hl = usize::from(f[l4 + 12] >> 4) * 4;
            if hl < 20 {
                return Err(E::TcpHeader);
            }
            if hl > avail {
                return Err(E::Truncated);
            }
            l4 + hl
        }
        17 => {
            if avail < 8 {
                return Err(E::Truncated);
            }
            l4 + 8
        }
        _ => return Err(E::Protocol),
    };
    // (Fields in the order the parse found them.)
    Ok(Headers {
        l3,
        l4,
        payload,
        ipv4,
        proto,
        proto_offset,
    })
}

// ===== segmentation =====

/// What the checksum completion of `frame` must give (`F_NEEDS_CSUM`), or
/// None when the field lies outside the frame.
fn completed(hdr: &VirtioNetHdr, frame: &[u8]) -> Option<Vec<u8>> {
    let start = usize::from(hdr.csum_start);
    let field = start + usize::from(hdr.csum_offset);
    if field + 2 > frame.len() {
        return None;
    }
    let c = match !ones_sum(&frame[start..], 0) {
        0 => 0xffff,
        c => c,
    };
    let mut out = frame.to_vec();
    out[field..field + 2].copy_from_slice(&c.to_be_bytes());
    Some(out)
}

type Segments = Vec<Vec<u8>>;

fn segment(
    hdr: &VirtioNetHdr,
    frame: &[u8],
    cap: usize,
    headers: &Result<Headers, HeadersError>,
) -> (Result<usize, OffloadError>, Segments) {
    let mut seg = Segmenter::with_capacity(cap);
    let mut segs = Vec::new();
    let r = seg.segment(hdr, frame, &mut |s| {
        segs.push(s.to_vec());
        true
    });
    let count = segment_count(hdr, frame);
    let kind = hdr.gso_type & !net_hdr::GSO_ECN;
    match r {
        Ok(n) => {
            assert_eq!(n, segs.len(), "segment's count");
            assert_eq!(count, Ok(n), "segment_count");
            for s in &segs {
                assert!(s.len() <= cap.max(frame.len()), "segment over the scratch");
            }
            match kind {
                net_hdr::GSO_NONE => {
                    assert_eq!(n, 1);
                    if hdr.needs_csum() {
                        assert_eq!(Some(&segs[0]), completed(hdr, frame).as_ref());
                    } else {
                        assert_eq!(segs[0], frame);
                    }
                }
                net_hdr::GSO_UDP => {
                    let hs = headers.expect("UFO segmented an unparsed frame");
                    check_ufo(hdr, frame, &hs, &segs);
                }
                _ => {
                    let hs = headers.expect("GSO segmented an unparsed frame");
                    check_split(hdr, frame, &hs, &segs);
                }
            }
        }
        Err(e) => {
            assert!(segs.is_empty(), "{e:?} after lending segments");
            if let Err(c) = count {
                // The same checks come first in both.
                assert!(c == e || e == OffloadError::Protocol, "{c:?} vs {e:?}");
            }
            match kind {
                net_hdr::GSO_NONE => assert!(
                    matches!(e, OffloadError::ChecksumOffset | OffloadError::TooLarge),
                    "{e:?}"
                ),
                net_hdr::GSO_TCPV4
                | net_hdr::GSO_TCPV6
                | net_hdr::GSO_UDP_L4
                | net_hdr::GSO_UDP => {
                    if let Err(h) = headers {
                        if hdr.gso_size != 0 || kind == net_hdr::GSO_UDP {
                            assert_eq!(e, OffloadError::from(*h));
                        }
                    }
                }
                _ => assert_eq!(e, OffloadError::GsoType(hdr.gso_type)),
            }
        }
    }
    (r, segs)
}

/// The IP header of segment `s` (at `hs.l3`, up to `hs.l4`): lengths and
/// checksum right, the rest the original's but for `skip` byte ranges
/// (relative to l3).
fn check_ip(s: &[u8], frame: &[u8], hs: &Headers, skip: &[(usize, usize)]) {
    let (l3, l4) = (hs.l3, hs.l4);
    assert_eq!(s[..l3], frame[..l3], "L2 header changed");
    if hs.ipv4 {
        assert!(sums_to_ones(&s[l3..l4], 0), "IPv4 header checksum");
        assert_eq!(
            usize::from(be16(s, l3 + 2)),
            s.len() - l3,
            "IPv4 total length"
        );
    } else {
        assert_eq!(
            usize::from(be16(s, l3 + 4)),
            s.len() - l3 - 40,
            "IPv6 payload length"
        );
    }
    let fixed: &[(usize, usize)] = if hs.ipv4 {
        &[(2, 4), (10, 12)]
    } else {
        &[(4, 6)]
    };
    for i in 0..l4 - l3 {
        let skipped = fixed.iter().chain(skip).any(|&(a, b)| (a..b).contains(&i));
        if !skipped && (hs.ipv4 || l3 + i != hs.proto_offset) {
            assert_eq!(s[l3 + i], frame[l3 + i], "IP header byte {i} changed");
        }
    }
}

/// TSO and USO.
fn check_split(hdr: &VirtioNetHdr, frame: &[u8], hs: &Headers, segs: &Segments) {
    let mss = usize::from(hdr.gso_size);
    let payload = &frame[hs.payload..];
    let n = segs.len();
    assert_eq!(
        n,
        payload.len().div_ceil(mss).max(1),
        "segments for {} / {mss}",
        payload.len()
    );
    let tcp = hs.proto == 6;
    let l4 = hs.l4;
    let mut joined = Vec::with_capacity(payload.len());
    for (i, s) in segs.iter().enumerate() {
        assert!(
            s.len() <= hs.payload + mss,
            "segment {i}: {} bytes",
            s.len()
        );
        assert_eq!(reference_headers(s), Ok(*hs), "segment {i} headers");
        let chunk = &s[hs.payload..];
        if i + 1 < n {
            assert_eq!(chunk.len(), mss, "segment {i} short");
        }
        joined.extend_from_slice(chunk);
        check_ip(s, frame, hs, &[(4, 6)]);
        if hs.ipv4 {
            let id = be16(frame, hs.l3 + 4).wrapping_add(i as u16);
            assert_eq!(be16(s, hs.l3 + 4), id, "segment {i} IPv4 ID");
        }
        let l4_len = s.len() - l4;
        assert!(
            sums_to_ones(&s[l4..], pseudo(s, hs.l3, hs.ipv4, hs.proto, l4_len)),
            "segment {i} L4 checksum"
        );
        let th = &s[l4..hs.payload];
        let oh = &frame[l4..hs.payload];
        if tcp {
            let seq = be32(oh, 4).wrapping_add((i * mss) as u32);
            assert_eq!(be32(th, 4), seq, "segment {i} seq");
            let mut flags = oh[13];
            if i + 1 != n {
                flags &= !(0x01 | 0x08);
            }
            if i != 0 {
                flags &= !0x80;
            }
            assert_eq!(th[13], flags, "segment {i} TCP flags");
            assert_eq!((&th[..4], &th[8..13]), (&oh[..4], &oh[8..13]));
            assert_eq!((&th[14..16], &th[18..]), (&oh[14..16], &oh[18..]));
        } else {
            assert_eq!(usize::from(be16(th, 4)), l4_len, "segment {i} UDP length");
            assert_ne!(be16(th, 6), 0, "segment {i} UDP checksum 0");
            assert_eq!(th[..4], oh[..4]);
        }
    }
    assert_eq!(joined, payload, "segment payloads");
}

/// UFO: one datagram with its checksum, or IP fragments of it.
fn check_ufo(hdr: &VirtioNetHdr, frame: &[u8], hs: &Headers, segs: &Segments) {
    let l4 = hs.l4;
    let dgram = &frame[l4..];
    let size = usize::from(hdr.gso_size);
    let n = segs.len();
    let mut joined = Vec::with_capacity(dgram.len());
    if dgram.len() <= size {
        assert_eq!(n, 1);
        let s = &segs[0];
        assert_eq!(s.len(), frame.len());
        check_ip(s, frame, hs, &[]);
        joined.extend_from_slice(&s[l4..]);
    } else {
        let step = size & !7;
        assert_eq!(
            n,
            dgram.len().div_ceil(step),
            "fragments of {} by {step}",
            dgram.len()
        );
        let mut ident = None;
        for (i, s) in segs.iter().enumerate() {
            let more = i + 1 != n;
            let units = (i * step / 8) as u16;
            let data = if hs.ipv4 {
                check_ip(s, frame, hs, &[(6, 8)]);
                let ff = be16(s, hs.l3 + 6);
                let want = be16(frame, hs.l3 + 6) & 0x8000 | units | if more { 0x2000 } else { 0 };
                assert_eq!(ff, want, "fragment {i} flags/offset");
                &s[l4..]
            } else {
                check_ip(s, frame, hs, &[]);
                assert_eq!(s[hs.proto_offset], 44, "fragment {i} next header");
                let fh = &s[l4..l4 + 8];
                assert_eq!((fh[0], fh[1]), (17, 0), "fragment {i} header");
                assert_eq!(
                    be16(fh, 2),
                    units << 3 | u16::from(more),
                    "fragment {i} offset"
                );
                let id = be32(fh, 4);
                assert_eq!(*ident.get_or_insert(id), id, "fragment {i} ident");
                &s[l4 + 8..]
            };
            if more {
                assert_eq!(data.len(), step, "fragment {i} length");
            } else {
                assert!(
                    !data.is_empty() && data.len() <= step,
                    "last fragment length"
                );
            }
            joined.extend_from_slice(data);
        }
    }
    assert_eq!(joined.len(), dgram.len(), "datagram length");
    assert_eq!(
        (&joined[..4], &joined[8..]),
        (&dgram[..4], &dgram[8..]),
        "datagram bytes"
    );
    assert_eq!(usize::from(be16(&joined, 4)), dgram.len(), "UDP length");
    assert_ne!(be16(&joined, 6), 0, "UDP checksum 0");
    assert!(
        sums_to_ones(&joined, pseudo(frame, hs.l3, hs.ipv4, 17, dgram.len())),
        "UDP checksum of the datagram"
    );
}

// ===== lend_within =====

/// The documented policy: whether a consumer with `accepted` takes `h`.
fn accepts(h: &VirtioNetHdr, accepted: u64) -> bool {
    let has = |b: u64| accepted & b != 0;
    if h.flags & net_hdr::F_NEEDS_CSUM != 0 && !has(bits::GUEST_CSUM) {
        return false;
    }
    if h.gso_type & net_hdr::GSO_ECN != 0 && !has(bits::GUEST_ECN) {
        return false;
    }
    match h.gso_type & !net_hdr::GSO_ECN {
        net_hdr::GSO_NONE => true,
        net_hdr::GSO_TCPV4 => has(bits::GUEST_TSO4),
        net_hdr::GSO_TCPV6 => has(bits::GUEST_TSO6),
        net_hdr::GSO_UDP => has(bits::GUEST_UFO),
        _ => false,
    }
}

fn lend(
    cfg: u8,
    hdr: &VirtioNetHdr,
    frame: &[u8],
    cap: usize,
    segmented: &Result<usize, OffloadError>,
    segs: &Segments,
) -> Result<usize, OffloadError> {
    let accepted = [
        bits::GUEST_CSUM,
        bits::GUEST_TSO4,
        bits::GUEST_TSO6,
        bits::GUEST_UFO,
        bits::GUEST_ECN,
    ]
    .iter()
    .enumerate()
    .filter(|(i, _)| cfg & (1 << i) != 0)
    .fold(0, |a, (_, b)| a | b);
    let csum_ok = accepted & bits::GUEST_CSUM != 0;
    let mut seg = Segmenter::with_capacity(cap);
    let mut copy = frame.to_vec();
    let mut lent: Vec<(VirtioNetHdr, Vec<u8>)> = Vec::new();
    let r = lend_within(hdr, &mut copy, accepted, &mut seg, &mut |h, f| {
        lent.push((*h, f.to_vec()))
    });
    let mut as_is = *hdr;
    as_is.num_buffers = 0;
    if !csum_ok {
        as_is.flags &= !net_hdr::F_DATA_VALID;
    }
    for (h, _) in &lent {
        assert!(
            accepts(h, accepted),
            "lent {h:?} to a consumer of {accepted:#x}"
        );
        assert_eq!(h.num_buffers, 0);
        if !csum_ok {
            assert_eq!(h.flags & net_hdr::F_DATA_VALID, 0);
        }
    }
    let plain = VirtioNetHdr {
        flags: if csum_ok { net_hdr::F_DATA_VALID } else { 0 },
        ..VirtioNetHdr::default()
    };
    match r {
        Ok(n) => {
            assert_eq!(n, lent.len());
            if accepts(&as_is, accepted) {
                assert_eq!(
                    lent,
                    [(as_is, frame.to_vec())],
                    "a fitting frame lent as is"
                );
            } else if !hdr.is_gso() {
                // (Not GSO but not fitting: a partial checksum, or an ECN
                // bit the consumer does not take.)
                let want = if hdr.needs_csum() {
                    completed(hdr, frame).expect("completed a bad offset")
                } else {
                    frame.to_vec()
                };
                assert_eq!(lent, [(plain, want)], "checksum completed");
            } else {
                assert_eq!(*segmented, Ok(n), "lent other than segmented");
                for ((h, f), s) in lent.iter().zip(segs) {
                    assert_eq!((h, f), (&plain, s));
                }
            }
        }
        Err(e) => {
            assert!(lent.is_empty());
            assert!(!accepts(&as_is, accepted));
            if hdr.is_gso() {
                assert_eq!(*segmented, Err(e));
            } else {
                assert_eq!(e, OffloadError::ChecksumOffset);
            }
        }
    }
    r
}

// ===== seeds =====

/// A frame: Ethernet (with `tags` 802.1Q tags), then `l3` (an IP packet).
fn eth(tags: usize, ethertype: u16, l3: &[u8]) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1];
    for t in 0..tags {
        f.extend_from_slice(&[0x81, 0x00, 0x00, 10 + t as u8]);
    }
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(l3);
    f
}

fn ipv4(proto: u8, l4: &[u8]) -> Vec<u8> {
    let tot = (20 + l4.len()) as u16;
    let mut p = vec![
        0x45, 0, 0, 0, 0x12, 0x34, 0x40, 0, 64, proto, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ];
    p[2..4].copy_from_slice(&tot.to_be_bytes());
    let c = !ones_sum(&p, 0);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p.extend_from_slice(l4);
    p
}

fn ipv6(next: u8, ext: &[u8], l4: &[u8]) -> Vec<u8> {
    let plen = (ext.len() + l4.len()) as u16;
    let mut p = vec![0x60, 0, 0, 0, 0, 0, next, 64];
    p[4..6].copy_from_slice(&plen.to_be_bytes());
    p.extend_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    p.extend_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    p.extend_from_slice(ext);
    p.extend_from_slice(l4);
    p
}

fn tcp(payload: usize) -> Vec<u8> {
    let mut t = vec![
        0x30,
        0x39,
        0,
        80,
        0,
        0,
        0x10,
        0,
        0,
        0,
        0,
        1,
        0x50,
        0x18 | 0x01,
        0xff,
        0xff,
        0,
        0,
        0,
        0,
    ];
    t.extend((0..payload).map(|i| (i * 7) as u8));
    t
}

fn udp(payload: usize) -> Vec<u8> {
    let len = (8 + payload) as u16;
    let mut u = vec![0x13, 0x88, 0x17, 0x70, 0, 0, 0, 0];
    u[4..6].copy_from_slice(&len.to_be_bytes());
    u.extend((0..payload).map(|i| (i * 13) as u8));
    u
}

/// A seed: configuration byte, header, frame.
fn seed(cfg: u8, h: VirtioNetHdr, frame: &[u8]) -> Vec<u8> {
    let mut v = vec![cfg];
    v.extend_from_slice(&h.to_bytes()[..10]);
    v.extend_from_slice(frame);
    v
}

fn gso(gso_type: u8, gso_size: u16, csum_start: u16, csum_offset: u16) -> VirtioNetHdr {
    VirtioNetHdr {
        flags: net_hdr::F_NEEDS_CSUM,
        gso_type,
        hdr_len: 0,
        gso_size,
        csum_start,
        csum_offset,
        num_buffers: 0,
    }
}

/// The committed seeds, by file name: super-frames of every GSO type (IPv4
/// and IPv6, tagged, with extension headers), partial checksums, plain
/// frames, and a few the parsers refuse.
pub fn seeds() -> Vec<(String, Vec<u8>)> {
    let none = VirtioNetHdr::default();
    let dst_opts = [17u8, 0, 1, 4, 0, 0, 0, 0];
    let v4_tcp = eth(0, 0x0800, &ipv4(6, &tcp(3000)));
    let v6_tcp = eth(1, 0x86dd, &ipv6(6, &[], &tcp(2000)));
    let v4_udp = eth(0, 0x0800, &ipv4(17, &udp(3000)));
    let v6_udp_ext = eth(0, 0x86dd, &ipv6(60, &dst_opts, &udp(2500)));
    let small_udp = eth(2, 0x0800, &ipv4(17, &udp(100)));
    let mut bad_ihl = v4_tcp.clone();
    bad_ihl[14] = 0x44;
    vec![
        ("tso4-3x1000".into(), seed(0, gso(1, 1000, 34, 16), &v4_tcp)),
        (
            "tso4-lent-as-is".into(),
            seed(0x03, gso(1, 1000, 34, 16), &v4_tcp),
        ),
        (
            "tso6-vlan-3x700".into(),
            seed(0, gso(4, 700, 58, 16), &v6_tcp),
        ),
        ("uso4-4x800".into(), seed(0, gso(5, 800, 34, 6), &v4_udp)),
        ("ufo4-3x1480".into(), seed(0, gso(3, 1480, 34, 6), &v4_udp)),
        (
            "ufo6-ext-2x1448".into(),
            seed(0, gso(3, 1450, 62, 6), &v6_udp_ext),
        ),
        (
            "ufo4-qinq-one".into(),
            seed(0x21, gso(3, 1480, 42, 6), &small_udp),
        ),
        (
            "tso4-small-scratch".into(),
            seed(0x20, gso(1, 9000, 34, 16), &v4_tcp),
        ),
        ("csum-udp".into(), seed(0, gso(0, 0, 50, 6), &small_udp)),
        (
            "csum-offset-outside".into(),
            seed(0, gso(0, 0, 50, 60000), &small_udp),
        ),
        ("plain".into(), seed(0x1f, none, &v6_tcp)),
        ("bad-ihl".into(), seed(0, gso(1, 1000, 34, 16), &bad_ihl)),
        (
            "gso-type-unknown".into(),
            seed(0, gso(2, 1000, 34, 16), &v4_tcp),
        ),
    ]
}
