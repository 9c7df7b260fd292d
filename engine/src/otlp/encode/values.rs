//! Writing attribute tables as OTLP `KeyValue` fields.

use arrow::array::{Array, RecordBatch, StringArray, UInt8Array, UInt16Array};

use super::index::ChildIndex;
use crate::column::Col;
use crate::error::Result;
use crate::schema::PayloadType;
use crate::schema::consts;
pub(crate) use crate::value_view::ValueView;
use crate::wire::{Writer, varint_len};

/// An attribute table indexed by parent id.
pub(crate) struct AttrsView<'a> {
    index: ChildIndex,
    key: KeyWriter<'a>,
    values: Option<ValueView<'a>>,
}

/// Writes the `key` field of `KeyValue`s. Each distinct key of a dictionary column is encoded
/// once per batch, then copied.
enum KeyWriter<'a> {
    Dict8(&'a UInt8Array, Vec<Vec<u8>>),
    Dict16(&'a UInt16Array, Vec<Vec<u8>>),
    Plain(Col<'a, StringArray>),
}

fn encode_keys(values: &StringArray) -> Vec<Vec<u8>> {
    (0..values.len())
        .map(|i| {
            let mut w = Writer::default();
            if values.is_valid(i) {
                w.bytes_field(1, values.value(i).as_bytes());
            }
            w.into_bytes()
        })
        .collect()
}

impl<'a> KeyWriter<'a> {
    fn new(column: Col<'a, StringArray>) -> Self {
        match column {
            Col::Dict8(keys, values) => KeyWriter::Dict8(keys, encode_keys(values)),
            Col::Dict16(keys, values) => KeyWriter::Dict16(keys, encode_keys(values)),
            other => KeyWriter::Plain(other),
        }
    }

    /// The encoded `key` field of row `row` when the column is a dictionary (None: plain).
    #[inline]
    fn encoded(&self, row: usize) -> Option<&[u8]> {
        let (valid, key, encoded) = match self {
            KeyWriter::Dict8(keys, encoded) => {
                (keys.is_valid(row), usize::from(keys.value(row)), encoded)
            }
            KeyWriter::Dict16(keys, encoded) => {
                (keys.is_valid(row), usize::from(keys.value(row)), encoded)
            }
            KeyWriter::Plain(_) => return None,
        };
        Some(if valid {
            encoded.get(key).map_or(&[], Vec::as_slice)
        } else {
            &[]
        })
    }

    #[inline]
    fn write(&self, w: &mut Writer, row: usize) {
        let encoded = match self {
            KeyWriter::Dict8(keys, encoded) => keys
                .is_valid(row)
                .then(|| encoded.get(keys.value(row) as usize)),
            KeyWriter::Dict16(keys, encoded) => keys
                .is_valid(row)
                .then(|| encoded.get(keys.value(row) as usize)),
            KeyWriter::Plain(column) => {
                w.bytes_field(1, column.get(row).unwrap_or("").as_bytes());
                return;
            }
        };
        if let Some(Some(bytes)) = encoded {
            w.raw(bytes);
        }
    }
}

impl<'a> AttrsView<'a> {
    /// Views `kind` of `batch` (no attributes when the table is absent).
    pub(crate) fn new(table: Option<&'a RecordBatch>, kind: PayloadType) -> Result<Self> {
        let index = ChildIndex::build(table, kind, consts::PARENT_ID)?;
        Ok(match table {
            Some(t) => AttrsView {
                index,
                key: KeyWriter::new(Col::of(t, kind, consts::KEY)?),
                values: Some(ValueView::of_table(t, kind)?),
            },
            None => AttrsView {
                index,
                key: KeyWriter::Plain(Col::Absent),
                values: None,
            },
        })
    }

    /// Writes the attributes of `parent` as repeated `KeyValue` fields numbered `field`.
    #[inline]
    pub(crate) fn write(&self, w: &mut Writer, field: u32, parent: Option<u32>) -> Result<()> {
        let Some(values) = &self.values else {
            return Ok(());
        };
        self.index.for_each(parent, |row| {
            // Scalars with a dictionary key: both lengths are known, nothing is patched.
            if let (Some(key), Some(value)) = (self.key.encoded(row), values.scalar_field(row)) {
                let value_len = value.len();
                let kv_len = key.len() + 1 + varint_len(value_len as u64) + value_len;
                if kv_len < 0x80 && field < 16 {
                    // One-byte tags and lengths throughout (most attributes).
                    w.raw(&[(field << 3 | 2) as u8, kv_len as u8]);
                    w.raw(key);
                    value.write_short_value_field(w, value_len as u8);
                    return Ok(());
                }
                w.key_len(field, kv_len);
                w.raw(key);
                w.key_len(2, value_len);
                value.write(w);
                return Ok(());
            }
            let kv = w.begin(field);
            self.key.write(w, row);
            let value = w.begin(2);
            values.write(w, row)?;
            w.end(value);
            w.end(kv);
            Ok(())
        })
    }
}
