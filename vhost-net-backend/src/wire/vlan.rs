// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! 802.1Q and 802.1ad VLAN tags.
//!
//! A tag sits where the ethertype was: the frame's ethertype field holds
//! the tag protocol identifier (TPID), and the 4 bytes after it are the tag
//! control information (TCI) and the encapsulated ethertype. [`VlanTag`]
//! is a view of those 4 bytes (Linux's `struct vlan_hdr`), so the payload of
//! an [`EthernetFrame`](super::EthernetFrame) whose ethertype is a TPID is
//! a [`VlanTag`].

/// TPID of an 802.1Q (customer) tag.
pub const ETH_P_8021Q: u16 = 0x8100;
/// TPID of an 802.1ad (service, outer) tag.
pub const ETH_P_8021AD: u16 = 0x88a8;
/// The pre-standard QinQ outer TPID some switches still send.
pub const ETH_P_QINQ1: u16 = 0x9100;

/// Length of a VLAN tag (TPID + TCI), what a tag adds to a frame.
pub const VLAN_HLEN: usize = 4;

/// The largest frame an MTU allows on the wire: the IP packet, the
/// Ethernet header and one 802.1Q tag.
#[inline]
pub const fn max_frame_for_mtu(mtu: usize) -> usize {
    mtu + super::ETH_HLEN + VLAN_HLEN
}
/// Tags looked through before the ethertype: 802.1ad outer + 802.1Q inner.
pub const MAX_VLAN_TAGS: usize = 2;

/// Whether `ethertype` is the TPID of a VLAN tag ([`ETH_P_8021Q`],
/// [`ETH_P_8021AD`], [`ETH_P_QINQ1`]).
#[inline]
pub const fn is_vlan_tpid(ethertype: u16) -> bool {
    matches!(ethertype, ETH_P_8021Q | ETH_P_8021AD | ETH_P_QINQ1)
}

// ===== impl Tci =====

/// Tag control information: priority (PCP), drop eligible (DEI) and VLAN
/// ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Tci(pub u16);

impl Tci {
    /// Mask of the VLAN ID.
    pub const VID_MASK: u16 = 0x0fff;
    /// The drop eligible indicator.
    pub const DEI: u16 = 0x1000;
    /// Shift of the 3-bit priority code point.
    pub const PCP_SHIFT: u32 = 13;

    /// A TCI from its fields; `pcp` is taken modulo 8 and `vid` modulo
    /// 4096.
    #[inline]
    pub const fn new(pcp: u8, dei: bool, vid: u16) -> Self {
        let dei = if dei { Self::DEI } else { 0 };
        Tci(((pcp as u16 & 7) << Self::PCP_SHIFT) | dei | (vid & Self::VID_MASK))
    }

    /// VLAN ID (0: priority tag only).
    #[inline]
    pub const fn vid(self) -> u16 {
        self.0 & Self::VID_MASK
    }

    /// Priority code point (0-7).
    #[inline]
    pub const fn pcp(self) -> u8 {
        (self.0 >> Self::PCP_SHIFT) as u8
    }

    /// Drop eligible indicator.
    #[inline]
    pub const fn dei(self) -> bool {
        self.0 & Self::DEI != 0
    }
}

/// One tag as found in a frame: its TPID and TCI.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Vlan {
    /// Tag protocol identifier ([`ETH_P_8021Q`], [`ETH_P_8021AD`],
    /// [`ETH_P_QINQ1`]).
    pub tpid: u16,
    /// Tag control information.
    pub tci: Tci,
}

// ===== impl VlanTag =====

view! {
    /// A view of the 4 bytes after a TPID: TCI and encapsulated ethertype,
    /// then the payload.
    VlanTag, len VLAN_HLEN;
    /// Tag control information.
    tci / set_tci: Tci = 0;
    /// The encapsulated ethertype (or the TPID of the next tag).
    ethertype / set_ethertype: u16 = 2;
}

impl<T: AsRef<[u8]>> VlanTag<T> {
    /// What follows the tag.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[VLAN_HLEN..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tci_fields() {
        let t = Tci(0xb064);
        assert_eq!((t.pcp(), t.dei(), t.vid()), (5, true, 0x064));
        assert_eq!(Tci::new(5, true, 0x064), t);
        assert_eq!(Tci::new(7, false, 4095), Tci(0xefff));
        assert_eq!(Tci::new(9, false, 4097), Tci::new(1, false, 1));
        assert_eq!(Tci::default().vid(), 0);
        for tci in [0u16, 1, 0x0fff, 0x1000, 0xe000, 0xffff, 0x2064] {
            let t = Tci(tci);
            assert_eq!(Tci::new(t.pcp(), t.dei(), t.vid()), t);
        }
    }

    #[test]
    fn tpids() {
        assert!(is_vlan_tpid(0x8100) && is_vlan_tpid(0x88a8) && is_vlan_tpid(0x9100));
        assert!(!is_vlan_tpid(0x0800) && !is_vlan_tpid(0x86dd) && !is_vlan_tpid(0x9200));
    }

    #[test]
    fn view_and_setters() {
        let b = [0x20, 0x64, 0x08, 0x00, 0x45];
        let t = VlanTag::new_checked(&b[..]).unwrap();
        assert_eq!(t.tci(), Tci(0x2064));
        assert_eq!(t.ethertype(), 0x0800);
        assert_eq!(t.payload(), [0x45]);
        super::super::assert_prefixes_rejected(&b[..VLAN_HLEN], |b| {
            VlanTag::new_checked(b).is_ok()
        });

        let mut m = [0u8; VLAN_HLEN];
        let mut t = VlanTag::new_checked(&mut m[..]).unwrap();
        t.set_tci(Tci::new(3, false, 42));
        t.set_ethertype(0x86dd);
        assert_eq!((t.tci(), t.ethertype()), (Tci::new(3, false, 42), 0x86dd));
        assert_eq!(t.into_inner(), [0x60, 42, 0x86, 0xdd]);
    }
}
