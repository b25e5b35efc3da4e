// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! TAP uplink: a queue of a Linux TAP device, with virtio-net headers
//! (`IFF_VNET_HDR`, 12 bytes, little-endian), so the device's offloads are
//! those of a virtio-net guest.
//!
//! # Contracts
//!
//! * The kernel's interface is one frame per `read`/`write`, so this is the
//!   simple uplink, not the fast one: [`Uplink::rx_burst`] makes up to `max`
//!   `read`s (until `EAGAIN`) into one preallocated buffer and lends each
//!   frame from it; [`Uplink::tx_push`] copies the header and the frame into
//!   one preallocated buffer and `write`s it at once (so
//!   [`Uplink::tx_flush`] has nothing to do). No allocation per frame.
//! * **Transmit offloads**: partial checksums and TSO/UFO/USO super-frames
//!   go to the kernel as they are (`virtio_net_hdr_to_skb`); headers the
//!   kernel would refuse get [`DropReason::OffloadUnsupported`] first
//!   ([`offload::kernel_tx_header`]), and a frame it still refuses
//!   (e.g. the device is down) is counted as a `Refused` drop.
//! * **Receive offloads** are what [`Tap::set_offloads`] enabled
//!   (`TUNSETOFFLOAD`), from the guest's acked features: `GUEST_CSUM` →
//!   `TUN_F_CSUM`, `GUEST_TSO4` → `TUN_F_TSO4`, `GUEST_TSO6` → `TUN_F_TSO6`,
//!   `GUEST_ECN` → `TUN_F_TSO_ECN`, `GUEST_UFO` → `TUN_F_UFO` (the
//!   segmentation ones only together with `GUEST_CSUM`, as virtio requires).
//!   Until then the kernel hands over complete, segmented frames. Frames
//!   always carry only what [`Uplink::offloads`]`().rx` announces; anything
//!   else would be completed or segmented in software before it is lent
//!   (the kernel respects `TUNSETOFFLOAD`, so in practice each `read` lends
//!   one frame and a burst lends at most `max`).
//! * The TAP keeps 802.1Q tags in the frame, so frames are lent and taken
//!   exactly as on the wire.
//! * **Counters** (by [`DropReason`]): on transmit, `TooLong` for frames
//!   larger than the TX buffer and `Refused` for frames the kernel refused;
//!   `NoBuffers` (`EAGAIN`) and `OffloadUnsupported` are returned uncounted
//!   (the caller retries, completes the frame in software, or records the
//!   drop with [`Uplink::tx_drop`]). On receive, `TooLong` for frames
//!   larger than the read buffer, `TooShort` for runts, `Malformed` for
//!   frames the software fallback refused.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;

use super::{RxFn, Uplink, UplinkCounters, UplinkOffloads};
use crate::device::bits;
use crate::frame::{copy_frame, FrameSource};
use crate::net_hdr::{self, VirtioNetHdr};
use crate::offload::{self, Segmenter};
use crate::stats::{DropCounts, DropReason};
use crate::sys::netdev::{self, IfName, IFNAME_RULE};
use crate::sys::tun;
use crate::wire::{ETH_HLEN, VLAN_HLEN};

/// The TUN/TAP clone device.
const TUN_PATH: &str = "/dev/net/tun";
/// Size of the virtio-net header on the TAP (`TUNSETVNETHDRSZ`).
const VNET_LEN: usize = net_hdr::MAX_HDR_LEN;
/// Largest frame the kernel hands to a TAP: a 64 KiB super-frame
/// (`GSO_LEGACY_MAX_SIZE`, headers included) plus a re-inserted VLAN tag.
const MAX_RX_FRAME: usize = 65_536 + VLAN_HLEN;
/// Largest frame taken on transmit.
const MAX_TX_FRAME: usize = crate::device::MAX_FRAME_LEN;
/// Offloads the kernel takes on transmit.
const TX_OFFLOADS: u64 =
    bits::CSUM | bits::HOST_TSO4 | bits::HOST_TSO6 | bits::HOST_ECN | bits::HOST_UFO;

/// How to open a [`Tap`] queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TapConfig {
    /// Open the device with `IFF_MULTI_QUEUE`: each [`Tap::open`] of the same
    /// name attaches another queue (the flag must match how the device was
    /// created).
    pub multi_queue: bool,
    /// Set the link up (`IFF_UP`) once attached.
    pub link_up: bool,
}

