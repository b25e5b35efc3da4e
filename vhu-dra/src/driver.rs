// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Preparing and unpreparing one claim: the switch port, the socket
//! directory, the device metadata, the CDI spec, and the checkpoint that
//! lets a restarted driver answer and clean up.
//!
//! **Prepare** (for each of the claim's devices of this driver): the
//! parameters are admitted ([`crate::params`]), the checkpoint is written
//! first (state `preparing`, names only), then the socket directory
//! `<socket-root>/<uid>/<request>` is made anew (owner, group and mode as
//! configured), the port is created on the switch (labelled with the
//! claim's attachment), the metadata file and the CDI spec are written,
//! and the checkpoint becomes `prepared`. A failure undoes everything
//! (an unprepare). A claim already `prepared` is answered from its
//! checkpoint; only a port the switch lost is created again.
//!
//! **Unprepare** needs nothing but the claim's UID: the CDI spec, the
//! metadata and socket directories are derived from it, and the ports are
//! the switch's ports whose `attachment` label names it. What is gone is
//! skipped. When the switch cannot be reached the local files are removed
//! and the call fails, keeping the checkpoint: kubelet calls again.
//!
//! The socket directory is the pod's (mounted read-write): it is removed
//! without following links (`vhu_device_plugin::slotfs`). Every other
//! directory here is the driver's alone.

use std::io;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use vhu_api::client::{self, ClientError};
use vhu_api::{PortKind, PortSpec, PortView, Vlan};
use vhu_device_plugin::slotfs::HostDir;

use crate::claim::{self, ResourceClaim};
use crate::documents::{self, Prepared};
use crate::layout::{self, Layout};
use crate::params::{self, Bounds, VmRole};
use crate::source::ClaimSource;

/// Mode of the driver's own directories that QEMU (another user) must
/// walk through to reach a socket directory.
const WALK_MODE: u32 = 0o755;

/// The driver's configuration (its flags, checked).
#[derive(Debug, Clone)]
pub struct Config {
    /// Paths and names.
    pub layout: Layout,
    /// What claims may ask for.
    pub bounds: Bounds,
    /// The switch's control socket.
    pub control_socket: PathBuf,
    /// Where claims are read.
    pub source: ClaimSource,
    /// Owner of the socket directories.
    pub dir_uid: Option<u32>,
    /// Group of the socket directories.
    pub dir_gid: Option<u32>,
    /// Mode of the socket directories.
    pub dir_mode: u32,
    /// Most frames per second a port floods (the switch's default if
    /// `None`).
    pub flood_rate: Option<u32>,
    /// Most addresses a port learns.
    pub mac_limit: Option<u32>,
}

/// One device of a prepared claim, as kubelet is told.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceResult {
    /// The request as allocated.
    pub request: String,
    /// The top-level request (paths).
    pub request_dir: String,
    /// Pool.
    pub pool: String,
    /// Device.
    pub device: String,
    /// Share id (consumable capacity).
    #[serde(rename = "shareID", default, skip_serializing_if = "Option::is_none")]
    pub share_id: Option<String>,
    /// The CDI device id.
    pub cdi_id: String,
    /// The switch port.
    pub port: String,
    /// The MAC the port is locked to.
    #[serde(default)]
    pub mac: String,
}

/// A claim's checkpoint: names only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Checkpoint {
    /// Namespace.
    pub namespace: String,
    /// Claim name.
    pub name: String,
    /// Claim UID.
    pub uid: String,
    /// `preparing` or `prepared`.
    pub state: String,
    /// The devices (empty while `preparing`).
    pub devices: Vec<DeviceResult>,
    /// The port specs, to create a lost port again.
    pub ports: Vec<PortSpec>,
}

/// The driver: one claim at a time.
#[derive(Debug)]
pub struct Driver {
    cfg: Config,
    lock: Mutex<()>,
}

fn io_err(what: impl std::fmt::Display, e: io::Error) -> String {
    format!("{what}: {e}")
}

impl Driver {
    /// A driver for `cfg`.
    pub fn new(cfg: Config) -> Self {
        Self {
            cfg,
            lock: Mutex::new(()),
        }
    }

