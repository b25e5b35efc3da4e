// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The commands: ADD, DEL, CHECK, STATUS, GC, VERSION.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::os::unix::fs::DirBuilderExt;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use vhu_api::client::{self, ClientError};
use vhu_api::{PortKind, PortSpec, PortView};

use crate::admission;
use crate::attach::{self, HostDirs, Record};
use crate::beneath;
use crate::config::{self, Kind, NetConf, SPEC_VERSION, SUPPORTED_VERSIONS};
use crate::dan::{self, SandboxLock};
use crate::env::{CniEnv, Command};
use crate::error::{
    CniError, CHECK_FAILED, COLLISION, INCOMPATIBLE_VERSION, SWITCH_REFUSED, TRY_AGAIN, UNAVAILABLE,
};
use crate::ipam::{Ipam, DEPTH_VAR};
use crate::link::{self, LinkSetup};
use crate::node::NodeConfig;
use crate::result::{self, Attached};

/// Runs one invocation: `get` reads the environment, `stdin` is the
/// configuration. The JSON to print on success (`None`: print nothing).
///
/// # Errors
/// The CNI error to print (the caller exits non-zero).
pub fn run(get: &dyn Fn(&str) -> Option<String>, stdin: &[u8]) -> Result<Option<Value>, CniError> {
    let cmd = Command::parse(get("CNI_COMMAND").as_deref())?;
    if cmd == Command::Version {
        return Ok(Some(json!({
            "cniVersion": SPEC_VERSION,
            "supportedVersions": SUPPORTED_VERSIONS,
        })));
    }
    if get(DEPTH_VAR).is_some_and(|d| !d.is_empty()) {
        return Err(CniError::config(format!(
            "vhu-cni runs here as the IPAM plugin of a vhu-cni network ({DEPTH_VAR} is set): a \
             network cannot make vhu-cni its own IPAM plugin"
        )));
    }
    let node = NodeConfig::load(get)?;
    let conf = if cmd == Command::Del {
        NetConf::parse_for_del(stdin, &node)?
    } else {
        NetConf::parse_with(stdin, &node)?
    };
    if matches!(cmd, Command::Status | Command::Gc) && !conf.is_1_1() {
        return Err(CniError::new(
            INCOMPATIBLE_VERSION,
            format!(
                "{} needs cniVersion 1.1.0; this network's is {}",
                cmd.name(),
                conf.cni_version
            ),
        ));
    }
    let env = CniEnv::read(cmd, get)?;
    match cmd {
        Command::Add => add(&node, &conf, &env).map(Some),
        Command::Del => del(&conf, &env).map(|()| None),
        Command::Check => check(&conf, &env).map(|()| None),
        Command::Status => status(&conf, &env).map(|()| None),
        Command::Gc => gc(&conf, &env).map(|()| None),
        Command::Version => unreachable!("answered above"),
    }
}

// ===== The switch =====

fn switch_error(conf: &NetConf, e: ClientError, what: &str) -> CniError {
    match e {
        ClientError::Refused { status, message } => CniError::new(
            SWITCH_REFUSED,
            format!("the switch refused to {what}: {message} (HTTP {status})"),
        ),
        ClientError::Io(e) => CniError::new(
            TRY_AGAIN,
            format!(
                "the switch does not answer on {} ({e}); is vhu-switch running? (controlSocket)",
                conf.control_socket.display()
            ),
        ),
        ClientError::Protocol(m) => CniError::new(
            TRY_AGAIN,
            format!(
                "unexpected answer on {}: {m}; is controlSocket vhu-switch's?",
                conf.control_socket.display()
            ),
        ),
    }
}

fn call(
    conf: &NetConf,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
) -> Result<(u16, Vec<u8>), ClientError> {
    let s = vhost_net_backend::sys::unix::connect(&conf.control_socket)?;
    client::call(s, method, path, body)
}

/// The port, or `None` when the switch has none of that name.
fn get_port(conf: &NetConf, name: &str) -> Result<Option<PortView>, CniError> {
    let path = format!("/ports/{}", client::encode_segment(name));
    match call(conf, "GET", &path, None) {
        Ok((_, b)) => serde_json::from_slice(&b)
            .map(Some)
            .map_err(|e| switch_error(conf, ClientError::Protocol(e.to_string()), "show the port")),
        Err(ClientError::Refused { status: 404, .. }) => Ok(None),
        Err(e) => Err(switch_error(conf, e, "show the port")),
    }
}

fn list_ports(conf: &NetConf) -> Result<Vec<PortView>, CniError> {
    let (_, b) =
        call(conf, "GET", "/ports", None).map_err(|e| switch_error(conf, e, "list ports"))?;
    serde_json::from_slice(&b)
        .map_err(|e| switch_error(conf, ClientError::Protocol(e.to_string()), "list ports"))
}

