//! Parsing and enrichment end to end: logs with JSON bodies sent by the OpenTelemetry Python
//! SDK (its logging handler, through its OTLP gRPC exporter with gzip) pass a gateway that
//! merges `parse_json(body)` into their attributes and joins a lookup table, and arrive at a
//! grpc-go OTLP receiver (`otap-interop serve-otlp`, pdata) with every field as an attribute of
//! its own type. And lookup tables reloaded on SIGHUP: a new file takes effect, a bad one keeps
//! the table read before and says why.
//!
//! Needs Go (the receiver) and a Python with the SDK and its OTLP gRPC exporter (`.ci/run`
//! installs them); skipped, saying why, without.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use penstock_engine::datagen::DataGen;
use prost::Message;
use serde_json::Value as Json;

use common::go::interop_binary;
use common::otlp_go::OtlpReceiver;
use common::{Gateway, block_on, export_otlp, python_with, temp_dir};

/// A record's attributes: key to `(type, text)`.
type Attributes = BTreeMap<String, (&'static str, String)>;

/// A JSON value as the OTLP attribute value it should become: `(type, text)`.
fn expected_value(value: &Json) -> (&'static str, String) {
    match value {
        Json::String(s) => ("string", s.clone()),
        Json::Bool(b) => ("bool", b.to_string()),
        Json::Number(n) if n.is_i64() => ("int", n.to_string()),
        Json::Number(n) => ("double", n.as_f64().unwrap().to_string()),
        Json::Object(_) => ("map", value.to_string()),
        Json::Array(_) => ("array", value.to_string()),
        Json::Null => ("none", String::new()),
    }
}

/// An OTLP value as `(type, text)`, maps and arrays as JSON.
fn received_value(value: Option<&Value>) -> (&'static str, String) {
    match value {
        Some(Value::StringValue(s)) => ("string", s.clone()),
        Some(Value::BoolValue(b)) => ("bool", b.to_string()),
        Some(Value::IntValue(i)) => ("int", i.to_string()),
        Some(Value::DoubleValue(d)) => ("double", d.to_string()),
        Some(Value::KvlistValue(kv)) => ("map", as_json_object(&kv.values).to_string()),
        Some(Value::ArrayValue(a)) => (
            "array",
            Json::Array(a.values.iter().map(|v| as_json(v.value.as_ref())).collect()).to_string(),
        ),
        _ => ("none", String::new()),
    }
}

fn as_json(value: Option<&Value>) -> Json {
    match value {
        Some(Value::StringValue(s)) => Json::from(s.clone()),
        Some(Value::BoolValue(b)) => Json::from(*b),
        Some(Value::IntValue(i)) => Json::from(*i),
        Some(Value::DoubleValue(d)) => Json::from(*d),
        Some(Value::KvlistValue(kv)) => as_json_object(&kv.values),
        Some(Value::ArrayValue(a)) => {
            Json::Array(a.values.iter().map(|v| as_json(v.value.as_ref())).collect())
        }
        _ => Json::Null,
    }
}

fn as_json_object(values: &[KeyValue]) -> Json {
    Json::Object(
        values
            .iter()
            .map(|kv| {
                (
                    kv.key.clone(),
                    as_json(kv.value.as_ref().and_then(|v| v.value.as_ref())),
                )
            })
            .collect(),
    )
}

#[test]
fn json_logs_of_the_python_sdk_arrive_with_typed_attributes_and_their_team() {
    let Some(binary) = interop_binary() else {
        return;
    };
    let Some(python) = python_with(
        "import opentelemetry.sdk._logs, opentelemetry.exporter.otlp.proto.grpc",
        "the OpenTelemetry SDK and OTLP gRPC exporter",
    ) else {
        return;
    };
    let dir = temp_dir("parse-python");
    std::fs::write(dir.join("owners.csv"), "service,team\ncheckout,payments\n").unwrap();
    let receiver = OtlpReceiver::start(&binary, "serve-otlp", &[]);
    let gateway = Gateway::start(
        &dir,
        "parse",
        &format!(
            "CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:0');
             CREATE SINK backend TO OTLP WITH (endpoint = 'http://{}', compression = 'gzip');
             CREATE TABLE owners FROM FILE WITH (path = 'owners.csv');
             CREATE PIPELINE p FROM edge AS BEGIN
               UPDATE logs SET attributes = attributes || parse_json(body);
               UPDATE logs SET attributes['team'] = o.team FROM owners o
                 WHERE resource.attributes['service.name'] = o.service;
               INSERT INTO backend SELECT * FROM logs;
             END;",
            receiver.addr
        ),
    );
    let stdout =
        common::run_python_script(&python, "send_json_logs.py", &[gateway.addr.as_str(), "40"]);
    // What was sent: service and fields per log, in order per service.
    let mut sent: BTreeMap<String, Vec<serde_json::Map<String, Json>>> = BTreeMap::new();
    for line in stdout.lines() {
        let log: Json = serde_json::from_str(line).unwrap();
        let service = log["service"].as_str().unwrap().to_string();
        let fields = log["fields"].as_object().unwrap().clone();
        sent.entry(service).or_default().push(fields);
    }
    assert_eq!(sent.values().map(Vec::len).sum::<usize>(), 40);

    // What arrived: every log, with each field of its body as an attribute of its type, the
    // handler's own attributes kept, and the team of its service where the file has one.
    let mut got: BTreeMap<String, Vec<Attributes>> = BTreeMap::new();
    let mut records = 0;
    while records < 40 {
        let (tag, otlp) = receiver
            .frames()
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("the receiver got {records} of 40 logs"));
        assert_eq!(tag, 0);
        let request = ExportLogsServiceRequest::decode(otlp.as_slice()).unwrap();
        for rl in &request.resource_logs {
            let service = rl
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|kv| kv.key == "service.name")
                .and_then(|kv| kv.value.as_ref())
                .map(|v| received_value(v.value.as_ref()).1)
                .unwrap();
            for record in rl.scope_logs.iter().flat_map(|sl| &sl.log_records) {
                let attributes = record
                    .attributes
                    .iter()
                    .map(|kv| {
                        let value = kv.value.as_ref().and_then(|v| v.value.as_ref());
                        (kv.key.clone(), received_value(value))
                    })
                    .collect();
                got.entry(service.clone()).or_default().push(attributes);
                records += 1;
            }
        }
    }
    for (service, logs) in &sent {
        let arrived = &got[service];
        assert_eq!(arrived.len(), logs.len(), "{service}");
        for (fields, attributes) in logs.iter().zip(arrived) {
            for (key, value) in fields {
                assert_eq!(
                    attributes.get(key),
                    Some(&expected_value(value)),
                    "{service}: {key} of {fields:?} in {attributes:?}"
                );
            }
            let team = attributes.get("team").map(|(_, t)| t.as_str());
            let want = (service == "checkout").then_some("payments");
            assert_eq!(team, want, "{service}");
            // The logging handler's own attributes stay beside the parsed ones.
            assert!(
                attributes.keys().any(|k| k.starts_with("code.")),
                "{attributes:?}"
            );
        }
    }
    let (ok, _) = gateway.terminate();
    assert!(ok);
}

