// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Kata Containers runtime-rs's Directly Attachable Network (DAN): the
//! file `<dan_dir>/<sandbox id>.json` that lists a sandbox's network
//! devices, and this plugin's entries in it.
//!
//! When the file exists, runtime-rs attaches exactly its devices to the VM
//! and does not scan the pod's network namespace; it reads the file once,
//! when the sandbox is created (after CNI ADD), and never deletes it. The
//! sandbox id is `CNI_CONTAINERID`. The types below are Kata's (its
//! `crates/resource/src/network/dan.rs`, schema-identical from 3.3 to 4.1):
//! the same field names, the `type` tag, the same serde defaults.
//!
//! Several networks of one sandbox share the file: each ADD adds its device
//! and each DEL removes its own (found by its name and its device: the
//! TAP's name or the socket's path), and the file goes with the last one.
//! Entries of other writers are kept as they are. Every change is a
//! read-modify-write under an exclusive `flock` of
//! `<state_dir>/kata/<sandbox id>.lock`, and the file is written as a new
//! file renamed over the old one in the node's DAN directory (opened as
//! the administrator's path; the file's name is opened without following a
//! link), so Kata reads either the old or the new file, whole.

use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{self as rfs, AtFlags, FlockOperation, Mode, OFlags};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::attach;
use crate::beneath;
use crate::error::{CniError, COLLISION};
use crate::link::Route as CniRoute;
use crate::node::Kata;

/// Mode of a DAN file: Kata's shim reads it; it holds nothing secret.
const DAN_FILE_MODE: u32 = 0o644;
/// Largest DAN file read back.
const MAX_DAN_FILE: usize = 1 << 20;
/// The state directory's subdirectory of the per-sandbox lock files.
const LOCK_DIR: &str = "kata";
/// Longest sandbox id that gets a DAN file (`<id>.json` and `<id>.lock`
/// within a file name's 255 bytes).
pub const MAX_SANDBOX_ID: usize = 250;
/// Kata's default MTU for an interface without one.
pub const DEFAULT_MTU: u64 = 1500;

// ===== Kata's schema =====

/// The DAN file: the sandbox's devices.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DanConfig {
    /// The network namespace Kata enters to attach and detach (`null`: the
    /// shim's own, the host's; where a `host-tap` is looked up).
    pub netns: Option<String>,
    /// The devices, in the guest's order.
    pub devices: Vec<DanDevice>,
}

/// One device.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DanDevice {
    /// The interface's name in the guest.
    pub name: String,
    /// The guest interface's MAC (Kata's default: a random private one; this
    /// plugin always writes it).
    #[serde(default)]
    pub guest_mac: String,
    /// The host side.
    pub device: Device,
    /// Addresses, routes, neighbours.
    pub network_info: NetworkInfo,
}

/// The host side of a device, tagged by `type`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum Device {
    /// vhost-user-net: the VMM listens on `path` (which must not exist
    /// before), the backend connects.
    #[serde(rename = "vhost-user")]
    VhostUser {
        /// The socket.
        path: String,
        /// Queue pairs (`0`: Kata's `network_queues`, 4.0+ only).
        #[serde(default)]
        queue_num: usize,
        /// Descriptors per queue (`0`: 256, 4.0+ only).
        #[serde(default)]
        queue_size: usize,
    },
    /// A TAP in the shim's (the host's) namespace, opened by name by the VMM.
    #[serde(rename = "host-tap")]
    HostTap {
        /// The TAP's name.
        tap_name: String,
        /// Queue pairs: the TAP must be multiqueue iff this is above 1.
        #[serde(default)]
        queue_num: usize,
        /// Descriptors per queue.
        #[serde(default)]
        queue_size: usize,
    },
}

/// What the guest's interface gets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NetworkInfo {
    /// The interface.
    pub interface: Interface,
    /// Routes through it.
    #[serde(default)]
    pub routes: Vec<Route>,
    /// Static neighbours.
    #[serde(default)]
    pub neighbors: Vec<ArpNeighbor>,
}

/// The guest interface.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Interface {
    /// Addresses, CIDR (`10.0.0.2/24`).
    pub ip_addresses: Vec<String>,
    /// MTU.
    #[serde(default = "default_mtu")]
    pub mtu: u64,
    /// Passed to the agent as the interface's type.
    #[serde(default)]
    pub ntype: String,
    /// Link flags (only `IFF_NOARP` is used).
    #[serde(default)]
    pub flags: u32,
}

