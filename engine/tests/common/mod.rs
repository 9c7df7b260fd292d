//! Helpers shared by the engine's integration tests: round trips through the codecs, compared
//! with the `equiv` oracle.

#![allow(dead_code, clippy::unwrap_used)]

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use penstock_engine::otap::{EncodeOptions, OtapDecoder, OtapEncoder};
use penstock_engine::otlp::encode;
use penstock_engine::proto::BatchArrowRecords;
use penstock_engine::{OtapBatch, Signal, equiv};
use prost::Message;

pub fn canonical(signal: Signal, bytes: &[u8]) -> Vec<String> {
    match signal {
        Signal::Logs => equiv::logs(&ExportLogsServiceRequest::decode(bytes).unwrap()),
        Signal::Traces => equiv::traces(&ExportTraceServiceRequest::decode(bytes).unwrap()),
        Signal::Metrics => equiv::metrics(&ExportMetricsServiceRequest::decode(bytes).unwrap()),
    }
}

pub fn otlp_lines(batches: &[OtapBatch]) -> Vec<String> {
    let mut lines: Vec<String> = batches
        .iter()
        .flat_map(|b| canonical(b.signal(), &encode::encode(b).unwrap()))
        .collect();
    lines.sort();
    lines
}

/// Every option a Penstock-to-Penstock stream can use, metric metadata included.
pub fn full_options() -> [EncodeOptions; 2] {
    [
        EncodeOptions {
            metric_metadata: true,
            ..EncodeOptions::default()
        },
        EncodeOptions {
            zstd: false,
            dictionaries: false,
            metric_metadata: true,
            ..EncodeOptions::default()
        },
    ]
}

/// Checks that each request survives OTLP decode/encode and one OTAP stream (encoded to bytes
/// and parsed back, as on the wire), then a second stream that relays what the first decoded
/// (as a gateway does, keeping the tables' transport order). Returns a description of the
/// first difference.
pub fn round_trip(
    signal: Signal,
    requests: &[Vec<u8>],
    options: EncodeOptions,
) -> Result<(), String> {
    let mut encoder = OtapEncoder::new(signal, options).unwrap();
    let mut decoder = OtapDecoder::new(signal);
    let mut relay_encoder = OtapEncoder::new(signal, options).unwrap();
    let mut relay_decoder = OtapDecoder::new(signal);
    for (i, bytes) in requests.iter().enumerate() {
        let expected = canonical(signal, bytes);
        let batches = penstock_engine::otlp::decode::decode(signal, bytes)
            .map_err(|e| format!("request {i}: {e}"))?;
        if let Some(diff) = equiv::first_difference(&expected, &otlp_lines(&batches)) {
            return Err(format!(
                "{signal} request {i}: OTLP round trip differs: {diff}"
            ));
        }
        let mut via_otap = Vec::new();
        let mut relayed = Vec::new();
        for batch in &batches {
            let bar = encoder.encode(batch).map_err(|e| format!("encode: {e}"))?;
            let bar = BatchArrowRecords::decode(bar.encode_to_vec().as_slice()).unwrap();
            let decoded = decoder.decode(&bar).map_err(|e| format!("decode: {e}"))?;
            let bar = relay_encoder
                .encode(&decoded)
                .map_err(|e| format!("relay encode: {e}"))?;
            let bar = BatchArrowRecords::decode(bar.encode_to_vec().as_slice()).unwrap();
            relayed.push(
                relay_decoder
                    .decode(&bar)
                    .map_err(|e| format!("relay decode: {e}"))?,
            );
            via_otap.push(decoded);
        }
        if let Some(diff) = equiv::first_difference(&expected, &otlp_lines(&via_otap)) {
            return Err(format!(
                "{signal} request {i}: OTAP round trip differs: {diff}"
            ));
        }
        if let Some(diff) = equiv::first_difference(&expected, &otlp_lines(&relayed)) {
            return Err(format!(
                "{signal} request {i}: relayed OTAP stream differs: {diff}"
            ));
        }
    }
    Ok(())
}

/// A length-delimited protobuf field `number` holding `body`.
pub fn field(number: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![number << 3 | 2];
    let mut len = body.len();
    while len >= 0x80 {
        out.push((len as u8) | 0x80);
        len >>= 7;
    }
    out.push(len as u8);
    out.extend_from_slice(body);
    out
}
