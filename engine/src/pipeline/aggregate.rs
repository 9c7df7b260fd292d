//! `INSERT INTO sink SELECT keys..., agg(...) FROM t [WHERE p] GROUP BY keys`: derived metrics.
//!
//! Each batch is aggregated on its own; every aggregate output becomes a metric named by its
//! alias, with one data point per group: `count` and `sum` as delta sums (a backend adds them
//! up), `min`, `max` and `avg` as gauges. The group key named `time` (or the first timestamp
//! key, e.g. `date_bin(INTERVAL '1 minute', time_unix_nano)`) is the point's time; the other
//! keys are its attributes.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, UInt32Array};
use arrow::compute::{cast, filter, take};
use arrow::datatypes::{DataType, Int64Type, TimeUnit};
use arrow::row::{RowConverter, SortField};
use datafusion::execution::context::SessionState;
use datafusion::sql::sqlparser::ast::{Expr, FunctionArg, FunctionArgExpr, FunctionArguments};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
    metric, number_data_point,
};
use penstock_dialect::ResolvedExpr;
use prost::Message;

use super::error::{PipelineError, Result};
use super::expr::{CompiledExpr, compile};
use super::rows::Rows;
use crate::batch::OtapBatch;
use crate::schema::Signal;

/// An aggregate function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Func {
    Count,
    Sum,
    Min,
    Max,
    Avg,
}

impl Func {
    fn parse(name: &str) -> Option<Func> {
        Some(match name.to_lowercase().as_str() {
            "count" => Func::Count,
            "sum" => Func::Sum,
            "min" => Func::Min,
            "max" => Func::Max,
            "avg" | "mean" => Func::Avg,
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
    },
}

/// A compiled aggregation.
pub(crate) struct Aggregation {
    pub(crate) outputs: Vec<Output>,
    pipeline: String,
}

/// `f(arg)` or `count(*)`: the function and its single argument (None for `*`).
fn aggregate_call(expr: &Expr) -> Option<(Func, Option<Expr>)> {
    let Expr::Function(f) = expr else { return None };
    let func = Func::parse(&f.name.to_string())?;
    let FunctionArguments::List(list) = &f.args else {
        return None;
    };
    if list.duplicate_treatment.is_some() || f.filter.is_some() || f.over.is_some() {
        return None;
    }
    match list.args.as_slice() {
        [FunctionArg::Unnamed(FunctionArgExpr::Wildcard)] if func == Func::Count => {
            Some((func, None))
        }
        [FunctionArg::Unnamed(FunctionArgExpr::Expr(e))] => Some((func, Some(e.clone()))),
        _ => None,
    }
}

impl Aggregation {
    /// Compiles the outputs; `group_by` items must name key outputs (by alias, position or
    /// text), and every other output must be one aggregate call.
    pub(crate) fn compile(
        state: &SessionState,
        outputs: &[(String, ResolvedExpr)],
        group_by: &[ResolvedExpr],
        origin: &str,
        pipeline: &str,
    ) -> Result<Aggregation> {
        let plan_error = |message: String| PipelineError::Plan {
            origin: origin.to_string(),
            message,
        };
        let mut compiled = Vec::new();
        for (name, e) in outputs {
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
                    compiled.push(Output::Aggregate {
                        name: name.clone(),
                        func,
                        arg,
                    });
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
                    compiled.push(Output::Key {
                        name: name.clone(),
                        expr: compile(state, e, origin)?,
                    });
                }
            }
        }
        if !compiled
            .iter()
            .any(|o| matches!(o, Output::Aggregate { .. }))
        {
            return Err(plan_error(
                "an aggregation needs at least one aggregate (count, sum, min, max, avg)".into(),
            ));
        }
        Ok(Aggregation {
            outputs: compiled,
            pipeline: pipeline.to_string(),
        })
    }

