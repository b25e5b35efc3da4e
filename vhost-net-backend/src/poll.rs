// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! How a data-plane thread waits for work: [`Poller`] (an epoll instance
//! over the queues' kick and wake eventfds and the caller's own fds) and
//! [`PollLoop`], the busy / adaptive / interrupt loop around it.
//!
//! A data-plane thread runs rounds: one burst on every queue it serves, then
//! [`PollLoop::round`] with the number of frames moved. The loop decides
//! whether to spin, or to ask for guest kicks and sleep:
//!
//! * [`PollMode::Busy`] spins and keeps guest kicks disabled (a ring the
//!   frontend restarts comes up with kicks enabled);
//! * [`PollMode::Adaptive`] spins while there is traffic and, after an idle
//!   period without any, enables kicks, re-checks for work that raced in,
//!   sleeps on the [`Poller`], and disables kicks again after waking;
//! * [`PollMode::Interrupt`] sleeps whenever a round found no work, and
//!   leaves kicks enabled.
//!
//! While frames wait for buffers at their destination (a guest that posts
//! no RX buffers), a readable uplink fd would keep epoll from sleeping: the
//! loop naps instead, in short steps that grow up to [`NAP_MAX`]. Every
//! sleep is bounded by a maximum ([`MAX_SLEEP`] by default) so that a
//! thread notices a stop flag in time.
//!
//! ```no_run
//! use std::time::Duration;
//! use vhost_net_backend::poll::{PollLoop, PollMode, Poller};
//! use vhost_net_backend::{Port, PortConfig};
//!
//! let (_port, mut qps) = Port::new(PortConfig::new("vm0", "/tmp/vm0.sock"))?;
//! let mut poller = Poller::new()?;
//! for qp in &mut qps {
//!     poller.add(qp)?;
//! }
//! let mut poll = PollLoop::new(PollMode::Adaptive, Duration::from_micros(200));
//! loop {
//!     let mut moved = 0;
//!     for qp in &mut qps {
//!         let mut rx = qp.rx.burst();
//!         moved += qp.tx.recv_burst(32, |frame| {
//!             let hdr = *frame.hdr();
//!             let _ = rx.push(&hdr, frame);
//!         });
//!     }
//!     poll.round(moved, false, qps.as_mut_slice(), &mut poller)?;
//! #   break;
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::cell::Cell;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};

/// Longest sleep of a [`PollLoop`] by default: bounds how long a thread
/// takes to notice a stop flag (or anything else it checks between rounds).
pub const MAX_SLEEP: Duration = Duration::from_millis(100);

/// First nap while frames wait for destination buffers.
pub const NAP_MIN: Duration = Duration::from_micros(20);

/// Longest nap while frames wait for destination buffers.
pub const NAP_MAX: Duration = Duration::from_millis(1);

/// Epoll data of the queues' own eventfds (kick and wake): bit 63 set, the
/// fd in the low bits. The caller's fds carry [`CALLER_EVENT`] instead, so
/// the two spaces never collide, whatever tokens the caller chooses.
const QUEUE_EVENT: u64 = 1 << 63;

/// Epoll data of the caller's fds: bit 62 set, the fd in the low bits; the
/// caller's [`Token`] is looked up by fd.
const CALLER_EVENT: u64 = 1 << 62;

/// Events fetched per [`Poller::wait`].
const MAX_EVENTS: usize = 64;

/// The epoll data a queue registers its kick and wake eventfds with.
fn queue_event(fd: RawFd) -> u64 {
    QUEUE_EVENT | u64::from(fd as u32)
}

/// A queue's hold on a [`Poller`]'s epoll instance: what a queue keeps to
/// register its own kick and wake eventfds, and to follow them across ring
/// changes, in the poller's queue-event space (never a caller's
/// [`Token`]).
#[derive(Debug, Clone)]
pub struct Watch {
    epoll: Arc<Epoll>,
}

