// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! What the switch answers: a port with its state, per-queue statistics,
//! FDB entries, and the small bodies of the other routes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::mac::MacAddr;
use crate::port::PortSpec;

/// `GET /ports/{name}` and each element of `GET /ports`: the port object as
/// created, plus its `state`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PortView {
    /// The spec, as given (defaults not filled in).
    #[serde(flatten)]
    pub spec: PortSpec,
    /// What the port is doing now.
    pub state: PortState,
}

impl<'de> Deserialize<'de> for PortView {
    // By hand: `flatten` cannot be combined with the spec's
    // `deny_unknown_fields`.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let mut m = serde_json::Map::deserialize(d)?;
        let state = m
            .remove("state")
            .ok_or_else(|| D::Error::missing_field("state"))?;
        Ok(PortView {
            state: PortState::deserialize(state).map_err(D::Error::custom)?,
            spec: PortSpec::deserialize(serde_json::Value::Object(m)).map_err(D::Error::custom)?,
        })
    }
}

/// A port's live state.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortState {
    /// vhost-user: a frontend is connected and its rings run; uplinks: the
    /// interface is open.
    pub connected: bool,
    /// vhost-user: the virtio features the guest acked (0 when not
    /// connected).
    pub features: u64,
    /// Queue pairs (or uplink queues) carrying traffic.
    pub queue_pairs: u32,
    /// vhost-user: the socket's resolved path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket_path: Option<String>,
    /// The PMD thread serving the port.
    pub pmd: u32,
    /// Where the port is stored: `config` (the configuration file) or `api`
    /// (created through the API, persisted).
    pub origin: String,
    /// Why the port is down: a persisted port the switch could not create
    /// again at start (e.g. its TAP's network namespace is gone). It stays
    /// listed, and persisted, until it is removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Counters of one queue (pair), or of a whole port. `rx` is into the port's
/// guest or NIC, `tx` from it into the switch.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueStats {
    /// Frames delivered into the port.
    pub rx_packets: u64,
    /// Frames the port sent into the switch.
    pub tx_packets: u64,
    /// Bytes delivered into the port.
    pub rx_bytes: u64,
    /// Bytes the port sent into the switch.
    pub tx_bytes: u64,
    /// Frames for the port that were not delivered, by reason.
    pub rx_dropped: BTreeMap<String, u64>,
    /// Frames from the port that went nowhere, by reason.
    pub tx_dropped: BTreeMap<String, u64>,
}

impl QueueStats {
    /// Adds another queue's counts.
    pub fn add(&mut self, o: &QueueStats) {
        self.rx_packets += o.rx_packets;
        self.tx_packets += o.tx_packets;
        self.rx_bytes += o.rx_bytes;
        self.tx_bytes += o.tx_bytes;
        for (k, v) in &o.rx_dropped {
            *self.rx_dropped.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &o.tx_dropped {
            *self.tx_dropped.entry(k.clone()).or_default() += v;
        }
    }

    /// All drops into the port.
    pub fn rx_dropped_total(&self) -> u64 {
        self.rx_dropped.values().sum()
    }

    /// All drops from the port.
    pub fn tx_dropped_total(&self) -> u64 {
        self.tx_dropped.values().sum()
    }
}

/// `GET /ports/{name}/stats`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortStats {
    /// The port.
    pub port: String,
    /// The sum over its queues.
    pub total: QueueStats,
    /// Per queue (pair), by index.
    pub queues: Vec<QueueStats>,
    /// The port's share of the FDB.
    #[serde(default)]
    pub fdb: PortFdbStats,
}

/// A port's share of the FDB, in `GET /ports/{name}/stats`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortFdbStats {
    /// Addresses learned on the port now.
    pub learned: u64,
    /// Its quota: the port's `mac_limit`, or the switch's default for its
    /// kind.
    pub limit: u64,
    /// Source addresses not learned because the port held its quota or the
    /// table was full (once per address per source burst; their frames were
    /// forwarded).
    pub learn_refused: u64,
}

/// An element of `GET /fdb`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FdbEntryView {
    /// VLAN (0: untagged frames of ports without a VLAN mode).
    pub vlan: u16,
    /// The address.
    pub mac: MacAddr,
    /// The port it is on.
    pub port: String,
    /// Configured (never ages) rather than learned.
    #[serde(rename = "static")]
    pub is_static: bool,
    /// Seconds since it was last seen (0 for static entries).
    pub age_secs: u64,
}

/// `POST /fdb`: a static entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FdbAdd {
    /// The address (unicast).
    pub mac: MacAddr,
    /// The port.
    pub port: String,
    /// VLAN; default 0 (untagged frames of ports without a VLAN mode).
    #[serde(default)]
    pub vlan: u32,
}

/// `DELETE /fdb`: what was flushed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Flushed {
    /// Learned entries removed.
    pub flushed: u64,
}

/// `PUT /log-level` and its answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogLevel {
    /// A `tracing` filter: a level (`error`, `warn`, `info`, `debug`,
    /// `trace`) or directives such as `warn,vhu_switch=debug`.
    pub level: String,
}

/// `GET /live` and `GET /ready`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Health {
    /// `ok`, `ready`, or `starting`.
    pub status: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::port::PortKind;

    #[test]
    fn port_view_round_trip() {
        let mut spec = PortSpec::new("vm1", PortKind::VhostUser);
        spec.queues = Some(2);
        let v = PortView {
            spec,
            state: PortState {
                connected: true,
                features: 0x1_0000_0000,
                queue_pairs: 2,
                socket_path: Some("/run/vhu/sockets/vm1.sock".into()),
                pmd: 0,
                origin: "api".into(),
                error: None,
            },
        };
        let j = serde_json::to_value(&v).unwrap();
        assert_eq!(j["name"], "vm1");
        assert_eq!(j["state"]["queue_pairs"], 2);
        assert_eq!(serde_json::from_value::<PortView>(j).unwrap(), v);
        assert!(serde_json::from_str::<PortView>(r#"{"name":"a","kind":"tap"}"#).is_err());
    }
}
