// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! `vhu-device-plugin`: the kubelet device plugin of vhost-user socket
//! slots for `vhu-cni` (see `docs/device-plugin.md`).

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use vhu_device_plugin::plugin::{self, Config};

/// Advertises vhost-user socket slots to kubelet; `Allocate` mounts a
/// per-allocation socket directory into the container and writes each
/// device's device-info file.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// The extended resource advertised (what pods request).
    #[arg(long, env = "VHU_DP_RESOURCE", default_value = "vhu.dev/vhost-user")]
    resource: String,
    /// How many devices (slots) this node offers.
    #[arg(long, env = "VHU_DP_SLOTS", default_value_t = 64)]
    slots: u32,
    /// Kubelet's device-plugin directory: kubelet.sock is there, and the
    /// plugin's own socket goes there.
    #[arg(
        long,
        env = "VHU_DP_KUBELET_DIR",
        default_value = "/var/lib/kubelet/device-plugins"
    )]
    kubelet_dir: PathBuf,
    /// The plugin's socket, a file name in --kubelet-dir.
    #[arg(long, env = "VHU_DP_ENDPOINT", default_value = "vhu.sock")]
    endpoint: String,
    /// Where the per-allocation socket directories are made
    /// (`<host-dir>/<device>`); vhu-cni's `deviceDir`.
    #[arg(long, env = "VHU_DP_HOST_DIR", default_value = "/run/vhu/dp")]
    host_dir: PathBuf,
    /// Where the socket directory appears in the container (vhu-cni puts
    /// the interface's socket at `<container-path>/<ifname>/sock`).
    #[arg(long, env = "VHU_DP_CONTAINER_PATH", default_value = "/var/run/vhu")]
    container_path: String,
    /// Where the device-plugin device-info files go.
    #[arg(
        long,
        env = "VHU_DP_DEVINFO_DIR",
        default_value = "/var/run/k8s.cni.cncf.io/devinfo/dp"
    )]
    devinfo_dir: PathBuf,
    /// The device-info `vhost-user.mode`: the host side's (the switch's)
    /// role, `client` when the VM creates the socket (vhu-cni's default).
    #[arg(long, env = "VHU_DP_DEVINFO_MODE", default_value = "client")]
    devinfo_mode: String,
    /// Owner of the socket directories (name or id; QEMU under libvirt and
    /// KubeVirt is 107). Default: root.
    #[arg(long, env = "VHU_DP_DIR_OWNER")]
    dir_owner: Option<String>,
    /// Group of the socket directories (name or id). Default: root.
    #[arg(long, env = "VHU_DP_DIR_GROUP")]
    dir_group: Option<String>,
    /// Mode of the socket directories (octal).
    #[arg(long, env = "VHU_DP_DIR_MODE", default_value = "0770")]
    dir_mode: String,
    /// How often the devices' directories are checked (health), in ms.
    #[arg(long, env = "VHU_DP_HEALTH_INTERVAL_MS", default_value_t = 1000)]
    health_interval_ms: u64,
}

fn config(a: Args) -> Result<Config, String> {
    let id = |db: &str, flag: &str, v: Option<String>| {
        v.map(|v| plugin::resolve_id(db.as_ref(), &v).map_err(|e| format!("{flag}: {e}")))
            .transpose()
    };
    let dir_mode = u32::from_str_radix(&a.dir_mode, 8).map_err(|_| {
        format!(
            "--dir-mode {:?} is not an octal mode such as 0770",
            a.dir_mode
        )
    })?;
    let cfg = Config {
        resource: a.resource,
        slots: a.slots,
        kubelet_dir: a.kubelet_dir,
        endpoint: a.endpoint,
        host_dir: a.host_dir,
        container_path: a.container_path,
        devinfo_dir: a.devinfo_dir,
        devinfo_mode: a.devinfo_mode,
        dir_uid: id("/etc/passwd", "--dir-owner", a.dir_owner)?,
        dir_gid: id("/etc/group", "--dir-group", a.dir_group)?,
        dir_mode,
        health_interval: Duration::from_millis(a.health_interval_ms.max(10)),
    };
    cfg.check()?;
    Ok(cfg)
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cfg = match config(Args::parse()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("vhu-device-plugin: {e}");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("vhu-device-plugin: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(plugin::run(cfg)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vhu-device-plugin: {e}");
            ExitCode::FAILURE
        }
    }
}
