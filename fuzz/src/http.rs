// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The control API on raw bytes: [`read_request`] over a byte reader, then
//! [`handle`] with an in-memory switch ([`Fake`]) that keeps its ports, its
//! FDB and its log filter, and the API's real OpenAPI document.
//!
//! Input: up to [`MAX_REQUESTS`] raw HTTP requests separated by [`SEP`],
//! each on a connection of its own, against one switch (so that a POST can
//! meet the port an earlier one made).
//!
//! Checks, per request:
//! - a request that does not read gets 400, 413, 431, 501 or 505 with a
//!   message; nothing to answer only for an empty connection;
//! - a request that reads has an upper-case method and exactly its
//!   `Content-Length` of body;
//! - the answer's status is one the OpenAPI document lists for that path
//!   and method (404 for an unknown path, 405 with `Allow` for another
//!   method, and 400 for an unknown query parameter, which the document
//!   does not list everywhere);
//! - every 4xx/5xx body is JSON `{"error": "..."}` with a non-empty message,
//!   and a refused request changed nothing (the state is compared with a
//!   snapshot); a GET never changes anything;
//! - what a success says is what happened: the port created or removed, the
//!   FDB entry added, the learned entries flushed (their number), the log
//!   filter set, the port list as long as the switch's, a capture only of a
//!   port that exists, with its limits in range.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

use serde_json::Value;
use vhu_api::{
    FdbAdd, FdbEntryView, MacAddr, PortKind, PortSpec, PortState, PortStats, PortView, QueueStats,
};
use vhu_switch::api::http::{read_request, Request};
use vhu_switch::api::routes::{
    handle, Control, Refusal, Reply, MAX_CAPTURE_COUNT, MAX_CAPTURE_SECONDS,
};

/// Separates the requests of one input.
pub const SEP: &[u8] = b"\n~~~\n";
/// Most requests one input makes.
pub const MAX_REQUESTS: usize = 16;
/// Most FDB entries the fake holds (then 409).
pub const FDB_CAPACITY: usize = 8;
/// Interfaces the fake host has (others: 422).
pub const HOST_IFACES: &[&str] = &["eth0", "eth1", "veth-a"];

// ===== the fake switch =====

/// What the fake switch holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct State {
    /// Ports, in creation order; `cfg*` ones come from the configuration
    /// file and cannot be deleted (409).
    pub ports: Vec<PortSpec>,
    /// FDB entries, static and learned.
    pub fdb: Vec<FdbEntryView>,
    /// The log filter.
    pub level: String,
}

impl Default for State {
    fn default() -> Self {
        let mut up = PortSpec::new("cfg0", PortKind::AfPacket);
        up.interface = Some("eth0".into());
        let learned = |m: u8, vlan: u16| FdbEntryView {
            vlan,
            mac: MacAddr([2, 0, 0, 0, 0, m]),
            port: "cfg0".into(),
            is_static: false,
            age_secs: 3,
        };
        Self {
            ports: vec![up, PortSpec::new("vm0", PortKind::VhostUser)],
            fdb: vec![learned(0xa0, 0), learned(0xa1, 10)],
            level: "info".into(),
        }
    }
}

/// An in-memory [`Control`]: atomic changes under one lock, refusals that
/// change nothing.
#[derive(Debug, Default)]
pub struct Fake {
    s: Mutex<State>,
}

