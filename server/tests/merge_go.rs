//! Merging metric series in a live gateway with two workers: four pods' metrics, sent by the
//! pdata gRPC metrics client (`otap-interop export-traces -signal metrics`, gzip, as the
//! Collector's otlp exporter sends) over two connections (two pods on each, so each merged
//! series has parts on both workers), lose their `k8s.pod.name` resource attribute; a grpc-go
//! OTLP receiver (`otap-interop serve-otlp`) gets the merged series. What it gets is compared
//! with what the test computes from the input on its own: cumulative sums (one pod restarts),
//! cumulative histograms and summaries by their final running totals, delta exponential
//! histograms (two scales) by their sums, gauges by their latest point. No merged series has
//! two points at one time.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;

use common::go::interop_binary;
use common::otlp_go::{OtlpReceiver, series};
use common::traces::send_frames;
use common::{Gateway, temp_dir};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::exponential_histogram_data_point::Buckets;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value as Number;
use opentelemetry_proto::tonic::metrics::v1::{
    ExponentialHistogram, ExponentialHistogramDataPoint, Gauge, Histogram, HistogramDataPoint,
    Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum, Summary, SummaryDataPoint,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;

const PODS: u64 = 4;
const ROUNDS: u64 = 5;
const ROUTES: [&str; 2] = ["/a", "/b"];
/// The pod that restarts, and the round it does in.
const RESTART: (u64, u64) = (1, 2);
const BASE: u64 = 1_750_000_000_000_000_000;
const SECOND: u64 = 1_000_000_000;

fn kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
        ..Default::default()
    }
}

/// The start time of `pod`'s cumulative series in `round`.
fn start(pod: u64, round: u64) -> u64 {
    if (pod, true) == (RESTART.0, round >= RESTART.1) {
        BASE + 15 * SECOND
    } else {
        BASE
    }
}

/// When `pod` reports in `round`.
fn time(pod: u64, round: u64) -> u64 {
    BASE + (round + 1) * 10 * SECOND + pod * SECOND
}

/// `pod`'s cumulative request count on route `r` in `round` (counting again from its restart).
fn requests(pod: u64, r: usize, round: u64) -> i64 {
    let since = if pod == RESTART.0 && round >= RESTART.1 {
        round - RESTART.1
    } else {
        round
    };
    ((since + 1) * (pod + 1) * (r as u64 + 1)) as i64
}

/// `pod`'s cumulative latency bucket counts (bounds 10, 100) in `round`.
fn latency(pod: u64, round: u64) -> Vec<u64> {
    vec![round + 1, (round + 1) * pod, round]
}

/// `pod`'s delta exponential histogram in `round`: scale 1 for even pods, 0 for odd ones.
fn size(pod: u64, round: u64) -> (i32, i32, Vec<u64>) {
    if pod.is_multiple_of(2) {
        (1, 2, vec![round + 1, 1])
    } else {
        (0, 1, vec![pod + round])
    }
}

fn cumulative(name: &str, points: Vec<NumberDataPoint>) -> Metric {
    Metric {
        name: name.into(),
        unit: "1".into(),
        data: Some(Data::Sum(Sum {
            data_points: points,
            aggregation_temporality: 2,
            is_monotonic: true,
        })),
        ..Default::default()
    }
}

