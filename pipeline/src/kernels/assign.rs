//! `UPDATE ... SET`: computed columns, attribute upserts, and resource or scope attribute
//! changes that split a resource (or scope) shared with rows the statement does not match.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, RecordBatch, StructArray, UInt8Array, UInt16Array,
    UInt32Array, new_null_array,
};
use arrow::compute::kernels::zip::zip;
use arrow::compute::{cast, filter_record_batch, take};
use arrow::datatypes::{DataType, Field, Fields};
use arrow::row::{RowConverter, SortField};
use penstock_dialect::model::AttrScope;

use crate::error::{PipelineError, Result};
use crate::kernels::attrs::{concat_attrs, replace_column, rows_of_parents, upsert};
use crate::kernels::metric_split::split_metrics;
use crate::rows::{attrs_of, column_at, ids_u32};
use penstock_engine::OtapBatch;
use penstock_engine::schema::PayloadType;
use penstock_engine::schema::consts::{self, value_type};

fn arrow_err(context: &'static str) -> impl Fn(arrow::error::ArrowError) -> PipelineError {
    move |e| PipelineError::arrow(context, e)
}

/// Sets the field at `path` of `space` to `values` where `mask` is true.
pub(crate) fn set_field(
    batch: &OtapBatch,
    space: PayloadType,
    path: &[&str],
    mask: &BooleanArray,
    values: &ArrayRef,
) -> Result<OtapBatch> {
    let table = table_of(batch, space)?;
    let updated = if path == ["body"] {
        set_body(table, mask, values)?
    } else {
        set_path(table, path, mask, values)?
    };
    let mut out = batch.clone();
    out.set(space, updated)?;
    Ok(out)
}

/// Sets metric-level field `path` (name, description, unit) for the metrics of the data points
/// of `space` where `mask` is true, splitting a metric whose points get different values.
pub(crate) fn set_metric_field(
    batch: &OtapBatch,
    space: PayloadType,
    path: &[&str],
    mask: &BooleanArray,
    values: &ArrayRef,
) -> Result<OtapBatch> {
    let Some((rows, picked)) = masked_values(mask, values)? else {
        return Ok(batch.clone());
    };
    let groups = split_metrics(batch, space, &rows, &picked)?;
    let metrics = table_of(&groups.batch, PayloadType::UnivariateMetrics)?;
    let mut group_of_metric: Vec<Option<u32>> = vec![None; metrics.num_rows()];
    for (g, row) in groups.metric_rows.iter().enumerate() {
        group_of_metric[*row as usize] = Some(g as u32);
    }
    let metric_mask: BooleanArray = group_of_metric.iter().map(|g| Some(g.is_some())).collect();
    let metric_values = take(&groups.values, &UInt32Array::from(group_of_metric), None)
        .map_err(arrow_err("selecting values"))?;
    set_field(
        &groups.batch,
        PayloadType::UnivariateMetrics,
        path,
        &metric_mask,
        &metric_values,
    )
}

/// The rows where `mask` is true and their values; `None` when no row is.
fn masked_values(mask: &BooleanArray, values: &ArrayRef) -> Result<Option<(Vec<u32>, ArrayRef)>> {
    let rows: Vec<u32> = mask.values().set_indices().map(|i| i as u32).collect();
    if rows.is_empty() {
        return Ok(None);
    }
    let picked = take(values, &UInt32Array::from(rows.clone()), None)
        .map_err(arrow_err("selecting values"))?;
    Ok(Some((rows, picked)))
}

fn table_of(batch: &OtapBatch, space: PayloadType) -> Result<&RecordBatch> {
    batch
        .get(space)
        .ok_or_else(|| PipelineError::Execute(format!("no {space:?} table")))
}

/// `mask ? new : old`, with `new` cast to the type of `old`.
fn blend(mask: &BooleanArray, new: &ArrayRef, old: &ArrayRef) -> Result<ArrayRef> {
    let new = cast(new, old.data_type()).map_err(arrow_err("converting a new value"))?;
    zip(mask, &new, old).map_err(arrow_err("updating a column"))
}

