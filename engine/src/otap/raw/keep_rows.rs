//! Rows of a table kept at a selection given as a bitmap: the values go through Arrow's filter,
//! the validity bitmaps (and boolean values) are compacted 64 rows at a time. Arrow's filter
//! copies bits run by run of kept rows; the value columns of an attribute table are mostly
//! null and the rows a removal leaves are scattered among short runs, so that is where most of
//! a removal's time went.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, DictionaryArray, PrimitiveArray, RecordBatch,
    RecordBatchOptions, downcast_primitive_array,
};
use arrow::buffer::{BooleanBuffer, Buffer, NullBuffer};
use arrow::compute::{FilterBuilder, FilterPredicate, filter_record_batch};
use arrow::datatypes::{
    ArrowDictionaryKeyType, ArrowPrimitiveType, DataType, UInt8Type, UInt16Type, UInt32Type,
};
use arrow::error::ArrowError;

/// `batch` with only the rows `keep` keeps.
pub(crate) fn keep_rows(
    batch: &RecordBatch,
    keep: &BooleanBuffer,
) -> Result<RecordBatch, ArrowError> {
    let mask = BooleanArray::new(keep.clone(), None);
    if keep.len() != batch.num_rows() {
        return filter_record_batch(batch, &mask);
    }
    let predicate = FilterBuilder::new(&mask).optimize().build();
    let kept = Selection {
        keep,
        rows: keep.count_set_bits(),
    };
    let columns = batch
        .columns()
        .iter()
        .map(|column| keep_in_column(column, &kept, &predicate))
        .collect::<Result<Vec<_>, _>>()?;
    let options = RecordBatchOptions::new().with_row_count(Some(kept.rows));
    RecordBatch::try_new_with_options(batch.schema(), columns, &options)
}

/// The rows kept, and how many they are.
struct Selection<'k> {
    keep: &'k BooleanBuffer,
    rows: usize,
}

fn keep_in_column(
    array: &ArrayRef,
    keep: &Selection<'_>,
    predicate: &FilterPredicate,
) -> Result<ArrayRef, ArrowError> {
    let Some(nulls) = array.nulls().filter(|n| n.null_count() > 0) else {
        return match array.data_type() {
            DataType::Boolean => {
                let values = compact_bits(array.as_boolean().values(), keep);
                Ok(Arc::new(BooleanArray::new(values, None)))
            }
            _ => predicate.filter(array),
        };
    };
    let nulls = NullBuffer::new(compact_bits(nulls.inner(), keep));
    downcast_primitive_array!(
        array => with_nulls(array, nulls, predicate),
        DataType::Boolean => {
            let values = compact_bits(array.as_boolean().values(), keep);
            Ok(Arc::new(BooleanArray::new(values, Some(nulls))))
        }
        DataType::Dictionary(key, _) => match key.as_ref() {
            DataType::UInt8 => dictionary::<UInt8Type>(array, nulls, predicate),
            DataType::UInt16 => dictionary::<UInt16Type>(array, nulls, predicate),
            DataType::UInt32 => dictionary::<UInt32Type>(array, nulls, predicate),
            _ => predicate.filter(array),
        },
        _ => predicate.filter(array)
    )
}

/// The kept values of `array` (filtered without their validity) with `nulls`, its validity
/// kept.
fn with_nulls<T: ArrowPrimitiveType>(
    array: &PrimitiveArray<T>,
    nulls: NullBuffer,
    predicate: &FilterPredicate,
) -> Result<ArrayRef, ArrowError> {
    let bare = PrimitiveArray::<T>::new(array.values().clone(), None)
        .with_data_type(array.data_type().clone());
    let kept = predicate.filter(&bare)?;
    let values = kept.as_primitive::<T>().values().clone();
    Ok(Arc::new(
        PrimitiveArray::<T>::try_new(values, Some(nulls))?
            .with_data_type(array.data_type().clone()),
    ))
}

fn dictionary<K: ArrowDictionaryKeyType>(
    array: &ArrayRef,
    nulls: NullBuffer,
    predicate: &FilterPredicate,
) -> Result<ArrayRef, ArrowError> {
    let dictionary = array.as_dictionary::<K>();
    let keys = with_nulls(dictionary.keys(), nulls, predicate)?;
    let keys = keys.as_primitive::<K>().clone();
    Ok(Arc::new(DictionaryArray::<K>::try_new(
        keys,
        Arc::clone(dictionary.values()),
    )?))
}

