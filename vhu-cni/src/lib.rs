// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! # vhu-cni
//!
//! A CNI plugin (spec 1.1.0; configurations of 0.4.0, 1.0.0 and 1.1.0)
//! that gives a pod a port on `vhu-switch`: a vhost-user socket placed for
//! the pod (`kind: "vhost-user"`), or a TAP moved into the pod's network
//! namespace (`kind: "tap"`); or, for a Kata runtime-rs pod (`"kata":
//! "dan"`), a vhost-user socket or a host TAP (`kind: "host-tap"`) written
//! into the sandbox's DAN file. It talks to the switch over its control API
//! with `vhu-api`'s types and client. See `docs/cni.md`.
//!
//! | module | what it holds |
//! |---|---|
//! | [`cmd`] | ADD, DEL, CHECK, STATUS, GC, VERSION |
//! | [`config`] | the network configuration (a tenant's input) and its checks |
//! | [`node`] | the node configuration: host paths and per-namespace policy (the administrator's) |
//! | [`dan`] | Kata runtime-rs's DAN file: its schema, this plugin's entries, the sandbox's lock |
//! | [`admission`] | what a network may ask for under its namespace's policy |
//! | [`beneath`] | file operations in directories a tenant may write, never through a link |
//! | [`mod@env`] | the `CNI_*` environment variables |
//! | [`attach`] | an attachment's names and paths, and its record |
//! | [`ipam`] | the delegated IPAM plugin |
//! | [`link`] | moving and configuring a TAP in the pod |
//! | [`result`] | the result for each version |
//! | [`error`] | the error result and its codes |
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod admission;
pub mod attach;
pub mod beneath;
pub mod cmd;
pub mod config;
pub mod dan;
pub mod env;
pub mod error;
pub mod ipam;
pub mod link;
pub mod node;
pub mod result;
