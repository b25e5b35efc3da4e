// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The forwarding decision: given the ingress port, the head of a frame
//! (copied out of guest memory or lent by an uplink) and the learn buffer
//! of the burst it arrived in, forward it to one port, flood its VLAN, or
//! drop it and say why. [`decide`] is the one decision: the PMD calls it
//! for every frame it does not take a kept decision for (`pmd::burst`), and
//! the criterion bench and the `switching` fuzz target run it. Pure: it
//! reads the FDB (refreshing known sources' timestamps) and notes new
//! sources in the burst's [`Learns`]; it never touches guest memory or a
//! destination.
//!
//! In order:
//!
//! 1. **Parse**: the Ethernet header and its tags ([`L2Head::parse`]); a
//!    runt is dropped (`too_short`).
//! 2. **Source checks**: a multicast or zero source address is malformed; a
//!    port locked to its MACs drops any other source (`spoofed`).
//! 3. **VLAN**: the ingress port's mode admits the frame into one VLAN, or
//!    drops it (`vlan_denied`); see [`crate::vlan`].
//! 4. **Learning**, deferred to the end of the burst: a source already on
//!    the ingress port is refreshed in place ([`Fdb::refresh`]); a static
//!    entry on another port stays there (the conflict is counted); any other
//!    source is noted in the burst's [`Learns`] and learned after the burst,
//!    under the FDB's write lock ([`Learns::learn_into`]; limits and moves
//!    in [`crate::fdb`]).
//! 5. **Destination**: broadcast and multicast flood the VLAN; a known
//!    unicast address goes to its port (or is dropped as `hairpin` when that
//!    is the ingress port: a frame never goes back where it came from);
//!    an unknown one floods the VLAN. Flooding never includes the ingress
//!    port (the caller skips it). Within a burst the table does not yet
//!    hold what the burst noted, so two rules stand in for it: a unicast
//!    frame to an address the burst noted on the ingress port, or to its own
//!    new source address, is a `hairpin` drop too (also when the table still
//!    has that address on the port it left).

use vhost_net_backend::wire::{L2Head, ETH_P_8021Q};
use vhost_net_backend::DropReason;

use crate::fdb::{Fdb, Learned, Seen};
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

/// The fields of a frame's head the source checks and the VLAN admission
/// read.
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

/// What deciding on a frame found: the verdict, and what its delivery
/// needs of the head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decided {
    /// Where the frame goes (a `hairpin` drop is a verdict too).
    pub verdict: Verdict,
    /// The frame's outer 802.1Q TCI.
    pub tci: Option<u16>,
    /// Its source is a static entry on another port (counted per frame:
    /// a caller repeating this decision for a later frame counts it again).
    pub conflict: bool,
}

/// Most sources one burst notes for learning: the PMD's burst (one per
/// frame at most). A burst that finds more forwards their frames and
/// learns them in a later burst.
pub const MAX_LEARNS: usize = 32;

/// The sources a burst found new on (or moved to) its ingress port, learned
/// after the burst: the burst reads the FDB as it was when it began.
/// Allocated once ([`MAX_LEARNS`] entries), never grown.
#[derive(Debug, Clone)]
pub struct Learns(Vec<(u16, [u8; 6], PortId)>);

impl Default for Learns {
    fn default() -> Self {
        Self(Vec::with_capacity(MAX_LEARNS))
    }
}

impl Learns {
    /// Whether the burst noted nothing.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many sources the burst noted.
    #[inline]
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Forgets what the burst noted.
    #[inline]
    pub fn clear(&mut self) {
        self.0.clear();
    }

    /// Whether `(vlan, mac)` was noted.
    #[inline]
    fn has(&self, vlan: u16, mac: &[u8; 6]) -> bool {
        self.0.iter().any(|l| l.0 == vlan && l.1 == *mac)
    }

    /// Notes `(vlan, mac)` on `port`, unless it is noted already or the
    /// buffer is full.
    #[inline]
    fn note(&mut self, vlan: u16, mac: &[u8; 6], port: PortId) {
        if self.0.len() < MAX_LEARNS && !self.has(vlan, mac) {
            self.0.push((vlan, *mac, port));
        }
    }

