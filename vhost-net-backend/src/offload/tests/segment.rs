// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! TSO, USO, UFO and hostile frames.

use super::*;

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
    // Segments the frame with byte `i` set to `v`.
    let run =
        |seg: &mut Segmenter, i: usize, v: u8| seg.segment(&b.hdr, &mutate(i, v), &mut |_| true);
    assert_eq!(run(&mut seg, 14, 0x44), Err(OffloadError::IpHeader));
    assert_eq!(run(&mut seg, 14, 0x65), Err(OffloadError::IpHeader));
    assert!(run(&mut seg, 14, 0x4f).is_ok()); // 60-byte "options"
    assert_eq!(run(&mut seg, 12, 0x99), Err(OffloadError::NotIp));
    assert_eq!(run(&mut seg, 20, 0x20), Err(OffloadError::Fragment));
    assert_eq!(run(&mut seg, 21, 0x01), Err(OffloadError::Fragment));
    assert_eq!(run(&mut seg, 23, 17), Err(OffloadError::Protocol));
    assert_eq!(run(&mut seg, 23, 1), Err(OffloadError::Protocol));
    assert_eq!(run(&mut seg, 34 + 12, 0x40), Err(OffloadError::TcpHeader));
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
