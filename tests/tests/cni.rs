// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! End-to-end tests of `vhu-cni` (the release binary) run exactly as the
//! CNI spec defines (`CNI_*` environment, configuration on stdin, result or
//! error on stdout, exit status) against a live `vhu-switch`, with the
//! reference `host-local` IPAM plugin (Debian `containernetworking-plugins`,
//! `/usr/lib/cni`) on `CNI_PATH`, its `dataDir` private.
//!
//! * `cni_plugin_against_a_live_switch`, on one switch:
//!   - VERSION's exact answer;
//!   - ADD vhost-user for 0.4.0, 1.0.0 and 1.1.0: the result's fields per
//!     version (one interface with name, MAC and sandbox; `ips[].interface`
//!     = 0; `ips[].version` only in 0.4.0; `mtu` and `socketPath` only in
//!     1.1.0), the switch port (client role, the host socket path), the
//!     device-info file's exact content; CHECK succeeds; DEL twice (the
//!     second with an empty `CNI_NETNS`) leaves no port, socket directory,
//!     device-info file, record or host-local allocation;
//!   - ADD tap into a namespace: the pod's interface has the name, MAC, MTU,
//!     address and route; CHECK succeeds, then fails (code 103) once the
//!     port is removed behind the plugin's back; DEL twice;
//!   - the same interface name in two pods: the same in-pod path, different
//!     host paths; a 200-byte host socket directory, the switch's socket
//!     there with the configured mode;
//!   - GC with a valid-attachments list removes exactly the others (ports,
//!     directories, IPAM allocations);
//!   - 24 bad configurations or environments, each with its code and
//!     message, and the switch's port list, the host directories, the
//!     plugin's records and host-local's allocations unchanged;
//!   - STATUS with the switch up (exit 0), then down (code 50), and ADD
//!     with the switch down (code 11).
//! * `tap_pods_survive_a_switch_crash`: two `tap` pods exchange UDP
//!   datagrams through the switch; after `kill -9` of the switch each pod's interface
//!   is still there (same ifindex, name, MAC, MTU, address, route); a third
//!   pod's namespace is deleted while the switch is down; the restarted
//!   switch (same state directory) attaches to the two TAPs where they are
//!   and 5 of 5 round trips pass each way, while the third port is listed down with
//!   `state.error`; DEL of all three leaves no device, port or allocation.
//!
//! Needs root and the peers (`scripts/install-peers.sh`).

use std::collections::BTreeSet;
use std::io::Write;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{json, Value};
use vhu_api::PortView;
use vhu_tests::bins;
use vhu_tests::netns::Netns;
use vhu_tests::peers;
use vhu_tests::process::RunDir;
use vhu_tests::switch::SwitchProc;

const CNI_PATH: &str = "/usr/lib/cni";
const IFNAME: &str = "net1";

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

/// How one run of the plugin ended.
#[derive(Debug)]
struct Out {
    ok: bool,
    stdout: String,
    json: Value,
}

impl Out {
    fn code(&self) -> u64 {
        self.json["code"].as_u64().unwrap_or(0)
    }
}

/// The plugin and the places it uses.
struct Cni {
    dir: PathBuf,
    control: PathBuf,
    hosts: PathBuf,
    state: PathBuf,
    ipam_data: PathBuf,
}

impl Cni {
    fn new(run: &RunDir, sw: &SwitchProc) -> Self {
        let c = Self {
            dir: run.path().to_owned(),
            control: sw.control.clone(),
            hosts: run.join("hosts"),
            state: run.join("cni-state"),
            ipam_data: run.join("ipam"),
        };
        std::fs::create_dir_all(&c.hosts).unwrap();
        c.node(&c.hosts.display().to_string());
        assert!(
            Path::new(CNI_PATH).join("host-local").is_file(),
            "host-local is missing: run scripts/install-peers.sh (containernetworking-plugins)"
        );
        c
    }

    /// (Re)writes the node configuration: this run's switch, state
    /// directory, device-info directory (`devinfo` in the run directory) and socket
    /// directory `hosts`; IPAM by `host-local` (and `no-such-ipam`, for
    /// the plugin missing from `CNI_PATH`); VLANs 10 and 20 allowed beside
    /// the untagged default, socket modes up to `0660`.
    fn node(&self, hosts: &str) {
        vhu_tests::cni_node::write(
            &self.dir,
            &vhu_tests::cni_node::NodePaths {
                control_socket: Some(self.control.clone()),
                state_dir: Some(self.state.clone()),
                host_socket_dir: Some(hosts.to_owned()),
                device_info_dir: Some(self.dir.join("devinfo")),
                ..Default::default()
            },
            "ipam = [\"host-local\", \"no-such-ipam\"]\n[default]\nvlans = [10, 20]\nsocket_mode = \"0660\"\n",
        );
    }

    /// A network configuration: the defaults of these tests, then `extra`'s
    /// fields (`null` removes one).
    fn conf(&self, version: &str, extra: Value) -> Value {
        let mut c = json!({
            "cniVersion": version,
            "name": "vhutest",
            "type": "vhu-cni",
            "kind": "vhost-user",
            "ipam": {"type": "host-local", "subnet": "10.77.0.0/24",
                     "routes": [{"dst": "10.78.0.0/16"}], "dataDir": self.ipam_data},
        });
        for (k, v) in extra.as_object().unwrap() {
            if v.is_null() {
                c.as_object_mut().unwrap().remove(k);
            } else {
                c[k] = v.clone();
            }
        }
        c
    }

    /// Runs the plugin with `env` (the `CNI_*` variables) and `stdin`.
    fn run_raw(&self, env: &[(&str, &str)], stdin: &[u8]) -> Out {
        let mut child = Command::new(cni_bin())
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env(
                vhu_cni::node::PATH_VAR,
                vhu_tests::cni_node::path_in(&self.dir),
            )
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run vhu-cni");
        child.stdin.take().unwrap().write_all(stdin).unwrap();
        let o = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
        let json = serde_json::from_str(&stdout).unwrap_or(Value::Null);
        Out {
            ok: o.status.success(),
            stdout,
            json,
        }
    }

