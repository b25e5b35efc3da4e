// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The CNI plugin's node configuration parser ([`NodeConfig::parse`]) on
//! arbitrary bytes: the file the node's administrator writes, but also
//! the one place every host path and tenant policy comes from.
//!
//! Checks: nothing panics; an error is code 7 and names the file; a
//! configuration that parses has absolute, clean paths, VLANs in range,
//! never `vhu-cni` as an IPAM plugin, modes within `0777`, and every
//! namespace's policy found by its name (others get `[default]`).

use std::path::{Component, Path};

use vhu_cni::error::INVALID_CONFIG;
use vhu_cni::node::{NodeConfig, Policy, SELF_NAME};

/// What one input did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Parsed: its namespace tables.
    Parsed(usize),
    /// Refused with this code.
    Refused(u32),
}

/// Runs the checks (always true).
pub fn run(data: &[u8]) -> bool {
    outcome(data);
    true
}

fn clean(p: &Path) -> bool {
    p.is_absolute()
        && p.components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
}

fn check_policy(p: &Policy) {
    assert!(p.vlan <= 4094, "{p:?}");
    assert!(p.vlans.iter().all(|v| (1..=4094).contains(v)), "{p:?}");
    assert!(p.socket_mode <= 0o777, "{p:?}");
    assert!(p.allows_vlan(p.vlan));
}

/// Runs the checks and says what happened.
pub fn outcome(data: &[u8]) -> Outcome {
    let at = Path::new("/etc/vhu/cni.toml");
    match NodeConfig::parse(data, Some(at)) {
        Err(e) => {
            assert_eq!(e.code, INVALID_CONFIG, "{e:?}");
            assert!(e.msg.contains("/etc/vhu/cni.toml"), "{e:?}");
            Outcome::Refused(e.code)
        }
        Ok(c) => {
            for p in [
                &c.control_socket,
                &c.state_dir,
                &c.device_dir,
                &c.device_info_dir,
            ] {
                assert!(clean(p), "{p:?}");
            }
            assert!(c.host_socket_dir.starts_with('/'));
            assert!(c.host_socket_dir.matches("{podUID}").count() <= 1);
            assert!(!c.ipam.contains(SELF_NAME));
            check_policy(&c.default);
            for (n, p) in &c.namespaces {
                check_policy(p);
                assert_eq!(c.policy(Some(n)), p);
            }
            assert_eq!(c.policy(None), &c.default);
            Outcome::Parsed(c.namespaces.len())
        }
    }
}

/// The committed seeds: the documented example, the shipped one's shape,
/// an empty file, and refusals.
pub fn seeds() -> Vec<(String, Vec<u8>, Outcome)> {
    let full = r#"control_socket = "/run/vhu/vhu.sock"
state_dir = "/var/lib/cni/vhu-cni"
host_socket_dir = "/var/lib/kubelet/pods/{podUID}/volumes/kubernetes.io~empty-dir/vhu-sockets"
device_dir = "/run/vhu/dp"
device_info_dir = "/var/run/k8s.cni.cncf.io/devinfo"
ipam = ["host-local", "static"]

[default]
vlan = 0
vlans = []
trunk = false
unpinned_mac = false
socket_owners = ["107"]
socket_groups = ["107"]
socket_mode = "0660"

[namespace.tenant-a]
vlan = 10
vlans = [11, 12]
trunk = true
"#;
    vec![
        ("full".into(), full.as_bytes().to_vec(), Outcome::Parsed(1)),
        ("empty".into(), Vec::new(), Outcome::Parsed(0)),
        (
            "self-ipam".into(),
            b"ipam = [\"vhu-cni\"]".to_vec(),
            Outcome::Refused(INVALID_CONFIG),
        ),
        (
            "relative".into(),
            b"state_dir = \"tmp\"\n[default]\nvlan = 5000".to_vec(),
            Outcome::Refused(INVALID_CONFIG),
        ),
    ]
}
