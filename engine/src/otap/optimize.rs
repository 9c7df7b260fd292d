//! Transport optimization before OTAP encoding: rows are ordered and ids renumbered so that the
//! id transport encodings are small non-negative deltas, as the reference consumers expect.
//!
//! - The root table is sorted (stably) by `resource.id`, `scope.id`; resource and scope ids are
//!   renumbered in row order, and their attribute tables regrouped under the new ids.
//! - Every table with an `id` gets ids `0..n` in row order; its children's `parent_id`s are
//!   remapped (children whose parent is missing are dropped).
//! - Child tables are sorted so that rows of a quasi-delta run are ordered by parent id:
//!   attributes by (key, value, parent id), events by (name, parent id), links by (trace id,
//!   parent id), exemplars by (value, parent id), data points by parent id. An attribute table
//!   whose keys already form blocks (one that arrived in transport order) keeps its order: the
//!   encoder checks each run's parent ids as it encodes them and sorts the table only if needed.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::PrimitiveArray;
use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, StringArray, StructArray, UInt32Array};
use arrow::compute::take_record_batch;
use arrow::datatypes::{ArrowDictionaryKeyType, ArrowNativeType};

use arrow::datatypes::{DataType, Field, FieldRef, Schema};

use super::ids::{IdMap, IdValues, Width, read_ids};
use crate::batch::OtapBatch;
use crate::column::Col;
use crate::error::{Error, Result};
use crate::otlp::encode::index::{ChildIndex, struct_ids};
use crate::schema::consts::value_type;
use crate::schema::{ParentKind, PayloadType, consts};
use crate::value::{Scalar, ValueView};

/// Stable counting sort of `order` by `keys[row]` (keys below `bound`).
fn counting_sort(order: &mut Vec<u32>, keys: &[u32], bound: usize) {
    let mut starts = vec![0u32; bound + 1];
    for row in order.iter() {
        starts[keys[*row as usize] as usize + 1] += 1;
    }
    for i in 1..starts.len() {
        starts[i] += starts[i - 1];
    }
    let mut sorted = vec![0u32; order.len()];
    for row in order.iter() {
        let slot = &mut starts[keys[*row as usize] as usize];
        sorted[*slot as usize] = *row;
        *slot += 1;
    }
    *order = sorted;
}

/// Dense codes for the distinct values of a column, in order of first appearance.
fn codes<T: std::hash::Hash + Eq>(values: impl Iterator<Item = T>) -> (Vec<u32>, usize) {
    let mut seen: HashMap<T, u32, ahash::RandomState> = HashMap::default();
    let codes = values
        .map(|v| {
            let next = seen.len() as u32;
            *seen.entry(v).or_insert(next)
        })
        .collect();
    (codes, seen.len())
}

/// Codes for a string column in order of first appearance (null rows share the last code).
/// A dictionary's entries are hashed once each, not once per row.
fn string_codes(column: &Col<'_, StringArray>, rows: usize) -> (Vec<u32>, usize) {
    let mut seen: HashMap<&str, u32, ahash::RandomState> = HashMap::default();
    let mapped = column
        .map_values(rows, |s| {
            let next = seen.len() as u32;
            Some(*seen.entry(s).or_insert(next))
        })
        .unwrap_or_default();
    let null = seen.len() as u32;
    let codes = mapped.into_iter().map(|c| c.unwrap_or(null)).collect();
    (codes, null as usize + 1)
}

fn is_identity(order: &[u32]) -> bool {
    order.iter().enumerate().all(|(i, r)| *r as usize == i)
}

fn take(table: &RecordBatch, order: &[u32], kind: PayloadType) -> Result<RecordBatch> {
    if is_identity(order) && order.len() == table.num_rows() {
        return Ok(table.clone());
    }
    take_record_batch(table, &UInt32Array::from(order.to_vec()))
        .map_err(|e| Error::arrow(format!("reordering {kind:?}"), e))
}

