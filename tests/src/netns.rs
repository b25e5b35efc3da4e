// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Throwaway network namespaces and veth pairs for end-to-end tests.
//!
//! A [`Netns`] is a named namespace (`ip netns add`), deleted when dropped,
//! with what tests run in it: commands ([`Netns::exec`]), background
//! processes that die with the handle ([`NsProcess`]), interface counters
//! ([`Netns::link_stats`]) and the kernel's SNMP counters
//! ([`Netns::snmp`]). A [`VethPair`] is a veth pair with one end in the
//! caller's namespace (where a backend opens its uplink) and the other in a
//! fresh [`Netns`] (the peer's kernel stack), both up.
//!
//! # Names and clean-up
//!
//! Names carry the test process's pid and a sequence number
//! (`vhunet-<pid>-<n>` for namespaces, `vn<pid><n>h`/`p` for interfaces,
//! within the 15-byte limit), so concurrent test processes never collide.
//! Everything is removed on drop, including during a panic's unwinding; what
//! a killed test process left behind is removed by the next
//! [`Netns::new`] ([`sweep_stale`]: namespaces and interfaces whose pid is
//! no longer running).
//!
//! # Failing, never skipping
//!
//! Every command that fails panics with its output: a test that cannot set
//! up its peer fails (root is needed).
//!
//! ```no_run
//! use vhu_tests::netns::VethPair;
//!
//! let v = VethPair::new();
//! v.ns().exec(&["ip", "addr", "add", "10.0.0.1/24", "dev", v.peer()]);
//! let before = v.ns().link_stats(v.peer()).rx_packets;
//! // ... send frames through v.host() ...
//! assert!(v.ns().link_stats(v.peer()).rx_packets > before);
//! ```

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::peers;

/// Prefix of the namespaces made here (also what [`sweep_stale`] matches).
pub const NETNS_PREFIX: &str = "vhunet-";

/// Prefix of the interfaces made here.
pub const IFACE_PREFIX: &str = "vn";

/// `ETHTOOL_SRXCSUM`: RX checksumming. Off on a veth end, the kernel
/// verifies the checksums of what it receives there instead of trusting
/// the sender (veth marks complete frames `CHECKSUM_UNNECESSARY` otherwise).
pub const ETHTOOL_SRXCSUM: u32 = 0x15;
/// `ETHTOOL_STXCSUM`: TX checksumming (switching it off also switches off
/// TSO and the other features that depend on it).
pub const ETHTOOL_STXCSUM: u32 = 0x17;
/// `ETHTOOL_STSO`: TCP segmentation offload.
pub const ETHTOOL_STSO: u32 = 0x1f;
/// `ETHTOOL_SGSO`: generic segmentation offload.
pub const ETHTOOL_SGSO: u32 = 0x24;
/// `ETHTOOL_SGRO`: generic receive offload.
pub const ETHTOOL_SGRO: u32 = 0x2c;

static SEQ: AtomicU32 = AtomicU32::new(0);

fn next_seq() -> u32 {
    SEQ.fetch_add(1, Ordering::Relaxed)
}

