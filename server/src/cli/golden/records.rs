//! Records of OTLP JSON output, flattened for comparison: one record per log record, span or
//! metric data point, each a sorted map from a field's path (`body`,
//! `attributes['http.route']`, `resource.attributes['service.name']`, `metric.name`, ...) to
//! its value as JSON text. Default values (empty, zero, false, all-zero ids) are left out, as
//! OTLP treats them as absent, and attribute and event order does not matter.

use std::collections::BTreeMap;

use anyhow::Context;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use penstock_engine::Signal;
use penstock_engine::otlp::json::line_to_protobuf;
use prost::Message;
use serde_json::{Map, Value};

/// One record, flattened.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Record {
    /// Field path → JSON text of its value.
    pub fields: BTreeMap<String, String>,
}

impl Record {
    /// The record as one line: its identity for comparisons.
    pub fn key(&self) -> String {
        self.fields
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// A short description naming the record: its most telling fields.
    pub fn summary(&self) -> String {
        const TELLING: [&str; 7] = [
            "metric.name",
            "name",
            "timeUnixNano",
            "startTimeUnixNano",
            "severityText",
            "body",
            "spanId",
        ];
        let mut shown: Vec<String> = TELLING
            .iter()
            .filter_map(|k| self.fields.get(*k).map(|v| format!("{k}={}", shorten(v))))
            .take(3)
            .collect();
        if shown.is_empty() {
            shown = self
                .fields
                .iter()
                .take(3)
                .map(|(k, v)| format!("{k}={}", shorten(v)))
                .collect();
        }
        format!("{{{}}}", shown.join(", "))
    }
}

/// `text` cut to a readable length.
pub fn shorten(text: &str) -> String {
    const MAX: usize = 80;
    if text.chars().count() > MAX {
        format!("{}...", text.chars().take(MAX).collect::<String>())
    } else {
        text.to_string()
    }
}

/// The records of one OTLP JSON line (an export request of any signal). The line is read as
/// protobuf first, so that every way OTLP JSON may spell a value compares the same.
pub fn records_of_line(line: &str, number: usize) -> anyhow::Result<Vec<Record>> {
    let (signal, bytes) = line_to_protobuf(line, number)?;
    let invalid = || format!("line {number}: not an OTLP export request");
    let request = match signal {
        Signal::Logs => serde_json::to_value(
            ExportLogsServiceRequest::decode(bytes.as_slice()).with_context(invalid)?,
        ),
        Signal::Traces => serde_json::to_value(
            ExportTraceServiceRequest::decode(bytes.as_slice()).with_context(invalid)?,
        ),
        Signal::Metrics => serde_json::to_value(
            ExportMetricsServiceRequest::decode(bytes.as_slice()).with_context(invalid)?,
        ),
    }
    .with_context(invalid)?;
    Ok(records(signal, &request))
}

fn members<'a>(value: &'a Value, key: &str) -> impl Iterator<Item = &'a Value> {
    value
        .get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// The records of a request as JSON.
fn records(signal: Signal, request: &Value) -> Vec<Record> {
    let (resources, scopes, items) = match signal {
        Signal::Logs => ("resourceLogs", "scopeLogs", "logRecords"),
        Signal::Traces => ("resourceSpans", "scopeSpans", "spans"),
        Signal::Metrics => ("resourceMetrics", "scopeMetrics", "metrics"),
    };
    let mut out = Vec::new();
    for resource in members(request, resources) {
        let mut envelope = BTreeMap::new();
        flatten(
            "resource.",
            resource.get("resource").unwrap_or(&Value::Null),
            &mut envelope,
        );
        flatten(
            "resource.schemaUrl",
            resource.get("schemaUrl").unwrap_or(&Value::Null),
            &mut envelope,
        );
        for scope in members(resource, scopes) {
            let mut envelope = envelope.clone();
            flatten(
                "scope.",
                scope.get("scope").unwrap_or(&Value::Null),
                &mut envelope,
            );
            flatten(
                "scope.schemaUrl",
                scope.get("schemaUrl").unwrap_or(&Value::Null),
                &mut envelope,
            );
            for item in members(scope, items) {
                if signal == Signal::Metrics {
                    out.extend(points(item, &envelope));
                } else {
                    let mut fields = envelope.clone();
                    flatten("", item, &mut fields);
                    out.push(Record { fields });
                }
            }
        }
    }
    out
}

