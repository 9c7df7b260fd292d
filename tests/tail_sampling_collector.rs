//! Tail sampling against the OpenTelemetry Collector's `tail_sampling` processor (contrib
//! v0.145.0, run in process by `tests/tailsampling-go` with its defaults): the same traces, the
//! equivalent policies, the same set of trace ids kept.
//!
//! The Collector's policies and the SQL that says the same:
//! - `status_code: [ERROR]`: `bool_or(status.code = 2)`;
//! - `latency: threshold_ms 2000` (the trace's span, from its earliest start to its latest end):
//!   `max(end) - min(start) >= 2 s`;
//! - `numeric_attribute: http.response.status_code in [500, 599]`:
//!   `bool_or(attributes['http.response.status_code'] BETWEEN 500 AND 599)`;
//! - `span_count: min_spans 8`: `count(*) >= 8`.
//!
//! The Collector's `probabilistic` policy is left out: it hashes the trace id with FNV and a
//! salt, where `sample(trace_id, share)` reads the id's random bits (OpenTelemetry's consistent
//! probability sampling), so the two keep different traces by design.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
use penstock_engine::Signal;
use penstock_engine::otlp::decode;
use penstock_pipeline::{Pipeline, check_source};
use prost::Message;

/// The Collector's policies.
const POLICIES: &str = r#"{"policies": [
  {"name": "errors", "type": "status_code", "status_code": {"status_codes": ["ERROR"]}},
  {"name": "slow", "type": "latency", "latency": {"threshold_ms": 2000}},
  {"name": "server-errors", "type": "numeric_attribute",
   "numeric_attribute": {"key": "http.response.status_code", "min_value": 500, "max_value": 599}},
  {"name": "big", "type": "span_count", "span_count": {"min_spans": 8}}
]}"#;

/// The same, policy by policy, as conditions of a trace decision.
const CONDITIONS: [&str; 4] = [
    "bool_or(status.code = 2)",
    "max(CAST(end_time_unix_nano AS BIGINT)) - min(CAST(start_time_unix_nano AS BIGINT)) >= 2000000000",
    "bool_or(attributes['http.response.status_code'] BETWEEN 500 AND 599)",
    "count(*) >= 8",
];

/// Traces generated.
const TRACES: u64 = 400;

/// A small deterministic generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Builds the Go harness, or None (with the reason printed) without Go.
fn harness() -> Option<PathBuf> {
    if Command::new("go").arg("version").output().is_err() {
        println!("skipped: the Go toolchain is not installed");
        return None;
    }
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tailsampling-go");
    let status = Command::new("go")
        .args(["build", "-o", "bin/tailsampling-go", "."])
        .current_dir(&dir)
        .status()
        .unwrap();
    assert!(status.success(), "go build of tests/tailsampling-go failed");
    Some(dir.join("bin/tailsampling-go"))
}

