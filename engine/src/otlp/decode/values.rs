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
    ArrayRef, BinaryArray, BooleanArray, DictionaryArray, PrimitiveArray, RecordBatch, StringArray,
    UInt8Array, UInt16Array, UInt32Array,
};
use arrow::buffer::{BooleanBuffer, NullBuffer, ScalarBuffer};
use arrow::datatypes::{ArrowPrimitiveType, Field, Float64Type, Int64Type, Schema, UInt16Type};

use super::columns::{VarColumn, invalid_utf8};
use super::validity::{Presence, presence, type_counts};
use crate::error::{Error, Result};
use crate::schema::consts::{self, value_type};
use crate::schema::{PayloadType, canonical_schema};
use crate::value::any_value::{AnyRef, parse_key_value, split_key_value, whole_varint};
use crate::value::cbor;
use crate::wire::Reader;

/// The `type`, `str`, `int`, `double`, `bool`, `bytes` and `ser` columns. Every row writes its
/// type and an offset in `str` (empty unless it is a string), so that a string row costs no
/// check for rows before it without one; the numbers, bytes and serialized values are written
/// only for the rows that have them and laid out when finished (zeros, empty values).
#[derive(Default)]
pub(crate) struct ValueColumns {
    ty: Vec<u8>,
    str: VarColumn,
    int: Slots<i64>,
    double: Slots<f64>,
    bool: Slots<bool>,
    bytes: VarColumn,
    ser: VarColumn,
}

impl ValueColumns {
    /// Appends a string value.
    #[inline(always)]
    pub(crate) fn push_str(&mut self, s: &[u8]) {
        self.str.push(s);
        self.ty.push(value_type::STR);
    }

    /// Appends an int value.
    #[inline(always)]
    pub(crate) fn push_int(&mut self, i: i64) {
        self.int.set(self.ty.len(), i);
        self.push_type(value_type::INT);
    }

    /// Appends a double value.
    #[inline(always)]
    pub(crate) fn push_double(&mut self, d: f64) {
        self.double.set(self.ty.len(), d);
        self.push_type(value_type::DOUBLE);
    }

    /// Appends a bool value.
    #[inline(always)]
    pub(crate) fn push_bool(&mut self, b: bool) {
        self.bool.set(self.ty.len(), b);
        self.push_type(value_type::BOOL);
    }

    /// Appends the value of an `AnyValue` message that is exactly one string field (length
    /// under 128), int, double or bool field, as [`AnyRef::parse`] would read it; returns false,
    /// appending nothing, for any other message.
    #[inline(always)]
    pub(crate) fn push_scalar(&mut self, value: &[u8]) -> bool {
        match value {
            [0x0a, len, s @ ..] if usize::from(*len) == s.len() && *len < 0x80 => self.push_str(s),
            [0x18, v @ ..] => match whole_varint(v) {
                Some(i) => self.push_int(i as i64),
                None => return false,
            },
            [0x21, d @ ..] => match <[u8; 8]>::try_from(d) {
                Ok(d) => self.push_double(f64::from_le_bytes(d)),
                Err(_) => return false,
            },
            [0x10, b @ (0 | 1)] => self.push_bool(*b == 1),
            _ => return false,
        }
        true
    }

    /// Ends a row that is not a string: its type, and an empty string slot.
    #[inline(always)]
    fn push_type(&mut self, ty: u8) {
        self.str.skip();
        self.ty.push(ty);
    }

