// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! An uplink's transmit side as a [`Sink`]: [`UplinkSink`], which retries
//! while the uplink's transmit buffers are full and counts what it gives up
//! on, so every frame is sent or counted once.

use super::Uplink;
use crate::device::guest_from_host;
use crate::frame::FrameSource;
use crate::net_hdr::VirtioNetHdr;
use crate::sink::Sink;
use crate::stats::DropReason;

/// Flush-and-retry rounds of [`UplinkSink::push`] while the uplink's
/// transmit buffers are full.
pub const FULL_RETRIES: usize = 64;

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

#[cfg(all(test, feature = "test-utils"))]
mod tests {
    use super::*;
    use crate::device::{bits, GUEST_OFFLOADS};
    use crate::io::UplinkOffloads;
    use crate::test_utils::{Script, ScriptedUplink};

    /// An uplink whose transmit buffers are full for the first `full`
    /// pushes, and that transmits `tx` offloads.
    fn uplink(full: usize, tx: u64) -> ScriptedUplink {
        ScriptedUplink::with_script(
            "fake",
            Script {
                full,
                offloads: UplinkOffloads { tx, rx: 0 },
                ..Script::default()
            },
        )
    }

    #[test]
    fn retries_while_full() {
        let mut u = uplink(5, 0);
        let mut s = UplinkSink::new(&mut u);
        assert_eq!(s.push(&VirtioNetHdr::default(), &[1u8; 60]), Ok(()));
        let script = u.script();
        assert_eq!(script.flushes, 5);
        assert_eq!(script.sent.len(), 1);
        assert_eq!(script.counters.tx_dropped(), 0);
    }

    #[test]
    fn gives_up_after_the_retries_and_counts_once() {
        let mut u = uplink(FULL_RETRIES + 1, 0);
        let mut s = UplinkSink::new(&mut u);
        assert_eq!(
            s.push(&VirtioNetHdr::default(), &[1u8; 60]),
            Err(DropReason::NoBuffers)
        );
        let script = u.script();
        assert_eq!(script.flushes, FULL_RETRIES);
        assert!(script.sent.is_empty());
        assert_eq!(script.counters.tx_drops.get(DropReason::NoBuffers), 1);
        assert_eq!(script.counters.tx_dropped(), 1);
    }

    #[test]
    fn offloads_in_guest_names() {
        let mut u = uplink(0, bits::CSUM | bits::HOST_TSO4 | bits::HOST_UFO);
        let s = UplinkSink::new(&mut u);
        assert_eq!(
            s.accepts(),
            bits::GUEST_CSUM | bits::GUEST_TSO4 | bits::GUEST_UFO
        );
        assert_eq!(guest_from_host(u64::MAX), GUEST_OFFLOADS);
        assert_eq!(guest_from_host(0), 0);
    }
}
