//! `parse_json(text [, separator])`: the members of a JSON object as attributes, read in one
//! pass over the text without building a tree. Strings, integers, floats and booleans keep their
//! types (an integer beyond 64 bits is a float); a nested object is a map attribute, or, with a
//! separator, its members are attributes whose keys are joined by it; an array is an array
//! attribute; a `null` member makes no attribute. Text that is not one JSON object (whitespace
//! around it aside), or that nests deeper than [`MAX_DEPTH`], makes no attribute at all.

use std::borrow::Cow;

use penstock_engine::value::cbor_write as cbor;

use super::made::{Made, MadeAttrs};

/// Nesting accepted at most, the object read included: 20 levels of objects and arrays
/// inside it. A map attribute of 20 levels is about 70 protobuf messages deep once encoded as
/// OTLP, within what receivers decode (protobuf libraries stop at 100).
pub(crate) const MAX_DEPTH: usize = 21;

/// Why a text does not parse (the row then makes nothing).
struct Invalid;

type Parsed<T> = Result<T, Invalid>;

/// Reads the JSON object `text` of row `row` into `out`; false (and nothing added) when it is
/// not one.
pub(crate) fn object_into(
    text: &str,
    separator: Option<&str>,
    row: u32,
    out: &mut MadeAttrs,
    scratch: &mut Scratch,
) -> bool {
    out.start_row();
    let mut reader = Reader {
        s: text.as_bytes(),
        text,
        pos: 0,
    };
    let parsed = (|| {
        reader.skip_ws();
        reader.expect(b'{')?;
        scratch.key.clear();
        reader.members(separator, row, out, scratch, 1)?;
        reader.skip_ws();
        match reader.pos == reader.s.len() {
            true => Ok(()),
            false => Err(Invalid),
        }
    })();
    if parsed.is_err() {
        out.abandon_row();
    }
    parsed.is_ok()
}

/// Buffers reused from row to row.
#[derive(Default)]
pub(crate) struct Scratch {
    /// The key being made (flattened keys are joined here).
    key: String,
    /// The CBOR of a nested value.
    cbor: Vec<u8>,
}

struct Reader<'a> {
    s: &'a [u8],
    text: &'a str,
    pos: usize,
}

impl<'a> Reader<'a> {
    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.s.get(self.pos) {
            self.pos += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    fn expect(&mut self, byte: u8) -> Parsed<()> {
        match self.peek() == Some(byte) {
            true => {
                self.pos += 1;
                Ok(())
            }
            false => Err(Invalid),
        }
    }

    /// The members of an object whose `{` was read, up to its `}`: each one an attribute whose
    /// key is `scratch.key` followed by the member's key.
    fn members(
        &mut self,
        separator: Option<&str>,
        row: u32,
        out: &mut MadeAttrs,
        scratch: &mut Scratch,
        depth: usize,
    ) -> Parsed<()> {
        let prefix = scratch.key.len();
        self.items(b'}', depth, |reader, name| {
            scratch.key.truncate(prefix);
            scratch.key.push_str(name.unwrap_or_default());
            reader.member(separator, row, out, scratch, depth)
        })?;
        scratch.key.truncate(prefix);
        Ok(())
    }

    /// The items of an object or array whose opening bracket was read, up to `close` (`}` or
    /// `]`), each given to `item` once the reader is at its value, with its key in an object.
    fn items(
        &mut self,
        close: u8,
        depth: usize,
        mut item: impl FnMut(&mut Self, Option<&str>) -> Parsed<()>,
    ) -> Parsed<()> {
        if depth > MAX_DEPTH {
            return Err(Invalid);
        }
        self.skip_ws();
        if self.peek() == Some(close) {
            self.pos += 1;
            return Ok(());
        }
        loop {
            self.skip_ws();
            let name = match close == b'}' {
                true => {
                    self.expect(b'"')?;
                    let name = self.string()?;
                    self.skip_ws();
                    self.expect(b':')?;
                    self.skip_ws();
                    Some(name)
                }
                false => None,
            };
            item(self, name.as_deref())?;
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(c) if c == close => {
                    self.pos += 1;
                    return Ok(());
                }
                _ => return Err(Invalid),
            }
        }
    }

