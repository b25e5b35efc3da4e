// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! A minimal client of the Kubernetes API through a local API proxy
//! (`kubectl proxy` in the driver's pod: it holds the service account's
//! token and speaks TLS to the API server), over plain HTTP/1.1, one
//! request per connection:
//!
//! * [`get`]: read an object;
//! * [`apply`]: server-side apply (`PATCH`, `application/apply-patch+yaml`,
//!   field manager [`FIELD_MANAGER`], forced): creates the object or
//!   updates the fields this driver owns, leaving other managers' fields
//!   (another driver's entries of a claim's `status.devices`, a list keyed
//!   by driver, pool and device) alone;
//! * [`publish_slice`], [`apply_claim_status`]: the two objects the driver
//!   writes.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::{json, Value};

/// The field manager of the driver's server-side applies.
pub const FIELD_MANAGER: &str = "vhu-dra";
/// Largest answer read.
const MAX_ANSWER: u64 = 4 * 1024 * 1024;
/// How long one request may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// One request; the body of a 2xx answer.
fn call(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<(&str, &[u8])>,
) -> Result<Vec<u8>, String> {
    let err = |e: std::io::Error| format!("API server {addr}: {e}");
    let mut s = TcpStream::connect(addr).map_err(err)?;
    s.set_read_timeout(Some(TIMEOUT)).map_err(err)?;
    s.set_write_timeout(Some(TIMEOUT)).map_err(err)?;
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: application/json\r\nConnection: close\r\n"
    );
    if let Some((ctype, b)) = body {
        req.push_str(&format!(
            "Content-Type: {ctype}\r\nContent-Length: {}\r\n",
            b.len()
        ));
    }
    req.push_str("\r\n");
    let mut bytes = req.into_bytes();
    if let Some((_, b)) = body {
        bytes.extend_from_slice(b);
    }
    s.write_all(&bytes).map_err(err)?;
    let mut buf = Vec::new();
    s.take(MAX_ANSWER).read_to_end(&mut buf).map_err(err)?;
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
    if !status.starts_with('2') || status.len() != 3 {
        return Err(format!(
            "API server {addr}: {method} {path}: HTTP {status}: {}",
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

/// `GET path`: the object's JSON.
///
/// # Errors
/// Unreachable, or not a 2xx answer.
pub fn get(addr: &str, path: &str) -> Result<Vec<u8>, String> {
    call(addr, "GET", path, None)
}

/// Server-side apply of `object` at `path`.
///
/// # Errors
/// Unreachable, or refused.
pub fn apply(addr: &str, path: &str, object: &Value) -> Result<Vec<u8>, String> {
    let body = object.to_string();
    call(
        addr,
        "PATCH",
        &format!("{path}?fieldManager={FIELD_MANAGER}&force=true"),
        Some(("application/apply-patch+yaml", body.as_bytes())),
    )
}

/// Creates or updates the node's ResourceSlice.
///
/// # Errors
/// See [`apply`].
pub fn publish_slice(addr: &str, slice: &Value) -> Result<(), String> {
    let name = slice["metadata"]["name"]
        .as_str()
        .ok_or("the slice has no name")?;
    apply(
        addr,
        &format!("/apis/resource.k8s.io/v1/resourceslices/{name}"),
        slice,
    )
    .map(|_| ())
}

/// Sets this driver's entries of claim `namespace/name`'s
/// `status.devices` (KEP-4817) to `devices` (none: removes them).
///
/// # Errors
/// See [`apply`].
pub fn apply_claim_status(
    addr: &str,
    namespace: &str,
    name: &str,
    devices: Vec<Value>,
) -> Result<(), String> {
    let object = json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "status": {"devices": devices},
    });
    apply(
        addr,
        &format!("/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}/status"),
        &object,
    )
    .map(|_| ())
}

#[cfg(test)]
pub(crate) mod tests {
    use std::net::TcpListener;

    use super::*;

    /// A one-request server answering `answer`; returns its address and
    /// the request it got (head and body).
    pub(crate) fn serve_once(answer: String) -> (String, std::thread::JoinHandle<String>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let t = std::thread::spawn(move || {
            let (mut c, _) = l.accept().unwrap();
            // The whole request (head and Content-Length bytes): closing
            // with unread bytes would reset the connection under the
            // client's read.
            let mut req = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                if let Some(end) = req.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&req[..end]).to_ascii_lowercase();
                    let len: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length: "))
                        .map_or(0, |v| v.trim().parse().unwrap());
                    if req.len() >= end + 4 + len {
                        break;
                    }
                }
                let n = c.read(&mut buf).unwrap();
                assert!(n > 0, "the request ended early");
                req.extend_from_slice(&buf[..n]);
            }
            c.write_all(answer.as_bytes()).unwrap();
            String::from_utf8_lossy(&req).into_owned()
        });
        (addr, t)
    }

    #[test]
    fn the_slice_is_applied_server_side() {
        let (addr, t) = serve_once("HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}".into());
        let slice = crate::slice::resource_slice(&crate::slice::SwitchInfo {
            node: "n1".into(),
            driver: "vhu.dev".into(),
            switch: "vhu".into(),
            numa_node: 0,
            ports: 8,
            max_queues: 2,
            max_mtu: 9000,
            generation: 1,
        });
        publish_slice(&addr, &slice).unwrap();
        let req = t.join().unwrap();
        assert!(
            req.starts_with(
                "PATCH /apis/resource.k8s.io/v1/resourceslices/n1-vhu-dev?fieldManager=vhu-dra&force=true HTTP/1.1\r\n"
            ),
            "{req}"
        );
        assert!(
            req.contains("Content-Type: application/apply-patch+yaml\r\n"),
            "{req}"
        );
        let body: Value = serde_json::from_str(req.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        assert_eq!(body, slice);
    }

    #[test]
    fn claim_status_and_refusals() {
        let (addr, t) = serve_once("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}".into());
        let dev = json!({"driver": "vhu.dev", "pool": "n1", "device": "vhu",
            "networkData": {"hardwareAddress": "02:00:00:00:00:01"}});
        apply_claim_status(&addr, "ns", "c", vec![dev.clone()]).unwrap();
        let req = t.join().unwrap();
        assert!(
            req.starts_with(
                "PATCH /apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c/status?"
            ),
            "{req}"
        );
        let body: Value = serde_json::from_str(req.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        assert_eq!(body["status"]["devices"][0], dev);
        assert_eq!(body["kind"], "ResourceClaim");

        let (addr, _t) =
            serve_once("HTTP/1.1 403 Forbidden\r\nContent-Length: 9\r\n\r\nforbidden".into());
        let e = apply_claim_status(&addr, "ns", "c", Vec::new()).unwrap_err();
        assert!(e.contains("HTTP 403: forbidden"), "{e}");
    }
}