impl Fake {
    /// A copy of the state.
    pub fn snapshot(&self) -> State {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.s.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn view(s: &PortSpec) -> PortView {
    PortView {
        spec: s.clone(),
        state: PortState {
            origin: if s.name.starts_with("cfg") {
                "config".into()
            } else {
                "api".into()
            },
            ..PortState::default()
        },
    }
}

/// A filter of `level` or `target=level` directives.
fn valid_filter(f: &str) -> bool {
    const LEVELS: &[&str] = &["off", "error", "warn", "info", "debug", "trace"];
    f.split(',').all(|d| {
        let level = d.rsplit_once('=').map_or(d, |(t, l)| {
            if t.is_empty()
                || !t
                    .bytes()
                    .all(|c| c.is_ascii_alphanumeric() || b"_:-".contains(&c))
            {
                ""
            } else {
                l
            }
        });
        LEVELS.contains(&level.trim())
    })
}

impl Control for Fake {
    fn ready(&self) -> bool {
        self.lock().ports.iter().any(|p| p.name.starts_with("cfg"))
    }
    fn ports(&self) -> Vec<PortView> {
        let mut v: Vec<PortView> = self.lock().ports.iter().map(view).collect();
        v.sort_by(|a, b| a.spec.name.cmp(&b.spec.name));
        v
    }
    fn port(&self, name: &str) -> Option<PortView> {
        self.lock().ports.iter().find(|p| p.name == name).map(view)
    }
    fn add_port(&self, spec: PortSpec) -> Result<PortView, Refusal> {
        let mut s = self.lock();
        if s.ports.iter().any(|p| p.name == spec.name) {
            return Err(Refusal::conflict(format!("port {:?} exists", spec.name)));
        }
        if spec.socket.is_some() && s.ports.iter().any(|p| p.socket == spec.socket) {
            return Err(Refusal::conflict("another port has this socket"));
        }
        if let Some(i) = &spec.interface {
            if s.ports.iter().any(|p| p.interface.as_ref() == Some(i)) {
                return Err(Refusal::conflict(format!("interface {i:?} is in use")));
            }
            if spec.kind != PortKind::Tap && !HOST_IFACES.contains(&i.as_str()) {
                return Err(Refusal::invalid(format!("interface: no interface {i:?}")));
            }
        }
        s.ports.push(spec.clone());
        Ok(view(&spec))
    }
    fn remove_port(&self, name: &str) -> Result<(), Refusal> {
        let mut s = self.lock();
        if !s.ports.iter().any(|p| p.name == name) {
            return Err(Refusal::not_found(format!("no port {name:?}")));
        }
        if name.starts_with("cfg") {
            return Err(Refusal::conflict(format!(
                "port {name:?} is in the configuration file"
            )));
        }
        s.ports.retain(|p| p.name != name);
        s.fdb.retain(|e| e.port != name);
        Ok(())
    }
    fn port_stats(&self, name: &str) -> Option<PortStats> {
        let s = self.lock();
        let p = s.ports.iter().find(|p| p.name == name)?;
        // One (idle) queue pair per configured queue.
        let queues = vec![QueueStats::default(); p.queues() as usize];
        Some(PortStats {
            port: p.name.clone(),
            total: QueueStats::default(),
            queues,
            fdb: Default::default(),
        })
    }
    fn fdb(&self) -> Vec<FdbEntryView> {
        self.lock().fdb.clone()
    }
    fn fdb_add(&self, e: FdbAdd) -> Result<FdbEntryView, Refusal> {
        let mut s = self.lock();
        if !s.ports.iter().any(|p| p.name == e.port) {
            return Err(Refusal::not_found(format!("no port {:?}", e.port)));
        }
        let vlan = u16::try_from(e.vlan).map_err(|_| Refusal::invalid("vlan: out of range"))?;
        let v = FdbEntryView {
            vlan,
            mac: e.mac,
            port: e.port,
            is_static: true,
            age_secs: 0,
        };
        match s.fdb.iter().position(|x| (x.vlan, x.mac) == (vlan, v.mac)) {
            Some(i) => s.fdb[i] = v.clone(),
            None if s.fdb.len() >= FDB_CAPACITY => {
                return Err(Refusal::conflict("the FDB is full"));
            }
            None => s.fdb.push(v.clone()),
        }
        Ok(v)
    }
    fn fdb_flush(&self) -> u64 {
        let mut s = self.lock();
        let n = s.fdb.len();
        s.fdb.retain(|e| e.is_static);
        (n - s.fdb.len()) as u64
    }
    fn metrics(&self) -> String {
        let s = self.lock();
        format!(
            "vhu_ports {}\nvhu_fdb_entries {}\n",
            s.ports.len(),
            s.fdb.len()
        )
    }
    fn set_log_level(&self, filter: &str) -> Result<(), Refusal> {
        if !valid_filter(filter) {
            return Err(Refusal::invalid(format!("{filter:?} is not a log filter")));
        }
        self.lock().level = filter.into();
        Ok(())
    }
}

// ===== the documented statuses =====

struct Doc {
    json: String,
    /// (path pattern with `{}`, METHOD) -> statuses.
    statuses: BTreeMap<(String, String), Vec<u16>>,
}

fn doc() -> &'static Doc {
    static DOC: OnceLock<Doc> = OnceLock::new();
    DOC.get_or_init(|| {
        let json = vhu_switch::api::openapi::json();
        let v: Value = serde_json::from_str(&json).expect("the OpenAPI document is JSON");
        let mut statuses = BTreeMap::new();
        for (path, item) in v["paths"].as_object().expect("paths") {
            for (method, op) in item.as_object().expect("path item") {
                if method == "parameters" {
                    continue;
                }
                let codes = op["responses"]
                    .as_object()
                    .expect("responses")
                    .keys()
                    .map(|k| k.parse().expect("a numeric status"))
                    .collect();
                statuses.insert((path.replace("{name}", "{}"), method.to_uppercase()), codes);
            }
        }
        Doc { json, statuses }
    })
}

/// The route pattern of a path, as the API's table names it.
fn pattern(segs: &[&str]) -> Option<&'static str> {
    Some(match segs {
        ["live"] => "/live",
        ["ready"] => "/ready",
        ["ports"] => "/ports",
        ["ports", _] => "/ports/{}",
        ["ports", _, "stats"] => "/ports/{}/stats",
        ["ports", _, "capture"] => "/ports/{}/capture",
        ["fdb"] => "/fdb",
        ["metrics"] => "/metrics",
        ["log-level"] => "/log-level",
        ["openapi.json"] => "/openapi.json",
        _ => return None,
    })
}