/// One record per data point of `metric`, each with the metric's own fields.
fn points(metric: &Value, envelope: &BTreeMap<String, String>) -> Vec<Record> {
    let Some(object) = metric.as_object() else {
        return Vec::new();
    };
    let mut own = envelope.clone();
    let mut data = None;
    for (key, value) in object {
        match key.as_str() {
            "gauge" | "sum" | "histogram" | "exponentialHistogram" | "summary" => {
                own.insert("metric.type".into(), format!("{key:?}"));
                data = Some(value);
            }
            _ => flatten(&format!("metric.{key}"), value, &mut own),
        }
    }
    let Some(data) = data else {
        return vec![Record { fields: own }];
    };
    if let Some(data) = data.as_object() {
        for (key, value) in data.iter().filter(|(k, _)| *k != "dataPoints") {
            flatten(&format!("metric.{key}"), value, &mut own);
        }
    }
    members(data, "dataPoints")
        .map(|point| {
            let mut fields = own.clone();
            flatten("", point, &mut fields);
            Record { fields }
        })
        .collect()
}

const ANY_VALUE_KEYS: [&str; 7] = [
    "stringValue",
    "intValue",
    "doubleValue",
    "boolValue",
    "bytesValue",
    "arrayValue",
    "kvlistValue",
];

/// The value an OTLP `AnyValue` holds, if `value` is one.
fn any_value(value: &Map<String, Value>) -> Option<&Value> {
    match value.iter().next() {
        Some((key, inner)) if value.len() == 1 && ANY_VALUE_KEYS.contains(&key.as_str()) => {
            Some(inner)
        }
        _ => None,
    }
}

fn is_default(path: &str, value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty() || (path.ends_with("Id") && s.bytes().all(|b| b == b'0')),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

/// Adds the fields of `value` under `path` (a prefix ending in `.`, or a field's own path).
fn flatten(path: &str, value: &Value, out: &mut BTreeMap<String, String>) {
    match value {
        Value::Object(object) => {
            if let Some(inner) = any_value(object) {
                return flatten(path, inner, out);
            }
            for (key, member) in object {
                let joined = if path.is_empty() || path.ends_with('.') {
                    format!("{path}{key}")
                } else {
                    format!("{path}.{key}")
                };
                match (key.as_str(), member) {
                    ("attributes", Value::Array(list)) => attributes(&joined, list, out),
                    _ => flatten(&joined, member, out),
                }
            }
        }
        Value::Array(items) if !items.is_empty() => {
            out.insert(path.to_string(), canonical_list(items));
        }
        _ if is_default(path, value) => {}
        _ => {
            out.insert(path.to_string(), value.to_string());
        }
    }
}

/// Attributes as one field each: `PATH['key']`.
fn attributes(path: &str, list: &[Value], out: &mut BTreeMap<String, String>) {
    for kv in list {
        let key = kv.get("key").and_then(Value::as_str).unwrap_or_default();
        let value = kv.get("value").unwrap_or(&Value::Null);
        flatten(&format!("{path}['{key}']"), value, out);
    }
}

/// A list as JSON text: objects (events, links, exemplars) in a canonical order, each with
/// its default fields left out; numbers and strings (bucket counts, bounds) as they are.
fn canonical_list(items: &[Value]) -> String {
    if !items.iter().any(Value::is_object) {
        return Value::Array(items.to_vec()).to_string();
    }
    let mut texts: Vec<String> = items
        .iter()
        .map(|item| {
            let mut fields = BTreeMap::new();
            flatten("", item, &mut fields);
            let object: Map<String, Value> = fields
                .into_iter()
                .map(|(k, v)| (k, Value::String(v)))
                .collect();
            Value::Object(object).to_string()
        })
        .collect();
    texts.sort();
    format!("[{}]", texts.join(","))
}
