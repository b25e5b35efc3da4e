// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The node configuration: what the node's administrator fixes and a
//! network configuration (a NetworkAttachmentDefinition a namespace user
//! writes) cannot change.
//!
//! A root-owned TOML file, `/etc/vhu/cni.toml` (the DaemonSet installs it;
//! `VHU_CNI_CONFIG` in the runtime's environment names another, for a
//! runtime run by hand or a test). Without the file the embedded defaults
//! below apply. It fixes every host path the plugin touches, the IPAM
//! plugins a network may name, and, per Kubernetes namespace, what a
//! network may ask for: VLANs, trunks, ports without a MAC lock, the
//! socket's owner, group and mode.
//!
//! ```toml
//! control_socket = "/run/vhu/vhu.sock"
//! state_dir = "/var/lib/cni/vhu-cni"
//! host_socket_dir = "/var/lib/kubelet/pods/{podUID}/volumes/kubernetes.io~empty-dir/vhu-sockets"
//! device_dir = "/run/vhu/dp"
//! device_info_dir = "/var/run/k8s.cni.cncf.io/devinfo"
//! ipam = ["host-local", "static"]
//!
//! [default]               # namespaces without a table of their own, and pods without K8S_POD_NAMESPACE
//! vlan = 0                # the access VLAN of a port whose network names none (0: the untagged VLAN)
//! vlans = []              # further VLANs a network may name (access, trunk members, native)
//! trunk = false           # whether a network may make a trunk port
//! unpinned_mac = false    # whether a network may set "macLock": false
//! socket_owners = []      # socketOwner values a network may name
//! socket_groups = []      # socketGroup values a network may name
//! socket_mode = "0600"    # the widest socketMode a network may ask for
//! flood_rate = 10000      # the ports' flood limit, frames/s (the switch's `flood_rate`); absent: the switch's default
//! flood_burst = 1000      # the flood limit's burst, frames
//! mac_limit = 64          # the ports' share of the FDB (the switch's `mac_limit`); absent: the switch's default
//! kata_dan = false        # whether a network may write Kata DAN entries ("kata": "dan")
//!
//! [namespace.tenant-a]    # keys not given here are [default]'s
//! vlan = 10
//! vlans = [11, 12]
//!
//! [kata]                  # Kata runtime-rs's Directly Attachable Network (crate::dan)
//! dan_dir = "/run/kata-containers/dans"   # runtime-rs's dan_conf
//! socket_dir = "/run/vhu/kata"            # vhost-user: <socket_dir>/<sandbox id>/<ifname>.sock
//! socket_owner = "0"      # owner of <socket_dir>/<sandbox id> (the VMM's user); default root
//! socket_group = "0"      # its group; default root
//! socket_dir_mode = "0700" # its mode
//! queue_size = 256        # every DAN device's queue_size
//! ```
//!
//! Every error of the file is reported at once, each with its key.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::CniError;

/// Where the node configuration is, unless `VHU_CNI_CONFIG` says otherwise.
pub const DEFAULT_PATH: &str = "/etc/vhu/cni.toml";
/// The variable naming another node configuration (set in the runtime's
/// environment by the administrator; a network configuration cannot).
pub const PATH_VAR: &str = "VHU_CNI_CONFIG";
/// Default control socket of the switch.
pub const DEFAULT_CONTROL_SOCKET: &str = "/run/vhu/vhu.sock";
/// Default host directory of the pods' sockets: the pod's `emptyDir` volume
/// `vhu-sockets`, found through `K8S_POD_UID`.
pub const DEFAULT_HOST_SOCKET_DIR: &str =
    "/var/lib/kubelet/pods/{podUID}/volumes/kubernetes.io~empty-dir/vhu-sockets";
