//! Realistic metrics of every kind: gauges, monotonic cumulative and non-monotonic
//! delta sums, explicit and exponential histograms and summaries.

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::metrics::v1::{
    ExponentialHistogram, Gauge, Histogram, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics,
    Sum, Summary, number_data_point,
};

use super::catalog::{CATALOG, Def, Kind, attributes, exemplars};
use super::common::{kv_str, plan, round};
use super::generator::{BASE_TIME_NS, DataGen};
use super::histograms;
use super::rng::Rng;
use super::vocab::ENDPOINTS;

use Kind::{Counter, ExpHistogram, Gauge as G, Histogram as H, Summary as S, UpDown};

/// The kinds every request cycles through first.
const KINDS: [Kind; 5] = [G, Counter, H, ExpHistogram, S];

/// Builds a metrics request with exactly `data_points` data points.
pub(super) fn generate(g: &mut DataGen, data_points: usize) -> ExportMetricsServiceRequest {
    let time = g.tick(1_000_000_000, 10_000_000_000);
    let rng = &mut g.rng;
    let mut metrics = Vec::new();
    let mut remaining = data_points;
    let mut kinds = KINDS;
    rng.shuffle(&mut kinds);
    while remaining > 0 {
        let def = match kinds.get(metrics.len()) {
            Some(&k) => {
                let of_kind: Vec<&Def> = CATALOG.iter().filter(|d| d.kind == k).collect();
                *rng.pick(&of_kind)
            }
            None => rng.pick(CATALOG),
        };
        // Leave one point for each kind still to come so small requests cover all five.
        let reserved = kinds.len().saturating_sub(metrics.len() + 1);
        let n = rng
            .range_usize(1, 4)
            .min(remaining.saturating_sub(reserved).max(1));
        remaining -= n;
        let at = time + rng.range(0, 1_000_000);
        metrics.push(metric(rng, def, n, at));
    }
    let groups = plan(&mut g.rng, &g.profiles, metrics.len());
    let mut metrics = metrics.into_iter();
    let mut resource_metrics = Vec::with_capacity(groups.len());
    for group in groups {
        let profile = &g.profiles[group[0].service];
        let scope_metrics = group
            .iter()
            .map(|slot| {
                let (scope, schema_url) = profile.scopes[slot.scope].clone();
                let metrics = metrics.by_ref().take(slot.count).collect();
                ScopeMetrics {
                    scope: Some(scope),
                    metrics,
                    schema_url,
                }
            })
            .collect();
        resource_metrics.push(ResourceMetrics {
            resource: Some(profile.resource.clone()),
            scope_metrics,
            schema_url: profile.schema_url.clone(),
        });
    }
    ExportMetricsServiceRequest { resource_metrics }
}

/// One metric with `n` data points observed at `time`.
fn metric(rng: &mut Rng, def: &Def, n: usize, time: u64) -> Metric {
    let start = if def.cumulative || def.kind == Counter {
        BASE_TIME_NS - 3_600_000_000_000
    } else {
        time - 10_000_000_000
    };
    let first_attr = rng.index(ENDPOINTS.len());
    let pts = |rng: &mut Rng| -> Vec<(Vec<KeyValue>, u64, u32)> {
        (0..n)
            .map(|j| {
                let start = if def.kind == G && rng.chance(0.5) {
                    0
                } else {
                    start
                };
                let flags = u32::from(rng.chance(0.02));
                (attributes(rng, def.attrs, first_attr + j), start, flags)
            })
            .collect()
    };
    let temporality = if def.cumulative { 2 } else { 1 };
    let data = match def.kind {
        G => Data::Gauge(Gauge {
            data_points: pts(rng)
                .into_iter()
                .map(|(attrs, s, f)| number(rng, def, attrs, s, time, f, false))
                .collect(),
        }),
        Counter | UpDown => Data::Sum(Sum {
            data_points: pts(rng)
                .into_iter()
                .map(|(attrs, s, f)| number(rng, def, attrs, s, time, f, true))
                .collect(),
            aggregation_temporality: if def.kind == Counter { 2 } else { 1 },
            is_monotonic: def.kind == Counter,
        }),
        H => Data::Histogram(Histogram {
            data_points: pts(rng)
                .into_iter()
                .map(|(attrs, s, f)| {
                    let ex = exemplars(rng, def, s.max(time - 10_000_000_000), time);
                    histograms::explicit(rng, def, attrs, (s, time), f, ex)
                })
                .collect(),
            aggregation_temporality: temporality,
        }),
        ExpHistogram => Data::ExponentialHistogram(ExponentialHistogram {
            data_points: pts(rng)
                .into_iter()
                .map(|(attrs, s, f)| {
                    let ex = exemplars(rng, def, s.max(time - 10_000_000_000), time);
                    histograms::exponential(rng, def, attrs, (s, time), f, ex)
                })
                .collect(),
            aggregation_temporality: temporality,
        }),
        S => Data::Summary(Summary {
            data_points: pts(rng)
                .into_iter()
                .map(|(attrs, s, f)| histograms::summary(rng, def, attrs, (s, time), f))
                .collect(),
        }),
    };
    let metadata = if rng.chance(0.1) {
        vec![
            kv_str("prometheus.type", prometheus_type(def.kind)),
            kv_str("otel.source", "prometheus-receiver"),
        ]
    } else {
        Vec::new()
    };
    Metric {
        name: def.name.to_owned(),
        description: def.description.to_owned(),
        unit: def.unit.to_owned(),
        metadata,
        data: Some(data),
    }
}

/// Prometheus type name for `metadata`.
fn prometheus_type(kind: Kind) -> &'static str {
    match kind {
        G | UpDown => "gauge",
        Counter => "counter",
        H | ExpHistogram => "histogram",
        S => "summary",
    }
}

/// A gauge or sum point; sums may carry exemplars.
fn number(
    rng: &mut Rng,
    def: &Def,
    attributes: Vec<KeyValue>,
    start_time_unix_nano: u64,
    time_unix_nano: u64,
    flags: u32,
    sum: bool,
) -> NumberDataPoint {
    let magnitude = match def.kind {
        Counter => rng.log_uniform(10.0, 5e6),
        UpDown => rng.f64_range(-20.0, 60.0),
        _ => def.typical * rng.f64_range(0.5, 1.5),
    };
    let value = if def.int {
        number_data_point::Value::AsInt(magnitude.round() as i64)
    } else {
        number_data_point::Value::AsDouble(round(magnitude, 4))
    };
    let window_start = time_unix_nano - 10_000_000_000;
    let exemplars = if sum {
        exemplars(rng, def, window_start, time_unix_nano)
    } else {
        vec![]
    };
    NumberDataPoint {
        attributes,
        start_time_unix_nano,
        time_unix_nano,
        exemplars,
        flags,
        value: Some(value),
    }
}
