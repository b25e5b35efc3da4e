// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Where each interface's vhost-user socket is: KubeVirt's
//! `kubevirt.io/network-info` downward-API file, or `vhu-cni`'s in-pod path
//! convention.
//!
//! The file (`/etc/podinfo/network-info` when the binding is registered with
//! `downwardAPI: device-info`) is
//! `{"interfaces":[{"network","deviceInfo":{...},"mac","mtu"}]}`, filled
//! only once the pod runs: it is polled until it lists every network of
//! this binding. An entry's `deviceInfo` is a device-info 1.1.0 object
//! `{"type":"vhost-user","vhost-user":{"mode","path"}}` whose `mode` is the
//! host side's (the switch's) role, as `vhu-cni` writes it: the VM takes the
//! other one. Without the file, or for a network without `deviceInfo`
//! (Multus gives none to a CNI-only network), the socket is
//! `<socket root>/<pod interface>/sock`, `vhu-cni`'s in-pod contract with
//! the VM as server.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Deserialize;

/// Where the downward API mounts the network-info file.
pub const DEFAULT_NETWORK_INFO: &str = "/etc/podinfo/network-info";

/// Where `vhu-cni`'s sockets are seen inside the pod.
pub const DEFAULT_SOCKET_ROOT: &str = "/var/run/vhu";

/// Where KEP-5304 DRA device metadata is mounted in a container.
pub const DEFAULT_DRA_METADATA_ROOT: &str = "/var/run/kubernetes.io/dra-device-attributes";

/// The DRA driver whose metadata gives a `resourceClaim` network's socket.
pub const DEFAULT_DRA_DRIVER: &str = "vhu.dev";

/// Longest socket path QEMU can bind or connect to (`sun_path` less the NUL).
pub const MAX_SOCKET_PATH: usize = 107;

/// The VM's side of the socket, as libvirt's `<source mode=...>` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VmRole {
    /// QEMU creates the socket; the switch connects (a client-role port).
    Server,
    /// The switch creates the socket; QEMU connects.
    Client,
}

impl VmRole {
    /// The libvirt spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            VmRole::Server => "server",
            VmRole::Client => "client",
        }
    }
}

/// One network's socket and link settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketInfo {
    /// The socket's path as the VM's QEMU sees it.
    pub path: String,
    /// The VM's role.
    pub role: VmRole,
    /// The network's MTU, when network-info gives one.
    pub mtu: Option<u32>,
    /// The MAC network-info gives (used when the VMI sets none).
    pub mac: Option<String>,
    /// The most queue pairs the port has (DRA metadata's `queues`): the
    /// NIC gets no more.
    pub queues: Option<u32>,
}

