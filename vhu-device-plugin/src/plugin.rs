// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The `DevicePlugin` service and the loop that serves it on the plugin's
//! socket, registers with kubelet, and starts over when kubelet restarts.
//!
//! Devices are slots `vhu0` .. `vhu<N-1>`. `Allocate` makes, per container
//! request, one socket directory `<host-dir>/<first device>` (owner, group
//! and mode as configured) mounted read-write at `<container-path>`; the
//! request's other devices get `<host-dir>/<device>` as a symlink to it, so
//! that `vhu-cni` finds every device's directory and all the container's
//! sockets are under one mount. Each device gets its device-info file.
//!
//! Kubelet never says when an allocation ends: `vhu-cni` DEL removes the
//! socket (and its `<ifname>` directory) and the CNI's device-info file;
//! the device's directory stays until the next `Allocate` of the device,
//! which removes it with whatever the last pod left there and makes it
//! anew, never following a link ([`crate::slotfs`]): kubelet offers a
//! device again only once the pod that had it is gone.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::{ReceiverStream, UnixListenerStream};
use tonic::{Request, Response, Status};

use crate::api::device_plugin_server::{DevicePlugin, DevicePluginServer};
use crate::api::registration_client::RegistrationClient;
use crate::api::{
    AllocateRequest, AllocateResponse, ContainerAllocateResponse,
    ContainerPreferredAllocationResponse, Device, DevicePluginOptions, Empty, ListAndWatchResponse,
    Mount, PreStartContainerRequest, PreStartContainerResponse, PreferredAllocationRequest,
    PreferredAllocationResponse, RegisterRequest,
};
use crate::slotfs::HostDir;
use crate::{
    connect_unix, device_ids, devinfo_file_name, API_VERSION, HEALTHY, KUBELET_SOCKET, UNHEALTHY,
};

/// Environment variable naming the socket directory in the container.
pub const ENV_SOCKET_DIR: &str = "VHU_SOCKET_DIR";
/// Environment variable listing the container's device ids (comma-separated).
pub const ENV_DEVICE_IDS: &str = "VHU_DEVICE_IDS";

/// What the plugin serves and where (the binary's flags, checked).
#[derive(Debug, Clone)]
pub struct Config {
    /// The extended resource, `<domain>/<name>`.
    pub resource: String,
    /// How many devices.
    pub slots: u32,
    /// Kubelet's device-plugin directory (`kubelet.sock` and ours).
    pub kubelet_dir: PathBuf,
    /// Our socket's file name in `kubelet_dir`.
    pub endpoint: String,
    /// Where the per-allocation socket directories are made.
    pub host_dir: PathBuf,
    /// Where the socket directory appears in the container.
    pub container_path: String,
    /// Where the device-info files go.
    pub devinfo_dir: PathBuf,
    /// The device-info `vhost-user.mode` (the host side's role).
    pub devinfo_mode: String,
    /// Owner of the socket directories.
    pub dir_uid: Option<u32>,
    /// Group of the socket directories.
    pub dir_gid: Option<u32>,
    /// Mode of the socket directories.
    pub dir_mode: u32,
    /// How often the devices' health is looked at.
    pub health_interval: Duration,
}

impl Config {
    /// Our socket.
    pub fn socket(&self) -> PathBuf {
        self.kubelet_dir.join(&self.endpoint)
    }

    /// Kubelet's registration socket.
    pub fn kubelet_socket(&self) -> PathBuf {
        self.kubelet_dir.join(KUBELET_SOCKET)
    }

    /// The device-info file of `device`.
    pub fn devinfo_path(&self, device: &str) -> PathBuf {
        self.devinfo_dir
            .join(devinfo_file_name(&self.resource, device))
    }

