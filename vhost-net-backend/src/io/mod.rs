// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Uplinks: packet I/O between the data plane and the host (NICs, the
//! kernel stack), behind one burst-shaped trait.
//!
//! One copy per hop: [`Uplink::rx_burst`] lends each received frame from
//! the uplink's own memory (an AF_XDP UMEM frame, an AF_PACKET ring slot, a
//! TAP read buffer) so the caller copies it straight into guest RX buffers;
//! [`Uplink::tx_push`] takes any [`FrameSource`] (a guest TX frame still in
//! guest memory) and copies it once into the uplink's transmit buffers.
//!
//! Each uplink states which offloads it accepts with a frame and which it
//! may produce ([`UplinkOffloads`]); the software fallbacks in [`offload`]
//! complete checksums and segment super-frames for destinations that lack
//! them. A forwarding loop sees an uplink's transmit side as a
//! [`Sink`](crate::sink::Sink), like a guest's RX queue
//! ([`UplinkSink`]), and calls
//! [`Forwarder::forward`](crate::forward::Forwarder::forward) for each frame.
//!
//! Frames lost on the way are counted by [`DropReason`], as the guest
//! queues count theirs ([`UplinkCounters`]).

use std::io;
use std::os::fd::RawFd;

use crate::frame::FrameSource;
use crate::net_hdr::VirtioNetHdr;
use crate::stats::{DropCounts, DropReason};

pub mod af_packet;
pub mod af_xdp;
mod sink;
pub mod tap;

pub use sink::{UplinkSink, FULL_RETRIES};

/// The software offload fallbacks, where uplinks have always found them
/// (the module is [`crate::offload`]).
pub use crate::offload;

/// Offloads an uplink handles, as virtio-net feature bits
/// ([`crate::device::bits`]).
///
/// `tx` uses the device-side (HOST_*) names: what the uplink accepts in a
/// frame's header on transmit (`CSUM` = partial checksums, `HOST_TSO4` = TCPv4
/// super-frames, ...). `rx` uses the driver-side (GUEST_*) names: what
/// headers of received frames may carry (`GUEST_CSUM`, `GUEST_TSO4`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UplinkOffloads {
    /// Accepted on transmit.
    pub tx: u64,
    /// Possibly produced on receive.
    pub rx: u64,
}

/// Counters of an uplink.
///
/// Drops are counted by [`DropReason`], the vocabulary guest queues use:
/// `rx` drops are frames lost on the way in (`TooLong`: truncated by the
/// uplink's buffers; `Overrun`: lost by the kernel; `Malformed`: bad offload
/// metadata), `tx` drops frames that did not leave (`TooLong`, `Refused` by
/// the kernel, and whatever a caller gave up on through
/// [`Uplink::tx_drop`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UplinkCounters {
    /// Frames received.
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Frames handed to the kernel.
    pub tx_packets: u64,
    /// Bytes handed to the kernel.
    pub tx_bytes: u64,
    /// Frames lost on receive, by reason.
    pub rx_drops: DropCounts,
    /// Frames that could not be sent, by reason.
    pub tx_drops: DropCounts,
}

impl UplinkCounters {
    /// Frames lost on receive, whatever the reason.
    pub fn rx_dropped(&self) -> u64 {
        self.rx_drops.total()
    }

    /// Frames that could not be sent, whatever the reason.
    pub fn tx_dropped(&self) -> u64 {
        self.tx_drops.total()
    }

    /// Adds every counter of `other` (an earlier incarnation of the same
    /// queue, so that totals stay monotonic across a reopen).
    pub fn accumulate(&mut self, other: &UplinkCounters) {
        self.rx_packets += other.rx_packets;
        self.rx_bytes += other.rx_bytes;
        self.tx_packets += other.tx_packets;
        self.tx_bytes += other.tx_bytes;
        self.rx_drops.merge(&other.rx_drops);
        self.tx_drops.merge(&other.tx_drops);
    }
}

/// The index of network interface `name` in the calling thread's network
/// namespace: what an uplink opened on `name` is bound to. Tells whether the
/// interface is still the one a socket was opened on (deleted and created
/// again, it has a new index).
///
/// # Errors
/// An invalid name (`InvalidInput`), or no such interface (`ENODEV`).
pub fn interface_index(name: &str) -> io::Result<u32> {
    let n = crate::sys::netdev::IfName::new(name)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.0))?;
    crate::sys::netdev::ifindex(&n)
}

/// What [`Uplink::rx_burst`] lends each received frame to: the frame's
/// offload metadata and its bytes, which are valid during the call only.
pub type RxFn<'a> = &'a mut dyn FnMut(&VirtioNetHdr, &[u8]);

/// Packet I/O to the host, in bursts.
///
/// Hot path: implementations make no allocation per frame, take no lock,
/// and make at most one syscall per burst in each direction (TAP, whose
/// kernel interface is one frame per `read`/`write`, is the exception).
pub trait Uplink: Send {
    /// A short name for logs and metrics (e.g. `af_xdp:eth0`).
    fn name(&self) -> &str;

    /// Receives up to `max` frames, lending each to `f` with its offload
    /// metadata; the bytes live in the uplink's memory and are valid during
    /// the call only. Returns the number of frames lent.
    ///
    /// # Errors
    /// A socket error (not EAGAIN, which is 0 frames).
    fn rx_burst(&mut self, max: usize, f: RxFn<'_>) -> io::Result<usize>;

    /// Copies one frame into a transmit buffer (one copy). Frames are sent
    /// at the next [`Uplink::tx_flush`] (or earlier, when buffers run out).
    ///
    /// # Errors
    /// The frame was not queued, for the reason returned:
    ///
    /// * `NoBuffers`: no free transmit buffer (back-pressure). Flush and
    ///   retry, or give up and record the drop with [`Uplink::tx_drop`].
    /// * `OffloadUnsupported`: the header asks for an offload the uplink does
    ///   not accept (or that its kernel would refuse). Complete or segment the
    ///   frame in software ([`offload`]) and push the result, or record the
    ///   drop with [`Uplink::tx_drop`].
    /// * any other reason (`TooLong`, ...): a drop, already counted.
    ///
    /// So every frame is counted once: sent, or dropped for one reason.
    fn tx_push(&mut self, hdr: &VirtioNetHdr, frame: &dyn FrameSource) -> Result<(), DropReason>;

    /// Records a frame the caller gave up on after `tx_push` refused it with
    /// a reason the uplink does not count itself (`NoBuffers`,
    /// `OffloadUnsupported`), or for a reason of the caller's own.
    fn tx_drop(&mut self, reason: DropReason);

    /// Hands queued frames to the kernel and reclaims completed buffers.
    ///
    /// # Errors
    /// A socket error (not EAGAIN).
    fn tx_flush(&mut self) -> io::Result<()>;

    /// File descriptor that becomes readable when frames arrive (for
    /// adaptive and interrupt polling).
    fn rx_fd(&self) -> RawFd;

    /// The offloads this uplink handles.
    fn offloads(&self) -> UplinkOffloads;

    /// The guest this uplink serves acked a new feature set (0: no guest
    /// any more). An uplink whose kernel side can be told which receive
    /// offloads to produce (TAP: `TUNSETOFFLOAD`) adjusts
    /// [`UplinkOffloads::rx`] to what the guest takes; the default does
    /// nothing. Not for the hot path: call it when the acked set changes.
    fn guest_features(&mut self, acked: u64) {
        let _ = acked;
    }

    /// Counters since creation.
    fn counters(&self) -> UplinkCounters;
}
