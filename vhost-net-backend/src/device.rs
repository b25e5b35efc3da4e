// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The virtio-net device model: which features a port offers and what an
//! acked feature set means for the data path.
//!
//! With vhost-user the VMM owns the config space and the control queue
//! (QEMU, cloud-hypervisor and DPDK's virtio-user serve MAC, STATUS and
//! CTRL_VQ themselves), so the backend offers data-path features only and
//! honours exactly what the driver acked. Everything offered here works end to
//! end in the ring engine; nothing that the request handler cannot process is
//! offered.

use vhost::vhost_user::message::{VhostUserProtocolFeatures, VhostUserVirtioFeatures};
use virtio_bindings::virtio_config::{VIRTIO_F_ANY_LAYOUT, VIRTIO_F_VERSION_1};
use virtio_bindings::virtio_net::{
    VIRTIO_NET_F_CSUM, VIRTIO_NET_F_GUEST_ANNOUNCE, VIRTIO_NET_F_GUEST_CSUM,
    VIRTIO_NET_F_GUEST_ECN, VIRTIO_NET_F_GUEST_TSO4, VIRTIO_NET_F_GUEST_TSO6,
    VIRTIO_NET_F_GUEST_UFO, VIRTIO_NET_F_HOST_ECN, VIRTIO_NET_F_HOST_TSO4, VIRTIO_NET_F_HOST_TSO6,
    VIRTIO_NET_F_HOST_UFO, VIRTIO_NET_F_MQ, VIRTIO_NET_F_MRG_RXBUF, VIRTIO_NET_F_MTU,
};
use virtio_bindings::virtio_ring::{VIRTIO_RING_F_EVENT_IDX, VIRTIO_RING_F_INDIRECT_DESC};

/// Largest number of queue pairs a port can have.
///
/// vhost-user carries the vring index of `SET_VRING_KICK`/`CALL` in 8 bits,
/// so 256 vrings (128 pairs) is the protocol's ceiling.
pub const MAX_QUEUE_PAIRS: u16 = 128;

/// Largest split-ring size (virtio 1.x, 2.7.1).
pub const MAX_QUEUE_SIZE: u16 = 32768;

/// Memory slots reported by `GET_MAX_MEM_SLOTS`: the vhost-user maximum, so
/// that memory hotplug in the guest keeps working (DPDK and VPP stop at 8).
pub const MAX_MEM_SLOTS: u64 = 509;

/// Largest frame (Ethernet header included, virtio-net header excluded) the
/// device accepts when no MTU is configured: a 64 KiB GSO super-frame plus
/// headers.
pub const MAX_FRAME_LEN: usize = 65_550;

const fn bit(b: u32) -> u64 {
    1 << b
}

/// Feature bits (virtio and vhost-user), named for readability.
pub mod bits {
    use super::*;

