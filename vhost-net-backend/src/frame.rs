// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The frame vocabulary every sink, uplink, queue and the forwarder share:
//! [`FrameSource`] is anything that can be copied, in one pass, through a
//! [`FrameWriter`] into guest RX buffers or a host buffer (an uplink's
//! transmit slot, a scratch buffer: [`copy_frame`]); [`Spliced`] is a frame
//! with new leading bytes over another's tail.
//!
//! It sits below [`crate::sink`], [`crate::io`] and [`crate::queue`] and
//! imports only the ring engine's copy (`ring::copy_from_segs`, `SegWriter`).
//!
//! A guest TX frame ([`TxFrame`](crate::TxFrame)) is a source whose bytes
//! stay in guest memory: the writer copies them straight from the guest's
//! buffers to their destination, the frame's only copy on this hop.

use crate::ring::{copy_from_segs, Seg, SegWriter};

/// Where a [`FrameSource`] writes its bytes: the guest RX buffers reserved
/// for one frame, or a host buffer (an uplink's transmit slot).
#[derive(Debug)]
pub struct FrameWriter<'w, 'a> {
    sink: Target<'w, 'a>,
}

#[derive(Debug)]
enum Target<'w, 'a> {
    Guest(&'w mut SegWriter<'a>),
    Host { buf: &'w mut [u8], pos: usize },
}

impl<'w, 'a> FrameWriter<'w, 'a> {
    /// A writer filling `buf` from its start.
    pub fn host(buf: &'w mut [u8]) -> Self {
        Self {
            sink: Target::Host { buf, pos: 0 },
        }
    }

    /// A writer filling the guest buffers behind `w`.
    #[inline]
    pub(crate) fn guest(w: &'w mut SegWriter<'a>) -> Self {
        Self {
            sink: Target::Guest(w),
        }
    }

    /// Appends bytes; returns how many fit.
    #[inline]
    pub fn write(&mut self, bytes: &[u8]) -> usize {
        match &mut self.sink {
            Target::Guest(w) => w.write(bytes),
            Target::Host { buf, pos } => {
                let n = bytes.len().min(buf.len() - *pos);
                buf[*pos..*pos + n].copy_from_slice(&bytes[..n]);
                *pos += n;
                n
            }
        }
    }

    /// Appends `len` bytes of guest buffers `segs` from `offset`.
    #[inline]
    pub(crate) fn write_from_segs(&mut self, segs: &[Seg], offset: usize, len: usize) -> usize {
        match &mut self.sink {
            Target::Guest(w) => w.write_from_segs(segs, offset, len),
            Target::Host { buf, pos } => {
                let n = len.min(buf.len() - *pos);
                let done = copy_from_segs(segs, offset, &mut buf[*pos..*pos + n]);
                *pos += done;
                done
            }
        }
    }

    /// Bytes written so far through this writer (host sinks only count
    /// their own; guest sinks include the virtio-net header).
    #[inline]
    pub fn written(&self) -> usize {
        match &self.sink {
            Target::Guest(w) => w.written(),
            Target::Host { pos, .. } => *pos,
        }
    }
}

/// Copies a frame into a host buffer (one copy); returns the bytes written,
/// `min(src.frame_len(), dst.len())`.
pub fn copy_frame<S: FrameSource + ?Sized>(src: &S, dst: &mut [u8]) -> usize {
    let mut w = FrameWriter::host(dst);
    src.copy_into(&mut w);
    w.written()
}

/// Anything that can be copied into guest RX buffers in one pass.
pub trait FrameSource {
    /// Length of the frame (Ethernet header included).
    fn frame_len(&self) -> usize;
    /// Writes exactly `frame_len()` bytes, in order.
    fn copy_into(&self, w: &mut FrameWriter<'_, '_>);
    /// Writes the bytes from offset `from` (at most `frame_len()`) to the
    /// end, in order: what follows new leading bytes in a [`Spliced`]
    /// frame.
    fn copy_tail_into(&self, from: usize, w: &mut FrameWriter<'_, '_>);
}

impl FrameSource for [u8] {
    fn frame_len(&self) -> usize {
        self.len()
    }
    fn copy_into(&self, w: &mut FrameWriter<'_, '_>) {
        w.write(self);
    }
    fn copy_tail_into(&self, from: usize, w: &mut FrameWriter<'_, '_>) {
        w.write(self.get(from..).unwrap_or_default());
    }
}

/// Most leading bytes a [`Spliced`] frame replaces: two MAC addresses and
/// one 802.1Q tag.
pub const MAX_SPLICE_LEAD: usize = 16;

/// A frame made of new leading bytes followed by the tail of another
/// frame, copied in the same single pass: how a switch pushes, pops or
/// rewrites an 802.1Q tag on the way from one guest's buffers into
/// another's without a second copy.
///
/// Pushing a tag: the lead is the 12 address bytes and the 4-byte tag,
/// the tail starts at 12. Popping: the lead is the 12 address bytes, the
/// tail starts at 16. Adjust the virtio-net header with
/// [`VirtioNetHdr::shifted`](crate::VirtioNetHdr::shifted).
#[derive(Debug, Clone, Copy)]
pub struct Spliced<'a> {
    lead: [u8; MAX_SPLICE_LEAD],
    lead_len: usize,
    src: &'a dyn FrameSource,
    from: usize,
}

