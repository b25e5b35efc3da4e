// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The RX side: frames copied into the guest's receive buffers in bursts
//! ([`RxQueue::burst`], [`RxBurst::push`]), with mergeable buffers when a
//! frame spans several, rolled back when it cannot be completed.

use crate::device::{bits, Negotiated, MAX_FRAME_LEN};
use crate::net_hdr::{self, VirtioNetHdr};
use crate::ring::{load_hdr, Popped, SegWriter, UsedId};
use crate::stats::DropReason;

use super::handoff::Vring;
use crate::device::GUEST_OFFLOADS;
use crate::frame::{FrameSource, FrameWriter};
use crate::sink::Sink;

/// Most RX chains one frame may span with mergeable buffers.
pub const MAX_RX_CHAINS: usize = 256;

/// A guest's receive queue: frames flow from the caller into the guest.
#[derive(Debug)]
pub struct RxQueue {
    pub(super) vring: Vring,
    pub(super) index: u16,
    /// (id, length) of each buffer of the frame being written.
    pub(super) chains: Box<[(UsedId, u32)]>,
}

queue_accessors!(RxQueue);

impl RxQueue {
    /// Starts a burst of frames into the guest. Used entries are published
    /// and the guest is notified (if it asked) when the burst is dropped.
    pub fn burst(&mut self) -> RxBurst<'_> {
        self.vring.sync();
        RxBurst { q: self }
    }

    /// RX buffers the guest has posted and we have not used, counting at
    /// most `max` (for packed rings an upper bound: a buffer may take
    /// several descriptors).
    pub fn available(&mut self, max: usize) -> usize {
        self.vring.count_avail(max)
    }

    /// Asks the guest to kick when it posts buffers; returns true if
    /// buffers arrived meanwhile.
    pub fn enable_notifications(&mut self) -> bool {
        self.vring.enable_notifications()
    }

    /// Tells the guest not to kick.
    pub fn disable_notifications(&mut self) {
        self.vring.disable_notifications()
    }
}

/// A burst of frames into a guest's RX queue; see [`RxQueue::burst`].
#[derive(Debug)]
pub struct RxBurst<'q> {
    q: &'q mut RxQueue,
}

impl RxBurst<'_> {
    /// Copies one frame with its offload metadata into the guest's RX
    /// buffers (several, with mergeable RX buffers, when it does not fit in
    /// one). `hdr.num_buffers` is ignored: the device sets it.
    ///
    /// # Errors
    /// The frame is dropped and counted, and the reason returned, when the
    /// ring is not running or has too few buffers (`NoBuffers`), the frame
    /// does not fit (`TooLong`), the guest did not ack the offload the header
    /// asks for (`OffloadUnsupported`), or the guest's buffers are malformed.
    ///
    /// When the thread's [`crate::poll::PollLoop`] found nothing on its last
    /// round, the first two lines written (the header and the frame's head)
    /// are then handed to the shared cache (`CLDEMOTE`), where the guest's
    /// core reads them sooner than from this core's: the loop has the
    /// cycles, and the guest bounds the traffic.
    ///
    /// Hot path: no allocation, no lock, no syscall.
    pub fn push<S: FrameSource + ?Sized>(
        &mut self,
        hdr: &VirtioNetHdr,
        frame: &S,
    ) -> Result<(), DropReason> {
        self.q.push_counted(hdr, frame, false)
    }
}

impl RxQueue {
    /// The offloads the guest takes in a frame's header (`GUEST_*` bits of
    /// its acked features, [`crate::device::GUEST_OFFLOADS`]); 0 when the ring
    /// is not running.
    #[inline]
    pub fn accepts(&self) -> u64 {
        self.vring
            .cfg
            .as_ref()
            .map_or(0, |c| c.features.acked & GUEST_OFFLOADS)
    }

    /// [`RxQueue::push_inner`] and the counting: a drop is counted, except
    /// `OffloadUnsupported` when `offload_uncounted` (the [`Sink`] contract).
    #[inline]
    fn push_counted<S: FrameSource + ?Sized>(
        &mut self,
        hdr: &VirtioNetHdr,
        frame: &S,
        offload_uncounted: bool,
    ) -> Result<(), DropReason> {
        match self.push_inner(hdr, frame) {
            Ok(bytes) => {
                self.vring.counters.packets += 1;
                self.vring.counters.bytes += bytes as u64;
                Ok(())
            }
            Err(DropReason::OffloadUnsupported) if offload_uncounted => {
                Err(DropReason::OffloadUnsupported)
            }
            Err(r) => {
                self.vring.counters.drop(r);
                Err(r)
            }
        }
    }

