// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The AF_XDP uplink: one socket per NIC queue, its own UMEM, its own tiny
//! XDP program, and nothing but `libc` underneath (no libbpf, no libxdp, no
//! C toolchain).
//!
//! # How frames move
//!
//! ```text
//!                      user space (AfXdp)                  kernel / NIC
//!
//!  rx_burst  <-- pop ---- RX ring  <------ produce ---  XDP redirect (XSKMAP[rx queue])
//!     |  lend &umem[addr..addr+len] to the callback              ^
//!     v                                                          | takes a frame
//!  rx free list -- push --> fill ring ---- consume --------------'
//!
//!  tx_push: tx free list -> copy frame into UMEM -> push ---> TX ring ---> transmit
//!                 ^                                                           |
//!                 '------ pop ------- completion ring <------ produce --------'
//! ```
//!
//! * **RX.** The kernel takes empty frames from the fill ring, writes a
//!   received frame into one (in copy mode at offset 256,
//!   `XDP_PACKET_HEADROOM`) and posts its address and length on the RX
//!   ring. [`AfXdp::rx_burst`](crate::io::Uplink::rx_burst) lends each frame
//!   to the caller straight from the UMEM (no copy here: the caller copies
//!   it once into the guest), then returns the whole burst to the fill ring
//!   with one index store, topping the fill ring up from the RX free list.
//! * **TX.** [`tx_push`](crate::io::Uplink::tx_push) takes a frame from the
//!   TX free list, copies the caller's frame into it once
//!   ([`copy_frame`]), and writes a TX descriptor;
//!   [`tx_flush`](crate::io::Uplink::tx_flush) publishes the burst, wakes
//!   the kernel and reaps the completion ring back into the free list.
//!
//! The UMEM is split in two fixed pools (see `umem.rs`): the first half of
//! the frames serve RX, the second half TX, so neither direction can starve
//! the other.
//!
//! # Ordering rules
//!
//! Each ring has one producer and one consumer. Descriptors are written
//! before the producer index is stored with `Release`, and read after the
//! producer index is loaded with `Acquire`; the consumer index is stored
//! with `Release` after the last read and loaded with `Acquire` before the
//! producer reuses a slot. Both sides cache the other side's index and
//! publish their own once per burst. `ring.rs` has the diagram and the
//! details.
//!
//! # Wake-ups (`need_wakeup`)
//!
//! With [`AfXdpConfig::need_wakeup`] the socket is bound with
//! `XDP_USE_NEED_WAKEUP`, and the kernel sets `XDP_RING_NEED_WAKEUP` in a
//! ring's flags when it stopped polling it:
//!
//! * fill ring flag set: `recvfrom(MSG_DONTWAIT)` after refilling;
//! * TX ring flag set: `sendto(MSG_DONTWAIT)` after publishing.
//!
//! **Copy mode transmits inside `sendto`** (`xsk_generic_xmit`), so every
//! flush with frames in flight makes the call, whatever the flag says. The
//! kernel sends at most `XDP_MAX_TX_SKB_BUDGET` frames per call (32 unless
//! raised; we raise it to the TX ring size where the kernel allows, Linux
//! 6.17+) and returns `EAGAIN` when more remain, so a flush repeats the call
//! while the kernel makes progress.
//!
//! # The XDP program and its lifetime
//!
//! [`XdpProgram`] creates an `XSKMAP`, loads a six-instruction program that
//! redirects each frame to the socket registered at its RX queue index
//! (falling back to `XDP_PASS`, so the host stack keeps every other queue),
//! and attaches it with `BPF_LINK_CREATE`, natively or in generic (SKB)
//! mode ([`Attach`]). The link is a file descriptor owned by the
//! [`XdpProgram`]; every [`AfXdp`] on the interface holds an `Arc` of it.
//! **When the last socket is dropped, or the process exits for any reason,
//! the link fd is closed and the kernel detaches the program**: nothing is
//! pinned and nothing is left behind on the interface. A closed socket also
//! leaves the XSKMAP by itself.
//!
//! [`AfXdp::open`] attaches a program for its own queue. To serve several
//! queues of one interface, attach once and open one socket per queue:
//!
//! ```no_run
//! use vhost_net_backend::io::af_xdp::{AfXdp, AfXdpConfig, Attach, XdpProgram};
//!
//! let prog = XdpProgram::attach("eth0", Attach::Auto)?;
//! let queues = (0..4)
//!     .map(|q| AfXdp::open_with_program(&prog, AfXdpConfig { queue_id: q, ..Default::default() }))
//!     .collect::<Result<Vec<_>, _>>()?;
//! # Ok::<(), vhost_net_backend::io::af_xdp::AfXdpError>(())
//! ```
//!
//! # Copy and zero-copy
//!
//! Zero-copy needs driver support (i40e, ice, mlx5, ...) and goes with
//! native attach. With
//! [`ZeroCopy::Try`] a driver without it (veth, most virtual NICs) makes
//! `bind(XDP_ZEROCOPY)` fail with `EOPNOTSUPP`; the socket is then rebuilt
//! and bound in copy mode, with one warning per interface.
//! [`AfXdp::bind_mode`] says which mode was bound, as the kernel reports it
//! (`XDP_OPTIONS`).
//!
//! # Offloads
//!
//! None: AF_XDP carries bare Ethernet frames. [`tx_push`] refuses a frame
//! whose header asks for segmentation or checksum completion
//! ([`DropReason::OffloadUnsupported`]); the caller completes it in software first
//! ([`crate::io::offload`]). Received frames come with an empty header.
//!
//! # Requirements
//!
//! Linux 5.4 or later (`need_wakeup`, ring flags, the `XDP_PASS` fallback
//! of `bpf_redirect_map`), 5.9 for XDP BPF links; `CAP_NET_ADMIN`,
//! `CAP_BPF` and `CAP_NET_RAW` (or root). Aligned UMEM chunks of 2048 or
//! 4096 bytes. One page-aligned anonymous mapping per socket, pinned by the
//! kernel (it counts against `RLIMIT_MEMLOCK` on kernels before 5.11).
//!
//! [`tx_push`]: crate::io::Uplink::tx_push

