//! `UNIVARIATE_METRICS` (+ data points, exemplars and attributes) →
//! `ExportMetricsServiceRequest` bytes.

use arrow::array::{
    Array, AsArray, BooleanArray, FixedSizeBinaryArray, Float64Array, Int32Array, Int64Array,
    ListArray, RecordBatch, StringArray, StructArray, TimestampNanosecondArray, UInt8Array,
    UInt32Array, UInt64Array,
};
use arrow::datatypes::{ArrowPrimitiveType, Float64Type, UInt64Type};

use super::envelope::Envelope;
use super::index::{ChildIndex, optional_ids};
use super::values::AttrsView;
use crate::batch::OtapBatch;
use crate::column::{Col, struct_col};
use crate::error::{Error, Result};
use crate::schema::PayloadType;
use crate::schema::consts::*;
use crate::wire::Writer;

/// A list column's values for one row.
fn list_values<T: ArrowPrimitiveType>(list: Option<&ListArray>, row: usize) -> &[T::Native] {
    let Some(list) = list else { return &[] };
    if list.is_null(row) {
        return &[];
    }
    let Some(values) = list.values().as_primitive_opt::<T>() else {
        return &[];
    };
    let offsets = list.value_offsets();
    let (start, end) = (offsets[row] as usize, offsets[row + 1] as usize);
    values.values().get(start..end).unwrap_or(&[])
}

fn list_col<'a>(
    t: &'a RecordBatch,
    kind: PayloadType,
    name: &str,
) -> Result<Option<&'a ListArray>> {
    match t.column_by_name(name) {
        None => Ok(None),
        Some(c) => c
            .as_list_opt::<i32>()
            .map(Some)
            .ok_or_else(|| Error::schema(kind, format!("{name} should be a list"))),
    }
}

fn write_packed_fixed64(w: &mut Writer, field: u32, values: impl ExactSizeIterator<Item = u64>) {
    if values.len() == 0 {
        return;
    }
    let n = w.begin(field);
    for v in values {
        w.raw(&v.to_le_bytes());
    }
    w.end(n);
}

fn write_optional_double(w: &mut Writer, field: u32, value: Option<f64>) {
    if let Some(v) = value {
        w.fixed64_always(field, v.to_bits());
    }
}

/// Columns shared by data-point tables, their attributes and exemplars.
struct Points<'a> {
    table: &'a RecordBatch,
    kind: PayloadType,
    by_metric: ChildIndex,
    ids: Vec<Option<u32>>,
    attrs: AttrsView<'a>,
    start: Col<'a, TimestampNanosecondArray>,
    time: Col<'a, TimestampNanosecondArray>,
    flags: Col<'a, UInt32Array>,
}

impl<'a> Points<'a> {
    fn new(batch: &'a OtapBatch, kind: PayloadType, attrs: PayloadType) -> Result<Option<Self>> {
        let Some(table) = batch.get(kind) else {
            return Ok(None);
        };
        Ok(Some(Points {
            table,
            kind,
            by_metric: ChildIndex::build(Some(table), kind, PARENT_ID)?,
            ids: optional_ids(table, kind, ID)?,
            attrs: AttrsView::new(batch.get(attrs), attrs)?,
            start: Col::of(table, kind, START_TIME_UNIX_NANO)?,
            time: Col::of(table, kind, TIME_UNIX_NANO)?,
            flags: Col::of(table, kind, FLAGS)?,
        }))
    }

    fn times(&self, w: &mut Writer, row: usize) {
        w.fixed64_field(2, self.start.get(row).unwrap_or(0) as u64);
        w.fixed64_field(3, self.time.get(row).unwrap_or(0) as u64);
    }

    fn flags(&self, w: &mut Writer, field: u32, row: usize) {
        w.varint_field(field, u64::from(self.flags.get(row).unwrap_or(0)));
    }

