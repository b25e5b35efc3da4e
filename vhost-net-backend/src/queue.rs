// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The packet-burst API over one port's virtqueues, and the hand-off of ring
//! configurations from the control plane.
//!
//! # Hand-off
//!
//! Each vring has a `VringShared` slot. The control plane (the vhost-user
//! request handler) publishes a new `RingConfig` — or `None` to stop the
//! ring — bumps a generation counter, wakes the data plane through an
//! eventfd, and waits until the data plane acknowledges. The data plane
//! checks the generation with one atomic load at each burst boundary and
//! applies changes there, so no lock is taken per packet and the control
//! plane never frees memory, closes eventfds or reads ring indices while a
//! burst is running. Memory snapshots and eventfds are reference-counted:
//! whatever the data plane still holds stays valid.
//!
//! Every [`RxQueue`] and [`TxQueue`] handed out must be polled (or dropped):
//! a queue that is never polled makes the control plane wait for its
//! acknowledgement (up to [`ACK_TIMEOUT`]) on every ring change.

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use crate::device::{bits, Negotiated, MAX_FRAME_LEN};
use crate::net_hdr::{self, VirtioNetHdr};
use crate::ring::{
    copy_from_segs, read_hdr, GuestMemory, Layout, Popped, Ring, Seg, SegVec, SegWriter, UsedId,
    MAX_CHAIN_SEGS, MAX_RX_FRAME_SEGS,
};
use crate::stats::{BurstCounters, DropReason, QueueCounters, QueueStats};

/// How long the control plane waits for a data-plane acknowledgement.
pub const ACK_TIMEOUT: Duration = Duration::from_secs(2);

/// Bytes of the start of each guest TX frame copied into a private buffer,
/// so that forwarding decisions (MACs, VLAN, EtherType, L3/L4 headers for
/// offloads) are taken on bytes the guest cannot change under us.
pub const HEAD_LEN: usize = 64;

/// Most RX chains one frame may span with mergeable buffers.
pub const MAX_RX_CHAINS: usize = 256;

/// The configuration of a running ring, as the control plane sees it.
#[derive(Debug)]
pub(crate) struct RingConfig {
    pub mem: Arc<GuestMemory>,
    pub layout: Layout,
    /// Where to start (`SET_VRING_BASE`; for packed rings both indices and
    /// wrap counters).
    pub base: u32,
    /// Bumped every time the ring is (re)started; a change of memory or
    /// eventfds within one epoch keeps the data plane's indices.
    pub epoch: u64,
    pub kick: Option<Arc<File>>,
    pub call: Option<Arc<File>>,
    pub features: Negotiated,
    /// Largest frame accepted from the guest (Ethernet header included).
    pub max_frame: usize,
}

#[derive(Debug, Default)]
struct Slot {
    desired: Option<Arc<RingConfig>>,
    applied: u64,
    attached: bool,
    /// The base (next avail index) of a ring the data plane stopped.
    stopped_avail: Option<u32>,
}

/// The control plane's and the data plane's shared view of one vring.
#[derive(Debug)]
pub(crate) struct VringShared {
    gen: AtomicU64,
    slot: Mutex<Slot>,
    acked: Condvar,
    wake: EventFd,
    pub stats: QueueStats,
}

