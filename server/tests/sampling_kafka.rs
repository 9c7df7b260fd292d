//! Tail sampling across gateways, the two-tier layout of `docs/deploy.md`: two front gateways
//! write spans to a Kafka topic keyed by trace id (a real broker, `tests/kafka/broker.sh`), and
//! two back gateways in one consumer group decide. The pdata gRPC traces client sends each
//! trace's root span to one front gateway and its child to the other: each trace must still be
//! decided once, by the member that owns its partition, and arrive whole or not at all.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use common::go::interop_binary;
use common::kafka::Broker;
use common::{Gateway, temp_dir, traces};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::{Span, Status};
use penstock_engine::otlp;
use prost::Message;

/// Trace `t` of round `round`.
fn trace_id(round: u64, t: u64) -> Vec<u8> {
    traces::trace_id((round << 32) | t)
}

/// One request holding span `name` of each trace of `traces` in round `round`; the child of
/// every third trace failed.
fn request(round: u64, traces: std::ops::Range<u64>, name: &str) -> ExportTraceServiceRequest {
    traces::request(
        traces
            .map(|t| Span {
                trace_id: trace_id(round, t),
                span_id: ((round << 40) | (t << 8) | (u64::from(name == "child") + 1))
                    .to_be_bytes()
                    .to_vec(),
                name: format!("{name}-{round}-{t}"),
                kind: 2,
                start_time_unix_nano: 1_750_000_000_000_000_000,
                end_time_unix_nano: 1_750_000_000_010_000_000,
                status: (name == "child" && t % 3 == 0).then(|| Status {
                    code: 2,
                    message: "failed".into(),
                }),
                ..Default::default()
            })
            .collect(),
    )
}

/// The span names in a FILE sink's output, each with how many times it is there.
fn names_in(path: &Path) -> BTreeMap<String, usize> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let whole = text.rfind('\n').map_or("", |end| &text[..=end]);
    let mut names = BTreeMap::new();
    for (i, line) in whole.lines().enumerate() {
        let (_, bytes) = otlp::json::line_to_protobuf(line, i + 1).unwrap();
        let request = ExportTraceServiceRequest::decode(&bytes[..]).unwrap();
        for rs in request.resource_spans {
            for ss in rs.scope_spans {
                for span in ss.spans {
                    *names.entry(span.name).or_insert(0) += 1;
                }
            }
        }
    }
    names
}

#[test]
fn two_tiers_keyed_by_trace_id_decide_each_trace_once_across_gateways() {
    let Some(binary) = interop_binary() else {
        return;
    };
    let dir = temp_dir("sampling-kafka");
    let Some(broker) = Broker::start(&dir) else {
        return;
    };
    broker.topic("spans_by_trace", 4);
    let b = &broker.addr;
    let front = |name: &str| {
        Gateway::start(
            &dir,
            name,
            &format!(
                "CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:0');
                 CREATE SINK by_trace TO KAFKA WITH (brokers = '{b}', topic = 'spans_by_trace',
                   key = 'trace_id');
                 CREATE PIPELINE p FROM edge AS BEGIN INSERT INTO by_trace SELECT * FROM spans; END;"
            ),
        )
    };
    let back = |name: &str| {
        Gateway::start(
            &dir,
            name,
            &format!(
                "CREATE SOURCE keyed FROM KAFKA WITH (brokers = '{b}', topic = 'spans_by_trace',
                   group = 'sample', signal = 'spans', initial_offset = 'earliest');
                 CREATE SINK out TO FILE WITH (path = '{}');
                 CREATE PIPELINE sample FROM keyed WITH (decision_wait = '3s') AS BEGIN
                   INSERT INTO out SELECT * FROM spans WHERE trace_id IN (
                     SELECT trace_id FROM spans GROUP BY trace_id HAVING bool_or(status.code = 2));
                 END;",
                dir.join(format!("{name}.jsonl")).display()
            ),
        )
    };
    let (front_a, front_b) = (front("front-a"), front("front-b"));
    let (back_a, back_b) = (back("back-a"), back("back-b"));
    let outputs = [dir.join("back-a.jsonl"), dir.join("back-b.jsonl")];
    // Warm-up rounds, whole traces through one front gateway, until both members of the group
    // hold partitions and delivered kept traces.
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut round = 0;
    while outputs.iter().any(|o| names_in(o).is_empty()) {
        assert!(Instant::now() < deadline, "both members decided traces");
        round += 1;
        let whole = [
            request(round, 0..30, "root"),
            request(round, 0..30, "child"),
        ];
        traces::send(&binary, &front_a.addr, 1, &whole);
        std::thread::sleep(Duration::from_millis(500));
    }
    // The round under test: roots through one front gateway, children through the other.
    let test_round = 1_000;
    traces::send(
        &binary,
        &front_a.addr,
        1,
        &[request(test_round, 0..60, "root")],
    );
    traces::send(
        &binary,
        &front_b.addr,
        1,
        &[request(test_round, 0..60, "child")],
    );
    let kept: BTreeSet<u64> = (0..60).filter(|t| t % 3 == 0).collect();
    let of_round = |names: &BTreeMap<String, usize>| -> BTreeMap<String, usize> {
        names
            .iter()
            .filter(|(n, _)| n.contains(&format!("-{test_round}-")))
            .map(|(n, c)| (n.clone(), *c))
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    let got = loop {
        let mut got: BTreeMap<String, usize> = BTreeMap::new();
        for o in &outputs {
            for (n, c) in of_round(&names_in(o)) {
                *got.entry(n).or_insert(0) += c;
            }
        }
        if got.len() >= kept.len() * 2 || Instant::now() > deadline {
            break got;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    // Every kept trace whole, each span once, and nothing of the others; then nothing more.
    let want: BTreeMap<String, usize> = kept
        .iter()
        .flat_map(|t| {
            [
                (format!("root-{test_round}-{t}"), 1),
                (format!("child-{test_round}-{t}"), 1),
            ]
        })
        .collect();
    assert_eq!(got, want);
    let by_member: Vec<usize> = outputs
        .iter()
        .map(|o| of_round(&names_in(o)).len())
        .collect();
    println!("two tiers: kept spans of the round per member {by_member:?}");
    for g in [back_a, back_b, front_a, front_b] {
        let (clean, lines) = g.terminate();
        assert!(clean, "{lines:#?}");
    }
    let mut total: BTreeMap<String, usize> = BTreeMap::new();
    for o in &outputs {
        for (n, c) in of_round(&names_in(o)) {
            *total.entry(n).or_insert(0) += c;
        }
    }
    assert_eq!(total, want, "nothing more after the gateways stopped");
}
