// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! A blocking client of the hook API over a Unix socket, dialled as
//! virt-launcher dials its sidecars (plaintext HTTP/2, authority
//! `localhost`): for tests and for checking a running sidecar by hand.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint};

use crate::proto::info::info_client::InfoClient;
use crate::proto::info::{InfoParams, InfoResult};
use crate::proto::v1alpha3::callbacks_client::CallbacksClient;
use crate::proto::v1alpha3::{OnDefineDomainParams, PreCloudInitIsoParams, ShutdownParams};

/// A gRPC error: its code (`tonic::Code` as a number) and message; or a
/// transport failure (code 14, unavailable).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookError {
    /// The gRPC status code.
    pub code: i32,
    /// The message.
    pub message: String,
}

impl std::fmt::Display for HookError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "gRPC status {}: {}", self.code, self.message)
    }
}

impl std::error::Error for HookError {}

impl From<tonic::Status> for HookError {
    fn from(s: tonic::Status) -> Self {
        Self {
            code: s.code() as i32,
            message: s.message().to_owned(),
        }
    }
}

fn unavailable(e: impl std::fmt::Display) -> HookError {
    HookError {
        code: tonic::Code::Unavailable as i32,
        message: e.to_string(),
    }
}

/// A connection to a sidecar.
#[derive(Debug)]
pub struct HookClient {
    rt: tokio::runtime::Runtime,
    channel: Channel,
}

impl HookClient {
    /// Dials the sidecar's socket.
    pub fn connect(socket: &Path) -> Result<Self, HookError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(unavailable)?;
        let path: PathBuf = socket.to_owned();
        let channel = rt.block_on(async move {
            Endpoint::try_from("http://localhost")
                .map_err(unavailable)?
                .timeout(Duration::from_secs(60))
                .connect_with_connector(tower::service_fn(move |_| {
                    let p = path.clone();
                    async move { tokio::net::UnixStream::connect(p).await.map(TokioIo::new) }
                }))
                .await
                .map_err(unavailable)
        })?;
        Ok(Self { rt, channel })
    }

    /// `kubevirt.hooks.info.Info/Info`.
    pub fn info(&self) -> Result<InfoResult, HookError> {
        let mut c = InfoClient::new(self.channel.clone());
        Ok(self.rt.block_on(c.info(InfoParams {}))?.into_inner())
    }

    /// `kubevirt.hooks.v1alpha3.Callbacks/OnDefineDomain`: the new domain XML.
    pub fn on_define_domain(&self, domain_xml: &[u8], vmi: &[u8]) -> Result<Vec<u8>, HookError> {
        let mut c = CallbacksClient::new(self.channel.clone());
        let r = self.rt.block_on(c.on_define_domain(OnDefineDomainParams {
            domain_xml: domain_xml.to_vec(),
            vmi: vmi.to_vec(),
        }))?;
        Ok(r.into_inner().domain_xml)
    }

    /// `PreCloudInitIso`: `(cloudInitNoCloudSource, cloudInitData)` returned.
    pub fn pre_cloud_init_iso(
        &self,
        no_cloud_source: &[u8],
        data: &[u8],
    ) -> Result<(Vec<u8>, Vec<u8>), HookError> {
        let mut c = CallbacksClient::new(self.channel.clone());
        let r = self
            .rt
            .block_on(c.pre_cloud_init_iso(PreCloudInitIsoParams {
                cloud_init_no_cloud_source: no_cloud_source.to_vec(),
                vmi: Vec::new(),
                cloud_init_data: data.to_vec(),
            }))?
            .into_inner();
        Ok((r.cloud_init_no_cloud_source, r.cloud_init_data))
    }

    /// `Shutdown`.
    pub fn shutdown(&self) -> Result<(), HookError> {
        let mut c = CallbacksClient::new(self.channel.clone());
        self.rt.block_on(c.shutdown(ShutdownParams {}))?;
        Ok(())
    }
}
