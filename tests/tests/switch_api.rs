// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! End-to-end test of `vhu-switch`'s control API: every route with a
//! success case, then `schemathesis` (PyPI) fuzzing the live switch from
//! its own `/openapi.json`.
//!
//! * `schemathesis_finds_nothing_and_every_route_succeeds`: a switch with
//!   one port of each kind (vhost-user server and client, TAP, AF_PACKET and
//!   AF_XDP on veths) and a static FDB entry answers every route of the
//!   route table with the exact body expected; three frames sent into the
//!   AF_PACKET port's veth come out of `GET /ports/{name}/capture` byte for
//!   byte, are counted on that port and flooded to the AF_XDP port, and their
//!   source is learned and then flushed (`{"flushed":1}`). Then
//!   `schemathesis` runs every phase (examples, coverage, fuzzing, stateful
//!   through the document's links) with every check (`--checks all`: no 5xx,
//!   status codes, content types, headers and bodies as documented, schema-
//!   violating requests refused, schema-valid ones accepted, 405 with
//!   `Allow` for other methods, use after delete) and must exit 0. After it,
//!   every port is removed and nothing is left: no port, no FDB entry, no
//!   interface but the veths, no socket, and the host's interfaces are those
//!   of before.
//!
//! # Safety of the fuzzing
//!
//! `POST /ports` with fuzzed bodies creates real ports: TAP devices, AF_XDP
//! and AF_PACKET sockets on whatever interface a body names, vhost-user
//! sockets at whatever absolute path it gives (with their parent
//! directories). So the switch runs in a network namespace of its own (a
//! fuzzed interface name can reach nothing but that namespace's `lo` and
//! veths) and in a mount namespace where every mount is read-only except the
//! test's directory (a fuzzed path outside it is refused with 422, checked
//! before the run). Its control socket reaches schemathesis through `socat`
//! on 127.0.0.1 of the host.
//!
//! # Bounds
//!
//! `GET /ports/{name}/capture` streams until `count` frames or `seconds`
//! have passed: with no traffic and no `seconds` it would run forever. A
//! schemathesis hook gives every request there that carries no valid
//! `seconds` of its own `seconds=1`; requests whose `seconds` is invalid
//! are sent as generated (they must be refused). Nothing is excluded.
//! `POST /ports` and `PUT /log-level` may answer a schema-valid request with
//! 422, and the schema says so: whether an interface or account exists, how
//! many PMD threads run and whether a filter parses are not things a schema
//! can express.
//!
//! It needs root, `socat` and schemathesis (`scripts/install-peers.sh`).

use std::collections::BTreeSet;
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::{Duration, Instant};

use vhu_api::{FdbEntryView, PortSpec, PortStats, PortView};
use vhu_tests::netns::{self, Netns, NsProcess};
use vhu_tests::peers;
use vhu_tests::process::RunDir;
use vhu_tests::switch::{switch_bin, SwitchProc};

/// Version `scripts/install-peers.sh` installs.
const SCHEMATHESIS_VERSION: &str = "4.32.5";

/// Examples per operation and phase: about a minute on this machine.
/// `VHU_ST_MAX_EXAMPLES` asks for more (a deeper local run).
const MAX_EXAMPLES: u32 = 20;

/// The ports the switch starts with: one of each kind. `{run}` is the test's
/// directory.
const FIXTURES: &[&str] = &[
    r#"{"name":"fx-vm","kind":"vhost-user","queues":2,"mac":["52:54:00:00:00:01"],"mtu":9000,"vlan":{"trunk":[10,20],"native":10},"offloads":false,"owner":"root","group":"0","mode":"0660"}"#,
    r#"{"name":"fx-client","kind":"vhost-user","role":"client","socket":"{run}/vmm.sock"}"#,
    r#"{"name":"fx-tap","kind":"tap","interface":"vhufx-tap","vlan":30}"#,
    r#"{"name":"fx-pkt","kind":"af_packet","interface":"vhufx-a0","qdisc_bypass":true}"#,
    r#"{"name":"fx-xdp","kind":"af_xdp","interface":"vhufx-b0","zero_copy":"off"}"#,
];

