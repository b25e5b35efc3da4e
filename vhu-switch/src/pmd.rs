//! A PMD (poll-mode driver) thread: it polls its share of the switch's
//! queues and, for each source burst, decides on each frame's private head
//! copy and pushes it once into every destination, whichever PMD polls
//! that destination.
//!
//! ```text
//! source burst (a guest's TX queue / an uplink queue's RX)
//!   -> decide::decide(head)               the private head copy, never guest memory;
//!                                         read-locked FDB; new sources noted
//!   -> per destination queue: its lock, taken once per burst (lazily, kept
//!      until the burst ends), VLAN tag edit (Spliced: still one copy), MTU
//!      check, Forwarder::forward into its Sink (guest RX queue or UplinkSink)
//!   -> flush and unlock every destination queue held, once per burst
//!   -> learn the burst's new or moved sources (write lock, only if any)
//! ```
//!
//! A frame whose first 16 bytes (addresses, tag) equal the burst's previous
//! frame's takes that frame's decision again (`Recent`); when that frame
//! went to one destination untouched, also its held queue (`Planned`):
//! the MTU check and the push, with the copy compiled for the source's
//! type.
//!
//! * **Several PMDs**: each polls a set of [`Unit`]s (one queue of one
//!   port); every PMD knows every port as a destination. A destination
//!   queue is a mutex taken once per source burst, as OVS takes a shared
//!   transmit queue's lock when PMDs outnumber a port's queues; with one PMD
//!   it is never contended. A PMD never blocks while holding a destination
//!   lock: when one is busy it flushes and releases what it holds, then
//!   waits (no deadlock between PMDs filling each other's ports). The one
//!   lock an uplink's source burst holds while it waits is its own queue's,
//!   so uplink queues are all polled by one PMD (two uplink bursts on two
//!   PMDs could otherwise wait for each other).
//! * **Ports come and go at burst boundaries**: the control plane sends
//!   [`Command`]s and waits for the acknowledgements; each PMD applies them
//!   between bursts (it is woken if asleep).
//! * **Isolation**: a destination without RX buffers loses its frames
//!   (counted, `no_buffers`); the source goes on. No retry queue, no
//!   head-of-line blocking.
//! * **Tenancy**: a port's floods (broadcast, multicast, unknown unicast)
//!   pass its [`FloodLimiter`], checked once per flooded frame (one atomic
//!   compare-and-swap; the TSC read once per burst, at its first flood);
//!   the others are dropped and counted (`flood_rate`). A unicast frame
//!   never reaches the limiter. A port at its FDB quota ([`Fdb::port_full`])
//!   has its burst's new sources refused under the read lock, without the
//!   write lock, and counted ([`PortCounters::fdb_learn_refused`]).
//!
//! Hot path: no allocation, no lock per frame, no syscall per frame.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, TryLockError};
use std::time::{Duration, Instant};

use arrayvec::ArrayVec;
use vhost_net_backend::io::{Uplink, UplinkCounters};
use vhost_net_backend::poll::{Notify, Step, Token};
use vhost_net_backend::sink::guest_from_host;
use vhost_net_backend::stats::DropCounts;
use vhost_net_backend::wire::{is_vlan_tpid, max_frame_for_mtu, ETH_HLEN, ETH_P_8021Q, VLAN_HLEN};
use vhost_net_backend::{
    DropReason, ForwardCounters, Forwarder, FrameSource, PollLoop, PollMode, Poller, RxQueue, Sink,
    Spliced, TxQueue, UplinkSink, VirtioNetHdr,
};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use crate::capture::{CaptureTap, Direction};
use crate::decide::{decide, Decided, Ingress, Learns, Verdict};
use crate::endpoint::End;
use crate::fdb::Fdb;
use crate::vlan::TagEdit;
use crate::PortId;

