// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The fields of a `kubevirt.io/v1` VirtualMachineInstance the binding reads.
//!
//! virt-launcher passes the whole VMI as JSON; everything not named here is
//! ignored. What is read is checked, since the values end up in the domain
//! XML and in socket paths: names, MAC and PCI addresses must have their
//! documented shapes.

use serde::Deserialize;
use sha2::{Digest, Sha256};

/// Most queue pairs a vhost-user NIC gets (KubeVirt's limit for
/// multiqueue virtio-net).
pub const MAX_QUEUES: u32 = 256;

/// The VMI, as far as the binding reads it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Vmi {
    /// `metadata`.
    pub metadata: Metadata,
    /// `spec`.
    pub spec: Spec,
    /// `status`.
    pub status: Status,
}

/// `metadata`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Metadata {
    /// The VMI's name.
    pub name: String,
    /// Its namespace.
    pub namespace: String,
}

/// `spec`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Spec {
    /// `spec.domain`.
    pub domain: DomainSpec,
    /// `spec.networks`.
    pub networks: Vec<Network>,
    /// `spec.resourceClaims`: the pod's claims, by the names networks use.
    #[serde(rename = "resourceClaims")]
    pub resource_claims: Vec<PodResourceClaim>,
}

/// One `spec.resourceClaims[]` (a pod's `resourceClaims[]` entry).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PodResourceClaim {
    /// The name networks refer to.
    pub name: String,
    /// A claim of this name, made by someone else.
    pub resource_claim_name: Option<String>,
    /// The template each pod's claim is made from.
    pub resource_claim_template_name: Option<String>,
}

/// `spec.networks[].resourceClaim` (`NetworkDevicesWithDRA`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ClaimRef {
    /// The name of an entry of `spec.resourceClaims`.
    pub claim_name: String,
    /// The request in that claim.
    pub request_name: String,
}

/// A claim-backed interface's claim, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The pod's name for the claim.
    pub claim: String,
    /// The request.
    pub request: String,
    /// Made from a template (`Some(true)`), named (`Some(false)`), or not
    /// in `spec.resourceClaims` (`None`: both places are looked at).
    pub from_template: Option<bool>,
}

/// `spec.domain`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct DomainSpec {
    /// `spec.domain.devices`.
    pub devices: Devices,
    /// `spec.domain.cpu`: the topology, when given.
    pub cpu: Option<Cpu>,
}

/// `spec.domain.devices`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Devices {
    /// The VM's interfaces.
    pub interfaces: Vec<Interface>,
    /// One queue pair per vCPU.
    pub network_interface_multiqueue: Option<bool>,
    /// `virtio-transitional` instead of `virtio-non-transitional`.
    pub use_virtio_transitional: Option<bool>,
}

/// `spec.domain.cpu`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Cpu {
    /// Cores per socket (0: 1).
    pub cores: u32,
    /// Sockets (0: 1).
    pub sockets: u32,
    /// Threads per core (0: 1).
    pub threads: u32,
}

/// One `spec.domain.devices.interfaces[]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Interface {
    /// The name, which is also its network's name.
    pub name: String,
    /// `binding`: a network binding plugin.
    pub binding: Option<Binding>,
    /// `macAddress`.
    pub mac_address: Option<String>,
    /// `model` (default virtio).
    pub model: Option<String>,
    /// `pciAddress`, `dddd:bb:ss.f`.
    pub pci_address: Option<String>,
    /// `acpiIndex`.
    pub acpi_index: Option<u32>,
}

/// `binding`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Binding {
    /// The plugin's name in the KubeVirt CR.
    pub name: String,
}

/// One `spec.networks[]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Network {
    /// The name interfaces refer to.
    pub name: String,
    /// `pod: {}`: the pod network.
    pub pod: Option<serde_json::Value>,
    /// `multus: {networkName}`: a secondary network.
    pub multus: Option<serde_json::Value>,
    /// `resourceClaim: {claimName, requestName}`: a device of a DRA claim.
    #[serde(rename = "resourceClaim")]
    pub resource_claim: Option<ClaimRef>,
}

/// `status`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Status {
    /// `status.interfaces`.
    pub interfaces: Vec<InterfaceStatus>,
}

/// One `status.interfaces[]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct InterfaceStatus {
    /// The interface's name.
    pub name: String,
    /// Its interface in the pod, as virt-controller named it.
    pub pod_interface_name: Option<String>,
}