/// Why a [`Tap`] could not be opened or configured.
#[derive(Debug, thiserror::Error)]
pub enum TapError {
    /// The name is too long (max 15 bytes) or contains NUL.
    #[error("invalid interface name {0:?} ({rule})", rule = IFNAME_RULE)]
    Name(String),
    /// `/dev/net/tun` could not be opened.
    #[error("cannot open {TUN_PATH}")]
    Open(#[source] io::Error),
    /// The caller may not create or attach this TAP (needs CAP_NET_ADMIN,
    /// or to be the device's owner).
    #[error("permission denied attaching TAP {ifname} (needs CAP_NET_ADMIN)")]
    Permission {
        /// The interface.
        ifname: String,
        /// The refusal.
        #[source]
        source: io::Error,
    },
    /// `TUNSETIFF` failed (e.g. a TUN, or a TAP created with other flags,
    /// already has this name).
    #[error("cannot create or attach TAP {ifname}")]
    Attach {
        /// The interface.
        ifname: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A configuration ioctl failed.
    #[error("TAP {ifname}: {op} failed")]
    Ioctl {
        /// The interface.
        ifname: String,
        /// The request (e.g. `TUNSETOFFLOAD`).
        op: &'static str,
        /// Why.
        #[source]
        source: io::Error,
    },
}

/// The `TUNSETOFFLOAD` flags for a guest's acked features, and the GUEST_*
/// bits they make the kernel produce.
fn tun_offloads(acked: u64) -> (libc::c_uint, u64) {
    if acked & bits::GUEST_CSUM == 0 {
        return (0, 0);
    }
    let mut tun = libc::TUN_F_CSUM;
    let mut rx = bits::GUEST_CSUM;
    for (bit, flag) in [
        (bits::GUEST_TSO4, libc::TUN_F_TSO4),
        (bits::GUEST_TSO6, libc::TUN_F_TSO6),
        (bits::GUEST_UFO, libc::TUN_F_UFO),
    ] {
        if acked & bit != 0 {
            tun |= flag;
            rx |= bit;
        }
    }
    if acked & bits::GUEST_ECN != 0 && rx & (bits::GUEST_TSO4 | bits::GUEST_TSO6) != 0 {
        tun |= libc::TUN_F_TSO_ECN;
        rx |= bits::GUEST_ECN;
    }
    (tun, rx)
}

// ===== impl Tap =====

/// An uplink on one queue of a TAP device.
///
/// See the [module documentation](self) for the contracts.
#[derive(Debug)]
pub struct Tap {
    name: String,
    ifname: String,
    file: File,
    rx_buf: Vec<u8>,
    tx_buf: Vec<u8>,
    rx_offloads: u64,
    segmenter: Segmenter,
    counters: UplinkCounters,
}

impl Tap {
    /// Attaches to TAP `ifname`, creating it if it does not exist (a
    /// created device goes away when its last queue is closed). An empty
    /// name lets the kernel pick one (`tapN`, see [`Tap::ifname`]).
    ///
    /// The queue is non-blocking, with 12-byte little-endian virtio-net
    /// headers and no receive offloads until [`Tap::set_offloads`].
    ///
    /// # Errors
    /// See [`TapError`]; each names the interface.
    pub fn open(ifname: &str, cfg: TapConfig) -> Result<Self, TapError> {
        let req = IfName::new_or_empty(ifname).map_err(|e| TapError::Name(e.0))?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(TUN_PATH)
            .map_err(TapError::Open)?;
        let fd = file.as_fd();
        let mut flags = libc::IFF_TAP | libc::IFF_NO_PI | libc::IFF_VNET_HDR;
        if cfg.multi_queue {
            flags |= libc::IFF_MULTI_QUEUE;
        }
        // The kernel writes the device's name back (it may have chosen it).
        let actual = tun::set_iff(fd, &req, flags).map_err(|source| {
            let ifname = ifname.to_owned();
            match source.raw_os_error() {
                Some(libc::EPERM | libc::EACCES) => TapError::Permission { ifname, source },
                _ => TapError::Attach { ifname, source },
            }
        })?;
        let ioctl = |op: &'static str| {
            let ifname = actual.clone();
            move |source| TapError::Ioctl { ifname, op, source }
        };
        tun::set_vnet_hdr_sz(fd, VNET_LEN as libc::c_int).map_err(ioctl("TUNSETVNETHDRSZ"))?;
        // virtio 1.x headers are little-endian; this matters on big-endian
        // hosts only, where older kernels may lack it.
        if let Err(e) = tun::set_vnet_le(fd, 1) {
            if cfg!(target_endian = "big") {
                return Err(ioctl("TUNSETVNETLE")(e));
            }
        }
        tun::set_offload(fd, 0).map_err(ioctl("TUNSETOFFLOAD"))?;
        let tap = Self {
            name: format!("tap:{actual}"),
            ifname: actual,
            file,
            rx_buf: vec![0; VNET_LEN + MAX_RX_FRAME],
            tx_buf: vec![0; VNET_LEN + MAX_TX_FRAME],
            rx_offloads: 0,
            segmenter: Segmenter::new(),
            counters: UplinkCounters::default(),
        };
        if cfg.link_up {
            tap.set_link_up()?;
        }
        Ok(tap)
    }

    /// The device's name.
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// Lets the kernel hand over frames with the offloads the guest acked
    /// (`guest_acked_features`, virtio feature bits; see the
    /// [module documentation](self) for the mapping). Received frames then
    /// carry partial checksums and super-frames as the guest accepts them.
    ///
    /// # Errors
    /// `TUNSETOFFLOAD` failed.
    pub fn set_offloads(&mut self, guest_acked_features: u64) -> Result<(), TapError> {
        let (flags, rx) = tun_offloads(guest_acked_features);
        tun::set_offload(self.file.as_fd(), flags).map_err(|source| TapError::Ioctl {
            ifname: self.ifname.clone(),
            op: "TUNSETOFFLOAD",
            source,
        })?;
        self.rx_offloads = rx;
        Ok(())
    }

    /// Makes the device persistent (`TUNSETPERSIST`): it then outlives its
    /// last queue (a crash of the process that holds them) until it is
    /// made non-persistent again and its last queue closes, or it is
    /// deleted.
    ///
    /// # Errors
    /// `TUNSETPERSIST` failed.
    pub fn set_persist(&self, on: bool) -> Result<(), TapError> {
        tun::set_persist(self.file.as_fd(), on).map_err(|source| TapError::Ioctl {
            ifname: self.ifname.clone(),
            op: "TUNSETPERSIST",
            source,
        })
    }

    /// Sets the link up (`SIOCSIFFLAGS` with `IFF_UP`), in the caller's
    /// network namespace.
    ///
    /// # Errors
    /// The interface is not in this namespace, or the ioctl failed.
    pub fn set_link_up(&self) -> Result<(), TapError> {
        let name = IfName::new(&self.ifname).map_err(|e| TapError::Name(e.0))?;
        netdev::set_up(&name).map_err(|e| TapError::Ioctl {
            ifname: self.ifname.clone(),
            op: e.step,
            source: e.source,
        })
    }
}

/// Whether an interface named `ifname` exists in the calling thread's
/// network namespace (a name that is not valid does not).
pub fn interface_exists(ifname: &str) -> bool {
    IfName::new(ifname).is_ok_and(|n| netdev::ifindex(&n).is_ok())
}

impl Uplink for Tap {
    fn name(&self) -> &str {
        &self.name
    }

