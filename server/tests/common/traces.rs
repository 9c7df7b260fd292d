//! Traces for the tail-sampling tests: requests of one service's spans, and sending them with
//! the Go pdata traces client (`otap-interop export-traces`, gzip).

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::Command;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
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
    let frames: Vec<Vec<u8>> = requests.iter().map(Message::encode_to_vec).collect();
    send_frames(binary, addr, connections, "traces", &frames);
}

/// Sends the export requests of `signal` (traces or metrics) encoded in `frames` to `addr`
/// with the pdata gRPC client of the Go helper `binary` (gzip), request i on connection i mod
/// `connections`, each connection's requests one after the other; every answer must be OK.
pub fn send_frames(binary: &Path, addr: &str, connections: u32, signal: &str, frames: &[Vec<u8>]) {
    let connections = connections.to_string();
    let mut child = spawn_piped(Command::new(binary).args([
        "export-traces",
        "-signal",
        signal,
        "-addr",
        addr,
        "-connections",
        &connections,
    ]));
    let mut stdin = child.stdin.take().unwrap();
    for bytes in frames {
        stdin
            .write_all(&(bytes.len() as u32).to_le_bytes())
            .unwrap();
        stdin.write_all(bytes).unwrap();
    }
    drop(stdin);
    let out = BufReader::new(child.stdout.take().unwrap());
    let answers: Vec<String> = out.lines().map(Result::unwrap).collect();
    assert!(child.wait().unwrap().success(), "export-traces failed");
    assert_eq!(answers.len(), frames.len(), "{answers:?}");
    for a in &answers {
        assert!(a.contains("\"code\":\"OK\""), "{a}");
    }
}

/// Whether trace `i` of [`roots_and_children`] has an error (its child span's status).
pub fn has_error(i: usize) -> bool {
    i.is_multiple_of(3)
}

/// Whether OpenTelemetry's consistent probability sampling keeps `id` at `share`: its last 7
/// bytes, big-endian, at least (1 - share) × 2^56.
pub fn in_share(id: &[u8], share: f64) -> bool {
    let random = id[9..]
        .iter()
        .fold(0u64, |acc, b| (acc << 8) | u64::from(*b));
    random >= ((1.0 - share) * (1u64 << 56) as f64).round() as u64
}

/// One request of span `name` ("root" or "child") of each trace in `traces`; a child of a
/// trace [`has_error`] says has one has status code 2.
pub fn spans_of(traces: std::ops::Range<usize>, name: &str) -> ExportTraceServiceRequest {
    request(
        traces
            .map(|i| Span {
                trace_id: trace_id(i as u64),
                span_id: vec![i as u8 + 1, 0, 0, 0, 0, 0, 0, u8::from(name == "child") + 1],
                name: format!("{name}-{i}"),
                kind: 2,
                start_time_unix_nano: 1_750_000_000_000_000_000,
                end_time_unix_nano: 1_750_000_000_010_000_000,
                status: (name == "child" && has_error(i)).then(|| Status {
                    code: 2,
                    message: "failed".into(),
                }),
                ..Default::default()
            })
            .collect(),
    )
}

/// Traces `0..count` of two spans each, in four requests: the roots of the first half, their
/// children, then the same for the second half. Sent over two connections, the root and the
/// child of every trace come on different ones.
pub fn roots_and_children(count: usize) -> [ExportTraceServiceRequest; 4] {
    let half = count / 2;
    [
        spans_of(0..half, "root"),
        spans_of(0..half, "child"),
        spans_of(half..count, "root"),
        spans_of(half..count, "child"),
    ]
}

/// The spans of `requests` of the traces numbered in `kept`, canonical (see
/// [`penstock_engine::equiv::traces`]), sorted.
pub fn records_of(requests: &[ExportTraceServiceRequest], kept: &BTreeSet<usize>) -> Vec<String> {
    let mut want: Vec<String> = requests
        .iter()
        .flat_map(|r| {
            let mut r = r.clone();
            for rs in &mut r.resource_spans {
                for ss in &mut rs.scope_spans {
                    ss.spans
                        .retain(|span| kept.iter().any(|i| trace_id(*i as u64) == span.trace_id));
                }
            }
            penstock_engine::equiv::traces(&r)
        })
        .collect();
    want.sort();
    want
}
