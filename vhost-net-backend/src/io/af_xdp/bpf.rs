// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The XDP program of AF_XDP and the `bpf(2)` objects around it, with
//! no C toolchain and no libbpf: an `XSKMAP`, a six-instruction program that
//! redirects every frame to the socket registered for its RX queue, and a
//! BPF link that attaches the program to the interface.
//!
//! # The program
//!
//! ```text
//! r2 = *(u32 *)(r1 + 16)      ; ctx->rx_queue_index
//! r1 = map_fd ll              ; the XSKMAP (ld_imm64, src = BPF_PSEUDO_MAP_FD)
//! r3 = XDP_PASS               ; action when the map has no socket at that key
//! call bpf_redirect_map       ; r0 = XDP_REDIRECT, or r3 when the slot is empty
//! exit
//! ```
//!
//! Queues without a socket, and frames arriving before a socket is
//! registered, go to the host stack (`XDP_PASS` as the fallback action of
//! `bpf_redirect_map` needs Linux 5.3). `bpf_redirect_map` is not a
//! GPL-only helper, so the program carries the project's own licence.
//!
//! # Lifetime
//!
//! Every object is a file descriptor owned by the caller. The link holds
//! the program attached; closing the link fd (drop, or process exit, even by
//! a crash) detaches it. No pinning in bpffs, nothing to clean up by hand.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use crate::sys::bpf::{self, BpfInsn, Program};

const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
/// `enum bpf_attach_type`: BPF_XDP.
const BPF_XDP: u32 = 37;
/// `BPF_ANY`: create or replace the element.
const BPF_ANY: u64 = 0;

/// Attach flags (uapi `if_link.h`).
pub(super) const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
/// Attach in the driver (native XDP).
pub(super) const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

const BPF_PSEUDO_MAP_FD: u8 = 1;
const BPF_FUNC_REDIRECT_MAP: i32 = 51;
const XDP_PASS: i32 = 2;
/// `offsetof(struct xdp_md, rx_queue_index)`.
const XDP_MD_RX_QUEUE_INDEX: i16 = 16;

/// Program name shown by `bpftool` and `ip -d link` (at most 15 bytes).
const PROG_NAME: &[u8] = b"vhu_xsk_redir";
/// Map name (at most 15 bytes).
const MAP_NAME: &[u8] = b"vhu_xsks";
const LICENSE: &std::ffi::CStr = c"Apache-2.0 OR BSD-3-Clause";

const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> BpfInsn {
    BpfInsn::new(code, dst, src, off, imm)
}

/// The redirect program for the XSKMAP `map_fd` (see the module doc).
pub(super) fn xsk_redirect_program(map_fd: i32) -> [BpfInsn; 6] {
    [
        insn(0x61, 2, 1, XDP_MD_RX_QUEUE_INDEX, 0), // ldxw r2, [r1 + 16]
        insn(0x18, 1, BPF_PSEUDO_MAP_FD, 0, map_fd), // lddw r1, map (first half)
        insn(0x00, 0, 0, 0, 0),                     // lddw (second half: imm >> 32 = 0)
        insn(0xb7, 3, 0, 0, XDP_PASS),              // mov64 r3, XDP_PASS
        insn(0x85, 0, 0, 0, BPF_FUNC_REDIRECT_MAP), // call bpf_redirect_map
        insn(0x95, 0, 0, 0, 0),                     // exit
    ]
}

/// Creates an `XSKMAP` of `max_entries` slots (key: RX queue index, value:
/// AF_XDP socket fd).
pub(super) fn create_xskmap(max_entries: u32) -> io::Result<OwnedFd> {
    bpf::map_create_u32(BPF_MAP_TYPE_XSKMAP, max_entries, MAP_NAME)
}

/// Stores socket `xsk` at `key` (an RX queue index) in the XSKMAP `map`.
pub(super) fn xskmap_insert(map: BorrowedFd<'_>, key: u32, xsk: BorrowedFd<'_>) -> io::Result<()> {
    bpf::map_update_u32(map, key, bpf::fd_u32(xsk), BPF_ANY)
}

/// Why the program did not load, with the verifier's log.
#[derive(Debug)]
pub(super) struct LoadError {
    pub(super) error: io::Error,
    pub(super) log: String,
}

/// Loads the redirect program for `map`. On failure, loads it again with
/// the verifier log enabled and returns the log.
pub(super) fn load_xsk_redirect(map: BorrowedFd<'_>) -> Result<OwnedFd, LoadError> {
    let insns = xsk_redirect_program(map.as_raw_fd());
    let prog = Program {
        prog_type: BPF_PROG_TYPE_XDP,
        expected_attach_type: BPF_XDP,
        insns: &insns,
        license: LICENSE,
        name: PROG_NAME,
    };
    bpf::prog_load(&prog, None).map_err(|error| {
        // Slow path (the load already failed): allocate a log buffer.
        let mut buf = vec![0u8; 64 * 1024];
        let log = match bpf::prog_load(&prog, Some(&mut buf)) {
            Ok(_) => String::from("(the retry with the verifier log succeeded)"),
            Err(_) => {
                let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
                String::from_utf8_lossy(&buf[..end]).trim().to_owned()
            }
        };
        LoadError { error, log }
    })
}

/// Attaches `prog` to interface `ifindex` through a BPF link, with
/// `XDP_FLAGS_DRV_MODE` or `XDP_FLAGS_SKB_MODE` in `flags`. Dropping the
/// returned fd detaches the program.
pub(super) fn link_create_xdp(
    prog: BorrowedFd<'_>,
    ifindex: u32,
    flags: u32,
) -> io::Result<OwnedFd> {
    bpf::link_create(prog, ifindex, BPF_XDP, flags)
}

/// The kernel's id of program `prog` (as shown by `ip -d link` and
/// `bpftool prog`).
pub(super) fn prog_id(prog: BorrowedFd<'_>) -> io::Result<u32> {
    bpf::prog_id(prog)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_encoding() {
        let p = xsk_redirect_program(7);
        // ldxw r2, [r1 + 16]: dst 2, src 1.
        assert_eq!((p[0].code, p[0].regs, p[0].off), (0x61, 0x12, 16));
        // lddw r1 with the pseudo map fd 7.
        assert_eq!((p[1].code, p[1].regs, p[1].imm), (0x18, 0x11, 7));
        assert_eq!(p[2], insn(0, 0, 0, 0, 0));
        assert_eq!((p[3].regs, p[3].imm), (3, XDP_PASS));
        assert_eq!((p[4].code, p[4].imm), (0x85, 51));
        assert_eq!(p[5].code, 0x95);
    }

    #[test]
    fn names_fit() {
        assert!(PROG_NAME.len() < 16 && MAP_NAME.len() < 16);
    }
}