mod bpf;
mod config;
mod error;
mod program;
mod ring;
mod socket;
mod umem;

use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use self::config::check_config;
pub use self::config::{AfXdpConfig, Attach, AttachMode, BindMode, ConfigError, ZeroCopy};
pub use self::error::AfXdpError;
pub use self::program::XdpProgram;
use self::ring::{ConsumerRing, ProducerRing};
use self::socket::{open_socket, Step};
use self::umem::Umem;
use super::{RxFn, Uplink, UplinkCounters, UplinkOffloads};
use crate::frame::{copy_frame, FrameSource};
use crate::net_hdr::VirtioNetHdr;
use crate::stats::DropReason;
use crate::sys::netdev;
use crate::sys::xdp;
use crate::wire::{ETH_HLEN, VLAN_HLEN};

/// Slots in the XSKMAP, i.e. the highest RX queue index + 1 a program can
/// serve. 1024 covers every NIC's channel count; each slot is one pointer
/// in the kernel.
pub const XSKMAP_ENTRIES: u32 = 1024;

/// Ethernet header plus one VLAN tag: what a frame may add to the MTU.
const L2_OVERHEAD: u32 = (ETH_HLEN + VLAN_HLEN) as u32;

/// The TX budget the kernel applies per `sendto` in copy mode when we
/// cannot raise it (`TX_BATCH_SIZE`).
const KERNEL_TX_BATCH: u32 = 32;

/// `XDP_MAX_TX_SKB_BUDGET` (uapi `if_xdp.h`, Linux 6.17): frames copy mode
/// sends per `sendto`, 32 to the TX ring size.
const XDP_MAX_TX_SKB_BUDGET: libc::c_int = 9;

