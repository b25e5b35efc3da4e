// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! `vhu-dra`: the kubelet DRA plugin of vhu-switch ports (see
//! `docs/dra.md`): flags -> checked configuration -> serve until SIGTERM.

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use vhu_dra::driver::{self, Config, Driver};
use vhu_dra::layout::Layout;
use vhu_dra::params::Bounds;
use vhu_dra::server::{self, Sockets};
use vhu_dra::slice::{self, SwitchInfo};
use vhu_dra::source::ClaimSource;

/// Gives pods vhu-switch vhost-user ports through DRA ResourceClaims.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// The driver's name (DeviceClass selectors and allocation results name it).
    #[arg(long, env = "VHU_DRA_DRIVER", default_value = "vhu.dev")]
    driver: String,
    /// The node's name (the ResourceSlice's nodeName and pool).
    #[arg(long, env = "VHU_DRA_NODE_NAME", default_value = "localhost")]
    node_name: String,
    /// Kubelet's plugin registration directory.
    #[arg(
        long,
        env = "VHU_DRA_REGISTRY_DIR",
        default_value = "/var/lib/kubelet/plugins_registry"
    )]
    registry_dir: PathBuf,
    /// The DRA service's directory (`<dir>/dra.sock`); default
    /// `/var/lib/kubelet/plugins/<driver>`.
    #[arg(long, env = "VHU_DRA_PLUGIN_DIR")]
    plugin_dir: Option<PathBuf>,
    /// The switch's control socket.
    #[arg(
        long,
        env = "VHU_DRA_CONTROL_SOCKET",
        default_value = "/run/vhu/vhu.sock"
    )]
    control_socket: PathBuf,
    /// Read claims from this plain-HTTP API endpoint (`host:port`, a local
    /// `kubectl proxy`).
    #[arg(long, env = "VHU_DRA_API", conflicts_with = "claims_dir")]
    api: Option<String>,
    /// Read claims from `<dir>/<namespace>/<name>.json` (no API server).
    #[arg(long, env = "VHU_DRA_CLAIMS_DIR")]
    claims_dir: Option<PathBuf>,
    /// The per-claim socket directories' root on the host.
    #[arg(long, env = "VHU_DRA_SOCKET_ROOT", default_value = "/run/vhu/dra")]
    socket_root: PathBuf,
    /// Where socket directories appear in the container.
    #[arg(
        long,
        env = "VHU_DRA_CONTAINER_ROOT",
        default_value = "/var/run/vhu/dra"
    )]
    container_root: String,
    /// The device metadata files' root on the host.
    #[arg(
        long,
        env = "VHU_DRA_METADATA_ROOT",
        default_value = "/run/vhu/dra-metadata"
    )]
    metadata_root: PathBuf,
    /// The CDI spec directory the container runtime reads.
    #[arg(long, env = "VHU_DRA_CDI_DIR", default_value = "/var/run/cdi")]
    cdi_dir: PathBuf,
    /// The checkpoints' directory.
    #[arg(long, env = "VHU_DRA_STATE_DIR", default_value = "/var/lib/vhu/dra")]
    state_dir: PathBuf,
    /// Owner of the socket directories (numeric; QEMU under KubeVirt is 107).
    #[arg(long, env = "VHU_DRA_DIR_OWNER")]
    dir_owner: Option<u32>,
    /// Group of the socket directories (numeric).
    #[arg(long, env = "VHU_DRA_DIR_GROUP")]
    dir_group: Option<u32>,
    /// Mode of the socket directories (octal).
    #[arg(long, env = "VHU_DRA_DIR_MODE", default_value = "0770")]
    dir_mode: String,
    /// MTU of a port whose parameters name none.
    #[arg(long, env = "VHU_DRA_DEFAULT_MTU", default_value_t = 1500)]
    default_mtu: u32,
    /// Largest MTU a claim may ask for.
    #[arg(long, env = "VHU_DRA_MAX_MTU", default_value_t = 9000)]
    max_mtu: u32,
    /// Most queue pairs a claim may ask for.
    #[arg(long, env = "VHU_DRA_MAX_QUEUES", default_value_t = 8)]
    max_queues: u32,
    /// The access VLAN of a port whose parameters name none (0: untagged).
    #[arg(long, env = "VHU_DRA_DEFAULT_VLAN", default_value_t = 0)]
    default_vlan: u32,
    /// Other VLANs a claim may ask for (comma-separated).
    #[arg(long, env = "VHU_DRA_VLANS", value_delimiter = ',')]
    vlans: Vec<u32>,
    /// The frontend's role when the parameters name none: `server` (the VM
    /// creates the socket, as KubeVirt's vhostuser plugin has it) or `client`.
    #[arg(long, env = "VHU_DRA_VM_ROLE", default_value = "server")]
    vm_role: String,
    /// Most frames per second a port may flood.
    #[arg(long, env = "VHU_DRA_FLOOD_RATE")]
    flood_rate: Option<u32>,
    /// Most addresses the switch learns on a port.
    #[arg(long, env = "VHU_DRA_MAC_LIMIT")]
    mac_limit: Option<u32>,
    /// The switch's name (the ResourceSlice's device).
    #[arg(long, env = "VHU_DRA_SWITCH_NAME", default_value = "vhu")]
    switch_name: String,
    /// The NUMA node of the switch's PMD threads.
    #[arg(long, env = "VHU_DRA_NUMA_NODE", default_value_t = 0)]
    numa_node: u32,
    /// How many ports the switch takes (the ResourceSlice's capacity).
    #[arg(long, env = "VHU_DRA_PORTS", default_value_t = 1024)]
    ports: u32,
    /// Print the node's ResourceSlice (JSON) and exit. (With --api the
    /// driver applies it itself at start.)
    #[arg(long)]
    print_resource_slice: bool,
}

