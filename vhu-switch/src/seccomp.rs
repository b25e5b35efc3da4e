// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The switch's seccomp filter: an allow-list of the system calls its
//! threads make, installed once the switch has started, on every thread at
//! once (`SECCOMP_FILTER_FLAG_TSYNC`: the PMD threads, the ports' control
//! threads, the control API's), and inherited by every thread started
//! after (a port's control thread, a capture, a pod TAP's `setns` thread).
//! As Firecracker and cloud-hypervisor do, with rust-vmm's `seccompiler`.
//!
//! What a call outside the list gets depends on `--seccomp`:
//!
//! * `enforce` (the default): `EPERM`. Not `KillProcess`: the switch
//!   carries every tenant's traffic, and a rare path the list missed (an
//!   error path, a libc change) should fail that one operation, reported,
//!   not take down every VM's network; a forbidden call does nothing
//!   either way, and an attacker who took a thread over gains no call the
//!   list lacks (`execve`, `ptrace`, `mount`, `init_module`, `keyctl`,
//!   `process_vm_writev`, `open_by_handle_at`, `io_uring_setup`, ... are
//!   all out).
//! * `log`: allowed, and logged by the kernel (`audit: type=1326 ...
//!   syscall=N` in the kernel log): how the list was made (every switch
//!   end-to-end test run in this mode, then `dmesg | grep type=1326`).
//! * `off`: no filter, for debugging.
//!
//! One list serves every thread kind: the PMD threads also need what the
//! uplinks' queues need (`sendto`/`recvfrom`/`sendmsg`/`recvmsg` on
//! AF_XDP, AF_PACKET and TAP, `poll`, `ioctl` on the TAP), and the
//! control threads what creating ports needs (`bpf`, `setns`,
//! `mkdirat`...). The list is per architecture (x86_64 and aarch64, whose
//! libcs use different calls).

use std::collections::BTreeMap;

use seccompiler::{BpfProgram, SeccompAction, SeccompFilter, SeccompRule, TargetArch};

/// How the filter treats a call outside the list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// No filter.
    Off,
    /// Allowed and logged by the kernel.
    Log,
    /// Refused with `EPERM`.
    #[default]
    Enforce,
}

impl Mode {
    /// The mode named `s` (`off`, `log`, `enforce`).
    pub fn parse(s: &str) -> Option<Mode> {
        match s {
            "off" => Some(Mode::Off),
            "log" => Some(Mode::Log),
            "enforce" => Some(Mode::Enforce),
            _ => None,
        }
    }
}

/// Calls every architecture's libc and Rust's std make for the switch.
const COMMON: &[libc::c_long] = &[
    // Memory.
    libc::SYS_mmap,
    libc::SYS_munmap,
    libc::SYS_mprotect,
    libc::SYS_mremap,
    libc::SYS_madvise,
    libc::SYS_brk,
    libc::SYS_mincore,
    // Files and descriptors (sockets' files, the state file, guest
    // memory's fds, /proc and /sys reads).
    libc::SYS_read,
    libc::SYS_write,
    libc::SYS_readv,
    libc::SYS_writev,
    libc::SYS_pread64,
    libc::SYS_pwrite64,
    libc::SYS_close,
    libc::SYS_openat,
    libc::SYS_newfstatat,
    libc::SYS_fstat,
    libc::SYS_statx,
    libc::SYS_statfs,
    libc::SYS_fstatfs,
    libc::SYS_lseek,
    libc::SYS_fcntl,
    libc::SYS_ioctl,
    libc::SYS_dup,
    libc::SYS_dup3,
    libc::SYS_pipe2,
    libc::SYS_getdents64,
    libc::SYS_readlinkat,
    libc::SYS_mkdirat,
    libc::SYS_unlinkat,
    libc::SYS_renameat2,
    // glibc's renameat2() without flags.
    libc::SYS_renameat,
    libc::SYS_fchownat,
    libc::SYS_fchmodat,
    libc::SYS_fchmod,
    libc::SYS_fchown,
    libc::SYS_fsync,
    libc::SYS_fdatasync,
    libc::SYS_ftruncate,
    libc::SYS_faccessat,
    libc::SYS_faccessat2,
    libc::SYS_getcwd,
    libc::SYS_memfd_create,
    // Sockets: vhost-user, the control API, AF_PACKET, AF_XDP, netlink.
    libc::SYS_socket,
    libc::SYS_socketpair,
    libc::SYS_bind,
    libc::SYS_listen,
    libc::SYS_accept4,
    libc::SYS_connect,
    libc::SYS_sendto,
    libc::SYS_recvfrom,
    libc::SYS_sendmsg,
    libc::SYS_recvmsg,
    libc::SYS_sendmmsg,
    libc::SYS_recvmmsg,
    libc::SYS_setsockopt,
    libc::SYS_getsockopt,
    libc::SYS_getsockname,
    libc::SYS_getpeername,
    libc::SYS_shutdown,
    // Waiting.
    libc::SYS_epoll_create1,
    libc::SYS_epoll_ctl,
    libc::SYS_epoll_pwait,
    libc::SYS_epoll_pwait2,
    libc::SYS_ppoll,
    libc::SYS_pselect6,
    libc::SYS_eventfd2,
    libc::SYS_timerfd_create,
    libc::SYS_timerfd_settime,
    libc::SYS_nanosleep,
    libc::SYS_clock_nanosleep,
    libc::SYS_clock_gettime,
    libc::SYS_clock_getres,
    libc::SYS_gettimeofday,
    // Threads and signals.
    libc::SYS_clone,
    libc::SYS_clone3,
    libc::SYS_futex,
    libc::SYS_set_robust_list,
    libc::SYS_get_robust_list,
    libc::SYS_rseq,
    libc::SYS_set_tid_address,
    libc::SYS_sched_yield,
    libc::SYS_sched_getaffinity,
    libc::SYS_sched_setaffinity,
    libc::SYS_gettid,
    libc::SYS_getpid,
    libc::SYS_tgkill,
    libc::SYS_rt_sigaction,
    libc::SYS_rt_sigprocmask,
    libc::SYS_rt_sigreturn,
    libc::SYS_sigaltstack,
    libc::SYS_exit,
    libc::SYS_exit_group,
    libc::SYS_restart_syscall,
    // Process facts.
    libc::SYS_getrandom,
    libc::SYS_prctl,
    libc::SYS_prlimit64,
    libc::SYS_uname,
    libc::SYS_getuid,
    libc::SYS_geteuid,
    libc::SYS_getgid,
    libc::SYS_getegid,
    libc::SYS_capget,
    // Port kinds: AF_XDP (program, maps, link), a pod's TAP (its
    // namespace).
    libc::SYS_bpf,
    libc::SYS_setns,
];

