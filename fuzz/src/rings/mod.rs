// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The `rings` target: a hostile guest on one queue pair of a
//! [`LoopbackGuest`] (split or packed rings in anonymous memory), checked
//! against a reference model of the ring engine.
//!
//! # Input
//!
//! Three configuration bytes (ring format and features, ring size, buffer
//! length), then a sequence of operations ([`op`]), each an opcode and its
//! arguments. Driver operations write descriptors, indirect tables (placed
//! in buffer memory), avail entries and indices, packed flags and event
//! areas, with addresses and lengths drawn from classes meant to hit the
//! interesting cases: buffers of either ring, the rings themselves, the end
//! of guest memory, outside guest memory, zero, one past a buffer, 4 GiB,
//! unaligned tables, self-referencing and nested indirect tables, loops,
//! heads and `next` indices >= size, stale and far-ahead avail indices,
//! unavailable or prematurely-used packed flags. Device operations run the
//! burst API: `TxQueue::recv_burst`, `RxBurst::push` of frames of chosen
//! sizes and headers, echo (each TX frame pushed into RX from inside the TX
//! callback: guest-to-guest copies that may alias), notification
//! enable/disable, and the `pending`/`available` queries.
//!
//! # Oracle
//!
//! Before each device operation the harness snapshots all guest memory and
//! runs the model ([`Dev`]) on the snapshot; then it runs the engine and
//! requires exact agreement:
//!
//! - guest memory afterwards, byte for byte (used entries, used lengths,
//!   event-suppression fields, and every byte the device wrote into RX
//!   buffers; so nothing is written outside RX buffers the guest described
//!   as device-writable, and TX buffers are never written through a TX
//!   chain);
//! - the queue counters (packets, bytes, drops by reason);
//! - every TX frame handed to the callback (header, length, private head,
//!   bytes through `copy_to` at offset 0 and at a chosen offset);
//! - return values (`recv_burst`, `push`, `enable_notifications`,
//!   `pending`, `available`).
//!
//! And, by construction of the model: every chain the device consumed is
//! returned in the used ring (length 0 on TX and for refused buffers) or,
//! when it has no valid id, counted as a drop; RX used lengths never exceed
//! the buffer's length; any panic in the library is a finding.
//!
//! The model follows the engine's documented rules (`ring/split.rs`,
//! `ring/packed.rs`, `queue/`); where those are policy (which error is
//! reported), it encodes the policy, and a disagreement is either a bug in
//! the engine or a rule change that must be reflected here. The engine's
//! limits and the descriptor flags are imported from
//! `vhost_net_backend::test_utils`, not copied.
//!
//! | file | its job |
//! |---|---|
//! | `mod.rs` | the input format ([`cfg`], [`op`]) and the entry points |
//! | `model.rs` | the reference model: guest memory as it sees it, the chain walks, the device side |
//! | `harness.rs` | the hostile driver: operations into ring writes and device calls, each checked against the model |
//! | `seeds.rs` | the seed inputs ([`seeds`]) |

use vhost_net_backend::device::{bits, MAX_FRAME_LEN};
use vhost_net_backend::net_hdr::{self, MAX_HDR_LEN};
use vhost_net_backend::test_utils::flags::{
    DESC_F_AVAIL as AVAIL, DESC_F_INDIRECT as INDIRECT, DESC_F_NEXT as NEXT, DESC_F_USED as USED,
    DESC_F_WRITE as WRITE,
};
// The engine's limits, imported rather than copied: where they are policy
// (how long a chain, how much one burst walks), the model follows them.
//
// Segments the engine's per-queue segment list holds: one TX chain
// (`MAX_CHAIN_SEGS`), or all the chains of one RX frame
// (`MAX_RX_FRAME_SEGS`). Buffer descriptors one chain may take
// (`MAX_CHAIN_DESCS`; a walk reads one indirect descriptor more,
// `MAX_CHAIN_READS`), and one burst's walks (`BURST_DESC_BUDGET`): a walk
// starts only while `MAX_CHAIN_READS` of the budget are left; one direct
// descriptor taken inline is not charged. Chains one TX batch takes at most
// (`TX_BATCH`), and the segments its list holds (`TX_BATCH_SEGS`: a chain
// is taken only while a whole chain's worth of room is left).
use vhost_net_backend::test_utils::limits::{
    BURST_DESC_BUDGET, HEAD_LEN, MAX_CHAIN_DESCS, MAX_CHAIN_READS, MAX_CHAIN_SEGS as TX_SEG_CAP,
    MAX_RX_CHAINS, MAX_RX_FRAME_SEGS as RX_SEG_CAP, TX_BATCH, TX_BATCH_SEGS,
};
use vhost_net_backend::test_utils::{Layout, LoopbackGuest, LoopbackOpts};
use vhost_net_backend::{DropReason, QueueCounters, TxFrame, VirtioNetHdr};

