// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Forwarding one frame into any [`Sink`], with the software offload
//! fallback: what a forwarding loop calls for each frame, whether it comes
//! from a guest ([`TxFrame`](crate::TxFrame)) or an uplink (a lent `&[u8]`),
//! and whether it goes into a guest or out of an uplink.
//!
//! * A frame whose header [`fits`] what the sink accepts is pushed as is:
//!   one copy, source to destination.
//! * Otherwise (or when the sink refuses it with `OffloadUnsupported` after
//!   all) it is copied once into a scratch buffer, its partial checksum
//!   completed or the super-frame segmented there ([`lend_within`]), and the
//!   results pushed: a second copy, on this path only.
//!
//! Every frame is counted once: delivered, or one drop, in the sink's
//! counters ([`Sink::push`], [`Sink::drop_frame`]). [`ForwardCounters`] say
//! what the fallback did, per use (a direction, a port).
//!
//! Hot path: no allocation (the scratch buffer and the [`Segmenter`] are
//! allocated once, by [`Forwarder::new`]), no lock, no syscall.
//!
//! # Why `forward` and `forward_typed`
//!
//! Both run the same code (the private `forward_by`);
//! they differ in the push: [`Forwarder::forward`] takes any
//! `&dyn FrameSource` and pushes it through [`Sink::push`], whose copy
//! calls the frame's methods through its trait object;
//! [`Forwarder::forward_typed`] takes the frame's type and pushes through
//! [`Sink::push_typed`], which a guest's RX queue implements with the
//! copy inlined for that type (a [`TxFrame`](crate::TxFrame), a byte
//! slice). They are kept apart on purpose: one generic `push<F: ?Sized>`
//! would make [`Sink`] unusable as a trait object and change the code the
//! data path compiles to in every implementer, a change that needs a
//! same-run benchmark A/B to be taken. `push_typed` has a default that
//! calls `push`, so a sink implements only the object-safe method unless
//! it has a faster copy for known types.

use crate::frame::{copy_frame, FrameSource};
use crate::net_hdr::VirtioNetHdr;
use crate::offload::{fits, lend_within, Segmenter};
use crate::sink::Sink;
use crate::stats::DropReason;

/// What a [`Forwarder`] did, for one use (e.g. one direction of a port).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ForwardCounters {
    /// Super-frames (GSO) seen.
    pub gso: u64,
    /// Super-frames handed to the sink as such.
    pub gso_passed: u64,
    /// Frames whose checksum was completed in software, then delivered.
    pub sw_csum: u64,
    /// Super-frames segmented in software.
    pub sw_segmented: u64,
    /// Segments of those delivered.
    pub sw_segments: u64,
    /// Frames (or segments) dropped: the sink's buffers stayed full.
    pub full: u64,
    /// Frames (or segments) dropped: larger than the sink or the scratch
    /// buffer takes.
    pub too_large: u64,
    /// Frames dropped: malformed offload metadata or headers.
    pub offload_errors: u64,
}

/// The software offload fallback of a forwarding loop: a scratch buffer and
/// a [`Segmenter`], allocated once.
#[derive(Debug)]
pub struct Forwarder {
    seg: Segmenter,
    /// A whole frame copied out of its source, for software offloads.
    scratch: Vec<u8>,
}

impl Default for Forwarder {
    fn default() -> Self {
        Self::new()
    }
}

impl Forwarder {
    /// A forwarder for frames up to [`Segmenter::DEFAULT_CAPACITY`] bytes
    /// (every frame a port or an uplink handles).
    pub fn new() -> Self {
        Self {
            seg: Segmenter::new(),
            scratch: vec![0; Segmenter::DEFAULT_CAPACITY],
        }
    }

    /// Forwards one frame with header `hdr` into `sink` (see the [module
    /// documentation](self)), counting in `c`.
    ///
    /// # Errors
    /// The frame (or one of its segments) was dropped, for the reason
    /// returned (the first, for segments); already counted in the sink.
    #[inline]
    pub fn forward<S: Sink + ?Sized>(
        &mut self,
        c: &mut ForwardCounters,
        hdr: &VirtioNetHdr,
        frame: &dyn FrameSource,
        sink: &mut S,
    ) -> Result<(), DropReason> {
        self.forward_by(c, hdr, frame, sink, |s| s.push(hdr, frame))
    }

