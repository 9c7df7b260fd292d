//! Attribute rows written as OTLP `KeyValue` fields.
//!
//! A [`RowSource`] writes a range of a table's rows straight into a writer: the rows of a
//! record's, span's or data point's attributes are written where their parent's message is.
//! Rows shared by many parents (resource and scope attributes) are encoded once, back to back,
//! as [`EncodedRows`], and copied for each parent: one copy when its rows are contiguous, one
//! per row otherwise.
//!
//! With dictionary keys and plain value columns (the layout the OTLP decoder builds) rows are
//! read as slices and each short `KeyValue` is staged in place in a fixed-size block: no
//! per-row dispatch on column layouts and no copy calls for its parts. Other layouts go
//! through the general column readers.

use std::ops::Range;

use arrow::array::{Array, StringArray, UInt8Array, UInt16Array};

use super::plain_columns::{Nums, PlainScalars, WINDOW};
use crate::column::Col;
use crate::error::{Error, Result};
use crate::schema::consts::value_type;
use crate::value::{ScalarField, ValueView};
use crate::wire::{Writer, varint_len};

/// Every row of an attribute table as an encoded `KeyValue` field.
pub(crate) struct EncodedRows {
    bytes: Vec<u8>,
    /// Row `r` is `bytes[ends[r]..ends[r + 1]]`.
    ends: Vec<u32>,
}

/// The columns an attribute table's rows are encoded from, and the field number of their
/// `KeyValue`s.
pub(crate) struct RowSource<'a> {
    field: u32,
    keys: KeyWriter<'a>,
    values: ValueView<'a>,
    /// The value columns read as slices, when they are all plain.
    scalars: Option<PlainScalars<'a>>,
    rows: usize,
}

impl<'a> RowSource<'a> {
    /// The `rows` rows of `keys` and `values`, written as fields numbered `field`.
    pub(crate) fn new(field: u32, keys: KeyWriter<'a>, values: ValueView<'a>, rows: usize) -> Self {
        RowSource {
            field,
            scalars: PlainScalars::of(&values),
            keys,
            values,
            rows,
        }
    }

    /// Writes rows `range` as `KeyValue` fields, failing once `w` passes its limit; `done` is
    /// called after each row.
    ///
    /// With dictionary keys and plain value columns the rows are read as slices, and a
    /// `KeyValue` whose key field and string fit their windows is staged in place in a
    /// fixed-size block (no copy calls for its parts); the others are written field by field.
    #[inline(always)]
    pub(crate) fn write_rows(
        &self,
        w: &mut Writer,
        range: Range<usize>,
        done: impl FnMut(&Writer),
    ) -> Result<()> {
        match (&self.keys, &self.scalars) {
            (KeyWriter::Dict16(ids, encoded), Some(scalars)) => {
                self.write_plain(w, range, Nums::of(*ids), encoded, scalars, done)
            }
            (KeyWriter::Dict8(ids, encoded), Some(scalars)) => {
                self.write_plain(w, range, Nums::of(*ids), encoded, scalars, done)
            }
            _ => self.write_general(w, range, done),
        }
    }

    /// [`RowSource::write_rows`] through the general column readers.
    fn write_general(
        &self,
        w: &mut Writer,
        range: Range<usize>,
        mut done: impl FnMut(&Writer),
    ) -> Result<()> {
        for row in range {
            match (self.keys.encoded(row), self.values.scalar_field(row)) {
                (Some(key), Some(value)) => write_scalar(w, self.field, key, value),
                _ => write_general(w, self.field, &self.keys, &self.values, row)?,
            }
            w.check_limit()?;
            done(w);
        }
        Ok(())
    }

    /// [`RowSource::write_rows`] for dictionary ids `ids` and plain value columns.
    #[inline(always)]
    fn write_plain<K>(
        &self,
        w: &mut Writer,
        range: Range<usize>,
        ids: Nums<'_, K>,
        encoded: &EncodedKeys,
        scalars: &PlainScalars<'_>,
        mut done: impl FnMut(&Writer),
    ) -> Result<()>
    where
        K: arrow::datatypes::ArrowNativeType + Into<usize>,
    {
        let short_field = u8::try_from(self.field).ok().filter(|f| *f < 16);
        for row in range {
            let key = encoded.key(ids.get(row).map(Into::into));
            let start = w.len();
            let staged = match (key, short_field) {
                (KeyField::Short(window, len), Some(field)) => {
                    let block = w.block::<STAGED>();
                    stage(block, field, window, len, scalars, row)
                }
                _ => None,
            };
            match staged {
                Some(len) => w.truncate(start + len),
                None => {
                    w.truncate(start);
                    match scalars.scalar_field(row) {
                        Some(value) => write_scalar(w, self.field, key.bytes(), value),
                        None => write_general(w, self.field, &self.keys, &self.values, row)?,
                    }
                }
            }
            w.check_limit()?;
            done(w);
        }
        Ok(())
    }
}

