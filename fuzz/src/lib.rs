// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Fuzz harnesses for `vhost-net-backend`, kept in a library so that the
//! libFuzzer targets (`fuzz_targets/`), the seed generator and the corpus
//! replay test (`tests/seeds.rs`) run the same code.
//!
//! - [`rings`]: a hostile guest on one queue pair (split or packed rings)
//!   against a reference model of the ring engine; every device operation
//!   is checked for exact agreement (guest memory byte for byte, counters,
//!   frames, return values).
//! - [`ring_differential`]: a fuzzed split ring, TX or RX, consumed by the
//!   engine and by `virtio-queue` from the same memory image; whatever the
//!   engine accepts, `virtio-queue` reads or writes the same, and both
//!   leave the same memory behind.
//! - [`net_hdr`]: `VirtioNetHdr` wire round trips.
//! - [`wire`]: the wire views, `L2Head`/`parse_headers` and the software
//!   offloads (checksum completion, segmentation, `lend_within`) on
//!   arbitrary frames and headers, against an independent reference.
//! - [`http`]: the control API's request reader and handlers on raw HTTP
//!   bytes, against an in-memory switch and the OpenAPI document.
//! - [`cni`]: the CNI plugin's configuration and environment parsing.
//! - [`cni_node`]: the CNI plugin's node configuration (host paths and
//!   per-namespace policy).
//! - [`switching`]: the switch's forwarding step (a PMD over loopback
//!   guests) against a reference model of learning, VLANs and flooding.
//! - [`vhost_user`]: the vhost-user request path of a port fed a fuzzed
//!   message stream (fds included) over a Unix socket.
#![deny(missing_docs)]

pub mod cni;
pub mod cni_node;
pub mod http;
pub mod input;
pub mod net_hdr;
pub mod ring_differential;
pub mod rings;
pub mod switching;
pub mod vhost_user;
pub mod wire;
