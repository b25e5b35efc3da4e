// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Cache hints: which lines of a ring and of its buffers the engine asks
//! for ahead of use ([`prefetch_buffer`], [`prefetch_body`], the
//! descriptor and buffer distances [`DESC_AHEAD`] and [`BUF_AHEAD`]), and
//! which it hands to the shared cache once written ([`demote_buffer`]).
//! Hints only: none can fault or change what a load returns.

/// How many entries (split rings) or slots (packed rings) ahead of the one
/// being taken a ring warms the descriptor.
pub(super) const DESC_AHEAD: u16 = 8;

/// How many entries ahead an RX ring warms the buffer: far enough that its
/// descriptor, warmed [`DESC_AHEAD`] entries ahead, has arrived, and that
/// the buffer's lines arrive before the frames between are written.
pub(super) const BUF_AHEAD: u16 = 3;

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
/// 4-9 % more 1514-byte frames per second
/// (docs/perf/fast-path-2026-12-05-to-06.md, "Large frames'
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
/// it more
/// (docs/perf/fast-path-2026-12-05-to-06.md, "Lines handed over when the loop has cycles to
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