    /// `VIRTIO_F_VERSION_1`.
    pub const VERSION_1: u64 = bit(VIRTIO_F_VERSION_1);
    /// `VIRTIO_F_ANY_LAYOUT` (implied by VERSION_1; offered for legacy drivers).
    pub const ANY_LAYOUT: u64 = bit(VIRTIO_F_ANY_LAYOUT);
    /// `VIRTIO_NET_F_MRG_RXBUF`.
    pub const MRG_RXBUF: u64 = bit(VIRTIO_NET_F_MRG_RXBUF);
    /// `VIRTIO_RING_F_EVENT_IDX`.
    pub const EVENT_IDX: u64 = bit(VIRTIO_RING_F_EVENT_IDX);
    /// `VIRTIO_RING_F_INDIRECT_DESC`.
    pub const INDIRECT_DESC: u64 = bit(VIRTIO_RING_F_INDIRECT_DESC);
    /// `VIRTIO_F_RING_PACKED`: the packed virtqueue layout.
    pub const RING_PACKED: u64 = 1 << 34;
    /// `VIRTIO_F_IN_ORDER`: buffers are used in the order they were made
    /// available (the engine always does).
    pub const IN_ORDER: u64 = 1 << 35;
    /// `VIRTIO_NET_F_MQ`.
    pub const MQ: u64 = bit(VIRTIO_NET_F_MQ);
    /// `VIRTIO_NET_F_MTU`.
    pub const MTU: u64 = bit(VIRTIO_NET_F_MTU);
    /// `VHOST_F_LOG_ALL`: the device logs the pages it writes (live
    /// migration), once the frontend shared a log (`SET_LOG_BASE`).
    pub const LOG_ALL: u64 = super::VhostUserVirtioFeatures::LOG_ALL.bits();
    /// `VIRTIO_NET_F_GUEST_ANNOUNCE`: the guest announces itself (gratuitous
    /// ARP) when the VMM asks, after a migration. The VMM owns the control
    /// queue and the config space, the device only offers the bit. A guest
    /// that does not ack it is announced by the backend instead
    /// (`SEND_RARP`, the `RARP` protocol feature).
    pub const GUEST_ANNOUNCE: u64 = bit(VIRTIO_NET_F_GUEST_ANNOUNCE);
    /// `VHOST_USER_F_PROTOCOL_FEATURES`.
    pub const PROTOCOL_FEATURES: u64 = super::VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits();
    /// `VIRTIO_NET_F_CSUM`: the guest may send partially checksummed frames.
    pub const CSUM: u64 = bit(VIRTIO_NET_F_CSUM);
    /// `VIRTIO_NET_F_GUEST_CSUM`: the guest accepts partially checksummed frames.
    pub const GUEST_CSUM: u64 = bit(VIRTIO_NET_F_GUEST_CSUM);
    /// `VIRTIO_NET_F_HOST_TSO4`.
    pub const HOST_TSO4: u64 = bit(VIRTIO_NET_F_HOST_TSO4);
    /// `VIRTIO_NET_F_HOST_TSO6`.
    pub const HOST_TSO6: u64 = bit(VIRTIO_NET_F_HOST_TSO6);
    /// `VIRTIO_NET_F_HOST_ECN`.
    pub const HOST_ECN: u64 = bit(VIRTIO_NET_F_HOST_ECN);
    /// `VIRTIO_NET_F_HOST_UFO`.
    pub const HOST_UFO: u64 = bit(VIRTIO_NET_F_HOST_UFO);
    /// `VIRTIO_NET_F_GUEST_TSO4`.
    pub const GUEST_TSO4: u64 = bit(VIRTIO_NET_F_GUEST_TSO4);
    /// `VIRTIO_NET_F_GUEST_TSO6`.
    pub const GUEST_TSO6: u64 = bit(VIRTIO_NET_F_GUEST_TSO6);
    /// `VIRTIO_NET_F_GUEST_ECN`.
    pub const GUEST_ECN: u64 = bit(VIRTIO_NET_F_GUEST_ECN);
    /// `VIRTIO_NET_F_GUEST_UFO`.
    pub const GUEST_UFO: u64 = bit(VIRTIO_NET_F_GUEST_UFO);
}

/// Checksum and segmentation offloads a port may offer.
///
/// They are options of the device, chosen by whoever builds the port: with
/// them on, each frame's `virtio_net_hdr` travels with it through the burst
/// API intact, and the destination must be able to take it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Offloads {
    bits: u64,
}

impl Offloads {
    /// All offload feature bits this device can offer.
    pub const ALL_BITS: u64 = bits::CSUM
        | bits::GUEST_CSUM
        | bits::HOST_TSO4
        | bits::HOST_TSO6
        | bits::HOST_ECN
        | bits::HOST_UFO
        | bits::GUEST_TSO4
        | bits::GUEST_TSO6
        | bits::GUEST_ECN
        | bits::GUEST_UFO;

    /// No offloads: every frame is complete and checksummed.
    pub const fn none() -> Self {
        Self { bits: 0 }
    }

    /// Checksum offload in both directions (`CSUM`, `GUEST_CSUM`).
    pub const fn checksum() -> Self {
        Self {
            bits: bits::CSUM | bits::GUEST_CSUM,
        }
    }

    /// Checksum and TCP segmentation offloads in both directions.
    pub const fn checksum_and_tso() -> Self {
        Self {
            bits: bits::CSUM
                | bits::GUEST_CSUM
                | bits::HOST_TSO4
                | bits::HOST_TSO6
                | bits::HOST_ECN
                | bits::GUEST_TSO4
                | bits::GUEST_TSO6
                | bits::GUEST_ECN,
        }
    }

    /// Every offload the device knows.
    pub const fn all() -> Self {
        Self {
            bits: Self::ALL_BITS,
        }
    }

