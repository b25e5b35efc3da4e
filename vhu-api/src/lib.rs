// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! # vhu-api
//!
//! The types of `vhu-switch`'s control API, shared by the switch, `vhuctl`,
//! `vhu-cni` and the tests, so that a port means the same thing in a
//! `POST /ports` body, in `GET /ports/{name}` and in the switch's
//! configuration file.
//!
//! | module | what it holds |
//! |---|---|
//! | [`mac`] | [`MacAddr`]: parsed from and printed as `aa:bb:cc:dd:ee:ff` |
//! | [`port`] | [`PortSpec`] (the port object), its kinds, roles, VLAN modes, and [`PortSpec::validate`] |
//! | [`view`] | what the switch answers: [`PortView`] (a port and its state), [`PortStats`], FDB entries, health |
//! | [`client`] | one request over a connected Unix stream, as `vhuctl`, `vhu-cni` and the tests send them |
//! | [`error`] | [`ApiError`], the `{"error": "..."}` body of every refused request |
//!
//! Validation happens here, not in the handlers: a spec that passes
//! [`PortSpec::validate`] names a port the switch can try to create (what
//! is left to check needs the host: does the interface exist, is the socket
//! free).
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod client;
pub mod error;
pub mod mac;
pub mod port;
pub mod view;

pub use error::ApiError;
pub use mac::MacAddr;
pub use port::{FieldError, PortKind, PortSpec, Role, Vlan, ZeroCopy};
pub use view::{
    FdbAdd, FdbEntryView, Flushed, Health, LogLevel, PortState, PortStats, PortView, QueueStats,
};
