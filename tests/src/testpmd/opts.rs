// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! How a testpmd process is started: its CPUs, memory, file prefix, vdev
//! and forwarding options, as the command line they make.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// Memory for `--no-huge` runs, in MiB (`-m`), as in `ENVIRONMENT.md`.
const NO_HUGE_MEMORY_MB: u32 = 1024;

static PREFIX_SEQ: AtomicU32 = AtomicU32::new(0);

/// A `--file-prefix` unique to this process and call: `vhu<role><pid>x<n>`.
///
/// EAL keeps its runtime files under `/var/run/dpdk/<prefix>` and names
/// hugepage files after the prefix, so two testpmd processes (or a leftover
/// from a crashed run) must never share one.
pub fn unique_prefix(role: &str) -> String {
    format!(
        "vhu{role}{}x{}",
        std::process::id(),
        PREFIX_SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// The testpmd binary: `$VHU_TESTPMD_BIN`, or `dpdk-testpmd` from `PATH`.
/// Whether 2 MiB hugepages are usable: a hugetlbfs is mounted and at least
/// `pages` pages are free.
pub fn hugepages_available(pages: u64) -> bool {
    let free = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("HugePages_Free:"))
                .and_then(|v| v.trim().parse::<u64>().ok())
        })
        .unwrap_or(0);
    free >= pages && !hugetlbfs_mounts().is_empty()
}

/// The mount points of hugetlbfs file systems, from `/proc/mounts`.
pub(crate) fn hugetlbfs_mounts() -> Vec<PathBuf> {
    std::fs::read_to_string("/proc/mounts")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_dev, dir, fstype) = (f.next()?, f.next()?, f.next()?);
            (fstype == "hugetlbfs").then(|| PathBuf::from(dir))
        })
        .collect()
}

/// CPU placement of a testpmd process: `-l <main>,<fwd> --main-lcore <main>`,
/// with one forwarding core (`--nb-cores=1`) on `fwd`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lcores {
    /// The main lcore (command line, control); idle in steady state.
    pub main: u32,
    /// The forwarding lcore, busy-polling.
    pub fwd: u32,
}

impl Lcores {
    /// The frontend's placement: forwarding on CPU 1.
    pub const FRONTEND: Self = Self { main: 0, fwd: 1 };
    /// The DPDK backend's placement: forwarding on CPU 0.
    pub const BACKEND: Self = Self { main: 1, fwd: 0 };

    fn eal_args(self) -> Vec<String> {
        vec![
            "-l".into(),
            format!("{},{}", self.main, self.fwd),
            "--main-lcore".into(),
            self.main.to_string(),
        ]
    }
}

/// What both roles set the same way: queues, memory, forwarding, rings,
/// mbufs, file prefix, CPUs, extra arguments.
#[derive(Debug, Clone)]
pub struct PortOpts {
    /// Queue pairs: the vdev's `queues=` and testpmd's `--rxq`/`--txq`.
    pub queues: u16,
    /// `false`: `--no-huge -m 1024` (memfd-backed 4 KiB pages);
    /// `true`: hugepages, with `--single-file-segments` for the frontend
    /// (without it virtio-user fails with "Too many memory regions") and
    /// `--huge-unlink` for the vhost backend.
    pub hugepages: bool,
    /// `--forward-mode` (`mac` swaps nothing, it rewrites the MACs to the
    /// port's and the peer's, so frames loop through the backend forever).
    pub forward_mode: String,
    /// `--txd`: TX descriptors (for the frontend at most
    /// [`FrontendOpts::queue_size`]).
    pub txd: u16,
    /// `--rxd`: RX descriptors (for the frontend at most
    /// [`FrontendOpts::queue_size`]).
    pub rxd: u16,
    /// `--total-num-mbufs`.
    pub nb_mbufs: u32,
    /// `--file-prefix`; unique per run by default ([`unique_prefix`]).
    pub file_prefix: String,
    /// CPU placement: [`Lcores::FRONTEND`] or [`Lcores::BACKEND`] by default.
    pub lcores: Lcores,
    /// Extra EAL arguments (before `--`).
    pub extra_eal_args: Vec<String>,
    /// Extra testpmd arguments (after `--`).
    pub extra_args: Vec<String>,
}

impl PortOpts {
    /// One queue pair, no hugepages, 1024 descriptors per ring.
    fn new(forward_mode: &str, nb_mbufs: u32, role: &str, lcores: Lcores) -> Self {
        Self {
            queues: 1,
            hugepages: false,
            forward_mode: forward_mode.into(),
            txd: 1024,
            rxd: 1024,
            nb_mbufs,
            file_prefix: unique_prefix(role),
            lcores,
            extra_eal_args: Vec::new(),
            extra_args: Vec::new(),
        }
    }

