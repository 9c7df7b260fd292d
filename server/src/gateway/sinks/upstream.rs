//! Where a gRPC sink (OTAP, OTLP) sends: its endpoint with TLS and credentials.

use std::path::Path;

use penstock_dialect::Sink;

use crate::gateway::base::error::GatewayError;

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
            channel: endpoint.connect_lazy(),
            endpoint,
            authorization,
        })
    }

    /// The same backend on a connection of its own.
    pub(super) fn another(&self) -> Upstream {
        Upstream {
            channel: self.endpoint.connect_lazy(),
            endpoint: self.endpoint.clone(),
            authorization: self.authorization.clone(),
        }
    }

    /// An upstream without credentials, connecting lazily to `endpoint`.
    #[cfg(test)]
    pub(super) fn lazy(endpoint: tonic::transport::Endpoint) -> Upstream {
        Upstream {
            channel: endpoint.connect_lazy(),
            endpoint,
            authorization: None,
        }
    }

    /// A client on the channel.
    pub(super) fn client(&self) -> tonic::client::Grpc<tonic::transport::Channel> {
        tonic::client::Grpc::new(self.channel.clone())
    }

    /// A call's request, with the sink's credentials.
    pub(super) fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        if let Some(value) = &self.authorization {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        request
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
    Ok(endpoint
        .connect_timeout(std::time::Duration::from_secs(5))
        .tcp_nodelay(true))
}
