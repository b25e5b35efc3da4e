// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! containerd 1.6 (Debian `containerd`) as the kubelet's runtime under test:
//! started by hand on a private configuration (root, state, socket, CNI
//! `conf_dir` and `bin_dir` under a [`RunDir`]), driven through its CRI gRPC
//! API by `tests/peers/cri.py` (Python `grpcio` on the vendored cri-api
//! `api.proto`) the way the kubelet drives it: RunPodSandbox,
//! CreateContainer, StartContainer, StopPodSandbox, RemovePodSandbox.
//!
//! * `VHU_PEERS_DIR`: the peers' virtualenv with `grpcio-tools`
//!   (`scripts/install-peers.sh`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::process::RunDir;

/// The Python CRI client.
///
/// `tests/peers/cri.py`.
pub const CRI_CLIENT: &str = include_str!("../peers/cri.py");

/// A running containerd with its CRI plugin.
#[derive(Debug)]
pub struct Containerd {
    child: Option<Child>,
    dir: PathBuf,
    /// Its gRPC socket.
    pub socket: PathBuf,
    /// The CNI configuration directory (`conf_dir`).
    pub net_dir: PathBuf,
    python: PathBuf,
}

/// A pod sandbox and its configuration (what CreateContainer needs again).
#[derive(Debug, Clone)]
pub struct Sandbox {
    /// Its id.
    pub id: String,
    /// The `PodSandboxConfig` it was created with.
    pub config: Value,
}

