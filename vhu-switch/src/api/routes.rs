// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The route table and the request handlers: parse, validate, call the
//! switch through [`Control`], answer. A refused request changes nothing and
//! gets `{"error": "..."}` with its status:
//!
//! | status | when |
//! |---|---|
//! | 400 | malformed JSON, wrong types, `null` for a field, unknown fields or query parameters |
//! | 404 | unknown route or port |
//! | 405 | known route, other method (with `Allow`) |
//! | 409 | duplicate port name or socket, interface in use, a port of the configuration file deleted, a second capture on a port |
//! | 413 | body too large |
//! | 415 | a body labelled other than `application/json` (or `curl -d`'s default, `application/x-www-form-urlencoded`) |
//! | 422 | invalid values (bad MAC, VLAN out of 1-4094, MTU out of range, no such interface, ...) |
//!
//! | route | answer |
//! |---|---|
//! | `GET /live` | 200 `{"status": "ok"}` while the process serves requests |
//! | `GET /ready` | 200 `{"status": "ready"}` once the configured and persisted ports exist; 503 `{"status": "starting"}` before |
//! | `GET /ports` | 200, every port with its state, by name |
//! | `POST /ports` | 201, the new port; persisted |
//! | `GET /ports/{name}` | 200, the port with its state |
//! | `DELETE /ports/{name}` | 204; persisted |
//! | `GET /ports/{name}/stats` | 200, counters per queue and in total |
//! | `GET /ports/{name}/capture?count=N&seconds=S` | 200, a pcap stream of the frames crossing the port |
//! | `GET /fdb` | 200, the FDB entries |
//! | `POST /fdb` | 201, a static entry |
//! | `DELETE /fdb` | 200 `{"flushed": N}`: learned entries removed |
//! | `GET /metrics` | 200, Prometheus text |
//! | `PUT /log-level` | 200 `{"level": "..."}` |
//! | `GET /openapi.json` | 200, the OpenAPI 3 document of this API |

use serde::de::DeserializeOwned;
use serde::Serialize;
use vhu_api::{ApiError, FdbAdd, Health, LogLevel, PortSpec};

use super::http::{Request, Response};
use crate::control::RefusalKind;
pub use crate::control::{Control, Refusal};

/// A capture request, to be streamed by the server loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureRequest {
    /// The port.
    pub port: String,
    /// Stop after this many frames.
    pub count: Option<u64>,
    /// Stop after this many seconds.
    pub seconds: Option<u64>,
}

/// What a request gets.
#[derive(Debug)]
pub enum Reply {
    /// A complete response.
    Full(Response),
    /// A pcap stream.
    Capture(CaptureRequest),
}

/// Most frames one capture may ask for.
pub const MAX_CAPTURE_COUNT: u64 = 10_000_000;
/// Longest capture.
pub const MAX_CAPTURE_SECONDS: u64 = 86_400;

/// The routes: path pattern (`{}` is a port name) and the methods each has.
pub const ROUTES: &[(&str, &[&str])] = &[
    ("/live", &["GET"]),
    ("/ready", &["GET"]),
    ("/ports", &["GET", "POST"]),
    ("/ports/{}", &["GET", "DELETE"]),
    ("/ports/{}/stats", &["GET"]),
    ("/ports/{}/capture", &["GET"]),
    ("/fdb", &["GET", "POST", "DELETE"]),
    ("/metrics", &["GET"]),
    ("/log-level", &["PUT"]),
    ("/openapi.json", &["GET"]),
];

fn error(status: u16, msg: impl Into<String>) -> Response {
    let body = serde_json::to_vec(&ApiError::new(msg)).unwrap_or_default();
    Response::json(status, body)
}

fn json<T: Serialize>(status: u16, v: &T) -> Response {
    match serde_json::to_vec(v) {
        Ok(b) => Response::json(status, b),
        Err(e) => error(500, format!("cannot encode the answer: {e}")),
    }
}