    fn f64(&self, name: &str) -> Result<Col<'a, Float64Array>> {
        Col::of(self.table, self.kind, name)
    }

    fn u64(&self, name: &str) -> Result<Col<'a, UInt64Array>> {
        Col::of(self.table, self.kind, name)
    }
}

struct Exemplars<'a> {
    by_point: ChildIndex,
    ids: Vec<Option<u32>>,
    attrs: AttrsView<'a>,
    time: Col<'a, TimestampNanosecondArray>,
    int_value: Col<'a, Int64Array>,
    double_value: Col<'a, Float64Array>,
    span_id: Col<'a, FixedSizeBinaryArray>,
    trace_id: Col<'a, FixedSizeBinaryArray>,
}

impl<'a> Exemplars<'a> {
    fn new(batch: &'a OtapBatch, kind: PayloadType, attrs: PayloadType) -> Result<Self> {
        let table = batch.get(kind);
        let col = |name| -> Result<_> {
            Ok(table
                .map(|t| Col::of(t, kind, name))
                .transpose()?
                .unwrap_or(Col::Absent))
        };
        Ok(Exemplars {
            by_point: ChildIndex::build(table, kind, PARENT_ID)?,
            ids: table
                .map(|t| optional_ids(t, kind, ID))
                .transpose()?
                .unwrap_or_default(),
            attrs: AttrsView::new(batch.get(attrs), attrs)?,
            time: col(TIME_UNIX_NANO)?,
            int_value: table
                .map(|t| Col::of(t, kind, INT_VALUE))
                .transpose()?
                .unwrap_or(Col::Absent),
            double_value: table
                .map(|t| Col::of(t, kind, DOUBLE_VALUE))
                .transpose()?
                .unwrap_or(Col::Absent),
            span_id: table
                .map(|t| Col::of(t, kind, SPAN_ID))
                .transpose()?
                .unwrap_or(Col::Absent),
            trace_id: table
                .map(|t| Col::of(t, kind, TRACE_ID))
                .transpose()?
                .unwrap_or(Col::Absent),
        })
    }

    fn write(&self, w: &mut Writer, field: u32, point: Option<u32>) -> Result<()> {
        self.by_point.for_each(point, |e| {
            let m = w.begin(field);
            self.attrs.write(w, self.ids.get(e).copied().flatten())?;
            w.fixed64_field(2, self.time.get(e).unwrap_or(0) as u64);
            if let Some(i) = self.int_value.get(e) {
                w.fixed64_always(6, i as u64);
            } else if let Some(d) = self.double_value.get(e) {
                w.fixed64_always(3, d.to_bits());
            }
            w.id_field(4, self.span_id.get(e).unwrap_or(&[]));
            w.id_field(5, self.trace_id.get(e).unwrap_or(&[]));
            w.end(m);
            Ok(())
        })
    }
}

