//! A bounds-checked protobuf reader that never allocates and never panics on bad input.

use crate::error::{Error, Result};

/// Protobuf wire types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WireType {
    Varint,
    Fixed64,
    Len,
    Fixed32,
}

/// Reads protobuf fields from a message's bytes.
#[derive(Clone, Copy)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Offset of `buf` in the outermost message, for error messages.
    base: usize,
}

impl<'a> Reader<'a> {
    /// A reader over a whole message.
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader {
            buf,
            pos: 0,
            base: 0,
        }
    }

    /// A reader over an embedded message found at `base` in the outermost message.
    pub(crate) fn nested(buf: &'a [u8], base: usize) -> Self {
        Reader { buf, pos: 0, base }
    }

    /// The absolute offset of the next byte.
    pub(crate) fn offset(&self) -> usize {
        self.base + self.pos
    }

    pub(crate) fn err<T>(&self, reason: &'static str) -> Result<T> {
        Err(Error::MalformedProtobuf {
            offset: self.offset(),
            reason,
        })
    }

    /// Whether all bytes have been read.
    #[inline]
    pub(crate) fn is_done(&self) -> bool {
        self.pos >= self.buf.len()
    }

    #[inline(always)]
    pub(crate) fn varint(&mut self) -> Result<u64> {
        // Tags and most lengths fit in one or two bytes.
        match self.buf.get(self.pos..self.pos + 2) {
            Some(&[b0, _]) if b0 < 0x80 => {
                self.pos += 1;
                Ok(u64::from(b0))
            }
            Some(&[b0, b1]) if b1 < 0x80 => {
                self.pos += 2;
                Ok(u64::from(b0 & 0x7f) | u64::from(b1) << 7)
            }
            _ => self.varint_slow(),
        }
    }

    fn varint_slow(&mut self) -> Result<u64> {
        let mut value = 0u64;
        for i in 0..10 {
            let Some(&byte) = self.buf.get(self.pos) else {
                return self.err("truncated varint");
            };
            self.pos += 1;
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte < 0x80 {
                if i == 9 && byte > 1 {
                    return self.err("varint overflows 64 bits");
                }
                return Ok(value);
            }
        }
        self.err("varint longer than 10 bytes")
    }

    /// Reads the next field's number and wire type, or None at the end of the message.
    #[inline]
    pub(crate) fn field(&mut self) -> Result<Option<(u32, WireType)>> {
        if self.is_done() {
            return Ok(None);
        }
        let key = self.varint()?;
        self.split_key(key).map(Some)
    }

    /// A key's field number and wire type, checked.
    #[inline]
    fn split_key(&self, key: u64) -> Result<(u32, WireType)> {
        let wire = match key & 7 {
            0 => WireType::Varint,
            1 => WireType::Fixed64,
            2 => WireType::Len,
            5 => WireType::Fixed32,
            _ => return self.err("unsupported wire type"),
        };
        let number = key >> 3;
        if number == 0 || number > u64::from(u32::MAX >> 3) {
            return self.err("invalid field number");
        }
        Ok((number as u32, wire))
    }

    /// Reads the next field's raw key (field number << 3 | wire type), or None at the end of
    /// the message. For decoders that dispatch on the key itself: the expected wire type is
    /// part of the match, and any other key goes to [`Reader::skip_key`].
    #[inline(always)]
    pub(crate) fn key(&mut self) -> Result<Option<u64>> {
        if self.is_done() {
            return Ok(None);
        }
        self.varint().map(Some)
    }

    /// Skips the field of a key no match arm took: an unknown field, or a known one (listed in
    /// `known`) with the wrong wire type, which is an error as in [`Reader::expect`].
    pub(crate) fn skip_key(&mut self, key: u64, known: &[u32]) -> Result<()> {
        let (number, wire) = self.split_key(key)?;
        if known.contains(&number) {
            return self.err("field has the wrong wire type");
        }
        self.skip(wire)
    }

    #[inline]
    pub(crate) fn fixed64(&mut self) -> Result<u64> {
        match self.buf.get(self.pos..self.pos + 8) {
            Some(bytes) => {
                self.pos += 8;
                let mut raw = [0u8; 8];
                raw.copy_from_slice(bytes);
                Ok(u64::from_le_bytes(raw))
            }
            None => self.err("truncated fixed64"),
        }
    }

    #[inline]
    pub(crate) fn fixed32(&mut self) -> Result<u32> {
        match self.buf.get(self.pos..self.pos + 4) {
            Some(bytes) => {
                self.pos += 4;
                let mut raw = [0u8; 4];
                raw.copy_from_slice(bytes);
                Ok(u32::from_le_bytes(raw))
            }
            None => self.err("truncated fixed32"),
        }
    }

    /// A length-delimited field's bytes and their absolute offset.
    #[inline]
    pub(crate) fn bytes(&mut self) -> Result<(&'a [u8], usize)> {
        let len = self.varint()?;
        let start = self.pos;
        let Some(end) = usize::try_from(len).ok().and_then(|l| start.checked_add(l)) else {
            return self.err("length overflows");
        };
        match self.buf.get(start..end) {
            Some(bytes) => {
                self.pos = end;
                Ok((bytes, self.base + start))
            }
            None => self.err("length-delimited field runs past the end of the message"),
        }
    }

    /// A length-delimited field as an embedded message reader.
    #[inline]
    pub(crate) fn message(&mut self) -> Result<Reader<'a>> {
        let (bytes, base) = self.bytes()?;
        Ok(Reader::nested(bytes, base))
    }

    /// A string field, validated as UTF-8.
    #[inline]
    pub(crate) fn string(&mut self) -> Result<&'a str> {
        let (bytes, _) = self.bytes()?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s),
            Err(_) => self.err("string field is not valid UTF-8"),
        }
    }

    /// Skips a field of the given wire type.
    #[inline]
    pub(crate) fn skip(&mut self, wire: WireType) -> Result<()> {
        match wire {
            WireType::Varint => self.varint().map(drop),
            WireType::Fixed64 => self.fixed64().map(drop),
            WireType::Fixed32 => self.fixed32().map(drop),
            WireType::Len => self.bytes().map(drop),
        }
    }

    /// Checks that a field has the expected wire type.
    #[inline]
    pub(crate) fn expect(&self, actual: WireType, expected: WireType) -> Result<()> {
        if actual == expected {
            Ok(())
        } else {
            self.err("field has the wrong wire type")
        }
    }

    /// A `uint32`/`int32`/enum varint field (truncating as protobuf does).
    #[inline]
    pub(crate) fn varint32(&mut self, wire: WireType) -> Result<u32> {
        self.expect(wire, WireType::Varint)?;
        Ok(self.varint()? as u32)
    }

    /// A `fixed64`/`sfixed64`/`double` field's raw bits.
    #[inline]
    pub(crate) fn fixed64_field(&mut self, wire: WireType) -> Result<u64> {
        self.expect(wire, WireType::Fixed64)?;
        self.fixed64()
    }

    /// A `fixed32` field.
    #[inline]
    pub(crate) fn fixed32_field(&mut self, wire: WireType) -> Result<u32> {
        self.expect(wire, WireType::Fixed32)?;
        self.fixed32()
    }

    /// A length-delimited field's bytes.
    #[inline]
    pub(crate) fn bytes_field(&mut self, wire: WireType) -> Result<&'a [u8]> {
        self.expect(wire, WireType::Len)?;
        Ok(self.bytes()?.0)
    }

    /// A string field.
    #[inline]
    pub(crate) fn string_field(&mut self, wire: WireType) -> Result<&'a str> {
        self.expect(wire, WireType::Len)?;
        self.string()
    }

    /// An embedded message field.
    #[inline]
    pub(crate) fn message_field(&mut self, wire: WireType) -> Result<Reader<'a>> {
        self.expect(wire, WireType::Len)?;
        self.message()
    }
}

impl<'a> Reader<'a> {
    /// The bytes not read yet.
    pub(crate) fn rest(&self) -> &'a [u8] {
        &self.buf[self.pos.min(self.buf.len())..]
    }
}