/// The `team` attribute of every record in the lines of `file` (OTLP JSON), in order.
fn teams(file: &std::path::Path) -> Vec<Option<String>> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let mut out = Vec::new();
    for line in text.lines() {
        let request: Json = serde_json::from_str(line).unwrap();
        for rl in request["resourceLogs"].as_array().unwrap() {
            for sl in rl["scopeLogs"].as_array().unwrap() {
                for record in sl["logRecords"].as_array().unwrap() {
                    let team = record["attributes"].as_array().and_then(|a| {
                        a.iter()
                            .find(|kv| kv["key"] == "team")
                            .map(|kv| kv["value"]["stringValue"].as_str().unwrap().to_string())
                    });
                    out.push(team);
                }
            }
        }
    }
    out
}

#[test]
fn a_lookup_table_reloads_on_sighup_and_a_bad_file_keeps_the_table_read_before() {
    let dir = temp_dir("lookup-reload");
    let owners = dir.join("owners.csv");
    // Every generated log is of one of these services.
    let services = [
        "frontend",
        "checkout",
        "cart",
        "payment",
        "shipping",
        "email",
        "ad",
        "recommendation",
    ];
    let file_of = |team: &str| {
        let rows: Vec<String> = services.iter().map(|s| format!("{s},{team}")).collect();
        format!("service,team\n{}\n", rows.join("\n"))
    };
    std::fs::write(&owners, file_of("one")).unwrap();
    let out = dir.join("out.jsonl");
    let program = |options: &str| {
        format!(
            "CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:0');
             CREATE SINK received TO FILE WITH (path = '{}');
             CREATE TABLE owners FROM FILE WITH (path = 'owners.csv'{options});
             CREATE PIPELINE p FROM edge AS BEGIN
               UPDATE logs SET attributes['team'] = lookup('owners', resource.attributes['service.name'], 'team');
               INSERT INTO received SELECT * FROM logs;
             END;",
            out.display()
        )
    };
    let gateway = Gateway::start_with(
        &dir,
        "lookup",
        &program(""),
        &["--admin-listen", "127.0.0.1:0"],
    );
    let url = gateway.url();
    let mut data = DataGen::new(5);
    let mut send = |n| block_on(export_otlp(&url, data.logs(n))).unwrap();
    send(50);
    let first = teams(&out);
    assert_eq!(first.len(), 50);
    assert!(
        first.iter().all(|t| t.as_deref() == Some("one")),
        "{first:?}"
    );

    // A file whose key repeats: the reload keeps the table read before, and says why.
    std::fs::write(&owners, "service,team\ncart,a\ncart,b\n").unwrap();
    gateway.hang_up();
    let kept = gateway.wait_for_line("the table read before is kept");
    assert!(
        kept.contains("lookup.sql:3:14") && kept.contains("'cart' twice (rows 1 and 2)"),
        "{kept}"
    );
    gateway.wait_for_line("reload: generation 1");
    assert_eq!(gateway.metric("penstock_lookup_reload_failures_total"), 1.0);
    send(50);
    let second = teams(&out);
    assert_eq!(second.len(), 100);
    assert!(second.iter().all(|t| t.as_deref() == Some("one")));

    // A good file: its rows from the next batch on.
    std::fs::write(&owners, file_of("two")).unwrap();
    gateway.hang_up();
    gateway.wait_for_line("reload: generation 2");
    send(50);
    let third = teams(&out);
    assert_eq!(third.len(), 150);
    assert!(third[100..].iter().all(|t| t.as_deref() == Some("two")));

    // A definition that changed (its key) and does not load is not served by the table read
    // under the old one: the reload is refused, and generation 2 goes on.
    std::fs::write(dir.join("lookup.sql"), program(", key = 'squad'")).unwrap();
    gateway.hang_up();
    let failed = gateway.wait_for_line("reload failed");
    assert!(failed.contains("key 'squad' is not a column"), "{failed}");
    send(50);
    let fourth = teams(&out);
    assert_eq!(fourth.len(), 200);
    assert!(fourth[150..].iter().all(|t| t.as_deref() == Some("two")));
    let (ok, _) = gateway.terminate();
    assert!(ok);
}