    /// Appends a value; returns its `AttributeValueType`.
    #[inline(always)]
    pub(crate) fn append(&mut self, value: AnyRef<'_>) -> Result<u8> {
        let row = self.ty.len();
        let ty = match value {
            AnyRef::Str(s) => {
                self.push_str(s);
                return Ok(value_type::STR);
            }
            AnyRef::Empty => value_type::EMPTY,
            AnyRef::Int(i) => {
                self.int.set(row, i);
                value_type::INT
            }
            AnyRef::Double(d) => {
                self.double.set(row, d);
                value_type::DOUBLE
            }
            AnyRef::Bool(b) => {
                self.bool.set(row, b);
                value_type::BOOL
            }
            AnyRef::Kvlist(_) | AnyRef::Array(_) => {
                let ty = match value {
                    AnyRef::Kvlist(_) => value_type::MAP,
                    _ => value_type::SLICE,
                };
                self.ser.fill_to(row);
                cbor::write_any(value, &mut self.ser.data, 0)?;
                self.ser.skip();
                ty
            }
            AnyRef::Bytes(b) => {
                self.bytes.push_at(row, b);
                value_type::BYTES
            }
        };
        self.push_type(ty);
        Ok(ty)
    }

    /// Reserves room for `rows` more values.
    pub(crate) fn reserve(&mut self, rows: usize) {
        self.ty.reserve(rows);
        // Most values are strings: the number columns start smaller and grow as needed.
        self.int.reserve(rows / 4);
        self.double.reserve(rows / 8);
        self.bool.reserve(rows / 8);
        self.str.offsets.reserve(rows);
        self.str.data.reserve(rows * 12);
    }

    /// Reserves room for `rows` more values that are mostly strings of `bytes` bytes in all
    /// (a log body).
    pub(crate) fn reserve_strings(&mut self, rows: usize, bytes: usize) {
        self.ty.reserve(rows);
        self.str.reserve(rows, bytes);
    }

    /// The seven columns of an any-value struct, and the struct's validity: rows with a value
    /// (of a type other than EMPTY).
    pub(crate) fn finish_struct(&mut self) -> Result<([ArrayRef; 7], Option<NullBuffer>)> {
        let counts = type_counts(&self.ty);
        const NOT_EMPTY: [u8; 7] = [
            value_type::STR,
            value_type::INT,
            value_type::DOUBLE,
            value_type::BOOL,
            value_type::MAP,
            value_type::SLICE,
            value_type::BYTES,
        ];
        let rows = self.ty.len();
        let nulls = presence(&self.ty, &counts, &NOT_EMPTY).nulls(rows);
        Ok((self.finish_counted(counts)?, nulls))
    }

    /// The seven columns, in canonical order.
    pub(crate) fn finish(&mut self) -> Result<[ArrayRef; 7]> {
        let counts = type_counts(&self.ty);
        self.finish_counted(counts)
    }

    /// The seven columns, given the count of each type.
    fn finish_counted(&mut self, counts: [usize; 8]) -> Result<[ArrayRef; 7]> {
        let ty = std::mem::take(&mut self.ty);
        let rows = ty.len();
        let of = |wanted: &[u8]| presence(&ty, &counts, wanted);
        let int = finish_numbers::<Int64Type>(&mut self.int, rows, of(&[value_type::INT]));
        let double =
            finish_numbers::<Float64Type>(&mut self.double, rows, of(&[value_type::DOUBLE]));
        let bool: ArrayRef = match of(&[value_type::BOOL]) {
            Presence::None => Arc::new(BooleanArray::new_null(rows)),
            p => Arc::new(BooleanArray::new(
                BooleanBuffer::from(self.bool.finish(rows)),
                p.nulls(rows),
            )),
        };
        let str = match of(&[value_type::STR]) {
            Presence::None => {
                self.str = VarColumn::default();
                Arc::new(StringArray::new_null(rows))
            }
            p => {
                self.str.fill_to(rows);
                self.str.finish_str(p.nulls(rows))?
            }
        };
        let bytes = finish_binary(&mut self.bytes, rows, of(&[value_type::BYTES]))?;
        let ser = finish_binary(
            &mut self.ser,
            rows,
            of(&[value_type::MAP, value_type::SLICE]),
        )?;
        Ok([
            Arc::new(UInt8Array::from(ty)),
            str,
            int,
            double,
            bool,
            bytes,
            ser,
        ])
    }
}

