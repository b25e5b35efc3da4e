// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The process's capabilities: reading the five sets (`capget`,
//! `PR_CAPBSET_READ`, `PR_CAP_AMBIENT_IS_SET`) and keeping only some of them
//! (`PR_CAP_AMBIENT_LOWER`, `PR_CAPBSET_DROP`, `capset`), then
//! `PR_SET_NO_NEW_PRIVS`.
//!
//! Capabilities belong to a thread: [`restrict`] changes the calling
//! thread's, and threads started afterwards inherit them. Call it before
//! any other thread starts.

use std::fmt;
use std::io;

/// One capability, by its number (`CAP_NET_RAW` is 13).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cap(u8);

/// The names of capabilities 0-40, without `CAP_`, lower case.
const NAMES: [&str; 41] = [
    "chown",
    "dac_override",
    "dac_read_search",
    "fowner",
    "fsetid",
    "kill",
    "setgid",
    "setuid",
    "setpcap",
    "linux_immutable",
    "net_bind_service",
    "net_broadcast",
    "net_admin",
    "net_raw",
    "ipc_lock",
    "ipc_owner",
    "sys_module",
    "sys_rawio",
    "sys_chroot",
    "sys_ptrace",
    "sys_pacct",
    "sys_admin",
    "sys_boot",
    "sys_nice",
    "sys_resource",
    "sys_time",
    "sys_tty_config",
    "mknod",
    "lease",
    "audit_write",
    "audit_control",
    "setfcap",
    "mac_override",
    "mac_admin",
    "syslog",
    "wake_alarm",
    "block_suspend",
    "audit_read",
    "perfmon",
    "bpf",
    "checkpoint_restore",
];

impl Cap {
    /// `CAP_CHOWN`.
    pub const CHOWN: Cap = Cap(0);
    /// `CAP_DAC_OVERRIDE`.
    pub const DAC_OVERRIDE: Cap = Cap(1);
    /// `CAP_FOWNER`.
    pub const FOWNER: Cap = Cap(3);
    /// `CAP_SETUID`.
    pub const SETUID: Cap = Cap(7);
    /// `CAP_SETPCAP`.
    pub const SETPCAP: Cap = Cap(8);
    /// `CAP_NET_ADMIN`.
    pub const NET_ADMIN: Cap = Cap(12);
    /// `CAP_NET_RAW`.
    pub const NET_RAW: Cap = Cap(13);
    /// `CAP_IPC_LOCK`.
    pub const IPC_LOCK: Cap = Cap(14);
    /// `CAP_SYS_MODULE`.
    pub const SYS_MODULE: Cap = Cap(16);
    /// `CAP_SYS_PTRACE`.
    pub const SYS_PTRACE: Cap = Cap(19);
    /// `CAP_SYS_ADMIN`.
    pub const SYS_ADMIN: Cap = Cap(21);
    /// `CAP_SYS_NICE`.
    pub const SYS_NICE: Cap = Cap(23);
    /// `CAP_BPF`.
    pub const BPF: Cap = Cap(39);

    /// The capability numbered `n` (0-63).
    pub fn from_number(n: u8) -> Option<Cap> {
        (n < 64).then_some(Cap(n))
    }

    /// Its number.
    pub fn number(self) -> u8 {
        self.0
    }

    /// `net_raw`, `CAP_NET_RAW` or `cap_net_raw` (any case) -> the
    /// capability.
    pub fn parse(s: &str) -> Option<Cap> {
        let l = s.to_ascii_lowercase();
        let l = l.strip_prefix("cap_").unwrap_or(&l);
        NAMES
            .iter()
            .position(|n| *n == l)
            .and_then(|i| u8::try_from(i).ok())
            .map(Cap)
    }
}

impl fmt::Display for Cap {
    /// `CAP_NET_RAW` (a number unknown to this table: `CAP_41`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match NAMES.get(usize::from(self.0)) {
            Some(n) => write!(f, "CAP_{}", n.to_ascii_uppercase()),
            None => write!(f, "CAP_{}", self.0),
        }
    }
}

/// A set of capabilities (the kernel's 64-bit mask, as in
/// `/proc/PID/status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CapSet(pub u64);

impl CapSet {
    /// No capability.
    pub const EMPTY: CapSet = CapSet(0);

    /// The set of `caps`.
    pub fn of(caps: &[Cap]) -> CapSet {
        CapSet(caps.iter().fold(0, |m, c| m | 1u64 << c.0))
    }

    /// Whether `c` is in the set.
    pub fn contains(self, c: Cap) -> bool {
        self.0 & (1u64 << c.0) != 0
    }

    /// Whether every capability of `other` is in the set.
    pub fn contains_all(self, other: CapSet) -> bool {
        self.0 & other.0 == other.0
    }

