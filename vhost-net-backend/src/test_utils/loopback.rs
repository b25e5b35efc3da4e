// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! A guest double for benches and fuzzing: one queue pair whose rings live
//! in anonymous memory of this process, driven from the caller's thread with
//! no socket and no control plane in between.
//!
//! The driver side of the rings (descriptor writes, avail publication, used
//! reaping) is the ring engine's small test-only driver API
//! (`ring::driver`), so this double holds no `unsafe`; here the rings are
//! handed to a [`QueuePair`] as the control plane would hand them.

use std::sync::Arc;

use crate::device::{bits, Negotiated, MAX_FRAME_LEN};
use crate::queue::{QueuePair, RingConfig, VringShared};
use crate::ring::driver::{DriverRings, GPA};
use crate::ring::log::{DirtyLog, LogTarget, LOG_PAGE_SHIFT};
use crate::ring::Layout;

/// How to build a [`LoopbackGuest`].
#[derive(Debug, Clone, Copy)]
pub struct LoopbackOpts {
    /// Packed rings instead of split.
    pub packed: bool,
    /// Ring size (a power of two for split rings).
    pub size: u16,
    /// Acked virtio features (EVENT_IDX, MRG_RXBUF, ... ; VERSION_1 is
    /// always added; RING_PACKED follows `packed`).
    pub features: u64,
    /// Length of each TX buffer (the largest TX frame + header), and of
    /// each RX buffer unless `rx_buf_len` says otherwise.
    pub buf_len: u32,
    /// Length of each RX buffer, when it differs (e.g. 2 KiB mergeable
    /// buffers for 9000-byte frames).
    pub rx_buf_len: Option<u32>,
}

impl Default for LoopbackOpts {
    fn default() -> Self {
        Self {
            packed: false,
            size: 256,
            features: bits::MRG_RXBUF,
            buf_len: 2048,
            rx_buf_len: None,
        }
    }
}

/// One queue pair of a fake guest.
#[derive(Debug)]
pub struct LoopbackGuest {
    drv: DriverRings,
    hdr_len: usize,
    /// The device side, to drive with the burst API.
    pub qp: QueuePair,
    log: Option<Arc<DirtyLog>>,
}

impl LoopbackGuest {
    /// Lays out both rings and their buffers and starts the queue pair.
    ///
    /// # Panics
    /// On an invalid `opts` (size 0, a split size that is not a power of
    /// two, a buffer shorter than 64 bytes).
    pub fn new(opts: LoopbackOpts) -> Self {
        Self::build(opts, false)
    }

    /// [`LoopbackGuest::new`] with dirty-page logging on (`LOG_ALL` acked,
    /// a log covering the whole memory): what a ring costs during a live
    /// migration. The log is [`LoopbackGuest::dirty_log`].
    pub fn with_dirty_log(opts: LoopbackOpts) -> Self {
        Self::build(opts, true)
    }

    /// The dirty log, when built [`LoopbackGuest::with_dirty_log`].
    pub fn dirty_log(&self) -> Option<&DirtyLog> {
        self.log.as_deref()
    }