    /// Checks the values kubelet and the file system would refuse later.
    ///
    /// # Errors
    /// What is wrong and how to fix it.
    pub fn check(&self) -> Result<(), String> {
        check_resource(&self.resource)?;
        if self.slots == 0 || self.slots > 4096 {
            return Err(format!("--slots {} is out of range 1-4096", self.slots));
        }
        let e = &self.endpoint;
        if e.is_empty() || e.contains('/') || e == "." || e == ".." || e == KUBELET_SOCKET {
            return Err(format!(
                "--endpoint {e:?} must be a file name in --kubelet-dir (not {KUBELET_SOCKET})"
            ));
        }
        for (flag, p) in [
            ("--kubelet-dir", self.kubelet_dir.as_path()),
            ("--host-dir", self.host_dir.as_path()),
            ("--devinfo-dir", self.devinfo_dir.as_path()),
            ("--container-path", Path::new(&self.container_path)),
        ] {
            if !p.is_absolute() {
                return Err(format!("{flag} {} must be an absolute path", p.display()));
            }
        }
        if !matches!(self.devinfo_mode.as_str(), "client" | "server") {
            return Err(format!(
                "--devinfo-mode {:?} must be \"client\" or \"server\"",
                self.devinfo_mode
            ));
        }
        if self.dir_mode > 0o7777 {
            return Err(format!("--dir-mode {:o} is not a file mode", self.dir_mode));
        }
        for (flag, id) in [("--dir-owner", self.dir_uid), ("--dir-group", self.dir_gid)] {
            if id == Some(u32::MAX) {
                return Err(format!(
                    "{flag} {} is not an id (it means \"none\")",
                    u32::MAX
                ));
            }
        }
        Ok(())
    }
}

/// An extended resource name as kubelet takes it: `<DNS subdomain>/<name>`,
/// outside `kubernetes.io`.
fn check_resource(r: &str) -> Result<(), String> {
    let bad = |why: &str| {
        Err(format!(
            "--resource {r:?} {why}; use an extended resource name such as vhu.dev/vhost-user"
        ))
    };
    let Some((domain, name)) = r.split_once('/') else {
        return bad("has no domain prefix");
    };
    let label = |s: &str, extra: &[u8]| {
        !s.is_empty()
            && s.len() <= 63
            && s.bytes().next().is_some_and(|c| c.is_ascii_alphanumeric())
            && s.bytes().last().is_some_and(|c| c.is_ascii_alphanumeric())
            && s.bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || extra.contains(&c))
    };
    if domain.len() > 253 || !domain.split('.').all(|l| label(l, &[])) {
        return bad("has an invalid domain");
    }
    if domain == "kubernetes.io" || domain.ends_with(".kubernetes.io") {
        return bad("is in kubernetes.io, which is reserved");
    }
    if !label(name, b"._") {
        return bad("has an invalid name after the /");
    }
    Ok(())
}

/// Parses an owner or group: a numeric id, or a name in `db`
/// (`/etc/passwd`, `/etc/group`).
///
/// # Errors
/// When the name is not there.
pub fn resolve_id(db: &Path, v: &str) -> Result<u32, String> {
    if let Ok(n) = v.parse() {
        return Ok(n);
    }
    let text = std::fs::read_to_string(db).unwrap_or_default();
    for line in text.lines() {
        let f: Vec<&str> = line.split(':').collect();
        if f.len() > 2 && f[0] == v {
            if let Ok(id) = f[2].parse() {
                return Ok(id);
            }
        }
    }
    Err(format!(
        "{v:?} is not a number nor a name in {}",
        db.display()
    ))
}

/// The slot number of a device id (`vhu7`: 7).
fn slot(id: &str) -> u32 {
    id.strip_prefix("vhu")
        .and_then(|n| n.parse().ok())
        .unwrap_or(u32::MAX)
}

/// A device's place on disk, as the health check sees it.
fn healthy(host_dir: &Path, id: &str) -> bool {
    match std::fs::symlink_metadata(host_dir.join(id)) {
        Err(_) => true,
        Ok(m) => m.is_dir() || m.file_type().is_symlink(),
    }
}

/// Mutable state: health and allocation order.
#[derive(Debug)]
struct State {
    health: BTreeMap<String, bool>,
    /// Allocation sequence number of each device (0: never).
    allocated: BTreeMap<String, u64>,
    seq: u64,
    /// Device-info files written, to remove at exit.
    written: BTreeSet<PathBuf>,
}