// ===== the harness =====

/// What one request got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Nothing to answer (an empty connection).
    Nothing,
    /// The request did not read: this status.
    Unread(u16),
    /// A response with this status.
    Status(u16),
    /// A capture stream.
    Capture,
}

/// Runs the checks (always true: every input is a valid one).
pub fn run(data: &[u8]) -> bool {
    answers(data);
    true
}

/// Runs the checks and says what each request got.
pub fn answers(data: &[u8]) -> Vec<Answer> {
    let fake = Fake::default();
    split(data)
        .into_iter()
        .take(MAX_REQUESTS)
        .map(|raw| one(&fake, raw))
        .collect()
}

fn split(data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = data;
    while let Some(i) = rest.windows(SEP.len()).position(|w| w == SEP) {
        out.push(&rest[..i]);
        rest = &rest[i + SEP.len()..];
    }
    out.push(rest);
    out
}

fn one(fake: &Fake, raw: &[u8]) -> Answer {
    let mut r = raw;
    let req = match read_request(&mut r) {
        Err(None) => {
            assert!(raw.is_empty(), "no answer to {} bytes", raw.len());
            return Answer::Nothing;
        }
        Err(Some(e)) => {
            assert!(
                [400, 413, 431, 501, 505].contains(&e.status),
                "read_request: {e:?}"
            );
            assert!(!e.message.trim().is_empty(), "read_request: {e:?}");
            return Answer::Unread(e.status);
        }
        Ok(req) => req,
    };
    assert!(!req.method.is_empty() && req.method.bytes().all(|c| c.is_ascii_uppercase()));
    let want_len = req
        .header("content-length")
        .map_or(0, |v| v.parse().expect("checked"));
    assert_eq!(req.body.len(), want_len, "body length");
    assert!(req
        .headers
        .iter()
        .all(|(n, _)| *n == n.to_ascii_lowercase()));

    let before = fake.snapshot();
    let reply = handle(fake, &doc().json, &req);
    let after = fake.snapshot();
    let segs = req.segments();
    let route = pattern(&segs);
    match reply {
        Reply::Capture(c) => {
            assert_eq!(
                (req.method.as_str(), route),
                ("GET", Some("/ports/{}/capture"))
            );
            assert_eq!(after, before, "a capture changed the switch");
            assert!(
                before.ports.iter().any(|p| p.name == c.port),
                "capture of {:?}",
                c.port
            );
            assert_eq!(c.port, segs[1]);
            assert!(c.count.is_none_or(|n| (1..=MAX_CAPTURE_COUNT).contains(&n)));
            assert!(c
                .seconds
                .is_none_or(|n| (1..=MAX_CAPTURE_SECONDS).contains(&n)));
            Answer::Capture
        }
        Reply::Full(resp) => {
            let status = resp.status;
            let body = String::from_utf8_lossy(&resp.body).into_owned();
            let what = format!("{} {} -> {status} {body}", req.method, req.path);
            let error_msg = if status >= 400 {
                assert_eq!(resp.content_type, "application/json", "{what}");
                let v: Value = serde_json::from_slice(&resp.body).expect(&what);
                let o = v.as_object().expect(&what);
                assert_eq!(o.len(), 1, "{what}");
                let m = o["error"].as_str().expect(&what);
                assert!(!m.trim().is_empty(), "{what}");
                assert_eq!(after, before, "refused but changed: {what}");
                Some(m.to_owned())
            } else {
                None
            };
            let allowed: Vec<u16> = match route {
                None => vec![404],
                Some(p) => match doc().statuses.get(&(p.to_owned(), req.method.clone())) {
                    None => {
                        if status == 405 {
                            let allow = resp.headers.iter().find(|(n, _)| *n == "Allow");
                            let allow = allow.expect("405 without Allow");
                            for m in allow.1.split(", ") {
                                assert!(doc().statuses.contains_key(&(p.to_owned(), m.into())));
                            }
                        }
                        vec![405]
                    }
                    Some(codes) => {
                        let query = error_msg
                            .as_deref()
                            .is_some_and(|m| m.starts_with("unknown query parameter"));
                        let mut c = codes.clone();
                        if query && !req.query.is_empty() {
                            c.push(400);
                        }
                        c
                    }
                },
            };
            assert!(
                allowed.contains(&status),
                "undocumented status: {what} (documented: {allowed:?})"
            );
            if status < 400 {
                success(
                    &req,
                    route.unwrap_or_default(),
                    status,
                    &resp.body,
                    &before,
                    &after,
                );
            }
            Answer::Status(status)
        }
    }
}

