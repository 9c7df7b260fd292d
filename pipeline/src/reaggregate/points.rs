//! Data points as OTLP has them, read into mergeable [`Value`]s and written back.

use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::metrics::v1::exponential_histogram_data_point::Buckets as OtlpBuckets;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value as OtlpNumber;
use opentelemetry_proto::tonic::metrics::v1::{
    Exemplar, ExponentialHistogram, ExponentialHistogramDataPoint, Gauge, Histogram,
    HistogramDataPoint, Metric, NumberDataPoint, Sum, Summary, SummaryDataPoint,
};

use super::identity::Kind;
use super::values::{Buckets, Exp, Hist, Num, Value};

/// A data point: what merging reads of it.
pub(crate) struct Point {
    pub(crate) attributes: Vec<KeyValue>,
    pub(crate) start: u64,
    pub(crate) time: u64,
    pub(crate) value: Value,
    pub(crate) exemplars: Vec<Exemplar>,
    /// OTLP data point flags.
    pub(crate) flags: u32,
}

fn buckets(b: Option<OtlpBuckets>) -> Buckets {
    b.map(|b| Buckets {
        offset: b.offset,
        counts: b.bucket_counts,
    })
    .unwrap_or_default()
}

/// A point of `value` whose attributes and exemplars are taken out of the OTLP point's.
fn taken(
    attributes: &mut Vec<KeyValue>,
    exemplars: &mut Vec<Exemplar>,
    (start, time, flags): (u64, u64, u32),
    value: Value,
) -> Point {
    Point {
        attributes: std::mem::take(attributes),
        start,
        time,
        value,
        exemplars: std::mem::take(exemplars),
        flags,
    }
}

/// The points of `metric` (none for a point without a value), taken out of it.
pub(crate) fn points(metric: &mut Metric) -> Vec<Point> {
    let number = |p: &mut NumberDataPoint| {
        let value = match p.value? {
            OtlpNumber::AsInt(i) => Num::Int(i),
            OtlpNumber::AsDouble(d) => Num::Double(d),
        };
        let times = (p.start_time_unix_nano, p.time_unix_nano, p.flags);
        Some(taken(
            &mut p.attributes,
            &mut p.exemplars,
            times,
            Value::Number(value),
        ))
    };
    match &mut metric.data {
        Some(Data::Gauge(g)) => g.data_points.iter_mut().filter_map(number).collect(),
        Some(Data::Sum(s)) => s.data_points.iter_mut().filter_map(number).collect(),
        Some(Data::Histogram(h)) => h
            .data_points
            .iter_mut()
            .map(|p| {
                let value = Value::Histogram(Hist {
                    bounds: std::mem::take(&mut p.explicit_bounds),
                    counts: std::mem::take(&mut p.bucket_counts),
                    count: p.count,
                    sum: p.sum,
                    min: p.min,
                    max: p.max,
                });
                let times = (p.start_time_unix_nano, p.time_unix_nano, p.flags);
                taken(&mut p.attributes, &mut p.exemplars, times, value)
            })
            .collect(),
        Some(Data::ExponentialHistogram(h)) => h
            .data_points
            .iter_mut()
            .map(|p| {
                let value = Value::Exponential(Exp {
                    scale: p.scale,
                    zero_count: p.zero_count,
                    zero_threshold: p.zero_threshold,
                    positive: buckets(p.positive.take()),
                    negative: buckets(p.negative.take()),
                    count: p.count,
                    sum: p.sum,
                    min: p.min,
                    max: p.max,
                });
                let times = (p.start_time_unix_nano, p.time_unix_nano, p.flags);
                taken(&mut p.attributes, &mut p.exemplars, times, value)
            })
            .collect(),
        Some(Data::Summary(s)) => s
            .data_points
            .iter_mut()
            .map(|p| {
                let value = Value::Summary {
                    count: p.count,
                    sum: p.sum,
                };
                let times = (p.start_time_unix_nano, p.time_unix_nano, p.flags);
                taken(&mut p.attributes, &mut Vec::new(), times, value)
            })
            .collect(),
        None => Vec::new(),
    }
}

