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
//!   - containerd passes no `CNIDeviceInfoFile` (the network declares the
//!     capability; the plugin's records have none);
//!   - tap (the network swapped for a `kind: tap` one, VLAN 82, host-local
//!     range `.10`-`.99` of `10.82.0.0/24`): a QEMU TCG guest (one boot,
//!     the console agent, `10.82.0.200`) on a vhost-user port of the same
//!     VLAN; from a container of the pod, 5 pings to the guest, 5 replies;
//!     4 MiB of random data from another container (busybox `nc`) arrive
//!     in the guest with the same sha256 and exactly 4 MiB; at a quiet
//!     moment the pod's `eth0` equals its tap port's counters and the
//!     guest's `eth0` its port's (frames and bytes, both ways), and each
//!     port's frames went to the other or were counted dropped (bytes
//!     exact when nothing was dropped); removing the pod leaves no port,
//!     directory, record or allocation, and its network namespace is gone.
//! * `podman_pods_on_vhu_cni`, one switch, podman on a private
//!   configuration (podman passes no `CNIDeviceInfoFile` either): a `--rootfs` container's testpmd (`txonly`) on the
//!   plugin's socket reaches a host testpmd (`rxonly`) on a switch port:
//!   the switch counted exactly what the container sent, the host got
//!   exactly what the switch gave it (more than 10,000 frames); then two
//!   tap containers, one pinging the other (`podman run --rm`: its port is
//!   gone right after); `podman rm` leaves nothing behind.
//!
//! A pod's container that swaps its socket directory for a link to a host
//! directory before the sandbox goes: containerd's DEL removes the link
//! and the host directory keeps its file.
//!
//! Needs root, the peers (`scripts/install-peers.sh`: containerd, runc,
//! podman, grpcio-tools, QEMU and the guest image) and the release
//! binaries. testpmd and QEMU are busy: run under `flock /tmp/vhu-e2e.lock`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use vhu_api::{PortStats, PortView};
use vhu_tests::cri::{Containerd, Sandbox};
use vhu_tests::netns::{self, LinkStats};
use vhu_tests::pod::{self, PodTestpmd, Podman, POD_OUT_DIR, POD_SOCKET_DIR};
use vhu_tests::process::RunDir;
use vhu_tests::qemu::{parse_results, spawn_guest, GuestHandle, GuestOpts};
use vhu_tests::switch::SwitchProc;
use vhu_tests::testpmd::{FrontendOpts, Lcores, Testpmd};

