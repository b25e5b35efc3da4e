// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The CNI plugin's input parsing on arbitrary bytes: the network
//! configuration ([`NetConf::parse`]), the command, `CNI_ARGS` and the other
//! `CNI_*` variables ([`Command::parse`], [`parse_args`], [`CniEnv::read`]),
//! and the names and paths an attachment derives from them.
//!
//! Input: NUL-separated parts: the configuration (stdin), then the values
//! of [`VARS`] in order; a missing part, or one that is not UTF-8, is an
//! unset variable (as `std::env::var` sees it).
//!
//! The node configuration is the embedded default (its parser has its own
//! target, [`crate::cni_node`]).
//!
//! Checks: nothing panics; every error carries the code its layer documents
//! (4 for the environment; 1, 2, 6 or 7 for the configuration) and a
//! non-empty message, and [`cmd::run`] returns exactly that error (it is
//! only called when it fails, or answers VERSION, before any I/O); a
//! configuration that parses is what its fields say, in range, and parses
//! the same once written back; the environment read is what the variables
//! say; the port name, TAP name, MAC, socket paths and record of an
//! attachment are valid and stay under their directories.

use std::collections::BTreeMap;
use std::path::{Component, Path};

use serde_json::Value;
use vhu_cni::attach::{self, Record};
use vhu_cni::cmd;
use vhu_cni::config::{self, Kind, NetConf, VmRole, SUPPORTED_VERSIONS};
use vhu_cni::env::{check_container_id, parse_args, CniEnv, Command};
use vhu_cni::error::{
    CniError, DECODE, INCOMPATIBLE_VERSION, INVALID_CONFIG, INVALID_ENV, UNSUPPORTED_FIELD,
};

/// The variables, in input order after the configuration.
pub const VARS: &[&str] = &[
    "CNI_COMMAND",
    "CNI_CONTAINERID",
    "CNI_IFNAME",
    "CNI_NETNS",
    "CNI_ARGS",
    "CNI_PATH",
];

/// What one input did, for the seed replay to assert on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The command, or the error code.
    pub command: Result<Command, u32>,
    /// The configuration's version, or the error code.
    pub config: Result<String, u32>,
    /// The environment read for the command (None: no command or no
    /// configuration to read it for), or the error code.
    pub env: Option<Result<(), u32>>,
}

/// Runs the checks (always true).
pub fn run(data: &[u8]) -> bool {
    outcome(data);
    true
}

fn check_error(e: &CniError, codes: &[u32], what: &str) {
    assert!(codes.contains(&e.code), "{what}: {e:?} (codes {codes:?})");
    assert!(!e.msg.trim().is_empty(), "{what}: empty message");
    let j = e.to_json("1.0.0");
    assert_eq!(j["code"], e.code);
    assert_eq!(j["msg"].as_str(), Some(e.msg.as_str()));
}

