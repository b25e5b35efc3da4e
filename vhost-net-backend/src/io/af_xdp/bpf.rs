// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The few `bpf(2)` commands AF_XDP needs, and the XDP program itself, with
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
use std::mem::size_of;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr;

// Commands (uapi `enum bpf_cmd`).
const BPF_MAP_CREATE: libc::c_int = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_int = 2;
const BPF_PROG_LOAD: libc::c_int = 5;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_int = 15;
const BPF_LINK_CREATE: libc::c_int = 28;

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
const LICENSE: &[u8] = b"Apache-2.0 OR BSD-3-Clause\0";

/// One eBPF instruction (uapi `struct bpf_insn`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct BpfInsn {
    code: u8,
    /// `dst_reg` in the low nibble, `src_reg` in the high one.
    regs: u8,
    off: i16,
    imm: i32,
}

const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> BpfInsn {
    BpfInsn {
        code,
        regs: (src << 4) | (dst & 0xf),
        off,
        imm,
    }
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

// The `union bpf_attr` members we use, each a prefix of the union; the
// kernel zero-fills the rest. No implicit padding in any of them.

#[repr(C)]
#[derive(Default)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
}

#[repr(C)]
#[derive(Default)]
struct MapElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

#[repr(C)]
#[derive(Default)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
}

#[repr(C)]
#[derive(Default)]
struct InfoByFdAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

/// The head of `struct bpf_prog_info`.
#[repr(C)]
#[derive(Default)]
struct ProgInfoHead {
    prog_type: u32,
    id: u32,
}

/// `bpf(cmd, attr, sizeof(*attr))`.
///
/// # Safety
///
/// `T` is the `bpf_attr` layout of `cmd`, and every address stored in
/// `attr` points to memory valid for the reads or writes `cmd` makes, for
/// the duration of the call.
unsafe fn bpf<T>(cmd: libc::c_int, attr: &mut T) -> io::Result<libc::c_long> {
    let size = libc::c_uint::try_from(size_of::<T>()).expect("bpf_attr is small");
    // SAFETY: `attr` is valid for reads and writes of `size` bytes; the
    // caller vouches for the pointers inside it.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            ptr::from_mut(attr).cast::<libc::c_void>(),
            size,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Wraps the fd a successful `bpf` command returned.
fn owned_fd(r: libc::c_long) -> io::Result<OwnedFd> {
    let fd = i32::try_from(r).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))?;
    // SAFETY: the kernel just created this fd for us and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn fd_u32(fd: BorrowedFd<'_>) -> u32 {
    // Invariant: open file descriptors are non-negative.
    fd.as_raw_fd().unsigned_abs()
}

fn name16(name: &[u8]) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[..name.len()].copy_from_slice(name);
    out
}

/// Creates an `XSKMAP` of `max_entries` slots (key: RX queue index, value:
/// AF_XDP socket fd).
pub(super) fn create_xskmap(max_entries: u32) -> io::Result<OwnedFd> {
    let mut attr = MapCreateAttr {
        map_type: BPF_MAP_TYPE_XSKMAP,
        key_size: 4,
        value_size: 4,
        max_entries,
        map_name: name16(MAP_NAME),
        ..Default::default()
    };
    // SAFETY: MAP_CREATE reads only the attr itself (no pointers).
    owned_fd(unsafe { bpf(BPF_MAP_CREATE, &mut attr) }?)
}

/// Stores socket `xsk` at `key` (an RX queue index) in the XSKMAP `map`.
pub(super) fn xskmap_insert(map: BorrowedFd<'_>, key: u32, xsk: BorrowedFd<'_>) -> io::Result<()> {
    let value = fd_u32(xsk);
    let mut attr = MapElemAttr {
        map_fd: fd_u32(map),
        key: ptr::from_ref(&key) as u64,
        value: ptr::from_ref(&value) as u64,
        flags: BPF_ANY,
        ..Default::default()
    };
    // SAFETY: `key` and `value` are live u32s for the call, matching the
    // map's key and value sizes; the kernel only reads them.
    unsafe { bpf(BPF_MAP_UPDATE_ELEM, &mut attr) }.map(drop)
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
    let map_fd = map.as_raw_fd();
    let prog = xsk_redirect_program(map_fd);
    let load = |log: Option<&mut Vec<u8>>| {
        let mut attr = ProgLoadAttr {
            prog_type: BPF_PROG_TYPE_XDP,
            insn_cnt: prog.len() as u32,
            insns: prog.as_ptr() as u64,
            license: LICENSE.as_ptr() as u64,
            prog_name: name16(PROG_NAME),
            expected_attach_type: BPF_XDP,
            ..Default::default()
        };
        if let Some(buf) = log {
            attr.log_level = 1;
            attr.log_size = u32::try_from(buf.len()).expect("log buffer is small");
            attr.log_buf = buf.as_mut_ptr() as u64;
        }
        // SAFETY: `prog` holds `insn_cnt` instructions, `LICENSE` is
        // NUL-terminated, and the log buffer (if any) is writable for
        // `log_size` bytes; all outlive the call.
        unsafe { bpf(BPF_PROG_LOAD, &mut attr) }.and_then(owned_fd)
    };
    load(None).map_err(|error| {
        // Slow path (the load already failed): allocate a log buffer.
        let mut buf = vec![0u8; 64 * 1024];
        let log = match load(Some(&mut buf)) {
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
    let mut attr = LinkCreateAttr {
        prog_fd: fd_u32(prog),
        target_ifindex: ifindex,
        attach_type: BPF_XDP,
        flags,
    };
    // SAFETY: LINK_CREATE for XDP reads only the attr itself (no pointers).
    owned_fd(unsafe { bpf(BPF_LINK_CREATE, &mut attr) }?)
}

/// The kernel's id of program `prog` (as shown by `ip -d link` and
/// `bpftool prog`).
pub(super) fn prog_id(prog: BorrowedFd<'_>) -> io::Result<u32> {
    let mut info = ProgInfoHead::default();
    let mut attr = InfoByFdAttr {
        bpf_fd: fd_u32(prog),
        info_len: size_of::<ProgInfoHead>() as u32,
        info: ptr::from_mut(&mut info) as u64,
    };
    // SAFETY: `info` is writable for `info_len` bytes and outlives the call;
    // the kernel writes at most `info_len` bytes.
    unsafe { bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr) }?;
    Ok(info.id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_encoding() {
        let p = xsk_redirect_program(7);
        assert_eq!(size_of::<BpfInsn>(), 8);
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
    fn attr_layouts_match_the_kernel() {
        assert_eq!(size_of::<MapCreateAttr>(), 44);
        assert_eq!(size_of::<MapElemAttr>(), 32);
        assert_eq!(size_of::<ProgLoadAttr>(), 72);
        assert_eq!(std::mem::offset_of!(ProgLoadAttr, prog_name), 48);
        assert_eq!(std::mem::offset_of!(ProgLoadAttr, expected_attach_type), 68);
        assert_eq!(size_of::<LinkCreateAttr>(), 16);
        assert_eq!(size_of::<InfoByFdAttr>(), 16);
        assert!(PROG_NAME.len() < 16 && MAP_NAME.len() < 16);
    }
}
