//! Resources and scopes: deduplicated as they are met, their attributes collected into
//! `RESOURCE_ATTRS` / `SCOPE_ATTRS`, and the per-row `resource`, `scope` and `schema_url`
//! columns of the root table.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, DictionaryArray, RecordBatch, StringArray, StructArray, UInt16Array,
    UInt32Array,
};
use arrow::buffer::ScalarBuffer;
use arrow::datatypes::{Field, UInt16Type};

use super::columns::validity;
use super::values::AttrsBuilder;
use crate::error::{Error, Result};
use crate::schema::PayloadType;
use crate::schema::consts;
use crate::wire::Reader;

/// An embedded message's bytes and absolute offset (None when the field is absent).
#[derive(Clone, Copy, Default)]
pub(crate) struct Embedded<'a> {
    pub(crate) bytes: &'a [u8],
    pub(crate) base: usize,
}

impl<'a> Embedded<'a> {
    pub(crate) fn of(r: &Reader<'a>) -> Self {
        Embedded {
            bytes: r.rest(),
            base: r.offset(),
        }
    }

    fn reader(self) -> Reader<'a> {
        Reader::nested(self.bytes, self.base)
    }
}

/// A `Resource*` or `Scope*` message being walked: the resource (or scope) message and the
/// schema URL next to it. Caches the id assigned in the current batch.
pub(crate) struct Context<'a> {
    message: Embedded<'a>,
    schema_url: &'a str,
    id: Option<(u32, u16)>,
    /// Code of `schema_url` in the current batch (scopes only).
    url: Option<(u32, u16)>,
}

impl<'a> Context<'a> {
    pub(crate) fn new(message: Embedded<'a>, schema_url: &'a str) -> Self {
        Context {
            message,
            schema_url,
            id: None,
            url: None,
        }
    }

    /// Replaces the schema URL (for rows appended from now on).
    pub(crate) fn set_schema_url(&mut self, schema_url: &'a str) {
        self.schema_url = schema_url;
        self.url = None;
    }

    fn cached(&self, generation: u32) -> Option<u16> {
        self.id.filter(|(g, _)| *g == generation).map(|(_, id)| id)
    }
}

#[derive(Default)]
struct ScopeInfo<'a> {
    name: &'a str,
    version: &'a str,
    dropped: u32,
}

/// A string column as a dictionary: the values per id, and each row's id as key (null where
/// the value is empty).
fn by_id<'s>(row_ids: &[u16], values: impl Iterator<Item = &'s str>) -> Result<ArrayRef> {
    let values = StringArray::from_iter_values(values);
    let empty: Vec<bool> = values.iter().map(|v| v.is_none_or(str::is_empty)).collect();
    let nulls = if empty.contains(&true) {
        validity(row_ids.len(), |i| {
            !empty.get(usize::from(row_ids[i])).copied().unwrap_or(true)
        })
    } else {
        None
    };
    let keys = UInt16Array::new(ScalarBuffer::from(row_ids.to_vec()), nulls);
    DictionaryArray::<UInt16Type>::try_new(keys, Arc::new(values))
        .map(|d| Arc::new(d) as ArrayRef)
        .map_err(|e| Error::arrow("building a resource or scope column", e))
}

/// A per-row `dropped_attributes_count` column from the counts per id (null where zero).
fn dropped_by_id(row_ids: &[u16], dropped: impl Iterator<Item = u32>) -> ArrayRef {
    let dropped: Vec<u32> = dropped.collect();
    if dropped.iter().all(|d| *d == 0) {
        return Arc::new(UInt32Array::new_null(row_ids.len()));
    }
    let values: Vec<u32> = row_ids
        .iter()
        .map(|id| dropped.get(usize::from(*id)).copied().unwrap_or(0))
        .collect();
    let nulls = validity(values.len(), |i| values[i] != 0);
    Arc::new(UInt32Array::new(ScalarBuffer::from(values), nulls))
}

/// A struct column from named children.
fn struct_of(children: Vec<(&str, ArrayRef)>) -> Result<ArrayRef> {
    let fields: Vec<Field> = children
        .iter()
        .map(|(name, a)| Field::new(*name, a.data_type().clone(), true))
        .collect();
    let arrays = children.into_iter().map(|(_, a)| a).collect();
    StructArray::try_new(fields.into(), arrays, None)
        .map(|s| Arc::new(s) as ArrayRef)
        .map_err(|e| Error::arrow("building resource and scope columns", e))
}

