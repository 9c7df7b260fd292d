//! HTTP source: OTLP/HTTP as SDKs and browsers send it. `POST /v1/logs`, `/v1/traces`,
//! `/v1/metrics` with a protobuf (`application/x-protobuf`) or JSON (`application/json`)
//! body, optionally gzip or zstd encoded; HTTP/1.1 and HTTP/2 on one port. A request is
//! answered 200 only once every sink accepted its records; failures carry a `google.rpc.Status`
//! body in the request's format, with the status codes the OTLP/HTTP specification gives
//! (429/502/503/504 are the retryable ones).

use std::convert::Infallible;
use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE};
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use penstock_engine::Signal;
use prost::Message;

use super::admission::Admitted;
use super::body::{Deadline, RECEIVE_TIMEOUT, discard_body};
use super::contract::{SourceDriver, SourceStart, Starting};
use super::listener::{DRAIN_TIMEOUT, Listening, SourceContext, listen, open};
use super::otlp_export::{ExportError, export_otlp};
use crate::gateway::base::status::{Fault, Refusal, RpcStatus};

/// Serves one connection (HTTP/1.1 or HTTP/2, in the clear or over TLS) on the current
/// worker.
pub async fn serve(stream: std::net::TcpStream, context: Arc<SourceContext>) {
    let Some(io) = open(stream, &context, false).await else {
        return;
    };
    let mut shutdown = context.shutdown.clone();
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(30))
        .max_buf_size(64 << 10);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(64)
        .initial_stream_window_size(1 << 20)
        .initial_connection_window_size(1 << 20)
        .max_header_list_size(64 << 10)
        .keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(20));
    let service = hyper::service::service_fn(move |request| {
        let context = Arc::clone(&context);
        async move { Ok::<_, Infallible>(handle(request, &context).await) }
    });
    let connection = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => return,
        _ = shutdown.wait_for(|stop| *stop) => {}
    }
    connection.as_mut().graceful_shutdown();
    let _ = tokio::time::timeout(DRAIN_TIMEOUT, connection).await;
}

/// The body format of a request, and so of its response.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Format {
    Protobuf,
    Json,
}

impl Format {
    fn content_type(self) -> &'static str {
        match self {
            Format::Protobuf => "application/x-protobuf",
            Format::Json => "application/json",
        }
    }
}

/// A refused request: why (which picks the HTTP status and the code of the
/// `google.rpc.Status` body), and the body's message.
#[derive(Debug)]
struct Refused {
    fault: Fault,
    message: String,
    /// How long the sender is asked to wait, for a refusal for now.
    wait: Option<Duration>,
}

fn refuse(fault: Fault, message: impl Into<String>) -> Refused {
    Refused {
        fault,
        message: message.into(),
        wait: None,
    }
}

/// The answer to an error that knows its fault; a refusal for now is counted in the worker's
/// pushback, which says how long to wait.
fn refused_for(error: &impl Refusal, context: &SourceContext) -> Refused {
    let fault = error.fault();
    Refused {
        fault,
        message: error.to_string(),
        wait: fault.retry_wait(&context.worker.pushback),
    }
}

async fn handle(request: Request<Incoming>, context: &SourceContext) -> Response<Full<Bytes>> {
    let origin = allowed_origin(request.headers(), &context.admission.limits.cors_origins);
    let mut response = if request.method() == Method::OPTIONS && origin.is_some() {
        preflight()
    } else {
        let format = format_of(request.headers());
        match export(request, context).await {
            Ok(format) => ok(format),
            Err(refusal) => refused(format.unwrap_or(Format::Protobuf), refusal),
        }
    };
    if let Some(origin) = origin {
        let headers = response.headers_mut();
        headers.insert("access-control-allow-origin", origin);
        headers.insert("vary", HeaderValue::from_static("origin"));
    }
    response
}

fn ok(format: Format) -> Response<Full<Bytes>> {
    // An Export*ServiceResponse without partial success: no bytes in protobuf, `{}` in JSON.
    let body = match format {
        Format::Protobuf => Bytes::new(),
        Format::Json => Bytes::from_static(b"{}"),
    };
    let mut response = Response::new(Full::new(body));
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static(format.content_type()),
    );
    response
}

fn refused(format: Format, refusal: Refused) -> Response<Full<Bytes>> {
    let status = RpcStatus::new(refusal.fault.code(), refusal.message);
    let body = match format {
        Format::Protobuf => status.encode_to_vec(),
        Format::Json => serde_json::json!({"code": status.code, "message": status.message})
            .to_string()
            .into_bytes(),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = refusal.fault.http_status();
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static(format.content_type()),
    );
    if refusal.fault.retry_after() {
        // In whole seconds, at least one.
        let wait = refusal.wait.map_or(1, |w| w.as_secs_f64().ceil() as u64);
        headers.insert("retry-after", HeaderValue::from(wait.max(1)));
    }
    response
}

