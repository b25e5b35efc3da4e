// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The Internet checksum (RFC 1071) and the TCP/UDP pseudo-header sum.
//!
//! Sums are kept unfolded in a `u64` accumulator while data is added
//! ([`sum_bytes`], [`pseudo_sum`]) and folded once at the end ([`fold`]).

/// Adds `data` as big-endian 16-bit words (an odd last byte padded with a
/// zero byte) to the unfolded ones'-complement accumulator `acc`.
///
/// 32-bit words are summed into a 64-bit accumulator; since 2^16 = 1 modulo
/// 2^16 - 1, folding the result gives the 16-bit ones'-complement sum. The
/// accumulator cannot overflow for any slice shorter than 2^32 words.
pub fn sum_bytes(data: &[u8], mut acc: u64) -> u64 {
    let mut words = data.chunks_exact(4);
    for w in &mut words {
        acc += u64::from(u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
    }
    let rest = words.remainder();
    let mut i = 0;
    if rest.len() >= 2 {
        acc += u64::from(u16::from_be_bytes([rest[0], rest[1]]));
        i = 2;
    }
    if let Some(&b) = rest.get(i) {
        acc += u64::from(b) << 8;
    }
    acc
}

/// Folds an accumulator to a 16-bit ones'-complement sum.
pub fn fold(mut acc: u64) -> u16 {
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// The Internet checksum (RFC 1071) of `data`: the ones' complement of its
/// ones'-complement sum.
pub fn checksum(data: &[u8]) -> u16 {
    !fold(sum_bytes(data, 0))
}

/// The folded (not complemented) TCP/UDP pseudo-header sum: what a sender
/// stores in the checksum field of a frame it hands over with
/// `F_NEEDS_CSUM`, before the device completes it.
///
/// `src` and `dst` are the IP source and destination addresses (4 bytes for
/// IPv4, 16 for IPv6), `proto` the transport protocol and `l4_len` the
/// length of the transport header plus payload.
pub fn pseudo_header_checksum(src: &[u8], dst: &[u8], proto: u8, l4_len: u32) -> u16 {
    fold(pseudo_sum(src, dst, proto, l4_len))
}

/// The unfolded pseudo-header sum (see [`pseudo_header_checksum`]), to
/// continue with [`sum_bytes`] over the transport header and payload.
pub fn pseudo_sum(src: &[u8], dst: &[u8], proto: u8, l4_len: u32) -> u64 {
    let acc = sum_bytes(src, 0);
    let acc = sum_bytes(dst, acc);
    acc + u64::from(proto) + u64::from(l4_len >> 16) + u64::from(l4_len & 0xffff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1071_example() {
        // RFC 1071 section 3: the sum of these words is 0xddf2.
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum_bytes(&data, 0)), 0xddf2);
        assert_eq!(checksum(&data), !0xddf2);
        // Odd length: the last byte is padded with zero.
        assert_eq!(checksum(&[0x01]), !0x0100);
        assert_eq!(checksum(&[0x00, 0x01, 0xf2]), !0xf201);
        assert_eq!(checksum(&[]), 0xffff);
    }

    #[test]
    fn ipv4_header_known_answer() {
        // A classic captured header whose checksum is 0xb861.
        let mut h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(checksum(&h), 0xb861);
        h[10..12].copy_from_slice(&[0xb8, 0x61]);
        assert_eq!(checksum(&h), 0);
    }

    /// Chunk boundaries of the 32-bit summing do not change the result.
    #[test]
    fn wide_sum_matches_word_sum() {
        let mut x = 0x1234_5678u32;
        let data: Vec<u8> = (0..1001)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect();
        for n in 0..data.len() {
            let d = &data[..n];
            // Reference: 16-bit words, an odd last byte padded with zero,
            // folded after every addition.
            let mut padded = d.to_vec();
            if n % 2 == 1 {
                padded.push(0);
            }
            let mut acc = 0u32;
            for w in padded.chunks_exact(2) {
                acc += u32::from(u16::from_be_bytes([w[0], w[1]]));
                acc = (acc & 0xffff) + (acc >> 16);
            }
            assert_eq!(checksum(d), !(acc as u16), "len {n}");
        }
    }

    #[test]
    fn pseudo_header_parts() {
        let src = [192, 168, 0, 1];
        let dst = [192, 168, 0, 199];
        // UDP, 12 bytes: the known answer of the offload tests.
        assert_eq!(pseudo_header_checksum(&src, &dst, 17, 12), 0x8236);
        // The length's high half counts (IPv6 jumbo lengths).
        assert_eq!(
            fold(pseudo_sum(&src, &dst, 17, 0x1_000c)),
            fold(pseudo_sum(&src, &dst, 17, 12) + 1)
        );
    }
}
