// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! One source burst, frame by frame: the decision ([`decide`], or the
//! burst's flow cache), then the delivery: the flood limit, each
//! destination's VLAN tag edit (spliced: still one copy), its MTU check and
//! the push into its queue, held for the rest of the burst.
//!
//! The flow cache: a frame whose first 16 bytes (addresses, tag) equal the
//! burst's previous frame's takes that frame's decision again
//! ([`Recent`]); when that frame went to one destination untouched, also
//! its held queue ([`Planned`]): the MTU check and the push, with the copy
//! compiled for the source's type.
//!
//! Hot path: no allocation, no lock per frame (a destination queue's lock
//! is taken once per burst), no syscall.

use std::sync::Arc;

use vhost_net_backend::stats::DropCounts;
use vhost_net_backend::wire::{is_vlan_tpid, ETH_HLEN, ETH_P_8021Q, VLAN_HLEN};
use vhost_net_backend::{DropReason, Forwarder, FrameSource, Spliced, VirtioNetHdr};

use super::dest::{flow_queue, over_mtu, FloodLimiter, HeldQueues, PortDp, QueueEnd};
use crate::capture::Direction;
use crate::decide::{decide, Decided, Ingress, Learns, Verdict};
use crate::fdb::Fdb;
use crate::vlan::TagEdit;
use crate::PortId;

/// The state of one source burst.
pub(super) struct Burst<'a> {
    ports: &'a [Option<Arc<PortDp>>],
    fdb: &'a Fdb,
    learns: &'a mut Learns,
    fwd: &'a mut Forwarder,
    now: u64,
    /// Decision drops of the source.
    pub(super) drops: DropCounts,
    src_id: PortId,
    /// The destination queues locked so far, flushed and released at the
    /// end of the burst.
    held: HeldQueues<'a>,
    /// The decision on the burst's previous frame, for the next frame with
    /// the same addresses and tag.
    recent: Option<Recent<'a>>,
    /// The source's flood limit, if it has one.
    flood: Option<&'a FloodLimiter>,
    /// The TSC, read at the burst's first flood (0: not yet).
    tsc: u64,
}

/// A decision kept for the rest of a burst. Within one burst the decision
/// is a function of the frame's first 16 bytes (addresses, and the outer
/// tag or ethertype): the ingress port is fixed, the FDB is read-locked
/// (refreshing a source again at the same time changes nothing but the
/// count of static conflicts, which a kept decision repeats), and since
/// the decision was taken the burst's learn list only gained that frame's
/// own source, which its hairpin check already saw (any other frame
/// decided afresh replaces the kept decision). A flow's frames, which come in runs, then
/// skip the parse, the admission and both FDB probes; a unicast one whose
/// frame went out untouched also skips the delivery's lookups
/// ([`Planned`]).
#[derive(Clone, Copy)]
struct Recent<'a> {
    key: [u8; RECENT_KEY],
    decided: Decided,
    planned: Option<Planned<'a>>,
}

/// Where a kept unicast decision's frames go, found by delivering the
/// first: the held destination queue (its index in `held`, valid until the
/// next [`Burst::release`], which forgets the kept decision) and what the
/// per-frame MTU check and the push need of the destination. Only for a
/// frame delivered without a tag edit and with no capture on the
/// destination: a capture started while a burst runs sees the frames of
/// the decisions that burst kept from its next burst on.
#[derive(Clone, Copy)]
struct Planned<'a> {
    dst: &'a PortDp,
    held: usize,
}

/// Bytes of the head a [`Recent`] decision is keyed by.
const RECENT_KEY: usize = 16;

/// The key of a frame whose decision depends on its first
/// [`RECENT_KEY`] bytes alone: untagged or with one 802.1Q tag, and long
/// enough that its parse cannot fail. Anything else (stacked tags, runts)
/// is decided from scratch.
#[inline]
fn recent_key(head: &[u8]) -> Option<[u8; RECENT_KEY]> {
    let h = head.get(..ETH_HLEN + VLAN_HLEN)?;
    let outer = u16::from_be_bytes([h[12], h[13]]);
    let inner = u16::from_be_bytes([h[16], h[17]]);
    let one_tag_at_most = if outer == ETH_P_8021Q {
        !is_vlan_tpid(inner)
    } else {
        !is_vlan_tpid(outer)
    };
    let mut key = [0u8; RECENT_KEY];
    key.copy_from_slice(&h[..RECENT_KEY]);
    one_tag_at_most.then_some(key)
}

