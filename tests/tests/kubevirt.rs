// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! End-to-end tests of `vhu-kubevirt-binding`, the KubeVirt network binding
//! sidecar, driven as virt-launcher drives it: gRPC over its Unix socket.
//!
//! * `hook_api_as_virt_launcher`: `Info` advertises `v1alpha3` with the
//!   `OnDefineDomain` and `Shutdown` hook points; `OnDefineDomain` of a
//!   KubeVirt-shaped q35 domain (`tests/fixtures/kubevirt/domain.xml`:
//!   KubeVirt's metadata namespace, disks, serial console, the pod network's
//!   interface, two NUMA cells, a `qemu:` namespaced element) with a VMI of
//!   one vhost-user interface and one of two (multiqueue, transitional,
//!   a PCI address, an ACPI index; a third interface of another binding)
//!   returns exactly the expected `<interface>` elements, shared memory on
//!   every NUMA cell, and every other element byte for byte; the result fed
//!   again comes back unchanged; `PreCloudInitIso` returns its input; eight
//!   malformed requests get `InvalidArgument` with a message naming the
//!   fault, and the sidecar still serves; `Shutdown` stops it and removes
//!   its socket; SIGTERM does the same for a second one.
//! * `through_libvirt_to_real_guests`: `vhu-switch` with an AF_PACKET uplink
//!   to a namespace host (a real kernel stack, and a TCP sink that answers
//!   with the sha256 of what it got); per "pod", `vhu-cni` ADD creates the
//!   client-role port and the device-info, the test writes the pod's
//!   `network-info` as virt-controller does and maps the pod's
//!   `/var/run/vhu/<ifname>` to the host directory (a symlink stands for
//!   the pod's mount), and the pod's own sidecar returns the domain. Two
//!   guests, defined and started with `virsh` on a real `libvirtd` (TCG,
//!   QEMU as `libvirt-qemu`, `mode='server'`), one with 1 queue pair and
//!   one with 2 (multiqueue, 2 vCPUs): their virtio-net driver comes up with
//!   that many queue pairs, every ping to the host is answered, and 4 MiB
//!   over TCP reach the sink with the sha256 the guest computed. Then the
//!   migration path: a target pod for the first VMI gets its own port and
//!   socket directory; its sidecar returns the same domain XML as the
//!   source's, and that XML, started with the target pod's view of
//!   `/var/run/vhu`, passes traffic through the target's port (its
//!   counters move, the source's do not). Last, a restart: `kill -9` of the
//!   switch in the middle of a guest's 24 MiB TCP transfer and a restart on
//!   its state: the guest keeps running (it booted once), the transfer
//!   completes with the guest's sha256, the new process carries the rest.
//!
//! They need root and the peers (`scripts/install-peers.sh`); the libvirt
//! test boots QEMU: run it under `flock /tmp/vhu-e2e.lock`.

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use vhu_api::PortView;
use vhu_kubevirt::client::{HookClient, HookError};
use vhu_kubevirt::xml::{Document, Element};
use vhu_tests::libvirt::{self, Domain, Libvirt};
use vhu_tests::netns::{Netns, VethPair};
use vhu_tests::qemu::{self, parse_results};
use vhu_tests::switch::SwitchProc;

/// The group QEMU runs in under libvirt here (its sockets get it).
const QEMU_GROUP: &str = "libvirt-qemu";
use vhu_tests::process::RunDir;
use vhu_tests::{bins, peers};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/kubevirt");
/// gRPC `InvalidArgument`.
const INVALID_ARGUMENT: i32 = 3;

fn fixture(name: &str) -> String {
    std::fs::read_to_string(Path::new(FIXTURES).join(name))
        .unwrap_or_else(|e| panic!("fixture {name}: {e}"))
}

fn binding_bin() -> PathBuf {
    bins::release_bin("vhu-kubevirt-binding", "VHU_KUBEVIRT_BIN")
}

fn cni_bin() -> PathBuf {
    bins::release_bin("vhu-cni", "VHU_CNI_BIN")
}

fn is_socket(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_socket())
}

/// A running sidecar; killed on drop.
struct Sidecar {
    child: Option<Child>,
    socket: PathBuf,
    log: PathBuf,
}