// ===== impl AfXdp =====

/// An AF_XDP socket bound to one NIC queue, as an [`Uplink`].
///
/// Owns its UMEM and rings; holds its interface's [`XdpProgram`] (the
/// program stays attached while any socket of the interface lives).
pub struct AfXdp {
    name: String,
    ifname: String,
    queue_id: u32,
    bind_mode: BindMode,
    need_wakeup: bool,
    zero_copy_error: Option<io::Error>,
    fill: ProducerRing<u64>,
    comp: ConsumerRing<u64>,
    rx: ConsumerRing<libc::xdp_desc>,
    tx: ProducerRing<libc::xdp_desc>,
    /// RX frames owned by user space, waiting for room in the fill ring.
    rx_free: Vec<u64>,
    /// TX frames owned by user space, free for `tx_push`.
    tx_free: Vec<u64>,
    /// Frames `0..rx_frames` receive; the rest transmit.
    rx_frames: u32,
    /// The largest frame `tx_push` accepts.
    tx_max_len: usize,
    /// Bytes pushed since the last submit.
    tx_pending_bytes: u64,
    /// `sendto` calls one flush may make in copy mode.
    kick_limit: u32,
    counters: UplinkCounters,
    // Drop order: rings (above) unmapped, then the socket closed (it leaves
    // the XSKMAP), the UMEM unmapped, and the program released last.
    fd: OwnedFd,
    umem: Umem,
    program: Arc<XdpProgram>,
}

impl fmt::Debug for AfXdp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AfXdp")
            .field("name", &self.name)
            .field("bind_mode", &self.bind_mode)
            .field("attach_mode", &self.program.mode)
            .field("rx_free", &self.rx_free.len())
            .field("tx_free", &self.tx_free.len())
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

/// Kernel-side socket statistics (`XDP_STATISTICS`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XdpStats {
    /// Frames dropped for other reasons than the ones below (e.g. larger
    /// than a frame, or the fill ring was empty).
    pub rx_dropped: u64,
    /// Invalid fill ring descriptors.
    pub rx_invalid_descs: u64,
    /// Invalid TX descriptors (dropped without a completion).
    pub tx_invalid_descs: u64,
    /// Frames dropped because the RX ring was full.
    pub rx_ring_full: u64,
    /// Times the kernel found the fill ring empty.
    pub rx_fill_ring_empty_descs: u64,
    /// Times the kernel found the TX ring empty.
    pub tx_ring_empty_descs: u64,
}

impl AfXdp {
    /// Attaches an [`XdpProgram`] to `ifname` (per `cfg.attach`) and opens a
    /// socket on queue `cfg.queue_id` through it. The program is detached
    /// when this uplink is dropped (or the process exits).
    ///
    /// # Errors
    /// See [`AfXdpError`]: each variant names the failing step.
    pub fn open(ifname: &str, cfg: AfXdpConfig) -> Result<Self, AfXdpError> {
        check_config(ifname, &cfg)?;
        let program = XdpProgram::attach(ifname, cfg.attach)?;
        Self::open_with_program(&program, cfg)
    }

