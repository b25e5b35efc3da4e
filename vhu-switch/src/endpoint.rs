// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Turning a validated [`PortSpec`] into the things that move its frames:
//! a vhost-user [`Port`] and its queue pairs, or an uplink (AF_XDP,
//! AF_PACKET, TAP). What the host refuses (no such interface, a socket
//! served by another process, an unknown user) comes back as a
//! [`Refusal`] (the API answers it with its status).
//!
//! A `tap` port with a `netns` (a pod's TAP) is opened in that namespace,
//! on a thread that entered it, and made persistent: the device outlives
//! the switch (a crash, an upgrade), keeps its name, MAC, addresses and
//! routes, and is attached again where it is at the next start
//! ([`Build::Restore`]: never created anew then). [`release`] deletes it
//! when the port is removed.

use std::path::{Path, PathBuf};

use vhost_net_backend::io::af_packet::{AfPacket, AfPacketConfig, FanoutMode};
use vhost_net_backend::io::af_xdp::{self, AfXdp, AfXdpConfig};
use vhost_net_backend::io::tap::{self, Tap, TapConfig};
use vhost_net_backend::io::Uplink;
use vhost_net_backend::sys;
use vhost_net_backend::{Offloads, Port, PortConfig, PortError, QueuePair, SocketRole};
use vhu_api::{PortKind, PortSpec, Role, ZeroCopy};

use crate::control::Refusal;
use crate::link::Link;
use crate::privilege::lookup_id;

/// What moves a port's frames, handed to its PMD thread.
pub enum End {
    /// A vhost-user port's queue pairs.
    Guest(Vec<QueuePair>),
    /// An uplink's queues (one socket or TAP queue each).
    Uplink(Vec<Box<dyn Uplink>>),
}

impl std::fmt::Debug for End {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            End::Guest(q) => write!(f, "Guest({} queue pairs)", q.len()),
            End::Uplink(u) => write!(f, "Uplink({} queues)", u.len()),
        }
    }
}

/// What the control plane keeps of a port.
#[derive(Debug)]
pub enum Handle {
    /// The vhost-user port (its control thread and socket) and the socket's
    /// path.
    Guest(Port, PathBuf),
    /// An uplink: its interface.
    Uplink(Link),
}

pub use vhost_net_backend::error_chain as chain;

/// Why a port is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Build {
    /// A new port (the API, the configuration file).
    Create,
    /// A persisted port at start: a pod's TAP must still exist where it was
    /// (it is not created again, empty, in its place).
    Restore,
}

/// Builds a port's endpoint.
///
/// # Errors
/// 409 when its socket is served by another process, 422 for what else the
/// host refuses, 500 for resource failures.
pub fn build(spec: &PortSpec, socket_dir: &Path, why: Build) -> Result<(End, Handle), Refusal> {
    let who = format!("port {:?}", spec.name);
    match spec.kind {
        PortKind::VhostUser => guest(spec, socket_dir),
        PortKind::Tap if spec.netns.is_some() => pod_tap(spec, why),
        kind => {
            let queues = spec.queues();
            if kind == PortKind::AfXdp && queues != 1 {
                return Err(Refusal::invalid(format!(
                    "{who}: queues: af_xdp ports have one queue in this version; omit `queues`"
                )));
            }
            let ifname = spec.interface.clone().unwrap_or_default();
            let mut ups: Vec<Box<dyn Uplink>> = Vec::new();
            for _ in 0..queues {
                ups.push(uplink(spec, kind, &ifname).map_err(|e| uplink_refusal(&who, &*e))?);
            }
            tracing::info!("{who}: {ifname} opened ({queues} queues)");
            let link = Link::opened(&ifname, kind != PortKind::Tap);
            Ok((End::Uplink(ups), Handle::Uplink(link)))
        }
    }
}

