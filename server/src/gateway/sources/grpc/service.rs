//! Routing of gRPC calls to the OTLP and OTAP handlers, with bearer-token authentication and
//! the compression names the OpenTelemetry Collector's otelarrow exporter uses.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Request, Response};
use hyper::body::Incoming;
use penstock_engine::Signal;
use tonic::body::Body;
use tonic::codec::CompressionEncoding;

use super::messages::Messages;
use super::otap::OtapStream;
use crate::gateway::base::status::{Fault, Refusal};
use crate::gateway::sources::admission::Admission;
use crate::gateway::sources::body::discard_body;
use crate::gateway::sources::listener::SourceContext;
use crate::gateway::sources::stream_slots::Opener;

/// The gRPC service of one connection.
#[derive(Debug, Clone)]
pub struct GrpcService {
    context: Arc<SourceContext>,
    /// Who the connection is from.
    opener: Opener,
}

impl GrpcService {
    /// Serves the calls of the connection of `opener` with `context`.
    pub fn new(context: Arc<SourceContext>, opener: Opener) -> Self {
        GrpcService { context, opener }
    }
}

enum Route {
    Otlp(Signal),
    Otap(Signal),
}

fn route(path: &str) -> Option<Route> {
    Some(match path {
        "/opentelemetry.proto.collector.logs.v1.LogsService/Export" => Route::Otlp(Signal::Logs),
        "/opentelemetry.proto.collector.trace.v1.TraceService/Export" => {
            Route::Otlp(Signal::Traces)
        }
        "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export" => {
            Route::Otlp(Signal::Metrics)
        }
        "/opentelemetry.proto.experimental.arrow.v1.ArrowLogsService/ArrowLogs" => {
            Route::Otap(Signal::Logs)
        }
        "/opentelemetry.proto.experimental.arrow.v1.ArrowTracesService/ArrowTraces" => {
            Route::Otap(Signal::Traces)
        }
        "/opentelemetry.proto.experimental.arrow.v1.ArrowMetricsService/ArrowMetrics" => {
            Route::Otap(Signal::Metrics)
        }
        _ => return None,
    })
}

/// `zstdarrow1`..`zstdarrow10` (the otelarrow exporter's names for levels) are plain zstd.
fn normalize_encoding(request: &mut Request<Incoming>) {
    let is_zstd_level = request
        .headers()
        .get("grpc-encoding")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("zstdarrow"));
    if is_zstd_level {
        request
            .headers_mut()
            .insert("grpc-encoding", HeaderValue::from_static("zstd"));
    }
}

/// Whether a call carries the source's bearer token in its `authorization` header.
fn authorized(request: &Request<Incoming>, admission: &Admission) -> bool {
    let given = request
        .headers()
        .get(http::header::AUTHORIZATION)
        .map(HeaderValue::as_bytes);
    admission.authorized(given)
}

impl hyper::service::Service<Request<Incoming>> for GrpcService {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn call(&self, mut request: Request<Incoming>) -> Self::Future {
        normalize_encoding(&mut request);
        let context = Arc::clone(&self.context);
        let authenticated = authorized(&request, &context.admission);
        let max = context.admission.limits.max_message_bytes;
        let opener = self.opener;
        match route(request.uri().path()) {
            Some(Route::Otlp(_)) if !authenticated => Box::pin(async move {
                let refusal = Fault::Unauthenticated.to_status("a valid bearer token is required");
                Ok(refusal.into_http())
            }),
            Some(Route::Otlp(signal)) => Box::pin(async move {
                // The body is received, inflated and decoded only with a place among the
                // requests being received: what waits for admission stays bounded. Until it
                // has one its body is not read, so it sends no more than its stream's window
                // (see `grpc::CONNECTION_WINDOW_BYTES`). A request refused (with `admission =
                // 'refuse'`, or while the gateway stops) has its body read and thrown away
                // before the answer: clients built on hyper report an answer that comes while
                // they still send as a broken connection.
                let receiving = match context.admission.receive(true).await {
                    Ok(permit) => permit,
                    Err(e) => {
                        let thrown = discard_body(request.into_body(), max).await;
                        context
                            .telemetry
                            .discarded_body_bytes
                            .fetch_add(thrown as u64, std::sync::atomic::Ordering::Relaxed);
                        return Ok(e.to_status(&context.worker.pushback).into_http());
                    }
                };
                Ok(super::otlp::export(context, signal, receiving, request).await)
            }),
            Some(Route::Otap(signal)) => Box::pin(async move {
                let codec = tonic_prost::ProstCodec::<
                    penstock_engine::proto::BatchStatus,
                    penstock_engine::proto::BatchArrowRecords,
                >::default();
                let mut grpc = tonic::server::Grpc::new(codec)
                    .accept_compressed(CompressionEncoding::Gzip)
                    .accept_compressed(CompressionEncoding::Zstd);
                // tonic answers the call and writes its statuses; the batches are read from
                // the body here (`Messages`), each into a buffer of its own.
                let (parts, body) = request.into_parts();
                let messages = Messages::new(body, &parts.headers, max);
                let request = Request::from_parts(parts, http_body_util::Empty::<Bytes>::new());
                // Without the token on the stream, each batch must bring it in its headers.
                let stream = OtapStream {
                    signal,
                    context,
                    authenticated,
                    opener,
                    messages: Some(messages),
                };
                Ok(grpc.streaming(stream, request).await)
            }),
            None => {
                let path = request.uri().path().to_string();
                Box::pin(async move {
                    Ok(Fault::Unimplemented
                        .to_status(format!("no method {path}"))
                        .into_http())
                })
            }
        }
    }
}
