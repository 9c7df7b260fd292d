//! OTLP/HTTP sink: export requests (merged and retried as [`super::export`] does) POSTed to
//! `ENDPOINT/v1/logs`, `/v1/traces` or `/v1/metrics` as `application/x-protobuf` or OTLP JSON
//! (`application/json`), with `Content-Encoding` gzip, zstd or none, the sink's `headers`
//! and its bearer token. A request is encoded and compressed once, however often it is sent.
//! What the answers mean is in [`response`].

mod body_format;
mod client;
mod response;

pub use body_format::BodyFormat;

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_ENCODING, CONTENT_TYPE, USER_AGENT};
use http::{HeaderMap, HeaderName, HeaderValue, Uri};
use http_body_util::{BodyExt, Full, Limited};
use penstock_dialect::Sink;
use penstock_engine::Signal;
use penstock_engine::otlp::json;

use super::compress::{self, Compression};
use super::contract::{Placement, SinkContext, SinkDriver};
use super::export::{self, Accepted, Failure, Settings, Transport};
use crate::gateway::base::error::{ErrorChain, GatewayError};

/// How an OTLP/HTTP sink's requests reach the backend.
pub struct OtlpHttp {
    client: client::HttpClient,
    /// The URL of each signal, in [`signal_index`] order.
    urls: [Uri; 3],
    encoding: BodyFormat,
    compression: Compression,
    /// Sent with every request.
    headers: HeaderMap,
    timeout: Duration,
}

/// Where [`OtlpHttp::urls`] holds a signal's URL.
fn signal_index(signal: Signal) -> usize {
    match signal {
        Signal::Logs => 0,
        Signal::Traces => 1,
        Signal::Metrics => 2,
    }
}

/// An OTLP/HTTP sink's settings and transport, from its options; connects on first use.
pub fn config(sink: &Sink, base: &std::path::Path) -> Result<(Settings, OtlpHttp), GatewayError> {
    let endpoint = sink.options.str("endpoint").unwrap_or_default();
    let url = |path: &str| {
        let url = format!("{}{path}", endpoint.trim_end_matches('/'));
        Uri::try_from(url.as_str()).map_err(|source| GatewayError::SinkUrl {
            sink_name: sink.name.clone(),
            url,
            source,
        })
    };
    let encoding = match sink.options.str("encoding") {
        Some("json") => BodyFormat::Json,
        _ => BodyFormat::Protobuf,
    };
    let compression = Compression::from_option(sink.options.str("compression"), Compression::Gzip);
    let tls = crate::gateway::base::tls::client_config(sink, base, &client::ALPN)?;
    let transport = OtlpHttp {
        client: client::client(tls),
        urls: [url("/v1/logs")?, url("/v1/traces")?, url("/v1/metrics")?],
        encoding,
        compression,
        headers: headers(sink, encoding, compression)?,
        timeout: export::timeout(sink),
    };
    Ok((Settings::from_sink(sink), transport))
}

/// The headers of every request: content type and encoding, user agent, the `headers`
/// option, and `authorization` from `auth_token`.
fn headers(
    sink: &Sink,
    encoding: BodyFormat,
    compression: Compression,
) -> Result<HeaderMap, GatewayError> {
    let invalid = |message: String| GatewayError::SinkHeaders {
        sink_name: sink.name.clone(),
        message,
    };
    let mut map = HeaderMap::new();
    let option = sink.options.str("headers").unwrap_or_default();
    for (name, value) in penstock_dialect::options::parse_headers(option).map_err(invalid)? {
        let name = HeaderName::try_from(name.as_str())
            .map_err(|_| invalid(format!("'{name}' is not a header name")))?;
        let value = HeaderValue::try_from(value)
            .map_err(|_| invalid(format!("the value of '{name}' cannot be sent")))?;
        map.append(name, value);
    }
    if let Some(token) = sink.options.str("auth_token") {
        if map.contains_key(AUTHORIZATION) {
            return Err(invalid(
                "auth_token and an authorization header in headers: give only one".into(),
            ));
        }
        let value = HeaderValue::try_from(format!("Bearer {token}")).map_err(|_| {
            GatewayError::AuthToken {
                sink_name: sink.name.clone(),
            }
        })?;
        map.insert(AUTHORIZATION, value);
    }
    map.insert(
        CONTENT_TYPE,
        HeaderValue::from_static(encoding.content_type()),
    );
    if let Some(coding) = compression.header() {
        map.insert(CONTENT_ENCODING, HeaderValue::from_static(coding));
    }
    let agent = concat!("penstock/", env!("CARGO_PKG_VERSION"));
    map.insert(USER_AGENT, HeaderValue::from_static(agent));
    Ok(map)
}

