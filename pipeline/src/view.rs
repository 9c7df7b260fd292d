//! The columns an expression reads, assembled for the rows of one row space: table columns are
//! cast to their SQL types, attributes are looked up by parent id in their attribute tables.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, Float64Array, RecordBatch, RecordBatchOptions, StringArray,
    TimestampNanosecondArray,
};
use arrow::compute::cast;
use arrow::datatypes::{
    DataType, DurationNanosecondType, Field, Int64Type, Schema, SchemaRef, TimeUnit,
    TimestampNanosecondType, UInt8Type,
};
use penstock_dialect::model::{AttrScope, ColumnRef, SqlType, Table};

use crate::columns::{self, Column, Nulls, Read};
use crate::error::{PipelineError, Result};
use crate::kernels::attrs::lookup;
use crate::rows::{Rows, attrs_of, cast_or_null};
use crate::types::data_type;
use penstock_engine::schema::PayloadType;
use penstock_engine::schema::consts::{self, metric_type, value_type};
use penstock_engine::value::{Scalar, ValueView};

/// The schema of the batch an expression reading `columns` is evaluated on.
pub(crate) fn schema_of(columns: &[ColumnRef]) -> SchemaRef {
    Arc::new(Schema::new(
        columns
            .iter()
            .map(|c| Field::new(c.column_name(), data_type(c.sql_type()), true))
            .collect::<Vec<_>>(),
    ))
}

/// Assembles `columns` for `rows`, in `schema`.
pub(crate) fn assemble(
    rows: &Rows<'_>,
    columns: &[ColumnRef],
    schema: &SchemaRef,
) -> Result<RecordBatch> {
    let arrays = columns
        .iter()
        .map(|c| column(rows, c))
        .collect::<Result<Vec<_>>>()?;
    let options = RecordBatchOptions::new().with_row_count(Some(rows.len()));
    RecordBatch::try_new_with_options(Arc::clone(schema), arrays, &options)
        .map_err(|e| PipelineError::arrow("assembling expression columns", e))
}

/// One column, one value per row.
pub(crate) fn column(rows: &Rows<'_>, column: &ColumnRef) -> Result<ArrayRef> {
    match column {
        ColumnRef::Attr { scope, key, ty } => {
            let parents = rows.attr_parents(*scope)?;
            let (table, kind) = match scope {
                AttrScope::Record => (attrs_of(rows.space), attrs_of(rows.space)),
                AttrScope::Resource => (PayloadType::ResourceAttrs, PayloadType::ResourceAttrs),
                AttrScope::Scope => (PayloadType::ScopeAttrs, PayloadType::ScopeAttrs),
            };
            lookup(rows.batch.get(table), kind, key, *ty, &parents)
        }
        ColumnRef::Field(field) => {
            let ty = data_type(field.ty);
            let table = match rows.space {
                PayloadType::Logs => Table::Logs,
                PayloadType::Spans => Table::Spans,
                _ => Table::Metrics,
            };
            let spec = columns::lookup(table, field.name).ok_or_else(|| {
                PipelineError::Execute(format!("{table} has no column {}", field.name))
            })?;
            let array = field_array(rows, spec)?;
            let array = cast_or_null(array, &ty, rows.len())?;
            if spec.nulls == Nulls::Null || array.null_count() == 0 {
                Ok(array)
            } else {
                with_default(&array)
            }
        }
    }
}

/// A primitive array with nulls replaced by zero.
fn zero_filled<T: arrow::datatypes::ArrowPrimitiveType>(array: &ArrayRef) -> ArrayRef {
    let filled: arrow::array::PrimitiveArray<T> = array
        .as_primitive::<T>()
        .iter()
        .map(|v| Some(v.unwrap_or_default()))
        .collect();
    Arc::new(filled)
}

/// `array` with nulls replaced by the type's default.
fn with_default(array: &ArrayRef) -> Result<ArrayRef> {
    use arrow::datatypes::{Int32Type, UInt32Type, UInt64Type};
    Ok(match array.data_type() {
        DataType::Utf8 => Arc::new(
            array
                .as_string::<i32>()
                .iter()
                .map(|v| Some(v.unwrap_or("")))
                .collect::<StringArray>(),
        ),
        DataType::Int32 => zero_filled::<Int32Type>(array),
        DataType::Int64 => zero_filled::<Int64Type>(array),
        DataType::UInt32 => zero_filled::<UInt32Type>(array),
        DataType::UInt64 => zero_filled::<UInt64Type>(array),
        DataType::Boolean => Arc::new(
            array
                .as_boolean()
                .iter()
                .map(|v| Some(v.unwrap_or(false)))
                .collect::<arrow::array::BooleanArray>(),
        ),
        _ => Arc::clone(array),
    })
}

