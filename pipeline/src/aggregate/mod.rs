//! `INSERT INTO sink SELECT keys..., agg(...) FROM t [WHERE p] GROUP BY keys [HAVING c]`:
//! derived metrics.
//!
//! Every batch is grouped by its keys with vectorized row encoding; each group's rows feed the
//! accumulators of its open window (see [`windows`]), which keep them until the window closes.
//! Every aggregate output becomes a metric named by its alias, with one data point per group
//! and window (see [`functions`] for which function gives which kind of metric); an aggregate
//! whose value is text (`min` or `max` of text) becomes an attribute of the group's points
//! instead. The group key named `time` (or the first timestamp key, e.g. `date_bin(INTERVAL '1
//! minute', time_unix_nano)`) gives the window; the other keys are the points' attributes.

mod batch;
pub(crate) mod functions;
mod metrics;

pub(crate) use metrics::is_text;
pub(crate) mod windows;

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, UInt32Array};
use arrow::compute::{cast, filter, take};
use arrow::datatypes::{DataType, Field, Int64Type, Schema, TimeUnit};
use arrow::row::{RowConverter, SortField};
use datafusion::common::ScalarValue;
use datafusion::execution::context::SessionState;
use datafusion::sql::sqlparser::ast::{
    DuplicateTreatment, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, Spanned, Value,
};
use penstock_dialect::{Having, Origin, ResolvedExpr};

use crate::error::{PipelineError, Result};
use crate::expr::{CompiledExpr, PlanFailure, check_functions, compile, plan};
use crate::rows::Rows;
use crate::typecheck::evaluate_on_one_row;
use functions::{AggregateFunction, PlannedAggregate};
use windows::{ARRIVAL_WINDOW, AggregateSpec, HavingSpec, MAX_OPEN_STATE, Spec, Windows};

/// One output column.
pub(crate) enum Output {
    Key {
        name: String,
        expr: CompiledExpr,
    },
    Aggregate {
        name: String,
        planned: Arc<PlannedAggregate>,
        /// The argument (None for `count(*)`).
        arg: Option<CompiledExpr>,
        /// Computed for `HAVING` only.
        hidden: bool,
    },
}

/// A compiled aggregation and the windows it keeps open.
pub(crate) struct Aggregation {
    pub(crate) outputs: Vec<Output>,
    pub(crate) spec: Arc<Spec>,
    /// Encodes the keys of a row as bytes (None without keys).
    converter: Option<RowConverter>,
    open: Windows,
}

/// A call `f(arg)`, `f(DISTINCT arg)` or `count(*)`.
struct Call {
    function: &'static AggregateFunction,
    distinct: bool,
    /// The argument (None for `*`).
    arg: Option<Expr>,
}

/// The aggregate call `expr` is, if it is one.
fn aggregate_call(expr: &Expr) -> Option<Call> {
    let Expr::Function(f) = expr else { return None };
    let FunctionArguments::List(list) = &f.args else {
        return None;
    };
    if f.filter.is_some() || f.over.is_some() {
        return None;
    }
    let distinct = matches!(list.duplicate_treatment, Some(DuplicateTreatment::Distinct));
    let function = functions::find(&f.name.to_string())?;
    let arg = match list.args.as_slice() {
        [FunctionArg::Unnamed(FunctionArgExpr::Wildcard)] if function.datafusion == "count" => None,
        [FunctionArg::Unnamed(FunctionArgExpr::Expr(e))] => Some(e.clone()),
        _ => return None,
    };
    Some(Call {
        function,
        distinct,
        arg,
    })
}

/// The value of a constant expression (an interval literal, a unit name).
fn constant(state: &SessionState, expr: &Expr) -> Option<ScalarValue> {
    let schema = Arc::new(Schema::empty());
    let (physical, _) = plan(state, expr, &schema).ok()?;
    evaluate_on_one_row(&physical, &schema).ok()
}

const SECOND: u64 = 1_000_000_000;

