// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! `vhu-kubevirt`: a KubeVirt network binding plugin that gives a
//! VirtualMachineInstance a vhost-user NIC on `vhu-switch`.
//!
//! The binary `vhu-kubevirt-binding` is the binding's hook sidecar: it
//! serves KubeVirt's hook gRPC API on a Unix socket ([`server`]), and on
//! `OnDefineDomain` rewrites the libvirt domain ([`domain`]) so that QEMU
//! opens the vhost-user socket `vhu-cni` placed in the pod ([`netinfo`]),
//! with shared guest memory; for a `resourceClaim` network (DRA), the
//! socket the DRA driver's device metadata names ([`dra`]). The domain XML
//! is edited as a lossless tree
//! ([`xml`]); the VMI fields it needs are in [`vmi`]. [`client`] dials a
//! sidecar as virt-launcher does. See `docs/kubevirt.md`.
#![forbid(unsafe_code)]

pub mod client;
pub mod domain;
pub mod dra;
pub mod netinfo;
pub mod server;
pub mod vmi;
pub mod xml;

/// The hook API's generated types and services (`kubevirt.hooks.info`,
/// `kubevirt.hooks.v1alpha3`), from the `.proto` files in `proto/`.
#[allow(missing_docs, missing_debug_implementations, clippy::all)]
pub mod proto {
    /// `kubevirt.hooks.info`.
    pub mod info {
        tonic::include_proto!("kubevirt.hooks.info");
    }
    /// `kubevirt.hooks.v1alpha3`.
    pub mod v1alpha3 {
        tonic::include_proto!("kubevirt.hooks.v1alpha3");
    }
}