fn set_path(
    table: &RecordBatch,
    path: &[&str],
    mask: &BooleanArray,
    values: &ArrayRef,
) -> Result<RecordBatch> {
    let len = table.num_rows();
    match path {
        [name] => {
            let old = match table.column_by_name(name) {
                Some(c) => Arc::clone(c),
                None => new_null_array(&plain_type(values.data_type()), len),
            };
            let old = plain(&old)?;
            let new = blend(mask, values, &old)?;
            upsert_column(table, name, new)
        }
        [parent, child] => {
            let old_struct = column_at(table, &[parent]);
            let (fields, mut columns, nulls) =
                match old_struct.as_ref().and_then(|s| s.as_struct_opt()) {
                    Some(s) => (s.fields().clone(), s.columns().to_vec(), s.nulls().cloned()),
                    None => (Fields::empty(), Vec::new(), None),
                };
            let mut fields: Vec<Field> = fields.iter().map(|f| f.as_ref().clone()).collect();
            let position = fields.iter().position(|f| f.name() == child);
            let old = match position {
                Some(i) => plain(&columns[i])?,
                None => new_null_array(&plain_type(values.data_type()), len),
            };
            let new = blend(mask, values, &old)?;
            match position {
                Some(i) => {
                    fields[i] = Field::new(*child, new.data_type().clone(), true);
                    columns[i] = new;
                }
                None => {
                    fields.push(Field::new(*child, new.data_type().clone(), true));
                    columns.push(new);
                }
            }
            // Rows updated now have a struct value.
            let nulls = nulls.map(|n| arrow::buffer::NullBuffer::new(n.inner() | mask.values()));
            let updated = StructArray::try_new(Fields::from(fields), columns, nulls)
                .map_err(arrow_err("updating a struct column"))?;
            upsert_column(table, parent, Arc::new(updated))
        }
        _ => Err(PipelineError::Execute(format!(
            "cannot set {}",
            path.join(".")
        ))),
    }
}

fn plain_type(ty: &DataType) -> DataType {
    match ty {
        DataType::Dictionary(_, v) => v.as_ref().clone(),
        DataType::Utf8View | DataType::LargeUtf8 => DataType::Utf8,
        other => other.clone(),
    }
}

/// Dictionaries unpacked: an update writes values the dictionary may not hold.
fn plain(array: &ArrayRef) -> Result<ArrayRef> {
    match array.data_type() {
        DataType::Dictionary(_, v) => cast(array, v).map_err(arrow_err("unpacking a dictionary")),
        _ => Ok(Arc::clone(array)),
    }
}

fn upsert_column(table: &RecordBatch, name: &str, column: ArrayRef) -> Result<RecordBatch> {
    if table.column_by_name(name).is_some() {
        return replace_column(table, name, column);
    }
    let mut fields: Vec<Field> = table
        .schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields.push(Field::new(name, column.data_type().clone(), true));
    let mut columns = table.columns().to_vec();
    columns.push(column);
    RecordBatch::try_new(Arc::new(arrow::datatypes::Schema::new(fields)), columns)
        .map_err(arrow_err("adding a column"))
}

