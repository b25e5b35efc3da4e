// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! A PMD (poll-mode driver) thread: it owns the endpoints of its ports and,
//! for each source burst, decides on each frame's private head copy and
//! pushes it once into every destination.
//!
//! ```text
//! source burst (guest TX ring / uplink RX)
//!   -> wire::L2Head::parse(head)         the private head copy, never guest memory
//!   -> decide(ingress, head, fdb)         forward / flood / drop (+ learning)
//!   -> per destination: VLAN tag edit (Spliced: still one copy), MTU check,
//!      Forwarder::forward into its Sink (guest RX queue or UplinkSink)
//!   -> flush every destination touched, once per burst
//! ```
//!
//! * **Ports come and go at burst boundaries**: the control plane sends
//!   [`Command`]s and waits for the acknowledgement; the PMD applies them
//!   between bursts (it is woken if asleep). Nothing else is shared but the
//!   FDB, whose mutex is taken once per source burst (never per frame), and
//!   atomic counters.
//! * **Isolation**: a destination without RX buffers loses its frames
//!   (counted, `no_buffers`); the source goes on. No retry queue, no
//!   head-of-line blocking.
//! * **One PMD** serves every port in this version; the FDB lock and the
//!   command channel are already what several PMDs will share.
//!
//! Hot path: no allocation, no lock per frame, no syscall per frame.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use vhost_net_backend::io::UplinkCounters;
use vhost_net_backend::poll::{Notify, Step, Token};
use vhost_net_backend::sink::guest_from_host;
use vhost_net_backend::stats::DropCounts;
use vhost_net_backend::wire::{max_frame_for_mtu, L2Head, ETH_P_8021Q, VLAN_HLEN};
use vhost_net_backend::{
    DropReason, ForwardCounters, Forwarder, FrameSource, PollLoop, PollMode, Poller, QueuePair,
    Sink, Spliced, UplinkSink, VirtioNetHdr,
};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use crate::capture::{CaptureTap, Direction};
use crate::decide::{decide, Head, Ingress, Verdict};
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

