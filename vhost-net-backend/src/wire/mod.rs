// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The wire layer: Ethernet, 802.1Q/802.1ad, IPv4, IPv6 (with extension
//! headers), TCP and UDP, as checked views over bytes, plus the Internet
//! checksum. The crate's protocol constants (lengths, ethertypes, TPIDs,
//! protocol numbers, flags) are defined here, once each.
//!
//! # Contract
//!
//! * Views are over **host bytes only**: a scratch buffer, an uplink's ring
//!   slot, the private head copy of a guest frame
//!   ([`crate::queue::HEAD_LEN`] bytes). Never over guest memory, which the
//!   guest may change while it is read.
//! * Input is hostile. A view made with `new_checked` (smoltcp's
//!   `Packet::new_checked`) has had its lengths validated: none of its
//!   accessors or setters panics. A view made with `new_unchecked` is for
//!   bytes the caller has already validated (a copy of checked headers);
//!   its accessors panic on a buffer too short for their field.
//! * `check_len` checks what the accessors need and no more: the fixed
//!   header, and the header length the packet announces (IPv4 IHL, TCP data
//!   offset, IPv6 extension header length), plus the IP version. It does
//!   **not** check length fields against the buffer (IPv4 total length, IPv6
//!   payload length, UDP length: a GSO super-frame's may be anything), nor
//!   checksums, nor that the addresses make sense.
//! * Errors are a small `Copy` [`WireError`], for counting rather than
//!   logging; [`parse_headers`] classifies a frame and says more
//!   ([`HeadersError`]).
//!
//! # Map
//!
//! | module | what it answers |
//! |---|---|
//! | [`ethernet`] | `ETH_*` lengths and ethertypes, [`EthernetFrame`], [`MacAddr`] |
//! | [`vlan`] | TPIDs, the TCI ([`Tci`]), [`VlanTag`], how many tags are looked through |
//! | [`ip`] | IP protocol numbers (shared by IPv4 and IPv6) |
//! | [`ipv4`] | [`Ipv4Packet`], flags and fragment fields |
//! | [`ipv6`] | [`Ipv6Packet`], extension headers and their walk ([`ExtHeaderWalk`]) |
//! | [`tcp`] | [`TcpPacket`], flags |
//! | [`udp`] | [`UdpPacket`] |
//! | [`checksum`] | the Internet checksum and the TCP/UDP pseudo-header |
//! | `headers` | [`L2Head`] (the switch's view of a frame head) and [`parse_headers`] (offsets of every header up to TCP/UDP) |

use std::net::{Ipv4Addr, Ipv6Addr};

// ===== view building blocks =====

/// A big-endian header field: how a view reads and writes it.
///
/// `get` and `put` panic when the field does not fit the buffer: views call
/// them only for fields their `check_len` covered.
trait Field: Copy {
    fn get(b: &[u8], at: usize) -> Self;
    fn put(self, b: &mut [u8], at: usize);
}

impl Field for u8 {
    #[inline]
    fn get(b: &[u8], at: usize) -> Self {
        b[at]
    }
    #[inline]
    fn put(self, b: &mut [u8], at: usize) {
        b[at] = self;
    }
}

/// `Field` for a type that is (or wraps) an array of bytes in wire order.
macro_rules! field_bytes {
    ($ty:ty, $n:expr, $from:expr, $to:expr) => {
        impl Field for $ty {
            #[inline]
            fn get(b: &[u8], at: usize) -> Self {
                let mut a = [0; $n];
                a.copy_from_slice(&b[at..at + $n]);
                $from(a)
            }
            #[inline]
            fn put(self, b: &mut [u8], at: usize) {
                b[at..at + $n].copy_from_slice(&$to(self));
            }
        }
    };
}

field_bytes!(u16, 2, u16::from_be_bytes, u16::to_be_bytes);
field_bytes!(u32, 4, u32::from_be_bytes, u32::to_be_bytes);
field_bytes!(MacAddr, ETH_ALEN, MacAddr, |m: MacAddr| m.0);
field_bytes!(Tci, 2, |a| Tci(u16::from_be_bytes(a)), |t: Tci| t
    .0
    .to_be_bytes());
field_bytes!(Ipv4Addr, 4, Ipv4Addr::from, |a: Ipv4Addr| a.octets());
field_bytes!(Ipv6Addr, 16, Ipv6Addr::from, |a: Ipv6Addr| a.octets());

