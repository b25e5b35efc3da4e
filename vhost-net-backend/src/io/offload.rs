// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Software fallbacks for offloads a destination lacks: completing partial
//! checksums and segmenting TSO/UFO/USO super-frames.
//!
//! # Contracts
//!
//! * Pure functions over host byte buffers (an uplink's ring slot, a scratch
//!   buffer): never guest memory.
//! * Input is hostile. Every length, offset and header field is checked;
//!   a malformed or truncated frame returns an [`OffloadError`] and never
//!   panics.
//! * [`Segmenter::segment`] parses the frame's real Ethernet, 802.1Q/802.1ad,
//!   IP and TCP/UDP headers. For a super-frame, the header's `hdr_len`,
//!   `csum_start` and `csum_offset` are hints that may be wrong, so they are
//!   ignored; only `gso_type` and `gso_size` are taken from it. Every
//!   segment gets complete checksums (IPv4 header and TCP/UDP), whatever the
//!   super-frame carried in its checksum fields.
//! * Validation happens before the first segment is emitted: a frame is
//!   either segmented completely (unless the consumer stops early) or not at
//!   all.
//! * Hot path: no allocation. A [`Segmenter`] allocates its scratch buffer
//!   once, when it is created.
//!
//! # What a segment looks like
//!
//! | `gso_type` | segments |
//! |---|---|
//! | `GSO_TCPV4`, `GSO_TCPV6` | headers copied, payload of at most `gso_size` bytes; IPv4 total length, header checksum and ID (+1 per segment), or IPv6 payload length; TCP sequence number advanced; FIN and PSH on the last segment only, CWR on the first only |
//! | `GSO_UDP_L4` (USO) | one UDP datagram per `gso_size` bytes of payload, IPv4 ID +1 per datagram |
//! | `GSO_UDP` (UFO) | the datagram's UDP checksum computed over the whole datagram, then IP fragments of `gso_size` bytes (rounded down to a multiple of 8) of UDP header + data; IPv4 fragments share the ID and clear DF; IPv6 fragments get a Fragment header (inserted after all extension headers) with an ID from the [`Segmenter`] |
//! | `GSO_NONE` | the frame itself, with its partial checksum completed when `F_NEEDS_CSUM` is set |
//!
//! Limits: IPv6 jumbograms, IPv6 Routing headers (the pseudo-header uses the
//! IPv6 destination address as is) and TCP urgent data spanning segments are
//! not handled specially.

use crate::device::bits;
use crate::net_hdr::{self, VirtioNetHdr};
use crate::stats::DropReason;

/// Why a frame could not be checksummed or segmented in software.
///
/// A per-packet outcome: small and `Copy`, to be counted rather than logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum OffloadError {
    /// The frame ends before the headers it announces.
    #[error("frame truncated")]
    Truncated,
    /// `csum_start` + `csum_offset` points outside the frame.
    #[error("checksum offset outside the frame")]
    ChecksumOffset,
    /// Unknown `gso_type`.
    #[error("unknown GSO type {0:#x}")]
    GsoType(u8),
    /// `gso_size` is 0 (or too small for IP fragmentation).
    #[error("invalid GSO size {0}")]
    GsoSize(u16),
    /// Neither IPv4 nor IPv6 after the Ethernet and VLAN headers.
    #[error("not an IP packet")]
    NotIp,
    /// The IP header is malformed (version, header length).
    #[error("malformed IP header")]
    IpHeader,
    /// The packet is already an IP fragment.
    #[error("IP fragment")]
    Fragment,
    /// The transport protocol does not match the GSO type (or IPv6
    /// extension headers hide it).
    #[error("transport protocol does not match the GSO type")]
    Protocol,
    /// The TCP header is malformed (data offset).
    #[error("malformed TCP header")]
    TcpHeader,
    /// A segment would exceed the scratch buffer or the IP length fields.
    #[error("segment too large")]
    TooLarge,
}

impl From<OffloadError> for DropReason {
    /// What a frame the software fallback refused counts as.
    fn from(e: OffloadError) -> Self {
        match e {
            OffloadError::TooLarge => DropReason::TooLong,
            _ => DropReason::Malformed,
        }
    }
}

// ===== checksums =====

/// Adds `data` as big-endian 16-bit words (an odd last byte padded with a
/// zero byte) to the unfolded ones'-complement accumulator `acc`.
///
/// 32-bit words are summed into a 64-bit accumulator; since 2^16 = 1 modulo
/// 2^16 - 1, folding the result gives the 16-bit ones'-complement sum. The
/// accumulator cannot overflow for any slice shorter than 2^32 words.
fn sum_bytes(data: &[u8], mut acc: u64) -> u64 {
    let mut words = data.chunks_exact(4);
    for w in &mut words {
        acc += u64::from(u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
    }
    let rest = words.remainder();
    let mut i = 0;
    if rest.len() >= 2 {
        acc += u64::from(u16::from_be_bytes([rest[0], rest[1]]));
        i = 2;
    }
    if let Some(&b) = rest.get(i) {
        acc += u64::from(b) << 8;
    }
    acc
}

/// Folds an accumulator to a 16-bit ones'-complement sum.
fn fold(mut acc: u64) -> u16 {
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// The Internet checksum (RFC 1071) of `data`: the ones' complement of its
/// ones'-complement sum.
pub fn checksum(data: &[u8]) -> u16 {
    !fold(sum_bytes(data, 0))
}

/// The folded (not complemented) TCP/UDP pseudo-header sum: what a sender
/// stores in the checksum field of a frame it hands over with
/// `F_NEEDS_CSUM`, before the device completes it.
///
/// `src` and `dst` are the IP source and destination addresses (4 bytes for
/// IPv4, 16 for IPv6), `proto` the transport protocol and `l4_len` the
/// length of the transport header plus payload.
pub fn pseudo_header_checksum(src: &[u8], dst: &[u8], proto: u8, l4_len: u32) -> u16 {
    fold(pseudo_sum(src, dst, proto, l4_len))
}

fn pseudo_sum(src: &[u8], dst: &[u8], proto: u8, l4_len: u32) -> u64 {
    let acc = sum_bytes(src, 0);
    let acc = sum_bytes(dst, acc);
    acc + u64::from(proto) + u64::from(l4_len >> 16) + u64::from(l4_len & 0xffff)
}

/// Completes a partial checksum in place, as a device does for
/// `VIRTIO_NET_HDR_F_NEEDS_CSUM`: the Internet checksum of
/// `frame[csum_start..]` (whose checksum field already holds the
/// pseudo-header sum, per virtio semantics) is stored big-endian at
/// `csum_start + csum_offset`.
///
/// A result of 0 is stored as 0xffff (the two are the same number in
/// ones'-complement arithmetic, and UDP reserves 0 for "no checksum"), as
/// Linux does.
///
/// Frames without `F_NEEDS_CSUM` are left alone. For a GSO super-frame this
/// is not enough: use [`Segmenter::segment`].
///
/// # Errors
/// [`OffloadError::ChecksumOffset`] when the checksum field does not lie
/// inside the frame.
pub fn complete_checksum(hdr: &VirtioNetHdr, frame: &mut [u8]) -> Result<(), OffloadError> {
    if !hdr.needs_csum() {
        return Ok(());
    }
    let start = usize::from(hdr.csum_start);
    let field = start + usize::from(hdr.csum_offset);
    if field + 2 > frame.len() {
        return Err(OffloadError::ChecksumOffset);
    }
    let c = match checksum(&frame[start..]) {
        0 => 0xffff,
        c => c,
    };
    frame[field..field + 2].copy_from_slice(&c.to_be_bytes());
    Ok(())
}

// ===== header parsing =====

const ETH_HLEN: usize = 14;
const ETH_P_IPV4: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86dd;
const ETH_P_8021Q: u16 = 0x8100;
const ETH_P_8021AD: u16 = 0x88a8;
const ETH_P_QINQ1: u16 = 0x9100;
/// At most two tags (802.1ad outer + 802.1Q inner).
const MAX_VLAN_TAGS: usize = 2;

const IPPROTO_HOPOPTS: u8 = 0;
const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;
const IPPROTO_ROUTING: u8 = 43;
const IPPROTO_FRAGMENT: u8 = 44;
const IPPROTO_DSTOPTS: u8 = 60;
/// Extension headers walked before giving up.
const MAX_IPV6_EXT: usize = 8;

const IPV4_MIN_HLEN: usize = 20;
const IPV6_HLEN: usize = 40;
const TCP_MIN_HLEN: usize = 20;
const UDP_HLEN: usize = 8;
const FRAG6_HLEN: usize = 8;

const IPV4_DF: u16 = 0x4000;
const IPV4_MF: u16 = 0x2000;
const IPV4_FRAG_MASK: u16 = 0x3fff;

const TCP_FIN: u8 = 0x01;
const TCP_PSH: u8 = 0x08;
const TCP_CWR: u8 = 0x80;

fn get_u16(b: &[u8], off: usize) -> u16 {
    u16::from_be_bytes([b[off], b[off + 1]])
}

fn get_u32(b: &[u8], off: usize) -> u32 {
    u32::from_be_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

fn put_u16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_be_bytes());
}

fn put_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_be_bytes());
}