impl VringShared {
    pub(crate) fn new() -> std::io::Result<Self> {
        Ok(Self {
            gen: AtomicU64::new(0),
            slot: Mutex::new(Slot::default()),
            acked: Condvar::new(),
            wake: EventFd::new(EFD_NONBLOCK)?,
            stats: QueueStats::default(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Slot> {
        // A panic while holding the slot lock leaves it in a consistent
        // state (every field is written whole), so poisoning is ignored.
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Publishes a ring configuration (`None` stops the ring) and waits
    /// until the data plane applied it. Returns the next avail index if this
    /// call stopped a ring the data plane was running.
    pub(crate) fn publish(&self, cfg: Option<Arc<RingConfig>>) -> Option<u32> {
        let mut slot = self.lock();
        slot.desired = cfg;
        slot.stopped_avail = None;
        let target = self.gen.fetch_add(1, Ordering::AcqRel) + 1;
        if !slot.attached {
            slot.applied = target;
            return None;
        }
        // A failed write means the counter is saturated: the data plane
        // is awake anyway.
        let _ = self.wake.write(1);
        let (mut slot, res) = self
            .acked
            .wait_timeout_while(slot, ACK_TIMEOUT, |s| s.attached && s.applied < target)
            .unwrap_or_else(|p| p.into_inner());
        if res.timed_out() {
            tracing::warn!(
                "vring: data plane did not acknowledge a ring change within {ACK_TIMEOUT:?}; \
                 is every queue polled?"
            );
        }
        slot.stopped_avail.take()
    }

    pub(crate) fn wake_fd(&self) -> i32 {
        self.wake.as_raw_fd()
    }
}

/// The data-plane side of one vring, shared by [`RxQueue`] and [`TxQueue`].
#[derive(Debug)]
struct Vring {
    shared: Arc<VringShared>,
    applied_gen: u64,
    cfg: Option<Arc<RingConfig>>,
    ring: Option<Ring>,
    segs: SegVec,
    poller: Option<Arc<Epoll>>,
    registered_kick: Option<i32>,
    counters: BurstCounters,
    reported_broken: bool,
}

impl Vring {
    fn new(shared: Arc<VringShared>, max_segs: usize) -> Self {
        shared.lock().attached = true;
        Self {
            shared,
            applied_gen: 0,
            cfg: None,
            ring: None,
            segs: SegVec::with_capacity(max_segs),
            poller: None,
            registered_kick: None,
            counters: BurstCounters::default(),
            reported_broken: false,
        }
    }

    /// Picks up a configuration change, if any. One atomic load otherwise.
    #[inline]
    fn sync(&mut self) {
        if self.shared.gen.load(Ordering::Acquire) != self.applied_gen {
            self.apply();
        }
    }

    #[cold]
    fn apply(&mut self) {
        let shared = Arc::clone(&self.shared);
        let mut slot = shared.lock();
        // Drain the wake-up (edge-triggered in the poller; this keeps the
        // counter small). EAGAIN just means nobody woke us.
        let _ = shared.wake.read();
        let desired = slot.desired.clone();
        match &desired {
            None => {
                if let Some(r) = self.ring.take() {
                    slot.stopped_avail = Some(r.base());
                }
            }
            Some(cfg) => {
                let same_epoch = self.cfg.as_ref().is_some_and(|c| c.epoch == cfg.epoch);
                let ring = match (&self.ring, same_epoch) {
                    (Some(old), true) => old.remap(
                        Arc::clone(&cfg.mem),
                        cfg.layout,
                        cfg.features.event_idx(),
                        cfg.features.indirect(),
                    ),
                    _ => Ring::new(
                        Arc::clone(&cfg.mem),
                        cfg.layout,
                        cfg.base,
                        cfg.features.event_idx(),
                        cfg.features.indirect(),
                    ),
                };
                self.ring = match ring {
                    Ok(r) => Some(r),
                    Err(e) => {
                        tracing::warn!("vring: cannot start ring: {e}");
                        None
                    }
                };
                self.reported_broken = false;
            }
        }
        self.cfg = desired;
        self.update_kick_registration();
        self.applied_gen = self.shared.gen.load(Ordering::Acquire);
        slot.applied = self.applied_gen;
        drop(slot);
        shared.acked.notify_all();
    }

    fn update_kick_registration(&mut self) {
        let Some(epoll) = &self.poller else {
            return;
        };
        let want = if self.ring.is_some() {
            self.cfg
                .as_ref()
                .and_then(|c| c.kick.as_ref())
                .map(|k| k.as_raw_fd())
        } else {
            None
        };
        if want == self.registered_kick {
            return;
        }
        if let Some(old) = self.registered_kick.take() {
            // The old fd is still open: `self.cfg` kept it until now... but
            // it may already have been replaced above; removing an fd that
            // was closed is harmless (EBADF/ENOENT).
            let _ = epoll.ctl(ControlOperation::Delete, old, EpollEvent::default());
        }
        if let Some(fd) = want {
            let ev = EpollEvent::new(EventSet::IN | EventSet::EDGE_TRIGGERED, fd as u64);
            match epoll.ctl(ControlOperation::Add, fd, ev) {
                Ok(()) => self.registered_kick = Some(fd),
                Err(e) => tracing::warn!("vring: cannot watch kick eventfd: {e}"),
            }
        }
    }

    /// Publishes used entries, signals the guest if it wants it, and adds
    /// the burst's counts. Once per burst.
    #[inline]
    fn finish_burst(&mut self) {
        if let Some(ring) = &mut self.ring {
            if ring.is_broken() && !self.reported_broken {
                self.reported_broken = true;
                self.counters.drop(DropReason::RingBroken);
            }
            if ring.publish_used() && ring.needs_notification() {
                if let Some(call) = self.cfg.as_ref().and_then(|c| c.call.as_ref()) {
                    // EAGAIN (counter saturated) still leaves an interrupt
                    // pending for the guest.
                    let _ = (&**call).write(&1u64.to_ne_bytes());
                    self.counters.notifications += 1;
                }
            }
        }
        if self.counters.packets != 0 || self.counters.any_drop || self.counters.notifications != 0
        {
            self.shared.stats.add(&self.counters);
            self.counters = BurstCounters::default();
        }
    }

    fn enable_notifications(&mut self) -> bool {
        self.sync();
        match &mut self.ring {
            Some(r) => r.enable_notification(),
            None => false,
        }
    }

    fn disable_notifications(&mut self) {
        self.sync();
        if let Some(r) = &mut self.ring {
            r.disable_notification();
        }
    }

    fn attach_poller(&mut self, epoll: Arc<Epoll>) -> std::io::Result<()> {
        let ev = EpollEvent::new(
            EventSet::IN | EventSet::EDGE_TRIGGERED,
            self.shared.wake_fd() as u64,
        );
        epoll.ctl(ControlOperation::Add, self.shared.wake_fd(), ev)?;
        self.poller = Some(epoll);
        self.update_kick_registration();
        Ok(())
    }
}

impl Drop for Vring {
    fn drop(&mut self) {
        let mut slot = self.shared.lock();
        slot.attached = false;
        if let Some(r) = self.ring.take() {
            slot.stopped_avail = Some(r.base());
        }
        drop(slot);
        self.shared.acked.notify_all();
    }
}

/// A guest's transmit queue: frames flow from the guest to the caller.
#[derive(Debug)]
pub struct TxQueue {
    vring: Vring,
    index: u16,
}

/// A guest's receive queue: frames flow from the caller into the guest.
#[derive(Debug)]
pub struct RxQueue {
    vring: Vring,
    index: u16,
    /// (id, length) of each buffer of the frame being written.
    chains: Box<[(UsedId, u32)]>,
}

/// One queue pair of a port: `rx` is the guest's receive queue (vring
/// `2 * index`), `tx` its transmit queue (vring `2 * index + 1`).
#[derive(Debug)]
pub struct QueuePair {
    /// Frames into the guest.
    pub rx: RxQueue,
    /// Frames from the guest.
    pub tx: TxQueue,
}

impl QueuePair {
    pub(crate) fn new(index: u16, rx: Arc<VringShared>, tx: Arc<VringShared>) -> Self {
        Self {
            rx: RxQueue {
                vring: Vring::new(rx, MAX_RX_FRAME_SEGS),
                index,
                chains: vec![(UsedId::new(0, 0), 0); MAX_RX_CHAINS].into_boxed_slice(),
            },
            tx: TxQueue {
                vring: Vring::new(tx, MAX_CHAIN_SEGS),
                index,
            },
        }
    }

    /// The queue pair's index within its port.
    pub fn index(&self) -> u16 {
        self.rx.index
    }
}

/// A frame the guest transmitted, lent to the caller of
/// [`TxQueue::recv_burst`] for the duration of its callback.
///
/// The first [`HEAD_LEN`] bytes are a private copy (see [`TxFrame::head`]);
/// the rest stays in guest memory and is copied exactly once, by
/// [`TxFrame::copy_to`] or by passing the frame to [`RxBurst::push`].
#[derive(Debug)]
pub struct TxFrame<'a> {
    hdr: VirtioNetHdr,
    len: usize,
    head: [u8; HEAD_LEN],
    head_len: usize,
    segs: &'a [Seg],
    /// Offset of the frame's first byte in `segs` (the virtio-net header
    /// length).
    data_off: usize,
}

impl TxFrame<'_> {
    /// The frame's offload metadata, copied out of guest memory.
    pub fn hdr(&self) -> &VirtioNetHdr {
        &self.hdr
    }

    /// Mutable offload metadata (what an [`RxBurst::push`] of this frame
    /// takes is the caller's argument, not this; provided for filters).
    pub fn hdr_mut(&mut self) -> &mut VirtioNetHdr {
        &mut self.hdr
    }

    /// Length of the frame (Ethernet header included, virtio-net header
    /// excluded).
    #[allow(clippy::len_without_is_empty)] // frames are never empty
    pub fn len(&self) -> usize {
        self.len
    }

    /// A private copy of the first `min(len, HEAD_LEN)` bytes: the guest
    /// cannot change them under a forwarding decision.
    pub fn head(&self) -> &[u8] {
        &self.head[..self.head_len]
    }

    /// The private head, mutable: whatever is changed here is what copies of
    /// the frame see (e.g. a MAC rewrite or VLAN edit costs no extra copy).
    pub fn head_mut(&mut self) -> &mut [u8] {
        &mut self.head[..self.head_len]
    }

    /// Copies frame bytes from `offset` into `dst`; returns the number
    /// copied (`min(dst.len(), len - offset)`).
    pub fn copy_to(&self, offset: usize, dst: &mut [u8]) -> usize {
        let mut done = 0;
        if offset < self.head_len {
            let n = (self.head_len - offset).min(dst.len());
            dst[..n].copy_from_slice(&self.head[offset..offset + n]);
            done = n;
        }
        let pos = offset + done;
        if pos < self.len && done < dst.len() {
            let want = (self.len - pos).min(dst.len() - done);
            done += copy_from_segs(self.segs, self.data_off + pos, &mut dst[done..done + want]);
        }
        done
    }
}

/// Where a [`FrameSource`] writes its bytes: the guest RX buffers reserved
/// for one frame, or a host buffer (an uplink's transmit slot).
#[derive(Debug)]
pub struct FrameWriter<'w, 'a> {
    sink: Sink<'w, 'a>,
}

#[derive(Debug)]
enum Sink<'w, 'a> {
    Guest(&'w mut SegWriter<'a>),
    Host { buf: &'w mut [u8], pos: usize },
}

impl<'w> FrameWriter<'w, '_> {
    /// A writer filling `buf` from its start.
    pub fn host(buf: &'w mut [u8]) -> Self {
        Self {
            sink: Sink::Host { buf, pos: 0 },
        }
    }

    /// Appends bytes; returns how many fit.
    pub fn write(&mut self, bytes: &[u8]) -> usize {
        match &mut self.sink {
            Sink::Guest(w) => w.write(bytes),
            Sink::Host { buf, pos } => {
                let n = bytes.len().min(buf.len() - *pos);
                buf[*pos..*pos + n].copy_from_slice(&bytes[..n]);
                *pos += n;
                n
            }
        }
    }

    /// Appends `len` bytes of guest buffers `segs` from `offset`.
    fn write_from_segs(&mut self, segs: &[Seg], offset: usize, len: usize) -> usize {
        match &mut self.sink {
            Sink::Guest(w) => w.write_from_segs(segs, offset, len),
            Sink::Host { buf, pos } => {
                let n = len.min(buf.len() - *pos);
                let done = copy_from_segs(segs, offset, &mut buf[*pos..*pos + n]);
                *pos += done;
                done
            }
        }
    }

    /// Bytes written so far through this writer (host sinks only count
    /// their own; guest sinks include the virtio-net header).
    pub fn written(&self) -> usize {
        match &self.sink {
            Sink::Guest(w) => w.written(),
            Sink::Host { pos, .. } => *pos,
        }
    }
}

/// Copies a frame into a host buffer (one copy); returns the bytes written,
/// `min(src.frame_len(), dst.len())`.
pub fn copy_frame<S: FrameSource + ?Sized>(src: &S, dst: &mut [u8]) -> usize {
    let mut w = FrameWriter::host(dst);
    src.copy_into(&mut w);
    w.written()
}

/// Anything that can be copied into guest RX buffers in one pass.
pub trait FrameSource {
    /// Length of the frame (Ethernet header included).
    fn frame_len(&self) -> usize;
    /// Writes exactly `frame_len()` bytes, in order.
    fn copy_into(&self, w: &mut FrameWriter<'_, '_>);
}

impl FrameSource for [u8] {
    fn frame_len(&self) -> usize {
        self.len()
    }
    fn copy_into(&self, w: &mut FrameWriter<'_, '_>) {
        w.write(self);
    }
}

impl<const N: usize> FrameSource for [u8; N] {
    fn frame_len(&self) -> usize {
        N
    }
    fn copy_into(&self, w: &mut FrameWriter<'_, '_>) {
        w.write(self);
    }
}

impl FrameSource for Vec<u8> {
    fn frame_len(&self) -> usize {
        self.len()
    }
    fn copy_into(&self, w: &mut FrameWriter<'_, '_>) {
        w.write(self);
    }
}

impl FrameSource for TxFrame<'_> {
    fn frame_len(&self) -> usize {
        self.len
    }
    fn copy_into(&self, w: &mut FrameWriter<'_, '_>) {
        w.write(&self.head[..self.head_len]);
        if self.len > self.head_len {
            w.write_from_segs(
                self.segs,
                self.data_off + self.head_len,
                self.len - self.head_len,
            );
        }
    }
}

impl TxQueue {
    /// The queue pair index.
    pub fn index(&self) -> u16 {
        self.index
    }

    /// Dequeues up to `max` frames the guest transmitted, calling `f` for
    /// each; returns how many frames were dequeued (including dropped
    /// ones). Used entries are published and the guest is notified (if it
    /// asked) once, at the end of the burst.
    ///
    /// Malformed chains are returned to the guest unprocessed and counted.
    ///
    /// Hot path: no allocation, no lock, no syscall except at most one
    /// eventfd write per burst.
    pub fn recv_burst<F>(&mut self, max: usize, mut f: F) -> usize
    where
        F: FnMut(&mut TxFrame<'_>),
    {
        let v = &mut self.vring;
        v.sync();
        let Some(ring) = &mut v.ring else {
            return 0;
        };
        let Some(cfg) = &v.cfg else {
            return 0;
        };
        let hdr_len = cfg.features.hdr_len();
        let max_frame = cfg.max_frame;
        let mut n = 0;
        while n < max {
            v.segs.clear();
            let (used, total) = match ring.next_chain(false, &mut v.segs) {
                Popped::Empty => break,
                Popped::Chain(used, total) => (used, total as usize),
                Popped::Bad(used, reason) => {
                    n += 1;
                    v.counters.drop(reason);
                    if let Some(u) = used {
                        ring.push_used(u, 0, false);
                    }
                    continue;
                }
            };
            n += 1;
            if total <= hdr_len {
                v.counters.drop(DropReason::TooShort);
            } else if total - hdr_len > max_frame {
                v.counters.drop(DropReason::TooLong);
            } else {
                let segs = v.segs.as_slice();
                let len = total - hdr_len;
                let mut hdr = read_hdr(segs, hdr_len);
                // Drivers must not set DATA_VALID (or RSC_INFO) on TX, and
                // `num_buffers` means nothing there: a guest cannot make
                // another guest skip checksum validation.
                hdr.flags &= net_hdr::F_NEEDS_CSUM;
                hdr.num_buffers = 0;
                let mut frame = TxFrame {
                    hdr,
                    len,
                    head: [0; HEAD_LEN],
                    head_len: len.min(HEAD_LEN),
                    segs,
                    data_off: hdr_len,
                };
                copy_from_segs(segs, hdr_len, &mut frame.head[..frame.head_len]);
                f(&mut frame);
                v.counters.packets += 1;
                v.counters.bytes += len as u64;
            }
            ring.push_used(used, 0, false);
        }
        v.finish_burst();
        n
    }

    /// Frames waiting in the ring (reads the driver's index).
    pub fn pending(&mut self) -> usize {
        self.vring.sync();
        self.vring
            .ring
            .as_mut()
            .map_or(0, |r| r.count_avail(usize::from(u16::MAX)))
    }

    /// Whether the ring is running (the frontend started and enabled it).
    pub fn is_running(&mut self) -> bool {
        self.vring.sync();
        self.vring.ring.is_some()
    }

    /// Asks the guest to kick when it transmits; returns true if frames
    /// arrived meanwhile (then do not sleep).
    pub fn enable_notifications(&mut self) -> bool {
        self.vring.enable_notifications()
    }

    /// Tells the guest not to kick (while polling).
    pub fn disable_notifications(&mut self) {
        self.vring.disable_notifications()
    }

    /// This queue's counters.
    pub fn counters(&self) -> QueueCounters {
        self.vring.shared.stats.snapshot()
    }
}

impl RxQueue {
    /// The queue pair index.
    pub fn index(&self) -> u16 {
        self.index
    }

    /// Starts a burst of frames into the guest. Used entries are published
    /// and the guest is notified (if it asked) when the burst is dropped.
    pub fn burst(&mut self) -> RxBurst<'_> {
        self.vring.sync();
        RxBurst { q: self }
    }

    /// RX buffers the guest has posted and we have not used, counting at
    /// most `max` (for packed rings an upper bound: a buffer may take
    /// several descriptors).
    pub fn available(&mut self, max: usize) -> usize {
        self.vring.sync();
        self.vring.ring.as_mut().map_or(0, |r| r.count_avail(max))
    }

    /// Whether the ring is running (the frontend started and enabled it).
    pub fn is_running(&mut self) -> bool {
        self.vring.sync();
        self.vring.ring.is_some()
    }

    /// Asks the guest to kick when it posts buffers; returns true if
    /// buffers arrived meanwhile.
    pub fn enable_notifications(&mut self) -> bool {
        self.vring.enable_notifications()
    }

    /// Tells the guest not to kick.
    pub fn disable_notifications(&mut self) {
        self.vring.disable_notifications()
    }

    /// This queue's counters.
    pub fn counters(&self) -> QueueCounters {
        self.vring.shared.stats.snapshot()
    }
}

/// A burst of frames into a guest's RX queue; see [`RxQueue::burst`].
#[derive(Debug)]
pub struct RxBurst<'q> {
    q: &'q mut RxQueue,
}

impl RxBurst<'_> {
    /// Copies one frame with its offload metadata into the guest's RX
    /// buffers (several, with mergeable RX buffers, when it does not fit in
    /// one). `hdr.num_buffers` is ignored: the device sets it.
    ///
    /// # Errors
    /// The frame is dropped and counted, and the reason returned, when the
    /// ring is not running or has too few buffers (`NoBuffers`), the frame
    /// does not fit (`TooLong`), the guest did not ack the offload the header
    /// asks for (`OffloadUnsupported`), or the guest's buffers are malformed.
    ///
    /// Hot path: no allocation, no lock, no syscall.
    pub fn push<S: FrameSource + ?Sized>(
        &mut self,
        hdr: &VirtioNetHdr,
        frame: &S,
    ) -> Result<(), DropReason> {
        let res = self.push_inner(hdr, frame);
        match res {
            Ok(bytes) => {
                self.q.vring.counters.packets += 1;
                self.q.vring.counters.bytes += bytes as u64;
                Ok(())
            }
            Err(r) => {
                self.q.vring.counters.drop(r);
                Err(r)
            }
        }
    }