fn preflight() -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = StatusCode::NO_CONTENT;
    let headers = response.headers_mut();
    headers.insert(
        "access-control-allow-methods",
        HeaderValue::from_static("POST, OPTIONS"),
    );
    headers.insert(
        "access-control-allow-headers",
        HeaderValue::from_static("content-type, content-encoding, authorization"),
    );
    headers.insert("access-control-max-age", HeaderValue::from_static("600"));
    response
}

/// The `Origin` of a browser request, when it is one the source allows.
fn allowed_origin(headers: &HeaderMap, allowed: &[String]) -> Option<HeaderValue> {
    let origin = headers.get(http::header::ORIGIN)?;
    let text = origin.to_str().ok()?;
    allowed
        .iter()
        .any(|a| a == "*" || a.eq_ignore_ascii_case(text))
        .then(|| origin.clone())
}

fn format_of(headers: &HeaderMap) -> Option<Format> {
    let value = headers.get(CONTENT_TYPE)?.to_str().ok()?;
    let essence = value.split(';').next().unwrap_or_default().trim();
    if essence.eq_ignore_ascii_case("application/x-protobuf")
        || essence.eq_ignore_ascii_case("application/protobuf")
    {
        Some(Format::Protobuf)
    } else if essence.eq_ignore_ascii_case("application/json") {
        Some(Format::Json)
    } else {
        None
    }
}

fn signal_of(path: &str) -> Option<Signal> {
    match path {
        "/v1/logs" => Some(Signal::Logs),
        "/v1/traces" => Some(Signal::Traces),
        "/v1/metrics" => Some(Signal::Metrics),
        _ => None,
    }
}

/// Takes one export request through admission, decoding and the pipelines.
async fn export(request: Request<Incoming>, context: &SourceContext) -> Result<Format, Refused> {
    let Accepted {
        signal,
        format,
        encoding,
    } = accepted(&request, context)?;
    let (body, _admitted) = receive_body(request, context, encoding).await?;
    let protobuf = match format {
        Format::Protobuf => body,
        Format::Json => match penstock_engine::otlp::json::request_to_protobuf(signal, &body) {
            Ok(bytes) => Bytes::from(bytes),
            Err(source) => {
                if let Some(flow) = context.telemetry.sources.get(&context.name) {
                    flow.fail();
                }
                let e = ExportError::Malformed {
                    signal: signal.name(),
                    source,
                };
                return Err(refused_for(&e, context));
            }
        },
    };
    export_otlp(context, signal, protobuf)
        .await
        .map_err(|e| refused_for(&e, context))?;
    Ok(format)
}

/// What an export request's line and headers say, once they were found acceptable.
struct Accepted {
    signal: Signal,
    format: Format,
    encoding: ContentEncoding,
}

/// Checks an export request's line and headers before its body is read: an OTLP endpoint,
/// POST, the bearer token, a content type and encoding the source reads, and a declared
/// length within the source's largest body.
fn accepted(request: &Request<Incoming>, context: &SourceContext) -> Result<Accepted, Refused> {
    let Some(signal) = signal_of(request.uri().path()) else {
        let message = format!("no OTLP endpoint at {}", request.uri().path());
        return Err(refuse(Fault::NotFound, message));
    };
    if request.method() != Method::POST {
        let message = "OTLP/HTTP exports are POST requests";
        return Err(refuse(Fault::Unimplemented, message));
    }
    let authorization = request.headers().get(http::header::AUTHORIZATION);
    if !context
        .admission
        .authorized(authorization.map(HeaderValue::as_bytes))
    {
        let message = "a valid bearer token is required";
        return Err(refuse(Fault::Unauthenticated, message));
    }
    let format = format_of(request.headers()).ok_or_else(|| {
        let message = "Content-Type must be application/x-protobuf or application/json";
        refuse(Fault::UnsupportedMediaType, message)
    })?;
    let encoding = ContentEncoding::of(request.headers())?;
    let max = context.admission.limits.max_message_bytes;
    let declared = request
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Err(too_large(max));
    }
    Ok(Accepted {
        signal,
        format,
        encoding,
    })
}

/// The refusal of a body over `max` bytes.
fn too_large(max: usize) -> Refused {
    refuse(
        Fault::TooLarge,
        format!("the request body exceeds {max} bytes"),
    )
}

