// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The gRPC side: kubelet's plugin registration (`Registration` on
//! `<registry-dir>/<driver>-reg.sock`) and the DRA service, `v1` and
//! `v1beta1` (`DRAPlugin` on `<plugin-dir>/dra.sock`), over Unix sockets.
//!
//! Kubelet's plugin watcher finds the registration socket, calls `GetInfo`
//! (type `DRAPlugin`, the driver's name, the DRA socket, the service
//! versions `v1.DRAPlugin` and `v1beta1.DRAPlugin`), connects to the DRA
//! socket and says so with `NotifyRegistrationStatus`. A kubelet restart
//! needs nothing from the plugin: the new kubelet finds the socket again.
//!
//! Both DRA versions share one implementation ([`Service`]); each claim is
//! prepared on a blocking thread, one claim at a time
//! ([`crate::driver::Driver`]).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status};

use crate::driver::{DeviceResult, Driver};
use crate::{draapi, drabeta, registration};

/// The plugin type kubelet's plugin watcher routes to its DRA manager.
pub const PLUGIN_TYPE: &str = "DRAPlugin";
/// The service versions served (kubelet's `DRAPluginService` constants).
pub const SERVICE_VERSIONS: [&str; 2] = ["v1.DRAPlugin", "v1beta1.DRAPlugin"];

/// Where the plugin listens.
#[derive(Debug, Clone)]
pub struct Sockets {
    /// The registration socket (in kubelet's `plugins_registry`).
    pub registration: PathBuf,
    /// The DRA service's socket (in kubelet's `plugins/<driver>`).
    pub dra: PathBuf,
}

/// The registration service.
#[derive(Debug, Clone)]
pub struct Registrar {
    driver: String,
    endpoint: String,
}

impl Registrar {
    /// Tells kubelet `driver` serves DRA on `endpoint`.
    pub fn new(driver: &str, endpoint: &str) -> Self {
        Self {
            driver: driver.to_owned(),
            endpoint: endpoint.to_owned(),
        }
    }
}

#[tonic::async_trait]
impl registration::registration_server::Registration for Registrar {
    async fn get_info(
        &self,
        _: Request<registration::InfoRequest>,
    ) -> Result<Response<registration::PluginInfo>, Status> {
        Ok(Response::new(registration::PluginInfo {
            r#type: PLUGIN_TYPE.into(),
            name: self.driver.clone(),
            endpoint: self.endpoint.clone(),
            supported_versions: SERVICE_VERSIONS.iter().map(|s| (*s).to_owned()).collect(),
        }))
    }

    async fn notify_registration_status(
        &self,
        req: Request<registration::RegistrationStatus>,
    ) -> Result<Response<registration::RegistrationStatusResponse>, Status> {
        let r = req.into_inner();
        if r.plugin_registered {
            tracing::info!(driver = %self.driver, "kubelet registered the plugin");
        } else {
            tracing::error!(driver = %self.driver, error = %r.error, "kubelet refused the plugin");
        }
        Ok(Response::new(registration::RegistrationStatusResponse {}))
    }
}

/// One claim as kubelet names it.
struct ClaimRef {
    namespace: String,
    name: String,
    uid: String,
}

/// The DRA service, both versions.
#[derive(Debug, Clone)]
pub struct Service {
    driver: Arc<Driver>,
}

impl Service {
    /// Serves `driver`.
    pub fn new(driver: Arc<Driver>) -> Self {
        Self { driver }
    }

    async fn prepare(
        &self,
        claims: Vec<ClaimRef>,
    ) -> HashMap<String, Result<Vec<DeviceResult>, String>> {
        let mut out = HashMap::new();
        for c in claims {
            let d = self.driver.clone();
            let (ns, name, uid) = (c.namespace, c.name, c.uid.clone());
            let r = tokio::task::spawn_blocking(move || d.prepare(&ns, &name, &uid))
                .await
                .unwrap_or_else(|e| Err(format!("the prepare task failed: {e}")));
            if let Err(e) = &r {
                tracing::error!(uid = %c.uid, "prepare failed: {e}");
            }
            out.insert(c.uid, r);
        }
        out
    }

    async fn unprepare(&self, claims: Vec<ClaimRef>) -> HashMap<String, String> {
        let mut out = HashMap::new();
        for c in claims {
            let d = self.driver.clone();
            let (ns, name, uid) = (c.namespace.clone(), c.name.clone(), c.uid.clone());
            let r = tokio::task::spawn_blocking(move || d.unprepare(&ns, &name, &uid))
                .await
                .unwrap_or_else(|e| Err(format!("the unprepare task failed: {e}")));
            let e = match r {
                Ok(()) => {
                    tracing::info!(claim = %format!("{}/{}", c.namespace, c.name), uid = %c.uid, "unprepared");
                    String::new()
                }
                Err(e) => {
                    tracing::error!(uid = %c.uid, "unprepare failed: {e}");
                    e
                }
            };
            out.insert(c.uid, e);
        }
        out
    }
}

