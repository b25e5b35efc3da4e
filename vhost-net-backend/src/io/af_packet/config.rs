// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! How an [`AfPacket`](super::AfPacket) is opened (ring geometry, offloads,
//! fanout), and why opening fails.

use std::io;

use crate::sys::netdev::IFNAME_RULE;

/// How a fanout group spreads frames over its sockets (`PACKET_FANOUT_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FanoutMode {
    /// By flow hash (`PACKET_FANOUT_HASH`): a flow stays on one socket.
    Hash,
    /// Round robin (`PACKET_FANOUT_LB`).
    LoadBalance,
    /// By receiving CPU (`PACKET_FANOUT_CPU`).
    Cpu,
    /// Fill one socket, then the next (`PACKET_FANOUT_ROLLOVER`).
    Rollover,
    /// Random (`PACKET_FANOUT_RND`).
    Random,
    /// By the NIC's RX queue (`PACKET_FANOUT_QM`).
    QueueMapping,
}

impl FanoutMode {
    pub(super) const fn raw(self) -> u32 {
        match self {
            FanoutMode::Hash => libc::PACKET_FANOUT_HASH,
            FanoutMode::LoadBalance => libc::PACKET_FANOUT_LB,
            FanoutMode::Cpu => libc::PACKET_FANOUT_CPU,
            FanoutMode::Rollover => libc::PACKET_FANOUT_ROLLOVER,
            FanoutMode::Random => libc::PACKET_FANOUT_RND,
            FanoutMode::QueueMapping => libc::PACKET_FANOUT_QM,
        }
    }
}

/// Geometry of the TPACKET_V3 receive ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxRingConfig {
    /// Bytes per block: a multiple of the page size, at least
    /// [`MIN_RX_BLOCK_SIZE`](super::MIN_RX_BLOCK_SIZE) (a 64 KiB GSO frame and its headers must fit in
    /// one block, or it is truncated and dropped).
    pub block_size: u32,
    /// Number of blocks.
    pub block_count: u32,
    /// Milliseconds after which the kernel hands over a block that is not
    /// full (`tp_retire_blk_tov`): the worst-case added latency at low
    /// rates. 0 lets the kernel choose (several ms).
    pub block_timeout_ms: u32,
}

impl Default for RxRingConfig {
    /// 16 blocks of 256 KiB (4 MiB), 1 ms timeout.
    fn default() -> Self {
        Self {
            block_size: 256 * 1024,
            block_count: 16,
            block_timeout_ms: 1,
        }
    }
}

/// Geometry of the transmit ring (fixed-size slots, TPACKET_V3 layout).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxRingConfig {
    /// Bytes per block: a multiple of the page size; it holds
    /// `block_size / frame_size` slots.
    pub block_size: u32,
    /// Number of blocks.
    pub block_count: u32,
    /// Bytes per slot: a multiple of the page size (so that a 64 KiB frame
    /// never spans more pages than an skb has fragments). A slot holds a
    /// 48-byte slot header, the virtio-net header and the frame.
    pub frame_size: u32,
}

impl Default for TxRingConfig {
    /// 4 blocks of 1 MiB, 15 slots of 68 KiB each (60 slots, each taking
    /// a 64 KiB super-frame).
    fn default() -> Self {
        Self {
            block_size: 1024 * 1024,
            block_count: 4,
            frame_size: 68 * 1024,
        }
    }
}

/// How to open an [`AfPacket`](super::AfPacket) uplink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AfPacketConfig {
    /// Carry offloads (partial checksums, TSO/UFO/USO super-frames) to and
    /// from the kernel. When false the uplink announces no offloads: frames
    /// to transmit must be complete ([`DropReason::OffloadUnsupported`](crate::stats::DropReason::OffloadUnsupported)
    /// otherwise), and
    /// received partial checksums and super-frames are completed and
    /// segmented in software before they are lent. (The socket takes the
    /// kernel's virtio-net header either way: it is what identifies them.)
    pub vnet_hdr: bool,
    /// Bypass the qdisc layer on transmit (`PACKET_QDISC_BYPASS`): faster,
    /// but frames the driver cannot queue are dropped instead of waiting,
    /// and the kernel cannot segment in software on this path: super-frames
    /// reach only interfaces that segment them themselves (veth does; check
    /// `ethtool -k` for others) and are dropped otherwise (counted in
    /// `tx_drops` as `Refused`). Off by default.
    pub qdisc_bypass: bool,
    /// Put the interface in promiscuous mode while the socket is open
    /// (`PACKET_MR_PROMISC` membership), so frames for the guests' MAC
    /// addresses are received.
    pub promiscuous: bool,
    /// Join fanout group `.0` (per network namespace) with mode `.1`.
    pub fanout: Option<(u16, FanoutMode)>,
    /// Receive ring.
    pub rx_ring: RxRingConfig,
    /// Transmit ring.
    pub tx_ring: TxRingConfig,
}

impl Default for AfPacketConfig {
    /// Offloads on, qdisc bypass off, promiscuous, no fanout, default rings.
    fn default() -> Self {
        Self {
            vnet_hdr: true,
            qdisc_bypass: false,
            promiscuous: true,
            fanout: None,
            rx_ring: RxRingConfig::default(),
            tx_ring: TxRingConfig::default(),
        }
    }
}

/// Why an [`AfPacket`](super::AfPacket) uplink could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum AfPacketError {
    /// The name is empty, too long (max 15 bytes) or contains NUL.
    #[error("invalid interface name {0:?} ({rule})", rule = IFNAME_RULE)]
    Name(String),
    /// No interface has this name in the caller's network namespace.
    #[error("interface {0} not found")]
    NotFound(String),
    /// The caller lacks CAP_NET_RAW (or CAP_NET_ADMIN for promiscuous mode
    /// and fanout).
    #[error("permission denied opening a packet socket on {ifname} (needs CAP_NET_RAW and CAP_NET_ADMIN)")]
    Permission {
        /// The interface.
        ifname: String,
        /// The error of the step that was refused.
        #[source]
        source: io::Error,
    },
    /// The ring geometry is invalid.
    #[error("invalid ring geometry for {ifname}: {reason}")]
    Geometry {
        /// The interface.
        ifname: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// A step of the socket or ring set-up failed.
    #[error("cannot set up the packet socket on {ifname}: {step}")]
    Setup {
        /// The interface.
        ifname: String,
        /// The step that failed (e.g. `PACKET_RX_RING`).
        step: &'static str,
        /// Why.
        #[source]
        source: io::Error,
    },
}
