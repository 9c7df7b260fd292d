//! `Span` → the `SPANS`, `SPAN_ATTRS`, `SPAN_EVENTS`, `SPAN_LINKS`, `SPAN_EVENT_ATTRS` and
//! `SPAN_LINK_ATTRS` tables.

use std::sync::Arc;

use arrow::array::{
    ArrayBuilder, ArrayRef, DurationNanosecondBuilder, FixedSizeBinaryBuilder, Int32Builder,
    RecordBatch, StringBuilder, StructArray, TimestampNanosecondBuilder, UInt16Array,
    UInt16Builder, UInt32Builder,
};
use arrow::datatypes::{DataType, Fields};

use super::append::{append_id, append_nz, append_str, finish_ts};
use super::envelope::EnvelopeColumns;
use super::root::{RootBuilder, set_envelope_attrs, table_schema};
use super::values::AttrsBuilder;
use crate::batch::OtapBatch;
use crate::error::{Error, Result};
use crate::schema::consts::STATUS;
use crate::schema::{PayloadType, Signal, canonical_schema};
use crate::wire::Reader;

fn check_id_space(id: usize, r: &Reader<'_>) -> Result<u32> {
    u32::try_from(id).or_else(|_| r.err("too many child records in one batch"))
}

#[derive(Default)]
struct EventsBuilder {
    parent_id: UInt16Builder,
    time: TimestampNanosecondBuilder,
    name: StringBuilder,
    dropped: UInt32Builder,
}

struct LinksBuilder {
    parent_id: UInt16Builder,
    trace_id: FixedSizeBinaryBuilder,
    span_id: FixedSizeBinaryBuilder,
    trace_state: StringBuilder,
    flags: UInt32Builder,
    dropped: UInt32Builder,
}

pub(crate) struct SpansBuilder {
    rows: u16,
    start: TimestampNanosecondBuilder,
    duration: DurationNanosecondBuilder,
    trace_id: FixedSizeBinaryBuilder,
    span_id: FixedSizeBinaryBuilder,
    trace_state: StringBuilder,
    parent_span_id: FixedSizeBinaryBuilder,
    name: StringBuilder,
    kind: Int32Builder,
    dropped_attributes: UInt32Builder,
    dropped_events: UInt32Builder,
    dropped_links: UInt32Builder,
    flags: UInt32Builder,
    status_code: Int32Builder,
    status_message: StringBuilder,
    attrs: AttrsBuilder,
    events: EventsBuilder,
    event_attrs: AttrsBuilder,
    links: LinksBuilder,
    link_attrs: AttrsBuilder,
}

impl Default for SpansBuilder {
    fn default() -> Self {
        SpansBuilder {
            rows: 0,
            start: Default::default(),
            duration: Default::default(),
            trace_id: FixedSizeBinaryBuilder::new(16),
            span_id: FixedSizeBinaryBuilder::new(8),
            trace_state: Default::default(),
            parent_span_id: FixedSizeBinaryBuilder::new(8),
            name: Default::default(),
            kind: Default::default(),
            dropped_attributes: Default::default(),
            dropped_events: Default::default(),
            dropped_links: Default::default(),
            flags: Default::default(),
            status_code: Default::default(),
            status_message: Default::default(),
            attrs: AttrsBuilder::new(PayloadType::SpanAttrs),
            events: EventsBuilder::default(),
            event_attrs: AttrsBuilder::new(PayloadType::SpanEventAttrs),
            links: LinksBuilder {
                parent_id: Default::default(),
                trace_id: FixedSizeBinaryBuilder::new(16),
                span_id: FixedSizeBinaryBuilder::new(8),
                trace_state: Default::default(),
                flags: Default::default(),
                dropped: Default::default(),
            },
            link_attrs: AttrsBuilder::new(PayloadType::SpanLinkAttrs),
        }
    }
}

impl SpansBuilder {
    fn append_event(&mut self, row: u16, mut r: Reader<'_>) -> Result<()> {
        let id = check_id_space(self.events.parent_id.len(), &r)?;
        let (mut time, mut name, mut dropped) = (0u64, "", 0u32);
        while let Some((field, wire)) = r.field()? {
            match field {
                1 => time = r.fixed64_field(wire)?,
                2 => name = r.string_field(wire)?,
                3 => self
                    .event_attrs
                    .append_key_value(id, r.message_field(wire)?)?,
                4 => dropped = r.varint32(wire)?,
                _ => r.skip(wire)?,
            }
        }
        self.events.parent_id.append_value(row);
        append_nz(&mut self.events.time, time as i64);
        append_str(&mut self.events.name, name);
        append_nz(&mut self.events.dropped, dropped);
        Ok(())
    }