/// The window length (ns) of a time key: `date_bin(INTERVAL, ...)` or `date_trunc('unit',
/// ...)`; 0 when it is not one of those or the length varies (months, years).
fn window_width(state: &SessionState, expr: &Expr) -> u64 {
    let Expr::Function(f) = expr else { return 0 };
    let FunctionArguments::List(list) = &f.args else {
        return 0;
    };
    let Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(first))) = list.args.first() else {
        return 0;
    };
    match f.name.to_string().to_lowercase().as_str() {
        "date_bin" => match constant(state, first) {
            Some(ScalarValue::IntervalMonthDayNano(Some(v))) if v.months == 0 => {
                (v.days.max(0) as u64 * 86_400 * SECOND).saturating_add(v.nanoseconds.max(0) as u64)
            }
            Some(ScalarValue::IntervalDayTime(Some(v))) => {
                v.days.max(0) as u64 * 86_400 * SECOND + v.milliseconds.max(0) as u64 * 1_000_000
            }
            _ => 0,
        },
        "date_trunc" | "datetrunc" => {
            let unit = match first {
                Expr::Value(v) => match &v.value {
                    Value::SingleQuotedString(s) => s.to_lowercase(),
                    _ => return 0,
                },
                _ => return 0,
            };
            match unit.as_str() {
                "microsecond" => 1_000,
                "millisecond" => 1_000_000,
                "second" => SECOND,
                "minute" => 60 * SECOND,
                "hour" => 3_600 * SECOND,
                "day" => 86_400 * SECOND,
                "week" => 7 * 86_400 * SECOND,
                _ => 0,
            }
        }
        _ => 0,
    }
}

/// Identifies the statement's windows across workers and reloads.
pub(crate) struct Statement<'a> {
    pub(crate) pipeline: &'a str,
    pub(crate) sql: &'a str,
    pub(crate) sink: &'a str,
    pub(crate) origin: &'a Origin,
}

impl Aggregation {
    /// Compiles the outputs; `group_by` items must name key outputs (by alias, position or
    /// text), and every other output must be one aggregate call.
    pub(crate) fn compile(
        state: &SessionState,
        outputs: &[(String, ResolvedExpr)],
        group_by: &[ResolvedExpr],
        having: Option<&Having>,
        statement: Statement<'_>,
    ) -> Result<Aggregation> {
        let origin = statement.origin;
        let hidden = having.map_or(&[][..], |h| &h.hidden[..]);
        let mut compiled = Vec::new();
        let mut width = 0;
        for (i, (name, e)) in outputs.iter().chain(hidden).enumerate() {
            let is_hidden = i >= outputs.len();
            let output = match aggregate_call(&e.expr) {
                Some(call) => compile_aggregate(state, name, e, call, is_hidden, origin)?,
                None if is_hidden
                    || has_distinct(&e.expr)
                    || is_other_aggregate(state, &e.expr) =>
                {
                    check_functions(state, &e.original).map_err(|f| {
                        f.into_error(origin, &e.original, &format!("in `{}`", e.original))
                    })?;
                    return Err(plan_error(
                        origin,
                        &e.original,
                        format!(
                            "`{}` is not an aggregate Penstock computes: {} (count, min and max also take DISTINCT)",
                            e.original,
                            functions::names()
                        ),
                    ));
                }
                None => {
                    let key = compile_key(state, name, e, group_by, compiled.len() + 1, origin)?;
                    if name.eq_ignore_ascii_case("time")
                        || matches!(key.data_type, DataType::Timestamp(..))
                    {
                        width = width.max(window_width(state, &e.original));
                    }
                    Output::Key {
                        name: name.clone(),
                        expr: key,
                    }
                }
            };
            compiled.push(output);
        }
        let sends_a_metric = compiled.iter().any(|o| {
            matches!(o, Output::Aggregate { hidden: false, planned, .. } if !is_text(&planned.output_type))
        });
        if !sends_a_metric {
            return Err(PipelineError::plan(
                origin,
                format!(
                    "an aggregation needs at least one aggregate with a number value ({})",
                    functions::names()
                ),
            ));
        }
        let mut spec = spec_of(&compiled, &statement, width);
        if let Some(h) = having {
            spec.having = Some(compile_having(state, h, &compiled, origin)?);
        }
        let key_types: Vec<SortField> = compiled
            .iter()
            .filter_map(|o| match o {
                Output::Key { expr, .. } => Some(SortField::new(expr.data_type.clone())),
                Output::Aggregate { .. } => None,
            })
            .collect();
        let converter = if key_types.is_empty() {
            None
        } else {
            Some(RowConverter::new(key_types).map_err(|e| PipelineError::arrow("grouping", e))?)
        };
        let spec = Arc::new(spec);
        Ok(Aggregation {
            outputs: compiled,
            open: Windows::new(Arc::clone(&spec)),
            spec,
            converter,
        })
    }

