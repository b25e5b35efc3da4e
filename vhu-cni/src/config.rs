// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The network configuration on stdin: the spec's fields and `vhu-cni`'s
//! own, checked before anything is touched.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Map, Value};
use vhu_api::{MacAddr, PortKind, PortSpec, Role, Vlan};

use crate::error::{CniError, DECODE, INCOMPATIBLE_VERSION, UNSUPPORTED_FIELD};
use crate::node::{self, NodeConfig};

/// Versions of the spec whose configurations this plugin takes.
pub const SUPPORTED_VERSIONS: &[&str] = &["0.4.0", "1.0.0", "1.1.0"];
/// The version this plugin implements.
pub const SPEC_VERSION: &str = "1.1.0";
pub use crate::node::{
    DEFAULT_CONTROL_SOCKET, DEFAULT_DEVICE_DIR, DEFAULT_HOST_SOCKET_DIR, DEFAULT_STATE_DIR,
};
/// Where the sockets are inside the pod (the `emptyDir`'s mount point).
pub const POD_SOCKET_DIR: &str = "/var/run/vhu";

/// The spec's top-level fields (and the ones runtimes add).
const SPEC_FIELDS: &[&str] = &[
    "cniVersion",
    "cniVersions",
    "name",
    "type",
    "ipam",
    "dns",
    "args",
    "capabilities",
    "runtimeConfig",
    "prevResult",
    "cni.dev/valid-attachments",
    "deviceID",
    "pciBusID",
];
/// This plugin's fields.
const OWN_FIELDS: &[&str] = &[
    "controlSocket",
    "kind",
    "vmRole",
    "vlan",
    "mtu",
    "mac",
    "macLock",
    "queues",
    "hostSocketDir",
    "socketOwner",
    "socketGroup",
    "socketMode",
    "stateDir",
    "deviceDir",
    "kata",
];

/// The interface a pod gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A vhost-user port, its socket placed for the pod.
    VhostUser,
    /// A TAP moved into the pod's network namespace.
    Tap,
    /// A persistent TAP in the host's namespace for a Kata VMM to open
    /// (a DAN `host-tap` device), served by the switch from its network
    /// side (an `af_packet` port on it). Only with `"kata": "dan"`.
    HostTap,
}

impl Kind {
    /// The name a network gives.
    pub fn name(self) -> &'static str {
        match self {
            Kind::VhostUser => "vhost-user",
            Kind::Tap => "tap",
            Kind::HostTap => "host-tap",
        }
    }
}

/// Who creates the vhost-user socket, named from the VM's side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VmRole {
    /// The VM (QEMU `server=on`, libvirt `mode='server'`) creates the socket;
    /// the switch connects, and reconnects after either side restarts.
    Server,
    /// The switch creates the socket; the VM connects.
    Client,
}

impl VmRole {
    /// The switch port's role: the opposite of the VM's.
    pub fn switch_role(self) -> Role {
        match self {
            VmRole::Server => Role::Client,
            VmRole::Client => Role::Server,
        }
    }

    /// The device-info `vhost-user.mode`: the host side's role (the reading
    /// of KubeVirt's and every implementation's, see `docs/cni.md`).
    pub fn device_info_mode(self) -> &'static str {
        match self {
            VmRole::Server => "client",
            VmRole::Client => "server",
        }
    }
}

/// One `{containerID, ifname}` of `cni.dev/valid-attachments`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ValidAttachment {
    /// Container id.
    #[serde(rename = "containerID")]
    pub container_id: String,
    /// Interface name.
    pub ifname: String,
}

/// `runtimeConfig` fields this plugin uses (others are ignored).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct RuntimeConfig {
    /// Where to write the device-info file.
    #[serde(rename = "CNIDeviceInfoFile")]
    pub device_info_file: Option<String>,
    /// A MAC the runtime asks for (`mac` capability).
    pub mac: Option<String>,
    /// The device a device plugin allocated.
    #[serde(rename = "deviceID")]
    pub device_id: Option<String>,
}