    fn push_inner<S: FrameSource + ?Sized>(
        &mut self,
        hdr: &VirtioNetHdr,
        frame: &S,
    ) -> Result<usize, DropReason> {
        let q = &mut *self.q;
        let v = &mut q.vring;
        let (Some(ring), Some(cfg)) = (&mut v.ring, &v.cfg) else {
            return Err(DropReason::NoBuffers);
        };
        let features = cfg.features;
        check_offloads(hdr, features)?;
        let flen = frame.frame_len();
        if flen == 0 {
            return Err(DropReason::TooShort);
        }
        if flen > MAX_FRAME_LEN {
            return Err(DropReason::TooLong);
        }
        let hdr_len = features.hdr_len();
        let need = hdr_len + flen;
        let mrg = features.mrg_rxbuf();

        // Reserve chains until the frame fits.
        v.segs.clear();
        let mark = ring.mark();
        let mut nchains = 0usize;
        let mut cap = 0usize;
        while cap < need {
            if nchains == q.chains.len() {
                ring.rollback(mark);
                return Err(DropReason::TooLong);
            }
            let segs_before = v.segs.len();
            match ring.next_chain(true, &mut v.segs) {
                Popped::Empty => {
                    ring.rollback(mark);
                    return Err(DropReason::NoBuffers);
                }
                // Out of room in our own segment list, not a bad chain:
                // leave every buffer to the guest.
                Popped::Bad(_, DropReason::TooManySegments) if segs_before > 0 => {
                    ring.rollback(mark);
                    return Err(DropReason::TooLong);
                }
                Popped::Chain(used, len) => {
                    q.chains[nchains] = (used, len);
                    nchains += 1;
                    cap += len as usize;
                }
                Popped::Bad(used, reason) => {
                    // The bad buffer is consumed; the good ones reserved for
                    // this frame go back unused, and the frame is dropped.
                    for &(u, _) in &q.chains[..nchains] {
                        ring.push_used(u, 0, true);
                    }
                    if let Some(u) = used {
                        ring.push_used(u, 0, true);
                    }
                    return Err(reason);
                }
            }
            if !mrg {
                break;
            }
        }
        if cap < need {
            // Without mergeable buffers the frame must fit one buffer; leave
            // it for a smaller frame.
            ring.rollback(mark);
            return Err(DropReason::TooLong);
        }

        let mut h = *hdr;
        h.num_buffers = nchains as u16;
        if features.acked & bits::GUEST_CSUM == 0 {
            h.flags &= !net_hdr::F_DATA_VALID;
        }
        let mut w = SegWriter::new(v.segs.as_slice());
        w.write_hdr(&h, hdr_len);
        frame.copy_into(&mut FrameWriter {
            sink: Sink::Guest(&mut w),
        });
        let mut remaining = w.written();
        let bytes = remaining.saturating_sub(hdr_len);
        for &(u, len) in &q.chains[..nchains] {
            let l = remaining.min(len as usize);
            ring.push_used(u, l as u32, true);
            remaining -= l;
        }
        Ok(bytes)
    }
}