    /// Reserves RX chains for one frame and copies it in (see
    /// [`RxBurst::push`]); counts nothing.
    fn push_inner<S: FrameSource + ?Sized>(
        &mut self,
        hdr: &VirtioNetHdr,
        frame: &S,
    ) -> Result<usize, DropReason> {
        let q = self;
        let v = &mut q.vring;
        let (Some(ring), Some(cfg)) = (&mut v.ring, &v.cfg) else {
            return Err(DropReason::NoBuffers);
        };
        let features = cfg.features;
        check_offloads(hdr, features)?;
        let flen = frame.frame_len();
        if flen == 0 {
            return Err(DropReason::TooShort);
        }
        if flen > MAX_FRAME_LEN {
            return Err(DropReason::TooLong);
        }
        let hdr_len = features.hdr_len();
        let need = hdr_len + flen;
        let mrg = features.mrg_rxbuf();

        // Reserve chains until the frame fits. The first stays in locals: a
        // frame in one buffer (the common case) touches no array, where an
        // (id, length) pair stored as two words and read back as one stalls
        // store forwarding. Further chains (mergeable buffers) go to
        // `q.chains`.
        v.segs.clear();
        let mark = ring.mark();
        let (first, first_len) = match ring.next_chain(true, &mut v.segs) {
            Popped::Chain(used, len) => (used, len),
            Popped::Empty => {
                ring.rollback(mark);
                return Err(DropReason::NoBuffers);
            }
            Popped::Bad(used, reason) => {
                // The bad buffer is consumed and the frame dropped.
                if let Some(u) = used {
                    ring.push_used(u, 0, true);
                }
                return Err(reason);
            }
        };
        if need > crate::ring::HEAD_WARM {
            ring.prefetch_next_body(need);
        }
        let mut more = 0usize;
        let mut cap = first_len as usize;
        if cap < need && !mrg {
            // Without mergeable buffers the frame must fit one buffer; leave
            // it for a smaller frame.
            ring.rollback(mark);
            return Err(DropReason::TooLong);
        }
        while cap < need {
            if 1 + more == q.chains.len() {
                ring.rollback(mark);
                return Err(DropReason::TooLong);
            }
            let segs_before = v.segs.len();
            match ring.next_chain(true, &mut v.segs) {
                Popped::Empty => {
                    ring.rollback(mark);
                    return Err(DropReason::NoBuffers);
                }
                // Out of room in our own segment list, not a bad chain:
                // leave every buffer to the guest.
                Popped::Bad(_, DropReason::TooManySegments) if segs_before > 0 => {
                    ring.rollback(mark);
                    return Err(DropReason::TooLong);
                }
                Popped::Chain(used, len) => {
                    q.chains[more] = (used, len);
                    more += 1;
                    cap += len as usize;
                }
                Popped::Bad(used, reason) => {
                    // The bad buffer is consumed; the good ones reserved for
                    // this frame go back unused, and the frame is dropped.
                    ring.push_used(first, 0, true);
                    for &(u, _) in &q.chains[..more] {
                        ring.push_used(u, 0, true);
                    }
                    if let Some(u) = used {
                        ring.push_used(u, 0, true);
                    }
                    return Err(reason);
                }
            }
        }

        // The header as words: a field-by-field copy of it, read back as
        // words to be written, would stall store forwarding (`load_hdr`).
        let (mut lo, hi) = load_hdr(hdr);
        let hi = (hi & 0xffff) | u32::from((1 + more) as u16) << 16;
        if features.acked & bits::GUEST_CSUM == 0 {
            lo &= !u64::from(net_hdr::F_DATA_VALID);
        }
        let mut w = SegWriter::new(v.segs.as_slice());
        w.write_hdr(lo, hi, hdr_len);
        frame.copy_into(&mut FrameWriter::guest(&mut w));
        let mut remaining = w.written();
        if crate::poll::spare_cycles() {
            // The loop waits for the guest, not the other way round: hand it
            // the lines it reads first (`demote_buffer`).
            if let Some(seg) = v.segs.as_slice().first() {
                crate::ring::demote_buffer(seg.hva(), remaining.min(seg.len() as usize));
            }
        }
        ring.log_write(v.segs.as_slice(), remaining);
        let bytes = remaining.saturating_sub(hdr_len);
        let l = remaining.min(first_len as usize);
        ring.push_used(first, l as u32, true);
        remaining -= l;
        for &(u, len) in &q.chains[..more] {
            let l = remaining.min(len as usize);
            ring.push_used(u, l as u32, true);
            remaining -= l;
        }
        Ok(bytes)
    }
}

/// Whether the receiving guest acked what the header asks of it.
#[inline]
fn check_offloads(hdr: &VirtioNetHdr, f: Negotiated) -> Result<(), DropReason> {
    if hdr.needs_csum() && !f.has(bits::GUEST_CSUM) {
        return Err(DropReason::OffloadUnsupported);
    }
    if hdr.is_gso() {
        let need = match hdr.gso_type & !net_hdr::GSO_ECN {
            net_hdr::GSO_TCPV4 => bits::GUEST_TSO4,
            net_hdr::GSO_TCPV6 => bits::GUEST_TSO6,
            net_hdr::GSO_UDP => bits::GUEST_UFO,
            _ => return Err(DropReason::OffloadUnsupported),
        };
        if !f.has(need) || (hdr.gso_type & net_hdr::GSO_ECN != 0 && !f.has(bits::GUEST_ECN)) {
            return Err(DropReason::OffloadUnsupported);
        }
    }
    Ok(())
}

impl Drop for RxBurst<'_> {
    fn drop(&mut self) {
        self.q.vring.finish_burst();
    }
}

