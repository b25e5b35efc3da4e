// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! A `resource.k8s.io/v1` ResourceClaim, as much of it as the driver reads,
//! and the names in it that become paths: checked here, before anything
//! is made.
//!
//! The claim comes from the API server (or, without one, from a file the
//! administrator wrote; [`crate::source`]). Its spec and its opaque
//! parameters are written by a namespace user: every name that becomes a
//! path component is checked against the API's own syntax (DNS labels and
//! subdomains, UIDs), so no name can be `..`, hold a `/`, or be empty.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The claim annotation that names the pod's claim entry of a claim made
/// from a ResourceClaimTemplate (set by kube-controller-manager).
pub const POD_CLAIM_NAME_ANNOTATION: &str = "resource.kubernetes.io/pod-claim-name";

/// A ResourceClaim (`resource.k8s.io/v1`), the fields the driver reads.
/// Unknown fields are ignored: the API server adds many.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceClaim {
    /// `resource.k8s.io/v1`.
    #[serde(default)]
    pub api_version: String,
    /// `ResourceClaim`.
    #[serde(default)]
    pub kind: String,
    /// Name, namespace, UID, annotations.
    pub metadata: ObjectMeta,
    /// The status: the allocation.
    #[serde(default)]
    pub status: Option<ClaimStatus>,
}

/// The object metadata the driver reads.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    /// Name.
    #[serde(default)]
    pub name: String,
    /// Namespace.
    #[serde(default)]
    pub namespace: String,
    /// UID.
    #[serde(default)]
    pub uid: String,
    /// Annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// `ResourceClaimStatus`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimStatus {
    /// Set once the scheduler allocated the claim.
    #[serde(default)]
    pub allocation: Option<Allocation>,
}

/// `AllocationResult`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Allocation {
    /// The devices.
    #[serde(default)]
    pub devices: DeviceAllocation,
}

/// `DeviceAllocationResult`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceAllocation {
    /// One per allocated device, of every driver.
    #[serde(default)]
    pub results: Vec<AllocationResult>,
    /// Configuration from the DeviceClass (`FromClass`) and the claim
    /// (`FromClaim`), in that order.
    #[serde(default)]
    pub config: Vec<AllocatedConfig>,
}

/// `DeviceRequestAllocationResult`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AllocationResult {
    /// The request (`<request>` or `<request>/<subrequest>`).
    pub request: String,
    /// The driver.
    pub driver: String,
    /// The pool.
    pub pool: String,
    /// The device in the pool.
    pub device: String,
    /// Set when the device allows multiple allocations (consumable
    /// capacity): this allocation's share.
    #[serde(default, rename = "shareID", skip_serializing_if = "Option::is_none")]
    pub share_id: Option<String>,
}

/// `DeviceAllocationConfiguration`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AllocatedConfig {
    /// `FromClass` or `FromClaim`.
    pub source: String,
    /// The requests it applies to; empty: all.
    #[serde(default)]
    pub requests: Vec<String>,
    /// The opaque configuration, for one driver.
    #[serde(default)]
    pub opaque: Option<Opaque>,
}

/// `OpaqueDeviceConfiguration`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Opaque {
    /// The driver it is for.
    pub driver: String,
    /// The driver's own parameters (a JSON object).
    #[serde(default)]
    pub parameters: Value,
}

/// One of this driver's devices in a claim, with the names checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocated {
    /// The request as allocated (`<request>` or `<request>/<sub>`).
    pub request: String,
    /// The top-level request: the path component.
    pub request_dir: String,
    /// The pool.
    pub pool: String,
    /// The device.
    pub device: String,
    /// The share, for a device allocated many times.
    pub share_id: Option<String>,
}

impl ResourceClaim {
    /// The name the pod knows the claim by: the pod's claim entry for a
    /// claim made from a template, the claim's own name otherwise; and
    /// whether it is the former.
    pub fn pod_name(&self) -> (&str, bool) {
        match self.metadata.annotations.get(POD_CLAIM_NAME_ANNOTATION) {
            Some(n) => (n, true),
            None => (&self.metadata.name, false),
        }
    }