    /// The EAL arguments up to the role's own: CPUs, memory, file prefix.
    fn eal_args(&self, frontend: bool) -> Vec<String> {
        let mut a = self.lcores.eal_args();
        a.extend(["-n".into(), "1".into(), "--no-pci".into()]);
        a.extend(memory_args(self.hugepages, frontend));
        a.push(format!("--file-prefix={}", self.file_prefix));
        a
    }

    /// Appends the extra EAL arguments, the vdev, `-- -i` and the testpmd
    /// arguments both roles take.
    fn push_vdev_and_app_args(&self, a: &mut Vec<String>, vdev: String) {
        a.extend(self.extra_eal_args.iter().cloned());
        a.extend(["--vdev".into(), vdev, "--".into(), "-i".into()]);
        a.extend(app_args(
            &self.forward_mode,
            self.queues,
            self.txd,
            self.rxd,
            self.nb_mbufs,
        ));
    }
}

/// How testpmd runs as a virtio-user frontend on a vhost-user socket.
///
/// The defaults ([`FrontendOpts::new`]) are `ENVIRONMENT.md`'s recipe:
/// one queue pair, virtio-user as socket client, `mac` forwarding, 1024
/// descriptors per ring, 16384 mbufs, no hugepages.
#[derive(Debug, Clone)]
pub struct FrontendOpts {
    /// The vhost-user socket.
    pub socket: PathBuf,
    /// `server=1`: testpmd creates the socket and the backend connects as a
    /// client. testpmd then blocks in EAL init until the backend connects.
    pub server: bool,
    /// The vdev's `mrg_rxbuf=` (unset: the PMD's default, on).
    pub mrg_rxbuf: Option<bool>,
    /// The vdev's `packed_vq=` (unset: split ring).
    pub packed_vq: Option<bool>,
    /// The vdev's `in_order=` (unset: the PMD's default, on).
    pub in_order: Option<bool>,
    /// The vdev's `queue_size=`: the size of every virtqueue. Unset, it is
    /// virtio-user's default, **256**, and `--txd`/`--rxd` above it are
    /// silently clamped to it (the anchor figures ran with 256-entry rings).
    pub queue_size: Option<u16>,
    /// `--txpkts`: the frame length of `start tx_first` (L2, without FCS);
    /// unset: testpmd's default, 64 bytes.
    pub pkt_len: Option<u16>,
    /// Log the virtio PMD's init at debug level, which prints the feature
    /// bits it negotiated ([`Testpmd::negotiated_features`](super::Testpmd::negotiated_features)).
    pub log_features: bool,
    /// The vdev's `mac=`: the port's address (unset: random).
    pub mac: Option<String>,
    /// What both roles set: `mac` forwarding, 16384 mbufs,
    /// [`Lcores::FRONTEND`] by default.
    pub port: PortOpts,
}

impl FrontendOpts {
    /// The defaults for a frontend on `socket`.
    pub fn new(socket: impl Into<PathBuf>) -> Self {
        Self {
            socket: socket.into(),
            server: false,
            mrg_rxbuf: None,
            packed_vq: None,
            in_order: None,
            queue_size: None,
            pkt_len: None,
            log_features: true,
            mac: None,
            port: PortOpts::new("mac", 16384, "fe", Lcores::FRONTEND),
        }
    }

    /// The `--vdev` value.
    pub fn vdev(&self) -> String {
        let mut v = format!(
            "net_virtio_user0,path={},queues={}",
            vdev_path(&self.socket),
            self.port.queues
        );
        if self.server {
            v.push_str(",server=1");
        }
        if let Some(size) = self.queue_size {
            let _ = write!(v, ",queue_size={size}");
        }
        if let Some(mac) = &self.mac {
            let _ = write!(v, ",mac={mac}");
        }
        for (key, value) in [
            ("mrg_rxbuf", self.mrg_rxbuf),
            ("packed_vq", self.packed_vq),
            ("in_order", self.in_order),
        ] {
            if let Some(value) = value {
                let _ = write!(v, ",{key}={}", u8::from(value));
            }
        }
        v
    }

    /// Adds one more virtio-user port (`net_virtio_user<N>`) on `socket`
    /// with address `mac`, with the same vdev options as the first: one
    /// testpmd process, one forwarding core, several frontends. testpmd
    /// numbers its ports in command-line order, where the added ones come
    /// first (in the order added) and [`FrontendOpts::socket`]'s last;
    /// [`Testpmd::port_macs`](super::Testpmd::port_macs) tells which is which.
    pub fn add_port(&mut self, socket: impl Into<PathBuf>, mac: &str) {
        let n = 1 + self
            .port
            .extra_eal_args
            .iter()
            .filter(|a| a.starts_with("net_virtio_user"))
            .count();
        let mut o = self.clone();
        o.socket = socket.into();
        o.mac = Some(mac.into());
        let v = o
            .vdev()
            .replacen("net_virtio_user0", &format!("net_virtio_user{n}"), 1);
        self.port.extra_eal_args.extend(["--vdev".into(), v]);
    }

