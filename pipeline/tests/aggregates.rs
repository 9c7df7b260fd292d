//! Aggregate functions: exact integer sums, `min`/`max` of text, exact distinct counts, and
//! the plan errors of calls Penstock does not compute.

#![allow(clippy::unwrap_used)]

use penstock_engine::OtapBatch;
use penstock_engine::otlp::json;
use penstock_pipeline::{Pipeline, check_source};
use serde_json::{Value, json};

/// When every record happened: a minute boundary, 2025-06-15T15:06:00Z.
const T0: u64 = 1_749_999_960_000_000_000;

/// The time key that puts every record in one window, whenever the test runs (windows by
/// arrival could split at a boundary between two batches).
const MINUTE: &str = "date_bin(INTERVAL '1 minute', time_unix_nano) AS time";

/// One logs batch with a record per (severity text, user, bytes).
fn logs(records: &[(&str, &str, i64)]) -> OtapBatch {
    let records: Vec<Value> = records
        .iter()
        .map(|(level, user, bytes)| {
            json!({
                "timeUnixNano": T0.to_string(),
                "severityText": level,
                "attributes": [
                    {"key": "user", "value": {"stringValue": user}},
                    {"key": "bytes", "value": {"intValue": bytes.to_string()}},
                ]
            })
        })
        .collect();
    let request = json!({"resourceLogs": [{"scopeLogs": [{"logRecords": records}]}]});
    let (signal, bytes) = json::line_to_protobuf(&request.to_string(), 1).unwrap();
    penstock_engine::otlp::decode::decode(signal, &bytes)
        .unwrap()
        .remove(0)
}

fn compile(statement: &str) -> Result<Pipeline, String> {
    let sql = format!(
        "CREATE SOURCE src FROM FILE WITH (path = 'x'); CREATE SINK out TO CONSOLE;
         CREATE PIPELINE p FROM src AS BEGIN {statement} END;"
    );
    let program = check_source("test.sql", &sql).map_err(|e| e.to_string())?;
    Pipeline::compile(&program, "p").map_err(|e| e.to_string())
}

/// Runs `statement` over `batches` and returns the derived metrics as OTLP JSON.
fn aggregate(statement: &str, batches: Vec<OtapBatch>) -> Value {
    let mut p = compile(statement).unwrap();
    for batch in batches {
        p.run(batch).unwrap();
    }
    let mut windows = p.finish();
    assert_eq!(windows.len(), 1);
    let batch = windows.remove(0).into_batch().unwrap().unwrap();
    serde_json::from_str(&json::to_line(&batch).unwrap()).unwrap()
}

/// The data points of metric `name`: (value, attributes).
fn points(metrics: &Value, name: &str) -> Vec<(Value, Value)> {
    let metric = metrics["resourceMetrics"][0]["scopeMetrics"][0]["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .unwrap_or_else(|| panic!("no metric {name} in {metrics}"));
    let data = if metric["sum"].is_object() {
        &metric["sum"]
    } else {
        &metric["gauge"]
    };
    data["dataPoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|dp| {
            let value = dp
                .get("asInt")
                .or_else(|| dp.get("asDouble"))
                .cloned()
                .unwrap_or(Value::Null);
            (value, dp["attributes"].clone())
        })
        .collect()
}

#[test]
fn integer_sums_are_exact_past_two_to_the_53() {
    let big = 1i64 << 53;
    let metrics = aggregate(
        "INSERT INTO out SELECT sum(CAST(attributes['bytes'] AS BIGINT)) AS total FROM logs;",
        vec![
            logs(&[("INFO", "a", big), ("INFO", "b", 1)]),
            logs(&[("INFO", "c", 1)]),
        ],
    );
    // Through a double, 2^53 + 1 rounds back to 2^53 (twice).
    assert_eq!(
        points(&metrics, "total"),
        vec![(json!((big + 2).to_string()), json!([]))]
    );
}

