// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! How a driver is configured: memory, features, queues, and how buffers are laid out.

use super::*;

/// How the guest memory table is sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MemTableMode {
    /// One `SET_MEM_TABLE` with every region (what the brief of this driver and DPDK's
    /// virtio-user use).
    #[default]
    SetMemTable,
    /// `GET_MAX_MEM_SLOTS` then one `ADD_MEM_REG` per region, which is what QEMU does once
    /// `CONFIGURE_MEM_SLOTS` is negotiated. Falls back to `SET_MEM_TABLE` when it is not.
    AddMemReg,
}

/// What the driver asks for when it connects.
///
/// Build it with struct-update syntax over [`DriverOpts::default`]:
///
/// ```
/// # use vhost_net_backend::test_utils::DriverOpts;
/// let opts = DriverOpts { queue_pairs: 2, active_pairs: 2, ..DriverOpts::default() };
/// ```
#[derive(Clone, Debug)]
pub struct DriverOpts {
    /// Queue pairs to set up: vrings `0 .. 2 * queue_pairs` (rx = `2 * i`, tx = `2 * i + 1`).
    /// More than one needs `MQ` negotiated.
    pub queue_pairs: u16,
    /// How many pairs (from pair 0) get `SET_VRING_ENABLE 1`; the others get
    /// `SET_VRING_ENABLE 0`. Only sent when `VHOST_USER_F_PROTOCOL_FEATURES` is acked.
    pub active_pairs: u16,
    /// Size of every vring; a power of two, at most 32768.
    pub queue_size: u16,
    /// Virtio feature bits the driver wants. Acked: `features & offered & !UNSUPPORTED_FEATURES`,
    /// plus `VHOST_USER_F_PROTOCOL_FEATURES` whenever it is offered.
    pub features: u64,
    /// Protocol features the driver wants; acked: `protocol_features & offered`.
    pub protocol_features: VhostUserProtocolFeatures,
    /// Guest memory size in bytes, a multiple of 8 KiB. Rings take a few pages at the start of
    /// the first region; the rest is buffer space.
    pub mem_size: u64,
    /// Guest-physical address of the first region. Nonzero by default, so that GPA/HVA mixups
    /// in a backend fail.
    pub gpa_base: u64,
    /// Split guest memory into two equal regions (two mappings of the memfd, 1 GiB apart in
    /// GPA space), to exercise the backend's region lookup. Buffers are taken from both
    /// regions in turn; no buffer straddles them.
    pub split_regions: bool,
    /// How the memory table is sent.
    pub mem_table: MemTableMode,
    /// Set `NEED_REPLY` on every request once `REPLY_ACK` is negotiated.
    pub need_reply: bool,
    /// Kick on every `kick_*` call, ignoring `avail_event` and `VRING_USED_F_NO_NOTIFY`.
    pub always_kick: bool,
    /// Read timeout on the vhost-user socket, so a backend that never replies fails the test
    /// instead of hanging it. `None` blocks forever.
    pub reply_timeout: Option<Duration>,
    /// Called during the bring-up once the connection is made (`"CONNECT"`) and after each
    /// step of it (a request answered, or sent when it has no reply; `SET_VRING_ENABLE` once
    /// per queue pair), with the step's name. Fault tests run the driver in a process of its
    /// own and stop it there, to kill it at a chosen point of its negotiation.
    pub after_request: Option<fn(&'static str)>,
}

impl Default for DriverOpts {
    fn default() -> Self {
        DriverOpts {
            queue_pairs: 1,
            active_pairs: 1,
            queue_size: 256,
            features: DEFAULT_FEATURES,
            protocol_features: VhostUserProtocolFeatures::MQ
                | VhostUserProtocolFeatures::REPLY_ACK
                | VhostUserProtocolFeatures::CONFIGURE_MEM_SLOTS,
            mem_size: 32 << 20,
            gpa_base: 0x1_0000_0000,
            split_regions: false,
            mem_table: MemTableMode::SetMemTable,
            need_reply: true,
            always_kick: false,
            reply_timeout: Some(Duration::from_secs(10)),
            after_request: None,
        }
    }
}

impl DriverOpts {
    pub(super) fn validate(&self) -> Result<(), DriverError> {
        let bad = |s: &str| Err(DriverError::InvalidOpts(s.to_string()));
        if self.queue_pairs == 0 {
            return bad("queue_pairs must be at least 1");
        }
        if self.active_pairs > self.queue_pairs {
            return bad("active_pairs must not exceed queue_pairs");
        }
        if self.queue_size == 0 || !self.queue_size.is_power_of_two() || self.queue_size > 32768 {
            return bad("queue_size must be a power of two in 1..=32768");
        }
        if self.mem_size == 0 || !self.mem_size.is_multiple_of(2 * PAGE) {
            return bad("mem_size must be a nonzero multiple of 8 KiB");
        }
        if !self.gpa_base.is_multiple_of(PAGE) {
            return bad("gpa_base must be page aligned");
        }
        Ok(())
    }
}

// ===== layouts and frames =====

/// How one receive buffer is described.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RxLayout {
    /// One device-writable descriptor of `buf_len` bytes.
    Single,
    /// A chain of `n` device-writable descriptors whose lengths add up to `buf_len`.
    Split(u16),
    /// One `VRING_DESC_F_INDIRECT` descriptor pointing at a table of `n` device-writable
    /// descriptors whose lengths add up to `buf_len`. Needs `INDIRECT_DESC`.
    Indirect(u16),
}

/// How one transmitted frame is described.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxLayout {
    /// Header and frame in one descriptor.
    Single,
    /// The header in one descriptor, the frame in a second one (the legacy layout).
    HeaderSplit,
    /// Header and frame concatenated, then cut into `n` descriptors of (almost) equal length;
    /// the cuts fall wherever they fall, header included.
    Segments(u16),
    /// Like [`TxLayout::Segments`], but in an indirect table behind one descriptor. Needs
    /// `INDIRECT_DESC`.
    Indirect(u16),
}
