// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! AF_PACKET uplink: one packet socket bound to one interface, with mmap'd
//! TPACKET_V3 receive and transmit rings and virtio-net headers
//! (`PACKET_VNET_HDR`), so checksum and segmentation offloads travel between
//! the guests and the kernel as they are.
//!
//! # Contracts
//!
//! * **Receive** ([`Uplink::rx_burst`]): no syscall. The kernel fills ring
//!   blocks and hands each one over (`TP_STATUS_USER`) when it is full or
//!   after [`RxRingConfig::block_timeout_ms`]; frames are lent straight
//!   from the block, which goes back to the kernel as soon as its last
//!   frame was lent. A frame whose 802.1Q/802.1ad tag the kernel moved into
//!   metadata gets it back in place (in the ring, no copy), with the
//!   header's `csum_start` and `hdr_len` moved by 4 bytes.
//! * **Offload metadata on receive** comes from the 10-byte header the
//!   kernel writes at `tp_mac - 10` (always 10 bytes, even with a 12-byte
//!   socket header size): `F_NEEDS_CSUM` for partial checksums
//!   (`TP_STATUS_CSUMNOTREADY`), `F_DATA_VALID` for validated ones and
//!   `GSO_TCPV4`/`GSO_TCPV6` (+`GSO_ECN`) for super-frames. Frames carry
//!   only what [`Uplink::offloads`]`().rx` announces; anything else (a
//!   `GSO_UDP_L4` super-frame, or every offload when
//!   [`AfPacketConfig::vnet_hdr`] is off) is completed in place or
//!   segmented in software ([`offload`]) before it is lent. Segments count
//!   against `max` one by one: a super-frame whose segments would not fit
//!   in what is left of `max` waits for the next burst (only a super-frame
//!   alone in a burst may yield more than `max` frames).
//! * **Transmit** ([`Uplink::tx_push`]): the frame is copied once into a TX
//!   ring slot after its virtio-net header (12 bytes with
//!   `PACKET_VNET_HDR_SZ`, Linux >= 6.2; 10 before), and the slot is marked
//!   `TP_STATUS_SEND_REQUEST`. [`Uplink::tx_flush`] makes one
//!   `send(fd, NULL, 0, MSG_DONTWAIT)` for all queued slots; the kernel
//!   returns each slot (`TP_STATUS_AVAILABLE`) when its skb is freed. When
//!   no slot is free, `tx_push` flushes once and then reports
//!   [`DropReason::NoBuffers`]. A frame the qdisc or driver drops (`ENOBUFS`) is
//!   dropped for good rather than retried, so it cannot block the ring.
//! * **Offloads on transmit**: partial checksums and `GSO_TCPV4`,
//!   `GSO_TCPV6`, `GSO_UDP` (UFO) and `GSO_UDP_L4` (USO) super-frames are
//!   handed to the kernel, which completes or segments them (in software if
//!   the interface cannot, except on the qdisc-bypass path: see
//!   [`AfPacketConfig::qdisc_bypass`]). Verified on Linux 6.18 over veth
//!   for all five, and for `GSO_ECN`. Headers are checked first against what the
//!   kernel's `virtio_net_hdr_to_skb` would refuse (unknown type, GSO
//!   without `F_NEEDS_CSUM` or with `gso_size` 0, checksum field outside the
//!   frame or at the wrong offset, more than 64 USO segments): such frames
//!   get [`DropReason::OffloadUnsupported`]. The socket runs with `PACKET_LOSS`, so a
//!   frame the kernel still refuses is skipped instead of blocking the
//!   ring; the kernel does not say which, so such refusals are counted as
//!   one `Refused` drop per flush in which they happen.
//! * The socket ignores its own transmissions (`PACKET_IGNORE_OUTGOING`),
//!   joins the interface's promiscuous membership (so frames for the
//!   guests' MACs arrive) and may bypass the qdisc layer
//!   (`PACKET_QDISC_BYPASS`) and join a `PACKET_FANOUT` group to spread one
//!   interface over several sockets.
//!
//! * **Counters** (by [`DropReason`]): on receive, `TooLong` for frames
//!   truncated by the ring, `Malformed` for ones the software fallback
//!   refused (or a block the kernel filled inconsistently), `Overrun` for the
//!   kernel's own drops (ring full), read from `PACKET_STATISTICS` when a
//!   block comes with `TP_STATUS_LOSING`. On transmit, `TooLong` for frames
//!   larger than a slot and `Refused` for frames the kernel dropped;
//!   `NoBuffers` and `OffloadUnsupported` are returned uncounted (the
//!   caller retries, completes the frame in software, or records the drop
//!   with [`Uplink::tx_drop`]).
//!
//! Hot path: no allocation, no lock, at most one syscall per burst per
//! direction (plus one `PACKET_STATISTICS` read when the kernel flags a
//! block with `TP_STATUS_LOSING`; and under back-pressure each `tx_push`
//! that finds the ring full flushes once before reporting `Full`).