/// Runs the checks and says what happened.
pub fn outcome(data: &[u8]) -> Outcome {
    let mut parts = data.split(|&b| b == 0);
    let stdin = parts.next().unwrap_or_default();
    let vars: BTreeMap<&str, String> = VARS
        .iter()
        .zip(parts)
        .filter_map(|(k, v)| Some((*k, std::str::from_utf8(v).ok()?.to_owned())))
        .collect();
    let get = |k: &str| vars.get(k).cloned();

    let cmd_var = get("CNI_COMMAND");
    let command = Command::parse(cmd_var.as_deref());
    match &command {
        Ok(c) => {
            assert_eq!(cmd_var.as_deref(), Some(c.name()));
            assert_eq!(Command::parse(Some(c.name())).as_ref(), Ok(c));
        }
        Err(e) => {
            check_error(e, &[INVALID_ENV], "CNI_COMMAND");
            assert!(e.msg.contains("CNI_COMMAND"), "{e:?}");
        }
    }

    let args_raw = get("CNI_ARGS").unwrap_or_default();
    let args = parse_args(&args_raw);
    check_args(&args_raw, &args);

    let conf = NetConf::parse(stdin);
    match &conf {
        Ok(c) => check_conf(stdin, c),
        Err(e) => check_error(
            e,
            &[
                INCOMPATIBLE_VERSION,
                UNSUPPORTED_FIELD,
                DECODE,
                INVALID_CONFIG,
            ],
            "configuration",
        ),
    }

    // DEL parses leniently: what the node would refuse is ignored. Whatever
    // parses strictly parses the same leniently.
    let del_conf = NetConf::parse_for_del(stdin, &vhu_cni::node::NodeConfig::default());
    if let Ok(c) = &conf {
        let d = del_conf
            .as_ref()
            .expect("a strict parse's configuration parses for DEL");
        assert_eq!(format!("{d:?}"), format!("{c:?}"));
    }
    let cmd_conf = match &command {
        Ok(Command::Del) => &del_conf,
        _ => &conf,
    };

    // What `cmd::run` must answer without I/O, if anything.
    let mut env_out = None;
    let early: Option<Result<Option<Value>, CniError>> = match (&command, cmd_conf) {
        (Err(e), _) => Some(Err(e.clone())),
        (Ok(Command::Version), _) => Some(Ok(Some(serde_json::json!({
            "cniVersion": config::SPEC_VERSION,
            "supportedVersions": SUPPORTED_VERSIONS,
        })))),
        (Ok(_), Err(e)) => Some(Err(e.clone())),
        (Ok(c), Ok(conf)) => {
            if matches!(c, Command::Status | Command::Gc) && !conf.is_1_1() {
                let e = cmd::run(&get, stdin).expect_err("STATUS/GC of an old version");
                check_error(&e, &[INCOMPATIBLE_VERSION], "STATUS/GC version");
                None
            } else {
                let env = CniEnv::read(*c, &get);
                env_out = Some(env.as_ref().map(|_| ()).map_err(|e| e.code));
                match env {
                    Err(e) => {
                        check_error(&e, &[INVALID_ENV], "environment");
                        assert!(e.msg.contains("CNI_"), "{e:?}");
                        Some(Err(e))
                    }
                    Ok(env) => {
                        check_env(*c, &get, &env);
                        if matches!(c, Command::Add | Command::Del | Command::Check) {
                            check_attachment(conf, &env);
                        }
                        None
                    }
                }
            }
        }
    };
    if let Some(want) = early {
        assert_eq!(cmd::run(&get, stdin), want, "cmd::run");
    }
    Outcome {
        command: command.map_err(|e| e.code),
        config: conf.map(|c| c.cni_version).map_err(|e| e.code),
        env: env_out,
    }
}

fn check_args(raw: &str, args: &Result<BTreeMap<String, String>, CniError>) {
    match args {
        Err(e) => {
            check_error(e, &[INVALID_ENV], "CNI_ARGS");
            assert!(e.msg.starts_with("CNI_ARGS"), "{e:?}");
        }
        Ok(m) => {
            let mut want = BTreeMap::new();
            for p in raw.split(';').filter(|p| !p.is_empty()) {
                let (k, v) = p.split_once('=').expect("a pair without '=' accepted");
                want.insert(k.to_owned(), v.to_owned());
            }
            assert_eq!(m, &want, "CNI_ARGS {raw:?}");
            if let Some(u) = m.get("K8S_POD_UID") {
                assert!(check_container_id(u).is_ok());
            }
        }
    }
}

/// A configuration that parsed is what its fields say.
fn check_conf(stdin: &[u8], c: &NetConf) {
    assert!(SUPPORTED_VERSIONS.contains(&c.cni_version.as_str()));
    assert_eq!(
        config::peek_version(stdin).as_deref(),
        Some(c.cni_version.as_str())
    );
    assert_eq!(c.raw["cniVersion"].as_str(), Some(c.cni_version.as_str()));
    assert_eq!(c.raw["name"].as_str(), Some(c.name.as_str()));
    assert!(!c.name.is_empty() && c.name.len() <= 128);
    assert!(c
        .name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b)));
    for p in [&c.control_socket, &c.state_dir] {
        assert!(p.is_absolute() && clean(p), "{p:?}");
    }
    assert!(c.host_socket_dir.starts_with('/'));
    if let Some(m) = c.mac {
        assert!(m.is_unicast(), "mac {m:?}");
    }
    if let Some(m) = c.mtu {
        assert!((68..=9216).contains(&m), "mtu {m}");
    }
    match c.kind {
        Kind::VhostUser => assert_eq!(c.raw["kind"], "vhost-user"),
        Kind::Tap => {
            assert_eq!(c.raw["kind"], "tap");
            assert_eq!(c.vm_role, VmRole::Server);
            assert!(
                c.socket_owner.is_none() && c.socket_group.is_none() && c.socket_mode.is_none()
            );
        }
        Kind::HostTap => {
            assert_eq!(c.raw["kind"], "host-tap");
            assert!(c.kata_dan, "a host-tap is a Kata DAN device");
        }
    }
    if let Some(q) = c.queues {
        let max = if c.kind == Kind::VhostUser { 128 } else { 64 };
        assert!((1..=max).contains(&q), "queues {q}");
    }
    if let Some(t) = &c.ipam_type {
        assert_eq!(c.raw["ipam"]["type"].as_str(), Some(t.as_str()));
    }
    // Written back, it parses the same.
    let again = NetConf::parse(&serde_json::to_vec(&c.raw).expect("JSON"))
        .expect("a parsed configuration parses again");
    assert_eq!(format!("{again:?}"), format!("{c:?}"));
}

