//! The aggregate functions an aggregation statement may call, and what each output becomes.
//!
//! Each entry names a DataFusion aggregate (its `Accumulator` does the work, and its partial
//! state is what windows of several workers merge) and the kind of metric its values are sent
//! as. A new aggregate is one line here and its `.slt` cases.

use std::sync::{Arc, LazyLock};

use arrow::datatypes::{DataType, Field, FieldRef, Schema};
use datafusion::execution::context::SessionState;
use datafusion::logical_expr::Accumulator;
use datafusion::logical_expr::type_coercion::functions::fields_with_udf;
use datafusion::physical_expr::aggregate::{AggregateExprBuilder, AggregateFunctionExpr};
use datafusion::physical_expr::expressions::Column;

/// The metric data points of an aggregate output become.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MetricKind {
    /// A monotonic delta sum (counts).
    MonotonicSum,
    /// A delta sum, not monotonic.
    Sum,
    /// A gauge.
    Gauge,
}

/// One aggregate function.
#[derive(Debug)]
pub(crate) struct AggregateFunction {
    /// The SQL names that call it.
    pub(crate) names: &'static [&'static str],
    /// DataFusion's name for it.
    pub(crate) datafusion: &'static str,
    /// Whether `f(DISTINCT x)` is allowed.
    pub(crate) distinct: bool,
    /// Whether it reads text (and bytes) as well as numbers and times.
    pub(crate) text: bool,
    /// What its values are sent as.
    pub(crate) metric: MetricKind,
    /// Whether integer arguments are widened to 38-digit decimals first (so an integer sum
    /// is exact past 2^53, and never wraps).
    pub(crate) widen_integers: bool,
}

const fn function(
    names: &'static [&'static str],
    datafusion: &'static str,
    distinct: bool,
    text: bool,
    metric: MetricKind,
) -> AggregateFunction {
    AggregateFunction {
        names,
        datafusion,
        distinct,
        text,
        metric,
        widen_integers: false,
    }
}

/// Every aggregate function.
pub(crate) const FUNCTIONS: &[AggregateFunction] = &[
    function(&["count"], "count", true, true, MetricKind::MonotonicSum),
    AggregateFunction {
        widen_integers: true,
        ..function(&["sum"], "sum", false, false, MetricKind::Sum)
    },
    function(&["min"], "min", true, true, MetricKind::Gauge),
    function(&["max"], "max", true, true, MetricKind::Gauge),
    function(&["avg", "mean"], "avg", false, false, MetricKind::Gauge),
];

/// Aggregates DataFusion has that Penstock does not compute. A statement that calls one is
/// still checked as an aggregation, so that it is refused as one: as not an aggregate Penstock
/// computes, with the names of [`FUNCTIONS`].
pub(crate) const NOT_COMPUTED: &[&str] = &[
    "approx_distinct",
    "approx_percentile_cont",
    "approx_median",
    "median",
    "stddev",
    "var",
    "first_value",
    "last_value",
    "bit_and",
    "bit_or",
    "bool_and",
    "bool_or",
    "array_agg",
    "string_agg",
];

/// The function called `name` (case-insensitive).
pub(crate) fn find(name: &str) -> Option<&'static AggregateFunction> {
    FUNCTIONS
        .iter()
        .find(|f| f.names.iter().any(|n| n.eq_ignore_ascii_case(name)))
}

/// The name of every function of [`FUNCTIONS`], aliases included.
fn computed() -> impl Iterator<Item = &'static str> {
    FUNCTIONS.iter().flat_map(|f| f.names.iter().copied())
}

/// The names of every function, for error messages.
pub(crate) fn names() -> String {
    computed().collect::<Vec<_>>().join(", ")
}

/// Every name the dialect's checker takes for an aggregate call (what
/// [`penstock_dialect::check_partial`] is given): those of the aggregates Penstock computes,
/// then those of DataFusion's that it refuses (`FUNCTIONS`, then `NOT_COMPUTED`).
pub fn aggregate_names() -> &'static [&'static str] {
    static NAMES: LazyLock<Vec<&'static str>> =
        LazyLock::new(|| computed().chain(NOT_COMPUTED.iter().copied()).collect());
    &NAMES
}

