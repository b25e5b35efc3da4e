// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Software GSO: [`Segmenter`] splits TSO/USO super-frames into segments
//! and UFO datagrams into IP fragments; [`segment_count`] says how many
//! frames that makes. What each GSO type yields is in the
//! [module documentation](super).

use super::{complete_checksum, OffloadError};
use crate::net_hdr::{self, VirtioNetHdr};
use crate::wire::checksum::{fold, sum_bytes};
use crate::wire::{
    parse_headers, Headers, Ipv4Packet, Ipv6FragHeader, Ipv6Packet, TcpPacket, UdpPacket,
    IPPROTO_FRAGMENT, IPPROTO_TCP, IPPROTO_UDP, IPV4_DF, IPV4_FRAG_OFFSET_MASK, IPV4_MF,
    IPV6_FRAG_HLEN, IPV6_HLEN, TCP_CWR, TCP_FIN, TCP_PSH, VLAN_HLEN,
};

// ===== header fix-ups =====

/// Sets the IP length field of a segment of `seg_len` bytes and, for IPv4,
/// the ID and the header checksum. `frag` is the IPv4 flags/fragment-offset
/// field to store (None: keep the one copied from the super-frame).
fn fix_ip(
    s: &mut [u8],
    hs: &Headers,
    id: Option<u16>,
    frag: Option<u16>,
) -> Result<(), OffloadError> {
    let l3 = hs.l3;
    if hs.ipv4 {
        let tot = u16::try_from(s.len() - l3).map_err(|_| OffloadError::TooLarge)?;
        // The header was copied from the parsed frame: its IHL is the
        // parsed one (hs.l4 - l3), which the checksum covers.
        let mut ip = Ipv4Packet::new_unchecked(&mut s[l3..]);
        ip.set_total_len(tot);
        if let Some(id) = id {
            ip.set_ident(id);
        }
        if let Some(frag) = frag {
            ip.set_flags_frag(frag);
        }
        ip.fill_checksum();
    } else {
        let plen = u16::try_from(s.len() - l3 - IPV6_HLEN).map_err(|_| OffloadError::TooLarge)?;
        Ipv6Packet::new_unchecked(&mut s[l3..]).set_payload_len(plen);
    }
    Ok(())
}

/// Computes and stores a full TCP or UDP checksum over `s[l4..]`.
fn fix_l4_checksum(s: &mut [u8], hs: &Headers, l4: usize) {
    set_l4_checksum(s, hs, l4, 0);
    // Invariant: segments are at most the scratch length (< 2^32).
    let l4_len = (s.len() - l4) as u32;
    let c = !fold(sum_bytes(&s[l4..], hs.pseudo_sum(s, l4_len)));
    let c = if c == 0 && hs.proto == IPPROTO_UDP {
        0xffff
    } else {
        c
    };
    set_l4_checksum(s, hs, l4, c);
}

/// Stores the TCP or UDP checksum field of the transport header at `l4`.
fn set_l4_checksum(s: &mut [u8], hs: &Headers, l4: usize, c: u16) {
    if hs.proto == IPPROTO_TCP {
        TcpPacket::new_unchecked(&mut s[l4..]).set_checksum(c);
    } else {
        UdpPacket::new_unchecked(&mut s[l4..]).set_checksum(c);
    }
}