/// Replaces (or adds) a top-level column.
fn with_column(
    table: &RecordBatch,
    name: &str,
    array: ArrayRef,
    kind: PayloadType,
) -> Result<RecordBatch> {
    let schema = table.schema();
    let mut fields: Vec<FieldRef> = schema.fields().iter().cloned().collect();
    let mut columns = table.columns().to_vec();
    let field = Arc::new(Field::new(name, array.data_type().clone(), true));
    match schema.index_of(name) {
        Ok(i) => {
            fields[i] = Arc::new(Field::new(
                name,
                array.data_type().clone(),
                schema.field(i).is_nullable(),
            ));
            columns[i] = array;
        }
        Err(_) => {
            fields.push(field);
            columns.push(array);
        }
    }
    RecordBatch::try_new(
        Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone())),
        columns,
    )
    .map_err(|e| Error::arrow(format!("rebuilding {kind:?}"), e))
}

/// Replaces the `id` child of a struct column (`resource` / `scope`).
fn with_struct_id(
    table: &RecordBatch,
    name: &str,
    ids: ArrayRef,
    kind: PayloadType,
) -> Result<RecordBatch> {
    let Some(column) = table.column_by_name(name) else {
        return Ok(table.clone());
    };
    let Some(s) = column.as_struct_opt() else {
        return Err(Error::schema(kind, format!("{name} should be a struct")));
    };
    let DataType::Struct(fields) = column.data_type() else {
        return Err(Error::schema(kind, format!("{name} should be a struct")));
    };
    let mut new_fields: Vec<FieldRef> = fields.iter().cloned().collect();
    let mut children = s.columns().to_vec();
    let id_field = Arc::new(Field::new(consts::ID, ids.data_type().clone(), true));
    match fields.iter().position(|f| f.name() == consts::ID) {
        Some(i) => {
            new_fields[i] = id_field;
            children[i] = ids;
        }
        None => {
            new_fields.insert(0, id_field);
            children.insert(0, ids);
        }
    }
    // The struct stays valid where it was; rows where it was null keep their (now set) id.
    let rebuilt = StructArray::try_new(new_fields.into(), children, None)
        .map_err(|e| Error::arrow(format!("rebuilding {kind:?}.{name}"), e))?;
    with_column(table, name, Arc::new(rebuilt), kind)
}

/// Renumbers a root struct id (`resource.id` or `scope.id`) in row order: a new id starts
/// wherever `group` changes. Returns the new ids and, per new id, the old id (`pick`).
fn renumber_groups<K, G: PartialEq>(
    keys: &[K],
    group: impl Fn(&K) -> G,
    pick: impl Fn(&K) -> Option<u32>,
) -> (Vec<u32>, Vec<Option<u32>>) {
    let mut new_ids = Vec::with_capacity(keys.len());
    let mut old_of_new = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        if i == 0 || group(&keys[i - 1]) != group(key) {
            old_of_new.push(pick(key));
        }
        new_ids.push(old_of_new.len() as u32 - 1);
    }
    (new_ids, old_of_new)
}

/// Rebuilds an attribute table under new parent ids: for each new id, the rows of the old id.
fn regroup_attrs(
    attrs: Option<&RecordBatch>,
    kind: PayloadType,
    old_of_new: &[Option<u32>],
) -> Result<Option<RecordBatch>> {
    let Some(attrs) = attrs else { return Ok(None) };
    let index = ChildIndex::build(Some(attrs), kind, consts::PARENT_ID)?;
    let mut rows = Vec::new();
    let mut parents = Vec::new();
    for (new, old) in old_of_new.iter().enumerate() {
        index.for_each(*old, |row| {
            rows.push(row as u32);
            parents.push(Some(new as u32));
            Ok(())
        })?;
    }
    if rows.is_empty() {
        return Ok(None);
    }
    let taken = take(attrs, &rows, kind)?;
    with_column(&taken, consts::PARENT_ID, Width::U16.array(parents), kind).map(Some)
}