use crate::input::{Enc, Input};

/// Most operations decoded from one input.
const MAX_OPS: usize = 48;

/// Configuration byte 0.
pub mod cfg {
    /// Packed rings.
    pub const PACKED: u8 = 1;
    /// `VIRTIO_RING_F_EVENT_IDX`.
    pub const EVENT_IDX: u8 = 2;
    /// `VIRTIO_RING_F_INDIRECT_DESC`.
    pub const INDIRECT: u8 = 4;
    /// `VIRTIO_NET_F_MRG_RXBUF`.
    pub const MRG: u8 = 8;
    /// The guest receive offloads (checksum, TSO, UFO, ECN).
    pub const OFFLOADS: u8 = 16;
    /// `VIRTIO_F_IN_ORDER` (packed TX buffers returned by runs).
    pub const IN_ORDER: u8 = 32;
}

/// Opcodes (the operation byte modulo [`op::COUNT`]).
pub mod op {
    /// A well-formed chain of 1-4 descriptors (or an indirect table) on TX.
    pub const POST_TX: u8 = 0;
    /// A well-formed chain of writable descriptors on RX.
    pub const POST_RX: u8 = 1;
    /// One raw descriptor with chosen address, length, flags, next/id.
    pub const RAW_DESC: u8 = 2;
    /// An indirect table in buffer memory and a descriptor pointing at it.
    pub const INDIRECT: u8 = 3;
    /// Avail ring / index (split) or flags and wrap (packed) manipulation.
    pub const AVAIL: u8 = 4;
    /// `TxQueue::recv_burst`.
    pub const TX_BURST: u8 = 5;
    /// `RxBurst::push` of up to 8 frames.
    pub const RX_BURST: u8 = 6;
    /// `recv_burst` pushing each frame into RX from the callback.
    pub const ECHO: u8 = 7;
    /// `enable_notifications` / `disable_notifications`.
    pub const NOTIFY: u8 = 8;
    /// Raw bytes over a ring area (including device-owned ones).
    pub const RAW_BYTES: u8 = 9;
    /// `TxQueue::pending` / `RxQueue::available`.
    pub const QUERY: u8 = 10;
    /// Number of opcodes.
    pub const COUNT: u8 = 11;
}

/// Decodes and runs one input; panics on any disagreement.
pub fn run(data: &[u8]) {
    run_inner(data);
}

/// Runs one input and describes the outcome (ring format and size, the
/// final RX and TX counters), for checking what seeds exercise.
pub fn summary(data: &[u8]) -> String {
    let h = run_inner(data);
    format!(
        "packed={} size={} buf_len={} features={:#x}\n  rx {:?}\n  tx {:?}",
        h.c.packed,
        h.c.size,
        h.c.buf_len,
        h.c.features,
        h.g.qp.rx.counters(),
        h.g.qp.tx.counters()
    )
}

/// Runs one input and returns the final RX and TX counters of its queue
/// pair (what a seed's checks assert on).
pub fn counters(data: &[u8]) -> (QueueCounters, QueueCounters) {
    let h = run_inner(data);
    (h.g.qp.rx.counters(), h.g.qp.tx.counters())
}

fn run_inner(data: &[u8]) -> Harness {
    let mut inp = Input::new(data);
    let mut h = Harness::new(&mut inp);
    let mut ops = 0;
    while !inp.is_empty() && ops < MAX_OPS {
        h.step(&mut inp);
        ops += 1;
    }
    h
}

const OP_NAMES: [&str; op::COUNT as usize] = [
    "post_tx",
    "post_rx",
    "raw_desc",
    "indirect",
    "avail",
    "tx_burst",
    "rx_burst",
    "echo",
    "notify",
    "raw_bytes",
    "query",
];

/// Whether to print each operation (`VHU_FUZZ_TRACE=1`, for triage).
fn trace() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("VHU_FUZZ_TRACE").is_some())
}

mod harness;
mod model;
mod seeds;

use harness::Harness;
pub use seeds::seeds;
