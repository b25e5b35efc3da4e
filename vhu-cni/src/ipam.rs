// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! IPAM delegation: the plugin named in `ipam.type`, found on `CNI_PATH`,
//! run with the same environment and the configuration on stdin.
//!
//! The plugin must be one the node's configuration allows, and never
//! `vhu-cni` itself (by name, or the same file under another name); it
//! runs with `VHU_CNI_DEPTH` set, and a `vhu-cni` reached through it
//! refuses, so delegation cannot loop.
//!
//! The delegate is asked for its versions first: a configuration of a
//! version it does not speak (an IPAM plugin of spec 1.0.0 under a 1.1.0
//! network) is handed to it in the highest version both speak; STATUS and
//! GC go to it only when it speaks 1.1.0.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::config::{NetConf, SUPPORTED_VERSIONS};
use crate::env::CniEnv;
use crate::error::{CniError, IO};

/// An IPAM plugin on `CNI_PATH`.
#[derive(Debug, Clone)]
pub struct Ipam {
    name: String,
    bin: PathBuf,
    /// The version its configuration is given in; `None` when it speaks
    /// none of this plugin's versions up to the network's.
    version: Option<String>,
    speaks_1_1: bool,
}

fn version_key(v: &str) -> Vec<u32> {
    v.split('.').map(|p| p.parse().unwrap_or(0)).collect()
}

/// Set by this plugin in the environment of the IPAM plugin it runs: when
/// it reaches this plugin again (a network naming it, directly or through
/// another delegating plugin), that run refuses, so nesting ends there.
pub const DEPTH_VAR: &str = "VHU_CNI_DEPTH";

/// Whether `bin` is the program running (a link or a copy under another
/// name counts: the same file).
fn is_this_program(bin: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(bin), std::fs::metadata("/proc/self/exe")) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

impl Ipam {
    /// Finds the network's IPAM plugin and asks for its versions; `None`
    /// when the network has no `ipam`.
    ///
    /// # Errors
    /// Code 4 without `CNI_PATH`, 7 when the plugin is not on it, 5 when it
    /// does not answer VERSION.
    pub fn find(conf: &NetConf, env: &CniEnv) -> Result<Option<Self>, CniError> {
        let Some(name) = &conf.ipam_type else {
            return Ok(None);
        };
        if env.path.is_empty() {
            return Err(CniError::env(format!(
                "CNI_PATH is not set; it must name the directories holding the IPAM plugin {name:?}"
            )));
        }
        let bin = env
            .path
            .iter()
            .map(|d| d.join(name))
            .find(|p| p.is_file())
            .ok_or_else(|| {
                CniError::config(format!(
                    "ipam.type {name:?}: no such plugin in CNI_PATH ({}); install it or fix the name",
                    env.path
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(":")
                ))
            })?;
        if is_this_program(&bin) {
            return Err(CniError::config(format!(
                "ipam.type {name:?} is vhu-cni itself ({}): it cannot be its own IPAM plugin",
                bin.display()
            )));
        }
        let mut ipam = Ipam {
            name: name.clone(),
            bin,
            version: None,
            speaks_1_1: false,
        };
        let answer = ipam.run(
            "VERSION",
            &[],
            format!("{{\"cniVersion\":\"{}\"}}", conf.cni_version).as_bytes(),
        )?;
        let theirs: Vec<String> = answer
            .get("supportedVersions")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        ipam.speaks_1_1 = theirs.iter().any(|v| v == "1.1.0");
        let mine = version_key(&conf.cni_version);
        ipam.version = SUPPORTED_VERSIONS
            .iter()
            .filter(|v| version_key(v) <= mine && theirs.iter().any(|t| t == *v))
            .max_by_key(|v| version_key(v))
            .map(|v| (*v).to_owned());
        if ipam.version.is_none() {
            return Err(CniError::new(
                crate::error::INCOMPATIBLE_VERSION,
                format!(
                    "IPAM plugin {name:?} speaks {} but none of {} up to this network's {}",
                    theirs.join(", "),
                    SUPPORTED_VERSIONS.join(", "),
                    conf.cni_version
                ),
            ));
        }
        Ok(Some(ipam))
    }

    /// Whether the plugin takes STATUS and GC.
    pub fn speaks_1_1(&self) -> bool {
        self.speaks_1_1
    }

    /// Runs `command` with the configuration (in the plugin's version) and
    /// `env` over the inherited environment; the parsed stdout (`Null` when
    /// empty).
    ///
    /// # Errors
    /// The plugin's own error (code, details), its message prefixed with
    /// its name; code 5 when it cannot be run or answers garbage.
    pub fn call(
        &self,
        conf: &NetConf,
        command: &str,
        env: &[(&str, &str)],
    ) -> Result<Value, CniError> {
        let mut raw = conf.raw.clone();
        let v = self
            .version
            .clone()
            .unwrap_or_else(|| conf.cni_version.clone());
        raw.insert("cniVersion".into(), Value::String(v.clone()));
        if let Some(Value::Object(p)) = raw.get_mut("prevResult") {
            p.insert("cniVersion".into(), Value::String(v));
        }
        let stdin = serde_json::to_vec(&Value::Object(raw)).unwrap_or_default();
        self.run(command, env, &stdin)
    }

    fn run(&self, command: &str, env: &[(&str, &str)], stdin: &[u8]) -> Result<Value, CniError> {
        let name = &self.name;
        let mut child = Command::new(&self.bin)
            .env("CNI_COMMAND", command)
            .env(DEPTH_VAR, "1")
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                CniError::io(format!("cannot run IPAM plugin {}", self.bin.display()), &e)
            })?;
        if let Some(mut i) = child.stdin.take() {
            let _ = i.write_all(stdin);
        }
        let out = child
            .wait_with_output()
            .map_err(|e| CniError::io(format!("IPAM plugin {name}"), &e))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let parsed: Option<Value> = if stdout.trim().is_empty() {
            Some(Value::Null)
        } else {
            serde_json::from_str(&stdout).ok()
        };
        if out.status.success() {
            return parsed.ok_or_else(|| {
                CniError::new(
                    IO,
                    format!("IPAM plugin {name} {command}: its answer is not JSON"),
                )
                .details(stdout.into_owned())
            });
        }
        if let Some(Value::Object(e)) = &parsed {
            if let Some(code) = e.get("code").and_then(Value::as_u64) {
                let msg = e.get("msg").and_then(Value::as_str).unwrap_or_default();
                let details = e.get("details").and_then(Value::as_str).unwrap_or_default();
                return Err(CniError::new(
                    u32::try_from(code).unwrap_or(IO),
                    format!("IPAM plugin {name} {command}: {msg}"),
                )
                .details(details));
            }
        }
        Err(CniError::new(
            IO,
            format!("IPAM plugin {name} {command} failed ({})", out.status),
        )
        .details(format!("{stdout}{stderr}")))
    }
}
