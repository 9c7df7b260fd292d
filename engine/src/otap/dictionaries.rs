//! Dictionaries that persist across the batches of one OTAP stream, as the reference producer
//! keeps them: each string column's values get keys once, later batches reuse them, and the
//! Arrow IPC writer sends only the new values (a delta dictionary).
//!
//! A column's dictionary starts with `UInt8` keys where OTAP allows them and moves to `UInt16`
//! past 255 values (a schema change, so its IPC stream restarts). Past 65,535 values or
//! [`MAX_DICTIONARY_BYTES`] it starts afresh (a replacement dictionary). A column whose batches
//! bring mostly new values (unique bodies, ids) is sent natively for the rest of the stream.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, DictionaryArray, StringArray, UInt8Array, UInt16Array};
use arrow::buffer::{Buffer, OffsetBuffer, ScalarBuffer};
use arrow::compute::cast;
use arrow::datatypes::{DataType, UInt8Type, UInt16Type};

use crate::column::Col;
use crate::schema::PayloadType;

/// Most bytes of values one column's dictionary holds before it starts afresh.
pub const MAX_DICTIONARY_BYTES: usize = 4 << 20;

/// A column's dictionary state within a stream.
enum ColumnDictionary {
    Memo(Memo),
    /// Sent natively for the rest of the stream.
    Native,
}

#[derive(Default)]
struct Memo {
    index: HashMap<Box<str>, u16, ahash::RandomState>,
    offsets: Vec<i32>,
    data: Vec<u8>,
    /// Keys are `UInt16` (once widened, they stay so: no schema flapping).
    wide: bool,
}

impl Memo {
    fn clear(&mut self) {
        self.index.clear();
        self.offsets.clear();
        self.data.clear();
    }

    /// Keys for `values`, adding new values; None when the dictionary would overflow.
    fn keys<'a>(
        &mut self,
        values: impl Iterator<Item = Option<&'a str>>,
    ) -> Option<(Vec<Option<u16>>, usize)> {
        if self.offsets.is_empty() {
            self.offsets.push(0);
        }
        let mut added = 0;
        let mut keys = Vec::new();
        for value in values {
            let key = match value {
                None => None,
                Some(s) => Some(match self.index.get(s) {
                    Some(k) => *k,
                    None => {
                        let k = u16::try_from(self.index.len()).ok()?;
                        self.index.insert(s.into(), k);
                        self.data.extend_from_slice(s.as_bytes());
                        self.offsets.push(self.data.len() as i32);
                        added += 1;
                        k
                    }
                }),
            };
            keys.push(key);
        }
        Some((keys, added))
    }

    fn values(&self) -> StringArray {
        let offsets = OffsetBuffer::new(ScalarBuffer::from(self.offsets.clone()));
        StringArray::new(offsets, Buffer::from(self.data.clone()), None)
    }
}

/// The dictionaries of one stream, per table and column path.
#[derive(Default)]
pub(crate) struct Dictionaries {
    columns: HashMap<(PayloadType, String), ColumnDictionary>,
}

fn native(array: &ArrayRef) -> ArrayRef {
    match array.data_type() {
        DataType::Dictionary(_, value) => cast(array, value).unwrap_or_else(|_| Arc::clone(array)),
        _ => Arc::clone(array),
    }
}

impl Dictionaries {
    /// Encodes a string column (native or dictionary) with the stream's dictionary for it.
    pub(crate) fn encode(
        &mut self,
        kind: PayloadType,
        path: &str,
        array: &ArrayRef,
        allow_u8: bool,
    ) -> ArrayRef {
        let Some(column) = Col::<StringArray>::new(array) else {
            return Arc::clone(array);
        };
        let rows = array.len();
        let state = self
            .columns
            .entry((kind, path.to_string()))
            .or_insert_with(|| ColumnDictionary::Memo(Memo::default()));
        let ColumnDictionary::Memo(memo) = state else {
            return native(array);
        };
        if memo.data.len() > MAX_DICTIONARY_BYTES {
            memo.clear();
        }
        let mut result = memo.keys((0..rows).map(|i| column.get(i)));
        if result.is_none() {
            memo.clear();
            result = memo.keys((0..rows).map(|i| column.get(i)));
        }
        let Some((keys, _)) = result.filter(|(_, added)| rows <= 16 || added * 2 <= rows) else {
            *state = ColumnDictionary::Native;
            return native(array);
        };
        if !(allow_u8 && memo.index.len() <= usize::from(u8::MAX)) {
            memo.wide = true;
        }
        let values: ArrayRef = Arc::new(memo.values());
        let encoded = if memo.wide {
            DictionaryArray::<UInt16Type>::try_new(UInt16Array::from(keys), values)
                .map(|d| Arc::new(d) as ArrayRef)
        } else {
            let narrow = UInt8Array::from_iter(keys.into_iter().map(|k| k.map(|k| k as u8)));
            DictionaryArray::<UInt8Type>::try_new(narrow, values).map(|d| Arc::new(d) as ArrayRef)
        };
        encoded.unwrap_or_else(|_| native(array))
    }
}
