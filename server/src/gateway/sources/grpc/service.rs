//! Routing of gRPC calls to the OTLP and OTAP handlers, with bearer-token authentication and
//! the compression names the OpenTelemetry Collector's otelarrow exporter uses.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use http::{HeaderValue, Request, Response};
use http_body_util::Either;
use hyper::body::Incoming;
use penstock_engine::Signal;
use tonic::body::Body;
use tonic::codec::CompressionEncoding;

use super::otap::OtapStream;
use super::otlp::OtlpExport;
use crate::gateway::sources::listener::{
    Admitted, Deadline, RECEIVE_TIMEOUT, SourceContext, admit, bearer_matches, discard_body,
    receive,
};
use crate::gateway::status::{Fault, Refusal};

/// The gRPC service of one connection.
#[derive(Debug, Clone)]
pub struct GrpcService {
    context: Arc<SourceContext>,
}

impl GrpcService {
    /// Serves calls with `context`.
    pub fn new(context: Arc<SourceContext>) -> Self {
        GrpcService { context }
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

fn authorized(request: &Request<Incoming>, token: Option<&str>) -> bool {
    let given = request
        .headers()
        .get(http::header::AUTHORIZATION)
        .map(HeaderValue::as_bytes);
    bearer_matches(given, token)
}

/// tonic refuses a request over `max_message_bytes` with OUT_OF_RANGE; OTLP senders treat
/// RESOURCE_EXHAUSTED as "too large" (and the docs promise it), so the answer says that.
fn too_large_is_resource_exhausted<B>(mut response: Response<B>) -> Response<B> {
    // "11" is OUT_OF_RANGE, "8" RESOURCE_EXHAUSTED (gRPC status codes as header values).
    let status = response.headers_mut().get_mut("grpc-status");
    if let Some(code) = status.filter(|v| v.as_bytes() == b"11") {
        *code = HeaderValue::from_static("8");
    }
    response
}

/// Whether a call's messages may be compressed (a `grpc-encoding` other than identity).
fn is_compressed(headers: &http::HeaderMap) -> bool {
    headers
        .get("grpc-encoding")
        .is_some_and(|v| v.as_bytes() != b"identity")
}

/// Receives an OTLP call's body (its one length-prefixed gRPC message, up to the source's
/// largest message) before tonic decodes it; a compressed message is admitted for its
/// compressed size, held while it is inflated (up to the same limit).
async fn receive_message(
    context: &SourceContext,
    body: Incoming,
) -> Result<(bytes::Bytes, Option<Admitted>), tonic::Status> {
    use http_body_util::BodyExt;
    let max = context.limits.max_message_bytes;
    let limited = http_body_util::Limited::new(Deadline::new(body, RECEIVE_TIMEOUT), max + 5);
    let bytes = match limited.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            let message = format!("the request message exceeds {max} bytes");
            return Err(Fault::TooLarge.to_status(message));
        }
        Err(e) => {
            let message = format!("reading the request: {e}");
            return Err(tonic::Status::cancelled(message));
        }
    };
    // The prefix's first byte says whether the message is compressed.
    if bytes.first() != Some(&1) {
        return Ok((bytes, None));
    }
    let admitted = admit(context, bytes.len())
        .await
        .map_err(|e| e.to_status())?;
    Ok((bytes, Some(admitted)))
}

/// A compressed message (`frame`) inflated into the uncompressed frame tonic reads, the call's
/// `grpc-encoding` removed; the frame as it is when tonic has to read it (not one whole
/// message, or an encoding inflated only there).
fn inflated(
    headers: &mut http::HeaderMap,
    frame: bytes::Bytes,
    max: usize,
) -> Result<super::inflate::Chunks, tonic::Status> {
    let encoding = headers.get("grpc-encoding").and_then(|v| v.to_str().ok());
    match super::inflate::frame(&frame, encoding.unwrap_or(""), max) {
        None => Ok(super::inflate::Chunks::one(frame)),
        Some(Ok(inflated)) => {
            headers.remove("grpc-encoding");
            Ok(inflated)
        }
        Some(Err(e @ super::inflate::InflateError::TooLarge(_))) => {
            Err(Fault::TooLarge.to_status(e.to_string()))
        }
        Some(Err(e)) => Err(Fault::Malformed.to_status(e.to_string())),
    }
}

impl hyper::service::Service<Request<Incoming>> for GrpcService {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn call(&self, mut request: Request<Incoming>) -> Self::Future {
        normalize_encoding(&mut request);
        let context = Arc::clone(&self.context);
        let authenticated = authorized(&request, context.limits.auth_token.as_deref());
        let max = context.limits.max_message_bytes;
        match route(request.uri().path()) {
            Some(Route::Otlp(_)) if !authenticated => Box::pin(async move {
                let refusal = Fault::Unauthenticated.to_status("a valid bearer token is required");
                Ok(refusal.into_http())
            }),
            Some(Route::Otlp(signal)) => Box::pin(async move {
                // The body is received, inflated and decoded only with a place among the
                // requests being received: what waits for admission stays bounded. A request
                // without one is refused at once, never left unread on the connection.
                let receiving = match receive(&context, false).await {
                    Ok(permit) => permit,
                    Err(e) => {
                        discard_body(request.into_body(), max).await;
                        return Ok(e.to_status().into_http());
                    }
                };
                let mut grpc = tonic::server::Grpc::new(crate::gateway::codec::RawRequestCodec::<
                    crate::gateway::sinks::ExportResponse,
                >::default())
                .accept_compressed(CompressionEncoding::Gzip)
                .accept_compressed(CompressionEncoding::Zstd)
                .send_compressed(CompressionEncoding::Gzip)
                .send_compressed(CompressionEncoding::Zstd)
                .max_decoding_message_size(max);
                let (mut parts, body) = request.into_parts();
                // An uncompressed message goes to tonic as it arrives; a compressed one is
                // received first, to be admitted for its size while it is inflated, and
                // inflated here (tonic then reads an uncompressed message).
                let (body, compressed) = if is_compressed(&parts.headers) {
                    match receive_message(&context, body).await {
                        Ok((bytes, admitted)) => match inflated(&mut parts.headers, bytes, max) {
                            Ok(bytes) => (Either::Right(bytes), admitted),
                            Err(status) => return Ok(status.into_http()),
                        },
                        Err(status) => return Ok(status.into_http()),
                    }
                } else {
                    (Either::Left(Deadline::new(body, RECEIVE_TIMEOUT)), None)
                };
                let export = OtlpExport {
                    signal,
                    context,
                    receiving: Some(receiving),
                    compressed,
                };
                let request = Request::from_parts(parts, body);
                Ok(too_large_is_resource_exhausted(
                    grpc.unary(export, request).await,
                ))
            }),
            Some(Route::Otap(signal)) => Box::pin(async move {
                let codec = tonic_prost::ProstCodec::<
                    penstock_engine::proto::BatchStatus,
                    penstock_engine::proto::BatchArrowRecords,
                >::default();
                let mut grpc = tonic::server::Grpc::new(codec)
                    .accept_compressed(CompressionEncoding::Gzip)
                    .accept_compressed(CompressionEncoding::Zstd)
                    .max_decoding_message_size(max);
                // Without the token on the stream, each batch must bring it in its headers.
                let stream = OtapStream {
                    signal,
                    context,
                    authenticated,
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
