//! Pass-through against decoding: a stream forwarded as received (key renames applied to its
//! dictionaries) decodes to exactly what decoding, renaming and re-encoding gives, however
//! the output streams are opened, broken and retried.

use arrow::array::Array;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use proptest::prelude::*;
use prost::Message;

use super::keys::renamed;
use super::{Forwarder, KeyRenames, Sent};
use crate::datagen::DataGen;
use crate::otap::{EncodeOptions, OtapDecoder, OtapEncoder};
use crate::proto::BatchArrowRecords;
use crate::schema::{PayloadType, Signal};
use crate::{OtapBatch, equiv, otlp};

/// Requests of one signal, as OTLP bytes.
pub(super) fn requests(signal: Signal, seed: u64, sizes: &[usize]) -> Vec<Vec<u8>> {
    let mut generator = DataGen::new(seed);
    sizes
        .iter()
        .map(|&n| match (signal, n) {
            (Signal::Logs, 0) => generator.edge_cases().0.encode_to_vec(),
            (Signal::Traces, 0) => generator.edge_cases().1.encode_to_vec(),
            (Signal::Metrics, 0) => generator.edge_cases().2.encode_to_vec(),
            (Signal::Logs, n) => generator.logs(n).encode_to_vec(),
            (Signal::Traces, n) => generator.traces(n).encode_to_vec(),
            (Signal::Metrics, n) => generator.metrics(n).encode_to_vec(),
        })
        .collect()
}

/// The OTAP stream a sender would make of the requests.
pub(super) fn stream(signal: Signal, requests: &[Vec<u8>]) -> Vec<BatchArrowRecords> {
    let mut encoder = OtapEncoder::new(signal, EncodeOptions::default()).unwrap();
    requests
        .iter()
        .flat_map(|r| otlp::decode::decode(signal, r).unwrap())
        .map(|b| encoder.encode(&b).unwrap())
        .collect()
}

fn rename_keys(attributes: &mut [KeyValue], pairs: &[(String, String)]) {
    for kv in attributes {
        kv.key = renamed(&kv.key, pairs).to_string();
    }
}

/// What a batch means, renamed as `renames` says, in a form that compares.
pub(super) fn meaning(batch: &OtapBatch, renames: &KeyRenames) -> Vec<String> {
    let bytes = otlp::encode::encode(batch).unwrap();
    let resource = renames.of(PayloadType::ResourceAttrs);
    match batch.signal() {
        Signal::Logs => {
            let mut r = ExportLogsServiceRequest::decode(bytes.as_slice()).unwrap();
            for rl in &mut r.resource_logs {
                if let Some(res) = rl.resource.as_mut() {
                    rename_keys(&mut res.attributes, resource);
                }
                for sl in &mut rl.scope_logs {
                    for log in &mut sl.log_records {
                        rename_keys(&mut log.attributes, renames.of(PayloadType::LogAttrs));
                    }
                }
            }
            equiv::logs(&r)
        }
        Signal::Traces => {
            let mut r = ExportTraceServiceRequest::decode(bytes.as_slice()).unwrap();
            for rs in &mut r.resource_spans {
                if let Some(res) = rs.resource.as_mut() {
                    rename_keys(&mut res.attributes, resource);
                }
                for ss in &mut rs.scope_spans {
                    for span in &mut ss.spans {
                        rename_keys(&mut span.attributes, renames.of(PayloadType::SpanAttrs));
                    }
                }
            }
            equiv::traces(&r)
        }
        Signal::Metrics => {
            let mut r = ExportMetricsServiceRequest::decode(bytes.as_slice()).unwrap();
            for rm in &mut r.resource_metrics {
                if let Some(res) = rm.resource.as_mut() {
                    rename_keys(&mut res.attributes, resource);
                }
            }
            equiv::metrics(&r)
        }
    }
}