/// Where the headers of a frame are, as parsed from the frame itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Layout {
    /// Offset of the IP header.
    l3: usize,
    /// IPv4 (else IPv6).
    ipv4: bool,
    /// Offset of the transport header (after IPv6 extension headers).
    l4: usize,
    /// Transport protocol.
    proto: u8,
    /// Offset of the byte that names `proto` (IPv4 protocol field, or the
    /// IPv6 next-header field of the last header before the transport).
    proto_off: usize,
    /// End of the transport header (start of the payload).
    payload: usize,
}

impl Layout {
    /// Offset and length of the source and destination addresses.
    fn addrs(&self) -> (usize, usize) {
        if self.ipv4 {
            (self.l3 + 12, 4)
        } else {
            (self.l3 + 8, 16)
        }
    }

    /// The unfolded pseudo-header sum of `b` for a transport length.
    fn pseudo(&self, b: &[u8], l4_len: u32) -> u64 {
        let (a, n) = self.addrs();
        pseudo_sum(&b[a..a + n], &b[a + n..a + 2 * n], self.proto, l4_len)
    }
}

/// Parses Ethernet, up to two VLAN tags, IPv4 or IPv6 (with Hop-by-Hop,
/// Routing and Destination Options headers) and a TCP or UDP header.
fn parse(frame: &[u8]) -> Result<Layout, OffloadError> {
    if frame.len() < ETH_HLEN {
        return Err(OffloadError::Truncated);
    }
    let mut ethertype = get_u16(frame, 12);
    let mut l3 = ETH_HLEN;
    for _ in 0..MAX_VLAN_TAGS {
        if !matches!(ethertype, ETH_P_8021Q | ETH_P_8021AD | ETH_P_QINQ1) {
            break;
        }
        if frame.len() < l3 + 4 {
            return Err(OffloadError::Truncated);
        }
        ethertype = get_u16(frame, l3 + 2);
        l3 += 4;
    }
    let (ipv4, l4, proto, proto_off) = match ethertype {
        ETH_P_IPV4 => {
            if frame.len() < l3 + IPV4_MIN_HLEN {
                return Err(OffloadError::Truncated);
            }
            if frame[l3] >> 4 != 4 {
                return Err(OffloadError::IpHeader);
            }
            let ihl = usize::from(frame[l3] & 0x0f) * 4;
            if ihl < IPV4_MIN_HLEN {
                return Err(OffloadError::IpHeader);
            }
            if frame.len() < l3 + ihl {
                return Err(OffloadError::Truncated);
            }
            if get_u16(frame, l3 + 6) & (IPV4_MF | 0x1fff) != 0 {
                return Err(OffloadError::Fragment);
            }
            (true, l3 + ihl, frame[l3 + 9], l3 + 9)
        }
        ETH_P_IPV6 => {
            if frame.len() < l3 + IPV6_HLEN {
                return Err(OffloadError::Truncated);
            }
            if frame[l3] >> 4 != 6 {
                return Err(OffloadError::IpHeader);
            }
            let mut nh_off = l3 + 6;
            let mut off = l3 + IPV6_HLEN;
            let mut found = false;
            for _ in 0..=MAX_IPV6_EXT {
                match frame[nh_off] {
                    IPPROTO_TCP | IPPROTO_UDP => {
                        found = true;
                        break;
                    }
                    IPPROTO_HOPOPTS | IPPROTO_ROUTING | IPPROTO_DSTOPTS => {
                        if frame.len() < off + 2 {
                            return Err(OffloadError::Truncated);
                        }
                        let len = (usize::from(frame[off + 1]) + 1) * 8;
                        nh_off = off;
                        off += len;
                        if frame.len() < off {
                            return Err(OffloadError::Truncated);
                        }
                    }
                    IPPROTO_FRAGMENT => return Err(OffloadError::Fragment),
                    _ => return Err(OffloadError::Protocol),
                }
            }
            if !found {
                return Err(OffloadError::Protocol);
            }
            (false, off, frame[nh_off], nh_off)
        }
        _ => return Err(OffloadError::NotIp),
    };
    let payload = match proto {
        IPPROTO_TCP => {
            if frame.len() < l4 + TCP_MIN_HLEN {
                return Err(OffloadError::Truncated);
            }
            let doff = usize::from(frame[l4 + 12] >> 4) * 4;
            if doff < TCP_MIN_HLEN {
                return Err(OffloadError::TcpHeader);
            }
            if frame.len() < l4 + doff {
                return Err(OffloadError::Truncated);
            }
            l4 + doff
        }
        IPPROTO_UDP => {
            if frame.len() < l4 + UDP_HLEN {
                return Err(OffloadError::Truncated);
            }
            l4 + UDP_HLEN
        }
        _ => return Err(OffloadError::Protocol),
    };
    Ok(Layout {
        l3,
        ipv4,
        l4,
        proto,
        proto_off,
        payload,
    })
}

/// Sets the IP length field of a segment of `seg_len` bytes and, for IPv4,
/// the ID and the header checksum. `frag` is the IPv4 flags/fragment-offset
/// field to store (None: keep the one copied from the super-frame).
fn fix_ip(
    s: &mut [u8],
    lay: &Layout,
    id: Option<u16>,
    frag: Option<u16>,
) -> Result<(), OffloadError> {
    let l3 = lay.l3;
    if lay.ipv4 {
        let tot = u16::try_from(s.len() - l3).map_err(|_| OffloadError::TooLarge)?;
        put_u16(s, l3 + 2, tot);
        if let Some(id) = id {
            put_u16(s, l3 + 4, id);
        }
        if let Some(frag) = frag {
            put_u16(s, l3 + 6, frag);
        }
        let ihl = lay.l4 - l3;
        put_u16(s, l3 + 10, 0);
        let c = checksum(&s[l3..l3 + ihl]);
        put_u16(s, l3 + 10, c);
    } else {
        let plen = u16::try_from(s.len() - l3 - IPV6_HLEN).map_err(|_| OffloadError::TooLarge)?;
        put_u16(s, l3 + 4, plen);
    }
    Ok(())
}

/// Computes and stores a full TCP or UDP checksum over `s[l4..]`.
fn fix_l4_checksum(s: &mut [u8], lay: &Layout, l4: usize) {
    let field = l4 + if lay.proto == IPPROTO_TCP { 16 } else { 6 };
    put_u16(s, field, 0);
    // Invariant: segments are at most the scratch length (< 2^32).
    let l4_len = (s.len() - l4) as u32;
    let c = !fold(sum_bytes(&s[l4..], lay.pseudo(s, l4_len)));
    let c = if c == 0 && lay.proto == IPPROTO_UDP {
        0xffff
    } else {
        c
    };
    put_u16(s, field, c);
}

// ===== impl Segmenter =====

/// Splits GSO super-frames into wire-size frames in software, through a
/// scratch buffer allocated once.
///
/// Hot path: [`Segmenter::segment`] allocates nothing; each segment is
/// built in the scratch buffer and lent to the consumer.
#[derive(Debug)]
pub struct Segmenter {
    scratch: Vec<u8>,
    /// Next IPv6 fragment identification (UFO over IPv6).
    frag_id: u32,
}

impl Default for Segmenter {
    fn default() -> Self {
        Self::new()
    }
}

impl Segmenter {
    /// Scratch size of [`Segmenter::new`]: the largest frame the device
    /// accepts ([`crate::device::MAX_FRAME_LEN`]), plus room for a VLAN tag
    /// and an IPv6 Fragment header.
    pub const DEFAULT_CAPACITY: usize = crate::device::MAX_FRAME_LEN + 4 + FRAG6_HLEN;

    /// A segmenter whose segments (and `GSO_NONE` frames) may be up to
    /// [`Segmenter::DEFAULT_CAPACITY`] bytes.
    pub fn new() -> Self {
        Self::with_capacity(Self::DEFAULT_CAPACITY)
    }

