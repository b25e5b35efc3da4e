// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause

//! An in-process virtio-net *driver* that talks to a vhost-user backend over a real Unix socket.
//!
//! [`TestDriver`] plays the part of QEMU plus the guest's virtio-net driver, so tests, benches
//! and fuzzers can drive a backend (ours, or any other such as DPDK's vhost PMD) the way a VM
//! would:
//!
//! * **Guest memory** is a memfd mapped with vm-memory, at a nonzero guest-physical address
//!   ([`DriverOpts::gpa_base`], `0x1_0000_0000` by default) so that a backend which mixes up
//!   GPAs and frontend virtual addresses fails loudly. It can be split into two regions with a
//!   hole between them ([`DriverOpts::split_regions`]) to exercise region lookup.
//! * **The control plane** is the `vhost` crate's [`Frontend`], driven in QEMU's order:
//!   `SET_OWNER`, `GET_FEATURES`, `GET_PROTOCOL_FEATURES`, `SET_PROTOCOL_FEATURES`,
//!   `GET_QUEUE_NUM`, `SET_FEATURES`, `SET_MEM_TABLE` (or `GET_MAX_MEM_SLOTS` + `ADD_MEM_REG`),
//!   then for each queue pair and each of its two vrings `SET_VRING_NUM`, `SET_VRING_BASE`
//!   (the ring's `used.idx`, so 0 on a fresh ring), `SET_VRING_ADDR` (frontend virtual
//!   addresses, i.e. addresses in this process's mapping), `SET_VRING_KICK`, `SET_VRING_CALL`,
//!   and finally `SET_VRING_ENABLE` for both vrings of the pair. Once `REPLY_ACK` is negotiated
//!   every request carries `NEED_REPLY`, so a backend error surfaces as a
//!   [`DriverError::Request`] on the request that caused it. `GET_QUEUE_NUM` (the number of
//!   queue *pairs* for virtio-net) goes out on the raw socket, because the `vhost` crate would
//!   take its answer as the number of vrings and then refuse vrings past it.
//! * **Lifecycle**: [`TestDriver::get_vring_base`] stops a vring and
//!   [`TestDriver::resume_vring`] starts it again; [`TestDriver::reconnect`] replays the
//!   bring-up on a new connection while keeping guest memory, rings and chains in flight (a
//!   backend restart under a running VM); [`TestDriver::disconnect`] drops everything.
//! * **The data plane** is the driver half of the split virtqueue (virtio 1.2, section 2.7):
//!   descriptors, the available ring (entries written first, then `avail.idx` stored with
//!   `Release`), the used ring (`used.idx` loaded with `Acquire`, then the elements read), the
//!   `EVENT_IDX` fields (`used_event` written by the driver, `avail_event` read before a kick),
//!   `VRING_AVAIL_F_NO_INTERRUPT`, kick eventfds and call eventfds.
//!
//! Vring numbering follows virtio-net: queue pair `qp` has its receive queue at vring `2 * qp`
//! and its transmit queue at vring `2 * qp + 1`. Methods that take `(qp, rx: bool)` address one
//! of those two vrings.
//!
//! # Buffers
//!
//! Buffers live in guest memory and come from a first-fit extent allocator (64-byte granules, no
//! allocation straddles a region). A chain's descriptors and buffers are freed when its used
//! element comes back, so any number of frames can go through a ring over time; descriptor ids
//! are recycled through a free list, and all ring indices wrap at 2^16 as the spec requires.
//! Receive buffers are filled with [`RX_POISON`] before they are posted, so a backend that
//! reports more bytes than it wrote is caught by a byte-exact comparison.
//!
//! # Hostile rings and raw protocol
//!
//! Protocol tests get the raw [`Frontend`] ([`TestDriver::frontend`]), a clone of the socket
//! ([`TestDriver::send_raw`], [`TestDriver::recv_raw`], [`TestDriver::wait_backend_hangup`]),
//! and ring tests can write arbitrary descriptors ([`TestDriver::write_desc`]) and publish any
//! head ([`TestDriver::push_avail`]) without going through the allocator. Used elements for
//! such raw heads are not interpreted: fetch them with [`TestDriver::take_raw_used`].
//!
//! # Checking the backend
//!
//! Whatever the driver notices about the backend's behaviour that breaks the spec (a used id
//! that is not in flight, a used length larger than the chain, a zero `num_buffers`, ...) is
//! recorded and can be read with [`TestDriver::violations`]; tests should assert it is empty.
//!
//! # Threads and cost
//!
//! A `TestDriver` is `Send` but not `Sync`: one thread drives it at a time, like one vCPU.
//! It favours checking over speed: each chain costs a few small heap allocations, receive
//! buffers are poisoned before posting, and received frames are copied out. That is fine for
//! benches that measure the backend with the driver on another core, but the driver's own
//! cost is not negligible below a microsecond per frame.
//!
//! # The other doubles
//!
//! | file | double |
//! |---|---|
//! | `loopback` | [`LoopbackGuest`]: one queue pair whose rings live in this process, driven from the caller's thread with no socket (benches, fuzzers) |
//! | `uplink` | [`ScriptedUplink`]: an in-memory uplink that receives what its [`Script`] queues and keeps what it is sent |
//! | `reference` | [`Reference`]: `virtio-queue` over a copy of a loopback guest's memory, for differential tests |
//! | `limits`, `flags` | the engine's limits and the descriptor flags, for models that must agree with the engine |
//!
//! # Example
//!
//! ```no_run
//! # use std::time::Duration;
//! # use vhost_net_backend::test_utils::*;
//! # fn main() -> Result<(), DriverError> {
//! let mut drv = TestDriver::connect("/tmp/vhu.sock".as_ref(), DriverOpts::default())?;
//! drv.post_rx_buffers(0, 64, 2048, RxLayout::Single)?;
//! drv.kick_rx(0);
//! let hdr = drv.zero_hdr();
//! drv.send_frame(0, &hdr, &[0xab; 60], TxLayout::Single)?;
//! drv.kick_tx(0);
//! let frames = drv.recv_frames_until(0, 1, Duration::from_secs(2));
//! assert!(drv.violations().is_empty());
//! # Ok(()) }
//! ```

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{fence, Ordering};
use std::time::{Duration, Instant};

