//! `ALTER TABLE t DROP [RESOURCE | SCOPE] ATTRIBUTE 'k', ...`: the rows of those keys leave
//! the attribute table.

use penstock_dialect::model::{AttrScope, Table};
use penstock_engine::OtapBatch;

use super::operator::{Operator, RunContext};
use super::spaces::{attr_table, target_spaces};
use crate::error::Result;
use crate::explain::scope_table;
use crate::kernels::attrs;

/// Drops attribute keys of one scope.
pub(crate) struct DropOp {
    scope: AttrScope,
    keys: Vec<String>,
}

impl DropOp {
    pub(crate) fn new(scope: AttrScope, keys: &[String]) -> DropOp {
        DropOp {
            scope,
            keys: keys.to_vec(),
        }
    }
}

impl Operator for DropOp {
    fn run(&mut self, mut batch: OtapBatch, cx: &mut RunContext<'_>) -> Result<OtapBatch> {
        for space in target_spaces(&batch, cx.table, self.scope) {
            let kind = attr_table(space, self.scope);
            if let Some(t) = batch.get(kind) {
                let t = attrs::drop_keys(t, &self.keys)?;
                batch.set(kind, t)?;
            }
        }
        cx.stats.rows_out += cx.rows_in;
        Ok(batch)
    }

    fn explain(&self, table: Table, line: &mut dyn FnMut(String)) {
        let keys: Vec<String> = self.keys.iter().map(|k| format!("'{k}'")).collect();
        line(format!(
            "drop keys {} from {} [key match on the dictionary, row filter]",
            keys.join(", "),
            scope_table(table, self.scope)
        ));
    }
}
