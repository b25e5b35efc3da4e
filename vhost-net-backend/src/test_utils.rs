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

// memfd_create(2) and poll(2) have no safe wrapper in our dependencies; everything else goes
// through vm-memory, vmm-sys-util and std.
#![allow(unsafe_code)]

use std::cell::Cell;
use std::collections::BTreeMap;
use std::ffi::CStr;
use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
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

// ===== errors =====

/// Errors of the test driver.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// [`DriverOpts`] cannot work.
    #[error("Invalid driver options: {0}")]
    InvalidOpts(String),
    /// `memfd_create` or sizing the memfd failed.
    #[error("Cannot create the guest memory file")]
    Memfd(#[source] io::Error),
    /// vm-memory could not map the guest memory.
    #[error("Cannot map guest memory")]
    MapMemory(#[source] vm_memory::mmap::FromRangesError),
    /// A guest memory access failed (an address outside guest memory).
    #[error("Guest memory access failed")]
    Memory(#[source] GuestMemoryError),
    /// Creating, writing or polling an eventfd failed.
    #[error("Eventfd operation failed")]
    EventFd(#[source] io::Error),
    /// Connecting the Unix socket failed.
    #[error("Cannot connect to the backend socket")]
    Connect(#[source] io::Error),
    /// A vhost-user request failed (transport error, bad reply, or a non-zero `REPLY_ACK`).
    #[error("Vhost-user request {request} failed")]
    Request {
        /// Name of the request.
        request: &'static str,
        /// What the `vhost` crate reported.
        #[source]
        source: vhost::Error,
    },
    /// The backend sent a reply the driver cannot accept.
    #[error("Bad reply to {request}: {detail}")]
    BadReply {
        /// Name of the request.
        request: &'static str,
        /// What was wrong with it.
        detail: String,
    },
    /// Raw I/O on the vhost-user socket failed.
    #[error("Vhost-user socket I/O failed")]
    Socket(#[source] io::Error),
    /// The backend supports fewer queue pairs than [`DriverOpts::queue_pairs`].
    #[error("Backend supports {max} queue pairs, {wanted} requested")]
    TooManyQueuePairs {
        /// What `GET_QUEUE_NUM` returned (1 without `MQ`).
        max: u64,
        /// What the options asked for.
        wanted: u16,
    },
    /// The backend has fewer memory slots than regions to add.
    #[error("Backend has {max} memory slots, {wanted} needed")]
    TooManyRegions {
        /// What `GET_MAX_MEM_SLOTS` returned.
        max: u64,
        /// Regions of the guest memory.
        wanted: usize,
    },
    /// The queue pair does not exist.
    #[error("Queue pair {0} does not exist")]
    NoSuchQueuePair(u16),
    /// The vring does not exist.
    #[error("Vring {0} does not exist")]
    NoSuchVring(usize),
    /// The ring has too few free descriptors for the chain.
    #[error("Ring full: {needed} descriptors needed, {free} free")]
    RingFull {
        /// Descriptors the chain needs.
        needed: usize,
        /// Descriptors free in the ring.
        free: usize,
    },
    /// The buffer allocator has no room left.
    #[error("Out of guest buffer memory ({0} bytes requested)")]
    OutOfMemory(u64),
    /// The layout needs a feature that was not negotiated.
    #[error("Feature {0} was not negotiated")]
    FeatureNotAcked(&'static str),
    /// The layout does not fit the buffer or the ring.
    #[error("Invalid buffer layout: {0}")]
    InvalidLayout(String),
}

impl From<GuestMemoryError> for DriverError {
    fn from(e: GuestMemoryError) -> Self {
        DriverError::Memory(e)
    }
}

/// Maps a `vhost` result into a [`DriverError::Request`] naming the request.
fn req<T>(request: &'static str, r: vhost::Result<T>) -> Result<T, DriverError> {
    r.map_err(|source| DriverError::Request { request, source })
}

// ===== options =====

/// How the guest memory table is sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MemTableMode {
    /// One `SET_MEM_TABLE` with every region (what the brief of this driver and DPDK's
    /// virtio-user use).
    #[default]
    SetMemTable,
    /// `GET_MAX_MEM_SLOTS` then one `ADD_MEM_REG` per region, which is what QEMU does once
    /// `CONFIGURE_MEM_SLOTS` is negotiated. Falls back to `SET_MEM_TABLE` when it is not.
    AddMemReg,
}

/// What the driver asks for when it connects.
///
/// Build it with struct-update syntax over [`DriverOpts::default`]:
///
/// ```
/// # use vhost_net_backend::test_utils::DriverOpts;
/// let opts = DriverOpts { queue_pairs: 2, active_pairs: 2, ..DriverOpts::default() };
/// ```
#[derive(Clone, Debug)]
pub struct DriverOpts {
    /// Queue pairs to set up: vrings `0 .. 2 * queue_pairs` (rx = `2 * i`, tx = `2 * i + 1`).
    /// More than one needs `MQ` negotiated.
    pub queue_pairs: u16,
    /// How many pairs (from pair 0) get `SET_VRING_ENABLE 1`; the others get
    /// `SET_VRING_ENABLE 0`. Only sent when `VHOST_USER_F_PROTOCOL_FEATURES` is acked.
    pub active_pairs: u16,
    /// Size of every vring; a power of two, at most 32768.
    pub queue_size: u16,
    /// Virtio feature bits the driver wants. Acked: `features & offered & !UNSUPPORTED_FEATURES`,
    /// plus `VHOST_USER_F_PROTOCOL_FEATURES` whenever it is offered.
    pub features: u64,
    /// Protocol features the driver wants; acked: `protocol_features & offered`.
    pub protocol_features: VhostUserProtocolFeatures,
    /// Guest memory size in bytes, a multiple of 8 KiB. Rings take a few pages at the start of
    /// the first region; the rest is buffer space.
    pub mem_size: u64,
    /// Guest-physical address of the first region. Nonzero by default, so that GPA/HVA mixups
    /// in a backend fail.
    pub gpa_base: u64,
    /// Split guest memory into two equal regions (two mappings of the memfd, 1 GiB apart in
    /// GPA space), to exercise the backend's region lookup. Buffers are taken from both
    /// regions in turn; no buffer straddles them.
    pub split_regions: bool,
    /// How the memory table is sent.
    pub mem_table: MemTableMode,
    /// Set `NEED_REPLY` on every request once `REPLY_ACK` is negotiated.
    pub need_reply: bool,
    /// Kick on every `kick_*` call, ignoring `avail_event` and `VRING_USED_F_NO_NOTIFY`.
    pub always_kick: bool,
    /// Read timeout on the vhost-user socket, so a backend that never replies fails the test
    /// instead of hanging it. `None` blocks forever.
    pub reply_timeout: Option<Duration>,
}

impl Default for DriverOpts {
    fn default() -> Self {
        DriverOpts {
            queue_pairs: 1,
            active_pairs: 1,
            queue_size: 256,
            features: DEFAULT_FEATURES,
            protocol_features: VhostUserProtocolFeatures::MQ
                | VhostUserProtocolFeatures::REPLY_ACK
                | VhostUserProtocolFeatures::CONFIGURE_MEM_SLOTS,
            mem_size: 32 << 20,
            gpa_base: 0x1_0000_0000,
            split_regions: false,
            mem_table: MemTableMode::SetMemTable,
            need_reply: true,
            always_kick: false,
            reply_timeout: Some(Duration::from_secs(10)),
        }
    }
}

impl DriverOpts {
    fn validate(&self) -> Result<(), DriverError> {
        let bad = |s: &str| Err(DriverError::InvalidOpts(s.to_string()));
        if self.queue_pairs == 0 {
            return bad("queue_pairs must be at least 1");
        }
        if self.active_pairs > self.queue_pairs {
            return bad("active_pairs must not exceed queue_pairs");
        }
        if self.queue_size == 0 || !self.queue_size.is_power_of_two() || self.queue_size > 32768 {
            return bad("queue_size must be a power of two in 1..=32768");
        }
        if self.mem_size == 0 || self.mem_size % (2 * PAGE) != 0 {
            return bad("mem_size must be a nonzero multiple of 8 KiB");
        }
        if self.gpa_base % PAGE != 0 {
            return bad("gpa_base must be page aligned");
        }
        Ok(())
    }
}

// ===== layouts and frames =====

/// How one receive buffer is described.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RxLayout {
    /// One device-writable descriptor of `buf_len` bytes.
    Single,
    /// A chain of `n` device-writable descriptors whose lengths add up to `buf_len`.
    Split(u16),
    /// One `VRING_DESC_F_INDIRECT` descriptor pointing at a table of `n` device-writable
    /// descriptors whose lengths add up to `buf_len`. Needs `INDIRECT_DESC`.
    Indirect(u16),
}

/// How one transmitted frame is described.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxLayout {
    /// Header and frame in one descriptor.
    Single,
    /// The header in one descriptor, the frame in a second one (the legacy layout).
    HeaderSplit,
    /// Header and frame concatenated, then cut into `n` descriptors of (almost) equal length;
    /// the cuts fall wherever they fall, header included.
    Segments(u16),
    /// Like [`TxLayout::Segments`], but in an indirect table behind one descriptor. Needs
    /// `INDIRECT_DESC`.
    Indirect(u16),
}

/// A frame taken from a receive queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RxFrame {
    /// The virtio-net header as the device wrote it ([`TestDriver::hdr_len`] bytes, fewer only
    /// if the device reported a shorter length, which is recorded as a violation).
    pub hdr: Vec<u8>,
    /// The frame after the header, across all its buffers.
    pub data: Vec<u8>,
    /// How many buffers (used elements) the frame took: the header's `num_buffers` with
    /// `MRG_RXBUF`, else 1.
    pub num_buffers: u16,
    /// The used elements that made up the frame, as `(id, len)`.
    pub used: Vec<(u16, u32)>,
}

impl RxFrame {
    /// The header, decoded.
    pub fn net_hdr(&self) -> NetHdr {
        NetHdr::parse(&self.hdr)
    }
}

/// `struct virtio_net_hdr_v1`, for building transmit headers and decoding receive headers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetHdr {
    /// `flags` (`VIRTIO_NET_HDR_F_*`).
    pub flags: u8,
    /// `gso_type` (`VIRTIO_NET_HDR_GSO_*`).
    pub gso_type: u8,
    /// `hdr_len`.
    pub hdr_len: u16,
    /// `gso_size`.
    pub gso_size: u16,
    /// `csum_start`.
    pub csum_start: u16,
    /// `csum_offset`.
    pub csum_offset: u16,
    /// `num_buffers` (only in the 12-byte header).
    pub num_buffers: u16,
}

impl NetHdr {
    /// Encodes the header in `len` bytes (10 or 12; other lengths truncate or zero-pad).
    pub fn to_bytes(&self, len: usize) -> Vec<u8> {
        let mut b = Vec::with_capacity(NET_HDR_LEN);
        b.push(self.flags);
        b.push(self.gso_type);
        for v in [
            self.hdr_len,
            self.gso_size,
            self.csum_start,
            self.csum_offset,
            self.num_buffers,
        ] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.resize(len, 0);
        b
    }

    /// Decodes a header; missing bytes read as zero.
    pub fn parse(b: &[u8]) -> NetHdr {
        let byte = |i: usize| b.get(i).copied().unwrap_or(0);
        let word = |i: usize| u16::from_le_bytes([byte(i), byte(i + 1)]);
        NetHdr {
            flags: byte(0),
            gso_type: byte(1),
            hdr_len: word(2),
            gso_size: word(4),
            csum_start: word(6),
            csum_offset: word(8),
            num_buffers: word(10),
        }
    }
}

/// Guest-physical addresses of one vring's parts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VringAddrs {
    /// Descriptor table.
    pub desc: u64,
    /// Available ring (`flags`, `idx`, `ring[size]`, `used_event`).
    pub avail: u64,
    /// Used ring (`flags`, `idx`, `ring[size]`, `avail_event`).
    pub used: u64,
    /// Ring size.
    pub size: u16,
}

