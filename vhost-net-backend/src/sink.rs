// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! One destination trait: [`Sink`], where a forwarding loop pushes frames,
//! whether they go into a guest ([`RxBurst`](crate::RxBurst)) or out of an
//! uplink ([`UplinkSink`]).
//!
//! A loop pushes each frame with its offload metadata from any
//! [`FrameSource`] (one copy: from guest memory or the uplink's buffer into
//! the destination's), flushes once per burst, and asks the sink which
//! offloads it accepts ([`Sink::accepts`], in the receiver's `GUEST_*`
//! vocabulary that [`crate::io::offload::fits`] takes). Frames that do not
//! fit are completed in software by [`crate::forward::Forwarder`].
//!
//! Every frame pushed is counted once, by the sink: delivered, or dropped
//! for one [`DropReason`] (see [`Sink::push`] for the one exception).

use crate::device::bits;
use crate::io::Uplink;
use crate::net_hdr::VirtioNetHdr;
use crate::queue::FrameSource;
use crate::stats::DropReason;

/// The offloads a receiver may accept, as driver-side (`GUEST_*`) feature
/// bits: the vocabulary of [`Sink::accepts`].
pub const GUEST_OFFLOADS: u64 =
    bits::GUEST_CSUM | bits::GUEST_TSO4 | bits::GUEST_TSO6 | bits::GUEST_ECN | bits::GUEST_UFO;

/// Flush-and-retry rounds of [`UplinkSink::push`] while the uplink's
/// transmit buffers are full.
pub const FULL_RETRIES: usize = 64;

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
    /// ([`GUEST_OFFLOADS`]): what [`crate::io::offload::fits`] takes.
    fn accepts(&self) -> u64;

    /// Counts a frame meant for this destination that was dropped before it
    /// reached it (the software fallback could not complete it, or a push
    /// was refused with `OffloadUnsupported` and given up on).
    fn drop_frame(&mut self, reason: DropReason);
}

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

/// An uplink's transmit side as a [`Sink`].
///
/// [`Sink::push`] is final: on `NoBuffers` it flushes and retries (up to
/// [`FULL_RETRIES`] times), and a frame it gives up on is recorded with
/// [`Uplink::tx_drop`], so every frame is sent or counted once as a drop.
#[derive(Debug)]
pub struct UplinkSink<'a, U: Uplink + ?Sized> {
    uplink: &'a mut U,
    /// The uplink's transmit offloads, in `GUEST_*` names.
    accepts: u64,
}

impl<'a, U: Uplink + ?Sized> UplinkSink<'a, U> {
    /// Wraps an uplink (reads its offloads once).
    pub fn new(uplink: &'a mut U) -> Self {
        let accepts = guest_from_host(uplink.offloads().tx);
        Self { uplink, accepts }
    }

    /// Wraps an uplink whose accepted offloads the caller already knows
    /// (`guest_from_host(uplink.offloads().tx)`, kept across bursts): no
    /// call into the uplink per wrap, for a loop that wraps per frame.
    #[inline]
    pub fn with_accepts(uplink: &'a mut U, accepts: u64) -> Self {
        Self { uplink, accepts }
    }

    /// The uplink.
    pub fn uplink(&mut self) -> &mut U {
        self.uplink
    }
}

