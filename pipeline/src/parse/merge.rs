//! Merging made attributes into an attribute table.
//!
//! Records: one pass. Entries of the same row and key keep the last one made; an entry that
//! comes after the map's own attributes replaces the row's attribute of that key, one that
//! comes before it gives way to it; without the map's own attributes, every attribute of a
//! row whose text was read is replaced (a row whose text did not parse keeps its own). Only keys both made and already present are ever compared, and a
//! dictionary-encoded key column is read through its dictionary.
//!
//! Resources and scopes are shared by rows: each key made is set as an `UPDATE` of that one
//! attribute sets it, which moves the rows that get a value their resource does not have to a
//! copy of it.

use std::collections::HashMap;
use std::sync::Arc;

use ahash::RandomState;
use arrow::array::AsArray;
use arrow::array::PrimitiveArray;
use arrow::array::{
    Array, ArrayRef, BinaryArray, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray,
    StructArray, UInt8Array,
};
use arrow::buffer::BooleanBuffer;
use arrow::compute::cast;
use arrow::datatypes::{ArrowPrimitiveType, DataType, Field, Fields};
use penstock_dialect::model::AttrScope;
use penstock_engine::OtapBatch;
use penstock_engine::column::Col;
use penstock_engine::schema::PayloadType;
use penstock_engine::schema::consts::{self, value_type};

use super::made::{Made, MadeAttrs};
use crate::error::{PipelineError, Result};
use crate::kernels::assign::{ensure_ids, set_attr};
use crate::kernels::attrs::{concat_loose, parents_with_key, remove_rows, rows_of_parents};
use crate::rows::{Rows, attrs_of, ids_u32};

/// Keys a resource or scope merge sets at most per batch (each is one pass over the batch's
/// attribute table, so keys made by the thousand from hostile text cannot stall a worker);
/// those made after them are not set.
pub(crate) const MAX_ENVELOPE_KEYS: usize = 256;

/// Which entries of `made` stand: the last of each row and key (`several`: entries of one row
/// may come from several functions, so they are not together).
fn standing(made: &MadeAttrs, several: bool) -> Vec<bool> {
    let mut alive = vec![true; made.len()];
    if several {
        let mut last: HashMap<u64, usize, RandomState> =
            HashMap::with_capacity_and_hasher(made.len(), RandomState::new());
        for i in 0..made.len() {
            let pair = (u64::from(made.rows[i]) << 32) | u64::from(made.keys[i]);
            if let Some(before) = last.insert(pair, i) {
                alive[before] = false;
            }
        }
        return alive;
    }
    // One function: a row's entries are together; a key twice in one row is rare.
    let mut seen: Vec<usize> = vec![usize::MAX; made.names.len()];
    let mut start = 0;
    while start < made.len() {
        let row = made.rows[start];
        let mut end = start;
        while end < made.len() && made.rows[end] == row {
            let key = made.keys[end] as usize;
            if seen[key] != usize::MAX && seen[key] >= start {
                alive[seen[key]] = false;
            }
            seen[key] = end;
            end += 1;
        }
        start = end;
    }
    alive
}

/// For each row of attribute table `table`, the id its key has in `made` (None: a key nothing
/// made).
fn made_ids_of_keys(table: &RecordBatch, made: &MadeAttrs) -> Result<Vec<Option<u32>>> {
    let len = table.num_rows();
    let Some(keys) = table.column_by_name(consts::KEY) else {
        return Ok(vec![None; len]);
    };
    let by_entry = |values: &StringArray| -> Vec<Option<u32>> {
        values
            .iter()
            .map(|v| v.and_then(|v| made.id_of(v)))
            .collect()
    };
    Ok(match Col::<StringArray>::new(keys) {
        Some(Col::Plain(values)) => by_entry(values),
        Some(Col::Dict8(k, values)) => through(k, &by_entry(values)),
        Some(Col::Dict16(k, values)) => through(k, &by_entry(values)),
        Some(Col::Absent) => vec![None; len],
        // Other encodings (large or view strings, wider dictionaries) are read as text.
        None => {
            let text = cast(keys, &DataType::Utf8)
                .map_err(|e| PipelineError::arrow("reading attribute keys", e))?;
            by_entry(text.as_string::<i32>())
        }
    })
}

