// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The spec's environment variables.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::error::CniError;

/// `CNI_COMMAND`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// Attach.
    Add,
    /// Detach.
    Del,
    /// Verify an attachment.
    Check,
    /// Is the plugin ready for ADD.
    Status,
    /// Remove what is not in the valid attachments.
    Gc,
    /// The versions this plugin speaks.
    Version,
}

impl Command {
    /// Parses `CNI_COMMAND`.
    ///
    /// # Errors
    /// Code 4 for a missing or unknown command.
    pub fn parse(v: Option<&str>) -> Result<Self, CniError> {
        Ok(match v {
            Some("ADD") => Command::Add,
            Some("DEL") => Command::Del,
            Some("CHECK") => Command::Check,
            Some("STATUS") => Command::Status,
            Some("GC") => Command::Gc,
            Some("VERSION") => Command::Version,
            None | Some("") => {
                return Err(CniError::env(
                    "CNI_COMMAND is not set; vhu-cni is a CNI plugin, run by a container runtime \
                     (ADD, DEL, CHECK, STATUS, GC, VERSION)",
                ))
            }
            Some(c) => {
                return Err(CniError::env(format!(
                    "CNI_COMMAND {c:?} is unknown; use ADD, DEL, CHECK, STATUS, GC or VERSION"
                )))
            }
        })
    }

    /// The name in `CNI_COMMAND`.
    pub fn name(self) -> &'static str {
        match self {
            Command::Add => "ADD",
            Command::Del => "DEL",
            Command::Check => "CHECK",
            Command::Status => "STATUS",
            Command::Gc => "GC",
            Command::Version => "VERSION",
        }
    }
}

/// `CNI_ARGS` keys this plugin reads (others need `IgnoreUnknown=1`).
const KNOWN_ARGS: &[&str] = &[
    "IgnoreUnknown",
    "K8S_POD_NAMESPACE",
    "K8S_POD_NAME",
    "K8S_POD_INFRA_CONTAINER_ID",
    "K8S_POD_UID",
    "MAC",
];

/// The environment of one invocation.
#[derive(Debug, Clone, Default)]
pub struct CniEnv {
    /// `CNI_CONTAINERID`.
    pub container_id: String,
    /// `CNI_NETNS` (empty on a DEL after the sandbox is gone).
    pub netns: String,
    /// `CNI_IFNAME`.
    pub ifname: String,
    /// `CNI_ARGS`, parsed.
    pub args: BTreeMap<String, String>,
    /// `CNI_ARGS`, as given.
    pub args_raw: String,
    /// `CNI_PATH`, split.
    pub path: Vec<PathBuf>,
}

/// Whether `v` is 1-`max` of `A-Z a-z 0-9 _ . -`, starting with a letter
/// or digit: the spec's rule for container ids and plugin names.
pub fn is_spec_name(v: &str, max: usize) -> bool {
    v.bytes().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && v.len() <= max
        && v.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'))
}

/// A container id as the spec allows it.
pub fn check_container_id(v: &str) -> Result<(), String> {
    if is_spec_name(v, 1024) {
        Ok(())
    } else {
        Err(format!(
            "{v:?} is not a container id (letters, digits, _ . -, starting with a letter or digit)"
        ))
    }
}

impl CniEnv {
    /// Reads the variables `cmd` needs through `get`.
    ///
    /// # Errors
    /// Code 4 naming the variable.
    pub fn read(cmd: Command, get: &dyn Fn(&str) -> Option<String>) -> Result<Self, CniError> {
        let mut env = CniEnv::default();
        let per_attachment = matches!(cmd, Command::Add | Command::Del | Command::Check);
        if per_attachment {
            env.container_id = get("CNI_CONTAINERID").unwrap_or_default();
            if env.container_id.is_empty() {
                return Err(CniError::env(format!(
                    "CNI_CONTAINERID is not set; {} needs it",
                    cmd.name()
                )));
            }
            check_container_id(&env.container_id)
                .map_err(|m| CniError::env(format!("CNI_CONTAINERID: {m}")))?;
            env.ifname = get("CNI_IFNAME").unwrap_or_default();
            if env.ifname.is_empty() {
                return Err(CniError::env(format!(
                    "CNI_IFNAME is not set; {} needs it",
                    cmd.name()
                )));
            }
            vhu_api::port::check_ifname(&env.ifname)
                .map_err(|m| CniError::env(format!("CNI_IFNAME: {m}")))?;
            env.netns = get("CNI_NETNS").unwrap_or_default();
            if env.netns.is_empty() && cmd != Command::Del {
                return Err(CniError::env(format!(
                    "CNI_NETNS is not set; {} needs the pod's network namespace",
                    cmd.name()
                )));
            }
            if !env.netns.is_empty() && !env.netns.starts_with('/') {
                return Err(CniError::env(format!(
                    "CNI_NETNS {:?} must be an absolute path",
                    env.netns
                )));
            }
        }
        env.args_raw = get("CNI_ARGS").unwrap_or_default();
        env.args = parse_args(&env.args_raw)?;
        env.path = get("CNI_PATH")
            .unwrap_or_default()
            .split(':')
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
            .collect();
        Ok(env)
    }

