// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! What a network may ask for under the node's policy for its namespace:
//! the port's VLAN mode, whether it is locked to its MAC, and its socket's
//! owner, group and mode. A network is a namespace user's input; the
//! policy is the node administrator's ([`crate::node`]).
//!
//! | asked | admitted when |
//! |---|---|
//! | no `vlan` | always: an access port of the policy's `vlan` (0: the untagged VLAN, tagged frames dropped), never a trunk |
//! | `vlan: N` | `N` is the policy's `vlan` or one of its `vlans` |
//! | a trunk | the policy's `trunk` is true and every VLAN of it (and `native`) is allowed as above |
//! | `macLock: false` | the policy's `unpinned_mac` is true (`tap` ports are always locked) |
//! | `socketOwner`, `socketGroup` | listed in the policy's `socket_owners`, `socket_groups` |
//! | `socketMode` | no bit outside the policy's `socket_mode` |
//! | `"kata": "dan"` | the policy's `kata_dan` is true |
//!
//! The port's flood limit and FDB share are the policy's (`flood_rate`,
//! `flood_burst`, `mac_limit`): a network cannot ask for them.

use vhu_api::Vlan;

use crate::config::{Kind, NetConf};
use crate::error::CniError;
use crate::node::{NodeConfig, Policy};

/// What the port gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admitted {
    /// Its VLAN mode.
    pub vlan: Vlan,
    /// Whether it may send only from its MAC.
    pub mac_lock: bool,
    /// Its flood limit, frames per second (`None`: the switch's).
    pub flood_rate: Option<u32>,
    /// Its flood burst (`None`: the switch's).
    pub flood_burst: Option<u32>,
    /// Its share of the FDB (`None`: the switch's).
    pub mac_limit: Option<u32>,
}

/// Checks `conf` against the policy of `namespace`.
///
/// # Errors
/// Code 7 naming the field, what the policy allows and where it is set.
pub fn admit(
    conf: &NetConf,
    node: &NodeConfig,
    namespace: Option<&str>,
) -> Result<Admitted, CniError> {
    let p = node.policy(namespace);
    let whose = match namespace {
        Some(n) if node.namespaces.contains_key(n) => format!("namespace {n:?}'s policy"),
        Some(n) => format!("the default policy (namespace {n:?} has none of its own)"),
        None => "the default policy (the runtime names no namespace)".to_owned(),
    };
    let refuse = |field: &str, what: String| {
        CniError::config(format!("{field}: {what}, under {whose} in {}", node.name()))
    };
    let vlan = match &conf.vlan {
        None => Vlan::Access(p.vlan),
        Some(Vlan::Access(v)) => {
            if !p.allows_vlan(*v) {
                return Err(refuse(
                    "vlan",
                    format!("VLAN {v} is not allowed (allowed: {})", p.allowed_vlans()),
                ));
            }
            Vlan::Access(*v)
        }
        Some(Vlan::Trunk { allowed, native }) => {
            if !p.trunk {
                return Err(refuse(
                    "vlan",
                    "a trunk port is not allowed (trunk = false)".to_owned(),
                ));
            }
            if let Some(v) = allowed.iter().chain(native).find(|v| !p.allows_vlan(**v)) {
                return Err(refuse(
                    "vlan",
                    format!(
                        "VLAN {v} of the trunk is not allowed (allowed: {})",
                        p.allowed_vlans()
                    ),
                ));
            }
            Vlan::Trunk {
                allowed: allowed.clone(),
                native: *native,
            }
        }
    };
    if conf.kata_dan && !p.kata_dan {
        return Err(refuse(
            "kata",
            "writing Kata DAN entries is not allowed (kata_dan = false)".to_owned(),
        ));
    }
    let mac_lock = conf.mac_lock.unwrap_or(true) || conf.kind != Kind::VhostUser || conf.kata_dan;
    if !mac_lock && !p.unpinned_mac {
        return Err(refuse(
            "macLock",
            "a port without a MAC lock is not allowed (unpinned_mac = false)".to_owned(),
        ));
    }
    check_socket(conf, p).map_err(|(f, m)| refuse(f, m))?;
    Ok(Admitted {
        vlan,
        mac_lock,
        flood_rate: p.flood_rate,
        flood_burst: p.flood_burst,
        mac_limit: p.mac_limit,
    })
}