use vhost::vhost_user::message::{
    FrontendReq, VhostUserHeaderFlag, VhostUserProtocolFeatures, VhostUserVirtioFeatures,
};
use vhost::vhost_user::{Frontend, VhostUserFrontend};
use vhost::{VhostBackend, VhostUserMemoryRegionInfo, VringConfigData};
use virtio_bindings::virtio_config::{
    VIRTIO_F_ACCESS_PLATFORM, VIRTIO_F_NOTIFICATION_DATA, VIRTIO_F_RING_PACKED, VIRTIO_F_VERSION_1,
};
use virtio_bindings::virtio_net::{VIRTIO_NET_F_CTRL_VQ, VIRTIO_NET_F_MQ, VIRTIO_NET_F_MRG_RXBUF};
use virtio_bindings::virtio_ring::{
    VIRTIO_RING_F_EVENT_IDX, VIRTIO_RING_F_INDIRECT_DESC, VRING_AVAIL_F_NO_INTERRUPT,
    VRING_DESC_F_INDIRECT, VRING_DESC_F_NEXT, VRING_DESC_F_WRITE, VRING_USED_F_NO_NOTIFY,
};
use vm_memory::{
    Address, Bytes, FileOffset, GuestAddress, GuestMemoryBackend, GuestMemoryError, GuestMemoryMmap,
};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};
use vmm_sys_util::sock_ctrl_msg::ScmSocket;

use crate::net_hdr::MAX_HDR_LEN;
use crate::sys::driver::{memfd, poll_fd};

mod control;
mod datapath;
mod error;
mod frames;
mod loopback;
mod opts;
mod reference;
mod uplink;
mod used;
mod vring;

