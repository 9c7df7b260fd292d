//! `Metric` → `UNIVARIATE_METRICS`, `METRIC_ATTRS`, the four data-point tables, their attribute
//! tables, exemplars and exemplar attributes.

use std::sync::Arc;

use arrow::array::{
    ArrayBuilder, ArrayRef, BooleanBuilder, FixedSizeBinaryBuilder, Float64Builder, Int32Builder,
    Int64Builder, ListArray, PrimitiveArray, RecordBatch, StringBuilder, StructArray,
    TimestampNanosecondBuilder, UInt8Builder, UInt16Array, UInt16Builder, UInt32Array,
    UInt32Builder, UInt64Builder,
};
use arrow::buffer::OffsetBuffer;
use arrow::datatypes::{ArrowPrimitiveType, DataType, Field, Float64Type, UInt64Type};

use super::append::{append_id, append_nz, append_str, finish_ts};
use super::envelope::EnvelopeColumns;
use super::root::{RootBuilder, set_envelope_attrs, table_schema};
use super::values::{AttrsBuilder, nulls_from};
use crate::batch::OtapBatch;
use crate::error::{Error, Result};
use crate::schema::consts::metric_type;
use crate::schema::{PayloadType, Signal, canonical_schema};
use crate::wire::{Reader, WireType};

/// A list column built from values and row offsets.
struct ListCol<T: ArrowPrimitiveType> {
    values: Vec<T::Native>,
    offsets: Vec<i32>,
}

impl<T: ArrowPrimitiveType> Default for ListCol<T> {
    fn default() -> Self {
        ListCol {
            values: Vec::new(),
            offsets: vec![0],
        }
    }
}

impl<T: ArrowPrimitiveType> ListCol<T> {
    fn close_row(&mut self, r: &Reader<'_>) -> Result<()> {
        let end = i32::try_from(self.values.len()).or_else(|_| r.err("list column too large"))?;
        self.offsets.push(end);
        Ok(())
    }

    fn finish(&mut self) -> Result<ArrayRef> {
        let values = PrimitiveArray::<T>::from_iter_values(std::mem::take(&mut self.values));
        let offsets = OffsetBuffer::new(std::mem::replace(&mut self.offsets, vec![0]).into());
        let field = Arc::new(Field::new("item", T::DATA_TYPE, true));
        ListArray::try_new(field, offsets, Arc::new(values), None)
            .map(|l| Arc::new(l) as ArrayRef)
            .map_err(|e| Error::arrow("building a list column", e))
    }
}

/// Reads repeated `fixed64`/`double` values, packed or not.
fn read_fixed64s(r: &mut Reader<'_>, wire: WireType, out: &mut Vec<u64>) -> Result<()> {
    if wire == WireType::Fixed64 {
        out.push(r.fixed64()?);
        return Ok(());
    }
    let bytes = r.bytes_field(wire)?;
    if bytes.len() % 8 != 0 {
        return r.err("packed fixed64 field has a partial value");
    }
    out.extend(bytes.chunks_exact(8).map(|c| {
        let mut raw = [0u8; 8];
        raw.copy_from_slice(c);
        u64::from_le_bytes(raw)
    }));
    Ok(())
}

/// Reads repeated `uint64` varints, packed or not.
fn read_varints(r: &mut Reader<'_>, wire: WireType, out: &mut Vec<u64>) -> Result<()> {
    if wire == WireType::Varint {
        out.push(r.varint()?);
        return Ok(());
    }
    let mut packed = r.message_field(wire)?;
    while !packed.is_done() {
        out.push(packed.varint()?);
    }
    Ok(())
}

/// The columns every data-point table starts with.
#[derive(Default)]
struct PointColumns {
    parent_id: UInt16Builder,
    start: TimestampNanosecondBuilder,
    time: TimestampNanosecondBuilder,
    flags: UInt32Builder,
}

impl PointColumns {
    fn next_id(&self, r: &Reader<'_>) -> Result<u32> {
        u32::try_from(self.parent_id.len()).or_else(|_| r.err("too many data points in one batch"))
    }