#[test]
fn an_integer_sum_past_i64_is_sent_as_a_double_not_wrapped() {
    let metrics = aggregate(
        &format!(
            "INSERT INTO out SELECT {MINUTE}, sum(CAST(attributes['bytes'] AS BIGINT)) AS total \
             FROM logs GROUP BY time;"
        ),
        vec![logs(&[("INFO", "a", i64::MAX), ("INFO", "b", i64::MAX)])],
    );
    let (value, _) = points(&metrics, "total").remove(0);
    assert_eq!(value.as_f64().unwrap(), 2.0 * i64::MAX as f64);
}

#[test]
fn min_and_max_of_text_become_attributes_of_the_groups_points() {
    let metrics = aggregate(
        &format!(
            "INSERT INTO out SELECT {MINUTE}, attributes['user'] AS user, count(*) AS n, \
             min(severity_text) AS first_level, max(severity_text) AS last_level \
             FROM logs GROUP BY time, user;"
        ),
        vec![logs(&[
            ("WARN", "ann", 1),
            ("ERROR", "ann", 1),
            ("INFO", "bob", 1),
        ])],
    );
    let mut n = points(&metrics, "n");
    n.sort_by_key(|(v, _)| v.to_string());
    let attributes = |points: &[(Value, Value)], i: usize| -> Vec<(String, String)> {
        points[i]
            .1
            .as_array()
            .unwrap()
            .iter()
            .map(|kv| {
                (
                    kv["key"].as_str().unwrap().to_string(),
                    kv["value"]["stringValue"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    assert_eq!(n[0].0, json!("1"));
    assert_eq!(
        attributes(&n, 0),
        [
            ("user", "bob"),
            ("first_level", "INFO"),
            ("last_level", "INFO")
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
    );
    assert_eq!(n[1].0, json!("2"));
    assert_eq!(
        attributes(&n, 1),
        [
            ("user", "ann"),
            ("first_level", "ERROR"),
            ("last_level", "WARN")
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
    );
}

#[test]
fn distinct_counts_are_exact_across_batches_and_workers() {
    let statement = &format!(
        "INSERT INTO out SELECT {MINUTE}, count(DISTINCT attributes['user']) AS users \
         FROM logs GROUP BY time;"
    );
    let users: Vec<String> = (0..5000).map(|i| format!("user-{i}")).collect();
    let records = |range: std::ops::Range<usize>| -> OtapBatch {
        let rows: Vec<(&str, &str, i64)> = range.map(|i| ("INFO", users[i].as_str(), 1)).collect();
        logs(&rows)
    };
    // Two workers see overlapping users; merged, each user counts once.
    let mut a = compile(statement).unwrap();
    let mut b = compile(statement).unwrap();
    a.run(records(0..3000)).unwrap();
    a.run(records(1000..2000)).unwrap();
    b.run(records(2000..5000)).unwrap();
    let mut merged = a.finish().remove(0);
    merged.merge(b.finish().remove(0)).unwrap();
    let batch = merged.into_batch().unwrap().unwrap();
    let metrics: Value = serde_json::from_str(&json::to_line(&batch).unwrap()).unwrap();
    assert_eq!(points(&metrics, "users"), vec![(json!("5000"), json!([]))]);
}

#[test]
fn calls_penstock_does_not_compute_are_plan_errors() {
    for (statement, expected) in [
        (
            "INSERT INTO out SELECT sum(DISTINCT severity_number) AS s FROM logs;",
            "does not take DISTINCT",
        ),
        (
            "INSERT INTO out SELECT sum(severity_text) AS s FROM logs;",
            "needs numbers or times",
        ),
        (
            "INSERT INTO out SELECT attributes['user'] AS u, min(severity_text) AS m FROM logs GROUP BY u;",
            "at least one aggregate with a number value",
        ),
    ] {
        let error = compile(statement)
            .err()
            .unwrap_or_else(|| panic!("{statement} compiled"));
        assert!(error.contains(expected), "{statement}: {error}");
    }
}
