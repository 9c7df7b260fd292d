//! `ALTER TABLE t RENAME [RESOURCE | SCOPE] ATTRIBUTE 'from' TO 'to'`: a rewrite of the
//! attribute table's key dictionary.

use penstock_dialect::model::{AttrScope, Table};
use penstock_engine::OtapBatch;

use super::operator::{Operator, RunContext};
use super::spaces::{attr_table, target_spaces};
use crate::error::Result;
use crate::explain::scope_table;
use crate::kernels::attrs;

/// Renames attribute keys of one scope.
pub(crate) struct RenameOp {
    scope: AttrScope,
    renames: Vec<(String, String)>,
}

impl RenameOp {
    pub(crate) fn new(scope: AttrScope, renames: &[(String, String)]) -> RenameOp {
        RenameOp {
            scope,
            renames: renames.to_vec(),
        }
    }
}

impl Operator for RenameOp {
    fn run(&mut self, mut batch: OtapBatch, cx: &mut RunContext<'_>) -> Result<OtapBatch> {
        for space in target_spaces(&batch, cx.table, self.scope) {
            let kind = attr_table(space, self.scope);
            if let Some(t) = batch.get(kind) {
                let mut t = t.clone();
                for (from, to) in &self.renames {
                    t = attrs::rename(&t, from, to)?;
                }
                batch.set(kind, t)?;
            }
        }
        cx.stats.rows_out += cx.rows_in;
        Ok(batch)
    }

    fn explain(&self, table: Table, line: &mut dyn FnMut(String)) {
        for (from, to) in &self.renames {
            line(format!(
                "rename key '{from}' -> '{to}' in {} [key dictionary rewrite; rows move only when '{to}' already exists]",
                scope_table(table, self.scope)
            ));
        }
    }
}
