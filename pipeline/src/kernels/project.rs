//! Narrowing a routed copy to the columns and attributes a `SELECT` lists.

use std::collections::HashMap;

use arrow::array::RecordBatch;
use penstock_dialect::model::{AttrScope, ColumnRef, Table};

use crate::error::{PipelineError, Result};
use crate::kernels::attrs::drop_keys_except;
use crate::rows::{attrs_of, spaces};
use penstock_engine::OtapBatch;
use penstock_engine::schema::PayloadType;
use penstock_engine::schema::consts;

/// Columns a projection never removes: ids and the envelope.
const STRUCTURAL: &[&str] = &[
    consts::ID,
    consts::PARENT_ID,
    consts::RESOURCE,
    consts::SCOPE,
    consts::SCHEMA_URL,
];

/// `batch` with only the listed fields (of logs and spans) and the listed attributes.
pub(crate) fn project(batch: &OtapBatch, table: Table, columns: &[ColumnRef]) -> Result<OtapBatch> {
    let mut out = batch.clone();
    let mut keys: HashMap<AttrScope, Vec<String>> = HashMap::new();
    for c in columns {
        if let ColumnRef::Attr { scope, key, .. } = c {
            keys.entry(*scope).or_default().push(key.clone());
        }
    }
    for space in spaces(batch, table) {
        for scope in [AttrScope::Record, AttrScope::Resource, AttrScope::Scope] {
            let kind = match scope {
                AttrScope::Record => attrs_of(space),
                AttrScope::Resource => PayloadType::ResourceAttrs,
                AttrScope::Scope => PayloadType::ScopeAttrs,
            };
            let listed = keys.get(&scope).map(Vec::as_slice).unwrap_or(&[]);
            if let Some(t) = out.get(kind) {
                let narrowed = drop_keys_except(t, listed)?;
                out.set(kind, narrowed)?;
            }
        }
        if matches!(table, Table::Logs | Table::Spans) {
            let Some(root) = out.get(space) else { continue };
            let keep: Vec<&str> = columns
                .iter()
                .flat_map(|c| match c {
                    ColumnRef::Field(f) => crate::columns::top_level(table, f.name),
                    _ => Vec::new(),
                })
                .collect();
            let narrowed = keep_columns(root, |name| {
                STRUCTURAL.contains(&name) || keep.contains(&name)
            })?;
            out.set(space, narrowed)?;
        }
    }
    Ok(out)
}

fn keep_columns(table: &RecordBatch, keep: impl Fn(&str) -> bool) -> Result<RecordBatch> {
    let schema = table.schema();
    let indices: Vec<usize> = schema
        .fields()
        .iter()
        .enumerate()
        .filter(|(_, f)| keep(f.name()))
        .map(|(i, _)| i)
        .collect();
    table
        .project(&indices)
        .map_err(|e| PipelineError::arrow("narrowing columns", e))
}
