//! Aggregation windows: kept across batches, closed by time, merged across pipeline instances.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use penstock_engine::OtapBatch;
use penstock_engine::otlp::json;
use penstock_pipeline::{GRACE, Pipeline, Windows, check_source};
use serde_json::{Value, json};

const MINUTE: u64 = 60_000_000_000;
/// A minute boundary: 2025-06-15T15:06:00Z.
const T0: u64 = 1_750_000_000_000_000_000 - 1_750_000_000_000_000_000 % MINUTE;

/// A logs request from `service` with one record per (time, severity).
fn logs(service: &str, records: &[(u64, i32)]) -> OtapBatch {
    let request = json!({"resourceLogs": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": service}}]},
        "scopeLogs": [{"logRecords": records.iter().map(|(t, severity)| json!({
            "timeUnixNano": t.to_string(), "severityNumber": severity
        })).collect::<Vec<_>>()}]
    }]});
    let (signal, bytes) = json::line_to_protobuf(&request.to_string(), 1).unwrap();
    penstock_engine::otlp::decode::decode(signal, &bytes)
        .unwrap()
        .remove(0)
}

fn pipeline(statement: &str) -> Pipeline {
    let sql = format!(
        "CREATE SOURCE src FROM FILE WITH (path = 'x'); CREATE SINK out TO CONSOLE;
         CREATE PIPELINE p FROM src AS BEGIN {statement} END;"
    );
    let program = check_source("test.sql", &sql).unwrap_or_else(|e| panic!("{e}"));
    Pipeline::compile(&program, "p").unwrap_or_else(|e| panic!("{e}"))
}

const PER_MINUTE: &str = "INSERT INTO out SELECT date_bin(INTERVAL '1 minute', time_unix_nano) AS time, \
     resource.attributes['service.name'] AS service, count(*) AS n, max(severity_number) AS worst \
     FROM logs GROUP BY 1, 2;";

/// Every data point of the metrics of `windows`: (metric, start, time, value, service).
fn points(windows: Vec<Windows>) -> Vec<(String, u64, u64, String, String)> {
    let mut out = Vec::new();
    for w in windows {
        assert_eq!(w.sink(), "out");
        let Some(batch) = w.into_batch().unwrap() else {
            continue;
        };
        let value: Value = serde_json::from_str(&json::to_line(&batch).unwrap()).unwrap();
        for rm in value["resourceMetrics"].as_array().unwrap() {
            for sm in rm["scopeMetrics"].as_array().unwrap() {
                assert_eq!(sm["scope"]["name"], "penstock/p");
                for m in sm["metrics"].as_array().unwrap() {
                    for kind in ["sum", "gauge"] {
                        for dp in m[kind]["dataPoints"].as_array().into_iter().flatten() {
                            let nanos = |k: &str| dp[k].as_str().map_or(0, |s| s.parse().unwrap());
                            out.push((
                                m["name"].as_str().unwrap().to_string(),
                                nanos("startTimeUnixNano"),
                                nanos("timeUnixNano"),
                                dp.get("asInt")
                                    .or(dp.get("asDouble"))
                                    .unwrap()
                                    .to_string()
                                    .trim_matches('"')
                                    .to_string(),
                                dp["attributes"][0]["value"]["stringValue"]
                                    .as_str()
                                    .unwrap_or("")
                                    .to_string(),
                            ));
                        }
                    }
                }
            }
        }
    }
    out.sort();
    out
}

fn at(nanos: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(nanos)
}

