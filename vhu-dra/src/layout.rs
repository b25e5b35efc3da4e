// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Where everything of a prepared claim lives, on the host and in the pod:
//! derived from the driver's configuration and the claim's checked names
//! only, never read back from a file.
//!
//! | what | host | container |
//! |---|---|---|
//! | socket directory | `<socket-root>/<claim uid>/<request>/` | `<container-root>/<pod claim name>/<request>/` |
//! | socket | `.../sock` | `.../sock` |
//! | device metadata | `<metadata-root>/<claim uid>/<request>/<driver>-metadata.json` | `/var/run/kubernetes.io/dra-device-attributes/{resourceclaims,resourceclaimtemplates}/<pod claim name>/<request>/<driver>-metadata.json` |
//! | CDI spec | `<cdi-dir>/<driver>-claim_<claim uid>.json` | |
//! | checkpoint | `<state-dir>/<claim uid>.json` | |
//!
//! The in-pod paths depend on the pod's name for the claim and the
//! request's name only, not on the claim's UID: a migration target pod
//! (its claim made anew from the same template) sees the same paths.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The socket's file name in its directory.
pub const SOCKET: &str = "sock";
/// Where KEP-5304 device metadata is mounted in a container.
pub const METADATA_CONTAINER_ROOT: &str = "/var/run/kubernetes.io/dra-device-attributes";
/// The subdirectory of metadata of claims made from templates.
pub const TEMPLATE_CLAIMS: &str = "resourceclaimtemplates";
/// The subdirectory of metadata of claims named by the pod.
pub const DIRECT_CLAIMS: &str = "resourceclaims";
/// Longest socket path QEMU and DPDK can bind or connect to (`sun_path`,
/// NUL excluded).
pub const MAX_SOCKET_PATH: usize = 107;

/// The directories the driver writes in (the administrator's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The driver's name.
    pub driver: String,
    /// The per-claim socket directories' root.
    pub socket_root: PathBuf,
    /// Where socket directories appear in the container.
    pub container_root: String,
    /// The device metadata files' root.
    pub metadata_root: PathBuf,
    /// The CDI spec directory (`/var/run/cdi`).
    pub cdi_dir: PathBuf,
    /// The checkpoints' directory.
    pub state_dir: PathBuf,
}

impl Layout {
    /// The claim's socket directories' parent on the host.
    pub fn claim_socket_dir(&self, uid: &str) -> PathBuf {
        self.socket_root.join(uid)
    }

    /// The request's socket on the host.
    pub fn host_socket(&self, uid: &str, request: &str) -> PathBuf {
        self.claim_socket_dir(uid).join(request).join(SOCKET)
    }

    /// The request's socket directory in the container.
    pub fn container_dir(&self, pod_claim: &str, request: &str) -> String {
        format!(
            "{}/{pod_claim}/{request}",
            self.container_root.trim_end_matches('/')
        )
    }

    /// The request's socket in the container.
    pub fn container_socket(&self, pod_claim: &str, request: &str) -> String {
        format!("{}/{SOCKET}", self.container_dir(pod_claim, request))
    }

    /// The claim's metadata directories' parent on the host.
    pub fn claim_metadata_dir(&self, uid: &str) -> PathBuf {
        self.metadata_root.join(uid)
    }

    /// The metadata file's name (`<driver>-metadata.json`).
    pub fn metadata_file(&self) -> String {
        format!("{}-metadata.json", self.driver)
    }

    /// The request's metadata directory in the container.
    pub fn container_metadata_dir(pod_claim: &str, from_template: bool, request: &str) -> String {
        let sub = if from_template {
            TEMPLATE_CLAIMS
        } else {
            DIRECT_CLAIMS
        };
        format!("{METADATA_CONTAINER_ROOT}/{sub}/{pod_claim}/{request}")
    }

    /// The claim's CDI spec file name.
    pub fn cdi_file(&self, uid: &str) -> String {
        format!("{}-claim_{uid}.json", self.driver)
    }