/// The schema URL code of rows with the empty URL (codes are below the row count, itself at
/// most 65,535).
const NO_URL: u16 = u16::MAX;

/// Resource and scope state of the batch being built.
pub(crate) struct Envelope<'a> {
    generation: u32,
    resources: HashMap<(&'a [u8], &'a str), u16>,
    resource_info: Vec<(&'a str, u32)>,
    scopes: HashMap<&'a [u8], u16>,
    scope_info: Vec<ScopeInfo<'a>>,
    resource_attrs: AttrsBuilder,
    scope_attrs: AttrsBuilder,
    row_resource: Vec<u16>,
    row_scope: Vec<u16>,
    /// Per row, the code of its schema URL ([`NO_URL`]: the empty URL).
    row_schema_url: Vec<u16>,
    urls: HashMap<&'a str, u16>,
    url_values: Vec<&'a str>,
}

/// The columns produced by [`Envelope::finish`].
pub(crate) struct EnvelopeColumns {
    pub(crate) resource: ArrayRef,
    pub(crate) scope: ArrayRef,
    pub(crate) schema_url: ArrayRef,
    pub(crate) resource_attrs: Option<RecordBatch>,
    pub(crate) scope_attrs: Option<RecordBatch>,
}

impl<'a> Envelope<'a> {
    /// An envelope with room for `rows` rows.
    pub(crate) fn with_capacity(rows: usize) -> Self {
        let mut envelope = Envelope::new();
        envelope.row_resource.reserve(rows);
        envelope.row_scope.reserve(rows);
        envelope.row_schema_url.reserve(rows);
        envelope
    }

    fn new() -> Self {
        Envelope {
            generation: 0,
            resources: HashMap::new(),
            resource_info: Vec::new(),
            scopes: HashMap::new(),
            scope_info: Vec::new(),
            resource_attrs: AttrsBuilder::new(PayloadType::ResourceAttrs),
            scope_attrs: AttrsBuilder::new(PayloadType::ScopeAttrs),
            row_resource: Vec::new(),
            row_scope: Vec::new(),
            row_schema_url: Vec::new(),
            urls: HashMap::new(),
            url_values: Vec::new(),
        }
    }

    /// Rows (records) in the current batch.
    pub(crate) fn rows(&self) -> usize {
        self.row_resource.len()
    }

    fn resource_id(&mut self, ctx: &mut Context<'a>) -> Result<u16> {
        if let Some(id) = ctx.cached(self.generation) {
            return Ok(id);
        }
        let key = (ctx.message.bytes, ctx.schema_url);
        let id = match self.resources.get(&key) {
            Some(id) => *id,
            None => {
                let id = self.resource_info.len() as u16;
                let mut dropped = 0;
                let mut r = ctx.message.reader();
                while let Some((field, wire)) = r.field()? {
                    match field {
                        1 => self
                            .resource_attrs
                            .append_key_value(u32::from(id), r.message_field(wire)?)?,
                        2 => dropped = r.varint32(wire)?,
                        _ => r.skip(wire)?,
                    }
                }
                self.resource_info.push((ctx.schema_url, dropped));
                self.resources.insert(key, id);
                id
            }
        };
        ctx.id = Some((self.generation, id));
        Ok(id)
    }

    fn scope_id(&mut self, ctx: &mut Context<'a>) -> Result<u16> {
        if let Some(id) = ctx.cached(self.generation) {
            return Ok(id);
        }
        let id = match self.scopes.get(ctx.message.bytes) {
            Some(id) => *id,
            None => {
                let id = self.scope_info.len() as u16;
                let mut info = ScopeInfo::default();
                let mut r = ctx.message.reader();
                while let Some((field, wire)) = r.field()? {
                    match field {
                        1 => info.name = r.string_field(wire)?,
                        2 => info.version = r.string_field(wire)?,
                        3 => self
                            .scope_attrs
                            .append_key_value(u32::from(id), r.message_field(wire)?)?,
                        4 => info.dropped = r.varint32(wire)?,
                        _ => r.skip(wire)?,
                    }
                }
                self.scope_info.push(info);
                self.scopes.insert(ctx.message.bytes, id);
                id
            }
        };
        ctx.id = Some((self.generation, id));
        Ok(id)
    }