    /// Folds the rows of `rows` where `mask` holds into the open windows (`now`: ns since the
    /// epoch, the arrival time of rows without a time key). Returns every open window, to be
    /// sent now, when they hold more than [`MAX_OPEN_STATE`] bytes.
    pub(crate) fn add(
        &mut self,
        rows: &Rows<'_>,
        mask: &BooleanArray,
        now: u64,
    ) -> Result<Option<Windows>> {
        let n = mask.true_count();
        if n == 0 {
            return Ok(None);
        }
        let arrow_err = |e| PipelineError::arrow("aggregating", e);
        let keep = |a: ArrayRef| filter(&a, mask).map_err(arrow_err);
        let mut keys: Vec<ArrayRef> = Vec::new();
        let mut args: Vec<ArrayRef> = Vec::new();
        for o in &self.outputs {
            match o {
                Output::Key { expr, .. } => keys.push(keep(expr.evaluate(rows)?)?),
                Output::Aggregate { arg, planned, .. } => {
                    let values = match arg {
                        Some(a) => cast(&keep(a.evaluate(rows)?)?, &planned.input_type)
                            .map_err(arrow_err)?,
                        // count(*): a value for every row.
                        None => Arc::new(BooleanArray::from(vec![true; n])),
                    };
                    args.push(values);
                }
            }
        }
        let encoded = match &self.converter {
            Some(c) => Some(c.convert_columns(&keys).map_err(arrow_err)?),
            None => None,
        };
        let batch_groups = BatchGroups::of(encoded.as_ref(), n);
        let starts = self.window_starts(&keys, &batch_groups.firsts, now)?;
        let width = match self.spec.time_key {
            Some(_) => self.spec.width,
            None => ARRIVAL_WINDOW.as_nanos() as u64,
        };
        // Each aggregate's values, ordered group by group: one slice per group.
        let order = UInt32Array::from(batch_groups.order.clone());
        let args: Vec<ArrayRef> = args
            .iter()
            .map(|a| take(a, &order, None).map_err(arrow_err))
            .collect::<Result<_>>()?;
        for (g, (&first, &start)) in batch_groups.firsts.iter().zip(&starts).enumerate() {
            let mut key = start.to_be_bytes().to_vec();
            if let Some(encoded) = &encoded {
                key.extend_from_slice(encoded.row(first).data());
            }
            let (offset, len) = batch_groups.range(g);
            let values: Vec<ArrayRef> = args.iter().map(|a| a.slice(offset, len)).collect();
            self.open.update(&key, &values, || {
                Ok((
                    start,
                    start.saturating_add(width),
                    key_values(&keys, first)?,
                ))
            })?;
        }
        if self.open.state() > MAX_OPEN_STATE {
            return Ok(Some(self.open.take_all()));
        }
        Ok(None)
    }

    /// The window start of each batch group (ns since the epoch): from the time key, or by
    /// arrival.
    fn window_starts(&self, keys: &[ArrayRef], firsts: &[usize], now: u64) -> Result<Vec<u64>> {
        let Some(k) = self.spec.time_key else {
            let window = ARRIVAL_WINDOW.as_nanos() as u64;
            return Ok(vec![now - now % window; firsts.len()]);
        };
        let nanos = cast(&keys[k], &DataType::Timestamp(TimeUnit::Nanosecond, None))
            .and_then(|t| cast(&t, &DataType::Int64))
            .map_err(|e| PipelineError::arrow("aggregating", e))?;
        let nanos = nanos.as_primitive::<Int64Type>();
        Ok(firsts
            .iter()
            .map(|&r| {
                if nanos.is_null(r) {
                    0
                } else {
                    nanos.value(r).max(0) as u64
                }
            })
            .collect())
    }

