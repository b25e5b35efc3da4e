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
//! * `switch_capabilities_are_the_privilege_table_everywhere`: the systemd
//!   unit's `AmbientCapabilities=` and `CapabilityBoundingSet=` and the
//!   DaemonSet's `capabilities.add` (after `drop: [ALL]`) of the switch are
//!   exactly the capabilities its port kinds may use (docs/switch.md,
//!   "Privileges"); the unit runs as `vhu` with `NoNewPrivileges=yes`.
//!
//! Needs the virtualenv of `scripts/install-peers.sh` (kubernetes-validate,
//! PyYAML) and the release binaries.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use vhu_tests::switch::SwitchProc;
use vhu_tests::testpmd::RunDir;

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

    // NetworkAttachmentDefinitions parse as vhu-cni configurations.
    let resource = &used["vhu-device-plugin"]["--resource"];
    let mut nads = BTreeSet::new();
    for nad in by_kind("NetworkAttachmentDefinition") {
        let name = nad["metadata"]["name"].as_str().unwrap();
        let raw = nad["spec"]["config"].as_str().unwrap();
        let conf = vhu_cni::config::NetConf::parse(raw.as_bytes())
            .unwrap_or_else(|e| panic!("NAD {name}: {e:?}"));
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

/// What the switch's port kinds may use (docs/switch.md, "Privileges";
/// `vhu-switch/src/privilege.rs`), without `CAP_`.
const SWITCH_CAPS: &[&str] = &[
    "BPF",
    "CHOWN",
    "DAC_OVERRIDE",
    "IPC_LOCK",
    "NET_ADMIN",
    "NET_RAW",
    "SYS_ADMIN",
];

#[test]
#[ignore = "needs the peers' virtualenv (scripts/install-peers.sh); run with --include-ignored"]
fn switch_capabilities_are_the_privilege_table_everywhere() {
    let want: BTreeSet<String> = SWITCH_CAPS.iter().map(|s| (*s).to_owned()).collect();
    let unit = std::fs::read_to_string(root().join("deploy/vhu-switch.service")).unwrap();
    let key = |k: &str| -> Vec<String> {
        unit.lines()
            .filter_map(|l| l.strip_prefix(k))
            .map(str::to_owned)
            .collect()
    };
    for k in ["AmbientCapabilities=", "CapabilityBoundingSet="] {
        let v = key(k);
        assert_eq!(v.len(), 1, "one {k} line in the unit");
        let got: BTreeSet<String> = v[0]
            .split_whitespace()
            .map(|c| c.strip_prefix("CAP_").unwrap_or(c).to_owned())
            .collect();
        assert_eq!(got, want, "the unit's {k}");
    }
    assert_eq!(key("User="), ["vhu"], "the unit's user");
    assert_eq!(key("NoNewPrivileges="), ["yes"]);
    let mut seen = 0;
    for (path, doc) in all_documents() {
        let Some(spec) = pod_spec(&doc) else { continue };
        for c in containers(spec) {
            if c["name"] != "vhu-switch" {
                continue;
            }
            seen += 1;
            let caps = &c["securityContext"]["capabilities"];
            assert_eq!(strings(&caps["drop"]), ["ALL"], "{}", path.display());
            let got: BTreeSet<String> = strings(&caps["add"]).into_iter().collect();
            assert_eq!(got, want, "{}: the switch's capabilities", path.display());
            assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
        }
    }
    assert_eq!(seen, 1, "one vhu-switch container in the manifests");
}
