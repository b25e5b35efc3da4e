// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The driver's opaque parameters (`vhu.dev/v1alpha1` `PortConfig`) and
//! the node's bounds on them: what a claim may ask for, and what it gets.
//!
//! ```json
//! {"apiVersion": "vhu.dev/v1alpha1", "kind": "PortConfig",
//!  "vmRole": "server", "mtu": 1500, "queues": 2, "vlan": 10,
//!  "mac": "52:54:00:12:34:56"}
//! ```
//!
//! Parameters come from the DeviceClass (`FromClass`, the administrator's)
//! and from the claim (`FromClaim`, a namespace user's); the claim's win.
//! Both are held to the node's [`Bounds`] (the driver's flags): an MTU and
//! a queue count up to the node's maximum, a VLAN from the node's list. A
//! value out of bounds fails the claim; nothing is clamped silently.
//! Unknown fields are refused.

use serde::Deserialize;
use serde_json::Value;
use vhu_api::{MacAddr, Role};

/// The parameters' `apiVersion`.
pub const API_VERSION: &str = "vhu.dev/v1alpha1";
/// Their `kind`.
pub const KIND: &str = "PortConfig";

/// Who creates the vhost-user socket: the frontend (VM, DPDK application).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VmRole {
    /// The frontend creates the socket (libvirt `mode='server'`, what
    /// KubeVirt's vhostuser binding plugin writes); the switch connects.
    Server,
    /// The switch creates the socket; the frontend connects (DPDK
    /// virtio-user's default).
    Client,
}

impl VmRole {
    /// The switch's role for this frontend role.
    pub fn switch_role(self) -> Role {
        match self {
            VmRole::Server => Role::Client,
            VmRole::Client => Role::Server,
        }
    }

    /// The name in the parameters and the metadata.
    pub fn name(self) -> &'static str {
        match self {
            VmRole::Server => "server",
            VmRole::Client => "client",
        }
    }
}

/// `PortConfig`, as written (every field optional).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PortConfig {
    api_version: Option<String>,
    kind: Option<String>,
    vm_role: Option<VmRole>,
    mtu: Option<u32>,
    queues: Option<u32>,
    vlan: Option<u32>,
    mac: Option<MacAddr>,
}

/// The node administrator's bounds (the driver's flags).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bounds {
    /// The MTU of a port whose parameters name none.
    pub default_mtu: u32,
    /// The largest MTU a port may have.
    pub max_mtu: u32,
    /// The most queue pairs a port may have.
    pub max_queues: u32,
    /// The VLAN of a port whose parameters name none (0: untagged).
    pub default_vlan: u32,
    /// The other VLANs a port may be an access port of.
    pub vlans: Vec<u32>,
    /// The frontend role when the parameters name none.
    pub default_vm_role: VmRole,
}

impl Default for Bounds {
    fn default() -> Self {
        Self {
            default_mtu: 1500,
            max_mtu: 9000,
            max_queues: 8,
            default_vlan: 0,
            vlans: Vec::new(),
            default_vm_role: VmRole::Server,
        }
    }
}

/// What a port gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admitted {
    /// The frontend's role.
    pub vm_role: VmRole,
    /// MTU.
    pub mtu: u32,
    /// Queue pairs.
    pub queues: u32,
    /// The access VLAN (0: untagged).
    pub vlan: u32,
    /// The MAC the port is locked to (`None`: derived by the caller).
    pub mac: Option<MacAddr>,
}

/// Merges the parameters (class ones first, the claim's last) and holds
/// them to `bounds`.
///
/// # Errors
/// Every problem, in one message.
pub fn admit(params: &[(&str, &Value)], bounds: &Bounds) -> Result<Admitted, String> {
    let mut errs = Vec::new();
    let mut a = Admitted {
        vm_role: bounds.default_vm_role,
        mtu: bounds.default_mtu,
        queues: 1,
        vlan: bounds.default_vlan,
        mac: None,
    };
    for (source, v) in params {
        let p: PortConfig = match serde_json::from_value((*v).clone()) {
            Ok(p) => p,
            Err(e) => {
                errs.push(format!("{source} parameters: {e}"));
                continue;
            }
        };
        if p.api_version.as_deref().is_some_and(|x| x != API_VERSION)
            || p.kind.as_deref().is_some_and(|k| k != KIND)
        {
            errs.push(format!(
                "{source} parameters: apiVersion/kind must be {API_VERSION} {KIND}"
            ));
            continue;
        }
        if let Some(r) = p.vm_role {
            a.vm_role = r;
        }
        if let Some(m) = p.mtu {
            a.mtu = m;
        }
        if let Some(q) = p.queues {
            a.queues = q;
        }
        if let Some(v) = p.vlan {
            a.vlan = v;
        }
        if let Some(m) = p.mac {
            a.mac = Some(m);
        }
    }
    if !(vhu_api::port::MIN_MTU..=bounds.max_mtu).contains(&a.mtu) {
        errs.push(format!(
            "mtu {} is out of this node's range {}-{}",
            a.mtu,
            vhu_api::port::MIN_MTU,
            bounds.max_mtu
        ));
    }
    if a.queues == 0 || a.queues > bounds.max_queues {
        errs.push(format!(
            "queues {} is out of this node's range 1-{}",
            a.queues, bounds.max_queues
        ));
    }
    if a.vlan != bounds.default_vlan && !bounds.vlans.contains(&a.vlan) {
        errs.push(format!(
            "vlan {} is not one this node allows (allowed: {}{})",
            a.vlan,
            bounds.default_vlan,
            bounds
                .vlans
                .iter()
                .map(|v| format!(", {v}"))
                .collect::<String>()
        ));
    }
    if let Some(m) = a.mac {
        if !m.is_unicast() {
            errs.push(format!("mac {m} is not a unicast address"));
        }
    }
    if errs.is_empty() {
        Ok(a)
    } else {
        Err(errs.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_claim_s_parameters_win_within_the_node_s_bounds() {
        let b = Bounds {
            vlans: vec![10],
            ..Bounds::default()
        };
        let class = json!({"apiVersion": API_VERSION, "kind": KIND, "mtu": 1400, "queues": 2});
        let claim =
            json!({"mtu": 9000, "vlan": 10, "vmRole": "client", "mac": "02:00:00:00:00:01"});
        let a = admit(&[("FromClass", &class), ("FromClaim", &claim)], &b).unwrap();
        assert_eq!(
            (a.mtu, a.queues, a.vlan, a.vm_role),
            (9000, 2, 10, VmRole::Client)
        );
        assert_eq!(a.mac.unwrap().to_string(), "02:00:00:00:00:01");
        let a = admit(&[], &b).unwrap();
        assert_eq!(
            (a.mtu, a.queues, a.vlan, a.vm_role),
            (1500, 1, 0, VmRole::Server)
        );
    }

    #[test]
    fn out_of_bounds_and_unknown_parameters_fail_the_claim() {
        let b = Bounds::default();
        for (p, why) in [
            (json!({"mtu": 9216}), "mtu 9216"),
            (json!({"queues": 64}), "queues 64"),
            (json!({"vlan": 20}), "vlan 20"),
            (json!({"mac": "01:00:5e:00:00:01"}), "unicast"),
            (json!({"socket": "/etc/shadow"}), "unknown field"),
            (json!({"kind": "Other"}), "apiVersion/kind"),
            (json!("text"), "parameters"),
        ] {
            let e = admit(&[("FromClaim", &p)], &b).unwrap_err();
            assert!(e.contains(why), "{p}: {e}");
        }
    }
}