use self::error::req;
pub use self::error::DriverError;
pub use self::frames::{decode_hdr, encode_hdr, RxFrame, VringAddrs};
pub use self::loopback::{LoopbackGuest, LoopbackOpts};
pub use self::opts::{DriverOpts, MemTableMode, RxLayout, TxLayout};
pub use self::reference::{sanitized_tx, RefChain, Reference};
pub use self::uplink::{Script, ScriptedUplink};
pub use self::vring::desc_bytes;
use self::vring::{
    need_event, split_lengths, BufAlloc, Chain, ExtentAlloc, Fill, PartialFrame, Vring, POISON,
};
pub use crate::net_hdr::VirtioNetHdr;
pub use crate::ring::DirtyLog;
pub use crate::ring::{Layout, PackedLayout, SplitLayout};

/// The engine's limits, for models and tests that must agree with the
/// engine rather than copy its numbers (the fuzz model, the differential
/// tests).
pub mod limits {
    pub use crate::queue::tx::{TX_BATCH, TX_BATCH_SEGS};
    pub use crate::queue::{HEAD_LEN, MAX_RX_CHAINS};
    pub use crate::ring::{
        BURST_DESC_BUDGET, MAX_CHAIN_DESCS, MAX_CHAIN_READS, MAX_CHAIN_SEGS, MAX_RX_FRAME_SEGS,
    };
}

/// The virtqueue flag words the engine reads (from `virtio-bindings`), for
/// drivers and models built on raw descriptors.
pub mod flags {
    pub use crate::ring::flags::{
        AVAIL_F_NO_INTERRUPT, DESC_F_AVAIL, DESC_F_INDIRECT, DESC_F_NEXT, DESC_F_USED,
        DESC_F_WRITE, EVENT_DESC, EVENT_DISABLE, EVENT_ENABLE, USED_F_NO_NOTIFY,
    };
}

// ===== constants =====

/// Feature bit of `VHOST_USER_F_PROTOCOL_FEATURES` (bit 30).
pub const VHOST_USER_F_PROTOCOL_FEATURES: u64 = VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits();

/// Features this driver never acks, whatever [`DriverOpts::features`] asks for: it only knows
/// split rings, has no IOMMU, does not log dirty pages, does not send notification data, and
/// has no control queue (QEMU keeps the control queue for itself, so a vhost-user net backend
/// never sees it).
pub const UNSUPPORTED_FEATURES: u64 = (1 << VIRTIO_F_RING_PACKED)
    | (1 << VIRTIO_F_ACCESS_PLATFORM)
    | (1 << VIRTIO_F_NOTIFICATION_DATA)
    | (1 << VIRTIO_NET_F_CTRL_VQ)
    | VhostUserVirtioFeatures::LOG_ALL.bits();

/// The features [`DriverOpts::default`] wants: `VERSION_1`, `MRG_RXBUF`, `EVENT_IDX`,
/// `INDIRECT_DESC` and `MQ`, roughly what a Linux guest acks on a plain vhost-user port.
pub const DEFAULT_FEATURES: u64 = (1 << VIRTIO_F_VERSION_1)
    | (1 << VIRTIO_NET_F_MRG_RXBUF)
    | (1 << VIRTIO_RING_F_EVENT_IDX)
    | (1 << VIRTIO_RING_F_INDIRECT_DESC)
    | (1 << VIRTIO_NET_F_MQ);

/// Byte every receive buffer is filled with before it is posted.
pub const RX_POISON: u8 = 0xa5;

/// Length of `struct virtio_net_hdr` (legacy, without `num_buffers`).
pub const NET_HDR_LEN_LEGACY: usize = 10;
/// Length of `struct virtio_net_hdr_v1` / `virtio_net_hdr_mrg_rxbuf` (with `num_buffers`).
pub const NET_HDR_LEN: usize = 12;

