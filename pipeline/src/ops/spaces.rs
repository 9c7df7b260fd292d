//! The row spaces and attribute tables of a batch that a statement reads or changes.

use penstock_dialect::model::{AttrScope, Table};
use penstock_engine::OtapBatch;
use penstock_engine::schema::PayloadType;

use crate::rows::{attrs_of, spaces};

/// Rows of `table` in `batch`.
pub(crate) fn rows_of(batch: &OtapBatch, table: Table) -> u64 {
    spaces(batch, table)
        .into_iter()
        .map(|s| batch.get(s).map_or(0, |t| t.num_rows()) as u64)
        .sum()
}

/// The attribute table of `scope` for rows of `space`.
pub(crate) fn attr_table(space: PayloadType, scope: AttrScope) -> PayloadType {
    match scope {
        AttrScope::Record => attrs_of(space),
        AttrScope::Resource => PayloadType::ResourceAttrs,
        AttrScope::Scope => PayloadType::ScopeAttrs,
    }
}

/// The row spaces whose attribute tables a rename or drop touches (one for resource and
/// scope attributes, which all row spaces share).
pub(crate) fn target_spaces(batch: &OtapBatch, table: Table, scope: AttrScope) -> Vec<PayloadType> {
    let all = spaces(batch, table);
    match scope {
        AttrScope::Record => all,
        _ => all.into_iter().take(1).collect(),
    }
}
