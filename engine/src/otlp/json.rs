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
    let json = protobuf_to_json(batch.signal(), &bytes)?;
    // serde_json writes UTF-8 only.
    String::from_utf8(json).map_err(|_| Error::MalformedProtobuf {
        offset: 0,
        reason: "OTLP JSON that is not UTF-8",
    })
}

/// Converts the protobuf bytes of an export request of `signal` to its OTLP JSON encoding
/// (the body of an OTLP/HTTP JSON request): lowerCamelCase keys, trace and span ids as hex,
/// 64-bit integers as strings, enums as numbers, and absent optional fields left out rather
/// than written as `null` (which pdata, and so the Collector, refuses for numbers).
pub fn protobuf_to_json(signal: Signal, bytes: &[u8]) -> Result<Vec<u8>> {
    let malformed = |_| Error::MalformedProtobuf {
        offset: 0,
        reason: "an export request that does not decode",
    };
    let json = match signal {
        Signal::Logs => {
            serde_json::to_vec(&ExportLogsServiceRequest::decode(bytes).map_err(malformed)?)
        }
        Signal::Traces => {
            serde_json::to_vec(&ExportTraceServiceRequest::decode(bytes).map_err(malformed)?)
        }
        Signal::Metrics => {
            serde_json::to_vec(&ExportMetricsServiceRequest::decode(bytes).map_err(malformed)?)
        }
    };
    json.map(|json| without_null_members(&json))
        .map_err(|source| Error::Json { line: 0, source })
}

/// Compact JSON text (as serde_json writes it: no whitespace) without its `"key":null`
/// object members, every other byte in its place.
fn without_null_members(json: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(json.len());
    let mut i = 0;
    while let Some(&byte) = json.get(i) {
        if byte != b'"' {
            out.push(byte);
            i += 1;
            continue;
        }
        let end = string_end(json, i);
        // Only a member's key is followed by ':'.
        let after = end + b":null".len();
        let null_member = json[end..].starts_with(b":null")
            && matches!(json.get(after), Some(b',' | b'}'))
            && matches!(out.last(), Some(b'{' | b','));
        if !null_member {
            out.extend_from_slice(&json[i..end]);
            i = end;
        } else if out.last() == Some(&b',') {
            // Drop the comma before it.
            out.pop();
            i = after;
        } else {
            // The object's first member: drop the comma after it, if any.
            i = if json.get(after) == Some(&b',') {
                after + 1
            } else {
                after
            };
        }
    }
    out
}

/// The index after the closing quote of the JSON string starting at `start`.
fn string_end(json: &[u8], start: usize) -> usize {
    let mut i = start + 1;
    while let Some(&byte) = json.get(i) {
        match byte {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    json.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_optional_fields_are_left_out() {
        let line = r#"{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"h","histogram":{"dataPoints":[{"timeUnixNano":"5","count":"2","bucketCounts":["1","1"],"explicitBounds":[1.0]}],"aggregationTemporality":2}}]}]}]}"#;
        let (signal, bytes) = line_to_protobuf(line, 1).unwrap();
        let json = String::from_utf8(protobuf_to_json(signal, &bytes).unwrap()).unwrap();
        assert!(!json.contains("null"), "{json}");
        assert!(json.contains(r#""count":"2""#), "{json}");
        let (_, again) = line_to_protobuf(&json, 1).unwrap();
        assert_eq!(again, bytes);
    }

    #[test]
    fn null_members_go_and_everything_else_stays_in_order() {
        let cases = [
            (r#"{"a":null,"b":1}"#, r#"{"b":1}"#),
            (r#"{"b":1,"a":null}"#, r#"{"b":1}"#),
            (r#"{"a":null}"#, r#"{}"#),
            (
                r#"{"z":2,"a":null,"c":null,"b":[null,{"x":null}]}"#,
                r#"{"z":2,"b":[null,{}]}"#,
            ),
            (
                r#"{"s":"\":null,\"q","t":"x"}"#,
                r#"{"s":"\":null,\"q","t":"x"}"#,
            ),
            (r#"["k",":null",{"k":"v"}]"#, r#"["k",":null",{"k":"v"}]"#),
        ];
        for (json, want) in cases {
            let out = without_null_members(json.as_bytes());
            assert_eq!(String::from_utf8(out).unwrap(), want, "{json}");
        }
    }
}
