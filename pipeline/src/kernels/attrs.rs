//! Kernels on attribute tables: which rows hold a key, typed lookups by parent id, renames,
//! drops and upserts. Dictionary-encoded keys are handled through their dictionary: matching a
//! key costs one pass over the distinct keys plus one integer pass over the rows, and a rename
//! rewrites only the dictionary.

use std::collections::HashSet;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BinaryArray, BooleanArray, Float64Array, Int64Array, RecordBatch,
    StringArray, UInt8Array, UInt16Array, UInt32Array, new_null_array,
};
use arrow::buffer::BooleanBuffer;
use arrow::compute::{cast, concat_batches, filter_record_batch, not, take};
use arrow::datatypes::{DataType, Field, Schema, UInt8Type, UInt16Type};
use penstock_dialect::model::AttrType;

use crate::error::{PipelineError, Result};
use crate::rows::{IdIndex, ids_u32};
use penstock_engine::column::Col;
use penstock_engine::schema::consts::{self, value_type};
use penstock_engine::schema::{PayloadType, canonical_schema};
use penstock_engine::value::{Scalar, ValueView};

fn key_column(table: &RecordBatch) -> Result<&ArrayRef> {
    table
        .column_by_name(consts::KEY)
        .ok_or_else(|| PipelineError::Execute("attribute table without a key column".into()))
}

/// Per dictionary entry (or per row for plain keys): whether `pred` holds for the key.
fn key_mask_by(table: &RecordBatch, pred: impl Fn(&str) -> bool) -> Result<BooleanArray> {
    let keys = key_column(table)?;
    let len = table.num_rows();
    let by_entry = |values: &StringArray| -> Vec<bool> {
        (0..values.len())
            .map(|i| values.is_valid(i) && pred(values.value(i)))
            .collect()
    };
    let col = Col::<StringArray>::new(keys).ok_or_else(|| {
        PipelineError::Execute(format!("key column of type {}", keys.data_type()))
    })?;
    let bits = match col {
        Col::Absent => BooleanBuffer::new_unset(len),
        Col::Plain(values) => {
            BooleanBuffer::collect_bool(len, |i| values.is_valid(i) && pred(values.value(i)))
        }
        Col::Dict8(k, values) => {
            let hit = by_entry(values);
            let raw = k.values();
            BooleanBuffer::collect_bool(len, |i| {
                k.is_valid(i) && hit.get(usize::from(raw[i])).copied().unwrap_or(false)
            })
        }
        Col::Dict16(k, values) => {
            let hit = by_entry(values);
            let raw = k.values();
            BooleanBuffer::collect_bool(len, |i| {
                k.is_valid(i) && hit.get(usize::from(raw[i])).copied().unwrap_or(false)
            })
        }
    };
    Ok(BooleanArray::new(bits, None))
}

/// Which rows of an attribute table have key `key`.
pub(crate) fn key_mask(table: &RecordBatch, key: &str) -> Result<BooleanArray> {
    key_mask_by(table, |k| k == key)
}

/// Whether some row may have key `key`. With dictionary-encoded keys only the dictionary is
/// read (an unused dictionary entry answers yes), so the answer costs nothing per row.
fn may_have_key(table: &RecordBatch, key: &str) -> Result<bool> {
    let keys = key_column(table)?;
    Ok(match Col::<StringArray>::new(keys) {
        Some(Col::Dict8(_, values) | Col::Dict16(_, values)) => {
            values.iter().any(|v| v == Some(key))
        }
        Some(Col::Absent) => false,
        _ => key_mask(table, key)?.true_count() > 0,
    })
}

fn positions(mask: &BooleanArray) -> Vec<u32> {
    mask.values().set_indices().map(|i| i as u32).collect()
}