    /// Runs `cmd` for container `cid` in `netns` with `args` as `CNI_ARGS`.
    fn run(&self, cmd: &str, cid: &str, netns: &str, args: &str, conf: &Value) -> Out {
        self.run_raw(
            &[
                ("CNI_COMMAND", cmd),
                ("CNI_CONTAINERID", cid),
                ("CNI_NETNS", netns),
                ("CNI_IFNAME", IFNAME),
                ("CNI_ARGS", args),
                ("CNI_PATH", CNI_PATH),
            ],
            conf.to_string().as_bytes(),
        )
    }

    fn ok(&self, cmd: &str, cid: &str, netns: &str, args: &str, conf: &Value) -> Value {
        let o = self.run(cmd, cid, netns, args, conf);
        assert!(o.ok, "{cmd} {cid}: {}", o.stdout);
        o.json
    }

    /// Addresses host-local has handed out (its files named by address).
    fn allocations(&self) -> BTreeSet<String> {
        files(&self.ipam_data)
            .into_iter()
            .filter_map(|p| {
                let n = p.file_name()?.to_str()?.to_owned();
                n.parse::<std::net::IpAddr>().ok().map(|_| n)
            })
            .collect()
    }

    /// What a bad request must not change: port names and every file under
    /// the run directory but the switch's own.
    fn snapshot(&self, sw: &SwitchProc) -> (Vec<String>, Vec<PathBuf>) {
        let ports: Vec<PortView> = sw.get("/ports");
        let mut f = files(&self.hosts);
        f.extend(files(&self.state));
        f.extend(files(&self.ipam_data));
        (ports.into_iter().map(|p| p.spec.name).collect(), f)
    }
}

/// Every file and directory under `d`, sorted.
fn files(d: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(d) {
        for e in rd.flatten() {
            out.push(e.path());
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                out.extend(files(&e.path()));
            }
        }
    }
    out.sort();
    out
}

fn port_names(sw: &SwitchProc) -> Vec<String> {
    let ports: Vec<PortView> = sw.get("/ports");
    ports.into_iter().map(|p| p.spec.name).collect()
}

fn netns_path(ns: &Netns) -> String {
    format!("/var/run/netns/{}", ns.name())
}

/// The result's shape for `version`, and its one interface.
fn check_result(version: &str, r: &Value, sandbox: &str, socket: Option<&Path>) -> String {
    assert_eq!(r["cniVersion"], version, "{r}");
    let ifs = r["interfaces"].as_array().expect("interfaces");
    assert_eq!(ifs.len(), 1, "{r}");
    let i = &ifs[0];
    assert_eq!(i["name"], IFNAME, "{r}");
    assert_eq!(i["sandbox"], sandbox, "{r}");
    let mac = i["mac"].as_str().expect("mac").to_owned();
    assert!(
        mac.parse::<vhu_api::MacAddr>()
            .is_ok_and(|m| m.is_unicast()),
        "{r}"
    );
    let ips = r["ips"].as_array().expect("ips");
    assert_eq!(ips.len(), 1, "{r}");
    assert_eq!(ips[0]["interface"], 0, "{r}");
    assert!(
        ips[0]["address"].as_str().unwrap().starts_with("10.77.0."),
        "{r}"
    );
    assert_eq!(ips[0]["gateway"], "10.77.0.1", "{r}");
    assert_eq!(ips[0].get("version").is_some(), version == "0.4.0", "{r}");
    assert_eq!(r["routes"], json!([{"dst": "10.78.0.0/16"}]), "{r}");
    let want_sock = socket.filter(|_| version == "1.1.0");
    assert_eq!(
        i.get("socketPath").and_then(Value::as_str),
        want_sock.map(|p| p.to_str().unwrap()),
        "{r}"
    );
    mac
}

/// Bad ADDs, one a line: `code | message part | environment edits | the
/// configuration's fields over the defaults`. Edits: `VAR=value` sets,
/// `VAR` unsets, `CID=` names the container; `RAW:` gives stdin as it is;
/// `@DIR@` is the run directory. `taken` has a socket directory already,
/// `keep` is attached.
const BAD: &str = r#"6 | not JSON | - | RAW:{
1 | "0.3.1" is not supported | - | {"cniVersion": "0.3.1"}
7 | cniVersion is missing | - | {"cniVersion": null}
7 | name is missing | - | {"name": null}
7 | kind is missing | - | {"kind": null}
7 | kind "veth" is unknown | - | {"kind": "veth"}
7 | vmRole "master" is unknown | - | {"vmRole": "master"}
7 | vlan: VLAN id 4095 is out of range 1-4094 | - | {"vlan": 4095}
7 | must also be in the trunk | - | {"vlan": {"trunk": [5], "native": 6}}
7 | invalid type: string "big" | - | {"mtu": "big"}
7 | queues: 500 is out of range 1-128 | - | {"queues": 500}
7 | not a unicast | - | {"mac": "ff:ff:ff:ff:ff:ff"}
7 | socketMode: "rw" is not an octal | - | {"socketMode": "rw"}
2 | unsupported field "colour" | - | {"colour": "red"}
7 | socketOwner applies only | - | {"kind": "tap", "socketOwner": "qemu"}
7 | must be an absolute path | - | {"hostSocketDir": "relative"}
7 | nope.sock" is not this node's (control_socket | - | {"controlSocket": "@DIR@/nope.sock"}
7 | stateDir "/tmp" is not this node's | - | {"stateDir": "/tmp"}
7 | is not this node's (device_dir | - | {"deviceDir": "@DIR@"}
7 | is not inside this node's device-info directory | - | {"runtimeConfig": {"CNIDeviceInfoFile": "/etc/vhu-victim"}}
7 | cannot be its own IPAM plugin | - | {"ipam": {"type": "vhu-cni"}}
7 | ipam.type "dhcp" is not an IPAM plugin this node allows | - | {"ipam": {"type": "dhcp"}}
7 | vlan: VLAN 30 is not allowed (allowed: 0, 10, 20) | - | {"vlan": 30}
7 | a trunk port is not allowed | - | {"vlan": {"trunk": [10]}}
7 | macLock: a port without a MAC lock is not allowed | - | {"macLock": false}
7 | socketOwner: "0" is not allowed | - | {"socketOwner": "0"}
7 | socketMode: "0666" is wider than allowed | - | {"socketMode": "0666"}
7 | ipam.type "no-such-ipam": no such plugin in CNI_PATH | - | {"ipam": {"type": "no-such-ipam"}}
999 | IPAM plugin host-local ADD: invalid CIDR address: 300.1.0.0/24 | - | {"ipam": {"type": "host-local", "subnet": "300.1.0.0/24", "dataDir": "@DIR@/ipam"}}
101 | exists already | CID=taken | {}
101 | exists already | CID=keep | {}
4 | CNI_IFNAME is not set | CNI_IFNAME | {}
4 | unknown key "COLOR" | CNI_ARGS=K8S_POD_UID=x;COLOR=1 | {}
4 | CNI_COMMAND "ATTACH" is unknown | CNI_COMMAND=ATTACH | {}
4 | CNI_NETNS is not set | CNI_NETNS | {}
4 | CNI_PATH is not set | CNI_PATH | {}
7 | mtu: 40 is out of range | - | {"kind": "tap", "mtu": 40}
7 | hostSocketDir "/tmp/{podUID}/x" is not this node's | CNI_ARGS= | {"hostSocketDir": "/tmp/{podUID}/x"}"#;