    fn push(&mut self, parent: u16, start: u64, time: u64, flags: u32) {
        self.parent_id.append_value(parent);
        append_nz(&mut self.start, start as i64);
        append_nz(&mut self.time, time as i64);
        append_nz(&mut self.flags, flags);
    }

    /// `id`, `parent_id`, `start_time_unix_nano`, `time_unix_nano`.
    fn finish_prefix(&mut self) -> Vec<ArrayRef> {
        let n = self.parent_id.len() as u32;
        vec![
            Arc::new(UInt32Array::from_iter_values(0..n)),
            Arc::new(self.parent_id.finish()),
            Arc::new(finish_ts(&mut self.start)),
            Arc::new(finish_ts(&mut self.time)),
        ]
    }
}

struct Exemplars {
    table: PayloadType,
    parent_id: UInt32Builder,
    time: TimestampNanosecondBuilder,
    int_value: Int64Builder,
    double_value: Float64Builder,
    span_id: FixedSizeBinaryBuilder,
    trace_id: FixedSizeBinaryBuilder,
    attrs: AttrsBuilder,
}

impl Exemplars {
    fn new(table: PayloadType, attrs: PayloadType) -> Self {
        Exemplars {
            table,
            parent_id: Default::default(),
            time: Default::default(),
            int_value: Default::default(),
            double_value: Default::default(),
            span_id: FixedSizeBinaryBuilder::new(8),
            trace_id: FixedSizeBinaryBuilder::new(16),
            attrs: AttrsBuilder::new(attrs),
        }
    }

    fn append(&mut self, parent: u32, mut r: Reader<'_>) -> Result<()> {
        let id = u32::try_from(self.parent_id.len()).or_else(|_| r.err("too many exemplars"))?;
        let (mut time, mut value) = (0u64, Number::None);
        let (mut span_id, mut trace_id): (&[u8], &[u8]) = (&[], &[]);
        while let Some((field, wire)) = r.field()? {
            match field {
                7 => self.attrs.append_key_value(id, r.message_field(wire)?)?,
                2 => time = r.fixed64_field(wire)?,
                3 => value = Number::Double(f64::from_bits(r.fixed64_field(wire)?)),
                6 => value = Number::Int(r.fixed64_field(wire)? as i64),
                4 => span_id = r.bytes_field(wire)?,
                5 => trace_id = r.bytes_field(wire)?,
                _ => r.skip(wire)?,
            }
        }
        self.parent_id.append_value(parent);
        append_nz(&mut self.time, time as i64);
        value.append(&mut self.int_value, &mut self.double_value);
        append_id(&mut self.span_id, span_id, &r)?;
        append_id(&mut self.trace_id, trace_id, &r)?;
        Ok(())
    }

    fn finish(&mut self, batch: &mut OtapBatch) -> Result<()> {
        let n = self.parent_id.len() as u32;
        if n > 0 {
            let columns: Vec<ArrayRef> = vec![
                Arc::new(UInt32Array::from_iter_values(0..n)),
                Arc::new(self.parent_id.finish()),
                Arc::new(finish_ts(&mut self.time)),
                Arc::new(self.int_value.finish()),
                Arc::new(self.double_value.finish()),
                Arc::new(self.span_id.finish()),
                Arc::new(self.trace_id.finish()),
            ];
            set_table(batch, self.table, columns)?;
        }
        if let Some(attrs) = self.attrs.finish()? {
            batch.set(self.attrs_table(), attrs)?;
        }
        Ok(())
    }

    fn attrs_table(&self) -> PayloadType {
        match self.table {
            PayloadType::NumberDpExemplars => PayloadType::NumberDpExemplarAttrs,
            PayloadType::HistogramDpExemplars => PayloadType::HistogramDpExemplarAttrs,
            _ => PayloadType::ExpHistogramDpExemplarAttrs,
        }
    }
}

#[derive(Clone, Copy)]
enum Number {
    None,
    Int(i64),
    Double(f64),
}