fn default_mtu() -> u64 {
    DEFAULT_MTU
}

/// A route.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    /// Destination, CIDR (`""`: none).
    #[serde(default)]
    pub dest: String,
    /// Gateway (`""`: none, a device route).
    #[serde(default)]
    pub gateway: String,
    /// Preferred source.
    #[serde(default)]
    pub source: String,
    /// Scope.
    #[serde(default)]
    pub scope: u32,
    /// Flags.
    #[serde(default)]
    pub flags: u32,
    /// MTU.
    #[serde(default)]
    pub mtu: u32,
}

/// A static neighbour.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArpNeighbor {
    /// Its address, CIDR.
    pub ip_address: Option<String>,
    /// Its MAC.
    #[serde(default)]
    pub hardware_addr: String,
    /// NUD state.
    #[serde(default)]
    pub state: u32,
    /// Flags.
    #[serde(default)]
    pub flags: u32,
}

// ===== This plugin's entries =====

/// The DAN entry of one attachment: `name` = `CNI_IFNAME`, the MAC the
/// result carries, the IPAM plugin's addresses and routes (a route without
/// a gateway is a device route), queue numbers never 0.
pub fn entry(
    ifname: &str,
    mac: &str,
    device: Device,
    mtu: Option<u32>,
    addrs: &[String],
    routes: &[CniRoute],
) -> DanDevice {
    let ntype = match device {
        Device::HostTap { .. } => "tuntap",
        Device::VhostUser { .. } => "",
    };
    DanDevice {
        name: ifname.to_owned(),
        guest_mac: mac.to_owned(),
        device,
        network_info: NetworkInfo {
            interface: Interface {
                ip_addresses: addrs.to_vec(),
                mtu: mtu.map_or(DEFAULT_MTU, u64::from),
                ntype: ntype.to_owned(),
                flags: 0,
            },
            routes: routes
                .iter()
                .map(|r| Route {
                    dest: r.dst.clone(),
                    gateway: r.gw.clone().unwrap_or_default(),
                    source: String::new(),
                    scope: 0,
                    flags: 0,
                    mtu: 0,
                })
                .collect(),
            neighbors: Vec::new(),
        },
    }
}

/// The device of an attachment: a host TAP named `tap_name`, or the
/// vhost-user socket `path`; `queues` pairs (at least 1), `queue_size`
/// descriptors.
pub fn device(tap_name: Option<&str>, path: &Path, queues: u32, queue_size: u32) -> Device {
    let queue_num = queues.max(1) as usize;
    let queue_size = queue_size.max(1) as usize;
    match tap_name {
        Some(t) => Device::HostTap {
            tap_name: t.to_owned(),
            queue_num,
            queue_size,
        },
        None => Device::VhostUser {
            path: path.display().to_string(),
            queue_num,
            queue_size,
        },
    }
}

/// Whether `v` (an entry of the file, any writer's) is the entry `ours`:
/// the same name and the same device (kind and TAP name or socket path).
fn is_ours(v: &Value, ours: &DanDevice) -> bool {
    let name = v.get("name").and_then(Value::as_str);
    let dev = v.get("device");
    let field = |k: &str| dev.and_then(|d| d.get(k)).and_then(Value::as_str);
    name == Some(ours.name.as_str())
        && match &ours.device {
            Device::VhostUser { path, .. } => {
                field("type") == Some("vhost-user") && field("path") == Some(path)
            }
            Device::HostTap { tap_name, .. } => {
                field("type") == Some("host-tap") && field("tap_name") == Some(tap_name)
            }
        }
}

/// The DAN file of a sandbox.
pub fn file_path(kata: &Kata, sandbox: &str) -> PathBuf {
    kata.dan_dir.join(format!("{sandbox}.json"))
}

/// Checks that a sandbox id can name a DAN file, a lock file and a socket
/// directory.
///
/// # Errors
/// Code 4 when it is too long.
pub fn check_sandbox_id(sandbox: &str) -> Result<(), CniError> {
    if sandbox.len() > MAX_SANDBOX_ID {
        return Err(CniError::env(format!(
            "CNI_CONTAINERID is {} bytes; a Kata DAN file's sandbox id may have at most \
             {MAX_SANDBOX_ID}",
            sandbox.len()
        )));
    }
    Ok(())
}

// ===== The sandbox's lock =====

fn io(e: rustix::io::Errno) -> std::io::Error {
    std::io::Error::from_raw_os_error(e.raw_os_error())
}