/// Whether the receiving guest acked what the header asks of it.
#[inline]
fn check_offloads(hdr: &VirtioNetHdr, f: Negotiated) -> Result<(), DropReason> {
    if hdr.needs_csum() && !f.has(bits::GUEST_CSUM) {
        return Err(DropReason::OffloadUnsupported);
    }
    if hdr.is_gso() {
        let need = match hdr.gso_type & !net_hdr::GSO_ECN {
            net_hdr::GSO_TCPV4 => bits::GUEST_TSO4,
            net_hdr::GSO_TCPV6 => bits::GUEST_TSO6,
            net_hdr::GSO_UDP => bits::GUEST_UFO,
            _ => return Err(DropReason::OffloadUnsupported),
        };
        if !f.has(need) || (hdr.gso_type & net_hdr::GSO_ECN != 0 && !f.has(bits::GUEST_ECN)) {
            return Err(DropReason::OffloadUnsupported);
        }
    }
    Ok(())
}

impl Drop for RxBurst<'_> {
    fn drop(&mut self) {
        self.q.vring.finish_burst();
    }
}

/// Sleeps a data-plane thread until one of its queues has work or a ring
/// configuration changes.
///
/// Register every queue the thread polls; before sleeping call each queue's
/// `enable_notifications()` (and do not sleep if one returns true), after
/// waking call `disable_notifications()` if you go back to polling.
#[derive(Debug)]
pub struct Poller {
    epoll: Arc<Epoll>,
    events: Vec<EpollEvent>,
}