/// What a success says matches what happened to the switch.
fn success(req: &Request, route: &str, status: u16, body: &[u8], before: &State, after: &State) {
    let json = || -> Value { serde_json::from_slice(body).expect("a JSON answer") };
    let name = req.segments.get(1).cloned().unwrap_or_default();
    match (req.method.as_str(), route) {
        ("POST", "/ports") => {
            assert_eq!(status, 201);
            let v = json();
            let n = v["name"].as_str().expect("the port's name");
            assert_eq!(after.ports.len(), before.ports.len() + 1);
            assert_eq!(after.ports.last().map(|p| p.name.as_str()), Some(n));
            assert_eq!(after.fdb, before.fdb);
        }
        ("DELETE", "/ports/{}") => {
            assert_eq!(status, 204);
            assert!(body.is_empty());
            assert_eq!(after.ports.len() + 1, before.ports.len());
            assert!(after.ports.iter().all(|p| p.name != name));
            assert!(after.fdb.iter().all(|e| e.port != name));
        }
        ("POST", "/fdb") => {
            assert_eq!(status, 201);
            let e: FdbEntryView = serde_json::from_value(json()).expect("an FDB entry");
            assert!(e.is_static && after.fdb.contains(&e));
            assert_eq!(after.ports, before.ports);
        }
        ("DELETE", "/fdb") => {
            let learned = before.fdb.iter().filter(|e| !e.is_static).count();
            assert_eq!(json(), serde_json::json!({ "flushed": learned }));
            assert!(after.fdb.iter().all(|e| e.is_static));
        }
        ("PUT", "/log-level") => {
            let v = json();
            assert_eq!(v["level"].as_str(), Some(after.level.as_str()));
            assert!(valid_filter(&after.level));
        }
        ("GET", r) => {
            assert_eq!(after, before, "GET {r} changed the switch");
            match r {
                "/ports" => assert_eq!(json().as_array().map(Vec::len), Some(after.ports.len())),
                "/ports/{}" => assert_eq!(json()["name"].as_str(), Some(name.as_str())),
                "/fdb" => assert_eq!(json().as_array().map(Vec::len), Some(after.fdb.len())),
                "/openapi.json" => assert_eq!(body, doc().json.as_bytes()),
                "/ports/{}/stats" => {
                    let v = json();
                    assert_eq!(v["port"].as_str(), Some(name.as_str()));
                    let p = after.ports.iter().find(|p| p.name == name).expect("port");
                    assert_eq!(
                        v["queues"].as_array().map(Vec::len),
                        Some(p.queues() as usize)
                    );
                }
                "/live" | "/ready" => {
                    json();
                }
                _ => {}
            }
        }
        (m, r) => panic!("{m} {r}: a success the API does not have"),
    }
}

// ===== seeds =====