/// Runs a command to completion; panics with its output unless it exits 0.
/// Returns stdout.
///
/// # Panics
///
/// If the command cannot be run or fails.
pub fn run(args: &[&str]) -> String {
    let out = try_run(args);
    if !out.status.success() {
        panic!(
            "`{}` failed ({}):\n{}{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs a command to completion and returns its output, whatever its status.
///
/// # Panics
///
/// If the command cannot be started.
pub fn try_run(args: &[&str]) -> Output {
    let (prog, rest) = args.split_first().expect("a command");
    Command::new(prog)
        .args(rest)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run `{}`: {e}", args.join(" ")))
}

fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Removes namespaces and interfaces made by test processes that are gone
/// (killed before their handles were dropped).
pub fn sweep_stale() {
    let list = try_run(&["ip", "netns", "list"]);
    for line in String::from_utf8_lossy(&list.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or_default();
        let Some(rest) = name.strip_prefix(NETNS_PREFIX) else {
            continue;
        };
        let pid = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
        if pid.is_some_and(|p| !pid_alive(p)) {
            let _ = try_run(&["ip", "netns", "del", name]);
        }
    }
    // Host-side veth ends: `vn<pid>x<n>h`.
    let links = try_run(&["ip", "-o", "link", "show"]);
    for line in String::from_utf8_lossy(&links.stdout).lines() {
        let Some(name) = line.split(": ").nth(1) else {
            continue;
        };
        let name = name.split('@').next().unwrap_or_default();
        let Some(rest) = name.strip_prefix(IFACE_PREFIX) else {
            continue;
        };
        let Some((pid, _)) = rest.split_once('x') else {
            continue;
        };
        if pid.parse::<u32>().is_ok_and(|p| !pid_alive(p)) {
            let _ = try_run(&["ip", "link", "del", name]);
        }
    }
}

/// An interface name unique to this process and call:
/// `vn<pid mod 10^6>x<n><suffix>` (at most 15 bytes).
pub fn unique_ifname(suffix: &str) -> String {
    let name = format!(
        "{IFACE_PREFIX}{}x{}{suffix}",
        std::process::id() % 1_000_000,
        next_seq()
    );
    assert!(name.len() <= 15, "interface name {name} too long");
    name
}

// ===== Netns =====

/// A network namespace, deleted (with every interface in it) when dropped.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// Creates `vhunet-<pid>-<n>` with its loopback up and IPv6 off (no
    /// router solicitations or DAD frames to confuse frame counts).
    ///
    /// # Panics
    ///
    /// If `ip netns add` fails (not root?).
    pub fn new() -> Self {
        Self::with_ipv6(false)
    }

    /// [`Netns::new`], with IPv6 left on when `ipv6` is set.
    ///
    /// # Panics
    ///
    /// If `ip netns add` fails.
    pub fn with_ipv6(ipv6: bool) -> Self {
        sweep_stale();
        let name = format!("{NETNS_PREFIX}{}-{}", std::process::id(), next_seq());
        run(&["ip", "netns", "add", &name]);
        let ns = Self { name };
        ns.exec(&["ip", "link", "set", "lo", "up"]);
        if !ipv6 {
            ns.exec(&["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"]);
            ns.exec(&["sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"]);
        }
        ns
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A command that runs `program` in the namespace
    /// (`ip netns exec NAME program`).
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]);
        c
    }

    /// Runs `args` in the namespace; panics unless it exits 0. Returns
    /// stdout.
    ///
    /// # Panics
    ///
    /// If the command fails.
    pub fn exec(&self, args: &[&str]) -> String {
        let mut full = vec!["ip", "netns", "exec", &self.name];
        full.extend_from_slice(args);
        run(&full)
    }

    /// Runs `args` in the namespace and returns the output, whatever the
    /// status.
    pub fn try_exec(&self, args: &[&str]) -> Output {
        let mut full = vec!["ip", "netns", "exec", &self.name];
        full.extend_from_slice(args);
        try_run(&full)
    }

    /// Starts `args` in the namespace in the background, stdout and stderr
    /// captured; the process is killed when the handle is dropped.
    ///
    /// # Panics
    ///
    /// If it cannot be started.
    pub fn spawn(&self, args: &[&str]) -> NsProcess {
        let (prog, rest) = args.split_first().expect("a command");
        let mut cmd = self.command(prog);
        cmd.args(rest);
        NsProcess::spawn(cmd, args.join(" "))
    }

    /// Runs a Python script (`python3 -c SCRIPT ARGS...`) in the namespace
    /// in the background.
    ///
    /// # Panics
    ///
    /// If it cannot be started.
    pub fn spawn_python(&self, script: &str, args: &[&str]) -> NsProcess {
        let mut cmd = self.command("python3");
        cmd.arg("-c").arg(script).args(args);
        NsProcess::spawn(cmd, format!("python3 -c <script> {}", args.join(" ")))
    }

    /// Runs `f` on a thread that has entered the namespace (`setns`), and
    /// returns what it returns. Sockets opened there stay bound to the
    /// namespace after the thread ends.
    ///
    /// # Panics
    ///
    /// If the namespace cannot be entered, or `f` panics.
    pub fn in_ns<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let ns = File::open(format!("/run/netns/{}", self.name))
            .unwrap_or_else(|e| panic!("cannot open netns {}: {e}", self.name));
        std::thread::scope(|s| {
            s.spawn(|| {
                // This thread ends right after `f`, so the namespace it
                // enters is never seen by other work.
                crate::process::enter_netns(&ns).unwrap_or_else(|e| panic!("setns: {e}"));
                f()
            })
            .join()
            .expect("netns thread panicked")
        })
    }

    /// The counters of interface `ifname` in the namespace.
    ///
    /// # Panics
    ///
    /// If the interface does not exist there.
    pub fn link_stats(&self, ifname: &str) -> LinkStats {
        let out = run(&[
            "ip", "-n", &self.name, "-s", "-s", "link", "show", "dev", ifname,
        ]);
        LinkStats::parse(&out).unwrap_or_else(|| panic!("cannot parse `ip -s link`:\n{out}"))
    }

    /// The MAC address of `ifname` in the namespace.
    ///
    /// # Panics
    ///
    /// If the interface does not exist there.
    pub fn mac(&self, ifname: &str) -> String {
        let out = run(&["ip", "-n", &self.name, "link", "show", "dev", ifname]);
        parse_mac(&out).unwrap_or_else(|| panic!("no MAC address in:\n{out}"))
    }

    /// The namespace's `/proc/net/snmp` and `/proc/net/netstat` counters,
    /// keyed `Proto.Name` (e.g. `Udp.InDatagrams`, `Tcp.RetransSegs`).
    ///
    /// # Panics
    ///
    /// If they cannot be read.
    pub fn snmp(&self) -> BTreeMap<String, u64> {
        let out = self.exec(&["cat", "/proc/net/snmp", "/proc/net/netstat"]);
        parse_snmp(&out)
    }

    /// Sets ethtool features of `ifname` in the namespace: each
    /// `(ETHTOOL_S*, value)` pair is one set command.
    ///
    /// # Panics
    ///
    /// If the ioctl fails.
    pub fn ethtool(&self, ifname: &str, cmds: &[(u32, u32)]) {
        let args = ethtool_args(ifname, cmds);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        self.exec(&refs);
    }

    /// Creates a veth pair straight between two namespaces, `ifname` here
    /// and `peer_ifname` in `peer` (a cable between two nodes), and sets
    /// both ends up. The names need only be unique in their namespaces;
    /// the pair goes with either namespace.
    ///
    /// # Panics
    ///
    /// If a command fails.
    pub fn veth_to(&self, ifname: &str, peer: &Netns, peer_ifname: &str) {
        run(&[
            "ip",
            "link",
            "add",
            ifname,
            "netns",
            &self.name,
            "type",
            "veth",
            "peer",
            "name",
            peer_ifname,
            "netns",
            &peer.name,
        ]);
        self.exec(&["ip", "link", "set", ifname, "up"]);
        peer.exec(&["ip", "link", "set", peer_ifname, "up"]);
    }

    /// Waits until interface `ifname` in the namespace reports `state UP`
    /// (or `UNKNOWN`, what a TAP without carrier logic reports).
    ///
    /// # Panics
    ///
    /// On timeout.
    pub fn wait_link_up(&self, ifname: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let out = try_run(&["ip", "-n", &self.name, "link", "show", "dev", ifname]);
            let text = String::from_utf8_lossy(&out.stdout);
            if text.contains("state UP") || text.contains("state UNKNOWN") {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{ifname} in {} not up within {timeout:?}:\n{text}",
                self.name
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Default for Netns {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Processes still in the namespace keep it alive but lose their
        // name; NsProcess handles kill theirs first (they are dropped
        // before the namespace when declared after it).
        let _ = try_run(&["ip", "netns", "del", &self.name]);
    }
}

fn ethtool_args(ifname: &str, cmds: &[(u32, u32)]) -> Vec<String> {
    let mut args = vec![
        "python3".to_owned(),
        "-c".to_owned(),
        peers::ETHTOOL.to_owned(),
        ifname.to_owned(),
    ];
    args.extend(cmds.iter().map(|(c, v)| format!("{c:#x}={v}")));
    args
}

/// [`Netns::ethtool`] for an interface in the caller's namespace.
///
/// # Panics
///
/// If the ioctl fails.
pub fn ethtool(ifname: &str, cmds: &[(u32, u32)]) {
    let args = ethtool_args(ifname, cmds);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    run(&refs);
}

/// The six octets of a MAC address written `aa:bb:cc:dd:ee:ff`.
///
/// # Panics
///
/// If `mac` is not six hexadecimal octets.
pub fn mac_octets(mac: &str) -> [u8; 6] {
    let mut m = [0u8; 6];
    let mut parts = mac.trim().split(':');
    for b in &mut m {
        let p = parts.next().unwrap_or_else(|| panic!("short MAC {mac:?}"));
        *b = u8::from_str_radix(p, 16).unwrap_or_else(|e| panic!("MAC {mac:?}: {e}"));
    }
    assert!(parts.next().is_none(), "long MAC {mac:?}");
    m
}

/// Writes `/proc/sys/net/ipv6/conf/IFNAME/disable_ipv6` (of the calling
/// thread's namespace).
fn write_disable_ipv6(ifname: &str, on: bool) -> io::Result<()> {
    let v = if on { "0" } else { "1" };
    std::fs::write(format!("/proc/sys/net/ipv6/conf/{ifname}/disable_ipv6"), v)
}

fn parse_mac(ip_link: &str) -> Option<String> {
    ip_link
        .split_whitespace()
        .skip_while(|w| *w != "link/ether")
        .nth(1)
        .map(str::to_owned)
}

/// Parses the `Proto: Name Name...` / `Proto: value value...` line pairs
/// of `/proc/net/snmp` and `/proc/net/netstat`.
pub fn parse_snmp(text: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let lines: Vec<&str> = text.lines().collect();
    for pair in lines.windows(2) {
        let (Some((p1, names)), Some((p2, values))) =
            (pair[0].split_once(':'), pair[1].split_once(':'))
        else {
            continue;
        };
        if p1 != p2
            || names
                .split_whitespace()
                .next()
                .is_some_and(|w| w.parse::<i64>().is_ok())
        {
            continue;
        }
        for (n, v) in names.split_whitespace().zip(values.split_whitespace()) {
            if let Ok(v) = v.parse::<i64>() {
                out.insert(format!("{p1}.{n}"), v.max(0) as u64);
            }
        }
    }
    out
}

// ===== LinkStats =====

/// An interface's counters, from `ip -s -s link show`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Frames received.
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Frames dropped on receive.
    pub rx_dropped: u64,
    /// Frames transmitted.
    pub tx_packets: u64,
    /// Bytes transmitted.
    pub tx_bytes: u64,
    /// Frames dropped on transmit.
    pub tx_dropped: u64,
}

