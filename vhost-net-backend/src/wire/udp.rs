// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! UDP (RFC 768): the header view.

/// Length of the UDP header.
pub const UDP_HLEN: usize = 8;
/// Offset of the checksum field in the UDP header (`csum_offset` of a UDP
/// frame with a partial checksum).
pub const UDP_CSUM_OFFSET: usize = 6;

view! {
    /// A view of a UDP header and its payload. The length field is not
    /// checked.
    UdpPacket, len UDP_HLEN;
    /// Source port.
    src_port: u16 = 0;
    /// Destination port.
    dst_port: u16 = 2;
    /// Length field: header plus payload (not checked against the buffer).
    length / set_length: u16 = 4;
    /// Checksum field (0: none, over IPv4).
    checksum / set_checksum: u16 = UDP_CSUM_OFFSET;
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// What follows the header (up to the end of the buffer).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[UDP_HLEN..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn view_and_setters() {
        let b = [0x13, 0x88, 0x17, 0x70, 0x00, 0x0c, 0x82, 0x36, b'p'];
        let p = UdpPacket::new_checked(&b[..]).unwrap();
        assert_eq!((p.src_port(), p.dst_port(), p.length()), (5000, 6000, 12));
        assert_eq!((p.checksum(), p.payload()), (0x8236, &b"p"[..]));
        super::super::assert_prefixes_rejected(&b[..UDP_HLEN], |b| {
            UdpPacket::new_checked(b).is_ok()
        });

        let mut m = b;
        let mut p = UdpPacket::new_checked(&mut m[..]).unwrap();
        p.set_length(9);
        p.set_checksum(0x73f4);
        assert_eq!((p.length(), p.checksum()), (9, 0x73f4));
        assert_eq!(m[4..8], [0, 9, 0x73, 0xf4]);
    }
}
