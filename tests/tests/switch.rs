// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! End-to-end tests of `vhu-switch` (the release binary) with real peers.
//!
//! * `api_refuses_bad_requests_and_changes_nothing`: every route answered,
//!   then a table of bad requests, each with its status and message, and the
//!   port list and FDB compared before and after.
//! * `control_api_serves_only_root_and_its_user`: the control socket is
//!   `0600` (another user's `vhuctl` cannot connect); with its mode loosened
//!   to `0666` the switch still refuses that user (`SO_PEERCRED`): 403, a
//!   logged refusal, the port it asked for not created; root still served.
//! * `restart_keeps_ports_and_sigterm_removes_sockets`: ports created
//!   through the API (one with a 200-byte socket directory) come back after
//!   SIGTERM and after `kill -9`; SIGTERM leaves no socket behind.
//! * `testpmd_frontends_learn_flood_and_stay_isolated`: two `dpdk-testpmd`
//!   virtio-user frontends on a switch with four ports: broadcast reaches
//!   every port of the VLAN but the ingress, exactly; unicast after learning
//!   reaches only its destination; the access port of another VLAN sees
//!   nothing; a MAC-locked port's spoofed frames and frames over a port's MTU
//!   are dropped and counted; a learned MAC ages out; the counters of the
//!   API, the metrics (checked by `promtool`) and testpmd agree; `vhuctl
//!   capture | tcpdump -r -` shows the frames. One testpmd connects through
//!   a short symlink to a 200-byte socket directory.
//!
//! * `multiqueue_ports_spread_over_two_pmds`: two-queue vhost-user ports on
//!   two PMDs; both TX queues polled, every frame delivered or counted.
//! * `multiqueue_uplinks_carry_every_frame`: a two-queue AF_PACKET uplink
//!   (fanout) and a two-queue TAP taken over by a pod's namespace: flows
//!   spread over both queues of each, every frame accounted for exactly.
//!
//! They need root and the peers (`scripts/install-peers.sh`); `scripts/test.sh`
//! runs them with `--include-ignored`, one at a time.

use std::process::{Command, Stdio};
use std::time::Duration;

use vhu_api::{ApiError, FdbEntryView, PortStats, PortView};
use vhu_tests::netns::{self, Netns, VethPair};
use vhu_tests::peers;
use vhu_tests::process::RunDir;
use vhu_tests::switch::SwitchProc;
use vhu_tests::testpmd::{FrontendOpts, Lcores, Testpmd};

const MAC_A: &str = "02:00:00:00:00:0a";
const MAC_B: &str = "02:00:00:00:00:0b";

/// One row of a bad-request table: `METHOD PATH STATUS "message part" BODY`.
fn parse_case(line: &str) -> (String, String, String, u16, String) {
    let mut it = line.splitn(4, ' ');
    let (m, path, status, rest) = (
        it.next().unwrap(),
        it.next().unwrap(),
        it.next().unwrap(),
        it.next().unwrap(),
    );
    let rest = rest.strip_prefix('"').expect("a quoted message part");
    let (want, body) = rest.split_once('"').expect("a closing quote");
    (
        m.into(),
        path.into(),
        body.trim().into(),
        status.parse().unwrap(),
        want.into(),
    )
}

fn stats(sw: &SwitchProc, port: &str) -> PortStats {
    sw.stats(port)
}

fn names(sw: &SwitchProc) -> Vec<String> {
    let v: Vec<PortView> = sw.get("/ports");
    v.into_iter().map(|p| p.spec.name).collect()
}