/// The first key of each attribute table the renames may touch, to rename into `to`.
pub(super) fn renames_for(signal: Signal, first: &OtapBatch, to: &str) -> KeyRenames {
    let mut renames = KeyRenames::default();
    let tables = match signal {
        Signal::Logs => [PayloadType::ResourceAttrs, PayloadType::LogAttrs],
        Signal::Traces => [PayloadType::ResourceAttrs, PayloadType::SpanAttrs],
        Signal::Metrics => [PayloadType::ResourceAttrs, PayloadType::ResourceAttrs],
    };
    for table in tables {
        let Some(attrs) = first.get(table) else {
            continue;
        };
        let keys = arrow::compute::cast(
            attrs.column_by_name("key").unwrap(),
            &arrow::datatypes::DataType::Utf8,
        )
        .unwrap();
        let keys = arrow::array::AsArray::as_string::<i32>(&keys);
        if !renames.of(table).is_empty() || keys.is_empty() {
            continue;
        }
        renames.add(table, keys.value(0), &format!("{to}.{}", table as i32));
    }
    renames
}

/// Runs a stream both ways and compares, batch by batch. `breaks`: after which batches the
/// output stream breaks (the receiver starts afresh and the batch before is sent again).
fn check(signal: Signal, bars: &[BatchArrowRecords], renames: &KeyRenames, breaks: &[usize]) {
    let mut plain = OtapDecoder::new(signal);
    let mut forwarding = OtapDecoder::new(signal);
    forwarding.enable_forwarding(64 << 20);
    let mut forwarder = Forwarder::default();
    let mut receiver = OtapDecoder::new(signal);
    let mut sent = Sent::default();
    let mut placed_before = None;
    let mut seeded = true;
    for (i, bar) in bars.iter().enumerate() {
        let expected = meaning(&plain.decode(bar).unwrap(), renames);
        // After a batch was decoded instead, forwarding resumes on a new output stream whose
        // forwarding state starts from what was sent so far, when the renames can be made.
        if !seeded && let Some(seed) = forwarding.seed(&[renames]).unwrap() {
            forwarder = Forwarder::default();
            drop(forwarder.place(&seed[0]));
            receiver = OtapDecoder::new(signal);
            sent = Sent::default();
            placed_before = None;
            seeded = true;
        }
        let forwarded = match seeded {
            true => forwarding.forward(bar, &[renames]).unwrap(),
            false => None,
        };
        let Some(forwarded) = forwarded else {
            // Decoded instead: what comes out is the decoded batch.
            let decoded = forwarding.decode(bar).unwrap();
            assert_eq!(
                meaning(&decoded, &KeyRenames::default()).len(),
                expected.len()
            );
            seeded = false;
            continue;
        };
        let raw = &forwarded.outputs[0];
        if breaks.contains(&i) {
            receiver = OtapDecoder::new(signal);
            sent = Sent::default();
            // The previous batch goes again first, on the fresh stream.
            if let Some((previous_raw, previous_placed, previous_expected)) = placed_before.take() {
                let frame = forwarder
                    .frame(&previous_raw, &previous_placed, &mut sent, -1)
                    .expect("a fresh stream takes any batch of the current IPC streams");
                let again = receiver.decode(&frame.to_message()).unwrap();
                assert_eq!(meaning(&again, &KeyRenames::default()), previous_expected);
            }
        }
        let placed = forwarder.place(raw);
        let frame = forwarder
            .frame(raw, &placed, &mut sent, i as i64)
            .expect("in order, a batch always frames");
        let actual = meaning(
            &receiver.decode(&frame.to_message()).unwrap(),
            &KeyRenames::default(),
        );
        if let Some(diff) = equiv::first_difference(&expected, &actual) {
            panic!("batch {i} of {signal:?}: {diff}");
        }
        // The previous batch sent again on the same stream, after this one (a retry): its
        // dictionaries are there already.
        if let Some((previous_raw, previous_placed, previous_expected)) = &placed_before
            && let Some(frame) = forwarder.frame(previous_raw, previous_placed, &mut sent, -2)
        {
            let again = receiver.decode(&frame.to_message()).unwrap();
            assert_eq!(&meaning(&again, &KeyRenames::default()), previous_expected);
        }
        placed_before = Some((raw.clone(), placed, expected));
    }
}

