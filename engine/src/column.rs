//! Typed, read-only access to OTAP columns whatever their physical encoding: absent, native, or
//! dictionary-encoded with `UInt8` or `UInt16` keys.

use arrow::array::{
    Array, ArrayAccessor, ArrayRef, AsArray, DictionaryArray, PrimitiveArray, RecordBatch,
    StructArray,
};
use arrow::datatypes::{ArrowDictionaryKeyType, DataType, UInt8Type, UInt16Type};

use crate::error::{Error, Result};
use crate::schema::PayloadType;

/// A column read as values of array type `A`.
pub enum Col<'a, A> {
    /// The column is not in the table: every value is the default.
    Absent,
    /// A native column.
    Plain(&'a A),
    /// A dictionary with `UInt8` keys.
    Dict8(&'a PrimitiveArray<UInt8Type>, &'a A),
    /// A dictionary with `UInt16` keys.
    Dict16(&'a PrimitiveArray<UInt16Type>, &'a A),
}

fn dict_parts<K: ArrowDictionaryKeyType, A: 'static>(
    array: &ArrayRef,
) -> Option<(&PrimitiveArray<K>, &A)> {
    let dict: &DictionaryArray<K> = array.as_any().downcast_ref()?;
    let values = dict.values().as_any().downcast_ref::<A>()?;
    Some((dict.keys(), values))
}

impl<'a, A> Col<'a, A>
where
    A: Array + 'static,
    &'a A: ArrayAccessor,
{
    /// Reads `array` as `A`, accepting dictionaries of `A`.
    pub fn new(array: &'a ArrayRef) -> Option<Self> {
        match array.data_type() {
            DataType::Dictionary(key, _) => match key.as_ref() {
                DataType::UInt8 => dict_parts::<UInt8Type, A>(array).map(|(k, v)| Col::Dict8(k, v)),
                DataType::UInt16 => {
                    dict_parts::<UInt16Type, A>(array).map(|(k, v)| Col::Dict16(k, v))
                }
                _ => None,
            },
            _ => array.as_any().downcast_ref::<A>().map(Col::Plain),
        }
    }

    /// The column `name` of `batch` (or `Absent`), failing on an unexpected type.
    pub(crate) fn of(batch: &'a RecordBatch, table: PayloadType, name: &str) -> Result<Self> {
        match batch.column_by_name(name) {
            None => Ok(Col::Absent),
            Some(array) => Self::typed(array, table, name),
        }
    }

    /// The child `name` of a struct column (or `Absent`).
    pub(crate) fn child(
        parent: Option<&'a StructArray>,
        table: PayloadType,
        name: &str,
    ) -> Result<Self> {
        match parent.and_then(|s| s.column_by_name(name)) {
            None => Ok(Col::Absent),
            Some(array) => Self::typed(array, table, name),
        }
    }

    fn typed(array: &'a ArrayRef, table: PayloadType, name: &str) -> Result<Self> {
        Self::new(array).ok_or_else(|| {
            Error::schema(
                table,
                format!("column {name} has unexpected type {}", array.data_type()),
            )
        })
    }

    /// The value at row `i`, or None when null or absent.
    #[inline(always)]
    pub fn get(&self, i: usize) -> Option<<&'a A as ArrayAccessor>::Item> {
        match self {
            Col::Absent => None,
            Col::Plain(a) => a.is_valid(i).then(|| a.value(i)),
            Col::Dict8(k, v) => lookup(k.is_valid(i).then(|| k.value(i) as usize), *v),
            Col::Dict16(k, v) => lookup(k.is_valid(i).then(|| k.value(i) as usize), *v),
        }
    }

    /// Narrows `same` (per row: whether it equals the row before it) to the rows whose
    /// values in this column also equal the previous row's, compared as `how` says. Only rows
    /// where `same` is still true and `only` holds are compared; the column's encoding is
    /// decided once, not per row.
    pub(crate) fn narrow_same_as_previous(
        &self,
        same: &mut [bool],
        only: impl Fn(usize) -> bool,
        how: Compare,
    ) where
        <&'a A as ArrayAccessor>::Item: PartialEq,
    {
        let rows = same.iter_mut().enumerate().skip(1);
        match self {
            Col::Absent => {
                for (i, s) in rows {
                    if *s && only(i) {
                        *s = how.nulls_equal;
                    }
                }
            }
            Col::Plain(a) if a.null_count() == 0 => {
                for (i, s) in rows {
                    if *s && only(i) {
                        *s = a.value(i - 1) == a.value(i);
                    }
                }
            }
            Col::Plain(a) => {
                for (i, s) in rows {
                    if *s && only(i) {
                        *s = match (a.is_valid(i - 1), a.is_valid(i)) {
                            (true, true) => a.value(i - 1) == a.value(i),
                            (false, false) => how.nulls_equal,
                            _ => false,
                        };
                    }
                }
            }
            Col::Dict8(k, v) => narrow_dict(k, *v, same, only, how),
            Col::Dict16(k, v) => narrow_dict(k, *v, same, only, how),
        }
    }

    /// Each row's value mapped through `map` (None rows stay None). For a dictionary, `map`
    /// runs once per dictionary entry the rows use rather than once per row. Returns None as
    /// soon as `map` does.
    pub(crate) fn map_values<T: Copy>(
        &self,
        rows: usize,
        mut map: impl FnMut(<&'a A as ArrayAccessor>::Item) -> Option<T>,
    ) -> Option<Vec<Option<T>>> {
        match self {
            Col::Dict8(k, v) if dictionary_pays(v.len(), rows) => {
                map_dictionary(k, *v, &mut vec![None; v.len()], map)
            }
            Col::Dict16(k, v) if dictionary_pays(v.len(), rows) => {
                map_dictionary(k, *v, &mut vec![None; v.len()], map)
            }
            _ => (0..rows)
                .map(|i| match self.get(i) {
                    None => Some(None),
                    Some(value) => map(value).map(Some),
                })
                .collect(),
        }
    }

    /// Whether the column is absent from its table.
    pub fn is_absent(&self) -> bool {
        matches!(self, Col::Absent)
    }
}

