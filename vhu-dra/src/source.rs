// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Where the driver reads a ResourceClaim that kubelet names (kubelet sends
//! only its namespace, name and UID).
//!
//! * [`ClaimSource::ApiServer`]: `GET /apis/resource.k8s.io/v1/namespaces/
//!   <ns>/resourceclaims/<name>` through a local API proxy
//!   ([`crate::apiserver`]);
//! * [`ClaimSource::Dir`]: `<dir>/<namespace>/<name>.json`, files the
//!   administrator (or a test) wrote, for a node without an API server.

use std::io::Read;
use std::path::PathBuf;

use crate::apiserver;
use crate::claim::ResourceClaim;

/// Largest claim read.
const MAX_CLAIM: u64 = 4 * 1024 * 1024;

/// Where claims come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimSource {
    /// A plain-HTTP API endpoint, `host:port` (a local `kubectl proxy`).
    ApiServer(String),
    /// A directory of `<namespace>/<name>.json`.
    Dir(PathBuf),
}

impl ClaimSource {
    /// Reads claim `namespace/name` (both checked DNS names).
    ///
    /// # Errors
    /// Not found, unreachable, or not a ResourceClaim.
    pub fn get(&self, namespace: &str, name: &str) -> Result<ResourceClaim, String> {
        let bytes = match self {
            ClaimSource::Dir(d) => {
                let p = d.join(namespace).join(format!("{name}.json"));
                let f = std::fs::File::open(&p).map_err(|e| format!("{}: {e}", p.display()))?;
                let mut b = Vec::new();
                f.take(MAX_CLAIM)
                    .read_to_end(&mut b)
                    .map_err(|e| format!("{}: {e}", p.display()))?;
                b
            }
            ClaimSource::ApiServer(addr) => apiserver::get(
                addr,
                &format!("/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}"),
            )?,
        };
        serde_json::from_slice(&bytes).map_err(|e| format!("claim {namespace}/{name}: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_is_read_from_the_api_proxy() {
        let claim = crate::claim::tests::claim_json("u-1", &serde_json::Value::Null).to_string();
        let half = claim.len() / 2;
        let (addr, t) = crate::apiserver::tests::serve_once(format!(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{}\r\n{:x}\r\n{}\r\n0\r\n\r\n",
            half,
            &claim[..half],
            claim.len() - half,
            &claim[half..]
        ));
        let c = ClaimSource::ApiServer(addr)
            .get("tenant", "vm1-net-x7k2p")
            .unwrap();
        assert_eq!(c.metadata.uid, "u-1");
        let req = t.join().unwrap();
        assert!(req.starts_with(
            "GET /apis/resource.k8s.io/v1/namespaces/tenant/resourceclaims/vm1-net-x7k2p HTTP/1.1"
        ));
    }

    #[test]
    fn a_claim_is_read_from_a_directory() {
        let d = std::env::temp_dir().join(format!("vhu-dra-src-{}", std::process::id()));
        std::fs::create_dir_all(d.join("tenant")).unwrap();
        let claim = crate::claim::tests::claim_json("u-2", &serde_json::Value::Null);
        std::fs::write(d.join("tenant/c.json"), claim.to_string()).unwrap();
        let s = ClaimSource::Dir(d.clone());
        assert_eq!(s.get("tenant", "c").unwrap().metadata.uid, "u-2");
        assert!(s.get("tenant", "missing").is_err());
        std::fs::remove_dir_all(d).unwrap();
    }
}
