//! Column buffers for any-values (the `type` + value columns shared by attribute tables and the
//! log body) and for attribute tables.
//!
//! Values go into plain vectors, one slot per row in every column (a default where the row's
//! value is of another type); validity comes from the `type` column when the arrays are built.
//! String bytes are validated as UTF-8 once per column, in bulk. Attribute keys are
//! dictionary-encoded as they arrive: a repeated key costs one hash lookup.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanArray, DictionaryArray, Float64Array, Int64Array, RecordBatch, UInt8Array,
    UInt16Array, UInt32Array,
};
use arrow::buffer::{BooleanBuffer, NullBuffer, ScalarBuffer};
use arrow::datatypes::{Field, Schema, UInt16Type};

use super::columns::{VarColumn, invalid_utf8};
use crate::cbor;
use crate::error::{Error, Result};
use crate::otlp::any_value::{AnyRef, fast_key_value, parse_key_value};
use crate::schema::consts::{self, value_type};
use crate::schema::{PayloadType, canonical_schema};
use crate::wire::Reader;

/// The `type`, `str`, `int`, `double`, `bool`, `bytes` and `ser` columns.
#[derive(Default)]
pub(crate) struct ValueColumns {
    ty: Vec<u8>,
    str: VarColumn,
    int: Vec<i64>,
    double: Vec<f64>,
    bool: Vec<bool>,
    bytes: VarColumn,
    ser: VarColumn,
}

impl ValueColumns {
    /// Appends a value; returns its `AttributeValueType`.
    #[inline]
    pub(crate) fn append(&mut self, value: AnyRef<'_>) -> Result<u8> {
        let ty = match value {
            AnyRef::Empty => value_type::EMPTY,
            AnyRef::Str(s) => {
                self.str.push(s);
                value_type::STR
            }
            AnyRef::Int(_) => value_type::INT,
            AnyRef::Double(_) => value_type::DOUBLE,
            AnyRef::Bool(_) => value_type::BOOL,
            AnyRef::Kvlist(_) => value_type::MAP,
            AnyRef::Array(_) => value_type::SLICE,
            AnyRef::Bytes(b) => {
                self.bytes.push(b);
                value_type::BYTES
            }
        };
        if ty != value_type::STR {
            self.str.skip();
        }
        if ty != value_type::BYTES {
            self.bytes.skip();
        }
        self.int
            .push(if let AnyRef::Int(i) = value { i } else { 0 });
        self.double.push(if let AnyRef::Double(d) = value {
            d
        } else {
            0.0
        });
        self.bool.push(matches!(value, AnyRef::Bool(true)));
        if matches!(value, AnyRef::Kvlist(_) | AnyRef::Array(_)) {
            cbor::write_any(value, &mut self.ser.data, 0)?;
        }
        self.ser.skip();
        self.ty.push(ty);
        Ok(ty)
    }

    /// Reserves room for `rows` more values.
    pub(crate) fn reserve(&mut self, rows: usize) {
        self.ty.reserve(rows);
        self.int.reserve(rows);
        self.double.reserve(rows);
        self.bool.reserve(rows);
        for column in [&mut self.str, &mut self.bytes, &mut self.ser] {
            column.offsets.reserve(rows);
        }
        self.str.data.reserve(rows * 12);
    }

    /// Appends a row with no value (inside a null struct row).
    pub(crate) fn append_null(&mut self) {
        self.ty.push(value_type::EMPTY);
        self.str.skip();
        self.int.push(0);
        self.double.push(0.0);
        self.bool.push(false);
        self.bytes.skip();
        self.ser.skip();
    }

    /// The seven columns, in canonical order.
    pub(crate) fn finish(&mut self) -> Result<[ArrayRef; 7]> {
        let ty = std::mem::take(&mut self.ty);
        let valid = |wanted: &[u8]| -> Option<NullBuffer> {
            let bits = match *wanted {
                [one] => BooleanBuffer::collect_bool(ty.len(), |i| ty[i] == one),
                [a, b] => BooleanBuffer::collect_bool(ty.len(), |i| ty[i] == a || ty[i] == b),
                _ => BooleanBuffer::collect_bool(ty.len(), |i| wanted.contains(&ty[i])),
            };
            Some(NullBuffer::new(bits))
        };
        let int = Int64Array::new(
            ScalarBuffer::from(std::mem::take(&mut self.int)),
            valid(&[value_type::INT]),
        );
        let double = Float64Array::new(
            ScalarBuffer::from(std::mem::take(&mut self.double)),
            valid(&[value_type::DOUBLE]),
        );
        let bools = BooleanBuffer::from(std::mem::take(&mut self.bool));
        let bool = BooleanArray::new(bools, valid(&[value_type::BOOL]));
        Ok([
            Arc::new(UInt8Array::from(ty.clone())),
            self.str.finish_str(valid(&[value_type::STR]))?,
            Arc::new(int),
            Arc::new(double),
            Arc::new(bool),
            self.bytes.finish_binary(valid(&[value_type::BYTES]))?,
            self.ser
                .finish_binary(valid(&[value_type::MAP, value_type::SLICE]))?,
        ])
    }
}