#[test]
fn a_window_closes_after_its_end_plus_the_grace_period() {
    let mut p = pipeline(PER_MINUTE);
    let out = p
        .run(logs("checkout", &[(T0 + 1, 9), (T0 + 2, 17)]))
        .unwrap();
    assert!(out.routed.is_empty() && out.closed.is_empty());
    p.run(logs("checkout", &[(T0 + 3, 13), (T0 + MINUTE + 5, 5)]))
        .unwrap();
    let grace = GRACE.as_nanos() as u64;
    assert!(p.close_windows(at(T0 + MINUTE + grace - 1)).is_empty());
    let first = points(p.close_windows(at(T0 + MINUTE + grace)));
    assert_eq!(
        first,
        vec![
            ("n".into(), T0, T0 + MINUTE, "3".into(), "checkout".into()),
            (
                "worst".into(),
                T0,
                T0 + MINUTE,
                "17".into(),
                "checkout".into()
            ),
        ]
    );
    // The next minute is still open; finishing sends it.
    assert!(p.close_windows(at(T0 + 2 * MINUTE)).is_empty());
    let second = points(p.finish());
    assert_eq!(
        second,
        vec![
            (
                "n".into(),
                T0 + MINUTE,
                T0 + 2 * MINUTE,
                "1".into(),
                "checkout".into()
            ),
            (
                "worst".into(),
                T0 + MINUTE,
                T0 + 2 * MINUTE,
                "5".into(),
                "checkout".into()
            ),
        ]
    );
    assert!(p.finish().is_empty());
}

#[test]
fn windows_of_several_instances_merge_into_one_point_per_group() {
    // Two workers, each with its own compiled pipeline, see parts of the same minute.
    let mut a = pipeline(PER_MINUTE);
    let mut b = pipeline(PER_MINUTE);
    a.run(logs("checkout", &[(T0 + 1, 9), (T0 + 2, 21)]))
        .unwrap();
    a.run(logs("cart", &[(T0 + 3, 9)])).unwrap();
    b.run(logs("checkout", &[(T0 + 4, 13)])).unwrap();
    let mut merged = a.finish().remove(0);
    let from_b = b.finish().remove(0);
    assert_eq!(merged.id(), from_b.id());
    merged.merge(from_b).unwrap();
    assert_eq!(merged.len(), 2);
    assert_eq!(
        points(vec![merged]),
        vec![
            ("n".into(), T0, T0 + MINUTE, "1".into(), "cart".into()),
            ("n".into(), T0, T0 + MINUTE, "3".into(), "checkout".into()),
            (
                "worst".into(),
                T0,
                T0 + MINUTE,
                "21".into(),
                "checkout".into()
            ),
            ("worst".into(), T0, T0 + MINUTE, "9".into(), "cart".into()),
        ]
    );
}

#[test]
fn without_a_time_key_rows_are_windowed_by_arrival() {
    let mut p = pipeline(
        "INSERT INTO out SELECT resource.attributes['service.name'] AS service, count(*) AS n \
         FROM logs GROUP BY service;",
    );
    let before = SystemTime::now();
    p.run(logs("checkout", &[(T0, 9), (T0, 9)])).unwrap();
    p.run(logs("checkout", &[(T0, 9)])).unwrap();
    let after = SystemTime::now();
    let window = penstock_pipeline::ARRIVAL_WINDOW;
    // Still open right after arrival.
    assert!(p.close_windows(before).is_empty());
    let closed = points(p.close_windows(after + window + GRACE));
    let nanos = |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64;
    let total: u64 = closed
        .iter()
        .map(|(_, _, _, v, _)| v.parse::<u64>().unwrap())
        .sum();
    assert_eq!(total, 3, "{closed:?}");
    for (name, start, end, _, service) in &closed {
        assert_eq!((name.as_str(), service.as_str()), ("n", "checkout"));
        assert_eq!(end - start, window.as_nanos() as u64);
        assert!(*start <= nanos(after) && *end > nanos(before));
    }
}

#[test]
fn explain_describes_the_windows_and_having() {
    let p = pipeline(
        "INSERT INTO out SELECT date_trunc('hour', time_unix_nano) AS time, count(*) AS n \
         FROM logs GROUP BY 1 HAVING n > 10 AND max(severity_number) > 9;",
    );
    let plan = p.explain();
    assert!(plan.contains("windows: 1 h long, from key time"), "{plan}");
    assert!(
        plan.contains("having `n > 10 AND max(severity_number) > 9`"),
        "{plan}"
    );
    assert!(plan.contains("for HAVING"), "{plan}");
}
