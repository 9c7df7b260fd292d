//! Property tests: random OTLP requests of every signal survive OTLP → batch → OTLP and
//! batch → OTAP → batch, including empty, missing and odd values (empty strings, NaN and
//! infinities, zero-length bytes, unicode, deep any-values, duplicate keys, empty groups).

mod common;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, InstrumentationScope, KeyValue, KeyValueList, any_value,
};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::metrics::v1::{
    Exemplar, ExponentialHistogram, ExponentialHistogramDataPoint, Gauge, Histogram,
    HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum, Summary,
    SummaryDataPoint, exemplar, exponential_histogram_data_point::Buckets, metric,
    number_data_point, summary_data_point::ValueAtQuantile,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status, span};
use penstock_engine::Signal;
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use prost::Message;

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "[a-z._]{1,12}",
        Just("dup".to_string()),
        "\\PC{0,8}",
        Just("Ünïcødé 漢字 🚀 עברית".to_string()),
    ]
}

fn double() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>(),
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(-0.0),
        Just(0.0),
    ]
}

fn any_value() -> impl Strategy<Value = AnyValue> {
    use any_value::Value;
    let leaf = prop_oneof![
        Just(None),
        text().prop_map(|s| Some(Value::StringValue(s))),
        any::<bool>().prop_map(|b| Some(Value::BoolValue(b))),
        any::<i64>().prop_map(|i| Some(Value::IntValue(i))),
        double().prop_map(|d| Some(Value::DoubleValue(d))),
        vec(any::<u8>(), 0..6).prop_map(|b| Some(Value::BytesValue(b))),
    ]
    .prop_map(|value| AnyValue { value });
    leaf.prop_recursive(6, 48, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(|values| AnyValue {
                value: Some(Value::ArrayValue(ArrayValue { values }))
            }),
            vec((text(), option::of(inner)), 0..4).prop_map(|kvs| AnyValue {
                value: Some(Value::KvlistValue(KeyValueList {
                    values: kvs
                        .into_iter()
                        .map(|(key, value)| KeyValue {
                            key,
                            value,
                            key_strindex: 0
                        })
                        .collect(),
                })),
            }),
        ]
    })
}

fn attributes() -> impl Strategy<Value = Vec<KeyValue>> {
    vec((text(), option::of(any_value())), 0..5).prop_map(|kvs| {
        kvs.into_iter()
            .map(|(key, value)| KeyValue {
                key,
                value,
                key_strindex: 0,
            })
            .collect()
    })
}

fn id(len: usize) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![Just(Vec::new()), vec(any::<u8>(), len)]
}

fn resource() -> impl Strategy<Value = Option<Resource>> {
    option::of(
        (attributes(), any::<u32>()).prop_map(|(attributes, dropped_attributes_count)| Resource {
            attributes,
            dropped_attributes_count,
            entity_refs: Vec::new(),
        }),
    )
}

fn scope() -> impl Strategy<Value = Option<InstrumentationScope>> {
    option::of((text(), text(), attributes(), any::<u32>()).prop_map(
        |(name, version, attributes, dropped)| InstrumentationScope {
            name,
            version,
            attributes,
            dropped_attributes_count: dropped,
        },
    ))
}

fn log_record() -> impl Strategy<Value = LogRecord> {
    (
        (
            any::<u64>(),
            any::<u64>(),
            any::<i32>(),
            text(),
            option::of(any_value()),
        ),
        (
            attributes(),
            any::<u32>(),
            any::<u32>(),
            id(16),
            id(8),
            text(),
        ),
    )
        .prop_map(
            |(
                (time, observed, severity, severity_text, body),
                (attributes, dropped, flags, trace_id, span_id, event_name),
            )| {
                LogRecord {
                    time_unix_nano: time,
                    observed_time_unix_nano: observed,
                    severity_number: severity,
                    severity_text,
                    body,
                    attributes,
                    dropped_attributes_count: dropped,
                    flags,
                    trace_id,
                    span_id,
                    event_name,
                }
            },
        )
}

fn logs_request() -> impl Strategy<Value = ExportLogsServiceRequest> {
    let scope_logs =
        (scope(), vec(log_record(), 0..5), text()).prop_map(|(scope, log_records, schema_url)| {
            ScopeLogs {
                scope,
                log_records,
                schema_url,
            }
        });
    let resource_logs = (resource(), vec(scope_logs, 0..3), text()).prop_map(
        |(resource, scope_logs, schema_url)| ResourceLogs {
            resource,
            scope_logs,
            schema_url,
        },
    );
    vec(resource_logs, 0..4).prop_map(|resource_logs| ExportLogsServiceRequest { resource_logs })
}

