// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! What the container runtimes' tests run in a pod: a root filesystem built
//! from the host's binaries (static busybox, `dpdk-testpmd` with the
//! libraries `ldd` names and the three DPDK plugins a virtio-user port
//! needs), packed as an OCI image archive for `ctr images import`; the
//! command line of a testpmd in a pod; and podman with a private
//! configuration ([`Podman`]).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::testpmd::{parse_fwd_stats, testpmd_bin, FrontendOpts, Lcores, PortFwdStats};

/// The `vhu-cni` binary: `$VHU_CNI_BIN`, or the release build beside
/// `vhu-switch`'s.
///
/// # Panics
///
/// If it is not built (`cargo build --release --workspace`).
pub fn cni_bin() -> PathBuf {
    let bin = crate::bins::from_env("VHU_CNI_BIN")
        .unwrap_or_else(|| crate::switch::switch_bin().with_file_name("vhu-cni"));
    assert!(
        bin.is_file(),
        "{} is missing: run cargo build --release --workspace (or set VHU_CNI_BIN)",
        bin.display()
    );
    bin
}

/// A CNI binary directory for a runtime under `dir`: `vhu-cni` (a wrapper
/// that runs it with `VHU_CNI_CONFIG` naming `dir`'s node configuration,
/// [`crate::cni_node::path_in`], as a node's administrator would set it in
/// the runtime's environment), and the reference plugins `host-local`
/// (IPAM) and `loopback` (containerd sets up the pod's `lo` with it) from
/// Debian's `/usr/lib/cni`.
///
/// # Panics
///
/// If a plugin is missing (`scripts/install-peers.sh`).
pub fn cni_bin_dir(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let d = dir.join("cni-bin");
    std::fs::create_dir_all(&d).unwrap();
    let wrapper = d.join("vhu-cni");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nVHU_CNI_CONFIG={:?} exec {:?} \"$@\"\n",
            crate::cni_node::path_in(dir).display().to_string(),
            cni_bin().display().to_string()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    for p in ["host-local", "loopback"] {
        let src = Path::new("/usr/lib/cni").join(p);
        assert!(
            src.is_file(),
            "{} is missing: run scripts/install-peers.sh (containernetworking-plugins)",
            src.display()
        );
        let _ = std::os::unix::fs::symlink(&src, d.join(p));
    }
    d
}

/// The Python program that packs a directory into an OCI image archive.
///
/// `tests/peers/oci_image.py`.
pub const OCI_IMAGE: &str = include_str!("../peers/oci_image.py");

/// The in-pod directory the pod's socket directory is mounted on (the
/// socket contract of `docs/cni.md`).
pub const POD_SOCKET_DIR: &str = "/var/run/vhu";

/// The in-pod directory the tests' output directory is mounted on.
pub const POD_OUT_DIR: &str = "/out";

/// DPDK's plugin directory (EAL loads every driver there at start-up).
const DPDK_PMDS: &str = "/usr/lib/x86_64-linux-gnu/dpdk/pmds-23.0";

/// The DPDK plugins a virtio-user port in a pod needs: the vdev bus, the
/// virtio driver and the ring mempool.
const DPDK_PLUGINS: [&str; 3] = [
    "librte_bus_vdev.so.23",
    "librte_net_virtio.so.23",
    "librte_mempool_ring.so.23",
];

