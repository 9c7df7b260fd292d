//! Forwarded batches with rows removed decode, at the receiver, to exactly what removing the
//! rows from the decoded batch and encoding it again gives.

use arrow::array::{BooleanArray, RecordBatch};
use arrow::compute::filter_record_batch;
use std::sync::Arc;

use arrow::datatypes::{Field, Schema, SchemaRef};
use proptest::prelude::*;

use super::tests::{meaning, renames_for, requests, stream};
use super::{DecodedAsSent, Forwarder, KeyRenames, RawBatch, Sent};
use crate::OtapBatch;
use crate::equiv;
use crate::otap::{OtapDecoder, Reads};
use crate::proto::BatchArrowRecords;
use crate::schema::consts::{self, ENCODING_METADATA};
use crate::schema::{PayloadType, Signal};

/// The root rows a pipeline keeps: none, all, or those `pick` chooses.
#[derive(Debug, Clone, Copy)]
enum Keep {
    None,
    All,
    Some(u64),
}

fn keep_root(batch: &OtapBatch, keep: Keep) -> RecordBatch {
    let root = batch.root().unwrap();
    let mask: BooleanArray = (0..root.num_rows() as u64)
        .map(|row| {
            Some(match keep {
                Keep::None => false,
                Keep::All => true,
                Keep::Some(seed) => (row.wrapping_mul(2_654_435_761) ^ seed) % 3 != 0,
            })
        })
        .collect();
    filter_record_batch(root, &mask).unwrap()
}

/// What a pipeline reads: everything, one column of the root table, or that and one
/// attribute table.
fn reads_of(signal: Signal, which: u8) -> Reads {
    let (column, attrs) = match signal {
        Signal::Traces => ("name", PayloadType::SpanAttrs),
        _ => ("severity_number", PayloadType::LogAttrs),
    };
    let mut reads = Reads::default();
    match which {
        0 => return Reads::everything(),
        1 => reads.column(signal.root(), column),
        _ => {
            reads.column(signal.root(), column);
            reads.whole(attrs);
        }
    }
    reads
}

/// `raw` with the rows a pipeline left of `decoded` (`kept`: its root rows as the pipeline
/// gave them, in the columns it read), decoding the rest of the batch when rows went.
fn narrowed(raw: &RawBatch, decoded: &DecodedAsSent, kept: &RecordBatch) -> Option<RawBatch> {
    let root = decoded.batch.root().unwrap();
    if root.num_rows() == kept.num_rows() || decoded.is_whole() {
        return raw.narrowed(decoded, kept).unwrap();
    }
    let whole = decoded.whole().unwrap();
    let rows = decoded
        .root_rows_kept(&whole, kept)
        .unwrap()
        .expect("rows named by id");
    raw.narrowed(&whole, &rows).unwrap()
}

/// Forwards `bars` with `renames`, decoding what `reads` says, keeping the root rows `keep`
/// says of each, and checks what a receiver decodes against the decoded batch with those rows
/// alone.
fn check(
    signal: Signal,
    bars: &[BatchArrowRecords],
    renames: &KeyRenames,
    keep: &[Keep],
    reads: Reads,
) {
    let mut plain = OtapDecoder::new(signal);
    let mut forwarding = OtapDecoder::new(signal);
    let partial = !reads.is_everything();
    forwarding.enable_forwarding_decoded(64 << 20, reads);
    let mut forwarder = Forwarder::default();
    let mut receiver = OtapDecoder::new(signal);
    let mut sent = Sent::default();
    for (i, bar) in bars.iter().enumerate() {
        let mut expected = plain.decode(bar).unwrap();
        // Every third batch is decoded whole at once, as for a stream whose batches lose rows.
        let whole = i % 3 == 2;
        forwarding.decode_whole(whole);
        let Some(forwarded) = forwarding.forward(bar, &[renames]).unwrap() else {
            // Decoded from here on (the streams were decoded all along: nothing is replayed).
            let decoded = forwarding.decode(bar).unwrap();
            let renamed = meaning(&decoded, renames);
            let want = meaning(&expected, renames);
            assert_eq!(renamed, want);
            continue;
        };
        let decoded = forwarded.decoded.as_ref().expect("decoded beside");
        if partial && !whole && bar.arrow_payloads.len() > 1 {
            assert!(
                !decoded.is_whole(),
                "tables no pipeline reads are left undecoded"
            );
        }
        assert!(!whole || decoded.is_whole());
        let keep = keep[i % keep.len()];
        let root = keep_root(&decoded.batch, keep);
        expected
            .set(signal.root(), keep_root(&expected, keep))
            .unwrap();
        let raw = narrowed(&forwarded.outputs[0], decoded, &root)
            .expect("the sender's layout takes the rows left");
        assert_eq!(raw.items, root.num_rows());
        if matches!(keep, Keep::All) {
            let same = raw
                .payloads
                .iter()
                .zip(&forwarded.outputs[0].payloads)
                .all(|(a, b)| a.messages.last().unwrap().bytes == b.messages.last().unwrap().bytes);
            assert!(same, "a batch that lost no row goes as received");
        }
        let placed = forwarder.place(&raw);
        let frame = forwarder.frame(&raw, &placed, &mut sent, i as i64).unwrap();
        let received = receiver.decode(&frame.to_message()).unwrap();
        let want = meaning(&expected, renames);
        let got = meaning(&received, &KeyRenames::default());
        if let Some(diff) = equiv::first_difference(&want, &got) {
            panic!("batch {i} of {signal:?} ({keep:?}): {diff}");
        }
    }
}

