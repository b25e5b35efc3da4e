// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! What a Linux packet socket or TAP device takes on transmit: the checks of
//! the kernel's `virtio_net_hdr_to_skb`, made before the frame is handed
//! over.

use crate::net_hdr::{self, VirtioNetHdr};
use crate::stats::DropReason;
use crate::wire::{TCP_CSUM_OFFSET, TCP_MIN_HLEN, UDP_CSUM_OFFSET, UDP_HLEN};

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
            net_hdr::GSO_TCPV4 | net_hdr::GSO_TCPV6 if off != TCP_CSUM_OFFSET => {
                return Err(DropReason::OffloadUnsupported)
            }
            net_hdr::GSO_UDP_L4 => {
                let payload = len - start - UDP_HLEN;
                if off != UDP_CSUM_OFFSET || payload > usize::from(h.gso_size) * UDP_MAX_SEGMENTS {
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
