// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Link operations for `tap` attachments, done with iproute2's `ip` (run in
//! the pod's network namespace through util-linux's `nsenter`): the switch
//! creates the TAP in `CNI_NETNS` as `CNI_IFNAME` (persistent, so that it
//! outlives a restart of the switch); this sets its MAC, MTU, addresses and
//! routes and brings it up; and reads it back for CHECK. For `host-tap`
//! attachments (Kata DAN) it creates, checks and removes the persistent
//! TAP in the host's namespace that the VMM opens.

use std::path::PathBuf;
use std::process::Command;

use crate::error::{CniError, LINK};

/// A program found on `PATH` or in the usual system directories (runtimes
/// may run plugins with a short `PATH`).
fn tool(name: &str) -> PathBuf {
    let path = std::env::var("PATH").unwrap_or_default();
    let found = path
        .split(':')
        .filter(|d| !d.is_empty())
        .chain(["/usr/sbin", "/usr/bin", "/sbin", "/bin"])
        .map(|d| PathBuf::from(d).join(name))
        .find(|p| p.is_file());
    found.unwrap_or_else(|| PathBuf::from(name))
}

/// Runs `ip args` on the host (`netns` `None`) or in a namespace.
fn ip(netns: Option<&str>, args: &[&str]) -> Result<String, CniError> {
    let mut cmd = match netns {
        None => Command::new(tool("ip")),
        Some(ns) => {
            let mut c = Command::new(tool("nsenter"));
            c.arg(format!("--net={ns}")).arg("--").arg(tool("ip"));
            c
        }
    };
    let out = cmd
        .args(args)
        .output()
        .map_err(|e| CniError::new(LINK, format!("cannot run ip {}: {e}", args.join(" "))))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(CniError::new(
            LINK,
            format!(
                "ip {} failed{}",
                args.join(" "),
                netns.map(|n| format!(" in {n}")).unwrap_or_default()
            ),
        )
        .details(String::from_utf8_lossy(&out.stderr).trim().to_owned()))
    }
}

/// A route to add.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// Destination prefix.
    pub dst: String,
    /// Gateway, if any.
    pub gw: Option<String>,
}

/// What the pod's interface gets.
#[derive(Debug, Clone)]
pub struct LinkSetup<'a> {
    /// `CNI_NETNS`.
    pub netns: &'a str,
    /// `CNI_IFNAME`.
    pub ifname: &'a str,
    /// The MAC.
    pub mac: &'a str,
    /// MTU, if configured.
    pub mtu: Option<u32>,
    /// Addresses (CIDR).
    pub addrs: Vec<String>,
    /// Routes.
    pub routes: Vec<Route>,
}

/// Configures the pod's TAP (which the switch created there).
///
/// # Errors
/// Code 102 with `ip`'s message.
pub fn setup(s: &LinkSetup<'_>) -> Result<(), CniError> {
    let ns = Some(s.netns);
    let mut args = vec!["link", "set", "dev", s.ifname, "address", s.mac];
    let mtu = s.mtu.map(|m| m.to_string());
    if let Some(m) = &mtu {
        args.extend(["mtu", m.as_str()]);
    }
    ip(ns, &args)?;
    ip(ns, &["link", "set", "dev", s.ifname, "up"])?;
    for a in &s.addrs {
        ip(ns, &["addr", "add", a, "dev", s.ifname])?;
    }
    for r in &s.routes {
        let mut args = vec!["route", "add", r.dst.as_str()];
        if let Some(g) = &r.gw {
            args.extend(["via", g.as_str()]);
        }
        args.extend(["dev", s.ifname]);
        ip(ns, &args)?;
    }
    Ok(())
}

/// Whether a namespace exists (can be entered).
pub fn netns_exists(netns: &str) -> bool {
    std::fs::File::open(netns).is_ok()
}

/// The MAC of `ifname` in `netns`; `None` when there is no such interface.
///
/// # Errors
/// Code 102 when the namespace cannot be entered.
pub fn mac_of(netns: &str, ifname: &str) -> Result<Option<String>, CniError> {
    let all = ip(Some(netns), &["-o", "link", "show"])?;
    for line in all.lines() {
        // "7: eth1: <...> ... link/ether 02:..:.. brd ..."
        let mut f = line.split_whitespace();
        let (_, Some(name)) = (f.next(), f.next()) else {
            continue;
        };
        let name = name.trim_end_matches(':');
        let name = name.split('@').next().unwrap_or(name);
        if name == ifname {
            let mut rest = line.split_whitespace().skip_while(|w| *w != "link/ether");
            return Ok(Some(rest.nth(1).unwrap_or_default().to_owned()));
        }
    }
    Ok(None)
}

/// What a host link name is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostLink {
    /// No link of that name.
    None,
    /// A TUN/TAP device (it has `tun_flags` in sysfs).
    Tun,
    /// Another kind of link.
    Other,
}

/// What link `name` is in the host's namespace (the plugin's own, whose
/// sysfs is mounted at `/sys`).
pub fn host_link(name: &str) -> HostLink {
    let dir = PathBuf::from("/sys/class/net").join(name);
    if name.contains('/') || !dir.exists() {
        HostLink::None
    } else if dir.join("tun_flags").exists() {
        HostLink::Tun
    } else {
        HostLink::Other
    }
}

/// Creates the persistent TAP `name` in the host's namespace for a VMM to
/// open: `IFF_VNET_HDR`, multiqueue iff `queues` > 1 (the flag a VMM's
/// `TUNSETIFF` must match), its MTU, IPv6 off and ARP ignored (the
/// host's stack has nothing to say to the guest), up.
///
/// # Errors
/// Code 102 with `ip`'s message.
pub fn create_host_tap(name: &str, queues: u32, mtu: Option<u32>) -> Result<(), CniError> {
    let mut args = vec!["tuntap", "add", "dev", name, "mode", "tap", "vnet_hdr"];
    if queues > 1 {
        args.push("multi_queue");
    }
    ip(None, &args)?;
    // The host's stack sees what the guest sends on the TAP: it answers
    // nothing there (no IPv6, no ARP for the host's addresses).
    let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{name}/disable_ipv6"), b"1");
    let _ = std::fs::write(format!("/proc/sys/net/ipv4/conf/{name}/arp_ignore"), b"8");
    let mtu = mtu.map(|m| m.to_string());
    let mut args = vec!["link", "set", "dev", name];
    if let Some(m) = &mtu {
        args.extend(["mtu", m.as_str()]);
    }
    args.push("up");
    ip(None, &args).map(drop)
}

/// Removes the host TAP `name` if it is one (a TUN/TAP device); gone
/// already is fine, another kind of link is left alone.
///
/// # Errors
/// Code 102 with `ip`'s message.
pub fn remove_host_tap(name: &str) -> Result<(), CniError> {
    match host_link(name) {
        HostLink::Tun => ip(None, &["link", "del", "dev", name]).map(drop),
        HostLink::None | HostLink::Other => Ok(()),
    }
}