    /// Learns what the burst noted into `fdb` (the caller holds its write
    /// lock) and forgets it; returns how many were refused for a limit
    /// ([`Learned::LimitHit`]).
    pub fn learn_into(&mut self, fdb: &mut Fdb, now: u64) -> u64 {
        let mut refused = 0;
        for (vlan, mac, port) in self.0.drain(..) {
            if fdb.learn(vlan, &mac, port, now) == Learned::LimitHit {
                refused += 1;
            }
        }
        refused
    }
}

#[inline]
fn is_multicast(mac: &[u8; 6]) -> bool {
    mac[0] & 1 != 0
}

/// 802.1Q TCI of a head's outer tag, if it is a C-tag.
#[inline]
fn outer_tci(l2: &L2Head) -> Option<u16> {
    l2.vlans()
        .first()
        .filter(|v| v.tpid == ETH_P_8021Q)
        .map(|v| v.tci.0)
}

/// Decides where the frame whose head is `head` goes, arriving on
/// `ingress` in a burst whose new sources are in `learns`; notes its
/// source there when it is new. `fdb` is the table as the burst began
/// (read-locked for the burst); `now` is milliseconds of a monotonic clock
/// (sampled once per burst).
///
/// Hot path: one parse of the head, at most two FDB probes, a scan of the
/// burst's learn buffer, no allocation.
///
/// # Errors
/// The frames dropped before a destination is looked up: runts
/// (`too_short`), and the source checks and the VLAN admission
/// (`malformed`, `spoofed`, `vlan_denied`). A frame dropped by its
/// destination (`hairpin`) is `Ok` with a [`Verdict::Drop`].
#[inline]
pub fn decide(
    ingress: &Ingress,
    head: &[u8],
    fdb: &Fdb,
    learns: &mut Learns,
    now: u64,
) -> Result<Decided, DropReason> {
    let Ok(l2) = L2Head::parse(head) else {
        return Err(DropReason::TooShort);
    };
    let h = Head {
        dst: l2.dst().0,
        src: l2.src().0,
        tci: outer_tci(&l2),
    };
    let vlan = admit(ingress, &h)?;
    // Known: on the ingress port already, or a static entry elsewhere
    // (not learned: the frame's own address stays where the table has
    // it, and a frame to it goes there).
    let seen = fdb.refresh(vlan, &h.src, ingress.id, now);
    let known = seen != Seen::New;
    if !known {
        learns.note(vlan, &h.src, ingress.id);
    }
    let mut verdict = destination(ingress.id, vlan, &h.dst, fdb, now);
    if !matches!(verdict, Verdict::Drop(_))
        && !is_multicast(&h.dst)
        && ((!known && h.dst == h.src) || learns.has(vlan, &h.dst))
    {
        // An address this burst found on the ingress port (learned when
        // the burst ends, or a frame to its own new source when the
        // burst's learn buffer is full): back where it came from, as
        // step 5 says. Also when the table still has it on another
        // port (it moved in this burst): not to the port it left.
        verdict = Verdict::Drop(DropReason::Hairpin);
    }
    Ok(Decided {
        verdict,
        tci: h.tci,
        conflict: seen == Seen::StaticElsewhere,
    })
}

/// Steps 2 and 3: the source checks and the VLAN the frame is admitted
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

