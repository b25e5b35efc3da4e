// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Why an AF_XDP uplink could not be set up.

use std::io;

use super::{AttachMode, BindMode, ConfigError};

/// Why an AF_XDP uplink could not be set up. Each variant names the
/// interface and the step that failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AfXdpError {
    /// The configuration is invalid.
    #[error("af_xdp {ifname}: invalid configuration: {reason}")]
    Config {
        /// Interface.
        ifname: String,
        /// What is wrong.
        reason: ConfigError,
    },
    /// The interface does not exist (in this network namespace).
    #[error("af_xdp {ifname}: no such interface")]
    Interface {
        /// Interface.
        ifname: String,
        /// The lookup error.
        #[source]
        source: io::Error,
    },
    /// Reading the interface's MTU failed.
    #[error("af_xdp {ifname}: cannot read the MTU")]
    Mtu {
        /// Interface.
        ifname: String,
        /// The ioctl error.
        #[source]
        source: io::Error,
    },
    /// Creating the XSKMAP failed (permissions: needs `CAP_BPF`).
    #[error("af_xdp {ifname}: cannot create the XSKMAP")]
    MapCreate {
        /// Interface.
        ifname: String,
        /// The `bpf(BPF_MAP_CREATE)` error.
        #[source]
        source: io::Error,
    },
    /// The kernel rejected the XDP program.
    #[error("af_xdp {ifname}: cannot load the XDP program (verifier log: {log})")]
    ProgLoad {
        /// Interface.
        ifname: String,
        /// The verifier's log.
        log: String,
        /// The `bpf(BPF_PROG_LOAD)` error.
        #[source]
        source: io::Error,
    },
    /// Attaching the XDP program failed (`EBUSY`: another program is
    /// attached; `EOPNOTSUPP`: no native XDP in the driver).
    #[error("af_xdp {ifname}: cannot attach the XDP program in {mode} mode")]
    LinkCreate {
        /// Interface.
        ifname: String,
        /// The mode tried last.
        mode: AttachMode,
        /// The `bpf(BPF_LINK_CREATE)` error.
        #[source]
        source: io::Error,
    },
    /// Mapping the UMEM failed.
    #[error("af_xdp {ifname} queue {queue_id}: cannot map the UMEM ({bytes} bytes)")]
    UmemAlloc {
        /// Interface.
        ifname: String,
        /// Queue.
        queue_id: u32,
        /// Size asked for.
        bytes: u64,
        /// The `mmap` error.
        #[source]
        source: io::Error,
    },
    /// Creating the socket failed.
    #[error("af_xdp {ifname} queue {queue_id}: cannot create the AF_XDP socket")]
    Socket {
        /// Interface.
        ifname: String,
        /// Queue.
        queue_id: u32,
        /// The `socket` error.
        #[source]
        source: io::Error,
    },
    /// Registering the UMEM with the socket failed.
    #[error("af_xdp {ifname} queue {queue_id}: cannot register the UMEM")]
    UmemReg {
        /// Interface.
        ifname: String,
        /// Queue.
        queue_id: u32,
        /// The `setsockopt(XDP_UMEM_REG)` error.
        #[source]
        source: io::Error,
    },
    /// Creating one of the rings failed.
    #[error("af_xdp {ifname} queue {queue_id}: cannot create the {ring} ring ({size} entries)")]
    RingSize {
        /// Interface.
        ifname: String,
        /// Queue.
        queue_id: u32,
        /// Which ring.
        ring: &'static str,
        /// Entries asked for.
        size: u32,
        /// The `setsockopt` error.
        #[source]
        source: io::Error,
    },
    /// Mapping one of the rings (or reading their offsets) failed.
    #[error("af_xdp {ifname} queue {queue_id}: cannot map the {ring} ring")]
    RingMmap {
        /// Interface.
        ifname: String,
        /// Queue.
        queue_id: u32,
        /// Which ring (or "offsets").
        ring: &'static str,
        /// The `getsockopt(XDP_MMAP_OFFSETS)` or `mmap` error.
        #[source]
        source: io::Error,
    },
    /// Binding the socket to the queue failed.
    #[error("af_xdp {ifname} queue {queue_id}: cannot bind in {mode} mode")]
    Bind {
        /// Interface.
        ifname: String,
        /// Queue.
        queue_id: u32,
        /// The mode asked for.
        mode: BindMode,
        /// The `bind` error.
        #[source]
        source: io::Error,
    },
    /// Zero-copy was required and the driver does not support it.
    #[error(
        "af_xdp {ifname} queue {queue_id}: zero-copy required, but the driver does not support it"
    )]
    ZeroCopyUnsupported {
        /// Interface.
        ifname: String,
        /// Queue.
        queue_id: u32,
        /// The `bind(XDP_ZEROCOPY)` error (`EOPNOTSUPP`).
        #[source]
        source: io::Error,
    },
    /// Registering the socket in the XSKMAP failed.
    #[error("af_xdp {ifname} queue {queue_id}: cannot insert the socket into the XSKMAP")]
    MapUpdate {
        /// Interface.
        ifname: String,
        /// Queue.
        queue_id: u32,
        /// The `bpf(BPF_MAP_UPDATE_ELEM)` error.
        #[source]
        source: io::Error,
    },
}
