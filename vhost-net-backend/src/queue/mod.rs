// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The packet-burst API over one port's virtqueues, and the hand-off of ring
//! configurations from the control plane.
//!
//! | file | question it answers |
//! |---|---|
//! | `handoff` | how a ring configuration reaches the data plane ([`ACK_TIMEOUT`]; see below) |
//! | `tx` | how frames come out of the guest ([`TxQueue`], [`TxFrame`], [`HEAD_LEN`]) |
//! | `rx` | how frames go into the guest ([`RxQueue`], [`RxBurst`], [`MAX_RX_CHAINS`]) |
//! | `frame` | how a frame is copied, once ([`FrameSource`], [`FrameWriter`], [`copy_frame`]) |
//!
//! How a data-plane thread sleeps and wakes is [`crate::poll`]'s question
//! ([`Poller`] is re-exported here).
//!
//! # Hand-off
//!
//! The control plane publishes ring configurations; the data plane picks
//! them up at burst boundaries with one atomic load, so no lock is taken per
//! packet (the design is written at the top of `queue/handoff.rs`).
//!
//! Every [`RxQueue`] and [`TxQueue`] handed out must be polled (or dropped):
//! a queue that is never polled makes the control plane wait for its
//! acknowledgement (up to [`ACK_TIMEOUT`]) on every ring change.

use std::sync::Arc;

use crate::poll::{Notify, Polled, Watch};
use crate::ring::{UsedId, MAX_RX_FRAME_SEGS};
use crate::wire::ETH_ALEN;

/// The methods [`RxQueue`] and [`TxQueue`] share, over their `vring` and
/// `index` fields.
macro_rules! queue_accessors {
    ($queue:ty) => {
        impl $queue {
            /// The queue pair index.
            pub fn index(&self) -> u16 {
                self.index
            }

            /// Whether the ring is running (the frontend started and
            /// enabled it).
            pub fn is_running(&mut self) -> bool {
                self.vring.sync();
                self.vring.ring.is_some()
            }

            /// This queue's counters.
            pub fn counters(&self) -> $crate::stats::QueueCounters {
                self.vring.shared.stats.snapshot()
            }
        }
    };
}

mod handoff;
mod rx;
pub(crate) mod tx;

pub use crate::frame::{copy_frame, FrameSource, FrameWriter, Spliced, MAX_SPLICE_LEAD};
use handoff::Vring;
pub use handoff::ACK_TIMEOUT;
pub(crate) use handoff::{RingConfig, VringShared};
pub use rx::{RxBurst, RxQueue, MAX_RX_CHAINS};
pub use tx::{TxFrame, TxQueue, HEAD_LEN};

pub use crate::poll::Poller;

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
                vring: Vring::new(tx, tx::TX_BATCH_SEGS),
                index,
                batch: vec![tx::Parsed::EMPTY; tx::TX_BATCH].into_boxed_slice(),
            },
        }
    }

    /// The queue pair's index within its port.
    pub fn index(&self) -> u16 {
        self.rx.index
    }

    /// Reflects up to `max` frames the guest transmitted back into its
    /// receive queue, destination and source MAC addresses swapped: an echo
    /// device, as the `echo` example and the driver tests run one. Returns
    /// the frames dequeued from TX; one the RX queue cannot take is counted
    /// in its drop counters.
    pub fn echo_burst(&mut self, max: usize) -> usize {
        let mut rx = self.rx.burst();
        self.tx.recv_burst(max, |frame| {
            let head = frame.head_mut();
            if head.len() >= 2 * ETH_ALEN {
                let (dst, src) = head.split_at_mut(ETH_ALEN);
                dst.swap_with_slice(&mut src[..ETH_ALEN]);
            }
            let hdr = *frame.hdr();
            // A failure is counted in the RX queue's drop counters.
            let _ = rx.push(&hdr, frame);
        })
    }
}

impl Polled for QueuePair {
    /// Registers both queues' kick and wake eventfds (see [`Poller::add`]).
    fn attach(&mut self, watch: &Watch) -> std::io::Result<()> {
        self.rx.attach(watch)?;
        self.tx.attach(watch)
    }
}

impl Polled for RxQueue {
    /// Registers the queue's kick and wake eventfds (see [`Poller::add_rx`]).
    fn attach(&mut self, watch: &Watch) -> std::io::Result<()> {
        self.vring.attach_poller(watch)
    }
}

impl Polled for TxQueue {
    /// Registers the queue's kick and wake eventfds (see [`Poller::add_tx`]).
    fn attach(&mut self, watch: &Watch) -> std::io::Result<()> {
        self.vring.attach_poller(watch)
    }
}

impl Notify for QueuePair {
    /// TX kicks always; RX kicks only while the guest has no RX buffer
    /// posted (posted RX buffers are not work: only a sender waiting for
    /// them is).
    fn enable_notifications(&mut self) -> bool {
        let mut pending = self.tx.enable_notifications();
        if self.rx.is_running() && self.rx.available(1) == 0 {
            pending |= self.rx.enable_notifications();
        }
        pending
    }

    fn disable_notifications(&mut self) {
        self.tx.disable_notifications();
        self.rx.disable_notifications();
    }
}