impl Number {
    fn append(self, ints: &mut Int64Builder, doubles: &mut Float64Builder) {
        match self {
            Number::Int(i) => {
                ints.append_value(i);
                doubles.append_null();
            }
            Number::Double(d) => {
                ints.append_null();
                doubles.append_value(d);
            }
            Number::None => {
                ints.append_null();
                doubles.append_null();
            }
        }
    }
}

fn set_table(batch: &mut OtapBatch, table: PayloadType, columns: Vec<ArrayRef>) -> Result<()> {
    let rb = RecordBatch::try_new(table_schema(table, &columns), columns)
        .map_err(|e| Error::arrow(format!("building {table:?}"), e))?;
    batch.set(table, rb)
}

/// Exponential histogram buckets (`positive` / `negative`).
#[derive(Default)]
struct BucketsColumns {
    offset: Int32Builder,
    counts: ListCol<UInt64Type>,
    valid: Vec<bool>,
}

impl BucketsColumns {
    fn append(&mut self, message: Option<Reader<'_>>, r: &Reader<'_>) -> Result<()> {
        let (mut offset, mut counts) = (0i32, Vec::new());
        if let Some(mut b) = message {
            while let Some((field, wire)) = b.field()? {
                match field {
                    1 => {
                        let z = b.varint32(wire)?;
                        offset = ((z >> 1) as i32) ^ -((z & 1) as i32);
                    }
                    2 => read_varints(&mut b, wire, &mut counts)?,
                    _ => b.skip(wire)?,
                }
            }
        }
        let present = offset != 0 || !counts.is_empty();
        self.valid.push(present);
        self.offset.append_value(offset);
        self.counts.values.extend(counts);
        self.counts.close_row(r)
    }

    fn finish(&mut self, data_type: Option<&DataType>) -> Result<ArrayRef> {
        let Some(DataType::Struct(fields)) = data_type else {
            return Err(Error::LimitExceeded("buckets schema".into()));
        };
        let columns = vec![
            Arc::new(self.offset.finish()) as ArrayRef,
            self.counts.finish()?,
        ];
        StructArray::try_new(
            fields.clone(),
            columns,
            nulls_from(&std::mem::take(&mut self.valid)),
        )
        .map(|s| Arc::new(s) as ArrayRef)
        .map_err(|e| Error::arrow("building exponential histogram buckets", e))
    }
}

#[derive(Default)]
struct NumberPoints {
    common: PointColumns,
    int_value: Int64Builder,
    double_value: Float64Builder,
}

#[derive(Default)]
struct SummaryPoints {
    common: PointColumns,
    count: UInt64Builder,
    sum: Float64Builder,
    quantile: Float64Builder,
    value: Float64Builder,
    offsets: Vec<i32>,
}

#[derive(Default)]
struct HistogramPoints {
    common: PointColumns,
    count: UInt64Builder,
    sum: Float64Builder,
    bucket_counts: ListCol<UInt64Type>,
    explicit_bounds: ListCol<Float64Type>,
    min: Float64Builder,
    max: Float64Builder,
}

#[derive(Default)]
struct ExpHistogramPoints {
    common: PointColumns,
    count: UInt64Builder,
    sum: Float64Builder,
    scale: Int32Builder,
    zero_count: UInt64Builder,
    positive: BucketsColumns,
    negative: BucketsColumns,
    min: Float64Builder,
    max: Float64Builder,
    zero_threshold: Float64Builder,
}

pub(crate) struct MetricsBuilder {
    rows: u16,
    metric_type: UInt8Builder,
    name: StringBuilder,
    description: StringBuilder,
    unit: StringBuilder,
    temporality: Int32Builder,
    monotonic: BooleanBuilder,
    metric_attrs: AttrsBuilder,
    number: NumberPoints,
    number_attrs: AttrsBuilder,
    number_exemplars: Exemplars,
    summary: SummaryPoints,
    summary_attrs: AttrsBuilder,
    histogram: HistogramPoints,
    histogram_attrs: AttrsBuilder,
    histogram_exemplars: Exemplars,
    exp: ExpHistogramPoints,
    exp_attrs: AttrsBuilder,
    exp_exemplars: Exemplars,
}

