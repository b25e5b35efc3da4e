// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The hook sidecar: KubeVirt's `Info` and `v1alpha3.Callbacks` services on
//! a Unix socket (plaintext HTTP/2, as virt-launcher dials it).
//!
//! It advertises version `v1alpha3` with the `OnDefineDomain` and
//! `Shutdown` hook points (priority 0). `OnDefineDomain` runs
//! [`domain::mutate`](crate::domain::mutate); `PreCloudInitIso` returns its
//! input; `Shutdown` (virt-launcher calls it as the VM stops) and SIGTERM or
//! SIGINT stop the server, which then removes its socket. Stopping is
//! graceful for at most [`GRACE`]: a client that keeps its connection open
//! without answering the server's GOAWAY (or its PING) does not hold the
//! sidecar up.

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::net::UnixListener;
use tokio::sync::Notify;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status};

use crate::netinfo::Resolver;
use crate::proto::info::info_server::{Info, InfoServer};
use crate::proto::info::{HookPoint, InfoParams, InfoResult};
use crate::proto::v1alpha3::callbacks_server::{Callbacks, CallbacksServer};
use crate::proto::v1alpha3::{
    OnDefineDomainParams, OnDefineDomainResult, PreCloudInitIsoParams, PreCloudInitIsoResult,
    ShutdownParams, ShutdownResult,
};

/// The hook's name in `Info`.
pub const HOOK_NAME: &str = "vhu-kubevirt-binding";

/// The Callbacks version served.
pub const VERSION: &str = "v1alpha3";

/// How long a stopping server waits for open connections to finish.
pub const GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// Where virt-launcher looks for hook sockets (the sidecar's mount of the
/// shared `hook-sidecar-sockets` emptyDir).
pub const DEFAULT_SOCKET: &str = "/var/run/kubevirt-hooks/vhu.sock";

/// What the sidecar serves.
#[derive(Debug, Clone)]
pub struct Config {
    /// The Unix socket to listen on.
    pub socket: PathBuf,
    /// The binding's name (`NETWORK_BINDING_PLUGIN_NAME`): interfaces with
    /// this `binding.name` are handled.
    pub binding: String,
    /// How sockets are found.
    pub resolver: Resolver,
}

#[derive(Debug)]
struct Hooks {
    binding: String,
    resolver: Resolver,
    stop: Arc<Notify>,
}

#[tonic::async_trait]
impl Info for Arc<Hooks> {
    async fn info(&self, _: Request<InfoParams>) -> Result<Response<InfoResult>, Status> {
        Ok(Response::new(InfoResult {
            name: HOOK_NAME.to_owned(),
            hook_points: ["OnDefineDomain", "Shutdown"]
                .into_iter()
                .map(|n| HookPoint {
                    name: n.to_owned(),
                    priority: 0,
                })
                .collect(),
            versions: vec![VERSION.to_owned()],
        }))
    }
}

#[tonic::async_trait]
impl Callbacks for Arc<Hooks> {
    async fn on_define_domain(
        &self,
        req: Request<OnDefineDomainParams>,
    ) -> Result<Response<OnDefineDomainResult>, Status> {
        let p = req.into_inner();
        let hooks = Arc::clone(self);
        // Waiting for network-info blocks: off the runtime's thread.
        let out = tokio::task::spawn_blocking(move || {
            crate::domain::mutate(&p.domain_xml, &p.vmi, &hooks.binding, |nets, claims| {
                let mut sockets = if nets.is_empty() {
                    crate::domain::Sockets::new()
                } else {
                    hooks.resolver.resolve(nets)?
                };
                sockets.extend(crate::dra::resolve(&hooks.resolver, claims)?);
                Ok(sockets)
            })
        })
        .await
        .map_err(|e| Status::internal(format!("the domain mutation failed: {e}")))?;
        match out {
            Ok(xml) => {
                eprintln!(
                    "vhu-kubevirt-binding: OnDefineDomain: domain defined ({} bytes)",
                    xml.len()
                );
                Ok(Response::new(OnDefineDomainResult { domain_xml: xml }))
            }
            Err(msg) => {
                eprintln!("vhu-kubevirt-binding: OnDefineDomain refused: {msg}");
                Err(Status::invalid_argument(msg))
            }
        }
    }

    async fn pre_cloud_init_iso(
        &self,
        req: Request<PreCloudInitIsoParams>,
    ) -> Result<Response<PreCloudInitIsoResult>, Status> {
        let p = req.into_inner();
        Ok(Response::new(PreCloudInitIsoResult {
            cloud_init_no_cloud_source: p.cloud_init_no_cloud_source,
            cloud_init_data: p.cloud_init_data,
        }))
    }

    async fn shutdown(
        &self,
        _: Request<ShutdownParams>,
    ) -> Result<Response<ShutdownResult>, Status> {
        eprintln!("vhu-kubevirt-binding: Shutdown");
        self.stop.notify_one();
        Ok(Response::new(ShutdownResult {}))
    }
}

/// Removes `path` if it is a socket (a stale one from an earlier run);
/// refuses to remove anything else.
fn remove_stale(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => std::fs::remove_file(path),
        Ok(_) => Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            format!("{} exists and is not a socket", path.display()),
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Serves until `Shutdown`, SIGTERM or SIGINT; then removes the socket.
pub async fn serve(cfg: Config) -> Result<(), Box<dyn std::error::Error>> {
    if let Some(dir) = cfg.socket.parent() {
        std::fs::create_dir_all(dir)?;
    }
    remove_stale(&cfg.socket)?;
    let listener = UnixListener::bind(&cfg.socket)?;
    eprintln!(
        "vhu-kubevirt-binding: serving {VERSION} for binding {:?} on {}",
        cfg.binding,
        cfg.socket.display()
    );
    let stop = Arc::new(Notify::new());
    let hooks = Arc::new(Hooks {
        binding: cfg.binding.clone(),
        resolver: cfg.resolver.clone(),
        stop: Arc::clone(&stop),
    });
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let (stopping_tx, stopping) = tokio::sync::oneshot::channel::<()>();
    let shutdown = async move {
        tokio::select! {
            _ = stop.notified() => {}
            _ = term.recv() => eprintln!("vhu-kubevirt-binding: SIGTERM"),
            _ = int.recv() => eprintln!("vhu-kubevirt-binding: SIGINT"),
        }
        let _ = stopping_tx.send(());
    };
    let serve = tonic::transport::Server::builder()
        .add_service(InfoServer::new(Arc::clone(&hooks)))
        .add_service(CallbacksServer::new(hooks))
        .serve_with_incoming_shutdown(UnixListenerStream::new(listener), shutdown);
    // The graceful stop waits for every connection to close; bound it.
    let grace_over = async move {
        if stopping.await.is_ok() {
            tokio::time::sleep(GRACE).await;
            eprintln!(
                "vhu-kubevirt-binding: connections still open {} ms after the stop: closing them",
                GRACE.as_millis()
            );
        } else {
            std::future::pending::<()>().await;
        }
    };
    let result = tokio::select! {
        biased;
        r = serve => r,
        () = grace_over => Ok(()),
    };
    let removed = std::fs::remove_file(&cfg.socket);
    result?;
    removed?;
    eprintln!(
        "vhu-kubevirt-binding: stopped, {} removed",
        cfg.socket.display()
    );
    Ok(())
}