    /// Takes the open groups whose window closed by `now` (ns since the epoch).
    pub(crate) fn take_closed(&mut self, now: u64) -> Windows {
        self.open.take_closed(now)
    }

    /// Takes every open group.
    pub(crate) fn take_all(&mut self) -> Windows {
        self.open.take_all()
    }
}

/// The key values of row `row`.
fn key_values(keys: &[ArrayRef], row: usize) -> Result<Vec<ScalarValue>> {
    keys.iter()
        .map(|k| ScalarValue::try_from_array(k, row))
        .collect::<std::result::Result<_, _>>()
        .map_err(|source| PipelineError::Evaluate {
            sql: "GROUP BY".into(),
            source,
        })
}

/// The groups of one batch: which rows belong to which group.
struct BatchGroups {
    /// The first row of each group.
    firsts: Vec<usize>,
    /// The rows, group after group.
    order: Vec<u32>,
    /// Where each group's rows start in `order` (one more entry: the end).
    offsets: Vec<usize>,
}

impl BatchGroups {
    /// Groups `n` rows by their encoded keys (one group without keys).
    fn of(encoded: Option<&arrow::row::Rows>, n: usize) -> BatchGroups {
        let Some(encoded) = encoded else {
            return BatchGroups {
                firsts: vec![0],
                order: (0..n as u32).collect(),
                offsets: vec![0, n],
            };
        };
        let mut index: HashMap<&[u8], usize> = HashMap::new();
        let mut firsts = Vec::new();
        let group_of_row: Vec<usize> = (0..n)
            .map(|i| {
                *index.entry(encoded.row(i).data()).or_insert_with(|| {
                    firsts.push(i);
                    firsts.len() - 1
                })
            })
            .collect();
        // Counting sort of the rows by group.
        let mut offsets = vec![0usize; firsts.len() + 1];
        for g in &group_of_row {
            offsets[g + 1] += 1;
        }
        for g in 0..firsts.len() {
            offsets[g + 1] += offsets[g];
        }
        let mut next = offsets.clone();
        let mut order = vec![0u32; n];
        for (row, g) in group_of_row.iter().enumerate() {
            order[next[*g]] = row as u32;
            next[*g] += 1;
        }
        BatchGroups {
            firsts,
            order,
            offsets,
        }
    }

    /// The rows of group `g` in the ordered values: (offset, length).
    fn range(&self, g: usize) -> (usize, usize) {
        (self.offsets[g], self.offsets[g + 1] - self.offsets[g])
    }
}

/// A plan error about `expr` (as written) of the statement at `origin`, where `expr` starts.
fn plan_error(origin: &Origin, expr: &Expr, message: String) -> PipelineError {
    PipelineError::plan_at(origin, expr.span(), message)
}

/// Compiles one aggregate output.
fn compile_aggregate(
    state: &SessionState,
    name: &str,
    e: &ResolvedExpr,
    call: Call,
    hidden: bool,
    origin: &Origin,
) -> Result<Output> {
    let function = call.function;
    if call.distinct && !function.distinct {
        return Err(plan_error(
            origin,
            &e.original,
            format!(
                "`{}`: {} does not take DISTINCT",
                e.original, function.names[0]
            ),
        ));
    }
    let original_arg = aggregate_call(&e.original).and_then(|c| c.arg);
    let arg = match (call.arg, original_arg) {
        (Some(arg), Some(original)) => Some(compile(
            state,
            &ResolvedExpr {
                original,
                expr: arg,
                columns: e.columns.clone(),
            },
            origin,
        )?),
        _ => None,
    };
    let arg_type = arg
        .as_ref()
        .map_or(DataType::Boolean, |a| a.data_type.clone());
    if let Some(arg) = &arg
        && !function.text
        && is_text(&arg.data_type)
    {
        return Err(plan_error(
            origin,
            &e.original,
            format!(
                "`{}` needs numbers or times, and `{}` is {}: write TRY_CAST({} AS DOUBLE) to read it as a number (NULL where it is not)",
                e.original, arg.sql, arg.data_type, arg.sql
            ),
        ));
    }
    let planned = PlannedAggregate::plan(state, function, call.distinct, &arg_type, name).map_err(
        |message| plan_error(origin, &e.original, format!("`{}`: {message}", e.original)),
    )?;
    Ok(Output::Aggregate {
        name: name.to_string(),
        planned: Arc::new(planned),
        arg,
        hidden,
    })
}