impl Watch {
    /// Watches one of the queue's eventfds (edge triggered).
    ///
    /// # Errors
    /// `epoll_ctl` failed.
    pub(crate) fn add(&self, fd: RawFd) -> std::io::Result<()> {
        let ev = EpollEvent::new(EventSet::IN | EventSet::EDGE_TRIGGERED, queue_event(fd));
        self.epoll.ctl(ControlOperation::Add, fd, ev)
    }

    /// Stops watching one of the queue's eventfds. An fd already closed or
    /// not watched is not an error worth reporting (EBADF/ENOENT), so none
    /// is returned.
    pub(crate) fn remove(&self, fd: RawFd) {
        let _ = self
            .epoll
            .ctl(ControlOperation::Delete, fd, EpollEvent::default());
    }
}

/// Something a [`Poller`] can watch: a queue, a queue pair, that registers
/// its own eventfds through the [`Watch`] it is given and keeps it to
/// follow them across ring changes.
pub trait Polled {
    /// Registers with `watch`'s poller.
    ///
    /// # Errors
    /// `epoll_ctl` failed.
    fn attach(&mut self, watch: &Watch) -> std::io::Result<()>;
}

/// What the caller of [`Poller::add_fd`] calls an fd: any `u64`, reported
/// back by [`Poller::fired`] when that fd became readable.
///
/// Tokens are the caller's alone: the queues' own eventfds are registered in
/// a space of their own, so no token collides with them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Token(pub u64);

impl From<u64> for Token {
    fn from(t: u64) -> Self {
        Token(t)
    }
}

/// Sleeps a data-plane thread until one of its queues has work, a ring
/// configuration changes, or one of the caller's fds becomes readable.
///
/// Register every queue the thread polls ([`Poller::add`]); before sleeping
/// call each queue's `enable_notifications()` (and do not sleep if one
/// returns true), after waking call `disable_notifications()` if you go back
/// to polling. [`PollLoop`] does exactly that.
#[derive(Debug)]
pub struct Poller {
    watch: Watch,
    events: Vec<EpollEvent>,
    /// Events the last [`Poller::wait`] returned.
    ready: usize,
    /// The caller's fds and their tokens.
    watched: Vec<(RawFd, Token)>,
}

impl Poller {
    /// A poller with no queues.
    ///
    /// # Errors
    /// `epoll_create1` failed.
    pub fn new() -> std::io::Result<Self> {
        Ok(Self {
            watch: Watch {
                epoll: Arc::new(Epoll::new()?),
            },
            events: vec![EpollEvent::default(); MAX_EVENTS],
            ready: 0,
            watched: Vec::new(),
        })
    }

    /// Watches a queue pair's kick and configuration eventfds (edge
    /// triggered; the queues follow their fds across ring changes).
    ///
    /// # Errors
    /// `epoll_ctl` failed.
    pub fn add<Q: Polled + ?Sized>(&mut self, qp: &mut Q) -> std::io::Result<()> {
        qp.attach(&self.watch)
    }

    /// Watches one receive queue's eventfds: for a queue pair whose halves
    /// live apart (a switch polls a guest's TX queue on one thread while
    /// every thread may fill its RX queue), the thread that answers for the
    /// pair's ring changes watches both.
    ///
    /// # Errors
    /// `epoll_ctl` failed.
    pub fn add_rx<Q: Polled + ?Sized>(&mut self, q: &mut Q) -> std::io::Result<()> {
        q.attach(&self.watch)
    }

    /// Watches one transmit queue's eventfds (see [`Poller::add_rx`]).
    ///
    /// # Errors
    /// `epoll_ctl` failed.
    pub fn add_tx<Q: Polled + ?Sized>(&mut self, q: &mut Q) -> std::io::Result<()> {
        q.attach(&self.watch)
    }

    /// Watches another file descriptor (e.g. a shutdown eventfd or an uplink
    /// socket) for readability (level triggered): after a [`Poller::wait`]
    /// that saw it readable, [`Poller::fired`] yields `token`.
    ///
    /// # Errors
    /// `epoll_ctl` failed (`EEXIST` when `fd` is already watched).
    pub fn add_fd(&mut self, fd: RawFd, token: impl Into<Token>) -> std::io::Result<()> {
        self.watch.epoll.ctl(
            ControlOperation::Add,
            fd,
            EpollEvent::new(EventSet::IN, CALLER_EVENT | u64::from(fd as u32)),
        )?;
        self.watched.push((fd, token.into()));
        Ok(())
    }