#[test]
fn removed_rows_leave_with_their_children() {
    for signal in [Signal::Logs, Signal::Traces] {
        let bars = stream(signal, &requests(signal, 3, &[60, 90, 40, 120]));
        let first = plain_first(signal, &bars);
        let renames = renames_for(signal, &first, "renamed");
        let keep = [
            Keep::Some(1),
            Keep::All,
            Keep::Some(7),
            Keep::None,
            Keep::Some(9),
        ];
        for which in 0..3 {
            check(signal, &bars, &renames, &keep, reads_of(signal, which));
        }
    }
}

#[test]
fn rows_removed_from_a_table_its_sender_left_in_another_layout_fall_back() {
    // Plain ids (the sender marks them so) are not written again: the batch is re-encoded.
    let signal = Signal::Logs;
    let bars = stream(signal, &requests(signal, 5, &[30]));
    let mut forwarding = OtapDecoder::new(signal);
    forwarding.enable_forwarding_decoded(64 << 20, Reads::everything());
    let forwarded = forwarding
        .forward(&bars[0], &[&KeyRenames::default()])
        .unwrap()
        .unwrap();
    let mut decoded = forwarded.decoded.clone().unwrap();
    for layout in &mut decoded.layouts {
        layout.sent = marked_plain(&layout.sent);
    }
    let root = keep_root(&decoded.batch, Keep::Some(2));
    assert!(
        forwarded.outputs[0]
            .narrowed(&decoded, &root)
            .unwrap()
            .is_none()
    );
    // Nothing removed: the batch goes as it is whatever the layout.
    let all = keep_root(&decoded.batch, Keep::All);
    assert!(
        forwarded.outputs[0]
            .narrowed(&decoded, &all)
            .unwrap()
            .is_some()
    );
}

/// `schema` with its `id` and `parent_id` columns marked as holding plain ids.
fn marked_plain(schema: &Schema) -> SchemaRef {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| match f.name().as_str() {
            consts::ID | consts::PARENT_ID => f
                .as_ref()
                .clone()
                .with_metadata([(ENCODING_METADATA.to_string(), "plain".to_string())].into()),
            _ => f.as_ref().clone(),
        })
        .collect();
    Arc::new(Schema::new(fields))
}

fn plain_first(signal: Signal, bars: &[BatchArrowRecords]) -> OtapBatch {
    OtapDecoder::new(signal).decode(&bars[0]).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]
    #[test]
    fn narrowed_streams_decode_to_what_removing_the_rows_gives(
        seed in 0u64..1000,
        sizes in proptest::collection::vec(0usize..150, 1..5),
        picks in proptest::collection::vec(0u64..40, 1..4),
        traces in any::<bool>(),
        which in 0u8..3,
    ) {
        let signal = if traces { Signal::Traces } else { Signal::Logs };
        let bars = stream(signal, &requests(signal, seed, &sizes));
        let first = plain_first(signal, &bars);
        let renames = renames_for(signal, &first, "to");
        let keep: Vec<Keep> = picks
            .iter()
            .map(|&p| match p {
                0 => Keep::None,
                1 => Keep::All,
                p => Keep::Some(p),
            })
            .collect();
        check(signal, &bars, &renames, &keep, reads_of(signal, which));
    }
}

/// A table left undecoded is checked once the rest of the batch is decoded: a damaged record
/// batch there fails then, as it fails at once when every table is read.
#[test]
fn a_table_left_undecoded_is_checked_when_the_rest_is_decoded() {
    let signal = Signal::Logs;
    let mut bars = stream(signal, &requests(signal, 6, &[80]));
    let payload = bars[0]
        .arrow_payloads
        .iter_mut()
        .find(|p| p.r#type == PayloadType::LogAttrs.wire())
        .expect("log attributes");
    // One zstd buffer of its record batch declares a byte more than its frame holds: the
    // framing and the declared sizes still pass every check made before decoding.
    let (damaged, _, _) = super::tests::overdeclared(&payload.record);
    payload.record = damaged.into();

    let mut lazily = OtapDecoder::new(signal);
    lazily.enable_forwarding_decoded(64 << 20, reads_of(signal, 1));
    let forwarded = lazily
        .forward(&bars[0], &[&KeyRenames::default()])
        .unwrap()
        .expect("forwarded");
    let decoded = forwarded.decoded.unwrap();
    assert!(
        decoded
            .deferred_tables()
            .any(|t| t == PayloadType::LogAttrs)
    );
    assert!(decoded.whole().is_err());

    let mut eagerly = OtapDecoder::new(signal);
    eagerly.enable_forwarding_decoded(64 << 20, Reads::everything());
    assert!(
        eagerly
            .forward(&bars[0], &[&KeyRenames::default()])
            .is_err()
    );
}