/// The service: shared by every generation of the server.
#[derive(Debug, Clone)]
pub struct Plugin {
    cfg: Arc<Config>,
    ids: Arc<Vec<String>>,
    state: Arc<Mutex<State>>,
    devices: watch::Sender<Vec<Device>>,
    /// `true` once the current server generation must stop (its streams end).
    stop: watch::Sender<bool>,
}

impl Plugin {
    /// A plugin for `cfg`, every device healthy.
    pub fn new(cfg: Config) -> Self {
        let ids = device_ids(cfg.slots);
        let health = ids.iter().map(|i| (i.clone(), true)).collect();
        let state = State {
            health,
            allocated: BTreeMap::new(),
            seq: 0,
            written: BTreeSet::new(),
        };
        let devices = watch::Sender::new(Self::list(&state));
        Self {
            cfg: Arc::new(cfg),
            ids: Arc::new(ids),
            state: Arc::new(Mutex::new(state)),
            devices,
            stop: watch::Sender::new(false),
        }
    }

    /// The device list, in numeric order of the ids.
    fn list(s: &State) -> Vec<Device> {
        let mut d: Vec<Device> = s
            .health
            .iter()
            .map(|(id, ok)| Device {
                id: id.clone(),
                health: if *ok { HEALTHY } else { UNHEALTHY }.into(),
                topology: None,
            })
            .collect();
        d.sort_by_key(|d| slot(&d.id));
        d
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Looks at every device's directory; publishes the list when a health
    /// changed.
    pub fn refresh_health(&self) {
        let mut s = self.lock();
        let mut changed = false;
        for id in self.ids.iter() {
            let ok = healthy(&self.cfg.host_dir, id);
            if s.health.insert(id.clone(), ok) != Some(ok) {
                changed = true;
                tracing::warn!(device = %id, healthy = ok, "device health changed");
            }
        }
        if changed {
            let list = Self::list(&s);
            self.devices.send_replace(list);
        }
    }

    fn current(&self) -> Vec<Device> {
        self.devices.borrow().clone()
    }

    fn unknown(&self, id: &str) -> Status {
        Status::invalid_argument(format!(
            "unknown device ID {id:?}: this plugin's devices of {} are vhu0 to vhu{}",
            self.cfg.resource,
            self.ids.len() - 1
        ))
    }

    fn known(&self, id: &str) -> bool {
        self.lock().health.contains_key(id)
    }

    /// Whether a device's directory holds anything (an attachment whose
    /// CNI DEL did not come, or what a pod left): such devices are offered
    /// last. A link (another device of a container) is looked through once.
    fn in_use(&self, id: &str) -> bool {
        HostDir::open(&self.cfg.host_dir, false).is_ok_and(|h| h.holds_anything(id))
    }

    /// Checks a whole `Allocate` before anything is touched.
    fn check_allocate(&self, req: &AllocateRequest) -> Result<(), Status> {
        if req.container_requests.is_empty() {
            return Err(Status::invalid_argument(
                "the AllocateRequest has no container request",
            ));
        }
        let mut seen = BTreeSet::new();
        for c in &req.container_requests {
            if c.devices_ids.is_empty() {
                return Err(Status::invalid_argument(
                    "a container request names no device",
                ));
            }
            for id in &c.devices_ids {
                if !self.known(id) {
                    return Err(self.unknown(id));
                }
                if !seen.insert(id) {
                    return Err(Status::invalid_argument(format!(
                        "device ID {id:?} is requested twice"
                    )));
                }
                if !healthy(&self.cfg.host_dir, id) {
                    return Err(Status::failed_precondition(format!(
                        "device {id} is unhealthy: {} is not a directory; remove it",
                        self.cfg.host_dir.join(id).display()
                    )));
                }
            }
        }
        Ok(())
    }

    /// Makes one container's directories and device-info files.
    ///
    /// Each device's entry is replaced whatever it holds: the first
    /// device's by a new empty directory, the others' by a link to it. What
    /// the last pod of a device left in its directory (files, directories,
    /// sockets, links to anywhere) is removed without following any link
    /// ([`HostDir::fresh_dir`]), so the next pod starts from an empty
    /// directory with the configured owner and mode.
    fn allocate_one(&self, ids: &[String]) -> io::Result<ContainerAllocateResponse> {
        let cfg = &*self.cfg;
        let primary = cfg.host_dir.join(&ids[0]);
        let host = HostDir::open(&cfg.host_dir, true)?;
        host.fresh_dir(&ids[0], cfg.dir_uid, cfg.dir_gid, cfg.dir_mode)?;
        for id in &ids[1..] {
            host.fresh_link(&ids[0], id)?;
        }
        let devinfo = HostDir::open(&cfg.devinfo_dir, true)?;
        let info = serde_json::json!({
            "type": "vhost-user",
            "version": "1.1.0",
            "vhost-user": {"mode": cfg.devinfo_mode, "path": cfg.container_path},
        });
        let mut written = Vec::new();
        for id in ids {
            devinfo.write_file(
                &devinfo_file_name(&cfg.resource, id),
                info.to_string().as_bytes(),
                0o444,
            )?;
            written.push(cfg.devinfo_path(id));
        }
        let mut s = self.lock();
        s.written.extend(written);
        for id in ids {
            s.seq += 1;
            let n = s.seq;
            s.allocated.insert(id.clone(), n);
        }
        Ok(ContainerAllocateResponse {
            envs: HashMap::from([
                (ENV_SOCKET_DIR.into(), cfg.container_path.clone()),
                (ENV_DEVICE_IDS.into(), ids.join(",")),
            ]),
            mounts: vec![Mount {
                container_path: cfg.container_path.clone(),
                host_path: primary.display().to_string(),
                read_only: false,
            }],
            ..Default::default()
        })
    }

    /// Removes the device-info files this process wrote (the spec: a device
    /// plugin deletes its files when it stops).
    pub fn remove_devinfo(&self) {
        let files = std::mem::take(&mut self.lock().written);
        let Ok(dir) = HostDir::open(&self.cfg.devinfo_dir, false) else {
            return;
        };
        for f in files {
            if let Some(name) = f.file_name().and_then(|n| n.to_str()) {
                let _ = dir.remove_file(name);
            }
        }
    }
}

#[tonic::async_trait]
impl DevicePlugin for Plugin {
    async fn get_device_plugin_options(
        &self,
        _: Request<Empty>,
    ) -> Result<Response<DevicePluginOptions>, Status> {
        Ok(Response::new(options()))
    }