#[test]
fn untouched_batches_go_on_as_received() {
    let bars = stream(Signal::Logs, &requests(Signal::Logs, 1, &[50, 80, 0, 120]));
    let mut decoder = OtapDecoder::new(Signal::Logs);
    decoder.enable_forwarding(64 << 20);
    for bar in &bars {
        let forwarded = decoder
            .forward(bar, &[&KeyRenames::default()])
            .unwrap()
            .unwrap();
        let out = &forwarded.outputs[0];
        for (payload, original) in out.payloads.iter().zip(&bar.arrow_payloads) {
            let bytes: Vec<u8> = payload
                .messages
                .iter()
                .flat_map(|m| m.bytes.to_vec())
                .collect();
            assert_eq!(bytes, original.record.to_vec(), "{:?}", payload.table);
        }
    }
    check(Signal::Logs, &bars, &KeyRenames::default(), &[]);
}

#[test]
fn a_rename_rewrites_only_the_key_dictionary() {
    let bars = stream(Signal::Logs, &requests(Signal::Logs, 2, &[200, 300, 100]));
    let first = OtapDecoder::new(Signal::Logs).decode(&bars[0]).unwrap();
    let renames = renames_for(Signal::Logs, &first, "renamed");
    assert!(!renames.is_empty());
    let mut decoder = OtapDecoder::new(Signal::Logs);
    decoder.enable_forwarding(64 << 20);
    let out = decoder.forward(&bars[0], &[&renames]).unwrap().unwrap();
    for (payload, original) in out.outputs[0].payloads.iter().zip(&bars[0].arrow_payloads) {
        let records = payload.records().unwrap();
        assert!(
            original.record.ends_with(&records.bytes),
            "record batch moved"
        );
        let bytes: Vec<u8> = payload
            .messages
            .iter()
            .flat_map(|m| m.bytes.to_vec())
            .collect();
        let renamed = !renames.of(payload.table).is_empty();
        assert_eq!(
            bytes != original.record.to_vec(),
            renamed,
            "{:?}",
            payload.table
        );
    }
    check(Signal::Logs, &bars, &renames, &[]);
}

#[test]
fn a_rename_onto_an_existing_key_falls_back_to_decoding() {
    let bars = stream(Signal::Logs, &requests(Signal::Logs, 3, &[200, 200]));
    let first = OtapDecoder::new(Signal::Logs).decode(&bars[0]).unwrap();
    let attrs = first.get(PayloadType::LogAttrs).unwrap();
    let keys = arrow::compute::cast(
        attrs.column_by_name("key").unwrap(),
        &arrow::datatypes::DataType::Utf8,
    )
    .unwrap();
    let keys = arrow::array::AsArray::as_string::<i32>(&keys);
    let other = (0..keys.len())
        .map(|i| keys.value(i))
        .find(|k| *k != keys.value(0))
        .unwrap();
    let mut renames = KeyRenames::default();
    renames.add(PayloadType::LogAttrs, keys.value(0), other);
    let mut decoder = OtapDecoder::new(Signal::Logs);
    decoder.enable_forwarding(64 << 20);
    assert!(decoder.forward(&bars[0], &[&renames]).unwrap().is_none());
    assert!(matches!(
        decoder.fallback(),
        Some(super::Fallback::RenameMergesKeys(PayloadType::LogAttrs))
    ));
    // Decoded instead, state intact.
    let mut plain = OtapDecoder::new(Signal::Logs);
    for bar in &bars {
        let expected = meaning(&plain.decode(bar).unwrap(), &KeyRenames::default());
        let actual = meaning(&decoder.decode(bar).unwrap(), &KeyRenames::default());
        assert_eq!(expected, actual);
    }
    // A later batch whose renames could be made would be forwarded again.
    assert!(decoder.forwarding());
}

