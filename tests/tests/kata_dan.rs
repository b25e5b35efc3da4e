// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! End-to-end tests of `vhu-cni`'s Kata runtime-rs DAN attachments
//! (`"kata": "dan"`), the plugin run as a runtime runs it, against a live
//! `vhu-switch`, with `host-local` IPAM.
//!
//! * `dan_files_from_adds_and_dels`: a sandbox with a `host-tap` network
//!   (2 queues) and a `vhost-user` one: the DAN file read back with Kata's
//!   own schema (the types below are runtime-rs's `dan.rs`: field names,
//!   the `type` tag, serde defaults) agrees with the CNI results, the
//!   device-info file and the switch's ports (an `af_packet` port on the
//!   host TAP, multiqueue and `vnet_hdr`; a client-role port on the
//!   socket's path, which does not exist; its directory does); CHECK
//!   passes; eight concurrent ADDs into another sandbox all land in its
//!   file; DEL of everything leaves no file, lock, TAP, socket directory,
//!   port, record or allocation, and a second DEL succeeds.
//! * `a_guest_driven_from_its_dan_file`: one QEMU guest (TCG) started as
//!   Kata's runtime would start it from the DAN file alone: `-netdev
//!   tap,ifname=<tap_name>,script=no,downscript=no,queues=<queue_num>` for
//!   the host-tap device, QEMU the vhost-user server at `path` for the
//!   other, each NIC with its `guest_mac`, addresses and routes from
//!   `network_info`. Through both it reaches a peer namespace on another
//!   switch port (a route via the peer included), each port taking in
//!   exactly what its guest NIC sent; after `kill -9` and a restart of
//!   the switch, and after a SIGTERM and a restart, the traffic resumes by
//!   itself on both; DEL leaves nothing.
//!
//! Needs root and the peers (`scripts/install-peers.sh`).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use vhu_api::{PortKind, PortStats, PortView, Role};
use vhu_tests::bins;
use vhu_tests::netns::VethPair;
use vhu_tests::process::RunDir;
use vhu_tests::qemu::{spawn_guest, GuestHandle, GuestOpts};
use vhu_tests::switch::SwitchProc;

const CNI_PATH: &str = "/usr/lib/cni";
const CMD: Duration = Duration::from_secs(60);