impl VringAddrs {
    fn avail_idx(&self) -> GuestAddress {
        GuestAddress(self.avail + 2)
    }
    fn avail_entry(&self, idx: u16) -> GuestAddress {
        GuestAddress(self.avail + 4 + 2 * u64::from(idx % self.size))
    }
    fn used_event(&self) -> GuestAddress {
        GuestAddress(self.avail + 4 + 2 * u64::from(self.size))
    }
    fn used_idx(&self) -> GuestAddress {
        GuestAddress(self.used + 2)
    }
    fn used_entry(&self, idx: u16) -> GuestAddress {
        GuestAddress(self.used + 4 + 8 * u64::from(idx % self.size))
    }
    fn avail_event(&self) -> GuestAddress {
        GuestAddress(self.used + 4 + 8 * u64::from(self.size))
    }
    fn desc(&self, id: u16) -> GuestAddress {
        GuestAddress(self.desc + DESC_SIZE * u64::from(id))
    }
}

// ===== guest buffer allocator =====

/// First-fit extent allocator over one region's buffer space.
#[derive(Debug)]
struct ExtentAlloc {
    /// Free extents, start -> length, coalesced.
    free: BTreeMap<u64, u64>,
}

impl ExtentAlloc {
    fn new(start: u64, len: u64) -> Self {
        let mut free = BTreeMap::new();
        if len > 0 {
            free.insert(start, len);
        }
        ExtentAlloc { free }
    }

    fn alloc(&mut self, len: u64) -> Option<u64> {
        let (&start, &flen) = self.free.iter().find(|(_, &l)| l >= len)?;
        self.free.remove(&start);
        if flen > len {
            self.free.insert(start + len, flen - len);
        }
        Some(start)
    }

    fn release(&mut self, start: u64, len: u64) {
        let (mut s, mut l) = (start, len);
        if let Some((&ps, &pl)) = self.free.range(..start).next_back() {
            debug_assert!(ps + pl <= start, "double free of guest extent {start:#x}");
            if ps + pl == start {
                self.free.remove(&ps);
                s = ps;
                l += pl;
            }
        }
        if let Some(&nl) = self.free.get(&(start + len)) {
            self.free.remove(&(start + len));
            l += nl;
        }
        self.free.insert(s, l);
    }
}

/// Buffer space of all regions, handed out round-robin across regions.
#[derive(Debug)]
struct BufAlloc {
    /// `(region start GPA, region end GPA, allocator)`.
    regions: Vec<(u64, u64, ExtentAlloc)>,
    next: usize,
}

impl BufAlloc {
    /// Allocates `len` bytes (rounded up to the granule); returns `(gpa, rounded length)`.
    fn alloc(&mut self, len: u64) -> Result<(u64, u64), DriverError> {
        let rounded = len.max(1).div_ceil(ALLOC_GRANULE) * ALLOC_GRANULE;
        let n = self.regions.len();
        for i in 0..n {
            let r = (self.next + i) % n;
            if let Some(gpa) = self.regions[r].2.alloc(rounded) {
                self.next = (r + 1) % n;
                return Ok((gpa, rounded));
            }
        }
        Err(DriverError::OutOfMemory(len))
    }

    fn release(&mut self, gpa: u64, len: u64) {
        if let Some(r) = self
            .regions
            .iter_mut()
            .find(|(s, e, _)| *s <= gpa && gpa < *e)
        {
            r.2.release(gpa, len);
        }
    }
}

// ===== vrings =====

/// A chain the driver made available and has not got back yet.
#[derive(Debug)]
struct Chain {
    /// Descriptor ids of the ring's own table that the chain holds.
    descs: Vec<u16>,
    /// Guest extents to free, `(gpa, len)`.
    allocs: Vec<(u64, u64)>,
    /// The data buffers in chain order, `(gpa, len)`.
    bufs: Vec<(u64, u32)>,
}

impl Chain {
    fn capacity(&self) -> u64 {
        self.bufs.iter().map(|&(_, l)| u64::from(l)).sum()
    }
}

/// A mergeable receive frame whose later buffers have not been used yet.
#[derive(Debug)]
struct PartialFrame {
    frame: RxFrame,
    expected: u16,
}

/// Driver-side state of one vring.
struct Vring {
    index: usize,
    addrs: VringAddrs,
    kick: EventFd,
    call: EventFd,
    /// Free descriptor ids.
    free_descs: Vec<u16>,
    /// In-flight chains by head id.
    chains: Vec<Option<Chain>>,
    /// Heads published with `push_avail` and not yet used.
    raw_heads: Vec<bool>,
    /// Used elements for raw heads, kept for `take_raw_used`.
    raw_used: Vec<(u16, u32)>,
    /// Shadow of `avail.idx`: the next avail index to fill.
    next_avail: u16,
    /// Next used index to consume.
    last_used: u16,
    /// `next_avail` when `kick` last ran (the `old` of `vring_need_event`).
    kicked_at: Cell<u16>,
    /// Write `used_event = last_used` after consuming (EVENT_IDX).
    auto_used_event: bool,
    partial: Option<PartialFrame>,
    /// `GET_VRING_BASE` was sent.
    stopped: bool,
}

impl fmt::Debug for Vring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Vring")
            .field("index", &self.index)
            .field("addrs", &self.addrs)
            .field("free_descs", &self.free_descs.len())
            .field("in_flight", &self.chains.iter().flatten().count())
            .field("next_avail", &self.next_avail)
            .field("last_used", &self.last_used)
            .field("stopped", &self.stopped)
            .finish()
    }
}

/// `vring_need_event` from the virtio spec (2.7.10): should the other side be notified now
/// that the index moved from `old` to `new`, given it asked for a notification at `event`?
fn need_event(event: u16, new: u16, old: u16) -> bool {
    new.wrapping_sub(event).wrapping_sub(1) < new.wrapping_sub(old)
}

/// What a new chain's buffers are filled with.
#[derive(Clone, Copy)]
enum Fill<'a> {
    /// Device-writable buffers filled with [`RX_POISON`].
    Poison,
    /// Device-readable buffers holding the concatenation of the two slices.
    Bytes(&'a [u8], &'a [u8]),
}

/// Source of [`RX_POISON`] bytes.
static POISON: [u8; 4096] = [RX_POISON; 4096];

/// Cuts `total` bytes into `n` pieces whose lengths differ by at most one.
fn split_lengths(total: usize, n: usize) -> Vec<usize> {
    let (base, rem) = (total / n, total % n);
    (0..n).map(|i| base + usize::from(i < rem)).collect()
}

/// Encodes one split-ring descriptor.
fn desc_bytes(addr: u64, len: u32, flags: u16, next: u16) -> [u8; 16] {
    let mut d = [0u8; 16];
    d[0..8].copy_from_slice(&addr.to_le_bytes());
    d[8..12].copy_from_slice(&len.to_le_bytes());
    d[12..14].copy_from_slice(&flags.to_le_bytes());
    d[14..16].copy_from_slice(&next.to_le_bytes());
    d
}

