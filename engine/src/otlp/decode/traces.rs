//! `Span` → the `SPANS`, `SPAN_ATTRS`, `SPAN_EVENTS`, `SPAN_LINKS`, `SPAN_EVENT_ATTRS` and
//! `SPAN_LINK_ATTRS` tables.

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, StructArray, UInt16Array};
use arrow::datatypes::{
    DataType, DurationNanosecondType, Fields, Int32Type, TimestampNanosecondType, UInt32Type,
};

use super::columns::{IdColumn, NumColumn, StrColumn};
use super::envelope::EnvelopeColumns;
use super::root::{RootBuilder, set_envelope_attrs, table_schema};
use super::values::AttrsBuilder;
use crate::batch::OtapBatch;
use crate::error::{Error, Result};
use crate::schema::consts::{STATUS, UTC};
use crate::schema::{PayloadType, Signal, canonical_schema};
use crate::wire::Reader;

/// The `Span` fields this decoder reads.
const SPAN_FIELDS: [u32; 16] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16];

fn check_id_space(id: usize, r: &Reader<'_>) -> Result<u32> {
    u32::try_from(id).or_else(|_| r.err("too many child records in one batch"))
}

/// The `SPAN_EVENTS` columns.
#[derive(Default)]
struct EventsColumns {
    parent_id: Vec<u16>,
    time: NumColumn<TimestampNanosecondType>,
    name: StrColumn,
    dropped: NumColumn<UInt32Type>,
}

/// The `SPAN_LINKS` columns.
struct LinksColumns {
    parent_id: Vec<u16>,
    trace_id: IdColumn,
    span_id: IdColumn,
    trace_state: StrColumn,
    flags: NumColumn<UInt32Type>,
    dropped: NumColumn<UInt32Type>,
}

/// Builds the tables of one batch of spans. Its columns are plain vectors (the OTLP default
/// stands for null until the arrays are built), sized up front from the request's bytes.
pub(crate) struct SpansBuilder {
    rows: u16,
    start: NumColumn<TimestampNanosecondType>,
    duration: NumColumn<DurationNanosecondType>,
    trace_id: IdColumn,
    span_id: IdColumn,
    trace_state: StrColumn,
    parent_span_id: IdColumn,
    name: StrColumn,
    kind: NumColumn<Int32Type>,
    dropped_attributes: NumColumn<UInt32Type>,
    dropped_events: NumColumn<UInt32Type>,
    dropped_links: NumColumn<UInt32Type>,
    flags: NumColumn<UInt32Type>,
    status_code: NumColumn<Int32Type>,
    status_message: StrColumn,
    attrs: AttrsBuilder,
    events: EventsColumns,
    event_attrs: AttrsBuilder,
    links: LinksColumns,
    link_attrs: AttrsBuilder,
}

impl Default for SpansBuilder {
    fn default() -> Self {
        SpansBuilder {
            rows: 0,
            start: NumColumn::default(),
            duration: NumColumn::default(),
            trace_id: IdColumn::new(16),
            span_id: IdColumn::new(8),
            trace_state: StrColumn::default(),
            parent_span_id: IdColumn::new(8),
            name: StrColumn::default(),
            kind: NumColumn::default(),
            dropped_attributes: NumColumn::default(),
            dropped_events: NumColumn::default(),
            dropped_links: NumColumn::default(),
            flags: NumColumn::default(),
            status_code: NumColumn::default(),
            status_message: StrColumn::default(),
            attrs: AttrsBuilder::new(PayloadType::SpanAttrs),
            events: EventsColumns::default(),
            event_attrs: AttrsBuilder::new(PayloadType::SpanEventAttrs),
            links: LinksColumns {
                parent_id: Vec::new(),
                trace_id: IdColumn::new(16),
                span_id: IdColumn::new(8),
                trace_state: StrColumn::default(),
                flags: NumColumn::default(),
                dropped: NumColumn::default(),
            },
            link_attrs: AttrsBuilder::new(PayloadType::SpanLinkAttrs),
        }
    }
}

impl SpansBuilder {
    fn append_event(&mut self, row: u16, mut r: Reader<'_>) -> Result<()> {
        let id = check_id_space(self.events.parent_id.len(), &r)?;
        let (mut time, mut name, mut dropped): (u64, &[u8], u32) = (0, &[], 0);
        while let Some((field, wire)) = r.field()? {
            match field {
                1 => time = r.fixed64_field(wire)?,
                2 => name = r.bytes_field(wire)?,
                3 => self
                    .event_attrs
                    .append_key_value(id, r.message_field(wire)?)?,
                4 => dropped = r.varint32(wire)?,
                _ => r.skip(wire)?,
            }
        }
        let e = &mut self.events;
        e.parent_id.push(row);
        e.time.push(time as i64);
        e.name.push(name);
        e.dropped.push(dropped);
        Ok(())
    }

