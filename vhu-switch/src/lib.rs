// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! # vhu-switch
//!
//! The reference L2 switch on `vhost-net-backend`: VM and pod ports
//! (vhost-user), NICs (AF_XDP, AF_PACKET) and TAPs, MAC learning per VLAN,
//! flooding within the VLAN, one copy per destination.
//!
//! The forwarding core is pure code, kept apart from I/O so that it can be
//! tested, benchmarked and fuzzed on its own:
//!
//! | module | question it answers |
//! |---|---|
//! | [`vlan`] | which VLAN does a frame arriving on this port belong to, and how does it leave another port (tag kept, pushed, popped) |
//! | [`fdb`] | on which port is `(vlan, mac)`: learning, moves, aging, limits, static entries |
//! | [`decide`] | given the ingress port, the frame's head and its burst's learn buffer: forward to one port, flood the VLAN, or drop (and why); the one decision, which the PMD calls per frame and the criterion bench and the `switching` fuzz target run |
//! | [`config`] | embedded defaults, the TOML file and flags -> a validated configuration, every error at once with its place |
//! | [`metrics`] | the Prometheus text exposition of a snapshot of the counters |
//! | [`persist`] | the ports created through the API, written durably and read back at start |
//! | [`capture`] | a port's capture point (free when off) and the pcapng stream it feeds |
//! | [`api`] | the control API on a Unix socket: HTTP/1.1, routes, handlers |
//!
//! Around it, the daemon:
//!
//! | module | question it answers |
//! |---|---|
//! | [`endpoint`] | a validated port object -> a vhost-user port or an uplink (what the host refuses is a 409/422) |
//! | [`link`] | is an uplink's interface still the one its queues are open on: down when it goes, reopened when it comes back |
//! | [`pmd`] | a PMD thread: source burst -> [`decide::decide`] per frame (or the burst's kept decision for the flow) -> one copy per destination -> flush -> learn the burst's new sources |
//! | [`switch`] | the port table, the FDB, persistence: what the API's handlers call |
//! | [`control`] | what the API's handlers ask of the switch, and why the switch refuses (the API maps it to HTTP) |
//! | [`privilege`] | which capabilities each port kind needs, which the switch keeps, the refusal of a port it cannot serve |
//!
//! `decide` never touches guest memory or a destination; destinations never
//! see the FDB; the PMD loop is the only place that knows both.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod api;
pub mod capture;
pub mod config;
pub mod control;
pub mod decide;
pub mod endpoint;
pub mod fdb;
#[cfg(test)]
mod fixtures;
pub mod link;
pub mod metrics;
pub mod persist;
pub mod pmd;
pub mod privilege;
pub mod seccomp;
pub mod switch;
pub mod vlan;

/// A port's index in the switch's port table (dense, reused after a port is
/// removed and its FDB entries are gone).
pub type PortId = u32;