/// The veth pairs in the switch's namespace (the first of each is a port's).
const VETHS: &[(&str, &str)] = &[("vhufx-a0", "vhufx-a1"), ("vhufx-b0", "vhufx-b1")];

/// The source MAC of the frames sent into `fx-pkt`.
const SRC_MAC: &str = "02:00:00:00:00:bb";

/// schemathesis' configuration; `{hooks}` is the hooks file.
const ST_CONFIG: &str = r#"
hooks = "{hooks}"
workers = 1
request-timeout = 10

[generation]
max-examples = {max_examples}
database = "none"

# Valid, and still refused with 422 when the host says no: no such
# interface or account, a PMD index beyond the threads, a native VLAN not in
# its trunk, a socket path outside the (read-only) test directory.
[[operations]]
include-path = "/ports"
include-method = "POST"
checks.positive_data_acceptance.expected-statuses = ["2xx", "404", "409", "422"]

# A filter string the tracing crate does not parse.
[[operations]]
include-path = "/log-level"
include-method = "PUT"
checks.positive_data_acceptance.expected-statuses = ["2xx", "422"]
"#;

/// The hook bounding captures (see the module's documentation).
const ST_HOOKS: &str = r#"
import schemathesis

MAX_SECONDS = 86400


def _valid_seconds(v):
    if isinstance(v, bool):
        return False
    if isinstance(v, str) and v.isascii() and v.isdigit():
        v = int(v)
    return isinstance(v, int) and 1 <= v <= MAX_SECONDS


@schemathesis.hook
def before_call(context, case, kwargs):
    if case.operation.path != "/ports/{name}/capture":
        return
    q = dict(case.query or {})
    s = q.get("seconds")
    if s is None or _valid_seconds(s):
        q["seconds"] = 1
        case.query = q
"#;

/// Names of the interfaces `ip -o link` lists (in `ns`, or the host's).
fn links(ns: Option<&Netns>) -> BTreeSet<String> {
    let out = match ns {
        Some(ns) => netns::run(&["ip", "-n", ns.name(), "-o", "link", "show"]),
        None => netns::run(&["ip", "-o", "link", "show"]),
    };
    out.lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|n| n.split('@').next().unwrap_or(n).to_owned())
        .collect()
}

/// The frames of the Enhanced Packet Blocks of a pcapng stream.
fn pcapng_frames(b: &[u8]) -> Vec<Vec<u8>> {
    const EPB: u32 = 6;
    let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
    let mut frames = Vec::new();
    let mut o = 0;
    while o + 12 <= b.len() {
        let (ty, len) = (u32_at(o), u32_at(o + 4) as usize);
        assert!(len >= 12 && o + len <= b.len(), "truncated block at {o}");
        if ty == EPB {
            let cap = u32_at(o + 20) as usize;
            frames.push(b[o + 28..o + 28 + cap].to_vec());
        }
        o += len;
    }
    assert_eq!(o, b.len(), "trailing bytes after the last block");
    frames
}

/// The `i`th test frame: broadcast from [`SRC_MAC`], EtherType 0x88b5, `i`
/// in the payload.
fn frame(i: u32) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend(netns::mac_octets(SRC_MAC));
    f.extend([0x88, 0xb5]);
    f.extend(i.to_be_bytes());
    f.resize(64, 0x5a);
    f
}