    /// The value of the member whose key is `scratch.key`.
    fn member(
        &mut self,
        separator: Option<&str>,
        row: u32,
        out: &mut MadeAttrs,
        scratch: &mut Scratch,
        depth: usize,
    ) -> Parsed<()> {
        match self.peek().ok_or(Invalid)? {
            b'"' => {
                self.pos += 1;
                let value = self.string()?;
                out.push(row, &scratch.key, Made::Str(&value));
            }
            b'{' => {
                self.pos += 1;
                match separator {
                    Some(separator) => {
                        scratch.key.push_str(separator);
                        self.members(Some(separator), row, out, scratch, depth + 1)?;
                    }
                    None => {
                        scratch.cbor.clear();
                        cbor::map_start(&mut scratch.cbor);
                        self.object_cbor(&mut scratch.cbor, depth + 1)?;
                        out.push(row, &scratch.key, Made::Map(&scratch.cbor));
                    }
                }
            }
            b'[' => {
                self.pos += 1;
                scratch.cbor.clear();
                cbor::array_start(&mut scratch.cbor);
                self.array_cbor(&mut scratch.cbor, depth + 1)?;
                out.push(row, &scratch.key, Made::Slice(&scratch.cbor));
            }
            b't' => {
                self.word(b"true")?;
                out.push(row, &scratch.key, Made::Bool(true));
            }
            b'f' => {
                self.word(b"false")?;
                out.push(row, &scratch.key, Made::Bool(false));
            }
            b'n' => self.word(b"null")?,
            _ => match self.number()? {
                Number::Int(i) => out.push(row, &scratch.key, Made::Int(i)),
                Number::Double(d) => out.push(row, &scratch.key, Made::Double(d)),
            },
        }
        Ok(())
    }

    /// Any value, as CBOR.
    fn value_cbor(&mut self, out: &mut Vec<u8>, depth: usize) -> Parsed<()> {
        match self.peek().ok_or(Invalid)? {
            b'"' => {
                self.pos += 1;
                let value = self.string()?;
                cbor::text(out, &value);
            }
            b'{' => {
                self.pos += 1;
                cbor::map_start(out);
                self.object_cbor(out, depth + 1)?;
            }
            b'[' => {
                self.pos += 1;
                cbor::array_start(out);
                self.array_cbor(out, depth + 1)?;
            }
            b't' => {
                self.word(b"true")?;
                cbor::bool(out, true);
            }
            b'f' => {
                self.word(b"false")?;
                cbor::bool(out, false);
            }
            b'n' => {
                self.word(b"null")?;
                cbor::null(out);
            }
            _ => match self.number()? {
                Number::Int(i) => cbor::int(out, i),
                Number::Double(d) => cbor::double(out, d),
            },
        }
        Ok(())
    }

    /// The members of an object whose `{` was read (and written), as CBOR, with its end.
    fn object_cbor(&mut self, out: &mut Vec<u8>, depth: usize) -> Parsed<()> {
        self.items_cbor(out, depth, b'}')
    }

    /// The items of an array whose `[` was read (and written), as CBOR, with its end.
    fn array_cbor(&mut self, out: &mut Vec<u8>, depth: usize) -> Parsed<()> {
        self.items_cbor(out, depth, b']')
    }

    /// The items up to `close` (`}`: key-value members; `]`: values) as CBOR, with its end.
    fn items_cbor(&mut self, out: &mut Vec<u8>, depth: usize, close: u8) -> Parsed<()> {
        self.items(close, depth, |reader, name| {
            if let Some(name) = name {
                cbor::text(out, name);
            }
            reader.value_cbor(out, depth)
        })?;
        cbor::end(out);
        Ok(())
    }

    fn word(&mut self, word: &[u8]) -> Parsed<()> {
        match self.s[self.pos..].starts_with(word) {
            true => {
                self.pos += word.len();
                Ok(())
            }
            false => Err(Invalid),
        }
    }