impl LinkStats {
    /// Parses `ip -s [-s] link show dev X` output.
    pub fn parse(text: &str) -> Option<Self> {
        // "RX:  bytes packets errors dropped ..." then a line of numbers;
        // the same for "TX:".
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        let mut s = LinkStats::default();
        let mut found = 0;
        for (i, l) in lines.iter().enumerate() {
            let rx = l.starts_with("RX:");
            let tx = l.starts_with("TX:");
            if !rx && !tx {
                continue;
            }
            let names: Vec<&str> = l[3..].split_whitespace().collect();
            let values: Vec<u64> = lines
                .get(i + 1)?
                .split_whitespace()
                .filter_map(|v| v.parse().ok())
                .collect();
            let get = |n: &str| {
                names
                    .iter()
                    .position(|x| *x == n)
                    .and_then(|p| values.get(p).copied())
            };
            let (bytes, packets, dropped) = (get("bytes")?, get("packets")?, get("dropped")?);
            if rx && found & 1 == 0 {
                (s.rx_bytes, s.rx_packets, s.rx_dropped) = (bytes, packets, dropped);
                found |= 1;
            } else if tx && found & 2 == 0 {
                (s.tx_bytes, s.tx_packets, s.tx_dropped) = (bytes, packets, dropped);
                found |= 2;
            }
        }
        (found == 3).then_some(s)
    }
}