impl Default for MetricsBuilder {
    fn default() -> Self {
        use PayloadType as P;
        MetricsBuilder {
            rows: 0,
            metric_type: Default::default(),
            name: Default::default(),
            description: Default::default(),
            unit: Default::default(),
            temporality: Default::default(),
            monotonic: Default::default(),
            metric_attrs: AttrsBuilder::new(P::MetricAttrs),
            number: Default::default(),
            number_attrs: AttrsBuilder::new(P::NumberDpAttrs),
            number_exemplars: Exemplars::new(P::NumberDpExemplars, P::NumberDpExemplarAttrs),
            summary: SummaryPoints {
                offsets: vec![0],
                ..Default::default()
            },
            summary_attrs: AttrsBuilder::new(P::SummaryDpAttrs),
            histogram: Default::default(),
            histogram_attrs: AttrsBuilder::new(P::HistogramDpAttrs),
            histogram_exemplars: Exemplars::new(
                P::HistogramDpExemplars,
                P::HistogramDpExemplarAttrs,
            ),
            exp: Default::default(),
            exp_attrs: AttrsBuilder::new(P::ExpHistogramDpAttrs),
            exp_exemplars: Exemplars::new(
                P::ExpHistogramDpExemplars,
                P::ExpHistogramDpExemplarAttrs,
            ),
        }
    }
}

impl MetricsBuilder {
    fn number_point(&mut self, parent: u16, mut r: Reader<'_>) -> Result<()> {
        let id = self.number.common.next_id(&r)?;
        let (mut start, mut time, mut flags, mut value) = (0, 0, 0, Number::None);
        while let Some((field, wire)) = r.field()? {
            match field {
                7 => self
                    .number_attrs
                    .append_key_value(id, r.message_field(wire)?)?,
                2 => start = r.fixed64_field(wire)?,
                3 => time = r.fixed64_field(wire)?,
                4 => value = Number::Double(f64::from_bits(r.fixed64_field(wire)?)),
                6 => value = Number::Int(r.fixed64_field(wire)? as i64),
                5 => self.number_exemplars.append(id, r.message_field(wire)?)?,
                8 => flags = r.varint32(wire)?,
                _ => r.skip(wire)?,
            }
        }
        self.number.common.push(parent, start, time, flags);
        value.append(&mut self.number.int_value, &mut self.number.double_value);
        Ok(())
    }

    fn summary_point(&mut self, parent: u16, mut r: Reader<'_>) -> Result<()> {
        let id = self.summary.common.next_id(&r)?;
        let (mut start, mut time, mut flags, mut count, mut sum) = (0, 0, 0, 0u64, 0f64);
        while let Some((field, wire)) = r.field()? {
            match field {
                7 => self
                    .summary_attrs
                    .append_key_value(id, r.message_field(wire)?)?,
                2 => start = r.fixed64_field(wire)?,
                3 => time = r.fixed64_field(wire)?,
                4 => count = r.fixed64_field(wire)?,
                5 => sum = f64::from_bits(r.fixed64_field(wire)?),
                6 => {
                    let mut q = r.message_field(wire)?;
                    let (mut quantile, mut value) = (0f64, 0f64);
                    while let Some((field, wire)) = q.field()? {
                        match field {
                            1 => quantile = f64::from_bits(q.fixed64_field(wire)?),
                            2 => value = f64::from_bits(q.fixed64_field(wire)?),
                            _ => q.skip(wire)?,
                        }
                    }
                    self.summary.quantile.append_value(quantile);
                    self.summary.value.append_value(value);
                }
                8 => flags = r.varint32(wire)?,
                _ => r.skip(wire)?,
            }
        }
        let s = &mut self.summary;
        s.common.push(parent, start, time, flags);
        append_nz(&mut s.count, count);
        if sum.to_bits() == 0 {
            s.sum.append_null()
        } else {
            s.sum.append_value(sum)
        }
        let end = i32::try_from(s.quantile.len()).or_else(|_| r.err("too many quantiles"))?;
        s.offsets.push(end);
        Ok(())
    }

