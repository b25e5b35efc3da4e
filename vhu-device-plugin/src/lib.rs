// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! `vhu-device-plugin`: a kubelet device plugin (API v1beta1) that
//! advertises vhost-user socket slots (`vhu.dev/vhost-user`, N per node) and
//! hands each allocation a host socket directory, mounted into the
//! container, with the Network Plumbing WG device-info file of each device,
//! so that Multus gives `vhu-cni` a `deviceID` and `vhu-cni` puts the port's
//! socket in that directory. See `docs/device-plugin.md`.
//!
//! * [`api`]: the generated v1beta1 messages, clients and servers;
//! * [`connect_unix`]: a gRPC channel over a Unix socket (kubelet's or a
//!   plugin's);
//! * [`plugin`]: the `DevicePlugin` service and the register / re-register
//!   loop the binary runs;
//! * [`slotfs`]: file operations in the slots' directories, which pods
//!   write: by directory descriptor, never following a link.

#![forbid(unsafe_code)]

pub mod plugin;
pub mod slotfs;

use std::path::{Path, PathBuf};

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};

/// The kubelet device plugin API v1beta1 (generated from `proto/api.proto`).
#[allow(
    missing_docs,
    missing_debug_implementations,
    clippy::all,
    clippy::pedantic
)]
pub mod api {
    tonic::include_proto!("v1beta1");
}

/// The API version a plugin registers with.
pub const API_VERSION: &str = "v1beta1";
/// `Device.health` of a usable device (kubelet's `constants.go`).
pub const HEALTHY: &str = "Healthy";
/// `Device.health` of an unusable one.
pub const UNHEALTHY: &str = "Unhealthy";
/// Kubelet's registration socket in its device-plugin directory.
pub const KUBELET_SOCKET: &str = "kubelet.sock";

/// A gRPC channel to the server on the Unix socket `path` (plaintext
/// HTTP/2, as kubelet and device plugins speak). Connects lazily: the first
/// call fails when nothing listens there.
pub fn connect_unix(path: &Path) -> Channel {
    let path: PathBuf = path.to_owned();
    // The URI is not used to connect; the connector dials the socket.
    Endpoint::from_static("http://localhost").connect_with_connector_lazy(tower::service_fn(
        move |_: Uri| {
            let path = path.clone();
            async move {
                tokio::net::UnixStream::connect(path)
                    .await
                    .map(TokioIo::new)
            }
        },
    ))
}

/// The device-plugin device-info file name of `device` of `resource`
/// (device-info spec 1.1.0, section 4.1): `<resource, "/" as "->-<device>-device.json`.
pub fn devinfo_file_name(resource: &str, device: &str) -> String {
    format!("{}-{device}-device.json", resource.replace('/', "-"))
}

/// The ids of `slots` devices: `vhu0`, `vhu1`, ... (stable across restarts).
pub fn device_ids(slots: u32) -> Vec<String> {
    (0..slots).map(|i| format!("vhu{i}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(
            devinfo_file_name("vhu.dev/vhost-user", "vhu3"),
            "vhu.dev-vhost-user-vhu3-device.json"
        );
        assert_eq!(device_ids(3), ["vhu0", "vhu1", "vhu2"]);
    }
}