    /// One `read` per frame (the TAP interface), no allocation.
    fn rx_burst(&mut self, max: usize, f: RxFn<'_>) -> io::Result<usize> {
        let (mut reads, mut lent, mut bytes) = (0, 0usize, 0u64);
        let mut drops = DropCounts::default();
        let mut result = Ok(());
        while reads < max {
            let n = match (&self.file).read(&mut self.rx_buf) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // The frame did not fit the buffer (it is consumed).
                Err(e) if e.raw_os_error() == Some(libc::EFAULT) => {
                    reads += 1;
                    drops.add(DropReason::TooLong, 1);
                    continue;
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            };
            reads += 1;
            if n < VNET_LEN + ETH_HLEN {
                drops.add(DropReason::TooShort, 1);
                continue;
            }
            let mut raw = [0u8; net_hdr::MAX_HDR_LEN];
            raw.copy_from_slice(&self.rx_buf[..VNET_LEN]);
            // The kernel writes a 10-byte header and skips the rest.
            let hdr = VirtioNetHdr::from_bytes(&raw, 10);
            let r = offload::lend_within(
                &hdr,
                &mut self.rx_buf[VNET_LEN..n],
                self.rx_offloads,
                &mut self.segmenter,
                &mut |h, frame| {
                    bytes += frame.len() as u64;
                    f(h, frame);
                },
            );
            match r {
                Ok(k) => lent += k,
                Err(_) => drops.add(DropReason::Malformed, 1),
            }
        }
        self.counters.rx_packets += lent as u64;
        self.counters.rx_bytes += bytes;
        for (r, n) in drops.iter() {
            self.counters.rx_drops.add(r, n);
        }
        result.map(|()| lent)
    }

