//! `UPDATE t SET target = value, ... [WHERE p]`: computed columns zipped with the old values,
//! attribute upserts, and metric-level or resource/scope changes that split what is shared with
//! rows the statement does not match.

use arrow::array::ArrayRef;
use penstock_dialect::model::{AttrScope, Table};
use penstock_dialect::{ResolvedExpr, SetStep, SetTarget, Step};
use penstock_engine::OtapBatch;

use super::condition::{compile_filter, selected};
use super::operator::{Operator, RunContext};
use crate::columns;
use crate::error::Result;
use crate::explain::describe_expr;
use crate::expr::{CompiledExpr, compile, compile_into};
use crate::json::typed_parts;
use crate::kernels::assign::{set_attr, set_field, set_metric_field};
use crate::rows::{Rows, spaces};
use crate::session::LazySession;

/// Writes computed values into the rows its condition matches.
pub(crate) struct UpdateOp {
    filter: Option<CompiledExpr>,
    sets: Vec<(SetTarget, CompiledExpr)>,
}

impl UpdateOp {
    /// Plans the condition and every assigned value (converted to the column's type).
    pub(crate) fn compile(
        session: &LazySession,
        step: &Step,
        assignments: &[SetStep],
        filter: &Option<ResolvedExpr>,
    ) -> Result<UpdateOp> {
        let filter = compile_filter(session, step, filter)?;
        let origin = &step.origin;
        let mut sets = Vec::new();
        for a in assignments {
            let value = match &a.target {
                SetTarget::Field(field) => {
                    let target = crate::types::data_type(field.ty);
                    session.plan(&a.value.expr, |state| {
                        compile_into(state, &a.value, origin, Some((&target, field.name)))
                    })?
                }
                SetTarget::Attr { .. } => {
                    session.plan(&a.value.expr, |state| compile(state, &a.value, origin))?
                }
            };
            sets.push((a.target.clone(), value));
        }
        Ok(UpdateOp { filter, sets })
    }
}

impl Operator for UpdateOp {
    fn run(&mut self, mut batch: OtapBatch, cx: &mut RunContext<'_>) -> Result<OtapBatch> {
        let table = cx.table;
        for space in spaces(&batch, table) {
            let rows = Rows::new(&batch, space)?;
            let mask = selected(self.filter.as_ref(), &rows)?;
            if mask.true_count() == 0 {
                continue;
            }
            let values: Vec<ArrayRef> = self
                .sets
                .iter()
                .map(|(_, e)| e.evaluate(&rows))
                .collect::<Result<_>>()?;
            drop(rows);
            for ((target, _), values) in self.sets.iter().zip(values) {
                batch = match target {
                    SetTarget::Field(field) => {
                        let column = columns::lookup(table, field.name);
                        match column {
                            Some(c) if c.metric_level => {
                                set_metric_field(&batch, space, &[field.name], &mask, &values)?
                            }
                            Some(c) => set_field(&batch, space, c.path, &mask, &values)?,
                            None => set_field(&batch, space, &[field.name], &mask, &values)?,
                        }
                    }
                    SetTarget::Attr { scope, key } => {
                        // JSON values are written as the type of each.
                        let mut written = batch;
                        for (mask, values) in typed_parts(&mask, &values)? {
                            written = set_attr(&written, space, *scope, key, &mask, &values)?;
                        }
                        written
                    }
                };
            }
        }
        cx.stats.rows_out += cx.rows_in;
        Ok(batch)
    }

    fn explain(&self, table: Table, line: &mut dyn FnMut(String)) {
        if let Some(f) = &self.filter {
            line(describe_expr(table, "where", f));
        }
        for (target, value) in &self.sets {
            line(describe_target(target));
            line(describe_expr(table, "  value", value));
        }
    }
}

fn describe_target(target: &SetTarget) -> String {
    match target {
        SetTarget::Field(f) => format!("set {} [computed column, zip with old values]", f.name),
        SetTarget::Attr {
            scope: AttrScope::Record,
            key,
        } => format!("set attributes['{key}'] [attribute upsert]"),
        SetTarget::Attr { scope, key } => format!(
            "set {}['{key}'] [attribute upsert; splits {} shared with unmatched rows]",
            scope.map_name(),
            if *scope == AttrScope::Resource {
                "a resource"
            } else {
                "a scope"
            }
        ),
    }
}