/// The physical column behind a field, before the cast to its SQL type.
fn field_array(rows: &Rows<'_>, column: &Column) -> Result<Option<ArrayRef>> {
    match column.read {
        Read::Own => Ok(rows.own(column.path)),
        Read::Root => rows.root_column(column.path),
        Read::Body => Ok(rows.own(column.path).map(|b| body_text(&b)).transpose()?),
        Read::Duration => Ok(rows
            .own(column.path)
            .map(|d| cast(&d, &DataType::Int64))
            .transpose()
            .map_err(|e| PipelineError::arrow("reading durations", e))?),
        Read::EndTime => end_time(rows).map(Some),
        Read::MetricType => metric_type(rows, column.path),
        Read::NumberValue => number_value(rows),
    }
}

fn end_time(rows: &Rows<'_>) -> Result<ArrayRef> {
    let ty = data_type(SqlType::Timestamp);
    let start = cast_or_null(rows.own(&["start_time_unix_nano"]), &ty, rows.len())?;
    let duration = cast_or_null(
        rows.own(&["duration_time_unix_nano"]),
        &DataType::Duration(TimeUnit::Nanosecond),
        rows.len(),
    )?;
    let start = start.as_primitive::<TimestampNanosecondType>();
    let duration = duration.as_primitive::<DurationNanosecondType>();
    let end: TimestampNanosecondArray = start
        .iter()
        .zip(duration.iter())
        .map(|(s, d)| Some(s?.saturating_add(d.unwrap_or(0))))
        .collect();
    Ok(Arc::new(end.with_timezone("UTC")))
}

fn metric_type(rows: &Rows<'_>, path: &[&str]) -> Result<Option<ArrayRef>> {
    let Some(codes) = rows.root_column(path)? else {
        return Ok(None);
    };
    let codes = cast(&codes, &DataType::UInt8)
        .map_err(|e| PipelineError::arrow("reading metric types", e))?;
    let names: StringArray = codes
        .as_primitive::<UInt8Type>()
        .iter()
        .map(|c| c.and_then(metric_type_name))
        .collect();
    Ok(Some(Arc::new(names)))
}

/// The values of number data points (None for other data points).
fn number_value(rows: &Rows<'_>) -> Result<Option<ArrayRef>> {
    if rows.space != PayloadType::NumberDataPoints {
        return Ok(None);
    }
    let len = rows.len();
    let double = cast_or_null(rows.own(&[consts::DOUBLE_VALUE]), &DataType::Float64, len)?;
    let int = cast_or_null(rows.own(&[consts::INT_VALUE]), &DataType::Int64, len)?;
    let (double, int) = (
        double.as_primitive::<arrow::datatypes::Float64Type>(),
        int.as_primitive::<Int64Type>(),
    );
    let values: Float64Array = (0..len)
        .map(|i| {
            if double.is_valid(i) {
                Some(double.value(i))
            } else if int.is_valid(i) {
                Some(int.value(i) as f64)
            } else {
                None
            }
        })
        .collect();
    Ok(Some(Arc::new(values)))
}

/// The name of a `metric_type` code.
pub(crate) fn metric_type_name(code: u8) -> Option<&'static str> {
    Some(match code {
        metric_type::GAUGE => "gauge",
        metric_type::SUM => "sum",
        metric_type::HISTOGRAM => "histogram",
        metric_type::EXPONENTIAL_HISTOGRAM => "exponential_histogram",
        metric_type::SUMMARY => "summary",
        _ => return None,
    })
}

/// A log body as text: strings as they are, other scalars rendered, maps and arrays null.
fn body_text(body: &ArrayRef) -> Result<ArrayRef> {
    let body = body.as_struct();
    let view = ValueView::of_struct(Some(body), PayloadType::Logs)?;
    // The common case: every body is a string (or null) and the str column is plain.
    if let Some(str) = body.column_by_name("str")
        && str.data_type() == &DataType::Utf8
    {
        let types = body.column_by_name("type");
        let all_str = types.is_none_or(|t| {
            cast(t, &DataType::UInt8).is_ok_and(|t| {
                t.as_primitive::<UInt8Type>()
                    .iter()
                    .all(|v| matches!(v, None | Some(value_type::STR) | Some(value_type::EMPTY)))
            })
        });
        if all_str {
            let nulls = arrow::buffer::NullBuffer::union(body.nulls(), str.nulls());
            let data = str.to_data().into_builder().nulls(nulls).build();
            if let Ok(data) = data {
                return Ok(arrow::array::make_array(data));
            }
        }
    }
    let text: StringArray = (0..body.len())
        .map(|i| {
            if body.is_null(i) {
                return None;
            }
            let Some(scalar) = view.scalar(i) else {
                // A map or an array reads as JSON text (`body['key']` reads into it).
                return view.json(i);
            };
            match scalar {
                Scalar::Str(s) => Some(s.to_string()),
                Scalar::Int(v) => Some(v.to_string()),
                Scalar::Double(v) => Some(v.to_string()),
                Scalar::Bool(v) => Some(v.to_string()),
                Scalar::Bytes(v) => Some(hex::encode(v)),
            }
        })
        .collect();
    Ok(Arc::new(text))
}