/// Removes a port; gone already is fine.
fn delete_port(conf: &NetConf, name: &str) -> Result<(), CniError> {
    let path = format!("/ports/{}", client::encode_segment(name));
    match call(conf, "DELETE", &path, None) {
        Ok(_) | Err(ClientError::Refused { status: 404, .. }) => Ok(()),
        Err(e) => Err(switch_error(conf, e, "remove the port")),
    }
}

// ===== Host files =====

/// Resolves a user or group (name or numeric id) through `/etc/passwd` or
/// `/etc/group`.
fn resolve_id(db: &str, field: &str, v: &str) -> Result<u32, CniError> {
    if let Ok(n) = v.parse::<u32>() {
        return Ok(n);
    }
    let text = std::fs::read_to_string(db).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut f = l.split(':');
            let name = f.next()?;
            let id = f.nth(1)?.parse::<u32>().ok()?;
            (name == v).then_some(id)
        })
        .next()
        .ok_or_else(|| {
            CniError::config(format!(
                "{field} {v:?}: no such name in {db}; give a numeric id"
            ))
        })
}

/// The directory mode for a socket mode: `x` wherever `r` or `w` is.
fn dir_mode(socket_mode: u32) -> u32 {
    let mut m = socket_mode;
    for shift in [0, 3, 6] {
        if (socket_mode >> shift) & 0o6 != 0 {
            m |= 1 << shift;
        }
    }
    m
}

/// Creates the socket's directory `<pod dir>/<ifname>` with the configured
/// owner and mode: made with `mkdirat` in the opened pod directory (which
/// fails on anything already there, a link included), owner and mode set
/// on its fd.
fn make_dirs(conf: &NetConf, d: &HostDirs) -> Result<(), CniError> {
    let uid = conf
        .socket_owner
        .as_deref()
        .map(|o| resolve_id("/etc/passwd", "socketOwner", o))
        .transpose()?;
    let gid = conf
        .socket_group
        .as_deref()
        .map(|g| resolve_id("/etc/group", "socketGroup", g))
        .transpose()?;
    let mode = conf
        .socket_mode
        .as_deref()
        .and_then(vhu_api::port::parse_mode)
        .map_or(0o700, dir_mode);
    if !d.owns_pod_dir && conf.device_id.is_none() {
        // The kubelet's emptyDir (or the administrator's directory).
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(&d.pod_dir)
            .map_err(|e| CniError::io(format!("cannot create {}", d.pod_dir.display()), &e))?;
    }
    let pod = d
        .open_pod_dir(true)
        .map_err(|e| CniError::io(format!("cannot open {}", d.pod_dir.display()), &e))?;
    beneath::make_dir(&pod, d.if_name(), uid, gid, mode)
        .map(drop)
        .map_err(|e| CniError::io(format!("cannot create {}", d.if_dir.display()), &e))
}

/// Removes the socket's directory with what is in it, and the per-pod
/// directory when the plugin made it and it is empty; never through a
/// link. Missing ones are fine.
fn remove_dirs(d: &HostDirs) {
    if let Ok(pod) = d.open_pod_dir(false) {
        let _ = beneath::remove_tree(&pod, d.if_name());
    }
    if d.owns_pod_dir {
        if let (Some(parent), Some(name)) = (d.pod_dir.parent(), d.pod_dir.file_name()) {
            if let Ok(p) = beneath::open_trusted_dir(parent) {
                let _ = beneath::remove_empty_dir(&p, name);
            }
        }
    }
}

/// Opens the directory of device-info file `file` (inside the node's
/// device-info directory, checked by the configuration's parse), creating
/// the missing ones; never through a link below the device-info directory.
fn device_info_dir(
    conf: &NetConf,
    file: &str,
    create: bool,
) -> std::io::Result<(OwnedFd, std::ffi::OsString)> {
    let rel = config::device_info_name(file, &conf.device_info_dir)
        .ok_or_else(|| std::io::Error::other("outside the device-info directory"))?;
    let name = rel.file_name().unwrap_or_default().to_owned();
    if create {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(&conf.device_info_dir)?;
    }
    let mut dir = beneath::open_trusted_dir(&conf.device_info_dir)?;
    if let Some(parent) = rel.parent() {
        for c in parent.components() {
            let c = c.as_os_str();
            dir = if create {
                beneath::ensure_dir(&dir, c, 0o755)?
            } else {
                beneath::open_dir_at(&dir, c)?
            };
        }
    }
    Ok((dir, name))
}

/// Writes the device-info file: `socket` is the path the VM opens (the
/// in-pod path; a Kata VMM's host path).
fn write_device_info(path: &str, conf: &NetConf, socket: &str) -> Result<(), CniError> {
    let info = json!({
        "type": "vhost-user",
        "version": "1.1.0",
        "vhost-user": {"mode": conf.vm_role.device_info_mode(), "path": socket},
    });
    let fail =
        |e: std::io::Error| CniError::io(format!("cannot write the device-info file {path}"), &e);
    let (dir, name) = device_info_dir(conf, path, true).map_err(fail)?;
    // The runtime may have put the device plugin's file here: ours replaces it.
    beneath::write_file(
        &dir,
        &name,
        &serde_json::to_vec(&info).unwrap_or_default(),
        0o444,
    )
    .map_err(fail)
}

