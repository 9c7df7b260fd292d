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

use arrow::array::{
    Array, ArrayRef, DictionaryArray, PrimitiveArray, StringArray, UInt8Array, UInt16Array,
};
use arrow::buffer::{Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow::compute::cast;
use arrow::datatypes::{ArrowDictionaryKeyType, ArrowNativeType, DataType, UInt8Type, UInt16Type};

use super::growing::Growing;
use crate::column::Col;
use crate::schema::PayloadType;

/// Most bytes of values one column's dictionary holds before it starts afresh.
pub const MAX_DICTIONARY_BYTES: usize = 4 << 20;

/// A column's dictionary state within a stream.
enum ColumnDictionary {
    Memo(Box<Memo>),
    /// Sent natively for the rest of the stream.
    Native,
}

#[derive(Default)]
struct Memo {
    values: Values,
    /// Keys are `UInt16` (once widened, they stay so: no schema flapping).
    wide: bool,
    /// For a column that arrives dictionary-encoded: the incoming dictionary, and the key of
    /// each of its entries here (None until used), kept while that dictionary grows.
    source: Growing,
    translation: Vec<u32>,
}

/// In [`Memo::translation`]: the entry has not been looked up yet.
const UNKNOWN: u32 = u32::MAX;
/// In [`Memo::translation`]: the entry is null.
const NULL_ENTRY: u32 = u32::MAX - 1;

/// Dictionary keys of a column's rows, with their validity.
struct Keys {
    values: Vec<u16>,
    /// Per row, whether it has a key; None when all do.
    valid: Option<Vec<bool>>,
}

impl Keys {
    fn from_options(keys: Vec<Option<u16>>) -> Self {
        let valid = keys
            .iter()
            .any(Option::is_none)
            .then(|| keys.iter().map(Option::is_some).collect());
        Keys {
            values: keys.into_iter().map(|k| k.unwrap_or(0)).collect(),
            valid,
        }
    }

    fn nulls(&mut self) -> Option<NullBuffer> {
        self.valid.take().map(NullBuffer::from)
    }
}

/// The values of a stream's dictionary, each with its key.
#[derive(Default)]
struct Values {
    index: HashMap<Box<str>, u16, ahash::RandomState>,
    offsets: Vec<i32>,
    data: Vec<u8>,
    /// The values as an Arrow array, until a value is added: handing the IPC writer the same
    /// array batch after batch lets it see at once that nothing changed.
    array: Option<ArrayRef>,
}

impl Values {
    /// The key of `value`, adding it (counted in `added`); None when the dictionary is full.
    fn key_of(&mut self, value: &str, added: &mut usize) -> Option<u16> {
        if let Some(k) = self.index.get(value) {
            return Some(*k);
        }
        let k = u16::try_from(self.index.len()).ok()?;
        if self.offsets.is_empty() {
            self.offsets.push(0);
        }
        self.index.insert(value.into(), k);
        self.data.extend_from_slice(value.as_bytes());
        self.offsets.push(self.data.len() as i32);
        self.array = None;
        *added += 1;
        Some(k)
    }

    fn array(&mut self) -> ArrayRef {
        if self.offsets.is_empty() {
            self.offsets.push(0);
        }
        let (offsets, data) = (&self.offsets, &self.data);
        let array = self.array.get_or_insert_with(|| {
            let offsets = OffsetBuffer::new(ScalarBuffer::from(offsets.clone()));
            Arc::new(StringArray::new(offsets, Buffer::from(data.clone()), None))
        });
        Arc::clone(array)
    }
}

impl Memo {
    fn clear(&mut self) {
        self.values = Values::default();
        self.source.reset();
        self.translation.clear();
    }

    /// Keys for the rows of `column`, adding new values; None when the dictionary would
    /// overflow. Also returns how many values were added. A dictionary-encoded column's
    /// entries are each looked up once for as long as its dictionary keeps growing.
    fn keys(&mut self, column: &Col<'_, StringArray>, rows: usize) -> Option<(Keys, usize)> {
        let mut added = 0;
        let keys = match column {
            Col::Dict8(keys, dictionary) => self.translate(keys, dictionary, &mut added)?,
            Col::Dict16(keys, dictionary) => self.translate(keys, dictionary, &mut added)?,
            _ => {
                let values = &mut self.values;
                Keys::from_options(
                    column.map_values(rows, |value| values.key_of(value, &mut added))?,
                )
            }
        };
        Some((keys, added))
    }

    /// Keys for the rows of a dictionary-encoded column: its entries are translated once each
    /// (and the translation kept while the incoming dictionary grows), then rows are mapped
    /// through the translation.
    fn translate<K: ArrowDictionaryKeyType>(
        &mut self,
        keys: &PrimitiveArray<K>,
        dictionary: &StringArray,
        added: &mut usize,
    ) -> Option<Keys> {
        self.translation.truncate(self.source.update(dictionary));
        self.translation.resize(dictionary.len(), UNKNOWN);
        let mut out = Keys {
            values: Vec::with_capacity(keys.len()),
            valid: None,
        };
        let null_at = |out: &mut Keys, row: usize| {
            let valid = out.valid.get_or_insert_with(|| vec![true; keys.len()]);
            valid[row] = false;
            out.values.push(0);
        };
        let key_nulls = keys.nulls().filter(|n| n.null_count() > 0);
        for (row, key) in keys.values().iter().enumerate() {
            // A null row's key is arbitrary: it must not be looked up.
            if key_nulls.is_some_and(|n| n.is_null(row)) {
                null_at(&mut out, row);
                continue;
            }
            let entry = key.as_usize();
            let mut translated = self.translation.get(entry).copied().unwrap_or(NULL_ENTRY);
            if translated < NULL_ENTRY {
                out.values.push(translated as u16);
                continue;
            }
            if translated == UNKNOWN {
                translated = match dictionary.is_valid(entry) {
                    true => u32::from(self.values.key_of(dictionary.value(entry), added)?),
                    false => NULL_ENTRY,
                };
                self.translation[entry] = translated;
            }
            match translated {
                NULL_ENTRY => null_at(&mut out, row),
                key => out.values.push(key as u16),
            }
        }
        Some(out)
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
            .or_insert_with(|| ColumnDictionary::Memo(Box::default()));
        let ColumnDictionary::Memo(memo) = state else {
            return native(array);
        };
        if memo.values.data.len() > MAX_DICTIONARY_BYTES {
            memo.clear();
        }
        let mut result = memo.keys(&column, rows);
        if result.is_none() {
            memo.clear();
            result = memo.keys(&column, rows);
        }
        let Some((mut keys, _)) = result.filter(|(_, added)| rows <= 16 || added * 2 <= rows)
        else {
            *state = ColumnDictionary::Native;
            return native(array);
        };
        if !(allow_u8 && memo.values.index.len() <= usize::from(u8::MAX)) {
            memo.wide = true;
        }
        let values = memo.values.array();
        let nulls = keys.nulls();
        let encoded = if memo.wide {
            let wide = UInt16Array::new(ScalarBuffer::from(keys.values), nulls);
            DictionaryArray::<UInt16Type>::try_new(wide, values).map(|d| Arc::new(d) as ArrayRef)
        } else {
            let narrow: Vec<u8> = keys.values.iter().map(|k| *k as u8).collect();
            let narrow = UInt8Array::new(ScalarBuffer::from(narrow), nulls);
            DictionaryArray::<UInt8Type>::try_new(narrow, values).map(|d| Arc::new(d) as ArrayRef)
        };
        encoded.unwrap_or_else(|_| native(array))
    }
}