    /// This driver's devices, in the order of the allocation.
    ///
    /// # Errors
    /// The claim is not allocated, or a name is not what the API allows.
    pub fn allocated(&self, driver: &str) -> Result<Vec<Allocated>, String> {
        let Some(alloc) = self.status.as_ref().and_then(|s| s.allocation.as_ref()) else {
            return Err("the claim is not allocated".into());
        };
        let mut out = Vec::new();
        for r in alloc.devices.results.iter().filter(|r| r.driver == driver) {
            let (top, sub) = match r.request.split_once('/') {
                Some((t, s)) => (t, Some(s)),
                None => (r.request.as_str(), None),
            };
            check_dns_label("request", top)?;
            if let Some(s) = sub {
                check_dns_label("subrequest", s)?;
            }
            check_dns_label("device", &r.device)?;
            check_pool(&r.pool)?;
            if out.iter().any(|a: &Allocated| a.request_dir == top) {
                return Err(format!(
                    "request {top:?} has more than one {driver} device; this driver gives one \
                     port per request (use allocationMode ExactCount with count 1)"
                ));
            }
            out.push(Allocated {
                request: r.request.clone(),
                request_dir: top.to_owned(),
                pool: r.pool.clone(),
                device: r.device.clone(),
                share_id: r.share_id.clone(),
            });
        }
        Ok(out)
    }

    /// The opaque parameters for `driver` that apply to `request` (its
    /// top-level name or the full one), class ones first, then the claim's.
    pub fn parameters<'a>(
        &'a self,
        driver: &str,
        request: &Allocated,
    ) -> Vec<(&'a str, &'a Value)> {
        let Some(alloc) = self.status.as_ref().and_then(|s| s.allocation.as_ref()) else {
            return Vec::new();
        };
        let mut v: Vec<(&str, &Value)> = alloc
            .devices
            .config
            .iter()
            .filter(|c| {
                c.requests.is_empty()
                    || c.requests
                        .iter()
                        .any(|r| *r == request.request || *r == request.request_dir)
            })
            .filter_map(|c| {
                let o = c.opaque.as_ref().filter(|o| o.driver == driver)?;
                Some((c.source.as_str(), &o.parameters))
            })
            .collect();
        // FromClass first: the claim's own configuration wins.
        v.sort_by_key(|(s, _)| *s != "FromClass");
        v
    }
}

/// Checks the identity kubelet sent against the claim's own.
///
/// # Errors
/// A UID, namespace or name that is not valid or does not match.
pub fn check_identity(
    claim: &ResourceClaim,
    namespace: &str,
    name: &str,
    uid: &str,
) -> Result<(), String> {
    check_uid(uid)?;
    check_dns_label("namespace", namespace)?;
    check_dns_subdomain("claim name", name)?;
    let m = &claim.metadata;
    if m.uid != uid || m.namespace != namespace || m.name != name {
        return Err(format!(
            "the claim found is {}/{} (UID {}), not {namespace}/{name} (UID {uid}): it was \
             deleted and made again",
            m.namespace, m.name, m.uid
        ));
    }
    if let Some(p) = m.annotations.get(POD_CLAIM_NAME_ANNOTATION) {
        check_dns_label("pod claim name", p)?;
    }
    Ok(())
}

/// A UID: 1-64 characters of `A-Z a-z 0-9 -` (Kubernetes makes RFC 4122
/// UUIDs).
///
/// # Errors
/// When it is not.
pub fn check_uid(uid: &str) -> Result<(), String> {
    if uid.is_empty()
        || uid.len() > 64
        || !uid.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-')
    {
        return Err(format!("claim UID {uid:?} is not a UID"));
    }
    Ok(())
}

/// An RFC 1123 DNS label (what the API requires of namespaces, request and
/// device names).
///
/// # Errors
/// When it is not.
pub fn check_dns_label(what: &str, s: &str) -> Result<(), String> {
    let ok = !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(format!("{what} {s:?} is not a DNS label"))
    }
}

/// An RFC 1123 DNS subdomain (claim names, driver names).
///
/// # Errors
/// When it is not.
pub fn check_dns_subdomain(what: &str, s: &str) -> Result<(), String> {
    let ok =
        !s.is_empty() && s.len() <= 253 && s.split('.').all(|l| check_dns_label(what, l).is_ok());
    if ok {
        Ok(())
    } else {
        Err(format!("{what} {s:?} is not a DNS subdomain"))
    }
}

