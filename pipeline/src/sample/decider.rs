//! The decision of a trace: the aggregates its `HAVING` calls, accumulated per trace as its
//! spans arrive, and the condition evaluated on them once the trace is decided.
//!
//! Each aggregate is one DataFusion `GroupsAccumulator` over every undecided trace (a group per
//! trace, numbered in order of first arrival), fed column-wise per batch. Traces are decided
//! oldest first, so deciding takes the first groups of every accumulator at once
//! (`EmitTo::First`), and the groups left are renumbered from zero.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, BooleanArray, FixedSizeBinaryArray, RecordBatch, new_empty_array,
    new_null_array,
};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, FieldRef, Schema, SchemaRef};
use datafusion::execution::context::SessionState;
use datafusion::logical_expr::type_coercion::functions::fields_with_udf;
use datafusion::logical_expr::{EmitTo, GroupsAccumulator};
use datafusion::physical_expr::aggregate::AggregateExprBuilder;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::{GroupsAccumulatorAdapter, PhysicalExpr};
use datafusion::sql::sqlparser::ast::{
    DuplicateTreatment, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, Spanned,
};
use penstock_dialect::{Decision, Origin, ResolvedExpr};

use crate::error::{PipelineError, Result};
use crate::expr::{CompiledExpr, compile, plan};
use crate::rows::Rows;

/// The name of the trace id in the condition's columns.
const TRACE_ID: &str = "trace_id";

/// One aggregate the condition calls.
struct Aggregate {
    /// The call as written.
    call: String,
    /// Its arguments (none for `count(*)`), and the types they are cast to.
    args: Vec<(CompiledExpr, DataType)>,
    accumulator: Box<dyn GroupsAccumulator>,
}

/// The compiled decision.
pub(crate) struct Decider {
    /// Which spans the aggregates read (all when None).
    filter: Option<CompiledExpr>,
    aggregates: Vec<Aggregate>,
    schema: SchemaRef,
    condition: Arc<dyn PhysicalExpr>,
    /// The subquery, for plans and errors.
    pub(crate) sql: String,
}

fn plan_error(origin: &Origin, expr: &Expr, message: String) -> PipelineError {
    PipelineError::plan_at(origin, expr.span(), message)
}

impl Decider {
    /// Plans `decision` in `state`.
    pub(crate) fn compile(
        state: &SessionState,
        decision: &Decision,
        origin: &Origin,
    ) -> Result<Decider> {
        let filter = match &decision.filter {
            Some(f) => Some(crate::ops::condition::compile_boolean(state, f, origin)?),
            None => None,
        };
        let mut fields = vec![Field::new(TRACE_ID, DataType::FixedSizeBinary(16), true)];
        let mut aggregates = Vec::new();
        for (name, call) in &decision.having.hidden {
            let (aggregate, output) = compile_aggregate(state, name, call, origin)?;
            fields.push(Field::new(name, output, true));
            aggregates.push(aggregate);
        }
        let schema = Arc::new(Schema::new(fields));
        let having = &decision.having;
        let context = format!("in HAVING `{}`", having.original);
        let (condition, data_type) = plan(state, &having.expr, &schema)
            .map_err(|f| f.into_error(origin, &having.original, &context))?;
        if !matches!(data_type, DataType::Boolean | DataType::Null) {
            return Err(plan_error(
                origin,
                &having.original,
                format!("{context}: is {data_type}, not a boolean"),
            ));
        }
        Ok(Decider {
            filter,
            aggregates,
            schema,
            condition,
            sql: decision.sql.clone(),
        })
    }

    /// What the plan shows of it.
    pub(crate) fn explain(&self, line: &mut dyn FnMut(String)) {
        line(format!("decide each trace: {}", self.sql));
        if let Some(f) = &self.filter {
            line(format!("  spans read: where {}", f.sql));
        }
        for a in &self.aggregates {
            line(format!(
                "  accumulate per trace: {} [GroupsAccumulator]",
                a.call
            ));
        }
    }

    /// Which of `rows` the aggregates read (all when it has no filter).
    pub(crate) fn reads(&self, rows: &Rows<'_>) -> Result<BooleanArray> {
        crate::ops::condition::selected(self.filter.as_ref(), rows)
    }