    /// Stops watching a file descriptor added with [`Poller::add_fd`]; its
    /// token is no longer reported, even for the last wait.
    ///
    /// # Errors
    /// `epoll_ctl` failed (`ENOENT` when `fd` is not watched).
    pub fn remove_fd(&mut self, fd: RawFd) -> std::io::Result<()> {
        self.watched.retain(|&(f, _)| f != fd);
        self.watch
            .epoll
            .ctl(ControlOperation::Delete, fd, EpollEvent::default())
    }

    /// Waits for an event, at most `timeout` (`None`: forever). Returns the
    /// number of fds that fired, the queues' and the caller's; the caller's
    /// are then in [`Poller::fired`].
    ///
    /// # Errors
    /// `epoll_wait` failed (EINTR is reported as 0 events).
    pub fn wait(&mut self, timeout: Option<Duration>) -> std::io::Result<usize> {
        self.ready = 0;
        let ms = timeout.map_or(-1, |d| i32::try_from(d.as_millis()).unwrap_or(i32::MAX));
        match self.watch.epoll.wait(ms, &mut self.events) {
            Ok(n) => {
                self.ready = n;
                Ok(n)
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Ok(0),
            Err(e) => Err(e),
        }
    }

    /// The tokens of the caller's fds that the last [`Poller::wait`] found
    /// readable (the queues' own events are not included).
    pub fn fired(&self) -> impl Iterator<Item = Token> + '_ {
        self.events[..self.ready].iter().filter_map(|ev| {
            let data = ev.data();
            if data & CALLER_EVENT == 0 {
                return None;
            }
            let fd = (data & u64::from(u32::MAX)) as u32 as RawFd;
            self.watched
                .iter()
                .find(|&&(f, _)| f == fd)
                .map(|&(_, t)| t)
        })
    }

    /// Whether the last [`Poller::wait`] saw a queue's kick or wake eventfd.
    pub fn queue_fired(&self) -> bool {
        self.events[..self.ready]
            .iter()
            .any(|ev| ev.data() & QUEUE_EVENT != 0)
    }
}

/// How a data-plane thread waits for work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PollMode {
    /// Spin all the time (lowest latency, one full core).
    Busy,
    /// Spin while there is traffic; after an idle period, ask for kicks and
    /// sleep.
    Adaptive,
    /// Sleep whenever there is no work.
    Interrupt,
}

impl PollMode {
    /// Whether a thread in this mode ever sleeps on its [`Poller`].
    ///
    /// Only a thread that sleeps should watch uplink fds: a watched socket
    /// makes the kernel wake its wait queue (a locked, IRQ-saving call) for
    /// every transmitted frame it frees, about 6 % of the kernel's per-frame
    /// work on AF_XDP and AF_PACKET.
    pub fn sleeps(self) -> bool {
        self != PollMode::Busy
    }
}

/// Queues whose notifications (guest kicks) a [`PollLoop`] turns on before
/// it sleeps and off when it polls again.
pub trait Notify {
    /// Asks for notifications; returns true if work arrived meanwhile (then
    /// the thread must not sleep).
    fn enable_notifications(&mut self) -> bool;
    /// Stops notifications (while polling).
    fn disable_notifications(&mut self);
}

impl<T: Notify> Notify for [T] {
    /// Enables every queue's notifications (none skipped: a thread that
    /// sleeps must be woken by any of them).
    fn enable_notifications(&mut self) -> bool {
        let mut pending = false;
        for q in self.iter_mut() {
            pending |= q.enable_notifications();
        }
        pending
    }

    fn disable_notifications(&mut self) {
        for q in self.iter_mut() {
            q.disable_notifications();
        }
    }
}

/// What one [`PollLoop::round`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The round moved frames: poll again at once.
    Worked,
    /// No work, but not idle long enough to sleep (or busy mode): spin.
    Spun,
    /// Idle, but work slipped in while notifications were being enabled:
    /// poll again without sleeping.
    Pending,
    /// Idle while frames wait for destination buffers: napped.
    Napped,
    /// Idle: slept on the poller until an event or the maximum sleep.
    Slept,
}

