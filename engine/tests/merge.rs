//! Concatenating batches ([`Concat`]): every record keeps its resource, scope, attributes and
//! children, whatever mix of column encodings the batches arrive in.

#![allow(clippy::unwrap_used)]

mod common;

use penstock_engine::datagen::DataGen;
use penstock_engine::merge::Concat;
use penstock_engine::otap::{EncodeOptions, OtapDecoder, OtapEncoder};
use penstock_engine::proto::BatchArrowRecords;
use std::sync::Arc;

use arrow::array::{
    Array, DictionaryArray, FixedSizeBinaryArray, RecordBatch, StringArray, UInt8Array,
};
use arrow::datatypes::UInt8Type;
use penstock_engine::{OtapBatch, PayloadType, Signal, equiv};
use prost::Message;

fn request(data: &mut DataGen, signal: Signal, items: usize) -> Vec<u8> {
    match signal {
        Signal::Logs => data.logs(items).encode_to_vec(),
        Signal::Traces => data.traces(items).encode_to_vec(),
        Signal::Metrics => data.metrics(items).encode_to_vec(),
    }
}

fn edge_request(signal: Signal) -> Vec<u8> {
    let (logs, traces, metrics) = DataGen::new(11).edge_cases();
    match signal {
        Signal::Logs => logs.encode_to_vec(),
        Signal::Traces => traces.encode_to_vec(),
        Signal::Metrics => metrics.encode_to_vec(),
    }
}

/// `batches` sent over one OTAP stream and decoded, as a gateway receives them: dictionary
/// columns, tables in transport order.
fn via_otap(signal: Signal, batches: &[OtapBatch]) -> Vec<OtapBatch> {
    let options = EncodeOptions {
        metric_metadata: true,
        ..EncodeOptions::default()
    };
    let mut encoder = OtapEncoder::new(signal, options).unwrap();
    let mut decoder = OtapDecoder::new(signal);
    batches
        .iter()
        .map(|b| {
            let bar = encoder.encode(b).unwrap();
            let bar = BatchArrowRecords::decode(bar.encode_to_vec().as_slice()).unwrap();
            decoder.decode(&bar).unwrap()
        })
        .collect()
}

/// Scenario: per signal, batches decoded from OTLP (native columns) and from OTAP (dictionary
/// columns), including odd values, are concatenated, then sent over an OTAP stream.
/// Guarantees: the merged batch holds exactly the records of its parts, before and after the
/// stream.
#[test]
fn merged_batches_keep_every_record() {
    for signal in Signal::ALL {
        let mut data = DataGen::new(21);
        let requests = [
            request(&mut data, signal, 300),
            edge_request(signal),
            request(&mut data, signal, 1000),
            request(&mut data, signal, 1),
        ];
        let mut expected: Vec<String> = requests
            .iter()
            .flat_map(|r| common::canonical(signal, r))
            .collect();
        expected.sort();
        let mut parts = Vec::new();
        for (i, bytes) in requests.iter().enumerate() {
            let decoded = penstock_engine::otlp::decode::decode(signal, bytes).unwrap();
            parts.extend(if i % 2 == 0 {
                via_otap(signal, &decoded)
            } else {
                decoded
            });
        }
        let count = parts.len();
        let mut concat = Concat::new(signal);
        for part in parts {
            assert!(
                concat.push(part).is_ok(),
                "{signal}: a small batch was refused"
            );
        }
        assert_eq!(concat.len(), count);
        let merged = concat.finish().unwrap();
        let lines = common::otlp_lines(std::slice::from_ref(&merged));
        if let Some(diff) = equiv::first_difference(&expected, &lines) {
            panic!("{signal}: merged batch differs: {diff}");
        }
        let relayed = via_otap(signal, &[merged]);
        if let Some(diff) = equiv::first_difference(&expected, &common::otlp_lines(&relayed)) {
            panic!("{signal}: merged batch differs after an OTAP stream: {diff}");
        }
    }
}

