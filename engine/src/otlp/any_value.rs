//! OTLP `AnyValue` read from protobuf bytes without building an object tree.

use crate::error::{Error, Result};
use crate::wire::{Reader, WireType};

/// Deepest any-value nesting accepted (maps in arrays in maps ...).
pub(crate) const MAX_DEPTH: usize = 64;

/// A borrowed OTLP `AnyValue`.
pub(crate) enum AnyRef<'a> {
    Empty,
    Str(&'a str),
    Bool(bool),
    Int(i64),
    Double(f64),
    /// `ArrayValue` message bytes (field 1: repeated AnyValue).
    Array(Reader<'a>),
    /// `KeyValueList` message bytes (field 1: repeated KeyValue).
    Kvlist(Reader<'a>),
    Bytes(&'a [u8]),
}

impl<'a> AnyRef<'a> {
    /// Parses an `AnyValue` message; for a repeated oneof member the last one wins.
    pub(crate) fn parse(mut r: Reader<'a>) -> Result<Self> {
        let mut value = AnyRef::Empty;
        while let Some((field, wire)) = r.field()? {
            value = match field {
                1 => AnyRef::Str(r.string_field(wire)?),
                2 => AnyRef::Bool(r.varint32(wire)? != 0),
                3 => {
                    r.expect(wire, WireType::Varint)?;
                    AnyRef::Int(r.varint()? as i64)
                }
                4 => AnyRef::Double(f64::from_bits(r.fixed64_field(wire)?)),
                5 => AnyRef::Array(r.message_field(wire)?),
                6 => AnyRef::Kvlist(r.message_field(wire)?),
                7 => AnyRef::Bytes(r.bytes_field(wire)?),
                _ => {
                    r.skip(wire)?;
                    continue;
                }
            };
        }
        Ok(value)
    }
}

/// Parses a `KeyValue` message into its key and value reader.
pub(crate) fn parse_key_value<'a>(mut r: Reader<'a>) -> Result<(&'a str, Option<Reader<'a>>)> {
    let mut key = "";
    let mut value = None;
    while let Some((field, wire)) = r.field()? {
        match field {
            1 => key = r.string_field(wire)?,
            2 => value = Some(r.message_field(wire)?),
            _ => r.skip(wire)?,
        }
    }
    Ok((key, value))
}

/// Checks the nesting depth.
pub(crate) fn check_depth(depth: usize) -> Result<()> {
    if depth > MAX_DEPTH {
        Err(Error::TooDeep { max: MAX_DEPTH })
    } else {
        Ok(())
    }
}