/// `pod`'s request of `round`.
fn pod_metrics(pod: u64, round: u64) -> ResourceMetrics {
    let (s, t) = (start(pod, round), time(pod, round));
    let requests = ROUTES
        .iter()
        .enumerate()
        .map(|(r, route)| NumberDataPoint {
            attributes: vec![kv("http.route", route)],
            start_time_unix_nano: s,
            time_unix_nano: t,
            value: Some(Number::AsInt(requests(pod, r, round))),
            ..Default::default()
        })
        .collect();
    let counts = latency(pod, round);
    let (scale, offset, buckets) = size(pod, round);
    let metrics = vec![
        cumulative("http.requests", requests),
        Metric {
            name: "http.latency".into(),
            unit: "ms".into(),
            data: Some(Data::Histogram(Histogram {
                data_points: vec![HistogramDataPoint {
                    start_time_unix_nano: s,
                    time_unix_nano: t,
                    count: counts.iter().sum(),
                    sum: Some(counts.iter().sum::<u64>() as f64 * 7.0),
                    bucket_counts: counts,
                    explicit_bounds: vec![10.0, 100.0],
                    ..Default::default()
                }],
                aggregation_temporality: 2,
            })),
            ..Default::default()
        },
        Metric {
            name: "queue.depth".into(),
            unit: "1".into(),
            data: Some(Data::Gauge(Gauge {
                data_points: vec![NumberDataPoint {
                    time_unix_nano: t,
                    value: Some(Number::AsDouble((pod * 10 + round) as f64)),
                    ..Default::default()
                }],
            })),
            ..Default::default()
        },
        Metric {
            name: "payload.size".into(),
            unit: "By".into(),
            data: Some(Data::ExponentialHistogram(ExponentialHistogram {
                data_points: vec![ExponentialHistogramDataPoint {
                    start_time_unix_nano: t - SECOND,
                    time_unix_nano: t,
                    count: buckets.iter().sum(),
                    sum: Some(1.0),
                    scale,
                    positive: Some(Buckets {
                        offset,
                        bucket_counts: buckets,
                    }),
                    ..Default::default()
                }],
                aggregation_temporality: 1,
            })),
            ..Default::default()
        },
        Metric {
            name: "rpc.duration".into(),
            unit: "ms".into(),
            data: Some(Data::Summary(Summary {
                data_points: vec![SummaryDataPoint {
                    start_time_unix_nano: s,
                    time_unix_nano: t,
                    count: (round + 1) * 2,
                    sum: ((round + 1) * 3) as f64,
                    ..Default::default()
                }],
            })),
            ..Default::default()
        },
    ];
    ResourceMetrics {
        resource: Some(Resource {
            attributes: vec![
                kv("service.name", "checkout"),
                kv("k8s.pod.name", &format!("pod-{pod}")),
            ],
            ..Default::default()
        }),
        scope_metrics: vec![ScopeMetrics {
            scope: Some(InstrumentationScope {
                name: "http".into(),
                ..Default::default()
            }),
            metrics,
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// The requests: per round, one for the even pods (connection 0), one for the odd ones
/// (connection 1).
fn requests_sent() -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    for round in 0..ROUNDS {
        for parity in 0..2 {
            let request = ExportMetricsServiceRequest {
                resource_metrics: (0..PODS)
                    .filter(|p| p % 2 == parity)
                    .map(|pod| pod_metrics(pod, round))
                    .collect(),
            };
            frames.push(request.encode_to_vec());
        }
    }
    frames
}

/// What a cumulative series grew by in each round, summed: its first value, then the
/// difference from the round before, or the whole value where it restarted.
fn grown(values: impl Iterator<Item = (u64, i64)>) -> i64 {
    let mut total = 0;
    let mut last: Option<(u64, i64)> = None;
    for (start, value) in values {
        total += match last {
            Some((s, v)) if s == start && value >= v => value - v,
            _ => value,
        };
        last = Some((start, value));
    }
    total
}

/// What the receiver should end with, computed from the input: per merged series (metric and
/// point attributes), a text of its final value.
fn expected() -> BTreeMap<String, String> {
    let mut want = BTreeMap::new();
    for (r, route) in ROUTES.iter().enumerate() {
        let total: i64 = (0..PODS)
            .map(|pod| grown((0..ROUNDS).map(|round| (start(pod, round), requests(pod, r, round)))))
            .sum();
        want.insert(format!("http.requests {route}"), format!("sum {total}"));
    }
    // Histograms: bucket by bucket, as sums.
    let buckets: Vec<i64> = (0..3)
        .map(|b| {
            (0..PODS)
                .map(|pod| {
                    grown(
                        (0..ROUNDS).map(|round| (start(pod, round), latency(pod, round)[b] as i64)),
                    )
                })
                .sum()
        })
        .collect();
    want.insert("http.latency".into(), format!("histogram {buckets:?}"));
    // The latest gauge point: the last round's last pod.
    want.insert(
        "queue.depth".into(),
        format!("gauge {}", ((PODS - 1) * 10 + ROUNDS - 1) as f64),
    );
    // Exponential histograms at scale 0: bucket i of scale 1 is bucket i >> 1.
    let mut at_zero: BTreeMap<i32, u64> = BTreeMap::new();
    for pod in 0..PODS {
        for round in 0..ROUNDS {
            let (scale, offset, counts) = size(pod, round);
            for (i, c) in counts.iter().enumerate() {
                *at_zero.entry((offset + i as i32) >> scale).or_default() += c;
            }
        }
    }
    want.insert("payload.size".into(), format!("exponential 0 {at_zero:?}"));
    let summary_count: i64 = (0..PODS)
        .map(|pod| grown((0..ROUNDS).map(|round| (start(pod, round), ((round + 1) * 2) as i64))))
        .sum();
    want.insert("rpc.duration".into(), format!("summary {summary_count}"));
    want
}

/// The final value of each merged series the receiver got (cumulative: the latest point;
/// delta: all points summed; gauges: the latest point), and whether any series had two points
/// at one time.
fn received(frames: &[(u8, Vec<u8>)]) -> (BTreeMap<String, String>, bool) {
    type Points = Vec<(u64, String, Vec<u64>, BTreeMap<i32, u64>)>;
    let mut by_series: BTreeMap<String, Points> = BTreeMap::new();
    for (_, otlp) in frames.iter().filter(|(tag, _)| *tag == 2) {
        let request = ExportMetricsServiceRequest::decode(otlp.as_slice()).unwrap();
        for rm in &request.resource_metrics {
            let resource = rm.resource.clone().unwrap_or_default();
            assert!(
                resource
                    .attributes
                    .iter()
                    .all(|kv| kv.key != "k8s.pod.name"),
                "{resource:?}"
            );
            for metric in rm.scope_metrics.iter().flat_map(|sm| &sm.metrics) {
                let name = metric.name.clone();
                match metric.data.as_ref().unwrap() {
                    Data::Sum(s) => {
                        assert_eq!((s.aggregation_temporality, s.is_monotonic), (2, true));
                        for p in &s.data_points {
                            let route = p.attributes[0].value.clone().unwrap();
                            let Some(any_value::Value::StringValue(route)) = route.value else {
                                panic!("{route:?}");
                            };
                            let Some(Number::AsInt(v)) = p.value else {
                                panic!("{p:?}");
                            };
                            assert_eq!(p.start_time_unix_nano, BASE, "the merged series' start");
                            by_series
                                .entry(format!("{name} {route}"))
                                .or_default()
                                .push((
                                    p.time_unix_nano,
                                    format!("sum {v}"),
                                    Vec::new(),
                                    BTreeMap::new(),
                                ));
                        }
                    }
                    Data::Histogram(h) => {
                        for p in &h.data_points {
                            by_series.entry(name.clone()).or_default().push((
                                p.time_unix_nano,
                                format!("histogram {:?}", p.bucket_counts),
                                Vec::new(),
                                BTreeMap::new(),
                            ));
                        }
                    }
                    Data::Gauge(g) => {
                        for p in &g.data_points {
                            let Some(Number::AsDouble(v)) = p.value else {
                                panic!("{p:?}");
                            };
                            by_series.entry(name.clone()).or_default().push((
                                p.time_unix_nano,
                                format!("gauge {v}"),
                                Vec::new(),
                                BTreeMap::new(),
                            ));
                        }
                    }
                    Data::ExponentialHistogram(e) => {
                        for p in &e.data_points {
                            assert_eq!(p.scale, 0);
                            let positive = p.positive.clone().unwrap_or_default();
                            let buckets = positive
                                .bucket_counts
                                .iter()
                                .enumerate()
                                .map(|(i, c)| (positive.offset + i as i32, *c))
                                .collect();
                            by_series.entry(name.clone()).or_default().push((
                                p.time_unix_nano,
                                String::new(),
                                Vec::new(),
                                buckets,
                            ));
                        }
                    }
                    Data::Summary(s) => {
                        for p in &s.data_points {
                            by_series.entry(name.clone()).or_default().push((
                                p.time_unix_nano,
                                format!("summary {}", p.count),
                                Vec::new(),
                                BTreeMap::new(),
                            ));
                        }
                    }
                }
            }
        }
    }
    let mut duplicates = false;
    let mut got = BTreeMap::new();
    for (series, mut points) in by_series {
        points.sort_by_key(|p| p.0);
        duplicates |= points.windows(2).any(|w| w[0].0 == w[1].0);
        let value = if series == "payload.size" {
            let mut sum: BTreeMap<i32, u64> = BTreeMap::new();
            for (_, _, _, buckets) in &points {
                for (i, c) in buckets {
                    *sum.entry(*i).or_default() += c;
                }
            }
            sum.retain(|_, c| *c > 0);
            format!("exponential 0 {sum:?}")
        } else {
            points.last().unwrap().1.clone()
        };
        got.insert(series, value);
    }
    (got, duplicates)
}

#[test]
fn four_pods_over_two_workers_merge_into_series_without_a_pod() {
    let Some(binary) = interop_binary() else {
        return;
    };
    let dir = temp_dir("merge-go");
    let receiver = OtlpReceiver::start(&binary, "serve-otlp", &[]);
    let gateway = Gateway::start_with(
        &dir,
        "merge",
        &format!(
            "CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:0');
             CREATE SINK backend TO OTLP WITH (endpoint = 'http://{}');
             CREATE PIPELINE pods FROM edge AS BEGIN
               ALTER TABLE metrics DROP RESOURCE ATTRIBUTE 'k8s.pod.name';
               INSERT INTO backend SELECT * FROM metrics;
             END;",
            receiver.addr
        ),
        &["--workers", "2", "--admin-listen", "127.0.0.1:0"],
    );
    let frames = requests_sent();
    send_frames(&binary, &gateway.addr, 2, "metrics", &frames);
    let merge = |g: &Gateway, name: &str| {
        series(
            &g.metrics_text(),
            &format!("penstock_merge_{name}{{pipeline=\"pods\"}}"),
        )
        .unwrap_or(-1.0)
    };
    // 4 pods x 5 rounds x 6 points, each counted once, by the worker that merges its series.
    let points = (PODS * ROUNDS * 6) as f64;
    gateway.wait_until("every point merged", |g| {
        merge(g, "points_in_total") == points
    });
    assert_eq!(merge(&gateway, "series_out"), 6.0);
    // Pod 1's two request series, its histogram and its summary restarted.
    assert_eq!(merge(&gateway, "resets_total"), 4.0);
    assert_eq!(merge(&gateway, "points_refused_total"), 0.0);
    let (ok, output) = gateway.terminate();
    assert!(ok, "the gateway did not exit cleanly: {output:?}");
    let (got, duplicates) = received(&receiver.finish_frames());
    assert!(!duplicates, "two points of one merged series at one time");
    assert_eq!(got, expected());
}
