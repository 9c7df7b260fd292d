//! Forwarded batches with rows removed. When a pipeline deletes log records or spans, the
//! batch still goes on in its sender's IPC streams: schemas and dictionary messages as
//! received (renamed keys included), and only the record batch message of each table that
//! lost rows written again, in the sender's own column layout. Tables that lost no row go as
//! the bytes they came in.
//!
//! A record batch message holds no dictionary values, only each dictionary column's indices,
//! so the rows kept can be written against the dictionaries the receiver already holds. Ids
//! are written with the default transport encodings; a table the sender wrote otherwise (plain
//! ids, ids in a dictionary, rows out of transport order) cannot be rewritten, and the batch is
//! then re-encoded by the ordinary path.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, RecordBatchOptions, StructArray};
use arrow::buffer::BooleanBuffer;
use arrow::datatypes::{DataType, Field, FieldRef, Fields, Schema, SchemaRef};
use arrow::ipc::writer::{
    DictionaryTracker, IpcDataGenerator, IpcWriteContext, IpcWriteOptions, write_message,
};
use arrow::ipc::{CompressionType, MetadataVersion};
use bytes::Bytes;

use super::batch::{RawBatch, RawPayload};
use super::decoded::{DecodedAsSent, Layout};
use super::id_columns::{column_ids, rows_with_kept_parent};
use super::ipc::{IpcMessage, MessageKind, split};
use super::keep_rows::keep_rows;
use crate::error::{Error, Result};
use crate::id_set::IdSet;
use crate::otap::encoder::DEFAULT_ZSTD_LEVEL;
use crate::otap::ids::{encode_ids, encode_ids_with_runs};
use crate::otap::kept_runs::kept_runs;
use crate::schema::consts::{self, ENCODING_METADATA};
use crate::schema::{PayloadType, Signal};

impl RawBatch {
    /// This batch with only the rows that remain once `root` (the batch's root table after a
    /// pipeline removed rows of `decoded`'s, nothing else changed) is all that is left of the
    /// root: children of removed rows go with them, and resource and scope attributes no
    /// longer referenced. None when a table that lost rows cannot be rewritten in its sender's
    /// layout (see the module docs). When rows were removed, `decoded` must be whole
    /// (see [`DecodedAsSent::whole`] and [`DecodedAsSent::root_rows_kept`]).
    pub fn narrowed(
        &self,
        decoded: &DecodedAsSent,
        root: &RecordBatch,
    ) -> Result<Option<RawBatch>> {
        let root_type = self.signal.root();
        let Some(original) = decoded.batch.get(root_type) else {
            return Ok(None);
        };
        if root.num_rows() == original.num_rows() {
            return Ok(Some(self.clone()));
        }
        if self.signal == Signal::Metrics || root.schema() != original.schema() {
            return Ok(None);
        }
        if !decoded.is_whole() {
            return Err(Error::LimitExceeded(
                "rows were removed from a batch not decoded whole".into(),
            ));
        }
        let kept = kept_tables(decoded, root)?;
        let mut payloads = Vec::with_capacity(self.payloads.len());
        for payload in &self.payloads {
            let (Some(before), Some(after)) =
                (decoded.batch.get(payload.table), kept.get(&payload.table))
            else {
                return Ok(None);
            };
            if before.num_rows() == after.rows.num_rows() {
                payloads.push(payload.clone());
                continue;
            }
            let Some(layout) = decoded.layout(payload.table) else {
                return Ok(None);
            };
            let runs = match (&layout.runs, &after.keep) {
                (Some(runs), Some(keep)) => Some(kept_runs(
                    before,
                    payload.table,
                    layout.strings,
                    runs,
                    keep,
                )?),
                _ => None,
            };
            let Some(records) = rewrite(layout, &after.rows, runs.as_deref())? else {
                return Ok(None);
            };
            let mut messages = payload.messages.clone();
            match messages.last_mut() {
                Some(last) if matches!(last.kind, MessageKind::Records { .. }) => *last = records,
                _ => return Ok(None),
            }
            payloads.push(RawPayload {
                table: payload.table,
                schema_id: payload.schema_id.clone(),
                messages,
            });
        }
        Ok(Some(RawBatch {
            signal: self.signal,
            items: root.num_rows(),
            payloads,
        }))
    }
}

/// The rows of a table that remain.
struct Kept {
    /// The rows.
    rows: RecordBatch,
    /// Which rows of the table as decoded they are (None for the root, which the pipeline
    /// gave).
    keep: Option<BooleanBuffer>,
}

