//! OTLP JSON: one `Export{Logs,Trace,Metrics}ServiceRequest` per line, the format of the
//! Collector's file exporter. Off the hot path: lines go through the `opentelemetry-proto`
//! types and then the protobuf codec.

use std::io::BufRead;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;

use crate::batch::OtapBatch;
use crate::error::{Error, Result};
use crate::schema::Signal;

/// The signal of one JSON line, from its top-level key.
fn signal_of(value: &serde_json::Value) -> Option<Signal> {
    let object = value.as_object()?;
    if object.contains_key("resourceLogs") {
        Some(Signal::Logs)
    } else if object.contains_key("resourceSpans") {
        Some(Signal::Traces)
    } else if object.contains_key("resourceMetrics") {
        Some(Signal::Metrics)
    } else {
        None
    }
}

/// Parses one OTLP JSON line into its signal and protobuf bytes.
pub fn line_to_protobuf(line: &str, line_number: usize) -> Result<(Signal, Vec<u8>)> {
    let json_err = |source| Error::Json {
        line: line_number,
        source,
    };
    let value: serde_json::Value = serde_json::from_str(line).map_err(json_err)?;
    let signal = signal_of(&value).ok_or_else(|| Error::Json {
        line: line_number,
        source: serde::de::Error::custom(
            "expected an object with resourceLogs, resourceSpans or resourceMetrics",
        ),
    })?;
    let bytes = typed_to_protobuf(signal, value).map_err(json_err)?;
    Ok((signal, bytes))
}

/// Converts one OTLP JSON export request of a known signal (an OTLP/HTTP JSON body) to
/// protobuf bytes. Errors name line 1.
pub fn request_to_protobuf(signal: Signal, json: &[u8]) -> Result<Vec<u8>> {
    let json_err = |source| Error::Json { line: 1, source };
    let mut deserializer = serde_json::Deserializer::from_slice(json);
    let bytes = typed_to_protobuf(signal, &mut deserializer).map_err(json_err)?;
    deserializer.end().map_err(json_err)?;
    Ok(bytes)
}

/// Deserializes the export request type of `signal` and encodes it as protobuf.
fn typed_to_protobuf<'de, D>(signal: Signal, json: D) -> std::result::Result<Vec<u8>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    use serde::Deserialize;
    Ok(match signal {
        Signal::Logs => ExportLogsServiceRequest::deserialize(json)?.encode_to_vec(),
        Signal::Traces => ExportTraceServiceRequest::deserialize(json)?.encode_to_vec(),
        Signal::Metrics => ExportMetricsServiceRequest::deserialize(json)?.encode_to_vec(),
    })
}

/// Reads OTLP JSON lines (blank lines are skipped) into batches, in order.
pub fn read_lines(reader: impl BufRead) -> Result<Vec<OtapBatch>> {
    let mut batches = Vec::new();
    for (index, line) in reader.lines().enumerate() {
        let line = line.map_err(|source| Error::Io {
            path: "<input>".into(),
            source,
        })?;
        if line.trim().is_empty() {
            continue;
        }
        let (signal, bytes) = line_to_protobuf(&line, index + 1)?;
        batches.extend(crate::otlp::decode::decode(signal, &bytes)?);
    }
    Ok(batches)
}

/// Reads an OTLP JSON lines file.
pub fn read_file(path: &std::path::Path) -> Result<Vec<OtapBatch>> {
    let file = std::fs::File::open(path).map_err(|source| Error::Io {
        path: path.display().to_string(),
        source,
    })?;
    read_lines(std::io::BufReader::new(file))
}

/// Writes a batch as one OTLP JSON line (without the newline).
pub fn to_line(batch: &OtapBatch) -> Result<String> {
    let bytes = crate::otlp::encode::encode(batch)?;
    let malformed = |_| Error::MalformedProtobuf {
        offset: 0,
        reason: "re-encoding produced invalid protobuf",
    };
    let json = match batch.signal() {
        Signal::Logs => serde_json::to_string(
            &ExportLogsServiceRequest::decode(bytes.as_slice()).map_err(malformed)?,
        ),
        Signal::Traces => serde_json::to_string(
            &ExportTraceServiceRequest::decode(bytes.as_slice()).map_err(malformed)?,
        ),
        Signal::Metrics => serde_json::to_string(
            &ExportMetricsServiceRequest::decode(bytes.as_slice()).map_err(malformed)?,
        ),
    };
    json.map_err(|source| Error::Json { line: 0, source })
}
