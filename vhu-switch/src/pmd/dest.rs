// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The PMDs' destination side: every port as every PMD sees it
//! ([`PortDp`]), its queues behind their locks ([`DestQueue`]: a guest's RX
//! queue or an uplink queue, which is a source too), the queues one source
//! burst holds ([`HeldQueues`]: each locked once per burst, flushed and
//! unlocked together), and what a port shares with the control plane
//! ([`PortCounters`], its [`FloodLimiter`]). It knows no FDB: the decision
//! is `decide`'s, the burst's walk over it `burst`'s.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use arrayvec::ArrayVec;
use vhost_net_backend::io::{Uplink, UplinkCounters};
use vhost_net_backend::sink::guest_from_host;
use vhost_net_backend::stats::DropCounts;
use vhost_net_backend::wire::max_frame_for_mtu;
use vhost_net_backend::{
    DropReason, ForwardCounters, Forwarder, FrameSource, RxQueue, Sink, TxQueue, UplinkSink,
    VirtioNetHdr,
};

use super::BURST;
use crate::capture::CaptureTap;
use crate::decide::Ingress;
use crate::endpoint::End;
use crate::PortId;

/// Most destination queues one source burst holds at once; a flood to more
/// flushes and releases them in turn.
const MAX_HELD: usize = 64;

/// Counters one port shares with the control plane, beyond the library's
/// own (guest queue counters are read from the `Port`).
#[derive(Debug, Default)]
pub struct PortCounters {
    /// Frames from the port dropped by the forwarding decision, by reason.
    pub tx_drops: [AtomicU64; DropReason::COUNT],
    /// Frames for the port dropped before its sink (MTU, VLAN), by reason.
    pub rx_drops: [AtomicU64; DropReason::COUNT],
    /// Uplinks: the uplink's own counters, one per queue, published by the
    /// PMD every 100 ms (their kernel part costs a syscall: never per
    /// burst).
    pub uplink: Mutex<Vec<UplinkCounters>>,
    /// Whether the uplink is open / the guest's rings run.
    pub connected: AtomicBool,
    /// Announces of a migrated guest (`SEND_RARP`) the switch made for the
    /// port: FDB moved, RARP frame flooded.
    pub announces: AtomicU64,
    /// Announces refused: an address the port may not use (its `mac`
    /// lock, its VLAN mode, a static entry elsewhere, a full table).
    pub announces_refused: AtomicU64,
    /// Source addresses of the port's frames not learned because the port
    /// held its FDB quota or the table was full (once per address per
    /// source burst; the frames themselves were forwarded).
    pub fdb_learn_refused: AtomicU64,
    /// The port's flood rate limit (set before the port reaches a PMD).
    pub flood: FloodLimiter,
}

/// Default flood rate of a vhost-user or tap port (the switch's
/// `flood_rate`): unlimited. A rate is a policy the node's operator (its
/// `[switch]` table) or the CNI (per port) sets: a default one would throttle
/// legitimate unknown unicast (a one-way stream to an address never
/// learned, a destination that aged out) and the floods of every existing
/// deployment at upgrade.
pub const DEFAULT_FLOOD_RATE: u32 = 0;
/// Default flood burst: two source bursts of broadcasts pass whole (ARP and
/// ND at a guest's boot, an announce's few frames).
pub const DEFAULT_FLOOD_BURST: u32 = 2 * BURST as u32;

/// A port's flood rate limit: a token bucket of `burst` frames refilled at
/// `rate` frames per second, kept as one timestamp (its GCRA form, RFC
/// 2697's and ATM's virtual scheduling): `tat`, the TSC time at which the
/// bucket would be full again. A frame at time `now` is admitted when `tat`
/// is at most `burst - 1` frame intervals ahead of `now`, and pushes `tat`
/// one interval further (from `now` if it was behind). One atomic word, so
/// the PMDs polling a multiqueue port's queues share one bucket without a
/// lock; refilled implicitly by time, which the PMD reads from the TSC once
/// per burst.
///
/// Assumes an invariant TSC, synchronised across CPUs (every x86-64 CPU
/// of the last decade: `constant_tsc`, `nonstop_tsc`).
#[derive(Debug, Default)]
pub struct FloodLimiter {
    /// TSC ticks per frame at the rate; 0: unlimited.
    interval: u64,
    /// How far ahead of now `tat` may be: `burst - 1` intervals.
    tolerance: u64,
    /// The theoretical arrival time, in TSC ticks.
    tat: AtomicU64,
}