/// Whether a table per dictionary entry is cheaper than working row by row.
fn dictionary_pays(entries: usize, rows: usize) -> bool {
    entries <= 4 * rows + 256
}

/// Each row of a dictionary mapped through `map`, which runs once per entry: `mapped` holds,
/// per entry of `values`, None until it was mapped, then the result (None for a null entry).
/// A caller that keeps `mapped` from batch to batch maps each entry once for good.
pub(crate) fn map_dictionary<'a, K, A, T>(
    keys: &PrimitiveArray<K>,
    values: &'a A,
    mapped: &mut [Option<Option<T>>],
    mut map: impl FnMut(<&'a A as ArrayAccessor>::Item) -> Option<T>,
) -> Option<Vec<Option<T>>>
where
    K: ArrowDictionaryKeyType,
    A: Array,
    &'a A: ArrayAccessor,
    T: Copy,
{
    use arrow::datatypes::ArrowNativeType;
    let mut out = Vec::with_capacity(keys.len());
    for i in 0..keys.len() {
        if keys.is_null(i) {
            out.push(None);
            continue;
        }
        let entry = keys.value(i).as_usize();
        let value = match mapped.get(entry) {
            None => None, // a key past the dictionary reads as null, as `get` does
            Some(Some(value)) => *value,
            Some(None) => {
                let value = match values.is_valid(entry) {
                    true => Some(map(values.value(entry))?),
                    false => None,
                };
                mapped[entry] = Some(value);
                value
            }
        };
        out.push(value);
    }
    Some(out)
}

/// How [`Col::narrow_same_as_previous`] compares two rows.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Compare {
    /// The dictionary holds distinct values: rows with different keys differ.
    pub(crate) distinct: bool,
    /// The values' equality is reflexive (not floats): rows with the same key are equal
    /// without reading the values.
    pub(crate) reflexive: bool,
    /// Two nulls are equal. Otherwise a row equals the previous one only when both hold a
    /// value.
    pub(crate) nulls_equal: bool,
}

/// [`Col::narrow_same_as_previous`] for a dictionary-encoded column.
fn narrow_dict<'a, K, A>(
    keys: &PrimitiveArray<K>,
    values: &'a A,
    same: &mut [bool],
    only: impl Fn(usize) -> bool,
    how: Compare,
) where
    K: ArrowDictionaryKeyType,
    A: Array,
    &'a A: ArrayAccessor,
    <&'a A as ArrayAccessor>::Item: PartialEq,
{
    use arrow::datatypes::ArrowNativeType;
    let entries_valid = values.null_count() == 0;
    let get = |i: usize| lookup(keys.is_valid(i).then(|| keys.value(i).as_usize()), values);
    let by_value = |a: usize, b: usize| match (get(a), get(b)) {
        (Some(x), Some(y)) => x == y,
        (None, None) => how.nulls_equal,
        _ => false,
    };
    for (i, s) in same.iter_mut().enumerate().skip(1) {
        if !*s || !only(i) {
            continue;
        }
        *s = match (keys.is_valid(i - 1), keys.is_valid(i)) {
            (true, true) => {
                let (a, b) = (keys.value(i - 1).as_usize(), keys.value(i).as_usize());
                if a == b && how.reflexive && entries_valid {
                    b < values.len() || how.nulls_equal
                } else if a != b && how.distinct {
                    false
                } else {
                    by_value(i - 1, i)
                }
            }
            (false, false) => how.nulls_equal,
            _ if how.distinct => false,
            _ => by_value(i - 1, i),
        };
    }
}

#[inline(always)]
fn lookup<'a, A>(key: Option<usize>, values: &'a A) -> Option<<&'a A as ArrayAccessor>::Item>
where
    A: Array,
    &'a A: ArrayAccessor,
{
    let key = key?;
    (key < values.len() && values.is_valid(key)).then(|| values.value(key))
}

/// The struct column `name` of `batch`, if present.
pub(crate) fn struct_col<'a>(
    batch: &'a RecordBatch,
    table: PayloadType,
    name: &str,
) -> Result<Option<&'a StructArray>> {
    match batch.column_by_name(name) {
        None => Ok(None),
        Some(array) => array.as_struct_opt().map(Some).ok_or_else(|| {
            Error::schema(
                table,
                format!("column {name} should be a struct, is {}", array.data_type()),
            )
        }),
    }
}
