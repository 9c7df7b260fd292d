//! Traces for the tail-sampling tests: requests of one service's spans, and sending them with
//! the Go pdata traces client (`otap-interop export-traces`, gzip).

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::Command;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;

use super::go::spawn_piped;

/// Pseudo-random trace id number `n`, as W3C ids are random.
pub fn trace_id(n: u64) -> Vec<u8> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ (n + 1).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    (0..16)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

/// A request of `spans`, all of service `checkout`, scope `http`.
pub fn request(spans: Vec<Span>) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![KeyValue {
                    key: "service.name".into(),
                    value: Some(AnyValue {
                        value: Some(any_value::Value::StringValue("checkout".into())),
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "http".into(),
                    ..Default::default()
                }),
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// Sends `requests` to `addr` with the Go helper `binary`, request i on connection i mod
/// `connections`; every answer must be OK.
pub fn send(binary: &Path, addr: &str, connections: u32, requests: &[ExportTraceServiceRequest]) {
    let connections = connections.to_string();
    let mut child = spawn_piped(Command::new(binary).args([
        "export-traces",
        "-addr",
        addr,
        "-connections",
        &connections,
    ]));
    let mut stdin = child.stdin.take().unwrap();
    for r in requests {
        let bytes = r.encode_to_vec();
        stdin
            .write_all(&(bytes.len() as u32).to_le_bytes())
            .unwrap();
        stdin.write_all(&bytes).unwrap();
    }
    drop(stdin);
    let out = BufReader::new(child.stdout.take().unwrap());
    let answers: Vec<String> = out.lines().map(Result::unwrap).collect();
    assert!(child.wait().unwrap().success(), "export-traces failed");
    assert_eq!(answers.len(), requests.len(), "{answers:?}");
    for a in &answers {
        assert!(a.contains("\"code\":\"OK\""), "{a}");
    }
}