/// An exclusive lock on one sandbox's DAN file, held until dropped.
#[derive(Debug)]
pub struct SandboxLock {
    dir: OwnedFd,
    name: String,
    fd: OwnedFd,
}

impl SandboxLock {
    /// Takes the lock of `sandbox`: `flock` of `<state_dir>/kata/<sandbox
    /// id>.lock`, waiting for another ADD or DEL of the sandbox. A lock
    /// file removed by its holder meanwhile is opened again.
    ///
    /// # Errors
    /// Code 5.
    pub fn take(state_dir: &Path, sandbox: &str) -> Result<Self, CniError> {
        let at = || state_dir.join(LOCK_DIR).join(format!("{sandbox}.lock"));
        let fail = |e: std::io::Error| CniError::io(at().display(), &e);
        let dir = attach::state_subdir(state_dir, LOCK_DIR, true).map_err(fail)?;
        let name = format!("{sandbox}.lock");
        loop {
            let fd = rfs::openat(
                &dir,
                name.as_str(),
                OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            )
            .map_err(|e| fail(io(e)))?;
            rfs::flock(&fd, FlockOperation::LockExclusive).map_err(|e| fail(io(e)))?;
            // Still the file of that name (not one a DEL removed while this
            // waited)?
            let held = rfs::fstat(&fd).map_err(|e| fail(io(e)))?;
            match rfs::statat(&dir, name.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
                Ok(now) if now.st_ino == held.st_ino && now.st_dev == held.st_dev => {
                    return Ok(Self { dir, name, fd });
                }
                Ok(_) | Err(rustix::io::Errno::NOENT) => continue,
                Err(e) => return Err(fail(io(e))),
            }
        }
    }

    /// Releases the lock and removes its file (the sandbox has no DAN file
    /// any more).
    pub fn release_and_remove(self) {
        let _ = rfs::unlinkat(&self.dir, self.name.as_str(), AtFlags::empty());
        drop(self.fd);
    }
}

// ===== The file =====

/// Opens the DAN directory (the administrator's path), creating it.
fn open_dan_dir(kata: &Kata, create: bool) -> std::io::Result<OwnedFd> {
    if create {
        std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o755)
            .create(&kata.dan_dir)?;
    }
    beneath::open_trusted_dir(&kata.dan_dir)
}

/// Reads the sandbox's file: `None` when there is none.
fn read(dir: impl AsFd, name: &OsStr) -> std::io::Result<Option<Value>> {
    match beneath::read_file(dir, name, MAX_DAN_FILE) {
        Ok(b) => serde_json::from_slice(&b).map(Some).map_err(|e| {
            std::io::Error::new(std::io::ErrorKind::InvalidData, format!("not JSON: {e}"))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// The `devices` array of a file's content, which must be a DAN object.
fn devices_of(v: &mut Value) -> std::io::Result<&mut Vec<Value>> {
    v.get_mut("devices")
        .and_then(Value::as_array_mut)
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "not a DAN configuration (an object with a \"devices\" array)",
            )
        })
}

/// Adds `dev` to the sandbox's DAN file (creating it, `"netns": null`),
/// under the sandbox's lock held by the caller.
///
/// # Errors
/// Code 101 when the file has a device of that name already; code 5 when
/// the file cannot be read, is not a DAN configuration, or cannot be
/// written.
pub fn add_device(
    kata: &Kata,
    sandbox: &str,
    dev: &DanDevice,
    _lock: &SandboxLock,
) -> Result<(), CniError> {
    let path = file_path(kata, sandbox);
    let fail = |e: std::io::Error| CniError::io(format!("DAN file {}", path.display()), &e);
    let dir = open_dan_dir(kata, true).map_err(fail)?;
    let name = format!("{sandbox}.json");
    let mut v = read(&dir, OsStr::new(&name))
        .map_err(fail)?
        .unwrap_or_else(|| serde_json::json!({"netns": null, "devices": []}));
    let devices = devices_of(&mut v).map_err(fail)?;
    if let Some(other) = devices
        .iter()
        .find(|d| d.get("name").and_then(Value::as_str) == Some(dev.name.as_str()))
    {
        return Err(CniError::new(
            COLLISION,
            format!(
                "the DAN file {} has a device named {} already ({}): another network of this \
                 sandbox uses interface {}, or a DEL was missed",
                path.display(),
                dev.name,
                other.get("device").cloned().unwrap_or_default(),
                dev.name
            ),
        ));
    }
    devices.push(serde_json::to_value(dev).unwrap_or_default());
    let body = serde_json::to_vec_pretty(&v).unwrap_or_default();
    beneath::write_file(&dir, OsStr::new(&name), &body, DAN_FILE_MODE).map_err(fail)
}

/// Removes `dev` (this attachment's entry: its name and device) from the
/// sandbox's DAN file, and the file when no device is left, under the
/// sandbox's lock held by the caller. Returns whether the file is gone
/// (or was never there). A file that is not a DAN configuration is left
/// alone.
///
/// # Errors
/// Code 5 when the directory or the file cannot be read or written.
pub fn remove_device(
    kata: &Kata,
    sandbox: &str,
    dev: &DanDevice,
    _lock: &SandboxLock,
) -> Result<bool, CniError> {
    let path = file_path(kata, sandbox);
    let fail = |e: std::io::Error| CniError::io(format!("DAN file {}", path.display()), &e);
    let dir = match open_dan_dir(kata, false) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(true),
        Err(e) => return Err(fail(e)),
    };
    let name = format!("{sandbox}.json");
    let Some(mut v) = read(&dir, OsStr::new(&name)).ok().flatten() else {
        return Ok(!beneath::exists(&dir, OsStr::new(&name)).map_err(fail)?);
    };
    let Ok(devices) = devices_of(&mut v) else {
        return Ok(false);
    };
    let before = devices.len();
    devices.retain(|d| !is_ours(d, dev));
    if devices.is_empty() {
        beneath::remove_file(&dir, OsStr::new(&name)).map_err(fail)?;
        return Ok(true);
    }
    if devices.len() != before {
        let body = serde_json::to_vec_pretty(&v).unwrap_or_default();
        beneath::write_file(&dir, OsStr::new(&name), &body, DAN_FILE_MODE).map_err(fail)?;
    }
    Ok(false)
}

