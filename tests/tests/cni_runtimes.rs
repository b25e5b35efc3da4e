// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! `vhu-cni` under real container runtimes, which run the plugin exactly as
//! they do on a node: containerd 1.6's CRI plugin (the kubelet's path),
//! driven by a CRI gRPC client (`tests/peers/cri.py`), and podman 4.3 with
//! its CNI backend. The pods' root filesystem is built from the host's
//! binaries (busybox, `dpdk-testpmd` and its libraries).
//!
//! * `containerd_cri_pods_on_vhu_cni`, one containerd and one switch:
//!   - vhost-user (`vmRole: server`): pod A's testpmd (`rxonly`) and pod
//!     B's (`txonly`) each create the socket the plugin placed
//!     (`/var/run/vhu/eth0/sock` in the pod: the pod's host directory, its
//!     `emptyDir` under the kubelet's layout, mounted there); the switch's
//!     two ports are the plugin's (`cni-...`, client role, on the host
//!     sockets under the pods' directories) and connect; the pod's IP and
//!     network namespace are the CRI's; B sends for 2 s after its frames
//!     flow, is stopped (StopContainer: testpmd prints its counts): the
//!     switch counted exactly what B sent, A got more than 10,000 frames;
//!   - restart: the switch `kill -9`ed and restarted on the same state
//!     while the pods are up: both ports come back (same names, sockets,
//!     client role), A's port reconnects to the running testpmd, a second
//!     sender in pod B is reached too, and traffic resumes (again exact on
//!     B's side, more than 10,000 frames to A); A's testpmd received
//!     exactly what the switch gave it before and after the restart;
//!   - StopPodSandbox + RemovePodSandbox leave no port, socket, socket
//!     directory, plugin record or host-local allocation;
//!   - tap (the network swapped for a `kind: tap` one): two pods; a
//!     container in pod A pings pod B's IP (the CRI's PodSandboxStatus IP,
//!     from the plugin's result) 3 times, 3 replies; a 2 MB TCP transfer
//!     from pod A's network namespace to `nc -l` in a container of pod B
//!     arrives with the sender's SHA-256; removing the pods leaves nothing
//!     either, and the pod's network namespace is gone.
//! * `podman_pods_on_vhu_cni`, one switch, podman on a private
//!   configuration: a `--rootfs` container's testpmd (`txonly`) on the
//!   plugin's socket reaches a host testpmd (`rxonly`) on a switch port:
//!   the switch counted exactly what the container sent, the host got
//!   exactly what the switch gave it (more than 10,000 frames); then two
//!   tap containers, one pinging the other (`podman run --rm`: its port is
//!   gone right after); `podman rm` leaves nothing behind.
//!
//! Needs root, the peers (`scripts/install-peers.sh`: containerd, runc,
//! podman, grpcio-tools) and the release binaries. testpmd busy-polls: run
//! under `flock /tmp/vhu-e2e.lock`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};
use vhu_api::PortView;
use vhu_tests::cri::{Containerd, Sandbox};
use vhu_tests::peers;
use vhu_tests::pod::{self, PodTestpmd, Podman, POD_OUT_DIR, POD_SOCKET_DIR};
use vhu_tests::switch::SwitchProc;
use vhu_tests::testpmd::{FrontendOpts, Lcores, RunDir, Testpmd};

/// The runtimes' interface name for the pod's (one) network.
const IFNAME: &str = "eth0";
const IMAGE: &str = "localhost/vhu-pod:1";
/// Bytes of the TCP transfer between tap pods.
const TCP_BYTES: usize = 2_000_000;

/// One network's plugin configuration and the places it leaves things in.
struct Net {
    name: String,
    conf: Value,
    hosts: PathBuf,
    state: PathBuf,
    ipam: PathBuf,
}

impl Net {
    /// `kind` on the switch `sw`, subnet `10.<net>.0.0/24`; vhost-user
    /// sockets under `hosts` (in a kubelet's layout, `{podUID}`, when
    /// `uid_dir`).
    fn new(run: &RunDir, sw: &SwitchProc, name: &str, kind: &str, net: u8, uid_dir: bool) -> Self {
        let hosts = run.join(&format!("{name}-hosts"));
        let state = run.join(&format!("{name}-state"));
        let ipam = run.join(&format!("{name}-ipam"));
        std::fs::create_dir_all(&hosts).unwrap();
        let mut plugin = json!({
            "type": "vhu-cni",
            "kind": kind,
            "controlSocket": sw.control,
            "stateDir": state,
            "ipam": {"type": "host-local", "subnet": format!("10.{net}.0.0/24"),
                     "dataDir": ipam},
        });
        if kind == "vhost-user" {
            plugin["vmRole"] = json!("server");
            plugin["hostSocketDir"] = json!(if uid_dir {
                hosts.join("{podUID}/volumes/kubernetes.io~empty-dir/vhu-sockets")
            } else {
                hosts.clone()
            });
        }
        let conf = json!({"cniVersion": "1.0.0", "name": name, "plugins": [plugin]});
        Self {
            name: name.to_owned(),
            conf,
            hosts,
            state,
            ipam,
        }
    }

