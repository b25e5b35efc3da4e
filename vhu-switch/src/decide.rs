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
    match admit(ingress, head) {
        Ok(vlan) => {
            fdb.learn(vlan, &head.src, ingress.id, now);
            destination(ingress.id, vlan, &head.dst, fdb, now)
        }
        Err(r) => Verdict::Drop(r),
    }
}

/// Steps 1 and 2: the source checks and the VLAN the frame is admitted
/// into.
///
/// # Errors
/// Why the frame is dropped (`malformed`, `spoofed`, `vlan_denied`).
#[inline]
pub fn admit(ingress: &Ingress, head: &Head) -> Result<u16, DropReason> {
    if is_multicast(&head.src) || head.src == [0; 6] {
        return Err(DropReason::Malformed);
    }
    if !ingress.macs.is_empty() && !ingress.macs.contains(&head.src) {
        return Err(DropReason::Spoofed);
    }
    ingress
        .vlan
        .ingress(head.tci.map(|t| t & 0x0fff))
        .ok_or(DropReason::VlanDenied)
}

/// Step 4: where a frame admitted into `vlan` goes (after its source was
/// learned: [`decide`] does it at once, a PMD through [`Fdb::refresh`] and
/// a learning pass after its burst).
#[inline]
pub fn destination(ingress: PortId, vlan: u16, dst: &[u8; 6], fdb: &Fdb, now: u64) -> Verdict {
    if is_multicast(dst) {
        return Verdict::Flood { vlan };
    }
    match fdb.lookup(vlan, dst, now) {
        Some(p) if p == ingress => Verdict::Drop(DropReason::Hairpin),
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
    const C: [u8; 6] = [2, 0, 0, 0, 0, 0xc];
    const BCAST: [u8; 6] = [0xff; 6];

    fn port(id: PortId, vlan: VlanMode) -> Ingress {
        Ingress {
            id,
            vlan,
            macs: vec![],
        }
    }

    /// One frame: ingress port, dst, src, 802.1Q TCI, time, expected verdict.
    type Step<'a> = (&'a Ingress, [u8; 6], [u8; 6], Option<u16>, u64, Verdict);

    #[track_caller]
    fn run(f: &mut Fdb, steps: &[Step<'_>]) {
        for (i, &(p, dst, src, tci, now, want)) in steps.iter().enumerate() {
            let h = Head { dst, src, tci };
            assert_eq!(
                decide(p, &h, f, now),
                want,
                "step {i}: {h:?} from port {}",
                p.id
            );
        }
    }

    const fn fwd(port: PortId, vlan: u16) -> Verdict {
        Verdict::Forward { port, vlan }
    }

    const fn flood(vlan: u16) -> Verdict {
        Verdict::Flood { vlan }
    }

    const fn drop(r: DropReason) -> Verdict {
        Verdict::Drop(r)
    }

    #[test]
    fn learn_then_forward() {
        let mut f = Fdb::new(FdbConfig::default());
        let (p1, p2) = (port(1, VlanMode::default()), port(2, VlanMode::default()));
        run(
            &mut f,
            &[
                // Unknown destination: flood; the source is learned.
                (&p1, B, A, None, 0, flood(0)),
                // The reply goes to where A was seen, and back.
                (&p2, A, B, None, 1, fwd(1, 0)),
                (&p1, B, A, None, 2, fwd(2, 0)),
                // Broadcast floods even when known.
                (&p1, BCAST, A, None, 3, flood(0)),
                // A frame for an address on its own ingress port goes nowhere.
                (&p1, A, C, None, 4, drop(DropReason::Hairpin)),
            ],
        );
        assert_eq!(f.lookup(0, &A, 5), Some(1));
    }

    #[test]
    fn vlans_isolate() {
        let mut f = Fdb::new(FdbConfig::default());
        let p10 = port(1, VlanMode::Access(10));
        let p20 = port(2, VlanMode::Access(20));
        let mut allowed = VlanSet::empty();
        allowed.insert(10);
        let t = port(
            3,
            VlanMode::Trunk {
                allowed,
                native: None,
            },
        );
        run(
            &mut f,
            &[
                (&p10, BCAST, A, None, 0, flood(10)),
                // B in VLAN 20 does not find A of VLAN 10: flooded in VLAN 20.
                (&p20, A, B, None, 0, flood(20)),
                // Tagged frames on an access port are refused.
                (&p10, B, A, Some(10), 0, drop(DropReason::VlanDenied)),
                // PCP bits are ignored: VID 10 is admitted on the trunk.
                (&t, A, B, Some(0x2000 | 10), 0, fwd(1, 10)),
                (&t, A, B, Some(11), 0, drop(DropReason::VlanDenied)),
                // No native VLAN: untagged frames are refused.
                (&t, A, B, None, 0, drop(DropReason::VlanDenied)),
            ],
        );
    }

    #[test]
    fn source_checks() {
        let mut f = Fdb::new(FdbConfig::default());
        let mut locked = port(1, VlanMode::default());
        locked.macs = vec![A];
        let any = port(2, VlanMode::default());
        run(
            &mut f,
            &[
                (&locked, BCAST, A, None, 0, flood(0)),
                (&locked, BCAST, B, None, 0, drop(DropReason::Spoofed)),
                (&any, A, BCAST, None, 0, drop(DropReason::Malformed)),
                (&any, A, [0; 6], None, 0, drop(DropReason::Malformed)),
            ],
        );
        assert_eq!(f.lookup(0, &B, 0), None, "a spoofed source is not learned");
    }

    #[test]
    fn moves_and_aging_change_the_decision() {
        let mut f = Fdb::new(FdbConfig {
            aging: std::time::Duration::from_secs(1),
            ..FdbConfig::default()
        });
        let ports = [1, 2, 3].map(|i| port(i, VlanMode::default()));
        let [p1, p2, p3] = &ports;
        run(
            &mut f,
            &[
                (p1, BCAST, A, None, 0, flood(0)),
                (p3, A, B, None, 0, fwd(1, 0)),
                // A appears on port 2: it moves at once.
                (p2, BCAST, A, None, 10, flood(0)),
                (p3, A, B, None, 20, fwd(2, 0)),
                // Silent for the aging time: unknown again.
                (p3, A, B, None, 1_010, flood(0)),
            ],
        );
        assert_eq!(f.counters().moved, 1);
        assert_eq!(f.learn(0, &A, 2, 1_010), Learned::Refreshed);
    }
}
