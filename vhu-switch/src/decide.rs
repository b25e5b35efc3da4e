// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The forwarding decision: given the ingress port and the head of a frame
//! (copied out of guest memory or lent by an uplink), forward it to one
//! port, flood its VLAN, or drop it and say why. Pure: it reads and learns
//! into the FDB, nothing else; it never touches guest memory or a
//! destination.
//!
//! In order:
//!
//! 1. **Source checks**: a multicast or zero source address is malformed; a
//!    port locked to its MACs drops any other source (`spoofed`).
//! 2. **VLAN**: the ingress port's mode admits the frame into one VLAN, or
//!    drops it (`vlan_denied`); see [`crate::vlan`].
//! 3. **Learning**: `(vlan, src)` is learned on the ingress port (limits and
//!    moves in [`crate::fdb`]).
//! 4. **Destination**: broadcast and multicast flood the VLAN; a known
//!    unicast address goes to its port (or is dropped as `hairpin` when that
//!    is the ingress port: a frame never goes back where it came from);
//!    an unknown one floods the VLAN. Flooding never includes the ingress
//!    port (the caller skips it).

use vhost_net_backend::DropReason;

use crate::fdb::Fdb;
use crate::vlan::VlanMode;
use crate::PortId;

/// What the decision needs of the ingress port.
#[derive(Debug, Clone, Default)]
pub struct Ingress {
    /// The port.
    pub id: PortId,
    /// Its VLAN mode.
    pub vlan: VlanMode,
    /// The only source MACs it may send from; empty: any.
    pub macs: Vec<[u8; 6]>,
}

/// The fields of a frame's head the decision reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Head {
    /// Destination MAC.
    pub dst: [u8; 6],
    /// Source MAC.
    pub src: [u8; 6],
    /// The 802.1Q TCI of its outer tag, if it has one.
    pub tci: Option<u16>,
}

/// The decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// To this port, in this VLAN.
    Forward {
        /// The destination.
        port: PortId,
        /// The frame's VLAN inside the switch.
        vlan: u16,
    },
    /// To every member of this VLAN but the ingress port.
    Flood {
        /// The frame's VLAN inside the switch.
        vlan: u16,
    },
    /// Nowhere, for this reason.
    Drop(DropReason),
}

#[inline]
fn is_multicast(mac: &[u8; 6]) -> bool {
    mac[0] & 1 != 0
}