/// The attribute values at `rows` of `table`, read as `ty` (null where the value does not
/// convert).
fn typed_values(
    table: &RecordBatch,
    kind: PayloadType,
    rows: &[u32],
    ty: AttrType,
) -> Result<ArrayRef> {
    let view = ValueView::of_table(table, kind)?;
    let scalars = rows.iter().map(|r| view.scalar(*r as usize));
    Ok(match ty {
        AttrType::Str => Arc::new(
            scalars
                .map(|s| match s? {
                    Scalar::Str(s) => Some(s.to_string()),
                    Scalar::Int(i) => Some(i.to_string()),
                    Scalar::Double(d) => Some(d.to_string()),
                    Scalar::Bool(b) => Some(b.to_string()),
                    Scalar::Bytes(b) => Some(hex::encode(b)),
                })
                .collect::<StringArray>(),
        ),
        AttrType::Int => Arc::new(
            scalars
                .map(|s| match s? {
                    Scalar::Int(i) => Some(i),
                    Scalar::Str(s) => s.trim().parse().ok(),
                    Scalar::Double(d) if d.fract() == 0.0 && d.abs() < 9.2e18 => Some(d as i64),
                    _ => None,
                })
                .collect::<Int64Array>(),
        ),
        AttrType::Double => Arc::new(
            scalars
                .map(|s| match s? {
                    Scalar::Double(d) => Some(d),
                    Scalar::Int(i) => Some(i as f64),
                    Scalar::Str(s) => s.trim().parse().ok(),
                    _ => None,
                })
                .collect::<Float64Array>(),
        ),
        AttrType::Bool => Arc::new(
            scalars
                .map(|s| match s? {
                    Scalar::Bool(b) => Some(b),
                    Scalar::Str(s) if s.eq_ignore_ascii_case("true") => Some(true),
                    Scalar::Str(s) if s.eq_ignore_ascii_case("false") => Some(false),
                    _ => None,
                })
                .collect::<BooleanArray>(),
        ),
        AttrType::Bytes => Arc::new(
            scalars
                .map(|s| match s? {
                    Scalar::Bytes(b) => Some(b.to_vec()),
                    Scalar::Str(s) => Some(s.as_bytes().to_vec()),
                    _ => None,
                })
                .collect::<BinaryArray>(),
        ),
    })
}

/// For each of `parents`, the value of its attribute `key` read as `ty` (null when it has none).
pub(crate) fn lookup(
    table: Option<&RecordBatch>,
    kind: PayloadType,
    key: &str,
    ty: AttrType,
    parents: &UInt32Array,
) -> Result<ArrayRef> {
    let data_type = crate::types::data_type(ty.sql_type());
    let Some(table) = table else {
        return Ok(new_null_array(&data_type, parents.len()));
    };
    let rows = positions(&key_mask(table, key)?);
    if rows.is_empty() {
        return Ok(new_null_array(&data_type, parents.len()));
    }
    let values = typed_values(table, kind, &rows, ty)?;
    let all_parents = ids_u32(
        table.column_by_name(consts::PARENT_ID).cloned(),
        table.num_rows(),
    )?;
    let hit_parents: UInt32Array = rows
        .iter()
        .map(|r| all_parents.value(*r as usize))
        .collect();
    let index = IdIndex::new(&hit_parents)?;
    let picks = index.lookup(parents);
    take(&values, &picks, None).map_err(|e| PipelineError::arrow("looking up an attribute", e))
}

/// Removes the rows where `remove` is true.
pub(crate) fn remove_rows(table: &RecordBatch, remove: &BooleanArray) -> Result<RecordBatch> {
    if remove.true_count() == 0 {
        return Ok(table.clone());
    }
    let keep = not(remove).map_err(|e| PipelineError::arrow("negating a mask", e))?;
    filter_record_batch(table, &keep).map_err(|e| PipelineError::arrow("filtering attributes", e))
}

/// Rows with key `key` whose parent is in `parents`.
fn key_of_parents(table: &RecordBatch, key: &str, parents: &HashSet<u32>) -> Result<BooleanArray> {
    let mask = key_mask(table, key)?;
    let ids = ids_u32(
        table.column_by_name(consts::PARENT_ID).cloned(),
        table.num_rows(),
    )?;
    Ok(mask
        .iter()
        .zip(ids.iter())
        .map(|(m, p)| Some(m == Some(true) && p.is_some_and(|p| parents.contains(&p))))
        .collect())
}

