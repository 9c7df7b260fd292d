//! Pipelines that delete rows of forwarded OTAP batches run on only what their conditions read
//! ([`narrowing_reads`]): they must remove exactly the rows they remove from the batch decoded
//! whole.

#![allow(clippy::unwrap_used)]

mod common;

use arrow::array::{Array, AsArray};
use arrow::datatypes::UInt32Type;
use common::{decode_line, i, kv, s};
use penstock_engine::otap::raw::KeyRenames;
use penstock_engine::otap::{EncodeOptions, OtapDecoder, OtapEncoder};
use penstock_engine::schema::consts;
use penstock_engine::{OtapBatch, Signal};
use penstock_pipeline::{Pipeline, check_source, narrowing_reads};
use serde_json::json;

/// Logs of two resources and two scopes, with varied severities, bodies, trace ids and
/// attributes.
fn logs(seed: usize) -> OtapBatch {
    let record = |n: usize| {
        let mut attrs = vec![kv("code", i((n * 37 % 7) as i64 * 100))];
        if n.is_multiple_of(3) {
            attrs.push(kv(
                "exception.type",
                s(if n.is_multiple_of(2) { "E" } else { "F" }),
            ));
        }
        let text = ["INFO", "DEBUG"][n % 2];
        let mut record = json!({"timeUnixNano": (1_750_000_000_000_000_000u64 + n as u64).to_string(),
            "severityNumber": (n * 5 + seed) % 24, "severityText": text,
            "body": s(&format!("{} {n}", if (n + seed).is_multiple_of(2) { "ok" } else { "error" })), "attributes": attrs});
        if !n.is_multiple_of(4) {
            record["traceId"] = json!(format!("{:032x}", n + 1));
            record["spanId"] = json!(format!("{:016x}", n + 1));
        }
        record
    };
    let scope = |name: &str, from: usize| {
        json!({"scope": {"name": name, "attributes": [kv("lib", s(name))]},
               "logRecords": (from..from + 9).map(record).collect::<Vec<_>>()})
    };
    decode_line(json!({"resourceLogs": [
        {"resource": {"attributes": [kv("service.name", s("api"))]},
         "scopeLogs": [scope("http", 0), scope("db", 9)]},
        {"resource": {"attributes": [kv("service.name", s("worker"))]},
         "scopeLogs": [scope("http", 18)]}]}))
}

/// Spans with varied names, durations, statuses, attributes and events.
fn spans(seed: usize) -> OtapBatch {
    let span = |n: usize| {
        let name = ["GET /", "POST /x"][(n + seed) % 2];
        json!({"traceId": format!("{:032x}", n + 1), "spanId": format!("{:016x}", n + 1),
               "name": name, "kind": n % 4,
               "startTimeUnixNano": "1750000000000000000",
               "endTimeUnixNano": (1_750_000_000_000_000_000u64 + n as u64 * 150_000_000).to_string(),
               "status": {"code": n % 3}, "attributes": [kv("http.route", s(if n.is_multiple_of(2) { "/a" } else { "/b" }))],
               "events": [{"timeUnixNano": "1750000000100000000", "name": "e",
                           "attributes": [kv("n", i(n as i64))]}]})
    };
    decode_line(json!({"resourceSpans": [
        {"resource": {"attributes": [kv("service.name", s(if seed.is_multiple_of(2) { "api" } else { "db" }))]},
         "scopeSpans": [{"scope": {"name": "http"}, "spans": (0..12).map(span).collect::<Vec<_>>()}]},
        {"resource": {"attributes": [kv("service.name", s("worker"))]},
         "scopeSpans": [{"scope": {"name": "db"}, "spans": (12..20).map(span).collect::<Vec<_>>()}]}]}))
}

/// The root ids of what `pipeline` sent to sink `a` from `batch`.
fn kept_ids(pipeline: &mut Pipeline, batch: &OtapBatch) -> Vec<u32> {
    let out = pipeline.run(batch.clone()).unwrap();
    let mut ids = Vec::new();
    for (_, routed) in out.routed.iter().filter(|(sink, _)| sink == "a") {
        let Some(root) = routed.root() else { continue };
        let column = root.column_by_name(consts::ID).unwrap();
        let column = arrow::compute::cast(column, &arrow::datatypes::DataType::UInt32).unwrap();
        let column = column.as_primitive::<UInt32Type>();
        assert_eq!(column.null_count(), 0);
        ids.extend(column.values().iter());
    }
    ids
}

