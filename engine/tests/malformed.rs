//! Malformed, hostile and odd input: every decoder returns an error, never panics, and never
//! allocates without bound; odd but valid input decodes as written.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray, UInt8Array, UInt16Array};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::ipc::CompressionType;
use arrow::ipc::writer::{IpcWriteOptions, StreamEncoder};
use bytes::Bytes;
use penstock_engine::datagen::DataGen;
use penstock_engine::otap::{DecodeLimits, EncodeOptions, OtapDecoder, OtapEncoder};
use penstock_engine::proto::{ArrowPayload, BatchArrowRecords};
use penstock_engine::{Error, PayloadType, Signal};
use proptest::prelude::*;
use prost::Message;

fn sample(signal: Signal) -> Vec<u8> {
    let mut data = DataGen::new(2);
    match signal {
        Signal::Logs => data.logs(20).encode_to_vec(),
        Signal::Traces => data.traces(20).encode_to_vec(),
        Signal::Metrics => data.metrics(20).encode_to_vec(),
    }
}

/// Scenario: a valid request cut at every length.
/// Guarantees: decoding never panics, and a cut inside the last record is an error.
#[test]
fn truncated_otlp_is_an_error() {
    for signal in Signal::ALL {
        let bytes = sample(signal);
        for len in 0..bytes.len() {
            let _ = penstock_engine::otlp::decode::decode(signal, &bytes[..len]);
        }
        assert!(
            penstock_engine::otlp::decode::decode(signal, &bytes[..bytes.len() - 1]).is_err(),
            "{signal}"
        );
    }
}

/// Scenario: a log record whose severity text is not UTF-8, one whose trace id has 5 bytes,
/// and spans with the same faults in their name and parent span id.
/// Guarantees: both are refused with a message saying what is wrong.
#[test]
fn invalid_strings_and_ids_are_errors() {
    // ExportLogsServiceRequest{resource_logs{scope_logs{log_records{severity_text: 0xff}}}}
    let record = [0x1a, 0x01, 0xff];
    let request = nest(&[1, 2, 2], &record);
    let err = penstock_engine::otlp::decode::decode(Signal::Logs, &request).unwrap_err();
    assert!(err.to_string().contains("UTF-8"), "{err}");
    let record = [0x4a, 0x05, 1, 2, 3, 4, 5];
    let err = penstock_engine::otlp::decode::decode(Signal::Logs, &nest(&[1, 2, 2], &record))
        .unwrap_err();
    assert!(err.to_string().contains("wrong length"), "{err}");
    // Spans: a name that is not UTF-8 (field 5), a parent span id of 3 bytes (field 4).
    for (record, message) in [
        (vec![0x2a, 0x02, 0xc3, 0x28], "UTF-8"),
        (vec![0x22, 0x03, 1, 2, 3], "wrong length"),
    ] {
        let err = penstock_engine::otlp::decode::decode(Signal::Traces, &nest(&[1, 2, 2], &record))
            .unwrap_err();
        assert!(err.to_string().contains(message), "{record:?}: {err}");
    }
}

/// Scenario: log record and span fields with a known number but the wrong wire type (a
/// timestamp sent as a varint, attributes as a fixed32), next to an unknown field that must be
/// skipped.
/// Guarantees: the known ones are errors; the unknown one is not.
#[test]
fn known_fields_with_the_wrong_wire_type_are_errors() {
    for record in [vec![0x08, 0x01], vec![0x35, 1, 2, 3, 4]] {
        let err = penstock_engine::otlp::decode::decode(Signal::Logs, &nest(&[1, 2, 2], &record))
            .unwrap_err();
        assert!(
            err.to_string().contains("wrong wire type"),
            "{record:?}: {err}"
        );
    }
    // Spans: a start time sent as a varint (field 7), a name as a fixed64 (field 5), flags as
    // a varint (field 16).
    for record in [
        vec![0x38, 0x01],
        vec![0x29, 1, 2, 3, 4, 5, 6, 7, 8],
        vec![0x80, 0x01, 0x01],
    ] {
        let err = penstock_engine::otlp::decode::decode(Signal::Traces, &nest(&[1, 2, 2], &record))
            .unwrap_err();
        assert!(
            err.to_string().contains("wrong wire type"),
            "{record:?}: {err}"
        );
    }
    // Field 99 (varint) is unknown: skipped, and the record decodes.
    let record = [0x98, 0x06, 0x01, 0x10, 0x09];
    let batches =
        penstock_engine::otlp::decode::decode(Signal::Logs, &nest(&[1, 2, 2], &record)).unwrap();
    assert_eq!(batches[0].num_items(), 1);
}

