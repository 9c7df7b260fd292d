//! The gateway's OTLP sink against a real grpc-go OTLP receiver (`otap-interop serve-otlp`
//! in `tests/interop-go`: the pdata gRPC services, as the Collector's OTLP receiver serves
//! them), for every signal and every sink compression; and telemetrygen (the Collector's
//! load generator, on the OpenTelemetry Go SDK exporters) sending to the gateway.
//!
//! grpc-go answers with the request's compressor: a gzip or zstd Export gets a gzip or zstd
//! compressed response message (never an empty one: pdata writes the empty partial_success
//! field). The gateway has to read those responses; every Export it is sent must be
//! acknowledged OK once, and the receiver must hold exactly the records sent.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;

use common::go::interop_binary;
use common::otlp_go::{
    LOGS, OtlpReceiver, TRACES, assert_no_failures, assert_summary, deliver_every_signal,
};
use common::telemetrygen::{run_telemetrygen, telemetrygen};
use common::{Gateway, temp_dir};

/// A gateway from a GRPC source to `CREATE SINK out TO OTLP` at `receiver`, every signal
/// routed there; `sink_options` goes after the endpoint. Its admin endpoint is on.
fn relay(dir: &Path, receiver: &str, sink_options: &str) -> Gateway {
    common::otlp_go::relay(dir, "OTLP", &format!("http://{receiver}"), sink_options)
}

/// The whole round (see [`deliver_every_signal`]) through a serve-otlp receiver with
/// `receiver_flags` and an OTLP sink with `sink_options`.
fn round_trip(name: &str, receiver_flags: &[&str], sink_options: &str) {
    let Some(binary) = interop_binary() else {
        return;
    };
    let dir = temp_dir(name);
    let receiver = OtlpReceiver::start(&binary, "serve-otlp", receiver_flags);
    let gateway = relay(&dir, &receiver.addr, sink_options);
    deliver_every_signal(name, gateway, receiver);
}

#[test]
fn otlp_sink_without_compression_delivers_every_signal_to_grpc_go() {
    round_trip("otlp-go-none", &[], ", compression = 'none'");
}

#[test]
fn otlp_sink_with_gzip_reads_grpc_go_gzip_responses() {
    round_trip("otlp-go-gzip", &[], ", compression = 'gzip'");
}

#[test]
fn otlp_sink_with_zstd_reads_grpc_go_zstd_responses() {
    round_trip("otlp-go-zstd", &[], ", compression = 'zstd'");
}

#[test]
fn otlp_sink_default_compression_works_with_grpc_go() {
    round_trip("otlp-go-default", &[], "");
}

#[test]
fn a_warning_in_a_compressed_response_is_not_a_failure() {
    // A partial success rejecting nothing, with a message: an OTLP warning, zstd-compressed.
    round_trip(
        "otlp-go-warning",
        &["-warning", "kept everything; clock skew of 3s"],
        ", compression = 'zstd'",
    );
}

#[test]
fn telemetrygen_logs_traces_and_metrics_all_arrive() {
    let Some(binary) = interop_binary() else {
        return;
    };
    let Some(telemetrygen) = telemetrygen() else {
        return;
    };
    let dir = temp_dir("otlp-go-telemetrygen");
    let receiver = OtlpReceiver::start(&binary, "serve-otlp", &[]);
    // Uncompressed to the receiver: this test is about what telemetrygen sends.
    let gateway = relay(&dir, &receiver.addr, ", compression = 'none'");
    let common = [
        "--otlp-insecure",
        "--otlp-endpoint",
        gateway.addr.as_str(),
        "--rate",
        "0",
        "--workers",
        "2",
    ];
    let with = |signal: &'static str, extra: &[&'static str]| -> Vec<&str> {
        let mut args = vec![signal];
        args.extend_from_slice(&common);
        args.extend_from_slice(extra);
        args
    };

    // 2 workers, each with its count.
    let logs = run_telemetrygen(&telemetrygen, &with("logs", &["--logs", "500"]), "logs");
    assert_eq!(logs, 1000, "telemetrygen's own report");
    // Each trace: a root span and 2 children.
    let traces = run_telemetrygen(
        &telemetrygen,
        &with("traces", &["--traces", "100", "--child-spans", "2"]),
        "traces",
    );
    assert_eq!(traces, 200, "telemetrygen's own report");
    let metrics = run_telemetrygen(
        &telemetrygen,
        &with("metrics", &["--metrics", "300", "--metric-type", "Sum"]),
        "metrics",
    );
    assert_eq!(metrics, 600, "telemetrygen's own report");

    let want = [logs, traces * 3, metrics];
    let mut got = receiver.wait_for(want);
    assert_no_failures(&gateway, want.iter().sum());
    let (ok, output) = gateway.terminate();
    assert!(ok, "the gateway did not exit cleanly: {output:?}");
    let (rest, summary) = receiver.finish();
    got.extend(rest);
    assert_eq!(
        got.items, want,
        "items received, per signal; serve-otlp: {summary}"
    );
    assert_summary(&summary, want);
    // Each record is telemetrygen's, once (log records differ only in their timestamps).
    assert!(
        got.lines[LOGS]
            .iter()
            .all(|l| l.contains("StringValue(\"the message\")")),
        "{:?}",
        got.lines[LOGS].first()
    );
    let mut spans = got.lines[TRACES].clone();
    spans.sort();
    spans.dedup();
    assert_eq!(spans.len(), want[TRACES], "every span distinct");
}