/// Attribute keys, dictionary-encoded as they are appended (plain strings past 65,536 distinct
/// keys in one table).
/// Slots of the key cache (a power of two).
const KEY_CACHE_SLOTS: usize = 64;

#[derive(Default)]
struct KeyColumn {
    /// Recently seen keys by a cheap fingerprint: dictionary key + 1 (0: empty slot).
    cache: KeyCache,
    index: HashMap<Box<[u8]>, u16, ahash::RandomState>,
    values: VarColumn,
    keys: Vec<u16>,
    /// Keys stored plainly once the dictionary is full.
    plain: Option<VarColumn>,
}

struct KeyCache([u32; KEY_CACHE_SLOTS]);

impl Default for KeyCache {
    fn default() -> Self {
        KeyCache([0; KEY_CACHE_SLOTS])
    }
}

#[inline]
fn fingerprint(key: &[u8]) -> usize {
    let (first, last) = (
        key.first().copied().unwrap_or(0),
        key.last().copied().unwrap_or(0),
    );
    (key.len().wrapping_mul(31) ^ usize::from(first).wrapping_mul(7) ^ usize::from(last))
        % KEY_CACHE_SLOTS
}

impl KeyColumn {
    /// The dictionary value of key `k`.
    #[inline]
    fn value(&self, k: u16) -> &[u8] {
        let offsets = &self.values.offsets;
        let (start, end) = (
            offsets[usize::from(k)] as usize,
            offsets[usize::from(k) + 1] as usize,
        );
        &self.values.data[start..end]
    }

    #[inline]
    fn append(&mut self, key: &[u8]) -> Result<()> {
        if let Some(plain) = &mut self.plain {
            plain.push(key);
            return Ok(());
        }
        let slot = fingerprint(key);
        let cached = self.cache.0[slot];
        if cached != 0 && self.value((cached - 1) as u16) == key {
            self.keys.push((cached - 1) as u16);
            return Ok(());
        }
        if let Some(k) = self.index.get(key) {
            self.cache.0[slot] = u32::from(*k) + 1;
            self.keys.push(*k);
            return Ok(());
        }
        std::str::from_utf8(key).map_err(|_| invalid_utf8())?;
        match u16::try_from(self.index.len()) {
            Ok(k) => {
                self.index.insert(key.into(), k);
                self.values.push(key);
                self.keys.push(k);
            }
            Err(_) => {
                let mut plain = VarColumn::default();
                let values = &self.values;
                for k in &self.keys {
                    let (start, end) =
                        (values.offsets[*k as usize], values.offsets[*k as usize + 1]);
                    plain.push(&values.data[start as usize..end as usize]);
                }
                plain.push(key);
                self.plain = Some(plain);
            }
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<ArrayRef> {
        self.cache = KeyCache::default();
        if let Some(mut plain) = self.plain.take() {
            self.index.clear();
            self.values = VarColumn::default();
            self.keys.clear();
            return plain.finish_str(None);
        }
        self.index.clear();
        let values = self.values.finish_str(None)?;
        let keys = UInt16Array::from(std::mem::take(&mut self.keys));
        DictionaryArray::<UInt16Type>::try_new(keys, values)
            .map(|d| Arc::new(d) as ArrayRef)
            .map_err(|e| Error::arrow("building attribute keys", e))
    }
}

/// Builds one attribute table.
pub(crate) struct AttrsBuilder {
    table: PayloadType,
    parent_id: Vec<u32>,
    key: KeyColumn,
    values: ValueColumns,
}

impl AttrsBuilder {
    pub(crate) fn new(table: PayloadType) -> Self {
        AttrsBuilder {
            table,
            parent_id: Vec::new(),
            key: KeyColumn::default(),
            values: ValueColumns::default(),
        }
    }

    /// Reserves room for `rows` more attributes.
    pub(crate) fn reserve(&mut self, rows: usize) {
        self.parent_id.reserve(rows);
        self.key.keys.reserve(rows);
        self.values.reserve(rows);
    }

    /// Appends one attribute from an OTLP `KeyValue` message.
    #[inline]
    pub(crate) fn append_key_value(&mut self, parent: u32, kv: Reader<'_>) -> Result<()> {
        let (key, value) = match fast_key_value(kv.rest()) {
            Some(parsed) => parsed,
            None => {
                let (key, value) = parse_key_value(kv)?;
                match value {
                    Some(v) => (key, AnyRef::parse(v)?),
                    None => (key, AnyRef::Empty),
                }
            }
        };
        self.parent_id.push(parent);
        self.key.append(key)?;
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
        let key = self.key.finish()?;
        let canonical = canonical_schema(self.table);
        let fields: Vec<Field> = canonical
            .fields()
            .iter()
            .map(|f| {
                if f.name() == consts::KEY {
                    Field::new(consts::KEY, key.data_type().clone(), false)
                } else {
                    f.as_ref().clone()
                }
            })
            .collect();
        let mut columns = vec![parent, key];
        columns.extend(self.values.finish()?);
        RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
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