/// Sets a log body to text values where `mask` is true. A map or list body reads as its JSON
/// text and a bytes body as hex: such a body is left as it is when the value is the text it
/// reads as (an expression that changed nothing must not flatten it), and replaced otherwise
/// (a redaction inside it takes effect, a NULL empties it); one that cannot be read (its bytes
/// do not decode) is left as it is by a NULL.
fn set_body(table: &RecordBatch, mask: &BooleanArray, values: &ArrayRef) -> Result<RecordBatch> {
    let len = table.num_rows();
    let text = cast(values, &DataType::Utf8).map_err(arrow_err("converting a body"))?;
    let body = column_at(table, &["body"]);
    let body = body.as_ref().and_then(|b| b.as_struct_opt());
    let mask = &keep_unreadable_bodies(body, mask, &text)?;
    let fields = penstock_engine::schema::any_value_fields();
    let mut columns = Vec::with_capacity(fields.len());
    for field in fields.iter() {
        let old = body
            .and_then(|b| b.column_by_name(field.name()))
            .map(plain)
            .transpose()?
            .unwrap_or_else(|| new_null_array(field.data_type(), len));
        let old = cast(&old, field.data_type()).map_err(arrow_err("reading a body"))?;
        let new: ArrayRef = match field.name().as_str() {
            consts::TYPE => {
                let types: UInt8Array = (0..len)
                    .map(|i| {
                        Some(if text.is_valid(i) {
                            value_type::STR
                        } else {
                            value_type::EMPTY
                        })
                    })
                    .collect();
                Arc::new(types)
            }
            consts::STR => Arc::clone(&text),
            _ => new_null_array(field.data_type(), len),
        };
        let old = if old.null_count() == len && field.name() == consts::TYPE {
            Arc::new(UInt8Array::from(vec![value_type::EMPTY; len])) as ArrayRef
        } else {
            old
        };
        columns.push(zip(mask, &new, &old).map_err(arrow_err("updating bodies"))?);
    }
    let nulls = body
        .and_then(|b| b.nulls().cloned())
        .map(|n| arrow::buffer::NullBuffer::new(n.inner() | mask.values()));
    let updated =
        StructArray::try_new(fields, columns, nulls).map_err(arrow_err("updating bodies"))?;
    upsert_column(table, consts::BODY, Arc::new(updated))
}

/// `mask` without the rows whose body is a map, list or bytes and whose new value is NULL.
fn keep_unreadable_bodies(
    body: Option<&StructArray>,
    mask: &BooleanArray,
    text: &ArrayRef,
) -> Result<BooleanArray> {
    let Some(types) = body.and_then(|b| b.column_by_name(consts::TYPE)) else {
        return Ok(mask.clone());
    };
    let types = cast(&plain(types)?, &DataType::UInt8).map_err(arrow_err("reading a body"))?;
    let types = types.as_primitive::<arrow::datatypes::UInt8Type>();
    let view = penstock_engine::value::ValueView::of_struct(body, PayloadType::Logs)?;
    let text = text.as_string::<i32>();
    // What a structured body reads as (see the view): a map or array its JSON text, bytes
    // their hex.
    let read = |i: usize| match view.scalar(i) {
        Some(penstock_engine::value::Scalar::Bytes(b)) => Some(hex::encode(b)),
        _ => view.json(i),
    };
    Ok((0..mask.len())
        .map(|i| {
            let structured = types.is_valid(i)
                && matches!(
                    types.value(i),
                    value_type::MAP | value_type::SLICE | value_type::BYTES
                );
            let chosen = mask.value(i) && mask.is_valid(i);
            if !chosen || !structured {
                return Some(chosen);
            }
            // Kept: a body whose text did not change, or one that cannot be read and gets NULL.
            let unchanged = match (read(i), text.is_null(i)) {
                (Some(before), false) => before == text.value(i),
                (None, null) => null,
                (Some(_), true) => false,
            };
            Some(!unchanged)
        })
        .collect())
}

/// Gives every row of `space` an id (rows without children may have none), so attributes can
/// be attached. Returns the batch and the ids.
pub(crate) fn ensure_ids(
    batch: &OtapBatch,
    space: PayloadType,
) -> Result<(OtapBatch, UInt32Array)> {
    let table = table_of(batch, space)?;
    let len = table.num_rows();
    let ids = ids_u32(table.column_by_name(consts::ID).cloned(), len)?;
    if ids.null_count() == 0 {
        return Ok((batch.clone(), ids));
    }
    let mut next = crate::kernels::filter::max_used_id(batch, space)?.map_or(0, |m| m + 1);
    let filled: UInt32Array = ids
        .iter()
        .map(|id| {
            Some(id.unwrap_or_else(|| {
                next += 1;
                next - 1
            }))
        })
        .collect();
    let wide = matches!(space, PayloadType::SpanEvents | PayloadType::SpanLinks)
        || crate::rows::DATA_POINTS.contains(&space);
    let column: ArrayRef = if wide {
        Arc::new(filled.clone())
    } else {
        if next > u32::from(u16::MAX) + 1 {
            return Err(PipelineError::Execute(
                "more than 65,536 ids in one batch".into(),
            ));
        }
        Arc::new(UInt16Array::from_iter(
            filled.iter().map(|v| v.map(|v| v as u16)),
        ))
    };
    let updated = upsert_column(table, consts::ID, column)?;
    let mut out = batch.clone();
    out.set(space, updated)?;
    Ok((out, filled))
}