#[test]
fn decoding_after_forwarding_replays_the_stream_state() {
    let bars = stream(
        Signal::Traces,
        &requests(Signal::Traces, 4, &[100, 150, 90]),
    );
    let mut plain = OtapDecoder::new(Signal::Traces);
    let mut decoder = OtapDecoder::new(Signal::Traces);
    decoder.enable_forwarding(64 << 20);
    let none = KeyRenames::default();
    plain.decode(&bars[0]).unwrap();
    assert!(decoder.forward(&bars[0], &[&none]).unwrap().is_some());
    for bar in &bars[1..] {
        let expected = meaning(&plain.decode(bar).unwrap(), &none);
        assert_eq!(meaning(&decoder.decode(bar).unwrap(), &none), expected);
    }
}

#[test]
fn state_past_the_bound_falls_back_to_decoding() {
    let bars = stream(Signal::Logs, &requests(Signal::Logs, 5, &[100, 100]));
    let mut decoder = OtapDecoder::new(Signal::Logs);
    decoder.enable_forwarding(64);
    assert!(
        decoder
            .forward(&bars[0], &[&KeyRenames::default()])
            .unwrap()
            .is_none()
    );
    assert!(decoder.decode(&bars[0]).is_ok());
}

#[test]
fn malformed_payloads_are_refused() {
    let mut bars = stream(Signal::Logs, &requests(Signal::Logs, 6, &[50]));
    let mut decoder = OtapDecoder::new(Signal::Logs);
    decoder.enable_forwarding(64 << 20);
    let record = &mut bars[0].arrow_payloads[0].record;
    *record = record.slice(..record.len() / 2);
    assert!(
        decoder
            .forward(&bars[0], &[&KeyRenames::default()])
            .is_err()
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Every signal, with schema changes (edge-case batches between ordinary ones),
    /// dictionary deltas, key renames, and output streams that break and start afresh.
    #[test]
    fn forwarding_decodes_to_what_decoding_gives(
        seed in 0u64..1000,
        signal in prop_oneof![Just(Signal::Logs), Just(Signal::Traces), Just(Signal::Metrics)],
        sizes in proptest::collection::vec(prop_oneof![Just(0usize), 1usize..400], 2..7),
        rename in any::<bool>(),
        breaks in proptest::collection::vec(0usize..7, 0..3),
    ) {
        let bars = stream(signal, &requests(signal, seed, &sizes));
        let first = OtapDecoder::new(signal).decode(&bars[0]).unwrap();
        let renames = match rename {
            true => renames_for(signal, &first, "renamed"),
            false => KeyRenames::default(),
        };
        check(signal, &bars, &renames, &breaks);
    }
}

/// Batches placed well before they are framed (they wait in queues), across schema changes:
/// every one still frames, on a fresh output stream when the current one moved on.
#[test]
fn batches_placed_before_a_schema_change_still_go() {
    let sizes = [120, 0, 200, 0, 90, 300];
    let bars = stream(Signal::Logs, &requests(Signal::Logs, 8, &sizes));
    let none = KeyRenames::default();
    let mut plain = OtapDecoder::new(Signal::Logs);
    let mut decoder = OtapDecoder::new(Signal::Logs);
    decoder.enable_forwarding(64 << 20);
    let mut forwarder = Forwarder::default();
    let mut placed = Vec::new();
    for bar in &bars {
        let expected = meaning(&plain.decode(bar).unwrap(), &none);
        let raw = decoder
            .forward(bar, &[&none])
            .unwrap()
            .unwrap()
            .outputs
            .remove(0);
        let at = forwarder.place(&raw);
        placed.push((raw, at, expected));
    }
    // In order on one stream, then backwards, a fresh stream whenever one refuses.
    for (backwards, order) in [
        (false, (0..placed.len()).collect::<Vec<_>>()),
        (true, (0..placed.len()).rev().collect()),
    ] {
        let mut receiver = OtapDecoder::new(Signal::Logs);
        let mut sent = Sent::default();
        let mut fresh_streams = 0;
        for i in order {
            let (raw, at, expected) = &placed[i];
            let frame = match forwarder.frame(raw, at, &mut sent, i as i64) {
                Some(frame) => frame,
                None => {
                    fresh_streams += 1;
                    receiver = OtapDecoder::new(Signal::Logs);
                    sent = Sent::default();
                    forwarder.frame(raw, at, &mut sent, i as i64).unwrap()
                }
            };
            let got = meaning(&receiver.decode(&frame.to_message()).unwrap(), &none);
            assert_eq!(&got, expected, "batch {i}");
        }
        // Forwards, one stream takes them all; backwards, each schema change back needs a
        // fresh one.
        assert_eq!(fresh_streams > 0, backwards);
    }
    assert!(forwarder.memory() > 0);
    drop(placed);
    // Once no batch is left, the retired IPC streams go at the next batch.
    let kept = forwarder.memory();
    let bars = stream(Signal::Logs, &requests(Signal::Logs, 9, &[10]));
    let mut decoder = OtapDecoder::new(Signal::Logs);
    decoder.enable_forwarding(64 << 20);
    let raw = decoder
        .forward(&bars[0], &[&none])
        .unwrap()
        .unwrap()
        .outputs
        .remove(0);
    forwarder.place(&raw);
    assert!(forwarder.memory() < kept + raw.size());
}

/// `record` (an OTAP payload) with the first zstd buffer of its record batch declaring one
/// byte more than its frame holds (framing and declared sizes still pass the prescan); where
/// the buffer starts, and the size it declared.
pub(super) fn overdeclared(record: &bytes::Bytes) -> (Vec<u8>, usize, i64) {
    let messages = super::ipc::split(record).unwrap();
    let records = messages.last().unwrap();
    let body_start = record.len() - records.body().len();
    let meta = records.message().unwrap();
    let buffer = meta
        .header_as_record_batch()
        .unwrap()
        .buffers()
        .unwrap()
        .iter()
        .find(|b| b.length() > 8)
        .unwrap();
    let at = body_start + buffer.offset() as usize;
    let mut damaged = record.to_vec();
    let declared = i64::from_le_bytes(damaged[at..at + 8].try_into().unwrap());
    assert!(declared > 0, "a compressed buffer");
    damaged[at..at + 8].copy_from_slice(&(declared + 1).to_le_bytes());
    (damaged, at, declared)
}

#[test]
fn a_dictionary_sent_whole_again_is_kept_once_on_both_sides() {
    // A sender that sends its dictionaries whole again with every batch.
    let requests = requests(Signal::Logs, 3, &[64; 40]);
    let mut encoder = OtapEncoder::new(Signal::Logs, EncodeOptions::default())
        .unwrap()
        .resending_dictionaries();
    let bars: Vec<BatchArrowRecords> = requests
        .iter()
        .flat_map(|r| otlp::decode::decode(Signal::Logs, r).unwrap())
        .map(|b| encoder.encode(&b).unwrap())
        .collect();
    let replacements = bars[1..]
        .iter()
        .flat_map(|bar| &bar.arrow_payloads)
        .flat_map(|payload| super::ipc::split(&payload.record).unwrap())
        .filter(|m| matches!(m.kind, super::MessageKind::Dictionary { delta: false, .. }))
        .count();
    assert!(
        replacements > 40,
        "{replacements} dictionaries sent whole again"
    );
    let mut decoder = OtapDecoder::new(Signal::Logs);
    decoder.enable_forwarding(64 << 20);
    let mut forwarder = Forwarder::default();
    let renames = KeyRenames::default();
    // Per table: its IPC stream, its schema's bytes and each dictionary's live bytes.
    let mut live: std::collections::HashMap<
        i32,
        (String, usize, std::collections::HashMap<i64, usize>),
    > = Default::default();
    let mut sent = 0;
    for (i, bar) in bars.iter().enumerate() {
        for payload in &bar.arrow_payloads {
            let table = live.entry(payload.r#type).or_default();
            for m in super::ipc::split(&payload.record).unwrap() {
                let bytes = m.bytes.len();
                match m.kind {
                    super::MessageKind::Schema => {
                        *table = (payload.schema_id.clone(), bytes, Default::default())
                    }
                    super::MessageKind::Dictionary { id, delta: true } => {
                        *table.2.entry(id).or_default() += bytes
                    }
                    super::MessageKind::Dictionary { id, delta: false } => {
                        table.2.insert(id, bytes);
                    }
                    super::MessageKind::Records { .. } => continue,
                }
                sent += bytes;
            }
        }
        let needed: usize = live
            .values()
            .map(|(_, schema, dictionaries)| schema + dictionaries.values().sum::<usize>())
            .sum();
        let forwarded = decoder.forward(bar, &[&renames]).unwrap().unwrap();
        // Batches settle one after another.
        let placed = forwarder.place(&forwarded.outputs[0]);
        assert_eq!(
            decoder.state_memory(),
            needed,
            "batch {i}: the receiving side"
        );
        assert_eq!(forwarder.memory(), needed, "batch {i}: the sending side");
        drop(placed);
        // Kept whole, the messages sent so far would take many times that.
        if i == bars.len() - 1 {
            assert!(sent > 10 * needed, "{sent} bytes sent, {needed} needed");
        }
    }
    // And what is forwarded still decodes to what was sent, output streams broken or not.
    let first = OtapDecoder::new(Signal::Logs).decode(&bars[0]).unwrap();
    check(
        Signal::Logs,
        &bars,
        &renames_for(Signal::Logs, &first, "x"),
        &[3, 20, 21],
    );
}

#[test]
fn batches_decoded_in_between_leave_the_next_ones_to_be_forwarded() {
    // As when a live query watches the stream for a while: some batches are decoded instead
    // of forwarded (each alone); forwarding resumes on a new output stream whose forwarding
    // state starts from what the stream sent so far.
    let sizes: Vec<usize> = (0..24).map(|i| 20 + 13 * i).collect();
    let bars = stream(Signal::Logs, &requests(Signal::Logs, 4, &sizes));
    let first = OtapDecoder::new(Signal::Logs).decode(&bars[0]).unwrap();
    let renames = renames_for(Signal::Logs, &first, "x");
    let mut plain = OtapDecoder::new(Signal::Logs);
    let mut forwarding = OtapDecoder::new(Signal::Logs);
    forwarding.enable_forwarding(64 << 20);
    let mut forwarder: Option<Forwarder> = None;
    let mut receiver = OtapDecoder::new(Signal::Logs);
    let mut sent = Sent::default();
    for (i, bar) in bars.iter().enumerate() {
        let expected = meaning(&plain.decode(bar).unwrap(), &renames);
        let actual = if [3, 4, 9, 15, 16, 17].contains(&i) {
            forwarder = None;
            meaning(&forwarding.decode(bar).unwrap(), &renames)
        } else {
            let forwarder = forwarder.get_or_insert_with(|| {
                let seed = forwarding.seed(&[&renames]).unwrap().unwrap();
                let mut fresh = Forwarder::default();
                drop(fresh.place(&seed[0]));
                receiver = OtapDecoder::new(Signal::Logs);
                sent = Sent::default();
                fresh
            });
            let forwarded = forwarding.forward(bar, &[&renames]).unwrap().unwrap();
            let placed = forwarder.place(&forwarded.outputs[0]);
            let frame = forwarder.frame(&forwarded.outputs[0], &placed, &mut sent, i as i64);
            meaning(
                &receiver.decode(&frame.unwrap().to_message()).unwrap(),
                &KeyRenames::default(),
            )
        };
        if let Some(diff) = equiv::first_difference(&expected, &actual) {
            panic!("batch {i}: {diff}");
        }
    }
}
