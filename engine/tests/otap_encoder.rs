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
    let batch = penstock_engine::otlp::decode::decode(Signal::Traces, &request.encode_to_vec())
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

/// Scenario: the same batch of realistic logs encoded twice on one stream.
/// Guarantees: the second message carries no schema and no repeated dictionary values, so it
/// is much smaller; both decode to the same data.
#[test]
fn dictionaries_persist_across_batches() {
    let request = penstock_engine::datagen::DataGen::new(6)
        .logs(1000)
        .encode_to_vec();
    let batch = penstock_engine::otlp::decode::decode(Signal::Logs, &request)
        .unwrap()
        .remove(0);
    let mut encoder = OtapEncoder::new(Signal::Logs, EncodeOptions::default()).unwrap();
    let first = encoder.encode(&batch).unwrap();
    let second = encoder.encode(&batch).unwrap();
    assert!(
        second.encoded_len() * 10 < first.encoded_len() * 8,
        "second batch {} bytes, first {}",
        second.encoded_len(),
        first.encoded_len()
    );
    let mut decoder = OtapDecoder::new(Signal::Logs);
    let a = penstock_engine::otlp::encode::encode(&decoder.decode(&first).unwrap()).unwrap();
    let b = penstock_engine::otlp::encode::encode(&decoder.decode(&second).unwrap()).unwrap();
    assert_eq!(a, b);
}

/// Scenario: 40 batches whose `severity_text` values repeat within a batch but are new in
/// every batch, so the stream's dictionary passes 65,535 values and starts afresh.
/// Guarantees: every batch decodes to exactly the values sent.
#[test]
fn dictionaries_start_afresh_when_full() {
    use arrow::array::{AsArray, StringArray};
    let mut encoder = OtapEncoder::new(Signal::Logs, EncodeOptions::default()).unwrap();
    let mut decoder = OtapDecoder::new(Signal::Logs);
    for round in 0..40 {
        let values: Vec<String> = (0..4096).map(|i| format!("v{round}-{}", i / 2)).collect();
        let schema = Schema::new(vec![Field::new("severity_text", DataType::Utf8, true)]);
        let column = Arc::new(StringArray::from_iter_values(&values)) as ArrayRef;
        let logs = RecordBatch::try_new(Arc::new(schema), vec![column]).unwrap();
        let mut batch = OtapBatch::new(Signal::Logs);
        batch.set(PayloadType::Logs, logs).unwrap();
        let decoded = decoder.decode(&encoder.encode(&batch).unwrap()).unwrap();
        let column = decoded
            .root()
            .unwrap()
            .column_by_name("severity_text")
            .unwrap();
        let plain = arrow::compute::cast(column, &DataType::Utf8).unwrap();
        let got: Vec<&str> = plain
            .as_string::<i32>()
            .iter()
            .map(|v| v.unwrap())
            .collect();
        assert_eq!(got, values, "round {round}");
    }
}

/// Scenario: a log attribute table whose keys form one block (as in a table that arrived in
/// transport order) but whose equal attributes have decreasing parent ids.
/// Guarantees: the encoder notices, sorts the table, and the records decode unchanged.
#[test]
fn attribute_runs_out_of_parent_order_are_sorted() {
    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
    use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
    let record = |body: &str| LogRecord {
        body: Some(AnyValue {
            value: Some(any_value::Value::StringValue(body.into())),
        }),
        attributes: vec![KeyValue {
            key: "k".into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue("v".into())),
            }),
            ..Default::default()
        }],
        ..Default::default()
    };
    let request = ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            scope_logs: vec![ScopeLogs {
                log_records: vec![record("a"), record("b"), record("c")],
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    let batch = penstock_engine::otlp::decode::decode(Signal::Logs, &request.encode_to_vec())
        .unwrap()
        .remove(0);
    let expected = penstock_engine::otlp::encode::encode(&batch).unwrap();
    let attrs = batch.get(PayloadType::LogAttrs).unwrap();
    let reversed =
        arrow::compute::take_record_batch(attrs, &arrow::array::UInt32Array::from(vec![2, 1, 0]))
            .unwrap();
    let key_index = reversed.schema().index_of("key").unwrap();
    let mut columns = reversed.columns().to_vec();
    let dictionary = DataType::Dictionary(Box::new(DataType::UInt8), Box::new(DataType::Utf8));
    columns[key_index] = arrow::compute::cast(&columns[key_index], &dictionary).unwrap();
    let mut fields: Vec<Field> = reversed
        .schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields[key_index] = Field::new("key", dictionary, false);
    let reversed = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap();
    let mut shuffled = batch.clone();
    shuffled.set(PayloadType::LogAttrs, reversed).unwrap();

    let bar = OtapEncoder::new(Signal::Logs, EncodeOptions::default())
        .unwrap()
        .encode(&shuffled)
        .unwrap();
    let decoded = OtapDecoder::new(Signal::Logs).decode(&bar).unwrap();
    assert_eq!(
        penstock_engine::otlp::encode::encode(&decoded).unwrap(),
        expected
    );
}

/// Scenario: a batch whose root table lost every other log record (as a filter leaves it) while
/// its attribute table still holds the attributes of all of them.
/// Guarantees: the encoder drops the attributes of the missing records; decoded, the batch is
/// exactly the remaining records with their own attributes.
#[test]
fn attributes_of_missing_records_are_dropped() {
    use arrow::array::BooleanArray;
    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
    use penstock_engine::datagen::DataGen;
    use penstock_engine::{equiv, otlp};

    let request = DataGen::new(7).logs(200);
    let mut batch = otlp::decode::decode(Signal::Logs, &request.encode_to_vec())
        .unwrap()
        .remove(0);
    let root = batch.root().unwrap().clone();
    let even = BooleanArray::from_iter((0..root.num_rows()).map(|i| Some(i % 2 == 0)));
    let filtered = arrow::compute::filter_record_batch(&root, &even).unwrap();
    batch.set(PayloadType::Logs, filtered).unwrap();

    let mut encoder = OtapEncoder::new(Signal::Logs, EncodeOptions::default()).unwrap();
    let decoded = OtapDecoder::new(Signal::Logs)
        .decode(&encoder.encode(&batch).unwrap())
        .unwrap();
    let actual =
        ExportLogsServiceRequest::decode(otlp::encode::encode(&decoded).unwrap().as_slice())
            .unwrap();

    // Root rows are the records in request order.
    let mut expected = request;
    let mut row = 0;
    for resource in &mut expected.resource_logs {
        for scope in &mut resource.scope_logs {
            scope.log_records.retain(|_| {
                row += 1;
                row % 2 == 1
            });
        }
    }
    let (expected, actual) = (equiv::logs(&expected), equiv::logs(&actual));
    assert_eq!(actual.len(), 100);
    assert_eq!(equiv::first_difference(&expected, &actual), None);
}
