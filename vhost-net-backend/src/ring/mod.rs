// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The ring engine: virtqueues over guest memory, and the copies in and out
//! of guest buffers. Most of the crate's `unsafe` lives here.
//!
//! Rules kept throughout:
//! - a guest buffer is a [`Seg`]: a host address and a length that the ring
//!   parser checked against the mapped regions. A `Seg` is only valid while
//!   the [`GuestMemory`] snapshot it was translated from is alive; the queue
//!   that produced it keeps that snapshot for at least as long as the
//!   borrow through which the `Seg` is reachable.
//! - guest memory is accessed with raw copies and volatile/atomic loads and
//!   stores, never through a `&[u8]` (the guest may change it at any time).
#![allow(unsafe_code)]

pub(crate) mod driver;
pub(crate) mod flags;
pub(crate) mod log;
pub(crate) mod memory;
pub(crate) mod packed;
pub(crate) mod split;

pub use log::{DirtyLog, NO_DIRTY_LOG_ENV};
pub use memory::{GuestMemory, MemoryError};
pub use packed::PackedLayout;
pub use split::{RingError, SplitLayout};

use std::sync::Arc;

use crate::device::Negotiated;
use crate::net_hdr::{VirtioNetHdr, MAX_HDR_LEN};
use crate::stats::DropReason;

/// How a used buffer is identified: its id and, for packed rings, how many
/// descriptor slots it took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct UsedId(u32);

impl UsedId {
    /// Kept in one word: the hot path reads it back whole, and a value
    /// written as two halves and read as one stalls store forwarding.
    #[inline(always)]
    pub(crate) const fn new(id: u16, ndesc: u16) -> Self {
        Self(id as u32 | (ndesc as u32) << 16)
    }

    #[inline(always)]
    pub(crate) const fn id(self) -> u16 {
        self.0 as u16
    }

    #[inline(always)]
    pub(crate) const fn ndesc(self) -> u16 {
        (self.0 >> 16) as u16
    }
}

/// What taking the next available buffer gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Popped {
    /// Nothing available.
    Empty,
    /// A valid buffer of this many bytes; its segments were appended.
    Chain(UsedId, u32),
    /// A malformed buffer, to be returned unused (when it has an id) and
    /// counted.
    Bad(Option<UsedId>, DropReason),
}

/// A position in the avail ring, to roll back to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mark {
    idx: u16,
    wrap: bool,
}

/// Where a ring lives in guest memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// A split virtqueue.
    Split(SplitLayout),
    /// A packed virtqueue.
    Packed(PackedLayout),
}

/// A virtqueue of either format, owned by one data-plane thread.
#[derive(Debug)]
pub(crate) enum Ring {
    Split(split::SplitRing),
    Packed(packed::PackedRing),
}

macro_rules! dispatch {
    ($self:ident, $r:ident => $e:expr) => {
        match $self {
            Ring::Split($r) => $e,
            Ring::Packed($r) => $e,
        }
    };
}

impl Ring {
    /// Sets up a ring from its layout and vhost-user base. A split ring
    /// whose used index disagrees with the base starts at the used index
    /// ([`split::SplitRing::start_at_used`]: a frontend reconnecting to a
    /// restarted backend).
    pub(crate) fn new(
        mem: Arc<GuestMemory>,
        layout: Layout,
        base: u32,
        features: Negotiated,
    ) -> Result<Self, RingError> {
        Ok(match layout {
            Layout::Split(l) => {
                let base = u16::try_from(base).map_err(|_| RingError::Size(l.size))?;
                let (event_idx, indirect) = (features.event_idx(), features.indirect());
                let mut r = split::SplitRing::new(mem, l, base, event_idx, indirect)?;
                if let Some(was) = r.start_at_used() {
                    tracing::info!(
                        "vring: base {was} but used index {}: starting at the used index",
                        r.base()
                    );
                }
                Ring::Split(r)
            }
            Layout::Packed(l) => Ring::Packed(packed::PackedRing::new(mem, l, base, features)?),
        })
    }