/// Traces of 1 to 8 spans, their spans spread over several requests in arrival order: some
/// failed, some slow (a child may end after its root), some answered 5xx, some big.
fn requests() -> Vec<ExportTraceServiceRequest> {
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let mut spans: Vec<Span> = Vec::new();
    let start = 1_750_000_000_000_000_000u64;
    for t in 0..TRACES {
        let trace_id: Vec<u8> = (0..16).map(|_| rng.next() as u8).collect();
        let count = 1 + rng.below(8);
        let root_ms = if rng.below(10) == 0 {
            2_500
        } else {
            1 + rng.below(1_900)
        };
        let root_begin = start + t * 1_000_000;
        for s in 0..count {
            let (begin, ms) = if s == 0 {
                (root_begin, root_ms)
            } else if rng.below(12) == 0 {
                // A child that starts halfway through its root and outlives it: the trace
                // lasts half as long again as any one of its spans.
                (root_begin + root_ms / 2 * 1_000_000, root_ms)
            } else {
                (root_begin + s * 1_000, rng.below(root_ms))
            };
            let mut attributes = Vec::new();
            if rng.below(3) == 0 {
                let code = [200, 201, 404, 500, 503][rng.below(5) as usize]
                    * u64::from(rng.below(6) == 0 || s > 0);
                attributes.push(KeyValue {
                    key: "http.response.status_code".into(),
                    value: Some(AnyValue {
                        value: Some(any_value::Value::IntValue(code.max(200) as i64)),
                    }),
                    ..Default::default()
                });
            }
            spans.push(Span {
                trace_id: trace_id.clone(),
                span_id: (t * 16 + s + 1).to_be_bytes().to_vec(),
                name: format!("op-{s}"),
                kind: 2,
                start_time_unix_nano: begin,
                end_time_unix_nano: begin + ms * 1_000_000,
                status: (rng.below(25) == 0).then(|| Status {
                    code: 2,
                    message: "failed".into(),
                }),
                attributes,
                ..Default::default()
            });
        }
    }
    // Spread each trace's spans over the requests: shuffle, then cut in pieces of 97.
    for i in (1..spans.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        spans.swap(i, j);
    }
    spans
        .chunks(97)
        .map(|chunk| ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![KeyValue {
                        key: "service.name".into(),
                        value: Some(AnyValue {
                            value: Some(any_value::Value::StringValue("shop".into())),
                        }),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
                scope_spans: vec![ScopeSpans {
                    scope: Some(InstrumentationScope {
                        name: "http".into(),
                        ..Default::default()
                    }),
                    spans: chunk.to_vec(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
        })
        .collect()
}

/// The trace ids (hex) the Collector's processor keeps.
fn collector_keeps(binary: &PathBuf, requests: &[ExportTraceServiceRequest]) -> BTreeSet<String> {
    let dir = std::env::temp_dir().join(format!("penstock-tailsampling-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("policies.json");
    std::fs::write(&config, POLICIES).unwrap();
    let mut child = Command::new(binary)
        .arg("-config")
        .arg(&config)
        .args(["-decision-wait", "1s"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for r in requests {
        let bytes = r.encode_to_vec();
        stdin
            .write_all(&(bytes.len() as u32).to_le_bytes())
            .unwrap();
        stdin.write_all(&bytes).unwrap();
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "tailsampling-go failed");
    let _ = std::fs::remove_dir_all(&dir);
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// The trace ids (hex) a Penstock pipeline keeps with the decision `HAVING decision`.
fn penstock_keeps(requests: &[ExportTraceServiceRequest], decision: &str) -> BTreeSet<String> {
    let sql = format!(
        "CREATE SOURCE src FROM FILE WITH (path = 'x');
         CREATE SINK out TO CONSOLE;
         CREATE PIPELINE p FROM src WITH (decision_wait = '1s') AS BEGIN
           INSERT INTO out SELECT * FROM spans
             WHERE trace_id IN (SELECT trace_id FROM spans GROUP BY trace_id HAVING {decision});
         END;"
    );
    let program = check_source("collector.sql", &sql).unwrap_or_else(|e| panic!("{e}"));
    let mut pipeline = Pipeline::compile(&program, "p").unwrap_or_else(|e| panic!("{e}"));
    let now = SystemTime::now();
    let mut sent = Vec::new();
    for r in requests {
        for batch in decode::decode(Signal::Traces, &r.encode_to_vec()).unwrap() {
            sent.extend(pipeline.run_at(batch, now).unwrap().routed);
        }
    }
    sent.extend(
        pipeline
            .decide(now + Duration::from_secs(2), false)
            .unwrap(),
    );
    assert_eq!(pipeline.sampler_stats().traces_held, 0);
    let mut kept = BTreeSet::new();
    for (_, batch) in sent {
        let otlp = penstock_engine::otlp::encode::encode(&batch).unwrap();
        let request = ExportTraceServiceRequest::decode(otlp.as_slice()).unwrap();
        for rs in request.resource_spans {
            for ss in rs.scope_spans {
                for span in ss.spans {
                    kept.insert(hex(&span.trace_id));
                }
            }
        }
    }
    kept
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn penstock_keeps_the_traces_the_collector_tail_sampling_processor_keeps() {
    let Some(binary) = harness() else {
        return;
    };
    let requests = requests();
    let collector = collector_keeps(&binary, &requests);
    let penstock = penstock_keeps(&requests, &CONDITIONS.join(" OR "));
    // The policies keep some traces and drop others, each policy on its own.
    assert!(
        collector.len() > TRACES as usize / 10 && collector.len() < TRACES as usize * 9 / 10,
        "the Collector kept {} of {TRACES} traces",
        collector.len()
    );
    // Each policy keeps traces no other one does: the data tells them apart, and a policy
    // written wrong would show.
    let alone: Vec<BTreeSet<String>> = CONDITIONS
        .iter()
        .map(|c| penstock_keeps(&requests, c))
        .collect();
    for (i, kept) in alone.iter().enumerate() {
        let others: BTreeSet<&String> = alone
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .flat_map(|(_, k)| k)
            .collect();
        let own = kept.iter().filter(|id| !others.contains(id)).count();
        assert!(own > 0, "`{}` keeps no trace of its own", CONDITIONS[i]);
    }
    // The trace's span, not the longest span: some traces are slow only by a child that
    // outlives its root.
    let longest_span = penstock_keeps(&requests, "max(duration_nanos) >= 2000000000");
    assert!(alone[1].difference(&longest_span).count() > 0);
    let only_collector: Vec<_> = collector.difference(&penstock).collect();
    let only_penstock: Vec<_> = penstock.difference(&collector).collect();
    assert!(
        only_collector.is_empty() && only_penstock.is_empty(),
        "kept by the Collector only: {only_collector:?}; by Penstock only: {only_penstock:?}"
    );
}