fn refused(r: Refusal) -> Response {
    let status = match r.kind {
        RefusalKind::NotFound => 404,
        RefusalKind::Conflict => 409,
        RefusalKind::Invalid => 422,
        RefusalKind::Failed => 500,
    };
    error(status, r.message)
}

/// The route pattern of a path and the port name in it, if any.
fn route_of(segs: &[&str]) -> Option<(&'static str, Option<String>)> {
    let name = |s: &str| Some(s.to_owned());
    Some(match segs {
        ["live"] => ("/live", None),
        ["ready"] => ("/ready", None),
        ["ports"] => ("/ports", None),
        ["ports", n] => ("/ports/{}", name(n)),
        ["ports", n, "stats"] => ("/ports/{}/stats", name(n)),
        ["ports", n, "capture"] => ("/ports/{}/capture", name(n)),
        ["fdb"] => ("/fdb", None),
        ["metrics"] => ("/metrics", None),
        ["log-level"] => ("/log-level", None),
        ["openapi.json"] => ("/openapi.json", None),
        _ => return None,
    })
}

fn body<T: DeserializeOwned>(req: &Request) -> Result<T, Response> {
    if let Some(ct) = req.header("content-type") {
        let media = ct.split(';').next().unwrap_or("").trim();
        // `curl -d` labels its body as a form: take it as the JSON it is.
        let json = media.eq_ignore_ascii_case("application/json")
            || media.eq_ignore_ascii_case("application/x-www-form-urlencoded");
        if !json {
            return Err(error(
                415,
                format!("the body must be application/json, not {media:?}"),
            ));
        }
    }
    if req.body.is_empty() {
        return Err(error(400, "this request needs a JSON body"));
    }
    let malformed = |e: serde_json::Error| error(400, format!("malformed request: {e}"));
    // No field takes `null`: an absent field is left out, not null (serde
    // would take a null as absent).
    let v: serde_json::Value = serde_json::from_slice(&req.body).map_err(malformed)?;
    if let Some(at) = null_at(&v, "") {
        return Err(error(
            400,
            format!("malformed request: {at} is null; leave the field out instead"),
        ));
    }
    serde_json::from_slice(&req.body).map_err(malformed)
}

/// Where the first `null` in `v` is (`vlan.native`, `mac[1]`), if any.
fn null_at(v: &serde_json::Value, at: &str) -> Option<String> {
    use serde_json::Value;
    match v {
        Value::Null => Some(if at.is_empty() { "the body" } else { at }.to_owned()),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .find_map(|(i, x)| null_at(x, &format!("{at}[{i}]"))),
        Value::Object(m) => m.iter().find_map(|(k, x)| {
            let at = if at.is_empty() {
                k.clone()
            } else {
                format!("{at}.{k}")
            };
            null_at(x, &at)
        }),
        _ => None,
    }
}

fn allow_query(req: &Request, allowed: &[&str]) -> Result<(), Response> {
    match req
        .query
        .iter()
        .find(|(k, _)| !allowed.contains(&k.as_str()))
    {
        None => Ok(()),
        Some((k, _)) if allowed.is_empty() => Err(error(
            400,
            format!("unknown query parameter {k:?}: this route takes none"),
        )),
        Some((k, _)) => Err(error(
            400,
            format!("unknown query parameter {k:?} (this route takes {allowed:?})"),
        )),
    }
}

fn query_u64(req: &Request, key: &str, max: u64) -> Result<Option<u64>, Response> {
    let Some(v) = req.query(key) else {
        return Ok(None);
    };
    let n: u64 = v
        .parse()
        .map_err(|_| error(400, format!("{key}={v:?} is not a whole number")))?;
    if n == 0 || n > max {
        return Err(error(422, format!("{key}={n} is out of range 1-{max}")));
    }
    Ok(Some(n))
}

