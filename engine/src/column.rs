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
pub(crate) enum Col<'a, A> {
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
    pub(crate) fn new(array: &'a ArrayRef) -> Option<Self> {
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
    #[inline]
    pub(crate) fn get(&self, i: usize) -> Option<<&'a A as ArrayAccessor>::Item> {
        match self {
            Col::Absent => None,
            Col::Plain(a) => a.is_valid(i).then(|| a.value(i)),
            Col::Dict8(k, v) => lookup(k.is_valid(i).then(|| k.value(i) as usize), *v),
            Col::Dict16(k, v) => lookup(k.is_valid(i).then(|| k.value(i) as usize), *v),
        }
    }

    /// Whether the column is absent from its table.
    pub(crate) fn is_absent(&self) -> bool {
        matches!(self, Col::Absent)
    }
}

#[inline]
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