    /// Aggregates the rows of `rows` where `mask` holds into a metrics batch.
    pub(crate) fn run(&self, rows: &Rows<'_>, mask: &BooleanArray) -> Result<Option<OtapBatch>> {
        if mask.true_count() == 0 {
            return Ok(None);
        }
        let arrow_err = |e| PipelineError::arrow("aggregating", e);
        let keep = |a: ArrayRef| filter(&a, mask).map_err(arrow_err);
        let mut keys: Vec<(&str, ArrayRef)> = Vec::new();
        let mut aggs: Vec<(&str, Func, Option<ArrayRef>)> = Vec::new();
        for o in &self.outputs {
            match o {
                Output::Key { name, expr } => keys.push((name, keep(expr.evaluate(rows)?)?)),
                Output::Aggregate { name, func, arg } => {
                    let values = match arg {
                        Some(a) => Some(
                            cast(&keep(a.evaluate(rows)?)?, &DataType::Float64)
                                .map_err(arrow_err)?,
                        ),
                        None => None,
                    };
                    aggs.push((name, *func, values));
                }
            }
        }
        let n = mask.true_count();
        // Group ids by the row encoding of the keys.
        let (group_of_row, firsts) = if keys.is_empty() {
            (vec![0usize; n], vec![0u32])
        } else {
            let converter = RowConverter::new(
                keys.iter()
                    .map(|(_, a)| SortField::new(a.data_type().clone()))
                    .collect(),
            )
            .map_err(arrow_err)?;
            let encoded = converter
                .convert_columns(&keys.iter().map(|(_, a)| Arc::clone(a)).collect::<Vec<_>>())
                .map_err(arrow_err)?;
            let mut groups: HashMap<&[u8], usize> = HashMap::new();
            let mut firsts = Vec::new();
            let group_of_row = (0..n)
                .map(|i| {
                    *groups.entry(encoded.row(i).data()).or_insert_with(|| {
                        firsts.push(i as u32);
                        firsts.len() - 1
                    })
                })
                .collect::<Vec<_>>();
            (group_of_row, firsts)
        };
        let groups = firsts.len();
        let firsts = UInt32Array::from(firsts);
        let key_values: Vec<(&str, ArrayRef)> = keys
            .iter()
            .map(|(name, a)| Ok((*name, take(a, &firsts, None).map_err(arrow_err)?)))
            .collect::<Result<_>>()?;
        let time_key = key_values
            .iter()
            .position(|(name, _)| name.eq_ignore_ascii_case("time"))
            .or_else(|| {
                key_values
                    .iter()
                    .position(|(_, a)| matches!(a.data_type(), DataType::Timestamp(..)))
            });
        let times: Vec<u64> = match time_key {
            Some(k) => {
                let nanos = cast(
                    &key_values[k].1,
                    &DataType::Timestamp(TimeUnit::Nanosecond, None),
                )
                .and_then(|t| cast(&t, &DataType::Int64))
                .map_err(arrow_err)?;
                let nanos = nanos.as_primitive::<Int64Type>();
                (0..groups).map(|g| nanos.value(g).max(0) as u64).collect()
            }
            None => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64);
                vec![now; groups]
            }
        };
        let attributes: Vec<Vec<KeyValue>> = (0..groups)
            .map(|g| {
                key_values
                    .iter()
                    .enumerate()
                    .filter(|(k, _)| Some(*k) != time_key)
                    .filter_map(|(_, (name, a))| {
                        any_value(a, g).map(|v| KeyValue {
                            key: name.to_string(),
                            value: Some(v),
                            ..Default::default()
                        })
                    })
                    .collect()
            })
            .collect();
        let mut metrics = Vec::new();
        for (name, func, values) in &aggs {
            let mut count = vec![0u64; groups];
            let mut acc = vec![None::<f64>; groups];
            let values = values
                .as_ref()
                .map(|v| v.as_primitive::<arrow::datatypes::Float64Type>());
            for (row, g) in group_of_row.iter().enumerate() {
                let value = match values {
                    None => None,
                    Some(v) if v.is_null(row) => continue,
                    Some(v) => Some(v.value(row)),
                };
                count[*g] += 1;
                if let Some(v) = value {
                    acc[*g] = Some(match (func, acc[*g]) {
                        (_, None) => v,
                        (Func::Min, Some(a)) => a.min(v),
                        (Func::Max, Some(a)) => a.max(v),
                        (_, Some(a)) => a + v,
                    });
                }
            }
            let points: Vec<NumberDataPoint> = (0..groups)
                .filter_map(|g| {
                    let value = match func {
                        Func::Count => number_data_point::Value::AsInt(count[g] as i64),
                        Func::Avg => number_data_point::Value::AsDouble(acc[g]? / count[g] as f64),
                        _ => number_data_point::Value::AsDouble(acc[g]?),
                    };
                    Some(NumberDataPoint {
                        attributes: attributes[g].clone(),
                        time_unix_nano: times[g],
                        value: Some(value),
                        ..Default::default()
                    })
                })
                .collect();
            let data = match func {
                Func::Count | Func::Sum => metric::Data::Sum(Sum {
                    data_points: points,
                    aggregation_temporality: AggregationTemporality::Delta as i32,
                    is_monotonic: *func == Func::Count,
                }),
                _ => metric::Data::Gauge(Gauge {
                    data_points: points,
                }),
            };
            metrics.push(Metric {
                name: name.to_string(),
                data: Some(data),
                ..Default::default()
            });
        }
        let request = ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                scope_metrics: vec![ScopeMetrics {
                    scope: Some(InstrumentationScope {
                        name: format!("penstock/{}", self.pipeline),
                        ..Default::default()
                    }),
                    metrics,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let mut batches = crate::otlp::json::decode(Signal::Metrics, &request.encode_to_vec())?;
        Ok(batches.pop())
    }
}

/// The value at `row` of `array` as an attribute value (None when null).
fn any_value(array: &ArrayRef, row: usize) -> Option<AnyValue> {
    if array.is_null(row) {
        return None;
    }
    use any_value::Value as V;
    let value = match array.data_type() {
        DataType::Boolean => V::BoolValue(array.as_boolean().value(row)),
        DataType::Float16 | DataType::Float32 | DataType::Float64 => {
            let v = cast(&array.slice(row, 1), &DataType::Float64).ok()?;
            V::DoubleValue(v.as_primitive::<arrow::datatypes::Float64Type>().value(0))
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