/// Scenario: two batches of 33,000 log records each (their 16-bit record ids cannot share one
/// batch), and a batch of another signal.
/// Guarantees: both are handed back unchanged rather than merged with renumbered ids that
/// would overflow.
#[test]
fn batches_whose_ids_do_not_fit_are_handed_back() {
    let mut data = DataGen::new(4);
    let first =
        penstock_engine::otlp::decode::decode(Signal::Logs, &data.logs(33_000).encode_to_vec())
            .unwrap();
    let second =
        penstock_engine::otlp::decode::decode(Signal::Logs, &data.logs(33_000).encode_to_vec())
            .unwrap();
    let spans =
        penstock_engine::otlp::decode::decode(Signal::Traces, &data.traces(10).encode_to_vec())
            .unwrap();
    let mut concat = Concat::new(Signal::Logs);
    for batch in first {
        assert!(concat.push(batch).is_ok());
    }
    for batch in second {
        let back = concat.push(batch).expect_err("ids past 65,535");
        assert_eq!(back.num_items(), 33_000);
    }
    for batch in spans {
        assert_eq!(
            concat.push(batch).expect_err("another signal").signal(),
            Signal::Traces
        );
    }
    assert_eq!(concat.num_items(), 33_000);
    assert_eq!(concat.finish().unwrap().num_items(), 33_000);
}

/// A logs batch with only a `severity_text` column: an 8-bit-key dictionary of 200 values
/// `{prefix}0`..`{prefix}199`, rows in the order of `keys`.
fn severity_batch(prefix: &str, keys: impl Iterator<Item = u8>) -> OtapBatch {
    let values: Vec<String> = (0..200).map(|i| format!("{prefix}{i}")).collect();
    let keys = UInt8Array::from_iter_values(keys);
    let column =
        DictionaryArray::<UInt8Type>::try_new(keys, Arc::new(StringArray::from(values))).unwrap();
    let table = RecordBatch::try_from_iter([("severity_text", Arc::new(column) as _)]).unwrap();
    let mut batch = OtapBatch::new(Signal::Logs);
    batch.set(PayloadType::Logs, table).unwrap();
    batch
}

/// The `severity_text` column of two batches merged, and its values as plain strings.
fn merged_severity(a: OtapBatch, b: OtapBatch) -> (arrow::array::ArrayRef, StringArray) {
    let mut concat = Concat::new(Signal::Logs);
    concat.push(a).unwrap();
    concat.push(b).unwrap();
    let merged = concat.finish().unwrap();
    let column = Arc::clone(
        merged
            .root()
            .unwrap()
            .column_by_name("severity_text")
            .unwrap(),
    );
    let plain = arrow::compute::cast(&column, &arrow::datatypes::DataType::Utf8).unwrap();
    let plain = plain
        .as_any()
        .downcast_ref::<StringArray>()
        .unwrap()
        .clone();
    (column, plain)
}

/// Scenario: two batches whose `severity_text` columns are separate 8-bit-key dictionaries of
/// the same 200 values (together more entries than 8-bit keys can address, but not more
/// distinct values).
/// Guarantees: the merged column is still an 8-bit-key dictionary (its values merged), and
/// every row keeps its value.
#[test]
fn overlapping_dictionaries_stay_dictionaries() {
    let part = || severity_batch("v", (0..200).rev());
    let (column, plain) = merged_severity(part(), part());
    let dictionary = column
        .as_any()
        .downcast_ref::<DictionaryArray<UInt8Type>>()
        .expect("still an 8-bit-key dictionary");
    // Merging removes repeats on a best-effort basis (hash buckets): far fewer than the 400
    // entries of the parts.
    assert!(dictionary.values().len() < 256);
    assert_eq!(plain.len(), 400);
    assert_eq!(plain.value(0), "v199");
    assert_eq!(plain.value(200), "v199");
    assert_eq!(plain.value(399), "v0");
}