impl EncodedRows {
    /// Encodes every row of `source`, failing once more than `limit` bytes are written.
    pub(crate) fn build(source: &RowSource<'_>, limit: usize) -> Result<Self> {
        let rows = source.rows;
        // Room for every row without regrowing: rows with plain values take at most a staged
        // block each beyond their string bytes; other layouts grow as needed.
        let capacity = match &source.scalars {
            Some(scalars) => rows
                .saturating_mul(STAGED - WINDOW)
                .saturating_add(scalars.str_bytes() + STAGED),
            None => rows.saturating_mul(24),
        };
        let buffer = Vec::with_capacity(capacity.min(limit).min(256 << 20));
        let mut w = Writer::from_buffer(buffer).with_limit(limit.min(u32::MAX as usize));
        let mut ends = Vec::with_capacity(rows + 1);
        ends.push(0);
        source.write_rows(&mut w, 0..rows, |w| ends.push(w.len() as u32))?;
        Ok(EncodedRows {
            bytes: w.into_bytes(),
            ends,
        })
    }

    /// The encoded fields of rows `rows` (empty past the table's end).
    #[inline]
    pub(crate) fn span(&self, rows: Range<usize>) -> &[u8] {
        match (self.ends.get(rows.start), self.ends.get(rows.end)) {
            (Some(start), Some(end)) if start <= end => &self.bytes[*start as usize..*end as usize],
            _ => &[],
        }
    }
}

/// Bytes staged for a short `KeyValue`: a tag and length byte, a key field of up to
/// [`WINDOW`] bytes, a value field of up to [`WINDOW`] + 4 bytes.
const STAGED: usize = 80;

/// Writes row `row` as a `KeyValue` field numbered `field` (under 16) into `out` and returns
/// its length; None when its value is not a scalar or is a string longer than [`WINDOW`].
#[inline(always)]
fn stage(
    out: &mut [u8; STAGED],
    field: u8,
    key: &[u8; WINDOW],
    key_len: usize,
    scalars: &PlainScalars<'_>,
    row: usize,
) -> Option<usize> {
    out[0] = field << 3 | 2;
    out[2..2 + WINDOW].copy_from_slice(key);
    let at = 2 + key_len;
    // The `value` field (2) of the `KeyValue`, holding an `AnyValue`.
    let end = match scalars.value_type(row)? {
        value_type::STR => {
            let (window, len) = scalars.str_window(row)?;
            out[at..at + 4].copy_from_slice(&[2 << 3 | 2, len as u8 + 2, 1 << 3 | 2, len as u8]);
            out[at + 4..at + 4 + WINDOW].copy_from_slice(window);
            at + 4 + len
        }
        value_type::INT => {
            let mut value = scalars.int(row) as u64;
            let len = varint_len(value);
            out[at..at + 3].copy_from_slice(&[2 << 3 | 2, len as u8 + 1, 3 << 3]);
            for byte in &mut out[at + 3..at + 3 + len] {
                *byte = value as u8 & 0x7f | if value >= 0x80 { 0x80 } else { 0 };
                value >>= 7;
            }
            at + 3 + len
        }
        value_type::DOUBLE => {
            out[at..at + 3].copy_from_slice(&[2 << 3 | 2, 9, 4 << 3 | 1]);
            out[at + 3..at + 11].copy_from_slice(&scalars.double(row).to_bits().to_le_bytes());
            at + 11
        }
        value_type::BOOL => {
            out[at..at + 4].copy_from_slice(&[2 << 3 | 2, 2, 2 << 3, u8::from(scalars.bool(row))]);
            at + 4
        }
        _ => return None,
    };
    out[1] = (end - 2) as u8;
    Some(end)
}

/// Writes a `KeyValue` field numbered `field` from its encoded `key` field and a scalar value.
#[inline(always)]
fn write_scalar(w: &mut Writer, field: u32, key: &[u8], value: ScalarField<'_>) {
    // Both lengths are known: nothing is patched.
    let value_len = value.len();
    let kv_len = key.len() + 1 + varint_len(value_len as u64) + value_len;
    if kv_len < 0x80 && field < 16 {
        // One-byte tags and lengths throughout (most attributes).
        w.raw(&[(field << 3 | 2) as u8, kv_len as u8]);
        w.raw(key);
        value.write_short_value_field(w, value_len as u8);
        return;
    }
    w.key_len(field, kv_len);
    w.raw(key);
    w.key_len(2, value_len);
    value.write(w);
}

