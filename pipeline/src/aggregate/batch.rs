//! Derived metrics built straight into an OTAP metrics batch with Arrow builders: one metric
//! row per aggregate output, number data points, and their attributes.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayBuilder, ArrayRef, AsArray, BinaryBuilder, BooleanBuilder, Float64Builder,
    Int32Builder, Int64Builder, RecordBatch, StringBuilder, StructArray,
    TimestampNanosecondBuilder, UInt8Builder, UInt16Builder, UInt32Builder, new_null_array,
};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Float64Type, Int64Type};
use datafusion::common::ScalarValue;
use penstock_engine::OtapBatch;
use penstock_engine::schema::consts::{self, metric_type, value_type};
use penstock_engine::schema::{PayloadType, Signal, canonical_schema};

use super::functions::MetricKind;
use crate::error::{PipelineError, Result};

/// `AGGREGATION_TEMPORALITY_DELTA`.
const DELTA: i32 = 1;

/// A data point value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum PointValue {
    Int(i64),
    Double(f64),
}

/// Metrics of one scope, point by point.
pub(crate) struct MetricsBuilder {
    scope_name: String,
    metrics: u16,
    metric_type: UInt8Builder,
    name: StringBuilder,
    temporality: Int32Builder,
    monotonic: BooleanBuilder,
    points: u32,
    parent: UInt16Builder,
    start: TimestampNanosecondBuilder,
    time: TimestampNanosecondBuilder,
    int_value: Int64Builder,
    double_value: Float64Builder,
    attrs: AttrsBuilder,
}

/// The number data points' attribute table.
#[derive(Default)]
struct AttrsBuilder {
    parent: UInt32Builder,
    key: StringBuilder,
    ty: UInt8Builder,
    str: StringBuilder,
    int: Int64Builder,
    double: Float64Builder,
    bool: BooleanBuilder,
    bytes: BinaryBuilder,
}

fn arrow_err(e: arrow::error::ArrowError) -> PipelineError {
    PipelineError::arrow("building derived metrics", e)
}

impl MetricsBuilder {
    /// Metrics of the scope named `scope_name`.
    pub(crate) fn new(scope_name: String) -> MetricsBuilder {
        MetricsBuilder {
            scope_name,
            metrics: 0,
            metric_type: UInt8Builder::new(),
            name: StringBuilder::new(),
            temporality: Int32Builder::new(),
            monotonic: BooleanBuilder::new(),
            points: 0,
            parent: UInt16Builder::new(),
            start: TimestampNanosecondBuilder::new(),
            time: TimestampNanosecondBuilder::new(),
            int_value: Int64Builder::new(),
            double_value: Float64Builder::new(),
            attrs: AttrsBuilder::default(),
        }
    }

    /// Starts metric `name`; the points added next belong to it.
    pub(crate) fn metric(&mut self, name: &str, kind: MetricKind) -> Result<()> {
        if self.metrics == u16::MAX {
            return Err(PipelineError::Execute(
                "more than 65,535 derived metrics in one batch".into(),
            ));
        }
        self.metrics += 1;
        self.name.append_value(name);
        match kind {
            MetricKind::Gauge => {
                self.metric_type.append_value(metric_type::GAUGE);
                self.temporality.append_null();
                self.monotonic.append_null();
            }
            MetricKind::Sum | MetricKind::MonotonicSum => {
                self.metric_type.append_value(metric_type::SUM);
                self.temporality.append_value(DELTA);
                self.monotonic
                    .append_value(kind == MetricKind::MonotonicSum);
            }
        }
        Ok(())
    }

    /// Adds a point of the current metric over `[start, time]` (start 0: none).
    pub(crate) fn point(
        &mut self,
        start: u64,
        time: u64,
        value: PointValue,
        attributes: &[(&str, &ScalarValue)],
    ) -> Result<()> {
        let nanos = |t: u64| (t > 0).then_some(t.min(i64::MAX as u64) as i64);
        self.parent.append_value(self.metrics - 1);
        self.start.append_option(nanos(start));
        self.time.append_option(nanos(time));
        match value {
            PointValue::Int(v) => {
                self.int_value.append_value(v);
                self.double_value.append_null();
            }
            PointValue::Double(v) => {
                self.int_value.append_null();
                self.double_value.append_value(v);
            }
        }
        for (key, value) in attributes {
            self.attrs.append(self.points, key, value)?;
        }
        self.points += 1;
        Ok(())
    }