/// Runs `statements` on batches forwarded with only what the pipeline reads decoded, and on
/// the same batches decoded whole: the same root rows must reach sink `a`.
fn check(signal: Signal, statements: &str, batches: &[OtapBatch]) {
    let sql = format!(
        "CREATE SOURCE src FROM FILE WITH (path = 'x');
         CREATE SINK a TO CONSOLE;
         CREATE PIPELINE p FROM src AS BEGIN {statements} END;"
    );
    let program = check_source("test.sql", &sql).unwrap_or_else(|e| panic!("{e}"));
    let reads = narrowing_reads(&program.pipelines[0], signal);
    assert!(!reads.is_everything(), "{statements}: reads every table");
    let mut on_view = Pipeline::compile(&program, "p").unwrap();
    let mut on_whole = Pipeline::compile(&program, "p").unwrap();
    let mut encoder = OtapEncoder::new(signal, EncodeOptions::default()).unwrap();
    let mut forwarding = OtapDecoder::new(signal);
    forwarding.enable_forwarding_decoded(64 << 20, reads);
    let mut whole = OtapDecoder::new(signal);
    let mut removed = 0;
    for batch in batches {
        let bar = encoder.encode(batch).unwrap();
        let forwarded = forwarding
            .forward(&bar, &[&KeyRenames::default()])
            .unwrap()
            .expect("forwarded");
        let view = forwarded.decoded.unwrap();
        assert!(!view.is_whole(), "{statements}: some tables left undecoded");
        let all = whole.decode(&bar).unwrap();
        let want = kept_ids(&mut on_whole, &all);
        let got = kept_ids(&mut on_view, &view.batch);
        assert_eq!(got, want, "{statements}");
        removed += all.root().unwrap().num_rows() - want.len();
    }
    assert!(removed > 0, "{statements}: removes no row");
}

#[test]
fn deletes_of_logs_remove_the_same_rows_from_what_they_read() {
    let batches: Vec<OtapBatch> = (0..3).map(logs).collect();
    for delete in [
        "DELETE FROM logs WHERE severity_number < 9;",
        "DELETE FROM logs WHERE body LIKE '%error%';",
        "DELETE FROM logs WHERE attributes['code'] >= 300;",
        "DELETE FROM logs WHERE resource.attributes['service.name'] = 'worker';",
        "DELETE FROM logs WHERE scope.name = 'db' OR scope.attributes['lib'] = 'http' AND flags = 0 AND severity_number > 20;",
        "DELETE FROM logs WHERE trace_id IS NULL; DELETE FROM logs WHERE severity_text = 'DEBUG';",
        "ALTER TABLE logs RENAME ATTRIBUTE 'exception.type' TO 'exception.kind';
         DELETE FROM logs WHERE attributes['exception.kind'] = 'E';",
        "DELETE FROM logs WHERE observed_time_unix_nano IS NULL AND attributes['exception.type'] IS NULL;",
    ] {
        check(
            Signal::Logs,
            &format!("{delete} INSERT INTO a SELECT * FROM logs;"),
            &batches,
        );
    }
}

#[test]
fn deletes_of_spans_remove_the_same_rows_from_what_they_read() {
    let batches: Vec<OtapBatch> = (0..3).map(spans).collect();
    for delete in [
        "DELETE FROM spans WHERE name = 'GET /';",
        "DELETE FROM spans WHERE status.code <> 2 AND end_time_unix_nano - start_time_unix_nano < INTERVAL '1 second';",
        "DELETE FROM spans WHERE duration_nanos > 1000000000 OR kind = 1;",
        "DELETE FROM spans WHERE end_time_unix_nano > TIMESTAMP '2025-06-15 15:06:41';",
        "DELETE FROM spans WHERE attributes['http.route'] = '/a';",
        "DELETE FROM spans WHERE resource.attributes['service.name'] = 'worker';",
    ] {
        check(
            Signal::Traces,
            &format!("{delete} INSERT INTO a SELECT * FROM spans;"),
            &batches,
        );
    }
}

/// A condition whose value may change from one call to the next reads every table: the
/// pipeline must not run on the batch in two steps.
#[test]
fn conditions_with_changing_values_read_everything() {
    for condition in [
        "severity_number < 9 AND random() < 0.5",
        "time_unix_nano < now() - INTERVAL '1 hour'",
    ] {
        let sql = format!(
            "CREATE SOURCE src FROM FILE WITH (path = 'x');
             CREATE SINK a TO CONSOLE;
             CREATE PIPELINE p FROM src AS BEGIN
               DELETE FROM logs WHERE {condition}; INSERT INTO a SELECT * FROM logs;
             END;"
        );
        let program = check_source("test.sql", &sql).unwrap_or_else(|e| panic!("{e}"));
        let reads = narrowing_reads(&program.pipelines[0], Signal::Logs);
        assert!(reads.is_everything(), "{condition}");
    }
}
