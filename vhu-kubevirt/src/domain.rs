// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The domain mutation of `OnDefineDomain`: a vhost-user `<interface>` for
//! every VMI interface of this binding, and shared guest memory.
//!
//! For each interface `<name>` of the binding, the `<interface>` whose
//! alias is `ua-<name>` is replaced (or, when there is none, one is appended
//! to `<devices>`) by
//!
//! ```xml
//! <interface type="vhostuser">
//!   <mac address="..."/>                       (when known)
//!   <source type="unix" path="..." mode="server|client"/>
//!   <model type="virtio-non-transitional"/>    (or virtio-transitional)
//!   <driver queues="N" rx_queue_size="1024" tx_queue_size="1024"/>
//!   <alias name="ua-<name>"/>
//!   <address type="pci" .../>                  (from pciAddress)
//!   <acpi index="..."/>                        (from acpiIndex)
//! </interface>
//! ```
//!
//! vhost-user needs guest memory the backend can map: `<memoryBacking>`
//! gets `<access mode="shared"/>` and, unless hugepages back the memory,
//! `<source type="memfd"/>`; every NUMA cell gets `memAccess="shared"`.
//! Everything else in the document is kept as it was, and a second run on
//! the result gives the same bytes.

use std::collections::BTreeMap;

use crate::netinfo::SocketInfo;
use crate::vmi::{self, BoundIface, Claim};
use crate::xml::{Document, Element, Node};

/// Queue size of each virtqueue (libvirt's `rx_queue_size`, `tx_queue_size`).
pub const QUEUE_SIZE: &str = "1024";

/// The alias KubeVirt gives a VMI interface's domain interface.
pub fn alias(iface: &str) -> String {
    format!("ua-{iface}")
}

/// The `<interface>` for `iface` on `sock`.
pub fn interface_element(iface: &BoundIface, sock: &SocketInfo) -> Element {
    let mut e = Element::with_attrs("interface", &[("type", "vhostuser")]);
    if let Some(mac) = iface.mac.as_ref().or(sock.mac.as_ref()) {
        e = e.with_child(Element::with_attrs("mac", &[("address", mac)]));
    }
    e = e
        .with_child(Element::with_attrs(
            "source",
            &[
                ("type", "unix"),
                ("path", &sock.path),
                ("mode", sock.role.as_str()),
            ],
        ))
        .with_child(Element::with_attrs("model", &[("type", iface.model)]))
        .with_child(Element::with_attrs(
            "driver",
            &[
                (
                    "queues",
                    &sock
                        .queues
                        .map_or(iface.queues, |q| iface.queues.min(q))
                        .to_string(),
                ),
                ("rx_queue_size", QUEUE_SIZE),
                ("tx_queue_size", QUEUE_SIZE),
            ],
        ));
    // No `<mtu>`: libvirt 11.3 tries to set it on a host interface of a
    // vhostuser NIC and fails to start the domain ("Cannot set interface
    // MTU on ''"); the MTU is the switch port's (vhu-cni's `mtu`).
    e = e.with_child(Element::with_attrs(
        "alias",
        &[("name", &alias(&iface.name))],
    ));
    if let Some((dom, bus, slot, func)) = iface.pci {
        e = e.with_child(Element::with_attrs(
            "address",
            &[
                ("type", "pci"),
                ("domain", &format!("{dom:#06x}")),
                ("bus", &format!("{bus:#04x}")),
                ("slot", &format!("{slot:#04x}")),
                ("function", &format!("{func:#x}")),
            ],
        ));
    }
    if let Some(idx) = iface.acpi_index {
        e = e.with_child(Element::with_attrs("acpi", &[("index", &idx.to_string())]));
    }
    e
}

/// Makes guest memory shareable, or says why it cannot be.
fn share_memory(domain: &mut Element) -> Result<(), String> {
    if let Some(mb) = domain.child("memoryBacking") {
        if let Some(mode) = mb.child("access").and_then(|a| a.attr("mode")) {
            if mode != "shared" {
                return Err(format!(
                    "the domain's memoryBacking has access mode {mode:?}: vhost-user needs shared guest memory"
                ));
            }
        }
        if let Some(t) = mb.child("source").and_then(|s| s.attr("type")) {
            if t != "memfd" && t != "file" {
                return Err(format!(
                    "the domain's memoryBacking has source type {t:?}: vhost-user needs memfd or file-backed memory"
                ));
            }
        }
    }
    let cells = domain
        .find(&["cpu", "numa"])
        .map(|n| n.elements().filter(|c| c.name() == "cell").count())
        .unwrap_or(0);
    if let Some(numa) = domain.find(&["cpu", "numa"]) {
        for c in numa.elements().filter(|c| c.name() == "cell") {
            if let Some(m) = c.attr("memAccess").filter(|m| m != "shared") {
                return Err(format!(
                    "NUMA cell {:?} has memAccess {m:?}: vhost-user needs shared guest memory",
                    c.attr("id").unwrap_or_default()
                ));
            }
        }
    }

    let mb = domain.child_or_insert("memoryBacking");
    if mb.child("hugepages").is_none() && mb.child("source").is_none() {
        mb.append(Element::with_attrs("source", &[("type", "memfd")]));
    }
    mb.child_or_insert("access").set_attr("mode", "shared");
    if cells > 0 {
        let numa = domain
            .child_mut("cpu")
            .and_then(|c| c.child_mut("numa"))
            .expect("counted above");
        for c in numa.elements_mut().filter(|c| c.name() == "cell") {
            c.set_attr("memAccess", "shared");
        }
    }
    Ok(())
}