fn span() -> impl Strategy<Value = Span> {
    let event = (any::<u64>(), text(), attributes(), any::<u32>()).prop_map(
        |(time, name, attributes, dropped)| span::Event {
            time_unix_nano: time,
            name,
            attributes,
            dropped_attributes_count: dropped,
        },
    );
    let link = (
        id(16),
        id(8),
        text(),
        attributes(),
        any::<u32>(),
        any::<u32>(),
    )
        .prop_map(
            |(trace_id, span_id, trace_state, attributes, dropped, flags)| span::Link {
                trace_id,
                span_id,
                trace_state,
                attributes,
                dropped_attributes_count: dropped,
                flags,
            },
        );
    let status = option::of((text(), 0..3i32).prop_map(|(message, code)| Status { message, code }));
    (
        (
            id(16),
            id(8),
            text(),
            id(8),
            any::<u32>(),
            text(),
            any::<i32>(),
            any::<u64>(),
            any::<u64>(),
        ),
        (
            attributes(),
            any::<u32>(),
            vec(event, 0..3),
            any::<u32>(),
            vec(link, 0..3),
            any::<u32>(),
            status,
        ),
    )
        .prop_map(
            |(
                (trace_id, span_id, trace_state, parent_span_id, flags, name, kind, start, end),
                (
                    attributes,
                    dropped_attributes,
                    events,
                    dropped_events,
                    links,
                    dropped_links,
                    status,
                ),
            )| Span {
                trace_id,
                span_id,
                trace_state,
                parent_span_id,
                flags,
                name,
                kind,
                start_time_unix_nano: start,
                end_time_unix_nano: end,
                attributes,
                dropped_attributes_count: dropped_attributes,
                events,
                dropped_events_count: dropped_events,
                links,
                dropped_links_count: dropped_links,
                status,
            },
        )
}

fn traces_request() -> impl Strategy<Value = ExportTraceServiceRequest> {
    let scope_spans =
        (scope(), vec(span(), 0..4), text()).prop_map(|(scope, spans, schema_url)| ScopeSpans {
            scope,
            spans,
            schema_url,
        });
    let resource_spans = (resource(), vec(scope_spans, 0..3), text()).prop_map(
        |(resource, scope_spans, schema_url)| ResourceSpans {
            resource,
            scope_spans,
            schema_url,
        },
    );
    vec(resource_spans, 0..3)
        .prop_map(|resource_spans| ExportTraceServiceRequest { resource_spans })
}

fn exemplars() -> impl Strategy<Value = Vec<Exemplar>> {
    let value = option::of(prop_oneof![
        any::<i64>().prop_map(exemplar::Value::AsInt),
        double().prop_map(exemplar::Value::AsDouble),
    ]);
    vec(
        (attributes(), any::<u64>(), value, id(8), id(16)).prop_map(
            |(filtered_attributes, time, value, span_id, trace_id)| Exemplar {
                filtered_attributes,
                time_unix_nano: time,
                value,
                span_id,
                trace_id,
            },
        ),
        0..3,
    )
}

fn number_points() -> impl Strategy<Value = Vec<NumberDataPoint>> {
    let value = option::of(prop_oneof![
        any::<i64>().prop_map(number_data_point::Value::AsInt),
        double().prop_map(number_data_point::Value::AsDouble),
    ]);
    vec(
        (
            attributes(),
            any::<u64>(),
            any::<u64>(),
            value,
            exemplars(),
            any::<u32>(),
        )
            .prop_map(|(attributes, start, time, value, exemplars, flags)| {
                NumberDataPoint {
                    attributes,
                    start_time_unix_nano: start,
                    time_unix_nano: time,
                    value,
                    exemplars,
                    flags,
                }
            }),
        0..3,
    )
}

fn buckets() -> impl Strategy<Value = Option<Buckets>> {
    option::of(
        (any::<i32>(), vec(any::<u64>(), 0..5)).prop_map(|(offset, bucket_counts)| Buckets {
            offset,
            bucket_counts,
        }),
    )
}