    fn append_link(&mut self, row: u16, mut r: Reader<'_>) -> Result<()> {
        let id = check_id_space(self.links.parent_id.len(), &r)?;
        let (mut trace_id, mut span_id, mut trace_state): (&[u8], &[u8], &[u8]) = (&[], &[], &[]);
        let (mut flags, mut dropped) = (0u32, 0u32);
        while let Some((field, wire)) = r.field()? {
            match field {
                1 => trace_id = r.bytes_field(wire)?,
                2 => span_id = r.bytes_field(wire)?,
                3 => trace_state = r.bytes_field(wire)?,
                4 => self
                    .link_attrs
                    .append_key_value(id, r.message_field(wire)?)?,
                5 => dropped = r.varint32(wire)?,
                6 => flags = r.fixed32_field(wire)?,
                _ => r.skip(wire)?,
            }
        }
        let l = &mut self.links;
        l.parent_id.push(row);
        l.trace_id.push(trace_id, &r)?;
        l.span_id.push(span_id, &r)?;
        l.trace_state.push(trace_state);
        l.flags.push(flags);
        l.dropped.push(dropped);
        Ok(())
    }

    /// The span's `Status`: its message and code.
    fn status(mut s: Reader<'_>) -> Result<(&[u8], i32)> {
        let (mut message, mut code): (&[u8], i32) = (&[], 0);
        while let Some((field, wire)) = s.field()? {
            match field {
                2 => message = s.bytes_field(wire)?,
                3 => code = s.varint32(wire)? as i32,
                _ => s.skip(wire)?,
            }
        }
        Ok((message, code))
    }
}

impl RootBuilder for SpansBuilder {
    const SIGNAL: usize = 1;

    fn append(&mut self, row: u16, mut r: Reader<'_>) -> Result<()> {
        let (mut trace_id, mut span_id, mut parent): (&[u8], &[u8], &[u8]) = (&[], &[], &[]);
        let (mut trace_state, mut name, mut status_message): (&[u8], &[u8], &[u8]) =
            (&[], &[], &[]);
        let (mut start, mut end, mut kind, mut flags, mut status_code) = (0u64, 0u64, 0, 0, 0);
        let (mut dropped_attrs, mut dropped_events, mut dropped_links) = (0, 0, 0);
        // Keys are matched whole (field number and wire type): see `Reader::key`.
        while let Some(key) = r.key()? {
            match key {
                0x0a => trace_id = r.bytes()?.0,          // 1: bytes
                0x12 => span_id = r.bytes()?.0,           // 2: bytes
                0x1a => trace_state = r.bytes()?.0,       // 3: string
                0x22 => parent = r.bytes()?.0,            // 4: bytes
                0x2a => name = r.bytes()?.0,              // 5: string
                0x30 => kind = r.varint()? as u32 as i32, // 6: varint
                0x39 => start = r.fixed64()?,             // 7: fixed64
                0x41 => end = r.fixed64()?,               // 8: fixed64
                0x4a => self.attrs.append_key_value(u32::from(row), r.message()?)?, // 9
                0x50 => dropped_attrs = r.varint()? as u32, // 10: varint
                0x5a => self.append_event(row, r.message()?)?, // 11: message
                0x60 => dropped_events = r.varint()? as u32, // 12: varint
                0x6a => self.append_link(row, r.message()?)?, // 13: message
                0x70 => dropped_links = r.varint()? as u32, // 14: varint
                0x7a => (status_message, status_code) = Self::status(r.message()?)?, // 15
                0x85 => flags = r.fixed32()?,             // 16: fixed32
                _ => r.skip_key(key, &SPAN_FIELDS)?,
            }
        }
        self.start.push(start as i64);
        self.duration.push(end.wrapping_sub(start) as i64);
        self.trace_id.push(trace_id, &r)?;
        self.span_id.push(span_id, &r)?;
        self.trace_state.push(trace_state);
        self.parent_span_id.push(parent, &r)?;
        self.name.push(name);
        self.kind.push(kind);
        self.dropped_attributes.push(dropped_attrs);
        self.dropped_events.push(dropped_events);
        self.dropped_links.push(dropped_links);
        self.flags.push(flags);
        self.status_code.push(status_code);
        self.status_message.push(status_message);
        self.rows = row.wrapping_add(1);
        Ok(())
    }