use std::io;
use std::mem::offset_of;
#[cfg(test)]
use std::mem::size_of;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::Ordering;

use super::{RxFn, Uplink, UplinkCounters, UplinkOffloads};
use crate::device::bits;
use crate::frame::{copy_frame, FrameSource};
use crate::net_hdr::{self, VirtioNetHdr};
use crate::offload::{self, Segmenter};
use crate::stats::{DropCounts, DropReason};
use crate::sys::mmap::{self, Mmap};
use crate::sys::netdev::{self, IfName};
use crate::sys::{packet, socket};
use crate::wire::{ETH_ALEN, ETH_P_8021Q, VLAN_HLEN};

mod config;
mod ring;

pub use self::config::{AfPacketConfig, AfPacketError, FanoutMode, RxRingConfig, TxRingConfig};
use self::ring::{Cursor, RxRing, TxRing};

/// `SO_SNDBUFFORCE` where the generic socket option numbers apply (`None`
/// elsewhere: only plain `SO_SNDBUF` is tried there).
const SO_SNDBUFFORCE: Option<libc::c_int> = if cfg!(any(
    target_arch = "x86_64",
    target_arch = "x86",
    target_arch = "aarch64",
    target_arch = "arm",
    target_arch = "riscv64",
    target_arch = "loongarch64"
)) {
    Some(32)
} else {
    None
};
/// `TxRing::lens` marker of a slot dropped by [`Uplink::tx_flush`].
const DROPPED: u32 = u32::MAX;
/// Smallest RX block: a 64 KiB super-frame plus headers must fit in one.
pub const MIN_RX_BLOCK_SIZE: u32 = 128 * 1024;
/// Size of `struct tpacket3_hdr`, which the kernel aligns to 48 bytes; frame
/// data of TX slots starts right after it.
const TPACKET3_HDR: usize = 48;
/// Offset of `block_status` in a `struct tpacket_block_desc`.
const BLOCK_STATUS_OFF: usize = 8;
/// Start of the part of an RX block we read and write while we own it (from
/// `num_pkts` on): the kernel may still read `block_status` meanwhile.
const BLOCK_BODY_OFF: usize = BLOCK_STATUS_OFF + 4;
/// The `virtio_net_hdr` the kernel writes before each received frame.
const RX_VNET_LEN: usize = 10;
/// Ethernet destination + source address.
const ETH_ALEN2: usize = 2 * ETH_ALEN;

// ===== native-endian header access =====
//
// Packet sockets exchange `virtio_net_hdr` in the host's byte order
// (`vio_le()` is the legacy, native one), unlike virtio 1.x queues.

fn ne_u16(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(off..off + 2)?.try_into().ok()?))
}

fn ne_u32(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(off..off + 4)?.try_into().ok()?))
}

fn hdr_from_ne(b: &[u8; RX_VNET_LEN]) -> VirtioNetHdr {
    let u = |i: usize| u16::from_ne_bytes([b[i], b[i + 1]]);
    VirtioNetHdr {
        flags: b[0],
        gso_type: b[1],
        hdr_len: u(2),
        gso_size: u(4),
        csum_start: u(6),
        csum_offset: u(8),
        num_buffers: 0,
    }
}