    /// A kubelet pod's socket directory on the host (its `emptyDir`).
    fn pod_dir(&self, uid: &str) -> PathBuf {
        self.hosts
            .join(uid)
            .join("volumes/kubernetes.io~empty-dir/vhu-sockets")
    }

    /// What the plugin left: the switch's ports, the sockets (files under
    /// the host directory), its records and host-local's allocations.
    fn assert_nothing_left(&self, sw: &SwitchProc) {
        let ports: Vec<PortView> = sw.get("/ports");
        let cni: Vec<&str> = ports
            .iter()
            .map(|p| p.spec.name.as_str())
            .filter(|n| n.starts_with("cni-"))
            .collect();
        assert!(cni.is_empty(), "{}: ports left {cni:?}", self.name);
        let left = |d: &Path| -> Vec<PathBuf> {
            walk(d)
                .into_iter()
                .filter(|p| !p.is_dir())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            left(&self.hosts),
            Vec::<PathBuf>::new(),
            "{}: sockets",
            self.name
        );
        let dirs: Vec<PathBuf> = walk(&self.hosts)
            .into_iter()
            .filter(|p| p.ends_with(IFNAME))
            .collect();
        assert!(
            dirs.is_empty(),
            "{}: socket directories {dirs:?}",
            self.name
        );
        assert_eq!(
            left(&self.state.join(&self.name)),
            Vec::<PathBuf>::new(),
            "{}: plugin records",
            self.name
        );
        let ips: Vec<PathBuf> = left(&self.ipam.join(&self.name))
            .into_iter()
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.parse::<std::net::IpAddr>().is_ok())
            })
            .collect();
        assert!(
            ips.is_empty(),
            "{}: host-local allocations {ips:?}",
            self.name
        );
    }
}

/// Every path under `d`.
fn walk(d: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
        out.push(e.path());
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            out.extend(walk(&e.path()));
        }
    }
    out
}

/// The switch's ports named `cni-...`, sorted by name.
fn cni_ports(sw: &SwitchProc) -> Vec<PortView> {
    let mut ports: Vec<PortView> = sw.get("/ports");
    ports.retain(|p| p.spec.name.starts_with("cni-"));
    ports.sort_by(|a, b| a.spec.name.cmp(&b.spec.name));
    ports
}

/// The port whose socket is `sock`.
fn port_on(sw: &SwitchProc, sock: &Path) -> PortView {
    cni_ports(sw)
        .into_iter()
        .find(|p| p.spec.socket.as_deref() == sock.to_str())
        .unwrap_or_else(|| panic!("no port on {}: {:?}", sock.display(), cni_ports(sw)))
}