fn config(a: &Args) -> Result<(Config, Sockets), String> {
    let dir_mode = u32::from_str_radix(&a.dir_mode, 8)
        .ok()
        .filter(|m| *m <= 0o7777)
        .ok_or_else(|| {
            format!(
                "--dir-mode {:?} is not an octal mode such as 0770",
                a.dir_mode
            )
        })?;
    let source = match (&a.api, &a.claims_dir) {
        (Some(api), None) => ClaimSource::ApiServer(api.clone()),
        (None, Some(d)) => ClaimSource::Dir(d.clone()),
        _ => return Err("give --api (a local API proxy) or --claims-dir".into()),
    };
    let layout = Layout {
        driver: a.driver.clone(),
        socket_root: a.socket_root.clone(),
        container_root: a.container_root.clone(),
        metadata_root: a.metadata_root.clone(),
        cdi_dir: a.cdi_dir.clone(),
        state_dir: a.state_dir.clone(),
    };
    layout.check()?;
    let bounds = Bounds {
        default_mtu: a.default_mtu,
        max_mtu: a.max_mtu,
        max_queues: a.max_queues,
        default_vlan: a.default_vlan,
        vlans: a.vlans.clone(),
        default_vm_role: driver::parse_vm_role(&a.vm_role).map_err(|e| format!("--vm-role {e}"))?,
    };
    if bounds.max_mtu > vhu_api::port::MAX_MTU || bounds.default_mtu > bounds.max_mtu {
        return Err(format!(
            "--max-mtu must be at most {} and --default-mtu at most --max-mtu",
            vhu_api::port::MAX_MTU
        ));
    }
    if bounds.max_queues == 0 || bounds.max_queues > vhu_api::port::MAX_VHOST_QUEUES {
        return Err(format!(
            "--max-queues must be 1-{}",
            vhu_api::port::MAX_VHOST_QUEUES
        ));
    }
    let plugin_dir = a
        .plugin_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from("/var/lib/kubelet/plugins").join(&a.driver));
    let sockets = Sockets {
        registration: a.registry_dir.join(format!("{}-reg.sock", a.driver)),
        dra: plugin_dir.join("dra.sock"),
    };
    let cfg = Config {
        layout,
        bounds,
        control_socket: a.control_socket.clone(),
        source,
        dir_uid: a.dir_owner,
        dir_gid: a.dir_group,
        dir_mode,
        flood_rate: a.flood_rate,
        mac_limit: a.mac_limit,
    };
    Ok((cfg, sockets))
}

/// Publishes the node's ResourceSlice through the API proxy, on a thread
/// of its own, retrying every 10 s until the API server takes it.
fn publish(api: String, slice: serde_json::Value) {
    let r = std::thread::Builder::new()
        .name("vhu-dra-slice".into())
        .spawn(move || loop {
            match vhu_dra::apiserver::publish_slice(&api, &slice) {
                Ok(()) => {
                    tracing::info!(slice = %slice["metadata"]["name"], "published the ResourceSlice");
                    return;
                }
                Err(e) => {
                    tracing::warn!("cannot publish the ResourceSlice (again in 10 s): {e}");
                    std::thread::sleep(std::time::Duration::from_secs(10));
                }
            }
        });
    if let Err(e) = r {
        tracing::error!("cannot start the ResourceSlice thread: {e}");
    }
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("VHU_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let args = Args::parse();
    let the_slice = slice::resource_slice(&SwitchInfo {
        node: args.node_name.clone(),
        driver: args.driver.clone(),
        switch: args.switch_name.clone(),
        numa_node: args.numa_node,
        ports: args.ports,
        max_queues: args.max_queues,
        max_mtu: args.max_mtu,
        generation: 1,
    });
    if args.print_resource_slice {
        let s = the_slice;
        println!("{}", serde_json::to_string_pretty(&s).unwrap_or_default());
        return ExitCode::SUCCESS;
    }
    let (cfg, sockets) = match config(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("vhu-dra: {e}");
            return ExitCode::from(64);
        }
    };
    if let Some(api) = args.api.clone() {
        publish(api, the_slice);
    }
    let driver = Arc::new(Driver::new(cfg));
    let pending = driver.checkpointed();
    if !pending.is_empty() {
        tracing::info!(
            claims = pending.len(),
            "checkpointed claims (kubelet unprepares them when their pods go)"
        );
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("vhu-dra: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let r = rt.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
        let mut int = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
        let stop = async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        };
        server::serve(driver, &sockets, stop).await
    });
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vhu-dra: {e}");
            ExitCode::FAILURE
        }
    }
}