impl std::fmt::Debug for dyn FrameSource + '_ {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FrameSource({} bytes)", self.frame_len())
    }
}

impl<'a> Spliced<'a> {
    /// `lead`, then `src` from byte `from`. `None` when `lead` is longer
    /// than [`MAX_SPLICE_LEAD`] or `from` beyond the source.
    #[inline]
    pub fn new(lead: &[u8], src: &'a dyn FrameSource, from: usize) -> Option<Self> {
        if lead.len() > MAX_SPLICE_LEAD || from > src.frame_len() {
            return None;
        }
        let mut l = [0u8; MAX_SPLICE_LEAD];
        l[..lead.len()].copy_from_slice(lead);
        Some(Self {
            lead: l,
            lead_len: lead.len(),
            src,
            from,
        })
    }
}

impl FrameSource for Spliced<'_> {
    #[inline]
    fn frame_len(&self) -> usize {
        self.lead_len + self.src.frame_len() - self.from
    }
    #[inline]
    fn copy_into(&self, w: &mut FrameWriter<'_, '_>) {
        w.write(&self.lead[..self.lead_len]);
        self.src.copy_tail_into(self.from, w);
    }
    fn copy_tail_into(&self, from: usize, w: &mut FrameWriter<'_, '_>) {
        if from < self.lead_len {
            w.write(&self.lead[from..self.lead_len]);
            self.src.copy_tail_into(self.from, w);
        } else {
            self.src
                .copy_tail_into(self.from + (from - self.lead_len), w);
        }
    }
}

/// A reference to a source is a source: `&bytes` (a `&&[u8]`) is how a
/// byte slice becomes a `&dyn FrameSource`.
impl<T: FrameSource + ?Sized> FrameSource for &T {
    #[inline]
    fn frame_len(&self) -> usize {
        (**self).frame_len()
    }
    #[inline]
    fn copy_into(&self, w: &mut FrameWriter<'_, '_>) {
        (**self).copy_into(w);
    }
    #[inline]
    fn copy_tail_into(&self, from: usize, w: &mut FrameWriter<'_, '_>) {
        (**self).copy_tail_into(from, w);
    }
}

impl<const N: usize> FrameSource for [u8; N] {
    fn frame_len(&self) -> usize {
        N
    }
    fn copy_into(&self, w: &mut FrameWriter<'_, '_>) {
        w.write(self);
    }
    fn copy_tail_into(&self, from: usize, w: &mut FrameWriter<'_, '_>) {
        self.as_slice().copy_tail_into(from, w);
    }
}

impl FrameSource for Vec<u8> {
    fn frame_len(&self) -> usize {
        self.len()
    }
    fn copy_into(&self, w: &mut FrameWriter<'_, '_>) {
        w.write(self);
    }
    fn copy_tail_into(&self, from: usize, w: &mut FrameWriter<'_, '_>) {
        self.as_slice().copy_tail_into(from, w);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(src: &dyn FrameSource) -> Vec<u8> {
        let mut v = vec![0u8; src.frame_len()];
        assert_eq!(copy_frame(src, &mut v), v.len());
        v
    }

    #[test]
    fn spliced_frames_push_and_pop_tags() {
        let frame: Vec<u8> = (0..40u8).collect();
        // Push: addresses, a tag, then the rest from the EtherType on.
        let mut lead = frame[..12].to_vec();
        lead.extend_from_slice(&[0x81, 0x00, 0x00, 0x0a]);
        let pushed = Spliced::new(&lead, &frame, 12).unwrap();
        let p = bytes(&pushed);
        assert_eq!(p.len(), 44);
        assert_eq!(&p[..16], &lead[..]);
        assert_eq!(&p[16..], &frame[12..]);
        // Pop it again, from the spliced frame itself.
        let popped = Spliced::new(&p[..12], &pushed, 16).unwrap();
        assert_eq!(bytes(&popped), frame);
        // Tails of a spliced frame, inside and after the lead.
        let mut out = vec![0u8; 64];
        let mut w = FrameWriter::host(&mut out);
        pushed.copy_tail_into(14, &mut w);
        let n = w.written();
        assert_eq!(&out[..n], &p[14..]);
        assert!(Spliced::new(&[0; 17], &frame, 0).is_none());
        assert!(Spliced::new(&[], &frame, 41).is_none());
    }
}