// ===== VethPair =====

/// A veth pair: [`VethPair::host`] in the caller's namespace, up, without
/// addresses; [`VethPair::peer`] in a fresh namespace, up. Dropping it
/// deletes both ends and the namespace.
#[derive(Debug)]
pub struct VethPair {
    host: String,
    peer: String,
    ns: Netns,
}

impl VethPair {
    /// Creates the namespace and the pair (see the type doc).
    ///
    /// # Panics
    ///
    /// If a command fails.
    pub fn new() -> Self {
        Self::in_netns(Netns::new())
    }

    /// Creates a pair whose peer end goes into `ns`.
    ///
    /// # Panics
    ///
    /// If a command fails.
    pub fn in_netns(ns: Netns) -> Self {
        let base = unique_ifname("");
        let (host, peer) = (format!("{base}h"), format!("{base}p"));
        run(&[
            "ip", "link", "add", &host, "type", "veth", "peer", "name", &peer, "netns", &ns.name,
        ]);
        Self::up(host, peer, ns)
    }

    /// Creates the namespace and a pair with `queues` RX and TX queues on
    /// each end.
    ///
    /// # Panics
    ///
    /// If a command fails.
    pub fn with_queues(queues: u32) -> Self {
        let ns = Netns::new();
        let base = unique_ifname("");
        let (host, peer) = (format!("{base}h"), format!("{base}p"));
        let q = queues.to_string();
        run(&[
            "ip",
            "link",
            "add",
            &host,
            "numtxqueues",
            &q,
            "numrxqueues",
            &q,
            "type",
            "veth",
            "peer",
            "name",
            &peer,
            "numtxqueues",
            &q,
            "numrxqueues",
            &q,
            "netns",
            &ns.name,
        ]);
        Self::up(host, peer, ns)
    }