/// The parents that have attribute `key`.
pub(crate) fn parents_with_key(table: &RecordBatch, key: &str) -> Result<HashSet<u32>> {
    let mask = key_mask(table, key)?;
    let ids = ids_u32(
        table.column_by_name(consts::PARENT_ID).cloned(),
        table.num_rows(),
    )?;
    Ok(mask
        .values()
        .set_indices()
        .filter(|&i| ids.is_valid(i))
        .map(|i| ids.value(i))
        .collect())
}

fn rename_in_strings(values: &StringArray, from: &str, to: &str) -> StringArray {
    values
        .iter()
        .map(|v| if v == Some(from) { Some(to) } else { v })
        .collect()
}

/// Renames key `from` to `to`. A parent that already has `to` keeps only the renamed value.
/// With dictionary-encoded keys only the dictionary is rewritten.
pub(crate) fn rename(table: &RecordBatch, from: &str, to: &str) -> Result<RecordBatch> {
    if from == to || !may_have_key(table, from)? {
        return Ok(table.clone());
    }
    let mut table = table.clone();
    if may_have_key(&table, to)? {
        let parents = parents_with_key(&table, from)?;
        let clash = key_of_parents(&table, to, &parents)?;
        table = remove_rows(&table, &clash)?;
    }
    let keys = key_column(&table)?;
    let renamed: ArrayRef = match keys.data_type() {
        DataType::Dictionary(k, _) if k.as_ref() == &DataType::UInt8 => {
            let dict = keys.as_dictionary::<UInt8Type>();
            let values = rename_in_strings(dict.values().as_string::<i32>(), from, to);
            // Same number of entries: the keys stay valid and are not re-validated.
            Arc::new(dict.with_values(Arc::new(values)))
        }
        DataType::Dictionary(k, _) if k.as_ref() == &DataType::UInt16 => {
            let dict = keys.as_dictionary::<UInt16Type>();
            let values = rename_in_strings(dict.values().as_string::<i32>(), from, to);
            // Same number of entries: the keys stay valid and are not re-validated.
            Arc::new(dict.with_values(Arc::new(values)))
        }
        DataType::Utf8 => Arc::new(rename_in_strings(keys.as_string::<i32>(), from, to)),
        other => {
            return Err(PipelineError::Execute(format!(
                "key column of type {other}"
            )));
        }
    };
    replace_column(&table, consts::KEY, renamed)
}

/// Drops the rows whose key is one of `keys`.
pub(crate) fn drop_keys(table: &RecordBatch, keys: &[String]) -> Result<RecordBatch> {
    let remove = key_mask_by(table, |k| keys.iter().any(|d| d == k))?;
    remove_rows(table, &remove)
}

/// `table` with column `name` replaced (its field keeps the name, takes the new type).
pub(crate) fn replace_column(
    table: &RecordBatch,
    name: &str,
    column: ArrayRef,
) -> Result<RecordBatch> {
    let schema = table.schema();
    let index = schema
        .index_of(name)
        .map_err(|e| PipelineError::arrow("replacing a column", e))?;
    let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields[index] = Field::new(
        name,
        column.data_type().clone(),
        fields[index].is_nullable(),
    );
    let mut columns = table.columns().to_vec();
    columns[index] = column;
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
        .map_err(|e| PipelineError::arrow("replacing a column", e))
}