/// Receives an export request's body with a place among the requests being received, and
/// inflates it: the body, admitted for its size until the returned admission is dropped.
async fn receive_body(
    request: Request<Incoming>,
    context: &SourceContext,
    encoding: ContentEncoding,
) -> Result<(Bytes, Admitted), Refused> {
    let max = context.admission.limits.max_message_bytes;
    // The body is received and inflated only with a place among the requests being
    // received: what waits for admission stays bounded. Only an HTTP/1 request, alone on its
    // connection, may wait for one without reading its body.
    let may_wait = request.version() < http::Version::HTTP_2;
    let receiving = match context.admission.receive(may_wait).await {
        Ok(receiving) => receiving,
        Err(e) => {
            if !may_wait {
                let thrown = discard_body(request.into_body(), max).await;
                context
                    .telemetry
                    .discarded_body_bytes
                    .fetch_add(thrown as u64, std::sync::atomic::Ordering::Relaxed);
            }
            return Err(refused_for(&e, context));
        }
    };
    let body = Limited::new(Deadline::new(request.into_body(), RECEIVE_TIMEOUT), max)
        .collect()
        .await
        .map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                too_large(max)
            } else {
                let message = format!("reading the request body: {e}");
                refuse(Fault::Malformed, message)
            }
        })?
        .to_bytes();
    // A compressed body is admitted for its size while it is inflated (up to `max`), then
    // for what it inflated to; the first share is given up before waiting for the second.
    let compressed = match encoding {
        ContentEncoding::Identity => None,
        _ => Some(
            context
                .admission
                .admit(body.len(), None)
                .await
                .map_err(|e| refused_for(&e, context))?,
        ),
    };
    let body = encoding.decode(body, max).map_err(|e| match e {
        Inflate::TooLarge => too_large(max),
        Inflate::Corrupt(e) => {
            let message = format!("cannot decompress the request body: {e}");
            refuse(Fault::Malformed, message)
        }
    })?;
    drop(compressed);
    let admitted = context
        .admission
        .admit(body.len(), None)
        .await
        .map_err(|e| refused_for(&e, context))?;
    drop(receiving);
    Ok((body, admitted))
}

/// A request body's `Content-Encoding`.
enum ContentEncoding {
    Identity,
    Gzip,
    Zstd,
}

enum Inflate {
    TooLarge,
    Corrupt(std::io::Error),
}

impl ContentEncoding {
    fn of(headers: &HeaderMap) -> Result<ContentEncoding, Refused> {
        let Some(value) = headers.get(CONTENT_ENCODING) else {
            return Ok(ContentEncoding::Identity);
        };
        match value.to_str().unwrap_or_default().trim() {
            "" | "identity" => Ok(ContentEncoding::Identity),
            v if v.eq_ignore_ascii_case("gzip") => Ok(ContentEncoding::Gzip),
            v if v.eq_ignore_ascii_case("zstd") => Ok(ContentEncoding::Zstd),
            other => Err(refuse(
                Fault::UnsupportedMediaType,
                format!("Content-Encoding '{other}' is not supported (gzip, zstd, identity)"),
            )),
        }
    }

    /// Decompresses `body`, never past `max` bytes.
    fn decode(&self, body: Bytes, max: usize) -> Result<Bytes, Inflate> {
        let mut out = Vec::new();
        let limit = max as u64 + 1;
        let read = match self {
            ContentEncoding::Identity => return Ok(body),
            ContentEncoding::Gzip => flate2::read::MultiGzDecoder::new(body.as_ref())
                .take(limit)
                .read_to_end(&mut out),
            ContentEncoding::Zstd => zstd::stream::read::Decoder::new(body.as_ref())
                .and_then(|d| d.take(limit).read_to_end(&mut out)),
        };
        read.map_err(Inflate::Corrupt)?;
        if out.len() > max {
            return Err(Inflate::TooLarge);
        }
        Ok(Bytes::from(out))
    }
}

/// The HTTP source kind.
pub struct HttpSource;

impl SourceDriver for HttpSource {
    fn start<'a>(&'a self, start: SourceStart<'a>) -> Starting<'a> {
        let listening = Listening {
            protocol: ["OTLP/HTTP", "OTLP/HTTPS"],
            alpn: &[b"h2", b"http/1.1"],
            serve,
        };
        Box::pin(listen(start, listening))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unsupported_content_encoding_is_refused_naming_the_header() {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_ENCODING, HeaderValue::from_static("br"));
        let Err(refusal) = ContentEncoding::of(&headers) else {
            panic!("br was accepted");
        };
        assert_eq!(refusal.fault, Fault::UnsupportedMediaType);
        assert_eq!(
            refusal.message,
            "Content-Encoding 'br' is not supported (gzip, zstd, identity)"
        );
        headers.insert(CONTENT_ENCODING, HeaderValue::from_static("GZIP"));
        assert!(matches!(
            ContentEncoding::of(&headers),
            Ok(ContentEncoding::Gzip)
        ));
    }
}