    /// Builds the set from raw virtio feature bits.
    ///
    /// # Errors
    /// Returns the offending bits when `bits` has a bit that is not an
    /// offload, or breaks a dependency of the virtio spec (5.1.3.1: TSO and
    /// UFO need the matching checksum feature, ECN needs TSO).
    pub fn from_bits(bits: u64) -> Result<Self, u64> {
        let unknown = bits & !Self::ALL_BITS;
        if unknown != 0 {
            return Err(unknown);
        }
        let host_seg = bits::HOST_TSO4 | bits::HOST_TSO6 | bits::HOST_UFO;
        let guest_seg = bits::GUEST_TSO4 | bits::GUEST_TSO6 | bits::GUEST_UFO;
        let mut bad = 0;
        if bits & host_seg != 0 && bits & bits::CSUM == 0 {
            bad |= bits & host_seg;
        }
        if bits & guest_seg != 0 && bits & bits::GUEST_CSUM == 0 {
            bad |= bits & guest_seg;
        }
        if bits & bits::HOST_ECN != 0 && bits & (bits::HOST_TSO4 | bits::HOST_TSO6) == 0 {
            bad |= bits::HOST_ECN;
        }
        if bits & bits::GUEST_ECN != 0 && bits & (bits::GUEST_TSO4 | bits::GUEST_TSO6) == 0 {
            bad |= bits::GUEST_ECN;
        }
        if bad != 0 {
            return Err(bad);
        }
        Ok(Self { bits })
    }

    /// The raw virtio feature bits.
    pub const fn bits(self) -> u64 {
        self.bits
    }
}

/// The virtio feature bits a port offers for a given configuration.
///
/// MQ is offered only with more than one queue pair, MTU only when an MTU is
/// configured; `PROTOCOL_FEATURES` always.
pub fn offered_features(queue_pairs: u16, offloads: Offloads, mtu: Option<u16>) -> u64 {
    let mut f = bits::VERSION_1
        | bits::ANY_LAYOUT
        | bits::MRG_RXBUF
        | bits::EVENT_IDX
        | bits::INDIRECT_DESC
        | bits::RING_PACKED
        | bits::IN_ORDER
        | bits::PROTOCOL_FEATURES
        | bits::LOG_ALL
        | bits::GUEST_ANNOUNCE
        | offloads.bits();
    if queue_pairs > 1 {
        f |= bits::MQ;
    }
    if mtu.is_some() {
        f |= bits::MTU;
    }
    f
}

/// The vhost-user protocol features a port offers.
///
/// `REPLY_ACK` is added by the `vhost` crate itself; `LOG_SHMFD` carries
/// the dirty log of a live migration (`SET_LOG_BASE` with its fd); `RARP`:
/// after a migration of a guest that did not ack `GUEST_ANNOUNCE`, the
/// frontend sends `SEND_RARP` with the guest's MAC, handed to the port's
/// announce handler ([`crate::Port::set_announce_handler`]). Never offered:
/// `NET_MTU`, `STATUS`, `INFLIGHT_SHMFD` (their messages are not handled),
/// `CONFIG` (the VMM owns the config space).
pub fn offered_protocol_features() -> VhostUserProtocolFeatures {
    VhostUserProtocolFeatures::MQ
        | VhostUserProtocolFeatures::LOG_SHMFD
        | VhostUserProtocolFeatures::RARP
        | VhostUserProtocolFeatures::REPLY_ACK
        | VhostUserProtocolFeatures::CONFIGURE_MEM_SLOTS
        | VhostUserProtocolFeatures::RESET_DEVICE
}

/// What an acked feature set means for the data path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Negotiated {
    /// The acked virtio feature bits.
    pub acked: u64,
}

impl Negotiated {
    /// Wraps an acked feature set.
    pub const fn new(acked: u64) -> Self {
        Self { acked }
    }

    /// Whether `bits` are all acked.
    pub const fn has(self, bits: u64) -> bool {
        self.acked & bits == bits
    }

    /// Length of the `virtio_net_hdr` that precedes every frame: 12 bytes
    /// with VERSION_1 or MRG_RXBUF (`virtio_net_hdr_mrg_rxbuf`), 10 otherwise.
    pub const fn hdr_len(self) -> usize {
        if self.acked & (bits::VERSION_1 | bits::MRG_RXBUF) != 0 {
            12
        } else {
            10
        }
    }

    /// Whether RX frames may span several buffers (`MRG_RXBUF`).
    pub const fn mrg_rxbuf(self) -> bool {
        self.has(bits::MRG_RXBUF)
    }

    /// Whether `EVENT_IDX` notification suppression is in use.
    pub const fn event_idx(self) -> bool {
        self.has(bits::EVENT_IDX)
    }

    /// Whether the rings use the packed layout.
    pub const fn packed(self) -> bool {
        self.has(bits::RING_PACKED)
    }

    /// Whether the frontend asked for dirty-page logging (`VHOST_F_LOG_ALL`).
    pub const fn log_all(self) -> bool {
        self.has(bits::LOG_ALL)
    }

    /// Whether the driver may use indirect descriptor tables.
    pub const fn indirect(self) -> bool {
        self.has(bits::INDIRECT_DESC)
    }