    fn reserve(&mut self, records: usize, bytes: usize) {
        self.start.reserve(records);
        self.duration.reserve(records);
        for column in [
            &mut self.trace_id,
            &mut self.span_id,
            &mut self.parent_span_id,
        ] {
            column.reserve(records);
        }
        for column in [
            &mut self.dropped_attributes,
            &mut self.dropped_events,
            &mut self.dropped_links,
            &mut self.flags,
        ] {
            column.reserve(records);
        }
        self.kind.reserve(records);
        self.status_code.reserve(records);
        self.name.reserve(records, records * 16);
        self.trace_state.reserve(records, 0);
        self.status_message.reserve(records, 0);
        // About 48 bytes of OTLP per span attribute, capped by the request's size.
        self.attrs.reserve(bytes / 48);
    }

    fn finish(&mut self, envelope: EnvelopeColumns) -> Result<OtapBatch> {
        let rows = std::mem::take(&mut self.rows);
        let schema = canonical_schema(PayloadType::Spans);
        let status_fields = match schema.field_with_name(STATUS).map(|f| f.data_type()) {
            Ok(DataType::Struct(fields)) => fields.clone(),
            _ => Fields::empty(),
        };
        let status = StructArray::try_new(
            status_fields,
            vec![
                Arc::new(self.status_code.finish()),
                self.status_message.finish()?,
            ],
            None,
        )
        .map_err(|e| Error::arrow("building span status", e))?;
        let columns: Vec<ArrayRef> = vec![
            Arc::new(UInt16Array::from_iter_values(0..rows)),
            envelope.resource,
            envelope.scope,
            envelope.schema_url,
            Arc::new(self.start.finish().with_timezone(UTC)),
            Arc::new(self.duration.finish()),
            self.trace_id.finish()?,
            self.span_id.finish()?,
            self.trace_state.finish()?,
            self.parent_span_id.finish()?,
            self.name.finish()?,
            Arc::new(self.kind.finish()),
            Arc::new(self.dropped_attributes.finish()),
            Arc::new(self.dropped_events.finish()),
            Arc::new(self.dropped_links.finish()),
            Arc::new(self.flags.finish()),
            Arc::new(status),
        ];
        let spans = RecordBatch::try_new(table_schema(PayloadType::Spans, &columns), columns)
            .map_err(|e| Error::arrow("building SPANS", e))?;
        let mut batch = OtapBatch::new(Signal::Traces);
        batch.set(PayloadType::Spans, spans)?;
        set_envelope_attrs(&mut batch, envelope.resource_attrs, envelope.scope_attrs)?;
        if let Some(attrs) = self.attrs.finish()? {
            batch.set(PayloadType::SpanAttrs, attrs)?;
        }
        let events = self.events.parent_id.len();
        if events > 0 {
            let e = &mut self.events;
            let columns: Vec<ArrayRef> = vec![
                Arc::new(arrow::array::UInt32Array::from_iter_values(
                    0..events as u32,
                )),
                Arc::new(UInt16Array::from(std::mem::take(&mut e.parent_id))),
                Arc::new(e.time.finish().with_timezone(UTC)),
                e.name.finish()?,
                Arc::new(e.dropped.finish()),
            ];
            let table =
                RecordBatch::try_new(table_schema(PayloadType::SpanEvents, &columns), columns)
                    .map_err(|e| Error::arrow("building SPAN_EVENTS", e))?;
            batch.set(PayloadType::SpanEvents, table)?;
        }
        let links = self.links.parent_id.len();
        if links > 0 {
            let l = &mut self.links;
            let columns: Vec<ArrayRef> = vec![
                Arc::new(arrow::array::UInt32Array::from_iter_values(0..links as u32)),
                Arc::new(UInt16Array::from(std::mem::take(&mut l.parent_id))),
                l.trace_id.finish()?,
                l.span_id.finish()?,
                l.trace_state.finish()?,
                Arc::new(l.flags.finish()),
                Arc::new(l.dropped.finish()),
            ];
            let table =
                RecordBatch::try_new(table_schema(PayloadType::SpanLinks, &columns), columns)
                    .map_err(|e| Error::arrow("building SPAN_LINKS", e))?;
            batch.set(PayloadType::SpanLinks, table)?;
        }
        if let Some(attrs) = self.event_attrs.finish()? {
            batch.set(PayloadType::SpanEventAttrs, attrs)?;
        }
        if let Some(attrs) = self.link_attrs.finish()? {
            batch.set(PayloadType::SpanLinkAttrs, attrs)?;
        }
        Ok(batch)
    }
}
