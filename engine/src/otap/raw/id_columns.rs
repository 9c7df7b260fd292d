//! Id columns read as plain ids: their values, and which rows have an id among a set.

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::buffer::BooleanBuffer;
use arrow::datatypes::DataType;

use crate::error::Result;
use crate::id_set::IdSet;
use crate::otap::ids::IdValues;
use crate::schema::consts;
use crate::schema::payload::PayloadType;

/// Per row, whether its (plain) id in `column` is one of `member`'s (no row when the column
/// is absent).
pub(super) fn rows_with_kept_parent(
    column: Option<&ArrayRef>,
    member: &IdSet,
    table: PayloadType,
) -> Result<BooleanBuffer> {
    fn of<T>(ids: &arrow::array::PrimitiveArray<T>, member: &IdSet) -> BooleanBuffer
    where
        T: arrow::datatypes::ArrowPrimitiveType,
        T::Native: Into<u32>,
    {
        let values = ids.values();
        match ids.nulls().filter(|n| n.null_count() > 0) {
            None => {
                BooleanBuffer::collect_bool(values.len(), |row| member.contains(values[row].into()))
            }
            Some(nulls) => BooleanBuffer::collect_bool(values.len(), |row| {
                nulls.is_valid(row) && member.contains(values[row].into())
            }),
        }
    }
    Ok(match column.map(|c| (c, c.data_type())) {
        Some((c, DataType::UInt16)) => of(c.as_primitive::<arrow::datatypes::UInt16Type>(), member),
        Some((c, DataType::UInt32)) => of(c.as_primitive::<arrow::datatypes::UInt32Type>(), member),
        _ => {
            let ids = column_ids(column, table)?;
            BooleanBuffer::collect_bool(ids.len(), |row| {
                ids[row].is_some_and(|p| member.contains(p))
            })
        }
    })
}

/// The values of an id column (all null when it is absent).
pub(super) fn column_ids(
    column: Option<&ArrayRef>,
    table: PayloadType,
) -> Result<Vec<Option<u32>>> {
    let Some(column) = column else {
        return Ok(Vec::new());
    };
    let (_, values) = IdValues::read(column, table, consts::ID)?;
    let mut out = Vec::with_capacity(values.len());
    values.for_each(|_, v| out.push(v));
    Ok(out)
}