/// A numeric value column of `rows` rows holding values where `presence` says.
fn finish_numbers<P: ArrowPrimitiveType>(
    slots: &mut Slots<P::Native>,
    rows: usize,
    presence: Presence,
) -> ArrayRef {
    match presence {
        Presence::None => Arc::new(PrimitiveArray::<P>::new_null(rows)),
        p => Arc::new(PrimitiveArray::<P>::new(
            ScalarBuffer::from(slots.finish(rows)),
            p.nulls(rows),
        )),
    }
}

/// A binary value column of `rows` rows holding values where `presence` says.
fn finish_binary(column: &mut VarColumn, rows: usize, presence: Presence) -> Result<ArrayRef> {
    match presence {
        Presence::None => {
            *column = VarColumn::default();
            Ok(Arc::new(BinaryArray::new_null(rows)))
        }
        p => {
            column.fill_to(rows);
            column.finish_binary(p.nulls(rows))
        }
    }
}

/// The values of the rows that have one, with their row numbers: a value costs two pushes,
/// with no per-row gap to fill; the column is laid out when it is finished.
struct Slots<T> {
    rows: Vec<u32>,
    values: Vec<T>,
}

impl<T> Default for Slots<T> {
    fn default() -> Self {
        Slots {
            rows: Vec::new(),
            values: Vec::new(),
        }
    }
}

impl<T: Copy + Default> Slots<T> {
    /// Sets the value of `row` (rows are at most `u32::MAX`: a request holds fewer values
    /// than bytes).
    #[inline(always)]
    fn set(&mut self, row: usize, value: T) {
        self.rows.push(row as u32);
        self.values.push(value);
    }

    /// Reserves room for `rows` more values.
    fn reserve(&mut self, rows: usize) {
        self.rows.reserve(rows);
        self.values.reserve(rows);
    }

    /// The values of `rows` rows, the default where a row has none.
    fn finish(&mut self, rows: usize) -> Vec<T> {
        let mut out = vec![T::default(); rows];
        for (row, value) in self.rows.iter().zip(&self.values) {
            if let Some(slot) = out.get_mut(*row as usize) {
                *slot = *value;
            }
        }
        self.rows.clear();
        self.values.clear();
        out
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

/// Byte equality without a library call for strings of 8 to 32 bytes (most attribute keys):
/// two overlapping loads from each end.
#[inline(always)]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    fn word<const W: usize>(s: &[u8], at: usize) -> [u8; W] {
        let mut out = [0; W];
        out.copy_from_slice(&s[at..at + W]);
        out
    }
    match n {
        8..=16 => word::<8>(a, 0) == word::<8>(b, 0) && word::<8>(a, n - 8) == word::<8>(b, n - 8),
        17..=32 => {
            word::<16>(a, 0) == word::<16>(b, 0) && word::<16>(a, n - 16) == word::<16>(b, n - 16)
        }
        _ => a == b,
    }
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