/// A checked network configuration.
#[derive(Debug, Clone)]
pub struct NetConf {
    /// `cniVersion`.
    pub cni_version: String,
    /// `name`.
    pub name: String,
    /// The whole configuration as received (given to the IPAM plugin).
    pub raw: Map<String, Value>,
    /// `ipam.type`, when there is an `ipam` section.
    pub ipam_type: Option<String>,
    /// The switch's control socket (the node's).
    pub control_socket: PathBuf,
    /// The interface kind.
    pub kind: Kind,
    /// vhost-user: who creates the socket.
    pub vm_role: VmRole,
    /// The port's VLAN mode.
    pub vlan: Option<Vlan>,
    /// MTU.
    pub mtu: Option<u32>,
    /// The configured MAC.
    pub mac: Option<MacAddr>,
    /// `macLock`: whether the port may send only from its MAC (`None`: the
    /// default, locked).
    pub mac_lock: Option<bool>,
    /// Queue pairs (vhost-user) or TAP queues.
    pub queues: Option<u32>,
    /// The host directory template of the sockets (the node's).
    pub host_socket_dir: String,
    /// Owner of the socket and its directory.
    pub socket_owner: Option<String>,
    /// Group of the socket and its directory.
    pub socket_group: Option<String>,
    /// Mode of the socket (octal); its directory gets the matching `x` bits.
    pub socket_mode: Option<String>,
    /// Where the per-attachment records go (the node's).
    pub state_dir: PathBuf,
    /// The device a device plugin allocated for this attachment (Multus's
    /// `deviceID`, or `runtimeConfig.deviceID`).
    pub device_id: Option<String>,
    /// Where the device plugin makes the devices' socket directories (the
    /// node's).
    pub device_dir: PathBuf,
    /// The only directory device-info files are written in (the node's).
    pub device_info_dir: PathBuf,
    /// `runtimeConfig`.
    pub runtime: RuntimeConfig,
    /// `prevResult`.
    pub prev_result: Option<Value>,
    /// `cni.dev/valid-attachments`.
    pub valid_attachments: Option<Vec<ValidAttachment>>,
    /// `"kata": "dan"`: the attachment is a device of the sandbox's Kata
    /// runtime-rs DAN file ([`crate::dan`]).
    pub kata_dan: bool,
    /// The node's Kata settings.
    pub kata: crate::node::Kata,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Own {
    name: String,
    #[serde(rename = "type")]
    _type: String,
    ipam: Option<Map<String, Value>>,
    control_socket: Option<String>,
    kind: Option<String>,
    vm_role: Option<String>,
    vlan: Option<Vlan>,
    mtu: Option<u32>,
    mac: Option<String>,
    mac_lock: Option<bool>,
    queues: Option<u32>,
    host_socket_dir: Option<String>,
    socket_owner: Option<String>,
    socket_group: Option<String>,
    socket_mode: Option<String>,
    state_dir: Option<String>,
    #[serde(rename = "deviceID")]
    device_id: Option<String>,
    device_dir: Option<String>,
    #[serde(default)]
    runtime_config: Option<Value>,
    prev_result: Option<Value>,
    #[serde(rename = "cni.dev/valid-attachments")]
    valid_attachments: Option<Vec<ValidAttachment>>,
    kata: Option<String>,
}

/// The `cniVersion` of a configuration, if it has a readable one (for the
/// error result of a configuration that fails later).
pub fn peek_version(stdin: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(stdin).ok()?;
    let s = v.get("cniVersion")?.as_str()?;
    SUPPORTED_VERSIONS.contains(&s).then(|| s.to_owned())
}

/// Whether a version is one this plugin takes.
pub fn check_version(v: &str) -> Result<(), CniError> {
    if SUPPORTED_VERSIONS.contains(&v) {
        Ok(())
    } else {
        Err(CniError::new(
            INCOMPATIBLE_VERSION,
            format!(
                "cniVersion {v:?} is not supported; use one of {}",
                SUPPORTED_VERSIONS.join(", ")
            ),
        ))
    }
}

/// A name as the spec allows for networks and plugins.
fn check_plugin_name(field: &str, v: &str) -> Result<(), CniError> {
    node::check_plugin_name(v).map_err(|m| CniError::config(format!("{field} {m}")))
}

/// Checks an absolute path without `.`/`..` components.
fn check_abs_path(field: &str, v: &str) -> Result<(), CniError> {
    node::check_abs_path(v).map_err(|m| CniError::config(format!("{field} {m}")))
}

/// A host path a network names: it may only repeat the node's.
fn node_path(
    field: &str,
    key: &str,
    asked: Option<&str>,
    node: &NodeConfig,
    ours: &str,
) -> Result<(), CniError> {
    match asked {
        None => Ok(()),
        Some(v) if v == ours => Ok(()),
        Some(v) => Err(CniError::config(format!(
            "{field} {v:?} is not this node's ({key} = {ours:?} in {}): host paths are set by the \
             node's administrator; remove {field} from the network",
            node.name()
        ))),
    }
}

impl NetConf {
    /// Parses and checks the configuration on stdin under the embedded
    /// node configuration ([`NodeConfig::default`]).
    ///
    /// # Errors
    /// As [`NetConf::parse_with`].
    pub fn parse(stdin: &[u8]) -> Result<Self, CniError> {
        Self::parse_with(stdin, &NodeConfig::default())
    }

