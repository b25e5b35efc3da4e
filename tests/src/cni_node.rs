// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! `vhu-cni`'s node configuration for a test: the host paths the test
//! uses (a private switch, state and socket directories) and the policy it
//! needs, written to a file that `VHU_CNI_CONFIG` names. A runtime (containerd,
//! podman) runs the plugin through [`crate::pod::cni_bin_dir`]'s wrapper,
//! which sets the variable to [`path_in`]'s file.

use std::path::{Path, PathBuf};

/// The node configuration file of a test directory.
pub fn path_in(dir: &Path) -> PathBuf {
    dir.join("cni-node.toml")
}

/// The host paths of a node configuration; `None` keeps the plugin's
/// default.
#[derive(Debug, Clone, Default)]
pub struct NodePaths {
    /// `control_socket`.
    pub control_socket: Option<PathBuf>,
    /// `state_dir`.
    pub state_dir: Option<PathBuf>,
    /// `host_socket_dir` (may hold `{podUID}`).
    pub host_socket_dir: Option<String>,
    /// `device_dir`.
    pub device_dir: Option<PathBuf>,
    /// `device_info_dir`.
    pub device_info_dir: Option<PathBuf>,
}

/// Writes the node configuration [`path_in`]`(dir)`: `paths`, then
/// `rest` (TOML: `ipam = [...]`, `[default]`, `[namespace.NAME]` tables).
/// Returns its path.
///
/// # Panics
///
/// If it cannot be written.
pub fn write(dir: &Path, paths: &NodePaths, rest: &str) -> PathBuf {
    let mut t = String::new();
    let q = |p: &Path| format!("{:?}", p.display().to_string());
    if let Some(p) = &paths.control_socket {
        t += &format!("control_socket = {}\n", q(p));
    }
    if let Some(p) = &paths.state_dir {
        t += &format!("state_dir = {}\n", q(p));
    }
    if let Some(p) = &paths.host_socket_dir {
        t += &format!("host_socket_dir = {p:?}\n");
    }
    if let Some(p) = &paths.device_dir {
        t += &format!("device_dir = {}\n", q(p));
    }
    if let Some(p) = &paths.device_info_dir {
        t += &format!("device_info_dir = {}\n", q(p));
    }
    t += rest;
    let f = path_in(dir);
    std::fs::write(&f, t).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
    f
}
