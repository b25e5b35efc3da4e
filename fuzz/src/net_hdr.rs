// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! `VirtioNetHdr` wire round trips: bytes -> header -> bytes and words.

use vhost_net_backend::net_hdr::{self, MAX_HDR_LEN};
use vhost_net_backend::VirtioNetHdr;

/// Parses `data[1..13]` as a 10- or 12-byte header (`data[0]` bit 0 picks
/// 12) and checks every encoding agrees. Returns false for inputs too short
/// to decode (rejected from the corpus).
pub fn run(data: &[u8]) -> bool {
    let Some((&sel, rest)) = data.split_first() else {
        return false;
    };
    let Some(raw) = rest.get(..MAX_HDR_LEN) else {
        return false;
    };
    let b: [u8; MAX_HDR_LEN] = raw.try_into().expect("12 bytes");
    let len = if sel & 1 != 0 { 12 } else { 10 };
    let h = VirtioNetHdr::from_bytes(&b, len);

    // Bytes round trip: the first `len` bytes come back; the rest is the
    // num_buffers field, zero for a 10-byte header.
    let out = h.to_bytes();
    assert_eq!(out[..len], b[..len], "to_bytes(from_bytes(b)) differs");
    if len == 10 {
        assert_eq!(h.num_buffers, 0, "10-byte header has num_buffers");
        assert_eq!(out[10..], [0, 0]);
    }

    // Word encoding agrees with the byte encoding, both ways.
    let (lo, hi) = h.to_words();
    assert_eq!(lo.to_le_bytes(), out[..8]);
    assert_eq!(hi.to_le_bytes(), out[8..]);
    assert_eq!(VirtioNetHdr::from_words(lo, hi, len), h);
    let wlo = u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
    let whi = u32::from_le_bytes(b[8..].try_into().expect("4 bytes"));
    assert_eq!(
        VirtioNetHdr::from_words(wlo, whi, len),
        h,
        "from_words != from_bytes"
    );

    // Field-level meaning.
    assert_eq!(h.flags, b[0]);
    assert_eq!(h.gso_type, b[1]);
    assert_eq!(h.is_gso(), b[1] & !net_hdr::GSO_ECN != net_hdr::GSO_NONE);
    assert_eq!(h.needs_csum(), b[0] & net_hdr::F_NEEDS_CSUM != 0);
    true
}