fn remove_device_info(conf: &NetConf, path: &str) {
    if let Ok((dir, name)) = device_info_dir(conf, path, false) {
        let _ = beneath::remove_file(&dir, &name);
    }
}

// ===== Ports this plugin owns =====

/// Which attachment a port must be to be removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Owner {
    port: String,
    network: String,
    /// Empty: not known (a DEL without `K8S_POD_NAMESPACE`), not compared.
    namespace: String,
    #[serde(rename = "containerID")]
    container_id: String,
    ifname: String,
}

impl Owner {
    fn of(conf: &NetConf, env: &CniEnv, port: &str) -> Self {
        Self {
            port: port.to_owned(),
            network: conf.name.clone(),
            namespace: env.namespace().unwrap_or_default().to_owned(),
            container_id: env.container_id.clone(),
            ifname: env.ifname.clone(),
        }
    }

    fn label(&self) -> String {
        attach::label(
            &self.namespace,
            &self.network,
            &self.container_id,
            &self.ifname,
        )
    }

    /// Whether `view` is this attachment's port: its label names the same
    /// network, container and interface (and namespace, when known). A
    /// port without a label is an older plugin's, found by its name.
    fn owns(&self, view: &PortView) -> bool {
        let Some(l) = &view.spec.attachment else {
            return view.spec.name == self.port;
        };
        let Some((ns, net, cid, ifname)) = attach::parse_label(l) else {
            return false;
        };
        let ns = if ns == "-" { "" } else { ns };
        net == self.network
            && cid == self.container_id
            && ifname == self.ifname
            && (self.namespace.is_empty() || ns == self.namespace)
    }
}