    /// The same ring over a new memory snapshot, keeping its indices.
    pub(crate) fn remap(
        &self,
        mem: Arc<GuestMemory>,
        layout: Layout,
        features: Negotiated,
    ) -> Result<Self, RingError> {
        Ok(match (self, layout) {
            (Ring::Split(r), Layout::Split(l)) => {
                Ring::Split(r.remap(mem, l, features.event_idx(), features.indirect())?)
            }
            (Ring::Packed(r), Layout::Packed(l)) => Ring::Packed(r.remap(mem, l, features)?),
            (r, l) => Ring::new(mem, l, r.base(), features)?,
        })
    }

    /// Switches dirty-page logging on (`Some`) or off for this ring's
    /// writes; `layout` is the ring's own (packed rings log their
    /// descriptor and device areas at its addresses).
    pub(crate) fn set_log(&mut self, target: Option<&log::LogTarget>, layout: Layout) {
        match (self, layout) {
            (Ring::Split(r), _) => r.log = target.map(|t| log::RingLog::new(t, t.used_gpa, 0)),
            (Ring::Packed(r), Layout::Packed(l)) => {
                r.log = target.map(|t| log::RingLog::new(t, l.desc, l.device))
            }
            (Ring::Packed(r), Layout::Split(_)) => r.log = None,
        }
    }

    /// Marks the first `len` bytes written into `segs` (an RX frame) in the
    /// dirty log, when it is on. One branch when it is off.
    #[inline(always)]
    pub(crate) fn log_write(&mut self, segs: &[Seg], len: usize) {
        dispatch!(self, r => if let Some(l) = &mut r.log {
            l.mark_segs(&r.mem, segs, len);
        })
    }

    /// The vhost-user base (`GET_VRING_BASE`).
    pub(crate) fn base(&self) -> u32 {
        dispatch!(self, r => r.base())
    }

    pub(crate) fn is_broken(&self) -> bool {
        dispatch!(self, r => r.is_broken())
    }

    /// Available buffers, up to `max` (an upper bound for packed rings,
    /// where chains may take several slots).
    #[inline]
    pub(crate) fn count_avail(&mut self, max: usize) -> usize {
        match self {
            Ring::Split(r) => r.count_avail(max),
            Ring::Packed(r) => r.count_avail(max),
        }
    }

    /// Warms, for writing, the lines past its head of the next buffer a
    /// frame of `len` bytes (header included) goes into: called as a frame
    /// takes its buffer, with that frame's length, so the next frame's
    /// copy finds its lines ([`prefetch_body`]). Packed rings only: on
    /// split rings it measured 1.5-4.5 % slower with hugepages
    /// (BENCHMARKS.md, "Large frames' lines asked for one frame ahead").
    #[inline(always)]
    pub(crate) fn prefetch_next_body(&self, len: usize) {
        if let Ring::Packed(r) = self {
            r.prefetch_next_body(len);
        }
    }

    #[inline(always)]
    pub(crate) fn next_chain(&mut self, writable: bool, out: &mut SegVec) -> Popped {
        dispatch!(self, r => r.next_chain(writable, out))
    }

    /// Four buffers at once, when a packed ring has them as
    /// [`packed::PackedRing::next_four`] says; false (nothing taken) for a
    /// split ring or when it does not.
    #[inline(always)]
    pub(crate) fn next_four(
        &mut self,
        writable: bool,
        out: &mut SegVec,
        got: &mut [(UsedId, u32); 4],
    ) -> bool {
        match self {
            Ring::Packed(r) => r.next_four(writable, out, got),
            Ring::Split(_) => false,
        }
    }

    #[inline]
    pub(crate) fn mark(&self) -> Mark {
        dispatch!(self, r => r.mark())
    }

    #[inline]
    pub(crate) fn rollback(&mut self, m: Mark) {
        dispatch!(self, r => r.rollback(m))
    }

    /// Writes a used element; `wrote` tells whether the device wrote into
    /// the buffer (RX).
    #[inline(always)]
    pub(crate) fn push_used(&mut self, u: UsedId, len: u32, wrote: bool) {
        match self {
            Ring::Split(r) => r.push_used(u.id(), len),
            Ring::Packed(r) => r.push_used(u, len, wrote),
        }
    }

    #[inline]
    pub(crate) fn publish_used(&mut self) -> bool {
        dispatch!(self, r => r.publish_used())
    }

    #[inline]
    pub(crate) fn needs_notification(&mut self) -> bool {
        dispatch!(self, r => r.needs_notification())
    }

    pub(crate) fn enable_notification(&mut self) -> bool {
        dispatch!(self, r => r.enable_notification())
    }

