// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Least privilege of `vhu-switch` (the release binary): it keeps only the
//! capabilities its port kinds need and refuses, clearly, a port it cannot
//! serve (docs/switch.md, "Privileges").
//!
//! * `unprivileged_switch_serves_vhost_user_and_refuses_af_packet`: started
//!   as `nobody` with no capability (`setpriv`), two vhost-user ports carry
//!   frames both ways (the in-process `TestDriver`, contents and counts);
//!   every thread's CapEff, CapPrm and CapAmb are 0, CapBnd is the
//!   launcher's (without `CAP_SETPCAP` it cannot shrink), NoNewPrivs is 1;
//!   `POST /ports` of an `af_packet` uplink and of a socket owned by root are
//!   refused with 422 naming `CAP_NET_RAW` / `CAP_CHOWN` and how to grant
//!   them, and the port list is the same before and after.
//! * `net_raw_only_switch_carries_an_af_packet_uplink`: started as `nobody`
//!   with ambient `CAP_NET_RAW` only, an `af_packet` uplink on a veth into a
//!   network namespace and a vhost-user port exchange 40 frames each way
//!   (counted at both ends and in the switch's counters); CapEff is exactly
//!   `CAP_NET_RAW`; a `tap` port is refused naming `CAP_NET_ADMIN`.
//!   Restarted without `CAP_NET_RAW`, the persisted uplink is listed as
//!   down with that refusal, logged, and kept in the state file.
//! * `config_port_without_its_capability_fails_validation`: a configuration
//!   file with an `af_packet` port, the switch started without
//!   `CAP_NET_RAW`: exit 64, the error names the file's place and
//!   `CAP_NET_RAW`, no control socket, socket or state directory is created.
//! * `root_switch_drops_what_no_port_kind_needs`: as root with the default
//!   options, CapEff, CapPrm and CapBnd of every thread are exactly the
//!   capabilities the port kinds may use (no `CAP_DAC_OVERRIDE`,
//!   `CAP_SYS_PTRACE`, `CAP_SYS_MODULE`, `CAP_SETUID`...); with `--port-kinds
//!   vhost-user,af_packet,af_xdp,tap` `CAP_SYS_ADMIN` is gone too; a
//!   vhost-user socket with `owner`/`group` gets them (chown works with the
//!   kept `CAP_CHOWN`).
//!
//! They need root (setpriv, veth, netns) and move traffic: run them under
//! the e2e lock with `--include-ignored --test-threads=1`.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use vhost_net_backend::test_utils::{RxLayout, TestDriver};
use vhu_api::PortView;
use vhu_tests::driver::send_all;
use vhu_tests::netns::VethPair;
use vhu_tests::process::RunDir;
use vhu_tests::switch::{switch_bin, SwitchOpts, SwitchProc};
use vhu_tests::wire::{numbered_frame, EXPERIMENTAL_ETHERTYPE};

const MAC_A: &str = "02:00:00:cb:00:0a";
const MAC_B: &str = "02:00:00:cb:00:0b";
const MAC_N: &str = "02:00:00:cb:00:0e";

/// `CAP_CHOWN`, `CAP_NET_ADMIN`, `CAP_NET_RAW`, `CAP_IPC_LOCK`,
/// `CAP_SYS_ADMIN`, `CAP_BPF`: what the port kinds may use (never
/// `CAP_DAC_OVERRIDE`, even as root).
const ALL_KINDS: u64 = 1 | 1 << 12 | 1 << 13 | 1 << 14 | 1 << 21 | 1 << 39;
const CAP_NET_RAW: u64 = 1 << 13;
const CAP_SYS_ADMIN: u64 = 1 << 21;

fn frame(dst: &str, src: &str, seq: u64) -> Vec<u8> {
    numbered_frame(dst, src, seq, 64 + (seq % 200) as usize)
}

