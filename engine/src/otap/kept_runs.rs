//! The quasi-delta runs of some of a table's rows, from the runs of the whole table.
//!
//! Whether a row continues a run depends on it and the row before it alone (equal keys and
//! values, equal event names, ...), and that relation is transitive. So a kept row whose
//! predecessor is kept too relates to it as before, and a kept row whose predecessors up to
//! the previous kept row were removed continues that row's run when every row from there on
//! continued the one before it. Only the rows left beside each other from different runs are
//! compared again, and only those: for most removals, that is no row at all.

use arrow::array::{RecordBatch, UInt32Array};
use arrow::buffer::BooleanBuffer;
use arrow::compute::{filter_record_batch, take_record_batch};

use super::ids::{Strings, continuation};
use crate::error::{Error, Result};
use crate::schema::PayloadType;

/// Per row of `table` that `keep` keeps, in order, whether it continues the previous kept
/// row's run; `runs`: the runs of the whole table (as its decoding found them).
pub(crate) fn kept_runs(
    table: &RecordBatch,
    kind: PayloadType,
    strings: Strings,
    runs: &[bool],
    keep: &BooleanBuffer,
) -> Result<Vec<bool>> {
    let rows = table.num_rows();
    if runs.len() != rows || keep.len() != rows {
        // Not the table the runs were found in: find them again.
        let kept = filter_record_batch(table, &keep.clone().into())
            .map_err(|e| Error::arrow(format!("rows of {kind:?}"), e))?;
        return continuation(&kept, kind, strings);
    }
    let mut kept = Vec::with_capacity(keep.count_set_bits());
    // Kept rows brought beside a row of another run: (their place in `kept`, the previous
    // kept row, the row).
    let mut compare: Vec<(usize, u32, u32)> = Vec::new();
    let mut previous: Option<usize> = None;
    for row in keep.set_indices() {
        let continues = match previous {
            None => false,
            Some(p) if p + 1 == row => runs[row],
            Some(p) if runs[p + 1..=row].iter().all(|c| *c) => true,
            Some(p) => {
                compare.push((kept.len(), p as u32, row as u32));
                false
            }
        };
        kept.push(continues);
        previous = Some(row);
    }
    if compare.is_empty() {
        return Ok(kept);
    }
    // Each pair as two rows of a small table: the second row's run says whether it continues
    // the first.
    let pairs = UInt32Array::from(
        compare
            .iter()
            .flat_map(|(_, p, r)| [*p, *r])
            .collect::<Vec<u32>>(),
    );
    let paired = take_record_batch(table, &pairs)
        .map_err(|e| Error::arrow(format!("rows of {kind:?}"), e))?;
    let paired_runs = continuation(&paired, kind, strings)?;
    for (pair, (at, _, _)) in compare.iter().enumerate() {
        kept[*at] = paired_runs[2 * pair + 1];
    }
    Ok(kept)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{BooleanArray, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use proptest::prelude::*;

    use super::*;
    use crate::otap::attr_runs::tests::{row, table};

    proptest! {
        #[test]
        fn the_runs_of_kept_rows_are_those_found_in_them(
            rows in prop::collection::vec(row(), 0..200),
            keep in prop::collection::vec(prop::bool::weighted(0.7), 200),
        ) {
            let kind = PayloadType::LogAttrs;
            let keep = BooleanBuffer::from_iter(keep.into_iter().take(rows.len()));
            let layouts = [
                (table(&rows, true), Strings::Distinct),
                (table(&rows, true), Strings::MayRepeat),
                (table(&rows, false), Strings::MayRepeat),
            ];
            for (table, strings) in layouts {
                let runs = continuation(&table, kind, strings).unwrap();
                let rows_kept =
                    filter_record_batch(&table, &BooleanArray::new(keep.clone(), None)).unwrap();
                let expected = continuation(&rows_kept, kind, strings).unwrap();
                let got = kept_runs(&table, kind, strings, &runs, &keep).unwrap();
                prop_assert_eq!(got, expected);
            }
        }

        #[test]
        fn the_runs_of_kept_span_events_are_those_found_in_them(
            names in prop::collection::vec(prop::option::weighted(0.9, 0..3u8), 0..200),
            keep in prop::collection::vec(prop::bool::weighted(0.7), 200),
        ) {
            // Span events continue a run while their names are equal (a null name is "").
            let kind = PayloadType::SpanEvents;
            let names = StringArray::from_iter(names.iter().map(|n| n.map(|n| ["", "a", "b"][n as usize])));
            let schema = Schema::new(vec![Field::new("name", DataType::Utf8, true)]);
            let table = RecordBatch::try_new(Arc::new(schema), vec![Arc::new(names)]).unwrap();
            let keep = BooleanBuffer::from_iter(keep.into_iter().take(table.num_rows()));
            let runs = continuation(&table, kind, Strings::MayRepeat).unwrap();
            let rows_kept =
                filter_record_batch(&table, &BooleanArray::new(keep.clone(), None)).unwrap();
            let expected = continuation(&rows_kept, kind, Strings::MayRepeat).unwrap();
            let got = kept_runs(&table, kind, Strings::MayRepeat, &runs, &keep).unwrap();
            prop_assert_eq!(got, expected);
        }
    }
}