/// No `.` or `..` components.
fn clean(p: &Path) -> bool {
    p.components()
        .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
}

/// The environment read is what the variables say.
fn check_env(c: Command, get: &dyn Fn(&str) -> Option<String>, env: &CniEnv) {
    let per_attachment = matches!(c, Command::Add | Command::Del | Command::Check);
    if per_attachment {
        assert_eq!(
            get("CNI_CONTAINERID").as_deref(),
            Some(env.container_id.as_str())
        );
        assert!(check_container_id(&env.container_id).is_ok());
        assert_eq!(get("CNI_IFNAME").as_deref(), Some(env.ifname.as_str()));
        assert!(vhu_api::port::check_ifname(&env.ifname).is_ok());
        assert_eq!(get("CNI_NETNS").unwrap_or_default(), env.netns);
        if c != Command::Del {
            assert!(!env.netns.is_empty());
        }
        assert!(env.netns.is_empty() || env.netns.starts_with('/'));
    } else {
        assert!(env.container_id.is_empty() && env.ifname.is_empty() && env.netns.is_empty());
    }
    assert_eq!(env.args_raw, get("CNI_ARGS").unwrap_or_default());
    assert_eq!(Ok(&env.args), parse_args(&env.args_raw).as_ref());
    let p = get("CNI_PATH").unwrap_or_default();
    let want: Vec<&str> = p.split(':').filter(|s| !s.is_empty()).collect();
    let got: Vec<&str> = env
        .path
        .iter()
        .map(|p| p.to_str().expect("UTF-8"))
        .collect();
    assert_eq!(got, want);
}

/// The names and paths of an attachment.
fn check_attachment(conf: &NetConf, env: &CniEnv) {
    let port = attach::port_name(&conf.name, &env.container_id, &env.ifname);
    assert_eq!(port.len(), 29, "{port}");
    assert!(port.starts_with(&attach::network_prefix(&conf.name)));
    assert!(vhu_api::port::check_name(&port).is_ok(), "{port}");
    assert_eq!(
        port,
        attach::port_name(&conf.name, &env.container_id, &env.ifname)
    );
    let tap = attach::tap_name(&port);
    assert_eq!(tap.len(), 15);
    assert!(vhu_api::port::check_ifname(&tap).is_ok(), "{tap}");
    let mac = attach::derived_mac(&port);
    assert!(mac.is_unicast() && mac.0[0] & 2 != 0, "{mac:?}");
    let pod = attach::pod_socket_path(&env.ifname);
    assert!(clean(Path::new(&pod)), "{pod}");
    assert_eq!(
        Path::new(&pod).parent().and_then(Path::parent),
        Some(Path::new(config::POD_SOCKET_DIR))
    );
    let rec = attach::record_path(conf, &port);
    assert!(clean(&rec) && rec.starts_with(&conf.state_dir), "{rec:?}");

    let t = &conf.host_socket_dir;
    let host = match attach::host_dirs(conf, env) {
        // A deviceID names the device plugin's directory, which must exist
        // (the one lookup this makes on the filesystem).
        Err(e) if conf.device_id.is_some() => {
            check_error(&e, &[INVALID_CONFIG], "host_dirs");
            assert!(e.msg.contains("deviceID"), "{e:?}");
            None
        }
        Err(e) => {
            check_error(&e, &[INVALID_ENV], "host_dirs");
            assert!(t.contains("{podUID}") && env.pod_uid().is_none(), "{e:?}");
            None
        }
        Ok(h) if conf.device_id.is_some() => {
            let id = conf.device_id.as_deref().unwrap_or_default();
            assert_eq!(h.pod_dir, conf.device_dir.join(id));
            assert!(!h.owns_pod_dir);
            assert_eq!(h.socket, h.pod_dir.join(&env.ifname).join("sock"));
            assert!(
                clean(&h.socket),
                "socket {:?} leaves its directory",
                h.socket
            );
            Some(h)
        }
        Ok(h) => {
            assert_eq!(h.if_dir, h.pod_dir.join(&env.ifname));
            assert_eq!(h.socket, h.if_dir.join("sock"));
            assert_eq!(h.owns_pod_dir, !t.contains("{podUID}"));
            let stem = t.split("{podUID}").next().unwrap_or_default();
            assert!(h.socket.to_str().expect("UTF-8").starts_with(stem));
            if h.owns_pod_dir {
                assert_eq!(h.pod_dir.parent(), Some(Path::new(t)));
            }
            assert!(
                clean(&h.socket),
                "socket {:?} leaves its directory",
                h.socket
            );
            Some(h)
        }
    };
    let _ = host;
    let r = Record::new(conf, env, &port);
    let back: Record =
        serde_json::from_slice(&serde_json::to_vec(&r).expect("JSON")).expect("record");
    assert_eq!(back, r);
}

