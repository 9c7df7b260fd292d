//! Tail sampling in a live gateway with two workers, fed by the pdata gRPC traces client
//! (`otap-interop export-traces`: as the Collector's otlp exporter sends, gzip) over two
//! connections, and delivering to a grpc-go OTLP receiver (`otap-interop serve-otlp`). Every
//! trace has its root span on one connection and its child on the other, so the two halves
//! reach different workers: each trace must be decided once and arrive whole or not at all.
//! And traces from telemetrygen (the Collector's load generator, OpenTelemetry Go SDK),
//! kept by the share of their random ids.

#![allow(clippy::unwrap_used)]

mod common;

use common::go::interop_binary;
use common::otlp_go::{OtlpReceiver, TRACES, series};
use common::telemetrygen::{run_telemetrygen, telemetrygen};
use common::traces::{self, has_error, in_share, records_of, roots_and_children};
use common::{Gateway, temp_dir};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use std::collections::{BTreeMap, BTreeSet};

/// Traces sent.
const TRACES_SENT: usize = 40;
/// The share `sample(trace_id, ...)` keeps.
const SHARE: f64 = 0.25;

/// Trace `i`'s id.
fn trace_id(i: usize) -> Vec<u8> {
    traces::trace_id(i as u64)
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
    // Roots on connection 0, children on connection 1.
    let requests = roots_and_children(TRACES_SENT);
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
    let want = records_of(&requests, &kept);
    let mut got = got.lines[TRACES].clone();
    got.sort();
    assert_eq!(got.len(), want.len());
    assert_eq!(got, want);
}

/// The trace ids of the spans in `frames` (traces only), with their span counts.
fn spans_by_trace(frames: &[(u8, Vec<u8>)]) -> BTreeMap<Vec<u8>, usize> {
    let mut traces = BTreeMap::new();
    for (tag, otlp) in frames {
        if *tag != TRACES as u8 {
            continue;
        }
        let request = ExportTraceServiceRequest::decode(otlp.as_slice()).unwrap();
        for rs in &request.resource_spans {
            for ss in &rs.scope_spans {
                for span in &ss.spans {
                    *traces.entry(span.trace_id.clone()).or_insert(0) += 1;
                }
            }
        }
    }
    traces
}

/// Frames from `receiver` until they hold `spans` spans.
fn frames_until(receiver: &OtlpReceiver, spans: usize) -> Vec<(u8, Vec<u8>)> {
    let mut frames = Vec::new();
    while spans_by_trace(&frames).values().sum::<usize>() < spans {
        let frame = receiver
            .frames()
            .recv_timeout(std::time::Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("the receiver got fewer than {spans} spans"));
        frames.push(frame);
    }
    frames
}

#[test]
fn telemetrygen_traces_are_kept_whole_by_the_share_of_their_ids() {
    let Some(binary) = interop_binary() else {
        return;
    };
    let Some(telemetrygen) = telemetrygen() else {
        return;
    };
    let dir = temp_dir("sampling-telemetrygen");
    // Every span to one receiver, the sampled traces to another.
    let everything = OtlpReceiver::start(&binary, "serve-otlp", &[]);
    let sampled = OtlpReceiver::start(&binary, "serve-otlp", &[]);
    let gateway = Gateway::start_with(
        &dir,
        "sampling",
        &format!(
            "CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:0');
             CREATE SINK everything TO OTLP WITH (endpoint = 'http://{}');
             CREATE SINK backend TO OTLP WITH (endpoint = 'http://{}');
             CREATE PIPELINE all_spans FROM edge AS BEGIN
               INSERT INTO everything SELECT * FROM spans;
             END;
             CREATE PIPELINE sample FROM edge WITH (decision_wait = '1s') AS BEGIN
               INSERT INTO backend SELECT * FROM spans
                 WHERE trace_id IN (SELECT trace_id FROM spans GROUP BY trace_id
                                    HAVING count(*) = 3 AND sample(trace_id, {SHARE}));
             END;",
            everything.addr, sampled.addr
        ),
        &["--workers", "2", "--admin-listen", "127.0.0.1:0"],
    );
    // Each trace: a root span and 2 children; 2 telemetrygen workers of 100 traces each.
    let args = [
        "traces",
        "--otlp-insecure",
        "--otlp-endpoint",
        gateway.addr.as_str(),
        "--rate",
        "0",
        "--workers",
        "2",
        "--traces",
        "100",
        "--child-spans",
        "2",
    ];
    let sent = run_telemetrygen(&telemetrygen, &args, "traces");
    assert_eq!(sent, 200, "telemetrygen's own report");
    let all = spans_by_trace(&frames_until(&everything, sent * 3));
    assert_eq!(all.len(), sent);
    assert!(all.values().all(|spans| *spans == 3), "{all:?}");
    let kept: BTreeMap<Vec<u8>, usize> = all
        .iter()
        .filter(|(id, _)| in_share(id, SHARE))
        .map(|(id, spans)| (id.clone(), *spans))
        .collect();
    assert!(
        kept.len() > sent / 10 && kept.len() < sent / 2,
        "{}",
        kept.len()
    );
    let mut frames = frames_until(&sampled, kept.len() * 3);
    let (ok, output) = gateway.terminate();
    assert!(ok, "the gateway did not exit cleanly: {output:?}");
    frames.extend(sampled.kill());
    // Exactly the traces in the share, each whole, once.
    assert_eq!(spans_by_trace(&frames), kept);
}
