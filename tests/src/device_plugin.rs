// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! `vhu-device-plugin` under test: a test kubelet (the `Registration`
//! service of kubelet's device-plugin API, served on a private
//! `kubelet.sock`), the plugin as a process pointed at it, and `vhu-cni`
//! runs as a runtime makes them.
//!
//! * `VHU_DEVICE_PLUGIN_BIN`, `VHU_CNI_BIN`: the binaries (default:
//!   `target/release/...`, built by `cargo build --release --workspace`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::UnixListenerStream;
use vhu_device_plugin::api::registration_server::{Registration, RegistrationServer};
use vhu_device_plugin::api::{Empty, RegisterRequest};

use crate::bins;

/// A binary of the workspace's release build (or the one `var` names).
pub fn release_bin(name: &str, var: &str) -> PathBuf {
    bins::from_env(var).unwrap_or_else(|| {
        let built = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../target/release")
            .join(name);
        bins::built_example(
            name,
            &[built],
            "cargo build --release --workspace --bins",
            var,
        )
    })
}

/// The `Registration` service: passes each request on.
struct Recorder(mpsc::UnboundedSender<RegisterRequest>);

#[tonic::async_trait]
impl Registration for Recorder {
    async fn register(
        &self,
        req: tonic::Request<RegisterRequest>,
    ) -> Result<tonic::Response<Empty>, tonic::Status> {
        let _ = self.0.send(req.into_inner());
        Ok(tonic::Response::new(Empty {}))
    }
}

/// A test kubelet: `Registration` on `<dir>/kubelet.sock`, on `rt`.
#[derive(Debug)]
pub struct TestKubelet {
    /// Kubelet's device-plugin directory.
    pub dir: PathBuf,
    requests: mpsc::UnboundedReceiver<RegisterRequest>,
    stop: Option<oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<()>>,
}

impl TestKubelet {
    /// Serves `Registration` on `<dir>/kubelet.sock` (made anew).
    ///
    /// # Panics
    /// When the socket cannot be bound.
    pub fn start(rt: &tokio::runtime::Runtime, dir: &Path) -> Self {
        std::fs::create_dir_all(dir).expect("kubelet dir");
        let sock = dir.join(vhu_device_plugin::KUBELET_SOCKET);
        let _ = std::fs::remove_file(&sock);
        let (tx, requests) = mpsc::unbounded_channel();
        let (stop, stopped) = oneshot::channel::<()>();
        let listener = {
            let _guard = rt.enter();
            tokio::net::UnixListener::bind(&sock).expect("bind kubelet.sock")
        };
        let server = rt.spawn(async move {
            tonic::transport::Server::builder()
                .add_service(RegistrationServer::new(Recorder(tx)))
                .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async {
                    let _ = stopped.await;
                })
                .await
                .expect("the test kubelet's server");
        });
        Self {
            dir: dir.to_owned(),
            requests,
            stop: Some(stop),
            server: Some(server),
        }
    }

    /// The next `Register` call, within `timeout`.
    ///
    /// # Panics
    /// When none comes.
    pub fn next_register(
        &mut self,
        rt: &tokio::runtime::Runtime,
        timeout: Duration,
    ) -> RegisterRequest {
        rt.block_on(async { tokio::time::timeout(timeout, self.requests.recv()).await })
            .unwrap_or_else(|_| panic!("no Register call within {timeout:?}"))
            .expect("the test kubelet's server ended")
    }

    /// Whether a `Register` call is pending, without waiting.
    pub fn pending(&mut self) -> bool {
        !self.requests.is_empty()
    }

    /// Stops serving and, as kubelet does when it restarts, removes every
    /// socket in its directory (its own and the plugins').
    pub fn restart_wipe(&mut self, rt: &tokio::runtime::Runtime) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(h) = self.server.take() {
            let _ = rt.block_on(async { tokio::time::timeout(Duration::from_secs(5), h).await });
        }
        for e in std::fs::read_dir(&self.dir).expect("kubelet dir").flatten() {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// `vhu-device-plugin` as a process; its log is shown when a test fails.
#[derive(Debug)]
pub struct PluginProc {
    child: Option<Child>,
    log: PathBuf,
}

impl PluginProc {
    /// Starts the plugin with `args`, logging to `log`.
    ///
    /// # Panics
    /// When it cannot be started.
    pub fn start(args: &[String], log: &Path) -> Self {
        let f = std::fs::File::create(log).expect("plugin log");
        let child = Command::new(release_bin("vhu-device-plugin", "VHU_DEVICE_PLUGIN_BIN"))
            .args(args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(f.try_clone().expect("dup the log"))
            .stderr(f)
            .spawn()
            .expect("start vhu-device-plugin");
        Self {
            child: Some(child),
            log: log.to_owned(),
        }
    }

    /// What it logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM; its exit, within 10 s.
    ///
    /// # Panics
    /// When it does not exit.
    pub fn stop(&mut self) -> ExitStatus {
        let c = self.child.as_mut().expect("running");
        crate::process::signal(c, libc::SIGTERM);
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(10) {
            if let Some(st) = c.try_wait().expect("wait") {
                self.child = None;
                return st;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // Drop kills and reaps it.
        panic!(
            "vhu-device-plugin ignored SIGTERM for 10 s:\n{}",
            self.log()
        );
    }
}

impl Drop for PluginProc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if std::thread::panicking() {
            eprintln!(
                "----- vhu-device-plugin log -----\n{}----- end -----",
                self.log()
            );
        }
    }
}

/// One run of `vhu-cni`: exit success, stdout, stdout as JSON (`null` when
/// it is not).
#[derive(Debug)]
pub struct CniOut {
    /// Exit status 0.
    pub ok: bool,
    /// What it printed.
    pub stdout: String,
    /// That, parsed.
    pub json: Value,
}

/// Runs `vhu-cni` with exactly `env` (and a `PATH`) and `conf` on stdin.
///
/// # Panics
/// When it cannot be run.
pub fn run_cni(env: &[(&str, &str)], conf: &Value) -> CniOut {
    let mut child = Command::new(release_bin("vhu-cni", "VHU_CNI_BIN"))
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("run vhu-cni");
    let body = conf.to_string();
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(body.as_bytes())
        .expect("write the configuration");
    let out = child.wait_with_output().expect("wait for vhu-cni");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    CniOut {
        ok: out.status.success(),
        json: serde_json::from_str(&stdout).unwrap_or(Value::Null),
        stdout,
    }
}

/// Waits until `cond` holds, polling every 20 ms, for at most `timeout`.
///
/// # Panics
/// With `what` when it does not.
pub fn wait_until(timeout: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < timeout, "{what}: not within {timeout:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