    /// A string whose opening quote was read, up to and past its closing quote, unescaped.
    fn string(&mut self) -> Parsed<Cow<'a, str>> {
        let start = self.pos;
        let Some(stop) = memchr::memchr2(b'"', b'\\', &self.s[start..]) else {
            return Err(Invalid);
        };
        if self.s[start + stop] == b'"' {
            self.pos = start + stop + 1;
            // Quotes and backslashes are ASCII: the slice between them is UTF-8.
            return Ok(Cow::Borrowed(&self.text[start..start + stop]));
        }
        let mut owned = String::with_capacity(stop + 16);
        owned.push_str(&self.text[start..start + stop]);
        self.pos = start + stop;
        loop {
            let Some(next) = memchr::memchr2(b'"', b'\\', &self.s[self.pos..]) else {
                return Err(Invalid);
            };
            owned.push_str(&self.text[self.pos..self.pos + next]);
            self.pos += next;
            if self.s[self.pos] == b'"' {
                self.pos += 1;
                return Ok(Cow::Owned(owned));
            }
            self.pos += 1;
            let escaped = *self.s.get(self.pos).ok_or(Invalid)?;
            self.pos += 1;
            match escaped {
                b'"' => owned.push('"'),
                b'\\' => owned.push('\\'),
                b'/' => owned.push('/'),
                b'b' => owned.push('\u{8}'),
                b'f' => owned.push('\u{c}'),
                b'n' => owned.push('\n'),
                b'r' => owned.push('\r'),
                b't' => owned.push('\t'),
                b'u' => owned.push(self.unicode_escape()?),
                _ => return Err(Invalid),
            }
        }
    }

    /// The character of a `\u` escape whose `\u` was read (a surrogate pair takes two).
    fn unicode_escape(&mut self) -> Parsed<char> {
        let first = self.hex4()?;
        if (0xD800..0xDC00).contains(&first) {
            if !self.s[self.pos..].starts_with(b"\\u") {
                return Err(Invalid);
            }
            self.pos += 2;
            let second = self.hex4()?;
            if !(0xDC00..0xE000).contains(&second) {
                return Err(Invalid);
            }
            let code = 0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00);
            return char::from_u32(code).ok_or(Invalid);
        }
        char::from_u32(first).ok_or(Invalid)
    }

    fn hex4(&mut self) -> Parsed<u32> {
        let digits = self.s.get(self.pos..self.pos + 4).ok_or(Invalid)?;
        let mut value = 0u32;
        for d in digits {
            value = value * 16 + char::from(*d).to_digit(16).ok_or(Invalid)?;
        }
        self.pos += 4;
        Ok(value)
    }

    /// A number, as JSON writes it.
    fn number(&mut self) -> Parsed<Number> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        let digits = |r: &mut Self| {
            let from = r.pos;
            while r.peek().is_some_and(|b| b.is_ascii_digit()) {
                r.pos += 1;
            }
            r.pos - from
        };
        let whole = digits(self);
        if whole == 0 || (whole > 1 && self.s[self.pos - whole] == b'0') {
            return Err(Invalid);
        }
        let mut integral = true;
        if self.peek() == Some(b'.') {
            self.pos += 1;
            integral = false;
            if digits(self) == 0 {
                return Err(Invalid);
            }
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            integral = false;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            if digits(self) == 0 {
                return Err(Invalid);
            }
        }
        let text = &self.text[start..self.pos];
        if integral && let Ok(i) = text.parse::<i64>() {
            return Ok(Number::Int(i));
        }
        text.parse::<f64>().map(Number::Double).map_err(|_| Invalid)
    }
}

enum Number {
    Int(i64),
    Double(f64),
}

#[cfg(test)]
mod tests {
    use super::*;

    use proptest::prelude::*;
    use serde_json::{Map, Value};