impl Transport for OtlpHttp {
    type Request = Bytes;

    fn prepare(&self, signal: Signal, protobuf: Bytes) -> Result<Bytes, String> {
        let body = match self.encoding {
            BodyFormat::Protobuf => protobuf,
            BodyFormat::Json => json::protobuf_to_json(signal, &protobuf)
                .map(Bytes::from)
                .map_err(|e| format!("encoding OTLP JSON: {e}"))?,
        };
        match self.compression {
            Compression::None => Ok(body),
            compression => compress::append(Vec::new(), &body, compression)
                .map(Bytes::from)
                .map_err(|e| format!("compressing the request: {e}")),
        }
    }

    async fn send(&self, signal: Signal, body: &Bytes) -> Result<Accepted, Failure> {
        let unavailable = |message: String| Failure {
            message,
            retryable: true,
            retry_after: None,
        };
        let mut request = http::Request::post(self.urls[signal_index(signal)].clone())
            .body(Full::new(body.clone()))
            .map_err(|e| Failure {
                message: format!("building the request: {e}"),
                retryable: false,
                retry_after: None,
            })?;
        *request.headers_mut() = self.headers.clone();
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|e| unavailable(format!("sending: {}", ErrorChain(&e))))?;
            let (parts, body) = response.into_parts();
            let body = Limited::new(body, response::MAX_RESPONSE_BYTES)
                .collect()
                .await
                .map(|collected| collected.to_bytes())
                .map_err(|e| format!("reading the response: {e}"));
            let now = SystemTime::now();
            response::outcome(parts.status, &parts.headers, body, self.encoding, now)
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| unavailable(format!("no response within {:?}", self.timeout)))?
    }
}

/// The OTLP_HTTP sink kind.
pub struct OtlpHttpSink;

impl SinkDriver for OtlpHttpSink {
    fn placement(&self) -> Placement {
        Placement::PerWorker
    }

    fn start(&self, context: SinkContext) -> Result<tokio::task::JoinHandle<()>, GatewayError> {
        let (settings, http) = config(&context.sink, &context.base)?;
        Ok(export::spawn(settings, http, context))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sink(options: &str) -> Sink {
        let sql = format!("CREATE SINK s TO OTLP_HTTP WITH ({options});");
        let mut program = penstock_pipeline::check_source("t.sql", &sql).unwrap();
        program.sinks.remove(0)
    }

    #[test]
    fn signal_paths_follow_the_base_url_and_its_prefix() {
        let base = std::path::Path::new(".");
        let (_, http) = config(&sink("endpoint = 'https://h.example/otlp/'"), base).unwrap();
        let urls: Vec<String> = http.urls.iter().map(Uri::to_string).collect();
        assert_eq!(
            urls,
            [
                "https://h.example/otlp/v1/logs",
                "https://h.example/otlp/v1/traces",
                "https://h.example/otlp/v1/metrics"
            ]
        );
        let (_, http) = config(&sink("endpoint = 'http://127.0.0.1:4318'"), base).unwrap();
        assert_eq!(http.urls[2].to_string(), "http://127.0.0.1:4318/v1/metrics");
    }

    #[test]
    fn every_request_carries_its_formats_the_headers_and_the_token() {
        let options = "endpoint = 'http://h:1', encoding = 'json', compression = 'zstd', \
                       headers = 'x-tenant=acme', auth_token = 't0k'";
        let map = headers(&sink(options), BodyFormat::Json, Compression::Zstd).unwrap();
        assert_eq!(map[CONTENT_TYPE], "application/json");
        assert_eq!(map[CONTENT_ENCODING], "zstd");
        assert_eq!(map["x-tenant"], "acme");
        assert_eq!(map[AUTHORIZATION], "Bearer t0k");
        let plain = headers(
            &sink("endpoint = 'http://h:1'"),
            BodyFormat::Protobuf,
            Compression::None,
        )
        .unwrap();
        assert_eq!(plain[CONTENT_TYPE], "application/x-protobuf");
        assert!(!plain.contains_key(CONTENT_ENCODING));
        let twice =
            "endpoint = 'http://h:1', headers = 'authorization=Basic eA==', auth_token = 't'";
        let error = headers(&sink(twice), BodyFormat::Json, Compression::None).unwrap_err();
        assert!(error.to_string().contains("give only one"), "{error}");
    }
}
