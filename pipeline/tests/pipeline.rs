//! Pipelines on real batches: OTLP JSON in, the pipeline's steps, OTLP JSON out.

#![allow(clippy::unwrap_used)]

mod common;

use common::{decode_line, i, kv, s};
use penstock_engine::OtapBatch;
use penstock_engine::otlp::json;
use penstock_pipeline::{Pipeline, RunOutput, check_source};
use serde_json::{Value, json};

/// A log record with a severity, a body and attributes.
fn log(severity: i32, body: &str, attrs: Vec<Value>) -> Value {
    json!({"timeUnixNano": "1750000000000000000", "severityNumber": severity, "severityText": "INFO",
           "body": s(body), "attributes": attrs})
}

/// A logs request: one entry per resource (its attributes, its records).
fn logs(resources: Vec<(Vec<Value>, Vec<Value>)>) -> OtapBatch {
    let request = json!({"resourceLogs": resources.into_iter().map(|(attrs, records)| json!({
        "resource": {"attributes": attrs},
        "scopeLogs": [{"scope": {"name": "app"}, "logRecords": records}]
    })).collect::<Vec<_>>()});
    decode_line(request)
}

fn pipeline(body: &str) -> Pipeline {
    let sql = format!(
        "CREATE SOURCE src FROM FILE WITH (path = 'x');
         CREATE SINK a TO CONSOLE; CREATE SINK b TO CONSOLE;
         CREATE PIPELINE p FROM src AS BEGIN {body} END;"
    );
    let program = check_source("test.sql", &sql).unwrap_or_else(|e| panic!("{e}"));
    Pipeline::compile(&program, "p").unwrap_or_else(|e| panic!("{e}"))
}

/// The routed batches of one sink, as OTLP JSON values.
fn sink(output: &RunOutput, name: &str) -> Vec<Value> {
    output
        .routed
        .iter()
        .filter(|(s, _)| s == name)
        .map(|(_, b)| serde_json::from_str(&json::to_line(b).unwrap()).unwrap())
        .collect()
}

/// (resource attributes as "k=v" strings, record body, record attributes as "k=v") per record.
fn records(requests: &[Value]) -> Vec<(Vec<String>, String, Vec<String>)> {
    let pairs = |attrs: &Value| -> Vec<String> {
        let mut v: Vec<String> = attrs
            .as_array()
            .into_iter()
            .flatten()
            .map(|kv| {
                let value = kv["value"]
                    .as_object()
                    .and_then(|o| o.values().next())
                    .cloned()
                    .unwrap_or(Value::Null);
                format!(
                    "{}={}",
                    kv["key"].as_str().unwrap(),
                    value.as_str().map_or(value.to_string(), str::to_string)
                )
            })
            .collect();
        v.sort();
        v
    };
    let mut out = Vec::new();
    for request in requests {
        for rl in request["resourceLogs"].as_array().unwrap() {
            let resource = pairs(&rl["resource"]["attributes"]);
            for sl in rl["scopeLogs"].as_array().unwrap() {
                for r in sl["logRecords"].as_array().unwrap() {
                    let body = r["body"]["stringValue"].as_str().unwrap_or("").to_string();
                    out.push((resource.clone(), body, pairs(&r["attributes"])));
                }
            }
        }
    }
    out.sort();
    out
}

#[test]
fn a_resource_attribute_set_for_some_records_does_not_leak_to_the_others() {
    // Two records share one resource; only one matches. (OpenTelemetry Collector contrib#32080.)
    let batch = logs(vec![(
        vec![kv("service.name", s("checkout"))],
        vec![log(17, "failed", vec![]), log(9, "ok", vec![])],
    )]);
    let mut p = pipeline(
        "UPDATE logs SET resource.attributes['alert'] = 'page' WHERE severity_number >= 17;
         INSERT INTO a SELECT * FROM logs;",
    );
    let out = p.run(batch).unwrap();
    let got = records(&sink(&out, "a"));
    assert_eq!(
        got,
        [
            (
                vec!["alert=page".into(), "service.name=checkout".into()],
                "failed".into(),
                vec![]
            ),
            (vec!["service.name=checkout".into()], "ok".into(), vec![]),
        ]
    );
}