#[test]
#[ignore = "needs root and the peers: run scripts/test.sh"]
fn api_refuses_bad_requests_and_changes_nothing() {
    let run = RunDir::new("switch-api");
    let sw = SwitchProc::start(&run, "", &[]);
    // Every route, once.
    assert_eq!(sw.call("GET", "/live", "", 200), br#"{"status":"ok"}"#);
    assert_eq!(sw.call("GET", "/ready", "", 200), br#"{"status":"ready"}"#);
    sw.call(
        "POST",
        "/ports",
        r#"{"name":"vm1","kind":"vhost-user","vlan":10}"#,
        201,
    );
    sw.call(
        "POST",
        "/ports",
        r#"{"name":"tp","kind":"tap","interface":"vhutap-api0"}"#,
        201,
    );
    let p: PortView = sw.get("/ports/vm1");
    assert_eq!(
        p.state.socket_path.as_deref(),
        Some(sw.sockets.join("vm1.sock").to_str().unwrap())
    );
    assert!(!p.state.connected);
    let s = stats(&sw, "vm1");
    assert_eq!((s.queues.len(), s.total.rx_packets), (1, 0));
    sw.call(
        "POST",
        "/fdb",
        r#"{"mac":"02:00:00:00:00:99","port":"vm1","vlan":10}"#,
        201,
    );
    // The TAP's own IPv6 traffic may be learned meanwhile: the static
    // entries are what this compares.
    let f: Vec<FdbEntryView> = sw.get("/fdb");
    let st: Vec<_> = f.iter().filter(|e| e.is_static).collect();
    assert_eq!(
        st.iter()
            .map(|e| (e.mac.to_string(), e.vlan, e.port.as_str()))
            .collect::<Vec<_>>(),
        [("02:00:00:00:00:99".to_string(), 10, "vm1")],
        "{f:?}"
    );
    // Every learned entry listed above goes (more may have been learned
    // since); the static one stays.
    let flushed: serde_json::Value =
        serde_json::from_slice(&sw.call("DELETE", "/fdb", "", 200)).unwrap();
    let learned = (f.len() - st.len()) as u64;
    assert!(
        flushed["flushed"].as_u64().is_some_and(|n| n >= learned),
        "{flushed} after {f:?}"
    );
    let after: Vec<FdbEntryView> = sw.get("/fdb");
    assert!(after.iter().any(|e| e.is_static), "{after:?}");
    let m = String::from_utf8(sw.call("GET", "/metrics", "", 200)).unwrap();
    assert!(
        m.contains("vhu_port_connected{port=\"vm1\",kind=\"vhost-user\"} 0"),
        "{m}"
    );
    sw.call("PUT", "/log-level", r#"{"level":"debug"}"#, 200);
    sw.call("PUT", "/log-level", r#"{"level":"info"}"#, 200);
    let doc: serde_json::Value =
        serde_json::from_slice(&sw.call("GET", "/openapi.json", "", 200)).unwrap();
    assert_eq!(doc["openapi"], "3.0.3");

    // The FDB's static entries: what a request can change (the TAP's own
    // kernel traffic, IPv6 autoconfiguration, is learned meanwhile).
    let statics = || {
        let f: Vec<FdbEntryView> = sw.get("/fdb");
        f.into_iter().filter(|e| e.is_static).collect::<Vec<_>>()
    };
    let ports_before = sw.call("GET", "/ports", "", 200);
    let fdb_before = statics();
    let big = format!(r#"{{"name":"{}","kind":"vhost-user"}}"#, "x".repeat(70_000));
    let long_if = r#"{"name":"u","kind":"af_packet","interface":"vhu-no-such-if"}"#;
    // METHOD PATH STATUS "part of the message" BODY
    let table = r#"
POST /ports 400 "malformed request" {
POST /ports 400 "malformed request" [1]
POST /ports 400 "malformed" {"name":1,"kind":"tap"}
POST /ports 400 "missing field `kind`" {"name":"a"}
POST /ports 400 "unknown variant" {"name":"a","kind":"ovs"}
POST /ports 400 "malformed" {"name":"a","kind":"vhost-user","queues":"2"}
POST /ports 400 "unknown field" {"name":"a","kind":"vhost-user","colour":1}
POST /ports 400 "needs a JSON body"
POST /ports 409 "exists" {"name":"vm1","kind":"vhost-user"}
POST /ports 409 "socket" {"name":"vm2","kind":"vhost-user","socket":"vm1.sock"}
POST /ports 409 "interface" {"name":"tq","kind":"tap","interface":"vhutap-api0"}
POST /ports 422 "out of range 1-4094" {"name":"a","kind":"vhost-user","vlan":4095}
POST /ports 422 "at least one" {"name":"a","kind":"vhost-user","vlan":{"trunk":[]}}
POST /ports 422 "mtu" {"name":"a","kind":"vhost-user","mtu":50}
POST /ports 422 "unicast" {"name":"a","kind":"vhost-user","mac":["01:00:5e:00:00:01"]}
POST /ports 400 "not a MAC" {"name":"a","kind":"vhost-user","mac":["zz"]}
POST /ports 422 "name" {"name":"a b","kind":"vhost-user"}
POST /ports 422 "queues" {"name":"a","kind":"vhost-user","queues":0}
POST /ports 422 "does not apply" {"name":"a","kind":"vhost-user","interface":"eth0"}
POST /ports 422 "needs the path" {"name":"a","kind":"vhost-user","role":"client"}
POST /ports 422 "needs the name of its interface" {"name":"a","kind":"af_xdp"}
POST /ports 422 "not a PMD thread" {"name":"a","kind":"vhost-user","pmd":3}
POST /ports 422 "owner" {"name":"a","kind":"vhost-user","owner":"no-such-user-vhu"}
POST /ports 422 "octal" {"name":"a","kind":"vhost-user","mode":"999"}
GET /ports/ghost 404 "no port"
DELETE /ports/ghost 404 "no port"
GET /ports/ghost/stats 404 "no port"
GET /ports/ghost/capture 404 "no port"
GET /ports/vm1/capture?count=x 400 "whole number"
GET /ports/vm1/capture?count=0 422 "out of range"
GET /nowhere 404 "no route"
PATCH /ports/vm1 405 "does not take PATCH"
GET /log-level 405 "takes PUT"
GET /ports?x=1 400 "unknown query parameter"
POST /fdb 404 "no port" {"mac":"02:00:00:00:00:01","port":"ghost"}
POST /fdb 422 "unicast" {"mac":"ff:ff:ff:ff:ff:ff","port":"vm1"}
POST /fdb 422 "out of range" {"mac":"02:00:00:00:00:01","port":"vm1","vlan":4095}
PUT /log-level 422 "not a log filter" {"level":"=="}
PUT /log-level 400 "malformed" "debug"
"#;
    let mut cases: Vec<(String, String, String, u16, String)> = table
        .lines()
        .filter(|l| !l.is_empty())
        .map(parse_case)
        .collect();
    cases.push((
        "POST".into(),
        "/ports".into(),
        big,
        413,
        "larger than".into(),
    ));
    cases.push((
        "POST".into(),
        "/ports".into(),
        long_if.into(),
        422,
        "vhu-no-such-if".into(),
    ));
    assert!(cases.len() >= 30);
    for (m, path, body, status, want) in &cases {
        let (m, path, body, want) = (m.as_str(), path.as_str(), body.as_str(), want.as_str());
        let b = (!body.is_empty()).then_some(body.as_bytes());
        let (s, out) = sw.try_call(m, path, b).expect("the switch answers");
        let e: ApiError = serde_json::from_slice(&out).unwrap_or_else(|_| {
            panic!(
                "{m} {path}: not an error body: {}",
                String::from_utf8_lossy(&out)
            )
        });
        assert_eq!(s, *status, "{m} {path} {body}: {e:?}");
        assert!(
            e.error.contains(want),
            "{m} {path}: {want:?} not in {:?}",
            e.error
        );
    }
    assert_eq!(
        sw.call("GET", "/ports", "", 200),
        ports_before,
        "a refused request changed the ports"
    );
    assert_eq!(statics(), fdb_before, "a refused request changed the FDB");
    // The socket of the refused duplicate is untouched, the TAP still there.
    assert!(sw.sockets.join("vm1.sock").exists());
    assert!(std::path::Path::new("/sys/class/net/vhutap-api0").exists());
    sw.call("DELETE", "/ports/tp", "", 204);
    assert!(
        !std::path::Path::new("/sys/class/net/vhutap-api0").exists(),
        "the TAP goes with its port"
    );
}

/// Runs `vhuctl --socket SOCKET ARGS` as user `nobody`: (exit code,
/// stdout + stderr).
fn vhuctl_as_nobody(sw: &SwitchProc, args: &[&str]) -> (Option<i32>, String) {
    let vhuctl = vhu_tests::switch::switch_bin().with_file_name("vhuctl");
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(&vhuctl)
        .arg("--socket")
        .arg(&sw.control)
        .args(args)
        .output()
        .expect("setpriv (util-linux)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

#[test]
#[ignore = "needs root and the peers: run scripts/test.sh"]
fn control_api_serves_only_root_and_its_user() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let run = RunDir::new("switch-peercred");
    let sw = SwitchProc::start(&run, "", &[]);
    // `nobody` must reach the socket's directory for the mode to be what
    // stops it.
    for d in sw.control.ancestors().skip(1) {
        if d.starts_with(run.path()) {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
    }
    let md = std::fs::metadata(&sw.control).unwrap();
    assert_eq!(
        (md.mode() & 0o777, md.uid()),
        (0o600, 0),
        "the control socket's mode and owner"
    );
    let create = [
        "port",
        "add",
        "sneaky",
        "--kind",
        "vhost-user",
        "--role",
        "server",
        "--socket",
        "sneaky.sock",
    ];
    let (code, text) = vhuctl_as_nobody(&sw, &create);
    assert_ne!(code, Some(0), "nobody reached a 0600 socket: {text}");
    assert!(text.contains("Permission denied"), "{text}");

    // Loosened by hand: the switch itself still says no.
    std::fs::set_permissions(&sw.control, std::fs::Permissions::from_mode(0o666)).unwrap();
    let (code, text) = vhuctl_as_nobody(&sw, &create);
    assert_ne!(code, Some(0), "nobody was served: {text}");
    assert!(
        text.contains("uid 65534") && text.contains("may not use the control API"),
        "{text}"
    );
    let (code, text) = vhuctl_as_nobody(&sw, &["port", "list"]);
    assert_ne!(code, Some(0), "nobody read the ports: {text}");
    assert_eq!(
        sw.wait_log_count(
            "control: connection refused: uid 65534",
            2,
            Duration::from_secs(5)
        ),
        2,
        "refusals logged"
    );
    let ports: Vec<PortView> = sw.get("/ports");
    assert!(
        ports.is_empty(),
        "a refused request changed the ports: {ports:?}"
    );
    assert!(!sw.sockets.join("sneaky.sock").exists());
    // Root is served as before.
    assert_eq!(sw.call("GET", "/live", "", 200), br#"{"status":"ok"}"#);
}

#[test]
#[ignore = "needs root and the peers: run scripts/test.sh"]
fn restart_keeps_ports_and_sigterm_removes_sockets() {
    let run = RunDir::new("switch-restart");
    let mut sw = SwitchProc::start(&run, "", &[]);
    let long = run
        .path()
        .join("p".repeat(60))
        .join("q".repeat(60))
        .join("r".repeat(60));
    let long_sock = long.join("vm.sock");
    assert!(long_sock.as_os_str().len() > 200, "{}", long_sock.display());
    std::fs::create_dir_all(&long).unwrap();
    sw.call(
        "POST",
        "/ports",
        r#"{"name":"a","kind":"vhost-user","queues":2}"#,
        201,
    );
    let body = format!(
        r#"{{"name":"long","kind":"vhost-user","socket":"{}"}}"#,
        long_sock.display()
    );
    sw.call("POST", "/ports", &body, 201);
    assert!(long_sock.exists(), "the socket is at its long path");
    vhost_net_backend::sys::unix::connect(&long_sock).expect("a frontend reaches the long path");
    let before = names(&sw);
    assert_eq!(before, ["a", "long"]);

    let st = sw.stop();
    assert!(st.success(), "SIGTERM: {st}\n{}", sw.log());
    assert!(!sw.sockets.join("a.sock").exists(), "SIGTERM left a.sock");
    assert!(!long_sock.exists(), "SIGTERM left the long socket");
    assert!(!sw.control.exists(), "SIGTERM left the control socket");

    sw.restart();
    assert_eq!(names(&sw), before, "persisted ports come back");
    let v: PortView = sw.get("/ports/a");
    assert_eq!((v.spec.queues, v.state.origin.as_str()), (Some(2), "api"));
    assert!(sw.sockets.join("a.sock").exists() && long_sock.exists());

    sw.kill9();
    sw.restart();
    assert_eq!(names(&sw), before, "ports come back after kill -9");
    sw.call("DELETE", "/ports/long", "", 204);
    assert!(!long_sock.exists());
    sw.stop();
    sw.restart();
    assert_eq!(names(&sw), ["a"], "a removal is persisted");
}

/// `port`'s counters once they stop moving (the switch drained what the
/// frontends queued).
fn settled(sw: &SwitchProc, port: &str) -> PortStats {
    sw.settle(&[port]).remove(0)
}

fn drops(q: &vhu_api::QueueStats, rx: bool, reason: &str) -> u64 {
    let m = if rx { &q.rx_dropped } else { &q.tx_dropped };
    m.get(reason).copied().unwrap_or(0)
}

/// Sends for `ms` milliseconds in txonly mode to `dst`, then goes back to
/// receiving (rxonly); returns what the frontend transmitted.
fn send(tp: &mut Testpmd, dst: &str, ms: u64) -> u64 {
    tp.stop();
    tp.command(&format!("set eth-peer 0 {dst}"));
    let before = tp.total_stats().tx_packets;
    tp.set_fwd("txonly");
    tp.start();
    std::thread::sleep(Duration::from_millis(ms));
    tp.stop();
    let sent = tp.total_stats().tx_packets - before;
    tp.set_fwd("rxonly");
    tp.start();
    sent
}

#[test]
#[ignore = "needs root and the peers: run scripts/test.sh"]
fn testpmd_frontends_learn_flood_and_stay_isolated() {
    let run = RunDir::new("switch-fwd");
    let config = format!(
        r#"
[switch]
fdb_aging_secs = 2
# Two PMDs: the ports alternate between them, so frames cross PMDs.
pmds = 2

[[port]]
name = "a"
kind = "vhost-user"

[[port]]
name = "b"
kind = "vhost-user"
mtu = 1500
mac = ["{MAC_B}"]

[[port]]
name = "c"
kind = "vhost-user"
vlan = 10

[[port]]
name = "d"
kind = "vhost-user"
"#
    );
    let sw = SwitchProc::start(&run, &config, &[]);
    let pmd_of = |p: &str| sw.get::<PortView>(&format!("/ports/{p}")).state.pmd;
    assert_eq!(
        ["a", "b", "c", "d"].map(pmd_of),
        [0, 1, 0, 1],
        "queues go to the least loaded PMD"
    );
    // b's frontend connects through a short symlink to a long directory.
    let long = run.path().join("l".repeat(90)).join("m".repeat(90));
    std::fs::create_dir_all(&long).unwrap();
    let body = format!(
        r#"{{"name":"s","kind":"vhost-user","socket":"{}/s.sock","mac":["02:00:00:00:00:55"]}}"#,
        long.display()
    );
    sw.call("POST", "/ports", &body, 201);
    let link = run.path().join("short");
    std::os::unix::fs::symlink(&long, &link).unwrap();

    let frontend = |sock: std::path::PathBuf, mac: &str, lcores: Lcores| {
        let mut o = FrontendOpts::new(sock);
        o.mac = Some(mac.into());
        o.port.forward_mode = "rxonly".into();
        o.port.lcores = lcores;
        let mut t = Testpmd::spawn(&o);
        t.wait_link_up(Duration::from_secs(20));
        t.start();
        t
    };
    let mut a = frontend(sw.sockets.join("a.sock"), MAC_A, Lcores::FRONTEND);
    let mut b = frontend(sw.sockets.join("b.sock"), MAC_B, Lcores::BACKEND);

    // 1. Broadcast from a: b and d get every frame (d has no frontend: its
    //    copies are dropped for want of buffers), c (VLAN 10) none.
    let sent = send(&mut a, "ff:ff:ff:ff:ff:ff", 300);
    assert!(sent > 1000, "a sent only {sent}");
    let sa = settled(&sw, "a");
    assert_eq!(
        sa.total.tx_packets, sent,
        "the switch took every frame a sent"
    );
    let (sb, sd, sc) = (settled(&sw, "b"), settled(&sw, "d"), stats(&sw, "c"));
    assert_eq!(
        sb.total.rx_packets + sb.total.rx_dropped_total(),
        sent,
        "{sb:?}"
    );
    assert_eq!(drops(&sd.total, true, "no_buffers"), sent, "{sd:?}");
    assert_eq!(
        (sc.total.rx_packets, sc.total.rx_dropped_total()),
        (0, 0),
        "VLAN 10 saw frames"
    );
    assert_eq!(
        sa.total.rx_packets + sa.total.rx_dropped_total(),
        0,
        "flooded back to the ingress"
    );
    let b_rx = b.total_stats().rx_packets;
    assert_eq!(
        b_rx, sb.total.rx_packets,
        "testpmd and the switch count b's frames alike"
    );

    // 2. b answers a: a was learned, so only a gets them.
    let d_before = drops(&stats(&sw, "d").total, true, "no_buffers");
    let sent_b = send(&mut b, MAC_A, 200);
    let sa2 = settled(&sw, "a");
    assert_eq!(
        sa2.total.rx_packets + sa2.total.rx_dropped_total(),
        sent_b,
        "{sa2:?}"
    );
    assert_eq!(
        drops(&stats(&sw, "d").total, true, "no_buffers"),
        d_before,
        "unicast leaked to d"
    );

    // 3. a to b, now known: only b. Then frames over b's MTU: dropped at b.
    let sb_before = settled(&sw, "b");
    let sent = send(&mut a, MAC_B, 200);
    let sb2 = settled(&sw, "b");
    let got = sb2.total.rx_packets + sb2.total.rx_dropped_total()
        - sb_before.total.rx_packets
        - sb_before.total.rx_dropped_total();
    assert_eq!(got, sent);
    assert_eq!(
        drops(&stats(&sw, "d").total, true, "no_buffers"),
        d_before,
        "unicast leaked to d"
    );
    a.command("set txpkts 1600");
    let big = send(&mut a, MAC_B, 100);
    let sb3 = settled(&sw, "b");
    assert_eq!(
        drops(&sb3.total, true, "too_long") - drops(&sb2.total, true, "too_long"),
        big
    );
    assert_eq!(
        sb3.total.rx_packets, sb2.total.rx_packets,
        "an oversized frame reached b"
    );
    a.command("set txpkts 64");

    // 4. a learned MAC ages out: b's frames to a flood again (d sees them).
    std::thread::sleep(Duration::from_millis(3_500));
    let sent_b = send(&mut b, MAC_A, 100);
    let d_after = drops(&settled(&sw, "d").total, true, "no_buffers");
    assert_eq!(d_after - d_before, sent_b, "an aged MAC is flooded");
    let m = String::from_utf8(sw.call("GET", "/metrics", "", 200)).unwrap();
    let aged: u64 = m
        .lines()
        .find_map(|l| l.strip_prefix("vhu_fdb_aged_total "))
        .and_then(|v| v.parse().ok())
        .unwrap();
    assert!(aged >= 1, "{m}");

    // 5. The metrics pass promtool and say what the API says.
    let mut p = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian prometheus) is installed by scripts/install-peers.sh");
    std::io::Write::write_all(p.stdin.as_mut().unwrap(), m.as_bytes()).unwrap();
    drop(p.stdin.take());
    let out = p.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let sa = stats(&sw, "a");
    assert!(
        m.contains(&format!(
            "vhu_port_tx_packets_total{{port=\"a\",queue=\"0\"}} {}\n",
            sa.total.tx_packets
        )),
        "metrics and API disagree on a's tx_packets ({})",
        sa.total.tx_packets
    );

    // 6. Capture on b while a sends: tcpdump reads the stream.
    let vhuctl = vhu_tests::switch::switch_bin().with_file_name("vhuctl");
    let cap = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "'{}' --socket '{}' capture b -c 5 -s 20 | tcpdump -e -n -r - 2>&1",
            vhuctl.display(),
            sw.control.display()
        ))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    send(&mut a, MAC_B, 200);
    let out = cap.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let frames = text
        .lines()
        .filter(|l| l.contains(&format!("{MAC_A} > {MAC_B}")))
        .count();
    assert_eq!(frames, 5, "tcpdump output:\n{text}");

    // 7. A MAC-locked port drops what its frontend sends from another MAC
    //    (b's frontend moves to port s, locked to ...:55, through the
    //    symlink), counted as spoofed; nothing reaches a.
    drop(b);
    let mut s = frontend(link.join("s.sock"), MAC_B, Lcores::BACKEND);
    let a_before = stats(&sw, "a");
    let sent = send(&mut s, MAC_A, 200);
    let ss = settled(&sw, "s");
    assert_eq!(drops(&ss.total, false, "spoofed"), sent, "{ss:?}");
    let a_after = settled(&sw, "a");
    assert_eq!(
        a_after.total.rx_packets, a_before.total.rx_packets,
        "a spoofed frame got through"
    );
    drop(s);
    drop(a);
}

#[test]
#[ignore = "needs root and the peers: run scripts/test.sh"]
fn multiqueue_ports_spread_over_two_pmds() {
    let run = RunDir::new("switch-mq");
    let config = r#"
[switch]
pmds = 2

[[port]]
name = "m1"
kind = "vhost-user"
queues = 2

[[port]]
name = "m2"
kind = "vhost-user"
queues = 2
"#;
    let mut sw = SwitchProc::start(&run, config, &[]);
    let frontend = |sock: std::path::PathBuf, mac: &str, lcores: Lcores| {
        let mut o = FrontendOpts::new(sock);
        o.mac = Some(mac.into());
        o.port.queues = 2;
        o.port.forward_mode = "rxonly".into();
        o.port.lcores = lcores;
        let mut t = Testpmd::spawn(&o);
        t.wait_link_up(Duration::from_secs(20));
        t.start();
        t
    };
    let mut m1 = frontend(sw.sockets.join("m1.sock"), MAC_A, Lcores::FRONTEND);
    let mut m2 = frontend(sw.sockets.join("m2.sock"), MAC_B, Lcores::BACKEND);
    let v: PortView = sw.get("/ports/m1");
    assert_eq!(v.state.queue_pairs, 2, "{v:?}");
    // Both directions, so that each MAC is learned; then unicast. Each
    // port's two TX queues are polled by the two PMDs, both filling the
    // other port's RX queue: every frame arrives or is counted.
    for (from, tx, to, dst) in [(&mut m1, "m1", "m2", MAC_B), (&mut m2, "m2", "m1", MAC_A)] {
        let before_tx = settled(&sw, tx).total.tx_packets;
        let before = settled(&sw, to).total;
        let sent = send(from, dst, 300);
        assert!(sent > 1000, "{tx} sent only {sent}");
        let s_tx = settled(&sw, tx);
        assert_eq!(s_tx.total.tx_packets - before_tx, sent, "{s_tx:?}");
        assert!(
            s_tx.queues.iter().all(|q| q.tx_packets > 0),
            "testpmd sends on both queues, the switch polls both: {s_tx:?}"
        );
        let s_to = settled(&sw, to).total;
        let got = s_to.rx_packets - before.rx_packets;
        let lost = drops(&s_to, true, "no_buffers") - drops(&before, true, "no_buffers");
        assert_eq!(got + lost, sent, "{s_to:?}");
        assert_eq!(
            s_to.rx_dropped_total() - before.rx_dropped_total(),
            lost,
            "only no_buffers drops: {s_to:?}"
        );
    }
    let m = String::from_utf8(sw.call("GET", "/metrics", "", 200)).unwrap();
    for p in ["0", "1"] {
        let frames = m
            .lines()
            .find_map(|l| l.strip_prefix(&format!("vhu_pmd_frames_total{{pmd=\"{p}\"}} ")))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        assert!(frames > 1000, "pmd {p} moved {frames} frames:\n{m}");
    }
    // SIGTERM with both frontends connected: out within a second, cleanly.
    let t0 = std::time::Instant::now();
    let st = sw.stop();
    let took = t0.elapsed();
    assert!(st.success(), "vhu-switch exited with {st}:\n{}", sw.log());
    assert!(
        took < Duration::from_secs(1),
        "vhu-switch took {took:?} to exit after SIGTERM:\n{}",
        sw.log()
    );
    drop((m1, m2));
}

/// Multiqueue uplinks: an AF_PACKET port with two sockets in one fanout
/// group on a two-queue veth, and a two-queue TAP that a pod's namespace
/// took over (moved and renamed). Frames over many flows from either side
/// spread over both queues of both ports, and every frame sent is accounted
/// for exactly: taken from the source's queues or counted as dropped there,
/// then delivered to the other port's queues or counted there, and what
/// the switch delivered is what the far side's kernel received.
#[test]
#[ignore = "needs root and the peers: run scripts/test.sh"]
fn multiqueue_uplinks_carry_every_frame() {
    const FRAMES: u64 = 4000;
    const FLOWS: &str = "64";
    let run = RunDir::new("switch-mq-up");
    let veth = VethPair::with_queues(2);
    veth.set_host_ipv6(false).expect("IPv6 off on the host end");
    let pod = Netns::new();
    let tap = netns::unique_ifname("q");
    let config = format!(
        r#"
[[port]]
name = "up"
kind = "af_packet"
interface = "{}"
queues = 2

[[port]]
name = "tp"
kind = "tap"
interface = "{tap}"
queues = 2
"#,
        veth.host()
    );
    let sw = SwitchProc::start(&run, &config, &[]);
    netns::run(&["ip", "link", "set", &tap, "netns", pod.name()]);
    pod.exec(&["ip", "link", "set", &tap, "name", "eth1", "up"]);
    // Each TAP queue holds more frames than the test sends (the kernel's
    // default of 500 drops a blast before the switch wakes up to read it;
    // those drops are the kernel's, outside the switch's counters).
    pod.exec(&["ip", "link", "set", "eth1", "txqueuelen", "8192"]);
    pod.wait_link_up("eth1", Duration::from_secs(5));

    // Source MACs of one side are never the other side's destination, so
    // every frame is unknown unicast, flooded to the one other port.
    let sides = [
        (
            "up",
            veth.ns(),
            veth.peer(),
            "02:00:00:0a:00",
            "02:00:00:0b:ff:ff",
        ),
        ("tp", &pod, "eth1", "02:00:00:0b:00", "02:00:00:0a:ff:ff"),
    ];
    for (i, &(from, ns, ifname, prefix, dst)) in sides.iter().enumerate() {
        let (to, far_ns, far_if) = {
            let o = &sides[1 - i];
            (o.0, o.1, o.2)
        };
        let before = sw.settle(&[from, to]);
        let far_before = far_ns.link_stats(far_if).rx_packets;
        let near_before = ns.link_stats(ifname).tx_dropped;
        let mut tx = ns.spawn_python(
            peers::SEND_FLOWS,
            &[ifname, &FRAMES.to_string(), FLOWS, prefix, dst],
        );
        tx.wait_for_stdout(&format!("sent={FRAMES}"), Duration::from_secs(60));
        let after = sw.settle(&[from, to]);
        let far = far_ns.link_stats(far_if).rx_packets - far_before;
        let near_dropped = ns.link_stats(ifname).tx_dropped - near_before;
        let (src0, src1, dst0, dst1) = (&before[0], &after[0], &before[1], &after[1]);
        let taken = src1.total.tx_packets - src0.total.tx_packets;
        let refused = src1.total.tx_dropped_total() - src0.total.tx_dropped_total();
        let delivered = dst1.total.rx_packets - dst0.total.rx_packets;
        let lost = dst1.total.rx_dropped_total() - dst0.total.rx_dropped_total();
        let what = format!("{from} -> {to}: {src1:?}\n{dst1:?}");
        assert_eq!(near_dropped, 0, "the kernel dropped on {ifname}\n{what}");
        assert_eq!(
            taken + refused,
            FRAMES,
            "every frame sent on {from}\n{what}"
        );
        assert_eq!(
            delivered + lost,
            taken,
            "every frame taken, into {to}\n{what}"
        );
        assert!(
            delivered >= FRAMES * 95 / 100,
            "{delivered} of {FRAMES} delivered\n{what}"
        );
        assert_eq!(far, delivered, "the far side's kernel received\n{what}");
        for (q, (a, b)) in src0.queues.iter().zip(&src1.queues).enumerate() {
            assert!(
                b.tx_packets - a.tx_packets > FRAMES / 10,
                "{from} queue {q} took {} frames: the flows spread over both\n{what}",
                b.tx_packets - a.tx_packets
            );
        }
        for (q, (a, b)) in dst0.queues.iter().zip(&dst1.queues).enumerate() {
            assert!(
                b.rx_packets - a.rx_packets > FRAMES / 10,
                "{to} queue {q} got {} frames: the flows spread over both\n{what}",
                b.rx_packets - a.rx_packets
            );
        }
        assert_eq!(
            (src1.queues.len(), dst1.queues.len()),
            (2, 2),
            "two queues each\n{what}"
        );
    }
}
