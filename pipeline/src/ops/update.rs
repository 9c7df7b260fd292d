//! `UPDATE t SET target = value, ... [WHERE p]`: computed columns zipped with the old values,
//! attribute upserts, and metric-level or resource/scope changes that split what is shared with
//! rows the statement does not match.

use arrow::array::ArrayRef;
use penstock_dialect::model::{AttrScope, Table};
use penstock_dialect::{self as dialect, ResolvedExpr, SetStep, SetTarget, Step};
use penstock_engine::OtapBatch;

use super::condition::{compile_filter, selected};
use super::operator::{Operator, RunContext};
use crate::columns;
use crate::error::Result;
use crate::explain::describe_expr;
use crate::expr::{CompiledExpr, compile, compile_into};
use crate::json::typed_parts;
use crate::kernels::assign::{set_attr, set_field, set_metric_field};
use crate::parse::CompiledMerge;
use crate::rows::{Rows, spaces};
use crate::session::LazySession;

/// Writes computed values into the rows its condition matches.
pub(crate) struct UpdateOp {
    filter: Option<CompiledExpr>,
    sets: Vec<(SetTarget, SetValue)>,
}

/// A value of an assignment, planned.
enum SetValue {
    /// One value per row.
    Expr(CompiledExpr),
    /// Attributes made out of text, merged into a map.
    Merge(CompiledMerge),
}

impl SetValue {
    /// The values it reads before anything is written: one array per expression.
    fn evaluate(&self, rows: &Rows<'_>) -> Result<Vec<ArrayRef>> {
        match self {
            SetValue::Expr(e) => Ok(vec![e.evaluate(rows)?]),
            SetValue::Merge(m) => m.inputs().map(|e| e.evaluate(rows)).collect(),
        }
    }
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
            let value = match (&a.target, &a.value) {
                (_, dialect::SetValue::Merge(merge)) => {
                    SetValue::Merge(CompiledMerge::compile(session, merge, origin)?)
                }
                (SetTarget::Field(field), dialect::SetValue::Expr(value)) => {
                    let target = crate::types::data_type(field.ty);
                    SetValue::Expr(session.plan(&value.expr, |state| {
                        compile_into(state, value, origin, Some((&target, field.name)))
                    })?)
                }
                (_, dialect::SetValue::Expr(value)) => SetValue::Expr(
                    session.plan(&value.expr, |state| compile(state, value, origin))?,
                ),
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
            let values: Vec<Vec<ArrayRef>> = self
                .sets
                .iter()
                .map(|(_, v)| v.evaluate(&rows))
                .collect::<Result<_>>()?;
            drop(rows);
            for ((target, value), mut values) in self.sets.iter_mut().zip(values) {
                batch = match (target, value) {
                    (SetTarget::Attrs { scope }, SetValue::Merge(merge)) => {
                        merge.write(batch, space, *scope, &mask, &values)?
                    }
                    (SetTarget::Field(field), _) => {
                        let values = values.swap_remove(0);
                        let column = columns::lookup(table, field.name);
                        match column {
                            Some(c) if c.metric_level => {
                                set_metric_field(&batch, space, &[field.name], &mask, &values)?
                            }
                            Some(c) => set_field(&batch, space, c.path, &mask, &values)?,
                            None => set_field(&batch, space, &[field.name], &mask, &values)?,
                        }
                    }
                    (SetTarget::Attr { scope, key }, _) => {
                        // JSON values are written as the type of each.
                        let values = values.swap_remove(0);
                        let mut written = batch;
                        for (mask, values) in typed_parts(&mask, &values)? {
                            written = set_attr(&written, space, *scope, key, &mask, &values)?;
                        }
                        written
                    }
                    (SetTarget::Attrs { .. }, SetValue::Expr(e)) => {
                        return Err(crate::error::PipelineError::Execute(format!(
                            "`{}` is not a merge of attributes",
                            e.sql
                        )));
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
            match value {
                SetValue::Expr(value) => line(describe_expr(table, "  value", value)),
                SetValue::Merge(merge) => {
                    for text in merge.describe() {
                        line(text);
                    }
                }
            }
        }
    }
}

fn describe_target(target: &SetTarget) -> String {
    match target {
        SetTarget::Field(f) => format!("set {} [computed column, zip with old values]", f.name),
        SetTarget::Attrs { scope } => format!(
            "set {} [attributes made out of text, merged]",
            scope.map_name()
        ),
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
