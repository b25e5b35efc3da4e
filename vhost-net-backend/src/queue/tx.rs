// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The TX side: frames the guest transmitted, dequeued in bursts
//! ([`TxQueue::recv_burst`]) and lent to the caller as [`TxFrame`]s whose
//! head is a private copy and whose rest stays in guest memory.

use super::handoff::Vring;
use crate::frame::{FrameSource, FrameWriter};
use crate::net_hdr::VirtioNetHdr;
use crate::ring::{copy_from_segs, read_hdr, store_hdr, Popped, Seg, UsedId, MAX_CHAIN_SEGS};
use crate::stats::DropReason;

/// Bytes of the start of each guest TX frame copied into a private buffer,
/// so that forwarding decisions (MACs, VLAN, EtherType, L3/L4 headers for
/// offloads) are taken on bytes the guest cannot change under us.
pub const HEAD_LEN: usize = 64;

/// A guest's transmit queue: frames flow from the guest to the caller.
#[derive(Debug)]
pub struct TxQueue {
    pub(super) vring: Vring,
    pub(super) index: u16,
    /// The chains of the batch being handed out.
    pub(super) batch: Box<[Parsed]>,
}

queue_accessors!(TxQueue);

/// A frame the guest transmitted, lent to the caller of
/// [`TxQueue::recv_burst`] for the duration of its callback.
///
/// The first [`HEAD_LEN`] bytes are a private copy (see [`TxFrame::head`]);
/// the rest stays in guest memory and is copied exactly once, by
/// [`TxFrame::copy_to`] or by passing the frame to [`RxBurst::push`](super::RxBurst::push).
#[derive(Debug)]
pub struct TxFrame<'a> {
    hdr: VirtioNetHdr,
    len: usize,
    head: [u8; HEAD_LEN],
    head_len: usize,
    segs: &'a [Seg],
    /// Offset of the frame's first byte in `segs` (the virtio-net header
    /// length).
    data_off: usize,
}

impl TxFrame<'_> {
    /// The frame's offload metadata, copied out of guest memory.
    pub fn hdr(&self) -> &VirtioNetHdr {
        &self.hdr
    }

    /// Mutable offload metadata (what an [`RxBurst::push`](super::RxBurst::push) of this frame
    /// takes is the caller's argument, not this; provided for filters).
    pub fn hdr_mut(&mut self) -> &mut VirtioNetHdr {
        &mut self.hdr
    }

    /// Length of the frame (Ethernet header included, virtio-net header
    /// excluded).
    #[allow(clippy::len_without_is_empty)] // frames are never empty
    pub fn len(&self) -> usize {
        self.len
    }

    /// A private copy of the first `min(len, HEAD_LEN)` bytes: the guest
    /// cannot change them under a forwarding decision.
    pub fn head(&self) -> &[u8] {
        &self.head[..self.head_len]
    }

    /// The private head, mutable: whatever is changed here is what copies of
    /// the frame see (e.g. a MAC rewrite or VLAN edit costs no extra copy).
    pub fn head_mut(&mut self) -> &mut [u8] {
        &mut self.head[..self.head_len]
    }

    /// Copies frame bytes from `offset` into `dst`; returns the number
    /// copied (`min(dst.len(), len - offset)`).
    pub fn copy_to(&self, offset: usize, dst: &mut [u8]) -> usize {
        let mut done = 0;
        if offset < self.head_len {
            let n = (self.head_len - offset).min(dst.len());
            dst[..n].copy_from_slice(&self.head[offset..offset + n]);
            done = n;
        }
        let pos = offset + done;
        if pos < self.len && done < dst.len() {
            let want = (self.len - pos).min(dst.len() - done);
            done += copy_from_segs(self.segs, self.data_off + pos, &mut dst[done..done + want]);
        }
        done
    }
}

impl FrameSource for TxFrame<'_> {
    fn frame_len(&self) -> usize {
        self.len
    }
    fn copy_into(&self, w: &mut FrameWriter<'_, '_>) {
        w.write(&self.head[..self.head_len]);
        if self.len > self.head_len {
            w.write_from_segs(
                self.segs,
                self.data_off + self.head_len,
                self.len - self.head_len,
            );
        }
    }
    /// The head from the private copy, the rest from guest memory.
    fn copy_tail_into(&self, from: usize, w: &mut FrameWriter<'_, '_>) {
        let from = from.min(self.len);
        if from < self.head_len {
            w.write(&self.head[from..self.head_len]);
        }
        let rest = from.max(self.head_len);
        if self.len > rest {
            w.write_from_segs(self.segs, self.data_off + rest, self.len - rest);
        }
    }
}

/// Most TX chains parsed ahead of the frames' processing
/// ([`TxQueue::recv_burst`]).
pub const TX_BATCH: usize = 32;

/// Room for the segments of one batch: every chain may take up to
/// [`MAX_CHAIN_SEGS`], and a batch stops before a chain could find less
/// room than that, so two chains always fit (frames of one or two buffers,
/// the usual kind, fill a whole batch).
pub const TX_BATCH_SEGS: usize = 2 * MAX_CHAIN_SEGS;