// ===== Kata runtime-rs's DAN schema (crates/resource/src/network/dan.rs) =====

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct DanConfig {
    netns: Option<String>,
    devices: Vec<DanDevice>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct DanDevice {
    name: String,
    #[serde(default = "generate_private_mac_addr")]
    guest_mac: String,
    device: Device,
    network_info: NetworkInfo,
}

/// Kata's default: a random locally administered MAC (here fixed: only
/// its use when `guest_mac` is absent matters).
fn generate_private_mac_addr() -> String {
    "02:00:00:00:00:00".to_owned()
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
enum Device {
    #[serde(rename = "vhost-user")]
    VhostUser {
        path: String,
        #[serde(default)]
        queue_num: usize,
        #[serde(default)]
        queue_size: usize,
    },
    #[serde(rename = "host-tap")]
    HostTap {
        tap_name: String,
        #[serde(default)]
        queue_num: usize,
        #[serde(default)]
        queue_size: usize,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct NetworkInfo {
    interface: Interface,
    #[serde(default)]
    routes: Vec<Route>,
    #[serde(default)]
    neighbors: Vec<ArpNeighbor>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Interface {
    ip_addresses: Vec<String>,
    #[serde(default = "default_mtu")]
    mtu: u64,
    #[serde(default)]
    ntype: String,
    #[serde(default)]
    flags: u32,
}

fn default_mtu() -> u64 {
    1500
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Route {
    #[serde(default)]
    dest: String,
    #[serde(default)]
    gateway: String,
    #[serde(default)]
    source: String,
    #[serde(default)]
    scope: u32,
    #[serde(default)]
    flags: u32,
    #[serde(default)]
    mtu: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct ArpNeighbor {
    ip_address: Option<String>,
    #[serde(default)]
    hardware_addr: String,
    #[serde(default)]
    state: u32,
    #[serde(default)]
    flags: u32,
}

// ===== The plugin =====

fn cni_bin() -> PathBuf {
    bins::from_env("VHU_CNI_BIN").unwrap_or_else(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        bins::built_example(
            "vhu-cni",
            &[root.join("target/release/vhu-cni")],
            "cargo build --release --workspace",
            "VHU_CNI_BIN",
        )
    })
}

/// The plugin on a node whose `[kata]` settings point into a run
/// directory.
struct Node {
    dir: PathBuf,
    dans: PathBuf,
    sockets: PathBuf,
    state: PathBuf,
    ipam: PathBuf,
    devinfo: PathBuf,
}

impl Node {
    fn new(run: &RunDir, sw: &SwitchProc) -> Self {
        let n = Self {
            dir: run.path().to_owned(),
            dans: run.join("dans"),
            // Short: a VMM binds its sockets there (sun_path).
            sockets: PathBuf::from(format!("/tmp/vk{}", std::process::id())),
            state: run.join("cni-state"),
            ipam: run.join("ipam"),
            devinfo: run.join("devinfo"),
        };
        assert!(
            Path::new(CNI_PATH).join("host-local").is_file(),
            "host-local is missing: run scripts/install-peers.sh (containernetworking-plugins)"
        );
        vhu_tests::cni_node::write(
            &n.dir,
            &vhu_tests::cni_node::NodePaths {
                control_socket: Some(sw.control.clone()),
                state_dir: Some(n.state.clone()),
                device_info_dir: Some(n.devinfo.clone()),
                ..Default::default()
            },
            &format!(
                "ipam = [\"host-local\"]\n[default]\nkata_dan = true\n[kata]\ndan_dir = {:?}\n\
                 socket_dir = {:?}\nsocket_dir_mode = \"0750\"\n",
                n.dans.display().to_string(),
                n.sockets.display().to_string()
            ),
        );
        n
    }

    /// A DAN network: `kind`, subnet `10.<net>.0.0/24`, `extra`'s fields.
    fn conf(&self, name: &str, kind: &str, net: u8, extra: Value) -> Value {
        let mut c = json!({
            "cniVersion": "1.1.0", "name": name, "type": "vhu-cni", "kind": kind, "kata": "dan",
            "ipam": {"type": "host-local", "subnet": format!("10.{net}.0.0/24"),
                     "rangeStart": format!("10.{net}.0.10"), "dataDir": self.ipam},
        });
        for (k, v) in extra.as_object().unwrap() {
            c[k] = v.clone();
        }
        c
    }

    /// Runs `cmd` for sandbox `sid`, interface `ifname`; (exit ok, stdout JSON).
    fn run(&self, cmd: &str, sid: &str, ifname: &str, conf: &Value) -> (bool, Value) {
        let mut child = Command::new(cni_bin())
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env(
                vhu_cni::node::PATH_VAR,
                vhu_tests::cni_node::path_in(&self.dir),
            )
            .env("CNI_COMMAND", cmd)
            .env("CNI_CONTAINERID", sid)
            .env(
                "CNI_NETNS",
                if cmd == "DEL" {
                    ""
                } else {
                    "/var/run/netns/kata"
                },
            )
            .env("CNI_IFNAME", ifname)
            .env("CNI_ARGS", "IgnoreUnknown=1;K8S_POD_NAMESPACE=kata")
            .env("CNI_PATH", CNI_PATH)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run vhu-cni");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(conf.to_string().as_bytes())
            .unwrap();
        let o = child.wait_with_output().unwrap();
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        (
            o.status.success(),
            serde_json::from_str(&out).unwrap_or(Value::String(out)),
        )
    }

    fn ok(&self, cmd: &str, sid: &str, ifname: &str, conf: &Value) -> Value {
        let (ok, v) = self.run(cmd, sid, ifname, conf);
        assert!(ok, "{cmd} {sid} {ifname}: {v}");
        v
    }

    fn dan(&self, sid: &str) -> DanConfig {
        let f = self.dans.join(format!("{sid}.json"));
        let b = std::fs::read(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        serde_json::from_slice(&b).unwrap_or_else(|e| {
            panic!(
                "Kata's types refuse {}: {e}\n{}",
                f.display(),
                String::from_utf8_lossy(&b)
            )
        })
    }

    /// Nothing of any attachment is left on the node or the switch.
    fn assert_nothing_left(&self, sw: &SwitchProc) {
        let ports: Vec<PortView> = sw.get("/ports");
        assert!(
            ports.iter().all(|p| !p.spec.name.starts_with("cni-")),
            "{ports:?}"
        );
        for d in [&self.dans, &self.sockets, &self.state.join("kata")] {
            let left: Vec<_> = std::fs::read_dir(d)
                .map(|r| r.flatten().map(|e| e.path()).collect())
                .unwrap_or_default();
            assert!(left.is_empty(), "{}: {left:?}", d.display());
        }
        let ipam: Vec<_> = walk(&self.ipam)
            .into_iter()
            .filter(|p| {
                let n = p.file_name().unwrap().to_string_lossy();
                n.starts_with("10.")
            })
            .collect();
        assert!(ipam.is_empty(), "host-local allocations left: {ipam:?}");
        let links = String::from_utf8_lossy(
            &Command::new("ip")
                .args(["-o", "link", "show"])
                .output()
                .unwrap()
                .stdout,
        )
        .into_owned();
        assert!(!links.contains(": vhuk"), "a host TAP is left: {links}");
    }
}

impl Drop for Node {
    /// The socket directory lies outside the run directory (short paths).
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.sockets);
    }
}

fn walk(d: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

fn port_on(sw: &SwitchProc, pred: impl Fn(&PortView) -> bool) -> PortView {
    let ports: Vec<PortView> = sw.get("/ports");
    ports
        .into_iter()
        .find(|p| pred(p))
        .unwrap_or_else(|| panic!("no such port: {:?}", sw.get::<Value>("/ports")))
}

/// A host link's `tun_flags` (`IFF_*`).
fn tun_flags(name: &str) -> u32 {
    let t = std::fs::read_to_string(format!("/sys/class/net/{name}/tun_flags"))
        .unwrap_or_else(|e| panic!("{name} is not a TAP: {e}"));
    u32::from_str_radix(t.trim().trim_start_matches("0x"), 16).unwrap()
}

const IFF_VNET_HDR: u32 = 0x4000;
const IFF_MULTI_QUEUE: u32 = 0x100;

/// The CNI result's MAC and addresses.
fn result_of(r: &Value) -> (String, Vec<String>) {
    let mac = r["interfaces"][0]["mac"].as_str().unwrap().to_owned();
    let ips = r["ips"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["address"].as_str().unwrap().to_owned())
        .collect();
    (mac, ips)
}

#[test]
#[ignore = "needs root, vhu-switch and host-local; run with --include-ignored"]
fn dan_files_from_adds_and_dels() {
    let run = RunDir::new("kata-dan");
    let sw = SwitchProc::start(&run, "", &[]);
    let node = Node::new(&run, &sw);
    let sid = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90";
    let tap_net = node.conf(
        "kata-tap",
        "host-tap",
        91,
        json!({"queues": 2, "mtu": 1400,
               "ipam": {"type": "host-local", "subnet": "10.91.0.0/24", "rangeStart": "10.91.0.10",
                        "dataDir": node.ipam, "routes": [{"dst": "10.93.0.0/24", "gw": "10.91.0.200"}]}}),
    );
    let devinfo = node.devinfo.join("net1.json");
    let vu_net = node.conf(
        "kata-vu",
        "vhost-user",
        92,
        json!({"runtimeConfig": {"CNIDeviceInfoFile": devinfo}}),
    );
    let r0 = node.ok("ADD", sid, "eth0", &tap_net);
    let r1 = node.ok("ADD", sid, "net1", &vu_net);
    let c = node.dan(sid);
    assert_eq!(c.netns, None);
    assert_eq!(c.devices.len(), 2, "{c:?}");
    let (mac0, ips0) = result_of(&r0);
    let (mac1, ips1) = result_of(&r1);

    // host-tap: the entry, the TAP, the af_packet port on it.
    let d0 = &c.devices[0];
    assert_eq!(
        (d0.name.as_str(), d0.guest_mac.as_str()),
        ("eth0", mac0.as_str())
    );
    assert_eq!(d0.network_info.interface.ip_addresses, ips0);
    assert_eq!(d0.network_info.interface.mtu, 1400);
    assert_eq!(
        d0.network_info.routes,
        [Route {
            dest: "10.93.0.0/24".into(),
            gateway: "10.91.0.200".into(),
            source: String::new(),
            scope: 0,
            flags: 0,
            mtu: 0
        }]
    );
    let Device::HostTap {
        tap_name,
        queue_num: 2,
        queue_size: 256,
    } = &d0.device
    else {
        panic!("{:?}", d0.device)
    };
    assert!(tap_name.len() <= 15, "{tap_name}");
    let f = tun_flags(tap_name);
    assert!(
        f & IFF_VNET_HDR != 0 && f & IFF_MULTI_QUEUE != 0,
        "{tap_name}: flags {f:#x}"
    );
    let mtu = std::fs::read_to_string(format!("/sys/class/net/{tap_name}/mtu")).unwrap();
    assert_eq!(mtu.trim(), "1400");
    // The host's stack answers nothing on it.
    for (f, want) in [
        (
            format!("/proc/sys/net/ipv6/conf/{tap_name}/disable_ipv6"),
            "1",
        ),
        (
            format!("/proc/sys/net/ipv4/conf/{tap_name}/arp_ignore"),
            "8",
        ),
    ] {
        assert_eq!(std::fs::read_to_string(&f).unwrap().trim(), want, "{f}");
    }
    let p0 = port_on(&sw, |p| p.spec.interface.as_deref() == Some(tap_name));
    assert_eq!(p0.spec.kind, PortKind::AfPacket);
    assert_eq!(p0.spec.mac.as_ref().unwrap()[0].to_string(), mac0);

    // vhost-user: the entry, the socket's directory (the socket not
    // created), the client port, the device-info file, the result.
    let d1 = &c.devices[1];
    assert_eq!(
        (d1.name.as_str(), d1.guest_mac.as_str()),
        ("net1", mac1.as_str())
    );
    assert_eq!(d1.network_info.interface.ip_addresses, ips1);
    let Device::VhostUser {
        path,
        queue_num: 1,
        queue_size: 256,
    } = &d1.device
    else {
        panic!("{:?}", d1.device)
    };
    assert_eq!(
        Path::new(path),
        node.sockets.join(sid).join("net1.sock"),
        "the socket path"
    );
    assert!(!Path::new(path).exists(), "the VMM creates {path}");
    let meta = std::fs::metadata(Path::new(path).parent().unwrap()).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
        0o750
    );
    assert_eq!(r1["interfaces"][0]["socketPath"], json!(path));
    let p1 = port_on(&sw, |p| p.spec.socket.as_deref() == Some(path.as_str()));
    assert_eq!(
        (p1.spec.kind, p1.spec.role),
        (PortKind::VhostUser, Some(Role::Client))
    );
    let di: Value = serde_json::from_slice(&std::fs::read(&devinfo).unwrap()).unwrap();
    assert_eq!(
        di,
        json!({"type": "vhost-user", "version": "1.1.0",
               "vhost-user": {"mode": "client", "path": path}})
    );

    // CHECK with the ADD's result.
    for (net, ifname, r) in [(&tap_net, "eth0", &r0), (&vu_net, "net1", &r1)] {
        let mut c = net.clone();
        c["prevResult"] = r.clone();
        node.ok("CHECK", sid, ifname, &c);
    }
    // The same interface again: a collision, nothing changed.
    let (ok, e) = node.run("ADD", sid, "eth0", &vu_net);
    assert!(!ok && e["code"] == 101, "{e}");
    assert_eq!(node.dan(sid), c);

    // Eight ADDs of one sandbox at once: every device lands.
    let sid2 = "concurrent0sandbox";
    std::thread::scope(|s| {
        for i in 0..8 {
            let (node, net) = (&node, &vu_net);
            s.spawn(move || node.ok("ADD", sid2, &format!("net{i}"), net));
        }
    });
    let c2 = node.dan(sid2);
    let mut names: Vec<_> = c2.devices.iter().map(|d| d.name.clone()).collect();
    names.sort();
    assert_eq!(names, (0..8).map(|i| format!("net{i}")).collect::<Vec<_>>());
    std::thread::scope(|s| {
        for i in 0..8 {
            let (node, net) = (&node, &vu_net);
            s.spawn(move || node.ok("DEL", sid2, &format!("net{i}"), net));
        }
    });

    // DEL one: the other stays in the file; DEL both: nothing is left.
    node.ok("DEL", sid, "eth0", &tap_net);
    let c = node.dan(sid);
    assert_eq!(c.devices.len(), 1);
    assert_eq!(c.devices[0].name, "net1");
    assert!(!Path::new(&format!("/sys/class/net/{tap_name}")).exists());
    node.ok("DEL", sid, "net1", &vu_net);
    assert!(!devinfo.exists());
    node.assert_nothing_left(&sw);
    for (net, ifname) in [(&tap_net, "eth0"), (&vu_net, "net1")] {
        node.ok("DEL", sid, ifname, net);
    }
    node.assert_nothing_left(&sw);
}

/// Counters of a switch port.
fn stats(sw: &SwitchProc, port: &str) -> (u64, u64) {
    let s: PortStats = sw.get(&format!("/ports/{port}/stats"));
    (s.total.rx_packets, s.total.tx_packets)
}

fn wait_connected(sw: &SwitchProc, names: &[&str]) {
    let t0 = Instant::now();
    loop {
        let ports: Vec<PortView> = sw.get("/ports");
        if names
            .iter()
            .all(|n| ports.iter().any(|p| p.spec.name == *n && p.state.connected))
        {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "ports {names:?} not connected: {ports:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The guest's commands that configure the NIC of `d` as Kata's agent does
/// (found by its MAC; MTU, addresses, routes), and print its name.
fn configure(d: &DanDevice) -> String {
    let i = &d.network_info.interface;
    // Answer ARP only on the interface that has the address, as each
    // network's NIC would alone in its segment.
    let mut c = format!(
        "echo 1 >/proc/sys/net/ipv4/conf/all/arp_ignore; n=; for p in /sys/class/net/*; do [ \"$(cat $p/address)\" = {} ] && n=${{p##*/}}; done; \
         [ -n \"$n\" ] && ip link set dev $n mtu {} up",
        d.guest_mac, i.mtu
    );
    for a in &i.ip_addresses {
        c += &format!(" && ip addr add {a} dev $n");
    }
    for r in &d.network_info.routes {
        c += &format!(" && ip route add {} via {} dev $n", r.dest, r.gateway);
    }
    c + " && echo nic=$n"
}

/// The guest's `tx_packets` of eth0 (the vhost-user NIC) and eth1 (the
/// host-tap NIC).
fn guest_tx(g: &mut GuestHandle) -> [u64; 2] {
    let out = g.exec(
        "cat /sys/class/net/eth0/statistics/tx_packets /sys/class/net/eth1/statistics/tx_packets",
        CMD,
    );
    let n: Vec<u64> = out
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    assert_eq!(n.len(), 2, "{out}");
    [n[0], n[1]]
}

/// Pings the peer from the guest through both devices (and the route via
/// the peer). Each port counts at least the pings both ways, and exactly
/// the frames the guest's NIC sent into it.
fn pings(sw: &SwitchProc, g: &mut GuestHandle, [port_t, port_v]: [&String; 2], what: &str) {
    let ports = [port_v.as_str(), port_t.as_str()];
    let g0 = guest_tx(g);
    let before: BTreeMap<&str, (u64, u64)> = ports.iter().map(|p| (*p, stats(sw, p))).collect();
    for dst in ["10.91.0.200", "10.93.0.1", "10.92.0.200"] {
        let (code, out) = g.try_exec(&format!("ping -c 3 -i 0.2 -W 5 {dst}"), CMD);
        assert_eq!(code, 0, "{what}: ping {dst}: {out}");
    }
    // Via the TAP 6 requests and replies, via vhost-user 3 (ARP on top).
    for (p, n) in [(port_t, 6), (port_v, 3)] {
        let (rx, tx) = stats(sw, p);
        let (rx0, tx0) = before[p.as_str()];
        assert!(
            rx - rx0 >= n && tx - tx0 >= n,
            "{what}: port {p}: rx {rx0}->{rx}, tx {tx0}->{tx}"
        );
    }
    // What each NIC sent is what its port took in (`tx`: into the switch);
    // a frame sent between the two reads shows on the next try.
    let t0 = Instant::now();
    loop {
        let g1 = guest_tx(g);
        let s1 = sw.settle(&ports);
        let sent: Vec<u64> = (0..2).map(|i| g1[i] - g0[i]).collect();
        let took: Vec<u64> = (0..2)
            .map(|i| s1[i].total.tx_packets - before[ports[i]].1)
            .collect();
        if sent == took {
            println!(
                "{what}: guest sent {sent:?} (eth0 vhost-user, eth1 host-tap), ports took {took:?}"
            );
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "{what}: the guest sent {sent:?}, its ports {ports:?} took {took:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
#[ignore = "needs root, vhu-switch, host-local and QEMU; run with --include-ignored"]
fn a_guest_driven_from_its_dan_file() {
    let run = RunDir::new("kata-guest");
    let mut sw = SwitchProc::start(&run, "", &[]);
    let node = Node::new(&run, &sw);
    // The peer: a namespace on another switch port, in both subnets and
    // behind a route of the host-tap network.
    let peer = VethPair::new();
    sw.add_af_packet("peer", peer.host());
    for a in ["10.91.0.200/24", "10.92.0.200/24", "10.93.0.1/32"] {
        peer.set_peer_addr(a);
    }
    let sid = "guest0sandbox";
    let tap_net = node.conf(
        "kata-tap",
        "host-tap",
        91,
        json!({"queues": 2,
               "ipam": {"type": "host-local", "subnet": "10.91.0.0/24", "rangeStart": "10.91.0.10",
                        "dataDir": node.ipam, "routes": [{"dst": "10.93.0.0/24", "gw": "10.91.0.200"}]}}),
    );
    let vu_net = node.conf("kata-vu", "vhost-user", 92, json!({}));
    node.ok("ADD", sid, "eth0", &tap_net);
    node.ok("ADD", sid, "net1", &vu_net);

    // ---- the VMM, from the file alone ------------------------------------
    let c = node.dan(sid);
    let by_kind = |host_tap: bool| {
        c.devices
            .iter()
            .find(|d| matches!(d.device, Device::HostTap { .. }) == host_tap)
            .unwrap()
            .clone()
    };
    let (dt, dv) = (by_kind(true), by_kind(false));
    let Device::HostTap {
        tap_name,
        queue_num: tq,
        ..
    } = &dt.device
    else {
        unreachable!()
    };
    let Device::VhostUser {
        path,
        queue_num: vq,
        ..
    } = &dv.device
    else {
        unreachable!()
    };
    assert!(!Path::new(path).exists(), "Kata refuses an existing {path}");
    let ip_v = &dv.network_info.interface.ip_addresses[0];
    let mut g = spawn_guest(GuestOpts {
        socket: PathBuf::from(path),
        qemu_is_server: true,
        queues: u16::try_from(*vq).unwrap(),
        mac: dv.guest_mac.clone(),
        cmdline_extra: format!("vhu.test=agent vhu.ip={ip_v} vhu.ipv6=0"),
        timeout: Duration::from_secs(900),
        extra_args: vec![
            "-netdev".into(),
            format!("tap,id=t0,ifname={tap_name},script=no,downscript=no,vhost=off,queues={tq}"),
            "-device".into(),
            format!(
                "virtio-net-pci,netdev=t0,mac={},mq=on,vectors={}",
                dt.guest_mac,
                2 * tq + 2
            ),
        ],
        ..GuestOpts::default()
    });
    let port_t = port_on(&sw, |p| p.spec.interface.as_deref() == Some(tap_name))
        .spec
        .name;
    let port_v = port_on(&sw, |p| p.spec.socket.as_deref() == Some(path.as_str()))
        .spec
        .name;
    wait_connected(&sw, &[&port_v, &port_t]);
    g.wait_agent(Duration::from_secs(600));
    let out = g.exec(&configure(&dt), CMD);
    assert!(out.contains("nic=eth1"), "{out}");

    pings(&sw, &mut g, [&port_t, &port_v], "first");

    // ---- the switch killed and restarted: traffic resumes by itself -------
    sw.kill9();
    sw.restart();
    wait_connected(&sw, &[&port_v, &port_t]);
    pings(&sw, &mut g, [&port_t, &port_v], "after kill -9");
    let st = sw.stop();
    assert!(st.success(), "SIGTERM: {st}");
    sw.restart();
    wait_connected(&sw, &[&port_v, &port_t]);
    pings(&sw, &mut g, [&port_t, &port_v], "after SIGTERM");

    // ---- DEL once the VM is gone: nothing is left -------------------------
    drop(g);
    node.ok("DEL", sid, "eth0", &tap_net);
    node.ok("DEL", sid, "net1", &vu_net);
    node.ok("DEL", sid, "net1", &vu_net);
    let ports: Vec<PortView> = sw.get("/ports");
    assert_eq!(ports.len(), 1, "only the peer's port: {ports:?}");
    node.assert_nothing_left(&sw);
}
