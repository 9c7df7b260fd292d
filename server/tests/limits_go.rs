//! A rate limit per tenant in a live gateway with two workers: logs of a noisy and a quiet
//! tenant, sent by the pdata gRPC logs client (`otap-interop export-traces -signal logs`, gzip,
//! as the Collector's otlp exporter sends) over two connections, one grpc-go OTLP receiver
//! (`otap-interop serve-otlp`) for what the limit lets through and one for the rest. The two
//! workers take from one bucket per tenant: the noisy tenant gets at most the rate's worth for
//! the time the load took (not twice that), the quiet one everything, and every record
//! arrives at one of the two receivers. And a series limit over the same two workers (the pdata
//! metrics client): the first series let in stay in, the rest fold into one overflow series,
//! and the values the receiver gets add up to what was sent.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Instant;

use common::go::interop_binary;
use common::otlp_go::{LOGS, OtlpReceiver, series};
use common::traces::send_frames;
use common::{Gateway, temp_dir};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;

const RATE: usize = 200;
const REQUESTS: usize = 40;
const NOISY_PER_REQUEST: usize = 50;

fn text(value: &str) -> Option<AnyValue> {
    Some(AnyValue {
        value: Some(any_value::Value::StringValue(value.into())),
    })
}

/// `count` log records of `tenant`.
fn tenant_logs(tenant: &str, count: usize) -> ResourceLogs {
    ResourceLogs {
        resource: Some(Resource {
            attributes: vec![KeyValue {
                key: "tenant".into(),
                value: text(tenant),
                ..Default::default()
            }],
            ..Default::default()
        }),
        scope_logs: vec![ScopeLogs {
            scope: Some(InstrumentationScope {
                name: "app".into(),
                ..Default::default()
            }),
            log_records: (0..count)
                .map(|i| LogRecord {
                    time_unix_nano: 1_750_000_000_000_000_000 + i as u64,
                    severity_number: 9,
                    body: text(&format!("{tenant} {i}")),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// The records of `tenant` in what a receiver got.
fn records_of(lines: &[String], tenant: &str) -> usize {
    lines
        .iter()
        .filter(|l| l.contains(&format!("{tenant} ")) && l.contains("tenant"))
        .count()
}

#[test]
fn a_noisy_tenant_is_held_to_its_rate_over_both_workers_and_the_rest_goes_to_overflow() {
    let Some(binary) = interop_binary() else {
        return;
    };
    let dir = temp_dir("limits-go");
    let kept = OtlpReceiver::start(&binary, "serve-otlp", &[]);
    let overflow = OtlpReceiver::start(&binary, "serve-otlp", &[]);
    let gateway = Gateway::start_with(
        &dir,
        "limits",
        &format!(
            "CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:0');
             CREATE SINK backend TO OTLP WITH (endpoint = 'http://{}');
             CREATE SINK overflow TO OTLP WITH (endpoint = 'http://{}');
             CREATE PIPELINE tenants FROM edge AS BEGIN
               ALTER TABLE logs LIMIT RATE {RATE} PER resource.attributes['tenant'] INTO overflow;
               INSERT INTO backend SELECT * FROM logs;
             END;",
            kept.addr, overflow.addr
        ),
        &["--workers", "2", "--admin-listen", "127.0.0.1:0"],
    );
    let frames: Vec<Vec<u8>> = (0..REQUESTS)
        .map(|_| {
            ExportLogsServiceRequest {
                resource_logs: vec![
                    tenant_logs("noisy", NOISY_PER_REQUEST),
                    tenant_logs("quiet", 1),
                ],
            }
            .encode_to_vec()
        })
        .collect();
    let started = Instant::now();
    // Every request answered OK: the rows past the rate went to the overflow sink.
    send_frames(&binary, &gateway.addr, 2, "logs", &frames);
    let seconds = started.elapsed().as_secs_f64();
    let limit = |g: &Gateway, counter: &str, tenant: &str| {
        series(
            &g.metrics_text(),
            &format!(
                "penstock_limit_{counter}_total{{pipeline=\"tenants\",statement=\"1\",key=\"{tenant}\"}}"
            ),
        )
        .unwrap_or(0.0) as usize
    };
    let noisy = REQUESTS * NOISY_PER_REQUEST;
    let passed = limit(&gateway, "passed", "noisy");
    assert_eq!(passed + limit(&gateway, "dropped", "noisy"), noisy);
    assert_eq!(limit(&gateway, "passed", "quiet"), REQUESTS);
    // One second's worth at the start, then the rate for the time the load took: not a
    // bucket per worker.
    let most = RATE + (RATE as f64 * seconds).ceil() as usize;
    assert!(
        passed >= RATE && passed <= most,
        "{passed} let through in {seconds:.3} s"
    );
    let (ok, output) = gateway.terminate();
    assert!(ok, "the gateway did not exit cleanly: {output:?}");
    let (got, _) = kept.finish();
    let (past, _) = overflow.finish();
    assert_eq!(records_of(&got.lines[LOGS], "noisy"), passed);
    assert_eq!(records_of(&got.lines[LOGS], "quiet"), REQUESTS);
    assert_eq!(records_of(&past.lines[LOGS], "noisy"), noisy - passed);
    assert_eq!(records_of(&past.lines[LOGS], "quiet"), 0);
}

/// Delta sums of `routes` series (one per route), `rounds` rounds, each request one round of
/// half the routes: the value of route r in round i is r + i + 1.
fn route_requests(routes: usize, rounds: usize) -> (Vec<Vec<u8>>, i64) {
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use opentelemetry_proto::tonic::metrics::v1::metric::Data;
    use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value;
    use opentelemetry_proto::tonic::metrics::v1::{
        Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
    };
    let mut frames = Vec::new();
    let mut total = 0;
    for round in 0..rounds {
        for half in 0..2 {
            let points = (0..routes)
                .filter(|r| r % 2 == half)
                .map(|r| {
                    let value = (r + round + 1) as i64;
                    total += value;
                    NumberDataPoint {
                        attributes: vec![KeyValue {
                            key: "http.route".into(),
                            value: text(&format!("/r{r}")),
                            ..Default::default()
                        }],
                        start_time_unix_nano: 1_750_000_000_000_000_000 + round as u64,
                        time_unix_nano: 1_750_000_001_000_000_000 + round as u64,
                        value: Some(Value::AsInt(value)),
                        ..Default::default()
                    }
                })
                .collect();
            let request = ExportMetricsServiceRequest {
                resource_metrics: vec![ResourceMetrics {
                    resource: Some(Resource::default()),
                    scope_metrics: vec![ScopeMetrics {
                        metrics: vec![Metric {
                            name: "http.server.requests".into(),
                            data: Some(Data::Sum(Sum {
                                data_points: points,
                                aggregation_temporality: 1,
                                is_monotonic: true,
                            })),
                            ..Default::default()
                        }],
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
            };
            frames.push(request.encode_to_vec());
        }
    }
    (frames, total)
}

#[test]
fn past_a_series_limit_the_points_fold_into_one_overflow_series_over_both_workers() {
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use opentelemetry_proto::tonic::metrics::v1::metric::Data;
    use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value;
    let Some(binary) = interop_binary() else {
        return;
    };
    const ROUTES: usize = 20;
    const ROUNDS: usize = 3;
    const MOST: usize = 5;
    let dir = temp_dir("series-limit-go");
    let receiver = OtlpReceiver::start(&binary, "serve-otlp", &[]);
    let gateway = Gateway::start_with(
        &dir,
        "series",
        &format!(
            "CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:0');
             CREATE SINK backend TO OTLP WITH (endpoint = 'http://{}');
             CREATE PIPELINE routes FROM edge AS BEGIN
               ALTER TABLE metrics LIMIT SERIES {MOST} PER name;
               INSERT INTO backend SELECT * FROM metrics;
             END;",
            receiver.addr
        ),
        &["--workers", "2", "--admin-listen", "127.0.0.1:0"],
    );
    let (frames, total) = route_requests(ROUTES, ROUNDS);
    send_frames(&binary, &gateway.addr, 2, "metrics", &frames);
    let limit = |g: &Gateway, counter: &str| {
        series(
            &g.metrics_text(),
            &format!(
                "penstock_limit_{counter}_total{{pipeline=\"routes\",statement=\"1\",key=\"http.server.requests\"}}"
            ),
        )
        .unwrap_or(0.0) as usize
    };
    // The series let in first stay in: each of its points passes, every other point folds.
    assert_eq!(limit(&gateway, "passed"), MOST * ROUNDS);
    assert_eq!(limit(&gateway, "dropped"), (ROUTES - MOST) * ROUNDS);
    let (ok, output) = gateway.terminate();
    assert!(ok, "the gateway did not exit cleanly: {output:?}");
    let mut routes = std::collections::BTreeSet::new();
    let (mut sum, mut overflow_points) = (0, 0);
    for (_, otlp) in receiver.finish_frames().iter().filter(|(tag, _)| *tag == 2) {
        let request = ExportMetricsServiceRequest::decode(otlp.as_slice()).unwrap();
        for metric in request
            .resource_metrics
            .iter()
            .flat_map(|rm| &rm.scope_metrics)
            .flat_map(|sm| &sm.metrics)
        {
            let Some(Data::Sum(s)) = &metric.data else {
                panic!("{metric:?}");
            };
            for p in &s.data_points {
                let Some(Value::AsInt(v)) = p.value else {
                    panic!("{p:?}");
                };
                sum += v;
                match p.attributes[0].key.as_str() {
                    "otel.metric.overflow" => overflow_points += 1,
                    _ => {
                        routes.insert(format!("{:?}", p.attributes[0].value));
                    }
                }
            }
        }
    }
    assert_eq!(routes.len(), MOST, "{routes:?}");
    assert!(overflow_points >= 1);
    // Nothing lost, nothing counted twice: the overflow series carries the rest.
    assert_eq!(sum, total);
}