/// An aggregate call planned for arguments of one type.
#[derive(Debug)]
pub(crate) struct PlannedAggregate {
    pub(crate) function: &'static AggregateFunction,
    /// The type the argument's values are cast to before they are accumulated.
    pub(crate) input_type: DataType,
    /// The type of its value.
    pub(crate) output_type: DataType,
    expr: AggregateFunctionExpr,
}

impl PlannedAggregate {
    /// Plans `function` (`DISTINCT` or not) over values of `arg_type`.
    pub(crate) fn plan(
        state: &SessionState,
        function: &'static AggregateFunction,
        distinct: bool,
        arg_type: &DataType,
        alias: &str,
    ) -> Result<PlannedAggregate, String> {
        let udaf = state
            .aggregate_functions()
            .get(function.datafusion)
            .cloned()
            .ok_or_else(|| format!("{} is not available", function.datafusion))?;
        let widened = if function.widen_integers && arg_type.is_integer() {
            DataType::Decimal128(38, 0)
        } else {
            arg_type.clone()
        };
        let input: FieldRef = Arc::new(Field::new("value", widened, true));
        let coerced = fields_with_udf(&[input], udaf.as_ref()).map_err(|e| e.to_string())?;
        let input_type = coerced[0].data_type().clone();
        let schema = Arc::new(Schema::new(vec![Arc::clone(&coerced[0])]));
        let expr = AggregateExprBuilder::new(udaf, vec![Arc::new(Column::new("value", 0))])
            .schema(schema)
            .alias(alias)
            .with_distinct(distinct)
            .build()
            .map_err(|e| e.to_string())?;
        let output_type = expr.field().data_type().clone();
        Ok(PlannedAggregate {
            function,
            input_type,
            output_type,
            expr,
        })
    }

    /// Whether it is `f(DISTINCT x)`.
    pub(crate) fn is_distinct(&self) -> bool {
        self.expr.is_distinct()
    }

    /// A fresh accumulator.
    pub(crate) fn accumulator(&self) -> datafusion::error::Result<Box<dyn Accumulator>> {
        self.expr.create_accumulator()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use penstock_dialect::StepKind;

    /// A program whose one statement is `INSERT INTO out SELECT {outputs} FROM logs`.
    fn file(outputs: &str) -> String {
        format!(
            "CREATE SOURCE src FROM FILE WITH (path = 'in.jsonl');
CREATE SINK out TO CONSOLE;
CREATE PIPELINE p FROM src AS BEGIN
  INSERT INTO out SELECT {outputs} FROM logs;
END;"
        )
    }

    /// The errors of `sql` (as `a.sql`), which must not compile.
    fn errors_of(sql: &str) -> String {
        match crate::compile_sources(&[("a.sql", sql)]) {
            Ok(_) => panic!("compiled:\n{sql}"),
            Err(errors) => errors.to_string(),
        }
    }

    #[test]
    fn every_function_is_checked_as_an_aggregate_and_compiles() {
        for name in computed() {
            // Without GROUP BY: only the call makes the statement an aggregation.
            let sql = file(&format!("{name}(severity_number) AS v"));
            let (program, _) = crate::compile_sources(&[("a.sql", &sql)])
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let step = &program.pipelines[0].steps[0];
            assert!(
                matches!(step.kind, StepKind::Aggregate { .. }),
                "{name}: {}",
                step.kind.name()
            );
        }
    }

    #[test]
    fn aggregates_not_computed_are_refused_as_aggregates() {
        let state = crate::session::session();
        for name in NOT_COMPUTED {
            assert!(find(name).is_none(), "{name} is computed");
            assert!(
                state.aggregate_functions().contains_key(*name),
                "{name} is no aggregate of DataFusion"
            );
            let sql = file(&format!("{name}(severity_number) AS v"));
            let error = errors_of(&sql);
            assert!(
                error.starts_with(&format!(
                    "a.sql:4:26: `{name}(severity_number)` is not an aggregate Penstock computes: {}",
                    names()
                )),
                "{error}"
            );
        }
    }

    #[test]
    fn a_call_of_no_aggregate_is_not_an_aggregation() {
        let error = errors_of(&file("nope(severity_number) AS v"));
        assert_eq!(
            error,
            "a.sql:4:26: a routed SELECT lists * or columns and attributes (no aliases or computed values; use UPDATE to compute)"
        );
    }
}