#[derive(Debug, Deserialize)]
struct NetworkInfo {
    #[serde(default)]
    interfaces: Vec<NetIface>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct NetIface {
    network: String,
    #[serde(default)]
    device_info: Option<serde_json::Value>,
    #[serde(default)]
    mac: Option<String>,
    #[serde(default)]
    mtu: Option<u32>,
}

#[derive(Debug, Deserialize)]
struct DeviceInfo {
    #[serde(rename = "type")]
    kind: String,
    #[serde(rename = "vhost-user")]
    vhost_user: Option<VhostUserInfo>,
}

#[derive(Debug, Deserialize)]
struct VhostUserInfo {
    mode: String,
    path: String,
}

/// How to find sockets.
#[derive(Debug, Clone)]
pub struct Resolver {
    /// The network-info file.
    pub network_info: PathBuf,
    /// How long to wait for it to list every network.
    pub wait: Duration,
    /// The in-pod socket root of the path convention.
    pub socket_root: PathBuf,
    /// Where DRA device metadata is mounted (`resourceClaim` networks).
    pub dra_root: PathBuf,
    /// The DRA driver whose metadata is read.
    pub dra_driver: String,
}

impl Default for Resolver {
    fn default() -> Self {
        Self {
            network_info: DEFAULT_NETWORK_INFO.into(),
            wait: Duration::from_secs(30),
            socket_root: DEFAULT_SOCKET_ROOT.into(),
            dra_root: DEFAULT_DRA_METADATA_ROOT.into(),
            dra_driver: DEFAULT_DRA_DRIVER.into(),
        }
    }
}

/// Checks a socket path from device-info.
pub(crate) fn check_path(network: &str, p: &str) -> Result<(), String> {
    if !p.starts_with('/') {
        return Err(format!(
            "network-info: the vhost-user path {p:?} of network {network:?} is not absolute"
        ));
    }
    if p.len() > MAX_SOCKET_PATH {
        return Err(format!(
            "network-info: the vhost-user path of network {network:?} is {} bytes, above {MAX_SOCKET_PATH}",
            p.len()
        ));
    }
    if p.bytes().any(|b| b.is_ascii_control()) || p.split('/').any(|c| c == "..") {
        return Err(format!(
            "network-info: the vhost-user path {p:?} of network {network:?} has control characters or '..'"
        ));
    }
    Ok(())
}

/// Reads one network's entry.
fn from_entry(e: &NetIface) -> Result<Option<SocketInfo>, String> {
    if let Some(m) = e.mtu {
        if !(68..=65535).contains(&m) {
            return Err(format!(
                "network-info: network {:?} has MTU {m}, outside 68-65535",
                e.network
            ));
        }
    }
    let Some(dev) = e.device_info.as_ref().filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let dev: DeviceInfo = serde_json::from_value(dev.clone()).map_err(|err| {
        format!(
            "network-info: the deviceInfo of network {:?} is not device-info: {err}",
            e.network
        )
    })?;
    if dev.kind != "vhost-user" {
        return Err(format!(
            "network-info: network {:?} has a device of type {:?}, not vhost-user",
            e.network, dev.kind
        ));
    }
    let vu = dev.vhost_user.ok_or_else(|| {
        format!(
            "network-info: the vhost-user device of network {:?} has no \"vhost-user\" object",
            e.network
        )
    })?;
    check_path(&e.network, &vu.path)?;
    // device-info's mode is the host side's role (see docs/cni.md).
    let role = match vu.mode.as_str() {
        "client" => VmRole::Server,
        "server" => VmRole::Client,
        m => {
            return Err(format!(
            "network-info: the vhost-user mode {m:?} of network {:?} is neither client nor server",
            e.network
        ))
        }
    };
    Ok(Some(SocketInfo {
        path: vu.path,
        role,
        mtu: e.mtu,
        mac: e.mac.clone().filter(|m| !m.is_empty()),
        queues: None,
    }))
}

impl Resolver {
    /// The socket of each of `networks` (`(network, pod interface)`), keyed
    /// by network. Blocks up to [`Resolver::wait`] for the network-info
    /// file to list them all.
    pub fn resolve(
        &self,
        networks: &[(String, String)],
    ) -> Result<BTreeMap<String, SocketInfo>, String> {
        let entries = self.wait_for(networks)?;
        let mut out = BTreeMap::new();
        for (net, ifname) in networks {
            let from_file = match entries
                .as_ref()
                .and_then(|es| es.iter().find(|e| &e.network == net))
            {
                Some(e) => {
                    let info = from_entry(e)?;
                    info.map(Ok).unwrap_or_else(|| {
                        self.convention(ifname).map(|mut s| {
                            s.mtu = e.mtu;
                            s.mac = e.mac.clone().filter(|m| !m.is_empty());
                            s
                        })
                    })?
                }
                None => self.convention(ifname)?,
            };
            out.insert(net.clone(), from_file);
        }
        Ok(out)
    }

    fn convention(&self, ifname: &str) -> Result<SocketInfo, String> {
        let path = self.socket_root.join(ifname).join("sock");
        let path = path
            .to_str()
            .ok_or_else(|| "the socket root is not UTF-8".to_owned())?
            .to_owned();
        if path.len() > MAX_SOCKET_PATH {
            return Err(format!(
                "the socket path {path:?} is longer than {MAX_SOCKET_PATH} bytes"
            ));
        }
        Ok(SocketInfo {
            path,
            role: VmRole::Server,
            mtu: None,
            mac: None,
            queues: None,
        })
    }