    /// Opens a socket on queue `cfg.queue_id` of `program`'s interface and
    /// registers it with `program` (`cfg.attach` is ignored).
    ///
    /// # Errors
    /// See [`AfXdpError`]: each variant names the failing step.
    pub fn open_with_program(
        program: &Arc<XdpProgram>,
        cfg: AfXdpConfig,
    ) -> Result<Self, AfXdpError> {
        let ifname = program.ifname();
        check_config(ifname, &cfg)?;
        let queue_id = cfg.queue_id;
        let at = Step { ifname, queue_id };
        let mtu = netdev::mtu(&program.ifname).map_err(|source| AfXdpError::Mtu {
            ifname: ifname.to_owned(),
            source,
        })?;
        let umem =
            Umem::new(cfg.frames, cfg.frame_size).map_err(|source| AfXdpError::UmemAlloc {
                ifname: ifname.to_owned(),
                queue_id,
                bytes: u64::from(cfg.frames) * u64::from(cfg.frame_size),
                source,
            })?;

        let mut zero_copy_error = None;
        let xsk = match cfg.zero_copy {
            ZeroCopy::Off => open_socket(&at, program.ifindex, &cfg, &umem, BindMode::Copy)?,
            ZeroCopy::Require => {
                open_socket(&at, program.ifindex, &cfg, &umem, BindMode::ZeroCopy)?
            }
            ZeroCopy::Try => {
                match open_socket(&at, program.ifindex, &cfg, &umem, BindMode::ZeroCopy) {
                    Err(AfXdpError::ZeroCopyUnsupported { source, .. }) => {
                        // The failed socket is closed here; start over in copy
                        // mode with a fresh one (same UMEM memory).
                        if !program.zc_warned.swap(true, Ordering::Relaxed) {
                            tracing::warn!(
                            "af_xdp: {ifname} queue {queue_id}: zero-copy not supported by the driver ({source}); using copy mode"
                        );
                        } else {
                            tracing::debug!(
                            "af_xdp: {ifname} queue {queue_id}: zero-copy not supported; using copy mode"
                        );
                        }
                        zero_copy_error = Some(source);
                        open_socket(&at, program.ifindex, &cfg, &umem, BindMode::Copy)?
                    }
                    other => other?,
                }
            }
        };

        let rx_frames = cfg.rx_frames();
        let tx_frames = cfg.frames - rx_frames;
        let mut rx_free = Vec::with_capacity(rx_frames as usize);
        // Reversed, so the fill ring gets frame 0 first.
        rx_free.extend((0..rx_frames).rev().map(|i| umem.frame_addr(i)));
        let mut tx_free = Vec::with_capacity(tx_frames as usize);
        tx_free.extend((rx_frames..cfg.frames).rev().map(|i| umem.frame_addr(i)));
        let tx_max_len = cfg.frame_size.min(mtu.saturating_add(L2_OVERHEAD)) as usize;

        let mut me = Self {
            name: format!("af_xdp:{ifname}:q{queue_id}"),
            ifname: ifname.to_owned(),
            queue_id,
            bind_mode: xsk.mode,
            need_wakeup: cfg.need_wakeup,
            zero_copy_error,
            fill: xsk.fill,
            comp: xsk.comp,
            rx: xsk.rx,
            tx: xsk.tx,
            rx_free,
            tx_free,
            rx_frames,
            tx_max_len,
            tx_pending_bytes: 0,
            kick_limit: cfg.tx_size / KERNEL_TX_BATCH + 2,
            counters: UplinkCounters::default(),
            fd: xsk.fd,
            umem,
            program: Arc::clone(program),
        };
        // Post receive buffers before any frame can be redirected here.
        me.refill();
        program
            .register(queue_id, &me.fd)
            .map_err(|source| AfXdpError::MapUpdate {
                ifname: ifname.to_owned(),
                queue_id,
                source,
            })?;
        tracing::info!(
            "af_xdp: {ifname} queue {queue_id}: bound in {} mode, XDP program {} in {} mode",
            me.bind_mode,
            program.prog_id,
            program.mode
        );
        Ok(me)
    }

    /// The mode the socket is bound in.
    pub fn bind_mode(&self) -> BindMode {
        self.bind_mode
    }

    /// Why zero-copy was not used, when [`ZeroCopy::Try`] fell back to copy
    /// mode (the `bind(XDP_ZEROCOPY)` error).
    pub fn zero_copy_error(&self) -> Option<&io::Error> {
        self.zero_copy_error.as_ref()
    }

    /// The XDP program this socket is registered with.
    pub fn program(&self) -> &Arc<XdpProgram> {
        &self.program
    }

