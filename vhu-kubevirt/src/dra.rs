// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The socket of a `resourceClaim` network, from the DRA driver's device
//! metadata (KEP-5304) mounted in the pod:
//! `<root>/<resourceclaimtemplates|resourceclaims>/<claim>/<request>/<driver>-metadata.json`,
//! a JSON stream whose `metadata.resource.k8s.io/v1alpha1` `DeviceMetadata`
//! object is read (objects of other versions are skipped).
//!
//! As KubeVirt's vhostuser network binding plugin reads it: the first
//! device with the attribute `vhost-user-path` (a string) gives the socket,
//! and its `mtu` (an int, 68-9702) is mandatory. `vhu-dra`'s own attributes
//! are used when present: `mode` (the VM's side, libvirt's spelling;
//! without it `server`, as that plugin always writes), `mac` (the MAC the
//! port is locked to) and `queues` (the port's queue pairs).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::netinfo::{check_path, Resolver, SocketInfo, VmRole};
use crate::vmi::Claim;

/// The metadata's `apiVersion`.
pub const API_VERSION: &str = "metadata.resource.k8s.io/v1alpha1";
/// Largest metadata file read.
const MAX_FILE: u64 = 1024 * 1024;
/// The MTU range KubeVirt's vhostuser plugin accepts.
const MTU: std::ops::RangeInclusive<i64> = 68..=9702;

/// The metadata files that may hold `claim`'s, in the order they are
/// looked at.
pub fn candidates(root: &Path, driver: &str, claim: &Claim) -> Vec<PathBuf> {
    let subdirs: &[&str] = match claim.from_template {
        Some(true) => &["resourceclaimtemplates"],
        Some(false) => &["resourceclaims"],
        None => &["resourceclaimtemplates", "resourceclaims"],
    };
    subdirs
        .iter()
        .map(|s| {
            root.join(s)
                .join(&claim.claim)
                .join(&claim.request)
                .join(format!("{driver}-metadata.json"))
        })
        .collect()
}

