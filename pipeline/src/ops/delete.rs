//! `DELETE FROM t [WHERE p]`: matching rows leave the record table (data points take their
//! children along).

use arrow::array::BooleanArray;
use arrow::buffer::BooleanBuffer;
use arrow::compute::not;
use penstock_dialect::model::Table;
use penstock_engine::OtapBatch;

use super::operator::{Operator, RunContext};
use super::spaces::rows_of;
use crate::error::{PipelineError, Result};
use crate::explain::describe_expr;
use crate::expr::CompiledExpr;
use crate::kernels::filter::keep_rows;
use crate::rows::{Rows, spaces};

/// Removes the rows its condition matches (every row without one).
pub(crate) struct DeleteOp {
    pub(crate) filter: Option<CompiledExpr>,
}

impl Operator for DeleteOp {
    fn run(&mut self, mut batch: OtapBatch, cx: &mut RunContext<'_>) -> Result<OtapBatch> {
        for space in spaces(&batch, cx.table) {
            let rows = Rows::new(&batch, space)?;
            let keep = match &self.filter {
                Some(f) => not(&f.matches(&rows)?)
                    .map_err(|e| PipelineError::arrow("negating a mask", e))?,
                None => BooleanArray::new(BooleanBuffer::new_unset(rows.len()), None),
            };
            drop(rows);
            cx.routing.keep(space, &keep);
            batch = keep_rows(&batch, space, &keep)?;
        }
        let rows_out = rows_of(&batch, cx.table);
        cx.stats.rows_out += rows_out;
        cx.stats.rows_dropped += cx.rows_in - rows_out;
        Ok(batch)
    }

    fn explain(&self, table: Table, line: &mut dyn FnMut(String)) {
        match &self.filter {
            Some(f) => line(describe_expr(table, "where", f)),
            None => line("every row".into()),
        }
        line("filter the record table (children of removed rows are left to the encoders)".into());
    }
}
