// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! `vhu-kubevirt-binding`: KubeVirt's hook sidecar for the vhu network
//! binding (see `docs/kubevirt.md`).
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use vhu_kubevirt::netinfo::{
    Resolver, DEFAULT_DRA_DRIVER, DEFAULT_DRA_METADATA_ROOT, DEFAULT_NETWORK_INFO,
    DEFAULT_SOCKET_ROOT,
};
use vhu_kubevirt::server::{self, Config, DEFAULT_SOCKET};

/// KubeVirt network binding sidecar: a vhost-user NIC on vhu-switch.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// The hook socket virt-launcher dials.
    #[arg(long, default_value = DEFAULT_SOCKET)]
    socket: PathBuf,
    /// The binding's name in the KubeVirt CR; VMI interfaces whose
    /// `binding.name` is this are handled.
    #[arg(long, env = "NETWORK_BINDING_PLUGIN_NAME", default_value = "vhu")]
    binding: String,
    /// KubeVirt's network-info downward-API file.
    #[arg(long, default_value = DEFAULT_NETWORK_INFO)]
    network_info: PathBuf,
    /// How long OnDefineDomain waits for network-info to list every network
    /// of the binding, in milliseconds.
    #[arg(long, default_value_t = 30_000)]
    network_info_wait_ms: u64,
    /// Where vhu-cni's sockets are inside the pod (`<root>/<ifname>/sock`),
    /// for networks without device-info.
    #[arg(long, default_value = DEFAULT_SOCKET_ROOT)]
    socket_root: PathBuf,
    /// Where DRA device metadata (KEP-5304) is mounted, for
    /// `resourceClaim` networks.
    #[arg(long, env = "VHU_DRA_METADATA_ROOT", default_value = DEFAULT_DRA_METADATA_ROOT)]
    dra_metadata_root: PathBuf,
    /// The DRA driver whose metadata gives a `resourceClaim` network's
    /// socket.
    #[arg(long, env = "VHU_DRA_DRIVER", default_value = DEFAULT_DRA_DRIVER)]
    dra_driver: String,
}

fn main() -> ExitCode {
    let a = Args::parse();
    if a.binding.is_empty() {
        eprintln!("vhu-kubevirt-binding: the binding name is empty (NETWORK_BINDING_PLUGIN_NAME)");
        return ExitCode::from(2);
    }
    let cfg = Config {
        socket: a.socket,
        binding: a.binding,
        resolver: Resolver {
            network_info: a.network_info,
            wait: Duration::from_millis(a.network_info_wait_ms),
            socket_root: a.socket_root,
            dra_root: a.dra_metadata_root,
            dra_driver: a.dra_driver,
        },
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("vhu-kubevirt-binding: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(server::serve(cfg)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vhu-kubevirt-binding: {e}");
            ExitCode::FAILURE
        }
    }
}