/// Remaps a child table's `parent_id` through `new_of_old` (dropping orphans), then sorts it.
fn remap_and_sort(
    table: &RecordBatch,
    kind: PayloadType,
    new_of_old: &IdMap,
) -> Result<Option<RecordBatch>> {
    let column = table
        .column_by_name(consts::PARENT_ID)
        .ok_or_else(|| Error::schema(kind, "missing parent_id"))?;
    let (width, old) = IdValues::read(column, kind, consts::PARENT_ID)?;
    let (keep, parents) = remap_parents(&old, new_of_old);
    if parents.is_empty() {
        return Ok(None);
    }
    let table = match keep {
        Some(keep) => take(table, &keep, kind)?,
        None => table.clone(),
    };
    let mut order: Vec<u32> = (0..parents.len() as u32).collect();
    let attributes = kind.parent_kind() == Some(ParentKind::Attributes);
    // Attribute tables whose keys already form blocks (as in tables that arrived in transport
    // order) keep their order; the encoder sorts one whose parent ids turn out out of order.
    let keep_order = attributes && keys_grouped(&table, kind)?;
    if !keep_order {
        let bound = parents.iter().max().map_or(0, |m| *m as usize + 1);
        counting_sort(&mut order, &parents, bound);
    }
    match kind.parent_kind() {
        Some(ParentKind::Attributes) if !keep_order => {
            sort_by_key_and_value(&table, kind, &mut order)?
        }
        Some(ParentKind::Columnar) => {
            let eq_codes = columnar_codes(&table, kind)?;
            if let Some((c, distinct)) = eq_codes {
                counting_sort(&mut order, &c, distinct);
            }
        }
        _ => {}
    }
    let sorted_parents = IdValues::Dense(order.iter().map(|r| parents[*r as usize]).collect());
    let table = take(&table, &order, kind)?;
    let parents = sorted_parents.into_array(width);
    with_column(&table, consts::PARENT_ID, parents, kind).map(Some)
}

/// The new parent id of each row whose parent has one, and those rows (None when they are
/// all the rows: the common case, where no parent was dropped).
fn remap_parents(old: &IdValues, new_of_old: &IdMap) -> (Option<Vec<u32>>, Vec<u32>) {
    if let (IdValues::Dense(old), IdMap::Dense(slots)) = (old, new_of_old) {
        let mapped: Vec<u32> = old
            .iter()
            .map(|p| slots.get(*p as usize).copied().unwrap_or(IdMap::ABSENT))
            .collect();
        if !mapped.contains(&IdMap::ABSENT) {
            return (None, mapped);
        }
        let mut keep = Vec::with_capacity(mapped.len());
        let mut parents = Vec::with_capacity(mapped.len());
        for (row, new) in mapped.into_iter().enumerate() {
            if new != IdMap::ABSENT {
                keep.push(row as u32);
                parents.push(new);
            }
        }
        return (Some(keep), parents);
    }
    let mut keep = Vec::with_capacity(old.len());
    let mut parents = Vec::with_capacity(old.len());
    old.for_each(|row, p| {
        if let Some(new) = p.and_then(|p| new_of_old.get(p)) {
            keep.push(row as u32);
            parents.push(new);
        }
    });
    (Some(keep), parents)
}

/// Codes of the equality columns of a columnar quasi-delta table.
fn columnar_codes(table: &RecordBatch, kind: PayloadType) -> Result<Option<(Vec<u32>, usize)>> {
    use arrow::array::{FixedSizeBinaryArray, Float64Array, Int64Array};
    let n = table.num_rows();
    Ok(match kind {
        PayloadType::SpanEvents => {
            let name = Col::<StringArray>::of(table, kind, consts::NAME)?;
            Some(codes((0..n).map(|i| name.get(i).unwrap_or(""))))
        }
        PayloadType::SpanLinks => {
            let trace = Col::<FixedSizeBinaryArray>::of(table, kind, consts::TRACE_ID)?;
            Some(codes((0..n).map(|i| trace.get(i))))
        }
        _ => {
            let int = Col::<Int64Array>::of(table, kind, consts::INT_VALUE)?;
            let double = Col::<Float64Array>::of(table, kind, consts::DOUBLE_VALUE)?;
            // Group by value as the run test compares it (IEEE ==): -0.0 with 0.0. NaN never
            // continues a run, so its grouping does not matter.
            let bits = |d: f64| if d == 0.0 { 0u64 } else { d.to_bits() };
            Some(codes((0..n).map(|i| (int.get(i), double.get(i).map(bits)))))
        }
    })
}

