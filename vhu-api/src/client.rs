// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! A small client of the control API over a connected Unix stream (the
//! caller connects, so that it can reach sockets of any path length): one
//! request per connection, as the switch serves them.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::ApiError;

/// How long a request may take before the client gives up.
pub const TIMEOUT: Duration = Duration::from_secs(10);
/// Largest answer read (a port list of thousands of ports fits).
pub const MAX_ANSWER: u64 = 64 * 1024 * 1024;

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The switch could not be reached or the connection broke.
    #[error("cannot talk to the switch")]
    Io(#[from] io::Error),
    /// The answer is not HTTP, or not the JSON expected.
    #[error("unexpected answer from the switch: {0}")]
    Protocol(String),
    /// The switch refused the request.
    #[error("{message} (HTTP {status})")]
    Refused {
        /// The status.
        status: u16,
        /// The switch's message.
        message: String,
    },
}

/// An answer's status line and headers; the body follows on the stream.
#[derive(Debug)]
pub struct Head {
    /// Status code.
    pub status: u16,
    /// Header names (lower case) and values.
    pub headers: Vec<(String, String)>,
}

impl Head {
    /// The first value of a header (`name` in lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        first_value(&self.headers, name)
    }
}

/// The value of the first `(key, value)` pair with this key: a header or a
/// query parameter (HTTP lets either repeat; the first one counts).
pub fn first_value<'a>(pairs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// Sends one request on `stream` and reads the status line and headers;
/// the body is what is left on the returned reader (the switch closes the
/// connection after it).
///
/// # Errors
/// I/O errors, or an answer that is not HTTP/1.1.
pub fn send(
    stream: UnixStream,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
) -> Result<(Head, BufReader<UnixStream>), ClientError> {
    send_request(stream, &format!("{method} {path}"), body)
}

/// [`send`] with the request line's method and path as one string
/// (`"GET /ports"`).
fn send_request(
    stream: UnixStream,
    line: &str,
    body: Option<&[u8]>,
) -> Result<(Head, BufReader<UnixStream>), ClientError> {
    stream.set_write_timeout(Some(TIMEOUT))?;
    let mut w = &stream;
    let mut req = format!("{line} HTTP/1.1\r\nHost: vhu\r\nConnection: close\r\n");
    if let Some(b) = body {
        req.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            b.len()
        ));
    }
    req.push_str("\r\n");
    w.write_all(req.as_bytes())?;
    if let Some(b) = body {
        w.write_all(b)?;
    }
    w.flush()?;
    let mut r = BufReader::new(stream);
    let mut line = String::new();
    r.read_line(&mut line)?;
    let status = line
        .strip_prefix("HTTP/1.1 ")
        .and_then(|s| s.get(..3))
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| ClientError::Protocol(format!("status line {:?}", line.trim_end())))?;
    let mut headers = Vec::new();
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 {
            return Err(ClientError::Protocol("answer ends in its headers".into()));
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((n, v)) = l.split_once(':') {
            headers.push((n.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
    Ok((Head { status, headers }, r))
}

/// Sends one request and reads the whole answer: `Ok` with status and body
/// for 2xx, [`ClientError::Refused`] with the switch's message otherwise.
///
/// # Errors
/// See [`ClientError`].
pub fn call(
    stream: UnixStream,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
) -> Result<(u16, Vec<u8>), ClientError> {
    stream.set_read_timeout(Some(TIMEOUT))?;
    let (head, r) = send_request(stream, &format!("{method} {path}"), body)?;
    let mut buf = Vec::new();
    r.take(MAX_ANSWER).read_to_end(&mut buf)?;
    if (200..300).contains(&head.status) {
        return Ok((head.status, buf));
    }
    let message = serde_json::from_slice::<ApiError>(&buf)
        .map(|e| e.error)
        .unwrap_or_else(|_| String::from_utf8_lossy(&buf).into_owned());
    Err(ClientError::Refused {
        status: head.status,
        message,
    })
}

/// [`call`] with a JSON body and a JSON answer.
///
/// # Errors
/// See [`ClientError`].
pub fn call_json<B: Serialize, T: DeserializeOwned>(
    stream: UnixStream,
    method: &str,
    path: &str,
    body: Option<&B>,
) -> Result<T, ClientError> {
    let body = body
        .map(serde_json::to_vec)
        .transpose()
        .map_err(|e| ClientError::Protocol(e.to_string()))?;
    let (_, answer) = call(stream, method, path, body.as_deref())?;
    serde_json::from_slice(&answer).map_err(|e| ClientError::Protocol(e.to_string()))
}

/// Percent-encodes a path segment (a port name in a URL).
pub fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::thread;

    use super::*;

    fn serve_once(answer: &'static [u8]) -> (UnixStream, thread::JoinHandle<Vec<u8>>) {
        let (a, mut b) = UnixStream::pair().unwrap();
        let t = thread::spawn(move || {
            // The whole request: its head and Content-Length bytes of body,
            // however many reads the client's writes take to arrive.
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                let n = b.read(&mut buf).unwrap();
                got.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&got);
                if let Some(end) = text.find("\r\n\r\n") {
                    let len: usize = text[..end]
                        .lines()
                        .find_map(|l| l.strip_prefix("Content-Length: "))
                        .map_or(0, |v| v.trim().parse().unwrap());
                    if got.len() >= end + 4 + len {
                        break;
                    }
                }
                if n == 0 {
                    break;
                }
            }
            b.write_all(answer).unwrap();
            got
        });
        (a, t)
    }

    #[test]
    fn success_and_refusal() {
        let (s, t) = serve_once(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{\"status\":\"ok\"}",
        );
        let h: crate::Health = call_json::<(), _>(s, "GET", "/live", None).unwrap();
        assert_eq!(h.status, "ok");
        let req = String::from_utf8(t.join().unwrap()).unwrap();
        assert!(req.starts_with("GET /live HTTP/1.1\r\n"), "{req}");

        let (s, t) = serve_once(b"HTTP/1.1 404 Not Found\r\n\r\n{\"error\":\"no port \\\"x\\\"\"}");
        match call(s, "DELETE", "/ports/x", Some(b"{}")) {
            Err(ClientError::Refused { status, message }) => {
                assert_eq!((status, message.as_str()), (404, "no port \"x\""));
            }
            other => panic!("{other:?}"),
        }
        let req = String::from_utf8(t.join().unwrap()).unwrap();
        assert!(
            req.contains("Content-Length: 2\r\n") && req.ends_with("\r\n\r\n{}"),
            "{req}"
        );

        let (s, _t) = serve_once(b"SSH-2.0\r\n");
        assert!(matches!(
            call(s, "GET", "/", None),
            Err(ClientError::Protocol(_))
        ));
    }

    #[test]
    fn segments_are_encoded() {
        assert_eq!(encode_segment("vm-1.a_b"), "vm-1.a_b");
        assert_eq!(encode_segment("a b/c"), "a%20b%2Fc");
    }
}