/// Frames per source burst.
pub const BURST: usize = 32;
/// Idle time before an adaptive PMD sleeps.
pub const IDLE: Duration = Duration::from_micros(200);
/// How often uplink counters are published and the FDB aged.
const HOUSEKEEPING: Duration = Duration::from_millis(100);
/// How often the FDB is swept of aged entries.
const AGE_EVERY: Duration = Duration::from_secs(1);
/// The poller token of the command eventfd; port ids are the other tokens.
const TOKEN_COMMAND: u64 = u64::MAX >> 8;
/// Most destination queues one source burst holds at once; a flood to more
/// flushes and releases them in turn.
const MAX_HELD: usize = 64;
// The burst's learn buffer holds a source per frame.
const _: () = assert!(crate::decide::MAX_LEARNS == BURST);
/// Busy rounds between two looks at the RX queues a PMD answers for (idle
/// rounds always look): a ring change nobody sends frames into is still
/// acknowledged at once.
const RX_SYNC_EVERY: u32 = 1024;
/// Busy rounds between two readings of the clock (idle rounds always read
/// it): the FDB's timestamps and the housekeeping timers, not the frames,
/// need it.
const CLOCK_EVERY: u32 = 64;

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

fn add_drops(to: &[AtomicU64; DropReason::COUNT], d: &DropCounts) {
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
enum QueueEnd {
    /// A guest's RX queue (frames into the guest).
    Guest(RxQueue),
    /// An uplink queue (both directions).
    Uplink(Box<dyn Uplink>),
}

/// One queue of a port as a destination (and, for an uplink, as a source
/// too), behind its own lock.
pub struct DestQueue {
    end: QueueEnd,
    /// What the software offload fallback did, into this queue.
    fwd: ForwardCounters,
    /// An uplink queue's counters of its earlier incarnations (reopened
    /// on a new interface: [`Command::Reopen`]), so that totals never go
    /// back.
    base: UplinkCounters,
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
    uplink_accepts: u64,
    /// Its queues.
    queues: Box<[Mutex<DestQueue>]>,
}

/// What one PMD polls: one queue of one port.
#[derive(Debug)]
pub struct Unit {
    port: Arc<PortDp>,
    queue: usize,
    /// A guest's TX queue; `None` for an uplink queue (its source is its
    /// [`DestQueue`]).
    tx: Option<TxQueue>,
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
    fn takes(&self, hdr: &VirtioNetHdr, len: usize) -> bool {
        if over_mtu(hdr, len, self.max_frame) {
            self.counters.rx_drops[DropReason::TooLong as usize].fetch_add(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    fn queue(&self, q: usize) -> MutexGuard<'_, DestQueue> {
        self.queues[q].lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A change of a PMD's ports, applied at a burst boundary.
#[derive(Debug)]
pub enum Command {
    /// The port becomes a destination of this PMD (every PMD gets it,
    /// before any of its units is polled).
    AddPort(Arc<PortDp>, SyncSender<()>),
    /// This PMD polls the unit.
    AddUnit(Box<Unit>, SyncSender<()>),
    /// The port is gone: its units and its place as a destination are
    /// handed back (to be dropped by the control plane, outside the data
    /// plane).
    Remove(PortId, SyncSender<Removed>),
    /// Forwards the frame as if the port had sent it (its VLAN, its flood
    /// domain, never back to it): a migrated guest's announce. Answers
    /// whether the port was known.
    Inject(PortId, Box<[u8]>, SyncSender<bool>),
    /// Queue `.1` of uplink port `.0` moves frames with `.2` from now on
    /// (its interface went, or came back): the PMD polling it swaps it in
    /// at a burst boundary and hands the old one back (to be dropped by
    /// the control plane); `None` if it does not poll that queue.
    Reopen(PortId, usize, UplinkQueue, SyncSender<Option<UplinkQueue>>),
}

/// One queue of an uplink, on its way into or out of a PMD.
pub struct UplinkQueue(pub Box<dyn Uplink>);

impl std::fmt::Debug for UplinkQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "UplinkQueue({})", self.0.name())
    }
}

/// What a PMD hands back of a removed port.
#[derive(Debug, Default)]
pub struct Removed {
    /// The port's units this PMD polled.
    pub units: Vec<Unit>,
    /// Its table entry.
    pub port: Option<Arc<PortDp>>,
}

/// Busy and idle cycles of a PMD, and the frames it moved (its poll
/// loop's counters).
pub type PmdCounters = vhost_net_backend::LoopCycles;

/// The control plane's end of a PMD.
#[derive(Debug, Clone)]
pub struct PmdHandle {
    /// Sends commands.
    pub commands: SyncSender<Command>,
    /// Wakes the PMD to read them.
    pub wake: Arc<EventFd>,
    /// Tells a polling PMD that commands wait (one load per round, instead
    /// of a look at the channel).
    pub pending: Arc<AtomicBool>,
    /// Its counters.
    pub counters: Arc<PmdCounters>,
}

impl PmdHandle {
    /// Sends a command and wakes the PMD.
    pub fn send(&self, c: Command) -> bool {
        let ok = self.commands.send(c).is_ok();
        // After the send: the PMD clears the flag before it drains.
        self.pending.store(true, Ordering::Release);
        // A failed write means the counter is saturated: it is awake.
        let _ = self.wake.write(1);
        ok
    }
}

/// A PMD thread's state.
#[derive(Debug)]
pub struct Pmd {
    index: usize,
    /// Every port, as a destination, by id.
    ports: Vec<Option<Arc<PortDp>>>,
    /// What this PMD polls.
    units: Vec<Unit>,
    fdb: Arc<RwLock<Fdb>>,
    /// Sources a burst found new or moved, learned after it.
    learns: Learns,
    commands: Receiver<Command>,
    wake: Arc<EventFd>,
    poller: Poller,
    poll: PollLoop,
    fwd: Forwarder,
    epoch: Instant,
    /// Milliseconds since `epoch`, read every [`CLOCK_EVERY`] busy rounds.
    now_ms: u64,
    /// Set by the control plane after it sent a command.
    pending: Arc<AtomicBool>,
    last_housekeeping: Instant,
    last_age: Instant,
    rounds: u32,
}

/// Creates PMD number `index` (run it with [`Pmd::run`] on its thread) and
/// its handle. PMD 0 ages the FDB.
///
/// # Errors
/// The eventfd or epoll instance could not be created.
pub fn new_pmd(
    index: usize,
    mode: PollMode,
    fdb: Arc<RwLock<Fdb>>,
    epoch: Instant,
) -> std::io::Result<(Pmd, PmdHandle)> {
    let (tx, rx) = std::sync::mpsc::sync_channel(16);
    let wake = Arc::new(EventFd::new(EFD_NONBLOCK)?);
    let mut poller = Poller::new()?;
    {
        use std::os::fd::AsRawFd;
        poller.add_fd(wake.as_raw_fd(), Token(TOKEN_COMMAND))?;
    }
    let poll = PollLoop::new(mode, IDLE);
    let counters = Arc::clone(poll.cycles());
    let pending = Arc::new(AtomicBool::new(false));
    let now = Instant::now();
    Ok((
        Pmd {
            index,
            ports: Vec::new(),
            units: Vec::new(),
            fdb,
            learns: Learns::default(),
            commands: rx,
            wake: Arc::clone(&wake),
            poller,
            poll,
            fwd: Forwarder::new(),
            epoch,
            now_ms: 0,
            pending: Arc::clone(&pending),
            last_housekeeping: now,
            last_age: now,
            rounds: 0,
        },
        PmdHandle {
            commands: tx,
            wake,
            pending,
            counters,
        },
    ))
}

/// The notification set of a PMD's units, for [`PollLoop::round`]: TX
/// kicks of its guest queues (RX kicks only while the guest has no RX
/// buffer posted, as the library's queue pairs do).
struct Units<'a>(&'a mut [Unit]);

impl Notify for Units<'_> {
    fn enable_notifications(&mut self) -> bool {
        let mut pending = false;
        for u in self.0.iter_mut() {
            let Some(tx) = &mut u.tx else { continue };
            pending |= tx.enable_notifications();
            let mut q = u.port.queue(u.queue);
            if let QueueEnd::Guest(rx) = &mut q.end {
                if rx.is_running() && rx.available(1) == 0 {
                    pending |= rx.enable_notifications();
                }
            }
        }
        pending
    }

    fn disable_notifications(&mut self) {
        for u in self.0.iter_mut() {
            let Some(tx) = &mut u.tx else { continue };
            tx.disable_notifications();
            if let QueueEnd::Guest(rx) = &mut u.port.queue(u.queue).end {
                rx.disable_notifications();
            }
        }
    }
}