/// Every table of `decoded` with only the rows that hang off `root`'s.
fn kept_tables(decoded: &DecodedAsSent, root: &RecordBatch) -> Result<HashMap<PayloadType, Kept>> {
    let root_type = decoded.batch.signal().root();
    let mut kept: HashMap<PayloadType, Kept> = HashMap::new();
    kept.insert(
        root_type,
        Kept {
            rows: root.clone(),
            keep: None,
        },
    );
    let mut tables: Vec<(PayloadType, &RecordBatch)> = decoded
        .batch
        .tables()
        .filter(|(t, _)| *t != root_type)
        .collect();
    // A table's parent has a smaller wire number than the table itself.
    tables.sort_by_key(|(t, _)| t.wire());
    for (table, rows) in tables {
        let parents = match table {
            PayloadType::ResourceAttrs => struct_ids(root, root_type, consts::RESOURCE)?,
            PayloadType::ScopeAttrs => struct_ids(root, root_type, consts::SCOPE)?,
            _ => match table.parent().and_then(|p| kept.get(&p).map(|k| (p, k))) {
                Some((parent, parent_rows)) => {
                    column_ids(parent_rows.rows.column_by_name(consts::ID), parent)?
                }
                None => Vec::new(),
            },
        };
        let parents: Vec<u32> = parents.into_iter().flatten().collect();
        let member = IdSet::of(&arrow::array::UInt32Array::from(parents));
        let keep = rows_with_kept_parent(rows.column_by_name(consts::PARENT_ID), &member, table)?;
        let filtered = keep_rows(rows, &keep)
            .map_err(|e| Error::arrow(format!("removing rows of {table:?}"), e))?;
        kept.insert(
            table,
            Kept {
                rows: filtered,
                keep: Some(keep),
            },
        );
    }
    Ok(kept)
}

/// The `id` values of struct column `name` of `root` (its rows that are not null).
fn struct_ids(root: &RecordBatch, table: PayloadType, name: &str) -> Result<Vec<Option<u32>>> {
    let Some(column) = root.column_by_name(name).and_then(|c| c.as_struct_opt()) else {
        return Ok(Vec::new());
    };
    let ids = column_ids(column.column_by_name(consts::ID), table)?;
    Ok(ids
        .into_iter()
        .enumerate()
        .map(|(row, id)| id.filter(|_| column.is_valid(row)))
        .collect())
}

/// Whether rows left of a table of `schema` may be written again in its sender's layout (see
/// [`rewrite`]): ids transport-encoded and not in dictionaries, dictionaries only at the top
/// level or in structs. Rows may still not fit it (see [`rewrite`]).
pub(crate) fn rewritable(schema: &Schema) -> bool {
    let dictionary = |f: &Field| matches!(f.data_type(), DataType::Dictionary(_, _));
    let ids_in_dictionaries = schema.fields().iter().any(|f| match f.data_type() {
        DataType::Struct(children) => children
            .iter()
            .any(|c| c.name() == consts::ID && dictionary(c)),
        _ => [consts::ID, consts::PARENT_ID].contains(&f.name().as_str()) && dictionary(f),
    });
    !ids_in_dictionaries && transport_encoded(schema) && index_schema(schema).is_some()
}

/// Whether every id column of `schema` holds transport-encoded ids (no `plain` marking).
fn transport_encoded(schema: &Schema) -> bool {
    let plain = |f: &Field| {
        f.metadata()
            .get(ENCODING_METADATA)
            .is_some_and(|e| e == "plain")
    };
    schema.fields().iter().all(|f| match f.data_type() {
        DataType::Struct(children)
            if [consts::RESOURCE, consts::SCOPE].contains(&f.name().as_str()) =>
        {
            children.iter().all(|c| c.name() != consts::ID || !plain(c))
        }
        _ => ![consts::ID, consts::PARENT_ID].contains(&f.name().as_str()) || !plain(f),
    })
}

/// The type a column of `data_type` has in a record batch message: dictionaries as their
/// indices. None when a dictionary sits inside a type other than a struct.
fn index_type(data_type: &DataType) -> Option<DataType> {
    match data_type {
        DataType::Dictionary(keys, _) => Some(keys.as_ref().clone()),
        DataType::Struct(fields) => Some(DataType::Struct(index_fields(fields)?)),
        other => (!holds_dictionary(other)).then(|| other.clone()),
    }
}

/// Whether a dictionary sits anywhere in `data_type`.
fn holds_dictionary(data_type: &DataType) -> bool {
    match data_type {
        DataType::Dictionary(_, _) => true,
        DataType::Struct(fields) => fields.iter().any(|f| holds_dictionary(f.data_type())),
        DataType::List(f)
        | DataType::LargeList(f)
        | DataType::ListView(f)
        | DataType::LargeListView(f)
        | DataType::FixedSizeList(f, _)
        | DataType::Map(f, _) => holds_dictionary(f.data_type()),
        DataType::Union(fields, _) => fields.iter().any(|(_, f)| holds_dictionary(f.data_type())),
        DataType::RunEndEncoded(_, values) => holds_dictionary(values.data_type()),
        _ => false,
    }
}

