//! Properties of what the OTAP encoder sends: required columns present and without nulls, and
//! batches larger than 16-bit ids can address (when most rows carry no id).

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch, TimestampNanosecondArray};
use arrow::buffer::Buffer;
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use arrow::ipc::reader::StreamDecoder;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use penstock_engine::otap::{EncodeOptions, OtapDecoder, OtapEncoder};
use penstock_engine::otlp::json;
use penstock_engine::{OtapBatch, PayloadType, Signal};
use prost::Message;

/// Scenario: spans with an empty name, no ids and zero duration (all defaults).
/// Guarantees: the SPANS payload still carries every column OTAP requires, without nulls.
#[test]
fn required_columns_are_sent_with_defaults() {
    let span = Span {
        start_time_unix_nano: 5,
        end_time_unix_nano: 5,
        ..Default::default()
    };
    let request = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: vec![span.clone(), span],
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    let batch = json::decode(Signal::Traces, &request.encode_to_vec())
        .unwrap()
        .remove(0);
    let bar = OtapEncoder::new(Signal::Traces, EncodeOptions::default())
        .unwrap()
        .encode(&batch)
        .unwrap();
    let spans = bar
        .arrow_payloads
        .iter()
        .find(|p| p.r#type == PayloadType::Spans.wire())
        .unwrap();
    let table = StreamDecoder::new()
        .decode(&mut Buffer::from(spans.record.clone()))
        .unwrap()
        .unwrap();
    for name in [
        "start_time_unix_nano",
        "duration_time_unix_nano",
        "trace_id",
        "span_id",
        "name",
    ] {
        let column = table
            .column_by_name(name)
            .unwrap_or_else(|| panic!("{name} missing"));
        assert_eq!(column.null_count(), 0, "{name} has nulls");
    }
}

/// Scenario: a LOGS table of 70,000 records none of which has attributes (no ids).
/// Guarantees: it encodes as one OTAP batch and decodes back whole.
#[test]
fn large_batches_without_ids_encode() {
    let rows = 70_000;
    let time =
        TimestampNanosecondArray::from_iter_values((0..rows).map(|i| i + 1)).with_timezone("UTC");
    let schema = Schema::new(vec![Field::new(
        "time_unix_nano",
        DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into())),
        true,
    )]);
    let logs = RecordBatch::try_new(Arc::new(schema), vec![Arc::new(time) as ArrayRef]).unwrap();
    let mut batch = OtapBatch::new(Signal::Logs);
    batch.set(PayloadType::Logs, logs).unwrap();
    let bar = OtapEncoder::new(Signal::Logs, EncodeOptions::default())
        .unwrap()
        .encode(&batch)
        .unwrap();
    let decoded = OtapDecoder::new(Signal::Logs).decode(&bar).unwrap();
    assert_eq!(decoded.num_items(), rows as usize);
}