/// A pool name: DNS subdomains separated by `/`, at most 253 characters.
fn check_pool(s: &str) -> Result<(), String> {
    if s.len() <= 253 && s.split('/').all(|p| check_dns_subdomain("pool", p).is_ok()) {
        Ok(())
    } else {
        Err(format!("pool {s:?} is not a pool name"))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A claim as the API server serialises it (`kubectl get -o json`),
    /// allocated one vhu device for request `net`.
    pub(crate) fn claim_json(uid: &str, params: &Value) -> Value {
        serde_json::json!({
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {
                "name": "vm1-net-x7k2p", "namespace": "tenant", "uid": uid,
                "resourceVersion": "812", "creationTimestamp": "2026-12-06T22:00:00Z",
                "annotations": {"resource.kubernetes.io/pod-claim-name": "net"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "vm1",
                    "uid": "0b6c1e1e-0000-4000-8000-000000000001", "controller": true,
                    "blockOwnerDeletion": true}]
            },
            "spec": {"devices": {
                "requests": [{"name": "net", "exactly": {"deviceClassName": "vhu.dev",
                    "allocationMode": "ExactCount", "count": 1,
                    "capacity": {"requests": {"vhu.dev/ports": "1"}}}}],
                "config": [{"requests": ["net"], "opaque": {"driver": "vhu.dev", "parameters": params}}]
            }},
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {"request": "net", "driver": "vhu.dev", "pool": "node-a",
                             "device": "switch", "shareID": "7d1b3c1a-0000-4000-8000-0000000000aa",
                             "consumedCapacity": {"vhu.dev/ports": "1"}},
                            {"request": "gpu", "driver": "gpu.example.com", "pool": "node-a", "device": "gpu-0"}
                        ],
                        "config": [
                            {"source": "FromClass", "opaque": {"driver": "vhu.dev",
                                "parameters": {"apiVersion": "vhu.dev/v1alpha1", "kind": "PortConfig", "mtu": 1500}}},
                            {"source": "FromClaim", "requests": ["net"], "opaque": {"driver": "vhu.dev",
                                "parameters": params}}
                        ]
                    },
                    "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                        {"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}]}
                },
                "reservedFor": [{"resource": "pods", "name": "vm1",
                    "uid": "0b6c1e1e-0000-4000-8000-000000000001"}]
            }
        })
    }

    #[test]
    fn the_driver_s_devices_and_parameters_are_read() {
        let p = serde_json::json!({"apiVersion": "vhu.dev/v1alpha1", "kind": "PortConfig", "mtu": 9000});
        let c: ResourceClaim = serde_json::from_value(claim_json("u-1", &p)).unwrap();
        let a = c.allocated("vhu.dev").unwrap();
        assert_eq!(a.len(), 1);
        assert_eq!(
            (a[0].request_dir.as_str(), a[0].device.as_str()),
            ("net", "switch")
        );
        assert!(a[0].share_id.is_some());
        let params = c.parameters("vhu.dev", &a[0]);
        assert_eq!(params.len(), 2);
        assert_eq!(params[0].0, "FromClass");
        assert_eq!(params[1].1["mtu"], 9000);
        assert_eq!(c.pod_name(), ("net", true));
        check_identity(&c, "tenant", "vm1-net-x7k2p", "u-1").unwrap();
        assert!(check_identity(&c, "tenant", "vm1-net-x7k2p", "u-2").is_err());
    }

    #[test]
    fn names_that_are_not_the_api_s_are_refused() {
        for bad in ["", "..", "a/b", "A", "-a", &"a".repeat(64)] {
            assert!(check_dns_label("x", bad).is_err(), "{bad:?}");
        }
        assert!(check_uid("../x").is_err());
        let p = Value::Null;
        let mut v = claim_json("u-1", &p);
        v["status"]["allocation"]["devices"]["results"][0]["request"] = "../../etc".into();
        let c: ResourceClaim = serde_json::from_value(v).unwrap();
        assert!(c.allocated("vhu.dev").is_err());
        let mut v = claim_json("u-1", &p);
        v["status"] = Value::Null;
        let c: ResourceClaim = serde_json::from_value(v).unwrap();
        assert!(c
            .allocated("vhu.dev")
            .unwrap_err()
            .contains("not allocated"));
    }
}