// ===== syscall wrappers =====

/// Creates an anonymous memfd of `len` bytes.
fn memfd(name: &CStr, len: u64) -> io::Result<File> {
    // SAFETY: `name` is a valid NUL-terminated string and MFD_CLOEXEC a valid flag; the call
    // touches no memory of ours beyond reading `name`.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: memfd_create just returned `fd`, so it is open and nothing else owns it.
    let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    file.set_len(len)?;
    Ok(file)
}

/// Polls one fd for `events`; returns the `revents` (0 on timeout). Retries on EINTR.
fn poll_fd(fd: RawFd, events: i16, timeout: Duration) -> io::Result<i16> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let ms = i32::try_from(left.as_micros().div_ceil(1000)).unwrap_or(i32::MAX);
        let mut pfd = libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        // SAFETY: `pfd` is a valid pollfd that lives across the call, and nfds is 1.
        let r = unsafe { libc::poll(&raw mut pfd, 1, ms) };
        if r >= 0 {
            return Ok(if r == 0 { 0 } else { pfd.revents });
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Connects a Unix stream socket, retrying for [`CONNECT_RETRY`] while the path is missing or
/// refuses connections (a backend that is still starting).
fn connect_socket(path: &Path) -> Result<UnixStream, DriverError> {
    let start = Instant::now();
    loop {
        match UnixStream::connect(path) {
            Ok(s) => return Ok(s),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::ConnectionRefused | io::ErrorKind::NotFound
                ) && start.elapsed() < CONNECT_RETRY =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(DriverError::Connect(e)),
        }
    }
}

// ===== the driver =====

/// An in-process virtio-net driver connected to a vhost-user backend. See the
/// [module documentation](self).
pub struct TestDriver {
    frontend: Frontend,
    /// A second handle on the same socket, for raw messages.
    sock: UnixStream,
    mem: GuestMemoryMmap,
    /// Kept so the memfd outlives the mappings (vm-memory also holds it).
    _memfd: File,
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

impl TestDriver {
    /// Connects to a backend listening on `path` (the backend is the server) and brings the
    /// device up. Retries for up to 2 s while the socket is missing or refuses connections.
    ///
    /// # Errors
    ///
    /// Any failure of the bring-up, see [`DriverError`].
    pub fn connect(path: &Path, opts: DriverOpts) -> Result<Self, DriverError> {
        opts.validate()?;
        Self::from_stream(connect_socket(path)?, opts)
    }

    /// Brings the device up over an already connected socket: the backend connected to us
    /// (client mode), the test accepted on its own `UnixListener` and hands the stream in.
    ///
    /// # Errors
    ///
    /// Any failure of the bring-up, see [`DriverError`].
    pub fn from_stream(sock: UnixStream, opts: DriverOpts) -> Result<Self, DriverError> {
        opts.validate()?;
        let (frontend, raw) = Self::frontend_on(sock, &opts)?;
        let (mem, memfd, vrings, alloc) = Self::build_memory(&opts)?;
        let mut drv = TestDriver {
            frontend,
            sock: raw,
            mem,
            _memfd: memfd,
            opts,
            offered: 0,
            acked: 0,
            offered_proto: VhostUserProtocolFeatures::empty(),
            acked_proto: VhostUserProtocolFeatures::empty(),
            queue_num: None,
            max_mem_slots: None,
            vrings,
            alloc,
            violations: Vec::new(),
        };
        drv.bring_up()?;
        Ok(drv)
    }

    /// Wraps a connected socket in a [`Frontend`], plus a second handle for raw messages.
    fn frontend_on(
        sock: UnixStream,
        opts: &DriverOpts,
    ) -> Result<(Frontend, UnixStream), DriverError> {
        sock.set_read_timeout(opts.reply_timeout)
            .map_err(DriverError::Socket)?;
        let raw = sock.try_clone().map_err(DriverError::Socket)?;
        let nvrings = 2 * u64::from(opts.queue_pairs);
        Ok((Frontend::from_stream(sock, nvrings), raw))
    }

    /// Drops the current connection and brings the device up again over `path`, keeping guest
    /// memory, the rings and every chain in flight, like QEMU when a backend restarts: each
    /// vring's `SET_VRING_BASE` is the `used.idx` found in guest memory, so the backend takes
    /// up again every chain made available but not used yet (transmit frames in flight may be
    /// sent twice). Kick afterwards.
    ///
    /// # Errors
    ///
    /// Any failure of the bring-up, see [`DriverError`]; the driver is then disconnected.
    pub fn reconnect(&mut self, path: &Path) -> Result<(), DriverError> {
        self.reconnect_stream(connect_socket(path)?)
    }

    /// [`TestDriver::reconnect`] over an already connected socket (client mode).
    ///
    /// # Errors
    ///
    /// Any failure of the bring-up, see [`DriverError`]; the driver is then disconnected.
    pub fn reconnect_stream(&mut self, sock: UnixStream) -> Result<(), DriverError> {
        let (frontend, raw) = Self::frontend_on(sock, &self.opts)?;
        // Replacing both handles closes the old connection.
        self.frontend = frontend;
        self.sock = raw;
        self.offered_proto = VhostUserProtocolFeatures::empty();
        self.acked_proto = VhostUserProtocolFeatures::empty();
        self.queue_num = None;
        self.max_mem_slots = None;
        for v in &mut self.vrings {
            v.stopped = false;
        }
        self.bring_up()
    }

    /// Maps guest memory and lays out the rings at the start of the first region.
    #[allow(clippy::type_complexity)]
    fn build_memory(
        opts: &DriverOpts,
    ) -> Result<(GuestMemoryMmap, File, Vec<Vring>, BufAlloc), DriverError> {
        let file = memfd(c"vhu-test-guest", opts.mem_size).map_err(DriverError::Memfd)?;
        let region_len = if opts.split_regions {
            opts.mem_size / 2
        } else {
            opts.mem_size
        };
        let mut layout = vec![(opts.gpa_base, 0u64)];
        if opts.split_regions {
            layout.push((opts.gpa_base + region_len + REGION_GAP, region_len));
        }
        let usize_len = usize::try_from(region_len)
            .map_err(|_| DriverError::InvalidOpts("mem_size too large".into()))?;
        let mut ranges = Vec::new();
        for &(gpa, off) in &layout {
            let f = file.try_clone().map_err(DriverError::Memfd)?;
            ranges.push((GuestAddress(gpa), usize_len, Some(FileOffset::new(f, off))));
        }
        let mem =
            GuestMemoryMmap::from_ranges_with_files(&ranges).map_err(DriverError::MapMemory)?;

        // Rings: desc table, avail ring, used ring, each on its own pages.
        let n = u64::from(opts.queue_size);
        let desc_len = (DESC_SIZE * n).next_multiple_of(PAGE);
        let avail_len = (6 + 2 * n).next_multiple_of(PAGE);
        let used_len = (6 + 8 * n).next_multiple_of(PAGE);
        let per_ring = desc_len + avail_len + used_len;
        let nvrings = 2 * usize::from(opts.queue_pairs);
        let rings_len = per_ring * nvrings as u64;
        if rings_len > region_len / 2 {
            return Err(DriverError::InvalidOpts(format!(
                "rings need {rings_len} bytes, more than half of a {region_len}-byte region"
            )));
        }
        let mut vrings = Vec::with_capacity(nvrings);
        for index in 0..nvrings {
            let base = opts.gpa_base + per_ring * index as u64;
            let addrs = VringAddrs {
                desc: base,
                avail: base + desc_len,
                used: base + desc_len + avail_len,
                size: opts.queue_size,
            };
            vrings.push(Vring {
                index,
                addrs,
                kick: EventFd::new(EFD_NONBLOCK).map_err(DriverError::EventFd)?,
                call: EventFd::new(EFD_NONBLOCK).map_err(DriverError::EventFd)?,
                free_descs: (0..opts.queue_size).rev().collect(),
                chains: (0..opts.queue_size).map(|_| None).collect(),
                raw_heads: vec![false; usize::from(opts.queue_size)],
                raw_used: Vec::new(),
                next_avail: 0,
                last_used: 0,
                kicked_at: Cell::new(0),
                auto_used_event: true,
                partial: None,
                stopped: false,
            });
        }

        let mut regions = vec![(
            opts.gpa_base,
            opts.gpa_base + region_len,
            ExtentAlloc::new(opts.gpa_base + rings_len, region_len - rings_len),
        )];
        if let Some(&(gpa, _)) = layout.get(1) {
            regions.push((gpa, gpa + region_len, ExtentAlloc::new(gpa, region_len)));
        }
        Ok((mem, file, vrings, BufAlloc { regions, next: 0 }))
    }

