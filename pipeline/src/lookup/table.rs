//! A loaded lookup table: its rows, and per column looked up by, a hash index from the column's
//! values (as text) to their rows. Keys compare as text: an int key `200` finds the row whose key
//! reads `200`, whatever type either side has.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use ahash::RandomState;
use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, StringArray, UInt32Array};
use arrow::compute::cast;
use arrow::datatypes::{DataType, UInt8Type, UInt16Type, UInt32Type};
use penstock_dialect::LookupTable;
use penstock_dialect::options::Options;

/// The rows of one column's values: value (as text) to row.
#[derive(Debug)]
pub(crate) struct KeyIndex {
    rows: HashMap<Box<str>, u32, RandomState>,
}

impl KeyIndex {
    /// The row whose key reads `key`.
    fn row(&self, key: &str) -> Option<u32> {
        self.rows.get(key).copied()
    }

    /// For each of `keys`, the row its value finds (null when none does, or the key is null).
    pub(crate) fn probe(&self, keys: &ArrayRef) -> Result<UInt32Array, String> {
        match keys.data_type() {
            DataType::Dictionary(k, _) => {
                let (values, indexes): (&ArrayRef, Vec<Option<usize>>) = match k.as_ref() {
                    DataType::UInt8 => {
                        let d = keys.as_dictionary::<UInt8Type>();
                        (
                            d.values(),
                            d.keys().iter().map(|k| k.map(usize::from)).collect(),
                        )
                    }
                    DataType::UInt16 => {
                        let d = keys.as_dictionary::<UInt16Type>();
                        (
                            d.values(),
                            d.keys().iter().map(|k| k.map(usize::from)).collect(),
                        )
                    }
                    DataType::UInt32 => {
                        let d = keys.as_dictionary::<UInt32Type>();
                        (
                            d.values(),
                            d.keys().iter().map(|k| k.map(|k| k as usize)).collect(),
                        )
                    }
                    _ => {
                        let plain = cast(keys, &DataType::Utf8).map_err(|e| e.to_string())?;
                        return self.probe(&plain);
                    }
                };
                // Each distinct value is looked up once.
                let found = self.probe(values)?;
                Ok(indexes
                    .into_iter()
                    .map(|i| i.and_then(|i| found.is_valid(i).then(|| found.value(i))))
                    .collect())
            }
            DataType::Utf8 => Ok(self.probe_strings(keys.as_string::<i32>())),
            _ => {
                let text = cast(keys, &DataType::Utf8).map_err(|e| e.to_string())?;
                Ok(self.probe_strings(text.as_string::<i32>()))
            }
        }
    }

    fn probe_strings(&self, keys: &StringArray) -> UInt32Array {
        keys.iter().map(|k| k.and_then(|k| self.row(k))).collect()
    }
}

/// A lookup table, as loaded from its file.
#[derive(Debug)]
pub struct LoadedTable {
    name: String,
    /// The options it was read with.
    options: Options,
    path: PathBuf,
    batch: RecordBatch,
    /// The column rows are found by unless a statement names another.
    key: usize,
    /// Indexes of the columns looked up by, made on first use.
    indexes: Mutex<HashMap<usize, Arc<KeyIndex>>>,
}

impl LoadedTable {
    /// The table `definition` defines, of `batch` (read from `path`), found by its column
    /// `key` (the first when the definition names none).
    pub(crate) fn new(
        definition: &LookupTable,
        path: &Path,
        batch: RecordBatch,
    ) -> Result<LoadedTable, String> {
        let key = match definition.options.str("key") {
            Some(column) => batch.schema().index_of(column).map_err(|_| {
                format!(
                    "key '{column}' is not a column of '{}'; its columns: {}",
                    path.display(),
                    column_names(&batch)
                )
            })?,
            None => 0,
        };
        let table = LoadedTable {
            name: definition.name.clone(),
            options: definition.options.clone(),
            path: path.to_path_buf(),
            batch,
            key,
            indexes: Mutex::new(HashMap::new()),
        };
        // The key's index is made now: a file whose key repeats is refused when it is read.
        table.index(key)?;
        Ok(table)
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The options it was read with.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// The file it was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its rows.
    pub fn batch(&self) -> &RecordBatch {
        &self.batch
    }

    /// The name of the column rows are found by by default.
    pub fn key_column(&self) -> String {
        self.batch.schema().field(self.key).name().clone()
    }

    /// The position of column `name`, or why there is none.
    pub(crate) fn column(&self, name: &str) -> Result<usize, String> {
        self.batch.schema().index_of(name).map_err(|_| {
            format!(
                "lookup table '{}' has no column '{name}'; its columns: {}",
                self.name,
                column_names(&self.batch)
            )
        })
    }

    /// The index of column `column` (made now if it was not): refused when a value repeats.
    pub(crate) fn index(&self, column: usize) -> Result<Arc<KeyIndex>, String> {
        let mut indexes = self.indexes.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(index) = indexes.get(&column) {
            return Ok(Arc::clone(index));
        }
        let values = cast(self.batch.column(column), &DataType::Utf8).map_err(|e| e.to_string())?;
        let values = values.as_string::<i32>();
        let mut rows: HashMap<Box<str>, u32, RandomState> =
            HashMap::with_capacity_and_hasher(values.len(), RandomState::new());
        for (row, value) in values.iter().enumerate() {
            let Some(value) = value else { continue };
            if let Some(first) = rows.insert(value.into(), row as u32) {
                return Err(format!(
                    "column '{}' of '{}' has '{value}' twice (rows {} and {}): rows are found by a column whose values are unique",
                    self.batch.schema().field(column).name(),
                    self.path.display(),
                    first + 1,
                    row + 1
                ));
            }
        }
        let index = Arc::new(KeyIndex { rows });
        indexes.insert(column, Arc::clone(&index));
        Ok(index)
    }

    /// Column `column` at `rows` (null where a row is null).
    pub(crate) fn take(&self, column: usize, rows: &UInt32Array) -> Result<ArrayRef, String> {
        arrow::compute::take(self.batch.column(column), rows, None).map_err(|e| e.to_string())
    }
}

fn column_names(batch: &RecordBatch) -> String {
    let names: Vec<&str> = batch
        .schema_ref()
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect();
    names.join(", ")
}