    type ListAndWatchStream = ReceiverStream<Result<ListAndWatchResponse, Status>>;

    async fn list_and_watch(
        &self,
        _: Request<Empty>,
    ) -> Result<Response<Self::ListAndWatchStream>, Status> {
        let (tx, rx) = mpsc::channel(4);
        let mut devices = self.devices.subscribe();
        let mut stop = self.stop.subscribe();
        let this = self.clone();
        tokio::spawn(async move {
            loop {
                devices.mark_unchanged();
                let msg = ListAndWatchResponse {
                    devices: this.current(),
                };
                if tx.send(Ok(msg)).await.is_err() {
                    return;
                }
                tokio::select! {
                    r = devices.changed() => if r.is_err() { return },
                    _ = stop.wait_for(|s| *s) => return,
                    () = tx.closed() => return,
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn get_preferred_allocation(
        &self,
        req: Request<PreferredAllocationRequest>,
    ) -> Result<Response<PreferredAllocationResponse>, Status> {
        let mut out = Vec::new();
        for c in &req.get_ref().container_requests {
            for id in c
                .available_device_i_ds
                .iter()
                .chain(&c.must_include_device_i_ds)
            {
                if !self.known(id) {
                    return Err(self.unknown(id));
                }
            }
            let size = usize::try_from(c.allocation_size).map_err(|_| {
                Status::invalid_argument(format!(
                    "allocation_size {} is negative",
                    c.allocation_size
                ))
            })?;
            let mut pick: Vec<String> = c.must_include_device_i_ds.clone();
            let mut rest: Vec<&String> = c
                .available_device_i_ds
                .iter()
                .filter(|i| !pick.contains(i))
                .collect();
            rest.sort_by_cached_key(|id| {
                let seq = self.lock().allocated.get(*id).copied().unwrap_or(0);
                (self.in_use(id), seq, slot(id))
            });
            rest.dedup();
            let more = size.saturating_sub(pick.len());
            pick.extend(rest.into_iter().take(more).cloned());
            out.push(ContainerPreferredAllocationResponse { device_i_ds: pick });
        }
        Ok(Response::new(PreferredAllocationResponse {
            container_responses: out,
        }))
    }

    async fn allocate(
        &self,
        req: Request<AllocateRequest>,
    ) -> Result<Response<AllocateResponse>, Status> {
        let req = req.into_inner();
        self.check_allocate(&req)?;
        let mut out = Vec::new();
        for c in &req.container_requests {
            match self.allocate_one(&c.devices_ids) {
                Ok(r) => out.push(r),
                Err(e) => {
                    // Kubelet's contract: tell ListAndWatch, fail the request.
                    self.refresh_health();
                    tracing::error!(devices = ?c.devices_ids, "allocate failed: {e}");
                    return Err(Status::internal(format!(
                        "cannot prepare devices {:?} under {}: {e}",
                        c.devices_ids,
                        self.cfg.host_dir.display()
                    )));
                }
            }
        }
        tracing::info!(requests = ?req.container_requests.iter().map(|c| &c.devices_ids).collect::<Vec<_>>(), "allocated");
        Ok(Response::new(AllocateResponse {
            container_responses: out,
        }))
    }

    async fn pre_start_container(
        &self,
        _: Request<PreStartContainerRequest>,
    ) -> Result<Response<PreStartContainerResponse>, Status> {
        Ok(Response::new(PreStartContainerResponse {}))
    }
}

/// The options the plugin registers with and answers.
pub fn options() -> DevicePluginOptions {
    DevicePluginOptions {
        pre_start_required: false,
        get_preferred_allocation_available: true,
    }
}

/// The inode of a file, if it is there.
fn inode(p: &Path) -> Option<u64> {
    std::fs::symlink_metadata(p).ok().map(|m| m.ino())
}

/// Why a server generation ended.
enum End {
    /// SIGTERM or SIGINT.
    Signal,
    /// Our socket was removed, or kubelet's re-created: start over.
    Restart(&'static str),
}

/// Serves, registers, watches, and starts over until SIGTERM/SIGINT; then
/// stops serving, removes the socket and the device-info files.
///
/// # Errors
/// When the socket cannot be bound, or kubelet refuses the registration.
pub async fn run(cfg: Config) -> Result<(), String> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
    let plugin = Plugin::new(cfg.clone());
    let health = {
        let p = plugin.clone();
        let every = cfg.health_interval;
        tokio::spawn(async move {
            loop {
                p.refresh_health();
                tokio::time::sleep(every).await;
            }
        })
    };
    let result = loop {
        let sock = cfg.socket();
        let _ = std::fs::remove_file(&sock);
        let listener = tokio::net::UnixListener::bind(&sock)
            .map_err(|e| format!("cannot listen on {}: {e}", sock.display()))?;
        let ours = inode(&sock);
        plugin.stop.send_replace(false);
        let server = {
            let mut stop = plugin.stop.subscribe();
            let svc = DevicePluginServer::new(plugin.clone());
            tokio::spawn(
                tonic::transport::Server::builder()
                    .add_service(svc)
                    .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async move {
                        let _ = stop.wait_for(|s| *s).await;
                    }),
            )
        };
        tracing::info!(socket = %sock.display(), "serving");

        // Register (kubelet may not be up yet: retry until it answers).
        let end = loop {
            let kubelet = cfg.kubelet_socket();
            let r = tokio::select! {
                r = register(&cfg) => r,
                _ = term.recv() => break Some(End::Signal),
                _ = int.recv() => break Some(End::Signal),
            };
            match r {
                Ok(()) => {
                    tracing::info!(resource = %cfg.resource, kubelet = %kubelet.display(), "registered");
                    break None;
                }
                Err(Reg::Refused(s)) => {
                    plugin.stop.send_replace(true);
                    let _ = std::fs::remove_file(&sock);
                    plugin.remove_devinfo();
                    return Err(format!(
                        "kubelet refused the registration of {}: {} ({:?})",
                        cfg.resource,
                        s.message(),
                        s.code()
                    ));
                }
                Err(Reg::Unreachable(e)) => {
                    tracing::debug!("kubelet not reachable on {}: {e}", kubelet.display());
                }
            }
            if inode(&sock) != ours {
                break Some(End::Restart("our socket was removed"));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        let kubelet_ino = inode(&cfg.kubelet_socket());
        let end = match end {
            Some(e) => e,
            None => loop {
                tokio::select! {
                    _ = term.recv() => break End::Signal,
                    _ = int.recv() => break End::Signal,
                    () = tokio::time::sleep(Duration::from_millis(250)) => {}
                }
                if inode(&sock) != ours {
                    break End::Restart("our socket was removed");
                }
                let k = inode(&cfg.kubelet_socket());
                if k.is_some() && k != kubelet_ino {
                    break End::Restart("kubelet.sock was re-created");
                }
            },
        };
        plugin.stop.send_replace(true);
        let mut server = server;
        if tokio::time::timeout(Duration::from_secs(3), &mut server)
            .await
            .is_err()
        {
            tracing::warn!("the server did not stop in 3 s: dropping its connections");
            server.abort();
        }
        match end {
            End::Signal => {
                if inode(&sock) == ours {
                    let _ = std::fs::remove_file(&sock);
                }
                plugin.remove_devinfo();
                tracing::info!("stopped");
                break Ok(());
            }
            End::Restart(why) => tracing::warn!("kubelet restarted ({why}): registering again"),
        }
    };
    health.abort();
    result
}

/// How a registration failed.
enum Reg {
    /// Kubelet answered no: the plugin stops.
    Refused(Status),
    /// Kubelet is not there (yet).
    Unreachable(String),
}

async fn register(cfg: &Config) -> Result<(), Reg> {
    let mut client = RegistrationClient::new(connect_unix(&cfg.kubelet_socket()));
    let req = RegisterRequest {
        version: API_VERSION.into(),
        endpoint: cfg.endpoint.clone(),
        resource_name: cfg.resource.clone(),
        options: Some(options()),
    };
    match tokio::time::timeout(Duration::from_secs(5), client.register(req)).await {
        Err(_) => Err(Reg::Unreachable("no answer in 5 s".into())),
        Ok(Ok(_)) => Ok(()),
        Ok(Err(s))
            if s.code() == tonic::Code::Unavailable
                || s.code() == tonic::Code::Unknown && s.message().contains("transport") =>
        {
            Err(Reg::Unreachable(s.to_string()))
        }
        Ok(Err(s)) => Err(Reg::Refused(s)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_names() {
        for ok in ["vhu.dev/vhost-user", "example.com/a_b.c", "a/b"] {
            assert_eq!(check_resource(ok), Ok(()), "{ok}");
        }
        for (bad, why) in [
            ("vhost-user", "no domain prefix"),
            ("-x.dev/a", "invalid domain"),
            ("k8s.kubernetes.io/a", "reserved"),
            ("vhu.dev/", "invalid name"),
            ("vhu.dev/a/b", "invalid name"),
        ] {
            let e = check_resource(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn ids_resolve() {
        assert_eq!(resolve_id(Path::new("/etc/passwd"), "107"), Ok(107));
        assert_eq!(resolve_id(Path::new("/etc/passwd"), "root"), Ok(0));
        assert!(resolve_id(Path::new("/etc/group"), "no-such-group-x").is_err());
    }
}
