//! An appending protobuf writer. Nested messages are written in place after a one-byte length
//! guess, then the length is patched (shifting the body only when it needs more bytes).

/// Writes protobuf fields into a growing buffer.
pub(crate) struct Writer {
    buf: Vec<u8>,
    limit: usize,
}

impl Default for Writer {
    fn default() -> Self {
        Writer {
            buf: Vec::new(),
            limit: usize::MAX,
        }
    }
}

/// Where a nested message started and how many bytes its length may take in place (see
/// [`Writer::begin`] and [`Writer::begin_sized`]).
#[must_use]
pub(crate) struct Nested {
    start: usize,
    reserved: usize,
}

#[inline]
pub(crate) fn varint_len(value: u64) -> usize {
    // 1 byte per 7 bits, at least one.
    (64 - (value | 1).leading_zeros() as usize).div_ceil(7)
}

impl Writer {
    /// A writer with room for `capacity` bytes.
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Writer {
            buf: Vec::with_capacity(capacity),
            limit: usize::MAX,
        }
    }

    /// A writer appending to `buf` after clearing it (its capacity is reused).
    pub(crate) fn from_buffer(mut buf: Vec<u8>) -> Self {
        buf.clear();
        Writer {
            buf,
            limit: usize::MAX,
        }
    }

    /// Sets the size past which [`Writer::check_limit`] fails.
    pub(crate) fn with_limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }

    /// Fails when more than the limit has been written.
    #[inline]
    pub(crate) fn check_limit(&self) -> crate::error::Result<()> {
        if self.buf.len() > self.limit {
            Err(crate::error::Error::LimitExceeded(format!(
                "encoded output exceeds {} bytes",
                self.limit
            )))
        } else {
            Ok(())
        }
    }

    /// How many bytes have been written.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.buf.len()
    }

    /// The size past which [`Writer::check_limit`] fails.
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// The bytes written.
    pub(crate) fn into_bytes(self) -> Vec<u8> {
        self.buf
    }

    #[inline]
    pub(crate) fn varint(&mut self, mut value: u64) {
        while value >= 0x80 {
            self.buf.push((value as u8) | 0x80);
            value >>= 7;
        }
        self.buf.push(value as u8);
    }

    #[inline]
    fn key(&mut self, field: u32, wire: u8) {
        self.varint(u64::from(field << 3 | u32::from(wire)));
    }

    /// A varint field (`uint32`, `uint64`, `int64`, enums, `bool`), skipped when zero.
    #[inline]
    pub(crate) fn varint_field(&mut self, field: u32, value: u64) {
        if value != 0 {
            self.key(field, 0);
            self.varint(value);
        }
    }

    /// An `int32`/enum field, skipped when zero (negative values take ten bytes, as in proto3).
    #[inline]
    pub(crate) fn int32_field(&mut self, field: u32, value: i32) {
        self.varint_field(field, i64::from(value) as u64);
    }

    /// A `sint32` field (zigzag), skipped when zero.
    #[inline]
    pub(crate) fn sint32_field(&mut self, field: u32, value: i32) {
        self.varint_field(field, u64::from(((value << 1) ^ (value >> 31)) as u32));
    }

    /// A `fixed64`/`sfixed64` field, skipped when zero.
    #[inline]
    pub(crate) fn fixed64_field(&mut self, field: u32, value: u64) {
        if value != 0 {
            self.fixed64_always(field, value);
        }
    }

    /// A `fixed64`-wire field written even when zero (oneof members, optional fields).
    #[inline]
    pub(crate) fn fixed64_always(&mut self, field: u32, value: u64) {
        self.key(field, 1);
        self.buf.extend_from_slice(&value.to_le_bytes());
    }

    /// A `fixed32` field, skipped when zero.
    #[inline]
    pub(crate) fn fixed32_field(&mut self, field: u32, value: u32) {
        if value != 0 {
            self.key(field, 5);
            self.buf.extend_from_slice(&value.to_le_bytes());
        }
    }

    /// A `bytes`/`string` field, skipped when empty.
    #[inline]
    pub(crate) fn bytes_field(&mut self, field: u32, value: &[u8]) {
        if !value.is_empty() {
            self.bytes_always(field, value);
        }
    }

    /// A trace or span id field, skipped when empty or all zero (an invalid id means none).
    #[inline(always)]
    pub(crate) fn id_field(&mut self, field: u32, value: &[u8]) {
        let nonzero = match value.len() {
            16 => value.try_into().is_ok_and(|v| u128::from_ne_bytes(v) != 0),
            8 => value.try_into().is_ok_and(|v| u64::from_ne_bytes(v) != 0),
            _ => value.iter().any(|b| *b != 0),
        };
        if nonzero {
            self.bytes_always(field, value);
        }
    }

    /// The key and length of a length-delimited field whose body follows.
    #[inline]
    pub(crate) fn key_len(&mut self, field: u32, len: usize) {
        self.key(field, 2);
        self.varint(len as u64);
    }

    /// A `bytes`/`string` field written even when empty (oneof members).
    #[inline]
    pub(crate) fn bytes_always(&mut self, field: u32, value: &[u8]) {
        self.key(field, 2);
        self.varint(value.len() as u64);
        self.buf.extend_from_slice(value);
    }

    /// Raw bytes appended as they are (an already encoded field).
    #[inline]
    pub(crate) fn raw(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Appends `N` zero bytes and returns them, to stage a field in place (then cut back to
    /// its length with [`Writer::truncate`]).
    #[inline(always)]
    pub(crate) fn block<const N: usize>(&mut self) -> &mut [u8; N] {
        let start = self.buf.len();
        self.buf.extend_from_slice(&[0; N]);
        let block: Option<&mut [u8; N]> = self.buf.get_mut(start..).and_then(|b| b.try_into().ok());
        block.unwrap_or_else(|| unreachable!("{N} bytes were just appended"))
    }

    /// Cuts the written bytes back to `len`.
    #[inline(always)]
    pub(crate) fn truncate(&mut self, len: usize) {
        self.buf.truncate(len);
    }

    /// Starts an embedded message field expected to be short (under 128 bytes); finish it with
    /// [`Writer::end`].
    #[inline]
    pub(crate) fn begin(&mut self, field: u32) -> Nested {
        self.begin_sized(field, 1)
    }

    /// Starts an embedded message field, reserving `reserved` bytes (1 to 5) for its length. A
    /// length that fits is written there as a padded varint (valid protobuf: continuation bits
    /// over zero groups), so the body is never moved; a longer one shifts the body.
    #[inline]
    pub(crate) fn begin_sized(&mut self, field: u32, reserved: usize) -> Nested {
        self.key(field, 2);
        self.buf.resize(self.buf.len() + reserved, 0);
        Nested {
            start: self.buf.len(),
            reserved,
        }
    }

    /// Finishes an embedded message, writing its length.
    #[inline]
    pub(crate) fn end(&mut self, nested: Nested) {
        let Nested { start, reserved } = nested;
        let len = self.buf.len() - start;
        if len < 0x80 && reserved == 1 {
            self.buf[start - 1] = len as u8;
            return;
        }
        if len < 0x4000 && reserved == 2 {
            // Two bytes, the first with its continuation bit even when the second is zero.
            self.buf[start - 2..start].copy_from_slice(&[(len as u8) | 0x80, (len >> 7) as u8]);
            return;
        }
        if varint_len(len as u64) <= reserved {
            let mut value = len as u64;
            let at = start - reserved;
            for i in 0..reserved {
                let more = if i + 1 < reserved { 0x80 } else { 0 };
                self.buf[at + i] = (value & 0x7f) as u8 | more;
                value >>= 7;
            }
            return;
        }
        // The length needs more bytes than reserved: move the body right.
        let extra = varint_len(len as u64) - reserved;
        self.buf.resize(self.buf.len() + extra, 0);
        self.buf.copy_within(start..start + len, start + extra);
        let mut at = start - reserved;
        let mut value = len as u64;
        while value >= 0x80 {
            self.buf[at] = (value as u8) | 0x80;
            value >>= 7;
            at += 1;
        }
        self.buf[at] = value as u8;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_lengths_of_every_size_decode() {
        for len in [0usize, 1, 127, 128, 300, 16_383, 16_384, 2_100_000] {
            let mut w = Writer::default();
            let n = w.begin(1);
            w.raw(&vec![7u8; len]);
            w.end(n);
            let bytes = w.into_bytes();
            let mut r = crate::wire::Reader::new(&bytes);
            let (field, wire) = r.field().unwrap().unwrap();
            assert_eq!((field, wire), (1, crate::wire::WireType::Len));
            let (body, _) = r.bytes().unwrap();
            assert_eq!(body.len(), len);
            assert!(r.is_done());
        }
    }

    #[test]
    fn padded_lengths_decode() {
        for (len, reserved) in [
            (0usize, 2usize),
            (5, 2),
            (200, 2),
            (16_383, 2),
            (16_384, 2),
            (70_000, 4),
            (3, 4),
        ] {
            let mut w = Writer::default();
            let n = w.begin_sized(1, reserved);
            w.raw(&vec![7u8; len]);
            w.end(n);
            let bytes = w.into_bytes();
            let mut r = crate::wire::Reader::new(&bytes);
            r.field().unwrap().unwrap();
            let (body, _) = r.bytes().unwrap();
            assert_eq!(body.len(), len);
            assert!(r.is_done());
        }
    }

    #[test]
    fn varint_len_matches_encoding() {
        for v in [
            0u64,
            1,
            127,
            128,
            16_383,
            16_384,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            let mut w = Writer::default();
            w.varint(v);
            assert_eq!(w.into_bytes().len(), varint_len(v), "value {v}");
        }
    }
}