    fn build(opts: LoopbackOpts, logged: bool) -> Self {
        let rx_len = opts.rx_buf_len.unwrap_or(opts.buf_len);
        let drv = DriverRings::new(opts.packed, opts.size, rx_len, opts.buf_len);
        let mut features = opts.features | bits::VERSION_1;
        if logged {
            features |= bits::LOG_ALL;
        }
        if opts.packed {
            features |= bits::RING_PACKED;
        }
        let features = Negotiated::new(features);
        // One bit per 4 KiB page from GPA 0 to the end of the memory.
        let (_, len) = drv.memory_range();
        let log_bytes = ((GPA + len) >> LOG_PAGE_SHIFT).div_ceil(8);
        let log = logged.then(|| Arc::new(DirtyLog::anonymous(log_bytes as usize)));
        let base_idx = if opts.packed { 0x8000_8000 } else { 0 };
        let shared: Vec<Arc<VringShared>> = (0..2)
            .map(|_| Arc::new(VringShared::new().expect("eventfd")))
            .collect();
        for (i, rx) in [true, false].into_iter().enumerate() {
            let cfg = RingConfig {
                mem: Arc::clone(drv.memory()),
                layout: drv.layout(rx),
                base: base_idx,
                epoch: 1,
                kick: None,
                call: None,
                features,
                max_frame: MAX_FRAME_LEN,
                log: log.as_ref().map(|l| LogTarget {
                    log: Arc::clone(l),
                    used_gpa: drv.used_gpa(rx),
                }),
            };
            // Not attached yet: applied at the first burst, no wait.
            shared[i].publish(Some(Arc::new(cfg)));
        }
        let qp = QueuePair::new(0, Arc::clone(&shared[0]), Arc::clone(&shared[1]));
        Self {
            drv,
            hdr_len: features.hdr_len(),
            qp,
            log,
        }
    }

    /// Takes the device side out, to hand it to a data plane that owns its
    /// queues (a switch's PMD); `self.qp` is left as a queue pair whose
    /// rings never run. The guest side (`post_*`, `reap_*`) keeps working.
    pub fn take_qp(&mut self) -> QueuePair {
        let idle = |_| Arc::new(VringShared::new().expect("eventfd"));
        let spare = QueuePair::new(0, idle(0), idle(1));
        std::mem::replace(&mut self.qp, spare)
    }

    /// Guest-physical layout of the RX ring (`rx == true`) or TX ring.
    pub fn layout(&self, rx: bool) -> Layout {
        self.drv.layout(rx)
    }

    /// Guest-physical address of buffer `i` of the RX or TX ring (buffers
    /// are `buf_len` bytes, one per descriptor slot).
    pub fn buffer_gpa(&self, rx: bool, i: u16) -> u64 {
        self.drv.buffer_gpa(rx, i)
    }

    /// Guest memory: its guest-physical start and length (one region).
    pub fn memory_range(&self) -> (u64, u64) {
        self.drv.memory_range()
    }

    /// Writes raw bytes at a guest-physical address (for hostile rings).
    ///
    /// # Panics
    /// When the range is outside guest memory.
    pub fn write_guest(&self, gpa: u64, bytes: &[u8]) {
        self.drv.write_guest(gpa, bytes);
    }

    /// Reads raw bytes at a guest-physical address.
    ///
    /// # Panics
    /// When the range is outside guest memory.
    pub fn read_guest(&self, gpa: u64, out: &mut [u8]) {
        self.drv.read_guest(gpa, out);
    }

    /// Length of the virtio-net header in front of every frame.
    pub fn hdr_len(&self) -> usize {
        self.hdr_len
    }

    /// Posts up to `n` copies of `frame` (with a zero virtio-net header) on
    /// the TX ring; returns how many were posted (limited by free slots).
    ///
    /// # Panics
    /// When a header and the frame do not fit a TX buffer.
    pub fn post_tx(&mut self, frame: &[u8], n: usize) -> usize {
        self.drv.post_tx(self.hdr_len, frame, n)
    }

    /// Makes up to `n` RX buffers available; returns how many.
    pub fn post_rx(&mut self, n: usize) -> usize {
        self.drv.post_rx(n)
    }

    /// Consumes used TX entries; returns how many buffers came back.
    pub fn reap_tx(&mut self) -> usize {
        self.drv.reap_tx()
    }

    /// Consumes used RX entries; returns (buffers, bytes written).
    pub fn reap_rx(&mut self) -> (usize, u64) {
        self.drv.reap_rx()
    }

    /// Consumes used RX entries, calling `f` with each buffer's contents
    /// (virtio-net header included).
    pub fn reap_rx_with(&mut self, f: &mut dyn FnMut(&[u8])) -> usize {
        self.drv.reap_rx_with(f)
    }
}
