//! The HTTP source end to end: OTLP/HTTP requests over real HTTP/1.1 on loopback, protobuf and
//! JSON, gzip and zstd, answered only after the FILE sink wrote the transformed records; bad
//! requests get the OTLP/HTTP status codes with a `google.rpc.Status` body, and the source
//! keeps serving.

#![allow(clippy::unwrap_used)]

mod common;

use std::io::Write;
use std::path::Path;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use penstock_engine::datagen::DataGen;
use penstock_engine::{Signal, equiv, otlp};
use prost::Message;

use common::{Gateway, RENAME_AND_FILTER, block_on, expected, temp_dir};

/// A response: status, content type, body.
struct Reply {
    status: StatusCode,
    content_type: String,
    headers: http::HeaderMap,
    body: Bytes,
}

/// Sends one HTTP/1.1 request with `headers` and `body` to `addr`.
fn request(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: Vec<u8>) -> Reply {
    block_on(async {
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(connection);
        let mut builder = Request::builder()
            .method(method)
            .uri(path)
            .header("host", addr);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        let response = sender
            .send_request(builder.body(Full::new(Bytes::from(body))).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let content_type = headers
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        Reply {
            status,
            content_type,
            headers,
            body,
        }
    })
}

const PROTOBUF: (&str, &str) = ("content-type", "application/x-protobuf");
const JSON: (&str, &str) = ("content-type", "application/json");
const TOKEN: (&str, &str) = ("authorization", "Bearer s3cret");

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

fn gateway(dir: &Path) -> Gateway {
    let out = dir.join("received.jsonl");
    Gateway::start(
        dir,
        "web",
        &format!(
            "CREATE SOURCE web FROM HTTP WITH (listen = '127.0.0.1:0', auth_token = 's3cret',
               cors_origins = 'https://app.example', max_body_bytes = 4000000);
             CREATE SINK received TO FILE WITH (path = '{}');
             CREATE PIPELINE p FROM web AS BEGIN {RENAME_AND_FILTER}
               INSERT INTO received SELECT * FROM logs;
               INSERT INTO received SELECT * FROM spans;
               INSERT INTO received SELECT * FROM metrics;
             END;",
            out.display()
        ),
    )
}

/// The records in the FILE sink, by signal, as sorted equivalence lines.
fn received(dir: &Path) -> [Vec<String>; 3] {
    let text = std::fs::read_to_string(dir.join("received.jsonl")).unwrap_or_default();
    let mut out: [Vec<String>; 3] = Default::default();
    for (i, line) in text.lines().enumerate() {
        let (signal, bytes) = otlp::json::line_to_protobuf(line, i + 1).unwrap();
        match signal {
            Signal::Logs => out[0].extend(equiv::logs(
                &ExportLogsServiceRequest::decode(bytes.as_slice()).unwrap(),
            )),
            Signal::Traces => out[1].extend(equiv::traces(
                &ExportTraceServiceRequest::decode(bytes.as_slice()).unwrap(),
            )),
            Signal::Metrics => out[2].extend(equiv::metrics(
                &ExportMetricsServiceRequest::decode(bytes.as_slice()).unwrap(),
            )),
        }
    }
    out.each_mut().map(|lines| {
        lines.sort();
        std::mem::take(lines)
    })
}

#[test]
fn otlp_http_protobuf_and_json_are_transformed_and_acknowledged_after_delivery() {
    let dir = temp_dir("http");
    let web = gateway(&dir);
    let addr = web.addr_of("web");
    let mut data = DataGen::new(11);

    // Protobuf logs, gzip and zstd encoded.
    let logs = [data.logs(400), data.logs(400)];
    let gzipped = gzip(&logs[0].encode_to_vec());
    let reply = request(
        addr,
        "POST",
        "/v1/logs",
        &[PROTOBUF, TOKEN, ("content-encoding", "gzip")],
        gzipped,
    );
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    assert_eq!(reply.content_type, "application/x-protobuf");
    assert!(
        reply.body.is_empty(),
        "an export response without partial success"
    );
    let zstd = zstd::encode_all(logs[1].encode_to_vec().as_slice(), 3).unwrap();
    let reply = request(
        addr,
        "POST",
        "/v1/logs",
        &[PROTOBUF, TOKEN, ("content-encoding", "zstd")],
        zstd,
    );
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);

    // JSON spans and metrics, as browsers and JSON-speaking SDKs send them.
    let traces = data.traces(200);
    let reply = request(
        addr,
        "POST",
        "/v1/traces",
        &[JSON, TOKEN],
        serde_json::to_vec(&traces).unwrap(),
    );
    assert_eq!(
        (reply.status, reply.body.as_ref()),
        (StatusCode::OK, &b"{}"[..])
    );
    assert_eq!(reply.content_type, "application/json");
    let metrics = data.metrics(200);
    let reply = request(
        addr,
        "POST",
        "/v1/metrics",
        &[JSON, TOKEN],
        serde_json::to_vec(&metrics).unwrap(),
    );
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);

    // Acknowledged means written: the file already holds every record, transformed.
    let mut want_logs: Vec<String> = logs.iter().flat_map(expected).collect();
    want_logs.sort();
    let mut want_spans = equiv::traces(&traces);
    want_spans.sort();
    let mut want_points = equiv::metrics(&metrics);
    want_points.sort();
    let [got_logs, got_spans, got_points] = received(&dir);
    for (want, got) in [
        (want_logs, got_logs),
        (want_spans, got_spans),
        (want_points, got_points),
    ] {
        assert!(!want.is_empty());
        if let Some(diff) = equiv::first_difference(&want, &got) {
            panic!("{diff}");
        }
        assert_eq!(want.len(), got.len());
    }
}