#[test]
#[ignore = "needs root, vhu-switch and host-local; run with --include-ignored"]
fn cni_plugin_against_a_live_switch() {
    let run = RunDir::new("cni");
    let mut sw = SwitchProc::start(&run, "", &[]);
    let cni = Cni::new(&run, &sw);
    let pod_uid = |n: &str| format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_UID=pod-{n}");

    // VERSION.
    let v = cni.run_raw(&[("CNI_COMMAND", "VERSION")], b"{\"cniVersion\":\"1.1.0\"}");
    assert!(v.ok, "{}", v.stdout);
    assert_eq!(
        v.json,
        json!({"cniVersion": "1.1.0", "supportedVersions": ["0.4.0", "1.0.0", "1.1.0"]})
    );

    // vhost-user in every version.
    let pod_ns = Netns::new();
    let sandbox = netns_path(&pod_ns);
    for version in ["0.4.0", "1.0.0", "1.1.0"] {
        let cid = format!("vu-{}", version.replace('.', ""));
        let args = pod_uid(&cid);
        let devinfo = cni.dir.join(format!("devinfo/{cid}_{IFNAME}"));
        let conf = cni.conf(
            version,
            json!({"mtu": 9000, "queues": 2, "vlan": 10,
                   "capabilities": {"CNIDeviceInfoFile": true},
                   "runtimeConfig": {"CNIDeviceInfoFile": devinfo}}),
        );
        let r = cni.ok("ADD", &cid, &sandbox, &args, &conf);
        let host_sock = cni.hosts.join(format!("pod-{cid}/{IFNAME}/sock"));
        check_result(version, &r, &sandbox, Some(&host_sock));
        if version == "1.1.0" {
            assert_eq!(r["interfaces"][0]["mtu"], 9000, "{r}");
        } else {
            assert!(r["interfaces"][0].get("mtu").is_none(), "{r}");
        }
        let ports: Vec<PortView> = sw.get("/ports");
        assert_eq!(ports.len(), 1, "{ports:?}");
        let p = &ports[0].spec;
        assert!(p.name.starts_with("cni-"), "{p:?}");
        assert_eq!(
            p.role,
            Some(vhu_api::Role::Client),
            "vmRole server: the switch connects"
        );
        assert_eq!(p.socket.as_deref(), host_sock.to_str());
        assert_eq!(
            (p.mtu, p.queues, p.vlan.clone()),
            (Some(9000), Some(2), Some(vhu_api::Vlan::Access(10)))
        );
        assert!(host_sock.parent().unwrap().is_dir());
        let di: Value = serde_json::from_slice(&std::fs::read(&devinfo).unwrap()).unwrap();
        assert_eq!(
            di,
            json!({"type": "vhost-user", "version": "1.1.0",
                   "vhost-user": {"mode": "client", "path": "/var/run/vhu/net1/sock"}})
        );
        assert_eq!(cni.allocations().len(), 1);

        let mut check = conf.clone();
        check["prevResult"] = r.clone();
        cni.ok("CHECK", &cid, &sandbox, &args, &check);

        let mut del = conf.clone();
        del["prevResult"] = r;
        for netns in [sandbox.as_str(), ""] {
            let o = cni.run("DEL", &cid, netns, &args, &del);
            assert!(o.ok && o.stdout.is_empty(), "DEL {netns:?}: {}", o.stdout);
        }
        assert!(port_names(&sw).is_empty());
        assert!(!host_sock.parent().unwrap().exists());
        assert!(!cni.hosts.join(format!("pod-{cid}")).exists());
        assert!(!devinfo.exists());
        assert!(cni.allocations().is_empty(), "{:?}", cni.allocations());
        assert!(files(&cni.state.join("vhutest")).is_empty());
    }

    // tap into a namespace.
    {
        let conf = cni.conf("1.0.0", json!({"kind": "tap", "mtu": 1400}));
        let r = cni.ok("ADD", "tap1", &sandbox, "", &conf);
        let mac = check_result("1.0.0", &r, &sandbox, None);
        let addr = r["ips"][0]["address"].as_str().unwrap().to_owned();
        let link = pod_ns.exec(&["ip", "-o", "link", "show", "dev", IFNAME]);
        assert!(link.contains(&format!("link/ether {mac}")), "{link}");
        assert!(link.contains("mtu 1400") && link.contains(",UP"), "{link}");
        let a = pod_ns.exec(&["ip", "-o", "addr", "show", "dev", IFNAME]);
        assert!(a.contains(&format!("inet {addr}")), "{a}");
        let rt = pod_ns.exec(&["ip", "route", "show", "10.78.0.0/16"]);
        assert!(rt.contains(&format!("dev {IFNAME}")), "{rt}");
        let ports: Vec<PortView> = sw.get("/ports");
        assert_eq!(ports.len(), 1);
        assert_eq!(ports[0].spec.kind, vhu_api::PortKind::Tap);
        assert_eq!(
            ports[0].spec.mac.as_deref().map(|m| m[0].to_string()),
            Some(mac.clone())
        );

        let mut check = conf.clone();
        check["prevResult"] = r.clone();
        cni.ok("CHECK", "tap1", &sandbox, "", &check);
        let name = &ports[0].spec.name;
        sw.call("DELETE", &format!("/ports/{name}"), "", 204);
        let o = cni.run("CHECK", "tap1", &sandbox, "", &check);
        assert!(!o.ok, "{}", o.stdout);
        assert_eq!(o.code(), 103, "{}", o.stdout);
        assert!(
            o.json["msg"]
                .as_str()
                .unwrap()
                .contains(&format!("the switch has no port {name}")),
            "{}",
            o.stdout
        );
        for netns in [sandbox.as_str(), ""] {
            let o = cni.run("DEL", "tap1", netns, "", &check);
            assert!(o.ok && o.stdout.is_empty(), "DEL {netns:?}: {}", o.stdout);
        }
        assert!(!pod_ns
            .try_exec(&["ip", "link", "show", "dev", IFNAME])
            .status
            .success());
        assert!(cni.allocations().is_empty());
    }

    // Same ifname in two pods; a 200-byte host directory; switch-created socket.
    {
        let long = cni.dir.join(format!(
            "l{}",
            "x".repeat(200 - cni.dir.as_os_str().len() - 2)
        ));
        assert_eq!(long.as_os_str().len(), 200);
        cni.node(&long.display().to_string());
        let conf = cni.conf("1.1.0", json!({"vmRole": "client", "socketMode": "0660"}));
        let mut socks = Vec::new();
        for pod in ["a", "b"] {
            let di = cni.dir.join(format!("devinfo/di-{pod}"));
            let mut c = conf.clone();
            c["runtimeConfig"] = json!({"CNIDeviceInfoFile": di});
            let r = cni.ok("ADD", &format!("same-{pod}"), &sandbox, &pod_uid(pod), &c);
            let s = PathBuf::from(r["interfaces"][0]["socketPath"].as_str().unwrap());
            assert_eq!(s, long.join(format!("pod-{pod}/{IFNAME}/sock")));
            assert!(s.as_os_str().len() > 108);
            let di: Value = serde_json::from_slice(&std::fs::read(&di).unwrap()).unwrap();
            assert_eq!(
                di["vhost-user"],
                json!({"mode": "server", "path": "/var/run/vhu/net1/sock"})
            );
            let meta = std::fs::metadata(&s).expect("the switch's socket");
            assert!(meta.file_type().is_socket());
            assert_eq!(meta.permissions().mode() & 0o777, 0o660);
            let dmode = std::fs::metadata(s.parent().unwrap())
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(dmode & 0o777, 0o770);
            socks.push(s);
        }
        assert_ne!(socks[0], socks[1]);
        for pod in ["a", "b"] {
            cni.ok("DEL", &format!("same-{pod}"), "", &pod_uid(pod), &conf);
            assert!(!long.join(format!("pod-{pod}")).exists());
        }
        assert!(port_names(&sw).is_empty());
        cni.node(&cni.hosts.display().to_string());
    }

    // GC keeps exactly the valid attachments.
    {
        let conf = cni.conf("1.1.0", json!({}));
        for c in ["gc1", "gc2", "gc3"] {
            cni.ok("ADD", c, &sandbox, &pod_uid(c), &conf);
        }
        assert_eq!(port_names(&sw).len(), 3);
        let keep = port_names(&sw);
        let mut gc = conf.clone();
        gc["cni.dev/valid-attachments"] = json!([{"containerID": "gc2", "ifname": IFNAME}]);
        let o = cni.run_raw(
            &[("CNI_COMMAND", "GC"), ("CNI_PATH", CNI_PATH)],
            gc.to_string().as_bytes(),
        );
        assert!(o.ok && o.stdout.is_empty(), "{}", o.stdout);
        let left = port_names(&sw);
        assert_eq!(left.len(), 1, "{left:?}");
        assert!(keep.contains(&left[0]));
        assert_eq!(cni.allocations().len(), 1);
        assert!(cni.hosts.join(format!("pod-gc2/{IFNAME}")).is_dir());
        assert!(!cni.hosts.join("pod-gc1").exists() && !cni.hosts.join("pod-gc3").exists());
        cni.ok("DEL", "gc2", &sandbox, &pod_uid("gc2"), &conf);
        assert!(port_names(&sw).is_empty() && cni.allocations().is_empty());
    }

    // Bad configurations and environments change nothing.
    {
        // One attachment stays up, so that nothing-changed means something.
        let base = cni.conf("1.0.0", json!({}));
        cni.ok("ADD", "keep", &sandbox, &pod_uid("keep"), &base);
        std::fs::create_dir_all(cni.hosts.join(format!("pod-taken/{IFNAME}"))).unwrap();
        let before = cni.snapshot(&sw);
        assert!(BAD.lines().count() >= 20);
        for (i, row) in BAD.lines().enumerate() {
            let f: Vec<&str> = row.splitn(4, " | ").map(str::trim).collect();
            let [code, msg, env_edit, extra] = f[..] else {
                panic!("bad row {row:?}");
            };
            let mut cid = format!("b{i}");
            let mut env: Vec<(&str, String)> = Vec::new();
            let mut args = None;
            for e in env_edit.split_whitespace().filter(|e| *e != "-") {
                match e.split_once('=') {
                    Some(("CID", v)) => cid = v.to_owned(),
                    Some(("CNI_ARGS", v)) => args = Some(v.to_owned()),
                    Some((k, v)) => env.push((k, v.to_owned())),
                    None => env.push((e, String::new())),
                }
            }
            let mut full = vec![
                ("CNI_COMMAND", "ADD".to_owned()),
                ("CNI_CONTAINERID", cid.clone()),
                ("CNI_NETNS", sandbox.clone()),
                ("CNI_IFNAME", IFNAME.to_owned()),
                ("CNI_ARGS", args.unwrap_or_else(|| pod_uid(&cid))),
                ("CNI_PATH", CNI_PATH.to_owned()),
            ];
            for (k, v) in &env {
                full.retain(|(n, _)| n != k);
                if !v.is_empty() {
                    full.push((k, v.clone()));
                }
            }
            let extra = extra.replace("@DIR@", cni.dir.to_str().unwrap());
            let stdin = match extra.strip_prefix("RAW:") {
                Some(raw) => raw.to_owned(),
                None => cni
                    .conf("1.0.0", serde_json::from_str(&extra).expect(row))
                    .to_string(),
            };
            let full: Vec<(&str, &str)> = full.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let o = cni.run_raw(&full, stdin.as_bytes());
            assert!(!o.ok, "{row}: accepted: {}", o.stdout);
            assert_eq!(o.code().to_string(), code, "{row}: {}", o.stdout);
            let m = o.json["msg"].as_str().unwrap_or_default();
            assert!(m.contains(msg), "{row}: {m:?} lacks {msg:?}");
            assert!(o.json["cniVersion"].is_string(), "{}", o.stdout);
            assert_eq!(cni.snapshot(&sw), before, "{row} changed something");
        }
        cni.ok("DEL", "keep", "", &pod_uid("keep"), &base);
    }

    // STATUS up and down; ADD with the switch down.
    let conf = cni.conf("1.1.0", json!({}));
    let status = || {
        cni.run_raw(
            &[("CNI_COMMAND", "STATUS"), ("CNI_PATH", CNI_PATH)],
            conf.to_string().as_bytes(),
        )
    };
    let o = status();
    assert!(o.ok && o.stdout.is_empty(), "{}", o.stdout);
    sw.stop();
    let o = status();
    assert!(!o.ok);
    assert_eq!(o.code(), 50, "{}", o.stdout);
    assert!(
        o.json["msg"].as_str().unwrap().contains("does not answer"),
        "{}",
        o.stdout
    );
    let o = cni.run("ADD", "down", &sandbox, &pod_uid("down"), &conf);
    assert_eq!(o.code(), 11, "{}", o.stdout);
    assert!(cni.allocations().is_empty());
}