/// Whether the sandbox's DAN file has `dev` (for CHECK).
pub fn has_device(kata: &Kata, sandbox: &str, dev: &DanDevice) -> bool {
    let Ok(dir) = open_dan_dir(kata, false) else {
        return false;
    };
    let name = format!("{sandbox}.json");
    let Ok(Some(mut v)) = read(&dir, OsStr::new(&name)) else {
        return false;
    };
    devices_of(&mut v).is_ok_and(|d| d.iter().any(|e| is_ours(e, dev)))
}

// ===== vhost-user sockets =====

/// The socket of a vhost-user device: `<socket_dir>/<sandbox id>/<ifname>.sock`.
pub fn socket_path(kata: &Kata, sandbox: &str, ifname: &str) -> PathBuf {
    kata.socket_dir.join(sandbox).join(format!("{ifname}.sock"))
}

/// Prepares the sandbox's socket directory for the VMM, which creates the
/// socket: `<socket_dir>` (`0755`) and `<socket_dir>/<sandbox id>` with the
/// node's owner, group and mode, set through its fd (never through a link).
/// The socket itself must not exist (Kata refuses a path that does).
///
/// # Errors
/// Code 101 when something is at the socket's path; code 5 otherwise.
pub fn prepare_socket_dir(
    kata: &Kata,
    sandbox: &str,
    ifname: &str,
    uid: Option<u32>,
    gid: Option<u32>,
) -> Result<(), CniError> {
    let sock = socket_path(kata, sandbox, ifname);
    let fail =
        |e: std::io::Error| CniError::io(format!("the socket directory of {}", sock.display()), &e);
    std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o755)
        .create(&kata.socket_dir)
        .map_err(fail)?;
    let root = beneath::open_trusted_dir(&kata.socket_dir).map_err(fail)?;
    let d = beneath::ensure_dir_owned(&root, OsStr::new(sandbox), uid, gid, kata.socket_dir_mode)
        .map_err(fail)?;
    let file = format!("{ifname}.sock");
    if beneath::exists(&d, OsStr::new(&file)).map_err(fail)? {
        return Err(CniError::new(
            COLLISION,
            format!(
                "{} exists already: the VMM must create it (a DEL was missed?)",
                sock.display()
            ),
        ));
    }
    Ok(())
}

