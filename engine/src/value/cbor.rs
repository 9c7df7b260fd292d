//! CBOR (RFC 8949) for map and slice values in OTAP's `ser` columns, converted directly to and
//! from OTLP `AnyValue` protobuf bytes.
//!
//! Writing follows the reference producer: indefinite-length maps and arrays, text-string keys,
//! doubles as 64-bit floats, integers in their shortest form, empty values as `null`. Reading
//! accepts definite and indefinite lengths, every float width, and tags (ignored).

use crate::error::{Error, Result};
use crate::value::any_value::{AnyRef, check_depth, parse_key_value};
#[cfg(test)]
use crate::wire::Reader;
use crate::wire::Writer;

const BREAK: u8 = 0xff;

fn head(out: &mut Vec<u8>, major: u8, value: u64) {
    let m = major << 5;
    if value < 24 {
        out.push(m | value as u8);
    } else if value <= u64::from(u8::MAX) {
        out.extend_from_slice(&[m | 24, value as u8]);
    } else if value <= u64::from(u16::MAX) {
        out.push(m | 25);
        out.extend_from_slice(&(value as u16).to_be_bytes());
    } else if value <= u64::from(u32::MAX) {
        out.push(m | 26);
        out.extend_from_slice(&(value as u32).to_be_bytes());
    } else {
        out.push(m | 27);
        out.extend_from_slice(&value.to_be_bytes());
    }
}

/// Appends a CBOR text string, checking that the bytes are UTF-8.
fn text(out: &mut Vec<u8>, s: &[u8]) -> Result<()> {
    std::str::from_utf8(s).map_err(|_| Error::MalformedProtobuf {
        offset: 0,
        reason: "string field is not valid UTF-8",
    })?;
    head(out, 3, s.len() as u64);
    out.extend_from_slice(s);
    Ok(())
}

/// Writing CBOR items one by one, as the values of a map or array are made (by a parser that
/// reads another encoding, say): maps and arrays of indefinite length, closed by [`end`].
pub mod write {
    use super::{BREAK, head};

    /// Starts a map: then key (a text) and value, pairs, then [`end`].
    pub fn map_start(out: &mut Vec<u8>) {
        out.push(0xbf);
    }

    /// Starts an array: then its items, then [`end`].
    pub fn array_start(out: &mut Vec<u8>) {
        out.push(0x9f);
    }

    /// Ends the map or array started last.
    pub fn end(out: &mut Vec<u8>) {
        out.push(BREAK);
    }

    /// A text string.
    pub fn text(out: &mut Vec<u8>, s: &str) {
        head(out, 3, s.len() as u64);
        out.extend_from_slice(s.as_bytes());
    }

    /// An integer, in its shortest form.
    pub fn int(out: &mut Vec<u8>, i: i64) {
        match i >= 0 {
            true => head(out, 0, i as u64),
            false => head(out, 1, (-1 - i) as u64),
        }
    }

    /// A 64-bit float.
    pub fn double(out: &mut Vec<u8>, d: f64) {
        out.push(0xfb);
        out.extend_from_slice(&d.to_bits().to_be_bytes());
    }

    /// A boolean.
    pub fn bool(out: &mut Vec<u8>, b: bool) {
        out.push(if b { 0xf5 } else { 0xf4 });
    }

    /// A null (an empty value).
    pub fn null(out: &mut Vec<u8>) {
        out.push(0xf6);
    }
}

/// Appends the CBOR encoding of an OTLP any-value.
pub(crate) fn write_any(value: AnyRef<'_>, out: &mut Vec<u8>, depth: usize) -> Result<()> {
    check_depth(depth)?;
    match value {
        AnyRef::Empty => write::null(out),
        AnyRef::Str(s) => text(out, s)?,
        AnyRef::Bool(b) => write::bool(out, b),
        AnyRef::Int(i) => write::int(out, i),
        AnyRef::Double(d) => write::double(out, d),
        AnyRef::Bytes(b) => {
            head(out, 2, b.len() as u64);
            out.extend_from_slice(b);
        }
        AnyRef::Array(mut r) => {
            out.push(0x9f);
            while let Some((field, wire)) = r.field()? {
                if field == 1 {
                    write_any(AnyRef::parse(r.message_field(wire)?)?, out, depth + 1)?;
                } else {
                    r.skip(wire)?;
                }
            }
            out.push(BREAK);
        }
        AnyRef::Kvlist(mut r) => {
            out.push(0xbf);
            while let Some((field, wire)) = r.field()? {
                if field == 1 {
                    let (key, value) = parse_key_value(r.message_field(wire)?)?;
                    text(out, key)?;
                    let value = match value {
                        Some(v) => AnyRef::parse(v)?,
                        None => AnyRef::Empty,
                    };
                    write_any(value, out, depth + 1)?;
                } else {
                    r.skip(wire)?;
                }
            }
            out.push(BREAK);
        }
    }
    Ok(())
}

