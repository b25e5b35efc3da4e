// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The virtqueue flag words (virtio 1.x, 2.7 and 2.8), taken from
//! `virtio-bindings`: the one definition the split and packed engines and
//! the loopback guest's driver side read. `test_utils::flags` re-exports
//! them for tests and fuzzers.

use virtio_bindings::virtio_ring as vr;

/// Descriptor flag: the chain continues at `next`.
pub const DESC_F_NEXT: u16 = vr::VRING_DESC_F_NEXT as u16;
/// Descriptor flag: the buffer is device-writable (RX).
pub const DESC_F_WRITE: u16 = vr::VRING_DESC_F_WRITE as u16;
/// Descriptor flag: the buffer is a table of descriptors.
pub const DESC_F_INDIRECT: u16 = vr::VRING_DESC_F_INDIRECT as u16;
/// Packed descriptor flag: the driver's wrap counter when made available.
pub const DESC_F_AVAIL: u16 = 1 << vr::VRING_PACKED_DESC_F_AVAIL;
/// Packed descriptor flag: the device's wrap counter when used.
pub const DESC_F_USED: u16 = 1 << vr::VRING_PACKED_DESC_F_USED;
/// Split avail ring flag: the driver asks for no used-buffer interrupts.
pub const AVAIL_F_NO_INTERRUPT: u16 = vr::VRING_AVAIL_F_NO_INTERRUPT as u16;
/// Split used ring flag: the device asks for no available-buffer kicks.
pub const USED_F_NO_NOTIFY: u16 = vr::VRING_USED_F_NO_NOTIFY as u16;
/// Packed event suppression: notifications on.
pub const EVENT_ENABLE: u16 = vr::VRING_PACKED_EVENT_FLAG_ENABLE as u16;
/// Packed event suppression: notifications off.
pub const EVENT_DISABLE: u16 = vr::VRING_PACKED_EVENT_FLAG_DISABLE as u16;
/// Packed event suppression: notify at one descriptor (EVENT_IDX).
pub const EVENT_DESC: u16 = vr::VRING_PACKED_EVENT_FLAG_DESC as u16;