    /// Both sets' capabilities.
    #[must_use]
    pub fn union(self, other: CapSet) -> CapSet {
        CapSet(self.0 | other.0)
    }

    /// The capabilities in both.
    #[must_use]
    pub fn intersection(self, other: CapSet) -> CapSet {
        CapSet(self.0 & other.0)
    }

    /// The capabilities of `self` not in `other`.
    #[must_use]
    pub fn minus(self, other: CapSet) -> CapSet {
        CapSet(self.0 & !other.0)
    }

    /// Whether the set is empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Its capabilities, lowest number first.
    pub fn iter(self) -> impl Iterator<Item = Cap> {
        (0u8..64)
            .filter(move |&n| self.0 & (1u64 << n) != 0)
            .map(Cap)
    }
}

impl fmt::Display for CapSet {
    /// `CAP_NET_ADMIN,CAP_NET_RAW`, or `none`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("none");
        }
        for (i, c) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{c}")?;
        }
        Ok(())
    }
}

/// The five capability sets of the calling thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Caps {
    /// What the thread uses now.
    pub effective: CapSet,
    /// What it may make effective.
    pub permitted: CapSet,
    /// What survives an `execve` (with file capabilities).
    pub inheritable: CapSet,
    /// What survives an `execve` of an ordinary file.
    pub ambient: CapSet,
    /// What the thread and its children can ever gain.
    pub bounding: CapSet,
}

impl fmt::Display for Caps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "effective {} permitted {} inheritable {} ambient {} bounding {:#018x}",
            self.effective, self.permitted, self.inheritable, self.ambient, self.bounding.0
        )
    }
}

/// `_LINUX_CAPABILITY_VERSION_3`: two 32-bit words per set.
const VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct Header {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Data {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// The highest capability number the kernel knows
/// (`/proc/sys/kernel/cap_last_cap`; 40 if it cannot be read).
pub fn last_cap() -> u8 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse::<u8>().ok())
        .filter(|&n| n < 64)
        .unwrap_or(40)
}

fn prctl(op: libc::c_int, a: libc::c_ulong, b: libc::c_ulong) -> io::Result<libc::c_int> {
    // SAFETY: the operations used here (PR_CAPBSET_READ/DROP, PR_CAP_AMBIENT,
    // PR_SET_NO_NEW_PRIVS) take integer arguments only; unused ones are 0.
    super::check(unsafe { libc::prctl(op, a, b, 0 as libc::c_ulong, 0 as libc::c_ulong) })
}

fn get_eff_prm_inh() -> io::Result<(CapSet, CapSet, CapSet)> {
    let mut h = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut d = [Data::default(); 2];
    // SAFETY: `h` is a version-3 header and `d` the two data words version 3
    // writes; both outlive the call.
    let r = unsafe { libc::syscall(libc::SYS_capget, &raw mut h, d.as_mut_ptr()) };
    super::check(i32::try_from(r).unwrap_or(-1))?;
    let join = |lo: u32, hi: u32| CapSet(u64::from(lo) | u64::from(hi) << 32);
    Ok((
        join(d[0].effective, d[1].effective),
        join(d[0].permitted, d[1].permitted),
        join(d[0].inheritable, d[1].inheritable),
    ))
}

fn set_eff_prm_inh(eff: CapSet, prm: CapSet, inh: CapSet) -> io::Result<()> {
    let mut h = Header {
        version: VERSION_3,
        pid: 0,
    };
    let split = |s: CapSet| ((s.0 & 0xffff_ffff) as u32, (s.0 >> 32) as u32);
    let (e0, e1) = split(eff);
    let (p0, p1) = split(prm);
    let (i0, i1) = split(inh);
    let d = [
        Data {
            effective: e0,
            permitted: p0,
            inheritable: i0,
        },
        Data {
            effective: e1,
            permitted: p1,
            inheritable: i1,
        },
    ];
    // SAFETY: `h` is a version-3 header for the calling thread (pid 0) and
    // `d` the two data words version 3 reads; both outlive the call.
    let r = unsafe { libc::syscall(libc::SYS_capset, &raw mut h, d.as_ptr()) };
    super::check(i32::try_from(r).unwrap_or(-1)).map(drop)
}

/// The calling thread's capability sets.
///
/// # Errors
/// `capget` or `prctl` failed.
pub fn current() -> io::Result<Caps> {
    let (effective, permitted, inheritable) = get_eff_prm_inh()?;
    let mut ambient = CapSet::EMPTY;
    let mut bounding = CapSet::EMPTY;
    for n in 0..=last_cap() {
        let c = Cap(n);
        if prctl(libc::PR_CAPBSET_READ, n.into(), 0)? == 1 {
            bounding = bounding.union(CapSet::of(&[c]));
        }
        if prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_IS_SET as libc::c_ulong,
            n.into(),
        )? == 1
        {
            ambient = ambient.union(CapSet::of(&[c]));
        }
    }
    Ok(Caps {
        effective,
        permitted,
        inheritable,
        ambient,
        bounding,
    })
}

