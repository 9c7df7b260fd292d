//! Reading a lookup table's file into one record batch: CSV with a header, JSON lines or
//! Parquet, bounded in rows and bytes (the file's size is checked before it is read, the table's
//! size in memory after).

use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::compute::concat_batches;
use arrow::datatypes::SchemaRef;
use bytes::Bytes;
use penstock_dialect::LookupTable;

/// Rows a table holds at most unless its `max_rows` says otherwise.
pub const DEFAULT_MAX_ROWS: u64 = 1_000_000;

/// Bytes a table takes at most (its file, and in memory) unless its `max_bytes` says otherwise.
pub const DEFAULT_MAX_BYTES: u64 = 64 << 20;

/// How a file is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Csv,
    JsonLines,
    Parquet,
}

impl Format {
    /// The format `format` names, else the one of `path`'s extension.
    fn of(format: Option<&str>, path: &Path) -> Result<Format, String> {
        let named = match format {
            Some(f) => f.to_string(),
            None => path
                .extension()
                .and_then(|e| e.to_str())
                .unwrap_or_default()
                .to_lowercase(),
        };
        match named.as_str() {
            "csv" => Ok(Format::Csv),
            "jsonl" | "json" | "ndjson" => Ok(Format::JsonLines),
            "parquet" | "pq" => Ok(Format::Parquet),
            _ => Err(format!(
                "cannot tell how to read '{}' by its extension: say format = 'csv', 'jsonl' or 'parquet'",
                path.display()
            )),
        }
    }
}

/// The file of `table`: as written when it is absolute or exists from the working directory,
/// else beside the pipeline file that defines the table.
pub fn resolve(table: &LookupTable) -> PathBuf {
    let direct = PathBuf::from(table.path());
    if direct.is_absolute() || direct.exists() {
        return direct;
    }
    match Path::new(&table.origin.file).parent() {
        Some(dir) if dir.join(&direct).exists() => dir.join(direct),
        _ => direct,
    }
}

/// The rows of `table`'s file, within its bounds; the error says why not (without the
/// table's name).
pub(super) fn read(table: &LookupTable, path: &Path) -> Result<RecordBatch, String> {
    let max_rows = table.options.count("max_rows").unwrap_or(DEFAULT_MAX_ROWS);
    let max_bytes = table
        .options
        .count("max_bytes")
        .unwrap_or(DEFAULT_MAX_BYTES);
    let format = Format::of(table.options.str("format"), path)?;
    let size = std::fs::metadata(path)
        .map_err(|e| format!("cannot read '{}': {e}", path.display()))?
        .len();
    if size > max_bytes {
        return Err(format!(
            "'{}' is {size} bytes, more than max_bytes ({max_bytes})",
            path.display()
        ));
    }
    let data = std::fs::read(path).map_err(|e| format!("cannot read '{}': {e}", path.display()))?;
    let batches = match format {
        Format::Csv => csv(data),
        Format::JsonLines => json_lines(data),
        Format::Parquet => parquet(data, max_rows),
    }
    .map_err(|e| format!("cannot read '{}' as {format:?}: {e}", path.display()))?;
    let (schema, batches) = batches;
    if schema.fields().is_empty() {
        return Err(format!("'{}' has no columns", path.display()));
    }
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    if rows as u64 > max_rows {
        return Err(format!(
            "'{}' has {rows} rows, more than max_rows ({max_rows})",
            path.display()
        ));
    }
    let batch = concat_batches(&schema, &batches).map_err(|e| e.to_string())?;
    let memory = batch.get_array_memory_size() as u64;
    if memory > max_bytes {
        return Err(format!(
            "'{}' takes {memory} bytes in memory, more than max_bytes ({max_bytes})",
            path.display()
        ));
    }
    Ok(batch)
}

type Batches = (SchemaRef, Vec<RecordBatch>);

fn csv(data: Vec<u8>) -> Result<Batches, String> {
    let format = arrow::csv::reader::Format::default().with_header(true);
    let (schema, _) = format
        .infer_schema(Cursor::new(&data), None)
        .map_err(|e| e.to_string())?;
    let schema = Arc::new(schema);
    let reader = arrow::csv::ReaderBuilder::new(Arc::clone(&schema))
        .with_format(format)
        .build(Cursor::new(data))
        .map_err(|e| e.to_string())?;
    Ok((schema, all(reader)?))
}

fn json_lines(data: Vec<u8>) -> Result<Batches, String> {
    let (schema, _) =
        arrow::json::reader::infer_json_schema_from_seekable(Cursor::new(&data), None)
            .map_err(|e| e.to_string())?;
    let schema = Arc::new(schema);
    let reader = arrow::json::ReaderBuilder::new(Arc::clone(&schema))
        .build(Cursor::new(data))
        .map_err(|e| e.to_string())?;
    Ok((schema, all(reader)?))
}

fn parquet(data: Vec<u8>, max_rows: u64) -> Result<Batches, String> {
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let builder =
        ParquetRecordBatchReaderBuilder::try_new(Bytes::from(data)).map_err(|e| e.to_string())?;
    let rows = builder.metadata().file_metadata().num_rows();
    if u64::try_from(rows).unwrap_or(u64::MAX) > max_rows {
        return Err(format!("{rows} rows, more than max_rows ({max_rows})"));
    }
    let schema = Arc::clone(builder.schema());
    let reader = builder.build().map_err(|e| e.to_string())?;
    Ok((schema, all(reader)?))
}

/// Every batch `reader` reads, or the first error.
fn all(
    reader: impl Iterator<Item = Result<RecordBatch, arrow::error::ArrowError>>,
) -> Result<Vec<RecordBatch>, String> {
    reader
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())
}