/// The socket `claim`'s metadata names; `Ok(None)` when no file is there
/// (yet).
///
/// # Errors
/// A file that is there but is not usable metadata.
pub fn read(root: &Path, driver: &str, claim: &Claim) -> Result<Option<SocketInfo>, String> {
    for path in candidates(root, driver, claim) {
        let text = match std::fs::File::open(&path) {
            Ok(f) => {
                let mut b = Vec::new();
                std::io::Read::read_to_end(&mut std::io::Read::take(f, MAX_FILE), &mut b)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                b
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        return parse(&text, claim)
            .map(Some)
            .map_err(|e| format!("{}: {e}", path.display()));
    }
    Ok(None)
}

/// The socket of each claim-backed network (`(network, claim)`), keyed by
/// network. Blocks up to [`Resolver::wait`] for every metadata file to be
/// there (a network driver may write it late, KEP-5304).
///
/// # Errors
/// A file still missing after the wait, or one that is not usable.
pub fn resolve(
    r: &Resolver,
    claims: &[(String, Claim)],
) -> Result<BTreeMap<String, SocketInfo>, String> {
    let deadline = Instant::now() + r.wait;
    let mut out = BTreeMap::new();
    for (net, claim) in claims {
        loop {
            if let Some(s) = read(&r.dra_root, &r.dra_driver, claim)? {
                out.insert(net.clone(), s);
                break;
            }
            if Instant::now() >= deadline {
                let looked: Vec<String> = candidates(&r.dra_root, &r.dra_driver, claim)
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect();
                return Err(format!(
                    "network {net:?}: no DRA device metadata of driver {} after {:?} (looked at {}); \
                     is the claim's container given the claim (resources.claims)?",
                    r.dra_driver,
                    r.wait,
                    looked.join(", ")
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    Ok(out)
}

/// Reads the socket out of a metadata stream.
///
/// # Errors
/// No `v1alpha1` object, no device with `vhost-user-path`, a bad value.
pub fn parse(text: &[u8], claim: &Claim) -> Result<SocketInfo, String> {
    let mut found = None;
    for obj in serde_json::Deserializer::from_slice(text).into_iter::<Value>() {
        let obj = obj.map_err(|e| format!("not a JSON stream: {e}"))?;
        if obj["apiVersion"] == API_VERSION && obj["kind"] == "DeviceMetadata" {
            found = Some(obj);
            break;
        }
    }
    let md = found.ok_or_else(|| format!("no {API_VERSION} DeviceMetadata"))?;
    let devices = md["requests"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|r| r["devices"].as_array().into_iter().flatten());
    for d in devices {
        let a = &d["attributes"];
        let Some(path) = a.get("vhost-user-path") else {
            continue;
        };
        let path = path["string"]
            .as_str()
            .ok_or("attribute vhost-user-path is not a string")?;
        let net = format!("{}/{}", claim.claim, claim.request);
        check_path(&net, path)?;
        let mtu = a["mtu"]["int"]
            .as_i64()
            .ok_or("the mandatory attribute mtu is missing or not an int")?;
        if !MTU.contains(&mtu) {
            return Err(format!("attribute mtu {mtu} is outside 68-9702"));
        }
        let role = match a["mode"]["string"].as_str() {
            None | Some("server") => VmRole::Server,
            Some("client") => VmRole::Client,
            Some(m) => return Err(format!("attribute mode {m:?} is neither server nor client")),
        };
        let queues = match a["queues"]["int"].as_i64() {
            None => None,
            Some(q) => Some(
                u32::try_from(q)
                    .ok()
                    .filter(|q| *q > 0)
                    .ok_or_else(|| format!("attribute queues {q} is not a queue count"))?,
            ),
        };
        return Ok(SocketInfo {
            path: path.to_owned(),
            role,
            mtu: u32::try_from(mtu).ok(),
            mac: a["mac"]["string"].as_str().map(str::to_owned),
            queues,
        });
    }
    Err("no device has the attribute vhost-user-path".into())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn claim() -> Claim {
        Claim {
            claim: "net".into(),
            request: "vhu".into(),
            from_template: None,
        }
    }

    /// What vhu-dra writes (docs/dra.md).
    pub(crate) const VHU_DRA: &str = r#"{"apiVersion": "metadata.resource.k8s.io/v1alpha1", "kind": "DeviceMetadata",
 "metadata": {"name": "vm1-net-x", "namespace": "t", "uid": "u", "generation": 1},
 "podClaimName": "net",
 "requests": [{"name": "vhu", "devices": [{"driver": "vhu.dev", "pool": "n", "name": "vhu",
   "attributes": {"vhost-user-path": {"string": "/var/run/vhu/dra/net/vhu/sock"}, "mtu": {"int": 1500},
     "mode": {"string": "server"}, "queues": {"int": 2}, "mac": {"string": "02:00:00:00:00:07"},
     "port": {"string": "dra-x"}},
   "networkData": {"hardwareAddress": "02:00:00:00:00:07"}}]}]}"#;

    #[test]
    fn vhu_dra_metadata_and_another_driver_s() {
        let s = parse(VHU_DRA.as_bytes(), &claim()).unwrap();
        assert_eq!(s.path, "/var/run/vhu/dra/net/vhu/sock");
        assert_eq!(
            (s.role, s.mtu, s.queues),
            (VmRole::Server, Some(1500), Some(2))
        );
        assert_eq!(s.mac.as_deref(), Some("02:00:00:00:00:07"));
        // An OVS-DPDK-style file: only the two mandatory keys, after an
        // object of a newer version.
        let other = r#"{"apiVersion": "metadata.resource.k8s.io/v1beta1", "kind": "DeviceMetadata"}
{"apiVersion": "metadata.resource.k8s.io/v1alpha1", "kind": "DeviceMetadata", "requests": [{"name": "vhu",
 "devices": [{"driver": "d", "pool": "p", "name": "n", "attributes": {"vhost-user-path": {"string": "/var/run/x/vhost.sock"}, "mtu": {"int": 9000}}}]}]}"#;
        let s = parse(other.as_bytes(), &claim()).unwrap();
        assert_eq!(
            (s.role, s.mtu, s.queues, s.mac),
            (VmRole::Server, Some(9000), None, None)
        );
    }

    #[test]
    fn bad_metadata_is_refused() {
        for (text, why) in [
            (VHU_DRA.replace("\"mtu\": {\"int\": 1500},", ""), "mtu"),
            (VHU_DRA.replace("1500", "20000"), "outside"),
            (
                VHU_DRA.replace("/var/run/vhu/dra/net/vhu/sock", "/var/run/../etc/sock"),
                "..",
            ),
            (
                VHU_DRA.replace("vhost-user-path", "other"),
                "vhost-user-path",
            ),
            (VHU_DRA.replace("v1alpha1", "v9"), "no metadata"),
            (VHU_DRA.replace("\"server\"", "\"both\""), "mode"),
        ] {
            let e = parse(text.as_bytes(), &claim()).unwrap_err();
            assert!(
                e.contains(why) || (why == "no metadata" && e.contains("no ")),
                "{why}: {e}"
            );
        }
    }

    #[test]
    fn files_are_found_where_kubevirt_looks() {
        let root = std::env::temp_dir().join(format!("vhu-kv-dra-{}", std::process::id()));
        let mut c = claim();
        assert_eq!(read(&root, "vhu.dev", &c).unwrap(), None);
        let dir = root.join("resourceclaims/net/vhu");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("vhu.dev-metadata.json"), VHU_DRA).unwrap();
        assert!(read(&root, "vhu.dev", &c).unwrap().is_some());
        c.from_template = Some(true);
        assert_eq!(read(&root, "vhu.dev", &c).unwrap(), None);
        assert_eq!(read(&root, "other.dev", &claim()).unwrap(), None);
        std::fs::remove_dir_all(root).unwrap();
    }
}
