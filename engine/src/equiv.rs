//! Semantic equivalence of OTLP requests, for tests and golden files.
//!
//! Two requests are equivalent when they carry the same multiset of records, each with the
//! same resource, scope and content. What OTAP legitimately normalizes is ignored:
//! - how records are grouped into `Resource*`/`Scope*` messages, and empty groups;
//! - the order of attributes, span events and links, data points and exemplars;
//! - absent versus empty messages (`resource`, `scope`, `status`, any-values, buckets);
//! - the order of keys inside map values;
//! - a histogram `sum`, `min` or `max` of zero versus none (the reference producer writes zero as absent);
//! - all-zero trace and span ids, which OTLP defines as invalid and treats as empty;
//! - `Resource.entity_refs` and profile string-table references, which OTAP does not carry.

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    Exemplar, exponential_histogram_data_point::Buckets, metric,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::Status;

fn any(value: &mut AnyValue) {
    match &mut value.value {
        Some(any_value::Value::KvlistValue(list)) => {
            list.values.iter_mut().for_each(key_value);
            list.values.sort_by(|a, b| a.key.cmp(&b.key));
        }
        Some(any_value::Value::ArrayValue(array)) => array.values.iter_mut().for_each(any),
        _ => {}
    }
}

fn key_value(kv: &mut KeyValue) {
    kv.key_strindex = 0;
    let value = kv.value.get_or_insert_with(AnyValue::default);
    any(value);
}

fn attributes(attrs: &mut Vec<KeyValue>) {
    attrs.iter_mut().for_each(key_value);
    sort_by_debug(attrs);
}

fn sort_by_debug<T: std::fmt::Debug>(items: &mut Vec<T>) {
    let mut keyed: Vec<(String, T)> = items.drain(..).map(|i| (format!("{i:?}"), i)).collect();
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    items.extend(keyed.into_iter().map(|(_, i)| i));
}

/// Clears an all-zero (invalid) trace or span id.
fn id(bytes: &mut Vec<u8>) {
    if bytes.iter().all(|b| *b == 0) {
        bytes.clear();
    }
}

fn resource(r: &Option<Resource>, schema_url: &str) -> String {
    let mut r = r.clone().unwrap_or_default();
    r.entity_refs.clear();
    attributes(&mut r.attributes);
    format!("{r:?} {schema_url:?}")
}

fn scope(s: &Option<InstrumentationScope>, schema_url: &str) -> String {
    let mut s = s.clone().unwrap_or_default();
    attributes(&mut s.attributes);
    format!("{s:?} {schema_url:?}")
}

/// Canonical lines of a logs request, one per log record, sorted.
pub fn logs(request: &ExportLogsServiceRequest) -> Vec<String> {
    let mut out = Vec::new();
    for rl in &request.resource_logs {
        let res = resource(&rl.resource, &rl.schema_url);
        for sl in &rl.scope_logs {
            let sc = scope(&sl.scope, &sl.schema_url);
            for record in &sl.log_records {
                let mut record = record.clone();
                attributes(&mut record.attributes);
                id(&mut record.trace_id);
                id(&mut record.span_id);
                match &mut record.body {
                    Some(AnyValue { value: None }) => record.body = None,
                    Some(body) => any(body),
                    None => {}
                }
                out.push(format!("{res} | {sc} | {record:?}"));
            }
        }
    }
    out.sort();
    out
}

/// Canonical lines of a traces request, one per span, sorted.
pub fn traces(request: &ExportTraceServiceRequest) -> Vec<String> {
    let mut out = Vec::new();
    for rs in &request.resource_spans {
        let res = resource(&rs.resource, &rs.schema_url);
        for ss in &rs.scope_spans {
            let sc = scope(&ss.scope, &ss.schema_url);
            for span in &ss.spans {
                let mut span = span.clone();
                attributes(&mut span.attributes);
                id(&mut span.trace_id);
                id(&mut span.span_id);
                id(&mut span.parent_span_id);
                span.links.iter_mut().for_each(|l| {
                    id(&mut l.trace_id);
                    id(&mut l.span_id);
                });
                span.events
                    .iter_mut()
                    .for_each(|e| attributes(&mut e.attributes));
                sort_by_debug(&mut span.events);
                span.links
                    .iter_mut()
                    .for_each(|l| attributes(&mut l.attributes));
                sort_by_debug(&mut span.links);
                if span.status.as_ref() == Some(&Status::default()) {
                    span.status = None;
                }
                out.push(format!("{res} | {sc} | {span:?}"));
            }
        }
    }
    out.sort();
    out
}