/// Scenario: two batches whose `severity_text` columns are 8-bit-key dictionaries of 200
/// distinct values each (together more than 8-bit keys can address).
/// Guarantees: they concatenate, every row keeping its value.
#[test]
fn dictionaries_too_big_to_merge_become_plain_values() {
    let (_, plain) = merged_severity(severity_batch("a", 0..200), severity_batch("b", 0..200));
    assert_eq!(plain.len(), 400);
    assert_eq!(plain.value(0), "a0");
    assert_eq!(plain.value(399), "b199");
}

/// Scenario: two batches whose `severity_text` columns share one 8-bit-key dictionary of 200
/// values (as the halves of a split batch do): together more entries than 8-bit keys can
/// address if the values were copied side by side.
/// Guarantees: the merged column keeps the one shared dictionary, every row its value.
#[test]
fn batches_sharing_one_dictionary_keep_it() {
    let shared = severity_batch("s", 0..200);
    let column = Arc::clone(
        shared
            .root()
            .unwrap()
            .column_by_name("severity_text")
            .unwrap(),
    );
    let dictionary = column
        .as_any()
        .downcast_ref::<DictionaryArray<UInt8Type>>()
        .unwrap();
    let reversed = UInt8Array::from_iter_values((0..200).rev());
    let other =
        DictionaryArray::<UInt8Type>::try_new(reversed, Arc::clone(dictionary.values())).unwrap();
    let table = RecordBatch::try_from_iter([("severity_text", Arc::new(other) as _)]).unwrap();
    let mut second = OtapBatch::new(Signal::Logs);
    second.set(PayloadType::Logs, table).unwrap();
    let (merged, plain) = merged_severity(shared, second);
    let merged = merged
        .as_any()
        .downcast_ref::<DictionaryArray<UInt8Type>>()
        .expect("still an 8-bit-key dictionary");
    assert_eq!(merged.values().len(), 200);
    assert_eq!(plain.len(), 400);
    assert_eq!(plain.value(0), "s0");
    assert_eq!(plain.value(200), "s199");
    assert_eq!(plain.value(399), "s0");
}

/// Scenario: two batches whose `trace_id` columns are 8-bit-key dictionaries of 200 distinct
/// 16-byte ids each (values Arrow does not merge; together more than 8-bit keys can address).
/// Guarantees: they concatenate as plain ids, every row keeping its id, without a panic.
#[test]
fn fixed_size_dictionaries_too_big_to_join_become_plain_values() {
    let ids_batch = |first: u8| {
        let ids: Vec<[u8; 16]> = (0..200u8)
            .map(|i| [first, i, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1])
            .collect();
        let values = FixedSizeBinaryArray::try_from_iter(ids.into_iter()).unwrap();
        let keys = UInt8Array::from_iter_values(0..200);
        let column = DictionaryArray::<UInt8Type>::try_new(keys, Arc::new(values)).unwrap();
        let table = RecordBatch::try_from_iter([("trace_id", Arc::new(column) as _)]).unwrap();
        let mut batch = OtapBatch::new(Signal::Logs);
        batch.set(PayloadType::Logs, table).unwrap();
        batch
    };
    let mut concat = Concat::new(Signal::Logs);
    concat.push(ids_batch(1)).unwrap();
    concat.push(ids_batch(2)).unwrap();
    let merged = concat.finish().unwrap();
    let column = merged.root().unwrap().column_by_name("trace_id").unwrap();
    let plain =
        arrow::compute::cast(column, &arrow::datatypes::DataType::FixedSizeBinary(16)).unwrap();
    let plain = plain
        .as_any()
        .downcast_ref::<FixedSizeBinaryArray>()
        .unwrap();
    assert_eq!(plain.len(), 400);
    assert_eq!(plain.value(0)[..2], [1, 0]);
    assert_eq!(plain.value(399)[..2], [2, 199]);
}
