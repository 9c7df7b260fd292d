//! Where a gRPC sink (OTAP, OTLP) sends: its endpoint with TLS and credentials.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;

use penstock_dialect::Sink;

use crate::gateway::base::error::GatewayError;
use crate::gateway::base::gather::Gathered;

/// Where a gRPC sink sends: a lazily connected channel, and the `authorization` every call
/// carries (from `auth_token`).
#[derive(Debug, Clone)]
pub struct Upstream {
    endpoint: tonic::transport::Endpoint,
    pub(super) channel: tonic::transport::Channel,
    pub(super) authorization: Option<tonic::metadata::AsciiMetadataValue>,
}

impl Upstream {
    /// From the sink's `endpoint`, TLS options and `auth_token`; connects on first use.
    pub(super) fn of(sink: &Sink, base: &Path) -> Result<Upstream, GatewayError> {
        let authorization =
            match sink.options.str("auth_token") {
                None => None,
                Some(token) => Some(format!("Bearer {token}").parse().map_err(|_| {
                    GatewayError::AuthToken {
                        sink_name: sink.name.clone(),
                    }
                })?),
            };
        let endpoint = endpoint(sink, base)?;
        Ok(Upstream {
            channel: connect_lazy(&endpoint),
            endpoint,
            authorization,
        })
    }

    /// The same backend on a connection of its own.
    pub(super) fn another(&self) -> Upstream {
        Upstream {
            channel: connect_lazy(&self.endpoint),
            endpoint: self.endpoint.clone(),
            authorization: self.authorization.clone(),
        }
    }

    /// An upstream without credentials, connecting lazily to `endpoint`.
    #[cfg(test)]
    pub(super) fn lazy(endpoint: tonic::transport::Endpoint) -> Upstream {
        Upstream {
            channel: connect_lazy(&endpoint),
            endpoint,
            authorization: None,
        }
    }
}

/// A channel to `endpoint` that connects on first use, over a socket whose writes are
/// gathered ([`Gathered`]: HTTP/2 writes each 16 KiB frame on its own).
/// The endpoint's connect timeout (and TLS) apply to it as to tonic's own connector.
fn connect_lazy(endpoint: &tonic::transport::Endpoint) -> tonic::transport::Channel {
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    endpoint.connect_with_connector_lazy(GatheringConnector(tcp))
}

/// Connects over TCP and gathers the socket's writes.
#[derive(Debug, Clone)]
struct GatheringConnector(HttpConnector);

impl tower_service::Service<http::Uri> for GatheringConnector {
    type Response = TokioIo<Gathered<tokio::net::TcpStream>>;
    type Error = <HttpConnector as tower_service::Service<http::Uri>>::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let connecting = self.0.call(uri);
        Box::pin(async move {
            let tcp = connecting.await?.into_inner();
            Ok(TokioIo::new(Gathered::new(tcp)))
        })
    }
}

/// A gRPC endpoint from a sink's `endpoint` option.
fn endpoint(sink: &Sink, base: &Path) -> Result<tonic::transport::Endpoint, GatewayError> {
    let url = sink.options.str("endpoint").unwrap_or_default().to_string();
    let mut endpoint = tonic::transport::Endpoint::from_shared(url.clone()).map_err(|source| {
        GatewayError::Endpoint {
            sink_name: sink.name.clone(),
            endpoint: url,
            source,
        }
    })?;
    if let Some(tls) = crate::gateway::base::tls::client(sink, base)? {
        endpoint = endpoint
            .tls_config(tls)
            .map_err(|source| GatewayError::SinkTls {
                sink_name: sink.name.clone(),
                source,
            })?;
    }
    Ok(endpoint.connect_timeout(Duration::from_secs(5)))
}
