// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! A small HTTP/1.1 server side, enough for a control API on a Unix socket:
//! one request per connection (`Connection: close`), bodies sized by
//! `Content-Length`, strict limits.
//!
//! Input is hostile (any local process that can open the socket): the
//! request head is at most [`MAX_HEAD`] bytes (431 beyond), the body at most
//! [`MAX_BODY`] (413 beyond), a request line or header that does not parse
//! is a 400, `Transfer-Encoding` is refused (501) rather than half
//! supported, and nothing here panics or allocates without a bound.

use std::io::{self, Read, Write};

use vhu_api::client::first_value;

/// Longest request head (request line and headers).
pub const MAX_HEAD: usize = 16 * 1024;
/// Longest request body: a port object is a few hundred bytes.
pub const MAX_BODY: usize = 64 * 1024;
/// Most headers in a request.
pub const MAX_HEADERS: usize = 64;

/// A parsed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `POST`, ...
    pub method: String,
    /// The path, percent-decoded, without the query.
    pub path: String,
    /// The path's segments, each percent-decoded on its own (so that an
    /// encoded `/` in a port name stays in that name).
    pub segments: Vec<String>,
    /// The query's `key=value` pairs, percent-decoded, in order.
    pub query: Vec<(String, String)>,
    /// Header names (lower case) and values.
    pub headers: Vec<(String, String)>,
    /// The body (empty without `Content-Length`).
    pub body: Vec<u8>,
}

impl Request {
    /// The first value of a header (`name` in lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        first_value(&self.headers, name)
    }

    /// The first value of a query parameter.
    pub fn query(&self, key: &str) -> Option<&str> {
        first_value(&self.query, key)
    }

    /// The path's segments (`/ports/vm1/stats` -> `["ports", "vm1", "stats"]`;
    /// `/ports/` -> `["ports", ""]`: an empty segment is kept, not skipped).
    pub fn segments(&self) -> Vec<&str> {
        self.segments.iter().map(String::as_str).collect()
    }
}

/// Why a request could not be read; each maps to a status and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpError {
    /// The status to answer with.
    pub status: u16,
    /// What is wrong.
    pub message: String,
}

impl HttpError {
    fn new(status: u16, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }
}

