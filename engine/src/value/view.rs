//! [`ValueView`]: the `type` and value columns of an attribute table or any-value struct, read
//! as OTLP values (written as protobuf, or compared for id transport encodings).

use arrow::array::{
    Array, BinaryArray, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray,
    StructArray, UInt8Array,
};

use crate::column::Col;
use crate::error::Result;
use crate::schema::PayloadType;
use crate::schema::consts::{self, value_type};
use crate::value::cbor;
use crate::wire::Writer;

/// A scalar attribute value, compared as the reference implementations do (IEEE equality for
/// doubles). Maps, slices and empty values have no scalar.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar<'a> {
    /// A string.
    Str(&'a str),
    /// A 64-bit integer.
    Int(i64),
    /// A double.
    Double(f64),
    /// A boolean.
    Bool(bool),
    /// Bytes.
    Bytes(&'a [u8]),
}

/// The `type` and value columns of an attribute table or any-value struct.
pub struct ValueView<'a> {
    pub(crate) ty: Col<'a, UInt8Array>,
    pub(crate) str: Col<'a, StringArray>,
    pub(crate) int: Col<'a, Int64Array>,
    pub(crate) double: Col<'a, Float64Array>,
    pub(crate) bool: Col<'a, BooleanArray>,
    pub(crate) bytes: Col<'a, BinaryArray>,
    ser: Col<'a, BinaryArray>,
}

impl<'a> ValueView<'a> {
    /// The value columns of an attribute table.
    pub fn of_table(t: &'a RecordBatch, kind: PayloadType) -> Result<Self> {
        Ok(ValueView {
            ty: Col::of(t, kind, consts::TYPE)?,
            str: Col::of(t, kind, consts::STR)?,
            int: Col::of(t, kind, consts::INT)?,
            double: Col::of(t, kind, consts::DOUBLE)?,
            bool: Col::of(t, kind, consts::BOOL)?,
            bytes: Col::of(t, kind, consts::BYTES)?,
            ser: Col::of(t, kind, consts::SER)?,
        })
    }

    /// The value columns of an any-value struct column (`body`).
    pub fn of_struct(s: Option<&'a StructArray>, kind: PayloadType) -> Result<Self> {
        Ok(ValueView {
            ty: Col::child(s, kind, consts::TYPE)?,
            str: Col::child(s, kind, consts::STR)?,
            int: Col::child(s, kind, consts::INT)?,
            double: Col::child(s, kind, consts::DOUBLE)?,
            bool: Col::child(s, kind, consts::BOOL)?,
            bytes: Col::child(s, kind, consts::BYTES)?,
            ser: Col::child(s, kind, consts::SER)?,
        })
    }

    /// The string value column.
    pub(crate) fn strings(&self) -> &Col<'a, StringArray> {
        &self.str
    }

    /// The value type of row `i`.
    #[inline]
    pub(crate) fn value_type(&self, i: usize) -> u8 {
        self.ty.get(i).unwrap_or(value_type::EMPTY)
    }

    /// Writes row `i` as the fields of an `AnyValue` message.
    #[inline]
    pub(crate) fn write(&self, w: &mut Writer, i: usize) -> Result<()> {
        match self.value_type(i) {
            value_type::STR => w.bytes_always(1, self.str.get(i).unwrap_or("").as_bytes()),
            value_type::INT => {
                let v = self.int.get(i).unwrap_or(0);
                if v == 0 {
                    w.raw(&[3 << 3, 0])
                } else {
                    w.varint_field(3, v as u64)
                }
            }
            value_type::DOUBLE => w.fixed64_always(4, self.double.get(i).unwrap_or(0.0).to_bits()),
            value_type::BOOL => w.raw(&[2 << 3, u8::from(self.bool.get(i).unwrap_or(false))]),
            value_type::BYTES => w.bytes_always(7, self.bytes.get(i).unwrap_or(&[])),
            value_type::MAP | value_type::SLICE => match self.ser.get(i) {
                Some(data) => cbor::to_any_value(data, w)?,
                None if self.value_type(i) == value_type::MAP => w.raw(&[6 << 3 | 2, 0]),
                None => w.raw(&[5 << 3 | 2, 0]),
            },
            _ => {}
        }
        Ok(())
    }
}

/// The fields of an `AnyValue` holding a scalar, whose encoded length is known before writing.
pub enum ScalarField<'a> {
    Str(&'a [u8]),
    Int(i64),
    Double(f64),
    Bool(bool),
}