    /// The batch: the metrics table, the number data points and their attributes.
    pub(crate) fn finish(mut self) -> Result<OtapBatch> {
        let metrics = self.metrics as usize;
        let points = self.points as usize;
        let ids: ArrayRef = Arc::new(arrow::array::UInt16Array::from_iter_values(0..self.metrics));
        let scope_ids: ArrayRef = Arc::new(arrow::array::UInt16Array::from(vec![0; metrics]));
        let mut scope_names = StringBuilder::new();
        for _ in 0..metrics {
            scope_names.append_value(&self.scope_name);
        }
        let mut batch = OtapBatch::new(Signal::Metrics);
        batch
            .set(
                PayloadType::UnivariateMetrics,
                table(
                    PayloadType::UnivariateMetrics,
                    metrics,
                    vec![
                        (consts::ID, ids),
                        (
                            consts::RESOURCE,
                            envelope(consts::RESOURCE, &scope_ids, None)?,
                        ),
                        (
                            consts::SCOPE,
                            envelope(
                                consts::SCOPE,
                                &scope_ids,
                                Some(Arc::new(scope_names.finish())),
                            )?,
                        ),
                        (consts::METRIC_TYPE, Arc::new(self.metric_type.finish())),
                        (consts::NAME, Arc::new(self.name.finish())),
                        (
                            consts::AGGREGATION_TEMPORALITY,
                            Arc::new(self.temporality.finish()),
                        ),
                        (consts::IS_MONOTONIC, Arc::new(self.monotonic.finish())),
                    ],
                )?,
            )
            .map_err(PipelineError::from)?;
        let point_ids: ArrayRef = Arc::new(UInt32Builder::new().finish());
        let point_ids = if points > 0 {
            Arc::new(arrow::array::UInt32Array::from_iter_values(0..self.points)) as ArrayRef
        } else {
            point_ids
        };
        batch.set(
            PayloadType::NumberDataPoints,
            table(
                PayloadType::NumberDataPoints,
                points,
                vec![
                    (consts::ID, point_ids),
                    (consts::PARENT_ID, Arc::new(self.parent.finish())),
                    (
                        consts::START_TIME_UNIX_NANO,
                        Arc::new(self.start.finish().with_timezone(consts::UTC)),
                    ),
                    (
                        consts::TIME_UNIX_NANO,
                        Arc::new(self.time.finish().with_timezone(consts::UTC)),
                    ),
                    (consts::INT_VALUE, Arc::new(self.int_value.finish())),
                    (consts::DOUBLE_VALUE, Arc::new(self.double_value.finish())),
                ],
            )?,
        )?;
        if let Some(attrs) = self.attrs.finish()? {
            batch.set(PayloadType::NumberDpAttrs, attrs)?;
        }
        Ok(batch)
    }
}

/// The `resource` or `scope` struct of every metric: id 0, and for the scope its name.
fn envelope(column: &str, ids: &ArrayRef, name: Option<ArrayRef>) -> Result<ArrayRef> {
    let schema = canonical_schema(PayloadType::UnivariateMetrics);
    let field = schema.field_with_name(column).map_err(arrow_err)?;
    let DataType::Struct(fields) = field.data_type() else {
        return Err(PipelineError::Execute(format!("{column} is not a struct")));
    };
    let len = ids.len();
    let children = fields
        .iter()
        .map(|f| match f.name().as_str() {
            consts::ID => Arc::clone(ids),
            consts::NAME if name.is_some() => name.clone().unwrap_or_else(|| Arc::clone(ids)),
            _ => new_null_array(f.data_type(), len),
        })
        .collect();
    Ok(Arc::new(
        StructArray::try_new(fields.clone(), children, None).map_err(arrow_err)?,
    ))
}

/// A table of `kind` in its canonical schema: the given columns, every other one null.
fn table(kind: PayloadType, rows: usize, columns: Vec<(&str, ArrayRef)>) -> Result<RecordBatch> {
    let schema = canonical_schema(kind);
    let arrays = schema
        .fields()
        .iter()
        .map(|f| {
            columns
                .iter()
                .find(|(name, _)| name == f.name())
                .map_or_else(
                    || new_null_array(f.data_type(), rows),
                    |(_, a)| Arc::clone(a),
                )
        })
        .collect();
    RecordBatch::try_new(schema, arrays).map_err(arrow_err)
}

impl AttrsBuilder {
    /// Appends attribute `key` = `value` of data point `parent` (nothing for NULL).
    fn append(&mut self, parent: u32, key: &str, value: &ScalarValue) -> Result<()> {
        if value.is_null() {
            return Ok(());
        }
        let array = value.to_array().map_err(|source| PipelineError::Evaluate {
            sql: key.to_string(),
            source,
        })?;
        let as_type = |ty: &DataType| cast(&array, ty).map_err(arrow_err);
        let (mut str, mut int, mut double, mut bool, mut bytes) = (None, None, None, None, None);
        let ty = match array.data_type() {
            DataType::Boolean => {
                bool = Some(array.as_boolean().value(0));
                value_type::BOOL
            }
            DataType::Float16 | DataType::Float32 | DataType::Float64 => {
                double = Some(
                    as_type(&DataType::Float64)?
                        .as_primitive::<Float64Type>()
                        .value(0),
                );
                value_type::DOUBLE
            }
            t if t.is_integer() => {
                int = Some(
                    as_type(&DataType::Int64)?
                        .as_primitive::<Int64Type>()
                        .value(0),
                );
                value_type::INT
            }
            DataType::Binary | DataType::LargeBinary | DataType::FixedSizeBinary(_) => {
                bytes = Some(
                    as_type(&DataType::Binary)?
                        .as_binary::<i32>()
                        .value(0)
                        .to_vec(),
                );
                value_type::BYTES
            }
            _ => {
                str = Some(
                    as_type(&DataType::Utf8)?
                        .as_string::<i32>()
                        .value(0)
                        .to_string(),
                );
                value_type::STR
            }
        };
        self.parent.append_value(parent);
        self.key.append_value(key);
        self.ty.append_value(ty);
        self.str.append_option(str);
        self.int.append_option(int);
        self.double.append_option(double);
        self.bool.append_option(bool);
        self.bytes.append_option(bytes);
        Ok(())
    }

    /// The attribute table (None without attributes).
    fn finish(mut self) -> Result<Option<RecordBatch>> {
        let rows = self.parent.len();
        if rows == 0 {
            return Ok(None);
        }
        table(
            PayloadType::NumberDpAttrs,
            rows,
            vec![
                (consts::PARENT_ID, Arc::new(self.parent.finish())),
                (consts::KEY, Arc::new(self.key.finish())),
                (consts::TYPE, Arc::new(self.ty.finish())),
                (consts::STR, Arc::new(self.str.finish())),
                (consts::INT, Arc::new(self.int.finish())),
                (consts::DOUBLE, Arc::new(self.double.finish())),
                (consts::BOOL, Arc::new(self.bool.finish())),
                (consts::BYTES, Arc::new(self.bytes.finish())),
            ],
        )
        .map(Some)
    }
}