/// The bits of `bits` at the rows `keep` keeps, in order.
fn compact_bits(bits: &BooleanBuffer, keep: &Selection<'_>) -> BooleanBuffer {
    let kept = keep.rows;
    let mut words: Vec<u64> = Vec::with_capacity(kept.div_ceil(64));
    // Bits gathered but not yet a whole word: `filled` of them, in the low bits of `pending`.
    let (mut pending, mut filled) = (0u64, 0u32);
    let chunks = bits.bit_chunks();
    let masks = keep.keep.bit_chunks();
    for (word, mask) in chunks.iter_padded().zip(masks.iter_padded()) {
        let count = mask.count_ones();
        let value = compact_word(word, mask);
        pending |= value << filled;
        if filled + count >= 64 {
            words.push(pending);
            pending = if filled == 0 {
                0
            } else {
                value >> (64 - filled)
            };
            filled = filled + count - 64;
        } else {
            filled += count;
        }
    }
    if filled > 0 {
        words.push(pending);
    }
    BooleanBuffer::new(Buffer::from_vec(words), 0, kept)
}

/// The bits of `word` where `mask` is set, moved down to the low bits in order (the others
/// zero). Removes the dropped bits from the highest down when few are dropped, gathers the
/// kept ones otherwise.
#[inline]
fn compact_word(word: u64, mask: u64) -> u64 {
    if mask == u64::MAX {
        return word;
    }
    if mask.count_ones() >= 32 {
        let mut value = word & mask;
        let mut dropped = !mask;
        while dropped != 0 {
            let at = 63 - dropped.leading_zeros();
            let below = (1u64 << at) - 1;
            value = (value & below) | ((value >> 1) & !below);
            dropped &= below;
        }
        value
    } else {
        let (mut value, mut at, mut rest) = (0u64, 0u32, mask);
        while rest != 0 {
            let row = rest.trailing_zeros();
            value |= ((word >> row) & 1) << at;
            at += 1;
            rest &= rest - 1;
        }
        value
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::{Int64Array, StringArray, UInt8Array};
    use arrow::datatypes::{Field, Schema};
    use proptest::prelude::*;

    use super::*;
    use crate::otap::attr_runs::tests::{row, table};

    proptest! {
        #[test]
        fn kept_rows_are_what_arrows_filter_keeps(
            rows in prop::collection::vec(row(), 0..300),
            keep in prop::collection::vec(prop::bool::weighted(0.85), 300),
            dense in prop::collection::vec(prop::bool::weighted(0.1), 300),
            offset in 0usize..9,
        ) {
            let keep: Vec<bool> = keep.into_iter().take(rows.len()).collect();
            for dictionaries in [true, false] {
                let full = table(&rows, dictionaries);
                // Columns that start inside their buffers.
                let offset = offset.min(rows.len());
                let sliced = full.slice(offset, rows.len() - offset);
                for (batch, keep) in [(&full, &keep[..]), (&sliced, &keep[offset..])] {
                    let mask = BooleanBuffer::from_iter(keep.iter().copied());
                    let want = filter_record_batch(batch, &BooleanArray::new(mask.clone(), None))
                        .unwrap();
                    prop_assert_eq!(keep_rows(batch, &mask).unwrap(), want);
                }
            }
            // Mostly dropped rows.
            let mask = BooleanBuffer::from_iter(dense.iter().copied().take(rows.len()));
            let batch = table(&rows, true);
            let want = filter_record_batch(&batch, &BooleanArray::new(mask.clone(), None)).unwrap();
            prop_assert_eq!(keep_rows(&batch, &mask).unwrap(), want);
        }
    }

    #[test]
    fn a_column_without_nulls_and_one_of_other_types_are_kept_too() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("n", DataType::Int64, false),
            Field::new("s", DataType::Utf8, true),
            Field::new("b", DataType::Boolean, false),
            Field::new(
                "d",
                DataType::Dictionary(Box::new(DataType::UInt8), Box::new(DataType::Utf8)),
                true,
            ),
        ]));
        let rows = 200;
        let dictionary = DictionaryArray::<UInt8Type>::try_new(
            UInt8Array::from_iter((0..rows).map(|i| (i % 5 != 0).then_some((i % 3) as u8))),
            Arc::new(StringArray::from(vec!["a", "b", "c"])),
        )
        .unwrap();
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from_iter_values(0..rows as i64)),
                Arc::new(StringArray::from_iter(
                    (0..rows).map(|i| (i % 4 != 0).then(|| format!("v{i}"))),
                )),
                Arc::new(BooleanArray::from_iter((0..rows).map(|i| Some(i % 7 < 3)))),
                Arc::new(dictionary),
            ],
        )
        .unwrap();
        let mask = BooleanBuffer::from_iter((0..rows).map(|i| i % 11 != 3 && i % 13 != 5));
        let want = filter_record_batch(&batch, &BooleanArray::new(mask.clone(), None)).unwrap();
        assert_eq!(keep_rows(&batch, &mask).unwrap(), want);
    }
}