/// Default directory of the plugin's per-attachment records.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/cni/vhu-cni";
/// Default directory of the device plugin's per-device socket directories
/// (`vhu-device-plugin --host-dir`).
pub const DEFAULT_DEVICE_DIR: &str = "/run/vhu/dp";
/// Default directory of device-info files: Multus's.
pub const DEFAULT_DEVICE_INFO_DIR: &str = "/var/run/k8s.cni.cncf.io/devinfo";
/// IPAM plugins a network may name by default: the reference plugins that
/// allocate without a daemon.
pub const DEFAULT_IPAM: &[&str] = &["host-local", "static"];
/// This plugin's own name: never an IPAM plugin (it would run itself).
pub const SELF_NAME: &str = "vhu-cni";
/// The default widest socket mode: the owner only.
pub const DEFAULT_SOCKET_MODE: u32 = 0o600;
/// Default DAN directory: Kata's `dan_conf` as shipped in every runtime-rs
/// configuration (`DEFDANCONF` in its Makefile).
pub const DEFAULT_DAN_DIR: &str = "/run/kata-containers/dans";
/// Default parent of the vhost-user DAN sockets' per-sandbox directories.
pub const DEFAULT_KATA_SOCKET_DIR: &str = "/run/vhu/kata";
/// Default mode of a sandbox's socket directory: the VMM and the switch
/// both run as root in the shipped deployments.
pub const DEFAULT_KATA_SOCKET_DIR_MODE: u32 = 0o700;
/// Default DAN `queue_size`: Kata's own default for a `0` (runtime-rs 4.0+),
/// written explicitly because older releases passed `0` through.
pub const DEFAULT_KATA_QUEUE_SIZE: u32 = 256;
/// Largest `queue_size` (virtio's split-ring limit).
pub const MAX_KATA_QUEUE_SIZE: u32 = 32768;

/// What a network of one namespace may ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// The access VLAN of a port whose network names none (0: the untagged
    /// VLAN, tagged frames dropped).
    pub vlan: u32,
    /// Further VLANs a network may name.
    pub vlans: BTreeSet<u32>,
    /// Whether a network may make a trunk port.
    pub trunk: bool,
    /// Whether a network may turn the port's MAC lock off.
    pub unpinned_mac: bool,
    /// `socketOwner` values a network may name.
    pub socket_owners: BTreeSet<String>,
    /// `socketGroup` values a network may name.
    pub socket_groups: BTreeSet<String>,
    /// The widest `socketMode` a network may ask for.
    pub socket_mode: u32,
    /// The ports' flood limit (frames per second; `None`: the switch's).
    pub flood_rate: Option<u32>,
    /// The ports' flood burst (`None`: the switch's).
    pub flood_burst: Option<u32>,
    /// The ports' share of the FDB (`None`: the switch's).
    pub mac_limit: Option<u32>,
    /// Whether a network may write Kata DAN entries (`"kata": "dan"`).
    pub kata_dan: bool,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            vlan: 0,
            vlans: BTreeSet::new(),
            trunk: false,
            unpinned_mac: false,
            socket_owners: BTreeSet::new(),
            socket_groups: BTreeSet::new(),
            socket_mode: DEFAULT_SOCKET_MODE,
            flood_rate: None,
            flood_burst: None,
            mac_limit: None,
            kata_dan: false,
        }
    }
}

/// Where and how the plugin writes Kata runtime-rs DAN entries (the
/// `[kata]` table).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kata {
    /// Kata's `dan_conf`: the DAN files are `<dan_dir>/<sandbox id>.json`.
    pub dan_dir: PathBuf,
    /// vhost-user devices' sockets are `<socket_dir>/<sandbox id>/<ifname>.sock`.
    pub socket_dir: PathBuf,
    /// Owner of a sandbox's socket directory (`None`: root).
    pub socket_owner: Option<String>,
    /// Group of a sandbox's socket directory (`None`: root).
    pub socket_group: Option<String>,
    /// Mode of a sandbox's socket directory.
    pub socket_dir_mode: u32,
    /// Every DAN device's `queue_size`.
    pub queue_size: u32,
}

impl Default for Kata {
    fn default() -> Self {
        Self {
            dan_dir: DEFAULT_DAN_DIR.into(),
            socket_dir: DEFAULT_KATA_SOCKET_DIR.into(),
            socket_owner: None,
            socket_group: None,
            socket_dir_mode: DEFAULT_KATA_SOCKET_DIR_MODE,
            queue_size: DEFAULT_KATA_QUEUE_SIZE,
        }
    }
}