/// Allocation granule of the guest buffer allocator; also its alignment (>= 16, the
/// descriptor-table alignment, so indirect tables can come from the same allocator).
const ALLOC_GRANULE: u64 = 64;
/// Page size used to lay out rings and size regions.
const PAGE: u64 = 4096;
/// Size of one split-ring descriptor.
const DESC_SIZE: u64 = 16;
/// Hole left between the two regions when [`DriverOpts::split_regions`] is set.
const REGION_GAP: u64 = 1 << 30;
/// How often [`TestDriver::recv_frames_until`] looks at the used ring when no call arrives.
const POLL_INTERVAL: Duration = Duration::from_millis(5);
/// How long [`TestDriver::connect`] retries while the socket is missing or refusing.
const CONNECT_RETRY: Duration = Duration::from_secs(2);

// ===== the driver =====

/// An in-process virtio-net driver connected to a vhost-user backend. See the
/// [module documentation](self).
pub struct TestDriver {
    frontend: Frontend,
    /// A second handle on the same socket, for raw messages.
    sock: UnixStream,
    mem: GuestMemoryMmap,
    /// Kept so the memfd outlives the mappings (vm-memory also holds it).
    memfd: File,
    opts: DriverOpts,
    offered: u64,
    acked: u64,
    offered_proto: VhostUserProtocolFeatures,
    acked_proto: VhostUserProtocolFeatures,
    queue_num: Option<u64>,
    max_mem_slots: Option<u64>,
    vrings: Vec<Vring>,
    alloc: BufAlloc,
    violations: Vec<String>,
}

impl fmt::Debug for TestDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestDriver")
            .field("opts", &self.opts)
            .field("offered", &format_args!("{:#x}", self.offered))
            .field("acked", &format_args!("{:#x}", self.acked))
            .field("acked_proto", &self.acked_proto)
            .field("vrings", &self.vrings)
            .field("violations", &self.violations)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn need_event_matches_the_spec_formula() {
        // Kick when the event index was crossed by this batch.
        assert!(need_event(0, 1, 0));
        assert!(!need_event(1, 1, 0));
        assert!(need_event(5, 8, 3));
        assert!(!need_event(8, 8, 3));
        // Across the 16-bit wrap.
        assert!(need_event(65535, 2, 65534));
        assert!(!need_event(3, 2, 65534));
        // Nothing new: never.
        assert!(!need_event(7, 7, 7));
    }

    #[test]
    fn driver_is_send() {
        fn assert_send<T: Send>() {}
        assert_send::<TestDriver>();
    }

    #[test]
    fn split_lengths_add_up() {
        assert_eq!(split_lengths(10, 3), vec![4, 3, 3]);
        assert_eq!(split_lengths(9000, 1), vec![9000]);
        assert_eq!(split_lengths(5, 5), vec![1; 5]);
    }

    #[test]
    fn extent_alloc_coalesces() {
        let mut a = ExtentAlloc::new(0x1000, 0x1000);
        let x = a.alloc(0x400).unwrap();
        let y = a.alloc(0x400).unwrap();
        let z = a.alloc(0x800).unwrap();
        assert_eq!((x, y, z), (0x1000, 0x1400, 0x1800));
        assert!(a.alloc(64).is_none());
        a.release(y, 0x400);
        a.release(x, 0x400);
        a.release(z, 0x800);
        assert_eq!(a.free.len(), 1);
        assert_eq!(a.alloc(0x1000), Some(0x1000));
    }

    #[test]
    fn net_hdr_round_trips() {
        let h = VirtioNetHdr {
            flags: 1,
            gso_type: 4,
            hdr_len: 54,
            gso_size: 1448,
            csum_start: 34,
            csum_offset: 16,
            num_buffers: 3,
        };
        assert_eq!(decode_hdr(&encode_hdr(&h, NET_HDR_LEN)), h);
        let legacy = decode_hdr(&encode_hdr(&h, NET_HDR_LEN_LEGACY));
        assert_eq!(legacy.num_buffers, 0);
        assert_eq!(legacy.gso_size, 1448);
    }
}
