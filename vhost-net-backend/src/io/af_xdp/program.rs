// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The XDP program and XSKMAP of one interface, shared by its sockets.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use super::{bpf, AfXdpError, Attach, AttachMode, ConfigError, XSKMAP_ENTRIES};
use crate::sys::netdev::{self, IfName};

/// The XDP program and XSKMAP of one interface, attached through a BPF link.
///
/// Shared by the sockets of that interface's queues (each [`AfXdp`](super::AfXdp) holds an
/// `Arc`). Dropping the last reference closes the link, which detaches the
/// program; so does process exit, even by a crash.
#[derive(Debug)]
pub struct XdpProgram {
    pub(super) ifname: IfName,
    pub(super) ifindex: u32,
    pub(super) mode: AttachMode,
    pub(super) prog_id: u32,
    /// Whether the zero-copy fallback warning was logged for this interface.
    pub(super) zc_warned: AtomicBool,
    map: OwnedFd,
    /// Keeps the program attached; closing it detaches.
    _link: OwnedFd,
}

impl XdpProgram {
    /// Creates the XSKMAP, loads the redirect program and attaches it to
    /// `ifname` as `attach` asks.
    ///
    /// # Errors
    /// The interface does not exist, or a `bpf` step failed
    /// ([`AfXdpError::MapCreate`], [`AfXdpError::ProgLoad`],
    /// [`AfXdpError::LinkCreate`]). Needs `CAP_BPF` and `CAP_NET_ADMIN`.
    pub fn attach(ifname: &str, attach: Attach) -> Result<Arc<Self>, AfXdpError> {
        let (name, ifindex) = interface_index(ifname)?;
        let map = bpf::create_xskmap(XSKMAP_ENTRIES).map_err(|source| AfXdpError::MapCreate {
            ifname: ifname.to_owned(),
            source,
        })?;
        let prog = bpf::load_xsk_redirect(map.as_fd()).map_err(|e| AfXdpError::ProgLoad {
            ifname: ifname.to_owned(),
            log: e.log,
            source: e.error,
        })?;
        let link_err = |mode, source| AfXdpError::LinkCreate {
            ifname: ifname.to_owned(),
            mode,
            source,
        };
        let link = |mode: AttachMode| {
            bpf::link_create_xdp(prog.as_fd(), ifindex, mode.flags()).map(|fd| (fd, mode))
        };
        let (link, mode) = match attach {
            Attach::Native => {
                link(AttachMode::Native).map_err(|e| link_err(AttachMode::Native, e))?
            }
            Attach::Generic => {
                link(AttachMode::Generic).map_err(|e| link_err(AttachMode::Generic, e))?
            }
            Attach::Auto => match link(AttachMode::Native) {
                Ok(l) => l,
                Err(e) => {
                    tracing::info!(
                        "af_xdp: {ifname}: native XDP unavailable ({e}); trying generic mode"
                    );
                    link(AttachMode::Generic).map_err(|e| link_err(AttachMode::Generic, e))?
                }
            },
        };
        // Only for logs and tests: 0 if the kernel will not say.
        let prog_id = bpf::prog_id(prog.as_fd()).unwrap_or(0);
        tracing::info!("af_xdp: {ifname}: XDP program {prog_id} attached in {mode} mode");
        Ok(Arc::new(Self {
            ifname: name,
            ifindex,
            mode,
            prog_id,
            zc_warned: AtomicBool::new(false),
            map,
            _link: link,
        }))
    }

    /// The interface.
    pub fn ifname(&self) -> &str {
        self.ifname.as_str()
    }

    /// The interface index.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// How the program is attached.
    pub fn mode(&self) -> AttachMode {
        self.mode
    }

    /// The kernel's program id (`ip -d link` shows it as `prog/xdp id N`;
    /// 0 if the kernel did not report it).
    pub fn prog_id(&self) -> u32 {
        self.prog_id
    }

    /// Makes the program redirect queue `queue_id`'s frames to `xsk`.
    pub(super) fn register(&self, queue_id: u32, xsk: &OwnedFd) -> io::Result<()> {
        bpf::xskmap_insert(self.map.as_fd(), queue_id, xsk.as_fd())
    }
}

pub(super) fn interface_index(ifname: &str) -> Result<(IfName, u32), AfXdpError> {
    let name = IfName::new(ifname).map_err(|_| AfXdpError::Config {
        ifname: ifname.to_owned(),
        reason: ConfigError::InterfaceName,
    })?;
    let index = netdev::ifindex(&name).map_err(|source| AfXdpError::Interface {
        ifname: ifname.to_owned(),
        source,
    })?;
    Ok((name, index))
}
