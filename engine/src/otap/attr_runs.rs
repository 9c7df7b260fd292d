//! Attribute quasi-delta runs (OTAP §3): a row of an attribute table continues the previous
//! row's run when both hold the same key and the same scalar value (a string, int, double, bool
//! or bytes value present in both; doubles compared as IEEE numbers). Empty, map and slice
//! values never continue a run.
//!
//! Each test is a pass over whole columns. Where the layout allows (dictionary keys compared as
//! numbers when the dictionary holds distinct values, plain numbers compared directly) the pass
//! is branch-free and costs a few instructions per row; other layouts are compared row by row.

use arrow::array::{Array, ArrayAccessor, PrimitiveArray, RecordBatch, StringArray};
use arrow::buffer::NullBuffer;
use arrow::datatypes::{ArrowDictionaryKeyType, ArrowNativeType};

use crate::column::{Col, Compare};
use crate::error::Result;
use crate::schema::PayloadType;
use crate::schema::consts::{self, value_type};
use crate::value::ValueView;

/// Per row of an attribute table, whether it continues the previous row's run. `distinct`: the
/// `key` and `str` dictionaries hold each value once, so rows with different dictionary keys
/// differ.
pub(crate) fn attribute_runs(
    table: &RecordBatch,
    kind: PayloadType,
    distinct: bool,
) -> Result<Vec<bool>> {
    let rows = table.num_rows();
    let key = Col::<StringArray>::of(table, kind, consts::KEY)?;
    let values = ValueView::of_table(table, kind)?;
    let types = values.types(rows);
    let mut same = vec![false; rows];
    if rows > 1 {
        for (s, pair) in same[1..].iter_mut().zip(types.windows(2)) {
            *s = pair[0] == pair[1] && is_scalar(pair[1]);
        }
    }
    let strict = |distinct, reflexive| Compare {
        distinct,
        reflexive,
        nulls_equal: false,
    };
    // Strings compare by dictionary key when the dictionary is distinct; doubles are not
    // reflexive (NaN).
    let checks = [
        (value_type::STR, strict(distinct, true)),
        (value_type::INT, strict(false, true)),
        (value_type::DOUBLE, strict(false, false)),
        (value_type::BOOL, strict(false, true)),
        (value_type::BYTES, strict(false, true)),
    ];
    // A type's column is looked at only if some row of that type may continue a run (the
    // search usually stops within the first rows).
    let present = checks.map(|(ty, _)| same.iter().zip(types.iter()).any(|(s, t)| *s & (*t == ty)));
    for ((ty, how), present) in checks.into_iter().zip(present) {
        if !present {
            continue;
        }
        let (same, types) = (&mut same[..], &types[..]);
        match ty {
            value_type::STR => narrow_typed(&values.str, same, types, ty, how),
            value_type::INT => narrow_numbers(&values.int, same, types, ty, how),
            value_type::DOUBLE => narrow_numbers(&values.double, same, types, ty, how),
            value_type::BOOL => narrow_typed(&values.bool, same, types, ty, how),
            _ => narrow_typed(&values.bytes, same, types, ty, how),
        }
    }
    narrow_keys(&key, &mut same, distinct);
    Ok(same)
}

fn is_scalar(ty: u8) -> bool {
    (value_type::STR..=value_type::BOOL).contains(&ty) || ty == value_type::BYTES
}

/// Narrows `same` to the rows whose key equals the previous row's (two null keys are equal).
fn narrow_keys(key: &Col<'_, StringArray>, same: &mut [bool], distinct: bool) {
    fn by_keys<K: ArrowDictionaryKeyType>(keys: &PrimitiveArray<K>, same: &mut [bool]) {
        let keys = keys.values();
        let Some((previous, current, same)) = pairs(keys, same) else {
            return;
        };
        for i in 0..same.len() {
            same[i] &= previous[i] == current[i];
        }
    }
    let plain_keys = |k: &dyn Array, v: &StringArray| k.null_count() == 0 && v.null_count() == 0;
    match key {
        // Equal keys are equal values (a key past the dictionary is null on both rows), and
        // different keys of a distinct dictionary are different values.
        Col::Dict8(k, v) if distinct && plain_keys(*k, v) => by_keys(k, same),
        Col::Dict16(k, v) if distinct && plain_keys(*k, v) => by_keys(k, same),
        _ => key.narrow_same_as_previous(
            same,
            |_| true,
            Compare {
                distinct,
                reflexive: true,
                nulls_equal: true,
            },
        ),
    }
}

