//! Sinks: each is a task reading a bounded queue of [`Delivery`]s and acknowledging each one
//! once its backend accepted the batch (or it gave up). Files and the console are shared by
//! all workers; network sinks (OTAP, OTLP, OTLP_HTTP) run one per worker, with their own
//! connections.

pub mod compress;
mod connections;
pub mod console;
mod export;
mod file;
pub mod kafka;
mod otap;
mod otlp;
mod otlp_http;
mod retry;
mod unary;

pub use export::ExportResponse;
pub use otap::stream_path as otap_stream_path;
pub use otlp::export_path as otlp_export_path;

use std::path::Path;
use std::sync::Arc;

use penstock_dialect::Sink;
use penstock_dialect::ast::SinkKind;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::delivery::{Delivery, SinkQueue};
use super::error::GatewayError;
use super::program::resolve_path;
use super::telemetry::Telemetry;

/// Deliveries waiting in front of one sink.
pub const SINK_QUEUE: usize = 64;

/// A started sink.
pub struct SinkTask {
    /// Where batches go.
    pub queue: SinkQueue,
    /// Ends once the queue is closed and everything queued was handled.
    pub task: JoinHandle<()>,
}

fn queue() -> (SinkQueue, mpsc::Receiver<Delivery>) {
    mpsc::channel(SINK_QUEUE)
}

/// Starts a sink shared by every worker on a blocking thread of the current runtime (its
/// writes and syncs stall no runtime): FILE, CONSOLE, and network sinks with a disk buffer
/// (see [`crate::gateway::buffer`]); `None` for the others. Relative file paths are resolved
/// against `base` (the pipeline file).
pub fn start_shared(
    sink: &Sink,
    base: &Path,
    telemetry: &Arc<Telemetry>,
    draining: &tokio::sync::watch::Receiver<bool>,
) -> Result<Option<SinkTask>, GatewayError> {
    if crate::gateway::buffer::is_disk(sink) {
        return crate::gateway::buffer::start(sink, base, telemetry, draining).map(Some);
    }
    let (queue, deliveries) = queue();
    let name = sink.name.clone();
    let telemetry = Arc::clone(telemetry);
    let task = match sink.kind {
        SinkKind::File => {
            let path = resolve_path(base, sink.options.str("path").unwrap_or_default());
            let file = file::open(&sink.name, &path)?;
            tokio::task::spawn_blocking(move || file::run(name, file, deliveries, telemetry))
        }
        SinkKind::Console => {
            let limit = sink.options.count("limit").unwrap_or(10) as usize;
            tokio::task::spawn_blocking(move || console::run(name, limit, deliveries, telemetry))
        }
        SinkKind::Otap | SinkKind::Otlp | SinkKind::OtlpHttp | SinkKind::Kafka => {
            return Ok(None);
        }
    };
    Ok(Some(SinkTask { queue, task }))
}

/// Starts a worker's own instance of a network sink (OTAP, OTLP, OTLP_HTTP, KAFKA) on the current
/// runtime; `None` for shared sinks (disk-buffered ones among them). Once `draining` is
/// true, the sink no longer lingers.
pub fn start_per_worker(
    sink: &Sink,
    base: &Path,
    telemetry: &Arc<Telemetry>,
    draining: &tokio::sync::watch::Receiver<bool>,
) -> Result<Option<SinkTask>, GatewayError> {
    if crate::gateway::buffer::is_disk(sink) {
        return Ok(None);
    }
    start_network(sink, base, telemetry, draining, false)
}

/// Starts an instance of a network sink on the current runtime; `None` for FILE and
/// CONSOLE. An `ordered` one delivers its batches in the order it is given them (one OTLP
/// request in flight at a time, one OTAP stream).
pub fn start_network(
    sink: &Sink,
    base: &Path,
    telemetry: &Arc<Telemetry>,
    draining: &tokio::sync::watch::Receiver<bool>,
    ordered: bool,
) -> Result<Option<SinkTask>, GatewayError> {
    let draining = draining.clone();
    let (queue, deliveries) = queue();
    let telemetry = Arc::clone(telemetry);
    let task = match sink.kind {
        SinkKind::Otlp => {
            let (settings, grpc) = otlp::config(sink, base)?;
            let settings = if ordered {
                settings.ordered()
            } else {
                settings
            };
            tokio::spawn(export::run(settings, grpc, deliveries, telemetry, draining))
        }
        SinkKind::OtlpHttp => {
            let (settings, http) = otlp_http::config(sink, base)?;
            let settings = if ordered {
                settings.ordered()
            } else {
                settings
            };
            tokio::spawn(export::run(settings, http, deliveries, telemetry, draining))
        }
        SinkKind::Otap => {
            let mut config = otap::Config::from_sink(sink, base)?;
            if ordered {
                config = config.ordered();
            }
            tokio::spawn(otap::run(config, deliveries, telemetry, draining))
        }
        SinkKind::Kafka => {
            let config = kafka::Config::from_sink(sink)?;
            tokio::spawn(kafka::run(config, deliveries, telemetry))
        }
        SinkKind::File | SinkKind::Console => return Ok(None),
    };
    Ok(Some(SinkTask { queue, task }))
}

/// Where a gRPC sink sends: a lazily connected channel, and the `authorization` every call
/// carries (from `auth_token`).
#[derive(Debug, Clone)]
pub struct Upstream {
    endpoint: tonic::transport::Endpoint,
    channel: tonic::transport::Channel,
    authorization: Option<tonic::metadata::AsciiMetadataValue>,
}

impl Upstream {
    /// From the sink's `endpoint`, TLS options and `auth_token`; connects on first use.
    fn of(sink: &Sink, base: &Path) -> Result<Upstream, GatewayError> {
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
    fn another(&self) -> Upstream {
        Upstream {
            channel: self.endpoint.connect_lazy(),
            endpoint: self.endpoint.clone(),
            authorization: self.authorization.clone(),
        }
    }

    /// An upstream without credentials, connecting lazily to `endpoint`.
    #[cfg(test)]
    fn lazy(endpoint: tonic::transport::Endpoint) -> Upstream {
        Upstream {
            channel: endpoint.connect_lazy(),
            endpoint,
            authorization: None,
        }
    }

    /// A client on the channel.
    fn client(&self) -> tonic::client::Grpc<tonic::transport::Channel> {
        tonic::client::Grpc::new(self.channel.clone())
    }

    /// A call's request, with the sink's credentials.
    fn request<T>(&self, message: T) -> tonic::Request<T> {
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
    if let Some(tls) = crate::gateway::tls::client(sink, base)? {
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