/// `setpriv` as `nobody:nogroup`, no supplementary groups, holding `caps`
/// (`+net_raw,...`) as inheritable and ambient, or nothing.
fn as_nobody(caps: Option<&str>) -> Vec<String> {
    let mut v: Vec<String> = [
        "setpriv",
        "--reuid=nobody",
        "--regid=nogroup",
        "--clear-groups",
    ]
    .map(String::from)
    .to_vec();
    match caps {
        Some(c) => {
            v.push(format!("--inh-caps={c}"));
            v.push(format!("--ambient-caps={c}"));
        }
        None => v.push("--inh-caps=-all".into()),
    }
    v
}

/// A run directory `nobody` owns.
fn nobody_run(tag: &str) -> RunDir {
    let run = RunDir::new(tag);
    std::os::unix::fs::chown(run.path(), Some(65534), Some(65534)).expect("chown the run dir");
    run
}

/// The capability masks of every thread of `pid`: (CapEff, CapPrm, CapInh,
/// CapAmb, CapBnd, NoNewPrivs) per thread.
fn thread_caps(pid: u32) -> Vec<[u64; 6]> {
    let mut out = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).expect("tasks") {
        let path = t.expect("task").path().join("status");
        let Ok(s) = std::fs::read_to_string(&path) else {
            continue;
        };
        let field = |k: &str, radix: u32| {
            let l = s
                .lines()
                .find(|l| l.starts_with(k))
                .unwrap_or_else(|| panic!("{k} not in {}", path.display()));
            u64::from_str_radix(l[k.len()..].trim(), radix).expect(k)
        };
        out.push([
            field("CapEff:", 16),
            field("CapPrm:", 16),
            field("CapInh:", 16),
            field("CapAmb:", 16),
            field("CapBnd:", 16),
            field("NoNewPrivs:", 10),
        ]);
    }
    assert!(out.len() >= 2, "the switch has its main and PMD threads");
    out
}

/// This process's bounding set (what `setpriv` hands on unchanged).
fn own_bounding() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let l = s.lines().find(|l| l.starts_with("CapBnd:")).unwrap();
    u64::from_str_radix(l[7..].trim(), 16).unwrap()
}

fn driver(sw: &SwitchProc, port: &str) -> TestDriver {
    let mut d = sw.driver(port);
    d.post_rx_buffers(0, 128, 2048, RxLayout::Single)
        .expect("post RX buffers");
    d.kick_rx(0);
    d
}

/// Receives `want.len()` frames of our ethertype on `d` (others, e.g. a
/// kernel's IPv6 chatter through an uplink, are skipped) and compares them
/// in order.
fn recv_exact(d: &mut TestDriver, want: &[Vec<u8>], what: &str) {
    let t0 = Instant::now();
    let mut got = Vec::new();
    while got.len() < want.len() && t0.elapsed() < Duration::from_secs(10) {
        let fs = d.recv_frames_until(0, want.len() - got.len(), Duration::from_millis(500));
        let n = fs.len();
        got.extend(
            fs.into_iter()
                .map(|f| f.data)
                .filter(|f| f.len() >= 14 && f[12..14] == EXPERIMENTAL_ETHERTYPE.to_be_bytes()),
        );
        if n > 0 {
            d.post_rx_buffers(0, n, 2048, RxLayout::Single)
                .expect("repost RX buffers");
            d.kick_rx(0);
        }
    }
    assert_eq!(got.len(), want.len(), "{what}: frames received");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(g == w, "{what}: frame {i} differs");
    }
}

fn port_names(sw: &SwitchProc) -> Vec<String> {
    let v: Vec<PortView> = sw.get("/ports");
    v.into_iter().map(|p| p.spec.name).collect()
}

/// `POST /ports` of `body` must be refused with 422 containing every one of
/// `want`; the port list is unchanged.
fn refused(sw: &SwitchProc, body: &str, want: &[&str]) {
    let before = port_names(sw);
    let out = sw.call("POST", "/ports", body, 422);
    let e: vhu_api::ApiError = serde_json::from_slice(&out).expect("an error body");
    for w in want {
        assert!(e.error.contains(w), "{w:?} not in {:?}", e.error);
    }
    assert_eq!(port_names(sw), before, "a refused port changed the list");
}