/// The header in native order, `num_buffers` (bytes 10 and 11, sent with a
/// 12-byte `PACKET_VNET_HDR_SZ`) zero: it means nothing on transmit.
fn hdr_to_ne(h: &VirtioNetHdr) -> [u8; net_hdr::MAX_HDR_LEN] {
    let tx = VirtioNetHdr {
        num_buffers: 0,
        ..*h
    };
    tx.to_bytes_in(u16::to_ne_bytes)
}

// ===== offload policy =====

/// Offloads carried with `vnet_hdr` on.
const TX_OFFLOADS: u64 =
    bits::CSUM | bits::HOST_TSO4 | bits::HOST_TSO6 | bits::HOST_ECN | bits::HOST_UFO;
const RX_OFFLOADS: u64 = bits::GUEST_CSUM | bits::GUEST_TSO4 | bits::GUEST_TSO6 | bits::GUEST_ECN;

// ===== impl AfPacket =====

/// An uplink on a packet socket with mmap'd TPACKET_V3 rings.
///
/// See the [module documentation](self) for the contracts.
#[derive(Debug)]
pub struct AfPacket {
    name: String,
    ifname: String,
    ifindex: u32,
    rx: RxRing,
    tx: TxRing,
    /// Size of the virtio-net header in TX slots (10 or 12).
    tx_vnet_len: usize,
    offloads: UplinkOffloads,
    segmenter: Segmenter,
    counters: UplinkCounters,
    /// The RX ring, then the TX ring; accessed through `rx` and `tx`.
    map: Mmap,
    fd: OwnedFd,
}

impl AfPacket {
    /// Opens a packet socket on interface `ifname` (in the caller's network
    /// namespace) and sets up its rings.
    ///
    /// # Errors
    /// See [`AfPacketError`]; each names the interface.
    pub fn open(ifname: &str, cfg: AfPacketConfig) -> Result<Self, AfPacketError> {
        let name = ifname.to_owned();
        let cname = IfName::new(ifname).map_err(|e| AfPacketError::Name(e.0))?;
        let geometry = |reason| AfPacketError::Geometry {
            ifname: name.clone(),
            reason,
        };
        let setup = |step: &'static str| {
            let name = name.clone();
            move |source: io::Error| match source.raw_os_error() {
                Some(libc::EPERM | libc::EACCES) => AfPacketError::Permission {
                    ifname: name,
                    source,
                },
                _ => AfPacketError::Setup {
                    ifname: name,
                    step,
                    source,
                },
            }
        };

        // Geometry.
        let page = mmap::page_size();
        let r = cfg.rx_ring;
        let t = cfg.tx_ring;
        let (rb, tb, tf) = (
            r.block_size as usize,
            t.block_size as usize,
            t.frame_size as usize,
        );
        if rb < MIN_RX_BLOCK_SIZE as usize || rb % page != 0 {
            return Err(geometry(
                "RX block size must be a multiple of the page size and at least 128 KiB",
            ));
        }
        if tb == 0 || tb % page != 0 || tf == 0 || tf % page != 0 || tf > tb {
            return Err(geometry(
                "TX block and frame sizes must be multiples of the page size, frame <= block",
            ));
        }
        if r.block_count == 0 || t.block_count == 0 {
            return Err(geometry("block counts must be at least 1"));
        }
        // RX slot size only matters for the kernel's consistency checks.
        const RX_FRAME: u32 = 2048;
        let rx_bytes = rb.checked_mul(r.block_count as usize);
        let per_block = tb / tf;
        let tx_count = per_block.checked_mul(t.block_count as usize);
        let tx_bytes = tb.checked_mul(t.block_count as usize);
        let (Some(rx_bytes), Some(tx_count), Some(tx_bytes)) = (rx_bytes, tx_count, tx_bytes)
        else {
            return Err(geometry("ring too large"));
        };
        let Some(total) = rx_bytes.checked_add(tx_bytes) else {
            return Err(geometry("ring too large"));
        };
        let (Ok(rx_frames), Ok(tx_frames)) = (
            u32::try_from(rb / RX_FRAME as usize * r.block_count as usize),
            u32::try_from(tx_count),
        ) else {
            return Err(geometry("too many ring frames"));
        };