/// Where a data-plane thread's time goes, in TSC cycles: rounds that moved
/// frames (busy) and rounds that found nothing (idle; sleeps not counted),
/// and the frames moved. Written by its [`PollLoop`], read by anyone (e.g.
/// a metrics endpoint, or a report on exit).
#[derive(Debug, Default)]
pub struct LoopCycles {
    /// Cycles in rounds that moved frames.
    pub busy_cycles: AtomicU64,
    /// Cycles in rounds that moved nothing (polling, not sleeping).
    pub idle_cycles: AtomicU64,
    /// Frames moved.
    pub frames: AtomicU64,
    /// Rounds that moved frames: `frames / busy_rounds` is the average
    /// burst a round carried.
    pub busy_rounds: AtomicU64,
}

impl LoopCycles {
    /// Busy cycles per frame moved, if any frame moved.
    pub fn busy_cycles_per_frame(&self) -> Option<f64> {
        let f = self.frames.load(Ordering::Relaxed);
        (f > 0).then(|| self.busy_cycles.load(Ordering::Relaxed) as f64 / f as f64)
    }

    /// Busy cycles over the cycles spent polling (busy and idle), if any.
    pub fn busy_fraction(&self) -> Option<f64> {
        let b = self.busy_cycles.load(Ordering::Relaxed);
        let t = b + self.idle_cycles.load(Ordering::Relaxed);
        (t > 0).then(|| b as f64 / t as f64)
    }
}

thread_local! {
    /// Whether this thread's [`PollLoop`] found nothing on its last round.
    static SPARE: Cell<bool> = const { Cell::new(false) };
}

/// Whether the last round of this thread's [`PollLoop`] found nothing to
/// do: the burst that follows runs while the thread has cycles to spare
/// (the other side, not this thread, bounds the traffic). False on a
/// thread without a `PollLoop`, and after any round that moved frames.
#[inline]
pub(crate) fn spare_cycles() -> bool {
    SPARE.with(Cell::get)
}

/// The busy / adaptive / interrupt loop of a data-plane thread, driven one
/// round at a time (see the [module documentation](self)). It also counts
/// where the thread's cycles go ([`PollLoop::cycles`]): each round is
/// charged, from the end of the previous one, to busy or idle.
///
/// Hot path: a round that moved frames reads the TSC once (not the clock)
/// and stores (no atomic read-modify-write) three counters.
#[derive(Debug, Clone)]
pub struct PollLoop {
    mode: PollMode,
    idle: Duration,
    max_sleep: Duration,
    last_work: Instant,
    /// Rounds moved frames since `last_work` was read: the clock is read at
    /// the first idle round after work, not at every busy one.
    worked: bool,
    nap: Duration,
    cycles: Arc<LoopCycles>,
    /// The TSC at the end of the previous round.
    mark: u64,
    /// This thread's totals (the atomics are only stored to).
    busy: u64,
    idle_total: u64,
    frames: u64,
    busy_rounds: u64,
}

impl PollLoop {
    /// A loop in `mode`; an adaptive loop sleeps after `idle` without work.
    pub fn new(mode: PollMode, idle: Duration) -> Self {
        Self {
            mode,
            idle,
            max_sleep: MAX_SLEEP,
            last_work: Instant::now(),
            worked: false,
            nap: NAP_MIN,
            cycles: Arc::new(LoopCycles::default()),
            mark: crate::sys::tsc(),
            busy: 0,
            idle_total: 0,
            frames: 0,
            busy_rounds: 0,
        }
    }

    /// The loop's cycle counters (shared: clone the `Arc` to read them from
    /// another thread).
    pub fn cycles(&self) -> &Arc<LoopCycles> {
        &self.cycles
    }