#[test]
fn a_resource_attribute_set_for_all_its_records_changes_it_in_place() {
    let batch = logs(vec![
        (
            vec![kv("service.name", s("checkout"))],
            vec![log(9, "x", vec![]), log(9, "y", vec![])],
        ),
        (
            vec![kv("service.name", s("cart"))],
            vec![log(9, "z", vec![])],
        ),
    ]);
    let mut p = pipeline(
        "UPDATE logs SET resource.attributes['team'] = 'payments' WHERE resource.attributes['service.name'] = 'checkout';
         INSERT INTO a SELECT * FROM logs;",
    );
    let out = p.run(batch).unwrap();
    let requests = sink(&out, "a");
    assert_eq!(
        requests[0]["resourceLogs"].as_array().unwrap().len(),
        2,
        "no resource was split"
    );
    let got = records(&requests);
    assert_eq!(got[0].0, ["service.name=cart"]);
    assert_eq!(got[1].0, ["service.name=checkout", "team=payments"]);
    assert_eq!(got[2].0, ["service.name=checkout", "team=payments"]);
}

#[test]
fn renames_drops_and_a_rename_onto_an_existing_key() {
    let batch = logs(vec![(
        vec![kv("deployment.environment", s("prod"))],
        vec![
            log(
                9,
                "a",
                vec![kv("exception.type", s("E")), kv("user.email", s("x@y"))],
            ),
            log(
                9,
                "b",
                vec![kv("exception.type", s("F")), kv("exception.kind", s("old"))],
            ),
            log(9, "c", vec![kv("exception.kind", s("kept"))]),
        ],
    )]);
    let mut p = pipeline(
        "ALTER TABLE logs RENAME ATTRIBUTE 'exception.type' TO 'exception.kind';
         ALTER TABLE logs RENAME RESOURCE ATTRIBUTE 'deployment.environment' TO 'deployment.environment.name';
         ALTER TABLE logs DROP ATTRIBUTE 'user.email';
         INSERT INTO a SELECT * FROM logs;",
    );
    let got = records(&sink(&p.run(batch).unwrap(), "a"));
    let env = vec!["deployment.environment.name=prod".to_string()];
    assert_eq!(
        got,
        [
            (env.clone(), "a".into(), vec!["exception.kind=E".into()]),
            (env.clone(), "b".into(), vec!["exception.kind=F".into()]),
            (env, "c".into(), vec!["exception.kind=kept".into()]),
        ]
    );
}

#[test]
fn attribute_comparisons_use_the_literal_type_and_routes_split_a_batch() {
    let batch = logs(vec![(
        vec![],
        vec![
            log(9, "int 503", vec![kv("code", i(503))]),
            log(9, "string 500", vec![kv("code", s("500"))]),
            log(9, "int 200", vec![kv("code", i(200))]),
            log(9, "no code", vec![]),
        ],
    )]);
    let mut p = pipeline(
        "INSERT INTO a SELECT * FROM logs WHERE attributes['code'] >= 500;
         INSERT INTO b SELECT * FROM logs WHERE attributes['code'] < 500;",
    );
    let out = p.run(batch).unwrap();
    let bodies = |sink_name| {
        records(&sink(&out, sink_name))
            .into_iter()
            .map(|r| r.1)
            .collect::<Vec<_>>()
    };
    assert_eq!(bodies("a"), ["int 503", "string 500"]);
    assert_eq!(bodies("b"), ["int 200"]);
    assert_eq!(
        out.unrouted_rows, 1,
        "the record without a code goes nowhere"
    );
    assert_eq!(p.unrouted_rows(), 1);
    let stats: Vec<_> = p.stats().map(|(_, s)| (s.rows_in, s.rows_out)).collect();
    assert_eq!(stats, [(4, 2), (4, 1)]);
}

#[test]
fn deletes_cascade_and_updates_compute_with_datafusion_functions() {
    let batch = logs(vec![(
        vec![kv("service.name", s("checkout"))],
        vec![
            log(3, "debug noise", vec![kv("k", s("v"))]),
            log(9, "card 1234567812345678 ok", vec![kv("k", s("w"))]),
        ],
    )]);
    let mut p = pipeline(
        r"DELETE FROM logs WHERE severity_number < 5;
          UPDATE logs SET body = regexp_replace(body, '\d{16}', '****'),
                          attributes['hash'] = left(encode(sha256(body), 'hex'), 8),
                          attributes['len'] = length(body);
          INSERT INTO a SELECT * FROM logs;",
    );
    let out = p.run(batch).unwrap();
    let got = records(&sink(&out, "a"));
    assert_eq!(
        got,
        [(
            vec!["service.name=checkout".into()],
            "card **** ok".into(),
            // sha256 of the body before the update (values see the row as it was).
            vec!["hash=0b7e1b8e".into(), "k=w".into(), "len=24".into()]
        )]
    );
    let (_, delete) = p.stats().next().unwrap();
    assert_eq!(
        (delete.rows_in, delete.rows_out, delete.rows_dropped),
        (2, 1, 1)
    );
}

