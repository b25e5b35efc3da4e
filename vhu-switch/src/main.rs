// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! `vhu-switch`: the reference L2 switch daemon.
//!
//! ```text
//! vhu-switch [--config FILE] [--control-socket PATH] [--socket-dir DIR] [--state-dir DIR]
//!            [--pmd-cpus CPU[,CPU...]] [--poll busy|adaptive|interrupt] [--log-format plain|json]
//!            [--port-kinds KIND[,KIND...]] [--max-guest-memory-mib MIB] [--seccomp off|log|enforce]
//! ```
//!
//! With no arguments it runs on embedded defaults: control socket
//! `/run/vhu/vhu.sock`, sockets under `/run/vhu/sockets`, state in
//! `/var/lib/vhu`, one PMD thread, adaptive polling, no ports (add them with
//! `vhuctl port add` or the API).
//!
//! The startup story, in order: flags and configuration file are loaded and
//! validated (no side effect; every error reported with its place; exit 64;
//! a configured port the held capabilities cannot serve is such an error)
//! -> logging -> every capability the allowed port kinds cannot use is
//! dropped (the sets are logged; docs/switch.md, "Privileges") -> the
//! control socket is bound -> the PMD thread starts -> the seccomp filter
//! is installed on every thread (docs/switch.md, "Seccomp") -> the
//! configured ports, then the persisted ones, are created -> requests are
//! served until SIGINT or SIGTERM -> the PMD stops, every port is closed and
//! the sockets the switch created are removed -> exit 0.
//!
//! Logs go to stderr (`VHU_LOG` or `PUT /log-level` set the filter, default
//! `warn,vhu_switch=info,vhost_net_backend=info`): one line per connect,
//! disconnect and port change, never per packet.
#![forbid(unsafe_code)]

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use clap::Parser;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{fmt, reload, EnvFilter};
use vhost_net_backend::sys::caps;
use vhu_switch::api::{openapi, server};
use vhu_switch::config::{Config, ConfigErrors, LogFormat, Overrides, PollMode};
use vhu_switch::privilege;
use vhu_switch::seccomp;
use vhu_switch::switch::{LogControl, Switch};

/// The default log filter.
const DEFAULT_LOG: &str = "warn,vhu_switch=info,vhost_net_backend=info";

/// The reference L2 switch for vhost-user VMs, DPDK apps and NICs.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// TOML configuration file (a `[switch]` table and `[[port]]` entries).
    #[arg(long)]
    config: Option<PathBuf>,
    /// The control API's socket (default /run/vhu/vhu.sock).
    #[arg(long)]
    control_socket: Option<PathBuf>,
    /// Directory of the vhost-user sockets the switch creates (default
    /// /run/vhu/sockets).
    #[arg(long)]
    socket_dir: Option<PathBuf>,
    /// Directory of the persisted state (default /var/lib/vhu).
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// Pin PMD threads to these CPUs (one PMD per CPU listed).
    #[arg(long, value_delimiter = ',')]
    pmd_cpus: Option<Vec<u32>>,
    /// Polling mode of the PMD threads.
    #[arg(long, value_parser = parse_poll)]
    poll: Option<PollMode>,
    /// Log line format.
    #[arg(long, value_parser = parse_format)]
    log_format: Option<LogFormat>,
    /// Port kinds this switch may serve (vhost-user, af_packet, af_xdp,
    /// tap, pod-tap; default: all): it keeps only the capabilities they
    /// may use.
    #[arg(long, value_delimiter = ',')]
    port_kinds: Option<Vec<String>>,
    /// Most guest memory a vhost-user port maps for one frontend, in MiB
    /// (default 524288: 512 GiB); a larger memory table is refused, the
    /// port stays up.
    #[arg(long)]
    max_guest_memory_mib: Option<u64>,
    /// The seccomp filter installed on every thread once started: `enforce`
    /// (a call outside the allow-list fails with EPERM), `log` (allowed and
    /// logged by the kernel), `off`.
    #[arg(long, env = "VHU_SECCOMP", value_parser = parse_seccomp, default_value = "enforce")]
    seccomp: seccomp::Mode,
}

fn parse_seccomp(s: &str) -> Result<seccomp::Mode, String> {
    seccomp::Mode::parse(s).ok_or_else(|| format!("{s:?}: expected off, log or enforce"))
}

fn parse_poll(s: &str) -> Result<PollMode, String> {
    PollMode::parse(s).ok_or_else(|| format!("{s:?}: expected busy, adaptive or interrupt"))
}

fn parse_format(s: &str) -> Result<LogFormat, String> {
    LogFormat::parse(s).ok_or_else(|| format!("{s:?}: expected plain or json"))
}

