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
//! | `control` | the vhost-user request handler; validates every message; takes the three requests the `vhost` crate cannot serve (`control::intercept`) |
//! | [`forward`] | one frame into any sink, with the software offload fallback ([`Forwarder`]) |
//! | [`queue`] | the burst API ([`TxQueue::recv_burst`], [`RxQueue::burst`]) and the control/data hand-off |
//! | [`poll`] | how a data-plane thread waits: [`Poller`] and the busy/adaptive/interrupt [`PollLoop`] |
//! | [`io`] | uplinks (AF_XDP, AF_PACKET, TAP) behind one trait, an uplink as a sink ([`UplinkSink`]) |
//! | [`sink`] | the one destination trait, [`Sink`]: guest RX bursts and uplinks |
//! | [`frame`] | the frame vocabulary: the one-pass copy ([`FrameSource`], [`FrameWriter`], [`copy_frame`]) and [`Spliced`] |
//! | [`offload`] | the software offload fallbacks: partial checksums completed, TSO/UFO/USO super-frames segmented |
//! | `ring` | the split and packed ring engine over guest memory (with `sys`, the only `unsafe`) |
//! | [`device`] | offered features, offloads, what an acked set means |
//! | [`sys`] | the syscall layer: sockets, mmap, netdev, AF_PACKET, AF_XDP, BPF, TUN, Unix paths of any length |
//! | [`net_hdr`] | `virtio_net_hdr` |
//! | [`wire`] | Ethernet, VLAN, IPv4, IPv6, TCP, UDP: checked views over host copies of frame bytes, the Internet checksum |
//! | [`stats`] | counters, and the one drop vocabulary ([`DropReason`]) |
//! | `test_utils` | (feature `test-utils`) the in-process virtio-net driver and the loopback guest |
//!
//! Each module imports only modules below it in this table (`device`,
//! `sys`, `net_hdr`, `wire` and `stats` import none of the others;
//! `lib.rs` and `test_utils` sit on top): there is no import cycle.
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
pub mod forward;
pub mod frame;
pub mod io;
pub mod net_hdr;
pub mod offload;
pub mod poll;
pub mod port;
pub mod queue;
mod ring;
pub mod sink;
pub mod stats;
pub mod sys;
#[cfg(feature = "test-utils")]
pub mod test_utils;
pub mod wire;

pub use device::{Offloads, MAX_QUEUE_PAIRS};

/// An error and its sources, `: `-separated: how binaries and logs report
/// the library's errors (their messages do not repeat their sources).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}
pub use forward::{ForwardCounters, Forwarder};
pub use frame::{copy_frame, FrameSource, FrameWriter, Spliced};
pub use io::UplinkSink;
pub use net_hdr::VirtioNetHdr;
pub use poll::{LoopCycles, PollLoop, PollMode, Poller, Token};
pub use port::{
    default_max_guest_memory, set_default_max_guest_memory, AnnounceHandler, Backoff, Port,
    PortConfig, PortError, SocketRole, DEFAULT_MAX_GUEST_MEMORY,
};
pub use queue::{QueuePair, RxBurst, RxQueue, TxFrame, TxQueue};
pub use sink::Sink;
pub use stats::{DropReason, QueueCounters};