/// Answers one request. `openapi` is the API's document, as JSON.
pub fn handle(ctl: &dyn Control, openapi: &str, req: &Request) -> Reply {
    Reply::Full(match dispatch(ctl, openapi, req) {
        Ok(Reply::Capture(c)) => return Reply::Capture(c),
        Ok(Reply::Full(r)) | Err(r) => r,
    })
}

fn dispatch(ctl: &dyn Control, openapi: &str, req: &Request) -> Result<Reply, Response> {
    let segs = req.segments();
    let Some((route, name)) = route_of(&segs) else {
        return Err(error(
            404,
            format!(
                "no route {} {}; GET /openapi.json lists them",
                req.method, req.path
            ),
        ));
    };
    let methods = ROUTES
        .iter()
        .find(|(p, _)| *p == route)
        .map_or(&[][..], |(_, m)| *m);
    if !methods.contains(&req.method.as_str()) {
        let mut r = error(
            405,
            format!(
                "{} does not take {}; it takes {}",
                req.path,
                req.method,
                methods.join(", ")
            ),
        );
        r.headers.push(("Allow", methods.join(", ")));
        return Err(r);
    }
    let name = name.unwrap_or_default();
    let unknown_port = |n: &str| error(404, format!("no port {n:?}; GET /ports lists them"));
    let full = |r: Response| Ok(Reply::Full(r));
    if route != "/ports/{}/capture" {
        allow_query(req, &[])?;
    }
    match (req.method.as_str(), route) {
        ("GET", "/live") => full(json(
            200,
            &Health {
                status: "ok".into(),
            },
        )),
        ("GET", "/ready") => full(if ctl.ready() {
            json(
                200,
                &Health {
                    status: "ready".into(),
                },
            )
        } else {
            json(
                503,
                &Health {
                    status: "starting".into(),
                },
            )
        }),
        ("GET", "/ports") => full(json(200, &ctl.ports())),
        ("POST", "/ports") => {
            let spec: PortSpec = body(req)?;
            if let Err(errs) = spec.validate() {
                let msg = errs
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ");
                return Err(error(422, msg));
            }
            full(ctl.add_port(spec).map_or_else(refused, |v| json(201, &v)))
        }
        ("GET", "/ports/{}") => full(
            ctl.port(&name)
                .map_or_else(|| unknown_port(&name), |v| json(200, &v)),
        ),
        ("DELETE", "/ports/{}") => full(match ctl.remove_port(&name) {
            Ok(()) => Response::text(204, "application/json", Vec::new()),
            Err(r) => refused(r),
        }),
        ("GET", "/ports/{}/stats") => full(
            ctl.port_stats(&name)
                .map_or_else(|| unknown_port(&name), |s| json(200, &s)),
        ),
        ("GET", "/ports/{}/capture") => {
            allow_query(req, &["count", "seconds"])?;
            let count = query_u64(req, "count", MAX_CAPTURE_COUNT)?;
            let seconds = query_u64(req, "seconds", MAX_CAPTURE_SECONDS)?;
            if ctl.port(&name).is_none() {
                return Err(unknown_port(&name));
            }
            Ok(Reply::Capture(CaptureRequest {
                port: name,
                count,
                seconds,
            }))
        }
        ("GET", "/fdb") => full(json(200, &ctl.fdb())),
        ("POST", "/fdb") => {
            let e: FdbAdd = body(req)?;
            if !vhu_api::port::VLAN_IDS.contains(&e.vlan) && e.vlan != 0 {
                return Err(error(
                    422,
                    format!("vlan: VLAN id {} is out of range 0-4094", e.vlan),
                ));
            }
            if !e.mac.is_unicast() {
                return Err(error(
                    422,
                    format!("mac: {} is not a unicast address", e.mac),
                ));
            }
            full(ctl.fdb_add(e).map_or_else(refused, |v| json(201, &v)))
        }
        ("DELETE", "/fdb") => full(json(
            200,
            &vhu_api::Flushed {
                flushed: ctl.fdb_flush(),
            },
        )),
        ("GET", "/metrics") => full(Response::text(
            200,
            crate::metrics::CONTENT_TYPE,
            ctl.metrics(),
        )),
        ("PUT", "/log-level") => {
            let l: LogLevel = body(req)?;
            if l.level.trim().is_empty() {
                return Err(error(
                    422,
                    "level: must not be empty; give a filter such as \"info\" or \"warn,vhu_switch=debug\"",
                ));
            }
            full(match ctl.set_log_level(&l.level) {
                Ok(()) => json(200, &l),
                Err(r) => refused(r),
            })
        }
        ("GET", "/openapi.json") => full(Response::text(
            200,
            "application/json",
            openapi.as_bytes().to_vec(),
        )),
        _ => Err(error(500, "route without a handler")),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use vhu_api::{FdbEntryView, MacAddr, PortKind, PortState, PortStats, PortView};

    use super::*;

    /// An in-memory switch: ports and static FDB entries, nothing else.
    #[derive(Default)]
    struct Fake {
        ports: Mutex<Vec<PortSpec>>,
        fdb: Mutex<Vec<FdbEntryView>>,
        level: Mutex<String>,
    }

    fn view(s: &PortSpec) -> PortView {
        PortView {
            spec: s.clone(),
            state: PortState::default(),
        }
    }

    impl Control for Fake {
        fn ready(&self) -> bool {
            true
        }
        fn ports(&self) -> Vec<PortView> {
            self.ports.lock().unwrap().iter().map(view).collect()
        }
        fn port(&self, name: &str) -> Option<PortView> {
            self.ports
                .lock()
                .unwrap()
                .iter()
                .find(|p| p.name == name)
                .map(view)
        }
        fn add_port(&self, spec: PortSpec) -> Result<PortView, Refusal> {
            let mut p = self.ports.lock().unwrap();
            if p.iter().any(|x| x.name == spec.name) {
                return Err(Refusal::conflict(format!("port {:?} exists", spec.name)));
            }
            p.push(spec.clone());
            Ok(view(&spec))
        }
        fn remove_port(&self, name: &str) -> Result<(), Refusal> {
            let mut p = self.ports.lock().unwrap();
            let n = p.len();
            p.retain(|x| x.name != name);
            if p.len() == n {
                Err(Refusal::not_found(format!("no port {name:?}")))
            } else {
                Ok(())
            }
        }
        fn port_stats(&self, name: &str) -> Option<PortStats> {
            self.port(name).map(|_| PortStats {
                port: name.into(),
                ..PortStats::default()
            })
        }
        fn fdb(&self) -> Vec<FdbEntryView> {
            self.fdb.lock().unwrap().clone()
        }
        fn fdb_add(&self, e: FdbAdd) -> Result<FdbEntryView, Refusal> {
            if self.port(&e.port).is_none() {
                return Err(Refusal::not_found("no such port"));
            }
            let v = FdbEntryView {
                vlan: e.vlan as u16,
                mac: e.mac,
                port: e.port,
                is_static: true,
                age_secs: 0,
            };
            self.fdb.lock().unwrap().push(v.clone());
            Ok(v)
        }
        fn fdb_flush(&self) -> u64 {
            0
        }
        fn metrics(&self) -> String {
            "vhu_fdb_entries 0\n".into()
        }
        fn set_log_level(&self, f: &str) -> Result<(), Refusal> {
            if f == "bogus" {
                return Err(Refusal::invalid("bad filter"));
            }
            *self.level.lock().unwrap() = f.into();
            Ok(())
        }
    }

    fn req(method: &str, target: &str, body: &str) -> Request {
        let raw = format!(
            "{method} {target} HTTP/1.1\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        super::super::http::read_request(&mut raw.as_bytes()).unwrap()
    }

    fn call(ctl: &Fake, method: &str, target: &str, body: &str) -> (u16, String) {
        match handle(ctl, "{}", &req(method, target, body)) {
            Reply::Full(r) => (r.status, String::from_utf8(r.body).unwrap()),
            Reply::Capture(c) => (0, format!("{c:?}")),
        }
    }

    #[test]
    fn port_lifecycle() {
        let f = Fake::default();
        assert_eq!(call(&f, "GET", "/ports", "").0, 200);
        const VM1: &str = r#"{"name":"vm1","kind":"vhost-user"}"#;
        let (s, b) = call(&f, "POST", "/ports", VM1);
        assert_eq!(s, 201, "{b}");
        assert_eq!(call(&f, "GET", "/ports/vm1", "").0, 200);
        assert_eq!(call(&f, "GET", "/ports/vm1/stats", "").0, 200);
        let (s, b) = call(&f, "POST", "/ports", VM1);
        assert_eq!((s, b.contains("exists")), (409, true));
        assert_eq!(call(&f, "DELETE", "/ports/vm1", "").0, 204);
        assert_eq!(call(&f, "DELETE", "/ports/vm1", "").0, 404);
        assert_eq!(call(&f, "GET", "/ports/vm1", "").0, 404);
    }

    #[test]
    fn bad_requests_change_nothing() {
        let f = Fake::default();
        f.add_port(PortSpec::new("keep", PortKind::VhostUser))
            .unwrap();
        let cases: &[(&str, &str, &str, u16, &str)] = &[
            ("POST", "/ports", "{", 400, "malformed request"),
            ("POST", "/ports", "", 400, "needs a JSON body"),
            ("POST", "/ports", "[]", 400, "malformed"),
            (
                "POST",
                "/ports",
                r#"{"name":"a","kind":"vhost-user","x":1}"#,
                400,
                "unknown field",
            ),
            (
                "POST",
                "/ports",
                r#"{"name":"a","kind":"vhost-user","vlan":4095}"#,
                422,
                "out of range",
            ),
            (
                "POST",
                "/ports",
                r#"{"name":"a","kind":"vhost-user","mac":["01:00:00:00:00:00"]}"#,
                422,
                "unicast",
            ),
            (
                "POST",
                "/ports",
                r#"{"name":"keep","kind":"vhost-user"}"#,
                409,
                "exists",
            ),
            ("GET", "/nope", "", 404, "no route"),
            ("PATCH", "/ports", "", 405, "does not take PATCH"),
            ("GET", "/log-level", "", 405, "takes PUT"),
            (
                "GET",
                "/ports?verbose=1",
                "",
                400,
                "unknown query parameter",
            ),
            (
                "GET",
                "/ports/keep/capture?count=x",
                "",
                400,
                "not a whole number",
            ),
            (
                "GET",
                "/ports/keep/capture?count=0",
                "",
                422,
                "out of range",
            ),
            (
                "GET",
                "/ports/keep/capture?snaplen=1",
                "",
                400,
                "unknown query",
            ),
            ("GET", "/ports/ghost/capture", "", 404, "no port"),
            (
                "POST",
                "/fdb",
                r#"{"mac":"02:00:00:00:00:01","port":"ghost"}"#,
                404,
                "",
            ),
            (
                "POST",
                "/fdb",
                r#"{"mac":"ff:ff:ff:ff:ff:ff","port":"keep"}"#,
                422,
                "unicast",
            ),
            (
                "POST",
                "/fdb",
                r#"{"mac":"02:00:00:00:00:01","port":"keep","vlan":5000}"#,
                422,
                "out of range",
            ),
            (
                "PUT",
                "/log-level",
                r#"{"level":"bogus"}"#,
                422,
                "bad filter",
            ),
            ("PUT", "/log-level", r#""debug""#, 400, "malformed"),
        ];
        for (m, t, b, status, want) in cases {
            let (s, body) = call(&f, m, t, b);
            assert_eq!(s, *status, "{m} {t} {b}: {body}");
            let e: ApiError = serde_json::from_str(&body).expect(&body);
            assert!(e.error.contains(want), "{m} {t}: {want:?} not in {e:?}");
        }
        let names: Vec<_> = f.ports().into_iter().map(|p| p.spec.name).collect();
        assert_eq!(names, ["keep"]);
        assert!(f.fdb().is_empty());
    }

    #[test]
    fn nulls_empty_filters_and_odd_paths_are_refused() {
        let f = Fake::default();
        f.add_port(PortSpec::new("keep", PortKind::VhostUser))
            .unwrap();
        // METHOD TARGET STATUS part of the message | BODY
        let table = r#"
PUT /log-level 422 must not be empty | {"level":""}
PUT /log-level 400 level is null | {"level":null}
PUT /log-level 400 the body is null | null
POST /ports 400 socket is null | {"name":"a","kind":"vhost-user","socket":null}
POST /ports 400 vlan.trunk[1] is null | {"name":"a","kind":"vhost-user","vlan":{"trunk":[1,null]}}
GET /ports/keep%2Fstats 404 no port "keep/stats"
GET /ports/ 404 no port ""
GET /ports//stats 404 no port ""
GET / 404 no route
"#;
        for line in table.lines().filter(|l| !l.is_empty()) {
            let mut it = line.splitn(4, ' ');
            let (m, t, status) = (it.next().unwrap(), it.next().unwrap(), it.next().unwrap());
            let rest = it.next().unwrap();
            let (want, b) = rest.split_once(" | ").unwrap_or((rest, ""));
            let (s, body) = call(&f, m, t, b);
            assert_eq!(s.to_string(), status, "{line}: {body}");
            let e: ApiError = serde_json::from_str(&body).expect(&body);
            assert!(e.error.contains(want), "{line}: {e:?}");
        }
        assert_eq!(f.ports().len(), 1);
        assert_eq!(*f.level.lock().unwrap(), "");
    }

    #[test]
    fn other_routes() {
        let f = Fake::default();
        assert_eq!(call(&f, "GET", "/live", "").1, r#"{"status":"ok"}"#);
        assert_eq!(call(&f, "GET", "/ready", "").0, 200);
        assert_eq!(call(&f, "GET", "/metrics", "").1, "vhu_fdb_entries 0\n");
        assert_eq!(call(&f, "GET", "/openapi.json", "").1, "{}");
        assert_eq!(call(&f, "PUT", "/log-level", r#"{"level":"debug"}"#).0, 200);
        assert_eq!(*f.level.lock().unwrap(), "debug");
        f.add_port(PortSpec::new("p", PortKind::VhostUser)).unwrap();
        let (s, b) = call(
            &f,
            "POST",
            "/fdb",
            r#"{"mac":"02:00:00:00:00:01","port":"p","vlan":3}"#,
        );
        assert_eq!(s, 201, "{b}");
        let e: Vec<FdbEntryView> = serde_json::from_str(&call(&f, "GET", "/fdb", "").1).unwrap();
        assert_eq!(e[0].mac, MacAddr([2, 0, 0, 0, 0, 1]));
        assert_eq!(call(&f, "DELETE", "/fdb", "").1, r#"{"flushed":0}"#);
        let (s, b) = call(&f, "GET", "/ports/p/capture?count=5&seconds=2", "");
        assert_eq!(s, 0);
        assert!(
            b.contains("count: Some(5)") && b.contains("seconds: Some(2)"),
            "{b}"
        );
        let r = match handle(&f, "{}", &req("PUT", "/ports", "")) {
            Reply::Full(r) => r,
            Reply::Capture(_) => unreachable!(),
        };
        assert_eq!(r.headers, vec![("Allow", "GET, POST".to_owned())]);
        let mut ct = req("POST", "/ports", r#"{"name":"q","kind":"vhost-user"}"#);
        ct.headers
            .push(("content-type".into(), "text/plain".into()));
        match handle(&f, "{}", &ct) {
            Reply::Full(r) => assert_eq!(r.status, 415),
            Reply::Capture(_) => unreachable!(),
        }
    }
}
