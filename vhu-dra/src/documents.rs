// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The two files a prepared claim hands the container runtime and the pod:
//! the CDI spec (container edits: the mounts) and the KEP-5304 device
//! metadata. Pure: values in, JSON out.

use serde_json::{json, Map, Value};

use crate::params::Admitted;

/// The CDI specification version written (podman 4.3 and containerd 1.7+
/// read it; it has everything used here: mounts and environment).
pub const CDI_VERSION: &str = "0.5.0";
/// The device metadata's `apiVersion` (KEP-5304 alpha).
pub const METADATA_API_VERSION: &str = "metadata.resource.k8s.io/v1alpha1";

/// One prepared request, as the documents describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    /// The request (path component).
    pub request: String,
    /// The pool.
    pub pool: String,
    /// The device.
    pub device: String,
    /// The switch port.
    pub port: String,
    /// The MAC the port is locked to.
    pub mac: String,
    /// What the port got.
    pub admitted: Admitted,
    /// Socket directory on the host.
    pub host_dir: String,
    /// Socket directory in the container.
    pub container_dir: String,
    /// Socket in the container.
    pub container_socket: String,
    /// Metadata directory on the host.
    pub host_metadata_dir: String,
    /// Metadata directory in the container.
    pub container_metadata_dir: String,
}

/// The environment variable naming a request's socket in the container:
/// `VHU_SOCKET_<REQUEST>` (upper case, `-` as `_`).
pub fn socket_env(request: &str) -> String {
    format!(
        "VHU_SOCKET_{}",
        request.to_ascii_uppercase().replace('-', "_")
    )
}

/// The CDI spec of a claim: one device per request, named `<uid>-<request>`
/// of kind `kind`, mounting its socket directory read-write and its
/// metadata directory read-only.
pub fn cdi_spec(kind: &str, uid: &str, devices: &[Prepared]) -> Value {
    let devices: Vec<Value> = devices
        .iter()
        .map(|p| {
            json!({
                "name": crate::layout::Layout::cdi_name(uid, &p.request),
                "containerEdits": {
                    "env": [format!("{}={}", socket_env(&p.request), p.container_socket)],
                    "mounts": [
                        {"hostPath": p.host_dir, "containerPath": p.container_dir,
                         "type": "bind", "options": ["rbind", "rw"]},
                        {"hostPath": p.host_metadata_dir, "containerPath": p.container_metadata_dir,
                         "type": "bind", "options": ["rbind", "ro"]},
                    ],
                },
            })
        })
        .collect();
    json!({"cdiVersion": CDI_VERSION, "kind": kind, "devices": devices})
}

/// A typed `DeviceAttribute` value (`{"string": ..}`, `{"int": ..}`).
fn string(s: &str) -> Value {
    json!({ "string": s })
}

fn int(i: u32) -> Value {
    json!({ "int": i })
}

/// The KEP-5304 `DeviceMetadata` of one request: the attributes
/// `vhost-user-path` (the socket in the container) and `mtu`, which
/// KubeVirt's vhostuser binding plugin reads, and the driver's own `mode`
/// (libvirt's reading: `server` when the frontend creates the socket),
/// `queues`, `mac`, `port`; `networkData` carries the MAC (KEP-4817).
pub fn metadata(
    driver: &str,
    claim: (&str, &str, &str),
    pod_claim: Option<&str>,
    p: &Prepared,
) -> Value {
    let (namespace, name, uid) = claim;
    let mut attrs = Map::new();
    attrs.insert("vhost-user-path".into(), string(&p.container_socket));
    attrs.insert("mtu".into(), int(p.admitted.mtu));
    attrs.insert("mode".into(), string(p.admitted.vm_role.name()));
    attrs.insert("queues".into(), int(p.admitted.queues));
    attrs.insert("mac".into(), string(&p.mac));
    attrs.insert("port".into(), string(&p.port));
    let mut m = json!({
        "apiVersion": METADATA_API_VERSION,
        "kind": "DeviceMetadata",
        "metadata": {"name": name, "namespace": namespace, "uid": uid, "generation": 1},
        "requests": [{
            "name": p.request,
            "devices": [{
                "driver": driver, "pool": p.pool, "name": p.device,
                "attributes": attrs,
                "networkData": {"hardwareAddress": p.mac},
            }],
        }],
    });
    if let Some(pc) = pod_claim {
        m["podClaimName"] = pc.into();
    }
    m
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::params::VmRole;

    pub(crate) fn prepared() -> Prepared {
        Prepared {
            request: "net-a".into(),
            pool: "node-a".into(),
            device: "switch".into(),
            port: "dra-0123".into(),
            mac: "02:00:00:00:00:01".into(),
            admitted: Admitted {
                vm_role: VmRole::Server,
                mtu: 1500,
                queues: 2,
                vlan: 0,
                mac: None,
            },
            host_dir: "/run/vhu/dra/u1/net-a".into(),
            container_dir: "/var/run/vhu/dra/net/net-a".into(),
            container_socket: "/var/run/vhu/dra/net/net-a/sock".into(),
            host_metadata_dir: "/run/vhu/dra-metadata/u1/net-a".into(),
            container_metadata_dir:
                "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/net/net-a"
                    .into(),
        }
    }

    #[test]
    fn cdi_spec_mounts_the_socket_and_metadata_directories() {
        let s = cdi_spec("vhu.dev/port", "u1", &[prepared()]);
        assert_eq!(s["cdiVersion"], "0.5.0");
        let d = &s["devices"][0];
        assert_eq!(d["name"], "u1-net-a");
        assert_eq!(
            d["containerEdits"]["env"][0],
            "VHU_SOCKET_NET_A=/var/run/vhu/dra/net/net-a/sock"
        );
        assert_eq!(d["containerEdits"]["mounts"][0]["options"][1], "rw");
        assert_eq!(d["containerEdits"]["mounts"][1]["options"][1], "ro");
    }

    #[test]
    fn metadata_has_the_keys_kubevirt_s_plugin_reads() {
        let m = metadata("vhu.dev", ("ns", "c", "u1"), Some("net"), &prepared());
        let dev = &m["requests"][0]["devices"][0];
        assert_eq!(
            dev["attributes"]["vhost-user-path"]["string"],
            "/var/run/vhu/dra/net/net-a/sock"
        );
        assert_eq!(dev["attributes"]["mtu"]["int"], 1500);
        assert_eq!(dev["attributes"]["mode"]["string"], "server");
        assert_eq!(m["podClaimName"], "net");
        assert_eq!(m["apiVersion"], METADATA_API_VERSION);
    }
}