/// A view type over `T: AsRef<[u8]>` (smoltcp's shape): the struct,
/// `new_unchecked`, `new_checked` (which calls the view's `check_len`),
/// `into_inner`, and accessors (with setters after a `/`) of its fixed
/// fields: `name / set_name: Type = offset;`. With `len`, also the
/// `check_len` of a fixed-size header.
macro_rules! view {
    (
        $(#[$doc:meta])* $name:ident $(, len $len:path)?;
        $($(#[$fdoc:meta])* $get:ident $(/ $set:ident)?: $ty:ty = $at:expr;)*
    ) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// A view without a check (see the [module contract](crate::wire)).
            #[inline]
            pub const fn new_unchecked(buffer: T) -> Self {
                Self { buffer }
            }

            /// A view whose accessors cannot panic.
            ///
            /// # Errors
            /// As [`Self::check_len`].
            pub fn new_checked(buffer: T) -> Result<Self, $crate::wire::WireError> {
                let v = Self::new_unchecked(buffer);
                v.check_len()?;
                Ok(v)
            }

            /// The underlying buffer.
            #[inline]
            pub fn into_inner(self) -> T {
                self.buffer
            }

            $(
                #[doc = concat!(
                    "Checks that the header fits.\n\n# Errors\n",
                    "[`WireError::Truncated`](crate::wire::WireError::Truncated): ",
                    "shorter than [`", stringify!($len), "`]."
                )]
                #[inline]
                pub fn check_len(&self) -> Result<(), $crate::wire::WireError> {
                    $crate::wire::check_hlen(self.buffer.as_ref().len(), $len, || true, || $len)
                }
            )?

            $(
                $(#[$fdoc])*
                #[inline]
                pub fn $get(&self) -> $ty {
                    <$ty as $crate::wire::Field>::get(self.buffer.as_ref(), $at)
                }
            )*
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $name<T> {
            $($(
                #[doc = concat!("Sets [`", stringify!($get), "`](Self::", stringify!($get), ").")]
                #[inline]
                pub fn $set(&mut self, v: $ty) {
                    $crate::wire::Field::put(v, self.buffer.as_mut(), $at);
                }
            )?)*
        }
    };
}

/// The `check_len` of a header that announces its own length, in this
/// order: the fixed part (`min` bytes) fits ([`WireError::Truncated`]),
/// `valid` holds on it ([`WireError::Malformed`]: e.g. the IP version), the
/// announced length `hlen` is at least `min` ([`WireError::Malformed`]) and
/// fits ([`WireError::Truncated`]).
#[inline]
fn check_hlen(
    len: usize,
    min: usize,
    valid: impl FnOnce() -> bool,
    hlen: impl FnOnce() -> usize,
) -> Result<(), WireError> {
    if len < min {
        return Err(WireError::Truncated);
    }
    if !valid() {
        return Err(WireError::Malformed);
    }
    let h = hlen();
    if h < min {
        return Err(WireError::Malformed);
    }
    if len < h {
        return Err(WireError::Truncated);
    }
    Ok(())
}

pub mod announce;
pub mod checksum;
pub mod ethernet;
mod headers;
pub mod ip;
pub mod ipv4;
pub mod ipv6;
pub mod tcp;
pub mod udp;
pub mod vlan;

pub use announce::{rarp_announce, ANNOUNCE_LEN, ETH_P_RARP};
pub use ethernet::{
    EthernetFrame, MacAddr, ParseMacError, ETH_ALEN, ETH_HLEN, ETH_P_ARP, ETH_P_IPV4, ETH_P_IPV6,
};
pub use headers::{parse_headers, Headers, HeadersError, L2Head};
pub use ip::{
    IPPROTO_DSTOPTS, IPPROTO_FRAGMENT, IPPROTO_HOPOPTS, IPPROTO_ICMP, IPPROTO_ICMPV6, IPPROTO_NONE,
    IPPROTO_ROUTING, IPPROTO_TCP, IPPROTO_UDP,
};
pub use ipv4::{Ipv4Packet, IPV4_DF, IPV4_FRAG_OFFSET_MASK, IPV4_MF, IPV4_MIN_HLEN};
pub use ipv6::{
    is_ext_header, ExtHeaderWalk, Ipv6ExtHeader, Ipv6FragHeader, Ipv6Packet, IPV6_FRAG_HLEN,
    IPV6_HLEN, IPV6_MAX_EXT_HEADERS,
};
pub use tcp::{
    TcpPacket, TCP_ACK, TCP_CSUM_OFFSET, TCP_CWR, TCP_ECE, TCP_FIN, TCP_MIN_HLEN, TCP_PSH, TCP_RST,
    TCP_SYN,
};
pub use udp::{UdpPacket, UDP_CSUM_OFFSET, UDP_HLEN};
pub use vlan::{
    is_vlan_tpid, max_frame_for_mtu, Tci, Vlan, VlanTag, ETH_P_8021AD, ETH_P_8021Q, ETH_P_QINQ1,
    MAX_VLAN_TAGS, VLAN_HLEN,
};

/// Why bytes are not a valid header.
///
/// A per-packet outcome: small and `Copy`, to be counted rather than logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The buffer ends before the header, or before the length the header
    /// announces.
    #[error("header truncated")]
    Truncated,
    /// A field has an impossible value (IP version, a header length below
    /// the minimum, a runaway extension-header chain).
    #[error("malformed header")]
    Malformed,
}

/// Test helper: `accepts` (a view's `new_checked(..).is_ok()`) refuses
/// every strict prefix of `pkt` and takes `pkt` itself.
#[cfg(test)]
fn assert_prefixes_rejected(pkt: &[u8], accepts: impl Fn(&[u8]) -> bool) {
    for n in 0..pkt.len() {
        assert!(!accepts(&pkt[..n]), "prefix of {n} bytes");
    }
    assert!(accepts(pkt), "whole packet");
}