impl Pmd {
    /// Polls until `stop` is set.
    ///
    /// # Errors
    /// `epoll_wait` failed.
    pub fn run(mut self, stop: &AtomicBool) -> std::io::Result<()> {
        while !stop.load(Ordering::Relaxed) {
            if self.pending.load(Ordering::Acquire) {
                self.pending.store(false, Ordering::Relaxed);
                self.apply_commands();
            }
            let moved = self.round();
            if moved == 0 || self.rounds.is_multiple_of(CLOCK_EVERY) {
                self.tick();
            }
            let Self {
                units,
                poller,
                poll,
                wake,
                ..
            } = &mut self;
            let step = poll.round(moved, false, &mut Units(units), poller)?;
            // Woken by a command: drain the eventfd (level-triggered), or
            // the next sleep would return at once. The commands themselves
            // are read at the top of the loop, without a syscall.
            if step == Step::Slept && poller.fired().any(|t| t == Token(TOKEN_COMMAND)) {
                let _ = wake.read();
            }
        }
        Ok(())
    }

    /// One round on the caller's thread, without sleeping: the commands
    /// sent so far, then one burst from every unit. Returns the frames
    /// received. For benchmarks and in-process tests; [`Pmd::run`] is the
    /// thread's loop.
    pub fn poll_once(&mut self) -> usize {
        self.apply_commands();
        self.tick();
        self.round()
    }