/// Opens queue `q` of an uplink: an AF_PACKET socket (several join one
/// fanout group, by flow hash) or a TAP queue (the TAP is multiqueue, so
/// that more queues, the switch's or a VM runtime's, can attach).
fn uplink(
    spec: &PortSpec,
    kind: PortKind,
    ifname: &str,
) -> Result<Box<dyn Uplink>, Box<dyn std::error::Error>> {
    Ok(match kind {
        PortKind::AfXdp => {
            let cfg = AfXdpConfig {
                zero_copy: match spec.zero_copy.unwrap_or_default() {
                    ZeroCopy::Off => af_xdp::ZeroCopy::Off,
                    ZeroCopy::Try => af_xdp::ZeroCopy::Try,
                    ZeroCopy::Require => af_xdp::ZeroCopy::Require,
                },
                ..AfXdpConfig::default()
            };
            Box::new(AfXdp::open(ifname, cfg)?)
        }
        PortKind::AfPacket => {
            let cfg = AfPacketConfig {
                qdisc_bypass: spec.qdisc_bypass.unwrap_or(false),
                vnet_hdr: spec.offloads(),
                fanout: (spec.queues() > 1).then(|| (fanout_group(ifname), FanoutMode::Hash)),
                ..AfPacketConfig::default()
            };
            Box::new(AfPacket::open(ifname, cfg)?)
        }
        _ => Box::new(Tap::open(ifname, TAP_QUEUE)?),
    })
}

/// How the switch opens a TAP queue: multiqueue (more queues, the
/// switch's or a VM runtime's, can attach), link up.
const TAP_QUEUE: TapConfig = TapConfig {
    multi_queue: true,
    link_up: true,
};

/// A TAP in another network namespace: its queues are opened there (so the
/// device is created, or found, there), and it is made persistent.
fn pod_tap(spec: &PortSpec, why: Build) -> Result<(End, Handle), Refusal> {
    let who = format!("port {:?}", spec.name);
    let netns = spec.netns.clone().unwrap_or_default();
    let ifname = spec.interface.clone().unwrap_or_default();
    let queues = spec.queues();
    let opened = sys::netns::run_in(Path::new(&netns), || {
        if why == Build::Restore && !tap::interface_exists(&ifname) {
            return Err(format!(
                "TAP {ifname} is gone from network namespace {netns}; it is not created again \
                 (remove the port, or its attachment, and create it anew)"
            ));
        }
        let mut taps = Vec::new();
        for _ in 0..queues {
            taps.push(Tap::open(&ifname, TAP_QUEUE).map_err(|e| chain(&e))?);
        }
        taps[0].set_persist(true).map_err(|e| chain(&e))?;
        Ok(taps)
    });
    let taps = match opened {
        Ok(Ok(t)) => t,
        Ok(Err(m)) => return Err(Refusal::invalid(format!("{who}: {m}"))),
        Err(e) => {
            return Err(Refusal::invalid(format!(
                "{who}: netns: cannot enter network namespace {netns}: {e}"
            )))
        }
    };
    tracing::info!("{who}: persistent TAP {ifname} in {netns} opened ({queues} queues)");
    let ups = taps
        .into_iter()
        .map(|t| Box::new(t) as Box<dyn Uplink>)
        .collect();
    Ok((End::Uplink(ups), Handle::Uplink(Link::unwatched(&ifname))))
}

/// Deletes what a removed port leaves behind: a pod's persistent TAP
/// (attached once more, made non-persistent, closed: the kernel deletes it
/// with its last queue). Call it after the port's own queues are closed.
/// A namespace or device that is gone already is fine.
pub fn release(spec: &PortSpec) {
    let (Some(netns), PortKind::Tap) = (&spec.netns, spec.kind) else {
        return;
    };
    let ifname = spec.interface.clone().unwrap_or_default();
    let r = sys::netns::run_in(Path::new(netns), || {
        if !tap::interface_exists(&ifname) {
            return Ok(false);
        }
        let cfg = TapConfig {
            link_up: false,
            ..TAP_QUEUE
        };
        Tap::open(&ifname, cfg)
            .and_then(|t| t.set_persist(false))
            .map(|()| true)
            .map_err(|e| chain(&e))
    });
    match r {
        Ok(Ok(true)) => tracing::info!("port {:?}: TAP {ifname} in {netns} deleted", spec.name),
        Ok(Ok(false)) => {}
        Ok(Err(m)) => tracing::warn!(
            "port {:?}: cannot delete TAP {ifname} in {netns}: {m}",
            spec.name
        ),
        Err(e) => tracing::info!(
            "port {:?}: network namespace {netns} is gone ({e}): nothing to delete",
            spec.name
        ),
    }
}

/// A fanout group id for an interface's sockets: unique per process and
/// interface (the kernel scopes groups to a network namespace).
fn fanout_group(ifname: &str) -> u16 {
    let h = ifname
        .bytes()
        .fold(std::process::id(), |a, b| a.rotate_left(5) ^ u32::from(b));
    (h ^ (h >> 16)) as u16
}