#[test]
fn plan_errors_name_the_statement() {
    let sql = "CREATE SOURCE src FROM FILE WITH (path = 'x');
CREATE PIPELINE p FROM src AS BEGIN
  DELETE FROM logs WHERE no_such_function(body) = 1;
END;";
    let program = check_source("bad.sql", sql).unwrap();
    let err = Pipeline::compile(&program, "p")
        .err()
        .expect("fails to plan")
        .to_string();
    // The error points at the expression.
    assert!(err.starts_with("bad.sql:3:26: "), "{err}");
    assert!(err.contains("no_such_function"), "{err}");
    let sql = "CREATE SOURCE src FROM FILE WITH (path = 'x');
CREATE PIPELINE p FROM src AS BEGIN
  DELETE FROM logs WHERE body;
END;";
    let program = check_source("bad.sql", sql).unwrap();
    let err = Pipeline::compile(&program, "p")
        .err()
        .expect("fails to plan")
        .to_string();
    assert!(err.contains("not a boolean"), "{err}");
}

#[test]
fn deleting_spans_removes_their_events_links_and_attributes() {
    let span = |name: &str, id: &str, status: i32| {
        json!({"traceId": "0102030405060708090a0b0c0d0e0f10", "spanId": id, "name": name,
               "startTimeUnixNano": "1750000000000000000", "endTimeUnixNano": "1750000000500000000",
               "status": {"code": status}, "attributes": [kv("http.route", s("/x"))],
               "events": [{"timeUnixNano": "1750000000100000000", "name": format!("{name}-event"),
                           "attributes": [kv("e", s("1"))]}],
               "links": [{"traceId": "0102030405060708090a0b0c0d0e0f11", "spanId": "0102030405060709"}]})
    };
    let batch = decode_line(
        json!({"resourceSpans": [{"resource": {"attributes": [kv("service.name", s("api"))]},
        "scopeSpans": [{"scope": {"name": "http"}, "spans": [
            span("keep", "0102030405060701", 2), span("drop", "0102030405060702", 1)]}]}]}),
    );
    let mut p = pipeline(
        "DELETE FROM spans WHERE status.code <> 2 AND end_time_unix_nano - start_time_unix_nano < INTERVAL '1 second';
         INSERT INTO a SELECT * FROM spans;",
    );
    let out = p.run(batch).unwrap();
    let requests = sink(&out, "a");
    let spans = &requests[0]["resourceSpans"][0]["scopeSpans"][0]["spans"];
    assert_eq!(spans.as_array().unwrap().len(), 1);
    assert_eq!(spans[0]["name"], "keep");
    assert_eq!(spans[0]["events"][0]["name"], "keep-event");
    assert_eq!(spans[0]["events"][0]["attributes"][0]["key"], "e");
    assert_eq!(spans[0]["links"].as_array().unwrap().len(), 1);
    assert_eq!(spans[0]["attributes"][0]["key"], "http.route");
}