    /// Accumulates the rows of `rows` where `mask` holds into the groups `groups` (one per row)
    /// of `total` groups.
    pub(crate) fn add(
        &mut self,
        rows: &Rows<'_>,
        groups: &[usize],
        mask: &BooleanArray,
        total: usize,
    ) -> Result<()> {
        for aggregate in &mut self.aggregates {
            let mut values = Vec::with_capacity(aggregate.args.len().max(1));
            for (arg, ty) in &aggregate.args {
                let value = arg.evaluate(rows)?;
                let value = if value.data_type() == ty {
                    value
                } else {
                    cast(&value, ty).map_err(|e| PipelineError::arrow("deciding traces", e))?
                };
                values.push(value);
            }
            if values.is_empty() {
                // count(*): every row counts.
                let ones: ArrayRef = Arc::new(BooleanArray::new(
                    arrow::buffer::BooleanBuffer::new_set(rows.len()),
                    None,
                ));
                values.push(ones);
            }
            aggregate
                .accumulator
                .update_batch(&values, groups, Some(mask), total)
                .map_err(|source| PipelineError::Evaluate {
                    sql: self.sql.clone(),
                    source,
                })?;
        }
        Ok(())
    }

    /// Makes room for `total` groups without adding values (a trace first seen in rows that do
    /// not count toward decisions).
    pub(crate) fn grow(&mut self, total: usize) -> Result<()> {
        for aggregate in &mut self.aggregates {
            let mut values: Vec<ArrayRef> = aggregate
                .args
                .iter()
                .map(|(_, ty)| new_empty_array(ty))
                .collect();
            if values.is_empty() {
                values.push(new_empty_array(&DataType::Boolean));
            }
            aggregate
                .accumulator
                .update_batch(&values, &[], None, total)
                .map_err(|source| PipelineError::Evaluate {
                    sql: self.sql.clone(),
                    source,
                })?;
        }
        Ok(())
    }

    /// Decides the first `ids.len()` groups (the traces `ids`, in group order): whether each is
    /// kept. Those groups are gone after, and the others renumbered from zero.
    pub(crate) fn decide(&mut self, ids: &[u128]) -> Result<Vec<bool>> {
        let n = ids.len();
        if n == 0 {
            return Ok(Vec::new());
        }
        let evaluate_err = |source| PipelineError::Evaluate {
            sql: self.sql.clone(),
            source,
        };
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.aggregates.len() + 1);
        let id_bytes = ids.iter().map(|id| id.to_be_bytes());
        let trace_ids = FixedSizeBinaryArray::try_from_iter(id_bytes)
            .map_err(|e| PipelineError::arrow("deciding traces", e))?;
        columns.push(Arc::new(trace_ids));
        for (i, aggregate) in self.aggregates.iter_mut().enumerate() {
            let values = aggregate
                .accumulator
                .evaluate(EmitTo::First(n))
                .map_err(evaluate_err)?;
            let field = self.schema.field(i + 1);
            let values = if values.data_type() == field.data_type() {
                values
            } else if values.len() == n {
                cast(&values, field.data_type())
                    .map_err(|e| PipelineError::arrow("deciding traces", e))?
            } else {
                new_null_array(field.data_type(), n)
            };
            columns.push(values);
        }
        let batch = RecordBatch::try_new(Arc::clone(&self.schema), columns)
            .map_err(|e| PipelineError::arrow("deciding traces", e))?;
        let kept = self
            .condition
            .evaluate(&batch)
            .and_then(|v| v.into_array(n))
            .map_err(evaluate_err)?;
        let kept = match kept.as_any().downcast_ref::<BooleanArray>() {
            Some(k) => (0..n).map(|i| k.is_valid(i) && k.value(i)).collect(),
            None => vec![false; n],
        };
        Ok(kept)
    }

    /// Bytes the accumulators hold.
    pub(crate) fn size(&self) -> usize {
        self.aggregates.iter().map(|a| a.accumulator.size()).sum()
    }
}

