//! The key dictionary of an attribute table, read and rewritten as IPC messages: a rename of
//! attribute keys replaces the strings of the dictionary messages and leaves the record
//! batches, which hold only dictionary indices, as they came.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, RecordBatch, StringArray};
use arrow::buffer::Buffer;
use arrow::datatypes::{DataType, Field, Schema};
use arrow::ipc::reader::RecordBatchDecoder;
use arrow::ipc::writer::{DictionaryTracker, IpcDataGenerator, IpcWriteContext, IpcWriteOptions};
use arrow::ipc::{CompressionType, MetadataVersion, root_as_message};

use super::ipc::{IpcMessage, MessageKind, frame, records_meta};
use crate::schema::consts;

/// The dictionary id of the `key` column in a schema message, when that column is
/// dictionary-encoded strings.
pub(crate) fn key_dictionary(schema: &IpcMessage) -> Result<Option<i64>, String> {
    let message = schema.message()?;
    let schema = message
        .header_as_schema()
        .ok_or("a schema message without its header")?;
    let Some(fields) = schema.fields() else {
        return Ok(None);
    };
    Ok(fields
        .iter()
        .find(|f| f.name() == Some(consts::KEY))
        .and_then(|f| f.dictionary())
        .map(|d| d.id()))
}

/// The strings of a dictionary message of UTF-8 values.
pub(crate) fn read_strings(message: &IpcMessage) -> Result<StringArray, String> {
    let header = message.message()?;
    let version = header.version();
    let data = header
        .header_as_dictionary_batch()
        .and_then(|d| d.data())
        .ok_or("a dictionary message without its record batch")?;
    let schema = Arc::new(Schema::new(vec![Field::new("", DataType::Utf8, true)]));
    let body = Buffer::from(message.body());
    let none: HashMap<i64, ArrayRef> = HashMap::new();
    let records = RecordBatchDecoder::try_new(&body, data, schema, &none, &version)
        .and_then(|d| d.read_record_batch())
        .map_err(|e| format!("key dictionary: {e}"))?;
    records
        .column(0)
        .as_string_opt::<i32>()
        .cloned()
        .ok_or_else(|| "key dictionary is not UTF-8".to_string())
}

/// A dictionary message like `original` (same id, delta or not, same compression) holding
/// `values`.
pub(crate) fn write_strings(
    original: &IpcMessage,
    values: StringArray,
) -> Result<IpcMessage, String> {
    let MessageKind::Dictionary { id, delta } = original.kind else {
        return Err("not a dictionary message".into());
    };
    let header = original.message()?;
    let compression = header
        .header_as_dictionary_batch()
        .and_then(|d| d.data())
        .and_then(|d| d.compression())
        .map(|c| c.codec());
    let codec = match compression {
        None => None,
        Some(CompressionType::LZ4_FRAME) => Some(CompressionType::LZ4_FRAME),
        Some(_) => Some(CompressionType::ZSTD),
    };
    let options = IpcWriteOptions::try_new(8, false, MetadataVersion::V5)
        .and_then(|o| o.try_with_compression(codec))
        .and_then(|o| match codec {
            Some(CompressionType::ZSTD) => o.try_with_compression_level(Some(1)),
            _ => Ok(o),
        })
        .map_err(|e| format!("key dictionary: {e}"))?;
    let schema = Arc::new(Schema::new(vec![Field::new("", DataType::Utf8, true)]));
    let column: ArrayRef = Arc::new(values);
    let records = RecordBatch::try_new(schema, vec![column]).map_err(|e| e.to_string())?;
    let (_, encoded) = IpcDataGenerator::default()
        .encode(
            &records,
            &mut DictionaryTracker::new(false),
            &options,
            &mut IpcWriteContext::default(),
        )
        .map_err(|e| format!("key dictionary: {e}"))?;
    let meta = as_dictionary(&encoded.ipc_message, id, delta)?;
    Ok(frame(
        &meta,
        &encoded.arrow_data,
        MessageKind::Dictionary { id, delta },
    ))
}

/// Turns the metadata of a record batch message into that of dictionary batch `id`.
fn as_dictionary(record_batch_meta: &[u8], id: i64, delta: bool) -> Result<Vec<u8>, String> {
    let message = root_as_message(record_batch_meta).map_err(|e| e.to_string())?;
    let records = message
        .header_as_record_batch()
        .ok_or("the encoder wrote no record batch")?;
    let buffers: Vec<_> = records
        .buffers()
        .map(|b| b.iter().copied().collect())
        .unwrap_or_default();
    Ok(records_meta(
        &records,
        &buffers,
        records.compression(),
        Some((id, delta)),
        MetadataVersion::V5,
        message.bodyLength(),
    ))
}

/// Applies `renames` (in order) to one key.
pub(crate) fn renamed<'a>(key: &'a str, renames: &'a [(String, String)]) -> &'a str {
    let mut key = key;
    for (from, to) in renames {
        if key == from {
            key = to;
        }
    }
    key
}

/// Whether renaming keeps distinct keys distinct (otherwise rows with two keys would merge,
/// which only a rewrite of the rows does right).
pub(crate) fn renames_keep_distinct(keys: &[String], renames: &[(String, String)]) -> bool {
    let mut before = std::collections::HashSet::with_capacity(keys.len());
    let mut after = std::collections::HashSet::with_capacity(keys.len());
    for key in keys {
        if before.insert(key.as_str()) && !after.insert(renamed(key, renames)) {
            return false;
        }
    }
    true
}

/// The dictionary message with `renames` applied, or None when none of its strings change.
pub(crate) fn rename_message(
    message: &IpcMessage,
    values: &StringArray,
    renames: &[(String, String)],
) -> Result<Option<IpcMessage>, String> {
    let changes = values.iter().flatten().any(|v| renamed(v, renames) != v);
    if !changes {
        return Ok(None);
    }
    let values: StringArray = values
        .iter()
        .map(|v| v.map(|v| renamed(v, renames)))
        .collect();
    write_strings(message, values).map(Some)
}