pub(crate) fn encode(batch: &OtapBatch, w: &mut Writer) -> Result<()> {
    use PayloadType as P;
    const T: PayloadType = P::UnivariateMetrics;
    let Some(root) = batch.get(T) else {
        return Ok(());
    };
    let envelope = Envelope::new(batch, root, T)?;
    let ids = optional_ids(root, T, ID)?;
    let metadata = AttrsView::new(batch.get(P::MetricAttrs), P::MetricAttrs)?;
    let metric_type = Col::<UInt8Array>::of(root, T, METRIC_TYPE)?;
    let name = Col::<StringArray>::of(root, T, NAME)?;
    let description = Col::<StringArray>::of(root, T, DESCRIPTION)?;
    let unit = Col::<StringArray>::of(root, T, UNIT)?;
    let temporality = Col::<Int32Array>::of(root, T, AGGREGATION_TEMPORALITY)?;
    let monotonic = Col::<BooleanArray>::of(root, T, IS_MONOTONIC)?;

    let number = Points::new(batch, P::NumberDataPoints, P::NumberDpAttrs)?;
    let number_ex = Exemplars::new(batch, P::NumberDpExemplars, P::NumberDpExemplarAttrs)?;
    let summary = Points::new(batch, P::SummaryDataPoints, P::SummaryDpAttrs)?;
    let histogram = Points::new(batch, P::HistogramDataPoints, P::HistogramDpAttrs)?;
    let histogram_ex = Exemplars::new(batch, P::HistogramDpExemplars, P::HistogramDpExemplarAttrs)?;
    let exp = Points::new(batch, P::ExpHistogramDataPoints, P::ExpHistogramDpAttrs)?;
    let exp_ex = Exemplars::new(
        batch,
        P::ExpHistogramDpExemplars,
        P::ExpHistogramDpExemplarAttrs,
    )?;

    let number_writer = number
        .as_ref()
        .map(|p| NumberWriter::new(p, &number_ex))
        .transpose()?;
    let summary_writer = summary.as_ref().map(SummaryWriter::new).transpose()?;
    let histogram_writer = histogram
        .as_ref()
        .map(|p| HistogramWriter::new(p, &histogram_ex))
        .transpose()?;
    let exp_writer = exp
        .as_ref()
        .map(|p| ExpWriter::new(p, &exp_ex))
        .transpose()?;

    envelope.write(w, |w, row| {
        let metric = w.begin_sized(2, 2);
        w.bytes_field(1, name.get(row).unwrap_or("").as_bytes());
        w.bytes_field(2, description.get(row).unwrap_or("").as_bytes());
        w.bytes_field(3, unit.get(row).unwrap_or("").as_bytes());
        let id = ids[row];
        let kind = metric_type.get(row).unwrap_or(metric_type::EMPTY);
        let field = match kind {
            metric_type::GAUGE => 5,
            metric_type::SUM => 7,
            metric_type::HISTOGRAM => 9,
            metric_type::EXPONENTIAL_HISTOGRAM => 10,
            metric_type::SUMMARY => 11,
            _ => 0,
        };
        if field != 0 {
            let data = w.begin(field);
            match kind {
                metric_type::GAUGE | metric_type::SUM => {
                    if let Some(n) = &number_writer {
                        n.points.by_metric.for_each(id, |p| n.write(w, p))?;
                    }
                }
                metric_type::HISTOGRAM => {
                    if let Some(h) = &histogram_writer {
                        h.points.by_metric.for_each(id, |p| h.write(w, p))?;
                    }
                }
                metric_type::EXPONENTIAL_HISTOGRAM => {
                    if let Some(e) = &exp_writer {
                        e.points.by_metric.for_each(id, |p| e.write(w, p))?;
                    }
                }
                _ => {
                    if let Some(s) = &summary_writer {
                        s.points.by_metric.for_each(id, |p| s.write(w, p))?;
                    }
                }
            }
            if kind != metric_type::GAUGE && kind != metric_type::SUMMARY {
                w.int32_field(2, temporality.get(row).unwrap_or(0));
            }
            if kind == metric_type::SUM {
                w.varint_field(3, u64::from(monotonic.get(row).unwrap_or(false)));
            }
            w.end(data);
        }
        metadata.write(w, id)?;
        w.end(metric);
        Ok(())
    })
}

struct NumberWriter<'a> {
    points: &'a Points<'a>,
    exemplars: &'a Exemplars<'a>,
    int_value: Col<'a, Int64Array>,
    double_value: Col<'a, Float64Array>,
}

impl<'a> NumberWriter<'a> {
    fn new(points: &'a Points<'a>, exemplars: &'a Exemplars<'a>) -> Result<Self> {
        Ok(NumberWriter {
            int_value: Col::of(points.table, points.kind, INT_VALUE)?,
            double_value: points.f64(DOUBLE_VALUE)?,
            points,
            exemplars,
        })
    }

    fn write(&self, w: &mut Writer, p: usize) -> Result<()> {
        let id = self.points.ids[p];
        let m = w.begin_sized(1, 2);
        self.points.attrs.write(w, id)?;
        self.points.times(w, p);
        if let Some(i) = self.int_value.get(p) {
            w.fixed64_always(6, i as u64);
        } else if let Some(d) = self.double_value.get(p) {
            w.fixed64_always(4, d.to_bits());
        }
        self.exemplars.write(w, 5, id)?;
        self.points.flags(w, 8, p);
        w.end(m);
        Ok(())
    }
}