    /// The interface.
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// The NIC queue.
    pub fn queue_id(&self) -> u32 {
        self.queue_id
    }

    /// The largest frame [`Uplink::tx_push`] accepts: the frame size, or the
    /// interface MTU (read at open) plus an Ethernet header and a VLAN tag.
    pub fn tx_max_len(&self) -> usize {
        self.tx_max_len
    }

    /// TX frames free for [`Uplink::tx_push`] right now (without reaping
    /// completions).
    pub fn tx_frames_free(&self) -> usize {
        self.tx_free.len()
    }

    /// The kernel's counters for this socket.
    ///
    /// # Errors
    /// `getsockopt(XDP_STATISTICS)` failed.
    pub fn kernel_stats(&self) -> io::Result<XdpStats> {
        let s = xdp::statistics(self.fd.as_fd())?;
        Ok(XdpStats {
            rx_dropped: s.rx_dropped,
            rx_invalid_descs: s.rx_invalid_descs,
            tx_invalid_descs: s.tx_invalid_descs,
            rx_ring_full: s.rx_ring_full,
            rx_fill_ring_empty_descs: s.rx_fill_ring_empty_descs,
            tx_ring_empty_descs: s.tx_ring_empty_descs,
        })
    }

    /// Moves free RX frames into the fill ring, as many as fit, and
    /// publishes them with one store.
    fn refill(&mut self) {
        if self.rx_free.is_empty() {
            return;
        }
        let n = self
            .fill
            .free(self.rx_free.len() as u32)
            .min(self.rx_free.len() as u32);
        for _ in 0..n {
            let addr = self.rx_free.pop().expect("counted above");
            let pushed = self.fill.push(addr);
            debug_assert!(pushed, "fill ring had {n} free slots");
        }
        self.fill.submit();
    }

    /// Takes back the RX frame holding `addr`.
    fn recycle_rx(&mut self, addr: u64) {
        let base = self.umem.frame_base(addr);
        match self.umem.frame_index(base) {
            Some(i) if i < self.rx_frames && self.rx_free.len() < self.rx_frames as usize => {
                self.rx_free.push(base);
            }
            // Invariant: the kernel returns the addresses we posted.
            _ => debug_assert!(false, "RX address {addr:#x} is not an RX frame"),
        }
    }

    /// Moves completed TX frames back to the free list; returns how many.
    fn reap_completions(&mut self) -> u32 {
        let mut n = 0;
        while let Some(addr) = self.comp.pop() {
            let base = self.umem.frame_base(addr);
            match self.umem.frame_index(base) {
                Some(i) if i >= self.rx_frames && self.tx_free.len() < self.tx_free.capacity() => {
                    self.tx_free.push(base);
                }
                // Invariant: the kernel completes the addresses we sent.
                _ => debug_assert!(false, "completion {addr:#x} is not a TX frame"),
            }
            n += 1;
        }
        if n > 0 {
            self.comp.release();
        }
        n
    }

    /// Whether a flush must call `sendto` for the kernel to transmit.
    fn must_kick_tx(&self) -> bool {
        self.bind_mode == BindMode::Copy || !self.need_wakeup || self.tx.needs_wakeup()
    }

    /// Wakes the kernel's transmit path. In copy mode the kernel transmits
    /// inside `sendto`, at most one budget per call, so repeat while it
    /// makes progress. `EAGAIN` (budget spent, completion ring full, device
    /// busy) is back-pressure, not an error; `EBUSY` means the device
    /// dropped a frame.
    fn kick_tx(&mut self) -> io::Result<()> {
        for _ in 0..self.kick_limit {
            let before = self.tx.in_flight();
            match xdp::kick_tx(self.fd.as_fd()) {
                Ok(()) => {}
                Err(e) => match e.raw_os_error() {
                    Some(libc::EAGAIN | libc::EINTR | libc::ENOBUFS) => {}
                    Some(libc::EBUSY) => {
                        if self.bind_mode == BindMode::Copy {
                            self.counters.tx_drops.add(DropReason::Refused, 1);
                        }
                    }
                    _ => return Err(e),
                },
            }
            if self.bind_mode == BindMode::ZeroCopy {
                // The driver transmits asynchronously: one wake-up is enough.
                return Ok(());
            }
            // Free completion slots the kernel needs before sending more.
            self.reap_completions();
            let after = self.tx.in_flight();
            if after == 0 || after == before {
                return Ok(());
            }
        }
        Ok(())
    }