/// Compiles one key output, which `GROUP BY` must name (by its text, alias or `position`).
fn compile_key(
    state: &SessionState,
    name: &str,
    e: &ResolvedExpr,
    group_by: &[ResolvedExpr],
    position: usize,
    origin: &Origin,
) -> Result<CompiledExpr> {
    // An unknown function is reported as such, not as a key missing from GROUP BY.
    check_functions(state, &e.original)
        .map_err(|f| f.into_error(origin, &e.original, &format!("in `{}`", e.original)))?;
    let text = e.original.to_string();
    let grouped = group_by.iter().any(|g| {
        let g_text = g.original.to_string();
        g_text == text || g_text.eq_ignore_ascii_case(name) || g_text == position.to_string()
    });
    if !grouped {
        return Err(plan_error(
            origin,
            &e.original,
            format!(
                "`{text}` must be in GROUP BY or be one aggregate call ({})",
                functions::names()
            ),
        ));
    }
    compile(state, e, origin)
}

/// Whether `expr` calls an aggregate function Penstock does not compute (one DataFusion has).
fn is_other_aggregate(state: &SessionState, expr: &Expr) -> bool {
    matches!(expr, Expr::Function(f) if state
        .aggregate_functions()
        .contains_key(&f.name.to_string().to_lowercase()))
}

/// Whether `expr` is a function call with DISTINCT.
fn has_distinct(expr: &Expr) -> bool {
    matches!(expr, Expr::Function(f) if matches!(&f.args, FunctionArguments::List(l) if l.duplicate_treatment.is_some()))
}

/// The windows' spec: output names and order, the time key and its window length.
fn spec_of(outputs: &[Output], statement: &Statement<'_>, width: u64) -> Spec {
    let mut keys = Vec::new();
    let mut aggregates = Vec::new();
    let mut order = Vec::new();
    let mut timestamp_key = None;
    for o in outputs {
        match o {
            Output::Key { name, expr } => {
                if timestamp_key.is_none() && matches!(expr.data_type, DataType::Timestamp(..)) {
                    timestamp_key = Some(keys.len());
                }
                order.push(Ok(keys.len()));
                keys.push(name.clone());
            }
            Output::Aggregate {
                name,
                planned,
                hidden,
                ..
            } => {
                order.push(Err(aggregates.len()));
                aggregates.push(AggregateSpec {
                    name: name.clone(),
                    planned: Arc::clone(planned),
                    hidden: *hidden,
                });
            }
        }
    }
    let time_key = keys
        .iter()
        .position(|name| name.eq_ignore_ascii_case("time"))
        .or(timestamp_key);
    Spec {
        id: format!(
            "{} ({}): {}",
            statement.pipeline, statement.origin, statement.sql
        ),
        sink: statement.sink.to_string(),
        pipeline: statement.pipeline.to_string(),
        keys,
        time_key,
        width,
        aggregates,
        order,
        having: None,
    }
}

/// Plans `HAVING` over the outputs, each with its own type.
fn compile_having(
    state: &SessionState,
    having: &Having,
    outputs: &[Output],
    origin: &Origin,
) -> Result<HavingSpec> {
    let context = format!("in HAVING `{}`", having.original);
    let having_error = |f: PlanFailure| f.into_error(origin, &having.original, &context);
    let fields: Vec<Field> = outputs
        .iter()
        .map(|o| match o {
            Output::Key { name, expr } => Field::new(name, expr.data_type.clone(), true),
            Output::Aggregate { name, planned, .. } => {
                Field::new(name, planned.output_type.clone(), true)
            }
        })
        .collect();
    let schema = Arc::new(Schema::new(fields));
    let (physical, data_type) = plan(state, &having.expr, &schema).map_err(having_error)?;
    if !matches!(data_type, DataType::Boolean | DataType::Null) {
        return Err(having_error(
            format!("is {data_type}, not a boolean").into(),
        ));
    }
    Ok(HavingSpec {
        sql: having.original.to_string(),
        schema,
        physical,
    })
}
