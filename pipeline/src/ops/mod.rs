//! Operators: one per statement form, each compiled once from its checked step and run on every
//! batch of the pipeline's source. Adding a statement form is an AST node and parser arm in the
//! dialect, its check, one file here and its tests.

mod aggregate;
mod delete;
mod drop;
mod rename;
mod route;
mod update;

use std::collections::HashMap;

use arrow::array::BooleanArray;
use arrow::buffer::BooleanBuffer;
use datafusion::sql::sqlparser::ast::Spanned;
use penstock_dialect::model::{AttrScope, Table};
use penstock_dialect::{ResolvedExpr, Step, StepKind};
use penstock_engine::OtapBatch;
use penstock_engine::schema::PayloadType;

pub(crate) use aggregate::AggregateOp;

use crate::aggregate::Aggregation;
use crate::error::{PipelineError, Result};
use crate::exec::{RunOutput, StepStats};
use crate::expr::{CompiledExpr, compile};
use crate::rows::{Rows, attrs_of, spaces};
use crate::session::LazySession;

/// One compiled statement.
pub(crate) trait Operator: Send {
    /// Runs on `batch` (already known to hold the statement's signal) and returns the batch the
    /// next statement sees.
    fn run(&mut self, batch: OtapBatch, cx: &mut RunContext<'_>) -> Result<OtapBatch>;

    /// Appends the plan lines of this operator (kernels, expressions and what they read).
    fn explain(&self, table: Table, line: &mut dyn FnMut(String));

    /// The aggregation it keeps open between batches, if it aggregates.
    fn aggregation(&mut self) -> Option<&mut Aggregation> {
        None
    }
}

/// What one statement sees of the run besides the batch.
pub(crate) struct RunContext<'a> {
    /// The statement's table.
    pub(crate) table: Table,
    /// When the batch is run (ns since the epoch).
    pub(crate) now: u64,
    /// Rows of the statement's table in the batch it receives.
    pub(crate) rows_in: u64,
    /// The statement's counters.
    pub(crate) stats: &'a mut StepStats,
    /// The batch's output so far.
    pub(crate) out: &'a mut RunOutput,
    /// Which rows some statement routed.
    pub(crate) routing: &'a mut Routing,
}

/// Per row space, which rows were sent to a sink, and which were folded into an
/// aggregation.
#[derive(Default)]
pub(crate) struct Routing {
    routed: HashMap<PayloadType, Vec<bool>>,
    aggregated: HashMap<PayloadType, Vec<bool>>,
    /// Whether any statement routes: without one, every row counts as unrouted.
    pub(crate) any: bool,
}

/// Sets the flags of `space` in `map` where `mask` holds (`len`: rows in the space).
fn set_flags(
    map: &mut HashMap<PayloadType, Vec<bool>>,
    space: PayloadType,
    len: usize,
    mask: &BooleanArray,
) {
    let flags = map.entry(space).or_insert_with(|| vec![false; len]);
    for i in mask.values().set_indices() {
        flags[i] = true;
    }
}

impl Routing {
    /// Marks the rows of `space` where `mask` holds as sent to a sink.
    pub(crate) fn mark(&mut self, space: PayloadType, len: usize, mask: &BooleanArray) {
        self.any = true;
        set_flags(&mut self.routed, space, len, mask);
    }

    /// Marks the rows of `space` where `mask` holds as aggregated.
    pub(crate) fn mark_aggregated(&mut self, space: PayloadType, len: usize, mask: &BooleanArray) {
        self.any = true;
        set_flags(&mut self.aggregated, space, len, mask);
    }

    /// Follows a filter of `space` that keeps the rows where `keep` holds.
    pub(crate) fn keep(&mut self, space: PayloadType, keep: &BooleanArray) {
        for map in [&mut self.routed, &mut self.aggregated] {
            if let Some(flags) = map.get_mut(&space) {
                *flags = flags
                    .iter()
                    .zip(keep.values().iter())
                    .filter(|(_, kept)| *kept)
                    .map(|(flag, _)| *flag)
                    .collect();
            }
        }
    }

    /// Rows sent to a sink.
    pub(crate) fn routed_rows(&self) -> u64 {
        self.routed
            .values()
            .map(|f| f.iter().filter(|r| **r).count() as u64)
            .sum()
    }

    /// Rows aggregated and sent to no sink as they are.
    pub(crate) fn aggregated_only_rows(&self) -> u64 {
        self.aggregated
            .iter()
            .map(|(space, flags)| {
                let routed = self.routed.get(space);
                flags
                    .iter()
                    .enumerate()
                    .filter(|(i, a)| **a && routed.is_none_or(|r| r.get(*i) != Some(&true)))
                    .count() as u64
            })
            .sum()
    }
}

/// Compiles `step` of pipeline `pipeline` into its operator.
pub(crate) fn compile_step(
    session: &LazySession,
    step: &Step,
    pipeline: &str,
) -> Result<Box<dyn Operator>> {
    Ok(match &step.kind {
        StepKind::Rename { scope, renames } => Box::new(rename::RenameOp::new(*scope, renames)),
        StepKind::Drop { scope, keys } => Box::new(drop::DropOp::new(*scope, keys)),
        StepKind::Update {
            assignments,
            filter,
        } => Box::new(update::UpdateOp::compile(
            session,
            step,
            assignments,
            filter,
        )?),
        StepKind::Delete { filter } => Box::new(delete::DeleteOp {
            filter: compile_filter(session, step, filter)?,
        }),
        StepKind::Route {
            sink,
            filter,
            projection,
        } => Box::new(route::RouteOp {
            sink: sink.clone(),
            filter: compile_filter(session, step, filter)?,
            projection: projection.clone(),
        }),
        StepKind::Aggregate { .. } => Box::new(AggregateOp::compile(session, step, pipeline)?),
    })
}

/// A plan-time check failed for `step`.
pub(crate) fn plan_error(step: &Step, message: impl Into<String>) -> PipelineError {
    PipelineError::plan(&step.origin, message)
}

/// Plans a `WHERE` condition, which must be boolean.
pub(crate) fn compile_filter(
    session: &LazySession,
    step: &Step,
    e: &Option<ResolvedExpr>,
) -> Result<Option<CompiledExpr>> {
    let Some(e) = e else { return Ok(None) };
    let compiled = session.plan(&e.expr, |state| compile(state, e, &step.origin))?;
    if !matches!(
        compiled.data_type,
        arrow::datatypes::DataType::Boolean | arrow::datatypes::DataType::Null
    ) {
        return Err(PipelineError::plan_at(
            &step.origin,
            e.original.span(),
            format!(
                "the condition `{}` is {}, not a boolean",
                e.original, compiled.data_type
            ),
        ));
    }
    Ok(Some(compiled))
}

/// The rows `filter` selects (every row without one).
pub(crate) fn selected(filter: Option<&CompiledExpr>, rows: &Rows<'_>) -> Result<BooleanArray> {
    match filter {
        Some(f) => f.matches(rows),
        None => Ok(BooleanArray::new(BooleanBuffer::new_set(rows.len()), None)),
    }
}

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