struct SummaryWriter<'a> {
    points: &'a Points<'a>,
    count: Col<'a, UInt64Array>,
    sum: Col<'a, Float64Array>,
    quantiles: Option<&'a ListArray>,
    q: Option<(&'a Float64Array, &'a Float64Array)>,
}

impl<'a> SummaryWriter<'a> {
    fn new(points: &'a Points<'a>) -> Result<Self> {
        let quantiles = list_col(points.table, points.kind, QUANTILE)?;
        let q = match quantiles.map(|l| l.values().as_struct_opt()) {
            None => None,
            Some(Some(s)) => Some((float_child(s, QUANTILE)?, float_child(s, VALUE)?)),
            Some(None) => {
                return Err(Error::schema(
                    points.kind,
                    "quantile should be a list of structs",
                ));
            }
        };
        Ok(SummaryWriter {
            count: points.u64(COUNT)?,
            sum: points.f64(SUM)?,
            quantiles,
            q,
            points,
        })
    }

    fn write(&self, w: &mut Writer, p: usize) -> Result<()> {
        let m = w.begin_sized(1, 2);
        self.points.attrs.write(w, self.points.ids[p])?;
        self.points.times(w, p);
        w.fixed64_field(4, self.count.get(p).unwrap_or(0));
        w.fixed64_field(5, self.sum.get(p).unwrap_or(0.0).to_bits());
        if let (Some(list), Some((quantile, value))) = (self.quantiles, self.q)
            && list.is_valid(p)
        {
            let offsets = list.value_offsets();
            for i in offsets[p] as usize..offsets[p + 1] as usize {
                let v = w.begin(6);
                w.fixed64_field(1, quantile.value(i).to_bits());
                w.fixed64_field(2, value.value(i).to_bits());
                w.end(v);
            }
        }
        self.points.flags(w, 8, p);
        w.end(m);
        Ok(())
    }
}

fn float_child<'a>(s: &'a StructArray, name: &str) -> Result<&'a Float64Array> {
    s.column_by_name(name)
        .and_then(|c| c.as_primitive_opt::<Float64Type>())
        .ok_or_else(|| {
            Error::schema(
                PayloadType::SummaryDataPoints,
                format!("quantile.{name} should be Float64"),
            )
        })
}

struct HistogramWriter<'a> {
    points: &'a Points<'a>,
    exemplars: &'a Exemplars<'a>,
    count: Col<'a, UInt64Array>,
    sum: Col<'a, Float64Array>,
    min: Col<'a, Float64Array>,
    max: Col<'a, Float64Array>,
    buckets: Option<&'a ListArray>,
    bounds: Option<&'a ListArray>,
}

impl<'a> HistogramWriter<'a> {
    fn new(points: &'a Points<'a>, exemplars: &'a Exemplars<'a>) -> Result<Self> {
        Ok(HistogramWriter {
            count: points.u64(COUNT)?,
            sum: points.f64(SUM)?,
            min: points.f64(MIN)?,
            max: points.f64(MAX)?,
            buckets: list_col(points.table, points.kind, BUCKET_COUNTS)?,
            bounds: list_col(points.table, points.kind, EXPLICIT_BOUNDS)?,
            points,
            exemplars,
        })
    }

    fn write(&self, w: &mut Writer, p: usize) -> Result<()> {
        let id = self.points.ids[p];
        let m = w.begin_sized(1, 2);
        self.points.attrs.write(w, id)?;
        self.points.times(w, p);
        w.fixed64_field(4, self.count.get(p).unwrap_or(0));
        write_optional_double(w, 5, self.sum.get(p));
        write_packed_fixed64(
            w,
            6,
            list_values::<UInt64Type>(self.buckets, p).iter().copied(),
        );
        write_packed_fixed64(
            w,
            7,
            list_values::<Float64Type>(self.bounds, p)
                .iter()
                .map(|f| f.to_bits()),
        );
        self.exemplars.write(w, 8, id)?;
        self.points.flags(w, 10, p);
        write_optional_double(w, 11, self.min.get(p));
        write_optional_double(w, 12, self.max.get(p));
        w.end(m);
        Ok(())
    }
}

