// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Names of the virtio-net and transport feature bits (virtio 1.2 §5.1.3,
//! §6) and vhost-user's `VHOST_USER_F_PROTOCOL_FEATURES`, for the reports
//! of the QEMU and testpmd peers.

/// `(bit, name)`, by bit.
pub const NAMES: &[(u32, &str)] = &[
    (0, "CSUM"),
    (1, "GUEST_CSUM"),
    (2, "CTRL_GUEST_OFFLOADS"),
    (3, "MTU"),
    (5, "MAC"),
    (6, "GSO"),
    (7, "GUEST_TSO4"),
    (8, "GUEST_TSO6"),
    (9, "GUEST_ECN"),
    (10, "GUEST_UFO"),
    (11, "HOST_TSO4"),
    (12, "HOST_TSO6"),
    (13, "HOST_ECN"),
    (14, "HOST_UFO"),
    (15, "MRG_RXBUF"),
    (16, "STATUS"),
    (17, "CTRL_VQ"),
    (18, "CTRL_RX"),
    (19, "CTRL_VLAN"),
    (20, "CTRL_RX_EXTRA"),
    (21, "GUEST_ANNOUNCE"),
    (22, "MQ"),
    (23, "CTRL_MAC_ADDR"),
    (24, "NOTIFY_ON_EMPTY"),
    (27, "ANY_LAYOUT"),
    (28, "RING_INDIRECT_DESC"),
    (29, "RING_EVENT_IDX"),
    (30, "VHOST_USER_F_PROTOCOL_FEATURES"),
    (32, "VERSION_1"),
    (33, "ACCESS_PLATFORM"),
    (34, "RING_PACKED"),
    (35, "IN_ORDER"),
    (36, "ORDER_PLATFORM"),
    (37, "SR_IOV"),
    (38, "NOTIFICATION_DATA"),
    (39, "NOTIF_CONFIG_DATA"),
    (40, "RING_RESET"),
    (50, "DEVICE_STATS"),
    (52, "VQ_NOTF_COAL"),
    (53, "NOTF_COAL"),
    (54, "GUEST_USO4"),
    (55, "GUEST_USO6"),
    (56, "HOST_USO"),
    (57, "HASH_REPORT"),
    (59, "GUEST_HDRLEN"),
    (60, "RSS"),
    (61, "RSC_EXT"),
    (62, "STANDBY"),
    (63, "SPEED_DUPLEX"),
];

/// The feature bits on which DPDK's virtio-user and its vhost-user backend
/// legitimately disagree: `STATUS` (bit 16) and `CTRL_VQ` (bit 17), which
/// virtio-user emulates itself, and `VHOST_USER_F_PROTOCOL_FEATURES` (bit
/// 30, the transport's, which virtio-user does not list). Compare a
/// backend's acked set with virtio-user's negotiated set outside these.
pub const VIRTIO_USER_LOCAL_BITS: u64 = (1 << 16) | (1 << 17) | (1 << 30);

/// The name of feature bit `bit`, if it has one here.
pub fn name(bit: u32) -> Option<&'static str> {
    NAMES.iter().find(|&&(b, _)| b == bit).map(|&(_, n)| n)
}