        let ifindex = netdev::ifindex(&cname).map_err(|_| AfPacketError::NotFound(name.clone()))?;
        let fd = packet::socket().map_err(setup("socket"))?;
        let set_opt = |name, val: &i32| packet::setsockopt(fd.as_fd(), name, val);
        let v3 = libc::tpacket_versions::TPACKET_V3 as libc::c_int;
        set_opt(libc::PACKET_VERSION, &v3).map_err(setup("PACKET_VERSION"))?;
        // The header size must be set before the rings.
        let tx_vnet_len = if set_opt(libc::PACKET_VNET_HDR_SZ, &12).is_ok() {
            12
        } else {
            set_opt(libc::PACKET_VNET_HDR, &1).map_err(setup("PACKET_VNET_HDR"))?;
            10
        };
        set_opt(libc::PACKET_LOSS, &1).map_err(setup("PACKET_LOSS"))?;
        if cfg.qdisc_bypass {
            set_opt(libc::PACKET_QDISC_BYPASS, &1).map_err(setup("PACKET_QDISC_BYPASS"))?;
        }
        set_opt(libc::PACKET_IGNORE_OUTGOING, &1).map_err(setup("PACKET_IGNORE_OUTGOING"))?;
        // Let the whole TX ring be in flight: the default send buffer holds
        // only three 64 KiB frames. Best effort (FORCE needs CAP_NET_ADMIN;
        // plain SO_SNDBUF is capped by net.core.wmem_max).
        let sndbuf = i32::try_from(tx_bytes).unwrap_or(i32::MAX);
        let forced = SO_SNDBUFFORCE.is_some_and(|force| {
            socket::setsockopt(fd.as_fd(), libc::SOL_SOCKET, force, &sndbuf).is_ok()
        });
        if !forced {
            let _ = socket::setsockopt(fd.as_fd(), libc::SOL_SOCKET, libc::SO_SNDBUF, &sndbuf);
        }