    /// Registers a root row under the given resource and scope; returns the row's index.
    pub(crate) fn push_row(
        &mut self,
        resource: &mut Context<'a>,
        scope: &mut Context<'a>,
    ) -> Result<u16> {
        let row = self.rows() as u16;
        let r = self.resource_id(resource)?;
        let s = self.scope_id(scope)?;
        self.row_resource.push(r);
        self.row_scope.push(s);
        let url = match scope.url {
            Some((generation, code)) if generation == self.generation => code,
            _ => {
                let code = self.url_code(scope.schema_url);
                scope.url = Some((self.generation, code));
                code
            }
        };
        self.row_schema_url.push(url);
        Ok(row)
    }

    /// The code of a schema URL in the current batch ([`NO_URL`] for the empty URL).
    fn url_code(&mut self, url: &'a str) -> u16 {
        if url.is_empty() {
            return NO_URL;
        }
        let next = self.url_values.len() as u16;
        *self.urls.entry(url).or_insert_with(|| {
            self.url_values.push(url);
            next
        })
    }

    /// Sets the schema URL of the rows from `first_row` on (the rows of a scope whose URL
    /// arrived after its records).
    pub(crate) fn patch_schema_url(&mut self, first_row: usize, url: &'a str) {
        let code = self.url_code(url);
        if let Some(rows) = self.row_schema_url.get_mut(first_row..) {
            rows.fill(code);
        }
    }

    /// Finishes the envelope columns of the batch, then resets for the next batch. String
    /// columns are dictionaries keyed by resource or scope id: no per-row copies.
    pub(crate) fn finish(&mut self) -> Result<EnvelopeColumns> {
        let rows_r = std::mem::take(&mut self.row_resource);
        let rows_s = std::mem::take(&mut self.row_scope);
        let urls = std::mem::take(&mut self.row_schema_url);
        let res = &self.resource_info;
        let scopes = &self.scope_info;
        let resource = struct_of(vec![
            (
                consts::ID,
                Arc::new(UInt16Array::from(rows_r.clone())) as ArrayRef,
            ),
            (consts::SCHEMA_URL, by_id(&rows_r, res.iter().map(|r| r.0))?),
            (
                consts::DROPPED_ATTRIBUTES_COUNT,
                dropped_by_id(&rows_r, res.iter().map(|r| r.1)),
            ),
        ])?;
        let scope = struct_of(vec![
            (
                consts::ID,
                Arc::new(UInt16Array::from(rows_s.clone())) as ArrayRef,
            ),
            (consts::NAME, by_id(&rows_s, scopes.iter().map(|s| s.name))?),
            (
                consts::VERSION,
                by_id(&rows_s, scopes.iter().map(|s| s.version))?,
            ),
            (
                consts::DROPPED_ATTRIBUTES_COUNT,
                dropped_by_id(&rows_s, scopes.iter().map(|s| s.dropped)),
            ),
        ])?;
        let url_values = StringArray::from_iter_values(self.url_values.drain(..));
        let url_nulls = validity(urls.len(), |i| urls[i] != NO_URL);
        // Null rows get key 0, as a builder leaves them.
        let codes: Vec<u16> = urls
            .iter()
            .map(|c| if *c == NO_URL { 0 } else { *c })
            .collect();
        let url_keys = UInt16Array::new(ScalarBuffer::from(codes), url_nulls);
        let schema_url = DictionaryArray::<UInt16Type>::try_new(url_keys, Arc::new(url_values))
            .map_err(|e| Error::arrow("building schema_url", e))?;
        self.urls.clear();
        let columns = EnvelopeColumns {
            resource,
            scope,
            schema_url: Arc::new(schema_url),
            resource_attrs: self.resource_attrs.finish()?,
            scope_attrs: self.scope_attrs.finish()?,
        };
        self.resources.clear();
        self.resource_info.clear();
        self.scopes.clear();
        self.scope_info.clear();
        self.generation += 1;
        Ok(columns)
    }
}