impl Sidecar {
    /// Starts `vhu-kubevirt-binding` on `dir/hooks/vhu.sock` with
    /// `network_info` and waits for its socket.
    fn start(dir: &Path, network_info: &Path, wait_ms: u64) -> Self {
        let socket = dir.join("hooks/vhu.sock");
        let log = dir.join("sidecar.log");
        let child = Command::new(binding_bin())
            .arg("--socket")
            .arg(&socket)
            .arg("--network-info")
            .arg(network_info)
            .args(["--network-info-wait-ms", &wait_ms.to_string()])
            .env("NETWORK_BINDING_PLUGIN_NAME", "vhu")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("sidecar log"))
            .spawn()
            .expect("start vhu-kubevirt-binding");
        let s = Self {
            child: Some(child),
            socket,
            log,
        };
        let t0 = Instant::now();
        while !is_socket(&s.socket) {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "no sidecar socket after 10 s:\n{}",
                s.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        s
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn client(&self) -> HookClient {
        HookClient::connect(&self.socket)
            .unwrap_or_else(|e| panic!("dial {}: {e}\n{}", self.socket.display(), self.log()))
    }

    /// Waits for the sidecar to exit; its status. It must stop within 5 s
    /// even with a client connected that answers nothing (the sidecar's
    /// graceful stop is bounded by `vhu_kubevirt::server::GRACE`, 1 s).
    fn wait_exit(&mut self) -> std::process::ExitStatus {
        let mut c = self.child.take().expect("running");
        let t0 = Instant::now();
        loop {
            if let Some(st) = c.try_wait().expect("wait") {
                return st;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "the sidecar did not stop within 5 s:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The element under `devices` aliased `alias`, serialised.
fn iface_xml(doc: &Document, alias: &str) -> Option<String> {
    doc.root()
        .child("devices")?
        .elements()
        .find(|e| {
            e.name() == "interface"
                && e.child("alias").and_then(|a| a.attr("name")).as_deref() == Some(alias)
        })
        .map(Element::to_xml)
}

/// Every child of the root but `changed` is byte for byte what it was, and
/// so is every child of `<devices>` but the vhost-user interfaces.
fn assert_rest_unchanged(before: &Document, after: &Document, changed: &[&str]) {
    let kept = |d: &Document| -> Vec<String> {
        d.root()
            .elements()
            .filter(|e| !changed.contains(&e.name()))
            .map(Element::to_xml)
            .collect()
    };
    assert_eq!(kept(before), kept(after));
    let devices = |d: &Document| -> Vec<String> {
        d.root()
            .child("devices")
            .expect("devices")
            .elements()
            .filter(|e| e.attr("type").as_deref() != Some("vhostuser"))
            .map(Element::to_xml)
            .collect()
    };
    assert_eq!(devices(before), devices(after));
}

#[test]
#[ignore = "needs the release binaries: run scripts/test.sh"]
fn hook_api_as_virt_launcher() {
    let run = RunDir::new("kv-api");
    let ni = run.join("network-info");
    // net1 has device-info (vhu-cni's, mode = the switch's role); net2 has
    // none (a CNI-only network): the in-pod path convention applies.
    std::fs::write(
        &ni,
        json!({"interfaces": [
            {"network": "net1", "mac": "02:00:00:0a:00:01", "mtu": 9000,
             "deviceInfo": {"type": "vhost-user", "version": "1.1.0",
                            "vhost-user": {"mode": "client", "path": "/var/run/vhu/pod6c270ef2f25/sock"}}},
            {"network": "net2", "mtu": 1500},
        ]})
        .to_string(),
    )
    .unwrap();
    let mut sc = Sidecar::start(run.path(), &ni, 500);
    let c = sc.client();

    // ---- Info ----
    let info = c.info().expect("Info");
    assert_eq!(info.name, "vhu-kubevirt-binding");
    assert_eq!(info.versions, ["v1alpha3"]);
    let points: Vec<(&str, i32)> = info
        .hook_points
        .iter()
        .map(|p| (p.name.as_str(), p.priority))
        .collect();
    assert_eq!(points, [("OnDefineDomain", 0), ("Shutdown", 0)]);

    // ---- OnDefineDomain, one interface ----
    let xml = fixture("domain.xml");
    let before = Document::parse(xml.as_bytes()).unwrap();
    let one = fixture("vmi-one.json");
    let out1 = c
        .on_define_domain(xml.as_bytes(), one.as_bytes())
        .unwrap_or_else(|e| panic!("OnDefineDomain: {e}\n{}", sc.log()));
    let d1 = Document::parse(&out1).expect("the result is XML");
    assert_eq!(
        iface_xml(&d1, "ua-net1").as_deref(),
        Some(
            "<interface type=\"vhostuser\"><mac address=\"02:00:00:0a:00:01\"/>\
             <source type=\"unix\" path=\"/var/run/vhu/pod6c270ef2f25/sock\" mode=\"server\"/>\
             <model type=\"virtio-non-transitional\"/>\
             <driver queues=\"1\" rx_queue_size=\"1024\" tx_queue_size=\"1024\"/>\
             <alias name=\"ua-net1\"/></interface>"
        )
    );
    assert_eq!(
        iface_xml(&d1, "ua-default"),
        iface_xml(&before, "ua-default"),
        "the pod network's interface"
    );
    assert_eq!(
        d1.root()
            .child("memoryBacking")
            .map(Element::to_xml)
            .as_deref(),
        Some("<memoryBacking><source type=\"memfd\"/><access mode=\"shared\"/></memoryBacking>")
    );
    let cells: Vec<String> = d1
        .root()
        .find(&["cpu", "numa"])
        .unwrap()
        .elements()
        .map(Element::to_xml)
        .collect();
    assert_eq!(
        cells,
        [
            "<cell id=\"0\" cpus=\"0-1\" memory=\"1048576\" unit=\"KiB\" memAccess=\"shared\"></cell>",
            "<cell id=\"1\" cpus=\"2-3\" memory=\"1048576\" unit=\"KiB\" memAccess=\"shared\"></cell>"
        ]
    );
    assert_rest_unchanged(&before, &d1, &["devices", "cpu", "memoryBacking"]);
    assert_eq!(
        d1.root()
            .find(&["metadata", "kubevirt"])
            .unwrap()
            .attr("xmlns")
            .as_deref(),
        Some("http://kubevirt.io")
    );
    // The new interface sits after the last device, indented as it is.
    let text = String::from_utf8(out1.clone()).unwrap();
    assert!(
        text.contains("</console>\n\t\t<interface type=\"vhostuser\">"),
        "{text}"
    );
    let again = c.on_define_domain(&out1, one.as_bytes()).unwrap();
    assert_eq!(again, out1, "a second OnDefineDomain changes nothing");

    // ---- OnDefineDomain, two interfaces, multiqueue ----
    let two = fixture("vmi-two.json");
    let out2 = c.on_define_domain(xml.as_bytes(), two.as_bytes()).unwrap();
    let d2 = Document::parse(&out2).unwrap();
    // 2 cores x 2 threads: 4 queue pairs.
    assert_eq!(
        iface_xml(&d2, "ua-net1").as_deref(),
        Some(
            "<interface type=\"vhostuser\"><mac address=\"02:00:00:0a:00:11\"/>\
             <source type=\"unix\" path=\"/var/run/vhu/pod6c270ef2f25/sock\" mode=\"server\"/>\
             <model type=\"virtio-transitional\"/>\
             <driver queues=\"4\" rx_queue_size=\"1024\" tx_queue_size=\"1024\"/>\
             <alias name=\"ua-net1\"/>\
             <address type=\"pci\" domain=\"0x0000\" bus=\"0x0a\" slot=\"0x00\" function=\"0x0\"/></interface>"
        )
    );
    assert_eq!(
        iface_xml(&d2, "ua-net2").as_deref(),
        Some(
            "<interface type=\"vhostuser\"><mac address=\"02:00:00:0a:00:12\"/>\
             <source type=\"unix\" path=\"/var/run/vhu/net2/sock\" mode=\"server\"/>\
             <model type=\"virtio-transitional\"/>\
             <driver queues=\"4\" rx_queue_size=\"1024\" tx_queue_size=\"1024\"/>\
             <alias name=\"ua-net2\"/><acpi index=\"7\"/></interface>"
        )
    );
    assert_eq!(
        iface_xml(&d2, "ua-other"),
        None,
        "another binding's interface"
    );
    let vhostuser = d2
        .root()
        .child("devices")
        .unwrap()
        .elements()
        .filter(|e| e.attr("type").as_deref() == Some("vhostuser"))
        .count();
    assert_eq!(vhostuser, 2);
    assert_rest_unchanged(&before, &d2, &["devices", "cpu", "memoryBacking"]);
    assert_eq!(c.on_define_domain(&out2, two.as_bytes()).unwrap(), out2);
    // From the one-interface result to the two-interface VMI: net1 is
    // replaced in place, net2 added; the same as from the original.
    assert_eq!(c.on_define_domain(&out1, two.as_bytes()).unwrap(), out2);

    // ---- PreCloudInitIso returns its input ----
    assert_eq!(
        c.pre_cloud_init_iso(b"{\"userData\":\"a\"}", b"{\"x\":1}")
            .unwrap(),
        (b"{\"userData\":\"a\"}".to_vec(), b"{\"x\":1}".to_vec())
    );

    // ---- Malformed requests: InvalidArgument, a clear message ----
    let vmi_with = |iface: Value, net: Value| {
        json!({"spec": {"domain": {"devices": {"interfaces": [iface]}}, "networks": [net]}})
            .to_string()
    };
    let vhu_net = json!({"name": "net1", "multus": {"networkName": "x"}});
    let bad: Vec<(&str, String, String, &str)> = vec![
        (
            "VMI not JSON",
            xml.clone(),
            "{not json".into(),
            "not valid JSON",
        ),
        ("empty VMI", xml.clone(), String::new(), "the VMI is empty"),
        (
            "XML unclosed",
            "<domain><devices>".into(),
            one.clone(),
            "unclosed element",
        ),
        (
            "XML mismatched",
            "<domain><devices></domain>".into(),
            one.clone(),
            "malformed XML",
        ),
        (
            "not a domain",
            "<network/>".into(),
            one.clone(),
            "not <domain>",
        ),
        (
            "interface without a network",
            xml.clone(),
            json!({"spec": {"domain": {"devices": {"interfaces": [
                {"name": "net1", "binding": {"name": "vhu"}}]}}}})
            .to_string(),
            "has no network of the same name",
        ),
        (
            "path traversal in a name",
            xml.clone(),
            vmi_with(
                json!({"name": "../../etc", "binding": {"name": "vhu"}}),
                json!({"name": "../../etc", "multus": {}}),
            ),
            "is not a valid name",
        ),
        (
            "bad MAC",
            xml.clone(),
            vmi_with(
                json!({"name": "net1", "binding": {"name": "vhu"}, "macAddress": "zz:00:00:00:00:01"}),
                vhu_net.clone(),
            ),
            "is not a MAC address",
        ),
        (
            "network missing from network-info",
            xml.clone(),
            vmi_with(
                json!({"name": "net9", "binding": {"name": "vhu"}}),
                json!({"name": "net9", "multus": {}}),
            ),
            "does not list network(s) [\"net9\"]",
        ),
        (
            "memory that cannot be shared",
            xml.replace(
                "<clock offset=\"utc\"></clock>",
                "<memoryBacking><access mode=\"private\"/></memoryBacking>",
            ),
            one.clone(),
            "access mode \"private\"",
        ),
        (
            "e1000 model",
            xml.clone(),
            vmi_with(
                json!({"name": "net1", "binding": {"name": "vhu"}, "model": "e1000"}),
                vhu_net.clone(),
            ),
            "a vhost-user interface is virtio",
        ),
    ];
    for (what, x, v, needle) in &bad {
        let e: HookError = c
            .on_define_domain(x.as_bytes(), v.as_bytes())
            .expect_err(what);
        assert_eq!(e.code, INVALID_ARGUMENT, "{what}: {e}");
        assert!(
            e.message.contains(needle),
            "{what}: {:?} lacks {needle:?}",
            e.message
        );
        println!("{what}: {}", e.message);
    }
    // Still serving, and answering as before.
    assert_eq!(
        c.on_define_domain(xml.as_bytes(), one.as_bytes()).unwrap(),
        out1
    );

    // ---- Shutdown stops it and removes its socket ----
    c.shutdown().expect("Shutdown");
    let st = sc.wait_exit();
    assert!(st.success(), "exit {st}:\n{}", sc.log());
    assert!(!sc.socket.exists(), "the socket is left:\n{}", sc.log());

    // ---- SIGTERM does the same, also with a client connected that
    // answers nothing: this client's runtime runs only inside its calls,
    // so the server's GOAWAY and PING go unanswered and only the bounded
    // grace lets the sidecar stop ----
    let run2 = RunDir::new("kv-api-term");
    let mut sc2 = Sidecar::start(run2.path(), &ni, 500);
    let held = sc2.client();
    held.info().unwrap();
    let pid = sc2.child.as_ref().unwrap().id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let st = sc2.wait_exit();
    assert!(st.success(), "exit {st}:\n{}", sc2.log());
    assert!(!sc2.socket.exists(), "the socket is left:\n{}", sc2.log());
    assert!(
        sc2.log()
            .contains("connections still open 1000 ms after the stop"),
        "the held connection did not need the grace:\n{}",
        sc2.log()
    );
    drop(held);
}

// ===== through libvirt =====

/// The namespace host behind the switch's uplink.
const HOST_IP: &str = "10.0.0.10";
const SINK_PORT: u16 = 7001;
const TX_MIB: u32 = 4;
/// What the guest sends across the switch's restart: long enough (several
/// seconds under TCG) for the kill to land in the middle.
const RESTART_MIB: u32 = 24;
const GUEST_TIMEOUT: Duration = Duration::from_secs(300);

/// `/var/run/vhu/<ifname>` on the host, standing for a pod's mount of its
/// socket directory there; removed on drop.
struct PodView {
    link: PathBuf,
}

impl PodView {
    fn new(ifname: &str, host_dir: &Path) -> Self {
        let root = Path::new(vhu_kubevirt::netinfo::DEFAULT_SOCKET_ROOT);
        std::fs::create_dir_all(root).unwrap();
        let v = Self {
            link: root.join(ifname),
        };
        v.point_to(host_dir);
        v
    }

    /// The pod now mounted: `host_dir`.
    fn point_to(&self, host_dir: &Path) {
        let _ = std::fs::remove_file(&self.link);
        std::os::unix::fs::symlink(host_dir, &self.link).unwrap();
    }
}

impl Drop for PodView {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.link);
    }
}

/// One pod of a VMI: its network namespace, `vhu-cni`'s attachment, its
/// network-info and its sidecar.
struct Pod {
    _netns: Netns,
    _dir: RunDir,
    sidecar: Sidecar,
    /// The attachment's socket directory on the host.
    host_dir: PathBuf,
    /// The switch port `vhu-cni` created.
    port: String,
}

impl Pod {
    /// `vhu-cni` ADD of `ifname` for container `cid`, with `queues` and the
    /// VMI interface's `mac` (Multus hands it over through the `mac`
    /// capability; the port is locked to it); then network-info from its
    /// device-info, and a sidecar.
    fn new(sw: &SwitchProc, pods: &Path, cid: &str, ifname: &str, queues: u32, mac: &str) -> Self {
        let netns = Netns::new();
        let dir = RunDir::new(&format!("kv-{cid}"));
        let devinfo = dir.join("device-info.json");
        // The node's configuration: the host paths, and the socket owner,
        // group and mode QEMU under libvirt needs.
        let node = vhu_tests::cni_node::write(
            dir.path(),
            &vhu_tests::cni_node::NodePaths {
                control_socket: Some(sw.control.clone()),
                state_dir: Some(dir.join("cni-state")),
                host_socket_dir: Some(pods.display().to_string()),
                device_info_dir: Some(dir.path().to_owned()),
                ..Default::default()
            },
            &format!(
                "[default]\nsocket_owners = [{:?}]\nsocket_groups = [{QEMU_GROUP:?}]\nsocket_mode = \"0660\"\n",
                libvirt::QEMU_USER
            ),
        );
        let conf = json!({
            "cniVersion": "1.1.0", "name": "vhu-net", "type": "vhu-cni",
            "kind": "vhost-user", "vmRole": "server", "queues": queues, "mtu": 1500,
            "socketOwner": libvirt::QEMU_USER, "socketGroup": QEMU_GROUP, "socketMode": "0660",
            "capabilities": {"CNIDeviceInfoFile": true, "mac": true},
            "runtimeConfig": {"CNIDeviceInfoFile": devinfo, "mac": mac},
        });
        let netns_path = format!("/var/run/netns/{}", netns.name());
        let mut child = Command::new(cni_bin())
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env(vhu_cni::node::PATH_VAR, &node)
            .envs([
                ("CNI_COMMAND", "ADD"),
                ("CNI_CONTAINERID", cid),
                ("CNI_NETNS", &netns_path),
                ("CNI_IFNAME", ifname),
                ("CNI_PATH", "/usr/lib/cni"),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("run vhu-cni");
        std::io::Write::write_all(
            &mut child.stdin.take().unwrap(),
            conf.to_string().as_bytes(),
        )
        .unwrap();
        let out = child.wait_with_output().unwrap();
        let result: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        assert!(out.status.success(), "vhu-cni ADD {cid}: {result}");
        let host_sock = PathBuf::from(
            result["interfaces"][0]["socketPath"]
                .as_str()
                .unwrap_or_else(|| panic!("no socketPath in {result}")),
        );
        let host_dir = host_sock.parent().unwrap().to_owned();
        let ports: Vec<PortView> = sw.get("/ports");
        let port = ports
            .iter()
            .find(|p| p.state.socket_path.as_deref().map(Path::new) == Some(host_sock.as_path()))
            .unwrap_or_else(|| panic!("no port on {}: {ports:?}", host_sock.display()))
            .spec
            .name
            .clone();
        // What virt-controller writes into the pod's network-info.
        let device_info: Value = serde_json::from_slice(&std::fs::read(&devinfo).unwrap()).unwrap();
        let ni = dir.join("network-info");
        std::fs::write(
            &ni,
            json!({"interfaces": [{"network": "net1", "deviceInfo": device_info, "mtu": 1500}]})
                .to_string(),
        )
        .unwrap();
        let sidecar = Sidecar::start(dir.path(), &ni, 5_000);
        Self {
            _netns: netns,
            _dir: dir,
            sidecar,
            host_dir,
            port,
        }
    }
}

/// A VMI of one `vhu` interface `net1`, whose pod interface is `ifname`.
fn guest_vmi(name: &str, mac: &str, ifname: &str, vcpus: u32) -> String {
    json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "domain": {
                "cpu": {"cores": vcpus, "sockets": 1, "threads": 1},
                "devices": {
                    "networkInterfaceMultiqueue": vcpus > 1,
                    "interfaces": [
                        {"name": "default", "masquerade": {}},
                        {"name": "net1", "binding": {"name": "vhu"}, "macAddress": mac},
                    ],
                },
            },
            "networks": [
                {"name": "default", "pod": {}},
                {"name": "net1", "multus": {"networkName": "vhu-net"}},
            ],
        },
        "status": {"interfaces": [{"name": "net1", "podInterfaceName": ifname}]},
    })
    .to_string()
}

/// A guest booted through libvirt from the sidecar's domain.
struct Guest {
    domain: Domain,
    console: PathBuf,
    starter: Option<Child>,
}

impl Guest {
    fn boot(run: &RunDir, name: &str, xml: &str) -> Self {
        let console = run.join(&format!("{name}.console"));
        let domain = Domain::define(run.path(), name, xml);
        let starter = Some(domain.start());
        Self {
            domain,
            console,
            starter,
        }
    }

    fn console(&self) -> String {
        std::fs::read_to_string(&self.console)
            .unwrap_or_default()
            .replace('\r', "")
    }

    /// Waits for `virsh start` (it returns once QEMU runs: before that the
    /// domain is `shut off` too), then for the guest to power off; its
    /// results.
    fn finish(&mut self) -> std::collections::BTreeMap<String, String> {
        if let Some(s) = self.starter.take() {
            let o = s.wait_with_output().unwrap();
            assert!(
                o.status.success(),
                "virsh start {}: {}",
                self.domain.name,
                String::from_utf8_lossy(&o.stderr)
            );
        }
        self.domain.wait_shut_off(GUEST_TIMEOUT, || self.console());
        let r = parse_results(&self.console());
        assert!(
            r.contains_key("done") && !r.contains_key("error"),
            "guest {} failed:\n{}",
            self.domain.name,
            self.console()
        );
        r
    }
}

/// The bootable KubeVirt-shaped domain for `name`, with the test's kernel
/// and initramfs spliced in.
fn bootable_domain(run: &RunDir, name: &str, vcpus: u32, guest_ip: &str) -> String {
    bootable_domain_sending(run, name, vcpus, guest_ip, TX_MIB)
}

/// [`bootable_domain`], the guest sending `mib` MiB over TCP.
fn bootable_domain_sending(
    run: &RunDir,
    name: &str,
    vcpus: u32,
    guest_ip: &str,
    mib: u32,
) -> String {
    let cmdline = format!(
        "console=ttyS0 quiet panic=-1 vhu.test=net vhu.ip={guest_ip}/24 vhu.peer={HOST_IP} \
         vhu.pings=5 vhu.size=1000 vhu.tx_port={SINK_PORT} vhu.tx_mib={mib} vhu.ipv6=0 vhu.timeout=150"
    );
    fixture("domain-libvirt.xml")
        .replace("@NAME@", name)
        .replace("@KERNEL@", run.join("vmlinuz").to_str().unwrap())
        .replace("@INITRD@", run.join("initramfs.gz").to_str().unwrap())
        .replace("@CMDLINE@", &cmdline)
        .replace(
            "@CONSOLE@",
            run.join(&format!("{name}.console")).to_str().unwrap(),
        )
        .replace("@VCPUS@", &vcpus.to_string())
        .replace("@LASTCPU@", &(vcpus - 1).to_string())
}

/// The guest's checks: its driver's queue pairs, every ping answered, the
/// sink's sha256 of the TCP transfer equal to the guest's.
fn assert_guest(who: &str, r: &std::collections::BTreeMap<String, String>, queues: u32) {
    assert_guest_sent(who, r, queues, TX_MIB);
}

/// [`assert_guest`] for a guest that sent `mib` MiB.
fn assert_guest_sent(
    who: &str,
    r: &std::collections::BTreeMap<String, String>,
    queues: u32,
    mib: u32,
) {
    println!("{who}: {r:?}");
    assert_eq!(r["queues"], queues.to_string(), "{who}: queue pairs");
    assert_eq!(
        (r["ping_sent"].as_str(), r["ping_received"].as_str()),
        ("5", "5"),
        "{who}"
    );
    let bytes = (u64::from(mib) << 20).to_string();
    assert_eq!(r["tcp_tx_bytes"], bytes, "{who}");
    assert_eq!(r["tcp_tx_peer_bytes"], bytes, "{who}");
    assert_eq!(
        r["tcp_tx_peer_sha256"], r["tcp_tx_sha256"],
        "{who}: data changed"
    );
}

#[test]
#[ignore = "needs root, libvirt and QEMU: run scripts/test.sh"]
fn through_libvirt_to_real_guests() {
    let lv = Libvirt::start();
    println!("{}", lv.version());
    let run = RunDir::new("kv-guest");
    // QEMU runs as libvirt-qemu: give it its own copies of the guest.
    let p = qemu::peers();
    std::fs::copy(&p.kernel, run.join("vmlinuz")).unwrap();
    std::fs::copy(&p.initramfs, run.join("initramfs.gz")).unwrap();
    let pods = run.join("pods");
    std::fs::create_dir_all(&pods).unwrap();

    let host = VethPair::new();
    host.set_host_ipv6(false).expect("IPv6 off on the host end");
    host.set_peer_addr(&format!("{HOST_IP}/24"));
    // The switch holds no CAP_DAC_OVERRIDE: it reaches QEMU's socket
    // directory (owner libvirt-qemu, group QEMU_GROUP, 0770) and the
    // socket QEMU makes there (group QEMU_GROUP, 0775) as a member of
    // QEMU's group, as a node's DaemonSet gives it group 107
    // (supplementalGroups) for KubeVirt's QEMU.
    let qemu_gid = vhu_tests::switch::group_id(QEMU_GROUP);
    let mut sw = SwitchProc::start_with(
        &run,
        "",
        &[],
        &vhu_tests::switch::SwitchOpts {
            wrap: vec!["setpriv".into(), format!("--groups={qemu_gid}")],
            ..Default::default()
        },
    );
    sw.add_af_packet("up", host.host());
    let mut sink = host.ns().spawn_python(
        peers::GUEST_PEER,
        &[HOST_IP, "0", &SINK_PORT.to_string(), "10.0.0.1", "0", "0"],
    );
    sink.wait_for_stdout("PEER ready", Duration::from_secs(30));

    // Two VMIs, each in its pod: 1 and 2 queue pairs.
    let pid = std::process::id();
    let specs = [
        (1u32, "02:00:00:0b:00:01", "10.0.0.1"),
        (2, "02:00:00:0b:00:02", "10.0.0.2"),
    ];
    let mut pods_up = Vec::new();
    let mut views = Vec::new();
    let mut guests = Vec::new();
    let mut xmls = Vec::new();
    for (i, (vcpus, mac, ip)) in specs.iter().enumerate() {
        let ifname = format!("kv{i}-{pid}");
        let pod = Pod::new(&sw, &pods, &format!("src{i}-{pid}"), &ifname, *vcpus, mac);
        views.push(PodView::new(&ifname, &pod.host_dir));
        let name = format!("vhu-kv{i}-{pid}");
        let xml = pod
            .sidecar
            .client()
            .on_define_domain(
                bootable_domain(&run, &name, *vcpus, ip).as_bytes(),
                guest_vmi(&name, mac, &ifname, *vcpus).as_bytes(),
            )
            .unwrap_or_else(|e| panic!("OnDefineDomain: {e}\n{}", pod.sidecar.log()));
        let xml = String::from_utf8(xml).unwrap();
        let want =
            format!("<source type=\"unix\" path=\"/var/run/vhu/{ifname}/sock\" mode=\"server\"/>");
        assert!(xml.contains(&want), "{xml}");
        assert!(
            xml.contains(&format!("<driver queues=\"{vcpus}\"")),
            "{xml}"
        );
        guests.push(Guest::boot(&run, &name, &xml));
        xmls.push(xml);
        pods_up.push(pod);
    }
    let t0 = Instant::now();
    for (i, g) in guests.iter_mut().enumerate() {
        let r = g.finish();
        assert_guest(&format!("guest {i}"), &r, specs[i].0);
    }
    println!("two guests through libvirt in {:.1?}", t0.elapsed());
    for pod in &pods_up {
        let s = sw.stats(&pod.port).total;
        assert!(s.rx_packets > 0 && s.tx_packets > 0, "{}: {s:?}", pod.port);
    }

    // ---- Migration path: the first VMI in a target pod ----
    let ifname = format!("kv0-{pid}");
    let target = Pod::new(&sw, &pods, &format!("dst0-{pid}"), &ifname, 1, specs[0].1);
    assert_ne!(target.host_dir, pods_up[0].host_dir);
    let name = format!("vhu-kv0-{pid}");
    // virt-launcher on the target calls OnDefineDomain (and discards the
    // result): it is the source's XML.
    let target_xml = target
        .sidecar
        .client()
        .on_define_domain(
            bootable_domain(&run, &name, 1, specs[0].2).as_bytes(),
            guest_vmi(&name, specs[0].1, &ifname, 1).as_bytes(),
        )
        .unwrap();
    assert_eq!(String::from_utf8(target_xml).unwrap(), xmls[0]);
    // The source's XML, in the target pod's view of /var/run/vhu.
    views[0].point_to(&target.host_dir);
    let source_before = sw.stats(&pods_up[0].port).total;
    drop(guests.remove(0));
    let mut moved = Guest::boot(&run, &name, &xmls[0]);
    let r = moved.finish();
    assert_guest("guest 0 on the target", &r, 1);
    let t = sw.stats(&target.port).total;
    assert!(t.rx_packets > 0 && t.tx_packets > 0, "target port: {t:?}");
    let s = sw.stats(&pods_up[0].port).total;
    assert_eq!(
        (s.rx_packets, s.tx_packets),
        (source_before.rx_packets, source_before.tx_packets),
        "the source's port"
    );
    drop(moved);

    // ---- Restart: kill -9 of the switch under a guest's TCP transfer ----
    // The switch is the client of QEMU's socket: restarted on its state, it
    // reconnects; the guest keeps running (it boots once), its transfer
    // resumes and completes intact.
    let ifname = format!("kv3-{pid}");
    let pod = Pod::new(
        &sw,
        &pods,
        &format!("rst-{pid}"),
        &ifname,
        1,
        "02:00:00:0b:00:03",
    );
    let _view = PodView::new(&ifname, &pod.host_dir);
    let name = format!("vhu-kv3-{pid}");
    let xml = pod
        .sidecar
        .client()
        .on_define_domain(
            bootable_domain_sending(&run, &name, 1, "10.0.0.3", RESTART_MIB).as_bytes(),
            guest_vmi(&name, "02:00:00:0b:00:03", &ifname, 1).as_bytes(),
        )
        .unwrap();
    let mut g = Guest::boot(&run, &name, &String::from_utf8(xml).unwrap());
    // Under way: far more frames from the guest than its pings and ARP.
    let t0 = Instant::now();
    while sw.stats(&pod.port).total.tx_packets < 1000 {
        assert!(
            t0.elapsed() < GUEST_TIMEOUT,
            "the guest's transfer never started:\n{}",
            g.console()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let before = sw.stats(&pod.port).total;
    sw.kill9();
    sw.restart();
    sw.wait_ready(Duration::from_secs(30));
    let r = g.finish();
    assert_guest_sent("guest across a switch restart", &r, 1, RESTART_MIB);
    let boots = g.console().matches("VHU-RESULT cpus=").count();
    assert_eq!(boots, 1, "the guest booted {boots} times:\n{}", g.console());
    let after = sw.stats(&pod.port).total;
    println!(
        "restart under traffic: {} frames from the guest before, {} after",
        before.tx_packets, after.tx_packets
    );
    assert!(
        after.tx_packets > 100 && after.rx_packets > 100,
        "the restarted switch carried the rest: {after:?}"
    );
    drop(g);
    sink.kill();
}