impl<U: Uplink + ?Sized> Sink for UplinkSink<'_, U> {
    fn push(&mut self, hdr: &VirtioNetHdr, frame: &dyn FrameSource) -> Result<(), DropReason> {
        match self.uplink.tx_push(hdr, frame) {
            Err(DropReason::NoBuffers) => {}
            r => return r,
        }
        for _ in 0..FULL_RETRIES {
            let _ = self.uplink.tx_flush();
            match self.uplink.tx_push(hdr, frame) {
                Err(DropReason::NoBuffers) => std::hint::spin_loop(),
                r => return r,
            }
        }
        self.uplink.tx_drop(DropReason::NoBuffers);
        Err(DropReason::NoBuffers)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.uplink.tx_flush()
    }

    fn accepts(&self) -> u64 {
        self.accepts
    }

    fn drop_frame(&mut self, reason: DropReason) {
        self.uplink.tx_drop(reason);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::os::fd::RawFd;

    use super::*;
    use crate::io::{RxFn, UplinkCounters, UplinkOffloads};
    use crate::queue::copy_frame;

    /// An uplink whose transmit buffers are full for the first `full`
    /// pushes; it keeps what it sends.
    #[derive(Debug, Default)]
    pub(crate) struct FakeUplink {
        pub full: usize,
        pub tx_offloads: u64,
        pub refuse_offloads: bool,
        pub flushes: usize,
        pub sent: Vec<(VirtioNetHdr, Vec<u8>)>,
        pub counters: UplinkCounters,
    }

    impl Uplink for FakeUplink {
        fn name(&self) -> &str {
            "fake"
        }
        fn rx_burst(&mut self, _max: usize, _f: RxFn<'_>) -> std::io::Result<usize> {
            Ok(0)
        }
        fn tx_push(
            &mut self,
            hdr: &VirtioNetHdr,
            frame: &dyn FrameSource,
        ) -> Result<(), DropReason> {
            if self.refuse_offloads && (hdr.is_gso() || hdr.needs_csum()) {
                return Err(DropReason::OffloadUnsupported);
            }
            if self.full > 0 {
                self.full -= 1;
                return Err(DropReason::NoBuffers);
            }
            let mut buf = vec![0; frame.frame_len()];
            copy_frame(frame, &mut buf);
            self.counters.tx_packets += 1;
            self.counters.tx_bytes += buf.len() as u64;
            self.sent.push((*hdr, buf));
            Ok(())
        }
        fn tx_drop(&mut self, reason: DropReason) {
            self.counters.tx_drops.add(reason, 1);
        }
        fn tx_flush(&mut self) -> std::io::Result<()> {
            self.flushes += 1;
            Ok(())
        }
        fn rx_fd(&self) -> RawFd {
            -1
        }
        fn offloads(&self) -> UplinkOffloads {
            UplinkOffloads {
                tx: self.tx_offloads,
                rx: 0,
            }
        }
        fn counters(&self) -> UplinkCounters {
            self.counters
        }
    }

    #[test]
    fn retries_while_full() {
        let mut u = FakeUplink {
            full: 5,
            ..FakeUplink::default()
        };
        let mut s = UplinkSink::new(&mut u);
        assert_eq!(s.push(&VirtioNetHdr::default(), &[1u8; 60]), Ok(()));
        assert_eq!(u.flushes, 5);
        assert_eq!(u.sent.len(), 1);
        assert_eq!(u.counters.tx_dropped(), 0);
    }

    #[test]
    fn gives_up_after_the_retries_and_counts_once() {
        let mut u = FakeUplink {
            full: FULL_RETRIES + 1,
            ..FakeUplink::default()
        };
        let mut s = UplinkSink::new(&mut u);
        assert_eq!(
            s.push(&VirtioNetHdr::default(), &[1u8; 60]),
            Err(DropReason::NoBuffers)
        );
        assert_eq!(u.flushes, FULL_RETRIES);
        assert!(u.sent.is_empty());
        assert_eq!(u.counters.tx_drops.get(DropReason::NoBuffers), 1);
        assert_eq!(u.counters.tx_dropped(), 1);
    }

    #[test]
    fn offloads_in_guest_names() {
        let mut u = FakeUplink {
            tx_offloads: bits::CSUM | bits::HOST_TSO4 | bits::HOST_UFO,
            ..FakeUplink::default()
        };
        let s = UplinkSink::new(&mut u);
        assert_eq!(
            s.accepts(),
            bits::GUEST_CSUM | bits::GUEST_TSO4 | bits::GUEST_UFO
        );
        assert_eq!(guest_from_host(u64::MAX), GUEST_OFFLOADS);
        assert_eq!(guest_from_host(0), 0);
    }
}
