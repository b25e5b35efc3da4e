// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The commands: ADD, DEL, CHECK, STATUS, GC, VERSION.

use std::collections::BTreeSet;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;

use serde_json::{json, Value};
use vhu_api::client::{self, ClientError};
use vhu_api::{PortKind, PortSpec, PortView};

use crate::attach::{self, HostDirs, Record};
use crate::config::{self, Kind, NetConf, SPEC_VERSION, SUPPORTED_VERSIONS};
use crate::env::{CniEnv, Command};
use crate::error::{
    CniError, CHECK_FAILED, COLLISION, INCOMPATIBLE_VERSION, SWITCH_REFUSED, TRY_AGAIN, UNAVAILABLE,
};
use crate::ipam::Ipam;
use crate::link::{self, LinkSetup};
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
    let conf = NetConf::parse(stdin)?;
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
        Command::Add => add(&conf, &env).map(Some),
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

/// Creates the socket's directory with the configured owner and mode.
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
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(&d.pod_dir)
        .map_err(|e| CniError::io(format!("cannot create {}", d.pod_dir.display()), &e))?;
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&d.if_dir)
        .map_err(|e| CniError::io(format!("cannot create {}", d.if_dir.display()), &e))?;
    std::os::unix::fs::chown(&d.if_dir, uid, gid)
        .map_err(|e| CniError::io(format!("cannot chown {}", d.if_dir.display()), &e))?;
    std::fs::set_permissions(&d.if_dir, std::fs::Permissions::from_mode(mode))
        .map_err(|e| CniError::io(format!("cannot chmod {}", d.if_dir.display()), &e))
}

/// Removes the socket, its directory, and the per-pod directory when the
/// plugin made it and it is empty. Missing ones are fine.
fn remove_dirs(d: &HostDirs) {
    let _ = std::fs::remove_file(&d.socket);
    let _ = std::fs::remove_dir(&d.if_dir);
    if d.owns_pod_dir {
        let _ = std::fs::remove_dir(&d.pod_dir);
    }
}

fn write_device_info(path: &str, conf: &NetConf, pod_socket: &str) -> Result<(), CniError> {
    let info = json!({
        "type": "vhost-user",
        "version": "1.1.0",
        "vhost-user": {"mode": conf.vm_role.device_info_mode(), "path": pod_socket},
    });
    let p = Path::new(path);
    if let Some(d) = p.parent() {
        std::fs::create_dir_all(d).map_err(|e| CniError::io(d.display(), &e))?;
    }
    // The runtime may have put the device plugin's file here: ours replaces it.
    let _ = std::fs::remove_file(p);
    std::fs::write(p, serde_json::to_vec(&info).unwrap_or_default())
        .map_err(|e| CniError::io(format!("cannot write the device-info file {path}"), &e))?;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o444))
        .map_err(|e| CniError::io(format!("cannot chmod {path}"), &e))
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