impl<'a> Burst<'a> {
    pub(super) fn new(
        ports: &'a [Option<Arc<PortDp>>],
        fdb: &'a Fdb,
        learns: &'a mut Learns,
        fwd: &'a mut Forwarder,
        now: u64,
        src_id: PortId,
        flood: Option<&'a FloodLimiter>,
    ) -> Self {
        Self {
            ports,
            fdb,
            learns,
            fwd,
            now,
            drops: DropCounts::default(),
            src_id,
            held: HeldQueues::new(),
            recent: None,
            flood: flood.filter(|f| f.is_limited()),
            tsc: 0,
        }
    }

    /// Decides on one frame (`len` bytes: `frame.frame_len()`, known to
    /// the caller without a call through the trait object) and delivers it.
    /// Of the source's type: a kept decision's push copies without calls
    /// through the trait object.
    #[inline]
    pub(super) fn frame<F: FrameSource>(
        &mut self,
        ingress: &Ingress,
        max_frame: usize,
        hdr: &VirtioNetHdr,
        head: &[u8],
        len: usize,
        frame: &F,
    ) {
        if over_mtu(hdr, len, max_frame) {
            self.drops.add(DropReason::TooLong, 1);
            return;
        }
        let key = recent_key(head);
        if let (Some(k), Some(r)) = (&key, &self.recent) {
            if *k == r.key {
                let Recent {
                    decided: d,
                    planned,
                    ..
                } = *r;
                if d.conflict {
                    // Counted per frame, as a fresh decision would.
                    self.fdb.count_static_conflict();
                }
                match planned {
                    Some(p) => self.push_planned(p, hdr, len, frame),
                    None => {
                        self.dispatch(d.verdict, d.tci, hdr, head, len, frame);
                    }
                }
                return;
            }
        }
        let d = match decide(ingress, head, self.fdb, self.learns, self.now) {
            Ok(d) => d,
            Err(r) => {
                self.drops.add(r, 1);
                return;
            }
        };
        // Replaced by every decision taken afresh, kept or not: a frame
        // decided in between (stacked tags) may have noted its source for
        // learning, which a later frame's hairpin check has to see. Set
        // after the delivery, whose release of the held queues (a full
        // `held`, a contended queue) forgets the kept decision.
        let planned = self.dispatch(d.verdict, d.tci, hdr, head, len, frame);
        self.recent = key.map(|key| Recent {
            key,
            decided: d,
            planned,
        });
    }

    /// Delivers a frame the way the burst's kept decision says: the MTU
    /// check and the push into the held queue.
    #[inline]
    fn push_planned<F: FrameSource>(
        &mut self,
        p: Planned<'a>,
        hdr: &VirtioNetHdr,
        len: usize,
        frame: &F,
    ) {
        if p.dst.takes(hdr, len) {
            self.push_held(p.held, p.dst.uplink_accepts, hdr, frame);
        }
    }

