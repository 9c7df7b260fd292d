//! `INSERT INTO sink SELECT keys..., agg(...) FROM t [WHERE p] GROUP BY keys [HAVING c]`:
//! derived metrics.
//!
//! Every batch is grouped by its keys with vectorized row encoding; each batch group's partial
//! aggregates fold into the statement's open [`Windows`], which keep them until the window
//! closes. Every aggregate output becomes a metric named by its alias, with one data point per
//! group and window: `count`, `count(DISTINCT ...)` and `sum` as delta sums (over the window,
//! `start_time_unix_nano` to `time_unix_nano`), `min`, `max` and `avg` as gauges. The group
//! key named `time` (or the first timestamp key, e.g. `date_bin(INTERVAL '1 minute',
//! time_unix_nano)`) gives the window; the other keys are the points' attributes.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray};
use arrow::compute::{cast, filter};
use arrow::datatypes::{DataType, Field, Float64Type, Int64Type, Schema, TimeUnit};
use arrow::row::{RowConverter, SortField};
use datafusion::common::ScalarValue;
use datafusion::execution::context::SessionState;
use datafusion::sql::sqlparser::ast::{
    DuplicateTreatment, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, Value,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, any_value};
use penstock_dialect::{Having, ResolvedExpr};

use crate::error::{PipelineError, Result};
use crate::expr::{CompiledExpr, compile, plan};
use crate::rows::Rows;
use crate::typecheck::evaluate_on_one_row;
use crate::windows::{
    ARRIVAL_WINDOW, Acc, AggregateSpec, Func, Group, HavingSpec, MAX_OPEN_STATE, Spec, Windows,
};

impl Func {
    fn parse(name: &str, distinct: bool) -> Option<Func> {
        Some(match (name.to_lowercase().as_str(), distinct) {
            ("count", false) => Func::Count,
            ("count", true) => Func::CountDistinct,
            ("sum", false) => Func::Sum,
            ("min", _) => Func::Min,
            ("max", _) => Func::Max,
            ("avg" | "mean", false) => Func::Avg,
            _ => return None,
        })
    }
}