        let rx_req = libc::tpacket_req3 {
            tp_block_size: r.block_size,
            tp_block_nr: r.block_count,
            tp_frame_size: RX_FRAME,
            tp_frame_nr: rx_frames,
            tp_retire_blk_tov: r.block_timeout_ms,
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        packet::setsockopt(fd.as_fd(), libc::PACKET_RX_RING, &rx_req)
            .map_err(setup("PACKET_RX_RING"))?;
        let tx_req = libc::tpacket_req3 {
            tp_block_size: t.block_size,
            tp_block_nr: t.block_count,
            tp_frame_size: t.frame_size,
            tp_frame_nr: tx_frames,
            tp_retire_blk_tov: 0,
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        packet::setsockopt(fd.as_fd(), libc::PACKET_TX_RING, &tx_req)
            .map_err(setup("PACKET_TX_RING"))?;
        // RX ring first, then TX ring, in one mapping.
        let map = Mmap::shared(fd.as_fd(), total).map_err(setup("mmap"))?;

        packet::bind(fd.as_fd(), ifindex).map_err(setup("bind"))?;
        if cfg.promiscuous {
            let mreq = libc::packet_mreq {
                mr_ifindex: ifindex as i32,
                mr_type: libc::PACKET_MR_PROMISC as u16,
                mr_alen: 0,
                mr_address: [0; 8],
            };
            packet::setsockopt(fd.as_fd(), libc::PACKET_ADD_MEMBERSHIP, &mreq)
                .map_err(setup("PACKET_ADD_MEMBERSHIP"))?;
        }
        if let Some((group, mode)) = cfg.fanout {
            let arg = u32::from(group) | (mode.raw() << 16);
            packet::setsockopt(fd.as_fd(), libc::PACKET_FANOUT, &arg)
                .map_err(setup("PACKET_FANOUT"))?;
        }

        let rx = RxRing {
            block_size: rb,
            block_count: r.block_count as usize,
            next: 0,
            cursor: None,
        };
        let tx = TxRing {
            // Invariant: rx_bytes < total, so this stays inside the mapping.
            base: rx_bytes,
            block_size: tb,
            frame_size: tf,
            per_block,
            count: tx_count,
            head: 0,
            unsent: 0,
            lens: vec![0; tx_count],
        };
        let offloads = if cfg.vnet_hdr {
            UplinkOffloads {
                tx: TX_OFFLOADS,
                rx: RX_OFFLOADS,
            }
        } else {
            UplinkOffloads::default()
        };
        Ok(Self {
            name: format!("af_packet:{ifname}"),
            ifname: name,
            ifindex,
            rx,
            tx,
            tx_vnet_len,
            offloads,
            segmenter: Segmenter::new(),
            counters: UplinkCounters::default(),
            map,
            fd,
        })
    }

    /// The interface's name.
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// The interface's index.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// Size of the virtio-net header the socket takes on transmit: 12 where
    /// the kernel has `PACKET_VNET_HDR_SZ` (Linux >= 6.2), 10 before.
    pub fn tx_vnet_hdr_len(&self) -> usize {
        self.tx_vnet_len
    }

    /// Number of transmit slots.
    pub fn tx_slots(&self) -> usize {
        self.tx.count
    }

    /// Largest frame `tx_push` takes (slot size minus headers).
    pub fn max_tx_frame(&self) -> usize {
        self.tx.frame_size - TPACKET3_HDR - self.tx_vnet_len
    }

    /// Accounts for the slots the kernel has processed since the last call
    /// (they left `TP_STATUS_SEND_REQUEST`); returns (frames, bytes).
    fn reap_sent(&mut self) -> (usize, u64) {
        let (mut frames, mut bytes) = (0, 0u64);
        while self.tx.unsent > 0 {
            let i = (self.tx.head + self.tx.count - self.tx.unsent) % self.tx.count;
            if self.tx.status(&self.map, i).load(Ordering::Acquire) == libc::TP_STATUS_SEND_REQUEST
            {
                break;
            }
            if self.tx.lens[i] != DROPPED {
                frames += 1;
                bytes += u64::from(self.tx.lens[i]);
            }
            self.tx.unsent -= 1;
        }
        (frames, bytes)
    }
}

/// Puts back a VLAN tag the kernel moved from the frame at `body[start..]`
/// into metadata: the MAC addresses move 4 bytes into the headroom before
/// the frame (where the already-read virtio-net header was) and the tag
/// follows them. Offsets in `hdr` move along. Returns the new start.
///
/// The caller checked that `start >= 48 + 10` (headroom) and that the frame
/// has at least 12 bytes.
fn restore_vlan_tag(
    body: &mut [u8],
    start: usize,
    tpid: u16,
    tci: u16,
    hdr: &mut VirtioNetHdr,
) -> usize {
    let begin = start - VLAN_HLEN;
    body.copy_within(start..start + ETH_ALEN2, begin);
    let tag = begin + ETH_ALEN2;
    body[tag..tag + 2].copy_from_slice(&tpid.to_be_bytes());
    body[tag + 2..tag + 4].copy_from_slice(&tci.to_be_bytes());
    *hdr = hdr.shifted(VLAN_HLEN as i16);
    begin
}

impl Uplink for AfPacket {
    fn name(&self) -> &str {
        &self.name
    }