    /// The file's entries once it lists every network; `None` when there is
    /// no file (no downward API: the path convention applies).
    fn wait_for(&self, networks: &[(String, String)]) -> Result<Option<Vec<NetIface>>, String> {
        let deadline = Instant::now() + self.wait;
        loop {
            let missing: Vec<&str>;
            match read(&self.network_info)? {
                None => return Ok(None),
                Some(Some(info)) => {
                    missing = networks
                        .iter()
                        .map(|(n, _)| n.as_str())
                        .filter(|n| !info.interfaces.iter().any(|e| e.network == *n))
                        .collect();
                    if missing.is_empty() {
                        return Ok(Some(info.interfaces));
                    }
                }
                Some(None) => missing = networks.iter().map(|(n, _)| n.as_str()).collect(),
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "{} does not list network(s) {missing:?} after {:?}: is the binding registered with downwardAPI: device-info, and did the CNI attach them?",
                    self.network_info.display(),
                    self.wait
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// `None`: no file. `Some(None)`: the file is there but empty (not filled
/// yet). Otherwise its content.
fn read(path: &Path) -> Result<Option<Option<NetworkInfo>>, String> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Some(None));
    }
    serde_json::from_slice(&bytes)
        .map(|i| Some(Some(i)))
        .map_err(|e| format!("{} is not network-info JSON: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolver(dir: &Path, content: Option<&str>) -> Resolver {
        let file = dir.join("network-info");
        let _ = std::fs::remove_file(&file);
        if let Some(c) = content {
            std::fs::write(&file, c).unwrap();
        }
        Resolver {
            network_info: file,
            wait: Duration::from_millis(300),
            socket_root: "/var/run/vhu".into(),
            ..Resolver::default()
        }
    }

    /// A scratch directory, removed (with what the test wrote) when the
    /// test ends, passed or not.
    struct Tmp(PathBuf);

    impl std::ops::Deref for Tmp {
        type Target = Path;
        fn deref(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Tmp {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn tmp(tag: &str) -> Tmp {
        let d = std::env::temp_dir().join(format!("vhu-kv-ni-{}-{tag}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        Tmp(d)
    }

    fn nets() -> Vec<(String, String)> {
        vec![("net1".into(), "pod6c270ef2f25".into())]
    }

    #[test]
    fn no_file_means_the_convention() {
        let d = tmp("none");
        let r = resolver(&d, None).resolve(&nets()).unwrap();
        assert_eq!(
            r["net1"],
            SocketInfo {
                path: "/var/run/vhu/pod6c270ef2f25/sock".into(),
                role: VmRole::Server,
                mtu: None,
                mac: None,
                queues: None,
            }
        );
    }

    #[test]
    fn device_info_wins_and_its_mode_is_inverted() {
        let d = tmp("dev");
        let ni = r#"{"interfaces":[{"network":"net1","mtu":9000,"mac":"02:00:00:00:00:01",
            "deviceInfo":{"type":"vhost-user","version":"1.1.0","vhost-user":{"mode":"server","path":"/var/run/vhu/net1/sock"}}}]}"#;
        let r = resolver(&d, Some(ni)).resolve(&nets()).unwrap();
        assert_eq!(r["net1"].path, "/var/run/vhu/net1/sock");
        assert_eq!(r["net1"].role, VmRole::Client);
        assert_eq!(r["net1"].mtu, Some(9000));
    }

    #[test]
    fn an_entry_without_device_info_uses_the_convention() {
        let d = tmp("nodev");
        let ni = r#"{"interfaces":[{"network":"net1","mtu":1400}]}"#;
        let r = resolver(&d, Some(ni)).resolve(&nets()).unwrap();
        assert_eq!(r["net1"].path, "/var/run/vhu/pod6c270ef2f25/sock");
        assert_eq!(r["net1"].mtu, Some(1400));
    }

    #[test]
    fn bad_files_are_errors() {
        let d = tmp("bad");
        for (content, needle) in [
            ("", "does not list"),
            (r#"{"interfaces":[]}"#, "does not list"),
            ("{", "is not network-info JSON"),
            (
                r#"{"interfaces":[{"network":"net1","deviceInfo":{"type":"pci"}}]}"#,
                "not vhost-user",
            ),
            (
                r#"{"interfaces":[{"network":"net1","deviceInfo":{"type":"vhost-user","vhost-user":{"mode":"x","path":"/a"}}}]}"#,
                "neither client nor server",
            ),
            (
                r#"{"interfaces":[{"network":"net1","deviceInfo":{"type":"vhost-user","vhost-user":{"mode":"client","path":"a/b"}}}]}"#,
                "not absolute",
            ),
            (
                r#"{"interfaces":[{"network":"net1","mtu":9,"deviceInfo":null}]}"#,
                "outside 68-65535",
            ),
        ] {
            let e = resolver(&d, Some(content)).resolve(&nets()).unwrap_err();
            assert!(e.contains(needle), "{content}: {e}");
        }
    }
}