/// What must not change of a pod's interface across a switch restart:
/// ifindex, name, MAC, MTU (`ip -o link`), its IPv4 addresses and the
/// route the IPAM plugin gave.
fn pod_interface(ns: &Netns) -> (String, String, String, Vec<String>, String) {
    let link = ns.exec(&["ip", "-o", "link", "show", "dev", IFNAME]);
    let mut f = link.split_whitespace();
    let index = f.next().unwrap_or_default().to_owned();
    let name = f.next().unwrap_or_default().to_owned();
    let word_after = |w: &str| {
        let mut it = link.split_whitespace().skip_while(|x| *x != w);
        it.nth(1).unwrap_or_default().to_owned()
    };
    let addrs = ns
        .exec(&["ip", "-o", "-4", "addr", "show", "dev", IFNAME])
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace().skip_while(|x| *x != "inet");
            it.nth(1).map(str::to_owned)
        })
        .collect();
    // Without carrier (no queue attached) the route is marked `linkdown`.
    let route = ns.exec(&["ip", "route", "show", "10.78.0.0/16"]);
    let route = route.trim().trim_end_matches(" linkdown").to_owned();
    (index, name, word_after("link/ether"), addrs, route)
}

/// A UDP client: sends N datagrams to ADDR:PORT one at a time, each resent
/// up to 5 times a second apart until its reversed echo comes back; prints
/// how many were answered.
const UDP_ROUND_TRIPS: &str = r#"
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(1)
dst, n, ok = (sys.argv[1], int(sys.argv[2])), int(sys.argv[3]), 0
for i in range(n):
    msg = b"vhu-round-trip-%d" % i
    for _ in range(5):
        s.sendto(msg, dst)
        try:
            if s.recvfrom(100)[0] == msg[::-1]:
                ok += 1
                break
        except socket.timeout:
            pass