#[test]
fn metrics_rows_are_data_points_and_empty_metrics_go_away() {
    let gauge = |name: &str, points: Vec<(f64, &str)>| {
        json!({"name": name, "unit": "1", "gauge": {"dataPoints": points.into_iter().map(|(v, host)| json!({
            "timeUnixNano": "1750000000000000000", "asDouble": v, "attributes": [kv("host", s(host))]
        })).collect::<Vec<_>>()}})
    };
    let batch = decode_line(
        json!({"resourceMetrics": [{"resource": {"attributes": [kv("service.name", s("db"))]},
        "scopeMetrics": [{"scope": {"name": "m"}, "metrics": [
            gauge("cpu", vec![(0.5, "a"), (0.9, "b")]),
            gauge("mem", vec![(0.1, "a")])]}]}]}),
    );
    let mut p = pipeline(
        "DELETE FROM metrics WHERE value < 0.2;
         UPDATE metrics SET attributes['hot'] = value > 0.8;
         ALTER TABLE metrics RENAME ATTRIBUTE 'host' TO 'host.name';
         INSERT INTO a SELECT * FROM metrics WHERE name = 'cpu' AND attributes['host.name'] = 'b';
         INSERT INTO b SELECT * FROM metrics;",
    );
    // The UPDATE of an attribute merges the series it writes: they go on when the interval
    // ends.
    let mut out = p.run(batch).unwrap();
    out.routed
        .extend(p.decide(std::time::SystemTime::now(), true).unwrap());
    let metrics = |requests: &[Value]| -> Vec<String> {
        let mut v = Vec::new();
        for r in requests {
            for m in r["resourceMetrics"][0]["scopeMetrics"][0]["metrics"]
                .as_array()
                .unwrap()
            {
                for dp in m["gauge"]["dataPoints"].as_array().unwrap() {
                    let attrs: Vec<String> = dp["attributes"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|kv| {
                            format!(
                                "{}={}",
                                kv["key"].as_str().unwrap(),
                                kv["value"].as_object().unwrap().values().next().unwrap()
                            )
                        })
                        .collect();
                    v.push(format!(
                        "{} {} {}",
                        m["name"].as_str().unwrap(),
                        dp["asDouble"],
                        attrs.join(",")
                    ));
                }
            }
        }
        v.sort();
        v
    };
    assert_eq!(
        metrics(&sink(&out, "a")),
        ["cpu 0.9 host.name=\"b\",hot=true"]
    );
    assert_eq!(
        metrics(&sink(&out, "b")),
        [
            "cpu 0.5 host.name=\"a\",hot=false",
            "cpu 0.9 host.name=\"b\",hot=true"
        ],
        "mem lost its only point and is gone"
    );
}

#[test]
fn deleted_records_leave_nothing_in_otap_output() {
    use penstock_engine::otap::{EncodeOptions, OtapDecoder, OtapEncoder};
    let batch = logs(vec![(
        vec![kv("service.name", s("checkout"))],
        vec![
            log(3, "gone", vec![kv("secret", s("x")), kv("k", i(1))]),
            log(9, "kept", vec![kv("k", i(2))]),
            log(2, "gone too", vec![kv("secret", s("y"))]),
        ],
    )]);
    let mut p = pipeline(
        "DELETE FROM logs WHERE severity_number < 5;
         UPDATE logs SET attributes['new'] = 'v';
         INSERT INTO a SELECT * FROM logs;",
    );
    let out = p.run(batch).unwrap();
    let (_, routed) = &out.routed[0];
    let mut encoder = OtapEncoder::new(routed.signal(), EncodeOptions::default()).unwrap();
    let mut decoder = OtapDecoder::new(routed.signal());
    let decoded = decoder.decode(&encoder.encode(routed).unwrap()).unwrap();
    for batch in [routed, &decoded] {
        let value: Value = serde_json::from_str(&json::to_line(batch).unwrap()).unwrap();
        assert_eq!(
            records(&[value]),
            [(
                vec!["service.name=checkout".into()],
                "kept".into(),
                vec!["k=2".into(), "new=v".into()]
            )]
        );
    }
    let attrs = decoded.get(penstock_engine::PayloadType::LogAttrs).unwrap();
    assert_eq!(
        attrs.num_rows(),
        2,
        "no attribute of a deleted record travels"
    );
}

#[test]
fn new_ids_never_adopt_the_attributes_of_deleted_records() {
    use arrow::array::{RecordBatch, UInt16Array};
    use std::sync::Arc;
    let mut batch = logs(vec![(
        vec![],
        vec![
            log(3, "gone", vec![kv("secret", s("x"))]),
            log(9, "kept", vec![]),
            log(2, "gone too", vec![kv("secret", s("y"))]),
        ],
    )]);
    // As an OTAP producer may send it: the record without attributes has no id.
    let table = batch.get(penstock_engine::PayloadType::Logs).unwrap();
    let index = table.schema().index_of("id").unwrap();
    let mut columns = table.columns().to_vec();
    columns[index] = Arc::new(UInt16Array::from(vec![Some(0), None, Some(2)]));
    let table = RecordBatch::try_new(table.schema(), columns).unwrap();
    batch
        .set(penstock_engine::PayloadType::Logs, table)
        .unwrap();
    let mut p = pipeline(
        "DELETE FROM logs WHERE severity_number < 5;
         UPDATE logs SET attributes['new'] = 'v';
         INSERT INTO a SELECT * FROM logs;",
    );
    let got = records(&sink(&p.run(batch).unwrap(), "a"));
    assert_eq!(got, [(vec![], "kept".into(), vec!["new=v".into()])]);
}

