// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Byte-level helpers for the frames the uplink tests build and check: the
//! hex form the peer programs print and read, big-endian fields, the
//! Internet checksums (through the library's public RFC 1071 functions),
//! and the numbered frames the switch tests stream.

use vhost_net_backend::io::offload::{checksum, pseudo_header_checksum};

use crate::netns::mac_octets;

/// The experimental EtherType (IEEE 802 local experimental 1) of
/// [`numbered_frame`].
pub const EXPERIMENTAL_ETHERTYPE: u16 = 0x88b5;

/// Frame `seq` from `src` to `dst` (MACs as `aa:bb:..`), `len` bytes (at
/// least 22): the experimental EtherType, `seq` (little-endian), then a
/// pattern of `seq`, so that a frame altered, truncated or delivered out
/// of order is told from the one expected.
///
/// # Panics
///
/// On a malformed MAC.
pub fn numbered_frame(dst: &str, src: &str, seq: u64, len: usize) -> Vec<u8> {
    let mut f = Vec::with_capacity(len);
    f.extend_from_slice(&mac_octets(dst));
    f.extend_from_slice(&mac_octets(src));
    f.extend_from_slice(&EXPERIMENTAL_ETHERTYPE.to_be_bytes());
    f.extend_from_slice(&seq.to_le_bytes());
    f.extend((22..len).map(|i| (i as u8).wrapping_mul(13) ^ seq as u8));
    f
}

/// The bytes of a hex string (two digits a byte), as the peer programs
/// print frames.
///
/// # Panics
///
/// On a character that is not a hex digit.
pub fn hex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex"))
        .collect()
}

/// `b` as a hex string, as the peer programs read frames.
pub fn to_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The big-endian `u16` at `b[o..o + 2]`.
pub fn be16(b: &[u8], o: usize) -> u16 {
    u16::from_be_bytes([b[o], b[o + 1]])
}

/// The big-endian `u32` at `b[o..o + 4]`.
pub fn be32(b: &[u8], o: usize) -> u32 {
    u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

/// The Internet checksum of an IPv4 header with its checksum field filled
/// in: 0 when that field is right (for one still 0, the value to store).
pub fn ipv4_header_checksum(header: &[u8]) -> u16 {
    checksum(header)
}

/// The Internet checksum over the pseudo header (`src`, `dst`, `proto`,
/// the segment's length) and the whole TCP/UDP segment `l4`, checksum field
/// included: 0 when that field is right.
pub fn l4_checksum(src: &[u8], dst: &[u8], proto: u8, l4: &[u8]) -> u16 {
    let len = u32::try_from(l4.len()).expect("segment length fits u32");
    let mut all = pseudo_header_checksum(src, dst, proto, len)
        .to_be_bytes()
        .to_vec();
    all.extend_from_slice(l4);
    checksum(&all)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips() {
        assert_eq!(hex("00ff10"), [0, 0xff, 0x10]);
        assert_eq!(to_hex(&[0, 0xff, 0x10]), "00ff10");
        assert_eq!(
            (be16(&[1, 2, 3, 4], 1), be32(&[1, 2, 3, 4], 0)),
            (0x0203, 0x0102_0304)
        );
    }

    #[test]
    fn checksums_verify_to_zero() {
        // RFC 1071's example header (20 bytes, checksum 0xb861).
        let mut ip = [
            0x45, 0, 0, 0x73, 0, 0, 0x40, 0, 0x40, 0x11, 0, 0, 0xc0, 0xa8, 0, 1, 0xc0, 0xa8, 0,
            0xc7,
        ];
        let c = ipv4_header_checksum(&ip);
        assert_eq!(c, 0xb861);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        assert_eq!(ipv4_header_checksum(&ip), 0);
        // A UDP datagram whose checksum field holds the right value.
        let (src, dst) = ([10, 0, 0, 1], [10, 0, 0, 2]);
        let mut udp = vec![0x30, 0x39, 0x00, 0x35, 0, 11, 0, 0, b'a', b'b', b'c'];
        let c = l4_checksum(&src, &dst, 17, &udp);
        udp[6..8].copy_from_slice(&c.to_be_bytes());
        assert_eq!(l4_checksum(&src, &dst, 17, &udp), 0);
    }
}