/// Replaces the interface aliased `ua-<name>` or appends one.
fn put_interface(devices: &mut Element, new: Element) {
    let want = new.child("alias").and_then(|a| a.attr("name"));
    let slot = devices.children.iter_mut().find_map(|n| match n {
        Node::Element(e)
            if e.name() == "interface" && e.child("alias").and_then(|a| a.attr("name")) == want =>
        {
            Some(e)
        }
        _ => None,
    });
    match slot {
        Some(e) => *e = new,
        None => devices.append(new),
    }
}

/// The sockets of networks: `(network, pod interface)` pairs (Multus
/// networks) and `(network, claim)` pairs (`resourceClaim` networks), by
/// network.
pub type Sockets = BTreeMap<String, SocketInfo>;

/// What `OnDefineDomain` returns for `xml` and `vmi_json`, handling the
/// interfaces bound to `binding`; `resolve` finds the sockets of
/// `(network, pod interface)` pairs and of `(network, claim)` pairs. A VMI
/// without such interfaces gets its XML back unchanged.
pub fn mutate(
    xml: &[u8],
    vmi_json: &[u8],
    binding: &str,
    resolve: impl FnOnce(&[(String, String)], &[(String, Claim)]) -> Result<Sockets, String>,
) -> Result<Vec<u8>, String> {
    let mut doc = Document::parse(xml).map_err(|e| format!("the domain XML: {e}"))?;
    let vmi = vmi::parse(vmi_json)?;
    if doc.root().name() != "domain" {
        return Err(format!(
            "the domain XML's root is <{}>, not <domain>",
            doc.root().name()
        ));
    }
    let domain_vcpus =
        match doc.root().child("vcpu") {
            Some(v) => Some(v.text().trim().parse::<u32>().map_err(|_| {
                format!("the domain's <vcpu> {:?} is not a number", v.text().trim())
            })?),
            None => None,
        };
    let bound = vmi.bound_interfaces(binding, domain_vcpus)?;
    if bound.is_empty() {
        return Ok(xml.to_vec());
    }
    if doc.root().child("devices").is_none() {
        return Err("the domain XML has no <devices>".to_owned());
    }
    let nets: Vec<(String, String)> = bound
        .iter()
        .filter(|b| b.claim.is_none())
        .map(|b| (b.name.clone(), b.pod_ifname.clone()))
        .collect();
    let claims: Vec<(String, Claim)> = bound
        .iter()
        .filter_map(|b| Some((b.name.clone(), b.claim.clone()?)))
        .collect();
    let sockets = resolve(&nets, &claims)?;

    let root = doc.root_mut();
    share_memory(root)?;
    let devices = root.child_mut("devices").expect("checked above");
    for b in &bound {
        let sock = sockets
            .get(&b.name)
            .ok_or_else(|| format!("no socket found for network {:?}", b.name))?;
        put_interface(devices, interface_element(b, sock));
    }
    Ok(doc.to_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netinfo::VmRole;

    const VMI: &str = r#"{"metadata":{"name":"vm1"},"spec":{"domain":{"devices":{
        "networkInterfaceMultiqueue":true,
        "interfaces":[{"name":"default","masquerade":{}},
                      {"name":"net1","binding":{"name":"vhu"},"macAddress":"02:00:00:00:00:01","pciAddress":"0000:02:01.0","acpiIndex":3}]}},
        "networks":[{"name":"default","pod":{}},{"name":"net1","multus":{"networkName":"vhu-net"}}]}}"#;

    const XML: &str = "<domain type=\"kvm\">\n\t<vcpu placement=\"static\">2</vcpu>\n\t<devices>\n\t\t<interface type=\"ethernet\"><alias name=\"ua-default\"></alias></interface>\n\t</devices>\n</domain>";

    fn sock(nets: &[(String, String)], claims: &[(String, Claim)]) -> Result<Sockets, String> {
        assert!(claims.is_empty());
        Ok(nets
            .iter()
            .map(|(n, i)| {
                (
                    n.clone(),
                    SocketInfo {
                        path: format!("/var/run/vhu/{i}/sock"),
                        role: VmRole::Server,
                        mtu: Some(1500),
                        mac: None,
                        queues: None,
                    },
                )
            })
            .collect())
    }

    #[test]
    fn appends_the_interface_and_shares_memory() {
        let out = mutate(XML.as_bytes(), VMI.as_bytes(), "vhu", sock).unwrap();
        let out = String::from_utf8(out).unwrap();
        assert_eq!(
            out,
            "<domain type=\"kvm\">\n\t<vcpu placement=\"static\">2</vcpu>\n\t<devices>\n\t\t<interface type=\"ethernet\"><alias name=\"ua-default\"></alias></interface>\n\t\t\
             <interface type=\"vhostuser\"><mac address=\"02:00:00:00:00:01\"/><source type=\"unix\" path=\"/var/run/vhu/pod6c270ef2f25/sock\" mode=\"server\"/>\
             <model type=\"virtio-non-transitional\"/><driver queues=\"2\" rx_queue_size=\"1024\" tx_queue_size=\"1024\"/><alias name=\"ua-net1\"/>\
             <address type=\"pci\" domain=\"0x0000\" bus=\"0x02\" slot=\"0x01\" function=\"0x0\"/><acpi index=\"3\"/></interface>\n\t</devices>\n\t\
             <memoryBacking><source type=\"memfd\"/><access mode=\"shared\"/></memoryBacking>\n</domain>"
        );
        let again = mutate(out.as_bytes(), VMI.as_bytes(), "vhu", sock).unwrap();
        assert_eq!(String::from_utf8(again).unwrap(), out);
    }

    #[test]
    fn other_bindings_leave_the_xml_alone() {
        let out = mutate(
            XML.as_bytes(),
            VMI.as_bytes(),
            "other",
            |_, _| unreachable!(),
        )
        .unwrap();
        assert_eq!(out, XML.as_bytes());
    }

    #[test]
    fn unshareable_memory_is_refused() {
        let xml =
            "<domain><memoryBacking><access mode='private'/></memoryBacking><devices/></domain>";
        let e = mutate(xml.as_bytes(), VMI.as_bytes(), "vhu", sock).unwrap_err();
        assert!(e.contains("access mode \"private\""), "{e}");
        let xml =
            "<domain><cpu><numa><cell id='0' memAccess='private'/></numa></cpu><devices/></domain>";
        let e = mutate(xml.as_bytes(), VMI.as_bytes(), "vhu", sock).unwrap_err();
        assert!(e.contains("memAccess \"private\""), "{e}");
    }

    #[test]
    fn numa_cells_and_hugepages() {
        let xml = "<domain><memoryBacking><hugepages/></memoryBacking><cpu><numa><cell id='0' memory='1'/></numa></cpu><devices></devices></domain>";
        let out = String::from_utf8(mutate(xml.as_bytes(), VMI.as_bytes(), "vhu", sock).unwrap())
            .unwrap();
        assert!(
            out.contains("<memoryBacking><hugepages/><access mode=\"shared\"/></memoryBacking>"),
            "{out}"
        );
        assert!(
            out.contains("<cell id=\"0\" memory=\"1\" memAccess=\"shared\"/>"),
            "{out}"
        );
    }

    #[test]
    fn a_claim_backed_interface_is_what_kubevirt_s_vhostuser_plugin_writes() {
        // VEP-183: the network names a claim of the VMI; the pod's claim is
        // made from a template; multiqueue asks 4 queues, the port has 2.
        let vmi = r#"{"metadata":{"name":"vm1"},"spec":{"domain":{"cpu":{"cores":4},"devices":{
            "networkInterfaceMultiqueue":true,
            "interfaces":[{"name":"net1","binding":{"name":"vhu"}}]}},
            "networks":[{"name":"net1","resourceClaim":{"claimName":"net","requestName":"vhu"}}],
            "resourceClaims":[{"name":"net","resourceClaimTemplateName":"vhu-port"}]}}"#;
        let root = std::env::temp_dir().join(format!("vhu-kv-dom-dra-{}", std::process::id()));
        let dir = root.join("resourceclaimtemplates/net/vhu");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("vhu.dev-metadata.json"),
            crate::dra::tests::VHU_DRA,
        )
        .unwrap();
        let r = crate::netinfo::Resolver {
            dra_root: root.clone(),
            wait: std::time::Duration::from_millis(200),
            ..Default::default()
        };
        let out = mutate(XML.as_bytes(), vmi.as_bytes(), "vhu", |nets, claims| {
            assert!(nets.is_empty());
            crate::dra::resolve(&r, claims)
        })
        .unwrap();
        let out = String::from_utf8(out).unwrap();
        assert!(
            out.contains(
                "<interface type=\"vhostuser\"><mac address=\"02:00:00:00:00:07\"/>\
                 <source type=\"unix\" path=\"/var/run/vhu/dra/net/vhu/sock\" mode=\"server\"/>\
                 <model type=\"virtio\"/><driver queues=\"2\" rx_queue_size=\"1024\" tx_queue_size=\"1024\"/>\
                 <alias name=\"ua-net1\"/></interface>"
            ),
            "{out}"
        );
        // Without the metadata: an error naming where it was looked for.
        std::fs::remove_dir_all(&root).unwrap();
        let e = mutate(XML.as_bytes(), vmi.as_bytes(), "vhu", |_, claims| {
            crate::dra::resolve(&r, claims)
        })
        .unwrap_err();
        assert!(
            e.contains("resourceclaimtemplates/net/vhu/vhu.dev-metadata.json"),
            "{e}"
        );
    }
}
