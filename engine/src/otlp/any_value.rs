//! OTLP `AnyValue` read from protobuf bytes without building an object tree.

use crate::error::{Error, Result};
use crate::wire::{Reader, WireType};

/// Deepest any-value nesting accepted (maps in arrays in maps ...).
pub(crate) const MAX_DEPTH: usize = 64;

/// A borrowed OTLP `AnyValue`.
pub(crate) enum AnyRef<'a> {
    Empty,
    /// String bytes, not yet validated as UTF-8 (validated where they are stored).
    Str(&'a [u8]),
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
    /// Parses an `AnyValue` message; for a repeated oneof member the last one wins. A message
    /// that is exactly one string field with a one- or two-byte length (most log bodies) is
    /// read without the general field loop.
    #[inline]
    pub(crate) fn parse(r: Reader<'a>) -> Result<Self> {
        let s = match r.rest() {
            [0x0a, len, s @ ..] if *len < 0x80 && usize::from(*len) == s.len() => s,
            [0x0a, low, high, s @ ..]
                if *low >= 0x80
                    && *high < 0x80
                    && *high > 0
                    && usize::from(low & 0x7f) | usize::from(*high) << 7 == s.len() =>
            {
                s
            }
            _ => return Self::parse_fields(r),
        };
        Ok(AnyRef::Str(s))
    }

    /// Parses an `AnyValue` message field by field.
    fn parse_fields(mut r: Reader<'a>) -> Result<Self> {
        let mut value = AnyRef::Empty;
        while let Some((field, wire)) = r.field()? {
            value = match field {
                1 => AnyRef::Str(r.bytes_field(wire)?),
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

/// Parses a `KeyValue` message into its key (bytes, not yet validated as UTF-8) and value
/// reader.
pub(crate) fn parse_key_value<'a>(mut r: Reader<'a>) -> Result<(&'a [u8], Option<Reader<'a>>)> {
    let mut key: &[u8] = &[];
    let mut value = None;
    while let Some((field, wire)) = r.field()? {
        match field {
            1 => key = r.bytes_field(wire)?,
            2 => value = Some(r.message_field(wire)?),
            _ => r.skip(wire)?,
        }
    }
    Ok((key, value))
}

/// The common encoding of a scalar `KeyValue`, parsed without the general field loop: a key
/// under 128 bytes, then a value message under 128 bytes holding exactly one string, int,
/// double or bool. Any other layout returns None and takes the general path.
#[inline(always)]
pub(crate) fn fast_key_value(bytes: &[u8]) -> Option<(&[u8], AnyRef<'_>)> {
    let [0x0a, key_len, rest @ ..] = bytes else {
        return None;
    };
    let key_len = usize::from(*key_len);
    if key_len >= 0x80 || rest.len() < key_len {
        return None;
    }
    let (key, rest) = rest.split_at(key_len);
    let [0x12, value_len, value @ ..] = rest else {
        return None;
    };
    if usize::from(*value_len) != value.len() {
        return None;
    }
    let value = match value {
        [0x0a, len, s @ ..] if usize::from(*len) == s.len() && *len < 0x80 => AnyRef::Str(s),
        [0x10, b @ (0 | 1)] => AnyRef::Bool(*b == 1),
        [0x21, d @ ..] => AnyRef::Double(f64::from_le_bytes(d.try_into().ok()?)),
        [0x18, v @ ..] => {
            let mut r = Reader::new(v);
            let i = r.varint().ok()?;
            if !r.is_done() {
                return None;
            }
            AnyRef::Int(i as i64)
        }
        _ => return None,
    };
    Some((key, value))
}

/// Checks the nesting depth.
pub(crate) fn check_depth(depth: usize) -> Result<()> {
    if depth > MAX_DEPTH {
        Err(Error::TooDeep { max: MAX_DEPTH })
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn general(bytes: &[u8]) -> (Vec<u8>, String) {
        let (key, value) = parse_key_value(Reader::new(bytes)).unwrap();
        let value = value
            .map(|v| AnyRef::parse(v).unwrap())
            .unwrap_or(AnyRef::Empty);
        (key.to_vec(), describe(&value))
    }

    fn describe(value: &AnyRef<'_>) -> String {
        match value {
            AnyRef::Str(s) => format!("str {s:?}"),
            AnyRef::Int(i) => format!("int {i}"),
            AnyRef::Double(d) => format!("double {}", d.to_bits()),
            AnyRef::Bool(b) => format!("bool {b}"),
            _ => "other".into(),
        }
    }

    /// The fast path agrees with the general parser wherever it answers.
    #[test]
    fn fast_key_value_agrees_with_the_general_parser() {
        let cases: Vec<Vec<u8>> = vec![
            vec![0x0a, 1, b'k', 0x12, 3, 0x0a, 1, b'v'],
            vec![0x0a, 1, b'k', 0x12, 2, 0x18, 0x05],
            vec![
                0x0a, 1, b'k', 0x12, 11, 0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                0xff, 0x01,
            ],
            vec![0x0a, 1, b'k', 0x12, 9, 0x21, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f],
            vec![0x0a, 1, b'k', 0x12, 2, 0x10, 1],
            vec![0x0a, 0, 0x12, 2, 0x10, 0],
        ];
        for bytes in cases {
            let (key, value) = fast_key_value(&bytes).expect("fast path");
            assert_eq!(
                (key.to_vec(), describe(&value)),
                general(&bytes),
                "{bytes:?}"
            );
        }
        // Layouts the fast path leaves to the general parser.
        for bytes in [
            vec![0x12, 2, 0x10, 1, 0x0a, 1, b'k'],
            vec![0x0a, 1, b'k', 0x12, 4, 0x10, 1, 0x10, 0],
            vec![0x0a, 1, b'k', 0x12, 2, 0x10, 2],
            vec![0x0a, 1, b'k'],
        ] {
            assert!(fast_key_value(&bytes).is_none(), "{bytes:?}");
        }
    }
}
