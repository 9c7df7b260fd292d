//! Tail sampling in a live gateway with two workers, fed by the pdata gRPC traces client
//! (`otap-interop export-traces`: as the Collector's otlp exporter sends, gzip) over two
//! connections, and delivering to a grpc-go OTLP receiver (`otap-interop serve-otlp`). Every
//! trace has its root span on one connection and its child on the other, so the two halves
//! reach different workers: each trace must be decided once and arrive whole or not at all.

#![allow(clippy::unwrap_used)]

mod common;

use common::go::interop_binary;
use common::otlp_go::{OtlpReceiver, TRACES, series};
use common::traces;
use common::{Gateway, temp_dir};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::{Span, Status};
use penstock_engine::equiv;
use std::collections::BTreeSet;

/// Traces sent.
const TRACES_SENT: usize = 40;
/// The share `sample(trace_id, ...)` keeps.
const SHARE: f64 = 0.25;

/// Trace `i`'s id.
fn trace_id(i: usize) -> Vec<u8> {
    traces::trace_id(i as u64)
}

/// Whether trace `i` has an error (its child span's status).
fn has_error(i: usize) -> bool {
    i.is_multiple_of(3)
}

/// Whether OpenTelemetry's consistent probability sampling keeps `id` at `share`: its last 7
/// bytes, big-endian, at least (1 - share) × 2^56.
fn in_share(id: &[u8], share: f64) -> bool {
    let random = id[9..]
        .iter()
        .fold(0u64, |acc, b| (acc << 8) | u64::from(*b));
    random >= ((1.0 - share) * (1u64 << 56) as f64).round() as u64
}

/// One request of span `name` of each trace in `traces`.
fn request(traces: std::ops::Range<usize>, name: &str) -> ExportTraceServiceRequest {
    traces::request(
        traces
            .map(|i| Span {
                trace_id: trace_id(i),
                span_id: vec![i as u8 + 1, 0, 0, 0, 0, 0, 0, u8::from(name == "child") + 1],
                name: format!("{name}-{i}"),
                kind: 2,
                start_time_unix_nano: 1_750_000_000_000_000_000,
                end_time_unix_nano: 1_750_000_000_010_000_000,
                status: (name == "child" && has_error(i)).then(|| Status {
                    code: 2,
                    message: "failed".into(),
                }),
                ..Default::default()
            })
            .collect(),
    )
}

#[test]
fn a_trace_split_over_two_connections_is_decided_once_and_delivered_whole() {
    let Some(binary) = interop_binary() else {
        return;
    };
    let dir = temp_dir("sampling-go");
    let receiver = OtlpReceiver::start(&binary, "serve-otlp", &[]);
    let gateway = Gateway::start_with(
        &dir,
        "sampling",
        &format!(
            "CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:0');
             CREATE SINK backend TO OTLP WITH (endpoint = 'http://{}');
             CREATE PIPELINE sample FROM edge WITH (decision_wait = '1s') AS BEGIN
               INSERT INTO backend SELECT * FROM spans
                 WHERE trace_id IN (SELECT trace_id FROM spans GROUP BY trace_id
                                    HAVING bool_or(status.code = 2) OR sample(trace_id, {SHARE}));
             END;",
            receiver.addr
        ),
        &["--workers", "2", "--admin-listen", "127.0.0.1:0"],
    );
    let half = TRACES_SENT / 2;
    // Roots on connection 0, children on connection 1.
    let requests = [
        request(0..half, "root"),
        request(0..half, "child"),
        request(half..TRACES_SENT, "root"),
        request(half..TRACES_SENT, "child"),
    ];
    traces::send(&binary, &gateway.addr, 2, &requests);

    let kept: BTreeSet<usize> = (0..TRACES_SENT)
        .filter(|i| has_error(*i) || in_share(&trace_id(*i), SHARE))
        .collect();
    assert!(
        kept.len() > TRACES_SENT / 3 && kept.len() < TRACES_SENT,
        "{kept:?}"
    );
    let mut got = receiver.wait_for([0, kept.len() * 2, 0]);
    let metric = |g: &Gateway, name: &str| {
        series(
            &g.metrics_text(),
            &format!("penstock_sampler_{name}{{pipeline=\"sample\"}}"),
        )
        .unwrap_or(-1.0)
    };
    gateway.wait_until("every trace decided", |g| {
        metric(g, "traces_kept_total") + metric(g, "traces_dropped_total") == TRACES_SENT as f64
    });
    assert_eq!(metric(&gateway, "traces_kept_total"), kept.len() as f64);
    assert_eq!(metric(&gateway, "traces_held"), 0.0);
    assert_eq!(metric(&gateway, "traces_decided_early_total"), 0.0);
    assert_eq!(
        metric(&gateway, "spans_kept_total"),
        (kept.len() * 2) as f64
    );
    let (ok, output) = gateway.terminate();
    assert!(ok, "the gateway did not exit cleanly: {output:?}");
    let (rest, _) = receiver.finish();
    got.extend(rest);

    // Each kept trace whole, once, as sent; nothing of the others.
    let mut want: Vec<String> = requests
        .iter()
        .flat_map(|r| {
            let mut r = r.clone();
            for rs in &mut r.resource_spans {
                for ss in &mut rs.scope_spans {
                    ss.spans
                        .retain(|span| kept.iter().any(|i| trace_id(*i) == span.trace_id));
                }
            }
            equiv::traces(&r)
        })
        .collect();
    let mut got = got.lines[TRACES].clone();
    want.sort();
    got.sort();
    assert_eq!(got.len(), want.len());
    assert_eq!(got, want);
}