/// A CBOR item read from bytes.
enum Item<'a> {
    Uint(u64),
    Neg(u64),
    Bytes(std::borrow::Cow<'a, [u8]>),
    Text(std::borrow::Cow<'a, str>),
    /// Array start with its length (None: indefinite).
    Array(Option<u64>),
    Map(Option<u64>),
    Float(f64),
    Bool(bool),
    Null,
    Break,
}

struct Cbor<'a> {
    data: &'a [u8],
    pos: usize,
}

fn err<T>(reason: &'static str) -> Result<T> {
    Err(Error::MalformedCbor(reason))
}

fn half_to_f64(bits: u16) -> f64 {
    let sign = if bits & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from((bits >> 10) & 0x1f);
    let mant = f64::from(bits & 0x3ff);
    sign * match exp {
        0 => mant * 2f64.powi(-24),
        31 if mant == 0.0 => f64::INFINITY,
        31 => f64::NAN,
        _ => (1.0 + mant / 1024.0) * 2f64.powi(exp - 15),
    }
}

impl<'a> Cbor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|e| *e <= self.data.len());
        match end {
            Some(end) => {
                let s = &self.data[self.pos..end];
                self.pos = end;
                Ok(s)
            }
            None => err("truncated item"),
        }
    }

    fn arg(&mut self, info: u8) -> Result<Option<u64>> {
        Ok(Some(match info {
            0..=23 => u64::from(info),
            24 => u64::from(self.take(1)?[0]),
            25 => u64::from(u16::from_be_bytes([self.take(1)?[0], self.take(1)?[0]])),
            26 => {
                let b = self.take(4)?;
                u64::from(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
            }
            27 => {
                let b = self.take(8)?;
                u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
            }
            31 => return Ok(None),
            _ => return err("reserved additional information"),
        }))
    }

    fn len(&mut self, info: u8) -> Result<Option<usize>> {
        match self.arg(info)? {
            None => Ok(None),
            Some(n) if n <= (self.data.len() - self.pos) as u64 => Ok(Some(n as usize)),
            Some(_) => err("length runs past the end"),
        }
    }

    fn chunks(&mut self, major: u8) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        loop {
            let b = self.take(1)?[0];
            if b == BREAK {
                return Ok(out);
            }
            if b >> 5 != major {
                return err("bad chunk in indefinite-length string");
            }
            match self.len(b & 0x1f)? {
                Some(n) => out.extend_from_slice(self.take(n)?),
                None => return err("nested indefinite-length string"),
            }
        }
    }

    fn item(&mut self) -> Result<Item<'a>> {
        let mut b = self.take(1)?[0];
        // Tags (major type 6) annotate the item that follows: skip them.
        while b >> 5 == 6 {
            self.arg(b & 0x1f)?;
            b = self.take(1)?[0];
        }
        let (major, info) = (b >> 5, b & 0x1f);
        Ok(match major {
            0 => Item::Uint(
                self.arg(info)?
                    .ok_or(Error::MalformedCbor("indefinite integer"))?,
            ),
            1 => Item::Neg(
                self.arg(info)?
                    .ok_or(Error::MalformedCbor("indefinite integer"))?,
            ),
            2 => match self.len(info)? {
                Some(n) => Item::Bytes(self.take(n)?.into()),
                None => Item::Bytes(self.chunks(2)?.into()),
            },
            3 => {
                let bytes: std::borrow::Cow<'a, [u8]> = match self.len(info)? {
                    Some(n) => self.take(n)?.into(),
                    None => self.chunks(3)?.into(),
                };
                Item::Text(match bytes {
                    std::borrow::Cow::Borrowed(b) => std::str::from_utf8(b)
                        .map_err(|_| Error::MalformedCbor("text is not UTF-8"))?
                        .into(),
                    std::borrow::Cow::Owned(v) => String::from_utf8(v)
                        .map_err(|_| Error::MalformedCbor("text is not UTF-8"))?
                        .into(),
                })
            }
            4 => Item::Array(self.arg(info)?),
            5 => Item::Map(self.arg(info)?),
            _ => match info {
                20 => Item::Bool(false),
                21 => Item::Bool(true),
                22 | 23 => Item::Null,
                25 => {
                    let b = self.take(2)?;
                    Item::Float(half_to_f64(u16::from_be_bytes([b[0], b[1]])))
                }
                26 => {
                    let b = self.take(4)?;
                    Item::Float(f64::from(f32::from_be_bytes([b[0], b[1], b[2], b[3]])))
                }
                27 => {
                    let b = self.take(8)?;
                    Item::Float(f64::from_be_bytes([
                        b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7],
                    ]))
                }
                31 => Item::Break,
                _ => return err("unsupported simple value"),
            },
        })
    }

    /// Whether a container with `remaining` entries left (None: indefinite, up to a break)
    /// has another; counts it.
    fn next_entry(&mut self, remaining: &mut Option<u64>) -> Result<bool> {
        Ok(match remaining {
            Some(0) => false,
            Some(n) => {
                *n -= 1;
                true
            }
            None => !self.at_break()?,
        })
    }

    /// Whether the next byte ends an indefinite container (and consumes it).
    fn at_break(&mut self) -> Result<bool> {
        match self.data.get(self.pos) {
            Some(&BREAK) => {
                self.pos += 1;
                Ok(true)
            }
            Some(_) => Ok(false),
            None => err("unterminated container"),
        }
    }

    /// Reads one item and writes it as the fields of an OTLP `AnyValue`.
    fn any_value(&mut self, w: &mut Writer, depth: usize) -> Result<()> {
        check_depth(depth)?;
        match self.item()? {
            Item::Null => {}
            // Written even when false: it selects the oneof member.
            Item::Bool(b) => w.raw(&[2 << 3, u8::from(b)]),
            Item::Uint(u) => {
                let i = i64::try_from(u).map_err(|_| Error::MalformedCbor("integer overflows"))?;
                write_int(w, i);
            }
            Item::Neg(n) => {
                let i = i64::try_from(n).map_err(|_| Error::MalformedCbor("integer overflows"))?;
                write_int(w, -1 - i);
            }
            Item::Float(d) => w.fixed64_always(4, d.to_bits()),
            Item::Text(s) => w.bytes_always(1, s.as_bytes()),
            Item::Bytes(b) => w.bytes_always(7, &b),
            Item::Array(len) => {
                let list = w.begin(5);
                let mut remaining = len;
                while self.next_entry(&mut remaining)? {
                    let value = w.begin(1);
                    self.any_value(w, depth + 1)?;
                    w.end(value);
                }
                w.end(list);
            }
            Item::Map(len) => {
                let list = w.begin(6);
                let mut remaining = len;
                while self.next_entry(&mut remaining)? {
                    let Item::Text(key) = self.item()? else {
                        return err("map key is not a text string");
                    };
                    let kv = w.begin(1);
                    w.bytes_field(1, key.as_bytes());
                    let value = w.begin(2);
                    self.any_value(w, depth + 1)?;
                    w.end(value);
                    w.end(kv);
                }
                w.end(list);
            }
            Item::Break => return err("unexpected break"),
        }
        Ok(())
    }
}