/// Sets attribute `key` of the rows of `space` where `mask` is true.
pub(crate) fn set_attr(
    batch: &OtapBatch,
    space: PayloadType,
    scope: AttrScope,
    key: &str,
    mask: &BooleanArray,
    values: &ArrayRef,
) -> Result<OtapBatch> {
    let Some((rows, picked)) = masked_values(mask, values)? else {
        return Ok(batch.clone());
    };
    match scope {
        AttrScope::Record => {
            let (mut out, ids) = ensure_ids(batch, space)?;
            let parents: Vec<u32> = rows.iter().map(|r| ids.value(*r as usize)).collect();
            let kind = attrs_of(space);
            match upsert(out.get(kind), kind, key, &parents, &picked)? {
                Some(t) => out.set(kind, t)?,
                None => {
                    out.take(kind);
                }
            }
            Ok(out)
        }
        AttrScope::Resource | AttrScope::Scope => {
            if space.parent() == Some(PayloadType::UnivariateMetrics) {
                let groups = split_metrics(batch, space, &rows, &picked)?;
                return set_envelope_attr(
                    &groups.batch,
                    PayloadType::UnivariateMetrics,
                    scope,
                    key,
                    &groups.metric_rows,
                    &groups.values,
                );
            }
            set_envelope_attr(batch, space, scope, key, &rows, &picked)
        }
    }
}

