//! The gateway's OTLP/HTTP sink against a real OTLP/HTTP receiver (`otap-interop
//! serve-otlp-http` in `tests/interop-go`: net/http with the pdata request types, reading
//! protobuf and OTLP JSON bodies, gzip and zstd, as the Collector's OTLP receiver does), for
//! every signal, both encodings and every compression; and its answers: a 503 with
//! `Retry-After` (seconds or an HTTP date) is retried after the wait asked for, a 400 is not
//! retried and fails the batch, partial successes are counted.
//!
//! The receiver writes every request it accepted as pdata marshals it, so the records the
//! gateway sent (JSON ones included) are compared field by field with what was sent to it,
//! and it reports each request (content type and encoding, status, headers, time) on stderr.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceResponse;
use penstock_engine::datagen::DataGen;
use penstock_engine::equiv;

use common::go::interop_binary;
use common::otlp_go::{LOGS, OtlpReceiver, deliver_every_signal, export, log_records, series};
use common::{Gateway, block_on, temp_dir};

/// One request as serve-otlp-http reported it.
#[derive(Debug)]
struct Request {
    path: String,
    proto: String,
    content_type: String,
    content_encoding: String,
    status: u64,
    items: u64,
    unix_ms: u64,
    headers: BTreeMap<String, String>,
}

/// The requests a receiver reported on stderr (one JSON line each), in order.
fn requests(stderr: &str) -> Vec<Request> {
    let lines = stderr.lines().filter(|l| l.starts_with('{'));
    lines
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let text = |key: &str| v[key].as_str().unwrap_or_default().to_string();
            let headers = v["headers"].as_object().map(|h| {
                let pairs = h
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap().into()));
                pairs.collect()
            });
            Request {
                path: text("path"),
                proto: text("proto"),
                content_type: text("content_type"),
                content_encoding: text("content_encoding"),
                status: v["status"].as_u64().unwrap(),
                items: v["items"].as_u64().unwrap(),
                unix_ms: v["unix_ms"].as_u64().unwrap(),
                headers: headers.unwrap_or_default(),
            }
        })
        .collect()
}

/// A serve-otlp-http receiver with `flags`, and a gateway relaying every signal to it
/// through `CREATE SINK out TO OTLP_HTTP` with `sink_options`; `None` without Go.
fn setup(name: &str, flags: &[&str], sink_options: &str) -> Option<(Gateway, OtlpReceiver)> {
    let binary = interop_binary()?;
    let dir = temp_dir(name);
    let receiver = OtlpReceiver::start(&binary, "serve-otlp-http", flags);
    let endpoint = format!("http://{}", receiver.addr);
    let gateway = common::otlp_go::relay(&dir, "OTLP_HTTP", &endpoint, sink_options).keeping(dir);
    Some((gateway, receiver))
}

/// Every signal through a sink with `sink_options`, all delivered; every request had
/// `content_type` and `content_encoding` and was accepted. Returns the requests.
fn round_trip(
    name: &str,
    sink_options: &str,
    content_type: &str,
    content_encoding: &str,
) -> Vec<Request> {
    let Some((gateway, receiver)) = setup(name, &[], sink_options) else {
        return Vec::new();
    };
    let requests = requests(&deliver_every_signal(name, gateway, receiver));
    for path in ["/v1/logs", "/v1/traces", "/v1/metrics"] {
        assert!(
            requests.iter().any(|r| r.path == path),
            "{name}: no request to {path}: {requests:?}"
        );
    }
    for r in &requests {
        assert_eq!(r.status, 200, "{name}: {r:?}");
        assert_eq!(r.proto, "HTTP/1.1", "{name}: {r:?}");
        assert_eq!(r.content_type, content_type, "{name}: {r:?}");
        assert_eq!(r.content_encoding, content_encoding, "{name}: {r:?}");
    }
    requests
}

/// Every signal through sinks with `encoding`, one per compression (none, gzip, zstd).
fn every_compression(encoding: &str, content_type: &str) {
    for (compression, content_encoding) in [("none", ""), ("gzip", "gzip"), ("zstd", "zstd")] {
        let name = format!("otlp-http-{encoding}-{compression}");
        let options = format!(", encoding = '{encoding}', compression = '{compression}'");
        round_trip(&name, &options, content_type, content_encoding);
    }
}

#[test]
fn protobuf_bodies_with_every_compression_deliver_every_signal() {
    every_compression("protobuf", "application/x-protobuf");
}

#[test]
fn json_bodies_with_every_compression_are_read_by_pdata_field_for_field() {
    every_compression("json", "application/json");
}

