//! Closed windows as derived metrics: one data point per group that passes `HAVING`, per
//! aggregate output.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Float64Type, Int64Type};
use datafusion::common::ScalarValue;
use penstock_engine::OtapBatch;

use super::batch::{MetricsBuilder, PointValue};
use super::functions::MetricKind;
use super::windows::{Group, HavingSpec, Spec, Windows};
use crate::error::{PipelineError, Result};

/// Whether values of `ty` are text (or bytes): sent as attributes, never as a metric value.
pub(crate) fn is_text(ty: &DataType) -> bool {
    matches!(
        ty,
        DataType::Utf8
            | DataType::LargeUtf8
            | DataType::Utf8View
            | DataType::Binary
            | DataType::LargeBinary
            | DataType::BinaryView
            | DataType::FixedSizeBinary(_)
    )
}

/// A closed group: its window, keys and every aggregate's value.
struct Closed {
    group: Group,
    values: Vec<ScalarValue>,
}

impl Windows {
    /// The derived metrics: one data point per group that passes `HAVING`, per aggregate
    /// output with a number value. None when no group passes.
    pub fn into_batch(self) -> Result<Option<OtapBatch>> {
        let spec = Arc::clone(&self.spec);
        let mut closed = Vec::with_capacity(self.groups.len());
        for mut group in self.groups.into_values() {
            let values = group
                .accs
                .iter_mut()
                .zip(&spec.aggregates)
                .map(|(acc, a)| {
                    acc.evaluate().map_err(|source| PipelineError::Evaluate {
                        sql: a.name.clone(),
                        source,
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            closed.push(Closed { group, values });
        }
        closed.sort_by_cached_key(|c| (c.group.start, c.group.end, format!("{:?}", c.group.keys)));
        if let Some(having) = &spec.having {
            let keep = having_mask(&spec, having, &closed)?;
            closed = closed
                .into_iter()
                .zip(keep)
                .filter(|(_, keep)| *keep == Some(true))
                .map(|(c, _)| c)
                .collect();
        }
        if closed.is_empty() {
            return Ok(None);
        }
        derived_metrics(&spec, &closed).map(Some)
    }
}

/// The metrics of `closed` as an OTAP batch.
fn derived_metrics(spec: &Spec, closed: &[Closed]) -> Result<OtapBatch> {
    let attributes: Vec<Vec<(&str, &ScalarValue)>> =
        closed.iter().map(|c| attributes(spec, c)).collect();
    let mut out = MetricsBuilder::new(format!("penstock/{}", spec.pipeline));
    for (a, aggregate) in spec.aggregates.iter().enumerate() {
        if aggregate.hidden || is_text(&aggregate.planned.output_type) {
            continue;
        }
        let kind = match aggregate.planned.function.metric {
            MetricKind::MonotonicSum if aggregate.planned.is_distinct() => MetricKind::Sum,
            kind => kind,
        };
        out.metric(&aggregate.name, kind)?;
        for (c, attributes) in closed.iter().zip(&attributes) {
            let Some(value) = number(&c.values[a]) else {
                continue;
            };
            let g = &c.group;
            let start = if g.start < g.end { g.start } else { 0 };
            out.point(start, g.end, value, attributes)?;
        }
    }
    out.finish()
}

/// A group's point attributes: its keys (but the time key), then its text-valued aggregates.
fn attributes<'a>(spec: &'a Spec, closed: &'a Closed) -> Vec<(&'a str, &'a ScalarValue)> {
    let keys = spec
        .keys
        .iter()
        .zip(&closed.group.keys)
        .enumerate()
        .filter(|(k, _)| Some(*k) != spec.time_key)
        .map(|(_, kv)| kv);
    let texts = spec
        .aggregates
        .iter()
        .zip(&closed.values)
        .filter(|(a, _)| !a.hidden && is_text(&a.planned.output_type))
        .map(|(a, v)| (&a.name, v));
    keys.chain(texts)
        .map(|(name, v)| (name.as_str(), v))
        .collect()
}

/// An aggregate's value as a data point value: integers (and exact decimals that fit) as
/// integers, everything else that is a number as a double. None for NULL and text.
fn number(value: &ScalarValue) -> Option<PointValue> {
    if value.is_null() {
        return None;
    }
    let array = value.to_array().ok()?;
    let ty = array.data_type();
    if let DataType::Decimal128(_, 0) = ty
        && let Ok(v) = cast(&array, &DataType::Int64)
        && v.is_valid(0)
    {
        return Some(PointValue::Int(v.as_primitive::<Int64Type>().value(0)));
    }
    if ty.is_integer() || matches!(ty, DataType::Boolean | DataType::Timestamp(..)) {
        let as_int = cast(&array, &DataType::Int64).ok()?;
        if as_int.is_valid(0) {
            return Some(PointValue::Int(as_int.as_primitive::<Int64Type>().value(0)));
        }
    }
    if is_text(ty) {
        return None;
    }
    let double = cast(&array, &DataType::Float64).ok()?;
    double
        .is_valid(0)
        .then(|| PointValue::Double(double.as_primitive::<Float64Type>().value(0)))
}

/// Whether each group passes `HAVING` (null: it does not).
fn having_mask(spec: &Spec, having: &HavingSpec, closed: &[Closed]) -> Result<Vec<Option<bool>>> {
    let evaluate_err = |source| PipelineError::Evaluate {
        sql: having.sql.clone(),
        source,
    };
    let arrow_err = |e| PipelineError::arrow("evaluating HAVING", e);
    let mut columns: Vec<ArrayRef> = Vec::new();
    for (field, output) in having.schema.fields().iter().zip(&spec.order) {
        let values = match output {
            Ok(k) => ScalarValue::iter_to_array(closed.iter().map(|c| c.group.keys[*k].clone())),
            Err(a) => ScalarValue::iter_to_array(closed.iter().map(|c| c.values[*a].clone())),
        }
        .map_err(evaluate_err)?;
        columns.push(cast(&values, field.data_type()).map_err(arrow_err)?);
    }
    let input = RecordBatch::try_new(Arc::clone(&having.schema), columns).map_err(arrow_err)?;
    let result = having
        .physical
        .evaluate(&input)
        .and_then(|v| v.into_array(closed.len()))
        .map_err(evaluate_err)?;
    let bools = result
        .as_boolean_opt()
        .ok_or_else(|| PipelineError::Execute(format!("HAVING `{}` is not boolean", having.sql)))?;
    Ok(bools.iter().collect())
}
