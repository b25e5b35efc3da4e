// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The hand-off of ring configurations from the control plane to the data
//! plane.
//!
//! Each vring has a `VringShared` slot. The control plane (the vhost-user
//! request handler) publishes a new `RingConfig` — or `None` to stop the
//! ring — bumps a generation counter, wakes the data plane through an
//! eventfd, and waits until the data plane acknowledges. The data plane
//! checks the generation with one atomic load at each burst boundary
//! (`Vring::sync`) and applies changes there, so no lock is taken per
//! packet and the control plane never frees memory, closes eventfds or
//! reads ring indices while a burst is running. Memory snapshots and
//! eventfds are reference-counted: whatever the data plane still holds stays
//! valid.
//!
//! Every [`RxQueue`](super::RxQueue) and [`TxQueue`](super::TxQueue) handed
//! out must be polled (or dropped): a queue that is never polled makes the
//! control plane wait for its acknowledgement (up to [`ACK_TIMEOUT`]) on
//! every ring change.

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use crate::device::Negotiated;
use crate::poll::Watch;
use crate::ring::log::LogTarget;
use crate::ring::{GuestMemory, Layout, Ring, SegVec};
use crate::stats::{BurstCounters, DropReason, QueueStats};

/// How long the control plane waits for a data-plane acknowledgement.
pub const ACK_TIMEOUT: Duration = Duration::from_secs(2);

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
    /// The dirty-page log, while the frontend has logging on
    /// (`VHOST_F_LOG_ALL` acked and a log shared with `SET_LOG_BASE`).
    pub log: Option<LogTarget>,
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

/// The data-plane side of one vring, shared by [`RxQueue`](super::RxQueue)
/// and [`TxQueue`](super::TxQueue).
#[derive(Debug)]
pub(super) struct Vring {
    pub(super) shared: Arc<VringShared>,
    applied_gen: u64,
    pub(super) cfg: Option<Arc<RingConfig>>,
    pub(super) ring: Option<Ring>,
    pub(super) segs: SegVec,
    poller: Option<Watch>,
    registered_kick: Option<i32>,
    pub(super) counters: BurstCounters,
    reported_broken: bool,
    /// Used entries were published while the ring had no call eventfd
    /// (a frontend sets it after the ring starts: `SET_VRING_KICK` comes
    /// first): the guest is signalled once when one arrives, or it could
    /// wait forever for buffers it already has.
    missed_signal: bool,
}