print(ok, flush=True)
"#;

/// 5 UDP round trips from `from` to `to`'s address `addr` through the
/// switch (Python's sockets, `tests/peers/udp_echo.py` in `to`): all 5
/// answered, and the echo saw exactly 5 datagrams.
fn round_trips(from: &Netns, to: &Netns, addr: &str) {
    let mut echo = to.spawn_python(peers::UDP_ECHO, &[addr, "7777", "5"]);
    echo.wait_for_stdout("READY", std::time::Duration::from_secs(10));
    let out = from.exec(&["python3", "-c", UDP_ROUND_TRIPS, addr, "7777", "5"]);
    assert_eq!(out.trim(), "5", "{}", echo.describe());
    assert!(echo.wait(std::time::Duration::from_secs(10)).success());
    assert_eq!(echo.stdout().lines().count(), 6, "{}", echo.stdout());
}

fn persisted_ports(sw: &SwitchProc) -> Vec<String> {
    let state: Value =
        serde_json::from_slice(&std::fs::read(sw.state.join("ports.json")).unwrap()).unwrap();
    let mut names: Vec<String> = state["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

#[test]
#[ignore = "needs root, vhu-switch and host-local; run with --include-ignored"]
fn tap_pods_survive_a_switch_crash() {
    let run = RunDir::new("cni-tap-crash");
    let mut sw = SwitchProc::start(&run, "", &[]);
    let cni = Cni::new(&run, &sw);
    let conf = cni.conf("1.0.0", json!({"kind": "tap", "mtu": 1400}));
    let (pod_a, pod_b, pod_c) = (Netns::new(), Netns::new(), Netns::new());
    let pods = [("ra", &pod_a), ("rb", &pod_b), ("rc", &pod_c)];
    let mut addr = Vec::new();
    for (cid, ns) in pods {
        let r = cni.ok("ADD", cid, &netns_path(ns), "", &conf);
        let a = r["ips"][0]["address"].as_str().unwrap();
        addr.push(a.split('/').next().unwrap().to_owned());
    }
    let names = port_names(&sw);
    assert_eq!(names.len(), 3);
    round_trips(&pod_a, &pod_b, &addr[1]);
    let before = [pod_interface(&pod_a), pod_interface(&pod_b)];
    assert_eq!(before[0].1, format!("{IFNAME}:"));
    assert_eq!(before[0].3, vec![format!("{}/24", addr[0])]);
    assert!(before[0].4.contains(IFNAME), "{:?}", before[0]);

    // A crash: the pods keep their interfaces as they were.
    sw.kill9();
    assert_eq!([pod_interface(&pod_a), pod_interface(&pod_b)], before);
    assert!(pod_a
        .exec(&["ip", "-o", "link", "show", "dev", IFNAME])
        .contains("NO-CARRIER"));
    assert!(pod_a
        .exec(&["ip", "-d", "link", "show", "dev", IFNAME])
        .contains(" persist on"));
    // The third pod goes away while the switch is down.
    let c_port = cni.port_of("rc");
    drop(pod_c);

    sw.restart();
    let ports: Vec<PortView> = sw.get("/ports");
    assert_eq!(ports.len(), 3, "{ports:?}");
    for p in &ports {
        if p.spec.name == c_port {
            assert!(!p.state.connected, "{p:?}");
            let e = p.state.error.as_deref().unwrap_or_default();
            assert!(e.contains("cannot enter network namespace"), "{e}");
        } else {
            assert!(p.state.connected && p.state.error.is_none(), "{p:?}");
        }
    }
    let one: PortView = sw.get(&format!("/ports/{c_port}"));
    assert!(one.state.error.is_some());
    assert_eq!(persisted_ports(&sw), names);
    assert_eq!([pod_interface(&pod_a), pod_interface(&pod_b)], before);
    round_trips(&pod_a, &pod_b, &addr[1]);
    round_trips(&pod_b, &pod_a, &addr[0]);
    let up: Vec<&str> = ports
        .iter()
        .map(|p| p.spec.name.as_str())
        .filter(|n| *n != c_port)
        .collect();
    for st in sw.settle(&up) {
        // 10 datagrams each way (and ARP, perhaps) since the restart.
        assert!(st.total.tx_packets >= 10, "{}: {:?}", st.port, st.total);
        assert!(st.total.rx_packets >= 10, "{}: {:?}", st.port, st.total);
    }

    // DEL removes everything; the gone pod's DEL too (no namespace).
    cni.ok("DEL", "rc", "", "", &conf);
    assert_eq!(port_names(&sw).len(), 2);
    for (cid, ns) in [("ra", &pod_a), ("rb", &pod_b)] {
        cni.ok("DEL", cid, &netns_path(ns), "", &conf);
        let o = ns.try_exec(&["ip", "link", "show", "dev", IFNAME]);
        assert!(!o.status.success(), "{cid}: the TAP is still there");
    }
    assert!(port_names(&sw).is_empty());
    assert!(persisted_ports(&sw).is_empty());
    assert!(cni.allocations().is_empty(), "{:?}", cni.allocations());
    assert!(files(&cni.state.join("vhutest")).is_empty());
}

impl Cni {
    /// The switch port of container `cid`'s attachment, from the plugin's
    /// record.
    fn port_of(&self, cid: &str) -> String {
        files(&self.state.join("vhutest"))
            .iter()
            .filter_map(|f| serde_json::from_slice::<Value>(&std::fs::read(f).ok()?).ok())
            .find(|r| r["containerID"] == cid)
            .and_then(|r| r["port"].as_str().map(str::to_owned))
            .unwrap_or_else(|| panic!("no record of {cid}"))
    }
}

/// Asserts a victim file still has `content` and `mode`.
fn intact(f: &Path, content: &[u8], mode: u32) {
    let m = std::fs::symlink_metadata(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
    assert!(
        m.file_type().is_file(),
        "{} is not a file any more",
        f.display()
    );
    assert_eq!(m.permissions().mode() & 0o7777, mode, "{}", f.display());
    assert_eq!(std::fs::read(f).unwrap(), content, "{}", f.display());
}

/// A namespace user's network configuration and a pod's own directory
/// reach nothing but the attachment's own port and files
/// (`docs/security.md`): host paths a network names are refused (ADD) or
/// ignored (DEL); a device-info file outside the node's directory is
/// refused; links a pod puts in its socket directory are removed, never
/// followed; `vhu-cni` cannot be its own IPAM plugin, by name or under
/// another; a port made without a VLAN is an access port of the untagged
/// VLAN, locked to its MAC, and its tagged frames do not reach another
/// VLAN's pod; a DEL with the switch down succeeds, and the port goes once
/// the switch is back. Each case asserts that a victim file, directory and
/// another attachment's port are unchanged.
#[test]
#[ignore = "needs root, vhu-switch and host-local; run with --include-ignored"]
fn hostile_networks_reach_only_their_own_attachment() {
    let run = RunDir::new("cni-hostile");
    let mut sw = SwitchProc::start(&run, "", &[]);
    let cni = Cni::new(&run, &sw);
    let pod_ns = Netns::new();
    let sandbox = netns_path(&pod_ns);
    let args =
        |cid: &str| format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=tenant;K8S_POD_UID=pod-{cid}");

    // The victim: another tenant's attachment, and host files.
    let victim_conf = cni.conf("1.1.0", json!({}));
    cni.ok("ADD", "victim", &sandbox, &args("victim"), &victim_conf);
    let victim_port = port_names(&sw);
    assert_eq!(victim_port.len(), 1);
    let vdir = run.join("victim");
    std::fs::create_dir_all(&vdir).unwrap();
    let (keep, sock) = (vdir.join("keep"), vdir.join("sock"));
    std::fs::write(&keep, b"precious").unwrap();
    std::fs::set_permissions(&keep, std::fs::Permissions::from_mode(0o640)).unwrap();
    std::fs::write(&sock, b"not yours").unwrap();
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o600)).unwrap();
    let unchanged = |what: &str, sw: &SwitchProc| {
        intact(&keep, b"precious", 0o640);
        intact(&sock, b"not yours", 0o600);
        let entries: Vec<PathBuf> = files(&vdir);
        assert_eq!(
            entries,
            vec![keep.clone(), sock.clone()],
            "{what}: victim dir"
        );
        let vm = std::fs::metadata(&vdir).unwrap();
        assert_eq!(
            vm.permissions().mode() & 0o777,
            0o755,
            "{what}: victim dir mode"
        );
        assert!(
            port_names(sw).contains(&victim_port[0]),
            "{what}: the victim's port is gone"
        );
    };
    std::fs::set_permissions(&vdir, std::fs::Permissions::from_mode(0o755)).unwrap();
    unchanged("set-up", &sw);

    // 1. A device-info path anywhere: refused (the old plugin replaced the
    //    file with its JSON, mode 0444).
    let o = cni.run(
        "ADD",
        "a1",
        &sandbox,
        &args("a1"),
        &cni.conf(
            "1.1.0",
            json!({"runtimeConfig": {"CNIDeviceInfoFile": keep}}),
        ),
    );
    assert_eq!(o.code(), 7, "{}", o.stdout);
    assert!(
        o.stdout
            .contains("is not inside this node's device-info directory"),
        "{}",
        o.stdout
    );
    unchanged("device-info outside", &sw);
    assert_eq!(port_names(&sw), victim_port);

    // 2. A DEL whose network names a pod-writable state directory holding
    //    a planted record of the victim's port and file: the directory is
    //    ignored (the old plugin unlinked the record's socket path and
    //    removed the record's port).
    let planted = run.join("planted/vhutest");
    std::fs::create_dir_all(&planted).unwrap();
    let port_a2 = vhu_cni::attach::port_name("vhutest", "a2", IFNAME);
    std::fs::write(
        planted.join(format!("{port_a2}.json")),
        json!({"network": "vhutest", "containerID": "a2", "ifname": IFNAME, "netns": "",
               "args": "", "port": victim_port[0],
               "host": {"pod_dir": vdir, "owns_pod_dir": false, "if_dir": vdir, "socket": sock}})
        .to_string(),
    )
    .unwrap();
    let hostile = cni.conf("1.1.0", json!({"stateDir": run.join("planted")}));
    let o = cni.run("DEL", "a2", &sandbox, &args("a2"), &hostile);
    assert!(o.ok, "DEL: {}", o.stdout);
    unchanged("planted record", &sw);
    // ADD with the same network: refused, naming the field.
    let o = cni.run("ADD", "a2", &sandbox, &args("a2"), &hostile);
    assert_eq!(o.code(), 7, "{}", o.stdout);
    assert!(o.stdout.contains("stateDir"), "{}", o.stdout);
    unchanged("stateDir on ADD", &sw);

    // 3. The pod swaps its socket directory for a link to the victim's
    //    directory: DEL removes the link, not the victim's "sock" (the old
    //    plugin unlinked <link>/sock).
    let conf = cni.conf("1.1.0", json!({}));
    cni.ok("ADD", "a3", &sandbox, &args("a3"), &conf);
    let if_dir = cni.hosts.join(format!("pod-a3/{IFNAME}"));
    assert!(if_dir.is_dir());
    std::fs::rename(&if_dir, cni.hosts.join("pod-a3/moved")).unwrap();
    std::os::unix::fs::symlink(&vdir, &if_dir).unwrap();
    cni.ok("DEL", "a3", &sandbox, &args("a3"), &conf);
    unchanged("link in the pod's directory", &sw);
    assert!(
        std::fs::symlink_metadata(&if_dir).is_err(),
        "the link is removed"
    );
    assert_eq!(port_names(&sw), victim_port);

    // 4. A link where the plugin is to create the socket directory: ADD
    //    refuses, nothing is created or chowned through it.
    std::fs::create_dir_all(cni.hosts.join("pod-a4")).unwrap();
    std::os::unix::fs::symlink(&vdir, cni.hosts.join(format!("pod-a4/{IFNAME}"))).unwrap();
    let o = cni.run(
        "ADD",
        "a4",
        &sandbox,
        &args("a4"),
        &cni.conf("1.1.0", json!({"socketMode": "0660"})),
    );
    assert_eq!(o.code(), 101, "{}", o.stdout);
    unchanged("link before ADD", &sw);
    assert_eq!(port_names(&sw), victim_port);

    // 5. vhu-cni as its own IPAM plugin: by name, and under a name the node
    //    allows (a link on CNI_PATH); both end at once, nothing made.
    let o = cni.run(
        "ADD",
        "a5",
        &sandbox,
        &args("a5"),
        &cni.conf("1.1.0", json!({"ipam": {"type": "vhu-cni"}})),
    );
    assert_eq!(o.code(), 7, "{}", o.stdout);
    assert!(
        o.stdout.contains("cannot be its own IPAM plugin"),
        "{}",
        o.stdout
    );
    let bin = run.join("cni-bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(cni_bin(), bin.join("alias")).unwrap();
    std::os::unix::fs::symlink(
        Path::new(CNI_PATH).join("host-local"),
        bin.join("host-local"),
    )
    .unwrap();
    let node = vhu_tests::cni_node::path_in(&cni.dir);
    let text = std::fs::read_to_string(&node).unwrap();
    std::fs::write(&node, text.replace("\"no-such-ipam\"", "\"alias\"")).unwrap();
    let t0 = std::time::Instant::now();
    let o = cni.run_raw(
        &[
            ("CNI_COMMAND", "ADD"),
            ("CNI_CONTAINERID", "a5"),
            ("CNI_NETNS", &sandbox),
            ("CNI_IFNAME", IFNAME),
            ("CNI_ARGS", &args("a5")),
            ("CNI_PATH", bin.to_str().unwrap()),
        ],
        cni.conf("1.1.0", json!({"ipam": {"type": "alias"}}))
            .to_string()
            .as_bytes(),
    );
    assert!(!o.ok, "{}", o.stdout);
    assert!(
        o.stdout.contains("cannot be its own IPAM plugin"),
        "{}",
        o.stdout
    );
    assert!(t0.elapsed() < std::time::Duration::from_secs(10));
    std::fs::write(&node, text).unwrap();
    unchanged("IPAM loop", &sw);
    assert_eq!(port_names(&sw), victim_port);

    // 6. No VLAN named: an access port of the untagged VLAN, locked to the
    //    attachment's MAC (the old plugin made a trunk of every VLAN, and
    //    locked a vhost-user port only to a MAC given explicitly).
    let r = cni.ok("ADD", "a6", &sandbox, &args("a6"), &conf);
    let mac = r["interfaces"][0]["mac"].as_str().unwrap().to_owned();
    let ports: Vec<PortView> = sw.get("/ports");
    let p = ports
        .iter()
        .find(|p| p.spec.name == vhu_cni::attach::port_name("vhutest", "a6", IFNAME))
        .expect("a6's port");
    assert_eq!(p.spec.vlan, Some(vhu_api::Vlan::Access(0)), "{p:?}");
    assert_eq!(
        p.spec
            .mac
            .as_ref()
            .map(|m| m.iter().map(ToString::to_string).collect::<Vec<_>>()),
        Some(vec![mac])
    );
    assert_eq!(
        p.spec.attachment.as_deref(),
        Some(format!("cni/tenant/vhutest/a6/{IFNAME}").as_str())
    );

    // 7. DEL with the switch down succeeds and cleans what is local; the
    //    port goes once the switch answers again (STATUS).
    sw.kill9();
    cni.ok("DEL", "a6", &sandbox, &args("a6"), &conf);
    assert!(!cni.hosts.join(format!("pod-a6/{IFNAME}")).exists());
    assert!(files(&cni.state.join("pending")).len() == 1);
    sw.restart();
    assert!(
        port_names(&sw).contains(&p.spec.name),
        "persisted across the restart"
    );
    let o = cni.run_raw(
        &[("CNI_COMMAND", "STATUS"), ("CNI_PATH", CNI_PATH)],
        conf.to_string().as_bytes(),
    );
    assert!(o.ok, "{}", o.stdout);
    assert_eq!(port_names(&sw), victim_port, "the pending port is removed");
    assert!(files(&cni.state.join("pending")).is_empty());
    unchanged("switch down", &sw);

    // 8. Tagged frames into another tenant's VLAN: a tap pod whose network
    //    names no VLAN sends VID 20 broadcasts (from its own MAC) towards a
    //    tap pod of VLAN 20. Its port is an access port: they are dropped
    //    there (`vlan_denied`) and the victim receives nothing (the old
    //    plugin's port was a trunk of every VLAN and carried them in).
    let (vns, ans) = (Netns::new(), Netns::new());
    let tap = |vlan: Value| {
        let mut c = cni.conf("1.0.0", json!({"kind": "tap"}));
        if !vlan.is_null() {
            c["vlan"] = vlan;
        }
        c
    };
    cni.ok("ADD", "tv", &netns_path(&vns), &args("tv"), &tap(json!(20)));
    let r = cni.ok(
        "ADD",
        "ta",
        &netns_path(&ans),
        &args("ta"),
        &tap(Value::Null),
    );
    let amac = r["interfaces"][0]["mac"].as_str().unwrap().replace(':', "");
    let name_of = |cid: &str| vhu_cni::attach::port_name("vhutest", cid, IFNAME);
    let (vport, aport) = (name_of("tv"), name_of("ta"));
    let v0 = sw.stats(&vport).total.rx_packets;
    // An ARP request for 10.99.0.2 from 10.99.0.1, tagged VID 20.
    let frame = format!(
        "ffffffffffff{amac}81000014080600010800060400{amac}0a630001000000000000\
         0a630002{}",
        "00".repeat(18)
    );
    let frames: Vec<&str> = std::iter::repeat_n(frame.as_str(), 5).collect();
    let mut send = vec![IFNAME];
    send.extend(frames);
    ans.exec(&[&["python3", "-c", peers::SEND_FRAMES][..], &send[..]].concat());
    let a = sw.settle(&[&aport, &vport]);
    let denied = a[0]
        .total
        .tx_dropped
        .get("vlan_denied")
        .copied()
        .unwrap_or(0);
    assert!(
        denied >= 5,
        "the tagged frames are dropped and counted: {a:?}"
    );
    assert_eq!(
        a[1].total.rx_packets, v0,
        "VLAN 20's pod received them: {a:?}"
    );
    for cid in ["tv", "ta"] {
        cni.ok("DEL", cid, "", &args(cid), &tap(Value::Null));
    }

    cni.ok("DEL", "victim", &sandbox, &args("victim"), &victim_conf);
    assert!(port_names(&sw).is_empty());
}