    fn histogram_point(&mut self, parent: u16, mut r: Reader<'_>) -> Result<()> {
        let id = self.histogram.common.next_id(&r)?;
        let (mut start, mut time, mut flags, mut count) = (0, 0, 0, 0u64);
        let (mut sum, mut min, mut max) = (None, None, None);
        let (mut buckets, mut bounds) = (Vec::new(), Vec::new());
        while let Some((field, wire)) = r.field()? {
            match field {
                9 => self
                    .histogram_attrs
                    .append_key_value(id, r.message_field(wire)?)?,
                2 => start = r.fixed64_field(wire)?,
                3 => time = r.fixed64_field(wire)?,
                4 => count = r.fixed64_field(wire)?,
                5 => sum = Some(f64::from_bits(r.fixed64_field(wire)?)),
                6 => read_fixed64s(&mut r, wire, &mut buckets)?,
                7 => read_fixed64s(&mut r, wire, &mut bounds)?,
                8 => self
                    .histogram_exemplars
                    .append(id, r.message_field(wire)?)?,
                10 => flags = r.varint32(wire)?,
                11 => min = Some(f64::from_bits(r.fixed64_field(wire)?)),
                12 => max = Some(f64::from_bits(r.fixed64_field(wire)?)),
                _ => r.skip(wire)?,
            }
        }
        let h = &mut self.histogram;
        h.common.push(parent, start, time, flags);
        append_nz(&mut h.count, count);
        h.sum.append_option(sum);
        h.bucket_counts.values.extend(buckets);
        h.bucket_counts.close_row(&r)?;
        h.explicit_bounds
            .values
            .extend(bounds.into_iter().map(f64::from_bits));
        h.explicit_bounds.close_row(&r)?;
        h.min.append_option(min);
        h.max.append_option(max);
        Ok(())
    }

    fn exp_histogram_point(&mut self, parent: u16, mut r: Reader<'_>) -> Result<()> {
        let id = self.exp.common.next_id(&r)?;
        let (mut start, mut time, mut flags, mut count, mut zero_count) = (0, 0, 0, 0u64, 0u64);
        let (mut sum, mut min, mut max, mut scale, mut zero_threshold) =
            (None, None, None, 0i32, 0f64);
        let (mut positive, mut negative) = (None, None);
        while let Some((field, wire)) = r.field()? {
            match field {
                1 => self
                    .exp_attrs
                    .append_key_value(id, r.message_field(wire)?)?,
                2 => start = r.fixed64_field(wire)?,
                3 => time = r.fixed64_field(wire)?,
                4 => count = r.fixed64_field(wire)?,
                5 => sum = Some(f64::from_bits(r.fixed64_field(wire)?)),
                6 => {
                    let z = r.varint32(wire)?;
                    scale = ((z >> 1) as i32) ^ -((z & 1) as i32);
                }
                7 => zero_count = r.fixed64_field(wire)?,
                8 => positive = Some(r.message_field(wire)?),
                9 => negative = Some(r.message_field(wire)?),
                10 => flags = r.varint32(wire)?,
                11 => self.exp_exemplars.append(id, r.message_field(wire)?)?,
                12 => min = Some(f64::from_bits(r.fixed64_field(wire)?)),
                13 => max = Some(f64::from_bits(r.fixed64_field(wire)?)),
                14 => zero_threshold = f64::from_bits(r.fixed64_field(wire)?),
                _ => r.skip(wire)?,
            }
        }
        let e = &mut self.exp;
        e.common.push(parent, start, time, flags);
        append_nz(&mut e.count, count);
        e.sum.append_option(sum);
        append_nz(&mut e.scale, scale);
        append_nz(&mut e.zero_count, zero_count);
        e.positive.append(positive, &r)?;
        e.negative.append(negative, &r)?;
        e.min.append_option(min);
        e.max.append_option(max);
        if zero_threshold.to_bits() == 0 {
            e.zero_threshold.append_null()
        } else {
            e.zero_threshold.append_value(zero_threshold)
        }
        Ok(())
    }