/// Where a segment goes: `false` stops the segmentation.
type Out<'a> = &'a mut dyn FnMut(&[u8]) -> bool;
/// The number of frames lent to an [`Out`].
type Lent = Result<usize, OffloadError>;

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
    pub const DEFAULT_CAPACITY: usize = crate::device::MAX_FRAME_LEN + VLAN_HLEN + IPV6_FRAG_HLEN;

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
    /// See the [module documentation](super) for what each GSO type yields.
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
                let hs = parse_headers(frame)?;
                let want = match kind {
                    net_hdr::GSO_TCPV4 => (Some(true), IPPROTO_TCP),
                    net_hdr::GSO_TCPV6 => (Some(false), IPPROTO_TCP),
                    _ => (None, IPPROTO_UDP),
                };
                if want.1 != hs.proto {
                    return Err(OffloadError::Protocol);
                }
                if want.0.is_some_and(|v4| v4 != hs.ipv4) {
                    return Err(OffloadError::Protocol);
                }
                self.split(&hs, usize::from(hdr.gso_size), frame, out)
            }
            net_hdr::GSO_UDP => {
                let hs = parse_headers(frame)?;
                if hs.proto != IPPROTO_UDP {
                    return Err(OffloadError::Protocol);
                }
                self.fragment(&hs, hdr.gso_size, frame, out)
            }
            _ => Err(OffloadError::GsoType(hdr.gso_type)),
        }
    }

    /// `GSO_NONE`: the frame itself, checksummed if needed.
    fn plain(&mut self, hdr: &VirtioNetHdr, frame: &[u8], out: Out<'_>) -> Lent {
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
    fn split(&mut self, hs: &Headers, mss: usize, frame: &[u8], out: Out<'_>) -> Lent {
        let hlen = hs.payload;
        let payload = &frame[hlen..];
        let first = payload.len().min(mss);
        if hlen + first > self.scratch.len() {
            return Err(OffloadError::TooLarge);
        }
        // The largest segment must fit the IP length fields.
        let longest = hlen + first - hs.l3;
        if longest > usize::from(u16::MAX) + if hs.ipv4 { 0 } else { IPV6_HLEN } {
            return Err(OffloadError::TooLarge);
        }
        let count = payload.len().div_ceil(mss).max(1);
        let tcp = hs.proto == IPPROTO_TCP;
        let l4 = hs.l4;
        let id0 = if hs.ipv4 {
            Ipv4Packet::new_unchecked(&frame[hs.l3..]).ident()
        } else {
            0
        };
        let th = TcpPacket::new_unchecked(&frame[l4..]);
        let seq0 = if tcp { th.seq() } else { 0 };
        let flags0 = if tcp { th.flags() } else { 0 };

        for i in 0..count {
            let start = i * mss;
            let chunk = &payload[start..(start + mss).min(payload.len())];
            let s = &mut self.scratch[..hlen + chunk.len()];
            s[..hlen].copy_from_slice(&frame[..hlen]);
            s[hlen..].copy_from_slice(chunk);
            // Invariant: i < 2^16 whenever it matters (IDs wrap by design).
            fix_ip(s, hs, Some(id0.wrapping_add(i as u16)), None)?;
            if tcp {
                let mut th = TcpPacket::new_unchecked(&mut s[l4..]);
                th.set_seq(seq0.wrapping_add(start as u32));
                let mut flags = flags0;
                if i + 1 != count {
                    flags &= !(TCP_FIN | TCP_PSH);
                }
                if i != 0 {
                    flags &= !TCP_CWR;
                }
                th.set_flags(flags);
            } else {
                let ulen = (s.len() - l4) as u16;
                UdpPacket::new_unchecked(&mut s[l4..]).set_length(ulen);
            }
            fix_l4_checksum(s, hs, l4);
            if !out(s) {
                return Ok(i + 1);
            }
        }
        Ok(count)
    }

    /// UFO: the UDP checksum over the whole datagram, then IP fragments.
    fn fragment(&mut self, hs: &Headers, gso_size: u16, frame: &[u8], out: Out<'_>) -> Lent {
        let l4 = hs.l4;
        let dgram_len = frame.len() - l4;
        let ulen = u16::try_from(dgram_len).map_err(|_| OffloadError::TooLarge)?;
        // The UDP checksum of the whole datagram, with its length set.
        let mut acc = hs.pseudo_sum(frame, u32::from(ulen));
        // Ports, then the length instead of the length field.
        acc = sum_bytes(&frame[l4..l4 + 4], acc) + u64::from(ulen);
        acc = sum_bytes(&frame[hs.payload..], acc);
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
            let mut uh = UdpPacket::new_unchecked(&mut s[l4..]);
            uh.set_length(ulen);
            uh.set_checksum(ucsum);
            fix_ip(s, hs, None, None)?;
            out(s);
            return Ok(1);
        }
        let step = usize::from(gso_size) & !7;
        if step == 0 {
            return Err(OffloadError::GsoSize(gso_size));
        }
        // Unfragmentable part, then (IPv6) the Fragment header.
        let hlen = if hs.ipv4 { l4 } else { l4 + IPV6_FRAG_HLEN };
        if hlen + step > self.scratch.len() {
            return Err(OffloadError::TooLarge);
        }
        if hlen + step - hs.l3 > usize::from(u16::MAX) + if hs.ipv4 { 0 } else { IPV6_HLEN } {
            return Err(OffloadError::TooLarge);
        }
        let count = dgram_len.div_ceil(step);
        let v4_frag = if hs.ipv4 {
            let flags = Ipv4Packet::new_unchecked(&frame[hs.l3..]).flags_frag();
            flags & !(IPV4_DF | IPV4_MF | IPV4_FRAG_OFFSET_MASK)
        } else {
            0
        };
        let ident = self.frag_id;
        if !hs.ipv4 {
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
                let mut uh = UdpPacket::new_unchecked(&mut s[hlen..]);
                uh.set_length(ulen);
                uh.set_checksum(ucsum);
            }
            // Invariant: off < 2^16 (the datagram length fits a u16).
            let units = (off / 8) as u16;
            if hs.ipv4 {
                let frag = v4_frag | units | if more { IPV4_MF } else { 0 };
                fix_ip(s, hs, None, Some(frag))?;
            } else {
                s[hs.proto_offset] = IPPROTO_FRAGMENT;
                let mut fh = Ipv6FragHeader::new_unchecked(&mut s[l4..]);
                fh.set_next_header(IPPROTO_UDP);
                fh.set_reserved(0);
                fh.set_offset_more(units, more);
                fh.set_ident(ident);
                fix_ip(s, hs, None, None)?;
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
            let hs = parse_headers(frame)?;
            Ok((frame.len() - hs.payload).div_ceil(size).max(1))
        }
        net_hdr::GSO_UDP => {
            let hs = parse_headers(frame)?;
            let dgram = frame.len() - hs.l4;
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
