//! Arrow builders for any-values (the `type` + value columns shared by attribute tables and the
//! log body) and for attribute tables.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BinaryBuilder, BooleanBuilder, Float64Builder, Int64Builder, RecordBatch,
    StringBuilder, UInt8Builder, UInt16Array, UInt32Array,
};
use arrow::buffer::NullBuffer;

use crate::cbor;
use crate::error::{Error, Result};
use crate::otlp::any_value::{AnyRef, parse_key_value};
use crate::schema::consts::value_type;
use crate::schema::{PayloadType, canonical_schema};
use crate::wire::Reader;

/// The `type`, `str`, `int`, `double`, `bool`, `bytes` and `ser` columns.
#[derive(Default)]
pub(crate) struct ValueColumns {
    ty: UInt8Builder,
    str: StringBuilder,
    int: Int64Builder,
    double: Float64Builder,
    bool: BooleanBuilder,
    bytes: BinaryBuilder,
    ser: BinaryBuilder,
    scratch: Vec<u8>,
}

impl ValueColumns {
    /// Appends a value; returns its `AttributeValueType`.
    pub(crate) fn append(&mut self, value: AnyRef<'_>) -> Result<u8> {
        let ty = match value {
            AnyRef::Empty => value_type::EMPTY,
            AnyRef::Str(_) => value_type::STR,
            AnyRef::Int(_) => value_type::INT,
            AnyRef::Double(_) => value_type::DOUBLE,
            AnyRef::Bool(_) => value_type::BOOL,
            AnyRef::Kvlist(_) => value_type::MAP,
            AnyRef::Array(_) => value_type::SLICE,
            AnyRef::Bytes(_) => value_type::BYTES,
        };
        self.ty.append_value(ty);
        match value {
            AnyRef::Str(s) => self.str.append_value(s),
            _ => self.str.append_null(),
        }
        match value {
            AnyRef::Int(i) => self.int.append_value(i),
            _ => self.int.append_null(),
        }
        match value {
            AnyRef::Double(d) => self.double.append_value(d),
            _ => self.double.append_null(),
        }
        match value {
            AnyRef::Bool(b) => self.bool.append_value(b),
            _ => self.bool.append_null(),
        }
        match value {
            AnyRef::Bytes(b) => self.bytes.append_value(b),
            _ => self.bytes.append_null(),
        }
        match value {
            AnyRef::Kvlist(_) | AnyRef::Array(_) => {
                self.scratch.clear();
                cbor::write_any(value, &mut self.scratch, 0)?;
                self.ser.append_value(&self.scratch);
            }
            _ => self.ser.append_null(),
        }
        Ok(ty)
    }

    /// Appends a row with no value (inside a null struct row).
    pub(crate) fn append_null(&mut self) {
        self.ty.append_value(value_type::EMPTY);
        self.str.append_null();
        self.int.append_null();
        self.double.append_null();
        self.bool.append_null();
        self.bytes.append_null();
        self.ser.append_null();
    }

    /// The seven columns, in canonical order.
    pub(crate) fn finish(&mut self) -> [ArrayRef; 7] {
        [
            Arc::new(self.ty.finish()),
            Arc::new(self.str.finish()),
            Arc::new(self.int.finish()),
            Arc::new(self.double.finish()),
            Arc::new(self.bool.finish()),
            Arc::new(self.bytes.finish()),
            Arc::new(self.ser.finish()),
        ]
    }
}

/// Builds one attribute table.
pub(crate) struct AttrsBuilder {
    table: PayloadType,
    parent_id: Vec<u32>,
    key: StringBuilder,
    values: ValueColumns,
}

impl AttrsBuilder {
    pub(crate) fn new(table: PayloadType) -> Self {
        AttrsBuilder {
            table,
            parent_id: Vec::new(),
            key: StringBuilder::new(),
            values: ValueColumns::default(),
        }
    }

    /// Appends one attribute from an OTLP `KeyValue` message.
    #[inline]
    pub(crate) fn append_key_value(&mut self, parent: u32, kv: Reader<'_>) -> Result<()> {
        let (key, value) = parse_key_value(kv)?;
        let value = match value {
            Some(v) => AnyRef::parse(v)?,
            None => AnyRef::Empty,
        };
        self.parent_id.push(parent);
        self.key.append_value(key);
        self.values.append(value)?;
        Ok(())
    }

    /// The finished table, or None when no attribute was appended.
    pub(crate) fn finish(&mut self) -> Result<Option<RecordBatch>> {
        if self.parent_id.is_empty() {
            return Ok(None);
        }
        let parent_ids = std::mem::take(&mut self.parent_id);
        let parent: ArrayRef = if self.table.attrs_parent_is_u16() == Some(true) {
            Arc::new(UInt16Array::from_iter_values(
                parent_ids.into_iter().map(|p| p as u16),
            ))
        } else {
            Arc::new(UInt32Array::from(parent_ids))
        };
        let mut columns = vec![parent, Arc::new(self.key.finish()) as ArrayRef];
        columns.extend(self.values.finish());
        RecordBatch::try_new(canonical_schema(self.table), columns)
            .map(Some)
            .map_err(|e| Error::arrow(format!("building {:?}", self.table), e))
    }
}

/// A validity buffer from per-row flags, or None when every row is valid.
pub(crate) fn nulls_from(valid: &[bool]) -> Option<NullBuffer> {
    if valid.iter().all(|v| *v) {
        None
    } else {
        Some(NullBuffer::from(valid.to_vec()))
    }
}