/// Counters one port shares with the control plane, beyond the library's
/// own (guest queue counters are read from the `Port`).
#[derive(Debug, Default)]
pub struct PortCounters {
    /// Frames from the port dropped by the forwarding decision, by reason.
    pub tx_drops: [AtomicU64; DropReason::COUNT],
    /// Frames for the port dropped before its sink (MTU, VLAN), by reason.
    pub rx_drops: [AtomicU64; DropReason::COUNT],
    /// Uplinks: the uplink's own counters, published by the PMD every
    /// 100 ms (their kernel part costs a syscall: never per burst).
    pub uplink: Mutex<UplinkCounters>,
    /// Whether the uplink is open / the guest's rings run.
    pub connected: AtomicBool,
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

/// What a PMD thread knows of a port.
#[derive(Debug)]
pub struct PortDp {
    /// Its id (its index in the PMD's table).
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
    /// Its endpoint.
    pub end: End,
    /// What the software offload fallback did, into the port.
    pub fwd_rx: ForwardCounters,
    /// Touched in the current burst (to be flushed).
    dirty: bool,
    /// An uplink's transmit offloads as `GUEST_*` bits (what its sink
    /// accepts), read once when the port is built.
    uplink_accepts: u64,
}

impl PortDp {
    /// A port for a PMD table.
    pub fn new(
        id: PortId,
        name: String,
        ingress: Ingress,
        mtu: Option<u32>,
        counters: Arc<PortCounters>,
        capture: Arc<CaptureTap>,
        end: End,
    ) -> Self {
        let uplink_accepts = match &end {
            End::Uplink(u) => guest_from_host(u.offloads().tx),
            End::Guest(_) => 0,
        };
        Self {
            id,
            name,
            ingress,
            max_frame: mtu.map_or(usize::MAX, |m| max_frame_for_mtu(m as usize)),
            counters,
            capture,
            end,
            uplink_accepts,
            fwd_rx: ForwardCounters::default(),
            dirty: false,
        }
    }
}

/// A change of the PMD's ports, applied at a burst boundary.
#[derive(Debug)]
pub enum Command {
    /// Adds a port; the PMD answers when it polls it.
    Add(Box<PortDp>, SyncSender<()>),
    /// Removes a port; the PMD hands it back (to be dropped by the control
    /// plane).
    Remove(PortId, SyncSender<Option<Box<PortDp>>>),
}

/// Busy and idle cycles of a PMD, and the frames it moved.
#[derive(Debug, Default)]
pub struct PmdCounters {
    /// TSC cycles in rounds that moved frames.
    pub busy_cycles: AtomicU64,
    /// TSC cycles in rounds that found nothing.
    pub idle_cycles: AtomicU64,
    /// Frames moved (received from a source).
    pub frames: AtomicU64,
}

/// The control plane's end of a PMD.
#[derive(Debug)]
pub struct PmdHandle {
    /// Sends commands.
    pub commands: SyncSender<Command>,
    /// Wakes the PMD to read them.
    pub wake: Arc<EventFd>,
    /// Its counters.
    pub counters: Arc<PmdCounters>,
}

impl PmdHandle {
    /// Sends a command and wakes the PMD.
    pub fn send(&self, c: Command) -> bool {
        let ok = self.commands.send(c).is_ok();
        // A failed write means the counter is saturated: it is awake.
        let _ = self.wake.write(1);
        ok
    }
}

/// A PMD thread's state.
#[derive(Debug)]
pub struct Pmd {
    ports: Vec<Option<Box<PortDp>>>,
    fdb: Arc<Mutex<Fdb>>,
    commands: Receiver<Command>,
    wake: Arc<EventFd>,
    poller: Poller,
    poll: PollLoop,
    fwd: Forwarder,
    counters: Arc<PmdCounters>,
    epoch: Instant,
    last_housekeeping: Instant,
    last_age: Instant,
}

/// Creates a PMD (run it with [`Pmd::run`] on its thread) and its handle.
///
/// # Errors
/// The eventfd or epoll instance could not be created.
pub fn new_pmd(
    mode: PollMode,
    fdb: Arc<Mutex<Fdb>>,
    epoch: Instant,
) -> std::io::Result<(Pmd, PmdHandle)> {
    let (tx, rx) = std::sync::mpsc::sync_channel(16);
    let wake = Arc::new(EventFd::new(EFD_NONBLOCK)?);
    let mut poller = Poller::new()?;
    {
        use std::os::fd::AsRawFd;
        poller.add_fd(wake.as_raw_fd(), Token(TOKEN_COMMAND))?;
    }
    let counters = Arc::new(PmdCounters::default());
    let now = Instant::now();
    Ok((
        Pmd {
            ports: Vec::new(),
            fdb,
            commands: rx,
            wake: Arc::clone(&wake),
            poller,
            poll: PollLoop::new(mode, IDLE),
            fwd: Forwarder::new(),
            counters: Arc::clone(&counters),
            epoch,
            last_housekeeping: now,
            last_age: now,
        },
        PmdHandle {
            commands: tx,
            wake,
            counters,
        },
    ))
}

/// The notification set of a PMD's ports, for [`PollLoop::round`].
struct Ports<'a>(&'a mut [Option<Box<PortDp>>]);