    /// Its configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    fn call(&self, method: &str, path: &str, body: Option<&[u8]>) -> Result<Vec<u8>, ClientError> {
        let s = UnixStream::connect(&self.cfg.control_socket)?;
        client::call(s, method, path, body).map(|(_, b)| b)
    }

    fn state_dir(&self, create: bool) -> io::Result<HostDir> {
        if create {
            std::fs::create_dir_all(&self.cfg.layout.state_dir)?;
            rustix::fs::chmod(
                &self.cfg.layout.state_dir,
                rustix::fs::Mode::from_raw_mode(0o700),
            )?;
        }
        HostDir::open(&self.cfg.layout.state_dir, false)
    }

    /// The claim's checkpoint, if there is one.
    pub fn checkpoint(&self, uid: &str) -> Option<Checkpoint> {
        let p = self.cfg.layout.state_dir.join(Layout::checkpoint_file(uid));
        let b = std::fs::read(p).ok()?;
        serde_json::from_slice(&b).ok()
    }

    fn save(&self, c: &Checkpoint) -> Result<(), String> {
        let d = self
            .state_dir(true)
            .map_err(|e| io_err(self.cfg.layout.state_dir.display(), e))?;
        let b = serde_json::to_vec_pretty(c).unwrap_or_default();
        d.write_file(&Layout::checkpoint_file(&c.uid), &b, 0o600)
            .map_err(|e| io_err("the checkpoint", e))
    }

    /// Prepares claim `namespace/name` (UID `uid`): its devices of this
    /// driver, as kubelet reports them to the runtime.
    ///
    /// # Errors
    /// Why the claim could not be prepared (nothing of it is left then).
    pub fn prepare(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> Result<Vec<DeviceResult>, String> {
        let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        claim::check_uid(uid)?;
        if let Some(c) = self.checkpoint(uid).filter(|c| c.state == "prepared") {
            self.ensure_ports(&c.ports)?;
            return Ok(c.devices);
        }
        let claim = self.cfg.source.get(namespace, name)?;
        claim::check_identity(&claim, namespace, name, uid)?;
        let r = self.prepare_new(&claim);
        if r.is_err() {
            // Undo what was made; the checkpoint goes with it.
            let _ = self.unprepare_locked(uid);
        }
        r
    }

    fn prepare_new(&self, claim: &ResourceClaim) -> Result<Vec<DeviceResult>, String> {
        let l = &self.cfg.layout;
        let m = &claim.metadata;
        let (pod_claim, from_template) = claim.pod_name();
        let allocated = claim.allocated(&l.driver)?;
        let mut plan = Vec::new();
        for a in &allocated {
            let admitted = params::admit(&claim.parameters(&l.driver, a), &self.cfg.bounds)
                .map_err(|e| format!("request {}: {e}", a.request))?;
            let port = layout::port_name(&m.uid, &a.request_dir);
            let mac = admitted.mac.unwrap_or_else(|| layout::derived_mac(&port));
            let container_socket = l.container_socket(pod_claim, &a.request_dir);
            if container_socket.len() > layout::MAX_SOCKET_PATH {
                return Err(format!(
                    "the socket path in the container, {container_socket}, is longer than {} \
                     bytes: use shorter claim and request names, or a shorter --container-root",
                    layout::MAX_SOCKET_PATH
                ));
            }
            let mut spec = PortSpec::new(port.clone(), PortKind::VhostUser);
            spec.socket = Some(l.host_socket(&m.uid, &a.request_dir).display().to_string());
            spec.role = Some(admitted.vm_role.switch_role());
            spec.queues = Some(admitted.queues);
            spec.mtu = Some(admitted.mtu);
            spec.vlan = Some(Vlan::Access(admitted.vlan));
            spec.mac = Some(vec![mac]);
            spec.flood_rate = self.cfg.flood_rate;
            spec.mac_limit = self.cfg.mac_limit;
            spec.attachment = Some(layout::attachment(
                &m.namespace,
                &m.name,
                &m.uid,
                &a.request_dir,
            ));
            if let Err(errs) = spec.validate() {
                let e: Vec<String> = errs.iter().map(ToString::to_string).collect();
                return Err(format!("the port would be invalid: {}", e.join("; ")));
            }
            let prepared = Prepared {
                request: a.request_dir.clone(),
                pool: a.pool.clone(),
                device: a.device.clone(),
                port: port.clone(),
                mac: mac.to_string(),
                admitted,
                host_dir: l
                    .claim_socket_dir(&m.uid)
                    .join(&a.request_dir)
                    .display()
                    .to_string(),
                container_dir: l.container_dir(pod_claim, &a.request_dir),
                container_socket,
                host_metadata_dir: l
                    .claim_metadata_dir(&m.uid)
                    .join(&a.request_dir)
                    .display()
                    .to_string(),
                container_metadata_dir: Layout::container_metadata_dir(
                    pod_claim,
                    from_template,
                    &a.request_dir,
                ),
            };
            let result = DeviceResult {
                request: a.request.clone(),
                request_dir: a.request_dir.clone(),
                pool: a.pool.clone(),
                device: a.device.clone(),
                share_id: a.share_id.clone(),
                cdi_id: l.cdi_id(&m.uid, &a.request_dir),
                port,
                mac: mac.to_string(),
            };
            plan.push((prepared, spec, result));
        }
        let mut cp = Checkpoint {
            namespace: m.namespace.clone(),
            name: m.name.clone(),
            uid: m.uid.clone(),
            state: "preparing".into(),
            devices: Vec::new(),
            ports: plan.iter().map(|(_, s, _)| s.clone()).collect(),
        };
        self.save(&cp)?;
        if plan.is_empty() {
            cp.state = "prepared".into();
            self.save(&cp)?;
            return Ok(Vec::new());
        }

        // Socket directories: <socket-root>/<uid>/<request>, fresh.
        let root =
            HostDir::open(&l.socket_root, true).map_err(|e| io_err(l.socket_root.display(), e))?;
        root.fresh_dir(&m.uid, None, None, WALK_MODE)
            .map_err(|e| io_err(l.claim_socket_dir(&m.uid).display(), e))?;
        let cdir = HostDir::open(&l.claim_socket_dir(&m.uid), false)
            .map_err(|e| io_err(l.claim_socket_dir(&m.uid).display(), e))?;
        // Metadata directories: <metadata-root>/<uid>/<request>.
        let mroot = HostDir::open(&l.metadata_root, true)
            .map_err(|e| io_err(l.metadata_root.display(), e))?;
        mroot
            .fresh_dir(&m.uid, None, None, WALK_MODE)
            .map_err(|e| io_err(l.claim_metadata_dir(&m.uid).display(), e))?;
        let mdir = HostDir::open(&l.claim_metadata_dir(&m.uid), false)
            .map_err(|e| io_err(l.claim_metadata_dir(&m.uid).display(), e))?;
        let pod_claim = from_template.then_some(pod_claim);
        for (p, spec, _) in &plan {
            cdir.fresh_dir(
                &p.request,
                self.cfg.dir_uid,
                self.cfg.dir_gid,
                self.cfg.dir_mode,
            )
            .map_err(|e| io_err(&p.host_dir, e))?;
            mdir.fresh_dir(&p.request, None, None, WALK_MODE)
                .map_err(|e| io_err(&p.host_metadata_dir, e))?;
            let md = documents::metadata(&l.driver, (&m.namespace, &m.name, &m.uid), pod_claim, p);
            HostDir::open(Path::new(&p.host_metadata_dir), false)
                .and_then(|d| d.write_file(&l.metadata_file(), md.to_string().as_bytes(), 0o444))
                .map_err(|e| io_err(&p.host_metadata_dir, e))?;
            self.create_port(spec)?;
        }
        let prepared: Vec<Prepared> = plan.iter().map(|(p, _, _)| p.clone()).collect();
        let spec = documents::cdi_spec(&l.cdi_kind(), &m.uid, &prepared);
        HostDir::open(&l.cdi_dir, true)
            .and_then(|d| d.write_file(&l.cdi_file(&m.uid), spec.to_string().as_bytes(), 0o644))
            .map_err(|e| io_err(l.cdi_dir.display(), e))?;
        cp.state = "prepared".into();
        cp.devices = plan.into_iter().map(|(_, _, r)| r).collect();
        self.save(&cp)?;
        tracing::info!(claim = %format!("{}/{}", m.namespace, m.name), uid = %m.uid,
            ports = ?cp.devices.iter().map(|d| &d.port).collect::<Vec<_>>(), "prepared");
        self.report_status(&m.namespace, &m.name, &cp.devices);
        Ok(cp.devices)
    }

    /// Writes the devices' KEP-4817 `networkData` into the claim's status
    /// (with an API proxy; best effort: the status informs, it does not
    /// make the device work).
    fn report_status(&self, namespace: &str, name: &str, devices: &[DeviceResult]) {
        let ClaimSource::ApiServer(addr) = &self.cfg.source else {
            return;
        };
        let devs = devices
            .iter()
            .map(|d| {
                serde_json::json!({
                    "driver": self.cfg.layout.driver, "pool": d.pool, "device": d.device,
                    "networkData": {"hardwareAddress": d.mac},
                })
            })
            .collect();
        if let Err(e) = crate::apiserver::apply_claim_status(addr, namespace, name, devs) {
            tracing::warn!(claim = %format!("{namespace}/{name}"), "cannot write the claim's status: {e}");
        }
    }

    /// Creates `spec` on the switch; a port of that name that is this
    /// claim's already is kept.
    fn create_port(&self, spec: &PortSpec) -> Result<(), String> {
        let body = serde_json::to_vec(spec).unwrap_or_default();
        match self.call("POST", "/ports", Some(&body)) {
            Ok(_) => Ok(()),
            Err(ClientError::Refused { status: 409, .. }) => {
                let path = format!("/ports/{}", client::encode_segment(&spec.name));
                let v: PortView = self
                    .call("GET", &path, None)
                    .ok()
                    .and_then(|b| serde_json::from_slice(&b).ok())
                    .ok_or_else(|| format!("port {} exists and cannot be read", spec.name))?;
                if v.spec.attachment == spec.attachment {
                    Ok(())
                } else {
                    Err(format!(
                        "the switch has a port {} of another owner",
                        spec.name
                    ))
                }
            }
            Err(e) => Err(format!("the switch refused port {}: {e}", spec.name)),
        }
    }

    /// Creates again the ports of a prepared claim that the switch lost.
    fn ensure_ports(&self, ports: &[PortSpec]) -> Result<(), String> {
        for p in ports {
            let path = format!("/ports/{}", client::encode_segment(&p.name));
            match self.call("GET", &path, None) {
                Ok(_) => {}
                Err(ClientError::Refused { status: 404, .. }) => self.create_port(p)?,
                Err(e) => return Err(format!("cannot reach the switch: {e}")),
            }
        }
        Ok(())
    }

    /// Unprepares claim `uid` (`namespace/name`): removes everything a
    /// prepare made, and this driver's entries of the claim's status.
    /// Idempotent.
    ///
    /// # Errors
    /// The switch could not be reached (the local files are gone; the
    /// ports and the checkpoint stay for the next call).
    pub fn unprepare(&self, namespace: &str, name: &str, uid: &str) -> Result<(), String> {
        let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        claim::check_uid(uid)?;
        self.unprepare_locked(uid)?;
        // The claim's status entries of this driver go too (the claim may
        // be gone already: nothing to say then).
        if let ClaimSource::ApiServer(addr) = &self.cfg.source {
            if claim::check_dns_label("namespace", namespace).is_ok()
                && claim::check_dns_subdomain("claim name", name).is_ok()
            {
                if let Err(e) =
                    crate::apiserver::apply_claim_status(addr, namespace, name, Vec::new())
                {
                    tracing::debug!(claim = %format!("{namespace}/{name}"), "claim status not cleared: {e}");
                }
            }
        }
        Ok(())
    }

    fn unprepare_locked(&self, uid: &str) -> Result<(), String> {
        let l = &self.cfg.layout;
        let mut errs = Vec::new();
        if let Ok(d) = HostDir::open(&l.cdi_dir, false) {
            if let Err(e) = d.remove_file(&l.cdi_file(uid)) {
                errs.push(io_err("the CDI spec", e));
            }
        }
        for root in [&l.metadata_root, &l.socket_root] {
            if let Ok(d) = HostDir::open(root, false) {
                if let Err(e) = d.remove(uid) {
                    errs.push(io_err(root.join(uid).display(), e));
                }
            }
        }
        match self.remove_ports(uid) {
            Ok(n) if n > 0 => tracing::info!(uid, ports = n, "removed the claim's ports"),
            Ok(_) => {}
            Err(e) => errs.push(e),
        }
        if errs.is_empty() {
            if let Ok(d) = self.state_dir(false) {
                let _ = d.remove_file(&Layout::checkpoint_file(uid));
            }
            Ok(())
        } else {
            Err(errs.join("; "))
        }
    }

    /// Removes the switch's ports labelled with claim `uid`.
    fn remove_ports(&self, uid: &str) -> Result<usize, String> {
        let b = self
            .call("GET", "/ports", None)
            .map_err(|e| format!("cannot list the switch's ports: {e}"))?;
        let ports: Vec<PortView> =
            serde_json::from_slice(&b).map_err(|e| format!("the switch's port list: {e}"))?;
        let mut n = 0;
        for p in ports {
            if p.spec
                .attachment
                .as_deref()
                .and_then(layout::attachment_uid)
                != Some(uid)
            {
                continue;
            }
            let path = format!("/ports/{}", client::encode_segment(&p.spec.name));
            match self.call("DELETE", &path, None) {
                Ok(_) | Err(ClientError::Refused { status: 404, .. }) => n += 1,
                Err(e) => return Err(format!("cannot remove port {}: {e}", p.spec.name)),
            }
        }
        Ok(n)
    }

    /// The UIDs of every claim with a checkpoint.
    pub fn checkpointed(&self) -> Vec<String> {
        let Ok(rd) = std::fs::read_dir(&self.cfg.layout.state_dir) else {
            return Vec::new();
        };
        rd.filter_map(Result::ok)
            .filter_map(|e| {
                e.file_name()
                    .to_str()?
                    .strip_suffix(".json")
                    .map(str::to_owned)
            })
            .filter(|u| claim::check_uid(u).is_ok())
            .collect()
    }
}

/// The frontend role's default, for the flag.
pub fn parse_vm_role(s: &str) -> Result<VmRole, String> {
    match s {
        "server" => Ok(VmRole::Server),
        "client" => Ok(VmRole::Client),
        _ => Err(format!("{s:?} is not \"server\" or \"client\"")),
    }
}
