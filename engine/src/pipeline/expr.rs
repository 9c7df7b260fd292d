//! Expressions compiled once into DataFusion physical expressions over the columns they read.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray};
use arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::DFSchema;
use datafusion::execution::context::SessionState;
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::sql::sqlparser::ast::{Expr as SqlExpr, ExprWithAlias};
use penstock_dialect::ResolvedExpr;
use penstock_dialect::model::ColumnRef;

use super::error::{PipelineError, Result};
use super::rows::Rows;
use super::view::{assemble, schema_of};

/// An expression ready to evaluate on the rows of a batch.
pub(crate) struct CompiledExpr {
    /// The expression as written.
    pub(crate) sql: String,
    /// The columns it reads.
    pub(crate) columns: Vec<ColumnRef>,
    schema: SchemaRef,
    physical: Arc<dyn PhysicalExpr>,
    /// The type of its result.
    pub(crate) data_type: DataType,
}

/// Plans `expr` (`origin`: where the statement is, for errors).
pub(crate) fn compile(
    state: &SessionState,
    expr: &ResolvedExpr,
    origin: &str,
) -> Result<CompiledExpr> {
    let plan_error = |message: String| PipelineError::Plan {
        origin: origin.to_string(),
        message: format!("in `{}`: {message}", expr.original),
    };
    let schema = schema_of(&expr.columns);
    let (physical, data_type) = plan(state, &expr.expr, &schema).map_err(plan_error)?;
    Ok(CompiledExpr {
        sql: expr.original.to_string(),
        columns: expr.columns.clone(),
        schema,
        physical,
        data_type,
    })
}

/// Plans the SQL expression `expr` over the columns of `schema`: its physical form and the
/// type of its result, or DataFusion's reason why not.
pub(crate) fn plan(
    state: &SessionState,
    expr: &SqlExpr,
    schema: &SchemaRef,
) -> std::result::Result<(Arc<dyn PhysicalExpr>, DataType), String> {
    let df_schema = DFSchema::try_from(Arc::clone(schema)).map_err(|e| clean(&e))?;
    let logical: Expr = state
        .create_logical_expr_from_sql_expr(
            ExprWithAlias {
                expr: expr.clone(),
                alias: None,
            },
            &df_schema,
        )
        .map_err(|e| clean(&e))?;
    let physical = state
        .create_physical_expr(logical, &df_schema)
        .map_err(|e| clean(&e))?;
    let data_type = physical.data_type(schema).map_err(|e| clean(&e))?;
    Ok((physical, data_type))
}

/// A DataFusion error message without its "Error during planning:" prefixes.
fn clean(e: &datafusion::error::DataFusionError) -> String {
    let text = e.to_string();
    let mut text = text.as_str();
    for prefix in [
        "Error during planning: ",
        "Schema error: ",
        "This feature is not implemented: ",
    ] {
        text = text.strip_prefix(prefix).unwrap_or(text);
    }
    text.to_string()
}

impl CompiledExpr {
    /// The value for every row of `rows`.
    pub(crate) fn evaluate(&self, rows: &Rows<'_>) -> Result<ArrayRef> {
        let input = assemble(rows, &self.columns, &self.schema)?;
        self.physical
            .evaluate(&input)
            .and_then(|v| v.into_array(rows.len()))
            .map_err(|source| PipelineError::Evaluate {
                sql: self.sql.clone(),
                source,
            })
    }

    /// Whether the expression is true for each row (null counts as false).
    pub(crate) fn matches(&self, rows: &Rows<'_>) -> Result<BooleanArray> {
        let values = self.evaluate(rows)?;
        let Some(bools) = values.as_boolean_opt() else {
            return Err(PipelineError::Execute(format!(
                "`{}` is {}, not a boolean condition",
                self.sql,
                values.data_type()
            )));
        };
        Ok(match bools.nulls() {
            None => bools.clone(),
            Some(nulls) => BooleanArray::new(bools.values() & nulls.inner(), None),
        })
    }
}
