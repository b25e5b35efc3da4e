// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Ethernet II: lengths, ethertypes, the frame header view and MAC
//! addresses.

use std::fmt;
use std::str::FromStr;

/// Length of a MAC address.
pub const ETH_ALEN: usize = 6;
/// Length of the Ethernet header: destination, source, ethertype.
pub const ETH_HLEN: usize = 14;

/// Ethertype: IPv4.
pub const ETH_P_IPV4: u16 = 0x0800;
/// Ethertype: ARP.
pub const ETH_P_ARP: u16 = 0x0806;
/// Ethertype: IPv6.
pub const ETH_P_IPV6: u16 = 0x86dd;

mod field {
    use super::ETH_ALEN;

    pub const DST: usize = 0;
    pub const SRC: usize = ETH_ALEN;
    pub const ETHERTYPE: usize = 2 * ETH_ALEN;
}

// ===== impl MacAddr =====

/// A MAC address.
///
/// Prints and parses as six colon-separated hex pairs (`02:00:00:00:00:01`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct MacAddr(pub [u8; ETH_ALEN]);

impl MacAddr {
    /// `ff:ff:ff:ff:ff:ff`.
    pub const BROADCAST: MacAddr = MacAddr([0xff; ETH_ALEN]);

    /// The address in `b[..ETH_ALEN]`.
    ///
    /// # Panics
    /// When `b` is shorter than [`ETH_ALEN`].
    #[inline]
    pub fn from_bytes(b: &[u8]) -> Self {
        let mut a = [0; ETH_ALEN];
        a.copy_from_slice(&b[..ETH_ALEN]);
        MacAddr(a)
    }

    /// The six bytes.
    #[inline]
    pub const fn octets(&self) -> [u8; ETH_ALEN] {
        self.0
    }

    /// `ff:ff:ff:ff:ff:ff`.
    #[inline]
    pub fn is_broadcast(&self) -> bool {
        *self == Self::BROADCAST
    }

    /// A group address (the I/G bit set), broadcast included.
    #[inline]
    pub const fn is_multicast(&self) -> bool {
        self.0[0] & 0x01 != 0
    }

    /// An individual address: neither multicast nor broadcast.
    #[inline]
    pub const fn is_unicast(&self) -> bool {
        !self.is_multicast()
    }

    /// A locally administered address (the U/L bit set).
    #[inline]
    pub const fn is_local(&self) -> bool {
        self.0[0] & 0x02 != 0
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d, e, g] = self.0;
        write!(f, "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
    }
}

impl fmt::Debug for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MacAddr({self})")
    }
}

/// A string that is not six colon-separated hex pairs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("invalid MAC address (want six colon-separated hex pairs)")]
pub struct ParseMacError;

impl FromStr for MacAddr {
    type Err = ParseMacError;

    /// Parses `aa:bb:cc:dd:ee:ff` (either case; exactly two digits per
    /// byte).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut a = [0; ETH_ALEN];
        let mut parts = s.split(':');
        for byte in &mut a {
            let p = parts.next().ok_or(ParseMacError)?;
            if p.len() != 2 || !p.bytes().all(|c| c.is_ascii_hexdigit()) {
                return Err(ParseMacError);
            }
            *byte = u8::from_str_radix(p, 16).map_err(|_| ParseMacError)?;
        }
        match parts.next() {
            None => Ok(MacAddr(a)),
            Some(_) => Err(ParseMacError),
        }
    }
}

// ===== impl EthernetFrame =====

view! {
    /// A view of an Ethernet II frame: header, then payload (which starts
    /// with a VLAN tag when the ethertype is a TPID, see [`super::vlan`]).
    EthernetFrame, len ETH_HLEN;
    /// Destination address.
    dst_addr / set_dst_addr: MacAddr = field::DST;
    /// Source address.
    src_addr / set_src_addr: MacAddr = field::SRC;
    /// Ethertype (or the TPID of the first VLAN tag).
    ethertype / set_ethertype: u16 = field::ETHERTYPE;
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// What follows the header.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[ETH_HLEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// What follows the header, writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[ETH_HLEN..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FRAME: [u8; 16] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0, 0, 1, 0x08, 0x06, 0xaa, 0xbb,
    ];

    #[test]
    fn accessors() {
        let f = EthernetFrame::new_checked(&FRAME[..]).unwrap();
        assert!(f.dst_addr().is_broadcast());
        assert_eq!(f.src_addr(), MacAddr([2, 0, 0, 0, 0, 1]));
        assert_eq!(f.ethertype(), ETH_P_ARP);
        assert_eq!(f.payload(), [0xaa, 0xbb]);
        assert_eq!(f.into_inner(), &FRAME[..]);
    }

    #[test]
    fn truncated() {
        super::super::assert_prefixes_rejected(&FRAME[..ETH_HLEN], |b| {
            EthernetFrame::new_checked(b).is_ok()
        });
    }

    #[test]
    fn setters_round_trip() {
        let mut b = [0u8; ETH_HLEN];
        let mut f = EthernetFrame::new_checked(&mut b[..]).unwrap();
        let d: MacAddr = "01:00:5e:00:00:fb".parse().unwrap();
        let s = MacAddr([0x52, 0x54, 0, 0x12, 0x34, 0x56]);
        f.set_dst_addr(d);
        f.set_src_addr(s);
        f.set_ethertype(ETH_P_IPV6);
        assert_eq!(
            (f.dst_addr(), f.src_addr(), f.ethertype()),
            (d, s, ETH_P_IPV6)
        );
        assert!(f.payload_mut().is_empty());
        assert_eq!(b[12..], [0x86, 0xdd]);
    }

    #[test]
    fn mac_classes() {
        let b = MacAddr::BROADCAST;
        assert!(b.is_broadcast() && b.is_multicast() && !b.is_unicast());
        let m = MacAddr([0x33, 0x33, 0, 0, 0, 1]);
        assert!(!m.is_broadcast() && m.is_multicast() && !m.is_unicast());
        let u = MacAddr([0x02, 0, 0, 0, 0, 1]);
        assert!(!u.is_broadcast() && !u.is_multicast() && u.is_unicast() && u.is_local());
        assert!(!MacAddr([0x00, 0x1b, 0x21, 1, 2, 3]).is_local());
    }

    #[test]
    fn mac_print_and_parse() {
        let a = MacAddr([0x02, 0xab, 0, 0x0f, 0x10, 0xff]);
        assert_eq!(a.to_string(), "02:ab:00:0f:10:ff");
        assert_eq!(format!("{a:?}"), "MacAddr(02:ab:00:0f:10:ff)");
        assert_eq!("02:ab:00:0f:10:ff".parse(), Ok(a));
        assert_eq!("02:AB:00:0F:10:FF".parse(), Ok(a));
        for bad in [
            "",
            "02:ab:00:0f:10",
            "02:ab:00:0f:10:ff:00",
            "02:ab:00:0f:10:f",
            "02:ab:00:0f:10:fff",
            "2:ab:00:0f:10:ff",
            "02-ab-00-0f-10-ff",
            "02:ab:00:0f:10:fg",
            "02:ab:00:0f:10:+f",
            "02:ab:00:0f:10:ff:",
        ] {
            assert_eq!(bad.parse::<MacAddr>(), Err(ParseMacError), "{bad:?}");
        }
    }
}
