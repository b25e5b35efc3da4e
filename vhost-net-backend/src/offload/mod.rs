// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Software fallbacks for offloads a destination lacks: completing partial
//! checksums and segmenting TSO/UFO/USO super-frames.
//!
//! A sibling of [`crate::forward`] (which runs them for any sink) and
//! below [`crate::io`] (whose uplinks run them on receive and transmit;
//! `io::offload` is the same module).
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
//! Headers are parsed and written through [`crate::wire`]
//! ([`crate::wire::parse_headers`] and the views); the Internet checksum
//! lives there too and is re-exported here.
//!
//! Limits: IPv6 jumbograms, IPv6 Routing headers (the pseudo-header uses the
//! IPv6 destination address as is) and TCP urgent data spanning segments are
//! not handled specially.

use crate::device::bits;
use crate::net_hdr::{self, VirtioNetHdr};
use crate::stats::DropReason;
use crate::wire::HeadersError;

mod kernel;
mod segment;
#[cfg(test)]
mod tests;

pub use crate::wire::checksum::{checksum, pseudo_header_checksum};
pub use kernel::kernel_tx_header;
pub use segment::{segment_count, Segmenter};

/// What [`lend_within`] lends each resulting frame to: its header and its
/// bytes, valid during the call only (the same shape as an uplink's
/// [`RxFn`](crate::io::RxFn), so a receive callback can be handed on).
pub type LendFn<'a> = &'a mut dyn FnMut(&VirtioNetHdr, &[u8]);

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

impl From<HeadersError> for OffloadError {
    /// The same outcome, as the software fallback reports it.
    fn from(e: HeadersError) -> Self {
        match e {
            HeadersError::Truncated => OffloadError::Truncated,
            HeadersError::NotIp => OffloadError::NotIp,
            HeadersError::IpHeader => OffloadError::IpHeader,
            HeadersError::Fragment => OffloadError::Fragment,
            HeadersError::Protocol => OffloadError::Protocol,
            HeadersError::TcpHeader => OffloadError::TcpHeader,
        }
    }
}

// ===== checksums =====

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
    f: LendFn<'_>,
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
