//! The OpenTelemetry Python SDK as a sender: its own OTLP exporters (gRPC and HTTP/protobuf)
//! export spans to the gateway's GRPC and HTTP sources, which write them to a file. Needs a
//! Python with `opentelemetry-sdk`, `opentelemetry-exporter-otlp-proto-grpc` and
//! `opentelemetry-exporter-otlp-proto-http` (`.ci/run` installs them into a virtual
//! environment and names its interpreter in `PENSTOCK_PYTHON`); skipped, saying why, without.

#![allow(clippy::unwrap_used)]

mod common;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use penstock_engine::otlp;
use prost::Message;

use common::{Gateway, python_with, temp_dir};

#[test]
fn the_python_sdk_exports_spans_over_grpc_and_http() {
    let Some(python) = python_with(
        "import opentelemetry.sdk, opentelemetry.exporter.otlp.proto.grpc, \
         opentelemetry.exporter.otlp.proto.http",
        "the OpenTelemetry SDK and OTLP exporters",
    ) else {
        return;
    };
    let dir = temp_dir("python");
    let out = dir.join("spans.jsonl");
    let gateway = Gateway::start(
        &dir,
        "sdk",
        &format!(
            "CREATE SOURCE grpc_in FROM GRPC WITH (listen = '127.0.0.1:0', auth_token = 'tok');
             CREATE SOURCE http_in FROM HTTP WITH (listen = '127.0.0.1:0', auth_token = 'tok');
             CREATE SINK spans_out TO FILE WITH (path = '{}');
             CREATE PIPELINE a FROM grpc_in AS BEGIN
               ALTER TABLE spans RENAME ATTRIBUTE 'db.system' TO 'db.system.name';
               INSERT INTO spans_out SELECT * FROM spans;
             END;
             CREATE PIPELINE b FROM http_in AS BEGIN
               ALTER TABLE spans RENAME ATTRIBUTE 'db.system' TO 'db.system.name';
               INSERT INTO spans_out SELECT * FROM spans;
             END;",
            out.display()
        ),
    );
    common::run_python_script(
        &python,
        "send_spans.py",
        &[
            gateway.addr_of("grpc_in"),
            gateway.addr_of("http_in"),
            "50",
            "tok",
        ],
    );

    // Both exports were acknowledged, so the file holds all 200 spans, renamed.
    let text = std::fs::read_to_string(&out).unwrap();
    let mut per_service = std::collections::BTreeMap::new();
    let mut db_spans = 0;
    for (i, line) in text.lines().enumerate() {
        let (_, bytes) = otlp::json::line_to_protobuf(line, i + 1).unwrap();
        let request = ExportTraceServiceRequest::decode(bytes.as_slice()).unwrap();
        for rs in &request.resource_spans {
            let service = rs
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|kv| kv.key == "service.name")
                .and_then(|kv| kv.value.as_ref()?.value.clone());
            let Some(Value::StringValue(service)) = service else {
                panic!("a resource without service.name");
            };
            for span in rs.scope_spans.iter().flat_map(|s| &s.spans) {
                *per_service.entry(service.clone()).or_insert(0) += 1;
                let keys: Vec<&str> = span.attributes.iter().map(|kv| kv.key.as_str()).collect();
                assert!(!keys.contains(&"db.system"), "{keys:?}");
                if keys.contains(&"db.system.name") {
                    db_spans += 1;
                    assert_eq!(span.events.len(), 1);
                }
            }
        }
    }
    let want: std::collections::BTreeMap<String, i32> =
        [("py-grpc".to_string(), 100), ("py-http".to_string(), 100)].into();
    assert_eq!(per_service, want);
    assert_eq!(db_spans, 100);
}
