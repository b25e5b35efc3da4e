// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Port VLAN modes (IEEE 802.1Q): which VLAN a frame arriving on a port
//! belongs to, and how it leaves another port.
//!
//! | mode | arriving untagged (or priority-tagged, VID 0) | arriving tagged with VID v | leaving in VLAN v |
//! |---|---|---|---|
//! | access `a` | VLAN `a` | dropped (`vlan_denied`) | untagged, if `v == a`; not a member otherwise |
//! | trunk `allowed`, `native` | VLAN `native` (dropped without one) | VLAN `v` if allowed, else dropped | untagged if `v == native`, tagged if `v` allowed, not a member otherwise |
//! | none (the default) | VLAN 0 | VLAN `v` | untagged in VLAN 0, tagged otherwise |
//!
//! A port with no VLAN mode is a trunk of every VLAN whose untagged frames
//! form VLAN 0, as in Open vSwitch: a switch with no VLAN configuration
//! passes tags through unchanged.
//!
//! Only the outermost tag with TPID 0x8100 is a VLAN tag here; an 802.1ad
//! (0x88a8) frame is an untagged frame of that EtherType.

use vhu_api::Vlan;

/// The VLAN of untagged frames on ports without a VLAN mode.
pub const UNTAGGED_VLAN: u16 = 0;

/// A set of VLAN ids (0-4095), one bit each.
#[derive(Clone, PartialEq, Eq)]
pub struct VlanSet([u64; 64]);

impl std::fmt::Debug for VlanSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl VlanSet {
    /// No VLAN.
    pub const fn empty() -> Self {
        Self([0; 64])
    }

    /// Every VLAN id 1-4094.
    pub fn all() -> Self {
        let mut s = Self([u64::MAX; 64]);
        s.remove(0);
        s.remove(4095);
        s
    }

    /// Adds `v` (ids above 4095 are ignored).
    pub fn insert(&mut self, v: u16) {
        if v < 4096 {
            self.0[usize::from(v / 64)] |= 1 << (v % 64);
        }
    }

    /// Removes `v`.
    pub fn remove(&mut self, v: u16) {
        if v < 4096 {
            self.0[usize::from(v / 64)] &= !(1 << (v % 64));
        }
    }

    /// Whether `v` is in the set.
    #[inline]
    pub fn contains(&self, v: u16) -> bool {
        v < 4096 && self.0[usize::from(v / 64)] & (1 << (v % 64)) != 0
    }

    /// Whether the two sets have an id in common.
    pub fn intersects(&self, other: &VlanSet) -> bool {
        self.0.iter().zip(&other.0).any(|(a, b)| a & b != 0)
    }

    /// The ids in the set, ascending.
    pub fn iter(&self) -> impl Iterator<Item = u16> + '_ {
        (0u16..4096).filter(|&v| self.contains(v))
    }
}

/// A port's VLAN mode, ready for the data plane.
// One per port: the 512-byte set stays inline so that a membership test is
// one load away from the port, not behind a pointer.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VlanMode {
    /// Access port.
    Access(u16),
    /// Trunk port (also the default: every VLAN, native 0).
    Trunk {
        /// VLANs whose tagged frames pass.
        allowed: VlanSet,
        /// The VLAN of untagged frames.
        native: Option<u16>,
    },
}

impl Default for VlanMode {
    /// The mode of a port with no `vlan` field.
    fn default() -> Self {
        VlanMode::Trunk {
            allowed: VlanSet::all(),
            native: Some(UNTAGGED_VLAN),
        }
    }
}

impl VlanMode {
    /// The mode of an API [`Vlan`] (already validated: ids 1-4094; anything
    /// else is clamped out of the set).
    pub fn from_api(v: Option<&Vlan>) -> Self {
        match v {
            None => Self::default(),
            Some(Vlan::Access(a)) => VlanMode::Access(u16::try_from(*a).unwrap_or(0)),
            Some(Vlan::Trunk { allowed, native }) => {
                let mut set = VlanSet::empty();
                for &a in allowed {
                    if let Ok(a) = u16::try_from(a) {
                        set.insert(a);
                    }
                }
                VlanMode::Trunk {
                    allowed: set,
                    native: native.and_then(|n| u16::try_from(n).ok()),
                }
            }
        }
    }