/// Removes the attachment's port if the switch has it and it is this
/// attachment's; another's of that name is left alone.
fn delete_own_port(conf: &NetConf, owner: &Owner) -> Result<(), ClientError> {
    let path = format!("/ports/{}", client::encode_segment(&owner.port));
    let view: PortView = match call(conf, "GET", &path, None) {
        Ok((_, b)) => {
            serde_json::from_slice(&b).map_err(|e| ClientError::Protocol(e.to_string()))?
        }
        Err(ClientError::Refused { status: 404, .. }) => return Ok(()),
        Err(e) => return Err(e),
    };
    if !owner.owns(&view) {
        return Ok(());
    }
    match call(conf, "DELETE", &path, None) {
        Ok(_) | Err(ClientError::Refused { status: 404, .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Where DELs that could not reach the switch leave their port for later.
const PENDING: &str = "pending";

/// Notes a port to remove once the switch answers again.
fn defer_delete(conf: &NetConf, owner: &Owner) -> Result<(), CniError> {
    let d = attach::state_subdir(&conf.state_dir, PENDING, true)
        .map_err(|e| CniError::io(conf.state_dir.join(PENDING).display(), &e))?;
    let body = serde_json::to_vec(owner).unwrap_or_default();
    beneath::write_file(&d, OsStr::new(&owner.port), &body, 0o600)
        .map_err(|e| CniError::io(conf.state_dir.join(PENDING).display(), &e))
}

/// Removes the ports DELs left for later (the switch was down then), now
/// that the switch answers. Keeps an entry whose removal fails.
fn reconcile(conf: &NetConf) {
    let Ok(d) = attach::state_subdir(&conf.state_dir, PENDING, false) else {
        return;
    };
    let Ok(mut entries) = rustix::fs::Dir::read_from(&d) else {
        return;
    };
    let mut names = Vec::new();
    while let Some(Ok(e)) = entries.read() {
        let n = e.file_name().to_string_lossy().into_owned();
        if n.starts_with(attach::PORT_PREFIX) && names.len() < 10_000 {
            names.push(n);
        }
    }
    for n in names {
        let owner: Option<Owner> = beneath::read_file(&d, OsStr::new(&n), 64 * 1024)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        let done = match owner {
            Some(o) if o.port == n => delete_own_port(conf, &o).is_ok(),
            _ => true,
        };
        if done {
            let _ = beneath::remove_file(&d, OsStr::new(&n));
        }
    }
}

// ===== ADD =====

/// Undoes what a failed ADD made, newest first.
#[derive(Default)]
struct Undo<'a> {
    steps: Vec<Box<dyn FnOnce() + 'a>>,
}

impl<'a> Undo<'a> {
    fn push(&mut self, f: impl FnOnce() + 'a) {
        self.steps.push(Box::new(f));
    }
    fn run(self) {
        for f in self.steps.into_iter().rev() {
            f();
        }
    }
}

fn add(node: &NodeConfig, conf: &NetConf, env: &CniEnv) -> Result<Value, CniError> {
    let port = attach::port_name(&conf.name, &env.container_id, &env.ifname);
    let owner = Owner::of(conf, env, &port);
    let admitted = admission::admit(conf, node, env.namespace())?;
    let mac = match (&conf.runtime.mac, env.args.get("MAC"), conf.mac) {
        (Some(m), _, _) => config::parse_mac("runtimeConfig.mac", m)?,
        (None, Some(m), _) => config::parse_mac("CNI_ARGS MAC", m)?,
        (None, None, Some(m)) => m,
        (None, None, None) => attach::derived_mac(&port),
    };
    let dirs = match conf.kind {
        Kind::VhostUser if !conf.kata_dan => Some(attach::host_dirs(conf, env)?),
        _ => None,
    };
    let kata = if conf.kata_dan {
        Some(KataDevice::of(conf, env, &port)?)
    } else {
        None
    };

    // Everything that can be checked without changing anything.
    if let Some(d) = &dirs {
        let there = d
            .open_pod_dir(false)
            .ok()
            .and_then(|p| beneath::exists(&p, d.if_name()).ok())
            .unwrap_or(false);
        if there {
            return Err(CniError::new(
                COLLISION,
                format!(
                    "the socket directory {} exists already: another attachment uses interface {} \
                     of this pod, or a DEL was missed (DEL it first)",
                    d.if_dir.display(),
                    env.ifname
                ),
            ));
        }
    }
    if conf.kind == Kind::Tap {
        if !link::netns_exists(&env.netns) {
            return Err(CniError::env(format!(
                "CNI_NETNS {:?} is not a network namespace that can be entered",
                env.netns
            )));
        }
        if link::mac_of(&env.netns, &env.ifname)?.is_some() {
            return Err(CniError::new(
                COLLISION,
                format!("the pod already has an interface {}", env.ifname),
            ));
        }
    }
    if let Some(k) = &kata {
        k.check_free()?;
    }
    let ipam = Ipam::find(conf, env)?;
    reconcile(conf);
    if get_port(conf, &port)?.is_some() {
        return Err(CniError::new(
            COLLISION,
            format!(
                "the switch already has port {port} for container {} interface {}; DEL it first",
                env.container_id, env.ifname
            ),
        ));
    }
    let mut spec = PortSpec::new(port.clone(), PortKind::VhostUser);
    spec.vlan = Some(admitted.vlan.clone());
    spec.flood_rate = admitted.flood_rate;
    spec.flood_burst = admitted.flood_burst;
    spec.mac_limit = admitted.mac_limit;
    spec.attachment = Some(owner.label());
    spec.mtu = conf.mtu;
    spec.queues = conf.queues;
    match (conf.kind, &dirs, &kata) {
        (Kind::VhostUser, None, Some(k)) => {
            // The VMM listens; the switch connects, and reconnects after
            // either side restarts.
            spec.role = Some(vhu_api::Role::Client);
            spec.socket = Some(k.socket.display().to_string());
            spec.mac = Some(vec![mac]);
        }
        (Kind::HostTap, _, Some(k)) => {
            // The VMM holds the TAP's queues; the switch is on its network
            // side.
            spec.kind = PortKind::AfPacket;
            spec.interface = Some(k.tap.clone());
            spec.mac = Some(vec![mac]);
        }
        (Kind::VhostUser, Some(d), _) => {
            spec.role = Some(conf.vm_role.switch_role());
            spec.socket = Some(d.socket.display().to_string());
            if conf.vm_role.switch_role() == vhu_api::Role::Server {
                spec.owner = conf.socket_owner.clone();
                spec.group = conf.socket_group.clone();
                spec.mode = conf.socket_mode.clone();
            }
            if admitted.mac_lock {
                spec.mac = Some(vec![mac]);
            }
        }
        _ => {
            spec.kind = PortKind::Tap;
            // Created by the switch in the pod, under the pod's name.
            spec.interface = Some(env.ifname.clone());
            spec.netns = Some(env.netns.clone());
            spec.mac = Some(vec![mac]);
        }
    }
    if let Err(errs) = spec.validate() {
        let msg: Vec<String> = errs.iter().map(ToString::to_string).collect();
        return Err(CniError::config(format!(
            "the port would be invalid: {}",
            msg.join("; ")
        )));
    }

    // Held until the ADD is done: one ADD or DEL of a sandbox at a time.
    let lock = match &kata {
        Some(_) => Some(SandboxLock::take(&conf.state_dir, &env.container_id)?),
        None => None,
    };
    let mut undo = Undo::default();
    let result = (|| {
        let ipam_result = match &ipam {
            Some(i) => {
                let r = i.call(conf, "ADD", &[])?;
                undo.push(move || {
                    let _ = i.call(conf, "DEL", &[]);
                });
                Some(r)
            }
            None => None,
        };
        if let Some(d) = &dirs {
            undo.push(move || remove_dirs(d));
            make_dirs(conf, d)?;
        }
        if let Some(k) = &kata {
            undo.push(move || k.remove_host_side(conf));
            k.make_host_side(conf)?;
        }
        let body = serde_json::to_vec(&spec).unwrap_or_default();
        call(conf, "POST", "/ports", Some(&body))
            .map_err(|e| switch_error(conf, e, "create the port"))?;
        undo.push(|| {
            let _ = delete_own_port(conf, &owner);
        });
        if conf.kind == Kind::Tap {
            let addrs = ipam_result
                .as_ref()
                .map(result::ipam_addrs)
                .unwrap_or_default();
            let routes = ipam_result
                .as_ref()
                .map(result::ipam_routes)
                .unwrap_or_default();
            link::setup(&LinkSetup {
                netns: &env.netns,
                ifname: &env.ifname,
                mac: &mac.to_string(),
                mtu: conf.mtu,
                addrs,
                routes,
            })?;
        }
        // The socket the VM opens: a Kata VMM's is on the host.
        let vm_socket = match &kata {
            Some(k) => k.socket.display().to_string(),
            None => attach::pod_socket_path(&env.ifname),
        };
        if let (Some(f), Kind::VhostUser) = (&conf.runtime.device_info_file, conf.kind) {
            undo.push(move || remove_device_info(conf, f));
            write_device_info(f, conf, &vm_socket)?;
        }
        if let (Some(k), Some(lock)) = (&kata, &lock) {
            let entry = dan::entry(
                &env.ifname,
                &mac.to_string(),
                k.device.clone(),
                conf.mtu,
                &ipam_result
                    .as_ref()
                    .map(result::ipam_addrs)
                    .unwrap_or_default(),
                &ipam_result
                    .as_ref()
                    .map(result::ipam_routes)
                    .unwrap_or_default(),
            );
            dan::add_device(&conf.kata, &env.container_id, &entry, lock)?;
            undo.push(move || {
                let _ = dan::remove_device(&conf.kata, &env.container_id, &entry, lock);
            });
        }
        attach::write_record(conf, &Record::new(conf, env, &port))?;
        Ok(result::build(
            &conf.cni_version,
            &Attached {
                ifname: env.ifname.clone(),
                mac: mac.to_string(),
                sandbox: env.netns.clone(),
                mtu: conf.mtu,
                socket_path: match (&dirs, &kata) {
                    (Some(d), _) => Some(d.socket.display().to_string()),
                    (None, Some(k)) if conf.kind == Kind::VhostUser => {
                        Some(k.socket.display().to_string())
                    }
                    _ => None,
                },
            },
            ipam_result.as_ref(),
        ))
    })();
    match result {
        Ok(v) => Ok(v),
        Err(e) => {
            undo.run();
            Err(e)
        }
    }
}

// ===== Kata DAN =====

/// The host side of a Kata DAN attachment: the socket the VMM creates, or
/// the host TAP the VMM opens; and its DAN device.
#[derive(Debug, Clone)]
struct KataDevice {
    /// vhost-user: `<socket_dir>/<sandbox id>/<ifname>.sock`.
    socket: std::path::PathBuf,
    /// host-tap: the TAP's name.
    tap: String,
    /// The DAN file's `device`.
    device: dan::Device,
    sandbox: String,
    ifname: String,
}

impl KataDevice {
    fn of(conf: &NetConf, env: &CniEnv, port: &str) -> Result<Self, CniError> {
        dan::check_sandbox_id(&env.container_id)?;
        let socket = dan::socket_path(&conf.kata, &env.container_id, &env.ifname);
        let tap = attach::host_tap_name(port);
        let host_tap = conf.kind == Kind::HostTap;
        let device = dan::device(
            host_tap.then_some(tap.as_str()),
            &socket,
            conf.queues.unwrap_or(1),
            conf.kata.queue_size,
        );
        Ok(Self {
            socket,
            tap,
            device,
            sandbox: env.container_id.clone(),
            ifname: env.ifname.clone(),
        })
    }

    /// Its DAN entry as far as DEL needs it (name and device).
    fn stub(&self) -> dan::DanDevice {
        dan::entry(&self.ifname, "", self.device.clone(), None, &[], &[])
    }

    /// What can be checked before anything changes: the TAP's name is
    /// free; the socket's path fits `sun_path` (the VMM binds it).
    fn check_free(&self) -> Result<(), CniError> {
        match &self.device {
            dan::Device::HostTap { .. } => {
                if link::host_link(&self.tap) != link::HostLink::None {
                    return Err(CniError::new(
                        COLLISION,
                        format!(
                            "the host has a link {} already (a DEL was missed, or it is not \
                             this plugin's)",
                            self.tap
                        ),
                    ));
                }
            }
            dan::Device::VhostUser { .. } => {
                let len = self.socket.as_os_str().len();
                if len > 107 {
                    return Err(CniError::config(format!(
                        "the socket {} is {len} bytes, more than a VMM can bind (107): shorten \
                         [kata] socket_dir",
                        self.socket.display()
                    )));
                }
            }
        }
        Ok(())
    }

    /// Creates the host TAP, or prepares the socket's directory.
    fn make_host_side(&self, conf: &NetConf) -> Result<(), CniError> {
        match &self.device {
            dan::Device::HostTap { queue_num, .. } => {
                link::create_host_tap(&self.tap, u32::try_from(*queue_num).unwrap_or(1), conf.mtu)
            }
            dan::Device::VhostUser { .. } => {
                let uid = conf
                    .kata
                    .socket_owner
                    .as_deref()
                    .map(|o| resolve_id("/etc/passwd", "kata.socket_owner", o))
                    .transpose()?;
                let gid = conf
                    .kata
                    .socket_group
                    .as_deref()
                    .map(|g| resolve_id("/etc/group", "kata.socket_group", g))
                    .transpose()?;
                dan::prepare_socket_dir(&conf.kata, &self.sandbox, &self.ifname, uid, gid)
            }
        }
    }

    /// Removes the host TAP, or what the VMM left of its socket (and the
    /// sandbox's socket directory once empty). Gone already is fine.
    fn remove_host_side(&self, conf: &NetConf) {
        match &self.device {
            dan::Device::HostTap { .. } => {
                let _ = link::remove_host_tap(&self.tap);
            }
            dan::Device::VhostUser { .. } => {
                dan::remove_socket(&conf.kata, &self.sandbox, &self.ifname);
            }
        }
    }
}

// ===== DEL =====

/// Removes one attachment: its socket directory, device-info file, port,
/// IPAM allocation and record, each derived from the node configuration
/// and the attachment's names (never from a path read back from disk).
/// What is gone already is skipped. With the switch unreachable the local
/// part is done and the port is left for [`reconcile`]: a DEL never keeps
/// a pod from going away.
fn remove(
    conf: &NetConf,
    rec: &Record,
    owner: &Owner,
    ipam: Option<&Ipam>,
) -> Result<(), CniError> {
    let env = CniEnv {
        container_id: rec.container_id.clone(),
        ifname: rec.ifname.clone(),
        netns: rec.netns.clone(),
        args: crate::env::parse_args(&rec.args).unwrap_or_default(),
        args_raw: rec.args.clone(),
        path: Vec::new(),
    };
    // Kata DAN: the entry goes first (a sandbox created from now on does
    // not get the device), under the sandbox's lock until the host side is
    // gone too.
    let kata = if conf.kata_dan {
        KataDevice::of(conf, &env, &owner.port).ok()
    } else {
        None
    };
    let mut lock = None;
    let mut dan_gone = false;
    if let Some(k) = &kata {
        let l = SandboxLock::take(&conf.state_dir, &k.sandbox)?;
        dan_gone = dan::remove_device(&conf.kata, &k.sandbox, &k.stub(), &l)?;
        lock = Some(l);
    }
    if conf.kind == Kind::VhostUser && kata.is_none() {
        let mut c = conf.clone();
        c.device_id = conf.device_id.clone().or_else(|| rec.device_id.clone());
        if let Ok(d) = attach::host_dirs(&c, &env) {
            remove_dirs(&d);
        }
    }
    if let Some(f) = &rec.device_info_file {
        if config::device_info_name(f, &conf.device_info_dir).is_some() {
            remove_device_info(conf, f);
        }
    }
    match delete_own_port(conf, owner) {
        Ok(()) => {}
        Err(ClientError::Io(_)) => defer_delete(conf, owner)?,
        Err(e) => return Err(switch_error(conf, e, "remove the port")),
    }
    if let Some(k) = &kata {
        k.remove_host_side(conf);
    }
    if let (Some(l), true) = (lock, dan_gone) {
        l.release_and_remove();
    }
    if let Some(i) = ipam {
        i.call(
            conf,
            "DEL",
            &[
                ("CNI_CONTAINERID", &rec.container_id),
                ("CNI_IFNAME", &rec.ifname),
                ("CNI_NETNS", &rec.netns),
                ("CNI_ARGS", &rec.args),
            ],
        )?;
    }
    attach::remove_record(conf, &rec.port);
    Ok(())
}

fn del(conf: &NetConf, env: &CniEnv) -> Result<(), CniError> {
    let port = attach::port_name(&conf.name, &env.container_id, &env.ifname);
    let stored = attach::read_record(conf, &port)
        .filter(|r| r.container_id == env.container_id && r.ifname == env.ifname);
    let mut rec = stored
        .clone()
        .unwrap_or_else(|| Record::new(conf, env, &port));
    // This DEL's own view wins where it has one.
    rec.netns = env.netns.clone();
    if env.pod_uid().is_some() || stored.is_none() {
        rec.args = env.args_raw.clone();
    }
    if conf.runtime.device_info_file.is_some() {
        rec.device_info_file = conf.runtime.device_info_file.clone();
    }
    let mut owner = Owner::of(conf, env, &port);
    if owner.namespace.is_empty() {
        owner.namespace = stored.map(|r| r.namespace).unwrap_or_default();
    }
    let ipam = Ipam::find(conf, env)?;
    if call(conf, "GET", "/live", None).is_ok() {
        reconcile(conf);
    }
    remove(conf, &rec, &owner, ipam.as_ref())
}

// ===== CHECK =====

fn check(conf: &NetConf, env: &CniEnv) -> Result<(), CniError> {
    let Some(prev) = &conf.prev_result else {
        return Err(CniError::config(
            "CHECK needs prevResult, the result of the ADD",
        ));
    };
    let port = attach::port_name(&conf.name, &env.container_id, &env.ifname);
    let failed = |m: String| CniError::new(CHECK_FAILED, m);
    let Some(view) = get_port(conf, &port)? else {
        return Err(failed(format!(
            "the switch has no port {port} for container {} interface {}: it was removed; DEL \
             and ADD the attachment again",
            env.container_id, env.ifname
        )));
    };
    let want_kind = match conf.kind {
        Kind::VhostUser => PortKind::VhostUser,
        Kind::Tap => PortKind::Tap,
        Kind::HostTap => PortKind::AfPacket,
    };
    if !Owner::of(conf, env, &port).owns(&view) {
        return Err(failed(format!(
            "port {port} belongs to another attachment ({:?})",
            view.spec.attachment
        )));
    }
    if view.spec.kind != want_kind {
        return Err(failed(format!(
            "port {port} is a {} port, the network's kind is {want_kind}",
            view.spec.kind
        )));
    }
    let prev_mac = prev
        .get("interfaces")
        .and_then(|i| i.get(0))
        .and_then(|i| i.get("mac"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if conf.kata_dan {
        let k = KataDevice::of(conf, env, &port)?;
        let want = match conf.kind {
            Kind::HostTap => k.tap.clone(),
            _ => k.socket.display().to_string(),
        };
        let have = view
            .spec
            .interface
            .clone()
            .or_else(|| view.spec.socket.clone());
        if have.as_deref() != Some(want.as_str()) {
            return Err(failed(format!(
                "port {port} is on {have:?}, expected {want:?}"
            )));
        }
        if conf.kind == Kind::HostTap && link::host_link(&k.tap) != link::HostLink::Tun {
            return Err(failed(format!("the host TAP {} is gone", k.tap)));
        }
        if !dan::has_device(&conf.kata, &k.sandbox, &k.stub()) {
            return Err(failed(format!(
                "the DAN file {} has no device {} on {want}",
                dan::file_path(&conf.kata, &k.sandbox).display(),
                env.ifname
            )));
        }
    } else {
        check_pod_side(conf, env, &port, &view, &prev_mac)?;
    }
    if let Some(i) = Ipam::find(conf, env)? {
        i.call(conf, "CHECK", &[])?;
    }
    Ok(())
}

/// CHECK of a pod's attachment: the socket and its directory, or the
/// pod's TAP and its MAC.
fn check_pod_side(
    conf: &NetConf,
    env: &CniEnv,
    port: &str,
    view: &PortView,
    prev_mac: &str,
) -> Result<(), CniError> {
    let failed = |m: String| CniError::new(CHECK_FAILED, m);
    match conf.kind {
        Kind::HostTap => {}
        Kind::VhostUser => {
            let d = attach::host_dirs(conf, env)?;
            let sock = d.socket.display().to_string();
            if view.spec.socket.as_deref() != Some(sock.as_str()) {
                return Err(failed(format!(
                    "port {port}'s socket is {:?}, expected {sock:?}",
                    view.spec.socket
                )));
            }
            if !d.if_dir.is_dir() {
                return Err(failed(format!(
                    "the socket directory {} is gone",
                    d.if_dir.display()
                )));
            }
        }
        Kind::Tap => match link::mac_of(&env.netns, &env.ifname)? {
            None => {
                return Err(failed(format!(
                    "the pod has no interface {} any more",
                    env.ifname
                )))
            }
            Some(m) if !m.eq_ignore_ascii_case(prev_mac) => {
                return Err(failed(format!(
                    "interface {} has MAC {m}, the ADD gave it {prev_mac}",
                    env.ifname
                )))
            }
            Some(_) => {}
        },
    }
    Ok(())
}

// ===== STATUS, GC =====

fn status(conf: &NetConf, env: &CniEnv) -> Result<(), CniError> {
    match call(conf, "GET", "/ready", None) {
        Ok(_) => reconcile(conf),
        Err(e) => {
            let why = match e {
                ClientError::Refused { message, .. } => format!("is not ready ({message})"),
                e => format!("does not answer ({e})"),
            };
            return Err(CniError::new(
                UNAVAILABLE,
                format!(
                    "the switch on {} {why}; ADD would fail",
                    conf.control_socket.display()
                ),
            ));
        }
    }
    if let Some(i) = Ipam::find(conf, env)? {
        if i.speaks_1_1() {
            i.call(conf, "STATUS", &[])?;
        }
    }
    Ok(())
}

fn gc(conf: &NetConf, env: &CniEnv) -> Result<(), CniError> {
    let Some(valid) = &conf.valid_attachments else {
        return Err(CniError::config(
            "GC needs cni.dev/valid-attachments, the attachments to keep",
        ));
    };
    let keep: BTreeSet<(&str, &str)> = valid
        .iter()
        .map(|a| (a.container_id.as_str(), a.ifname.as_str()))
        .collect();
    let keep_names: BTreeSet<String> = valid
        .iter()
        .map(|a| attach::port_name(&conf.name, &a.container_id, &a.ifname))
        .collect();
    let prefix = attach::network_prefix(&conf.name);
    let ipam = Ipam::find(conf, env)?;
    reconcile(conf);
    let mut first_err = None;
    let mut note = |r: Result<(), CniError>| {
        if let Err(e) = r {
            first_err.get_or_insert(e);
        }
    };
    // Recorded attachments: everything is known, remove all of it.
    let mut done = BTreeSet::new();
    let mut records = Vec::new();
    if let Ok(dir) = attach::state_subdir(&conf.state_dir, &conf.name, false) {
        if let Ok(mut rd) = rustix::fs::Dir::read_from(&dir) {
            while let Some(Ok(e)) = rd.read() {
                let n = e.file_name().to_string_lossy().into_owned();
                if n.ends_with(".json") && records.len() < 100_000 {
                    if let Some(r) = attach::read_record_at(&dir, &n) {
                        records.push(r);
                    }
                }
            }
        }
    }
    for rec in records {
        if rec.network == conf.name
            && !keep.contains(&(rec.container_id.as_str(), rec.ifname.as_str()))
        {
            done.insert(rec.port.clone());
            let owner = Owner {
                port: rec.port.clone(),
                network: rec.network.clone(),
                namespace: rec.namespace.clone(),
                container_id: rec.container_id.clone(),
                ifname: rec.ifname.clone(),
            };
            // With an IPAM plugin of 1.1.0 its own GC frees the addresses.
            let per = ipam.as_ref().filter(|i| !i.speaks_1_1());
            note(remove(conf, &rec, &owner, per));
        }
    }
    // This network's ports with no record: by their label (an older
    // plugin's, without one, by the name's prefix).
    for p in list_ports(conf)? {
        let n = &p.spec.name;
        if done.contains(n) {
            continue;
        }
        let stale = match p.spec.attachment.as_deref().map(attach::parse_label) {
            Some(Some((_, net, cid, ifname))) => net == conf.name && !keep.contains(&(cid, ifname)),
            Some(None) => false,
            None => n.starts_with(&prefix) && !keep_names.contains(n),
        };
        if stale {
            note(delete_port(conf, n));
        }
    }
    if let Some(i) = ipam.as_ref().filter(|i| i.speaks_1_1()) {
        note(i.call(conf, "GC", &[]).map(|_| ()));
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_is_removed_only_by_its_own_attachment() {
        let owner = Owner {
            port: "cni-1-2".into(),
            network: "net1".into(),
            namespace: "a".into(),
            container_id: "c1".into(),
            ifname: "eth1".into(),
        };
        let view = |name: &str, label: Option<&str>| {
            let mut spec = PortSpec::new(name, PortKind::VhostUser);
            spec.attachment = label.map(str::to_owned);
            PortView {
                spec,
                state: vhu_api::PortState::default(),
            }
        };
        assert!(owner.owns(&view("x", Some("cni/a/net1/c1/eth1"))));
        // Another namespace, network, container or interface: not ours.
        for l in [
            "cni/b/net1/c1/eth1",
            "cni/a/net2/c1/eth1",
            "cni/a/net1/c2/eth1",
            "cni/a/net1/c1/eth2",
            "admin",
            "cni/a/net1/c1",
        ] {
            assert!(!owner.owns(&view("cni-1-2", Some(l))), "{l}");
        }
        // A DEL that does not know its namespace compares the rest.
        let mut any = owner.clone();
        any.namespace.clear();
        assert!(any.owns(&view("x", Some("cni/b/net1/c1/eth1"))));
        // An older plugin's port, without a label: by its name.
        assert!(owner.owns(&view("cni-1-2", None)));
        assert!(!owner.owns(&view("cni-1-3", None)));
    }

    #[test]
    fn directory_modes() {
        assert_eq!(dir_mode(0o600), 0o700);
        assert_eq!(dir_mode(0o660), 0o770);
        assert_eq!(dir_mode(0o640), 0o750);
        assert_eq!(dir_mode(0o666), 0o777);
    }
}