    /// A segmenter whose segments may be up to `capacity` bytes.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            scratch: vec![0; capacity],
            frag_id: 0x5648_5500,
        }
    }

    /// Splits `frame`, described by `hdr`, into frames of at most
    /// `hdr.gso_size` bytes of payload each, and lends each one to `out`
    /// in order. `out` returns `false` to stop early.
    ///
    /// Returns the number of frames lent. A frame without GSO is lent as
    /// one frame (copied, with its checksum completed, if it carries
    /// `F_NEEDS_CSUM`; as is otherwise). A super-frame whose payload fits
    /// in one segment is lent as one frame with complete checksums.
    ///
    /// See the [module documentation](self) for what each GSO type yields.
    ///
    /// # Errors
    /// The frame is malformed or cannot be segmented ([`OffloadError`]);
    /// nothing was lent.
    pub fn segment(
        &mut self,
        hdr: &VirtioNetHdr,
        frame: &[u8],
        out: &mut dyn FnMut(&[u8]) -> bool,
    ) -> Result<usize, OffloadError> {
        let kind = hdr.gso_type & !net_hdr::GSO_ECN;
        match kind {
            net_hdr::GSO_NONE => self.plain(hdr, frame, out),
            net_hdr::GSO_TCPV4 | net_hdr::GSO_TCPV6 | net_hdr::GSO_UDP_L4 => {
                if hdr.gso_size == 0 {
                    return Err(OffloadError::GsoSize(0));
                }
                let lay = parse(frame)?;
                let want = match kind {
                    net_hdr::GSO_TCPV4 => (Some(true), IPPROTO_TCP),
                    net_hdr::GSO_TCPV6 => (Some(false), IPPROTO_TCP),
                    _ => (None, IPPROTO_UDP),
                };
                if want.1 != lay.proto {
                    return Err(OffloadError::Protocol);
                }
                if want.0.is_some_and(|v4| v4 != lay.ipv4) {
                    return Err(OffloadError::Protocol);
                }
                self.split(&lay, usize::from(hdr.gso_size), frame, out)
            }
            net_hdr::GSO_UDP => {
                let lay = parse(frame)?;
                if lay.proto != IPPROTO_UDP {
                    return Err(OffloadError::Protocol);
                }
                self.fragment(&lay, hdr.gso_size, frame, out)
            }
            _ => Err(OffloadError::GsoType(hdr.gso_type)),
        }
    }

    /// `GSO_NONE`: the frame itself, checksummed if needed.
    fn plain(
        &mut self,
        hdr: &VirtioNetHdr,
        frame: &[u8],
        out: &mut dyn FnMut(&[u8]) -> bool,
    ) -> Result<usize, OffloadError> {
        if !hdr.needs_csum() {
            out(frame);
            return Ok(1);
        }
        let s = self
            .scratch
            .get_mut(..frame.len())
            .ok_or(OffloadError::TooLarge)?;
        s.copy_from_slice(frame);
        complete_checksum(hdr, s)?;
        out(s);
        Ok(1)
    }

    /// TSO and USO: one frame per `mss` bytes of payload.
    fn split(
        &mut self,
        lay: &Layout,
        mss: usize,
        frame: &[u8],
        out: &mut dyn FnMut(&[u8]) -> bool,
    ) -> Result<usize, OffloadError> {
        let hlen = lay.payload;
        let payload = &frame[hlen..];
        let first = payload.len().min(mss);
        if hlen + first > self.scratch.len() {
            return Err(OffloadError::TooLarge);
        }
        // The largest segment must fit the IP length fields.
        let longest = hlen + first - lay.l3;
        if longest > usize::from(u16::MAX) + if lay.ipv4 { 0 } else { IPV6_HLEN } {
            return Err(OffloadError::TooLarge);
        }
        let count = payload.len().div_ceil(mss).max(1);
        let tcp = lay.proto == IPPROTO_TCP;
        let l4 = lay.l4;
        let id0 = if lay.ipv4 {
            get_u16(frame, lay.l3 + 4)
        } else {
            0
        };
        let seq0 = if tcp { get_u32(frame, l4 + 4) } else { 0 };
        let flags0 = if tcp { frame[l4 + 13] } else { 0 };

        for i in 0..count {
            let start = i * mss;
            let chunk = &payload[start..(start + mss).min(payload.len())];
            let s = &mut self.scratch[..hlen + chunk.len()];
            s[..hlen].copy_from_slice(&frame[..hlen]);
            s[hlen..].copy_from_slice(chunk);
            // Invariant: i < 2^16 whenever it matters (IDs wrap by design).
            fix_ip(s, lay, Some(id0.wrapping_add(i as u16)), None)?;
            if tcp {
                put_u32(s, l4 + 4, seq0.wrapping_add(start as u32));
                let mut flags = flags0;
                if i + 1 != count {
                    flags &= !(TCP_FIN | TCP_PSH);
                }
                if i != 0 {
                    flags &= !TCP_CWR;
                }
                s[l4 + 13] = flags;
            } else {
                let ulen = (s.len() - l4) as u16;
                put_u16(s, l4 + 4, ulen);
            }
            fix_l4_checksum(s, lay, l4);
            if !out(s) {
                return Ok(i + 1);
            }
        }
        Ok(count)
    }

    /// UFO: the UDP checksum over the whole datagram, then IP fragments.
    fn fragment(
        &mut self,
        lay: &Layout,
        gso_size: u16,
        frame: &[u8],
        out: &mut dyn FnMut(&[u8]) -> bool,
    ) -> Result<usize, OffloadError> {
        let l4 = lay.l4;
        let dgram_len = frame.len() - l4;
        let ulen = u16::try_from(dgram_len).map_err(|_| OffloadError::TooLarge)?;
        // The UDP checksum of the whole datagram, with its length set.
        let mut acc = lay.pseudo(frame, u32::from(ulen));
        acc = sum_bytes(&frame[l4..l4 + 4], acc) + u64::from(ulen);
        acc = sum_bytes(&frame[lay.payload..], acc);
        let ucsum = match !fold(acc) {
            0 => 0xffff,
            c => c,
        };

        if dgram_len <= usize::from(gso_size) {
            // Not really a super-frame: one datagram.
            let s = self
                .scratch
                .get_mut(..frame.len())
                .ok_or(OffloadError::TooLarge)?;
            s.copy_from_slice(frame);
            put_u16(s, l4 + 4, ulen);
            put_u16(s, l4 + 6, ucsum);
            fix_ip(s, lay, None, None)?;
            out(s);
            return Ok(1);
        }
        let step = usize::from(gso_size) & !7;
        if step == 0 {
            return Err(OffloadError::GsoSize(gso_size));
        }
        // Unfragmentable part, then (IPv6) the Fragment header.
        let hlen = if lay.ipv4 { l4 } else { l4 + FRAG6_HLEN };
        if hlen + step > self.scratch.len() {
            return Err(OffloadError::TooLarge);
        }
        if hlen + step - lay.l3 > usize::from(u16::MAX) + if lay.ipv4 { 0 } else { IPV6_HLEN } {
            return Err(OffloadError::TooLarge);
        }
        let count = dgram_len.div_ceil(step);
        let v4_frag = if lay.ipv4 {
            get_u16(frame, lay.l3 + 6) & !(IPV4_DF | IPV4_FRAG_MASK)
        } else {
            0
        };
        let ident = self.frag_id;
        if !lay.ipv4 {
            self.frag_id = self.frag_id.wrapping_add(1);
        }

        for i in 0..count {
            let off = i * step;
            let chunk = &frame[l4 + off..(l4 + off + step).min(frame.len())];
            let more = i + 1 != count;
            let s = &mut self.scratch[..hlen + chunk.len()];
            s[..l4].copy_from_slice(&frame[..l4]);
            s[hlen..].copy_from_slice(chunk);
            if i == 0 {
                put_u16(s, hlen + 4, ulen);
                put_u16(s, hlen + 6, ucsum);
            }
            // Invariant: off < 2^16 (the datagram length fits a u16).
            let units = (off / 8) as u16;
            if lay.ipv4 {
                let frag = v4_frag | units | if more { IPV4_MF } else { 0 };
                fix_ip(s, lay, None, Some(frag))?;
            } else {
                s[lay.proto_off] = IPPROTO_FRAGMENT;
                s[l4] = IPPROTO_UDP;
                s[l4 + 1] = 0;
                put_u16(s, l4 + 2, (units << 3) | u16::from(more));
                put_u32(s, l4 + 4, ident);
                fix_ip(s, lay, None, None)?;
            }
            if !out(s) {
                return Ok(i + 1);
            }
        }
        Ok(count)
    }
}