impl FloodLimiter {
    /// `rate` frames per second (0: unlimited), `burst` frames at once (at
    /// least 1), for a TSC of `hz` ticks per second ([`tsc_hz`]).
    pub fn new(rate: u32, burst: u32, hz: u64) -> Self {
        if rate == 0 {
            return Self::default();
        }
        let interval = (hz / u64::from(rate)).max(1);
        Self {
            interval,
            tolerance: interval.saturating_mul(u64::from(burst.max(1)) - 1),
            tat: AtomicU64::new(0),
        }
    }

    /// Whether floods are limited at all.
    #[inline]
    pub fn is_limited(&self) -> bool {
        self.interval != 0
    }

    /// Whether a flooded frame at TSC time `now` is within the rate (and
    /// takes its token).
    ///
    /// Hot path (floods only): one load and one compare-and-swap.
    #[inline]
    pub fn admit(&self, now: u64) -> bool {
        // Relaxed: the word orders nothing else; the CAS alone makes two
        // PMDs take distinct tokens.
        let mut tat = self.tat.load(Ordering::Relaxed);
        loop {
            let start = tat.max(now);
            if start - now > self.tolerance {
                return false;
            }
            let next = start.saturating_add(self.interval);
            match self
                .tat
                .compare_exchange_weak(tat, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(t) => tat = t,
            }
        }
    }
}

/// TSC ticks per second, measured once (20 ms against the monotonic
/// clock, on the control plane when the first port with a flood limit is
/// built; never in the data plane).
pub fn tsc_hz() -> u64 {
    static HZ: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *HZ.get_or_init(|| {
        let (t0, i0) = (vhost_net_backend::sys::tsc(), Instant::now());
        std::thread::sleep(Duration::from_millis(20));
        let (t1, i1) = (vhost_net_backend::sys::tsc(), Instant::now());
        let ns = u64::try_from(i1.duration_since(i0).as_nanos()).unwrap_or(u64::MAX);
        let ticks = u128::from(t1.wrapping_sub(t0));
        u64::try_from(ticks * 1_000_000_000 / u128::from(ns.max(1)))
            .unwrap_or(u64::MAX)
            .max(1)
    })
}

pub(super) fn add_drops(to: &[AtomicU64; DropReason::COUNT], d: &DropCounts) {
    for (r, n) in d.iter() {
        if n != 0 {
            // Relaxed: counters order nothing.
            to[r as usize].fetch_add(n, Ordering::Relaxed);
        }
    }
}

/// Reads a drop array.
pub fn load_drops(from: &[AtomicU64; DropReason::COUNT]) -> DropCounts {
    let mut d = DropCounts::default();
    for r in DropReason::ALL {
        d.add(r, from[r as usize].load(Ordering::Relaxed));
    }
    d
}

/// What a queue of a port moves frames with.
// One per queue, inline in its lock: boxing the RX queue would add an
// indirection per destination per burst.
#[allow(clippy::large_enum_variant)]
pub(super) enum QueueEnd {
    /// A guest's RX queue (frames into the guest).
    Guest(RxQueue),
    /// An uplink queue (both directions).
    Uplink(Box<dyn Uplink>),
}

/// One queue of a port as a destination (and, for an uplink, as a source
/// too), behind its own lock.
pub struct DestQueue {
    pub(super) end: QueueEnd,
    /// What the software offload fallback did, into this queue.
    pub(super) fwd: ForwardCounters,
    /// An uplink queue's counters of its earlier incarnations (reopened
    /// on a new interface: [`Command::Reopen`](super::Command::Reopen)), so that totals never go
    /// back.
    pub(super) base: UplinkCounters,
}

impl std::fmt::Debug for DestQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.end {
            QueueEnd::Guest(q) => write!(f, "Guest(rx {})", q.index()),
            QueueEnd::Uplink(u) => write!(f, "Uplink({})", u.name()),
        }
    }
}

/// A port as every PMD sees it.
#[derive(Debug)]
pub struct PortDp {
    /// Its id (its index in the PMDs' tables).
    pub id: PortId,
    /// Its name, for logs.
    pub name: String,
    /// What the decision needs of it as an ingress port.
    pub ingress: Ingress,
    /// Largest frame it takes or sends (Ethernet header and one tag
    /// included); `usize::MAX` without an MTU.
    pub max_frame: usize,
    /// Shared counters.
    pub counters: Arc<PortCounters>,
    /// Its capture point.
    pub capture: Arc<CaptureTap>,
    /// An uplink's transmit offloads as `GUEST_*` bits (what its sink
    /// accepts), read once when the port is built.
    pub(super) uplink_accepts: u64,
    /// Its queues.
    pub(super) queues: Box<[Mutex<DestQueue>]>,
}

