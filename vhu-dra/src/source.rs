// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Where the driver reads a ResourceClaim that kubelet names (kubelet sends
//! only its namespace, name and UID).
//!
//! * [`ClaimSource::ApiServer`]: `GET /apis/resource.k8s.io/v1/namespaces/
//!   <ns>/resourceclaims/<name>` over plain HTTP to a local API proxy
//!   (`kubectl proxy` in the driver's pod, which holds the service
//!   account's credentials and speaks TLS to the API server);
//! * [`ClaimSource::Dir`]: `<dir>/<namespace>/<name>.json`, files the
//!   administrator (or a test) wrote, for a node without an API server.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::Duration;

use crate::claim::ResourceClaim;

/// Largest claim read.
const MAX_CLAIM: u64 = 4 * 1024 * 1024;
/// How long one read from the API server may take.
const TIMEOUT: Duration = Duration::from_secs(10);

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
            ClaimSource::ApiServer(addr) => http_get(
                addr,
                &format!("/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}"),
            )?,
        };
        serde_json::from_slice(&bytes).map_err(|e| format!("claim {namespace}/{name}: {e}"))
    }
}

/// One `GET` over HTTP/1.1; the body of a 200 answer.
fn http_get(addr: &str, path: &str) -> Result<Vec<u8>, String> {
    let err = |e: std::io::Error| format!("API server {addr}: {e}");
    let mut s = TcpStream::connect(addr).map_err(err)?;
    s.set_read_timeout(Some(TIMEOUT)).map_err(err)?;
    s.set_write_timeout(Some(TIMEOUT)).map_err(err)?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: application/json\r\nConnection: close\r\n\r\n"
    )
    .map_err(err)?;
    let mut buf = Vec::new();
    s.take(MAX_CLAIM).read_to_end(&mut buf).map_err(err)?;
    let end = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| format!("API server {addr}: the answer has no header end"))?;
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let status = head.split(' ').nth(1).unwrap_or("");
    let body = &buf[end + 4..];
    let chunked = head
        .lines()
        .any(|l| l.to_ascii_lowercase().starts_with("transfer-encoding:") && l.contains("chunked"));
    let body = if chunked {
        dechunk(body).ok_or_else(|| format!("API server {addr}: bad chunked body"))?
    } else {
        body.to_vec()
    };
    if status != "200" {
        return Err(format!(
            "API server {addr}: GET {path}: HTTP {status}: {}",
            String::from_utf8_lossy(&body)
                .chars()
                .take(300)
                .collect::<String>()
        ));
    }
    Ok(body)
}

/// Decodes a chunked body.
fn dechunk(mut b: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let nl = b.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&b[..nl]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        b = &b[nl + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(b.get(..size)?);
        b = b.get(size + 2..)?;
    }
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;

    use super::*;

    #[test]
    fn a_claim_is_read_from_the_api_proxy() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let claim = crate::claim::tests::claim_json("u-1", &serde_json::Value::Null).to_string();
        let t = std::thread::spawn(move || {
            let (mut c, _) = l.accept().unwrap();
            // The whole request head: closing with unread bytes would reset
            // the connection under the client's read.
            let mut req = Vec::new();
            let mut buf = [0u8; 4096];
            while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = c.read(&mut buf).unwrap();
                assert!(n > 0, "the request ended early");
                req.extend_from_slice(&buf[..n]);
            }
            let half = claim.len() / 2;
            write!(
                c,
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{}\r\n{:x}\r\n{}\r\n0\r\n\r\n",
                half,
                &claim[..half],
                claim.len() - half,
                &claim[half..]
            )
            .unwrap();
            String::from_utf8_lossy(&req).into_owned()
        });
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
