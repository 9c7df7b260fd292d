//! Aggregations in a running gateway with two workers: every window yields one data point per
//! group, whichever worker each connection's rows went through; closed windows are sent while
//! the gateway runs, open ones when it shuts down.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use penstock_engine::otlp;
use serde_json::Value;

use common::{Gateway, block_on, export_otlp, temp_dir};

const MINUTE: u64 = 60_000_000_000;

/// A request from `service` with `n` records at `time`, severities 1..=n.
fn request(service: &str, n: usize, time: u64) -> ExportLogsServiceRequest {
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(Resource {
                attributes: vec![KeyValue {
                    key: "service.name".into(),
                    value: Some(AnyValue {
                        value: Some(any_value::Value::StringValue(service.into())),
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            scope_logs: vec![ScopeLogs {
                log_records: (1..=n)
                    .map(|s| LogRecord {
                        time_unix_nano: time,
                        severity_number: s as i32,
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn gateway(dir: &Path) -> Gateway {
    Gateway::start(
        dir,
        "aggregate",
        &format!(
            "CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:0');
             CREATE SINK counts TO FILE WITH (path = '{}');
             CREATE PIPELINE p FROM edge AS BEGIN
               INSERT INTO counts
               SELECT date_bin(INTERVAL '1 minute', time_unix_nano) AS time,
                      resource.attributes['service.name'] AS service,
                      count(*) AS n, max(severity_number) AS worst
               FROM logs GROUP BY 1, 2;
             END;",
            dir.join("counts.jsonl").display()
        ),
    )
}

/// The data points written so far: (metric, window end, service) -> values.
fn points(dir: &Path) -> BTreeMap<(String, u64, String), Vec<f64>> {
    let text = std::fs::read_to_string(dir.join("counts.jsonl")).unwrap_or_default();
    let mut out: BTreeMap<_, Vec<f64>> = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        otlp::json::line_to_protobuf(line, i + 1).unwrap();
        let value: Value = serde_json::from_str(line).unwrap();
        for rm in value["resourceMetrics"].as_array().into_iter().flatten() {
            for sm in rm["scopeMetrics"].as_array().into_iter().flatten() {
                for m in sm["metrics"].as_array().into_iter().flatten() {
                    for kind in ["sum", "gauge"] {
                        for dp in m[kind]["dataPoints"].as_array().into_iter().flatten() {
                            let number = |v: &Value| {
                                v.as_str()
                                    .map_or_else(|| v.as_f64().unwrap(), |s| s.parse().unwrap())
                            };
                            let value = dp.get("asInt").or(dp.get("asDouble")).unwrap();
                            out.entry((
                                m["name"].as_str().unwrap().to_string(),
                                number(&dp["timeUnixNano"]) as u64,
                                dp["attributes"][0]["value"]["stringValue"]
                                    .as_str()
                                    .unwrap()
                                    .to_string(),
                            ))
                            .or_default()
                            .push(number(value));
                        }
                    }
                }
            }
        }
    }
    out
}

/// Sends `per_service` requests per service, each on its own connection (so both workers get
/// some), every record at `time`.
fn send(gateway: &Gateway, services: &[&str], per_service: usize, time: u64) {
    let url = gateway.url();
    block_on(async {
        for i in 0..per_service {
            for service in services {
                export_otlp(&url, request(service, 3 + i % 2, time))
                    .await
                    .unwrap();
            }
        }
    });
}

/// The count and maximum every service should get: requests alternate 3 and 4 records.
fn expected(per_service: usize) -> (f64, f64) {
    let n: usize = (0..per_service).map(|i| 3 + i % 2).sum();
    (n as f64, if per_service > 1 { 4.0 } else { 3.0 })
}

#[test]
fn closed_windows_are_sent_while_running_with_one_point_per_group() {
    let dir = temp_dir("aggregate-closed");
    let gateway = gateway(&dir);
    // A minute long past: its window is closed, so it is sent at the next tick.
    let window = 1_750_000_000_000_000_000 / MINUTE * MINUTE;
    send(&gateway, &["checkout", "cart"], 6, window + 7);
    let (n, worst) = expected(6);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let got = points(&dir);
        let total: f64 = got
            .iter()
            .filter(|((m, ..), _)| m == "n")
            .flat_map(|(_, v)| v)
            .sum();
        if total >= 2.0 * n {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no complete counts: {got:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (ok, _) = gateway.terminate();
    assert!(ok);
    let got = points(&dir);
    // Rows sent after a window closed form a late point of their own; the counts still add up
    // and the maximum is never lost.
    for service in ["checkout", "cart"] {
        let counts = &got[&("n".to_string(), window + MINUTE, service.to_string())];
        assert_eq!(counts.iter().sum::<f64>(), n, "{got:?}");
        let worst_seen = &got[&("worst".to_string(), window + MINUTE, service.to_string())];
        assert_eq!(worst_seen.iter().copied().fold(0.0, f64::max), worst);
    }
}

#[test]
fn open_windows_merge_across_workers_and_are_sent_on_shutdown() {
    let dir = temp_dir("aggregate-open");
    let gateway = gateway(&dir);
    // A window an hour ahead stays open until the gateway stops.
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let window = (now + 60 * MINUTE) / MINUTE * MINUTE;
    send(&gateway, &["checkout", "cart", "ads"], 5, window + 1);
    assert!(points(&dir).is_empty(), "sent before the window closed");
    let (ok, _) = gateway.terminate();
    assert!(ok);
    let got = points(&dir);
    let (n, worst) = expected(5);
    assert_eq!(got.len(), 6, "{got:?}");
    for service in ["checkout", "cart", "ads"] {
        let end = window + MINUTE;
        assert_eq!(got[&("n".into(), end, service.into())], vec![n], "{got:?}");
        assert_eq!(got[&("worst".into(), end, service.into())], vec![worst]);
    }
}