impl ScalarField<'_> {
    /// Bytes of the `AnyValue` message body.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        match self {
            ScalarField::Str(s) => 1 + crate::wire::varint_len(s.len() as u64) + s.len(),
            ScalarField::Int(i) => 1 + crate::wire::varint_len(*i as u64),
            ScalarField::Double(_) => 9,
            ScalarField::Bool(_) => 2,
        }
    }

    /// Writes the `value` field (number 2 of `KeyValue`) holding this body, when the body is
    /// under 128 bytes (`len` is [`ScalarField::len`]): the tags and lengths go out as one
    /// fixed-size write.
    #[inline(always)]
    pub(crate) fn write_short_value_field(&self, w: &mut Writer, len: u8) {
        debug_assert!(len < 0x80);
        match self {
            // A body under 128 bytes has a string under 128 bytes: one length byte.
            ScalarField::Str(s) => {
                w.raw(&[2 << 3 | 2, len, 1 << 3 | 2, s.len() as u8]);
                w.raw(s);
            }
            ScalarField::Int(i) => {
                w.raw(&[2 << 3 | 2, len, 3 << 3]);
                w.varint(*i as u64);
            }
            ScalarField::Double(d) => {
                let mut field = [2 << 3 | 2, 9, 4 << 3 | 1, 0, 0, 0, 0, 0, 0, 0, 0];
                field[3..].copy_from_slice(&d.to_bits().to_le_bytes());
                w.raw(&field);
            }
            ScalarField::Bool(b) => w.raw(&[2 << 3 | 2, 2, 2 << 3, u8::from(*b)]),
        }
    }

    /// Writes the `AnyValue` message body.
    #[inline]
    pub(crate) fn write(&self, w: &mut Writer) {
        match self {
            ScalarField::Str(s) => w.bytes_always(1, s),
            ScalarField::Int(i) => {
                w.raw(&[3 << 3]);
                w.varint(*i as u64);
            }
            ScalarField::Double(d) => w.fixed64_always(4, d.to_bits()),
            ScalarField::Bool(b) => w.raw(&[2 << 3, u8::from(*b)]),
        }
    }
}

impl ValueView<'_> {
    /// Row `i` as a scalar `AnyValue` body, when it is a string, int, double or bool.
    #[inline]
    pub(crate) fn scalar_field(&self, i: usize) -> Option<ScalarField<'_>> {
        Some(match self.value_type(i) {
            value_type::STR => ScalarField::Str(self.str.get(i).unwrap_or("").as_bytes()),
            value_type::INT => ScalarField::Int(self.int.get(i).unwrap_or(0)),
            value_type::DOUBLE => ScalarField::Double(self.double.get(i).unwrap_or(0.0)),
            value_type::BOOL => ScalarField::Bool(self.bool.get(i).unwrap_or(false)),
            _ => return None,
        })
    }

    /// The value type of every row (the column's own values when it is plain and has no
    /// nulls).
    pub(crate) fn types(&self, rows: usize) -> std::borrow::Cow<'_, [u8]> {
        match self.ty {
            Col::Plain(a) if a.null_count() == 0 && a.len() == rows => {
                std::borrow::Cow::Borrowed(&a.values()[..])
            }
            _ => (0..rows).map(|i| self.value_type(i)).collect(),
        }
    }

    /// Row `i` as JSON text when it is a map or an array (None otherwise, or when its bytes
    /// do not read).
    pub fn json(&self, i: usize) -> Option<String> {
        match self.value_type(i) {
            value_type::MAP => Some(match self.ser.get(i) {
                Some(data) => cbor::to_json(data).ok()?,
                None => "{}".to_string(),
            }),
            value_type::SLICE => Some(match self.ser.get(i) {
                Some(data) => cbor::to_json(data).ok()?,
                None => "[]".to_string(),
            }),
            _ => None,
        }
    }

    /// The scalar value of row `i` (None for empty, map, slice, or a null active column).
    #[inline]
    pub fn scalar(&self, i: usize) -> Option<Scalar<'_>> {
        match self.value_type(i) {
            value_type::STR => self.str.get(i).map(Scalar::Str),
            value_type::INT => self.int.get(i).map(Scalar::Int),
            value_type::DOUBLE => self.double.get(i).map(Scalar::Double),
            value_type::BOOL => self.bool.get(i).map(Scalar::Bool),
            value_type::BYTES => self.bytes.get(i).map(Scalar::Bytes),
            _ => None,
        }
    }
}
