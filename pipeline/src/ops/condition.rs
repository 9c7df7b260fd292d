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
