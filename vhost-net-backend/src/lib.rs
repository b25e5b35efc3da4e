// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! # vhost-net-backend
//!
//! A vhost-user virtio-net device with a packet-burst API, built on the
//! rust-vmm crates (`vhost` for the protocol, `vm-memory` for mapping guest
//! memory, `vmm-sys-util` for eventfds and epoll).
//!
//! A VMM (QEMU, cloud-hypervisor) or a DPDK application (virtio-user)
//! connects to a [`Port`]'s socket and shares the guest's memory; the port's
//! control thread handles the vhost-user protocol and hands running rings to
//! the data plane: the [`QueuePair`]s you poll from your own threads.
//!
//! ## Layers
//!
//! | module | what it does |
//! |---|---|
//! | [`port`] | the socket (server or client role), connection lifecycle, reset and reconnect |
//! | `control` | the vhost-user request handler; validates every message |
//! | [`queue`] | the burst API ([`TxQueue::recv_burst`], [`RxQueue::burst`]) and the control/data hand-off |
//! | `ring` | the split-ring engine over guest memory (most `unsafe` lives here) |
//! | [`device`] | offered features, offloads, what an acked set means |
//! | [`io`] | uplinks (AF_XDP, AF_PACKET, TAP) behind one trait, software offload fallbacks |
//! | [`net_hdr`] | `virtio_net_hdr` |
//! | [`wire`] | Ethernet, VLAN, IPv4, IPv6, TCP, UDP: checked views over host copies of frame bytes, the Internet checksum |
//! | [`stats`] | per-queue counters and drop reasons |
//!
//! ## Example: an echo device
//!
//! Reflect every frame a guest transmits back into its RX queue, one copy
//! per frame, guest buffer to guest buffer:
//!
//! ```no_run
//! use vhost_net_backend::{Port, PortConfig};
//!
//! let (port, mut queues) = Port::new(PortConfig::new("vm0", "/tmp/vm0.sock"))?;
//! loop {
//!     for qp in &mut queues {
//!         let mut rx = qp.rx.burst();
//!         qp.tx.recv_burst(32, |frame| {
//!             let hdr = *frame.hdr();
//!             // Dropped frames are counted in the RX queue's counters.
//!             let _ = rx.push(&hdr, frame);
//!         });
//!         // Dropping `rx` publishes the used entries and notifies the guest.
//!     }
//! #   break;
//! }
//! # drop(port);
//! # Ok::<(), vhost_net_backend::PortError>(())
//! ```
//!
//! ## Guarantees
//!
//! Guest input is hostile: every descriptor index, address and length and
//! every vhost-user message is validated. A bad guest loses its own packets
//! (counted per [`DropReason`]); it never crashes the process and never makes
//! it touch memory outside the regions the guest shared.
#![deny(missing_docs)]
#![deny(unsafe_code)]
#![deny(rustdoc::broken_intra_doc_links)]

mod control;
pub mod device;
pub mod io;
pub mod net_hdr;
pub mod port;
pub mod queue;
mod ring;
pub mod stats;
pub mod sys;
pub mod wire;
/// Guest doubles for benches and fuzzing (feature `test-utils`).
#[cfg(feature = "test-utils")]
pub mod testing {
    pub use crate::ring::loopback::{LoopbackGuest, LoopbackOpts};
    pub use crate::ring::{Layout, PackedLayout, SplitLayout};
}
#[cfg(feature = "test-utils")]
#[allow(missing_docs)]
pub mod test_utils;

pub use device::{Offloads, MAX_QUEUE_PAIRS};
pub use net_hdr::VirtioNetHdr;
pub use port::{Backoff, Port, PortConfig, PortError, SocketRole};
pub use queue::{
    copy_frame, FrameSource, FrameWriter, Poller, QueuePair, RxBurst, RxQueue, TxFrame, TxQueue,
};
pub use stats::{DropReason, QueueCounters};