    fn append_link(&mut self, row: u16, mut r: Reader<'_>) -> Result<()> {
        let id = check_id_space(self.links.parent_id.len(), &r)?;
        let (mut trace_id, mut span_id): (&[u8], &[u8]) = (&[], &[]);
        let (mut trace_state, mut flags, mut dropped) = ("", 0u32, 0u32);
        while let Some((field, wire)) = r.field()? {
            match field {
                1 => trace_id = r.bytes_field(wire)?,
                2 => span_id = r.bytes_field(wire)?,
                3 => trace_state = r.string_field(wire)?,
                4 => self
                    .link_attrs
                    .append_key_value(id, r.message_field(wire)?)?,
                5 => dropped = r.varint32(wire)?,
                6 => flags = r.fixed32_field(wire)?,
                _ => r.skip(wire)?,
            }
        }
        self.links.parent_id.append_value(row);
        append_id(&mut self.links.trace_id, trace_id, &r)?;
        append_id(&mut self.links.span_id, span_id, &r)?;
        append_str(&mut self.links.trace_state, trace_state);
        append_nz(&mut self.links.flags, flags);
        append_nz(&mut self.links.dropped, dropped);
        Ok(())
    }
}

impl RootBuilder for SpansBuilder {
    const SIGNAL: usize = 1;

    fn append(&mut self, row: u16, mut r: Reader<'_>) -> Result<()> {
        let (mut trace_id, mut span_id, mut parent): (&[u8], &[u8], &[u8]) = (&[], &[], &[]);
        let (mut trace_state, mut name, mut status_message) = ("", "", "");
        let (mut start, mut end, mut kind, mut flags, mut status_code) = (0u64, 0u64, 0, 0, 0);
        let (mut dropped_attrs, mut dropped_events, mut dropped_links) = (0, 0, 0);
        while let Some((field, wire)) = r.field()? {
            match field {
                1 => trace_id = r.bytes_field(wire)?,
                2 => span_id = r.bytes_field(wire)?,
                3 => trace_state = r.string_field(wire)?,
                4 => parent = r.bytes_field(wire)?,
                5 => name = r.string_field(wire)?,
                6 => kind = r.varint32(wire)? as i32,
                7 => start = r.fixed64_field(wire)?,
                8 => end = r.fixed64_field(wire)?,
                9 => self
                    .attrs
                    .append_key_value(u32::from(row), r.message_field(wire)?)?,
                10 => dropped_attrs = r.varint32(wire)?,
                11 => self.append_event(row, r.message_field(wire)?)?,
                12 => dropped_events = r.varint32(wire)?,
                13 => self.append_link(row, r.message_field(wire)?)?,
                14 => dropped_links = r.varint32(wire)?,
                15 => {
                    let mut s = r.message_field(wire)?;
                    while let Some((field, wire)) = s.field()? {
                        match field {
                            2 => status_message = s.string_field(wire)?,
                            3 => status_code = s.varint32(wire)? as i32,
                            _ => s.skip(wire)?,
                        }
                    }
                }
                16 => flags = r.fixed32_field(wire)?,
                _ => r.skip(wire)?,
            }
        }
        append_nz(&mut self.start, start as i64);
        append_nz(&mut self.duration, end.wrapping_sub(start) as i64);
        append_id(&mut self.trace_id, trace_id, &r)?;
        append_id(&mut self.span_id, span_id, &r)?;
        append_str(&mut self.trace_state, trace_state);
        append_id(&mut self.parent_span_id, parent, &r)?;
        append_str(&mut self.name, name);
        append_nz(&mut self.kind, kind);
        append_nz(&mut self.dropped_attributes, dropped_attrs);
        append_nz(&mut self.dropped_events, dropped_events);
        append_nz(&mut self.dropped_links, dropped_links);
        append_nz(&mut self.flags, flags);
        append_nz(&mut self.status_code, status_code);
        append_str(&mut self.status_message, status_message);
        self.rows = row.wrapping_add(1);
        Ok(())
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
                Arc::new(self.status_message.finish()),
            ],
            None,
        )
        .map_err(|e| Error::arrow("building span status", e))?;
        let columns: Vec<ArrayRef> = vec![
            Arc::new(UInt16Array::from_iter_values(0..rows)),
            envelope.resource,
            envelope.scope,
            envelope.schema_url,
            Arc::new(finish_ts(&mut self.start)),
            Arc::new(self.duration.finish()),
            Arc::new(self.trace_id.finish()),
            Arc::new(self.span_id.finish()),
            Arc::new(self.trace_state.finish()),
            Arc::new(self.parent_span_id.finish()),
            Arc::new(self.name.finish()),
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
                Arc::new(e.parent_id.finish()),
                Arc::new(finish_ts(&mut e.time)),
                Arc::new(e.name.finish()),
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
                Arc::new(l.parent_id.finish()),
                Arc::new(l.trace_id.finish()),
                Arc::new(l.span_id.finish()),
                Arc::new(l.trace_state.finish()),
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