fn metric_data() -> impl Strategy<Value = Option<metric::Data>> {
    let histogram_point = (
        (
            attributes(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            option::of(double()),
        ),
        (
            vec(any::<u64>(), 0..5),
            vec(double(), 0..4),
            exemplars(),
            any::<u32>(),
            option::of(double()),
            option::of(double()),
        ),
    )
        .prop_map(
            |(
                (attributes, start, time, count, sum),
                (bucket_counts, explicit_bounds, exemplars, flags, min, max),
            )| {
                HistogramDataPoint {
                    attributes,
                    start_time_unix_nano: start,
                    time_unix_nano: time,
                    count,
                    sum,
                    bucket_counts,
                    explicit_bounds,
                    exemplars,
                    flags,
                    min,
                    max,
                }
            },
        );
    let exp_point = (
        (
            attributes(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            option::of(double()),
            any::<i32>(),
            any::<u64>(),
        ),
        (
            buckets(),
            buckets(),
            any::<u32>(),
            exemplars(),
            option::of(double()),
            option::of(double()),
            double(),
        ),
    )
        .prop_map(
            |(
                (attributes, start, time, count, sum, scale, zero_count),
                (positive, negative, flags, exemplars, min, max, zero_threshold),
            )| {
                ExponentialHistogramDataPoint {
                    attributes,
                    start_time_unix_nano: start,
                    time_unix_nano: time,
                    count,
                    sum,
                    scale,
                    zero_count,
                    positive,
                    negative,
                    flags,
                    exemplars,
                    min,
                    max,
                    zero_threshold,
                }
            },
        );
    let summary_point = (
        attributes(),
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        double(),
        vec(
            (double(), double()).prop_map(|(quantile, value)| ValueAtQuantile { quantile, value }),
            0..4,
        ),
        any::<u32>(),
    )
        .prop_map(
            |(attributes, start, time, count, sum, quantile_values, flags)| SummaryDataPoint {
                attributes,
                start_time_unix_nano: start,
                time_unix_nano: time,
                count,
                sum,
                quantile_values,
                flags,
            },
        );
    option::of(prop_oneof![
        number_points().prop_map(|data_points| metric::Data::Gauge(Gauge { data_points })),
        (number_points(), 0..3i32, any::<bool>()).prop_map(
            |(data_points, t, m)| metric::Data::Sum(Sum {
                data_points,
                aggregation_temporality: t,
                is_monotonic: m,
            })
        ),
        (vec(histogram_point, 0..3), 0..3i32).prop_map(|(data_points, t)| metric::Data::Histogram(
            Histogram {
                data_points,
                aggregation_temporality: t,
            }
        )),
        (vec(exp_point, 0..3), 0..3i32).prop_map(|(data_points, t)| {
            metric::Data::ExponentialHistogram(ExponentialHistogram {
                data_points,
                aggregation_temporality: t,
            })
        }),
        vec(summary_point, 0..3)
            .prop_map(|data_points| metric::Data::Summary(Summary { data_points })),
    ])
}

fn metrics_request() -> impl Strategy<Value = ExportMetricsServiceRequest> {
    let metric = (text(), text(), text(), metric_data(), attributes()).prop_map(
        |(name, description, unit, data, metadata)| Metric {
            name,
            description,
            unit,
            data,
            metadata,
        },
    );
    let scope_metrics =
        (scope(), vec(metric, 0..4), text()).prop_map(|(scope, metrics, schema_url)| {
            ScopeMetrics {
                scope,
                metrics,
                schema_url,
            }
        });
    let resource_metrics = (resource(), vec(scope_metrics, 0..3), text()).prop_map(
        |(resource, scope_metrics, schema_url)| ResourceMetrics {
            resource,
            scope_metrics,
            schema_url,
        },
    );
    vec(resource_metrics, 0..3)
        .prop_map(|resource_metrics| ExportMetricsServiceRequest { resource_metrics })
}

fn check(signal: Signal, requests: Vec<Vec<u8>>) -> Result<(), TestCaseError> {
    for options in common::full_options() {
        common::round_trip(signal, &requests, options).map_err(TestCaseError::fail)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Scenario: a stream of two random logs requests.
    /// Guarantees: both round trips are lossless (modulo `equiv`'s documented normalizations).
    #[test]
    fn logs_round_trip(a in logs_request(), b in logs_request()) {
        check(Signal::Logs, vec![a.encode_to_vec(), b.encode_to_vec()])?;
    }

    /// Scenario: a stream of two random traces requests.
    /// Guarantees: both round trips are lossless.
    #[test]
    fn traces_round_trip(a in traces_request(), b in traces_request()) {
        check(Signal::Traces, vec![a.encode_to_vec(), b.encode_to_vec()])?;
    }

    /// Scenario: a stream of two random metrics requests with every data-point kind.
    /// Guarantees: both round trips are lossless.
    #[test]
    fn metrics_round_trip(a in metrics_request(), b in metrics_request()) {
        check(Signal::Metrics, vec![a.encode_to_vec(), b.encode_to_vec()])?;
    }
}