impl Containerd {
    /// Starts containerd under `run/containerd`, its sandbox image `image`
    /// (imported with [`Containerd::import`] before the first pod), CNI
    /// plugins from `cni_bin_dir`, and waits until its CRI answers.
    ///
    /// # Panics
    ///
    /// If containerd, or the CRI client's Python packages, are missing
    /// (`scripts/install-peers.sh`), or it does not come up in 30 s.
    pub fn start(run: &RunDir, image: &str, cni_bin_dir: &Path) -> Self {
        let dir = run.join("containerd");
        let net_dir = dir.join("net.d");
        std::fs::create_dir_all(&net_dir).unwrap();
        let socket = dir.join("containerd.sock");
        let config = format!(
            r#"version = 2
root = "{root}"
state = "{state}"
[grpc]
  address = "{sock}"
[ttrpc]
  address = "{sock}.ttrpc"
[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "{image}"
    restrict_oom_score_adj = true
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "{bin}"
      conf_dir = "{net}"
"#,
            root = dir.join("root").display(),
            state = dir.join("state").display(),
            sock = socket.display(),
            bin = cni_bin_dir.display(),
            net = net_dir.display(),
        );
        std::fs::write(dir.join("config.toml"), config).unwrap();
        let python = crate::qemu::peers_dir().join("venv/bin/python");
        assert!(
            python.is_file(),
            "{} is missing: run scripts/install-peers.sh (grpcio-tools)",
            python.display()
        );
        let mut c = Self {
            child: None,
            dir,
            socket,
            net_dir,
            python,
        };
        c.spawn();
        c
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("containerd.log"))
            .unwrap();
        let child = Command::new("containerd")
            .arg("--config")
            .arg(self.dir.join("config.toml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("containerd is missing: run scripts/install-peers.sh (containerd, runc)");
        self.child = Some(child);
        let t0 = Instant::now();
        while self.try_call("Version", &json!({})).is_err() {
            if let Some(st) = self
                .child
                .as_mut()
                .and_then(|ch| ch.try_wait().ok().flatten())
            {
                panic!("containerd exited with {st}:\n{}", self.log());
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "containerd's CRI does not answer after 30 s:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            crate::process::signal(&c, libc::SIGTERM);
            if crate::process::wait_timeout(&mut c, Duration::from_secs(10)).is_none() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }

    /// What containerd logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("containerd.log")).unwrap_or_default()
    }

    /// One CRI call (`RuntimeService`'s `method`, the request in protobuf's
    /// JSON mapping); the response, or the gRPC error.
    ///
    /// # Errors
    ///
    /// The call's gRPC status and message.
    pub fn try_call(&self, method: &str, req: &Value) -> Result<Value, String> {
        let o = Command::new(&self.python)
            .args(["-c", CRI_CLIENT])
            .arg(&self.socket)
            .arg(self.dir.join("cri-stubs"))
            .arg(method)
            .arg(req.to_string())
            .env(
                "VHU_CRI_PROTO",
                Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/proto/api.proto"),
            )
            .output()
            .expect("run the CRI client");
        if !o.status.success() {
            return Err(String::from_utf8_lossy(&o.stderr).into_owned());
        }
        serde_json::from_slice(&o.stdout).map_err(|e| format!("{method}: {e}"))
    }

    /// [`Containerd::try_call`] that must succeed.
    ///
    /// # Panics
    ///
    /// If the call fails.
    pub fn call(&self, method: &str, req: &Value) -> Value {
        self.try_call(method, req)
            .unwrap_or_else(|e| panic!("CRI {method} {req}: {e}"))
    }

    /// Imports an image archive into the CRI's namespace (`k8s.io`).
    ///
    /// # Panics
    ///
    /// If `ctr` fails.
    pub fn import(&self, archive: &Path) {
        let o = Command::new("ctr")
            .arg("--address")
            .arg(&self.socket)
            .args(["-n", "k8s.io", "images", "import"])
            .arg(archive)
            .output()
            .expect("run ctr");
        assert!(
            o.status.success(),
            "ctr images import: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }

    /// Makes `conflist` the only CNI network (`conf_dir/10-<name>.conflist`)
    /// and waits until the CRI plugin has loaded it (its `Status` names it).
    /// containerd 1.6's configuration watcher saw no change here, so
    /// containerd is restarted (with no pods: call it between pods).
    ///
    /// # Panics
    ///
    /// If it is not loaded within 20 s.
    pub fn set_network(&mut self, conflist: &Value) {
        self.stop();
        let name = conflist["name"].as_str().expect("a named network");
        for e in std::fs::read_dir(&self.net_dir).unwrap().flatten() {
            std::fs::remove_file(e.path()).unwrap();
        }
        let tmp = self.dir.join("network.tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(conflist).unwrap()).unwrap();
        std::fs::rename(&tmp, self.net_dir.join(format!("10-{name}.conflist"))).unwrap();
        self.spawn();
        let t0 = Instant::now();
        loop {
            let st = self.call("Status", &json!({"verbose": true}));
            let cni = st["info"]["cniconfig"].as_str().unwrap_or_default();
            let loaded: Value = serde_json::from_str(cni).unwrap_or(Value::Null);
            let names: Vec<&str> = loaded["Networks"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|n| n["Config"]["Name"].as_str())
                .collect();
            if names.contains(&name) {
                return;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "containerd did not load network {name}: {names:?}\n{st}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// RunPodSandbox of pod `name` (namespace `vhu`, uid `uid`).
    pub fn run_pod(&self, name: &str, uid: &str) -> Sandbox {
        let config = json!({
            "metadata": {"name": name, "namespace": "vhu", "uid": uid, "attempt": 0},
            "hostname": name,
            "log_directory": self.dir.join("logs").join(name),
            "annotations": {"vhu.example/test": name},
            // Privileged, so that its containers may be (DPDK, raw sockets).
            "linux": {"cgroup_parent": "/vhu-cri-test",
                      "security_context": {"privileged": true}},
        });
        let r = self.call("RunPodSandbox", &json!({"config": config}));
        Sandbox {
            id: r["pod_sandbox_id"]
                .as_str()
                .expect("pod_sandbox_id")
                .to_owned(),
            config,
        }
    }

    /// PodSandboxStatus (verbose): `(status, info)`.
    pub fn pod_status(&self, pod: &Sandbox) -> (Value, Value) {
        let r = self.call(
            "PodSandboxStatus",
            &json!({"pod_sandbox_id": pod.id, "verbose": true}),
        );
        let info: Value =
            serde_json::from_str(r["info"]["info"].as_str().unwrap_or("null")).unwrap_or_default();
        (r["status"].clone(), info)
    }

    /// The pod's IP and network namespace path, as the CRI reports them.
    pub fn pod_network(&self, pod: &Sandbox) -> (String, String) {
        let (st, info) = self.pod_status(pod);
        let ip = st["network"]["ip"].as_str().unwrap_or_default().to_owned();
        let netns = info["runtimeSpec"]["linux"]["namespaces"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|n| n["type"] == "network")
            .and_then(|n| n["path"].as_str())
            .unwrap_or_default()
            .to_owned();
        (ip, netns)
    }

    /// CreateContainer + StartContainer in `pod`: `command` in `image`,
    /// privileged (a DPDK application's memory and a raw socket's
    /// capabilities), with `mounts` (host path, container path).
    pub fn start_container(
        &self,
        pod: &Sandbox,
        name: &str,
        image: &str,
        command: &[String],
        mounts: &[(&Path, &str)],
    ) -> String {
        let mounts: Vec<Value> = mounts
            .iter()
            .map(|(h, c)| json!({"host_path": h, "container_path": c}))
            .collect();
        let config = json!({
            "metadata": {"name": name},
            "image": {"image": image},
            "command": command,
            "mounts": mounts,
            "log_path": format!("{name}.log"),
            "linux": {"security_context": {"privileged": true}},
        });
        let r = self.call(
            "CreateContainer",
            &json!({"pod_sandbox_id": pod.id, "config": config, "sandbox_config": pod.config}),
        );
        let id = r["container_id"].as_str().expect("container_id").to_owned();
        self.call("StartContainer", &json!({"container_id": id}));
        id
    }

    /// Waits until container `id` exited; its exit code.
    ///
    /// # Panics
    ///
    /// If it still runs after `timeout`.
    pub fn wait_exit(&self, id: &str, timeout: Duration) -> i64 {
        let t0 = Instant::now();
        loop {
            let st = self.call("ContainerStatus", &json!({"container_id": id}));
            if st["status"]["state"] == "CONTAINER_EXITED" {
                return st["status"]["exit_code"].as_i64().unwrap_or(0);
            }
            assert!(
                t0.elapsed() < timeout,
                "container {id} still runs after {timeout:?}: {st}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// StopContainer (SIGTERM, SIGKILL after `grace`).
    pub fn stop_container(&self, id: &str, grace: Duration) {
        self.call(
            "StopContainer",
            &json!({"container_id": id, "timeout": grace.as_secs()}),
        );
    }

    /// StopPodSandbox then RemovePodSandbox, as the kubelet does when a pod
    /// is deleted (CNI DEL at each).
    pub fn remove_pod(&self, pod: &Sandbox) {
        self.call("StopPodSandbox", &json!({"pod_sandbox_id": pod.id}));
        self.call("RemovePodSandbox", &json!({"pod_sandbox_id": pod.id}));
    }

    /// The ids of the pod sandboxes the CRI lists.
    pub fn pods(&self) -> Vec<String> {
        let r = self.call("ListPodSandbox", &json!({}));
        r["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["id"].as_str().map(str::to_owned))
            .collect()
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        // What a failed test left: its pods (their shims outlive
        // containerd), then containerd, then the snapshot mounts.
        if let Ok(r) = self.try_call("ListPodSandbox", &json!({})) {
            for p in r["items"].as_array().into_iter().flatten() {
                let id = json!({"pod_sandbox_id": p["id"]});
                let _ = self.try_call("StopPodSandbox", &id);
                let _ = self.try_call("RemovePodSandbox", &id);
            }
        }
        self.stop();
        let _ = Command::new("umount")
            .arg("-R")
            .arg(self.dir.join("root"))
            .status();
        if std::thread::panicking() {
            eprintln!("----- containerd log (tail) -----");
            let log = self.log();
            let lines: Vec<&str> = log.lines().collect();
            for l in &lines[lines.len().saturating_sub(40)..] {
                eprintln!("{l}");
            }
            eprintln!("----- end -----");
        }
    }
}
