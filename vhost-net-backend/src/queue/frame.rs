// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The frame-copy trait: [`FrameSource`] is anything that can be copied, in
//! one pass, through a [`FrameWriter`] into guest RX buffers or a host
//! buffer (an uplink's transmit slot, a scratch buffer: [`copy_frame`]).
//!
//! A guest TX frame ([`TxFrame`](super::TxFrame)) is a source whose bytes
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
    pub(super) fn guest(w: &'w mut SegWriter<'a>) -> Self {
        Self {
            sink: Target::Guest(w),
        }
    }

    /// Appends bytes; returns how many fit.
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
    pub(super) fn write_from_segs(&mut self, segs: &[Seg], offset: usize, len: usize) -> usize {
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
}

impl FrameSource for [u8] {
    fn frame_len(&self) -> usize {
        self.len()
    }
    fn copy_into(&self, w: &mut FrameWriter<'_, '_>) {
        w.write(self);
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
}

impl<const N: usize> FrameSource for [u8; N] {
    fn frame_len(&self) -> usize {
        N
    }
    fn copy_into(&self, w: &mut FrameWriter<'_, '_>) {
        w.write(self);
    }
}

impl FrameSource for Vec<u8> {
    fn frame_len(&self) -> usize {
        self.len()
    }
    fn copy_into(&self, w: &mut FrameWriter<'_, '_>) {
        w.write(self);
    }
}