    /// The claim's checkpoint file name.
    pub fn checkpoint_file(uid: &str) -> String {
        format!("{uid}.json")
    }

    /// The CDI device kind (`<driver>/port`).
    pub fn cdi_kind(&self) -> String {
        format!("{}/port", self.driver)
    }

    /// The CDI device name of a request of a claim.
    pub fn cdi_name(uid: &str, request: &str) -> String {
        format!("{uid}-{request}")
    }

    /// The fully qualified CDI device id.
    pub fn cdi_id(&self, uid: &str, request: &str) -> String {
        format!("{}={}", self.cdi_kind(), Self::cdi_name(uid, request))
    }

    /// Every absolute path is absolute.
    ///
    /// # Errors
    /// The first that is not.
    pub fn check(&self) -> Result<(), String> {
        for (flag, p) in [
            ("--socket-root", self.socket_root.as_path()),
            ("--metadata-root", self.metadata_root.as_path()),
            ("--cdi-dir", self.cdi_dir.as_path()),
            ("--state-dir", self.state_dir.as_path()),
            ("--container-root", Path::new(&self.container_root)),
        ] {
            if !p.is_absolute() {
                return Err(format!("{flag} {} must be an absolute path", p.display()));
            }
        }
        crate::claim::check_dns_subdomain("--driver", &self.driver)
    }
}

/// The switch port of a request of a claim: `dra-` and 24 hex digits of
/// SHA-256 over the claim's UID and the request, so no claim can name
/// another's port.
pub fn port_name(uid: &str, request: &str) -> String {
    let d = Sha256::digest(format!("{uid}/{request}").as_bytes());
    let hex: String = d.iter().take(12).map(|b| format!("{b:02x}")).collect();
    format!("dra-{hex}")
}

/// The port's `attachment` label: `dra/<namespace>/<claim>/<uid>/<request>`.
pub fn attachment(namespace: &str, claim: &str, uid: &str, request: &str) -> String {
    format!("dra/{namespace}/{claim}/{uid}/{request}")
}

/// The claim UID an attachment label names, if it is one of ours.
pub fn attachment_uid(label: &str) -> Option<&str> {
    let mut it = label.strip_prefix("dra/")?.split('/');
    let (_ns, _claim, uid, _req) = (it.next()?, it.next()?, it.next()?, it.next()?);
    it.next().is_none().then_some(uid)
}

/// A locally administered unicast MAC derived from the port name.
pub fn derived_mac(port: &str) -> vhu_api::MacAddr {
    let d = Sha256::digest(port.as_bytes());
    vhu_api::MacAddr([0x02, d[0], d[1], d[2], d[3], d[4]])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> Layout {
        Layout {
            driver: "vhu.dev".into(),
            socket_root: "/run/vhu/dra".into(),
            container_root: "/var/run/vhu/dra".into(),
            metadata_root: "/run/vhu/dra-metadata".into(),
            cdi_dir: "/var/run/cdi".into(),
            state_dir: "/var/lib/vhu/dra".into(),
        }
    }

    #[test]
    fn paths_and_names() {
        let l = layout();
        l.check().unwrap();
        assert_eq!(
            l.host_socket("u1", "net"),
            Path::new("/run/vhu/dra/u1/net/sock")
        );
        assert_eq!(
            l.container_socket("net", "vhu"),
            "/var/run/vhu/dra/net/vhu/sock"
        );
        assert_eq!(
            Layout::container_metadata_dir("net", true, "vhu"),
            "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/net/vhu"
        );
        assert_eq!(l.metadata_file(), "vhu.dev-metadata.json");
        assert_eq!(l.cdi_id("u1", "net"), "vhu.dev/port=u1-net");
        let p = port_name("u1", "net");
        assert_eq!(p.len(), 28);
        assert_ne!(p, port_name("u1", "net2"));
        let a = attachment("ns", "c", "u1", "net");
        assert_eq!(attachment_uid(&a), Some("u1"));
        assert_eq!(attachment_uid("cni/a/b/c/d"), None);
        assert!(derived_mac(&p).is_unicast());
    }
}