    /// Reads a Gauge/Sum/Histogram/ExponentialHistogram/Summary message.
    fn data(
        &mut self,
        row: u16,
        kind: u8,
        mut r: Reader<'_>,
    ) -> Result<(Option<i32>, Option<bool>)> {
        let (mut temporality, mut monotonic) = (0i32, false);
        while let Some((field, wire)) = r.field()? {
            match (field, kind) {
                (1, metric_type::GAUGE | metric_type::SUM) => {
                    self.number_point(row, r.message_field(wire)?)?
                }
                (1, metric_type::HISTOGRAM) => self.histogram_point(row, r.message_field(wire)?)?,
                (1, metric_type::EXPONENTIAL_HISTOGRAM) => {
                    self.exp_histogram_point(row, r.message_field(wire)?)?
                }
                (1, metric_type::SUMMARY) => self.summary_point(row, r.message_field(wire)?)?,
                (
                    2,
                    metric_type::SUM | metric_type::HISTOGRAM | metric_type::EXPONENTIAL_HISTOGRAM,
                ) => temporality = r.varint32(wire)? as i32,
                (3, metric_type::SUM) => monotonic = r.varint32(wire)? != 0,
                _ => r.skip(wire)?,
            }
        }
        Ok(match kind {
            metric_type::SUM => (Some(temporality), Some(monotonic)),
            metric_type::HISTOGRAM | metric_type::EXPONENTIAL_HISTOGRAM => {
                (Some(temporality), None)
            }
            _ => (None, None),
        })
    }
}

impl RootBuilder for MetricsBuilder {
    const SIGNAL: usize = 2;

    fn append(&mut self, row: u16, mut r: Reader<'_>) -> Result<()> {
        let (mut name, mut description, mut unit) = ("", "", "");
        let mut data = None;
        while let Some((field, wire)) = r.field()? {
            match field {
                1 => name = r.string_field(wire)?,
                2 => description = r.string_field(wire)?,
                3 => unit = r.string_field(wire)?,
                5 => data = Some((metric_type::GAUGE, r.message_field(wire)?)),
                7 => data = Some((metric_type::SUM, r.message_field(wire)?)),
                9 => data = Some((metric_type::HISTOGRAM, r.message_field(wire)?)),
                10 => data = Some((metric_type::EXPONENTIAL_HISTOGRAM, r.message_field(wire)?)),
                11 => data = Some((metric_type::SUMMARY, r.message_field(wire)?)),
                12 => self
                    .metric_attrs
                    .append_key_value(u32::from(row), r.message_field(wire)?)?,
                _ => r.skip(wire)?,
            }
        }
        let (kind, (temporality, monotonic)) = match data {
            Some((kind, message)) => (kind, self.data(row, kind, message)?),
            None => (metric_type::EMPTY, (None, None)),
        };
        self.metric_type.append_value(kind);
        append_str(&mut self.name, name);
        append_str(&mut self.description, description);
        append_str(&mut self.unit, unit);
        self.temporality.append_option(temporality);
        self.monotonic.append_option(monotonic);
        self.rows = row.wrapping_add(1);
        Ok(())
    }