/// Reads one request. `Err(None)`: the peer closed the connection or timed
/// out before a whole request (nothing to answer).
pub fn read_request(r: &mut impl Read) -> Result<Request, Option<HttpError>> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = find(&buf, b"\r\n\r\n") {
            break i;
        }
        if buf.len() > MAX_HEAD {
            return Err(Some(HttpError::new(
                431,
                format!("request head larger than {MAX_HEAD} bytes"),
            )));
        }
        match r.read(&mut chunk) {
            Ok(0) => {
                return Err(if buf.is_empty() {
                    None
                } else {
                    Some(HttpError::new(400, "request ends before its head does"))
                })
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Err(None),
        }
    };
    if head_end > MAX_HEAD {
        return Err(Some(HttpError::new(
            431,
            format!("request head larger than {MAX_HEAD} bytes"),
        )));
    }
    let mut req = parse_head(&buf[..head_end]).map_err(Some)?;
    let len = match req.header("content-length") {
        None => 0,
        Some(v) => {
            // Several Content-Length headers must agree (RFC 9110 8.6).
            let all: Vec<&str> = req
                .headers
                .iter()
                .filter(|(n, _)| n == "content-length")
                .map(|(_, v)| v.as_str())
                .collect();
            if all.iter().any(|x| *x != v) {
                return Err(Some(HttpError::new(
                    400,
                    "conflicting Content-Length headers",
                )));
            }
            if v.is_empty() || !v.bytes().all(|c| c.is_ascii_digit()) {
                return Err(Some(HttpError::new(
                    400,
                    format!("Content-Length {v:?} is not a number"),
                )));
            }
            match v.parse::<usize>() {
                Ok(n) if n <= MAX_BODY => n,
                _ => {
                    return Err(Some(HttpError::new(
                        413,
                        format!("request body larger than {MAX_BODY} bytes"),
                    )))
                }
            }
        }
    };
    if req.header("transfer-encoding").is_some() {
        return Err(Some(HttpError::new(
            501,
            "Transfer-Encoding is not supported; send the body with Content-Length",
        )));
    }
    let mut body = buf[head_end + 4..].to_vec();
    if body.len() > len {
        // Pipelined bytes after the body: one request per connection.
        body.truncate(len);
    }
    while body.len() < len {
        let want = (len - body.len()).min(chunk.len());
        match r.read(&mut chunk[..want]) {
            Ok(0) => {
                return Err(Some(HttpError::new(
                    400,
                    format!("body ends after {} of {len} bytes", body.len()),
                )))
            }
            Ok(n) => body.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Err(None),
        }
    }
    req.body = body;
    Ok(req)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn parse_head(head: &[u8]) -> Result<Request, HttpError> {
    let head = std::str::from_utf8(head)
        .map_err(|_| HttpError::new(400, "request head is not valid UTF-8"))?;
    let mut lines = head.split("\r\n");
    let line = lines.next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(HttpError::new(
            400,
            format!("malformed request line {line:?}"),
        ));
    };
    if method.is_empty() || !method.bytes().all(|c| c.is_ascii_uppercase()) {
        return Err(HttpError::new(400, format!("malformed method {method:?}")));
    }
    if version != "HTTP/1.1" && version != "HTTP/1.0" {
        return Err(HttpError::new(
            505,
            format!("unsupported HTTP version {version:?}"),
        ));
    }
    if !target.starts_with('/') {
        return Err(HttpError::new(
            400,
            format!("request target {target:?} must be an absolute path"),
        ));
    }
    let (raw_path, raw_query) = match target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (target, None),
    };
    let bad_path = || HttpError::new(400, format!("bad percent-encoding in {raw_path:?}"));
    let path = percent_decode(raw_path).ok_or_else(bad_path)?;
    let segments = raw_path[1..]
        .split('/')
        .map(|s| percent_decode(s).ok_or_else(bad_path))
        .collect::<Result<Vec<_>, _>>()?;
    let mut query = Vec::new();
    for pair in raw_query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let bad = || HttpError::new(400, format!("bad percent-encoding in query {pair:?}"));
        query.push((
            percent_decode(&k.replace('+', " ")).ok_or_else(bad)?,
            percent_decode(&v.replace('+', " ")).ok_or_else(bad)?,
        ));
    }
    let mut headers = Vec::new();
    for l in lines {
        if headers.len() == MAX_HEADERS {
            return Err(HttpError::new(
                431,
                format!("more than {MAX_HEADERS} headers"),
            ));
        }
        let Some((name, value)) = l.split_once(':') else {
            return Err(HttpError::new(400, format!("malformed header line {l:?}")));
        };
        if name.is_empty() || name.bytes().any(|c| !is_token(c)) {
            return Err(HttpError::new(
                400,
                format!("malformed header name {name:?}"),
            ));
        }
        headers.push((name.to_ascii_lowercase(), value.trim().to_owned()));
    }
    Ok(Request {
        method: method.to_owned(),
        path,
        segments,
        query,
        headers,
        body: Vec::new(),
    })
}

fn is_token(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c)
}

/// Decodes `%XX` escapes; `None` on a malformed escape or invalid UTF-8.
pub fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b.get(i + 1..i + 3)?;
            // Two hex digits exactly (`from_str_radix` alone takes `+1`).
            if !hex.iter().all(u8::is_ascii_hexdigit) {
                return None;
            }
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// A response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// `Content-Type`.
    pub content_type: &'static str,
    /// Extra headers.
    pub headers: Vec<(&'static str, String)>,
    /// Body.
    pub body: Vec<u8>,
}

impl Response {
    /// A JSON response.
    pub fn json(status: u16, body: Vec<u8>) -> Self {
        Self {
            status,
            content_type: "application/json",
            headers: Vec::new(),
            body,
        }
    }

    /// A plain-text response.
    pub fn text(status: u16, content_type: &'static str, body: impl Into<Vec<u8>>) -> Self {
        Self {
            status,
            content_type,
            headers: Vec::new(),
            body: body.into(),
        }
    }

    /// Writes status line, headers and body.
    ///
    /// # Errors
    /// The peer went away.
    pub fn write_to(&self, w: &mut impl Write) -> io::Result<()> {
        let mut head = format!("HTTP/1.1 {} {}\r\n", self.status, reason(self.status));
        // A 204 has no content, hence no type.
        if self.status != 204 {
            head.push_str(&format!("Content-Type: {}\r\n", self.content_type));
        }
        head.push_str(&format!(
            "Content-Length: {}\r\nConnection: close\r\n",
            self.body.len()
        ));
        for (n, v) in &self.headers {
            head.push_str(n);
            head.push_str(": ");
            head.push_str(v);
            head.push_str("\r\n");
        }
        head.push_str("\r\n");
        w.write_all(head.as_bytes())?;
        w.write_all(&self.body)?;
        w.flush()
    }
}