    /// The VLAN of a frame arriving on this port: `tag` is the VID of its
    /// 802.1Q tag (`None`: untagged; `Some(0)`: priority-tagged, which
    /// counts as untagged). `None` if the port does not admit it.
    #[inline]
    pub fn ingress(&self, tag: Option<u16>) -> Option<u16> {
        let vid = tag.filter(|&v| v != 0);
        match (self, vid) {
            (VlanMode::Access(a), None) => Some(*a),
            (VlanMode::Access(_), Some(_)) => None,
            (VlanMode::Trunk { native, .. }, None) => *native,
            (VlanMode::Trunk { allowed, .. }, Some(v)) => allowed.contains(v).then_some(v),
        }
    }

    /// Every VLAN a frame arriving on this port may belong to (its access
    /// VLAN; a trunk's allowed VLANs and native VLAN).
    pub fn admitted(&self) -> VlanSet {
        match self {
            VlanMode::Access(a) => {
                let mut s = VlanSet::empty();
                s.insert(*a);
                s
            }
            VlanMode::Trunk { allowed, native } => {
                let mut s = allowed.clone();
                if let Some(n) = native {
                    s.insert(*n);
                }
                s
            }
        }
    }

    /// How a frame of VLAN `vlan` leaves this port: untagged, tagged, or
    /// not at all (the port is not a member).
    #[inline]
    pub fn egress(&self, vlan: u16) -> Egress {
        match self {
            VlanMode::Access(a) if *a == vlan => Egress::Untagged,
            VlanMode::Access(_) => Egress::NotMember,
            VlanMode::Trunk { native, .. } if *native == Some(vlan) => Egress::Untagged,
            VlanMode::Trunk { allowed, .. } if allowed.contains(vlan) => Egress::Tagged(vlan),
            VlanMode::Trunk { .. } => Egress::NotMember,
        }
    }
}

/// How a frame leaves a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Egress {
    /// Without a VLAN tag.
    Untagged,
    /// With an 802.1Q tag of this VID.
    Tagged(u16),
    /// Not at all: the port is not in the frame's VLAN.
    NotMember,
}

/// What to do to a frame's tag between ingress and egress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TagEdit {
    /// Copy the frame as it is.
    Keep,
    /// Remove its 802.1Q tag.
    Pop,
    /// Insert an 802.1Q tag with this TCI after the MAC addresses.
    Push(u16),
    /// Replace the TCI of its tag (a priority-tagged frame leaving tagged).
    Rewrite(u16),
}