fn check_socket(conf: &NetConf, p: &Policy) -> Result<(), (&'static str, String)> {
    for (field, v, allowed) in [
        ("socketOwner", &conf.socket_owner, &p.socket_owners),
        ("socketGroup", &conf.socket_group, &p.socket_groups),
    ] {
        if let Some(v) = v {
            if !allowed.contains(v) {
                let list: Vec<String> = allowed.iter().map(|a| format!("{a:?}")).collect();
                return Err((
                    field,
                    format!("{v:?} is not allowed (allowed: [{}])", list.join(", ")),
                ));
            }
        }
    }
    if let Some(m) = &conf.socket_mode {
        let bits = vhu_api::port::parse_mode(m).unwrap_or(0o777);
        if bits & !p.socket_mode != 0 {
            return Err((
                "socketMode",
                format!(
                    "{m:?} is wider than allowed (at most {:04o})",
                    p.socket_mode
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::INVALID_CONFIG;

    fn net(extra: &str) -> NetConf {
        NetConf::parse(
            format!(
                r#"{{"cniVersion":"1.0.0","name":"n","type":"vhu-cni","kind":"vhost-user"{extra}}}"#
            )
            .as_bytes(),
        )
        .unwrap()
    }

    fn node() -> NodeConfig {
        NodeConfig::parse(
            br#"
[default]
vlan = 0
[namespace.a]
vlan = 10
vlans = [11]
trunk = true
unpinned_mac = true
socket_owners = ["107"]
socket_mode = "0660"
kata_dan = true
"#,
            None,
        )
        .unwrap()
    }

    #[test]
    fn defaults_are_an_access_port_locked_to_its_mac() {
        let n = node();
        let a = admit(&net(""), &n, None).unwrap();
        assert_eq!(
            a,
            Admitted {
                vlan: Vlan::Access(0),
                mac_lock: true,
                flood_rate: None,
                flood_burst: None,
                mac_limit: None,
            }
        );
        let a = admit(&net(""), &n, Some("a")).unwrap();
        assert_eq!(a.vlan, Vlan::Access(10));
        let a = admit(&net(r#","vlan":11,"macLock":false"#), &n, Some("a")).unwrap();
        assert_eq!((a.vlan, a.mac_lock), (Vlan::Access(11), false));
        let t = admit(
            &net(
                r#","vlan":{"trunk":[10,11],"native":10},"socketOwner":"107","socketMode":"0640""#,
            ),
            &n,
            Some("a"),
        )
        .unwrap();
        assert!(matches!(t.vlan, Vlan::Trunk { .. }));
        let k = admit(&net(r#","kata":"dan""#), &n, Some("a")).unwrap();
        assert!(k.mac_lock);
    }

    #[test]
    fn what_the_policy_refuses() {
        let n = node();
        for (extra, ns, want) in [
            (
                r#","vlan":10"#,
                None,
                "vlan: VLAN 10 is not allowed (allowed: 0)",
            ),
            (
                r#","vlan":12"#,
                Some("a"),
                "VLAN 12 is not allowed (allowed: 10, 11)",
            ),
            (
                r#","vlan":{"trunk":[10]}"#,
                Some("b"),
                "a trunk port is not allowed",
            ),
            (
                r#","vlan":{"trunk":[10,12]}"#,
                Some("a"),
                "VLAN 12 of the trunk",
            ),
            (
                r#","macLock":false"#,
                None,
                "macLock: a port without a MAC lock",
            ),
            (
                r#","socketOwner":"0""#,
                Some("a"),
                "socketOwner: \"0\" is not allowed",
            ),
            (
                r#","socketGroup":"0""#,
                Some("a"),
                "socketGroup: \"0\" is not allowed",
            ),
            (
                r#","socketMode":"0666""#,
                Some("a"),
                "socketMode: \"0666\" is wider",
            ),
            (
                r#","socketOwner":"107""#,
                None,
                "socketOwner: \"107\" is not allowed",
            ),
            (
                r#","kata":"dan""#,
                None,
                "kata: writing Kata DAN entries is not allowed (kata_dan = false)",
            ),
        ] {
            let e = admit(&net(extra), &n, ns).unwrap_err();
            assert_eq!(e.code, INVALID_CONFIG);
            assert!(e.msg.contains(want), "{extra}: {:?} lacks {want:?}", e.msg);
        }
    }
}