    /// Takes both ends of a new pair (the drop guard from here on) and sets
    /// them up.
    fn up(host: String, peer: String, ns: Netns) -> Self {
        let v = Self { host, peer, ns };
        run(&["ip", "link", "set", &v.host, "up"]);
        v.ns.exec(&["ip", "link", "set", &v.peer, "up"]);
        v
    }

    /// Deletes the pair and, `gap` later, creates it again under the same
    /// names, with the same MAC addresses, the peer end in the same namespace, both ends up
    /// and IPv6 off (what an interface deleted and re-created under a
    /// running backend looks like: same name, new index). Addresses on the
    /// peer end are not restored.
    ///
    /// # Panics
    ///
    /// If a command fails.
    pub fn recreate(&self, gap: std::time::Duration) {
        let (host_mac, peer_mac) = (self.host_mac(), self.peer_mac());
        run(&["ip", "link", "del", &self.host]);
        std::thread::sleep(gap);
        run(&[
            "ip",
            "link",
            "add",
            &self.host,
            "address",
            &host_mac,
            "type",
            "veth",
            "peer",
            "name",
            &self.peer,
            "address",
            &peer_mac,
            "netns",
            &self.ns.name,
        ]);
        for (on_host, r) in [
            (true, write_disable_ipv6(&self.host, false)),
            (
                false,
                self.ns.in_ns(|| write_disable_ipv6(&self.peer, false)),
            ),
        ] {
            r.unwrap_or_else(|e| panic!("IPv6 off (host end: {on_host}): {e}"));
        }
        run(&["ip", "link", "set", &self.host, "up"]);
        self.ns.exec(&["ip", "link", "set", &self.peer, "up"]);
    }

    /// The end in the caller's namespace (the backend's uplink).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The end in the namespace (the peer's stack).
    pub fn peer(&self) -> &str {
        &self.peer
    }