    /// The pod's UID, when the runtime is a kubelet's.
    pub fn pod_uid(&self) -> Option<&str> {
        self.args.get("K8S_POD_UID").map(String::as_str)
    }

    /// The pod's Kubernetes namespace, when the runtime is a kubelet's.
    pub fn namespace(&self) -> Option<&str> {
        self.args
            .get("K8S_POD_NAMESPACE")
            .map(String::as_str)
            .filter(|n| !n.is_empty())
    }
}

/// Parses `CNI_ARGS` (`K=V;K=V`).
///
/// # Errors
/// Code 4 for a malformed pair, or an unknown key without `IgnoreUnknown`.
pub fn parse_args(s: &str) -> Result<BTreeMap<String, String>, CniError> {
    let mut m = BTreeMap::new();
    for pair in s.split(';').filter(|p| !p.is_empty()) {
        let Some((k, v)) = pair.split_once('=') else {
            return Err(CniError::env(format!(
                "CNI_ARGS: {pair:?} is not KEY=VALUE"
            )));
        };
        m.insert(k.to_owned(), v.to_owned());
    }
    let ignore = m
        .get("IgnoreUnknown")
        .is_some_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));
    if !ignore {
        if let Some(k) = m.keys().find(|k| !KNOWN_ARGS.contains(&k.as_str())) {
            return Err(CniError::env(format!(
                "CNI_ARGS: unknown key {k:?} (known: {}; add IgnoreUnknown=1 to pass others)",
                KNOWN_ARGS.join(", ")
            )));
        }
    }
    if let Some(n) = m.get("K8S_POD_NAMESPACE").filter(|n| !n.is_empty()) {
        let ok = n.len() <= 63
            && n.bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-');
        if !ok {
            return Err(CniError::env(format!(
                "CNI_ARGS K8S_POD_NAMESPACE: {n:?} is not a namespace name"
            )));
        }
    }
    if let Some(u) = m.get("K8S_POD_UID") {
        check_container_id(u).map_err(|e| CniError::env(format!("CNI_ARGS K8S_POD_UID: {e}")))?;
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(cmd: Command, vars: &[(&str, &str)]) -> Result<CniEnv, CniError> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect();
        CniEnv::read(cmd, &move |k| {
            vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
        })
    }

    #[test]
    fn variables() {
        let ok = [
            ("CNI_CONTAINERID", "c1"),
            ("CNI_IFNAME", "net1"),
            ("CNI_NETNS", "/run/netns/x"),
            ("CNI_PATH", "/a:/b"),
            ("CNI_ARGS", "IgnoreUnknown=1;K8S_POD_UID=u-1;FOO=bar"),
        ];
        let e = read(Command::Add, &ok).unwrap();
        assert_eq!(e.pod_uid(), Some("u-1"));
        assert_eq!(e.path, [PathBuf::from("/a"), PathBuf::from("/b")]);
        assert!(read(Command::Del, &ok[..2]).unwrap().netns.is_empty());
        for (vars, msg) in [
            (&ok[1..], "CNI_CONTAINERID is not set"),
            (&[ok[0], ok[2]][..], "CNI_IFNAME is not set"),
            (&ok[..2], "CNI_NETNS is not set"),
            (&[ok[0], ("CNI_IFNAME", "a/b"), ok[2]][..], "CNI_IFNAME: "),
            (
                &[("CNI_CONTAINERID", "-x"), ok[1], ok[2]][..],
                "CNI_CONTAINERID: ",
            ),
            (
                &[ok[0], ok[1], ("CNI_NETNS", "rel")][..],
                "must be an absolute path",
            ),
            (
                &[ok[0], ok[1], ok[2], ("CNI_ARGS", "FOO=1")][..],
                "unknown key \"FOO\"",
            ),
            (
                &[ok[0], ok[1], ok[2], ("CNI_ARGS", "FOO")][..],
                "is not KEY=VALUE",
            ),
        ] {
            let e = read(Command::Add, vars).unwrap_err();
            assert_eq!(e.code, crate::error::INVALID_ENV);
            assert!(e.msg.contains(msg), "{:?} lacks {msg:?}", e.msg);
        }
        assert_eq!(Command::parse(Some("ADD")).unwrap(), Command::Add);
        assert_eq!(Command::parse(None).unwrap_err().code, 4);
        assert_eq!(Command::parse(Some("FOO")).unwrap_err().code, 4);
    }
}