    /// Parses and checks the configuration on stdin, a tenant's input,
    /// under the node's configuration: host paths are the node's (a network
    /// may repeat one, not change it), `ipam.type` one the node allows,
    /// `runtimeConfig.CNIDeviceInfoFile` inside the node's device-info
    /// directory.
    ///
    /// # Errors
    /// Code 6 (not a JSON object), 1 (`cniVersion`), 2 (a field this plugin
    /// does not know), 7 (a field with a bad value).
    pub fn parse_with(stdin: &[u8], node: &NodeConfig) -> Result<Self, CniError> {
        Self::parse_node(stdin, node, false)
    }

    /// As [`NetConf::parse_with`], for DEL: what the node's configuration
    /// would refuse is ignored instead (a host path the network names, an
    /// IPAM plugin the node does not allow, a device-info file outside its
    /// directory), since DEL uses only the node's paths and must not keep
    /// a pod from going away when the node's configuration changed since
    /// its ADD.
    ///
    /// # Errors
    /// As [`NetConf::parse_with`], but for the node's refusals.
    pub fn parse_for_del(stdin: &[u8], node: &NodeConfig) -> Result<Self, CniError> {
        Self::parse_node(stdin, node, true)
    }

    fn parse_node(stdin: &[u8], node: &NodeConfig, lenient: bool) -> Result<Self, CniError> {
        let v: Value = serde_json::from_slice(stdin).map_err(|e| {
            CniError::new(
                DECODE,
                format!("the network configuration is not JSON: {e}"),
            )
        })?;
        let Value::Object(raw) = v else {
            return Err(CniError::new(
                DECODE,
                "the network configuration must be a JSON object",
            ));
        };
        let version = match raw.get("cniVersion") {
            None => {
                return Err(CniError::config(
                    "cniVersion is missing; set it to one of 0.4.0, 1.0.0, 1.1.0",
                ))
            }
            Some(Value::String(s)) => s.clone(),
            Some(other) => {
                return Err(CniError::config(format!(
                    "cniVersion must be a string such as \"1.0.0\", got {other}"
                )))
            }
        };
        check_version(&version)?;
        let known: BTreeSet<&str> = SPEC_FIELDS.iter().chain(OWN_FIELDS).copied().collect();
        if let Some(k) = raw.keys().find(|k| !known.contains(k.as_str())) {
            return Err(CniError::new(
                UNSUPPORTED_FIELD,
                format!(
                    "unsupported field {k:?} = {}; vhu-cni knows {}",
                    raw[k],
                    OWN_FIELDS.join(", ")
                ),
            ));
        }
        for f in ["name", "type"] {
            if !raw.contains_key(f) {
                return Err(CniError::config(format!("{f} is missing")));
            }
        }
        let own: Own = serde_json::from_value(Value::Object(raw.clone()))
            .map_err(|e| CniError::config(format!("invalid network configuration: {e}")))?;
        check_plugin_name("name", &own.name)?;

        let kind = match own.kind.as_deref() {
            Some("vhost-user") => Kind::VhostUser,
            Some("tap") => Kind::Tap,
            Some("host-tap") => Kind::HostTap,
            Some(k) => {
                return Err(CniError::config(format!(
                    "kind {k:?} is unknown; use \"vhost-user\", \"tap\" or \"host-tap\""
                )))
            }
            None => {
                return Err(CniError::config(
                    "kind is missing; use \"vhost-user\", \"tap\" or \"host-tap\"",
                ))
            }
        };
        let kata_dan = match own.kata.as_deref() {
            None => false,
            Some("dan") => true,
            Some(k) => {
                return Err(CniError::config(format!(
                    "kata {k:?} is unknown; use \"dan\" (write the device into the sandbox's \
                     Kata runtime-rs DAN file) or remove it"
                )))
            }
        };
        match (kind, kata_dan) {
            (Kind::HostTap, false) => {
                return Err(CniError::config(
                    "kind \"host-tap\" is a Kata DAN device: add \"kata\": \"dan\"",
                ))
            }
            (Kind::Tap, true) => {
                return Err(CniError::config(
                    "\"kata\": \"dan\" takes kind \"host-tap\" or \"vhost-user\"; a \"tap\" \
                     is a TAP in the pod, which Kata runtime-rs does not attach",
                ))
            }
            _ => {}
        }
        if kata_dan {
            for (present, f) in [
                (
                    own.vm_role.as_deref().is_some_and(|r| r != "server"),
                    "vmRole",
                ),
                (own.host_socket_dir.is_some(), "hostSocketDir"),
                (own.socket_owner.is_some(), "socketOwner"),
                (own.socket_group.is_some(), "socketGroup"),
                (own.socket_mode.is_some(), "socketMode"),
                (own.device_dir.is_some(), "deviceDir"),
                (own.device_id.is_some(), "deviceID"),
                (own.mac_lock == Some(false), "macLock"),
            ] {
                if present {
                    return Err(CniError::config(format!(
                        "{f} does not apply to a Kata DAN device (the VMM creates its socket in \
                         the node's [kata] socket_dir; its port is locked to the guest's MAC); \
                         remove it"
                    )));
                }
            }
        }
        let vhost = kind == Kind::VhostUser;
        if !vhost {
            for (present, f) in [
                (own.vm_role.is_some(), "vmRole"),
                (own.host_socket_dir.is_some(), "hostSocketDir"),
                (own.socket_owner.is_some(), "socketOwner"),
                (own.socket_group.is_some(), "socketGroup"),
                (own.socket_mode.is_some(), "socketMode"),
                (own.device_dir.is_some(), "deviceDir"),
            ] {
                if present {
                    return Err(CniError::config(format!(
                        "{f} applies only to kind \"vhost-user\"; remove it from this tap network"
                    )));
                }
            }
        }
        let vm_role = match own.vm_role.as_deref() {
            None | Some("server") => VmRole::Server,
            Some("client") => VmRole::Client,
            Some(r) => {
                return Err(CniError::config(format!(
                    "vmRole {r:?} is unknown; use \"server\" (the VM creates the socket) or \
                     \"client\" (the switch does)"
                )))
            }
        };
        let mac = own
            .mac
            .as_deref()
            .map(|m| parse_mac("mac", m))
            .transpose()?;

        // What the switch would say about these values, under our names.
        let mut probe = PortSpec::new("probe", PortKind::VhostUser);
        probe.role = Some(Role::Server);
        probe.vlan = own.vlan.clone();
        probe.mtu = own.mtu;
        probe.queues = own.queues;
        probe.owner = own.socket_owner.clone();
        probe.group = own.socket_group.clone();
        probe.mode = own.socket_mode.clone();
        if !vhost {
            probe.kind = if kind == Kind::HostTap {
                PortKind::AfPacket
            } else {
                PortKind::Tap
            };
            probe.role = None;
            probe.interface = Some("probe".into());
        }
        if let Err(errs) = probe.validate() {
            let e = &errs[0];
            let field = match e.field.split(['.', '[']).next().unwrap_or_default() {
                "owner" => "socketOwner",
                "group" => "socketGroup",
                "mode" => "socketMode",
                _ => e.field.as_str(),
            };
            return Err(CniError::config(format!("{field}: {}", e.message)));
        }

        for (field, v) in [
            ("controlSocket", &own.control_socket),
            ("hostSocketDir", &own.host_socket_dir),
            ("stateDir", &own.state_dir),
            ("deviceDir", &own.device_dir),
        ] {
            if let Some(v) = v {
                check_abs_path(field, v)?;
            }
        }
        let s = |p: &PathBuf| p.display().to_string();
        for r in [
            node_path(
                "controlSocket",
                "control_socket",
                own.control_socket.as_deref(),
                node,
                &s(&node.control_socket),
            ),
            node_path(
                "hostSocketDir",
                "host_socket_dir",
                own.host_socket_dir.as_deref(),
                node,
                &node.host_socket_dir,
            ),
            node_path(
                "stateDir",
                "state_dir",
                own.state_dir.as_deref(),
                node,
                &s(&node.state_dir),
            ),
            node_path(
                "deviceDir",
                "device_dir",
                own.device_dir.as_deref(),
                node,
                &s(&node.device_dir),
            ),
        ] {
            if !lenient {
                r?;
            }
        }
        if own.mac_lock.is_some() && !vhost && own.mac_lock != Some(true) {
            // A tap port's MAC is the pod interface's: it stays locked.
            return Err(CniError::config(
                "macLock false applies only to kind \"vhost-user\" (a tap port is locked to the \
                 MAC the plugin gives the pod's interface)",
            ));
        }

        let ipam_type = match &own.ipam {
            None => None,
            Some(m) => match m.get("type") {
                Some(Value::String(t)) if lenient && (t == node::SELF_NAME || !node.ipam.contains(t)) => {
                    None
                }
                Some(Value::String(t)) => {
                    check_plugin_name("ipam.type", t)?;
                    if t == node::SELF_NAME {
                        return Err(CniError::config(format!(
                            "ipam.type {t:?}: {} cannot be its own IPAM plugin",
                            node::SELF_NAME
                        )));
                    }
                    if !node.ipam.contains(t) {
                        return Err(CniError::config(format!(
                            "ipam.type {t:?} is not an IPAM plugin this node allows ({}: ipam = [{}])",
                            node.name(),
                            node.ipam.iter().map(|n| format!("{n:?}")).collect::<Vec<_>>().join(", ")
                        )));
                    }
                    Some(t.clone())
                }
                Some(other) => {
                    return Err(CniError::config(format!(
                        "ipam.type must be the name of an IPAM plugin such as \"host-local\", got {other}"
                    )))
                }
                None => {
                    return Err(CniError::config(
                        "ipam.type is missing: name the IPAM plugin (e.g. \"host-local\"), or remove ipam",
                    ))
                }
            },
        };
        let mut runtime: RuntimeConfig = match own.runtime_config {
            None | Some(Value::Null) => RuntimeConfig::default(),
            Some(v @ Value::Object(_)) => serde_json::from_value(v)
                .map_err(|e| CniError::config(format!("runtimeConfig: {e}")))?,
            Some(other) => {
                return Err(CniError::config(format!(
                    "runtimeConfig must be an object, got {other}"
                )))
            }
        };
        if lenient
            && runtime
                .device_info_file
                .as_deref()
                .is_some_and(|f| device_info_name(f, &node.device_info_dir).is_none())
        {
            runtime.device_info_file = None;
        }
        if let Some(f) = &runtime.device_info_file {
            check_abs_path("runtimeConfig.CNIDeviceInfoFile", f)?;
            device_info_name(f, &node.device_info_dir).ok_or_else(|| {
                CniError::config(format!(
                    "runtimeConfig.CNIDeviceInfoFile {f:?} is not inside this node's device-info \
                     directory {} (device_info_dir in {})",
                    node.device_info_dir.display(),
                    node.name()
                ))
            })?;
        }
        if let Some(m) = &runtime.mac {
            parse_mac("runtimeConfig.mac", m)?;
        }
        let device_id = device_id(own.device_id, runtime.device_id.clone(), vhost)?;
        Ok(Self {
            cni_version: version,
            name: own.name,
            raw,
            ipam_type,
            control_socket: node.control_socket.clone(),
            kind,
            vm_role,
            vlan: own.vlan,
            mtu: own.mtu,
            mac,
            mac_lock: own.mac_lock,
            queues: own.queues,
            host_socket_dir: node.host_socket_dir.clone(),
            socket_owner: own.socket_owner,
            socket_group: own.socket_group,
            socket_mode: own.socket_mode,
            state_dir: node.state_dir.clone(),
            device_id,
            device_dir: node.device_dir.clone(),
            device_info_dir: node.device_info_dir.clone(),
            runtime,
            prev_result: own.prev_result,
            valid_attachments: own.valid_attachments,
            kata_dan,
            kata: node.kata.clone(),
        })
    }