    /// What `parse_json` makes of `text`: (key, type, value as text), in order; None when it
    /// makes nothing.
    fn parsed(text: &str, separator: Option<&str>) -> Option<Vec<(String, &'static str, String)>> {
        let mut made = MadeAttrs::default();
        let mut scratch = Scratch::default();
        if !object_into(text, separator, 0, &mut made, &mut scratch) {
            assert_eq!(made.len(), 0, "a row that does not parse leaves nothing");
            return None;
        }
        Some(
            (0..made.len())
                .map(|i| {
                    let key = made.names[made.keys[i] as usize].to_string();
                    let (ty, value) = match made.value(i) {
                        Made::Str(s) => ("string", s.to_string()),
                        Made::Int(v) => ("int", v.to_string()),
                        Made::Double(v) => ("double", v.to_string()),
                        Made::Bool(v) => ("bool", v.to_string()),
                        Made::Map(_) => ("map", String::new()),
                        Made::Slice(_) => ("array", String::new()),
                    };
                    (key, ty, value)
                })
                .collect(),
        )
    }

    /// What `parse_json` should make of `object`: its members in order (flattened with
    /// `separator`), nulls left out.
    fn expected(
        object: &Map<String, Value>,
        separator: Option<&str>,
        prefix: &str,
        out: &mut Vec<(String, &'static str, String)>,
    ) {
        for (key, value) in object {
            let key = format!("{prefix}{key}");
            match value {
                Value::Null => {}
                Value::Bool(b) => out.push((key, "bool", b.to_string())),
                Value::String(s) => out.push((key, "string", s.clone())),
                Value::Number(n) => match n.as_i64() {
                    Some(i) => out.push((key, "int", i.to_string())),
                    None => out.push((key, "double", n.as_f64().unwrap().to_string())),
                },
                Value::Array(_) => out.push((key, "array", String::new())),
                Value::Object(inner) => match separator {
                    Some(sep) => expected(inner, separator, &format!("{key}{sep}"), out),
                    None => out.push((key, "map", String::new())),
                },
            }
        }
    }

    fn json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            (-1e6f64..1e6).prop_map(Value::from),
            "[a-z\"\\\\/\u{e9}\u{1F600}\n\t ]{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-c]{1,2}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Scenario: any JSON object, written compactly or pretty, read as kept maps and as
        /// flattened keys.
        /// Guarantees: its members, with their JSON types, as serde_json reads them.
        #[test]
        fn objects_read_as_serde_json_reads_them(
            members in prop::collection::btree_map("[a-d]{1,3}", json(), 0..6),
            pretty in any::<bool>(),
        ) {
            let object: Map<String, Value> = members.into_iter().collect();
            let value = Value::Object(object.clone());
            let text = match pretty {
                true => serde_json::to_string_pretty(&value).unwrap(),
                false => value.to_string(),
            };
            for separator in [None, Some(".")] {
                let mut want = Vec::new();
                expected(&object, separator, "", &mut want);
                prop_assert_eq!(parsed(&text, separator), Some(want));
            }
        }

        /// Scenario: any text cut short of a whole JSON object.
        /// Guarantees: nothing is made, and nothing panics.
        #[test]
        fn a_cut_object_makes_nothing(
            members in prop::collection::btree_map("[a-d]{1,3}", json(), 1..6),
            cut in any::<prop::sample::Index>(),
        ) {
            let text = Value::Object(members.into_iter().collect()).to_string();
            let at = cut.index(text.len() - 1);
            let cut = text.get(..at).unwrap_or_default();
            prop_assert_eq!(parsed(cut, None), None);
        }
    }

    /// Scenario: texts that are not one JSON object.
    /// Guarantees: nothing is made.
    #[test]
    fn what_is_not_one_object_makes_nothing() {
        for text in [
            "",
            "[]",
            "\"s\"",
            "1",
            "{} {}",
            "{\"a\":1,}",
            "{\"a\" 1}",
            "{a:1}",
            "{\"a\":01}",
            "{\"a\":-}",
            "{\"a\":1e}",
            "{\"a\":tru}",
            "{\"a\":\"\\x\"}",
            "{\"a\":\"\\ud83d\"}",
            "{\"a\":[1,]}",
        ] {
            assert_eq!(parsed(text, None), None, "{text}");
        }
    }
}