/// How many frames [`Segmenter::segment`] makes of `frame` (1 for a frame
/// without GSO), from its parsed headers; nothing is copied.
///
/// # Errors
/// As [`Segmenter::segment`], for the header checks (not for the scratch
/// size).
pub fn segment_count(hdr: &VirtioNetHdr, frame: &[u8]) -> Result<usize, OffloadError> {
    let kind = hdr.gso_type & !net_hdr::GSO_ECN;
    let size = usize::from(hdr.gso_size);
    match kind {
        net_hdr::GSO_NONE => Ok(1),
        net_hdr::GSO_TCPV4 | net_hdr::GSO_TCPV6 | net_hdr::GSO_UDP_L4 => {
            if size == 0 {
                return Err(OffloadError::GsoSize(0));
            }
            let lay = parse(frame)?;
            Ok((frame.len() - lay.payload).div_ceil(size).max(1))
        }
        net_hdr::GSO_UDP => {
            let lay = parse(frame)?;
            let dgram = frame.len() - lay.l4;
            if dgram <= size {
                return Ok(1);
            }
            match size & !7 {
                0 => Err(OffloadError::GsoSize(hdr.gso_size)),
                step => Ok(dgram.div_ceil(step)),
            }
        }
        _ => Err(OffloadError::GsoType(hdr.gso_type)),
    }
}

// ===== offload policy helpers for uplinks and destinations =====

/// Whether a frame with header `hdr` may be handed as is to a consumer that
/// accepts the offloads `accepted` (driver-side `GUEST_*` feature bits,
/// [`crate::device::bits`]).
pub fn fits(hdr: &VirtioNetHdr, accepted: u64) -> bool {
    if hdr.needs_csum() && accepted & bits::GUEST_CSUM == 0 {
        return false;
    }
    if hdr.gso_type & net_hdr::GSO_ECN != 0 && accepted & bits::GUEST_ECN == 0 {
        return false;
    }
    let need = match hdr.gso_type & !net_hdr::GSO_ECN {
        net_hdr::GSO_NONE => 0,
        net_hdr::GSO_TCPV4 => bits::GUEST_TSO4,
        net_hdr::GSO_TCPV6 => bits::GUEST_TSO6,
        net_hdr::GSO_UDP => bits::GUEST_UFO,
        // No GUEST_USO bits in this device.
        _ => return false,
    };
    accepted & need == need
}

/// Lends `frame` to `f` with a header that uses only the offloads in
/// `accepted` (`GUEST_*` bits): as is when it [`fits`]; with its partial
/// checksum completed in place when that is all it needs; otherwise as the
/// segments [`Segmenter::segment`] makes. Returns the number of frames lent.
///
/// Without `GUEST_CSUM` in `accepted`, lent headers carry no flags at all
/// (virtio 1.x 5.1.6.3: the device sets `flags` to zero then); with it,
/// frames completed here are marked `F_DATA_VALID`.
///
/// Hot path: no allocation (segments are built in `seg`'s scratch buffer).
///
/// # Errors
/// The frame needed software work and is malformed ([`OffloadError`]);
/// nothing was lent.
pub fn lend_within(
    hdr: &VirtioNetHdr,
    frame: &mut [u8],
    accepted: u64,
    seg: &mut Segmenter,
    f: &mut dyn FnMut(&VirtioNetHdr, &[u8]),
) -> Result<usize, OffloadError> {
    let mut hdr = *hdr;
    hdr.num_buffers = 0;
    let csum_ok = accepted & bits::GUEST_CSUM != 0;
    if !csum_ok {
        hdr.flags &= !net_hdr::F_DATA_VALID;
    }
    if fits(&hdr, accepted) {
        f(&hdr, frame);
        return Ok(1);
    }
    let plain = VirtioNetHdr {
        flags: if csum_ok { net_hdr::F_DATA_VALID } else { 0 },
        ..VirtioNetHdr::default()
    };
    if !hdr.is_gso() {
        complete_checksum(&hdr, frame)?;
        f(&plain, frame);
        return Ok(1);
    }
    seg.segment(&hdr, frame, &mut |s| {
        f(&plain, s);
        true
    })
}

/// Most segments the kernel takes in one USO super-frame
/// (`UDP_MAX_SEGMENTS`).
const UDP_MAX_SEGMENTS: usize = 64;