    /// Applies the commands sent since the last burst (a lock-free look at
    /// the channel when there are none).
    fn apply_commands(&mut self) {
        while let Ok(c) = self.commands.try_recv() {
            match c {
                Command::AddPort(p, ack) => {
                    let id = p.id as usize;
                    if self.ports.len() <= id {
                        self.ports.resize_with(id + 1, || None);
                    }
                    self.ports[id] = Some(p);
                    let _ = ack.send(());
                }
                Command::AddUnit(mut u, ack) => {
                    self.watch(&mut u);
                    self.units.push(*u);
                    let _ = ack.send(());
                }
                Command::Remove(id, ack) => {
                    let mut removed = Removed::default();
                    let mut i = 0;
                    while i < self.units.len() {
                        if self.units[i].port.id == id {
                            let u = self.units.swap_remove(i);
                            if u.is_uplink() {
                                if let QueueEnd::Uplink(up) = &u.port.queue(u.queue).end {
                                    let _ = self.poller.remove_fd(up.rx_fd());
                                }
                            }
                            removed.units.push(u);
                        } else {
                            i += 1;
                        }
                    }
                    removed.port = self.ports.get_mut(id as usize).and_then(Option::take);
                    if let Some(p) = &removed.port {
                        publish_uplink(p);
                    }
                    let _ = ack.send(removed);
                }
                Command::Inject(id, frame, ack) => {
                    let _ = ack.send(self.inject(id, &frame));
                }
                Command::Reopen(id, queue, up, ack) => {
                    let _ = ack.send(self.reopen(id, queue, up.0).map(UplinkQueue));
                }
            }
        }
    }

    /// Swaps `up` in as queue `queue` of uplink port `id`, if this PMD
    /// polls it; returns the queue's old uplink, its counters folded into
    /// the queue's base.
    fn reopen(&mut self, id: PortId, queue: usize, up: Box<dyn Uplink>) -> Option<Box<dyn Uplink>> {
        let u = self
            .units
            .iter()
            .find(|u| u.port.id == id && u.queue == queue && u.is_uplink())?;
        let port = Arc::clone(&u.port);
        let mut q = port.queue(queue);
        let QueueEnd::Uplink(old) = &mut q.end else {
            return None;
        };
        if old.rx_fd() >= 0 {
            let _ = self.poller.remove_fd(old.rx_fd());
        }
        let old = std::mem::replace(old, up);
        let was = old.counters();
        q.base.accumulate(&was);
        if let QueueEnd::Uplink(new) = &q.end {
            if self.poll.mode().sleeps() && new.rx_fd() >= 0 {
                if let Err(e) = self.poller.add_fd(new.rx_fd(), Token(u64::from(id))) {
                    tracing::warn!("port {}: cannot watch {}: {e}", port.name, new.name());
                }
            }
        }
        drop(q);
        publish_uplink(&port);
        Some(old)
    }