/// Step 5 against the table alone (without the burst's learn buffer):
/// where a frame admitted into `vlan` goes.
#[inline]
fn destination(ingress: PortId, vlan: u16, dst: &[u8; 6], fdb: &Fdb, now: u64) -> Verdict {
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
    use crate::fdb::FdbConfig;
    use crate::fixtures::eth_frame;
    use crate::vlan::VlanSet;

    const A: [u8; 6] = [2, 0, 0, 0, 0, 0xa];
    const B: [u8; 6] = [2, 0, 0, 0, 0, 0xb];
    const C: [u8; 6] = [2, 0, 0, 0, 0, 0xc];
    const D: [u8; 6] = [2, 0, 0, 0, 0, 0xd];
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

    /// A frame's head: addresses, the tag if any, an IPv4 ethertype.
    fn head(dst: [u8; 6], src: [u8; 6], tci: Option<u16>) -> Vec<u8> {
        eth_frame(dst, src, tci, 60)
    }

    /// Decides on each of `steps` in one burst, then learns what it noted.
    #[track_caller]
    fn burst(f: &mut Fdb, steps: &[Step<'_>]) {
        let mut learns = Learns::default();
        for (i, &(p, dst, src, tci, now, want)) in steps.iter().enumerate() {
            let got = match decide(p, &head(dst, src, tci), f, &mut learns, now) {
                Ok(d) => {
                    assert_eq!(d.tci, tci, "step {i}: the outer TCI");
                    d.verdict
                }
                Err(r) => Verdict::Drop(r),
            };
            assert_eq!(
                got, want,
                "step {i}: {dst:02x?} <- {src:02x?} {tci:?} from port {}",
                p.id
            );
        }
        let now = steps.last().map_or(0, |s| s.4);
        learns.learn_into(f, now);
    }

    /// Each of `steps` in a burst of its own.
    #[track_caller]
    fn run(f: &mut Fdb, steps: &[Step<'_>]) {
        for s in steps {
            burst(f, std::slice::from_ref(s));
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

    #[test]
    fn a_burst_knows_the_sources_it_noted_before_the_table_does() {
        let mut f = Fdb::new(FdbConfig::default());
        let (p1, p2) = (port(1, VlanMode::default()), port(2, VlanMode::default()));
        run(&mut f, &[(&p2, BCAST, B, None, 0, flood(0))]);
        burst(
            &mut f,
            &[
                // A is new on port 1: noted, not yet in the table.
                (&p1, B, A, None, 1, fwd(2, 0)),
                // A frame to it from its own port: back where it came from.
                (&p1, A, C, None, 1, drop(DropReason::Hairpin)),
                // A frame to its own new source address.
                (&p1, D, D, None, 1, drop(DropReason::Hairpin)),
                // B moves to port 1 in this burst: not sent to port 2, the
                // port it left, although the table still says so.
                (&p1, BCAST, B, None, 1, flood(0)),
                (&p1, B, A, None, 1, drop(DropReason::Hairpin)),
            ],
        );
        assert_eq!(f.lookup(0, &A, 2), Some(1), "learned after the burst");
        assert_eq!(f.lookup(0, &B, 2), Some(1), "moved after the burst");
        assert_eq!(f.lookup(0, &C, 2), Some(1));
        // Runts are dropped before anything is noted.
        let mut learns = Learns::default();
        assert_eq!(
            decide(&p1, &head(B, A, None)[..13], &f, &mut learns, 3),
            Err(DropReason::TooShort)
        );
        assert!(learns.is_empty());
    }

    #[test]
    fn a_full_learn_buffer_still_forwards_and_hairpins_a_frame_to_itself() {
        let mut f = Fdb::new(FdbConfig::default());
        let p1 = port(1, VlanMode::default());
        let mut learns = Learns::default();
        for i in 0..MAX_LEARNS as u8 + 4 {
            let src = [2, 0, 0, 0, 1, i];
            let d = decide(&p1, &head(BCAST, src, None), &f, &mut learns, 0).unwrap();
            assert_eq!(d.verdict, flood(0));
        }
        assert_eq!(learns.len(), MAX_LEARNS, "the buffer never grows");
        let me = [2, 0, 0, 0, 2, 0];
        let d = decide(&p1, &head(me, me, None), &f, &mut learns, 0).unwrap();
        assert_eq!(d.verdict, drop(DropReason::Hairpin));
        assert_eq!(learns.learn_into(&mut f, 0), 0);
        assert!(learns.is_empty());
        assert_eq!(f.learned_on(1), MAX_LEARNS);
    }

    #[test]
    fn a_static_source_on_another_port_is_a_counted_conflict_not_learned() {
        let mut f = Fdb::new(FdbConfig::default());
        f.add_static(0, &A, 2).unwrap();
        let p1 = port(1, VlanMode::default());
        let mut learns = Learns::default();
        let d = decide(&p1, &head(BCAST, A, None), &f, &mut learns, 0).unwrap();
        assert!(d.conflict);
        assert!(learns.is_empty());
        // A frame to its own address goes where the table has it.
        let d = decide(&p1, &head(A, A, None), &f, &mut learns, 0).unwrap();
        assert_eq!(d.verdict, fwd(2, 0));
        assert_eq!(f.counters().static_conflicts, 2);
    }
}
