// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! One destination trait: [`Sink`], where a forwarding loop pushes frames,
//! whether they go into a guest ([`RxBurst`](crate::RxBurst)) or out of an
//! uplink ([`UplinkSink`](crate::io::UplinkSink)).
//!
//! A loop pushes each frame with its offload metadata from any
//! [`FrameSource`] (one copy: from guest memory or the uplink's buffer into
//! the destination's), flushes once per burst, and asks the sink which
//! offloads it accepts ([`Sink::accepts`], in the receiver's `GUEST_*`
//! vocabulary that [`crate::offload::fits`] takes). Frames that do not
//! fit are completed in software by [`crate::forward::Forwarder`].
//!
//! Every frame pushed is counted once, by the sink: delivered, or dropped
//! for one [`DropReason`] (see [`Sink::push`] for the one exception).
//!
//! This file holds the trait only; it sits above the frame vocabulary
//! ([`crate::frame`]) and below everything that implements it.

pub use crate::device::{guest_from_host, GUEST_OFFLOADS};
use crate::frame::FrameSource;
use crate::net_hdr::VirtioNetHdr;
use crate::stats::DropReason;

/// A destination of frames: a guest's RX queue during a burst, or an uplink.
pub trait Sink {
    /// Copies one frame with its offload metadata into the destination (one
    /// copy). It is delivered at the next [`Sink::flush`] at the latest.
    ///
    /// # Errors
    /// The frame was dropped and counted by the sink, for the reason
    /// returned; except `OffloadUnsupported`, returned uncounted: the header
    /// asks for an offload the destination does not take (even though
    /// [`Sink::accepts`] said it might). Complete or segment the frame in
    /// software and push the result ([`crate::forward::Forwarder`] does), or
    /// record the drop with [`Sink::drop_frame`].
    fn push(&mut self, hdr: &VirtioNetHdr, frame: &dyn FrameSource) -> Result<(), DropReason>;

    /// [`Sink::push`] for a frame whose type the caller knows: a sink that
    /// can copy from it without calls through the trait object (a guest's
    /// RX queue) does so. The same contract.
    ///
    /// A second method rather than one generic `push`, so that `Sink`
    /// stays object-safe and what the data path compiles to stays as
    /// measured (the reason is in [`crate::forward`]'s documentation).
    ///
    /// # Errors
    /// As [`Sink::push`].
    #[inline]
    fn push_typed<F: FrameSource>(
        &mut self,
        hdr: &VirtioNetHdr,
        frame: &F,
    ) -> Result<(), DropReason>
    where
        Self: Sized,
    {
        self.push(hdr, frame)
    }

    /// Delivers what was pushed: publishes used entries and notifies the
    /// guest, or hands frames to the kernel. Once per burst.
    ///
    /// # Errors
    /// A socket error (uplinks).
    fn flush(&mut self) -> std::io::Result<()>;

    /// The offloads a frame's header may ask for, as `GUEST_*` bits
    /// ([`GUEST_OFFLOADS`]): what [`crate::offload::fits`] takes.
    fn accepts(&self) -> u64;

    /// Counts a frame meant for this destination that was dropped before it
    /// reached it (the software fallback could not complete it, or a push
    /// was refused with `OffloadUnsupported` and given up on).
    fn drop_frame(&mut self, reason: DropReason);
}
