// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Unit tests of the software offloads: frame builders and an independent
//! checker here, the cases in the submodules.

use super::*;
use crate::net_hdr::{F_NEEDS_CSUM, GSO_ECN, GSO_NONE, GSO_TCPV4, GSO_TCPV6, GSO_UDP};
use crate::net_hdr::{GSO_UDP_L4, MAX_HDR_LEN};

use crate::wire::checksum::{fold, pseudo_sum, sum_bytes};
use crate::wire::{ETH_P_8021AD, ETH_P_8021Q, ETH_P_IPV4, ETH_P_IPV6};
use crate::wire::{IPPROTO_DSTOPTS, IPPROTO_FRAGMENT, IPPROTO_HOPOPTS, IPPROTO_TCP, IPPROTO_UDP};
use crate::wire::{IPV4_DF, IPV4_MF, TCP_CWR, TCP_FIN, TCP_PSH};

mod csum;
mod policy;
mod segment;

const SRC4: [u8; 4] = [192, 168, 0, 1];
const DST4: [u8; 4] = [192, 168, 0, 199];
const SRC6: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const DST6: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

fn get_u16(b: &[u8], off: usize) -> u16 {
    u16::from_be_bytes([b[off], b[off + 1]])
}

fn get_u32(b: &[u8], off: usize) -> u32 {
    u32::from_be_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

fn eth(buf: &mut Vec<u8>, vlans: &[u16], ethertype: u16) {
    buf.extend_from_slice(&[0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1]);
    for (i, &tci) in vlans.iter().enumerate() {
        let tpid = if i + 1 < vlans.len() {
            ETH_P_8021AD
        } else {
            ETH_P_8021Q
        };
        buf.extend_from_slice(&tpid.to_be_bytes());
        buf.extend_from_slice(&tci.to_be_bytes());
    }
    buf.extend_from_slice(&ethertype.to_be_bytes());
}

fn ipv4(buf: &mut Vec<u8>, proto: u8, l4_len: usize, options: &[u8]) {
    let ihl = (20 + options.len()) / 4;
    let tot = (ihl * 4 + l4_len) as u16;
    let start = buf.len();
    buf.push(0x40 | ihl as u8);
    buf.push(0);
    buf.extend_from_slice(&tot.to_be_bytes());
    buf.extend_from_slice(&[0x12, 0x34, 0x40, 0x00, 64, proto, 0, 0]);
    buf.extend_from_slice(&SRC4);
    buf.extend_from_slice(&DST4);
    buf.extend_from_slice(options);
    let c = checksum(&buf[start..]);
    buf[start + 10..start + 12].copy_from_slice(&c.to_be_bytes());
}

fn ipv6(buf: &mut Vec<u8>, proto: u8, l4_len: usize, ext: &[u8]) {
    let nh = if ext.is_empty() {
        proto
    } else {
        IPPROTO_HOPOPTS
    };
    buf.extend_from_slice(&[0x60, 0, 0, 0]);
    buf.extend_from_slice(&((ext.len() + l4_len) as u16).to_be_bytes());
    buf.push(nh);
    buf.push(64);
    buf.extend_from_slice(&SRC6);
    buf.extend_from_slice(&DST6);
    buf.extend_from_slice(ext);
}

fn payload(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
}

/// The pseudo-header sum a guest stores with `F_NEEDS_CSUM`.
fn pseudo(v6: bool, proto: u8, l4_len: usize) -> u16 {
    if v6 {
        pseudo_header_checksum(&SRC6, &DST6, proto, l4_len as u32)
    } else {
        pseudo_header_checksum(&SRC4, &DST4, proto, l4_len as u32)
    }
}

/// The header of a frame a guest hands over with a partial checksum:
/// the transport header (`l4_hlen` bytes) at `l4`.
fn guest_hdr(
    gso_type: u8,
    l4: usize,
    l4_hlen: usize,
    gso_size: u16,
    csum_offset: u16,
) -> VirtioNetHdr {
    VirtioNetHdr {
        flags: F_NEEDS_CSUM,
        gso_type,
        hdr_len: (l4 + l4_hlen) as u16,
        gso_size,
        csum_start: l4 as u16,
        csum_offset,
        num_buffers: 0,
    }
}

struct Built {
    frame: Vec<u8>,
    hdr: VirtioNetHdr,
}

/// A TCP super-frame as a guest hands it over: pseudo-header sum in the
/// checksum field, `F_NEEDS_CSUM`.
fn tcp_frame(v6: bool, vlans: &[u16], flags: u8, n: usize, mss: u16) -> Built {
    let mut f = Vec::new();
    eth(&mut f, vlans, if v6 { ETH_P_IPV6 } else { ETH_P_IPV4 });
    let l4_len = 32 + n;
    if v6 {
        ipv6(&mut f, IPPROTO_TCP, l4_len, &[]);
    } else {
        ipv4(&mut f, IPPROTO_TCP, l4_len, &[]);
    }
    let l4 = f.len();
    f.extend_from_slice(&[0x30, 0x39, 0x00, 0x50]); // ports 12345 -> 80
    f.extend_from_slice(&0xffff_fff0u32.to_be_bytes()); // seq (wraps)
    f.extend_from_slice(&7u32.to_be_bytes()); // ack
    f.push(8 << 4); // data offset: 32 bytes
    f.push(flags);
    f.extend_from_slice(&[0x01, 0x00, 0, 0, 0, 0]); // window, csum, urg
    f.extend_from_slice(&[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2]); // NOP NOP TS
    f.extend_from_slice(&payload(n));
    let pseudo = pseudo(v6, IPPROTO_TCP, l4_len);
    f[l4 + 16..l4 + 18].copy_from_slice(&pseudo.to_be_bytes());
    let gso = if v6 { GSO_TCPV6 } else { GSO_TCPV4 };
    let hdr = guest_hdr(gso, l4, 32, mss, 16);
    Built { frame: f, hdr }
}

fn udp_frame(v6: bool, vlans: &[u16], ext: &[u8], n: usize, gso: u8, size: u16) -> Built {
    let mut f = Vec::new();
    eth(&mut f, vlans, if v6 { ETH_P_IPV6 } else { ETH_P_IPV4 });
    let l4_len = 8 + n;
    if v6 {
        ipv6(&mut f, IPPROTO_UDP, l4_len, ext);
    } else {
        ipv4(&mut f, IPPROTO_UDP, l4_len, ext);
    }
    let l4 = f.len();
    f.extend_from_slice(&[0x13, 0x88, 0x17, 0x70]); // 5000 -> 6000
    f.extend_from_slice(&(l4_len as u16).to_be_bytes());
    let pseudo = pseudo(v6, IPPROTO_UDP, l4_len);
    f.extend_from_slice(&pseudo.to_be_bytes());
    f.extend_from_slice(&payload(n));
    let hdr = guest_hdr(gso, l4, 8, size, 6);
    Built { frame: f, hdr }
}

/// Independent check of one output frame: returns its layout after
/// verifying the IPv4 header checksum, the IP length fields and, for a
/// non-fragment, the transport checksum.
fn verify(frame: &[u8]) -> (usize, bool, usize) {
    let mut l3 = 14;
    let mut et = get_u16(frame, 12);
    while et == ETH_P_8021Q || et == ETH_P_8021AD {
        et = get_u16(frame, l3 + 2);
        l3 += 4;
    }
    let v4 = et == ETH_P_IPV4;
    let (l4, proto, src, dst, frag) = if v4 {
        let ihl = usize::from(frame[l3] & 15) * 4;
        assert_eq!(checksum(&frame[l3..l3 + ihl]), 0, "IPv4 header checksum");
        assert_eq!(usize::from(get_u16(frame, l3 + 2)), frame.len() - l3);
        let frag = get_u16(frame, l3 + 6) & 0x3fff != 0;
        (
            l3 + ihl,
            frame[l3 + 9],
            frame[l3 + 12..l3 + 16].to_vec(),
            frame[l3 + 16..l3 + 20].to_vec(),
            frag,
        )
    } else {
        assert_eq!(usize::from(get_u16(frame, l3 + 4)), frame.len() - l3 - 40);
        let mut nh = frame[l3 + 6];
        let mut off = l3 + 40;
        let mut frag = false;
        while nh != IPPROTO_TCP && nh != IPPROTO_UDP {
            if nh == IPPROTO_FRAGMENT {
                frag = true;
                nh = frame[off];
                off += 8;
                break;
            }
            nh = frame[off];
            off += (usize::from(frame[off + 1]) + 1) * 8;
        }
        (
            off,
            nh,
            frame[l3 + 8..l3 + 24].to_vec(),
            frame[l3 + 24..l3 + 40].to_vec(),
            frag,
        )
    };
    if !frag {
        let len = (frame.len() - l4) as u32;
        let sum = sum_bytes(&frame[l4..], pseudo_sum(&src, &dst, proto, len));
        assert_eq!(fold(sum), 0xffff, "transport checksum");
        if proto == IPPROTO_UDP {
            assert_eq!(usize::from(get_u16(frame, l4 + 4)), frame.len() - l4);
        }
    }
    (l4, frag, l3)
}

fn collect(seg: &mut Segmenter, b: &Built) -> Result<Vec<Vec<u8>>, OffloadError> {
    let mut v = Vec::new();
    let n = seg.segment(&b.hdr, &b.frame, &mut |s| {
        v.push(s.to_vec());
        true
    })?;
    assert_eq!(n, v.len());
    assert_eq!(segment_count(&b.hdr, &b.frame), Ok(n), "segment_count");
    Ok(v)
}