    fn finish(&mut self, envelope: EnvelopeColumns) -> Result<OtapBatch> {
        use PayloadType as P;
        let rows = std::mem::take(&mut self.rows);
        let mut batch = OtapBatch::new(Signal::Metrics);
        set_table(
            &mut batch,
            P::UnivariateMetrics,
            vec![
                Arc::new(UInt16Array::from_iter_values(0..rows)),
                envelope.resource,
                envelope.scope,
                envelope.schema_url,
                Arc::new(self.metric_type.finish()),
                Arc::new(self.name.finish()),
                Arc::new(self.description.finish()),
                Arc::new(self.unit.finish()),
                Arc::new(self.temporality.finish()),
                Arc::new(self.monotonic.finish()),
            ],
        )?;
        set_envelope_attrs(&mut batch, envelope.resource_attrs, envelope.scope_attrs)?;
        for (table, attrs) in [
            (P::MetricAttrs, &mut self.metric_attrs),
            (P::NumberDpAttrs, &mut self.number_attrs),
            (P::SummaryDpAttrs, &mut self.summary_attrs),
            (P::HistogramDpAttrs, &mut self.histogram_attrs),
            (P::ExpHistogramDpAttrs, &mut self.exp_attrs),
        ] {
            if let Some(rb) = attrs.finish()? {
                batch.set(table, rb)?;
            }
        }
        let n = &mut self.number;
        if !n.common.parent_id.is_empty() {
            let mut columns = n.common.finish_prefix();
            columns.push(Arc::new(n.int_value.finish()));
            columns.push(Arc::new(n.double_value.finish()));
            columns.push(Arc::new(n.common.flags.finish()));
            set_table(&mut batch, P::NumberDataPoints, columns)?;
        }
        let s = &mut self.summary;
        if !s.common.parent_id.is_empty() {
            let schema = canonical_schema(P::SummaryDataPoints);
            let Ok(DataType::List(item)) = schema
                .field_with_name("quantile")
                .map(|f| f.data_type().clone())
            else {
                return Err(Error::LimitExceeded("summary schema".into()));
            };
            let DataType::Struct(fields) = item.data_type() else {
                return Err(Error::LimitExceeded("summary schema".into()));
            };
            let pairs = StructArray::try_new(
                fields.clone(),
                vec![Arc::new(s.quantile.finish()), Arc::new(s.value.finish())],
                None,
            )
            .map_err(|e| Error::arrow("building summary quantiles", e))?;
            let offsets = OffsetBuffer::new(std::mem::replace(&mut s.offsets, vec![0]).into());
            let quantiles = ListArray::try_new(Arc::clone(&item), offsets, Arc::new(pairs), None)
                .map_err(|e| Error::arrow("building summary quantiles", e))?;
            let mut columns = s.common.finish_prefix();
            columns.push(Arc::new(s.count.finish()));
            columns.push(Arc::new(s.sum.finish()));
            columns.push(Arc::new(quantiles));
            columns.push(Arc::new(s.common.flags.finish()));
            set_table(&mut batch, P::SummaryDataPoints, columns)?;
        }
        let h = &mut self.histogram;
        if !h.common.parent_id.is_empty() {
            let mut columns = h.common.finish_prefix();
            columns.push(Arc::new(h.count.finish()));
            columns.push(Arc::new(h.sum.finish()));
            columns.push(h.bucket_counts.finish()?);
            columns.push(h.explicit_bounds.finish()?);
            columns.push(Arc::new(h.common.flags.finish()));
            columns.push(Arc::new(h.min.finish()));
            columns.push(Arc::new(h.max.finish()));
            set_table(&mut batch, P::HistogramDataPoints, columns)?;
        }
        let e = &mut self.exp;
        if !e.common.parent_id.is_empty() {
            let schema = canonical_schema(P::ExpHistogramDataPoints);
            let buckets_type = schema
                .field_with_name("positive")
                .ok()
                .map(|f| f.data_type().clone());
            let mut columns = e.common.finish_prefix();
            columns.push(Arc::new(e.count.finish()));
            columns.push(Arc::new(e.sum.finish()));
            columns.push(Arc::new(e.scale.finish()));
            columns.push(Arc::new(e.zero_count.finish()));
            columns.push(e.positive.finish(buckets_type.as_ref())?);
            columns.push(e.negative.finish(buckets_type.as_ref())?);
            columns.push(Arc::new(e.common.flags.finish()));
            columns.push(Arc::new(e.min.finish()));
            columns.push(Arc::new(e.max.finish()));
            columns.push(Arc::new(e.zero_threshold.finish()));
            set_table(&mut batch, P::ExpHistogramDataPoints, columns)?;
        }
        self.number_exemplars.finish(&mut batch)?;
        self.histogram_exemplars.finish(&mut batch)?;
        self.exp_exemplars.finish(&mut batch)?;
        Ok(batch)
    }
}