impl Policy {
    /// Whether a network may put the port in `vlan`.
    pub fn allows_vlan(&self, vlan: u32) -> bool {
        vlan == self.vlan || self.vlans.contains(&vlan)
    }

    /// The VLANs a network may name, for error messages.
    pub fn allowed_vlans(&self) -> String {
        let mut all: BTreeSet<u32> = self.vlans.clone();
        all.insert(self.vlan);
        all.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The node configuration, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeConfig {
    /// Where it was read from (`None`: the embedded defaults).
    pub source: Option<PathBuf>,
    /// The switch's control socket.
    pub control_socket: PathBuf,
    /// Where the per-attachment records go.
    pub state_dir: PathBuf,
    /// The host directory template of the pods' sockets (`{podUID}`).
    pub host_socket_dir: String,
    /// Where the device plugin makes the devices' socket directories.
    pub device_dir: PathBuf,
    /// The only directory device-info files are written in.
    pub device_info_dir: PathBuf,
    /// The IPAM plugins a network may name.
    pub ipam: BTreeSet<String>,
    /// The policy of namespaces without their own.
    pub default: Policy,
    /// Per-namespace policies.
    pub namespaces: BTreeMap<String, Policy>,
    /// Kata DAN settings.
    pub kata: Kata,
}

impl Default for NodeConfig {
    fn default() -> Self {
        Self {
            source: None,
            control_socket: DEFAULT_CONTROL_SOCKET.into(),
            state_dir: DEFAULT_STATE_DIR.into(),
            host_socket_dir: DEFAULT_HOST_SOCKET_DIR.into(),
            device_dir: DEFAULT_DEVICE_DIR.into(),
            device_info_dir: DEFAULT_DEVICE_INFO_DIR.into(),
            ipam: DEFAULT_IPAM.iter().map(|s| (*s).to_owned()).collect(),
            default: Policy::default(),
            namespaces: BTreeMap::new(),
            kata: Kata::default(),
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    vlan: Option<u32>,
    vlans: Option<Vec<u32>>,
    trunk: Option<bool>,
    unpinned_mac: Option<bool>,
    socket_owners: Option<Vec<String>>,
    socket_groups: Option<Vec<String>>,
    socket_mode: Option<String>,
    flood_rate: Option<u32>,
    flood_burst: Option<u32>,
    mac_limit: Option<u32>,
    kata_dan: Option<bool>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawKata {
    dan_dir: Option<String>,
    socket_dir: Option<String>,
    socket_owner: Option<String>,
    socket_group: Option<String>,
    socket_dir_mode: Option<String>,
    queue_size: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    control_socket: Option<String>,
    state_dir: Option<String>,
    host_socket_dir: Option<String>,
    device_dir: Option<String>,
    device_info_dir: Option<String>,
    ipam: Option<Vec<String>>,
    #[serde(default)]
    default: RawPolicy,
    #[serde(default)]
    namespace: BTreeMap<String, RawPolicy>,
    #[serde(default)]
    kata: RawKata,
}

/// Checks an absolute path without `.`/`..` components or NUL.
pub fn check_abs_path(v: &str) -> Result<(), String> {
    if !v.starts_with('/') {
        return Err(format!("{v:?} must be an absolute path"));
    }
    if v.contains('\0') || v.split('/').any(|c| c == "." || c == "..") {
        return Err(format!(
            "{v:?} must not contain NUL, \".\" or \"..\" components"
        ));
    }
    if v.len() > 3800 || v.split('/').any(|c| c.len() > 255) {
        return Err(format!(
            "is too long ({} bytes; at most 3800, 255 per component)",
            v.len()
        ));
    }
    Ok(())
}

/// A plugin name as the spec allows it.
pub fn check_plugin_name(v: &str) -> Result<(), String> {
    if crate::env::is_spec_name(v, 128) {
        Ok(())
    } else {
        Err(format!(
            "{v:?} is not a valid name (1-128 of A-Z a-z 0-9 _ . -, starting with a letter or digit)"
        ))
    }
}

/// A user or group as `socketOwner` takes it: a name or a numeric id.
fn check_id_name(v: &str) -> Result<(), String> {
    let ok = !v.is_empty()
        && v.len() <= 32
        && v.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'))
        && !v.starts_with('-');
    if ok {
        Ok(())
    } else {
        Err(format!("{v:?} is not a user or group name or id"))
    }
}

fn parse_mode(v: &str) -> Option<u32> {
    vhu_api::port::parse_mode(v).filter(|m| *m <= 0o777)
}

impl NodeConfig {
    /// Reads the node configuration: `VHU_CNI_CONFIG` (through `get`) or
    /// [`DEFAULT_PATH`]; the embedded defaults when that file does not
    /// exist (a named one must).
    ///
    /// # Errors
    /// Code 7 naming the file and every bad key; code 5 when it cannot be
    /// read.
    pub fn load(get: &dyn Fn(&str) -> Option<String>) -> Result<Self, CniError> {
        let (path, named) = match get(PATH_VAR).filter(|p| !p.is_empty()) {
            Some(p) => (PathBuf::from(p), true),
            None => (PathBuf::from(DEFAULT_PATH), false),
        };
        match std::fs::read(&path) {
            Ok(b) => Self::parse(&b, Some(&path)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !named => Ok(Self::default()),
            Err(e) => Err(CniError::io(
                format!("cannot read the node configuration {}", path.display()),
                &e,
            )),
        }
    }

    /// Parses and checks a node configuration read from `source`.
    ///
    /// # Errors
    /// Code 7 naming the file and every bad key.
    pub fn parse(text: &[u8], source: Option<&Path>) -> Result<Self, CniError> {
        let at = source.map_or_else(
            || "the node configuration".to_owned(),
            |p| p.display().to_string(),
        );
        let fail = |msgs: Vec<String>| {
            CniError::config(format!("node configuration {at}: {}", msgs.join("; ")))
        };
        let text = std::str::from_utf8(text).map_err(|_| fail(vec!["not UTF-8".into()]))?;
        let raw: Raw = toml::from_str(text)
            .map_err(|e| fail(vec![e.to_string().lines().collect::<Vec<_>>().join(" ")]))?;
        let mut errs = Vec::new();
        let mut c = NodeConfig {
            source: source.map(Path::to_path_buf),
            ..NodeConfig::default()
        };
        let mut path = |key: &str, v: Option<String>, dst: &mut PathBuf| {
            if let Some(v) = v {
                match check_abs_path(&v) {
                    Ok(()) => *dst = v.into(),
                    Err(m) => errs.push(format!("{key}: {m}")),
                }
            }
        };
        path("control_socket", raw.control_socket, &mut c.control_socket);
        path("state_dir", raw.state_dir, &mut c.state_dir);
        path("device_dir", raw.device_dir, &mut c.device_dir);
        path(
            "device_info_dir",
            raw.device_info_dir,
            &mut c.device_info_dir,
        );
        if let Some(t) = raw.host_socket_dir {
            match check_abs_path(&t) {
                Err(m) => errs.push(format!("host_socket_dir: {m}")),
                Ok(()) if t.matches("{podUID}").count() > 1 => {
                    errs.push("host_socket_dir: {podUID} may appear once".into());
                }
                Ok(()) if t.contains('{') && !t.contains("{podUID}") => {
                    errs.push(format!(
                        "host_socket_dir: {t:?} has a placeholder other than {{podUID}}"
                    ));
                }
                Ok(()) => c.host_socket_dir = t,
            }
        }
        if let Some(list) = raw.ipam {
            c.ipam.clear();
            for (i, name) in list.into_iter().enumerate() {
                if let Err(m) = check_plugin_name(&name) {
                    errs.push(format!("ipam[{i}]: {m}"));
                } else if name == SELF_NAME {
                    errs.push(format!(
                        "ipam[{i}]: {SELF_NAME} cannot be its own IPAM plugin"
                    ));
                } else {
                    c.ipam.insert(name);
                }
            }
        }
        c.kata = kata(&raw.kata, &mut errs);
        c.default = policy("default", &raw.default, &Policy::default(), &mut errs);
        for (ns, p) in &raw.namespace {
            if let Err(m) = check_namespace(ns) {
                errs.push(format!("namespace.{ns}: {m}"));
                continue;
            }
            let pol = policy(&format!("namespace.{ns}"), p, &c.default, &mut errs);
            c.namespaces.insert(ns.clone(), pol);
        }
        if errs.is_empty() {
            Ok(c)
        } else {
            Err(fail(errs))
        }
    }

    /// The policy of pods in `namespace` (`None`: a runtime that does not
    /// say, such as podman).
    pub fn policy(&self, namespace: Option<&str>) -> &Policy {
        namespace
            .and_then(|n| self.namespaces.get(n))
            .unwrap_or(&self.default)
    }

    /// Where this configuration came from, for error messages.
    pub fn name(&self) -> String {
        match &self.source {
            Some(p) => p.display().to_string(),
            None => format!("the embedded defaults ({DEFAULT_PATH} is absent)"),
        }
    }
}

/// A Kubernetes namespace name (an RFC 1123 label).
fn check_namespace(v: &str) -> Result<(), String> {
    let ok = !v.is_empty()
        && v.len() <= 63
        && v.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && !v.starts_with('-')
        && !v.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(format!("{v:?} is not a namespace name (an RFC 1123 label)"))
    }
}

fn kata(raw: &RawKata, errs: &mut Vec<String>) -> Kata {
    let mut k = Kata::default();
    for (key, v, dst) in [
        ("kata.dan_dir", &raw.dan_dir, &mut k.dan_dir),
        ("kata.socket_dir", &raw.socket_dir, &mut k.socket_dir),
    ] {
        if let Some(v) = v {
            match check_abs_path(v) {
                Ok(()) if v == "/" => errs.push(format!("{key}: must not be /")),
                Ok(()) => *dst = v.trim_end_matches('/').into(),
                Err(m) => errs.push(format!("{key}: {m}")),
            }
        }
    }
    // Room for "/<sandbox id of 64>/<ifname of 15>.sock" within sun_path's
    // 108 bytes: the VMM binds the path itself.
    let room = 108 - 1 - (1 + 64 + 1 + 15 + 5);
    if k.socket_dir.as_os_str().len() > room {
        errs.push(format!(
            "kata.socket_dir: {} is longer than {room} bytes: a VMM binds its sockets there, \
             within sun_path's 108",
            k.socket_dir.display()
        ));
    }
    for (key, v, dst) in [
        ("kata.socket_owner", &raw.socket_owner, &mut k.socket_owner),
        ("kata.socket_group", &raw.socket_group, &mut k.socket_group),
    ] {
        if let Some(v) = v {
            match check_id_name(v) {
                Ok(()) => *dst = Some(v.clone()),
                Err(m) => errs.push(format!("{key}: {m}")),
            }
        }
    }
    if let Some(m) = &raw.socket_dir_mode {
        match parse_mode(m) {
            Some(m) => k.socket_dir_mode = m,
            None => errs.push(format!(
                "kata.socket_dir_mode: {m:?} is not an octal mode such as \"0750\""
            )),
        }
    }
    if let Some(q) = raw.queue_size {
        if q.is_power_of_two() && (2..=MAX_KATA_QUEUE_SIZE).contains(&q) {
            k.queue_size = q;
        } else {
            errs.push(format!(
                "kata.queue_size: {q} is not a power of two in 2-{MAX_KATA_QUEUE_SIZE}"
            ));
        }
    }
    k
}

fn policy(at: &str, raw: &RawPolicy, base: &Policy, errs: &mut Vec<String>) -> Policy {
    let mut p = base.clone();
    let vlan_ok = |v: u32| v <= 4094;
    if let Some(v) = raw.vlan {
        if vlan_ok(v) {
            p.vlan = v;
        } else {
            errs.push(format!(
                "{at}.vlan: {v} is out of range 0-4094 (0: the untagged VLAN)"
            ));
        }
    }
    if let Some(list) = &raw.vlans {
        p.vlans.clear();
        for (i, v) in list.iter().enumerate() {
            if (1..=4094).contains(v) {
                p.vlans.insert(*v);
            } else {
                errs.push(format!("{at}.vlans[{i}]: {v} is out of range 1-4094"));
            }
        }
    }
    if let Some(t) = raw.trunk {
        p.trunk = t;
    }
    if let Some(u) = raw.unpinned_mac {
        p.unpinned_mac = u;
    }
    if let Some(d) = raw.kata_dan {
        p.kata_dan = d;
    }
    for (key, list, dst) in [
        ("socket_owners", &raw.socket_owners, &mut p.socket_owners),
        ("socket_groups", &raw.socket_groups, &mut p.socket_groups),
    ] {
        if let Some(list) = list {
            dst.clear();
            for (i, v) in list.iter().enumerate() {
                match check_id_name(v) {
                    Ok(()) => {
                        dst.insert(v.clone());
                    }
                    Err(m) => errs.push(format!("{at}.{key}[{i}]: {m}")),
                }
            }
        }
    }
    for (key, v, max, zero_ok, dst) in [
        (
            "flood_rate",
            raw.flood_rate,
            vhu_api::port::MAX_FLOOD_RATE,
            true,
            &mut p.flood_rate,
        ),
        (
            "flood_burst",
            raw.flood_burst,
            vhu_api::port::MAX_FLOOD_BURST,
            false,
            &mut p.flood_burst,
        ),
        (
            "mac_limit",
            raw.mac_limit,
            vhu_api::port::MAX_MAC_LIMIT,
            false,
            &mut p.mac_limit,
        ),
    ] {
        if let Some(v) = v {
            if v > max || (v == 0 && !zero_ok) {
                let lo = u32::from(!zero_ok);
                errs.push(format!("{at}.{key}: {v} is out of range {lo}-{max}"));
            } else {
                *dst = Some(v);
            }
        }
    }
    if let Some(m) = &raw.socket_mode {
        match parse_mode(m) {
            Some(m) => p.socket_mode = m,
            None => errs.push(format!(
                "{at}.socket_mode: {m:?} is not an octal mode such as \"0660\""
            )),
        }
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::INVALID_CONFIG;

    #[test]
    fn defaults_without_a_file() {
        let missing = "/nonexistent/vhu/cni.toml";
        // The default path absent: the embedded defaults.
        let c = NodeConfig::parse(b"", None).unwrap();
        assert_eq!(c, NodeConfig::default());
        assert_eq!(c.policy(Some("x")), &Policy::default());
        assert_eq!(c.default.vlan, 0);
        assert!(!c.default.trunk && !c.default.unpinned_mac);
        assert_eq!(
            c.ipam.iter().map(String::as_str).collect::<Vec<_>>(),
            ["host-local", "static"]
        );
        // A file named by VHU_CNI_CONFIG must exist.
        let get = |k: &str| (k == PATH_VAR).then(|| missing.to_owned());
        let e = NodeConfig::load(&get).unwrap_err();
        assert!(e.msg.contains(missing), "{e}");
    }

    #[test]
    fn a_full_file() {
        let text = r#"
control_socket = "/run/x/vhu.sock"
state_dir = "/var/lib/x"
host_socket_dir = "/run/x/pods"
device_dir = "/run/x/dp"
device_info_dir = "/run/x/devinfo"
ipam = ["host-local", "whereabouts"]
[default]
vlan = 100
socket_owners = ["107"]
socket_mode = "0660"
flood_rate = 10000
kata_dan = true
[namespace.tenant-a]
vlan = 10
vlans = [11, 12]
trunk = true
mac_limit = 16
[kata]
dan_dir = "/run/kata-containers/dans-rs/"
socket_dir = "/run/x/kata"
socket_owner = "107"
socket_dir_mode = "0750"
queue_size = 1024
"#;
        let c = NodeConfig::parse(text.as_bytes(), Some(Path::new("/etc/vhu/cni.toml"))).unwrap();
        assert_eq!(c.default.flood_rate, Some(10000));
        assert_eq!(c.policy(Some("tenant-a")).flood_rate, Some(10000));
        assert_eq!(c.policy(Some("tenant-a")).mac_limit, Some(16));
        assert_eq!(c.default.mac_limit, None);
        assert_eq!(c.control_socket, PathBuf::from("/run/x/vhu.sock"));
        assert_eq!(c.host_socket_dir, "/run/x/pods");
        assert!(c.ipam.contains("whereabouts") && !c.ipam.contains("static"));
        assert_eq!(c.default.vlan, 100);
        assert_eq!(c.default.socket_mode, 0o660);
        let a = c.policy(Some("tenant-a"));
        assert_eq!((a.vlan, a.trunk), (10, true));
        assert!(a.allows_vlan(10) && a.allows_vlan(12) && !a.allows_vlan(100));
        // Keys a namespace does not give are [default]'s.
        assert!(a.socket_owners.contains("107"));
        assert_eq!(c.policy(Some("other")).vlan, 100);
        assert_eq!(c.policy(None).vlan, 100);
        assert!(c.default.kata_dan && c.policy(Some("tenant-a")).kata_dan);
        assert_eq!(
            c.kata,
            Kata {
                dan_dir: "/run/kata-containers/dans-rs".into(),
                socket_dir: "/run/x/kata".into(),
                socket_owner: Some("107".into()),
                socket_group: None,
                socket_dir_mode: 0o750,
                queue_size: 1024,
            }
        );
        let d = NodeConfig::default();
        assert!(!d.default.kata_dan);
        assert_eq!(d.kata.dan_dir, PathBuf::from("/run/kata-containers/dans"));
        assert_eq!(d.kata.queue_size, 256);
    }

    #[test]
    fn every_error_at_once() {
        let text = r#"
control_socket = "relative"
state_dir = "/a/../b"
host_socket_dir = "/x/{podUID}/{podUID}"
ipam = ["vhu-cni", "../x"]
[default]
vlan = 4095
vlans = [0]
socket_mode = "0999"
socket_owners = ["a b"]
flood_burst = 0
mac_limit = 2000000
[namespace.Bad_Name]
[kata]
dan_dir = "dans"
socket_dir = "/run/a-socket-directory-far-too-long-for-a-vmm-to-bind-a-socket-in"
socket_dir_mode = "9"
queue_size = 100
"#;
        let e =
            NodeConfig::parse(text.as_bytes(), Some(Path::new("/etc/vhu/cni.toml"))).unwrap_err();
        assert_eq!(e.code, INVALID_CONFIG);
        for want in [
            "/etc/vhu/cni.toml",
            "control_socket: \"relative\" must be an absolute path",
            "state_dir: ",
            "host_socket_dir: {podUID} may appear once",
            "ipam[0]: vhu-cni cannot be its own IPAM plugin",
            "ipam[1]: ",
            "default.vlan: 4095 is out of range",
            "default.vlans[0]: 0 is out of range 1-4094",
            "default.socket_mode: ",
            "default.socket_owners[0]: ",
            "default.flood_burst: 0 is out of range 1-",
            "default.mac_limit: 2000000 is out of range 1-",
            "namespace.Bad_Name: ",
            "kata.dan_dir: \"dans\" must be an absolute path",
            "kata.socket_dir: ",
            "kata.socket_dir_mode: ",
            "kata.queue_size: 100 is not a power of two",
        ] {
            assert!(e.msg.contains(want), "{:?} lacks {want:?}", e.msg);
        }
        let e = NodeConfig::parse(b"colour = 1", None).unwrap_err();
        assert!(e.msg.contains("colour"), "{e}");
        let e = NodeConfig::parse(b"[default]\nvlna = 1", None).unwrap_err();
        assert!(e.msg.contains("vlna"), "{e}");
        let e = NodeConfig::parse(b"[kata]\ndan_conf = \"/x\"", None).unwrap_err();
        assert!(e.msg.contains("dan_conf"), "{e}");
    }
}