fn exemplars(items: &mut Vec<Exemplar>) {
    items.iter_mut().for_each(|e| {
        attributes(&mut e.filtered_attributes);
        id(&mut e.trace_id);
        id(&mut e.span_id);
    });
    sort_by_debug(items);
}

fn zero_is_absent(value: &mut Option<f64>) {
    if *value == Some(0.0) {
        *value = None;
    }
}

fn buckets(b: &mut Option<Buckets>) {
    if b.as_ref() == Some(&Buckets::default()) {
        *b = None;
    }
}

/// Canonical lines of a metrics request, one per metric, sorted.
pub fn metrics(request: &ExportMetricsServiceRequest) -> Vec<String> {
    let mut out = Vec::new();
    for rm in &request.resource_metrics {
        let res = resource(&rm.resource, &rm.schema_url);
        for sm in &rm.scope_metrics {
            let sc = scope(&sm.scope, &sm.schema_url);
            for m in &sm.metrics {
                let mut m = m.clone();
                attributes(&mut m.metadata);
                match &mut m.data {
                    Some(metric::Data::Gauge(g)) => {
                        g.data_points.iter_mut().for_each(|p| {
                            attributes(&mut p.attributes);
                            exemplars(&mut p.exemplars);
                        });
                        sort_by_debug(&mut g.data_points);
                    }
                    Some(metric::Data::Sum(s)) => {
                        s.data_points.iter_mut().for_each(|p| {
                            attributes(&mut p.attributes);
                            exemplars(&mut p.exemplars);
                        });
                        sort_by_debug(&mut s.data_points);
                    }
                    Some(metric::Data::Histogram(h)) => {
                        h.data_points.iter_mut().for_each(|p| {
                            attributes(&mut p.attributes);
                            exemplars(&mut p.exemplars);
                            zero_is_absent(&mut p.sum);
                            zero_is_absent(&mut p.min);
                            zero_is_absent(&mut p.max);
                        });
                        sort_by_debug(&mut h.data_points);
                    }
                    Some(metric::Data::ExponentialHistogram(h)) => {
                        h.data_points.iter_mut().for_each(|p| {
                            attributes(&mut p.attributes);
                            exemplars(&mut p.exemplars);
                            zero_is_absent(&mut p.sum);
                            zero_is_absent(&mut p.min);
                            zero_is_absent(&mut p.max);
                            buckets(&mut p.positive);
                            buckets(&mut p.negative);
                        });
                        sort_by_debug(&mut h.data_points);
                    }
                    Some(metric::Data::Summary(s)) => {
                        s.data_points
                            .iter_mut()
                            .for_each(|p| attributes(&mut p.attributes));
                        sort_by_debug(&mut s.data_points);
                    }
                    None => {}
                }
                out.push(format!("{res} | {sc} | {m:?}"));
            }
        }
    }
    out.sort();
    out
}

/// The first difference between two canonical line lists, for assertion messages: the
/// differing record, shown around the first character that differs.
pub fn first_difference(expected: &[String], actual: &[String]) -> Option<String> {
    if expected.len() != actual.len() {
        return Some(format!(
            "{} records expected, {} found",
            expected.len(),
            actual.len()
        ));
    }
    let (e, a) = expected.iter().zip(actual).find(|(e, a)| e != a)?;
    let at = e.bytes().zip(a.bytes()).take_while(|(x, y)| x == y).count();
    let window = |s: &str| {
        let start = s.floor_char_boundary(at.saturating_sub(300));
        let end = s.ceil_char_boundary((at + 300).min(s.len()));
        s[start..end].to_string()
    };
    Some(format!(
        "at character {at}:\nexpected: ...{}...\nfound:    ...{}...",
        window(e),
        window(a)
    ))
}
