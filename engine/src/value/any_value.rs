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

/// The common layout of a `KeyValue`, split without the general field loop: a key field under
/// 128 bytes, then a value field under 128 bytes that ends the message. Returns the key bytes
/// (not yet validated as UTF-8) and the `AnyValue` message bytes; any other layout returns
/// None and takes the general path.
#[inline(always)]
pub(crate) fn split_key_value(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
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
    (usize::from(*value_len) == value.len()).then_some((key, value))
}

/// An int `AnyValue` field's payload that is exactly one varint.
#[inline(always)]
pub(crate) fn whole_varint(bytes: &[u8]) -> Option<u64> {
    let mut r = Reader::new(bytes);
    let value = r.varint().ok()?;
    r.is_done().then_some(value)
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

    #[test]
    fn split_key_value_takes_only_the_common_layout() {
        let kv = [0x0a, 1, b'k', 0x12, 2, 0x10, 1];
        assert_eq!(split_key_value(&kv), Some((&b"k"[..], &[0x10u8, 1][..])));
        assert_eq!(
            split_key_value(&[0x0a, 0, 0x12, 0]),
            Some((&b""[..], &[][..]))
        );
        for bytes in [
            vec![0x12, 2, 0x10, 1, 0x0a, 1, b'k'],
            vec![0x0a, 1, b'k', 0x12, 3, 0x10, 1],
            vec![0x0a, 1, b'k', 0x12, 1, 0x10, 1],
            vec![0x0a, 1, b'k'],
            vec![0x0a, 5, b'k'],
        ] {
            assert!(split_key_value(&bytes).is_none(), "{bytes:?}");
        }
    }

    #[test]
    fn whole_varint_rejects_trailing_and_truncated_bytes() {
        assert_eq!(whole_varint(&[0x05]), Some(5));
        assert_eq!(whole_varint(&[0x80, 0x01]), Some(128));
        assert_eq!(whole_varint(&[0x05, 0x01]), None);
        assert_eq!(whole_varint(&[0x80]), None);
        assert_eq!(whole_varint(&[]), None);
    }
}