    /// Charges the time since the last round to busy (`moved > 0`) or idle.
    #[inline]
    fn charge(&mut self, moved: usize) -> u64 {
        let now = crate::sys::tsc();
        let d = now.wrapping_sub(self.mark);
        SPARE.with(|s| s.set(moved == 0));
        // Relaxed stores: one writer; readers want totals, not an order.
        if moved > 0 {
            self.busy += d;
            self.frames += moved as u64;
            self.busy_rounds += 1;
            self.cycles.busy_cycles.store(self.busy, Ordering::Relaxed);
            self.cycles.frames.store(self.frames, Ordering::Relaxed);
            self.cycles
                .busy_rounds
                .store(self.busy_rounds, Ordering::Relaxed);
        } else {
            self.idle_total += d;
            self.cycles
                .idle_cycles
                .store(self.idle_total, Ordering::Relaxed);
        }
        now
    }

    /// Sets the longest sleep (default [`MAX_SLEEP`]).
    #[must_use]
    pub fn with_max_sleep(mut self, max_sleep: Duration) -> Self {
        self.max_sleep = max_sleep;
        self
    }

    /// The loop's mode.
    pub fn mode(&self) -> PollMode {
        self.mode
    }

    /// Ends a round that moved `moved` frames over `queues` (every queue
    /// registered with `poller`). `waiting`: frames wait for buffers at their
    /// destination (the loop naps instead of sleeping on the poller, whose
    /// uplink fds may stay readable meanwhile).
    ///
    /// # Errors
    /// `epoll_wait` failed.
    pub fn round<Q: Notify + ?Sized>(
        &mut self,
        moved: usize,
        waiting: bool,
        queues: &mut Q,
        poller: &mut Poller,
    ) -> std::io::Result<Step> {
        self.mark = self.charge(moved);
        if moved > 0 {
            self.worked = true;
            self.nap = NAP_MIN;
            return Ok(Step::Worked);
        }
        if self.worked {
            // The first idle round after work: the idle period starts now.
            self.worked = false;
            self.last_work = Instant::now();
        }
        match self.mode {
            PollMode::Busy => {
                // The guest need not kick a poller (rings restarted by the
                // frontend come up with kicks enabled).
                queues.disable_notifications();
                std::hint::spin_loop();
                return Ok(Step::Spun);
            }
            PollMode::Adaptive if self.last_work.elapsed() < self.idle => return Ok(Step::Spun),
            PollMode::Adaptive | PollMode::Interrupt => {}
        }
        // Idle: ask for kicks and sleep unless something slipped in
        // meanwhile.
        let step = if queues.enable_notifications() {
            self.last_work = Instant::now();
            Step::Pending
        } else if waiting {
            // The uplink's descriptor may stay readable while its frames
            // wait for destination buffers, so epoll would not sleep: nap,
            // a little longer each time, without spinning in between.
            std::thread::sleep(self.nap);
            self.nap = (self.nap * 2).min(NAP_MAX);
            Step::Napped
        } else {
            poller.wait(Some(self.max_sleep))?;
            // Woken by work (or the timeout): poll for a while again.
            self.last_work = Instant::now();
            Step::Slept
        };
        if self.mode == PollMode::Adaptive {
            queues.disable_notifications();
        }
        // The sleep (or nap) is nobody's cycles.
        self.mark = crate::sys::tsc();
        Ok(step)
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

    use super::*;

    /// Queues whose `enable_notifications` reports `pending`.
    #[derive(Debug, Default)]
    struct FakeQueues {
        pending: bool,
        enabled: usize,
        disabled: usize,
    }

    impl Notify for FakeQueues {
        fn enable_notifications(&mut self) -> bool {
            self.enabled += 1;
            self.pending
        }
        fn disable_notifications(&mut self) {
            self.disabled += 1;
        }
    }

    const FOREVER: Duration = Duration::from_secs(3600);
    const SHORT: Duration = Duration::from_millis(1);

    /// Runs rounds of `l` that moved `moved` frames over queues that report
    /// `pending`; returns each round's step and the queues.
    fn rounds(
        l: &mut PollLoop,
        pending: bool,
        moved: usize,
        waiting: bool,
        n: usize,
    ) -> (Vec<Step>, FakeQueues) {
        let mut p = Poller::new().unwrap();
        let mut q = FakeQueues {
            pending,
            ..FakeQueues::default()
        };
        let steps = (0..n)
            .map(|_| l.round(moved, waiting, &mut q, &mut p).unwrap())
            .collect();
        (steps, q)
    }

    #[test]
    fn cycles_are_charged_to_busy_or_idle() {
        let (mut p, _a, _b) = poller_and_two_eventfds();
        let mut q = FakeQueues::default();
        let mut l = PollLoop::new(PollMode::Busy, Duration::ZERO);
        let c = Arc::clone(l.cycles());
        l.round(0, false, &mut q, &mut p).unwrap();
        assert_eq!(c.frames.load(Ordering::Relaxed), 0);
        assert_eq!(c.busy_cycles_per_frame(), None);
        for _ in 0..3 {
            l.round(32, false, &mut q, &mut p).unwrap();
        }
        assert_eq!(c.frames.load(Ordering::Relaxed), 96);
        assert_eq!(c.busy_rounds.load(Ordering::Relaxed), 3);
        assert!(c.busy_cycles.load(Ordering::Relaxed) > 0);
        assert!(c.idle_cycles.load(Ordering::Relaxed) > 0);
        let f = c.busy_fraction().unwrap();
        assert!(f > 0.0 && f < 1.0, "{f}");
    }

    /// A round that found nothing leaves its thread with cycles to spare
    /// for the next burst; a round that moved frames does not; a thread
    /// without a loop has none (on a thread of its own: the harness may run
    /// tests one after another on one thread).
    #[test]
    fn spare_cycles_follow_the_last_round_of_this_thread() {
        std::thread::spawn(|| {
            let (mut p, _a, _b) = poller_and_two_eventfds();
            let mut q = FakeQueues::default();
            let mut l = PollLoop::new(PollMode::Busy, Duration::ZERO);
            assert!(!spare_cycles());
            l.round(0, false, &mut q, &mut p).unwrap();
            assert!(spare_cycles());
            assert!(!std::thread::spawn(spare_cycles).join().unwrap());
            l.round(5, false, &mut q, &mut p).unwrap();
            assert!(!spare_cycles());
            l.round(0, false, &mut q, &mut p).unwrap();
            assert!(spare_cycles());
        })
        .join()
        .unwrap();
    }

    #[test]
    fn the_state_machine() {
        use PollMode::*;
        use Step::*;
        let z = Duration::ZERO;
        // (mode, idle, max sleep, queues pending, moved, rounds) ->
        // (steps, enables, disables). A sleep of FOREVER would hang the
        // test: those cases must not sleep.
        type Case = (PollMode, Duration, Duration, bool, usize, usize);
        #[rustfmt::skip]
        let cases: [(Case, &[Step], usize, usize); 6] = [
            // Work: poll again at once, kicks untouched.
            ((Adaptive, z, FOREVER, false, 3, 1), &[Worked], 0, 0),
            // Not idle yet: spin, kicks untouched.
            ((Adaptive, FOREVER, FOREVER, false, 0, 3), &[Spun, Spun, Spun], 0, 0),
            // Idle: enable kicks, sleep, disable them after waking.
            ((Adaptive, z, SHORT, false, 0, 1), &[Slept], 1, 1),
            // Work slipped in while enabling kicks: no sleep.
            ((Adaptive, z, FOREVER, true, 0, 1), &[Pending], 1, 1),
            // Busy: never sleeps, keeps kicks off.
            ((Busy, z, FOREVER, false, 0, 1), &[Spun], 0, 1),
            // Interrupt: sleeps at once, leaves kicks on.
            ((Interrupt, FOREVER, SHORT, false, 0, 1), &[Slept], 1, 0),
        ];
        for (i, ((mode, idle, max_sleep, pending, moved, n), want, en, dis)) in
            cases.into_iter().enumerate()
        {
            let mut l = PollLoop::new(mode, idle).with_max_sleep(max_sleep);
            let (steps, q) = rounds(&mut l, pending, moved, false, n);
            assert_eq!(steps, want, "case {i}");
            assert_eq!((q.enabled, q.disabled), (en, dis), "case {i}");
        }
        assert!(!Busy.sleeps() && Adaptive.sleeps() && Interrupt.sleeps());
    }

    #[test]
    fn idle_period_restarts_after_a_sleep() {
        let mut l = PollLoop::new(PollMode::Adaptive, Duration::ZERO).with_max_sleep(SHORT);
        assert_eq!(rounds(&mut l, false, 0, false, 1).0, [Step::Slept]);
        l.idle = FOREVER;
        assert_eq!(rounds(&mut l, false, 0, false, 1).0, [Step::Spun]);
    }

    #[test]
    fn naps_grow_while_frames_wait() {
        let mut l = PollLoop::new(PollMode::Adaptive, Duration::ZERO).with_max_sleep(FOREVER);
        let mut naps = Vec::new();
        for _ in 0..8 {
            assert_eq!(rounds(&mut l, false, 0, true, 1).0, [Step::Napped]);
            naps.push(l.nap);
        }
        assert_eq!(naps[0], NAP_MIN * 2);
        assert!(naps.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(*naps.last().unwrap(), NAP_MAX);
        // Work resets the nap.
        rounds(&mut l, false, 1, false, 1);
        assert_eq!(l.nap, NAP_MIN);
    }

    fn poller_and_two_eventfds() -> (Poller, EventFd, EventFd) {
        let efd = || EventFd::new(EFD_NONBLOCK).unwrap();
        (Poller::new().unwrap(), efd(), efd())
    }

    #[test]
    fn tokens_name_the_fds_that_fired() {
        let (mut p, a, b) = poller_and_two_eventfds();
        // Any u64 is a token, including values an fd number could take.
        p.add_fd(a.as_raw_fd(), b.as_raw_fd() as u64).unwrap();
        p.add_fd(b.as_raw_fd(), u64::MAX).unwrap();
        assert_eq!(p.wait(Some(Duration::ZERO)).unwrap(), 0);
        assert_eq!(p.fired().count(), 0);

        b.write(1).unwrap();
        assert_eq!(p.wait(Some(Duration::ZERO)).unwrap(), 1);
        assert_eq!(p.fired().collect::<Vec<_>>(), [Token(u64::MAX)]);
        assert!(!p.queue_fired());

        a.write(1).unwrap();
        assert_eq!(p.wait(Some(Duration::ZERO)).unwrap(), 2);
        let mut fired: Vec<_> = p.fired().collect();
        fired.sort();
        assert_eq!(fired, [Token(b.as_raw_fd() as u64), Token(u64::MAX)]);

        // Removed: no longer reported, not even for the last wait.
        p.remove_fd(b.as_raw_fd()).unwrap();
        assert_eq!(p.fired().collect::<Vec<_>>(), [Token(b.as_raw_fd() as u64)]);
        assert_eq!(p.wait(Some(Duration::ZERO)).unwrap(), 1);
        assert_eq!(p.fired().collect::<Vec<_>>(), [Token(b.as_raw_fd() as u64)]);
        assert!(p.remove_fd(b.as_raw_fd()).is_err());
    }

    #[test]
    fn queue_events_are_not_caller_tokens() {
        let (mut p, kick, stop) = poller_and_two_eventfds();
        // Registered as a queue registers its kick eventfd.
        let ev = EpollEvent::new(EventSet::IN, queue_event(kick.as_raw_fd()));
        p.watch
            .epoll
            .ctl(ControlOperation::Add, kick.as_raw_fd(), ev)
            .unwrap();
        // The caller's token is the kick fd's number: it must not matter.
        p.add_fd(stop.as_raw_fd(), kick.as_raw_fd() as u64).unwrap();
        kick.write(1).unwrap();
        assert_eq!(p.wait(Some(Duration::ZERO)).unwrap(), 1);
        assert!(p.queue_fired());
        assert_eq!(p.fired().count(), 0);
        stop.write(1).unwrap();
        assert_eq!(p.wait(Some(Duration::ZERO)).unwrap(), 2);
        assert_eq!(
            p.fired().collect::<Vec<_>>(),
            [Token(kick.as_raw_fd() as u64)]
        );
    }
}