// ===== seeds =====

/// An input: the configuration, then the variables.
pub fn input(stdin: &str, vars: &[Option<&str>]) -> Vec<u8> {
    let mut v = stdin.as_bytes().to_vec();
    let n = vars.iter().rposition(Option::is_some).map_or(0, |i| i + 1);
    for x in &vars[..n] {
        v.push(0);
        if let Some(s) = x {
            v.extend_from_slice(s.as_bytes());
        } else {
            // Not UTF-8: unset.
            v.push(0xff);
        }
    }
    v
}

/// The committed seeds, by file name, with their outcome: configurations
/// of each version and kind (from `docs/cni.md` and the tests), each
/// command, and refusals of each layer.
pub fn seeds() -> Vec<(String, Vec<u8>, Outcome)> {
    let vhost = |v: &str| {
        format!(
            r#"{{"cniVersion":"{v}","name":"vhu-net","type":"vhu-cni","kind":"vhost-user","vmRole":"server","controlSocket":"/run/vhu/vhu.sock","vlan":10,"mtu":9000,"queues":4,"socketOwner":"107","socketGroup":"107","socketMode":"0660","capabilities":{{"CNIDeviceInfoFile":true,"mac":true}},"ipam":{{"type":"host-local","subnet":"10.10.0.0/24"}}}}"#
        )
    };
    let tap = |v: &str| {
        format!(
            r#"{{"cniVersion":"{v}","name":"vhutest","type":"vhu-cni","kind":"tap","mtu":1400,"mac":"02:00:00:00:00:05","vlan":{{"trunk":[10,20],"native":10}},"runtimeConfig":{{"mac":"02:00:00:00:00:06"}},"ipam":{{"type":"host-local","subnet":"10.77.0.0/24","routes":[{{"dst":"10.78.0.0/16"}}]}}}}"#
        )
    };
    let client = r#"{"cniVersion":"1.1.0","name":"vm-net","type":"vhu-cni","kind":"vhost-user","vmRole":"client","runtimeConfig":{"CNIDeviceInfoFile":"/var/run/k8s.cni.cncf.io/devinfo/x.json"},"cni.dev/valid-attachments":[{"containerID":"c1","ifname":"net1"}]}"#;
    let add = |cid: &str, args: &str| {
        vec![
            Some("ADD"),
            Some(cid),
            Some("net1"),
            Some("/var/run/netns/pod1"),
            Some(args),
            Some("/opt/cni/bin"),
        ]
        .into_iter()
        .map(|o| o.map(str::to_owned))
        .collect::<Vec<_>>()
    };
    let own = |v: &[Option<String>]| -> Vec<Option<String>> { v.to_vec() };
    let k8s = "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;K8S_POD_UID=pod-1";
    let ok = |v: &str, env: Option<Result<(), u32>>, cmd: Command| Outcome {
        command: Ok(cmd),
        config: Ok(v.to_owned()),
        env,
    };
    let mut out: Vec<(String, String, Vec<Option<String>>, Outcome)> = Vec::new();
    for v in SUPPORTED_VERSIONS {
        out.push((
            format!("add-vhost-user-{v}"),
            vhost(v),
            add("c1", k8s),
            ok(v, Some(Ok(())), Command::Add),
        ));
        out.push((
            format!("add-tap-{v}"),
            tap(v),
            add("c2", "K8S_POD_UID=pod-2"),
            ok(v, Some(Ok(())), Command::Add),
        ));
    }
    // A device plugin's device whose directory does not exist: ADD's
    // lookup refuses it (a configuration error), the parse accepts it.
    out.push((
        "add-vhost-user-device-id".into(),
        r#"{"cniVersion":"1.1.0","name":"vm-net","type":"vhu-cni","kind":"vhost-user","deviceID":"106"}"#.into(),
        add("c3", k8s),
        ok("1.1.0", Some(Ok(())), Command::Add),
    ));
    let mut del = add("c1", k8s);
    del[0] = Some("DEL".into());
    del[3] = None;
    out.push((
        "del-no-netns".into(),
        client.into(),
        own(&del),
        ok("1.1.0", Some(Ok(())), Command::Del),
    ));
    let mut check = add("c1", "");
    check[0] = Some("CHECK".into());
    out.push((
        "check-no-pod-uid".into(),
        vhost("1.0.0"),
        check,
        ok("1.0.0", Some(Ok(())), Command::Check),
    ));
    for (c, cmd) in [("STATUS", Command::Status), ("GC", Command::Gc)] {
        out.push((
            format!("{}-1.1.0", c.to_lowercase()),
            client.into(),
            vec![Some(c.into())],
            ok("1.1.0", Some(Ok(())), cmd),
        ));
    }
    out.push((
        "status-old-version".into(),
        vhost("0.4.0"),
        vec![Some("STATUS".into())],
        ok("0.4.0", None, Command::Status),
    ));
    out.push((
        "version".into(),
        r#"{"cniVersion":"1.1.0"}"#.into(),
        vec![Some("VERSION".into())],
        Outcome {
            command: Ok(Command::Version),
            config: Err(INVALID_CONFIG),
            env: None,
        },
    ));
    let bad_conf = |name: &str, conf: &str, code: u32| {
        (
            format!("bad-{name}"),
            conf.to_owned(),
            add("c1", k8s),
            Outcome {
                command: Ok(Command::Add),
                config: Err(code),
                env: None,
            },
        )
    };
    out.push(bad_conf("not-json", "{", DECODE));
    out.push(bad_conf(
        "version",
        r#"{"cniVersion":"0.3.1","name":"n","type":"vhu-cni"}"#,
        INCOMPATIBLE_VERSION,
    ));
    out.push(bad_conf(
        "field",
        r#"{"cniVersion":"1.0.0","name":"n","type":"vhu-cni","kind":"tap","colour":"red"}"#,
        UNSUPPORTED_FIELD,
    ));
    out.push(bad_conf(
        "tap-socket-owner",
        r#"{"cniVersion":"1.0.0","name":"n","type":"vhu-cni","kind":"tap","socketOwner":"qemu"}"#,
        INVALID_CONFIG,
    ));
    out.push(bad_conf(
        "state-dir-not-the-nodes",
        r#"{"cniVersion":"1.0.0","name":"n","type":"vhu-cni","kind":"vhost-user","stateDir":"/tmp/pod"}"#,
        INVALID_CONFIG,
    ));
    out.push(bad_conf(
        "device-info-outside",
        r#"{"cniVersion":"1.0.0","name":"n","type":"vhu-cni","kind":"vhost-user","runtimeConfig":{"CNIDeviceInfoFile":"/etc/passwd"}}"#,
        INVALID_CONFIG,
    ));
    out.push(bad_conf(
        "ipam-self",
        r#"{"cniVersion":"1.0.0","name":"n","type":"vhu-cni","kind":"vhost-user","ipam":{"type":"vhu-cni"}}"#,
        INVALID_CONFIG,
    ));
    out.push(bad_conf(
        "relative-dir",
        r#"{"cniVersion":"1.0.0","name":"n","type":"vhu-cni","kind":"vhost-user","hostSocketDir":"relative"}"#,
        INVALID_CONFIG,
    ));
    let bad_env = |name: &str, i: usize, val: Option<&str>| {
        let mut e = add("c1", k8s);
        e[i] = val.map(str::to_owned);
        let command = if i == 0 {
            Err(INVALID_ENV)
        } else {
            Ok(Command::Add)
        };
        (
            format!("bad-env-{name}"),
            vhost("1.0.0"),
            e,
            Outcome {
                command,
                config: Ok("1.0.0".into()),
                env: (i != 0).then_some(Err(INVALID_ENV)),
            },
        )
    };
    out.push(bad_env("command", 0, Some("ATTACH")));
    out.push(bad_env("container-id", 1, Some("-x")));
    out.push(bad_env("ifname", 2, Some("a/b")));
    out.push(bad_env("netns-relative", 3, Some("rel")));
    out.push(bad_env("args-unknown", 4, Some("K8S_POD_UID=x;COLOR=1")));
    out.push(bad_env("args-pair", 4, Some("FOO")));
    out.into_iter()
        .map(|(n, conf, vars, o)| {
            let v: Vec<Option<&str>> = vars.iter().map(Option::as_deref).collect();
            (n, input(&conf, &v), o)
        })
        .collect()
}
