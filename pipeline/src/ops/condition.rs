//! The `WHERE` condition of a statement: planned once, then the rows it selects in each batch.

use arrow::array::BooleanArray;
use arrow::buffer::BooleanBuffer;
use datafusion::sql::sqlparser::ast::Spanned;
use penstock_dialect::{ResolvedExpr, Step};

use crate::error::{PipelineError, Result};
use crate::expr::{CompiledExpr, compile};
use crate::rows::Rows;
use crate::session::LazySession;

/// Plans a `WHERE` condition, which must be boolean.
pub(crate) fn compile_filter(
    session: &LazySession,
    step: &Step,
    e: &Option<ResolvedExpr>,
) -> Result<Option<CompiledExpr>> {
    let Some(e) = e else { return Ok(None) };
    let compiled = session.plan(&e.expr, |state| compile(state, e, &step.origin))?;
    boolean(compiled, e, &step.origin).map(Some)
}

/// Plans the condition `e` of the statement at `origin` in `state`; it must be boolean.
pub(crate) fn compile_boolean(
    state: &datafusion::execution::context::SessionState,
    e: &ResolvedExpr,
    origin: &penstock_dialect::Origin,
) -> Result<CompiledExpr> {
    boolean(compile(state, e, origin)?, e, origin)
}

/// `compiled` (the condition `e`) when it is boolean.
fn boolean(
    compiled: CompiledExpr,
    e: &ResolvedExpr,
    origin: &penstock_dialect::Origin,
) -> Result<CompiledExpr> {
    if !matches!(
        compiled.data_type,
        arrow::datatypes::DataType::Boolean | arrow::datatypes::DataType::Null
    ) {
        return Err(PipelineError::plan_at(
            origin,
            e.original.span(),
            format!(
                "the condition `{}` is {}, not a boolean",
                e.original, compiled.data_type
            ),
        ));
    }
    Ok(compiled)
}

/// The rows `filter` selects (every row without one).
pub(crate) fn selected(filter: Option<&CompiledExpr>, rows: &Rows<'_>) -> Result<BooleanArray> {
    match filter {
        Some(f) => f.matches(rows),
        None => Ok(BooleanArray::new(BooleanBuffer::new_set(rows.len()), None)),
    }
}
