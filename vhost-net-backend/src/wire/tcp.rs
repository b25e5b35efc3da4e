// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! TCP (RFC 9293): the header view and its flags.

use super::{check_hlen, WireError};

/// Length of a TCP header without options.
pub const TCP_MIN_HLEN: usize = 20;
/// Offset of the checksum field in the TCP header (`csum_offset` of a
/// TCP frame with a partial checksum).
pub const TCP_CSUM_OFFSET: usize = 16;

/// Flag: no more data from the sender.
pub const TCP_FIN: u8 = 0x01;
/// Flag: synchronise sequence numbers.
pub const TCP_SYN: u8 = 0x02;
/// Flag: reset.
pub const TCP_RST: u8 = 0x04;
/// Flag: push.
pub const TCP_PSH: u8 = 0x08;
/// Flag: the acknowledgment number is valid.
pub const TCP_ACK: u8 = 0x10;
/// Flag: ECN echo.
pub const TCP_ECE: u8 = 0x40;
/// Flag: congestion window reduced.
pub const TCP_CWR: u8 = 0x80;

view! {
    /// A view of a TCP header (options included) and its payload.
    TcpPacket;
    /// Source port.
    src_port: u16 = 0;
    /// Destination port.
    dst_port: u16 = 2;
    /// Sequence number.
    seq / set_seq: u32 = 4;
    /// Acknowledgment number.
    ack: u32 = 8;
    /// The flags byte (`TCP_FIN` ... `TCP_CWR`).
    flags / set_flags: u8 = 13;
    /// Window.
    window: u16 = 14;
    /// Checksum field.
    checksum / set_checksum: u16 = TCP_CSUM_OFFSET;
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
    /// Checks, in this order: the fixed header fits, the data offset is at
    /// least [`TCP_MIN_HLEN`], the header with its options fits.
    ///
    /// # Errors
    /// [`WireError::Truncated`] or [`WireError::Malformed`], for the first
    /// check that fails.
    #[inline]
    pub fn check_len(&self) -> Result<(), WireError> {
        let len = self.buffer.as_ref().len();
        check_hlen(len, TCP_MIN_HLEN, || true, || self.header_len())
    }

    /// Header length in bytes (data offset * 4), options included.
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[12] >> 4) * 4
    }

    /// What follows the header.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header with 12 bytes of options (NOP NOP timestamps).
    const HDR: [u8; 32] = [
        0x30, 0x39, 0x00, 0x50, 0xff, 0xff, 0xff, 0xf0, 0, 0, 0, 7, 0x80, 0x18, 0x01, 0x00, 0xab,
        0xcd, 0, 0, 1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2,
    ];

    #[test]
    fn accessors() {
        let p = TcpPacket::new_checked(&HDR[..]).unwrap();
        assert_eq!((p.src_port(), p.dst_port()), (12345, 80));
        assert_eq!((p.seq(), p.ack(), p.header_len()), (0xffff_fff0, 7, 32));
        assert_eq!(p.flags(), TCP_PSH | TCP_ACK);
        assert_eq!((p.window(), p.checksum()), (256, 0xabcd));
        assert!(p.payload().is_empty());
    }

    #[test]
    fn truncated_and_malformed() {
        super::super::assert_prefixes_rejected(&HDR, |b| TcpPacket::new_checked(b).is_ok());
        let mut b = HDR;
        b[12] = 0x40;
        assert_eq!(TcpPacket::new_checked(&b[..]), Err(WireError::Malformed));
        b[12] = 0x90;
        assert_eq!(TcpPacket::new_checked(&b[..]), Err(WireError::Truncated));
    }

    #[test]
    fn setters_round_trip() {
        let mut b = HDR;
        let mut p = TcpPacket::new_checked(&mut b[..]).unwrap();
        p.set_seq(0x0102_0304);
        p.set_flags(TCP_FIN | TCP_SYN | TCP_RST | TCP_ECE | TCP_CWR);
        p.set_checksum(0xfeed);
        assert_eq!(
            (p.seq(), p.flags(), p.checksum()),
            (0x0102_0304, 0xc7, 0xfeed)
        );
        assert_eq!(p.into_inner()[4..8], [1, 2, 3, 4]);
    }
}
