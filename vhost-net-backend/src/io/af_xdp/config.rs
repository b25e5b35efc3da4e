// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! What an AF_XDP socket is asked for: UMEM and ring geometry, zero-copy,
//! how the XDP program attaches, `need_wakeup`; and the modes it ends up in.

use std::fmt;

use super::bpf;
use super::{AfXdpError, XSKMAP_ENTRIES};
use crate::sys::netdev::IFNAME_RULE;

/// What is wrong with an [`AfXdpConfig`], or with the interface name an
/// uplink is opened on ([`AfXdpError::Config`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// [`AfXdpConfig::frame_size`] is neither 2048 nor 4096.
    #[error("frame size must be 2048 or 4096, got {0}")]
    FrameSize(u32),
    /// [`AfXdpConfig::frames`] is below 2.
    #[error("at least 2 UMEM frames needed, got {0}")]
    Frames(u32),
    /// A ring size is not a power of two.
    #[error("{ring} ring size must be a power of two, got {size}")]
    RingSize {
        /// Which ring: `fill`, `completion`, `RX` or `TX`.
        ring: &'static str,
        /// The size asked for.
        size: u32,
    },
    /// [`AfXdpConfig::queue_id`] is not below the XSKMAP's size.
    #[error("queue id must be below {XSKMAP_ENTRIES}, got {0}")]
    QueueId(u32),
    /// The interface name breaks the kernel's rule.
    #[error("interface names are {IFNAME_RULE}")]
    InterfaceName,
}

/// Whether to ask for zero-copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ZeroCopy {
    /// Bind in copy mode (`XDP_COPY`).
    Off,
    /// Try zero-copy; if the driver does not support it (`EOPNOTSUPP`),
    /// warn once and bind in copy mode.
    #[default]
    Try,
    /// Zero-copy or fail ([`AfXdpError::ZeroCopyUnsupported`]).
    Require,
}

/// How to attach the XDP program.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Attach {
    /// In the driver (`XDP_FLAGS_DRV_MODE`); fails if the driver has no
    /// native XDP.
    Native,
    /// In the generic receive path (`XDP_FLAGS_SKB_MODE`): works on any
    /// interface, slower.
    Generic,
    /// Native, and generic if native fails.
    #[default]
    Auto,
}

/// How the XDP program ended up attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachMode {
    /// Native (driver) XDP.
    Native,
    /// Generic (SKB) XDP.
    Generic,
}

impl AttachMode {
    pub(super) fn flags(self) -> u32 {
        match self {
            Self::Native => bpf::XDP_FLAGS_DRV_MODE,
            Self::Generic => bpf::XDP_FLAGS_SKB_MODE,
        }
    }
}

impl fmt::Display for AttachMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Native => "native",
            Self::Generic => "generic",
        })
    }
}

/// How the socket is bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindMode {
    /// The kernel copies frames between its buffers and the UMEM.
    Copy,
    /// The NIC DMAs straight into and out of the UMEM.
    ZeroCopy,
}

impl fmt::Display for BindMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Copy => "copy",
            Self::ZeroCopy => "zero-copy",
        })
    }
}

/// Configuration of one AF_XDP socket.
///
/// Ring sizes are entry counts and must be powers of two. The UMEM holds
/// `frames` frames of `frame_size` bytes: the first half receive, the rest
/// transmit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AfXdpConfig {
    /// The NIC queue to bind (also the XSKMAP key).
    pub queue_id: u32,
    /// UMEM frames (at least 2).
    pub frames: u32,
    /// Bytes per frame: 2048 or 4096. The largest frame received is
    /// `frame_size - 256` in copy mode.
    pub frame_size: u32,
    /// Fill ring entries.
    pub fill_size: u32,
    /// Completion ring entries.
    pub comp_size: u32,
    /// RX ring entries.
    pub rx_size: u32,
    /// TX ring entries.
    pub tx_size: u32,
    /// Zero-copy request.
    pub zero_copy: ZeroCopy,
    /// How [`AfXdp::open`](super::AfXdp::open) attaches the XDP program (ignored by
    /// [`AfXdp::open_with_program`](super::AfXdp::open_with_program)).
    pub attach: Attach,
    /// Bind with `XDP_USE_NEED_WAKEUP` and make wake-up syscalls only when
    /// the kernel asks.
    pub need_wakeup: bool,
}

impl Default for AfXdpConfig {
    /// Queue 0; 4096 frames of 2048 bytes (8 MiB), 2048-entry rings (the
    /// libxdp defaults: each direction's pool exactly fills its ring);
    /// zero-copy if available; native XDP if available; `need_wakeup`.
    fn default() -> Self {
        Self {
            queue_id: 0,
            frames: 4096,
            frame_size: 2048,
            fill_size: 2048,
            comp_size: 2048,
            rx_size: 2048,
            tx_size: 2048,
            zero_copy: ZeroCopy::Try,
            attach: Attach::Auto,
            need_wakeup: true,
        }
    }
}

impl AfXdpConfig {
    /// Checks the geometry; returns what is wrong.
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        if self.frame_size != 2048 && self.frame_size != 4096 {
            return Err(ConfigError::FrameSize(self.frame_size));
        }
        if self.frames < 2 {
            return Err(ConfigError::Frames(self.frames));
        }
        for (ring, size) in [
            ("fill", self.fill_size),
            ("completion", self.comp_size),
            ("RX", self.rx_size),
            ("TX", self.tx_size),
        ] {
            if !size.is_power_of_two() {
                return Err(ConfigError::RingSize { ring, size });
            }
        }
        if self.queue_id >= XSKMAP_ENTRIES {
            return Err(ConfigError::QueueId(self.queue_id));
        }
        Ok(())
    }

    pub(super) fn rx_frames(&self) -> u32 {
        self.frames / 2
    }
}

pub(super) fn check_config(ifname: &str, cfg: &AfXdpConfig) -> Result<(), AfXdpError> {
    cfg.check().map_err(|reason| AfXdpError::Config {
        ifname: ifname.to_owned(),
        reason,
    })
}
