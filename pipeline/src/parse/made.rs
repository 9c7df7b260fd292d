//! Attributes made out of text, before they are merged into an attribute table: one entry per
//! attribute (the row it belongs to, its key, its typed value), in plain vectors that a row
//! that turns out not to parse is taken back from.
//!
//! Keys are interned per batch: an entry holds a key id. Records of one application repeat the
//! same keys in the same order, so the id expected at each position of a row is tried first,
//! and the hash table is only read when it differs.

use std::collections::HashMap;
use std::sync::Arc;

use ahash::RandomState;
use arrow::array::{
    ArrayRef, BinaryArray, BooleanArray, DictionaryArray, Float64Array, Int64Array, RecordBatch,
    StringArray, UInt8Array, UInt16Array, UInt32Array, new_null_array,
};
use arrow::buffer::{BooleanBuffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow::datatypes::UInt16Type;
use penstock_engine::schema::consts::{self, value_type};
use penstock_engine::schema::{PayloadType, canonical_schema};

use crate::error::{PipelineError, Result};

/// The value of an entry being made.
pub(crate) enum Made<'a> {
    /// A string.
    Str(&'a str),
    /// An integer.
    Int(i64),
    /// A float.
    Double(f64),
    /// A boolean.
    Bool(bool),
    /// A map (CBOR).
    Map(&'a [u8]),
    /// An array (CBOR).
    Slice(&'a [u8]),
}

/// Attributes made out of text, for the rows of one table.
#[derive(Default)]
pub(crate) struct MadeAttrs {
    /// The row (of the table the text was read from) of each entry.
    pub(crate) rows: Vec<u32>,
    /// The key id of each entry.
    pub(crate) keys: Vec<u32>,
    /// Whether each entry came before the map's own attributes in the merge (so they win).
    pub(crate) yields: Vec<bool>,
    types: Vec<u8>,
    /// Strings (UTF-8) and CBOR, each with an offset per entry.
    text: Arena,
    cbor: Arena,
    ints: Vec<i64>,
    doubles: Vec<f64>,
    bools: Vec<bool>,
    /// The keys by id.
    pub(crate) names: Vec<Box<str>>,
    ids: HashMap<Box<str>, u32, RandomState>,
    /// The key id last seen at each position of a row.
    expected: Vec<u32>,
    /// Entries of the row being made: where it started, and how many it has.
    row_start: usize,
    /// Whether entries being made come before the map's own attributes.
    yielding: bool,
}

impl MadeAttrs {
    /// Entries made from now on come before (`true`) or after the map's own attributes.
    pub(crate) fn set_yielding(&mut self, yielding: bool) {
        self.yielding = yielding;
    }

    /// Starts the entries of a row.
    pub(crate) fn start_row(&mut self) {
        self.row_start = self.rows.len();
    }

    /// Takes back every entry of the row being made (its text did not parse).
    pub(crate) fn abandon_row(&mut self) {
        let n = self.row_start;
        self.rows.truncate(n);
        self.keys.truncate(n);
        self.yields.truncate(n);
        self.types.truncate(n);
        self.ints.truncate(n);
        self.doubles.truncate(n);
        self.bools.truncate(n);
        self.text.truncate(n);
        self.cbor.truncate(n);
    }

    /// The number of entries.
    pub(crate) fn len(&self) -> usize {
        self.rows.len()
    }

    /// The id of `key`, the key of the entry at `position` of its row.
    fn key_id(&mut self, key: &str, position: usize) -> u32 {
        if let Some(&id) = self.expected.get(position)
            && &*self.names[id as usize] == key
        {
            return id;
        }
        let id = match self.ids.get(key) {
            Some(id) => *id,
            None => {
                let id = self.names.len() as u32;
                self.names.push(key.into());
                self.ids.insert(key.into(), id);
                id
            }
        };
        if position < self.expected.len() {
            self.expected[position] = id;
        } else if position == self.expected.len() {
            self.expected.push(id);
        }
        id
    }

    /// The id of `key` if some entry has it.
    pub(crate) fn id_of(&self, key: &str) -> Option<u32> {
        self.ids.get(key).copied()
    }

    /// Adds attribute `key` = `value` to row `row`.
    pub(crate) fn push(&mut self, row: u32, key: &str, value: Made<'_>) {
        let position = self.rows.len() - self.row_start;
        let id = self.key_id(key, position);
        self.rows.push(row);
        self.keys.push(id);
        self.yields.push(self.yielding);
        let (ty, int, double, boolean, text, cbor): (u8, i64, f64, bool, &str, &[u8]) = match value
        {
            Made::Str(s) => (value_type::STR, 0, 0.0, false, s, &[]),
            Made::Int(i) => (value_type::INT, i, 0.0, false, "", &[]),
            Made::Double(d) => (value_type::DOUBLE, 0, d, false, "", &[]),
            Made::Bool(b) => (value_type::BOOL, 0, 0.0, b, "", &[]),
            Made::Map(cbor) => (value_type::MAP, 0, 0.0, false, "", cbor),
            Made::Slice(cbor) => (value_type::SLICE, 0, 0.0, false, "", cbor),
        };
        self.types.push(ty);
        self.ints.push(int);
        self.doubles.push(double);
        self.bools.push(boolean);
        self.text.push(text.as_bytes());
        self.cbor.push(cbor);
    }

    /// The entries `keep` selects (all when None) as rows of attribute table `kind`, whose
    /// parent of an entry of row `r` is `ids[r]`.
    pub(crate) fn into_table(
        mut self,
        kind: PayloadType,
        ids: &UInt32Array,
        keep: Option<&[bool]>,
    ) -> Result<RecordBatch> {
        let chosen: Vec<usize> = match keep {
            Some(keep) => (0..self.len()).filter(|i| keep[*i]).collect(),
            None => (0..self.len()).collect(),
        };
        let n = chosen.len();
        // Every entry chosen: the vectors become the columns as they are.
        let all = n == self.len();
        let parent: ArrayRef = match kind.attrs_parent_is_u16() == Some(true) {
            true => Arc::new(UInt16Array::from_iter_values(
                chosen
                    .iter()
                    .map(|i| ids.value(self.rows[*i] as usize) as u16),
            )),
            false => Arc::new(UInt32Array::from_iter_values(
                chosen.iter().map(|i| ids.value(self.rows[*i] as usize)),
            )),
        };
        let key = self.key_column(&chosen)?;
        let types = UInt8Array::from(pick(std::mem::take(&mut self.types), &chosen, all));
        let valid = |of: &[u8]| -> Option<NullBuffer> {
            let types = types.values();
            let bits = BooleanBuffer::collect_bool(n, |j| of.contains(&types[j]));
            Some(NullBuffer::new(bits))
        };
        let (offsets, bytes) = std::mem::take(&mut self.text).into_chosen(&chosen, all);
        let strings = StringArray::try_new(offsets, bytes, valid(&[value_type::STR]))
            .map_err(|e| PipelineError::arrow("building made string values", e))?;
        let (offsets, bytes) = std::mem::take(&mut self.cbor).into_chosen(&chosen, all);
        let ser =
            BinaryArray::try_new(offsets, bytes, valid(&[value_type::MAP, value_type::SLICE]))
                .map_err(|e| PipelineError::arrow("building made map values", e))?;
        let ints = Int64Array::new(
            pick(std::mem::take(&mut self.ints), &chosen, all).into(),
            valid(&[value_type::INT]),
        );
        let doubles = Float64Array::new(
            pick(std::mem::take(&mut self.doubles), &chosen, all).into(),
            valid(&[value_type::DOUBLE]),
        );
        let bools = BooleanArray::new(
            BooleanBuffer::collect_bool(n, |j| self.bools[chosen[j]]),
            valid(&[value_type::BOOL]),
        );
        let schema = canonical_schema(kind);
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
        let mut fields = Vec::with_capacity(schema.fields().len());
        for field in schema.fields() {
            let column: ArrayRef = match field.name().as_str() {
                consts::PARENT_ID => Arc::clone(&parent),
                consts::KEY => Arc::clone(&key),
                consts::TYPE => Arc::new(types.clone()),
                consts::STR => Arc::new(strings.clone()),
                consts::INT => Arc::new(ints.clone()),
                consts::DOUBLE => Arc::new(doubles.clone()),
                consts::BOOL => Arc::new(bools.clone()),
                consts::SER => Arc::new(ser.clone()),
                _ => new_null_array(field.data_type(), n),
            };
            fields.push(arrow::datatypes::Field::new(
                field.name(),
                column.data_type().clone(),
                field.is_nullable(),
            ));
            columns.push(column);
        }
        RecordBatch::try_new(Arc::new(arrow::datatypes::Schema::new(fields)), columns)
            .map_err(|e| PipelineError::arrow("building made attributes", e))
    }

    /// The keys of `chosen`: dictionary-encoded by key id (plain when there are more than
    /// 65,536 keys).
    fn key_column(&self, chosen: &[usize]) -> Result<ArrayRef> {
        let names = StringArray::from_iter_values(self.names.iter().map(|n| &**n));
        if self.names.len() <= usize::from(u16::MAX) + 1 {
            let keys = UInt16Array::from_iter_values(chosen.iter().map(|i| self.keys[*i] as u16));
            let dict = DictionaryArray::<UInt16Type>::try_new(keys, Arc::new(names))
                .map_err(|e| PipelineError::arrow("building made keys", e))?;
            return Ok(Arc::new(dict));
        }
        Ok(Arc::new(StringArray::from_iter_values(
            chosen.iter().map(|i| &*self.names[self.keys[*i] as usize]),
        )))
    }

    /// The value type of entry `i`.
    pub(crate) fn type_of(&self, i: usize) -> u8 {
        self.types[i]
    }

    /// The value of entry `i`.
    pub(crate) fn value(&self, i: usize) -> Made<'_> {
        match self.types[i] {
            value_type::INT => Made::Int(self.ints[i]),
            value_type::DOUBLE => Made::Double(self.doubles[i]),
            value_type::BOOL => Made::Bool(self.bools[i]),
            value_type::MAP => Made::Map(self.cbor.get(i)),
            value_type::SLICE => Made::Slice(self.cbor.get(i)),
            // Strings were pushed from `&str`.
            _ => Made::Str(std::str::from_utf8(self.text.get(i)).unwrap_or_default()),
        }
    }
}

/// Variable-length values of the entries: their bytes one after the other, and where each
/// starts.
struct Arena {
    /// One more than the entries: the first is 0.
    offsets: Vec<i32>,
    bytes: Vec<u8>,
}

impl Default for Arena {
    fn default() -> Self {
        Arena {
            offsets: vec![0],
            bytes: Vec::new(),
        }
    }
}

impl Arena {
    fn push(&mut self, value: &[u8]) {
        self.bytes.extend_from_slice(value);
        self.offsets.push(self.bytes.len() as i32);
    }

    /// Keeps the first `n` values.
    fn truncate(&mut self, n: usize) {
        if self.offsets.len() > n + 1 {
            self.offsets.truncate(n + 1);
            self.bytes.truncate(self.offsets[n] as usize);
        }
    }

    fn get(&self, i: usize) -> &[u8] {
        &self.bytes[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }

    /// The offsets and bytes of the values `chosen` (`all`: every value, moved as it is).
    fn into_chosen(
        self,
        chosen: &[usize],
        all: bool,
    ) -> (OffsetBuffer<i32>, arrow::buffer::Buffer) {
        if all {
            return (
                OffsetBuffer::new(ScalarBuffer::from(self.offsets)),
                arrow::buffer::Buffer::from_vec(self.bytes),
            );
        }
        let mut offsets = Vec::with_capacity(chosen.len() + 1);
        let mut bytes = Vec::new();
        offsets.push(0);
        for &i in chosen {
            bytes.extend_from_slice(self.get(i));
            offsets.push(bytes.len() as i32);
        }
        (
            OffsetBuffer::new(ScalarBuffer::from(offsets)),
            arrow::buffer::Buffer::from_vec(bytes),
        )
    }
}

/// The values at `chosen` (`all`: every value, moved as it is).
fn pick<T: Copy>(values: Vec<T>, chosen: &[usize], all: bool) -> Vec<T> {
    match all {
        true => values,
        false => chosen.iter().map(|i| values[*i]).collect(),
    }
}