    /// Publishes pushed frames, wakes the kernel and reaps completions.
    fn flush(&mut self) -> io::Result<()> {
        let n = self.tx.submit();
        if n > 0 {
            self.counters.tx_packets = self.counters.tx_packets.wrapping_add(u64::from(n));
            self.counters.tx_bytes = self.counters.tx_bytes.wrapping_add(self.tx_pending_bytes);
            self.tx_pending_bytes = 0;
        }
        let res = if self.tx.in_flight() > 0 && self.must_kick_tx() {
            self.kick_tx()
        } else {
            Ok(())
        };
        self.reap_completions();
        res
    }

    /// Whether a TX frame and a TX ring slot are available.
    fn tx_room(&mut self) -> bool {
        !self.tx_free.is_empty() && self.tx.free(1) > 0
    }
}

impl Uplink for AfXdp {
    fn name(&self) -> &str {
        &self.name
    }

    /// Hot path: no allocation, no lock; at most one syscall, and only when
    /// the kernel asks for a fill ring wake-up.
    fn rx_burst(&mut self, max: usize, f: RxFn<'_>) -> io::Result<usize> {
        let hdr = VirtioNetHdr::default();
        let (mut lent, mut bytes, mut bad) = (0usize, 0u64, 0u64);
        for _ in 0..max {
            let Some(desc) = self.rx.pop() else { break };
            // Ownership: the kernel handed this frame over through the RX
            // ring; it is ours until `recycle_rx` + `refill` below put it
            // back on the fill ring, after the callback has returned.
            match self.umem.frame(desc.addr, desc.len) {
                Some(frame) => {
                    f(&hdr, frame);
                    lent += 1;
                    bytes += u64::from(desc.len);
                }
                None => bad += 1,
            }
            self.recycle_rx(desc.addr);
        }
        self.rx.release();
        self.refill();
        let c = &mut self.counters;
        c.rx_packets = c.rx_packets.wrapping_add(lent as u64);
        c.rx_bytes = c.rx_bytes.wrapping_add(bytes);
        c.rx_drops.add(DropReason::TooLong, bad);
        if self.need_wakeup && self.fill.needs_wakeup() {
            if let Err(e) = xdp::kick_rx(self.fd.as_fd()) {
                if !matches!(
                    e.raw_os_error(),
                    Some(libc::EAGAIN | libc::EBUSY | libc::EINTR)
                ) {
                    return Err(e);
                }
            }
        }
        Ok(lent)
    }