    /// Forwards `frame` as port `id`'s (an announce: rare, on the control
    /// plane's command, never per packet).
    fn inject(&mut self, id: PortId, frame: &[u8]) -> bool {
        let Some(Some(src)) = self.ports.get(id as usize).cloned() else {
            return false;
        };
        let now = self.now_ms;
        let Self {
            ports,
            fdb,
            fwd,
            learns,
            ..
        } = self;
        let table = fdb.read().unwrap_or_else(|p| p.into_inner());
        {
            // The switch's own announce: not held to the port's flood limit.
            let mut ctx = Burst::new(ports, &table, learns, fwd, now, id, None);
            ctx.frame(
                &src.ingress,
                usize::MAX,
                &VirtioNetHdr::default(),
                frame,
                frame.len(),
                &frame,
            );
            add_drops(&src.counters.tx_drops, &ctx.drops);
            ctx.release();
        }
        drop(table);
        let refused = learn_noted(fdb, learns, now);
        if refused != 0 {
            src.counters
                .fdb_learn_refused
                .fetch_add(refused, Ordering::Relaxed);
        }
        true
    }

    /// Registers a new unit's fds with the poller.
    fn watch(&mut self, u: &mut Unit) {
        let p = Arc::clone(&u.port);
        let mut q = p.queue(u.queue);
        match (&mut u.tx, &mut q.end) {
            (Some(tx), QueueEnd::Guest(rx)) => {
                if let Err(e) = self.poller.add_tx(tx).and_then(|()| self.poller.add_rx(rx)) {
                    tracing::warn!("port {}: cannot watch its queues: {e}", p.name);
                }
            }
            (_, QueueEnd::Uplink(up)) => {
                if self.poll.mode().sleeps() && up.rx_fd() >= 0 {
                    if let Err(e) = self.poller.add_fd(up.rx_fd(), Token(u64::from(p.id))) {
                        tracing::warn!("port {}: cannot watch {}: {e}", p.name, up.name());
                    }
                }
                p.counters.connected.store(true, Ordering::Relaxed);
            }
            (None, QueueEnd::Guest(_)) => {}
        }
        tracing::debug!(
            "pmd {}: polls port {} queue {}",
            self.index,
            p.name,
            u.queue
        );
    }

    /// Reads the clock: the FDB's time, and the housekeeping when due.
    fn tick(&mut self) {
        let now = Instant::now();
        self.now_ms = u64::try_from(now.duration_since(self.epoch).as_millis()).unwrap_or(u64::MAX);
        if now.duration_since(self.last_housekeeping) >= HOUSEKEEPING {
            self.last_housekeeping = now;
            self.housekeeping();
        }
    }

    fn housekeeping(&mut self) {
        for u in &mut self.units {
            match &mut u.tx {
                None => {
                    if u.queue == 0 {
                        publish_uplink(&u.port);
                    }
                }
                Some(tx) => {
                    if u.queue == 0 {
                        u.port
                            .counters
                            .connected
                            .store(tx.is_running(), Ordering::Relaxed);
                    }
                }
            }
        }
        if self.index == 0 && self.last_age.elapsed() >= AGE_EVERY {
            self.last_age = Instant::now();
            let now = self.now_ms;
            self.fdb.write().unwrap_or_else(|p| p.into_inner()).age(now);
        }
    }

    /// One burst from every unit; returns the frames received.
    fn round(&mut self) -> usize {
        let mut moved = 0;
        let now = self.now_ms;
        for i in 0..self.units.len() {
            moved += self.burst_from(i, now);
        }
        self.rounds = self.rounds.wrapping_add(1);
        if moved == 0 || self.rounds.is_multiple_of(RX_SYNC_EVERY) {
            self.sync_rx();
        }
        moved
    }