/// How long a test's frames may take to be queued.
const SEND_WITHIN: Duration = Duration::from_secs(5);

const TWO_PORTS: &str = r#"
[[port]]
name = "a"
kind = "vhost-user"

[[port]]
name = "b"
kind = "vhost-user"
"#;

#[test]
#[ignore = "needs root and the peers: run scripts/test.sh"]
fn unprivileged_switch_serves_vhost_user_and_refuses_af_packet() {
    let run = nobody_run("priv-a");
    let opts = SwitchOpts {
        wrap: as_nobody(None),
        ..SwitchOpts::default()
    };
    let sw = SwitchProc::start_with(&run, TWO_PORTS, &["--pmd-cpus", "0"], &opts);
    let uid = std::fs::metadata(format!("/proc/{}", sw.pid()))
        .unwrap()
        .uid();
    assert_eq!(uid, 65534, "the switch runs as nobody");
    let bnd = own_bounding();
    for (i, t) in thread_caps(sw.pid()).iter().enumerate() {
        assert_eq!(t[..4], [0, 0, 0, 0], "thread {i}: Eff, Prm, Inh, Amb");
        assert_eq!(t[4], bnd, "thread {i}: CapBnd is the launcher's");
        assert_eq!(t[5], 1, "thread {i}: NoNewPrivs");
    }
    let log = sw.log();
    assert!(
        log.contains("capabilities: effective none permitted none")
            && log.contains("af_packet ports cannot be served: they need CAP_NET_RAW"),
        "{log}"
    );

    let mut a = driver(&sw, "a");
    let mut b = driver(&sw, "b");
    let ab: Vec<_> = (0..50).map(|i| frame(MAC_B, MAC_A, i)).collect();
    assert_eq!(send_all(&mut a, &ab, SEND_WITHIN), ab.len());
    recv_exact(&mut b, &ab, "b from a (flooded)");
    let ba: Vec<_> = (100..150).map(|i| frame(MAC_A, MAC_B, i)).collect();
    assert_eq!(send_all(&mut b, &ba, SEND_WITHIN), ba.len());
    recv_exact(&mut a, &ba, "a from b (learned)");
    let st = sw.settle(&["a", "b"]);
    assert_eq!((st[0].total.tx_packets, st[0].total.rx_packets), (50, 50));
    assert_eq!((st[1].total.tx_packets, st[1].total.rx_packets), (50, 50));

    refused(
        &sw,
        r#"{"name":"up","kind":"af_packet","interface":"lo"}"#,
        &[
            "port \"up\": a af_packet port needs CAP_NET_RAW",
            "does not hold CAP_NET_RAW (it holds none)",
            "AmbientCapabilities=CAP_NET_RAW",
            "capabilities.add [NET_RAW]",
            "--ambient-caps=+net_raw",
        ],
    );
    refused(
        &sw,
        r#"{"name":"c","kind":"vhost-user","owner":"root"}"#,
        &["needs CAP_CHOWN to give its socket another owner"],
    );
    assert!(!sw.sockets.join("c.sock").exists(), "no socket for c");
    // Its own group needs nothing.
    let out = sw.call(
        "POST",
        "/ports",
        r#"{"name":"d","kind":"vhost-user","group":"nogroup","mode":"0660"}"#,
        201,
    );
    drop(out);
    let md = std::fs::metadata(sw.sockets.join("d.sock")).unwrap();
    assert_eq!(
        (md.uid(), md.gid(), md.mode() & 0o777),
        (65534, 65534, 0o660)
    );
}

/// Sends `n` frames from `MAC_N` to `dst` on `ifname` (AF_PACKET), then
/// prints how many of ours it received within `secs` seconds. Its frames
/// are [`frame`]'s (`wire::numbered_frame`: the pattern `j * 13 ^ seq`).
const PEER: &str = r#"
import socket, struct, sys, time
ifname, dst, n, secs = sys.argv[1], bytes.fromhex(sys.argv[2].replace(':', '')), int(sys.argv[3]), float(sys.argv[4])
src = bytes.fromhex(sys.argv[5].replace(':', ''))
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x88b5))
s.bind((ifname, 0x88b5))
for i in range(n):
    body = struct.pack('<Q', 1000 + i) + bytes(((j * 13) ^ (1000 + i)) & 0xff for j in range(22, 64 + (1000 + i) % 200))
    s.send(dst + src + b'\x88\xb5' + body)