impl Poller {
    /// A poller with no queues.
    ///
    /// # Errors
    /// `epoll_create1` failed.
    pub fn new() -> std::io::Result<Self> {
        Ok(Self {
            epoll: Arc::new(Epoll::new()?),
            events: vec![EpollEvent::default(); 64],
        })
    }

    /// Watches a queue pair's kick and configuration eventfds.
    ///
    /// # Errors
    /// `epoll_ctl` failed.
    pub fn add(&mut self, qp: &mut QueuePair) -> std::io::Result<()> {
        qp.rx.vring.attach_poller(Arc::clone(&self.epoll))?;
        qp.tx.vring.attach_poller(Arc::clone(&self.epoll))
    }

    /// Watches another file descriptor (e.g. a shutdown eventfd or an uplink
    /// socket) for readability; `token` is returned by [`Poller::wait`].
    ///
    /// # Errors
    /// `epoll_ctl` failed.
    pub fn add_fd(&mut self, fd: i32, token: u64) -> std::io::Result<()> {
        self.epoll.ctl(
            ControlOperation::Add,
            fd,
            EpollEvent::new(EventSet::IN, token),
        )
    }

    /// Waits for an event, at most `timeout` (`None`: forever). Returns the
    /// number of events.
    ///
    /// # Errors
    /// `epoll_wait` failed (EINTR is reported as 0 events).
    pub fn wait(&mut self, timeout: Option<Duration>) -> std::io::Result<usize> {
        let ms = timeout.map_or(-1, |d| i32::try_from(d.as_millis()).unwrap_or(i32::MAX));
        match self.epoll.wait(ms, &mut self.events) {
            Ok(n) => Ok(n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Ok(0),
            Err(e) => Err(e),
        }
    }
}
