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
use vhu_tests::switch::SwitchProc;
use vhu_tests::testpmd::RunDir;

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
        assert!(
            Path::new(CNI_PATH).join("host-local").is_file(),
            "host-local is missing: run scripts/install-peers.sh (containernetworking-plugins)"
        );
        c
    }

    /// A network configuration: the defaults of these tests, then `extra`'s
    /// fields (`null` removes one).
    fn conf(&self, version: &str, extra: Value) -> Value {
        let mut c = json!({
            "cniVersion": version,
            "name": "vhutest",
            "type": "vhu-cni",
            "kind": "vhost-user",
            "controlSocket": self.control,
            "hostSocketDir": self.hosts,
            "stateDir": self.state,
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
7 | socketOwner applies only | - | {"kind": "tap", "hostSocketDir": null, "socketOwner": "qemu"}
7 | must be an absolute path | - | {"hostSocketDir": "relative"}
11 | the switch does not answer | - | {"controlSocket": "@DIR@/nope.sock"}
7 | ipam.type "no-such-ipam": no such plugin in CNI_PATH | - | {"ipam": {"type": "no-such-ipam"}}
999 | IPAM plugin host-local ADD: invalid CIDR address: 300.1.0.0/24 | - | {"ipam": {"type": "host-local", "subnet": "300.1.0.0/24", "dataDir": "@DIR@/ipam"}}
101 | exists already | CID=taken | {}
101 | exists already | CID=keep | {}
4 | CNI_IFNAME is not set | CNI_IFNAME | {}
4 | unknown key "COLOR" | CNI_ARGS=K8S_POD_UID=x;COLOR=1 | {}
4 | CNI_COMMAND "ATTACH" is unknown | CNI_COMMAND=ATTACH | {}
4 | CNI_NETNS is not set | CNI_NETNS | {}
4 | CNI_PATH is not set | CNI_PATH | {}
7 | mtu: 40 is out of range | - | {"kind": "tap", "hostSocketDir": null, "mtu": 40}
4 | CNI_ARGS has no K8S_POD_UID | CNI_ARGS= | {"hostSocketDir": "/tmp/{podUID}/x"}"#;

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
        let conf = cni.conf(
            "1.0.0",
            json!({"kind": "tap", "hostSocketDir": null, "mtu": 1400}),
        );
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
        let conf = cni.conf(
            "1.1.0",
            json!({"vmRole": "client", "socketMode": "0660", "hostSocketDir": long}),
        );
        let mut socks = Vec::new();
        for pod in ["a", "b"] {
            let di = cni.dir.join(format!("di-{pod}"));
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
    let conf = cni.conf(
        "1.0.0",
        json!({"kind": "tap", "hostSocketDir": null, "mtu": 1400}),
    );
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
