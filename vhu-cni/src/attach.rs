// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! One attachment (network, container, interface): the switch port's
//! name, the TAP's name, the socket's host and in-pod paths, the MAC, and
//! the record kept for DEL and GC.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use vhu_api::MacAddr;

use crate::config::{NetConf, POD_SOCKET_DIR};
use crate::env::CniEnv;
use crate::error::CniError;

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

/// An attachment's switch port name: `cni-<network hash>-<attachment hash>`
/// (29 characters, within the API's port-name rules).
pub fn port_name(network: &str, container_id: &str, ifname: &str) -> String {
    format!(
        "{}{:016x}",
        network_prefix(network),
        fnv(1, &[network, container_id, ifname])
    )
}

/// The TAP's name on the host, before it moves into the pod: `vhu` + 12 hex.
pub fn tap_name(port: &str) -> String {
    format!("vhu{:012x}", fnv(2, &[port]) & 0xffff_ffff_ffff)
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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

/// What ADD made, kept under `stateDir` so that DEL and GC find it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// The network.
    pub network: String,
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
    /// vhost-user: the socket's host directories.
    pub host: Option<HostDirs>,
    /// The device-info file written.
    pub device_info_file: Option<String>,
}

impl Record {
    /// The record of `env`'s attachment to port `port`.
    pub fn new(conf: &NetConf, env: &CniEnv, port: &str, host: Option<HostDirs>) -> Self {
        Self {
            network: conf.name.clone(),
            container_id: env.container_id.clone(),
            ifname: env.ifname.clone(),
            netns: env.netns.clone(),
            args: env.args_raw.clone(),
            port: port.to_owned(),
            host,
            device_info_file: conf.runtime.device_info_file.clone(),
        }
    }
}

/// The record file of a port.
pub fn record_path(conf: &NetConf, port: &str) -> PathBuf {
    conf.state_dir.join(&conf.name).join(format!("{port}.json"))
}

/// Reads a record; `None` when there is none (or it is unreadable).
pub fn read_record(path: &Path) -> Option<Record> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// Writes a record.
///
/// # Errors
/// Code 5.
pub fn write_record(path: &Path, r: &Record) -> Result<(), CniError> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).map_err(|e| CniError::io(d.display(), &e))?;
    }
    let tmp = path.with_extension("tmp");
    let body = serde_json::to_vec_pretty(r).unwrap_or_default();
    std::fs::write(&tmp, body).map_err(|e| CniError::io(tmp.display(), &e))?;
    std::fs::rename(&tmp, path).map_err(|e| CniError::io(path.display(), &e))
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
        assert!(derived_mac(&p).is_unicast());
        assert_eq!(derived_mac(&p).0[0], 0x02);
        assert_eq!(pod_socket_path("net1"), "/var/run/vhu/net1/sock");
    }

    #[test]
    fn device_directories() {
        let dp = std::env::temp_dir().join(format!("vhu-cni-dp-{}", std::process::id()));
        std::fs::create_dir_all(dp.join("vhu2")).unwrap();
        let _ = std::fs::remove_file(dp.join("vhu3"));
        std::os::unix::fs::symlink("vhu2", dp.join("vhu3")).unwrap();
        let conf = |id: &str| {
            let c = format!(
                r#"{{"cniVersion":"1.0.0","name":"n","type":"vhu-cni","kind":"vhost-user","deviceID":"{id}","deviceDir":"{}"}}"#,
                dp.display()
            );
            NetConf::parse(c.as_bytes()).unwrap()
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