#[test]
fn defaults_are_protobuf_and_gzip_and_headers_and_token_are_sent() {
    let options = ", headers = 'x-tenant=acme, X-Scope=a%2Cb', auth_token = 's3cret'";
    let requests = round_trip(
        "otlp-http-defaults",
        options,
        "application/x-protobuf",
        "gzip",
    );
    for r in &requests {
        assert_eq!(r.headers["x-tenant"], "acme", "{r:?}");
        assert_eq!(r.headers["x-scope"], "a,b", "{r:?}");
        assert_eq!(r.headers["authorization"], "Bearer s3cret", "{r:?}");
        assert!(r.headers["user-agent"].starts_with("penstock/"), "{r:?}");
    }
}

#[test]
fn https_with_tls_ca_negotiates_http2() {
    let Some(binary) = interop_binary() else {
        return;
    };
    let name = "otlp-http-tls";
    let dir = temp_dir(name);
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, certified.cert.pem()).unwrap();
    std::fs::write(&key, certified.signing_key.serialize_pem()).unwrap();
    let flags = [
        "-tls-cert",
        cert.to_str().unwrap(),
        "-tls-key",
        key.to_str().unwrap(),
    ];
    let receiver = OtlpReceiver::start(&binary, "serve-otlp-http", &flags);
    let port = receiver.addr.rsplit(':').next().unwrap().to_string();
    // The certificate is for localhost; a trailing slash on the base URL is harmless.
    let endpoint = format!("https://localhost:{port}/");
    let options = ", tls_ca = 'cert.pem', auth_token = 'over-tls'";
    let gateway = common::otlp_go::relay(&dir, "OTLP_HTTP", &endpoint, options);
    let requests = requests(&deliver_every_signal(name, gateway, receiver));
    assert!(!requests.is_empty());
    for r in &requests {
        assert_eq!((r.status, r.proto.as_str()), (200, "HTTP/2.0"), "{r:?}");
        assert_eq!(r.headers["authorization"], "Bearer over-tls", "{r:?}");
    }
}

/// The value of sink `out`'s counter `name` (`penstock_sink_NAME_total`).
fn sink_counter(gateway: &Gateway, name: &str) -> f64 {
    let series_name = format!("penstock_sink_{name}_total{{sink=\"out\"}}");
    series(&gateway.metrics_text(), &series_name).unwrap_or_else(|| panic!("no {series_name}"))
}

/// Sends one logs Export of `records` records (seeded) to the gateway; returns its
/// equivalence lines and the gateway's answer.
fn send_logs(gateway: &Gateway, seed: u64, records: usize) -> (Vec<String>, Result<(), String>) {
    let request = DataGen::new(seed).logs(records);
    let lines = equiv::logs(&request);
    assert_eq!(log_records(&request), records);
    let path = "/opentelemetry.proto.collector.logs.v1.LogsService/Export";
    let answer = block_on(export::<_, ExportLogsServiceResponse>(
        &gateway.url(),
        path,
        request,
    ));
    let answer = answer
        .map(|_| ())
        .map_err(|s| format!("{:?}: {}", s.code(), s.message()));
    (lines, answer)
}

#[test]
fn partial_success_in_compressed_json_responses_is_counted() {
    let options = ", encoding = 'json', compression = 'zstd'";
    rejected_per_request("otlp-http-partial-json", options);
}

#[test]
fn partial_success_in_compressed_protobuf_responses_is_counted() {
    let options = ", encoding = 'protobuf', compression = 'gzip'";
    rejected_per_request("otlp-http-partial-proto", options);
}

/// A receiver that answers every request with a partial success rejecting 2 records (its
/// responses compressed as the requests are) and a sink with `sink_options`: each Export is
/// acknowledged OK, and the gateway counts 2 rejected records per request accepted.
fn rejected_per_request(name: &str, sink_options: &str) {
    let flags = [
        "-rejected",
        "2",
        "-warning",
        "too old",
        "-compress-responses",
    ];
    let Some((gateway, receiver)) = setup(name, &flags, sink_options) else {
        return;
    };
    for seed in [1, 2] {
        let (_, answer) = send_logs(&gateway, seed, 50);
        assert_eq!(answer, Ok(()), "{name}: a partial success is not a failure");
    }
    receiver.wait_for([100, 0, 0]);
    gateway.wait_until("the sink to count 100 records", |g| {
        sink_counter(g, "records") >= 100.0
    });
    let rejected = sink_counter(&gateway, "rejected_records");
    assert_eq!(sink_counter(&gateway, "failures"), 0.0, "{name}");
    assert_eq!(
        sink_counter(&gateway, "unreadable_responses"),
        0.0,
        "{name}"
    );
    let (ok, output) = gateway.terminate();
    assert!(ok, "{output:?}");
    let (_, stderr) = receiver.finish();
    let accepted = requests(&stderr).iter().filter(|r| r.status == 200).count();
    assert!(accepted >= 1, "{stderr}");
    assert_eq!(rejected, 2.0 * accepted as f64, "{name}: {stderr}");
}