/// New attribute rows: `key` = `values[i]` for `parents[i]` (null values are skipped), in the
/// canonical schema of `kind`.
fn new_rows(
    kind: PayloadType,
    key: &str,
    parents: &[u32],
    values: &ArrayRef,
) -> Result<RecordBatch> {
    // Logical nulls: a NULL literal evaluates to a NullArray, which has no validity buffer.
    let nulls = values.logical_nulls();
    let valid: Vec<u32> = (0..values.len())
        .filter(|i| nulls.as_ref().is_none_or(|n| n.is_valid(*i)))
        .map(|i| i as u32)
        .collect();
    let values = take(values, &UInt32Array::from(valid.clone()), None)
        .map_err(|e| PipelineError::arrow("selecting new attribute values", e))?;
    let n = valid.len();
    let parent: ArrayRef = if kind.attrs_parent_is_u16() == Some(true) {
        Arc::new(UInt16Array::from_iter_values(
            valid.iter().map(|i| parents[*i as usize] as u16),
        ))
    } else {
        Arc::new(UInt32Array::from_iter_values(
            valid.iter().map(|i| parents[*i as usize]),
        ))
    };
    // Maps and arrays come as a struct of their type and their CBOR.
    let (values, serialized) = match values.as_struct_opt() {
        Some(s) => match (
            s.column_by_name(consts::TYPE),
            s.column_by_name(consts::SER),
        ) {
            (Some(types), Some(ser)) => {
                let ty = types
                    .as_primitive_opt::<UInt8Type>()
                    .filter(|t| !t.is_empty())
                    .map_or(value_type::MAP, |t| t.value(0));
                (Arc::clone(ser), Some(ty))
            }
            _ => (values, None),
        },
        None => (values, None),
    };
    let (ty, column) = match values.data_type() {
        _ if serialized.is_some() => (serialized.unwrap_or(value_type::MAP), consts::SER),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => (value_type::STR, consts::STR),
        DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32
        | DataType::UInt64
        | DataType::Timestamp(..)
        | DataType::Duration(_) => (value_type::INT, consts::INT),
        DataType::Float16 | DataType::Float32 | DataType::Float64 | DataType::Decimal128(..) => {
            (value_type::DOUBLE, consts::DOUBLE)
        }
        DataType::Boolean => (value_type::BOOL, consts::BOOL),
        DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::FixedSizeBinary(_) => (value_type::BYTES, consts::BYTES),
        _ => (value_type::STR, consts::STR),
    };
    let schema = canonical_schema(kind);
    let mut columns = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        let name = field.name().as_str();
        let array: ArrayRef = if name == consts::PARENT_ID {
            Arc::clone(&parent)
        } else if name == consts::KEY {
            Arc::new(StringArray::from_iter_values(std::iter::repeat_n(key, n)))
        } else if name == consts::TYPE {
            Arc::new(UInt8Array::from(vec![ty; n]))
        } else if name == column {
            let values = match values.data_type() {
                DataType::Timestamp(..) | DataType::Duration(_) => cast(&values, &DataType::Int64),
                _ => Ok(Arc::clone(&values)),
            }
            .and_then(|v| cast(&v, field.data_type()))
            .map_err(|e| PipelineError::arrow("converting an attribute value", e))?;
            if values.null_count() > 0 {
                return Err(PipelineError::Execute(format!(
                    "a value for attribute '{key}' does not fit its type"
                )));
            }
            values
        } else {
            new_null_array(field.data_type(), n)
        };
        columns.push(array);
    }
    RecordBatch::try_new(schema, columns)
        .map_err(|e| PipelineError::arrow("building attributes", e))
}

/// A type wide enough for both: dictionaries get 16-bit keys.
fn widened(data_type: &DataType) -> DataType {
    match data_type {
        DataType::Dictionary(k, v) if k.as_ref() == &DataType::UInt8 => {
            DataType::Dictionary(Box::new(DataType::UInt16), v.clone())
        }
        other => other.clone(),
    }
}

/// Concatenates attribute tables of `kind` whose columns may differ in presence and encoding:
/// each column takes the type the first table has it in (dictionaries with 16-bit keys).
pub(crate) fn concat_attrs(kind: PayloadType, tables: &[RecordBatch]) -> Result<RecordBatch> {
    concat_with(kind, tables, |types, _| widened(types[0]))
}

