//! OTLP/gRPC sink: export requests (merged and retried as [`super::export`] does) sent as
//! gRPC unary calls with a deadline, compressed with gzip, zstd or not at all.

use std::time::Duration;

use bytes::Bytes;
use penstock_dialect::Sink;
use penstock_engine::Signal;
use prost::Message;

use super::compress::Compression;
use super::contract::{Placement, SinkContext, SinkDriver};
use super::export::{self, Accepted, ExportResponse, Failure, Settings, Transport};
use super::unary::{self, Reply};
use super::upstream::Upstream;
use crate::gateway::base::error::GatewayError;
use crate::gateway::base::status::{retry_delay, retryable};

/// How an OTLP sink's requests reach the backend.
#[derive(Debug, Clone)]
pub struct Grpc {
    upstream: Upstream,
    compression: Compression,
    timeout: Duration,
}

/// An OTLP sink's settings and transport, from its options; connects lazily.
pub fn config(sink: &Sink, base: &std::path::Path) -> Result<(Settings, Grpc), GatewayError> {
    let grpc = Grpc {
        upstream: Upstream::of(sink, base)?,
        compression: Compression::from_option(sink.options.str("compression"), Compression::Zstd),
        timeout: export::timeout(sink),
    };
    Ok((Settings::from_sink(sink), grpc))
}

/// The export method of a signal.
pub fn export_path(signal: Signal) -> &'static str {
    match signal {
        Signal::Logs => "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
        Signal::Traces => "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
        Signal::Metrics => "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
    }
}

impl Transport for Grpc {
    type Request = unary::Framed;

    fn prepare(&self, _signal: Signal, protobuf: Bytes) -> Result<unary::Framed, String> {
        unary::frame(&protobuf, self.compression).map_err(|s| s.message().to_string())
    }

    async fn send(&self, signal: Signal, request: &unary::Framed) -> Result<Accepted, Failure> {
        let path = export_path(signal);
        let reply = unary::call(
            &self.upstream,
            path,
            request.clone(),
            self.compression,
            self.timeout,
        )
        .await
        .map_err(|status| Failure {
            message: format!("{}: {}", status.code(), status.message()),
            retryable: retryable(status.code()),
            retry_after: retry_delay(&status),
        })?;
        // The backend said OK: the records are delivered whatever the response looks like, so
        // a response that cannot be read is reported, never failed or retried.
        Ok(match reply {
            Reply::Message(bytes) => match ExportResponse::decode(bytes) {
                Ok(response) => Accepted::Response(response),
                Err(e) => Accepted::Unreadable(format!("a malformed export response: {e}")),
            },
            Reply::Unreadable(why) => Accepted::Unreadable(why),
        })
    }
}

/// The OTLP sink kind.
pub struct OtlpSink;

impl SinkDriver for OtlpSink {
    fn placement(&self) -> Placement {
        Placement::PerWorker
    }

    fn start(&self, context: SinkContext) -> Result<tokio::task::JoinHandle<()>, GatewayError> {
        let (settings, grpc) = config(&context.sink, &context.base)?;
        Ok(export::spawn(settings, grpc, context))
    }
}