/// Narrows `same` at the rows of type `ty` to those whose value in `column` equals the previous
/// row's, compared as `how` says (values are strict: a null never equals anything).
fn narrow_typed<'a, A>(column: &Col<'a, A>, same: &mut [bool], types: &[u8], ty: u8, how: Compare)
where
    A: Array + 'static,
    &'a A: ArrayAccessor,
    <&'a A as ArrayAccessor>::Item: PartialEq,
{
    let by_key = how.distinct && how.reflexive;
    match column {
        Col::Dict8(k, v) if by_key && v.null_count() == 0 => {
            by_dict_keys(k, v.len(), same, types, ty)
        }
        Col::Dict16(k, v) if by_key && v.null_count() == 0 => {
            by_dict_keys(k, v.len(), same, types, ty)
        }
        _ => column.narrow_same_as_previous(same, |i| types[i] == ty, how),
    }
}

/// [`narrow_typed`] for a numeric column, comparing plain values directly.
fn narrow_numbers<T: arrow::datatypes::ArrowPrimitiveType>(
    column: &Col<'_, PrimitiveArray<T>>,
    same: &mut [bool],
    types: &[u8],
    ty: u8,
    how: Compare,
) where
    T::Native: PartialEq,
{
    match column {
        Col::Plain(a) => by_values(a, same, types, ty),
        other => narrow_typed(other, same, types, ty, how),
    }
}

/// [`narrow_typed`] for a distinct dictionary with no null entries: rows are equal when their
/// keys are, and both keys are valid and inside the dictionary.
fn by_dict_keys<K: ArrowDictionaryKeyType>(
    keys: &PrimitiveArray<K>,
    entries: usize,
    same: &mut [bool],
    types: &[u8],
    ty: u8,
) {
    if let Some((previous, current, same)) = pairs(keys.values(), same) {
        let types = &types[1..=same.len()];
        for i in 0..same.len() {
            let equal = (previous[i] == current[i]) & (current[i].as_usize() < entries);
            same[i] &= (types[i] != ty) | equal;
        }
    }
    require_valid(keys.nulls(), same, types, ty);
}

/// [`narrow_typed`] for a plain numeric column (`==` on the values: IEEE for doubles).
fn by_values<T: arrow::datatypes::ArrowPrimitiveType>(
    column: &PrimitiveArray<T>,
    same: &mut [bool],
    types: &[u8],
    ty: u8,
) where
    T::Native: PartialEq,
{
    if let Some((previous, current, same)) = pairs(column.values(), same) {
        let types = &types[1..=same.len()];
        for i in 0..same.len() {
            same[i] &= (types[i] != ty) | (previous[i] == current[i]);
        }
    }
    require_valid(column.nulls(), same, types, ty);
}

/// A column's values as (row i - 1, row i) pairs beside `same` from row 1: three slices of one
/// length, so that loops over them compile without bounds checks. None for fewer than two rows
/// (a table's columns are as long as the table, so no value is left uncompared).
fn pairs<'a, 's, T>(
    values: &'a [T],
    same: &'s mut [bool],
) -> Option<(&'a [T], &'a [T], &'s mut [bool])> {
    let rows = same.len();
    if rows < 2 || values.len() < rows {
        return None;
    }
    Some((&values[..rows - 1], &values[1..rows], &mut same[1..]))
}