/// A receiver that refuses the first request with 503 and `retry_after_flags`: the gateway
/// sends it again no sooner than `at_least_ms` later, every signal is delivered, nothing
/// counts as failed.
fn a_503_is_retried_after_the_wait(name: &str, retry_after_flags: &[&str], at_least_ms: u64) {
    let mut flags = vec!["-fail-first", "1", "-fail-status", "503"];
    flags.extend_from_slice(retry_after_flags);
    let Some((gateway, receiver)) = setup(name, &flags, ", compression = 'none'") else {
        return;
    };
    let requests = requests(&deliver_every_signal(name, gateway, receiver));
    let first = &requests[0];
    assert_eq!(first.status, 503, "{requests:?}");
    let retry = requests[1..].iter().find(|r| r.path == first.path).unwrap();
    assert_eq!(retry.status, 200, "{requests:?}");
    assert_eq!(
        retry.items, first.items,
        "the same request again: {requests:?}"
    );
    let waited = retry.unix_ms - first.unix_ms;
    assert!(
        waited >= at_least_ms,
        "{name}: retried after {waited} ms, asked to wait {retry_after_flags:?}"
    );
}

#[test]
fn a_503_with_retry_after_seconds_is_retried_after_them() {
    // The backoff alone would retry after 100 ms.
    a_503_is_retried_after_the_wait("otlp-http-503-seconds", &["-retry-after", "1"], 950);
}

#[test]
fn a_503_with_retry_after_as_an_http_date_is_retried_after_it() {
    // An HTTP date has whole seconds: 2 s ahead is at least 1 s ahead.
    let flags = ["-retry-after-date", "2s"];
    a_503_is_retried_after_the_wait("otlp-http-503-date", &flags, 950);
}

/// A receiver with `flags` that refuses requests and a sink with `sink_options`: one logs
/// Export is refused by the gateway with an answer that starts with `code` and holds each
/// of `parts`, and the sink counts one failure.
fn refused_once(
    name: &str,
    flags: &[&str],
    sink_options: &str,
    code: &str,
    parts: &[&str],
) -> Option<(Gateway, OtlpReceiver)> {
    let (gateway, receiver) = setup(name, flags, sink_options)?;
    let (_, refused) = send_logs(&gateway, 1, 40);
    let refused = refused.unwrap_err();
    assert!(refused.starts_with(code), "{name}: {refused}");
    for part in parts {
        assert!(refused.contains(part), "{name}: {refused}");
    }
    gateway.wait_until("one failure", |g| sink_counter(g, "failures") == 1.0);
    Some((gateway, receiver))
}

#[test]
fn a_400_is_not_retried_and_fails_the_batch() {
    let flags = ["-fail-first", "1", "-fail-status", "400"];
    let parts = [
        "after 1 attempt(s)",
        "HTTP status 400 Bad Request",
        "refused by the test receiver",
    ];
    let refused = refused_once(
        "otlp-http-400",
        &flags,
        ", retries = 3",
        "Internal: ",
        &parts,
    );
    let Some((gateway, receiver)) = refused else {
        return;
    };
    // The sink goes on: the next batch is delivered.
    let (lines, answer) = send_logs(&gateway, 2, 30);
    assert_eq!(answer, Ok(()));
    let got = receiver.wait_for([30, 0, 0]);
    common::assert_same_records(lines, got.lines[LOGS].clone());
    gateway.wait_until("30 records", |g| sink_counter(g, "records") == 30.0);
    assert_eq!(sink_counter(&gateway, "failures"), 1.0);
    let (ok, output) = gateway.terminate();
    assert!(ok, "{output:?}");
    let (_, stderr) = receiver.finish();
    let statuses: Vec<u64> = requests(&stderr).iter().map(|r| r.status).collect();
    let not_retried = "one request refused, not retried";
    assert_eq!(statuses, [400, 200], "{not_retried}: {stderr}");
}

#[test]
fn retries_end_and_the_sender_is_told_to_come_back() {
    let flags = ["-fail-first", "100", "-retry-after", "0"];
    let parts = ["after 3 attempt(s)", "HTTP status 503"];
    let options = ", retries = 2";
    let refused = refused_once(
        "otlp-http-exhausted",
        &flags,
        options,
        "Unavailable: ",
        &parts,
    );
    let Some((gateway, receiver)) = refused else {
        return;
    };
    assert_eq!(sink_counter(&gateway, "records"), 0.0);
    let (ok, output) = gateway.terminate();
    assert!(ok, "{output:?}");
    let (got, stderr) = receiver.finish();
    assert_eq!(got.items, [0, 0, 0]);
    let statuses: Vec<u64> = requests(&stderr).iter().map(|r| r.status).collect();
    assert_eq!(statuses, [503, 503, 503], "{stderr}");
}