/// Renumbers the rows that carry an id `0, 1, 2, ...` in row order (rows without an id keep
/// none); returns the new table and the old → new id map.
fn renumber_ids(
    table: &RecordBatch,
    kind: PayloadType,
    width: Width,
) -> Result<(RecordBatch, IdMap)> {
    let Some(column) = table.column_by_name(consts::ID) else {
        return Ok((table.clone(), IdMap::Dense(Vec::new())));
    };
    let (_, old) = read_ids(column, kind, consts::ID)?;
    let mut map = IdMap::with_capacity_for(old.iter().flatten().copied());
    let mut next = 0u32;
    let mut new = Vec::with_capacity(old.len());
    for id in &old {
        new.push(match id {
            Some(id) => {
                if !map.insert(*id, next) {
                    return Err(Error::ids(kind, format!("id {id} appears more than once")));
                }
                next += 1;
                Some(next - 1)
            }
            None => None,
        });
    }
    if width == Width::U16 && next > 1 << 16 {
        return Err(Error::LimitExceeded(format!(
            "{next} {kind:?} rows carry ids; an OTAP batch addresses at most 65536"
        )));
    }
    Ok((with_column(table, consts::ID, width.array(new), kind)?, map))
}

/// Produces the transport-ordered tables of a batch (ids still plain).
pub(crate) fn optimize(batch: &OtapBatch) -> Result<Vec<(PayloadType, RecordBatch)>> {
    let signal = batch.signal();
    let root_kind = signal.root();
    let Some(root) = batch.root() else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();

    // Root: group by resource, then scope.
    let res = struct_ids(root, root_kind, consts::RESOURCE)?;
    let scope = struct_ids(root, root_kind, consts::SCOPE)?;
    let mut order: Vec<u32> = (0..root.num_rows() as u32).collect();
    let keys: Vec<(Option<u32>, Option<u32>)> =
        res.iter().copied().zip(scope.iter().copied()).collect();
    if !(1..keys.len()).all(|i| keys[i - 1] <= keys[i]) {
        order.sort_by_key(|r| keys[*r as usize]);
    }
    let root = take(root, &order, root_kind)?;
    let sorted_keys: Vec<_> = order.iter().map(|r| keys[*r as usize]).collect();
    let (res_ids, res_old) = renumber_groups(&sorted_keys, |k| k.0, |k| k.0);
    let (scope_ids, scope_old) = renumber_groups(&sorted_keys, |k| *k, |k| k.1);
    let root = with_struct_id(
        &root,
        consts::RESOURCE,
        Width::U16.array(res_ids.into_iter().map(Some).collect()),
        root_kind,
    )?;
    let root = with_struct_id(
        &root,
        consts::SCOPE,
        Width::U16.array(scope_ids.into_iter().map(Some).collect()),
        root_kind,
    )?;
    if let Some(t) = regroup_attrs(
        batch.get(PayloadType::ResourceAttrs),
        PayloadType::ResourceAttrs,
        &res_old,
    )? {
        out.push((
            PayloadType::ResourceAttrs,
            sort_attrs(t, PayloadType::ResourceAttrs)?,
        ));
    }
    if let Some(t) = regroup_attrs(
        batch.get(PayloadType::ScopeAttrs),
        PayloadType::ScopeAttrs,
        &scope_old,
    )? {
        out.push((
            PayloadType::ScopeAttrs,
            sort_attrs(t, PayloadType::ScopeAttrs)?,
        ));
    }

    // Ids, top-down: each table's children are remapped through its old → new id map.
    let (root, root_map) = renumber_ids(&root, root_kind, Width::U16)?;
    out.insert(0, (root_kind, root));
    let mut pending = vec![(root_kind, root_map)];
    while let Some((parent, map)) = pending.pop() {
        for child in parent.children() {
            let Some(table) = batch.get(child) else {
                continue;
            };
            let Some(table) = remap_and_sort(table, child, &map)? else {
                continue;
            };
            if child.is_attrs() {
                out.push((child, table));
            } else {
                let (table, child_map) = renumber_ids(&table, child, Width::U32)?;
                out.push((child, table));
                pending.push((child, child_map));
            }
        }
    }
    Ok(out)
}

/// Whether the rows of each key form one block, judged by dictionary key (false for keys that
/// are not dictionary-encoded, and for null keys).
fn keys_grouped(table: &RecordBatch, kind: PayloadType) -> Result<bool> {
    fn blocks<K: ArrowDictionaryKeyType>(keys: &PrimitiveArray<K>, entries: usize) -> bool {
        if keys.null_count() > 0 {
            return false;
        }
        let mut seen = vec![false; entries];
        let mut previous = None;
        for key in keys.values().iter() {
            let key = key.as_usize();
            if previous != Some(key) {
                match seen.get_mut(key) {
                    Some(s) if !*s => *s = true,
                    _ => return false,
                }
                previous = Some(key);
            }
        }
        true
    }
    Ok(match Col::<StringArray>::of(table, kind, consts::KEY)? {
        Col::Dict8(keys, values) => blocks(keys, values.len()),
        Col::Dict16(keys, values) => blocks(keys, values.len()),
        _ => false,
    })
}