    /// The peer's namespace.
    pub fn ns(&self) -> &Netns {
        &self.ns
    }

    /// The peer end's MAC address.
    pub fn peer_mac(&self) -> String {
        self.ns.mac(&self.peer)
    }

    /// The host end's MAC address.
    pub fn host_mac(&self) -> String {
        let out = run(&["ip", "link", "show", "dev", &self.host]);
        parse_mac(&out).unwrap_or_else(|| panic!("no MAC address in:\n{out}"))
    }

    /// Adds `cidr` (e.g. `10.0.0.1/24`) to the peer end.
    ///
    /// # Panics
    ///
    /// If `ip addr add` fails.
    pub fn set_peer_addr(&self, cidr: &str) {
        self.ns
            .exec(&["ip", "addr", "add", cidr, "dev", &self.peer]);
    }

    /// The host end's counters.
    pub fn host_stats(&self) -> LinkStats {
        let out = run(&["ip", "-s", "-s", "link", "show", "dev", &self.host]);
        LinkStats::parse(&out).unwrap_or_else(|| panic!("cannot parse `ip -s link`:\n{out}"))
    }

    /// The peer end's counters.
    pub fn peer_stats(&self) -> LinkStats {
        self.ns.link_stats(&self.peer)
    }

    /// The host end's `IFF_*` flags.
    ///
    /// # Panics
    ///
    /// If they cannot be read.
    pub fn host_flags(&self) -> u32 {
        let s = std::fs::read_to_string(format!("/sys/class/net/{}/flags", self.host))
            .expect("host end flags");
        u32::from_str_radix(s.trim().trim_start_matches("0x"), 16).expect("flags")
    }

    /// Switches IPv6 on or off on the host end.
    ///
    /// # Errors
    ///
    /// If the sysctl cannot be written.
    pub fn set_host_ipv6(&self, on: bool) -> io::Result<()> {
        write_disable_ipv6(&self.host, on)
    }

    /// Switches IPv6 on or off on the peer end.
    ///
    /// # Errors
    ///
    /// If the sysctl cannot be written.
    pub fn set_peer_ipv6(&self, on: bool) -> io::Result<()> {
        self.ns.in_ns(|| write_disable_ipv6(&self.peer, on))
    }
}

impl Default for VethPair {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for VethPair {
    fn drop(&mut self) {
        // Deleting one end deletes both; the namespace goes after (field
        // order).
        let _ = try_run(&["ip", "link", "del", &self.host]);
    }
}

// ===== NsProcess =====

/// A background process (usually in a namespace) whose stdout and stderr
/// are collected; killed (SIGKILL) when dropped, and when the thread that
/// started it exits (`PR_SET_PDEATHSIG`).
#[derive(Debug)]
pub struct NsProcess {
    child: Child,
    what: String,
    stdout: Arc<Mutex<Vec<u8>>>,
    stderr: Arc<Mutex<Vec<u8>>>,
    readers: Vec<JoinHandle<()>>,
}

fn collect(mut r: impl Read + Send + 'static, buf: Arc<Mutex<Vec<u8>>>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut chunk = [0u8; 8192];
        loop {
            match r.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => buf
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
    })
}

