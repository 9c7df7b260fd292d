//! Expressions compiled once into DataFusion physical expressions over the columns they read.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray};
use arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::DFSchema;
use datafusion::execution::context::SessionState;
use datafusion::logical_expr::simplify::SimplifyContext;
use datafusion::logical_expr::{Cast, Expr, ExprSchemable};
use datafusion::optimizer::simplify_expressions::ExprSimplifier;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::sql::sqlparser::ast::Spanned;
use datafusion::sql::sqlparser::ast::{Expr as SqlExpr, ExprWithAlias};
use penstock_dialect::ResolvedExpr;
use penstock_dialect::model::ColumnRef;

use crate::error::{PipelineError, Result};
use crate::rows::Rows;
use crate::typecheck;
use crate::view::{assemble, schema_of};

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
    compile_into(state, expr, origin, None)
}

/// Plans `expr`; with a `target` (the type of the column written, and its name), its values
/// are converted to that type, strictly (a value that does not fit is an error, never zero or
/// NULL), and a value that can never fit is a planning error.
pub(crate) fn compile_into(
    state: &SessionState,
    expr: &ResolvedExpr,
    origin: &str,
    target: Option<(&DataType, &str)>,
) -> Result<CompiledExpr> {
    let plan_error = |message: String| PipelineError::Plan {
        origin: at_expression(origin, &expr.original),
        message: format!("in `{}`: {message}", expr.original),
    };
    let schema = schema_of(&expr.columns);
    let (physical, data_type) =
        plan_into(state, &expr.expr, &schema, target).map_err(plan_error)?;
    Ok(CompiledExpr {
        sql: expr.original.to_string(),
        columns: expr.columns.clone(),
        schema,
        physical,
        data_type,
    })
}

/// `origin` (`file:line:column` of a statement) moved to where `expr` starts, when known.
fn at_expression(origin: &str, expr: &SqlExpr) -> String {
    let start = expr.span().start;
    let file = origin.rsplitn(3, ':').nth(2);
    match file {
        Some(file) if start.line > 0 => format!("{file}:{}:{}", start.line, start.column),
        _ => origin.to_string(),
    }
}

/// Plans the SQL expression `expr` over the columns of `schema`: its physical form and the
/// type of its result, or the reason why not.
pub(crate) fn plan(
    state: &SessionState,
    expr: &SqlExpr,
    schema: &SchemaRef,
) -> std::result::Result<(Arc<dyn PhysicalExpr>, DataType), String> {
    plan_into(state, expr, schema, None)
}

/// Plans as the session plans a query's expressions (type coercion, then simplification),
/// refusing what would fail or change values at run time (see [`typecheck`]); with a
/// `target`, the value is converted to that type.
pub(crate) fn plan_into(
    state: &SessionState,
    expr: &SqlExpr,
    schema: &SchemaRef,
    target: Option<(&DataType, &str)>,
) -> std::result::Result<(Arc<dyn PhysicalExpr>, DataType), String> {
    let df_schema = DFSchema::try_from(Arc::clone(schema)).map_err(|e| clean(&e))?;
    let mut logical: Expr = state
        .create_logical_expr_from_sql_expr(
            ExprWithAlias {
                expr: expr.clone(),
                alias: None,
            },
            &df_schema,
        )
        .map_err(|e| clean(&e))?;
    typecheck::check_comparisons(&logical, &df_schema)?;
    typecheck::check_sizes(state, &logical)?;
    if let Some((target, column)) = target {
        typecheck::check_assignment(&logical, &df_schema, target, column)?;
        if logical.get_type(&df_schema).ok().as_ref() != Some(target) {
            logical = Expr::Cast(Cast::new(Box::new(logical), target.clone()));
        }
    }
    let context = SimplifyContext::builder()
        .with_schema(Arc::new(df_schema.clone()))
        .with_config_options(Arc::clone(state.config_options()))
        .build();
    let simplifier = ExprSimplifier::new(context);
    let coerced = simplifier
        .coerce(logical.clone(), &df_schema)
        .map_err(|e| clean(&e))?;
    typecheck::check_implicit_casts(&coerced, &logical, &df_schema)?;
    let simplified = simplifier
        .simplify(coerced)
        .map_err(|e| format!("cannot be computed: {}", clean(&e)))?;
    typecheck::check_constants(state, &simplified)?;
    let physical = state
        .create_physical_expr(simplified, &df_schema)
        .map_err(|e| clean(&e))?;
    let data_type = physical.data_type(schema).map_err(|e| clean(&e))?;
    typecheck::check_on_nulls(&physical, schema)?;
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
        "Arrow error: ",
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
