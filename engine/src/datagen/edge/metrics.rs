//! Edge-case metrics: no data, no points, value-less points, bucket-less histograms,
//! non-finite values.

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::exponential_histogram_data_point::Buckets;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value as Num;
use opentelemetry_proto::tonic::metrics::v1::summary_data_point::ValueAtQuantile;
use opentelemetry_proto::tonic::metrics::v1::{
    Exemplar, ExponentialHistogram, ExponentialHistogramDataPoint, Gauge, Histogram,
    HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum, Summary,
    SummaryDataPoint, exemplar,
};
use opentelemetry_proto::tonic::resource::v1::Resource;

use super::odd::{ODD_STRINGS, empty_name_scope, odd_attributes, odd_resource};
use crate::datagen::common::kv_str;
use crate::datagen::generator::DataGen;

/// A metric with only `name` and `data` set.
fn metric(name: &str, data: Option<Data>) -> Metric {
    Metric {
        name: name.to_owned(),
        data,
        ..Default::default()
    }
}

/// A number data point at `now`.
fn number_point(now: u64, value: Option<Num>, attributes: Vec<KeyValue>) -> NumberDataPoint {
    NumberDataPoint {
        attributes,
        start_time_unix_nano: now + 1,
        time_unix_nano: now,
        value,
        ..Default::default()
    }
}

/// Gauge points: no value, NaN, signed zero, infinities, the smallest integer, odd attributes.
fn gauge_points(now: u64) -> Vec<NumberDataPoint> {
    let values = [
        None,
        Some(Num::AsDouble(f64::NAN)),
        Some(Num::AsDouble(-0.0)),
        Some(Num::AsDouble(f64::INFINITY)),
        Some(Num::AsDouble(f64::NEG_INFINITY)),
        Some(Num::AsInt(i64::MIN)),
    ];
    let mut points: Vec<NumberDataPoint> = values
        .iter()
        .map(|v| number_point(now, *v, Vec::new()))
        .collect();
    points.push(number_point(now, None, odd_attributes()));
    points.push(NumberDataPoint::default());
    points
}

/// Histogram points: empty, NaN sum with odd exemplars, one bucket with infinite bounds.
fn histogram_points(g: &mut DataGen, now: u64) -> Vec<HistogramDataPoint> {
    let exemplar = Exemplar {
        value: None,
        ..Default::default()
    };
    let weird_exemplar = Exemplar {
        filtered_attributes: odd_attributes(),
        time_unix_nano: now,
        span_id: g.rng.id::<8>(),
        trace_id: g.rng.id::<16>(),
        value: Some(exemplar::Value::AsDouble(f64::NAN)),
    };
    vec![
        HistogramDataPoint::default(),
        HistogramDataPoint {
            count: 7,
            sum: Some(f64::NAN),
            time_unix_nano: now,
            exemplars: vec![exemplar, weird_exemplar],
            ..Default::default()
        },
        HistogramDataPoint {
            count: 7,
            bucket_counts: vec![7],
            sum: Some(-0.0),
            min: Some(f64::NEG_INFINITY),
            max: Some(f64::INFINITY),
            ..Default::default()
        },
    ]
}

/// Exponential histogram points: empty, far offsets and duplicate keys, a NaN threshold.
fn exponential_points() -> Vec<ExponentialHistogramDataPoint> {
    vec![
        ExponentialHistogramDataPoint::default(),
        ExponentialHistogramDataPoint {
            count: 3,
            scale: 20,
            zero_count: 1,
            zero_threshold: -0.0,
            positive: Some(Buckets {
                offset: -1000,
                bucket_counts: vec![1, 0, 1],
            }),
            negative: Some(Buckets::default()),
            attributes: vec![kv_str("dup", "1"), kv_str("dup", "2")],
            ..Default::default()
        },
        ExponentialHistogramDataPoint {
            scale: -10,
            zero_threshold: f64::NAN,
            ..Default::default()
        },
    ]
}

/// Summary points: empty, and NaN and signed-zero quantiles.
fn summary_points() -> Vec<SummaryDataPoint> {
    vec![
        SummaryDataPoint::default(),
        SummaryDataPoint {
            count: 0,
            sum: f64::INFINITY,
            quantile_values: vec![
                ValueAtQuantile {
                    quantile: 0.0,
                    value: f64::NAN,
                },
                ValueAtQuantile {
                    quantile: 1.0,
                    value: -0.0,
                },
            ],
            ..Default::default()
        },
    ]
}

/// Metrics of every kind, odd each in its own way.
fn odd_metrics(g: &mut DataGen, now: u64) -> Vec<Metric> {
    vec![
        metric("no.data", None),
        metric(
            "",
            Some(Data::Gauge(Gauge {
                data_points: Vec::new(),
            })),
        ),
        metric(
            "sum.empty",
            Some(Data::Sum(Sum {
                data_points: Vec::new(),
                aggregation_temporality: 0,
                is_monotonic: true,
            })),
        ),
        metric(
            "gauge.odd",
            Some(Data::Gauge(Gauge {
                data_points: gauge_points(now),
            })),
        ),
        metric(
            "histogram.no_buckets",
            Some(Data::Histogram(Histogram {
                data_points: histogram_points(g, now),
                aggregation_temporality: 2,
            })),
        ),
        metric(
            "exp.odd",
            Some(Data::ExponentialHistogram(ExponentialHistogram {
                data_points: exponential_points(),
                aggregation_temporality: 1,
            })),
        ),
        metric(
            "summary.odd",
            Some(Data::Summary(Summary {
                data_points: summary_points(),
            })),
        ),
        Metric {
            name: "メトリクス.🔥".to_owned(),
            description: ODD_STRINGS[3].to_owned(),
            unit: "µs".to_owned(),
            metadata: vec![kv_str("dup", "1"), kv_str("dup", "2"), kv_str("", "")],
            data: Some(Data::Sum(Sum {
                data_points: vec![number_point(now, Some(Num::AsInt(0)), Vec::new())],
                aggregation_temporality: 2,
                is_monotonic: false,
            })),
        },
    ]
}

/// Metrics: no data, no points, value-less points, bucket-less histograms.
pub(crate) fn metrics(g: &mut DataGen, now: u64) -> ExportMetricsServiceRequest {
    let metrics = odd_metrics(g, now);
    let scope_metrics = vec![
        ScopeMetrics {
            scope: Some(empty_name_scope()),
            metrics,
            schema_url: String::new(),
        },
        ScopeMetrics::default(),
    ];
    let resource_metrics = vec![
        ResourceMetrics {
            resource: Some(odd_resource()),
            scope_metrics,
            schema_url: String::new(),
        },
        ResourceMetrics {
            resource: Some(Resource::default()),
            scope_metrics: Vec::new(),
            schema_url: String::new(),
        },
        ResourceMetrics {
            resource: None,
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope::default()),
                metrics: vec![metric("lonely", None)],
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        },
    ];
    ExportMetricsServiceRequest { resource_metrics }
}
