// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! One attachment (namespace, network, container, interface): the switch
//! port's name and the label that says the port is this attachment's, the
//! TAP's name, the socket's host and in-pod paths, the MAC, and the record
//! kept for DEL and GC.
//!
//! Records live in the node's state directory (`0700`, files `0600`),
//! where no tenant writes, and hold names, never paths: DEL and GC derive
//! every path again from the node configuration.

use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use vhu_api::MacAddr;

use crate::beneath;
use crate::config::{NetConf, POD_SOCKET_DIR};
use crate::env::CniEnv;
use crate::error::CniError;

/// The first part of every label this plugin puts on a port.
pub const LABEL_PREFIX: &str = "cni/";
/// Largest record read back.
const MAX_RECORD: usize = 64 * 1024;

/// Prefix of every port this plugin creates.
pub const PORT_PREFIX: &str = "cni-";

/// 64-bit FNV-1a of `parts`, each followed by a NUL, from `seed`.
fn fnv(seed: u64, parts: &[&str]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325 ^ seed;
    for p in parts {
        for b in p.bytes().chain([0]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// The port-name prefix of a network's ports: `cni-<8 hex>-`.
pub fn network_prefix(network: &str) -> String {
    format!("{PORT_PREFIX}{:08x}-", fnv(0, &[network]) as u32)
}

/// An attachment's switch port name: `cni-<network hash>-<attachment
/// hash>` (29 characters, within the API's port-name rules). The
/// attachment hash is SHA-256 of (network, container, interface): a tenant
/// cannot choose a network name whose port name is another attachment's
/// (container ids are the runtime's, unique on the node).
pub fn port_name(network: &str, container_id: &str, ifname: &str) -> String {
    let mut h = Sha256::new();
    for p in [network, container_id, ifname] {
        h.update(p.as_bytes());
        h.update([0]);
    }
    let d = h.finalize();
    let mut hex = String::with_capacity(16);
    for b in &d[..8] {
        hex.push_str(&format!("{b:02x}"));
    }
    format!("{}{hex}", network_prefix(network))
}

/// The label on an attachment's port: `cni/<namespace>/<network>/<container
/// id>/<ifname>` (`-` for no namespace). DEL and GC remove a port only
/// when it carries the label they expect.
pub fn label(namespace: &str, network: &str, container_id: &str, ifname: &str) -> String {
    let ns = if namespace.is_empty() { "-" } else { namespace };
    format!("{LABEL_PREFIX}{ns}/{network}/{container_id}/{ifname}")
}

/// A label's parts: (namespace, network, container id, ifname).
pub fn parse_label(l: &str) -> Option<(&str, &str, &str, &str)> {
    let mut p = l.strip_prefix(LABEL_PREFIX)?.split('/');
    let parts = (p.next()?, p.next()?, p.next()?, p.next()?);
    p.next().is_none().then_some(parts)
}

/// The TAP's name on the host, before it moves into the pod: `vhu` + 12 hex.
pub fn tap_name(port: &str) -> String {
    format!("vhu{:012x}", fnv(2, &[port]) & 0xffff_ffff_ffff)
}

/// The host TAP of a Kata `host-tap` attachment: `vhuk` + 11 hex (15
/// characters, `IFNAMSIZ` - 1), derived from the port name.
pub fn host_tap_name(port: &str) -> String {
    format!("vhuk{:011x}", fnv(4, &[port]) & 0x7ff_ffff_ffff)
}

/// A MAC derived from the port name: locally administered, unicast.
pub fn derived_mac(port: &str) -> MacAddr {
    let h = fnv(3, &[port]).to_be_bytes();
    MacAddr([0x02, h[0], h[1], h[2], h[3], h[4]])
}

/// The in-pod socket path: depends only on the interface name.
pub fn pod_socket_path(ifname: &str) -> String {
    format!("{POD_SOCKET_DIR}/{ifname}/sock")
}

/// Host directories of an attachment's socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostDirs {
    /// The per-pod directory.
    pub pod_dir: PathBuf,
    /// Whether the plugin owns `pod_dir` (removes it when empty): true when
    /// it appended the pod's key to `hostSocketDir`.
    pub owns_pod_dir: bool,
    /// `<pod_dir>/<ifname>`: the socket's directory.
    pub if_dir: PathBuf,
    /// `<if_dir>/sock`.
    pub socket: PathBuf,
}

impl HostDirs {
    /// Opens the pod's directory (its own path is the administrator's or
    /// the kubelet's, so links in it are followed; a directory this plugin
    /// owns is created in its parent, never through a link).
    ///
    /// # Errors
    /// The failing call's error.
    pub fn open_pod_dir(&self, create: bool) -> std::io::Result<OwnedFd> {
        if !self.owns_pod_dir {
            return beneath::open_trusted_dir(&self.pod_dir);
        }
        let (Some(parent), Some(name)) = (self.pod_dir.parent(), self.pod_dir.file_name()) else {
            return Err(std::io::Error::other("the pod directory has no parent"));
        };
        if create {
            std::fs::create_dir_all(parent)?;
        }
        let p = beneath::open_trusted_dir(parent)?;
        if create {
            beneath::ensure_dir(&p, name, 0o755)
        } else {
            beneath::open_dir_at(&p, name)
        }
    }

    /// The interface directory's name in the pod directory.
    pub fn if_name(&self) -> &OsStr {
        self.if_dir.file_name().unwrap_or_default()
    }
}

/// The host socket directories: `hostSocketDir` with `{podUID}` replaced by
/// `K8S_POD_UID` (or, without the placeholder, the pod's key appended:
/// `K8S_POD_UID`, else the container id), then `<ifname>/sock`. With a
/// `deviceID` the pod's directory is the device plugin's directory of that
/// device, `<deviceDir>/<deviceID>` (mounted at the pod's socket directory),
/// which must exist; the plugin keeps it.
///
/// # Errors
/// Code 4 when the template needs `K8S_POD_UID` and `CNI_ARGS` lacks it;
/// code 7 when the device's directory is missing.
pub fn host_dirs(conf: &NetConf, env: &CniEnv) -> Result<HostDirs, CniError> {
    let t = &conf.host_socket_dir;
    let (pod_dir, owns) = if let Some(id) = &conf.device_id {
        (device_pod_dir(conf, id)?, false)
    } else if t.contains("{podUID}") {
        let uid = env.pod_uid().ok_or_else(|| {
            CniError::env(format!(
                "CNI_ARGS has no K8S_POD_UID, which hostSocketDir {t:?} needs; set hostSocketDir \
                 to a host directory when the runtime is not a kubelet"
            ))
        })?;
        (PathBuf::from(t.replace("{podUID}", uid)), false)
    } else {
        let key = env.pod_uid().unwrap_or(&env.container_id);
        (Path::new(t).join(key), true)
    };
    let if_dir = pod_dir.join(&env.ifname);
    Ok(HostDirs {
        socket: if_dir.join("sock"),
        if_dir,
        pod_dir,
        owns_pod_dir: owns,
    })
}

/// The device plugin's directory of device `id`: `<deviceDir>/<id>`, a
/// directory (or a link to one: the request's first device's).
fn device_pod_dir(conf: &NetConf, id: &str) -> Result<PathBuf, CniError> {
    let d = conf.device_dir.join(id);
    if d.is_dir() {
        return Ok(d);
    }
    Err(CniError::config(format!(
        "deviceID {id:?} has no socket directory {}: vhu-device-plugin makes it when kubelet \
         allocates the device; check that the pod requests the network's resourceName and that \
         deviceDir is the plugin's --host-dir",
        d.display()
    )))
}

/// What ADD made, kept in the node's state directory so that DEL and GC
/// find it. Names only: every path is derived again from the node's
/// configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// The network.
    pub network: String,
    /// `K8S_POD_NAMESPACE` (empty without one).
    #[serde(default)]
    pub namespace: String,
    /// `CNI_CONTAINERID`.
    #[serde(rename = "containerID")]
    pub container_id: String,
    /// `CNI_IFNAME`.
    pub ifname: String,
    /// `CNI_NETNS` at ADD.
    pub netns: String,
    /// `CNI_ARGS` at ADD.
    pub args: String,
    /// The switch port.
    pub port: String,
    /// The device plugin's device, if any.
    #[serde(default)]
    pub device_id: Option<String>,
    /// The device-info file written.
    pub device_info_file: Option<String>,
}

impl Record {
    /// The record of `env`'s attachment to port `port`.
    pub fn new(conf: &NetConf, env: &CniEnv, port: &str) -> Self {
        Self {
            network: conf.name.clone(),
            namespace: env.namespace().unwrap_or_default().to_owned(),
            container_id: env.container_id.clone(),
            ifname: env.ifname.clone(),
            netns: env.netns.clone(),
            args: env.args_raw.clone(),
            port: port.to_owned(),
            device_id: conf.device_id.clone(),
            device_info_file: conf.runtime.device_info_file.clone(),
        }
    }
}

/// The record file of a port: `<stateDir>/<network>/<port>.json`.
pub fn record_path(conf: &NetConf, port: &str) -> PathBuf {
    conf.state_dir.join(&conf.name).join(format!("{port}.json"))
}

/// Opens (creating, `0700`) a directory of the node's state directory:
/// `<stateDir>/<sub>`, never through a link below the state directory.
///
/// # Errors
/// The failing call's error.
pub fn state_subdir(state_dir: &Path, sub: &str, create: bool) -> std::io::Result<OwnedFd> {
    if create {
        std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
            .create(state_dir)?;
    }
    let root = beneath::open_trusted_dir(state_dir)?;
    if create {
        beneath::ensure_dir(&root, OsStr::new(sub), 0o700)
    } else {
        beneath::open_dir_at(&root, OsStr::new(sub))
    }
}

/// Reads a record; `None` when there is none (or it is unreadable).
pub fn read_record(conf: &NetConf, port: &str) -> Option<Record> {
    let d = state_subdir(&conf.state_dir, &conf.name, false).ok()?;
    read_record_at(&d, &format!("{port}.json"))
}

/// Reads record `file` of an opened network directory.
pub fn read_record_at(dir: &OwnedFd, file: &str) -> Option<Record> {
    let b = beneath::read_file(dir, OsStr::new(file), MAX_RECORD).ok()?;
    serde_json::from_slice(&b).ok()
}

/// Writes a record (`0600`).
///
/// # Errors
/// Code 5.
pub fn write_record(conf: &NetConf, r: &Record) -> Result<(), CniError> {
    let path = record_path(conf, &r.port);
    let d = state_subdir(&conf.state_dir, &conf.name, true)
        .map_err(|e| CniError::io(conf.state_dir.display(), &e))?;
    let body = serde_json::to_vec_pretty(r).unwrap_or_default();
    beneath::write_file(&d, OsStr::new(&format!("{}.json", r.port)), &body, 0o600)
        .map_err(|e| CniError::io(path.display(), &e))
}

/// Removes a record; gone already is fine.
pub fn remove_record(conf: &NetConf, port: &str) {
    if let Ok(d) = state_subdir(&conf.state_dir, &conf.name, false) {
        let _ = beneath::remove_file(&d, OsStr::new(&format!("{port}.json")));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_stable_and_valid() {
        let p = port_name("net1", "abc", "eth1");
        assert_eq!(p, port_name("net1", "abc", "eth1"));
        assert_ne!(p, port_name("net1", "abc", "eth2"));
        assert_ne!(p, port_name("net1", "abd", "eth1"));
        assert_ne!(p, port_name("net2", "abc", "eth1"));
        assert!(p.starts_with(&network_prefix("net1")));
        assert_eq!(p.len(), 29);
        assert!(vhu_api::port::check_name(&p).is_ok());
        let t = tap_name(&p);
        assert_eq!(t.len(), 15);
        assert!(vhu_api::port::check_ifname(&t).is_ok());
        let h = host_tap_name(&p);
        assert_eq!(h.len(), 15, "{h}");
        assert!(h.starts_with("vhuk") && vhu_api::port::check_ifname(&h).is_ok());
        assert_ne!(h, host_tap_name(&port_name("net1", "abc", "eth2")));
        assert!(derived_mac(&p).is_unicast());
        assert_eq!(derived_mac(&p).0[0], 0x02);
        assert_eq!(pod_socket_path("net1"), "/var/run/vhu/net1/sock");
        let l = label("ns1", "net1", "abc", "eth1");
        assert_eq!(l, "cni/ns1/net1/abc/eth1");
        assert_eq!(parse_label(&l), Some(("ns1", "net1", "abc", "eth1")));
        assert_eq!(
            parse_label(&label("", "n", "c", "i")),
            Some(("-", "n", "c", "i"))
        );
        assert_eq!(parse_label("cni/a/b/c"), None);
        assert_eq!(parse_label("cni/a/b/c/d/e"), None);
        assert_eq!(parse_label("other/a/b/c/d"), None);
    }

    #[test]
    fn device_directories() {
        let dp = std::env::temp_dir().join(format!("vhu-cni-dp-{}", std::process::id()));
        std::fs::create_dir_all(dp.join("vhu2")).unwrap();
        let _ = std::fs::remove_file(dp.join("vhu3"));
        std::os::unix::fs::symlink("vhu2", dp.join("vhu3")).unwrap();
        let node = crate::node::NodeConfig::parse(
            format!("device_dir = \"{}\"", dp.display()).as_bytes(),
            None,
        )
        .unwrap();
        let conf = |id: &str| {
            let c = format!(
                r#"{{"cniVersion":"1.0.0","name":"n","type":"vhu-cni","kind":"vhost-user","deviceID":"{id}"}}"#
            );
            NetConf::parse_with(c.as_bytes(), &node).unwrap()
        };
        let env = CniEnv {
            container_id: "c1".into(),
            ifname: "net1".into(),
            ..CniEnv::default()
        };
        for id in ["vhu2", "vhu3"] {
            let d = host_dirs(&conf(id), &env).unwrap();
            assert_eq!(d.pod_dir, dp.join(id));
            assert!(!d.owns_pod_dir, "the device plugin keeps its directory");
            assert_eq!(d.socket, dp.join(id).join("net1/sock"));
        }
        let e = host_dirs(&conf("vhu9"), &env).unwrap_err();
        assert_eq!(e.code, crate::error::INVALID_CONFIG);
        assert!(e.msg.contains("has no socket directory"), "{e}");
        std::fs::remove_dir_all(&dp).unwrap();
    }
}