/// Installs the log subscriber; returns what changes its filter.
fn init_logging(format: LogFormat) -> LogControl {
    let filter = EnvFilter::try_from_env("VHU_LOG").unwrap_or_else(|_| EnvFilter::new(DEFAULT_LOG));
    let (filter, handle) = reload::Layer::new(filter);
    let ansi = std::io::stderr().is_terminal();
    let registry = tracing_subscriber::registry().with(filter);
    match format {
        LogFormat::Plain => registry
            .with(fmt::layer().with_writer(std::io::stderr).with_ansi(ansi))
            .init(),
        LogFormat::Json => registry
            .with(
                fmt::layer()
                    .json()
                    .with_writer(std::io::stderr)
                    .with_ansi(false),
            )
            .init(),
    }
    Box::new(move |f: &str| {
        let new = EnvFilter::try_new(f).map_err(|e| format!("{f:?} is not a log filter: {e}"))?;
        handle
            .reload(new)
            .map_err(|e| format!("cannot change the log filter: {e}"))
    })
}

/// Binds the control socket: a stale one (nobody answers) is replaced, a
/// live one means another switch runs.
fn bind_control(path: &Path) -> Result<std::os::unix::net::UnixListener, String> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    if path.exists() {
        if vhost_net_backend::sys::unix::connect(path).is_ok() {
            return Err(format!(
                "{} is served by another process (another vhu-switch?)",
                path.display()
            ));
        }
        std::fs::remove_file(path)
            .map_err(|e| format!("cannot remove the stale {}: {e}", path.display()))?;
    }
    let l = vhost_net_backend::sys::unix::bind(path)
        .map_err(|e| format!("cannot listen on {}: {e}", path.display()))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("cannot set the mode of {}: {e}", path.display()))?;
    Ok(l)
}

fn main() -> ExitCode {
    let args = Args::parse();
    let flags = Overrides {
        control_socket: args.control_socket,
        socket_dir: args.socket_dir,
        state_dir: args.state_dir,
        pmd_cpus: args.pmd_cpus,
        poll: args.poll,
        log_format: args.log_format,
        port_kinds: args.port_kinds,
        max_guest_memory_mib: args.max_guest_memory_mib,
    };
    let cfg = match Config::load(args.config.as_deref(), &flags) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("vhu-switch: {e}");
            return ExitCode::from(64);
        }
    };
    vhost_net_backend::set_default_max_guest_memory(cfg.max_guest_memory);
    let policy = match privilege_policy(&cfg) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("vhu-switch: {e}");
            return ExitCode::from(64);
        }
    };
    let log = init_logging(cfg.log_format);
    // Before any other thread starts: capabilities are per thread.
    match privilege::apply(policy) {
        Ok(after) => {
            tracing::info!("capabilities: {after}");
            if let Some(p) = privilege::policy() {
                for (class, lack) in p.unservable() {
                    tracing::info!("{class} ports cannot be served: they need {lack}");
                }
            }
        }
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("vhu-switch: {e}");
            return ExitCode::FAILURE;
        }
    }
    match run(cfg, log, args.seccomp) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("vhu-switch: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The capability policy of `cfg`, and the configured ports checked against
/// it: one the held capabilities cannot serve is a configuration error (with
/// its place), before anything is created.
fn privilege_policy(cfg: &Config) -> Result<privilege::Policy, ConfigErrors> {
    let held = caps::current()
        .map_err(|e| ConfigErrors(vec![format!("cannot read the capabilities: {e}")]))?;
    let policy = privilege::Policy::new(
        cfg.port_kinds.as_deref(),
        held.permitted,
        privilege::Identity::current(),
    );
    let errs: Vec<String> = cfg
        .ports
        .iter()
        .zip(&cfg.port_places)
        .filter_map(|(p, at)| policy.refusal(p).map(|m| format!("{at}: {m}")))
        .collect();
    if errs.is_empty() {
        Ok(policy)
    } else {
        Err(ConfigErrors(errs))
    }
}

fn run(cfg: Config, log: LogControl, filter: seccomp::Mode) -> Result<(), String> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .map_err(|e| format!("cannot install a signal handler: {e}"))?;
    }
    for dir in [&cfg.socket_dir, &cfg.state_dir] {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let control = cfg.control_socket.clone();
    let listener = bind_control(&control)?;
    tracing::info!(
        "control API on {} (sockets in {}, state in {}, polling {:?})",
        control.display(),
        cfg.socket_dir.display(),
        cfg.state_dir.display(),
        cfg.poll
    );
    let sw = Switch::start(cfg, log).map_err(|e| e.to_string())?;
    // Every thread now running (PMDs, links' watchers) and every one
    // started from here on (ports' control threads) is filtered.
    if let Err(e) = seccomp::install(filter) {
        sw.shutdown();
        return Err(e.to_string());
    }
    tracing::info!("seccomp filter: {filter:?}");
    let restored = sw.restore();
    let served = match restored {
        Ok(()) => {
            tracing::info!("ready");
            let doc = Arc::new(openapi::json());
            server::serve(&listener, &sw, &doc, &stop).map_err(|e| format!("control API: {e}"))
        }
        Err(e) => Err(e.to_string()),
    };
    tracing::info!("stopping");
    sw.shutdown();
    drop(listener);
    let _ = std::fs::remove_file(&control);
    served
}