/// Implements one version's service on [`Service`]; the two versions'
/// messages are the same but for `Device.share_id`, which `v1beta1` lacks.
macro_rules! dra_version {
    ($m:ident, $dev:ident) => {
        #[tonic::async_trait]
        impl $m::dra_plugin_server::DraPlugin for Service {
            async fn node_prepare_resources(
                &self,
                req: Request<$m::NodePrepareResourcesRequest>,
            ) -> Result<Response<$m::NodePrepareResourcesResponse>, Status> {
                let claims = req
                    .into_inner()
                    .claims
                    .into_iter()
                    .map(|c| ClaimRef {
                        namespace: c.namespace,
                        name: c.name,
                        uid: c.uid,
                    })
                    .collect();
                let claims = self
                    .prepare(claims)
                    .await
                    .into_iter()
                    .map(|(uid, r)| {
                        let resp = match r {
                            Ok(devs) => $m::NodePrepareResourceResponse {
                                devices: devs.into_iter().map($dev).collect(),
                                error: String::new(),
                            },
                            Err(e) => $m::NodePrepareResourceResponse {
                                devices: Vec::new(),
                                error: e,
                            },
                        };
                        (uid, resp)
                    })
                    .collect();
                Ok(Response::new($m::NodePrepareResourcesResponse { claims }))
            }

            async fn node_unprepare_resources(
                &self,
                req: Request<$m::NodeUnprepareResourcesRequest>,
            ) -> Result<Response<$m::NodeUnprepareResourcesResponse>, Status> {
                let claims = req
                    .into_inner()
                    .claims
                    .into_iter()
                    .map(|c| ClaimRef {
                        namespace: c.namespace,
                        name: c.name,
                        uid: c.uid,
                    })
                    .collect();
                let claims = self
                    .unprepare(claims)
                    .await
                    .into_iter()
                    .map(|(uid, error)| (uid, $m::NodeUnprepareResourceResponse { error }))
                    .collect();
                Ok(Response::new($m::NodeUnprepareResourcesResponse { claims }))
            }
        }
    };
}

fn v1_device(d: DeviceResult) -> draapi::Device {
    draapi::Device {
        request_names: vec![d.request],
        pool_name: d.pool,
        device_name: d.device,
        cdi_device_ids: vec![d.cdi_id],
        share_id: d.share_id,
    }
}

fn v1beta1_device(d: DeviceResult) -> drabeta::Device {
    drabeta::Device {
        request_names: vec![d.request],
        pool_name: d.pool,
        device_name: d.device,
        cdi_device_ids: vec![d.cdi_id],
    }
}

dra_version!(draapi, v1_device);
dra_version!(drabeta, v1beta1_device);

/// Binds `path` afresh (a stale socket of an earlier run is removed).
fn listen(path: &std::path::Path) -> Result<tokio::net::UnixListener, String> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    let _ = std::fs::remove_file(path);
    tokio::net::UnixListener::bind(path)
        .map_err(|e| format!("cannot listen on {}: {e}", path.display()))
}

/// Serves registration and DRA until `stop` resolves; then removes both
/// sockets.
///
/// # Errors
/// A socket cannot be bound.
pub async fn serve(
    driver: Arc<Driver>,
    sockets: &Sockets,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), String> {
    let name = driver.config().layout.driver.clone();
    let dra = listen(&sockets.dra)?;
    let reg = listen(&sockets.registration)?;
    let svc = Service::new(driver);
    let (tx, rx) = tokio::sync::watch::channel(false);
    let stop_dra = {
        let mut rx = rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    let stop_reg = {
        let mut rx = rx;
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    let dra_server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(draapi::dra_plugin_server::DraPluginServer::new(svc.clone()))
            .add_service(drabeta::dra_plugin_server::DraPluginServer::new(svc))
            .serve_with_incoming_shutdown(UnixListenerStream::new(dra), stop_dra),
    );
    tracing::info!(socket = %sockets.dra.display(), "serving DRA v1 and v1beta1");
    let reg_server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(registration::registration_server::RegistrationServer::new(
                Registrar::new(&name, &sockets.dra.display().to_string()),
            ))
            .serve_with_incoming_shutdown(UnixListenerStream::new(reg), stop_reg),
    );
    tracing::info!(socket = %sockets.registration.display(), driver = %name, "serving plugin registration");
    stop.await;
    let _ = tx.send(true);
    let _ = tokio::time::timeout(std::time::Duration::from_secs(3), dra_server).await;
    let _ = tokio::time::timeout(std::time::Duration::from_secs(3), reg_server).await;
    let _ = std::fs::remove_file(&sockets.registration);
    let _ = std::fs::remove_file(&sockets.dra);
    tracing::info!("stopped");
    Ok(())
}