impl Cbor<'_> {
    /// Reads one item and writes it as JSON: maps as objects, arrays as arrays, byte strings
    /// as hex text, empty values as `null`, floats that JSON cannot hold (NaN, infinities) as
    /// `null`.
    fn json(&mut self, out: &mut String, depth: usize) -> Result<()> {
        use std::fmt::Write;
        check_depth(depth)?;
        match self.item()? {
            Item::Null => out.push_str("null"),
            Item::Bool(b) => out.push_str(if b { "true" } else { "false" }),
            Item::Uint(u) => {
                let _ = write!(out, "{u}");
            }
            Item::Neg(n) => {
                let _ = write!(out, "{}", -1 - i128::from(n));
            }
            Item::Float(d) if d.is_finite() => {
                let _ = write!(
                    out,
                    "{}",
                    serde_json::Number::from_f64(d)
                        .map_or_else(|| "null".to_string(), |n| n.to_string())
                );
            }
            Item::Float(_) => out.push_str("null"),
            Item::Text(text) => out.push_str(&serde_json::Value::from(text.as_ref()).to_string()),
            Item::Bytes(b) => {
                out.push('"');
                out.push_str(&hex::encode(b.as_ref()));
                out.push('"');
            }
            Item::Array(len) => {
                out.push('[');
                let mut remaining = len;
                let mut first = true;
                while self.next_entry(&mut remaining)? {
                    if !std::mem::take(&mut first) {
                        out.push(',');
                    }
                    self.json(out, depth + 1)?;
                }
                out.push(']');
            }
            Item::Map(len) => {
                out.push('{');
                let mut remaining = len;
                let mut first = true;
                while self.next_entry(&mut remaining)? {
                    let Item::Text(key) = self.item()? else {
                        return err("map key is not a text string");
                    };
                    if !std::mem::take(&mut first) {
                        out.push(',');
                    }
                    out.push_str(&serde_json::Value::from(key.as_ref()).to_string());
                    out.push(':');
                    self.json(out, depth + 1)?;
                }
                out.push('}');
            }
            Item::Break => return err("unexpected break"),
        }
        Ok(())
    }
}