struct Buckets<'a> {
    valid: Option<&'a StructArray>,
    offset: Col<'a, Int32Array>,
    counts: Option<&'a ListArray>,
}

impl<'a> Buckets<'a> {
    fn new(points: &'a Points<'a>, name: &str) -> Result<Self> {
        let s = struct_col(points.table, points.kind, name)?;
        let counts = match s.and_then(|s| s.column_by_name(BUCKET_COUNTS)) {
            None => None,
            Some(c) => Some(c.as_list_opt::<i32>().ok_or_else(|| {
                Error::schema(
                    points.kind,
                    format!("{name}.bucket_counts should be a list"),
                )
            })?),
        };
        Ok(Buckets {
            valid: s,
            offset: Col::child(s, points.kind, OFFSET)?,
            counts,
        })
    }

    fn write(&self, w: &mut Writer, field: u32, p: usize) {
        if !self.valid.is_some_and(|s| s.is_valid(p)) {
            return;
        }
        let b = w.begin(field);
        w.sint32_field(1, self.offset.get(p).unwrap_or(0));
        let counts = list_values::<UInt64Type>(self.counts, p);
        if !counts.is_empty() {
            let n = w.begin_sized(2, 2);
            for c in counts {
                w.varint(*c);
            }
            w.end(n);
        }
        w.end(b);
    }
}

struct ExpWriter<'a> {
    points: &'a Points<'a>,
    exemplars: &'a Exemplars<'a>,
    count: Col<'a, UInt64Array>,
    sum: Col<'a, Float64Array>,
    scale: Col<'a, Int32Array>,
    zero_count: Col<'a, UInt64Array>,
    positive: Buckets<'a>,
    negative: Buckets<'a>,
    min: Col<'a, Float64Array>,
    max: Col<'a, Float64Array>,
    zero_threshold: Col<'a, Float64Array>,
}

impl<'a> ExpWriter<'a> {
    fn new(points: &'a Points<'a>, exemplars: &'a Exemplars<'a>) -> Result<Self> {
        Ok(ExpWriter {
            count: points.u64(COUNT)?,
            sum: points.f64(SUM)?,
            scale: Col::of(points.table, points.kind, SCALE)?,
            zero_count: points.u64(ZERO_COUNT)?,
            positive: Buckets::new(points, POSITIVE)?,
            negative: Buckets::new(points, NEGATIVE)?,
            min: points.f64(MIN)?,
            max: points.f64(MAX)?,
            zero_threshold: points.f64(ZERO_THRESHOLD)?,
            points,
            exemplars,
        })
    }

    fn write(&self, w: &mut Writer, p: usize) -> Result<()> {
        let id = self.points.ids[p];
        let m = w.begin_sized(1, 2);
        self.points.attrs.write(w, id)?;
        self.points.times(w, p);
        w.fixed64_field(4, self.count.get(p).unwrap_or(0));
        write_optional_double(w, 5, self.sum.get(p));
        w.sint32_field(6, self.scale.get(p).unwrap_or(0));
        w.fixed64_field(7, self.zero_count.get(p).unwrap_or(0));
        self.positive.write(w, 8, p);
        self.negative.write(w, 9, p);
        self.points.flags(w, 10, p);
        self.exemplars.write(w, 11, id)?;
        write_optional_double(w, 12, self.min.get(p));
        write_optional_double(w, 13, self.max.get(p));
        w.fixed64_field(14, self.zero_threshold.get(p).unwrap_or(0.0).to_bits());
        w.end(m);
        Ok(())
    }
}
