// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! `vhu-dra`: a kubelet DRA plugin (Dynamic Resource Allocation,
//! `resource.k8s.io/v1`; kubelet's DRA gRPC API `v1` and `v1beta1`) that
//! gives a pod a port on the node's `vhu-switch` through a ResourceClaim:
//! a socket directory mounted by CDI at a path derived from the claim's
//! and request's names, and KEP-5304 device metadata naming the socket
//! (`vhost-user-path`, `mtu`: what KubeVirt's vhostuser binding plugin
//! reads). See `docs/dra.md`.
//!
//! | module | its one job |
//! |---|---|
//! | [`claim`] | the ResourceClaim fields read, and the names checked before they become paths |
//! | [`params`] | the opaque `PortConfig` parameters, held to the node's bounds |
//! | [`source`] | where a claim is read: a local API proxy, or a directory |
//! | [`apiserver`] | the API proxy's client: read a claim, apply the slice and a claim's status |
//! | [`layout`] | every path and name of a prepared claim, derived, never read back |
//! | [`documents`] | the CDI spec and the device metadata (pure) |
//! | [`driver`] | prepare and unprepare: port, directories, files, checkpoint |
//! | [`slice`](mod@slice) | the node's switch as a ResourceSlice (pure) |
//! | [`server`] | plugin registration and the DRA services over Unix sockets |
//!
//! The generated gRPC code: [`draapi`] (`v1`), [`drabeta`] (`v1beta1`),
//! [`registration`] (plugin registration `v1`), from the protos vendored in
//! `proto/` (`proto/SOURCES.md`).

#![forbid(unsafe_code)]

pub mod apiserver;
pub mod claim;
pub mod documents;
pub mod driver;
pub mod layout;
pub mod params;
pub mod server;
pub mod slice;
pub mod source;

/// Kubelet's DRA plugin API `v1` (generated).
#[allow(
    missing_docs,
    missing_debug_implementations,
    clippy::all,
    clippy::pedantic
)]
pub mod draapi {
    tonic::include_proto!("k8s.io.kubelet.pkg.apis.dra.v1");
}

/// Kubelet's DRA plugin API `v1beta1` (generated).
#[allow(
    missing_docs,
    missing_debug_implementations,
    clippy::all,
    clippy::pedantic
)]
pub mod drabeta {
    tonic::include_proto!("k8s.io.kubelet.pkg.apis.dra.v1beta1");
}

/// Kubelet's plugin registration API `v1` (generated; its package is
/// `pluginregistration`).
#[allow(
    missing_docs,
    missing_debug_implementations,
    clippy::all,
    clippy::pedantic
)]
pub mod registration {
    tonic::include_proto!("pluginregistration");
}

pub use vhu_device_plugin::connect_unix;