/// An interface of this binding, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundIface {
    /// The interface (and network) name.
    pub name: String,
    /// Its interface in the pod (the CNI's `CNI_IFNAME`).
    pub pod_ifname: String,
    /// The MAC to give the guest, lower case.
    pub mac: Option<String>,
    /// `virtio-transitional`, `virtio-non-transitional`, or (a claim-backed
    /// interface) `virtio`.
    pub model: &'static str,
    /// `(domain, bus, slot, function)`.
    pub pci: Option<(u16, u8, u8, u8)>,
    /// ACPI index.
    pub acpi_index: Option<u32>,
    /// Queue pairs.
    pub queues: u32,
    /// The DRA claim of a `resourceClaim` network.
    pub claim: Option<Claim>,
}

/// Parses the VMI JSON.
pub fn parse(json: &[u8]) -> Result<Vmi, String> {
    if json.is_empty() {
        return Err("the VMI is empty".to_owned());
    }
    serde_json::from_slice(json)
        .map_err(|e| format!("the VMI is not valid JSON of a VirtualMachineInstance: {e}"))
}

/// The name virt-controller gives the pod interface of secondary network
/// `network`: `pod` and the first 11 hex digits of its SHA-256
/// (KubeVirt's `namescheme.GenerateHashedInterfaceName`).
pub fn hashed_pod_ifname(network: &str) -> String {
    let digest = Sha256::digest(network.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("pod{}", &hex[..11])
}

/// A Kubernetes-style name usable in a path and an alias: 1-63 of
/// `[a-z0-9-]`, not starting or ending with `-`.
fn check_name(what: &str, s: &str) -> Result<(), String> {
    let ok = !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{what} {s:?} is not a valid name (1-63 characters of a-z, 0-9 and '-')"
        ))
    }
}

/// A Linux interface name: 1-15 bytes, no `/`, whitespace or `:`, not `.`
/// or `..`.
fn check_ifname(s: &str) -> Result<(), String> {
    let ok = !s.is_empty()
        && s.len() <= 15
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|b| b.is_ascii_graphic() && b != b'/' && b != b':');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "pod interface name {s:?} is not a valid interface name"
        ))
    }
}

/// Checks and normalises a MAC `xx:xx:xx:xx:xx:xx` (or with `-`); refuses
/// multicast ones.
fn check_mac(s: &str) -> Result<String, String> {
    let parts: Vec<&str> = s.split([':', '-']).collect();
    let bytes: Option<Vec<u8>> = (parts.len() == 6)
        .then(|| {
            parts
                .iter()
                .map(|p| {
                    (p.len() == 2)
                        .then(|| u8::from_str_radix(p, 16).ok())
                        .flatten()
                })
                .collect()
        })
        .flatten();
    match bytes {
        Some(b) if b[0] & 1 == 0 => Ok(b
            .iter()
            .map(|x| format!("{x:02x}"))
            .collect::<Vec<_>>()
            .join(":")),
        Some(_) => Err(format!("macAddress {s:?} is a multicast address")),
        None => Err(format!("macAddress {s:?} is not a MAC address")),
    }
}

/// Parses a PCI address `dddd:bb:ss.f` as KubeVirt writes it.
fn check_pci(s: &str) -> Result<(u16, u8, u8, u8), String> {
    let bad = || format!("pciAddress {s:?} is not of the form dddd:bb:ss.f");
    let (dbs, f) = s.split_once('.').ok_or_else(bad)?;
    let p: Vec<&str> = dbs.split(':').collect();
    if p.len() != 3 || p[0].len() != 4 || p[1].len() != 2 || p[2].len() != 2 || f.len() != 1 {
        return Err(bad());
    }
    let dom = u16::from_str_radix(p[0], 16).map_err(|_| bad())?;
    let bus = u8::from_str_radix(p[1], 16).map_err(|_| bad())?;
    let slot = u8::from_str_radix(p[2], 16).map_err(|_| bad())?;
    let func = u8::from_str_radix(f, 16).map_err(|_| bad())?;
    if slot > 0x1f || func > 7 {
        return Err(bad());
    }
    Ok((dom, bus, slot, func))
}

impl Vmi {
    /// vCPUs from the VMI's topology, if it gives one.
    pub fn vcpus(&self) -> Option<u32> {
        self.spec.domain.cpu.as_ref().map(|c| {
            let one = |n: u32| n.max(1);
            one(c.cores)
                .saturating_mul(one(c.sockets))
                .saturating_mul(one(c.threads))
        })
    }