/// What one PMD polls: one queue of one port.
#[derive(Debug)]
pub struct Unit {
    pub(super) port: Arc<PortDp>,
    pub(super) queue: usize,
    /// A guest's TX queue; `None` for an uplink queue (its source is its
    /// [`DestQueue`]).
    pub(super) tx: Option<TxQueue>,
}

impl Unit {
    /// Whether the unit is an uplink queue.
    pub fn is_uplink(&self) -> bool {
        self.tx.is_none()
    }
}

impl PortDp {
    /// A port for the PMDs' tables, and its units (one per queue) for the
    /// PMDs that poll them.
    pub fn new(
        id: PortId,
        name: String,
        ingress: Ingress,
        mtu: Option<u32>,
        counters: Arc<PortCounters>,
        capture: Arc<CaptureTap>,
        end: End,
    ) -> (Arc<Self>, Vec<Unit>) {
        let (queues, txs, uplink_accepts): (Vec<_>, Vec<_>, u64) = match end {
            End::Guest(qps) => {
                let (rx, tx) = qps.into_iter().map(|qp| (qp.rx, Some(qp.tx))).unzip();
                let rx: Vec<_> = rx;
                (rx.into_iter().map(QueueEnd::Guest).collect(), tx, 0)
            }
            End::Uplink(ups) => {
                let accepts = ups.first().map_or(0, |u| guest_from_host(u.offloads().tx));
                let n = ups.len();
                (
                    ups.into_iter().map(QueueEnd::Uplink).collect(),
                    (0..n).map(|_| None).collect(),
                    accepts,
                )
            }
        };
        let port = Arc::new(Self {
            id,
            name,
            ingress,
            max_frame: mtu.map_or(usize::MAX, |m| max_frame_for_mtu(m as usize)),
            counters,
            capture,
            uplink_accepts,
            queues: queues
                .into_iter()
                .map(|end| {
                    Mutex::new(DestQueue {
                        end,
                        fwd: ForwardCounters::default(),
                        base: UplinkCounters::default(),
                    })
                })
                .collect(),
        });
        let units = txs
            .into_iter()
            .enumerate()
            .map(|(queue, tx)| Unit {
                port: Arc::clone(&port),
                queue,
                tx,
            })
            .collect();
        (port, units)
    }

    /// Whether the port takes a frame of `len` bytes with header `hdr` as
    /// a destination; one it does not (over its MTU) is counted as its
    /// `too_long` drop.
    #[inline]
    pub(super) fn takes(&self, hdr: &VirtioNetHdr, len: usize) -> bool {
        if over_mtu(hdr, len, self.max_frame) {
            self.counters.rx_drops[DropReason::TooLong as usize].fetch_add(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    pub(super) fn queue(&self, q: usize) -> MutexGuard<'_, DestQueue> {
        self.queues[q].lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl DestQueue {
    /// Pushes a frame of any source (through the trait object) into the
    /// queue, through the forwarder's offload fallback; an uplink's sink
    /// accepts the offloads `uplink_accepts`. What happened is counted by
    /// the queue (its sink, and [`Self::fwd`]).
    #[inline]
    pub(super) fn push(
        &mut self,
        fwd: &mut Forwarder,
        h: &VirtioNetHdr,
        src: &dyn FrameSource,
        uplink_accepts: u64,
    ) {
        let Self {
            end, fwd: counters, ..
        } = self;
        let _ = match end {
            QueueEnd::Guest(rx) => fwd.forward(counters, h, src, rx),
            QueueEnd::Uplink(u) => {
                let mut sink = UplinkSink::with_accepts(&mut **u, uplink_accepts);
                fwd.forward(counters, h, src, &mut sink)
            }
        };
    }

    /// [`Self::push`], with the copy compiled for the source's type (a
    /// kept decision's frames; the first frame's, through the trait object,
    /// keeps the code of the floods and tag edits small).
    #[inline]
    pub(super) fn push_typed<F: FrameSource>(
        &mut self,
        fwd: &mut Forwarder,
        h: &VirtioNetHdr,
        src: &F,
        uplink_accepts: u64,
    ) {
        let Self {
            end, fwd: counters, ..
        } = self;
        let _ = match end {
            QueueEnd::Guest(rx) => fwd.forward_typed(counters, h, src, rx),
            QueueEnd::Uplink(u) => {
                let mut sink = UplinkSink::with_accepts(&mut **u, uplink_accepts);
                fwd.forward_typed(counters, h, src, &mut sink)
            }
        };
    }
}

/// Publishes an uplink's counters, queue by queue, into its shared ones.
pub(super) fn publish_uplink(p: &PortDp) {
    let mut per_queue = Vec::with_capacity(p.queues.len());
    for q in p.queues.iter() {
        let q = q.lock().unwrap_or_else(|e| e.into_inner());
        if let QueueEnd::Uplink(u) = &q.end {
            let mut c = q.base;
            c.accumulate(&u.counters());
            per_queue.push(c);
        }
    }
    if !per_queue.is_empty() {
        *p.counters.uplink.lock().unwrap_or_else(|e| e.into_inner()) = per_queue;
    }
}

/// A destination queue locked by the current burst.
struct Held<'a> {
    port: PortId,
    queue: usize,
    guard: MutexGuard<'a, DestQueue>,
}

/// The destination queues one source burst has locked: each once per
/// burst, at its first frame, kept until the burst ends, then flushed and
/// unlocked together ([`Self::release`]). A PMD never waits for a queue
/// while it holds one: when the queue is busy (another PMD fills it) it
/// flushes and releases what it holds first, so PMDs filling each other's
/// ports cannot deadlock.
pub(super) struct HeldQueues<'a>(ArrayVec<Held<'a>, MAX_HELD>);

impl<'a> HeldQueues<'a> {
    /// None held.
    pub(super) fn new() -> Self {
        Self(ArrayVec::new())
    }

    /// Where queue `q` of port `port` is in the set, if the burst holds it.
    #[inline]
    pub(super) fn find(&self, port: PortId, q: usize) -> Option<usize> {
        self.0.iter().position(|h| h.port == port && h.queue == q)
    }

    /// Held queue `i`.
    #[inline]
    pub(super) fn queue(&mut self, i: usize) -> &mut DestQueue {
        &mut self.0[i].guard
    }

    /// Locks queue `q` of `d` (not held yet) for the rest of the burst.
    /// Returns its index in the set, and whether every queue held before
    /// was flushed and released first (the set was full, or the queue was
    /// busy). Once per destination and burst, so out of line.
    #[inline(never)]
    pub(super) fn lock(&mut self, d: &'a PortDp, q: usize) -> (usize, bool) {
        let mut released = false;
        if self.0.is_full() {
            self.release();
            released = true;
        }
        let m = &d.queues[q];
        let guard = match m.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                self.release();
                released = true;
                m.lock().unwrap_or_else(|p| p.into_inner())
            }
        };
        self.0.push(Held {
            port: d.id,
            queue: q,
            guard,
        });
        (self.0.len() - 1, released)
    }

