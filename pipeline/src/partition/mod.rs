//! Splitting a batch by the partition of a key, for sinks whose backend is partitioned
//! (Kafka): every record with the same key lands in the same part, so a consumer of one
//! partition sees all the records of its keys.
//!
//! Partitions are chosen as Kafka's default partitioner chooses them for keyed records
//! (murmur2 of the key's bytes, sign bit cleared, modulo the partition count), so records
//! keyed here and records keyed by a Java or Go producer with the same key agree.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, StringArray, StringBuilder};
use arrow::datatypes::DataType;
use penstock_dialect::model::{AttrType, ColumnRef, Table};
use penstock_dialect::options::{KEY_TABLES, PartitionKey, resolve_key};
use penstock_dialect::{Location, Origin};
use penstock_engine::{OtapBatch, Signal};

use crate::error::{PipelineError, Result};
use crate::expr::{CompiledExpr, compile};
use crate::kernels::filter::keep_rows;
use crate::rows::Rows;
use crate::view::column;

/// Kafka's murmur2 hash (the 32-bit MurmurHash2 with seed `0x9747b28c`, as its Java client
/// computes it).
pub fn murmur2(data: &[u8]) -> i32 {
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let length = data.len() as u32;
    let mut h: u32 = 0x9747_b28c ^ length;
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition of a record keyed `key` among `partitions` (at least 1), as Kafka's default
/// partitioner picks it.
pub fn partition_of(key: &[u8], partitions: u32) -> u32 {
    (murmur2(key) as u32 & 0x7fff_ffff) % partitions.max(1)
}

/// A sink's key, ready to evaluate: expressions are planned once, per table they read.
pub struct KeyPlan {
    key: PartitionKey,
    logs: Option<CompiledExpr>,
    spans: Option<CompiledExpr>,
}

impl KeyPlan {
    /// Plans `key`. An expression is planned on each table it reads the columns of (logs,
    /// spans, or both); records of the other signals have no key.
    pub fn compile(key: &PartitionKey) -> Result<KeyPlan> {
        let mut plan = KeyPlan {
            key: key.clone(),
            logs: None,
            spans: None,
        };
        if let PartitionKey::Expression(text) = key {
            let state = crate::session::session();
            let origin = Origin {
                file: "key".to_string(),
                location: Location::default(),
            };
            for table in KEY_TABLES {
                let Ok(resolved) = resolve_key(text, table) else {
                    continue;
                };
                let compiled = compile(&state, &resolved, &origin)?;
                match table {
                    Table::Logs => plan.logs = Some(compiled),
                    _ => plan.spans = Some(compiled),
                }
            }
            if plan.logs.is_none() && plan.spans.is_none() {
                return Err(PipelineError::Execute(format!(
                    "the key '{text}' reads neither logs nor spans"
                )));
            }
        }
        Ok(plan)
    }
}

/// The records of a batch that go to one partition.
#[derive(Debug)]
pub struct Part {
    /// The partition; `None` for records without a key (any partition will do).
    pub partition: Option<u32>,
    /// The key, when every record of the part has the same one.
    pub key: Option<Vec<u8>>,
    /// The records, with their resources, scopes and children.
    pub batch: OtapBatch,
}

/// Splits `batch` by the partition of each record's `key` among `partitions`. Records whose
/// key is missing (no such attribute; no trace id, as in metrics) form one part without a
/// partition. A batch whose records all fall in one part is returned whole.
pub fn split_by_key(batch: &OtapBatch, key: &KeyPlan, partitions: u32) -> Result<Vec<Part>> {
    let space = batch.signal().root();
    if batch.get(space).is_none_or(|t| t.num_rows() == 0) {
        return Ok(Vec::new());
    }
    let Some(keys) = keys(batch, key)? else {
        return Ok(vec![Part {
            partition: None,
            key: None,
            batch: batch.clone(),
        }]);
    };
    // Each part: its partition, and its key while all of its records share one.
    let mut parts: Vec<(Option<u32>, Option<Option<&str>>)> = Vec::new();
    // The part of each partition (the last entry: records without a key), and of each record.
    let mut part_of_partition = vec![usize::MAX; partitions.max(1) as usize + 1];
    let mut part_of_row = Vec::with_capacity(keys.len());
    for value in keys.iter() {
        let partition = value.map(|k| partition_of(k.as_bytes(), partitions));
        let slot = partition.map_or(part_of_partition.len() - 1, |p| p as usize);
        if part_of_partition[slot] == usize::MAX {
            part_of_partition[slot] = parts.len();
            parts.push((partition, Some(value)));
        }
        let part = &mut parts[part_of_partition[slot]];
        if part.1.is_some_and(|k| k != value) {
            part.1 = None;
        }
        part_of_row.push(part_of_partition[slot]);
    }
    let single = parts.len() == 1;
    parts
        .into_iter()
        .enumerate()
        .map(|(at, (partition, shared))| {
            let batch = if single {
                batch.clone()
            } else {
                let rows: BooleanArray = part_of_row.iter().map(|p| Some(*p == at)).collect();
                keep_rows(batch, space, &rows)?
            };
            Ok(Part {
                partition,
                key: shared.flatten().map(|k| k.as_bytes().to_vec()),
                batch,
            })
        })
        .collect()
}

/// `batch` cut in two halves of its records (with what they need), or `None` when it holds
/// fewer than two records.
pub fn halve(batch: &OtapBatch) -> Result<Option<(OtapBatch, OtapBatch)>> {
    let space = batch.signal().root();
    let rows = batch.get(space).map_or(0, |t| t.num_rows());
    if rows < 2 {
        return Ok(None);
    }
    let first: BooleanArray = (0..rows).map(|r| Some(r < rows / 2)).collect();
    let second: BooleanArray = (0..rows).map(|r| Some(r >= rows / 2)).collect();
    Ok(Some((
        keep_rows(batch, space, &first)?,
        keep_rows(batch, space, &second)?,
    )))
}

/// Each root record's key as text (trace ids in lower-case hex; null where it has none), or
/// `None` when no record can have one (an expression over another signal's columns, trace ids
/// of metrics).
fn keys(batch: &OtapBatch, plan: &KeyPlan) -> Result<Option<StringArray>> {
    let rows = Rows::new(batch, batch.signal().root())?;
    let values = match &plan.key {
        PartitionKey::Expression(_) => {
            let compiled = match batch.signal() {
                Signal::Logs => plan.logs.as_ref(),
                Signal::Traces => plan.spans.as_ref(),
                Signal::Metrics => None,
            };
            let Some(compiled) = compiled else {
                return Ok(None);
            };
            compiled.evaluate(&rows)?
        }
        PartitionKey::Attribute(scope, name) => column(
            &rows,
            &ColumnRef::Attr {
                scope: *scope,
                key: name.clone(),
                ty: AttrType::Str,
            },
        )?,
        PartitionKey::TraceId => {
            let Some(ids) = rows.own(&["trace_id"]) else {
                return Ok(None);
            };
            let ids = plain(ids)?;
            let mut text = StringBuilder::with_capacity(ids.len(), ids.len() * 32);
            let mut digits = String::with_capacity(32);
            for id in ids.as_fixed_size_binary() {
                match id.filter(|id| id.iter().any(|b| *b != 0)) {
                    Some(id) => {
                        digits.clear();
                        hex_into(id, &mut digits);
                        text.append_value(&digits);
                    }
                    None => text.append_null(),
                }
            }
            Arc::new(text.finish())
        }
    };
    let text = arrow::compute::cast(&values, &DataType::Utf8)
        .map_err(|e| PipelineError::arrow("reading a key as text", e))?;
    Ok(Some(text.as_string::<i32>().clone()))
}

/// A dictionary-encoded column unpacked to its values.
fn plain(array: ArrayRef) -> Result<ArrayRef> {
    match array.data_type() {
        DataType::Dictionary(_, values) => arrow::compute::cast(&array, values)
            .map_err(|e| PipelineError::arrow("unpacking trace ids", e)),
        _ => Ok(array),
    }
}

/// Appends `bytes` to `text` in lower-case hex.
fn hex_into(bytes: &[u8], text: &mut String) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        text.push(DIGITS[usize::from(b >> 4)] as char);
        text.push(DIGITS[usize::from(b & 15)] as char);
    }
}

#[cfg(test)]
mod tests;