/// The attributes of every point of `metric`, in order, each with whether it has a value
/// ([`points`] gives those that do, in the same order).
pub(crate) fn all_points(metric: &Metric) -> Vec<(&[KeyValue], bool)> {
    match &metric.data {
        Some(Data::Gauge(Gauge { data_points }) | Data::Sum(Sum { data_points, .. })) => {
            data_points
                .iter()
                .map(|p| (p.attributes.as_slice(), p.value.is_some()))
                .collect()
        }
        Some(Data::Histogram(h)) => h
            .data_points
            .iter()
            .map(|p| (p.attributes.as_slice(), true))
            .collect(),
        Some(Data::ExponentialHistogram(h)) => h
            .data_points
            .iter()
            .map(|p| (p.attributes.as_slice(), true))
            .collect(),
        Some(Data::Summary(s)) => s
            .data_points
            .iter()
            .map(|p| (p.attributes.as_slice(), true))
            .collect(),
        None => Vec::new(),
    }
}

/// Whether `metric` has a point (with a value).
pub(crate) fn has_points(metric: &Metric) -> bool {
    match &metric.data {
        Some(Data::Gauge(g)) => g.data_points.iter().any(|p| p.value.is_some()),
        Some(Data::Sum(s)) => s.data_points.iter().any(|p| p.value.is_some()),
        Some(Data::Histogram(h)) => !h.data_points.is_empty(),
        Some(Data::ExponentialHistogram(h)) => !h.data_points.is_empty(),
        Some(Data::Summary(s)) => !s.data_points.is_empty(),
        None => false,
    }
}

/// An empty copy of `metric`'s data (its kind and temporality), for points to go in.
pub(crate) fn empty_data(kind: Kind, delta: bool) -> Data {
    let temporality = |cumulative: bool| if cumulative && !delta { 2 } else { 1 };
    match kind {
        Kind::Gauge => Data::Gauge(Gauge::default()),
        Kind::Sum {
            cumulative,
            monotonic,
        } => Data::Sum(Sum {
            data_points: Vec::new(),
            aggregation_temporality: temporality(cumulative),
            is_monotonic: monotonic,
        }),
        Kind::Histogram { cumulative } => Data::Histogram(Histogram {
            data_points: Vec::new(),
            aggregation_temporality: temporality(cumulative),
        }),
        Kind::Exponential { cumulative } => Data::ExponentialHistogram(ExponentialHistogram {
            data_points: Vec::new(),
            aggregation_temporality: temporality(cumulative),
        }),
        Kind::Summary => Data::Summary(Summary::default()),
    }
}

fn otlp_buckets(b: Buckets) -> Option<OtlpBuckets> {
    (!b.counts.is_empty()).then_some(OtlpBuckets {
        offset: b.offset,
        bucket_counts: b.counts,
    })
}

/// Appends `point` to `data` (of the point's kind).
pub(crate) fn push(data: &mut Data, point: Point) {
    let Point {
        attributes,
        start,
        time,
        value,
        exemplars,
        flags,
    } = point;
    match (data, value) {
        (
            Data::Gauge(Gauge { data_points }) | Data::Sum(Sum { data_points, .. }),
            Value::Number(n),
        ) => {
            data_points.push(NumberDataPoint {
                attributes,
                start_time_unix_nano: start,
                time_unix_nano: time,
                exemplars,
                flags,
                value: Some(match n {
                    Num::Int(i) => OtlpNumber::AsInt(i),
                    Num::Double(d) => OtlpNumber::AsDouble(d),
                }),
            });
        }
        (Data::Histogram(h), Value::Histogram(v)) => h.data_points.push(HistogramDataPoint {
            attributes,
            start_time_unix_nano: start,
            time_unix_nano: time,
            count: v.count,
            sum: v.sum,
            bucket_counts: v.counts,
            explicit_bounds: v.bounds,
            exemplars,
            flags,
            min: v.min,
            max: v.max,
        }),
        (Data::ExponentialHistogram(h), Value::Exponential(v)) => {
            h.data_points.push(ExponentialHistogramDataPoint {
                attributes,
                start_time_unix_nano: start,
                time_unix_nano: time,
                count: v.count,
                sum: v.sum,
                scale: v.scale,
                zero_count: v.zero_count,
                positive: otlp_buckets(v.positive),
                negative: otlp_buckets(v.negative),
                flags,
                exemplars,
                min: v.min,
                max: v.max,
                zero_threshold: v.zero_threshold,
            });
        }
        (Data::Summary(s), Value::Summary { count, sum }) => {
            s.data_points.push(SummaryDataPoint {
                attributes,
                start_time_unix_nano: start,
                time_unix_nano: time,
                count,
                sum,
                quantile_values: Vec::new(),
                flags,
            });
        }
        _ => {}
    }
}