#[test]
fn adbc_browses_and_reads_a_lookup_table_and_calls_lookup() {
    let Some(python) = python_with(
        "import adbc_driver_flightsql.dbapi",
        "adbc-driver-flightsql",
    ) else {
        return;
    };
    let dir = temp_dir("lookup-adbc");
    std::fs::write(
        dir.join("owners.csv"),
        "service,team,tier\ncheckout,payments,1\ncart,storefront,2\n",
    )
    .unwrap();
    let gateway = Gateway::start_with(
        &dir,
        "lookup",
        "CREATE SOURCE gen FROM GENERATOR WITH (signal = 'logs', rate = 100, batch = 10);
         CREATE SINK screen TO CONSOLE WITH (limit = 0);
         CREATE TABLE owners FROM FILE WITH (path = 'owners.csv');
         CREATE PIPELINE p FROM gen AS BEGIN
           UPDATE logs SET attributes['team'] = o.team FROM owners o
             WHERE resource.attributes['service.name'] = o.service;
           INSERT INTO screen SELECT * FROM logs;
         END;",
        &["--query-listen", "127.0.0.1:0", "--workers", "1"],
    );
    let address = common::flight::flight_address(&gateway);
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/lookup_query.py");
    let reports = common::flight::json_reports(
        Command::new(&python).args([script.to_str().unwrap(), &address]),
    );
    let by = |what: &str| common::flight::report(&reports, "what", what);
    assert_eq!(
        by("catalog")["tables"],
        serde_json::json!([["lookup", "all", "owners", "TABLE"]])
    );
    assert_eq!(
        by("table")["rows"],
        serde_json::json!([["cart", "storefront", 2], ["checkout", "payments", 1]])
    );
    assert_eq!(
        by("lookup")["rows"],
        serde_json::json!([["payments", null]])
    );
    let (ok, _) = gateway.terminate();
    assert!(ok);
}