/// Wraps `inner` in length-delimited fields, outermost first.
fn nest(fields: &[u8], inner: &[u8]) -> Vec<u8> {
    fields
        .iter()
        .rev()
        .fold(inner.to_vec(), |body, number| common::field(*number, &body))
}

/// Scenario: a log body nested 100,000 levels deep.
/// Guarantees: refused as too deep, without exhausting the stack.
#[test]
fn deep_nesting_is_bounded() {
    // AnyValue{array_value{values: [AnyValue{array_value{...}}]}}, innermost an int.
    let mut value = vec![0x18, 0x01];
    for _ in 0..100_000 {
        value = nest(&[5, 1], &value);
    }
    let record = nest(&[5], &value);
    let err = penstock_engine::otlp::decode::decode(Signal::Logs, &nest(&[1, 2, 2], &record))
        .unwrap_err();
    assert!(matches!(err, Error::TooDeep { .. }), "{err}");
}

fn payload(table: PayloadType, schema_id: &str, record: Vec<u8>) -> ArrowPayload {
    ArrowPayload {
        schema_id: schema_id.into(),
        r#type: table.wire(),
        record: Bytes::from(record),
    }
}

fn ipc(batch: &RecordBatch, compression: Option<CompressionType>) -> Vec<u8> {
    let options = IpcWriteOptions::default()
        .try_with_compression(compression)
        .unwrap();
    let mut encoder = StreamEncoder::try_new_with_options(&batch.schema(), options).unwrap();
    encoder
        .encode(batch)
        .unwrap()
        .iter()
        .flat_map(|b| b.as_slice().to_vec())
        .collect()
}

fn bar(payloads: Vec<ArrowPayload>) -> BatchArrowRecords {
    BatchArrowRecords {
        batch_id: 0,
        arrow_payloads: payloads,
        headers: Bytes::new(),
    }
}

/// Scenario: payloads with garbage bytes, a wrong payload type, a duplicate table, an unknown
/// column, and an attribute row without a parent id.
/// Guarantees: each is refused with the matching error.
#[test]
fn bad_otap_payloads_are_errors() {
    let mut decoder = OtapDecoder::new(Signal::Logs);
    let garbage = bar(vec![payload(
        PayloadType::Logs,
        "0",
        vec![0xff, 0xff, 0xff, 0xff, 9, 0, 0, 0, 1, 2],
    )]);
    assert!(decoder.decode(&garbage).is_err());

    let spans_in_logs = bar(vec![payload(PayloadType::Spans, "0", Vec::new())]);
    assert!(matches!(
        decoder.decode(&spans_in_logs),
        Err(Error::PayloadTypeNotAllowed { .. })
    ));
    let unknown = BatchArrowRecords {
        arrow_payloads: vec![ArrowPayload {
            r#type: 99,
            ..payload(PayloadType::Logs, "0", Vec::new())
        }],
        ..bar(vec![])
    };
    assert!(matches!(
        decoder.decode(&unknown),
        Err(Error::PayloadTypeNotAllowed {
            payload_type: 99,
            ..
        })
    ));

    let bogus = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new(
            "bogus",
            DataType::Int64,
            true,
        )])),
        vec![Arc::new(Int64Array::from(vec![1])) as ArrayRef],
    )
    .unwrap();
    let err = decoder
        .decode(&bar(vec![payload(
            PayloadType::Logs,
            "1",
            ipc(&bogus, None),
        )]))
        .unwrap_err();
    assert!(matches!(err, Error::SchemaMismatch { .. }), "{err}");

    let orphan = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("parent_id", DataType::UInt16, true),
            Field::new("key", DataType::Utf8, false),
            Field::new("type", DataType::UInt8, false),
        ])),
        vec![
            Arc::new(UInt16Array::from(vec![None, Some(1)])) as ArrayRef,
            Arc::new(StringArray::from(vec!["a", "b"])),
            Arc::new(UInt8Array::from(vec![0, 0])),
        ],
    )
    .unwrap();
    let err = decoder
        .decode(&bar(vec![payload(
            PayloadType::LogAttrs,
            "2",
            ipc(&orphan, None),
        )]))
        .unwrap_err();
    assert!(matches!(err, Error::InvalidIds { .. }), "{err}");

    let request = sample(Signal::Logs);
    let batch = penstock_engine::otlp::decode::decode(Signal::Logs, &request)
        .unwrap()
        .remove(0);
    let mut good = OtapEncoder::new(Signal::Logs, EncodeOptions::default())
        .unwrap()
        .encode(&batch)
        .unwrap();
    let first = good.arrow_payloads[0].clone();
    good.arrow_payloads.push(first);
    let err = OtapDecoder::new(Signal::Logs).decode(&good).unwrap_err();
    assert!(matches!(err, Error::DuplicatePayload(_)), "{err}");
}

