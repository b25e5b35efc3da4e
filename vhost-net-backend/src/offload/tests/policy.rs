// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! What a consumer accepts, and what the kernel takes.

use super::*;

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
