// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The Kubernetes manifests under `deploy/` (docs/kubernetes.md):
//!
//! * `manifests_validate_against_the_newest_kubernetes`: every `*.yaml`
//!   under `deploy/` (found by walking it, so a new one is covered) passes
//!   `kubernetes-validate --strict` for the newest Kubernetes version the
//!   validator knows: each built-in resource is reported passed, by kind
//!   and name, and only the custom resources listed in `CUSTOM` (Multus,
//!   KubeVirt: the validator has no schema for them) are left to the
//!   checks below; copies of the DaemonSet with an unknown field and with a
//!   wrong type are rejected, naming the field.
//! * `manifests_agree_with_the_programs`: what a validator cannot see. One
//!   image everywhere (`localhost/vhu:<workspace version>`, the KubeVirt
//!   binding's `sidecarImage` too); every program the manifests run from it
//!   is installed by `deploy/Containerfile`, whose default command is the
//!   KubeVirt sidecar; every flag passed to a program of this workspace is
//!   in that program's `--help` (the built release binary); every
//!   NetworkAttachmentDefinition's `config` parses as a vhu-cni
//!   configuration (the crate's own parser) naming the switch's control
//!   socket, with `vmRole` `server` for vhost-user (VMs survive upgrades)
//!   and a `resourceName` that is the device plugin's `--resource`; every
//!   network a pod or VM names exists, a VM's binding is registered; the
//!   state, control-socket and CNI directories are host paths; the update
//!   strategy is `OnDelete` or a rolling update of one node at a time; and
//!   the switch starts, ready, on the ConfigMap's configuration.
//! * `switch_capabilities_are_what_its_port_kinds_keep`: the switch,
//!   started as root on the ConfigMap's configuration, says which
//!   capabilities it keeps for its port kinds: for every kind (the systemd
//!   unit) they are exactly the unit's `AmbientCapabilities=` and
//!   `CapabilityBoundingSet=`, for the DaemonSet's `--port-kinds` exactly
//!   its `capabilities.add` (after `drop: [ALL]`), never `DAC_OVERRIDE`,
//!   `SYS_ADMIN` only with `pod-tap`; run as the DaemonSet runs it (uid 0,
//!   those capabilities as its bounding set, its supplementary groups, no
//!   new privileges: `setpriv`) it starts, ready, and keeps them all; the
//!   unit runs as `vhu` with `NoNewPrivileges=yes`.
//! * `daemonset_is_least_privilege`: the pod's seccomp profile is
//!   `RuntimeDefault`; its supplementary groups hold the device plugin's
//!   `--dir-group`; every container has a read-only root file system, no
//!   privilege escalation, `drop: [ALL]`, no `DAC_OVERRIDE` but the device
//!   plugin's, no capability for `install-cni`; every host path a
//!   container mounts read-write is one it writes (`/run/vhu` and
//!   `/var/lib/vhu` for the switch, the device plugin's three directories,
//!   `/opt/cni/bin` and `/etc/vhu` for `install-cni`), none is `/`,
//!   `/var`, `/var/lib/kubelet`, `/run`, `/etc`, ...; the kubelet's pods
//!   directory is the switch's read-only, recursively, not propagated;
//!   `install-cni` installs the ConfigMap's `cni.toml` as the host's
//!   `/etc/vhu/cni.toml`.
//! * `systemd_unit_is_hardened`: the unit's sandboxing directives
//!   (`ProtectSystem=strict`, `RestrictNamespaces=net`,
//!   `RestrictAddressFamilies=` within unix, netlink, packet, XDP, inet,
//!   `ReadWritePaths=/run/vhu /var/lib/vhu`, `UMask=0077`, ...) have their
//!   values; its `SystemCallFilter=` (`@system-service` and more, expanded
//!   by `systemd-analyze syscall-filter`) allows every system call of the
//!   switch's own seccomp allow-list; `systemd-analyze verify` accepts it.
//!
//! Needs root, the virtualenv of `scripts/install-peers.sh`
//! (kubernetes-validate, PyYAML), `setpriv`, `systemd-analyze` and the
//! release binaries.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use vhu_tests::process::RunDir;
use vhu_tests::switch::SwitchProc;

/// Custom resources the validator has no schema for: `apiVersion/kind`.
const CUSTOM: &[&str] = &[
    "k8s.cni.cncf.io/v1/NetworkAttachmentDefinition",
    "kubevirt.io/v1/KubeVirt",
    "kubevirt.io/v1/VirtualMachine",
];

/// Programs the image installs that are not (yet) binaries of this
/// workspace: their flags cannot be checked here. Once a program is a
/// workspace binary this test fails until it is removed from the list (and
/// so checked).
const PENDING: &[&str] = &[];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn venv(program: &str) -> PathBuf {
    let p = vhu_tests::qemu::peers_dir().join("venv/bin").join(program);
    assert!(
        p.is_file(),
        "{} missing: run scripts/install-peers.sh (kubernetes-validate)",
        p.display()
    );
    p
}