/// Scenario: a LOGS table whose ids repeat (all deltas zero) with one attribute row.
/// Guarantees: refused, since it would attach the attribute to every record.
#[test]
fn repeated_ids_are_refused() {
    let logs = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("id", DataType::UInt16, true)])),
        vec![Arc::new(UInt16Array::from(vec![0u16; 1000])) as ArrayRef],
    )
    .unwrap();
    let mut decoder = OtapDecoder::new(Signal::Logs);
    let err = decoder
        .decode(&bar(vec![payload(
            PayloadType::Logs,
            "0",
            ipc(&logs, None),
        )]))
        .unwrap_err();
    assert!(matches!(err, Error::InvalidIds { .. }), "{err}");
}

/// Scenario: a log attribute table whose key dictionary holds the same key twice, with two
/// equal attributes written through different dictionary entries, the second's parent id
/// quasi-delta encoded against the first.
/// Guarantees: rows are compared by value, not by dictionary entry: the second row continues
/// the run and decodes to parent 2.
#[test]
fn repeated_dictionary_values_compare_by_value() {
    use arrow::array::DictionaryArray;
    use arrow::datatypes::UInt8Type;
    let logs = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("id", DataType::UInt16, true)])),
        vec![Arc::new(UInt16Array::from(vec![0u16, 1, 1])) as ArrayRef],
    )
    .unwrap();
    let keys = DictionaryArray::<UInt8Type>::try_new(
        UInt8Array::from(vec![0u8, 1]),
        Arc::new(StringArray::from(vec!["k", "k"])),
    )
    .unwrap();
    let key_type = DataType::Dictionary(Box::new(DataType::UInt8), Box::new(DataType::Utf8));
    let attrs = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("parent_id", DataType::UInt16, false),
            Field::new("key", key_type, false),
            Field::new("type", DataType::UInt8, false),
            Field::new("str", DataType::Utf8, true),
        ])),
        vec![
            Arc::new(UInt16Array::from(vec![1u16, 1])) as ArrayRef,
            Arc::new(keys),
            Arc::new(UInt8Array::from(vec![1u8, 1])),
            Arc::new(StringArray::from(vec!["v", "v"])),
        ],
    )
    .unwrap();
    let batch = OtapDecoder::new(Signal::Logs)
        .decode(&bar(vec![
            payload(PayloadType::Logs, "0", ipc(&logs, None)),
            payload(PayloadType::LogAttrs, "1", ipc(&attrs, None)),
        ]))
        .unwrap();
    let parents = batch
        .get(PayloadType::LogAttrs)
        .unwrap()
        .column_by_name("parent_id")
        .unwrap()
        .as_any()
        .downcast_ref::<UInt16Array>()
        .unwrap()
        .values()
        .to_vec();
    assert_eq!(parents, vec![1, 2]);
}

/// Scenario: OTLP encoding under a byte budget smaller than the batch.
/// Guarantees: refused once the budget is passed, instead of growing without bound.
#[test]
fn otlp_output_is_bounded() {
    let batch = penstock_engine::otlp::decode::decode(
        Signal::Logs,
        &DataGen::new(1).logs(500).encode_to_vec(),
    )
    .unwrap()
    .remove(0);
    let err = penstock_engine::otlp::encode::encode_with_limit(&batch, 10_000).unwrap_err();
    assert!(matches!(err, Error::LimitExceeded(_)), "{err}");
    assert!(penstock_engine::otlp::encode::encode_with_limit(&batch, 10 << 20).is_ok());
}

/// Scenario: a 160 MB column of zeros compressed with zstd into a few kilobytes.
/// Guarantees: refused before inflating when it declares more than the decoder's limit.
#[test]
fn compression_bombs_are_refused_before_inflating() {
    let zeros = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new(
            "bogus",
            DataType::Int64,
            false,
        )])),
        vec![Arc::new(Int64Array::from(vec![0i64; 20_000_000])) as ArrayRef],
    )
    .unwrap();
    let record = ipc(&zeros, Some(CompressionType::ZSTD));
    assert!(
        record.len() < 100_000,
        "the bomb should be small: {}",
        record.len()
    );
    let limits = DecodeLimits {
        max_payload_decompressed_bytes: 16 << 20,
        max_rows: u64::MAX,
    };
    let mut decoder = OtapDecoder::with_limits(Signal::Logs, limits);
    let err = decoder
        .decode(&bar(vec![payload(PayloadType::Logs, "0", record)]))
        .unwrap_err();
    assert!(
        matches!(err, Error::DecompressedTooLarge { limit } if limit == 16 << 20),
        "{err}"
    );
}