    /// Picks up the ring changes of the RX queues this PMD answers for
    /// (the RX halves of the guest queues it polls), unless another PMD is
    /// filling one (which picks them up itself).
    fn sync_rx(&mut self) {
        for u in &self.units {
            if u.tx.is_none() {
                continue;
            }
            if let Ok(mut q) = u.port.queues[u.queue].try_lock() {
                if let QueueEnd::Guest(rx) = &mut q.end {
                    rx.is_running();
                }
            }
        }
    }

    /// One burst from unit `i` into the other ports.
    fn burst_from(&mut self, i: usize, now: u64) -> usize {
        let Self {
            units,
            ports,
            fdb,
            fwd,
            learns,
            ..
        } = self;
        let Unit { port, queue, tx } = &mut units[i];
        // An idle guest queue costs one read of its ring: no table lock
        // (a shared line every PMD's read lock writes), no burst state.
        if let Some(tx) = tx {
            if !tx.has_pending() {
                return 0;
            }
        }
        let src: &PortDp = port;
        // Read-locked once per burst; a poisoned lock (a panic elsewhere)
        // leaves a consistent table.
        let table = fdb.read().unwrap_or_else(|p| p.into_inner());
        // The burst state lives in this block and is dropped in place (it
        // holds the destination guards: moving it would copy them all).
        let n = {
            let mut ctx = Burst::new(
                ports,
                &table,
                learns,
                fwd,
                now,
                src.id,
                Some(&src.counters.flood),
            );
            let capture = src.capture.on().then(|| Arc::clone(&src.capture));
            let ingress = &src.ingress;
            let max_frame = src.max_frame;
            let n = match tx {
                Some(tx) => tx.recv_burst(BURST, |frame| {
                    let frame = &*frame;
                    if let Some(c) = &capture {
                        c.offer(Direction::Inbound, frame.len(), |b| frame.copy_to(0, b));
                    }
                    ctx.frame(
                        ingress,
                        max_frame,
                        frame.hdr(),
                        frame.head(),
                        frame.len(),
                        frame,
                    );
                }),
                None => {
                    let mut q = src.queue(*queue);
                    let QueueEnd::Uplink(up) = &mut q.end else {
                        return 0;
                    };
                    let r = up.rx_burst(BURST, &mut |hdr, bytes| {
                        if let Some(c) = &capture {
                            c.offer(Direction::Inbound, bytes.len(), |b| {
                                let k = b.len().min(bytes.len());
                                b[..k].copy_from_slice(&bytes[..k]);
                                k
                            });
                        }
                        ctx.frame(ingress, max_frame, hdr, bytes, bytes.len(), &bytes);
                    });
                    // Flushed before the uplink's own lock goes.
                    ctx.release();
                    match r {
                        Ok(k) => k,
                        Err(e) => {
                            tracing::debug!("port {}: rx: {e}", src.name);
                            0
                        }
                    }
                }
            };
            add_drops(&src.counters.tx_drops, &ctx.drops);
            ctx.release();
            n
        };
        // A port at its quota: every new source it brought would be
        // refused (each is new or moving to it), so they are counted here,
        // under the read lock, and a port spraying source addresses costs
        // the other PMDs no write lock per burst.
        let mut refused = 0;
        if !learns.is_empty() && table.port_full(src.id) {
            refused = learns.len() as u64;
            learns.clear();
            table.count_limit_hits(refused);
        }
        drop(table);
        refused += learn_noted(fdb, learns, now);
        if refused != 0 {
            // Relaxed: a counter orders nothing.
            src.counters
                .fdb_learn_refused
                .fetch_add(refused, Ordering::Relaxed);
        }
        n
    }
}

/// Learns the sources a burst noted (write lock, only if any); returns how
/// many were refused for a limit ([`crate::fdb::Learned::LimitHit`]).
fn learn_noted(fdb: &RwLock<Fdb>, learns: &mut Learns, now: u64) -> u64 {
    if learns.is_empty() {
        return 0;
    }
    let mut t = fdb.write().unwrap_or_else(|p| p.into_inner());
    learns.learn_into(&mut t, now)
}