    /// Carries out a decision; for a unicast frame, where the same
    /// decision's next frames can go straight ([`Planned`]).
    #[inline]
    fn dispatch(
        &mut self,
        verdict: Verdict,
        tci: Option<u16>,
        hdr: &VirtioNetHdr,
        head: &[u8],
        len: usize,
        frame: &dyn FrameSource,
    ) -> Option<Planned<'a>> {
        match verdict {
            Verdict::Forward { port, vlan } => {
                match self.deliver(port, vlan, tci, hdr, head, len, frame) {
                    Some(planned) => return planned,
                    None => self.drops.add(DropReason::VlanDenied, 1),
                }
            }
            Verdict::Flood { vlan } => {
                if let Some(limit) = self.flood {
                    if self.tsc == 0 {
                        self.tsc = vhost_net_backend::sys::tsc();
                    }
                    if !limit.admit(self.tsc) {
                        self.drops.add(DropReason::FloodRate, 1);
                        return None;
                    }
                }
                let mut member = false;
                for j in 0..self.ports.len() as PortId {
                    if j != self.src_id
                        && self.deliver(j, vlan, tci, hdr, head, len, frame).is_some()
                    {
                        member = true;
                    }
                }
                if !member {
                    // No other port is in the VLAN: counted, not lost.
                    self.drops.add(DropReason::VlanDenied, 1);
                }
            }
            Verdict::Drop(r) => self.drops.add(r, 1),
        }
        None
    }

    /// Pushes one frame into port `dst` (if it is a member of `vlan`), with
    /// its tag edited for that port. `None` if the port is not a member;
    /// otherwise where the same decision's next frames can go straight, if
    /// they can.
    #[inline]
    #[allow(clippy::too_many_arguments)] // one frame's facts, passed down
    fn deliver(
        &mut self,
        dst: PortId,
        vlan: u16,
        tci: Option<u16>,
        hdr: &VirtioNetHdr,
        head: &[u8],
        len: usize,
        frame: &dyn FrameSource,
    ) -> Option<Option<Planned<'a>>> {
        let ports: &'a [Option<Arc<PortDp>>] = self.ports;
        let Some(Some(d)) = ports.get(dst as usize) else {
            return None;
        };
        let egress = d.ingress.vlan.egress(vlan);
        let edit = TagEdit::between(tci, egress)?;
        // The edited frame: still one copy, from the source's buffers. Its
        // new first bytes are built only for an edit.
        let lead;
        let spliced;
        let (src, h, len): (&dyn FrameSource, VirtioNetHdr, usize) = match edit {
            TagEdit::Keep => (frame, *hdr, len),
            TagEdit::Pop => {
                lead = edit_lead(head, None);
                spliced = Spliced::new(&lead[..12], frame, 12 + VLAN_HLEN);
                match &spliced {
                    Some(s) => (s, hdr.shifted(-(VLAN_HLEN as i16)), s.frame_len()),
                    None => return Some(None),
                }
            }
            TagEdit::Push(t) | TagEdit::Rewrite(t) => {
                lead = edit_lead(head, Some(t));
                let (from, shift) = match edit {
                    TagEdit::Push(_) => (12, VLAN_HLEN as i16),
                    _ => (12 + VLAN_HLEN, 0),
                };
                spliced = Spliced::new(&lead, frame, from);
                match &spliced {
                    Some(s) => (s, hdr.shifted(shift), s.frame_len()),
                    None => return Some(None),
                }
            }
        };
        if !d.takes(&h, len) {
            return Some(None);
        }
        let capture = d.capture.on();
        if capture {
            let s = src;
            d.capture.offer(Direction::Outbound, len, |b| {
                vhost_net_backend::copy_frame(s, b)
            });
        }
        let q = flow_queue(head, d.queues.len());
        let mut i = self.hold(d, q);
        if q != 0 {
            if let QueueEnd::Guest(rx) = &mut self.held.queue(i).end {
                // That queue is not running (a guest using fewer queues
                // than offered): queue 0.
                if !rx.is_running() {
                    i = self.hold(d, 0);
                }
            }
        }
        let Self { held, fwd, .. } = self;
        held.queue(i).push(fwd, &h, src, d.uplink_accepts);
        let plain = matches!(edit, TagEdit::Keep) && !capture;
        Some(plain.then_some(Planned { dst: d, held: i }))
    }

    /// Pushes a frame into held queue `i` (of a port whose uplink, if it
    /// is one, accepts `uplink_accepts`): [`Self::deliver`]'s push, with
    /// the copy compiled for the source's type (a kept decision's frames;
    /// the first frame's, through the trait object, keeps the code of the
    /// floods and tag edits small).
    #[inline]
    fn push_held<F: FrameSource>(
        &mut self,
        i: usize,
        uplink_accepts: u64,
        h: &VirtioNetHdr,
        src: &F,
    ) {
        let Self { held, fwd, .. } = self;
        held.queue(i).push_typed(fwd, h, src, uplink_accepts);
    }

    /// Destination queue `q` of `d`, locked for the rest of the burst
    /// ([`HeldQueues::lock`]); returns its index in `held`. A lock that had
    /// to release the queues held first forgets the kept decision (whose
    /// [`Planned`] names one of them).
    #[inline]
    fn hold(&mut self, d: &'a PortDp, q: usize) -> usize {
        if let Some(i) = self.held.find(d.id, q) {
            return i;
        }
        let (i, released) = self.held.lock(d, q);
        if released {
            self.recent = None;
        }
        i
    }

    /// Flushes and unlocks every destination queue held, and forgets the
    /// kept decision (whose [`Planned`] names one of them).
    pub(super) fn release(&mut self) {
        self.recent = None;
        self.held.release();
    }
}

/// The bytes a tag edit puts before the rest of a frame: its addresses
/// (the head's first 12 bytes), then the new 802.1Q tag with TCI `tci`, if
/// any.
#[inline]
fn edit_lead(head: &[u8], tci: Option<u16>) -> [u8; 16] {
    let mut lead = [0u8; 16];
    lead[..12].copy_from_slice(&head[..12]);
    if let Some(t) = tci {
        lead[12..14].copy_from_slice(&ETH_P_8021Q.to_be_bytes());
        lead[14..16].copy_from_slice(&t.to_be_bytes());
    }
    lead
}

