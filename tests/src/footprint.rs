// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! What a process holds, for leak checks: open file descriptors, resident
//! memory and its shared mappings (`/proc/PID/{fd,status,maps}`).
//!
//! Virtual size (`VmSize`) is deliberately not compared: glibc gives a
//! thread that finds the allocator's arenas busy a new 64 MiB arena
//! reservation (up to eight per core), so it grows by 64 MiB steps with
//! contention, not with leaks. What a vhost-user backend can leak in address
//! space is shared mappings: guest memory regions, dirty-log areas, packet
//! rings. Those are counted exactly.

/// A process's footprint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footprint {
    /// Open file descriptors.
    pub fds: usize,
    /// `VmRSS`, KiB.
    pub rss_kb: u64,
    /// Shared mappings (`s` in `/proc/PID/maps`): how many.
    pub shared_maps: usize,
    /// Shared mappings: their total size, KiB.
    pub shared_kb: u64,
}

impl Footprint {
    /// The footprint of process `pid` now.
    ///
    /// # Panics
    ///
    /// If its `/proc` entries cannot be read.
    pub fn of(pid: u32) -> Self {
        let fds = open_fds(pid);
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_else(|e| panic!("/proc/{pid}/status: {e}"));
        let rss_kb = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no VmRSS in /proc/{pid}/status"));
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))
            .unwrap_or_else(|e| panic!("/proc/{pid}/maps: {e}"));
        let (shared_maps, shared_kb) = shared_mappings(&maps);
        Self {
            fds,
            rss_kb,
            shared_maps,
            shared_kb,
        }
    }

    /// Asserts that `self`, read after `what`, holds exactly the fds and
    /// shared mappings of `before` and at most `rss_slack_kb` more resident
    /// memory.
    ///
    /// # Panics
    ///
    /// If it holds more (or fewer fds or mappings).
    pub fn assert_no_growth(&self, before: &Footprint, rss_slack_kb: u64, what: &str) {
        assert_eq!(
            self.fds, before.fds,
            "open fds went from {} to {} over {what}",
            before.fds, self.fds
        );
        assert_eq!(
            (self.shared_maps, self.shared_kb),
            (before.shared_maps, before.shared_kb),
            "shared mappings (count, KiB) changed over {what}"
        );
        assert!(
            self.rss_kb <= before.rss_kb + rss_slack_kb,
            "VmRSS went from {} to {} KiB over {what} (slack {rss_slack_kb})",
            before.rss_kb,
            self.rss_kb
        );
    }
}

/// How many file descriptors process `pid` has open.
///
/// # Panics
///
/// If `/proc/PID/fd` cannot be read.
pub fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/fd: {e}"))
        .count()
}

/// The number and total size (KiB) of the shared mappings in a
/// `/proc/PID/maps` text.
///
/// # Panics
///
/// On a line that is not a mapping.
pub fn shared_mappings(maps: &str) -> (usize, u64) {
    let mut n = 0;
    let mut bytes = 0u64;
    for line in maps.lines() {
        let mut fields = line.split_whitespace();
        let (range, perms) = (fields.next(), fields.next());
        let parsed = range.and_then(|r| r.split_once('-')).and_then(|(a, b)| {
            Some((
                u64::from_str_radix(a, 16).ok()?,
                u64::from_str_radix(b, 16).ok()?,
            ))
        });
        let ((start, end), perms) = match (parsed, perms) {
            (Some(r), Some(p)) if p.len() == 4 => (r, p),
            _ => panic!("not a /proc/PID/maps line: {line:?}"),
        };
        if perms.ends_with('s') {
            n += 1;
            bytes += end - start;
        }
    }
    (n, bytes / 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_only_shared_mappings() {
        let maps = "\
55d0c0000000-55d0c0100000 r-xp 00000000 08:01 123 /usr/bin/vhu-switch
7f0000000000-7f0001000000 rw-s 00000000 00:01 77 /memfd:guest (deleted)
7f0002000000-7f0002004000 rw-s 00000000 00:08 99 socket:[99]
7f0004000000-7f0008000000 ---p 00000000 00:00 0
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]
";
        assert_eq!(shared_mappings(maps), (2, 16 * 1024 + 16));
        assert_eq!(shared_mappings(""), (0, 0));
    }

    #[test]
    #[should_panic(expected = "not a /proc/PID/maps line")]
    fn refuses_garbage() {
        shared_mappings("hello world");
    }

    #[test]
    fn reads_this_process() {
        let me = Footprint::of(std::process::id());
        assert!(me.fds >= 3 && me.rss_kb > 0, "{me:?}");
        me.assert_no_growth(&me, 0, "nothing");
    }
}