/// Writes row `row` as a `KeyValue` field numbered `field`, whatever its value and layout.
fn write_general(
    w: &mut Writer,
    field: u32,
    keys: &KeyWriter<'_>,
    values: &ValueView<'_>,
    row: usize,
) -> Result<()> {
    let kv = w.begin(field);
    keys.write(w, row);
    let value = w.begin(2);
    values.write(w, row)?;
    w.end(value);
    w.end(kv);
    Ok(())
}

/// Writes the `key` field of `KeyValue`s. Each distinct key of a dictionary column is encoded
/// once per batch, then copied.
pub(crate) enum KeyWriter<'a> {
    Dict8(&'a UInt8Array, EncodedKeys),
    Dict16(&'a UInt16Array, EncodedKeys),
    Plain(Col<'a, StringArray>),
}

/// The `key` field of each value of a key dictionary.
pub(crate) struct EncodedKeys {
    bytes: Vec<u8>,
    /// Value `k` is `bytes[ends[k]..ends[k + 1]]`.
    ends: Vec<u32>,
    /// Value `k` padded to [`WINDOW`] bytes, when it fits.
    windows: Vec<KeyWindow>,
}

/// An encoded key field padded to [`WINDOW`] bytes, and its length ([`KeyWindow::LONG`]: the
/// field does not fit).
struct KeyWindow {
    bytes: [u8; WINDOW],
    len: u8,
}

impl KeyWindow {
    const LONG: u8 = u8::MAX;
}

/// The encoded `key` field of a row.
#[derive(Clone, Copy)]
enum KeyField<'a> {
    /// At most [`WINDOW`] bytes: padded, and its length.
    Short(&'a [u8; WINDOW], usize),
    Long(&'a [u8]),
}

impl<'a> KeyField<'a> {
    fn bytes(self) -> &'a [u8] {
        match self {
            KeyField::Short(window, len) => &window[..len],
            KeyField::Long(bytes) => bytes,
        }
    }
}

impl EncodedKeys {
    fn new(values: &StringArray) -> Result<Self> {
        let mut w = Writer::default();
        let mut ends = Vec::with_capacity(values.len() + 1);
        ends.push(0);
        for i in 0..values.len() {
            if values.is_valid(i) {
                w.bytes_field(1, values.value(i).as_bytes());
            }
            let end = u32::try_from(w.len())
                .map_err(|_| Error::LimitExceeded("attribute keys over 4 GiB".into()))?;
            ends.push(end);
        }
        let bytes = w.into_bytes();
        let windows = ends
            .windows(2)
            .map(|e| {
                let field = &bytes[e[0] as usize..e[1] as usize];
                let mut window = KeyWindow {
                    bytes: [0; WINDOW],
                    len: KeyWindow::LONG,
                };
                if let Some(prefix) = window.bytes.get_mut(..field.len()) {
                    prefix.copy_from_slice(field);
                    window.len = field.len() as u8;
                }
                window
            })
            .collect();
        Ok(EncodedKeys {
            bytes,
            ends,
            windows,
        })
    }

    /// The key field of dictionary value `k` (None: a null key, written as no field).
    #[inline(always)]
    fn key(&self, k: Option<usize>) -> KeyField<'_> {
        const EMPTY: [u8; WINDOW] = [0; WINDOW];
        let Some(k) = k else {
            return KeyField::Short(&EMPTY, 0);
        };
        match self.windows.get(k) {
            Some(window) if window.len != KeyWindow::LONG => {
                KeyField::Short(&window.bytes, usize::from(window.len))
            }
            _ => KeyField::Long(self.get(k)),
        }
    }

    /// The encoded field of dictionary value `k` (empty when out of range).
    #[inline(always)]
    fn get(&self, k: usize) -> &[u8] {
        match (self.ends.get(k), self.ends.get(k + 1)) {
            (Some(start), Some(end)) => &self.bytes[*start as usize..*end as usize],
            _ => &[],
        }
    }
}

impl<'a> KeyWriter<'a> {
    pub(crate) fn new(column: Col<'a, StringArray>) -> Result<Self> {
        Ok(match column {
            Col::Dict8(keys, values) => KeyWriter::Dict8(keys, EncodedKeys::new(values)?),
            Col::Dict16(keys, values) => KeyWriter::Dict16(keys, EncodedKeys::new(values)?),
            other => KeyWriter::Plain(other),
        })
    }

    /// The encoded `key` field of row `row` when the column is a dictionary (None: plain).
    #[inline(always)]
    fn encoded(&self, row: usize) -> Option<&[u8]> {
        Some(match self {
            KeyWriter::Dict8(keys, encoded) if keys.is_valid(row) => {
                encoded.get(usize::from(keys.value(row)))
            }
            KeyWriter::Dict16(keys, encoded) if keys.is_valid(row) => {
                encoded.get(usize::from(keys.value(row)))
            }
            KeyWriter::Dict8(..) | KeyWriter::Dict16(..) => &[],
            KeyWriter::Plain(_) => return None,
        })
    }

    fn write(&self, w: &mut Writer, row: usize) {
        match self.encoded(row) {
            Some(encoded) => w.raw(encoded),
            None => {
                if let KeyWriter::Plain(column) = self {
                    w.bytes_field(1, column.get(row).unwrap_or("").as_bytes());
                }
            }
        }
    }
}

/// The field number of an attribute table's `KeyValue`s in its parent message.
pub(crate) fn attributes_field(kind: crate::schema::PayloadType) -> u32 {
    use crate::schema::PayloadType as P;
    match kind {
        // Resource.attributes, LogRecord.attributes, Span.attributes
        P::ResourceAttrs => 1,
        P::ScopeAttrs => 3,
        P::LogAttrs => 6,
        P::SpanAttrs => 9,
        // Span.Event.attributes, Span.Link.attributes
        P::SpanEventAttrs => 3,
        P::SpanLinkAttrs => 4,
        // Metric.metadata
        P::MetricAttrs => 12,
        P::NumberDpAttrs | P::SummaryDpAttrs => 7,
        P::HistogramDpAttrs => 9,
        P::ExpHistogramDpAttrs => 1,
        // Exemplar.filtered_attributes
        P::NumberDpExemplarAttrs | P::HistogramDpExemplarAttrs | P::ExpHistogramDpExemplarAttrs => {
            7
        }
        // Not an attribute table: never written as attributes.
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{
        ArrayRef, BinaryArray, BooleanArray, DictionaryArray, Float64Array, Int64Array,
        RecordBatch, UInt8Array, UInt16Array,
    };
    use arrow::datatypes::{Field, Schema, UInt8Type, UInt16Type};
    use proptest::prelude::*;

    use super::*;
    use crate::schema::PayloadType;
    use crate::schema::consts;

    /// One attribute: its key (an index into [`KEYS`], None: null), type, and the values its
    /// columns hold (None: null).
    #[derive(Debug, Clone)]
    struct Row {
        key: Option<usize>,
        ty: u8,
        str: Option<String>,
        int: Option<i64>,
        double: Option<f64>,
        bool: Option<bool>,
    }

    /// Short keys, a key whose field just fits the window, and keys past it.
    const KEYS: [&str; 5] = [
        "",
        "http.route",
        "k23456789012345678901234567890",
        "a-key-of-forty-bytes-for-the-long-path!!",
        "k2345678901234567890123456789",
    ];

    fn row() -> impl Strategy<Value = Row> {
        (
            proptest::option::weighted(0.9, 0..KEYS.len()),
            prop_oneof![
                Just(value_type::STR),
                Just(value_type::INT),
                Just(value_type::DOUBLE),
                Just(value_type::BOOL),
                Just(value_type::BYTES),
                Just(value_type::EMPTY),
            ],
            proptest::option::weighted(0.9, "[a-zé]{0,40}"),
            proptest::option::weighted(0.9, any::<i64>()),
            proptest::option::weighted(0.9, any::<f64>()),
            proptest::option::weighted(0.9, any::<bool>()),
        )
            .prop_map(|(key, ty, str, int, double, bool)| Row {
                key,
                ty,
                str,
                int,
                double,
                bool,
            })
    }

    fn table(rows: &[Row], narrow_keys: bool) -> RecordBatch {
        let dictionary: ArrayRef = Arc::new(StringArray::from_iter_values(KEYS));
        let key: ArrayRef = if narrow_keys {
            let ids = UInt8Array::from_iter(rows.iter().map(|r| r.key.map(|k| k as u8)));
            Arc::new(DictionaryArray::<UInt8Type>::try_new(ids, dictionary).unwrap())
        } else {
            let ids = UInt16Array::from_iter(rows.iter().map(|r| r.key.map(|k| k as u16)));
            Arc::new(DictionaryArray::<UInt16Type>::try_new(ids, dictionary).unwrap())
        };
        let columns: Vec<(&str, ArrayRef)> = vec![
            (consts::KEY, key),
            (
                consts::TYPE,
                Arc::new(UInt8Array::from_iter_values(rows.iter().map(|r| r.ty))),
            ),
            (
                consts::STR,
                Arc::new(StringArray::from_iter(rows.iter().map(|r| r.str.clone()))),
            ),
            (
                consts::INT,
                Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.int))),
            ),
            (
                consts::DOUBLE,
                Arc::new(Float64Array::from_iter(rows.iter().map(|r| r.double))),
            ),
            (
                consts::BOOL,
                Arc::new(BooleanArray::from_iter(rows.iter().map(|r| r.bool))),
            ),
            (
                consts::BYTES,
                Arc::new(BinaryArray::from_iter(
                    rows.iter().map(|r| r.str.as_ref().map(|s| s.as_bytes())),
                )),
            ),
        ];
        let fields: Vec<Field> = columns
            .iter()
            .map(|(name, c)| Field::new(*name, c.data_type().clone(), true))
            .collect();
        RecordBatch::try_new(
            Arc::new(Schema::new(fields)),
            columns.into_iter().map(|(_, c)| c).collect(),
        )
        .unwrap()
    }

    /// Every row written field by field through the general column readers.
    fn general(field: u32, keys: &KeyWriter<'_>, values: &ValueView<'_>, rows: usize) -> Vec<u8> {
        let mut w = Writer::default();
        for row in 0..rows {
            match (keys.encoded(row), values.scalar_field(row)) {
                (Some(key), Some(value)) => write_scalar(&mut w, field, key, value),
                _ => write_general(&mut w, field, keys, values, row).unwrap(),
            }
        }
        w.into_bytes()
    }

    proptest! {
        /// Rows encoded from plain columns (staged in blocks or not) are the bytes the general
        /// column readers write, row by row.
        #[test]
        fn plain_rows_are_written_as_the_general_path_writes_them(
            rows in proptest::collection::vec(row(), 0..40),
            narrow_keys: bool,
            field in prop_oneof![Just(1u32), Just(6), Just(9), Just(12), Just(20)],
        ) {
            let kind = PayloadType::LogAttrs;
            let t = table(&rows, narrow_keys);
            let keys = KeyWriter::new(Col::of(&t, kind, consts::KEY).unwrap()).unwrap();
            let values = ValueView::of_table(&t, kind).unwrap();
            let expected = general(field, &keys, &values, rows.len());
            let source = RowSource::new(field, keys, values, rows.len());
            prop_assert!(source.scalars.is_some());
            let encoded = EncodedRows::build(&source, usize::MAX).unwrap();
            prop_assert_eq!(encoded.span(0..rows.len()), &expected[..]);
            // Each row's span is that row alone.
            let mut joined = Vec::new();
            for r in 0..rows.len() {
                joined.extend_from_slice(encoded.span(r..r + 1));
            }
            prop_assert_eq!(&joined, &expected);
            // Rows written straight into a writer, a few at a time, are the same bytes.
            let mut w = Writer::default();
            let mut at = 0;
            while at < rows.len() {
                let end = (at + 3).min(rows.len());
                source.write_rows(&mut w, at..end, |_| ()).unwrap();
                at = end;
            }
            prop_assert_eq!(w.into_bytes(), expected);
        }
    }

    /// Encoding stops with an error once the rows pass the limit.
    #[test]
    fn rows_past_the_limit_are_an_error() {
        let rows: Vec<Row> = (0..100)
            .map(|i| Row {
                key: Some(1),
                ty: value_type::INT,
                str: None,
                int: Some(i),
                double: None,
                bool: None,
            })
            .collect();
        let kind = PayloadType::LogAttrs;
        let t = table(&rows, false);
        let keys = KeyWriter::new(Col::of(&t, kind, consts::KEY).unwrap()).unwrap();
        let values = ValueView::of_table(&t, kind).unwrap();
        let source = RowSource::new(6, keys, values, rows.len());
        assert!(EncodedRows::build(&source, 100).is_err());
        assert!(EncodedRows::build(&source, 10_000).is_ok());
        let mut w = Writer::default().with_limit(100);
        assert!(source.write_rows(&mut w, 0..rows.len(), |_| ()).is_err());
    }
}
