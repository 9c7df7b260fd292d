//! Expressions compiled once into DataFusion physical expressions over the columns they read.

use std::ops::ControlFlow;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray};
use arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::DFSchema;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::execution::context::SessionState;
use datafusion::logical_expr::simplify::SimplifyContext;
use datafusion::logical_expr::{Cast, Expr, ExprSchemable};
use datafusion::optimizer::simplify_expressions::ExprSimplifier;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::sql::sqlparser::ast::{Expr as SqlExpr, ExprWithAlias, Spanned, Visit, Visitor};
use datafusion::sql::sqlparser::tokenizer::Span;
use penstock_dialect::model::ColumnRef;
use penstock_dialect::{Origin, ResolvedExpr};

use crate::error::{PipelineError, Result};
use crate::names;
use crate::rows::Rows;
use crate::typecheck::{self, Refusal};
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

/// Why an expression cannot be planned: what, and where in it when a part of it is at fault
/// (an unknown function's name, a literal).
pub(crate) struct PlanFailure {
    /// What is wrong.
    pub(crate) message: String,
    /// The part at fault.
    pub(crate) at: Option<Span>,
}

impl From<String> for PlanFailure {
    fn from(message: String) -> Self {
        PlanFailure { message, at: None }
    }
}

impl PlanFailure {
    /// The error of `expr` (as written) of the statement at `origin`: at the part at fault,
    /// or where `expr` starts.
    pub(crate) fn into_error(
        self,
        origin: &Origin,
        expr: &SqlExpr,
        context: &str,
    ) -> PipelineError {
        let at = self.at.unwrap_or_else(|| expr.span());
        PipelineError::plan_at(origin, at, format!("{context}: {}", self.message))
    }
}

/// Plans `expr` of the statement at `origin`.
pub(crate) fn compile(
    state: &SessionState,
    expr: &ResolvedExpr,
    origin: &Origin,
) -> Result<CompiledExpr> {
    compile_into(state, expr, origin, None)
}

/// Plans `expr`; with a `target` (the type of the column written, and its name), its values
/// are converted to that type, strictly (a value that does not fit is an error, never zero or
/// NULL), and a value that can never fit is a planning error.
pub(crate) fn compile_into(
    state: &SessionState,
    expr: &ResolvedExpr,
    origin: &Origin,
    target: Option<(&DataType, &str)>,
) -> Result<CompiledExpr> {
    let schema = schema_of(&expr.columns);
    let (physical, data_type) =
        plan_into(state, &expr.expr, &schema, target).map_err(|failure| {
            failure.into_error(origin, &expr.original, &format!("in `{}`", expr.original))
        })?;
    Ok(CompiledExpr {
        sql: expr.original.to_string(),
        columns: expr.columns.clone(),
        schema,
        physical,
        data_type,
    })
}

/// Plans the SQL expression `expr` over the columns of `schema`: its physical form and the
/// type of its result, or the reason why not.
pub(crate) fn plan(
    state: &SessionState,
    expr: &SqlExpr,
    schema: &SchemaRef,
) -> std::result::Result<(Arc<dyn PhysicalExpr>, DataType), PlanFailure> {
    plan_into(state, expr, schema, None)
}

/// The first call in `expr` of a function the session does not know, at its name.
pub(crate) fn check_functions(
    state: &SessionState,
    expr: &SqlExpr,
) -> std::result::Result<(), PlanFailure> {
    match names::unknown_function(state, expr) {
        Some(unknown) => Err(PlanFailure {
            message: unknown.message,
            at: Some(unknown.span),
        }),
        None => Ok(()),
    }
}

/// A refusal of the type checks, at the literal it names when `expr` has it.
fn refused(expr: &SqlExpr, refusal: Refusal) -> PlanFailure {
    PlanFailure {
        at: refusal.literal.and_then(|text| literal_span(expr, &text)),
        message: refusal.message,
    }
}

/// Where the first literal of `expr` that reads `text` (as SQL) is.
fn literal_span(expr: &SqlExpr, text: &str) -> Option<Span> {
    struct Finder<'a>(&'a str);
    impl Visitor for Finder<'_> {
        type Break = Span;
        fn pre_visit_expr(&mut self, expr: &SqlExpr) -> ControlFlow<Span> {
            match expr {
                SqlExpr::Value(v) if v.value.to_string() == self.0 => ControlFlow::Break(v.span),
                _ => ControlFlow::Continue(()),
            }
        }
    }
    match expr.visit(&mut Finder(text)) {
        ControlFlow::Break(span) => Some(span),
        ControlFlow::Continue(()) => None,
    }
}

/// Plans as the session plans a query's expressions (type coercion, then simplification),
/// refusing what would fail or change values at run time (see [`typecheck`]); with a
/// `target`, the value is converted to that type.
pub(crate) fn plan_into(
    state: &SessionState,
    expr: &SqlExpr,
    schema: &SchemaRef,
    target: Option<(&DataType, &str)>,
) -> std::result::Result<(Arc<dyn PhysicalExpr>, DataType), PlanFailure> {
    check_functions(state, expr)?;
    let refused = |refusal| refused(expr, refusal);
    let df_schema = DFSchema::try_from(Arc::clone(schema)).map_err(|e| clean(&e))?;
    let mut logical: Expr = state
        .create_logical_expr_from_sql_expr(
            ExprWithAlias {
                expr: expr.clone(),
                alias: None,
            },
            &df_schema,
        )
        .map_err(|e| clean(&e))?
        // Operators planned as function calls (`->`) are named by aliases no one reads.
        .unalias_nested()
        .data;
    typecheck::check_comparisons(&logical, &df_schema).map_err(refused)?;
    typecheck::check_sizes(state, &logical).map_err(refused)?;
    if let Some((target, column)) = target {
        typecheck::check_assignment(&logical, &df_schema, target, column).map_err(refused)?;
        if logical.get_type(&df_schema).ok().as_ref() != Some(target) {
            logical = Expr::Cast(Cast::new(Box::new(logical), target.clone()));
        }
    }
    let logical = rewritten(state, logical, &df_schema).map_err(|e| clean(&e))?;
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

/// `expr` with the session's function rewrites applied to each of its parts, bottom up, as the
/// session's analyzer applies them to the plan of a query: a cast of a JSON value
/// (`CAST(json_get(body, 'n') AS BIGINT)`, and the cast to a column's type) becomes the
/// function that reads that type (`json_get_int(body, 'n')`).
fn rewritten(
    state: &SessionState,
    expr: Expr,
    schema: &DFSchema,
) -> datafusion::error::Result<Expr> {
    let rewrites = state.analyzer().function_rewrites();
    let options = state.config_options().as_ref();
    expr.transform_up(|e| {
        let mut result = Transformed::no(e);
        for rewrite in rewrites {
            result = result.transform_data(|e| rewrite.rewrite(e, schema, options))?;
        }
        Ok(result)
    })
    .map(|t| t.data)
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
