//! Decoding does not depend on the order of fields in `Scope*` messages, and a scope whose
//! schema URL follows its records keeps that URL when the request splits into batches.

#![allow(clippy::unwrap_used)]

mod common;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use penstock_engine::Signal;
use prost::Message;

fn record(i: u64) -> LogRecord {
    LogRecord {
        time_unix_nano: i + 1,
        severity_text: format!("s{}", i % 3),
        ..Default::default()
    }
}

fn request(records: usize) -> ExportLogsServiceRequest {
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            scope_logs: vec![ScopeLogs {
                scope: Some(InstrumentationScope {
                    name: "lib".into(),
                    ..Default::default()
                }),
                log_records: (0..records as u64).map(record).collect(),
                schema_url: "https://example.com/schema".into(),
            }],
            ..Default::default()
        }],
    }
}

/// Scenario: 70,000 records in one scope whose schema URL is written after them, so the
/// request splits into two batches before the URL is read.
/// Guarantees: every record of both batches carries the scope's URL.
#[test]
fn schema_url_after_records_survives_a_split() {
    let request = request(70_000);
    let bytes = request.encode_to_vec();
    let batches = penstock_engine::otlp::decode::decode(Signal::Logs, &bytes).unwrap();
    assert_eq!(batches.len(), 2);
    assert_eq!(
        common::otlp_lines(&batches),
        common::canonical(Signal::Logs, &bytes)
    );
}

/// Scenario: the same scope written with its fields in unusual orders (URL first, records
/// before the scope, the scope last).
/// Guarantees: every order decodes to the same records as the usual order.
#[test]
fn field_order_does_not_matter() {
    let request = request(5);
    let expected = common::canonical(Signal::Logs, &request.encode_to_vec());
    let scope_logs = &request.resource_logs[0].scope_logs[0];
    let scope = common::field(1, &scope_logs.scope.as_ref().unwrap().encode_to_vec());
    let url = common::field(3, scope_logs.schema_url.as_bytes());
    let records: Vec<Vec<u8>> = scope_logs
        .log_records
        .iter()
        .map(|r| common::field(2, &r.encode_to_vec()))
        .collect();
    let orders: Vec<Vec<&[u8]>> = vec![
        [&url[..], &scope[..]]
            .into_iter()
            .chain(records.iter().map(Vec::as_slice))
            .collect(),
        [&scope[..], &url[..]]
            .into_iter()
            .chain(records.iter().map(Vec::as_slice))
            .collect(),
        records
            .iter()
            .map(Vec::as_slice)
            .chain([&scope[..], &url[..]])
            .collect(),
        [&records[0][..], &url[..], &scope[..]]
            .into_iter()
            .chain(records[1..].iter().map(Vec::as_slice))
            .collect(),
        [&scope[..]]
            .into_iter()
            .chain(records[..2].iter().map(Vec::as_slice))
            .chain([&url[..]])
            .chain(records[2..].iter().map(Vec::as_slice))
            .collect(),
    ];
    for (i, parts) in orders.iter().enumerate() {
        let scope_logs: Vec<u8> = parts.concat();
        let bytes = common::field(1, &common::field(2, &scope_logs));
        let batches = penstock_engine::otlp::decode::decode(Signal::Logs, &bytes).unwrap();
        assert_eq!(common::otlp_lines(&batches), expected, "order {i}");
    }
}