/// Waits until every port of `names` is connected.
fn wait_connected(sw: &SwitchProc, names: &[&str]) {
    let t0 = std::time::Instant::now();
    loop {
        let ports = cni_ports(sw);
        if names
            .iter()
            .all(|n| ports.iter().any(|p| p.spec.name == *n && p.state.connected))
        {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "ports {names:?} not connected: {ports:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits until the frontend of `port` sends (its `tx` count moves).
fn wait_moving(sw: &SwitchProc, port: &str) {
    let t0 = std::time::Instant::now();
    let first = sw.stats(port).total.tx_packets;
    while sw.stats(port).total.tx_packets == first {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "{port} sends nothing"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The SHA-256 (hex) of what `tcp_send.py` sends: `n` bytes, byte i is i
/// mod 251.
fn pattern_sha256(dir: &Path, n: usize) -> String {
    let f = dir.join("pattern");
    let data: Vec<u8> = (0..n).map(|i| u8::try_from(i % 251).unwrap()).collect();
    std::fs::write(&f, data).unwrap();
    let o = Command::new("sha256sum").arg(&f).output().unwrap();
    String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned()
}

/// Sends the pattern from the network namespace `netns` (a pod's) to
/// `ip:port` with `tcp_send.py`.
fn tcp_send_from(netns: &str, ip: &str, port: u16, n: usize) {
    let o = Command::new("nsenter")
        .arg(format!("--net={netns}"))
        .args([
            "python3",
            "-c",
            peers::TCP_SEND,
            ip,
            &port.to_string(),
            &n.to_string(),
        ])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "tcp_send from {netns}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// The pods' image, built once per run directory.
fn build_image(run: &RunDir) -> (PathBuf, PathBuf) {
    let rootfs = run.join("rootfs");
    pod::build_rootfs(&rootfs);
    let archive = run.join("image.tar");
    pod::oci_archive(&rootfs, &archive, IMAGE);
    (rootfs, archive)
}

#[test]
#[ignore = "needs root, containerd, testpmd and vhu-switch; run with --include-ignored"]
fn containerd_cri_pods_on_vhu_cni() {
    let run = RunDir::new("cri");
    let mut sw = SwitchProc::start(&run, "", &[]);
    let (_rootfs, archive) = build_image(&run);
    let mut ctd = Containerd::start(&run, IMAGE, &pod::cni_bin_dir(run.path()));
    ctd.import(&archive);
    let out = run.join("out");
    std::fs::create_dir_all(&out).unwrap();

    // ---- vhost-user: two DPDK pods through the switch --------------------
    let vu = Net::new(&run, &sw, "vhu-cri-vu", "vhost-user", 81, true);
    ctd.set_network(&vu.conf);
    let (uid_a, uid_b) = ("uid-vu-a", "uid-vu-b");
    let pa = ctd.run_pod("vu-a", uid_a);
    let pb = ctd.run_pod("vu-b", uid_b);
    let sock_a = vu.pod_dir(uid_a).join(IFNAME).join("sock");
    let sock_b = vu.pod_dir(uid_b).join(IFNAME).join("sock");
    let (port_a, port_b) = (port_on(&sw, &sock_a), port_on(&sw, &sock_b));
    for p in [&port_a, &port_b] {
        assert_eq!(p.spec.role, Some(vhu_api::Role::Client), "{p:?}");
        assert_eq!(p.spec.kind, vhu_api::PortKind::VhostUser);
    }
    assert_eq!(cni_ports(&sw).len(), 2);
    let (ip_a, netns_a) = ctd.pod_network(&pa);
    assert!(ip_a.starts_with("10.81.0."), "pod IP {ip_a}");
    assert!(netns_a.starts_with("/var/run/netns/cni-"), "{netns_a}");
    let (na, nb) = (port_a.spec.name.clone(), port_b.spec.name.clone());

    let mounts = |uid: &str| -> Vec<(PathBuf, &str)> {
        vec![
            (vu.pod_dir(uid), POD_SOCKET_DIR),
            (out.clone(), POD_OUT_DIR),
        ]
    };
    let start = |pod: &Sandbox, uid: &str, name: &str, what, lcores, log: &str| {
        let m = mounts(uid);
        let m: Vec<(&Path, &str)> = m.iter().map(|(h, c)| (h.as_path(), *c)).collect();
        let cmd = pod::testpmd_command(POD_SOCKET_DIR, IFNAME, true, what, lcores, log);
        ctd.start_container(pod, name, IMAGE, &cmd, &m)
    };
    let rx = start(
        &pa,
        uid_a,
        "rx",
        PodTestpmd::Receive,
        Lcores::FRONTEND,
        "rx.log",
    );
    wait_connected(&sw, &[&na]);
    // A sender in pod B until its frames have flowed for 2 s; the exact
    // counts once it stopped and the switch drained (the switch counts from
    // the frontend's side: `tx` is what B sent, `rx` what A got).
    let burst = |sw: &SwitchProc, log: &str| -> (u64, u64) {
        let tx = start(
            &pb,
            uid_b,
            log,
            PodTestpmd::Send,
            Lcores::BACKEND,
            &format!("{log}.log"),
        );
        wait_connected(sw, &[&nb]);
        wait_moving(sw, &nb);
        std::thread::sleep(Duration::from_secs(2));
        ctd.stop_container(&tx, Duration::from_secs(10));
        let s = sw.settle(&[&na, &nb]);
        let sent = pod::testpmd_totals(&out.join(format!("{log}.log"))).tx_packets;
        assert_eq!(
            s[1].total.tx_packets, sent,
            "{log}: the switch got all B sent: {s:?}"
        );
        let to_a = s[0].total.rx_packets;
        assert!(to_a > 10_000, "{log}: A got only {to_a} of {sent}: {s:?}");
        (sent, to_a)
    };
    let (sent1, to_a1) = burst(&sw, "tx1");

    // ---- restart: kill -9, same state; the pods stay up --------------------
    sw.kill9();
    sw.restart();
    let back = cni_ports(&sw);
    let names: Vec<&str> = back.iter().map(|p| p.spec.name.as_str()).collect();
    assert_eq!(names, {
        let mut n = vec![na.as_str(), nb.as_str()];
        n.sort_unstable();
        n
    });
    assert_eq!(port_on(&sw, &sock_a).spec.role, Some(vhu_api::Role::Client));
    assert_eq!(port_on(&sw, &sock_b).spec.role, Some(vhu_api::Role::Client));
    wait_connected(&sw, &[&na]);
    let (sent2, to_a2) = burst(&sw, "tx2");
    ctd.stop_container(&rx, Duration::from_secs(10));
    let got = pod::testpmd_totals(&out.join("rx.log")).rx_packets;
    assert_eq!(got, to_a1 + to_a2, "A received what the switch gave it");
    println!("containerd vhost-user: B sent {sent1} + {sent2}, A received {to_a1} + {to_a2}");

    for p in [&pa, &pb] {
        ctd.remove_pod(p);
    }
    assert!(ctd.pods().is_empty());
    vu.assert_nothing_left(&sw);

    // ---- tap: the pods' kernel stacks through the switch -----------------
    let tap = Net::new(&run, &sw, "vhu-cri-tap", "tap", 82, false);
    ctd.set_network(&tap.conf);
    let ta = ctd.run_pod("tap-a", "uid-tap-a");
    let tb = ctd.run_pod("tap-b", "uid-tap-b");
    let (_, netns_ta) = ctd.pod_network(&ta);
    let (ip_tb, _) = ctd.pod_network(&tb);
    assert!(ip_tb.starts_with("10.82.0."), "pod IP {ip_tb}");
    let ports = cni_ports(&sw);
    assert_eq!(ports.len(), 2, "{ports:?}");
    assert!(ports.iter().all(|p| p.spec.kind == vhu_api::PortKind::Tap));
    let m = [(out.as_path(), POD_OUT_DIR)];
    let sh = |c: &str| vec!["/bin/sh".to_owned(), "-c".to_owned(), c.to_owned()];
    let want = pattern_sha256(run.path(), TCP_BYTES);
    let nc = ctd.start_container(
        &tb,
        "nc",
        IMAGE,
        &sh(&format!(
            "nc -l -p 5001 | sha256sum > {POD_OUT_DIR}/tcp.sum"
        )),
        &m,
    );
    let ping = ctd.start_container(
        &ta,
        "ping",
        IMAGE,
        &sh(&format!(
            "ping -c 3 -W 5 {ip_tb} > {POD_OUT_DIR}/ping.log 2>&1"
        )),
        &m,
    );
    let code = ctd.wait_exit(&ping, Duration::from_secs(30));
    let ping_log = std::fs::read_to_string(out.join("ping.log")).unwrap_or_default();
    assert_eq!(code, 0, "ping from pod A to {ip_tb}: {ping_log}");
    assert!(ping_log.contains("3 packets received"), "{ping_log}");
    tcp_send_from(&netns_ta, &ip_tb, 5001, TCP_BYTES);
    assert_eq!(ctd.wait_exit(&nc, Duration::from_secs(30)), 0);
    let sum = std::fs::read_to_string(out.join("tcp.sum")).unwrap();
    assert_eq!(
        sum.split_whitespace().next(),
        Some(want.as_str()),
        "TCP data"
    );
    for p in [&ta, &tb] {
        ctd.remove_pod(p);
    }
    tap.assert_nothing_left(&sw);
    assert!(
        !Path::new(&netns_ta).exists(),
        "the pod's network namespace is gone"
    );
}

#[test]
#[ignore = "needs root, podman, testpmd and vhu-switch; run with --include-ignored"]
fn podman_pods_on_vhu_cni() {
    let run = RunDir::new("podman");
    let sw = SwitchProc::start(&run, "", &[]);
    let rootfs = run.join("rootfs");
    pod::build_rootfs(&rootfs);
    let pm = Podman::new(&run.join("podman"), &pod::cni_bin_dir(run.path()));
    let out = run.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let rootfs_s = rootfs.to_str().unwrap();
    let out_mount = format!("{}:{POD_OUT_DIR}", out.display());

    // ---- vhost-user: a container's testpmd to a host testpmd --------------
    let vu = Net::new(&run, &sw, "vhu-pm-vu", "vhost-user", 83, false);
    std::fs::write(pm.net_dir.join("vhu-pm-vu.conflist"), vu.conf.to_string()).unwrap();
    sw.call(
        "POST",
        "/ports",
        r#"{"name":"host","kind":"vhost-user"}"#,
        201,
    );
    let mut o = FrontendOpts::new(sw.sockets.join("host.sock"));
    o.port.forward_mode = "rxonly".into();
    o.port.lcores = Lcores::FRONTEND;
    let mut host = Testpmd::spawn(&o);
    host.wait_link_up(Duration::from_secs(20));
    host.start();
    // podman keys the host directory by the container id (no pod UID): the
    // container finds its directory through /run/.containerenv.
    let cmd = pod::testpmd_command(
        "/var/run/vhu-pods/$id",
        IFNAME,
        true,
        PodTestpmd::Send,
        Lcores::BACKEND,
        "pm-tx.log",
    );
    // testpmd is not its process 1 here: podman tears the network (and the
    // port) down as soon as the container exits, and the switch's counts
    // are read after testpmd stopped.
    let script = format!(
        ". /run/.containerenv; {}; exec sleep 600",
        cmd[2].trim_start_matches("exec ")
    );
    let hosts_mount = format!("{}:/var/run/vhu-pods", vu.hosts.display());
    let cid = pm.run(&[
        "run",
        "-d",
        "--privileged",
        "--network",
        "vhu-pm-vu",
        "-v",
        &hosts_mount,
        "-v",
        &out_mount,
        "--rootfs",
        rootfs_s,
        "/bin/sh",
        "-c",
        &script,
    ]);
    let sock = vu.hosts.join(&cid).join(IFNAME).join("sock");
    let port = port_on(&sw, &sock);
    assert_eq!(port.spec.role, Some(vhu_api::Role::Client));
    wait_connected(&sw, &[&port.spec.name]);
    wait_moving(&sw, &port.spec.name);
    std::thread::sleep(Duration::from_secs(2));
    pm.run(&[
        "exec",
        &cid,
        "/bin/sh",
        "-c",
        "kill -INT $(pidof dpdk-testpmd)",
    ]);
    pod::wait_log(
        &out.join("pm-tx.log"),
        "Accumulated forward statistics",
        Duration::from_secs(20),
    );
    let st = sw.settle(&["host", &port.spec.name]);
    let fwd = host.stop();
    let sent = pod::testpmd_totals(&out.join("pm-tx.log")).tx_packets;
    assert_eq!(
        st[1].total.tx_packets, sent,
        "the switch got all the container sent"
    );
    assert_eq!(
        fwd.total.rx_packets, st[0].total.rx_packets,
        "host got what the switch gave"
    );
    assert!(fwd.total.rx_packets > 10_000, "{fwd:?}");
    println!(
        "podman vhost-user: sent {sent}, host received {}",
        fwd.total.rx_packets
    );
    pm.run(&["rm", "-f", "-t", "0", &cid]);
    vu.assert_nothing_left(&sw);

    // ---- tap: one container pings another --------------------------------
    let tap = Net::new(&run, &sw, "vhu-pm-tap", "tap", 84, false);
    std::fs::write(pm.net_dir.join("vhu-pm-tap.conflist"), tap.conf.to_string()).unwrap();
    let a = pm.run(&[
        "run",
        "-d",
        "--network",
        "vhu-pm-tap",
        "--rootfs",
        rootfs_s,
        "/bin/sleep",
        "600",
    ]);
    let ip_a = pm.run(&[
        "inspect",
        "-f",
        "{{(index .NetworkSettings.Networks \"vhu-pm-tap\").IPAddress}}",
        &a,
    ]);
    assert!(ip_a.starts_with("10.84.0."), "{ip_a}");
    let ping = pm.try_run(&[
        "run",
        "--rm",
        "--network",
        "vhu-pm-tap",
        "--rootfs",
        rootfs_s,
        "/bin/ping",
        "-c",
        "3",
        "-W",
        "5",
        &ip_a,
    ]);
    let text = String::from_utf8_lossy(&ping.stdout);
    assert!(
        ping.status.success() && text.contains("3 packets received"),
        "{text}"
    );
    assert_eq!(
        cni_ports(&sw).len(),
        1,
        "the pinging container's port is gone"
    );
    pm.run(&["rm", "-f", "-t", "0", &a]);
    tap.assert_nothing_left(&sw);
}