    /// Whether results and commands of spec 1.1.0 apply.
    pub fn is_1_1(&self) -> bool {
        self.cni_version == "1.1.0"
    }
}

/// The path of a device-info file relative to the node's device-info
/// directory: `None` unless `file` is strictly inside `dir` (lexically;
/// the writer walks it without following links).
pub fn device_info_name(file: &str, dir: &Path) -> Option<PathBuf> {
    let rel = Path::new(file).strip_prefix(dir).ok()?;
    let plain = rel.components().count() > 0
        && rel
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
    plain.then(|| rel.to_path_buf())
}

/// The device id, from the top level (where Multus puts it) or
/// `runtimeConfig.deviceID`: they must agree, name a file in `deviceDir`,
/// and apply to vhost-user only.
fn device_id(
    top: Option<String>,
    runtime: Option<String>,
    vhost: bool,
) -> Result<Option<String>, CniError> {
    let id = match (top, runtime) {
        (Some(a), Some(b)) if a != b => {
            return Err(CniError::config(format!(
                "deviceID {a:?} and runtimeConfig.deviceID {b:?} differ; give one"
            )))
        }
        (a, b) => a.or(b),
    };
    let Some(id) = id else { return Ok(None) };
    if !vhost {
        return Err(CniError::config(format!(
            "deviceID {id:?} applies only to kind \"vhost-user\" (a device plugin's socket \
             directory); remove the resourceName from this tap network"
        )));
    }
    let ok = !id.is_empty()
        && id.len() <= 63
        && id != "."
        && id != ".."
        && id
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'));
    if !ok {
        return Err(CniError::config(format!(
            "deviceID {id:?} is not a device plugin's device id (1-63 of A-Z a-z 0-9 _ . -)"
        )));
    }
    Ok(Some(id))
}

/// Parses a unicast MAC.
pub fn parse_mac(field: &str, m: &str) -> Result<MacAddr, CniError> {
    let mac: MacAddr = m.parse().map_err(|_| {
        CniError::config(format!(
            "{field} {m:?} is not a MAC address such as \"02:00:00:00:00:01\""
        ))
    })?;
    if !mac.is_unicast() {
        return Err(CniError::config(format!(
            "{field} {m:?} is not a unicast address an interface can have"
        )));
    }
    Ok(mac)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{INVALID_CONFIG, UNSUPPORTED_FIELD};

    fn conf(extra: &str, version: &str) -> String {
        format!(r#"{{"cniVersion":"{version}","name":"net1","type":"vhu-cni"{extra}}}"#)
    }

    #[test]
    fn every_version_parses() {
        for v in SUPPORTED_VERSIONS {
            let c = NetConf::parse(conf(r#","kind":"vhost-user""#, v).as_bytes()).unwrap();
            assert_eq!(c.cni_version, *v);
            assert_eq!(c.kind, Kind::VhostUser);
            assert_eq!(c.vm_role, VmRole::Server);
            assert_eq!(c.control_socket, PathBuf::from(DEFAULT_CONTROL_SOCKET));
            assert_eq!(c.host_socket_dir, DEFAULT_HOST_SOCKET_DIR);
        }
        let full = conf(
            r#","kind":"vhost-user","vmRole":"client","vlan":{"trunk":[10,20],"native":10},
            "mtu":9000,"mac":"02:00:00:00:00:07","queues":4,"hostSocketDir":"/run/s",
            "socketOwner":"107","socketGroup":"kvm","socketMode":"0660","controlSocket":"/x.sock",
            "stateDir":"/tmp/st","ipam":{"type":"host-local","subnet":"10.1.0.0/24"},
            "capabilities":{"CNIDeviceInfoFile":true},"macLock":false,
            "runtimeConfig":{"CNIDeviceInfoFile":"/run/di/x","portMappings":[]},
            "prevResult":{"cniVersion":"1.1.0"}"#,
            "1.1.0",
        );
        // The host paths a network repeats are the node's.
        let node = NodeConfig::parse(
            br#"control_socket = "/x.sock"
state_dir = "/tmp/st"
host_socket_dir = "/run/s"
device_info_dir = "/run/di""#,
            None,
        )
        .unwrap();
        let c = NetConf::parse_with(full.as_bytes(), &node).unwrap();
        assert_eq!(c.mac_lock, Some(false));
        assert_eq!(c.control_socket, PathBuf::from("/x.sock"));
        // Under another node's configuration they are refused.
        let e = NetConf::parse(full.as_bytes()).unwrap_err();
        assert_eq!(e.code, INVALID_CONFIG);
        assert!(
            e.msg
                .starts_with("controlSocket \"/x.sock\" is not this node's"),
            "{e}"
        );
        assert_eq!(c.vm_role, VmRole::Client);
        assert_eq!(c.mtu, Some(9000));
        assert_eq!(c.queues, Some(4));
        assert_eq!(c.mac.unwrap().to_string(), "02:00:00:00:00:07");
        assert_eq!(c.ipam_type.as_deref(), Some("host-local"));
        assert_eq!(c.runtime.device_info_file.as_deref(), Some("/run/di/x"));
        assert!(c.is_1_1());
        let t = NetConf::parse(conf(r#","kind":"tap","vlan":5"#, "1.0.0").as_bytes()).unwrap();
        assert_eq!((t.kind, t.vlan), (Kind::Tap, Some(Vlan::Access(5))));
    }

    #[test]
    fn device_ids() {
        let vu = |extra: &str| {
            NetConf::parse(conf(&format!(r#","kind":"vhost-user"{extra}"#), "1.0.0").as_bytes())
        };
        let c = vu("").unwrap();
        assert_eq!(
            (c.device_id, c.device_dir),
            (None, PathBuf::from(DEFAULT_DEVICE_DIR))
        );
        // Multus puts both deviceID and pciBusID at the top level.
        let c = vu(r#","deviceID":"vhu3","pciBusID":"vhu3","deviceDir":"/run/vhu/dp""#).unwrap();
        assert_eq!(c.device_id.as_deref(), Some("vhu3"));
        assert_eq!(c.device_dir, PathBuf::from("/run/vhu/dp"));
        let e = vu(r#","deviceDir":"/run/dp""#).unwrap_err();
        assert!(e.msg.contains("is not this node's (device_dir"), "{e}");
        let c = vu(r#","runtimeConfig":{"deviceID":"vhu4"}"#).unwrap();
        assert_eq!(c.device_id.as_deref(), Some("vhu4"));
        let c = vu(r#","deviceID":"vhu4","runtimeConfig":{"deviceID":"vhu4"}"#).unwrap();
        assert_eq!(c.device_id.as_deref(), Some("vhu4"));
        for (extra, msg) in [
            (
                r#","deviceID":"vhu1","runtimeConfig":{"deviceID":"vhu2"}"#,
                "differ",
            ),
            (
                r#","deviceID":"../etc""#,
                "is not a device plugin's device id",
            ),
            (r#","deviceID":"a/b""#, "is not a device plugin's device id"),
            (r#","deviceID":"""#, "is not a device plugin's device id"),
            (r#","deviceID":".""#, "is not a device plugin's device id"),
            (
                r#","deviceDir":"dp""#,
                "deviceDir \"dp\" must be an absolute path",
            ),
        ] {
            let e = vu(extra).expect_err(extra);
            assert_eq!(e.code, INVALID_CONFIG, "{extra}: {e}");
            assert!(e.msg.contains(msg), "{extra}: {:?} lacks {msg:?}", e.msg);
        }
        let e = NetConf::parse(conf(r#","kind":"tap","deviceID":"vhu1""#, "1.0.0").as_bytes())
            .unwrap_err();
        assert!(e.msg.contains("applies only to kind \"vhost-user\""), "{e}");
        let e =
            NetConf::parse(conf(r#","kind":"tap","deviceDir":"/run/vhu/dp""#, "1.0.0").as_bytes())
                .unwrap_err();
        assert!(e.msg.contains("deviceDir applies only"), "{e}");
    }

    #[test]
    fn kata_dan_networks() {
        let p = |extra: &str| NetConf::parse(conf(extra, "1.0.0").as_bytes());
        let c = p(r#","kind":"host-tap","kata":"dan","queues":4,"mtu":9000"#).unwrap();
        assert_eq!(
            (c.kind, c.kata_dan, c.queues),
            (Kind::HostTap, true, Some(4))
        );
        assert_eq!(c.kata, crate::node::Kata::default());
        let c = p(r#","kind":"vhost-user","kata":"dan","vmRole":"server""#).unwrap();
        assert_eq!((c.kind, c.kata_dan), (Kind::VhostUser, true));
        assert!(!p(r#","kind":"vhost-user""#).unwrap().kata_dan);
        for (extra, msg) in [
            (r#","kind":"host-tap""#, "add \"kata\": \"dan\""),
            (
                r#","kind":"tap","kata":"dan""#,
                "takes kind \"host-tap\" or \"vhost-user\"",
            ),
            (
                r#","kind":"vhost-user","kata":"go""#,
                "kata \"go\" is unknown",
            ),
            (
                r#","kind":"vhost-user","kata":"dan","vmRole":"client""#,
                "vmRole does not apply to a Kata DAN device",
            ),
            (
                r#","kind":"vhost-user","kata":"dan","socketMode":"0660""#,
                "socketMode does not apply",
            ),
            (
                r#","kind":"vhost-user","kata":"dan","deviceID":"vhu1""#,
                "deviceID does not apply",
            ),
            (
                r#","kind":"vhost-user","kata":"dan","macLock":false"#,
                "macLock does not apply",
            ),
            (
                r#","kind":"host-tap","kata":"dan","queues":65"#,
                "queues: 65",
            ),
        ] {
            let e = p(extra).expect_err(extra);
            assert_eq!(e.code, INVALID_CONFIG, "{extra}: {e}");
            assert!(e.msg.contains(msg), "{extra}: {:?} lacks {msg:?}", e.msg);
        }
    }

    #[test]
    fn roles_map_to_device_info() {
        assert_eq!(VmRole::Server.switch_role(), Role::Client);
        assert_eq!(VmRole::Server.device_info_mode(), "client");
        assert_eq!(VmRole::Client.switch_role(), Role::Server);
        assert_eq!(VmRole::Client.device_info_mode(), "server");
    }

    #[test]
    fn bad_configs_get_exact_codes() {
        let vu = r#","kind":"vhost-user""#;
        let cases: &[(String, u32, &str)] = &[
            ("not json".into(), DECODE, "not JSON"),
            ("[1]".into(), DECODE, "must be a JSON object"),
            (
                r#"{"name":"n","type":"t","kind":"tap"}"#.into(),
                INVALID_CONFIG,
                "cniVersion is missing",
            ),
            (
                r#"{"cniVersion":1,"name":"n","type":"t"}"#.into(),
                INVALID_CONFIG,
                "must be a string",
            ),
            (
                conf(vu, "0.3.1"),
                INCOMPATIBLE_VERSION,
                "\"0.3.1\" is not supported",
            ),
            (
                conf(vu, "2.0.0"),
                INCOMPATIBLE_VERSION,
                "use one of 0.4.0, 1.0.0, 1.1.0",
            ),
            (
                r#"{"cniVersion":"1.0.0","type":"t","kind":"tap"}"#.into(),
                INVALID_CONFIG,
                "name is missing",
            ),
            (
                conf(r#","kind":"tap","vlna":3"#, "1.0.0"),
                UNSUPPORTED_FIELD,
                "unsupported field \"vlna\" = 3",
            ),
            (conf("", "1.0.0"), INVALID_CONFIG, "kind is missing"),
            (
                conf(r#","kind":"macvlan""#, "1.0.0"),
                INVALID_CONFIG,
                "kind \"macvlan\" is unknown",
            ),
            (
                conf(r#","kind":"vhost-user","vmRole":"both""#, "1.0.0"),
                INVALID_CONFIG,
                "vmRole \"both\" is unknown",
            ),
            (
                conf(r#","kind":"tap","vmRole":"client""#, "1.0.0"),
                INVALID_CONFIG,
                "vmRole applies only",
            ),
            (
                conf(r#","kind":"vhost-user","vlan":4095"#, "1.0.0"),
                INVALID_CONFIG,
                "vlan: VLAN id 4095 is out of range 1-4094",
            ),
            (
                conf(r#","kind":"vhost-user","vlan":"ten""#, "1.0.0"),
                INVALID_CONFIG,
                "invalid network configuration",
            ),
            (
                conf(r#","kind":"vhost-user","mtu":50"#, "1.0.0"),
                INVALID_CONFIG,
                "mtu: 50 is out of range 68-9216",
            ),
            (
                conf(r#","kind":"vhost-user","mtu":"1500""#, "1.0.0"),
                INVALID_CONFIG,
                "invalid type",
            ),
            (
                conf(r#","kind":"vhost-user","queues":0"#, "1.0.0"),
                INVALID_CONFIG,
                "queues: 0 is out of range 1-128",
            ),
            (
                conf(r#","kind":"tap","queues":65"#, "1.0.0"),
                INVALID_CONFIG,
                "queues: 65 is out of range 1-64",
            ),
            (
                conf(r#","kind":"vhost-user","mac":"01:00:5e:00:00:01""#, "1.0.0"),
                INVALID_CONFIG,
                "not a unicast",
            ),
            (
                conf(r#","kind":"vhost-user","mac":"zz""#, "1.0.0"),
                INVALID_CONFIG,
                "mac \"zz\" is not a MAC",
            ),
            (
                conf(r#","kind":"vhost-user","socketMode":"0999""#, "1.0.0"),
                INVALID_CONFIG,
                "socketMode: \"0999\" is not an octal",
            ),
            (
                conf(r#","kind":"vhost-user","socketOwner":"bad name""#, "1.0.0"),
                INVALID_CONFIG,
                "socketOwner: \"bad name\"",
            ),
            (
                conf(r#","kind":"vhost-user","hostSocketDir":"rel/dir""#, "1.0.0"),
                INVALID_CONFIG,
                "hostSocketDir \"rel/dir\" must be an absolute path",
            ),
            (
                conf(r#","kind":"vhost-user","hostSocketDir":"/a/../b""#, "1.0.0"),
                INVALID_CONFIG,
                "\"..\" components",
            ),
            (
                conf(r#","kind":"vhost-user","ipam":{}"#, "1.0.0"),
                INVALID_CONFIG,
                "ipam.type is missing",
            ),
            (
                conf(r#","kind":"vhost-user","ipam":{"type":"../x"}"#, "1.0.0"),
                INVALID_CONFIG,
                "ipam.type \"../x\" is not a valid name",
            ),
            (
                conf(
                    r#","kind":"vhost-user","runtimeConfig":{"CNIDeviceInfoFile":"x"}"#,
                    "1.0.0",
                ),
                INVALID_CONFIG,
                "runtimeConfig.CNIDeviceInfoFile \"x\" must be an absolute path",
            ),
            (
                r#"{"cniVersion":"1.0.0","name":"a b","type":"t","kind":"tap"}"#.into(),
                INVALID_CONFIG,
                "name \"a b\" is not a valid name",
            ),
            (
                conf(r#","kind":"vhost-user","stateDir":"/tmp/pod-owned""#, "1.0.0"),
                INVALID_CONFIG,
                "stateDir \"/tmp/pod-owned\" is not this node's (state_dir = \"/var/lib/cni/vhu-cni\"",
            ),
            (
                conf(r#","kind":"vhost-user","controlSocket":"/tmp/other.sock""#, "1.0.0"),
                INVALID_CONFIG,
                "remove controlSocket from the network",
            ),
            (
                conf(
                    r#","kind":"vhost-user","runtimeConfig":{"CNIDeviceInfoFile":"/etc/passwd"}"#,
                    "1.0.0",
                ),
                INVALID_CONFIG,
                "is not inside this node's device-info directory",
            ),
            (
                conf(r#","kind":"vhost-user","ipam":{"type":"vhu-cni"}"#, "1.0.0"),
                INVALID_CONFIG,
                "cannot be its own IPAM plugin",
            ),
            (
                conf(r#","kind":"vhost-user","ipam":{"type":"dhcp"}"#, "1.0.0"),
                INVALID_CONFIG,
                "ipam.type \"dhcp\" is not an IPAM plugin this node allows",
            ),
            (
                conf(r#","kind":"tap","macLock":false"#, "1.0.0"),
                INVALID_CONFIG,
                "macLock false applies only",
            ),
        ];
        for (c, code, msg) in cases {
            let e = NetConf::parse(c.as_bytes()).expect_err(c);
            assert_eq!(e.code, *code, "{c}: {e}");
            assert!(e.msg.contains(msg), "{c}: {:?} lacks {msg:?}", e.msg);
        }
    }
}
