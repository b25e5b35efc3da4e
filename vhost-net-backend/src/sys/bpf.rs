// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The `bpf(2)` commands AF_XDP needs: map create and update, program load
//! (with the verifier log on request), link create, and the program info
//! query. Detaching is closing the link fd.
//!
//! Every object is a file descriptor owned by the caller. The program
//! itself is in `io/af_xdp/bpf.rs`.

use std::ffi::CStr;
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

/// One eBPF instruction (uapi `struct bpf_insn`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BpfInsn {
    pub(crate) code: u8,
    /// `dst_reg` in the low nibble, `src_reg` in the high one.
    pub(crate) regs: u8,
    pub(crate) off: i16,
    pub(crate) imm: i32,
}

impl BpfInsn {
    /// Encodes one instruction.
    pub(crate) const fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Self {
        Self {
            code,
            regs: (src << 4) | (dst & 0xf),
            off,
            imm,
        }
    }
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

/// An fd as the `u32` the `bpf_attr` fields take.
pub(crate) fn fd_u32(fd: BorrowedFd<'_>) -> u32 {
    // Invariant: open file descriptors are non-negative.
    fd.as_raw_fd().unsigned_abs()
}

/// An object name (at most 15 bytes) as the kernel's `char[16]`.
fn name16(name: &[u8]) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[..name.len()].copy_from_slice(name);
    out
}

/// `BPF_MAP_CREATE` of a map with `u32`-sized keys and values.
pub(crate) fn map_create_u32(map_type: u32, max_entries: u32, name: &[u8]) -> io::Result<OwnedFd> {
    let mut attr = MapCreateAttr {
        map_type,
        key_size: 4,
        value_size: 4,
        max_entries,
        map_name: name16(name),
        ..Default::default()
    };
    // SAFETY: MAP_CREATE reads only the attr itself (no pointers).
    owned_fd(unsafe { bpf(BPF_MAP_CREATE, &mut attr) }?)
}

/// `BPF_MAP_UPDATE_ELEM` of `key` to `value` in a map with `u32` keys and
/// values, with `flags` (`BPF_ANY`, ...).
pub(crate) fn map_update_u32(
    map: BorrowedFd<'_>,
    key: u32,
    value: u32,
    flags: u64,
) -> io::Result<()> {
    let mut attr = MapElemAttr {
        map_fd: fd_u32(map),
        key: ptr::from_ref(&key) as u64,
        value: ptr::from_ref(&value) as u64,
        flags,
        ..Default::default()
    };
    // SAFETY: `key` and `value` are live u32s for the call, matching the
    // map's key and value sizes; the kernel only reads them.
    unsafe { bpf(BPF_MAP_UPDATE_ELEM, &mut attr) }.map(drop)
}

/// What `BPF_PROG_LOAD` loads.
pub(crate) struct Program<'a> {
    /// `enum bpf_prog_type`.
    pub(crate) prog_type: u32,
    /// `enum bpf_attach_type`.
    pub(crate) expected_attach_type: u32,
    /// The instructions.
    pub(crate) insns: &'a [BpfInsn],
    /// The licence string.
    pub(crate) license: &'a CStr,
    /// Program name (at most 15 bytes).
    pub(crate) name: &'a [u8],
}

/// `BPF_PROG_LOAD`; with `log`, the verifier writes its log there (NUL
/// terminated).
pub(crate) fn prog_load(prog: &Program<'_>, log: Option<&mut [u8]>) -> io::Result<OwnedFd> {
    let mut attr = ProgLoadAttr {
        prog_type: prog.prog_type,
        insn_cnt: u32::try_from(prog.insns.len()).expect("programs are small"),
        insns: prog.insns.as_ptr() as u64,
        license: prog.license.as_ptr() as u64,
        prog_name: name16(prog.name),
        expected_attach_type: prog.expected_attach_type,
        ..Default::default()
    };
    if let Some(buf) = log {
        attr.log_level = 1;
        attr.log_size = u32::try_from(buf.len()).expect("log buffer is small");
        attr.log_buf = buf.as_mut_ptr() as u64;
    }
    // SAFETY: `insns` holds `insn_cnt` instructions, `license` is
    // NUL-terminated, and the log buffer (if any) is writable for
    // `log_size` bytes; all outlive the call.
    unsafe { bpf(BPF_PROG_LOAD, &mut attr) }.and_then(owned_fd)
}

/// `BPF_LINK_CREATE`: attaches `prog` to `target_ifindex` as
/// `attach_type` with `flags`. Closing the returned fd detaches it.
pub(crate) fn link_create(
    prog: BorrowedFd<'_>,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
) -> io::Result<OwnedFd> {
    let mut attr = LinkCreateAttr {
        prog_fd: fd_u32(prog),
        target_ifindex,
        attach_type,
        flags,
    };
    // SAFETY: LINK_CREATE for XDP reads only the attr itself (no pointers).
    owned_fd(unsafe { bpf(BPF_LINK_CREATE, &mut attr) }?)
}

/// The kernel's id of program `prog` (`BPF_OBJ_GET_INFO_BY_FD`).
pub(crate) fn prog_id(prog: BorrowedFd<'_>) -> io::Result<u32> {
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
    fn attr_layouts_match_the_kernel() {
        assert_eq!(size_of::<BpfInsn>(), 8);
        assert_eq!(size_of::<MapCreateAttr>(), 44);
        assert_eq!(size_of::<MapElemAttr>(), 32);
        assert_eq!(size_of::<ProgLoadAttr>(), 72);
        assert_eq!(std::mem::offset_of!(ProgLoadAttr, prog_name), 48);
        assert_eq!(std::mem::offset_of!(ProgLoadAttr, expected_attach_type), 68);
        assert_eq!(size_of::<LinkCreateAttr>(), 16);
        assert_eq!(size_of::<InfoByFdAttr>(), 16);
    }
}