    /// The QEMU-like bring-up sequence.
    fn bring_up(&mut self) -> Result<(), DriverError> {
        let fe = &mut self.frontend;
        req("SET_OWNER", fe.set_owner())?;
        self.offered = req("GET_FEATURES", fe.get_features())?;
        let has_proto = self.offered & VHOST_USER_F_PROTOCOL_FEATURES != 0;
        if has_proto {
            self.offered_proto = req("GET_PROTOCOL_FEATURES", fe.get_protocol_features())?;
            self.acked_proto = self.offered_proto & self.opts.protocol_features;
            req(
                "SET_PROTOCOL_FEATURES",
                fe.set_protocol_features(self.acked_proto),
            )?;
            // Only now: some backends (DPDK) answer NEED_REPLY on any message, negotiated or
            // not, while the vhost crate only waits for the ack once REPLY_ACK is acked.
            if self.opts.need_reply
                && self
                    .acked_proto
                    .contains(VhostUserProtocolFeatures::REPLY_ACK)
            {
                fe.set_hdr_flags(VhostUserHeaderFlag::NEED_REPLY);
            }
        }
        let max_pairs = if self.acked_proto.contains(VhostUserProtocolFeatures::MQ) {
            let n = self.raw_get_queue_num()?;
            self.queue_num = Some(n);
            n
        } else {
            1
        };
        if u64::from(self.opts.queue_pairs) > max_pairs {
            return Err(DriverError::TooManyQueuePairs {
                max: max_pairs,
                wanted: self.opts.queue_pairs,
            });
        }

        self.acked = (self.opts.features & self.offered & !UNSUPPORTED_FEATURES)
            | (self.offered & VHOST_USER_F_PROTOCOL_FEATURES);
        let fe = &mut self.frontend;
        req("SET_FEATURES", fe.set_features(self.acked))?;

        let regions = self
            .mem
            .iter()
            .map(VhostUserMemoryRegionInfo::from_guest_region)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|source| DriverError::Request {
                request: "SET_MEM_TABLE",
                source,
            })?;
        let slots = self
            .acked_proto
            .contains(VhostUserProtocolFeatures::CONFIGURE_MEM_SLOTS);
        if self.opts.mem_table == MemTableMode::AddMemReg && slots {
            let max = req("GET_MAX_MEM_SLOTS", fe.get_max_mem_slots())?;
            self.max_mem_slots = Some(max);
            if (regions.len() as u64) > max {
                return Err(DriverError::TooManyRegions {
                    max,
                    wanted: regions.len(),
                });
            }
            for r in &regions {
                req("ADD_MEM_REG", fe.add_mem_region(r))?;
            }
        } else {
            req("SET_MEM_TABLE", fe.set_mem_table(&regions))?;
        }

        for qp in 0..self.opts.queue_pairs {
            for vring in [2 * usize::from(qp), 2 * usize::from(qp) + 1] {
                self.setup_vring(vring)?;
            }
            if has_proto {
                let on = qp < self.opts.active_pairs;
                self.set_pair_enabled(qp, on)?;
            }
        }
        Ok(())
    }

    /// `SET_VRING_NUM`, `SET_VRING_BASE`, `SET_VRING_ADDR`, `SET_VRING_KICK`,
    /// `SET_VRING_CALL` for one vring. The base is `used.idx` as found in guest memory: 0 on a
    /// fresh ring, where the backend left off on a reconnect (what QEMU restores after a
    /// backend restart).
    fn setup_vring(&mut self, index: usize) -> Result<(), DriverError> {
        let v = &self.vrings[index];
        let base = u16::from_le(self.mem.load(v.addrs.used_idx(), Ordering::Acquire)?);
        self.setup_vring_at(index, base)
    }

    fn setup_vring_at(&mut self, index: usize, base: u16) -> Result<(), DriverError> {
        let v = &self.vrings[index];
        let hva = |gpa: u64| -> Result<u64, DriverError> {
            Ok(self.mem.get_host_address(GuestAddress(gpa))? as u64)
        };
        let config = VringConfigData {
            queue_max_size: v.addrs.size,
            queue_size: v.addrs.size,
            flags: 0,
            desc_table_addr: hva(v.addrs.desc)?,
            used_ring_addr: hva(v.addrs.used)?,
            avail_ring_addr: hva(v.addrs.avail)?,
            log_addr: None,
        };
        let fe = &self.frontend;
        req("SET_VRING_NUM", fe.set_vring_num(index, v.addrs.size))?;
        req("SET_VRING_BASE", fe.set_vring_base(index, base))?;
        req("SET_VRING_ADDR", fe.set_vring_addr(index, &config))?;
        req("SET_VRING_KICK", fe.set_vring_kick(index, &v.kick))?;
        req("SET_VRING_CALL", fe.set_vring_call(index, &v.call))?;
        Ok(())
    }

    /// Sends `GET_QUEUE_NUM` on the raw socket.
    ///
    /// The vhost crate's `Frontend::get_queue_num` stores the answer as its limit on vring
    /// *indices*, but for virtio-net the answer is the number of queue *pairs* (QEMU and DPDK),
    /// so after it the crate would refuse vrings `n .. 2n`. The bytes on the wire are the same.
    fn raw_get_queue_num(&mut self) -> Result<u64, DriverError> {
        let code = u32::from(FrontendReq::GET_QUEUE_NUM);
        self.send_raw(code, 0, &[], &[])?;
        let (rcode, flags, body) = self.recv_raw()?;
        if rcode != code || flags & VhostUserHeaderFlag::REPLY.bits() == 0 || body.len() != 8 {
            return Err(DriverError::BadReply {
                request: "GET_QUEUE_NUM",
                detail: format!("request {rcode}, flags {flags:#x}, {} bytes", body.len()),
            });
        }
        let mut v = [0u8; 8];
        v.copy_from_slice(&body);
        Ok(u64::from_le_bytes(v))
    }

    // ===== negotiation results =====

    /// The virtio features the backend offered (`GET_FEATURES`).
    pub fn offered_features(&self) -> u64 {
        self.offered
    }

    /// The virtio features the driver acked (`SET_FEATURES`).
    pub fn acked_features(&self) -> u64 {
        self.acked
    }

    /// Whether virtio feature `bit` was acked.
    pub fn has_feature(&self, bit: u32) -> bool {
        bit < 64 && self.acked & (1 << bit) != 0
    }

    /// The protocol features the driver acked (`SET_PROTOCOL_FEATURES`).
    pub fn protocol_features(&self) -> VhostUserProtocolFeatures {
        self.acked_proto
    }

    /// The protocol features the backend offered (`GET_PROTOCOL_FEATURES`).
    pub fn offered_protocol_features(&self) -> VhostUserProtocolFeatures {
        self.offered_proto
    }

    /// What `GET_QUEUE_NUM` returned, if it was sent (only with `MQ`).
    pub fn queue_num(&self) -> Option<u64> {
        self.queue_num
    }

    /// What `GET_MAX_MEM_SLOTS` returned, if it was sent ([`MemTableMode::AddMemReg`]).
    pub fn max_mem_slots(&self) -> Option<u64> {
        self.max_mem_slots
    }

    /// The options the driver was built with.
    pub fn opts(&self) -> &DriverOpts {
        &self.opts
    }

    /// Length of the virtio-net header: 12 with `VERSION_1` or `MRG_RXBUF`, else 10.
    pub fn hdr_len(&self) -> usize {
        if self.has_feature(VIRTIO_F_VERSION_1) || self.has_feature(VIRTIO_NET_F_MRG_RXBUF) {
            NET_HDR_LEN
        } else {
            NET_HDR_LEN_LEGACY
        }
    }

    /// A zeroed virtio-net header of [`TestDriver::hdr_len`] bytes (no offloads).
    pub fn zero_hdr(&self) -> Vec<u8> {
        vec![0; self.hdr_len()]
    }

    // ===== raw access =====

    /// The `vhost` crate's frontend, for protocol tests (unusual sequences, bad values).
    pub fn frontend(&mut self) -> &mut Frontend {
        &mut self.frontend
    }

    /// Guest memory.
    pub fn memory(&self) -> &GuestMemoryMmap {
        &self.mem
    }

    /// A second handle on the vhost-user socket (same connection as the frontend).
    pub fn raw_socket(&self) -> &UnixStream {
        &self.sock
    }

    /// Sends one raw vhost-user message: a header (`request`, `flags | 1` for version 1,
    /// payload size) then `payload`, with `fds` as `SCM_RIGHTS`. Nothing is checked, so this
    /// can send malformed requests. Do not interleave with frontend calls that await a reply.
    ///
    /// # Errors
    ///
    /// [`DriverError::Socket`] if the send fails.
    pub fn send_raw(
        &self,
        request: u32,
        flags: u32,
        payload: &[u8],
        fds: &[RawFd],
    ) -> Result<(), DriverError> {
        let size = u32::try_from(payload.len())
            .map_err(|_| DriverError::Socket(io::Error::other("payload too large")))?;
        let mut msg = Vec::with_capacity(12 + payload.len());
        msg.extend_from_slice(&request.to_le_bytes());
        msg.extend_from_slice(&(flags | 1).to_le_bytes());
        msg.extend_from_slice(&size.to_le_bytes());
        msg.extend_from_slice(payload);
        let sent = self
            .sock
            .send_with_fds(&[msg.as_slice()], fds)
            .map_err(|e| DriverError::Socket(io::Error::from_raw_os_error(e.errno())))?;
        if sent != msg.len() {
            return Err(DriverError::Socket(io::Error::other("short send")));
        }
        Ok(())
    }

    /// Receives one raw message: `(request, flags, payload)`. Waits at most
    /// [`DriverOpts::reply_timeout`]. File descriptors are not collected.
    ///
    /// # Errors
    ///
    /// [`DriverError::Socket`] on EOF, timeout or a read error.
    pub fn recv_raw(&self) -> Result<(u32, u32, Vec<u8>), DriverError> {
        let mut s = &self.sock;
        let mut hdr = [0u8; 12];
        s.read_exact(&mut hdr).map_err(DriverError::Socket)?;
        let word = |i: usize| u32::from_le_bytes([hdr[i], hdr[i + 1], hdr[i + 2], hdr[i + 3]]);
        let (code, flags, size) = (word(0), word(4), word(8));
        if size > 0x1000 {
            return Err(DriverError::Socket(io::Error::other(format!(
                "reply payload of {size} bytes"
            ))));
        }
        let mut body = vec![0u8; size as usize];
        s.read_exact(&mut body).map_err(DriverError::Socket)?;
        Ok((code, flags, body))
    }