    /// The interfaces bound to `binding`, checked, in the VMI's order.
    /// `domain_vcpus` is the domain's `<vcpu>`, used for multiqueue when
    /// the VMI has no CPU topology.
    pub fn bound_interfaces(
        &self,
        binding: &str,
        domain_vcpus: Option<u32>,
    ) -> Result<Vec<BoundIface>, String> {
        let devices = &self.spec.domain.devices;
        let transitional = devices.use_virtio_transitional.unwrap_or(false);
        let queues = if devices.network_interface_multiqueue.unwrap_or(false) {
            self.vcpus()
                .or(domain_vcpus)
                .unwrap_or(1)
                .clamp(1, MAX_QUEUES)
        } else {
            1
        };
        let mut out: Vec<BoundIface> = Vec::new();
        for i in &devices.interfaces {
            if i.binding.as_ref().is_none_or(|b| b.name != binding) {
                continue;
            }
            check_name("interface", &i.name)?;
            if out.iter().any(|o| o.name == i.name) {
                return Err(format!("interface {:?} is listed twice", i.name));
            }
            let net = self
                .spec
                .networks
                .iter()
                .find(|n| n.name == i.name)
                .ok_or_else(|| {
                    format!(
                        "interface {:?} has no network of the same name in spec.networks",
                        i.name
                    )
                })?;
            let status_name = self
                .status
                .interfaces
                .iter()
                .find(|s| s.name == i.name)
                .and_then(|s| s.pod_interface_name.clone())
                .filter(|n| !n.is_empty());
            let pod_ifname = match status_name {
                Some(n) => n,
                None if net.pod.is_some() => "eth0".to_owned(),
                None => hashed_pod_ifname(&net.name),
            };
            check_ifname(&pod_ifname)?;
            let claim = net
                .resource_claim
                .as_ref()
                .map(|c| {
                    check_name("resourceClaim.claimName", &c.claim_name)?;
                    check_name("resourceClaim.requestName", &c.request_name)?;
                    let from_template = self
                        .spec
                        .resource_claims
                        .iter()
                        .find(|r| r.name == c.claim_name)
                        .map(|r| r.resource_claim_template_name.is_some());
                    Ok::<_, String>(Claim {
                        claim: c.claim_name.clone(),
                        request: c.request_name.clone(),
                        from_template,
                    })
                })
                .transpose()?;
            // A claim-backed interface's model is what KubeVirt's vhostuser
            // binding plugin writes (`virtio`); vhu's own, KubeVirt's default.
            let model = match i.model.as_deref() {
                None | Some("") | Some("virtio") if transitional => "virtio-transitional",
                None | Some("") | Some("virtio") if claim.is_some() => "virtio",
                None | Some("") | Some("virtio") => "virtio-non-transitional",
                Some(m) => {
                    return Err(format!(
                        "interface {:?} has model {m:?}: a vhost-user interface is virtio",
                        i.name
                    ))
                }
            };
            out.push(BoundIface {
                name: i.name.clone(),
                pod_ifname,
                mac: i
                    .mac_address
                    .as_deref()
                    .filter(|m| !m.is_empty())
                    .map(check_mac)
                    .transpose()?,
                model,
                pci: i
                    .pci_address
                    .as_deref()
                    .filter(|p| !p.is_empty())
                    .map(check_pci)
                    .transpose()?,
                acpi_index: i.acpi_index.filter(|&n| n > 0),
                queues,
                claim,
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashed_names_match_kubevirt() {
        // sha256("net1") = 6c270ef2f25...
        assert_eq!(hashed_pod_ifname("net1"), "pod6c270ef2f25");
        assert_eq!(hashed_pod_ifname("net1").len(), 14);
    }

    #[test]
    fn macs_and_pci_addresses() {
        assert_eq!(check_mac("02:AA:bb:00:00:01").unwrap(), "02:aa:bb:00:00:01");
        assert!(check_mac("01:00:5e:00:00:01").is_err());
        assert!(check_mac("02:aa:bb:00:00").is_err());
        assert!(check_mac("02:aa:bb:00:00:0g").is_err());
        assert_eq!(check_pci("0000:81:01.0").unwrap(), (0, 0x81, 1, 0));
        assert!(check_pci("0000:81:20.0").is_err());
        assert!(check_pci("81:01.0").is_err());
    }

    #[test]
    fn names_are_checked() {
        assert!(check_name("interface", "net-1").is_ok());
        for bad in ["", "../x", "a/b", "-a", "A", &"a".repeat(64)] {
            assert!(check_name("interface", bad).is_err(), "{bad}");
        }
        assert!(check_ifname("pod6c270ef2f25").is_ok());
        for bad in ["", "..", "a/b", "a b", "sixteen-chars-xx"] {
            assert!(check_ifname(bad).is_err(), "{bad}");
        }
    }
}