impl TagEdit {
    /// The edit that turns a frame that arrived with `tci` (its 802.1Q TCI,
    /// `None` if untagged) into what `egress` wants. The priority bits of an
    /// arriving tag are kept.
    #[inline]
    pub fn between(tci: Option<u16>, egress: Egress) -> Option<TagEdit> {
        match (tci, egress) {
            (_, Egress::NotMember) => None,
            (None, Egress::Untagged) => Some(TagEdit::Keep),
            (Some(_), Egress::Untagged) => Some(TagEdit::Pop),
            (None, Egress::Tagged(v)) => Some(TagEdit::Push(v & 0x0fff)),
            (Some(t), Egress::Tagged(v)) if t & 0x0fff == v => Some(TagEdit::Keep),
            (Some(t), Egress::Tagged(v)) => Some(TagEdit::Rewrite((t & 0xf000) | (v & 0x0fff))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trunk(allowed: &[u16], native: Option<u16>) -> VlanMode {
        let mut s = VlanSet::empty();
        allowed.iter().for_each(|&v| s.insert(v));
        VlanMode::Trunk { allowed: s, native }
    }

    #[test]
    fn set_operations() {
        let mut s = VlanSet::empty();
        for v in [0, 1, 63, 64, 4094, 4095, 5000] {
            s.insert(v);
        }
        assert_eq!(s.iter().collect::<Vec<_>>(), [0, 1, 63, 64, 4094, 4095]);
        s.remove(63);
        assert!(!s.contains(63) && s.contains(64) && !s.contains(5000));
        let all = VlanSet::all();
        assert!(!all.contains(0) && all.contains(1) && all.contains(4094) && !all.contains(4095));
        assert_eq!(all.iter().count(), 4094);
    }

    #[test]
    fn access_ports() {
        let m = VlanMode::Access(10);
        assert_eq!(m.ingress(None), Some(10));
        assert_eq!(m.ingress(Some(0)), Some(10), "priority-tagged");
        assert_eq!(m.ingress(Some(10)), None);
        assert_eq!(m.ingress(Some(20)), None);
        assert_eq!(m.egress(10), Egress::Untagged);
        assert_eq!(m.egress(20), Egress::NotMember);
    }

    #[test]
    fn trunk_ports() {
        let m = trunk(&[10, 20], Some(10));
        assert_eq!(m.ingress(None), Some(10));
        assert_eq!(m.ingress(Some(20)), Some(20));
        assert_eq!(m.ingress(Some(30)), None);
        assert_eq!(m.egress(10), Egress::Untagged);
        assert_eq!(m.egress(20), Egress::Tagged(20));
        assert_eq!(m.egress(30), Egress::NotMember);
        let no_native = trunk(&[10], None);
        assert_eq!(no_native.ingress(None), None);
        assert_eq!(no_native.egress(10), Egress::Tagged(10));
    }

    #[test]
    fn default_passes_tags_through() {
        let m = VlanMode::default();
        assert_eq!(m.ingress(None), Some(0));
        assert_eq!(m.ingress(Some(100)), Some(100));
        assert_eq!(m.egress(0), Egress::Untagged);
        assert_eq!(m.egress(100), Egress::Tagged(100));
        assert_eq!(
            VlanMode::from_api(Some(&Vlan::Trunk {
                allowed: vec![3, 4],
                native: Some(4)
            })),
            trunk(&[3, 4], Some(4))
        );
        assert_eq!(
            VlanMode::from_api(Some(&Vlan::Access(7))),
            VlanMode::Access(7)
        );
    }

    #[test]
    fn admitted_vlans_overlap() {
        let a10 = VlanMode::Access(10);
        let t = trunk(&[20, 30], Some(10));
        let t2 = trunk(&[30], None);
        assert!(a10.admitted().intersects(&t.admitted()), "native 10");
        assert!(t.admitted().intersects(&t2.admitted()), "30");
        assert!(!a10.admitted().intersects(&t2.admitted()));
        assert!(!a10.admitted().intersects(&VlanMode::Access(20).admitted()));
        let none = VlanMode::default().admitted();
        assert!(none.contains(0) && none.intersects(&a10.admitted()));
    }

    #[test]
    fn tag_edits() {
        use TagEdit::*;
        assert_eq!(TagEdit::between(None, Egress::Untagged), Some(Keep));
        assert_eq!(TagEdit::between(Some(0x2014), Egress::Untagged), Some(Pop));
        assert_eq!(TagEdit::between(None, Egress::Tagged(20)), Some(Push(20)));
        assert_eq!(
            TagEdit::between(Some(0x2014), Egress::Tagged(20)),
            Some(Keep)
        );
        // Priority-tagged (VID 0) into VLAN 20: the PCP survives.
        assert_eq!(
            TagEdit::between(Some(0xa000), Egress::Tagged(20)),
            Some(Rewrite(0xa014))
        );
        assert_eq!(TagEdit::between(None, Egress::NotMember), None);
    }
}