/// The rows (up to 64) of `types` that are of type `ty`, as bits, found eight rows at a time
/// (a byte equals `ty` when its XOR with it is zero).
fn rows_of_type(types: &[u8], ty: u8) -> u64 {
    const LOW: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    let wanted = u64::from(ty) * 0x0101_0101_0101_0101;
    let mut bits = 0u64;
    for (k, eight) in types.chunks(8).enumerate() {
        let bytes = match <[u8; 8]>::try_from(eight) {
            Ok(bytes) => bytes,
            Err(_) => {
                let mut padded = [!ty; 8];
                padded[..eight.len()].copy_from_slice(eight);
                padded
            }
        };
        let x = u64::from_le_bytes(bytes) ^ wanted;
        // The top bit of each byte that is zero.
        let zero = !(((x & LOW) + LOW) | x) & !LOW;
        // Gathers the eight top bits into the low byte.
        let gathered = ((zero >> 7).wrapping_mul(0x0102_0408_1020_4080)) >> 56;
        bits |= gathered << (8 * k);
    }
    bits
}

/// Narrows `same` at the rows of type `ty` to those where both the row and the previous one
/// are valid in a column with validity `nulls`. Works 64 rows at a time: a row's pair bit is
/// its validity bit and the one below it.
fn require_valid(nulls: Option<&NullBuffer>, same: &mut [bool], types: &[u8], ty: u8) {
    let Some(nulls) = nulls.filter(|n| n.null_count() > 0) else {
        return;
    };
    // Usually only rows of other types are null: then there is nothing to narrow.
    let words = nulls.inner().bit_chunks();
    let null_of_type = types
        .chunks(64)
        .zip(words.iter_padded())
        .any(|(types, valid)| rows_of_type(types, ty) & !valid != 0);
    if !null_of_type {
        return;
    }
    let mut carry = 0u64;
    let chunks = words.iter_padded();
    for ((same, types), word) in same.chunks_mut(64).zip(types.chunks(64)).zip(chunks) {
        let pairs = word & ((word << 1) | carry);
        carry = word >> 63;
        for (j, (s, t)) in same.iter_mut().zip(types).enumerate() {
            *s &= (*t != ty) | ((pairs >> j) & 1 != 0);
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::Arc;

    use arrow::array::{
        ArrayRef, BinaryArray, BooleanArray, DictionaryArray, Float64Array, Int64Array, UInt8Array,
        UInt16Array,
    };
    use arrow::datatypes::{Field, Schema, UInt8Type, UInt16Type};
    use proptest::prelude::*;

    use super::*;

    /// One attribute: its key (None: null), type, and the value its column holds (None: null).
    #[derive(Debug, Clone)]
    pub(crate) struct Row {
        key: Option<u8>,
        ty: u8,
        value: Option<u8>,
    }

    const DOUBLES: [f64; 4] = [0.0, -0.0, 1.5, f64::NAN];

    #[derive(PartialEq)]
    enum Value {
        Str(u8),
        Int(u8),
        Double(f64),
        Bool(bool),
        Bytes(u8),
    }

    fn value(row: &Row) -> Option<Value> {
        let v = row.value?;
        Some(match row.ty {
            value_type::STR => Value::Str(v),
            value_type::INT => Value::Int(v),
            value_type::DOUBLE => Value::Double(DOUBLES[usize::from(v) % 4]),
            value_type::BOOL => Value::Bool(v % 2 == 0),
            value_type::BYTES => Value::Bytes(v),
            _ => return None,
        })
    }

    /// The rule, row by row.
    fn expected(rows: &[Row]) -> Vec<bool> {
        (0..rows.len())
            .map(|i| {
                i > 0
                    && rows[i].key == rows[i - 1].key
                    && value(&rows[i]).is_some()
                    && value(&rows[i]) == value(&rows[i - 1])
            })
            .collect()
    }

    /// A `LOG_ATTRS` table of `rows`, its strings in distinct dictionaries or plain.
    pub(crate) fn table(rows: &[Row], dictionaries: bool) -> RecordBatch {
        let of = |ty: u8| -> Vec<Option<u8>> {
            rows.iter()
                .map(|r| r.value.filter(|_| r.ty == ty))
                .collect()
        };
        let name = |v: u8| format!("value-{v}");
        let keys: Vec<Option<String>> = rows.iter().map(|r| r.key.map(name)).collect();
        let strs: Vec<Option<String>> = of(value_type::STR)
            .into_iter()
            .map(|v| v.map(name))
            .collect();
        let (key, str): (ArrayRef, ArrayRef) = if dictionaries {
            // Distinct dictionaries, with an unused entry so keys and values differ.
            let dictionary: ArrayRef = Arc::new(StringArray::from_iter_values(
                ["unused"]
                    .into_iter()
                    .map(String::from)
                    .chain((0..4).map(name)),
            ));
            let index = |v: &Option<String>| v.as_ref().map(|s| 1 + s[6..].parse::<u8>().unwrap());
            let key_keys = UInt8Array::from(keys.iter().map(index).collect::<Vec<_>>());
            let str_keys = UInt16Array::from(
                strs.iter()
                    .map(|v| index(v).map(u16::from))
                    .collect::<Vec<_>>(),
            );
            (
                Arc::new(
                    DictionaryArray::<UInt8Type>::try_new(key_keys, Arc::clone(&dictionary))
                        .unwrap(),
                ),
                Arc::new(DictionaryArray::<UInt16Type>::try_new(str_keys, dictionary).unwrap()),
            )
        } else {
            (
                Arc::new(StringArray::from(keys)),
                Arc::new(StringArray::from(strs)),
            )
        };
        let columns: Vec<(&str, ArrayRef)> = vec![
            ("key", key),
            (
                "type",
                Arc::new(UInt8Array::from_iter_values(rows.iter().map(|r| r.ty))),
            ),
            ("str", str),
            (
                "int",
                Arc::new(Int64Array::from_iter(
                    of(value_type::INT).into_iter().map(|v| v.map(i64::from)),
                )),
            ),
            (
                "double",
                Arc::new(Float64Array::from_iter(
                    of(value_type::DOUBLE)
                        .into_iter()
                        .map(|v| v.map(|v| DOUBLES[usize::from(v) % 4])),
                )),
            ),
            (
                "bool",
                Arc::new(BooleanArray::from_iter(
                    of(value_type::BOOL)
                        .into_iter()
                        .map(|v| v.map(|v| v % 2 == 0)),
                )),
            ),
            (
                "bytes",
                Arc::new(BinaryArray::from_iter(
                    of(value_type::BYTES)
                        .into_iter()
                        .map(|v| v.map(|v| vec![v; 3])),
                )),
            ),
        ];
        let fields: Vec<Field> = columns
            .iter()
            .map(|(n, a)| Field::new(*n, a.data_type().clone(), true))
            .collect();
        RecordBatch::try_new(
            Arc::new(Schema::new(fields)),
            columns.into_iter().map(|(_, a)| a).collect(),
        )
        .unwrap()
    }

    /// An attribute of a few keys, types and values (so that runs form and break).
    pub(crate) fn row() -> impl Strategy<Value = Row> {
        (
            prop::option::weighted(0.9, 0..3u8),
            prop::sample::select(vec![0u8, 1, 1, 1, 2, 2, 3, 4, 5, 7]),
            prop::option::weighted(0.9, 0..4u8),
        )
            .prop_map(|(key, ty, value)| Row { key, ty, value })
    }

    #[test]
    fn rows_of_type_marks_exactly_that_type() {
        let types: Vec<u8> = (0..64u32).map(|i| (i * 7 % 9) as u8).collect();
        for len in [0, 1, 7, 8, 9, 63, 64] {
            for ty in 0..10u8 {
                let expected = (0..len)
                    .filter(|j| types[*j] == ty)
                    .fold(0u64, |bits, j| bits | 1 << j);
                assert_eq!(
                    rows_of_type(&types[..len], ty),
                    expected,
                    "{len} rows, type {ty}"
                );
            }
        }
    }

    proptest! {
        #[test]
        fn runs_follow_the_rule_in_every_layout(
            rows in prop::collection::vec(row(), 0..200),
        ) {
            let kind = PayloadType::LogAttrs;
            let expected = expected(&rows);
            let dictionaries = table(&rows, true);
            prop_assert_eq!(&attribute_runs(&dictionaries, kind, true).unwrap(), &expected);
            prop_assert_eq!(&attribute_runs(&dictionaries, kind, false).unwrap(), &expected);
            let plain = table(&rows, false);
            prop_assert_eq!(&attribute_runs(&plain, kind, false).unwrap(), &expected);
        }
    }
}