    /// [`Forwarder::forward`] for a frame whose type the caller knows: the
    /// push is [`Sink::push_typed`], whose copy into a guest is inlined
    /// rather than called through the frame's trait object.
    ///
    /// # Errors
    /// As [`Forwarder::forward`].
    #[inline]
    pub fn forward_typed<S: Sink, F: FrameSource>(
        &mut self,
        c: &mut ForwardCounters,
        hdr: &VirtioNetHdr,
        frame: &F,
        sink: &mut S,
    ) -> Result<(), DropReason> {
        self.forward_by(c, hdr, frame, sink, |s| s.push_typed(hdr, frame))
    }

    /// The two above, with the push as given.
    #[inline(always)]
    fn forward_by<S: Sink + ?Sized>(
        &mut self,
        c: &mut ForwardCounters,
        hdr: &VirtioNetHdr,
        frame: &dyn FrameSource,
        sink: &mut S,
        push: impl FnOnce(&mut S) -> Result<(), DropReason>,
    ) -> Result<(), DropReason> {
        let gso = hdr.is_gso();
        if gso {
            c.gso += 1;
        }
        let mut accepts = sink.accepts();
        if fits(hdr, accepts) {
            match push(sink) {
                Ok(()) => {
                    if gso {
                        c.gso_passed += 1;
                    }
                    return Ok(());
                }
                // Refused after all (a header the kernel would reject, a
                // guest that renegotiated): assume the sink takes no
                // offloads.
                Err(DropReason::OffloadUnsupported) => accepts = 0,
                Err(r) => {
                    refused(c, sink, r);
                    return Err(r);
                }
            }
        }
        self.in_software(c, hdr, frame, accepts, sink)
    }