    pub(crate) fn disable_notification(&mut self) {
        dispatch!(self, r => r.disable_notification())
    }
}

/// Most buffers one guest TX chain may have (after splitting at region
/// boundaries); longer chains are dropped as `TooManySegments`. Linux uses
/// at most `MAX_SKB_FRAGS + 2` (19) per frame.
pub const MAX_CHAIN_SEGS: usize = 256;

/// Most buffer descriptors one chain may take, zero-length ones and an
/// indirect table's entries counted; with the indirect descriptor itself a
/// walk reads at most [`MAX_CHAIN_READS`]. A longer chain is refused
/// (`TooManySegments`; a packed chain over this many slots breaks its ring,
/// as one that never ends does). Real drivers stay far below: Linux posts
/// at most `MAX_SKB_FRAGS + 2` buffers (19, 47 at the kernel's largest
/// setting), and DPDK's vhost library refuses chains of more than 256
/// buffers (`BUF_VECTOR_MAX`), as [`MAX_CHAIN_SEGS`] does for TX
/// segments. Before, a split chain could read its ring's size and then an
/// indirect table's 65,535 entries more: 32 such chains kept a PMD busy
/// for milliseconds.
pub const MAX_CHAIN_DESCS: u32 = 256;

/// Most descriptors one chain walk reads: [`MAX_CHAIN_DESCS`] buffers and
/// one indirect descriptor.
pub const MAX_CHAIN_READS: u32 = MAX_CHAIN_DESCS + 1;

/// Descriptors the out-of-line chain walks of one burst may read, per
/// ring (zero-length and indirect entries count). A walk starts only
/// while at least [`MAX_CHAIN_READS`] of it are left; otherwise the
/// chain stays in the ring for the next burst (TX loses nothing; an RX
/// frame finds no buffer and is dropped as `no_buffers`). So a hostile
/// ring costs a burst at most about this many descriptor reads, whatever
/// it posts. Real traffic does not reach it: 32 chains of a Linux TSO
/// frame (an indirect table of 19 entries) read 640; 32 big-packet RX
/// chains of 47 buffers, 1,504. Buffers of one direct descriptor (the
/// inline path) do not count: the burst's frame limit bounds them.
pub const BURST_DESC_BUDGET: u32 = 2048;

/// Most buffers all the RX chains of one frame may have together; a frame
/// that would need more is dropped (`TooLong`) without consuming the
/// guest's buffers.
pub const MAX_RX_FRAME_SEGS: usize = 1024;

/// One guest buffer, translated and bounds-checked.
///
/// Invariant: `hva..hva + len` lies inside a mapped region of the snapshot
/// the ring parser translated it from. Only the parsers (this module's
/// children) build one, so the fields are private to `ring`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Seg {
    hva: usize,
    len: u32,
}

impl Seg {
    /// The buffer's host address.
    #[inline(always)]
    pub(crate) const fn hva(self) -> usize {
        self.hva
    }

    /// The buffer's length in bytes.
    #[inline(always)]
    pub(crate) const fn len(self) -> u32 {
        self.len
    }
}

/// A fixed-capacity list of segments, allocated once per queue. Several
/// chains may be appended one after the other, each within a limit of its
/// own ([`SegVec::limit_next`]).
#[derive(Debug)]
pub(crate) struct SegVec {
    segs: Box<[Seg]>,
    len: usize,
    /// `push` fails at this length (at most the capacity).
    limit: usize,
}

impl SegVec {
    pub(crate) fn with_capacity(cap: usize) -> Self {
        Self {
            segs: vec![Seg::default(); cap].into_boxed_slice(),
            len: 0,
            limit: cap,
        }
    }

    /// Empties the list; the whole capacity is usable again.
    #[inline]
    pub(crate) fn clear(&mut self) {
        self.len = 0;
        self.limit = self.segs.len();
    }

    /// Lets at most `n` more segments be appended (fewer when the capacity
    /// ends first): the room one chain may take when several share the list.
    #[inline]
    pub(crate) fn limit_next(&mut self, n: usize) {
        self.limit = (self.len + n).min(self.segs.len());
    }