fn add(conf: &NetConf, env: &CniEnv) -> Result<Value, CniError> {
    let port = attach::port_name(&conf.name, &env.container_id, &env.ifname);
    let record = attach::record_path(conf, &port);
    let mac = match (&conf.runtime.mac, env.args.get("MAC"), conf.mac) {
        (Some(m), _, _) => config::parse_mac("runtimeConfig.mac", m)?,
        (None, Some(m), _) => config::parse_mac("CNI_ARGS MAC", m)?,
        (None, None, Some(m)) => m,
        (None, None, None) => attach::derived_mac(&port),
    };
    let pinned = conf.mac.is_some() || conf.runtime.mac.is_some() || env.args.contains_key("MAC");
    let dirs = match conf.kind {
        Kind::VhostUser => Some(attach::host_dirs(conf, env)?),
        Kind::Tap => None,
    };

    // Everything that can be checked without changing anything.
    if let Some(d) = &dirs {
        if d.if_dir.exists() {
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
    let ipam = Ipam::find(conf, env)?;
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
    spec.vlan = conf.vlan.clone();
    spec.mtu = conf.mtu;
    spec.queues = conf.queues;
    match (conf.kind, &dirs) {
        (Kind::VhostUser, Some(d)) => {
            spec.role = Some(conf.vm_role.switch_role());
            spec.socket = Some(d.socket.display().to_string());
            if conf.vm_role.switch_role() == vhu_api::Role::Server {
                spec.owner = conf.socket_owner.clone();
                spec.group = conf.socket_group.clone();
                spec.mode = conf.socket_mode.clone();
            }
            if pinned {
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
        let body = serde_json::to_vec(&spec).unwrap_or_default();
        call(conf, "POST", "/ports", Some(&body))
            .map_err(|e| switch_error(conf, e, "create the port"))?;
        undo.push(|| {
            let _ = delete_port(conf, &port);
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
        let pod_socket = attach::pod_socket_path(&env.ifname);
        if let (Some(f), Kind::VhostUser) = (&conf.runtime.device_info_file, conf.kind) {
            undo.push(move || {
                let _ = std::fs::remove_file(f);
            });
            write_device_info(f, conf, &pod_socket)?;
        }
        attach::write_record(&record, &Record::new(conf, env, &port, dirs.clone()))?;
        Ok(result::build(
            &conf.cni_version,
            &Attached {
                ifname: env.ifname.clone(),
                mac: mac.to_string(),
                sandbox: env.netns.clone(),
                mtu: conf.mtu,
                socket_path: dirs.as_ref().map(|d| d.socket.display().to_string()),
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

// ===== DEL =====

/// Removes one attachment: its port, socket, device-info file, IPAM
/// allocation and record. What is gone already is skipped.
fn remove(conf: &NetConf, rec: &Record, ipam: Option<&Ipam>) -> Result<(), CniError> {
    delete_port(conf, &rec.port)?;
    if let Some(d) = &rec.host {
        remove_dirs(d);
    }
    if let Some(f) = &rec.device_info_file {
        let _ = std::fs::remove_file(f);
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
    let _ = std::fs::remove_file(attach::record_path(conf, &rec.port));
    Ok(())
}

fn del(conf: &NetConf, env: &CniEnv) -> Result<(), CniError> {
    let port = attach::port_name(&conf.name, &env.container_id, &env.ifname);
    let stored = attach::read_record(&attach::record_path(conf, &port));
    let rec = stored.unwrap_or_else(|| {
        let host = match conf.kind {
            Kind::VhostUser => attach::host_dirs(conf, env).ok(),
            Kind::Tap => None,
        };
        Record::new(conf, env, &port, host)
    });
    let mut rec = rec;
    // This DEL's own view wins where it has one.
    rec.netns = env.netns.clone();
    if conf.runtime.device_info_file.is_some() {
        rec.device_info_file = conf.runtime.device_info_file.clone();
    }
    let ipam = Ipam::find(conf, env)?;
    remove(conf, &rec, ipam.as_ref())
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
    };
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
    match conf.kind {
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
            Some(m) if !m.eq_ignore_ascii_case(&prev_mac) => {
                return Err(failed(format!(
                    "interface {} has MAC {m}, the ADD gave it {prev_mac}",
                    env.ifname
                )))
            }
            Some(_) => {}
        },
    }
    if let Some(i) = Ipam::find(conf, env)? {
        i.call(conf, "CHECK", &[])?;
    }
    Ok(())
}

// ===== STATUS, GC =====

fn status(conf: &NetConf, env: &CniEnv) -> Result<(), CniError> {
    match call(conf, "GET", "/ready", None) {
        Ok(_) => {}
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
    let keep: BTreeSet<String> = valid
        .iter()
        .map(|a| attach::port_name(&conf.name, &a.container_id, &a.ifname))
        .collect();
    let prefix = attach::network_prefix(&conf.name);
    let ipam = Ipam::find(conf, env)?;
    let mut first_err = None;
    let mut note = |r: Result<(), CniError>| {
        if let Err(e) = r {
            first_err.get_or_insert(e);
        }
    };
    // Recorded attachments: everything is known, remove all of it.
    let dir = conf.state_dir.join(&conf.name);
    let mut done = BTreeSet::new();
    if let Ok(rd) = std::fs::read_dir(&dir) {
        for e in rd.flatten() {
            let Some(rec) = attach::read_record(&e.path()) else {
                continue;
            };
            if !keep.contains(&rec.port) {
                done.insert(rec.port.clone());
                // With an IPAM plugin of 1.1.0 its own GC frees the addresses.
                let per = ipam.as_ref().filter(|i| !i.speaks_1_1());
                note(remove(conf, &rec, per));
            }
        }
    }
    // Ports of this network with no record.
    for p in list_ports(conf)? {
        let n = &p.spec.name;
        if n.starts_with(&prefix) && !keep.contains(n) && !done.contains(n) {
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
    fn directory_modes() {
        assert_eq!(dir_mode(0o600), 0o700);
        assert_eq!(dir_mode(0o660), 0o770);
        assert_eq!(dir_mode(0o640), 0o750);
        assert_eq!(dir_mode(0o666), 0o777);
    }
}
