// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Counters, and the one vocabulary of drops ([`DropReason`]) that guest
//! queues, uplinks and forwarding loops count in.
//!
//! Design: each queue accumulates counts in plain locals during a burst and
//! publishes them with one `fetch_add` per counter per burst (`Relaxed`: the
//! counters order nothing, readers only need eventual totals). Counters are
//! `u64` and never reset while the port exists (a reconnect keeps them), so
//! readers compute rates from differences; they wrap after 2^64.

use std::sync::atomic::{AtomicU64, Ordering};

/// Why a frame (or a guest buffer) was dropped. Per-packet outcomes are
/// counted, never logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum DropReason {
    /// The guest posted no (or not enough) RX buffers.
    NoBuffers = 0,
    /// A descriptor index, flag combination, loop or indirect table was
    /// invalid.
    BadDescriptor,
    /// A buffer address or length points outside the guest's memory.
    BadAddress,
    /// A chain has more buffers than the engine handles.
    TooManySegments,
    /// A frame is shorter than its virtio-net header (or empty).
    TooShort,
    /// A frame is longer than the MTU allows or the RX buffers hold.
    TooLong,
    /// The frame's offload metadata needs a feature the receiving guest did
    /// not ack.
    OffloadUnsupported,
    /// The guest broke the ring (avail index out of range); the queue stops
    /// until the frontend restarts it.
    RingBroken,
    /// The frame's headers or offload metadata are malformed (a checksum
    /// offset outside the frame, a super-frame whose headers do not parse),
    /// so the software offload fallback could not complete it.
    Malformed,
    /// The kernel lost frames before they reached us (an uplink's receive
    /// ring or socket buffer overran).
    Overrun,
    /// The kernel refused a frame on transmit (a send error, or a qdisc or
    /// driver drop).
    Refused,
    /// A forwarding decision: the frame's source MAC is not one the port
    /// may send from (anti-spoofing).
    Spoofed,
    /// A forwarding decision: the frame's VLAN (or its being untagged) is
    /// not allowed on the port, or its VLAN has no other member to deliver
    /// it to (counted on the ingress port).
    VlanDenied,
    /// A forwarding decision: the destination is on the port the frame came
    /// from.
    Hairpin,
    /// The uplink's interface is gone (deleted, or its namespace with it)
    /// and not back yet: the frame had nowhere to go.
    LinkDown,
    /// A forwarding decision: the frame was to be flooded (broadcast,
    /// multicast, unknown unicast) beyond its ingress port's flood rate.
    FloodRate,
}

impl DropReason {
    /// Every reason, in counter order.
    pub const ALL: [DropReason; 16] = [
        DropReason::NoBuffers,
        DropReason::BadDescriptor,
        DropReason::BadAddress,
        DropReason::TooManySegments,
        DropReason::TooShort,
        DropReason::TooLong,
        DropReason::OffloadUnsupported,
        DropReason::RingBroken,
        DropReason::Malformed,
        DropReason::Overrun,
        DropReason::Refused,
        DropReason::Spoofed,
        DropReason::VlanDenied,
        DropReason::Hairpin,
        DropReason::LinkDown,
        DropReason::FloodRate,
    ];

    /// How many reasons there are.
    pub const COUNT: usize = Self::ALL.len();

    /// A short snake_case name, for metrics labels and logs.
    pub const fn name(self) -> &'static str {
        match self {
            DropReason::NoBuffers => "no_buffers",
            DropReason::BadDescriptor => "bad_descriptor",
            DropReason::BadAddress => "bad_address",
            DropReason::TooManySegments => "too_many_segments",
            DropReason::TooShort => "too_short",
            DropReason::TooLong => "too_long",
            DropReason::OffloadUnsupported => "offload_unsupported",
            DropReason::RingBroken => "ring_broken",
            DropReason::Malformed => "malformed",
            DropReason::Overrun => "overrun",
            DropReason::Refused => "refused",
            DropReason::Spoofed => "spoofed",
            DropReason::VlanDenied => "vlan_denied",
            DropReason::Hairpin => "hairpin",
            DropReason::LinkDown => "link_down",
            DropReason::FloodRate => "flood_rate",
        }
    }
}

impl std::fmt::Display for DropReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

const N_REASONS: usize = DropReason::COUNT;

/// Drops counted by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DropCounts([u64; N_REASONS]);

impl DropCounts {
    /// Counts `n` drops for `r`.
    #[inline]
    pub fn add(&mut self, r: DropReason, n: u64) {
        self.0[r as usize] += n;
    }

    /// Drops for one reason.
    pub fn get(&self, r: DropReason) -> u64 {
        self.0[r as usize]
    }

    /// All drops, whatever the reason.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// Adds every count of `other`.
    pub fn merge(&mut self, other: &DropCounts) {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a += b;
        }
    }

    /// Each reason with its count, in [`DropReason::ALL`] order.
    pub fn iter(&self) -> impl Iterator<Item = (DropReason, u64)> + '_ {
        DropReason::ALL.into_iter().zip(self.0.iter().copied())
    }
}

/// Counters of one virtqueue.
#[derive(Debug, Default)]
pub struct QueueStats {
    /// Frames moved (dequeued from guest TX, or delivered to guest RX).
    packets: AtomicU64,
    /// Bytes of those frames, virtio-net header excluded.
    bytes: AtomicU64,
    /// Interrupts (call eventfd writes) sent to the guest.
    notifications: AtomicU64,
    /// Drops by reason.
    drops: [AtomicU64; N_REASONS],
}

/// A plain copy of a queue's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueCounters {
    /// Frames moved.
    pub packets: u64,
    /// Bytes moved (virtio-net header excluded).
    pub bytes: u64,
    /// Interrupts sent to the guest.
    pub notifications: u64,
    /// Drops by reason.
    pub drops: DropCounts,
}

impl QueueCounters {
    /// All drops, whatever the reason.
    pub fn dropped(&self) -> u64 {
        self.drops.total()
    }

    /// Drops for one reason.
    pub fn drops_for(&self, r: DropReason) -> u64 {
        self.drops.get(r)
    }
}

impl QueueStats {
    /// Reads every counter (each individually atomic).
    pub fn snapshot(&self) -> QueueCounters {
        let mut c = QueueCounters {
            packets: self.packets.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            notifications: self.notifications.load(Ordering::Relaxed),
            drops: DropCounts::default(),
        };
        for (d, a) in c.drops.0.iter_mut().zip(&self.drops) {
            *d = a.load(Ordering::Relaxed);
        }
        c
    }

    /// Adds a burst's local counts.
    pub(crate) fn add(&self, local: &BurstCounters) {
        if local.packets != 0 {
            self.packets.fetch_add(local.packets, Ordering::Relaxed);
            self.bytes.fetch_add(local.bytes, Ordering::Relaxed);
        }
        if local.notifications != 0 {
            self.notifications
                .fetch_add(local.notifications, Ordering::Relaxed);
        }
        if local.any_drop {
            for (a, d) in self.drops.iter().zip(&local.drops) {
                if *d != 0 {
                    a.fetch_add(*d, Ordering::Relaxed);
                }
            }
        }
    }
}

/// Counts accumulated during one burst.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct BurstCounters {
    pub packets: u64,
    pub bytes: u64,
    pub notifications: u64,
    pub drops: [u64; N_REASONS],
    pub any_drop: bool,
}

impl BurstCounters {
    #[inline]
    pub(crate) fn drop(&mut self, r: DropReason) {
        self.drops[r as usize] += 1;
        self.any_drop = true;
    }
}