impl Vring {
    pub(super) fn new(shared: Arc<VringShared>, max_segs: usize) -> Self {
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
            missed_signal: false,
        }
    }

    /// Picks up a configuration change, if any. One atomic load otherwise.
    #[inline]
    pub(super) fn sync(&mut self) {
        if self.shared.gen.load(Ordering::Acquire) != self.applied_gen {
            self.apply();
        }
    }

    /// Buffers the driver has made available and the device has not taken,
    /// counting at most `max` (ring changes picked up first; 0 while the ring
    /// is not running). A ring the count finds broken (a split ring's
    /// `avail.idx` more than a ring ahead) is counted here, once: a caller
    /// that sees 0 and starts no burst would otherwise never report it.
    pub(super) fn count_avail(&mut self, max: usize) -> usize {
        self.sync();
        let Some(r) = self.ring.as_mut() else {
            return 0;
        };
        let n = r.count_avail(max);
        if n == 0 && self.note_broken() {
            // Outside a burst's `finish_burst`: add the counts now.
            self.shared.stats.add(&self.counters);
            self.counters = BurstCounters::default();
        }
        n
    }

    /// Counts the ring's breakage in the burst's counters, once per ring.
    /// Returns whether it counted it now.
    #[inline]
    fn note_broken(&mut self) -> bool {
        let newly = !self.reported_broken && self.ring.as_ref().is_some_and(|r| r.is_broken());
        if newly {
            self.reported_broken = true;
            self.counters.drop(DropReason::RingBroken);
        }
        newly
    }

    #[cold]
    fn apply(&mut self) {
        let shared = Arc::clone(&self.shared);
        let mut slot = shared.lock();
        // Drain the wake-up (edge-triggered in the poller; this keeps the
        // counter small). EAGAIN just means nobody woke us.
        let _ = shared.wake.read();
        let desired = slot.desired.clone();
        // Whatever this burst boundary leaves unpublished (a sink that
        // picked up the change between two pushes) is published first, with
        // the old configuration's log and call: a stopped ring reports a
        // base with every used entry visible, and a remapped one starts
        // without pending state.
        self.publish_pending();
        match &desired {
            None => {
                if let Some(r) = self.ring.take() {
                    slot.stopped_avail = Some(r.base());
                }
            }
            Some(cfg) => {
                let same_epoch = self.cfg.as_ref().is_some_and(|c| c.epoch == cfg.epoch);
                let ring = match (&self.ring, same_epoch) {
                    (Some(old), true) => old.remap(Arc::clone(&cfg.mem), cfg.layout, cfg.features),
                    _ => Ring::new(Arc::clone(&cfg.mem), cfg.layout, cfg.base, cfg.features),
                };
                self.ring = match ring {
                    Ok(mut r) => {
                        r.set_log(cfg.log.as_ref(), cfg.layout);
                        Some(r)
                    }
                    Err(e) => {
                        tracing::warn!("vring: cannot start ring: {e}");
                        None
                    }
                };
                self.reported_broken = false;
            }
        }
        self.cfg = desired;
        if self.missed_signal && self.ring.is_some() {
            if let Some(call) = self.cfg.as_ref().and_then(|c| c.call.as_ref()) {
                // Spurious at worst: the guest finds nothing new and
                // carries on.
                let _ = (&**call).write(&1u64.to_ne_bytes());
                self.counters.notifications += 1;
                self.missed_signal = false;
            }
        }
        self.update_kick_registration();
        self.applied_gen = self.shared.gen.load(Ordering::Acquire);
        slot.applied = self.applied_gen;
        drop(slot);
        shared.acked.notify_all();
    }

    fn update_kick_registration(&mut self) {
        let Some(watch) = &self.poller else {
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
            watch.remove(old);
        }
        if let Some(fd) = want {
            match watch.add(fd) {
                Ok(()) => self.registered_kick = Some(fd),
                Err(e) => tracing::warn!("vring: cannot watch kick eventfd: {e}"),
            }
        }
    }

    /// Publishes used entries, signals the guest if it wants it, and adds
    /// the burst's counts. Once per burst.
    #[inline]
    pub(super) fn finish_burst(&mut self) {
        self.publish_pending();
        if self.counters.packets != 0 || self.counters.any_drop || self.counters.notifications != 0
        {
            self.shared.stats.add(&self.counters);
            self.counters = BurstCounters::default();
        }
    }

    /// Publishes the used entries written so far and signals the guest if
    /// it wants it.
    #[inline]
    fn publish_pending(&mut self) {
        self.note_broken();
        if let Some(ring) = &mut self.ring {
            if ring.publish_used() {
                // Consulted after every publication, with or without a call
                // eventfd: each check moves the position the next one
                // counts from (event index suppression).
                let wanted = ring.needs_notification();
                match self.cfg.as_ref().and_then(|c| c.call.as_ref()) {
                    Some(call) => {
                        if wanted {
                            // EAGAIN (counter saturated) still leaves an
                            // interrupt pending for the guest.
                            let _ = (&**call).write(&1u64.to_ne_bytes());
                            self.counters.notifications += 1;
                        }
                    }
                    // Not counted: nobody got it. Signalled once the
                    // eventfd arrives, whatever the driver asked.
                    None => self.missed_signal = true,
                }
            }
        }
    }

    pub(super) fn enable_notifications(&mut self) -> bool {
        self.sync();
        match &mut self.ring {
            Some(r) => r.enable_notification(),
            None => false,
        }
    }

    pub(super) fn disable_notifications(&mut self) {
        self.sync();
        if let Some(r) = &mut self.ring {
            r.disable_notification();
        }
    }

    pub(super) fn attach_poller(&mut self, watch: &Watch) -> std::io::Result<()> {
        watch.add(self.shared.wake_fd())?;
        self.poller = Some(watch.clone());
        self.update_kick_registration();
        Ok(())
    }
}

impl Drop for Vring {
    fn drop(&mut self) {
        self.publish_pending();
        let mut slot = self.shared.lock();
        slot.attached = false;
        if let Some(r) = self.ring.take() {
            slot.stopped_avail = Some(r.base());
        }
        drop(slot);
        self.shared.acked.notify_all();
    }
}

#[cfg(all(test, feature = "test-utils"))]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::net_hdr::VirtioNetHdr;
    use crate::sink::Sink;
    use crate::test_utils::{LoopbackGuest, LoopbackOpts};

    /// A ring stopped between two pushes of a burst (a switch's RX sink
    /// picks up ring changes at each push) publishes what it wrote before it
    /// reports its base: the guest sees every used entry, the base is exact.
    #[test]
    fn a_ring_stopped_mid_burst_publishes_before_reporting_its_base() {
        for packed in [false, true] {
            let mut lg = LoopbackGuest::new(LoopbackOpts {
                packed,
                ..LoopbackOpts::default()
            });
            assert_eq!(lg.post_rx(4), 4);
            let hdr = VirtioNetHdr::default();
            let frame: &[u8] = &[7u8; 60];
            Sink::push(&mut lg.qp.rx, &hdr, &frame).expect("room");
            let shared = Arc::clone(&lg.qp.rx.vring.shared);
            let stop = std::thread::spawn(move || shared.publish(None));
            while lg.qp.rx.is_running() {
                std::thread::sleep(Duration::from_millis(1));
            }
            let base = stop.join().unwrap();
            let want = if packed {
                1 | 1 << 15 | 1 << 16 | 1 << 31
            } else {
                1
            };
            assert_eq!(base, Some(want), "packed={packed}");
            let mut got = Vec::new();
            assert_eq!(lg.reap_rx_with(&mut |f| got.push(f.to_vec())), 1);
            assert_eq!(got[0][lg.hdr_len()..], [7u8; 60]);
        }
    }
}