/// Publishes an uplink's counters, queue by queue, into its shared ones.
fn publish_uplink(p: &PortDp) {
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

/// The state of one source burst.
struct Burst<'a> {
    ports: &'a [Option<Arc<PortDp>>],
    fdb: &'a Fdb,
    learns: &'a mut Learns,
    fwd: &'a mut Forwarder,
    now: u64,
    /// Decision drops of the source.
    drops: DropCounts,
    src_id: PortId,
    /// The destination queues locked so far, flushed and released at the
    /// end of the burst.
    held: ArrayVec<Held<'a>, MAX_HELD>,
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
    fn new(
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
            held: ArrayVec::new(),
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
    fn frame<F: FrameSource>(
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
            if let QueueEnd::Guest(rx) = &mut self.held[i].guard.end {
                // That queue is not running (a guest using fewer queues
                // than offered): queue 0.
                if !rx.is_running() {
                    i = self.hold(d, 0);
                }
            }
        }
        let Self { held, fwd, .. } = self;
        let DestQueue {
            end, fwd: counters, ..
        } = &mut *held[i].guard;
        let _ = match end {
            QueueEnd::Guest(rx) => fwd.forward(counters, &h, src, rx),
            QueueEnd::Uplink(u) => {
                let mut sink = UplinkSink::with_accepts(&mut **u, d.uplink_accepts);
                fwd.forward(counters, &h, src, &mut sink)
            }
        };
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
        let DestQueue {
            end, fwd: counters, ..
        } = &mut *held[i].guard;
        let _ = match end {
            QueueEnd::Guest(rx) => fwd.forward_typed(counters, h, src, rx),
            QueueEnd::Uplink(u) => {
                let mut sink = UplinkSink::with_accepts(&mut **u, uplink_accepts);
                fwd.forward_typed(counters, h, src, &mut sink)
            }
        };
    }

    /// Destination queue `q` of `d`, locked for the rest of the burst. A
    /// queue another PMD holds makes this one flush and release what it
    /// holds before it waits: a PMD never waits while holding a destination.
    /// Returns its index in `held`.
    #[inline]
    fn hold(&mut self, d: &'a PortDp, q: usize) -> usize {
        match self
            .held
            .iter()
            .position(|h| h.port == d.id && h.queue == q)
        {
            Some(i) => i,
            None => self.lock(d, q),
        }
    }

    /// [`Self::hold`] for a queue the burst does not hold yet: once per
    /// destination and burst, so out of line.
    #[inline(never)]
    fn lock(&mut self, d: &'a PortDp, q: usize) -> usize {
        if self.held.is_full() {
            self.release();
        }
        let m = &d.queues[q];
        let guard = match m.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                self.release();
                m.lock().unwrap_or_else(|p| p.into_inner())
            }
        };
        self.held.push(Held {
            port: d.id,
            queue: q,
            guard,
        });
        self.held.len() - 1
    }

    /// Flushes and unlocks every destination queue held, and forgets the
    /// kept decision (whose [`Planned`] names one of them).
    fn release(&mut self) {
        self.recent = None;
        for mut h in self.held.drain(..) {
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

/// Whether a frame of `len` bytes with header `hdr` is over a port's
/// largest frame. A super-frame (GSO) is bounded by its segment size, not
/// the MTU (as the library's own guest-TX check does when TSO is offered).
#[inline]
fn over_mtu(hdr: &VirtioNetHdr, len: usize, max_frame: usize) -> bool {
    !hdr.is_gso() && len > max_frame
}

/// The queue a frame goes to on a multiqueue port: a hash of its
/// addresses, so that a flow keeps its queue.
#[inline]
fn flow_queue(head: &[u8], n: usize) -> usize {
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
    use crate::fdb::FdbConfig;
    use crate::test_uplink::{Frames, Scripted};
    use crate::vlan::VlanMode;
    use std::sync::mpsc::sync_channel;

    const SRC: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const DST: [u8; 6] = [2, 0, 0, 0, 0, 2];
    /// Where a test frame carries its number.
    const NUMBER: usize = 20;

    struct Ports {
        pmd: Pmd,
        /// Each port's frames to send.
        send: Vec<Frames>,
        /// Each port's frames received.
        got: Vec<Frames>,
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
        let (mut pmd, handle) =
            new_pmd(0, PollMode::Busy, Arc::clone(&fdb), Instant::now()).unwrap();
        let (mut send, mut got, mut counters, mut captures) = (vec![], vec![], vec![], vec![]);
        let mut flood = Some(flood);
        for id in 0..3 as PortId {
            let (s, g) = (Arc::default(), Arc::default());
            let c = Arc::new(PortCounters {
                flood: if id == 0 {
                    flood.take().unwrap_or_default()
                } else {
                    FloodLimiter::default()
                },
                ..PortCounters::default()
            });
            let tap = Arc::new(CaptureTap::default());
            let ingress = Ingress {
                id,
                vlan: VlanMode::Access(1),
                macs: vec![],
            };
            let (dp, units) = PortDp::new(
                id,
                format!("p{id}"),
                ingress,
                (id == 1).then_some(1500),
                Arc::clone(&c),
                Arc::clone(&tap),
                End::Uplink(vec![Box::new(Scripted {
                    send: Arc::clone(&s),
                    got: Arc::clone(&g),
                })]),
            );
            let (ack, _answer) = sync_channel(4);
            handle.send(Command::AddPort(dp, ack.clone()));
            for u in units {
                handle.send(Command::AddUnit(Box::new(u), ack.clone()));
            }
            send.push(s);
            got.push(g);
            counters.push(c);
            captures.push(tap);
        }
        pmd.poll_once();
        Ports {
            pmd,
            send,
            got,
            counters,
            captures,
            fdb,
        }
    }

    /// A frame from `SRC` to `DST` of `len` bytes, numbered `n` (past the
    /// 16 bytes a kept decision is keyed by).
    fn frame(len: usize, n: u8) -> Vec<u8> {
        let mut f = vec![0u8; len];
        f[..6].copy_from_slice(&DST);
        f[6..12].copy_from_slice(&SRC);
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        f[NUMBER] = n;
        f
    }

    /// Sends `lens` from port 0 in one burst; returns the numbers of the
    /// frames port 1 received.
    fn burst(p: &mut Ports, lens: &[usize]) -> Vec<u8> {
        p.got[1].lock().unwrap().clear();
        let frames = lens.iter().enumerate().map(|(n, &l)| frame(l, n as u8));
        p.send[0].lock().unwrap().extend(frames);
        assert_eq!(p.pmd.poll_once(), lens.len());
        assert!(p.got[2].lock().unwrap().is_empty(), "flooded");
        let got = p.got[1].lock().unwrap();
        got.iter().map(|f| f[NUMBER]).collect()
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
            p.send[0].lock().unwrap().extend(frames);
            assert_eq!(p.pmd.poll_once(), 32);
        }
        let flooded = p.got[2].lock().unwrap().len();
        assert!((5..=6).contains(&flooded), "{flooded} floods passed");
        let unicast = p.got[1]
            .lock()
            .unwrap()
            .iter()
            .filter(|f| f[..6] == DST)
            .count();
        assert_eq!(unicast, 48, "every unicast frame passed");
        assert_eq!(
            tx_dropped(&p, 0, DropReason::FloodRate),
            48 - flooded as u64,
            "every other flood counted"
        );
        // Another port's floods are its own: not limited.
        p.got[0].lock().unwrap().clear();
        let other = [2, 0, 0, 0, 0, 7];
        p.send[2]
            .lock()
            .unwrap()
            .extend((0..32).map(|i| broadcast(other, i)));
        assert_eq!(p.pmd.poll_once(), 32);
        assert_eq!(p.got[0].lock().unwrap().len(), 32);
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
            p.send[0].lock().unwrap().extend(frames);
            assert_eq!(p.pmd.poll_once(), 10);
        }
        assert_eq!(p.got[1].lock().unwrap().len(), 20, "every frame forwarded");
        assert!(p.got[2].lock().unwrap().is_empty());
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
        p.send[2].lock().unwrap().push(g);
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