    /// Whether buffers are used in the order they were made available
    /// (`VIRTIO_F_IN_ORDER`): a packed ring then returns a burst of TX
    /// buffers with one used descriptor.
    pub const fn in_order(self) -> bool {
        self.has(bits::IN_ORDER)
    }
}

/// The offloads a receiver may accept, as driver-side (`GUEST_*`) feature
/// bits: the vocabulary of [`Sink::accepts`](crate::sink::Sink::accepts).
pub const GUEST_OFFLOADS: u64 =
    bits::GUEST_CSUM | bits::GUEST_TSO4 | bits::GUEST_TSO6 | bits::GUEST_ECN | bits::GUEST_UFO;

/// Each transmit offload (`HOST_*` name) with its receive name (`GUEST_*`).
const HOST_TO_GUEST: [(u64, u64); 5] = [
    (bits::CSUM, bits::GUEST_CSUM),
    (bits::HOST_TSO4, bits::GUEST_TSO4),
    (bits::HOST_TSO6, bits::GUEST_TSO6),
    (bits::HOST_ECN, bits::GUEST_ECN),
    (bits::HOST_UFO, bits::GUEST_UFO),
];

/// The receive offloads (`GUEST_*` bits) that match an uplink's transmit
/// offloads (`HOST_*` bits, [`crate::io::UplinkOffloads::tx`]).
pub fn guest_from_host(host: u64) -> u64 {
    HOST_TO_GUEST
        .iter()
        .filter(|&&(h, _)| host & h != 0)
        .fold(0, |g, &(_, guest)| g | guest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offered_set_has_the_data_path_features() {
        let f = offered_features(1, Offloads::none(), None);
        for b in [
            bits::VERSION_1,
            bits::MRG_RXBUF,
            bits::EVENT_IDX,
            bits::INDIRECT_DESC,
            bits::RING_PACKED,
            bits::IN_ORDER,
            bits::PROTOCOL_FEATURES,
            bits::LOG_ALL,
            bits::GUEST_ANNOUNCE,
        ] {
            assert_eq!(f & b, b, "bit {b:#x} missing");
        }
        assert_eq!(f & bits::MQ, 0, "MQ offered with one queue pair");
        assert_eq!(f & bits::MTU, 0, "MTU offered without an MTU");
        assert_eq!(f & Offloads::ALL_BITS, 0);
        let f = offered_features(16, Offloads::all(), Some(9000));
        assert_eq!(f & bits::MQ, bits::MQ);
        assert_eq!(f & bits::MTU, bits::MTU);
        assert_eq!(f & Offloads::ALL_BITS, Offloads::ALL_BITS);
    }

    #[test]
    fn protocol_features_are_the_handled_ones() {
        let p = offered_protocol_features();
        assert!(p.contains(VhostUserProtocolFeatures::MQ));
        assert!(p.contains(VhostUserProtocolFeatures::REPLY_ACK));
        assert!(p.contains(VhostUserProtocolFeatures::CONFIGURE_MEM_SLOTS));
        assert!(p.contains(VhostUserProtocolFeatures::LOG_SHMFD));
        assert!(p.contains(VhostUserProtocolFeatures::RARP));
        for never in [
            VhostUserProtocolFeatures::MTU,
            VhostUserProtocolFeatures::STATUS,
            VhostUserProtocolFeatures::INFLIGHT_SHMFD,
            VhostUserProtocolFeatures::CONFIG,
        ] {
            assert!(!p.contains(never), "{never:?} offered");
        }
    }

    #[test]
    fn offload_dependencies_are_enforced() {
        assert!(Offloads::from_bits(bits::HOST_TSO4).is_err());
        assert!(Offloads::from_bits(bits::GUEST_TSO6).is_err());
        assert!(Offloads::from_bits(bits::CSUM | bits::HOST_ECN).is_err());
        assert_eq!(Offloads::from_bits(1 << 40), Err(1 << 40));
        assert!(Offloads::from_bits(Offloads::checksum_and_tso().bits()).is_ok());
        assert!(Offloads::from_bits(Offloads::all().bits()).is_ok());
        assert_eq!(Offloads::from_bits(0), Ok(Offloads::none()));
    }

    #[test]
    fn header_length_follows_the_acked_set() {
        assert_eq!(Negotiated::new(0).hdr_len(), 10);
        assert_eq!(Negotiated::new(bits::MRG_RXBUF).hdr_len(), 12);
        assert_eq!(Negotiated::new(bits::VERSION_1).hdr_len(), 12);
        let n = Negotiated::new(bits::VERSION_1 | bits::EVENT_IDX);
        assert!(n.event_idx() && !n.mrg_rxbuf() && !n.indirect());
    }
}