    /// Drops the segments from `len` on (what a refused chain appended).
    #[inline]
    pub(crate) fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Appends; false when full (at the capacity or the limit).
    #[inline]
    pub(crate) fn push(&mut self, s: Seg) -> bool {
        if self.len >= self.limit {
            return false;
        }
        match self.segs.get_mut(self.len) {
            Some(slot) => {
                *slot = s;
                self.len += 1;
                true
            }
            None => false,
        }
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub(crate) fn capacity(&self) -> usize {
        self.segs.len()
    }

    #[inline]
    pub(crate) fn as_slice(&self) -> &[Seg] {
        &self.segs[..self.len]
    }
}

/// Copies `n` bytes from `src` to `dst`. Small copies (the virtio-net
/// header, the head of a frame, a 64-byte frame) are done inline with
/// overlapping unaligned loads, all loads before all stores, so they avoid a
/// `memmove` call and stay correct if a hostile guest makes the two ranges
/// overlap; from [`LINE_COPY_MIN`] bytes on, ranges that do not overlap go
/// through [`copy_lines`] on CPUs with AVX-512; the rest use `ptr::copy`.
///
/// # Safety
/// `src` must be readable and `dst` writable for `n` bytes.
#[inline(always)]
unsafe fn copy_bytes(dst: *mut u8, src: *const u8, n: usize) {
    use std::ptr::{read_unaligned as rd, write_unaligned as wr};
    // SAFETY: every access below stays within `[0, n)` of both ranges, which
    // the caller guarantees are valid.
    unsafe {
        if n <= 16 {
            if n >= 8 {
                let (a, b) = (rd(src.cast::<u64>()), rd(src.add(n - 8).cast::<u64>()));
                wr(dst.cast::<u64>(), a);
                wr(dst.add(n - 8).cast::<u64>(), b);
            } else if n >= 4 {
                let (a, b) = (rd(src.cast::<u32>()), rd(src.add(n - 4).cast::<u32>()));
                wr(dst.cast::<u32>(), a);
                wr(dst.add(n - 4).cast::<u32>(), b);
            } else {
                for i in 0..n {
                    let b = rd(src.add(i));
                    wr(dst.add(i), b);
                }
            }
        } else if n <= 32 {
            let (a, b) = (rd(src.cast::<u128>()), rd(src.add(n - 16).cast::<u128>()));
            wr(dst.cast::<u128>(), a);
            wr(dst.add(n - 16).cast::<u128>(), b);
        } else if n <= 64 {
            let (a, b) = (
                rd(src.cast::<[u128; 2]>()),
                rd(src.add(n - 32).cast::<[u128; 2]>()),
            );
            wr(dst.cast::<[u128; 2]>(), a);
            wr(dst.add(n - 32).cast::<[u128; 2]>(), b);
        } else {
            #[cfg(target_arch = "x86_64")]
            if n >= LINE_COPY_MIN
                && std::arch::is_x86_feature_detected!("avx512f")
                && ((dst as usize) + n <= src as usize || (src as usize) + n <= dst as usize)
            {
                copy_lines(dst, src, n);
                return;
            }
            std::ptr::copy(src, dst, n);
        }
    }
}

/// Copies this long or longer go through [`copy_lines`] where the CPU
/// allows. A 1514-byte frame takes 25 lines.
const LINE_COPY_MIN: usize = 256;

/// Copies `n >= 64` bytes between ranges that do not overlap, storing
/// whole 64-byte destination lines, each with one AVX-512 store at a line
/// boundary (the first and last 64 bytes wherever they fall).
///
/// A frame written into a guest buffer usually comes from memory that the
/// cache no longer holds (a 1024-entry ring circulates megabytes); there
/// this is 2.5-3.4 % faster per 1514-byte frame than `ptr::copy` (glibc's
/// `memmove`), measured in one run with both (BENCHMARKS.md, "Another host,
/// and packed TX descriptor lines left to the driver").
///
/// # Safety
/// `src` must be readable and `dst` writable for `n` bytes, `n >= 64`, the
/// two ranges must not overlap, and the CPU must have AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn copy_lines(dst: *mut u8, src: *const u8, n: usize) {
    debug_assert!(n >= 64);
    // SAFETY: every access is 64 bytes at an offset in `[0, n - 64]` of both
    // ranges, which the caller guarantees valid (`i` starts at the first
    // line boundary of `dst` past its start, so the loop's stores fill
    // whole lines). The ranges do not overlap, so no load reads a byte this
    // copy stored.
    unsafe {
        copy_line(dst, src);
        let mut i = 64 - (dst as usize & 63);
        while i + 64 <= n {
            copy_line(dst.add(i), src.add(i));
            i += 64;
        }
        if i < n {
            copy_line(dst.add(n - 64), src.add(n - 64));
        }
        // The upper halves of the vector registers are dirty; SSE code
        // after this would pay for it on every instruction until cleared.
        std::arch::asm!(
            "vzeroupper",
            clobber_abi("C"),
            options(nostack, preserves_flags)
        );
    }
}