fn run_ok(cmd: &mut Command, what: &str) -> Output {
    let o = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        o.status.success(),
        "{what}: {}\n{}{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// Copies `src` (following links) to the same path under `root`.
fn copy_into(root: &Path, src: &Path) {
    let dst = root.join(src.strip_prefix("/").expect("absolute"));
    if dst.exists() {
        return;
    }
    std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
    std::fs::copy(src, &dst).unwrap_or_else(|e| panic!("copy {}: {e}", src.display()));
}

/// Copies `bin` and every library `ldd` names for it under `root`.
fn copy_with_libs(root: &Path, bin: &Path) {
    copy_into(root, bin);
    let o = run_ok(Command::new("ldd").arg(bin), "ldd");
    for line in String::from_utf8_lossy(&o.stdout).lines() {
        // "libX.so.1 => /lib/x86_64-linux-gnu/libX.so.1 (0x...)" or
        // "/lib64/ld-linux-x86-64.so.2 (0x...)".
        let path = line
            .split("=>")
            .last()
            .and_then(|s| s.split_whitespace().next())
            .filter(|p| p.starts_with('/'));
        if let Some(p) = path {
            copy_into(root, Path::new(p));
        }
    }
}

/// Builds the pods' root filesystem in `root`: static busybox and its
/// applets, `dpdk-testpmd` with its libraries and plugins, the mount points
/// [`POD_SOCKET_DIR`] and [`POD_OUT_DIR`].
///
/// # Panics
///
/// If a binary is missing (`scripts/install-peers.sh` installs them).
pub fn build_rootfs(root: &Path) {
    for d in [
        "bin",
        "proc",
        "sys",
        "dev",
        "etc",
        "tmp",
        "run",
        "var/run/vhu",
        "out",
    ] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    let busybox = Path::new("/bin/busybox");
    assert!(
        busybox.is_file(),
        "/bin/busybox is missing: run scripts/install-peers.sh (busybox-static)"
    );
    std::fs::copy(busybox, root.join("bin/busybox")).unwrap();
    let o = run_ok(Command::new(busybox).arg("--list"), "busybox --list");
    for applet in String::from_utf8_lossy(&o.stdout).lines() {
        if applet != "busybox" {
            let _ = std::os::unix::fs::symlink("busybox", root.join("bin").join(applet));
        }
    }
    std::fs::write(root.join("etc/passwd"), "root:x:0:0:root:/:/bin/sh\n").unwrap();
    copy_with_libs(root, &testpmd_bin());
    // EAL loads `<dir>/*.so` as plugins: a link to the copy (the same
    // file), since a second copy of a library testpmd links already (the
    // vdev bus) would register a second bus.
    for p in DPDK_PLUGINS {
        copy_with_libs(root, &Path::new(DPDK_PMDS).join(p));
        let dir = root.join(DPDK_PMDS.trim_start_matches('/'));
        let _ = std::os::unix::fs::symlink(p, dir.join(p.trim_end_matches(".23")));
    }
}

/// Packs `rootfs` into an OCI image archive `out` named `name` whose
/// command (a sandbox's pause process) sleeps.
pub fn oci_archive(rootfs: &Path, out: &Path, name: &str) {
    run_ok(
        Command::new("python3")
            .args(["-c", OCI_IMAGE])
            .arg(rootfs)
            .arg(out)
            .arg(name)
            .arg(r#"["/bin/sleep", "2147483647"]"#),
        "pack the OCI image",
    );
}

/// What a testpmd in a pod does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodTestpmd {
    /// `txonly` (64-byte frames) until the runtime stops the container
    /// (SIGTERM).
    Send,
    /// `rxonly` until the runtime stops the container.
    Receive,
}

/// The shell command of a container running testpmd as a virtio-user
/// frontend on the socket `<dir>/<ifname>/sock` (`dir` is expanded by the
/// shell; [`POD_SOCKET_DIR`] in a kubelet's pod), creating it
/// (`server=1`, `vmRole: server`) when `server`, writing its output to
/// `/out/<log>`, on `lcores`, without hugepages. testpmd is the container's
/// process 1, so that the runtime's SIGTERM reaches its handler, which
/// prints the forward statistics. EAL's start-up waits until the switch
/// has connected (`server=1`), so nothing is sent before.
pub fn testpmd_command(
    dir: &str,
    ifname: &str,
    server: bool,
    mac: &str,
    what: PodTestpmd,
    lcores: Lcores,
    log: &str,
) -> Vec<String> {
    let mut o = FrontendOpts::new(format!("{dir}/{ifname}/sock"));
    o.server = server;
    // The port is locked to the MAC the plugin gave the attachment.
    o.mac = Some(mac.to_owned());
    o.log_features = false;
    o.port.lcores = lcores;
    o.port.forward_mode = match what {
        PodTestpmd::Send => "txonly".into(),
        PodTestpmd::Receive => "rxonly".into(),
    };
    o.port.nb_mbufs = 8192;
    o.port.extra_args.push("--stats-period=1".into());
    let args: Vec<String> = o
        .args()
        .into_iter()
        .filter(|a| a != "-i")
        .map(|a| format!("\"{a}\""))
        .collect();
    vec![
        "/bin/sh".into(),
        "-c".into(),
        format!(
            "exec /usr/bin/dpdk-testpmd {} > {POD_OUT_DIR}/{log} 2>&1",
            args.join(" ")
        ),
    ]
}

/// The total of the forward statistics a pod's testpmd printed on exit,
/// from its log.
///
/// # Panics
///
/// If it printed none.
pub fn testpmd_totals(log: &Path) -> PortFwdStats {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let st = parse_fwd_stats(&text);
    assert!(
        text.contains("Accumulated forward statistics for all ports"),
        "no forward statistics in {}:\n{text}",
        log.display()
    );
    st.total
}

/// Waits until `log` contains `what`.
///
/// # Panics
///
/// If it does not within `timeout`.
pub fn wait_log(log: &Path, what: &str, timeout: Duration) {
    let t0 = Instant::now();
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.contains(what) {
            return;
        }
        assert!(
            t0.elapsed() < timeout,
            "{} has no {what:?} after {timeout:?}:\n{text}",
            log.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// podman 4.3 with its CNI backend on a private configuration
/// (`CONTAINERS_CONF`), storage (`--root`, `--runroot`) and network
/// directory (`--network-config-dir`): the system's containers.conf and
/// networks are left alone.
#[derive(Debug)]
pub struct Podman {
    dir: PathBuf,
    /// The CNI configuration directory.
    pub net_dir: PathBuf,
}

impl Podman {
    /// A podman set-up under `dir`, running the CNI plugins of `cni_bin_dir`.
    ///
    /// # Panics
    ///
    /// If podman is not installed.
    pub fn new(dir: &Path, cni_bin_dir: &Path) -> Self {
        let net_dir = dir.join("net.d");
        std::fs::create_dir_all(&net_dir).unwrap();
        let conf = format!(
            "[containers]\n\
             default_ulimits = [\"nofile=20000:20000\", \"nproc=32768:32768\"]\n\
             [network]\n\
             network_backend = \"cni\"\n\
             cni_plugin_dirs = [\"{}\"]\n\
             network_config_dir = \"{}\"\n\
             [engine]\n\
             runtime = \"runc\"\n\
             cgroup_manager = \"cgroupfs\"\n\
             events_logger = \"file\"\n",
            cni_bin_dir.display(),
            net_dir.display()
        );
        std::fs::write(dir.join("containers.conf"), conf).unwrap();
        let p = Self {
            dir: dir.to_owned(),
            net_dir,
        };
        let v = p.try_run(&["--version"]);
        assert!(
            v.status.success(),
            "podman is missing: run scripts/install-peers.sh (podman, runc, catatonit)"
        );
        p
    }

    /// `podman ARGS` with the private configuration.
    pub fn command(&self) -> Command {
        let mut c = Command::new("podman");
        c.env("CONTAINERS_CONF", self.dir.join("containers.conf"))
            .arg("--root")
            .arg(self.dir.join("root"))
            .arg("--runroot")
            .arg(self.dir.join("runroot"))
            .arg("--tmpdir")
            .arg(self.dir.join("tmp"))
            .arg("--network-config-dir")
            .arg(&self.net_dir);
        c
    }

    /// Runs `podman ARGS`.
    pub fn try_run(&self, args: &[&str]) -> Output {
        self.command().args(args).output().expect("run podman")
    }

    /// Runs `podman ARGS`, which must succeed; its stdout.
    ///
    /// # Panics
    ///
    /// If it fails.
    pub fn run(&self, args: &[&str]) -> String {
        let o = self.try_run(args);
        assert!(
            o.status.success(),
            "podman {args:?}: {}\n{}{}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).trim().to_owned()
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        // Whatever a failed test left running (each container's CNI DEL
        // runs here), then the storage's mounts.
        let _ = self.try_run(&["rm", "-a", "-f", "-t", "0"]);
        let _ = self.try_run(&["system", "reset", "-f"]);
    }
}