fn index_fields(fields: &Fields) -> Option<Fields> {
    fields
        .iter()
        .map(|f| index_field(f))
        .collect::<Option<Vec<FieldRef>>>()
        .map(Fields::from)
}

fn index_field(field: &Field) -> Option<FieldRef> {
    Some(Arc::new(Field::new(
        field.name(),
        index_type(field.data_type())?,
        field.is_nullable(),
    )))
}

fn index_schema(schema: &Schema) -> Option<SchemaRef> {
    Some(Arc::new(Schema::new(index_fields(schema.fields())?)))
}

/// `array` with its dictionaries replaced by their indices (see [`index_type`]).
fn index_array(array: &ArrayRef) -> Option<ArrayRef> {
    match array.data_type() {
        DataType::Dictionary(_, _) => {
            let keys = array.as_any_dictionary().keys();
            Some(arrow::array::make_array(keys.to_data()))
        }
        DataType::Struct(fields) => {
            let s = array.as_struct();
            let columns = s
                .columns()
                .iter()
                .map(index_array)
                .collect::<Option<Vec<ArrayRef>>>()?;
            let fields = index_fields(fields)?;
            let rebuilt = StructArray::try_new(fields, columns, s.nulls().cloned()).ok()?;
            Some(Arc::new(rebuilt))
        }
        other => index_type(other).map(|_| Arc::clone(array)),
    }
}

/// The record batch message of `rows` (ids plain) in `layout`, or None when they do not fit
/// it; `runs`: their quasi-delta runs when known.
fn rewrite(
    layout: &Layout,
    rows: &RecordBatch,
    runs: Option<&[bool]>,
) -> Result<Option<IpcMessage>> {
    if !transport_encoded(&layout.sent) {
        return Ok(None);
    }
    // The column types of the sender's record batch messages.
    let Some(columns) = index_schema(&layout.sent) else {
        return Ok(None);
    };
    let encoded = match runs {
        Some(runs) => encode_ids_with_runs(rows.clone(), layout.table, Some(runs))?,
        None => encode_ids(rows.clone(), layout.table, layout.strings)?,
    };
    let Some(encoded) = encoded else {
        return Ok(None);
    };
    let arrays = encoded
        .columns()
        .iter()
        .map(index_array)
        .collect::<Option<Vec<ArrayRef>>>();
    let Some(arrays) = arrays else {
        return Ok(None);
    };
    let types_match = arrays.len() == columns.fields().len()
        && arrays
            .iter()
            .zip(columns.fields())
            .all(|(a, f)| a.data_type() == f.data_type());
    if !types_match {
        return Ok(None);
    }
    let options = RecordBatchOptions::new().with_row_count(Some(encoded.num_rows()));
    let batch = RecordBatch::try_new_with_options(columns, arrays, &options)
        .map_err(|e| Error::arrow(format!("rows of {:?}", layout.table), e))?;
    write_records(&batch, layout.table).map(Some)
}

thread_local! {
    /// The zstd context record batches are rewritten with, one per thread.
    static WRITER: RefCell<Option<(IpcWriteOptions, IpcWriteContext)>> = const { RefCell::new(None) };
}

/// The record batch message of `batch` (which holds no dictionary), zstd-compressed.
fn write_records(batch: &RecordBatch, table: PayloadType) -> Result<IpcMessage> {
    let fail = |e| Error::arrow(format!("writing rows of {table:?}"), e);
    let bytes = WRITER.with(|cell| -> Result<Vec<u8>> {
        let mut cell = cell.borrow_mut();
        if cell.is_none() {
            let options = IpcWriteOptions::try_new(8, false, MetadataVersion::V5)
                .and_then(|o| o.try_with_compression(Some(CompressionType::ZSTD)))
                .and_then(|o| o.try_with_compression_level(Some(DEFAULT_ZSTD_LEVEL)))
                .map_err(fail)?;
            *cell = Some((options, IpcWriteContext::default()));
        }
        let (options, context) = cell.as_mut().expect("set above");
        let mut tracker = DictionaryTracker::new(false);
        let (_, encoded) = IpcDataGenerator::default()
            .encode(batch, &mut tracker, options, context)
            .map_err(fail)?;
        let mut out = Vec::new();
        write_message(&mut out, encoded, options).map_err(fail)?;
        Ok(out)
    })?;
    let mut messages = split(&Bytes::from(bytes)).map_err(|reason| Error::BadPayload {
        payload_type: table,
        schema_id: String::new(),
        reason,
    })?;
    match messages.pop() {
        Some(m) if messages.is_empty() && matches!(m.kind, MessageKind::Records { .. }) => Ok(m),
        _ => Err(Error::LimitExceeded(format!(
            "rewriting rows of {table:?} made other messages than a record batch"
        ))),
    }
}