impl RxBurst<'_> {
    /// The offloads the guest takes in a frame's header (`GUEST_*` bits of
    /// its acked features, [`crate::device::GUEST_OFFLOADS`]); 0 when the ring
    /// is not running.
    #[inline]
    pub fn accepts(&self) -> u64 {
        self.q.accepts()
    }

    /// Publishes the used entries so far and notifies the guest if it wants
    /// it (dropping the burst does the same).
    #[inline]
    pub fn flush(&mut self) {
        self.q.vring.finish_burst();
    }
}

impl Sink for RxBurst<'_> {
    /// [`RxBurst::push`], except that `OffloadUnsupported` is returned
    /// uncounted (the [`Sink`] contract).
    #[inline]
    fn push(&mut self, hdr: &VirtioNetHdr, frame: &dyn FrameSource) -> Result<(), DropReason> {
        self.q.push_counted(hdr, frame, true)
    }

    #[inline]
    fn push_typed<F: FrameSource>(
        &mut self,
        hdr: &VirtioNetHdr,
        frame: &F,
    ) -> Result<(), DropReason> {
        self.q.push_counted(hdr, frame, true)
    }

    #[inline]
    fn flush(&mut self) -> std::io::Result<()> {
        RxBurst::flush(self);
        Ok(())
    }

    #[inline]
    fn accepts(&self) -> u64 {
        RxBurst::accepts(self)
    }

    fn drop_frame(&mut self, reason: DropReason) {
        self.q.vring.counters.drop(reason);
    }
}

/// A guest RX queue as a [`Sink`] that lives across bursts (a switch keeps
/// one per destination port): each push picks up a ring change first (one
/// atomic load), and [`Sink::flush`] publishes the used entries and notifies
/// the guest, once per burst, as dropping an [`RxBurst`] does.
impl Sink for RxQueue {
    #[inline]
    fn push(&mut self, hdr: &VirtioNetHdr, frame: &dyn FrameSource) -> Result<(), DropReason> {
        self.vring.sync();
        self.push_counted(hdr, frame, true)
    }

    #[inline]
    fn push_typed<F: FrameSource>(
        &mut self,
        hdr: &VirtioNetHdr,
        frame: &F,
    ) -> Result<(), DropReason> {
        self.vring.sync();
        self.push_counted(hdr, frame, true)
    }

    #[inline]
    fn flush(&mut self) -> std::io::Result<()> {
        self.vring.finish_burst();
        Ok(())
    }

    #[inline]
    fn accepts(&self) -> u64 {
        RxQueue::accepts(self)
    }

    fn drop_frame(&mut self, reason: DropReason) {
        self.vring.counters.drop(reason);
    }
}

#[cfg(all(test, feature = "test-utils"))]
mod tests {
    use crate::device::bits;
    use crate::net_hdr::{self, VirtioNetHdr};
    use crate::sink::Sink;
    use crate::test_utils::{LoopbackGuest, LoopbackOpts};

    /// The header a push writes: the caller's fields, `num_buffers` set to
    /// the buffers the frame took whatever the caller said, `DATA_VALID`
    /// only for a guest that acked `GUEST_CSUM` (the header travels as two
    /// words; each field must land where the wire layout puts it).
    #[test]
    fn push_writes_the_callers_header_with_the_devices_fields() {
        for packed in [false, true] {
            for csum in [false, true] {
                let mut g = LoopbackGuest::new(LoopbackOpts {
                    packed,
                    size: 8,
                    features: bits::MRG_RXBUF | if csum { bits::GUEST_CSUM } else { 0 },
                    buf_len: 2048,
                    rx_buf_len: Some(256),
                });
                assert_eq!(g.post_rx(8), 8);
                let hdr = VirtioNetHdr {
                    flags: net_hdr::F_DATA_VALID,
                    gso_type: net_hdr::GSO_NONE,
                    hdr_len: 0x0201,
                    gso_size: 0x0403,
                    csum_start: 0x0605,
                    csum_offset: 0x0807,
                    num_buffers: 0x0a09,
                };
                let small = [1u8; 60];
                let big = [2u8; 400]; // two 256-byte buffers
                {
                    let mut rx = g.qp.rx.burst();
                    Sink::push(&mut rx, &hdr, &&small[..]).expect("room");
                    Sink::push(&mut rx, &hdr, &&big[..]).expect("room");
                }
                let mut got = Vec::new();
                assert_eq!(g.reap_rx_with(&mut |b| got.push(b.to_vec())), 3);
                let flags = if csum { net_hdr::F_DATA_VALID } else { 0 };
                let want = |n: u8| [flags, 0, 1, 2, 3, 4, 5, 6, 7, 8, n, 0];
                let ctx = format!("packed={packed} csum={csum}");
                assert_eq!(got[0][..12], want(1), "{ctx}");
                assert_eq!(got[0][12..], small, "{ctx}");
                assert_eq!(got[1][..12], want(2), "{ctx}");
                assert_eq!(got[1].len() + got[2].len(), 12 + big.len(), "{ctx}");
            }
        }
    }
}
