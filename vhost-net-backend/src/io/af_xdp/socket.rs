// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Setting up one AF_XDP socket: UMEM registration, the four rings, bind.

use std::io;
use std::os::fd::{AsFd, OwnedFd};

use super::ring::{ConsumerRing, ProducerRing};
use super::umem::{self, Umem};
use super::{AfXdpConfig, AfXdpError, BindMode, KERNEL_TX_BATCH, XDP_MAX_TX_SKB_BUDGET};
use crate::sys::xdp::{self, XdpRing};

/// A bound socket and its four rings.
pub(super) struct Xsk {
    pub(super) fd: OwnedFd,
    pub(super) fill: ProducerRing<u64>,
    pub(super) comp: ConsumerRing<u64>,
    pub(super) rx: ConsumerRing<libc::xdp_desc>,
    pub(super) tx: ProducerRing<libc::xdp_desc>,
    pub(super) mode: BindMode,
}

/// Builds the error of one set-up step.
pub(super) struct Step<'a> {
    pub(super) ifname: &'a str,
    pub(super) queue_id: u32,
}

impl Step<'_> {
    fn ifname(&self) -> String {
        self.ifname.to_owned()
    }
}

/// Creates a socket, registers `umem`, creates and maps the rings and binds
/// to the queue with `mode`.
pub(super) fn open_socket(
    at: &Step<'_>,
    ifindex: u32,
    cfg: &AfXdpConfig,
    umem: &Umem,
    mode: BindMode,
) -> Result<Xsk, AfXdpError> {
    let queue_id = at.queue_id;
    let fd = xdp::socket().map_err(|source| AfXdpError::Socket {
        ifname: at.ifname(),
        queue_id,
        source,
    })?;
    umem::register(fd.as_fd(), umem).map_err(|source| AfXdpError::UmemReg {
        ifname: at.ifname(),
        queue_id,
        source,
    })?;
    for (ring, opt, size) in [
        ("fill", libc::XDP_UMEM_FILL_RING, cfg.fill_size),
        ("completion", libc::XDP_UMEM_COMPLETION_RING, cfg.comp_size),
        ("RX", libc::XDP_RX_RING, cfg.rx_size),
        ("TX", libc::XDP_TX_RING, cfg.tx_size),
    ] {
        xdp::setsockopt(fd.as_fd(), opt, &size).map_err(|source| AfXdpError::RingSize {
            ifname: at.ifname(),
            queue_id,
            ring,
            size,
            source,
        })?;
    }
    let map_err = |ring: &'static str| {
        move |source| AfXdpError::RingMmap {
            ifname: at.ifname(),
            queue_id,
            ring,
            source,
        }
    };
    let (off, len) = xdp::getsockopt::<libc::xdp_mmap_offsets>(fd.as_fd(), libc::XDP_MMAP_OFFSETS)
        .map_err(map_err("offsets"))?;
    if len != std::mem::size_of::<libc::xdp_mmap_offsets>() {
        // Linux < 5.4: no flags word, hence no need_wakeup.
        return Err(map_err("offsets")(io::Error::new(
            io::ErrorKind::Unsupported,
            "kernel too old: XDP_MMAP_OFFSETS without ring flags (Linux 5.4 needed)",
        )));
    }
    let fill = ProducerRing::new(
        XdpRing::<u64>::map(
            fd.as_fd(),
            &off.fr,
            cfg.fill_size,
            libc::XDP_UMEM_PGOFF_FILL_RING,
        )
        .map_err(map_err("fill"))?,
    );
    let comp = ConsumerRing::new(
        XdpRing::<u64>::map(
            fd.as_fd(),
            &off.cr,
            cfg.comp_size,
            libc::XDP_UMEM_PGOFF_COMPLETION_RING,
        )
        .map_err(map_err("completion"))?,
    );
    let rx = ConsumerRing::new(
        XdpRing::<libc::xdp_desc>::map(
            fd.as_fd(),
            &off.rx,
            cfg.rx_size,
            libc::XDP_PGOFF_RX_RING as u64,
        )
        .map_err(map_err("RX"))?,
    );
    let tx = ProducerRing::new(
        XdpRing::<libc::xdp_desc>::map(
            fd.as_fd(),
            &off.tx,
            cfg.tx_size,
            libc::XDP_PGOFF_TX_RING as u64,
        )
        .map_err(map_err("TX"))?,
    );
    // Copy mode: let one sendto transmit a whole TX ring (Linux 6.17+;
    // older kernels say ENOPROTOOPT and keep 32 per call).
    if cfg.tx_size > KERNEL_TX_BATCH {
        if let Err(e) = xdp::setsockopt(fd.as_fd(), XDP_MAX_TX_SKB_BUDGET, &cfg.tx_size) {
            tracing::debug!(
                "af_xdp: {} queue {queue_id}: TX budget stays {KERNEL_TX_BATCH}: {e}",
                at.ifname
            );
        }
    }
    let mut flags = match mode {
        BindMode::Copy => libc::XDP_COPY,
        BindMode::ZeroCopy => libc::XDP_ZEROCOPY,
    };
    if cfg.need_wakeup {
        flags |= libc::XDP_USE_NEED_WAKEUP;
    }
    xdp::bind(fd.as_fd(), ifindex, queue_id, flags).map_err(|source| {
        if mode == BindMode::ZeroCopy && source.raw_os_error() == Some(libc::EOPNOTSUPP) {
            AfXdpError::ZeroCopyUnsupported {
                ifname: at.ifname(),
                queue_id,
                source,
            }
        } else {
            AfXdpError::Bind {
                ifname: at.ifname(),
                queue_id,
                mode,
                source,
            }
        }
    })?;
    // What the kernel actually bound (it is the authority).
    let mode = match xdp::getsockopt::<libc::xdp_options>(fd.as_fd(), libc::XDP_OPTIONS) {
        Ok((o, _)) if o.flags & libc::XDP_OPTIONS_ZEROCOPY != 0 => BindMode::ZeroCopy,
        Ok(_) => BindMode::Copy,
        Err(_) => mode,
    };
    Ok(Xsk {
        fd,
        fill,
        comp,
        rx,
        tx,
        mode,
    })
}