impl Notify for Ports<'_> {
    fn enable_notifications(&mut self) -> bool {
        let mut pending = false;
        for p in self.0.iter_mut().flatten() {
            if let End::Guest(qps) = &mut p.end {
                pending |= qps.as_mut_slice().enable_notifications();
            }
        }
        pending
    }

    fn disable_notifications(&mut self) {
        for p in self.0.iter_mut().flatten() {
            if let End::Guest(qps) = &mut p.end {
                qps.as_mut_slice().disable_notifications();
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
            self.apply_commands();
            let t0 = vhost_net_backend::sys::tsc();
            let moved = self.round();
            let t1 = vhost_net_backend::sys::tsc();
            let c = if moved > 0 {
                self.counters
                    .frames
                    .fetch_add(moved as u64, Ordering::Relaxed);
                &self.counters.busy_cycles
            } else {
                &self.counters.idle_cycles
            };
            c.fetch_add(t1.wrapping_sub(t0), Ordering::Relaxed);
            self.housekeeping();
            let Self {
                ports,
                poller,
                poll,
                wake,
                ..
            } = &mut self;
            let step = poll.round(moved, false, &mut Ports(ports), poller)?;
            // Woken by a command: drain the eventfd (level-triggered), or
            // the next sleep would return at once. The commands themselves
            // are read at the top of the loop, without a syscall.
            if step == Step::Slept && poller.fired().any(|t| t == Token(TOKEN_COMMAND)) {
                let _ = wake.read();
            }
        }
        Ok(())
    }

    /// Applies the commands sent since the last burst (a lock-free look at
    /// the channel when there are none).
    fn apply_commands(&mut self) {
        while let Ok(c) = self.commands.try_recv() {
            match c {
                Command::Add(mut p, ack) => {
                    let id = p.id as usize;
                    match &mut p.end {
                        End::Guest(qps) => {
                            for qp in qps.iter_mut() {
                                if let Err(e) = self.poller.add(qp) {
                                    tracing::warn!("port {}: cannot watch its queues: {e}", p.name);
                                }
                            }
                        }
                        End::Uplink(u) => {
                            if self.poll.mode().sleeps() {
                                if let Err(e) = self.poller.add_fd(u.rx_fd(), Token(id as u64)) {
                                    tracing::warn!(
                                        "port {}: cannot watch {}: {e}",
                                        p.name,
                                        u.name()
                                    );
                                }
                            }
                            p.counters.connected.store(true, Ordering::Relaxed);
                        }
                    }
                    if self.ports.len() <= id {
                        self.ports.resize_with(id + 1, || None);
                    }
                    self.ports[id] = Some(p);
                    let _ = ack.send(());
                }
                Command::Remove(id, ack) => {
                    let p = self.ports.get_mut(id as usize).and_then(Option::take);
                    if let Some(p) = &p {
                        if let End::Uplink(u) = &p.end {
                            let _ = self.poller.remove_fd(u.rx_fd());
                        }
                        publish_uplink(p);
                    }
                    let _ = ack.send(p);
                }
            }
        }
    }

    fn housekeeping(&mut self) {
        if self.last_housekeeping.elapsed() < HOUSEKEEPING {
            return;
        }
        self.last_housekeeping = Instant::now();
        for p in self.ports.iter_mut().flatten() {
            match &mut p.end {
                End::Uplink(_) => publish_uplink(p),
                End::Guest(qps) => {
                    let running = qps.iter_mut().any(|q| q.tx.is_running());
                    p.counters.connected.store(running, Ordering::Relaxed);
                }
            }
        }
        if self.last_age.elapsed() >= AGE_EVERY {
            self.last_age = Instant::now();
            let now = self.now();
            self.fdb.lock().unwrap_or_else(|p| p.into_inner()).age(now);
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// One burst from every source; returns the frames received.
    fn round(&mut self) -> usize {
        let mut moved = 0;
        let now = self.now();
        for i in 0..self.ports.len() {
            let Some(mut src) = self.ports[i].take() else {
                continue;
            };
            moved += self.burst_from(&mut src, now);
            self.ports[i] = Some(src);
        }
        moved
    }

    /// One burst from `src` into the other ports.
    fn burst_from(&mut self, src: &mut PortDp, now: u64) -> usize {
        let Self {
            ports, fdb, fwd, ..
        } = self;
        // Lock once per burst; a poisoned lock (a panic elsewhere) leaves a
        // consistent table.
        let mut fdb = fdb.lock().unwrap_or_else(|p| p.into_inner());
        let mut ctx = Burst {
            ports,
            fdb: &mut fdb,
            fwd,
            now,
            drops: DropCounts::default(),
            src_id: src.id,
        };
        let capture = src.capture.on().then(|| Arc::clone(&src.capture));
        let ingress = &src.ingress;
        let max_frame = src.max_frame;
        let mut n = 0;
        match &mut src.end {
            End::Guest(qps) => {
                for qp in qps.iter_mut() {
                    n += qp.tx.recv_burst(BURST, |frame| {
                        let hdr = *frame.hdr();
                        if let Some(c) = &capture {
                            c.offer(Direction::Inbound, frame.len(), |b| frame.copy_to(0, b));
                        }
                        ctx.frame(ingress, max_frame, &hdr, frame.head(), &*frame);
                    });
                }
            }
            End::Uplink(up) => {
                let r = up.rx_burst(BURST, &mut |hdr, bytes| {
                    if let Some(c) = &capture {
                        c.offer(Direction::Inbound, bytes.len(), |b| {
                            let k = b.len().min(bytes.len());
                            b[..k].copy_from_slice(&bytes[..k]);
                            k
                        });
                    }
                    ctx.frame(ingress, max_frame, hdr, bytes, &bytes);
                });
                match r {
                    Ok(k) => n += k,
                    Err(e) => tracing::debug!("port {}: rx: {e}", src.name),
                }
            }
        }
        add_drops(&src.counters.tx_drops, &ctx.drops);
        ctx.flush();
        n
    }
}

/// Publishes an uplink's counters into its shared ones.
fn publish_uplink(p: &PortDp) {
    let End::Uplink(u) = &p.end else { return };
    let c = u.counters();
    *p.counters.uplink.lock().unwrap_or_else(|e| e.into_inner()) = c;
}

/// The state of one source burst.
struct Burst<'a> {
    ports: &'a mut [Option<Box<PortDp>>],
    fdb: &'a mut Fdb,
    fwd: &'a mut Forwarder,
    now: u64,
    /// Decision drops of the source.
    drops: DropCounts,
    src_id: PortId,
}

/// 802.1Q TCI of a head's outer tag, if it is a C-tag.
#[inline]
fn outer_tci(l2: &L2Head) -> Option<u16> {
    l2.vlans()
        .first()
        .filter(|v| v.tpid == ETH_P_8021Q)
        .map(|v| v.tci.0)
}

impl Burst<'_> {
    /// Decides on one frame and delivers it.
    #[inline]
    fn frame(
        &mut self,
        ingress: &Ingress,
        max_frame: usize,
        hdr: &VirtioNetHdr,
        head: &[u8],
        frame: &dyn FrameSource,
    ) {
        // A super-frame (GSO) is bounded by its segment size, not the MTU
        // (as the library's own guest-TX check does when TSO is offered).
        if !hdr.is_gso() && frame.frame_len() > max_frame {
            self.drops.add(DropReason::TooLong, 1);
            return;
        }
        let Ok(l2) = L2Head::parse(head) else {
            self.drops.add(DropReason::TooShort, 1);
            return;
        };
        let tci = outer_tci(&l2);
        let h = Head {
            dst: l2.dst().0,
            src: l2.src().0,
            tci,
        };
        match decide(ingress, &h, self.fdb, self.now) {
            Verdict::Forward { port, vlan } => {
                if !self.deliver(port, vlan, tci, hdr, head, frame, false) {
                    self.drops.add(DropReason::VlanDenied, 1);
                }
            }
            Verdict::Flood { vlan } => {
                for j in 0..self.ports.len() as PortId {
                    if j != self.src_id {
                        self.deliver(j, vlan, tci, hdr, head, frame, true);
                    }
                }
            }
            Verdict::Drop(r) => self.drops.add(r, 1),
        }
    }

    /// Pushes one frame into port `dst` (if it is a member of `vlan`), with
    /// its tag edited for that port. Returns whether the port is a member.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn deliver(
        &mut self,
        dst: PortId,
        vlan: u16,
        tci: Option<u16>,
        hdr: &VirtioNetHdr,
        head: &[u8],
        frame: &dyn FrameSource,
        flooding: bool,
    ) -> bool {
        let Some(Some(d)) = self.ports.get_mut(dst as usize) else {
            return false;
        };
        let egress = d.ingress.vlan.egress(vlan);
        let Some(edit) = TagEdit::between(tci, egress) else {
            return flooding;
        };
        // The edited frame: still one copy, from the source's buffers.
        let mut lead = [0u8; 16];
        lead[..12].copy_from_slice(&head[..12]);
        let spliced;
        let (src, h): (&dyn FrameSource, VirtioNetHdr) = match edit {
            TagEdit::Keep => (frame, *hdr),
            TagEdit::Pop => {
                spliced = Spliced::new(&lead[..12], frame, 12 + VLAN_HLEN);
                match &spliced {
                    Some(s) => (s, hdr.shifted(-(VLAN_HLEN as i16))),
                    None => return true,
                }
            }
            TagEdit::Push(t) | TagEdit::Rewrite(t) => {
                lead[12..14].copy_from_slice(&ETH_P_8021Q.to_be_bytes());
                lead[14..16].copy_from_slice(&t.to_be_bytes());
                let (from, shift) = match edit {
                    TagEdit::Push(_) => (12, VLAN_HLEN as i16),
                    _ => (12 + VLAN_HLEN, 0),
                };
                spliced = Spliced::new(&lead, frame, from);
                match &spliced {
                    Some(s) => (s, hdr.shifted(shift)),
                    None => return true,
                }
            }
        };
        if !h.is_gso() && src.frame_len() > d.max_frame {
            d.counters.rx_drops[DropReason::TooLong as usize].fetch_add(1, Ordering::Relaxed);
            return true;
        }
        if d.capture.on() {
            let s = src;
            d.capture.offer(Direction::Outbound, s.frame_len(), |b| {
                vhost_net_backend::copy_frame(s, b)
            });
        }
        d.dirty = true;
        let PortDp {
            end,
            fwd_rx,
            uplink_accepts,
            ..
        } = &mut **d;
        let _ = match end {
            End::Guest(qps) => {
                let q = flow_queue(head, qps);
                self.fwd.forward(fwd_rx, &h, src, &mut qps[q].rx)
            }
            End::Uplink(u) => {
                let mut sink = UplinkSink::with_accepts(&mut **u, *uplink_accepts);
                self.fwd.forward(fwd_rx, &h, src, &mut sink)
            }
        };
        true
    }

    /// Flushes every destination touched.
    fn flush(&mut self) {
        for d in self.ports.iter_mut().flatten() {
            if !d.dirty {
                continue;
            }
            d.dirty = false;
            match &mut d.end {
                End::Guest(qps) => {
                    for qp in qps.iter_mut() {
                        let _ = Sink::flush(&mut qp.rx);
                    }
                }
                End::Uplink(u) => {
                    if let Err(e) = u.tx_flush() {
                        tracing::debug!("port {}: tx: flush: {e}", d.name);
                    }
                }
            }
        }
    }
}

/// The RX queue a frame goes to on a multiqueue guest: a hash of its
/// addresses, so that a flow keeps its queue; queue 0 if that one is not
/// running.
#[inline]
fn flow_queue(head: &[u8], qps: &mut [QueuePair]) -> usize {
    let n = qps.len();
    if n <= 1 {
        return 0;
    }
    let h = head[..12]
        .iter()
        .fold(0u32, |a, &b| a.rotate_left(5) ^ u32::from(b));
    let q = (h as usize) % n;
    if qps[q].rx.is_running() {
        q
    } else {
        0
    }
}