    /// Waits up to `timeout` for the backend to close the connection (`POLLRDHUP`). Returns
    /// `false` if it is still open; data the backend sends meanwhile is left unread.
    pub fn wait_backend_hangup(&self, timeout: Duration) -> bool {
        let hup = libc::POLLHUP | libc::POLLRDHUP | libc::POLLERR;
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match poll_fd(self.sock.as_raw_fd(), libc::POLLRDHUP, left) {
                Ok(r) if r & hup != 0 => return true,
                Ok(0) | Err(_) => return false,
                // Readable data but no hang-up yet: poll again, without spinning.
                Ok(_) => std::thread::sleep(Duration::from_millis(1)),
            }
            if left.is_zero() {
                return false;
            }
        }
    }

    /// Sends `SET_VRING_ENABLE` for both vrings of queue pair `qp`.
    ///
    /// # Errors
    ///
    /// [`DriverError::NoSuchQueuePair`], or the request failed.
    pub fn set_pair_enabled(&mut self, qp: u16, enable: bool) -> Result<(), DriverError> {
        let rx = self.vring_index(qp, true)?;
        for v in [rx, rx + 1] {
            req(
                "SET_VRING_ENABLE",
                self.frontend.set_vring_enable(v, enable),
            )?;
        }
        Ok(())
    }

    /// Sends `GET_VRING_BASE`, which stops the vring; returns the backend's next avail index.
    /// The driver keeps its ring state, so buffers still in flight stay accounted for.
    ///
    /// # Errors
    ///
    /// [`DriverError::NoSuchVring`], or the request failed.
    pub fn get_vring_base(&mut self, vring: usize) -> Result<u32, DriverError> {
        let v = self
            .vrings
            .get_mut(vring)
            .ok_or(DriverError::NoSuchVring(vring))?;
        let base = req("GET_VRING_BASE", self.frontend.get_vring_base(vring))?;
        v.stopped = true;
        Ok(base)
    }

    /// Starts a vring again after [`TestDriver::get_vring_base`]: `SET_VRING_NUM`,
    /// `SET_VRING_BASE base`, `SET_VRING_ADDR`, `SET_VRING_KICK`, `SET_VRING_CALL`, then
    /// `SET_VRING_ENABLE 1` when protocol features are negotiated. Pass the base
    /// `get_vring_base` returned to resume where the backend stopped. Kick afterwards.
    ///
    /// # Errors
    ///
    /// [`DriverError::NoSuchVring`], or a request failed.
    pub fn resume_vring(&mut self, vring: usize, base: u16) -> Result<(), DriverError> {
        if vring >= self.vrings.len() {
            return Err(DriverError::NoSuchVring(vring));
        }
        self.setup_vring_at(vring, base)?;
        if self.acked & VHOST_USER_F_PROTOCOL_FEATURES != 0 {
            req(
                "SET_VRING_ENABLE",
                self.frontend.set_vring_enable(vring, true),
            )?;
        }
        self.vrings[vring].stopped = false;
        Ok(())
    }

    /// Whether [`TestDriver::get_vring_base`] stopped the vring (and it was not resumed).
    pub fn is_stopped(&self, vring: usize) -> bool {
        self.vrings.get(vring).is_some_and(|v| v.stopped)
    }

    /// Closes the connection (the frontend and the raw socket handle) and unmaps guest memory.
    pub fn disconnect(self) {
        drop(self);
    }

    // ===== vring addressing =====

    /// Vring index of queue pair `qp`'s receive (`rx`) or transmit queue.
    ///
    /// # Errors
    ///
    /// [`DriverError::NoSuchQueuePair`].
    pub fn vring_index(&self, qp: u16, rx: bool) -> Result<usize, DriverError> {
        if qp >= self.opts.queue_pairs {
            return Err(DriverError::NoSuchQueuePair(qp));
        }
        Ok(2 * usize::from(qp) + usize::from(!rx))
    }

    fn vring(&self, qp: u16, rx: bool) -> Result<&Vring, DriverError> {
        let i = self.vring_index(qp, rx)?;
        Ok(&self.vrings[i])
    }

    /// Guest-physical addresses of a vring's parts.
    ///
    /// # Errors
    ///
    /// [`DriverError::NoSuchQueuePair`].
    pub fn vring_addrs(&self, qp: u16, rx: bool) -> Result<VringAddrs, DriverError> {
        Ok(self.vring(qp, rx)?.addrs)
    }

    /// The kick eventfd of a vring (the backend waits on it).
    ///
    /// # Errors
    ///
    /// [`DriverError::NoSuchQueuePair`].
    pub fn kick_fd(&self, qp: u16, rx: bool) -> Result<&EventFd, DriverError> {
        Ok(&self.vring(qp, rx)?.kick)
    }

    /// The call eventfd of a vring (the backend signals it).
    ///
    /// # Errors
    ///
    /// [`DriverError::NoSuchQueuePair`].
    pub fn call_fd(&self, qp: u16, rx: bool) -> Result<&EventFd, DriverError> {
        Ok(&self.vring(qp, rx)?.call)
    }

    /// Free descriptors in a vring (0 for a queue pair that does not exist).
    pub fn free_descriptors(&self, qp: u16, rx: bool) -> usize {
        self.vring(qp, rx).map_or(0, |v| v.free_descs.len())
    }

    /// Chains made available through the allocator and not used yet (0 for a queue pair that
    /// does not exist).
    pub fn in_flight(&self, qp: u16, rx: bool) -> usize {
        self.vring(qp, rx)
            .map_or(0, |v| v.chains.iter().flatten().count())
    }

    // ===== chain building =====

    fn check_indirect(&self) -> Result<(), DriverError> {
        if self.has_feature(VIRTIO_RING_F_INDIRECT_DESC) {
            Ok(())
        } else {
            Err(DriverError::FeatureNotAcked("VIRTIO_RING_F_INDIRECT_DESC"))
        }
    }

    /// Writes a chain of buffers of lengths `lens`, filled as `fill` says, either directly in
    /// the ring or behind an indirect descriptor, and records it as in flight. Publishes
    /// nothing. Returns the head id. On error nothing is leaked.
    fn build_chain(
        &mut self,
        vring: usize,
        lens: &[u32],
        fill: Fill<'_>,
        indirect: bool,
    ) -> Result<u16, DriverError> {
        let size = usize::from(self.opts.queue_size);
        if lens.is_empty() || lens.len() > size {
            return Err(DriverError::InvalidLayout(format!(
                "{} descriptors in a chain (ring size {size})",
                lens.len()
            )));
        }
        let ndesc = if indirect { 1 } else { lens.len() };
        let free = self.vrings[vring].free_descs.len();
        if free < ndesc {
            return Err(DriverError::RingFull {
                needed: ndesc,
                free,
            });
        }

        let mut chain = Chain {
            descs: Vec::with_capacity(ndesc),
            allocs: Vec::with_capacity(lens.len() + 1),
            bufs: Vec::with_capacity(lens.len()),
        };
        let res = self.fill_chain(vring, lens, fill, indirect, &mut chain);
        if let Err(e) = res {
            self.free_chain(vring, chain);
            return Err(e);
        }
        let head = chain.descs[0];
        self.vrings[vring].chains[usize::from(head)] = Some(chain);
        Ok(head)
    }

    fn fill_chain(
        &mut self,
        vring: usize,
        lens: &[u32],
        fill: Fill<'_>,
        indirect: bool,
        chain: &mut Chain,
    ) -> Result<(), DriverError> {
        // Offset of the next buffer in the virtual concatenation `hdr || frame`.
        let mut off = 0usize;
        for &len in lens {
            let (gpa, rounded) = self.alloc.alloc(u64::from(len))?;
            chain.allocs.push((gpa, rounded));
            chain.bufs.push((gpa, len));
            let len = len as usize;
            match fill {
                Fill::Poison => {
                    let mut done = 0;
                    while done < len {
                        let n = (len - done).min(POISON.len());
                        self.mem
                            .write_slice(&POISON[..n], GuestAddress(gpa + done as u64))?;
                        done += n;
                    }
                }
                Fill::Bytes(hdr, frame) => {
                    // The part of `hdr` in [off, off + len), then the part of `frame`.
                    let h = hdr.get(off.min(hdr.len())..(off + len).min(hdr.len()));
                    let h = h.unwrap_or_default();
                    let f_start = off.saturating_sub(hdr.len());
                    let f = &frame[f_start..f_start + (len - h.len())];
                    self.mem.write_slice(h, GuestAddress(gpa))?;
                    self.mem
                        .write_slice(f, GuestAddress(gpa + h.len() as u64))?;
                }
            }
            off += len;
        }
        let wflag = if matches!(fill, Fill::Poison) {
            VRING_DESC_F_WRITE as u16
        } else {
            0
        };
        let n = chain.bufs.len();
        if indirect {
            let table_len = DESC_SIZE * n as u64;
            let (table, rounded) = self.alloc.alloc(table_len)?;
            chain.allocs.push((table, rounded));
            for (i, &(gpa, len)) in chain.bufs.iter().enumerate() {
                let last = i + 1 == n;
                let flags = wflag | if last { 0 } else { VRING_DESC_F_NEXT as u16 };
                let next = if last { 0 } else { (i + 1) as u16 };
                let d = desc_bytes(gpa, len, flags, next);
                self.mem
                    .write_slice(&d, GuestAddress(table + DESC_SIZE * i as u64))?;
            }
            let v = &mut self.vrings[vring];
            let id = v
                .free_descs
                .pop()
                .ok_or(DriverError::RingFull { needed: 1, free: 0 })?;
            chain.descs.push(id);
            let d = desc_bytes(table, table_len as u32, VRING_DESC_F_INDIRECT as u16, 0);
            self.mem.write_slice(&d, v.addrs.desc(id))?;
        } else {
            let v = &mut self.vrings[vring];
            for _ in 0..n {
                let id = v
                    .free_descs
                    .pop()
                    .ok_or(DriverError::RingFull { needed: n, free: 0 })?;
                chain.descs.push(id);
            }
            for (i, &(gpa, len)) in chain.bufs.iter().enumerate() {
                let last = i + 1 == n;
                let flags = wflag | if last { 0 } else { VRING_DESC_F_NEXT as u16 };
                let next = if last { 0 } else { chain.descs[i + 1] };
                let d = desc_bytes(gpa, len, flags, next);
                self.mem.write_slice(&d, v.addrs.desc(chain.descs[i]))?;
            }
        }
        Ok(())
    }

    fn free_chain(&mut self, vring: usize, chain: Chain) {
        for (gpa, len) in chain.allocs {
            self.alloc.release(gpa, len);
        }
        self.vrings[vring].free_descs.extend(chain.descs);
    }

    /// Writes `head` into the next avail slot; does not publish `avail.idx`.
    fn stage_avail(&mut self, vring: usize, head: u16) -> Result<(), DriverError> {
        let v = &mut self.vrings[vring];
        self.mem
            .write_obj(head.to_le(), v.addrs.avail_entry(v.next_avail))?;
        v.next_avail = v.next_avail.wrapping_add(1);
        Ok(())
    }

    /// Publishes the staged avail entries: `Release` store of `avail.idx`, so the entries and
    /// the descriptors behind them are visible before the index (virtio 1.2, 2.7.13.2).
    fn publish_avail(&mut self, vring: usize) -> Result<(), DriverError> {
        let v = &self.vrings[vring];
        self.mem
            .store(v.next_avail.to_le(), v.addrs.avail_idx(), Ordering::Release)?;
        Ok(())
    }

    // ===== receive =====

    /// Makes up to `count` receive buffers of `buf_len` bytes available on queue pair `qp`,
    /// laid out as `layout`, and publishes them with one `avail.idx` update. Does not kick.
    /// Returns how many were posted: fewer than `count` when descriptors or buffer memory ran
    /// out.
    ///
    /// # Errors
    ///
    /// [`DriverError::NoSuchQueuePair`], [`DriverError::InvalidLayout`] (zero length, more
    /// pieces than bytes or than the ring size), [`DriverError::FeatureNotAcked`] for
    /// [`RxLayout::Indirect`] without `INDIRECT_DESC`, or a guest memory error.
    pub fn post_rx_buffers(
        &mut self,
        qp: u16,
        count: usize,
        buf_len: u32,
        layout: RxLayout,
    ) -> Result<usize, DriverError> {
        let vring = self.vring_index(qp, true)?;
        let (n, indirect) = match layout {
            RxLayout::Single => (1, false),
            RxLayout::Split(n) => (usize::from(n), false),
            RxLayout::Indirect(n) => {
                self.check_indirect()?;
                (usize::from(n), true)
            }
        };
        if n == 0 || n > buf_len as usize || n > usize::from(self.opts.queue_size) {
            return Err(DriverError::InvalidLayout(format!(
                "{n} descriptors for a {buf_len}-byte buffer"
            )));
        }
        let lens: Vec<u32> = split_lengths(buf_len as usize, n)
            .into_iter()
            .map(|l| l as u32)
            .collect();
        let mut posted = 0;
        while posted < count {
            match self.build_chain(vring, &lens, Fill::Poison, indirect) {
                Ok(head) => {
                    self.stage_avail(vring, head)?;
                    posted += 1;
                }
                Err(DriverError::RingFull { .. } | DriverError::OutOfMemory(_)) => break,
                Err(e) => return Err(e),
            }
        }
        if posted > 0 {
            self.publish_avail(vring)?;
        }
        Ok(posted)
    }

    /// Consumes the used receive elements of queue pair `qp` and returns the complete frames,
    /// freeing their buffers. With `MRG_RXBUF` a frame spanning `num_buffers` elements is
    /// reassembled; if only some of its elements are used yet, it is kept for a later call.
    pub fn recv_frames(&mut self, qp: u16) -> Vec<RxFrame> {
        let Ok(vring) = self.vring_index(qp, true) else {
            return Vec::new();
        };
        let mut frames = Vec::new();
        for (id, len) in self.drain_used(vring) {
            let Some(chain) = self.vrings[vring].chains[usize::from(id)].take() else {
                continue;
            };
            let bytes = self.read_chain(vring, &chain, id, len);
            self.free_chain(vring, chain);
            if let Some(f) = self.rx_element(vring, id, len, bytes) {
                frames.push(f);
            }
        }
        frames
    }

    /// Reads the first `len` bytes of a used chain (clamped to its capacity).
    fn read_chain(&mut self, vring: usize, chain: &Chain, id: u16, len: u32) -> Vec<u8> {
        let cap = chain.capacity();
        if u64::from(len) > cap {
            self.violation(format!(
                "vring {vring}: used id {id} len {len} exceeds chain capacity {cap}"
            ));
        }
        let mut left = u64::from(len).min(cap) as usize;
        let mut out = vec![0u8; left];
        let mut off = 0;
        for &(gpa, blen) in &chain.bufs {
            if left == 0 {
                break;
            }
            let n = left.min(blen as usize);
            if let Err(e) = self
                .mem
                .read_slice(&mut out[off..off + n], GuestAddress(gpa))
            {
                self.violation(format!("vring {vring}: reading used id {id}: {e}"));
            }
            off += n;
            left -= n;
        }
        out
    }

    /// Feeds one used receive chain into frame reassembly.
    fn rx_element(&mut self, vring: usize, id: u16, len: u32, bytes: Vec<u8>) -> Option<RxFrame> {
        if let Some(mut p) = self.vrings[vring].partial.take() {
            p.frame.data.extend_from_slice(&bytes);
            p.frame.used.push((id, len));
            if p.frame.used.len() == usize::from(p.expected) {
                return Some(p.frame);
            }
            self.vrings[vring].partial = Some(p);
            return None;
        }
        let hlen = self.hdr_len();
        if bytes.len() < hlen {
            self.violation(format!(
                "vring {vring}: used id {id} len {len} is shorter than the {hlen}-byte header"
            ));
        }
        let split = bytes.len().min(hlen);
        let hdr = bytes[..split].to_vec();
        let data = bytes[split..].to_vec();
        let mut num_buffers = 1;
        if self.has_feature(VIRTIO_NET_F_MRG_RXBUF) {
            num_buffers = NetHdr::parse(&hdr).num_buffers;
            if num_buffers == 0 {
                self.violation(format!("vring {vring}: used id {id} has num_buffers 0"));
                num_buffers = 1;
            }
        }
        let frame = RxFrame {
            hdr,
            data,
            num_buffers,
            used: vec![(id, len)],
        };
        if num_buffers == 1 {
            return Some(frame);
        }
        self.vrings[vring].partial = Some(PartialFrame {
            frame,
            expected: num_buffers,
        });
        None
    }

    /// [`TestDriver::recv_frames`] in a loop until `n` frames arrived or `timeout` passed.
    /// Waits on the call eventfd but also looks at the used ring every few milliseconds, so a
    /// missing call only slows it down. Returns what arrived.
    pub fn recv_frames_until(&mut self, qp: u16, n: usize, timeout: Duration) -> Vec<RxFrame> {
        let deadline = Instant::now() + timeout;
        let mut frames = Vec::new();
        loop {
            frames.extend(self.recv_frames(qp));
            let left = deadline.saturating_duration_since(Instant::now());
            if frames.len() >= n || left.is_zero() {
                return frames;
            }
            self.wait_call(qp, true, left.min(POLL_INTERVAL));
        }
    }

    // ===== transmit =====

    /// Makes one frame available on queue pair `qp`'s transmit queue: `net_hdr` followed by
    /// `frame`, laid out as `layout`. Publishes `avail.idx` but does not kick. Returns the head
    /// descriptor id.
    ///
    /// # Errors
    ///
    /// [`DriverError::RingFull`] or [`DriverError::OutOfMemory`] (collect completions with
    /// [`TestDriver::tx_completions`] and retry), [`DriverError::NoSuchQueuePair`],
    /// [`DriverError::InvalidLayout`] (more pieces than bytes, an empty piece for
    /// [`TxLayout::HeaderSplit`]), [`DriverError::FeatureNotAcked`], or a guest memory error.
    pub fn send_frame(
        &mut self,
        qp: u16,
        net_hdr: &[u8],
        frame: &[u8],
        layout: TxLayout,
    ) -> Result<u16, DriverError> {
        let vring = self.vring_index(qp, false)?;
        let total = net_hdr.len() + frame.len();
        let (lens, indirect) = match layout {
            TxLayout::Single => (vec![total], false),
            TxLayout::HeaderSplit => {
                if net_hdr.is_empty() || frame.is_empty() {
                    return Err(DriverError::InvalidLayout(
                        "HeaderSplit needs a header and a frame".into(),
                    ));
                }
                (vec![net_hdr.len(), frame.len()], false)
            }
            TxLayout::Segments(n) => (self.tx_split(total, n)?, false),
            TxLayout::Indirect(n) => {
                self.check_indirect()?;
                (self.tx_split(total, n)?, true)
            }
        };
        let lens = lens
            .into_iter()
            .map(|l| {
                u32::try_from(l)
                    .map_err(|_| DriverError::InvalidLayout(format!("{l}-byte descriptor")))
            })
            .collect::<Result<Vec<u32>, _>>()?;
        let head = self.build_chain(vring, &lens, Fill::Bytes(net_hdr, frame), indirect)?;
        self.stage_avail(vring, head)?;
        self.publish_avail(vring)?;
        Ok(head)
    }

    fn tx_split(&self, total: usize, n: u16) -> Result<Vec<usize>, DriverError> {
        let n = usize::from(n);
        if n == 0 || n > total.max(1) {
            return Err(DriverError::InvalidLayout(format!(
                "{n} segments for {total} bytes"
            )));
        }
        Ok(split_lengths(total, n))
    }

    /// Consumes the used transmit elements of queue pair `qp`, frees their buffers, and
    /// returns them as `(id, len)`.
    pub fn tx_completions(&mut self, qp: u16) -> Vec<(u16, u32)> {
        let Ok(vring) = self.vring_index(qp, false) else {
            return Vec::new();
        };
        let mut done = Vec::new();
        for (id, len) in self.drain_used(vring) {
            if let Some(chain) = self.vrings[vring].chains[usize::from(id)].take() {
                self.free_chain(vring, chain);
                done.push((id, len));
            }
        }
        done
    }

    /// [`TestDriver::tx_completions`] in a loop until `n` completions arrived or `timeout`
    /// passed, waiting on the call eventfd and polling the used ring every few milliseconds.
    pub fn tx_completions_until(
        &mut self,
        qp: u16,
        n: usize,
        timeout: Duration,
    ) -> Vec<(u16, u32)> {
        let deadline = Instant::now() + timeout;
        let mut done = Vec::new();
        loop {
            done.extend(self.tx_completions(qp));
            let left = deadline.saturating_duration_since(Instant::now());
            if done.len() >= n || left.is_zero() {
                return done;
            }
            self.wait_call(qp, false, left.min(POLL_INTERVAL));
        }
    }

    // ===== used ring =====

    /// Takes every new used element of a vring, checks its id, and updates `used_event`
    /// (`EVENT_IDX`, auto mode). Elements of raw heads go to `raw_used`.
    fn drain_used(&mut self, vring: usize) -> Vec<(u16, u32)> {
        let mut out = Vec::new();
        loop {
            let got = self.drain_used_once(vring, &mut out);
            if !got || !self.update_used_event(vring) {
                return out;
            }
        }
    }

    /// One pass over the used ring; returns whether anything was consumed.
    fn drain_used_once(&mut self, vring: usize, out: &mut Vec<(u16, u32)>) -> bool {
        let addrs = self.vrings[vring].addrs;
        // Acquire: the elements below were written before the device published the index.
        let used_idx = match self.mem.load::<u16>(addrs.used_idx(), Ordering::Acquire) {
            Ok(i) => u16::from_le(i),
            Err(e) => {
                self.violation(format!("vring {vring}: reading used.idx: {e}"));
                return false;
            }
        };
        let last = self.vrings[vring].last_used;
        let pending = used_idx.wrapping_sub(last);
        if pending == 0 {
            return false;
        }
        if pending > addrs.size {
            // Elements beyond the ring size cannot be real; consume nothing.
            self.violation(format!(
                "vring {vring}: used.idx {used_idx} is {pending} ahead of {last}, ring size {}",
                addrs.size
            ));
            return false;
        }
        for i in 0..pending {
            let at = addrs.used_entry(last.wrapping_add(i));
            let id = self.mem.read_obj::<u32>(at).map(u32::from_le);
            let len = self
                .mem
                .read_obj::<u32>(at.unchecked_add(4))
                .map(u32::from_le);
            let (Ok(id), Ok(len)) = (id, len) else {
                self.violation(format!("vring {vring}: cannot read used element"));
                continue;
            };
            let v = &mut self.vrings[vring];
            match u16::try_from(id).ok().filter(|&h| h < addrs.size) {
                Some(h) if v.raw_heads[usize::from(h)] => {
                    v.raw_heads[usize::from(h)] = false;
                    v.raw_used.push((h, len));
                }
                Some(h) if v.chains[usize::from(h)].is_some() => out.push((h, len)),
                _ => self.violation(format!(
                    "vring {vring}: used id {id} (len {len}) is not in flight"
                )),
            }
        }
        self.vrings[vring].last_used = used_idx;
        true
    }

    /// With `EVENT_IDX` in auto mode, writes `used_event = last_used` (ask for a call on the
    /// next completion, as Linux does), then a full fence and a re-read of `used.idx`. Returns
    /// whether more elements arrived meanwhile.
    fn update_used_event(&mut self, vring: usize) -> bool {
        let v = &self.vrings[vring];
        if !self.has_feature(VIRTIO_RING_F_EVENT_IDX) || !v.auto_used_event {
            return false;
        }
        let (addrs, last) = (v.addrs, v.last_used);
        if self
            .mem
            .store(last.to_le(), addrs.used_event(), Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        // The used_event store must be visible before we look at used.idx again, or a
        // completion in between would neither be seen nor signalled.
        fence(Ordering::SeqCst);
        self.mem
            .load::<u16>(addrs.used_idx(), Ordering::Acquire)
            .is_ok_and(|i| u16::from_le(i) != last)
    }

    /// Consumes every new used element of a vring without interpreting it: tracked chains are
    /// freed (and their data dropped), raw heads are returned too. Returns `(id, len)`.
    pub fn poll_used_raw(&mut self, qp: u16, rx: bool) -> Vec<(u16, u32)> {
        let Ok(vring) = self.vring_index(qp, rx) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (id, len) in self.drain_used(vring) {
            if let Some(chain) = self.vrings[vring].chains[usize::from(id)].take() {
                self.free_chain(vring, chain);
            }
            out.push((id, len));
        }
        out.append(&mut self.vrings[vring].raw_used);
        out
    }

    /// Used elements of heads published with [`TestDriver::push_avail`], consumed so far by
    /// the other used-ring readers.
    pub fn take_raw_used(&mut self, qp: u16, rx: bool) -> Vec<(u16, u32)> {
        match self.vring_index(qp, rx) {
            Ok(v) => std::mem::take(&mut self.vrings[v].raw_used),
            Err(_) => Vec::new(),
        }
    }

    // ===== notifications =====

    /// Waits up to `timeout` for the backend to signal a vring's call eventfd, and clears it.
    /// Returns whether it was signalled.
    pub fn wait_call(&self, qp: u16, rx: bool, timeout: Duration) -> bool {
        let Ok(v) = self.vring(qp, rx) else {
            return false;
        };
        match poll_fd(v.call.as_raw_fd(), libc::POLLIN, timeout) {
            Ok(r) if r & libc::POLLIN != 0 => v.call.read().is_ok(),
            _ => false,
        }
    }

    /// Clears a vring's call eventfd without waiting; returns whether it had been signalled.
    pub fn take_call(&self, qp: u16, rx: bool) -> bool {
        self.vring(qp, rx).is_ok_and(|v| v.call.read().is_ok())
    }

    /// Kicks queue pair `qp`'s transmit queue if the backend wants it. Returns whether it did.
    /// See [`TestDriver::kick_vring`].
    pub fn kick_tx(&self, qp: u16) -> bool {
        self.vring_index(qp, false)
            .is_ok_and(|v| self.kick_vring(v))
    }

    /// Kicks queue pair `qp`'s receive queue if the backend wants it. Returns whether it did.
    /// See [`TestDriver::kick_vring`].
    pub fn kick_rx(&self, qp: u16) -> bool {
        self.vring_index(qp, true).is_ok_and(|v| self.kick_vring(v))
    }

    /// Kicks a vring if the backend wants it, like Linux's `virtqueue_kick_prepare`: a full
    /// fence after the `avail.idx` store, then with `EVENT_IDX` kick iff `avail_event` lies in
    /// the indices made available since the previous call, else kick iff
    /// `VRING_USED_F_NO_NOTIFY` is clear. With [`DriverOpts::always_kick`] it always kicks.
    /// Returns whether it kicked (false for a vring that does not exist).
    pub fn kick_vring(&self, vring: usize) -> bool {
        let Some(v) = self.vrings.get(vring) else {
            return false;
        };
        let new = v.next_avail;
        let old = v.kicked_at.replace(new);
        let need = self.opts.always_kick || {
            fence(Ordering::SeqCst);
            if self.has_feature(VIRTIO_RING_F_EVENT_IDX) {
                self.mem
                    .load::<u16>(v.addrs.avail_event(), Ordering::Relaxed)
                    .is_ok_and(|e| need_event(u16::from_le(e), new, old))
            } else {
                self.mem
                    .load::<u16>(GuestAddress(v.addrs.used), Ordering::Relaxed)
                    .is_ok_and(|f| u16::from_le(f) & VRING_USED_F_NO_NOTIFY as u16 == 0)
            }
        };
        need && v.kick.write(1).is_ok()
    }

    /// Writes 1 to a vring's kick eventfd, unconditionally.
    ///
    /// # Errors
    ///
    /// [`DriverError::NoSuchVring`] or [`DriverError::EventFd`].
    pub fn kick_raw(&self, vring: usize) -> Result<(), DriverError> {
        let v = self
            .vrings
            .get(vring)
            .ok_or(DriverError::NoSuchVring(vring))?;
        v.kick.write(1).map_err(DriverError::EventFd)
    }

    /// Writes `used_event` (the avail ring's trailing field) and turns off the automatic
    /// update for this vring (see [`TestDriver::set_auto_used_event`]).
    ///
    /// # Errors
    ///
    /// [`DriverError::NoSuchQueuePair`] or a guest memory error.
    pub fn set_used_event(&mut self, qp: u16, rx: bool, idx: u16) -> Result<(), DriverError> {
        let i = self.vring_index(qp, rx)?;
        self.vrings[i].auto_used_event = false;
        let at = self.vrings[i].addrs.used_event();
        self.mem.store(idx.to_le(), at, Ordering::Release)?;
        fence(Ordering::SeqCst);
        Ok(())
    }

    /// With `on` (the default) the driver writes `used_event = last seen used.idx` whenever it
    /// consumes used elements, asking for a call per completion as Linux does; with `off` it
    /// leaves `used_event` alone.
    ///
    /// # Errors
    ///
    /// [`DriverError::NoSuchQueuePair`].
    pub fn set_auto_used_event(&mut self, qp: u16, rx: bool, on: bool) -> Result<(), DriverError> {
        let i = self.vring_index(qp, rx)?;
        self.vrings[i].auto_used_event = on;
        Ok(())
    }

    /// Reads `used_event` (the avail ring's trailing field).
    ///
    /// # Errors
    ///
    /// [`DriverError::NoSuchQueuePair`] or a guest memory error.
    pub fn used_event(&self, qp: u16, rx: bool) -> Result<u16, DriverError> {
        let at = self.vring(qp, rx)?.addrs.used_event();
        Ok(u16::from_le(self.mem.load(at, Ordering::Acquire)?))
    }

    /// Reads `avail_event` (the used ring's trailing field, written by the backend).
    ///
    /// # Errors
    ///
    /// [`DriverError::NoSuchQueuePair`] or a guest memory error.
    pub fn avail_event(&self, qp: u16, rx: bool) -> Result<u16, DriverError> {
        let at = self.vring(qp, rx)?.addrs.avail_event();
        Ok(u16::from_le(self.mem.load(at, Ordering::Acquire)?))
    }

    /// Sets or clears `VRING_AVAIL_F_NO_INTERRUPT` in the avail ring's flags.
    ///
    /// # Errors
    ///
    /// [`DriverError::NoSuchQueuePair`] or a guest memory error.
    pub fn set_no_interrupt(&mut self, qp: u16, rx: bool, on: bool) -> Result<(), DriverError> {
        let at = GuestAddress(self.vring(qp, rx)?.addrs.avail);
        let flags = if on {
            VRING_AVAIL_F_NO_INTERRUPT as u16
        } else {
            0
        };
        self.mem.store(flags.to_le(), at, Ordering::Release)?;
        fence(Ordering::SeqCst);
        Ok(())
    }

    /// Reads the used ring's flags (`VRING_USED_F_NO_NOTIFY`).
    ///
    /// # Errors
    ///
    /// [`DriverError::NoSuchQueuePair`] or a guest memory error.
    pub fn used_flags(&self, qp: u16, rx: bool) -> Result<u16, DriverError> {
        let at = GuestAddress(self.vring(qp, rx)?.addrs.used);
        Ok(u16::from_le(self.mem.load(at, Ordering::Acquire)?))
    }

    /// Reads `used.idx`.
    ///
    /// # Errors
    ///
    /// [`DriverError::NoSuchQueuePair`] or a guest memory error.
    pub fn used_idx(&self, qp: u16, rx: bool) -> Result<u16, DriverError> {
        let at = self.vring(qp, rx)?.addrs.used_idx();
        Ok(u16::from_le(self.mem.load(at, Ordering::Acquire)?))
    }

    /// The driver's `avail.idx` (the next index it will fill).
    ///
    /// # Errors
    ///
    /// [`DriverError::NoSuchQueuePair`].
    pub fn avail_idx(&self, qp: u16, rx: bool) -> Result<u16, DriverError> {
        Ok(self.vring(qp, rx)?.next_avail)
    }

    // ===== hostile rings =====

    /// Takes a descriptor id out of the allocator's free list, for raw use with
    /// [`TestDriver::write_desc`]; `None` if none is free. Give it back with
    /// [`TestDriver::release_desc`].
    pub fn reserve_desc(&mut self, qp: u16, rx: bool) -> Option<u16> {
        let i = self.vring_index(qp, rx).ok()?;
        self.vrings[i].free_descs.pop()
    }

    /// Returns a descriptor id taken with [`TestDriver::reserve_desc`] to the free list.
    ///
    /// # Errors
    ///
    /// [`DriverError::NoSuchQueuePair`], or [`DriverError::InvalidLayout`] for an id outside
    /// the ring, already free, or held by an in-flight chain.
    pub fn release_desc(&mut self, qp: u16, rx: bool, id: u16) -> Result<(), DriverError> {
        let i = self.vring_index(qp, rx)?;
        let v = &mut self.vrings[i];
        let held = v.chains.iter().flatten().any(|c| c.descs.contains(&id));
        if id >= v.addrs.size || held || v.free_descs.contains(&id) {
            return Err(DriverError::InvalidLayout(format!(
                "descriptor {id} cannot be released"
            )));
        }
        v.free_descs.push(id);
        Ok(())
    }

    /// Writes descriptor `idx` of a vring's table verbatim. Writing a descriptor held by the
    /// allocator (in flight or free) corrupts its bookkeeping: use ids from
    /// [`TestDriver::reserve_desc`], or a driver dedicated to the hostile test.
    ///
    /// # Errors
    ///
    /// [`DriverError::NoSuchQueuePair`], [`DriverError::InvalidLayout`] for `idx` outside the
    /// table, or a guest memory error.
    #[allow(clippy::too_many_arguments)]
    pub fn write_desc(
        &mut self,
        qp: u16,
        rx: bool,
        idx: u16,
        addr: u64,
        len: u32,
        flags: u16,
        next: u16,
    ) -> Result<(), DriverError> {
        let a = self.vring(qp, rx)?.addrs;
        if idx >= a.size {
            return Err(DriverError::InvalidLayout(format!(
                "descriptor {idx} outside a ring of {}",
                a.size
            )));
        }
        self.mem
            .write_slice(&desc_bytes(addr, len, flags, next), a.desc(idx))?;
        Ok(())
    }

    /// Publishes `head` in the avail ring (entry, then `Release` store of `avail.idx`) without
    /// any bookkeeping beyond remembering that `head` is raw, so its used element is kept for
    /// [`TestDriver::take_raw_used`]. Any value may be published, even one outside the ring.
    /// Does not kick.
    ///
    /// # Errors
    ///
    /// [`DriverError::NoSuchQueuePair`] or a guest memory error.
    pub fn push_avail(&mut self, qp: u16, rx: bool, head: u16) -> Result<(), DriverError> {
        let i = self.vring_index(qp, rx)?;
        if let Some(r) = self.vrings[i].raw_heads.get_mut(usize::from(head)) {
            *r = true;
        }
        self.stage_avail(i, head)?;
        self.publish_avail(i)
    }

    /// Allocates `len` bytes of guest buffer memory for raw descriptors or indirect tables;
    /// returns its GPA. 64-byte aligned.
    ///
    /// # Errors
    ///
    /// [`DriverError::OutOfMemory`].
    pub fn alloc_guest(&mut self, len: u64) -> Result<u64, DriverError> {
        Ok(self.alloc.alloc(len)?.0)
    }

    /// Frees memory from [`TestDriver::alloc_guest`] (same `gpa` and `len`).
    pub fn free_guest(&mut self, gpa: u64, len: u64) {
        let rounded = len.max(1).div_ceil(ALLOC_GRANULE) * ALLOC_GRANULE;
        self.alloc.release(gpa, rounded);
    }

    // ===== backend checks =====

    /// Records a violation, unless it repeats the previous one (a broken ring is seen again
    /// on every poll).
    fn violation(&mut self, what: String) {
        if self.violations.last() != Some(&what) {
            self.violations.push(what);
        }
    }

    /// Spec violations noticed in the backend's behaviour so far.
    pub fn violations(&self) -> &[String] {
        &self.violations
    }

    /// Takes the recorded violations, leaving none.
    pub fn take_violations(&mut self) -> Vec<String> {
        std::mem::take(&mut self.violations)
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
        let h = NetHdr {
            flags: 1,
            gso_type: 4,
            hdr_len: 54,
            gso_size: 1448,
            csum_start: 34,
            csum_offset: 16,
            num_buffers: 3,
        };
        assert_eq!(NetHdr::parse(&h.to_bytes(NET_HDR_LEN)), h);
        let legacy = NetHdr::parse(&h.to_bytes(NET_HDR_LEN_LEGACY));
        assert_eq!(legacy.num_buffers, 0);
        assert_eq!(legacy.gso_size, 1448);
    }
}