    /// Hot path: no syscall (one `PACKET_STATISTICS` read when the kernel
    /// reports losses), no allocation.
    fn rx_burst(&mut self, max: usize, f: RxFn<'_>) -> io::Result<usize> {
        let (mut lent, mut bytes) = (0usize, 0u64);
        let mut drops = DropCounts::default();
        let rx_offloads = self.offloads.rx;
        let block_size = self.rx.block_size;
        while lent < max {
            let bi = self.rx.next;
            let status = self.rx.status(&self.map, bi).load(Ordering::Acquire);
            if status & libc::TP_STATUS_USER == 0 {
                break;
            }
            // Ownership: the block is ours (TP_STATUS_USER, read with Acquire
            // just above), it goes back to the kernel only after `body` is
            // last used below, and nothing else refers to it.
            let body = self.rx.body(&mut self.map, bi);
            // Block offsets -> body indices.
            let at = |off: usize| off - BLOCK_BODY_OFF;
            let (mut remaining, mut off) = match self.rx.cursor {
                Some(c) => (c.remaining, c.offset),
                None => {
                    if status & libc::TP_STATUS_LOSING != 0 {
                        if let Ok(st) = packet::statistics(self.fd.as_fd()) {
                            drops.add(DropReason::Overrun, u64::from(st.tp_drops));
                        }
                    }
                    let n = ne_u32(body, at(12)).unwrap_or(0);
                    let first = ne_u32(body, at(16)).unwrap_or(0) as usize;
                    (n, first)
                }
            };
            // Set when the next frame's software segments would exceed
            // `max`: it stays in the ring for the next burst.
            let mut full = false;
            while remaining > 0 && lent < max {
                // A frame's header must lie after the block descriptor.
                if off < 48 {
                    drops.add(DropReason::Malformed, u64::from(remaining));
                    remaining = 0;
                    break;
                }
                let h = at(off);
                let (Some(next), Some(snaplen), Some(len), Some(st), Some(mac)) = (
                    ne_u32(body, h + offset_of!(libc::tpacket3_hdr, tp_next_offset)),
                    ne_u32(body, h + offset_of!(libc::tpacket3_hdr, tp_snaplen)),
                    ne_u32(body, h + offset_of!(libc::tpacket3_hdr, tp_len)),
                    ne_u32(body, h + offset_of!(libc::tpacket3_hdr, tp_status)),
                    ne_u16(body, h + offset_of!(libc::tpacket3_hdr, tp_mac)),
                ) else {
                    drops.add(DropReason::Malformed, u64::from(remaining));
                    remaining = 0;
                    break;
                };
                let (snaplen, mac) = (snaplen as usize, usize::from(mac));
                let start = h + mac;
                // Complete (not truncated by the block) and consistent.
                let whole = mac >= TPACKET3_HDR + RX_VNET_LEN
                    && start + snaplen <= body.len()
                    && snaplen == len as usize;
                let mut hdr = VirtioNetHdr::default();
                if whole {
                    let mut vh = [0u8; RX_VNET_LEN];
                    vh.copy_from_slice(&body[start - RX_VNET_LEN..start]);
                    hdr = hdr_from_ne(&vh);
                    // A frame segmented here counts as its segments.
                    if lent > 0 && hdr.is_gso() && !offload::fits(&hdr, rx_offloads) {
                        let frame = &body[start..start + snaplen];
                        let n = offload::segment_count(&hdr, frame).unwrap_or(1);
                        if lent + n > max {
                            full = true;
                            break;
                        }
                    }
                }
                remaining -= 1;
                let mut begin = start;
                let mut ok = whole;
                if ok && st & libc::TP_STATUS_VLAN_VALID != 0 {
                    let hv1 = h + offset_of!(libc::tpacket3_hdr, hv1);
                    let tci = ne_u32(
                        body,
                        hv1 + offset_of!(libc::tpacket_hdr_variant1, tp_vlan_tci),
                    );
                    let tpid = match st & libc::TP_STATUS_VLAN_TPID_VALID {
                        0 => None,
                        _ => ne_u16(
                            body,
                            hv1 + offset_of!(libc::tpacket_hdr_variant1, tp_vlan_tpid),
                        ),
                    };
                    ok = snaplen >= ETH_ALEN2;
                    if ok {
                        let (tpid, tci) = (tpid.unwrap_or(ETH_P_8021Q), tci.unwrap_or(0) as u16);
                        begin = restore_vlan_tag(body, start, tpid, tci, &mut hdr);
                    }
                }
                let delivered = if ok {
                    offload::lend_within(
                        &hdr,
                        &mut body[begin..start + snaplen],
                        rx_offloads,
                        &mut self.segmenter,
                        &mut |h, frame| {
                            bytes += frame.len() as u64;
                            f(h, frame);
                        },
                    )
                    .ok()
                } else {
                    None
                };
                match delivered {
                    Some(n) => lent += n,
                    None if !whole => drops.add(DropReason::TooLong, 1),
                    None => drops.add(DropReason::Malformed, 1),
                }
                if remaining > 0 {
                    let next = next as usize;
                    if next == 0 || off + next + TPACKET3_HDR > block_size {
                        drops.add(DropReason::Malformed, u64::from(remaining));
                        remaining = 0;
                    } else {
                        off += next;
                    }
                }
            }
            if remaining == 0 {
                self.rx.cursor = None;
                self.rx
                    .status(&self.map, bi)
                    .store(libc::TP_STATUS_KERNEL, Ordering::Release);
                self.rx.next = (bi + 1) % self.rx.block_count;
            } else {
                self.rx.cursor = Some(Cursor {
                    remaining,
                    offset: off,
                });
            }
            if full {
                break;
            }
        }
        self.counters.rx_packets += lent as u64;
        self.counters.rx_bytes += bytes;
        for (r, n) in drops.iter() {
            self.counters.rx_drops.add(r, n);
        }
        Ok(lent)
    }