/// Concatenates attribute tables of `kind` as [`concat_attrs`] does, except that a column the
/// tables have in different types is made plain (a dictionary's values), so that no value is
/// hashed into a dictionary; dictionaries that would overflow together are made plain too.
pub(crate) fn concat_loose(kind: PayloadType, tables: &[RecordBatch]) -> Result<RecordBatch> {
    let kept = concat_with(kind, tables, |types, canonical| {
        let dictionaries = types
            .iter()
            .all(|t| matches!(t, DataType::Dictionary(_, v) if v.as_ref() == canonical));
        match types.iter().all(|t| *t == types[0]) {
            true => types[0].clone(),
            false if dictionaries => widened(types[0]),
            false => canonical.clone(),
        }
    });
    match kept {
        Ok(table) => Ok(table),
        // Dictionaries whose values together pass their keys' width: plain columns.
        Err(_) => concat_with(kind, tables, |_, canonical| canonical.clone()),
    }
}

/// Concatenates attribute tables of `kind`; `choose` gives the type of a column from the types
/// the tables that have it have it in, and its canonical type.
fn concat_with(
    kind: PayloadType,
    tables: &[RecordBatch],
    choose: impl Fn(&[&DataType], &DataType) -> DataType,
) -> Result<RecordBatch> {
    let canonical = canonical_schema(kind);
    let fields: Vec<Field> = canonical
        .fields()
        .iter()
        .filter(|f| tables.iter().any(|t| t.column_by_name(f.name()).is_some()))
        .map(|f| {
            let types: Vec<&DataType> = tables
                .iter()
                .filter_map(|t| t.column_by_name(f.name()).map(|c| c.data_type()))
                .collect();
            Field::new(f.name(), choose(&types, f.data_type()), f.is_nullable())
        })
        .collect();
    let schema = Arc::new(Schema::new(fields));
    let aligned = tables
        .iter()
        .map(|t| {
            let columns = schema
                .fields()
                .iter()
                .map(|f| match t.column_by_name(f.name()) {
                    Some(c) if c.data_type() == f.data_type() => Ok(Arc::clone(c)),
                    Some(c) => cast(c, f.data_type()),
                    None => Ok(new_null_array(f.data_type(), t.num_rows())),
                })
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| PipelineError::arrow("aligning attribute tables", e))?;
            RecordBatch::try_new(Arc::clone(&schema), columns)
                .map_err(|e| PipelineError::arrow("aligning attribute tables", e))
        })
        .collect::<Result<Vec<_>>>()?;
    concat_batches(&schema, &aligned)
        .map_err(|e| PipelineError::arrow("concatenating attributes", e))
}

/// Sets attribute `key` of each of `parents` to `values[i]` (replacing any previous value; a
/// null value removes the attribute).
pub(crate) fn upsert(
    table: Option<&RecordBatch>,
    kind: PayloadType,
    key: &str,
    parents: &[u32],
    values: &ArrayRef,
) -> Result<Option<RecordBatch>> {
    let added = new_rows(kind, key, parents, values)?;
    let kept = match table {
        Some(t) => {
            let set: HashSet<u32> = parents.iter().copied().collect();
            Some(remove_rows(t, &key_of_parents(t, key, &set)?)?)
        }
        None => None,
    };
    let tables: Vec<RecordBatch> = kept
        .into_iter()
        .chain(Some(added))
        .filter(|t| t.num_rows() > 0)
        .collect();
    if tables.is_empty() {
        return Ok(None);
    }
    concat_attrs(kind, &tables).map(Some)
}

/// Rows whose parent id is in `parents` (as a mask over `table`).
pub(crate) fn rows_of_parents(
    table: &RecordBatch,
    parents: &dyn Fn(u32) -> bool,
) -> Result<BooleanArray> {
    let ids = ids_u32(
        table.column_by_name(consts::PARENT_ID).cloned(),
        table.num_rows(),
    )?;
    let bits = BooleanBuffer::collect_bool(ids.len(), |i| ids.is_valid(i) && parents(ids.value(i)));
    Ok(BooleanArray::new(bits, None))
}

/// Keeps only the rows whose key is one of `keys`.
pub(crate) fn drop_keys_except(table: &RecordBatch, keys: &[String]) -> Result<RecordBatch> {
    let remove = key_mask_by(table, |k| !keys.iter().any(|d| d == k))?;
    remove_rows(table, &remove)
}
