// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The copy: [`copy_bytes`], the only `memcpy` of the data path, and its
//! AVX-512 line copy for large frames ([`copy_lines`]). Every byte a
//! frame moves between guest buffers, or between a guest buffer and a host
//! one, goes through it (via `seg::copy_from_segs` and `seg::SegWriter`).

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
pub(super) unsafe fn copy_bytes(dst: *mut u8, src: *const u8, n: usize) {
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
/// `memmove`), measured in one run with both
/// (docs/perf/fast-path-2026-12-05-to-06.md, "Another host,
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