    fn tx_push(&mut self, hdr: &VirtioNetHdr, frame: &dyn FrameSource) -> Result<(), DropReason> {
        let len = frame.frame_len();
        if len > self.max_tx_frame() {
            self.counters.tx_drops.add(DropReason::TooLong, 1);
            return Err(DropReason::TooLong);
        }
        let hdr = if self.offloads.tx != 0 {
            offload::kernel_tx_header(hdr, len)?
        } else if hdr.is_gso() || hdr.needs_csum() {
            return Err(DropReason::OffloadUnsupported);
        } else {
            VirtioNetHdr::default()
        };
        let i = self.tx.head;
        if self.tx.status(&self.map, i).load(Ordering::Acquire) != libc::TP_STATUS_AVAILABLE {
            // Out of slots: hand the queued ones over, then look again. An
            // error here shows again at the caller's next tx_flush.
            if self.tx.unsent > 0 {
                let _ = self.tx_flush();
            }
            if self.tx.status(&self.map, i).load(Ordering::Acquire) != libc::TP_STATUS_AVAILABLE {
                return Err(DropReason::NoBuffers);
            }
        }
        let vlen = self.tx_vnet_len;
        // Ownership: the slot is ours (TP_STATUS_AVAILABLE, read with
        // Acquire); the data area starts after the 48-byte slot header, so
        // it does not overlap `tp_status`, and `frame_size - 48 >= vlen +
        // len` (checked above).
        let data = self.tx.data(&mut self.map, i);
        data[..vlen].copy_from_slice(&hdr_to_ne(&hdr)[..vlen]);
        let copied = copy_frame(frame, &mut data[vlen..vlen + len]);
        debug_assert_eq!(copied, len);
        let tp_len = (vlen + len) as u32;
        // Ownership: the slot is ours (AVAILABLE); the kernel reads it only
        // after the Release store of the status below.
        self.tx.set_len(&mut self.map, i, tp_len);
        self.tx.lens[i] = len as u32;
        self.tx
            .status(&self.map, i)
            .store(libc::TP_STATUS_SEND_REQUEST, Ordering::Release);
        self.tx.head = (i + 1) % self.tx.count;
        self.tx.unsent += 1;
        Ok(())
    }