/// Sorts an attribute table by (key, value, parent id), stably.
pub(crate) fn sort_attrs(table: RecordBatch, kind: PayloadType) -> Result<RecordBatch> {
    let column = table
        .column_by_name(consts::PARENT_ID)
        .ok_or_else(|| Error::schema(kind, "missing parent_id"))?;
    let (_, parents) = read_ids(column, kind, consts::PARENT_ID)?;
    let parents: Vec<u32> = parents.into_iter().map(|p| p.unwrap_or(0)).collect();
    let mut order: Vec<u32> = (0..table.num_rows() as u32).collect();
    let bound = parents.iter().max().map_or(0, |m| *m as usize + 1);
    counting_sort(&mut order, &parents, bound);
    sort_by_key_and_value(&table, kind, &mut order)?;
    take(&table, &order, kind)
}

/// A hashable form of an attribute's non-string value, for grouping equal values (doubles by
/// bits, with -0.0 as 0.0 since the run test compares with IEEE equality).
#[derive(Hash, PartialEq, Eq)]
enum ValueKey<'a> {
    Int(i64),
    Double(u64),
    Bool(bool),
    Bytes(&'a [u8]),
    /// Empty, map and slice values never continue a run: one group for all.
    Other,
}

/// Stably sorts `order` (already by parent id) by key, then type and value: equal attributes
/// become adjacent, so their parent ids travel as small deltas and their values as runs.
fn sort_by_key_and_value(
    table: &RecordBatch,
    kind: PayloadType,
    order: &mut Vec<u32>,
) -> Result<()> {
    let rows = table.num_rows();
    let values = ValueView::of_table(table, kind)?;
    // String values (most of them) are grouped by their string codes; the others after them.
    let (strings, string_groups) = string_codes(values.strings(), rows);
    let mut others: HashMap<ValueKey<'_>, u32, ahash::RandomState> = HashMap::default();
    let mut value_codes = Vec::with_capacity(rows);
    for (i, string) in strings.iter().enumerate() {
        let ty = values.value_type(i);
        let other = match ty {
            value_type::STR if values.strings().get(i).is_some() => {
                value_codes.push(*string);
                continue;
            }
            _ => match values.scalar(i) {
                Some(Scalar::Int(v)) => ValueKey::Int(v),
                Some(Scalar::Double(d)) => ValueKey::Double(if d == 0.0 { 0 } else { d.to_bits() }),
                Some(Scalar::Bool(b)) => ValueKey::Bool(b),
                Some(Scalar::Bytes(b)) => ValueKey::Bytes(b),
                Some(Scalar::Str(_)) | None => ValueKey::Other,
            },
        };
        let next = others.len() as u32;
        value_codes.push(string_groups as u32 + *others.entry(other).or_insert(next));
    }
    counting_sort(order, &value_codes, string_groups + others.len());
    let key = Col::<StringArray>::of(table, kind, consts::KEY)?;
    let (key_codes, distinct_keys) = string_codes(&key, rows);
    counting_sort(order, &key_codes, distinct_keys);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counting_sort_is_stable() {
        let keys = [2, 0, 1, 0, 2, 1];
        let mut order: Vec<u32> = (0..6).collect();
        counting_sort(&mut order, &keys, 3);
        assert_eq!(order, vec![1, 3, 2, 5, 0, 4]);
    }

    #[test]
    fn groups_renumber_in_row_order() {
        let keys = [
            (Some(5), Some(1)),
            (Some(5), Some(1)),
            (Some(5), Some(0)),
            (Some(2), Some(1)),
        ];
        let (res, res_old) = renumber_groups(&keys, |k| k.0, |k| k.0);
        assert_eq!(res, vec![0, 0, 0, 1]);
        assert_eq!(res_old, vec![Some(5), Some(2)]);
        let (scope, scope_old) = renumber_groups(&keys, |k| *k, |k| k.1);
        assert_eq!(scope, vec![0, 0, 1, 2]);
        assert_eq!(scope_old, vec![Some(1), Some(0), Some(1)]);
    }
}