/// Decides where a frame goes; learns its source. `now` is milliseconds of
/// a monotonic clock (sampled once per burst).
///
/// Hot path: at most two FDB probes, no allocation.
#[inline]
pub fn decide(ingress: &Ingress, head: &Head, fdb: &mut Fdb, now: u64) -> Verdict {
    if is_multicast(&head.src) || head.src == [0; 6] {
        return Verdict::Drop(DropReason::Malformed);
    }
    if !ingress.macs.is_empty() && !ingress.macs.contains(&head.src) {
        return Verdict::Drop(DropReason::Spoofed);
    }
    let Some(vlan) = ingress.vlan.ingress(head.tci.map(|t| t & 0x0fff)) else {
        return Verdict::Drop(DropReason::VlanDenied);
    };
    fdb.learn(vlan, &head.src, ingress.id, now);
    if is_multicast(&head.dst) {
        return Verdict::Flood { vlan };
    }
    match fdb.lookup(vlan, &head.dst, now) {
        Some(p) if p == ingress.id => Verdict::Drop(DropReason::Hairpin),
        Some(port) => Verdict::Forward { port, vlan },
        None => Verdict::Flood { vlan },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fdb::{FdbConfig, Learned};
    use crate::vlan::VlanSet;

    const A: [u8; 6] = [2, 0, 0, 0, 0, 0xa];
    const B: [u8; 6] = [2, 0, 0, 0, 0, 0xb];
    const BCAST: [u8; 6] = [0xff; 6];

    fn port(id: PortId, vlan: VlanMode) -> Ingress {
        Ingress {
            id,
            vlan,
            macs: vec![],
        }
    }

    fn head(dst: [u8; 6], src: [u8; 6], tci: Option<u16>) -> Head {
        Head { dst, src, tci }
    }

    #[test]
    fn learn_then_forward() {
        let mut f = Fdb::new(FdbConfig::default());
        let (p1, p2) = (port(1, VlanMode::default()), port(2, VlanMode::default()));
        // Unknown destination: flood; the source is learned.
        assert_eq!(
            decide(&p1, &head(B, A, None), &mut f, 0),
            Verdict::Flood { vlan: 0 }
        );
        assert_eq!(f.lookup(0, &A, 0), Some(1));
        // The reply is forwarded to where A was seen.
        assert_eq!(
            decide(&p2, &head(A, B, None), &mut f, 1),
            Verdict::Forward { port: 1, vlan: 0 }
        );
        assert_eq!(
            decide(&p1, &head(B, A, None), &mut f, 2),
            Verdict::Forward { port: 2, vlan: 0 }
        );
        // Broadcast floods even when known.
        assert_eq!(
            decide(&p1, &head(BCAST, A, None), &mut f, 3),
            Verdict::Flood { vlan: 0 }
        );
        // A frame for an address on its own ingress port goes nowhere.
        assert_eq!(
            decide(&p1, &head(A, [2, 0, 0, 0, 0, 0xc], None), &mut f, 4),
            Verdict::Drop(DropReason::Hairpin)
        );
    }

    #[test]
    fn vlans_isolate() {
        let mut f = Fdb::new(FdbConfig::default());
        let p10 = port(1, VlanMode::Access(10));
        let p20 = port(2, VlanMode::Access(20));
        decide(&p10, &head(BCAST, A, None), &mut f, 0);
        // B in VLAN 20 does not find A of VLAN 10: flooded in VLAN 20 only.
        assert_eq!(
            decide(&p20, &head(A, B, None), &mut f, 0),
            Verdict::Flood { vlan: 20 }
        );
        // Tagged frames on an access port are refused.
        assert_eq!(
            decide(&p10, &head(B, A, Some(10)), &mut f, 0),
            Verdict::Drop(DropReason::VlanDenied)
        );
        let mut allowed = VlanSet::empty();
        allowed.insert(10);
        let t = port(
            3,
            VlanMode::Trunk {
                allowed,
                native: None,
            },
        );
        assert_eq!(
            decide(&t, &head(A, B, Some(0x2000 | 10)), &mut f, 0),
            Verdict::Forward { port: 1, vlan: 10 },
            "PCP bits ignored, VID 10 admitted"
        );
        assert_eq!(
            decide(&t, &head(A, B, Some(11)), &mut f, 0),
            Verdict::Drop(DropReason::VlanDenied)
        );
        assert_eq!(
            decide(&t, &head(A, B, None), &mut f, 0),
            Verdict::Drop(DropReason::VlanDenied),
            "no native VLAN"
        );
    }

    #[test]
    fn source_checks() {
        let mut f = Fdb::new(FdbConfig::default());
        let mut locked = port(1, VlanMode::default());
        locked.macs = vec![A];
        assert_eq!(
            decide(&locked, &head(BCAST, A, None), &mut f, 0),
            Verdict::Flood { vlan: 0 }
        );
        assert_eq!(
            decide(&locked, &head(BCAST, B, None), &mut f, 0),
            Verdict::Drop(DropReason::Spoofed)
        );
        assert_eq!(f.lookup(0, &B, 0), None, "a spoofed source is not learned");
        let any = port(2, VlanMode::default());
        assert_eq!(
            decide(&any, &head(A, BCAST, None), &mut f, 0),
            Verdict::Drop(DropReason::Malformed)
        );
        assert_eq!(
            decide(&any, &head(A, [0; 6], None), &mut f, 0),
            Verdict::Drop(DropReason::Malformed)
        );
    }

    #[test]
    fn moves_and_aging_change_the_decision() {
        let mut f = Fdb::new(FdbConfig {
            aging: std::time::Duration::from_secs(1),
            ..FdbConfig::default()
        });
        let (p1, p2, p3) = (
            port(1, VlanMode::default()),
            port(2, VlanMode::default()),
            port(3, VlanMode::default()),
        );
        decide(&p1, &head(BCAST, A, None), &mut f, 0);
        assert_eq!(
            decide(&p3, &head(A, B, None), &mut f, 0),
            Verdict::Forward { port: 1, vlan: 0 }
        );
        // A appears on port 2: it moves at once.
        decide(&p2, &head(BCAST, A, None), &mut f, 10);
        assert_eq!(f.counters().moved, 1);
        assert_eq!(
            decide(&p3, &head(A, B, None), &mut f, 20),
            Verdict::Forward { port: 2, vlan: 0 }
        );
        // Silent for the aging time: unknown again.
        assert_eq!(
            decide(&p3, &head(A, B, None), &mut f, 1_010),
            Verdict::Flood { vlan: 0 }
        );
        assert_eq!(f.learn(0, &A, 2, 1_010), Learned::Refreshed);
    }
}