    #[inline(always)]
    fn append(&mut self, key: &[u8]) -> Result<()> {
        if let Some(plain) = &mut self.plain {
            plain.push(key);
            return Ok(());
        }
        let slot = fingerprint(key);
        let cached = self.cache.0[slot];
        if cached != 0 && same_bytes(self.value((cached - 1) as u16), key) {
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

/// The `parent_id` column, in the width of the table's parent ids (Attrs16 or Attrs32), so the
/// rows are written once in their final form.
enum ParentIds {
    Narrow(Vec<u16>),
    Wide(Vec<u32>),
}

impl ParentIds {
    /// Appends a parent id (a `UInt16` table's parents are record rows, below 65,536).
    #[inline(always)]
    fn push(&mut self, parent: u32) {
        match self {
            ParentIds::Narrow(ids) => ids.push(parent as u16),
            ParentIds::Wide(ids) => ids.push(parent),
        }
    }

    fn reserve(&mut self, rows: usize) {
        match self {
            ParentIds::Narrow(ids) => ids.reserve(rows),
            ParentIds::Wide(ids) => ids.reserve(rows),
        }
    }

    fn is_empty(&self) -> bool {
        match self {
            ParentIds::Narrow(ids) => ids.is_empty(),
            ParentIds::Wide(ids) => ids.is_empty(),
        }
    }

    /// The column, leaving this one empty.
    fn finish(&mut self) -> ArrayRef {
        match self {
            ParentIds::Narrow(ids) => Arc::new(UInt16Array::from(std::mem::take(ids))),
            ParentIds::Wide(ids) => Arc::new(UInt32Array::from(std::mem::take(ids))),
        }
    }
}

/// Builds one attribute table.
pub(crate) struct AttrsBuilder {
    table: PayloadType,
    parent_id: ParentIds,
    key: KeyColumn,
    values: ValueColumns,
}

impl AttrsBuilder {
    pub(crate) fn new(table: PayloadType) -> Self {
        AttrsBuilder {
            table,
            parent_id: if table.attrs_parent_is_u16() == Some(true) {
                ParentIds::Narrow(Vec::new())
            } else {
                ParentIds::Wide(Vec::new())
            },
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
    #[inline(always)]
    pub(crate) fn append_key_value(&mut self, parent: u32, kv: Reader<'_>) -> Result<()> {
        // The common layout goes straight from the value's tag to its column: one dispatch.
        if let Some((key, value)) = split_key_value(kv.rest())
            && self.values.push_scalar(value)
        {
            self.parent_id.push(parent);
            return self.key.append(key);
        }
        let (key, value) = parse_key_value(kv)?;
        let value = match value {
            Some(v) => AnyRef::parse(v)?,
            None => AnyRef::Empty,
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
        let parent = self.parent_id.finish();
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

#[cfg(test)]
mod tests {
    use super::{ValueColumns, same_bytes};
    use crate::value::any_value::AnyRef;
    use crate::wire::Reader;

    /// The one-dispatch path writes what the general parser writes, and leaves the layouts it
    /// does not take untouched.
    #[test]
    fn push_scalar_agrees_with_the_general_parser() {
        let values: Vec<Vec<u8>> = vec![
            vec![0x0a, 1, b'v'],
            vec![0x0a, 0],
            vec![0x18, 0x05],
            vec![
                0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
            ],
            vec![0x21, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f],
            vec![0x21, 0, 0, 0, 0, 0, 0, 0xf8, 0x7f],
            vec![0x10, 1],
            vec![0x10, 0],
        ];
        let mut fast = ValueColumns::default();
        let mut general = ValueColumns::default();
        for value in &values {
            assert!(fast.push_scalar(value), "{value:?}");
            general
                .append(AnyRef::parse(Reader::new(value)).unwrap())
                .unwrap();
        }
        assert_eq!(fast.finish().unwrap(), general.finish().unwrap());
        for value in [
            vec![],
            vec![0x10, 2],
            vec![0x10, 1, 0x10, 0],
            vec![0x18, 0x05, 0x00],
            vec![0x18, 0x80],
            vec![0x21, 0, 0, 0],
            vec![0x0a, 2, b'v'],
            vec![0x2a, 0],
            vec![0x3a, 1, 0],
        ] {
            let mut columns = ValueColumns::default();
            assert!(!columns.push_scalar(&value), "{value:?}");
            assert!(columns.ty.is_empty() && columns.str.offsets.len() == 1);
        }
    }

    #[test]
    fn same_bytes_agrees_with_slice_equality() {
        let base: Vec<u8> = (0..40u8).collect();
        for len in 0..40 {
            let a = &base[..len];
            assert!(same_bytes(a, a));
            for at in 0..len {
                let mut b = a.to_vec();
                b[at] ^= 1;
                assert!(!same_bytes(a, &b), "len {len}, byte {at}");
            }
            assert!(!same_bytes(a, &base[..len + 1]));
        }
    }
}