/// For each of dictionary keys `keys`, the id of its entry (`ids` per entry).
fn through<K>(keys: &PrimitiveArray<K>, ids: &[Option<u32>]) -> Vec<Option<u32>>
where
    K: ArrowPrimitiveType,
    K::Native: Into<usize>,
{
    keys.iter()
        .map(|k| k.and_then(|k| ids.get(k.into()).copied().flatten()))
        .collect()
}

/// Merges `made` (entries of rows of `space`) into the record attributes: see the module.
/// `read` tells, per row, whether some function read its text.
pub(super) fn into_records(
    batch: OtapBatch,
    space: PayloadType,
    made: MadeAttrs,
    several: bool,
    keeps_existing: bool,
    read: &[bool],
) -> Result<OtapBatch> {
    let kind = attrs_of(space);
    if made.len() == 0 && keeps_existing {
        return Ok(batch);
    }
    let (mut out, ids) = ensure_ids(&batch, space)?;
    let mut alive = standing(&made, several);
    let existing = out.get(kind).cloned();
    let kept = match &existing {
        None => None,
        Some(table) if !keeps_existing => {
            // Replaced: the attributes of the rows whose text was read.
            let mut parents: Vec<bool> = Vec::new();
            for row in (0..read.len()).filter(|r| read[*r]) {
                let id = ids.value(row) as usize;
                if parents.len() <= id {
                    parents.resize(id + 1, false);
                }
                parents[id] = true;
            }
            let replaced = rows_of_parents(table, &|p| parents.get(p as usize) == Some(&true))?;
            Some(remove_rows(table, &replaced)?)
        }
        Some(table) => {
            let keys = made_ids_of_keys(table, &made)?;
            let mut shared = vec![false; made.names.len()];
            for key in keys.iter().flatten() {
                shared[*key as usize] = true;
            }
            if shared.iter().any(|s| *s) {
                // (parent, key) of the standing entries whose key the table has too.
                let mut pairs: HashMap<u64, usize, RandomState> = HashMap::default();
                for i in (0..made.len()).filter(|i| alive[*i] && shared[made.keys[*i] as usize]) {
                    let parent = ids.value(made.rows[i] as usize);
                    pairs.insert((u64::from(parent) << 32) | u64::from(made.keys[i]), i);
                }
                let parents = ids_u32(
                    table.column_by_name(consts::PARENT_ID).cloned(),
                    table.num_rows(),
                )?;
                let mut replaced = vec![false; table.num_rows()];
                for (row, key) in keys.iter().enumerate() {
                    let (Some(key), true) = (key, parents.is_valid(row)) else {
                        continue;
                    };
                    let pair = (u64::from(parents.value(row)) << 32) | u64::from(*key);
                    if let Some(&entry) = pairs.get(&pair) {
                        match made.yields[entry] {
                            true => alive[entry] = false,
                            false => replaced[row] = true,
                        }
                    }
                }
                Some(remove_rows(table, &BooleanArray::from(replaced))?)
            } else {
                Some(table.clone())
            }
        }
    };
    let added = made.into_table(kind, &ids, Some(&alive))?;
    let tables: Vec<RecordBatch> = kept
        .into_iter()
        .chain([added])
        .filter(|t| t.num_rows() > 0)
        .collect();
    match tables.is_empty() {
        true => {
            out.take(kind);
        }
        false => out.set(kind, concat_loose(kind, &tables)?)?,
    }
    Ok(out)
}