print('sent', n, flush=True)
s.settimeout(0.2)
got = 0
end = time.time() + secs
while time.time() < end:
    try:
        f = s.recv(4096)
    except socket.timeout:
        continue
    if f[6:12] == bytes.fromhex(sys.argv[6].replace(':', '')) and f[12:14] == b'\x88\xb5':
        got += 1
print('received', got, flush=True)
"#;

#[test]
#[ignore = "needs root and the peers: run scripts/test.sh"]
fn net_raw_only_switch_carries_an_af_packet_uplink() {
    let link = VethPair::new();
    let run = nobody_run("priv-c");
    let opts = SwitchOpts {
        wrap: as_nobody(Some("+net_raw")),
        ..SwitchOpts::default()
    };
    let sw = SwitchProc::start_with(
        &run,
        "[[port]]\nname = \"a\"\nkind = \"vhost-user\"\n",
        &[],
        &opts,
    );
    for (i, t) in thread_caps(sw.pid()).iter().enumerate() {
        assert_eq!(
            t[0], CAP_NET_RAW,
            "thread {i}: CapEff is exactly CAP_NET_RAW"
        );
        assert_eq!(t[1], CAP_NET_RAW, "thread {i}: CapPrm");
        assert_eq!(t[5], 1, "thread {i}: NoNewPrivs");
    }
    sw.add_af_packet("up", link.host());
    refused(
        &sw,
        r#"{"name":"t","kind":"tap","interface":"vhupriv0"}"#,
        &["a tap port needs CAP_NET_ADMIN", "(it holds CAP_NET_RAW)"],
    );

    let mut a = driver(&sw, "a");
    // The namespace's peer sends 40 frames to a (flooded: a is unknown),
    // and listens for a's.
    let mut peer = link
        .ns()
        .command("python3")
        .arg("-c")
        .arg(PEER)
        .args([link.peer(), MAC_A, "40", "6", MAC_N, MAC_A])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3");
    let from_n: Vec<_> = (1000..1040).map(|i| frame(MAC_A, MAC_N, i)).collect();
    recv_exact(&mut a, &from_n, "a from the uplink");
    let to_n: Vec<_> = (0..40).map(|i| frame(MAC_N, MAC_A, i)).collect();
    assert_eq!(send_all(&mut a, &to_n, SEND_WITHIN), to_n.len());
    let t0 = Instant::now();
    while peer.try_wait().unwrap().is_none() {
        assert!(t0.elapsed() < Duration::from_secs(20), "the peer hangs");
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = peer.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("sent 40") && text.contains("received 40"),
        "peer: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let st = sw.settle(&["a", "up"]);
    assert!(st[0].total.rx_packets >= 40, "into a: {:?}", st[0]);
    assert_eq!(st[0].total.tx_packets, 40, "from a");
    assert!(st[1].total.tx_packets >= 40, "from the uplink: {:?}", st[1]);
    assert_eq!(st[1].total.rx_packets, 40, "into the uplink");

    // Persisted, the uplink comes back down (listed, kept in the state
    // file) when the switch restarts without CAP_NET_RAW.
    drop(a);
    let mut sw = sw;
    assert!(sw.stop().success());
    sw.set_wrap(as_nobody(None));
    sw.restart();
    let up: PortView = sw.get("/ports/up");
    let err = up.state.error.clone().unwrap_or_default();
    assert!(!up.state.connected, "{up:?}");
    assert!(
        err.contains("a af_packet port needs CAP_NET_RAW")
            && err.contains("--ambient-caps=+net_raw"),
        "{err}"
    );
    let state = std::fs::read_to_string(sw.state.join("ports.json")).unwrap();
    assert!(state.contains("\"up\""), "still persisted: {state}");
    sw.wait_log_count(
        "port \"up\" (persisted): port \"up\": a af_packet port needs CAP_NET_RAW",
        1,
        Duration::from_secs(5),
    );
}

#[test]
#[ignore = "needs root and the peers: run scripts/test.sh"]
fn config_port_without_its_capability_fails_validation() {
    let run = nobody_run("priv-d");
    let cfg = run.join("vhu.toml");
    std::fs::write(
        &cfg,
        "[[port]]\nname = \"a\"\nkind = \"vhost-user\"\n\n[[port]]\nname = \"up\"\nkind = \"af_packet\"\ninterface = \"lo\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o644)).unwrap();
    let wrap = as_nobody(None);
    let out = Command::new(&wrap[0])
        .args(&wrap[1..])
        .arg(switch_bin())
        .arg("--config")
        .arg(&cfg)
        .arg("--control-socket")
        .arg(run.join("ctl.sock"))
        .arg("--socket-dir")
        .arg(run.join("sockets"))
        .arg("--state-dir")
        .arg(run.join("state"))
        .stdin(Stdio::null())
        .output()
        .expect("run vhu-switch");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    let want = format!(
        "{}:5:1: port \"up\": a af_packet port needs CAP_NET_RAW",
        cfg.display()
    );
    assert!(err.contains("1 configuration error"), "{err}");
    assert!(err.contains(&want), "{want:?} not in {err}");
    assert!(err.contains("--ambient-caps=+net_raw"), "{err}");
    for p in ["ctl.sock", "sockets", "state"] {
        assert!(!run.join(p).exists(), "{p} was created");
    }
}

#[test]
#[ignore = "needs root and the peers: run scripts/test.sh"]
fn root_switch_drops_what_no_port_kind_needs() {
    let run = RunDir::new("priv-e");
    let mut sw = SwitchProc::start(&run, TWO_PORTS, &[]);
    let bnd = own_bounding();
    for (i, t) in thread_caps(sw.pid()).iter().enumerate() {
        assert_eq!(t[0], ALL_KINDS & bnd, "thread {i}: CapEff {:#x}", t[0]);
        assert_eq!(t[1], ALL_KINDS & bnd, "thread {i}: CapPrm");
        assert_eq!(t[4], ALL_KINDS & bnd, "thread {i}: CapBnd");
        assert_eq!((t[2], t[3], t[5]), (0, 0, 1), "thread {i}: Inh, Amb, NNP");
        for gone in [1, 16, 19, 7, 6, 2, 3, 25] {
            // DAC_OVERRIDE, SYS_MODULE, SYS_PTRACE, SETUID, SETGID,
            // DAC_READ_SEARCH, FOWNER, SYS_TIME
            assert_eq!(t[0] & 1 << gone, 0, "thread {i}: capability {gone}");
        }
    }
    // The kept CAP_CHOWN gives a socket its owner and group.
    sw.call(
        "POST",
        "/ports",
        r#"{"name":"c","kind":"vhost-user","owner":"nobody","group":"nogroup","mode":"0660"}"#,
        201,
    );
    let md = std::fs::metadata(sw.sockets.join("c.sock")).unwrap();
    assert_eq!(
        (md.uid(), md.gid(), md.mode() & 0o777),
        (65534, 65534, 0o660)
    );
    assert!(sw.stop().success());

    let run = RunDir::new("priv-e2");
    let sw = SwitchProc::start(
        &run,
        TWO_PORTS,
        &["--port-kinds", "vhost-user,af_packet,af_xdp,tap"],
    );
    for (i, t) in thread_caps(sw.pid()).iter().enumerate() {
        let want = ALL_KINDS & !CAP_SYS_ADMIN & bnd;
        assert_eq!((t[0], t[1], t[4]), (want, want, want), "thread {i}");
    }
    refused(
        &sw,
        r#"{"name":"p","kind":"tap","interface":"vhupriv1","netns":"/var/run/netns/none"}"#,
        &[
            "serves only port kinds [vhost-user, af_packet, af_xdp, tap]",
            "pod-tap",
        ],
    );
}