/// Sets a resource (or scope) attribute for `rows`: rows sharing a resource and getting the
/// same value are moved together to a copy of their resource carrying the new value; a
/// resource all of whose rows get the same value is changed in place.
fn set_envelope_attr(
    batch: &OtapBatch,
    space: PayloadType,
    scope: AttrScope,
    key: &str,
    rows: &[u32],
    values: &ArrayRef,
) -> Result<OtapBatch> {
    let (struct_name, kind) = match scope {
        AttrScope::Resource => (consts::RESOURCE, PayloadType::ResourceAttrs),
        _ => (consts::SCOPE, PayloadType::ScopeAttrs),
    };
    let table = table_of(batch, space)?;
    let len = table.num_rows();
    let ids = ids_u32(column_at(table, &[struct_name, consts::ID]), len)?;
    // Rows per envelope id, to tell a whole envelope from a part of one.
    let mut total: HashMap<Option<u32>, usize> = HashMap::new();
    for id in ids.iter() {
        *total.entry(id).or_default() += 1;
    }
    let converter = RowConverter::new(vec![SortField::new(values.data_type().clone())])
        .map_err(arrow_err("comparing values"))?;
    let encoded = converter
        .convert_columns(&[Arc::clone(values)])
        .map_err(arrow_err("comparing values"))?;
    // (old id, value) -> group; groups in order of first appearance.
    let mut groups: HashMap<(Option<u32>, &[u8]), usize> = HashMap::new();
    let mut group_of_row = Vec::with_capacity(rows.len());
    let mut group_info: Vec<(Option<u32>, usize, usize)> = Vec::new(); // (old id, first value row, rows)
    for (i, row) in rows.iter().enumerate() {
        let old = ids
            .is_valid(*row as usize)
            .then(|| ids.value(*row as usize));
        let g = *groups
            .entry((old, encoded.row(i).data()))
            .or_insert_with(|| {
                group_info.push((old, i, 0));
                group_info.len() - 1
            });
        group_info[g].2 += 1;
        group_of_row.push(g);
    }
    // New ids stay clear of ids still used by attribute rows (even unreferenced ones).
    let attr_parents = match batch.get(kind) {
        Some(t) => ids_u32(t.column_by_name(consts::PARENT_ID).cloned(), t.num_rows())?
            .iter()
            .flatten()
            .max(),
        None => None,
    };
    let mut next = ids
        .iter()
        .flatten()
        .max()
        .max(attr_parents)
        .map_or(0, |m| m + 1);
    let mut attrs_tables: Vec<RecordBatch> = Vec::new();
    let existing = batch.get(kind);
    let mut new_ids: Vec<u32> = Vec::with_capacity(group_info.len());
    for (old, _, count) in &group_info {
        let in_place = old.is_some() && total.get(old).copied() == Some(*count);
        let id = match (in_place, old) {
            (true, Some(old)) => *old,
            _ => {
                next += 1;
                if next > u32::from(u16::MAX) + 1 {
                    return Err(PipelineError::Execute(
                        "more than 65,536 resources or scopes in one batch".into(),
                    ));
                }
                let id = next - 1;
                if let (Some(old), Some(existing)) = (old, existing) {
                    // Copy the old envelope's attributes to the new id.
                    let copy =
                        filter_record_batch(existing, &rows_of_parents(existing, &|p| p == *old)?)
                            .map_err(arrow_err("copying attributes"))?;
                    let parent: ArrayRef =
                        Arc::new(UInt16Array::from(vec![id as u16; copy.num_rows()]));
                    attrs_tables.push(replace_column(&copy, consts::PARENT_ID, parent)?);
                }
                id
            }
        };
        new_ids.push(id);
    }
    let mut attrs: Option<RecordBatch> = match existing {
        Some(e) if !attrs_tables.is_empty() => {
            let mut all = vec![e.clone()];
            all.extend(attrs_tables);
            Some(concat_attrs(kind, &all)?)
        }
        Some(e) => Some(e.clone()),
        None => None,
    };
    let first_rows = UInt32Array::from(group_info.iter().map(|g| g.1 as u32).collect::<Vec<_>>());
    let group_values = take(values, &first_rows, None).map_err(arrow_err("selecting values"))?;
    attrs = upsert(attrs.as_ref(), kind, key, &new_ids, &group_values)?;
    // Point the updated rows at their (possibly new) envelope.
    let mut id_values: Vec<Option<u32>> = ids.iter().collect();
    for (i, row) in rows.iter().enumerate() {
        id_values[*row as usize] = Some(new_ids[group_of_row[i]]);
    }
    let id_column: ArrayRef = Arc::new(UInt16Array::from_iter(
        id_values.iter().map(|v| v.map(|v| v as u16)),
    ));
    let updated = replace_struct_child(table, struct_name, consts::ID, id_column)?;
    let mut out = batch.clone();
    out.set(space, updated)?;
    match attrs {
        Some(a) => out.set(kind, a)?,
        None => {
            out.take(kind);
        }
    }
    crate::kernels::filter::prune_envelope(&mut out)?;
    Ok(out)
}

/// `table` with child `child` of struct column `parent` replaced (the struct is created if
/// absent).
fn replace_struct_child(
    table: &RecordBatch,
    parent: &str,
    child: &str,
    column: ArrayRef,
) -> Result<RecordBatch> {
    let old = column_at(table, &[parent]);
    let (mut fields, mut columns): (Vec<Field>, Vec<ArrayRef>) =
        match old.as_ref().and_then(|s| s.as_struct_opt()) {
            Some(s) => (
                s.fields().iter().map(|f| f.as_ref().clone()).collect(),
                s.columns().to_vec(),
            ),
            None => (Vec::new(), Vec::new()),
        };
    match fields.iter().position(|f| f.name() == child) {
        Some(i) => {
            fields[i] = Field::new(child, column.data_type().clone(), true);
            columns[i] = column;
        }
        None => {
            fields.insert(0, Field::new(child, column.data_type().clone(), true));
            columns.insert(0, column);
        }
    }
    let updated = StructArray::try_new(Fields::from(fields), columns, None)
        .map_err(arrow_err("updating a struct column"))?;
    upsert_column(table, parent, Arc::new(updated))
}