/// The CBOR item in `data` (a map or array value of a `ser` column) as JSON text.
pub(crate) fn to_json(data: &[u8]) -> Result<String> {
    let mut c = Cbor { data, pos: 0 };
    let mut out = String::with_capacity(data.len() * 2);
    c.json(&mut out, 0)?;
    if c.pos != data.len() {
        return err("trailing bytes after the value");
    }
    Ok(out)
}

fn write_int(w: &mut Writer, i: i64) {
    if i == 0 {
        w.raw(&[3 << 3, 0]);
    } else {
        w.varint_field(3, i as u64);
    }
}

/// Writes the CBOR item in `data` as the fields of an OTLP `AnyValue` message.
pub(crate) fn to_any_value(data: &[u8], w: &mut Writer) -> Result<()> {
    let mut c = Cbor { data, pos: 0 };
    c.any_value(w, 0)?;
    if c.pos != data.len() {
        return err("trailing bytes after the value");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(any_value_fields: &[u8]) -> Vec<u8> {
        let mut cbor = Vec::new();
        write_any(
            AnyRef::parse(Reader::new(any_value_fields)).unwrap(),
            &mut cbor,
            0,
        )
        .unwrap();
        let mut w = Writer::default();
        to_any_value(&cbor, &mut w).unwrap();
        w.into_bytes()
    }

    #[test]
    fn maps_and_arrays_read_as_json() {
        // {"user": {"id": 42, "tags": ["a", true, -3, 1.5, null]}, "raw": h'0a0b'}
        let cbor = [
            0xbf, 0x64, b'u', b's', b'e', b'r', 0xa2, 0x62, b'i', b'd', 0x18, 42, 0x64, b't', b'a',
            b'g', b's', 0x85, 0x61, b'a', 0xf5, 0x22, 0xf9, 0x3e, 0x00, 0xf6, 0x63, b'r', b'a',
            b'w', 0x42, 0x0a, 0x0b, 0xff,
        ];
        assert_eq!(
            to_json(&cbor).unwrap(),
            r#"{"user":{"id":42,"tags":["a",true,-3,1.5,null]},"raw":"0a0b"}"#
        );
        let quoted = [0x81, 0x63, b'"', b'\\', b'\n'];
        assert_eq!(to_json(&quoted).unwrap(), r#"["\"\\\n"]"#);
        assert!(to_json(&[0xbf, 0x61]).is_err());
    }

    #[test]
    fn half_floats_decode() {
        assert_eq!(half_to_f64(0x3c00), 1.0);
        assert_eq!(half_to_f64(0xc000), -2.0);
        assert_eq!(half_to_f64(0x7c00), f64::INFINITY);
        assert!(half_to_f64(0x7e00).is_nan());
        assert_eq!(half_to_f64(0x0001), 2f64.powi(-24));
    }

    #[test]
    fn definite_and_indefinite_maps_read_alike() {
        // {"a": 1} definite, and the same indefinite.
        let mut a = Writer::default();
        to_any_value(&[0xa1, 0x61, b'a', 0x01], &mut a).unwrap();
        let mut b = Writer::default();
        to_any_value(&[0xbf, 0x61, b'a', 0x01, 0xff], &mut b).unwrap();
        assert_eq!(a.into_bytes(), b.into_bytes());
    }

    #[test]
    fn malformed_cbor_is_an_error() {
        for bad in [
            &[0xbf, 0x61][..],
            &[0x9f],
            &[0x5b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
            &[0xbf, 0x01, 0x01, 0xff],
            &[0x1c],
        ] {
            assert!(
                to_any_value(bad, &mut Writer::default()).is_err(),
                "{bad:?}"
            );
        }
        // Deep nesting is bounded.
        let deep: Vec<u8> = std::iter::repeat_n(0x81u8, 10_000).chain([0x01]).collect();
        assert!(matches!(
            to_any_value(&deep, &mut Writer::default()),
            Err(Error::TooDeep { .. })
        ));
    }

    #[test]
    fn kvlist_roundtrips_through_cbor() {
        // AnyValue{kvlist_value: {k: "v", n: -5, d: 1.5, b: false, x: bytes[], e: empty}}
        let mut w = Writer::default();
        let list = w.begin(6);
        for (k, fields) in [
            ("k", vec![0x0a, 1, b'v']),
            (
                "n",
                vec![
                    0x18, 0xfb, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
                ],
            ),
            ("d", {
                let mut v = vec![0x21];
                v.extend_from_slice(&1.5f64.to_le_bytes());
                v
            }),
            ("b", vec![0x10, 0]),
            ("x", vec![0x3a, 0]),
            ("e", vec![]),
        ] {
            let kv = w.begin(1);
            w.bytes_field(1, k.as_bytes());
            let v = w.begin(2);
            w.raw(&fields);
            w.end(v);
            w.end(kv);
        }
        w.end(list);
        let original = w.into_bytes();
        assert_eq!(roundtrip(&original), original);
    }
}