/// Scenario: a table that declares more rows than the decoder's limit (here an empty struct
/// column, which costs nothing to declare).
/// Guarantees: refused before any per-row work.
#[test]
fn row_counts_are_bounded() {
    let rows = RecordBatch::try_new_with_options(
        Arc::new(Schema::new(vec![Field::new(
            "resource",
            DataType::Struct(Default::default()),
            true,
        )])),
        vec![Arc::new(arrow::array::StructArray::new_empty_fields(5_000, None)) as ArrayRef],
        &arrow::array::RecordBatchOptions::new().with_row_count(Some(5_000)),
    )
    .unwrap();
    let limits = DecodeLimits {
        max_rows: 1_000,
        ..DecodeLimits::default()
    };
    let mut decoder = OtapDecoder::with_limits(Signal::Logs, limits);
    let err = decoder
        .decode(&bar(vec![payload(
            PayloadType::Logs,
            "0",
            ipc(&rows, None),
        )]))
        .unwrap_err();
    assert!(err.to_string().contains("rows"), "{err}");
}

/// Scenario: inputs found by fuzzing (`tests/data/fuzz/`): an OTAP stream (first byte: signal,
/// then length-prefixed `BatchArrowRecords`) whose IPC validity buffer is shorter than its
/// column, which makes the Arrow IPC reader panic.
/// Guarantees: the decoder returns an error, and a fresh stream still decodes afterwards.
#[test]
fn fuzz_findings_are_errors() {
    let data = include_bytes!("data/fuzz/otap-short-validity-buffer.bin");
    let signal = Signal::ALL[usize::from(data[0]) % 3];
    let mut decoder = OtapDecoder::new(signal);
    let mut rest = &data[1..];
    let mut failed = false;
    while rest.len() >= 4 {
        let len = u32::from_le_bytes(rest[..4].try_into().unwrap()) as usize;
        let Some(message) = rest.get(4..4 + len) else {
            break;
        };
        rest = &rest[4 + len..];
        let Ok(bar) = BatchArrowRecords::decode(message) else {
            break;
        };
        if decoder.decode(&bar).is_err() {
            failed = true;
            break;
        }
    }
    assert!(failed, "the malformed stream should be refused");
    let mut fresh = OtapDecoder::new(signal);
    for bar in valid_stream(signal) {
        fresh.decode(&bar).unwrap();
    }
}

fn valid_stream(signal: Signal) -> Vec<BatchArrowRecords> {
    let mut data = DataGen::new(4);
    let mut encoder = OtapEncoder::new(signal, EncodeOptions::default()).unwrap();
    (0..2)
        .map(|_| {
            let request = match signal {
                Signal::Logs => data.logs(30).encode_to_vec(),
                Signal::Traces => data.traces(30).encode_to_vec(),
                Signal::Metrics => data.metrics(30).encode_to_vec(),
            };
            encoder
                .encode(&penstock_engine::otlp::decode::decode(signal, &request).unwrap()[0])
                .unwrap()
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Scenario: arbitrary bytes given to the OTLP decoders.
    /// Guarantees: an error or a batch, never a panic.
    #[test]
    fn arbitrary_otlp_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        for signal in Signal::ALL {
            let _ = penstock_engine::otlp::decode::decode(signal, &bytes);
        }
    }

    /// Scenario: valid OTLP requests with one byte changed.
    /// Guarantees: an error or a batch, never a panic.
    #[test]
    fn mutated_otlp_never_panics(position in any::<prop::sample::Index>(), byte in any::<u8>()) {
        for signal in Signal::ALL {
            let mut bytes = sample(signal);
            let at = position.index(bytes.len());
            bytes[at] = byte;
            let _ = penstock_engine::otlp::decode::decode(signal, &bytes);
        }
    }

    /// Scenario: a valid OTAP stream with one byte of one payload changed, or a payload cut.
    /// Guarantees: an error or a batch, never a panic.
    #[test]
    fn mutated_otap_never_panics(
        which in any::<prop::sample::Index>(),
        position in any::<prop::sample::Index>(),
        byte in any::<u8>(),
        cut in any::<bool>(),
    ) {
        for signal in Signal::ALL {
            let mut stream = valid_stream(signal);
            let target = &mut stream[1];
            let index = which.index(target.arrow_payloads.len());
            let mut record = target.arrow_payloads[index].record.to_vec();
            let at = position.index(record.len());
            if cut { record.truncate(at) } else { record[at] = byte }
            target.arrow_payloads[index].record = Bytes::from(record);
            let mut decoder = OtapDecoder::new(signal);
            for bar in &stream {
                if decoder.decode(bar).is_err() {
                    break;
                }
            }
        }
    }
}