fn run(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

fn stdout_ok(cmd: &mut Command) -> String {
    let o = run(cmd);
    assert!(
        o.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Every `*.yaml` / `*.yml` under `dir`, sorted.
fn manifests(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(manifests(&p));
        } else if p.extension().is_some_and(|x| x == "yaml" || x == "yml") {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// The documents of a YAML file, as JSON (PyYAML of the virtualenv).
fn documents(path: &Path) -> Vec<Value> {
    let py = "import sys, json, yaml\n\
              docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d is not None]\n\
              json.dump(docs, sys.stdout)";
    let out = stdout_ok(Command::new(venv("python")).args(["-c", py]).arg(path));
    serde_json::from_str(&out).unwrap()
}

fn type_of(doc: &Value) -> String {
    format!(
        "{}/{}",
        doc["apiVersion"].as_str().unwrap_or_default(),
        doc["kind"].as_str().unwrap_or_default()
    )
}

fn newest_kubernetes() -> String {
    let py = "import kubernetes_validate.utils as u; print(u.latest_version())";
    let v = stdout_ok(Command::new(venv("python")).args(["-c", py]));
    let v = v.trim().to_owned();
    assert!(v.starts_with("1."), "{v:?}");
    v
}

fn validate(version: &str, files: &[PathBuf]) -> (bool, String) {
    let o = run(Command::new(venv("kubernetes-validate"))
        .args(["--strict", "-k", version])
        .args(files));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.success(), text)
}

#[test]
#[ignore = "needs the peers' virtualenv (scripts/install-peers.sh); run with --include-ignored"]
fn manifests_validate_against_the_newest_kubernetes() {
    let deploy = root().join("deploy");
    let files = manifests(&deploy);
    assert!(files.len() >= 8, "{files:?}");
    let version = newest_kubernetes();
    let (ok, text) = validate(&version, &files);
    assert!(ok, "{text}");
    let short = version.rsplit_once('.').map_or(version.as_str(), |v| v.0);
    for f in &files {
        let shown = f.strip_prefix(root()).unwrap_or(f).display().to_string();
        let shown = shown.trim_start_matches("./");
        let name = f.to_str().unwrap();
        for doc in documents(f) {
            let kind = doc["kind"].as_str().unwrap().to_owned();
            let line = if CUSTOM.contains(&type_of(&doc).as_str()) {
                format!("{name} Couldn't find schema for kind {kind}")
            } else {
                format!(
                    "{name} passed for resource {}/{} against version {short}",
                    kind.to_lowercase(),
                    doc["metadata"]["name"].as_str().unwrap()
                )
            };
            assert!(text.contains(&line), "{shown}: no {line:?} in\n{text}");
        }
    }
    for l in text.lines() {
        assert!(
            l.starts_with("INFO ") || l.contains("Couldn't find schema for kind"),
            "{l}"
        );
    }

    // The check can fail: a misspelt field (strict), a wrong type.
    let run = RunDir::new("deploy-mutants");
    let ds = std::fs::read_to_string(deploy.join("kubernetes/daemonset.yaml")).unwrap();
    for (from, to, want) in [
        ("hostNetwork: true", "hostNetwrk: true", "hostNetwrk"),
        (
            "terminationGracePeriodSeconds: 30",
            "terminationGracePeriodSeconds: soon",
            "terminationGracePeriodSeconds",
        ),
    ] {
        assert!(ds.contains(from), "{from}");
        let bad = run.join("daemonset.yaml");
        std::fs::write(&bad, ds.replacen(from, to, 1)).unwrap();
        let (ok, text) = validate(&version, &[bad]);
        assert!(!ok, "{to}: accepted:\n{text}");
        assert!(text.contains(want), "{to}:\n{text}");
    }
}

/// Every document under `deploy/`, with its file.
fn all_documents() -> Vec<(PathBuf, Value)> {
    manifests(&root().join("deploy"))
        .into_iter()
        .flat_map(|f| documents(&f).into_iter().map(move |d| (f.clone(), d)))
        .collect()
}

/// The pod spec of a Pod or of a workload's template.
fn pod_spec(doc: &Value) -> Option<&Value> {
    match doc["kind"].as_str()? {
        "Pod" => Some(&doc["spec"]),
        "DaemonSet" | "Deployment" | "StatefulSet" | "Job" => {
            Some(&doc["spec"]["template"]["spec"])
        }
        _ => None,
    }
}

fn containers(spec: &Value) -> Vec<&Value> {
    ["initContainers", "containers"]
        .iter()
        .filter_map(|k| spec[k].as_array())
        .flatten()
        .collect()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_owned))
        .collect()
}

/// The command lines of a container: its command + args, and its probes'.
fn command_lines(c: &Value) -> Vec<Vec<String>> {
    let mut main = strings(&c["command"]);
    main.extend(strings(&c["args"]));
    let mut all = vec![main];
    for p in ["startupProbe", "readinessProbe", "livenessProbe"] {
        let probe = strings(&c[p]["exec"]["command"]);
        if !probe.is_empty() {
            all.push(probe);
        }
    }
    all
}

/// `--flag` (or `--flag=value`) arguments, by name.
fn flags(line: &[String]) -> BTreeMap<String, String> {
    line.iter()
        .filter_map(|a| a.strip_prefix("--"))
        .map(|a| match a.split_once('=') {
            Some((k, v)) => (format!("--{k}"), v.to_owned()),
            None => (format!("--{a}"), String::new()),
        })
        .collect()
}

fn workspace_version() -> String {
    let toml = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let tail = toml.split("[workspace.package]").nth(1).unwrap();
    let line = tail
        .lines()
        .find(|l| l.trim_start().starts_with("version"))
        .unwrap();
    line.split('"').nth(1).unwrap().to_owned()
}

fn workspace_binaries() -> BTreeSet<String> {
    let out = stdout_ok(
        Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args([
                "metadata",
                "--no-deps",
                "--format-version",
                "1",
                "--offline",
            ])
            .current_dir(root()),
    );
    let meta: Value = serde_json::from_str(&out).unwrap();
    meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().unwrap().iter())
        .filter(|t| strings(&t["kind"]).iter().any(|k| k == "bin"))
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

/// The programs `deploy/Containerfile` installs (`target/release/X`), and
/// its default command.
fn image_programs() -> (BTreeSet<String>, String) {
    let cf = std::fs::read_to_string(root().join("deploy/Containerfile")).unwrap();
    let installed = cf
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("target/release/"))
        .map(str::to_owned)
        .collect();
    let cmd = cf
        .lines()
        .find_map(|l| l.strip_prefix("CMD "))
        .expect("a CMD");
    let cmd: Vec<String> = serde_json::from_str(cmd).unwrap();
    (installed, cmd[0].clone())
}

