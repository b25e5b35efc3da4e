// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Completing partial checksums.

use super::*;

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