/// Whole bursts through a PMD run by hand over scripted uplinks: floods
/// and their limit, the FDB quota, kept decisions against the
/// destination's MTU and capture.
#[cfg(test)]
mod tests {
    use vhost_net_backend::DropReason;

    use super::super::*;
    use crate::capture::CaptureTap;
    use crate::decide::Ingress;
    use crate::fdb::FdbConfig;
    use crate::fixtures::{add_uplink_port, eth_frame, hand_pmd, PortParts};
    use crate::vlan::VlanMode;
    use vhost_net_backend::test_utils::ScriptedUplink;

    const SRC: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const DST: [u8; 6] = [2, 0, 0, 0, 0, 2];
    /// Where a test frame carries its number.
    const NUMBER: usize = 20;

    struct Ports {
        pmd: Pmd,
        /// Each port's uplink: frames queued to send, frames received.
        up: Vec<ScriptedUplink>,
        counters: Vec<Arc<PortCounters>>,
        captures: Vec<Arc<CaptureTap>>,
        fdb: Arc<RwLock<Fdb>>,
    }

    /// Three uplink ports on one PMD (run by hand) in VLAN 1: 0 the source,
    /// 1 with MTU 1500 and `DST` static on it, 2 a bystander.
    fn ports() -> Ports {
        ports_with(FloodLimiter::default())
    }

    /// [`ports`], port 0 with flood limit `flood`.
    fn ports_with(flood: FloodLimiter) -> Ports {
        let mut fdb = Fdb::new(FdbConfig::default());
        fdb.add_static(1, &DST, 1).unwrap();
        let fdb = Arc::new(RwLock::new(fdb));
        let (mut pmd, handle) = hand_pmd(&fdb);
        let (mut up, mut counters, mut captures) = (vec![], vec![], vec![]);
        let mut flood = Some(flood);
        for id in 0..3 as PortId {
            let mut p = PortParts::new(Ingress {
                id,
                vlan: VlanMode::Access(1),
                macs: vec![],
            });
            if id == 0 {
                p.counters = Arc::new(PortCounters {
                    flood: flood.take().unwrap_or_default(),
                    ..PortCounters::default()
                });
            }
            p.mtu = (id == 1).then_some(1500);
            counters.push(Arc::clone(&p.counters));
            captures.push(Arc::clone(&p.capture));
            let u = ScriptedUplink::new("scripted");
            add_uplink_port(&handle, p, u.clone(), true);
            up.push(u);
        }
        pmd.poll_once();
        Ports {
            pmd,
            up,
            counters,
            captures,
            fdb,
        }
    }

    /// A frame from `SRC` to `DST` of `len` bytes, numbered `n` (past the
    /// 16 bytes a kept decision is keyed by).
    fn frame(len: usize, n: u8) -> Vec<u8> {
        let mut f = eth_frame(DST, SRC, None, len);
        f[NUMBER] = n;
        f
    }

    /// Sends `lens` from port 0 in one burst; returns the numbers of the
    /// frames port 1 received.
    fn burst(p: &mut Ports, lens: &[usize]) -> Vec<u8> {
        p.up[1].take_sent();
        let frames = lens.iter().enumerate().map(|(n, &l)| frame(l, n as u8));
        queue(&p.up[0], frames);
        assert_eq!(p.pmd.poll_once(), lens.len());
        assert!(p.up[2].script().sent.is_empty(), "flooded");
        p.up[1].take_sent().iter().map(|f| f[NUMBER]).collect()
    }

    /// Queues `frames` for `up` to receive.
    fn queue(up: &ScriptedUplink, frames: impl IntoIterator<Item = Vec<u8>>) {
        for f in frames {
            up.queue_rx(&f);
        }
    }

    /// A broadcast frame from `src`, numbered `n`.
    fn broadcast(src: [u8; 6], n: u8) -> Vec<u8> {
        let mut f = frame(64, n);
        f[..6].copy_from_slice(&[0xff; 6]);
        f[6..12].copy_from_slice(&src);
        f
    }

    fn tx_dropped(p: &Ports, port: usize, r: DropReason) -> u64 {
        p.counters[port].tx_drops[r as usize].load(Ordering::Relaxed)
    }