/// One chain of a batch, parsed and waiting for its frame to be handed out.
///
/// Plain fields, not the [`Popped`] it came from: a `Popped` is built on
/// the stack, and copying it in whole reads it back as one 16-byte load
/// that store forwarding cannot serve from the stores that built it (the
/// load then waits for every older store, guest lines included). For the
/// same reason `used` and `len`, which come from one `Popped`, are not
/// neighbours (`repr(C)` keeps the order): two 4-byte fields side by side
/// are copied with one 8-byte load.
#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub(super) struct Parsed {
    /// The buffer's id and slot count (for a refused chain, only when
    /// `has_used`).
    used: UsedId,
    /// Its segments in the queue's list: `start..end`.
    start: u32,
    /// A good chain's length in bytes.
    len: u32,
    end: u32,
    /// Why the chain is refused, if it is.
    bad: Option<DropReason>,
    /// Whether a refused chain has an id to return it by.
    has_used: bool,
}

impl Parsed {
    pub(super) const EMPTY: Self = Self {
        used: UsedId::new(0, 0),
        len: 0,
        start: 0,
        end: 0,
        bad: None,
        has_used: false,
    };
}

impl TxQueue {
    /// Dequeues up to `max` frames the guest transmitted, calling `f` for
    /// each; returns how many frames were dequeued (including dropped
    /// ones). Used entries are published and the guest is notified (if it
    /// asked) once, at the end of the burst.
    ///
    /// Malformed chains are returned to the guest unprocessed and counted.
    ///
    /// Chains are taken in batches of up to 32: all of a batch's
    /// descriptors are read first, and the first lines of every frame asked
    /// for, before any frame is read, so the misses on lines the driver's
    /// core wrote overlap instead of coming one frame at a time (DPDK's
    /// vhost library batches its small copies for the same reason). The
    /// rest of a large frame's first buffer is asked for while the frame
    /// before it is handed out.
    ///
    /// Hot path: no allocation, no lock, no syscall except at most one
    /// eventfd write per burst.
    pub fn recv_burst<F>(&mut self, max: usize, mut f: F) -> usize
    where
        F: FnMut(&mut TxFrame<'_>),
    {
        let v = &mut self.vring;
        v.sync();
        let Some(ring) = &mut v.ring else {
            return 0;
        };
        let Some(cfg) = &v.cfg else {
            return 0;
        };
        let hdr_len = cfg.features.hdr_len();
        let max_frame = cfg.max_frame;
        let batch = &mut self.batch;
        let mut n = 0;
        while n < max {
            // Parse a batch of chains.
            let want = (max - n).min(batch.len());
            v.segs.clear();
            let mut k = 0;
            let mut drained = false;
            while k < want && v.segs.capacity() - v.segs.len() >= MAX_CHAIN_SEGS {
                let start = v.segs.len();
                // Four one-descriptor buffers of a group at once (packed
                // rings), else one chain.
                let mut four = [(UsedId::new(0, 0), 0u32); 4];
                if k + 4 <= want && ring.next_four(false, &mut v.segs, &mut four) {
                    let segs = &v.segs.as_slice()[start..start + 4];
                    for (i, (&(used, len), seg)) in four.iter().zip(segs).enumerate() {
                        crate::ring::prefetch_buffer(seg.hva(), seg.len(), false);
                        let e = &mut batch[k + i];
                        e.used = used;
                        e.len = len;
                        e.bad = None;
                        e.start = (start + i) as u32;
                        e.end = (start + i + 1) as u32;
                    }
                    k += 4;
                    continue;
                }
                v.segs.limit_next(MAX_CHAIN_SEGS);
                let e = &mut batch[k];
                match ring.next_chain(false, &mut v.segs) {
                    Popped::Empty => {
                        drained = true;
                        break;
                    }
                    Popped::Chain(used, len) => {
                        // The header and the start of the frame.
                        if let Some(seg) = v.segs.as_slice().get(start) {
                            crate::ring::prefetch_buffer(seg.hva(), seg.len(), false);
                        }
                        e.used = used;
                        e.len = len;
                        e.bad = None;
                    }
                    Popped::Bad(used, reason) => {
                        v.segs.truncate(start);
                        e.used = used.unwrap_or(UsedId::new(0, 0));
                        e.has_used = used.is_some();
                        e.bad = Some(reason);
                    }
                }
                e.start = start as u32;
                e.end = v.segs.len() as u32;
                k += 1;
            }
            if k == 0 {
                break;
            }

            // Hand the batch's frames out, in order.
            let all = v.segs.as_slice();
            for (j, p) in batch[..k].iter().enumerate() {
                // The next frame's lines past its head, asked for while this
                // one is copied (its head was warmed when it was parsed).
                // One compare for a small frame: nothing past its head.
                if let Some(q) = batch[..k]
                    .get(j + 1)
                    .filter(|q| q.len as usize > crate::ring::HEAD_WARM)
                {
                    if let Some(seg) = all
                        .get(q.start as usize..q.end as usize)
                        .and_then(|s| s.first())
                    {
                        crate::ring::prefetch_body(seg.hva(), seg.len() as usize, false);
                    }
                }
                n += 1;
                if let Some(reason) = p.bad {
                    v.counters.drop(reason);
                    if p.has_used {
                        ring.push_used(p.used, 0, false);
                    }
                    continue;
                }
                let (used, total) = (p.used, p.len as usize);
                if total <= hdr_len {
                    v.counters.drop(DropReason::TooShort);
                } else if total - hdr_len > max_frame {
                    v.counters.drop(DropReason::TooLong);
                } else {
                    let segs = &all[p.start as usize..p.end as usize];
                    let len = total - hdr_len;
                    let mut frame = TxFrame {
                        hdr: VirtioNetHdr::default(),
                        len,
                        head: [0; HEAD_LEN],
                        head_len: len.min(HEAD_LEN),
                        segs,
                        data_off: hdr_len,
                    };
                    store_hdr(&mut frame.hdr, read_hdr(segs, hdr_len).sanitized_tx());
                    copy_from_segs(segs, hdr_len, &mut frame.head[..frame.head_len]);
                    f(&mut frame);
                    v.counters.packets += 1;
                    v.counters.bytes += len as u64;
                }
                ring.push_used(used, 0, false);
            }
            if drained {
                break;
            }
        }
        v.finish_burst();
        n
    }

    /// Whether the guest has made at least one TX buffer available: one
    /// read of the ring (split: `avail.idx`, unless buffers seen earlier
    /// are still unused; packed: the flags of the next descriptor). For a
    /// loop's idle check: [`TxQueue::pending`] counts them all.
    pub fn has_pending(&mut self) -> bool {
        self.vring.count_avail(1) > 0
    }

    /// Frames waiting in the ring (reads the driver's index).
    pub fn pending(&mut self) -> usize {
        self.vring.count_avail(usize::from(u16::MAX))
    }

    /// Asks the guest to kick when it transmits; returns true if frames
    /// arrived meanwhile (then do not sleep).
    pub fn enable_notifications(&mut self) -> bool {
        self.vring.enable_notifications()
    }

    /// Tells the guest not to kick (while polling).
    pub fn disable_notifications(&mut self) {
        self.vring.disable_notifications()
    }
}

#[cfg(all(test, feature = "test-utils"))]
mod tests {
    use crate::test_utils::{LoopbackGuest, LoopbackOpts};

