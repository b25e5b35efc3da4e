// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The ADD result, shaped for the configuration's version: 0.4.0 (`ips[]`
//! with `version`), 1.0.0, 1.1.0 (`interfaces[]` with `mtu` and
//! `socketPath`).

use serde_json::{json, Map, Value};

use crate::link::Route;

/// What ADD made.
#[derive(Debug, Clone)]
pub struct Attached {
    /// `CNI_IFNAME`.
    pub ifname: String,
    /// The interface's MAC.
    pub mac: String,
    /// `CNI_NETNS`.
    pub sandbox: String,
    /// MTU, if configured.
    pub mtu: Option<u32>,
    /// vhost-user: the socket's host path.
    pub socket_path: Option<String>,
}

/// The addresses in an IPAM result (CIDR).
pub fn ipam_addrs(ipam: &Value) -> Vec<String> {
    ipam.get("ips")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|i| i.get("address")?.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The routes in an IPAM result.
pub fn ipam_routes(ipam: &Value) -> Vec<Route> {
    ipam.get("routes")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|r| {
                    Some(Route {
                        dst: r.get("dst")?.as_str()?.to_owned(),
                        gw: r.get("gw").and_then(Value::as_str).map(str::to_owned),
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The result for `version`: one interface, the IPAM plugin's IPs on it
/// (`interface: 0`), its routes and DNS.
pub fn build(version: &str, a: &Attached, ipam: Option<&Value>) -> Value {
    let mut iface = Map::new();
    iface.insert("name".into(), json!(a.ifname));
    iface.insert("mac".into(), json!(a.mac));
    iface.insert("sandbox".into(), json!(a.sandbox));
    if version == "1.1.0" {
        if let Some(m) = a.mtu {
            iface.insert("mtu".into(), json!(m));
        }
        if let Some(s) = &a.socket_path {
            iface.insert("socketPath".into(), json!(s));
        }
    }
    let mut ips = Vec::new();
    for ip in ipam
        .and_then(|i| i.get("ips"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let Some(addr) = ip.get("address").and_then(Value::as_str) else {
            continue;
        };
        let mut o = Map::new();
        if version == "0.4.0" {
            let v = if addr.contains(':') { "6" } else { "4" };
            o.insert("version".into(), json!(v));
        }
        o.insert("interface".into(), json!(0));
        o.insert("address".into(), json!(addr));
        if let Some(g) = ip.get("gateway").and_then(Value::as_str) {
            o.insert("gateway".into(), json!(g));
        }
        ips.push(Value::Object(o));
    }
    let mut r = Map::new();
    r.insert("cniVersion".into(), json!(version));
    r.insert("interfaces".into(), json!([Value::Object(iface)]));
    r.insert("ips".into(), Value::Array(ips));
    let routes = ipam
        .and_then(|i| i.get("routes"))
        .cloned()
        .unwrap_or_else(|| json!([]));
    r.insert("routes".into(), routes);
    let dns = ipam
        .and_then(|i| i.get("dns"))
        .cloned()
        .unwrap_or_else(|| json!({}));
    r.insert("dns".into(), dns);
    Value::Object(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_per_version() {
        let ipam = json!({"cniVersion": "1.0.0",
            "ips": [{"address": "10.0.0.2/24", "gateway": "10.0.0.1"}, {"address": "fd00::2/64"}],
            "routes": [{"dst": "0.0.0.0/0", "gw": "10.0.0.1"}], "dns": {"nameservers": ["10.0.0.53"]}});
        let a = Attached {
            ifname: "net1".into(),
            mac: "02:00:00:00:00:01".into(),
            sandbox: "/run/netns/x".into(),
            mtu: Some(9000),
            socket_path: Some("/h/net1/sock".into()),
        };
        let r = build("0.4.0", &a, Some(&ipam));
        assert_eq!(
            r,
            json!({"cniVersion": "0.4.0",
                "interfaces": [{"name": "net1", "mac": "02:00:00:00:00:01", "sandbox": "/run/netns/x"}],
                "ips": [{"version": "4", "interface": 0, "address": "10.0.0.2/24", "gateway": "10.0.0.1"},
                        {"version": "6", "interface": 0, "address": "fd00::2/64"}],
                "routes": [{"dst": "0.0.0.0/0", "gw": "10.0.0.1"}], "dns": {"nameservers": ["10.0.0.53"]}})
        );
        let r = build("1.0.0", &a, Some(&ipam));
        assert!(r["ips"][0].get("version").is_none());
        assert!(r["interfaces"][0].get("socketPath").is_none());
        let r = build("1.1.0", &a, None);
        assert_eq!(
            r,
            json!({"cniVersion": "1.1.0",
                "interfaces": [{"name": "net1", "mac": "02:00:00:00:00:01", "sandbox": "/run/netns/x",
                                "mtu": 9000, "socketPath": "/h/net1/sock"}],
                "ips": [], "routes": [], "dns": {}})
        );
        assert_eq!(ipam_addrs(&ipam), ["10.0.0.2/24", "fd00::2/64"]);
        assert_eq!(
            ipam_routes(&ipam),
            [Route {
                dst: "0.0.0.0/0".into(),
                gw: Some("10.0.0.1".into())
            }]
        );
    }
}
