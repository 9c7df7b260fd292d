//! Interoperability with the OTel-Arrow reference implementation (Go module
//! `github.com/open-telemetry/otel-arrow/go` v0.50.0, through `tests/interop-go`):
//! (a) OTAP produced by the reference producer is decoded by Penstock into the same data;
//! (b) OTAP encoded by Penstock is decoded by the reference consumer into the same data.
//! Both run one OTAP stream of several batches per signal (schemas and dictionaries carry over).

#![allow(clippy::unwrap_used)] // Test harness: a failure should abort loudly.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use penstock_engine::datagen::DataGen;
use penstock_engine::otap::{EncodeOptions, OtapDecoder, OtapEncoder};
use penstock_engine::otlp::encode;
use penstock_engine::proto::BatchArrowRecords;
use penstock_engine::{Signal, equiv};
use prost::Message;

/// Builds the Go helper, or returns None (with the reason printed) when Go is not installed.
fn interop_binary() -> Option<PathBuf> {
    if Command::new("go").arg("version").output().is_err() {
        println!("skipped: the Go toolchain is not installed");
        return None;
    }
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("interop-go");
    let binary = dir.join("bin").join("otap-interop");
    let status = Command::new("go")
        .args(["build", "-o", "bin/otap-interop", "."])
        .current_dir(&dir)
        .status()
        .expect("running go build");
    assert!(status.success(), "go build of tests/interop-go failed");
    Some(binary)
}

fn frames(messages: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for m in messages {
        out.extend_from_slice(&(m.len() as u32).to_le_bytes());
        out.extend_from_slice(m);
    }
    out
}

fn unframe(mut bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let len = u32::from_le_bytes(bytes[..4].try_into().unwrap()) as usize;
        out.push(bytes[4..4 + len].to_vec());
        bytes = &bytes[4 + len..];
    }
    out
}

fn run(binary: &PathBuf, command: &str, signal: Signal, input: Vec<u8>) -> Vec<Vec<u8>> {
    let mut child = Command::new(binary)
        .args([command, "-signal", signal.name()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting otap-interop");
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let mut stdout = Vec::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_end(&mut stdout)
        .unwrap();
    // A write error means the helper stopped reading; its exit status and stderr say why.
    let _ = writer.join().unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "otap-interop {command} -signal {signal} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    unframe(&stdout)
}

fn canonical(signal: Signal, bytes: &[u8]) -> Vec<String> {
    match signal {
        Signal::Logs => equiv::logs(&ExportLogsServiceRequest::decode(bytes).unwrap()),
        Signal::Traces => equiv::traces(&ExportTraceServiceRequest::decode(bytes).unwrap()),
        Signal::Metrics => equiv::metrics(&ExportMetricsServiceRequest::decode(bytes).unwrap()),
    }
}

fn without_metric_metadata(signal: Signal, request: &[u8]) -> Vec<u8> {
    if signal != Signal::Metrics {
        return request.to_vec();
    }
    let mut r = ExportMetricsServiceRequest::decode(request).unwrap();
    r.resource_metrics
        .iter_mut()
        .flat_map(|rm| rm.scope_metrics.iter_mut())
        .flat_map(|sm| sm.metrics.iter_mut())
        .for_each(|m| m.metadata.clear());
    r.encode_to_vec()
}

fn requests(signal: Signal) -> Vec<Vec<u8>> {
    let mut data = DataGen::new(11);
    [10usize, 300, 2000, 4096]
        .iter()
        .map(|n| match signal {
            Signal::Logs => data.logs(*n).encode_to_vec(),
            Signal::Traces => data.traces(*n).encode_to_vec(),
            Signal::Metrics => data.metrics(*n).encode_to_vec(),
        })
        .collect()
}

/// Scenario: the reference Go producer turns OTLP requests into one OTAP stream.
/// Guarantees: Penstock's decoder reads every batch back into the original records.
#[test]
fn penstock_decodes_reference_producer_output() {
    let Some(binary) = interop_binary() else {
        return;
    };
    for signal in Signal::ALL {
        let input = requests(signal);
        let bars = run(&binary, "produce", signal, frames(&input));
        assert_eq!(bars.len(), input.len());
        let mut decoder = OtapDecoder::new(signal);
        for (i, (request, bar)) in input.iter().zip(&bars).enumerate() {
            let bar = BatchArrowRecords::decode(bar.as_slice()).unwrap();
            let batch = decoder
                .decode(&bar)
                .unwrap_or_else(|e| panic!("{signal} batch {i}: {e}"));
            let got = canonical(signal, &encode::encode(&batch).unwrap());
            // The reference producer does not encode metric metadata.
            let expected = canonical(signal, &without_metric_metadata(signal, request));
            if let Some(diff) = equiv::first_difference(&expected, &got) {
                panic!("{signal} batch {i} differs: {diff}");
            }
        }
    }
}

/// Scenario: Penstock encodes OTLP requests as one OTAP stream, with and without zstd and
/// dictionaries.
/// Guarantees: the reference Go consumer reads every batch back into the original records.
#[test]
fn reference_consumer_decodes_penstock_output() {
    let Some(binary) = interop_binary() else {
        return;
    };
    for signal in Signal::ALL {
        let plain = EncodeOptions {
            zstd: false,
            dictionaries: false,
            ..EncodeOptions::default()
        };
        for options in [EncodeOptions::default(), plain] {
            let input = requests(signal);
            let mut encoder = OtapEncoder::new(signal, options).unwrap();
            let mut bars = Vec::new();
            for request in &input {
                let batches = penstock_engine::otlp::decode::decode(signal, request).unwrap();
                assert_eq!(batches.len(), 1);
                bars.push(encoder.encode(&batches[0]).unwrap().encode_to_vec());
            }
            let outputs = run(&binary, "consume", signal, frames(&bars));
            assert_eq!(outputs.len(), input.len());
            for (i, (request, output)) in input.iter().zip(&outputs).enumerate() {
                // Metric metadata is not sent to the reference consumer (see EncodeOptions).
                let expected = canonical(signal, &without_metric_metadata(signal, request));
                if let Some(diff) = equiv::first_difference(&expected, &canonical(signal, output)) {
                    panic!("{signal} batch {i} ({options:?}) differs: {diff}");
                }
            }
        }
    }
}