/// The `google.rpc.Status` code of a protobuf error body.
fn rpc_code(body: &[u8]) -> i32 {
    // Field 1 (code) is a varint: tag 0x08.
    assert_eq!(body.first(), Some(&0x08), "{body:?}");
    i32::from(body[1])
}

/// What, path, headers, body; expected HTTP status and `google.rpc.Status` code.
type BadRequest<'a> = (
    &'a str,
    &'a str,
    Vec<(&'a str, &'a str)>,
    Vec<u8>,
    StatusCode,
    i32,
);

#[test]
fn bad_requests_get_otlp_http_errors_and_the_source_keeps_serving() {
    let dir = temp_dir("http-bad");
    let web = gateway(&dir);
    let addr = web.addr_of("web");
    let logs = DataGen::new(12).logs(50).encode_to_vec();
    let cases: Vec<BadRequest> = vec![
        (
            "no token",
            "/v1/logs",
            vec![PROTOBUF],
            logs.clone(),
            StatusCode::UNAUTHORIZED,
            16,
        ),
        (
            "wrong token",
            "/v1/logs",
            vec![PROTOBUF, ("authorization", "Bearer nope")],
            logs.clone(),
            StatusCode::UNAUTHORIZED,
            16,
        ),
        (
            "unknown path",
            "/v1/profiles",
            vec![PROTOBUF, TOKEN],
            logs.clone(),
            StatusCode::NOT_FOUND,
            5,
        ),
        (
            "unknown content type",
            "/v1/logs",
            vec![("content-type", "text/plain"), TOKEN],
            logs.clone(),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            3,
        ),
        (
            "unknown content encoding",
            "/v1/logs",
            vec![PROTOBUF, TOKEN, ("content-encoding", "br")],
            logs.clone(),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            3,
        ),
        (
            "malformed protobuf",
            "/v1/logs",
            vec![PROTOBUF, TOKEN],
            vec![0x0a, 0xff, 0xff],
            StatusCode::BAD_REQUEST,
            3,
        ),
        (
            "corrupt gzip",
            "/v1/logs",
            vec![PROTOBUF, TOKEN, ("content-encoding", "gzip")],
            b"not gzip at all".to_vec(),
            StatusCode::BAD_REQUEST,
            3,
        ),
        (
            // 64 MiB of zeros in about 64 KiB: refused once 4 MB are inflated.
            "gzip bomb",
            "/v1/logs",
            vec![PROTOBUF, TOKEN, ("content-encoding", "gzip")],
            gzip(&vec![0u8; 64 << 20]),
            StatusCode::PAYLOAD_TOO_LARGE,
            8,
        ),
    ];
    for (what, path, headers, body, status, code) in cases {
        let reply = request(addr, "POST", path, &headers, body);
        assert_eq!(reply.status, status, "{what}: {:?}", reply.body);
        assert_eq!(rpc_code(&reply.body), code, "{what}");
    }
    // A body declared larger than the limit is refused before it is read: the answer comes
    // while the client has sent only the headers and a few bytes.
    {
        use std::io::Read;
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        let head = format!(
            "POST /v1/logs HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/x-protobuf\r\n\
             authorization: Bearer s3cret\r\ncontent-length: 5000000\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).unwrap();
        stream.write_all(&[0u8; 1000]).unwrap();
        let mut answer = [0u8; 12];
        stream.read_exact(&mut answer).unwrap();
        assert_eq!(
            &answer,
            b"HTTP/1.1 413",
            "{}",
            String::from_utf8_lossy(&answer)
        );
    }
    // JSON requests get JSON errors.
    let reply = request(
        addr,
        "POST",
        "/v1/logs",
        &[JSON, TOKEN],
        b"{\"resourceLogs\": 7}".to_vec(),
    );
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    let error: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(error["code"], 3, "{error}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("malformed OTLP logs"),
        "{error}"
    );
    let reply = request(addr, "GET", "/v1/logs", &[TOKEN], Vec::new());
    assert_eq!(reply.status, StatusCode::METHOD_NOT_ALLOWED);

    // A browser's preflight from an allowed origin, and the CORS header on its export.
    let origin = ("origin", "https://app.example");
    let reply = request(addr, "OPTIONS", "/v1/logs", &[origin], Vec::new());
    assert_eq!(reply.status, StatusCode::NO_CONTENT);
    assert_eq!(
        reply.headers["access-control-allow-origin"],
        "https://app.example"
    );
    let reply = request(
        addr,
        "OPTIONS",
        "/v1/logs",
        &[("origin", "https://evil.example")],
        Vec::new(),
    );
    assert!(!reply.headers.contains_key("access-control-allow-origin"));
    let reply = request(
        addr,
        "POST",
        "/v1/logs",
        &[PROTOBUF, TOKEN, origin],
        logs.clone(),
    );
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(
        reply.headers["access-control-allow-origin"],
        "https://app.example"
    );
    assert!(
        !received(&dir)[0].is_empty(),
        "the good request went through"
    );
}

/// Scenario: with `admission = 'refuse'`, one worker and budgets that allow the fewest
/// requests being received at once (8), eight clients send the headers and part of a body,
/// then stall; a ninth sends a whole request.
/// Guarantees: the ninth is refused with 429 at once (its body is not taken in while eight
/// bodies are pending); once one stalled client finishes its body, that request is
/// acknowledged and delivered, and the ninth is served when it retries.
#[test]
fn requests_past_the_receiving_limit_are_refused_until_one_finishes() {
    use std::io::Read;
    let dir = temp_dir("receiving");
    let web = Gateway::start_with(
        &dir,
        "web",
        &format!(
            "CREATE SOURCE web FROM HTTP WITH (listen = '127.0.0.1:0', admission = 'refuse',
               max_in_flight_bytes = 1000000, max_body_bytes = 1000000);
             CREATE SINK received TO FILE WITH (path = '{}');
             CREATE PIPELINE p FROM web AS BEGIN INSERT INTO received SELECT * FROM logs; END;",
            dir.join("received.jsonl").display()
        ),
        &["--workers", "1", "--admin-listen", "127.0.0.1:0"],
    );
    let addr = web.addr_of("web").to_string();
    let mut data = DataGen::new(12);
    let stalled_request = data.logs(30);
    let body = stalled_request.encode_to_vec();
    let head = format!(
        "POST /v1/logs HTTP/1.1\r\nhost: web\r\ncontent-type: application/x-protobuf\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    let mut stalled: Vec<std::net::TcpStream> = (0..8)
        .map(|_| {
            let mut stream = std::net::TcpStream::connect(&addr).unwrap();
            stream.write_all(head.as_bytes()).unwrap();
            stream.write_all(&body[..10]).unwrap();
            stream
        })
        .collect();
    web.wait_until("8 requests being received", |g| {
        g.metric("penstock_receiving_requests") == 8.0
    });
    let ninth = data.logs(5);
    let refused = request(
        &addr,
        "POST",
        "/v1/logs",
        &[PROTOBUF],
        ninth.encode_to_vec(),
    );
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);

    let mut first = stalled.remove(0);
    first.write_all(&body[10..]).unwrap();
    let mut answer = [0u8; 12];
    first.read_exact(&mut answer).unwrap();
    assert_eq!(
        &answer, b"HTTP/1.1 200",
        "the finished request is acknowledged"
    );
    let served = request(
        &addr,
        "POST",
        "/v1/logs",
        &[PROTOBUF],
        ninth.encode_to_vec(),
    );
    assert_eq!(served.status, StatusCode::OK);
    let mut want = equiv::logs(&stalled_request);
    want.extend(equiv::logs(&ninth));
    want.sort();
    assert_eq!(received(&dir)[0], want);
    drop(stalled);
    web.wait_until("the stalled requests to go", |g| {
        g.metric("penstock_receiving_requests") == 0.0
    });
}