    /// `has_pending` says whether one buffer waits, whatever the layout, and
    /// reads the ring afresh: what `recv_burst` takes is gone, what the
    /// guest posts after a look is seen at the next one, across the ring's
    /// end too.
    #[test]
    fn has_pending_sees_what_the_guest_posts_and_not_what_was_taken() {
        for packed in [false, true] {
            let mut g = LoopbackGuest::new(LoopbackOpts {
                packed,
                size: 8,
                ..LoopbackOpts::default()
            });
            let ctx = format!("packed={packed}");
            assert!(!g.qp.tx.has_pending(), "{ctx}: nothing posted");
            for lap in 0..3 {
                assert_eq!(g.post_tx(&[7u8; 60], 5), 5, "{ctx}");
                assert!(g.qp.tx.has_pending(), "{ctx} lap {lap}: five posted");
                assert_eq!(g.qp.tx.recv_burst(4, |_| {}), 4, "{ctx}");
                assert!(g.qp.tx.has_pending(), "{ctx} lap {lap}: one left");
                assert_eq!(g.qp.tx.recv_burst(4, |_| {}), 1, "{ctx}");
                assert!(!g.qp.tx.has_pending(), "{ctx} lap {lap}: all taken");
                assert_eq!(g.reap_tx(), 5, "{ctx}");
            }
            assert_eq!(g.qp.tx.counters().packets, 15, "{ctx}");
        }
    }

    /// A split ring whose `avail.idx` claims more than a ring of buffers
    /// is broken; a look that finds it so counts one `ring_broken` drop,
    /// on either queue, though no burst follows (a loop that asks
    /// `has_pending` or `available` first would otherwise never report
    /// it), and later looks do not count it again.
    #[test]
    fn a_look_that_finds_the_ring_broken_counts_it_once() {
        use crate::ring::Layout;
        use crate::stats::DropReason;
        let mut g = LoopbackGuest::new(LoopbackOpts {
            size: 8,
            ..LoopbackOpts::default()
        });
        for rx in [false, true] {
            let Layout::Split(l) = g.layout(rx) else {
                panic!("a split ring");
            };
            // avail.idx, after the flags word: nine buffers in a ring of 8.
            g.write_guest(l.avail + 2, &9u16.to_le_bytes());
        }
        for _ in 0..3 {
            assert!(!g.qp.tx.has_pending());
            assert_eq!(g.qp.rx.available(32), 0);
        }
        assert_eq!(g.qp.tx.counters().drops_for(DropReason::RingBroken), 1);
        assert_eq!(g.qp.rx.counters().drops_for(DropReason::RingBroken), 1);
        assert_eq!(g.qp.tx.recv_burst(32, |_| {}), 0);
        assert_eq!(g.qp.tx.counters().drops_for(DropReason::RingBroken), 1);
    }
}