fn uplink_refusal(who: &str, e: &dyn std::error::Error) -> Refusal {
    Refusal::invalid(format!("{who}: {}", chain(e)))
}

fn guest(spec: &PortSpec, socket_dir: &Path) -> Result<(End, Handle), Refusal> {
    let who = format!("port {:?}", spec.name);
    let path = socket_path(spec, socket_dir).unwrap_or_default();
    let server = spec.role() == Role::Server;
    // Owner and group first: a typo must not leave a socket behind.
    let owner = spec.owner.as_deref().map(|o| lookup_id("/etc/passwd", o));
    let group = spec.group.as_deref().map(|g| lookup_id("/etc/group", g));
    let owner = owner
        .transpose()
        .map_err(|m| Refusal::invalid(format!("{who}: owner: {m}")))?;
    let group = group
        .transpose()
        .map_err(|m| Refusal::invalid(format!("{who}: group: {m}")))?;
    // A server socket's missing directories are created only under the
    // switch's own socket directory (an API client does not create
    // directories anywhere the switch may write); another directory must
    // exist. Either way it is walked without following a link a tenant put
    // there, and the socket gets its owner and mode before it appears
    // (vhost_net_backend::sys::unix, "In a directory a tenant may write").
    let create_dirs = path
        .parent()
        .is_some_and(|d| d.starts_with(socket_dir))
        .then_some(0o755);
    if server && create_dirs.is_none() {
        if let Some(dir) = path.parent() {
            if !dir.exists() {
                return Err(Refusal::invalid(format!(
                    "{who}: socket: the directory {} does not exist; create it first (only the switch's socket directory {} is created)",
                    dir.display(),
                    socket_dir.display()
                )));
            }
        }
    }
    if !server {
        // The VMM's socket: refused now if it is there and is a link, not
        // a socket, or another tenant's; not there yet is fine (the port
        // connects when it appears, checking it again each time).
        match sys::unix::open_client_socket(&path) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Refusal::invalid(format!("{who}: socket: {e}"))),
        }
    }
    let mut cfg = PortConfig::new(spec.name.clone(), path.clone());
    cfg.role = if server {
        SocketRole::Server
    } else {
        SocketRole::Client
    };
    cfg.queue_pairs = u16::try_from(spec.queues()).unwrap_or(1);
    cfg.offloads = if spec.offloads() {
        Offloads::checksum_and_tso()
    } else {
        Offloads::none()
    };
    cfg.mtu = spec.mtu.and_then(|m| u16::try_from(m).ok());
    if server {
        cfg.bind = sys::unix::BindOptions {
            mode: Some(spec.mode_bits()),
            owner,
            group,
            create_dirs,
        };
    }
    let (port, qps) = Port::new(cfg).map_err(|e| match e {
        PortError::SocketInUse(_) => Refusal::conflict(format!("{who}: {}", chain(&e))),
        PortError::Resource(_) => Refusal::failed(format!("{who}: {}", chain(&e))),
        _ => Refusal::invalid(format!("{who}: {}", chain(&e))),
    })?;
    tracing::info!(
        "{who}: vhost-user {} on {} ({} queue pairs)",
        if server { "server" } else { "client" },
        path.display(),
        qps.len()
    );
    Ok((End::Guest(qps), Handle::Guest(port, path)))
}

/// The socket path a vhost-user port's spec resolves to: its `socket`, or
/// `<name>.sock`, in `socket_dir` unless absolute.
pub fn socket_path(spec: &PortSpec, socket_dir: &Path) -> Option<PathBuf> {
    if spec.kind != PortKind::VhostUser {
        return None;
    }
    let name = spec
        .socket
        .clone()
        .unwrap_or_else(|| format!("{}.sock", spec.name));
    Some(if name.starts_with('/') {
        PathBuf::from(name)
    } else {
        socket_dir.join(name)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uplinks_on_missing_interfaces_are_refused() {
        let mut s = PortSpec::new("up", PortKind::AfPacket);
        s.interface = Some("vhu-nonexist0".into());
        let e = build(&s, Path::new("/tmp"), Build::Create).unwrap_err();
        assert_eq!(e.kind, crate::control::RefusalKind::Invalid, "{e:?}");
        assert!(e.message.contains("vhu-nonexist0"), "{}", e.message);
        s.kind = PortKind::AfXdp;
        s.queues = Some(2);
        let e = build(&s, Path::new("/tmp"), Build::Create).unwrap_err();
        assert!(e.message.contains("one queue"), "{}", e.message);
    }
}