/// The reason phrase of a status code.
pub fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        413 => "Content Too Large",
        415 => "Unsupported Media Type",
        422 => "Unprocessable Content",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(raw: &[u8]) -> Result<Request, Option<HttpError>> {
        read_request(&mut &raw[..])
    }

    fn status(raw: &[u8]) -> u16 {
        read(raw).unwrap_err().expect("an answer").status
    }

    #[test]
    fn percent_decode_takes_two_hex_digits_exactly() {
        assert_eq!(percent_decode("a%2Fb%41").as_deref(), Some("a/bA"));
        for bad in ["%+1", "%-1", "% 1", "%1", "%", "%zz", "%C3%28"] {
            assert_eq!(percent_decode(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn parses_a_request() {
        let r = read(
            b"POST /ports/vm%201?count=5&seconds=2&x HTTP/1.1\r\nHost: x\r\n\
              Content-Type: application/json\r\nContent-Length: 4\r\n\r\n{}{}trailing",
        )
        .unwrap();
        assert_eq!(r.method, "POST");
        assert_eq!(r.path, "/ports/vm 1");
        assert_eq!(r.segments(), ["ports", "vm 1"]);
        assert_eq!(r.query("count"), Some("5"));
        assert_eq!(r.query("x"), Some(""));
        assert_eq!(r.header("content-type"), Some("application/json"));
        assert_eq!(r.body, b"{}{}");
        let r = read(b"GET /ports/a%2Fb/stats HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!(r.path, "/ports/a/b/stats");
        assert_eq!(r.segments(), ["ports", "a/b", "stats"]);
        let r = read(b"GET /ports/ HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!(r.segments(), ["ports", ""]);
        let r = read(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!(r.segments(), [""]);
    }

    #[test]
    fn body_arrives_in_pieces() {
        struct Slow<'a>(&'a [u8]);
        impl Read for Slow<'_> {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                let n = self.0.len().min(3).min(buf.len());
                buf[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let raw = b"PUT /log-level HTTP/1.1\r\nContent-Length: 12\r\n\r\n\"debug\"     ";
        let r = read_request(&mut Slow(raw)).unwrap();
        assert_eq!(r.body, b"\"debug\"     ");
    }

    #[test]
    fn refuses_bad_input_with_the_right_status() {
        assert_eq!(read(b"").unwrap_err(), None);
        assert_eq!(status(b"GET / HTTP/1.1\r\n"), 400);
        assert_eq!(status(b"GET /\r\n\r\n"), 400);
        assert_eq!(status(b"get / HTTP/1.1\r\n\r\n"), 400);
        assert_eq!(status(b"GET / HTTP/2\r\n\r\n"), 505);
        assert_eq!(status(b"GET x HTTP/1.1\r\n\r\n"), 400);
        assert_eq!(status(b"GET /%zz HTTP/1.1\r\n\r\n"), 400);
        assert_eq!(status(b"GET /%ff HTTP/1.1\r\n\r\n"), 400);
        assert_eq!(status(b"GET / HTTP/1.1\r\nNoColon\r\n\r\n"), 400);
        assert_eq!(status(b"GET / HTTP/1.1\r\nBad Name: x\r\n\r\n"), 400);
        assert_eq!(status(b"POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n"), 400);
        assert_eq!(
            status(b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n"),
            400
        );
        assert_eq!(
            status(b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab"),
            400
        );
        assert_eq!(
            status(b"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n"),
            413
        );
        assert_eq!(
            status(b"POST / HTTP/1.1\r\nContent-Length: 65537\r\n\r\n"),
            413
        );
        assert_eq!(
            status(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"),
            501
        );
        assert_eq!(
            status(b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nab"),
            400
        );
        let mut big = b"GET / HTTP/1.1\r\nX: ".to_vec();
        big.extend(std::iter::repeat_n(b'a', MAX_HEAD));
        big.extend_from_slice(b"\r\n\r\n");
        assert_eq!(status(&big), 431);
        let mut many = b"GET / HTTP/1.1\r\n".to_vec();
        for i in 0..=MAX_HEADERS {
            many.extend_from_slice(format!("H{i}: v\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        assert_eq!(status(&many), 431);
    }

    #[test]
    fn writes_a_response() {
        let mut out = Vec::new();
        let mut r = Response::json(404, b"{\"error\":\"no\"}".to_vec());
        r.headers.push(("Allow", "GET".into()));
        r.write_to(&mut out).unwrap();
        let s = String::from_utf8(out).unwrap();
        assert!(s.starts_with("HTTP/1.1 404 Not Found\r\n"), "{s}");
        assert!(s.contains("Content-Length: 14\r\n") && s.contains("Allow: GET\r\n"));
        assert!(s.ends_with("\r\n\r\n{\"error\":\"no\"}"));
        let mut out = Vec::new();
        Response::json(204, Vec::new()).write_to(&mut out).unwrap();
        let s = String::from_utf8(out).unwrap();
        assert_eq!(
            s,
            "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        );
    }
}
