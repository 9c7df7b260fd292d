//! `LogRecord` → the `LOGS` and `LOG_ATTRS` tables.

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, StructArray, UInt16Array};
use arrow::datatypes::{Int32Type, TimestampNanosecondType, UInt32Type};

use super::columns::{IdColumn, NumColumn, StrColumn};
use super::envelope::EnvelopeColumns;
use super::root::{RootBuilder, set_envelope_attrs, table_schema};
use super::values::{AttrsBuilder, ValueColumns};
use crate::batch::OtapBatch;
use crate::error::{Error, Result};
use crate::schema::consts::UTC;
use crate::schema::tables::any_value_fields;
use crate::schema::{PayloadType, Signal};
use crate::value::any_value::AnyRef;
use crate::wire::Reader;

/// The `LogRecord` fields this decoder reads.
const LOG_RECORD_FIELDS: [u32; 11] = [1, 2, 3, 5, 6, 7, 8, 9, 10, 11, 12];

pub(crate) struct LogsBuilder {
    rows: u16,
    time: NumColumn<TimestampNanosecondType>,
    observed: NumColumn<TimestampNanosecondType>,
    trace_id: IdColumn,
    span_id: IdColumn,
    severity_number: NumColumn<Int32Type>,
    severity_text: StrColumn,
    body: ValueColumns,
    dropped: NumColumn<UInt32Type>,
    flags: NumColumn<UInt32Type>,
    event_name: StrColumn,
    attrs: AttrsBuilder,
}

impl Default for LogsBuilder {
    fn default() -> Self {
        LogsBuilder {
            rows: 0,
            time: NumColumn::default(),
            observed: NumColumn::default(),
            trace_id: IdColumn::new(16),
            span_id: IdColumn::new(8),
            severity_number: NumColumn::default(),
            severity_text: StrColumn::default(),
            body: ValueColumns::default(),
            dropped: NumColumn::default(),
            flags: NumColumn::default(),
            event_name: StrColumn::default(),
            attrs: AttrsBuilder::new(PayloadType::LogAttrs),
        }
    }
}

impl RootBuilder for LogsBuilder {
    const SIGNAL: usize = 0;

    fn append(&mut self, row: u16, mut r: Reader<'_>) -> Result<()> {
        let (mut time, mut observed, mut severity, mut dropped, mut flags) = (0, 0, 0, 0, 0);
        let (mut severity_text, mut event_name): (&[u8], &[u8]) = (&[], &[]);
        let (mut trace_id, mut span_id): (&[u8], &[u8]) = (&[], &[]);
        let mut body = AnyRef::Empty;
        // Keys are matched whole (field number and wire type): see `Reader::key`.
        while let Some(key) = r.key()? {
            match key {
                0x09 => time = r.fixed64()?,                  // 1: fixed64
                0x59 => observed = r.fixed64()?,              // 11: fixed64
                0x10 => severity = r.varint()? as u32 as i32, // 2: varint
                0x1a => severity_text = r.bytes()?.0,         // 3: bytes
                0x2a => body = AnyRef::parse(r.message()?)?,  // 5: message
                0x32 => self.attrs.append_key_value(u32::from(row), r.message()?)?, // 6
                0x38 => dropped = r.varint()? as u32,         // 7: varint
                0x45 => flags = r.fixed32()?,                 // 8: fixed32
                0x4a => trace_id = r.bytes()?.0,              // 9: bytes
                0x52 => span_id = r.bytes()?.0,               // 10: bytes
                0x62 => event_name = r.bytes()?.0,            // 12: bytes
                _ => r.skip_key(key, &LOG_RECORD_FIELDS)?,
            }
        }
        self.time.push(time as i64);
        self.observed.push(observed as i64);
        self.trace_id.push(trace_id, &r)?;
        self.span_id.push(span_id, &r)?;
        self.severity_number.push(severity);
        self.severity_text.push(severity_text);
        // An absent or empty body is a null row (its type is EMPTY).
        self.body.append(body)?;
        self.dropped.push(dropped);
        self.flags.push(flags);
        self.event_name.push(event_name);
        self.rows = row.wrapping_add(1);
        Ok(())
    }

    fn reserve(&mut self, records: usize, bytes: usize) {
        for column in [&mut self.time, &mut self.observed] {
            column.reserve(records);
        }
        for column in [&mut self.dropped, &mut self.flags] {
            column.reserve(records);
        }
        self.severity_number.reserve(records);
        self.trace_id.reserve(records);
        self.span_id.reserve(records);
        self.severity_text.reserve(records, records * 8);
        self.event_name.reserve(records, 0);
        // Bodies and attributes share the request's bytes; the hints are capped by its size.
        self.body.reserve_strings(records, bytes / 2);
        // About 30 bytes of OTLP per attribute.
        self.attrs.reserve(bytes / 32);
    }

    fn finish(&mut self, envelope: EnvelopeColumns) -> Result<OtapBatch> {
        let rows = std::mem::take(&mut self.rows);
        let (body_columns, body_nulls) = self.body.finish_struct()?;
        let body = StructArray::try_new(any_value_fields(), body_columns.to_vec(), body_nulls)
            .map_err(|e| Error::arrow("building log body", e))?;
        let columns: Vec<ArrayRef> = vec![
            Arc::new(UInt16Array::from_iter_values(0..rows)),
            envelope.resource,
            envelope.scope,
            envelope.schema_url,
            Arc::new(self.time.finish().with_timezone(UTC)),
            Arc::new(self.observed.finish().with_timezone(UTC)),
            self.trace_id.finish()?,
            self.span_id.finish()?,
            Arc::new(self.severity_number.finish()),
            self.severity_text.finish()?,
            Arc::new(body),
            Arc::new(self.dropped.finish()),
            Arc::new(self.flags.finish()),
            self.event_name.finish()?,
        ];
        let logs = RecordBatch::try_new(table_schema(PayloadType::Logs, &columns), columns)
            .map_err(|e| Error::arrow("building LOGS", e))?;
        let mut batch = OtapBatch::new(Signal::Logs);
        batch.set(PayloadType::Logs, logs)?;
        set_envelope_attrs(&mut batch, envelope.resource_attrs, envelope.scope_attrs)?;
        if let Some(attrs) = self.attrs.finish()? {
            batch.set(PayloadType::LogAttrs, attrs)?;
        }
        Ok(batch)
    }
}
