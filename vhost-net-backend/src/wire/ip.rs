// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! IP protocol numbers (the IPv4 protocol field, the IPv6 next-header
//! fields), shared by both families.

/// IPv6 Hop-by-Hop Options header.
pub const IPPROTO_HOPOPTS: u8 = 0;
/// ICMP.
pub const IPPROTO_ICMP: u8 = 1;
/// TCP.
pub const IPPROTO_TCP: u8 = 6;
/// UDP.
pub const IPPROTO_UDP: u8 = 17;
/// IPv6 Routing header.
pub const IPPROTO_ROUTING: u8 = 43;
/// IPv6 Fragment header.
pub const IPPROTO_FRAGMENT: u8 = 44;
/// ICMPv6.
pub const IPPROTO_ICMPV6: u8 = 58;
/// IPv6 "no next header".
pub const IPPROTO_NONE: u8 = 59;
/// IPv6 Destination Options header.
pub const IPPROTO_DSTOPTS: u8 = 60;