/// Writes `vhu-switch-jail` into the test directory: it runs the switch in
/// `ns` with every mount read-only but that directory.
fn write_jail(run: &RunDir, ns: &Netns) -> std::path::PathBuf {
    let dir = run.path().display();
    let script = format!(
        r#"#!/bin/sh
# vhu-switch in network namespace {ns}, everything read-only but {dir}.
set -e
if [ "$1" != --in-jail ]; then exec ip netns exec '{ns}' "$0" --in-jail "$@"; fi
shift
# `ip netns exec` gave this process a mount namespace of its own.
mount --bind '{dir}' '{dir}'
awk '{{print $2}}' /proc/self/mounts | sort -u | while read -r m; do
	case $m in
	/proc | /proc/* | /sys | /sys/* | '{dir}') ;;
	*) mount -o remount,bind,ro "$m" 2>/dev/null || true ;;
	esac
done
exec '{bin}' "$@"
"#,
        ns = ns.name(),
        bin = switch_bin().display(),
    );
    let path = run.join("vhu-switch-jail");
    std::fs::write(&path, script).expect("write the jail script");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// `socat` from a free port of 127.0.0.1 to the control socket; the port.
fn bridge(sw: &SwitchProc) -> (NsProcess, u16) {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port();
    let mut cmd = Command::new("socat");
    cmd.arg(format!("TCP-LISTEN:{port},bind=127.0.0.1,fork,reuseaddr"))
        .arg(format!("UNIX-CONNECT:{}", sw.control.display()));
    let socat = NsProcess::spawn(cmd, "socat".into());
    let t0 = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "socat does not listen on {port} (is it installed? scripts/install-peers.sh):\n{}",
            socat.describe()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (socat, port)
}

/// Every route with a success case, on the fixtures.
fn every_route_succeeds(sw: &SwitchProc, ns: &Netns, run: &RunDir) {
    assert_eq!(sw.call("GET", "/live", "", 200), br#"{"status":"ok"}"#);
    assert_eq!(sw.call("GET", "/ready", "", 200), br#"{"status":"ready"}"#);
    let doc: serde_json::Value = sw.get("/openapi.json");
    assert_eq!(
        (
            doc["openapi"].as_str(),
            doc["paths"].as_object().map(|p| p.len())
        ),
        (Some("3.0.3"), Some(10))
    );

    let run_s = run.path().to_str().unwrap();
    for f in FIXTURES {
        let body = f.replace("{run}", run_s);
        let v: PortView = serde_json::from_slice(&sw.call("POST", "/ports", &body, 201)).unwrap();
        let spec: PortSpec = serde_json::from_str(&body).unwrap();
        assert_eq!(v.spec, spec, "POST /ports answers the port as given");
        assert_eq!(sw.get::<PortView>(&format!("/ports/{}", spec.name)), v);
    }
    let all: Vec<PortView> = sw.get("/ports");
    let names: Vec<&str> = all.iter().map(|p| p.spec.name.as_str()).collect();
    assert_eq!(names, ["fx-client", "fx-pkt", "fx-tap", "fx-vm", "fx-xdp"]);
    let vm = &all[3];
    assert_eq!(
        vm.state.socket_path.as_deref(),
        Some(sw.sockets.join("fx-vm.sock").to_str().unwrap())
    );
    let mode = std::fs::metadata(sw.sockets.join("fx-vm.sock"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o660, "the socket's mode as asked");
    for p in &all {
        let uplink = p.spec.kind != vhu_api::PortKind::VhostUser;
        assert_eq!(
            (p.state.connected, p.state.origin.as_str()),
            (uplink, "api"),
            "{}",
            p.spec.name
        );
    }
    assert!(links(Some(ns)).contains("vhufx-tap"), "the TAP exists");

    let e = r#"{"mac":"02:00:00:00:00:aa","port":"fx-tap","vlan":30}"#;
    assert_eq!(
        sw.call("POST", "/fdb", e, 201),
        br#"{"vlan":30,"mac":"02:00:00:00:00:aa","port":"fx-tap","static":true,"age_secs":0}"#
    );

    // Three frames into fx-pkt, seen by its capture, counted, flooded to
    // fx-xdp (the other port of VLAN 0 that is up), and learned.
    let cap = std::thread::scope(|s| {
        let cap = s.spawn(|| sw.call("GET", "/ports/fx-pkt/capture?count=3&seconds=20", "", 200));
        let mut sent = Vec::new();
        while !cap.is_finished() {
            let i = u32::try_from(sent.len()).unwrap();
            let hex = vhu_tests::wire::to_hex(&frame(i));
            ns.exec(&["python3", "-c", peers::SEND_FRAMES, VETHS[0].1, &hex]);
            sent.push(frame(i));
            assert!(sent.len() < 200, "the capture did not end after 200 frames");
            std::thread::sleep(Duration::from_millis(50));
        }
        (cap.join().unwrap(), sent)
    });
    let (pcap, sent) = cap;
    let got = pcapng_frames(&pcap);
    assert_eq!(got.len(), 3, "count=3");
    let first = sent
        .iter()
        .position(|f| *f == got[0])
        .expect("the first captured frame is one sent");
    assert_eq!(
        got,
        sent[first..first + 3],
        "three consecutive frames, exact"
    );
    let n = sent.len() as u64;
    let t0 = Instant::now();
    let (pkt, xdp) = loop {
        let pkt: PortStats = sw.get("/ports/fx-pkt/stats");
        let xdp: PortStats = sw.get("/ports/fx-xdp/stats");
        if (pkt.total.tx_packets, xdp.total.rx_packets) == (n, n)
            || t0.elapsed() > Duration::from_secs(5)
        {
            break (pkt, xdp);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        (pkt.port.as_str(), pkt.total.tx_packets, pkt.total.tx_bytes),
        ("fx-pkt", n, 64 * n),
        "{pkt:?}"
    );
    assert_eq!(
        (pkt.queues.len(), &pkt.queues[0]),
        (1, &pkt.total),
        "one queue"
    );
    assert_eq!(xdp.total.rx_packets, n, "flooded to fx-xdp: {xdp:?}");

    let fdb: Vec<FdbEntryView> = sw.get("/fdb");
    let learned: Vec<_> = fdb.iter().filter(|e| !e.is_static).collect();
    assert_eq!(fdb.len(), 2, "{fdb:?}");
    assert_eq!(
        (
            learned[0].mac.to_string(),
            learned[0].port.as_str(),
            learned[0].vlan
        ),
        (SRC_MAC.to_owned(), "fx-pkt", 0)
    );
    assert_eq!(sw.call("DELETE", "/fdb", "", 200), br#"{"flushed":1}"#);
    let fdb: Vec<FdbEntryView> = sw.get("/fdb");
    assert_eq!(
        (fdb.len(), fdb[0].is_static, fdb[0].port.as_str()),
        (1, true, "fx-tap")
    );

    let m = String::from_utf8(sw.call("GET", "/metrics", "", 200)).unwrap();
    for want in [
        r#"vhu_port_connected{port="fx-tap",kind="tap"} 1"#,
        r#"vhu_port_connected{port="fx-vm",kind="vhost-user"} 0"#,
        "vhu_fdb_entries 1",
    ] {
        assert!(m.lines().any(|l| l == want), "{want:?} not in\n{m}");
    }
    assert_eq!(
        sw.call(
            "PUT",
            "/log-level",
            r#"{"level":"info,vhu_switch=debug"}"#,
            200
        ),
        br#"{"level":"info,vhu_switch=debug"}"#
    );

    // DELETE on a port made for it; its socket goes with it.
    sw.call(
        "POST",
        "/ports",
        r#"{"name":"gone","kind":"vhost-user"}"#,
        201,
    );
    assert!(sw.sockets.join("gone.sock").exists());
    assert!(sw.call("DELETE", "/ports/gone", "", 204).is_empty());
    assert!(!sw.sockets.join("gone.sock").exists());
    sw.call("GET", "/ports/gone", "", 404);

    // The jail holds: a socket outside the test directory is refused (in
    // an existing directory, so that it is the bind that fails).
    let outside = format!("/vhu-jail-probe-{}.sock", std::process::id());
    let body = format!(r#"{{"name":"probe","kind":"vhost-user","socket":"{outside}"}}"#);
    let (s, b) = sw
        .try_call("POST", "/ports", Some(body.as_bytes()))
        .unwrap();
    let b = String::from_utf8_lossy(&b);
    assert!(s == 422 && b.contains("Read-only file system"), "{s} {b}");
    assert!(!std::path::Path::new(&outside).exists());
}

/// Runs schemathesis against the bridged API; its output, and whether it
/// exited 0.
fn schemathesis(run: &RunDir, port: u16) -> (bool, String) {
    let st = vhu_tests::qemu::peers_dir().join("venv/bin/st");
    assert!(
        st.is_file(),
        "{} missing: run scripts/install-peers.sh",
        st.display()
    );
    let v = Command::new(&st)
        .arg("--version")
        .output()
        .expect("st --version");
    let v = String::from_utf8_lossy(&v.stdout);
    assert!(
        v.contains(SCHEMATHESIS_VERSION),
        "{v}: want schemathesis {SCHEMATHESIS_VERSION} (scripts/install-peers.sh)"
    );
    let hooks = run.join("st_hooks.py");
    std::fs::write(&hooks, ST_HOOKS).unwrap();
    let config = run.join("schemathesis.toml");
    let text = ST_CONFIG
        .replace("{hooks}", hooks.to_str().unwrap())
        .replace(
            "{max_examples}",
            &std::env::var("VHU_ST_MAX_EXAMPLES").unwrap_or_else(|_| MAX_EXAMPLES.to_string()),
        );
    std::fs::File::create(&config)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .unwrap();
    let t0 = Instant::now();
    let out = Command::new("timeout")
        .arg("900")
        .arg(&st)
        .arg("--config-file")
        .arg(&config)
        .args(["--no-color", "run", "--checks", "all"])
        .arg(format!("http://127.0.0.1:{port}/openapi.json"))
        .current_dir(run.path())
        .output()
        .expect("run schemathesis");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("schemathesis: {:?}, {}", t0.elapsed(), out.status);
    (out.status.success(), text)
}

#[test]
#[ignore = "needs root and the peers: run scripts/test.sh"]
fn schemathesis_finds_nothing_and_every_route_succeeds() {
    let host_links = links(None);
    let run = RunDir::new("switch-st");
    let ns = Netns::new();
    for (a, b) in VETHS {
        ns.exec(&["ip", "link", "add", a, "type", "veth", "peer", "name", b]);
        ns.exec(&["ip", "link", "set", a, "up"]);
        ns.exec(&["ip", "link", "set", b, "up"]);
    }
    let jail = write_jail(&run, &ns);
    // Read by SwitchProc when it starts the switch; this binary runs this
    // one test.
    std::env::set_var("VHU_SWITCH_BIN", &jail);
    let mut sw = SwitchProc::start(&run, "", &[]);

    every_route_succeeds(&sw, &ns, &run);

    let (socat, port) = bridge(&sw);
    let (ok, out) = schemathesis(&run, port);
    assert!(ok, "schemathesis found problems:\n{out}");
    assert!(
        out.contains("Tested: 13") && out.contains("Stateful"),
        "not every operation or phase ran:\n{out}"
    );
    drop(socat);

    // Whatever the fuzzing left is removed, and then nothing is left.
    sw.call("PUT", "/log-level", r#"{"level":"info"}"#, 200);
    let left: Vec<PortView> = sw.get("/ports");
    for p in &left {
        let path = format!("/ports/{}", vhu_api::client::encode_segment(&p.spec.name));
        sw.call("DELETE", &path, "", 204);
    }
    assert_eq!(sw.call("GET", "/ports", "", 200), b"[]");
    assert_eq!(sw.call("GET", "/fdb", "", 200), b"[]");
    let want: BTreeSet<String> = ["lo"]
        .into_iter()
        .chain(VETHS.iter().flat_map(|(a, b)| [*a, *b]))
        .map(str::to_owned)
        .collect();
    assert_eq!(links(Some(&ns)), want, "an interface outlived its port");
    let sockets: Vec<_> = std::fs::read_dir(&sw.sockets)
        .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(
        sockets.is_empty(),
        "sockets outlived their ports: {sockets:?}"
    );
    assert_eq!(links(None), host_links, "the host's interfaces changed");
    let st = sw.stop();
    assert!(st.success(), "SIGTERM: {st}\n{}", sw.log());
    assert!(!sw.control.exists(), "SIGTERM left the control socket");
}