/// Sets each key of `made` (entries of rows of `space`) in the resource or scope attributes,
/// as `UPDATE ... SET resource.attributes['key'] = ...` does; an entry that gives way to the
/// map's own attributes is set only where the resource (or scope) lacks the key.
pub(super) fn into_envelopes(
    mut batch: OtapBatch,
    space: PayloadType,
    scope: AttrScope,
    made: MadeAttrs,
    several: bool,
) -> Result<OtapBatch> {
    let alive = standing(&made, several);
    let rows = batch.get(space).map_or(0, RecordBatch::num_rows);
    let kind = match scope {
        AttrScope::Resource => PayloadType::ResourceAttrs,
        _ => PayloadType::ScopeAttrs,
    };
    // The standing entries of each key, the first MAX_ENVELOPE_KEYS keys only.
    let mut by_key: Vec<Vec<usize>> = vec![Vec::new(); made.names.len()];
    for i in (0..made.len()).filter(|i| alive[*i]) {
        by_key[made.keys[i] as usize].push(i);
    }
    for (key_id, entries) in by_key.into_iter().enumerate().take(MAX_ENVELOPE_KEYS) {
        let key = &made.names[key_id];
        // Per value type, the rows getting a value of that type, and their values.
        let mut by_type: Vec<(u8, Vec<usize>)> = Vec::new();
        for i in entries {
            let ty = made.type_of(i);
            match by_type.iter_mut().find(|(t, _)| *t == ty) {
                Some((_, entries)) => entries.push(i),
                None => by_type.push((ty, vec![i])),
            }
        }
        for (ty, entries) in by_type {
            // Entries that give way to the map's own attributes skip rows that have the key.
            let present = match entries.iter().any(|i| made.yields[*i]) {
                true => envelopes_with_key(&batch, space, scope, kind, key)?,
                false => vec![false; rows],
            };
            let chosen: Vec<usize> = entries
                .into_iter()
                .filter(|i| !(made.yields[*i] && present[made.rows[*i] as usize]))
                .collect();
            if chosen.is_empty() {
                continue;
            }
            let mask = BooleanArray::new(
                {
                    let mut bits = vec![false; rows];
                    for i in &chosen {
                        bits[made.rows[*i] as usize] = true;
                    }
                    BooleanBuffer::from(bits)
                },
                None,
            );
            let values = values_of(&made, ty, &chosen, rows);
            batch = set_attr(&batch, space, scope, key, &mask, &values)?;
        }
    }
    Ok(batch)
}

/// For each row of `space`, whether its resource (or scope) has attribute `key`.
fn envelopes_with_key(
    batch: &OtapBatch,
    space: PayloadType,
    scope: AttrScope,
    kind: PayloadType,
    key: &str,
) -> Result<Vec<bool>> {
    let rows = Rows::new(batch, space)?;
    let holders = match batch.get(kind) {
        Some(attrs) => parents_with_key(attrs, key)?,
        None => return Ok(vec![false; rows.len()]),
    };
    // Data points read their metric's resource and scope.
    let ids = rows.attr_parents(scope)?;
    Ok(ids
        .iter()
        .map(|id| id.is_some_and(|id| holders.contains(&id)))
        .collect())
}

/// The values of `entries` (all of type `ty`) at their rows, in an array of `rows` rows: of
/// the value's own type, or for maps and arrays a struct of `type` and `ser` (CBOR).
fn values_of(made: &MadeAttrs, ty: u8, entries: &[usize], rows: usize) -> ArrayRef {
    let mut at: Vec<Option<usize>> = vec![None; rows];
    for i in entries {
        at[made.rows[*i] as usize] = Some(*i);
    }
    let value = |r: usize| at[r].map(|i| made.value(i));
    match ty {
        value_type::INT => Arc::new(Int64Array::from_iter((0..rows).map(|r| match value(r) {
            Some(Made::Int(v)) => Some(v),
            _ => None,
        }))),
        value_type::DOUBLE => {
            Arc::new(Float64Array::from_iter((0..rows).map(|r| match value(r) {
                Some(Made::Double(v)) => Some(v),
                _ => None,
            })))
        }
        value_type::BOOL => Arc::new(BooleanArray::from_iter((0..rows).map(|r| match value(r) {
            Some(Made::Bool(v)) => Some(v),
            _ => None,
        }))),
        value_type::MAP | value_type::SLICE => {
            let ser = BinaryArray::from_iter((0..rows).map(|r| match value(r) {
                Some(Made::Map(b) | Made::Slice(b)) => Some(b.to_vec()),
                _ => None,
            }));
            let types = UInt8Array::from(vec![ty; rows]);
            let fields = Fields::from(vec![
                Field::new(consts::TYPE, DataType::UInt8, false),
                Field::new(consts::SER, DataType::Binary, true),
            ]);
            Arc::new(StructArray::new(
                fields,
                vec![Arc::new(types), Arc::new(ser)],
                None,
            ))
        }
        _ => Arc::new(StringArray::from_iter((0..rows).map(|r| match value(r) {
            Some(Made::Str(v)) => Some(v.to_string()),
            _ => None,
        }))),
    }
}
