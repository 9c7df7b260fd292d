//! Round trips through the codecs, compared with the `equiv` oracle:
//! OTLP bytes → batch → OTLP bytes, and batch → OTAP → batch (one stream, several batches).

#![allow(clippy::unwrap_used)] // Test harness: a failure should abort loudly.

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use penstock_engine::datagen::DataGen;
use penstock_engine::otap::{EncodeOptions, OtapDecoder, OtapEncoder};
use penstock_engine::otlp::{decode, encode};
use penstock_engine::{OtapBatch, Signal, equiv};
use prost::Message;

fn canonical(signal: Signal, bytes: &[u8]) -> Vec<String> {
    match signal {
        Signal::Logs => equiv::logs(&ExportLogsServiceRequest::decode(bytes).unwrap()),
        Signal::Traces => equiv::traces(&ExportTraceServiceRequest::decode(bytes).unwrap()),
        Signal::Metrics => equiv::metrics(&ExportMetricsServiceRequest::decode(bytes).unwrap()),
    }
}

fn decode_otlp(signal: Signal, bytes: &[u8]) -> Vec<OtapBatch> {
    match signal {
        Signal::Logs => decode::decode_logs(bytes),
        Signal::Traces => decode::decode_traces(bytes),
        Signal::Metrics => decode::decode_metrics(bytes),
    }
    .unwrap()
}

fn otlp_of(batches: &[OtapBatch]) -> Vec<String> {
    let mut lines: Vec<String> = batches
        .iter()
        .flat_map(|b| canonical(b.signal(), &encode::encode(b).unwrap()))
        .collect();
    lines.sort();
    lines
}

/// Scenario: requests go through OTLP decode and encode, and through an OTAP stream.
/// Guarantees: both paths return the same records (resource, scope and content).
fn check(signal: Signal, requests: &[Vec<u8>], options: EncodeOptions) {
    let mut encoder = OtapEncoder::new(signal, options).unwrap();
    let mut decoder = OtapDecoder::new(signal);
    for (i, bytes) in requests.iter().enumerate() {
        let expected = canonical(signal, bytes);
        let batches = decode_otlp(signal, bytes);
        let direct = otlp_of(&batches);
        if let Some(diff) = equiv::first_difference(&expected, &direct) {
            panic!("{signal} request {i}: OTLP round trip differs: {diff}");
        }
        let mut via_otap = Vec::new();
        for batch in &batches {
            let bar = encoder.encode(batch).unwrap();
            let bar =
                penstock_engine::proto::BatchArrowRecords::decode(bar.encode_to_vec().as_slice())
                    .unwrap();
            via_otap.push(decoder.decode(&bar).unwrap());
        }
        let otap = otlp_of(&via_otap);
        if let Some(diff) = equiv::first_difference(&expected, &otap) {
            panic!("{signal} request {i}: OTAP round trip differs: {diff}");
        }
    }
}

fn requests(signal: Signal) -> Vec<Vec<u8>> {
    let mut data = DataGen::new(7);
    (0..4)
        .map(|i| {
            let n = [1, 50, 700, 4096][i];
            match signal {
                Signal::Logs => data.logs(n).encode_to_vec(),
                Signal::Traces => data.traces(n).encode_to_vec(),
                Signal::Metrics => data.metrics(n).encode_to_vec(),
            }
        })
        .collect()
}

#[test]
fn generated_data_round_trips() {
    for signal in Signal::ALL {
        for options in [
            EncodeOptions {
                metric_metadata: true,
                ..EncodeOptions::default()
            },
            EncodeOptions {
                zstd: false,
                dictionaries: false,
                metric_metadata: true,
            },
        ] {
            check(signal, &requests(signal), options);
        }
    }
}

#[test]
fn edge_cases_round_trip() {
    let (logs, traces, metrics) = DataGen::new(3).edge_cases();
    let options = EncodeOptions {
        metric_metadata: true,
        ..EncodeOptions::default()
    };
    check(Signal::Logs, &[logs.encode_to_vec()], options);
    check(Signal::Traces, &[traces.encode_to_vec()], options);
    check(Signal::Metrics, &[metrics.encode_to_vec()], options);
}
