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
//! them.

use std::io;
use std::os::fd::RawFd;

use crate::net_hdr::VirtioNetHdr;
use crate::queue::FrameSource;

pub mod af_packet;
pub mod af_xdp;
pub mod offload;
pub mod tap;

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

/// Why a frame could not be queued for transmission.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TxError {
    /// No free transmit buffer: flush and retry later (back-pressure).
    #[error("no free transmit buffer")]
    Full,
    /// The frame is larger than the uplink's buffers (or its MTU, without
    /// segmentation offload).
    #[error("frame too large")]
    TooLarge,
    /// The frame's header asks for an offload the uplink does not accept
    /// (segment or checksum it in software first, see [`offload`]).
    #[error("offload not supported")]
    Offload,
}

/// Counters of an uplink.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UplinkCounters {
    /// Frames received.
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Frames dropped on receive (truncated, ring overrun reported by the
    /// kernel, malformed metadata).
    pub rx_dropped: u64,
    /// Frames handed to the kernel.
    pub tx_packets: u64,
    /// Bytes handed to the kernel.
    pub tx_bytes: u64,
    /// Frames the kernel refused or that could not be queued.
    pub tx_dropped: u64,
}

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
    fn rx_burst(
        &mut self,
        max: usize,
        f: &mut dyn FnMut(&VirtioNetHdr, &[u8]),
    ) -> io::Result<usize>;

    /// Copies one frame into a transmit buffer (one copy). Frames are sent
    /// at the next [`Uplink::tx_flush`] (or earlier, when buffers run out).
    ///
    /// # Errors
    /// See [`TxError`]; the frame was not queued.
    fn tx_push(&mut self, hdr: &VirtioNetHdr, frame: &dyn FrameSource) -> Result<(), TxError>;

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

    /// Counters since creation.
    fn counters(&self) -> UplinkCounters;
}