/// A call's function name, whether it is `DISTINCT`, and its arguments (None for `*`).
fn call_parts(expr: &Expr) -> Option<(String, bool, Vec<Option<Expr>>)> {
    let Expr::Function(f) = expr else { return None };
    let FunctionArguments::List(list) = &f.args else {
        return Some((f.name.to_string().to_lowercase(), false, Vec::new()));
    };
    let distinct = matches!(list.duplicate_treatment, Some(DuplicateTreatment::Distinct));
    let args = list
        .args
        .iter()
        .map(|a| match a {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(Some(e.clone())),
            FunctionArg::Unnamed(FunctionArgExpr::Wildcard) => Some(None),
            _ => None,
        })
        .collect::<Option<Vec<_>>>()?;
    Some((f.name.to_string().to_lowercase(), distinct, args))
}

/// Plans one aggregate call of the condition: the aggregate, and the type of its value.
fn compile_aggregate(
    state: &SessionState,
    name: &str,
    call: &ResolvedExpr,
    origin: &Origin,
) -> Result<(Aggregate, DataType)> {
    let refuse = |message: String| plan_error(origin, &call.original, message);
    let (Some((function, distinct, args)), Some((_, _, originals))) =
        (call_parts(&call.expr), call_parts(&call.original))
    else {
        return Err(refuse(format!(
            "`{}` is not an aggregate call",
            call.original
        )));
    };
    if call_filter_or_over(&call.original) {
        return Err(refuse(format!(
            "`{}`: FILTER and OVER are not supported in a trace decision",
            call.original
        )));
    }
    let udaf = state
        .aggregate_functions()
        .get(&function)
        .cloned()
        .ok_or_else(|| refuse(format!("`{function}` is not an aggregate function")))?;
    let mut compiled = Vec::new();
    for (arg, original) in args.into_iter().zip(originals) {
        match (arg, original) {
            (Some(arg), Some(original)) => compiled.push(compile(
                state,
                &ResolvedExpr {
                    original,
                    expr: arg,
                    columns: call.columns.clone(),
                },
                origin,
            )?),
            _ if function == "count" => {}
            _ => {
                return Err(refuse(format!(
                    "`{}`: * is for count(*) only",
                    call.original
                )));
            }
        }
    }
    let input: Vec<FieldRef> = if compiled.is_empty() {
        vec![Arc::new(Field::new("value", DataType::Boolean, true))]
    } else {
        compiled
            .iter()
            .enumerate()
            .map(|(i, e)| Arc::new(Field::new(format!("arg{i}"), e.data_type.clone(), true)))
            .collect()
    };
    let coerced = fields_with_udf(&input, udaf.as_ref())
        .map_err(|e| refuse(format!("`{}`: {e}", call.original)))?;
    let schema = Arc::new(Schema::new(coerced.clone()));
    let columns = coerced
        .iter()
        .enumerate()
        .map(|(i, f)| Arc::new(Column::new(f.name(), i)) as Arc<dyn PhysicalExpr>)
        .collect();
    let expr = AggregateExprBuilder::new(udaf, columns)
        .schema(schema)
        .alias(name)
        .with_distinct(distinct)
        .build()
        .map_err(|e| refuse(format!("`{}`: {e}", call.original)))?;
    let output = expr.field().data_type().clone();
    let accumulator: Box<dyn GroupsAccumulator> = if expr.groups_accumulator_supported() {
        expr.create_groups_accumulator()
            .map_err(|e| refuse(format!("`{}`: {e}", call.original)))?
    } else {
        let expr = Arc::new(expr);
        expr.create_accumulator()
            .map_err(|e| refuse(format!("`{}`: {e}", call.original)))?;
        Box::new(GroupsAccumulatorAdapter::new(move || {
            expr.create_accumulator()
        }))
    };
    let args = compiled
        .into_iter()
        .zip(coerced)
        .map(|(e, f)| (e, f.data_type().clone()))
        .collect();
    let call = call.original.to_string();
    Ok((
        Aggregate {
            call,
            args,
            accumulator,
        },
        output,
    ))
}

/// Whether a call has `FILTER (WHERE ...)` or `OVER (...)`.
fn call_filter_or_over(expr: &Expr) -> bool {
    matches!(expr, Expr::Function(f) if f.filter.is_some() || f.over.is_some())
}