fn request(method: &str, target: &str, body: &str) -> Vec<u8> {
    let mut r = format!("{method} {target} HTTP/1.1\r\nHost: vhu\r\n");
    if !body.is_empty() {
        r.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    r.push_str("\r\n");
    r.push_str(body);
    r.into_bytes()
}

fn session(reqs: &[(&str, &str, &str)]) -> Vec<u8> {
    reqs.iter()
        .map(|(m, t, b)| request(m, t, b))
        .collect::<Vec<_>>()
        .join(SEP)
}

/// The committed seeds, by file name, with what each request must get:
/// every route with a valid request, a session that makes and removes a
/// port and its FDB entry, and refusals of each kind.
pub fn seeds() -> Vec<(String, Vec<u8>, Vec<Answer>)> {
    use Answer::{Capture, Status, Unread};
    const VM1: &str = r#"{"name":"vm1","kind":"vhost-user","socket":"vm1.sock","mac":["02:00:00:00:00:01"],"vlan":{"trunk":[10,20],"native":10},"mtu":9000,"queues":2}"#;
    const TAP: &str = r#"{"name":"tap1","kind":"tap","interface":"vhutap1","mtu":1500}"#;
    const FDB: &str = r#"{"mac":"02:00:00:00:00:09","port":"vm1","vlan":10}"#;
    let mut v = vec![
        (
            "routes-get".to_owned(),
            session(&[
                ("GET", "/live", ""),
                ("GET", "/ready", ""),
                ("GET", "/ports", ""),
                ("GET", "/ports/vm0", ""),
                ("GET", "/ports/vm0/stats", ""),
                ("GET", "/ports/vm0/capture?count=10&seconds=5", ""),
                ("GET", "/fdb", ""),
                ("GET", "/metrics", ""),
                ("GET", "/openapi.json", ""),
            ]),
            vec![
                Status(200),
                Status(200),
                Status(200),
                Status(200),
                Status(200),
                Capture,
                Status(200),
                Status(200),
                Status(200),
            ],
        ),
        (
            "port-lifecycle".to_owned(),
            session(&[
                ("POST", "/ports", VM1),
                ("POST", "/ports", TAP),
                ("POST", "/fdb", FDB),
                ("GET", "/ports/vm1", ""),
                ("DELETE", "/fdb", ""),
                ("DELETE", "/ports/vm1", ""),
                ("GET", "/ports/vm1", ""),
                ("PUT", "/log-level", r#"{"level":"warn,vhu_switch=debug"}"#),
            ]),
            vec![
                Status(201),
                Status(201),
                Status(201),
                Status(200),
                Status(200),
                Status(204),
                Status(404),
                Status(200),
            ],
        ),
        (
            "refusals".to_owned(),
            session(&[
                ("POST", "/ports", r#"{"name":"vm0","kind":"vhost-user"}"#),
                (
                    "POST",
                    "/ports",
                    r#"{"name":"x","kind":"af_xdp","interface":"nope0"}"#,
                ),
                (
                    "POST",
                    "/ports",
                    r#"{"name":"x","kind":"vhost-user","vlan":4095}"#,
                ),
                (
                    "POST",
                    "/ports",
                    r#"{"name":"x","kind":"vhost-user","socket":null}"#,
                ),
                ("POST", "/ports", "{"),
                ("DELETE", "/ports/cfg0", ""),
                ("DELETE", "/ports/ghost", ""),
                (
                    "POST",
                    "/fdb",
                    r#"{"mac":"ff:ff:ff:ff:ff:ff","port":"vm0"}"#,
                ),
                ("PUT", "/log-level", r#"{"level":"loud"}"#),
                ("PATCH", "/ports", ""),
                ("GET", "/nowhere", ""),
                ("GET", "/live?verbose=1", ""),
                ("GET", "/ports/vm0/capture?count=0", ""),
            ]),
            vec![
                Status(409),
                Status(422),
                Status(422),
                Status(400),
                Status(400),
                Status(409),
                Status(404),
                Status(422),
                Status(422),
                Status(405),
                Status(404),
                Status(400),
                Status(422),
            ],
        ),
    ];
    let mut fdb_full = vec![("POST", "/ports", VM1)];
    let entries: Vec<String> = (0..FDB_CAPACITY)
        .map(|i| format!(r#"{{"mac":"02:00:00:00:01:{i:02x}","port":"vm1"}}"#))
        .collect();
    fdb_full.extend(entries.iter().map(|e| ("POST", "/fdb", e.as_str())));
    let mut want = vec![Status(201)];
    want.extend((0..FDB_CAPACITY).map(|i| Status(if i < FDB_CAPACITY - 2 { 201 } else { 409 })));
    v.push(("fdb-full".to_owned(), session(&fdb_full), want));
    v.push((
        "unreadable".to_owned(),
        [
            &b"GET /live HTTP/2.0\r\n\r\n"[..],
            b"get /live HTTP/1.1\r\n\r\n",
            b"POST /ports HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"POST /ports HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n",
            b"POST /ports HTTP/1.1\r\nContent-Length: 5\r\n\r\n{}",
            b"GET /ports/a%2Fb HTTP/1.1\r\n\r\n",
        ]
        .join(SEP),
        vec![
            Unread(505),
            Unread(400),
            Unread(501),
            Unread(413),
            Unread(400),
            Status(404),
        ],
    ));
    v
}