    /// The fallback: copy the frame out, complete or segment it, and push
    /// the results with headers within `accepts`.
    #[cold]
    fn in_software<S: Sink + ?Sized>(
        &mut self,
        c: &mut ForwardCounters,
        hdr: &VirtioNetHdr,
        frame: &dyn FrameSource,
        accepts: u64,
        sink: &mut S,
    ) -> Result<(), DropReason> {
        let len = frame.frame_len();
        let Some(buf) = self.scratch.get_mut(..len) else {
            c.too_large += 1;
            sink.drop_frame(DropReason::TooLong);
            return Err(DropReason::TooLong);
        };
        if copy_frame(frame, buf) != len {
            c.offload_errors += 1;
            sink.drop_frame(DropReason::Malformed);
            return Err(DropReason::Malformed);
        }
        let mut delivered = 0u64;
        let mut first_err = None;
        let res = lend_within(
            hdr,
            buf,
            accepts,
            &mut self.seg,
            &mut |h, s| match sink.push(h, &s) {
                Ok(()) => delivered += 1,
                Err(r) => {
                    refused(c, sink, r);
                    first_err.get_or_insert(r);
                }
            },
        );
        match res {
            Ok(_) if hdr.is_gso() => {
                c.sw_segmented += 1;
                c.sw_segments += delivered;
            }
            Ok(_) => c.sw_csum += delivered,
            Err(e) => {
                c.offload_errors += 1;
                let r = DropReason::from(e);
                sink.drop_frame(r);
                return Err(r);
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

/// Counts a push the sink refused (the sink counted the drop itself, except
/// for `OffloadUnsupported`, which is recorded here).
fn refused<S: Sink + ?Sized>(c: &mut ForwardCounters, sink: &mut S, r: DropReason) {
    match r {
        DropReason::NoBuffers => c.full += 1,
        DropReason::TooLong => c.too_large += 1,
        DropReason::OffloadUnsupported => {
            c.offload_errors += 1;
            sink.drop_frame(r);
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::bits;
    use crate::io::UplinkSink;
    use crate::net_hdr::{F_NEEDS_CSUM, GSO_TCPV4};
    use crate::offload::checksum;
    use crate::stats::DropCounts;

    /// A sink that keeps every frame pushed.
    #[derive(Debug, Default)]
    struct Capture {
        accepts: u64,
        frames: Vec<(VirtioNetHdr, Vec<u8>)>,
        drops: DropCounts,
        flushes: usize,
    }

    impl Sink for Capture {
        fn push(&mut self, hdr: &VirtioNetHdr, frame: &dyn FrameSource) -> Result<(), DropReason> {
            let mut buf = vec![0; frame.frame_len()];
            assert_eq!(copy_frame(frame, &mut buf), buf.len());
            self.frames.push((*hdr, buf));
            Ok(())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            self.flushes += 1;
            Ok(())
        }
        fn accepts(&self) -> u64 {
            self.accepts
        }
        fn drop_frame(&mut self, reason: DropReason) {
            self.drops.add(reason, 1);
        }
    }

    const TCP_OFF: usize = 14 + 20;
    const PAYLOAD: usize = 3000;
    const MSS: u16 = 1000;

    /// An Ethernet + IPv4 + TCP frame with `PAYLOAD` bytes and the TCP
    /// checksum field holding the pseudo-header sum, as a sender with
    /// `F_NEEDS_CSUM` leaves it.
    fn tcp4_frame() -> Vec<u8> {
        let mut f = vec![0u8; TCP_OFF + 20 + PAYLOAD];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        let ip = &mut f[14..TCP_OFF];
        ip[0] = 0x45;
        let total = (20 + 20 + PAYLOAD) as u16;
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        ip[8] = 64;
        ip[9] = 6;
        ip[12..16].copy_from_slice(&[10, 0, 0, 1]);
        ip[16..20].copy_from_slice(&[10, 0, 0, 2]);
        let sum = checksum(ip);
        ip[10..12].copy_from_slice(&sum.to_be_bytes());
        let tcp = &mut f[TCP_OFF..TCP_OFF + 20];
        tcp[0..2].copy_from_slice(&1234u16.to_be_bytes());
        tcp[2..4].copy_from_slice(&80u16.to_be_bytes());
        tcp[12] = 5 << 4;
        tcp[13] = 0x18;
        for (i, b) in f[TCP_OFF + 20..].iter_mut().enumerate() {
            *b = i as u8;
        }
        let l4 = (20 + PAYLOAD) as u32;
        let pseudo = crate::offload::pseudo_header_checksum(&[10, 0, 0, 1], &[10, 0, 0, 2], 6, l4);
        f[TCP_OFF + 16..TCP_OFF + 18].copy_from_slice(&pseudo.to_be_bytes());
        f
    }

    fn csum_hdr() -> VirtioNetHdr {
        VirtioNetHdr {
            flags: F_NEEDS_CSUM,
            csum_start: TCP_OFF as u16,
            csum_offset: 16,
            ..VirtioNetHdr::default()
        }
    }

    fn tso_hdr() -> VirtioNetHdr {
        VirtioNetHdr {
            gso_type: GSO_TCPV4,
            gso_size: MSS,
            hdr_len: (TCP_OFF + 20) as u16,
            ..csum_hdr()
        }
    }

    /// Whether a TCP segment's checksum verifies (the ones'-complement sum
    /// over pseudo-header and segment is 0xffff, i.e. its checksum is 0).
    fn tcp_checksum_ok(f: &[u8]) -> bool {
        let l4 = (f.len() - TCP_OFF) as u32;
        let pseudo = crate::offload::pseudo_header_checksum(&f[26..30], &f[30..34], 6, l4);
        let mut seg = f[TCP_OFF..].to_vec();
        // Add the pseudo-header sum as one more 16-bit word.
        seg.extend_from_slice(&pseudo.to_be_bytes());
        checksum(&seg) == 0
    }

    /// Forwards `frame` with `hdr` into a fresh [`Capture`] that accepts
    /// `accepts`.
    fn forward_into(
        accepts: u64,
        hdr: &VirtioNetHdr,
        frame: &[u8],
    ) -> (Result<(), DropReason>, ForwardCounters, Capture) {
        let mut c = ForwardCounters::default();
        let mut sink = Capture {
            accepts,
            ..Capture::default()
        };
        let r = Forwarder::new().forward(&mut c, hdr, &frame, &mut sink);
        (r, c, sink)
    }

    #[test]
    fn a_frame_that_fits_is_pushed_once_as_is() {
        let f = tcp4_frame();
        let (r, c, sink) = forward_into(bits::GUEST_CSUM | bits::GUEST_TSO4, &tso_hdr(), &f);
        assert_eq!(r, Ok(()));
        assert_eq!(sink.frames, [(tso_hdr(), f)]);
        let want = ForwardCounters {
            gso: 1,
            gso_passed: 1,
            ..ForwardCounters::default()
        };
        assert_eq!(c, want);
    }

    #[test]
    fn a_partial_checksum_is_completed_for_a_sink_without_csum() {
        let f = tcp4_frame();
        assert!(!tcp_checksum_ok(&f));
        let (r, c, sink) = forward_into(0, &csum_hdr(), &f);
        assert_eq!(r, Ok(()));
        assert_eq!(sink.frames.len(), 1);
        let (h, out) = &sink.frames[0];
        assert_eq!(*h, VirtioNetHdr::default());
        assert_eq!(out.len(), f.len());
        assert!(tcp_checksum_ok(out));
        assert_eq!(c.sw_csum, 1);
        assert_eq!(sink.drops.total(), 0);
    }

    #[test]
    fn a_super_frame_is_segmented_for_a_sink_without_tso() {
        let (r, c, sink) = forward_into(bits::GUEST_CSUM, &tso_hdr(), &tcp4_frame());
        assert_eq!(r, Ok(()));
        let n = PAYLOAD / usize::from(MSS);
        assert_eq!(sink.frames.len(), n);
        for (h, s) in &sink.frames {
            assert!(!h.is_gso() && !h.needs_csum());
            assert_eq!(s.len(), TCP_OFF + 20 + usize::from(MSS));
            assert!(tcp_checksum_ok(s));
        }
        let want = ForwardCounters {
            gso: 1,
            sw_segmented: 1,
            sw_segments: n as u64,
            ..ForwardCounters::default()
        };
        assert_eq!(c, want);
    }

    #[test]
    fn a_malformed_frame_is_one_offload_error_and_nothing_pushed() {
        // TCPv4 GSO on a frame that is not IP.
        let (r, c, sink) = forward_into(0, &tso_hdr(), &[0u8; 200]);
        assert_eq!(r, Err(DropReason::Malformed));
        assert!(sink.frames.is_empty());
        assert_eq!(c.offload_errors, 1);
        assert_eq!(sink.drops.get(DropReason::Malformed), 1);
        assert_eq!(sink.drops.total(), 1);
    }

    #[cfg(feature = "test-utils")]
    #[test]
    fn an_uplink_that_refuses_an_offload_gets_plain_segments() {
        use crate::io::UplinkOffloads;
        use crate::test_utils::{Script, ScriptedUplink};

        let mut fwd = Forwarder::new();
        let mut c = ForwardCounters::default();
        let mut u = ScriptedUplink::with_script(
            "fake",
            Script {
                offloads: UplinkOffloads {
                    tx: bits::CSUM | bits::HOST_TSO4,
                    rx: 0,
                },
                refuse_offloads: true,
                full: 2,
                ..Script::default()
            },
        );
        fwd.forward(
            &mut c,
            &tso_hdr(),
            &&tcp4_frame()[..],
            &mut UplinkSink::new(&mut u),
        )
        .unwrap();
        let n = PAYLOAD / usize::from(MSS);
        let script = u.script();
        assert_eq!(script.sent.len(), n);
        assert!(script
            .sent
            .iter()
            .all(|(h, _)| *h == VirtioNetHdr::default()));
        assert_eq!(script.counters.tx_dropped(), 0);
        assert_eq!((c.sw_segmented, c.sw_segments), (1, n as u64));
    }

    #[cfg(feature = "test-utils")]
    #[test]
    fn a_guest_rx_burst_is_a_sink() {
        use crate::test_utils::{LoopbackGuest, LoopbackOpts};

        // A guest that acked mergeable buffers but no receive offloads.
        let mut g = LoopbackGuest::new(LoopbackOpts {
            buf_len: 4096,
            ..LoopbackOpts::default()
        });
        assert_eq!(g.post_rx(4), 4);
        let mut c = ForwardCounters::default();
        let f = tcp4_frame();
        {
            let mut rx = g.qp.rx.burst();
            assert_eq!(rx.accepts(), 0);
            Forwarder::new()
                .forward(&mut c, &csum_hdr(), &&f[..], &mut rx)
                .unwrap();
        }
        assert_eq!(c.sw_csum, 1);
        let hdr_len = g.hdr_len();
        let mut got = Vec::new();
        assert_eq!(g.reap_rx_with(&mut |b| got.push(b.to_vec())), 1);
        let (h, frame) = got[0].split_at(hdr_len);
        // No flags for a guest without GUEST_CSUM; one buffer.
        assert_eq!(h[0], 0);
        assert_eq!(frame.len(), f.len());
        assert!(tcp_checksum_ok(frame));
        let q = g.qp.rx.counters();
        assert_eq!((q.packets, q.dropped()), (1, 0));
    }
}