/// Keeps only `keep` in the calling thread's five sets and sets
/// no-new-privs; returns the sets after. What `keep` names but the thread
/// does not hold is not gained. The bounding set can only shrink while
/// `CAP_SETPCAP` is effective: without it the bounding set stays as it is
/// (no-new-privs and the empty ambient and inheritable remainder make it
/// inert: nothing the process runs can gain what it lacks).
///
/// # Errors
/// A `prctl` or `capset` failed; the sets may then be partly reduced.
pub fn restrict(keep: CapSet) -> io::Result<Caps> {
    let before = current()?;
    for c in before.ambient.minus(keep).iter() {
        prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_LOWER as libc::c_ulong,
            c.0.into(),
        )?;
    }
    if before.effective.contains(Cap::SETPCAP) {
        for c in before.bounding.minus(keep).iter() {
            prctl(libc::PR_CAPBSET_DROP, c.0.into(), 0)?;
        }
    }
    let prm = before.permitted.intersection(keep);
    set_eff_prm_inh(prm, prm, before.inheritable.intersection(keep))?;
    prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0)?;
    current()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_numbers() {
        assert_eq!(Cap::parse("net_raw"), Some(Cap::NET_RAW));
        assert_eq!(Cap::parse("CAP_NET_ADMIN"), Some(Cap::NET_ADMIN));
        assert_eq!(Cap::parse("cap_bpf"), Some(Cap::BPF));
        assert_eq!(Cap::parse("net_rawx"), None);
        assert_eq!(Cap::SYS_ADMIN.to_string(), "CAP_SYS_ADMIN");
        assert_eq!(Cap(41).to_string(), "CAP_41");
        assert_eq!(Cap::from_number(64), None);
        for (i, n) in NAMES.iter().enumerate() {
            assert_eq!(Cap::parse(n).map(Cap::number), u8::try_from(i).ok());
        }
    }

    #[test]
    fn set_operations_and_display() {
        let s = CapSet::of(&[Cap::NET_RAW, Cap::NET_ADMIN]);
        assert_eq!(s.0, 0x3000);
        assert!(s.contains(Cap::NET_RAW) && !s.contains(Cap::BPF));
        assert_eq!(s.to_string(), "CAP_NET_ADMIN,CAP_NET_RAW");
        assert_eq!(CapSet::EMPTY.to_string(), "none");
        let t = CapSet::of(&[Cap::NET_RAW, Cap::BPF]);
        assert_eq!(s.intersection(t), CapSet::of(&[Cap::NET_RAW]));
        assert_eq!(s.minus(t), CapSet::of(&[Cap::NET_ADMIN]));
        assert!(s.union(t).contains_all(s) && !s.contains_all(t));
        assert_eq!(s.union(t).iter().count(), 3);
    }

    #[test]
    fn current_matches_proc_status() {
        let c = current().unwrap();
        let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        let field = |k: &str| {
            let l = status.lines().find(|l| l.starts_with(k)).unwrap();
            u64::from_str_radix(l[k.len()..].trim(), 16).unwrap()
        };
        assert_eq!(c.effective.0, field("CapEff:"));
        assert_eq!(c.permitted.0, field("CapPrm:"));
        assert_eq!(c.inheritable.0, field("CapInh:"));
        assert_eq!(c.ambient.0, field("CapAmb:"));
        assert_eq!(c.bounding.0, field("CapBnd:"));
    }

    #[test]
    fn restrict_on_a_thread_of_its_own() {
        // Capabilities are per thread: this one's changes stay here.
        let before = current().unwrap();
        let after = std::thread::spawn(move || {
            let keep = CapSet::of(&[Cap::NET_RAW]);
            let got = restrict(keep).unwrap();
            let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
            (got, status.contains("NoNewPrivs:\t1"))
        })
        .join()
        .unwrap();
        let (got, nnp) = after;
        assert!(nnp);
        let want = before.permitted.intersection(CapSet::of(&[Cap::NET_RAW]));
        assert_eq!(got.effective, want);
        assert_eq!(got.permitted, want);
        assert!(got.ambient.is_empty());
        if before.effective.contains(Cap::SETPCAP) {
            assert_eq!(
                got.bounding,
                before.bounding.intersection(CapSet::of(&[Cap::NET_RAW]))
            );
        }
        assert_eq!(
            current().unwrap(),
            before,
            "the test's own thread kept its sets"
        );
    }
}
