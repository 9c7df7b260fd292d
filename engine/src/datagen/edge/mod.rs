//! Small requests packed with odd-but-encodable values to shake out converter bugs.

mod metrics;
mod traces;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;

use crate::datagen::DataGen;
use crate::datagen::common::{any, any_str, array, kv, kv_f64, kv_int, kv_str, kvlist};

/// Strings that stress UTF-8 handling: CJK, emoji (ZWJ sequences, flags), RTL,
/// combining marks, control characters and NUL.
pub(crate) const ODD_STRINGS: &[&str] = &[
    "",
    "日本語のログメッセージ 中文 한국어",
    "🔥💥 👩‍👩‍👧 🏳️‍🌈",
    "مرحبا بالعالم שלום עולם",
    "e\u{301} A\u{30a} \u{200b}zero-width\u{feff}",
    "tab\tnewline\ncr\r nul\u{0} end",
];

/// `kvlist > array > kvlist > array > ...` nested `depth` levels deep.
fn nested(depth: usize) -> AnyValue {
    match depth {
        0 => any_str("bottom 🐢"),
        d if d % 2 == 1 => any(kvlist(vec![kv(&format!("level{d}"), inner(nested(d - 1)))])),
        d => any(array(vec![nested(d - 1), any(Value::IntValue(d as i64))])),
    }
}

/// The value inside an `AnyValue` (an empty string if unset).
fn inner(v: AnyValue) -> Value {
    v.value.unwrap_or(Value::StringValue(String::new()))
}

/// Attributes covering every odd value kind, including a duplicated key.
pub(crate) fn odd_attributes() -> Vec<KeyValue> {
    let mut attrs = vec![
        kv_str("", ""),
        kv_str("empty.string", ""),
        kv_f64("nan", f64::NAN),
        kv_f64("neg.zero", -0.0),
        kv_f64("pos.zero", 0.0),
        kv_f64("inf", f64::INFINITY),
        kv_f64("neg.inf", f64::NEG_INFINITY),
        kv_f64("subnormal", 5e-324),
        kv_f64("max", f64::MAX),
        kv_int("int.min", i64::MIN),
        kv_int("int.max", i64::MAX),
        kv("bytes.empty", Value::BytesValue(Vec::new())),
        kv("bytes", Value::BytesValue(vec![0, 0xff, 0x80, 0x7f])),
        kv("array.empty", array(Vec::new())),
        kv("kvlist.empty", kvlist(Vec::new())),
        KeyValue {
            key: "any.empty".to_owned(),
            value: Some(AnyValue::default()),
            ..Default::default()
        },
        KeyValue {
            key: "value.missing".to_owned(),
            value: None,
            ..Default::default()
        },
        kv(
            "array.mixed",
            array(vec![
                any_str("s"),
                any(Value::IntValue(-1)),
                any(Value::DoubleValue(f64::NAN)),
                any(Value::BoolValue(false)),
                any(Value::BytesValue(Vec::new())),
                AnyValue::default(),
            ]),
        ),
        kv("nested.depth5", inner(nested(5))),
        kv_str("ключ.🔑.مفتاح", "значение"),
        kv_str("dup", "first"),
        kv_str("dup", "second"),
        kv_str("long", "ab🔥".repeat(1000)),
    ];
    for (i, s) in ODD_STRINGS.iter().enumerate() {
        attrs.push(kv_str(&format!("str.{i}"), *s));
    }
    attrs
}

/// A scope with an empty name and a duplicated attribute key.
pub(crate) fn empty_name_scope() -> InstrumentationScope {
    InstrumentationScope {
        name: String::new(),
        version: String::new(),
        attributes: vec![kv_str("k", "1"), kv_str("k", "2")],
        dropped_attributes_count: u32::MAX,
    }
}

/// A resource carrying [`odd_attributes`].
pub(crate) fn odd_resource() -> Resource {
    Resource {
        attributes: odd_attributes(),
        dropped_attributes_count: 1,
        ..Default::default()
    }
}

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
