// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The announce frame a backend sends for a migrated guest (`SEND_RARP`):
//! a RARP request from the guest's address, as QEMU's `qemu_announce_self`
//! and DPDK's vhost library (`make_rarp_packet`) build it.
//!
//! ```text
//! dst ff:ff:ff:ff:ff:ff  src MAC  ethertype 0x8035
//! htype 1 (Ethernet)  ptype 0x0800  hlen 6  plen 4  op 3 (reverse request)
//! sha MAC  spa 0.0.0.0  tha MAC  tpa 0.0.0.0
//! zero padding to 60 bytes (the Ethernet minimum without the FCS)
//! ```
//!
//! A switch learns the address from its source; every bridge in the
//! broadcast domain moves the address to the port the frame came in on.

use super::{ETH_ALEN, ETH_HLEN, ETH_P_IPV4};

/// Ethertype of RARP.
pub const ETH_P_RARP: u16 = 0x8035;
/// RARP opcode "reverse request" (RFC 903).
pub const RARP_OP_REQUEST: u16 = 3;
/// Length of an announce frame: the 42 bytes of header and RARP body,
/// padded to the Ethernet minimum.
pub const ANNOUNCE_LEN: usize = 60;

/// The RARP announce of `mac`.
pub fn rarp_announce(mac: [u8; ETH_ALEN]) -> [u8; ANNOUNCE_LEN] {
    let mut f = [0u8; ANNOUNCE_LEN];
    f[..ETH_ALEN].fill(0xff);
    f[ETH_ALEN..2 * ETH_ALEN].copy_from_slice(&mac);
    f[12..ETH_HLEN].copy_from_slice(&ETH_P_RARP.to_be_bytes());
    let body = &mut f[ETH_HLEN..];
    body[0..2].copy_from_slice(&1u16.to_be_bytes());
    body[2..4].copy_from_slice(&ETH_P_IPV4.to_be_bytes());
    body[4] = ETH_ALEN as u8;
    body[5] = 4;
    body[6..8].copy_from_slice(&RARP_OP_REQUEST.to_be_bytes());
    body[8..14].copy_from_slice(&mac);
    // spa 14..18 stays 0.0.0.0
    body[18..24].copy_from_slice(&mac);
    // tpa 24..28 and the padding stay zero
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_announce_is_dpdks_rarp_frame() {
        let mac = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];
        let f = rarp_announce(mac);
        // The bytes DPDK's make_rarp_packet and QEMU's announce_self_create
        // put on the wire, padding included.
        let mut want = Vec::new();
        want.extend_from_slice(&[0xff; 6]);
        want.extend_from_slice(&mac);
        want.extend_from_slice(&[0x80, 0x35, 0x00, 0x01, 0x08, 0x00, 6, 4, 0x00, 0x03]);
        want.extend_from_slice(&mac);
        want.extend_from_slice(&[0; 4]);
        want.extend_from_slice(&mac);
        want.extend_from_slice(&[0; 4]);
        want.resize(60, 0);
        assert_eq!(f.as_slice(), want.as_slice());
        let h = crate::wire::L2Head::parse(&f).expect("parses");
        assert_eq!(h.src().0, mac);
        assert_eq!(h.dst().0, [0xff; 6]);
    }
}