impl NsProcess {
    /// Spawns `cmd` (stdin null, stdout and stderr piped); `what` names it
    /// in messages.
    ///
    /// # Panics
    ///
    /// If it cannot be started.
    pub fn spawn(mut cmd: Command, what: String) -> Self {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // A test process killed without unwinding leaves no peer behind
        // (`ip netns exec` keeps this across its exec). The signal follows
        // the thread that spawned the child.
        crate::process::kill_with_parent(&mut cmd);
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let readers = vec![
            collect(child.stdout.take().expect("piped"), Arc::clone(&stdout)),
            collect(child.stderr.take().expect("piped"), Arc::clone(&stderr)),
        ];
        Self {
            child,
            what,
            stdout,
            stderr,
            readers,
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What it printed on stdout so far.
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.stdout.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }

    /// What it printed on stderr so far.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }

    /// Both outputs, for messages.
    pub fn describe(&self) -> String {
        format!(
            "----- {} stdout -----\n{}\n----- stderr -----\n{}\n----- end -----",
            self.what,
            self.stdout(),
            self.stderr()
        )
    }

    /// Whether it still runs.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits until stdout contains `needle`.
    ///
    /// # Panics
    ///
    /// On timeout or if the process exits first, with its output.
    pub fn wait_for_stdout(&mut self, needle: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            if self.stdout().contains(needle) {
                return;
            }
            if !self.is_running() {
                // Let the readers catch the last bytes.
                std::thread::sleep(Duration::from_millis(50));
                if self.stdout().contains(needle) {
                    return;
                }
                panic!(
                    "{} exited before printing {needle:?}\n{}",
                    self.what,
                    self.describe()
                );
            }
            assert!(
                Instant::now() < deadline,
                "{} did not print {needle:?} within {timeout:?}\n{}",
                self.what,
                self.describe()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends signal `sig` (a name such as `TERM` or `INT`) to the process.
    ///
    /// # Panics
    ///
    /// If `kill` fails (the process was reaped already).
    pub fn signal(&self, sig: &str) {
        run(&["kill", &format!("-{sig}"), &self.child.id().to_string()]);
    }

    /// Waits for the process to exit, at most `timeout` (then kills it and
    /// panics). Returns its exit status, once the output is collected.
    ///
    /// # Panics
    ///
    /// On timeout.
    pub fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                for r in self.readers.drain(..) {
                    let _ = r.join();
                }
                return status;
            }
            if Instant::now() >= deadline {
                self.kill();
                panic!(
                    "{} did not exit within {timeout:?}\n{}",
                    self.what,
                    self.describe()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the process (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
    }

    /// `key=value` pairs from the stdout lines that start with `prefix`
    /// (later keys win).
    pub fn results(&self, prefix: &str) -> BTreeMap<String, String> {
        let mut m = BTreeMap::new();
        for line in self.stdout().lines() {
            let Some(rest) = line.strip_prefix(prefix) else {
                continue;
            };
            for tok in rest.split_whitespace() {
                if let Some((k, v)) = tok.split_once('=') {
                    m.insert(k.to_owned(), v.to_owned());
                }
            }
        }
        m
    }
}

impl Drop for NsProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_link_stats() {
        let text = "5: vn1x0p@if6: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noqueue state UP mode DEFAULT group default qlen 1000
    link/ether 3a:1b:6c:aa:bb:cc brd ff:ff:ff:ff:ff:ff link-netnsid 0
    RX:  bytes packets errors dropped  missed   mcast
          1234      10      0       2       0       0
    RX errors:  length    crc   frame    fifo overrun
                     0      0       0       0       0
    TX:  bytes packets errors dropped carrier collsns
          5678      20      0       1       0       0
    TX errors: aborted   fifo window heartbt transns
                     0      0      0       0       1
";
        let s = LinkStats::parse(text).unwrap();
        assert_eq!(
            s,
            LinkStats {
                rx_packets: 10,
                rx_bytes: 1234,
                rx_dropped: 2,
                tx_packets: 20,
                tx_bytes: 5678,
                tx_dropped: 1,
            }
        );
        assert_eq!(parse_mac(text).as_deref(), Some("3a:1b:6c:aa:bb:cc"));
    }

    #[test]
    fn parses_snmp() {
        let text = "Ip: Forwarding DefaultTTL InReceives\nIp: 2 64 17\n\
                    Udp: InDatagrams NoPorts\nUdp: 5 -1\n";
        let m = parse_snmp(text);
        assert_eq!(m["Ip.InReceives"], 17);
        assert_eq!(m["Udp.InDatagrams"], 5);
        assert_eq!(m["Udp.NoPorts"], 0);
    }

    #[test]
    fn interface_names_fit() {
        let n = unique_ifname("h");
        assert!(n.len() <= 15 && n.starts_with(IFACE_PREFIX) && n.ends_with('h'));
    }
}
