//! `INSERT INTO sink SELECT * | columns FROM t [WHERE p]`: a copy of the matching rows (and
//! their children), narrowed to the listed columns, goes to the sink.

use penstock_dialect::model::{ColumnRef, Table};
use penstock_engine::OtapBatch;

use super::condition::selected;
use super::operator::{Operator, RunContext};
use crate::error::Result;
use crate::explain::describe_expr;
use crate::expr::CompiledExpr;
use crate::kernels::filter::keep_rows;
use crate::kernels::project;
use crate::rows::{Rows, spaces};

/// Sends matching rows to a sink.
pub(crate) struct RouteOp {
    pub(crate) sink: String,
    pub(crate) filter: Option<CompiledExpr>,
    pub(crate) projection: Option<Vec<ColumnRef>>,
}

impl Operator for RouteOp {
    fn run(&mut self, batch: OtapBatch, cx: &mut RunContext<'_>) -> Result<OtapBatch> {
        let mut copy = batch.clone();
        let mut sent = 0u64;
        cx.routing.any = true;
        for space in spaces(&batch, cx.table) {
            let rows = Rows::new(&batch, space)?;
            let len = rows.len();
            let mask = selected(self.filter.as_ref(), &rows)?;
            drop(rows);
            cx.routing.mark(space, len, &mask);
            sent += mask.true_count() as u64;
            copy = keep_rows(&copy, space, &mask)?;
        }
        cx.stats.rows_out += sent;
        if sent > 0 {
            if let Some(columns) = &self.projection {
                copy = project::project(&copy, cx.table, columns)?;
            }
            cx.out.routed.push((self.sink.clone(), copy));
        }
        Ok(batch)
    }

    fn explain(&self, table: Table, line: &mut dyn FnMut(String)) {
        if let Some(f) = &self.filter {
            line(describe_expr(table, "where", f));
        }
        line(format!(
            "copy matching rows and their children to sink {} [filter kernels]",
            self.sink
        ));
        if let Some(columns) = &self.projection {
            let names: Vec<String> = columns.iter().map(ColumnRef::column_name).collect();
            line(format!("only {}", names.join(", ")));
        }
    }
}