/// Removes the device's socket (what the VMM left) and, once the sandbox
/// has no DAN file (no other device), its socket directory if empty; never
/// through a link. The caller holds the sandbox's lock.
pub fn remove_socket(kata: &Kata, sandbox: &str, ifname: &str) {
    let Ok(root) = beneath::open_trusted_dir(&kata.socket_dir) else {
        return;
    };
    if let Ok(d) = beneath::open_dir_at(&root, OsStr::new(sandbox)) {
        let _ = beneath::remove_file(&d, OsStr::new(&format!("{ifname}.sock")));
    }
    if std::fs::symlink_metadata(file_path(kata, sandbox)).is_err() {
        let _ = beneath::remove_empty_dir(&root, OsStr::new(sandbox));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn kata(tag: &str) -> (Kata, PathBuf) {
        let d = std::env::temp_dir().join(format!("vhu-dan-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        (
            Kata {
                dan_dir: d.join("dans"),
                socket_dir: d.join("s"),
                ..Kata::default()
            },
            d,
        )
    }

    fn tap_entry(ifname: &str, tap: &str) -> DanDevice {
        entry(
            ifname,
            "02:00:00:00:00:01",
            device(Some(tap), Path::new(""), 2, 256),
            None,
            &["10.0.0.2/24".into()],
            &[CniRoute {
                dst: "0.0.0.0/0".into(),
                gw: Some("10.0.0.1".into()),
            }],
        )
    }

    #[test]
    fn the_schema_is_katas() {
        let e = tap_entry("eth0", "vhuk0123");
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(
            v,
            json!({"name": "eth0", "guest_mac": "02:00:00:00:00:01",
                "device": {"type": "host-tap", "tap_name": "vhuk0123", "queue_num": 2, "queue_size": 256},
                "network_info": {
                    "interface": {"ip_addresses": ["10.0.0.2/24"], "mtu": 1500, "ntype": "tuntap", "flags": 0},
                    "routes": [{"dest": "0.0.0.0/0", "gateway": "10.0.0.1", "source": "", "scope": 0,
                                "flags": 0, "mtu": 0}],
                    "neighbors": []}})
        );
        // Kata's own test file (dan.rs test_dan_json), defaults and all.
        let kata: DanConfig = serde_json::from_value(json!({"netns": "/tmp/netns",
            "devices": [{"name": "eth0", "guest_mac": "xx:xx:xx:xx:xx",
                "device": {"type": "vhost-user", "path": "/tmp/test", "queue_num": 1, "queue_size": 1},
                "network_info": {"interface": {"ip_addresses": ["192.168.0.1/24"], "mtu": 1500,
                    "ntype": "tuntap", "flags": 0},
                  "routes": [{"dest": "172.18.0.0/16", "source": "172.18.0.1", "gateway": "172.18.31.1",
                    "scope": 0, "flags": 0}],
                  "neighbors": [{"ip_address": "192.168.0.3/16", "device": "", "state": 0, "flags": 0,
                    "hardware_addr": "xx:xx:xx:xx:xx"}]}}]}))
        .unwrap();
        assert_eq!(
            kata.devices[0].device,
            Device::VhostUser {
                path: "/tmp/test".into(),
                queue_num: 1,
                queue_size: 1
            }
        );
        let d: Device =
            serde_json::from_value(json!({"type": "host-tap", "tap_name": "t"})).unwrap();
        assert_eq!(
            d,
            Device::HostTap {
                tap_name: "t".into(),
                queue_num: 0,
                queue_size: 0
            }
        );
        let i: Interface = serde_json::from_value(json!({"ip_addresses": []})).unwrap();
        assert_eq!((i.mtu, i.ntype.as_str(), i.flags), (1500, "", 0));
        // Queues are never 0.
        assert_eq!(
            device(None, Path::new("/s"), 0, 0),
            Device::VhostUser {
                path: "/s".into(),
                queue_num: 1,
                queue_size: 1
            }
        );
    }

    #[test]
    fn entries_merge_and_go() {
        let (k, d) = kata("merge");
        let state = d.join("state");
        let sid = "abc123";
        let a = tap_entry("eth0", "vhukaaaa");
        let b = tap_entry("net1", "vhukbbbb");
        let lock = SandboxLock::take(&state, sid).unwrap();
        add_device(&k, sid, &a, &lock).unwrap();
        add_device(&k, sid, &b, &lock).unwrap();
        // The same name again: a collision, the file unchanged.
        let e = add_device(&k, sid, &tap_entry("net1", "vhukcccc"), &lock).unwrap_err();
        assert_eq!(e.code, COLLISION);
        let f = file_path(&k, sid);
        let c: DanConfig = serde_json::from_slice(&std::fs::read(&f).unwrap()).unwrap();
        assert_eq!(c.netns, None);
        assert_eq!(c.devices, [a.clone(), b.clone()]);
        // Another writer's entry stays, whatever its shape.
        let mut v: Value = serde_json::from_slice(&std::fs::read(&f).unwrap()).unwrap();
        v["devices"].as_array_mut().unwrap().push(
            json!({"name": "net9", "device": {"type": "vfio", "pci_device_id": "0000:01:00.0"}}),
        );
        std::fs::write(&f, serde_json::to_vec(&v).unwrap()).unwrap();
        // An entry of that name with another device is not ours.
        assert!(!remove_device(&k, sid, &tap_entry("eth0", "vhukzzzz"), &lock).unwrap());
        assert!(!remove_device(&k, sid, &a, &lock).unwrap());
        assert!(!remove_device(&k, sid, &b, &lock).unwrap());
        let v: Value = serde_json::from_slice(&std::fs::read(&f).unwrap()).unwrap();
        assert_eq!(v["devices"].as_array().unwrap().len(), 1);
        assert_eq!(v["devices"][0]["name"], "net9");
        // Ours only: the file goes with the last entry.
        std::fs::write(&f, br#"{"netns":null,"devices":[]}"#).unwrap();
        add_device(&k, sid, &a, &lock).unwrap();
        assert!(remove_device(&k, sid, &a, &lock).unwrap());
        assert!(!f.exists());
        // A second DEL: nothing there, fine.
        assert!(remove_device(&k, sid, &a, &lock).unwrap());
        // A file that is not DAN is refused by ADD and left by DEL.
        std::fs::write(&f, b"[1]").unwrap();
        assert!(add_device(&k, sid, &a, &lock).is_err());
        assert!(!remove_device(&k, sid, &a, &lock).unwrap());
        assert_eq!(std::fs::read(&f).unwrap(), b"[1]");
        // A link in the file's place is replaced, not written through.
        std::fs::remove_file(&f).unwrap();
        std::fs::write(d.join("victim"), b"keep").unwrap();
        std::os::unix::fs::symlink(d.join("victim"), &f).unwrap();
        assert!(
            add_device(&k, sid, &a, &lock).is_err(),
            "a link is not read"
        );
        assert_eq!(std::fs::read(d.join("victim")).unwrap(), b"keep");
        lock.release_and_remove();
        assert!(!state.join("kata").join("abc123.lock").exists());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn concurrent_adds_are_serialised() {
        let (k, d) = kata("conc");
        let state = d.join("state");
        let sid = "sb1";
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let (k, state) = (k.clone(), state.clone());
                std::thread::spawn(move || {
                    let e = tap_entry(&format!("net{i}"), &format!("vhuk{i}"));
                    let lock = SandboxLock::take(&state, sid).unwrap();
                    add_device(&k, sid, &e, &lock).unwrap();
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let c: DanConfig =
            serde_json::from_slice(&std::fs::read(file_path(&k, sid)).unwrap()).unwrap();
        let mut names: Vec<_> = c.devices.iter().map(|d| d.name.clone()).collect();
        names.sort();
        assert_eq!(names, (0..8).map(|i| format!("net{i}")).collect::<Vec<_>>());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn socket_directories() {
        let (k, d) = kata("sock");
        prepare_socket_dir(&k, "sb", "eth0", None, None).unwrap();
        prepare_socket_dir(&k, "sb", "net1", None, None).unwrap();
        let sd = d.join("s/sb");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&sd).unwrap().permissions().mode() & 0o777,
            0o700
        );
        assert_eq!(socket_path(&k, "sb", "eth0"), sd.join("eth0.sock"));
        std::fs::write(sd.join("eth0.sock"), b"").unwrap();
        let e = prepare_socket_dir(&k, "sb", "eth0", None, None).unwrap_err();
        assert_eq!(e.code, COLLISION);
        // The sandbox has a DAN file still (another device): the directory
        // stays.
        std::fs::create_dir_all(&k.dan_dir).unwrap();
        std::fs::write(file_path(&k, "sb"), b"{}").unwrap();
        remove_socket(&k, "sb", "eth0");
        assert!(sd.exists() && !sd.join("eth0.sock").exists());
        // The last device: the directory goes.
        std::fs::remove_file(file_path(&k, "sb")).unwrap();
        remove_socket(&k, "sb", "net1");
        assert!(!sd.exists());
        // A link in the sandbox directory's place is not followed.
        std::fs::create_dir_all(d.join("victim")).unwrap();
        std::os::unix::fs::symlink(d.join("victim"), &sd).unwrap();
        assert!(prepare_socket_dir(&k, "sb", "eth0", None, None).is_err());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