#[test]
#[ignore = "needs the peers' virtualenv and the release binaries; run with --include-ignored"]
fn manifests_agree_with_the_programs() {
    let docs = all_documents();
    let image = format!("localhost/vhu:{}", workspace_version());
    let (installed, default_cmd) = image_programs();
    for p in [
        "vhu-switch",
        "vhuctl",
        "vhu-cni",
        "vhu-device-plugin",
        "vhu-kubevirt-binding",
    ] {
        assert!(
            installed.contains(p),
            "the Containerfile does not install {p}"
        );
    }
    assert_eq!(default_cmd, "/usr/local/bin/vhu-kubevirt-binding");
    let bins = workspace_binaries();
    for p in PENDING {
        assert!(
            !bins.contains(*p),
            "{p} is a workspace binary now: remove it from PENDING so that its flags are checked"
        );
    }
    let by_kind = |k: &str| -> Vec<&Value> {
        docs.iter()
            .map(|(_, d)| d)
            .filter(|d| d["kind"] == k)
            .collect()
    };

    // One image; programs installed; flags known to their programs.
    let mut used: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for (f, doc) in &docs {
        let Some(spec) = pod_spec(doc) else { continue };
        for c in containers(spec) {
            let img = c["image"].as_str().unwrap_or_default();
            if !img.starts_with("localhost/vhu:") {
                continue;
            }
            assert_eq!(img, image, "{}: container {}", f.display(), c["name"]);
            for line in command_lines(c) {
                for word in line.iter().flat_map(|a| a.split_whitespace()) {
                    if let Some(p) = word.strip_prefix("/usr/local/bin/") {
                        let p = p.trim_end_matches(';');
                        assert!(
                            installed.contains(p),
                            "{}: {p} is not in the image",
                            f.display()
                        );
                    }
                }
                let Some(p) = line[0].strip_prefix("/usr/local/bin/") else {
                    continue;
                };
                used.entry(p.to_owned()).or_default().extend(flags(&line));
            }
        }
    }
    for kv in by_kind("KubeVirt") {
        for (name, b) in kv["spec"]["configuration"]["network"]["binding"]
            .as_object()
            .unwrap()
        {
            assert_eq!(b["sidecarImage"], image.as_str(), "binding {name}");
            assert_eq!(b["downwardAPI"], "device-info", "binding {name}");
        }
    }
    for p in ["vhu-switch", "vhuctl", "vhu-device-plugin"] {
        assert!(used.contains_key(p), "no container runs {p}");
    }
    for (p, fl) in &used {
        if PENDING.contains(&p.as_str()) {
            eprintln!("{p}: not a binary of this workspace yet; flags unchecked: {fl:?}");
            continue;
        }
        assert!(
            bins.contains(p),
            "{p} is neither a workspace binary nor PENDING"
        );
        let bin = root().join("target/release").join(p);
        assert!(
            bin.is_file(),
            "{}: cargo build --release --workspace --bins",
            bin.display()
        );
        let help = stdout_ok(Command::new(&bin).arg("--help"));
        for flag in fl.keys() {
            let known = help
                .split(|c: char| c.is_whitespace() || c == ',' || c == '=' || c == '[')
                .any(|w| w == flag);
            assert!(known, "{p} has no {flag}:\n{help}");
        }
    }

    // The DaemonSet: host paths for state, control socket and CNI binaries;
    // an upgrade strategy that never takes two nodes down.
    let ds = by_kind("DaemonSet");
    assert_eq!(ds.len(), 1);
    let ds = ds[0];
    let strategy = &ds["spec"]["updateStrategy"];
    assert!(
        strategy["type"] == "OnDelete"
            || (strategy["type"] == "RollingUpdate"
                && strategy["rollingUpdate"]["maxUnavailable"] == 1),
        "{strategy}"
    );
    let spec = &ds["spec"]["template"]["spec"];
    let host_paths: BTreeMap<&str, &str> = spec["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| Some((v["name"].as_str()?, v["hostPath"]["path"].as_str()?)))
        .collect();
    let host_path_of = |c: &Value, path: &str| -> Option<PathBuf> {
        c["volumeMounts"].as_array()?.iter().find_map(|m| {
            let at = m["mountPath"].as_str()?;
            let rest = Path::new(path).strip_prefix(at).ok()?;
            let host = host_paths.get(m["name"].as_str()?)?;
            Some(Path::new(host).join(rest))
        })
    };
    let switch = containers(spec)
        .into_iter()
        .find(|c| c["name"] == "vhu-switch")
        .unwrap();
    let sw_flags = &used["vhu-switch"];
    let state = &sw_flags["--state-dir"];
    let host =
        |c: &Value, p: &str| host_path_of(c, p).unwrap_or_else(|| panic!("{p} is not a host path"));
    assert_eq!(host(switch, state), Path::new("/var/lib/vhu"));
    let control = &sw_flags["--control-socket"];
    assert_eq!(host(switch, control), Path::new(control));
    assert_eq!(
        host(switch, "/var/run/netns/x"),
        Path::new("/var/run/netns/x")
    );
    let init = containers(spec)
        .into_iter()
        .find(|c| c["name"] == "install-cni")
        .unwrap();
    let script = command_lines(init)[0].join(" ");
    assert!(script.contains("/host/opt/cni/bin/vhu-cni"), "{script}");
    assert_eq!(host(init, "/host/opt/cni/bin"), Path::new("/opt/cni/bin"));
    let config = &sw_flags["--config"];
    let cm_volume = spec["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["configMap"].is_object())
        .unwrap();
    let cm = by_kind("ConfigMap")
        .into_iter()
        .find(|c| c["metadata"]["name"] == cm_volume["configMap"]["name"])
        .expect("the switch's ConfigMap");
    let key = Path::new(config).file_name().unwrap().to_str().unwrap();
    let toml = cm["data"][key].as_str().expect("the configuration's key");

    // NetworkAttachmentDefinitions parse as vhu-cni configurations under
    // the shipped node configuration (cni.toml), and its policy for their
    // namespace admits them.
    let resource = &used["vhu-device-plugin"]["--resource"];
    let node_toml = cm["data"]["cni.toml"]
        .as_str()
        .expect("cni.toml in the ConfigMap");
    let node = vhu_cni::node::NodeConfig::parse(node_toml.as_bytes(), None)
        .unwrap_or_else(|e| panic!("cni.toml: {e:?}"));
    assert_eq!(node.control_socket, Path::new(control), "cni.toml");
    assert!(node.default.flood_rate.is_some(), "cni.toml limits floods");
    let mut nads = BTreeSet::new();
    for nad in by_kind("NetworkAttachmentDefinition") {
        let name = nad["metadata"]["name"].as_str().unwrap();
        let raw = nad["spec"]["config"].as_str().unwrap();
        let conf = vhu_cni::config::NetConf::parse_with(raw.as_bytes(), &node)
            .unwrap_or_else(|e| panic!("NAD {name}: {e:?}"));
        let ns = nad["metadata"]["namespace"].as_str();
        vhu_cni::admission::admit(&conf, &node, ns)
            .unwrap_or_else(|e| panic!("NAD {name} in {ns:?}: {e:?}"));
        assert_eq!(conf.name, name);
        assert_eq!(conf.raw["type"], "vhu-cni", "NAD {name}");
        assert_eq!(conf.control_socket, Path::new(control), "NAD {name}");
        if conf.kind == vhu_cni::config::Kind::VhostUser {
            assert_eq!(conf.vm_role, vhu_cni::config::VmRole::Server, "NAD {name}");
            assert_eq!(
                conf.raw["capabilities"]["CNIDeviceInfoFile"], true,
                "NAD {name}"
            );
        }
        if let Some(r) = nad["metadata"]["annotations"]["k8s.v1.cni.cncf.io/resourceName"].as_str()
        {
            assert_eq!(r, resource, "NAD {name}");
        }
        nads.insert(name.to_owned());
    }
    assert!(nads.len() >= 3, "{nads:?}");

    // Every network named exists; a VM's binding is registered.
    for (f, doc) in &docs {
        if let Some(a) = doc["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"].as_str() {
            let nets: Value = serde_json::from_str(a).unwrap();
            for n in nets.as_array().unwrap() {
                let n = n["name"].as_str().unwrap();
                assert!(nads.contains(n), "{}: no NAD {n}", f.display());
            }
        }
    }
    let bindings: BTreeSet<String> = by_kind("KubeVirt")
        .iter()
        .flat_map(|k| {
            k["spec"]["configuration"]["network"]["binding"]
                .as_object()
                .unwrap()
                .keys()
                .cloned()
        })
        .collect();
    let vms = by_kind("VirtualMachine");
    assert!(!vms.is_empty());
    for vm in vms {
        let t = &vm["spec"]["template"]["spec"];
        for n in t["networks"].as_array().unwrap() {
            if let Some(m) = n["multus"]["networkName"].as_str() {
                assert!(nads.contains(m), "VM network {m}");
            }
        }
        for i in t["domain"]["devices"]["interfaces"].as_array().unwrap() {
            if let Some(b) = i["binding"]["name"].as_str() {
                assert!(bindings.contains(b), "binding {b} is not registered");
            }
        }
    }

    // The switch starts on the ConfigMap's configuration.
    let run = RunDir::new("deploy-config");
    let mut sw = SwitchProc::start(&run, toml, &[]);
    let ports: Vec<vhu_api::PortView> = sw.get("/ports");
    assert!(ports.is_empty(), "{ports:?}");
    assert!(sw.stop().success());
}

/// The capabilities a switch keeps when started as root with `extra`
/// flags on the ConfigMap's configuration (`toml`), as its start-up log
/// says (`capabilities: ... permitted CAP_A,CAP_B inheritable ...`),
/// without `CAP_`.
fn kept_capabilities(toml: &str, extra: &[&str], wrap: Vec<String>) -> BTreeSet<String> {
    let run = RunDir::new("deploy-caps");
    let opts = vhu_tests::switch::SwitchOpts {
        wrap,
        ..Default::default()
    };
    let mut sw = SwitchProc::start_with(&run, toml, extra, &opts);
    let log = sw.log();
    assert!(sw.stop().success(), "{log}");
    let line = log
        .lines()
        .find(|l| l.contains("capabilities: effective"))
        .unwrap_or_else(|| panic!("no capabilities line in\n{log}"));
    let permitted = line
        .split(" permitted ")
        .nth(1)
        .and_then(|r| r.split(" inheritable").next())
        .unwrap_or_else(|| panic!("{line}"));
    permitted
        .split(',')
        .filter(|c| *c != "none")
        .map(|c| c.trim().strip_prefix("CAP_").unwrap_or(c).to_owned())
        .collect()
}

/// The systemd unit's directives: every value of each key, in order.
fn unit_directives() -> BTreeMap<String, Vec<String>> {
    let unit = std::fs::read_to_string(root().join("deploy/vhu-switch.service")).unwrap();
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for l in unit.lines() {
        let l = l.trim();
        if l.is_empty() || l.starts_with('#') || l.starts_with('[') {
            continue;
        }
        let (k, v) = l.split_once('=').unwrap_or_else(|| panic!("{l}"));
        out.entry(k.to_owned()).or_default().push(v.to_owned());
    }
    out
}

/// The one DaemonSet's pod spec, and its containers by name.
fn daemonset() -> (Value, BTreeMap<String, Value>) {
    let ds: Vec<Value> = all_documents()
        .into_iter()
        .map(|(_, d)| d)
        .filter(|d| d["kind"] == "DaemonSet")
        .collect();
    assert_eq!(ds.len(), 1);
    let spec = ds[0]["spec"]["template"]["spec"].clone();
    let by_name = containers(&spec)
        .into_iter()
        .map(|c| (c["name"].as_str().unwrap().to_owned(), c.clone()))
        .collect();
    (spec, by_name)
}

/// The ConfigMap's `vhu-switch.toml`.
fn configmap_toml() -> String {
    all_documents()
        .into_iter()
        .find(|(_, d)| d["kind"] == "ConfigMap" && d["metadata"]["name"] == "vhu-switch")
        .map(|(_, d)| d["data"]["vhu-switch.toml"].as_str().unwrap().to_owned())
        .expect("the switch's ConfigMap")
}

#[test]
#[ignore = "needs root, the peers' virtualenv and the release binaries; run with --include-ignored"]
fn switch_capabilities_are_what_its_port_kinds_keep() {
    let toml = configmap_toml();

    // The unit: every port kind (no --port-kinds), so whatever the switch
    // keeps for all of them, never CAP_DAC_OVERRIDE.
    let all = kept_capabilities(&toml, &[], Vec::new());
    assert!(!all.contains("DAC_OVERRIDE"), "{all:?}");
    let unit = unit_directives();
    for k in ["AmbientCapabilities", "CapabilityBoundingSet"] {
        let v = &unit[k];
        assert_eq!(v.len(), 1, "one {k}= line in the unit");
        let got: BTreeSet<String> = v[0]
            .split_whitespace()
            .map(|c| c.strip_prefix("CAP_").unwrap_or(c).to_owned())
            .collect();
        assert_eq!(got, all, "the unit's {k}");
    }
    assert_eq!(unit["User"], ["vhu"], "the unit's user");
    assert_eq!(unit["NoNewPrivileges"], ["yes"]);

    // The DaemonSet: what the switch keeps for its --port-kinds, exactly.
    let (spec, c) = daemonset();
    let switch = &c["vhu-switch"];
    let line = command_lines(switch).swap_remove(0);
    let kinds = flags(&line)
        .get("--port-kinds")
        .cloned()
        .expect("the DaemonSet's switch names its --port-kinds");
    let kinds_flag = format!("--port-kinds={kinds}");
    let kept = kept_capabilities(&toml, &[&kinds_flag], Vec::new());
    let caps = &switch["securityContext"]["capabilities"];
    assert_eq!(strings(&caps["drop"]), ["ALL"]);
    let add: BTreeSet<String> = strings(&caps["add"]).into_iter().collect();
    assert_eq!(add, kept, "the switch's capabilities for {kinds}");
    assert_eq!(
        add.contains("SYS_ADMIN"),
        kinds.split(',').any(|k| k == "pod-tap"),
        "CAP_SYS_ADMIN only for pod-tap (setns): {kinds}"
    );

    // Run as the DaemonSet runs it: uid 0 with only those capabilities in
    // its bounding set, its supplementary groups, no new privileges. It
    // starts, ready, and keeps them all.
    let groups: Vec<String> = spec["securityContext"]["supplementalGroups"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|g| g.to_string())
        .collect();
    let bounding: Vec<String> = add
        .iter()
        .map(|c| format!("+{}", c.to_lowercase()))
        .collect();
    let wrap = vec![
        "setpriv".to_owned(),
        format!("--bounding-set=-all,{}", bounding.join(",")),
        "--inh-caps=-all".to_owned(),
        format!("--groups={}", groups.join(",")),
        "--no-new-privs".to_owned(),
        "--".to_owned(),
    ];
    let as_shipped = kept_capabilities(&toml, &[&kinds_flag], wrap);
    assert_eq!(as_shipped, add, "as the DaemonSet runs it");
}

#[test]
#[ignore = "needs the peers' virtualenv (scripts/install-peers.sh); run with --include-ignored"]
fn daemonset_is_least_privilege() {
    let (spec, c) = daemonset();
    assert_eq!(
        spec["securityContext"]["seccompProfile"]["type"], "RuntimeDefault",
        "the pod's seccomp profile"
    );
    // The group of the device plugin's socket directories, in the pod's
    // supplementary groups (how the switch reaches them).
    let dp = command_lines(&c["vhu-device-plugin"]).swap_remove(0);
    let dir_group = flags(&dp)
        .get("--dir-group")
        .cloned()
        .unwrap_or_else(|| "107".to_owned());
    let groups: Vec<String> = spec["securityContext"]["supplementalGroups"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|g| g.to_string())
        .collect();
    assert!(groups.contains(&dir_group), "{groups:?} lacks {dir_group}");
    assert_eq!(
        c.keys().map(String::as_str).collect::<Vec<_>>(),
        ["install-cni", "vhu-device-plugin", "vhu-switch"]
    );

    let host_paths: BTreeMap<String, String> = spec["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| {
            Some((
                v["name"].as_str()?.to_owned(),
                v["hostPath"]["path"].as_str()?.to_owned(),
            ))
        })
        .collect();
    // The host paths each container may write; any other is read-only.
    let writable: BTreeMap<&str, &[&str]> = BTreeMap::from([
        ("install-cni", &["/opt/cni/bin", "/etc/vhu"][..]),
        ("vhu-switch", &["/run/vhu", "/var/lib/vhu"][..]),
        (
            "vhu-device-plugin",
            &[
                "/var/lib/kubelet/device-plugins",
                "/run/vhu/dp",
                "/var/run/k8s.cni.cncf.io/devinfo/dp",
            ][..],
        ),
    ]);
    // Capabilities no container has: CAP_DAC_OVERRIDE only where pods'
    // leftovers of any mode are removed (the device plugin).
    for (name, ctr) in &c {
        let sc = &ctr["securityContext"];
        let effective_seccomp = if sc["seccompProfile"].is_object() {
            &sc["seccompProfile"]["type"]
        } else {
            &spec["securityContext"]["seccompProfile"]["type"]
        };
        assert!(
            effective_seccomp == "RuntimeDefault" || effective_seccomp == "Localhost",
            "{name}: seccomp {effective_seccomp}"
        );
        assert_eq!(sc["readOnlyRootFilesystem"], true, "{name}");
        assert_eq!(sc["allowPrivilegeEscalation"], false, "{name}");
        assert_ne!(sc["privileged"], true, "{name}");
        assert_eq!(strings(&sc["capabilities"]["drop"]), ["ALL"], "{name}");
        let add = strings(&sc["capabilities"]["add"]);
        if name != "vhu-device-plugin" {
            assert!(!add.iter().any(|a| a == "DAC_OVERRIDE"), "{name}: {add:?}");
        }
        if name == "install-cni" {
            assert!(add.is_empty(), "install-cni: {add:?}");
        }
        for m in ctr["volumeMounts"].as_array().unwrap() {
            let Some(host) = host_paths.get(m["name"].as_str().unwrap()) else {
                continue;
            };
            if m["readOnly"] == true {
                continue;
            }
            assert!(
                writable[name.as_str()].contains(&host.as_str()),
                "{name} mounts the host's {host} read-write"
            );
        }
    }

    // The switch and the kubelet's pods directory: read-only, recursively,
    // and not propagated (it sees the pods' emptyDirs, not their other
    // volumes mounted later).
    let kubelet_pods = c["vhu-switch"]["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| {
            host_paths
                .get(m["name"].as_str().unwrap())
                .map(String::as_str)
                == Some("/var/lib/kubelet/pods")
        });
    if let Some(m) = kubelet_pods {
        assert_eq!(m["readOnly"], true, "{m}");
        assert!(
            m["recursiveReadOnly"] == "IfPossible" || m["recursiveReadOnly"] == "Enabled",
            "{m}"
        );
        assert!(
            m["mountPropagation"].is_null() || m["mountPropagation"] == "None",
            "{m}"
        );
    }
    for (name, ctr) in &c {
        for m in ctr["volumeMounts"].as_array().unwrap() {
            if let Some(host) = host_paths.get(m["name"].as_str().unwrap()) {
                for wide in [
                    "/",
                    "/var",
                    "/var/lib",
                    "/var/lib/kubelet",
                    "/run",
                    "/var/run",
                    "/etc",
                    "/proc",
                    "/sys",
                    "/dev",
                ] {
                    assert_ne!(host, wide, "{name} mounts the host's {wide}");
                }
            }
        }
    }

    // install-cni installs the node configuration from the ConfigMap's
    // cni.toml, atomically.
    let init = &c["install-cni"];
    let script = command_lines(init)[0].join(" ");
    assert!(
        script.contains("mv -f /host/etc/vhu/.cni.toml.new /host/etc/vhu/cni.toml"),
        "{script}"
    );
    let cni_volume = init["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["mountPath"] == "/host/etc/vhu")
        .expect("/host/etc/vhu mounted");
    assert_eq!(host_paths[cni_volume["name"].as_str().unwrap()], "/etc/vhu");
    let cm_items: Vec<String> = spec["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["configMap"]["name"] == "vhu-switch")
        .flat_map(|v| {
            v["configMap"]["items"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|i| i["key"].as_str().map(str::to_owned))
        .collect();
    assert!(cm_items.contains(&"cni.toml".to_owned()), "{cm_items:?}");
    let cm = all_documents()
        .into_iter()
        .find(|(_, d)| d["kind"] == "ConfigMap" && d["metadata"]["name"] == "vhu-switch")
        .unwrap()
        .1;
    assert!(
        cm["data"]["cni.toml"].is_string(),
        "the ConfigMap's cni.toml key"
    );
}

#[test]
#[ignore = "needs systemd-analyze and the release binaries; run with --include-ignored"]
fn systemd_unit_is_hardened() {
    let unit = unit_directives();
    let one = |k: &str| -> &str {
        let v = unit.get(k).unwrap_or_else(|| panic!("no {k}= in the unit"));
        assert_eq!(v.len(), 1, "one {k}= line");
        &v[0]
    };
    for (k, want) in [
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("ProtectKernelTunables", "yes"),
        ("ProtectKernelModules", "yes"),
        ("ProtectKernelLogs", "yes"),
        ("ProtectControlGroups", "yes"),
        ("ProtectClock", "yes"),
        ("RestrictNamespaces", "net"),
        ("SystemCallArchitectures", "native"),
        ("NoNewPrivileges", "yes"),
        ("LockPersonality", "yes"),
        ("MemoryDenyWriteExecute", "yes"),
        ("RestrictRealtime", "yes"),
        ("RestrictSUIDSGID", "yes"),
        ("UMask", "0077"),
    ] {
        assert_eq!(one(k), want, "{k}");
    }
    let families: BTreeSet<&str> = one("RestrictAddressFamilies").split_whitespace().collect();
    let allowed = BTreeSet::from([
        "AF_UNIX",
        "AF_NETLINK",
        "AF_PACKET",
        "AF_XDP",
        "AF_INET",
        "AF_INET6",
    ]);
    assert!(families.is_subset(&allowed), "{families:?}");
    for f in ["AF_UNIX", "AF_PACKET", "AF_XDP"] {
        assert!(families.contains(f), "{f}");
    }
    let rw: BTreeSet<&str> = one("ReadWritePaths").split_whitespace().collect();
    assert_eq!(rw, BTreeSet::from(["/run/vhu", "/var/lib/vhu"]));
    for k in ["AmbientCapabilities", "CapabilityBoundingSet"] {
        assert!(!one(k).contains("CAP_DAC_OVERRIDE"), "{k}");
    }
    let filter: Vec<&str> = one("SystemCallFilter").split_whitespace().collect();
    assert_eq!(filter[0], "@system-service", "{filter:?}");
    assert!(filter.contains(&"bpf"), "bpf for af_xdp: {filter:?}");

    // The filter allows every system call of the switch's own seccomp
    // allow-list (vhu-switch/src/seccomp.rs): systemd's is the outer bound.
    let mut allowed_calls = BTreeSet::new();
    let mut todo: Vec<String> = filter.iter().map(|s| (*s).to_owned()).collect();
    while let Some(x) = todo.pop() {
        if let Some(group) = x.strip_prefix('@') {
            let out = stdout_ok(
                Command::new("systemd-analyze").args(["syscall-filter", &format!("@{group}")]),
            );
            for l in out.lines().skip(1) {
                let l = l.trim();
                if !l.is_empty() && !l.starts_with('#') {
                    todo.push(l.to_owned());
                }
            }
        } else {
            allowed_calls.insert(x);
        }
    }
    let seccomp = std::fs::read_to_string(root().join("vhu-switch/src/seccomp.rs")).unwrap();
    let used: BTreeSet<String> = seccomp
        .split("libc::SYS_")
        .skip(1)
        .map(|r| {
            r.chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect()
        })
        .collect();
    assert!(used.len() > 50, "{used:?}");
    // Named in the file to be denied, not allowed.
    let denied = ["ptrace"];
    let missing: Vec<&String> = used
        .iter()
        .filter(|c| !allowed_calls.contains(*c) && !denied.contains(&c.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "not in the unit's SystemCallFilter: {missing:?}"
    );
    assert!(
        allowed_calls.contains("seccomp"),
        "the switch installs its filter"
    );

    // systemd reads it as written (the binary as built stands in for the
    // installed one).
    let run = RunDir::new("deploy-unit");
    let text = std::fs::read_to_string(root().join("deploy/vhu-switch.service")).unwrap();
    let bin = root().join("target/release/vhu-switch");
    assert!(
        bin.is_file(),
        "{}: cargo build --release --workspace --bins",
        bin.display()
    );
    let local = run.join("vhu-switch.service");
    std::fs::write(
        &local,
        text.replace(
            "ExecStart=/usr/local/bin/vhu-switch",
            &format!("ExecStart={}", bin.canonicalize().unwrap().display()),
        ),
    )
    .unwrap();
    let o = run_unit_verify(&local);
    assert!(o.0, "systemd-analyze verify:\n{}", o.1);
    let ours: Vec<&str> = o.1.lines().filter(|l| l.contains("vhu-switch")).collect();
    assert!(ours.is_empty(), "systemd-analyze verify:\n{}", o.1);
}

/// `systemd-analyze verify` of a unit file: success, and what it said.
fn run_unit_verify(unit: &Path) -> (bool, String) {
    let o = run(Command::new("systemd-analyze").arg("verify").arg(unit));
    (
        o.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}