/// The runtimes' interface name for the pod's (one) network.
const IFNAME: &str = "eth0";
const IMAGE: &str = "localhost/vhu-pod:1";
/// The tap pod's and the guest's VLAN (an access port each).
const TAP_VLAN: u32 = 82;
/// The guest's address: in the tap network's subnet (`10.82.0.0/24`),
/// outside its host-local range (`.10` to `.99`).
const GUEST_IP: &str = "10.82.0.200";
const GUEST_MAC: &str = "52:54:00:00:82:01";
/// Pings from the tap pod to the guest.
const PINGS: u32 = 5;
/// MiB of the TCP transfer from the tap pod to the guest.
const TCP_MIB: u64 = 4;
/// Until the guest's agent answers (a TCG boot, on cores the pods' testpmds
/// share).
const BOOT: Duration = Duration::from_secs(180);
/// One command in the guest or a container.
const CMD: Duration = Duration::from_secs(60);
/// Shell functions for the guest's agent: `digest FILE KEY` prints
/// `VHU-RESULT KEY_sha256=... KEY_bytes=...`; `listening PORT` waits until
/// a TCP socket listens on PORT; `counters` prints eth0's statistics;
/// `/tmp/hold` is a FIFO for `nc -l` to read (busybox `nc` half-closes at
/// the end of its input, and the sending `nc` quits when it sees that).
const GUEST_FUNCS: &str = "digest() { echo \"VHU-RESULT $2_sha256=$(sha256sum $1 | cut -d' ' -f1) $2_bytes=$(wc -c <$1 | tr -d ' ')\"; }; \
     listening() { h=$(printf '%04X' $1); until cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | grep -q \":$h [0-9A-F]*:0000 0A\"; do sleep 0.1; done; }; \
     counters() { for c in rx_packets tx_packets rx_bytes tx_bytes; do echo \"VHU-RESULT $c=$(cat /sys/class/net/eth0/statistics/$c)\"; done; }; \
     mkfifo /tmp/hold";

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
        // The node's configuration holds the host paths (a network cannot
        // name them); one network at a time per run directory.
        vhu_tests::cni_node::write(
            run.path(),
            &vhu_tests::cni_node::NodePaths {
                control_socket: Some(sw.control.clone()),
                state_dir: Some(state.clone()),
                host_socket_dir: Some(
                    if uid_dir {
                        hosts.join("{podUID}/volumes/kubernetes.io~empty-dir/vhu-sockets")
                    } else {
                        hosts.clone()
                    }
                    .display()
                    .to_string(),
                ),
                ..Default::default()
            },
            &format!("[default]\nvlans = [{TAP_VLAN}]\n"),
        );
        let mut plugin = json!({
            "type": "vhu-cni",
            "kind": kind,
            "ipam": {"type": "host-local", "subnet": format!("10.{net}.0.0/24"),
                     "dataDir": ipam},
        });
        if kind == "vhost-user" {
            plugin["vmRole"] = json!("server");
            // Declared, so that a runtime that has a device-info path passes
            // it (`runtimeConfig`); the plugin's record shows what came.
            plugin["capabilities"] = json!({"CNIDeviceInfoFile": true});
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

    /// The `CNIDeviceInfoFile` each of the plugin's records got from the
    /// runtime (`null`: none), one per attachment.
    fn device_info_files(&self) -> Vec<Value> {
        walk(&self.state.join(&self.name))
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .map(|p| {
                let r: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
                r["deviceInfoFile"].clone()
            })
            .collect()
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
    // containerd 1.6's CRI passes no CNIDeviceInfoFile (Multus does): no
    // device-info file is written.
    assert_eq!(vu.device_info_files(), vec![Value::Null; 2]);

    let mounts = |uid: &str| -> Vec<(PathBuf, &str)> {
        vec![
            (vu.pod_dir(uid), POD_SOCKET_DIR),
            (out.clone(), POD_OUT_DIR),
        ]
    };
    // Each port is locked to the MAC the plugin gave it: the pod's testpmd
    // takes it (a VM would, from the CNI result).
    let mac_of = |p: &PortView| p.spec.mac.as_ref().expect("a locked port")[0].to_string();
    let (mac_a, mac_b) = (mac_of(&port_a), mac_of(&port_b));
    let start = |pod: &Sandbox, uid: &str, name: &str, what, lcores, log: &str| {
        let m = mounts(uid);
        let m: Vec<(&Path, &str)> = m.iter().map(|(h, c)| (h.as_path(), *c)).collect();
        let mac = if uid == uid_a { &mac_a } else { &mac_b };
        let cmd = pod::testpmd_command(POD_SOCKET_DIR, IFNAME, true, mac, what, lcores, log);
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
    // The tap part's guest boots while the pods go (not before: its TCG
    // boot would starve A's receiver), on a port in the tap network's VLAN.
    sw.call(
        "POST",
        "/ports",
        &format!(r#"{{"name":"vm","kind":"vhost-user","vlan":{TAP_VLAN}}}"#),
        201,
    );
    let mut g = spawn_guest(GuestOpts {
        mac: GUEST_MAC.into(),
        cmdline_extra: format!("vhu.test=agent vhu.ip={GUEST_IP}/24 vhu.ipv6=0"),
        timeout: Duration::from_secs(600),
        ..GuestOpts::new(sw.sockets.join("vm.sock"))
    });
    println!("containerd vhost-user: B sent {sent1} + {sent2}, A received {to_a1} + {to_a2}");

    // A pod turns its socket directory into a link to a host directory
    // before its sandbox goes: the DEL containerd runs removes the link,
    // not what it points to (docs/security.md; the old plugin unlinked
    // the victim's "sock").
    let victim = run.join("victim");
    std::fs::create_dir_all(&victim).unwrap();
    std::fs::write(victim.join("sock"), b"not yours").unwrap();
    let attack = format!(
        "rm -rf {POD_SOCKET_DIR}/{IFNAME} && ln -s {} {POD_SOCKET_DIR}/{IFNAME} && exec sleep 600",
        victim.display()
    );
    let m = [(vu.pod_dir(uid_b), POD_SOCKET_DIR)];
    let m: Vec<(&Path, &str)> = m.iter().map(|(h, c)| (h.as_path(), *c)).collect();
    let cmd = ["/bin/sh".to_owned(), "-c".to_owned(), attack];
    let attacker = ctd.start_container(&pb, "attack", IMAGE, &cmd, &m);
    let link = vu.pod_dir(uid_b).join(IFNAME);
    let t0 = std::time::Instant::now();
    while !std::fs::symlink_metadata(&link).is_ok_and(|m| m.file_type().is_symlink()) {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the pod made no link"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    ctd.stop_container(&attacker, Duration::from_secs(5));

    for p in [&pa, &pb] {
        ctd.remove_pod(p);
    }
    assert!(ctd.pods().is_empty());
    assert!(
        std::fs::symlink_metadata(&link).is_err(),
        "DEL removed the link"
    );
    assert_eq!(std::fs::read(victim.join("sock")).unwrap(), b"not yours");
    assert_eq!(walk(&victim), vec![victim.join("sock")]);
    vu.assert_nothing_left(&sw);

    // ---- tap: the pod's kernel stack to a QEMU guest, in one VLAN ---------
    let mut tap = Net::new(&run, &sw, "vhu-cri-tap", "tap", 82, false);
    tap.conf["plugins"][0]["vlan"] = json!(TAP_VLAN);
    let ipam = &mut tap.conf["plugins"][0]["ipam"];
    ipam["rangeStart"] = json!("10.82.0.10");
    ipam["rangeEnd"] = json!("10.82.0.99");
    ctd.set_network(&tap.conf);
    let tp = ctd.run_pod("tap", "uid-tap");
    let (ip_tp, netns_tp) = ctd.pod_network(&tp);
    let host_part: u8 = ip_tp
        .strip_prefix("10.82.0.")
        .and_then(|h| h.parse().ok())
        .unwrap_or_else(|| panic!("pod IP {ip_tp}"));
    assert!(
        (10..=99).contains(&host_part),
        "pod IP {ip_tp} in the range"
    );
    let ports = cni_ports(&sw);
    assert_eq!(ports.len(), 1, "{ports:?}");
    let pt = ports[0].spec.name.clone();
    assert_eq!(ports[0].spec.kind, vhu_api::PortKind::Tap);
    assert_eq!(ports[0].spec.vlan, Some(vhu_api::Vlan::Access(TAP_VLAN)));
    g.wait_agent(BOOT);
    g.exec(GUEST_FUNCS, CMD);
    let ns = netns_tp.rsplit('/').next().unwrap().to_owned();
    let m = [(out.as_path(), POD_OUT_DIR)];
    let sh = |c: &str| vec!["/bin/sh".to_owned(), "-c".to_owned(), c.to_owned()];
    let in_pod = |name: &str, c: &str| {
        let id = ctd.start_container(&tp, name, IMAGE, &sh(c), &m);
        ctd.wait_exit(&id, CMD)
    };
    let code = in_pod(
        "ping",
        &format!("ping -c {PINGS} -W 5 {GUEST_IP} > {POD_OUT_DIR}/ping.log 2>&1"),
    );
    let ping_log = std::fs::read_to_string(out.join("ping.log")).unwrap_or_default();
    assert_eq!(code, 0, "ping from the pod to the guest: {ping_log}");
    assert!(
        ping_log.contains(&format!(
            "{PINGS} packets transmitted, {PINGS} packets received"
        )),
        "{ping_log}"
    );
    g.exec(
        "nc -l -p 5001 <>/tmp/hold >/tmp/rx.bin & rx=$!; listening 5001",
        CMD,
    );
    let t0 = std::time::Instant::now();
    let code = in_pod(
        "tcp",
        &format!(
            "dd if=/dev/urandom of=/tmp/tx.bin bs=1M count={TCP_MIB} 2>/dev/null && \
             sha256sum /tmp/tx.bin > {POD_OUT_DIR}/tx.sum && \
             nc {GUEST_IP} 5001 < /tmp/tx.bin"
        ),
    );
    let took = t0.elapsed();
    assert_eq!(code, 0, "the pod's nc to the guest");
    let got = parse_results(&g.exec("wait $rx && digest /tmp/rx.bin rx", CMD));
    let sent = std::fs::read_to_string(out.join("tx.sum")).unwrap();
    assert_eq!(
        (got["rx_sha256"].as_str(), got["rx_bytes"].as_str()),
        (
            sent.split_whitespace().next().unwrap(),
            (TCP_MIB << 20).to_string().as_str()
        ),
        "what the guest received (sha256, bytes) vs what the pod sent"
    );
    println!("tap pod -> guest: {TCP_MIB} MiB over TCP in {took:.1?} (with the container's start)");
    // At a quiet moment: the pod's eth0 (the TAP) counts what its port
    // counts, the guest's eth0 what its port counts, and the two ports,
    // alone in the VLAN, carry each other's frames.
    let (st, pod_k, guest_k) = quiet_counters(&sw, &[&pt, "vm"], &mut g, &ns);
    println!(
        "tap port {:?}
pod eth0 {pod_k:?}
vm port {:?}
guest eth0 {guest_k:?}",
        st[0].total, st[1].total
    );
    let (t, v) = (&st[0].total, &st[1].total);
    assert_eq!(
        (t.rx_packets, t.rx_bytes, t.tx_packets, t.tx_bytes),
        (
            pod_k.rx_packets,
            pod_k.rx_bytes,
            pod_k.tx_packets,
            pod_k.tx_bytes
        ),
        "the tap port (rx: into the pod, tx: from it) vs the pod's eth0"
    );
    assert_eq!(
        (v.tx_packets, v.tx_bytes, v.rx_packets, v.rx_bytes),
        (
            guest_k["tx_packets"],
            guest_k["tx_bytes"],
            guest_k["rx_packets"],
            guest_k["rx_bytes"]
        ),
        "the vm port (tx: from the guest, rx: into it) vs the guest's eth0"
    );
    // What one port took in went to the other, or was dropped at either
    // (an early frame of the pod's from another source MAC is `spoofed`).
    assert_eq!(
        (t.tx_packets, v.tx_packets),
        (
            v.rx_packets + v.rx_dropped_total() + t.tx_dropped_total(),
            t.rx_packets + t.rx_dropped_total() + v.tx_dropped_total()
        ),
        "each port's frames went to the other or were counted dropped: {t:?} {v:?}"
    );
    assert!(
        t.tx_bytes >= v.rx_bytes && v.tx_bytes >= t.rx_bytes,
        "bytes"
    );
    if t.tx_dropped_total() + v.rx_dropped_total() == 0 {
        assert_eq!(t.tx_bytes, v.rx_bytes, "bytes pod -> guest");
    }
    if v.tx_dropped_total() + t.rx_dropped_total() == 0 {
        assert_eq!(v.tx_bytes, t.rx_bytes, "bytes guest -> pod");
    }
    assert!(v.rx_bytes > TCP_MIB << 20, "{v:?}");
    assert!(
        t.tx_packets > (TCP_MIB << 20) / 1500 && v.tx_packets > u64::from(PINGS),
        "{t:?} {v:?}"
    );
    ctd.remove_pod(&tp);
    assert!(ctd.pods().is_empty());
    tap.assert_nothing_left(&sw);
    assert!(
        !Path::new(&netns_tp).exists(),
        "the pod's network namespace is gone"
    );
    let r = g.quit();
    r.assert_ok();
}

/// The counters of `ports`, the pod's eth0 (in the named network
/// namespace `ns`) and the guest's eth0 at one quiet moment: the switch's
/// did not move while the others were read.
fn quiet_counters(
    sw: &SwitchProc,
    ports: &[&str],
    g: &mut GuestHandle,
    ns: &str,
) -> (Vec<PortStats>, LinkStats, BTreeMap<String, u64>) {
    for _ in 0..10 {
        let before = sw.quiet_stats(ports, Duration::from_millis(500), Duration::from_secs(30));
        let out = netns::run(&["ip", "-n", ns, "-s", "-s", "link", "show", "dev", IFNAME]);
        let pod = LinkStats::parse(&out).unwrap_or_else(|| panic!("`ip -s link`:\n{out}"));
        let r = parse_results(&g.exec("counters", CMD));
        let guest = r
            .iter()
            .map(|(k, v)| (k.clone(), v.parse().unwrap_or_else(|_| panic!("{k}={v}"))))
            .collect();
        let after: Vec<PortStats> = ports.iter().map(|p| sw.stats(p)).collect();
        if after == before {
            return (after, pod, guest);
        }
    }
    panic!("the counters of {ports:?} never stood still while the pod's and guest's were read");
}

#[test]
#[ignore = "needs root, podman, testpmd and vhu-switch; run with --include-ignored"]
fn podman_pods_on_vhu_cni() {
    const PM_MAC: &str = "02:00:00:00:83:01";
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
    // podman passes --mac-address as CNI_ARGS MAC: the port is locked to it.
    let cmd = pod::testpmd_command(
        "/var/run/vhu-pods/$id",
        IFNAME,
        true,
        PM_MAC,
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
        "--mac-address",
        PM_MAC,
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
    // podman 4.3 passes no CNIDeviceInfoFile either.
    assert_eq!(vu.device_info_files(), vec![Value::Null]);
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