    /// The full argument list after the binary.
    pub fn args(&self) -> Vec<String> {
        let mut a = self.port.eal_args(true);
        if self.log_features {
            a.push("--log-level=pmd.net.virtio.init:debug".into());
        }
        self.port.push_vdev_and_app_args(&mut a, self.vdev());
        if let Some(len) = self.pkt_len {
            a.push(format!("--txpkts={len}"));
        }
        a.extend(self.port.extra_args.iter().cloned());
        a
    }
}

/// How testpmd runs as DPDK's vhost backend (`net_vhost0`), the stand-in
/// and reference for our backend.
///
/// The defaults ([`VhostBackendOpts::new`]) are the anchor's
/// (`research/anchor-figures.md`): `io` forwarding (the guest's TX is
/// enqueued, unchanged, into its RX), socket server, 1024 descriptors,
/// 32768 mbufs, no hugepages, `--disable-link-check`.
#[derive(Debug, Clone)]
pub struct VhostBackendOpts {
    /// The vhost-user socket (`iface=`).
    pub socket: PathBuf,
    /// `client=1`: connect to a socket the frontend created (with
    /// reconnection); otherwise create it.
    pub client: bool,
    /// What both roles set: `io` forwarding, 32768 mbufs,
    /// [`Lcores::BACKEND`] by default.
    pub port: PortOpts,
}

impl VhostBackendOpts {
    /// The defaults for a backend on `socket`.
    pub fn new(socket: impl Into<PathBuf>) -> Self {
        Self {
            socket: socket.into(),
            client: false,
            port: PortOpts::new("io", 32768, "vh", Lcores::BACKEND),
        }
    }

    /// The `--vdev` value.
    pub fn vdev(&self) -> String {
        format!(
            "net_vhost0,iface={},queues={},client={}",
            vdev_path(&self.socket),
            self.port.queues,
            u8::from(self.client)
        )
    }

    /// The full argument list after the binary.
    pub fn args(&self) -> Vec<String> {
        let mut a = self.port.eal_args(false);
        // The vhost library logs every message from a thread of its own;
        // those lines can land in the middle of the interactive prompt, so
        // keep its config log to warnings.
        a.push("--log-level=lib.vhost.config:warning".into());
        self.port.push_vdev_and_app_args(&mut a, self.vdev());
        a.push("--disable-link-check".into());
        a.extend(self.port.extra_args.iter().cloned());
        a
    }
}

/// A socket path as a vdev argument value (devargs are split at commas).
fn vdev_path(p: &Path) -> String {
    let s = p.to_str().expect("socket path is not UTF-8");
    assert!(
        !s.contains(',') && !s.contains(' '),
        "socket path {s:?} cannot be passed in a DPDK --vdev"
    );
    s.to_string()
}

/// EAL memory arguments. A virtio-user frontend shares its memory with the
/// backend and needs one file per memseg list (`--single-file-segments`);
/// the vhost backend's memory is private (`--huge-unlink`).
fn memory_args(hugepages: bool, frontend: bool) -> Vec<String> {
    if !hugepages {
        vec![
            "--no-huge".into(),
            "-m".into(),
            NO_HUGE_MEMORY_MB.to_string(),
        ]
    } else if frontend {
        vec!["--single-file-segments".into()]
    } else {
        vec!["--huge-unlink".into()]
    }
}

/// testpmd application arguments common to both roles.
fn app_args(mode: &str, queues: u16, txd: u16, rxd: u16, nb_mbufs: u32) -> Vec<String> {
    vec![
        "--nb-cores=1".into(),
        format!("--forward-mode={mode}"),
        format!("--rxq={queues}"),
        format!("--txq={queues}"),
        format!("--txd={txd}"),
        format!("--rxd={rxd}"),
        format!("--total-num-mbufs={nb_mbufs}"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_frontend_args() {
        let mut o = FrontendOpts::new("/tmp/x/s.sock");
        o.port.queues = 2;
        o.server = true;
        o.mrg_rxbuf = Some(false);
        o.port.file_prefix = "p".into();
        o.pkt_len = Some(1518);
        let a = o.args().join(" ");
        assert!(
            a.starts_with("-l 0,1 --main-lcore 0 -n 1 --no-pci --no-huge -m 1024 --file-prefix=p")
        );
        assert!(a.contains(
            "--vdev net_virtio_user0,path=/tmp/x/s.sock,queues=2,server=1,mrg_rxbuf=0 -- -i"
        ));
        assert!(a.contains("--rxq=2 --txq=2"));
        assert!(a.ends_with("--txpkts=1518"));
        let mut b = VhostBackendOpts::new("/tmp/x/s.sock");
        b.port.hugepages = true;
        b.client = true;
        let a = b.args().join(" ");
        assert!(a.starts_with("-l 1,0 --main-lcore 1 -n 1 --no-pci --huge-unlink"));
        assert!(a.contains("net_vhost0,iface=/tmp/x/s.sock,queues=1,client=1 -- -i"));
        assert!(a.contains("--forward-mode=io"));
    }
}
