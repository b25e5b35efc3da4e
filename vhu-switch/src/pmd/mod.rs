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
//!
//! | module | job |
//! |---|---|
//! | this one | the thread: [`Pmd`], its loop, its commands applied, its housekeeping |
//! | `burst` | one source burst, frame by frame: [`crate::decide::decide`] or the burst's flow cache, then the delivery |
//! | `dest` | the destination side: [`PortDp`], [`DestQueue`], the queues a burst holds, [`PortCounters`], [`FloodLimiter`] |
//! | `command` | the channel from the control plane: [`Command`], [`PmdHandle`], [`Removed`] |

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use vhost_net_backend::io::Uplink;
use vhost_net_backend::poll::{Notify, Step, Token};
use vhost_net_backend::{Forwarder, PollLoop, PollMode, Poller, VirtioNetHdr};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use crate::capture::Direction;
use crate::decide::Learns;
use crate::fdb::Fdb;
use crate::PortId;

mod burst;
mod command;
mod dest;

use burst::Burst;
pub use command::{Command, PmdCounters, PmdHandle, Removed, UplinkQueue};
use dest::{add_drops, publish_uplink, QueueEnd};
pub use dest::{
    load_drops, tsc_hz, DestQueue, FloodLimiter, PortCounters, PortDp, Unit, DEFAULT_FLOOD_BURST,
    DEFAULT_FLOOD_RATE,
};

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