#[test]
fn metric_level_updates_split_metrics_and_survive_otap_encoding() {
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use penstock_engine::otap::{EncodeOptions, OtapDecoder, OtapEncoder};
    use penstock_engine::{equiv, otlp};
    use prost::Message;
    let point = |v: f64, host: &str| {
        json!({"timeUnixNano": "1750000000000000000", "asDouble": v,
               "attributes": [kv("host", s(host))],
               "exemplars": [{"timeUnixNano": "1750000000000000000", "asDouble": v,
                              "filteredAttributes": [kv("trace", s(host))]}]})
    };
    let batch = decode_line(json!({"resourceMetrics": [{
        "resource": {"attributes": [kv("service.name", s("db"))]},
        "scopeMetrics": [{"scope": {"name": "m"}, "metrics": [
            {"name": "cpu", "unit": "1", "metadata": [kv("origin", s("kernel"))],
             "gauge": {"dataPoints": [point(0.9, "a"), point(0.5, "b"), point(0.95, "c")]}},
            {"name": "mem", "unit": "By", "gauge": {"dataPoints": [point(0.25, "a")]}}]}]}]}));
    let mut p = pipeline(
        "UPDATE metrics SET name = 'cpu.hot', resource.attributes['tier'] = 'hot' WHERE value > 0.8;
         INSERT INTO a SELECT * FROM metrics;",
    );
    // The UPDATE of the name merges the series it writes: they go on when the interval ends.
    assert!(p.run(batch).unwrap().routed.is_empty());
    let out = p.decide(std::time::SystemTime::now(), true).unwrap();
    let (_, routed) = &out[0];
    let options = EncodeOptions {
        metric_metadata: true,
        ..EncodeOptions::default()
    };
    let mut encoder = OtapEncoder::new(routed.signal(), options).unwrap();
    let mut decoder = OtapDecoder::new(routed.signal());
    let decoded = decoder.decode(&encoder.encode(routed).unwrap()).unwrap();
    let canonical = |b: &OtapBatch| {
        let bytes = otlp::encode::encode(b).unwrap();
        equiv::metrics(&ExportMetricsServiceRequest::decode(bytes.as_slice()).unwrap())
    };
    let direct = canonical(routed);
    assert_eq!(equiv::first_difference(&direct, &canonical(&decoded)), None);
    // Three metrics: cpu.hot (0.9, 0.95) under a resource with tier=hot, cpu (0.5) and mem
    // under the original resource; the copy keeps the metadata and the exemplars.
    assert_eq!(direct.len(), 3, "{direct:#?}");
    let hot: Vec<&String> = direct.iter().filter(|l| l.contains("cpu.hot")).collect();
    assert_eq!(hot.len(), 1);
    for needle in ["tier", "kernel", "0.95", "0.9", "trace"] {
        assert!(hot[0].contains(needle), "{needle} missing from {}", hot[0]);
    }
    assert!(!hot[0].contains("0.5"));
    let cold: Vec<&String> = direct.iter().filter(|l| !l.contains("cpu.hot")).collect();
    assert!(cold.iter().all(|l| !l.contains("tier")), "{cold:#?}");
    assert!(
        cold.iter()
            .any(|l| l.contains("\"cpu\"") && l.contains("kernel"))
    );
}

#[test]
fn a_projection_of_the_span_end_time_keeps_what_it_is_computed_from() {
    let batch = decode_line(json!({"resourceSpans": [{"scopeSpans": [{"spans": [
        {"traceId": "0102030405060708090a0b0c0d0e0f10", "spanId": "0102030405060701",
         "name": "a", "startTimeUnixNano": "1750000000000000000",
         "endTimeUnixNano": "1750000000500000000"}]}]}]}));
    let mut p = pipeline("INSERT INTO a SELECT name, end_time_unix_nano FROM spans;");
    let requests = sink(&p.run(batch).unwrap(), "a");
    let span = &requests[0]["resourceSpans"][0]["scopeSpans"][0]["spans"][0];
    assert_eq!(span["endTimeUnixNano"], "1750000000500000000", "{span}");
}