/// x86_64's older calls, which its libc still makes.
#[cfg(target_arch = "x86_64")]
const ARCH: &[libc::c_long] = &[
    libc::SYS_open,
    libc::SYS_stat,
    libc::SYS_lstat,
    libc::SYS_poll,
    libc::SYS_epoll_wait,
    libc::SYS_unlink,
    libc::SYS_rmdir,
    libc::SYS_mkdir,
    libc::SYS_rename,
    libc::SYS_readlink,
    libc::SYS_access,
    libc::SYS_chmod,
    libc::SYS_dup2,
    libc::SYS_pipe,
    libc::SYS_accept,
    libc::SYS_getrlimit,
    libc::SYS_arch_prctl,
    libc::SYS_sched_getparam,
];

#[cfg(not(target_arch = "x86_64"))]
const ARCH: &[libc::c_long] = &[];

/// Why the filter could not be built or installed.
#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    /// The filter could not be built: an architecture it does not know, a
    /// rule that does not compile.
    #[error("seccomp: {0}")]
    Build(seccompiler::BackendError),
    /// The kernel refused the filter.
    #[error("seccomp: {0}")]
    Install(seccompiler::Error),
}

/// The filter for `mode` (`None` for [`Mode::Off`]).
///
/// # Errors
/// The architecture is not supported, or the filter does not compile.
pub fn program(mode: Mode) -> Result<Option<BpfProgram>, SeccompError> {
    let mismatch = match mode {
        Mode::Off => return Ok(None),
        Mode::Log => SeccompAction::Log,
        Mode::Enforce => SeccompAction::Errno(libc::EPERM as u32),
    };
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(SeccompError::Build)?;
    let rules: BTreeMap<i64, Vec<SeccompRule>> = COMMON
        .iter()
        .chain(ARCH)
        .map(|&n| (n, Vec::new()))
        .collect();
    let filter = SeccompFilter::new(rules, mismatch, SeccompAction::Allow, arch)
        .map_err(SeccompError::Build)?;
    BpfProgram::try_from(filter)
        .map(Some)
        .map_err(SeccompError::Build)
}

/// Installs the filter of `mode` on every thread of the process (threads
/// started later inherit it). Needs no-new-privs or `CAP_SYS_ADMIN`
/// (privilege::apply set the former).
///
/// # Errors
/// The filter does not compile, or the kernel refused it.
pub fn install(mode: Mode) -> Result<(), SeccompError> {
    let Some(p) = program(mode)? else {
        return Ok(());
    };
    seccompiler::apply_filter_all_threads(&p).map_err(SeccompError::Install)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_and_programs() {
        assert_eq!(Mode::parse("enforce"), Some(Mode::Enforce));
        assert_eq!(Mode::parse("log"), Some(Mode::Log));
        assert_eq!(Mode::parse("off"), Some(Mode::Off));
        assert_eq!(Mode::parse("on"), None);
        assert_eq!(Mode::default(), Mode::Enforce);
        assert!(program(Mode::Off).unwrap().is_none());
        assert!(!program(Mode::Enforce).unwrap().unwrap().is_empty());
        assert!(!COMMON.contains(&libc::SYS_execve));
        assert!(!COMMON.contains(&libc::SYS_ptrace));
    }

    #[test]
    fn a_forbidden_call_gets_eperm_on_a_filtered_thread() {
        // On a thread of its own: the filter stays with it.
        let r = std::thread::spawn(|| {
            let p = program(Mode::Enforce).unwrap().unwrap();
            seccompiler::apply_filter(&p).unwrap();
            let ok = std::fs::read("/proc/self/status").is_ok();
            let denied = std::process::Command::new("/bin/true").status();
            (ok, denied.map_err(|e| e.raw_os_error()))
        })
        .join()
        .unwrap();
        assert!(r.0, "an allowed call works");
        assert!(
            r.1.is_err(),
            "execve (or the clone for it) is refused: {:?}",
            r.1
        );
    }
}