/// Copies 64 bytes with one AVX-512 load and one store. Written as
/// assembly: the AVX-512 intrinsics need a newer compiler than the
/// workspace's minimum. `vmovdqu64` costs what `vmovdqa64` does when the
/// address is aligned: the line loop's stores are, the first and last
/// need not be.
///
/// # Safety
/// `src` readable and `dst` writable for 64 bytes, and the CPU has
/// AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn copy_line(dst: *mut u8, src: *const u8) {
    // SAFETY: the caller's contract; the block touches `zmm0` (declared)
    // and no stack or flags.
    unsafe {
        std::arch::asm!(
            "vmovdqu64 zmm0, [{s}]",
            "vmovdqu64 [{d}], zmm0",
            s = in(reg) src,
            d = in(reg) dst,
            out("zmm0") _,
            options(nostack, preserves_flags)
        );
    }
}

/// How many entries (split rings) or slots (packed rings) ahead of the one
/// being taken a ring warms the descriptor.
const DESC_AHEAD: u16 = 8;

/// How many entries ahead an RX ring warms the buffer: far enough that its
/// descriptor, warmed [`DESC_AHEAD`] entries ahead, has arrived, and that
/// the buffer's lines arrive before the frames between are written.
const BUF_AHEAD: u16 = 3;

/// The bytes at a buffer's start that [`prefetch_buffer`] warms (two
/// lines, wherever the buffer starts); a frame no longer than this has
/// nothing for [`prefetch_body`].
pub(crate) const HEAD_WARM: usize = 128;

/// Warms the first two lines of a buffer of `len` bytes at `hva`: a small
/// frame and its virtio-net header, which cross a line boundary wherever
/// the driver puts the buffer (virtio-user puts the header in the line
/// before the frame).
#[inline(always)]
pub(crate) fn prefetch_buffer(hva: usize, len: u32, write: bool) {
    prefetch(hva, write);
    if len > 64 {
        prefetch(hva + 64, write);
    }
}

/// The most lines of one frame that [`prefetch_body`] warms: a 1514-byte
/// frame and its header whole; a longer frame's first 2 KiB, after which
/// the copy's own stream has the hardware prefetcher running.
const BODY_LINES: usize = 32;

/// Warms the rest of a buffer of `len` bytes at `hva` whose first two lines
/// [`prefetch_buffer`] warmed: the lines a large frame's copy reads (or
/// writes) after its head, up to [`BODY_LINES`] in all, asked for one frame
/// before the copy. Without it the copy waits for them a line at a time,
/// with a TLB miss at each 4 KiB page the hardware prefetcher stops at:
/// 4-9 % more 1514-byte frames per second (BENCHMARKS.md, "Large frames'
/// lines asked for one frame ahead"). Nothing for a frame of two lines.
#[inline(always)]
pub(crate) fn prefetch_body(hva: usize, len: usize, write: bool) {
    // The mapping holds the buffer, so the sum cannot overflow.
    let end = hva + len.min(BODY_LINES * 64);
    let mut line = (hva & !63) + HEAD_WARM;
    while line < end {
        prefetch(line, write);
        line += 64;
    }
}

/// Hands the first two lines of a buffer of `len` bytes at `hva` that this
/// core has just written (a frame's virtio-net header and its head, as
/// [`prefetch_buffer`] warms them) to the shared last-level cache:
/// `CLDEMOTE`. Another core (the guest's vCPU, a frontend's poller) then
/// reads them from there, not by a snoop of this core's caches, which costs
/// it more (BENCHMARKS.md, "Lines handed over when the loop has cycles to
/// spare"). A hint: the lines stay valid and cached, and a CPU without
/// `CLDEMOTE` (older Intel, AMD) decodes it as a no-op, with no feature
/// check needed.
#[inline(always)]
pub(crate) fn demote_buffer(hva: usize, len: usize) {
    demote(hva);
    if len > 64 {
        demote(hva + 64);
    }
}

