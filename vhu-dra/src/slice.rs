// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The node's switch as a `resource.k8s.io/v1` ResourceSlice: one device
//! per switch, allocatable many times (`allowMultipleAllocations`,
//! KEP-5075), with capacities a claim consumes (`ports`, `queuePairs`) and
//! attributes a DeviceClass or a claim selects on with CEL:
//!
//! | attribute | type | meaning |
//! |---|---|---|
//! | `switch` | string | the switch's name on the node |
//! | `numaNode` | int | the NUMA node its PMD threads run on |
//! | `maxQueues` | int | most queue pairs one port may have on this node |
//! | `maxMtu` | int | largest MTU a port may have on this node |
//! | `vhostUser`, `multiqueue`, `mergeableRxBuffers`, `eventIdx`, `checksumOffload`, `tso` | bool | virtio-net features the switch's ports offer |
//! | `driverVersion` | version | this driver's version |
//!
//! Unqualified names are in the driver's domain (`vhu.dev/numaNode` in a
//! CEL expression: `device.attributes["vhu.dev"].numaNode`).

use serde_json::{json, Value};

/// What the slice says about the node's switch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwitchInfo {
    /// The node (`spec.nodeName`; also the pool's name).
    pub node: String,
    /// The driver.
    pub driver: String,
    /// The switch's name (the device's name: a DNS label).
    pub switch: String,
    /// NUMA node.
    pub numa_node: u32,
    /// Ports the switch takes (the `ports` capacity).
    pub ports: u32,
    /// Most queue pairs per port.
    pub max_queues: u32,
    /// Largest MTU.
    pub max_mtu: u32,
    /// The slice's generation (bumped when the content changes).
    pub generation: u64,
}

/// The ResourceSlice of the node's switch.
pub fn resource_slice(s: &SwitchInfo) -> Value {
    let int = |v: u32| json!({ "int": v });
    let yes = json!({"bool": true});
    json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": format!("{}-{}", s.node, s.driver.replace('.', "-"))},
        "spec": {
            "driver": s.driver,
            "nodeName": s.node,
            "pool": {"name": s.node, "generation": s.generation, "resourceSliceCount": 1},
            "devices": [{
                "name": s.switch,
                "allowMultipleAllocations": true,
                "attributes": {
                    "switch": {"string": s.switch},
                    "numaNode": int(s.numa_node),
                    "maxQueues": int(s.max_queues),
                    "maxMtu": int(s.max_mtu),
                    "vhostUser": yes, "multiqueue": yes, "mergeableRxBuffers": yes,
                    "eventIdx": yes, "checksumOffload": yes, "tso": yes,
                    "driverVersion": {"version": env!("CARGO_PKG_VERSION")},
                },
                "capacity": {
                    "ports": {
                        "value": s.ports.to_string(),
                        "requestPolicy": {"default": "1", "validRange": {"min": "1", "max": "1"}},
                    },
                    "queuePairs": {
                        "value": (u64::from(s.ports) * u64::from(s.max_queues)).to_string(),
                        "requestPolicy": {"default": "1",
                            "validRange": {"min": "1", "max": s.max_queues.to_string(), "step": "1"}},
                    },
                },
            }],
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_switch_is_one_shared_device_with_capacity() {
        let s = resource_slice(&SwitchInfo {
            node: "node-a".into(),
            driver: "vhu.dev".into(),
            switch: "vhu".into(),
            numa_node: 0,
            ports: 1024,
            max_queues: 8,
            max_mtu: 9000,
            generation: 1,
        });
        assert_eq!(s["apiVersion"], "resource.k8s.io/v1");
        assert_eq!(s["metadata"]["name"], "node-a-vhu-dev");
        let d = &s["spec"]["devices"][0];
        assert_eq!(d["allowMultipleAllocations"], true);
        assert_eq!(d["capacity"]["ports"]["value"], "1024");
        assert_eq!(d["capacity"]["queuePairs"]["value"], "8192");
        assert_eq!(d["attributes"]["maxQueues"]["int"], 8);
        assert_eq!(s["spec"]["pool"]["resourceSliceCount"], 1);
    }
}