    #[test]
    fn floods_over_the_ports_rate_are_dropped_and_counted_unicast_is_not_limited() {
        // One frame a second, five at once: the test takes well under a
        // second (a sixth flood passes if the machine stalls for one).
        let mut p = ports_with(FloodLimiter::new(1, 5, tsc_hz()));
        for _ in 0..3 {
            let frames = (0..32u8).map(|i| {
                if i % 2 == 0 {
                    broadcast(SRC, i)
                } else {
                    frame(64, i)
                }
            });
            queue(&p.up[0], frames);
            assert_eq!(p.pmd.poll_once(), 32);
        }
        let flooded = p.up[2].script().sent.len();
        assert!((5..=6).contains(&flooded), "{flooded} floods passed");
        let unicast = p.up[1].take_sent().iter().filter(|f| f[..6] == DST).count();
        assert_eq!(unicast, 48, "every unicast frame passed");
        assert_eq!(
            tx_dropped(&p, 0, DropReason::FloodRate),
            48 - flooded as u64,
            "every other flood counted"
        );
        // Another port's floods are its own: not limited.
        p.up[0].take_sent();
        let other = [2, 0, 0, 0, 0, 7];
        queue(&p.up[2], (0..32).map(|i| broadcast(other, i)));
        assert_eq!(p.pmd.poll_once(), 32);
        assert_eq!(p.up[0].script().sent.len(), 32);
        assert_eq!(tx_dropped(&p, 2, DropReason::FloodRate), 0);
    }

    #[test]
    fn a_port_at_its_fdb_quota_forwards_but_learns_nothing_more_and_counts() {
        let mut p = ports();
        p.fdb.write().unwrap().set_port_limit(0, 2);
        let src = |i: u8| [2, 0, 0, 0, 0x10, i];
        for round in 0..2u8 {
            let frames = (0..10u8).map(|i| {
                let mut f = frame(64, i);
                f[6..12].copy_from_slice(&src(round * 10 + i));
                f
            });
            queue(&p.up[0], frames);
            assert_eq!(p.pmd.poll_once(), 10);
        }
        assert_eq!(p.up[1].script().sent.len(), 20, "every frame forwarded");
        assert!(p.up[2].script().sent.is_empty());
        let f = p.fdb.read().unwrap();
        assert_eq!(f.learned_on(0), 2);
        assert_eq!(f.lookup(1, &src(0), 0), Some(0));
        assert_eq!(f.lookup(1, &src(2), 0), None);
        assert_eq!(f.counters().limit_hits, 18);
        drop(f);
        assert_eq!(p.counters[0].fdb_learn_refused.load(Ordering::Relaxed), 18);
        // The others still learn.
        let mut g = frame(64, 0);
        g[6..12].copy_from_slice(&[2, 0, 0, 0, 0x20, 1]);
        p.up[2].queue_rx(&g);
        assert_eq!(p.pmd.poll_once(), 1);
        assert_eq!(
            p.fdb.read().unwrap().lookup(1, &[2, 0, 0, 0, 0x20, 1], 0),
            Some(2)
        );
        assert_eq!(p.counters[2].fdb_learn_refused.load(Ordering::Relaxed), 0);
    }

    fn too_long(p: &Ports) -> u64 {
        p.counters[1].rx_drops[DropReason::TooLong as usize].load(Ordering::Relaxed)
    }

    #[test]
    fn a_kept_decision_still_checks_each_frames_size_against_the_destination() {
        let mut p = ports();
        // The first frame fits (its delivery is kept for the others)...
        assert_eq!(burst(&mut p, &[64, 2000, 64, 2000, 64]), [0, 2, 4]);
        assert_eq!(too_long(&p), 2);
        // ...or does not (nothing kept: each frame is delivered afresh).
        assert_eq!(burst(&mut p, &[2000, 64, 64, 2000]), [1, 2]);
        assert_eq!(too_long(&p), 4);
        // The drops are the destination's: the decision dropped nothing.
        assert_eq!(
            p.counters[0]
                .tx_drops
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .sum::<u64>(),
            0
        );
    }

    #[test]
    fn a_capture_on_the_destination_sees_every_frame_of_a_kept_decision() {
        let mut p = ports();
        assert!(p.captures[1].start());
        assert_eq!(burst(&mut p, &[64, 64, 64, 64]), [0, 1, 2, 3]);
        let mut seen = vec![];
        while let Some(r) = p.captures[1].take() {
            assert_eq!(r.dir, crate::capture::Direction::Outbound);
            seen.push(r.data[NUMBER]);
        }
        assert_eq!(seen, [0, 1, 2, 3]);
    }
}