/// `CLDEMOTE` of the line at `addr` (see [`demote_buffer`]).
#[inline(always)]
fn demote(addr: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `CLDEMOTE` only moves a line between cache levels: it cannot
    // fault or change what any load returns, for any address (it is in the
    // hint no-op space, a no-op where the CPU lacks it); it touches no
    // register but its operand, nor the flags or the stack. `readonly`, not
    // `nomem`: it must stay after the stores that wrote the line.
    unsafe {
        std::arch::asm!(
            "cldemote [{0}]",
            in(reg) addr,
            options(nostack, preserves_flags, readonly)
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
}

/// Asks the CPU to bring the cache line at `addr` in (for writing when
/// `write`). A hint: it never faults, whatever the address.
///
/// For writing this is `PREFETCHW`, written out: `_mm_prefetch` with the
/// write hint compiles to a plain read prefetch unless the build enables
/// the `prfchw` target feature, and a line fetched for reading from the
/// core that wrote it arrives shared, so the store into it still waits in
/// the store buffer for the other copy to be invalidated (one more
/// round trip between the cores, behind which every later store queues).
/// `PREFETCHW` has been on every x86-64 CPU from AMD, and on Intel's since
/// Broadwell; older ones decode it as a no-op.
#[inline(always)]
pub(crate) fn prefetch(addr: usize, write: bool) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        if write {
            // SAFETY: a prefetch does not access memory architecturally: it
            // cannot fault or change what any load returns, for any address;
            // it touches no register but its operand, nor the flags or the
            // stack.
            unsafe {
                std::arch::asm!(
                    "prefetchw [{0}]",
                    in(reg) addr,
                    options(nostack, preserves_flags, readonly)
                );
            }
        } else {
            // SAFETY: as above.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(addr as *const i8) }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (addr, write);
}

/// Reads a 16-byte descriptor at host address `p` as two little-endian
/// words (address, then the rest), volatile: two loads when `p` is 8-aligned
/// (ring tables always are), byte by byte otherwise (an indirect table at an
/// odd address).
///
/// # Safety
/// `p..p + 16` must be readable guest memory (inside a mapped region whose
/// snapshot outlives the call).
#[inline(always)]
unsafe fn read_desc_words(p: usize) -> (u64, u64) {
    let (lo, hi) = if p.is_multiple_of(8) {
        // SAFETY: readable per the contract; 8-aligned.
        unsafe {
            (
                std::ptr::read_volatile(p as *const u64),
                std::ptr::read_volatile((p + 8) as *const u64),
            )
        }
    } else {
        let mut b = [0u8; 16];
        for (k, byte) in b.iter_mut().enumerate() {
            // SAFETY: readable per the contract; no alignment needed.
            *byte = unsafe { std::ptr::read_volatile((p + k) as *const u8) };
        }
        (
            u64::from_ne_bytes(b[..8].try_into().expect("8 bytes")),
            u64::from_ne_bytes(b[8..].try_into().expect("8 bytes")),
        )
    };
    (u64::from_le(lo), u64::from_le(hi))
}

/// Copies `dst.len()` bytes of the buffers `segs`, starting `offset` bytes
/// in, into `dst`. Returns how many bytes were copied (fewer when the
/// buffers end first).
#[inline]
pub(crate) fn copy_from_segs(segs: &[Seg], mut offset: usize, dst: &mut [u8]) -> usize {
    let mut done = 0;
    for s in segs {
        let len = s.len() as usize;
        if offset >= len {
            offset -= len;
            continue;
        }
        let n = (len - offset).min(dst.len() - done);
        // SAFETY: `s` was bounds-checked against the mapped regions by the
        // ring parser and its snapshot is alive (module invariant); `offset +
        // n <= len`; `dst[done..done + n]` is in bounds. Source and
        // destination cannot overlap (guest memory is never a Rust slice).
        unsafe {
            copy_bytes(
                dst.as_mut_ptr().add(done),
                (s.hva() + offset) as *const u8,
                n,
            );
        }
        done += n;
        offset = 0;
        if done == dst.len() {
            break;
        }
    }
    done
}

/// Stores `h` into `dst` as one 8-byte and one 4-byte store. A header built
/// field by field is stored field by field, and a copy of it read back as
/// words soon after cannot be forwarded from those stores: the load then
/// waits until every older store has left the store buffer, including
/// stores into guest lines still on their way from the driver's core.
/// Words stored as words forward to any load within them.
#[inline(always)]
pub(crate) fn store_hdr(dst: &mut VirtioNetHdr, h: VirtioNetHdr) {
    #[cfg(target_endian = "little")]
    {
        let (lo, hi) = h.to_words();
        let p = (dst as *mut VirtioNetHdr).cast::<u8>();
        // SAFETY: `VirtioNetHdr` is `repr(C)`: 12 bytes of integer fields in
        // wire order, so on a little-endian machine its bytes are those of
        // `to_words`'s two words stored natively (and any bytes are a valid
        // value); `dst` is a unique reference to those 12 writable bytes;
        // the writes tolerate any alignment.
        unsafe {
            std::ptr::write_unaligned(p.cast::<u64>(), lo);
            std::ptr::write_unaligned(p.add(8).cast::<u32>(), hi);
        }
    }
    #[cfg(not(target_endian = "little"))]
    {
        *dst = h;
    }
}

/// Loads `h` as its two wire words (bytes 0-7, 8-11) with one 8-byte and
/// one 4-byte load: the mirror of [`store_hdr`]. A header copied whole is
/// stored as those two words, and [`VirtioNetHdr::to_words`] on it compiles
/// to a load across both (bytes 2-9), which store forwarding cannot serve;
/// these two loads it can.
#[inline(always)]
pub(crate) fn load_hdr(h: &VirtioNetHdr) -> (u64, u32) {
    #[cfg(target_endian = "little")]
    {
        let p = (h as *const VirtioNetHdr).cast::<u8>();
        // SAFETY: `VirtioNetHdr` is `repr(C)`: 12 bytes of integer fields in
        // wire order, so on a little-endian machine its bytes are those of
        // `to_words`'s two words stored natively; `h` is a reference to
        // those 12 readable bytes; the reads tolerate any alignment.
        unsafe {
            (
                std::ptr::read_unaligned(p.cast::<u64>()),
                std::ptr::read_unaligned(p.add(8).cast::<u32>()),
            )
        }
    }
    #[cfg(not(target_endian = "little"))]
    {
        h.to_words()
    }
}

/// Reads a virtio-net header (`len` = 10 or 12 bytes) from the start of
/// `segs`: two loads when the first buffer holds it whole (the common
/// layout), a byte copy otherwise. Missing bytes read as zero.
#[inline]
pub(crate) fn read_hdr(segs: &[Seg], len: usize) -> VirtioNetHdr {
    if let Some(s) = segs.first() {
        if s.len() as usize >= 12 {
            // SAFETY: the first buffer is checked guest memory (module
            // invariant) of at least 12 bytes.
            let (lo, hi) = unsafe {
                (
                    std::ptr::read_unaligned(s.hva() as *const u64),
                    std::ptr::read_unaligned((s.hva() + 8) as *const u32),
                )
            };
            return VirtioNetHdr::from_words(u64::from_le(lo), u32::from_le(hi), len);
        }
    }
    let mut b = [0u8; MAX_HDR_LEN];
    copy_from_segs(segs, 0, &mut b[..len.min(MAX_HDR_LEN)]);
    VirtioNetHdr::from_bytes(&b, len)
}

/// A cursor writing into a list of guest buffers (an RX frame's chains).
#[derive(Debug)]
pub(crate) struct SegWriter<'a> {
    segs: &'a [Seg],
    idx: usize,
    off: usize,
    written: usize,
}

impl<'a> SegWriter<'a> {
    pub(crate) fn new(segs: &'a [Seg]) -> Self {
        Self {
            segs,
            idx: 0,
            off: 0,
            written: 0,
        }
    }

    /// Bytes written so far.
    pub(crate) fn written(&self) -> usize {
        self.written
    }

    /// Copies `len` bytes from host address `src`. Returns the bytes copied
    /// (fewer when the buffers are full). Bytes that fit in the current
    /// buffer (a frame in one RX buffer) are copied inline; the rest takes
    /// the out-of-line walk over the buffers.
    ///
    /// # Safety
    /// `src..src + len` must be readable for the duration of the call: a
    /// host slice, or a guest buffer checked by the ring parser whose memory
    /// snapshot is alive.
    #[inline(always)]
    unsafe fn write_raw(&mut self, src: usize, len: usize) -> usize {
        if let Some(s) = self.segs.get(self.idx) {
            if s.len() as usize - self.off >= len {
                // SAFETY: the destination is a checked guest buffer (module
                // invariant) with `off + len <= s.len()`; the source is
                // readable for `len` bytes per this function's contract.
                // `copy_bytes` tolerates overlap (a hostile guest may make
                // a TX buffer alias an RX buffer).
                unsafe {
                    copy_bytes((s.hva() + self.off) as *mut u8, src as *const u8, len);
                }
                self.off += len;
                self.written += len;
                return len;
            }
        }
        // SAFETY: this function's own contract.
        unsafe { self.write_raw_walk(src, len) }
    }

    /// [`Self::write_raw`]'s general case, buffer by buffer.
    ///
    /// # Safety
    /// As for [`Self::write_raw`].
    #[inline(never)]
    unsafe fn write_raw_walk(&mut self, mut src: usize, mut len: usize) -> usize {
        let start = self.written;
        while len > 0 {
            let Some(s) = self.segs.get(self.idx) else {
                break;
            };
            let room = s.len() as usize - self.off;
            if room == 0 {
                self.idx += 1;
                self.off = 0;
                continue;
            }
            let n = room.min(len);
            // SAFETY: the destination is a checked guest buffer (module
            // invariant) with `off + n <= s.len()`; the source is readable for
            // `len >= n` bytes per this function's contract. `copy` (not
            // `copy_nonoverlapping`) because a hostile guest may make a TX
            // buffer alias an RX buffer.
            unsafe {
                copy_bytes((s.hva() + self.off) as *mut u8, src as *const u8, n);
            }
            self.off += n;
            self.written += n;
            src += n;
            len -= n;
        }
        self.written - start
    }

    /// Writes a virtio-net header (`len` = 10 or 12 bytes), given as its
    /// two wire words ([`VirtioNetHdr::to_words`]), at the start: two
    /// stores when the first buffer holds it whole.
    #[inline(always)]
    pub(crate) fn write_hdr(&mut self, lo: u64, hi: u32, len: usize) -> usize {
        if self.written == 0 {
            if let Some(s) = self.segs.first() {
                if s.len() as usize >= 12 {
                    // SAFETY: the first buffer is checked guest memory
                    // (module invariant) of at least 12 bytes.
                    unsafe {
                        std::ptr::write_unaligned(s.hva() as *mut u64, lo.to_le());
                        if len >= 12 {
                            std::ptr::write_unaligned((s.hva() + 8) as *mut u32, hi.to_le());
                        } else {
                            std::ptr::write_unaligned(
                                (s.hva() + 8) as *mut u16,
                                (hi as u16).to_le(),
                            );
                        }
                    }
                    self.off = len;
                    self.written = len;
                    return len;
                }
            }
        }
        // The wire layout is the two words' little-endian bytes.
        let mut b = [0u8; MAX_HDR_LEN];
        b[..8].copy_from_slice(&lo.to_le_bytes());
        b[8..].copy_from_slice(&hi.to_le_bytes());
        self.write(&b[..len])
    }

    /// Copies a host slice into the buffers.
    #[inline]
    pub(crate) fn write(&mut self, src: &[u8]) -> usize {
        // SAFETY: a slice is readable for its whole length.
        unsafe { self.write_raw(src.as_ptr() as usize, src.len()) }
    }

    /// Copies `len` bytes of guest buffers `src`, starting `offset` bytes in.
    #[inline]
    pub(crate) fn write_from_segs(
        &mut self,
        src: &[Seg],
        mut offset: usize,
        mut len: usize,
    ) -> usize {
        let start = self.written;
        for s in src {
            if len == 0 {
                break;
            }
            let slen = s.len() as usize;
            if offset >= slen {
                offset -= slen;
                continue;
            }
            let n = (slen - offset).min(len);
            // SAFETY: `s` is a checked guest buffer whose snapshot is alive
            // (module invariant) and `offset + n <= s.len()`.
            let done = unsafe { self.write_raw(s.hva() + offset, n) };
            len -= done;
            offset = 0;
            if done < n {
                break;
            }
        }
        self.written - start
    }
}

#[cfg(test)]
mod tests;