/// One output column.
pub(crate) enum Output {
    Key {
        name: String,
        expr: CompiledExpr,
    },
    Aggregate {
        name: String,
        func: Func,
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

/// `f(arg)`, `f(DISTINCT arg)` or `count(*)`: the function and its single argument (None for
/// `*`).
fn aggregate_call(expr: &Expr) -> Option<(Func, Option<Expr>)> {
    let Expr::Function(f) = expr else { return None };
    let FunctionArguments::List(list) = &f.args else {
        return None;
    };
    if f.filter.is_some() || f.over.is_some() {
        return None;
    }
    let distinct = matches!(list.duplicate_treatment, Some(DuplicateTreatment::Distinct));
    let func = Func::parse(&f.name.to_string(), distinct)?;
    match list.args.as_slice() {
        [FunctionArg::Unnamed(FunctionArgExpr::Wildcard)] if func == Func::Count => {
            Some((func, None))
        }
        [FunctionArg::Unnamed(FunctionArgExpr::Expr(e))] => Some((func, Some(e.clone()))),
        _ => None,
    }
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
    pub(crate) origin: &'a str,
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
        let plan_error = |message: String| PipelineError::Plan {
            origin: origin.to_string(),
            message,
        };
        let hidden = having.map_or(&[][..], |h| &h.hidden[..]);
        let mut compiled = Vec::new();
        let mut width = 0;
        for (i, (name, e)) in outputs.iter().chain(hidden).enumerate() {
            let is_hidden = i >= outputs.len();
            match aggregate_call(&e.expr) {
                Some((func, arg)) => {
                    let original_arg = aggregate_call(&e.original).and_then(|(_, a)| a);
                    let arg = match (arg, original_arg) {
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
                    if let Some(arg) = &arg
                        && matches!(func, Func::Sum | Func::Avg | Func::Min | Func::Max)
                        && matches!(
                            arg.data_type,
                            DataType::Utf8
                                | DataType::LargeUtf8
                                | DataType::Utf8View
                                | DataType::Binary
                                | DataType::LargeBinary
                        )
                    {
                        return Err(plan_error(format!(
                            "`{}` needs numbers or times, and `{}` is {}: write TRY_CAST({} AS DOUBLE) to read it as a number (NULL where it is not)",
                            e.original, arg.sql, arg.data_type, arg.sql
                        )));
                    }
                    compiled.push(Output::Aggregate {
                        name: name.clone(),
                        func,
                        arg,
                        hidden: is_hidden,
                    });
                }
                None if is_hidden || has_distinct(&e.expr) => {
                    return Err(plan_error(format!(
                        "`{}` is not an aggregate Penstock computes: count(*), count(x), count(DISTINCT x), sum, min, max, avg (only count, min and max take DISTINCT)",
                        e.original
                    )));
                }
                None => {
                    let text = e.original.to_string();
                    let position = compiled.len() + 1;
                    let grouped = group_by.iter().any(|g| {
                        let g_text = g.original.to_string();
                        g_text == text
                            || g_text.eq_ignore_ascii_case(name)
                            || g_text == position.to_string()
                    });
                    if !grouped {
                        return Err(plan_error(format!(
                            "`{text}` must be in GROUP BY or be one aggregate call (count, sum, min, max, avg)"
                        )));
                    }
                    let expr = compile(state, e, origin)?;
                    if name.eq_ignore_ascii_case("time")
                        || matches!(expr.data_type, DataType::Timestamp(..))
                    {
                        width = width.max(window_width(state, &e.original));
                    }
                    compiled.push(Output::Key {
                        name: name.clone(),
                        expr,
                    });
                }
            }
        }
        if !compiled
            .iter()
            .any(|o| matches!(o, Output::Aggregate { hidden: false, .. }))
        {
            return Err(plan_error(
                "an aggregation needs at least one aggregate (count, sum, min, max, avg)".into(),
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
    /// sent now, when they hold more than [`MAX_OPEN_STATE`].
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
        let mut args: Vec<(Func, Option<ArrayRef>)> = Vec::new();
        for o in &self.outputs {
            match o {
                Output::Key { expr, .. } => keys.push(keep(expr.evaluate(rows)?)?),
                Output::Aggregate { func, arg, .. } => {
                    let values = match arg {
                        Some(a) => Some(keep(a.evaluate(rows)?)?),
                        None => None,
                    };
                    args.push((*func, values));
                }
            }
        }
        // Batch groups by the row encoding of the keys.
        let encoded = match &self.converter {
            Some(c) => Some(c.convert_columns(&keys).map_err(arrow_err)?),
            None => None,
        };
        let (group_of_row, firsts) = match &encoded {
            None => (vec![0usize; n], vec![0usize]),
            Some(encoded) => {
                let mut groups: HashMap<&[u8], usize> = HashMap::new();
                let mut firsts = Vec::new();
                let group_of_row = (0..n)
                    .map(|i| {
                        *groups.entry(encoded.row(i).data()).or_insert_with(|| {
                            firsts.push(i);
                            firsts.len() - 1
                        })
                    })
                    .collect::<Vec<_>>();
                (group_of_row, firsts)
            }
        };
        let spec = &self.spec;
        let starts: Vec<u64> = match spec.time_key {
            Some(k) => {
                let nanos = cast(&keys[k], &DataType::Timestamp(TimeUnit::Nanosecond, None))
                    .and_then(|t| cast(&t, &DataType::Int64))
                    .map_err(arrow_err)?;
                let nanos = nanos.as_primitive::<Int64Type>();
                firsts
                    .iter()
                    .map(|&r| {
                        if nanos.is_null(r) {
                            0
                        } else {
                            nanos.value(r).max(0) as u64
                        }
                    })
                    .collect()
            }
            None => {
                let window = ARRIVAL_WINDOW.as_nanos() as u64;
                vec![now - now % window; firsts.len()]
            }
        };
        let width = match spec.time_key {
            Some(_) => spec.width,
            None => ARRIVAL_WINDOW.as_nanos() as u64,
        };
        let mut groups: Vec<Group> = firsts
            .iter()
            .zip(&starts)
            .map(|(&r, &start)| {
                Ok(Group {
                    start,
                    end: start.saturating_add(width),
                    keys: keys
                        .iter()
                        .map(|k| ScalarValue::try_from_array(k, r))
                        .collect::<std::result::Result<_, _>>()
                        .map_err(|source| PipelineError::Evaluate {
                            sql: "GROUP BY".into(),
                            source,
                        })?,
                    accs: args.iter().map(|(f, _)| Acc::new(*f)).collect(),
                })
            })
            .collect::<Result<_>>()?;
        for (a, (func, values)) in args.iter().enumerate() {
            accumulate(*func, values.as_ref(), &group_of_row, &mut groups, a)?;
        }
        for (group, &first) in groups.into_iter().zip(&firsts) {
            let mut key = group.start.to_be_bytes().to_vec();
            if let Some(encoded) = &encoded {
                key.extend_from_slice(encoded.row(first).data());
            }
            self.open.add(&key, group);
        }
        if self.open.state() > MAX_OPEN_STATE {
            return Ok(Some(self.open.take_all()));
        }
        Ok(None)
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

/// Whether `expr` is a function call with DISTINCT.
fn has_distinct(expr: &Expr) -> bool {
    matches!(expr, Expr::Function(f) if matches!(&f.args, FunctionArguments::List(l) if l.duplicate_treatment.is_some()))
}

/// Folds the values of aggregate `a` (None for `count(*)`) into the groups of their rows.
fn accumulate(
    func: Func,
    values: Option<&ArrayRef>,
    group_of_row: &[usize],
    groups: &mut [Group],
    a: usize,
) -> Result<()> {
    let Some(values) = values else {
        for g in group_of_row {
            groups[*g].accs[a].add(0.0);
        }
        return Ok(());
    };
    let arrow_err = |e| PipelineError::arrow("aggregating", e);
    match func {
        Func::CountDistinct => {
            let converter = RowConverter::new(vec![SortField::new(values.data_type().clone())])
                .map_err(arrow_err)?;
            let encoded = converter
                .convert_columns(std::slice::from_ref(values))
                .map_err(arrow_err)?;
            for (row, g) in group_of_row.iter().enumerate() {
                if values.is_null(row) {
                    continue;
                }
                let mut hasher = DefaultHasher::new();
                encoded.row(row).data().hash(&mut hasher);
                if let Acc::Distinct(set) = &mut groups[*g].accs[a] {
                    set.insert(hasher.finish());
                }
            }
        }
        Func::Count => {
            for (row, g) in group_of_row.iter().enumerate() {
                if !values.is_null(row) {
                    groups[*g].accs[a].add(0.0);
                }
            }
        }
        _ => {
            let numbers = cast(values, &DataType::Float64).map_err(arrow_err)?;
            let numbers = numbers.as_primitive::<Float64Type>();
            for (row, g) in group_of_row.iter().enumerate() {
                if !numbers.is_null(row) {
                    groups[*g].accs[a].add(numbers.value(row));
                }
            }
        }
    }
    Ok(())
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
                name, func, hidden, ..
            } => {
                order.push(Err(aggregates.len()));
                aggregates.push(AggregateSpec {
                    name: name.clone(),
                    func: *func,
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

/// Plans `HAVING` over the outputs: keys with their types, counts as BIGINT, other aggregates
/// as DOUBLE.
fn compile_having(
    state: &SessionState,
    having: &Having,
    outputs: &[Output],
    origin: &str,
) -> Result<HavingSpec> {
    let plan_error = |message: String| PipelineError::Plan {
        origin: origin.to_string(),
        message: format!("in HAVING `{}`: {message}", having.original),
    };
    let fields: Vec<Field> = outputs
        .iter()
        .map(|o| match o {
            Output::Key { name, expr } => Field::new(name, expr.data_type.clone(), true),
            Output::Aggregate { name, func, .. } => Field::new(
                name,
                match func {
                    Func::Count | Func::CountDistinct => DataType::Int64,
                    _ => DataType::Float64,
                },
                true,
            ),
        })
        .collect();
    let schema = Arc::new(Schema::new(fields));
    let (physical, data_type) = plan(state, &having.expr, &schema).map_err(plan_error)?;
    if !matches!(data_type, DataType::Boolean | DataType::Null) {
        return Err(plan_error(format!("is {data_type}, not a boolean")));
    }
    Ok(HavingSpec {
        sql: having.original.to_string(),
        schema,
        physical,
    })
}

/// The value at `row` of `array` as an attribute value (None when null).
pub(crate) fn any_value(array: &ArrayRef, row: usize) -> Option<AnyValue> {
    if array.is_null(row) {
        return None;
    }
    use any_value::Value as V;
    let value = match array.data_type() {
        DataType::Boolean => V::BoolValue(array.as_boolean().value(row)),
        DataType::Float16 | DataType::Float32 | DataType::Float64 => {
            let v = cast(&array.slice(row, 1), &DataType::Float64).ok()?;
            V::DoubleValue(v.as_primitive::<Float64Type>().value(0))
        }
        t if t.is_integer() => {
            let v = cast(&array.slice(row, 1), &DataType::Int64).ok()?;
            V::IntValue(v.as_primitive::<Int64Type>().value(0))
        }
        DataType::Binary | DataType::LargeBinary | DataType::FixedSizeBinary(_) => {
            let v = cast(&array.slice(row, 1), &DataType::Binary).ok()?;
            V::BytesValue(v.as_binary::<i32>().value(0).to_vec())
        }
        _ => {
            let v = cast(&array.slice(row, 1), &DataType::Utf8).ok()?;
            V::StringValue(v.as_string::<i32>().value(0).to_string())
        }
    };
    Some(AnyValue { value: Some(value) })
}