    /// Hot path: no allocation, no lock; no syscall unless TX frames run
    /// out (then one flush).
    ///
    /// Frames shorter than an Ethernet header are dropped (`TooShort`) and
    /// not sent (the kernel would discard their descriptor without a
    /// completion, losing the frame buffer).
    fn tx_push(&mut self, hdr: &VirtioNetHdr, frame: &dyn FrameSource) -> Result<(), DropReason> {
        if hdr.is_gso() || hdr.needs_csum() {
            return Err(DropReason::OffloadUnsupported);
        }
        let len = frame.frame_len();
        if len > self.tx_max_len {
            self.counters.tx_drops.add(DropReason::TooLong, 1);
            return Err(DropReason::TooLong);
        }
        if len < ETH_HLEN {
            self.counters.tx_drops.add(DropReason::TooShort, 1);
            return Err(DropReason::TooShort);
        }
        if !self.tx_room() {
            self.reap_completions();
            if !self.tx_room() {
                // Out of buffers: send what is queued to get some back. An
                // error here resurfaces at the caller's next tx_flush.
                let _ = self.flush();
                if !self.tx_room() {
                    return Err(DropReason::NoBuffers);
                }
            }
        }
        let base = self.tx_free.pop().expect("tx_room checked");
        // Ownership: `base` came off the TX free list: the kernel completed
        // it (or never had it) and it is not in the TX ring, so nothing else
        // reads or writes it until we push it below.
        let buf = self.umem.frame_mut(base);
        let n = copy_frame(frame, &mut buf[..len]);
        if n < ETH_HLEN {
            // The source wrote less than it announced: never hand the
            // kernel a runt descriptor (it would keep the frame).
            self.tx_free.push(base);
            self.counters.tx_drops.add(DropReason::TooShort, 1);
            return Err(DropReason::TooShort);
        }
        let pushed = self.tx.push(libc::xdp_desc {
            addr: base,
            len: n as u32,
            options: 0,
        });
        debug_assert!(pushed, "tx_room checked");
        self.tx_pending_bytes += n as u64;
        Ok(())
    }

    /// Publishes the queued frames with one index store, makes at most one
    /// `sendto` per 32 frames (one in all on Linux 6.17+) in copy mode, or
    /// one when the kernel asks for it in zero-copy mode, and reaps
    /// completions.
    fn tx_flush(&mut self) -> io::Result<()> {
        self.flush()
    }

    fn tx_drop(&mut self, reason: DropReason) {
        self.counters.tx_drops.add(reason, 1);
    }

    fn rx_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    fn offloads(&self) -> UplinkOffloads {
        UplinkOffloads::default()
    }

    /// Our counters plus the kernel's drops (`XDP_STATISTICS`, one
    /// `getsockopt`; not for the hot path): RX `Overrun` drops are the
    /// frames the kernel could not deliver (fill ring empty, RX ring full,
    /// frame larger than a UMEM frame), TX `Refused` drops include invalid
    /// descriptors and at least one frame per `EBUSY` from the device.
    fn counters(&self) -> UplinkCounters {
        let mut c = self.counters;
        if let Ok(k) = self.kernel_stats() {
            c.rx_drops.add(
                DropReason::Overrun,
                k.rx_dropped.wrapping_add(k.rx_ring_full),
            );
            c.tx_drops.add(DropReason::Refused, k.tx_invalid_descs);
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::program::interface_index;
    use super::*;

    #[test]
    fn default_config_is_valid() {
        let c = AfXdpConfig::default();
        assert_eq!(c.check(), Ok(()));
        assert_eq!(c.rx_frames(), 2048);
    }

    #[test]
    fn config_errors_name_the_field() {
        let bad = |f: fn(&mut AfXdpConfig)| {
            let mut c = AfXdpConfig::default();
            f(&mut c);
            c.check().unwrap_err().to_string()
        };
        assert!(bad(|c| c.frame_size = 3000).contains("frame size"));
        assert!(bad(|c| c.frames = 1).contains("frames"));
        assert!(bad(|c| c.tx_size = 100).contains("TX ring"));
        assert!(bad(|c| c.fill_size = 0).contains("fill ring"));
        assert!(bad(|c| c.queue_id = XSKMAP_ENTRIES).contains("queue id"));
    }

    #[test]
    fn errors_name_interface_and_step() {
        let e = check_config(
            "eth9",
            &AfXdpConfig {
                frames: 0,
                ..Default::default()
            },
        )
        .unwrap_err();
        assert!(e
            .to_string()
            .starts_with("af_xdp eth9: invalid configuration"));
        let e = interface_index("this-name-is-far-too-long").unwrap_err();
        assert!(matches!(e, AfXdpError::Config { .. }));
        let e = interface_index("vhu-no-such-if").unwrap_err();
        assert_eq!(e.to_string(), "af_xdp vhu-no-such-if: no such interface");
    }
}