    /// One `send(MSG_DONTWAIT)` when frames are queued; none otherwise.
    /// `EAGAIN` (send buffer full) leaves the frames queued for the next
    /// flush. `ENOBUFS` (the qdisc or, with qdisc bypass, the driver dropped
    /// a frame) drops that frame, counted as `Refused`; the frames queued
    /// behind it go at the next flush. Neither is an error.
    fn tx_flush(&mut self) -> io::Result<()> {
        if self.tx.unsent == 0 {
            return Ok(());
        }
        let res = packet::send_ring(self.fd.as_fd());
        let (frames, bytes) = self.reap_sent();
        if matches!(&res, Err(e) if e.raw_os_error() == Some(libc::ENOBUFS)) && self.tx.unsent > 0 {
            // The kernel dropped the oldest queued frame (driver or qdisc
            // full; or, with qdisc bypass, a super-frame the device cannot
            // segment) but put it back as SEND_REQUEST, to be retried at
            // every send: a frame that can never go would block the ring.
            // Drop it for good: with a length shorter than its virtio-net
            // header, the next send skips it (PACKET_LOSS).
            let i = (self.tx.head + self.tx.count - self.tx.unsent) % self.tx.count;
            // Ownership: the slot is SEND_REQUEST and no send() is running
            // (we hold `&mut self`, and the kernel reads TX slots only inside
            // send(), which has returned).
            self.tx.set_len(&mut self.map, i, 0);
            self.tx.lens[i] = DROPPED;
            self.counters.tx_drops.add(DropReason::Refused, 1);
        }
        let accepted = match &res {
            Ok(n) => *n as u64,
            Err(_) => bytes,
        };
        // PACKET_LOSS skips frames the kernel refuses; only the byte count
        // tells that it happened.
        let refused = u64::from(accepted < bytes && frames > 0);
        self.counters.tx_packets += frames as u64 - refused;
        self.counters.tx_bytes += accepted.min(bytes);
        self.counters.tx_drops.add(DropReason::Refused, refused);
        match res {
            Ok(_) => Ok(()),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::ENOBUFS)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn tx_drop(&mut self, reason: DropReason) {
        self.counters.tx_drops.add(reason, 1);
    }

    fn rx_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    fn offloads(&self) -> UplinkOffloads {
        self.offloads
    }

    fn counters(&self) -> UplinkCounters {
        self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net_hdr::{F_NEEDS_CSUM, TSO_V4_SAMPLE};
    use crate::wire::ETH_P_8021AD;

    #[test]
    fn layout_matches_the_kernel() {
        assert_eq!(size_of::<libc::tpacket3_hdr>(), TPACKET3_HDR);
        assert_eq!(offset_of!(libc::tpacket3_hdr, tp_status), 20);
        assert_eq!(
            offset_of!(libc::tpacket_block_desc, hdr)
                + offset_of!(libc::tpacket_hdr_v1, block_status),
            BLOCK_STATUS_OFF
        );
        assert_eq!(offset_of!(libc::tpacket_hdr_v1, num_pkts), 4);
        assert_eq!(offset_of!(libc::tpacket_hdr_v1, offset_to_first_pkt), 8);
    }

    #[test]
    fn header_round_trip_native() {
        let h = TSO_V4_SAMPLE;
        let b = hdr_to_ne(&h);
        let mut ten = [0u8; RX_VNET_LEN];
        ten.copy_from_slice(&b[..RX_VNET_LEN]);
        assert_eq!(hdr_from_ne(&ten), h);
    }

    #[test]
    fn vlan_tag_goes_back_in_front_of_the_ethertype() {
        let mut body = vec![0u8; 100];
        let start = 60;
        let frame: Vec<u8> = (1..=20).collect();
        body[start..start + 20].copy_from_slice(&frame);
        let mut hdr = VirtioNetHdr {
            flags: F_NEEDS_CSUM,
            csum_start: 34,
            csum_offset: 16,
            hdr_len: 54,
            ..Default::default()
        };
        let begin = restore_vlan_tag(&mut body, start, ETH_P_8021AD, 0x2064, &mut hdr);
        assert_eq!(begin, start - 4);
        let mut want = frame[..12].to_vec();
        want.extend_from_slice(&[0x88, 0xa8, 0x20, 0x64]);
        want.extend_from_slice(&frame[12..]);
        assert_eq!(&body[begin..start + 20], &want[..]);
        assert_eq!((hdr.csum_start, hdr.hdr_len), (38, 58));
    }

    #[test]
    fn open_errors_name_the_interface() {
        let e = AfPacket::open("", AfPacketConfig::default()).unwrap_err();
        assert!(matches!(e, AfPacketError::Name(_)));
        let e = AfPacket::open("a-name-that-is-too-long", AfPacketConfig::default()).unwrap_err();
        assert!(matches!(e, AfPacketError::Name(_)));
        let e = AfPacket::open("vhu-no-such0", AfPacketConfig::default()).unwrap_err();
        assert!(e.to_string().contains("vhu-no-such0"), "{e}");
        let mut cfg = AfPacketConfig::default();
        cfg.rx_ring.block_size = 64 * 1024;
        let e = AfPacket::open("lo", cfg).unwrap_err();
        assert!(matches!(e, AfPacketError::Geometry { .. }), "{e}");
        assert!(e.to_string().contains("lo"));
        let mut cfg = AfPacketConfig::default();
        cfg.tx_ring.frame_size = 5000;
        assert!(matches!(
            AfPacket::open("lo", cfg),
            Err(AfPacketError::Geometry { .. })
        ));
    }
}