/// Checks a header to transmit through a Linux packet socket or TAP device
/// the way the kernel's `virtio_net_hdr_to_skb` will, and returns the header
/// to hand over: `num_buffers` and every flag but `F_NEEDS_CSUM` cleared,
/// the checksum fields zeroed without it, `hdr_len` (a hint) clamped to the
/// frame.
///
/// # Errors
/// [`DropReason::OffloadUnsupported`] for what the kernel would refuse: an unknown GSO
/// type; GSO without `F_NEEDS_CSUM` (virtio 1.x 5.1.6.2 requires it) or with
/// `gso_size` 0; ECN with USO; a checksum field outside the frame; a TCP
/// checksum offset other than 16 or a USO one other than 6; more than 64
/// USO segments.
pub fn kernel_tx_header(hdr: &VirtioNetHdr, len: usize) -> Result<VirtioNetHdr, DropReason> {
    let mut h = *hdr;
    h.num_buffers = 0;
    h.flags &= net_hdr::F_NEEDS_CSUM;
    let kind = h.gso_type & !net_hdr::GSO_ECN;
    let thlen = match kind {
        net_hdr::GSO_NONE => 0,
        net_hdr::GSO_TCPV4 | net_hdr::GSO_TCPV6 => TCP_MIN_HLEN,
        net_hdr::GSO_UDP | net_hdr::GSO_UDP_L4 => UDP_HLEN,
        _ => return Err(DropReason::OffloadUnsupported),
    };
    if kind != net_hdr::GSO_NONE {
        if h.gso_size == 0 || !h.needs_csum() {
            return Err(DropReason::OffloadUnsupported);
        }
        if kind == net_hdr::GSO_UDP_L4 && h.gso_type & net_hdr::GSO_ECN != 0 {
            return Err(DropReason::OffloadUnsupported);
        }
    }
    if h.needs_csum() {
        let start = usize::from(h.csum_start);
        let off = usize::from(h.csum_offset);
        if start + thlen.max(off + 2) > len {
            return Err(DropReason::OffloadUnsupported);
        }
        match kind {
            net_hdr::GSO_TCPV4 | net_hdr::GSO_TCPV6 if off != 16 => {
                return Err(DropReason::OffloadUnsupported)
            }
            net_hdr::GSO_UDP_L4 => {
                let payload = len - start - UDP_HLEN;
                if off != 6 || payload > usize::from(h.gso_size) * UDP_MAX_SEGMENTS {
                    return Err(DropReason::OffloadUnsupported);
                }
            }
            _ => {}
        }
    } else {
        h.csum_start = 0;
        h.csum_offset = 0;
    }
    if usize::from(h.hdr_len) > len {
        // Invariant: callers pass frames of at most 64 KiB + headers; a
        // longer one keeps its hint saturated.
        h.hdr_len = u16::try_from(len).unwrap_or(u16::MAX);
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net_hdr::{F_NEEDS_CSUM, GSO_ECN, GSO_NONE, GSO_TCPV4, GSO_TCPV6, GSO_UDP};
    use crate::net_hdr::{GSO_UDP_L4, MAX_HDR_LEN};

    const SRC4: [u8; 4] = [192, 168, 0, 1];
    const DST4: [u8; 4] = [192, 168, 0, 199];
    const SRC6: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    const DST6: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

    #[test]
    fn rfc1071_example() {
        // RFC 1071 section 3: the sum of these words is 0xddf2.
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum_bytes(&data, 0)), 0xddf2);
        assert_eq!(checksum(&data), !0xddf2);
        // Odd length: the last byte is padded with zero.
        assert_eq!(checksum(&[0x01]), !0x0100);
        assert_eq!(checksum(&[0x00, 0x01, 0xf2]), !0xf201);
        assert_eq!(checksum(&[]), 0xffff);
    }

    #[test]
    fn ipv4_header_known_answer() {
        // A classic captured header whose checksum is 0xb861.
        let mut h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(checksum(&h), 0xb861);
        h[10..12].copy_from_slice(&[0xb8, 0x61]);
        assert_eq!(checksum(&h), 0);
    }

    /// Chunk boundaries of the 32-bit summing do not change the result.
    #[test]
    fn wide_sum_matches_word_sum() {
        let mut x = 0x1234_5678u32;
        let data: Vec<u8> = (0..1001)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect();
        for n in 0..data.len() {
            let d = &data[..n];
            let mut acc = 0u32;
            for w in d.chunks(2) {
                let v = if w.len() == 2 {
                    u16::from_be_bytes([w[0], w[1]])
                } else {
                    u16::from(w[0]) << 8
                };
                acc += u32::from(v);
                acc = (acc & 0xffff) + (acc >> 16);
            }
            assert_eq!(checksum(d), !(acc as u16), "len {n}");
        }
    }

    // ----- frame builders -----

    fn eth(buf: &mut Vec<u8>, vlans: &[u16], ethertype: u16) {
        buf.extend_from_slice(&[0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1]);
        for (i, &tci) in vlans.iter().enumerate() {
            let tpid = if i + 1 < vlans.len() {
                ETH_P_8021AD
            } else {
                ETH_P_8021Q
            };
            buf.extend_from_slice(&tpid.to_be_bytes());
            buf.extend_from_slice(&tci.to_be_bytes());
        }
        buf.extend_from_slice(&ethertype.to_be_bytes());
    }

    fn ipv4(buf: &mut Vec<u8>, proto: u8, l4_len: usize, options: &[u8]) {
        let ihl = (20 + options.len()) / 4;
        let tot = (ihl * 4 + l4_len) as u16;
        let start = buf.len();
        buf.push(0x40 | ihl as u8);
        buf.push(0);
        buf.extend_from_slice(&tot.to_be_bytes());
        buf.extend_from_slice(&[0x12, 0x34, 0x40, 0x00, 64, proto, 0, 0]);
        buf.extend_from_slice(&SRC4);
        buf.extend_from_slice(&DST4);
        buf.extend_from_slice(options);
        let c = checksum(&buf[start..]);
        buf[start + 10..start + 12].copy_from_slice(&c.to_be_bytes());
    }

    fn ipv6(buf: &mut Vec<u8>, proto: u8, l4_len: usize, ext: &[u8]) {
        let nh = if ext.is_empty() {
            proto
        } else {
            IPPROTO_HOPOPTS
        };
        buf.extend_from_slice(&[0x60, 0, 0, 0]);
        buf.extend_from_slice(&((ext.len() + l4_len) as u16).to_be_bytes());
        buf.push(nh);
        buf.push(64);
        buf.extend_from_slice(&SRC6);
        buf.extend_from_slice(&DST6);
        buf.extend_from_slice(ext);
    }

    fn payload(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    struct Built {
        frame: Vec<u8>,
        hdr: VirtioNetHdr,
    }

    /// A TCP super-frame as a guest hands it over: pseudo-header sum in the
    /// checksum field, `F_NEEDS_CSUM`.
    fn tcp_frame(v6: bool, vlans: &[u16], flags: u8, n: usize, mss: u16) -> Built {
        let mut f = Vec::new();
        eth(&mut f, vlans, if v6 { ETH_P_IPV6 } else { ETH_P_IPV4 });
        let l4_len = 32 + n;
        if v6 {
            ipv6(&mut f, IPPROTO_TCP, l4_len, &[]);
        } else {
            ipv4(&mut f, IPPROTO_TCP, l4_len, &[]);
        }
        let l4 = f.len();
        f.extend_from_slice(&[0x30, 0x39, 0x00, 0x50]); // ports 12345 -> 80
        f.extend_from_slice(&0xffff_fff0u32.to_be_bytes()); // seq (wraps)
        f.extend_from_slice(&7u32.to_be_bytes()); // ack
        f.push(8 << 4); // data offset: 32 bytes
        f.push(flags);
        f.extend_from_slice(&[0x01, 0x00, 0, 0, 0, 0]); // window, csum, urg
        f.extend_from_slice(&[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2]); // NOP NOP TS
        f.extend_from_slice(&payload(n));
        let pseudo = if v6 {
            pseudo_header_checksum(&SRC6, &DST6, IPPROTO_TCP, l4_len as u32)
        } else {
            pseudo_header_checksum(&SRC4, &DST4, IPPROTO_TCP, l4_len as u32)
        };
        f[l4 + 16..l4 + 18].copy_from_slice(&pseudo.to_be_bytes());
        let hdr = VirtioNetHdr {
            flags: F_NEEDS_CSUM,
            gso_type: if v6 { GSO_TCPV6 } else { GSO_TCPV4 },
            hdr_len: (l4 + 32) as u16,
            gso_size: mss,
            csum_start: l4 as u16,
            csum_offset: 16,
            num_buffers: 0,
        };
        Built { frame: f, hdr }
    }

    fn udp_frame(v6: bool, vlans: &[u16], ext: &[u8], n: usize, gso: u8, size: u16) -> Built {
        let mut f = Vec::new();
        eth(&mut f, vlans, if v6 { ETH_P_IPV6 } else { ETH_P_IPV4 });
        let l4_len = 8 + n;
        if v6 {
            ipv6(&mut f, IPPROTO_UDP, l4_len, ext);
        } else {
            ipv4(&mut f, IPPROTO_UDP, l4_len, ext);
        }
        let l4 = f.len();
        f.extend_from_slice(&[0x13, 0x88, 0x17, 0x70]); // 5000 -> 6000
        f.extend_from_slice(&(l4_len as u16).to_be_bytes());
        let pseudo = if v6 {
            pseudo_header_checksum(&SRC6, &DST6, IPPROTO_UDP, l4_len as u32)
        } else {
            pseudo_header_checksum(&SRC4, &DST4, IPPROTO_UDP, l4_len as u32)
        };
        f.extend_from_slice(&pseudo.to_be_bytes());
        f.extend_from_slice(&payload(n));
        let hdr = VirtioNetHdr {
            flags: F_NEEDS_CSUM,
            gso_type: gso,
            hdr_len: (l4 + 8) as u16,
            gso_size: size,
            csum_start: l4 as u16,
            csum_offset: 6,
            num_buffers: 0,
        };
        Built { frame: f, hdr }
    }

    /// Independent check of one output frame: returns its layout after
    /// verifying the IPv4 header checksum, the IP length fields and, for a
    /// non-fragment, the transport checksum.
    fn verify(frame: &[u8]) -> (usize, bool, usize) {
        let mut l3 = 14;
        let mut et = get_u16(frame, 12);
        while et == ETH_P_8021Q || et == ETH_P_8021AD {
            et = get_u16(frame, l3 + 2);
            l3 += 4;
        }
        let v4 = et == ETH_P_IPV4;
        let (l4, proto, src, dst, frag) = if v4 {
            let ihl = usize::from(frame[l3] & 15) * 4;
            assert_eq!(checksum(&frame[l3..l3 + ihl]), 0, "IPv4 header checksum");
            assert_eq!(usize::from(get_u16(frame, l3 + 2)), frame.len() - l3);
            let frag = get_u16(frame, l3 + 6) & 0x3fff != 0;
            (
                l3 + ihl,
                frame[l3 + 9],
                frame[l3 + 12..l3 + 16].to_vec(),
                frame[l3 + 16..l3 + 20].to_vec(),
                frag,
            )
        } else {
            assert_eq!(usize::from(get_u16(frame, l3 + 4)), frame.len() - l3 - 40);
            let mut nh = frame[l3 + 6];
            let mut off = l3 + 40;
            let mut frag = false;
            while nh != IPPROTO_TCP && nh != IPPROTO_UDP {
                if nh == IPPROTO_FRAGMENT {
                    frag = true;
                    nh = frame[off];
                    off += 8;
                    break;
                }
                nh = frame[off];
                off += (usize::from(frame[off + 1]) + 1) * 8;
            }
            (
                off,
                nh,
                frame[l3 + 8..l3 + 24].to_vec(),
                frame[l3 + 24..l3 + 40].to_vec(),
                frag,
            )
        };
        if !frag {
            let len = (frame.len() - l4) as u32;
            let sum = sum_bytes(&frame[l4..], pseudo_sum(&src, &dst, proto, len));
            assert_eq!(fold(sum), 0xffff, "transport checksum");
            if proto == IPPROTO_UDP {
                assert_eq!(usize::from(get_u16(frame, l4 + 4)), frame.len() - l4);
            }
        }
        (l4, frag, l3)
    }

    fn collect(seg: &mut Segmenter, b: &Built) -> Result<Vec<Vec<u8>>, OffloadError> {
        let mut v = Vec::new();
        let n = seg.segment(&b.hdr, &b.frame, &mut |s| {
            v.push(s.to_vec());
            true
        })?;
        assert_eq!(n, v.len());
        assert_eq!(segment_count(&b.hdr, &b.frame), Ok(n), "segment_count");
        Ok(v)
    }

    #[test]
    fn complete_checksum_tcp_and_udp() {
        for v6 in [false, true] {
            let mut b = tcp_frame(v6, &[], 0x18, 100, 1448);
            b.hdr.gso_type = GSO_NONE;
            complete_checksum(&b.hdr, &mut b.frame).unwrap();
            verify(&b.frame);
            let mut b = udp_frame(v6, &[7], &[], 33, GSO_NONE, 0);
            complete_checksum(&b.hdr, &mut b.frame).unwrap();
            verify(&b.frame);
        }
    }

    /// Known answer: a UDP datagram whose checksum was computed with an
    /// independent implementation (Python, RFC 768).
    #[test]
    fn complete_checksum_known_answer() {
        let mut f = Vec::new();
        eth(&mut f, &[], ETH_P_IPV4);
        ipv4(&mut f, IPPROTO_UDP, 8 + 4, &[]);
        let l4 = f.len();
        f.extend_from_slice(&[0x13, 0x88, 0x17, 0x70, 0x00, 0x0c]);
        let pseudo = pseudo_header_checksum(&SRC4, &DST4, IPPROTO_UDP, 12);
        assert_eq!(pseudo, 0x8236);
        f.extend_from_slice(&pseudo.to_be_bytes());
        f.extend_from_slice(b"ping");
        let hdr = VirtioNetHdr {
            flags: F_NEEDS_CSUM,
            csum_start: l4 as u16,
            csum_offset: 6,
            ..Default::default()
        };
        complete_checksum(&hdr, &mut f).unwrap();
        assert_eq!(get_u16(&f, l4 + 6), 0x73f4);
    }

    /// Known answers for TCP over IPv6 (a whole frame) and for the second
    /// segment of a TCPv4 super-frame (IP header and TCP checksums), from an
    /// independent implementation (Python).
    #[test]
    fn tcp_known_answers() {
        let mut b = tcp_frame(true, &[], 0x18, 100, 1448);
        b.hdr.gso_type = GSO_NONE;
        complete_checksum(&b.hdr, &mut b.frame).unwrap();
        assert_eq!(get_u16(&b.frame, 14 + 40 + 16), 0xd3e5);

        let b = tcp_frame(false, &[], 0x19, 3000, 1448);
        let segs = collect(&mut Segmenter::new(), &b).unwrap();
        assert_eq!(segs.len(), 3);
        assert_eq!(get_u16(&segs[1], 14 + 10), 0xa0ce);
        assert_eq!(get_u16(&segs[1], 14 + 20 + 16), 0x3782);
    }

    #[test]
    fn complete_checksum_zero_becomes_ffff() {
        // Data whose checksum folds to 0: one word 0xffff.
        let mut f = [0xff, 0xff, 0x00, 0x00];
        let hdr = VirtioNetHdr {
            flags: F_NEEDS_CSUM,
            csum_start: 0,
            csum_offset: 2,
            ..Default::default()
        };
        complete_checksum(&hdr, &mut f).unwrap();
        assert_eq!(f, [0xff, 0xff, 0xff, 0xff]);
    }

    #[test]
    fn complete_checksum_bounds() {
        let hdr = |start, off| VirtioNetHdr {
            flags: F_NEEDS_CSUM,
            csum_start: start,
            csum_offset: off,
            ..Default::default()
        };
        let mut f = [0u8; 40];
        assert_eq!(
            complete_checksum(&hdr(38, 1), &mut f),
            Err(OffloadError::ChecksumOffset)
        );
        assert_eq!(
            complete_checksum(&hdr(u16::MAX, u16::MAX), &mut f),
            Err(OffloadError::ChecksumOffset)
        );
        assert_eq!(
            complete_checksum(&hdr(0, 39), &mut f),
            Err(OffloadError::ChecksumOffset)
        );
        assert!(complete_checksum(&hdr(38, 0), &mut f).is_ok());
        assert!(complete_checksum(&hdr(0, 38), &mut f).is_ok());
        // Without NEEDS_CSUM nothing is checked or written.
        let mut none = hdr(1000, 1000);
        none.flags = 0;
        let mut g = [1u8; 4];
        assert!(complete_checksum(&none, &mut g).is_ok());
        assert_eq!(g, [1; 4]);
        assert!(complete_checksum(&hdr(0, 0), &mut []).is_err());
    }

    fn check_tcp(v6: bool, vlans: &[u16], n: usize, mss: u16, flags: u8) {
        let b = tcp_frame(v6, vlans, flags, n, mss);
        let segs = collect(&mut Segmenter::new(), &b).unwrap();
        let l4 = usize::from(b.hdr.csum_start);
        let hlen = l4 + 32;
        let want = n.div_ceil(usize::from(mss)).max(1);
        assert_eq!(segs.len(), want, "v6={v6} n={n} mss={mss}");
        let mut data = Vec::new();
        for (i, s) in segs.iter().enumerate() {
            let (sl4, _, l3) = verify(s);
            assert_eq!(sl4, l4);
            assert!(s.len() - hlen <= usize::from(mss));
            // Everything before the IP header is copied as is.
            assert_eq!(s[..l3], b.frame[..l3]);
            let seq = get_u32(s, l4 + 4);
            assert_eq!(
                seq,
                0xffff_fff0u32.wrapping_add((i * usize::from(mss)) as u32)
            );
            let f = s[l4 + 13];
            let last = i + 1 == segs.len();
            assert_eq!(f & TCP_FIN != 0, last && flags & TCP_FIN != 0);
            assert_eq!(f & TCP_PSH != 0, last && flags & TCP_PSH != 0);
            assert_eq!(f & TCP_CWR != 0, i == 0 && flags & TCP_CWR != 0);
            assert_eq!(f & 0x10, flags & 0x10, "ACK kept");
            if !v6 {
                assert_eq!(get_u16(s, l3 + 4), 0x1234u16.wrapping_add(i as u16));
                assert_eq!(get_u16(s, l3 + 6), 0x4000, "DF kept");
            }
            // Options copied to every segment.
            assert_eq!(s[l4 + 20..hlen], b.frame[l4 + 20..hlen]);
            data.extend_from_slice(&s[hlen..]);
        }
        assert_eq!(data, b.frame[hlen..]);
    }

    #[test]
    fn tso_ipv4_and_ipv6() {
        for v6 in [false, true] {
            check_tcp(v6, &[], 65_000, 1448, 0x18 | TCP_FIN | TCP_CWR);
            check_tcp(v6, &[], 3000, 1448, 0x10);
            check_tcp(v6, &[], 2896, 1448, 0x18); // exact multiple
            check_tcp(v6, &[], 100, 1448, 0x19); // one segment
            check_tcp(v6, &[], 0, 1448, 0x11); // no payload at all
            check_tcp(v6, &[], 1000, 1, 0x18); // tiny MSS
        }
    }

    #[test]
    fn tso_vlan_tagged() {
        check_tcp(false, &[100], 10_000, 1400, 0x18);
        check_tcp(true, &[100], 10_000, 1400, 0x18);
        check_tcp(false, &[200, 100], 5000, 1000, TCP_CWR | TCP_FIN | 0x10);
    }

    #[test]
    fn tso_ignores_hostile_hints() {
        let mut b = tcp_frame(false, &[], 0x18, 5000, 1448);
        b.hdr.hdr_len = 9999;
        b.hdr.csum_start = 3;
        b.hdr.csum_offset = 60_000;
        b.hdr.flags = 0;
        b.hdr.gso_type |= GSO_ECN;
        // Garbage in the TCP checksum field: recomputed regardless.
        let l4 = 14 + 20;
        b.frame[l4 + 16] ^= 0x5a;
        let segs = collect(&mut Segmenter::new(), &b).unwrap();
        assert_eq!(segs.len(), 4);
        for s in &segs {
            verify(s);
        }
    }

    #[test]
    fn tso_stops_early() {
        let b = tcp_frame(false, &[], 0x18, 10_000, 1000);
        let mut seen = 0;
        let n = Segmenter::new()
            .segment(&b.hdr, &b.frame, &mut |_| {
                seen += 1;
                seen < 3
            })
            .unwrap();
        assert_eq!((n, seen), (3, 3));
    }

    #[test]
    fn tso_wrong_family_or_protocol() {
        let mut b = tcp_frame(false, &[], 0x18, 5000, 1448);
        b.hdr.gso_type = GSO_TCPV6;
        assert_eq!(
            collect(&mut Segmenter::new(), &b),
            Err(OffloadError::Protocol)
        );
        let mut b = tcp_frame(true, &[], 0x18, 5000, 1448);
        b.hdr.gso_type = GSO_TCPV4;
        assert_eq!(
            collect(&mut Segmenter::new(), &b),
            Err(OffloadError::Protocol)
        );
        let mut b = udp_frame(false, &[], &[], 5000, GSO_TCPV4, 1000);
        assert_eq!(
            collect(&mut Segmenter::new(), &b),
            Err(OffloadError::Protocol)
        );
        b.hdr.gso_type = 2;
        assert_eq!(
            collect(&mut Segmenter::new(), &b),
            Err(OffloadError::GsoType(2))
        );
        b.hdr.gso_type = GSO_UDP_L4;
        b.hdr.gso_size = 0;
        assert_eq!(
            collect(&mut Segmenter::new(), &b),
            Err(OffloadError::GsoSize(0))
        );
    }

    #[test]
    fn uso_ipv4_and_ipv6() {
        for v6 in [false, true] {
            for vlans in [&[][..], &[42][..]] {
                let n = 20_000;
                let b = udp_frame(v6, vlans, &[], n, GSO_UDP_L4, 1400);
                let segs = collect(&mut Segmenter::new(), &b).unwrap();
                assert_eq!(segs.len(), n.div_ceil(1400));
                let hlen = usize::from(b.hdr.csum_start) + 8;
                let mut data = Vec::new();
                for (i, s) in segs.iter().enumerate() {
                    let (_, frag, l3) = verify(s);
                    assert!(!frag);
                    if !v6 {
                        assert_eq!(get_u16(s, l3 + 4), 0x1234u16.wrapping_add(i as u16));
                    }
                    data.extend_from_slice(&s[hlen..]);
                }
                assert_eq!(data, b.frame[hlen..]);
            }
        }
    }

    /// Reassembles the fragments of one datagram and checks the UDP
    /// checksum of the whole.
    fn check_ufo(v6: bool, vlans: &[u16], ext: &[u8], n: usize, size: u16) {
        let b = udp_frame(v6, vlans, ext, n, GSO_UDP, size);
        let segs = collect(&mut Segmenter::new(), &b).unwrap();
        let l4 = usize::from(b.hdr.csum_start);
        let step = usize::from(size) & !7;
        assert_eq!(segs.len(), (8 + n).div_ceil(step));
        let mut dgram = Vec::new();
        let mut ident = None;
        for (i, s) in segs.iter().enumerate() {
            let (_, frag, l3) = verify(s);
            assert!(frag);
            assert_eq!(s[..l3], b.frame[..l3]);
            let more = i + 1 != segs.len();
            let data_off = if v6 {
                // Fragment header right before the UDP data.
                let fh = l4;
                assert_eq!(s[fh], IPPROTO_UDP);
                let fo = get_u16(s, fh + 2);
                assert_eq!(usize::from(fo >> 3) * 8, i * step);
                assert_eq!(fo & 1 == 1, more);
                let id = get_u32(s, fh + 4);
                assert_eq!(*ident.get_or_insert(id), id);
                fh + 8
            } else {
                let fo = get_u16(s, l3 + 6);
                assert_eq!(usize::from(fo & 0x1fff) * 8, i * step);
                assert_eq!(fo & IPV4_MF != 0, more);
                assert_eq!(fo & IPV4_DF, 0);
                assert_eq!(get_u16(s, l3 + 4), 0x1234);
                l4
            };
            if more {
                assert_eq!(s.len() - data_off, step);
            }
            dgram.extend_from_slice(&s[data_off..]);
        }
        assert_eq!(dgram.len(), 8 + n);
        assert_eq!(dgram[8..], b.frame[l4 + 8..]);
        let (src, dst): (&[u8], &[u8]) = if v6 { (&SRC6, &DST6) } else { (&SRC4, &DST4) };
        let sum = sum_bytes(
            &dgram,
            pseudo_sum(src, dst, IPPROTO_UDP, dgram.len() as u32),
        );
        assert_eq!(fold(sum), 0xffff, "UDP checksum over the datagram");
    }

    #[test]
    fn ufo_ipv4_and_ipv6() {
        check_ufo(false, &[], &[], 30_000, 1480);
        check_ufo(false, &[5], &[], 4000, 1475); // rounded down to 1472
        check_ufo(true, &[], &[], 30_000, 1448);
        check_ufo(true, &[9, 10], &[], 3000, 1000);
        // Hop-by-hop options (8 bytes: next = UDP, len 0, PadN).
        check_ufo(true, &[], &[IPPROTO_UDP, 0, 1, 4, 0, 0, 0, 0], 5000, 1232);
        check_ufo(false, &[], &[1, 1, 1, 1], 5000, 1200); // IPv4 options
    }

    #[test]
    fn ufo_small_datagram_is_one_frame() {
        let b = udp_frame(false, &[], &[], 100, GSO_UDP, 1480);
        let segs = collect(&mut Segmenter::new(), &b).unwrap();
        assert_eq!(segs.len(), 1);
        let (_, frag, _) = verify(&segs[0]);
        assert!(!frag);
        let b = udp_frame(false, &[], &[], 5000, GSO_UDP, 7);
        assert_eq!(
            collect(&mut Segmenter::new(), &b),
            Err(OffloadError::GsoSize(7))
        );
    }

    #[test]
    fn ufo_ipv6_ids_differ() {
        let b = udp_frame(true, &[], &[], 3000, GSO_UDP, 1000);
        let mut seg = Segmenter::new();
        let a = collect(&mut seg, &b).unwrap();
        let c = collect(&mut seg, &b).unwrap();
        let l4 = usize::from(b.hdr.csum_start);
        assert_ne!(get_u32(&a[0], l4 + 4), get_u32(&c[0], l4 + 4));
    }

    #[test]
    fn gso_none() {
        let mut b = udp_frame(false, &[], &[], 50, GSO_NONE, 0);
        let segs = collect(&mut Segmenter::new(), &b).unwrap();
        assert_eq!(segs.len(), 1);
        verify(&segs[0]);
        b.hdr.flags = 0;
        let segs = collect(&mut Segmenter::new(), &b).unwrap();
        assert_eq!(segs, [b.frame.clone()]);
        b.hdr.flags = F_NEEDS_CSUM;
        b.hdr.csum_start = 200;
        assert_eq!(
            collect(&mut Segmenter::new(), &b),
            Err(OffloadError::ChecksumOffset)
        );
    }

    #[test]
    fn small_scratch_is_an_error() {
        let b = tcp_frame(false, &[], 0x18, 5000, 1448);
        let mut seg = Segmenter::with_capacity(1000);
        assert_eq!(collect(&mut seg, &b), Err(OffloadError::TooLarge));
        let mut b = udp_frame(false, &[], &[], 5000, GSO_NONE, 0);
        b.hdr.flags = F_NEEDS_CSUM;
        assert_eq!(collect(&mut seg, &b), Err(OffloadError::TooLarge));
    }

    #[test]
    fn truncated_and_malformed_headers() {
        let b = tcp_frame(false, &[], 0x18, 3000, 1448);
        let mut seg = Segmenter::new();
        // Every truncation point inside the headers is an error.
        for cut in 0..(14 + 20 + 32) {
            let r = seg.segment(&b.hdr, &b.frame[..cut], &mut |_| panic!("no output"));
            assert_eq!(r, Err(OffloadError::Truncated), "cut at {cut}");
        }
        let mutate = |i: usize, v: u8| {
            let mut f = b.frame.clone();
            f[i] = v;
            f
        };
        let run = |seg: &mut Segmenter, f: &[u8]| seg.segment(&b.hdr, f, &mut |_| true);
        assert_eq!(
            run(&mut seg, &mutate(14, 0x44)),
            Err(OffloadError::IpHeader)
        );
        assert_eq!(
            run(&mut seg, &mutate(14, 0x65)),
            Err(OffloadError::IpHeader)
        );
        assert!(run(&mut seg, &mutate(14, 0x4f)).is_ok()); // 60-byte "options"
        assert_eq!(run(&mut seg, &mutate(12, 0x99)), Err(OffloadError::NotIp));
        assert_eq!(
            run(&mut seg, &mutate(20, 0x20)),
            Err(OffloadError::Fragment)
        );
        assert_eq!(
            run(&mut seg, &mutate(21, 0x01)),
            Err(OffloadError::Fragment)
        );
        assert_eq!(run(&mut seg, &mutate(23, 17)), Err(OffloadError::Protocol));
        assert_eq!(run(&mut seg, &mutate(23, 1)), Err(OffloadError::Protocol));
        assert_eq!(
            run(&mut seg, &mutate(34 + 12, 0x40)),
            Err(OffloadError::TcpHeader)
        );
        // IPv6: fragment header, unknown next header, runaway extension chain.
        let b6 = tcp_frame(true, &[], 0x18, 3000, 1448);
        let mut f = b6.frame.clone();
        f[14 + 6] = IPPROTO_FRAGMENT;
        assert_eq!(
            seg.segment(&b6.hdr, &f, &mut |_| true),
            Err(OffloadError::Fragment)
        );
        f[14 + 6] = 59; // no next header
        assert_eq!(
            seg.segment(&b6.hdr, &f, &mut |_| true),
            Err(OffloadError::Protocol)
        );
        f[14 + 6] = IPPROTO_DSTOPTS;
        // The "extension header" is the TCP header: ports 0x3039 -> next
        // header 0x30, length (0x39 + 1) * 8 = 464; the chain then wanders
        // through payload bytes and must end in an error, not a panic.
        assert!(seg.segment(&b6.hdr, &f, &mut |_| true).is_err());
        // Too many VLAN tags: the third tag is not looked through.
        let b3 = tcp_frame(false, &[1, 2, 3], 0x18, 3000, 1448);
        assert_eq!(collect(&mut seg, &b3), Err(OffloadError::NotIp));
    }

    /// Random headers and mutated frames never panic.
    #[test]
    fn hostile_inputs_never_panic() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let bases = [
            tcp_frame(false, &[], 0x18, 4000, 1448),
            tcp_frame(true, &[7], 0x18, 4000, 1448),
            udp_frame(false, &[], &[], 4000, GSO_UDP, 1480),
            udp_frame(
                true,
                &[],
                &[IPPROTO_UDP, 0, 1, 4, 0, 0, 0, 0],
                4000,
                GSO_UDP,
                1000,
            ),
            udp_frame(true, &[1, 2], &[], 4000, GSO_UDP_L4, 1000),
        ];
        let mut seg = Segmenter::new();
        for round in 0..20_000 {
            let base = &bases[round % bases.len()];
            let mut f = base.frame.clone();
            for _ in 0..(rnd() % 4) {
                let i = (rnd() as usize) % 90;
                if i < f.len() {
                    f[i] = rnd() as u8;
                }
            }
            let cut = if rnd() % 4 == 0 {
                (rnd() as usize) % f.len()
            } else {
                f.len()
            };
            let f = &mut f[..cut];
            let r = rnd();
            let hdr = VirtioNetHdr::from_bytes(
                &[
                    r as u8,
                    [
                        GSO_NONE, GSO_TCPV4, GSO_TCPV6, GSO_UDP, GSO_UDP_L4, 0x81, 0x44,
                    ][(r >> 8) as usize % 7],
                    (r >> 16) as u8,
                    (r >> 24) as u8,
                    (r >> 32) as u8,
                    (r >> 40) as u8 & 0x3,
                    (r >> 44) as u8,
                    0,
                    (r >> 48) as u8 & 0x3f,
                    0,
                    0,
                    0,
                ],
                MAX_HDR_LEN,
            );
            let _ = complete_checksum(&hdr, f);
            let mut total = 0usize;
            let r = seg.segment(&hdr, f, &mut |s| {
                total += s.len();
                assert!(s.len() <= Segmenter::DEFAULT_CAPACITY);
                true
            });
            if let Ok(n) = r {
                assert_eq!(segment_count(&hdr, f), Ok(n));
            }
        }
    }
    #[test]
    fn fits_policy() {
        use crate::device::bits;
        let all = bits::GUEST_CSUM | bits::GUEST_TSO4 | bits::GUEST_TSO6 | bits::GUEST_ECN;
        let tso = VirtioNetHdr {
            flags: F_NEEDS_CSUM,
            gso_type: GSO_TCPV4,
            gso_size: 1448,
            ..Default::default()
        };
        assert!(fits(&tso, all));
        assert!(!fits(&tso, bits::GUEST_CSUM));
        assert!(!fits(&tso, 0));
        let ecn = VirtioNetHdr {
            gso_type: GSO_TCPV4 | GSO_ECN,
            ..tso
        };
        assert!(!fits(&ecn, all & !bits::GUEST_ECN));
        let uso = VirtioNetHdr {
            gso_type: GSO_UDP_L4,
            ..tso
        };
        assert!(!fits(&uso, all | bits::GUEST_UFO));
        let valid = VirtioNetHdr {
            flags: crate::net_hdr::F_DATA_VALID,
            ..Default::default()
        };
        assert!(fits(&valid, 0));
    }

    #[test]
    fn lend_within_falls_back_to_software() {
        use crate::device::bits;
        let mut seg = Segmenter::new();
        // A TSO frame for a consumer without TSO: segments, plain headers.
        let mut b = tcp_frame(false, &[], 0x18, 5000, 1448);
        let mut got = Vec::new();
        let n = lend_within(
            &b.hdr,
            &mut b.frame,
            bits::GUEST_CSUM,
            &mut seg,
            &mut |h, s| {
                got.push((*h, s.to_vec()));
            },
        )
        .unwrap();
        assert_eq!(n, 4);
        for (h, s) in &got {
            assert_eq!(h.flags, crate::net_hdr::F_DATA_VALID);
            assert_eq!(h.gso_type, GSO_NONE);
            verify(s);
        }
        // A partial checksum for a consumer without GUEST_CSUM: completed
        // in place, no flags.
        let mut b = udp_frame(true, &[], &[], 100, GSO_NONE, 0);
        let mut got = Vec::new();
        lend_within(&b.hdr, &mut b.frame, 0, &mut seg, &mut |h, s| {
            got.push((*h, s.to_vec()));
        })
        .unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, VirtioNetHdr::default());
        verify(&got[0].1);
        assert_eq!(got[0].1, b.frame, "completed in place");
        // Passed through as is when accepted (num_buffers cleared).
        let mut b = tcp_frame(false, &[], 0x18, 5000, 1448);
        b.hdr.num_buffers = 3;
        let all = bits::GUEST_CSUM | bits::GUEST_TSO4;
        let mut got = Vec::new();
        lend_within(&b.hdr, &mut b.frame.clone(), all, &mut seg, &mut |h, s| {
            got.push((*h, s.len()));
        })
        .unwrap();
        assert_eq!(
            got,
            [(
                VirtioNetHdr {
                    num_buffers: 0,
                    ..b.hdr
                },
                b.frame.len()
            )]
        );
        // Malformed: an error, nothing lent.
        let mut short = vec![0u8; 20];
        let r = lend_within(&b.hdr, &mut short, 0, &mut seg, &mut |_, _| panic!("lent"));
        assert_eq!(r, Err(OffloadError::NotIp));
    }

    #[test]
    fn kernel_tx_header_checks() {
        let tso = VirtioNetHdr {
            flags: F_NEEDS_CSUM,
            gso_type: GSO_TCPV4,
            hdr_len: 66,
            gso_size: 1448,
            csum_start: 34,
            csum_offset: 16,
            num_buffers: 7,
        };
        let ok = kernel_tx_header(&tso, 3000).unwrap();
        assert_eq!(ok.num_buffers, 0);
        let bad =
            |h: VirtioNetHdr, len| kernel_tx_header(&h, len) == Err(DropReason::OffloadUnsupported);
        assert!(bad(VirtioNetHdr { gso_size: 0, ..tso }, 3000));
        assert!(bad(VirtioNetHdr { flags: 0, ..tso }, 3000));
        assert!(bad(VirtioNetHdr { gso_type: 2, ..tso }, 3000));
        assert!(bad(
            VirtioNetHdr {
                csum_offset: 6,
                ..tso
            },
            3000
        ));
        assert!(bad(tso, 40));
        // hdr_len is clamped, not refused.
        let h = kernel_tx_header(
            &VirtioNetHdr {
                hdr_len: 9000,
                ..tso
            },
            3000,
        )
        .unwrap();
        assert_eq!(h.hdr_len, 3000);
        let uso = VirtioNetHdr {
            gso_type: GSO_UDP_L4,
            csum_offset: 6,
            gso_size: 100,
            ..tso
        };
        assert!(kernel_tx_header(&uso, 34 + 8 + 6400).is_ok());
        assert!(bad(uso, 34 + 8 + 6401));
        assert!(bad(
            VirtioNetHdr {
                gso_type: GSO_UDP_L4 | GSO_ECN,
                ..uso
            },
            1000
        ));
        let ufo = VirtioNetHdr {
            gso_type: GSO_UDP,
            csum_offset: 6,
            ..tso
        };
        assert!(kernel_tx_header(&ufo, 3000).is_ok());
        // Plain frames: flags other than NEEDS_CSUM are dropped.
        let plain = VirtioNetHdr {
            flags: crate::net_hdr::F_DATA_VALID,
            csum_start: 5,
            ..Default::default()
        };
        assert_eq!(
            kernel_tx_header(&plain, 60).unwrap(),
            VirtioNetHdr::default()
        );
    }
}