    /// Flushes and unlocks every queue held.
    pub(super) fn release(&mut self) {
        for mut h in self.0.drain(..) {
            match &mut h.guard.end {
                QueueEnd::Guest(rx) => {
                    let _ = Sink::flush(rx);
                }
                QueueEnd::Uplink(u) => {
                    if let Err(e) = u.tx_flush() {
                        tracing::debug!("uplink {}: tx: flush: {e}", u.name());
                    }
                }
            }
        }
    }
}

/// Whether a frame of `len` bytes with header `hdr` is over a port's
/// largest frame. A super-frame (GSO) is bounded by its segment size, not
/// the MTU (as the library's own guest-TX check does when TSO is offered).
#[inline]
pub(super) fn over_mtu(hdr: &VirtioNetHdr, len: usize, max_frame: usize) -> bool {
    !hdr.is_gso() && len > max_frame
}

/// The queue a frame goes to on a multiqueue port: a hash of its
/// addresses, so that a flow keeps its queue.
#[inline]
pub(super) fn flow_queue(head: &[u8], n: usize) -> usize {
    if n <= 1 {
        return 0;
    }
    let h = head[..12]
        .iter()
        .fold(0u32, |a, &b| a.rotate_left(5) ^ u32::from(b));
    (h as usize) % n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flood_limiter_is_a_token_bucket() {
        // 10 ticks per frame, 4 at once.
        let l = FloodLimiter::new(100, 4, 1000);
        assert!(l.is_limited());
        let admitted = |t: u64, n: usize| (0..n).filter(|_| l.admit(t)).count();
        assert_eq!(admitted(1_000, 10), 4, "a full bucket: the burst");
        assert_eq!(admitted(1_005, 10), 0, "half an interval later: nothing");
        assert_eq!(admitted(1_010, 10), 1, "one interval: one token");
        assert_eq!(admitted(1_050, 10), 4, "long idle: full again, not more");
        assert!(!FloodLimiter::new(0, 4, 1000).is_limited());
        assert!(!FloodLimiter::default().is_limited());
        // Burst 1: exactly the rate.
        let l = FloodLimiter::new(100, 1, 1000);
        assert_eq!((0..100).filter(|i| l.admit(i * 5)).count(), 50);
    }
}