    /// Writes the frame at once (one `write`); `EAGAIN` is
    /// [`DropReason::NoBuffers`].
    fn tx_push(&mut self, hdr: &VirtioNetHdr, frame: &dyn FrameSource) -> Result<(), DropReason> {
        let len = frame.frame_len();
        if len > MAX_TX_FRAME {
            self.counters.tx_drops.add(DropReason::TooLong, 1);
            return Err(DropReason::TooLong);
        }
        let hdr = offload::kernel_tx_header(hdr, len)?;
        self.tx_buf[..VNET_LEN].copy_from_slice(&hdr.to_bytes());
        let copied = copy_frame(frame, &mut self.tx_buf[VNET_LEN..VNET_LEN + len]);
        debug_assert_eq!(copied, len);
        loop {
            match (&self.file).write(&self.tx_buf[..VNET_LEN + len]) {
                Ok(_) => {
                    self.counters.tx_packets += 1;
                    self.counters.tx_bytes += len as u64;
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return Err(DropReason::NoBuffers)
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    // Refused by the kernel (bad metadata, device down):
                    // the frame is gone, and counted.
                    self.counters.tx_drops.add(DropReason::Refused, 1);
                    return Ok(());
                }
            }
        }
    }

    fn tx_drop(&mut self, reason: DropReason) {
        self.counters.tx_drops.add(reason, 1);
    }

    /// Nothing to do: `tx_push` writes each frame at once.
    fn tx_flush(&mut self) -> io::Result<()> {
        Ok(())
    }

    /// The kernel hands over only the receive offloads the guest acked
    /// ([`Tap::set_offloads`]).
    fn guest_features(&mut self, acked: u64) {
        match self.set_offloads(acked) {
            Ok(()) => tracing::info!(
                "uplink {}: receive offloads set to rx={:#x}",
                self.name,
                self.rx_offloads
            ),
            Err(e) => tracing::warn!("uplink {}: {}", self.name, crate::error_chain(&e)),
        }
    }

    fn rx_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    fn offloads(&self) -> UplinkOffloads {
        UplinkOffloads {
            tx: TX_OFFLOADS,
            rx: self.rx_offloads,
        }
    }

    fn counters(&self) -> UplinkCounters {
        self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offload_mapping() {
        assert_eq!(tun_offloads(bits::GUEST_TSO4), (0, 0), "TSO needs CSUM");
        assert_eq!(
            tun_offloads(bits::GUEST_CSUM),
            (libc::TUN_F_CSUM, bits::GUEST_CSUM)
        );
        let all = bits::GUEST_CSUM
            | bits::GUEST_TSO4
            | bits::GUEST_TSO6
            | bits::GUEST_ECN
            | bits::GUEST_UFO
            | bits::HOST_TSO4;
        let (tun, rx) = tun_offloads(all);
        assert_eq!(
            tun,
            libc::TUN_F_CSUM
                | libc::TUN_F_TSO4
                | libc::TUN_F_TSO6
                | libc::TUN_F_TSO_ECN
                | libc::TUN_F_UFO
        );
        assert_eq!(rx, all & !bits::HOST_TSO4);
        // ECN without TSO means nothing.
        let (tun, rx) = tun_offloads(bits::GUEST_CSUM | bits::GUEST_ECN);
        assert_eq!((tun, rx), (libc::TUN_F_CSUM, bits::GUEST_CSUM));
    }

    #[test]
    fn bad_names() {
        assert!(matches!(
            Tap::open("a-name-that-is-too-long", TapConfig::default()),
            Err(TapError::Name(_))
        ));
        assert!(matches!(
            Tap::open("nul\0name", TapConfig::default()),
            Err(TapError::Name(_))
        ));
    }
}
