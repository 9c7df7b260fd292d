//! Small requests packed with odd-but-encodable values to shake out converter bugs.

mod metrics;
mod odd;
mod traces;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;

use self::odd::{ODD_STRINGS, empty_name_scope, inner, nested, odd_attributes, odd_resource};
use crate::datagen::common::{any, any_str, kv_str};
use crate::datagen::generator::DataGen;

/// Builds the three edge-case requests.
pub(super) fn generate(
    g: &mut DataGen,
) -> (
    ExportLogsServiceRequest,
    ExportTraceServiceRequest,
    ExportMetricsServiceRequest,
) {
    let now = g.tick(1_000, 1_000_000);
    (
        logs(g, now),
        traces::traces(g, now),
        metrics::metrics(g, now),
    )
}

/// Logs: default records, odd bodies, empty containers.
fn logs(g: &mut DataGen, now: u64) -> ExportLogsServiceRequest {
    let bodies = [
        Value::StringValue(String::new()),
        Value::DoubleValue(f64::NAN),
        Value::DoubleValue(-0.0),
        Value::BytesValue(Vec::new()),
        Value::BoolValue(false),
        Value::IntValue(i64::MIN),
        Value::ArrayValue(Default::default()),
        Value::KvlistValue(Default::default()),
        inner(nested(5)),
    ];
    let mut records = vec![
        LogRecord::default(),
        LogRecord {
            time_unix_nano: u64::MAX,
            severity_number: 0,
            severity_text: "WARNING".to_owned(),
            body: Some(AnyValue::default()),
            attributes: odd_attributes(),
            flags: u32::MAX,
            trace_id: vec![0; 16],
            span_id: vec![0; 8],
            event_name: "événement.🔥".to_owned(),
            ..Default::default()
        },
    ];
    for (i, body) in bodies.into_iter().enumerate() {
        records.push(LogRecord {
            time_unix_nano: now + i as u64,
            observed_time_unix_nano: now,
            severity_number: 24,
            severity_text: ODD_STRINGS[i % ODD_STRINGS.len()].to_owned(),
            body: Some(any(body)),
            attributes: vec![kv_str("dup", "a"), kv_str("dup", "b")],
            trace_id: g.rng.id::<16>(),
            span_id: g.rng.id::<8>(),
            ..Default::default()
        });
    }
    let unicode = LogRecord {
        time_unix_nano: now,
        body: Some(any_str(ODD_STRINGS[3])),
        ..Default::default()
    };
    let scope_logs = vec![
        ScopeLogs {
            scope: Some(empty_name_scope()),
            log_records: records,
            schema_url: String::new(),
        },
        ScopeLogs::default(),
        ScopeLogs {
            scope: Some(InstrumentationScope::default()),
            log_records: vec![unicode.clone()],
            schema_url: "not a url 🙃".to_owned(),
        },
    ];
    let resource_logs = vec![
        ResourceLogs {
            resource: Some(odd_resource()),
            scope_logs,
            schema_url: String::new(),
        },
        ResourceLogs {
            resource: Some(Resource::default()),
            scope_logs: vec![ScopeLogs {
                scope: None,
                log_records: vec![unicode],
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        },
        ResourceLogs::default(),
        ResourceLogs {
            resource: None,
            scope_logs: vec![ScopeLogs::default()],
            schema_url: String::new(),
        },
    ];
    ExportLogsServiceRequest { resource_logs }
}
